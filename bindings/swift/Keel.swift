// The thin Swift layer of keel's Swift package (module `Keel`), over the
// UniFFI-generated module `KeelFFI` (re-exported: `import Keel` gives both).
//
// * `Keel.openAsync(path:schema:options:)` — `try await`, never blocks the caller.
// * `Keel.open(path:schema:options:)` — open progress as an `AsyncStream` plus the
//   database as a `Task`, for a splash screen.
// * `query.updates()`, `db.objectUpdates(...)`, `dictionary.changes(key:)` —
//   subscriptions as `AsyncSequence`s; cancelling the consuming task (or breaking
//   out of the `for await` loop) cancels the subscription.
//
// * `db.rotateKey(to:onProgress:)` — `try await`: a new key for the open database
//   (or plaintext with `nil`), progress in a closure called on keel's thread.
//
// The typed API over models from `keel codegen swift` (`db.write { txn in … }`,
// `db.fetch(Post.self).where(…)`, typed live queries) is in KeelTyped.swift; the
// FlatBuffers runtime those models use is KeelWire.swift.
//
// keel calls listeners on its own threads; these wrappers only yield into
// continuations (thread-safe), so your `for await` loop runs wherever you run it —
// on the main actor in a SwiftUI `.task { }`.

import Foundation
@_exported import KeelFFI

/// keel's entry points for Swift.
public enum Keel {
    /// Open (or create) the database at `path` with the FlatBuffers schema text
    /// `schema`. Suspends until ready; the whole open — including a multi-second
    /// WAL sync on some iPhones — runs on keel's threads, never on the caller's.
    public static func openAsync(
        path: String,
        schema: String,
        options: OpenOptions = OpenOptions()
    ) async throws -> Database {
        try await KeelFFI.openAsync(path: path, schemaFbs: schema, options: options, progress: nil)
    }

    /// Start opening and return at once: `database` completes with the database
    /// as soon as it is readable (or with the error); `progress` yields each phase
    /// and finishes with the final `done` event — the `durable` milestone, which
    /// can come after `database` completed while the open barrier sync still runs
    /// (or at the error).
    ///
    /// ```swift
    /// let opening = Keel.open(path: url.path, schema: schemaText)
    /// for await p in opening.progress { splash.progress = Double(p.fraction) }
    /// let db = try await opening.database.value
    /// ```
    public static func open(
        path: String,
        schema: String,
        options: OpenOptions = OpenOptions()
    ) -> Opening {
        let (stream, continuation) = AsyncStream<OpenProgress>.makeStream(bufferingPolicy: .unbounded)
        let listener = ProgressBridge(continuation)
        let task = Task<Database, Error> {
            do {
                let db = try await KeelFFI.openAsync(
                    path: path, schemaFbs: schema, options: options, progress: listener)
                // The database is handed over when readable; the stream goes on to
                // the final `done` (durable) event, which the bridge ends it on. A
                // barrier sync that fails sends no such event: end the stream then.
                Task {
                    do { try await db.durable() } catch { continuation.finish() }
                }
                return db
            } catch {
                continuation.finish()
                throw error
            }
        }
        return Opening(progress: stream, database: task)
    }

    /// An open in progress (see `Keel.open`).
    public struct Opening: Sendable {
        /// Progress events, in order; finishes when the open finishes.
        public let progress: AsyncStream<OpenProgress>
        /// The open itself.
        public let database: Task<Database, Error>
    }
}

extension Database {
    /// Move this open database to the key `to` gives (`nil`: plaintext, an
    /// export), calling `onProgress` with each step on keel's rotation thread
    /// (`keel-rotate`: hop to the main actor yourself to update UI). Suspends
    /// until the new file is the database; the database stays open meanwhile,
    /// and writes made meanwhile land in the new file. Throws the typed
    /// `KeelError` (`.Locked` when another process has the file open: suspend it
    /// first) and then the old key stays.
    ///
    /// ```swift
    /// let key = Encryption(key: .provider(provider: KeychainKeyProvider(service: "app.v2")), plaintextHeader: true)
    /// let report = try await db.rotateKey(to: key) { p in print(p.step, p.fraction) }
    /// ```
    public func rotateKey(
        to: Encryption?,
        onProgress: @escaping @Sendable (RotateProgress) -> Void
    ) async throws -> RotateReport {
        try await rotateKey(to: to, progress: RotateProgressBridge(onProgress))
    }
}

final class RotateProgressBridge: RotateProgressListener, @unchecked Sendable {
    let handler: @Sendable (RotateProgress) -> Void
    init(_ h: @escaping @Sendable (RotateProgress) -> Void) { handler = h }
    func onProgress(progress: RotateProgress) throws { handler(progress) }
}

final class ProgressBridge: OpenProgressListener, @unchecked Sendable {
    let continuation: AsyncStream<OpenProgress>.Continuation
    init(_ c: AsyncStream<OpenProgress>.Continuation) { continuation = c }
    func onProgress(progress: OpenProgress) throws {
        continuation.yield(progress)
        if progress.done { continuation.finish() }
    }
}

final class QueryBridge: QueryListener, @unchecked Sendable {
    let continuation: AsyncThrowingStream<QueryUpdate, Error>.Continuation
    init(_ c: AsyncThrowingStream<QueryUpdate, Error>.Continuation) { continuation = c }
    func onUpdate(update: QueryUpdate) throws { continuation.yield(update) }
}

final class ObjectBridge: ObjectListener, @unchecked Sendable {
    let continuation: AsyncThrowingStream<ObjectEvent, Error>.Continuation
    init(_ c: AsyncThrowingStream<ObjectEvent, Error>.Continuation) { continuation = c }
    func onEvent(event: ObjectEvent) throws {
        continuation.yield(event)
        if case .deleted = event { continuation.finish() }
    }
}

final class DictionaryBridge: DictionaryListener, @unchecked Sendable {
    let continuation: AsyncStream<DictValue?>.Continuation
    init(_ c: AsyncStream<DictValue?>.Continuation) { continuation = c }
    func onChange(key: String, value: DictValue?) throws { continuation.yield(value) }
}

extension Query {
    /// The query's results as an `AsyncSequence`: the current result first, then
    /// each changed result with its row-level `diff`. Every update is buffered (each
    /// diff is relative to the previous update, so none may be skipped).
    public func updates() -> AsyncThrowingStream<QueryUpdate, Error> {
        AsyncThrowingStream(bufferingPolicy: .unbounded) { continuation in
            do {
                let sub = try self.subscribe(listener: QueryBridge(continuation))
                continuation.onTermination = { _ in sub.cancel() }
            } catch {
                continuation.finish(throwing: error)
            }
        }
    }
}

extension Database {
    /// One object's versions as an `AsyncSequence`; it ends after `.deleted`.
    public func objectUpdates(collection: String, key: [Value]) -> AsyncThrowingStream<ObjectEvent, Error> {
        AsyncThrowingStream(bufferingPolicy: .bufferingNewest(1)) { continuation in
            do {
                let sub = try self.subscribeObject(
                    collection: collection, key: key, listener: ObjectBridge(continuation))
                continuation.onTermination = { _ in sub.cancel() }
            } catch {
                continuation.finish(throwing: error)
            }
        }
    }
}

extension KeelDictionary {
    /// A key's value as an `AsyncSequence`: the current value, then each change
    /// (`nil` when removed). A slow consumer sees the latest value.
    public func changes(key: String) -> AsyncStream<DictValue?> {
        AsyncStream(bufferingPolicy: .bufferingNewest(1)) { continuation in
            let sub = self.subscribe(key: key, listener: DictionaryBridge(continuation))
            continuation.onTermination = { _ in sub.cancel() }
        }
    }
}

#if canImport(UIKit) && !os(watchOS)
import UIKit

extension Database {
    /// Gives memory back on every memory warning, as iOS expects of an app that
    /// wants to stay alive: each `UIApplication.didReceiveMemoryWarningNotification`
    /// calls `releaseMemory()` (the in-memory vector copies and the idle reader
    /// connections go, rebuilt lazily; nothing is lost and nothing waits). Keep
    /// the returned token for as long as the database is open, and pass it to
    /// `NotificationCenter.default.removeObserver(_:)` to stop.
    @MainActor
    public func releaseMemoryOnWarnings() -> NSObjectProtocol {
        NotificationCenter.default.addObserver(
            forName: UIApplication.didReceiveMemoryWarningNotification,
            object: nil,
            queue: nil
        ) { [weak self] _ in
            _ = self?.releaseMemory()
        }
    }
}
#endif
