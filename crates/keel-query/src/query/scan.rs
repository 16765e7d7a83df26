//! Filters on fields without an index or column, evaluated in Rust over each row's
//! bytes instead of by an SQL function call per field and row.
//!
//! In SQL such a filter reads `keel_field(body, '…')` for every row: a call through
//! SQLite's function machinery that opens the FlatBuffer from its root and copies a
//! text result out, once per row and field. Here SQLite narrows the rows by the
//! conjuncts it answers from key columns and indexes, and the rest of the filter
//! (the *residual*) runs on each row's body as stored, with the in-memory evaluator
//! ([`crate::query::eval`], the one subscriptions use; a number field of the root
//! table is read with one vtable lookup).
//!
//! The residual runs inside the statement, as one condition
//! `keel_residual(body)` ([`RESIDUAL_FN`]): one call per row that borrows the
//! body and evaluates the whole residual, so a row that does not match never
//! becomes a result row. Handing every row out instead (`sqlite3_step` returning,
//! then a column read through rusqlite for each) cost about 400 more instructions
//! per row than the call. The statement's text names no filter: the call reads
//! the one this thread's scan set ([`ResidualGuard`]), so one cached statement
//! serves every value a filter compares with. A residual that reads a primary-key
//! field needs the whole buffer (the key put back, `layout/body.rs`) and runs on
//! the rows as they come out. Only matching rows are copied (the bytes API) or
//! decoded (typed fetches, from SQLite's buffer, see `Query::each`); with an order SQLite can give (rowid, key or indexed fields)
//! the scan stops as soon as `offset + limit` rows matched, and otherwise the
//! matches are sorted with [`Order`], the comparator that reproduces keel's SQL
//! order. The SQL-vs-memory property tests (`tests/query_semantics.rs`) hold the
//! evaluator and the SQL translation to the same answers, so both plans return the
//! same rows; [`Query::sql`](crate::query::fetch::Query::sql) still shows the all-SQL form.

use std::cell::RefCell;
use std::sync::Arc;

use keel_schema::{Expr, FieldPath, Schema, SortKey, Term, Value};
use rusqlite::functions::FunctionFlags;
use rusqlite::types::ValueRef;

use crate::base::error::{Error, Result};
use crate::base::sql_value::Param;
use crate::layout::table::Coll;
use crate::query::eval::{Filter, Order};
use crate::query::sql::{key_column, path_text};

/// What a query asks for, as far as the scan is concerned.
pub(crate) struct Ask<'a> {
    pub(crate) filter: Option<&'a Expr>,
    pub(crate) order: &'a [SortKey],
    pub(crate) offset: u64,
    pub(crate) limit: Option<u64>,
    /// The snapshot's index build epoch (`layout::ready_epoch`), if any.
    pub(crate) as_of: Option<u64>,
}

/// How a query with a filter on a field without an index runs.
pub(crate) struct Plan {
    /// The conjuncts SQL answers from key columns and indexes (`None`: all rows).
    pub(crate) sql_filter: Option<Expr>,
    /// The SQL order (`None`: sorted here, or no order needed).
    pub(crate) sql_order: Option<Vec<SortKey>>,
    /// The other conjuncts, evaluated on each row's bytes.
    residual: Arc<Filter>,
    residual_expr: Expr,
    /// The residual reads a primary-key field: it needs each row's whole buffer
    /// (`layout/body.rs`). Otherwise it reads the stored body as it is, and only the
    /// matches are restored.
    residual_reads_key: bool,
    /// The sort, when a key has no index: applied to the matches.
    order: Option<Order>,
}

/// What SQL reads without a `keel_field` call per row: the key columns, and the
/// index columns that are ready (for a snapshot: ready when it began) — exactly
/// the paths `sql::Compiler` turns into columns.
struct Cheap<'c> {
    key: &'c [u16],
    /// Path texts (`sql::path_text`, ids only) of the readable index columns.
    indexed: Vec<&'c str>,
    collection: &'c str,
}

impl<'c> Cheap<'c> {
    fn new(c: &'c Coll, as_of: Option<u64>) -> Cheap<'c> {
        Cheap {
            key: &c.key_ids,
            indexed: c
                .indexes
                .iter()
                .filter(|ix| ix.is_ready(as_of))
                .map(|ix| ix.path_text.as_str())
                .collect(),
            collection: &c.name,
        }
    }

    fn path(&self, path: &FieldPath) -> bool {
        // The empty path is relevance order (`SortKey::relevance`): SQL's.
        path.steps().is_empty()
            || key_column(self.key, path).is_some()
            || self
                .indexed
                .contains(&path_text(self.collection, path).as_str())
    }

    fn term(&self, t: &Term) -> bool {
        match t {
            Term::Field(p) => self.path(p),
            Term::Const(_) => true,
            Term::Arith(_, a, b) => self.term(a) && self.term(b),
        }
    }

    /// True if every field `e` reads is cheap.
    fn expr(&self, e: &Expr) -> bool {
        match e {
            // The full-text index answers it: one FTS5 query, not a call per row.
            Expr::True | Expr::False | Expr::Matches { .. } => true,
            Expr::Cmp { path, .. }
            | Expr::In { path, .. }
            | Expr::NotIn { path, .. }
            | Expr::UnionIs { path, .. }
            | Expr::IsNull(path)
            | Expr::IsNotNull(path) => self.path(path),
            Expr::Compare { left, right, .. } => self.term(left) && self.term(right),
            Expr::TermIsNull(t) | Expr::TermIsNotNull(t) => self.term(t),
            Expr::IsUnknown(e) | Expr::IsKnown(e) | Expr::Not(e) => self.expr(e),
            Expr::And(a, b) | Expr::Or(a, b) => self.expr(a) && self.expr(b),
        }
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

fn and_all(parts: Vec<&Expr>) -> Option<Expr> {
    parts.into_iter().cloned().reduce(|a, b| a.and(b))
}

/// The scan plan for `ask` on `c` (read with `schema`), or `None` when SQL answers
/// the whole filter from columns and indexes (or there is no filter). A row matches the split plan iff
/// the SQL part is true and the residual is true — exactly when the AND of both is
/// true, which is what the all-SQL form keeps.
pub(crate) fn plan(schema: &Arc<Schema>, c: &Coll, ask: &Ask<'_>) -> Result<Option<Plan>> {
    let Some(filter) = ask.filter else {
        return Ok(None);
    };
    let cheap = Cheap::new(c, ask.as_of);
    let mut parts = Vec::new();
    conjuncts(filter, &mut parts);
    let (sql, rest): (Vec<&Expr>, Vec<&Expr>) = parts.into_iter().partition(|e| cheap.expr(e));
    let Some(rest) = and_all(rest) else {
        return Ok(None);
    };
    let residual = Arc::new(Filter::with_schema(Arc::clone(schema), &c.name, &rest)?);
    let mut residual_reads_key = false;
    rest.visit_paths(&mut |p| residual_reads_key |= key_column(&c.key_ids, p).is_some());
    let sorted_by_sql = ask.order.iter().all(|k| cheap.path(&k.path));
    let (sql_order, order) = if sorted_by_sql {
        (Some(ask.order.to_vec()), None)
    } else {
        (
            None,
            Some(Order::with_schema(Arc::clone(schema), &c.name, ask.order)?),
        )
    };
    Ok(Some(Plan {
        sql_filter: and_all(sql),
        sql_order,
        residual,
        residual_expr: rest,
        residual_reads_key,
        order,
    }))
}

/// `offset` and `limit` of a query as counts (`first` caps the limit at one).
fn paging(ask: &Ask<'_>, first: bool) -> (usize, usize) {
    let offset = usize::try_from(ask.offset).unwrap_or(usize::MAX);
    let mut limit = ask
        .limit
        .map_or(usize::MAX, |l| usize::try_from(l).unwrap_or(usize::MAX));
    if first {
        limit = limit.min(1);
    }
    (offset, limit)
}

/// Step through `sql`'s rows (`rowid` and `Coll::body`'s columns), calling `each`
/// with the rowid and the bytes (borrowed from SQLite, not copied) of every row the
/// residual filter keeps; `each` returns `Ok(false)` to stop. `whole`: `each` reads
/// the bytes, so a body stored without its key string is restored (`layout/body.rs`);
/// otherwise it gets them as stored.
fn for_each_match(
    conn: &rusqlite::Connection,
    c: &Coll,
    op: &'static str,
    (sql, params): (&str, &[Value]),
    (plan, whole): (&Plan, bool),
    mut each: impl FnMut(i64, &[u8]) -> Result<bool>,
) -> Result<()> {
    let err = |e| Error::sqlite(op, &c.name, e);
    let mut st = conn.prepare_cached(sql).map_err(err)?;
    // Set before the first step, while this scan's statement runs: a nested
    // scan (from `each`) sets its own and puts this one back.
    let _residual = plan.in_sql().then(|| ResidualGuard::set(&plan.residual));
    let mut rows = st
        .query(rusqlite::params_from_iter(params.iter().map(Param)))
        .map_err(err)?;
    let mut scratch = Vec::new();
    while let Some(r) = rows.next().map_err(err)? {
        let stored = match r.get_ref(1).map_err(err)? {
            ValueRef::Blob(b) => b,
            _ => &[],
        };
        let bytes = if whole || plan.residual_reads_key {
            c.body.restore(stored, r, 1, &mut scratch).map_err(err)?
        } else {
            stored
        };
        if plan.residual_reads_key && !plan.residual.matches(bytes) {
            continue;
        }
        let rowid: i64 = r.get(0).map_err(err)?;
        if !each(rowid, bytes)? {
            break;
        }
    }
    Ok(())
}

/// The SQL function a [`Plan`] runs its residual filter through:
/// `keel_residual(body)` is 1 when the body matches the filter the current scan on
/// this thread set ([`ResidualGuard`]), else 0.
pub(crate) const RESIDUAL_FN: &str = "keel_residual";

thread_local! {
    /// The residual filter of the scan stepping on this thread.
    static RESIDUAL: RefCell<Option<Arc<Filter>>> = const { RefCell::new(None) };
}

/// Sets this thread's residual filter for as long as it lives, and puts back the
/// one before (a scan started from inside another scan's callback).
struct ResidualGuard(Option<Arc<Filter>>);

impl ResidualGuard {
    fn set(filter: &Arc<Filter>) -> ResidualGuard {
        ResidualGuard(RESIDUAL.with(|r| r.replace(Some(Arc::clone(filter)))))
    }
}

impl Drop for ResidualGuard {
    fn drop(&mut self) {
        let before = self.0.take();
        RESIDUAL.with(|r| *r.borrow_mut() = before);
    }
}

/// Register [`RESIDUAL_FN`] on `conn` (every connection keel opens). Called with
/// no scan running on the thread (a statement written by hand), it fails rather
/// than match every row.
pub(crate) fn register(conn: &rusqlite::Connection) -> rusqlite::Result<()> {
    conn.create_scalar_function(
        RESIDUAL_FN,
        1,
        FunctionFlags::SQLITE_UTF8 | FunctionFlags::SQLITE_DIRECTONLY,
        |ctx| {
            let body = match ctx.get_raw(0) {
                ValueRef::Blob(b) => b,
                _ => &[],
            };
            RESIDUAL.with(|r| match &*r.borrow() {
                Some(f) => Ok(f.matches(body)),
                None => Err(rusqlite::Error::UserFunctionError(
                    format!("{RESIDUAL_FN}() runs only inside a keel scan").into(),
                )),
            })
        },
    )
}

impl Plan {
    /// Whether the residual runs in SQL ([`RESIDUAL_FN`]): unless it reads a
    /// primary-key field, which only the whole buffer holds.
    pub(crate) fn in_sql(&self) -> bool {
        !self.residual_reads_key
    }

    /// Hand the matching rows of `sql` (built from this plan's SQL filter and
    /// order, without paging), after `ask`'s offset and limit, to `sink` in order.
    /// The bytes are borrowed from SQLite unless keel sorts the matches itself.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn each(
        &self,
        conn: &rusqlite::Connection,
        c: &Coll,
        op: &'static str,
        (sql, params): (&str, &[Value]),
        ask: &Ask<'_>,
        first: bool,
        sink: &mut dyn FnMut(i64, &[u8]) -> Result<bool>,
    ) -> Result<()> {
        let (offset, limit) = paging(ask, first);
        if limit == 0 {
            return Ok(());
        }
        match &self.order {
            None => {
                // SQL gives the order: stop once the page is full.
                let (mut skip, mut taken) = (offset, 0usize);
                for_each_match(conn, c, op, (sql, params), (self, true), |rowid, b| {
                    if skip > 0 {
                        skip -= 1;
                        return Ok(true);
                    }
                    taken += 1;
                    Ok(sink(rowid, b)? && taken < limit)
                })
            }
            Some(order) => {
                let mut keyed = Vec::new();
                for_each_match(conn, c, op, (sql, params), (self, true), |rowid, b| {
                    keyed.push((order.key(b, rowid), b.to_vec()));
                    Ok(true)
                })?;
                keyed.sort_by(|a, b| order.compare(&a.0, &b.0));
                for (k, bytes) in keyed.into_iter().skip(offset).take(limit) {
                    if !sink(k.rowid, &bytes)? {
                        break;
                    }
                }
                Ok(())
            }
        }
    }

    /// The `keel: …` line of [`Query::explain`](crate::query::fetch::Query::explain).
    pub(crate) fn describe(&self) -> String {
        format!(
            "keel: filter {} on each row's bytes{}",
            self.residual_expr,
            if self.order.is_some() {
                ", then sort the matches"
            } else {
                ""
            }
        )
    }

    /// The number of matching rows after `ask`'s offset and limit (what
    /// `SELECT count(*) FROM (… LIMIT n OFFSET m)` counts).
    pub(crate) fn count(
        &self,
        conn: &rusqlite::Connection,
        c: &Coll,
        (sql, params): (&str, &[Value]),
        ask: &Ask<'_>,
    ) -> Result<u64> {
        let (offset, limit) = paging(ask, false);
        let mut n = 0usize;
        for_each_match(conn, c, "count", (sql, params), (self, false), |_, _| {
            n += 1;
            Ok(n < offset.saturating_add(limit))
        })?;
        Ok(u64::try_from(n.saturating_sub(offset).min(limit)).unwrap_or(u64::MAX))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const FBS: &str = "attribute \"primary\"; attribute \"indexed\";
        table I { w: int (indexed); x: int; } union U { I }
        table T { id: string (primary); p: int (indexed); n: int; u: U; } root_type T;";

    fn coll() -> (Schema, Coll) {
        let s = Schema::parse(FBS, "t.fbs").unwrap();
        let c = Coll::new(&s, 0).unwrap();
        for ix in &c.indexes {
            ix.mark_ready_at_open();
        }
        (s, c)
    }

    #[test]
    fn key_and_indexed_fields_stay_in_sql_the_rest_is_residual() {
        let (s, c) = coll();
        let cheap = Cheap::new(&c, None);
        let t = s.reader("T").unwrap();
        let (id, p, n, w, x) = (
            t.path("id").unwrap(),
            t.path("p").unwrap(),
            t.path("n").unwrap(),
            t.path("u.I.w").unwrap(),
            t.path("u.I.x").unwrap(),
        );
        assert!(cheap.path(&id) && cheap.path(&p) && cheap.path(&w));
        assert!(!cheap.path(&n) && !cheap.path(&x));
        // An index column still being built is read from the bytes, here.
        let building = Coll::new(&s, 0).unwrap();
        let cheap_now = Cheap::new(&building, None);
        assert!(cheap_now.path(&id) && !cheap_now.path(&p));
        let e = Expr::eq(id.clone(), "a")
            .and(Expr::gt(n.clone(), 1))
            .and(Expr::lt(p.clone(), 5).or(Expr::eq(n.clone(), 3)));
        let mut parts = Vec::new();
        conjuncts(&e, &mut parts);
        let cheap_parts: Vec<bool> = parts.iter().map(|e| cheap.expr(e)).collect();
        // `p < 5 OR n = 3` reads `n`: the whole disjunct is evaluated here.
        assert_eq!(cheap_parts, [true, false, false]);
    }
}
