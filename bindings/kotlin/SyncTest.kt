// Sync from Kotlin, compiled and run with KeelTest.kt: offline (no relay listens),
// a write to a `(sync)` collection stays queued, the status StateFlow reports the
// failed connection and the pending operation, the token lambda is asked, and
// pause / resume / close work; an unknown scope is a typed error.

import dev.keel.startSync
import dev.keel.ffi.*
import kotlinx.coroutines.flow.first
import kotlinx.coroutines.withTimeout
import java.io.File

const val SYNCED_FBS = """
attribute "sync";
namespace demo;
table Note (entity, sync: "notes") {
  id: string (primary);
  text: string;
  likes: long (sync: counter);
}
root_type Note;
"""

fun registerSyncTests() {
    test("sync: offline writes queue; the status flow says why and how many") { dir ->
        val db = openAsync(File(dir, "sync.db").path, SYNCED_FBS, OpenOptions(commitSync = SyncPolicy.Off), null)
        val note = db.encodeJson("demo.Note", """{"id": "n1", "text": "offline", "likes": 2}""")
        db.write(listOf(WriteOp.Insert("demo.Note", note)))
        var asked = 0
        val sync = db.startSync("ws://127.0.0.1:1/sync") { asked++; "not-checked-offline" }
        val failed = withTimeout(20_000) { sync.status.first { it.lastError != null } }
        // No relay, so no snapshot under way.
        check(!failed.connected && failed.pendingOps == 1uL && failed.snapshot == null) { "$failed" }
        check(!sync.waitUploaded(50)) { "nothing can be acknowledged offline" }
        sync.pause()
        sync.resume()
        sync.close()
        try {
            db.startSync("ws://127.0.0.1:1/sync", scopes = listOf("demo.Nope")) { null }
            check(false) { "an unknown scope is refused" }
        } catch (e: KeelException.UnknownCollection) {
        }
        db.close()
    }
}
