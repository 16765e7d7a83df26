//! Queries, above the waist: what a read asks and how it is answered.
//!
//! * [`fetch`] — [`Query`](fetch::Query) (dynamic: collection name, `Expr`, bytes)
//!   and [`Fetch`](fetch::Fetch) (typed), lookups by key, and running a query
//!   against a connection.
//! * [`sql`] — `Expr` → SQL, and the `keel_field` SQL function.
//! * [`scan`] — filters on fields without an index or column, evaluated in Rust over
//!   each row's bytes.
//! * [`eval`] — the same `Expr` evaluated in memory, exactly as the SQL computes it
//!   (the subscription hub uses it).
//! * [`nearest`] — the `nearest` builders over the vector kernel.

pub mod eval;
pub(crate) mod fetch;
pub(crate) mod nearest;
pub(crate) mod scan;
pub(crate) mod sql;
