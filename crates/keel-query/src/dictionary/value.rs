//! [`DictValue`]: what a dictionary entry holds, and the typed conversions.

use std::fmt;

/// The kind of a stored dictionary value. The number is what the `kind` column of
/// `keel_dict` holds; it never changes meaning.
///
/// ```
/// use keel_query::{DictKind, DictValue};
/// assert_eq!(DictValue::from(7u8).kind(), DictKind::UInt);
/// assert_eq!(DictKind::from_code(DictKind::Json.code()), Some(DictKind::Json));
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum DictKind {
    /// `bool`, stored as INTEGER 0/1.
    Bool,
    /// A signed integer (`i8`…`i64`), stored as INTEGER.
    Int,
    /// An unsigned integer (`u8`…`u64`), stored as INTEGER (the `u64` bit pattern).
    UInt,
    /// A float (`f32`, `f64`), stored as REAL.
    Float,
    /// A string, stored as TEXT.
    String,
    /// Bytes, stored as BLOB.
    Bytes,
    /// A FlatBuffers object of a keel collection, stored as BLOB with the collection
    /// name in the `type` column.
    Object,
    /// A serde value encoded as JSON text (feature `serde`), stored as TEXT.
    Json,
}

impl DictKind {
    /// The code stored in the `kind` column.
    pub fn code(self) -> i64 {
        match self {
            DictKind::Bool => 1,
            DictKind::Int => 2,
            DictKind::UInt => 3,
            DictKind::Float => 4,
            DictKind::String => 5,
            DictKind::Bytes => 6,
            DictKind::Object => 7,
            DictKind::Json => 8,
        }
    }

    /// The kind for a stored code (`None` for codes this version does not know).
    pub fn from_code(code: i64) -> Option<DictKind> {
        Some(match code {
            1 => DictKind::Bool,
            2 => DictKind::Int,
            3 => DictKind::UInt,
            4 => DictKind::Float,
            5 => DictKind::String,
            6 => DictKind::Bytes,
            7 => DictKind::Object,
            8 => DictKind::Json,
            _ => return None,
        })
    }

    /// Lowercase name used in errors (`bool`, `int`, `uint`, `float`, `string`,
    /// `bytes`, `object`, `json`).
    pub fn name(self) -> &'static str {
        match self {
            DictKind::Bool => "bool",
            DictKind::Int => "int",
            DictKind::UInt => "uint",
            DictKind::Float => "float",
            DictKind::String => "string",
            DictKind::Bytes => "bytes",
            DictKind::Object => "object",
            DictKind::Json => "json",
        }
    }
}

/// A dictionary value of any kind: the dynamic layer under the typed API (and what
/// the FFI passes). Integers keep their signedness so `u64::MAX` round-trips.
///
/// ```
/// use keel_query::DictValue;
/// let v = DictValue::from("hello");
/// assert_eq!(v, DictValue::String("hello".into()));
/// assert_eq!(DictValue::from(-3i16), DictValue::Int(-3));
/// assert_eq!(v.describe(), "string");
/// ```
#[derive(Debug, Clone, PartialEq)]
pub enum DictValue {
    /// A boolean.
    Bool(bool),
    /// A signed integer.
    Int(i64),
    /// An unsigned integer.
    UInt(u64),
    /// A float.
    Float(f64),
    /// A string.
    String(String),
    /// Bytes.
    Bytes(Vec<u8>),
    /// A FlatBuffers object of collection `collection` (e.g. `blog.Post`).
    Object {
        /// The collection (table) the bytes are a root of.
        collection: String,
        /// The FlatBuffers bytes.
        bytes: Vec<u8>,
    },
    /// JSON text written by `set_serde` (feature `serde`).
    Json(String),
}

impl DictValue {
    /// The kind.
    pub fn kind(&self) -> DictKind {
        match self {
            DictValue::Bool(_) => DictKind::Bool,
            DictValue::Int(_) => DictKind::Int,
            DictValue::UInt(_) => DictKind::UInt,
            DictValue::Float(_) => DictKind::Float,
            DictValue::String(_) => DictKind::String,
            DictValue::Bytes(_) => DictKind::Bytes,
            DictValue::Object { .. } => DictKind::Object,
            DictValue::Json(_) => DictKind::Json,
        }
    }

    /// What is stored, for errors: the kind name, and for objects the collection
    /// (`object blog.Post`).
    pub fn describe(&self) -> String {
        match self {
            DictValue::Object { collection, .. } => format!("object {collection}"),
            other => other.kind().name().to_string(),
        }
    }

    /// Rough heap footprint, for the cache budget.
    pub(crate) fn weight(&self) -> usize {
        match self {
            DictValue::String(s) | DictValue::Json(s) => s.len(),
            DictValue::Bytes(b) => b.len(),
            DictValue::Object { collection, bytes } => collection.len() + bytes.len(),
            _ => 0,
        }
    }

    /// The `type` column: the collection of an object, NULL otherwise.
    pub(crate) fn type_column(&self) -> Option<&str> {
        match self {
            DictValue::Object { collection, .. } => Some(collection),
            _ => None,
        }
    }

    /// Build from the three stored columns. `None` if they do not form a value of
    /// a kind this version knows (never guesses).
    pub(crate) fn from_columns(
        kind: i64,
        ty: Option<String>,
        value: rusqlite::types::Value,
    ) -> Option<DictValue> {
        use rusqlite::types::Value as V;
        Some(match (DictKind::from_code(kind)?, value) {
            (DictKind::Bool, V::Integer(i)) if i == 0 || i == 1 => DictValue::Bool(i == 1),
            (DictKind::Int, V::Integer(i)) => DictValue::Int(i),
            (DictKind::UInt, V::Integer(i)) => DictValue::UInt(i as u64),
            (DictKind::Float, V::Real(f)) => DictValue::Float(f),
            (DictKind::Float, V::Null) => DictValue::Float(f64::NAN),
            (DictKind::String, V::Text(s)) => DictValue::String(s),
            (DictKind::Bytes, V::Blob(b)) => DictValue::Bytes(b),
            (DictKind::Object, V::Blob(b)) => DictValue::Object {
                collection: ty?,
                bytes: b,
            },
            (DictKind::Json, V::Text(s)) => DictValue::Json(s),
            _ => return None,
        })
    }
}

impl rusqlite::ToSql for DictValue {
    fn to_sql(&self) -> rusqlite::Result<rusqlite::types::ToSqlOutput<'_>> {
        use rusqlite::types::{ToSqlOutput, ValueRef};
        Ok(match self {
            DictValue::Bool(b) => ToSqlOutput::Owned((*b as i64).into()),
            DictValue::Int(i) => ToSqlOutput::Owned((*i).into()),
            DictValue::UInt(u) => ToSqlOutput::Owned((*u as i64).into()),
            DictValue::Float(f) => ToSqlOutput::Owned((*f).into()),
            DictValue::String(s) | DictValue::Json(s) => {
                ToSqlOutput::Borrowed(ValueRef::Text(s.as_bytes()))
            }
            DictValue::Bytes(b) | DictValue::Object { bytes: b, .. } => {
                ToSqlOutput::Borrowed(ValueRef::Blob(b))
            }
        })
    }
}

impl fmt::Display for DictValue {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            DictValue::Bool(b) => write!(f, "{b}"),
            DictValue::Int(i) => write!(f, "{i}"),
            DictValue::UInt(u) => write!(f, "{u}"),
            DictValue::Float(x) => write!(f, "{x}"),
            DictValue::String(s) => write!(f, "{s:?}"),
            DictValue::Bytes(b) => write!(f, "<{} bytes>", b.len()),
            DictValue::Object { collection, bytes } => {
                write!(f, "<{collection} object, {} bytes>", bytes.len())
            }
            DictValue::Json(s) => write!(f, "json {s}"),
        }
    }
}

/// A Rust value the dictionary can store: `bool`, every integer type, `f32`, `f64`,
/// `String`, `&str`, `Vec<u8>`, `&[u8]` and [`DictValue`] itself. (Objects and
/// serde values have their own setters: `set_object`, `set_serde`.)
///
/// ```
/// use keel_query::{DictValue, ToDictValue};
/// assert_eq!(5u32.to_dict_value(), DictValue::UInt(5));
/// assert_eq!((&b"ab"[..]).to_dict_value(), DictValue::Bytes(vec![b'a', b'b']));
/// ```
pub trait ToDictValue {
    /// The dynamic value.
    fn to_dict_value(self) -> DictValue;
}

/// A Rust type the dictionary can read back: `bool`, every integer type, `f32`,
/// `f64`, `String`, `Vec<u8>` and [`DictValue`]. `from_dict_value` returns `None`
/// when the stored value is of another kind or does not fit — integers convert
/// between widths and signedness only when the value fits exactly, `f32` reads a
/// float only if it is in `f32`'s range — so a read never truncates or reinterprets.
///
/// ```
/// use keel_query::{DictValue, FromDictValue};
/// assert_eq!(u8::from_dict_value(&DictValue::Int(200)), Some(200));
/// assert_eq!(u8::from_dict_value(&DictValue::Int(300)), None);
/// assert_eq!(i64::from_dict_value(&DictValue::UInt(u64::MAX)), None);
/// assert_eq!(bool::from_dict_value(&DictValue::Int(1)), None);
/// ```
pub trait FromDictValue: Sized {
    /// Name of the requested type, for errors (`"u8"`, `"String"`, …).
    const TYPE_NAME: &'static str;
    /// The value, if the stored one is of a compatible kind and fits.
    fn from_dict_value(v: &DictValue) -> Option<Self>;
}

impl ToDictValue for DictValue {
    fn to_dict_value(self) -> DictValue {
        self
    }
}

impl ToDictValue for &DictValue {
    fn to_dict_value(self) -> DictValue {
        self.clone()
    }
}

impl FromDictValue for DictValue {
    const TYPE_NAME: &'static str = "DictValue";
    fn from_dict_value(v: &DictValue) -> Option<Self> {
        Some(v.clone())
    }
}

impl ToDictValue for bool {
    fn to_dict_value(self) -> DictValue {
        DictValue::Bool(self)
    }
}

impl FromDictValue for bool {
    const TYPE_NAME: &'static str = "bool";
    fn from_dict_value(v: &DictValue) -> Option<Self> {
        match v {
            DictValue::Bool(b) => Some(*b),
            _ => None,
        }
    }
}

macro_rules! ints {
    ($variant:ident, $wide:ty; $($t:ty),*) => {$(
        impl ToDictValue for $t {
            fn to_dict_value(self) -> DictValue {
                DictValue::$variant(self as $wide)
            }
        }
        impl ToDictValue for &$t {
            fn to_dict_value(self) -> DictValue {
                DictValue::$variant(*self as $wide)
            }
        }
        impl FromDictValue for $t {
            const TYPE_NAME: &'static str = stringify!($t);
            fn from_dict_value(v: &DictValue) -> Option<Self> {
                match v {
                    DictValue::Int(i) => <$t>::try_from(*i).ok(),
                    DictValue::UInt(u) => <$t>::try_from(*u).ok(),
                    _ => None,
                }
            }
        }
    )*};
}

ints!(Int, i64; i8, i16, i32, i64, isize);
ints!(UInt, u64; u8, u16, u32, u64, usize);

impl ToDictValue for f64 {
    fn to_dict_value(self) -> DictValue {
        DictValue::Float(self)
    }
}

impl ToDictValue for f32 {
    fn to_dict_value(self) -> DictValue {
        DictValue::Float(f64::from(self))
    }
}

impl FromDictValue for f64 {
    const TYPE_NAME: &'static str = "f64";
    fn from_dict_value(v: &DictValue) -> Option<Self> {
        match v {
            DictValue::Float(f) => Some(*f),
            _ => None,
        }
    }
}

impl FromDictValue for f32 {
    const TYPE_NAME: &'static str = "f32";
    fn from_dict_value(v: &DictValue) -> Option<Self> {
        match v {
            DictValue::Float(f) if !f.is_finite() || f.abs() <= f64::from(f32::MAX) => {
                Some(*f as f32)
            }
            _ => None,
        }
    }
}

impl ToDictValue for String {
    fn to_dict_value(self) -> DictValue {
        DictValue::String(self)
    }
}

impl ToDictValue for &String {
    fn to_dict_value(self) -> DictValue {
        DictValue::String(self.clone())
    }
}

impl ToDictValue for &str {
    fn to_dict_value(self) -> DictValue {
        DictValue::String(self.to_owned())
    }
}

impl FromDictValue for String {
    const TYPE_NAME: &'static str = "String";
    fn from_dict_value(v: &DictValue) -> Option<Self> {
        match v {
            DictValue::String(s) => Some(s.clone()),
            _ => None,
        }
    }
}

impl ToDictValue for Vec<u8> {
    fn to_dict_value(self) -> DictValue {
        DictValue::Bytes(self)
    }
}

impl ToDictValue for &Vec<u8> {
    fn to_dict_value(self) -> DictValue {
        DictValue::Bytes(self.clone())
    }
}

impl ToDictValue for &[u8] {
    fn to_dict_value(self) -> DictValue {
        DictValue::Bytes(self.to_vec())
    }
}

impl<const N: usize> ToDictValue for &[u8; N] {
    fn to_dict_value(self) -> DictValue {
        DictValue::Bytes(self.to_vec())
    }
}

impl FromDictValue for Vec<u8> {
    const TYPE_NAME: &'static str = "Vec<u8>";
    fn from_dict_value(v: &DictValue) -> Option<Self> {
        match v {
            DictValue::Bytes(b) => Some(b.clone()),
            _ => None,
        }
    }
}

macro_rules! from_into {
    ($($t:ty),*) => {$(
        impl From<$t> for DictValue {
            fn from(v: $t) -> DictValue {
                v.to_dict_value()
            }
        }
    )*};
}

from_into!(
    bool,
    i8,
    i16,
    i32,
    i64,
    isize,
    u8,
    u16,
    u32,
    u64,
    usize,
    f32,
    f64,
    String,
    &str,
    Vec<u8>,
    &[u8]
);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn integers_convert_only_when_they_fit() {
        assert_eq!(i8::from_dict_value(&DictValue::Int(-128)), Some(-128));
        assert_eq!(i8::from_dict_value(&DictValue::Int(128)), None);
        assert_eq!(u64::from_dict_value(&DictValue::Int(-1)), None);
        assert_eq!(
            u64::from_dict_value(&DictValue::UInt(u64::MAX)),
            Some(u64::MAX)
        );
        assert_eq!(i64::from_dict_value(&DictValue::UInt(5)), Some(5));
        assert_eq!(i32::from_dict_value(&DictValue::Float(1.0)), None);
        assert_eq!(f64::from_dict_value(&DictValue::Int(1)), None);
        assert_eq!(
            String::from_dict_value(&DictValue::Bytes(b"x".to_vec())),
            None
        );
    }

    #[test]
    fn floats() {
        assert_eq!(f32::from_dict_value(&1.5f32.to_dict_value()), Some(1.5));
        assert_eq!(f32::from_dict_value(&DictValue::Float(1e300)), None);
        assert!(f32::from_dict_value(&DictValue::Float(f64::NAN))
            .unwrap()
            .is_nan());
        assert_eq!(
            f32::from_dict_value(&DictValue::Float(f64::INFINITY)),
            Some(f32::INFINITY)
        );
    }

    #[test]
    fn columns_round_trip() {
        use rusqlite::ToSql;
        let vals = [
            DictValue::Bool(true),
            DictValue::Int(i64::MIN),
            DictValue::UInt(u64::MAX),
            DictValue::Float(-0.5),
            DictValue::String("é".into()),
            DictValue::Bytes(vec![0, 1]),
            DictValue::Object {
                collection: "a.B".into(),
                bytes: vec![9],
            },
            DictValue::Json("{}".into()),
        ];
        for v in vals {
            let sql = match v.to_sql().unwrap() {
                rusqlite::types::ToSqlOutput::Owned(o) => o,
                rusqlite::types::ToSqlOutput::Borrowed(b) => {
                    rusqlite::types::Value::try_from(b).unwrap()
                }
                _ => unreachable!(),
            };
            let back =
                DictValue::from_columns(v.kind().code(), v.type_column().map(str::to_owned), sql);
            assert_eq!(back, Some(v));
        }
        assert_eq!(
            DictValue::from_columns(1, None, rusqlite::types::Value::Integer(7)),
            None
        );
        assert_eq!(
            DictValue::from_columns(99, None, rusqlite::types::Value::Integer(7)),
            None
        );
    }
}
