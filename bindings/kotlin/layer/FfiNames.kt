// The generated package's former names, kept for one release as deprecated
// aliases (the vocabulary table in docs/bindings.md): the FFI's write transaction
// is `Txn`, the Rust core's name.
package dev.keel.ffi

/** The untyped write transaction's former name. */
@Deprecated("renamed Txn, the core's name", ReplaceWith("Txn"))
typealias Transaction = Txn
