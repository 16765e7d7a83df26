//! The storage layout as facts, for tools that read a keel file without opening a
//! [`Database`](crate::db::database::Database) — the `keel` command-line tool (`keel info`,
//! `keel dump`, `keel check`) opens the file read-only with plain SQLite and uses
//! these so it never guesses keel's private layout.
//!
//! ```
//! use keel_query::inspect;
//! assert_eq!(inspect::table_ident("blog.Post"), "\"blog.Post\"");
//! assert_eq!(inspect::key_columns(2), vec!["k0", "k1"]);
//! assert_eq!(inspect::index_name("blog.Post", 1), "blog.Post#1");
//! assert_eq!(inspect::META_TABLE, "keel_meta");
//! ```

use std::sync::Arc;

use keel_schema::Schema;

use crate::base::sql_value::SqlValue;
use crate::layout::links::Outgoing;
use crate::layout::side_table::Kind;
use crate::layout::table;
use crate::layout::table::Coll;
use crate::layout::table::FORMAT;
use crate::open::side_tables;
use crate::query::sql;

/// keel's metadata table: `key TEXT PRIMARY KEY, value` (`schema`, `fingerprint`, `format`).
pub const META_TABLE: &str = "keel_meta";
/// The index table: `name, collection, field, is_unique, state` (`ready`, `building`,
/// `failed: …`), `sig` (what the index column was computed with).
pub const INDEX_TABLE: &str = "keel_index";
/// The key-value dictionary's table (`key TEXT PRIMARY KEY, kind, type, value`).
pub const DICTIONARY_TABLE: &str = "keel_dict";
/// The column holding an object's FlatBuffers bytes in every collection table.
pub const BODY_COLUMN: &str = "body";

pub use crate::layout::body::BodyColumns;

/// The SQLite table of a collection, as a quoted SQL identifier (the table is named
/// after the collection's fully qualified name).
pub fn table_ident(collection: &str) -> String {
    sql::ident(collection)
}

/// The SQLite table name of a collection (unquoted, as stored in `sqlite_schema`).
pub fn table_name(collection: &str) -> &str {
    collection
}

/// The SQLite name of the secondary index on field `field_id` of a collection
/// (its state is in [`INDEX_TABLE`] under the same name).
pub fn index_name(collection: &str, field_id: u16) -> String {
    format!("{collection}#{field_id}")
}

/// The primary-key columns of a collection whose key has `parts` fields
/// (`k0, k1, …`; none for a collection keyed by rowid).
pub fn key_columns(parts: usize) -> Vec<String> {
    (0..parts).map(|i| format!("k{i}")).collect()
}

/// The schema text a [`Database`](crate::db::database::Database) recorded in the file at its last
/// open (`None` for a file keel's object store never opened).
pub fn stored_schema(conn: &rusqlite::Connection) -> rusqlite::Result<Option<String>> {
    let has_meta: i64 = conn.query_row(
        "SELECT count(*) FROM sqlite_schema WHERE type = 'table' AND name = ?1",
        [META_TABLE],
        |r| r.get(0),
    )?;
    if has_meta == 0 {
        return Ok(None);
    }
    match conn.query_row(
        &format!("SELECT value FROM {META_TABLE} WHERE key = 'schema'"),
        [],
        |r| r.get::<_, String>(0),
    ) {
        Ok(s) => Ok(Some(s)),
        Err(rusqlite::Error::QueryReturnedNoRows) => Ok(None),
        Err(e) => Err(e),
    }
}

/// The storage format this build writes (see [`storage_format`]); a file of a
/// higher format was written by a newer keel and is refused.
///
/// ```
/// assert!(keel_query::inspect::STORAGE_FORMAT >= 3);
/// ```
pub const STORAGE_FORMAT: i64 = FORMAT;

/// The storage format the file records (`format` in [`META_TABLE`]):
/// [`STORAGE_FORMAT`] (3) for files this build wrote, whose bodies may lack their
/// key string; 2 for the plain-column layout with whole bodies; 1 for files written
/// before it (expression indexes over `keel_field`). The next open by keel brings
/// an older file to [`STORAGE_FORMAT`] in place. `None` for a file keel's object
/// store never opened.
pub fn storage_format(conn: &rusqlite::Connection) -> rusqlite::Result<Option<i64>> {
    if stored_schema(conn)?.is_none() {
        return Ok(None);
    }
    match conn.query_row(
        &format!("SELECT value FROM {META_TABLE} WHERE key = 'format'"),
        [],
        |r| r.get::<_, i64>(0),
    ) {
        Ok(f) => Ok(Some(f)),
        Err(rusqlite::Error::QueryReturnedNoRows) => Ok(Some(1)),
        Err(e) => Err(e),
    }
}

/// Register keel's SQL functions (`keel_field`) on a connection, reading objects with
/// `schema`. Needed for anything that evaluates the expression indexes, such as
/// `PRAGMA integrity_check`.
pub fn register_functions(
    conn: &rusqlite::Connection,
    schema: Arc<Schema>,
) -> rusqlite::Result<()> {
    sql::register(conn, Arc::new(std::sync::RwLock::new(schema)))
}

/// The column holding the value of the index on `path_text` (`blog.Post/1` →
/// `f1`, `game.Monster/4:3.0` → `f4:3.0`), unquoted.
///
/// ```
/// assert_eq!(keel_query::inspect::index_column("blog.Post/1"), "f1");
/// ```
pub fn index_column(path_text: &str) -> String {
    let steps = path_text.rsplit_once('/').map_or(path_text, |(_, s)| s);
    format!("f{steps}")
}

/// One object whose key or index column disagrees with its bytes — what a write
/// by a tool other than keel (the `sqlite3` shell, DB Browser, Python's `sqlite3`)
/// can leave behind. Found by [`column_mismatches`], fixed by [`repair_columns`].
#[derive(Debug, Clone, PartialEq)]
pub struct ColumnMismatch {
    /// The collection.
    pub collection: String,
    /// The object's rowid.
    pub rowid: i64,
    /// The column (`k0`, `f1`, …).
    pub column: String,
    /// What the column holds.
    pub stored: rusqlite::types::Value,
    /// What keel derives from the object's bytes.
    pub expected: rusqlite::types::Value,
}

/// The key and index columns a collection's table has, and how keel derives each.
struct Derived {
    coll: Coll,
    /// `(column name, column ident, Ok(key part) or Err(index position))`.
    cols: Vec<(String, String, std::result::Result<usize, usize>)>,
}

fn derived(conn: &rusqlite::Connection, schema: &Arc<Schema>) -> rusqlite::Result<Vec<Derived>> {
    let mut out = Vec::new();
    for ci in 0..schema.collections.len() {
        let Ok(coll) = Coll::build(schema, ci, schema) else {
            continue;
        };
        let have = table::table_columns(conn, &coll.ident)?;
        if have.is_empty() {
            continue; // no table yet
        }
        let mut cols = Vec::new();
        for (i, k) in key_columns(coll.key.len()).into_iter().enumerate() {
            if have.contains(&k) {
                cols.push((k.clone(), k, Ok(i)));
            }
        }
        for (i, ix) in coll.indexes.iter().enumerate() {
            if have.contains(&ix.column) {
                cols.push((ix.column.clone(), ix.col_ident.clone(), Err(i)));
            }
        }
        out.push(Derived { coll, cols });
    }
    Ok(out)
}

impl Derived {
    fn values(&self, bytes: &[u8]) -> Vec<rusqlite::types::Value> {
        let idx = self.coll.column_values(bytes);
        let obj = self.coll.ext_reader().and_then(|r| r.open(bytes).ok());
        self.cols
            .iter()
            .map(|(_, _, which)| match which {
                Err(i) => idx[*i].clone(),
                Ok(k) => match &obj {
                    Some(o) => table::to_sql_owned(
                        o.get_ref(&self.coll.key[*k].path).map(SqlValue::from_ref),
                    ),
                    None => rusqlite::types::Value::Null,
                },
            })
            .collect()
    }

    fn for_each(
        &self,
        conn: &rusqlite::Connection,
        f: &mut dyn FnMut(
            i64,
            Vec<rusqlite::types::Value>,
            Vec<rusqlite::types::Value>,
        ) -> rusqlite::Result<()>,
    ) -> rusqlite::Result<()> {
        let list: Vec<&str> = self.cols.iter().map(|(_, id, _)| id.as_str()).collect();
        let sql = format!(
            "SELECT rowid, {}{}{} FROM {} ORDER BY rowid",
            self.coll.body.select(),
            if list.is_empty() { "" } else { ", " },
            list.join(", "),
            self.coll.ident
        );
        // The columns checked follow `rowid` and the body's (body, and the key
        // column a body without its key string is restored from).
        let first = 1 + self.coll.body.width();
        let mut st = conn.prepare(&sql)?;
        let mut rows = st.query([])?;
        let reader = self.coll.ext_reader();
        let mut scratch = Vec::new();
        while let Some(r) = rows.next()? {
            let rowid: i64 = r.get(0)?;
            // An object that does not verify has no trustworthy columns to derive:
            // it is reported as a damaged object (`keel check`), not here.
            let want = match (self.coll.body.read(r, 1, &mut scratch)?, reader) {
                (b, Some(t)) if !b.is_empty() && t.read(b).is_ok() => self.values(b),
                _ => continue,
            };
            let got = (0..self.cols.len())
                .map(|i| r.get::<_, rusqlite::types::Value>(i + first))
                .collect::<rusqlite::Result<Vec<_>>>()?;
            f(rowid, got, want)?;
        }
        Ok(())
    }
}

/// Every object whose key columns (`k0`, …) or index columns (`f1`, …) disagree
/// with the values keel derives from its bytes (objects whose bytes do not verify
/// are left to the object check) with `schema` — the schema stored
/// in the file ([`stored_schema`]). keel writes those columns from the bytes in
/// the same statement, so a mismatch means the row was changed by another tool;
/// queries through the index would then disagree with the objects.
/// [`repair_columns`] rewrites them. At most `limit` mismatches are returned.
///
/// ```
/// # use keel_query::{inspect, Database, StoreOptions};
/// # use keel_schema::Schema;
/// # let dir = tempfile::tempdir().unwrap();
/// # let path = dir.path().join("c.db");
/// let schema = Schema::parse("table T { id: int (primary); n: int (indexed); } root_type T;", "t.fbs")?;
/// let db = Database::open(&path, schema.clone(), StoreOptions::default())?;
/// let obj = schema.reader("T")?.encode_json(&serde_json::json!({"id": 1, "n": 5}))?;
/// db.write(move |t| t.insert_bytes("T", obj).map(|_| ())).wait()?;
/// db.close().wait()?;
/// let conn = rusqlite::Connection::open(&path)?;
/// conn.execute("UPDATE T SET f1 = 6", [])?; // what a stock tool might do
/// let schema = std::sync::Arc::new(schema);
/// let bad = inspect::column_mismatches(&conn, &schema, 10)?;
/// assert_eq!((bad.len(), bad[0].column.as_str()), (1, "f1"));
/// assert_eq!(inspect::repair_columns(&conn, &schema)?, 1);
/// assert!(inspect::column_mismatches(&conn, &schema, 10)?.is_empty());
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub fn column_mismatches(
    conn: &rusqlite::Connection,
    schema: &Arc<Schema>,
    limit: usize,
) -> rusqlite::Result<Vec<ColumnMismatch>> {
    let mut out = Vec::new();
    for d in derived(conn, schema)? {
        d.for_each(conn, &mut |rowid, got, want| {
            for (i, (g, w)) in got.into_iter().zip(want).enumerate() {
                if g != w && out.len() < limit {
                    out.push(ColumnMismatch {
                        collection: d.coll.name.clone(),
                        rowid,
                        column: d.cols[i].0.clone(),
                        stored: g,
                        expected: w,
                    });
                }
            }
            Ok(())
        })?;
    }
    Ok(out)
}

/// Rewrite every key and index column that disagrees with its object's bytes
/// (see [`column_mismatches`]), in the caller's transaction if it has one.
/// Returns how many objects were rewritten. A rewritten key or unique column that
/// collides with another object's fails with SQLite's constraint error.
pub fn repair_columns(conn: &rusqlite::Connection, schema: &Arc<Schema>) -> rusqlite::Result<u64> {
    let mut n = 0;
    for d in derived(conn, schema)? {
        if d.cols.is_empty() {
            continue;
        }
        let mut fixes: Vec<(i64, Vec<rusqlite::types::Value>)> = Vec::new();
        d.for_each(conn, &mut |rowid, got, want| {
            if got != want {
                fixes.push((rowid, want));
            }
            Ok(())
        })?;
        let sets: Vec<String> = d
            .cols
            .iter()
            .enumerate()
            .map(|(i, (_, id, _))| format!("{id} = ?{}", i + 2))
            .collect();
        let mut st = conn.prepare(&format!(
            "UPDATE {} SET {} WHERE rowid = ?1",
            d.coll.ident,
            sets.join(", ")
        ))?;
        for (rowid, vals) in &fixes {
            let mut ps: Vec<&dyn rusqlite::ToSql> = vec![rowid];
            ps.extend(vals.iter().map(|v| v as &dyn rusqlite::ToSql));
            st.execute(ps.as_slice())?;
            n += 1;
        }
    }
    Ok(n)
}

/// One disagreement between a collection's objects and its full-text index
/// (`(searchable)` fields): found by [`search_drift`], fixed by
/// [`rebuild_search`]. keel writes the index with the row, so drift means a
/// tool other than keel (or a keel build without full-text search) changed rows.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SearchDrift {
    /// The collection.
    pub collection: String,
    /// The object's rowid (0 for a problem of the whole index).
    pub rowid: i64,
    /// `missing` (the index lacks the object), `extra` (an entry without an
    /// object), `stale` (the entry holds other text than the object), or what
    /// is wrong with the whole index.
    pub problem: String,
}

/// Every disagreement (at most `limit`) between the collections of `schema`
/// (the schema stored in the file) and their full-text indexes: each object's
/// tokens against its index entry, and FTS5's own integrity check of the index.
///
/// ```
/// # use keel_query::{inspect, Database, StoreOptions};
/// # use keel_schema::Schema;
/// # let dir = tempfile::tempdir().unwrap();
/// # let path = dir.path().join("s.db");
/// let schema = Schema::parse("table T { id: int (primary); text: string (searchable); } root_type T;", "t.fbs")?;
/// let db = Database::open(&path, schema.clone(), StoreOptions::default())?;
/// let obj = schema.reader("T")?.encode_json(&serde_json::json!({"id": 1, "text": "hello"}))?;
/// db.write(move |t| t.insert_bytes("T", obj).map(|_| ())).wait()?;
/// db.close().wait()?;
/// let conn = rusqlite::Connection::open(&path)?;
/// conn.execute("DELETE FROM \"T$fts\"", [])?; // what a stock tool might do
/// let schema = std::sync::Arc::new(schema);
/// let drift = inspect::search_drift(&conn, &schema, 10)?;
/// assert_eq!((drift.len(), drift[0].problem.as_str()), (1, "missing"));
/// assert_eq!(inspect::rebuild_search(&conn, &schema)?, 1);
/// assert!(inspect::search_drift(&conn, &schema, 10)?.is_empty());
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub fn search_drift(
    conn: &rusqlite::Connection,
    schema: &Arc<Schema>,
    limit: usize,
) -> rusqlite::Result<Vec<SearchDrift>> {
    let mut out = Vec::new();
    for ci in 0..schema.collections.len() {
        let Ok(coll) = Coll::build(schema, ci, schema) else {
            continue;
        };
        if coll.search.is_none() || table::table_columns(conn, &coll.ident)?.is_empty() {
            continue;
        }
        let Some(index) = coll.side_table(Kind::Search) else {
            continue;
        };
        for d in index.compare(conn, coll.owner(), limit.saturating_sub(out.len()))? {
            out.push(SearchDrift {
                collection: d.collection,
                rowid: d.rowid,
                problem: d.problem,
            });
        }
    }
    Ok(out)
}

/// Rebuild the full-text index of every collection of `schema` that has
/// `(searchable)` fields from its objects, in the caller's transaction if it has
/// one. Returns how many objects were indexed.
pub fn rebuild_search(conn: &rusqlite::Connection, schema: &Arc<Schema>) -> rusqlite::Result<u64> {
    let mut n = 0;
    for ci in 0..schema.collections.len() {
        let Ok(coll) = Coll::build(schema, ci, schema) else {
            continue;
        };
        if coll.search.is_none() || table::table_columns(conn, &coll.ident)?.is_empty() {
            continue;
        }
        n += side_tables::rebuild(conn, &coll, Kind::Search)?;
    }
    Ok(n)
}

/// A reference (`(references: …)` field) naming an object that does not exist:
/// found by [`dangling_references`].
#[derive(Debug, Clone, PartialEq)]
pub struct DanglingRef {
    /// The referring collection.
    pub collection: String,
    /// The referring object's rowid.
    pub rowid: i64,
    /// The reference field.
    pub field: String,
    /// The referenced collection.
    pub target: String,
    /// The key that names no object.
    pub key: keel_schema::Value,
    /// The field is declared `dangling: true` (the default), so keel accepted
    /// the key and this is information; `false` means keel would have refused
    /// it (another tool wrote it, or the target was removed outside keel).
    pub allowed: bool,
}

/// Every reference (at most `limit`) in the collections of `schema` (the schema
/// stored in the file) whose key names no object of the referenced collection.
///
/// ```
/// # use keel_query::{inspect, Database, StoreOptions};
/// # use keel_schema::Schema;
/// # let dir = tempfile::tempdir().unwrap();
/// # let path = dir.path().join("r.db");
/// let schema = Schema::parse(
///     r#"table A (entity) { id: string (primary); }
///        table P { id: string (primary); a: string (references: "A"); } root_type P;"#,
///     "r.fbs",
/// )?;
/// let db = Database::open(&path, schema.clone(), StoreOptions::default())?;
/// let p = schema.reader("P")?.encode_json(&serde_json::json!({"id": "p1", "a": "gone"}))?;
/// db.write(move |t| t.insert_bytes("P", p).map(|_| ())).wait()?;
/// db.close().wait()?;
/// let conn = rusqlite::Connection::open(&path)?;
/// let found = inspect::dangling_references(&conn, &std::sync::Arc::new(schema), 10)?;
/// assert_eq!((found.len(), found[0].field.as_str(), found[0].allowed), (1, "a", true));
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub fn dangling_references(
    conn: &rusqlite::Connection,
    schema: &Arc<Schema>,
    limit: usize,
) -> rusqlite::Result<Vec<DanglingRef>> {
    dangling(conn, schema, limit, false)
}

/// [`dangling_references`] in fields declared `dangling: false` only (what a
/// schema change that declares them must find none of).
pub(crate) fn refused_dangling(
    conn: &rusqlite::Connection,
    schema: &Arc<Schema>,
    limit: usize,
) -> rusqlite::Result<Vec<DanglingRef>> {
    dangling(conn, schema, limit, true)
}

fn dangling(
    conn: &rusqlite::Connection,
    schema: &Arc<Schema>,
    limit: usize,
    refused_only: bool,
) -> rusqlite::Result<Vec<DanglingRef>> {
    let mut out = Vec::new();
    for ci in 0..schema.collections.len() {
        let Ok(coll) = Coll::build(schema, ci, schema) else {
            continue;
        };
        let checked = |o: &&Outgoing| !refused_only || !o.dangling;
        if !coll.links.outgoing.iter().any(|o| checked(&o))
            || table::table_columns(conn, &coll.ident)?.is_empty()
        {
            continue;
        }
        let Some(reader) = schema.table_reader(coll.table) else {
            continue;
        };
        // One existence probe per reference field, on the target's key column.
        let mut probes = Vec::new();
        for o in coll.links.outgoing.iter().filter(checked) {
            let target = table_ident(&o.target);
            let sql = if table::table_columns(conn, &target)?.is_empty() {
                // No table: nothing exists.
                "SELECT 1 WHERE 0 AND ?1".to_string()
            } else {
                format!("SELECT 1 FROM {target} WHERE k0 = ?1")
            };
            probes.push((o, conn.prepare(&sql)?));
        }
        let mut st = conn.prepare(&format!(
            "SELECT rowid, {} FROM {} ORDER BY rowid",
            coll.body.select(),
            coll.ident
        ))?;
        let mut rows = st.query([])?;
        let mut scratch = Vec::new();
        while let Some(r) = rows.next()? {
            let rowid: i64 = r.get(0)?;
            let Ok(obj) = reader.open(coll.body.read(r, 1, &mut scratch)?) else {
                continue; // a damaged object is reported by the object check
            };
            for (o, probe) in &mut probes {
                let keys = if o.to_many {
                    let id = o.path.steps().first().map_or(0, |s| s.id());
                    obj.elements(id).unwrap_or_default()
                } else {
                    vec![obj.get(&o.path)]
                };
                for k in keys {
                    let found = match &k {
                        keel_schema::Value::Text(t) => probe.exists([t])?,
                        keel_schema::Value::Int(i) => probe.exists([i])?,
                        _ => true,
                    };
                    if !found && out.len() < limit {
                        out.push(DanglingRef {
                            collection: coll.name.clone(),
                            rowid,
                            field: o.field.clone(),
                            target: o.target.clone(),
                            key: k,
                            allowed: o.dangling,
                        });
                    }
                }
            }
        }
    }
    Ok(out)
}

/// One disagreement between a collection's objects and its packed vector table
/// (`(vector: N)` fields): found by [`vector_drift`], fixed by
/// [`rebuild_vectors`]. keel writes the table with the row, so drift means a
/// tool other than keel changed rows.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VectorDrift {
    /// The collection.
    pub collection: String,
    /// The object's rowid.
    pub rowid: i64,
    /// `missing` (no packed row for the object), `extra` (a packed row without
    /// an object) or `stale <field>` (the packed bytes differ from the object's
    /// vector).
    pub problem: String,
}

/// Every disagreement (at most `limit`) between the collections of `schema`
/// (the schema stored in the file) and their packed vector tables.
///
/// ```
/// # use keel_query::{inspect, Database, StoreOptions};
/// # use keel_schema::Schema;
/// # let dir = tempfile::tempdir().unwrap();
/// # let path = dir.path().join("v.db");
/// let schema = Schema::parse("table T { id: int (primary); e: [float] (vector: 2); } root_type T;", "t.fbs")?;
/// let db = Database::open(&path, schema.clone(), StoreOptions::default())?;
/// let obj = schema.reader("T")?.encode_json(&serde_json::json!({"id": 1, "e": [1.0, 2.0]}))?;
/// db.write(move |t| t.insert_bytes("T", obj).map(|_| ())).wait()?;
/// db.close().wait()?;
/// let conn = rusqlite::Connection::open(&path)?;
/// conn.execute("UPDATE \"T$vec\" SET v1 = x'00000000'", [])?; // what a stock tool might do
/// let schema = std::sync::Arc::new(schema);
/// let drift = inspect::vector_drift(&conn, &schema, 10)?;
/// assert_eq!((drift.len(), drift[0].problem.as_str()), (1, "stale e"));
/// assert_eq!(inspect::rebuild_vectors(&conn, &schema)?, 1);
/// assert!(inspect::vector_drift(&conn, &schema, 10)?.is_empty());
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub fn vector_drift(
    conn: &rusqlite::Connection,
    schema: &Arc<Schema>,
    limit: usize,
) -> rusqlite::Result<Vec<VectorDrift>> {
    let mut out = Vec::new();
    for ci in 0..schema.collections.len() {
        let Ok(coll) = Coll::build(schema, ci, schema) else {
            continue;
        };
        if coll.vectors.is_none() || table::table_columns(conn, &coll.ident)?.is_empty() {
            continue;
        }
        let Some(table) = coll.side_table(Kind::Vector) else {
            continue;
        };
        for d in table.compare(conn, coll.owner(), limit.saturating_sub(out.len()))? {
            out.push(VectorDrift {
                collection: d.collection,
                rowid: d.rowid,
                problem: d.problem,
            });
        }
    }
    Ok(out)
}

/// Rebuild the packed vector table of every collection of `schema` that has
/// `(vector: N)` fields from its objects, in the caller's transaction if it has
/// one. Returns how many objects were written.
pub fn rebuild_vectors(conn: &rusqlite::Connection, schema: &Arc<Schema>) -> rusqlite::Result<u64> {
    let mut n = 0;
    for ci in 0..schema.collections.len() {
        let Ok(coll) = Coll::build(schema, ci, schema) else {
            continue;
        };
        if coll.vectors.is_none() || table::table_columns(conn, &coll.ident)?.is_empty() {
            continue;
        }
        n += side_tables::rebuild(conn, &coll, Kind::Vector)?;
    }
    Ok(n)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::layout::table::{Coll, DICT_TABLE_SQL};

    fn ddl_has(ddl: &str, col: &str) -> bool {
        ddl.contains(col)
    }

    /// The facts above must match what the engine really creates.
    #[test]
    fn facts_match_the_layout() {
        let schema = Schema::parse(
            "namespace t; table A { k: string (primary); j: int (primary); n: int (indexed); } root_type A;",
            "t.fbs",
        )
        .unwrap();
        let c = Coll::new(&schema, 0).unwrap();
        assert_eq!(c.ident, table_ident("t.A"));
        assert_eq!(c.indexes[0].name, index_name("t.A", 2));
        assert_eq!(c.indexes[0].column, index_column(&c.indexes[0].path_text));
        assert!(ddl_has(&c.create_table_sql(), &c.indexes[0].col_ident));
        let ddl = c.create_table_sql();
        for k in key_columns(2) {
            assert!(ddl.contains(&format!("{k} NOT NULL")), "{ddl}");
        }
        assert!(ddl.contains(&format!("{BODY_COLUMN} BLOB")), "{ddl}");
        assert!(ddl.contains(&format!("TABLE IF NOT EXISTS \"{}\"", table_name("t.A"))));
        assert!(DICT_TABLE_SQL.contains(&format!("CREATE TABLE IF NOT EXISTS {DICTIONARY_TABLE}(")));
    }
}
