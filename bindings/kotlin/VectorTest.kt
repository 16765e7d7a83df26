// Typed nearest-neighbour search from Kotlin, compiled and run with
// KeelTest.kt: `nearest` on the generated handles of bindings/swift/Tests/vector.fbs
// (package vectordemo) against a brute-force reference computed here, cosine and
// l2, filters before k, the typed errors, and a live k-NN as a Flow.

import dev.keel.NearestUpdate
import dev.keel.fetch
import dev.keel.nearest
import dev.keel.nearestAsync
import dev.keel.nearestUpdates
import dev.keel.write
import dev.keel.ffi.*
import kotlinx.coroutines.channels.Channel
import kotlinx.coroutines.launch
import kotlinx.coroutines.withTimeout
import vectordemo.Photo
import vectordemo.Point
import vectordemo.VectorSchema
import java.io.File
import kotlin.math.sqrt

/** The reference: every candidate's distance the naive way, ties in insertion order (keel's rowid order). */
private fun reference(vs: List<Pair<String, List<Float>>>, q: List<Float>, metric: String): List<String> {
    fun dot(a: List<Float>, b: List<Float>): Float = a.zip(b).fold(0f) { s, (x, y) -> s + x * y }
    return vs.mapIndexed { i, (id, v) ->
        val d = when (metric) {
            "cosine" -> 1f - dot(v, q) / (sqrt(dot(v, v)) * sqrt(dot(q, q)))
            else -> sqrt(v.zip(q).fold(0f) { s, (x, y) -> s + (x - y) * (x - y) })
        }
        Triple(d, i, id)
    }.sortedWith(compareBy({ it.first }, { it.second })).map { it.third }
}

private suspend inline fun <reified E : Throwable> expectSuspend(block: () -> Unit): E {
    try {
        block()
    } catch (e: Throwable) {
        if (e is E) return e
        throw AssertionError("expected ${E::class.simpleName}, got $e", e)
    }
    throw AssertionError("expected ${E::class.simpleName}, nothing was thrown")
}

private val photos = listOf(
    Photo(id = "a", album = 1, embedding = floatArrayOf(1f, 0f, 0f)),
    Photo(id = "b", album = 1, embedding = floatArrayOf(0f, 1f, 0f)),
    Photo(id = "c", album = 1, embedding = floatArrayOf(1f, 1f, 0f)),
    Photo(id = "d", album = 2, embedding = floatArrayOf(1f, 0.1f, 0f)),
    Photo(id = "e", album = 1, embedding = floatArrayOf(-1f, 0f, 0.5f)),
    Photo(id = "f", album = 2, embedding = floatArrayOf(0.2f, 0.3f, 0.9f)),
)
private val points = listOf(
    Point(id = "p", pos = floatArrayOf(0f, 0f)),
    Point(id = "q", pos = floatArrayOf(3f, 4f)),
    Point(id = "r", pos = floatArrayOf(1f, 1f)),
    Point(id = "s", pos = floatArrayOf(-2f, 0.5f)),
)

private suspend fun vectorDb(dir: File, name: String): Database {
    val db = openAsync(File(dir, name).path, VectorSchema.FBS, OpenOptions(commitSync = SyncPolicy.Off), null)
    db.write {
        for (p in photos) insert(p)
        for (p in points) insert(p)
    }
    return db
}

fun registerVectorTests() {
    test("vector: typed nearest equals a reference (cosine, l2), filters before k, typed errors") { dir ->
        val db = vectorDb(dir, "vector.db")
        for (q in listOf(floatArrayOf(1f, 0.2f, 0f), floatArrayOf(0f, 0f, 1f), floatArrayOf(-0.5f, 1f, 0.1f))) {
            val want = reference(photos.map { it.id to it.embedding.toList() }, q.toList(), "cosine")
            for (k in listOf(1, 3, photos.size + 2)) {
                val got = db.fetch(Photo).nearestAsync(Photo.embedding, q, k)
                check(got == db.fetch(Photo).nearest(Photo.embedding, q, k))
                check(got.map { it.value.id } == want.take(k)) { "cosine ${q.toList()} k=$k: ${got.map { it.value.id }} != $want" }
                check(got.map { it.distance } == got.map { it.distance }.sorted())
            }
            // Filters apply before k: album 2's photos never take a place.
            val album1 = photos.filter { it.album == 1 }.map { it.id }.toSet()
            val inAlbum = db.fetch(Photo).where(Photo.album eq 1).nearest(Photo.embedding, q, 3)
            check(inAlbum.map { it.value.id } == want.filter { it in album1 }.take(3)) { "${inAlbum.map { it.value.id }}" }
        }
        for (q in listOf(floatArrayOf(0f, 0f), floatArrayOf(2f, 2f), floatArrayOf(-1f, 1f))) {
            val want = reference(points.map { it.id to it.pos.toList() }, q.toList(), "l2")
            val got = db.fetch(Point).nearest(Point.pos, q, 3)
            check(got.map { it.value.id } == want.take(3)) { "l2 ${q.toList()}: ${got.map { it.value.id }} != $want" }
            val p = points.first { it.id == got[0].value.id }
            check(got[0].value == p)
            val d = sqrt(p.pos.toList().zip(q.toList()).fold(0f) { s, (x, y) -> s + (x - y) * (x - y) })
            check(kotlin.math.abs(got[0].distance - d) < 1e-5f) { "${got[0].distance} != $d" }
        }
        for (bad in listOf(floatArrayOf(1f, 0f), floatArrayOf(1f, 0f, 0f, 0f), floatArrayOf(Float.NaN, 0f, 0f), floatArrayOf(Float.POSITIVE_INFINITY, 0f, 0f))) {
            expectSuspend<KeelException.InvalidArgument> { db.fetch(Photo).nearest(Photo.embedding, bad, 2) }
        }
        // Inside a write body, nearest sees the body's own writes.
        val inBody = db.write {
            insert(Photo(id = "t", album = 1, embedding = floatArrayOf(1f, 0.2f, 0f)))
            fetch(Photo).nearest(Photo.embedding, floatArrayOf(1f, 0.2f, 0f), 1).map { it.value.id }
        }
        check(inBody == listOf("t")) { "$inBody" }
        expectSuspend<KeelException.TypeMismatch> {
            db.fetch(Photo).orderBy(Photo.album.asc()).nearest(Photo.embedding, floatArrayOf(1f, 0f, 0f), 2)
        }
        // A (vector: N) field is a FloatArray, and the model stays a value: equal
        // contents are equal objects with equal hashes, printed by content.
        val x = Photo(id = "x", album = 1, embedding = floatArrayOf(1f, 2f, 3f))
        val y = Photo(id = "x", album = 1, embedding = floatArrayOf(1f, 2f, 3f))
        check(x == y && x.hashCode() == y.hashCode()) { "$x != $y" }
        check(x != y.copy(embedding = floatArrayOf(1f, 2f, 4f)))
        check(x.toString().contains("[1.0, 2.0, 3.0]")) { x.toString() }
        db.closeAsync()
    }

    test("vector: a live k-NN delivers an insert that beats and a delete that leaves") { dir ->
        val db = vectorDb(dir, "live.db")
        val q = floatArrayOf(1f, 0f, 0f)
        val query = db.fetch(Photo).where(Photo.album eq 1)
        val got = Channel<NearestUpdate<Photo>>(Channel.UNLIMITED)
        val job = launch { query.nearestUpdates(Photo.embedding, q, 2).collect { got.send(it) } }
        fun ids(u: NearestUpdate<Photo>) = u.neighbors.map { it.value.id }

        val first = withTimeout(10_000) { got.receive() }
        check(ids(first) == listOf("a", "c")) { "${ids(first)}" }
        check(ids(first) == query.nearest(Photo.embedding, q, 2).map { it.value.id })
        check(first.diff.inserted == listOf(0UL, 1UL)) { "${first.diff}" }

        // A nearer object enters in second place; "c" leaves.
        val nearer = Photo(id = "g", album = 1, embedding = floatArrayOf(1f, 0.05f, 0f))
        db.write { insert(nearer) }
        val second = withTimeout(10_000) { got.receive() }
        check(ids(second) == listOf("a", "g")) { "${ids(second)}" }
        check(second.neighbors[1].value == nearer)
        check(second.diff.inserted == listOf(1UL) && second.diff.removed == listOf(1UL)) { "${second.diff}" }

        // A nearer object in another album changes nothing: no delivery.
        db.write { insert(Photo(id = "h", album = 2, embedding = floatArrayOf(1f, 0f, 0f))) }
        // Deleting a member: it leaves and the next candidate comes in.
        db.write { delete(Photo, "a") }
        val third = withTimeout(10_000) { got.receive() }
        check(ids(third) == listOf("g", "c")) { "${ids(third)}" }
        check(third.diff.removed == listOf(0UL) && third.diff.inserted == listOf(1UL)) { "${third.diff}" }
        check(ids(third) == query.nearest(Photo.embedding, q, 2).map { it.value.id })
        check(got.tryReceive().isFailure) { "an extra delivery" }
        job.cancel()

        // A bad vector: collecting throws the typed error.
        expectSuspend<KeelException.InvalidArgument> {
            query.nearestUpdates(Photo.embedding, floatArrayOf(1f, 0f), 2).collect { }
        }
        db.closeAsync()
    }
}
