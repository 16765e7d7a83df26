//! In-memory evaluation of [`Expr`] and SQLite's ORDER BY order, exactly as the
//! SQL that keel generates computes them.
//!
//! keel answers a query two ways: [`Query`](crate::query::fetch::Query) compiles the `Expr` to
//! SQL and SQLite runs it; the subscription hub evaluates the same `Expr` on each
//! changed object in memory. Both must agree on every object, so this module
//! implements SQLite's rules rather than Rust's:
//!
//! * **Three-valued logic.** A comparison with `NULL` (an absent string, table or
//!   optional scalar, or a path through an absent table or another union member) is
//!   *unknown* (`None`). `NOT unknown` is unknown; `unknown AND false` is false;
//!   `unknown OR true` is true. A row matches only when the filter is `Some(true)`.
//! * **Values.** `Bool` compares as the integer 0/1; `Int` and `Float` compare
//!   numerically and exactly (`2 == 2.0`, `i64::MAX > 9.2e18`); a NaN float is
//!   `NULL` (SQLite stores NaN as NULL). Across storage classes
//!   `numbers < text < blobs`; text compares by UTF-8 bytes (SQLite's `BINARY`).
//! * **`IN`.** `x IN ()` is false and `x NOT IN ()` true, even for a `NULL` `x`;
//!   otherwise a `NULL` `x`, or no match with a `NULL` in the list, is unknown.
//! * **Union membership** (`content is Image`) is never unknown: false when the
//!   union is empty or holds another member.
//! * **Order.** `NULL` sorts first ascending and last descending; ties go to the next
//!   key and finally to the rowid, in the direction of the last key (ascending if
//!   there are no keys), so the order is total and identical to SQL's.
//!
//! ```
//! use keel_query::eval::Filter;
//! use keel_schema::{Expr, Schema, Value};
//! let schema = Schema::parse(
//!     "table Post { id: string (primary); rating: double = null; } root_type Post;", "p.fbs")?;
//! let posts = schema.reader("Post").unwrap();
//! let rating = posts.path("rating").unwrap();
//! let unrated = posts.encode_json(&serde_json::json!({"id": "a"})).unwrap();
//! let f = Filter::new(&schema, "Post", &Expr::gt(rating.clone(), 3))?;
//! assert_eq!(f.eval_bytes(&unrated), None); // NULL > 3 is unknown
//! let f = Filter::new(&schema, "Post", &!Expr::gt(rating, 3))?;
//! assert_eq!(f.eval_bytes(&unrated), None); // and so is its negation
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

use std::cmp::Ordering;
use std::sync::Arc;

use keel_schema::{
    ArithOp, CmpOp, DynamicTable, Expr, FieldPath, Object, ResolvedPath, RootScalar, Schema,
    SortKey, Term, Value,
};

use crate::base::error::{Error, Result};
use crate::base::sql_value::{and3, holds, or3};
use crate::search::language;
use crate::search::language::SearchQuery;
use crate::search::language::SearchSql;

pub use crate::base::sql_value::{arith, compare, in_list, order_cmp, SqlValue};

#[derive(Debug, Clone)]
enum TNode {
    Path(usize),
    Const(Value),
    Arith(ArithOp, Box<TNode>, Box<TNode>),
}

#[derive(Debug, Clone)]
enum Node {
    Const(bool),
    Cmp(usize, CmpOp, Value),
    In(usize, Vec<Value>),
    NotIn(usize, Vec<Value>),
    IsNull(usize),
    IsNotNull(usize),
    UnionIs(usize, i64),
    Compare(TNode, CmpOp, TNode),
    TermIsNull(TNode, bool),
    IsUnknown(Box<Node>, bool),
    And(Box<Node>, Box<Node>),
    Or(Box<Node>, Box<Node>),
    Not(Box<Node>),
    /// Full-text search: the collection's searchable fields (`ids`: the one
    /// searched, or all), and the parsed query.
    Matches(Arc<TextMatch>),
}

#[derive(Debug)]
struct TextMatch {
    search: SearchSql,
    ids: Option<Vec<u16>>,
    query: SearchQuery,
}

/// Resolves a path against a collection's table, with a typed error.
/// Arithmetic takes numbers only: a string, blob or table operand is a
/// `TypeMismatch` (SQLite would silently convert it).
fn check_arith_operand(
    coll: &str,
    in_arith: bool,
    numeric: bool,
    what: impl FnOnce() -> String,
) -> Result<()> {
    if in_arith && !numeric {
        return Err(Error::TypeMismatch {
            op: "compile filter",
            collection: coll.to_owned(),
            message: format!(
                "{} is not a number: arithmetic takes integer, float, bool and enum fields and numeric constants",
                what()
            ),
        });
    }
    Ok(())
}

pub(crate) fn resolve(
    table: DynamicTable<'_>,
    collection: &str,
    op: &'static str,
    path: &FieldPath,
) -> Result<ResolvedPath> {
    table.resolve(path).map_err(|e| Error::UnknownField {
        op,
        collection: collection.to_owned(),
        message: e.to_string(),
    })
}

fn table_of<'s>(
    schema: &'s Schema,
    collection: &str,
    op: &'static str,
) -> Result<(String, DynamicTable<'s>)> {
    let c = schema
        .collection(collection)
        .ok_or_else(|| Error::UnknownCollection {
            op,
            collection: collection.to_owned(),
        })?;
    let t = schema
        .table_reader(c.table)
        .ok_or_else(|| Error::UnknownCollection {
            op,
            collection: collection.to_owned(),
        })?;
    Ok((c.name.clone(), t))
}

/// An [`Expr`] compiled against one collection for fast in-memory evaluation.
/// Cheap to clone; `Send + Sync`.
#[derive(Debug, Clone)]
pub struct Filter {
    schema: Arc<Schema>,
    table: usize,
    paths: Vec<ResolvedPath>,
    /// `paths` compiled for a direct read, when every one is a scalar field of
    /// the root table (the usual filter of a scan).
    fast: Option<Vec<RootScalar>>,
    /// The filter when it is `field <op> constant` on such a field.
    quick: Option<Quick>,
    root: Node,
}

/// `field <op> value`, the field a scalar of the root table.
#[derive(Debug, Clone)]
struct Quick {
    field: RootScalar,
    op: CmpOp,
    value: Value,
}

impl Filter {
    /// Compile `expr` for objects of `collection`. Unknown paths are an
    /// [`Error::UnknownField`].
    ///
    /// ```
    /// use keel_query::eval::Filter;
    /// use keel_schema::{Expr, FieldPath, Schema};
    /// let schema = Schema::parse("table T { a: int; } root_type T;", "t.fbs")?;
    /// let bad = Filter::new(&schema, "T", &Expr::eq(FieldPath::field(9, "nope"), 1));
    /// assert!(bad.is_err());
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn new(schema: &Schema, collection: &str, expr: &Expr) -> Result<Filter> {
        Filter::with_schema(Arc::new(schema.clone()), collection, expr)
    }

    /// Like [`Filter::new`], sharing an existing `Arc<Schema>`.
    pub fn with_schema(schema: Arc<Schema>, collection: &str, expr: &Expr) -> Result<Filter> {
        let (name, table) = table_of(&schema, collection, "compile filter")?;
        let mut paths: Vec<ResolvedPath> = Vec::new();
        let root = Self::build(table, &name, expr, &mut paths)?;
        let ti = schema.collection(&name).map(|c| c.table).unwrap_or(0);
        let fast: Option<Vec<RootScalar>> = paths.iter().map(ResolvedPath::root_scalar).collect();
        let quick = match (&fast, &root) {
            (Some(f), Node::Cmp(i, op, value)) => Some(Quick {
                field: f[*i].clone(),
                op: *op,
                value: value.clone(),
            }),
            _ => None,
        };
        Ok(Filter {
            schema,
            table: ti,
            paths,
            fast,
            quick,
            root,
        })
    }

    fn build_term(
        t: DynamicTable<'_>,
        coll: &str,
        term: &Term,
        in_arith: bool,
        paths: &mut Vec<ResolvedPath>,
    ) -> Result<TNode> {
        Ok(match term {
            Term::Field(path) => {
                let r = resolve(t, coll, "compile filter", path)?;
                check_arith_operand(coll, in_arith, r.is_numeric(), || path.to_string())?;
                if let Some(i) = paths.iter().position(|x| x.path() == path) {
                    TNode::Path(i)
                } else {
                    paths.push(r);
                    TNode::Path(paths.len() - 1)
                }
            }
            Term::Const(v) => {
                let numeric = matches!(
                    v,
                    Value::Null | Value::Bool(_) | Value::Int(_) | Value::Float(_)
                );
                check_arith_operand(coll, in_arith, numeric, || v.to_string())?;
                TNode::Const(v.clone())
            }
            Term::Arith(op, a, b) => TNode::Arith(
                *op,
                Box::new(Self::build_term(t, coll, a, true, paths)?),
                Box::new(Self::build_term(t, coll, b, true, paths)?),
            ),
        })
    }

    fn build(
        t: DynamicTable<'_>,
        coll: &str,
        e: &Expr,
        paths: &mut Vec<ResolvedPath>,
    ) -> Result<Node> {
        match e {
            Expr::Compare { left, op, right } => {
                return Ok(Node::Compare(
                    Self::build_term(t, coll, left, false, paths)?,
                    *op,
                    Self::build_term(t, coll, right, false, paths)?,
                ))
            }
            Expr::TermIsNull(x) => {
                return Ok(Node::TermIsNull(
                    Self::build_term(t, coll, x, false, paths)?,
                    false,
                ))
            }
            Expr::TermIsNotNull(x) => {
                return Ok(Node::TermIsNull(
                    Self::build_term(t, coll, x, false, paths)?,
                    true,
                ))
            }
            Expr::IsUnknown(x) => {
                return Ok(Node::IsUnknown(
                    Box::new(Self::build(t, coll, x, paths)?),
                    false,
                ))
            }
            Expr::IsKnown(x) => {
                return Ok(Node::IsUnknown(
                    Box::new(Self::build(t, coll, x, paths)?),
                    true,
                ))
            }
            _ => {}
        }
        if let Expr::Matches { path, query } = e {
            return Ok(Node::Matches(Arc::new(Self::build_match(
                t,
                coll,
                path.as_ref(),
                query,
            )?)));
        }
        let mut p = |path: &FieldPath| -> Result<usize> {
            if let Some(i) = paths.iter().position(|r| r.path() == path) {
                return Ok(i);
            }
            paths.push(resolve(t, coll, "compile filter", path)?);
            Ok(paths.len() - 1)
        };
        Ok(match e {
            Expr::True => Node::Const(true),
            Expr::False => Node::Const(false),
            Expr::Cmp { path, op, value } => Node::Cmp(p(path)?, *op, value.clone()),
            Expr::In { path, values } => Node::In(p(path)?, values.clone()),
            Expr::NotIn { path, values } => Node::NotIn(p(path)?, values.clone()),
            Expr::IsNull(path) => Node::IsNull(p(path)?),
            Expr::IsNotNull(path) => Node::IsNotNull(p(path)?),
            Expr::UnionIs { path, member, .. } => Node::UnionIs(p(path)?, *member as i64),
            Expr::And(a, b) => Node::And(
                Box::new(Self::build(t, coll, a, paths)?),
                Box::new(Self::build(t, coll, b, paths)?),
            ),
            Expr::Or(a, b) => Node::Or(
                Box::new(Self::build(t, coll, a, paths)?),
                Box::new(Self::build(t, coll, b, paths)?),
            ),
            Expr::Not(a) => Node::Not(Box::new(Self::build(t, coll, a, paths)?)),
            Expr::Compare { .. }
            | Expr::Matches { .. }
            | Expr::TermIsNull(_)
            | Expr::TermIsNotNull(_)
            | Expr::IsUnknown(_)
            | Expr::IsKnown(_) => unreachable!("handled above"),
        })
    }

    fn build_match(
        t: DynamicTable<'_>,
        coll: &str,
        path: Option<&FieldPath>,
        query: &str,
    ) -> Result<TextMatch> {
        let search = SearchSql::of(coll, t.table()).ok_or_else(|| Error::TypeMismatch {
            op: "compile filter",
            collection: coll.to_owned(),
            message: "full-text search needs a field marked (searchable); this collection has none"
                .into(),
        })?;
        let ids = match path {
            None => None,
            Some(p) => {
                let id = language::searched_field(&search, coll, p)?;
                Some(vec![id])
            }
        };
        let query = SearchQuery::parse(query)?;
        Ok(TextMatch { search, ids, query })
    }

    fn eval_term<'x>(&'x self, t: &'x TNode, get: &dyn Fn(usize) -> SqlValue<'x>) -> SqlValue<'x> {
        match t {
            TNode::Path(i) => get(*i),
            TNode::Const(v) => SqlValue::from_value(v),
            TNode::Arith(op, a, b) => arith(*op, self.eval_term(a, get), self.eval_term(b, get)),
        }
    }

    /// Evaluate on an object's bytes: `Some(true)` matches, `Some(false)` does not,
    /// `None` is SQL's unknown (does not match either). Bytes whose root cannot be
    /// read behave like an object whose every field is `NULL` — as in SQL.
    pub fn eval_bytes(&self, bytes: &[u8]) -> Option<bool> {
        if let Some(fast) = &self.fast {
            // Each field read with one vtable lookup, no object opened: the same
            // values as below (a read that fails is NULL either way), at a
            // fraction of the cost per row of a scan.
            let get = |i: usize| {
                fast[i]
                    .read(bytes)
                    .map_or(SqlValue::Null, SqlValue::from_ref)
            };
            return self.eval_node(&self.root, &get, bytes);
        }
        let t = self.schema.table_reader(self.table)?;
        match t.open(bytes) {
            Ok(obj) => self.eval(&obj),
            Err(_) => self.eval_node(&self.root, &|_| SqlValue::Null, bytes),
        }
    }

    /// `eval_bytes(bytes) == Some(true)`.
    #[inline]
    pub fn matches(&self, bytes: &[u8]) -> bool {
        // The usual filter of a scan, without the evaluator's indirections: the
        // same answer as `eval_bytes` (a field that cannot be read is NULL, and a
        // comparison with NULL is unknown: no match).
        if let Some(q) = &self.quick {
            let Ok(x) = q.field.read(bytes) else {
                return false;
            };
            let (x, c) = (SqlValue::from_ref(x), SqlValue::from_value(&q.value));
            return match (x, c) {
                (SqlValue::Int(a), SqlValue::Int(b)) => holds(q.op, a.cmp(&b)),
                _ => compare(x, q.op, c) == Some(true),
            };
        }
        self.eval_bytes(bytes) == Some(true)
    }

    /// Evaluate on an object opened by the dynamic reader.
    pub fn eval(&self, obj: &Object<'_, '_>) -> Option<bool> {
        let get = |i: usize| {
            obj.get_ref(&self.paths[i])
                .map_or(SqlValue::Null, SqlValue::from_ref)
        };
        self.eval_node(&self.root, &get, obj.bytes())
    }

    fn eval_node<'b>(
        &self,
        n: &Node,
        get: &dyn Fn(usize) -> SqlValue<'b>,
        bytes: &[u8],
    ) -> Option<bool> {
        match n {
            Node::Const(b) => Some(*b),
            Node::Cmp(i, op, v) => compare(get(*i), *op, SqlValue::from_value(v)),
            Node::In(i, vs) => {
                let list: Vec<SqlValue<'_>> = vs.iter().map(SqlValue::from_value).collect();
                in_list(get(*i), &list)
            }
            Node::NotIn(i, vs) => {
                let list: Vec<SqlValue<'_>> = vs.iter().map(SqlValue::from_value).collect();
                in_list(get(*i), &list).map(|b| !b)
            }
            Node::IsNull(i) => Some(get(*i) == SqlValue::Null),
            Node::IsNotNull(i) => Some(get(*i) != SqlValue::Null),
            Node::UnionIs(i, m) => Some(match get(*i) {
                SqlValue::Int(t) => t == *m,
                _ => *m == 0,
            }),
            Node::Compare(l, op, r) => {
                let g = |i: usize| -> SqlValue<'_> { get(i) };
                compare(self.eval_term(l, &g), *op, self.eval_term(r, &g))
            }
            Node::TermIsNull(x, negated) => {
                let g = |i: usize| -> SqlValue<'_> { get(i) };
                Some((self.eval_term(x, &g) == SqlValue::Null) != *negated)
            }
            Node::IsUnknown(e, negated) => {
                Some(self.eval_node(e, get, bytes).is_none() != *negated)
            }
            Node::And(a, b) => and3(self.eval_node(a, get, bytes), || {
                self.eval_node(b, get, bytes)
            }),
            Node::Or(a, b) => or3(self.eval_node(a, get, bytes), || {
                self.eval_node(b, get, bytes)
            }),
            Node::Not(a) => self.eval_node(a, get, bytes).map(|b| !b),
            // As FTS5 answers for the row: true or false, never unknown.
            Node::Matches(m) => Some(m.query.matches(&language::token_columns(
                &m.search,
                m.ids.as_deref(),
                bytes,
            ))),
        }
    }
}

/// [`SortKey`]s compiled against one collection: computes sort keys of objects and
/// compares them in exactly the order keel's SQL returns rows.
///
/// ```
/// use keel_query::eval::Order;
/// use keel_schema::{Schema, SortKey};
/// let schema = Schema::parse("table T { a: int = null; } root_type T;", "t.fbs")?;
/// let t = schema.reader("T").unwrap();
/// let order = Order::new(&schema, "T", &[SortKey::asc(t.path("a").unwrap())])?;
/// let null = order.key(&t.encode_json(&serde_json::json!({})).unwrap(), 2);
/// let five = order.key(&t.encode_json(&serde_json::json!({"a": 5})).unwrap(), 1);
/// assert!(order.compare(&null, &five).is_lt()); // NULLs first ascending
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug, Clone)]
pub struct Order {
    schema: Arc<Schema>,
    table: usize,
    keys: Vec<(ResolvedPath, bool)>,
    /// The original keys (for list-ordered ones).
    sort: Vec<SortKey>,
}

/// The sort key of one object: its values for each [`SortKey`] and its rowid.
#[derive(Debug, Clone, PartialEq)]
pub struct RowKey {
    /// Normalised values (no `Bool`, no NaN), one per sort key.
    pub values: Vec<Value>,
    /// The row's rowid (final tie-break).
    pub rowid: i64,
}

impl Order {
    /// Compile `keys` for `collection`.
    pub fn new(schema: &Schema, collection: &str, keys: &[SortKey]) -> Result<Order> {
        Order::with_schema(Arc::new(schema.clone()), collection, keys)
    }

    /// Like [`Order::new`], sharing an existing `Arc<Schema>`.
    pub fn with_schema(schema: Arc<Schema>, collection: &str, keys: &[SortKey]) -> Result<Order> {
        let keys_in = keys;
        if keys.iter().any(SortKey::is_relevance) {
            // bm25 needs the whole index's statistics: only SQL (a fetch) ranks.
            return Err(Error::InvalidSearch {
                query: String::new(),
                offset: 0,
                message: "relevance order is computed by the full-text index: fetches can order by it, an in-memory order (a subscription) cannot yet".into(),
            });
        }
        let (name, t) = table_of(&schema, collection, "compile order")?;
        let keys = keys
            .iter()
            .map(|k| Ok((resolve(t, &name, "compile order", &k.path)?, k.descending)))
            .collect::<Result<Vec<_>>>()?;
        let table = schema.collection(&name).map(|c| c.table).unwrap_or(0);
        Ok(Order {
            schema,
            table,
            keys,
            sort: keys_in.to_vec(),
        })
    }

    /// True if the rowid tie-break is descending (the last key is descending).
    pub fn rowid_descending(&self) -> bool {
        self.keys.last().is_some_and(|k| k.1)
    }

    /// The sort key of an object.
    pub fn key(&self, bytes: &[u8], rowid: i64) -> RowKey {
        if self.keys.is_empty() {
            // Rowid order: nothing to read from the object.
            return RowKey {
                values: Vec::new(),
                rowid,
            };
        }
        let obj = self
            .schema
            .table_reader(self.table)
            .and_then(|t| t.open(bytes).ok());
        let values = self
            .keys
            .iter()
            .zip(&self.sort)
            .map(|((p, _), k)| {
                let v = match &obj {
                    Some(o) => o.get_ref(p).map_or(SqlValue::Null, SqlValue::from_ref),
                    None => SqlValue::Null,
                };
                match &k.list {
                    // The CASE of the SQL: the first list entry equal to the value.
                    Some(l) => {
                        let index = l.values.iter().position(|x| {
                            compare(v, CmpOp::Eq, SqlValue::from_value(x)) == Some(true)
                        });
                        Value::Int(k.list_rank(index).unwrap_or(0))
                    }
                    None => v.to_value(),
                }
            })
            .collect();
        RowKey { values, rowid }
    }

    /// Whether the first sort key is descending (`None`: the order has no key
    /// but the rowid).
    pub(crate) fn first_descending(&self) -> Option<bool> {
        self.keys.first().map(|k| k.1)
    }

    /// SQL's order of two rows (total: ties end on rowid).
    pub fn compare(&self, a: &RowKey, b: &RowKey) -> Ordering {
        for (i, (_, desc)) in self.keys.iter().enumerate() {
            let (x, y) = (a.values.get(i), b.values.get(i));
            let o = match (x, y) {
                (Some(x), Some(y)) => order_cmp(SqlValue::from_value(x), SqlValue::from_value(y)),
                _ => Ordering::Equal,
            };
            let o = if *desc { o.reverse() } else { o };
            if o != Ordering::Equal {
                return o;
            }
        }
        let o = a.rowid.cmp(&b.rowid);
        if self.rowid_descending() {
            o.reverse()
        } else {
            o
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::base::sql_value::Param;

    #[test]
    fn three_valued() {
        assert_eq!(and3(None, || Some(false)), Some(false));
        assert_eq!(and3(None, || Some(true)), None);
        assert_eq!(or3(None, || Some(true)), Some(true));
        assert_eq!(or3(None, || Some(false)), None);
        assert_eq!(in_list(SqlValue::Null, &[]), Some(false));
        assert_eq!(
            in_list(SqlValue::Int(1), &[SqlValue::Float(1.0)]),
            Some(true)
        );
    }

    /// `arith` against SQLite itself on every pair of awkward numbers.
    #[test]
    fn arithmetic_matches_sqlite() {
        let conn = rusqlite::Connection::open_in_memory().unwrap();
        let nums = [
            Value::Null,
            Value::Int(0),
            Value::Int(1),
            Value::Int(-1),
            Value::Int(7),
            Value::Int(-7),
            Value::Int(i64::MAX),
            Value::Int(i64::MIN),
            Value::Bool(true),
            Value::Float(0.0),
            Value::Float(-0.0),
            Value::Float(2.5),
            Value::Float(-2.5),
            Value::Float(0.4),
            Value::Float(1e300),
            Value::Float(f64::INFINITY),
            Value::Float(f64::NEG_INFINITY),
            Value::Float(9.3e18),
            Value::Float(-9.3e18),
        ];
        for op in [
            ArithOp::Add,
            ArithOp::Sub,
            ArithOp::Mul,
            ArithOp::Div,
            ArithOp::Rem,
        ] {
            let sql = format!("SELECT ?1 {} ?2", op.symbol());
            for a in &nums {
                for b in &nums {
                    let got: rusqlite::types::Value = conn
                        .query_row(&sql, [Param(a), Param(b)], |r| r.get(0))
                        .unwrap();
                    let want = arith(op, SqlValue::from_value(a), SqlValue::from_value(b));
                    let same = match (&got, want) {
                        (rusqlite::types::Value::Null, SqlValue::Null) => true,
                        (rusqlite::types::Value::Integer(x), SqlValue::Int(y)) => *x == y,
                        (rusqlite::types::Value::Real(x), SqlValue::Float(y)) => {
                            x.to_bits() == y.to_bits() || x == &y
                        }
                        _ => false,
                    };
                    assert!(
                        same,
                        "{a} {} {b}: SQLite {got:?}, keel {want:?}",
                        op.symbol()
                    );
                }
            }
        }
    }

    #[test]
    fn class_order() {
        assert!(order_cmp(SqlValue::Int(i64::MAX), SqlValue::Text("")).is_lt());
        assert!(order_cmp(SqlValue::Text("zz"), SqlValue::Blob(b"")).is_lt());
        assert!(order_cmp(SqlValue::Null, SqlValue::Float(f64::NEG_INFINITY)).is_lt());
    }
}
