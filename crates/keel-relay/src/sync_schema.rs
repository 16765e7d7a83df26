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
//! keel-schema's model keeps only the attributes keel itself knows, so this module
//! reads the markings from the parser's syntax tree ([`keel_schema::parser`]), which
//! keeps every attribute, and pairs them with the resolved [`Schema`] by table name.
//!
//! Types map as documented in `docs/sync.md`: scalars to typed columns, enums to
//! their underlying integer, `string` to `text`, `[ubyte]` to `bytea`, vectors of
//! scalars and strings to arrays, and structs, tables, unions and vectors of them to
//! `jsonb`. Every synced table also has two columns the relay maintains through a
//! trigger: `keel_version` (a global, increasing row version, bumped by every write,
//! including plain SQL) and `keel_created` (the version at insert, naming the row's
//! incarnation, so a delete can tell a re-inserted row from the one it saw).

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use keel_schema::parser::ast::{self, Literal};
use keel_schema::{FieldType, ScalarType, Schema, Value};

use crate::error::Error;

/// The column keeping a row's version.
pub const VERSION_COLUMN: &str = "keel_version";
/// The column keeping the version at which the row was inserted.
pub const CREATED_COLUMN: &str = "keel_created";

/// How concurrent writes to a field resolve.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ConflictRule {
    /// Field-wise last writer in server order (the default).
    Merge,
    /// Uploads carry deltas that add up.
    Counter,
    /// A client's patch applies only when the row is unchanged since its base version.
    ServerWins,
}

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
        let path = path.as_ref();
        let schema = Schema::from_file(path)?;
        let mut marks = Marks::default();
        let mut seen = Vec::new();
        read_marks(path, path.parent(), &mut marks, &mut seen)?;
        SyncSchema::build(&schema, &marks)
    }

    /// Maps an in-memory `.fbs` text without includes (`file` names it in errors).
    pub fn parse(text: &str, file: &str) -> Result<SyncSchema, Error> {
        let schema = Schema::parse(text, file)?;
        let ast = keel_schema::parser::parse_file(text, file)?;
        let mut marks = Marks::default();
        marks.add(&ast, file);
        SyncSchema::build(&schema, &marks)
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

    fn build(schema: &Schema, marks: &Marks) -> Result<SyncSchema, Error> {
        let mut collections = Vec::new();
        for (full_name, mark) in &marks.tables {
            let problem = |message: String| Error::SyncSchema {
                file: mark.file.clone(),
                message,
            };
            let collection = schema.collection(full_name).ok_or_else(|| {
                problem(format!(
                    "table {full_name} is marked (sync) but is not a collection: mark it (entity) or make it the root_type"
                ))
            })?;
            if collection.primary_key.is_empty() {
                return Err(problem(format!(
                    "synced collection {full_name} needs a (primary) key: rowids are local to one device"
                )));
            }
            let table = schema.table(collection.table);
            let mut columns = Vec::new();
            let mut primary_key = Vec::new();
            for field in table.fields.iter().filter(|f| !f.deprecated) {
                let rule = match mark.fields.get(&field.name) {
                    None => ConflictRule::Merge,
                    Some(rule) => parse_rule(rule).ok_or_else(|| {
                        problem(format!(
                            "{full_name}.{}: expected a sync rule (merge, counter, server_wins), found {rule:?}",
                            field.name
                        ))
                    })?,
                };
                let (pg_type, kind) = map_type(schema, &field.ty);
                if rule == ConflictRule::Counter
                    && !matches!(kind, ValueKind::Int { .. } | ValueKind::Float)
                {
                    return Err(problem(format!(
                        "{full_name}.{}: a (sync: counter) field must be an integer or float",
                        field.name
                    )));
                }
                if field.primary {
                    if rule != ConflictRule::Merge {
                        return Err(problem(format!(
                            "{full_name}.{}: a primary key field takes no sync rule",
                            field.name
                        )));
                    }
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
                    rule,
                });
            }
            collections.push(SyncCollection {
                name: collection.name.clone(),
                table: mark
                    .table
                    .clone()
                    .unwrap_or_else(|| snake_case(&table.name)),
                columns,
                primary_key,
            });
        }
        // Schema order, whatever order the files were read in.
        collections.sort_by_key(|c| {
            schema
                .collections
                .iter()
                .position(|s| s.name == c.name)
                .unwrap_or(usize::MAX)
        });
        Ok(SyncSchema { collections })
    }
}

/// The sync markings found in the syntax trees.
#[derive(Debug, Default)]
struct Marks {
    /// Fully qualified table name → its markings.
    tables: HashMap<String, TableMark>,
}

#[derive(Debug)]
struct TableMark {
    file: String,
    table: Option<String>,
    fields: HashMap<String, String>,
}

impl Marks {
    fn add(&mut self, file: &ast::File, file_name: &str) {
        for decl in &file.decls {
            let ast::DeclKind::Object {
                is_struct: false,
                fields,
            } = &decl.kind
            else {
                continue;
            };
            let Some(sync) = decl.attributes.iter().find(|a| a.name == "sync") else {
                continue;
            };
            let full_name = if decl.namespace.is_empty() {
                decl.name.clone()
            } else {
                format!("{}.{}", decl.namespace, decl.name)
            };
            let table = match &sync.value {
                Some(Literal::Str(s)) | Some(Literal::Ident(s)) => Some(s.clone()),
                _ => None,
            };
            let fields = fields
                .iter()
                .filter_map(|f| {
                    let a = f.attributes.iter().find(|a| a.name == "sync")?;
                    let rule = match &a.value {
                        Some(Literal::Str(s)) | Some(Literal::Ident(s)) => s.clone(),
                        Some(Literal::Int(s)) | Some(Literal::Float(s)) => s.clone(),
                        None => String::new(),
                    };
                    Some((f.name.clone(), rule))
                })
                .collect();
            self.tables.insert(
                full_name,
                TableMark {
                    file: file_name.to_owned(),
                    table,
                    fields,
                },
            );
        }
    }
}

/// Parses `path` and its includes (each once), collecting their markings.
fn read_marks(
    path: &Path,
    root_dir: Option<&Path>,
    marks: &mut Marks,
    seen: &mut Vec<PathBuf>,
) -> Result<(), Error> {
    let canonical = path.canonicalize().unwrap_or_else(|_| path.to_path_buf());
    if seen.contains(&canonical) {
        return Ok(());
    }
    seen.push(canonical);
    let text = std::fs::read_to_string(path).map_err(|source| Error::Read {
        path: path.to_path_buf(),
        source,
    })?;
    let name = path.to_string_lossy();
    let file = keel_schema::parser::parse_file(&text, &name)?;
    marks.add(&file, &name);
    for (include, _) in &file.includes {
        let beside = path.parent().map(|d| d.join(include));
        let from_root = root_dir.map(|d| d.join(include));
        let found = [beside, from_root]
            .into_iter()
            .flatten()
            .find(|p| p.is_file());
        // Schema::from_file already reported a missing include.
        if let Some(found) = found {
            read_marks(&found, root_dir, marks, seen)?;
        }
    }
    Ok(())
}

fn parse_rule(rule: &str) -> Option<ConflictRule> {
    Some(match rule {
        "" | "merge" => ConflictRule::Merge,
        "counter" => ConflictRule::Counter,
        "server_wins" => ConflictRule::ServerWins,
        _ => return None,
    })
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
pub fn snake_case(name: &str) -> String {
    let mut out = String::new();
    for (i, c) in name.chars().enumerate() {
        if c.is_uppercase() {
            if i > 0 && !out.ends_with('_') {
                out.push('_');
            }
            out.extend(c.to_lowercase());
        } else {
            out.push(c);
        }
    }
    out
}

/// A SQL identifier, double-quoted.
pub fn quote_ident(name: &str) -> String {
    format!("\"{}\"", name.replace('"', "\"\""))
}
