// Sync with PostgreSQL through keel-relay in the Swift layer (docs/sync.md):
// `db.startSync(url:scopes:token:)` starts keel's sync loop and returns a
// `KeelSync` whose `status` is an `AsyncStream<SyncStatus>` (newest only) and
// whose `refusals` is an `AsyncStream<[RefusedOp]>` (operations the relay
// refused, already rolled back locally). While a snapshot arrives, each
// status carries its progress (`snapshot?.rowsApplied` of `rowsTotal`).
//
//     let sync = try db.startSync(url: "ws://relay:7420/sync", scopes: ["blog.Post"]) { auth.jwt() }
//     Task { for await s in sync.status { badge = s.pendingOps } }
//     _ = try await sync.waitUploaded()
//     sync.close()
//
// keel calls the token closure on its `keel-sync` thread and the listener on
// `keel-sync-status` / `keel-sync-events`; the bridge only yields into the streams.

import Foundation

final class SyncBridge: SyncListener, @unchecked Sendable {
    let statuses: AsyncStream<SyncStatus>.Continuation
    let refused: AsyncStream<[RefusedOp]>.Continuation
    init(_ s: AsyncStream<SyncStatus>.Continuation, _ r: AsyncStream<[RefusedOp]>.Continuation) {
        statuses = s
        refused = r
    }
    func onStatus(status: SyncStatus) throws { statuses.yield(status) }
    func onRefused(ops: [RefusedOp]) throws { refused.yield(ops) }
}

final class TokenBridge: TokenProvider, @unchecked Sendable {
    let provide: @Sendable () -> String?
    init(_ provide: @escaping @Sendable () -> String?) { self.provide = provide }
    func token() throws -> String? { provide() }
}

/// A running sync client: its status, its refusals, and control.
public final class KeelSync: @unchecked Sendable {
    /// The FFI handle.
    public let handle: SyncHandle
    /// Where sync stands (each change, newest only).
    public let status: AsyncStream<SyncStatus>
    /// Each batch of refused (and locally rolled back) operations.
    public let refusals: AsyncStream<[RefusedOp]>
    private let db: Database
    private let statusContinuation: AsyncStream<SyncStatus>.Continuation
    private let refusalContinuation: AsyncStream<[RefusedOp]>.Continuation

    init(
        db: Database, handle: SyncHandle,
        status: (AsyncStream<SyncStatus>, AsyncStream<SyncStatus>.Continuation),
        refusals: (AsyncStream<[RefusedOp]>, AsyncStream<[RefusedOp]>.Continuation)
    ) {
        self.db = db
        self.handle = handle
        self.status = status.0
        self.statusContinuation = status.1
        self.refusals = refusals.0
        self.refusalContinuation = refusals.1
    }

    /// Closes the connection until `resume()`; local writes keep queueing.
    public func pause() { handle.pause() }

    /// Connects again after `pause()`.
    public func resume() { handle.resume() }

    /// Waits until every operation committed before the call is acknowledged by
    /// the relay (or refused); `false` after `timeout` seconds with some still
    /// pending. (A `TimeInterval`, not `Duration`, which needs iOS 16 / macOS 13.)
    public func waitUploaded(timeout: TimeInterval = 3600) async throws -> Bool {
        let ms = UInt64((max(0, timeout) * 1000).rounded())
        return try await handle.waitUploaded(db: db, timeoutMs: ms)
    }

    /// Stops the sync loop (what is not uploaded stays queued) and ends the streams.
    public func close() {
        handle.stop()
        statusContinuation.finish()
        refusalContinuation.finish()
    }
}

extension Database {
    /// Starts syncing this database with the relay at `url`. `scopes`: the
    /// collections to download (empty: every synced collection). `token` gives
    /// the JWT (nil: none now; keel retries with backoff).
    public func startSync(
        url: String, scopes: [String] = [], batchOps: UInt32 = 0,
        token: @escaping @Sendable () -> String?
    ) throws -> KeelSync {
        let status = AsyncStream<SyncStatus>.makeStream(bufferingPolicy: .bufferingNewest(1))
        let refusals = AsyncStream<[RefusedOp]>.makeStream(bufferingPolicy: .unbounded)
        let handle = try sync(
            options: SyncOptions(url: url, scopes: scopes, batchOps: batchOps),
            tokenProvider: TokenBridge(token),
            listener: SyncBridge(status.continuation, refusals.continuation))
        return KeelSync(
            db: self, handle: handle,
            status: (status.stream, status.continuation),
            refusals: (refusals.stream, refusals.continuation))
    }
}
