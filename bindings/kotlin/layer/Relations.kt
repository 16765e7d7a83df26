// Relations in the typed Kotlin layer (docs/relations.md, issue 30): a generated
// relation handle per to-one `(references: "Author")` field (`Post.authorRef`),
// `including` to read each object with the one it names in two reads (no N+1),
// and the live form, updated when only a referenced object changes:
//
//     val rows: List<Pair<Post, Author?>> =
//         db.fetch(Post).orderBy(Post.rank.asc()).including(Post.authorRef).all()
//     db.fetch(Post).including(Post.authorRef).updates().collect { u -> u.objects; u.diff }
//     val byAda = db.fetch(Post).whereThrough(Post.authorRef, Author.name eq "Ada").all()
//
// Through the database only (inside a write transaction it throws
// `KeelException.InvalidArgument`); to-one references only (to-many fields get
// no handle).

package dev.keel

import dev.keel.ffi.Diff
import dev.keel.ffi.IncludedObject
import dev.keel.ffi.IncludingListener
import dev.keel.ffi.KeelException
import dev.keel.ffi.Query
import kotlinx.coroutines.Dispatchers
import kotlinx.coroutines.channels.Channel
import kotlinx.coroutines.channels.awaitClose
import kotlinx.coroutines.flow.Flow
import kotlinx.coroutines.flow.buffer
import kotlinx.coroutines.flow.callbackFlow
import kotlinx.coroutines.flow.flowOn
import kotlinx.coroutines.flow.map

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
 * One delivery of [IncludingQuery.updates]: the whole result, each object with the
 * one its reference names (null when absent or naming no object), and the row-level
 * diff against the previous delivery (the first lists every row as inserted). A row
 * whose object or referenced object changed is `updated`.
 */
data class RelationUpdate<O, T>(
    val objects: List<Pair<O, T?>>,
    val diff: Diff,
)

/** This query with the object [relation] names for each result (filter, order, limit and offset kept). */
fun <O : Any, T : Any> TypedQuery<O>.including(relation: Relation<O, T>): IncludingQuery<O, T> =
    IncludingQuery(query, relation, inTransaction)

/**
 * Keep the objects whose reference [relation] names an object matching [predicate]
 * (`whereThrough(Post.authorRef, Author.name eq "Ada")`). The referenced objects are
 * read now, once, through the database: the filter is "the reference is one of their
 * keys", which a later write to the referenced collection does not change (a live
 * query keeps it as made). A bad predicate throws `KeelException.InvalidArgument`.
 */
fun <O : Any, T : Any> TypedQuery<O>.whereThrough(relation: Relation<O, T>, predicate: Predicate<T>): TypedQuery<O> =
    where(Predicate(query.through(relation.field, predicate.expr)))

/** A typed query with the objects one reference names (`fetch(Post).including(Post.authorRef)`). */
class IncludingQuery<O : Any, T : Any> internal constructor(
    /** The untyped query underneath. */
    val query: Query,
    private val relation: Relation<O, T>,
    private val inTransaction: Boolean,
) {
    private fun checked(): Query {
        if (inTransaction) {
            throw KeelException.InvalidArgument(
                "including(${relation.field}) runs through the database, not inside a write transaction",
            )
        }
        return query
    }

    private fun decode(row: IncludedObject): Pair<O, T?> =
        Pair(relation.owner.decode(row.`object`.bytes), row.related.firstOrNull()?.let { relation.target.decode(it.bytes) })

    /**
     * Every matching object with the object its reference names, in order: two reads
     * whatever the number of objects (the objects, then every referenced one at once).
     */
    fun all(): List<Pair<O, T?>> = checked().allIncluding(relation.field).map(::decode)

    /**
     * The result as a live [Flow]: the current result first, then every changed result
     * with its row-level diff — a change of a referenced object alone (an author
     * renamed) lists the rows naming it as `updated`. Collecting subscribes;
     * cancelling the collector cancels the subscription. No delivery is dropped.
     * Subscribing and decoding run on [Dispatchers.IO], never on keel's writer thread.
     */
    fun updates(): Flow<RelationUpdate<O, T>> = callbackFlow {
        val sub = checked().subscribeIncluding(relation.field, object : IncludingListener {
            override fun onUpdate(update: dev.keel.ffi.IncludingUpdate) {
                trySend(update)
            }
        })
        awaitClose { sub.cancel() }
    }.buffer(Channel.UNLIMITED)
        .map { u -> RelationUpdate(u.objects.map(::decode), u.diff) }
        .flowOn(Dispatchers.IO)

    override fun toString(): String = "${query.describe()} including ${relation.field}"
}
