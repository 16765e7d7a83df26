//! Reading through references: [`Fetch::including`] prefetches the
//! objects a `(references: …)` field names in **one batched read per
//! relation** (no N+1) — filtered by them with [`Including::where_related`],
//! counted with [`Including::counts`] — [`Fetch::including_inverse`] reads
//! the way back along an `inverse:`, and [`Fetch::filter_through`] keeps the
//! objects whose referenced object matches a filter, resolved to keys once.
//!
//! Both run on one connection: through a [`Database`](crate::db::database::Database), inside
//! one read transaction, so the referring and the referenced objects come from
//! the same moment; in a snapshot or a write transaction, on its connection.

use std::collections::HashMap;

use keel_schema::dynamic::ValueRef;
use keel_schema::{Expr, FieldPath, Inverse, PathStep, Record, Relation, Through, Value};

use crate::base::error::{Error, Result};
use crate::base::ref_keys::{column_key, ByKey, K};
use crate::base::sql_value::Param;
use crate::base::sql_value::SqlValue;
use crate::engine::Inner;
use crate::layout::links::Incoming;
use crate::layout::links::Outgoing;
use crate::layout::table;
use crate::layout::table::Coll;
use crate::query::eval;
use crate::query::eval::Filter;
use crate::query::fetch;
use crate::query::fetch::{decode_row, Fetch, Query, Source, Spec, StoredObject};

/// Most keys one batched read binds (SQLite allows 32,766 parameters); more
/// distinct keys than this take one more read per chunk.
const BATCH: usize = 30_000;

/// Each referring object with the keys it holds and what they name (`N`, a
/// [`Named`]: for each key the object it names, `None` for a dangling key; or
/// only the first found).
pub(crate) type Keyed<R, N> = Vec<KeyedRow<R, N>>;

/// One row of [`Keyed`]: the object, the named objects, the keys (indexes
/// into the read's distinct keys).
pub(crate) type KeyedRow<R, N> = (R, N, Keys);

/// How a row of an `including` read holds the objects its keys name, built
/// from them in key order: each key's (`Vec<Option<T>>`, for live lists and
/// [`Including::all_many`]) or the first found (`Option<T>`, a to-one
/// [`Including::all`]: no vector per row).
pub(crate) trait Named<T>: Sized {
    /// From the objects the row's keys name, in key order.
    fn from_hits<'t>(hits: impl Iterator<Item = Option<&'t T>>) -> Self
    where
        T: 't;
}

impl<T: Clone> Named<T> for Vec<Option<T>> {
    fn from_hits<'t>(hits: impl Iterator<Item = Option<&'t T>>) -> Self
    where
        T: 't,
    {
        hits.map(|h| h.cloned()).collect()
    }
}

impl<T: Clone> Named<T> for Option<T> {
    fn from_hits<'t>(mut hits: impl Iterator<Item = Option<&'t T>>) -> Self
    where
        T: 't,
    {
        hits.find_map(|h| h.cloned())
    }
}

/// The keys one referring row holds, as indexes into its read's distinct
/// keys: none, one (a to-one reference: no allocation per row), or several,
/// in the vector's order.
#[derive(Debug, Clone)]
pub(crate) enum Keys {
    None,
    One(usize),
    Many(Vec<usize>),
}

impl Keys {
    /// The indexes, in order.
    pub(crate) fn iter(&self) -> impl Iterator<Item = usize> + '_ {
        let (one, many): (Option<usize>, &[usize]) = match self {
            Keys::None => (None, &[]),
            Keys::One(i) => (Some(*i), &[]),
            Keys::Many(v) => (None, v),
        };
        one.into_iter().chain(many.iter().copied())
    }
}

/// A typed fetch with the objects one reference field names, read in one
/// batched query: made by [`Fetch::including`].
#[must_use = "a fetch does nothing until all() or all_many()"]
pub struct Including<'a, R: Record, T: Record> {
    pub(crate) fetch: Fetch<'a, R>,
    pub(crate) rel: Relation<R, T>,
    /// [`Including::order_by_related`]: a field of `T` and whether descending.
    pub(crate) related_order: Option<(FieldPath, bool)>,
    /// [`Including::where_related`]: the condition on the referenced objects.
    pub(crate) related_filter: Option<Expr>,
}

/// The key path of collection `c` (single-field keys only: references require
/// them).
fn key_path(inner: &Inner, c: &Coll, op: &'static str) -> Result<FieldPath> {
    let t = inner.table(c)?;
    match c.key_ids.as_slice() {
        [id] => {
            let name = t.table().field_by_id(*id).map_or("", |f| f.name.as_str());
            Ok(FieldPath::new(vec![PathStep::Field {
                id: *id,
                name: name.to_owned().into(),
            }]))
        }
        _ => Err(Error::TypeMismatch {
            op,
            collection: c.name.clone(),
            message: "a referenced collection needs a primary key of one field".into(),
        }),
    }
}

/// Run `f` with a source on one connection (see the module docs).
fn on_one_conn<T>(
    src: &Source<'_>,
    op: &'static str,
    f: impl FnOnce(&Inner, &rusqlite::Connection, Option<u64>) -> Result<T>,
) -> Result<T> {
    match src {
        Source::Db(inner) => {
            inner.check_read(op)?;
            let as_of = table::ready_epoch();
            inner.store.read(|conn| f(inner, conn, Some(as_of)))
        }
        Source::Conn(inner, conn, as_of) => f(inner, conn, *as_of),
    }
}

/// The keys `path` holds in `bytes` (one for a to-one field, the vector's
/// elements for a to-many one), absent ones left out.
fn keys_in(
    inner: &Inner,
    c: &Coll,
    op: &'static str,
    path: &FieldPath,
    to_many: bool,
    bytes: &[u8],
) -> Result<Vec<Value>> {
    let obj = inner
        .table(c)?
        .open(bytes)
        .map_err(|e| Error::invalid_object(op, &c.name, e))?;
    if to_many {
        let id = path.steps().first().map_or(0, |s| s.id());
        obj.elements(id)
            .map_err(|e| Error::invalid_object(op, &c.name, e))
    } else {
        let v = obj.get(path);
        Ok(if v.is_null() { Vec::new() } else { vec![v] })
    }
}

/// The objects of `target` whose keys are `keys`, by key: one read per
/// [`BATCH`] keys.
fn fetch_by_keys<T: Record>(
    inner: &Inner,
    conn: &rusqlite::Connection,
    target: &Coll,
    keys: &[Value],
    order: Option<&FieldPath>,
    keep: Option<&Filter>,
) -> Result<ByKey<(T, Value, bool)>> {
    // References name single-field keys, held in the key column `k0`.
    key_path(inner, target, "including")?;
    let reader = inner.table(target)?;
    let order = match order {
        Some(p) => Some(reader.resolve(p).map_err(|e| Error::UnknownField {
            op: "including",
            collection: target.name.clone(),
            message: e.to_string(),
        })?),
        None => None,
    };
    let mut out = ByKey::default();
    let columns = format!("rowid, {}", target.body.select());
    by_keys(inner, conn, target, keys, &columns, &mut |sql, params| {
        fetch::select_each(
            conn,
            target,
            "including",
            sql,
            params,
            &mut |rowid, bytes| {
                let t = decode_row::<T>("including", rowid, bytes)?;
                // The value `order_by_related` sorts by, read from the same bytes.
                let v = match &order {
                    Some(rp) => reader
                        .open(bytes)
                        .map_or(Value::Null, |o| o.get_resolved(rp)),
                    None => Value::Null,
                };
                // Whether it matches `where_related`'s condition (SQL's: only true).
                let matches = keep.is_none_or(|f| f.eval_bytes(bytes) == Some(true));
                if let Some(k) = t.primary_key().into_iter().next() {
                    out.insert(k, (t, v, matches));
                }
                Ok(true)
            },
        )
    })?;
    Ok(out)
}

/// Run `SELECT {columns} FROM target WHERE k0 IN (…)` over `keys`, one
/// statement per [`BATCH`] keys, handing `run` each statement's SQL and
/// parameters. The rows come in no particular order: the callers build maps
/// by key, and an `ORDER BY` would make SQLite copy every matching row, body
/// and all, into a temporary b-tree to sort it first. A target whose table
/// does not exist yet matches nothing.
fn by_keys(
    inner: &Inner,
    conn: &rusqlite::Connection,
    target: &Coll,
    keys: &[Value],
    columns: &str,
    run: &mut dyn FnMut(&str, &[Value]) -> Result<()>,
) -> Result<()> {
    if keys.is_empty() || inner.unborn(conn, target)? {
        return Ok(());
    }
    for chunk in keys.chunks(BATCH) {
        let marks = vec!["?"; chunk.len()].join(",");
        let sql = format!(
            "SELECT {columns} FROM {} WHERE k0 IN ({marks})",
            target.ident
        );
        run(&sql, chunk)?;
    }
    Ok(())
}

/// `where_related`'s condition, compiled for the related collection `c`.
fn related_filter_on(inner: &Inner, c: &Coll, related: Option<&Expr>) -> Result<Option<Filter>> {
    related
        .map(|e| Filter::with_schema(std::sync::Arc::clone(&inner.schema), &c.name, e))
        .transpose()
}

/// A read filtered or ordered through a reference reads every match and cuts
/// the window itself: with `cut`, `spec`'s offset and limit are taken off and
/// returned, for [`cut`] after the filter and the order.
fn take_window(spec: &mut Spec, cut: bool) -> Option<(u64, Option<u64>)> {
    cut.then(|| {
        let w = (spec.offset, spec.limit);
        spec.offset = 0;
        spec.limit = None;
        w
    })
}

/// The window `(offset, limit)` of `items`.
fn cut<X>(items: impl Iterator<Item = X>, (offset, limit): (u64, Option<u64>)) -> Vec<X> {
    let skip = usize::try_from(offset).unwrap_or(usize::MAX);
    let take = limit.map_or(usize::MAX, |l| usize::try_from(l).unwrap_or(usize::MAX));
    items.skip(skip).take(take).collect()
}

/// `rows` whose related objects include one `keep` matches (SQL's: only
/// true), cut to `window` — or all of them without a filter.
fn kept_in_window(
    rows: impl Iterator<Item = Included>,
    keep: Option<&Filter>,
    window: Option<(u64, Option<u64>)>,
) -> Vec<Included> {
    let (Some(keep), Some(window)) = (keep, window) else {
        return rows.collect();
    };
    cut(
        rows.filter(|i| {
            i.related
                .iter()
                .any(|r| keep.eval_bytes(&r.bytes) == Some(true))
        }),
        window,
    )
}

/// What [`read_referrers`] reads: each row with its keys (indexes into the
/// second part), and every distinct key.
type Referrers<X> = (Vec<(X, Keys)>, Vec<Value>);

/// The reference field a read takes its keys from: its path in the referring
/// collection, whether it holds a vector of keys, and for a typed to-one read
/// the generated reader of the key from the decoded object
/// ([`Relation::key_reader`]), which spares reading the bytes again.
struct RefField<'p, X> {
    path: &'p FieldPath,
    to_many: bool,
    typed: Option<fn(&X) -> ValueRef<'_>>,
}

impl<'p, X> RefField<'p, X> {
    /// A field whose keys are read from the objects' bytes.
    fn bytes(path: &'p FieldPath, to_many: bool) -> Self {
        RefField {
            path,
            to_many,
            typed: None,
        }
    }
}

/// The objects `here` matches, each with the keys its reference field `by`
/// holds (one or none to-one, a vector's in order to-many), and every distinct
/// key once, in first-seen order: the first of an `including` read's two reads.
fn read_referrers<X>(
    inner: &Inner,
    c: &Coll,
    here: &Query<'_>,
    by: RefField<'_, X>,
    op: &'static str,
    row: &mut dyn FnMut(i64, &[u8]) -> Result<X>,
) -> Result<Referrers<X>> {
    // Resolved once: each row then costs one vtable lookup for its key.
    let reader = inner.table(c)?;
    let resolved = if by.to_many || by.typed.is_some() {
        None
    } else {
        Some(reader.resolve(by.path).map_err(|e| Error::UnknownField {
            op,
            collection: c.name.clone(),
            message: e.to_string(),
        })?)
    };
    let mut rows: Vec<(X, Keys)> = Vec::new();
    let mut wanted: Vec<Value> = Vec::new();
    // Each distinct key's index in `wanted`: a key seen before costs one
    // lookup of the bytes it borrows, no allocation.
    let mut seen: ByKey<usize> = ByKey::default();
    let mut index_of = |k: Value, seen: &mut ByKey<usize>| -> usize {
        if let Some(i) = seen.get(&k) {
            return *i;
        }
        seen.insert(k.clone(), wanted.len());
        wanted.push(k);
        wanted.len() - 1
    };
    // A to-one key: absent, seen before (no allocation) or new.
    fn one(
        v: ValueRef<'_>,
        seen: &mut ByKey<usize>,
        index_of: &mut impl FnMut(Value, &mut ByKey<usize>) -> usize,
    ) -> Keys {
        match v {
            ValueRef::Null => Keys::None,
            v => match seen.get_ref(&v) {
                Some(i) => Keys::One(*i),
                None => Keys::One(index_of(v.to_value(), seen)),
            },
        }
    }
    here.each(op, false, &mut |rowid, bytes| {
        if let Some(key_of) = by.typed {
            let x = row(rowid, bytes)?;
            let keys = one(key_of(&x), &mut seen, &mut index_of);
            rows.push((x, keys));
            return Ok(true);
        }
        let keys = match &resolved {
            Some(rp) => {
                let obj = reader
                    .open(bytes)
                    .map_err(|e| Error::invalid_object(op, &c.name, e))?;
                one(
                    obj.get_ref(rp).unwrap_or(ValueRef::Null),
                    &mut seen,
                    &mut index_of,
                )
            }
            None => Keys::Many(
                keys_in(inner, c, op, by.path, true, bytes)?
                    .into_iter()
                    .map(|k| index_of(k, &mut seen))
                    .collect(),
            ),
        };
        rows.push((row(rowid, bytes)?, keys));
        Ok(true)
    })?;
    Ok((rows, wanted))
}

/// Each row with how many of its keys (indexes into `wanted`) `found` holds.
fn counted<X>(rows: Vec<(X, Keys)>, wanted: &[Value], found: &ByKey<()>) -> Vec<(X, u64)> {
    let present: Vec<bool> = wanted.iter().map(|k| found.get(k).is_some()).collect();
    rows.into_iter()
        .map(|(x, keys)| {
            let n = keys.iter().filter(|i| present[*i]).count();
            (x, u64::try_from(n).unwrap_or(u64::MAX))
        })
        .collect()
}

/// Which of `keys` name an object of `target`: its key column only, no
/// object is read.
fn existing_keys(
    inner: &Inner,
    conn: &rusqlite::Connection,
    target: &Coll,
    keys: &[Value],
    op: &'static str,
) -> Result<ByKey<()>> {
    let mut out = ByKey::default();
    let err = |e| Error::sqlite(op, &target.name, e);
    by_keys(inner, conn, target, keys, "k0", &mut |sql, params| {
        let mut st = conn.prepare_cached(sql).map_err(err)?;
        let mut rows = st
            .query(rusqlite::params_from_iter(params.iter().map(Param)))
            .map_err(err)?;
        while let Some(r) = rows.next().map_err(err)? {
            if let Some(k) = column_key(r.get_ref(0).map_err(err)?) {
                out.insert(k, ());
            }
        }
        Ok(())
    })?;
    Ok(out)
}

impl<'a, R: Record, T: Record> Including<'a, R, T> {
    /// Every matching `R` with the keys its reference holds and the object
    /// each names, in the fetch's order: two reads in all (the `R`s, then every
    /// referenced `T` at once). A key naming no object (a dangling reference)
    /// names `None`.
    pub(crate) fn run_keyed<N: Named<T>>(self) -> Result<Keyed<R, N>> {
        Ok(self.run_keyed_all()?.0)
    }

    /// [`run_keyed`](Self::run_keyed), and every key held by an `R` the fetch's
    /// filter matches, inside the window or not, kept by
    /// [`where_related`](Self::where_related) or not: what a live list must
    /// watch, since a change of any of those objects can move a row in.
    pub(crate) fn run_keyed_all<N: Named<T>>(self) -> Result<(Keyed<R, N>, Vec<Value>)> {
        let Including {
            fetch,
            rel,
            related_order,
            related_filter,
        } = self;
        let q = fetch.into_query();
        let op = "including";
        on_one_conn(&q.src, op, |inner, conn, as_of| {
            let c = inner.coll(R::COLLECTION, op)?;
            let target = inner.coll(rel.target(), op)?;
            let mut spec: Spec = q.spec.clone();
            // Ordered by or filtered through a referenced field: every match is
            // read, sorted and kept here, then the window is cut.
            let window = take_window(
                &mut spec,
                related_order.is_some() || related_filter.is_some(),
            );
            let here = Query {
                src: Source::Conn(inner, conn, as_of),
                spec,
            };
            let (rows, wanted) = read_referrers(
                inner,
                c,
                &here,
                RefField {
                    path: rel.path(),
                    to_many: rel.to_many(),
                    typed: rel.key_reader().filter(|_| !rel.to_many()),
                },
                op,
                &mut |rowid, bytes| decode_row::<R>(op, rowid, bytes),
            )?;
            let keep = related_filter_on(inner, target, related_filter.as_ref())?;
            let found: ByKey<(T, Value, bool)> = if wanted.is_empty() {
                ByKey::default()
            } else {
                fetch_by_keys(
                    inner,
                    conn,
                    target,
                    &wanted,
                    related_order.as_ref().map(|(p, _)| p),
                    keep.as_ref(),
                )?
            };
            // Each row with the value `order_by_related` sorts it by.
            // What each distinct key names, looked up once.
            let at: Vec<Option<&(T, Value, bool)>> = wanted.iter().map(|k| found.get(k)).collect();
            let mut out: Vec<(KeyedRow<R, N>, Value)> = rows
                .into_iter()
                .filter_map(|(r, keys)| {
                    let found = || keys.iter().filter_map(|i| at[i]);
                    // Filtered: the rows naming at least one matching object.
                    if keep.is_some() && !found().any(|(_, _, m)| *m) {
                        return None;
                    }
                    let v = found().next().map_or(Value::Null, |(_, v, _)| v.clone());
                    let ts = N::from_hits(keys.iter().map(|i| at[i].map(|(t, _, _)| t)));
                    Some(((r, ts, keys), v))
                })
                .collect();
            if let Some((offset, limit)) = window {
                // SQL's order (absent first ascending); stable, so equal values
                // keep the fetch's own order.
                let desc = related_order.as_ref().map(|(_, d)| *d);
                out.sort_by(|(_, a), (_, b)| {
                    let o = eval::order_cmp(SqlValue::from_value(a), SqlValue::from_value(b));
                    match desc {
                        None => std::cmp::Ordering::Equal,
                        Some(true) => o.reverse(),
                        Some(false) => o,
                    }
                });
                let rows = cut(out.into_iter().map(|(x, _)| x), (offset, limit));
                return Ok((rows, wanted));
            }
            Ok((out.into_iter().map(|(x, _)| x).collect(), wanted))
        })
    }

    /// Order the result by the field `field` of the referenced object (to-one:
    /// the object; to-many: the first one), ascending or `descending`, as SQL
    /// orders (an absent object or field first when ascending). Equal values
    /// keep the fetch's own order; the fetch's `limit` and `offset` apply after
    /// this order. Every match of the fetch is read to sort it.
    ///
    /// ```
    /// # use keel_query::{Database, StoreOptions};
    /// use keel_example_blog::rel::{Author, Post};
    /// # let dir = tempfile::tempdir().unwrap();
    /// # let db = Database::open_for::<Post>(dir.path().join("o.db"), StoreOptions::default())?;
    /// db.write(|t| {
    ///     t.insert(&Author::builder().id("z").name("Zoe").build())?;
    ///     t.insert(&Author::builder().id("a").name("Ada").build())?;
    ///     t.insert(&Post::builder().id("p1").author("z").build())?;
    ///     t.insert(&Post::builder().id("p2").author("a").build())
    /// }).wait()?;
    /// let rows = db.fetch::<Post>().including(Post::author_ref())
    ///     .order_by_related(Author::name(), false)
    ///     .all()?;
    /// assert_eq!(rows[0].0.id, "p2");
    /// # Ok::<(), keel_query::Error>(())
    /// ```
    pub fn order_by_related<U>(
        mut self,
        field: keel_schema::Field<T, U>,
        descending: bool,
    ) -> Self {
        self.related_order = Some((field.into_path(), descending));
        self
    }

    /// Keep the objects whose referenced object matches `filter`, an [`Expr`]
    /// over `T`'s fields (`Author::name().eq("Ada")`): to-one, the object it
    /// names; to-many, at least one of them (every one is still shown). The
    /// referenced objects are read with the rest, in the same two reads;
    /// the fetch's `limit` and `offset` apply after this filter, and every
    /// match of the fetch is read to apply it. Unlike
    /// [`Fetch::filter_through`], which turns the condition into keys once,
    /// this one is evaluated on every read, so its live form
    /// ([`subscribe`](Self::subscribe)) follows renames: an author renamed
    /// into the condition brings their posts in, one renamed out takes them
    /// away. SQL's logic: a condition that is unknown (a `NULL` field) does not
    /// match.
    ///
    /// ```
    /// # use keel_query::{Database, StoreOptions};
    /// use keel_example_blog::rel::{Author, Post};
    /// # let dir = tempfile::tempdir().unwrap();
    /// # let db = Database::open_for::<Post>(dir.path().join("w.db"), StoreOptions::default())?;
    /// db.write(|t| {
    ///     t.insert(&Author::builder().id("ada").name("Ada").build())?;
    ///     t.insert(&Post::builder().id("p1").author("ada").build())?;
    ///     t.insert(&Post::builder().id("p2").author("bob").build())
    /// }).wait()?;
    /// let by_ada = db.fetch::<Post>()
    ///     .including(Post::author_ref())
    ///     .where_related(Author::name().eq("Ada"))
    ///     .all()?;
    /// assert_eq!(by_ada.len(), 1);
    /// # Ok::<(), keel_query::Error>(())
    /// ```
    pub fn where_related(mut self, filter: Expr) -> Self {
        self.related_filter = Some(match self.related_filter.take() {
            Some(earlier) => earlier & filter,
            None => filter,
        });
        self
    }

    /// [`run_keyed`](Self::run_keyed) without the keys and the dangling ones.
    fn run(self) -> Result<Vec<(R, Vec<T>)>> {
        Ok(self
            .run_keyed::<Vec<Option<T>>>()?
            .into_iter()
            .map(|(r, ts, _)| (r, ts.into_iter().flatten().collect()))
            .collect())
    }

    /// Every matching `R` with the object its to-one reference names (`None`:
    /// absent, or naming no object). Two reads in all, whatever the count. A
    /// to-many relation is [`Error::TypeMismatch`]: use
    /// [`all_many`](Self::all_many).
    ///
    /// ```
    /// # use keel_query::{Database, StoreOptions};
    /// use keel_example_blog::rel::{Author, Post};
    /// # let dir = tempfile::tempdir().unwrap();
    /// # let db = Database::open_for::<Post>(dir.path().join("i.db"), StoreOptions::default())?;
    /// db.write(|t| {
    ///     t.insert(&Author::builder().id("ada").name("Ada").build())?;
    ///     t.insert(&Post::builder().id("p1").author("ada").build())
    /// }).wait()?;
    /// let rows: Vec<(Post, Option<Author>)> = db.fetch::<Post>().including(Post::author_ref()).all()?;
    /// assert_eq!(rows[0].1.as_ref().unwrap().name.as_deref(), Some("Ada"));
    /// # Ok::<(), keel_query::Error>(())
    /// ```
    pub fn all(self) -> Result<Vec<(R, Option<T>)>> {
        if self.rel.to_many() {
            return Err(Error::TypeMismatch {
                op: "including",
                collection: R::COLLECTION.to_owned(),
                message: format!("{} holds several keys: use all_many()", self.rel.path()),
            });
        }
        Ok(self
            .run_keyed::<Option<T>>()?
            .into_iter()
            .map(|(r, t, _)| (r, t))
            .collect())
    }

    /// Every matching `R` with the objects its reference names, in the order
    /// of its keys (a to-many vector; at most one for a to-one reference). Its
    /// length is the count over the relation. Two reads in all.
    pub fn all_many(self) -> Result<Vec<(R, Vec<T>)>> {
        self.run()
    }

    /// Every matching `R` with the number of objects its reference names that
    /// exist — the count over the relation (a to-many vector's keys naming an
    /// object, repeats counted; 0 or 1 to-one) — in the fetch's order, in two
    /// reads: the `R`s, then the referenced keys that exist, from the key
    /// column alone (no referenced object is read or decoded). With
    /// [`where_related`](Self::where_related) or
    /// [`order_by_related`](Self::order_by_related) the referenced objects are
    /// read, as by [`all`](Self::all), to apply them.
    ///
    /// ```
    /// # use keel_query::{Database, StoreOptions};
    /// use keel_example_blog::rel::{Post, Tag};
    /// # let dir = tempfile::tempdir().unwrap();
    /// # let db = Database::open_for::<Post>(dir.path().join("c.db"), StoreOptions::default())?;
    /// db.write(|t| {
    ///     t.insert(&Tag::builder().id("db").build())?;
    ///     t.insert(&Tag::builder().id("rust").build())?;
    ///     t.insert(&Post::builder().id("p1").tags(["db", "rust", "gone"]).build())
    /// }).wait()?;
    /// let counts = db.fetch::<Post>().including(Post::tags_ref()).counts()?;
    /// assert_eq!(counts[0].1, 2);
    /// # Ok::<(), keel_query::Error>(())
    /// ```
    pub fn counts(self) -> Result<Vec<(R, u64)>> {
        if self.related_filter.is_some() || self.related_order.is_some() {
            // The filter and order need the referenced objects themselves.
            return Ok(self
                .run_keyed::<Vec<Option<T>>>()?
                .into_iter()
                .map(|(r, ts, _)| {
                    let n = ts.iter().flatten().count();
                    (r, u64::try_from(n).unwrap_or(u64::MAX))
                })
                .collect());
        }
        let Including { fetch, rel, .. } = self;
        let q = fetch.into_query();
        let op = "including counts";
        on_one_conn(&q.src, op, |inner, conn, as_of| {
            let c = inner.coll(R::COLLECTION, op)?;
            let target = inner.coll(rel.target(), op)?;
            let here = Query {
                src: Source::Conn(inner, conn, as_of),
                spec: q.spec.clone(),
            };
            let (rows, wanted) = read_referrers(
                inner,
                c,
                &here,
                RefField {
                    path: rel.path(),
                    to_many: rel.to_many(),
                    typed: rel.key_reader().filter(|_| !rel.to_many()),
                },
                op,
                &mut |rowid, bytes| decode_row::<R>(op, rowid, bytes),
            )?;
            Ok(counted(
                rows,
                &wanted,
                &existing_keys(inner, conn, target, &wanted, op)?,
            ))
        })
    }
}

impl<'a, R: Record> Fetch<'a, R> {
    /// Prefetch the objects the reference `rel` names (generated:
    /// `Post::author_ref()`), in one batched read for all the matching objects:
    /// see [`Including::all`].
    pub fn including<T: Record>(self, rel: Relation<R, T>) -> Including<'a, R, T> {
        Including {
            fetch: self,
            rel,
            related_order: None,
            related_filter: None,
        }
    }

    /// Every matching object with the objects of another collection whose
    /// reference names it — the way back along a reference declared
    /// `inverse: "posts"` (generated: `Author::posts_ref()`) — in two reads:
    /// these objects, then their referrers (through the reference's index
    /// column; a to-many reference scans the referring collection). Each
    /// object's referrers come in their rowid order.
    ///
    /// ```
    /// # use keel_query::{Database, StoreOptions};
    /// use keel_example_blog::rel::{Author, Post};
    /// # let dir = tempfile::tempdir().unwrap();
    /// # let db = Database::open_for::<Post>(dir.path().join("i.db"), StoreOptions::default())?;
    /// db.write(|t| {
    ///     t.insert(&Author::builder().id("ada").name("Ada").build())?;
    ///     t.insert(&Post::builder().id("p1").author("ada").build())?;
    ///     t.insert(&Post::builder().id("p2").author("ada").build())
    /// }).wait()?;
    /// let rows = db.fetch::<Author>().including_inverse(Author::posts_ref())?;
    /// assert_eq!(rows[0].1.len(), 2);
    /// # Ok::<(), keel_query::Error>(())
    /// ```
    pub fn including_inverse<F: Record>(self, back: Inverse<R, F>) -> Result<Vec<(R, Vec<F>)>> {
        let op = "including inverse";
        self.into_query()
            .including(back.name())?
            .into_iter()
            .map(|i| {
                let referrers = i
                    .related
                    .iter()
                    .map(|o| decode_row::<F>(op, o.rowid, &o.bytes))
                    .collect::<Result<Vec<F>>>()?;
                Ok((
                    decode_row::<R>(op, i.object.rowid, &i.object.bytes)?,
                    referrers,
                ))
            })
            .collect()
    }

    /// Keep the objects whose reference names an object matching the filter
    /// (`Post::author_ref().then(Author::name()).eq("Ada")`): the referenced
    /// collection is queried now, and this fetch keeps the objects holding one
    /// of its keys. For a to-many reference it keeps the objects whose vector
    /// holds at least one (exists): their collection is read now to find them
    /// (it needs a primary key of one field). Through a [`Database`](crate::db::database::Database) the
    /// two reads are separate; in a snapshot or a write transaction they see
    /// the same state.
    ///
    /// ```
    /// # use keel_query::{Database, StoreOptions};
    /// use keel_example_blog::rel::{Author, Post};
    /// # let dir = tempfile::tempdir().unwrap();
    /// # let db = Database::open_for::<Post>(dir.path().join("t.db"), StoreOptions::default())?;
    /// db.write(|t| {
    ///     t.insert(&Author::builder().id("ada").name("Ada").build())?;
    ///     t.insert(&Post::builder().id("p1").author("ada").build())?;
    ///     t.insert(&Post::builder().id("p2").author("bob").build())
    /// }).wait()?;
    /// let by_ada = db.fetch::<Post>()
    ///     .filter_through(Post::author_ref().then(Author::name()).eq("Ada"))?
    ///     .all()?;
    /// assert_eq!(by_ada.len(), 1);
    /// # Ok::<(), keel_query::Error>(())
    /// ```
    pub fn filter_through(self, through: Through) -> Result<Self> {
        let op = "filter through";
        let (path, values) = {
            let q = &self.q;
            on_one_conn(&q.src, op, |inner, conn, as_of| {
                let target = inner.coll(&through.target, op)?;
                let from = inner.coll(&q.spec.collection, op)?;
                let tpath = key_path(inner, target, op)?;
                let treader = inner.table(target)?;
                let mut keys: ByKey<()> = ByKey::default();
                let mut list = Vec::new();
                Query::new(Source::Conn(inner, conn, as_of), &target.name)
                    .filter(through.filter.clone())
                    .each(op, false, &mut |_, bytes| {
                        let obj = treader
                            .open(bytes)
                            .map_err(|e| Error::invalid_object(op, &target.name, e))?;
                        let k = obj.get(&tpath);
                        keys.insert(k.clone(), ());
                        list.push(k);
                        Ok(true)
                    })?;
                let Some(link) = from
                    .links
                    .outgoing
                    .iter()
                    .find(|o| o.path == through.path && o.to_many)
                else {
                    // To-one: the field holds one of the keys.
                    return Ok((through.path.clone(), list));
                };
                // To-many ("exists"): no column holds the vector's keys, so the
                // referring objects are read and those whose vector holds one of
                // the keys are kept, by their own key.
                let fpath = key_path(inner, from, op)?;
                let freader = inner.table(from)?;
                let id = link.path.steps().first().map_or(0, |s| s.id());
                let mut matching = Vec::new();
                if !list.is_empty() {
                    Query::new(Source::Conn(inner, conn, as_of), &from.name).each(
                        op,
                        false,
                        &mut |_, bytes| {
                            let obj = freader
                                .open(bytes)
                                .map_err(|e| Error::invalid_object(op, &from.name, e))?;
                            let elements = obj
                                .elements(id)
                                .map_err(|e| Error::invalid_object(op, &from.name, e))?;
                            if elements.iter().any(|e| keys.get(e).is_some()) {
                                matching.push(obj.get(&fpath));
                            }
                            Ok(true)
                        },
                    )?;
                }
                Ok((fpath, matching))
            })?
        };
        Ok(self.filter(Expr::In { path, values }))
    }
}

/// One object with the objects its reference field names: what
/// [`Query::including`] returns (the untyped form of [`Including`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Included {
    /// The object.
    pub object: StoredObject,
    /// The objects its reference names, in the order of its keys (at most one
    /// for a to-one reference; keys naming no object are left out).
    pub related: Vec<StoredObject>,
}

/// The reference pointing at `c` that `c` navigates back by under `name`
/// (`inverse: "posts"`), unless `c` has a reference field of that name.
fn inverse_named<'c>(c: &'c Coll, name: &str) -> Option<&'c Incoming> {
    if c.links.outgoing.iter().any(|o| o.field == name) {
        return None;
    }
    c.links
        .incoming
        .iter()
        .find(|i| i.inverse.as_deref() == Some(name))
}

/// The objects `spec` matches in `c`, each with the objects of the referring
/// collection whose reference `back` names it (in their rowid order): the
/// inverse of an `including` read, in two reads — `c`'s objects, then the
/// referrers naming any of their keys (through the reference's index
/// column to-one; a scan of the referring collection to-many). `related`
/// keeps, as in [`Query::including_where`], the objects with a matching
/// referrer; the window applies after it.
fn referrers_of(
    inner: &Inner,
    conn: &rusqlite::Connection,
    as_of: Option<u64>,
    c: &Coll,
    spec: &Spec,
    back: &Incoming,
    related: Option<&Expr>,
) -> Result<Vec<Included>> {
    let op = "including";
    let from = inner.coll(&back.from, op)?;
    let keep = related_filter_on(inner, from, related)?;
    let mut spec = spec.clone();
    let window = take_window(&mut spec, keep.is_some());
    let kpath = key_path(inner, c, op)?;
    let reader = inner.table(c)?;
    let mut rows: Vec<(StoredObject, Value)> = Vec::new();
    Query {
        src: Source::Conn(inner, conn, as_of),
        spec,
    }
    .each(op, false, &mut |rowid, bytes| {
        let obj = reader
            .open(bytes)
            .map_err(|e| Error::invalid_object(op, &c.name, e))?;
        rows.push((stored_object(rowid, bytes)?, obj.get(&kpath)));
        Ok(true)
    })?;
    let mut groups: HashMap<K, Vec<StoredObject>> = HashMap::new();
    for (_, k) in &rows {
        groups.entry(K::of(k)).or_default();
    }
    let freader = inner.table(from)?;
    let bad = |e| Error::invalid_object(op, &from.name, e);
    let referrers = Query::new(Source::Conn(inner, conn, as_of), &from.name);
    if back.to_many {
        // No column holds a vector's keys: the referring collection is read.
        referrers.each(op, false, &mut |rowid, bytes| {
            let mut seen: Vec<K> = Vec::new();
            for e in freader
                .open(bytes)
                .and_then(|o| o.elements(back.field_id))
                .map_err(bad)?
            {
                let k = K::of(&e);
                if seen.contains(&k) {
                    continue;
                }
                if let Some(g) = groups.get_mut(&k) {
                    g.push(stored_object(rowid, bytes)?);
                }
                seen.push(k);
            }
            Ok(true)
        })?;
    } else {
        let keys: Vec<Value> = rows
            .iter()
            .map(|(_, k)| k.clone())
            .filter(|k| !k.is_null())
            .collect();
        for chunk in keys.chunks(BATCH) {
            Query::new(Source::Conn(inner, conn, as_of), &from.name)
                .filter(Expr::In {
                    path: back.path.clone(),
                    values: chunk.to_vec(),
                })
                .each(op, false, &mut |rowid, bytes| {
                    let k = K::of(&freader.open(bytes).map_err(bad)?.get(&back.path));
                    if let Some(g) = groups.get_mut(&k) {
                        g.push(stored_object(rowid, bytes)?);
                    }
                    Ok(true)
                })?;
        }
    }
    let out = rows.into_iter().map(|(object, k)| Included {
        related: groups.get(&K::of(&k)).cloned().unwrap_or_default(),
        object,
    });
    Ok(kept_in_window(out, keep.as_ref(), window))
}

/// The reference field `field` of collection `c`; any other name is
/// [`Error::UnknownField`].
fn link_named<'c>(c: &'c Coll, field: &str, op: &'static str) -> Result<&'c Outgoing> {
    c.links
        .outgoing
        .iter()
        .find(|o| o.field == field)
        .ok_or_else(|| Error::UnknownField {
            op,
            collection: c.name.clone(),
            message: format!("{} has no reference field {field:?}", c.name),
        })
}

/// A row as the untyped reads return it.
fn stored_object(rowid: i64, bytes: &[u8]) -> Result<StoredObject> {
    Ok(StoredObject {
        rowid,
        bytes: bytes.to_vec(),
    })
}

impl Query<'_> {
    /// Every matching object with the objects its reference field `field`
    /// names (a `(references: …)` field of this collection), in two reads: the
    /// objects, then every referenced object at once (see [`Fetch::including`]).
    /// A field that is not a reference is [`Error::UnknownField`].
    ///
    /// ```
    /// # use keel_query::{Database, StoreOptions};
    /// # use keel_schema::Schema;
    /// # let dir = tempfile::tempdir().unwrap();
    /// let schema = Schema::parse(
    ///     r#"table A (entity) { id: string (primary); name: string; }
    ///        table P { id: string (primary); a: string (references: "A"); } root_type P;"#,
    ///     "r.fbs",
    /// )?;
    /// let db = Database::open(dir.path().join("q.db"), schema.clone(), StoreOptions::default())?;
    /// let a = schema.reader("A")?.encode_json(&serde_json::json!({"id": "a1", "name": "Ada"}))?;
    /// let p = schema.reader("P")?.encode_json(&serde_json::json!({"id": "p1", "a": "a1"}))?;
    /// db.write(move |t| { t.insert_bytes("A", a)?; t.insert_bytes("P", p).map(|_| ()) }).wait()?;
    /// let rows = db.query("P").including("a")?;
    /// assert_eq!(rows[0].related.len(), 1);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn including(self, field: &str) -> Result<Vec<Included>> {
        self.including_where(field, None)
    }

    /// [`including`](Self::including), keeping only the objects whose
    /// referenced object (to-one), or at least one of them (to-many), matches
    /// `related`, an [`Expr`] over the referenced collection's fields: the
    /// untyped [`Including::where_related`]. The window (`limit`, `offset`)
    /// applies after this filter.
    pub fn including_where(self, field: &str, related: Option<&Expr>) -> Result<Vec<Included>> {
        let op = "including";
        on_one_conn(&self.src, op, |inner, conn, as_of| {
            let c = inner.coll(&self.spec.collection, op)?;
            if let Some(back) = inverse_named(c, field) {
                return referrers_of(inner, conn, as_of, c, &self.spec, back, related);
            }
            let (rows, _, at) = keyed_including(inner, conn, as_of, c, &self.spec, field, related)?;
            Ok(rows
                .into_iter()
                .map(|(object, keys)| Included {
                    related: keys.iter().filter_map(|i| at[i].clone()).collect(),
                    object,
                })
                .collect())
        })
    }

    /// [`including_where`](Self::including_where) as a live list reads it:
    /// each object with the keys its reference holds (indexes into the second
    /// part) and what each names, and every key a matching object holds, kept
    /// by `related` and inside the window or not (a change of any of them can
    /// move a row in). An inverse name is [`Error::UnknownField`] here.
    pub(crate) fn including_keyed(
        self,
        field: &str,
        related: Option<&Expr>,
    ) -> Result<KeyedIncluded> {
        on_one_conn(&self.src, "including", |inner, conn, as_of| {
            let c = inner.coll(&self.spec.collection, "including")?;
            keyed_including(inner, conn, as_of, c, &self.spec, field, related)
        })
    }
}

/// What [`Query::including_keyed`] reads: each kept object with its keys,
/// every distinct key a matching object holds, and the object each of those
/// names (parallel to the keys; `None`: none).
pub(crate) type KeyedIncluded = (
    Vec<(StoredObject, Keys)>,
    Vec<Value>,
    Vec<Option<StoredObject>>,
);

/// The two reads of an untyped `including` through the reference field
/// `field` of `c`, with each row's keys.
fn keyed_including(
    inner: &Inner,
    conn: &rusqlite::Connection,
    as_of: Option<u64>,
    c: &Coll,
    spec: &Spec,
    field: &str,
    related: Option<&Expr>,
) -> Result<KeyedIncluded> {
    let op = "including";
    let link = link_named(c, field, op)?;
    let target = inner.coll(&link.target, op)?;
    let keep = related_filter_on(inner, target, related)?;
    let mut spec = spec.clone();
    let window = take_window(&mut spec, keep.is_some());
    let here = Query {
        src: Source::Conn(inner, conn, as_of),
        spec,
    };
    let (rows, wanted) = read_referrers(
        inner,
        c,
        &here,
        RefField::bytes(&link.path, link.to_many),
        op,
        &mut stored_object,
    )?;
    let mut found: ByKey<StoredObject> = ByKey::default();
    let path = key_path(inner, target, op)?;
    let reader = inner.table(target)?;
    let resolved = reader.resolve(&path).map_err(|e| Error::UnknownField {
        op,
        collection: target.name.clone(),
        message: e.to_string(),
    })?;
    let columns = format!("rowid, {}", target.body.select());
    by_keys(
        inner,
        conn,
        target,
        &wanted,
        &columns,
        &mut |sql, params| {
            fetch::select_each(conn, target, op, sql, params, &mut |rowid, bytes| {
                let obj = reader
                    .open(bytes)
                    .map_err(|e| Error::invalid_object(op, &target.name, e))?;
                found.insert(
                    obj.get_resolved(&resolved),
                    StoredObject {
                        rowid,
                        bytes: bytes.to_vec(),
                    },
                );
                Ok(true)
            })
        },
    )?;
    let at: Vec<Option<StoredObject>> = wanted.iter().map(|k| found.get(k).cloned()).collect();
    let (Some(keep), Some(window)) = (keep, window) else {
        return Ok((rows, wanted, at));
    };
    // Filtered: the rows naming at least one matching object, then the window.
    let kept = rows.into_iter().filter(|(_, keys)| {
        keys.iter()
            .filter_map(|i| at[i].as_ref())
            .any(|r| keep.eval_bytes(&r.bytes) == Some(true))
    });
    Ok((cut(kept, window), wanted, at))
}

impl Query<'_> {
    /// Every matching object with the number of objects its reference field
    /// `field` names that exist (see [`Including::counts`]): two reads, the
    /// second of the referenced collection's key column only.
    pub fn count_including(self, field: &str) -> Result<Vec<(StoredObject, u64)>> {
        let op = "including counts";
        on_one_conn(&self.src, op, |inner, conn, as_of| {
            let c = inner.coll(&self.spec.collection, op)?;
            if let Some(back) = inverse_named(c, field) {
                // The referrers themselves: their count is their number.
                return Ok(referrers_of(inner, conn, as_of, c, &self.spec, back, None)?
                    .into_iter()
                    .map(|i| (i.object, u64::try_from(i.related.len()).unwrap_or(u64::MAX)))
                    .collect());
            }
            let link = link_named(c, field, op)?;
            let target = inner.coll(&link.target, op)?;
            let here = Query {
                src: Source::Conn(inner, conn, as_of),
                spec: self.spec.clone(),
            };
            let (rows, wanted) = read_referrers(
                inner,
                c,
                &here,
                RefField::bytes(&link.path, link.to_many),
                op,
                &mut stored_object,
            )?;
            Ok(counted(
                rows,
                &wanted,
                &existing_keys(inner, conn, target, &wanted, op)?,
            ))
        })
    }
}
