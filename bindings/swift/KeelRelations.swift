// Relations in the typed layer (docs/relations.md, issue 30): a generated
// relation handle per to-one `(references: "Author")` field (`Post.authorRef`),
// `including` to read each object with the one it names in two reads (no N+1),
// and the live form, updated when only a referenced object changes:
//
//     let rows = try db.fetch(Post.self).sorted(by: Post.rank.ascending)
//         .including(Post.authorRef).all()          // [KeelIncluded<Post, Author>]
//     let byAda = try db.fetch(Post.self)
//         .where(Post.authorRef, matches: Author.name == "Ada").all()
//     for try await change in db.fetch(Post.self).including(Post.authorRef).updates() {
//         // change.objects: [KeelIncluded<Post, Author>], change.diff: row-level
//     }
//
// Through the database only (not inside a write transaction); to-one references
// only (to-many fields get no handle).

import Foundation

/// A typed handle on a to-one reference field of `Root` naming `Target`s
/// (generated: `Post.authorRef`). `including(_:)` takes it.
public struct KeelRelation<Root: KeelRecord, Target: KeelRecord>: Sendable {
    /// The reference field's name in the schema (`author`).
    public let keelField: String

    /// A handle on the reference field `field` (the generated code makes these).
    public init(_ field: String) { keelField = field }
}

/// An object with the object its reference names: `related` is nil when the
/// field is absent or names no object.
public struct KeelIncluded<T: KeelRecord, U: KeelRecord>: Sendable, Hashable {
    /// The object.
    public let object: T
    /// The object its reference names, if any.
    public let related: U?
}

/// One delivery of a live query across a relation.
public struct KeelIncludingChange<T: KeelRecord, U: KeelRecord>: Sendable {
    /// The whole result, in query order.
    public let objects: [KeelIncluded<T, U>]
    /// What changed since the previous delivery (the first lists every row as
    /// inserted). A row whose object or referenced object changed is `updated`.
    public let diff: Diff
}

extension KeelFetch {
    /// This fetch with the object `relation` names for each result: its filter,
    /// order, limit and offset are kept.
    public func including<U: KeelRecord>(_ relation: KeelRelation<T, U>) -> KeelIncludingFetch<T, U> {
        KeelIncludingFetch(fetch: self, field: relation.keelField)
    }
}

extension KeelFetch {
    /// Keep the objects whose reference `relation` names an object matching
    /// `predicate` (`.where(Post.authorRef, matches: Author.name == "Ada")`).
    /// The referenced objects are read now, once, through the database: the
    /// filter is "the reference is one of their keys", which a later write to
    /// the referenced collection does not change (a live query keeps it as
    /// made). Throws `KeelError.InvalidArgument` for a bad predicate.
    public func `where`<U: KeelRecord>(
        _ relation: KeelRelation<T, U>, matches predicate: KeelPredicate<U>
    ) throws -> KeelFetch {
        let q = db.query(collection: T.keelCollection)
        return self.where(KeelPredicate(try q.through(field: relation.keelField, filter: predicate.expr)))
    }
}

/// A typed fetch with the objects one reference names (`fetch.including(…)`).
public struct KeelIncludingFetch<T: KeelRecord, U: KeelRecord>: Sendable {
    let fetch: KeelFetch<T>
    let field: String

    /// The fetch runs through the database, never inside a transaction.
    private func query() throws -> Query {
        if fetch.txn != nil {
            throw KeelError.InvalidArgument(
                message: "including(\(field)) runs through the database, not inside a write transaction")
        }
        return fetch.query
    }

    /// Every matching object with the object its reference names, in order: two
    /// reads whatever the number of objects (the objects, then every referenced
    /// object at once).
    public func all() throws -> [KeelIncluded<T, U>] {
        try query().allIncluding(field: field).map(KeelIncludingFetch.decode)
    }

    /// The result as an `AsyncSequence`: the current result first, then every
    /// changed result with its row-level diff — a change of a referenced object
    /// alone (an author renamed) lists the rows naming it as `updated`. Leaving
    /// the loop (or cancelling its task, or `cancel()`) ends the subscription.
    /// keel's listener buffers the undecoded deliveries; each is decoded in the
    /// consuming task.
    public func updates() -> KeelIncludingUpdates<T, U> {
        KeelIncludingUpdates(subscribe: { listener in
            try query().subscribeIncluding(field: field, listener: listener)
        })
    }

    static func decode(_ row: IncludedObject) throws -> KeelIncluded<T, U> {
        KeelIncluded(
            object: try T.keelStored(row.object.bytes),
            related: try row.related.first.map { try U.keelStored($0.bytes) })
    }
}

/// A live query across a relation as an `AsyncSequence` of
/// `KeelIncludingChange`s. Consumed once: when its iterator ends or goes away
/// the subscription is cancelled, and keel calls its listener no more.
public struct KeelIncludingUpdates<T: KeelRecord, U: KeelRecord>: AsyncSequence, Sendable {
    /// Iterates the deliveries, decoding each in the caller's task.
    public struct AsyncIterator: AsyncIteratorProtocol {
        var base: AsyncThrowingStream<KeelIncludingRaw, Error>.AsyncIterator
        let lease: Lease
        var finished = false

        /// The next delivery, or nil once the subscription has ended. A
        /// delivery that does not decode throws `KeelError.InvalidObject` and
        /// ends the subscription.
        public mutating func next() async throws -> KeelIncludingChange<T, U>? {
            if finished { return nil }
            guard let raw = try await base.next() else {
                finished = true
                return nil
            }
            do {
                return KeelIncludingChange(
                    objects: try raw.update.objects.map(KeelIncludingFetch<T, U>.decode),
                    diff: raw.update.diff)
            } catch {
                finished = true
                lease.state.cancel()
                throw error
            }
        }
    }

    /// Cancels the subscription when the last copy of an iterator is gone (a
    /// `break` out of the loop releases it).
    final class Lease: @unchecked Sendable {
        // SAFETY (of `@unchecked Sendable`): `state` is itself thread-safe.
        let state: KeelIncludingState
        init(_ state: KeelIncludingState) { self.state = state }
        deinit { state.cancel() }
    }

    let stream: AsyncThrowingStream<KeelIncludingRaw, Error>
    let state: KeelIncludingState

    init(subscribe: (KeelIncludingBridge) throws -> IncludingSubscription) {
        let state = KeelIncludingState()
        var cont: AsyncThrowingStream<KeelIncludingRaw, Error>.Continuation!
        stream = AsyncThrowingStream(bufferingPolicy: .unbounded) { cont = $0 }
        do {
            let sub = try subscribe(KeelIncludingBridge(cont, state))
            state.set(sub)
            cont.onTermination = { _ in state.cancel() }
        } catch {
            cont.finish(throwing: error)
        }
        self.state = state
    }

    /// An iterator over the deliveries.
    public func makeAsyncIterator() -> AsyncIterator {
        AsyncIterator(base: stream.makeAsyncIterator(), lease: Lease(state))
    }

    /// True while keel may still deliver.
    public var isActive: Bool { state.isActive }

    /// How many deliveries keel made so far (consumed or not).
    public var deliveries: Int { state.deliveries }

    /// Ends the subscription now.
    public func cancel() { state.cancel() }
}

/// A delivery as keel made it, not decoded yet.
struct KeelIncludingRaw: @unchecked Sendable {
    // SAFETY (of `@unchecked Sendable`): an immutable UniFFI record, handed over
    // once from keel's thread to the consumer.
    let update: IncludingUpdate
}

/// The subscription behind a `KeelIncludingUpdates` and its delivery count.
final class KeelIncludingState: @unchecked Sendable {
    // SAFETY (of `@unchecked Sendable`): every field is read and written under `lock`.
    private let lock = NSLock()
    private var subscription: IncludingSubscription?
    private var cancelled = false
    private var count = 0

    func set(_ s: IncludingSubscription) {
        lock.lock()
        let cancelNow = cancelled
        subscription = s
        lock.unlock()
        if cancelNow { s.cancel() }
    }

    func cancel() {
        lock.lock()
        cancelled = true
        let s = subscription
        lock.unlock()
        s?.cancel()
    }

    func delivered() {
        lock.lock()
        count += 1
        lock.unlock()
    }

    var deliveries: Int {
        lock.lock()
        defer { lock.unlock() }
        return count
    }

    var isActive: Bool {
        lock.lock()
        let s = subscription
        let c = cancelled
        lock.unlock()
        return !c && (s?.isActive() ?? false)
    }
}

/// keel's listener: runs on keel's thread, so it only counts and buffers.
final class KeelIncludingBridge: IncludingListener, @unchecked Sendable {
    // SAFETY (of `@unchecked Sendable`): the continuation and the state are
    // thread-safe.
    let continuation: AsyncThrowingStream<KeelIncludingRaw, Error>.Continuation
    let state: KeelIncludingState

    init(_ c: AsyncThrowingStream<KeelIncludingRaw, Error>.Continuation, _ s: KeelIncludingState) {
        continuation = c
        state = s
    }

    func onUpdate(update: IncludingUpdate) throws {
        state.delivered()
        continuation.yield(KeelIncludingRaw(update: update))
    }
}
