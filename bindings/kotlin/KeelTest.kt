// keel's Kotlin/JVM binding tests, run by `cargo xtask test` (which fetches the
// Kotlin compiler, kotlinx-coroutines and JNA from Maven Central, compiles this file
// with the generated bindings, and runs it with -Djna.library.path=<dir of the cdylib>).
//
// The headline: with a simulated 2 s sync on the open barrier, `openAsync(...)`
// (readable within milliseconds) and `db.durable()` (the barrier done) suspend inside
// runBlocking on the main thread while a ticker coroutine on that same thread fires
// every 10 ms; the largest gap between ticks stays under a quarter of the sync (a
// blocked caller would stall for the whole 2 s; a loaded machine stalls for far less).
// Then the database is written, queried, and closed; bad input raises typed
// exceptions without crashing the JVM.
//
// The "typed:" tests use the models `keel codegen kotlin` generated for
// examples/blog/schema/blog.fbs (package blog) and bindings/kotlin/keys.fbs
// (package keytest): data classes, FlatBuffers in pure Kotlin, compiler-checked
// queries, Flows of typed results. "typed vs bytes" prints what the typed layer costs.

import blog.*
import dev.keel.FlatBufferBuilder
import dev.keel.FlatBufferReader
import dev.keel.Keel
import dev.keel.KeelThreads
import dev.keel.changes
import dev.keel.fetch
import dev.keel.get
import dev.keel.getAsync
import dev.keel.objectUpdates
import dev.keel.updates
import dev.keel.write
import dev.keel.ffi.*
import keytest.Attachment
import keytest.Bundle
import keytest.Event
import keytest.KeysSchema
import keytest.Mark
import keytest.Note
import keytest.Level
import keytest.Score
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
const val SIMULATED_SYNC_MS = 2000L

/** The open proves the caller never waits for the sync: its largest tick gap stays under a quarter of it. */
const val NOT_BLOCKED_MS = SIMULATED_SYNC_MS / 4.0

fun post(db: Database, id: String, priority: Int = 1, title: String? = null, score: Double = 0.0): ByteArray {
    val t = if (title != null) ",\"title\":\"$title\"" else ""
    return db.encodeJson("demo.Post", "{\"id\":\"$id\",\"priority\":$priority,\"score\":$score$t}")
}

val ID = Regex("\"id\":\"([^\"]*)\"")
fun ids(db: Database, objs: List<StoredObject>): List<String> =
    objs.map { ID.find(db.decodeJson("demo.Post", it.bytes))!!.groupValues[1] }

/** This process's /proc/locks lines on the database, its -wal and its -shm. */
fun locksHeld(path: String): List<String> {
    val inodes = listOf(path, "$path-wal", "$path-shm").map { File(it) }.filter { it.exists() }
        .map { Files.getAttribute(it.toPath(), "unix:ino").toString() }.toSet()
    val pid = ProcessHandle.current().pid().toString()
    return File("/proc/locks").readLines().filter { line ->
        val f = line.split(Regex("\\s+")).filter { it.isNotEmpty() && it != "->" }
        f.size >= 6 && f[5].substringAfterLast(':') in inodes && (f[4] == pid || f[4] == "-1")
    }
}

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
        val readable = (System.nanoTime() - t0) / 1e6
        db.durable() // the barrier sync: the calling thread keeps ticking through it too
        val elapsed = (System.nanoTime() - t0) / 1e6
        delay(30)
        ticker.cancelAndJoin()
        val maxGap = gaps.maxOrNull() ?: Double.MAX_VALUE
        if (System.getenv("KEEL_DEBUG_GAPS") != null) {
            val top = gaps.indices.sortedByDescending { gaps[it] }.take(5)
            println("    top gaps: " + top.joinToString { "%.1f ms ending at %+.0f ms".format(gaps[it], (at[it] - t0) / 1e6) })
        }
        println("    readable after ${"%.0f".format(readable)} ms, durable after ${"%.0f".format(elapsed)} ms, ${gaps.size} ticks")
        println("max tick gap: ${"%.1f".format(maxGap)} ms")
        check(elapsed >= SIMULATED_SYNC_MS * 0.95) { "the simulated sync did not run ($elapsed ms)" }
        check(maxGap < NOT_BLOCKED_MS) { "calling thread blocked: max tick gap $maxGap ms" }
        check(gaps.size > 1) { "ticker never ran: ${gaps.size} ticks" }
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

    test("suspend lets go of every lock and resume picks up") { dir ->
        val path = File(dir, "suspend.db").path
        val db = openAsync(path, SCHEMA, OpenOptions(commitSync = SyncPolicy.Off), null)
        db.write(listOf(WriteOp.Insert("Post", post(db, "a", 1))))
        val updates = kotlinx.coroutines.channels.Channel<QueryUpdate>(kotlinx.coroutines.channels.Channel.UNLIMITED)
        val sub = db.query("Post").subscribe(object : QueryListener {
            override fun onUpdate(update: QueryUpdate) { updates.trySend(update) }
        })
        check(withTimeout(5000) { updates.receive() }.objects.size == 1)
        check(locksHeld(path).isNotEmpty()) { "an open database holds locks" }
        val r = db.suspend(failFast = false)
        check(r.newlySuspended && db.isSuspended())
        check(locksHeld(path).isEmpty()) { "locks after suspend: ${locksHeld(path)}" }
        // A synchronous read never blocks the calling thread while suspended ...
        expect<KeelException.Suspended> { db.count("Post") }
        // ... an async write waits for resume (the main thread keeps running).
        val pending = async { db.write(listOf(WriteOp.Insert("Post", post(db, "b", 2)))) }
        delay(100)
        check(!pending.isCompleted) { "a write completed while suspended" }
        val rr = db.resume()
        check(rr.wasSuspended && !rr.externalChanges)
        pending.await()
        check(db.count("Post") == 2uL)
        check(withTimeout(5000) { updates.receive() }.objects.size == 2) { "delivers after resume" }
        db.suspend(failFast = true)
        expect<KeelException.Suspended> { db.countAsync("Post") }
        db.resume()
        // Going to the background in one call: empty WAL, then no lock.
        val bg = db.onBackground(andSuspend = true)
        check(bg.walBytesAfter == 0uL && db.isSuspended())
        check(locksHeld(path).isEmpty())
        db.resume()
        sub.cancel()
        db.closeAsync()
    }

    test("dictionary subscribe while suspended returns at once") { dir ->
        val path = File(dir, "dsub.db").path
        val opts = OpenOptions(commitSync = SyncPolicy.Off)
        openAsync(path, SCHEMA, opts, null).apply { dictionary().setString("theme", "dark"); closeAsync() }
        for (failFast in listOf(false, true)) {
            // Reopened: the value is on disk only, so subscribing must read the file.
            val db = openAsync(path, SCHEMA, opts, null)
            db.suspend(failFast = failFast)
            // Should subscribe wait for resume, resume from another thread so that
            // the suite fails instead of hanging.
            val fired = java.util.concurrent.atomic.AtomicBoolean(false)
            val dog = java.util.Timer(true)
            dog.schedule(object : java.util.TimerTask() {
                override fun run() { fired.set(true); runBlocking { db.resume() } }
            }, 60_000)
            val values = kotlinx.coroutines.channels.Channel<Pair<DictValue?, Thread>>(kotlinx.coroutines.channels.Channel.UNLIMITED)
            // On this thread: the one that calls resume below.
            val sub = db.dictionary().subscribe("theme", object : DictionaryListener {
                override fun onChange(key: String, value: DictValue?) { values.trySend(value to Thread.currentThread()) }
            })
            dog.cancel()
            check(!fired.get()) { "subscribe waited for resume (failFast=$failFast)" }
            check(db.isSuspended())
            db.resume()
            // The stored value first (not a false "absent"), on a keel thread.
            val (first, thread) = withTimeout(5000) { values.receive() }
            check((first as? DictValue.Text)?.v == "dark") { "first delivery: $first" }
            check(thread != Thread.currentThread()) { "delivered on the subscribing thread" }
            sub.cancel()
            db.closeAsync()
        }
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

// ---- typed API: generated models (blog.fbs, keys.fbs) -------------------------------

/** Name of the benchmark test; `cargo xtask bench kotlin` runs only this one. */
const val BENCH_TEST = "typed vs bytes: 10,000 posts"
/** Unmeasured typed and bytes fetches before the benchmark's measured runs (JIT warm-up). */
const val WARM_FETCHES = 20
/** Unmeasured one-object writes of each kind before the write figures. */
const val WARM_WRITES = 200

/** A post with every field kind set. */
fun fullPost(id: String, i: Int = 0) = Post(
    id = id,
    priority = i,
    color = Color.Blue,
    title = "title $i ✓",
    author = Author(name = "Ada", age = 36),
    content = Content.Image(Image(url = "img$i.png", width = 640, height = 480)),
    pos = Vec2(1.5f, -2.25f),
    frame = Rect(Vec2(0f, 10f), Vec2(100f, 50.5f), -7),
    tags = listOf("a", "", "ü"),
    scores = listOf(1, -2, Int.MAX_VALUE, Int.MIN_VALUE),
    points = listOf(Vec2(1f, 2f), Vec2(3f, 4f)),
    attachments = listOf(Image(url = "a.png", width = 1, height = 2), Image(url = "b.png")),
    colors = listOf(Color.Red, Color.Blue, Color.Green),
    rating = 4.75,
    slug = "slug-$id",
    published = false,
    views = ULong.MAX_VALUE,
    delta = -128,
    flags = listOf<UByte>(0u, 1u, 255u),
)

/** What tests/fixtures/post_full.json says, as a Kotlin value. */
val FIXTURE_FULL = Post(
    id = "full",
    priority = 42,
    color = Color.Blue,
    title = "Everything set — ünïcødé ✓",
    author = Author(name = "Ada Lovelace", age = 36),
    content = Content.Image(Image(url = "https://example.invalid/cat.png", width = 640, height = 480)),
    pos = Vec2(1.5f, -2.25f),
    frame = Rect(origin = Vec2(0.0f, 10.0f), size = Vec2(100.0f, 50.5f), layer = -7),
    tags = listOf("intro", "rust", ""),
    scores = listOf(1, -2, 2147483647, -2147483648),
    points = listOf(Vec2(1.0f, 2.0f), Vec2(3.0f, 4.0f)),
    attachments = listOf(Image(url = "a.png", width = 1, height = 2), Image(url = "b.png")),
    colors = listOf(Color.Red, Color.Blue, Color.Green),
    rating = 4.75,
    slug = "everything-set",
    published = false,
    views = 18446744073709551615uL,
    delta = -128,
    flags = listOf<UByte>(0u, 1u, 255u),
)

/** tests/fixtures/post_video.json. */
val FIXTURE_VIDEO = Post(
    id = "video",
    title = "Defaults written explicitly",
    content = Content.Video(Video(url = "clip.mp4")),
    rating = 0.0,
)

/** A random post: each optional part present or not, so layouts and paddings vary. */
fun randomPost(rng: java.util.Random, id: String): Post {
    fun <T> maybe(v: () -> T): T? = if (rng.nextBoolean()) v() else null
    fun text() = (0 until rng.nextInt(12)).map { "aé✓z"[rng.nextInt(4)] }.joinToString("")
    return Post(
        id = id,
        priority = rng.nextInt(),
        color = Color.entries[rng.nextInt(3)],
        title = maybe { text() },
        author = maybe { Author(name = maybe { text() }, age = rng.nextInt(100)) },
        content = maybe { if (rng.nextBoolean()) Content.Image(Image(url = text(), width = rng.nextInt())) else Content.Video(Video(seconds = rng.nextFloat())) },
        pos = maybe { Vec2(rng.nextFloat(), rng.nextFloat()) },
        frame = maybe { Rect(Vec2(rng.nextFloat(), 0f), Vec2(0f, rng.nextFloat()), rng.nextInt(1000).toShort()) },
        tags = (0 until rng.nextInt(4)).map { text() },
        scores = (0 until rng.nextInt(4)).map { rng.nextInt() },
        points = (0 until rng.nextInt(3)).map { Vec2(rng.nextFloat(), rng.nextFloat()) },
        attachments = (0 until rng.nextInt(3)).map { Image(url = maybe { text() }, height = rng.nextInt()) },
        colors = (0 until rng.nextInt(4)).map { Color.entries[rng.nextInt(3)] },
        rating = maybe { rng.nextDouble() },
        slug = null,
        published = rng.nextBoolean(),
        views = rng.nextLong().toULong(),
        delta = rng.nextInt(256).toByte(),
        flags = (0 until rng.nextInt(5)).map { rng.nextInt(256).toUByte() },
    )
}

suspend fun blogDb(dir: File, name: String): Database =
    openAsync(File(dir, name).path, BlogSchema.FBS, OpenOptions(commitSync = SyncPolicy.Off), null)

fun registerTypedTests() {
    test("typed: insert, get, fetch, filter and sort") { dir ->
        val db = blogDb(dir, "typed.db")
        val posts = (0 until 10).map { i ->
            Post(
                id = "p$i",
                priority = i,
                title = if (i % 2 == 0) "t$i" else null,
                author = Author(name = if (i < 3) "Ada" else "Bob"),
                content = if (i % 3 == 0) Content.Image(Image(url = "i$i", width = i * 100)) else Content.Video(Video(url = "v$i")),
                color = if (i == 4) Color.Blue else Color.Green,
                views = if (i == 9) ULong.MAX_VALUE else i.toULong(),
            )
        }
        val res = db.write { insertAll(posts) }
        check(res.size == 10 && res.all { it is WriteResult.Written })
        check(db.get(Post, "p3") == posts[3] && db.getAsync(Post, "p3") == posts[3])
        check(db.get(Post, "nope") == null)
        val top = db.fetch(Post)
            .where((Post.priority ge 2) and Post.title.isNotNull())
            .orderBy(Post.priority.desc())
            .limit(3)
        check(top.all().map { it.id } == listOf("p8", "p6", "p4")) { "${top.all()}" }
        check(top.allAsync() == top.all() && top.count() == 3L && top.countAsync() == 3L)
        check(db.fetch(Post).where(Post.author.name eq "Ada").orderBy(Post.priority.asc()).all().map { it.id } == listOf("p0", "p1", "p2"))
        val wide = db.fetch(Post).where(Post.content.isImage() and (Post.content.image.width gt 300)).all()
        check(wide.map { it.id } == listOf("p6", "p9") && wide[0].content == Content.Image(Image(url = "i6", width = 600))) { "$wide" }
        check(db.fetch(Post).where(Post.color eq Color.Blue).first()?.id == "p4")
        check(db.fetch(Post).where(!(Post.priority lt 8)).count() == 2L)
        check(db.fetch(Post).where(Post.id isIn listOf("p1", "p5", "zz")).count() == 2L)
        check(db.fetch(Post).where(Post.views eq ULong.MAX_VALUE).first()?.id == "p9")
        check(db.fetch(Post).where(Post.title eq "t2" or (Post.priority eq 9)).orderBy(Post.priority.asc()).all().map { it.id } == listOf("p2", "p9"))
        check(db.fetch(Post).where(Post.pos.isNull()).offset(8).all().map { it.id } == listOf("p8", "p9"))
        check("priority >= 2" in top.toString()) { top.toString() }
        // one atomic batch: update, upsert, delete
        val r = db.write {
            update(posts[3].copy(title = "edited"))
            upsert(Post(id = "new", priority = 100))
            delete(Post, "p0")
        }
        check(r == WriteResult.Deleted(true)) // the body's result: its last expression
        check(db.get(Post, "p3")?.title == "edited" && db.get(Post, "p0") == null && db.fetch(Post).count() == 10L)
        check(db.fetch(Post).orderBy(Post.priority.desc()).first()?.id == "new")
        db.closeAsync()
    }

    test("typed: live query diffs as a Flow") { dir ->
        val db = blogDb(dir, "live.db")
        db.write { insert(Post(id = "a", priority = 5, title = "low")) }
        val q = db.fetch(Post).where(Post.priority ge 10).orderBy(Post.priority.desc())
        val got = async { q.updates().take(4).toList() }
        delay(200) // let the collector subscribe
        db.write { insert(Post(id = "b", priority = 20)); insert(Post(id = "c", priority = 10)) }
        db.write { upsert(Post(id = "a", priority = 15, title = "up")) }
        db.write { delete(Post, "b") }
        val us = withTimeout(5000) { got.await() }
        check(us[0].objects.isEmpty()) { "$us" }
        check(us[1].objects.map { it.id } == listOf("b", "c") && us[1].diff.inserted == listOf(0uL, 1uL)) { "${us[1]}" }
        check(us[2].objects.map { it.id } == listOf("b", "a", "c") && us[2].diff.inserted == listOf(1uL) && us[2].objects[1].title == "up") { "${us[2]}" }
        check(us[3].objects.map { it.id } == listOf("a", "c") && us[3].diff.removed == listOf(0uL)) { "${us[3]}" }
        db.closeAsync()
    }

    test("typed: object subscription ends on delete") { dir ->
        val db = blogDb(dir, "obj.db")
        db.write { insert(Post(id = "o", priority = 1)) }
        val obj = async { db.objectUpdates(Post, "o").toList() }
        delay(200)
        db.write { update(Post(id = "o", priority = 2, author = Author(name = "Ada"))) }
        db.write { delete(Post, "o") }
        val versions = withTimeout(5000) { obj.await() }
        check(versions == listOf(Post(id = "o", priority = 1), Post(id = "o", priority = 2, author = Author(name = "Ada")))) { "$versions" }
        // a missing object: the flow ends at once, empty
        check(withTimeout(5000) { db.objectUpdates(Post, "never").toList() }.isEmpty())
        db.closeAsync()
    }

    test("typed: composite and rowid keys") { dir ->
        val db = openAsync(File(dir, "keys.db").path, KeysSchema.FBS, OpenOptions(commitSync = SyncPolicy.Off), null)
        check(db.collections() == listOf("keytest.Score", "keytest.Event", "keytest.Bundle")) { "${db.collections()}" }
        // a vector of unions round-trips through keel's Rust verifier
        val items = listOf(Attachment.Note(Note(text = "a")), Attachment.Mark(Mark(n = 2)), Attachment.Note(Note(text = "b")))
        db.write { insert(Bundle(id = 1L, items = items)); insert(Bundle(id = 2L)) }
        check(db.get(Bundle, 1L)?.items == items && db.get(Bundle, 2L)?.items == emptyList<Attachment>()) { "${db.get(Bundle, 1L)}" }
        db.write {
            insert(Score("ada", 1u, points = 10uL))
            insert(Score("ada", 2u))
            insert(Score("bob", 1u, level = Level.Low, bonus = -5, tier = Level.High))
        }
        val ada2 = db.get(Score, Score.Key("ada", 2u))!!
        check(ada2 == Score("ada", 2u) && ada2.points == ULong.MAX_VALUE && ada2.level == Level.High && ada2.bonus == null) { "$ada2" }
        check(Score.keyOf(ada2) == Score.Key("ada", 2u))
        val bob = db.get(Score, Score.Key("bob", 1u))!!
        check(bob.bonus == (-5).toShort() && bob.tier == Level.High && bob.level == Level.Low)
        check(db.get(Score, Score.Key("bob", 2u)) == null)
        check(db.fetch(Score).where(Score.level eq Level.Low).first()?.player == "bob")
        check(db.fetch(Score).where(Score.round eq 2u).first()?.player == "ada")
        check(db.fetch(Score).where(Score.points eq 10uL).count() == 1L)
        check(db.fetch(Score).where(Score.tier.isNull()).count() == 2L)
        expect<KeelException.AlreadyExists> { db.write { insert(Score("ada", 1u)) } }
        db.write { delete(Score, Score.Key("ada", 1u)) }
        check(db.fetch(Score).count() == 2L)
        // rowid-keyed collection: the key is the rowid the write returned
        val rowid = (db.write { insert(Event(text = "two", at = 5L)) } as WriteResult.Written).rowid
        check(db.get(Event, rowid) == Event(text = "two", at = 5L) && Event.keyOf(Event(text = "x")) == null)
        db.write { delete(Event, rowid) }
        check(db.get(Event, rowid) == null)
        // an enum value this schema does not know (a newer one wrote it) decodes as Unknown
        val b = FlatBufferBuilder()
        val name = b.createString("zed")
        b.startTable(6)
        b.addOffset(0, name)
        b.addIntAlways(1, 3)
        b.addByteAlways(3, 7)
        val newer = Score.decode(b.finish(b.endTable(), null))
        check(newer == Score("zed", 3u, level = Level.Unknown)) { "$newer" }
        // ...and writes the number back unchanged, through copy() and the database too
        // (Kotlin once wrote an unknown value back as 0; Swift and Rust keep it)
        val again = newer.copy(bonus = 9).encode()
        check(FlatBufferReader.root(again, "keytest.Score").u8(3, 200u) == 7.toUByte())
        db.write { insert(newer.copy(round = 9u)) }
        val stored = db.get(Score, Score.Key("zed", 9u))!!
        check(stored.level == Level.Unknown && stored.keelRetained.raw(3, 0L, true) == 7L) { "$stored" }
        check(FlatBufferReader.root(stored.encode(), "keytest.Score").u8(3, 200u) == 7.toUByte())
        db.write { delete(Score, Score.Key("zed", 9u)) }
        val e = expect<KeelException.InvalidArgument> { db.fetch(Score).where(Score.level eq Level.Unknown).all() }
        check("Unknown" in e.message!!)
        db.closeAsync()
    }

    test("typed: same-named collections of two namespaces") { dir ->
        // examples/blog/schema/namespaces/ns_v1.fbs: `Item` in package shop and in warehouse
        val db = openAsync(File(dir, "ns.db").path, shop.NsV1Schema.FBS, OpenOptions(commitSync = SyncPolicy.Off), null)
        check(db.collections().sorted() == listOf("shop.Item", "warehouse.Item")) { "${db.collections()}" }
        db.write {
            insert(shop.Item(sku = "a1", price = 5))
            insert(warehouse.Item(bin = 7, sku = "a1", count = 3))
        }
        check(db.get(shop.Item, "a1") == shop.Item(sku = "a1", price = 5)) { "${db.get(shop.Item, "a1")}" }
        check(db.get(warehouse.Item, 7) == warehouse.Item(bin = 7, sku = "a1", count = 3)) { "${db.get(warehouse.Item, 7)}" }
        check(db.fetch(warehouse.Item).where(warehouse.Item.sku eq "a1").count() == 1L)
        check(db.fetch(shop.Item).where(shop.Item.price eq 5).count() == 1L)
        db.closeAsync()
    }

    test("typed: flatc fixtures decode with generated Kotlin") { dir ->
        val fx = File(System.getenv("KEEL_FIXTURES") ?: "tests/fixtures")
        val db = blogDb(dir, "fx.db")
        for ((name, expected) in listOf("post_full" to FIXTURE_FULL, "post_video" to FIXTURE_VIDEO, "post_minimal" to Post(id = "minimal"))) {
            val bin = File(fx, "$name.bin").readBytes()
            check(File(fx, "$name.json").readText().contains("id: \"${expected.id}\""))
            val got = Post.decode(bin)
            check(got == expected) { "$name.bin decoded as\n$got\nbut $name.json says\n$expected" }
            // Kotlin writes what flatc wrote: keel's Rust reader sees the same object.
            // (An empty vector flatc wrote explicitly is left out by Kotlin — a List
            // cannot tell empty from absent, and absent reads as empty — so `"x":[]`
            // is dropped from both views before comparing.)
            val again = got.encode()
            check(String(again, 4, 4) == "BLOG" && String(bin, 4, 4) == "BLOG")
            val noEmpty = Regex(""","?"[a-z_]+":\[\]""")
            val rustView = noEmpty.replace(db.decodeJson("blog.Post", bin), "")
            val kotlinView = noEmpty.replace(db.decodeJson("blog.Post", again), "")
            check(kotlinView == rustView) { "$name: Rust reads Kotlin's bytes differently:\n$kotlinView\nvs\n$rustView" }
            check(Post.decode(again) == got)
        }
        db.closeAsync()
    }

    // The behaviour table of docs/schema.md, on the vectors Rust and Swift check too
    // (tests/fixtures/behaviour, built by examples/blog/tests/behaviour.rs).
    test("typed: behaviour table (shared vectors)") { _ ->
        val fx = File(File(System.getenv("KEEL_FIXTURES") ?: "tests/fixtures"), "behaviour")
        fun vec(name: String) = File(fx, name).readBytes()
        fun root(b: ByteArray) = FlatBufferReader.root(b, "blog.Post")
        // unknown enum value: reads Unknown, written back unchanged (slot 2)
        val e = Post.decode(vec("unknown_enum.bin"))
        check(e.color == Color.Unknown) { "$e" }
        check(root(e.copy(title = "edited").encode()).i8(2, 1) == 7.toByte())
        // unknown union member: reads Unknown(tag), left out when written (slots 5, 6)
        val u = Post.decode(vec("unknown_union.bin"))
        check(u.content == Content.Unknown(9u)) { "$u" }
        check(root(u.encode()).field(6, 4) < 0 && root(u.encode()).field(5, 1) < 0)
        // empty and absent vectors read alike (empty), and are written as absent (slot 9)
        val empty = Post.decode(vec("empty_vector.bin"))
        val absent = Post.decode(vec("absent_vector.bin"))
        check(empty.tags.isEmpty() && absent.tags.isEmpty())
        check(root(vec("empty_vector.bin")).field(9, 4) >= 0 && root(vec("absent_vector.bin")).field(9, 4) < 0)
        check(root(empty.encode()).field(9, 4) < 0)
        // -0.0 keeps its sign (slot 14)
        val z = Post.decode(vec("negative_zero.bin"))
        check(z.rating!!.toRawBits() == (-0.0).toRawBits()) { "$z" }
        check(root(z.encode()).f64OrNull(14)!!.toRawBits() == (-0.0).toRawBits())
        // a newer schema's field (slot 30) is read past and not written back
        val n = Post.decode(vec("newer_field.bin"))
        check(n.id == "newer" && root(vec("newer_field.bin")).i32(30, 0) == 5)
        check(root(n.encode()).field(30, 4) < 0)
    }

    test("typed: Kotlin-built bytes pass keel's Rust verifier") { dir ->
        val db = blogDb(dir, "verify.db")
        val p = fullPost("k1", 7)
        db.write { insert(p) } // verified against the schema by keel's Rust side before it is stored
        check(db.get(Post, "k1") == p)
        val json = db.decodeJson("blog.Post", p.encode())
        for (part in listOf("title 7 ✓", "18446744073709551615", "img7.png", "slug-k1", "-128")) check(part in json) { "$part not in $json" }
        // and the other way: bytes keel's Rust side builds from that JSON decode to the same object
        check(Post.decode(db.encodeJson("blog.Post", json)) == p)
        // random objects: varied layouts, each verified by Rust and read back equal
        val rng = java.util.Random(42)
        val many = (0 until 300).map { randomPost(rng, "r$it") }
        db.write { insertAll(many) }
        val back = db.fetch(Post).where(Post.id ne "k1").all().associateBy { it.id }
        for (m in many) check(back[m.id] == m) { "round trip changed\n$m\ninto\n${back[m.id]}" }
        db.closeAsync()
    }

    test("typed: an encoded object ends with its key string") { _ ->
        // What keel's storage relies on: the key string's length word, bytes and NUL
        // are the last thing in the buffer but for at most 3 bytes of zero padding.
        fun endsWithString(b: ByteArray, key: String): Boolean {
            val k = key.toByteArray(Charsets.UTF_8)
            return (0..3).any { pad ->
                val at = b.size - pad - 1 - k.size - 4
                at >= 0 && (0 until pad).all { b[b.size - 1 - it] == 0.toByte() } && b[b.size - pad - 1] == 0.toByte() &&
                    java.nio.ByteBuffer.wrap(b, at, 4).order(java.nio.ByteOrder.LITTLE_ENDIAN).int == k.size &&
                    k.indices.all { b[at + 4 + it] == k[it] }
            }
        }
        for (i in 0 until 50) {
            val p = fullPost("key-$i-é".repeat(1 + i % 3), i)
            check(endsWithString(p.encode(), p.id)) { "${p.id} does not end its bytes" }
        }
        val s = Score(player = "ada", round = 3u, bonus = 2)
        check(endsWithString(s.encode(), "ada"))
    }

    test("typed: strings decode exactly: ASCII fast path, strict UTF-8 otherwise") { _ ->
        // An 8-byte title whose bytes are swapped for each case below, in place.
        val good = Post(id = "s", title = "@@@@@@@@").encode()
        val at = (0..good.size - 8).first { i -> (0 until 8).all { good[i + it] == '@'.code.toByte() } }
        val strict = Charsets.UTF_8.newDecoder()
            .onMalformedInput(java.nio.charset.CodingErrorAction.REPORT)
            .onUnmappableCharacter(java.nio.charset.CodingErrorAction.REPORT)
        // What the title must decode to: the strict decoder's text, or null when it rejects the bytes.
        fun expected(b: ByteArray): String? = try {
            strict.decode(java.nio.ByteBuffer.wrap(b)).toString()
        } catch (e: java.nio.charset.CharacterCodingException) {
            null
        }
        fun decodeWith(title: ByteArray): String? {
            val b = good.copyOf()
            title.copyInto(b, at)
            return try { Post.decode(b).title } catch (e: KeelException.InvalidObject) { null }
        }
        fun hex(vararg v: Int) = v.map { it.toByte() }.toByteArray()
        fun pad(b: ByteArray) = b + ByteArray(8 - b.size) { 'a'.code.toByte() }
        val cases = listOf(
            pad(hex()), // ASCII
            pad(hex(0x80)), // a lone continuation byte: as many chars as bytes once replaced
            ByteArray(8) { 0x80.toByte() }, ByteArray(8) { 0xff.toByte() },
            pad(hex(0xc3, 0xa9)), pad(hex(0xef, 0xbf, 0xbd)), // é, and a real U+FFFD
            pad(hex(0xf0, 0x9f, 0x98, 0x80)), pad(hex(0xf4, 0x8f, 0xbf, 0xbf)), // U+1F600, U+10FFFF
            pad(hex(0xc0, 0x80)), pad(hex(0xc1, 0xbf)), pad(hex(0xe0, 0x80, 0x80)), pad(hex(0xf0, 0x80, 0x80, 0x80)), // overlong
            pad(hex(0xed, 0xa0, 0x80)), pad(hex(0xed, 0xbf, 0xbf)), // surrogates
            pad(hex(0xf4, 0x90, 0x80, 0x80)), pad(hex(0xf5, 0x80, 0x80, 0x80)), // above U+10FFFF
            hex(0x61, 0x61, 0x61, 0x61, 0x61, 0x61, 0xe2, 0x82), hex(0x61, 0x61, 0x61, 0x61, 0x61, 0x61, 0x61, 0xc3), // cut short at the end
            pad(hex(0xe2, 0x28, 0xa1)), pad(hex(0xc3, 0x28)), // bad continuation
        )
        for (c in cases) {
            val want = expected(c)
            check(decodeWith(c) == want) { "title bytes ${c.joinToString(" ") { "%02x".format(it) }}: decoded ${decodeWith(c)}, expected $want" }
        }
        check(decodeWith(pad(hex(0xc3, 0xa9))) == "éaaaaaa")
        check(decodeWith(pad(hex(0x80))) == null && decodeWith(pad(hex(0xed, 0xa0, 0x80))) == null)
        // Random titles: ASCII, encoded code points of every length and stray bytes
        // from UTF-8's edge cases, cut to 8 bytes (which also cuts sequences short).
        val rng = java.util.Random(7)
        val stray = hex(0x80, 0x8f, 0x90, 0x9f, 0xa0, 0xbf, 0xc0, 0xc1, 0xc2, 0xdf, 0xe0, 0xed, 0xef, 0xf0, 0xf4, 0xf5, 0xff)
        val limits = intArrayOf(0x80, 0x800, 0x10000, 0x110000)
        var valid = 0
        repeat(20_000) {
            val out = java.io.ByteArrayOutputStream()
            while (out.size() < 8) {
                when (rng.nextInt(5)) {
                    0, 1 -> out.write(rng.nextInt(0x80))
                    2, 3 -> {
                        val cp = rng.nextInt(limits[rng.nextInt(4)])
                        if (cp !in 0xd800..0xdfff) out.write(String(Character.toChars(cp)).toByteArray(Charsets.UTF_8))
                    }
                    else -> out.write(stray[rng.nextInt(stray.size)].toInt())
                }
            }
            val c = out.toByteArray().copyOf(8)
            val want = expected(c)
            if (want != null) valid++
            check(decodeWith(c) == want) { "title bytes ${c.joinToString(" ") { "%02x".format(it) }}: decoded ${decodeWith(c)}, expected $want" }
        }
        check(valid in 2_000..18_000) { "$valid of 20000 random titles were valid UTF-8: the sample says little about accepting or rejecting" }
        // The terminator after the string's bytes is checked too.
        check(decodeWith(pad(hex())) != null)
        val unterminated = good.copyOf().also { it[at + 8] = 'x'.code.toByte() }
        expect<KeelException.InvalidObject> { Post.decode(unterminated) }
        println("    ${cases.size} edge cases and 20000 random titles ($valid valid) decode as a strict UTF-8 decoder says")
    }

    test("typed: malformed bytes and misuse are typed exceptions") { dir ->
        val good = fullPost("m", 1).encode()
        val rng = java.util.Random(11)
        val samples = mutableListOf(byteArrayOf(), byteArrayOf(1, 2, 3), ByteArray(64) { -1 }, ByteArray(64))
        repeat(300) { samples.add(ByteArray(1 + rng.nextInt(300)).also { b -> rng.nextBytes(b) }) }
        var rejected = 0
        for (s in samples) {
            try {
                Post.decode(s)
            } catch (e: KeelException.InvalidObject) {
                rejected++
            }
        }
        check(rejected == samples.size) { "only $rejected of ${samples.size} rejected" }
        // every truncation is rejected, except cutting only the builder's trailing
        // alignment padding (the object is then intact and decodes unchanged)
        val original = Post.decode(good)
        var truncRejected = 0
        for (cut in 0 until good.size) {
            try {
                check(Post.decode(good.copyOf(cut)) == original && cut >= good.size - 3) { "truncated at $cut of ${good.size}, yet decoded" }
            } catch (e: KeelException.InvalidObject) {
                truncRejected++
            }
        }
        check(truncRejected >= good.size - 3)
        // flipped bytes: each either decodes or is InvalidObject; nothing else escapes
        var flippedOk = 0
        repeat(2000) {
            val b = good.copyOf()
            b[rng.nextInt(b.size)] = rng.nextInt(256).toByte()
            try { Post.decode(b); flippedOk++ } catch (e: KeelException.InvalidObject) { }
        }
        println("    ${samples.size} malformed and $truncRejected truncated buffers rejected; ${2000 - flippedOk} of 2000 single-byte corruptions rejected, the rest decoded")
        val db = blogDb(dir, "bad.db")
        db.write { insert(Post(id = "a")) }
        expect<KeelException.AlreadyExists> { db.write { insert(Post(id = "b")); insert(Post(id = "a")) } }
        check(db.get(Post, "b") == null) { "a failed batch left a write behind" }
        expect<KeelException.NotFound> { db.write { update(Post(id = "zz")) } }
        expect<KeelException.AlreadyExists> { db.write { insert(Post(id = "s1", slug = "x")); insert(Post(id = "s2", slug = "x")) } }
        db.closeAsync()
        expect<KeelException.Closed> { db.get(Post, "a") }
    }

    test(BENCH_TEST) { dir ->
        val n = System.getenv("KEEL_BENCH_N")?.toInt() ?: 10_000
        val posts = (0 until n).map { i ->
            Post(
                id = "post-$i", priority = i % 100, title = "Post number $i", color = Color.entries[i % 3],
                author = Author(name = "Author ${i % 50}", age = 20 + i % 40),
                content = Content.Image(Image(url = "https://example.invalid/$i.png", width = 640, height = 480)),
                pos = Vec2(i.toFloat(), 2f), tags = listOf("news", "t${i % 7}"), scores = listOf(i, i + 1),
                slug = "post-$i", views = i.toULong(),
            )
        }
        val ops = posts.map { WriteOp.Insert(Post.COLLECTION, it.encode()) } // the pre-built bytes
        fun ms(t0: Long) = (System.nanoTime() - t0) / 1e6
        var round = 0
        suspend fun fresh() = blogDb(dir, "bench${round++}.db")
        // Several alternating runs after a full-size warm-up (JIT, native library,
        // statement caches) that is not measured; the figures are medians. The Swift
        // suite's benchmark measures the same posts the same way.
        val runs = System.getenv("KEEL_BENCH_RUNS")?.toInt() ?: 8
        val insTypedAll = mutableListOf<Double>()
        val insBytesAll = mutableListOf<Double>()
        val fetchTypedAll = mutableListOf<Double>()
        val fetchBytesAll = mutableListOf<Double>()
        for (r in -1 until runs) {
            val a = fresh()
            var t = System.nanoTime()
            a.write { insertAll(posts) }
            val ti = ms(t)
            a.closeAsync()
            val b = fresh()
            t = System.nanoTime()
            b.write(ops)
            val bi = ms(t)
            // Both fetches read the same database, after an unmeasured one that loads
            // its pages into the reader's cache; which goes first alternates.
            b.query(Post.COLLECTION).all()
            if (r < 0) {
                // The JVM compiles the decoder with its optimising compiler only after
                // thousands of calls; measure the compiled code, as on a phone, where
                // ART compiles an app's hot code ahead of time (an app's first fetches
                // of a run are slower, in both paths).
                repeat(WARM_FETCHES) { b.fetch(Post).all(); b.query(Post.COLLECTION).all() }
            }
            var typed: List<Post> = emptyList()
            var raw: List<StoredObject> = emptyList()
            var tf = 0.0
            var bf = 0.0
            for (doTyped in if (r % 2 == 0) listOf(true, false) else listOf(false, true)) {
                t = System.nanoTime()
                if (doTyped) {
                    typed = b.fetch(Post).all()
                    tf = ms(t)
                } else {
                    raw = b.query(Post.COLLECTION).all()
                    bf = ms(t)
                }
            }
            check(typed.size == n && raw.size == n && typed[n - 1] == Post.decode(raw[n - 1].bytes))
            b.closeAsync()
            File(dir, "bench${round - 2}.db").delete()
            File(dir, "bench${round - 1}.db").delete()
            if (r < 0) continue
            insTypedAll += ti
            insBytesAll += bi
            fetchTypedAll += tf
            fetchBytesAll += bf
        }
        fun median(xs: List<Double>): Double {
            val s = xs.sorted()
            return if (s.size % 2 == 1) s[s.size / 2] else (s[s.size / 2 - 1] + s[s.size / 2]) / 2
        }
        val insTyped = median(insTypedAll)
        val insBytes = median(insBytesAll)
        val fetchTyped = median(fetchTypedAll)
        val fetchBytes = median(fetchBytesAll)
        val insRatio = insTyped / insBytes
        val fetchRatio = fetchTyped / fetchBytes

        // One-object writes, as the writer's caller sees them (until `write`
        // returns), on a database holding 1,000 of the posts. First the write
        // transaction's callback (`writeTxn`, what `db.write { … }` runs) against
        // the recorded-ops path (`write(ops)`), with the same pre-built bytes and
        // alternating; then the recorded write with 1,000 live queries open against
        // none. Medians over `writes` writes each; the Swift benchmark does the same.
        val writes = if (n >= 10_000) 400 else 100
        class OneOp(val op: WriteOp) : WriteBody {
            override fun run(txn: Txn) { txn.write(op) }
        }
        val c = fresh()
        c.write(ops.take(1_000))
        val extra = (0 until writes * 3 + 2 * WARM_WRITES).map { i ->
            WriteOp.Insert(Post.COLLECTION, Post(id = "w-$i", priority = i % 100, title = "write $i", slug = "w-$i").encode())
        }
        var next = 0
        fun op() = extra[next++]
        repeat(WARM_WRITES) { c.write(listOf(op())); c.writeTxn(OneOp(op())) } // warm-up, as above
        val viaOps = mutableListOf<Double>()
        val viaCallback = mutableListOf<Double>()
        for (i in 0 until writes) {
            for (callback in if (i % 2 == 0) listOf(true, false) else listOf(false, true)) {
                val o = op()
                val t = System.nanoTime()
                if (callback) {
                    c.writeTxn(OneOp(o))
                    viaCallback += ms(t)
                } else {
                    c.write(listOf(o))
                    viaOps += ms(t)
                }
            }
        }
        // Listeners that only take the delivery, as a collector's buffer does.
        val live = (0 until 1_000).map { i ->
            c.fetch(Post).where(Post.priority eq i % 100).orderBy(Post.title.asc()).limit(10).query
                .subscribe(object : QueryListener { override fun onUpdate(update: QueryUpdate) {} })
        }
        check(c.liveSubscriptions() == 1_000uL) { "${c.liveSubscriptions()} live subscriptions" }
        val withLive = mutableListOf<Double>()
        repeat(writes) {
            val o = op()
            val t = System.nanoTime()
            c.write(listOf(o))
            withLive += ms(t)
        }
        live.forEach { it.cancel() }
        c.closeAsync()
        // An author renamed with 1,000 live lists across the relation open (RelationsTest.kt).
        val rel = relationsRenameBench(dir, if (n >= 10_000) 200 else 50)
        val renamePlain = rel.getValue("rename_plain_ms")
        val renameLive = rel.getValue("rename_live1000_ms")
        val renameDeliveries = rel.getValue("rename_deliveries")
        val renamePerList = rel.getValue("rename_live1000_per_list_ms")
        val renameBare = rel.getValue("rename_live1000_bare_sink_ms")
        // The core's figure for the same rename with the same lists (benches/relations.rs
        // `live_rename_ms`: Rust listeners, a write transaction), from the last
        // `cargo xtask bench relations` run next to this output: another process, run
        // at another moment. Null when that run is missing.
        val coreRename = System.getenv("KEEL_BENCH_OUT")?.let { File(it).parentFile?.resolve("relations.json") }
            ?.takeIf { it.exists() }?.readText()
            ?.let { Regex("\"live_rename_ms\"\\s*:\\s*([0-9.eE+-]+)").find(it)?.groupValues?.get(1)?.toDoubleOrNull() }
        val coreRatio = coreRename?.let { renameLive / it }
        val wCallback = median(viaCallback)
        val wOps = median(viaOps)
        val wLive = median(withLive)
        val callbackRatio = wCallback / wOps
        val liveRatio = wLive / wOps
        println("    kotlin typed vs bytes: $n posts, median of $runs runs after a $WARM_FETCHES-fetch warm-up, commit sync off (typed = Kotlin encode/decode + the same FFI call)")
        println("    insert typed ${"%.1f".format(insTyped)} ms vs pre-built bytes ${"%.1f".format(insBytes)} ms: ratio ${"%.2f".format(insRatio)} (goal <= 1.5)")
        println("    fetch all typed ${"%.1f".format(fetchTyped)} ms vs bytes ${"%.1f".format(fetchBytes)} ms: ratio ${"%.2f".format(fetchRatio)} (goal <= 1.5)")
        println("    1-object write: transaction callback ${"%.3f".format(wCallback)} ms vs recorded ops ${"%.3f".format(wOps)} ms: ratio ${"%.2f".format(callbackRatio)} (goal <= 1.3)")
        println("    1-object write with 1,000 live queries open ${"%.3f".format(wLive)} ms vs none ${"%.3f".format(wOps)} ms: ratio ${"%.2f".format(liveRatio)}")
        println("    author rename with 1,000 live lists across the relation open ${"%.3f".format(renameLive)} ms batched, ${"%.3f".format(renamePerList)} ms with a listener per list ($renameDeliveries deliveries) vs none ${"%.3f".format(renamePlain)} ms")
        println("    ... vs the core's live_rename_ms " + (coreRename?.let { "${"%.3f".format(it)} ms (target/keel-bench/relations.json): ratio ${"%.2f".format(coreRatio)} (goal <= 2)" } ?: "(no target/keel-bench/relations.json: run `cargo xtask bench relations` first)"))
        System.getenv("KEEL_BENCH_OUT")?.let { out ->
            val f = File(out)
            f.parentFile?.mkdirs()
            // The machine may be shared: say how busy it was (2 cores here).
            val load = File("/proc/loadavg").takeIf { it.exists() }?.readText()?.split(" ")?.firstOrNull()?.toDoubleOrNull() ?: -1.0
            val cores = Runtime.getRuntime().availableProcessors()
            val jvm = "${System.getProperty("java.vm.name")} ${System.getProperty("java.version")}" +
                (if (java.lang.management.ManagementFactory.getRuntimeMXBean().inputArguments.any { "TieredStopAtLevel=1" in it }) ", C1 only" else ", C1+C2")
            f.writeText(
                """{"scenario": "kotlin",
                | "summary": "Kotlin (JVM: $jvm) with generated blog models, $n posts, median of $runs runs after a warm-up ($WARM_FETCHES unmeasured fetches of each kind, so the JIT has compiled both paths), commit sync off: the typed API (data classes encoded and decoded in Kotlin by the generated code) against the same FFI calls with pre-built FlatBuffers bytes. Each run alternates which fetch goes first, after an unmeasured fetch. Goal: typed at most 1.5x the bytes path. Then one-object writes on a database of 1,000 posts, timed until `write` returns after $WARM_WRITES unmeasured writes of each kind: the write-transaction callback against the recorded-ops path (goal at most 1.3x), and a write with 1,000 live queries open against none. Written by bindings/kotlin/KeelTest.kt.",
                | "metrics": {"insert_typed_ratio": $insRatio, "fetch_typed_ratio": $fetchRatio,
                |   "insert_typed_ms": $insTyped, "insert_bytes_ms": $insBytes, "fetch_typed_ms": $fetchTyped, "fetch_bytes_ms": $fetchBytes, "posts": $n, "runs": $runs, "load_average_1m": $load, "cores": $cores,
                |   "writes": $writes, "write_callback_ms": $wCallback, "write_ops_ms": $wOps, "write_callback_ratio": $callbackRatio,
                |   "write_live1000_ms": $wLive, "write_live1000_ratio": $liveRatio,
                |   "rename_plain_ms": $renamePlain, "rename_live1000_ms": $renameLive, "rename_live1000_ratio": ${renameLive / renamePlain}, "rename_deliveries": $renameDeliveries,
                |   "rename_live1000_per_list_ms": $renamePerList, "rename_live1000_bare_sink_ms": $renameBare${coreRename?.let { ", \"core_live_rename_ms\": $it, \"rename_vs_core_ratio\": $coreRatio" } ?: ""}},
                | "labels": {"insert_typed_ratio": "insert typed vs bytes", "fetch_typed_ratio": "fetch all typed vs bytes",
                |   "write_callback_ratio": "1-object write: txn callback vs recorded ops", "write_live1000_ratio": "1-object write: 1,000 live queries vs none",
                |   "rename_vs_core_ratio": "author rename, 1,000 live lists: Kotlin (batched) vs the core"},
                | "notes": {"insert_typed_ratio": "time of db.write { insertAll(posts) } / db.write(pre-built WriteOps)",
                |   "fetch_typed_ratio": "time of db.fetch(Post).all() / db.query(\"blog.Post\").all()",
                |   "insert_typed_ms": "typed insert of all posts in one transaction (ms)", "insert_bytes_ms": "the same with bytes encoded beforehand (ms)",
                |   "fetch_typed_ms": "fetch every post as Post (ms)", "fetch_bytes_ms": "fetch every post as bytes (ms)", "posts": "posts per run",
                |   "runs": "measured runs (after the warm-up); figures are medians",
                |   "load_average_1m": "1-minute load average when the run ended: above `cores` other processes competed for the CPU and the figures are noisy", "cores": "CPU cores",
                |   "writes": "one-object writes per write figure (medians), on a database of 1,000 posts",
                |   "write_callback_ms": "writeTxn(body) whose callback writes one pre-built object: what db.write { … } runs (ms, until it returns)",
                |   "write_ops_ms": "write(ops) of one pre-built object, the recorded-ops path (ms, until it returns)",
                |   "write_callback_ratio": "transaction callback / recorded ops, one-object write (goal <= 1.3)",
                |   "write_live1000_ms": "write(ops) of one object with 1,000 live queries open (10 of them affected), writer-side: until it returns (ms)",
                |   "write_live1000_ratio": "one-object write with 1,000 live queries open / with none",
                |   "rename_plain_ms": "write(ops) renaming one of 100 authors of 1,000 posts, no live list open (ms, until it returns)",
                |   "rename_live1000_ms": "the same rename with 1,000 live lists across the relation open (posts in a window of 10 ranks with their authors), delivered through the layer's batched sink as including(…).updates() is: one JNA call per commit",
                |   "rename_live1000_per_list_ms": "the same with a listener per list (subscribeIncluding): one JNA call per affected list",
                |   "rename_live1000_bare_sink_ms": "the same lists through a sink of their own whose listener takes each batch and does nothing: keel and JNA without the layer's dispatch",
                |   "core_live_rename_ms": "benches/relations.rs live_rename_ms, the core's rename with the same 1,000 lists (Rust listeners, a write transaction), read from target/keel-bench/relations.json: another process, the last `cargo xtask bench relations` run",
                |   "rename_vs_core_ratio": "rename_live1000_ms / core_live_rename_ms (goal <= 2); it includes Kotlin's own write(ops) round trip (rename_plain_ms)",
                |   "rename_live1000_ratio": "rename with 1,000 live lists open / with none",
                |   "rename_deliveries": "lists each rename delivered to (those showing the author)"}}
                |""".trimMargin()
            )
            println("    wrote $out")
        }
    }
}

fun main(args: Array<String>) {
    if (args.size == 2 && args[0] == "--crash") {
        crashChild(args[1])
        return
    }
    if (args.size == 2 && args[0] == "--first-open") {
        firstOpenChild(args[1]) // AndroidTest.kt: no keel call may come before it
        return
    }
    if (args.size == 2 && args[0] == "--rename-bench") {
        // The relations rename benchmark alone, with N renames per variant: for a
        // profiler attached to this JVM (`perf record`), without the rest of the suite.
        KeelThreads.keepAttached()
        val dir = Files.createTempDirectory("keel-kt-").toFile()
        println(runBlocking { relationsRenameBench(dir, args[1].toInt()) })
        return
    }
    // What an app's first call, `Keel.openAsync`, does before the library loads
    // (the tests below also call the generated functions directly).
    KeelThreads.keepAttached()
    registerTests()
    registerTypedTests()
    registerCorpusTests() // BytesCorpus.kt
    registerTxnTests()
    registerSearchTests() // SearchTest.kt
    registerSyncTests() // SyncTest.kt
    registerObservationTests() // ObservationTest.kt
    registerVectorTests() // VectorTest.kt
    registerRelationsTests() // RelationsTest.kt
    registerAndroidTests() // AndroidTest.kt
    registerKeyTests() // KeyTest.kt
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
