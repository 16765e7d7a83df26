//! The SQL layout (storage format 2): one table per collection whose indexed fields
//! are plain columns keel writes from the object, plain indexes on them, keel's
//! metadata.
//!
//! ```sql
//! CREATE TABLE "blog.Post"(rowid INTEGER PRIMARY KEY, k0 NOT NULL, body BLOB NOT NULL, "f1", "f14", UNIQUE(k0));
//! CREATE INDEX "blog.Post#1" ON "blog.Post"("f1");
//! CREATE UNIQUE INDEX "blog.Post#14" ON "blog.Post"("f14");
//! CREATE TABLE keel_meta(key TEXT PRIMARY KEY, value) WITHOUT ROWID;  -- schema text, fingerprint, format
//! CREATE TABLE keel_index(name TEXT PRIMARY KEY, collection TEXT, field INTEGER, is_unique INTEGER, state TEXT, sig TEXT);
//! ```
//!
//! An index column is named `f` + the indexed path by field ids (`f1`, `f6:1.0` for
//! a field of a union member): ids, not names, so it survives renames. It holds the
//! value `keel_field(body, 'coll/…')` would compute (the same extraction, done once
//! per write in Rust), has no declared type (so SQLite applies no affinity, as to
//! the function's result), and so every comparison on it means what it meant on the
//! field. Nothing in the stored schema calls a keel function: stock SQLite tools
//! check and read every table and index. `keel_index.sig` is what the column was
//! computed with ([`ResolvedPath::read_signature`]): a schema change that alters it
//! (a new default) makes the column be rebuilt.
//!
//! Format 1 (before) had no index columns and expression indexes over
//! `keel_field(body, …)`; the schema phase (`open/schema_phase.rs`) turns such a file
//! into format 2 in the schema transaction. This module is the table model the
//! others build on; it depends on none of them but `body` (how the body column
//! holds an object's bytes).

use std::borrow::Cow;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use keel_schema::{
    DynamicTable, FieldPath, FieldType, PathStep, ResolvedPath, ScalarType, Schema, Value,
};
use rusqlite::types::Value as SqlOwned;

use crate::layout::body::BodyColumns;
use crate::layout::side_table::{Kind, Owner, SideTable};

use crate::base::error::{Error, Result};
use crate::base::sql_value::SqlValue;
use crate::layout::links::Links;
use crate::layout::vector_table::VectorSql;
use crate::search::language::SearchSql;

/// The storage format this build writes (recorded in `keel_meta` as `format`):
///
/// * 1: no index columns, expression indexes over `keel_field(body, …)`;
/// * 2: index columns with plain indexes ([`INDEX_COLUMNS_FORMAT`]);
/// * 3: a `body` may be stored without its key string (`layout/body.rs`). A build that
///   reads format 2 would hand out such a body as it is stored, without its key,
///   so it must refuse the file ("written by a newer keel"); this build reads
///   both kinds of body side by side, so a format-2 file needs no rewrite: its
///   next open records 3.
pub(crate) const FORMAT: i64 = 3;

/// The first format with index columns: an older file is upgraded in the schema
/// transaction (index columns filled, expression indexes dropped).
pub(crate) const INDEX_COLUMNS_FORMAT: i64 = 2;

/// The dictionary's table (see [`Dictionary`](crate::Dictionary)), created in the
/// schema phase with the collections' tables.
pub(crate) const DICT_TABLE_SQL: &str = "CREATE TABLE IF NOT EXISTS keel_dict(key TEXT PRIMARY KEY, kind INTEGER NOT NULL, type TEXT, value) WITHOUT ROWID;";

/// One primary-key part.
#[derive(Debug, Clone)]
pub(crate) struct KeyPart {
    pub(crate) name: String,
    pub(crate) path: ResolvedPath,
    pub(crate) kind: KeyKind,
}

#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) enum KeyKind {
    Int,
    Bool,
    Float,
    Text,
    Other,
}

/// A secondary index of a collection and the column it indexes.
#[derive(Debug, Clone)]
pub(crate) struct IndexSql {
    pub(crate) name: String,
    pub(crate) field: u16,
    pub(crate) unique: bool,
    /// The column's name (unquoted), e.g. `f1`.
    pub(crate) column: String,
    /// The column as an SQL identifier.
    pub(crate) col_ident: String,
    /// The indexed path as `keel_field` path text (`blog.Post/1`): what queries match.
    pub(crate) path_text: String,
    /// The path resolved in the collection's extraction schema (`None`: that schema
    /// does not know it; the column then always holds `NULL`).
    pub(crate) resolved: Option<ResolvedPath>,
    /// What the column is computed with (see the module docs).
    pub(crate) sig: String,
    pub(crate) create: String,
    /// Nonzero once the column holds every object's value and the index exists:
    /// queries may read the column. Until then they read the field out of the bytes
    /// (a scan). The value is the [`ready_epoch`] at which it became ready.
    pub(crate) ready: Arc<AtomicU64>,
}

/// Counts index builds completed in this process: a snapshot that began before a
/// build committed must not read that build's column (its view may predate it).
static READY_EPOCH: AtomicU64 = AtomicU64::new(1);

/// The current build epoch (see [`READY_EPOCH`]); a snapshot takes it before its
/// read transaction starts.
pub(crate) fn ready_epoch() -> u64 {
    READY_EPOCH.load(Ordering::Acquire)
}

impl IndexSql {
    /// Whether queries may read the column: it is complete, and — for a read in a
    /// snapshot taken at epoch `as_of` — was complete before the snapshot began.
    pub(crate) fn is_ready(&self, as_of: Option<u64>) -> bool {
        let at = self.ready.load(Ordering::Acquire);
        at != 0 && as_of.is_none_or(|e| at <= e)
    }

    /// The column was complete when the database opened.
    pub(crate) fn mark_ready_at_open(&self) {
        self.ready.store(1, Ordering::Release);
    }

    /// A background build committed (called after COMMIT).
    pub(crate) fn mark_built(&self) {
        let e = READY_EPOCH.fetch_add(1, Ordering::AcqRel) + 1;
        self.ready.store(e, Ordering::Release);
    }
}

/// Everything the engine needs about one collection, with its SQL prepared as text.
#[derive(Debug, Clone)]
pub(crate) struct Coll {
    pub(crate) name: String,
    pub(crate) table: usize,
    pub(crate) ident: String,
    pub(crate) key: Vec<KeyPart>,
    /// Field ids of the primary key: the field `key_ids[i]` is stored in `k{i}`.
    pub(crate) key_ids: Vec<u16>,
    pub(crate) indexes: Vec<IndexSql>,
    /// The schema index columns are extracted with: the opening schema, or the newer
    /// schema stored in the file when an older build opens it (`layout/stored.rs`), so the
    /// columns agree whichever build wrote the object.
    pub(crate) ext: Arc<Schema>,
    /// The collection's table in `ext` (`None`: `ext` lacks it; columns are `NULL`).
    pub(crate) ext_table: Option<usize>,
    /// How the body column holds the objects (`layout/body.rs`): what a read selects after
    /// `rowid` (`body`, then the key column a body without its key string is
    /// restored from), and how writes store them.
    pub(crate) body: BodyColumns,
    /// The full-text index (`search/language.rs`, `layout/fts.rs`), when the collection has
    /// `(searchable)` fields (in the extraction schema, like the index columns).
    pub(crate) search: Option<SearchSql>,
    /// Its `(references: …)` links, both ways (`layout/links.rs`): delete rules and the
    /// `dangling: false` check.
    pub(crate) links: Links,
    /// The packed vector side table (`vector/column.rs`), when the collection has
    /// `(vector: N)` fields (in the extraction schema, like the index columns).
    pub(crate) vectors: Option<VectorSql>,
    /// Marked `(sync)`: its writes go to the outbox (`layout/outbox.rs`), so a
    /// write closure records them.
    pub(crate) synced: bool,
    /// `(k…, body, columns…)`.
    pub(crate) sql_insert: String,
    pub(crate) sql_find: String,
    /// `body = ?1, columns = ?3… WHERE rowid = ?2`.
    pub(crate) sql_update: String,
    /// One statement: `body` and columns by key, only if the bytes differ (params:
    /// key…, body, columns…). The rowid comes from the writer's update hook
    /// (`WriteTxn::row_changes`), not `RETURNING rowid`: SQLite codes that as a
    /// trigger writing an ephemeral table, 7× slower per update.
    pub(crate) sql_update_key: String,
    pub(crate) sql_find_rowid: String,
    pub(crate) sql_delete_key: String,
    pub(crate) sql_delete: String,
    pub(crate) sql_get: String,
}

/// A double-quoted SQL identifier.
pub(crate) fn ident(name: &str) -> String {
    format!("\"{}\"", name.replace('"', "\"\""))
}

/// The path text of `path` for `collection` (`blog.Post/6:1.1`): what `keel_field`
/// takes and what names an index and its column.
pub(crate) fn path_text(collection: &str, path: &FieldPath) -> String {
    let mut s = String::with_capacity(collection.len() + 8);
    s.push_str(collection);
    s.push('/');
    for (i, st) in path.steps().iter().enumerate() {
        if i > 0 {
            s.push('.');
        }
        match st {
            PathStep::Field { id, .. } => s.push_str(&id.to_string()),
            PathStep::UnionMember { id, member, .. } => {
                s.push_str(&format!("{id}:{member}"));
            }
        }
    }
    s
}

/// The column of the index on `path_text` (`coll/steps`): `f` + the steps.
fn column_name(path_text: &str) -> String {
    let steps = path_text.rsplit_once('/').map_or(path_text, |(_, s)| s);
    format!("f{steps}")
}

impl Coll {
    /// The side tables this collection keeps beside its table (`side_table.rs`),
    /// in [`Kind::ALL`](crate::layout::side_table::Kind::ALL) order.
    pub(crate) fn side_tables(&self) -> impl Iterator<Item = &dyn SideTable> {
        let search = self.search.as_ref().map(|s| s as &dyn SideTable);
        let vectors = self.vectors.as_ref().map(|v| v as &dyn SideTable);
        search.into_iter().chain(vectors)
    }

    /// Its side table of `kind`, if it keeps one.
    pub(crate) fn side_table(&self, kind: Kind) -> Option<&dyn SideTable> {
        self.side_tables().find(|t| t.kind() == kind)
    }

    /// The collection as its side tables read its rows.
    pub(crate) fn owner(&self) -> Owner<'_> {
        Owner {
            name: &self.name,
            ident: &self.ident,
            body: &self.body,
        }
    }

    /// The collection `ci` of `schema`, its columns extracted with `schema` too.
    pub(crate) fn new(schema: &Schema, ci: usize) -> Result<Coll> {
        Coll::build(schema, ci, &Arc::new(schema.clone()))
    }

    /// The collection `ci` of `schema`; its index columns are those `schema`
    /// declares plus those `ext` declares for the same collection, extracted with
    /// `ext` (see [`Coll::ext`]).
    pub(crate) fn build(schema: &Schema, ci: usize, ext: &Arc<Schema>) -> Result<Coll> {
        let c = &schema.collections[ci];
        let t = schema.table(c.table);
        let reader = schema
            .table_reader(c.table)
            .ok_or_else(|| Error::UnknownCollection {
                op: "open",
                collection: c.name.clone(),
            })?;
        let mut key = Vec::new();
        for id in &c.primary_key {
            let f = t.field_by_id(*id).ok_or_else(|| Error::UnknownField {
                op: "open",
                collection: c.name.clone(),
                message: format!("primary-key field id {id} missing"),
            })?;
            let kind = match &f.ty {
                FieldType::String => KeyKind::Text,
                FieldType::Scalar(ScalarType::Bool) => KeyKind::Bool,
                FieldType::Scalar(s) if s.is_float() => KeyKind::Float,
                FieldType::Scalar(_) | FieldType::Enum(_) => KeyKind::Int,
                _ => KeyKind::Other,
            };
            let fp = FieldPath::new(vec![PathStep::Field {
                id: *id,
                name: f.name.clone().into(),
            }]);
            let path = reader.resolve(&fp).map_err(|e| Error::UnknownField {
                op: "open",
                collection: c.name.clone(),
                message: e.to_string(),
            })?;
            key.push(KeyPart {
                name: f.name.clone(),
                path,
                kind,
            });
        }
        let id = ident(&c.name);
        let ext_coll = ext.collection(&c.name);
        let ext_table = ext_coll.map(|ec| ec.table);
        let ext_reader = ext_table.and_then(|t| ext.table_reader(t));
        let mut indexes: Vec<IndexSql> = Vec::new();
        let declared = c
            .indexes
            .iter()
            .chain(ext_coll.into_iter().flat_map(|ec| ec.indexes.iter()));
        for ix in declared {
            let fp = FieldPath::new(ix.path.clone());
            let path_text = path_text(&c.name, &fp);
            // `blog.Post#1` for a field of the collection, `game.Monster#4:3.0` for
            // a deeper path (the names format 1 used too).
            let name = match &ix.path[..] {
                [PathStep::Field { id, .. }] => format!("{}#{id}", c.name),
                _ => {
                    let (_, steps) = path_text.rsplit_once('/').unwrap_or(("", &path_text));
                    format!("{}#{steps}", c.name)
                }
            };
            if indexes.iter().any(|i| i.name == name) {
                continue;
            }
            let column = column_name(&path_text);
            let col_ident = ident(&column);
            let resolved = ext_reader.and_then(|r| r.resolve(&fp).ok());
            let sig = resolved
                .as_ref()
                .map_or_else(|| "unknown".to_string(), |r| r.read_signature());
            indexes.push(IndexSql {
                create: format!(
                    "CREATE {}INDEX IF NOT EXISTS {} ON {id}({col_ident})",
                    if ix.unique { "UNIQUE " } else { "" },
                    ident(&name),
                ),
                name,
                field: ix.field,
                unique: ix.unique,
                column,
                col_ident,
                path_text,
                resolved,
                sig,
                ready: Arc::new(AtomicU64::new(0)),
            });
        }
        let kcols: Vec<String> = (0..key.len()).map(|i| format!("k{i}")).collect();
        let kwhere = if kcols.is_empty() {
            "rowid = ?1".to_string()
        } else {
            kcols
                .iter()
                .enumerate()
                .map(|(i, k)| format!("{k} = ?{}", i + 1))
                .collect::<Vec<_>>()
                .join(" AND ")
        };
        let n = key.len();
        let icols: Vec<&str> = indexes.iter().map(|i| i.col_ident.as_str()).collect();
        let sql_insert = {
            let cols: Vec<&str> = kcols
                .iter()
                .map(String::as_str)
                .chain(std::iter::once("body"))
                .chain(icols.iter().copied())
                .collect();
            let qs: Vec<String> = (1..=cols.len()).map(|i| format!("?{i}")).collect();
            format!(
                "INSERT INTO {id}({}) VALUES ({})",
                cols.join(", "),
                qs.join(", ")
            )
        };
        let set_cols = |first: usize| -> String {
            icols
                .iter()
                .enumerate()
                .map(|(i, c)| format!(", {c} = ?{}", first + i))
                .collect()
        };
        let body_p = n.max(1) + 1;
        let body = BodyColumns::of(schema, &c.name);
        Ok(Coll {
            name: c.name.clone(),
            table: c.table,
            sql_insert,
            // By key: the key columns hold the key looked up, so `body` alone.
            sql_find: format!("SELECT rowid, body FROM {id} WHERE {kwhere}"),
            sql_update: format!("UPDATE {id} SET body = ?1{} WHERE rowid = ?2", set_cols(3)),
            sql_update_key: format!(
                "UPDATE {id} SET body = ?{body_p}{} WHERE {kwhere} AND body IS NOT ?{body_p}",
                set_cols(body_p + 1)
            ),
            sql_find_rowid: format!("SELECT rowid FROM {id} WHERE {kwhere}"),
            sql_delete_key: format!("DELETE FROM {id} WHERE {kwhere}"),
            sql_delete: format!("DELETE FROM {id} WHERE rowid = ?1"),
            sql_get: format!("SELECT rowid, body FROM {id} WHERE {kwhere}"),
            ident: id,
            key,
            key_ids: c.primary_key.clone(),
            indexes,
            search: SearchSql::of(&c.name, ext_table.map_or(t, |et| ext.table(et))),
            links: Links::of(schema, &c.name),
            vectors: VectorSql::of(&c.name, ext_table.map_or(t, |et| ext.table(et))),
            synced: t.sync.is_some(),
            ext: Arc::clone(ext),
            ext_table,
            body,
        })
    }

    /// The table of the extraction schema (see [`Coll::ext`]).
    pub(crate) fn ext_reader(&self) -> Option<DynamicTable<'_>> {
        self.ext_table.and_then(|t| self.ext.table_reader(t))
    }

    /// The value of every index column for the object in `bytes`, in index order,
    /// borrowed from the bytes: what `keel_field(body, …)` returns for its path
    /// (unreadable → `NULL`). Writes bind these directly (`txn/transaction.rs` `bind_row`).
    pub(crate) fn column_refs<'b>(
        &'b self,
        bytes: &'b [u8],
    ) -> impl Iterator<Item = SqlValue<'b>> + 'b {
        let obj = self.ext_reader().and_then(|r| r.open(bytes).ok());
        self.indexes
            .iter()
            .map(move |ix| match (&obj, &ix.resolved) {
                (Some(o), Some(p)) => o.get_ref(p).map_or(SqlValue::Null, SqlValue::from_ref),
                _ => SqlValue::Null,
            })
    }

    /// [`Coll::column_refs`], owned.
    pub(crate) fn column_values(&self, bytes: &[u8]) -> Vec<SqlOwned> {
        self.column_refs(bytes)
            .map(|v| to_sql_owned::<()>(Ok(v)))
            .collect()
    }

    pub(crate) fn create_table_sql(&self) -> String {
        let mut cols: Vec<String> = vec!["rowid INTEGER PRIMARY KEY".into()];
        cols.extend((0..self.key.len()).map(|i| format!("k{i} NOT NULL")));
        cols.push("body BLOB NOT NULL".into());
        cols.extend(self.indexes.iter().map(|i| i.col_ident.clone()));
        if !self.key.is_empty() {
            let k: Vec<String> = (0..self.key.len()).map(|i| format!("k{i}")).collect();
            cols.push(format!("UNIQUE({})", k.join(", ")));
        }
        format!(
            "CREATE TABLE IF NOT EXISTS {}({})",
            self.ident,
            cols.join(", ")
        )
    }

    /// Check and normalise key values given by a caller.
    pub(crate) fn check_key(&self, op: &'static str, key: &[Value]) -> Result<Vec<Value>> {
        self.check_key_ref(op, key).map(Cow::into_owned)
    }

    /// [`Coll::check_key`] for a key the caller owns: normalised in place, no copy.
    pub(crate) fn check_key_owned(&self, op: &'static str, key: Vec<Value>) -> Result<Vec<Value>> {
        let normalised = match self.check_key_ref(op, &key)? {
            Cow::Borrowed(_) => None,
            Cow::Owned(n) => Some(n),
        };
        Ok(normalised.unwrap_or(key))
    }

    /// [`Coll::check_key`] without copying a key that needs no normalising (the
    /// usual case: a lookup by key binds the caller's values as they are).
    pub(crate) fn check_key_ref<'k>(
        &self,
        op: &'static str,
        key: &'k [Value],
    ) -> Result<Cow<'k, [Value]>> {
        let mismatch = |message: String| Error::TypeMismatch {
            op,
            collection: self.name.clone(),
            message,
        };
        if self.key.is_empty() {
            return match key {
                [Value::Int(_)] => Ok(Cow::Borrowed(key)),
                _ => Err(mismatch(format!(
                    "{} has no primary key; address objects by rowid (one int), got {key:?}",
                    self.name
                ))),
            };
        }
        if key.len() != self.key.len() {
            return Err(mismatch(format!(
                "the primary key has {} part(s), got {}",
                self.key.len(),
                key.len()
            )));
        }
        let mut normalised: Option<Vec<Value>> = None;
        for (i, (v, k)) in key.iter().zip(&self.key).enumerate() {
            let to = match (k.kind, v) {
                (KeyKind::Text, Value::Text(_))
                | (KeyKind::Int, Value::Int(_))
                | (KeyKind::Other, _) => None,
                (KeyKind::Bool, Value::Bool(b)) => Some(Value::Int(*b as i64)),
                (KeyKind::Bool, Value::Int(i)) if *i == 0 || *i == 1 => None,
                (KeyKind::Float, Value::Float(f)) if !f.is_nan() => None,
                (KeyKind::Float, Value::Int(i)) => Some(Value::Float(*i as f64)),
                _ => {
                    return Err(mismatch(format!(
                        "key field {:?} expects {:?}, got {} ({v})",
                        k.name,
                        k.kind,
                        v.kind()
                    )))
                }
            };
            if let Some(to) = to {
                normalised.get_or_insert_with(|| key.to_vec())[i] = to;
            }
        }
        Ok(normalised.map_or(Cow::Borrowed(key), Cow::Owned))
    }
}

/// An extracted value as SQLite stores it (what `keel_field` returns).
pub(crate) fn to_sql_owned<E>(v: std::result::Result<SqlValue<'_>, E>) -> SqlOwned {
    match v {
        Ok(SqlValue::Int(i)) => SqlOwned::Integer(i),
        Ok(SqlValue::Float(f)) => SqlOwned::Real(f),
        Ok(SqlValue::Text(s)) => SqlOwned::Text(s.to_owned()),
        Ok(SqlValue::Blob(b)) => SqlOwned::Blob(b.to_vec()),
        Ok(SqlValue::Null) | Err(_) => SqlOwned::Null,
    }
}

/// The names of `table`'s columns, in order.
pub(crate) fn table_columns(
    conn: &rusqlite::Connection,
    table_ident: &str,
) -> rusqlite::Result<Vec<String>> {
    let mut st = conn.prepare(&format!("PRAGMA table_info({table_ident})"))?;
    let rows = st
        .query_map([], |r| r.get::<_, String>(1))?
        .collect::<rusqlite::Result<Vec<_>>>()?;
    Ok(rows)
}

/// Fill index columns `which` of every object of `c` from its bytes, in rowid
/// batches; `tick` gets the number of objects done so far.
pub(crate) fn backfill(
    conn: &rusqlite::Connection,
    c: &Coll,
    which: &[usize],
    tick: &mut dyn FnMut(u64),
) -> rusqlite::Result<u64> {
    if which.is_empty() {
        return Ok(0);
    }
    let sets: Vec<String> = which
        .iter()
        .enumerate()
        .map(|(j, k)| format!("{} = ?{}", c.indexes[*k].col_ident, j + 2))
        .collect();
    let upd = format!(
        "UPDATE {} SET {} WHERE rowid = ?1",
        c.ident,
        sets.join(", ")
    );
    let sel = format!(
        "SELECT rowid, {} FROM {} WHERE rowid > ?1 ORDER BY rowid LIMIT 512",
        c.body.select(),
        c.ident
    );
    let mut last = i64::MIN;
    let mut done = 0u64;
    loop {
        let batch: Vec<(i64, Vec<SqlOwned>)> = {
            let mut st = conn.prepare_cached(&sel)?;
            let mut scratch = Vec::new();
            let rows = st.query_map([last], |r| {
                let rowid: i64 = r.get(0)?;
                let vals = match c.body.read(r, 1, &mut scratch)? {
                    [] => vec![SqlOwned::Null; c.indexes.len()],
                    b => c.column_values(b),
                };
                Ok((rowid, vals))
            })?;
            rows.collect::<rusqlite::Result<_>>()?
        };
        let Some((l, _)) = batch.last() else {
            return Ok(done);
        };
        last = *l;
        let mut st = conn.prepare_cached(&upd)?;
        for (rowid, vals) in &batch {
            let mut params: Vec<&dyn rusqlite::ToSql> = vec![rowid];
            params.extend(which.iter().map(|k| &vals[*k] as &dyn rusqlite::ToSql));
            st.execute(params.as_slice())?;
        }
        done += batch.len() as u64;
        tick(done);
    }
}

/// Fill index `k`'s column and create the index, in the caller's transaction
/// (the background build after open; the schema phase for a unique index or a
/// format upgrade, see [`schema_phase`](crate::open::schema_phase)).
pub(crate) fn build_index(
    conn: &rusqlite::Connection,
    c: &Coll,
    k: usize,
    tick: &mut dyn FnMut(u64),
) -> rusqlite::Result<()> {
    backfill(conn, c, &[k], tick)?;
    conn.execute_batch(&c.indexes[k].create)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn layout_sql_and_key_checks() {
        let schema = Schema::parse(
            "namespace n; table T { a: string (primary); b: long (primary); c: int (unique); } root_type T;",
            "t.fbs",
        )
        .unwrap();
        let c = Coll::new(&schema, 0).unwrap();
        assert_eq!(
            c.create_table_sql(),
            "CREATE TABLE IF NOT EXISTS \"n.T\"(rowid INTEGER PRIMARY KEY, k0 NOT NULL, k1 NOT NULL, body BLOB NOT NULL, \"f2\", UNIQUE(k0, k1))"
        );
        assert_eq!(
            c.indexes[0].create,
            "CREATE UNIQUE INDEX IF NOT EXISTS \"n.T#2\" ON \"n.T\"(\"f2\")"
        );
        assert_eq!(
            c.sql_update_key,
            "UPDATE \"n.T\" SET body = ?3, \"f2\" = ?4 WHERE k0 = ?1 AND k1 = ?2 AND body IS NOT ?3"
        );
        assert!(!c.create_table_sql().contains("keel_field"));
        assert!(c.check_key("get", &["x".into(), 1.into()]).is_ok());
        assert!(matches!(
            c.check_key("get", &["x".into()]),
            Err(Error::TypeMismatch { .. })
        ));
        assert!(matches!(
            c.check_key("get", &[1.into(), 1.into()]),
            Err(Error::TypeMismatch { .. })
        ));
        assert!(matches!(
            c.check_key("get", &["x".into(), 1.5.into()]),
            Err(Error::TypeMismatch { .. })
        ));
    }
}
