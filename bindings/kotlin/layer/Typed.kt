// keel's typed Kotlin API (package dev.keel): what apps use with the data classes
// `keel codegen kotlin schema.fbs out/` generates. The untyped API (bytes, string
// field names, dev.keel.ffi.Expr) stays for tools; this one is checked by the compiler.
//
//   val db = Keel.openAsync(path, BlogSchema.FBS)
//   db.write { insert(post); upsert(p2); delete(Post, "p1") }        // one transaction, run inside it
//   db.write { val c = get(Post, "p1")!!; update(c.copy(priority = c.priority + 1)) }
//   db.change(Post, "p1") { it.copy(priority = it.priority + 1) }     // field-wise, keeps the rest
//   val p: Post? = db.get(Post, "p1")
//   val top = db.fetch(Post).where((Post.priority ge 2) and Post.title.isNotNull())
//       .orderBy(Post.priority.desc()).limit(20).all()
//   db.fetch(Post).where(Post.author.name eq "Ada").updates()         // Flow<Update<Post>>
//   db.objectUpdates(Post, "p1")                                      // Flow<Post>, ends on delete
//
// Objects are encoded and decoded in Kotlin (FlatBuffers.kt); keel's Rust side
// verifies every object against the schema before storing it.
package dev.keel

import dev.keel.ffi.CallbackException
import dev.keel.ffi.Database
import dev.keel.ffi.Diff
import dev.keel.ffi.Expr
import dev.keel.ffi.KeelException
import dev.keel.ffi.ObjectEvent
import dev.keel.ffi.Query
import dev.keel.ffi.Txn as FfiTxn
import dev.keel.ffi.Value
import dev.keel.ffi.WriteBody
import dev.keel.ffi.WriteOp
import dev.keel.ffi.WriteResult
import kotlinx.coroutines.CoroutineScope
import kotlinx.coroutines.Dispatchers
import kotlinx.coroutines.channels.Channel
import kotlinx.coroutines.flow.Flow
import kotlinx.coroutines.flow.SharingStarted
import kotlinx.coroutines.flow.StateFlow
import kotlinx.coroutines.flow.buffer
import kotlinx.coroutines.flow.conflate
import kotlinx.coroutines.flow.distinctUntilChanged
import kotlinx.coroutines.flow.flowOn
import kotlinx.coroutines.flow.map
import kotlinx.coroutines.flow.stateIn

/**
 * A collection's generated companion object (`Post` in `db.get(Post, "p1")`): its
 * name, the schema it belongs to, its key type [K], and the byte conversions.
 * Collections without a `(primary)` field are keyed by rowid ([K] is `Long`).
 */
interface KeelModel<T : Any, K : Any> {
    /** Full collection name (`blog.Post`). */
    val collectionName: String
    /** Canonical text of the schema the model was generated from (pass it at open). */
    val schemaFbs: String
    /** FlatBuffers bytes of [value]. */
    fun encode(value: T): ByteArray
    /** The object in [bytes]; malformed bytes throw [KeelException.InvalidObject]. */
    fun decode(bytes: ByteArray): T
    /** [value]'s primary key; null for rowid-keyed collections. */
    fun keyOf(value: T): K?
    /** The key as the FFI's values, in key-field order. */
    fun keyValues(key: K): List<Value>
}

/** Implemented by generated data classes of collections: what `insert(post)` needs. */
interface KeelObject {
    /** The companion object of this object's class. */
    fun keelModel(): KeelModel<*, *>
    /** FlatBuffers bytes of this object. */
    fun encode(): ByteArray
}

/** A filter over objects of [O], built from generated field handles. */
class Predicate<O> @PublishedApi internal constructor(
    /** The untyped expression keel's FFI evaluates. */
    val expr: Expr,
) {
    /** Both hold. */
    infix fun and(other: Predicate<O>): Predicate<O> = Predicate(Expr.allOf(listOf(expr, other.expr)))
    /** At least one holds. */
    infix fun or(other: Predicate<O>): Predicate<O> = Predicate(Expr.anyOf(listOf(expr, other.expr)))
    /** Negation (three-valued: a comparison with an absent field stays unknown). */
    operator fun not(): Predicate<O> = Predicate(Expr.negate(expr))
    override fun toString(): String = expr.describe()

    companion object {
        /** A generated union handle's `isImage()`: the union holds that member. */
        fun <O> unionIs(path: String, member: String): Predicate<O> = Predicate(Expr.unionIs(path, member))
    }
}

/** A sort key: `Post.priority.desc()`. */
class SortKey<O>(
    /** Dotted field path. */
    val path: String,
    /** Descending order. */
    val descending: Boolean,
    /** Full-text relevance order ([relevance], Search.kt), not a field's. */
    val relevance: Boolean = false,
)

/**
 * A named place in objects of [O]: a field, or a table, struct or union on the way
 * to one (`Post.author`). Every such place can be tested for absence.
 */
open class FieldRef<O>(
    /** Dotted path as keel's FFI names it (`author.name`, `content.Image.url`). */
    val keelPath: String,
) {
    /** The field is absent (or null). */
    fun isNull(): Predicate<O> = Predicate(Expr.isNull(keelPath))
    /** The field is present (scalars with a default always are). */
    fun isNotNull(): Predicate<O> = Predicate(Expr.isNotNull(keelPath))
    override fun toString(): String = keelPath
}

/**
 * A comparable field of [O] holding [T]. [T] is fixed by the generated handle, so
 * `Post.title ge 2` does not compile: `ge` of a `Field<Post, String>` takes a String.
 */
class Field<O, T>(path: String, private val conv: (T) -> Value) : FieldRef<O>(path) {
    infix fun eq(value: T): Predicate<O> = Predicate(Expr.eq(keelPath, conv(value)))
    infix fun ne(value: T): Predicate<O> = Predicate(Expr.ne(keelPath, conv(value)))
    infix fun lt(value: T): Predicate<O> = Predicate(Expr.lt(keelPath, conv(value)))
    infix fun le(value: T): Predicate<O> = Predicate(Expr.le(keelPath, conv(value)))
    infix fun gt(value: T): Predicate<O> = Predicate(Expr.gt(keelPath, conv(value)))
    infix fun ge(value: T): Predicate<O> = Predicate(Expr.ge(keelPath, conv(value)))
    /** `field IN (values)`. */
    infix fun isIn(values: Collection<T>): Predicate<O> = Predicate(Expr.isIn(keelPath, values.map(conv)))
    /** `field NOT IN (values)`. */
    infix fun notIn(values: Collection<T>): Predicate<O> = Predicate(Expr.notIn(keelPath, values.map(conv)))
    /** Ascending sort (absent values first). */
    fun asc(): SortKey<O> = SortKey(keelPath, false)
    /** Descending sort (absent values last). */
    fun desc(): SortKey<O> = SortKey(keelPath, true)
}

/** Value conversions generated field handles and keys use. */
object Conv {
    @JvmField val bool: (Boolean) -> Value = { Value.Bool(it) }
    @JvmField val byte: (Byte) -> Value = { Value.Integer(it.toLong()) }
    @JvmField val ubyte: (UByte) -> Value = { Value.Integer(it.toLong()) }
    @JvmField val short: (Short) -> Value = { Value.Integer(it.toLong()) }
    @JvmField val ushort: (UShort) -> Value = { Value.Integer(it.toLong()) }
    @JvmField val int: (Int) -> Value = { Value.Integer(it.toLong()) }
    @JvmField val uint: (UInt) -> Value = { Value.Integer(it.toLong()) }
    @JvmField val long: (Long) -> Value = { Value.Integer(it) }
    // keel stores ulong as its i64 bit pattern.
    @JvmField val ulong: (ULong) -> Value = { Value.Integer(it.toLong()) }
    @JvmField val float: (Float) -> Value = { Value.Real(it.toDouble()) }
    @JvmField val double: (Double) -> Value = { Value.Real(it) }
    @JvmField val string: (String) -> Value = { Value.Text(it) }

    /** An enum handle's conversion; `Unknown` names no value and cannot be compared. */
    fun <E : Enum<E>> enum(unknown: E, raw: (E) -> Long): (E) -> Value = {
        if (it == unknown) throw KeelException.InvalidArgument("${it.declaringJavaClass.simpleName}.Unknown is no value of the schema; it cannot be compared")
        Value.Integer(raw(it))
    }
}

/** One result of a typed live query: the objects in query order and the row-level diff. */
data class Update<T>(
    /** The whole result, after `offset`/`limit`. */
    val objects: List<T>,
    /** Changes against the previous update (the first lists every object as inserted). */
    val diff: Diff,
)

/**
 * The transaction a `db.write { … }` body runs in, on keel's writer thread. Reads
 * ([get], [fetch], [count]) see every write made before them in the transaction;
 * each write is applied and checked at once (a failing one throws its typed
 * `KeelException` right there, and the body may catch it and go on). When the body
 * throws, what it wrote is rolled back, and nothing else. Valid only inside its body.
 */
class Txn internal constructor(
    private val txn: FfiTxn,
    private val db: Database,
) {
    @Volatile internal var ended = false

    private fun run(op: WriteOp): WriteResult {
        if (ended) throw KeelException.InvalidArgument("the transaction ended when its write body returned")
        return txn.write(op)
    }

    internal fun live(): FfiTxn {
        if (ended) throw KeelException.InvalidArgument("the transaction ended when its write body returned")
        return txn
    }

    /** Insert; throws `KeelException.AlreadyExists` if the key (or a unique value) is taken. */
    fun insert(obj: KeelObject): WriteResult = run(WriteOp.Insert(obj.keelModel().collectionName, obj.encode()))
    /**
     * Replace the object with the same key, every field: fields this version of the
     * schema does not know are dropped (use [change] to keep them); `KeelException.NotFound`
     * if there is none.
     */
    fun update(obj: KeelObject): WriteResult = run(WriteOp.Update(obj.keelModel().collectionName, obj.encode()))
    /** Insert, or replace the object with the same key (as [update]). */
    fun upsert(obj: KeelObject): WriteResult = run(WriteOp.Upsert(obj.keelModel().collectionName, obj.encode()))
    /** Delete the object of [model] with [key] (nothing happens if there is none). */
    fun <K : Any> delete(model: KeelModel<*, K>, key: K): WriteResult =
        run(WriteOp.Delete(model.collectionName, model.keyValues(key)))

    /**
     * [insert] each of [objs], in order, in one call across the FFI (a foreign call
     * costs more than a small write): as many [insert]s would, the first failing
     * one throws, those before it stay written and those after it are not run.
     */
    fun insertAll(objs: Iterable<KeelObject>): List<WriteResult> =
        live().writeAll(objs.map { WriteOp.Insert(it.keelModel().collectionName, it.encode()) })
    /** [upsert] each of [objs], in one call across the FFI (as [insertAll]). */
    fun upsertAll(objs: Iterable<KeelObject>): List<WriteResult> =
        live().writeAll(objs.map { WriteOp.Upsert(it.keelModel().collectionName, it.encode()) })

    /** The object of [model] with [key] as this transaction sees it, or null. */
    fun <T : Any, K : Any> get(model: KeelModel<T, K>, key: K): T? =
        live().get(model.collectionName, model.keyValues(key))?.let(model::decode)

    /** A typed query that runs inside this transaction (`all()`, `first()`, `count()`). */
    fun <T : Any> fetch(model: KeelModel<T, *>): Fetch<T> =
        Fetch(model, db.query(model.collectionName), this)

    /** The number of objects of [model], as this transaction sees them. */
    fun count(model: KeelModel<*, *>): Long = live().count(db.query(model.collectionName)).toLong()

    /**
     * Change some fields of the object of [model] with [key], field by field:
     * `change(Post, "p1") { it.copy(priority = it.priority + 10) }`. [edit] gets the
     * object as stored now (inside the transaction, so nothing changes it before the
     * write) and returns the edited copy; the fields whose values differ are written
     * (a `ChangeFrom`) and every other field keeps its stored bytes — including
     * fields, enum values and union members that a newer version of the schema wrote
     * and this one does not know. Returns the edited object; `KeelException.NotFound`
     * if there is none.
     */
    fun <T : Any, K : Any> change(model: KeelModel<T, K>, key: K, edit: (T) -> T): T {
        val stored = live().get(model.collectionName, model.keyValues(key))
            ?: throw KeelException.NotFound("change in ${model.collectionName}: no object with key $key")
        val before = model.decode(stored)
        val after = edit(before)
        txn.changeDiff(model.collectionName, model.keyValues(key), model.encode(before), model.encode(after))
        return after
    }
}

/**
 * Run [body] inside a write transaction on keel's writer thread; suspends until
 * COMMIT and returns [body]'s result. Reads in [body] see the transaction's writes,
 * so read-modify-write is safe against concurrent writers:
 *
 *     db.write { val c = get(Counter, "visits")!!; update(c.copy(n = c.n + 1)) }
 *
 * If [body] throws, what it wrote is rolled back and its exception is rethrown as
 * is. [body] runs on a keel thread, never on the caller's: it must not block on
 * other work of the database. Concurrent writes share one commit.
 */
suspend fun <R> Database.write(body: Txn.() -> R): R {
    val db = this
    val runner = object : WriteBody {
        @Volatile var result: Any? = null
        @Volatile var thrown: Throwable? = null
        override fun run(txn: FfiTxn) {
            val t = Txn(txn, db)
            try {
                result = t.body()
            } catch (e: Throwable) {
                thrown = e
                throw CallbackException.Failed(e.toString())
            } finally {
                t.ended = true
            }
        }
    }
    try {
        writeTxn(runner)
    } catch (e: KeelException) {
        runner.thrown?.let { throw it }
        throw e
    }
    runner.thrown?.let { throw it }
    @Suppress("UNCHECKED_CAST")
    return runner.result as R
}

/** `write { change(model, key, edit) }`: change some fields of one object in a transaction of its own. */
suspend fun <T : Any, K : Any> Database.change(model: KeelModel<T, K>, key: K, edit: (T) -> T): T =
    write { change(model, key, edit) }

/** The object of [model] with primary [key], or null (a read on the calling thread). */
fun <T : Any, K : Any> Database.get(model: KeelModel<T, K>, key: K): T? =
    get(model.collectionName, model.keyValues(key))?.let(model::decode)

/** [get] on a keel thread. */
suspend fun <T : Any, K : Any> Database.getAsync(model: KeelModel<T, K>, key: K): T? =
    getAsync(model.collectionName, model.keyValues(key))?.let(model::decode)

/** A typed query over [model]'s collection: chain `where`, `orderBy`, `limit`, then `all()`. */
fun <T : Any> Database.fetch(model: KeelModel<T, *>): Fetch<T> =
    Fetch(model, query(model.collectionName))

/**
 * A query whose results are [T]s. Immutable: each step returns a new query.
 * Field names and value types were checked by the compiler; keel checks them again.
 */
class Fetch<T : Any> internal constructor(
    internal val model: KeelModel<T, *>,
    /** The untyped query underneath (for `describe()` and tools). */
    val query: Query,
    /** Set for `txn.fetch(...)`: the query runs inside that write transaction. */
    internal val txn: Txn? = null,
) {
    /** Whether this query runs inside a write transaction (`txn.fetch(...)`). */
    internal val inTransaction: Boolean get() = txn != null
    /** Keep objects matching [predicate] (AND-ed with earlier filters). */
    fun where(predicate: Predicate<T>): Fetch<T> = Fetch(model, query.filter(predicate.expr), txn)
    /** Sort by [keys] (earlier keys first; ties end on insertion order). */
    fun orderBy(vararg keys: SortKey<T>): Fetch<T> {
        var q = query
        for (k in keys) q = if (k.relevance) q.orderByRelevance(k.descending) else q.orderBy(k.path, k.descending)
        return Fetch(model, q, txn)
    }
    /**
     * At most [n] objects. A negative [n] means no limit (it also lifts an earlier
     * `limit`), as Swift's `limit(-1)` and SQLite's `LIMIT -1`; `limit(0)` gives none.
     */
    fun limit(n: Int): Fetch<T> =
        Fetch(model, query.limit(if (n < 0) ULong.MAX_VALUE else n.toULong()), txn)
    /** Skip the first [n] objects (a negative [n] skips none, as in Swift). */
    fun offset(n: Int): Fetch<T> = Fetch(model, query.offset(if (n < 0) 0UL else n.toULong()), txn)

    /** Every matching object, in order (a read on the calling thread, or inside the transaction). */
    fun all(): List<T> = (txn?.live()?.all(query) ?: query.all()).map { model.decode(it.bytes) }
    /** [all] on a keel thread. */
    suspend fun allAsync(): List<T> = query.allAsync().map { model.decode(it.bytes) }
    /** The first matching object. */
    fun first(): T? = (if (txn != null) txn.live().first(query) else query.first())?.let { model.decode(it.bytes) }
    /** The number of matching objects. */
    fun count(): Long = (txn?.live()?.count(query) ?: query.count()).toLong()
    /** [count] on a keel thread. */
    suspend fun countAsync(): Long = query.countAsync().toLong()

    /**
     * The result as a live [Flow]: the current result first, then each changed result
     * with its row-level diff. Collecting subscribes; cancelling the collector cancels
     * the subscription. No update is dropped (each diff is relative to the previous).
     * Subscribing (which reads the first result) and decoding run on
     * [Dispatchers.IO], never on keel's writer thread nor on the collector's
     * dispatcher (`Dispatchers.Main` in an app); the collector gets decoded objects.
     */
    fun updates(): LiveFlow<Update<T>> = raw().then { f ->
        f.buffer(Channel.UNLIMITED)
            .map { u -> Update(u.objects.map { model.decode(it.bytes) }, u.diff) }
            .flowOn(Dispatchers.IO)
    }

    /** The query's subscription, undecoded (see Live.kt). */
    private fun raw(): LiveFlow<dev.keel.ffi.QueryUpdate> {
        val state = LiveState()
        val flow = liveFlow<dev.keel.ffi.QueryUpdate>(state, { query.subscribe(it).handle() }) {
            trySend(it as dev.keel.ffi.QueryUpdate)
        }
        return LiveFlow(flow, state)
    }

    /**
     * The latest result only (conflated): the current result first, then, when the
     * collector is ready, the newest result keel delivered since; the ones in
     * between are skipped and never decoded. For a screen that shows the result;
     * [updates] has every diff. Subscribing and decoding run on [Dispatchers.IO].
     */
    fun latest(): LiveFlow<List<T>> = raw().then { f ->
        f.conflate()
            .map { u -> u.objects.map { model.decode(it.bytes) } }
            .flowOn(Dispatchers.IO)
            .conflate()
    }

    /**
     * The result as a [StateFlow] whose [StateFlow.value] is the current result from
     * the start: it is read at once, on the calling thread (keel reads never wait for
     * the writer), so a screen has no empty first frame. Then it follows [latest]
     * (conflated, decoded on [Dispatchers.IO]) while [started] says so, in [scope]
     * (`viewModelScope`): with the default [SharingStarted.Eagerly] the subscription
     * lives until [scope] is cancelled; `SharingStarted.WhileSubscribed(5_000)` ends
     * it when no one collects (and a new collector first gets the current result).
     * Equal successive results are not emitted again.
     */
    fun asStateFlow(scope: CoroutineScope, started: SharingStarted = SharingStarted.Eagerly): StateFlow<List<T>> =
        latest().distinctUntilChanged().stateIn(scope, started, all())

    override fun toString(): String = query.describe()
}

/**
 * The object of [model] with [key] as a [Flow]: its current version, then each new
 * one; the flow completes when the object is deleted (at once if it does not exist).
 * Subscribing and decoding run on [Dispatchers.IO], not on the collector's dispatcher.
 */
fun <T : Any, K : Any> Database.objectUpdates(model: KeelModel<T, K>, key: K): LiveFlow<T> {
    val state = LiveState()
    val flow = liveFlow<ByteArray>(state, { subscribeObject(model.collectionName, model.keyValues(key), it).handle() }) {
        when (val event = it as ObjectEvent) {
            is ObjectEvent.Updated -> trySend(event.current.bytes)
            is ObjectEvent.Deleted -> channel.close()
        }
    }
    return LiveFlow(flow.buffer(Channel.UNLIMITED).map(model::decode).flowOn(Dispatchers.IO), state)
}

/**
 * [objectUpdates], latest only (conflated), and with `null` when the object is
 * deleted (or absent): a slow collector gets the newest version, the ones in
 * between are skipped and never decoded. Completes after the `null` of a delete.
 * Subscribing and decoding run on [Dispatchers.IO].
 */
fun <T : Any, K : Any> Database.latestObject(model: KeelModel<T, K>, key: K): LiveFlow<T?> {
    val state = LiveState()
    val flow = liveFlow<ByteArray?>(state, { subscribeObject(model.collectionName, model.keyValues(key), it).handle() }) {
        when (val event = it as ObjectEvent) {
            is ObjectEvent.Updated -> trySend(event.current.bytes)
            is ObjectEvent.Deleted -> {
                trySend(null)
                channel.close()
            }
        }
    }
    return LiveFlow(flow.conflate().map { b -> b?.let(model::decode) }.flowOn(Dispatchers.IO).conflate(), state)
}

/**
 * The object of [model] with [key] as a [StateFlow]: [StateFlow.value] is its
 * current version (or null) from the start, read at once on the calling thread,
 * then follows [latestObject] in [scope] while [started] says so (see
 * [Fetch.asStateFlow]); null once the object is deleted.
 */
fun <T : Any, K : Any> Database.objectAsStateFlow(
    model: KeelModel<T, K>,
    key: K,
    scope: CoroutineScope,
    started: SharingStarted = SharingStarted.Eagerly,
): StateFlow<T?> = latestObject(model, key).distinctUntilChanged().stateIn(scope, started, get(model, key))
