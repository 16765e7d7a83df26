//! [`Expr`]: the query tree, and [`SortKey`]: result ordering.
//!
//! A query is pure data: predicates over [`FieldPath`]s compared with [`Value`]s,
//! combined with `And`, `Or` and `Not`. The query layer compiles an `Expr` to SQL
//! (over keel's field-reading SQL function) and also evaluates it in memory for
//! subscriptions; both follow SQL's three-valued logic, where a comparison with an
//! absent (`Null`) field is unknown and so does not match.
//!
//! Generated code builds expressions through typed [`Field`](crate::field::Field) handles
//! (`Post::priority().gt(100)`); the FFI builds them directly.
//!
//! ```
//! use keel_schema::{Expr, FieldPath, Value};
//! let priority = FieldPath::field(1, "priority");
//! let title = FieldPath::field(0, "title");
//! let q = Expr::gt(priority, 100) & !Expr::eq(title, "draft");
//! assert_eq!(q.to_string(), "(priority > 100 AND NOT (title == \"draft\"))");
//! ```

use std::fmt;
use std::ops;

use crate::path::FieldPath;
use crate::value::Value;

/// A comparison operator.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum CmpOp {
    /// `==`
    Eq,
    /// `!=`
    Ne,
    /// `<`
    Lt,
    /// `<=`
    Le,
    /// `>`
    Gt,
    /// `>=`
    Ge,
}

impl CmpOp {
    /// The operator as written in keel's query text (`==`, `<`, …).
    pub fn symbol(self) -> &'static str {
        match self {
            CmpOp::Eq => "==",
            CmpOp::Ne => "!=",
            CmpOp::Lt => "<",
            CmpOp::Le => "<=",
            CmpOp::Gt => ">",
            CmpOp::Ge => ">=",
        }
    }
}

/// An arithmetic operator of a [`Term`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ArithOp {
    /// `+`
    Add,
    /// `-`
    Sub,
    /// `*`
    Mul,
    /// `/` (integer division truncates toward zero; by zero is `Null`)
    Div,
    /// `%` (remainder; by zero is `Null`)
    Rem,
}

impl ArithOp {
    /// The operator as written in keel's query text.
    pub fn symbol(self) -> &'static str {
        match self {
            ArithOp::Add => "+",
            ArithOp::Sub => "-",
            ArithOp::Mul => "*",
            ArithOp::Div => "/",
            ArithOp::Rem => "%",
        }
    }
}

/// A value computed from one object: a field, a constant, or arithmetic on two
/// terms. Arithmetic follows SQLite exactly (in SQL and in memory): integers stay
/// integers unless a result overflows (then it is computed in floating point), any
/// float operand makes the result a float, `%` of floats works on their integer
/// parts, division or remainder by zero and a NaN result are `Null`, and a `Null`
/// operand makes the result `Null`. Only numeric fields (integers, floats, bools,
/// enums) may take part.
///
/// ```
/// use keel_schema::{Expr, FieldPath, Term};
/// let mana = Term::field(FieldPath::field(1, "mana"));
/// let hp = Term::field(FieldPath::field(2, "hp"));
/// let q = (mana + hp).gt(150);
/// assert_eq!(q.to_string(), "(mana + hp) > 150");
/// ```
#[derive(Debug, Clone, PartialEq)]
pub enum Term {
    /// The value of a field.
    Field(FieldPath),
    /// A constant.
    Const(Value),
    /// `left <op> right`.
    Arith(ArithOp, Box<Term>, Box<Term>),
}

impl Term {
    /// The value of the field at `path`.
    pub fn field(path: FieldPath) -> Term {
        Term::Field(path)
    }
    /// A constant.
    pub fn constant(v: impl Into<Value>) -> Term {
        Term::Const(v.into())
    }
    /// `self <op> other`.
    pub fn arith(self, op: ArithOp, other: impl Into<Term>) -> Term {
        Term::Arith(op, Box::new(self), Box::new(other.into()))
    }
    /// `self <op> other` as a predicate.
    pub fn cmp(self, op: CmpOp, other: impl Into<Term>) -> Expr {
        Expr::Compare {
            left: self,
            op,
            right: other.into(),
        }
    }
    /// `self == other`.
    pub fn eq(self, other: impl Into<Term>) -> Expr {
        self.cmp(CmpOp::Eq, other)
    }
    /// `self != other`.
    pub fn ne(self, other: impl Into<Term>) -> Expr {
        self.cmp(CmpOp::Ne, other)
    }
    /// `self < other`.
    pub fn lt(self, other: impl Into<Term>) -> Expr {
        self.cmp(CmpOp::Lt, other)
    }
    /// `self <= other`.
    pub fn le(self, other: impl Into<Term>) -> Expr {
        self.cmp(CmpOp::Le, other)
    }
    /// `self > other`.
    pub fn gt(self, other: impl Into<Term>) -> Expr {
        self.cmp(CmpOp::Gt, other)
    }
    /// `self >= other`.
    pub fn ge(self, other: impl Into<Term>) -> Expr {
        self.cmp(CmpOp::Ge, other)
    }
    /// The term is `Null` (an absent field, a `Null` operand, division by zero).
    pub fn is_null(self) -> Expr {
        Expr::TermIsNull(self)
    }
    /// The term is not `Null`.
    pub fn is_not_null(self) -> Expr {
        Expr::TermIsNotNull(self)
    }

    /// Calls `f` on every field path this term reads.
    pub fn visit_paths(&self, f: &mut impl FnMut(&FieldPath)) {
        match self {
            Term::Field(p) => f(p),
            Term::Const(_) => {}
            Term::Arith(_, a, b) => {
                a.visit_paths(f);
                b.visit_paths(f);
            }
        }
    }
}

impl<V: Into<Value>> From<V> for Term {
    fn from(v: V) -> Term {
        Term::Const(v.into())
    }
}

macro_rules! term_ops {
    ($($tr:ident $m:ident $op:ident),*) => {$(
        impl<T: Into<Term>> ops::$tr<T> for Term {
            type Output = Term;
            fn $m(self, rhs: T) -> Term {
                self.arith(ArithOp::$op, rhs)
            }
        }
    )*};
}
term_ops!(Add add Add, Sub sub Sub, Mul mul Mul, Div div Div, Rem rem Rem);

impl fmt::Display for Term {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Term::Field(p) => write!(f, "{p}"),
            Term::Const(v) => write!(f, "{v}"),
            Term::Arith(op, a, b) => write!(f, "({a} {} {b})", op.symbol()),
        }
    }
}

/// A query predicate over one object.
#[derive(Debug, Clone, PartialEq)]
pub enum Expr {
    /// Always true (matches every object).
    True,
    /// Always false (matches nothing).
    False,
    /// `path <op> value`. Unknown (no match) when the field is `Null`.
    Cmp {
        /// Field read from the object.
        path: FieldPath,
        /// Comparison operator.
        op: CmpOp,
        /// Constant compared against.
        value: Value,
    },
    /// `path IN (values…)`.
    In {
        /// Field read from the object.
        path: FieldPath,
        /// Candidate values.
        values: Vec<Value>,
    },
    /// `path NOT IN (values…)`.
    NotIn {
        /// Field read from the object.
        path: FieldPath,
        /// Excluded values.
        values: Vec<Value>,
    },
    /// The field is absent/null.
    IsNull(FieldPath),
    /// The field is present/non-null (absent scalars with a default are *not* null).
    IsNotNull(FieldPath),
    /// The union field at `path` currently holds member `member` (`content is Image`).
    UnionIs {
        /// Path to the union field (its last step is a `Field` step for the union).
        path: FieldPath,
        /// Union type tag of the member (1-based).
        member: u8,
        /// Member table name, for display.
        member_name: String,
    },
    /// `left <op> right` over computed [`Term`]s (`mana + hp > 150`, `x % 7 == 0`).
    /// Unknown (no match) when either side is `Null`.
    Compare {
        /// Left side.
        left: Term,
        /// Comparison operator.
        op: CmpOp,
        /// Right side.
        right: Term,
    },
    /// The term is `Null` (never unknown).
    TermIsNull(Term),
    /// The term is not `Null` (never unknown).
    TermIsNotNull(Term),
    /// The predicate is unknown (SQL: `(predicate) IS NULL`), e.g. a comparison with
    /// an absent field. Never unknown itself.
    IsUnknown(Box<Expr>),
    /// The predicate is true or false, not unknown (`(predicate) IS NOT NULL`).
    IsKnown(Box<Expr>),
    /// Both hold.
    And(Box<Expr>, Box<Expr>),
    /// Either holds.
    Or(Box<Expr>, Box<Expr>),
    /// Negation (three-valued: `NOT unknown` is unknown).
    Not(Box<Expr>),
    /// Full-text search: the `(searchable)` field at `path` (every searchable
    /// field of the collection when `None`) matches `query`, in keel's FTS5 query
    /// language (words, `"phrases"`, `prefix*`, `AND`, `OR`, `NOT`, `NEAR(…)`;
    /// see keel-query's `search` module). Never unknown.
    Matches {
        /// The searchable field, or `None` for all of them.
        path: Option<FieldPath>,
        /// The query text.
        query: String,
    },
}

impl Expr {
    /// `path == value`.
    pub fn eq(path: FieldPath, value: impl Into<Value>) -> Expr {
        Expr::cmp(path, CmpOp::Eq, value)
    }
    /// `path != value`.
    pub fn ne(path: FieldPath, value: impl Into<Value>) -> Expr {
        Expr::cmp(path, CmpOp::Ne, value)
    }
    /// `path < value`.
    pub fn lt(path: FieldPath, value: impl Into<Value>) -> Expr {
        Expr::cmp(path, CmpOp::Lt, value)
    }
    /// `path <= value`.
    pub fn le(path: FieldPath, value: impl Into<Value>) -> Expr {
        Expr::cmp(path, CmpOp::Le, value)
    }
    /// `path > value`.
    pub fn gt(path: FieldPath, value: impl Into<Value>) -> Expr {
        Expr::cmp(path, CmpOp::Gt, value)
    }
    /// `path >= value`.
    pub fn ge(path: FieldPath, value: impl Into<Value>) -> Expr {
        Expr::cmp(path, CmpOp::Ge, value)
    }
    /// `path <op> value`.
    pub fn cmp(path: FieldPath, op: CmpOp, value: impl Into<Value>) -> Expr {
        Expr::Cmp {
            path,
            op,
            value: value.into(),
        }
    }

    /// Both `self` and `other` (also the `&` operator).
    pub fn and(self, other: Expr) -> Expr {
        Expr::And(Box::new(self), Box::new(other))
    }
    /// Either `self` or `other` (also the `|` operator).
    pub fn or(self, other: Expr) -> Expr {
        Expr::Or(Box::new(self), Box::new(other))
    }
    /// Negation (also the `!` operator). Named `not` like SQL; `!expr` works too.
    #[allow(clippy::should_implement_trait)]
    pub fn not(self) -> Expr {
        Expr::Not(Box::new(self))
    }
    /// This predicate is unknown (`(self) IS NULL`): true exactly where neither
    /// `self` nor `!self` matches.
    pub fn is_null(self) -> Expr {
        Expr::IsUnknown(Box::new(self))
    }
    /// This predicate is known, true or false (`(self) IS NOT NULL`).
    pub fn is_not_null(self) -> Expr {
        Expr::IsKnown(Box::new(self))
    }

    /// Full-text search of the searchable field at `path` (see [`Expr::Matches`]).
    pub fn matches(path: FieldPath, query: impl Into<String>) -> Expr {
        Expr::Matches {
            path: Some(path),
            query: query.into(),
        }
    }

    /// Full-text search over every searchable field of the collection (a phrase
    /// or `NEAR` group still has to hold within one field).
    pub fn search(query: impl Into<String>) -> Expr {
        Expr::Matches {
            path: None,
            query: query.into(),
        }
    }

    /// Calls `f` on every field path this expression reads (for index selection).
    pub fn visit_paths(&self, f: &mut impl FnMut(&FieldPath)) {
        match self {
            Expr::True | Expr::False => {}
            Expr::Matches { path, .. } => {
                if let Some(p) = path {
                    f(p)
                }
            }
            Expr::Cmp { path, .. }
            | Expr::In { path, .. }
            | Expr::NotIn { path, .. }
            | Expr::IsNull(path)
            | Expr::IsNotNull(path)
            | Expr::UnionIs { path, .. } => f(path),
            Expr::Compare { left, right, .. } => {
                left.visit_paths(f);
                right.visit_paths(f);
            }
            Expr::TermIsNull(t) | Expr::TermIsNotNull(t) => t.visit_paths(f),
            Expr::And(a, b) | Expr::Or(a, b) => {
                a.visit_paths(f);
                b.visit_paths(f);
            }
            Expr::Not(e) | Expr::IsUnknown(e) | Expr::IsKnown(e) => e.visit_paths(f),
        }
    }
}

impl ops::BitAnd for Expr {
    type Output = Expr;
    fn bitand(self, rhs: Expr) -> Expr {
        self.and(rhs)
    }
}
impl ops::BitOr for Expr {
    type Output = Expr;
    fn bitor(self, rhs: Expr) -> Expr {
        self.or(rhs)
    }
}
impl ops::Not for Expr {
    type Output = Expr;
    fn not(self) -> Expr {
        Expr::Not(Box::new(self))
    }
}

fn write_list(f: &mut fmt::Formatter<'_>, values: &[Value]) -> fmt::Result {
    f.write_str("(")?;
    for (i, v) in values.iter().enumerate() {
        if i > 0 {
            f.write_str(", ")?;
        }
        write!(f, "{v}")?;
    }
    f.write_str(")")
}

impl fmt::Display for Expr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Expr::True => f.write_str("true"),
            Expr::False => f.write_str("false"),
            Expr::Cmp { path, op, value } => write!(f, "{path} {} {value}", op.symbol()),
            Expr::In { path, values } => {
                write!(f, "{path} IN ")?;
                write_list(f, values)
            }
            Expr::NotIn { path, values } => {
                write!(f, "{path} NOT IN ")?;
                write_list(f, values)
            }
            Expr::IsNull(p) => write!(f, "{p} IS NULL"),
            Expr::IsNotNull(p) => write!(f, "{p} IS NOT NULL"),
            Expr::UnionIs {
                path, member_name, ..
            } => write!(f, "{path} is {member_name}"),
            Expr::Compare { left, op, right } => write!(f, "{left} {} {right}", op.symbol()),
            Expr::TermIsNull(t) => write!(f, "{t} IS NULL"),
            Expr::TermIsNotNull(t) => write!(f, "{t} IS NOT NULL"),
            Expr::IsUnknown(e) => write!(f, "({e}) IS NULL"),
            Expr::IsKnown(e) => write!(f, "({e}) IS NOT NULL"),
            Expr::And(a, b) => write!(f, "({a} AND {b})"),
            Expr::Or(a, b) => write!(f, "({a} OR {b})"),
            Expr::Not(e) => write!(f, "NOT ({e})"),
            Expr::Matches {
                path: Some(p),
                query,
            } => write!(f, "{p} MATCHES {query:?}"),
            Expr::Matches { path: None, query } => write!(f, "* MATCHES {query:?}"),
        }
    }
}

/// Full-text relevance order, best match first: [`SortKey::relevance`]
/// (`order_by(relevance())`).
pub fn relevance() -> SortKey {
    SortKey::relevance()
}

/// One ordering key of a query: a field and a direction, optionally by the
/// position of the field's value in a list (Dflat's `orderBy(.index(of: […]))`).
///
/// `Null` sorts first ascending and last descending (SQLite's rule). With a list
/// ([`SortKey::by_list`]), objects are ordered by where their value appears in the
/// list (the first occurrence; equality as in filters, so `2 == 2.0`); values not
/// in the list — and `Null` — come first or last, as [`Unlisted`] says, in either
/// direction.
///
/// ```
/// use keel_schema::{FieldPath, SortKey, Unlisted, Value};
/// let color = FieldPath::field(2, "color");
/// let k = SortKey::by_list(color, [2, 0], Unlisted::Last);
/// assert_eq!(k.to_string(), "color IN ORDER (2, 0) UNLISTED LAST ASC");
/// ```
#[derive(Debug, Clone, PartialEq)]
pub struct SortKey {
    /// Field to order by.
    pub path: FieldPath,
    /// `true` for descending order.
    pub descending: bool,
    /// Order by position in this list instead of by value.
    pub list: Option<SortList>,
}

/// The list of a [`SortKey::by_list`] key.
#[derive(Debug, Clone, PartialEq)]
pub struct SortList {
    /// The values, in the order wanted.
    pub values: Vec<Value>,
    /// Where values not in the list go.
    pub unlisted: Unlisted,
}

/// Where a list-ordered [`SortKey`] puts values that are not in its list.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Unlisted {
    /// Before every listed value.
    First,
    /// After every listed value.
    Last,
}

impl SortKey {
    /// Ascending by `path`.
    pub fn asc(path: FieldPath) -> Self {
        SortKey {
            path,
            descending: false,
            list: None,
        }
    }
    /// Descending by `path`.
    pub fn desc(path: FieldPath) -> Self {
        SortKey {
            path,
            descending: true,
            list: None,
        }
    }
    /// By the position of the value at `path` in `values`; values not in the list
    /// go where `unlisted` says. [`reversed`](Self::reversed) reverses the listed
    /// part only.
    pub fn by_list<V: Into<Value>>(
        path: FieldPath,
        values: impl IntoIterator<Item = V>,
        unlisted: Unlisted,
    ) -> Self {
        SortKey {
            path,
            descending: false,
            list: Some(SortList {
                values: values.into_iter().map(Into::into).collect(),
                unlisted,
            }),
        }
    }
    /// Full-text relevance (FTS5's bm25 with the fields' `(searchable: w)`
    /// weights) of the query's full-text filter: best match first; reversed,
    /// worst first. A query ordered by it needs an [`Expr::Matches`] as one of
    /// its filter's top-level `AND` parts (the first one ranks).
    ///
    /// ```
    /// let k = keel_schema::SortKey::relevance();
    /// assert!(k.is_relevance());
    /// assert_eq!(k.to_string(), "relevance ASC");
    /// ```
    pub fn relevance() -> Self {
        SortKey::asc(FieldPath::new(Vec::new()))
    }

    /// This key is [`SortKey::relevance`] (the empty path, which names no field).
    pub fn is_relevance(&self) -> bool {
        self.path.steps().is_empty() && self.list.is_none()
    }

    /// The same key in the other direction.
    pub fn reversed(mut self) -> Self {
        self.descending = !self.descending;
        self
    }

    /// The position an object with `rank` (its value's index in the list, `None`
    /// when unlisted) takes, as an integer ordered in this key's direction — what
    /// the SQL `CASE` computes. `None` for keys without a list.
    pub fn list_rank(&self, index: Option<usize>) -> Option<i64> {
        let l = self.list.as_ref()?;
        let n = l.values.len() as i64;
        Some(match (index, l.unlisted, self.descending) {
            (Some(i), _, _) => i as i64,
            // Unlisted first: smallest ascending, largest descending.
            (None, Unlisted::First, false) | (None, Unlisted::Last, true) => -1,
            (None, Unlisted::First, true) | (None, Unlisted::Last, false) => n,
        })
    }
}

impl fmt::Display for SortKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.is_relevance() {
            f.write_str("relevance")?;
        } else {
            write!(f, "{}", self.path)?;
        }
        if let Some(l) = &self.list {
            f.write_str(" IN ORDER ")?;
            write_list(f, &l.values)?;
            f.write_str(match l.unlisted {
                Unlisted::First => " UNLISTED FIRST",
                Unlisted::Last => " UNLISTED LAST",
            })?;
        }
        write!(f, " {}", if self.descending { "DESC" } else { "ASC" })
    }
}
