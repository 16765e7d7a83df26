//! Swift code generation from `.fbs` schemas: `keel codegen swift SCHEMA.fbs OUT_DIR`.
//!
//! One file, `<Stem>.swift`, is written for a schema `<stem>.fbs`. It imports the
//! `Keel` module of keel's Swift package and nothing else (no third-party
//! FlatBuffers runtime: `Keel` carries a small bounds-checked one, `KeelWire`). It
//! holds:
//!
//! * `<Stem>Schema` — an `enum` conforming to `KeelSchema`: the canonical schema
//!   text (`fbs`, what the Rust codegen calls `SCHEMA_FBS`), its fingerprint and the
//!   collections; pass it to `Keel.openAsync(path:schema:)`;
//! * per enum: a Swift `enum` with one case per value plus `unknown(raw)` for values
//!   a newer schema wrote, `init(rawValue:)`/`rawValue`, `allCases`;
//! * per struct: a `struct` with `let` fields, a memberwise `init` (defaults 0) and,
//!   like tables, `with(_:)` for a changed copy (`pos.with { $0.x = 1 }`);
//! * per union: an `enum` with one case per member (associated value: the member
//!   table) plus `unknown(tag:)`;
//! * per table: a value type `struct T: Sendable, Equatable, Hashable` with one
//!   property per non-deprecated field and an `init` whose parameters default to the
//!   schema defaults (key fields have none); `init(flatBuffer:)` / `flatBuffer()`
//!   (from `KeelTable`) read and write FlatBuffers bytes byte-compatible with
//!   `flatc`; decoding malformed bytes throws `KeelError.InvalidObject`, never traps;
//! * per collection (root type and `(entity)` tables): `KeelRecord` conformance —
//!   the collection name, the `Key` type (the key field's type; a nested
//!   `struct Key` for composite keys; `Int64` rowids for keyless collections) and
//!   `primaryKey`;
//! * typed query handles: `T.field` (a `KeelField<T, V>` — a static property beside
//!   the instance property of the same name), nested ones through the handle
//!   (`Post.author.name`, `Post.frame.origin.x`, `Post.content.image.width`,
//!   `Post.content.isImage`). Comparisons only compile against a value of the
//!   field's type: `Post.title >= 2` is a compile error.
//!
//! Field types: scalars as Swift's fixed-width types (`int` → `Int32`, `ulong` →
//! `UInt64`, …), optional scalars (`= null`) as optionals; strings as `String?`
//! (`String` when `(primary)`); tables, structs and unions as optionals; vectors as
//! arrays (absent reads as empty; `[ubyte]` as `[UInt8]`; a vector of unions as an
//! array of the union's enum, without a query handle). A table field that can
//! contain its own table is boxed, and a union that can contain itself is
//! `indirect`, so recursive schemas work. Names become lowerCamelCase (`old_score`
//! → `oldScore`); Swift keywords are escaped with backticks. Types share the
//! module's one namespace: two types of one name in different namespaces get the
//! namespace in front, as Rust's flat names do (`shop.Item` → `ShopItem`).
//!
//! ```
//! let schema = keel_schema::Schema::parse(
//!     "namespace blog; table Post { id: string (primary); priority: int = 1; } root_type Post;",
//!     "blog.fbs",
//! ).unwrap();
//! let code = keel_schema::swift::generate(&schema, "blog").unwrap();
//! assert!(code.contains("public struct Post: Sendable, Equatable, Hashable"));
//! assert!(code.contains("public static var priority: KeelField<Post, Int32>"));
//! ```

use std::collections::BTreeSet;
use std::fmt::Write;
use std::path::{Path, PathBuf};

use crate::codegen::emit::{
    doc, open_enum, open_type, open_union, struct_doc_fallback, table_doc_fallback, write_arms,
    write_conversions, write_files,
};
use crate::codegen::error::CodegenError;
use crate::codegen::naming::{
    self, declared_types, flat_name, load_with_stem, lower_camel, raw_string_hashes, shared_names,
    upper_camel, Keywords, Names,
};
use crate::codegen::plan::{
    enum_value, handles, property_type, render_types, Elem, FieldPlan, HandlePlan, Kind, Read,
    Renderers, TablePlan, Unset,
};
use crate::model::*;
use crate::value::Value;

/// Parses `schema` (and its includes) and writes the Swift sources for it into
/// `out_dir` (created if missing); returns the paths written.
pub fn write_sources(schema: &Path, out_dir: &Path) -> Result<Vec<PathBuf>, CodegenError> {
    write_files(out_dir, sources(schema)?)
}

/// Parses `schema` (and its includes) and returns the Swift sources
/// [`write_sources`] would write, as `(path relative to the output directory,
/// text)` pairs, without writing them (for `keel codegen --check`).
pub fn sources(schema: &Path) -> Result<Vec<(String, String)>, CodegenError> {
    let (s, stem) = load_with_stem(schema)?;
    Ok(vec![(
        format!("{}.swift", upper_camel(&stem)),
        generate(&s, &stem)?,
    )])
}

/// The Swift source for `schema`; `stem` names the schema enum (`blog` →
/// `BlogSchema`).
pub fn generate(schema: &Schema, stem: &str) -> Result<String, CodegenError> {
    Gen::new(schema, stem)?.run()
}

/// Swift keywords (escaped with backticks as names), separated by spaces.
const KEYWORDS: Keywords = Keywords::backticked(
    "associatedtype class deinit enum extension fileprivate func import init inout internal \
    let open operator private protocol public rethrows static struct subscript typealias var \
    break case continue default defer do else fallthrough for guard if in repeat return \
    switch where while as Any catch false is nil super self Self throw throws true try await \
    async Type Protocol",
);

/// Names the generated code or the runtime protocols use on a table value or its
/// query handles; a field with one of these names gets a `_` appended. `with` and
/// `value` are `with(_:)` and the draft's `value`.
const RESERVED_MEMBERS: &[&str] = &[
    "with",
    "value",
    "primaryKey",
    "flatBuffer",
    "keelPath",
    "ascending",
    "descending",
    "isNull",
    "isNotNull",
    "isIn",
    "isNotIn",
    "hash",
    "hashValue",
];

/// Type names the generated code refers to in the `Keel` module (and Swift's own);
/// a schema type with one of these names cannot be generated.
const RESERVED_TYPES: &[&str] = &[
    "KeelWire",
    "KeelField",
    "KeelPredicate",
    "KeelRecord",
    "KeelKeyed",
    "KeelTable",
    "KeelSchema",
    "KeelKey",
    "KeelValue",
    "KeelFieldValue",
    "KeelBox",
    "KeelDecodeError",
    "KeelRelation",
    "KeelManyRelation",
    "String",
    "Bool",
    "Int8",
    "UInt8",
    "Int16",
    "UInt16",
    "Int32",
    "UInt32",
    "Int64",
    "UInt64",
    "Float",
    "Double",
    "Array",
    "Optional",
    "Key",
];

/// The local name of a memberwise `init` parameter whose label is `label`, when it
/// cannot be the label itself: a parameter named `self` would hide `self`.
fn init_param(label: &str) -> Option<&'static str> {
    (label == "`self`").then_some("keelSelf")
}

/// The Swift property name of a table or struct field.
fn member(name: &str) -> String {
    let n = lower_camel(name);
    if RESERVED_MEMBERS.contains(&n.as_str()) {
        format!("{n}_")
    } else {
        n
    }
}

fn swift_scalar(t: ScalarType) -> &'static str {
    match t {
        ScalarType::Bool => "Bool",
        ScalarType::I8 => "Int8",
        ScalarType::U8 => "UInt8",
        ScalarType::I16 => "Int16",
        ScalarType::U16 => "UInt16",
        ScalarType::I32 => "Int32",
        ScalarType::U32 => "UInt32",
        ScalarType::I64 => "Int64",
        ScalarType::U64 => "UInt64",
        ScalarType::F32 => "Float",
        ScalarType::F64 => "Double",
    }
}

/// A Swift literal for `v` as a `ty`. Every place the generator puts one has the
/// type from context (a parameter, an assignment, a generic argument fixed by a
/// sibling), so the literal is bare: `1`, `1.5`, `true`, `.nan`.
fn scalar_lit(v: &Value, ty: ScalarType) -> String {
    match (v, ty) {
        (Value::Bool(b), ScalarType::Bool) => b.to_string(),
        (Value::Int(i), ScalarType::Bool) => (*i != 0).to_string(),
        (_, ScalarType::F32 | ScalarType::F64) => {
            let names = [".nan", ".infinity", "-.infinity"];
            naming::float_lit(v.as_f64().unwrap_or(0.0), ty, "", names, "")
        }
        (Value::Int(i), ScalarType::U64) => format!("{}", *i as u64),
        (Value::Int(i), _) => format!("{i}"),
        (Value::Bool(b), _) => format!("{}", u8::from(*b)),
        _ => "0".into(),
    }
}

/// A type as the schema spells it (`int`, `[string]`, `Vec2`).
fn fbs_type(s: &Schema, ty: &FieldType) -> String {
    match ty {
        FieldType::Scalar(t) => t.fbs_name().into(),
        FieldType::Enum(i) => s.enums[*i].name.clone(),
        FieldType::String => "string".into(),
        FieldType::Struct(i) => s.structs[*i].name.clone(),
        FieldType::Table(i) => s.tables[*i].name.clone(),
        FieldType::Union(i) => s.unions[*i].name.clone(),
        FieldType::Vector(inner) => format!("[{}]", fbs_type(s, inner)),
    }
}

struct Gen<'a> {
    s: &'a Schema,
    schema_name: String,
    out: String,
    /// Swift names by (kind, index).
    names: Names,
    /// Tables reachable from each table through table and union fields.
    reach: Vec<BTreeSet<usize>>,
}

impl<'a> Gen<'a> {
    fn new(s: &'a Schema, stem: &str) -> Result<Self, CodegenError> {
        let schema_name = format!("{}Schema", upper_camel(stem));
        let mut names = Names::default();
        names.reserve(&schema_name, "the schema enum");
        // Swift types share one namespace: a name two types have gets each one's
        // namespace in front, as in Rust (`shop.Item` → `ShopItem`).
        let shared = shared_names(s);
        for t in declared_types(s) {
            let (swift, full) = (upper_camel(&flat_name(&t, &shared)), t.full_name());
            if RESERVED_TYPES.contains(&swift.as_str()) || KEYWORDS.contains(&swift) {
                return Err(CodegenError::Unsupported(format!(
                    "type {full} would be named {swift} in Swift, a name keel's Swift runtime or Swift itself uses; rename it"
                )));
            }
            names.claim(&swift, &full, "Swift")?;
            names.set(t.kind, t.index, swift);
        }
        // Direct edges: a table field or a union member stored inline in the value
        // type (vectors are arrays, already indirect).
        let edges: Vec<Vec<usize>> = s
            .tables
            .iter()
            .map(|t| {
                let mut e = Vec::new();
                for f in t.fields.iter().filter(|f| !f.deprecated) {
                    match &f.ty {
                        FieldType::Table(j) => e.push(*j),
                        FieldType::Union(u) => {
                            e.extend(s.unions[*u].members.iter().map(|m| m.table))
                        }
                        _ => {}
                    }
                }
                e
            })
            .collect();
        let reach = (0..s.tables.len())
            .map(|start| {
                let mut seen = BTreeSet::new();
                let mut stack = edges[start].clone();
                while let Some(t) = stack.pop() {
                    if seen.insert(t) {
                        stack.extend(edges[t].iter().copied());
                    }
                }
                seen
            })
            .collect();
        Ok(Gen {
            s,
            schema_name,
            out: String::new(),
            names,
            reach,
        })
    }

    /// A table field of table `owner` pointing at table `target` is boxed when
    /// `target` can contain `owner` again (or is `owner`).
    fn boxed(&self, owner: usize, f: &Field) -> bool {
        match f.ty {
            FieldType::Table(t) => t == owner || self.reach[t].contains(&owner),
            _ => false,
        }
    }

    /// A union is `indirect` when one of its members can contain a table holding
    /// the union.
    fn union_indirect(&self, u: usize) -> bool {
        let holders: Vec<usize> = self
            .s
            .tables
            .iter()
            .enumerate()
            .filter(|(_, t)| {
                t.fields
                    .iter()
                    .any(|f| matches!(f.ty, FieldType::Union(x) if x == u))
            })
            .map(|(i, _)| i)
            .collect();
        self.s.unions[u].members.iter().any(|m| {
            holders
                .iter()
                .any(|h| *h == m.table || self.reach[m.table].contains(h))
        })
    }

    fn base_type(&self, ty: &FieldType) -> String {
        self.names.type_of(ty, swift_scalar, |e| format!("[{e}]"))
    }

    fn field_type(&self, f: &Field) -> String {
        property_type(f, self.base_type(&f.ty), |b| b + "?")
    }

    fn enum_case(&self, e: &EnumDef, v: &EnumVal) -> String {
        let _ = e;
        let c = lower_camel(&v.name);
        if c == "unknown" {
            "unknown_".into()
        } else {
            KEYWORDS.ident(&c)
        }
    }

    fn enum_lit(&self, e: usize, raw: i64) -> String {
        let en = &self.s.enums[e];
        match enum_value(en, raw) {
            Some(v) => format!(".{}", self.enum_case(en, v)),
            None => format!(".unknown({})", scalar_lit(&Value::Int(raw), en.underlying)),
        }
    }

    /// Default value expression of a field's `init` parameter; `None` for key fields.
    fn default_expr(&self, f: &FieldPlan<'_>) -> Option<String> {
        if f.key_position.is_some() {
            return None;
        }
        Some(match &f.default {
            Unset::Scalar(v, t) => scalar_lit(v, *t),
            Unset::Enum(e, raw, _) => self.enum_lit(*e, *raw),
            Unset::Empty => "[]".into(),
            Unset::Absent | Unset::Required => "nil".into(),
        })
    }

    fn run(mut self) -> Result<String, CodegenError> {
        let _ = writeln!(
            self.out,
            "// @generated by keel-schema {} (`keel codegen swift`) — do not edit.\n\
             // Value types, FlatBuffers encoding and typed query handles for the schema\n\
             // below. Needs only keel's Swift package (`import Keel`).\n\n\
             import Keel\n",
            env!("CARGO_PKG_VERSION")
        );
        self.gen_schema();
        render_types!(self)?;
        Ok(self.out)
    }

    fn gen_schema(&mut self) {
        let text = self.s.to_fbs();
        let hashes = raw_string_hashes(&text);
        let name = &self.schema_name;
        let colls: Vec<String> = self
            .s
            .collections
            .iter()
            .map(|c| format!("{}.self", self.names.table_name(c.table)))
            .collect();
        let _ = writeln!(
            self.out,
            "/// The schema these types were generated from. Open a database with it:\n\
             /// `try await Keel.openAsync(path: path, schema: {name}.self)`.\n\
             public enum {name}: KeelSchema {{\n\
             \x20   /// Canonical text of the schema (what the database stores and checks).\n\
             \x20   public static let fbs: String = {hashes}\"\"\"\n{text}\n\"\"\"{hashes}\n\n\
             \x20   /// Fingerprint of `fbs` (keel's `Schema::fingerprint`).\n\
             \x20   public static let fingerprint: UInt64 = {:#018x}\n\n\
             \x20   /// The collections: the root type first, then `(entity)` tables.\n\
             \x20   public static let collections: [any KeelRecord.Type] = [{}]\n}}",
            self.s.fingerprint(),
            colls.join(", ")
        );
    }

    fn gen_enum(&mut self, i: usize) {
        let e = &self.s.enums[i];
        let name = self.names.enum_name(i).to_owned();
        let raw = swift_scalar(e.underlying);
        let mut o = open_enum(
            e,
            &format!(
                "public enum {name}: Sendable, Hashable, CaseIterable, KeelFieldValue, KeelKey {{"
            ),
            |v| format!("    case {}", self.enum_case(e, v)),
            &format!("case unknown({raw})\n"),
        );
        let list: Vec<String> = e
            .values
            .iter()
            .map(|v| format!(".{}", self.enum_case(e, v)))
            .collect();
        let _ = writeln!(
            o,
            "    /// Every value the schema declares, in declaration order.\n    public static let allCases: [{name}] = [{}]\n",
            list.join(", ")
        );
        write_conversions(
            &mut o,
            e,
            |v| self.enum_case(e, v),
            scalar_lit,
            &[
                (
                    format!("    /// The value for a raw number (`unknown` when not declared).\n    public init(rawValue: {raw}) {{\n        switch rawValue {{"),
                    "        case $raw: self = .$case".into(),
                    "        default: self = .unknown(rawValue)\n        }\n    }\n".into(),
                ),
                (
                    format!("    /// The raw number stored in FlatBuffers.\n    public var rawValue: {raw} {{\n        switch self {{"),
                    "        case .$case: return $raw".into(),
                    "        case .unknown(let raw): return raw\n        }\n    }\n".into(),
                ),
                (
                    "    /// The name declared in the schema (`nil` for `unknown`).\n    public var name: String? {\n        switch self {".into(),
                    "        case .$case: return $name".into(),
                    "        case .unknown: return nil\n        }\n    }\n\n    /// The value as a query constant (its raw number).\n    public var keelValue: KeelValue { .integer(v: Int64(rawValue)) }\n}".into(),
                ),
            ],
        );
        self.out.push_str(&o);
    }

    fn gen_struct(&mut self, i: usize) {
        let sd = &self.s.structs[i];
        let name = self.names.struct_name(i).to_owned();
        let head = format!("public struct {name}: Sendable, Equatable, Hashable {{");
        let mut o = open_type(&sd.doc, &struct_doc_fallback(sd), &head);
        let mut params = Vec::new();
        for f in &sd.fields {
            doc(
                &mut o,
                "    ",
                &f.doc,
                &format!("`{}: {}`.", f.name, fbs_type(self.s, &f.ty)),
            );
            let ty = self.base_type(&f.ty);
            let m = KEYWORDS.ident(&member(&f.name));
            let _ = writeln!(o, "    public let {m}: {ty}");
            let def = match &f.ty {
                FieldType::Scalar(t) => scalar_lit(&t.zero(), *t),
                FieldType::Enum(e) => self.enum_lit(*e, 0),
                _ => format!("{ty}()"),
            };
            params.push((m, ty, def));
        }
        let sig: Vec<String> = params
            .iter()
            .map(|(m, t, d)| format!("{m}: {t} = {d}"))
            .collect();
        let _ = writeln!(
            o,
            "\n    /// A struct value; unset fields are zero.\n    public init({}) {{",
            sig.join(", ")
        );
        for (m, _, _) in &params {
            let _ = writeln!(o, "        self.{m} = {m}");
        }
        let _ = writeln!(o, "    }}");
        let fields: Vec<(String, String, String)> = sd
            .fields
            .iter()
            .zip(&params)
            .map(|(f, (m, ty, _))| (m.clone(), f.name.clone(), ty.clone()))
            .collect();
        self.draft(&mut o, &name, &fields);
        let _ = writeln!(o, "}}\n");
        let _ = writeln!(
            o,
            "extension {name}: KeelStruct {{\n    /// Size of the inline layout in bytes.\n    public static let keelSize = {}\n    /// Alignment of the inline layout in bytes.\n    public static let keelAlignment = {}\n",
            sd.size, sd.align
        );
        let _ = writeln!(
            o,
            "    /// Reads the struct at byte `o` of `b` (bounds-checked).\n    public init(keelBuffer b: [UInt8], at o: Int) throws {{"
        );
        for f in &sd.fields {
            let m = KEYWORDS.ident(&member(&f.name));
            let expr = match &f.ty {
                FieldType::Struct(si) => format!(
                    "try {}(keelBuffer: b, at: o + {})",
                    self.names.struct_name(*si),
                    f.offset
                ),
                FieldType::Enum(e) => format!(
                    "{}(rawValue: try KeelWire.read({}.self, b, at: o + {}))",
                    self.names.enum_name(*e),
                    swift_scalar(self.s.enums[*e].underlying),
                    f.offset
                ),
                FieldType::Scalar(t) => format!(
                    "try KeelWire.read({}.self, b, at: o + {})",
                    swift_scalar(*t),
                    f.offset
                ),
                _ => "fatalError()".into(),
            };
            let _ = writeln!(o, "        self.{m} = {expr}");
        }
        let _ = writeln!(
            o,
            "    }}\n\n    /// Writes the struct at byte `o` of `b`.\n    public func keelWrite(into b: inout [UInt8], at o: Int) {{"
        );
        for f in &sd.fields {
            let m = KEYWORDS.ident(&member(&f.name));
            let stmt = match &f.ty {
                FieldType::Struct(_) => format!("{m}.keelWrite(into: &b, at: o + {})", f.offset),
                FieldType::Enum(_) => format!(
                    "KeelWire.write({m}.rawValue, into: &b, at: o + {})",
                    f.offset
                ),
                _ => format!("KeelWire.write({m}, into: &b, at: o + {})", f.offset),
            };
            let _ = writeln!(o, "        {stmt}");
        }
        let _ = writeln!(o, "    }}\n}}");
        self.handles(&mut o, &name, sd.fields.iter().map(|f| (&f.name, &f.ty)));
        self.out.push_str(&o);
    }

    /// `extension KeelField where Value == T` with one handle per field of `T`, so
    /// `Post.author.name` and `Post.frame.origin.x` type-check.
    fn handles<'f>(
        &self,
        o: &mut String,
        name: &str,
        fields: impl Iterator<Item = (&'f String, &'f FieldType)>,
    ) {
        let mut body = String::new();
        for (fname, ty) in fields {
            self.handle_lines(&mut body, fname, ty, false, name);
        }
        if !body.is_empty() {
            let _ = writeln!(
                o,
                "\n/// Query handles for fields of `{name}` reached through a field of that type.\nextension KeelField where Value == {name} {{\n{body}}}"
            );
        }
    }

    /// One handle (two for a union: the member accessors live on the union's own
    /// extension). `root` handles are `static var` on the table itself.
    fn handle_lines(&self, o: &mut String, fname: &str, ty: &FieldType, root: bool, owner: &str) {
        let m = KEYWORDS.ident(&member(fname));
        let v = match ty {
            FieldType::Vector(inner) if matches!(**inner, FieldType::Scalar(ScalarType::U8)) => {
                "[UInt8]".to_owned()
            }
            // `[float]`: the handle `nearest` takes for a `(vector: N)` field.
            FieldType::Vector(inner) if matches!(**inner, FieldType::Scalar(ScalarType::F32)) => {
                "[Float]".to_owned()
            }
            FieldType::Vector(_) => return,
            other => self.base_type(other),
        };
        if root {
            let _ = writeln!(
                o,
                "    /// Query handle for `{fname}`.\n    public static var {m}: KeelField<{owner}, {v}> {{ KeelField({fname:?}) }}"
            );
        } else {
            let _ = writeln!(
                o,
                "    /// Query handle for `{fname}`.\n    public var {m}: KeelField<Root, {v}> {{ child({fname:?}) }}"
            );
        }
    }

    fn gen_union(&mut self, i: usize) {
        let u = &self.s.unions[i];
        let name = self.names.union_name(i).to_owned();
        let indirect = if self.union_indirect(i) {
            "indirect "
        } else {
            ""
        };
        let head = format!("public {indirect}enum {name}: Sendable, Equatable, Hashable {{");
        let case = |m: &UnionMemberDef| {
            let c = lower_camel(&m.name);
            if c == "unknown" {
                "unknown_".to_owned()
            } else {
                KEYWORDS.ident(&c)
            }
        };
        let mut o = open_union(
            u,
            &head,
            |m| format!("    case {}({})", case(m), self.names.table_name(m.table)),
            "case unknown(tag: UInt8)\n",
        );
        write_arms(
            &mut o,
            "    /// The FlatBuffers type tag of this member.\n    public var keelTag: UInt8 {\n        switch self {",
            &u.members,
            |m| format!("        case .{}: return {}", case(m), m.tag),
            "        case .unknown(let tag): return tag\n        }\n    }\n",
        );
        write_arms(
            &mut o,
            &format!("    /// Reads the member with type tag `tag` from `table` (`nil` when absent).\n    public static func keelRead(tag: UInt8, table: KeelWire.Table?) throws -> {name}? {{\n        guard let t = table, tag != 0 else {{ return nil }}\n        switch tag {{"),
            &u.members,
            |m| format!("        case {}: return .{}(try {}(keelTable: t))", m.tag, case(m), self.names.table_name(m.table)),
            "        default: return .unknown(tag: tag)\n        }\n    }\n",
        );
        write_arms(
            &mut o,
            "    /// Writes the member table; `nil` for `unknown` (left out of the object).\n    public func keelWrite(to b: KeelWire.Builder) -> KeelWire.Offset? {\n        switch self {",
            &u.members,
            |m| format!("        case .{}(let v): return v.keelWrite(to: b)", case(m)),
            "        case .unknown: return nil\n        }\n    }\n}",
        );
        // handles: members and membership tests
        let _ = writeln!(
            o,
            "\n/// Query handles for the members of `{name}` (`Post.content.image.width`, `Post.content.isImage`).\nextension KeelField where Value == {name} {{"
        );
        for m in &u.members {
            let c = lower_camel(&m.name);
            let _ = writeln!(
                o,
                "    /// The field when it holds a `{}` (join a field of it).\n    public var {}: KeelField<Root, {}> {{ child({:?}) }}\n    /// True when the field holds a `{}`.\n    public var is{}: KeelPredicate<Root> {{ holds({:?}) }}",
                m.name,
                KEYWORDS.ident(&c),
                self.names.table_name(m.table),
                m.name,
                m.name,
                upper_camel(&m.name),
                m.name
            );
        }
        let _ = writeln!(o, "}}");
        self.out.push_str(&o);
    }

    fn read_expr(&self, ti: usize, fp: &FieldPlan<'_>) -> String {
        let slot = fp.slot;
        match fp.read() {
            Read::Scalar(t, None) => {
                format!("try t.optional({}.self, slot: {slot})", swift_scalar(t))
            }
            Read::Scalar(t, Some(d)) => {
                format!("try t.scalar(slot: {slot}, default: {})", scalar_lit(d, t))
            }
            Read::Enum(e, u, default) => {
                let n = self.names.enum_name(e);
                match default {
                    None => format!(
                        "try t.optional({}.self, slot: {slot}).map({n}.init(rawValue:))",
                        swift_scalar(u)
                    ),
                    Some(d) => format!(
                        "{n}(rawValue: try t.scalar(slot: {slot}, default: {}))",
                        scalar_lit(d, u)
                    ),
                }
            }
            Read::String { required: true } => {
                format!("try t.requiredString(slot: {slot}, field: {:?})", fp.name())
            }
            Read::String { required: false } => format!("try t.string(slot: {slot})"),
            Read::Struct(s) => {
                let n = self.names.struct_name(s);
                format!(
                    "try t.structPosition(slot: {slot}, size: {n}.keelSize).map {{ try {n}(keelBuffer: t.bytes, at: $0) }}"
                )
            }
            Read::Table(x) => {
                let n = self.names.table_name(x);
                let e = format!("try t.table(slot: {slot}).map {{ try {n}(keelTable: $0) }}");
                if self.boxed(ti, fp.field) {
                    format!("({e}).map(KeelBox.init)")
                } else {
                    e
                }
            }
            // `unionTag` refuses a type without its value and a value without
            // its type, as the Rust verifier does
            Read::Union(u) => format!(
                "try {}.keelRead(tag: t.unionTag(slot: {slot}), table: t.table(slot: {slot}))",
                self.names.union_name(u)
            ),
            Read::Vector(elem) => match elem {
                Elem::Bytes => {
                    format!("try t.vector(slot: {slot}, elementSize: 1)?.byteArray() ?? []")
                }
                Elem::Scalar(s) => format!(
                    "try t.vector(slot: {slot}, elementSize: {})?.scalars({}.self) ?? []",
                    s.size(),
                    swift_scalar(s)
                ),
                Elem::Enum(e, u) => format!(
                    "(try t.vector(slot: {slot}, elementSize: {})?.scalars({}.self) ?? []).map({}.init(rawValue:))",
                    u.size(),
                    swift_scalar(u),
                    self.names.enum_name(e)
                ),
                Elem::String => {
                    format!("try t.vector(slot: {slot}, elementSize: 4)?.strings() ?? []")
                }
                Elem::Struct(s) => {
                    let n = self.names.struct_name(s);
                    format!(
                        "try t.vector(slot: {slot}, elementSize: {n}.keelSize)?.map {{ v, i in try {n}(keelBuffer: v.bytes, at: v.position(i)) }} ?? []"
                    )
                }
                Elem::Table(x) => format!(
                    "try t.vector(slot: {slot}, elementSize: 4)?.map {{ v, i in try {}(keelTable: v.table(i)) }} ?? []",
                    self.names.table_name(x)
                ),
                // tags in slot id-1, member tables in id; a member this schema
                // does not know stays in the array as `.unknown(tag:)`
                Elem::Union(u) => format!(
                    "try t.unions(slot: {slot}) {{ tag, m in try {0}.keelRead(tag: tag, table: m) ?? .unknown(tag: tag) }}",
                    self.names.union_name(u)
                ),
            },
        }
    }

    /// The schema's own words for a field without a doc comment:
    /// `` `priority: int = 1` (indexed). ``
    fn field_summary(&self, f: &Field) -> String {
        let mut decl = format!("{}: {}", f.name, fbs_type(self.s, &f.ty));
        if f.optional {
            decl.push_str(" = null");
        } else {
            match (&f.ty, &f.default) {
                (FieldType::Enum(e), Value::Int(raw)) => {
                    if let Some(n) = self.s.enums[*e].name_of(*raw) {
                        decl.push_str(&format!(" = {n}"));
                    }
                }
                (FieldType::Scalar(_), v) if *v != Value::Null => {
                    decl.push_str(&format!(" = {v}"));
                }
                _ => {}
            }
        }
        let attrs: Vec<&str> = [
            (f.primary, "primary key"),
            (f.indexed, "indexed"),
            (f.unique, "unique"),
        ]
        .iter()
        .filter(|(on, _)| *on)
        .map(|(_, a)| *a)
        .collect();
        if attrs.is_empty() {
            format!("`{decl}`.")
        } else {
            format!("`{decl}` ({}).", attrs.join(", "))
        }
    }

    /// `with(_:)` and its `KeelDraft`: the fields are `let`, so a changed copy is
    /// made from a mutable draft of every field (Dflat's models are immutable too).
    /// `fields`: each field's Swift member name, schema name and Swift type, in the
    /// order of the value type's memberwise `init`.
    fn draft(&self, o: &mut String, name: &str, fields: &[(String, String, String)]) {
        let _ = writeln!(
            o,
            "\n    /// A copy with the changes `edit` makes to a draft of this value:\n    /// `let renamed = value.with {{ $0.field = … }}`.\n    public func with(_ edit: (inout KeelDraft) throws -> Void) rethrows -> {name} {{\n        var draft = KeelDraft(self)\n        try edit(&draft)\n        return draft.value\n    }}\n\n    /// Every field of a `{name}`, mutable: what `with(_:)` edits.\n    public struct KeelDraft {{"
        );
        for (m, fbs, ty) in fields {
            let _ = writeln!(o, "        /// `{fbs}`.\n        public var {m}: {ty}");
        }
        let inits: Vec<String> = fields
            .iter()
            .map(|(m, _, _)| format!("            self.{m} = value.{m}"))
            .collect();
        // `self.x`, not `x`: a field named `self` would be the draft itself.
        let args: Vec<String> = fields
            .iter()
            .map(|(m, _, _)| format!("{m}: self.{m}"))
            .collect();
        let _ = writeln!(
            o,
            "\n        /// A draft holding `value`'s fields.\n        public init(_ value: {name}) {{\n{}\n        }}\n\n        /// The value these fields make.\n        public var value: {name} {{ {name}({}) }}\n    }}",
            inits.join("\n"),
            args.join(", ")
        );
    }

    fn gen_table(&mut self, ti: usize) -> Result<(), CodegenError> {
        let s = self.s;
        let t = &s.tables[ti];
        let name = self.names.table_name(ti).to_owned();
        let plan = TablePlan::new(s, ti);
        let collection = plan.ops.collection;
        let live = plan.live();
        let mut o = String::new();

        // --- the value type
        o.push('\n');
        doc(&mut o, "", &t.doc, &table_doc_fallback(t, collection));
        let _ = writeln!(
            o,
            "///\n/// An immutable value type (`let` fields, as Dflat's models): build one with `init`\n/// (unset fields take the schema defaults), derive a changed copy with\n/// `value.with {{ $0.field = … }}`."
        );
        let _ = writeln!(o, "public struct {name}: Sendable, Equatable, Hashable {{");
        for f in &live {
            let fallback = self.field_summary(f);
            doc(&mut o, "    ", &f.doc, &fallback);
            let m = KEYWORDS.ident(&member(&f.name));
            let ty = self.field_type(f);
            if self.boxed(ti, f) {
                let raw = member(&f.name);
                let _ = writeln!(
                    o,
                    "    public var {m}: {ty} {{ _{raw}?.value }}\n    private let _{raw}: KeelBox<{}>?",
                    self.base_type(&f.ty)
                );
            } else {
                let _ = writeln!(o, "    public let {m}: {ty}");
            }
        }
        // init
        let sig: Vec<String> = live
            .iter()
            .map(|f| {
                let m = KEYWORDS.ident(&member(&f.name));
                let m = match init_param(&m) {
                    Some(local) => format!("{m} {local}"),
                    None => m,
                };
                match self.default_expr(plan.of(f)) {
                    Some(d) => format!("{m}: {} = {d}", self.field_type(f)),
                    None => format!("{m}: {}", self.field_type(f)),
                }
            })
            .collect();
        let _ = writeln!(
            o,
            "\n    /// A value; unset fields take the schema defaults.\n    public init(\n        {}\n    ) {{",
            sig.join(",\n        ")
        );
        for f in &live {
            let m = KEYWORDS.ident(&member(&f.name));
            let local = init_param(&m).unwrap_or(&m);
            if self.boxed(ti, f) {
                let _ = writeln!(
                    o,
                    "        self._{} = {local}.map(KeelBox.init)",
                    member(&f.name)
                );
            } else {
                let _ = writeln!(o, "        self.{m} = {local}");
            }
        }
        let _ = writeln!(o, "    }}");
        let fields: Vec<(String, String, String)> = live
            .iter()
            .map(|f| {
                (
                    KEYWORDS.ident(&member(&f.name)),
                    f.name.clone(),
                    self.field_type(f),
                )
            })
            .collect();
        self.draft(&mut o, &name, &fields);
        let _ = writeln!(o, "}}\n");

        // --- KeelTable: read and write
        let file_id = match &s.file_identifier {
            Some(id) if s.root_table == Some(ti) => format!("{id:?}"),
            _ => "nil".into(),
        };
        let _ = writeln!(
            o,
            "extension {name}: KeelTable {{\n    /// The schema's `file_identifier` when this is the root type.\n    public static let keelFileIdentifier: String? = {file_id}\n"
        );
        let _ = writeln!(o, "    /// Reads the table; bad offsets or lengths throw `KeelDecodeError`.\n    public init(keelTable t: KeelWire.Table) throws {{");
        for f in &live {
            let target = if self.boxed(ti, f) {
                format!("_{}", member(&f.name))
            } else {
                KEYWORDS.ident(&member(&f.name))
            };
            let _ = writeln!(
                o,
                "        self.{target} = {}",
                self.read_expr(ti, plan.of(f))
            );
        }
        let _ = writeln!(o, "    }}\n");
        let _ = writeln!(
            o,
            "    /// Writes the table (children first) and returns its offset.\n    public func keelWrite(to b: KeelWire.Builder) -> KeelWire.Offset {{"
        );
        // Fields are read as `self.x`: a field named like a local here (`b`, or
        // `self` itself) would otherwise name the local instead.
        for fp in plan.child_plans() {
            let m = format!("self.{}", KEYWORDS.ident(&member(fp.name())));
            let var = format!("off{}", upper_camel(fp.name()));
            let line = match fp.kind {
                Kind::String if fp.key_string() => format!("let {var} = b.createString({m})"),
                Kind::String => format!("let {var} = {m}.map {{ b.createString($0) }}"),
                Kind::Table(_) => format!("let {var} = {m}?.keelWrite(to: b)"),
                Kind::Union(_) => format!(
                    "let {var} = {m}.flatMap {{ u in u.keelWrite(to: b).map {{ (u.keelTag, $0) }} }}"
                ),
                // `.unknown` members have no table to write: left out, as for a
                // single union; an array of only those is left out entirely
                Kind::Vector(Elem::Union(_)) => format!(
                    "let k{0} = {m}.compactMap {{ u in u.keelWrite(to: b).map {{ (u.keelTag, $0) }} }}\n        let {var} = k{0}.isEmpty ? nil : b.createUnionVector(k{0})",
                    upper_camel(fp.name())
                ),
                Kind::Vector(elem) => {
                    let e = match elem {
                        Elem::Bytes | Elem::Scalar(_) => format!("b.createScalarVector({m})"),
                        Elem::Enum(..) => format!("b.createScalarVector({m}.map(\\.rawValue))"),
                        Elem::String => {
                            format!("b.createOffsetVector({m}.map {{ b.createString($0) }})")
                        }
                        Elem::Table(_) => {
                            format!("b.createOffsetVector({m}.map {{ $0.keelWrite(to: b) }})")
                        }
                        Elem::Struct(_) => format!("b.createStructVector({m})"),
                        Elem::Union(_) => unreachable!("matched above"),
                    };
                    // empty vectors are left out: absent reads as empty
                    format!("let {var} = {m}.isEmpty ? nil : {e}")
                }
                Kind::Scalar(_) | Kind::Enum(..) | Kind::Struct(_) => continue,
            };
            let _ = writeln!(o, "        {line}");
        }
        let _ = writeln!(o, "        b.startTable()");
        for fp in plan.vtable_plans() {
            let m = format!("self.{}", KEYWORDS.ident(&member(fp.name())));
            let var = format!("off{}", upper_camel(fp.name()));
            let (slot, tag) = (fp.slot, fp.tag_slot.unwrap_or(0));
            let line = match (fp.kind, &fp.default) {
                (Kind::Scalar(_), Unset::Absent) => {
                    format!("if let v = {m} {{ b.addScalarAlways(slot: {slot}, v) }}")
                }
                (Kind::Enum(..), Unset::Absent) => {
                    format!("if let v = {m} {{ b.addScalarAlways(slot: {slot}, v.rawValue) }}")
                }
                // A float is left out only when its bits are the default's: `==`
                // would take `-0.0` for a `0.0` default (and never match a NaN one).
                (Kind::Scalar(t @ (ScalarType::F32 | ScalarType::F64)), _) => format!(
                    "if {m}.bitPattern != ({} as {}).bitPattern {{ b.addScalarAlways(slot: {slot}, {m}) }}",
                    scalar_lit(&fp.field.default, t),
                    swift_scalar(t)
                ),
                (Kind::Scalar(t), _) => format!(
                    "b.addScalar(slot: {slot}, {m}, default: {})",
                    scalar_lit(&fp.field.default, t)
                ),
                (Kind::Enum(_, u), _) => format!(
                    "b.addScalar(slot: {slot}, {m}.rawValue, default: {})",
                    scalar_lit(&fp.field.default, u)
                ),
                (Kind::Struct(_), _) => {
                    format!("if let v = {m} {{ b.addStruct(slot: {slot}, v) }}")
                }
                (Kind::String, _) if fp.key_string() => {
                    format!("b.addOffset(slot: {slot}, {var})")
                }
                (Kind::Union(_), _) => format!(
                    "if let u = {var} {{\n            b.addScalarAlways(slot: {tag}, u.0)\n            b.addOffset(slot: {slot}, u.1)\n        }}"
                ),
                (Kind::Vector(Elem::Union(_)), _) => format!(
                    "if let v = {var} {{\n            b.addOffset(slot: {tag}, v.tags)\n            b.addOffset(slot: {slot}, v.values)\n        }}"
                ),
                (Kind::String | Kind::Table(_) | Kind::Vector(_), _) => {
                    format!("if let off = {var} {{ b.addOffset(slot: {slot}, off) }}")
                }
            };
            let _ = writeln!(o, "        {line}");
        }
        let _ = writeln!(o, "        return b.endTable()\n    }}\n}}");

        // --- collection
        if let Some(c) = collection {
            let key_fields = plan.key_fields();
            let _ = writeln!(
                o,
                "\nextension {name}: KeelRecord {{\n    /// The schema this collection belongs to.\n    public typealias Schema = {}\n    /// The collection's name in the database.\n    public static let keelCollection = {:?}",
                self.schema_name, c.name
            );
            match key_fields.len() {
                0 => {
                    let _ = writeln!(
                        o,
                        "    /// No `(primary)` field: objects are keyed by their SQLite rowid.\n    public typealias Key = Int64\n}}"
                    );
                }
                1 => {
                    let f = key_fields[0];
                    let _ = writeln!(
                        o,
                        "    /// The primary key: `{}`.\n    public typealias Key = {}\n}}\n\nextension {name}: KeelKeyed {{\n    /// This object's primary key.\n    public var primaryKey: Key {{ {} }}\n}}",
                        f.name,
                        self.base_type(&f.ty),
                        KEYWORDS.ident(&member(&f.name))
                    );
                }
                _ => {
                    let _ = writeln!(
                        o,
                        "\n    /// The composite primary key ({}), in declaration order.\n    public struct Key: KeelKey {{",
                        key_fields.iter().map(|f| format!("`{}`", f.name)).collect::<Vec<_>>().join(", ")
                    );
                    for f in &key_fields {
                        let _ = writeln!(
                            o,
                            "        public var {}: {}",
                            KEYWORDS.ident(&member(&f.name)),
                            self.base_type(&f.ty)
                        );
                    }
                    let params: Vec<String> = key_fields
                        .iter()
                        .map(|f| {
                            format!(
                                "{}: {}",
                                KEYWORDS.ident(&member(&f.name)),
                                self.base_type(&f.ty)
                            )
                        })
                        .collect();
                    let _ = writeln!(
                        o,
                        "\n        /// A key.\n        public init({}) {{",
                        params.join(", ")
                    );
                    for f in &key_fields {
                        let m = KEYWORDS.ident(&member(&f.name));
                        let _ = writeln!(o, "            self.{m} = {m}");
                    }
                    let vals: Vec<String> = key_fields
                        .iter()
                        .map(|f| format!("{}.keelValue", KEYWORDS.ident(&member(&f.name))))
                        .collect();
                    let _ = writeln!(
                        o,
                        "        }}\n\n        /// The key's parts, in key-field order.\n        public var keelKeyValues: [KeelValue] {{ [{}] }}\n    }}\n}}\n\nextension {name}: KeelKeyed {{\n    /// This object's primary key.\n    public var primaryKey: Key {{ Key({}) }}\n}}",
                        vals.join(", "),
                        key_fields
                            .iter()
                            .map(|f| {
                                let m = KEYWORDS.ident(&member(&f.name));
                                format!("{m}: {m}")
                            })
                            .collect::<Vec<_>>()
                            .join(", ")
                    );
                }
            }
        }

        // --- handles
        let _ = writeln!(o, "\n/// Typed query handles: `{name}.field >= value`, `{name}.field.descending`.\nextension {name} {{");
        for f in &live {
            self.handle_lines(&mut o, &f.name, &f.ty, true, &name);
        }
        let _ = writeln!(o, "}}");
        self.handles(&mut o, &name, live.iter().map(|f| (&f.name, &f.ty)));
        self.relation_handles(&mut o, &name, &handles(s, &plan));
        self.out.push_str(&o);
        Ok(())
    }

    /// `Post.authorRef: KeelRelation<Post, Author>` for each to-one reference,
    /// `KeelManyRelation` for each to-many one and each inverse
    /// (`Author.postsRef`): the plan's `handles`
    /// (`db.fetch(Post.self).including(Post.authorRef)`, KeelRelations.swift).
    fn relation_handles(&self, o: &mut String, name: &str, handles: &[HandlePlan<'_>]) {
        if handles.is_empty() {
            return;
        }
        let _ = writeln!(
            o,
            "\n/// Relation handles: `db.fetch({name}.self).including({name}.…Ref)`.\nextension {name} {{"
        );
        for h in handles {
            let other = self.names.table_name(h.other);
            let handle = if h.many() {
                "KeelManyRelation"
            } else {
                "KeelRelation"
            };
            let _ = writeln!(
                o,
                "    /// {}\n    public static var {}: {handle}<{name}, {other}> {{ {handle}({:?}) }}",
                h.doc(&format!("`{other}`")),
                KEYWORDS.ident(&format!("{}Ref", member(h.name))),
                h.name
            );
        }
        let _ = writeln!(o, "}}");
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::codegen::testing::{
        assert_contains_all, blog, example, photos, scratch_dir, test_schema,
    };

    #[test]
    fn names() {
        assert_eq!(KEYWORDS.ident("default"), "`default`");
        assert_eq!(member("primaryKey"), "primaryKey_");
    }

    /// References get a relation handle, to-many ones a `KeelManyRelation`
    /// (plain fields none).
    #[test]
    fn references_get_relation_handles() {
        let code = generate(&example("relations.fbs"), "rel").unwrap();
        assert!(code.contains("public static var authorRef: KeelRelation<Post, Author> { KeelRelation(\"author\") }"), "{code}");
        assert!(code.contains("public static var editorRef: KeelRelation<Post, Author>"));
        assert!(code.contains("public static var postRef: KeelRelation<Comment, Post>"));
        assert!(code.contains("public static var tagsRef: KeelManyRelation<Post, Tag> { KeelManyRelation(\"tags\") }"), "{code}");
        assert!(code.contains("public static var postsRef: KeelManyRelation<Author, Post> { KeelManyRelation(\"posts\") }"), "{code}");
        assert!(!generate(&blog(), "blog").unwrap().contains("KeelRelation"));
    }

    #[test]
    fn blog_post_covers_every_field_kind() {
        let code = generate(&blog(), "blog").unwrap();
        assert_contains_all(
            &code,
            &[
                "public enum BlogSchema: KeelSchema {",
                "public static let collections: [any KeelRecord.Type] = [Post.self]",
                "public struct Post: Sendable, Equatable, Hashable {",
                "public func with(_ edit: (inout KeelDraft) throws -> Void) rethrows -> Post {",
                "public struct KeelDraft {",
                "        public var title: String?\n",
                "self.title = value.title",
                "    public let id: String\n",
                "    /// `priority: int = 1` (indexed).\n    public let priority: Int32\n",
                "    /// `color: Color = Green`.\n",
                "    /// `slug: string` (unique).\n",
                "    public let priority: Int32\n",
                "    public let color: Color\n",
                "    public let title: String?\n",
                "    public let author: Author?\n",
                "    public let content: Content?\n",
                "    public let pos: Vec2?\n",
                "    public let frame: Rect?\n",
                "    public let tags: [String]\n",
                "    public let scores: [Int32]\n",
                "    public let points: [Vec2]\n",
                "    public let attachments: [Image]\n",
                "    public let colors: [Color]\n",
                "    public let rating: Double?\n",
                "    public let published: Bool\n",
                "    public let views: UInt64\n",
                "    public let delta: Int8\n",
                "    public let flags: [UInt8]\n",
                "id: String,\n",
                "priority: Int32 = 1,",
                "color: Color = .green,",
                "delta: Int8 = -3,",
                "published: Bool = true,",
                "public static let keelFileIdentifier: String? = \"BLOG\"",
                "public static let keelCollection = \"blog.Post\"",
                "public typealias Key = String",
                "public var primaryKey: Key { id }",
                "public static var priority: KeelField<Post, Int32> { KeelField(\"priority\") }",
                "public static var title: KeelField<Post, String> { KeelField(\"title\") }",
                "public static var flags: KeelField<Post, [UInt8]> { KeelField(\"flags\") }",
                "extension KeelField where Value == Author {",
                "public var name: KeelField<Root, String> { child(\"name\") }",
                "extension KeelField where Value == Rect {",
                "public var origin: KeelField<Root, Vec2> { child(\"origin\") }",
                "public var image: KeelField<Root, Image> { child(\"Image\") }",
                "public var isImage: KeelPredicate<Root> { holds(\"Image\") }",
                "public enum Color: Sendable, Hashable, CaseIterable, KeelFieldValue, KeelKey {",
                "case unknown(Int8)",
                "case unknown(tag: UInt8)",
                "public enum Content: Sendable, Equatable, Hashable {",
                "public struct Rect: Sendable, Equatable, Hashable {",
                "public init(x: Float = 0.0, y: Float = 0.0)",
                // structs are immutable like tables: `let` fields, changed through `with`
                "    /// `x: float`.\n    public let x: Float\n",
                "    public let origin: Vec2\n",
                "public func with(_ edit: (inout KeelDraft) throws -> Void) rethrows -> Vec2 {",
                "        /// `layer`.\n        public var layer: Int16\n",
                "public var value: Rect { Rect(origin: self.origin, size: self.size, layer: self.layer) }",
                // union: type tag in slot id-1, value in id
                "try Content.keelRead(tag: t.unionTag(slot: 6), table: t.table(slot: 6))",
                "b.addScalar(slot: 1, self.priority, default: 1)",
                "if let v = self.rating { b.addScalarAlways(slot: 14, v) }",
            ],
        );
        // no generated model has a settable stored field (drafts are nested)
        assert!(
            !code
                .lines()
                .any(|l| l.starts_with("    public var ") && l.contains(": ") && !l.contains('{')),
            "a `var` field outside a draft in:\n{code}"
        );
        // deprecated fields are not generated; their slots stay reserved
        assert!(!code.contains("oldScore"));
        assert!(!code.contains("indirect"));
        assert!(!code.contains("KeelBox"));
        // the schema text is the canonical one, verbatim
        assert!(code.contains(&blog().to_fbs()));
    }

    #[test]
    fn vector_fields_get_a_float_array_handle_for_nearest() {
        let s = photos();
        let code = generate(&s, "v").unwrap();
        assert_contains_all(
            &code,
            &[
                "public let e: [Float]",
                "public static var e: KeelField<Photo, [Float]> { KeelField(\"e\") }",
            ],
        );
        // Other vectors still have no handle: nothing queries them.
        assert!(!code.contains("public static var m:"), "{code}");
    }

    #[test]
    fn composite_keys_recursion_and_keyless_collections() {
        let s = test_schema(
            r#"namespace t;
               table Node { name: string; child: Node; kids: [Node]; hold: Holder; }
               table Holder { u: Box; }
               table Inner { back: Holder; }
               union Box { Inner }
               table Tagging (entity) { post: string (primary); tag: string (primary); n: long; }
               table Log (entity) { text: string; default: int; }
               root_type Node;"#,
        );
        let code = generate(&s, "t").unwrap();
        assert_contains_all(
            &code,
            &[
                "private let _child: KeelBox<Node>?",
                "public var child: Node? { _child?.value }",
                "public indirect enum Box",
                "public struct Key: KeelKey {",
                "public var keelKeyValues: [KeelValue] { [post.keelValue, tag.keelValue] }",
                "public var primaryKey: Key { Key(post: post, tag: tag) }",
                "public typealias Key = Int64",
                "public let `default`: Int32",
                "collections: [any KeelRecord.Type] = [Node.self, Tagging.self, Log.self]",
            ],
        );
        // Log has no key: it is a KeelRecord but not KeelKeyed
        assert!(!code.contains("extension Log: KeelKeyed"));
    }

    #[test]
    fn vectors_of_unions_are_arrays_of_the_union() {
        let s = example("monster/monster_v2.fbs");
        let code = generate(&s, "monster").unwrap();
        assert_contains_all(
            &code,
            &[
            "    public let bag: [Equipment]\n",
            "bag: [Equipment] = []",
            // tags in slot 9 (id-1), member tables in slot 10 (id)
            "self.bag = try t.unions(slot: 10) { tag, m in try Equipment.keelRead(tag: tag, table: m) ?? .unknown(tag: tag) }",
            "let kBag = self.bag.compactMap { u in u.keelWrite(to: b).map { (u.keelTag, $0) } }",
            "let offBag = kBag.isEmpty ? nil : b.createUnionVector(kBag)",
            "b.addOffset(slot: 9, v.tags)\n            b.addOffset(slot: 10, v.values)",
            ],
        );
        // keel cannot index into a vector of unions: no query handle for it
        assert!(!code.contains("public static var bag:"));
    }

    #[test]
    fn fields_named_like_the_draft_api_get_a_suffix() {
        let s = test_schema("struct Money { value: long; with: int; } table T { value: int; with: Money; } root_type T;");
        let code = generate(&s, "m").unwrap();
        assert_contains_all(
            &code,
            &[
                "    public let value_: Int64\n",
                "    public let with_: Int32\n",
                "public var value: Money { Money(value_: self.value_, with_: self.with_) }",
                "    public let value_: Int32\n",
                "    public let with_: Money?\n",
                "public var value: T { T(value_: self.value_, with_: self.with_) }",
            ],
        );
    }

    #[test]
    fn clashing_names_are_errors() {
        let s = Schema::parse("table Key { a: int; } root_type Key;", "k.fbs").unwrap();
        assert!(matches!(
            generate(&s, "k"),
            Err(CodegenError::Unsupported(_))
        ));
    }

    #[test]
    fn write_sources_writes_one_file() {
        let dir = scratch_dir("swift");
        let path =
            Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples/blog/schema/blog.fbs");
        let written = write_sources(&path, &dir).unwrap();
        assert_eq!(written, vec![dir.join("Blog.swift")]);
        let text = std::fs::read_to_string(&written[0]).unwrap();
        assert!(text.starts_with("// @generated by keel-schema"));
        let _ = std::fs::remove_dir_all(&dir);
    }
}
