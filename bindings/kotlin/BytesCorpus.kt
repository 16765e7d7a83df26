// The shared hostile-bytes corpus (tests/bytes/corpus.txt) run through Kotlin's
// runtime: every vector decodes, through the model `keel codegen kotlin` made of
// tests/bytes/corpus.fbs (package corpus), to exactly the verdict Rust and Swift
// reach (`accept:` and the decoded value in the corpus's canonical form, or
// `reject:` and the error kind). Any disagreement fails the test, listed.
// Registered by KeelTest.kt's main (`registerCorpusTests`).

import dev.keel.ffi.KeelException
import dev.keel.get
import dev.keel.fetch
import dev.keel.write
import java.io.File
import corpus.Item as CItem
import corpus.Leaf as CLeaf
import corpus.Node as CNode
import corpus.Root as CRoot

fun registerCorpusTests() {
    test("bytes corpus: Kotlin reaches every verdict of the shared corpus") {
        val path = System.getenv("KEEL_BYTES_CORPUS") ?: error("KEEL_BYTES_CORPUS is not set")
        val wrong = ArrayList<String>()
        var n = 0
        for (line in File(path).readLines()) {
            if (line.isEmpty() || line.startsWith("#")) continue
            val parts = line.split('\t')
            check(parts.size == 3) { "malformed corpus line: ${line.take(80)}" }
            val got = corpusVerdict(unhex(parts[2]))
            if (got != parts[1]) wrong.add("${parts[0]}: want ${parts[1]}, got $got")
            n++
        }
        check(n > 500) { "the corpus has $n vectors" }
        check(wrong.isEmpty()) { "Kotlin disagrees with the corpus on ${wrong.size} vectors:\n" + wrong.joinToString("\n") }
    }

    test("bytes corpus: a row damaged by stock SQL is a typed decode error") { dir ->
        var db = blogDb(dir, "damaged.db")
        db.write { insert(blog.Post(id = "d", title = "QQQQ is the title")) }
        db.closeAsync()
        damageTitleWithStockSql(File(dir, "damaged.db").path)
        db = blogDb(dir, "damaged.db")
        for (read in listOf<() -> Any?>({ db.get(blog.Post, "d") }, { db.fetch(blog.Post).all() })) {
            try {
                read()
                error("a damaged row decoded")
            } catch (e: KeelException.InvalidObject) {
                check("UTF-8" in (e.message ?: "")) { "${e.message}" }
            }
        }
        db.closeAsync()
    }

    test("bytes corpus: one verdict on bytes on the read path too (blog.Post rows rewritten by another tool)") {
        val corpus = System.getenv("KEEL_BYTES_CORPUS") ?: error("KEEL_BYTES_CORPUS is not set")
        val wrong = ArrayList<String>()
        var n = 0
        for (line in File(File(corpus).parentFile, "post_read_path.txt").readLines()) {
            if (line.isEmpty() || line.startsWith("#")) continue
            val parts = line.split('\t')
            val got = try {
                blog.Post.decode(unhex(parts[2]))
                "accept"
            } catch (e: KeelException.InvalidObject) {
                "reject"
            }
            if (got != parts[1]) wrong.add("${parts[0]}: want ${parts[1]}, got $got")
            n++
        }
        check(n >= 20) { "the read-path corpus has $n cases" }
        check(wrong.isEmpty()) { "Kotlin disagrees on ${wrong.size} read-path cases:\n" + wrong.joinToString("\n") }
    }

    test("bytes corpus: -0.0 in a float = 0 field survives encoding") {
        val back = CRoot.decode(CRoot(id = "z", f = -0.0f, d = -0.0).encode())
        check(back.f.toRawBits() == (-0.0f).toRawBits()) { "f read back as ${back.f}" }
        check(back.d.toRawBits() == (-0.0).toRawBits()) { "d read back as ${back.d}" }
    }
}

/**
 * Sets the first byte of "QQQQ" in the one `blog.Post` row that holds it to 0xFF
 * (not UTF-8), with a plain SQL UPDATE from another process (Python's sqlite3), as
 * a stock SQLite tool would.
 */
fun damageTitleWithStockSql(path: String) {
    val script = """
import sqlite3, sys
c = sqlite3.connect(sys.argv[1])
n = 0
for rowid, body in c.execute('SELECT rowid, body FROM "blog.Post"').fetchall():
    i = body.find(b"QQQQ")
    if i >= 0:
        b = bytearray(body); b[i] = 0xFF
        c.execute('UPDATE "blog.Post" SET body = ? WHERE rowid = ?', (bytes(b), rowid)); n += 1
c.commit()
sys.exit(0 if n == 1 else 1)
"""
    val p = ProcessBuilder("python3", "-c", script, path).inheritIO().start()
    check(p.waitFor() == 0) { "the stock-SQL update failed" }
}

fun corpusVerdict(bytes: ByteArray): String = try {
    "accept:" + dumpRoot(CRoot.decode(bytes))
} catch (e: KeelException.InvalidObject) {
    val m = e.message ?: ""
    when {
        "nested deeper" in m -> "reject:too_deep"
        "decode budget" in m -> "reject:budget"
        "required field" in m -> "reject:missing_field"
        else -> "reject:malformed"
    }
} catch (e: Throwable) {
    "reject:other($e)"
}

fun unhex(s: String): ByteArray = ByteArray(s.length / 2) { i ->
    ((Character.digit(s[2 * i], 16) shl 4) or Character.digit(s[2 * i + 1], 16)).toByte()
}

fun q(s: String?): String {
    if (s == null) return "null"
    val o = StringBuilder("\"")
    var i = 0
    while (i < s.length) {
        val cp = s.codePointAt(i)
        i += Character.charCount(cp)
        when {
            cp == '"'.code -> o.append("\\\"")
            cp == '\\'.code -> o.append("\\\\")
            cp in 0x20..0x7e -> o.appendCodePoint(cp)
            else -> o.append("\\u{").append(Integer.toHexString(cp)).append('}')
        }
    }
    return o.append('"').toString()
}

fun dumpLeaf(l: CLeaf): String = "{name=${q(l.name)};n=${l.n}}"

fun dumpMember(i: CItem): String = when (i) {
    is CItem.Leaf -> "Leaf" + dumpLeaf(i.value)
    is CItem.Other -> "Other{x=${i.value.x}}"
    is CItem.Unknown -> "unknown(${i.tag})"
}

fun dumpNode(n: CNode?): String = if (n == null) "null" else "{left=${dumpNode(n.left)};right=${dumpNode(n.right)}}"

fun dumpRoot(r: CRoot): String = buildString {
    append("id=").append(q(r.id))
    append(";f=").append(String.format("%08x", r.f.toRawBits()))
    append(";d=").append(String.format("%016x", r.d.toRawBits()))
    append(";n=${r.n};big=${r.big};name=${q(r.name)}")
    append(";tags=[").append(r.tags.joinToString(",") { q(it) }).append(']')
    append(";nums=[").append(r.nums.joinToString(",")).append(']')
    append(";leaf=").append(r.leaf?.let(::dumpLeaf) ?: "null")
    append(";item=").append(r.item?.let(::dumpMember) ?: "none")
    append(";items=[").append(r.items.joinToString(",", transform = ::dumpMember)).append(']')
    append(";node=").append(dumpNode(r.node))
    append(";leaves=[").append(r.leaves.joinToString(",", transform = ::dumpLeaf)).append(']')
}
