//! Migrations: move the data when a schema change is not a compatible evolution.
//!
//! FlatBuffers evolution (appending fields, deprecating, adding indexes) needs no
//! migration: keel opens the new schema over the old objects. A change that breaks it
//! — a new primary key, a field whose type changes, a collection split in two — is
//! refused at open, unless a [`Migrator`] moves the data. In the spirit of GRDB's
//! `DatabaseMigrator` and Room's `Migration`:
//!
//! * migrations are **named** and run **in registration order**, each **once**: the
//!   names that ran are recorded in the file (`keel_migrations`) and skipped after;
//! * they run **at open, before the database is handed over**, in the schema phase,
//!   **in one transaction** with it: all of them commit with the new schema, or —
//!   on an error, a panic or a crash at any point — none does and the file keeps its
//!   old state (shown by the crash campaign in `tests/migration_crash.rs`);
//! * a migration **reads old objects through the old schema** (the one stored in the
//!   file, with the dynamic reader: [`Object`], its JSON) and **writes new ones**
//!   laid out for the new schema;
//! * **progress** is reported through [`Migrator::on_progress`];
//! * on a **new database** there is nothing to move: every registered migration is
//!   recorded as done without running.
//!
//! ```
//! use keel_query::{Database, Error, Migrator, StoreOptions};
//! use keel_schema::Schema;
//! # let dir = tempfile::tempdir().unwrap();
//! # let path = dir.path().join("m.db");
//! let v1 = Schema::parse("namespace m; table N { id: int (primary); text: string; } root_type N;", "v1.fbs")?;
//! let db = Database::open(&path, v1.clone(), StoreOptions::default())?;
//! let note = v1.reader("m.N")?.encode_json(&serde_json::json!({"id": 1, "text": "hi"}))?;
//! db.write(move |txn| txn.insert_bytes("m.N", note).map(|_| ())).wait()?;
//! db.close().wait()?;
//!
//! // v2 keys notes by their text: a new primary key, not a compatible change.
//! let v2 = Schema::parse("namespace m; table N { id: int; text: string (primary); } root_type N;", "v2.fbs")?;
//! let migrator = Migrator::new().register("key notes by text", |m| {
//!     m.rewrite_collection("m.N", |old, new| {
//!         let fail = |e: &dyn std::fmt::Display| Error::Migration { message: e.to_string() };
//!         let json = old.to_json().map_err(|e| fail(&e))?;
//!         Ok(Some(new.encode_json(&json).map_err(|e| fail(&e))?))
//!     })?;
//!     Ok(())
//! });
//! let db = Database::open_migrating(&path, v2, migrator, StoreOptions::default())?;
//! assert!(db.get_bytes("m.N", &["hi".into()])?.is_some());
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

use std::path::Path;
use std::sync::Arc;

use keel_schema::{DynamicTable, Object, Schema, Value};

use crate::base::error::{Error, Result};
use crate::base::ref_keys::{column_key, K};
use crate::base::sql_value::Param;
use crate::layout::body::Origin;
use crate::layout::stored;
use crate::layout::table;
use crate::layout::table::Coll;
use crate::query::sql::ident;

/// Where a migration run is; given to [`Migrator::on_progress`] on the open thread.
#[derive(Debug, Clone, PartialEq)]
pub struct MigrationProgress {
    /// The migration running (or finished).
    pub migration: String,
    /// Its position among the migrations this open runs (0-based).
    pub index: usize,
    /// How many migrations this open runs.
    pub total: usize,
    /// Objects it has moved so far.
    pub objects: u64,
    /// `true` on the last event of this migration.
    pub done: bool,
}

type Step = Box<dyn FnMut(&mut Migration<'_>) -> Result<()> + Send>;
type ProgressCb = Arc<dyn Fn(MigrationProgress) + Send + Sync>;

/// Ordered, named migrations, run once each at open (see the [module docs](self)).
/// Give it to [`Database::open_migrating`](crate::db::database::Database::open_migrating).
#[derive(Default)]
pub struct Migrator {
    steps: Vec<(String, Step)>,
    progress: Option<ProgressCb>,
}

impl std::fmt::Debug for Migrator {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Migrator")
            .field(
                "migrations",
                &self.steps.iter().map(|(n, _)| n).collect::<Vec<_>>(),
            )
            .finish()
    }
}

/// How often (in objects) a running migration reports progress.
const PROGRESS_EVERY: u64 = 256;

impl Migrator {
    /// No migrations.
    pub fn new() -> Migrator {
        Migrator::default()
    }

    /// Append a migration. Names must be unique and must never change once shipped:
    /// the name is what the file records as done.
    ///
    /// ```
    /// use keel_query::Migrator;
    /// let m = Migrator::new()
    ///     .register("v2: split names", |_m| Ok(()))
    ///     .register("v3: key by email", |_m| Ok(()));
    /// assert_eq!(m.names(), vec!["v2: split names", "v3: key by email"]);
    /// ```
    pub fn register(
        mut self,
        name: impl Into<String>,
        f: impl FnMut(&mut Migration<'_>) -> Result<()> + Send + 'static,
    ) -> Migrator {
        self.steps.push((name.into(), Box::new(f)));
        self
    }

    /// Called on the open thread as migrations start, move objects and finish.
    pub fn on_progress(mut self, f: impl Fn(MigrationProgress) + Send + Sync + 'static) -> Self {
        self.progress = Some(Arc::new(f));
        self
    }

    /// The registered names, in order.
    pub fn names(&self) -> Vec<&str> {
        self.steps.iter().map(|(n, _)| n.as_str()).collect()
    }

    fn emit(&self, p: MigrationProgress) {
        if let Some(cb) = &self.progress {
            if std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| cb(p))).is_err() {
                tracing::error!("migration progress callback panicked");
            }
        }
    }

    /// Run the migrations not recorded yet, inside the schema phase's transaction.
    /// Returns the schema to check the opening one against: the stored one if
    /// nothing ran, `None` (nothing left to compare with) if something did.
    pub(crate) fn run(
        &mut self,
        conn: &rusqlite::Connection,
        path: &Path,
        stored: Option<Schema>,
        new: &Schema,
    ) -> Result<Option<Schema>> {
        let sq = |op: &'static str| {
            let p = path.to_path_buf();
            move |e| Error::Storage(stored::classify(op, &p, e))
        };
        conn.execute_batch(
            "CREATE TABLE IF NOT EXISTS keel_migrations(name TEXT PRIMARY KEY, seq INTEGER NOT NULL, applied_at INTEGER NOT NULL) WITHOUT ROWID",
        )
        .map_err(sq("create keel_migrations"))?;
        let done: Vec<String> = {
            let mut st = conn
                .prepare("SELECT name FROM keel_migrations")
                .map_err(sq("read keel_migrations"))?;
            let rows = st
                .query_map([], |r| r.get::<_, String>(0))
                .map_err(sq("read keel_migrations"))?
                .collect::<rusqlite::Result<Vec<_>>>()
                .map_err(sq("read keel_migrations"))?;
            rows
        };
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_secs() as i64)
            .unwrap_or(0);
        let record = |name: &str, seq: usize| {
            conn.execute(
                "INSERT INTO keel_migrations(name, seq, applied_at) VALUES (?1, ?2, ?3)",
                rusqlite::params![name, seq as i64, now],
            )
            .map(|_| ())
            .map_err(sq("record a migration"))
        };
        let todo: Vec<usize> = (0..self.steps.len())
            .filter(|i| !done.contains(&self.steps[*i].0))
            .collect();
        if todo.is_empty() {
            return Ok(stored);
        }
        let Some(old) = stored else {
            // A new database starts at the newest schema: nothing to move.
            for i in todo {
                record(&self.steps[i].0, i)?;
            }
            return Ok(None);
        };
        let total = todo.len();
        for (k, i) in todo.into_iter().enumerate() {
            let name = self.steps[i].0.clone();
            tracing::info!(migration = %name, "running migration");
            self.emit(MigrationProgress {
                migration: name.clone(),
                index: k,
                total,
                objects: 0,
                done: false,
            });
            let mut m = Migration {
                conn,
                path,
                old: &old,
                new,
                ticker: Ticker {
                    name: name.clone(),
                    index: k,
                    total,
                    objects: 0,
                    progress: self.progress.clone(),
                },
            };
            let step = &mut self.steps[i].1;
            let r = match std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| step(&mut m))) {
                Ok(r) => r,
                Err(p) => Err(Error::Storage(keel_storage::Error::Panicked {
                    op: "migration",
                    path: path.to_path_buf(),
                    message: p
                        .downcast_ref::<&str>()
                        .map(|s| (*s).to_string())
                        .or_else(|| p.downcast_ref::<String>().cloned())
                        .unwrap_or_else(|| "non-string panic payload".into()),
                })),
            };
            let objects = m.ticker.objects;
            r.map_err(|e| Error::MigrationFailed {
                path: path.to_path_buf(),
                migration: name.clone(),
                source: Box::new(e),
            })?;
            record(&name, i)?;
            self.emit(MigrationProgress {
                migration: name,
                index: k,
                total,
                objects,
                done: true,
            });
        }
        Ok(None)
    }
}

/// What [`Migration::backfill_references`] does with an object whose reference
/// names a missing object.
#[derive(Debug, Clone, PartialEq)]
pub enum Backfill {
    /// Clear the missing keys: a to-one field becomes absent, a to-many vector
    /// loses them (its other keys stay, in order).
    Nullify,
    /// Drop the object.
    Delete,
    /// Name this key (text or integer) instead of each missing one. If it names
    /// no object either, the open's `dangling: false` check refuses the schema.
    Key(Value),
}

/// The keys of collection `target` (of `schema`) in the file;
/// none when it has no table yet.
fn target_keys(
    conn: &rusqlite::Connection,
    path: &Path,
    schema: &Schema,
    target: &str,
) -> Result<std::collections::HashSet<K>> {
    let op = "migration: backfill references";
    let c = coll_of(schema, target).ok_or_else(|| unknown(op, target))??;
    let mut out = std::collections::HashSet::new();
    if table::table_columns(conn, &c.ident)
        .map_err(sql_err(path, op))?
        .is_empty()
    {
        return Ok(out);
    }
    let mut st = conn
        .prepare(&format!("SELECT k0 FROM {}", c.ident))
        .map_err(sql_err(path, op))?;
    let mut rows = st.query([]).map_err(sql_err(path, op))?;
    while let Some(r) = rows.next().map_err(sql_err(path, op))? {
        if let Some(k) = column_key(r.get_ref(0).map_err(sql_err(path, op))?) {
            out.insert(K::of(&k));
        }
    }
    Ok(out)
}

/// A key as JSON (reference keys are text or integers). Generic over the JSON
/// type `Object::to_json` returns: keel-query names no JSON crate (its JSON
/// support is the optional `serde` feature).
fn key_json<J: From<String> + From<i64>>(v: &Value) -> Option<J> {
    match v {
        Value::Text(s) => Some(J::from(s.clone())),
        Value::Int(i) => Some(J::from(*i)),
        _ => None,
    }
}

/// Keys (of one type: one field's) as a JSON array, as [`key_json`].
fn keys_json<J: From<Vec<String>> + From<Vec<i64>>>(keys: &[Value]) -> Option<J> {
    if keys.iter().all(|k| matches!(k, Value::Int(_))) && !keys.is_empty() {
        let ints = keys
            .iter()
            .map(|k| k.as_i64().unwrap_or_default())
            .collect::<Vec<i64>>();
        return Some(J::from(ints));
    }
    keys.iter()
        .map(|k| match k {
            Value::Text(s) => Some(s.clone()),
            _ => None,
        })
        .collect::<Option<Vec<String>>>()
        .map(J::from)
}

/// What a running migration works with: the file under the old schema (stored in
/// it) and the new one (being opened), on the open's transaction.
pub struct Migration<'a> {
    conn: &'a rusqlite::Connection,
    path: &'a Path,
    old: &'a Schema,
    new: &'a Schema,
    ticker: Ticker,
}

struct Ticker {
    name: String,
    index: usize,
    total: usize,
    objects: u64,
    progress: Option<ProgressCb>,
}

impl Ticker {
    fn tick(&mut self) {
        self.objects += 1;
        if self.objects.is_multiple_of(PROGRESS_EVERY) {
            if let Some(cb) = &self.progress {
                let p = MigrationProgress {
                    migration: self.name.clone(),
                    index: self.index,
                    total: self.total,
                    objects: self.objects,
                    done: false,
                };
                let _ = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| cb(p)));
            }
        }
    }
}

impl std::fmt::Debug for Migration<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Migration")
            .field("name", &self.ticker.name)
            .field("objects", &self.ticker.objects)
            .finish()
    }
}

fn coll_of(schema: &Schema, name: &str) -> Option<Result<Coll>> {
    let ci = schema
        .collections
        .iter()
        .position(|c| c.name == name || schema.table(c.table).name == name)?;
    Some(Coll::new(schema, ci))
}

fn sql_err<'p>(path: &'p Path, op: &'static str) -> impl Fn(rusqlite::Error) -> Error + 'p {
    move |e| Error::Storage(stored::classify(op, path, e))
}

fn unknown(op: &'static str, collection: &str) -> Error {
    Error::UnknownCollection {
        op,
        collection: collection.to_owned(),
    }
}

/// Every row of `table_ident` (a table of collection `c`), decoded with `reader`,
/// in rowid order.
fn scan_rows(
    conn: &rusqlite::Connection,
    path: &Path,
    table_ident: &str,
    c: &Coll,
    reader: DynamicTable<'_>,
    f: &mut dyn FnMut(Object<'_, '_>) -> Result<()>,
) -> Result<u64> {
    let op = "migration: read old objects";
    let mut st = conn
        .prepare(&format!(
            "SELECT rowid, {} FROM {table_ident} ORDER BY rowid",
            c.body.select()
        ))
        .map_err(sql_err(path, op))?;
    let mut rows = st.query([]).map_err(sql_err(path, op))?;
    let mut n = 0;
    let mut scratch = Vec::new();
    while let Some(r) = rows.next().map_err(sql_err(path, op))? {
        let rowid: i64 = r.get(0).map_err(sql_err(path, op))?;
        let bytes = c.body.read(r, 1, &mut scratch).map_err(sql_err(path, op))?;
        let obj = reader.read(bytes).map_err(|source| Error::Decode {
            op,
            collection: c.name.clone(),
            rowid,
            source,
        })?;
        f(obj)?;
        n += 1;
    }
    Ok(n)
}

/// Insert an object of the new schema into collection `c` (its table exists).
fn insert_row(
    conn: &rusqlite::Connection,
    c: &Coll,
    reader: DynamicTable<'_>,
    bytes: &[u8],
) -> Result<i64> {
    let op = "migration: insert";
    let obj = reader.read(bytes).map_err(|source| Error::InvalidObject {
        op,
        collection: c.name.clone(),
        source,
    })?;
    let mut key: Vec<Value> = Vec::with_capacity(c.key.len() + 1);
    for k in &c.key {
        key.push(match obj.get_resolved(&k.path) {
            Value::Null => {
                return Err(Error::TypeMismatch {
                    op,
                    collection: c.name.clone(),
                    message: format!("the object has no value for primary-key field {:?}", k.name),
                })
            }
            Value::Bool(b) => Value::Int(b as i64),
            v => v,
        });
    }
    key.push(Value::Blob(
        c.body
            .strip(bytes, &key, c.ext_reader(), Origin::Foreign)
            .to_vec(),
    ));
    let cols = c.column_values(bytes);
    let mut params: Vec<&dyn rusqlite::ToSql> = Vec::with_capacity(key.len() + cols.len());
    let head: Vec<Param<'_>> = key.iter().map(Param).collect();
    params.extend(head.iter().map(|p| p as &dyn rusqlite::ToSql));
    params.extend(cols.iter().map(|v| v as &dyn rusqlite::ToSql));
    conn.prepare_cached(&c.sql_insert)
        .and_then(|mut st| st.execute(params.as_slice()))
        .map_err(|e| Error::sqlite(op, &c.name, e))?;
    Ok(conn.last_insert_rowid())
}

impl<'a> Migration<'a> {
    /// The schema stored in the file: how the objects being migrated were written.
    pub fn old_schema(&self) -> &Schema {
        self.old
    }

    /// The schema being opened: how the objects must be written.
    pub fn new_schema(&self) -> &Schema {
        self.new
    }

    /// This migration's name.
    pub fn name(&self) -> &str {
        &self.ticker.name
    }

    /// Objects this migration has written so far.
    pub fn objects_written(&self) -> u64 {
        self.ticker.objects
    }

    /// The open's SQLite connection, inside its transaction (for what the object
    /// helpers do not cover; keel's own tables are keel's).
    pub fn connection(&self) -> &rusqlite::Connection {
        self.conn
    }

    /// Call `f` with every object of `collection` (a collection of the old schema),
    /// read through the old schema, in rowid order. Returns how many there were.
    pub fn for_each_old(
        &mut self,
        collection: &str,
        mut f: impl FnMut(Object<'_, '_>) -> Result<()>,
    ) -> Result<u64> {
        let op = "migration: read old objects";
        let c = coll_of(self.old, collection).ok_or_else(|| unknown(op, collection))??;
        let reader = self
            .old
            .table_reader(c.table)
            .ok_or_else(|| unknown(op, collection))?;
        scan_rows(self.conn, self.path, &c.ident, &c, reader, &mut f)
    }

    /// Replace collection `collection` (its name in both schemas) with objects laid
    /// out for the new schema: each old object is read through the old schema and
    /// given to `f` with the new schema's table reader; `f` returns the new object's
    /// bytes (`None` drops it). The old table and its indexes are dropped; the new
    /// table is created with the new primary key, and its indexes are built by the
    /// schema phase right after. Returns the number of objects written.
    ///
    /// Objects stream from the old table to the new one, one at a time: memory does
    /// not grow with the collection.
    pub fn rewrite_collection(
        &mut self,
        collection: &str,
        mut f: impl FnMut(Object<'_, '_>, DynamicTable<'_>) -> Result<Option<Vec<u8>>>,
    ) -> Result<u64> {
        let op = "migration: rewrite collection";
        let (old, new, conn, path) = (self.old, self.new, self.conn, self.path);
        let oc = coll_of(old, collection).ok_or_else(|| unknown(op, collection))??;
        let nc = coll_of(new, collection).ok_or_else(|| unknown(op, collection))??;
        let reader = old
            .table_reader(oc.table)
            .ok_or_else(|| unknown(op, collection))?;
        let new_reader = new
            .table_reader(nc.table)
            .ok_or_else(|| unknown(op, collection))?;
        let moving = ident(&format!("{}#migrating", oc.name));
        drop_indexes_of(conn, path, &oc.name)?;
        conn.execute_batch(&format!(
            "ALTER TABLE {} RENAME TO {moving}; {}",
            oc.ident,
            nc.create_table_sql()
        ))
        .map_err(sql_err(path, "migration: move the old table aside"))?;
        let ticker = &mut self.ticker;
        let mut written = 0u64;
        scan_rows(conn, path, &moving, &oc, reader, &mut |obj| {
            if let Some(b) = f(obj, new_reader)? {
                insert_row(conn, &nc, new_reader, &b)?;
                ticker.tick();
                written += 1;
            }
            Ok(())
        })?;
        conn.execute_batch(&format!("DROP TABLE {moving}"))
            .map_err(sql_err(path, "migration: drop the old table"))?;
        Ok(written)
    }

    /// Backfill the reference field `field` of `collection` by `rule`: every
    /// object whose key (to-one) or one of whose keys (to-many) names no object
    /// of the referenced collection is rewritten (`Nullify`, `Key`) or dropped
    /// (`Delete`); the others are kept byte for byte. What a schema change that
    /// declares a reference `dangling: false` over existing data registers, so
    /// the open's check finds nothing dangling instead of refusing the new
    /// schema — in the same transaction, so a failure or crash leaves the old
    /// schema and every object. The field is a reference in the new schema;
    /// the referenced collection is read as the file holds it when this runs.
    /// Rewritten objects are re-encoded through the new schema's JSON codec
    /// (deprecated fields are not carried). Returns how many objects were
    /// rewritten or dropped.
    ///
    /// ```
    /// use keel_query::{Backfill, Database, Migrator, StoreOptions};
    /// use keel_schema::Schema;
    /// # let dir = tempfile::tempdir().unwrap();
    /// # let path = dir.path().join("b.db");
    /// let schema = |attrs: &str| Schema::parse(&format!("namespace b;
    ///     table A (entity) {{ id: string (primary); }}
    ///     table P {{ id: string (primary); a: string {attrs}; }} root_type P;"), "b.fbs");
    /// let v1 = schema("")?;
    /// let db = Database::open(&path, v1.clone(), StoreOptions::default())?;
    /// let p = v1.reader("b.P")?.encode_json(&serde_json::json!({"id": "p1", "a": "gone"}))?;
    /// db.write(move |t| t.insert_bytes("b.P", p).map(|_| ())).wait()?;
    /// db.close().wait()?;
    ///
    /// let v2 = schema(r#"(references: "A", dangling: false)"#)?;
    /// let m = Migrator::new().register("v2: clear authors that are gone", |m| {
    ///     m.backfill_references("b.P", "a", Backfill::Nullify).map(|_| ())
    /// });
    /// let db = Database::open_migrating(&path, v2, m, StoreOptions::default())?;
    /// assert_eq!(db.query("b.P").count()?, 1);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn backfill_references(
        &mut self,
        collection: &str,
        field: &str,
        rule: Backfill,
    ) -> Result<u64> {
        let op = "migration: backfill references";
        let nc = coll_of(self.new, collection).ok_or_else(|| unknown(op, collection))??;
        let f = self
            .new
            .table(nc.table)
            .fields
            .iter()
            .find(|f| f.name == field)
            .ok_or_else(|| Error::UnknownField {
                op,
                collection: nc.name.clone(),
                message: format!("no field {field:?}"),
            })?;
        let reference = f.references.clone().ok_or_else(|| Error::TypeMismatch {
            op,
            collection: nc.name.clone(),
            message: format!("{field} is not a reference (no `references:`) in the new schema"),
        })?;
        // Every key the referenced collection holds, read once: a collection
        // referring to itself is rewritten while it is probed.
        let existing = target_keys(self.conn, self.path, self.new, &reference.target)?;
        let missing = |v: &Value| !existing.contains(&K::of(v));
        if let Backfill::Key(k) = &rule {
            if !matches!(k, Value::Text(_) | Value::Int(_)) {
                return Err(Error::TypeMismatch {
                    op,
                    collection: nc.name.clone(),
                    message: format!("a backfill key must be text or an integer, not {k:?}"),
                });
            }
        }
        let id = f.id;
        let path = keel_schema::FieldPath::field(id, field.to_owned());
        let name = field.to_owned();
        let mut changed = 0u64;
        self.rewrite_collection(collection, |obj, new| {
            let keys = if reference.to_many {
                obj.elements(id).unwrap_or_default()
            } else {
                let v = obj.get(&path);
                if v.is_null() {
                    Vec::new()
                } else {
                    vec![v]
                }
            };
            if !keys.iter().any(&missing) {
                return Ok(Some(obj.bytes().to_vec()));
            }
            changed += 1;
            let fail = |e: &dyn std::fmt::Display| Error::Migration {
                message: format!("backfill {collection}.{name}: {e}"),
            };
            let mut json = obj.to_json().map_err(|e| fail(&e))?;
            let Some(fields) = json.as_object_mut() else {
                return Err(fail(&"the object is not a JSON object"));
            };
            let keys: Vec<Value> = match &rule {
                Backfill::Delete => return Ok(None),
                Backfill::Nullify => keys.into_iter().filter(|k| !missing(k)).collect(),
                Backfill::Key(r) => keys
                    .into_iter()
                    .map(|k| if missing(&k) { r.clone() } else { k })
                    .collect(),
            };
            let value = if reference.to_many {
                keys_json(&keys)
            } else {
                keys.first().and_then(key_json)
            };
            match value {
                Some(v) => {
                    fields.insert(name.clone(), v);
                }
                None => {
                    fields.remove(&name);
                }
            }
            new.encode_json(&json).map(Some).map_err(|e| fail(&e))
        })?;
        Ok(changed)
    }

    /// Drop collection `collection` of the old schema, its objects and indexes.
    pub fn drop_collection(&mut self, collection: &str) -> Result<()> {
        let op = "migration: drop collection";
        let c = coll_of(self.old, collection).ok_or_else(|| unknown(op, collection))??;
        drop_indexes_of(self.conn, self.path, &c.name)?;
        self.conn
            .execute_batch(&format!("DROP TABLE IF EXISTS {}", c.ident))
            .map_err(sql_err(self.path, op))
    }

    /// Insert `bytes` (an object of the new schema) into `collection`, creating the
    /// collection's table if the new schema adds it. Returns its rowid.
    pub fn insert(&mut self, collection: &str, bytes: &[u8]) -> Result<i64> {
        let op = "migration: insert";
        let c = coll_of(self.new, collection).ok_or_else(|| unknown(op, collection))??;
        self.conn
            .execute_batch(&c.create_table_sql())
            .map_err(sql_err(self.path, "migration: create collection table"))?;
        let reader = self
            .new
            .table_reader(c.table)
            .ok_or_else(|| unknown(op, collection))?;
        let rowid = insert_row(self.conn, &c, reader, bytes)?;
        self.ticker.tick();
        Ok(rowid)
    }
}

fn drop_indexes_of(conn: &rusqlite::Connection, path: &Path, collection: &str) -> Result<()> {
    let op = "migration: drop old indexes";
    let names: Vec<String> = {
        let mut st = conn
            .prepare("SELECT name FROM sqlite_schema WHERE type = 'index' AND tbl_name = ?1 AND sql IS NOT NULL")
            .map_err(sql_err(path, op))?;
        let rows = st
            .query_map([collection], |r| r.get::<_, String>(0))
            .map_err(sql_err(path, op))?
            .collect::<rusqlite::Result<Vec<_>>>()
            .map_err(sql_err(path, op))?;
        rows
    };
    for n in names {
        conn.execute_batch(&format!("DROP INDEX IF EXISTS {}", ident(&n)))
            .map_err(sql_err(path, op))?;
    }
    conn.execute("DELETE FROM keel_index WHERE collection = ?1", [collection])
        .map_err(sql_err(path, op))?;
    Ok(())
}
