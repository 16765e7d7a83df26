// keel's Kotlin/JVM binding tests, run by `cargo xtask test` (which fetches the
// Kotlin compiler, kotlinx-coroutines and JNA from Maven Central, compiles this file
// with the generated bindings, and runs it with -Djna.library.path=<dir of the cdylib>).
//
// The headline: with a simulated 2 s sync on the open barrier, `openAsync(...)`
// suspends inside runBlocking on the main thread while a ticker coroutine on that
// same thread fires every 10 ms; the largest gap between ticks stays under 50 ms.
// Then the database is written, queried, and closed; bad input raises typed
// exceptions without crashing the JVM.

import dev.keel.Keel
import dev.keel.changes
import dev.keel.objectUpdates
import dev.keel.updates
import dev.keel.ffi.*
import kotlinx.coroutines.*
import kotlinx.coroutines.flow.first
import kotlinx.coroutines.flow.take
import kotlinx.coroutines.flow.toList
import java.io.File
import java.nio.file.Files
import kotlin.system.exitProcess

const val SCHEMA = """
namespace demo;
/// A post.
table Post {
  id: string (primary);
  title: string;
  priority: int = 1 (indexed);
  score: double;
}
root_type Post;
"""

const val TICK_MS = 10L
const val MAX_GAP_MS = 50.0
const val SIMULATED_SYNC_MS = 2000L

fun post(db: Database, id: String, priority: Int = 1, title: String? = null, score: Double = 0.0): ByteArray {
    val t = if (title != null) ",\"title\":\"$title\"" else ""
    return db.encodeJson("demo.Post", "{\"id\":\"$id\",\"priority\":$priority,\"score\":$score$t}")
}

val ID = Regex("\"id\":\"([^\"]*)\"")
fun ids(db: Database, objs: List<StoredObject>): List<String> =
    objs.map { ID.find(db.decodeJson("demo.Post", it.bytes))!!.groupValues[1] }

fun check(cond: Boolean, msg: () -> String = { "check failed" }) {
    if (!cond) throw AssertionError(msg())
}

/** Runs `block` (which may suspend when called from a coroutine); it must throw E. */
inline fun <reified E : Throwable> expect(block: () -> Unit): E {
    try {
        block()
    } catch (e: Throwable) {
        if (e is E) {
            check(!e.message.isNullOrEmpty()) { "typed exception without a message" }
            return e
        }
        throw AssertionError("expected ${E::class.simpleName}, got ${e::class.qualifiedName}: ${e.message}")
    }
    throw AssertionError("expected ${E::class.simpleName}, nothing was thrown")
}

/** A database whose last run was killed (non-empty WAL): made by a child JVM. */
fun crashedDatabase(path: String) {
    val java = File(System.getProperty("java.home"), "bin/java").path
    val p = ProcessBuilder(
        java, "-cp", System.getProperty("java.class.path"),
        "-Djna.library.path=" + System.getProperty("jna.library.path"),
        "KeelTestKt", "--crash", path,
    ).inheritIO().start()
    check(p.waitFor() == 0) { "crash child failed" }
    val wal = File("$path-wal")
    check(wal.exists() && wal.length() > 0) { "the child left no WAL" }
}

fun crashChild(path: String) {
    val db = openBlocking(path, SCHEMA, OpenOptions(commitSync = SyncPolicy.Off), null)
    runBlocking {
        db.write((0 until 50).map {
            WriteOp.Insert("demo.Post", db.encodeJson("demo.Post", "{\"id\":\"old$it\",\"priority\":$it}"))
        })
    }
    Runtime.getRuntime().halt(0) // killed: no close, no checkpoint
}

class Collect : OpenProgressListener {
    val events = java.util.Collections.synchronizedList(mutableListOf<OpenProgress>())
    val threads = java.util.Collections.synchronizedSet(mutableSetOf<Long>())
    override fun onProgress(progress: OpenProgress) {
        threads.add(Thread.currentThread().id)
        events.add(progress)
    }
}

/** write, query, subscribe (the callback gets the change), dictionary, close. */
suspend fun scenarioAfterOpen(db: Database, caller: Thread) {
    // Listeners run on keel threads; they hand values to the coroutine through channels.
    val updates = kotlinx.coroutines.channels.Channel<Pair<QueryUpdate, Thread>>(kotlinx.coroutines.channels.Channel.UNLIMITED)
    val sub = db.query("demo.Post").filter(Expr.ge("priority", Value.Integer(100))).orderBy("priority", true)
        .subscribe(object : QueryListener {
            override fun onUpdate(update: QueryUpdate) {
                updates.trySend(update to Thread.currentThread())
            }
        })
    val (first, firstThread) = withTimeout(5000) { updates.receive() }
    check(first.objects.isEmpty() && firstThread === caller) { "first result: on the subscribing thread" }
    val events = kotlinx.coroutines.channels.Channel<ObjectEvent>(kotlinx.coroutines.channels.Channel.UNLIMITED)
    val osub = db.subscribeObject("demo.Post", listOf(Value.Text("old3")), object : ObjectListener {
        override fun onEvent(event: ObjectEvent) {
            events.trySend(event)
        }
    })
    check(withTimeout(5000) { events.receive() } is ObjectEvent.Updated)
    db.write(listOf(
        WriteOp.Insert("demo.Post", post(db, "hot", 500, title = "breaking")),
        WriteOp.Upsert("demo.Post", post(db, "old3", 3, title = "edited")),
    ))
    val (u, t) = withTimeout(5000) { updates.receive() }
    check(ids(db, u.objects) == listOf("hot") && u.diff.inserted == listOf(0uL)) { "$u" }
    check(t !== caller) { "later deliveries come from keel's writer thread" }
    val e = withTimeout(5000) { events.receive() }
    check(e is ObjectEvent.Updated && "edited" in db.decodeJson("demo.Post", e.current.bytes))
    check(ids(db, db.query("demo.Post").orderBy("priority", true).limit(2uL).all()) == listOf("hot", "old49"))
    sub.cancel()
    check(!sub.isActive())
    db.write(listOf(WriteOp.Delete("demo.Post", listOf(Value.Text("old3")))))
    check(withTimeout(5000) { events.receive() } is ObjectEvent.Deleted && !osub.isActive())
    db.write(listOf(WriteOp.Insert("demo.Post", post(db, "hot2", 900))))
    delay(50)
    check(updates.tryReceive().isFailure) { "a cancelled subscription was called" }
    // dictionary
    val d = db.dictionary()
    val changes = kotlinx.coroutines.channels.Channel<DictValue?>(kotlinx.coroutines.channels.Channel.UNLIMITED)
    val dsub = d.subscribe("theme", object : DictionaryListener {
        override fun onChange(key: String, value: DictValue?) {
            changes.trySend(value)
        }
    })
    d.setString("theme", "dark")
    d.setInt("launches", 3)
    d.setBool("onboarded", true)
    d.setDouble("volume", 0.5)
    d.set("last_post", DictValue.Object("Post", post(db, "hot")))
    check(d.getString("theme") == "dark" && d.getInt("launches") == 3L && d.getBool("onboarded") == true)
    check(d.getDouble("volume") == 0.5 && (d.get("last_post") as DictValue.Object).collection == "demo.Post")
    check(d.keys() == listOf("last_post", "launches", "onboarded", "theme", "volume")) { "${d.keys()}" }
    expect<KeelException.TypeMismatch> { d.getInt("theme") }
    expect<KeelException.InvalidObject> { d.set("bad", DictValue.Object("demo.Post", byteArrayOf(1, 2))) }
    d.remove("volume")
    check(!d.contains("volume"))
    d.sync()
    withTimeout(5000) { while ((changes.receive() as? DictValue.Text)?.v != "dark") { } }
    dsub.cancel()
    // close, reopen: the dictionary and the objects were persisted
    val path = db.path()
    db.closeAsync()
    val again = openAsync(path, SCHEMA, OpenOptions(), null)
    check(again.dictionary().getString("theme") == "dark" && again.count("demo.Post") == 51uL)
    again.closeAsync()
}

val tests = mutableListOf<Pair<String, suspend CoroutineScope.(File) -> Unit>>()
fun test(name: String, body: suspend CoroutineScope.(File) -> Unit) { tests.add(name to body) }

fun registerTests() {
    test("openAsync never blocks the calling thread") { dir ->
        val path = File(dir, "slow.db").path
        crashedDatabase(path)
        // Warm-up, outside the measured window: the first call loads the native
        // library through JNA and the JVM loads and JIT-compiles the binding classes
        // (~100-400 ms, once per process; apps pay it at their first keel call and
        // can do it on a background thread). What is measured is the open itself.
        checkSchema(SCHEMA)
        openAsync(File(dir, "warm.db").path, SCHEMA, OpenOptions(commitSync = SyncPolicy.Off), Collect()).closeAsync()
        val caller = Thread.currentThread()
        val gaps = mutableListOf<Double>()
        val at = mutableListOf<Long>()
        val ticker = launch {
            var last = System.nanoTime()
            while (isActive) {
                delay(TICK_MS)
                check(Thread.currentThread() === caller) { "ticker left the calling thread" }
                val now = System.nanoTime()
                gaps.add((now - last) / 1e6)
                at.add(now)
                last = now
            }
        }
        delay(50)
        gaps.clear()
        val progress = Collect()
        val t0 = System.nanoTime()
        val db = openAsync(
            path, SCHEMA,
            OpenOptions(openBarrierSync = SyncPolicy.SimulatedLatency(SIMULATED_SYNC_MS.toULong())),
            progress,
        )
        val elapsed = (System.nanoTime() - t0) / 1e6
        delay(30)
        ticker.cancelAndJoin()
        val maxGap = gaps.maxOrNull() ?: Double.MAX_VALUE
        if (System.getenv("KEEL_DEBUG_GAPS") != null) {
            val top = gaps.indices.sortedByDescending { gaps[it] }.take(5)
            println("    top gaps: " + top.joinToString { "%.1f ms ending at %+.0f ms".format(gaps[it], (at[it] - t0) / 1e6) })
        }
        println("    openAsync took ${"%.0f".format(elapsed)} ms, ${gaps.size} ticks")
        println("max tick gap: ${"%.1f".format(maxGap)} ms")
        check(elapsed >= SIMULATED_SYNC_MS * 0.95) { "the simulated sync did not run ($elapsed ms)" }
        check(maxGap < MAX_GAP_MS) { "calling thread blocked: max tick gap $maxGap ms" }
        check(gaps.size > 100) { "ticker starved: ${gaps.size} ticks" }
        check(progress.events.any { it.phase == OpenPhase.SYNC_WAL }) { "no sync_wal progress" }
        check(progress.events.last().done && progress.events.last().fraction == 1.0f)
        check(caller.id !in progress.threads) { "progress ran on the calling thread" }
        val report = db.openReport()
        val syncWal = report.phases.first { it.phase == OpenPhase.SYNC_WAL }
        check(syncWal.durationMs >= SIMULATED_SYNC_MS * 0.95) { report.text }
        check(report.walBytesAtOpen > 0uL && !report.created)
        check(db.count("demo.Post") == 50uL) { "the killed run's commits are missing" }
        scenarioAfterOpen(db, caller)
    }

    test("write, query, get and close") { dir ->
        val db = openAsync(File(dir, "crud.db").path, SCHEMA, OpenOptions(commitSync = SyncPolicy.Off), null)
        check(db.collections() == listOf("demo.Post"))
        val res = db.write((0 until 10).map { WriteOp.Insert("demo.Post", post(db, "p$it", it, score = it / 2.0)) })
        check(res.size == 10 && res.all { it is WriteResult.Written })
        val q = db.query("demo.Post").filter(Expr.ge("priority", Value.Integer(5))).orderBy("priority", true).limit(3uL)
        check(ids(db, q.all()) == listOf("p9", "p8", "p7"))
        check(ids(db, q.allAsync()) == listOf("p9", "p8", "p7"))
        check(q.count() == 3uL && q.countAsync() == 3uL)
        val both = Expr.allOf(listOf(Expr.gt("score", Value.Real(1.0)), Expr.isIn("id", listOf(Value.Text("p1"), Value.Text("p4")))))
        check(ids(db, db.query("Post").filter(both).all()) == listOf("p4"))
        val either = Expr.eq("id", Value.Text("p1")).orElse(Expr.eq("id", Value.Text("p2")))
        check(db.query("Post").filter(either).count() == 2uL)
        check(ids(db, listOfNotNull(db.query("Post").orderBy("priority", false).first())) == listOf("p0"))
        val got = db.get("demo.Post", listOf(Value.Text("p3")))
        check(got != null && db.getAsync("demo.Post", listOf(Value.Text("p3")))!!.contentEquals(got))
        check(db.get("demo.Post", listOf(Value.Text("zz"))) == null)
        val r2 = db.write(listOf(
            WriteOp.Update("demo.Post", post(db, "p3", 100, title = "hello")),
            WriteOp.Upsert("demo.Post", post(db, "new", 7)),
            WriteOp.Delete("demo.Post", listOf(Value.Text("p0"))),
        ))
        check(r2[2] == WriteResult.Deleted(true))
        check(db.count("demo.Post") == 10uL && db.countAsync("demo.Post") == 10uL)
        check(ids(db, db.query("Post").filter(Expr.eq("title", Value.Text("hello"))).all()) == listOf("p3"))
        check(!db.checkpoint().busy)
        check(db.onBackground().walBytesAfter == 0uL)
        check(db.ioStats().wal.writes > 0uL)
        check("sync_wal" in db.openReport().text)
        db.closeAsync()
        check(db.isClosed())
        expect<KeelException.Closed> { db.get("Post", listOf(Value.Text("p1"))) }
        expect<KeelException.Closed> { db.write(listOf(WriteOp.Delete("Post", listOf(Value.Text("p1"))))) }
    }

    test("malformed schema is a typed exception") { dir ->
        for (bad in listOf("table { oops", "table T { id: nosuchtype; } root_type T;", "root_type Nowhere;")) {
            val e = expect<KeelException.InvalidSchema> { openAsync(File(dir, "bad.db").path, bad, OpenOptions(), null) }
            check("schema" in e.message!!)
        }
        expect<KeelException.InvalidSchema> { checkSchema("table T { id: int (primary) ") }
    }

    test("malformed FlatBuffers bytes are a typed exception") { dir ->
        val db = openAsync(File(dir, "bytes.db").path, SCHEMA, OpenOptions(commitSync = SyncPolicy.Off), null)
        val rng = java.util.Random(7)
        var rejected = 0
        val samples = mutableListOf(byteArrayOf(), byteArrayOf(1, 2, 3), ByteArray(64) { -1 })
        repeat(200) { samples.add(ByteArray(1 + rng.nextInt(200)).also { b -> rng.nextBytes(b) }) }
        for (s in samples) {
            try {
                db.write(listOf(WriteOp.Upsert("demo.Post", s)))
            } catch (e: KeelException.InvalidObject) {
                rejected++
            } catch (e: KeelException.TypeMismatch) {
                rejected++
            }
        }
        check(rejected == samples.size) { "only $rejected of ${samples.size} rejected" }
        expect<KeelException.InvalidObject> { db.decodeJson("demo.Post", byteArrayOf(0)) }
        expect<KeelException.InvalidArgument> { db.encodeJson("demo.Post", "{not json") }
        expect<KeelException.InvalidObject> {
            db.write(listOf(WriteOp.Insert("demo.Post", post(db, "a")), WriteOp.Insert("demo.Post", byteArrayOf(9))))
        }
        check(db.get("demo.Post", listOf(Value.Text("a"))) == null) { "a failed batch left a write behind" }
        db.closeAsync()
    }

    test("unknown collection is a typed exception") { dir ->
        val db = openAsync(File(dir, "coll.db").path, SCHEMA, OpenOptions(), null)
        expect<KeelException.UnknownCollection> { db.get("demo.Nope", listOf(Value.Text("x"))) }
        expect<KeelException.UnknownCollection> { db.getAsync("Nope", listOf(Value.Text("x"))) }
        expect<KeelException.UnknownCollection> { db.query("Nope").all() }
        expect<KeelException.UnknownCollection> { db.write(listOf(WriteOp.Insert("Nope", post(db, "x")))) }
        db.closeAsync()
    }

    test("wrong value type is a typed exception") { dir ->
        val db = openAsync(File(dir, "types.db").path, SCHEMA, OpenOptions(), null)
        expect<KeelException.TypeMismatch> { db.get("demo.Post", listOf(Value.Integer(1))) }
        expect<KeelException.TypeMismatch> { db.write(listOf(WriteOp.Delete("demo.Post", listOf(Value.Real(1.5))))) }
        val e = expect<KeelException.TypeMismatch> { db.query("Post").filter(Expr.gt("priority", Value.Text("high"))).all() }
        check("priority" in e.message!!)
        expect<KeelException.TypeMismatch> { db.query("Post").filter(Expr.eq("title", Value.Null)).count() }
        expect<KeelException.UnknownField> { db.query("Post").filter(Expr.eq("nope", Value.Integer(3))).count() }
        expect<KeelException.TypeMismatch> { db.query("Post").filter(Expr.lt("score", Value.Blob(byteArrayOf(1)))).allAsync() }
        db.closeAsync()
    }

    test("duplicate key and missing object are typed exceptions") { dir ->
        val db = openAsync(File(dir, "dup.db").path, SCHEMA, OpenOptions(commitSync = SyncPolicy.Off), null)
        db.write(listOf(WriteOp.Insert("demo.Post", post(db, "a"))))
        expect<KeelException.AlreadyExists> { db.write(listOf(WriteOp.Insert("demo.Post", post(db, "a")))) }
        expect<KeelException.NotFound> { db.write(listOf(WriteOp.Update("demo.Post", post(db, "zz")))) }
        db.closeAsync()
    }

    test("thin layer: open progress and subscriptions as Flows") { dir ->
        val opening = Keel.open(File(dir, "flow.db").path, SCHEMA, OpenOptions(commitSync = SyncPolicy.Off), this)
        val progress = opening.progress.toList()
        check(progress.isNotEmpty() && progress.last().done) { "$progress" }
        val db = opening.database.await()
        val q = db.query("demo.Post").orderBy("priority", false)
        val got = async { q.updates().take(2).toList() }
        val theme = async { db.dictionary().changes("theme").first { it != null } }
        delay(200) // let the collectors start (each flow subscribes in its own coroutine)
        db.write(listOf(WriteOp.Insert("demo.Post", post(db, "f1", 1))))
        db.dictionary().setString("theme", "light")
        val updates = withTimeout(5000) { got.await() }
        check(updates[0].objects.isEmpty() && ids(db, updates[1].objects) == listOf("f1")) { "$updates" }
        val obj = async { db.objectUpdates("demo.Post", listOf(Value.Text("f1"))).toList() }
        delay(200)
        db.write(listOf(WriteOp.Delete("demo.Post", listOf(Value.Text("f1")))))
        val events = withTimeout(5000) { obj.await() }
        check(events.first() is ObjectEvent.Updated && events.last() is ObjectEvent.Deleted) { "$events" }
        check((withTimeout(5000) { theme.await() } as DictValue.Text).v == "light")
        check(Keel.openAsync(File(dir, "flow2.db").path, SCHEMA).also { it.closeAsync() }.isClosed())
        db.closeAsync()
    }

    test("a throwing progress listener is contained") { dir ->
        val boom = object : OpenProgressListener {
            override fun onProgress(progress: OpenProgress) {
                throw IllegalStateException("listener bug")
            }
        }
        val db = openAsync(File(dir, "boom.db").path, SCHEMA, OpenOptions(), boom)
        check(db.count("demo.Post") == 0uL)
        db.closeAsync()
    }
}

fun main(args: Array<String>) {
    if (args.size == 2 && args[0] == "--crash") {
        crashChild(args[1])
        return
    }
    registerTests()
    val only = args.toSet()
    val selected = if (only.isEmpty()) tests else tests.filter { it.first in only }
    println("kotlin bindings: running ${selected.size} tests on ${System.getProperty("java.vm.name")} ${System.getProperty("java.version")}")
    var passed = 0
    var failed = 0
    // Everything runs inside runBlocking on the main thread: the "calling thread".
    runBlocking {
        for ((name, body) in selected) {
            val dir = Files.createTempDirectory("keel-kt-").toFile()
            val t0 = System.nanoTime()
            try {
                // Its own scope: a failing test cancels the coroutines it started.
                withTimeout(120_000) { coroutineScope { body(dir) } }
                passed++
                println("  ok   $name (${(System.nanoTime() - t0) / 1_000_000} ms)")
            } catch (e: Throwable) {
                failed++
                println("  FAIL $name")
                e.printStackTrace(System.out)
            } finally {
                dir.deleteRecursively()
            }
        }
    }
    println("kotlin bindings: $passed passed, $failed failed")
    System.out.flush()
    exitProcess(if (failed == 0) 0 else 1)
}
