// Relations in the typed layer (docs/relations.md): a generated
// relation handle per `(references: "Author")` field (`Post.authorRef`; a
// vector of keys gets `Post.tagsRef`, a `KeelManyRelation`), `including` to read
// each object with the ones it names in two reads (no N+1), and the live form,
// updated when only a referenced object changes:
//
//     let rows = try db.fetch(Post.self).sorted(by: Post.rank.ascending)
//         .including(Post.authorRef).all()          // [KeelIncluded<Post, Author>]
//     let byAda = try db.fetch(Post.self)
//         .where(Post.authorRef, matches: Author.name == "Ada").all()
//     for try await change in db.fetch(Post.self).including(Post.authorRef).updates() {
//         // change.objects: [KeelIncluded<Post, Author>], change.diff: row-level
//     }
//
// Through the database only (not inside a write transaction). Filters through a
// reference follow to-one references.

import Foundation

/// A typed handle on a to-one reference field of `Root` naming `Target`s
/// (generated: `Post.authorRef`). `including(_:)` takes it.
public struct KeelRelation<Root: KeelRecord, Target: KeelRecord>: Sendable {
    /// The reference field's name in the schema (`author`).
    public let keelField: String

    /// A handle on the reference field `field` (the generated code makes these).
    public init(_ field: String) { keelField = field }
}

/// A typed handle on a to-many reference field of `Root`, a vector of keys of
/// `Target`s (generated: `Post.tagsRef`). `including(_:)` takes it.
public struct KeelManyRelation<Root: KeelRecord, Target: KeelRecord>: Sendable {
    /// The reference field's name in the schema (`tags`).
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

/// An object with the objects its to-many reference names, in the order of its
/// keys (a key naming no object is left out).
public struct KeelIncludedMany<T: KeelRecord, U: KeelRecord>: Sendable, Hashable {
    /// The object.
    public let object: T
    /// The objects its keys name, in their order.
    public let related: [U]
}

/// One delivery of a live query across a relation: `Row` is a
/// `KeelIncluded` (to-one) or a `KeelIncludedMany` (to-many).
public struct KeelIncludingChange<Row: Sendable>: Sendable {
    /// The whole result, in query order.
    public let objects: [Row]
    /// What changed since the previous delivery (the first lists every row as
    /// inserted). A row whose object or referenced objects changed is `updated`.
    public let diff: Diff
}

extension KeelFetch {
    /// This fetch with the object `relation` names for each result: its filter,
    /// order, limit and offset are kept.
    public func including<U: KeelRecord>(
        _ relation: KeelRelation<T, U>
    ) -> KeelIncludingFetch<T, KeelIncluded<T, U>> {
        KeelIncludingFetch(fetch: self, field: relation.keelField) { row in
            KeelIncluded(
                object: try T.keelStored(row.object.bytes),
                related: try row.related.first.map { try U.keelStored($0.bytes) })
        }
    }

    /// This fetch with the objects the to-many `relation` names for each
    /// result, in the order of its keys: its filter, order, limit and offset
    /// are kept.
    public func including<U: KeelRecord>(
        _ relation: KeelManyRelation<T, U>
    ) -> KeelIncludingFetch<T, KeelIncludedMany<T, U>> {
        KeelIncludingFetch(fetch: self, field: relation.keelField) { row in
            KeelIncludedMany(
                object: try T.keelStored(row.object.bytes),
                related: try row.related.map { try U.keelStored($0.bytes) })
        }
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

/// A typed fetch with the objects one reference names (`fetch.including(…)`):
/// each result is a `Row`, `KeelIncluded` or `KeelIncludedMany`.
public struct KeelIncludingFetch<T: KeelRecord, Row: Sendable>: Sendable {
    let fetch: KeelFetch<T>
    let field: String
    let decode: @Sendable (IncludedObject) throws -> Row
    /// `where(_:)`'s condition on the referenced objects (an FFI expression).
    var related: Expr? = nil
    /// `sorted(byRelated:)`'s key: a field of the referenced objects.
    var relatedOrder: (path: String, descending: Bool, relevance: Bool)? = nil

    /// The fetch runs through the database, never inside a transaction.
    private func query() throws -> Query {
        if fetch.txn != nil {
            throw KeelError.InvalidArgument(
                message: "including(\(field)) runs through the database, not inside a write transaction")
        }
        var q = fetch.query
        if let related { q = try q.whereRelated(field: field, filter: related) }
        if let relatedOrder {
            if relatedOrder.relevance {
                throw KeelError.InvalidArgument(
                    message: "sorted(byRelated:) on \(field): relevance orders by a search, not by a field")
            }
            q = q.orderByRelated(field: relatedOrder.path, descending: relatedOrder.descending)
        }
        return q
    }

    /// Order the result by `key`, a field of the referenced objects
    /// (`.including(Post.authorRef).sorted(byRelated: Author.name.ascending)`),
    /// as SQL orders (a post without an author first when ascending). Equal
    /// values keep the fetch's own order; its limit and offset apply after this
    /// order (every match is read to sort it). `all()`, `counts()` and
    /// `updates()` keep it. A relevance key throws `KeelError.InvalidArgument`
    /// when the fetch runs.
    public func sorted<U: KeelRecord>(byRelated key: KeelSort<U>) -> Self where Row == KeelIncluded<T, U> {
        ordered(key.path, key.descending, key.isRelevance)
    }

    /// Order the result by `key`, a field of the first of the referenced
    /// objects; as above.
    public func sorted<U: KeelRecord>(byRelated key: KeelSort<U>) -> Self where Row == KeelIncludedMany<T, U> {
        ordered(key.path, key.descending, key.isRelevance)
    }

    private func ordered(_ path: String, _ descending: Bool, _ relevance: Bool) -> Self {
        var copy = self
        copy.relatedOrder = (path: path, descending: descending, relevance: relevance)
        return copy
    }

    /// Keep the objects whose referenced object matches `predicate`
    /// (`.including(Post.authorRef).where(Author.name == "Ada")`). Evaluated on
    /// every read, so `updates()` follows renames: an author renamed into the
    /// condition brings their posts in, one renamed out takes them away. The
    /// fetch's limit and offset apply after it.
    public func `where`<U: KeelRecord>(_ predicate: KeelPredicate<U>) -> Self where Row == KeelIncluded<T, U> {
        matching(predicate.expr)
    }

    /// Keep the objects at least one of whose referenced objects matches
    /// `predicate` (every one is still shown); live as above.
    public func `where`<U: KeelRecord>(_ predicate: KeelPredicate<U>) -> Self where Row == KeelIncludedMany<T, U> {
        matching(predicate.expr)
    }

    private func matching(_ expr: Expr) -> Self {
        var copy = self
        copy.related = related.map { Expr.allOf(exprs: [$0, expr]) } ?? expr
        return copy
    }

    /// Every matching object with the objects its reference names, in order: two
    /// reads whatever the number of objects (the objects, then every referenced
    /// object at once).
    public func all() throws -> [Row] {
        try query().allIncluding(field: field).map(decode)
    }

    /// Every matching object with the number of objects its reference names
    /// that exist — the count over the relation (a to-many vector's keys naming
    /// an object, repeats counted; 0 or 1 to-one) — in two reads, the second of
    /// the referenced collection's keys only (no referenced object is decoded).
    public func counts() throws -> [(object: T, count: Int)] {
        try query().countIncluding(field: field).map {
            (object: try T.keelStored($0.object.bytes), count: Int(clamping: $0.count))
        }
    }

    /// The result as an `AsyncSequence`: the current result first, then every
    /// changed result with its row-level diff — a change of a referenced object
    /// alone (an author renamed, a tag relabelled) lists the rows naming it as
    /// `updated`; other processes' commits arrive too (with `shareChanges`).
    /// Leaving the loop (or cancelling its task, or `cancel()`) ends the
    /// subscription. keel's listener buffers the undecoded deliveries; each is
    /// decoded in the consuming task. keel delivers a change as its diff and the
    /// rows it inserts or updates: the sequence keeps the list, decodes those
    /// rows alone and applies the diff to it (`Diff.apply(to:fresh:)`), so a
    /// rename that changes one row of a long list decodes one row.
    public func updates() -> KeelUpdates<KeelIncludingChange<Row>> {
        let (fetch, field, decode) = (self, field, decode)
        let shown = KeelShownRows<Row>()
        // Through the layer's sink: one call from keel per commit for every
        // list it changes, whatever the number of lists.
        return KeelUpdates(bufferingPolicy: .unbounded, subscribe: { bridge in
            let id = KeelDeliveries.shared.register(bridge)
            do {
                let s = try fetch.query().subscribeIncludingTo(
                    field: field, deliveries: KeelDeliveries.sink, id: id)
                return KeelSinkSubscription(s, id)
            } catch {
                KeelDeliveries.shared.unregister(id)
                throw error
            }
        }, decode: { raw in
            guard case .packedIncluding(let bytes) = raw.event else {
                throw KeelUpdates<KeelIncludingChange<Row>>.unexpected(raw)
            }
            let u = try KeelDeliveries.unpackIncluding(bytes)
            return KeelIncludingChange(objects: try shown.apply(u, decode), diff: u.diff)
        })
    }
}

/// The rows a live list across a relation shows, kept from one delivery to the
/// next for the one iterator that consumes them (a `KeelUpdates` is consumed
/// once); the lock only makes that sharing checkable.
final class KeelShownRows<Row: Sendable>: @unchecked Sendable {
    private let lock = NSLock()
    private var rows: [Row] = []

    /// The list after `update`: its inserted and updated rows decoded, the
    /// others kept.
    func apply(
        _ update: IncludingUpdate, _ decode: (IncludedObject) throws -> Row
    ) throws -> [Row] {
        lock.lock()
        defer { lock.unlock() }
        var at: [Int: IncludedObject] = [:]
        for c in update.changed { at[Int(c.index)] = c.row }
        try update.diff.apply(to: &rows) { i in
            guard let row = at[i] else {
                throw KeelError.Internal(message: "a live list's delivery lacks its row \(i)")
            }
            return try decode(row)
        }
        return rows
    }
}

extension Diff {
    /// Make `list`, the result this diff was made against, the new result: the
    /// rows at `inserted` and `updated` indices come from `fresh` (called with
    /// their index in the new result), every other row is `list`'s own, kept or
    /// moved. What a list view does with each delivery instead of taking the
    /// whole result again: a diff without moves (every diff of a commit that
    /// changes one object) removes and inserts its few rows where they are; one
    /// with moves rebuilds the list. The core's `Diff::apply_to`, Kotlin's
    /// `Diff.applyTo(list, fresh)`.
    ///
    ///     try change.diff.apply(to: &shown) { i in try decode(row(at: i)) }
    public func apply<T>(to list: inout [T], fresh: (Int) throws -> T) rethrows {
        if moved.isEmpty {
            for i in removed.reversed() { list.remove(at: Int(i)) }
            for j in inserted { list.insert(try fresh(Int(j)), at: Int(j)) }
            for j in updated { list[Int(j)] = try fresh(Int(j)) }
            return
        }
        let n = list.count + inserted.count - removed.count
        var out = [T?](repeating: nil, count: n)
        var gone = [Bool](repeating: false, count: list.count)
        for i in removed { gone[Int(i)] = true }
        for j in inserted { out[Int(j)] = try fresh(Int(j)) }
        for m in moved {
            gone[Int(m.from)] = true
            out[Int(m.to)] = list[Int(m.from)]
        }
        var rest = list.indices.filter { !gone[$0] }.makeIterator()
        for k in 0..<n where out[k] == nil {
            if let i = rest.next() { out[k] = list[i] }
        }
        for j in updated { out[Int(j)] = try fresh(Int(j)) }
        list = out.compactMap { $0 }
    }
}

extension KeelRawBridge: IncludingListener {
    /// A live list's delivery: counted and buffered undecoded, like a query's.
    func onUpdate(update: IncludingUpdate) throws {
        state.delivered()
        continuation.yield(KeelRawEvent(event: .including(update)))
    }
}

/// The layer's one batched-delivery sink (keel-ffi `batch.rs`): every live list
/// across a relation (`including(…).updates()`) of every database subscribes to
/// it under an id of its own, and keel hands over all the deliveries one commit
/// makes in **one** call — on keel's writer thread after the commit (`keel-feed`
/// for another process's commits; the subscribing thread for a list's first) —
/// instead of one call per list. `onBatch` only splits the batch by id and
/// buffers each span with its list; the consumer unpacks it.
final class KeelDeliveries: BatchListener, @unchecked Sendable {
    // SAFETY (of `@unchecked Sendable`): `bridges` and `next` are read and
    // written under `lock` only.
    static let shared = KeelDeliveries()
    /// keel's sink, made on first use.
    static let sink: Deliveries = deliveries(listener: shared)

    private let lock = NSLock()
    private var next: UInt64 = 0
    private var bridges: [UInt64: KeelRawBridge] = [:]

    /// A new id whose deliveries go to `bridge`.
    func register(_ bridge: KeelRawBridge) -> UInt64 {
        lock.lock()
        defer { lock.unlock() }
        next += 1
        bridges[next] = bridge
        return next
    }

    func unregister(_ id: UInt64) {
        lock.lock()
        bridges[id] = nil
        lock.unlock()
    }

    func onBatch(batch: DeliveryBatch) throws {
        let bytes = batch.bytes
        var spans: [(UInt64, Data)] = []
        spans.reserveCapacity(Int(batch.count))
        bytes.withUnsafeBytes { (raw: UnsafeRawBufferPointer) in
            var at = 0
            for _ in 0..<batch.count {
                guard at + 16 <= raw.count else { break }
                let id = UInt64(littleEndian: raw.loadUnaligned(fromByteOffset: at, as: UInt64.self))
                let len = Int(UInt64(littleEndian: raw.loadUnaligned(fromByteOffset: at + 8, as: UInt64.self)))
                guard at + 16 + len <= raw.count else { break }
                let start = bytes.startIndex + at + 16
                spans.append((id, bytes.subdata(in: start..<(start + len))))
                at += 16 + len
            }
        }
        for (id, span) in spans {
            lock.lock()
            let bridge = bridges[id]
            lock.unlock()
            guard let bridge else { continue }
            bridge.state.delivered()
            bridge.continuation.yield(KeelRawEvent(event: .packedIncluding(span)))
        }
    }

    /// One `including` delivery's span, unpacked (layout: keel-ffi `batch.rs`).
    static func unpackIncluding(_ data: Data) throws -> IncludingUpdate {
        let b = [UInt8](data)
        var at = 0
        func take(_ n: Int) throws -> ArraySlice<UInt8> {
            guard n >= 0, at + n <= b.count else {
                throw KeelError.Internal(message: "a live list's delivery is cut short")
            }
            defer { at += n }
            return b[at..<(at + n)]
        }
        func u32() throws -> UInt64 {
            var v: UInt64 = 0
            for (k, x) in try take(4).enumerated() { v |= UInt64(x) << (8 * UInt64(k)) }
            return v
        }
        func i64() throws -> Int64 {
            var v: UInt64 = 0
            for (k, x) in try take(8).enumerated() { v |= UInt64(x) << (8 * UInt64(k)) }
            return Int64(bitPattern: v)
        }
        func indices() throws -> [UInt64] {
            let n = try u32()
            var out: [UInt64] = []
            out.reserveCapacity(Int(n))
            for _ in 0..<n { out.append(try u32()) }
            return out
        }
        func object() throws -> StoredObject {
            let rowid = try i64()
            let n = Int(try u32())
            return StoredObject(rowid: rowid, bytes: Data(try take(n)))
        }
        let count = try u32()
        let removed = try indices()
        let inserted = try indices()
        var moved: [Move] = []
        let moves = try u32()
        for _ in 0..<moves {
            let from = try u32()
            moved.append(Move(from: from, to: try u32()))
        }
        let updated = try indices()
        var changed: [ChangedRow] = []
        let rows = try u32()
        for _ in 0..<rows {
            let index = try u32()
            let o = try object()
            var related: [StoredObject] = []
            let n = try u32()
            for _ in 0..<n { related.append(try object()) }
            changed.append(ChangedRow(index: index, row: IncludedObject(object: o, related: related)))
        }
        return IncludingUpdate(
            count: count,
            diff: Diff(removed: removed, inserted: inserted, moved: moved, updated: updated),
            changed: changed)
    }
}

/// A list subscribed through `KeelDeliveries`: cancelling it also drops its id.
final class KeelSinkSubscription: KeelCancellable, @unchecked Sendable {
    // SAFETY (of `@unchecked Sendable`): both are immutable; the subscription
    // is thread-safe.
    private let subscription: IncludingSubscription
    private let id: UInt64

    init(_ s: IncludingSubscription, _ id: UInt64) {
        subscription = s
        self.id = id
    }

    func cancel() {
        subscription.cancel()
        KeelDeliveries.shared.unregister(id)
    }

    func isActive() -> Bool { subscription.isActive() }

    func ended() async throws { try await subscription.ended() }
}
