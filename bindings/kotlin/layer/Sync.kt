// Sync with PostgreSQL through keel-relay in the Kotlin layer (docs/sync.md):
// `db.startSync(url) { token }` starts keel's sync loop and returns a [KeelSync]
// whose `status` is a `StateFlow<SyncStatus>` (latest only, like keel's own
// status stream) and whose `refusals` is a `SharedFlow` of refused operations
// (already rolled back locally). While a snapshot arrives, each status carries
// its progress (`snapshot?.rowsApplied` of `rowsTotal`).
//
//     val sync = db.startSync("ws://relay:7420/sync", scopes = listOf("blog.Post")) { auth.jwt() }
//     scope.launch { sync.status.collect { showBadge(it.pendingOps, it.connected) } }
//     sync.waitUploaded()
//     sync.close()
//
// keel calls the token lambda on its `keel-sync` thread (at each connect and after
// the token expired) and the listener on `keel-sync-status` / `keel-sync-events`;
// the layer only sets the flows there.
package dev.keel

import dev.keel.ffi.Database
import dev.keel.ffi.RefusedOp
import dev.keel.ffi.SyncHandle
import dev.keel.ffi.SyncListener
import dev.keel.ffi.SyncOptions
import dev.keel.ffi.SyncStatus
import dev.keel.ffi.TokenProvider
import kotlinx.coroutines.flow.MutableSharedFlow
import kotlinx.coroutines.flow.MutableStateFlow
import kotlinx.coroutines.flow.SharedFlow
import kotlinx.coroutines.flow.StateFlow
import kotlinx.coroutines.flow.asSharedFlow
import kotlinx.coroutines.flow.asStateFlow

/** A running sync client: its status, its refusals, and control. */
class KeelSync internal constructor(
    private val db: Database,
    /** The FFI handle. */
    val handle: SyncHandle,
    /** Where sync stands, latest first. */
    val status: StateFlow<SyncStatus>,
    /** Each batch of refused (and locally rolled back) operations. */
    val refusals: SharedFlow<List<RefusedOp>>,
) : AutoCloseable {
    /** Closes the connection until [resume]; local writes keep queueing. */
    fun pause() = handle.pause()

    /** Connects again after [pause]. */
    fun resume() = handle.resume()

    /**
     * Suspends until every operation committed before the call is acknowledged by
     * the relay (or refused); `false` after [timeoutMillis] with some still pending.
     */
    suspend fun waitUploaded(timeoutMillis: Long = 3_600_000L): Boolean =
        handle.waitUploaded(db, timeoutMillis.toULong())

    /** Stops the sync loop (what is not uploaded stays queued). */
    override fun close() = handle.stop()
}

/**
 * Starts syncing this database with the relay at [url]. [scopes]: the collections
 * to download (empty: every synced collection). [token] gives the JWT (null: none
 * now; keel retries with backoff).
 */
fun Database.startSync(
    url: String,
    scopes: List<String> = emptyList(),
    batchOps: Int = 0,
    token: () -> String?,
): KeelSync {
    val state = MutableStateFlow(SyncStatus(false, false, false, 0uL, null, null, null))
    val refused = MutableSharedFlow<List<RefusedOp>>(extraBufferCapacity = 64)
    val listener = object : SyncListener {
        override fun onStatus(status: SyncStatus) {
            state.value = status
        }

        override fun onRefused(ops: List<RefusedOp>) {
            refused.tryEmit(ops)
        }
    }
    val tokens = object : TokenProvider {
        override fun token(): String? = token.invoke()
    }
    val handle = sync(SyncOptions(url, scopes, batchOps.toUInt()), tokens, listener)
    return KeelSync(this, handle, state.asStateFlow(), refused.asSharedFlow())
}
