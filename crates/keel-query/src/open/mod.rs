//! What an open does to the file's layout, and the tools that read a layout.
//!
//! * [`schema_phase`] — the open's schema transaction: migrations, format upgrades,
//!   tables, index columns and side tables.
//! * [`side_tables`] — every collection's side tables brought to what the schema
//!   declares, and rebuilt for `keel check --repair`.
//! * [`migrate`] — moving the data when a schema change is not a compatible
//!   evolution.
//! * [`inspect`] — the storage layout as facts, for tools that read a keel file with
//!   plain SQLite (`keel info`, `keel check`).

pub mod inspect;
pub mod migrate;
pub(crate) mod schema_phase;
pub(crate) mod side_tables;
