// Relations in the typed Kotlin layer (docs/relations.md): a generated
// relation handle per `(references: "Author")` field (`Post.authorRef`; a vector
// of keys gets `Post.tagsRef`, a `ManyRelation`), `including` to read each object
// with the ones it names in two reads (no N+1), and the live form, updated when
// only a referenced object changes:
//
//     val rows: List<Pair<Post, Author?>> =
//         db.fetch(Post).orderBy(Post.rank.asc()).including(Post.authorRef).all()
//     db.fetch(Post).including(Post.authorRef).updates().collect { u -> u.objects; u.diff }
//     val byAda = db.fetch(Post).whereThrough(Post.authorRef, Author.name eq "Ada").all()
//
// Through the database only (inside a write transaction it throws
// `KeelException.InvalidArgument`). Filters through a reference follow to-one
// references.

package dev.keel

import dev.keel.ffi.Diff
import dev.keel.ffi.IncludedObject
import dev.keel.ffi.KeelException
import dev.keel.ffi.Query
import kotlinx.coroutines.Dispatchers
import kotlinx.coroutines.channels.Channel
import kotlinx.coroutines.flow.Flow
import kotlinx.coroutines.flow.buffer
import kotlinx.coroutines.flow.flow
import kotlinx.coroutines.flow.flowOn

/**
 * A typed handle on the to-one reference field [field] of [owner]'s collection,
 * naming objects of [target]'s (generated: `Post.authorRef`). [including] takes it.
 */
class Relation<O : Any, T : Any>(
    /** The reference field's name in the schema (`author`). */
    val field: String,
    /** The referring collection's model. */
    val owner: KeelModel<O, *>,
    /** The referenced collection's model. */
    val target: KeelModel<T, *>,
)

/**
 * A typed handle on the to-many reference field [field] of [owner]'s collection, a
 * vector of keys of [target]'s objects (generated: `Post.tagsRef`). [including] takes it.
 */
class ManyRelation<O : Any, T : Any>(
    /** The reference field's name in the schema (`tags`). */
    val field: String,
    /** The referring collection's model. */
    val owner: KeelModel<O, *>,
    /** The referenced collection's model. */
    val target: KeelModel<T, *>,
)

/**
 * One delivery of [Including.updates]: the whole result, each object with what
 * its reference names ([R] is `T?` for a to-one reference, null when absent or
 * naming no object; `List<T>` for a to-many one, in the order of its keys), and the
 * row-level diff against the previous delivery (the first lists every row as
 * inserted). A row whose object or referenced objects changed is `updated`.
 */
data class IncludingUpdate<O, R>(
    val objects: List<Pair<O, R>>,
    val diff: Diff,
)

/** This query with the object [relation] names for each result (filter, order, limit and offset kept). */
fun <O : Any, T : Any> Fetch<O>.including(relation: Relation<O, T>): Including<O, T, T?> =
    Including(query, relation.field, relation.owner, inTransaction) { row ->
        Pair(relation.owner.decode(row.`object`.bytes), row.related.firstOrNull()?.let { relation.target.decode(it.bytes) })
    }

/**
 * This query with the objects the to-many [relation] names for each result, in the
 * order of its keys (a key naming no object is left out; filter, order, limit and
 * offset kept).
 */
fun <O : Any, T : Any> Fetch<O>.including(relation: ManyRelation<O, T>): Including<O, T, List<T>> =
    Including(query, relation.field, relation.owner, inTransaction) { row ->
        Pair(relation.owner.decode(row.`object`.bytes), row.related.map { relation.target.decode(it.bytes) })
    }

/**
 * Keep the objects whose reference [relation] names an object matching [predicate]
 * (`whereThrough(Post.authorRef, Author.name eq "Ada")`). The referenced objects are
 * read now, once, through the database: the filter is "the reference is one of their
 * keys", which a later write to the referenced collection does not change (a live
 * query keeps it as made). A bad predicate throws `KeelException.InvalidArgument`.
 */
fun <O : Any, T : Any> Fetch<O>.whereThrough(relation: Relation<O, T>, predicate: Predicate<T>): Fetch<O> =
    where(Predicate(query.through(relation.field, predicate.expr)))

/**
 * A typed query with what one reference names (`fetch(Post).including(Post.authorRef)`):
 * each result is the object and [R], its referenced object (`T?`) or objects (`List<T>`).
 */
class Including<O : Any, T : Any, R> internal constructor(
    /** The untyped query underneath. */
    val query: Query,
    private val field: String,
    private val owner: KeelModel<O, *>,
    private val inTransaction: Boolean,
    private val decode: (IncludedObject) -> Pair<O, R>,
) {
    private fun checked(): Query {
        if (inTransaction) {
            throw KeelException.InvalidArgument(
                "including($field) runs through the database, not inside a write transaction",
            )
        }
        return query
    }

    /**
     * Every matching object with what its reference names, in order: two reads
     * whatever the number of objects (the objects, then every referenced one at once).
     */
    fun all(): List<Pair<O, R>> = checked().allIncluding(field).map(decode)

    /**
     * Keep the objects whose referenced object (to-many: at least one of them, every
     * one still shown) matches [predicate] (`including(Post.authorRef).where(Author.name eq "Ada")`).
     * Evaluated on every read, so [updates] follows renames: an author renamed into the
     * condition brings their posts in, one renamed out takes them away. The query's
     * limit and offset apply after it. A bad predicate throws `KeelException.InvalidArgument`.
     */
    fun where(predicate: Predicate<T>): Including<O, T, R> =
        Including(query.whereRelated(field, predicate.expr), field, owner, inTransaction, decode)

    /**
     * Order the result by [key], a field of the referenced objects
     * (`including(Post.authorRef).orderByRelated(Author.name.asc())`; to-many: the
     * first one), as SQL orders (a post without an author first when ascending).
     * Equal values keep the query's own order; its limit and offset apply after this
     * order (every match is read to sort it). [all], [counts] and [updates] keep it.
     * A relevance key throws `KeelException.InvalidArgument`.
     */
    fun orderByRelated(key: SortKey<T>): Including<O, T, R> {
        if (key.relevance) throw KeelException.InvalidArgument("orderByRelated($field): relevance orders by a search, not by a field")
        return Including(query.orderByRelated(key.path, key.descending), field, owner, inTransaction, decode)
    }

    /**
     * Every matching object with the number of objects its reference names that exist
     * — the count over the relation (a to-many vector's keys naming an object, repeats
     * counted; 0 or 1 to-one) — in two reads, the second of the referenced collection's
     * keys only (no referenced object is decoded).
     */
    fun counts(): List<Pair<O, Long>> =
        checked().countIncluding(field).map { Pair(owner.decode(it.`object`.bytes), it.count.toLong()) }

    /**
     * The result as a live [Flow]: the current result first, then every changed result
     * with its row-level diff — a change of a referenced object alone (an author
     * renamed, a tag relabelled) lists the rows naming it as `updated`. Collecting
     * subscribes; cancelling the collector cancels the subscription. No delivery is
     * dropped. Other processes' commits arrive too (with `shareChanges`). Subscribing
     * and decoding run on [Dispatchers.IO], never on keel's writer or feed thread.
     *
     * keel delivers each change as its diff and the rows it inserts or updates: the
     * Flow keeps the list, decodes those rows alone and applies the diff to it
     * ([applyTo]), so a rename that changes one row of a long list decodes one row.
     */
    fun updates(): LiveFlow<IncludingUpdate<O, R>> {
        val state = LiveState()
        // Through the layer's sink: one call from keel per commit for every
        // list it changes, whatever the number of lists.
        val raw = liveFlow<PackedDelivery>(state, { bridge ->
            val id = KeelDeliveries.register(bridge::onPacked)
            try {
                checked().subscribeIncludingTo(field, KeelDeliveries.sink, id.toULong()).handle(id)
            } catch (e: Throwable) {
                KeelDeliveries.unregister(id)
                throw e
            }
        }) {
            trySend(it as PackedDelivery)
        }.buffer(Channel.UNLIMITED)
        val lists = flow {
            // One list per collection: this block runs anew for each collector.
            val shown = ArrayList<Pair<O, R>>()
            raw.collect { packed ->
                val u = packed.includingUpdate()
                val rows = u.changed.associateBy { it.index.toInt() }
                u.diff.applyTo(shown) { i -> decode(rows.getValue(i).row) }
                emit(IncludingUpdate(shown.toList(), u.diff))
            }
        }
        return LiveFlow(lists.flowOn(Dispatchers.IO), state)
    }

    override fun toString(): String = "${query.describe()} including $field"
}
