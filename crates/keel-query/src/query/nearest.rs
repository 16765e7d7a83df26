//! Nearest-neighbour queries: [`Query::nearest`] and [`Fetch::nearest`] build a
//! [`Nearest`] / [`NearestFetch`], run with `all()`.
//!
//! The query API names *what* is asked (the field, the query vector, `k`, the
//! filter), never *how*: today the answer is the exact scan of `vector/column.rs`; an
//! approximate index (see `docs/vector.md`) would answer the same builder
//! without changing callers.

use std::marker::PhantomData;

use keel_schema::{Field, FieldPath, Record, Vector};

use crate::base::error::{Error, Result};
use crate::engine::Inner;
use crate::query::fetch::Source;
use crate::query::fetch::{decode_row, select_each, Fetch, Query, StoredObject};
use crate::query::scan;
use crate::vector::column;
use crate::vector::column::{Scored, Within};

/// One result of a nearest query: the object, its distance to the query vector
/// (smaller is nearer, see [`keel_schema::Metric`]) and its rowid.
#[derive(Debug, Clone, PartialEq)]
pub struct Neighbor<T> {
    /// The object.
    pub object: T,
    /// Its distance to the query vector under the field's metric.
    pub distance: f32,
    /// Its rowid (the tie-breaker: equal distances are ordered by rowid).
    pub rowid: i64,
}

/// A k-nearest-neighbour query over a `(vector: N)` field: the `k` objects
/// matching the query's filter whose vectors are nearest to a query vector,
/// best first (equal distances by rowid). Made by [`Query::nearest`].
#[must_use = "a nearest query does nothing until all()"]
pub struct Nearest<'a> {
    pub(crate) q: Query<'a>,
    pub(crate) path: FieldPath,
    pub(crate) query: Vec<f32>,
    pub(crate) k: usize,
}

impl<'a> Query<'a> {
    /// The `k` objects matching this query's filter whose vector field `path`
    /// is nearest to `query`, with their distances, best first. Exact (a scan
    /// of the packed vectors, never of the bodies). Objects without the field
    /// are not candidates. The query's `order_by`/`limit`/`offset`, if set, are
    /// an [`Error::TypeMismatch`] when run: `k` and the distance decide them.
    ///
    /// ```
    /// # use keel_query::{Database, StoreOptions};
    /// # use keel_schema::Schema;
    /// # let dir = tempfile::tempdir().unwrap();
    /// let schema = Schema::parse(
    ///     r#"table P { id: int (primary); e: [float] (vector: 2, metric: "l2"); } root_type P;"#, "p.fbs")?;
    /// let db = Database::open(dir.path().join("n.db"), schema.clone(), StoreOptions::default())?;
    /// let r = schema.reader("P")?;
    /// for (id, e) in [(1, [0.0, 0.0]), (2, [3.0, 4.0]), (3, [1.0, 0.0])] {
    ///     let obj = r.encode_json(&serde_json::json!({"id": id, "e": e}))?;
    ///     db.write(move |t| t.insert_bytes("P", obj).map(|_| ())).wait()?;
    /// }
    /// let near = db.query("P").nearest(r.path("e")?, &[0.9, 0.0], 2).all()?;
    /// assert_eq!(near.iter().map(|n| n.rowid).collect::<Vec<_>>(), [3, 1]);
    /// assert!((near[0].distance - 0.1).abs() < 1e-6);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn nearest(self, path: FieldPath, query: &[f32], k: usize) -> Nearest<'a> {
        Nearest {
            q: self,
            path,
            query: query.to_vec(),
            k,
        }
    }
}

impl Nearest<'_> {
    /// Refuse what a nearest query cannot carry: order, limit, offset.
    fn check_spec(&self, op: &'static str) -> Result<()> {
        let q = &self.q;
        if !q.spec.order.is_empty() || q.spec.limit.is_some() || q.spec.offset > 0 {
            return Err(Error::TypeMismatch {
                op,
                collection: q.spec.collection.clone(),
                message: "a nearest query is ordered by distance and limited to k: drop order_by, limit and offset".into(),
            });
        }
        Ok(())
    }

    /// The winners' rowids and distances, best first.
    pub(crate) fn scored(&self, op: &'static str) -> Result<Vec<Scored>> {
        self.check_spec(op)?;
        self.q
            .src
            .run(op, |inner, conn| self.scored_on(inner, conn, op))
    }

    /// [`Nearest::scored`] on `conn`, which every read of the query uses (a
    /// filter evaluated on the bodies included: a second pooled connection
    /// could be another snapshot, or never come with one reader).
    fn scored_on(
        &self,
        inner: &Inner,
        conn: &rusqlite::Connection,
        op: &'static str,
    ) -> Result<Vec<Scored>> {
        let q = &self.q;
        let c = q.coll(inner, op)?;
        let f = column::field_of(c, op, &self.path)?;
        column::check_query(c, f, op, &self.query)?;
        if self.k == 0 || inner.unborn(conn, c)? {
            return Ok(Vec::new());
        }
        let cache = &inner.vector_cache;
        let Some(filter) = q.spec.filter.as_ref() else {
            return column::scan(conn, c, f, op, &self.query, self.k, Within::All, cache);
        };
        if scan::plan(&inner.schema, c, &q.ask())?.is_some() {
            // A filter SQLite cannot answer alone (a field without a column):
            // evaluated on the bodies, on this connection, then the scan keeps
            // its rowids.
            let as_of = match &q.src {
                Source::Conn(_, _, as_of) => *as_of,
                Source::Db(_) => None,
            };
            let here = Query {
                src: Source::Conn(inner, conn, as_of),
                spec: q.spec.clone(),
            };
            let mut keep = std::collections::HashSet::new();
            here.each(op, false, &mut |rowid, _| {
                keep.insert(rowid);
                Ok(true)
            })?;
            return column::scan(
                conn,
                c,
                f,
                op,
                &self.query,
                self.k,
                Within::Set(&keep),
                cache,
            );
        }
        let (sql, params) = q.build_with(inner, Some(filter), None, false, false, false)?;
        let head = format!("SELECT rowid, {} ", c.body.select());
        let rowids = match sql.strip_prefix(&head) {
            Some(rest) => format!("SELECT rowid {rest}"),
            None => {
                return Err(Error::TypeMismatch {
                    op,
                    collection: c.name.clone(),
                    message: "this filter cannot restrict a nearest query".into(),
                })
            }
        };
        column::scan(
            conn,
            c,
            f,
            op,
            &self.query,
            self.k,
            Within::Sql(&rowids, &params),
            cache,
        )
    }

    /// Hand each winner's rowid, distance and bytes to `sink`, best first. The
    /// scan and the winners' bodies are read in one read transaction, so a
    /// winner deleted by a commit in between cannot go missing.
    pub(crate) fn each(
        &self,
        op: &'static str,
        sink: &mut dyn FnMut(Scored, &[u8]) -> Result<()>,
    ) -> Result<()> {
        self.check_spec(op)?;
        let q = &self.q;
        q.src.run(op, |inner, conn| {
            let own = conn.is_autocommit();
            if own {
                conn.execute_batch("BEGIN")
                    .map_err(|e| Error::sqlite(op, &q.spec.collection, e))?;
            }
            let out = self.each_on(inner, conn, op, sink);
            if own {
                // A read transaction: COMMIT only ends it.
                let end = conn.execute_batch(if out.is_ok() { "COMMIT" } else { "ROLLBACK" });
                out?;
                end.map_err(|e| Error::sqlite(op, &q.spec.collection, e))?;
                return Ok(());
            }
            out
        })
    }

    fn each_on(
        &self,
        inner: &Inner,
        conn: &rusqlite::Connection,
        op: &'static str,
        sink: &mut dyn FnMut(Scored, &[u8]) -> Result<()>,
    ) -> Result<()> {
        let won = self.scored_on(inner, conn, op)?;
        let c = self.q.coll(inner, op)?;
        let sql = format!(
            "SELECT rowid, {} FROM {} WHERE rowid = ?1",
            c.body.select(),
            c.ident
        );
        for s in won {
            select_each(
                conn,
                c,
                op,
                &sql,
                &[keel_schema::Value::Int(s.rowid)],
                &mut |_, bytes| {
                    sink(s, bytes)?;
                    Ok(false)
                },
            )?;
        }
        Ok(())
    }

    /// The `k` nearest objects, best first.
    pub fn all(self) -> Result<Vec<Neighbor<StoredObject>>> {
        let mut out = Vec::new();
        self.each("nearest", &mut |s, bytes| {
            out.push(Neighbor {
                object: StoredObject {
                    rowid: s.rowid,
                    bytes: bytes.to_vec(),
                },
                distance: s.distance,
                rowid: s.rowid,
            });
            Ok(())
        })?;
        Ok(out)
    }
}

/// A typed nearest query: [`Fetch::nearest`].
#[must_use = "a nearest query does nothing until all()"]
pub struct NearestFetch<'a, R: Record> {
    pub(crate) n: Nearest<'a>,
    _r: PhantomData<fn() -> R>,
}

impl<'a, R: Record> Fetch<'a, R> {
    /// The `k` objects matching this fetch's filter whose vector `field` is
    /// nearest to `query`, best first: see [`Query::nearest`]. `field` is the
    /// handle of a `(vector: N)` field (`Photo::embedding()`): no other field's
    /// handle is accepted.
    pub fn nearest(self, field: Field<R, Vector>, query: &[f32], k: usize) -> NearestFetch<'a, R> {
        NearestFetch {
            n: self.into_query().nearest(field.into_path(), query, k),
            _r: PhantomData,
        }
    }
}

impl<R: Record> NearestFetch<'_, R> {
    /// The `k` nearest objects, decoded, best first.
    pub fn all(self) -> Result<Vec<Neighbor<R>>> {
        let mut out = Vec::new();
        self.n.each("nearest", &mut |s, bytes| {
            out.push(Neighbor {
                object: decode_row::<R>("nearest", s.rowid, bytes)?,
                distance: s.distance,
                rowid: s.rowid,
            });
            Ok(())
        })?;
        Ok(out)
    }
}
