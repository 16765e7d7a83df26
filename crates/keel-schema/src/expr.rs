//! [`Expr`]: the query tree, and [`SortKey`]: result ordering.
//!
//! A query is pure data: predicates over [`FieldPath`]s compared with [`Value`]s,
//! combined with `And`, `Or` and `Not`. The query layer compiles an `Expr` to SQL
//! (over keel's field-reading SQL function) and also evaluates it in memory for
//! subscriptions; both follow SQL's three-valued logic, where a comparison with an
//! absent (`Null`) field is unknown and so does not match.
//!
//! Generated code builds expressions through typed [`Field`](crate::Field) handles
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
    /// Both hold.
    And(Box<Expr>, Box<Expr>),
    /// Either holds.
    Or(Box<Expr>, Box<Expr>),
    /// Negation (three-valued: `NOT unknown` is unknown).
    Not(Box<Expr>),
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

    /// Calls `f` on every field path this expression reads (for index selection).
    pub fn visit_paths(&self, f: &mut impl FnMut(&FieldPath)) {
        match self {
            Expr::True | Expr::False => {}
            Expr::Cmp { path, .. }
            | Expr::In { path, .. }
            | Expr::NotIn { path, .. }
            | Expr::IsNull(path)
            | Expr::IsNotNull(path)
            | Expr::UnionIs { path, .. } => f(path),
            Expr::And(a, b) | Expr::Or(a, b) => {
                a.visit_paths(f);
                b.visit_paths(f);
            }
            Expr::Not(e) => e.visit_paths(f),
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
            Expr::And(a, b) => write!(f, "({a} AND {b})"),
            Expr::Or(a, b) => write!(f, "({a} OR {b})"),
            Expr::Not(e) => write!(f, "NOT ({e})"),
        }
    }
}

/// One ordering key of a query: a field and a direction.
///
/// `Null` sorts first ascending and last descending (SQLite's rule).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct SortKey {
    /// Field to order by.
    pub path: FieldPath,
    /// `true` for descending order.
    pub descending: bool,
}

impl SortKey {
    /// Ascending by `path`.
    pub fn asc(path: FieldPath) -> Self {
        SortKey {
            path,
            descending: false,
        }
    }
    /// Descending by `path`.
    pub fn desc(path: FieldPath) -> Self {
        SortKey {
            path,
            descending: true,
        }
    }
}

impl fmt::Display for SortKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} {}",
            self.path,
            if self.descending { "DESC" } else { "ASC" }
        )
    }
}
