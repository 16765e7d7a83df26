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
    public func updates() -> KeelUpdates<KeelIncludingChange<T, U>> {
        let (fetch, field) = (self, field)
        return KeelUpdates(bufferingPolicy: .unbounded, subscribe: { bridge in
            try fetch.query().subscribeIncluding(field: field, listener: bridge)
        }, decode: { raw in
            guard case .including(let u) = raw.event else {
                throw KeelUpdates<KeelIncludingChange<T, U>>.unexpected(raw)
            }
            return KeelIncludingChange(objects: try u.objects.map(Self.decode), diff: u.diff)
        })
    }

    static func decode(_ row: IncludedObject) throws -> KeelIncluded<T, U> {
        KeelIncluded(
            object: try T.keelStored(row.object.bytes),
            related: try row.related.first.map { try U.keelStored($0.bytes) })
    }
}

extension KeelRawBridge: IncludingListener {
    /// A live list's delivery: counted and buffered undecoded, like a query's.
    func onUpdate(update: IncludingUpdate) throws {
        state.delivered()
        continuation.yield(KeelRawEvent(event: .including(update)))
    }
}
