//! An upload operation as the relay applies it: parsed and checked against the
//! schema by [`crate::upload`], applied set-wise by `set_apply` or one by
//! one by [`crate::upload`]; and what a refused write says.

use serde_json::{Map, Value};
use tokio_postgres::error::SqlState;

use crate::sync_schema::SyncCollection;

/// What an operation does to its row.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Kind {
    Insert,
    Patch,
    Delete,
}

/// An operation that passed the schema checks.
#[derive(Debug)]
pub(crate) struct Op<'s> {
    pub(crate) index: usize,
    pub(crate) seq: i64,
    pub(crate) kind: Kind,
    pub(crate) collection: &'s SyncCollection,
    /// Key columns → values.
    pub(crate) key: Map<String, Value>,
    /// Written columns → values (checked and normalised).
    pub(crate) fields: Map<String, Value>,
    /// Counter columns → deltas.
    pub(crate) deltas: Map<String, Value>,
    pub(crate) base_version: i64,
}

/// A refused write's message (`SQLSTATE: message`), or `None` for a failure that is
/// not about the data (a lost connection, a bug).
pub(crate) fn rejection(e: &tokio_postgres::Error) -> Option<String> {
    let db = e.as_db_error()?;
    let code = db.code();
    let class = &code.code()[..2];
    // 22 data exception, 23 integrity constraint, P0 raised by a PL/pgSQL function.
    let refused = matches!(class, "22" | "23" | "P0") || *code == SqlState::INSUFFICIENT_PRIVILEGE;
    refused.then(|| format!("{}: {}", code.code(), db.message()))
}
