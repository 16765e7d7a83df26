// The thin Kotlin layer of keel's AAR (package dev.keel), over the UniFFI-generated
// package dev.keel.ffi.
//
// * `Keel.openAsync(path, schema, options)` — a suspend fun that never blocks the
//   caller (the open runs on keel's threads; the first call of a process also
//   loads the native library, on `Dispatchers.IO`).
// * `Keel.open(path, schema, options, scope)` — open progress as a `Flow` plus the
//   database as a `Deferred`, for a splash screen.
// * `query.updates()`, `db.objectUpdates(...)`, `dictionary.changes(key)` —
//   subscriptions as cold `Flow`s: collecting subscribes, cancelling the collector
//   cancels the subscription.
//
// * Typed.kt — the typed API over models from `keel codegen kotlin` (data classes,
//   `db.write { insert(post) }`, `db.fetch(Post).where(Post.priority ge 2)`);
//   FlatBuffers.kt — the FlatBuffers runtime those models call.
//
// keel calls listeners on its own threads; these wrappers only hand values to
// channels, so collectors run in whatever context they are collected in
// (`lifecycleScope` / `Dispatchers.Main` in an app).
package dev.keel

import dev.keel.ffi.Database
import dev.keel.ffi.DictValue
import dev.keel.ffi.DictionaryListener
import dev.keel.ffi.Dictionary
import dev.keel.ffi.KeelException
import dev.keel.ffi.MemoryReleased
import dev.keel.ffi.ObjectEvent
import dev.keel.ffi.OpenOptions
import dev.keel.ffi.OpenProgress
import dev.keel.ffi.OpenProgressListener
import dev.keel.ffi.Query
import dev.keel.ffi.QueryUpdate
import dev.keel.ffi.Value
import kotlinx.coroutines.CoroutineScope
import kotlinx.coroutines.Deferred
import kotlinx.coroutines.Dispatchers
import kotlinx.coroutines.async
import kotlinx.coroutines.launch
import kotlinx.coroutines.channels.Channel
import kotlinx.coroutines.channels.awaitClose
import kotlinx.coroutines.flow.Flow
import kotlinx.coroutines.flow.buffer
import kotlinx.coroutines.flow.callbackFlow
import kotlinx.coroutines.flow.conflate
import kotlinx.coroutines.flow.consumeAsFlow
import kotlinx.coroutines.flow.map
import kotlinx.coroutines.withContext

/** keel's entry points for Kotlin. */
object Keel {
    /**
     * Open (or create) the database at [path] with the FlatBuffers schema text
     * [schema]. Suspends until ready; the whole open — including a slow WAL sync —
     * runs on keel's threads, never on the caller's. The first call of a process
     * also loads keel's native library (JNA binds it: 100–200 ms), on
     * [Dispatchers.IO], not on the caller's thread.
     */
    suspend fun openAsync(path: String, schema: String, options: OpenOptions = OpenOptions()): Database {
        KeelNative.load()
        return dev.keel.ffi.openAsync(path, schema, options, null)
    }

    /**
     * Start opening in [scope] and return at once: [Opening.progress] emits each
     * phase and both milestones, and completes after the final `Durable` event
     * (`done`), which can come after [Opening.database] completed, while the open
     * barrier still runs (or at the error); [Opening.database] completes with the
     * database when it is readable (or throws the typed KeelException).
     */
    fun open(path: String, schema: String, options: OpenOptions = OpenOptions(), scope: CoroutineScope): Opening {
        val channel = Channel<OpenProgress>(Channel.UNLIMITED)
        val listener = object : OpenProgressListener {
            override fun onProgress(progress: OpenProgress) {
                channel.trySend(progress)
                // The last event is `Durable` (`done`), which can come after the
                // database was handed over at `Readable`.
                if (progress.done) channel.close()
            }
        }
        val db = scope.async {
            val opened = try {
                KeelNative.load()
                dev.keel.ffi.openAsync(path, schema, options, listener)
            } catch (e: Throwable) {
                channel.close()
                throw e
            }
            // A barrier sync that fails sends no `done` event: end the flow then.
            scope.launch {
                try {
                    opened.durable()
                } catch (e: Throwable) {
                    channel.close()
                }
            }
            opened
        }
        return Opening(channel.consumeAsFlow(), db)
    }

    /** An open in progress (see [Keel.open]). */
    class Opening(val progress: Flow<OpenProgress>, val database: Deferred<Database>)
}

/**
 * The query's results as a [Flow]: the current result first, then each changed
 * result with its row-level diff. The buffer is unbounded and no update is ever
 * dropped, because each diff is relative to the previous update. It ends with
 * `KeelException.Closed` when the database closes (see Live.kt).
 */
/**
 * Android's memory signal, passed on: call it from `Application.onTrimMemory(level)`
 * (or a `ComponentCallbacks2`). From `TRIM_MEMORY_RUNNING_LOW` (10) up — the system
 * is short of memory, or the app's UI went to the background — keel gives memory
 * back with [Database.releaseMemory]: the in-memory vector copies and the idle
 * reader connections go, and are rebuilt lazily; nothing is lost and nothing waits.
 * Returns what was released, or null for a level that asks for nothing.
 */
fun Database.onTrimMemory(level: Int): MemoryReleased? =
    if (level >= TRIM_MEMORY_RUNNING_LOW) releaseMemory() else null

/** `ComponentCallbacks2.TRIM_MEMORY_RUNNING_LOW`, without the Android SDK on the classpath. */
const val TRIM_MEMORY_RUNNING_LOW: Int = 10

fun Query.updates(): LiveFlow<QueryUpdate> {
    val state = LiveState()
    val flow = liveFlow<QueryUpdate>(state, { subscribe(it).handle() }) { trySend(it as QueryUpdate) }
    return LiveFlow(flow.buffer(Channel.UNLIMITED), state)
}

/**
 * One object's versions as a [Flow]; it completes after [ObjectEvent.Deleted], and
 * ends with `KeelException.Closed` when the database closes.
 */
fun Database.objectUpdates(collection: String, key: List<Value>): LiveFlow<ObjectEvent> {
    val state = LiveState()
    val flow = liveFlow<ObjectEvent>(state, { subscribeObject(collection, key, it).handle() }) { raw ->
        val event = raw as ObjectEvent
        trySend(event)
        if (event is ObjectEvent.Deleted) channel.close()
    }
    return LiveFlow(flow.buffer(Channel.UNLIMITED), state)
}

/** A dictionary key's value as a [Flow] (null when removed); slow collectors see the latest. */
fun Dictionary.changes(key: String): Flow<DictValue?> = callbackFlow {
    val sub = subscribe(key, object : DictionaryListener {
        override fun onChange(key: String, value: DictValue?) {
            trySend(value)
        }
    })
    awaitClose { sub.cancel() }
}.conflate()

/**
 * Loads keel's native library once per process, off the caller's thread: JNA
 * binding the library takes 100–200 ms, which an app's first `Keel.openAsync`
 * must not spend on its main thread. The callback threads are set up first
 * ([KeelThreads]), since that must happen before the library loads.
 */
internal object KeelNative {
    @Volatile private var loaded = false

    /** The thread that loaded the library (what a test checks is not the caller's). */
    @Volatile internal var loadedOn: Thread? = null
        private set

    suspend fun load() {
        if (loaded) return
        withContext(Dispatchers.IO) {
            KeelThreads.keepAttached()
            dev.keel.ffi.uniffiEnsureInitialized()
            if (loadedOn == null) loadedOn = Thread.currentThread()
        }
        loaded = true
    }
}

/** Stores [obj] under [key] (keel verifies it against the schema). */
fun Dictionary.setObject(key: String, obj: KeelObject) =
    set(key, DictValue.Object(obj.keelModel().collectionName, obj.encode()))

/**
 * The object of [model] stored under [key], or null; `KeelException.TypeMismatch`
 * when the key holds something else (another collection's object, a string …).
 */
fun <T : Any> Dictionary.getObject(model: KeelModel<T, *>, key: String): T? =
    typedObject(model, key, get(key))

/**
 * The object of [model] under [key] as a [Flow] (null when removed), latest only;
 * a value of another type ends it with `KeelException.TypeMismatch`. Decoding runs
 * in the collector's context.
 */
fun <T : Any> Dictionary.objectChanges(model: KeelModel<T, *>, key: String): Flow<T?> =
    changes(key).map { typedObject(model, key, it) }

private fun <T : Any> typedObject(model: KeelModel<T, *>, key: String, value: DictValue?): T? = when {
    value == null -> null
    value is DictValue.Object && value.collection == model.collectionName -> model.decode(value.bytes)
    else -> throw KeelException.TypeMismatch("dictionary key $key holds $value, not a ${model.collectionName}")
}

/**
 * keel calls Kotlin back on its own native threads: the writer (write bodies,
 * live-query, object, `including` and nearest deliveries, batches, the wake of a
 * suspended `write`), `keel-feed` (other
 * processes' commits), the open thread (progress, migrations, the key provider),
 * the dictionary's notifier. JNA's default
 * attaches such a thread to the JVM for each call and detaches it after, which
 * costs more than the call itself; keel's threads stay attached instead (as
 * daemon threads named `keel`, detached when they exit), as JNA's
 * [CallbackThreadInitializer] allows, for every listener the FFI has. It takes
 * effect only for callbacks whose native stubs do not exist yet, so it runs
 * before the library loads: from [KeelNative.load], which `Keel.openAsync` and
 * `Keel.open` call first.
 */
internal object KeelThreads {
    private val done = java.util.concurrent.atomic.AtomicBoolean(false)

    fun keepAttached() {
        if (!done.compareAndSet(false, true)) return
        val stay = com.sun.jna.CallbackThreadInitializer(true, false, "keel")
        for (cb in listOf<com.sun.jna.Callback>(
            dev.keel.ffi.uniffiCallbackInterfaceWriteBody.`run`,
            dev.keel.ffi.uniffiCallbackInterfaceQueryListener.`onUpdate`,
            dev.keel.ffi.uniffiCallbackInterfaceObjectListener.`onEvent`,
            dev.keel.ffi.uniffiCallbackInterfaceIncludingListener.`onUpdate`,
            dev.keel.ffi.uniffiCallbackInterfaceBatchListener.`onBatch`,
            dev.keel.ffi.uniffiCallbackInterfaceNearestListener.`onUpdate`,
            dev.keel.ffi.uniffiCallbackInterfaceDictionaryListener.`onChange`,
            dev.keel.ffi.uniffiCallbackInterfaceOpenProgressListener.`onProgress`,
            dev.keel.ffi.uniffiCallbackInterfaceMigrationProgressListener.`onProgress`,
            dev.keel.ffi.uniffiCallbackInterfaceObjectMigration.`migrate`,
            dev.keel.ffi.uniffiCallbackInterfaceKeyProvider.`dataKey`,
            // The wake of every suspending FFI call (a write's, on the writer thread).
            dev.keel.ffi.uniffiRustFutureContinuationCallbackImpl,
        )) {
            com.sun.jna.Native.setCallbackThreadInitializer(cb, stay)
        }
    }
}
