//! The runtime schema model: what the engine knows about a `.fbs` file.
//!
//! A [`Schema`] is the resolved form of a schema file and its includes. It lists
//! every [`Table`], [`StructDef`], [`EnumDef`] and [`UnionDef`] (types refer to each
//! other by index into those lists) and the [`Collection`]s: the `root_type` table and
//! every table marked `(entity)`. Each collection has one SQLite table, a primary key
//! (one or more fields marked `(primary)`) and single-field indexes (`(indexed)`,
//! `(unique)`).
//!
//! Each table [`Field`] records what a FlatBuffers reader needs: the vtable slot
//! (`id`; the vtable entry sits at byte `4 + 2 * id` of the vtable), the
//! [`FieldType`], the default, and whether it is optional (`= null`) or deprecated.
//! A union field takes two slots: `id - 1` holds its `_type` tag (`ubyte`), `id` the
//! offset of the member table; `Field::id` is the value slot, as in `flatc`.
//!
//! Build one with [`Schema::parse`] or [`Schema::from_file`].

use crate::path::PathStep;
use crate::sync::{SyncRule, SyncTable};
use crate::value::Value;
use crate::vector::VectorSpec;

/// A FlatBuffers scalar type.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ScalarType {
    /// `bool` (1 byte)
    Bool,
    /// `byte` / `int8`
    I8,
    /// `ubyte` / `uint8`
    U8,
    /// `short` / `int16`
    I16,
    /// `ushort` / `uint16`
    U16,
    /// `int` / `int32`
    I32,
    /// `uint` / `uint32`
    U32,
    /// `long` / `int64`
    I64,
    /// `ulong` / `uint64` (exposed as its i64 bit pattern in [`Value`])
    U64,
    /// `float` / `float32`
    F32,
    /// `double` / `float64`
    F64,
}

impl ScalarType {
    /// Size in bytes (also its alignment).
    pub fn size(self) -> usize {
        match self {
            ScalarType::Bool | ScalarType::I8 | ScalarType::U8 => 1,
            ScalarType::I16 | ScalarType::U16 => 2,
            ScalarType::I32 | ScalarType::U32 | ScalarType::F32 => 4,
            ScalarType::I64 | ScalarType::U64 | ScalarType::F64 => 8,
        }
    }

    /// The canonical `.fbs` spelling (`int`, `ulong`, …).
    pub fn fbs_name(self) -> &'static str {
        match self {
            ScalarType::Bool => "bool",
            ScalarType::I8 => "byte",
            ScalarType::U8 => "ubyte",
            ScalarType::I16 => "short",
            ScalarType::U16 => "ushort",
            ScalarType::I32 => "int",
            ScalarType::U32 => "uint",
            ScalarType::I64 => "long",
            ScalarType::U64 => "ulong",
            ScalarType::F32 => "float",
            ScalarType::F64 => "double",
        }
    }

    /// The Rust type name (`i32`, `u64`, …).
    pub fn rust_name(self) -> &'static str {
        match self {
            ScalarType::Bool => "bool",
            ScalarType::I8 => "i8",
            ScalarType::U8 => "u8",
            ScalarType::I16 => "i16",
            ScalarType::U16 => "u16",
            ScalarType::I32 => "i32",
            ScalarType::U32 => "u32",
            ScalarType::I64 => "i64",
            ScalarType::U64 => "u64",
            ScalarType::F32 => "f32",
            ScalarType::F64 => "f64",
        }
    }

    /// Parses a `.fbs` scalar type name, including the sized aliases (`int32`, …).
    pub fn from_fbs(name: &str) -> Option<ScalarType> {
        Some(match name {
            "bool" => ScalarType::Bool,
            "byte" | "int8" => ScalarType::I8,
            "ubyte" | "uint8" => ScalarType::U8,
            "short" | "int16" => ScalarType::I16,
            "ushort" | "uint16" => ScalarType::U16,
            "int" | "int32" => ScalarType::I32,
            "uint" | "uint32" => ScalarType::U32,
            "long" | "int64" => ScalarType::I64,
            "ulong" | "uint64" => ScalarType::U64,
            "float" | "float32" => ScalarType::F32,
            "double" | "float64" => ScalarType::F64,
            _ => return None,
        })
    }

    /// `true` for integer types (not `bool`, not floats).
    pub fn is_integer(self) -> bool {
        !matches!(self, ScalarType::Bool | ScalarType::F32 | ScalarType::F64)
    }

    /// `true` for `float` and `double`.
    pub fn is_float(self) -> bool {
        matches!(self, ScalarType::F32 | ScalarType::F64)
    }

    /// The zero value of this type as a [`Value`] (FlatBuffers' implicit default).
    pub fn zero(self) -> Value {
        match self {
            ScalarType::Bool => Value::Bool(false),
            ScalarType::F32 | ScalarType::F64 => Value::Float(0.0),
            _ => Value::Int(0),
        }
    }
}

/// The type of a table field, struct field or vector element.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum FieldType {
    /// A scalar stored inline.
    Scalar(ScalarType),
    /// An enum (index into [`Schema::enums`]); stored as its underlying scalar.
    Enum(usize),
    /// A UTF-8 string (offset to a length-prefixed byte string).
    String,
    /// A struct (index into [`Schema::structs`]); stored inline.
    Struct(usize),
    /// A table (index into [`Schema::tables`]); stored as an offset.
    Table(usize),
    /// A union (index into [`Schema::unions`]); two slots, see the module docs.
    Union(usize),
    /// A vector of scalars, enums, strings, structs, tables or unions. A vector of
    /// unions takes two slots like a union: `id - 1` holds a `[ubyte]` of type tags,
    /// `id` the vector of member tables (same length).
    Vector(Box<FieldType>),
}

impl FieldType {
    /// `true` for types stored inline in the table (scalars, enums, structs).
    pub fn is_inline(&self) -> bool {
        matches!(
            self,
            FieldType::Scalar(_) | FieldType::Enum(_) | FieldType::Struct(_)
        )
    }
}

/// A field of a [`Table`].
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct Field {
    /// Field name as written.
    pub name: String,
    /// Vtable slot index (`id` attribute, or position counting unions as two).
    pub id: u16,
    /// The field's type.
    pub ty: FieldType,
    /// Default for scalars and enums (absent field reads as this); `Null` otherwise
    /// and for optional scalars.
    pub default: Value,
    /// Declared `= null`: absent reads as `Null`, not as a default.
    pub optional: bool,
    /// `(deprecated)`: not written by generated code, still readable.
    pub deprecated: bool,
    /// `(indexed)`: keel keeps a secondary index on this field.
    pub indexed: bool,
    /// `(unique)`: keel keeps a unique index on this field.
    pub unique: bool,
    /// `(primary)`: part of the primary key (in declaration order).
    pub primary: bool,
    /// `(searchable)` / `(searchable: w)`: keel keeps this string or `[string]`
    /// field of a collection in the collection's full-text index; the value is
    /// its relevance weight (1.0 when not given, always finite and > 0).
    pub searchable: Option<f64>,
    /// `(references: "Author", …)`: the field holds primary keys of another
    /// collection (one for a scalar or string field, several for a vector of
    /// them). See [`Reference`].
    pub references: Option<Reference>,
    /// `(vector: N, metric: "…")`: a `[float]` field of a collection holding
    /// exactly `N` finite floats, searchable by nearest neighbour
    /// ([`crate::vector`]).
    pub vector: Option<VectorSpec>,
    /// `(sync: counter)` / `(sync: server_wins)`: how concurrent writes to the
    /// field of a synced collection resolve ([`crate::sync`]; `Merge` unmarked).
    pub sync: SyncRule,
    /// Doc comment lines (`///`) without the markers.
    pub doc: Vec<String>,
}

/// What happens to the objects that refer to an object when it is deleted
/// (`on_delete: "…"` on a [`Reference`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum OnDelete {
    /// `"restrict"` (the default): the delete fails with a typed error that
    /// names the referring objects.
    Restrict,
    /// `"cascade"`: the referring objects are deleted too, in the same
    /// transaction (chains and cycles included).
    Cascade,
    /// `"nullify"`: the reference is cleared (a to-one field becomes absent; the
    /// key is removed from a to-many vector).
    Nullify,
}

impl OnDelete {
    /// The attribute value as written (`"cascade"`, …).
    pub fn as_str(self) -> &'static str {
        match self {
            OnDelete::Restrict => "restrict",
            OnDelete::Cascade => "cascade",
            OnDelete::Nullify => "nullify",
        }
    }

    /// Parses an attribute value (`"cascade"`, `"nullify"`, `"restrict"`).
    pub fn parse(s: &str) -> Option<OnDelete> {
        Some(match s {
            "restrict" => OnDelete::Restrict,
            "cascade" => OnDelete::Cascade,
            "nullify" => OnDelete::Nullify,
            _ => return None,
        })
    }
}

/// A reference from a collection field to another collection's primary key:
/// `author: string (references: "Author", on_delete: "cascade")`, or to-many
/// `tags: [string] (references: "Tag")`.
///
/// The field's type is the target's (single-field) primary key type, or a
/// vector of it. keel indexes a to-one reference field (like `(indexed)`), so
/// finding the objects that refer to a given object is one index lookup.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub struct Reference {
    /// The referenced collection, fully qualified (`blog.Author`).
    pub target: String,
    /// A vector of keys (to-many) rather than one key.
    pub to_many: bool,
    /// What deleting a referenced object does to the referring ones.
    pub on_delete: OnDelete,
    /// Whether a key naming no object is accepted on write (`dangling: true`, the
    /// default). With `dangling: false` an insert or update that names a
    /// missing object fails with a typed error.
    pub dangling: bool,
    /// `inverse: "posts"`: the name under which the target navigates back to
    /// the referring objects (not a stored field; no target field may have it).
    pub inverse: Option<String>,
}

impl Field {
    /// Byte position of this field's entry in a vtable: `4 + 2 * id`.
    pub fn vtable_offset(&self) -> u16 {
        4 + 2 * self.id
    }

    /// For a union field, the slot of its `_type` tag (`id - 1`); for a vector of
    /// unions, the slot of its vector of tags.
    pub fn union_type_id(&self) -> Option<u16> {
        match &self.ty {
            FieldType::Union(_) => self.id.checked_sub(1),
            FieldType::Vector(e) if matches!(**e, FieldType::Union(_)) => self.id.checked_sub(1),
            _ => None,
        }
    }
}

/// A FlatBuffers table.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct Table {
    /// Name without namespace.
    pub name: String,
    /// Namespace (`a.b`), empty for none.
    pub namespace: String,
    /// Fields in declaration order.
    pub fields: Vec<Field>,
    /// Marked `(entity)`: stored as its own collection.
    pub entity: bool,
    /// Marked `(sync)`: the collection syncs with this server table
    /// ([`crate::sync`]).
    pub sync: Option<SyncTable>,
    /// Doc comment lines.
    pub doc: Vec<String>,
}

impl Table {
    /// `namespace.Name`, or `Name` without a namespace.
    pub fn full_name(&self) -> String {
        qualify(&self.namespace, &self.name)
    }

    /// The field called `name`.
    pub fn field(&self, name: &str) -> Option<&Field> {
        self.fields.iter().find(|f| f.name == name)
    }

    /// The field whose value slot is `id`.
    pub fn field_by_id(&self, id: u16) -> Option<&Field> {
        self.fields.iter().find(|f| f.id == id)
    }

    /// Number of vtable slots the table uses (highest id + 1).
    pub fn slot_count(&self) -> u16 {
        self.fields.iter().map(|f| f.id + 1).max().unwrap_or(0)
    }
}

/// A field of a [`StructDef`].
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct StructField {
    /// Field name.
    pub name: String,
    /// Scalar, enum or struct.
    pub ty: FieldType,
    /// Byte offset inside the struct.
    pub offset: usize,
    /// Size in bytes.
    pub size: usize,
    /// Doc comment lines.
    pub doc: Vec<String>,
}

/// A FlatBuffers struct: fixed layout, stored inline, no defaults, no evolution.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct StructDef {
    /// Name without namespace.
    pub name: String,
    /// Namespace, empty for none.
    pub namespace: String,
    /// Fields in declaration (= layout) order.
    pub fields: Vec<StructField>,
    /// Total size in bytes, including padding.
    pub size: usize,
    /// Alignment in bytes.
    pub align: usize,
    /// Doc comment lines.
    pub doc: Vec<String>,
}

impl StructDef {
    /// `namespace.Name`.
    pub fn full_name(&self) -> String {
        qualify(&self.namespace, &self.name)
    }
}

/// One named value of an enum.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct EnumVal {
    /// Value name.
    pub name: String,
    /// Numeric value (in the underlying type's range; `ulong` as bit pattern).
    pub value: i64,
    /// Doc comment lines.
    pub doc: Vec<String>,
}

/// A FlatBuffers enum with an integer underlying type.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct EnumDef {
    /// Name without namespace.
    pub name: String,
    /// Namespace, empty for none.
    pub namespace: String,
    /// Underlying integer type (`enum Color : byte`).
    pub underlying: ScalarType,
    /// Values in declaration order.
    pub values: Vec<EnumVal>,
    /// Doc comment lines.
    pub doc: Vec<String>,
}

impl EnumDef {
    /// `namespace.Name`.
    pub fn full_name(&self) -> String {
        qualify(&self.namespace, &self.name)
    }

    /// The value called `name`.
    pub fn value(&self, name: &str) -> Option<i64> {
        self.values.iter().find(|v| v.name == name).map(|v| v.value)
    }

    /// The name of `value`.
    pub fn name_of(&self, value: i64) -> Option<&str> {
        self.values
            .iter()
            .find(|v| v.value == value)
            .map(|v| v.name.as_str())
    }
}

/// One member of a union.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct UnionMemberDef {
    /// Member name (the table name as written, or an alias `Alias: Table`).
    pub name: String,
    /// Member table (index into [`Schema::tables`]).
    pub table: usize,
    /// Type tag stored in the `_type` slot (1-based; 0 is `NONE`).
    pub tag: u8,
}

/// A FlatBuffers union of tables.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct UnionDef {
    /// Name without namespace.
    pub name: String,
    /// Namespace, empty for none.
    pub namespace: String,
    /// Members in tag order.
    pub members: Vec<UnionMemberDef>,
    /// Doc comment lines.
    pub doc: Vec<String>,
}

impl UnionDef {
    /// `namespace.Name`.
    pub fn full_name(&self) -> String {
        qualify(&self.namespace, &self.name)
    }

    /// The member with type tag `tag`.
    pub fn member(&self, tag: u8) -> Option<&UnionMemberDef> {
        self.members.iter().find(|m| m.tag == tag)
    }
}

/// A secondary index of a collection: on one of its fields, or on the value at a
/// path into a sub-table or union member (`(indexed)` on a field of a table that
/// is not a collection, e.g. `equipped.Orb.name`). An index on a union field holds
/// its type tag.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub struct IndexDef {
    /// The collection's field the path starts with (its id).
    pub field: u16,
    /// The path as names, dotted (`priority`, `equipped.Orb.name`).
    pub name: String,
    /// Unique index.
    pub unique: bool,
    /// The indexed path from the collection's table (one step for a field of its
    /// own).
    pub path: Vec<PathStep>,
}

/// A collection: a table stored as its own SQLite table.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Collection {
    /// Fully qualified table name (`blog.Post`).
    pub name: String,
    /// The table (index into [`Schema::tables`]).
    pub table: usize,
    /// Field ids of the primary key, in declaration order (composite keys allowed).
    /// Empty when no field is marked `(primary)`: keel then keys by rowid.
    pub primary_key: Vec<u16>,
    /// Single-field secondary indexes.
    pub indexes: Vec<IndexDef>,
}

/// A resolved schema (a `.fbs` file and its includes).
///
/// ```
/// use keel_schema::Schema;
/// let schema = Schema::parse(
///     "namespace blog;
///      table Post { id: string (primary); priority: int = 1 (indexed); }
///      root_type Post;",
///     "post.fbs",
/// ).unwrap();
/// let posts = schema.collection("blog.Post").unwrap();
/// assert_eq!(posts.primary_key, vec![0]);
/// assert_eq!(schema.table(posts.table).fields[1].vtable_offset(), 6);
/// ```
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct Schema {
    /// All tables.
    pub tables: Vec<Table>,
    /// All structs.
    pub structs: Vec<StructDef>,
    /// All enums.
    pub enums: Vec<EnumDef>,
    /// All unions.
    pub unions: Vec<UnionDef>,
    /// Collections: the root type first (if any), then `(entity)` tables.
    pub collections: Vec<Collection>,
    /// The `root_type` table, if declared.
    pub root_table: Option<usize>,
    /// `file_identifier`, if declared.
    pub file_identifier: Option<String>,
}

impl Schema {
    /// Every reference field of every collection: `(collection, field)` pairs,
    /// collections in schema order.
    pub fn references(&self) -> Vec<(&Collection, &Field)> {
        self.collections
            .iter()
            .flat_map(|c| {
                self.tables[c.table]
                    .fields
                    .iter()
                    .filter(|f| f.references.is_some() && !f.deprecated)
                    .map(move |f| (c, f))
            })
            .collect()
    }

    /// The reference fields that point at collection `target` (fully
    /// qualified name): `(referring collection, field)` pairs.
    pub fn references_to(&self, target: &str) -> Vec<(&Collection, &Field)> {
        self.references()
            .into_iter()
            .filter(|(_, f)| f.references.as_ref().is_some_and(|r| r.target == target))
            .collect()
    }

    /// The order in which a generated encoder (Rust, Swift, Kotlin) writes a table's
    /// inline fields: the widest first, as flatc's builders do, so the table needs
    /// the least alignment padding. Offsets (strings, tables, vectors, unions) count
    /// as 4 bytes; the sort is stable, so equal widths keep schema order.
    ///
    /// ```
    /// let s = keel_schema::Schema::parse("table T { a: byte; b: long; c: string; } root_type T;", "t.fbs").unwrap();
    /// let t = s.table(s.table_index("T").unwrap());
    /// let order: Vec<&str> = s.write_order(t.fields.iter().collect()).iter().map(|f| f.name.as_str()).collect();
    /// assert_eq!(order, ["b", "c", "a"]);
    /// ```
    pub fn write_order<'f>(&self, mut fields: Vec<&'f Field>) -> Vec<&'f Field> {
        fields.sort_by_key(|f| std::cmp::Reverse(self.inline_size(&f.ty)));
        fields
    }

    /// Bytes a field of type `ty` takes inside its table: the scalar's or struct's
    /// size, 4 for an offset.
    pub fn inline_size(&self, ty: &FieldType) -> usize {
        match ty {
            FieldType::Scalar(t) => t.size(),
            FieldType::Enum(e) => self.enums[*e].underlying.size(),
            FieldType::Struct(s) => self.structs[*s].size.max(self.structs[*s].align),
            _ => 4,
        }
    }

    /// Table at `index` (indices come from this schema's types).
    ///
    /// # Panics
    /// If `index` did not come from this schema.
    pub fn table(&self, index: usize) -> &Table {
        &self.tables[index]
    }

    /// Table by fully qualified or bare name.
    pub fn table_index(&self, name: &str) -> Option<usize> {
        self.tables
            .iter()
            .position(|t| t.full_name() == name)
            .or_else(|| self.tables.iter().position(|t| t.name == name))
    }

    /// Collection by fully qualified or bare table name.
    pub fn collection(&self, name: &str) -> Option<&Collection> {
        self.collections
            .iter()
            .find(|c| c.name == name)
            .or_else(|| {
                self.collections
                    .iter()
                    .find(|c| self.tables[c.table].name == name)
            })
    }
}

pub(crate) fn qualify(namespace: &str, name: &str) -> String {
    if namespace.is_empty() {
        name.to_owned()
    } else {
        format!("{namespace}.{name}")
    }
}
