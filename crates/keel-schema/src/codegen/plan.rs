//! The target-neutral plan of every table: what keel's three code generators —
//! Rust ([`rust`](super::rust)), Swift ([`swift`](super::swift)) and Kotlin
//! ([`kotlin`](super::kotlin)) — need to know about a table, decided once from the schema
//! model and rendered three times.
//!
//! # Adding a field kind or an operation
//!
//! 1. Decide it here, once: a [`Kind`] (and its [`Elem`] for vectors), what a
//!    reader sees when the field is absent ([`Unset`]), whether the encoder
//!    writes it as a child before the table ([`FieldPlan::child`]), and which
//!    [`Ops`] it takes part in. Test the decision in this module's tests, against
//!    the schema model.
//! 2. Add one render function per language: the `match` on [`Kind`] in each
//!    generator's type, read, write and handle functions. The compiler lists every
//!    place: the matches have no catch-all arm.
//!
//! A back end never walks the schema model itself for a table: the field order, the
//! order children are written (key strings first), the vtable order, the key and
//! the defaults all come from [`TablePlan`], so the three outputs cannot drift apart.

use crate::codegen::error::CodegenError;
use crate::codegen::naming::{types_in_emit_order, ENUM, STRUCT, UNION};
use crate::model::{
    Collection, EnumDef, EnumVal, Field, FieldType, Reference, ScalarType, Schema, Table,
};
use crate::value::Value;

/// What a table field holds, as every back end distinguishes it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Kind {
    /// A scalar.
    Scalar(ScalarType),
    /// An enum (index into `Schema::enums`) stored as its underlying scalar.
    Enum(usize, ScalarType),
    /// A string.
    String,
    /// A struct stored inline (index into `Schema::structs`).
    Struct(usize),
    /// A table (index into `Schema::tables`).
    Table(usize),
    /// A union (index into `Schema::unions`): a tag in [`FieldPlan::tag_slot`], the
    /// member table in [`FieldPlan::slot`].
    Union(usize),
    /// A vector.
    Vector(Elem),
}

/// The element of a vector field.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Elem {
    /// `[ubyte]`: raw bytes (each language has a byte-array type for them).
    Bytes,
    /// Any other scalar.
    Scalar(ScalarType),
    /// An enum and its underlying scalar.
    Enum(usize, ScalarType),
    /// Strings.
    String,
    /// Structs, stored inline.
    Struct(usize),
    /// Tables.
    Table(usize),
    /// Unions: a vector of tags in [`FieldPlan::tag_slot`], of member tables in
    /// [`FieldPlan::slot`].
    Union(usize),
}

/// What a generated property holds when the encoded object has no value for it,
/// and what a builder starts from.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Unset {
    /// The schema default of a scalar (never `Null`).
    Scalar(Value, ScalarType),
    /// The schema default of an enum: its raw number (a name the schema declares,
    /// or an unknown value).
    Enum(usize, i64, ScalarType),
    /// An empty vector.
    Empty,
    /// No value (`None`, `nil`, `null`): optional fields.
    Absent,
    /// None: the string primary key, which every object carries.
    Required,
}

/// One live (not deprecated) table field, as the generators render it.
pub(crate) struct FieldPlan<'s> {
    /// The field in the schema model (its name and doc comment).
    pub field: &'s Field,
    /// Its kind.
    pub kind: Kind,
    /// The vtable slot of its value.
    pub slot: u16,
    /// The slot of a union's type tag (or a vector of unions' tag vector).
    pub tag_slot: Option<u16>,
    /// What a reader gives when the field is absent.
    pub default: Unset,
    /// Its position in the collection's primary key.
    pub key_position: Option<usize>,
    /// Whether the encoder writes it before the table, as a child it refers to by
    /// offset (strings, tables, unions, vectors).
    pub child: bool,
    /// `(references: …)`: the collection whose primary keys it holds (one, or a
    /// vector of them), its delete rule and inverse name.
    pub references: Option<&'s Reference>,
}

impl FieldPlan<'_> {
    /// The schema name of the field.
    pub fn name(&self) -> &str {
        &self.field.name
    }

    /// Whether this is a string part of the primary key: always written, never
    /// optional.
    pub fn key_string(&self) -> bool {
        self.key_position.is_some() && self.kind == Kind::String
    }

    /// How a reader gets its value ([`Read`]).
    pub fn read(&self) -> Read<'_> {
        let default = (self.default != Unset::Absent).then_some(&self.field.default);
        match self.kind {
            Kind::Scalar(t) => Read::Scalar(t, default),
            Kind::Enum(e, u) => Read::Enum(e, u, default),
            Kind::String => Read::String {
                required: self.default == Unset::Required,
            },
            Kind::Struct(i) => Read::Struct(i),
            Kind::Table(i) => Read::Table(i),
            Kind::Union(u) => Read::Union(u),
            Kind::Vector(e) => Read::Vector(e),
        }
    }

    /// Whether this is a `(vector: N)` embedding: a `[float]` that languages with
    /// a primitive float array give as one (Kotlin's `FloatArray`; Swift's
    /// `[Float]` is one already), not as a list of boxed floats.
    pub fn embedding(&self) -> bool {
        self.field.vector.is_some() && self.kind == Kind::Vector(Elem::Scalar(ScalarType::F32))
    }
}

/// How a generated reader gets one field's value: what every back end's reader
/// decides about a field (optional or with a default, required, which element
/// a vector holds), decided here once; the back ends only spell it.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) enum Read<'s> {
    /// A scalar: with its schema default, or optional (`None`: absent reads as
    /// none).
    Scalar(ScalarType, Option<&'s Value>),
    /// An enum (index into `Schema::enums`, underlying scalar), its default as
    /// for [`Read::Scalar`] (the raw number).
    Enum(usize, ScalarType, Option<&'s Value>),
    /// A string; `required`: the string primary key, which every object carries.
    String { required: bool },
    /// An inline struct (index into `Schema::structs`), optional.
    Struct(usize),
    /// A table (index into `Schema::tables`), optional.
    Table(usize),
    /// A union (index into `Schema::unions`), optional: its tag in the slot
    /// before the value's.
    Union(usize),
    /// A vector (empty when absent).
    Vector(Elem),
}

/// How objects of a collection are keyed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum KeyShape {
    /// No `(primary)` field: SQLite's rowid.
    Rowid,
    /// One key field (index into [`TablePlan::fields`]).
    Single(usize),
    /// Several key fields, in key order (indexes into [`TablePlan::fields`]).
    Composite(Vec<usize>),
}

/// The operations a generated table type offers.
pub(crate) struct Ops<'s> {
    /// The collection this table is the object type of: it has a key, a change
    /// request and record conformance (`None` for a table only nested in others).
    pub collection: Option<&'s Collection>,
    /// The key of the collection (`Rowid` for a plain table).
    pub key: KeyShape,
}

/// Everything the generators render for one table.
pub(crate) struct TablePlan<'s> {
    /// The table in the schema model.
    pub table: &'s Table,
    /// Its live fields, in declaration order (properties, parameters, reads).
    pub fields: Vec<FieldPlan<'s>>,
    /// The fields written as children before the table, in writing order: the
    /// primary key's strings first in key order, then declaration order (see
    /// [`key_strings_first`]). Indexes into `fields`.
    pub children: Vec<usize>,
    /// Every field in the order the encoder adds it to the table (largest inline
    /// size first: [`Schema::write_order`]). Indexes into `fields`.
    pub vtable_order: Vec<usize>,
    /// The operations it offers.
    pub ops: Ops<'s>,
}

impl<'s> TablePlan<'s> {
    /// The plan of table `ti` of `s`.
    pub fn new(s: &'s Schema, ti: usize) -> Self {
        let table = &s.tables[ti];
        let collection = s.collections.iter().find(|c| c.table == ti);
        let key: Vec<u16> = collection
            .map(|c| c.primary_key.clone())
            .unwrap_or_default();
        let live: Vec<&Field> = table.fields.iter().filter(|f| !f.deprecated).collect();
        let fields: Vec<FieldPlan<'s>> = live
            .iter()
            .map(|f| field_plan(s, f, key.iter().position(|id| *id == f.id)))
            .collect();
        let index_of = |f: &Field| live.iter().position(|l| l.id == f.id).unwrap_or(0);
        let children = key_strings_first(&live)
            .into_iter()
            .map(index_of)
            .filter(|i| fields[*i].child)
            .collect();
        let vtable_order = s
            .write_order(live.clone())
            .into_iter()
            .map(index_of)
            .collect();
        let mut key_fields: Vec<usize> = (0..fields.len())
            .filter(|i| fields[*i].key_position.is_some())
            .collect();
        key_fields.sort_by_key(|i| fields[*i].key_position);
        let key = match key_fields.len() {
            0 => KeyShape::Rowid,
            1 => KeyShape::Single(key_fields[0]),
            _ => KeyShape::Composite(key_fields),
        };
        TablePlan {
            table,
            fields,
            children,
            vtable_order,
            ops: Ops { collection, key },
        }
    }

    /// The live fields of the schema model, in declaration order.
    pub fn live(&self) -> Vec<&'s Field> {
        self.fields.iter().map(|f| f.field).collect()
    }

    /// The key fields in key order (none for a rowid key).
    pub fn key_fields(&self) -> Vec<&'s Field> {
        let at = |i: &usize| self.fields[*i].field;
        match &self.ops.key {
            KeyShape::Rowid => Vec::new(),
            KeyShape::Single(i) => vec![at(i)],
            KeyShape::Composite(is) => is.iter().map(at).collect(),
        }
    }

    /// The plans of the fields written as children, in writing order.
    pub fn child_plans(&self) -> impl Iterator<Item = &FieldPlan<'s>> {
        self.children.iter().map(|i| &self.fields[*i])
    }

    /// The plans of the fields in the order the encoder adds them to the table.
    pub fn vtable_plans(&self) -> impl Iterator<Item = &FieldPlan<'s>> {
        self.vtable_order.iter().map(|i| &self.fields[*i])
    }

    /// The plan of `f`, a live field of this table.
    pub fn of(&self, f: &Field) -> &FieldPlan<'s> {
        self.fields
            .iter()
            .find(|p| p.slot == f.id)
            .unwrap_or(&self.fields[0])
    }
}

/// A `(references: …)` field of a collection, as the Swift and Kotlin typed
/// layers render it: a relation handle (`Post.authorRef`, `Post.tagsRef`) that
/// `including(…)` and its live form take.
pub(crate) struct RelationPlan<'s> {
    /// The reference field.
    pub field: &'s Field,
    /// The referenced collection's table (index into `Schema::tables`).
    pub target: usize,
    /// A vector of keys (each row names several objects, in order), not one key.
    pub to_many: bool,
}

/// The relation handles of the table `plan` plans (none for a table that is no
/// collection): its reference fields, in declaration order, each with its
/// target's table.
pub(crate) fn relations<'s>(s: &'s Schema, plan: &TablePlan<'s>) -> Vec<RelationPlan<'s>> {
    if plan.ops.collection.is_none() {
        return Vec::new();
    }
    plan.fields
        .iter()
        .filter_map(|f| {
            let r = f.references?;
            let target = s.collection(&r.target)?.table;
            Some(RelationPlan {
                field: f.field,
                target,
                to_many: r.to_many,
            })
        })
        .collect()
}

/// A reference of another collection (or of this one) declared with
/// `inverse: "posts"` and pointing at a collection: the way back, which the
/// typed layers render as a handle on the referenced type (`Author::posts_ref()`,
/// `Author.postsRef`).
pub(crate) struct InversePlan<'s> {
    /// The inverse's name (`posts`).
    pub name: &'s str,
    /// The referring table (index into `Schema::tables`).
    pub from_table: usize,
    /// The referring collection's full name.
    pub from: &'s str,
}

/// The inverse handles of the table `plan` plans (none for a table that is no
/// collection): every reference declaring an inverse whose target is this
/// collection, in the schema's order.
pub(crate) fn inverses<'s>(s: &'s Schema, plan: &TablePlan<'s>) -> Vec<InversePlan<'s>> {
    let Some(own) = plan.ops.collection.as_ref() else {
        return Vec::new();
    };
    s.references()
        .into_iter()
        .filter_map(|(c, f)| {
            let r = f.references.as_ref()?;
            let name = r.inverse.as_deref()?;
            (r.target == own.name).then_some(InversePlan {
                name,
                from_table: c.table,
                from: c.name.as_str(),
            })
        })
        .collect()
}

/// What a relation handle of the Swift and Kotlin layers follows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum HandleKind {
    /// A to-one reference field of this collection.
    ToOne,
    /// A to-many reference field (a vector of keys) of this collection.
    ToMany,
    /// The way back along another collection's reference (`inverse:`).
    Inverse,
}

/// One relation handle of a collection as the Swift and Kotlin layers render
/// it (`Post.authorRef`, `Post.tagsRef`, `Author.postsRef`): the name the FFI
/// takes (a field or an inverse), the other collection's table, and its kind.
/// Every handle but a to-one one reads several objects per row.
pub(crate) struct HandlePlan<'s> {
    /// The field's or the inverse's name (`author`, `posts`).
    pub name: &'s str,
    /// The other collection's table: the referenced one, or for an inverse
    /// the referring one.
    pub other: usize,
    pub kind: HandleKind,
}

impl HandlePlan<'_> {
    /// Whether a row gets several objects (to-many and inverse handles).
    pub fn many(&self) -> bool {
        self.kind != HandleKind::ToOne
    }

    /// The handle's doc sentence, with `other` the other type as the back end
    /// writes it in docs (`` `Author` ``, `[Author]`).
    pub fn doc(&self, other: &str) -> String {
        let name = self.name;
        match self.kind {
            HandleKind::ToOne => {
                format!("Relation handle for `{name}`, a reference to {other} (`including(…)`).")
            }
            HandleKind::ToMany => {
                format!("Relation handle for `{name}`, keys of {other} (`including(…)`).")
            }
            HandleKind::Inverse => format!(
                "The way back to the {other}s whose reference names this object (`inverse: \"{name}\"`; `including(…)`)."
            ),
        }
    }
}

/// Every relation handle of the table `plan` plans, for the Swift and Kotlin
/// layers: its reference fields ([`relations`]), then the inverses pointing
/// at it ([`inverses`]).
pub(crate) fn handles<'s>(s: &'s Schema, plan: &TablePlan<'s>) -> Vec<HandlePlan<'s>> {
    let fields = relations(s, plan).into_iter().map(|r| HandlePlan {
        name: r.field.name.as_str(),
        other: r.target,
        kind: if r.to_many {
            HandleKind::ToMany
        } else {
            HandleKind::ToOne
        },
    });
    let back = inverses(s, plan).into_iter().map(|i| HandlePlan {
        name: i.name,
        other: i.from_table,
        kind: HandleKind::Inverse,
    });
    fields.chain(back).collect()
}

/// The render functions of a back end for the four kinds of declared type: enums,
/// structs, unions (each by index), then tables (which can fail).
pub(crate) struct Renderers<G>(
    pub fn(&mut G, usize),
    pub fn(&mut G, usize),
    pub fn(&mut G, usize),
    pub fn(&mut G, usize) -> Result<(), CodegenError>,
);

impl<G> Renderers<G> {
    /// Renders every type of `s` in `types_in_emit_order`.
    pub fn render_all(&self, g: &mut G, s: &Schema) -> Result<(), CodegenError> {
        for t in types_in_emit_order(s) {
            match t.kind {
                ENUM => (self.0)(g, t.index),
                STRUCT => (self.1)(g, t.index),
                UNION => (self.2)(g, t.index),
                _ => (self.3)(g, t.index)?,
            }
        }
        Ok(())
    }
}

/// Renders every type of the schema `$g.s` through the generator `$g`'s
/// `gen_enum`, `gen_struct`, `gen_union` and `gen_table` (see [`Renderers`]).
macro_rules! render_types {
    ($g:ident) => {{
        let schema = $g.s;
        Renderers(
            Gen::gen_enum,
            Gen::gen_struct,
            Gen::gen_union,
            Gen::gen_table,
        )
        .render_all(&mut $g, schema)
    }};
}
pub(crate) use render_types;

/// The kind of a value of `ty`.
pub(crate) fn kind(s: &Schema, ty: &FieldType) -> Kind {
    match ty {
        FieldType::Scalar(t) => Kind::Scalar(*t),
        FieldType::Enum(e) => Kind::Enum(*e, s.enums[*e].underlying),
        FieldType::String => Kind::String,
        FieldType::Struct(i) => Kind::Struct(*i),
        FieldType::Table(i) => Kind::Table(*i),
        FieldType::Union(u) => Kind::Union(*u),
        FieldType::Vector(inner) => Kind::Vector(match &**inner {
            FieldType::Scalar(ScalarType::U8) => Elem::Bytes,
            FieldType::Scalar(t) => Elem::Scalar(*t),
            FieldType::Enum(e) => Elem::Enum(*e, s.enums[*e].underlying),
            FieldType::String => Elem::String,
            FieldType::Struct(i) => Elem::Struct(*i),
            FieldType::Table(i) => Elem::Table(*i),
            FieldType::Union(u) => Elem::Union(*u),
            // The resolver refuses nested vectors (`resolve.rs`); no model holds one.
            FieldType::Vector(_) => unreachable!("the resolver refuses vectors of vectors"),
        }),
    }
}

fn field_plan<'s>(s: &Schema, f: &'s Field, key_position: Option<usize>) -> FieldPlan<'s> {
    let kind = kind(s, &f.ty);
    let default = match kind {
        _ if field_is_optional(f) => Unset::Absent,
        Kind::Scalar(t) => Unset::Scalar(f.default.clone(), t),
        Kind::Enum(e, u) => Unset::Enum(e, f.default.as_i64().unwrap_or(0), u),
        Kind::Vector(_) => Unset::Empty,
        _ => Unset::Required,
    };
    let child = !matches!(kind, Kind::Scalar(_) | Kind::Enum(..) | Kind::Struct(_));
    FieldPlan {
        field: f,
        kind,
        slot: f.id,
        tag_slot: f.union_type_id(),
        default,
        key_position,
        child,
        references: f.references.as_ref(),
    }
}

/// Whether a table field's generated property is optional (`Option<T>`, `T?`):
/// yes unless a reader always has a value to give — a non-optional scalar or enum
/// (the schema default stands in for absence), a vector (absent reads as empty) or
/// the string primary key (always written).
pub(crate) fn field_is_optional(f: &Field) -> bool {
    match &f.ty {
        FieldType::Scalar(_) | FieldType::Enum(_) => f.optional,
        FieldType::Vector(_) => false,
        FieldType::String => !f.primary,
        _ => true,
    }
}

/// The type of a table field's property: `base`, made optional by `optional`
/// where [`field_is_optional`] says so.
pub(crate) fn property_type(f: &Field, base: String, optional: fn(String) -> String) -> String {
    if field_is_optional(f) {
        optional(base)
    } else {
        base
    }
}

/// The order in which a generated encoder writes a table's children: the string
/// fields of the primary key first (in declaration order, which is key order), the
/// rest in declaration order. A builder writes back to front, so the first key
/// string ends the finished buffer, and keel stores the buffer without it beside the
/// key column that holds the same text (`keel-query`'s `body.rs`). Any order of
/// children is valid FlatBuffers: `flatc` code reads the result unchanged.
pub(crate) fn key_strings_first<'f>(fields: &[&'f Field]) -> Vec<&'f Field> {
    let is_key_string = |f: &&Field| f.primary && matches!(f.ty, FieldType::String);
    let (mut first, rest): (Vec<&Field>, Vec<&Field>) =
        fields.iter().copied().partition(is_key_string);
    first.extend(rest);
    first
}

/// The declared value of enum `e` whose number is `raw`; `None` for a number the
/// schema does not name (a default the generators spell as the `Unknown` case).
pub(crate) fn enum_value(e: &EnumDef, raw: i64) -> Option<&EnumVal> {
    e.values.iter().find(|v| v.value == raw)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::codegen::testing::{blog, example};

    /// A `(references: …)` field's plan carries the model's reference (target,
    /// to-one or to-many, rule); other fields carry none.
    #[test]
    fn reference_fields_carry_their_reference() {
        let s = example("relations.fbs");
        let ti = s.tables.iter().position(|t| t.name == "Post").unwrap();
        let p = TablePlan::new(&s, ti);
        let refs: Vec<(&str, &str, bool)> = p
            .fields
            .iter()
            .filter_map(|f| {
                f.references
                    .map(|r| (f.name(), r.target.as_str(), r.to_many))
            })
            .collect();
        assert_eq!(
            refs,
            [
                ("author", "rel.Author", false),
                ("editor", "rel.Author", false),
                ("tags", "rel.Tag", true)
            ]
        );
        for f in &p.fields {
            assert_eq!(f.references, f.field.references.as_ref());
        }
    }

    /// Inverse handles: on the referenced collection, one per reference
    /// declaring an inverse, naming the referring collection.
    #[test]
    fn inverse_handles_belong_to_the_referenced_collection() {
        let s = example("relations.fbs");
        let table = |n: &str| s.tables.iter().position(|t| t.name == n).unwrap();
        let of = |n: &str| -> Vec<(String, String)> {
            inverses(&s, &TablePlan::new(&s, table(n)))
                .iter()
                .map(|i| (i.name.to_owned(), i.from.to_owned()))
                .collect()
        };
        let posts = ("posts".to_string(), "rel.Post".to_string());
        assert_eq!(of("Author"), std::slice::from_ref(&posts));
        assert_eq!(of("Tag"), [posts]);
        assert!(of("Post").is_empty() && of("Shelf").is_empty());
    }

    /// Relation handles: the references of a collection with their targets'
    /// tables, to-many ones marked; plain fields get none.
    #[test]
    fn relation_handles_are_the_references() {
        let s = example("relations.fbs");
        let table = |n: &str| s.tables.iter().position(|t| t.name == n).unwrap();
        let p = TablePlan::new(&s, table("Post"));
        let rels: Vec<(&str, usize, bool)> = relations(&s, &p)
            .iter()
            .map(|r| (r.field.name.as_str(), r.target, r.to_many))
            .collect();
        assert_eq!(
            rels,
            [
                ("author", table("Author"), false),
                ("editor", table("Author"), false),
                ("tags", table("Tag"), true)
            ]
        );
        let shelf = TablePlan::new(&s, table("Shelf"));
        let rels: Vec<bool> = relations(&s, &shelf).iter().map(|r| r.to_many).collect();
        assert_eq!(rels, [true]);
        let blog = blog();
        for ti in 0..blog.tables.len() {
            assert!(relations(&blog, &TablePlan::new(&blog, ti)).is_empty());
        }
    }

    /// The plan of `blog.Post` against the schema model it comes from: one entry per
    /// live field in declaration order, the slots, defaults, key and write orders.
    #[test]
    fn the_plan_of_post_follows_the_schema_model() {
        let s = blog();
        let ti = s.tables.iter().position(|t| t.name == "Post").unwrap();
        let p = TablePlan::new(&s, ti);
        let live: Vec<&Field> = s.tables[ti]
            .fields
            .iter()
            .filter(|f| !f.deprecated)
            .collect();
        assert!(
            live.len() < s.tables[ti].fields.len(),
            "blog.fbs has a deprecated field"
        );
        assert_eq!(p.fields.len(), live.len());
        for (fp, f) in p.fields.iter().zip(&live) {
            assert_eq!(fp.name(), f.name);
            assert_eq!(fp.slot, f.id);
            assert_eq!(fp.kind, kind(&s, &f.ty), "{}", f.name);
            assert_eq!(fp.tag_slot, f.union_type_id(), "{}", f.name);
            assert_eq!(fp.default == Unset::Absent, field_is_optional(f));
            assert_eq!(fp.key_position.is_some(), f.primary, "{}", f.name);
            assert_eq!(fp.child, !f.ty.is_inline(), "{}", f.name);
        }
        let by = |n: &str| p.fields.iter().find(|f| f.name() == n).unwrap();
        assert_eq!(by("id").default, Unset::Required);
        assert!(by("id").key_string());
        assert_eq!(
            by("priority").default,
            Unset::Scalar(Value::Int(1), ScalarType::I32)
        );
        assert!(matches!(
            by("color").default,
            Unset::Enum(_, 1, ScalarType::I8)
        ));
        assert_eq!(by("title").default, Unset::Absent);
        assert_eq!(by("rating").default, Unset::Absent);
        assert_eq!(by("tags").default, Unset::Empty);
        assert_eq!(by("flags").kind, Kind::Vector(Elem::Bytes));
        assert!(matches!(by("content").kind, Kind::Union(_)));

        // the key: the collection's primary key, in key order
        assert_eq!(p.ops.collection.map(|c| c.name.as_str()), Some("blog.Post"));
        assert_eq!(
            p.key_fields()
                .iter()
                .map(|f| f.name.as_str())
                .collect::<Vec<_>>(),
            ["id"]
        );
        // children: the key string first, then every offset field in declaration order
        let children: Vec<&str> = p.child_plans().map(|f| f.name()).collect();
        assert_eq!(children[0], "id");
        let offsets: Vec<&str> = live
            .iter()
            .filter(|f| !f.ty.is_inline() && !f.primary)
            .map(|f| f.name.as_str())
            .collect();
        assert_eq!(children[1..], offsets[..]);
        // the vtable order is the model's write order
        let order: Vec<&str> = p.vtable_plans().map(|f| f.name()).collect();
        let want: Vec<&str> = s
            .write_order(live.clone())
            .iter()
            .map(|f| f.name.as_str())
            .collect();
        assert_eq!(order, want);
    }

    #[test]
    fn composite_keys_come_in_key_order_and_plain_tables_have_none() {
        let s = Schema::parse(
            "namespace n; table Inner { s: string; } \
             table T (entity) { title: string; slug: string (primary); n: int (primary); in: Inner; } \
             root_type T;",
            "k.fbs",
        )
        .unwrap();
        let t = TablePlan::new(&s, 1);
        assert!(matches!(t.ops.key, KeyShape::Composite(_)));
        let names: Vec<&str> = t.key_fields().iter().map(|f| f.name.as_str()).collect();
        assert_eq!(names, ["slug", "n"]);
        let children: Vec<&str> = t.child_plans().map(|f| f.name()).collect();
        assert_eq!(children, ["slug", "title", "in"]);
        let inner = TablePlan::new(&s, 0);
        assert!(inner.ops.collection.is_none());
        assert_eq!(inner.ops.key, KeyShape::Rowid);
        assert_eq!(inner.fields[0].default, Unset::Absent);
    }

    #[test]
    fn key_strings_come_first_in_key_order() {
        let s = Schema::parse(
            "namespace n; table T (entity) { title: string; n: int; lang: string (primary); \
             tags: [string]; slug: string (primary); } root_type T;",
            "k.fbs",
        )
        .unwrap();
        let t = s.table(0);
        let fields: Vec<&Field> = t.fields.iter().collect();
        let order: Vec<&str> = key_strings_first(&fields)
            .iter()
            .map(|f| f.name.as_str())
            .collect();
        assert_eq!(order, ["lang", "slug", "title", "n", "tags"]);
    }
}
