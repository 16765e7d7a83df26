//! SQLite's value semantics, in Rust: the storage classes a keel [`Value`] becomes
//! ([`SqlValue`]), how two of them compare, `IN`, arithmetic, and the ORDER BY
//! order, and [`Param`], a `Value` bound as a statement parameter.
//!
//! The table model (index columns), the SQL compiler and the in-memory evaluator
//! all go through this module, so what SQLite computes and what keel computes in
//! memory cannot drift apart. The rules are spelled out in `query::eval`'s docs.

use std::cmp::Ordering;

use keel_schema::dynamic::ValueRef;
use keel_schema::{ArithOp, CmpOp, Value};
use rusqlite::types::{ToSql, ToSqlOutput, ValueRef as SqlRef};

/// A value normalised to SQLite's storage classes (`Bool` → `Int`, NaN → `Null`),
/// borrowed where possible.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum SqlValue<'a> {
    /// SQL `NULL`.
    Null,
    /// `INTEGER` (also booleans).
    Int(i64),
    /// `REAL` (never NaN).
    Float(f64),
    /// `TEXT`.
    Text(&'a str),
    /// `BLOB`.
    Blob(&'a [u8]),
}

impl<'a> SqlValue<'a> {
    /// Normalise a [`Value`].
    ///
    /// ```
    /// use keel_query::eval::SqlValue;
    /// use keel_schema::Value;
    /// assert_eq!(SqlValue::from_value(&Value::Bool(true)), SqlValue::Int(1));
    /// assert_eq!(SqlValue::from_value(&Value::Float(f64::NAN)), SqlValue::Null);
    /// ```
    pub fn from_value(v: &'a Value) -> SqlValue<'a> {
        match v {
            Value::Null => SqlValue::Null,
            Value::Bool(b) => SqlValue::Int(*b as i64),
            Value::Int(i) => SqlValue::Int(*i),
            Value::Float(f) if f.is_nan() => SqlValue::Null,
            Value::Float(f) => SqlValue::Float(*f),
            Value::Text(s) => SqlValue::Text(s),
            Value::Blob(b) => SqlValue::Blob(b),
        }
    }

    /// Normalise a borrowed [`ValueRef`].
    ///
    /// ```
    /// use keel_query::eval::SqlValue;
    /// use keel_schema::ValueRef;
    /// assert_eq!(SqlValue::from_ref(ValueRef::Bool(false)), SqlValue::Int(0));
    /// ```
    pub fn from_ref(v: ValueRef<'a>) -> SqlValue<'a> {
        match v {
            ValueRef::Null => SqlValue::Null,
            ValueRef::Bool(b) => SqlValue::Int(b as i64),
            ValueRef::Int(i) => SqlValue::Int(i),
            ValueRef::Float(f) if f.is_nan() => SqlValue::Null,
            ValueRef::Float(f) => SqlValue::Float(f),
            ValueRef::Text(s) => SqlValue::Text(s),
            ValueRef::Blob(b) => SqlValue::Blob(b),
        }
    }

    /// Owned [`Value`] (normalised: no `Bool`, no NaN).
    pub fn to_value(self) -> Value {
        match self {
            SqlValue::Null => Value::Null,
            SqlValue::Int(i) => Value::Int(i),
            SqlValue::Float(f) => Value::Float(f),
            SqlValue::Text(s) => Value::Text(s.to_owned()),
            SqlValue::Blob(b) => Value::Blob(b.to_vec()),
        }
    }

    fn class(&self) -> u8 {
        match self {
            SqlValue::Null => 0,
            SqlValue::Int(_) | SqlValue::Float(_) => 1,
            SqlValue::Text(_) => 2,
            SqlValue::Blob(_) => 3,
        }
    }
}

/// Exact comparison of an integer and a float (SQLite's `sqlite3IntFloatCompare`).
fn cmp_int_float(i: i64, r: f64) -> Ordering {
    if r < -9_223_372_036_854_775_808.0 {
        return Ordering::Greater;
    }
    if r >= 9_223_372_036_854_775_808.0 {
        return Ordering::Less;
    }
    let y = r as i64; // truncates toward zero; in range here
    match i.cmp(&y) {
        Ordering::Equal => {}
        o => return o,
    }
    let s = i as f64;
    s.partial_cmp(&r).unwrap_or(Ordering::Equal)
}

/// SQLite's total order of values for `ORDER BY`: `NULL` < numbers < text < blobs.
///
/// ```
/// use keel_query::eval::{order_cmp, SqlValue};
/// use std::cmp::Ordering;
/// assert_eq!(order_cmp(SqlValue::Null, SqlValue::Int(-5)), Ordering::Less);
/// assert_eq!(order_cmp(SqlValue::Int(2), SqlValue::Float(2.0)), Ordering::Equal);
/// assert_eq!(order_cmp(SqlValue::Float(1e30), SqlValue::Text("")), Ordering::Less);
/// ```
pub fn order_cmp(a: SqlValue<'_>, b: SqlValue<'_>) -> Ordering {
    match (a, b) {
        (SqlValue::Int(x), SqlValue::Int(y)) => x.cmp(&y),
        (SqlValue::Float(x), SqlValue::Float(y)) => x.partial_cmp(&y).unwrap_or(Ordering::Equal),
        (SqlValue::Int(x), SqlValue::Float(y)) => cmp_int_float(x, y),
        (SqlValue::Float(x), SqlValue::Int(y)) => cmp_int_float(y, x).reverse(),
        (SqlValue::Text(x), SqlValue::Text(y)) => x.as_bytes().cmp(y.as_bytes()),
        (SqlValue::Blob(x), SqlValue::Blob(y)) => x.cmp(y),
        (a, b) => a.class().cmp(&b.class()),
    }
}

/// A comparison in three-valued logic: `None` if either side is `NULL`.
///
/// ```
/// use keel_query::eval::{compare, SqlValue};
/// use keel_schema::CmpOp;
/// assert_eq!(compare(SqlValue::Int(1), CmpOp::Lt, SqlValue::Text("a")), Some(true));
/// assert_eq!(compare(SqlValue::Null, CmpOp::Eq, SqlValue::Null), None);
/// ```
pub fn compare(a: SqlValue<'_>, op: CmpOp, b: SqlValue<'_>) -> Option<bool> {
    if a == SqlValue::Null || b == SqlValue::Null {
        return None;
    }
    Some(holds(op, order_cmp(a, b)))
}

/// Whether `op` holds between two values that compare as `o`.
#[inline]
pub(crate) fn holds(op: CmpOp, o: Ordering) -> bool {
    match op {
        CmpOp::Eq => o == Ordering::Equal,
        CmpOp::Ne => o != Ordering::Equal,
        CmpOp::Lt => o == Ordering::Less,
        CmpOp::Le => o != Ordering::Greater,
        CmpOp::Gt => o == Ordering::Greater,
        CmpOp::Ge => o != Ordering::Less,
    }
}

/// `x IN (list)` in SQLite's three-valued logic.
///
/// ```
/// use keel_query::eval::{in_list, SqlValue};
/// assert_eq!(in_list(SqlValue::Int(1), &[SqlValue::Null, SqlValue::Int(1)]), Some(true));
/// assert_eq!(in_list(SqlValue::Int(2), &[SqlValue::Null, SqlValue::Int(1)]), None);
/// assert_eq!(in_list(SqlValue::Null, &[]), Some(false));
/// ```
pub fn in_list(x: SqlValue<'_>, list: &[SqlValue<'_>]) -> Option<bool> {
    if list.is_empty() {
        return Some(false);
    }
    if x == SqlValue::Null {
        return None;
    }
    let mut saw_null = false;
    for v in list {
        match compare(x, CmpOp::Eq, *v) {
            Some(true) => return Some(true),
            None => saw_null = true,
            Some(false) => {}
        }
    }
    if saw_null {
        None
    } else {
        Some(false)
    }
}

pub(crate) fn and3(a: Option<bool>, b: impl FnOnce() -> Option<bool>) -> Option<bool> {
    match a {
        Some(false) => Some(false),
        a => match (a, b()) {
            (_, Some(false)) => Some(false),
            (Some(true), Some(true)) => Some(true),
            _ => None,
        },
    }
}

pub(crate) fn or3(a: Option<bool>, b: impl FnOnce() -> Option<bool>) -> Option<bool> {
    match a {
        Some(true) => Some(true),
        a => match (a, b()) {
            (_, Some(true)) => Some(true),
            (Some(false), Some(false)) => Some(false),
            _ => None,
        },
    }
}

/// SQLite's `REAL` value of a number (`sqlite3VdbeRealValue`).
fn real(v: SqlValue<'_>) -> f64 {
    match v {
        SqlValue::Int(i) => i as f64,
        SqlValue::Float(f) => f,
        _ => 0.0,
    }
}

/// SQLite's `INTEGER` value of a number (`sqlite3VdbeIntValue`: reals saturate).
fn integer(v: SqlValue<'_>) -> i64 {
    match v {
        SqlValue::Int(i) => i,
        SqlValue::Float(f) if f <= i64::MIN as f64 => i64::MIN,
        SqlValue::Float(f) if f >= i64::MAX as f64 => i64::MAX,
        SqlValue::Float(f) => f as i64,
        _ => 0,
    }
}

/// `l <op> r` exactly as SQLite's VDBE computes it (`OP_Add` … `OP_Remainder`):
/// integer math while both are integers and it does not overflow, else floating
/// point; `/` and `%` by zero, and NaN results, are `NULL`; `%` in floating point
/// works on the integer values and gives a `REAL`.
pub fn arith(op: ArithOp, l: SqlValue<'_>, r: SqlValue<'_>) -> SqlValue<'static> {
    if l == SqlValue::Null || r == SqlValue::Null {
        return SqlValue::Null;
    }
    if let (SqlValue::Int(a), SqlValue::Int(b)) = (l, r) {
        let exact = match op {
            ArithOp::Add => a.checked_add(b),
            ArithOp::Sub => a.checked_sub(b),
            ArithOp::Mul => a.checked_mul(b),
            ArithOp::Div if b == 0 => return SqlValue::Null,
            ArithOp::Div => a.checked_div(b),
            ArithOp::Rem if b == 0 => return SqlValue::Null,
            ArithOp::Rem => Some(a % if b == -1 { 1 } else { b }),
        };
        if let Some(v) = exact {
            return SqlValue::Int(v);
        }
    }
    let (x, y) = (real(l), real(r));
    let v = match op {
        ArithOp::Add => x + y,
        ArithOp::Sub => x - y,
        ArithOp::Mul => x * y,
        ArithOp::Div if y == 0.0 => return SqlValue::Null,
        ArithOp::Div => x / y,
        ArithOp::Rem => {
            let (a, b) = (integer(l), integer(r));
            match b {
                0 => return SqlValue::Null,
                -1 => 0.0,
                b => (a % b) as f64,
            }
        }
    };
    if v.is_nan() {
        SqlValue::Null
    } else {
        SqlValue::Float(v)
    }
}

/// A bound parameter (a [`Value`] as SQLite sees it: `Bool` → integer, NaN → NULL).
pub(crate) struct Param<'a>(pub(crate) &'a Value);

impl ToSql for Param<'_> {
    fn to_sql(&self) -> rusqlite::Result<ToSqlOutput<'_>> {
        Ok(ToSqlOutput::Borrowed(match SqlValue::from_value(self.0) {
            SqlValue::Null => SqlRef::Null,
            SqlValue::Int(i) => SqlRef::Integer(i),
            SqlValue::Float(f) => SqlRef::Real(f),
            SqlValue::Text(s) => SqlRef::Text(s.as_bytes()),
            SqlValue::Blob(b) => SqlRef::Blob(b),
        }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn int_float_exact() {
        assert_eq!(
            cmp_int_float(i64::MAX, 9_223_372_036_854_775_808.0),
            Ordering::Less
        );
        assert_eq!(cmp_int_float(3, 2.5), Ordering::Greater);
        assert_eq!(cmp_int_float(-3, -2.5), Ordering::Less);
        assert_eq!(cmp_int_float(2, 2.0), Ordering::Equal);
        assert_eq!(cmp_int_float(0, f64::INFINITY), Ordering::Less);
        assert_eq!(cmp_int_float(0, f64::NEG_INFINITY), Ordering::Greater);
        assert_eq!(
            cmp_int_float((1 << 53) + 1, (1u64 << 53) as f64),
            Ordering::Greater
        );
    }
}
