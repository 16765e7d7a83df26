//! Queries: [`Query`] (dynamic: collection name, `Expr`, bytes) and [`Fetch`]
//! (typed: a generated [`Record`] type).

use std::marker::PhantomData;

use keel_schema::{Expr, Record, SortKey, Value};

use std::sync::Arc;

use crate::base::error::{Error, Result};
use crate::base::sql_value::Param;
use crate::engine::{Inner, Task};
use crate::layout::body;
use crate::layout::table::Coll;
use crate::query::scan;
use crate::query::scan::Ask;
use crate::query::sql::Compiler;
use crate::query::sql::RANK_COLUMN;

/// One stored object: its rowid and its FlatBuffers bytes (verified against the
/// collection's table when fetched).
///
/// ```
/// use keel_query::StoredObject;
/// let o = StoredObject { rowid: 1, bytes: vec![] };
/// assert_eq!(o.rowid, 1);
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoredObject {
    /// SQLite rowid (stable for the object's life; reused only after deletion).
    pub rowid: i64,
    /// The object as FlatBuffers bytes (root = the collection's table).
    pub bytes: Vec<u8>,
}

pub(crate) enum Source<'a> {
    /// Through the database (a pooled connection per read): the facade's state.
    Db(Arc<Inner>),
    /// A snapshot's, transaction's or the hub's connection; for a snapshot, the
    /// index build epoch it was taken at (`layout::ready_epoch`).
    Conn(&'a Inner, &'a rusqlite::Connection, Option<u64>),
}

impl Source<'_> {
    pub(crate) fn inner(&self) -> &Inner {
        match self {
            Source::Db(inner) => inner,
            Source::Conn(inner, _, _) => inner,
        }
    }

    /// Run `f` on this source's connection. Through the database, without a read
    /// transaction around it: each query runs one statement (after, for a
    /// collection this open creates, a look at `sqlite_schema` whose answer a later
    /// commit cannot take back), which autocommit gives a consistent view.
    pub(crate) fn run<T>(
        &self,
        op: &'static str,
        f: impl FnOnce(&Inner, &rusqlite::Connection) -> Result<T>,
    ) -> Result<T> {
        match self {
            Source::Db(inner) => {
                inner.check_read(op)?;
                inner.store.read_autocommit(|c| f(inner, c))
            }
            Source::Conn(i, c, _) => f(i, c),
        }
    }
}

/// A query over one collection, built step by step and run with [`Query::all`],
/// [`Query::first`] or [`Query::count`]. Made by `Database::query`,
/// `Snapshot::query` or `Txn::query`.
///
/// ```
/// # use keel_query::{Database, StoreOptions};
/// # use keel_schema::{Expr, Schema, SortKey};
/// # let dir = tempfile::tempdir().unwrap();
/// let schema = Schema::parse("table T { id: int (primary); n: int; } root_type T;", "t.fbs")?;
/// let db = Database::open(dir.path().join("q.db"), schema.clone(), StoreOptions::default())?;
/// let n = schema.reader("T").unwrap().path("n").unwrap();
/// let rows = db.query("T").filter(Expr::gt(n.clone(), 3)).order_by(SortKey::desc(n)).limit(10).all()?;
/// assert!(rows.is_empty());
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[must_use = "a query does nothing until all(), first() or count()"]
pub struct Query<'a> {
    pub(crate) src: Source<'a>,
    pub(crate) spec: Spec,
}

/// The data of a query (no connection): can move to another thread.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Spec {
    pub(crate) collection: String,
    pub(crate) filter: Option<Expr>,
    pub(crate) order: Vec<SortKey>,
    pub(crate) limit: Option<u64>,
    pub(crate) offset: u64,
}

impl<'a> Query<'a> {
    pub(crate) fn new(src: Source<'a>, collection: &str) -> Query<'a> {
        Query {
            src,
            spec: Spec {
                collection: collection.to_owned(),
                filter: None,
                order: Vec::new(),
                limit: None,
                offset: 0,
            },
        }
    }

    /// Keep objects matching `expr` (AND-ed with earlier filters). Only objects for
    /// which `expr` is *true* match; SQL's *unknown* (a comparison with an absent
    /// field) does not — see `docs/queries.md`.
    ///
    /// ```
    /// # use keel_query::{Database, StoreOptions};
    /// use keel_example_blog::blog::Post;
    /// # let dir = tempfile::tempdir().unwrap();
    /// # let db = Database::open_for::<Post>(dir.path().join("f.db"), StoreOptions::default())?;
    /// db.write(|t| t.insert(&Post::builder().id("a").priority(5).build())).wait()?;
    /// let q = db.fetch::<Post>().filter(Post::priority().gt(1)).filter(Post::rating().gt(2.0));
    /// assert_eq!(q.count()?, 0); // rating is absent: `rating > 2` is unknown
    /// # Ok::<(), keel_query::Error>(())
    /// ```
    pub fn filter(mut self, expr: Expr) -> Self {
        self.spec.filter = Some(match self.spec.filter.take() {
            Some(f) => f.and(expr),
            None => expr,
        });
        self
    }

    /// Add a sort key (earlier keys take precedence). NULLs sort first ascending and
    /// last descending; final ties go to the rowid, in the last key's direction.
    ///
    /// ```
    /// # use keel_query::{Database, StoreOptions};
    /// use keel_example_blog::blog::Post;
    /// # let dir = tempfile::tempdir().unwrap();
    /// # let db = Database::open_for::<Post>(dir.path().join("o.db"), StoreOptions::default())?;
    /// db.write(|t| {
    ///     t.insert(&Post::builder().id("a").priority(1).build())?;
    ///     t.insert(&Post::builder().id("b").priority(2).build())
    /// }).wait()?;
    /// let ids: Vec<String> = db.fetch::<Post>().order_by(Post::priority().desc()).all()?
    ///     .into_iter().map(|p| p.id.clone()).collect();
    /// assert_eq!(ids, ["b", "a"]);
    /// # Ok::<(), keel_query::Error>(())
    /// ```
    pub fn order_by(mut self, key: SortKey) -> Self {
        self.spec.order.push(key);
        self
    }

    /// At most `n` objects (applied after ordering; with [`Query::offset`] for paging).
    ///
    /// ```
    /// # use keel_query::{Database, StoreOptions};
    /// use keel_example_blog::blog::Post;
    /// # let dir = tempfile::tempdir().unwrap();
    /// # let db = Database::open_for::<Post>(dir.path().join("l.db"), StoreOptions::default())?;
    /// db.write(|t| { for i in 0..5 { t.insert(&Post::builder().id(format!("p{i}")).build())?; } Ok(()) }).wait()?;
    /// let page = db.fetch::<Post>().order_by(Post::id().asc()).limit(2).offset(2).all()?;
    /// assert_eq!(page.iter().map(|p| p.id.as_str()).collect::<Vec<_>>(), ["p2", "p3"]);
    /// # Ok::<(), keel_query::Error>(())
    /// ```
    pub fn limit(mut self, n: u64) -> Self {
        self.spec.limit = Some(n);
        self
    }

    /// Skip the first `n` objects.
    pub fn offset(mut self, n: u64) -> Self {
        self.spec.offset = n;
        self
    }

    /// The query as the scan (`query/scan.rs`) sees it.
    pub(crate) fn ask(&self) -> Ask<'_> {
        Ask {
            filter: self.spec.filter.as_ref(),
            order: &self.spec.order,
            offset: self.spec.offset,
            limit: self.spec.limit,
            as_of: match &self.src {
                Source::Conn(_, _, as_of) => *as_of,
                Source::Db(_) => None,
            },
        }
    }

    pub(crate) fn coll<'i>(&self, inner: &'i Inner, op: &'static str) -> Result<&'i Coll> {
        inner.coll(&self.spec.collection, op)
    }

    /// The SQL and its parameters (for inspection; values are always parameters,
    /// but `limit` and `offset` are written into the SQL as integers: SQLite
    /// compiles a statement again at every run once its LIMIT is a parameter):
    /// the whole query in SQL, with `keel_field(body, …)` for fields that have no
    /// column or index. A query whose filter reads such a field does not run it
    /// that way: SQLite answers the conjuncts on keys and indexed fields and keel
    /// evaluates the rest on each row's bytes (see [`Query::explain`]).
    ///
    /// ```
    /// # use keel_query::{Database, StoreOptions};
    /// # use keel_schema::{Expr, Schema};
    /// # let dir = tempfile::tempdir().unwrap();
    /// # let schema = Schema::parse("table T { id: int (primary); n: int (indexed); } root_type T;", "t.fbs")?;
    /// # let db = Database::open(dir.path().join("q.db"), schema.clone(), StoreOptions::default())?;
    /// let n = schema.reader("T").unwrap().path("n").unwrap();
    /// let (sql, params) = db.query("T").filter(Expr::eq(n, 7)).sql()?;
    /// assert!(sql.contains("\"f1\" = ?")); // the indexed field's column
    /// assert_eq!(params, vec![7.into()]);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn sql(&self) -> Result<(String, Vec<Value>)> {
        match &self.src {
            Source::Db(inner) => self.build(inner, false),
            Source::Conn(i, _, _) => self.build(i, false),
        }
    }

    fn build(&self, inner: &Inner, count: bool) -> Result<(String, Vec<Value>)> {
        self.build_with(
            inner,
            self.spec.filter.as_ref(),
            (!count).then_some(&self.spec.order[..]),
            true,
            count,
            false,
        )
    }

    /// The SQL for `filter` in `order` (`None`: no ORDER BY), with the spec's
    /// LIMIT/OFFSET if `paged`; `count` selects `count(*)` instead of the rows.
    /// `residual` adds the scan's residual filter as one more condition
    /// ([`scan::RESIDUAL_FN`]), for a [`scan::Plan`] that runs it in SQL.
    pub(crate) fn build_with(
        &self,
        inner: &Inner,
        filter: Option<&Expr>,
        order: Option<&[SortKey]>,
        paged: bool,
        count: bool,
        residual: bool,
    ) -> Result<(String, Vec<Value>)> {
        let c = self.coll(inner, "query")?;
        let table = inner
            .schema
            .table_reader(c.table)
            .ok_or_else(|| Error::UnknownCollection {
                op: "query",
                collection: self.spec.collection.clone(),
            })?;
        let mut comp = Compiler {
            table,
            collection: &c.name,
            key: &c.key_ids,
            indexes: &c.indexes,
            as_of: match &self.src {
                Source::Conn(_, _, as_of) => *as_of,
                Source::Db(_) => None,
            },
            search: c.search.as_ref(),
            params: Vec::new(),
        };
        // Relevance order: the rows come from the full-text index's matches,
        // joined to the table, each with its bm25 score (the first full-text
        // filter among the top-level AND parts ranks; the rest filter as usual).
        let ranked = order.is_some_and(|keys| keys.iter().any(SortKey::is_relevance));
        let mut from = c.ident.clone();
        let rest: Option<Expr>;
        let filter = if ranked {
            let mut parts = Vec::new();
            if let Some(f) = filter {
                conjuncts(f, &mut parts);
            }
            let Some(at) = parts.iter().position(|e| matches!(e, Expr::Matches { .. })) else {
                return Err(Error::InvalidSearch {
                    query: String::new(),
                    offset: 0,
                    message: "relevance order needs a full-text filter (`matches`/`search`) as one of the filter's top-level AND parts".into(),
                });
            };
            let Expr::Matches { path, query } = parts.remove(at) else {
                unreachable!("found above")
            };
            let (s, text) = comp.match_text(path.as_ref(), query)?;
            comp.params.push(Value::Text(text));
            rest = parts.into_iter().cloned().reduce(Expr::and);
            // Ranked by relevance alone, with a limit and no other filter: the
            // index ranks and cuts before the join, so only the rows shown are
            // read (otherwise SQLite joins every match to its row, then sorts).
            // The outer ORDER BY/LIMIT/OFFSET below still apply, unchanged.
            let cut = match (order, self.spec.limit) {
                (Some([key]), Some(limit)) if key.is_relevance() && rest.is_none() && paged => {
                    let n = limit.saturating_add(self.spec.offset);
                    let dir = if key.descending { "DESC" } else { "ASC" };
                    format!(
                        " ORDER BY {} {dir}, keel_r {dir} LIMIT {}",
                        RANK_COLUMN,
                        i64::try_from(n).unwrap_or(i64::MAX)
                    )
                }
                _ => String::new(),
            };
            from = format!(
                "(SELECT rowid AS keel_r, {} AS {} FROM {2} WHERE {2} MATCH ?{cut}) JOIN {3} ON {3}.rowid = keel_r",
                s.bm25(),
                RANK_COLUMN,
                s.ident,
                c.ident
            );
            rest.as_ref()
        } else {
            filter
        };
        let w = match (filter, residual) {
            (Some(e), false) => format!(" WHERE {}", comp.expr(e)?),
            (Some(e), true) => {
                format!(" WHERE ({}) AND {}(body)", comp.expr(e)?, scan::RESIDUAL_FN)
            }
            (None, true) => format!(" WHERE {}(body)", scan::RESIDUAL_FN),
            (None, false) => String::new(),
        };
        let mut tail = String::new();
        if let Some(keys) = order {
            tail.push_str(&comp.order(keys)?);
        }
        if paged && (self.spec.limit.is_some() || self.spec.offset > 0) {
            // Written in, not bound: SQLite re-compiles a statement whose LIMIT
            // parameter was bound again at its next run, whatever the value (it may
            // change the plan), so every run of a paged query, and every read of a
            // live window, paid a compile (tests/statement_reuse.rs).
            // Integers only, so nothing can be injected; a query per distinct page
            // size is one more statement in the cache.
            let limit = self
                .spec
                .limit
                .map_or(-1, |l| i64::try_from(l).unwrap_or(i64::MAX));
            let offset = i64::try_from(self.spec.offset).unwrap_or(i64::MAX);
            tail.push_str(&format!(" LIMIT {limit} OFFSET {offset}"));
        }
        let sql = if count {
            if tail.is_empty() {
                format!("SELECT count(*) FROM {from}{w}")
            } else {
                format!("SELECT count(*) FROM (SELECT 1 FROM {from}{w}{tail})")
            }
        } else {
            format!("SELECT rowid, {} FROM {from}{w}{tail}", c.body.select())
        };
        Ok((sql, comp.params))
    }

    /// Hand each matching row, in order, to `sink` — its rowid and its bytes,
    /// borrowed from SQLite while it steps (copied only where keel sorts the
    /// matches itself) — until `sink` returns `Ok(false)` or an error.
    pub(crate) fn each(
        &self,
        op: &'static str,
        first: bool,
        sink: &mut dyn FnMut(i64, &[u8]) -> Result<bool>,
    ) -> Result<()> {
        self.src.run(op, |inner, conn| {
            let c = self.coll(inner, op)?;
            if inner.unborn(conn, c)? {
                return Ok(());
            }
            if let Some(plan) = scan::plan(&inner.schema, c, &self.ask())? {
                // A filter on a field without a column: evaluated on the bytes.
                let (sql, params) = self.build_with(
                    inner,
                    plan.sql_filter.as_ref(),
                    plan.sql_order.as_deref(),
                    false,
                    false,
                    plan.in_sql(),
                )?;
                return plan.each(conn, c, op, (&sql, &params), &self.ask(), first, sink);
            }
            let (mut sql, mut params) = self.build(inner, false)?;
            if first && self.spec.limit.is_none() && self.spec.offset == 0 {
                sql.push_str(" LIMIT 1");
            } else if first {
                // Keep the caller's offset; cap the limit at one.
                if let Some(Value::Int(l)) = params.iter_mut().rev().nth(1) {
                    *l = if *l < 0 { 1 } else { (*l).min(1) };
                }
            }
            select_each(conn, c, op, &sql, &params, sink)
        })
    }

    /// The matching rows, each checked to open (see [`check_stored`]).
    fn rows(&self, op: &'static str, first: bool) -> Result<Vec<StoredObject>> {
        let mut out = Vec::new();
        self.each(op, first, &mut |rowid, bytes| {
            out.push(StoredObject {
                rowid,
                bytes: bytes.to_vec(),
            });
            Ok(true)
        })?;
        let inner = self.src.inner();
        let c = self.coll(inner, op)?;
        let t = inner.table(c)?;
        for r in &out {
            check_stored(t, c, op, r)?;
        }
        Ok(out)
    }

    /// Every matching object, in order. keel verified each object's bytes against
    /// the schema when they were written, so reading does not walk them again: it
    /// checks that each opens (a row damaged since, e.g. by another SQLite tool, is
    /// an [`Error::Decode`] naming its rowid), and every reader of the bytes
    /// (generated types, [`keel_schema::Object`], the Swift and Kotlin bindings)
    /// is bounds-checked, so deeper damage is a decode error there, never a crash.
    /// `keel check` verifies every row in full.
    pub fn all(self) -> Result<Vec<StoredObject>> {
        self.rows("fetch", false)
    }

    /// The first matching object, if any.
    pub fn first(self) -> Result<Option<StoredObject>> {
        Ok(self.rows("fetch first", true)?.into_iter().next())
    }

    /// The number of matching objects (after `limit`/`offset`, if set).
    pub fn count(self) -> Result<u64> {
        self.src.run("count", |inner, conn| {
            let (sql, params) = self.build(inner, true)?;
            let c = self.coll(inner, "count")?;
            if inner.unborn(conn, c)? {
                return Ok(0);
            }
            if let Some(plan) = scan::plan(&inner.schema, c, &self.ask())? {
                let (sql, params) = self.build_with(
                    inner,
                    plan.sql_filter.as_ref(),
                    None,
                    false,
                    false,
                    plan.in_sql(),
                )?;
                return plan.count(conn, c, (&sql, &params), &self.ask());
            }
            let mut st = conn
                .prepare_cached(&sql)
                .map_err(|e| Error::sqlite("count", &c.name, e))?;
            let n: i64 = st
                .query_row(rusqlite::params_from_iter(params.iter().map(Param)), |r| {
                    r.get(0)
                })
                .map_err(|e| Error::sqlite("count", &c.name, e))?;
            Ok(u64::try_from(n).unwrap_or(0))
        })
    }

    /// SQLite's `EXPLAIN QUERY PLAN` for this query, one line per step (for tests
    /// and tuning: shows whether an index is used). When part of the filter runs on
    /// the rows' bytes (a field without an index), the plan is that of the SQL that
    /// feeds it, followed by a `keel: …` line naming what keel evaluates (and
    /// whether it sorts the matches itself).
    pub fn explain(self) -> Result<Vec<String>> {
        self.src.run("explain", |inner, conn| {
            let c = self.coll(inner, "explain")?;
            let plan = scan::plan(&inner.schema, c, &self.ask())?;
            let (sql, params) = match &plan {
                Some(p) => self.build_with(
                    inner,
                    p.sql_filter.as_ref(),
                    p.sql_order.as_deref(),
                    false,
                    false,
                    p.in_sql(),
                )?,
                None => self.build(inner, false)?,
            };
            let mut st = conn
                .prepare(&format!("EXPLAIN QUERY PLAN {sql}"))
                .map_err(|e| Error::sqlite("explain", &c.name, e))?;
            let rows = st
                .query_map(rusqlite::params_from_iter(params.iter().map(Param)), |r| {
                    r.get::<_, String>(3)
                })
                .map_err(|e| Error::sqlite("explain", &c.name, e))?;
            let mut lines = rows
                .collect::<rusqlite::Result<Vec<_>>>()
                .map_err(|e| Error::sqlite("explain", &c.name, e))?;
            if let Some(p) = plan {
                lines.push(p.describe());
            }
            Ok(lines)
        })
    }
}

impl Query<'_> {
    /// Run `f` with this query on the database's fetch pool (a query bound to a
    /// snapshot or transaction is refused: use the blocking call).
    fn spawn<T: Send + 'static>(self, f: fn(Query<'static>) -> Result<T>) -> Task<T> {
        match self.src {
            Source::Db(db) => {
                let spec = self.spec;
                let handle = Arc::clone(&db);
                Task::on_pool(&handle, "async fetch", move || {
                    f(Query {
                        src: Source::Db(db),
                        spec,
                    })
                })
            }
            Source::Conn(i, _, _) => Task::ready(Err(Error::Unsupported {
                op: "async fetch inside a snapshot or transaction",
                hint: "use the blocking call; it reads that snapshot's own view",
                path: i.path().to_path_buf(),
            })),
        }
    }

    /// [`Query::all`] on a keel thread; the future resolves with the result.
    pub fn all_async(self) -> Task<Vec<StoredObject>> {
        self.spawn(|q| q.all())
    }

    /// [`Query::count`] on a keel thread.
    pub fn count_async(self) -> Task<u64> {
        self.spawn(|q| q.count())
    }
}

/// The top-level conjuncts of `e` (`a AND b AND …`).
fn conjuncts<'e>(e: &'e Expr, out: &mut Vec<&'e Expr>) {
    match e {
        Expr::And(a, b) => {
            conjuncts(a, out);
            conjuncts(b, out);
        }
        other => out.push(other),
    }
}

/// Run `sql` (selecting `rowid` and `c.body`'s columns) and hand each row to `sink` with its
/// bytes borrowed from SQLite (restored, where the body left its key out: see
/// `BodyColumns::read`), until `sink` returns `Ok(false)`.
pub(crate) fn select_each(
    conn: &rusqlite::Connection,
    c: &Coll,
    op: &'static str,
    sql: &str,
    params: &[Value],
    sink: &mut dyn FnMut(i64, &[u8]) -> Result<bool>,
) -> Result<()> {
    let err = |e| Error::sqlite(op, &c.name, e);
    let mut st = conn.prepare_cached(sql).map_err(err)?;
    let mut rows = st
        .query(rusqlite::params_from_iter(params.iter().map(Param)))
        .map_err(err)?;
    let mut scratch = Vec::new();
    while let Some(r) = rows.next().map_err(err)? {
        let rowid: i64 = r.get(0).map_err(err)?;
        let bytes = c.body.read(r, 1, &mut scratch).map_err(err)?;
        if !sink(rowid, bytes)? {
            break;
        }
    }
    Ok(())
}

/// A typed query for generated type `R`: `db.fetch::<Post>().filter(..).all()`.
///
/// ```
/// # use keel_query::{Database, StoreOptions};
/// use keel_example_blog::blog::Post;
/// # let dir = tempfile::tempdir().unwrap();
/// let db = Database::open_for::<Post>(dir.path().join("f.db"), StoreOptions::default())?;
/// let top: Vec<Post> = db.fetch::<Post>()
///     .filter(Post::priority().gt(2))
///     .order_by(Post::priority().desc())
///     .limit(10)
///     .all()?;
/// assert!(top.is_empty());
/// # Ok::<(), keel_query::Error>(())
/// ```
#[must_use = "a fetch does nothing until all(), first() or count()"]
pub struct Fetch<'a, R: Record> {
    pub(crate) q: Query<'a>,
    _r: PhantomData<fn() -> R>,
}

impl<'a, R: Record> Fetch<'a, R> {
    pub(crate) fn new(src: Source<'a>) -> Self {
        Fetch {
            q: Query::new(src, R::COLLECTION),
            _r: PhantomData,
        }
    }

    /// See [`Query::filter`].
    pub fn filter(self, expr: Expr) -> Self {
        Fetch {
            q: self.q.filter(expr),
            _r: PhantomData,
        }
    }
    /// See [`Query::order_by`].
    pub fn order_by(self, key: SortKey) -> Self {
        Fetch {
            q: self.q.order_by(key),
            _r: PhantomData,
        }
    }
    /// See [`Query::limit`].
    pub fn limit(self, n: u64) -> Self {
        Fetch {
            q: self.q.limit(n),
            _r: PhantomData,
        }
    }
    /// See [`Query::offset`].
    pub fn offset(self, n: u64) -> Self {
        Fetch {
            q: self.q.offset(n),
            _r: PhantomData,
        }
    }

    /// The untyped query.
    pub fn into_query(self) -> Query<'a> {
        self.q
    }

    /// The matching objects, each decoded from the bytes SQLite holds while it
    /// steps (see [`decode_row`]), without a copy.
    fn decoded(&self, op: &'static str, first: bool) -> Result<Vec<R>> {
        let mut out = Vec::new();
        self.q.each(op, first, &mut |rowid, bytes| {
            out.push(decode_row::<R>(op, rowid, bytes)?);
            Ok(true)
        })?;
        Ok(out)
    }

    /// Every matching object, decoded.
    pub fn all(self) -> Result<Vec<R>> {
        self.decoded("fetch", false)
    }

    /// The first matching object.
    pub fn first(self) -> Result<Option<R>> {
        Ok(self.decoded("fetch first", true)?.into_iter().next())
    }

    /// Number of matching objects.
    pub fn count(self) -> Result<u64> {
        self.q.count()
    }
}

impl<R: Record> Fetch<'_, R> {
    fn wrap(q: Query<'static>) -> Fetch<'static, R> {
        Fetch { q, _r: PhantomData }
    }
    /// [`Fetch::all`] on a keel thread.
    pub fn all_async(self) -> Task<Vec<R>> {
        self.q.spawn(|q| Self::wrap(q).all())
    }
    /// [`Fetch::first`] on a keel thread.
    pub fn first_async(self) -> Task<Option<R>> {
        self.q.spawn(|q| Self::wrap(q).first())
    }
    /// [`Fetch::count`] on a keel thread.
    pub fn count_async(self) -> Task<u64> {
        self.q.spawn(|q| q.count())
    }
}

/// Point lookups by key, shared by [`Database`](crate::db::database::Database), [`Snapshot`](crate::db::database::Snapshot),
/// [`Txn`](crate::txn::transaction::Txn) and the subscription hub.
impl Inner {
    /// Look an object up by (checked) key on `conn`, handing its rowid and bytes
    /// — borrowed from SQLite, not copied — to `f`.
    fn get_with<T>(
        &self,
        conn: &rusqlite::Connection,
        c: &Coll,
        op: &'static str,
        key: &[Value],
        f: impl FnOnce(i64, &[u8]) -> Result<T>,
    ) -> Result<Option<T>> {
        let key = c.check_key_ref(op, key)?;
        if self.unborn(conn, c)? {
            return Ok(None);
        }
        let err = |e| Error::sqlite(op, &c.name, e);
        let mut st = conn.prepare_cached(&c.sql_get).map_err(err)?;
        let mut rows = st
            .query(rusqlite::params_from_iter(key.iter().map(Param)))
            .map_err(err)?;
        let Some(r) = rows.next().map_err(err)? else {
            return Ok(None);
        };
        let rowid: i64 = r.get(0).map_err(err)?;
        body::with_scratch(|scratch| f(rowid, c.body.read_found(r, &key, scratch).map_err(err)?))
            .map(Some)
    }

    /// Look an object up by (checked) key on `conn`; `check`: see [`check_stored`].
    pub(crate) fn get_in(
        &self,
        conn: &rusqlite::Connection,
        c: &Coll,
        op: &'static str,
        key: &[Value],
        check: bool,
    ) -> Result<Option<StoredObject>> {
        self.get_with(conn, c, op, key, |rowid, bytes| {
            let r = StoredObject {
                rowid,
                bytes: bytes.to_vec(),
            };
            if check {
                check_stored(self.table(c)?, c, op, &r)?;
            }
            Ok(r)
        })
    }

    /// Look up the `R` with (checked) key `key` on `conn`, decoded straight from
    /// the bytes SQLite holds (see [`decode_row`]).
    pub(crate) fn get_typed<R: Record>(
        &self,
        conn: &rusqlite::Connection,
        c: &Coll,
        op: &'static str,
        key: &[Value],
    ) -> Result<Option<R>> {
        self.get_with(conn, c, op, key, |rowid, bytes| {
            decode_row::<R>("decode", rowid, bytes)
        })
    }
}

/// The read-side check of a stored object's bytes: they open as an object of the
/// collection's table (root offset, vtable and table within the buffer).
///
/// Bytes are verified once, on the way in (`insert_bytes` and friends run the
/// full verifier); a read does not walk every row again. What a row can have gone
/// through since is a write by another tool: garbage fails here, and damage deeper
/// in fails the bounds-checked read of the field that meets it (typed decode:
/// [`Record::decode_stored`]) — a typed [`Error::Decode`], never a panic.
pub(crate) fn check_stored(
    t: keel_schema::DynamicTable<'_>,
    c: &Coll,
    op: &'static str,
    r: &StoredObject,
) -> Result<()> {
    t.open(&r.bytes)
        .map(|_| ())
        .map_err(|source| Error::Decode {
            op,
            collection: c.name.clone(),
            rowid: r.rowid,
            source,
        })
}

/// Decode row `rowid`'s stored bytes as an `R` ([`Record::decode_stored`]: keel
/// verified them when it wrote them; damage since is an [`Error::Decode`] naming
/// the row, never a panic).
pub(crate) fn decode_row<R: Record>(op: &'static str, rowid: i64, bytes: &[u8]) -> Result<R> {
    // Under the decode budget: a row another tool rewrote into an amplification
    // bomb is an error, not gigabytes.
    keel_schema::wire::decode_stored::<R>(bytes).map_err(|source| Error::Decode {
        op,
        collection: R::COLLECTION.to_owned(),
        rowid,
        source,
    })
}
