//! Typed field handles: compile-time-checked query building for generated types.
//!
//! Generated code gives every record type one associated function per queryable
//! field, returning a [`Field<R, T>`]: `R` is the record type the path starts from,
//! `T` the Rust type of the field. Comparison methods accept only values convertible
//! to `T`, so `Post::priority().gt(100)` compiles and `Post::priority().gt("x")`
//! does not. A handle is just a [`FieldPath`] (static and allocation-free for
//! top-level fields) and produces plain [`Expr`]/[`SortKey`] data.
//!
//! Nested fields are reached with [`Field::join`]:
//! `Post::author().join(Author::name())` is the path `author.name`. A
//! `(vector: N)` field's handle holds the marker type [`Vector`]: it is what a
//! nearest query takes, and it compares with nothing.

use std::fmt;
use std::marker::PhantomData;

use crate::expr::{ArithOp, Expr, SortKey, Term, Unlisted};
use crate::path::{FieldPath, PathStep};
use crate::value::Value;

/// A typed handle on the field at `path` of record type `R`, holding a `T`.
///
/// ```
/// use keel_schema::{Field, FieldPath, PathStep, Expr};
/// struct Post;
/// static PRIORITY: &[PathStep] = &[PathStep::field(1, "priority")];
/// const fn priority() -> Field<Post, i32> { Field::new(FieldPath::from_static(PRIORITY)) }
///
/// let q = priority().gt(100).and(priority().lt(200));
/// assert_eq!(q.to_string(), "(priority > 100 AND priority < 200)");
/// // priority().gt("x"); // does not compile: &str is not an i32
/// ```
pub struct Field<R, T> {
    path: FieldPath,
    _marker: PhantomData<fn() -> (R, T)>,
}

impl<R, T> Clone for Field<R, T> {
    fn clone(&self) -> Self {
        Field {
            path: self.path.clone(),
            _marker: PhantomData,
        }
    }
}

impl<R, T> fmt::Debug for Field<R, T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Field({})", self.path)
    }
}

impl<R, T> PartialEq for Field<R, T> {
    fn eq(&self, other: &Self) -> bool {
        self.path == other.path
    }
}

impl<R, T> Field<R, T> {
    /// A handle on `path` (generated code calls this in `const` context).
    pub const fn new(path: FieldPath) -> Self {
        Field {
            path,
            _marker: PhantomData,
        }
    }

    /// The untyped path.
    pub fn path(&self) -> &FieldPath {
        &self.path
    }

    /// Consumes the handle, returning the untyped path.
    pub fn into_path(self) -> FieldPath {
        self.path
    }

    /// The field `inner` of this (table or struct) field: `author` ⨝ `name` = `author.name`.
    pub fn join<U>(&self, inner: Field<T, U>) -> Field<R, U> {
        Field::new(self.path.join(&inner.path))
    }

    /// The field is absent (`IS NULL`). Absent scalars with a default are not null.
    pub fn is_null(&self) -> Expr {
        Expr::IsNull(self.path.clone())
    }

    /// The field is present (`IS NOT NULL`).
    pub fn is_not_null(&self) -> Expr {
        Expr::IsNotNull(self.path.clone())
    }

    /// Ascending sort key.
    pub fn asc(&self) -> SortKey {
        SortKey::asc(self.path.clone())
    }

    /// Descending sort key.
    pub fn desc(&self) -> SortKey {
        SortKey::desc(self.path.clone())
    }

    /// The field as a [`Term`], for arithmetic and field-to-field comparisons
    /// (`Post::priority().term().gt(Post::views())`). The arithmetic operators
    /// work on handles directly: `(Monster::mana() + Monster::hp()).gt(150)`.
    pub fn term(&self) -> Term {
        Term::Field(self.path.clone())
    }

    /// Sort key by the position of the field's value in `values` (Dflat's
    /// `orderBy(.index(of: […]))`); values not in the list go where `unlisted`
    /// says. `.reversed()` on the key reverses the listed part.
    pub fn in_order_of<V: Into<Value>>(
        &self,
        values: impl IntoIterator<Item = V>,
        unlisted: Unlisted,
    ) -> SortKey {
        SortKey::by_list(self.path.clone(), values, unlisted)
    }

    /// For a handle on a union member (`Post::content_image()`): the predicate
    /// "the union holds this member" (`content is Image`). For any other handle this
    /// is `is_not_null()`.
    pub fn is_member(&self) -> Expr {
        match self.path.steps().last() {
            Some(PathStep::UnionMember {
                id,
                name,
                member,
                member_name,
            }) => {
                let mut steps = self.path.steps().to_vec();
                steps.pop();
                steps.push(PathStep::Field {
                    id: *id,
                    name: name.clone(),
                });
                Expr::UnionIs {
                    path: FieldPath::new(steps),
                    member: *member,
                    member_name: member_name.to_string(),
                }
            }
            _ => self.is_not_null(),
        }
    }
}

/// The value type of a handle on a `(vector: N)` field: generated code gives
/// `Photo::embedding()` as a `Field<Photo, Vector>`. A nearest query
/// (`Fetch::nearest` in keel-query) takes only such a handle, so a field declared
/// without `(vector: N)` cannot be passed to one. No value has this type: a vector
/// is compared with nothing (only `is_null` applies), and the object itself holds
/// the vector as `Vec<f32>`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Vector {}

/// A value a query may compare with a field of Rust type `T`.
///
/// Integer fields take any integer (so `Monster::mana().lt(100)` works on a `short`
/// without `100i16`; a value outside the field's range is compared as the number
/// it is), float fields any number, string fields `&str`, `String` and optional
/// strings (`None` compares as `NULL`: unknown), enums their own type (generated
/// code implements this trait for each enum).
///
/// ```
/// use keel_schema::{Field, FieldPath, PathStep};
/// struct Monster;
/// static MANA: &[PathStep] = &[PathStep::field(1, "mana")];
/// static NAME: &[PathStep] = &[PathStep::field(0, "name")];
/// let mana: Field<Monster, i16> = Field::new(FieldPath::from_static(MANA));
/// let name: Field<Monster, String> = Field::new(FieldPath::from_static(NAME));
/// let stale: Option<String> = Some("Orc".into());
/// let q = mana.lt(100) & name.eq(&stale);
/// assert_eq!(q.to_string(), "(mana < 100 AND name == \"Orc\")");
/// ```
pub trait QueryValue<T> {
    /// The value as the engine compares it.
    fn into_value(self) -> Value;
}

macro_rules! int_query_values {
    ($($field:ty),*) => {$(
        int_query_values!(@each $field; i8, i16, i32, i64, u8, u16, u32, u64);
    )*};
    (@each $field:ty; $($src:ty),*) => {$(
        impl QueryValue<$field> for $src {
            fn into_value(self) -> Value {
                Value::from(self)
            }
        }
        impl QueryValue<$field> for &$src {
            fn into_value(self) -> Value {
                Value::from(*self)
            }
        }
    )*};
}
int_query_values!(i8, i16, i32, i64, u8, u16, u32, u64);

macro_rules! float_query_values {
    ($($src:ty),*) => {$(
        impl QueryValue<f32> for $src {
            /// Rounded to `f32` first, as the stored field is.
            fn into_value(self) -> Value {
                Value::Float(self as f32 as f64)
            }
        }
        impl QueryValue<f64> for $src {
            fn into_value(self) -> Value {
                Value::Float(self as f64)
            }
        }
    )*};
}
float_query_values!(f32, f64, i8, i16, i32, u8, u16, u32);

impl QueryValue<bool> for bool {
    fn into_value(self) -> Value {
        Value::Bool(self)
    }
}

macro_rules! text_query_values {
    ($($src:ty),*) => {$(
        impl QueryValue<String> for $src {
            fn into_value(self) -> Value {
                Value::from(self)
            }
        }
    )*};
}
text_query_values!(&str, String, &String, Option<&str>, Option<String>);

impl QueryValue<String> for &Option<String> {
    fn into_value(self) -> Value {
        Value::from(self.as_deref())
    }
}

impl<R, T> Field<R, T> {
    /// `field == value`.
    pub fn eq(&self, value: impl QueryValue<T>) -> Expr {
        Expr::eq(self.path.clone(), value.into_value())
    }
    /// `field != value`.
    pub fn ne(&self, value: impl QueryValue<T>) -> Expr {
        Expr::ne(self.path.clone(), value.into_value())
    }
    /// `field < value`.
    pub fn lt(&self, value: impl QueryValue<T>) -> Expr {
        Expr::lt(self.path.clone(), value.into_value())
    }
    /// `field <= value`.
    pub fn le(&self, value: impl QueryValue<T>) -> Expr {
        Expr::le(self.path.clone(), value.into_value())
    }
    /// `field > value`.
    pub fn gt(&self, value: impl QueryValue<T>) -> Expr {
        Expr::gt(self.path.clone(), value.into_value())
    }
    /// `field >= value`.
    pub fn ge(&self, value: impl QueryValue<T>) -> Expr {
        Expr::ge(self.path.clone(), value.into_value())
    }
    /// `field IN (values…)`.
    pub fn in_<V: QueryValue<T>>(&self, values: impl IntoIterator<Item = V>) -> Expr {
        Expr::In {
            path: self.path.clone(),
            values: values.into_iter().map(QueryValue::into_value).collect(),
        }
    }
    /// `field NOT IN (values…)`.
    pub fn not_in<V: QueryValue<T>>(&self, values: impl IntoIterator<Item = V>) -> Expr {
        Expr::NotIn {
            path: self.path.clone(),
            values: values.into_iter().map(QueryValue::into_value).collect(),
        }
    }
}

impl<R> Field<R, String> {
    /// Full-text search of this `(searchable)` string field: see
    /// [`Expr::Matches`]. Combines with every other filter (`&`, `|`, `!`).
    pub fn matches(&self, query: impl Into<String>) -> Expr {
        Expr::matches(self.path.clone(), query)
    }
}

impl<R> Field<R, Vec<String>> {
    /// Full-text search of this `(searchable)` `[string]` field (a phrase holds
    /// within one element): see [`Expr::Matches`].
    pub fn matches(&self, query: impl Into<String>) -> Expr {
        Expr::matches(self.path.clone(), query)
    }
}

impl<R, T> From<Field<R, T>> for Term {
    fn from(f: Field<R, T>) -> Term {
        Term::Field(f.path)
    }
}

macro_rules! field_ops {
    ($($tr:ident $m:ident $op:ident),*) => {$(
        impl<R, T, Rhs: Into<Term>> std::ops::$tr<Rhs> for Field<R, T> {
            type Output = Term;
            fn $m(self, rhs: Rhs) -> Term {
                Term::Field(self.path).arith(ArithOp::$op, rhs)
            }
        }
    )*};
}
field_ops!(Add add Add, Sub sub Sub, Mul mul Mul, Div div Div, Rem rem Rem);
