// Write transactions in Kotlin (compiled and run with KeelTest.kt): the body of
// `db.write { … }` runs inside the transaction on keel's writer thread, reads see
// the transaction's writes, a throw rolls back that body only and comes back as is,
// 100 concurrent increments end at exactly 100, and a change made through older
// generated types keeps what only the newer schema knows.

import blog.*
import dev.keel.change
import dev.keel.fetch
import dev.keel.get
import dev.keel.write
import dev.keel.ffi.*
import kotlinx.coroutines.*
import kotlinx.coroutines.flow.first
import kotlinx.coroutines.flow.toList
import java.io.File

class AppSaidNo : Exception("the app said no")

fun registerTxnTests() {
    test("txn: 100 concurrent increments through write { get … update }") { dir ->
        val db = blogDb(dir, "inc.db")
        db.write { insert(Post(id = "c", priority = 0)) }
        val caller = Thread.currentThread()
        val bodyThreads = java.util.concurrent.ConcurrentHashMap.newKeySet<Thread>()
        (0 until 100).map {
            async(Dispatchers.Default) {
                db.write {
                    bodyThreads.add(Thread.currentThread())
                    val c = get(Post, "c")!!
                    update(c.copy(priority = c.priority + 1))
                }
            }
        }.awaitAll()
        check(db.get(Post, "c")?.priority == 100) { "${db.get(Post, "c")}" }
        check(caller !in bodyThreads) { "a write body ran on the caller's thread" }
        db.closeAsync()
    }

    test("txn: 100 concurrent increments through change") { dir ->
        val db = blogDb(dir, "chg.db")
        db.write { insert(Post(id = "c", priority = 0, title = "kept")) }
        (0 until 100).map { i ->
            async(Dispatchers.Default) {
                if (i % 2 == 0) {
                    db.change(Post, "c") { it.copy(priority = it.priority + 1) }
                } else {
                    db.write { change(Post, "c") { it.copy(priority = it.priority + 1) } }
                }
            }
        }.awaitAll()
        val c = db.get(Post, "c")
        check(c?.priority == 100 && c.title == "kept") { "$c" }
        expect<KeelException.NotFound> { db.change(Post, "nope") { it.copy(priority = 3) } }
        db.closeAsync()
    }

    test("txn: reads see earlier writes; a throw rolls back only that body and comes back as is") { dir ->
        val db = blogDb(dir, "rb.db")
        val seen = db.write {
            insert(Post(id = "a", priority = 1))
            insert(Post(id = "b", priority = 2))
            listOf(
                count(Post),
                fetch(Post).where(Post.priority ge 2).all().size.toLong(),
                fetch(Post).orderBy(Post.priority.desc()).first()?.priority?.toLong() ?: -1L,
                fetch(Post).where(Post.priority ge 1).count(),
            )
        }
        check(seen == listOf(2L, 1L, 2L, 2L)) { "$seen" }
        val kept = async { db.write { insert(Post(id = "c")) } }
        val thrown = try {
            db.write {
                delete(Post, "a")
                throw AppSaidNo()
            }
            null
        } catch (e: AppSaidNo) {
            e
        }
        check(thrown != null) { "the write did not throw the body's exception" }
        kept.await()
        check(db.get(Post, "a") != null && db.get(Post, "c") != null)
        // An engine error inside the body is the typed exception, and can be caught there.
        val caught = db.write {
            try {
                insert(Post(id = "a")); false
            } catch (e: KeelException.AlreadyExists) {
                true
            }
        }
        check(caught)
        db.closeAsync()
    }

    test("open flow: delivers Durable after the database was handed over at Readable") { dir ->
        val path = File(dir, "durable.db").path
        crashedDatabase(path)
        val opts = OpenOptions(commitSync = SyncPolicy.Off, openBarrierSync = SyncPolicy.SimulatedLatency(500uL))
        val opening = dev.keel.Keel.open(path, SCHEMA, opts, this)
        val events = async { opening.progress.toList() }
        val db = opening.database.await()
        check(!db.isDurable()) { "the barrier was already done at readable; the test proves nothing" }
        val all = withTimeout(10_000) { events.await() }
        check(all.any { it.milestone == Milestone.READABLE } && all.last().milestone == Milestone.DURABLE && all.last().done) { "$all" }
        db.closeAsync()
    }

    test("typed updates: subscribe and decode on Dispatchers.IO, not on the collector's thread") { dir ->
        val db = blogDb(dir, "io.db")
        db.write { insert(Post(id = "a", priority = 1)) }
        val decodedOn = java.util.concurrent.ConcurrentHashMap.newKeySet<String>()
        val spy = object : dev.keel.KeelModel<Post, String> by Post {
            override fun decode(bytes: ByteArray): Post {
                decodedOn.add(Thread.currentThread().name)
                return Post.decode(bytes)
            }
        }
        val collector = Thread.currentThread().name
        val first = db.fetch(spy).updates().first()
        check(first.objects.map { it.id } == listOf("a")) { "$first" }
        check(decodedOn.isNotEmpty() && collector !in decodedOn && decodedOn.all { it.startsWith("DefaultDispatcher") }) {
            "decoded on $decodedOn, collected on $collector"
        }
        db.closeAsync()
    }

    test("txn: a change through older types keeps fields, enum values and union members it does not know") { dir ->
        val path = File(dir, "evo.db").path
        val opts = OpenOptions(commitSync = SyncPolicy.Off)
        val written = media.Item(
            id = "i1", n = 1, mood = media.Mood.Grumpy, att = media.Attachment.Vid(media.Vid(secs = 42)),
            views = 1234u, tags = listOf("new", "fields"),
        )
        val v2 = openAsync(path, media.MediaV2Schema.FBS, opts, null)
        v2.write { insert(written) }
        v2.closeAsync()

        // An older build: v1 types know neither Grumpy, Vid, views nor tags.
        val v1 = openAsync(path, mediav1.MediaV1Schema.FBS, opts, null)
        val old = v1.get(mediav1.Item, "i1")!!
        check(old.mood == mediav1.Mood.Unknown && old.att is mediav1.Attachment.Unknown) { "$old" }
        v1.change(mediav1.Item, "i1") { it.copy(n = it.n + 10) }
        v1.closeAsync()

        val again = openAsync(path, media.MediaV2Schema.FBS, opts, null)
        val now = again.get(media.Item, "i1")
        check(now == written.copy(n = 11)) { "$now" }
        again.closeAsync()
    }
}
