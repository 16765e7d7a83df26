//! Vector fields (`(vector: N, metric: "…")` on a `[float]` field): the packed
//! column, the check on write, and the exact k-nearest-neighbour scan.
//!
//! # Storage
//!
//! A collection with vector fields has a side table `"<collection>$vec"`:
//!
//! ```sql
//! CREATE TABLE "Photo$vec"(rowid INTEGER PRIMARY KEY, "v3" BLOB);
//! ```
//!
//! one row per object (same rowid), one column per vector field, named `v` + the
//! field id (ids survive renames), holding the field's floats packed little-endian
//! f32 — byte for byte the FlatBuffers vector's data, so writing it is a copy. An
//! object without the field has `NULL`. `txn/transaction.rs` writes the row in the same
//! transaction and savepoint as the object (like the full-text index, never by
//! triggers), so stock SQLite reads it and a rollback takes both back.
//! `keel_meta` keeps `vector:<collection>` = the fields and dimensions it was
//! built with; another signature (or a migration) rebuilds it at open.
//!
//! # The scan
//!
//! A nearest query reads only `"<collection>$vec"` (never the object bodies):
//! the filter, if any, becomes `rowid IN (SELECT rowid FROM <table> WHERE …)`
//! answered by SQLite on keys and index columns (a filter on an unindexed field
//! is evaluated on the bodies first, then the same scan runs over its rowids).
//! Each row's distance is computed by the loops of [`keel_schema::vector`]
//! (safe Rust the compiler vectorises) into a bounded max-heap of the `k` best
//! by `(distance, rowid)`: equal distances are ordered by rowid, so results and
//! live diffs are stable. Only the `k` winners' bodies are loaded.
//!
//! From the in-memory copy (`vector/cache.rs`), the rows scored are only the
//! candidates of the coarse pass over the copy's 8-bit codes
//! (`vector/codes.rs`), which provably holds the top `k`: the same answer.

use keel_schema::Value;
use rusqlite::OptionalExtension;

use crate::base::error::{Error, Result};
use crate::base::sql_value::Param;
use crate::layout::table::Coll;
use crate::layout::vector_table;
use crate::layout::vector_table::VectorSql;
pub(crate) use crate::layout::vector_table::{packed, Scored, TopK, VectorField};
use crate::vector::cache::{Packed, VectorCache, ROW_BYTES};
use crate::vector::codes::Codes;

/// Which rows a scan considers.
#[derive(Clone, Copy)]
pub(crate) enum Within<'w> {
    /// Every object.
    All,
    /// The rowids this SQL (`SELECT rowid FROM …`) selects with these parameters.
    Sql(&'w str, &'w [keel_schema::Value]),
    /// These rowids.
    Set(&'w std::collections::HashSet<i64>),
}

/// Refuse an object whose vector fields do not fit their declarations (another
/// dimension count, NaN or infinity): [`Error::InvalidVector`], before anything
/// is written.
pub(crate) fn check(c: &Coll, op: &'static str, bytes: &[u8]) -> Result<()> {
    let Some(v) = &c.vectors else {
        return Ok(());
    };
    let mut floats = Vec::new();
    for f in &v.fields {
        let Some(p) = packed(f, bytes) else { continue };
        keel_schema::vector::unpack_into(p, &mut floats);
        f.spec
            .check(&floats)
            .map_err(|problem| Error::InvalidVector {
                op,
                collection: c.name.clone(),
                field: f.name.clone(),
                problem,
            })?;
    }
    Ok(())
}

/// Check a query vector against field `f`: a typed error naming the field.
pub(crate) fn check_query(
    c: &Coll,
    f: &VectorField,
    op: &'static str,
    query: &[f32],
) -> Result<()> {
    f.spec.check(query).map_err(|problem| Error::InvalidVector {
        op,
        collection: c.name.clone(),
        field: f.name.clone(),
        problem,
    })
}

/// The vector field of `c` that `path` names: one `(vector)` field of the
/// collection's own table.
pub(crate) fn field_of<'c>(
    c: &'c Coll,
    op: &'static str,
    path: &keel_schema::FieldPath,
) -> Result<&'c VectorField> {
    let not = || Error::UnknownField {
        op,
        collection: c.name.clone(),
        message: format!("{path} is not a (vector: N) field of the collection"),
    };
    match path.steps() {
        [keel_schema::PathStep::Field { id, .. }] => c
            .vectors
            .as_ref()
            .and_then(|v| v.field(*id))
            .ok_or_else(not),
        _ => Err(not()),
    }
}

/// Distances of `query` to the objects of `c` in field `f`, the best `k` by
/// `(distance, rowid)`, best first. `within`: the rows the filter keeps.
///
/// Answered from `cache` when it holds the field's vectors as of this
/// snapshot (see `vector/cache.rs`); otherwise from the side table, refreshing
/// the copy on the way when the field fits the cache's budget. The generation,
/// the cookie and the rows are read in one read transaction.
#[allow(clippy::too_many_arguments)] // the query's parts, each used once
pub(crate) fn scan(
    conn: &rusqlite::Connection,
    c: &Coll,
    f: &VectorField,
    op: &'static str,
    query: &[f32],
    k: usize,
    within: Within<'_>,
    cache: &VectorCache,
) -> Result<Vec<Scored>> {
    let v = c.vectors.as_ref().ok_or_else(|| Error::UnknownField {
        op,
        collection: c.name.clone(),
        message: "the collection has no vector field".into(),
    })?;
    let scan = Scan {
        conn,
        c,
        v,
        f,
        op,
        query,
        k,
        within,
    };
    if !conn.is_autocommit() {
        return scan.run(cache);
    }
    conn.execute_batch("BEGIN").map_err(|e| scan.err(e))?;
    let out = scan.run(cache);
    // A read transaction: COMMIT only ends it (and ROLLBACK would do the same).
    let end = conn.execute_batch(if out.is_ok() { "COMMIT" } else { "ROLLBACK" });
    let out = out?;
    end.map_err(|e| scan.err(e))?;
    Ok(out)
}

/// The bytes of one packed value as keel wrote it: a BLOB of `dims` floats.
/// Anything else (text, a number, a blob of another length) was written by
/// another tool; every scan skips it, and `keel check` reports it.
fn packed_value(v: rusqlite::types::ValueRef<'_>, dims: usize) -> Option<&[u8]> {
    match v {
        rusqlite::types::ValueRef::Blob(b) if b.len() == dims * 4 => Some(b),
        _ => None,
    }
}

/// The generation and the schema cookie of `v`'s table in this snapshot
/// (`None`: no generation, a table from before the triggers).
fn stamp(conn: &rusqlite::Connection, v: &VectorSql) -> rusqlite::Result<Option<(i64, i64)>> {
    let gen: Option<i64> = conn
        .prepare_cached("SELECT value FROM keel_meta WHERE key = ?1")?
        .query_row([&v.gen_key], |r| r.get(0))
        .optional()?;
    let Some(gen) = gen else { return Ok(None) };
    let cookie: i64 = conn
        .prepare_cached("PRAGMA schema_version")?
        .query_row([], |r| r.get(0))?;
    Ok(Some((gen, cookie)))
}

/// May a copy read on `conn` be kept: a committed snapshot (not a write
/// transaction's own changes) of a table whose three triggers exist (without
/// them another writer's rows would not move the generation).
fn may_copy(conn: &rusqlite::Connection, v: &VectorSql) -> rusqlite::Result<bool> {
    if conn.transaction_state(Some(rusqlite::MAIN_DB))? == rusqlite::TransactionState::Write {
        return Ok(false);
    }
    let [a, b, c] = &v.trigger_names;
    let triggers: i64 = conn
        .prepare_cached(
            "SELECT count(*) FROM sqlite_schema WHERE type = 'trigger' AND tbl_name = ?1 AND name IN (?2, ?3, ?4)",
        )?
        .query_row([&v.name, a, b, c], |r| r.get(0))?;
    Ok(triggers == 3)
}

/// One nearest scan, inside its read transaction: field `f` of `c`, the `k`
/// best for `query` among the rows `within` keeps.
struct Scan<'s> {
    conn: &'s rusqlite::Connection,
    c: &'s Coll,
    v: &'s VectorSql,
    f: &'s VectorField,
    op: &'static str,
    query: &'s [f32],
    k: usize,
    within: Within<'s>,
}

impl<'s> Scan<'s> {
    fn err(&self, e: rusqlite::Error) -> Error {
        Error::sqlite(self.op, &self.c.name, e)
    }

    /// `sql`, prepared (and cached) on the scan's connection.
    fn prepare(&self, sql: &str) -> Result<rusqlite::CachedStatement<'s>> {
        self.conn.prepare_cached(sql).map_err(|e| self.err(e))
    }

    /// From the copy when it is current (or can be made so), else the table.
    fn run(&self, cache: &VectorCache) -> Result<Vec<Scored>> {
        let (c, f) = (self.c, self.f);
        let stamp = stamp(self.conn, self.v).map_err(|e| self.err(e))?;
        // A write closure's own uncommitted vector rows are in no copy, and
        // its generation moves only at its end: it reads the table.
        let own_rows = || -> rusqlite::Result<bool> {
            Ok(self.conn.transaction_state(Some(rusqlite::MAIN_DB))?
                == rusqlite::TransactionState::Write
                && vector_table::writing(self.conn)?)
        };
        if own_rows().map_err(|e| self.err(e))? {
            return self.table();
        }
        let copy = stamp.and_then(|(g, ck)| cache.get(&c.name, f.id, g, ck));
        let copy = match (copy, stamp) {
            (Some(copy), _) => copy,
            (None, Some((generation, cookie)))
                if may_copy(self.conn, self.v).map_err(|e| self.err(e))? =>
            {
                match self.read_copy(cache.budget(), generation, cookie)? {
                    Some(copy) => {
                        let copy = std::sync::Arc::new(copy);
                        cache.put(&c.name, f.id, std::sync::Arc::clone(&copy));
                        copy
                    }
                    // Over the budget: the side table answers.
                    None => return self.table(),
                }
            }
            _ => return self.table(),
        };
        // The copy is of every row: a filter's rowids are looked up in it.
        let rowids: std::collections::HashSet<i64>;
        let keep: Option<&std::collections::HashSet<i64>> = match self.within {
            Within::All => None,
            Within::Set(s) => Some(s),
            Within::Sql(w, p) => {
                let mut st = self.conn.prepare_cached(w).map_err(|e| self.err(e))?;
                let rows = st
                    .query_map(rusqlite::params_from_iter(p.iter().map(Param)), |r| {
                        r.get::<_, i64>(0)
                    })
                    .map_err(|e| self.err(e))?;
                rowids = rows
                    .collect::<rusqlite::Result<_>>()
                    .map_err(|e| self.err(e))?;
                Some(&rowids)
            }
        };
        if copy.dimensions != self.query.len() {
            return Ok(Vec::new());
        }
        let metric = f.spec.metric;
        let qn = keel_schema::vector::norm(self.query);
        let mut top = TopK::new(self.k);
        let candidates = copy.codes.candidates(
            self.query,
            metric,
            self.k,
            &copy.rowids,
            keep,
            cache.helper(),
        );
        // Row `i` of the copy, scored from its floats.
        let score = |i: usize| Scored {
            distance: metric.distance_known(self.query, qn, copy.vector(i), copy.norms2[i]),
            rowid: copy.rowids[i],
        };
        match candidates {
            Some(rows) if copy.has_floats() => rows.into_iter().for_each(|i| top.push(score(i))),
            Some(rows) => {
                self.score_from_table(&mut top, qn, rows.iter().map(|&i| copy.rowids[i]))?
            }
            None if copy.has_floats() => (0..copy.rowids.len())
                .filter(|&i| keep.is_none_or(|s| s.contains(&copy.rowids[i])))
                .for_each(|i| top.push(score(i))),
            // No coarse pass for this query, and no floats held: SQLite's rows.
            None => return self.table(),
        }
        Ok(top.into_sorted())
    }

    /// Score `rowids` (rows of the copy, so of this snapshot) from the side
    /// table: a copy that holds only codes reads its candidates' floats here.
    /// `qn`: the query's norm.
    fn score_from_table(
        &self,
        top: &mut TopK,
        qn: f32,
        rowids: impl Iterator<Item = i64>,
    ) -> Result<()> {
        let (metric, query) = (self.f.spec.metric, self.query);
        let (col, t) = (&self.f.col_ident, &self.v.ident);
        let mut st = self.prepare(&format!("SELECT {col} FROM {t} WHERE rowid = ?1"))?;
        let mut floats: Vec<f32> = Vec::with_capacity(query.len());
        for rowid in rowids {
            let mut rows = st.query([rowid]).map_err(|e| self.err(e))?;
            let Some(r) = rows.next().map_err(|e| self.err(e))? else {
                continue;
            };
            let Some(blob) = packed_value(r.get_ref(0).map_err(|e| self.err(e))?, query.len())
            else {
                continue;
            };
            keel_schema::vector::unpack_into(blob, &mut floats);
            // `distance` equals the copy's `distance_known` to the bit.
            top.push(Scored {
                distance: metric.distance(query, qn, &floats),
                rowid,
            });
        }
        Ok(())
    }

    /// Every vector of the field, as a [`Packed`] copy, or `None` when they are
    /// more than `budget` bytes.
    fn read_copy(&self, budget: usize, generation: i64, cookie: i64) -> Result<Option<Packed>> {
        let dims = self.f.spec.dimensions as usize;
        let (col, t) = (&self.f.col_ident, &self.v.ident);
        let mut st = self.prepare(&format!(
            "SELECT rowid, {col} FROM {t} WHERE {col} IS NOT NULL ORDER BY rowid"
        ))?;
        let mut rows = st.query([]).map_err(|e| self.err(e))?;
        let (mut rowids, mut floats, mut norms2) = (Vec::new(), Vec::new(), Vec::new());
        let mut codes = Codes::new(dims);
        // The floats are kept while codes and floats fit the budget; past it,
        // the codes alone, while they fit (what `Packed::bytes` counts).
        let mut keep_floats = true;
        let mut x: Vec<f32> = Vec::with_capacity(dims);
        while let Some(r) = rows.next().map_err(|e| self.err(e))? {
            let Some(blob) = packed_value(r.get_ref(1).map_err(|e| self.err(e))?, dims) else {
                continue;
            };
            let codes_only = (rowids.len() + 1) * ROW_BYTES + codes.bytes() + codes.row_bytes();
            if keep_floats && codes_only + (floats.len() + dims) * 4 > budget {
                keep_floats = false;
                floats = Vec::new();
            }
            if codes_only > budget {
                return Ok(None);
            }
            keel_schema::vector::unpack_into(blob, &mut x);
            if keep_floats {
                floats.extend_from_slice(&x);
            }
            norms2.push(keel_schema::vector::dot(&x, &x));
            codes.push(&x);
            rowids.push(r.get(0).map_err(|e| self.err(e))?);
        }
        Ok(Some(Packed {
            generation,
            cookie,
            dimensions: dims,
            rowids,
            floats,
            floats_kept: keep_floats,
            norms2,
            codes: std::sync::Arc::new(codes),
        }))
    }

    /// The scan of the side table itself, row by row.
    fn table(&self) -> Result<Vec<Scored>> {
        let (c, f, query) = (self.c, self.f, self.query);
        let err = |e| Error::sqlite(self.op, &c.name, e);
        let mut sql = format!(
            "SELECT rowid, {col} FROM {t} WHERE {col} IS NOT NULL",
            col = f.col_ident,
            t = self.v.ident
        );
        let (params, keep): (&[Value], _) = match self.within {
            Within::Sql(w, p) => {
                sql.push_str(" AND rowid IN (");
                sql.push_str(w);
                sql.push(')');
                (p, None)
            }
            Within::Set(s) => (&[], Some(s)),
            Within::All => (&[], None),
        };
        let mut st = self.conn.prepare_cached(&sql).map_err(err)?;
        let mut rows = st
            .query(rusqlite::params_from_iter(params.iter().map(Param)))
            .map_err(err)?;
        let metric = f.spec.metric;
        let qn = keel_schema::vector::norm(query);
        let mut top = TopK::new(self.k);
        let mut floats: Vec<f32> = Vec::with_capacity(query.len());
        while let Some(r) = rows.next().map_err(err)? {
            let rowid: i64 = r.get(0).map_err(err)?;
            if keep.is_some_and(|k| !k.contains(&rowid)) {
                continue;
            }
            let Some(blob) = packed_value(r.get_ref(1).map_err(err)?, query.len()) else {
                continue;
            };
            keel_schema::vector::unpack_into(blob, &mut floats);
            top.push(Scored {
                distance: metric.distance(query, qn, &floats),
                rowid,
            });
        }
        Ok(top.into_sorted())
    }
}
