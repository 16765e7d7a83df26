// Nearest-neighbour search in the typed layer (docs/vector.md): `nearest` on a
// typed fetch over a `(vector: N)` field, best first with the distances, and a
// live k-NN as an `AsyncSequence`.
//
//     let similar = try db.fetch(Photo.self)
//         .where(Photo.album == 3)                 // filters apply before k
//         .nearest(Photo.embedding, to: query, k: 20)
//     for try await change in db.fetch(Photo.self).nearestUpdates(Photo.embedding, to: query, k: 20) {
//         show(change.neighbors, animating: change.diff)
//     }
//
// The search is exact. A query vector of another dimension, or with NaN or
// infinity, throws `KeelError.InvalidArgument`; a field that is not a
// `(vector: N)` field throws `KeelError.UnknownField`; a fetch with `sorted`,
// `limit` or `offset` throws `KeelError.TypeMismatch` (the order is by distance,
// and `k` is the limit).

import Foundation

/// One result of a nearest-neighbour search: an object and its distance to the
/// query vector under the field's metric (smaller is nearer; equal distances
/// are ordered by rowid).
public struct KeelNeighbor<T: KeelRecord>: Sendable, Equatable {
    /// The object.
    public let object: T
    /// Its distance to the query vector.
    public let distance: Float
}

/// One delivery of a typed live k-NN: the `k` nearest now and the row-level
/// difference against the previous delivery.
public struct KeelNearestChange<T: KeelRecord>: Sendable {
    /// The `k` nearest matching objects (fewer if fewer match), best first.
    public let neighbors: [KeelNeighbor<T>]
    /// What changed since the previous delivery, by index (the first lists
    /// every neighbour as inserted); a neighbour whose object or distance
    /// changed is in `updated`.
    public let diff: Diff
}

extension KeelFetch {
    /// The `k` objects matching this fetch's filters whose `field` is nearest
    /// to `vector`, best first (exact; synchronous, on the calling thread: keel
    /// reads never wait for the writer). On `txn.fetch(…)` inside a write body
    /// it sees the transaction's writes so far.
    public func nearest(_ field: KeelField<T, [Float]>, to vector: [Float], k: Int) throws
        -> [KeelNeighbor<T>]
    {
        let n = UInt32(clamping: max(k, 0))
        let found: [Neighbor]
        if let t = txn {
            if t.ended { throw keelTransactionEnded() }
            found = try t.txn.nearest(query: query, field: field.keelPath, vector: vector, k: n)
        } else {
            found = try query.nearest(field: field.keelPath, vector: vector, k: n)
        }
        return try found.map { KeelNeighbor(object: try T.keelStored($0.bytes), distance: $0.distance) }
    }

    /// `nearest(_:to:k:)` kept live, as an `AsyncSequence`: the `k` nearest now,
    /// then after every commit that changes them (an insert that beats the
    /// `k`-th distance, an update that moves a vector, a delete of a member)
    /// the new `k` nearest with their diff. keel's listener runs on keel's
    /// writer thread and only buffers the undecoded delivery; each is decoded
    /// when the loop asks for it, in the consuming task. Every delivery is
    /// buffered (each diff is relative to the previous one). Leaving the loop,
    /// cancelling its task or calling `cancel()` ends the subscription. A bad
    /// field or vector makes the first `next()` throw the typed error.
    public func nearestUpdates(_ field: KeelField<T, [Float]>, to vector: [Float], k: Int)
        -> KeelUpdates<KeelNearestChange<T>>
    {
        let q = query
        let path = field.keelPath
        let count = UInt32(clamping: max(k, 0))
        let inTxn = txn != nil
        return KeelUpdates(bufferingPolicy: .unbounded, subscribe: { bridge in
            if inTxn {
                throw KeelError.InvalidArgument(
                    message: "nearestUpdates: subscribe on db.fetch(…), not inside a write transaction")
            }
            return try q.subscribeNearest(field: path, vector: vector, k: count, listener: bridge)
        }, decode: { raw in
            guard case .nearest(let u) = raw.event else {
                throw KeelUpdates<KeelNearestChange<T>>.unexpected(raw)
            }
            return KeelNearestChange(
                neighbors: try u.neighbors.map {
                    KeelNeighbor(object: try T.keelStored($0.bytes), distance: $0.distance)
                },
                diff: u.diff)
        })
    }
}

extension KeelRawBridge: NearestListener {
    /// A live k-NN's delivery: counted and buffered undecoded, like a query's.
    func onUpdate(update: NearestUpdate) throws {
        state.delivered()
        continuation.yield(KeelRawEvent(event: .nearest(update)))
    }
}
