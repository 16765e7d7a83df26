//! The schema stored in the file: reading it (damage is corruption), deciding what
//! an open with another schema version may do to it, and building unique indexes.
//!
//! ## The rule for schema versions (see `docs/schema.md`)
//!
//! Let *stored* be the schema recorded in the file and *opening* the one the app
//! opens with.
//!
//! * *opening* is *stored*, or an evolution of it (`compat::check(stored, opening)`
//!   passes): *opening* is recorded, indexes it no longer declares are dropped, new
//!   ones are built. (An upgrade.)
//! * *stored* is an evolution of *opening* (`compat::check(opening, stored)` passes):
//!   an older build — an app extension, a widget, a not-yet-updated process — opens a
//!   file a newer build already upgraded. It opens and reads and writes with its own
//!   schema, but it **changes nothing the newer schema recorded**: the stored schema
//!   stays, indexes the newer schema declares stay — the older build keeps writing
//!   their columns, extracting every index column (and `keel_field`, which scans
//!   read fields with) with the stored schema, so what the older build writes agrees
//!   with the newer build's. (Field ids and types never change between compatible
//!   versions, so both read the same value for every field both know.)
//! * neither: the open fails with a schema error — unless a migration
//!   ([`Migrator`](crate::Migrator)) moves the data first.
//!
//! ## Damage
//!
//! keel writes the stored schema itself (the canonical text of a schema that parsed,
//! with its fingerprint), so a stored schema that cannot be read, is not text, does
//! not parse, or does not match its fingerprint is a damaged file:
//! `keel_storage::Error::Corrupt`, which `recover_corrupt` acts on and `keel check`
//! reports with exit status 3.

use std::path::Path;
use std::sync::{Arc, RwLock};

use keel_schema::Schema;
use keel_storage::Error as SErr;

use crate::base::error::{Error, Result};
use crate::layout::table::{Coll, IndexSql};

/// The schema `keel_field` reads fields with: the opening schema, or a newer stored
/// one (see the module docs). Shared by every connection of one database.
pub(crate) type FieldSchema = Arc<RwLock<Arc<Schema>>>;

/// Classify an SQLite error met in the schema phase: damage is corruption, a file
/// that cannot be written is unreadable, anything else is a schema error.
pub(crate) fn classify(op: &str, path: &Path, e: rusqlite::Error) -> SErr {
    use rusqlite::ErrorCode as C;
    let p = path.to_path_buf();
    match e.sqlite_error_code() {
        Some(C::DatabaseCorrupt | C::NotADatabase) => SErr::Corrupt {
            op: "schema phase",
            path: p,
            detail: format!("{op}: {e}"),
        },
        Some(C::ReadOnly | C::PermissionDenied | C::CannotOpen) => SErr::Unreadable {
            op: "schema phase",
            path: p,
            source: Arc::new(std::io::Error::new(
                std::io::ErrorKind::PermissionDenied,
                format!("{op}: {e}"),
            )),
        },
        Some(C::DatabaseBusy | C::DatabaseLocked) => SErr::Locked {
            op: "schema phase",
            path: p,
        },
        Some(C::DiskFull) => SErr::Io {
            op: "schema phase",
            path: p,
            source: Arc::new(std::io::Error::other(format!("{op}: {e}"))),
        },
        _ => SErr::Schema {
            path: p,
            message: format!("{op}: {e}"),
        },
    }
}

fn damaged(path: &Path, detail: String) -> SErr {
    SErr::Corrupt {
        op: "read the stored schema",
        path: path.to_path_buf(),
        detail,
    }
}

/// The schema recorded in the file, if any. Anything but the text keel wrote is
/// damage (see the module docs).
pub(crate) fn read_stored(conn: &rusqlite::Connection, path: &Path) -> Result<Option<Schema>> {
    // Read as raw bytes: damage can leave text that is not UTF-8, which is the
    // file's fault, not a type error.
    let row = |key: &str| -> std::result::Result<Option<Result<String, String>>, SErr> {
        match conn.query_row("SELECT value FROM keel_meta WHERE key = ?1", [key], |r| {
            Ok(match r.get_ref(0)? {
                rusqlite::types::ValueRef::Text(t) => String::from_utf8(t.to_vec())
                    .map_err(|e| format!("the stored {key} is not UTF-8 text ({e})")),
                other => Err(format!(
                    "the stored {key} is not text ({:?})",
                    other.data_type()
                )),
            })
        }) {
            Ok(v) => Ok(Some(v)),
            Err(rusqlite::Error::QueryReturnedNoRows) => Ok(None),
            Err(e) => Err(classify("read stored schema", path, e)),
        }
    };
    let Some(text) = row("schema")? else {
        return Ok(None);
    };
    let text = text.map_err(|d| damaged(path, d))?;
    let schema = Schema::parse(&text, "stored schema")
        .map_err(|e| damaged(path, format!("the stored schema does not parse: {e}")))?;
    if let Some(fp) = row("fingerprint")? {
        let fp = fp.map_err(|d| damaged(path, d))?;
        let want = format!("{:016x}", schema.fingerprint());
        if fp != want {
            return Err(damaged(
                path,
                format!("the stored schema does not match its fingerprint ({fp}, computed {want})"),
            )
            .into());
        }
    }
    Ok(Some(schema))
}

/// How the opening schema relates to the stored one.
#[derive(Debug)]
pub(crate) enum Relation {
    /// Nothing stored yet, the same schema, or an evolution of it: record it.
    Upgrade,
    /// The stored schema is a newer evolution of the opening one: keep it.
    Older(Arc<Schema>),
}

/// Decide what this open may do to the stored schema (module docs), and point
/// `keel_field` at the newer stored schema when an older build opens.
pub(crate) fn relate(
    path: &Path,
    stored: Option<Schema>,
    opening: &Schema,
    field_schema: &FieldSchema,
) -> Result<Relation> {
    let Some(old) = stored else {
        return Ok(Relation::Upgrade);
    };
    match keel_schema::compat::check(&old, opening) {
        Ok(_) => Ok(Relation::Upgrade),
        Err(problems) => {
            if keel_schema::compat::check(opening, &old).is_ok() {
                tracing::info!(
                    "opening with an older schema than the stored one: keeping the stored schema and its indexes"
                );
                let old = Arc::new(old);
                *field_schema.write().unwrap_or_else(|p| p.into_inner()) = Arc::clone(&old);
                return Ok(Relation::Older(old));
            }
            let list: Vec<String> = problems.iter().map(|p| p.to_string()).collect();
            Err(SErr::Schema {
                path: path.to_path_buf(),
                message: format!(
                    "the new schema is incompatible with the stored one: {} (register a migration to move the data)",
                    list.join("; ")
                ),
            }
            .into())
        }
    }
}

/// Index names the stored (newer) schema declares: an older build must keep them.
pub(crate) fn declared_indexes(schema: &Arc<Schema>) -> Result<Vec<String>> {
    let mut names = Vec::new();
    for ci in 0..schema.collections.len() {
        let c = Coll::build(schema, ci, schema)?;
        names.extend(c.indexes.iter().map(|ix| ix.name.clone()));
    }
    Ok(names)
}

/// Create a unique index on an existing table whose column is filled, in the
/// schema phase: if stored objects already share a value, the open fails naming
/// one, instead of the index being recorded as failed while uniqueness goes
/// unenforced.
pub(crate) fn build_unique(
    conn: &rusqlite::Connection,
    path: &Path,
    c: &Coll,
    ix: &IndexSql,
) -> Result<()> {
    let e = match conn.execute_batch(&ix.create) {
        Ok(()) => return Ok(()),
        Err(e) => e,
    };
    let is_unique = matches!(&e, rusqlite::Error::SqliteFailure(f, _)
        if f.code == rusqlite::ErrorCode::ConstraintViolation);
    if !is_unique {
        return Err(classify("create unique index", path, e).into());
    }
    // Find one duplicated value and two objects holding it, to name them.
    let col = &ix.col_ident;
    let sql = format!(
        "SELECT {col}, min(rowid), max(rowid) FROM {} WHERE {col} IS NOT NULL GROUP BY {col} HAVING count(*) > 1 LIMIT 1",
        c.ident
    );
    let dup = conn
        .query_row(&sql, [], |r| {
            Ok((
                r.get::<_, rusqlite::types::Value>(0)?,
                r.get::<_, i64>(1)?,
                r.get::<_, i64>(2)?,
            ))
        })
        .map_err(|e| classify("find the duplicate of a unique index", path, e))?;
    let (v, a, b) = dup;
    let value = match v {
        rusqlite::types::Value::Integer(i) => keel_schema::Value::Int(i),
        rusqlite::types::Value::Real(f) => keel_schema::Value::Float(f),
        rusqlite::types::Value::Text(s) => keel_schema::Value::Text(s),
        rusqlite::types::Value::Blob(b) => keel_schema::Value::Blob(b),
        rusqlite::types::Value::Null => keel_schema::Value::Null,
    };
    Err(Error::UniqueIndexViolated {
        path: path.to_path_buf(),
        collection: c.name.clone(),
        index: ix.name.clone(),
        value,
        rowids: (a, b),
    })
}

/// The storage error a failed schema phase hands the kernel (the typed error itself
/// travels beside it, see `db/database.rs`).
pub(crate) fn to_storage(e: &Error, path: &Path) -> SErr {
    match e {
        Error::Storage(s) => s.clone(),
        // Raised by the kernel before any schema work; kept as they came, so that
        // a key error never reads as a schema one.
        Error::KeyUnavailable { op, path, detail } => SErr::KeyUnavailable {
            op,
            path: path.clone(),
            detail: detail.clone(),
        },
        Error::KeyLost { op, path, detail } => SErr::KeyLost {
            op,
            path: path.clone(),
            detail: detail.clone(),
        },
        Error::WrongKey { op, path } => SErr::WrongKey {
            op,
            path: path.clone(),
        },
        Error::NotEncrypted { op, path } => SErr::NotEncrypted {
            op,
            path: path.clone(),
        },
        other => SErr::Schema {
            path: path.to_path_buf(),
            message: other.to_string(),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A file SQLite can only open read-only (permissions, a read-only mount; shown
    /// here with a read-only connection, since root ignores file modes) fails its
    /// first write with `SQLITE_READONLY`: the file is unwritable, not a schema error.
    #[test]
    fn a_write_refused_as_read_only_is_unreadable_not_a_schema_error() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("ro.db");
        rusqlite::Connection::open(&p)
            .unwrap()
            .execute_batch("CREATE TABLE t(x)")
            .unwrap();
        let ro =
            rusqlite::Connection::open_with_flags(&p, rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY)
                .unwrap();
        let e = ro.execute_batch(META_DDL_PROBE).unwrap_err();
        assert!(matches!(
            classify("create keel metadata tables", &p, e),
            SErr::Unreadable { .. }
        ),);
    }

    const META_DDL_PROBE: &str = "CREATE TABLE keel_meta(key TEXT PRIMARY KEY, value)";
}
