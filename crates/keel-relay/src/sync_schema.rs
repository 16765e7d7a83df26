//! Which collections sync, and how each field maps to a PostgreSQL column.
//!
//! The `.fbs` marks what syncs with two custom attributes (declared in the file with
//! `attribute "sync";`):
//!
//! * `(sync)` on a collection's table: the collection syncs with a PostgreSQL table
//!   named after it in snake case (`BlogPost` → `blog_post`), or `(sync: "posts")`
//!   to name the table;
//! * `(sync: counter)` on an integer or float field: uploads send deltas, which add
//!   up on the server (100 offline increments on 5 devices sum to 500);
//!   `(sync: server_wins)`: a client's patch of the field applies only when nobody
//!   changed the row since the version the client saw; `(sync: merge)` is the
//!   default (field-wise last writer in server order).
//!
//! The markings are read by keel-schema ([`keel_schema::sync`]): the resolver keeps
//! them in the model and refuses those that cannot work, so the relay and keel's
//! client read one implementation. This module maps the marked collections to
//! PostgreSQL.
//!
//! Types map as documented in `docs/sync.md`: scalars to typed columns, enums to
//! their underlying integer, `string` to `text`, `[ubyte]` to `bytea`, vectors of
//! scalars and strings to arrays, and structs, tables, unions and vectors of them to
//! `jsonb`. Every synced table also has two columns the relay maintains through a
//! trigger: `keel_version` (a global, increasing row version, bumped by every write,
//! including plain SQL) and `keel_created` (the version at insert, naming the row's
//! incarnation, so a delete can tell a re-inserted row from the one it saw).

use std::path::Path;

use keel_schema::{FieldType, ScalarType, Schema, Value};

use crate::error::Error;

/// The column keeping a row's version.
pub const VERSION_COLUMN: &str = "keel_version";
/// The column keeping the version at which the row was inserted.
pub const CREATED_COLUMN: &str = "keel_created";

/// How concurrent writes to a field resolve (keel-schema's reading of `(sync: …)`).
pub use keel_schema::sync::SyncRule as ConflictRule;

/// A PostgreSQL column type, spelled as `format_type` prints it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PgType {
    /// `boolean`
    Boolean,
    /// `smallint` (byte, ubyte, short)
    SmallInt,
    /// `integer` (ushort, int)
    Integer,
    /// `bigint` (uint, long)
    BigInt,
    /// `numeric(20,0)` (ulong: every u64 fits)
    Numeric,
    /// `real`
    Real,
    /// `double precision`
    Double,
    /// `text`
    Text,
    /// `bytea` (`[ubyte]`)
    Bytea,
    /// `jsonb` (structs, tables, unions, vectors of them)
    Jsonb,
    /// A one-dimensional array of a scalar or text.
    Array(Box<PgType>),
}

impl PgType {
    /// The type as SQL (and as `format_type` reports it).
    pub fn sql(&self) -> String {
        match self {
            PgType::Boolean => "boolean".into(),
            PgType::SmallInt => "smallint".into(),
            PgType::Integer => "integer".into(),
            PgType::BigInt => "bigint".into(),
            PgType::Numeric => "numeric(20,0)".into(),
            PgType::Real => "real".into(),
            PgType::Double => "double precision".into(),
            PgType::Text => "text".into(),
            PgType::Bytea => "bytea".into(),
            PgType::Jsonb => "jsonb".into(),
            PgType::Array(e) => format!("{}[]", e.sql()),
        }
    }
}

/// What JSON a column accepts from a client (checked before PostgreSQL sees it).
#[derive(Debug, Clone, PartialEq)]
pub enum ValueKind {
    /// `true` / `false`.
    Bool,
    /// An integer in `min..=max`.
    Int {
        /// Smallest value.
        min: i128,
        /// Largest value.
        max: i128,
    },
    /// Any number.
    Float,
    /// A string.
    Text,
    /// An array of bytes (0–255).
    Bytes,
    /// An enum: its value name or its number.
    Enum {
        /// Names and values.
        values: Vec<(String, i64)>,
        /// Smallest underlying value.
        min: i128,
        /// Largest underlying value.
        max: i128,
    },
    /// Any JSON (stored as `jsonb`).
    Json,
    /// An array of the element kind.
    Array(Box<ValueKind>),
}

/// One synced field: a column.
#[derive(Debug, Clone, PartialEq)]
pub struct SyncColumn {
    /// The field's (and column's) name.
    pub name: String,
    /// The column type.
    pub pg_type: PgType,
    /// What values a client may send.
    pub kind: ValueKind,
    /// `NOT NULL` (primary key fields and non-optional scalars).
    pub not_null: bool,
    /// The value an insert gets when it leaves the field out (FlatBuffers' default).
    pub default: Option<serde_json::Value>,
    /// How concurrent writes resolve.
    pub rule: ConflictRule,
}

/// One synced collection: a PostgreSQL table.
#[derive(Debug, Clone, PartialEq)]
pub struct SyncCollection {
    /// The collection's fully qualified name (`blog.Post`).
    pub name: String,
    /// The PostgreSQL table.
    pub table: String,
    /// Columns in field order (deprecated fields have none).
    pub columns: Vec<SyncColumn>,
    /// Names of the primary key columns, in key order.
    pub primary_key: Vec<String>,
}

impl SyncCollection {
    /// The column called `name`.
    pub fn column(&self, name: &str) -> Option<&SyncColumn> {
        self.columns.iter().find(|c| c.name == name)
    }
}

/// The synced part of a schema.
#[derive(Debug, Clone, PartialEq)]
pub struct SyncSchema {
    /// Synced collections, in schema order.
    pub collections: Vec<SyncCollection>,
}

impl SyncSchema {
    /// Reads a `.fbs` file (and its includes) and maps its `(sync)` collections.
    pub fn from_file(path: impl AsRef<Path>) -> Result<SyncSchema, Error> {
        let schema = Schema::from_file(path.as_ref())?;
        Ok(SyncSchema::of(&schema))
    }

    /// Maps an in-memory `.fbs` text without includes (`file` names it in errors).
    pub fn parse(text: &str, file: &str) -> Result<SyncSchema, Error> {
        let schema = Schema::parse(text, file)?;
        Ok(SyncSchema::of(&schema))
    }

    /// The collection with this fully qualified or bare name.
    pub fn collection(&self, name: &str) -> Option<&SyncCollection> {
        self.collections
            .iter()
            .find(|c| c.name == name)
            .or_else(|| {
                self.collections
                    .iter()
                    .find(|c| c.name.rsplit('.').next() == Some(name))
            })
    }

    /// The synced collections of a resolved schema (whose markings the resolver
    /// has already checked).
    pub fn of(schema: &Schema) -> SyncSchema {
        let mut collections = Vec::new();
        for collection in &schema.collections {
            let table = schema.table(collection.table);
            let Some(mark) = &table.sync else {
                continue;
            };
            let mut columns = Vec::new();
            let mut primary_key = Vec::new();
            for field in table.fields.iter().filter(|f| !f.deprecated) {
                let (pg_type, kind) = map_type(schema, &field.ty);
                if field.primary {
                    primary_key.push(field.name.clone());
                }
                let scalar_like = matches!(field.ty, FieldType::Scalar(_) | FieldType::Enum(_));
                let not_null = field.primary || (scalar_like && !field.optional);
                let default = if scalar_like && !field.optional && !field.primary {
                    json_of(&field.default)
                } else {
                    None
                };
                columns.push(SyncColumn {
                    name: field.name.clone(),
                    pg_type,
                    kind,
                    not_null,
                    default,
                    rule: field.sync,
                });
            }
            collections.push(SyncCollection {
                name: collection.name.clone(),
                table: mark.table.clone(),
                columns,
                primary_key,
            });
        }
        SyncSchema { collections }
    }
}

fn scalar_type(t: ScalarType) -> (PgType, ValueKind) {
    let int = |pg, min: i128, max: i128| (pg, ValueKind::Int { min, max });
    match t {
        ScalarType::Bool => (PgType::Boolean, ValueKind::Bool),
        ScalarType::I8 => int(PgType::SmallInt, i8::MIN.into(), i8::MAX.into()),
        ScalarType::U8 => int(PgType::SmallInt, 0, u8::MAX.into()),
        ScalarType::I16 => int(PgType::SmallInt, i16::MIN.into(), i16::MAX.into()),
        ScalarType::U16 => int(PgType::Integer, 0, u16::MAX.into()),
        ScalarType::I32 => int(PgType::Integer, i32::MIN.into(), i32::MAX.into()),
        ScalarType::U32 => int(PgType::BigInt, 0, u32::MAX.into()),
        ScalarType::I64 => int(PgType::BigInt, i64::MIN.into(), i64::MAX.into()),
        ScalarType::U64 => int(PgType::Numeric, 0, u64::MAX.into()),
        ScalarType::F32 => (PgType::Real, ValueKind::Float),
        ScalarType::F64 => (PgType::Double, ValueKind::Float),
    }
}

fn map_type(schema: &Schema, ty: &FieldType) -> (PgType, ValueKind) {
    match ty {
        FieldType::Scalar(t) => scalar_type(*t),
        FieldType::Enum(e) => {
            let def = &schema.enums[*e];
            let (pg, kind) = scalar_type(def.underlying);
            let ValueKind::Int { min, max } = kind else {
                return (pg, kind);
            };
            let values = def
                .values
                .iter()
                .map(|v| (v.name.clone(), v.value))
                .collect();
            (pg, ValueKind::Enum { values, min, max })
        }
        FieldType::String => (PgType::Text, ValueKind::Text),
        FieldType::Vector(element) => match &**element {
            FieldType::Scalar(ScalarType::U8) => (PgType::Bytea, ValueKind::Bytes),
            FieldType::Scalar(_) | FieldType::Enum(_) | FieldType::String => {
                let (pg, kind) = map_type(schema, element);
                (
                    PgType::Array(Box::new(pg)),
                    ValueKind::Array(Box::new(kind)),
                )
            }
            _ => (PgType::Jsonb, ValueKind::Json),
        },
        FieldType::Struct(_) | FieldType::Table(_) | FieldType::Union(_) => {
            (PgType::Jsonb, ValueKind::Json)
        }
    }
}

fn json_of(value: &Value) -> Option<serde_json::Value> {
    match value {
        Value::Null => None,
        Value::Bool(b) => Some((*b).into()),
        Value::Int(i) => Some((*i).into()),
        Value::Float(f) => serde_json::Number::from_f64(*f).map(serde_json::Value::Number),
        Value::Text(s) => Some(s.clone().into()),
        _ => None,
    }
}

/// `BlogPost` → `blog_post`.
pub use keel_schema::sync::snake_case;

/// A SQL identifier, double-quoted.
pub fn quote_ident(name: &str) -> String {
    format!("\"{}\"", name.replace('"', "\"\""))
}

/// `text` as an SQL string literal (`'it''s'`).
pub fn quote_literal(text: &str) -> String {
    format!("'{}'", text.replace('\'', "''"))
}
