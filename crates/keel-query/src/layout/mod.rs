//! How a collection sits in the SQLite file: the table model and everything that
//! lives beside a collection's table.
//!
//! * [`table`] — the table model (storage format 2): [`Coll`](table::Coll), one table
//!   per collection, index columns keel writes from the object, keel's metadata.
//! * [`body`] — how the `body` column holds an object's bytes (the key string once).
//! * [`links`] — a collection's `(references: …)` links, both ways.
//! * [`stored`] — the schema stored in the file, and what an open with another
//!   schema version may do to it.
//! * [`side_table`] — what every side table shares: written with its row, rebuilt
//!   at open when its signature changes, compared by `keel check`.
//! * [`fts`] — the full-text index as a side table.
//! * [`vector_table`] — the packed vector side table and the candidates' order.
//! * [`outbox`] — a synced collection's writes as upload operations, appended in
//!   the write's transaction.

pub(crate) mod body;
pub(crate) mod fts;
pub(crate) mod links;
pub(crate) mod outbox;
pub(crate) mod side_table;
pub(crate) mod stored;
pub(crate) mod table;
pub(crate) mod vector_table;
