// Observation in Kotlin (compiled and run with KeelTest.kt): a StateFlow of a
// query or an object with its initial value at once, latest-only (conflated)
// flows that skip what a slow collector missed, subscriptions that end with
// their scope (keel's own `liveSubscriptions()` count), and `limit(-1)` meaning
// no limit, as in Swift (ObservationTests.swift).

import blog.*
import dev.keel.change
import dev.keel.fetch
import dev.keel.latestObject
import dev.keel.objectAsStateFlow
import dev.keel.write
import dev.keel.ffi.KeelException
import kotlinx.coroutines.*
import kotlinx.coroutines.flow.StateFlow
import kotlinx.coroutines.flow.first
import kotlinx.coroutines.flow.toList

/** Waits (up to 10 s) until [condition] holds. */
suspend fun eventually(what: String, condition: () -> Boolean) {
    withTimeoutOrNull(10_000) {
        while (!condition()) delay(5)
    } ?: error("timed out waiting for $what")
}

fun registerObservationTests() {
    test("observe: a query's StateFlow has its result at once and ends with its scope") { dir ->
        val db = blogDb(dir, "state.db")
        db.write { insert(Post(id = "a", priority = 1)) }
        val before = db.liveSubscriptions()
        val scope = CoroutineScope(SupervisorJob() + Dispatchers.Default)
        val state: StateFlow<List<Post>> = db.fetch(Post).orderBy(Post.priority.desc()).asStateFlow(scope)
        // No empty first frame: the value is the current result before anything runs.
        check(state.value.map { it.id } == listOf("a")) { "${state.value}" }
        eventually("the subscription to start") { db.liveSubscriptions() == before + 1uL }
        db.write { insert(Post(id = "b", priority = 2)) }
        eventually("the StateFlow to see b") { state.value.map { it.id } == listOf("b", "a") }
        scope.cancel()
        eventually("the subscription to end") { db.liveSubscriptions() == before }
        db.closeAsync()
    }

    test("observe: an object's StateFlow follows it and is null after delete") { dir ->
        val db = blogDb(dir, "ostate.db")
        db.write { insert(Post(id = "a", priority = 1, title = "first")) }
        val scope = CoroutineScope(SupervisorJob() + Dispatchers.Default)
        val state = db.objectAsStateFlow(Post, "a", scope)
        check(state.value?.title == "first") { "${state.value}" }
        db.change(Post, "a") { it.copy(title = "second") }
        eventually("the change") { state.value?.title == "second" }
        db.write { delete(Post, "a") }
        eventually("the delete") { state.value == null }
        scope.cancel()
        db.closeAsync()
    }

    test("observe: latest() skips to the newest result") { dir ->
        val db = blogDb(dir, "latest.db")
        val gate = CompletableDeferred<Unit>()
        var received = 0
        val collector = async(Dispatchers.Default) {
            db.fetch(Post).latest().first { result ->
                received++
                if (received == 1) gate.await() // a slow collector: busy while 20 writes commit
                result.size == 20
            }
        }
        eventually("the subscription to start") { db.liveSubscriptions() == 1uL }
        for (i in 0 until 20) db.write { insert(Post(id = "p$i", priority = i)) }
        gate.complete(Unit)
        val last = collector.await()
        check(last.map { it.id }.toSet() == (0 until 20).map { "p$it" }.toSet()) { "$last" }
        // The diff stream would hand over 21 results (the first, then one per commit).
        check(received < 21) { "latest() handed over $received results" }
        eventually("the subscription to end") { db.liveSubscriptions() == 0uL }
        db.closeAsync()
    }

    test("observe: latestObject ends with null on delete") { dir ->
        val db = blogDb(dir, "lobj.db")
        db.write { insert(Post(id = "a", priority = 1)) }
        val seen = async(Dispatchers.Default) { db.latestObject(Post, "a").toList() }
        eventually("the subscription to start") { db.liveSubscriptions() == 1uL }
        db.write { delete(Post, "a") }
        val all = seen.await()
        check(all.last() == null && all.size <= 2) { "$all" }
        db.closeAsync()
    }

    test("txn: insertAll is one FFI call that stops at the first failure, as inserts would") { dir ->
        val db = blogDb(dir, "all.db")
        val caught = db.write {
            check(insertAll(listOf(Post(id = "a"), Post(id = "b"))).size == 2)
            val e = runCatching { insertAll(listOf(Post(id = "d"), Post(id = "a"), Post(id = "c"))) }.exceptionOrNull()
            // "d" (before the failure) stays, "c" (after it) was not run.
            check(count(Post) == 3L) { "${count(Post)} posts" }
            e
        }
        check(caught is KeelException.AlreadyExists) { "$caught" }
        check(db.fetch(Post).orderBy(Post.id.asc()).all().map { it.id } == listOf("a", "b", "d"))
        db.closeAsync()
    }

    test("observe: limit(-1) means no limit, as in Swift") { dir ->
        val db = blogDb(dir, "limit.db")
        db.write { for (i in 0 until 5) insert(Post(id = "p$i", priority = i)) }
        val q = db.fetch(Post).orderBy(Post.priority.asc())
        check(q.limit(-1).all().size == 5)
        check(q.limit(2).limit(-1).all().size == 5) { "a negative limit lifts an earlier one" }
        check(q.limit(0).all().isEmpty())
        check(q.limit(2).all().map { it.priority } == listOf(0, 1))
        check(q.offset(-1).all().size == 5) { "a negative offset skips nothing" }
        db.closeAsync()
    }
}
