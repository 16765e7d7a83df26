// keel from Kotlin as an Android view model uses it, compiled and run with
// KeelTest.kt: the first keel call of a fresh process (`Keel.openAsync`) keeps
// the caller's thread ticking while the native library loads; a collecting Flow
// ends with `KeelException.Closed` when its database closes; a live Flow tells
// its subscription's state; a prefetched list ordered by the referenced object's
// field; typed objects in the dictionary; and `including` and nearest listeners
// run on keel threads that stay attached to the JVM. Real database files, a real
// child JVM for the fresh process.

import dev.keel.Keel
import dev.keel.KeelNative
import dev.keel.KeelObject
import dev.keel.LiveFlow
import dev.keel.fetch
import dev.keel.getObject
import dev.keel.including
import dev.keel.nearestUpdates
import dev.keel.onTrimMemory
import dev.keel.objectChanges
import dev.keel.objectUpdates
import dev.keel.setObject
import dev.keel.updates
import dev.keel.write
import dev.keel.ffi.Database
import dev.keel.ffi.IncludingListener
import dev.keel.ffi.IncludingUpdate
import dev.keel.ffi.KeelException
import dev.keel.ffi.NearestListener
import dev.keel.ffi.NearestUpdate
import dev.keel.ffi.OpenOptions
import dev.keel.ffi.QueryListener
import dev.keel.ffi.QueryUpdate
import dev.keel.ffi.SyncPolicy
import dev.keel.ffi.WriteOp
import dev.keel.ffi.openAsync
import kotlinx.coroutines.async
import kotlinx.coroutines.awaitAll
import kotlinx.coroutines.cancelAndJoin
import kotlinx.coroutines.channels.Channel
import kotlinx.coroutines.delay
import kotlinx.coroutines.flow.Flow
import kotlinx.coroutines.flow.toList
import kotlinx.coroutines.isActive
import kotlinx.coroutines.launch
import kotlinx.coroutines.runBlocking
import kotlinx.coroutines.withTimeout
import rel.Author
import rel.Post
import vectordemo.Photo
import vectordemo.VectorSchema
import java.io.File

/**
 * The child JVM of the first test: `Keel.openAsync` is the first keel call of this
 * process, made inside runBlocking on the main thread while a ticker on that
 * thread fires every [TICK_MS]; prints the largest gap between ticks, and the
 * largest gap of a control ticker on a thread of its own over the same window
 * (what a loaded machine or a JVM-wide pause costs every thread alike).
 */
fun firstOpenChild(path: String) = runBlocking {
    val caller = Thread.currentThread()
    val gaps = mutableListOf<Double>()
    val controlGaps = java.util.Collections.synchronizedList(mutableListOf<Double>())
    val measuring = java.util.concurrent.atomic.AtomicBoolean(false)
    val control = Thread {
        var last = System.nanoTime()
        while (!Thread.currentThread().isInterrupted) {
            try { Thread.sleep(TICK_MS) } catch (e: InterruptedException) { break }
            val now = System.nanoTime()
            if (measuring.get()) controlGaps.add((now - last) / 1e6)
            last = now
        }
    }.apply { isDaemon = true; start() }
    val ticker = launch {
        var last = System.nanoTime()
        while (isActive) {
            delay(TICK_MS)
            val now = System.nanoTime()
            gaps.add((now - last) / 1e6)
            last = now
        }
    }
    // The coroutine machinery's own classes load first, outside the window.
    delay(200)
    gaps.clear()
    measuring.set(true)
    val t0 = System.nanoTime()
    val db = Keel.openAsync(path, SCHEMA, OpenOptions(commitSync = SyncPolicy.Off))
    val opened = (System.nanoTime() - t0) / 1e6
    delay(3 * TICK_MS)
    measuring.set(false)
    ticker.cancelAndJoin()
    control.interrupt()
    println("first-open: open took ${"%.0f".format(opened)} ms, ${gaps.size} ticks")
    println("first-open control max gap: ${"%.1f".format(controlGaps.maxOrNull() ?: 0.0)} ms")
    println("first-open max tick gap: ${"%.1f".format(gaps.maxOrNull() ?: Double.MAX_VALUE)} ms")
    println("first-open loaded on the caller's thread: ${KeelNative.loadedOn === caller} (${KeelNative.loadedOn?.name})")
    db.closeAsync()
}

/** Collects [flow] until it ends: "closed" when it threw `KeelException.Closed`. */
suspend fun endOf(name: String, flow: Flow<Any?>): String = try {
    flow.collect { }
    "$name completed"
} catch (e: KeelException.Closed) {
    "closed"
}

/** Records the thread of each delivery of a raw (untyped) listener. */
class ThreadsSeen : QueryListener, IncludingListener, NearestListener {
    val threads = java.util.Collections.synchronizedList(mutableListOf<Thread>())
    override fun onUpdate(update: QueryUpdate) { threads.add(Thread.currentThread()) }
    override fun onUpdate(update: IncludingUpdate) { threads.add(Thread.currentThread()) }
    override fun onUpdate(update: NearestUpdate) { threads.add(Thread.currentThread()) }
}

fun registerAndroidTests() {
    test("android: openAsync as a fresh process's first keel call keeps the caller ticking") { dir ->
        val java = File(System.getProperty("java.home"), "bin/java").path
        val p = ProcessBuilder(
            java, "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1", "-cp", System.getProperty("java.class.path"),
            "-Djna.library.path=" + System.getProperty("jna.library.path"),
            "KeelTestKt", "--first-open", File(dir, "first.db").path,
        ).redirectErrorStream(true).start()
        val out = p.inputStream.bufferedReader().readText()
        check(p.waitFor() == 0) { "first-open child failed:\n$out" }
        out.lines().filter { it.startsWith("first-open") }.forEach { println("    $it") }
        fun figure(name: String): Double =
            Regex("first-open $name: ([0-9.]+) ms").find(out)?.groupValues?.get(1)?.toDouble()
                ?: throw AssertionError("no $name in the child's output:\n$out")
        // The proof is where the library loaded: never on the caller's thread.
        check("first-open loaded on the caller's thread: false" in out) {
            "the first openAsync loaded the native library on its caller's thread:\n$out"
        }
        // The ticks only confirm it. A loaded machine stalls every thread of the
        // child alike (the control thread shows by how much), so their bound is the
        // other open tests', on top of what the control thread lost.
        val gap = figure("max tick gap")
        val control = figure("control max gap")
        check(gap < NOT_BLOCKED_MS + control) {
            "the first openAsync blocked its caller: max tick gap $gap ms (control thread: $control ms)"
        }
    }

    test("android: a collecting Flow ends with Closed when its database closes") { dir ->
        val db = relDb(dir, "closed.db")
        db.write {
            insert(Author(id = "ada", name = "Ada"))
            insert(Post(id = "p1", title = "One", author = "ada", rank = 1))
        }
        val vdb = openAsync(File(dir, "closed-vec.db").path, VectorSchema.FBS, OpenOptions(commitSync = SyncPolicy.Off), null)
        vdb.write { insert(Photo(id = "a", album = 1, embedding = floatArrayOf(1f, 0f, 0f))) }
        val flows: List<Pair<String, LiveFlow<*>>> = listOf(
            "fetch.updates" to db.fetch(Post).updates(),
            "fetch.latest" to db.fetch(Post).latest(),
            "objectUpdates" to db.objectUpdates(Post, "p1"),
            "including.updates" to db.fetch(Post).including(Post.authorRef).updates(),
            "query.updates" to db.query("rel.Post").updates(),
            "nearestUpdates" to vdb.fetch(Photo).nearestUpdates(Photo.embedding, floatArrayOf(1f, 0f, 0f), 1),
        )
        val ends = flows.map { (name, f) -> async { endOf(name, f) } }
        // Active once subscribing returned (the first delivery comes before that).
        withTimeout(10_000) { while (flows.any { it.second.deliveries < 1 || !it.second.isActive }) delay(5) }
        check(flows.all { it.second.isActive }) { flows.map { it.first to it.second.isActive }.toString() }
        db.closeAsync()
        vdb.closeAsync()
        val got = withTimeout(10_000) { ends.awaitAll() }
        check(got.all { it == "closed" }) { "${flows.map { it.first }.zip(got)}" }
        check(flows.none { it.second.isActive }) { flows.map { it.first to it.second.isActive }.toString() }
    }

    test("android: a live Flow tells whether its subscription is active and how many deliveries it had") { dir ->
        val db = relDb(dir, "state.db")
        db.write { insert(Post(id = "p1", title = "One", rank = 1)) }
        val feed = db.fetch(Post).updates()
        check(!feed.isActive && feed.deliveries == 0) { "not collected yet" }
        val seen = Channel<dev.keel.Update<Post>>(Channel.UNLIMITED)
        val job = launch { feed.collect { seen.send(it) } }
        withTimeout(5000) { seen.receive() }
        check(feed.isActive && feed.deliveries == 1) { "${feed.deliveries}" }
        db.write { insert(Post(id = "p2", title = "Two", rank = 2)) }
        check(withTimeout(5000) { seen.receive() }.objects.size == 2)
        check(feed.deliveries == 2) { "${feed.deliveries}" }
        job.cancelAndJoin()
        check(!feed.isActive) { "still active after its collector stopped" }
        // An object's Flow ends at its deletion: inactive, both deliveries counted.
        val one = db.objectUpdates(Post, "p1")
        val versions = async { one.toList() }
        withTimeout(5000) { while (one.deliveries < 1) delay(5) }
        db.write { delete(Post, "p1") }
        check(withTimeout(5000) { versions.await() }.map { it.id } == listOf("p1"))
        check(!one.isActive && one.deliveries == 2) { "active ${one.isActive}, ${one.deliveries} deliveries" }
        db.closeAsync()
    }

    test("android: onTrimMemory gives memory back and the database goes on") { dir ->
        val db = relDb(dir, "trim.db")
        db.write { insert(Post(id = "p1", title = "One", rank = 1)) }
        check(db.fetch(Post).all().size == 1)
        check(db.onTrimMemory(5) == null) { "a moderate level released memory" }
        val released = db.onTrimMemory(80)
        check(released != null && released.readerConnections >= 1uL) { "$released" }
        // Rebuilt lazily: the next read opens a reader again.
        check(db.fetch(Post).all().map { it.id } == listOf("p1"))
        db.closeAsync()
    }

    test("android: orderByRelated orders a prefetched list by the author's name") { dir ->
        val db = relDb(dir, "order.db")
        db.write {
            insert(Author(id = "z", name = "Zoe"))
            insert(Author(id = "a", name = "Ada"))
            insert(Post(id = "p1", title = "One", author = "z", rank = 1))
            insert(Post(id = "p2", title = "Two", author = "a", rank = 2))
            insert(Post(id = "p3", title = "Three", rank = 3))
            insert(Post(id = "p4", title = "Four", author = "a", rank = 4))
        }
        val byRank = db.fetch(Post).orderBy(Post.rank.asc()).including(Post.authorRef)
        val asc = byRank.orderByRelated(Author.name.asc())
        // No author first ascending; equal names keep the rank order.
        check(asc.all().map { it.first.id } == listOf("p3", "p2", "p4", "p1")) { "${asc.all()}" }
        check(byRank.orderByRelated(Author.name.desc()).all().map { it.first.id } == listOf("p1", "p2", "p4", "p3"))
        // The limit applies after the order.
        val top = db.fetch(Post).orderBy(Post.rank.asc()).limit(1).including(Post.authorRef)
            .orderByRelated(Author.name.desc()).all()
        check(top.map { it.first.id to it.second?.name } == listOf("p1" to "Zoe")) { "$top" }
        check(asc.counts().map { it.second } == listOf(0L, 1L, 1L, 1L))
        // The live list keeps the order: Zoe renamed Abe moves p1 up.
        val lists = Channel<List<String>>(Channel.UNLIMITED)
        val job = launch { asc.updates().collect { u -> lists.send(u.objects.map { it.first.id }) } }
        check(withTimeout(5000) { lists.receive() } == listOf("p3", "p2", "p4", "p1"))
        db.write { update(Author(id = "z", name = "Abe")) }
        check(withTimeout(5000) { lists.receive() } == listOf("p3", "p1", "p2", "p4"))
        job.cancelAndJoin()
        expect<KeelException.UnknownField> { db.fetch(Post).including(Post.authorRef).orderByRelated(dev.keel.SortKey("nope", false)).all() }
        db.closeAsync()
    }

    test("names: the former Kotlin names still compile, as deprecated aliases of the core's") { dir ->
        val db = relDb(dir, "names.db")
        @Suppress("DEPRECATION")
        run {
            val q: dev.keel.TypedQuery<Post> = db.fetch(Post)
            val inc: dev.keel.IncludingQuery<Post, Author, Author?> = q.including(Post.authorRef)
            val body: dev.keel.WriteTxn.() -> Unit = { insert(Post(id = "n1", title = "N", rank = 1)) }
            db.write(body)
            check(inc.all().map { it.first.id } == listOf("n1"))
            val raw = object : dev.keel.ffi.WriteBody {
                override fun run(txn: dev.keel.ffi.Transaction) { check(txn.count(db.query("rel.Post")) == 1uL) }
            }
            db.writeTxn(raw)
            val u: dev.keel.RelationUpdate<Post, Author?>? = null
            check(u == null)
            val q2: dev.keel.QueryUpdate<Post> = dev.keel.Update(emptyList(), dev.keel.ffi.Diff(emptyList(), emptyList(), emptyList(), emptyList()))
            check(q2.objects.isEmpty())
        }
        db.closeAsync()
    }

    test("android: liveSubscriptions counts query, including and nearest Flows while they collect") { dir ->
        val db = relDb(dir, "count.db")
        val vdb = openAsync(File(dir, "count-vec.db").path, VectorSchema.FBS, OpenOptions(commitSync = SyncPolicy.Off), null)
        val flows: List<LiveFlow<*>> = listOf(
            db.fetch(Post).updates(),
            db.fetch(Post).including(Post.authorRef).updates(),
            vdb.fetch(Photo).nearestUpdates(Photo.embedding, floatArrayOf(1f, 0f, 0f), 3),
        )
        val jobs = flows.map { f -> launch { f.collect { } } }
        withTimeout(5000) { while (flows.any { !it.isActive }) delay(5) }
        check(db.liveSubscriptions() == 2uL) { "rel: ${db.liveSubscriptions()} live subscriptions" }
        check(vdb.liveSubscriptions() == 1uL) { "vector: ${vdb.liveSubscriptions()} live subscriptions" }
        jobs.forEach { it.cancelAndJoin() }
        check(db.liveSubscriptions() == 0uL && vdb.liveSubscriptions() == 0uL) {
            "after the collectors stopped: ${db.liveSubscriptions()}, ${vdb.liveSubscriptions()}"
        }
        db.closeAsync()
        vdb.closeAsync()
    }

    test("android: typed objects in the dictionary") { dir ->
        val path = File(dir, "dict.db").path
        val db = relDb(dir, "dict.db")
        val d = db.dictionary()
        val ada = Author(id = "ada", name = "Ada")
        d.setObject("me", ada)
        check(d.getObject(Author, "me") == ada)
        check(d.getObject(Author, "nobody") == null)
        expect<KeelException.TypeMismatch> { d.getObject(Post, "me") }
        d.setString("theme", "dark")
        expect<KeelException.TypeMismatch> { d.getObject(Author, "theme") }
        val changes = Channel<Author?>(Channel.UNLIMITED)
        val job = launch { d.objectChanges(Author, "me").collect { changes.send(it) } }
        check(withTimeout(5000) { changes.receive() } == ada)
        d.setObject("me", Author(id = "bob", name = "Bob"))
        withTimeout(5000) { while (changes.receive()?.id != "bob") { } }
        d.remove("me")
        withTimeout(5000) { while (changes.receive() != null) { } }
        job.cancelAndJoin()
        d.setObject("last", ada)
        d.sync()
        db.closeAsync()
        val again = openAsync(path, rel.RelationsSchema.FBS, OpenOptions(commitSync = SyncPolicy.Off), null)
        check(again.dictionary().getObject(Author, "last") == ada)
        again.closeAsync()
    }

    test("android: including and nearest listeners run on keel threads attached to the JVM") { dir ->
        // One database per listener kind, written with plain WriteOps (a typed write
        // body is a callback on the writer thread too, which would attach it first).
        suspend fun raw(db: Database, obj: KeelObject) {
            db.write(listOf(WriteOp.Insert(obj.keelModel().collectionName, obj.encode())))
        }
        val qdb = relDb(dir, "threads-query.db")
        val idb = relDb(dir, "threads-including.db")
        val vdb = openAsync(File(dir, "threads-vec.db").path, VectorSchema.FBS, OpenOptions(commitSync = SyncPolicy.Off), null)
        val query = ThreadsSeen()
        val including = ThreadsSeen()
        val nearest = ThreadsSeen()
        val qsub = qdb.query("rel.Post").subscribe(query)
        val isub = idb.query("rel.Post").subscribeIncluding("author", including)
        val nsub = vdb.query("vectordemo.Photo").subscribeNearest("embedding", listOf(1f, 0f, 0f), 5u, nearest)
        for (i in 1..3) {
            raw(qdb, Post(id = "p$i", title = "P$i", rank = i))
            raw(idb, Post(id = "p$i", title = "P$i", rank = i))
            raw(vdb, Photo(id = "v$i", album = 1, embedding = floatArrayOf(1f, i / 10f, 0f)))
        }
        withTimeout(5000) {
            while (listOf(query, including, nearest).any { it.threads.size < 4 }) delay(5)
        }
        qsub.cancel()
        isub.cancel()
        nsub.cancel()
        val caller = Thread.currentThread()
        for ((name, seen) in listOf("query" to query, "including" to including, "nearest" to nearest)) {
            // The first delivery is on the subscribing thread; the later ones on keel's writer.
            val later = seen.threads.drop(1)
            check(later.none { it === caller }) { "$name: a later delivery ran on the caller" }
            // Attached once and kept (JNA's default attaches a new Java thread per call).
            check(later.all { it.name == "keel" && it.isDaemon }) { "$name: ${later.map { "${it.name} daemon=${it.isDaemon}" }}" }
            check(later.toSet().size == 1) { "$name: ${later.size} deliveries on ${later.toSet().size} Java threads" }
        }
        for (db in listOf(qdb, idb, vdb)) db.closeAsync()
    }
}
