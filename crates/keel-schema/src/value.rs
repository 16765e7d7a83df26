//! [`Value`]: the scalar values the dynamic core works with.
//!
//! keel stores objects as FlatBuffers bytes, but queries, keys and indexes need a
//! small common currency for field values. `Value` mirrors SQLite's storage
//! classes (`NULL`, `INTEGER`, `REAL`, `TEXT`, `BLOB`) plus a separate `Bool`, so a
//! value read out of FlatBuffers bytes by the dynamic reader can be handed to SQLite
//! or compared in memory without conversion rules of its own.
//!
//! Mapping from FlatBuffers types:
//!
//! | FlatBuffers            | `Value`                                          |
//! |------------------------|--------------------------------------------------|
//! | `bool`                 | [`Value::Bool`]                                  |
//! | `byte` … `long`, `ubyte` … `uint` | [`Value::Int`]                        |
//! | `ulong`                | [`Value::Int`] holding the **i64 bit pattern** (`u64::MAX` is `-1`) |
//! | `float`, `double`      | [`Value::Float`]                                 |
//! | enum                   | [`Value::Int`] of its underlying value           |
//! | `string`               | [`Value::Text`]                                  |
//! | `[ubyte]` / `[byte]`   | [`Value::Blob`]                                  |
//! | absent optional / string / table | [`Value::Null`]                        |

use std::fmt;

/// A dynamically typed field value (SQLite's storage classes plus `Bool`).
///
/// ```
/// use keel_schema::Value;
/// assert_eq!(Value::from(42_i32), Value::Int(42));
/// assert_eq!(Value::from("hi"), Value::Text("hi".into()));
/// assert_eq!(Value::from(None::<i32>), Value::Null);
/// // `ulong` keeps its bit pattern:
/// assert_eq!(Value::from(u64::MAX), Value::Int(-1));
/// ```
#[derive(Debug, Clone, PartialEq, Default)]
pub enum Value {
    /// Absent: a missing string, table or optional scalar, or SQL `NULL`.
    #[default]
    Null,
    /// A FlatBuffers `bool`.
    Bool(bool),
    /// Any integer type or enum; `ulong` is stored as its i64 bit pattern.
    Int(i64),
    /// `float` or `double`.
    Float(f64),
    /// A FlatBuffers `string` (always valid UTF-8 after decoding).
    Text(String),
    /// A byte vector (`[ubyte]` or `[byte]`).
    Blob(Vec<u8>),
}

impl Value {
    /// `true` for [`Value::Null`].
    pub fn is_null(&self) -> bool {
        matches!(self, Value::Null)
    }

    /// The integer, if this is `Int` (or `Bool`, as 0/1).
    pub fn as_i64(&self) -> Option<i64> {
        match self {
            Value::Int(i) => Some(*i),
            Value::Bool(b) => Some(*b as i64),
            _ => None,
        }
    }

    /// The number as `f64`, if this is `Float` or `Int`.
    pub fn as_f64(&self) -> Option<f64> {
        match self {
            Value::Float(f) => Some(*f),
            Value::Int(i) => Some(*i as f64),
            _ => None,
        }
    }

    /// The text, if this is `Text`.
    pub fn as_str(&self) -> Option<&str> {
        match self {
            Value::Text(s) => Some(s),
            _ => None,
        }
    }

    /// A short name of the storage class, for error messages (`"int"`, `"text"`, …).
    pub fn kind(&self) -> &'static str {
        match self {
            Value::Null => "null",
            Value::Bool(_) => "bool",
            Value::Int(_) => "int",
            Value::Float(_) => "float",
            Value::Text(_) => "text",
            Value::Blob(_) => "blob",
        }
    }
}

impl fmt::Display for Value {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Value::Null => f.write_str("null"),
            Value::Bool(b) => write!(f, "{b}"),
            Value::Int(i) => write!(f, "{i}"),
            Value::Float(x) => write!(f, "{x:?}"),
            Value::Text(s) => write!(f, "{s:?}"),
            Value::Blob(b) => {
                f.write_str("x'")?;
                for byte in b {
                    write!(f, "{byte:02x}")?;
                }
                f.write_str("'")
            }
        }
    }
}

macro_rules! from_int {
    ($($t:ty),*) => {$(
        impl From<$t> for Value {
            fn from(v: $t) -> Self { Value::Int(v as i64) }
        }
    )*};
}
from_int!(i8, i16, i32, i64, u8, u16, u32);

impl From<u64> for Value {
    /// Stores the i64 bit pattern (`u64::MAX` becomes `-1`), as keel does for `ulong`.
    fn from(v: u64) -> Self {
        Value::Int(v as i64)
    }
}
impl From<bool> for Value {
    fn from(v: bool) -> Self {
        Value::Bool(v)
    }
}
impl From<f32> for Value {
    fn from(v: f32) -> Self {
        Value::Float(v as f64)
    }
}
impl From<f64> for Value {
    fn from(v: f64) -> Self {
        Value::Float(v)
    }
}
impl From<String> for Value {
    fn from(v: String) -> Self {
        Value::Text(v)
    }
}
impl From<&str> for Value {
    fn from(v: &str) -> Self {
        Value::Text(v.to_owned())
    }
}
impl From<&String> for Value {
    fn from(v: &String) -> Self {
        Value::Text(v.clone())
    }
}
impl From<Vec<u8>> for Value {
    fn from(v: Vec<u8>) -> Self {
        Value::Blob(v)
    }
}
impl From<&[u8]> for Value {
    fn from(v: &[u8]) -> Self {
        Value::Blob(v.to_vec())
    }
}
impl<T: Into<Value>> From<Option<T>> for Value {
    fn from(v: Option<T>) -> Self {
        v.map_or(Value::Null, Into::into)
    }
}
