//! Write transactions: what a write closure gets, and the rules a write obeys.
//!
//! * [`transaction`] — [`Txn`](transaction::Txn), inserts, updates, deletes and reads
//!   inside one write closure, and what it records for the commit.
//! * [`rules`] — the reference rules (`on_delete`, `dangling: false`) a delete or a
//!   write runs inside its SAVEPOINT.
//! * [`dictionary`] — [`TxnDictionary`](dictionary::TxnDictionary), the dictionary
//!   inside a write transaction.

pub(crate) mod dictionary;
pub(crate) mod rules;
pub(crate) mod transaction;
