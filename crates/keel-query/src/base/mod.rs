//! The ground floor: small types every other band uses and that know nothing of a
//! database.
//!
//! * [`error`] — [`Error`](error::Error) and [`Result`](error::Result), everything
//!   keel-query can report.
//! * [`change`] — [`Change`](change::Change), what a write changed, as hooks and
//!   subscriptions see it.
//! * [`sql_value`] — SQLite's value semantics (storage classes, comparison, `IN`,
//!   arithmetic, ORDER BY order), shared by the table model, the SQL compiler and
//!   the in-memory evaluator so that they cannot disagree.
//! * [`pool`] — the bounded thread pool behind every database's fetch pool.
//! * [`slot`] — the latest-value slot behind every keel stream.
//! * [`fx`] — FxHash maps and sets for ids, rowids and short keys.
//! * [`ref_keys`] — keys of referenced objects as map keys.

pub(crate) mod change;
pub(crate) mod error;
pub(crate) mod fx;
pub mod pool;
pub(crate) mod ref_keys;
pub(crate) mod slot;
pub(crate) mod sql_value;
