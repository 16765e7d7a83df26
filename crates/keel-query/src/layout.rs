//! The SQL layout: one table per collection, expression indexes, keel's metadata.
//!
//! ```sql
//! CREATE TABLE "blog.Post"(rowid INTEGER PRIMARY KEY, k0 NOT NULL, body BLOB NOT NULL, UNIQUE(k0));
//! CREATE INDEX "blog.Post#1" ON "blog.Post"(keel_field(body,'blog.Post/1'));
//! CREATE UNIQUE INDEX "blog.Post#14" ON "blog.Post"(keel_field(body,'blog.Post/14'));
//! CREATE TABLE keel_meta(key TEXT PRIMARY KEY, value) WITHOUT ROWID;  -- schema text, fingerprint
//! CREATE TABLE keel_index(name TEXT PRIMARY KEY, collection TEXT, field INTEGER, is_unique INTEGER, state TEXT);
//! ```

use std::path::Path;

use keel_schema::{FieldPath, FieldType, PathStep, ResolvedPath, ScalarType, Schema, Value};

use crate::error::{Error, Result};
use crate::sql::{field_sql, ident};

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

/// A secondary index of a collection.
#[derive(Debug, Clone)]
pub(crate) struct IndexSql {
    pub(crate) name: String,
    pub(crate) field: u16,
    pub(crate) unique: bool,
    pub(crate) create: String,
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
    pub(crate) sql_insert: String,
    pub(crate) sql_find: String,
    pub(crate) sql_update: String,
    pub(crate) sql_find_same: String,
    pub(crate) sql_delete_key: String,
    pub(crate) sql_delete: String,
    pub(crate) sql_get: String,
}

impl Coll {
    pub(crate) fn new(schema: &Schema, ci: usize) -> Result<Coll> {
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
        let sql_insert = if n == 0 {
            format!("INSERT INTO {id}(body) VALUES (?1)")
        } else {
            let qs: Vec<String> = (1..=n).map(|i| format!("?{i}")).collect();
            format!(
                "INSERT INTO {id}({}, body) VALUES ({}, ?{})",
                kcols.join(", "),
                qs.join(", "),
                n + 1
            )
        };
        let indexes = c
            .indexes
            .iter()
            .map(|ix| {
                let fp = FieldPath::new(ix.path.clone());
                // `blog.Post#1` for a field of the collection (the name older
                // files have), `game.Monster#4:3.0` for a deeper path.
                let name = match &ix.path[..] {
                    [PathStep::Field { id, .. }] => crate::inspect::index_name(&c.name, *id),
                    _ => {
                        let text = crate::sql::path_text(&c.name, &fp);
                        let (_, steps) = text.rsplit_once('/').unwrap_or(("", &text));
                        format!("{}#{steps}", c.name)
                    }
                };
                IndexSql {
                    create: format!(
                        "CREATE {}INDEX IF NOT EXISTS {} ON {id}({})",
                        if ix.unique { "UNIQUE " } else { "" },
                        ident(&name),
                        field_sql(&c.name, &fp)
                    ),
                    name,
                    field: ix.field,
                    unique: ix.unique,
                }
            })
            .collect();
        Ok(Coll {
            name: c.name.clone(),
            table: c.table,
            sql_insert,
            sql_find: format!("SELECT rowid, body FROM {id} WHERE {kwhere}"),
            sql_update: format!("UPDATE {id} SET body = ?1 WHERE rowid = ?2"),
            sql_find_same: format!(
                "SELECT rowid, body IS ?{p} FROM {id} WHERE {kwhere}",
                p = n.max(1) + 1
            ),
            sql_delete_key: format!("DELETE FROM {id} WHERE {kwhere}"),
            sql_delete: format!("DELETE FROM {id} WHERE rowid = ?1"),
            sql_get: format!("SELECT rowid, body FROM {id} WHERE {kwhere}"),
            ident: id,
            key,
            key_ids: c.primary_key.clone(),
            indexes,
        })
    }

    pub(crate) fn create_table_sql(&self) -> String {
        if self.key.is_empty() {
            format!(
                "CREATE TABLE IF NOT EXISTS {}(rowid INTEGER PRIMARY KEY, body BLOB NOT NULL)",
                self.ident
            )
        } else {
            let cols: Vec<String> = (0..self.key.len()).map(|i| format!("k{i}")).collect();
            format!(
                "CREATE TABLE IF NOT EXISTS {}(rowid INTEGER PRIMARY KEY, {}, body BLOB NOT NULL, UNIQUE({}))",
                self.ident,
                cols.iter().map(|c| format!("{c} NOT NULL")).collect::<Vec<_>>().join(", "),
                cols.join(", ")
            )
        }
    }

    /// Check and normalise key values given by a caller.
    pub(crate) fn check_key(&self, op: &'static str, key: &[Value]) -> Result<Vec<Value>> {
        let mismatch = |message: String| Error::TypeMismatch {
            op,
            collection: self.name.clone(),
            message,
        };
        if self.key.is_empty() {
            return match key {
                [Value::Int(r)] => Ok(vec![Value::Int(*r)]),
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
        key.iter()
            .zip(&self.key)
            .map(|(v, k)| {
                Ok(match (k.kind, v) {
                    (KeyKind::Text, Value::Text(_)) => v.clone(),
                    (KeyKind::Int, Value::Int(_)) => v.clone(),
                    (KeyKind::Bool, Value::Bool(b)) => Value::Int(*b as i64),
                    (KeyKind::Bool, Value::Int(i)) if *i == 0 || *i == 1 => v.clone(),
                    (KeyKind::Float, Value::Float(f)) if !f.is_nan() => v.clone(),
                    (KeyKind::Float, Value::Int(i)) => Value::Float(*i as f64),
                    (KeyKind::Other, _) => v.clone(),
                    _ => {
                        return Err(mismatch(format!(
                            "key field {:?} expects {:?}, got {} ({v})",
                            k.name,
                            k.kind,
                            v.kind()
                        )))
                    }
                })
            })
            .collect()
    }
}

/// What the schema phase found, for the database to act on after open.
#[derive(Debug, Default)]
pub(crate) struct SchemaOutcome {
    /// Indexes new to this database: built by a background write after open.
    pub(crate) pending: Vec<(String, String)>,
    /// The typed error of a failed schema phase (the kernel carries only its text).
    pub(crate) failure: Option<Error>,
    /// Collections whose table this open creates. While the open barrier runs the
    /// schema transaction is not committed yet, so readers do not see these tables.
    pub(crate) created: Vec<String>,
}

const META_DDL: &str = "CREATE TABLE IF NOT EXISTS keel_meta(key TEXT PRIMARY KEY, value) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS keel_index(name TEXT PRIMARY KEY, collection TEXT NOT NULL, field INTEGER NOT NULL, is_unique INTEGER NOT NULL, state TEXT NOT NULL);";

fn sq(
    path: &Path,
) -> impl Fn(&'static str) -> Box<dyn Fn(rusqlite::Error) -> keel_storage::Error> + '_ {
    move |op| {
        let p = path.to_path_buf();
        Box::new(move |e| crate::stored::classify(op, &p, e))
    }
}

/// The schema phase: run pending migrations, create/verify tables and indexes,
/// record the schema (see `stored.rs` for what an older schema may change).
pub(crate) fn schema_phase(
    conn: &rusqlite::Connection,
    path: &Path,
    schema: &Schema,
    colls: &[Coll],
    field_schema: &crate::stored::FieldSchema,
    migrator: Option<&mut crate::migrate::Migrator>,
) -> Result<SchemaOutcome> {
    let err = sq(path);
    conn.execute_batch(META_DDL)
        .map_err(err("create keel metadata tables"))?;
    conn.execute_batch(DICT_TABLE_SQL)
        .map_err(err("create the dictionary table"))?;
    let mut stored = crate::stored::read_stored(conn, path)?;
    if let Some(m) = migrator {
        stored = m.run(conn, path, stored, schema)?;
    }
    let relation = crate::stored::relate(path, stored, schema, field_schema)?;
    let keep: Vec<String> = match &relation {
        crate::stored::Relation::Older(newer) => crate::stored::declared_indexes(newer)?,
        crate::stored::Relation::Upgrade => Vec::new(),
    };
    let exists = |kind: &str, name: &str| -> rusqlite::Result<bool> {
        conn.query_row(
            "SELECT count(*) FROM sqlite_schema WHERE type = ?1 AND name = ?2",
            [kind, name],
            |r| r.get::<_, i64>(0),
        )
        .map(|n| n > 0)
    };
    let mut out = SchemaOutcome::default();
    let mut wanted = Vec::new();
    for c in colls {
        let fresh = !exists("table", &c.name).map_err(err("inspect tables"))?;
        if fresh {
            out.created.push(c.name.clone());
        }
        conn.execute_batch(&c.create_table_sql())
            .map_err(err("create collection table"))?;
        // Verify an existing table has keel's layout for this collection.
        let cols: Vec<String> = {
            let mut st = conn
                .prepare(&format!("PRAGMA table_info({})", c.ident))
                .map_err(err("inspect collection table"))?;
            let rows = st
                .query_map([], |r| r.get::<_, String>(1))
                .map_err(err("inspect collection table"))?
                .collect::<rusqlite::Result<Vec<_>>>()
                .map_err(err("inspect collection table"))?;
            rows
        };
        let want: Vec<String> = std::iter::once("rowid".to_string())
            .chain((0..c.key.len()).map(|i| format!("k{i}")))
            .chain(std::iter::once("body".to_string()))
            .collect();
        if cols != want {
            return Err(keel_storage::Error::Schema {
                path: path.to_path_buf(),
                message: format!(
                    "table {} has columns {cols:?}, expected {want:?} (was its primary key changed?)",
                    c.ident
                ),
            }
            .into());
        }
        for ix in &c.indexes {
            wanted.push(ix.name.clone());
            let built = exists("index", &ix.name).map_err(err("inspect indexes"))?;
            let state = if built || fresh {
                if !built {
                    conn.execute_batch(&ix.create)
                        .map_err(err("create index"))?;
                }
                "ready"
            } else if ix.unique {
                // Not in the background: a duplicate must fail the open, never
                // leave uniqueness silently unenforced.
                crate::stored::build_unique(conn, path, c, ix)?;
                "ready"
            } else {
                out.pending.push((ix.name.clone(), ix.create.clone()));
                "building"
            };
            conn.execute(
                "INSERT INTO keel_index(name, collection, field, is_unique, state) VALUES (?1, ?2, ?3, ?4, ?5)
                 ON CONFLICT(name) DO UPDATE SET state = excluded.state WHERE state IS NOT excluded.state",
                rusqlite::params![ix.name, c.name, ix.field, ix.unique, state],
            )
            .map_err(err("record index state"))?;
        }
    }
    // Indexes the schema no longer declares: drop them (they only cost writes).
    let old: Vec<String> = {
        let mut st = conn
            .prepare("SELECT name FROM keel_index")
            .map_err(err("list indexes"))?;
        let rows = st
            .query_map([], |r| r.get::<_, String>(0))
            .map_err(err("list indexes"))?
            .collect::<rusqlite::Result<Vec<_>>>()
            .map_err(err("list indexes"))?;
        rows
    };
    for name in old
        .iter()
        .filter(|n| !wanted.contains(n) && !keep.contains(n))
    {
        conn.execute_batch(&format!("DROP INDEX IF EXISTS {}", ident(name)))
            .map_err(err("drop removed index"))?;
        conn.execute("DELETE FROM keel_index WHERE name = ?1", [name])
            .map_err(err("drop removed index"))?;
    }
    if matches!(relation, crate::stored::Relation::Older(_)) {
        // An older build: the newer stored schema stays (see stored.rs).
        return Ok(out);
    }
    conn.execute(
        // Written only when it differs, so a plain reopen writes nothing.
        "INSERT INTO keel_meta(key, value) VALUES ('schema', ?1), ('fingerprint', ?2), ('format', 1)
         ON CONFLICT(key) DO UPDATE SET value = excluded.value WHERE value IS NOT excluded.value",
        rusqlite::params![schema.to_fbs(), format!("{:016x}", schema.fingerprint())],
    )
    .map_err(err("record schema"))?;
    Ok(out)
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
            "CREATE TABLE IF NOT EXISTS \"n.T\"(rowid INTEGER PRIMARY KEY, k0 NOT NULL, k1 NOT NULL, body BLOB NOT NULL, UNIQUE(k0, k1))"
        );
        assert_eq!(
            c.indexes[0].create,
            "CREATE UNIQUE INDEX IF NOT EXISTS \"n.T#2\" ON \"n.T\"(keel_field(body,'n.T/2'))"
        );
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
