//! The dynamic reader and builder: FlatBuffers bytes ⇄ [`Value`]s, driven by a
//! runtime [`Schema`] instead of generated code.
//!
//! This is how the engine reads fields for SQL indexes and in-memory query
//! evaluation, and how the FFI and tests make bytes without generated types.
//!
//! Reading follows FlatBuffers semantics ([`Object::get`]):
//!
//! | stored                               | value read                      |
//! |--------------------------------------|---------------------------------|
//! | scalar present / absent              | its value / its default         |
//! | optional scalar (`= null`) absent    | `Null`                          |
//! | `bool`, enum                         | `Bool`, `Int` (underlying)      |
//! | string absent                        | `Null`                          |
//! | `[ubyte]`/`[byte]`                   | `Blob`                          |
//! | other vector, sub-table (as a whole) | `Bool(true)` when present (a presence marker), else `Null` |
//! | struct (as a whole)                  | `Blob` of its inline bytes      |
//! | union field (as a whole)             | `Int` of its type tag, `Null` when `NONE` |
//! | path through an absent table, or a union holding another member | `Null` |
//!
//! For speed, resolve a path once with [`DynamicTable::resolve`] and read it with
//! [`Object::get_resolved`]/[`Object::get_ref`]: no allocation for scalars, none for
//! strings with `get_ref`.
//!
//! ```
//! use keel_schema::{Schema, Value};
//! let schema = Schema::parse(
//!     "table Author { name: string; }
//!      table Post { title: string; priority: int = 5; author: Author; }
//!      root_type Post;", "p.fbs").unwrap();
//! let posts = schema.reader("Post").unwrap();
//! let bytes = posts.encode_json(&serde_json::json!({
//!     "title": "Hi", "author": { "name": "Ada" }
//! })).unwrap();
//! let obj = posts.read(&bytes).unwrap();
//! let path = posts.path("author.name").unwrap();
//! assert_eq!(obj.get(&path), Value::Text("Ada".into()));
//! assert_eq!(obj.get(&posts.path("priority").unwrap()), Value::Int(5)); // default
//! ```

use std::borrow::Cow;

use serde_json::{Map, Number, Value as Json};

use crate::model::*;
use crate::path::{FieldPath, PathStep};
use crate::record::DecodeError;
use crate::value::Value;
use crate::wire::{self, Builder, Offset, TableRef, VectorRef};

/// A path or name that does not exist in the schema.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct PathError(pub String);

/// Bytes could not be built from the given JSON/values.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{path}: {message}")]
pub struct EncodeError {
    /// Where (`author.name`, `tags[2]`).
    pub path: String,
    /// What was expected.
    pub message: String,
}

/// A borrowed field value (no allocation for text and blobs).
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum ValueRef<'a> {
    /// See [`Value::Null`].
    Null,
    /// See [`Value::Bool`].
    Bool(bool),
    /// See [`Value::Int`].
    Int(i64),
    /// See [`Value::Float`].
    Float(f64),
    /// See [`Value::Text`].
    Text(&'a str),
    /// See [`Value::Blob`].
    Blob(&'a [u8]),
}

impl ValueRef<'_> {
    /// Owned copy.
    pub fn to_value(self) -> Value {
        match self {
            ValueRef::Null => Value::Null,
            ValueRef::Bool(b) => Value::Bool(b),
            ValueRef::Int(i) => Value::Int(i),
            ValueRef::Float(f) => Value::Float(f),
            ValueRef::Text(s) => Value::Text(s.to_owned()),
            ValueRef::Blob(b) => Value::Blob(b.to_vec()),
        }
    }
}

/// Reads and writes objects of one table of a [`Schema`].
#[derive(Debug, Clone, Copy)]
pub struct DynamicTable<'s> {
    schema: &'s Schema,
    table: usize,
}

#[derive(Debug, Clone, PartialEq)]
enum RStep {
    /// Table field in `slot`, then continue in sub-table.
    SubTable { slot: u16 },
    /// Union slot: tag must equal `member`, then continue in member table.
    Union { slot: u16, member: u8 },
    /// Struct field of a table (inline bytes), then struct offsets.
    Struct { slot: u16, size: usize },
    /// Leaf in a table.
    Leaf { slot: u16, leaf: Leaf },
    /// Leaf inside the current struct bytes at `offset`.
    StructLeaf { offset: usize, leaf: Leaf },
    /// Nested struct inside struct: narrow the bytes.
    StructNarrow { offset: usize, size: usize },
}

#[derive(Debug, Clone, PartialEq)]
enum Leaf {
    Scalar {
        ty: ScalarType,
        default: Value,
        optional: bool,
    },
    Str,
    Bytes,
    Present {
        elem_size: usize,
    },
    StructWhole {
        size: usize,
    },
    UnionTag {
        type_slot: u16,
    },
}

/// A [`FieldPath`] checked against a table and compiled for fast reads.
#[derive(Debug, Clone, PartialEq)]
pub struct ResolvedPath {
    steps: Vec<RStep>,
    path: FieldPath,
}

impl ResolvedPath {
    /// The path this was resolved from.
    pub fn path(&self) -> &FieldPath {
        &self.path
    }

    /// Whether the path reads a number (an integer, float, bool or enum field, or a
    /// union's type tag): what arithmetic in queries accepts.
    pub fn is_numeric(&self) -> bool {
        matches!(
            self.steps.last(),
            Some(
                RStep::Leaf {
                    leaf: Leaf::Scalar { .. } | Leaf::UnionTag { .. },
                    ..
                } | RStep::StructLeaf {
                    leaf: Leaf::Scalar { .. },
                    ..
                }
            )
        )
    }

    /// A text that is equal for two resolved paths exactly when they read the same
    /// value out of every buffer: slots, union members, the leaf's type, default and
    /// optionality — no names. keel stores it beside a materialised index column, so
    /// a schema change that alters what the column should hold (a new default, a
    /// widened type) is noticed and the column rebuilt.
    ///
    /// ```
    /// use keel_schema::Schema;
    /// let a = Schema::parse("table T { n: int = 1; } root_type T;", "a.fbs").unwrap();
    /// let b = Schema::parse("table T { n: int = 2; } root_type T;", "b.fbs").unwrap();
    /// let sig = |s: &Schema| { let t = s.reader("T").unwrap(); t.resolve(&t.path("n").unwrap()).unwrap().read_signature() };
    /// assert_ne!(sig(&a), sig(&b));
    /// ```
    pub fn read_signature(&self) -> String {
        format!("{:?}", self.steps)
    }

    /// This path compiled for [`RootScalar::read`], if it names a scalar (or enum)
    /// field of the table itself — no sub-table, union or struct on the way.
    ///
    /// ```
    /// use keel_schema::Schema;
    /// let s = Schema::parse("table I { x: int; } table T { n: short = 3; i: I; } root_type T;", "t.fbs").unwrap();
    /// let t = s.reader("T").unwrap();
    /// let n = t.resolve(&t.path("n").unwrap()).unwrap().root_scalar().unwrap();
    /// let bytes = t.encode_json(&serde_json::json!({})).unwrap();
    /// assert_eq!(n.read(&bytes)?, keel_schema::ValueRef::Int(3)); // the default
    /// assert!(t.resolve(&t.path("i.x").unwrap()).unwrap().root_scalar().is_none());
    /// # Ok::<(), keel_schema::DecodeError>(())
    /// ```
    pub fn root_scalar(&self) -> Option<RootScalar> {
        match &self.steps[..] {
            [RStep::Leaf {
                slot,
                leaf:
                    Leaf::Scalar {
                        ty,
                        default,
                        optional,
                    },
            }] => Some(RootScalar {
                slot: *slot,
                ty: *ty,
                default: if *optional {
                    ValueRef::Null
                } else {
                    scalar_ref(default.clone())
                },
            }),
            _ => None,
        }
    }
}

/// A scalar field of a root table, read straight from a buffer with one vtable
/// lookup (made by [`ResolvedPath::root_scalar`]): what a filter evaluated on
/// every row of a scan reads.
#[derive(Debug, Clone, PartialEq)]
pub struct RootScalar {
    slot: u16,
    ty: ScalarType,
    /// What an absent field reads as (`Null` for an optional one).
    default: ValueRef<'static>,
}

impl RootScalar {
    /// The field's value in `bytes`, a buffer whose root is the table the path was
    /// resolved against: the same as [`DynamicTable::open`] followed by
    /// [`Object::get_ref`], errors included. Bounds-checked like every read here:
    /// damaged bytes give an error, never a panic.
    #[inline]
    pub fn read(&self, bytes: &[u8]) -> Result<ValueRef<'static>, DecodeError> {
        match self.read_quick(bytes) {
            Some(v) => Ok(v),
            None => self.read_checked(bytes),
        }
    }

    /// [`RootScalar::read`] on bytes every check of which passes — the checks of
    /// [`TableRef::root`] and [`TableRef::field_pos`], as plain comparisons — and
    /// `None` where any fails (the checked read then names the error). Per row of
    /// a scan this costs a fraction of building the `Result`s of the checked read.
    #[inline]
    fn read_quick(&self, buf: &[u8]) -> Option<ValueRef<'static>> {
        // Every `at` below is under `buf.len()` plus a vtable offset (< 2^17):
        // `at + N` cannot overflow.
        #[inline(always)]
        fn le<const N: usize>(buf: &[u8], at: usize) -> Option<[u8; N]> {
            let mut a = [0u8; N];
            a.copy_from_slice(buf.get(at..at + N)?);
            Some(a)
        }
        let len = buf.len();
        let pos = u32::from_le_bytes(le(buf, 0)?) as usize;
        if pos >= len {
            return None;
        }
        let vt = pos as i64 - i32::from_le_bytes(le(buf, pos)?) as i64;
        if vt < 0 || vt as usize >= len {
            return None;
        }
        let vt = vt as usize;
        let vt_len = u16::from_le_bytes(le(buf, vt)?) as usize;
        let size = u16::from_le_bytes(le(buf, vt + 2)?) as usize;
        if vt_len < 4 || vt_len & 1 != 0 || vt + vt_len > len || size < 4 || pos + size > len {
            return None;
        }
        let entry = 4 + 2 * self.slot as usize;
        if entry + 2 > vt_len {
            return Some(self.default);
        }
        let off = u16::from_le_bytes(le(buf, vt + entry)?) as usize;
        if off == 0 {
            return Some(self.default);
        }
        if off < 4 || off + self.ty.size() > size {
            return None;
        }
        let p = pos + off;
        Some(match self.ty {
            ScalarType::Bool => ValueRef::Bool(le::<1>(buf, p)?[0] != 0),
            ScalarType::I8 => ValueRef::Int(i8::from_le_bytes(le(buf, p)?) as i64),
            ScalarType::U8 => ValueRef::Int(u8::from_le_bytes(le(buf, p)?) as i64),
            ScalarType::I16 => ValueRef::Int(i16::from_le_bytes(le(buf, p)?) as i64),
            ScalarType::U16 => ValueRef::Int(u16::from_le_bytes(le(buf, p)?) as i64),
            ScalarType::I32 => ValueRef::Int(i32::from_le_bytes(le(buf, p)?) as i64),
            ScalarType::U32 => ValueRef::Int(u32::from_le_bytes(le(buf, p)?) as i64),
            ScalarType::I64 => ValueRef::Int(i64::from_le_bytes(le(buf, p)?)),
            ScalarType::U64 => ValueRef::Int(u64::from_le_bytes(le(buf, p)?) as i64),
            ScalarType::F32 => ValueRef::Float(f32::from_le_bytes(le(buf, p)?) as f64),
            ScalarType::F64 => ValueRef::Float(f64::from_le_bytes(le(buf, p)?)),
        })
    }

    /// The read with every check's error: what [`Object::get_ref`] does for the path.
    #[cold]
    fn read_checked(&self, bytes: &[u8]) -> Result<ValueRef<'static>, DecodeError> {
        let t = TableRef::root(bytes)?;
        match t.field_pos(self.slot, self.ty.size())? {
            Some(p) => scalar_value(t.buf(), p, self.ty).map(scalar_ref),
            None => Ok(self.default),
        }
    }
}

impl Schema {
    /// A reader/builder for the collection or table called `name` (full or bare name).
    pub fn reader(&self, name: &str) -> Result<DynamicTable<'_>, PathError> {
        let table = self
            .collection(name)
            .map(|c| c.table)
            .or_else(|| self.table_index(name))
            .ok_or_else(|| PathError(format!("no table or collection named {name:?}")))?;
        Ok(DynamicTable {
            schema: self,
            table,
        })
    }

    /// A reader/builder for table `index`.
    pub fn table_reader(&self, index: usize) -> Option<DynamicTable<'_>> {
        (index < self.tables.len()).then_some(DynamicTable {
            schema: self,
            table: index,
        })
    }
}

fn scalar_value(buf: &[u8], p: usize, ty: ScalarType) -> Result<Value, DecodeError> {
    Ok(match ty {
        ScalarType::Bool => Value::Bool(wire::read::<u8>(buf, p, "bool")? != 0),
        ScalarType::I8 => Value::Int(wire::read::<i8>(buf, p, "scalar")? as i64),
        ScalarType::U8 => Value::Int(wire::read::<u8>(buf, p, "scalar")? as i64),
        ScalarType::I16 => Value::Int(wire::read::<i16>(buf, p, "scalar")? as i64),
        ScalarType::U16 => Value::Int(wire::read::<u16>(buf, p, "scalar")? as i64),
        ScalarType::I32 => Value::Int(wire::read::<i32>(buf, p, "scalar")? as i64),
        ScalarType::U32 => Value::Int(wire::read::<u32>(buf, p, "scalar")? as i64),
        ScalarType::I64 => Value::Int(wire::read::<i64>(buf, p, "scalar")?),
        ScalarType::U64 => Value::Int(wire::read::<u64>(buf, p, "scalar")? as i64),
        ScalarType::F32 => Value::Float(wire::read::<f32>(buf, p, "scalar")? as f64),
        ScalarType::F64 => Value::Float(wire::read::<f64>(buf, p, "scalar")?),
    })
}

fn scalar_ref(v: Value) -> ValueRef<'static> {
    match v {
        Value::Bool(b) => ValueRef::Bool(b),
        Value::Int(i) => ValueRef::Int(i),
        Value::Float(f) => ValueRef::Float(f),
        _ => ValueRef::Null,
    }
}

impl<'s> DynamicTable<'s> {
    /// The schema.
    pub fn schema(&self) -> &'s Schema {
        self.schema
    }

    /// The table definition.
    pub fn table(&self) -> &'s Table {
        &self.schema.tables[self.table]
    }

    /// Parses a dotted path (`author.name`, `content.Image.width`) into a [`FieldPath`].
    pub fn path(&self, dotted: &str) -> Result<FieldPath, PathError> {
        let mut steps = Vec::new();
        let mut cur = Cur::Table(self.table);
        let mut parts = dotted.split('.').peekable();
        while let Some(part) = parts.next() {
            match cur {
                Cur::Table(t) => {
                    let table = &self.schema.tables[t];
                    let f = table.field(part).ok_or_else(|| {
                        PathError(format!("table {} has no field {part:?}", table.full_name()))
                    })?;
                    match &f.ty {
                        FieldType::Union(u) if parts.peek().is_some() => {
                            let mname = parts.next().unwrap_or_default();
                            let un = &self.schema.unions[*u];
                            let m =
                                un.members.iter().find(|m| m.name == mname).ok_or_else(|| {
                                    PathError(format!(
                                        "union {} has no member {mname:?}",
                                        un.full_name()
                                    ))
                                })?;
                            steps.push(PathStep::UnionMember {
                                id: f.id,
                                name: Cow::Owned(f.name.clone()),
                                member: m.tag,
                                member_name: Cow::Owned(m.name.clone()),
                            });
                            cur = Cur::Table(m.table);
                            continue;
                        }
                        FieldType::Table(i) => cur = Cur::Table(*i),
                        FieldType::Struct(i) => cur = Cur::Struct(*i),
                        _ => cur = Cur::Leaf,
                    }
                    steps.push(PathStep::Field {
                        id: f.id,
                        name: Cow::Owned(f.name.clone()),
                    });
                }
                Cur::Struct(s) => {
                    let sd = &self.schema.structs[s];
                    let (i, f) = sd
                        .fields
                        .iter()
                        .enumerate()
                        .find(|(_, f)| f.name == part)
                        .ok_or_else(|| {
                            PathError(format!("struct {} has no field {part:?}", sd.full_name()))
                        })?;
                    cur = match f.ty {
                        FieldType::Struct(n) => Cur::Struct(n),
                        _ => Cur::Leaf,
                    };
                    steps.push(PathStep::Field {
                        id: i as u16,
                        name: Cow::Owned(f.name.clone()),
                    });
                }
                Cur::Leaf => {
                    return Err(PathError(format!(
                        "{dotted:?}: cannot read {part:?} inside a scalar, string or vector"
                    )))
                }
            }
        }
        Ok(FieldPath::new(steps))
    }

    /// Checks `path` against the table and compiles it for [`Object::get_resolved`].
    pub fn resolve(&self, path: &FieldPath) -> Result<ResolvedPath, PathError> {
        let s = self.schema;
        let mut steps = Vec::new();
        let mut cur = Cur::Table(self.table);
        let n = path.steps().len();
        if n == 0 {
            return Err(PathError("empty field path".into()));
        }
        // Field `id` of table `t`, which every table step (plain or union member) needs.
        let field = |t: usize, id: u16| {
            let table = &s.tables[t];
            table.field_by_id(id).ok_or_else(|| {
                PathError(format!(
                    "{path}: table {} has no field with id {id}",
                    table.full_name()
                ))
            })
        };
        for (i, step) in path.steps().iter().enumerate() {
            let last = i + 1 == n;
            match (cur, step) {
                (Cur::Table(t), PathStep::Field { id, .. }) => {
                    let f = field(t, *id)?;
                    let leaf = |leaf| RStep::Leaf { slot: f.id, leaf };
                    match &f.ty {
                        FieldType::Table(ti) if !last => {
                            steps.push(RStep::SubTable { slot: f.id });
                            cur = Cur::Table(*ti);
                        }
                        FieldType::Struct(si) if !last => {
                            steps.push(RStep::Struct {
                                slot: f.id,
                                size: s.structs[*si].size,
                            });
                            cur = Cur::Struct(*si);
                        }
                        _ if !last => {
                            return Err(PathError(format!(
                                "{path}: field {} has no fields",
                                f.name
                            )))
                        }
                        FieldType::Scalar(ty) => steps.push(leaf(Leaf::Scalar {
                            ty: *ty,
                            default: f.default.clone(),
                            optional: f.optional,
                        })),
                        FieldType::Enum(e) => steps.push(leaf(Leaf::Scalar {
                            ty: s.enums[*e].underlying,
                            default: f.default.clone(),
                            optional: f.optional,
                        })),
                        FieldType::String => steps.push(leaf(Leaf::Str)),
                        FieldType::Vector(inner) => match **inner {
                            FieldType::Scalar(ScalarType::U8)
                            | FieldType::Scalar(ScalarType::I8) => steps.push(leaf(Leaf::Bytes)),
                            _ => steps.push(leaf(Leaf::Present { elem_size: 1 })),
                        },
                        FieldType::Table(_) => steps.push(leaf(Leaf::Present { elem_size: 0 })),
                        FieldType::Struct(si) => steps.push(leaf(Leaf::StructWhole {
                            size: s.structs[*si].size,
                        })),
                        FieldType::Union(_) => steps.push(leaf(Leaf::UnionTag {
                            type_slot: f.id.saturating_sub(1),
                        })),
                    }
                }
                (Cur::Table(t), PathStep::UnionMember { id, member, .. }) => {
                    let f = field(t, *id)?;
                    let FieldType::Union(u) = f.ty else {
                        return Err(PathError(format!(
                            "{path}: field {} is not a union",
                            f.name
                        )));
                    };
                    let m = s.unions[u].member(*member).ok_or_else(|| {
                        PathError(format!(
                            "{path}: union {} has no member with tag {member}",
                            s.unions[u].full_name()
                        ))
                    })?;
                    steps.push(RStep::Union {
                        slot: f.id,
                        member: *member,
                    });
                    if last {
                        steps.push(RStep::Leaf {
                            slot: f.id,
                            leaf: Leaf::Present { elem_size: 0 },
                        });
                    }
                    cur = Cur::Table(m.table);
                }
                (Cur::Struct(si), PathStep::Field { id, .. }) => {
                    let sd = &s.structs[si];
                    let f = sd.fields.get(*id as usize).ok_or_else(|| {
                        PathError(format!(
                            "{path}: struct {} has no field {id}",
                            sd.full_name()
                        ))
                    })?;
                    match &f.ty {
                        FieldType::Struct(n) if !last => {
                            steps.push(RStep::StructNarrow {
                                offset: f.offset,
                                size: f.size,
                            });
                            cur = Cur::Struct(*n);
                        }
                        FieldType::Struct(_) => steps.push(RStep::StructLeaf {
                            offset: f.offset,
                            leaf: Leaf::StructWhole { size: f.size },
                        }),
                        _ if !last => {
                            return Err(PathError(format!(
                                "{path}: struct field {} has no fields",
                                f.name
                            )))
                        }
                        FieldType::Scalar(ty) => steps.push(RStep::StructLeaf {
                            offset: f.offset,
                            leaf: Leaf::Scalar {
                                ty: *ty,
                                default: Value::Null,
                                optional: false,
                            },
                        }),
                        FieldType::Enum(e) => steps.push(RStep::StructLeaf {
                            offset: f.offset,
                            leaf: Leaf::Scalar {
                                ty: s.enums[*e].underlying,
                                default: Value::Null,
                                optional: false,
                            },
                        }),
                        _ => {
                            return Err(PathError(format!("{path}: unsupported struct field type")))
                        }
                    }
                }
                (Cur::Struct(_), PathStep::UnionMember { .. }) => {
                    return Err(PathError(format!("{path}: structs have no unions")))
                }
                (Cur::Leaf, _) => {
                    return Err(PathError(format!("{path}: path continues past a leaf")))
                }
            }
        }
        Ok(ResolvedPath {
            steps,
            path: path.clone(),
        })
    }

    /// Verifies the whole buffer against the schema (every reachable field of this
    /// table and its children), then returns the object.
    ///
    /// Valid means exactly what the generated type's `decode` accepts: the
    /// `flatbuffers` crate's verifier (as run by flatc-generated code: alignment,
    /// NUL-terminated UTF-8 strings, consistent unions, depth and size limits) and
    /// keel's bounds-checked read of every field. So bytes accepted here — by
    /// `insert_bytes` or the FFI — always decode through the generated type.
    pub fn read<'a>(&self, bytes: &'a [u8]) -> Result<Object<'a, 's>, DecodeError> {
        fb_verify(self.schema, self.table, bytes)?;
        let t = TableRef::root(bytes)?;
        wire::with_budget(bytes.len(), || {
            verify_table(self.schema, self.table, t, true)
        })?;
        Ok(Object {
            schema: self.schema,
            table: self.table,
            t,
        })
    }

    /// Every field of the object in `bytes` that this schema knows, all the way
    /// down, lies within `bytes` — the root table's field `except` aside, which is
    /// not followed. keel's store asks this of an object's buffer less its trailing
    /// key string (`keel-query`'s `body.rs`): if another field still points into
    /// the cut-off bytes (a string shared with the key), the buffer is stored whole.
    pub fn within(&self, bytes: &[u8], except: u16) -> bool {
        TableRef::root(bytes)
            .and_then(|t| verify_fields(self.schema, self.table, t, false, Some(except)))
            .is_ok()
    }

    /// Checks only the root table header; fields are checked as they are read (still
    /// safe on any input; reads of damaged fields give `Null` / an error). Use this
    /// when reading a few fields per object, e.g. in an SQL function.
    pub fn open<'a>(&self, bytes: &'a [u8]) -> Result<Object<'a, 's>, DecodeError> {
        Ok(Object {
            schema: self.schema,
            table: self.table,
            t: TableRef::root(bytes)?,
        })
    }

    /// Encodes a JSON object (flatc's JSON conventions: enums by name or number,
    /// unions as `x_type` + `x`, structs as objects) into a finished buffer.
    pub fn encode_json(&self, json: &Json) -> Result<Vec<u8>, EncodeError> {
        let mut b = Builder::new();
        let root = encode_table(self.schema, self.table, json, &mut b, "")?;
        Ok(b.finish(root, self.schema.file_identifier.as_deref()))
    }
}

impl DynamicTable<'_> {
    /// A new version of the object `stored`: the fields with ids `fields` come from
    /// `changed` (present, absent or default there, they are so in the result), every
    /// other field keeps its value in `stored`. Both buffers are verified first.
    /// This is how a change request is applied to the version stored at commit time.
    ///
    /// Fields are deep-copied by the schema; a union member or field this schema
    /// does not know (written by a newer version) is not carried over.
    ///
    /// ```
    /// use keel_schema::{Schema, Value};
    /// let s = Schema::parse("table T { id: int (primary); hp: short; mana: short; } root_type T;", "t.fbs")?;
    /// let t = s.reader("T")?;
    /// let stored = t.encode_json(&serde_json::json!({"id": 1, "hp": 10, "mana": 50}))?;
    /// let stale = t.encode_json(&serde_json::json!({"id": 1, "hp": 5, "mana": 7}))?;
    /// let hp = t.table().field("hp").unwrap().id;
    /// let merged = t.patch(&stored, &stale, &[hp])?;
    /// let obj = t.read(&merged)?;
    /// assert_eq!(obj.get(&t.path("hp")?), Value::Int(5));
    /// assert_eq!(obj.get(&t.path("mana")?), Value::Int(50)); // kept
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn patch(
        &self,
        stored: &[u8],
        changed: &[u8],
        fields: &[u16],
    ) -> Result<Vec<u8>, DecodeError> {
        let old = self.read(stored)?.t;
        // `changed` may be partial (from `encode_values`): its key may be absent.
        fb_verify(self.schema, self.table, changed)?;
        let new = TableRef::root(changed)?;
        wire::with_budget(changed.len(), || {
            verify_table(self.schema, self.table, new, false)
        })?;
        let mut b = Builder::new();
        let root = copy_table(self.schema, self.table, old, Some((new, fields)), &mut b)?;
        Ok(b.finish(root, self.schema.file_identifier.as_deref()))
    }

    /// The object in `stored` with every element equal to `value` removed from
    /// its vector field `field` (scalars or strings): a whole buffer to
    /// [`patch`](Self::patch) that field from. How keel clears a to-many
    /// reference to a deleted object.
    ///
    /// ```
    /// use keel_schema::Value;
    /// let s = keel_schema::Schema::parse("table T { id: int (primary); tags: [string]; } root_type T;", "t.fbs")?;
    /// let t = s.reader("T")?;
    /// let b = t.encode_json(&serde_json::json!({"id": 1, "tags": ["a", "b", "a"]}))?;
    /// let c = t.without_element(&b, 1, &Value::from("a"))?;
    /// assert_eq!(t.read(&t.patch(&b, &c, &[1])?)?.elements(1)?, vec![Value::from("b")]);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn without_element(
        &self,
        stored: &[u8],
        field: u16,
        value: &Value,
    ) -> Result<Vec<u8>, EncodeError> {
        let f = self
            .table()
            .field_by_id(field)
            .ok_or_else(|| eerr("", format!("no field with id {field}")))?;
        let mut json = self
            .read(stored)
            .and_then(|o| o.to_json())
            .map_err(|e| eerr(&f.name, e.to_string()))?;
        if let Some(Json::Array(a)) = json.get_mut(&f.name) {
            a.retain(|e| match value {
                Value::Text(s) => e.as_str() != Some(s.as_str()),
                Value::Int(i) => e.as_i64() != Some(*i) && e.as_u64().map(|u| u as i64) != Some(*i),
                _ => true,
            });
        }
        self.encode_json(&json)
    }

    /// Bytes of an object that holds only `values` (field name → value; `Null`
    /// leaves the field absent). Values must fit the field types: scalars, enums
    /// (their number), strings, and `[ubyte]`/`[byte]` as `Blob`. Used with
    /// [`patch`](Self::patch) to apply a change given as values (the FFI's
    /// `WriteOp::Change`).
    ///
    /// ```
    /// use keel_schema::{Schema, Value};
    /// let s = Schema::parse("table T { id: int (primary); name: string; } root_type T;", "t.fbs")?;
    /// let t = s.reader("T")?;
    /// let b = t.encode_values(&[("name".into(), Value::from("x"))])?;
    /// assert_eq!(t.read(&b)?.get(&t.path("name")?), Value::from("x"));
    /// assert!(t.encode_values(&[("name".into(), Value::Int(1))]).is_err());
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn encode_values(&self, values: &[(String, Value)]) -> Result<Vec<u8>, EncodeError> {
        let table = self.table();
        let mut obj = Map::new();
        for (name, v) in values {
            let f = table
                .field(name)
                .ok_or_else(|| eerr(name, format!("table {} has no such field", table.name)))?;
            let j = match (v, &f.ty) {
                (Value::Null, _) => continue,
                (_, FieldType::Table(_) | FieldType::Union(_) | FieldType::Struct(_)) => {
                    return Err(eerr(
                        name,
                        "a table, struct or union field cannot be set from a single value; change it with an object",
                    ))
                }
                (Value::Blob(b), FieldType::Vector(inner))
                    if matches!(
                        **inner,
                        FieldType::Scalar(ScalarType::U8) | FieldType::Scalar(ScalarType::I8)
                    ) =>
                {
                    let signed = matches!(**inner, FieldType::Scalar(ScalarType::I8));
                    Json::Array(
                        b.iter()
                            .map(|x| if signed { Json::from(*x as i8) } else { Json::from(*x) })
                            .collect(),
                    )
                }
                (_, FieldType::Vector(_)) => {
                    return Err(eerr(
                        name,
                        "a vector field can be set from a Blob only when it is [ubyte] or [byte]; change it with an object",
                    ))
                }
                (Value::Bool(b), _) => Json::Bool(*b),
                (Value::Int(i), FieldType::Scalar(ScalarType::U64)) => Json::from(*i as u64),
                (Value::Int(i), _) => Json::from(*i),
                (Value::Float(x), _) => Json::Number(Number::from_f64(*x).ok_or_else(|| {
                    eerr(name, format!("{x} cannot be stored through a change by value"))
                })?),
                (Value::Text(t), _) => Json::String(t.clone()),
                (Value::Blob(_), _) => return Err(eerr(name, "expected a scalar or string, found a blob")),
            };
            if let (FieldType::Scalar(ScalarType::Bool), Json::Number(_)) = (&f.ty, &j) {
                return Err(eerr(name, "expected a bool"));
            }
            obj.insert(name.clone(), j);
        }
        self.encode_json(&Json::Object(obj))
    }
}

/// An inline value waiting for its table (children are written first).
enum Inline {
    Offset(u16, Offset),
    Raw(u16, Vec<u8>, usize),
}

/// Deep-copies the table `src` (of table `ti`) into `b`; with `changed`, the listed
/// fields come from that table instead.
fn copy_table(
    s: &Schema,
    ti: usize,
    src: TableRef<'_>,
    changed: Option<(TableRef<'_>, &[u16])>,
    b: &mut Builder,
) -> Result<Offset, DecodeError> {
    let mut pending = Vec::new();
    for f in &s.tables[ti].fields {
        let t = match changed {
            Some((c, ids)) if ids.contains(&f.id) => c,
            _ => src,
        };
        copy_field(s, f, t, b, &mut pending)?;
    }
    b.start_table();
    pending.sort_by_key(|p| {
        std::cmp::Reverse(match p {
            Inline::Raw(_, bytes, _) => bytes.len().max(1),
            Inline::Offset(..) => 4,
        })
    });
    for p in pending {
        match p {
            Inline::Offset(slot, o) => b.add_offset(slot, o),
            Inline::Raw(slot, bytes, align) => b.add_struct(slot, &bytes, align),
        }
    }
    Ok(b.end_table())
}

fn copy_field(
    s: &Schema,
    f: &Field,
    t: TableRef<'_>,
    b: &mut Builder,
    pending: &mut Vec<Inline>,
) -> Result<(), DecodeError> {
    let raw = |size: usize| -> Result<Option<Vec<u8>>, DecodeError> {
        Ok(t.field_pos(f.id, size)?
            .and_then(|p| t.buf().get(p..p + size))
            .map(<[u8]>::to_vec))
    };
    match &f.ty {
        FieldType::Scalar(st) => {
            if let Some(bytes) = raw(st.size())? {
                pending.push(Inline::Raw(f.id, bytes, st.size()));
            }
        }
        FieldType::Enum(e) => {
            let size = s.enums[*e].underlying.size();
            if let Some(bytes) = raw(size)? {
                pending.push(Inline::Raw(f.id, bytes, size));
            }
        }
        FieldType::Struct(si) => {
            let sd = &s.structs[*si];
            if let Some(bytes) = raw(sd.size)? {
                pending.push(Inline::Raw(f.id, bytes, sd.align));
            }
        }
        FieldType::String => {
            if let Some(x) = t.str(f.id)? {
                pending.push(Inline::Offset(f.id, b.create_string(x)));
            }
        }
        FieldType::Table(sub) => {
            if let Some(st) = t.table(f.id)? {
                let o = copy_table(s, *sub, st, None, b)?;
                pending.push(Inline::Offset(f.id, o));
            }
        }
        FieldType::Union(u) => {
            let tag = t.get::<u8>(f.id.saturating_sub(1), 0)?;
            if let (Some(st), Some(m)) = (t.table(f.id)?, s.unions[*u].member(tag)) {
                let o = copy_table(s, m.table, st, None, b)?;
                pending.push(Inline::Raw(f.id.saturating_sub(1), vec![tag], 1));
                pending.push(Inline::Offset(f.id, o));
            }
        }
        FieldType::Vector(inner) if matches!(**inner, FieldType::Union(_)) => {
            let FieldType::Union(u) = **inner else {
                unreachable!("matched above")
            };
            let Some((tags, values)) = t.union_vector(f.id)? else {
                return Ok(());
            };
            // Elements keel cannot read (NONE, a member unknown to this schema) are
            // not carried over, as in generated code.
            let mut kept = Vec::new();
            let mut offs = Vec::new();
            for (i, tag) in tags.iter().enumerate() {
                if let Some(m) = s.unions[u].member(*tag) {
                    offs.push(copy_table(s, m.table, values.table(i)?, None, b)?);
                    kept.push(*tag);
                }
            }
            let tv = b.create_scalar_vector(&kept);
            let ov = b.create_offset_vector(&offs);
            pending.push(Inline::Offset(f.id.saturating_sub(1), tv));
            pending.push(Inline::Offset(f.id, ov));
        }
        FieldType::Vector(inner) => {
            let size = elem_size(s, inner);
            let Some(v) = t.vector(f.id, size)? else {
                return Ok(());
            };
            let o = match &**inner {
                FieldType::String => {
                    let offs = (0..v.len())
                        .map(|i| v.str(i).map(|x| b.create_string(x)))
                        .collect::<Result<Vec<_>, _>>()?;
                    b.create_offset_vector(&offs)
                }
                FieldType::Table(sub) => {
                    let mut offs = Vec::with_capacity(v.len());
                    for i in 0..v.len() {
                        offs.push(copy_table(s, *sub, v.table(i)?, None, b)?);
                    }
                    b.create_offset_vector(&offs)
                }
                FieldType::Struct(si) => {
                    b.create_struct_vector(v.bytes(), size, s.structs[*si].align)
                }
                _ => b.create_struct_vector(v.bytes(), size, size),
            };
            pending.push(Inline::Offset(f.id, o));
        }
    }
    Ok(())
}

#[derive(Clone, Copy)]
enum Cur {
    Table(usize),
    Struct(usize),
    Leaf,
}

/// Runs the `flatbuffers` crate's verifier over `bytes` with root table `ti`, visiting
/// the same fields in the same way as the `Verifiable` impls generated code has
/// (`codegen`: every field that is not deprecated), so both accept the same bytes.
fn fb_verify(s: &Schema, ti: usize, bytes: &[u8]) -> Result<(), DecodeError> {
    let run = |named: bool| {
        let opts = wire::verifier_options(bytes.len());
        let mut v = flatbuffers::Verifier::new(&opts, bytes);
        v.get_uoffset(0)
            .and_then(|off| fb_table(s, ti, &mut v, (off as usize).saturating_add(0), named))
    };
    // Field names only matter in the error's trace: the first pass goes without
    // them (no string copied per field of every object written), and only bytes it
    // rejects are verified again, with names, for the message.
    run(false)
        .or_else(|_| run(true))
        .map_err(wire::verifier_error)
}

type FbResult = Result<(), flatbuffers::InvalidFlatbuffer>;

/// A field's name for the verifier's error trace, made only when `named`.
fn trace_name(named: bool, name: impl FnOnce() -> String) -> Cow<'static, str> {
    if named {
        Cow::Owned(name())
    } else {
        Cow::Borrowed("")
    }
}

/// `ForwardsUOffset<Table>::run_verifier` for a table known at run time.
fn fb_table_at_offset(
    s: &Schema,
    ti: usize,
    v: &mut flatbuffers::Verifier,
    pos: usize,
    named: bool,
) -> FbResult {
    let off = v.get_uoffset(pos)? as usize;
    fb_table(s, ti, v, off.saturating_add(pos), named)
}

/// `named`: put field names into the verifier's error trace (see [`fb_verify`]).
fn fb_table(
    s: &Schema,
    ti: usize,
    v: &mut flatbuffers::Verifier,
    pos: usize,
    named: bool,
) -> FbResult {
    use flatbuffers::{ForwardsUOffset, Vector, Verifiable};
    let mut tv = v.visit_table(pos)?;
    for f in s.tables[ti].fields.iter().filter(|f| !f.deprecated) {
        let voff = f.vtable_offset();
        let name = trace_name(named, || f.name.clone());
        tv = match &f.ty {
            FieldType::Scalar(st) => fb_scalar_field(tv, *st, name, voff)?,
            FieldType::Enum(e) => fb_scalar_field(tv, s.enums[*e].underlying, name, voff)?,
            FieldType::String => tv.visit_field::<ForwardsUOffset<&str>>(name, voff, false)?,
            FieldType::Struct(si) => {
                // generated structs verify as `in_buffer::<[u8; SIZE]>` (alignment 1)
                if let Some(p) = tv.deref(voff)? {
                    tv.verifier().range_in_buffer(p, s.structs[*si].size)?;
                }
                tv
            }
            FieldType::Table(sub) => {
                if let Some(p) = tv.deref(voff)? {
                    fb_table_at_offset(s, *sub, tv.verifier(), p, named)?;
                }
                tv
            }
            FieldType::Union(u) => tv.visit_union::<u8, _>(
                trace_name(named, || format!("{}_type", f.name)),
                voff - 2,
                name,
                voff,
                false,
                |tag, v, pos| match s.unions[*u].member(tag) {
                    Some(m) => fb_table_at_offset(s, m.table, v, pos, named),
                    None => Ok(()),
                },
            )?,
            FieldType::Vector(inner) if matches!(**inner, FieldType::Union(_)) => {
                let FieldType::Union(u) = **inner else {
                    unreachable!("matched above")
                };
                wire::visit_union_vector(tv, &f.name, voff - 2, voff, |tag, v, pos| {
                    match s.unions[u].member(tag) {
                        Some(m) => fb_table_at_offset(s, m.table, v, pos, named),
                        None => Ok(()),
                    }
                })?
            }
            FieldType::Vector(inner) => {
                if let Some(p) = tv.deref(voff)? {
                    let v = tv.verifier();
                    let off = v.get_uoffset(p)? as usize;
                    let at = off.saturating_add(p);
                    match &**inner {
                        FieldType::Scalar(st) => fb_scalar_vector(v, *st, at)?,
                        FieldType::Enum(e) => fb_scalar_vector(v, s.enums[*e].underlying, at)?,
                        FieldType::String => {
                            <Vector<'_, ForwardsUOffset<&str>>>::run_verifier(v, at)?
                        }
                        FieldType::Struct(si) => {
                            let len = v.get_uoffset(at)? as usize;
                            let start = at.saturating_add(4);
                            v.range_in_buffer(start, len.saturating_mul(s.structs[*si].size))?;
                        }
                        FieldType::Table(sub) => {
                            let len = v.get_uoffset(at)? as usize;
                            let start = at.saturating_add(4);
                            v.is_aligned::<u32>(start)?;
                            v.range_in_buffer(start, len.saturating_mul(4))?;
                            for i in 0..len {
                                fb_table_at_offset(s, *sub, v, start + 4 * i, named)?;
                            }
                        }
                        _ => {}
                    }
                }
                tv
            }
        };
    }
    tv.finish();
    Ok(())
}

fn fb_scalar_field<'v, 'o, 'b>(
    tv: flatbuffers::TableVerifier<'v, 'o, 'b>,
    st: ScalarType,
    name: Cow<'static, str>,
    voff: u16,
) -> Result<flatbuffers::TableVerifier<'v, 'o, 'b>, flatbuffers::InvalidFlatbuffer> {
    match st {
        ScalarType::Bool => tv.visit_field::<bool>(name, voff, false),
        ScalarType::I8 => tv.visit_field::<i8>(name, voff, false),
        ScalarType::U8 => tv.visit_field::<u8>(name, voff, false),
        ScalarType::I16 => tv.visit_field::<i16>(name, voff, false),
        ScalarType::U16 => tv.visit_field::<u16>(name, voff, false),
        ScalarType::I32 => tv.visit_field::<i32>(name, voff, false),
        ScalarType::U32 => tv.visit_field::<u32>(name, voff, false),
        ScalarType::I64 => tv.visit_field::<i64>(name, voff, false),
        ScalarType::U64 => tv.visit_field::<u64>(name, voff, false),
        ScalarType::F32 => tv.visit_field::<f32>(name, voff, false),
        ScalarType::F64 => tv.visit_field::<f64>(name, voff, false),
    }
}

fn fb_scalar_vector(v: &mut flatbuffers::Verifier, st: ScalarType, at: usize) -> FbResult {
    use flatbuffers::{Vector, Verifiable};
    match st {
        ScalarType::Bool => <Vector<'_, bool>>::run_verifier(v, at),
        ScalarType::I8 => <Vector<'_, i8>>::run_verifier(v, at),
        ScalarType::U8 => <Vector<'_, u8>>::run_verifier(v, at),
        ScalarType::I16 => <Vector<'_, i16>>::run_verifier(v, at),
        ScalarType::U16 => <Vector<'_, u16>>::run_verifier(v, at),
        ScalarType::I32 => <Vector<'_, i32>>::run_verifier(v, at),
        ScalarType::U32 => <Vector<'_, u32>>::run_verifier(v, at),
        ScalarType::I64 => <Vector<'_, i64>>::run_verifier(v, at),
        ScalarType::U64 => <Vector<'_, u64>>::run_verifier(v, at),
        ScalarType::F32 => <Vector<'_, f32>>::run_verifier(v, at),
        ScalarType::F64 => <Vector<'_, f64>>::run_verifier(v, at),
    }
}

/// keel's own bounds-checked walk of every field, as the generated `__read` does it
/// (deprecated fields are skipped there too; a primary-key string is required).
fn verify_table(
    s: &Schema,
    ti: usize,
    t: TableRef<'_>,
    require_key: bool,
) -> Result<(), DecodeError> {
    verify_fields(s, ti, t, require_key, None)
}

/// [`verify_table`], not following the field with id `except` of this table.
fn verify_fields(
    s: &Schema,
    ti: usize,
    t: TableRef<'_>,
    require_key: bool,
    except: Option<u16>,
) -> Result<(), DecodeError> {
    let fields = s.tables[ti].fields.iter();
    for f in fields.filter(|f| !f.deprecated && Some(f.id) != except) {
        match &f.ty {
            FieldType::Scalar(ty) => {
                t.field_pos(f.id, ty.size())?;
            }
            FieldType::Enum(e) => {
                t.field_pos(f.id, s.enums[*e].underlying.size())?;
            }
            FieldType::String => {
                if t.str(f.id)?.is_none() && f.primary && require_key {
                    return Err(DecodeError::Field {
                        field: "primary key",
                        reason: Cow::Owned(format!("required field {} is missing", f.name)),
                    });
                }
            }
            FieldType::Struct(si) => {
                t.struct_bytes(f.id, s.structs[*si].size)?;
            }
            FieldType::Table(sub) => {
                if let Some(st) = t.table(f.id)? {
                    verify_table(s, *sub, st, require_key)?;
                }
            }
            FieldType::Union(u) => {
                let tag = t.get::<u8>(f.id.saturating_sub(1), 0)?;
                if let Some(st) = t.table(f.id)? {
                    if let Some(m) = s.unions[*u].member(tag) {
                        verify_table(s, m.table, st, require_key)?;
                    }
                }
            }
            FieldType::Vector(inner) if matches!(**inner, FieldType::Union(_)) => {
                let FieldType::Union(u) = **inner else {
                    unreachable!("matched above")
                };
                if let Some((tags, values)) = t.union_vector(f.id)? {
                    // `NONE` elements are not followed; any other tag's element
                    // must be a table (see `wire::visit_union_vector`).
                    for (i, tag) in tags.iter().enumerate().filter(|(_, t)| **t != 0) {
                        let st = values.table(i)?;
                        if let Some(m) = s.unions[u].member(*tag) {
                            verify_table(s, m.table, st, require_key)?;
                        }
                    }
                }
            }
            FieldType::Vector(inner) => {
                let size = elem_size(s, inner);
                if let Some(v) = t.vector(f.id, size)? {
                    match &**inner {
                        FieldType::String => {
                            for i in 0..v.len() {
                                v.str(i)?;
                            }
                        }
                        FieldType::Table(sub) => {
                            for i in 0..v.len() {
                                verify_table(s, *sub, v.table(i)?, require_key)?;
                            }
                        }
                        _ => {}
                    }
                }
            }
        }
    }
    Ok(())
}

fn elem_size(s: &Schema, ty: &FieldType) -> usize {
    match ty {
        FieldType::Scalar(t) => t.size(),
        FieldType::Enum(e) => s.enums[*e].underlying.size(),
        FieldType::Struct(i) => s.structs[*i].size,
        _ => 4,
    }
}

/// One object read through a [`DynamicTable`].
#[derive(Debug, Clone, Copy)]
pub struct Object<'a, 's> {
    schema: &'s Schema,
    table: usize,
    t: TableRef<'a>,
}

impl<'a, 's> Object<'a, 's> {
    /// The value at `path` (resolved on each call; see [`Object::get_resolved`]).
    /// Unknown paths and damaged bytes read as `Null`.
    pub fn get(&self, path: &FieldPath) -> Value {
        match (DynamicTable {
            schema: self.schema,
            table: self.table,
        })
        .resolve(path)
        {
            Ok(r) => self.get_resolved(&r),
            Err(_) => Value::Null,
        }
    }

    /// The value at a pre-resolved path. Damaged bytes read as `Null`.
    #[inline]
    pub fn get_resolved(&self, path: &ResolvedPath) -> Value {
        self.get_ref(path).map_or(Value::Null, ValueRef::to_value)
    }

    /// The value at a pre-resolved path, borrowed from the bytes.
    pub fn get_ref(&self, path: &ResolvedPath) -> Result<ValueRef<'a>, DecodeError> {
        let mut t = self.t;
        let mut sbytes: &'a [u8] = &[];
        for step in &path.steps {
            match step {
                RStep::SubTable { slot } => match t.table(*slot)? {
                    Some(n) => t = n,
                    None => return Ok(ValueRef::Null),
                },
                RStep::Union { slot, member } => {
                    if t.get::<u8>(slot.saturating_sub(1), 0)? != *member {
                        return Ok(ValueRef::Null);
                    }
                    match t.table(*slot)? {
                        Some(n) => t = n,
                        None => return Ok(ValueRef::Null),
                    }
                }
                RStep::Struct { slot, size } => match t.struct_bytes(*slot, *size)? {
                    Some(b) => sbytes = b,
                    None => return Ok(ValueRef::Null),
                },
                RStep::StructNarrow { offset, size } => {
                    sbytes = sbytes.get(*offset..offset + size).unwrap_or(&[]);
                }
                RStep::StructLeaf { offset, leaf } => {
                    return match leaf {
                        Leaf::Scalar { ty, .. } => {
                            Ok(scalar_ref(scalar_value(sbytes, *offset, *ty)?))
                        }
                        Leaf::StructWhole { size } => Ok(sbytes
                            .get(*offset..offset + size)
                            .map_or(ValueRef::Null, ValueRef::Blob)),
                        _ => Ok(ValueRef::Null),
                    }
                }
                RStep::Leaf { slot, leaf } => {
                    return Ok(match leaf {
                        Leaf::Scalar {
                            ty,
                            default,
                            optional,
                        } => match t.field_pos(*slot, ty.size())? {
                            Some(p) => scalar_ref(scalar_value(t.buf(), p, *ty)?),
                            None if *optional => ValueRef::Null,
                            None => scalar_ref(default.clone()),
                        },
                        Leaf::Str => t.str(*slot)?.map_or(ValueRef::Null, ValueRef::Text),
                        Leaf::Bytes => t
                            .vector(*slot, 1)?
                            .map_or(ValueRef::Null, |v| ValueRef::Blob(v.bytes())),
                        Leaf::Present { .. } => match t.offset_target(*slot)? {
                            Some(_) => ValueRef::Bool(true),
                            None => ValueRef::Null,
                        },
                        Leaf::StructWhole { size } => t
                            .struct_bytes(*slot, *size)?
                            .map_or(ValueRef::Null, ValueRef::Blob),
                        Leaf::UnionTag { type_slot } => match t.get::<u8>(*type_slot, 0)? {
                            0 => ValueRef::Null,
                            tag => ValueRef::Int(tag as i64),
                        },
                    });
                }
            }
        }
        // a path ending in a union member step ends with a Leaf; unreachable otherwise
        Ok(ValueRef::Null)
    }

    /// The whole buffer the object was opened from.
    pub fn bytes(&self) -> &'a [u8] {
        self.t.buf()
    }

    /// The elements of the vector field with id `field` of this object, for a
    /// vector of scalars or strings (a to-many reference holds its keys so):
    /// empty when absent, `Null`-free. Other vectors and non-vector fields give
    /// an empty list.
    ///
    /// ```
    /// let s = keel_schema::Schema::parse("table T { id: int (primary); tags: [string]; } root_type T;", "t.fbs")?;
    /// let t = s.reader("T")?;
    /// let b = t.encode_json(&serde_json::json!({"id": 1, "tags": ["a", "b"]}))?;
    /// assert_eq!(t.read(&b)?.elements(1)?, vec!["a".into(), "b".into()]);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn elements(&self, field: u16) -> Result<Vec<Value>, DecodeError> {
        let Some(f) = self.schema.tables[self.table].field_by_id(field) else {
            return Ok(Vec::new());
        };
        let FieldType::Vector(e) = &f.ty else {
            return Ok(Vec::new());
        };
        let (size, scalar) = match &**e {
            FieldType::Scalar(t) => (t.size(), Some(*t)),
            FieldType::Enum(i) => (
                self.schema.enums[*i].underlying.size(),
                Some(self.schema.enums[*i].underlying),
            ),
            FieldType::String => (4, None),
            _ => return Ok(Vec::new()),
        };
        let Some(v) = self.t.vector(field, size)? else {
            return Ok(Vec::new());
        };
        (0..v.len())
            .map(|i| match scalar {
                Some(t) => scalar_value(v.bytes(), i * size, t),
                None => v.str(i).map(|s| Value::Text(s.to_owned())),
            })
            .collect()
    }

    /// The object as JSON in flatc's conventions (enums by name, unions as
    /// `x_type` plus `x`). Deprecated fields are skipped. Scalars are always present (defaults filled in); absent strings,
    /// tables, vectors and null optionals are omitted; NaN/∞ become strings.
    pub fn to_json(&self) -> Result<Json, DecodeError> {
        table_json(self.schema, self.table, self.t)
    }

    /// The field `field` (an index into the table's fields) as [`to_json`](Self::to_json)
    /// renders it, without rendering the rest; `None` where `to_json` leaves it
    /// out. Deprecated fields, unions and vectors of unions (two members each in
    /// `to_json`), and indexes past the end, are `None`.
    pub fn field_json(&self, field: usize) -> Result<Option<Json>, DecodeError> {
        match self.schema.tables[self.table].fields.get(field) {
            Some(f) if !f.deprecated => field_json(self.schema, f, self.t),
            _ => Ok(None),
        }
    }
}

fn num_json(v: Value, ty: ScalarType) -> Json {
    match v {
        Value::Bool(b) => Json::Bool(b),
        Value::Int(i) if ty == ScalarType::U64 => Json::Number(Number::from(i as u64)),
        Value::Int(i) => Json::Number(Number::from(i)),
        Value::Float(f) => Number::from_f64(f).map_or_else(
            || {
                Json::String(if f.is_nan() {
                    "nan".into()
                } else if f > 0.0 {
                    "inf".into()
                } else {
                    "-inf".into()
                })
            },
            Json::Number,
        ),
        _ => Json::Null,
    }
}

fn enum_json(s: &Schema, e: usize, v: Value) -> Json {
    let en = &s.enums[e];
    match v.as_i64().and_then(|i| en.name_of(i)) {
        Some(n) => Json::String(n.to_owned()),
        None => num_json(v, en.underlying),
    }
}

fn struct_json(s: &Schema, si: usize, bytes: &[u8]) -> Result<Json, DecodeError> {
    let mut m = Map::new();
    for f in &s.structs[si].fields {
        let j = match &f.ty {
            FieldType::Scalar(t) => num_json(scalar_value(bytes, f.offset, *t)?, *t),
            FieldType::Enum(e) => enum_json(
                s,
                *e,
                scalar_value(bytes, f.offset, s.enums[*e].underlying)?,
            ),
            FieldType::Struct(n) => {
                struct_json(s, *n, bytes.get(f.offset..f.offset + f.size).unwrap_or(&[]))?
            }
            _ => Json::Null,
        };
        m.insert(f.name.clone(), j);
    }
    Ok(Json::Object(m))
}

fn elem_json(s: &Schema, ty: &FieldType, v: &VectorRef<'_>, i: usize) -> Result<Json, DecodeError> {
    let b = v.bytes();
    Ok(match ty {
        FieldType::Scalar(t) => num_json(scalar_value(b, i * t.size(), *t)?, *t),
        FieldType::Enum(e) => {
            let u = s.enums[*e].underlying;
            enum_json(s, *e, scalar_value(b, i * u.size(), u)?)
        }
        FieldType::String => Json::String(v.str(i)?.to_owned()),
        FieldType::Struct(si) => struct_json(s, *si, v.struct_bytes(i)?)?,
        FieldType::Table(ti) => table_json(s, *ti, v.table(i)?)?,
        _ => Json::Null,
    })
}

fn table_json(s: &Schema, ti: usize, t: TableRef<'_>) -> Result<Json, DecodeError> {
    let mut m = Map::new();
    for f in s.tables[ti].fields.iter().filter(|f| !f.deprecated) {
        let j = match &f.ty {
            FieldType::Union(u) => {
                let tag = t.get::<u8>(f.id.saturating_sub(1), 0)?;
                let (Some(m_def), Some(st)) = (s.unions[*u].member(tag), t.table(f.id)?) else {
                    continue;
                };
                m.insert(format!("{}_type", f.name), Json::String(m_def.name.clone()));
                table_json(s, m_def.table, st)?
            }
            FieldType::Vector(inner) if matches!(**inner, FieldType::Union(_)) => {
                let FieldType::Union(u) = **inner else {
                    unreachable!("matched above")
                };
                let Some((tags, values)) = t.union_vector(f.id)? else {
                    continue;
                };
                let mut types = Vec::with_capacity(tags.len());
                let mut objs = Vec::with_capacity(tags.len());
                for (i, tag) in tags.iter().enumerate() {
                    match s.unions[u].member(*tag) {
                        Some(md) => {
                            types.push(Json::String(md.name.clone()));
                            objs.push(table_json(s, md.table, values.table(i)?)?);
                        }
                        None if *tag == 0 => {
                            types.push(Json::String("NONE".into()));
                            objs.push(Json::Null);
                        }
                        None => {
                            types.push(Json::from(*tag));
                            objs.push(Json::Null);
                        }
                    }
                }
                m.insert(format!("{}_type", f.name), Json::Array(types));
                Json::Array(objs)
            }
            _ => match field_json(s, f, t)? {
                Some(j) => j,
                None => continue,
            },
        };
        m.insert(f.name.clone(), j);
    }
    Ok(Json::Object(m))
}

/// One field of `t` as [`table_json`] renders it; `None` where it is left out.
/// Unions and vectors of unions (two members of the object each) are not
/// rendered here: `None`.
fn field_json(s: &Schema, f: &Field, t: TableRef<'_>) -> Result<Option<Json>, DecodeError> {
    Ok(Some(match &f.ty {
        FieldType::Scalar(ty) => match t.field_pos(f.id, ty.size())? {
            Some(p) => num_json(scalar_value(t.buf(), p, *ty)?, *ty),
            None if f.optional => return Ok(None),
            None => num_json(f.default.clone(), *ty),
        },
        FieldType::Enum(e) => {
            let u = s.enums[*e].underlying;
            match t.field_pos(f.id, u.size())? {
                Some(p) => enum_json(s, *e, scalar_value(t.buf(), p, u)?),
                None if f.optional => return Ok(None),
                None => enum_json(s, *e, f.default.clone()),
            }
        }
        FieldType::String => match t.str(f.id)? {
            Some(x) => Json::String(x.to_owned()),
            None => return Ok(None),
        },
        FieldType::Struct(si) => match t.struct_bytes(f.id, s.structs[*si].size)? {
            Some(b) => struct_json(s, *si, b)?,
            None => return Ok(None),
        },
        FieldType::Table(sub) => match t.table(f.id)? {
            Some(st) => table_json(s, *sub, st)?,
            None => return Ok(None),
        },
        FieldType::Vector(inner) if matches!(**inner, FieldType::Union(_)) => return Ok(None),
        FieldType::Vector(inner) => match t.vector(f.id, elem_size(s, inner))? {
            Some(v) => Json::Array(
                (0..v.len())
                    .map(|i| elem_json(s, inner, &v, i))
                    .collect::<Result<_, _>>()?,
            ),
            None => return Ok(None),
        },
        FieldType::Union(_) => return Ok(None),
    }))
}

fn eerr(path: &str, message: impl Into<String>) -> EncodeError {
    EncodeError {
        path: if path.is_empty() {
            "(root)".into()
        } else {
            path.to_owned()
        },
        message: message.into(),
    }
}

fn join(path: &str, name: &str) -> String {
    if path.is_empty() {
        name.to_owned()
    } else {
        format!("{path}.{name}")
    }
}

/// JSON → scalar value of `ty` (enums: name or number).
fn json_scalar(
    s: &Schema,
    ty: &FieldType,
    j: &Json,
    path: &str,
) -> Result<(ScalarType, Value), EncodeError> {
    let (st, en) = match ty {
        FieldType::Scalar(t) => (*t, None),
        FieldType::Enum(e) => (s.enums[*e].underlying, Some(&s.enums[*e])),
        _ => return Err(eerr(path, "expected a scalar type")),
    };
    let v = match (j, en) {
        (Json::String(name), Some(en)) => Value::Int(en.value(name).ok_or_else(|| {
            eerr(
                path,
                format!("expected a value of enum {}, found {name:?}", en.name),
            )
        })?),
        (Json::Bool(b), _) if st == ScalarType::Bool => Value::Bool(*b),
        (Json::Number(n), _) if st == ScalarType::Bool => Value::Bool(n.as_i64() != Some(0)),
        (Json::Number(n), _) if st.is_float() => Value::Float(n.as_f64().unwrap_or(0.0)),
        (Json::String(x), _) if st.is_float() => Value::Float(match x.as_str() {
            "nan" => f64::NAN,
            "inf" => f64::INFINITY,
            "-inf" => f64::NEG_INFINITY,
            _ => return Err(eerr(path, format!("expected a number, found {x:?}"))),
        }),
        (Json::Number(n), _) if st.is_integer() => {
            let i = n
                .as_i64()
                .map(i128::from)
                .or_else(|| n.as_u64().map(i128::from))
                .ok_or_else(|| eerr(path, format!("expected an integer, found {n}")))?;
            let (lo, hi): (i128, i128) = match st {
                ScalarType::I8 => (i8::MIN.into(), i8::MAX.into()),
                ScalarType::U8 => (0, u8::MAX.into()),
                ScalarType::I16 => (i16::MIN.into(), i16::MAX.into()),
                ScalarType::U16 => (0, u16::MAX.into()),
                ScalarType::I32 => (i32::MIN.into(), i32::MAX.into()),
                ScalarType::U32 => (0, u32::MAX.into()),
                ScalarType::I64 => (i64::MIN.into(), i64::MAX.into()),
                _ => (0, u64::MAX.into()),
            };
            if i < lo || i > hi {
                return Err(eerr(
                    path,
                    format!("expected a {} in {lo}..={hi}, found {i}", st.fbs_name()),
                ));
            }
            Value::Int(i as i64)
        }
        _ => {
            return Err(eerr(
                path,
                format!("expected a {} value, found {j}", st.fbs_name()),
            ))
        }
    };
    Ok((st, v))
}

fn write_scalar_bytes(out: &mut [u8], off: usize, st: ScalarType, v: &Value) {
    let i = v.as_i64().unwrap_or(0);
    let f = v.as_f64().unwrap_or(0.0);
    let o = &mut out[off..];
    use wire::WireScalar as W;
    match st {
        ScalarType::Bool | ScalarType::U8 => W::to_le(i as u8, o),
        ScalarType::I8 => W::to_le(i as i8, o),
        ScalarType::I16 => W::to_le(i as i16, o),
        ScalarType::U16 => W::to_le(i as u16, o),
        ScalarType::I32 => W::to_le(i as i32, o),
        ScalarType::U32 => W::to_le(i as u32, o),
        ScalarType::I64 => W::to_le(i, o),
        ScalarType::U64 => W::to_le(i as u64, o),
        ScalarType::F32 => W::to_le(f as f32, o),
        ScalarType::F64 => W::to_le(f, o),
    }
}

fn add_scalar(b: &mut Builder, slot: u16, st: ScalarType, v: &Value, default: Option<&Value>) {
    if default == Some(v) {
        return;
    }
    let i = v.as_i64().unwrap_or(0);
    let f = v.as_f64().unwrap_or(0.0);
    match st {
        ScalarType::Bool | ScalarType::U8 => b.add_scalar_always(slot, i as u8),
        ScalarType::I8 => b.add_scalar_always(slot, i as i8),
        ScalarType::I16 => b.add_scalar_always(slot, i as i16),
        ScalarType::U16 => b.add_scalar_always(slot, i as u16),
        ScalarType::I32 => b.add_scalar_always(slot, i as i32),
        ScalarType::U32 => b.add_scalar_always(slot, i as u32),
        ScalarType::I64 => b.add_scalar_always(slot, i),
        ScalarType::U64 => b.add_scalar_always(slot, i as u64),
        ScalarType::F32 => b.add_scalar_always(slot, f as f32),
        ScalarType::F64 => b.add_scalar_always(slot, f),
    }
}

fn struct_bytes(s: &Schema, si: usize, j: &Json, path: &str) -> Result<Vec<u8>, EncodeError> {
    let sd = &s.structs[si];
    let mut out = vec![0u8; sd.size];
    let obj = j
        .as_object()
        .ok_or_else(|| eerr(path, format!("expected an object for struct {}", sd.name)))?;
    for f in &sd.fields {
        let p = join(path, &f.name);
        let fj = obj
            .get(&f.name)
            .ok_or_else(|| eerr(&p, "expected a value: struct fields are required"))?;
        match &f.ty {
            FieldType::Struct(n) => {
                let inner = struct_bytes(s, *n, fj, &p)?;
                out[f.offset..f.offset + f.size].copy_from_slice(&inner);
            }
            ty => {
                let (st, v) = json_scalar(s, ty, fj, &p)?;
                write_scalar_bytes(&mut out, f.offset, st, &v);
            }
        }
    }
    Ok(out)
}

enum Pending {
    Offset(u16, Offset),
    Struct(u16, Vec<u8>, usize),
    Scalar(u16, ScalarType, Value, Option<Value>),
}

fn encode_table(
    s: &Schema,
    ti: usize,
    j: &Json,
    b: &mut Builder,
    path: &str,
) -> Result<Offset, EncodeError> {
    let table = &s.tables[ti];
    let obj = j.as_object().ok_or_else(|| {
        eerr(
            path,
            format!("expected an object for table {}, found {j}", table.name),
        )
    })?;
    for k in obj.keys() {
        let known = table.field(k).is_some()
            || k.strip_suffix("_type").is_some_and(|base| {
                table
                    .field(base)
                    .is_some_and(|f| f.union_type_id().is_some())
            });
        if !known {
            return Err(eerr(
                &join(path, k),
                format!("table {} has no such field", table.name),
            ));
        }
    }
    let mut pending = Vec::new();
    for f in &table.fields {
        let p = join(path, &f.name);
        let Some(fj) = obj.get(&f.name) else { continue };
        if fj.is_null() {
            continue;
        }
        match &f.ty {
            FieldType::Scalar(_) | FieldType::Enum(_) => {
                let (st, v) = json_scalar(s, &f.ty, fj, &p)?;
                let default = (!f.optional).then(|| f.default.clone());
                pending.push(Pending::Scalar(f.id, st, v, default));
            }
            FieldType::String => {
                let x = fj
                    .as_str()
                    .ok_or_else(|| eerr(&p, format!("expected a string, found {fj}")))?;
                pending.push(Pending::Offset(f.id, b.create_string(x)));
            }
            FieldType::Struct(si) => {
                pending.push(Pending::Struct(
                    f.id,
                    struct_bytes(s, *si, fj, &p)?,
                    s.structs[*si].align,
                ));
            }
            FieldType::Table(sub) => {
                let o = encode_table(s, *sub, fj, b, &p)?;
                pending.push(Pending::Offset(f.id, o));
            }
            FieldType::Union(u) => {
                let un = &s.unions[*u];
                let tj = obj
                    .get(&format!("{}_type", f.name))
                    .and_then(Json::as_str)
                    .ok_or_else(|| {
                        eerr(
                            &p,
                            format!("expected {}_type naming a member of {}", f.name, un.name),
                        )
                    })?;
                let m = un.members.iter().find(|m| m.name == tj).ok_or_else(|| {
                    eerr(
                        &p,
                        format!("expected a member of union {}, found {tj:?}", un.name),
                    )
                })?;
                let o = encode_table(s, m.table, fj, b, &p)?;
                pending.push(Pending::Scalar(
                    f.id.saturating_sub(1),
                    ScalarType::U8,
                    Value::Int(m.tag as i64),
                    None,
                ));
                pending.push(Pending::Offset(f.id, o));
            }
            FieldType::Vector(inner) if matches!(**inner, FieldType::Union(_)) => {
                let FieldType::Union(u) = **inner else {
                    unreachable!("matched above")
                };
                let un = &s.unions[u];
                let arr = fj
                    .as_array()
                    .ok_or_else(|| eerr(&p, format!("expected an array, found {fj}")))?;
                let types = obj
                    .get(&format!("{}_type", f.name))
                    .and_then(Json::as_array)
                    .filter(|t| t.len() == arr.len())
                    .ok_or_else(|| {
                        eerr(
                            &p,
                            format!(
                                "expected {}_type: an array of member names of {} as long as {}",
                                f.name, un.name, f.name
                            ),
                        )
                    })?;
                let mut tags = Vec::with_capacity(arr.len());
                let mut offs = Vec::with_capacity(arr.len());
                for (i, (tj, e)) in types.iter().zip(arr).enumerate() {
                    let ep = format!("{p}[{i}]");
                    let m = tj
                        .as_str()
                        .and_then(|n| un.members.iter().find(|m| m.name == n))
                        .ok_or_else(|| {
                            eerr(
                                &ep,
                                format!("expected a member of union {}, found {tj}", un.name),
                            )
                        })?;
                    tags.push(m.tag);
                    offs.push(encode_table(s, m.table, e, b, &ep)?);
                }
                let t = b.create_scalar_vector(&tags);
                let o = b.create_offset_vector(&offs);
                pending.push(Pending::Offset(f.id.saturating_sub(1), t));
                pending.push(Pending::Offset(f.id, o));
            }
            FieldType::Vector(inner) => {
                let arr = fj
                    .as_array()
                    .ok_or_else(|| eerr(&p, format!("expected an array, found {fj}")))?;
                let o = match &**inner {
                    FieldType::String => {
                        let mut offs = Vec::with_capacity(arr.len());
                        for (i, e) in arr.iter().enumerate() {
                            let x = e
                                .as_str()
                                .ok_or_else(|| eerr(&format!("{p}[{i}]"), "expected a string"))?;
                            offs.push(b.create_string(x));
                        }
                        b.create_offset_vector(&offs)
                    }
                    FieldType::Table(sub) => {
                        let mut offs = Vec::with_capacity(arr.len());
                        for (i, e) in arr.iter().enumerate() {
                            offs.push(encode_table(s, *sub, e, b, &format!("{p}[{i}]"))?);
                        }
                        b.create_offset_vector(&offs)
                    }
                    FieldType::Struct(si) => {
                        let sd = &s.structs[*si];
                        let mut bytes = Vec::with_capacity(arr.len() * sd.size);
                        for (i, e) in arr.iter().enumerate() {
                            bytes.extend(struct_bytes(s, *si, e, &format!("{p}[{i}]"))?);
                        }
                        b.create_struct_vector(&bytes, sd.size, sd.align)
                    }
                    ty => {
                        let mut vals = Vec::with_capacity(arr.len());
                        let mut st = ScalarType::U8;
                        for (i, e) in arr.iter().enumerate() {
                            let (t, v) = json_scalar(s, ty, e, &format!("{p}[{i}]"))?;
                            st = t;
                            vals.push(v);
                        }
                        let st = match ty {
                            FieldType::Scalar(t) => *t,
                            FieldType::Enum(e) => s.enums[*e].underlying,
                            _ => st,
                        };
                        let mut bytes = vec![0u8; vals.len() * st.size()];
                        for (i, v) in vals.iter().enumerate() {
                            write_scalar_bytes(&mut bytes, i * st.size(), st, v);
                        }
                        b.create_struct_vector(&bytes, st.size(), st.size())
                    }
                };
                pending.push(Pending::Offset(f.id, o));
            }
        }
    }
    b.start_table();
    // largest inline values first keeps padding small (flatc does the same)
    pending.sort_by_key(|p| {
        std::cmp::Reverse(match p {
            Pending::Scalar(_, st, _, _) => st.size(),
            Pending::Struct(_, bytes, _) => bytes.len().max(8),
            Pending::Offset(..) => 4,
        })
    });
    for p in pending {
        match p {
            Pending::Offset(slot, o) => b.add_offset(slot, o),
            Pending::Struct(slot, bytes, align) => b.add_struct(slot, &bytes, align),
            Pending::Scalar(slot, st, v, d) => add_scalar(b, slot, st, &v, d.as_ref()),
        }
    }
    Ok(b.end_table())
}
