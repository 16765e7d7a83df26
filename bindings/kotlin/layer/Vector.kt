// Nearest-neighbour search in the typed Kotlin layer (docs/vector.md): `nearest`
// on a typed query over a `(vector: N)` field (the generator's handle for a
// `[float]` field is a `FieldRef`), best first with the distances, and a live
// k-NN as a `Flow`.
//
//     val similar = db.fetch(Photo).where(Photo.album eq 3)   // filters apply before k
//         .nearest(Photo.embedding, query, k = 20)            // or nearestAsync (suspend)
//     db.fetch(Photo).nearestUpdates(Photo.embedding, query, k = 20).collect { u -> show(u.neighbors, u.diff) }
//
// The search is exact. A query vector of another dimension, or with NaN or
// infinity, throws `KeelException.InvalidArgument`; a field that is not a
// `(vector: N)` field throws `KeelException.UnknownField`; a query with
// `orderBy`, `limit` or `offset` throws `KeelException.TypeMismatch` (the order
// is by distance, and `k` is the limit).

package dev.keel

import dev.keel.ffi.Diff
import dev.keel.ffi.KeelException
import kotlinx.coroutines.Dispatchers
import kotlinx.coroutines.channels.Channel
import kotlinx.coroutines.flow.Flow
import kotlinx.coroutines.flow.buffer
import kotlinx.coroutines.flow.flowOn
import kotlinx.coroutines.flow.map
import kotlinx.coroutines.withContext

/**
 * One result of a nearest-neighbour search: an object and its [distance] to the
 * query vector under the field's metric (smaller is nearer; equal distances are
 * ordered by rowid).
 */
data class Neighbor<T>(
    /** The object. */
    val value: T,
    /** Its distance to the query vector. */
    val distance: Float,
)

/** One delivery of [Fetch.nearestUpdates]: the `k` nearest now and what changed. */
data class NearestUpdate<T>(
    /** The `k` nearest matching objects (fewer if fewer match), best first. */
    val neighbors: List<Neighbor<T>>,
    /**
     * Changes against the previous delivery, by index (the first lists every
     * neighbour as inserted); a neighbour whose object or distance changed is in `updated`.
     */
    val diff: Diff,
)

private fun <T : Any> Fetch<T>.decode(n: dev.keel.ffi.Neighbor): Neighbor<T> =
    Neighbor(model.decode(n.bytes), n.distance)

/**
 * The [k] objects matching this query's filters whose vector [field] is nearest to
 * [vector], best first (exact): a read on the calling thread (keel reads never wait
 * for the writer), or, on `fetch(…)` inside a write body, as the transaction sees
 * the objects (its own writes included). [nearestAsync] runs it on a keel thread.
 */
fun <T : Any> Fetch<T>.nearest(field: FieldRef<T>, vector: FloatArray, k: Int): List<Neighbor<T>> {
    val n = k.coerceAtLeast(0).toUInt()
    val v = vector.toList()
    val found = txn?.live()?.nearest(query, field.keelPath, v, n) ?: query.nearest(field.keelPath, v, n)
    return found.map { decode(it) }
}

/** [nearest] on [Dispatchers.IO] (on a database query; inside a write body use [nearest]). */
suspend fun <T : Any> Fetch<T>.nearestAsync(field: FieldRef<T>, vector: FloatArray, k: Int): List<Neighbor<T>> =
    withContext(Dispatchers.IO) { nearest(field, vector, k) }

/**
 * [nearest] kept live, as a [Flow]: the `k` nearest now, then after every commit
 * that changes them (an insert that beats the `k`-th distance, an update that moves
 * a vector, a delete of a member) the new `k` nearest with their diff. Collecting
 * subscribes; cancelling the collector cancels the subscription. No update is
 * dropped (each diff is relative to the previous). As with [Fetch.updates],
 * subscribing and decoding run on [Dispatchers.IO]; keel's listener (on keel's
 * writer thread) only hands the delivery over. A bad field or vector makes the
 * collection throw the typed error.
 */
fun <T : Any> Fetch<T>.nearestUpdates(field: FieldRef<T>, vector: FloatArray, k: Int): LiveFlow<NearestUpdate<T>> {
    val v = vector.toList()
    val state = LiveState()
    val flow = liveFlow<dev.keel.ffi.NearestUpdate>(state, { bridge ->
        if (txn != null) throw KeelException.InvalidArgument("nearestUpdates: subscribe on db.fetch(…), not inside a write transaction")
        query.subscribeNearest(field.keelPath, v, k.coerceAtLeast(0).toUInt(), bridge).handle()
    }) { trySend(it as dev.keel.ffi.NearestUpdate) }
    return LiveFlow(
        flow.buffer(Channel.UNLIMITED)
            .map { u -> NearestUpdate(u.neighbors.map { decode(it) }, u.diff) }
            .flowOn(Dispatchers.IO),
        state,
    )
}
