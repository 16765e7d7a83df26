// The layer's former names, kept for one release as deprecated aliases: keel uses
// one name per concept in Rust, the FFI and Kotlin, the Rust core's (the
// vocabulary table in docs/bindings.md). The FFI's former `Transaction` is in
// FfiNames.kt, in the generated package.
package dev.keel

/** The typed query builder's former name. */
@Deprecated("renamed Fetch, the core's name", ReplaceWith("Fetch<T>"))
typealias TypedQuery<T> = Fetch<T>

/** The typed write transaction's former name. */
@Deprecated("renamed Txn, the core's name", ReplaceWith("Txn"))
typealias WriteTxn = Txn

/** A typed query with what one reference names, under its former name. */
@Deprecated("renamed Including, the core's name", ReplaceWith("Including<O, T, R>"))
typealias IncludingQuery<O, T, R> = Including<O, T, R>

/** One delivery of a live list across a relation, under its former name. */
@Deprecated("renamed IncludingUpdate, the core's name", ReplaceWith("IncludingUpdate<O, R>"))
typealias RelationUpdate<O, R> = IncludingUpdate<O, R>

/** One delivery of a typed live query, under its former name. */
@Deprecated("renamed Update, the core's name", ReplaceWith("Update<T>"))
typealias QueryUpdate<T> = Update<T>
