// Live subscriptions as Flows (package dev.keel): what every live Flow of the
// layer is built on — `query.updates()`, `fetch(…).updates()` / `latest()`,
// `objectUpdates(…)`, `including(…).updates()`, `nearestUpdates(…)`.
//
// * Collecting subscribes; cancelling the collector cancels the subscription.
// * keel's listener runs on keel's thread (the subscribing thread for the first
//   delivery): it counts the delivery and hands it to the Flow's channel, nothing
//   more; decoding happens downstream, off keel's threads.
// * When the database closes, the Flow ends with `KeelException.Closed`, after the
//   deliveries keel made before the close (Swift's streams end the same way):
//   keel stops calling a listener at close, so the Flow also awaits the
//   subscription's `ended()`.
// * The returned [LiveFlow] tells its subscription's state, as Swift's
//   `KeelUpdates` does: [LiveFlow.isActive] and [LiveFlow.deliveries].
//
//     val feed = db.fetch(Post).updates()
//     scope.launch { feed.collect { show(it.objects) } }
//     if (!feed.isActive) …                        // collector gone, or the database closed
package dev.keel

import dev.keel.ffi.BatchListener
import dev.keel.ffi.ChangedRow
import dev.keel.ffi.Deliveries
import dev.keel.ffi.DeliveryBatch
import dev.keel.ffi.Diff
import dev.keel.ffi.IncludedObject
import dev.keel.ffi.Move
import dev.keel.ffi.StoredObject
import dev.keel.ffi.IncludingListener
import dev.keel.ffi.IncludingSubscription
import dev.keel.ffi.IncludingUpdate
import dev.keel.ffi.KeelException
import dev.keel.ffi.NearestListener
import dev.keel.ffi.NearestUpdate
import dev.keel.ffi.ObjectEvent
import dev.keel.ffi.ObjectListener
import dev.keel.ffi.QueryListener
import dev.keel.ffi.QueryUpdate
import dev.keel.ffi.Subscription
import kotlinx.coroutines.channels.ProducerScope
import kotlinx.coroutines.channels.awaitClose
import kotlinx.coroutines.flow.Flow
import kotlinx.coroutines.flow.callbackFlow
import kotlinx.coroutines.launch
import java.nio.ByteBuffer
import java.nio.ByteOrder
import java.util.concurrent.ConcurrentHashMap
import java.util.concurrent.atomic.AtomicInteger
import java.util.concurrent.atomic.AtomicLong

/**
 * A live [Flow] and the state of its keel subscription. Collect it as any Flow;
 * each collection subscribes anew, and the state follows the latest one.
 */
class LiveFlow<T> internal constructor(
    private val flow: Flow<T>,
    private val state: LiveState,
) : Flow<T> by flow {
    /**
     * True while keel may still deliver: false before the Flow is collected, once
     * its collector stopped, after an object's deletion, and once the database closed.
     */
    val isActive: Boolean get() = state.isActive

    /**
     * How many deliveries keel made to this Flow's subscriptions so far (counted on
     * keel's thread, whether or not the collector consumed or decoded them yet).
     */
    val deliveries: Int get() = state.deliveries

    /** This Flow transformed by [f] (decoding, conflating), keeping the state. */
    internal fun <R> then(f: (Flow<T>) -> Flow<R>): LiveFlow<R> = LiveFlow(f(flow), state)
}

/** keel's handle on one subscription, whichever kind. */
internal interface KeelHandle {
    fun cancel()
    fun isActive(): Boolean
    /** Returns when cancelled; throws `KeelException.Closed` when the database closed. */
    suspend fun ended()
}

private class SubscriptionHandle(private val s: Subscription) : KeelHandle {
    override fun cancel() = s.cancel()
    override fun isActive(): Boolean = s.isActive()
    override suspend fun ended() = s.ended()
}

private class IncludingHandle(private val s: IncludingSubscription, private val id: Long?) : KeelHandle {
    override fun cancel() {
        s.cancel()
        if (id != null) KeelDeliveries.unregister(id)
    }
    override fun isActive(): Boolean = s.isActive()
    override suspend fun ended() = s.ended()
}

internal fun Subscription.handle(): KeelHandle = SubscriptionHandle(this)
internal fun IncludingSubscription.handle(): KeelHandle = IncludingHandle(this, null)

/** The handle of a list delivering through [KeelDeliveries] under [id]. */
internal fun IncludingSubscription.handle(id: Long): KeelHandle = IncludingHandle(this, id)

/** Shared by a [LiveFlow] and its listener: the current subscription and the delivery count. */
internal class LiveState {
    @Volatile var handle: KeelHandle? = null
    private val count = AtomicInteger()
    val isActive: Boolean get() = handle?.isActive() ?: false
    val deliveries: Int get() = count.get()
    fun delivered() {
        count.incrementAndGet()
    }
}

/**
 * The listener behind every live Flow, for each kind of subscription: it runs on
 * keel's thread, so it only counts the delivery and hands it to [sink].
 */
internal class KeelBridge(private val state: LiveState, private val sink: (Any) -> Unit) :
    QueryListener, ObjectListener, IncludingListener, NearestListener {
    override fun onUpdate(update: QueryUpdate) = hand(update)
    override fun onEvent(event: ObjectEvent) = hand(event)
    override fun onUpdate(update: IncludingUpdate) = hand(update)
    override fun onUpdate(update: NearestUpdate) = hand(update)

    /** A delivery of a list subscribed through [KeelDeliveries]. */
    fun onPacked(delivery: PackedDelivery) = hand(delivery)

    private fun hand(delivery: Any) {
        state.delivered()
        sink(delivery)
    }
}

/**
 * A cold Flow over one keel subscription per collection: [subscribe] makes it with
 * the bridge, [deliver] turns each delivery into what the Flow emits (on keel's
 * thread: send, or close after an object's deletion). It ends with
 * `KeelException.Closed` when the database closes.
 */
internal fun <R> liveFlow(
    state: LiveState,
    subscribe: (KeelBridge) -> KeelHandle,
    deliver: ProducerScope<R>.(Any) -> Unit,
): Flow<R> = callbackFlow {
    val producer = this
    // keel makes the first delivery inside `subscribe`, before the handle exists:
    // deliveries wait until it is stored, so a collector that got one sees the
    // Flow active (and its subscription counted), in keel's order.
    val lock = Any()
    var ready = false
    val early = ArrayList<Any>()
    val handle = subscribe(KeelBridge(state) { d ->
        synchronized(lock) { if (ready) producer.deliver(d) else early.add(d) }
    })
    state.handle = handle
    synchronized(lock) {
        ready = true
        for (d in early) producer.deliver(d)
        early.clear()
    }
    launch {
        try {
            handle.ended()
        } catch (e: KeelException.Closed) {
            // After every delivery keel made: they are in the channel before this.
            producer.close(e)
        }
    }
    awaitClose { handle.cancel() }
}

/** A slot no row has filled yet, in [applyTo]'s rebuild. */
private object Unfilled

/**
 * Make [list], the result this diff was made against, the new result: rows at
 * `inserted` and `updated` indices come from [fresh] (called with their index in the
 * new result), every other row is [list]'s own, kept or moved. What a list view does
 * with each delivery, instead of taking the whole result again: a diff without moves
 * (every diff of a commit that changes one object) removes and inserts its few rows
 * where they are; one with moves rebuilds the list. The core's `Diff::apply_to`,
 * Swift's `Diff.apply(to:fresh:)`.
 *
 *     update.diff.applyTo(shown) { i -> decode(rowAt(i)) }
 */
fun <T> Diff.applyTo(list: MutableList<T>, fresh: (Int) -> T) {
    if (moved.isEmpty()) {
        for (i in removed.asReversed()) list.removeAt(i.toInt())
        for (j in inserted) list.add(j.toInt(), fresh(j.toInt()))
        for (j in updated) list[j.toInt()] = fresh(j.toInt())
        return
    }
    val n = list.size + inserted.size - removed.size
    val out = MutableList<Any?>(n) { Unfilled }
    val gone = BooleanArray(list.size)
    for (i in removed) gone[i.toInt()] = true
    for (j in inserted) out[j.toInt()] = fresh(j.toInt())
    for (m in moved) {
        gone[m.from.toInt()] = true
        out[m.to.toInt()] = list[m.from.toInt()]
    }
    val rest = list.filterIndexed { i, _ -> !gone[i] }.iterator()
    for (k in 0 until n) if (out[k] === Unfilled) out[k] = rest.next()
    for (j in updated) out[j.toInt()] = fresh(j.toInt())
    list.clear()
    @Suppress("UNCHECKED_CAST")
    list.addAll(out as List<T>)
}

/**
 * One delivery of a list subscribed through [KeelDeliveries]: its span in the
 * batch keel handed over (keel-ffi `batch.rs` has the layout). Unpacked
 * downstream, off keel's thread.
 */
internal class PackedDelivery(private val bytes: ByteArray, private val offset: Int, private val length: Int) {
    /** The `including` delivery it packs. */
    fun includingUpdate(): dev.keel.ffi.IncludingUpdate {
        val b = ByteBuffer.wrap(bytes, offset, length).slice().order(ByteOrder.LITTLE_ENDIAN)
        fun u32(): Long = b.int.toLong() and 0xFFFF_FFFFL
        fun indices(): List<ULong> = List(u32().toInt()) { u32().toULong() }
        fun obj(): StoredObject {
            val rowid = b.long
            val out = ByteArray(u32().toInt())
            b.get(out)
            return StoredObject(rowid, out)
        }
        val count = u32().toULong()
        val removed = indices()
        val inserted = indices()
        val moved = List(u32().toInt()) { Move(u32().toULong(), u32().toULong()) }
        val updated = indices()
        val changed = List(u32().toInt()) {
            val index = u32().toULong()
            val o = obj()
            ChangedRow(index, IncludedObject(o, List(u32().toInt()) { obj() }))
        }
        return dev.keel.ffi.IncludingUpdate(count, Diff(removed, inserted, moved, updated), changed)
    }
}

/**
 * The layer's one batched-delivery sink (keel-ffi `batch.rs`): every live list
 * across a relation (`including(…).updates()`) of every database subscribes to
 * it under an id of its own, and keel hands over all the deliveries one commit
 * makes in **one** call — on keel's writer thread after the commit (`keel-feed`
 * for another process's commits; the subscribing thread for a list's first) —
 * instead of one call per list. [onBatch] only splits the batch by id and hands
 * each span to its list's handler; unpacking happens downstream.
 */
internal object KeelDeliveries : BatchListener {
    private val next = AtomicLong()
    private val lists = ConcurrentHashMap<Long, (PackedDelivery) -> Unit>()

    /** keel's sink, made on first use. */
    val sink: Deliveries by lazy { dev.keel.ffi.deliveries(this) }

    /** A new id whose deliveries go to [handler] (on keel's thread). */
    fun register(handler: (PackedDelivery) -> Unit): Long {
        val id = next.incrementAndGet()
        lists[id] = handler
        return id
    }

    fun unregister(id: Long) {
        lists.remove(id)
    }

    override fun onBatch(batch: DeliveryBatch) {
        val bytes = batch.bytes
        val b = ByteBuffer.wrap(bytes).order(ByteOrder.LITTLE_ENDIAN)
        var at = 0
        repeat(batch.count.toInt()) {
            val id = b.getLong(at)
            val len = b.getLong(at + 8).toInt()
            lists[id]?.invoke(PackedDelivery(bytes, at + 16, len))
            at += 16 + len
        }
    }
}
