//! [`Txn`]: what a write closure gets.

use keel_schema::{ChangeRequest, Expr, Record, Value};
use keel_storage::WriteTxn;
use rusqlite::types::ValueRef as SqlRef;
use rusqlite::OptionalExtension;

use crate::base::change::{Change, ChangeOp};
use crate::base::error::{Error, Result};
use crate::base::sql_value::SqlValue;
use crate::dictionary::staged::TxnState;
use crate::engine::{Inner, WriteOutcome};
use crate::layout::body;
use crate::layout::body::Origin;
use crate::layout::side_table::Kind;
use crate::layout::table::Coll;
use crate::layout::vector_table;
use crate::query::fetch::{Fetch, Query, Source, StoredObject};
use crate::txn::dictionary::TxnDictionary;
use crate::vector::cache::Written;
use crate::vector::column;

/// A write transaction, given to the closure of
/// [`Database::write`](crate::db::database::Database::write). The closure runs on keel's writer
/// thread inside its own SAVEPOINT; reads through the `Txn` see its own writes.
///
/// * `insert` fails with [`Error::AlreadyExists`] if the primary key or a unique
///   value is taken; `update` with [`Error::NotFound`] if the key is not stored;
///   `upsert` inserts or replaces. A failed request changes nothing and the
///   transaction can go on.
/// * An update whose bytes equal the stored ones writes nothing and reports no change.
/// * [`Txn::abort`] discards everything this closure did; the write's future
///   resolves with [`Error::Aborted`].
pub struct Txn<'a> {
    pub(super) conn: &'a rusqlite::Connection,
    /// The writer's row-change counter: the rowid an update by key changed.
    wt: &'a WriteTxn<'a>,
    pub(super) inner: &'a Inner,
    pub(super) changes: Vec<Change>,
    /// The table of the first recorded change, and whether a later one is in
    /// another: the hub then need not compare collection names per change.
    first_table: Option<usize>,
    mixed: bool,
    record: bool,
    /// The sync client applies downloaded rows: no outbox operations.
    from_server: bool,
    aborted: bool,
    /// Dictionary changes of this closure, settled at commit (see `dictionary`).
    pub(crate) dict: Option<TxnState>,
    /// Write statements taken from the connection's cache for the rest of this
    /// closure (see [`Txn::with_kept_stmt`]); they go back to it when the `Txn` drops.
    kept: std::cell::RefCell<Vec<(String, rusqlite::CachedStatement<'a>)>>,
    /// The file's layout was checked in this closure ([`Txn::coll`]).
    layout_checked: std::cell::Cell<bool>,
    /// The rows this closure wrote to vector tables: the commit moves their
    /// generations and patches the in-memory copies with them
    /// (`vector/cache.rs`).
    pub(super) vectors: std::cell::RefCell<Written>,
}

/// A bound parameter borrowed from a value or the bytes.
struct Arg<'a>(SqlRef<'a>);

impl rusqlite::ToSql for Arg<'_> {
    fn to_sql(&self) -> rusqlite::Result<rusqlite::types::ToSqlOutput<'_>> {
        Ok(rusqlite::types::ToSqlOutput::Borrowed(self.0))
    }
}

fn sref(v: &Value) -> Arg<'_> {
    arg(SqlValue::from_value(v))
}

fn arg(v: SqlValue<'_>) -> Arg<'_> {
    Arg(match v {
        SqlValue::Null => SqlRef::Null,
        SqlValue::Int(i) => SqlRef::Integer(i),
        SqlValue::Float(f) => SqlRef::Real(f),
        SqlValue::Text(s) => SqlRef::Text(s.as_bytes()),
        SqlValue::Blob(b) => SqlRef::Blob(b),
    })
}

/// Binds the parameters of `sql_insert` (and `sql_update_key`) to `st`: the key
/// columns, the object's bytes as the body stores them (`BodyColumns::strip`), then
/// its index columns, each borrowed — from the key, the bytes, and the object read
/// in place — rather than collected into new vectors.
fn bind_row(
    st: &mut rusqlite::Statement<'_>,
    c: &Coll,
    key: &[Value],
    bytes: &[u8],
    origin: Origin,
) -> rusqlite::Result<()> {
    let mut at = 1;
    for k in key {
        st.raw_bind_parameter(at, sref(k))?;
        at += 1;
    }
    st.raw_bind_parameter(
        at,
        Arg(SqlRef::Blob(c.body.strip(
            bytes,
            key,
            c.ext_reader(),
            origin,
        ))),
    )?;
    bind_columns(st, c, bytes, at + 1)
}

/// Binds the index columns of the object in `bytes` to `st`, from parameter `first`
/// on, each read in place.
fn bind_columns(
    st: &mut rusqlite::Statement<'_>,
    c: &Coll,
    bytes: &[u8],
    first: usize,
) -> rusqlite::Result<()> {
    for (at, v) in (first..).zip(c.column_refs(bytes)) {
        st.raw_bind_parameter(at, arg(v))?;
    }
    Ok(())
}

impl<'a> Txn<'a> {
    pub(crate) fn new(w: &'a WriteTxn<'_>, inner: &'a Inner, record: bool) -> Txn<'a> {
        Txn {
            conn: w,
            wt: w,
            inner,
            changes: Vec::new(),
            first_table: None,
            mixed: false,
            record,
            from_server: false,
            aborted: false,
            dict: None,
            kept: std::cell::RefCell::new(Vec::new()),
            layout_checked: std::cell::Cell::new(false),
            vectors: std::cell::RefCell::default(),
        }
    }

    /// What the closure leaves for the commit sequence
    /// ([`Inner::commit_closure`]).
    pub(crate) fn finish(mut self) -> WriteOutcome {
        WriteOutcome {
            changes: std::mem::take(&mut self.changes),
            one_collection: !self.mixed,
            aborted: self.aborted,
            recorded: self.record,
            from_server: self.from_server,
            dictionary: self.dict.take(),
            vectors: self.vectors.take(),
        }
    }

    /// Whether writes to `c` record their changes: for the hub and the hooks, or
    /// because `c` syncs (the outbox is made from them).
    fn records(&self, c: &Coll) -> bool {
        self.record || c.synced
    }

    // Used by the sync client (feature `sync`).
    #[cfg_attr(not(feature = "sync"), allow(dead_code))]
    /// Marks this closure as the sync client's apply of downloaded rows: its
    /// writes reach subscribers like any other but add nothing to the outbox.
    pub(crate) fn set_from_server(&mut self) {
        self.from_server = true;
    }

    // Used by the sync client (feature `sync`).
    #[cfg_attr(not(feature = "sync"), allow(dead_code))]
    /// The write connection, for the sync client's own tables.
    pub(crate) fn connection(&self) -> &rusqlite::Connection {
        self.conn
    }

    fn check(&self, op: &'static str) -> Result<()> {
        if self.aborted {
            Err(Error::Aborted {
                path: self.inner.path().to_path_buf(),
            })
        } else {
            let _ = op;
            Ok(())
        }
    }

    /// Discard everything this closure did. Later calls on this `Txn` fail with
    /// [`Error::Aborted`], and so does the write's future.
    ///
    /// ```
    /// # use keel_query::{Database, StoreOptions, Error};
    /// use keel_example_blog::blog::Post;
    /// # let dir = tempfile::tempdir().unwrap();
    /// # let db = Database::open_for::<Post>(dir.path().join("a.db"), StoreOptions::default())?;
    /// let r = db.write(|t| { t.insert(&Post::builder().id("x").build())?; t.abort(); Ok(()) }).wait();
    /// assert!(matches!(r, Err(Error::Aborted { .. })));
    /// assert_eq!(db.fetch::<Post>().count()?, 0);
    /// # Ok::<(), keel_query::Error>(())
    /// ```
    pub fn abort(&mut self) {
        self.aborted = true;
        self.changes.clear();
    }

    /// The collection `name`, once this closure has found the file laid out as
    /// this database writes it ([`Inner::check_layout`]: another process may
    /// have changed it).
    pub(super) fn coll(&self, name: &str, op: &'static str) -> Result<&'a Coll> {
        let c = self.inner.coll(name, op)?;
        if !self.layout_checked.get() {
            self.inner.check_layout(self.wt, op)?;
            self.layout_checked.set(true);
        }
        Ok(c)
    }

    /// Verify `bytes` against the collection's table and read its primary key.
    pub(super) fn key_of(&self, c: &Coll, op: &'static str, bytes: &[u8]) -> Result<Vec<Value>> {
        let t = self.inner.table(c)?;
        let obj = t.read(bytes).map_err(|source| Error::InvalidObject {
            op,
            collection: c.name.clone(),
            source,
        })?;
        c.key
            .iter()
            .map(|k| match obj.get_ref(&k.path) {
                Ok(v) => match SqlValue::from_ref(v) {
                    SqlValue::Null => Err(Error::TypeMismatch {
                        op,
                        collection: c.name.clone(),
                        message: format!(
                            "the object has no value for primary-key field {:?}",
                            k.name
                        ),
                    }),
                    v => Ok(v.to_value()),
                },
                Err(source) => Err(Error::InvalidObject {
                    op,
                    collection: c.name.clone(),
                    source,
                }),
            })
            .collect()
    }

    fn record(
        &mut self,
        c: &Coll,
        op: ChangeOp,
        key: Vec<Value>,
        rowid: i64,
        old: Option<Vec<u8>>,
        new: Option<Vec<u8>>,
    ) {
        if self.records(c) {
            let key = if c.key.is_empty() {
                vec![Value::Int(rowid)]
            } else {
                key
            };
            match self.first_table {
                None => self.first_table = Some(c.table),
                Some(t) => self.mixed |= t != c.table,
            }
            self.changes.push(Change {
                collection: c.name.clone(),
                op,
                key,
                rowid,
                old,
                new,
            });
        }
    }

    /// Whether an object with `key` is stored (as this transaction sees it): an
    /// index probe, no body read (a reference check per written object).
    pub(super) fn exists(&self, c: &Coll, op: &'static str, key: &[Value]) -> Result<bool> {
        self.with_kept_stmt(c, op, &c.sql_find_rowid, |st| {
            st.exists(rusqlite::params_from_iter(key.iter().map(sref)))
        })
    }

    /// The stored row with `key` (the key is unique: at most one). On a kept
    /// statement: recording writes run it once per object (the old bytes).
    pub(super) fn find(
        &self,
        c: &Coll,
        op: &'static str,
        key: &[Value],
    ) -> Result<Option<StoredObject>> {
        self.with_kept_stmt(c, op, &c.sql_find, |st| {
            st.query_row(rusqlite::params_from_iter(key.iter().map(sref)), |r| {
                let rowid: i64 = r.get(0)?;
                let bytes =
                    body::with_scratch(|s| c.body.read_found(r, key, s).map(<[u8]>::to_vec))?;
                Ok(StoredObject { rowid, bytes })
            })
            .optional()
        })
    }

    /// Runs `f` on the prepared statement for `sql`, which stays out of the
    /// connection's statement cache until this `Txn` drops: a batch of 10,000 inserts
    /// looks it up once instead of taking it from and returning it to the cache per
    /// row. `f` must be done with the statement when it returns (`execute`,
    /// `query_row`): no row iterator may outlive it.
    fn with_kept_stmt<T>(
        &self,
        c: &Coll,
        op: &'static str,
        sql: &str,
        f: impl FnOnce(&mut rusqlite::Statement<'a>) -> rusqlite::Result<T>,
    ) -> Result<T> {
        let mut kept = self.kept.borrow_mut();
        let i = match kept.iter().position(|(s, _)| s == sql) {
            Some(i) => i,
            None => {
                let st = self
                    .conn
                    .prepare_cached(sql)
                    .map_err(|e| Error::sqlite(op, &c.name, e))?;
                kept.push((sql.to_owned(), st));
                kept.len() - 1
            }
        };
        f(&mut kept[i].1).map_err(|e| Error::sqlite(op, &c.name, e))
    }

    /// Write the side-table entries (full-text index, packed vectors:
    /// `layout/side_table.rs`) of the object `bytes` (the whole buffer) at
    /// `rowid`: in this transaction and savepoint, like the row itself.
    fn write_side_tables(
        &self,
        c: &Coll,
        op: &'static str,
        rowid: i64,
        bytes: &[u8],
    ) -> Result<()> {
        for t in c.side_tables() {
            let vector = t.kind() == Kind::Vector;
            if vector {
                self.mark_vector_write(c, op)?;
            }
            self.with_kept_stmt(c, op, t.sql().upsert, |st| t.write(st, rowid, bytes))?;
            if vector {
                self.vectors
                    .borrow_mut()
                    .row(&c.name, rowid, Some(bytes), || {
                        self.inner.vector_cache.holds(&c.name)
                    });
            }
        }
        Ok(())
    }

    /// Remove the side-table entries of `rowid` (see [`Txn::write_side_tables`]).
    fn delete_side_tables(&self, c: &Coll, op: &'static str, rowid: i64) -> Result<()> {
        for t in c.side_tables() {
            let vector = t.kind() == Kind::Vector;
            if vector {
                self.mark_vector_write(c, op)?;
            }
            self.with_kept_stmt(c, op, t.sql().delete, |st| st.execute([rowid]).map(|_| ()))?;
            if vector {
                self.vectors.borrow_mut().row(&c.name, rowid, None, || {
                    self.inner.vector_cache.holds(&c.name)
                });
            }
        }
        Ok(())
    }

    /// Before this closure's first write to a vector table: the writer's
    /// marker row, so the table's triggers leave the generation to the
    /// commit (`layout/vector_table.rs`).
    fn mark_vector_write(&self, c: &Coll, op: &'static str) -> Result<()> {
        if !self.vectors.borrow().marked {
            vector_table::mark_writing(self.conn).map_err(|e| Error::sqlite(op, &c.name, e))?;
            self.vectors.borrow_mut().marked = true;
        }
        Ok(())
    }

    fn insert_raw(
        &mut self,
        c: &Coll,
        op: &'static str,
        key: Vec<Value>,
        bytes: Vec<u8>,
        origin: Origin,
    ) -> Result<i64> {
        column::check(c, op, &bytes)?;
        self.check_references(c, op, &bytes)?;
        // The index columns are extracted once from the bytes, as they are bound.
        self.with_kept_stmt(c, op, &c.sql_insert, |st| {
            bind_row(st, c, &key, &bytes, origin)?;
            st.raw_execute()
        })?;
        let rowid = self.conn.last_insert_rowid();
        self.write_side_tables(c, op, rowid, &bytes)?;
        let new = self.records(c).then_some(bytes);
        self.record(c, ChangeOp::Insert, key, rowid, None, new);
        Ok(rowid)
    }

    fn update_raw(
        &mut self,
        c: &Coll,
        op: &'static str,
        key: Vec<Value>,
        bytes: Vec<u8>,
        origin: Origin,
    ) -> Result<i64> {
        match self.try_update(c, op, key, bytes, origin)? {
            Ok(rowid) => Ok(rowid),
            Err((key, _)) => Err(Error::NotFound {
                op,
                collection: c.name.clone(),
                key,
            }),
        }
    }

    /// Update the object with `key`; gives key and bytes back if it does not exist.
    #[allow(clippy::type_complexity)]
    fn try_update(
        &mut self,
        c: &Coll,
        op: &'static str,
        key: Vec<Value>,
        bytes: Vec<u8>,
        origin: Origin,
    ) -> Result<std::result::Result<i64, (Vec<Value>, Vec<u8>)>> {
        column::check(c, op, &bytes)?;
        self.check_references(c, op, &bytes)?;
        if self.records(c) {
            let Some(old) = self.find(c, op, &key)? else {
                return Ok(Err((key, bytes)));
            };
            if old.bytes == bytes {
                return Ok(Ok(old.rowid));
            }
            self.update_body(c, op, old.rowid, &key, &bytes, origin)?;
            self.record(
                c,
                ChangeOp::Update,
                key,
                old.rowid,
                Some(old.bytes),
                Some(bytes),
            );
            return Ok(Ok(old.rowid));
        }
        // One statement, as a hand-written update: the row with this key gets the
        // new bytes and columns unless it holds these bytes already. The rowid the
        // API returns comes from SQLite's update hook (`row_changes`), not from a
        // second statement (`RETURNING rowid` buffers its rows: 7× slower).
        let before = self.wt.row_changes().count;
        let n = self.with_kept_stmt(c, op, &c.sql_update_key, |st| {
            bind_row(st, c, &key, &bytes, origin)?;
            st.raw_execute()
        })?;
        if n == 1 {
            let after = self.wt.row_changes();
            if after.count == before + 1 {
                self.write_side_tables(c, op, after.last_rowid, &bytes)?;
                return Ok(Ok(after.last_rowid));
            }
        }
        // Nothing changed (no such key, or it holds these bytes already), or a
        // trigger changed rows too: one index probe tells the rowid, if any.
        let mut st = self
            .conn
            .prepare_cached(&c.sql_find_rowid)
            .map_err(|e| Error::sqlite(op, &c.name, e))?;
        let mut rows = st
            .query(rusqlite::params_from_iter(key.iter().map(sref)))
            .map_err(|e| Error::sqlite(op, &c.name, e))?;
        match rows.next().map_err(|e| Error::sqlite(op, &c.name, e))? {
            Some(r) => {
                let rowid: i64 = r.get(0).map_err(|e| Error::sqlite(op, &c.name, e))?;
                drop(rows);
                if n == 1 {
                    // It was updated (a trigger changed other rows too).
                    self.write_side_tables(c, op, rowid, &bytes)?;
                }
                Ok(Ok(rowid))
            }
            None => {
                drop(rows);
                Ok(Err((key, bytes)))
            }
        }
    }

    /// Replace the bytes (and index columns) of the object with `key` at `rowid`
    /// (`sql_update`); the caller has run the column and reference checks on `bytes`.
    fn update_body(
        &self,
        c: &Coll,
        op: &'static str,
        rowid: i64,
        key: &[Value],
        bytes: &[u8],
        origin: Origin,
    ) -> Result<()> {
        self.with_kept_stmt(c, op, &c.sql_update, |st| {
            st.raw_bind_parameter(
                1,
                Arg(SqlRef::Blob(c.body.strip(
                    bytes,
                    key,
                    c.ext_reader(),
                    origin,
                ))),
            )?;
            st.raw_bind_parameter(2, rowid)?;
            bind_columns(st, c, bytes, 3)?;
            st.raw_execute()
        })?;
        self.write_side_tables(c, op, rowid, bytes)
    }

    fn no_key(&self, c: &Coll, op: &'static str) -> Result<()> {
        if c.key.is_empty() {
            Err(Error::TypeMismatch {
                op,
                collection: c.name.clone(),
                message: "the collection has no primary key: objects can be inserted, fetched and deleted by rowid, not updated".into(),
            })
        } else {
            Ok(())
        }
    }

    // ---- dynamic API ----

    /// Insert an object given as FlatBuffers bytes (verified against the schema).
    /// Returns its rowid. A taken primary key or unique value is
    /// [`Error::AlreadyExists`]; malformed bytes are [`Error::InvalidObject`].
    ///
    /// ```
    /// # use keel_query::{Database, StoreOptions, Error};
    /// use keel_example_blog::blog::Post;
    /// # let dir = tempfile::tempdir().unwrap();
    /// # let db = Database::open_for::<Post>(dir.path().join("i.db"), StoreOptions::default())?;
    /// let bytes = Post::builder().id("p").build().encode();
    /// db.write(move |t| {
    ///     t.insert_bytes("blog.Post", bytes)?;
    ///     assert!(matches!(t.insert_bytes("blog.Post", vec![1, 2, 3]), Err(Error::InvalidObject { .. })));
    ///     Ok(())
    /// }).wait()?;
    /// # Ok::<(), keel_query::Error>(())
    /// ```
    pub fn insert_bytes(&mut self, collection: &str, bytes: impl Into<Vec<u8>>) -> Result<i64> {
        let bytes = bytes.into();
        let (c, key) = self.bytes_target(collection, "insert", false, &bytes)?;
        self.insert_raw(c, "insert", key, bytes, Origin::Foreign)
    }

    /// Replace the object with the same primary key; [`Error::NotFound`] if none.
    pub fn update_bytes(&mut self, collection: &str, bytes: impl Into<Vec<u8>>) -> Result<i64> {
        let bytes = bytes.into();
        let (c, key) = self.bytes_target(collection, "update", true, &bytes)?;
        self.update_raw(c, "update", key, bytes, Origin::Foreign)
    }

    /// Insert, or replace the object with the same primary key.
    pub fn upsert_bytes(&mut self, collection: &str, bytes: impl Into<Vec<u8>>) -> Result<i64> {
        let bytes = bytes.into();
        let (c, key) = self.bytes_target(collection, "upsert", false, &bytes)?;
        self.upsert_raw(c, key, bytes, Origin::Foreign)
    }

    /// What every `*_bytes` write checks first, in this order: the transaction is
    /// usable, `collection` exists, it has a primary key (only if `needs_key`: `op`
    /// finds its object by key), and `bytes` verify. Returns the collection and the
    /// key extracted from `bytes`.
    fn bytes_target(
        &self,
        collection: &str,
        op: &'static str,
        needs_key: bool,
        bytes: &[u8],
    ) -> Result<(&'a Coll, Vec<Value>)> {
        self.check(op)?;
        let c = self.coll(collection, op)?;
        if needs_key {
            self.no_key(c, op)?;
        }
        let key = self.key_of(c, op, bytes)?;
        Ok((c, key))
    }

    fn upsert_raw(
        &mut self,
        c: &Coll,
        key: Vec<Value>,
        bytes: Vec<u8>,
        origin: Origin,
    ) -> Result<i64> {
        if c.key.is_empty() {
            return self.insert_raw(c, "upsert", key, bytes, origin);
        }
        match self.try_update(c, "upsert", key, bytes, origin)? {
            Ok(rowid) => Ok(rowid),
            Err((key, bytes)) => self.insert_raw(c, "upsert", key, bytes, origin),
        }
    }

    /// Apply a change by fields: the object stored under `key` gets the fields named
    /// in `fields` from `changed` (FlatBuffers bytes of the collection's table: a
    /// field absent there is cleared, i.e. absent or default in the result); every
    /// other field keeps the value stored *now*, inside this transaction. So a change
    /// built from a stale copy never reverts what another write committed meanwhile.
    /// Returns the object's rowid.
    ///
    /// [`Error::NotFound`] if no object has `key`. Setting a primary-key field moves
    /// the object: the old key is deleted and the new one inserted in this
    /// transaction (subscribers see a delete and an insert);
    /// [`Error::AlreadyExists`] if the new key is taken. Unknown field names are
    /// [`Error::UnknownField`].
    ///
    /// ```
    /// # use keel_query::{Database, StoreOptions};
    /// use keel_example_blog::blog::Post;
    /// # let dir = tempfile::tempdir().unwrap();
    /// # let db = Database::open_for::<Post>(dir.path().join("c.db"), StoreOptions::default())?;
    /// db.write(|t| t.insert(&Post::builder().id("a").title("T").priority(1).build())).wait()?;
    /// let stale = Post::builder().id("a").priority(9).build().encode(); // title unset here
    /// db.write(move |t| t.change_bytes("blog.Post", &["a".into()], &stale, &["priority"])).wait()?;
    /// let p = db.get::<Post>(&"a".into())?.unwrap();
    /// assert_eq!((p.priority, p.title.as_deref()), (9, Some("T")));
    /// # Ok::<(), keel_query::Error>(())
    /// ```
    pub fn change_bytes(
        &mut self,
        collection: &str,
        key: &[Value],
        changed: &[u8],
        fields: &[&str],
    ) -> Result<i64> {
        self.check("change")?;
        let c = self.coll(collection, "change")?;
        let ids = self.field_ids(c, "change", fields.iter().copied())?;
        self.change_raw(c, "change", key, changed, &ids)
    }

    /// [`change_bytes`](Self::change_bytes) with the new field values given as
    /// [`Value`]s (scalars, enums as their number, strings, `[ubyte]` as `Blob`;
    /// `Null` clears the field). A value that does not fit its field is
    /// [`Error::TypeMismatch`].
    ///
    /// ```
    /// # use keel_query::{Database, StoreOptions};
    /// use keel_example_blog::blog::Post;
    /// # let dir = tempfile::tempdir().unwrap();
    /// # let db = Database::open_for::<Post>(dir.path().join("v.db"), StoreOptions::default())?;
    /// db.write(|t| t.insert(&Post::builder().id("a").title("T").build())).wait()?;
    /// db.write(|t| t.change_values("blog.Post", &["a".into()], &[("priority".into(), 5.into())])).wait()?;
    /// assert_eq!(db.get::<Post>(&"a".into())?.unwrap().priority, 5);
    /// # Ok::<(), keel_query::Error>(())
    /// ```
    pub fn change_values(
        &mut self,
        collection: &str,
        key: &[Value],
        values: &[(String, Value)],
    ) -> Result<i64> {
        self.check("change")?;
        let c = self.coll(collection, "change")?;
        let ids = self.field_ids(c, "change", values.iter().map(|(n, _)| n.as_str()))?;
        let t = self.inner.table(c)?;
        let changed = t.encode_values(values).map_err(|e| Error::TypeMismatch {
            op: "change",
            collection: c.name.clone(),
            message: e.to_string(),
        })?;
        self.change_raw(c, "change", key, &changed, &ids)
    }

    fn field_ids<'n>(
        &self,
        c: &Coll,
        op: &'static str,
        names: impl Iterator<Item = &'n str>,
    ) -> Result<Vec<u16>> {
        let t = self.inner.table(c)?;
        names
            .map(|n| {
                t.table()
                    .field(n)
                    .map(|f| f.id)
                    .ok_or_else(|| Error::UnknownField {
                        op,
                        collection: c.name.clone(),
                        message: format!("{} has no field {n:?}", c.name),
                    })
            })
            .collect()
    }

    /// Apply fields `ids` of `changed` to the stored object with `key` (see
    /// [`Txn::change_bytes`]).
    pub(super) fn change_raw(
        &mut self,
        c: &Coll,
        op: &'static str,
        key: &[Value],
        changed: &[u8],
        ids: &[u16],
    ) -> Result<i64> {
        self.no_key(c, op)?;
        let key = c.check_key(op, key)?;
        let Some(old) = self.find(c, op, &key)? else {
            return Err(Error::NotFound {
                op,
                collection: c.name.clone(),
                key,
            });
        };
        // Patch with the newest schema the file knows: an older build (opening an
        // older schema than the one stored) must carry over the fields, enum values
        // and union members only the newer schema knows, not drop them. Field ids
        // are stable across compatible evolutions, so `ids` name the same fields.
        let t = match c.ext_table.and_then(|i| c.ext.table_reader(i)) {
            Some(t) => t,
            None => self.inner.table(c)?,
        };
        let merged = t
            .patch(&old.bytes, changed, ids)
            .map_err(|source| Error::InvalidObject {
                op,
                collection: c.name.clone(),
                source,
            })?;
        let new_key = self.key_of(c, op, &merged)?;
        if new_key == key {
            if merged != old.bytes {
                column::check(c, op, &merged)?;
                self.check_references(c, op, &merged)?;
                self.update_body(c, op, old.rowid, &key, &merged, Origin::Foreign)?;
                let new = self.records(c).then_some(merged);
                self.record(c, ChangeOp::Update, key, old.rowid, Some(old.bytes), new);
            }
            return Ok(old.rowid);
        }
        // A key change: delete + insert, all or nothing.
        self.conn
            .execute_batch("SAVEPOINT keel_change_key")
            .map_err(|e| Error::sqlite(op, &c.name, e))?;
        let recorded = self.changes.len();
        let vectors = self.vectors.borrow().mark();
        let moved = (|| {
            {
                let mut st = self
                    .conn
                    .prepare_cached(&c.sql_delete)
                    .map_err(|e| Error::sqlite(op, &c.name, e))?;
                st.execute([old.rowid])
                    .map_err(|e| Error::sqlite(op, &c.name, e))?;
            }
            self.delete_side_tables(c, op, old.rowid)?;
            self.record(c, ChangeOp::Delete, key, old.rowid, Some(old.bytes), None);
            let rowid = self.insert_raw(c, op, new_key, merged, Origin::Foreign)?;
            if rowid != old.rowid {
                return Ok(rowid);
            }
            // SQLite reuses the rowid of a just-deleted last row. The moved object
            // must look new to subscribers (they match rows by rowid), so give it
            // a rowid of its own.
            let fresh: i64 = self
                .conn
                .query_row(
                    &format!("SELECT max(rowid) + 1 FROM {}", c.ident),
                    [],
                    |r| r.get(0),
                )
                .map_err(|e| Error::sqlite(op, &c.name, e))?;
            self.conn
                .execute(
                    &format!("UPDATE {} SET rowid = ?1 WHERE rowid = ?2", c.ident),
                    [fresh, rowid],
                )
                .map_err(|e| Error::sqlite(op, &c.name, e))?;
            // Its side-table entries move with it.
            for t in c.side_tables() {
                t.move_row(self.conn, rowid, fresh)
                    .map_err(|e| Error::sqlite(op, &c.name, e))?;
                if t.kind() == Kind::Vector {
                    self.vectors.borrow_mut().moved(&c.name, rowid, fresh);
                }
            }
            if let Some(ch) = self.changes.last_mut() {
                ch.rowid = fresh;
            }
            Ok(fresh)
        })();
        let end = if moved.is_ok() {
            "RELEASE keel_change_key"
        } else {
            self.changes.truncate(recorded);
            self.vectors.borrow_mut().rollback_to(&vectors);
            "ROLLBACK TO keel_change_key; RELEASE keel_change_key"
        };
        self.conn
            .execute_batch(end)
            .map_err(|e| Error::sqlite(op, &c.name, e))?;
        moved
    }

    /// Delete the object with primary key `key` (`[rowid]` for collections without
    /// one). Returns whether it existed. Key values are type-checked.
    ///
    /// ```
    /// # use keel_query::{Database, StoreOptions, Error};
    /// use keel_example_blog::blog::Post;
    /// # let dir = tempfile::tempdir().unwrap();
    /// # let db = Database::open_for::<Post>(dir.path().join("d.db"), StoreOptions::default())?;
    /// db.write(|t| {
    ///     t.insert(&Post::builder().id("a").build())?;
    ///     assert!(t.delete_key("blog.Post", &["a".into()])?);
    ///     assert!(!t.delete_key("blog.Post", &["a".into()])?);
    ///     assert!(matches!(t.delete_key("blog.Post", &[7.into()]), Err(Error::TypeMismatch { .. })));
    ///     Ok(())
    /// }).wait()?;
    /// # Ok::<(), keel_query::Error>(())
    /// ```
    pub fn delete_key(&mut self, collection: &str, key: &[Value]) -> Result<bool> {
        self.check("delete")?;
        let c = self.coll(collection, "delete")?;
        if !c.links.incoming.is_empty() {
            // Other objects may refer to it: their `on_delete` rules apply
            // (`txn/rules.rs`).
            let key = c.check_key("delete", key)?;
            return self.delete_by_rules(c, key);
        }
        self.delete_plain(c, key)
    }

    /// Delete the object with `key` of `c`, no reference rules applied.
    pub(super) fn delete_plain(&mut self, c: &Coll, key: &[Value]) -> Result<bool> {
        if !self.records(c) && c.side_tables().next().is_none() {
            // A key with nothing to convert (a typed key's values always) is bound
            // as given, not copied.
            let key = c.check_key_ref("delete", key)?;
            let n = self.with_kept_stmt(c, "delete", &c.sql_delete_key, |st| {
                st.execute(rusqlite::params_from_iter(key.iter().map(sref)))
            })?;
            return Ok(n > 0);
        }
        let key = c.check_key("delete", key)?;
        if !self.records(c) {
            // A searchable collection: the index entry goes by rowid, so find it.
            let rowid: Option<i64> = self.with_kept_stmt(c, "delete", &c.sql_find_rowid, |st| {
                st.query_row(rusqlite::params_from_iter(key.iter().map(sref)), |r| {
                    r.get(0)
                })
                .optional()
            })?;
            let Some(rowid) = rowid else {
                return Ok(false);
            };
            self.with_kept_stmt(c, "delete", &c.sql_delete, |st| st.execute([rowid]))?;
            self.delete_side_tables(c, "delete", rowid)?;
            return Ok(true);
        }
        let (rowid, old) = match self.find(c, "delete", &key)? {
            Some(o) => (o.rowid, Some(o.bytes)),
            None => return Ok(false),
        };
        self.with_kept_stmt(c, "delete", &c.sql_delete, |st| st.execute([rowid]))?;
        self.delete_side_tables(c, "delete", rowid)?;
        self.record(c, ChangeOp::Delete, key, rowid, old, None);
        Ok(true)
    }

    /// Delete every object of `collection` matching `filter` (as this transaction
    /// sees it: its own writes included); returns how many matching objects were
    /// deleted (objects deleted by cascade besides are not counted). Each delete
    /// reaches subscribers like [`Txn::delete_key`]. Core Data's batch delete,
    /// Dflat's `deleteAll(where:)`.
    ///
    /// All or nothing: the matching objects are one set for the reference
    /// rules (`docs/relations.md`), so a `restrict` referrer that goes with the
    /// set — matched, or reached by cascade — does not refuse it, and a refused
    /// or failing call deletes none of them (the transaction goes on).
    ///
    /// ```
    /// # use keel_query::{Database, StoreOptions};
    /// use keel_example_blog::blog::Post;
    /// # let dir = tempfile::tempdir().unwrap();
    /// # let db = Database::open_for::<Post>(dir.path().join("dw.db"), StoreOptions::default())?;
    /// let n = db.write(|t| {
    ///     for i in 0..10 {
    ///         t.insert(&Post::builder().id(format!("p{i}")).priority(i).build())?;
    ///     }
    ///     t.delete_where::<Post>(Post::priority().lt(3))
    /// }).wait()?;
    /// assert_eq!((n, db.fetch::<Post>().count()?), (3, 7));
    /// # Ok::<(), keel_query::Error>(())
    /// ```
    pub fn delete_matching(&mut self, collection: &str, filter: Expr) -> Result<usize> {
        self.check("delete")?;
        let c = self.coll(collection, "delete")?;
        let found = self.query(collection).filter(filter).all()?;
        let keys = found
            .into_iter()
            .map(|o| {
                if c.key.is_empty() {
                    Ok(vec![Value::Int(o.rowid)])
                } else {
                    self.key_of(c, "delete", &o.bytes)
                }
            })
            .collect::<Result<Vec<_>>>()?;
        // One set, all or nothing: its reference rules are walked over every
        // matching object at once (`txn/rules.rs`).
        self.delete_set(c, keys)
    }

    /// The object with primary key `key` as this transaction sees it.
    pub fn get_bytes(&self, collection: &str, key: &[Value]) -> Result<Option<StoredObject>> {
        self.check("get")?;
        let c = self.coll(collection, "get")?;
        self.inner.get_in(self.conn, c, "get", key, true)
    }

    /// A dynamic query that sees this transaction's own writes.
    pub fn query(&self, collection: &str) -> Query<'_> {
        Query::new(Source::Conn(self.inner, self.conn, None), collection)
    }

    // ---- typed API ----

    fn typed_key<R: Record>(&self, c: &Coll, op: &'static str, obj: &R) -> Result<Vec<Value>> {
        if c.key.is_empty() {
            Ok(Vec::new())
        } else {
            c.check_key_owned(op, obj.primary_key())
        }
    }

    /// Insert `obj`; [`Error::AlreadyExists`] if its key or a unique value is taken.
    pub fn insert<R: Record>(&mut self, obj: &R) -> Result<i64> {
        self.check("insert")?;
        let c = self.coll(R::COLLECTION, "insert")?;
        let key = self.typed_key(c, "insert", obj)?;
        self.insert_raw(c, "insert", key, obj.encode(), Origin::Encoder)
    }

    /// Replace the stored object with `obj`'s key; [`Error::NotFound`] if none.
    /// Writes nothing if the object is unchanged.
    pub fn update<R: Record>(&mut self, obj: &R) -> Result<i64> {
        self.check("update")?;
        let c = self.coll(R::COLLECTION, "update")?;
        self.no_key(c, "update")?;
        let key = self.typed_key(c, "update", obj)?;
        self.update_raw(c, "update", key, obj.encode(), Origin::Encoder)
    }

    /// Insert or replace `obj`.
    pub fn upsert<R: Record>(&mut self, obj: &R) -> Result<i64> {
        self.check("upsert")?;
        let c = self.coll(R::COLLECTION, "upsert")?;
        let key = self.typed_key(c, "upsert", obj)?;
        self.upsert_raw(c, key, obj.encode(), Origin::Encoder)
    }

    /// Delete the `R` with primary key `key`; returns whether it existed.
    pub fn delete<R: Record>(&mut self, key: &R::Key) -> Result<bool> {
        self.delete_key(R::COLLECTION, &R::key_values(key))
    }

    /// Apply a generated [`ChangeRequest`] (`post.create()`, `post.change()…build()`).
    /// A `Change` writes only the fields it set, on top of the version stored now
    /// (see [`Txn::change_bytes`]).
    ///
    /// ```
    /// # use keel_query::{Database, StoreOptions};
    /// use keel_example_blog::blog::Post;
    /// # let dir = tempfile::tempdir().unwrap();
    /// # let db = Database::open_for::<Post>(dir.path().join("s.db"), StoreOptions::default())?;
    /// let post = Post::builder().id("a").priority(1).build();
    /// db.write(move |t| {
    ///     t.submit(post.create())?;
    ///     t.submit(post.change().priority(2).build())?;
    ///     t.submit(Post::delete(&"a".to_string()))
    /// }).wait()?;
    /// assert_eq!(db.fetch::<Post>().count()?, 0);
    /// # Ok::<(), keel_query::Error>(())
    /// ```
    pub fn submit<R: Record>(&mut self, req: ChangeRequest<R>) -> Result<()> {
        match req {
            ChangeRequest::Create(o) => self.insert(&o).map(|_| ()),
            ChangeRequest::Change(ch) => {
                self.check("change")?;
                let c = self.coll(R::COLLECTION, "change")?;
                self.change_raw(c, "change", ch.key(), &ch.object().encode(), ch.fields())
                    .map(|_| ())
            }
            ChangeRequest::Upsert(o) => self.upsert(&o).map(|_| ()),
            ChangeRequest::Delete(k) => self.delete_key(R::COLLECTION, &k).map(|_| ()),
        }
    }

    /// Delete every `R` matching `filter`; returns how many (see
    /// [`Txn::delete_matching`]).
    pub fn delete_where<R: Record>(&mut self, filter: Expr) -> Result<usize> {
        self.delete_matching(R::COLLECTION, filter)
    }

    /// Change every `R` matching `filter` (as this transaction sees it): `f` gets
    /// each object and returns the request to submit for it, usually
    /// `obj.change()…build()`. Returns how many objects matched. Core Data's batch
    /// update.
    ///
    /// ```
    /// # use keel_query::{Database, StoreOptions};
    /// use keel_example_blog::blog::Post;
    /// # let dir = tempfile::tempdir().unwrap();
    /// # let db = Database::open_for::<Post>(dir.path().join("uw.db"), StoreOptions::default())?;
    /// let n = db.write(|t| {
    ///     for i in 0..4 {
    ///         t.insert(&Post::builder().id(format!("p{i}")).priority(i).build())?;
    ///     }
    ///     t.update_where::<Post>(Post::priority().ge(2), |p| p.change().title("hot").build())
    /// }).wait()?;
    /// assert_eq!(n, 2);
    /// assert_eq!(db.fetch::<Post>().filter(Post::title().eq("hot")).count()?, 2);
    /// # Ok::<(), keel_query::Error>(())
    /// ```
    pub fn update_where<R: Record>(
        &mut self,
        filter: Expr,
        mut f: impl FnMut(&R) -> ChangeRequest<R>,
    ) -> Result<usize> {
        self.check("update")?;
        let found = self.fetch::<R>().filter(filter).all()?;
        for obj in &found {
            self.submit(f(obj))?;
        }
        Ok(found.len())
    }

    /// The `R` with primary key `key`, including this transaction's writes.
    pub fn get<R: Record>(&self, key: &R::Key) -> Result<Option<R>> {
        self.check("get")?;
        let c = self.coll(R::COLLECTION, "get")?;
        self.inner
            .get_typed::<R>(self.conn, c, "get", &R::key_values(key))
    }

    /// A typed query that sees this transaction's own writes.
    pub fn fetch<R: Record>(&self) -> Fetch<'_, R> {
        Fetch::new(Source::Conn(self.inner, self.conn, None))
    }

    /// The key-value dictionary inside this transaction: its changes commit or roll
    /// back with this closure's objects (see
    /// [`TxnDictionary`]).
    ///
    /// ```
    /// # use keel_query::{Database, StoreOptions};
    /// use keel_example_blog::blog::Post;
    /// # let dir = tempfile::tempdir().unwrap();
    /// # let db = Database::open_for::<Post>(dir.path().join("t.db"), StoreOptions::default())?;
    /// db.write(|txn| {
    ///     txn.insert(&Post::builder().id("p1").build())?;
    ///     txn.dictionary().set("last_post", "p1")
    /// }).wait()?;
    /// assert_eq!(db.dictionary().get::<String>("last_post")?.as_deref(), Some("p1"));
    /// # Ok::<(), keel_query::Error>(())
    /// ```
    pub fn dictionary(&mut self) -> TxnDictionary<'_> {
        TxnDictionary::new(self.conn, self.inner, self.aborted, &mut self.dict)
    }
}
