// Typed full-text search from Kotlin, compiled and run with
// KeelTest.kt: `matches` on the generated handles of bindings/swift/Tests/search.fbs
// (package searchdemo), `search`, relevance order, highlight and snippet ranges,
// malformed query text as a typed error, and a live search that equals a fresh
// search after every write.

import dev.keel.Search
import dev.keel.Txn
import dev.keel.fetch
import dev.keel.matches
import dev.keel.matchesText
import dev.keel.relevance
import dev.keel.search
import dev.keel.write
import dev.keel.ffi.*
import kotlinx.coroutines.channels.Channel
import kotlinx.coroutines.launch
import kotlinx.coroutines.withTimeout
import searchdemo.Note
import searchdemo.SearchSchema
import java.io.File

suspend fun searchDb(dir: File, name: String): Database =
    openAsync(File(dir, name).path, SearchSchema.FBS, OpenOptions(commitSync = SyncPolicy.Off), null)

fun registerSearchTests() {
    test("search: typed matches, search, relevance order, highlight and snippet") { dir ->
        val db = searchDb(dir, "search.db")
        db.write {
            insert(Note(id = "en", title = "Rust async runtimes", body = "Tokio and async-std compared", pinned = true))
            insert(Note(id = "de", title = "Größe und Maße", body = "Eine Übersicht über Einheiten"))
            insert(Note(id = "fr", title = "Crème brûlée", body = "Une recette française", tags = listOf("dessert")))
            insert(Note(id = "zh", title = "北京大学", body = "中文分词测试"))
            insert(Note(id = "ja", title = "東京タワー", body = "日本語のテキスト"))
            insert(Note(id = "ko", title = "한국어 검색", body = "대한민국"))
            insert(Note(id = "emoji", title = "Party 🎉 time", body = "rust at the party"))
        }
        fun ids(p: dev.keel.Predicate<Note>) = db.fetch(Note).where(p).all().map { it.id }.sorted()
        check(ids(Note.title matches "creme brulee") == listOf("fr")) { "${ids(Note.title matches "creme brulee")}" }
        check(ids((Note.title matches "GROSSE") or (Note.title matches "größe")) == listOf("de"))
        check(ids(Note.title matches "大学") == listOf("zh"))
        check(ids(Note.title matches "京") == listOf("ja", "zh")) { "${ids(Note.title matches "京")}" }
        check(ids(Note.title matches "검색") == listOf("ko"))
        check(ids((Note.title matches "asy*") and (Note.pinned eq true)) == listOf("en"))
        check(ids((Note.title matches "asy*") and (Note.pinned eq false)).isEmpty())
        check(ids(Note.tags matchesText "dessert") == listOf("fr"))
        check(ids(search("rust")) == listOf("emoji", "en"))
        val ranked = db.fetch(Note).where(search("rust")).orderBy(relevance()).all().map { it.id }
        check(ranked == listOf("en", "emoji")) { "$ranked" }
        val reversed = db.fetch(Note).where(search("rust")).orderBy(relevance(worstFirst = true)).all().map { it.id }
        check(reversed == listOf("emoji", "en")) { "$reversed" }
        val text = "Party 🎉 time with Crème"
        check(Search.highlight(text, "creme").map { text.substring(it) } == listOf("Crème"))
        val s = Search.snippet(text, "creme", 40)!!
        check(s.highlights.map { text.substring(it) } == listOf("Crème"))
        check(text.substring(s.passage).contains("Crème"))
        check(Search.snippet(text, "absent") == null)
        expect<KeelException.InvalidArgument> { db.fetch(Note).where(Note.title matches "\"unclosed").all() }
        db.closeAsync()
    }

    test("search: a live search in relevance order equals a fresh search after every write") { dir ->
        val db = searchDb(dir, "live.db")
        val query = db.fetch(Note).where(search("rust")).orderBy(relevance())
        val writes: List<Txn.() -> Unit> = listOf(
            { insert(Note(id = "a", body = "rust")) },
            { insert(Note(id = "b", title = "rust rust", body = "about rust")) },
            { insert(Note(id = "c", title = "nothing here")) },
            { update(Note(id = "c", title = "now rust")) },
            { delete(Note, "b") },
            { update(Note(id = "a", body = "no longer")) },
        )
        val got = Channel<List<Note>>(Channel.UNLIMITED)
        val job = launch { query.updates().collect { got.send(it.objects) } }
        // A write that leaves the result as it was delivers nothing: wait for a
        // delivery only when a fresh search differs from the last one delivered.
        var last = withTimeout(10_000) { got.receive() }
        check(last == query.all())
        for ((step, w) in writes.withIndex()) {
            db.write { w() }
            val fresh = query.all()
            if (fresh != last) last = withTimeout(10_000) { got.receive() }
            check(last == fresh) { "after write $step: live ${last.map { it.id }}, fresh ${fresh.map { it.id }}" }
        }
        job.cancel()
        db.closeAsync()
    }
}
