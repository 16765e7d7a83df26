// Live queries and live objects for SwiftUI: `@Observable` classes (the
// Observation module, iOS 17 / macOS 14, and Linux) over the latest-only
// subscriptions of KeelTyped.swift.
//
// ```swift
// @MainActor @Observable final class FeedModel {
//     let feed: KeelLiveQuery<Post>
//     init(db: Database) throws {
//         feed = try db.fetch(Post.self).sorted(by: Post.priority.descending).observe()
//     }
// }
// // in a view: List(model.feed.objects) { … }  — no empty first frame
// ```
//
// * The first result is read synchronously when the observable is created, so
//   the first frame already shows it.
// * Each later result arrives latest-only: keel's writer buffers its bytes and
//   returns; they are decoded in a task off the main actor, then assigned on the
//   main actor (the class is `@MainActor`), only when they differ.
// * The subscription belongs to the observable: when it is released, keel's
//   listener is cancelled (`Database.liveSubscriptions()` drops by one).

#if canImport(Observation)
import Foundation
import Observation

/// Holds what keeps an observable's subscription going and ends it when the
/// observable is released (its deinit runs on whatever thread releases it).
final class KeelObservationLifetime: @unchecked Sendable {
    private let lock = NSLock()
    private let cancelSubscription: @Sendable () -> Void
    private var task: Task<Void, Never>?

    init(cancel: @escaping @Sendable () -> Void) { cancelSubscription = cancel }

    func start(_ t: Task<Void, Never>) {
        lock.lock()
        task = t
        lock.unlock()
    }

    deinit {
        task?.cancel()
        cancelSubscription()
    }
}

/// A live query as an `@Observable` value for SwiftUI: `objects` is the query's
/// current result, kept up to date on the main actor. Make one with
/// `db.fetch(Post.self)….observe()`.
///
/// `objects` holds the result read synchronously at creation, so a view has no
/// empty first frame. After each commit that changes the result, keel's writer
/// only hands the result's bytes over; they are decoded in a task off the main
/// actor, and `objects` is assigned on the main actor when it differs. Updates
/// are conflated: a burst of writes may show only its last result (use
/// `updates()` for every diff). Releasing the observable ends its subscription.
@available(macOS 14, iOS 17, tvOS 17, watchOS 10, *)
@MainActor
@Observable
public final class KeelLiveQuery<T: KeelRecord> {
    /// The query's current result, in query order.
    public private(set) var objects: [T]
    /// Set when the subscription ended with an error (the bytes of a result did
    /// not decode, or the database closed); `objects` keeps the last result.
    public private(set) var error: KeelError?
    @ObservationIgnored private let lifetime: KeelObservationLifetime

    /// Reads `fetch`'s result now (on the calling thread; keel reads never wait
    /// for the writer) and follows it. Throws the read's `KeelError`.
    public init(_ fetch: KeelFetch<T>) throws {
        objects = try fetch.all()
        let updates = fetch.latest().started()
        lifetime = KeelObservationLifetime(cancel: { updates.cancel() })
        lifetime.start(Task { [weak self] in
            do {
                // `next()` is nonisolated: each result is decoded off the main
                // actor, and only the assignment below runs on it.
                for try await result in updates {
                    guard let self else { return }
                    if self.objects != result { self.objects = result }
                }
            } catch {
                self?.error = (error as? KeelError) ?? KeelError.Internal(message: "\(error)")
            }
        })
    }
}

/// One object as an `@Observable` value for SwiftUI: `object` is its current
/// version, nil once deleted. Make one with `db.observe(Post.self, key: "p1")`.
///
/// Like `KeelLiveQuery`: the first version is read synchronously at creation,
/// later versions are decoded off the main actor and assigned on it (latest
/// only), and releasing the observable ends the subscription. It follows the
/// object's lifetime: after a delete (or when there is no such object at
/// creation) `object` is nil and stays nil; observe a query on the key to see
/// it come back.
@available(macOS 14, iOS 17, tvOS 17, watchOS 10, *)
@MainActor
@Observable
public final class KeelLiveObject<T: KeelRecord> {
    /// The object's current version; nil when deleted or absent.
    public private(set) var object: T?
    /// Set when the subscription ended with an error; `object` keeps the last version.
    public private(set) var error: KeelError?
    @ObservationIgnored private let lifetime: KeelObservationLifetime

    /// Reads the object of `type` with `key` now and follows it.
    public init(_ db: Database, _ type: T.Type, key: T.Key) throws {
        object = try db.get(type, key: key)
        let updates = db.latest(of: type, key: key).started()
        lifetime = KeelObservationLifetime(cancel: { updates.cancel() })
        lifetime.start(Task { [weak self] in
            do {
                for try await change in updates {
                    guard let self else { return }
                    switch change {
                    case .updated(let v): if self.object != v { self.object = v }
                    case .deleted: if self.object != nil { self.object = nil }
                    }
                }
            } catch {
                self?.error = (error as? KeelError) ?? KeelError.Internal(message: "\(error)")
            }
        })
    }
}

extension KeelFetch {
    /// This query as an `@Observable` live query (see `KeelLiveQuery`): its
    /// result is read now, so `objects` is ready before the first frame.
    @available(macOS 14, iOS 17, tvOS 17, watchOS 10, *)
    @MainActor
    public func observe() throws -> KeelLiveQuery<T> {
        try KeelLiveQuery(self)
    }
}

extension Database {
    /// The object of `type` with `key` as an `@Observable` live object (see
    /// `KeelLiveObject`): its current version is read now.
    @available(macOS 14, iOS 17, tvOS 17, watchOS 10, *)
    @MainActor
    public func observe<T: KeelRecord>(_ type: T.Type, key: T.Key) throws -> KeelLiveObject<T> {
        try KeelLiveObject(self, type, key: key)
    }
}
#endif
