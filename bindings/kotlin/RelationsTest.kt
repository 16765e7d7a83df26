// Typed relations from Kotlin, compiled and run with
// KeelTest.kt: `including` through the generated relation handles of
// examples/blog/schema/relations.fbs (package rel) gives each post its author
// (null for an absent or dangling reference), a filter through the reference
// keeps the posts whose author matches, and the live form delivers a
// row-level `updated` diff when only an author is renamed. Real database files.

import dev.keel.KeelDeliveries
import dev.keel.applyTo
import dev.keel.fetch
import dev.keel.including
import dev.keel.whereThrough
import dev.keel.write
import dev.keel.ffi.BatchListener
import dev.keel.ffi.Database
import dev.keel.ffi.DeliveryBatch
import dev.keel.ffi.Diff
import dev.keel.ffi.IncludingListener
import dev.keel.ffi.IncludingUpdate
import dev.keel.ffi.KeelException
import dev.keel.ffi.Move
import dev.keel.ffi.OpenOptions
import dev.keel.ffi.SyncPolicy
import dev.keel.ffi.WriteOp
import dev.keel.ffi.openAsync
import kotlinx.coroutines.channels.Channel
import kotlinx.coroutines.launch
import kotlinx.coroutines.withTimeout
import rel.Author
import rel.Post
import rel.Tag
import rel.RelationsSchema
import java.io.File

suspend fun relDb(dir: File, name: String): Database =
    openAsync(File(dir, name).path, RelationsSchema.FBS, OpenOptions(commitSync = SyncPolicy.Off), null)

fun registerRelationsTests() {
    test("relations: typed including gives each post its author, null when absent or dangling") { dir ->
        val db = relDb(dir, "including.db")
        db.write {
            insert(Author(id = "ada", name = "Ada"))
            insert(Author(id = "bob", name = "Bob"))
            insert(Post(id = "p1", title = "One", author = "ada", rank = 1))
            insert(Post(id = "p2", title = "Two", author = "bob", rank = 2))
            insert(Post(id = "p3", title = "Three", author = "ghost", rank = 3))
            insert(Post(id = "p4", title = "Four", rank = 4))
        }
        val rows: List<Pair<Post, Author?>> =
            db.fetch(Post).orderBy(Post.rank.asc()).including(Post.authorRef).all()
        check(rows.map { it.first.id } == listOf("p1", "p2", "p3", "p4")) { "$rows" }
        check(rows.map { it.second?.id } == listOf("ada", "bob", null, null)) { "$rows" }
        check(rows[0].second == Author(id = "ada", name = "Ada"))
        // The query's filter and limit are kept.
        val bobs = db.fetch(Post).where(Post.author eq "bob").limit(1).including(Post.authorRef).all()
        check(bobs.map { (p, a) -> p.id to a?.name } == listOf("p2" to "Bob")) { "$bobs" }
        // Another relation of the same type (editor): every one absent.
        check(db.fetch(Post).including(Post.editorRef).all().all { it.second == null })
        // Filter through the reference: the posts whose author matches.
        val byAda = db.fetch(Post).whereThrough(Post.authorRef, Author.name eq "Ada").orderBy(Post.rank.asc()).all()
        check(byAda.map { it.id } == listOf("p1")) { "$byAda" }
        val either = db.fetch(Post).whereThrough(Post.authorRef, (Author.name eq "Ada") or (Author.name eq "Bob"))
            .orderBy(Post.rank.desc()).including(Post.authorRef).all()
        check(either.map { it.second?.name } == listOf("Bob", "Ada")) { "$either" }
        check(db.fetch(Post).whereThrough(Post.authorRef, Author.name eq "Cy").count() == 0L)
        // Inside a write transaction: a typed error, not a read outside it.
        db.write { expect<KeelException.InvalidArgument> { fetch(Post).including(Post.authorRef).all() } }
        db.closeAsync()
    }

    test("relations: a live list including authors updates on an author rename with the right diff") { dir ->
        val db = relDb(dir, "live.db")
        db.write {
            insert(Author(id = "ada", name = "Ada"))
            insert(Author(id = "bob", name = "Bob"))
            insert(Post(id = "p1", author = "ada", rank = 1))
            insert(Post(id = "p2", author = "bob", rank = 2))
            insert(Post(id = "p3", author = "ada", rank = 3))
        }
        val got = Channel<dev.keel.IncludingUpdate<Post, Author?>>(Channel.UNLIMITED)
        val job = launch {
            db.fetch(Post).orderBy(Post.rank.asc()).including(Post.authorRef).updates().collect { got.send(it) }
        }
        val first = withTimeout(10_000) { got.receive() }
        check(first.diff.inserted == listOf(0UL, 1UL, 2UL)) { "${first.diff}" }
        check(first.objects.map { it.second?.name } == listOf("Ada", "Bob", "Ada"))

        // Only the author changes: the posts naming her are updated, in place.
        db.write { update(Author(id = "ada", name = "Ada Lovelace")) }
        val renamed = withTimeout(10_000) { got.receive() }
        check(renamed.diff.updated == listOf(0UL, 2UL)) { "${renamed.diff}" }
        check(renamed.diff.inserted.isEmpty() && renamed.diff.removed.isEmpty()) { "${renamed.diff}" }
        check(renamed.diff.moved == emptyList<Move>()) { "${renamed.diff}" }
        check(renamed.objects.map { it.first.id } == listOf("p1", "p2", "p3"))
        check(renamed.objects.map { it.second?.name } == listOf("Ada Lovelace", "Bob", "Ada Lovelace")) {
            "${renamed.objects}"
        }

        // A new post: inserted where the order puts it, with its author.
        db.write { insert(Post(id = "p0", author = "bob", rank = 0)) }
        val inserted = withTimeout(10_000) { got.receive() }
        check(inserted.diff.inserted == listOf(0UL)) { "${inserted.diff}" }
        check(inserted.objects.first().second?.name == "Bob")

        // An unrelated author: nothing delivered.
        db.write { insert(Author(id = "cy", name = "Cy")) }
        check(got.tryReceive().getOrNull() == null)
        job.cancel()
        db.closeAsync()
    }

    test("relations: a live list follows another handle's rename (shareChanges)") { dir ->
        // A second handle on the file, as another process (a widget, a sync
        // service) would be: its commits reach the list once keel's feed has
        // caught up with them.
        val options = OpenOptions(commitSync = SyncPolicy.Off, shareChanges = true)
        val path = File(dir, "shared.db").path
        val app = openAsync(path, RelationsSchema.FBS, options, null)
        val widget = openAsync(path, RelationsSchema.FBS, options, null)
        app.write {
            insert(Author(id = "ada", name = "Ada"))
            insert(Post(id = "p1", author = "ada", rank = 1))
        }
        val got = Channel<dev.keel.IncludingUpdate<Post, Author?>>(Channel.UNLIMITED)
        val job = launch { app.fetch(Post).including(Post.authorRef).updates().collect { got.send(it) } }
        val first = withTimeout(10_000) { got.receive() }
        check(first.objects.map { it.second?.name } == listOf("Ada")) { "${first.objects}" }
        widget.write { update(Author(id = "ada", name = "Ada L.")) }
        val renamed = withTimeout(30_000) { got.receive() }
        check(renamed.objects.map { it.second?.name } == listOf("Ada L.")) { "${renamed.objects}" }
        check(renamed.diff.updated == listOf(0UL)) { "${renamed.diff}" }
        job.cancel()
        widget.closeAsync()
        app.closeAsync()
    }

    test("relations: a to-many reference, typed: including and a live list that follows the tags") { dir ->
        val db = relDb(dir, "tags.db")
        db.write {
            insert(Tag(id = "db", label = "DB"))
            insert(Tag(id = "rust", label = "Rust"))
            insert(Post(id = "p1", tags = listOf("rust", "db"), rank = 1))
            insert(Post(id = "p2", tags = listOf("swift"), rank = 2))
            insert(Post(id = "p3", rank = 3))
        }
        val rows: List<Pair<Post, List<Tag>>> =
            db.fetch(Post).orderBy(Post.rank.asc()).including(Post.tagsRef).all()
        check(rows.map { (_, ts) -> ts.map { it.label } } == listOf(listOf("Rust", "DB"), listOf(), listOf())) { "$rows" }
        // The count over the relation: existing tags only.
        val counts = db.fetch(Post).orderBy(Post.rank.asc()).including(Post.tagsRef).counts()
        check(counts.map { (p, n) -> p.id to n } == listOf("p1" to 2L, "p2" to 0L, "p3" to 0L)) { "$counts" }
        val got = Channel<dev.keel.IncludingUpdate<Post, List<Tag>>>(Channel.UNLIMITED)
        val job = launch {
            db.fetch(Post).orderBy(Post.rank.asc()).including(Post.tagsRef).updates().collect { got.send(it) }
        }
        val first = withTimeout(10_000) { got.receive() }
        check(first.diff.inserted == listOf(0UL, 1UL, 2UL)) { "${first.diff}" }
        // A relabel updates the post holding the tag, in the vector's order.
        db.write { update(Tag(id = "db", label = "Databases")) }
        val relabelled = withTimeout(10_000) { got.receive() }
        check(relabelled.diff.updated == listOf(0UL)) { "${relabelled.diff}" }
        check(relabelled.objects[0].second.map { it.label } == listOf("Rust", "Databases")) { "${relabelled.objects}" }
        // The tag the second post names appears: its row fills.
        db.write { insert(Tag(id = "swift", label = "Swift")) }
        val filled = withTimeout(10_000) { got.receive() }
        check(filled.diff.updated == listOf(1UL)) { "${filled.diff}" }
        check(filled.objects[1].second.map { it.id } == listOf("swift"))
        job.cancel()
        db.closeAsync()
    }

    test("relations: a live list filtered through the author follows renames") { dir ->
        val db = relDb(dir, "where.db")
        db.write {
            insert(Author(id = "a1", name = "Ada"))
            insert(Author(id = "a2", name = "Bob"))
            insert(Post(id = "p1", author = "a1", rank = 1))
            insert(Post(id = "p2", author = "a2", rank = 2))
            insert(Post(id = "p3", author = "a1", rank = 3))
        }
        val byAda = db.fetch(Post).orderBy(Post.rank.asc()).including(Post.authorRef).where(Author.name eq "Ada")
        check(byAda.all().map { it.first.id } == listOf("p1", "p3"))
        val got = Channel<dev.keel.IncludingUpdate<Post, Author?>>(Channel.UNLIMITED)
        val job = launch { byAda.updates().collect { got.send(it) } }
        withTimeout(10_000) { got.receive() }
        // Bob becomes Ada: his post comes in; the first Ada leaves: hers go.
        db.write { update(Author(id = "a2", name = "Ada")) }
        val came = withTimeout(10_000) { got.receive() }
        check(came.objects.map { it.first.id } == listOf("p1", "p2", "p3")) { "${came.objects}" }
        check(came.diff.inserted == listOf(1UL)) { "${came.diff}" }
        db.write { update(Author(id = "a1", name = "Ann")) }
        val went = withTimeout(10_000) { got.receive() }
        check(went.objects.map { it.first.id } == listOf("p2")) { "${went.objects}" }
        check(went.diff.removed == listOf(0UL, 2UL)) { "${went.diff}" }
        job.cancel()
        db.closeAsync()
    }

    test("relations: an inverse navigates back from an author to the posts naming them, live") { dir ->
        val db = relDb(dir, "inverse.db")
        db.write {
            insert(Author(id = "ada", name = "Ada"))
            insert(Author(id = "bob", name = "Bob"))
            insert(Post(id = "p1", author = "ada", rank = 1))
            insert(Post(id = "p2", author = "ada", rank = 2))
        }
        val authors = db.fetch(Author).orderBy(Author.id.asc()).including(Author.postsRef)
        val rows: List<Pair<Author, List<Post>>> = authors.all()
        check(rows.map { (_, ps) -> ps.map { it.id } } == listOf(listOf("p1", "p2"), listOf())) { "$rows" }
        check(authors.counts().map { it.second } == listOf(2L, 0L))
        val got = Channel<dev.keel.IncludingUpdate<Author, List<Post>>>(Channel.UNLIMITED)
        val job = launch { authors.updates().collect { got.send(it) } }
        withTimeout(10_000) { got.receive() }
        db.write { insert(Post(id = "p3", author = "bob", rank = 3)) }
        val next = withTimeout(10_000) { got.receive() }
        check(next.diff.updated == listOf(1UL)) { "${next.diff}" }
        check(next.objects[1].second.map { it.id } == listOf("p3"))
        job.cancel()
        db.closeAsync()
    }

    test("relations: Diff.applyTo makes the new list from the old one, moves included") {
        val old = listOf("a", "b", "c", "d", "e")
        val new = listOf("e", "b", "x", "d", "c")
        // a removed; x inserted; e and c moved (b and d keep their order); d updated.
        val d = Diff(removed = listOf(0UL), inserted = listOf(2UL), moved = listOf(Move(4UL, 0UL), Move(2UL, 4UL)), updated = listOf(3UL))
        val shown = old.toMutableList()
        val asked = mutableListOf<Int>()
        d.applyTo(shown) { i -> asked += i; new[i] }
        check(shown == new) { "$shown" }
        check(asked.sorted() == listOf(2, 3)) { "fresh rows asked for: $asked" }
        // Without moves the list is edited where it is.
        val inPlace = mutableListOf("a", "b", "c")
        Diff(removed = listOf(1UL), inserted = listOf(2UL), moved = emptyList(), updated = listOf(0UL))
            .applyTo(inPlace) { i -> listOf("A", "c", "d")[i] }
        check(inPlace == listOf("A", "c", "d")) { "$inPlace" }
    }

    test("relations: a live list applies keel's diffs and equals a fresh fetch after every write") { dir ->
        val db = relDb(dir, "applied.db")
        db.write {
            for (a in 0 until 4) insert(Author(id = "a$a", name = "A$a"))
            for (p in 0 until 12) insert(Post(id = "p$p", author = "a${p % 4}", rank = p))
        }
        val q = db.fetch(Post).where(Post.rank lt 8).orderBy(Post.rank.asc()).including(Post.authorRef)
        val feed = q.updates()
        val got = Channel<dev.keel.IncludingUpdate<Post, Author?>>(Channel.UNLIMITED)
        val job = launch { feed.collect { got.send(it) } }
        var last = withTimeout(10_000) { got.receive() }
        var received = 1
        check(last.objects == q.all())
        val rnd = java.util.Random(7)
        repeat(40) { step ->
            when (rnd.nextInt(4)) {
                0 -> db.write { update(Author(id = "a${rnd.nextInt(4)}", name = "N$step")) }
                1 -> db.write { upsert(Post(id = "p${rnd.nextInt(14)}", author = "a${rnd.nextInt(5)}", rank = rnd.nextInt(12))) }
                2 -> try {
                    db.write(listOf(WriteOp.Delete(Post.COLLECTION, listOf(dev.keel.ffi.Value.Text("p${rnd.nextInt(14)}")))))
                } catch (e: KeelException.NotFound) {
                }
                else -> db.write { upsert(Author(id = "a4", name = "Late $step")) }
            }
            // keel counts a delivery before the write returns; the Flow decodes it after.
            withTimeout(10_000) {
                while (received < feed.deliveries) {
                    last = got.receive()
                    received++
                }
            }
            val want = q.all()
            check(last.objects == want) { "step $step: ${last.objects} != $want" }
        }
        check(received > 10) { "only $received deliveries" }
        job.cancel()
        db.closeAsync()
    }
}

/**
 * The rename of `benches/relations.rs` through the FFI: 1,000 posts naming 100
 * authors, 1,000 live lists across the relation (posts in a window of 10 ranks,
 * with their authors; handlers that only take the delivery, as a collector's
 * buffer does), an author renamed with `write(ops)`, timed until it returns
 * (every affected list has its delivery by then). The lists first through the
 * layer's batched sink (what `including(…).updates()` uses: one call from keel
 * per commit), then with a listener each (one call per affected list); against
 * the same rename with no list open. Medians over [renames] renames each, after
 * 2,000 unmeasured ones (200 before the per-list variant, ten times slower).
 */
suspend fun relationsRenameBench(dir: File, renames: Int): Map<String, Double> {
    val db = relDb(dir, "rename-bench.db")
    db.write {
        for (a in 0 until 100) insert(Author(id = "author-%03d".format(a), name = "Author $a"))
        for (p in 0 until 1_000) insert(Post(id = "post-%04d".format(p), title = "Post $p", author = "author-%03d".format(p % 100), rank = p))
    }
    fun ms(t0: Long) = (System.nanoTime() - t0) / 1e6
    var i = 0
    suspend fun rename(): Double {
        i += 1
        val op = WriteOp.Update(Author.COLLECTION, Author(id = "author-007", name = "Renamed $i").encode())
        val t = System.nanoTime()
        db.write(listOf(op))
        return ms(t)
    }
    fun median(xs: List<Double>) = xs.sorted().let { if (it.size % 2 == 1) it[it.size / 2] else (it[it.size / 2 - 1] + it[it.size / 2]) / 2 }
    // Warm-ups of a few thousand renames: C2 compiles a method after about
    // 5,000 calls, so with 20 the measured renames ran partly in C1's profiled
    // code while C2 competed for the machine's cores.
    val warm = 2_000
    repeat(warm) { rename() } // warm-up: JIT, statement caches
    val plain = (0 until renames).map { rename() }
    val window = { k: Int ->
        val lo = k % 990
        db.fetch(Post).where((Post.rank ge lo) and (Post.rank lt lo + 10)).orderBy(Post.rank.asc()).query
    }
    // The lists as `including(…).updates()` subscribes them: through the
    // layer's sink, one call from keel per commit; handlers that only take
    // the delivery, as the Flow's channel does.
    val deliveries = java.util.concurrent.atomic.AtomicLong()
    val ids = (0 until 1_000).map { KeelDeliveries.register { deliveries.incrementAndGet() } }
    val batched = ids.mapIndexed { k, id -> window(k).subscribeIncludingTo("author", KeelDeliveries.sink, id.toULong()) }
    check(db.liveSubscriptions() == 1_000uL) { "${db.liveSubscriptions()} live subscriptions" }
    repeat(warm) { rename() }
    val before = deliveries.get()
    val live = (0 until renames).map { rename() }
    val perRename = (deliveries.get() - before).toDouble() / renames
    batched.forEach { it.cancel() }
    ids.forEach { KeelDeliveries.unregister(it) }
    // The same lists through a sink of their own whose listener takes the batch
    // and nothing more: what keel and JNA cost, without the layer's dispatch.
    val bare = dev.keel.ffi.deliveries(object : BatchListener {
        override fun onBatch(batch: DeliveryBatch) {}
    })
    val bareSubs = (0 until 1_000).map { k -> window(k).subscribeIncludingTo("author", bare, k.toULong()) }
    repeat(warm) { rename() }
    val liveBare = (0 until renames).map { rename() }
    bareSubs.forEach { it.cancel() }
    // The same lists with a listener each: one JNA call per affected list.
    val perList = java.util.concurrent.atomic.AtomicLong()
    val listener = object : IncludingListener {
        override fun onUpdate(update: IncludingUpdate) { perList.incrementAndGet() }
    }
    val subs = (0 until 1_000).map { k -> window(k).subscribeIncluding("author", listener) }
    check(db.liveSubscriptions() == 1_000uL) { "${db.liveSubscriptions()} live subscriptions" }
    repeat(warm / 10) { rename() }
    val perListBefore = perList.get()
    val livePerList = (0 until renames).map { rename() }
    check((perList.get() - perListBefore).toDouble() / renames == perRename) { "both paths deliver to the same lists" }
    subs.forEach { it.cancel() }
    db.closeAsync()
    return mapOf(
        "rename_plain_ms" to median(plain),
        "rename_live1000_ms" to median(live),
        "rename_live1000_per_list_ms" to median(livePerList),
        "rename_live1000_bare_sink_ms" to median(liveBare),
        "rename_deliveries" to perRename,
    )
}
