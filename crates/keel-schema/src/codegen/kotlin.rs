//! Kotlin code generation from `.fbs` schemas: `keel codegen kotlin SCHEMA.fbs OUT_DIR`.
//!
//! The output is what an Android app compiles beside keel's AAR, in the style of Room
//! and SQLDelight: immutable data classes, enum classes, compiler-checked query
//! handles. It calls the FlatBuffers runtime in keel's Kotlin layer (package
//! `dev.keel`, `bindings/kotlin/layer/`), so an app needs no third-party runtime.
//!
//! For a schema `blog.fbs` (namespace `blog`), `blog/Blog.kt` holds, in package `blog`
//! (or the package given to [`generate_in_package`], `keel codegen kotlin --package`):
//!
//! * `object BlogSchema { const val FBS; const val FINGERPRINT }` — the canonical
//!   schema text (as [`Schema::to_fbs`] prints it) to open the database with;
//! * per enum: `enum class Color(val raw: Byte) { Red(0), …, Unknown(0) }` —
//!   `Unknown` stands for a value a newer schema wrote (decoding never fails on one);
//!   a decoded object keeps that value's number in its last constructor property,
//!   `keelRetained` (`BlogSchema.Retained`: carried by `copy()`, ignored by
//!   equality), and writes it back unchanged;
//! * per struct: `data class Vec2(val x: Float = 0f, …)` with `SIZE`/`ALIGN`;
//! * per union: `sealed interface Content` with one `data class` per member table
//!   plus `Unknown(tag)`;
//! * per table: `data class Post(…)` — scalars as `Int`, `UByte`, `ULong`…, optional
//!   scalars (`= null`) as `Int?`, strings as `String?` (`String` for `(primary)`),
//!   tables, structs and unions as nullable values, vectors (of unions too) as
//!   `List<…>` (absent reads as empty) but a `(vector: N)` field as a `FloatArray`
//!   (no boxed floats; the class then gets `equals`/`hashCode`/`toString` that use
//!   its contents), defaults as the schema says, deprecated fields left out (their slots
//!   stay reserved) — with `encode()` and `Post.decode(bytes)`;
//! * per collection (root type and `(entity)` tables): the companion object
//!   implements `dev.keel.KeelModel<Post, Key>` (collection name, schema, key type:
//!   the key field's type, a nested `data class Key` for composite keys, `Long`
//!   (rowid) without one) and holds one typed handle per field: `Post.priority`
//!   (`Field<Post, Int>`), `Post.author.name`, `Post.content.isImage()`,
//!   `Post.content.image.url`, `Post.pos.x`; vectors can only be tested for absence.
//!
//! Each namespace is a package and a file of its own (`shop/Ns.kt`,
//! `warehouse/NsWarehouse.kt`), and every file imports the others' packages. Two
//! types of one name in different namespaces are both declared by that name
//! (`Item` in `shop` and in `warehouse`); the generated code then writes each as
//! its package's (`shop.Item`), so no reference is ambiguous.
//!
//! ```
//! let schema = keel_schema::Schema::parse(
//!     "namespace blog; table Post { id: string (primary); priority: int = 1; } root_type Post;",
//!     "post.fbs",
//! ).unwrap();
//! let files = keel_schema::kotlin::generate(&schema, "post").unwrap();
//! assert_eq!(files[0].0, "blog/Post.kt");
//! assert!(files[0].1.contains("data class Post("));
//! assert!(files[0].1.contains("val priority: dev.keel.Field<Post, Int>"));
//! ```

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::fmt::Write;
use std::path::{Path, PathBuf};

use crate::codegen::emit::{
    enum_doc_fallback, enum_value_doc_fallback, member_doc, struct_doc_fallback,
    table_doc_fallback, union_doc_fallback, write_arms, write_files, UNKNOWN_MEMBER_DOC,
    UNKNOWN_VALUE_DOC,
};
use crate::codegen::error::CodegenError;
use crate::codegen::naming::{
    self, clash, declared_types, load_with_stem, lower_camel, types_in_emit_order, upper_camel,
    DeclaredType, Keywords, Names, ENUM, STRUCT, TABLE,
};
use crate::codegen::plan::{
    enum_value, handles, Elem, FieldPlan, HandlePlan, Kind, Read, TablePlan, Unset,
};
use crate::model::*;
use crate::value::Value;

/// Parses `schema` (and its includes) and writes the Kotlin sources for it into
/// `out_dir` (created if missing); returns the paths written.
pub fn write_sources(schema: &Path, out_dir: &Path) -> Result<Vec<PathBuf>, CodegenError> {
    write_files(out_dir, sources(schema, None)?)
}

/// Parses `schema` (and its includes) and returns the Kotlin sources
/// [`write_sources`] would write, as `(path relative to the output directory,
/// text)` pairs, without writing them (for `keel codegen --check`). `package`
/// replaces the package of the schema's main namespace (see
/// [`generate_in_package`]).
pub fn sources(
    schema: &Path,
    package: Option<&str>,
) -> Result<Vec<(String, String)>, CodegenError> {
    let (s, stem) = load_with_stem(schema)?;
    generate_in_package(&s, &stem, package)
}

/// Generates the Kotlin sources for `schema` (`stem` names the schema object:
/// `blog` → `BlogSchema`). Returns `(relative path, text)` pairs: one file per
/// namespace, under the namespace's package directory.
pub fn generate(schema: &Schema, stem: &str) -> Result<Vec<(String, String)>, CodegenError> {
    generate_in_package(schema, stem, None)
}

/// [`generate`], with the generated code in the Kotlin package `package` instead
/// of the schema's namespace (`com.example.blog` for namespace `blog`): the main
/// namespace (the root type's) becomes `package`, any other namespace `ns`
/// becomes `package.ns`. The stored collection names do not change (they are the
/// schema's, `blog.Post`), so apps that share one database file keep agreeing on
/// them whatever package each generates into. `None` keeps the namespaces.
pub fn generate_in_package(
    schema: &Schema,
    stem: &str,
    package: Option<&str>,
) -> Result<Vec<(String, String)>, CodegenError> {
    if let Some(p) = package {
        let ok = |part: &str| {
            part.starts_with(|c: char| c.is_ascii_alphabetic() || c == '_')
                && part.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
        };
        if !p.split('.').all(ok) {
            return Err(CodegenError::Unsupported(format!(
                "{p:?} is no Kotlin package name (dot-separated identifiers)"
            )));
        }
    }
    Gen::new(schema, stem, package)?.run()
}

/// Kotlin's hard keywords (escaped with backticks as names).
const KEYWORDS: Keywords = Keywords::backticked(
    "as break class continue do else false for fun if in interface is null object package \
    return super this throw true try typealias typeof val var when while",
);

/// Names the companion of a collection already uses: field handles avoid them.
const RESERVED: &[&str] = &[
    "collectionName",
    "schemaFbs",
    "FILE_IDENTIFIER",
    "COLLECTION",
];

/// The class inside the schema object that keeps what a decoded object's typed
/// fields cannot hold, so that writing the object back loses nothing: the number
/// of an enum value this schema does not declare (the field itself reads
/// `Unknown`). Every table with an enum field has a last constructor parameter
/// `keelRetained` of this type; `copy()` carries it along, equality ignores it.
const RETAINED: &str = "
    /**
     * What a decoded object keeps of its bytes that its typed fields cannot hold:
     * the number of each enum field whose value this schema does not declare (the
     * field reads `Unknown`), by vtable slot. Writing the object back writes that
     * number again, so an older app does not overwrite a newer app's value with 0.
     * `copy()` keeps it; equality and hashing ignore it.
     */
    public class Retained private constructor(private val enums: kotlin.collections.Map<Int, Long>) {
        /** The number to write for the enum in [slot]: the kept one while the field is still [unknown]. */
        public fun raw(slot: Int, known: Long, unknown: Boolean): Long =
            if (unknown) enums[slot] ?: known else known

        override fun equals(other: Any?): Boolean = other is Retained
        override fun hashCode(): Int = 0
        override fun toString(): String = if (enums.isEmpty()) \"none\" else \"unknown enums $enums\"

        /** This, plus the number [raw] of the enum in [slot] when there is one to keep. */
        public fun keep(slot: Int, raw: Long?): Retained =
            if (raw == null) this else Retained(enums + (slot to raw))

        public companion object {
            /** Nothing kept: what an object made in code (or with known values) holds. */
            @JvmField public val NONE: Retained = Retained(emptyMap())
        }
    }
";

/// The conversion of a `Long` to what the builder's `add…` method of a scalar takes.
fn long_to_wire(add: &str) -> &'static str {
    match add {
        "addByte" => ".toByte()",
        "addShort" => ".toShort()",
        "addInt" => ".toInt()",
        _ => "",
    }
}

/// A package name as Kotlin source spells it: keywords among its parts escaped.
fn escape_package(p: &str) -> String {
    p.split('.')
        .map(|p| KEYWORDS.ident(p))
        .collect::<Vec<_>>()
        .join(".")
}

/// The query-handle class of the type Kotlin code names `reference` (`Item` →
/// `ItemPath`, `shop.Item` → `shop.ItemPath`).
fn path_class(reference: &str) -> String {
    match reference.rsplit_once('.') {
        Some((package, name)) => format!("{package}.{}Path", name.trim_matches('`')),
        None => format!("{}Path", reference.trim_matches('`')),
    }
}

/// A Kotlin string literal (escaping `\`, `"`, `$` and control characters).
fn string_lit(s: &str) -> String {
    let mut out = String::from("\"");
    for c in s.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '"' => out.push_str("\\\""),
            '$' => out.push_str("\\$"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if (c as u32) < 0x20 => {
                let _ = write!(out, "\\u{:04x}", c as u32);
            }
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

/// Writes the KDoc of a declared type (the schema's `lines`, or `fallback`) and
/// returns the name its declaration takes: `name`, escaped if it is a keyword
/// (references may qualify it instead: see [`Gen::names`]).
fn open_decl(o: &mut String, lines: &[String], fallback: &str, name: &str) -> String {
    kdoc(o, "", lines, fallback);
    KEYWORDS.ident(name)
}

fn kdoc(out: &mut String, indent: &str, lines: &[String], fallback: &str) {
    let lines: Vec<String> = if lines.is_empty() {
        vec![fallback.to_owned()]
    } else {
        lines
            .iter()
            .map(|l| l.trim_end().replace("*/", "* /"))
            .collect()
    };
    if lines.len() == 1 {
        let _ = writeln!(out, "{indent}/** {} */", lines[0].trim());
    } else {
        let _ = writeln!(out, "{indent}/**");
        for l in lines {
            let _ = writeln!(out, "{indent} * {}", l.trim());
        }
        let _ = writeln!(out, "{indent} */");
    }
}

/// How a scalar type appears in Kotlin and in the runtime's method names.
struct Sc {
    /// Kotlin type.
    kt: &'static str,
    /// `FbTable` reader stem: `i32` → `t.i32(slot, d)`, `t.i32OrNull`, `t.i32s`.
    read: &'static str,
    /// `FlatBufferReader` absolute reader (for structs) and how to convert its result.
    abs: (&'static str, &'static str),
    /// Builder method stem (`addInt`) and the conversion of a Kotlin value to it.
    add: &'static str,
    to_wire: &'static str,
    /// `createIntVector` etc.
    vec: &'static str,
    /// Struct writer (`FlatBufferBuilder.putI32`).
    put: &'static str,
    /// `dev.keel.Conv` member for filter values.
    conv: &'static str,
}

fn sc(t: ScalarType) -> Sc {
    use ScalarType::*;
    let (kt, read, abs, add, to_wire, vec, put, conv) = match t {
        Bool => (
            "Boolean",
            "bool",
            ("bool", ""),
            "addBool",
            "",
            "createBoolVector",
            "putBool",
            "bool",
        ),
        I8 => (
            "Byte",
            "i8",
            ("i8", ""),
            "addByte",
            "",
            "createByteVector",
            "putI8",
            "byte",
        ),
        U8 => (
            "UByte",
            "u8",
            ("i8", ".toUByte()"),
            "addByte",
            ".toByte()",
            "createUByteVector",
            "putI8",
            "ubyte",
        ),
        I16 => (
            "Short",
            "i16",
            ("i16", ""),
            "addShort",
            "",
            "createShortVector",
            "putI16",
            "short",
        ),
        U16 => (
            "UShort",
            "u16",
            ("i16", ".toUShort()"),
            "addShort",
            ".toShort()",
            "createUShortVector",
            "putI16",
            "ushort",
        ),
        I32 => (
            "Int",
            "i32",
            ("i32", ""),
            "addInt",
            "",
            "createIntVector",
            "putI32",
            "int",
        ),
        U32 => (
            "UInt",
            "u32",
            ("i32", ".toUInt()"),
            "addInt",
            ".toInt()",
            "createUIntVector",
            "putI32",
            "uint",
        ),
        I64 => (
            "Long",
            "i64",
            ("i64", ""),
            "addLong",
            "",
            "createLongVector",
            "putI64",
            "long",
        ),
        U64 => (
            "ULong",
            "u64",
            ("i64", ".toULong()"),
            "addLong",
            ".toLong()",
            "createULongVector",
            "putI64",
            "ulong",
        ),
        F32 => (
            "Float",
            "f32",
            ("f32", ""),
            "addFloat",
            "",
            "createFloatVector",
            "putF32",
            "float",
        ),
        F64 => (
            "Double",
            "f64",
            ("f64", ""),
            "addDouble",
            "",
            "createDoubleVector",
            "putF64",
            "double",
        ),
    };
    Sc {
        kt,
        read,
        abs,
        add,
        to_wire,
        vec,
        put,
        conv,
    }
}

fn float_lit(v: f64, t: ScalarType) -> String {
    let (k, suffix) = if t == ScalarType::F32 {
        ("Float", "f")
    } else {
        ("Double", "")
    };
    let names = ["NaN", "POSITIVE_INFINITY", "NEGATIVE_INFINITY"];
    naming::float_lit(v, t, &format!("{k}."), names, suffix)
}

/// A Kotlin literal of type `t` for `v` (a default or an enum value).
fn lit(v: &Value, t: ScalarType) -> String {
    use ScalarType::*;
    let i = match v {
        Value::Bool(b) => i64::from(*b),
        Value::Int(i) => *i,
        Value::Float(f) => {
            if t.is_float() {
                return float_lit(*f, t);
            }
            *f as i64
        }
        _ => 0,
    };
    match t {
        Bool => (i != 0).to_string(),
        F32 | F64 => float_lit(i as f64, t),
        I8 => format!("{}", i as i8),
        I16 => format!("{}", i as i16),
        I32 if i as i32 == i32::MIN => "Int.MIN_VALUE".into(),
        I32 => format!("{}", i as i32),
        I64 if i == i64::MIN => "Long.MIN_VALUE".into(),
        I64 => format!("{i}L"),
        U8 => format!("{}u", i as u8),
        U16 => format!("{}u", i as u16),
        U32 => format!("{}u", i as u32),
        U64 => format!("{}uL", i as u64),
    }
}

/// The same value as the builder's wire type (`Byte` for `ubyte`, …).
fn wire_lit(v: &Value, t: ScalarType) -> String {
    use ScalarType::*;
    let i = match v {
        Value::Bool(b) => i64::from(*b),
        Value::Int(i) => *i,
        Value::Float(f) if !t.is_float() => *f as i64,
        _ => 0,
    };
    match t {
        U8 => format!("({}).toByte()", i as u8 as i8),
        I8 => format!("({}).toByte()", i as i8),
        U16 => format!("({}).toShort()", i as u16 as i16),
        I16 => format!("({}).toShort()", i as i16),
        U32 => lit(&Value::Int(i64::from(i as u32 as i32)), I32),
        U64 => lit(&Value::Int(i), I64),
        _ => lit(v, t),
    }
}

struct Gen<'a> {
    /// How Kotlin code names each declared type, by (kind, index): its simple
    /// name, or its qualified name (`shop.Item`) when a type of another package
    /// has that simple name or that of its query-handle class.
    names: Names,
    /// The name of the schema object (`BlogSchema`).
    schema_obj: String,
    /// Namespace of the schema object.
    main_ns: String,
    /// The package that replaces the main namespace's (`--package`).
    package: Option<String>,
    stem: String,
    s: &'a Schema,
}

impl<'a> Gen<'a> {
    fn new(s: &'a Schema, stem: &str, package: Option<&str>) -> Result<Self, CodegenError> {
        let main_ns = s
            .root_table
            .map(|t| s.tables[t].namespace.clone())
            .or_else(|| {
                s.collections
                    .first()
                    .map(|c| s.tables[c.table].namespace.clone())
            })
            .or_else(|| s.tables.first().map(|t| t.namespace.clone()))
            .unwrap_or_default();
        let mut g = Gen {
            s,
            stem: stem.to_owned(),
            schema_obj: format!("{}Schema", upper_camel(stem)),
            names: Names::default(),
            main_ns,
            package: package.map(str::to_owned),
        };
        g.names = g.type_names()?;
        Ok(g)
    }

    /// The names of the declared types (see [`Gen::names`]). A type declares its
    /// own name and its query-handle class `…Path` in its namespace's package: two
    /// types of one package may not share either. A simple name that two packages
    /// declare is never written alone, since every generated file imports every
    /// package; a type without a package cannot be named otherwise, so it may not
    /// share one.
    fn type_names(&self) -> Result<Names, CodegenError> {
        let mut names = Names::default();
        names.reserve_in(
            &self.package_of(&self.main_ns),
            &self.schema_obj,
            "the schema object",
        );
        let declared: Vec<(DeclaredType<'_>, String)> = declared_types(self.s)
            .map(|t| {
                let package = self.package_of(t.namespace);
                (t, package)
            })
            .collect();
        let simple = |t: &DeclaredType<'_>| [t.name.to_owned(), format!("{}Path", t.name)];
        let mut packages: HashMap<String, BTreeSet<&str>> = HashMap::new();
        for (t, package) in &declared {
            for n in simple(t) {
                names.claim_in(package, &n, &t.full_name(), "Kotlin")?;
                packages.entry(n).or_default().insert(package);
            }
        }
        for (t, package) in &declared {
            let ambiguous = simple(t).iter().any(|n| packages[n].len() > 1);
            if ambiguous && package.is_empty() {
                let shares = |o: &DeclaredType<'_>| {
                    (o.kind, o.index) != (t.kind, t.index)
                        && simple(o).iter().any(|n| simple(t).contains(n))
                };
                let other = declared
                    .iter()
                    .find(|(o, _)| shares(o))
                    .map_or_else(String::new, |(o, _)| o.full_name());
                return Err(clash(&t.full_name(), &other, t.name, "Kotlin"));
            }
            let name = if ambiguous {
                self.qualified(t.namespace, t.name)
            } else {
                KEYWORDS.ident(t.name)
            };
            names.set(t.kind, t.index, name);
        }
        Ok(names)
    }

    /// `name` (a type's schema name) as Kotlin code in any package writes it:
    /// qualified by the package of namespace `ns` (`shop.Item`).
    fn qualified(&self, ns: &str, name: &str) -> String {
        let package = self.package_of(ns);
        if package.is_empty() {
            KEYWORDS.ident(name)
        } else {
            format!("{}.{}", escape_package(&package), KEYWORDS.ident(name))
        }
    }

    /// Kotlin type of one value of `ty` (no nullability).
    fn base(&self, ty: &FieldType) -> String {
        self.names
            .type_of(ty, |t| sc(t).kt, |e| format!("List<{e}>"))
    }

    /// Kotlin type and default of a table field.
    /// `equals`, `hashCode` and `toString` of a data class holding a `FloatArray`
    /// (a `(vector: N)` field): the generated ones would compare and print the
    /// array by identity; these compare its contents, so models stay values.
    fn array_equality(
        &self,
        o: &mut String,
        n: &str,
        bare: &str,
        live: &[&Field],
        plan: &TablePlan<'_>,
        retained: bool,
    ) {
        let mut eq = Vec::new();
        let mut hash = Vec::new();
        let mut show = Vec::new();
        for f in live {
            let p = KEYWORDS.ident(&lower_camel(&f.name));
            if plan.of(f).embedding() {
                eq.push(format!("{p}.contentEquals(other.{p})"));
                hash.push(format!("{p}.contentHashCode()"));
                show.push(format!(
                    "{}=${{{p}.contentToString()}}",
                    lower_camel(&f.name)
                ));
            } else {
                eq.push(format!("{p} == other.{p}"));
                hash.push(format!("{p}.hashCode()"));
                show.push(format!("{}=${{{p}}}", lower_camel(&f.name)));
            }
        }
        if retained {
            eq.push("keelRetained == other.keelRetained".into());
            hash.push("keelRetained.hashCode()".into());
        }
        // Kotlin's own scheme for data classes: h = 31 * h + next.
        let hash = hash
            .iter()
            .skip(1)
            .fold(hash[0].clone(), |acc, h| format!("31 * ({acc}) + {h}"));
        let _ = writeln!(
            o,
            "    override fun equals(other: Any?): Boolean =\n        this === other || (other is {n} && {})\n    override fun hashCode(): Int = {hash}\n    override fun toString(): String = \"{bare}({})\"\n",
            eq.join(" && "),
            show.join(", ")
        );
    }

    fn field_decl(&self, f: &FieldPlan<'_>) -> (String, Option<String>) {
        if f.embedding() {
            return ("FloatArray".into(), Some("floatArrayOf()".into()));
        }
        let base = self.base(&f.field.ty);
        let default = match &f.default {
            Unset::Absent => return (format!("{base}?"), Some("null".into())),
            Unset::Scalar(v, t) => lit(v, *t),
            Unset::Enum(e, raw, _) => self.enum_const(*e, *raw),
            // The string primary key has no default: the caller always gives it.
            Unset::Required => return (base, None),
            Unset::Empty => "emptyList()".into(),
        };
        (base, Some(default))
    }

    /// `Color.Green` for raw `v` (`Color.Unknown` when undeclared).
    fn enum_const(&self, e: usize, v: i64) -> String {
        let en = &self.s.enums[e];
        let n = self.names.enum_name(e);
        match enum_value(en, v) {
            Some(x) => format!("{n}.{}", KEYWORDS.ident(&x.name)),
            None => format!("{n}.{}", self.unknown_name(e)),
        }
    }

    fn unknown_name(&self, e: usize) -> &'static str {
        if self.s.enums[e].values.iter().any(|v| v.name == "Unknown") {
            "Unknown_"
        } else {
            "Unknown"
        }
    }

    fn run(self) -> Result<Vec<(String, String)>, CodegenError> {
        // Group every declaration by namespace: one file (and package) each.
        let mut by_ns: BTreeMap<String, Vec<(u8, usize)>> = BTreeMap::new();
        by_ns.entry(self.main_ns.clone()).or_default();
        for t in types_in_emit_order(self.s) {
            by_ns
                .entry(t.namespace.to_owned())
                .or_default()
                .push((t.kind, t.index));
        }
        let all_ns: Vec<String> = by_ns.keys().cloned().collect();
        let mut files = Vec::new();
        for (ns, items) in &by_ns {
            let mut o = String::new();
            let _ = writeln!(
                o,
                "// @generated by keel-schema {} (`keel codegen kotlin`) — do not edit.\n\
                 // Data classes, FlatBuffers encoding and typed query handles for the schema\n\
                 // in {}.FBS; they need keel's Kotlin layer (package dev.keel) and nothing else.\n\
                 @file:Suppress(\"unused\", \"RedundantVisibilityModifier\", \"NAME_SHADOWING\", \"UNUSED_ANONYMOUS_PARAMETER\")\n",
                env!("CARGO_PKG_VERSION"),
                self.schema_obj
            );
            let pkg = self.package_of(ns);
            if !pkg.is_empty() {
                let _ = writeln!(o, "package {}\n", escape_package(&pkg));
            }
            for other in &all_ns {
                let other = self.package_of(other);
                if other != pkg && !other.is_empty() {
                    let _ = writeln!(o, "import {}.*", escape_package(&other));
                }
            }
            let _ = writeln!(o, "import dev.keel.FbTable\nimport dev.keel.FlatBufferBuilder\nimport dev.keel.FlatBufferReader\n");
            if *ns == self.main_ns {
                self.schema_object(&mut o);
            }
            for &(kind, i) in items {
                match kind {
                    TABLE => self.table(&mut o, i, ns)?,
                    STRUCT => self.strukt(&mut o, i),
                    ENUM => self.enumm(&mut o, i),
                    _ => self.union(&mut o, i, ns),
                }
            }
            let file = upper_camel(&self.stem);
            // The main namespace's file is named after the schema; another
            // namespace's adds its own name, so no two files collide.
            let dir = pkg.replace('.', "/");
            let suffix = if ns.is_empty() || *ns == self.main_ns {
                String::new()
            } else {
                upper_camel(&ns.replace('.', "_"))
            };
            let rel = match dir.is_empty() {
                true => format!("{file}{suffix}.kt"),
                false => format!("{dir}/{file}{suffix}.kt"),
            };
            files.push((rel, o));
        }
        Ok(files)
    }

    fn schema_object(&self, o: &mut String) {
        let text = self.s.to_fbs();
        let _ = writeln!(
            o,
            "/** The schema these types were generated from: open the database with [FBS]. */\npublic object {} {{",
            self.schema_obj
        );
        let _ = writeln!(
            o,
            "    /** Canonical text of the schema (pass it to `Keel.openAsync`). */\n    public const val FBS: String ="
        );
        let lines: Vec<&str> = text.split_inclusive('\n').collect();
        for (i, l) in lines.iter().enumerate() {
            let sep = if i + 1 == lines.len() { "" } else { " +" };
            let _ = writeln!(o, "        {}{sep}", string_lit(l));
        }
        if lines.is_empty() {
            let _ = writeln!(o, "        \"\"");
        }
        let _ = writeln!(
            o,
            "\n    /** Fingerprint of [FBS] (`Schema::fingerprint` on keel's Rust side). */\n    public const val FINGERPRINT: Long = {}L\n\n    /** The `file_identifier`, written into every encoded object (null: none). */\n    public val FILE_IDENTIFIER: String? = {}\n}}\n",
            self.s.fingerprint() as i64,
            match &self.s.file_identifier {
                Some(id) => string_lit(id),
                None => "null".into(),
            }
        );
        if (0..self.s.tables.len())
            .any(|i| !self.enum_fields(&TablePlan::new(self.s, i)).is_empty())
        {
            // Drop the object's closing brace: the class goes inside it.
            o.truncate(o.trim_end().len() - 1);
            let _ = writeln!(o, "{RETAINED}}}\n");
        }
    }

    /// The enum fields (not vectors) of a table: their unknown values are kept
    /// in `keelRetained`.
    fn enum_fields<'p>(&self, plan: &'p TablePlan<'_>) -> Vec<&'p FieldPlan<'p>> {
        plan.fields
            .iter()
            .filter(|f| matches!(f.kind, Kind::Enum(..)))
            .collect()
    }

    fn enumm(&self, o: &mut String, i: usize) {
        let e = &self.s.enums[i];
        let n = self.names.enum_name(i).to_owned();
        let u = sc(e.underlying);
        let unknown = self.unknown_name(i);
        let decl = open_decl(o, &e.doc, &enum_doc_fallback(e), &e.name);
        let _ = writeln!(o, "public enum class {decl}(\n    /** The number stored in FlatBuffers. */\n    public val raw: {},\n) {{", u.kt);
        for v in &e.values {
            kdoc(o, "    ", &v.doc, &enum_value_doc_fallback(v));
            let _ = writeln!(
                o,
                "    {}({}),",
                KEYWORDS.ident(&v.name),
                lit(&Value::Int(v.value), e.underlying)
            );
        }
        let _ = writeln!(
            o,
            "    /**\n     * {UNKNOWN_VALUE_DOC}\n     * A decoded object keeps its number and writes it back unchanged; it cannot be\n     * used in a filter.\n     */\n    {unknown}({});\n",
            lit(&Value::Int(0), e.underlying)
        );
        let wide = matches!(
            e.underlying,
            ScalarType::I64 | ScalarType::U64 | ScalarType::U32
        );
        let (subject, suffix) = if wide {
            ("raw.toLong()", "L")
        } else {
            ("raw.toInt()", "")
        };
        let from_raw_arm = |v: &EnumVal| {
            let num = match e.underlying {
                ScalarType::U64 => format!("{}", v.value),
                ScalarType::I64 if v.value == i64::MIN => "Long.MIN_VALUE".into(),
                ScalarType::I32 if v.value == i64::from(i32::MIN) => "Int.MIN_VALUE".into(),
                _ => format!("{}", v.value),
            };
            let num = if num.ends_with("MIN_VALUE") {
                num
            } else {
                format!("{num}{suffix}")
            };
            format!("            {num} -> {}", KEYWORDS.ident(&v.name))
        };
        write_arms(
            o,
            &format!("    public companion object {{\n        /** The value for a raw number ([{unknown}] when the schema does not declare it). */\n        @JvmStatic\n        public fun fromRaw(raw: {}): {n} = when ({subject}) {{", u.kt),
            &e.values,
            from_raw_arm,
            &format!("            else -> {unknown}\n        }}\n"),
        );
        let _ = writeln!(
            o,
            "        /** Filter values: the raw number (an [{unknown}] value cannot be compared). */\n        @JvmField\n        public val conv: (({n}) -> dev.keel.ffi.Value) = dev.keel.Conv.enum({unknown}) {{ it.raw.toLong() }}\n    }}\n}}\n"
        );
    }

    fn strukt(&self, o: &mut String, i: usize) {
        let sd = &self.s.structs[i];
        let n = self.names.struct_name(i).to_owned();
        let decl = open_decl(o, &sd.doc, &struct_doc_fallback(sd), &sd.name);
        let _ = writeln!(o, "public data class {decl}(");
        for f in &sd.fields {
            kdoc(o, "    ", &f.doc, &format!("`{}`.", f.name));
            let def = match &f.ty {
                FieldType::Scalar(t) => lit(&t.zero(), *t),
                FieldType::Enum(e) => self.enum_const(*e, 0),
                FieldType::Struct(s) => format!("{}()", self.names.struct_name(*s)),
                _ => "TODO()".into(),
            };
            let _ = writeln!(
                o,
                "    public val {}: {} = {def},",
                KEYWORDS.ident(&lower_camel(&f.name)),
                self.base(&f.ty)
            );
        }
        let _ = writeln!(o, ") {{\n    public companion object {{\n        /** Size of the inline FlatBuffers layout in bytes. */\n        public const val SIZE: Int = {}\n        /** Alignment of the inline layout in bytes. */\n        public const val ALIGN: Int = {}\n", sd.size, sd.align);
        // read
        let _ = writeln!(o, "        /** Reads the struct at [pos] (bounds-checked). */\n        @JvmStatic\n        public fun read(r: FlatBufferReader, pos: Int): {n} {{\n            r.check(pos, SIZE)\n            return {n}(");
        for f in &sd.fields {
            let at = format!("pos + {}", f.offset);
            let expr = match &f.ty {
                FieldType::Scalar(t) => {
                    let s = sc(*t);
                    format!("r.{}({at}){}", s.abs.0, s.abs.1)
                }
                FieldType::Enum(e) => {
                    let s = sc(self.s.enums[*e].underlying);
                    format!(
                        "{}.fromRaw(r.{}({at}){})",
                        self.names.enum_name(*e),
                        s.abs.0,
                        s.abs.1
                    )
                }
                FieldType::Struct(x) => format!("{}.read(r, {at})", self.names.struct_name(*x)),
                _ => "TODO()".into(),
            };
            let _ = writeln!(
                o,
                "                {} = {expr},",
                KEYWORDS.ident(&lower_camel(&f.name))
            );
        }
        let _ = writeln!(o, "            )\n        }}\n");
        // write
        let _ = writeln!(o, "        /** Writes [v] into `a[at until at + SIZE]` (zeroed by the caller: padding stays 0). */\n        @JvmStatic\n        public fun write(v: {n}, a: ByteArray, at: Int) {{");
        for f in &sd.fields {
            let fname = KEYWORDS.ident(&lower_camel(&f.name));
            let at = format!("at + {}", f.offset);
            let line = match &f.ty {
                FieldType::Scalar(t) => {
                    let s = sc(*t);
                    format!(
                        "FlatBufferBuilder.{}(a, {at}, v.{fname}{})",
                        s.put, s.to_wire
                    )
                }
                FieldType::Enum(e) => {
                    let s = sc(self.s.enums[*e].underlying);
                    format!(
                        "FlatBufferBuilder.{}(a, {at}, v.{fname}.raw{})",
                        s.put, s.to_wire
                    )
                }
                FieldType::Struct(x) => {
                    format!("{}.write(v.{fname}, a, {at})", self.names.struct_name(*x))
                }
                _ => String::new(),
            };
            let _ = writeln!(o, "            {line}");
        }
        let _ = writeln!(o, "        }}\n    }}\n}}\n");
        // path class
        let _ = writeln!(o, "/** Query handles for the fields of a [{n}] inside objects of [O]. */\npublic class {}Path<O>(path: String) : dev.keel.FieldRef<O>(path) {{", decl.trim_matches('`'));
        for f in &sd.fields {
            let prop = KEYWORDS.ident(&lower_camel(&f.name));
            let (ty, ctor) = self.handle(&f.ty, &format!("\"$keelPath.{}\"", f.name), "O");
            let _ = writeln!(
                o,
                "    /** `{}`. */\n    public val {prop}: {ty} get() = {ctor}",
                f.name
            );
        }
        let _ = writeln!(o, "}}\n");
    }

    /// `Post.authorRef: dev.keel.Relation<Post, Author>` in the companion, for
    /// each to-one reference, `dev.keel.ManyRelation` for each to-many one and
    /// each inverse (`Author.postsRef`): the plan's
    /// `handles` (`db.fetch(Post).including(Post.authorRef)`,
    /// layer/Relations.kt). A getter: the other companion may not be
    /// initialised yet when this one is.
    fn relation_handles(&self, o: &mut String, owner: &str, handles: &[HandlePlan<'_>]) {
        for h in handles {
            let other = self.names.table_name(h.other);
            let mut prop = format!("{}Ref", lower_camel(h.name));
            if RESERVED.contains(&prop.as_str()) {
                prop.push('_');
            }
            let handle = if h.many() { "ManyRelation" } else { "Relation" };
            let _ = writeln!(
                o,
                "        /** {} */\n        public val {}: dev.keel.{handle}<{owner}, {other}> get() = dev.keel.{handle}({}, {owner}, {other})",
                h.doc(&format!("[{other}]")),
                KEYWORDS.ident(&prop),
                string_lit(h.name)
            );
        }
    }

    /// Handle type and constructor for a field of type `ty` at `path` (a Kotlin
    /// string expression), in objects of `owner`.
    fn handle(&self, ty: &FieldType, path: &str, owner: &str) -> (String, String) {
        match ty {
            FieldType::Scalar(t) => {
                let s = sc(*t);
                (
                    format!("dev.keel.Field<{owner}, {}>", s.kt),
                    format!("dev.keel.Field({path}, dev.keel.Conv.{})", s.conv),
                )
            }
            FieldType::Enum(e) => {
                let n = self.names.enum_name(*e);
                (
                    format!("dev.keel.Field<{owner}, {n}>"),
                    format!("dev.keel.Field({path}, {n}.conv)"),
                )
            }
            FieldType::String => (
                format!("dev.keel.Field<{owner}, String>"),
                format!("dev.keel.Field({path}, dev.keel.Conv.string)"),
            ),
            FieldType::Struct(i) | FieldType::Table(i) | FieldType::Union(i) => {
                let name = match ty {
                    FieldType::Struct(_) => self.names.struct_name(*i),
                    FieldType::Table(_) => self.names.table_name(*i),
                    _ => self.names.union_name(*i),
                };
                let n = path_class(name);
                (format!("{n}<{owner}>"), format!("{n}({path})"))
            }
            FieldType::Vector(_) => (
                format!("dev.keel.FieldRef<{owner}>"),
                format!("dev.keel.FieldRef({path})"),
            ),
        }
    }

    /// How a union member's table type is written inside the union's sealed
    /// interface, where the member's own data class shadows the table's name.
    fn member_type(&self, table: usize) -> String {
        let t = &self.s.tables[table];
        self.qualified(&t.namespace, &t.name)
    }

    /// The package (dotted, unescaped; `""` for none) of the declarations of
    /// namespace `ns`: see [`generate_in_package`].
    fn package_of(&self, ns: &str) -> String {
        match &self.package {
            None => ns.to_owned(),
            Some(p) if ns.is_empty() || ns == self.main_ns => p.clone(),
            Some(p) => format!("{p}.{ns}"),
        }
    }

    /// Union member class names: the member name, unless that would shadow the
    /// member table's own name in a file without a package (Kotlin could not name it).
    fn member_class(&self, u: usize, m: &UnionMemberDef) -> String {
        let _ = u;
        if self.s.tables[m.table].namespace.is_empty() && m.name == self.s.tables[m.table].name {
            KEYWORDS.ident(&format!("{}Member", m.name))
        } else if m.name == "Unknown" {
            "Unknown_".into()
        } else {
            KEYWORDS.ident(&m.name)
        }
    }

    /// How `keelRead` reads field `fp` from the table `t`.
    fn read_expr(&self, fp: &FieldPlan<'_>) -> String {
        let slot = fp.slot;
        match fp.read() {
            Read::Scalar(ty, None) => format!("t.{}OrNull({slot})", sc(ty).read),
            Read::Scalar(ty, Some(d)) => format!("t.{}({slot}, {})", sc(ty).read, lit(d, ty)),
            Read::Enum(e, u, default) => {
                let (read, en_n) = (sc(u).read, self.names.enum_name(e));
                match default {
                    None => format!("t.{read}OrNull({slot})?.let {{ {en_n}.fromRaw(it) }}"),
                    Some(d) => format!("{en_n}.fromRaw(t.{read}({slot}, {}))", lit(d, u)),
                }
            }
            Read::String { required: true } => {
                format!("t.requiredString({slot}, {})", string_lit(fp.name()))
            }
            Read::String { required: false } => format!("t.string({slot})"),
            Read::Struct(x) => {
                let sn = self.names.struct_name(x);
                format!("t.struct({slot}, {sn}.SIZE).let {{ if (it < 0) null else {sn}.read(t.r, it) }}")
            }
            Read::Table(x) => {
                format!("t.table({slot})?.let {{ {}.keelRead(it) }}", self.names.table_name(x))
            }
            Read::Union(u) => format!(
                "t.unionTag({slot}).let {{ tag ->\n                if (tag == 0) null else t.table({slot})?.let {{ m ->\n                    when (tag) {{\n{}\n                    }}\n                }}\n            }}",
                self.union_read_arms(u, "                        ")
            ),
            Read::Vector(_) if fp.embedding() => format!("t.f32Array({slot})"),
            Read::Vector(elem) => match elem {
                Elem::Bytes => format!("t.{}s({slot})", sc(ScalarType::U8).read),
                Elem::Scalar(ty) => format!("t.{}s({slot})", sc(ty).read),
                Elem::Enum(e, u) => {
                    let sv = sc(u);
                    format!(
                        "t.vectorOf({slot}, {}) {{ {}.fromRaw(t.r.{}(it){}) }}",
                        u.size(),
                        self.names.enum_name(e),
                        sv.abs.0,
                        sv.abs.1
                    )
                }
                Elem::String => format!("t.strings({slot})"),
                Elem::Table(x) => {
                    format!("t.tables({slot}) {{ {}.keelRead(it) }}", self.names.table_name(x))
                }
                Elem::Struct(x) => {
                    let sn = self.names.struct_name(x);
                    format!("t.vectorOf({slot}, {sn}.SIZE) {{ {sn}.read(t.r, it) }}")
                }
                Elem::Union(u) => format!(
                    "t.unions({slot}) {{ tag, m ->\n                when (tag) {{\n{}\n                }}\n            }}",
                    self.union_read_arms(u, "                    ")
                ),
            },
        }
    }

    /// The `when (tag)` arms that read union `u`'s member from the table `m`, each
    /// line indented by `indent`: one per member, then `else` for a tag this schema
    /// does not declare. A union field and a vector of unions read through the same arms.
    fn union_read_arms(&self, u: usize, indent: &str) -> String {
        let un = self.names.union_name(u);
        let mut arms = String::new();
        for m in &self.s.unions[u].members {
            let _ = writeln!(
                arms,
                "{indent}{} -> {un}.{}({}.keelRead(m))",
                m.tag,
                self.member_class(u, m),
                self.names.table_name(m.table)
            );
        }
        let _ = write!(arms, "{indent}else -> {un}.Unknown(tag.toUByte())");
        arms
    }

    fn union(&self, o: &mut String, i: usize, ns: &str) {
        let _ = ns;
        let u = &self.s.unions[i];
        let n = self.names.union_name(i).to_owned();
        let decl = open_decl(o, &u.doc, &union_doc_fallback(u), &u.name);
        let _ = writeln!(o, "public sealed interface {decl} {{\n    /** The FlatBuffers type tag of this member. */\n    public val tag: UByte\n");
        for m in &u.members {
            let c = self.member_class(i, m);
            let _ = writeln!(
                o,
                "    /** {} */\n    public data class {c}(public val value: {}) : {n} {{\n        override val tag: UByte get() = {}u\n    }}\n",
                member_doc(m),
                self.member_type(m.table),
                m.tag
            );
        }
        let _ = writeln!(
            o,
            "    /** {UNKNOWN_MEMBER_DOC} */\n    public data class Unknown(override val tag: UByte) : {n}\n}}\n"
        );
        let _ = writeln!(o, "/** Query handles for a [{n}] inside objects of [O]: `isImage()`, `image.url`. */\npublic class {}Path<O>(path: String) : dev.keel.FieldRef<O>(path) {{", decl.trim_matches('`'));
        for m in &u.members {
            let tn = path_class(self.names.table_name(m.table));
            let _ = writeln!(
                o,
                "    /** The union holds a `{}`. */\n    public fun is{}(): dev.keel.Predicate<O> = dev.keel.Predicate.unionIs(keelPath, {})\n    /** Fields of the `{}` member (absent unless the union holds one). */\n    public val {}: {tn}<O> get() = {tn}(\"$keelPath.{}\")",
                m.name,
                upper_camel(&m.name),
                string_lit(&m.name),
                m.name,
                KEYWORDS.ident(&lower_camel(&m.name)),
                m.name
            );
        }
        let _ = writeln!(o, "}}\n");
    }

    fn table(&self, o: &mut String, i: usize, ns: &str) -> Result<(), CodegenError> {
        let _ = ns;
        let s = self.s;
        let t = &s.tables[i];
        let n = self.names.table_name(i).to_owned();
        // (The resolver has checked the key: strings, or scalars and enums that are
        // not optional.)
        let plan = TablePlan::new(s, i);
        let live = plan.live();
        let collection = plan.ops.collection;
        let key_fields = plan.key_fields();

        // the data class
        let decl = open_decl(o, &t.doc, &table_doc_fallback(t, collection), &t.name);
        let bare = decl.trim_matches('`').to_owned();
        let iface = if collection.is_some() {
            " : dev.keel.KeelObject"
        } else {
            ""
        };
        // Kotlin has no data class without properties: a table with no (live) field
        // is a plain class whose instances are all equal.
        let class_kw = if live.is_empty() {
            "class"
        } else {
            "data class"
        };
        let _ = writeln!(o, "public {class_kw} {decl}(");
        for f in &live {
            kdoc(o, "    ", &f.doc, &format!("`{}`.", f.name));
            let (ty, def) = self.field_decl(plan.of(f));
            let _ = match def {
                Some(d) => writeln!(
                    o,
                    "    public val {}: {ty} = {d},",
                    KEYWORDS.ident(&lower_camel(&f.name))
                ),
                None => writeln!(
                    o,
                    "    public val {}: {ty},",
                    KEYWORDS.ident(&lower_camel(&f.name))
                ),
            };
        }
        let enum_fields = self.enum_fields(&plan);
        if !enum_fields.is_empty() {
            let so = &self.schema_obj;
            let _ = writeln!(o, "    /** Unknown enum values read from the bytes, written back unchanged ([{so}.Retained]). */\n    public val keelRetained: {so}.Retained = {so}.Retained.NONE,");
        }
        let _ = writeln!(o, "){iface} {{");
        if live.is_empty() {
            let _ = writeln!(o, "    override fun equals(other: Any?): Boolean = other is {n}\n    override fun hashCode(): Int = {}\n    override fun toString(): String = \"{bare}()\"\n", t.name.len());
        }
        if live.iter().any(|f| plan.of(f).embedding()) {
            self.array_equality(o, &n, &bare, &live, &plan, !enum_fields.is_empty());
        }
        if collection.is_some() {
            let _ = writeln!(o, "    override fun keelModel(): dev.keel.KeelModel<{n}, *> = Companion\n\n    /** FlatBuffers bytes of this object (with the schema's file identifier). */\n    override fun encode(): ByteArray {{");
        } else {
            let _ = writeln!(o, "    /** FlatBuffers bytes of this object as a root table (with the schema's file identifier). */\n    public fun encode(): ByteArray {{");
        }
        let _ = writeln!(
            o,
            "        val b = FlatBufferBuilder.pooled()\n        return b.finish(keelWrite(b), {}.FILE_IDENTIFIER)\n    }}\n",
            self.schema_obj
        );

        // keelWrite: children first (key strings first: see `key_strings_first`), then
        // the table.
        let _ = writeln!(o, "    /** Writes this table into [b]; returns its offset. */\n    public fun keelWrite(b: FlatBufferBuilder): Int {{");
        for fp in plan.child_plans() {
            let fname = KEYWORDS.ident(&lower_camel(fp.name()));
            let var = format!("o{}", upper_camel(fp.name()));
            let expr = match fp.kind {
                Kind::Table(_) => format!("{fname}?.keelWrite(b) ?: 0"),
                Kind::String if fp.key_string() => format!("b.createString({fname})"),
                Kind::String => format!("{fname}?.let {{ b.createString(it) }} ?: 0"),
                Kind::Union(u) => {
                    let mut e = format!("when (val v = {fname}) {{\n");
                    for m in &s.unions[u].members {
                        let _ = writeln!(
                            e,
                            "            is {}.{} -> v.value.keelWrite(b)",
                            self.names.union_name(u),
                            self.member_class(u, m)
                        );
                    }
                    e.push_str("            else -> 0\n        }");
                    e
                }
                Kind::Vector(Elem::Union(u)) => {
                    // Unknown members have no table to write: they are left out.
                    let un = self.names.union_name(u);
                    let arms: String = s.unions[u]
                        .members
                        .iter()
                        .map(|m| {
                            format!(
                                "is {un}.{} -> v.value.keelWrite(b); ",
                                self.member_class(u, m)
                            )
                        })
                        .collect();
                    let c = upper_camel(fp.name());
                    let _ = writeln!(
                        o,
                        "        val k{c} = {fname}.filter {{ it !is {un}.Unknown }}\n        val t{c} = if (k{c}.isEmpty()) 0 else b.createUByteVector(k{c}.map {{ it.tag }})\n        val {var} = if (k{c}.isEmpty()) 0 else b.createOffsetVector(IntArray(k{c}.size) {{ when (val v = k{c}[it]) {{ {arms}else -> 0 }} }})"
                    );
                    continue;
                }
                Kind::Vector(elem) => {
                    let create = match elem {
                        Elem::Bytes => format!("b.{}({fname})", sc(ScalarType::U8).vec),
                        Elem::Scalar(t) => format!("b.{}({fname})", sc(t).vec),
                        Elem::Enum(_, u) => format!("b.{}({fname}.map {{ it.raw }})", sc(u).vec),
                        Elem::String => format!(
                            "b.createOffsetVector(IntArray({fname}.size) {{ b.createString({fname}[it]) }})"
                        ),
                        Elem::Table(_) => format!(
                            "b.createOffsetVector(IntArray({fname}.size) {{ {fname}[it].keelWrite(b) }})"
                        ),
                        Elem::Struct(x) => {
                            let sn = self.names.struct_name(x);
                            format!("b.createStructVector({fname}, {sn}.SIZE, {sn}.ALIGN) {{ v, a, at -> {sn}.write(v, a, at) }}")
                        }
                        Elem::Union(_) => unreachable!("matched above"),
                    };
                    // empty vectors are left out: absent reads as empty
                    format!("if ({fname}.isEmpty()) 0 else {create}")
                }
                _ => continue,
            };
            let _ = writeln!(o, "        val {var} = {expr}");
        }
        let _ = writeln!(o, "        b.startTable({})", plan.table.slot_count());
        for fp in plan.vtable_plans() {
            let fname = KEYWORDS.ident(&lower_camel(fp.name()));
            let var = format!("o{}", upper_camel(fp.name()));
            let (slot, tag) = (fp.slot, fp.tag_slot.unwrap_or(0));
            // scalars and enums: the builder's wire type, and the value as it (`v`
            // standing for the property or `it`); an `Unknown` enum value writes
            // the number it was read with
            let scalar = match fp.kind {
                Kind::Scalar(t) => {
                    let w = sc(t);
                    Some((t, w.add, format!("$v{}", w.to_wire)))
                }
                Kind::Enum(e, u) => {
                    let (w, en, unknown) = (sc(u), self.names.enum_name(e), self.unknown_name(e));
                    let raw =
                        format!("keelRetained.raw({slot}, $v.raw.toLong(), $v == {en}.{unknown})");
                    Some((u, w.add, raw + long_to_wire(w.add)))
                }
                _ => None,
            };
            let line = match (scalar, &fp.default) {
                (Some((_, add, v)), Unset::Absent) => {
                    format!("{fname}?.let {{ b.{add}Always({slot}, {}) }}", v.replace("$v", "it"))
                }
                (Some((t, add, v)), _) => format!(
                    "b.{add}({slot}, {}, {})",
                    v.replace("$v", &fname),
                    wire_lit(&fp.field.default, t)
                ),
                (None, _) => match fp.kind {
                    Kind::Struct(x) => {
                        let sn = self.names.struct_name(x);
                        format!("{fname}?.let {{ v -> b.addStruct({slot}, {sn}.SIZE, {sn}.ALIGN) {{ a, at -> {sn}.write(v, a, at) }} }}")
                    }
                    Kind::String if fp.key_string() => format!("b.addOffset({slot}, {var})"),
                    Kind::Vector(Elem::Union(_)) => format!(
                        "if ({var} != 0) {{\n            b.addOffset({tag}, t{})\n            b.addOffset({slot}, {var})\n        }}",
                        upper_camel(fp.name())
                    ),
                    Kind::Union(_) => format!(
                        "if ({var} != 0) {{\n            b.addByteAlways({tag}, {fname}!!.tag.toByte())\n            b.addOffset({slot}, {var})\n        }}"
                    ),
                    _ => format!("if ({var} != 0) b.addOffset({slot}, {var})"),
                },
            };
            let _ = writeln!(o, "        {line}");
        }
        let _ = writeln!(o, "        return b.endTable()\n    }}\n");

        // companion: read, decode, model, handles
        let key_ty = match key_fields.len() {
            0 => "Long".to_owned(),
            1 => self.base(&key_fields[0].ty),
            _ => format!("{n}.Key"),
        };
        if key_fields.len() > 1 {
            let params: String = key_fields
                .iter()
                .map(|k| {
                    let (name, ty) = (KEYWORDS.ident(&lower_camel(&k.name)), self.base(&k.ty));
                    format!("        public val {name}: {ty},\n")
                })
                .collect();
            let _ = writeln!(
                o,
                "    /** The composite primary key of a [{n}]. */\n    public data class Key(\n{params}    )\n"
            );
        }
        if let Some(c) = collection {
            let _ = writeln!(o, "    /** The `{}` collection: its handles for queries, and `db.get({bare}, key)`. */\n    public companion object : dev.keel.KeelModel<{n}, {key_ty}> {{\n        /** The collection name. */\n        public const val COLLECTION: String = {}\n        override val collectionName: String get() = COLLECTION\n        override val schemaFbs: String get() = {}.FBS\n        override fun encode(value: {n}): ByteArray = value.encode()\n        override fun decode(bytes: ByteArray): {n} = decodeFrom(bytes)", c.name, string_lit(&c.name), self.schema_obj);
            let conv = |f: &Field, e: &str| -> String {
                match &f.ty {
                    FieldType::Scalar(t) => format!("dev.keel.Conv.{}({e})", sc(*t).conv),
                    FieldType::Enum(x) => format!("{}.conv({e})", self.names.enum_name(*x)),
                    _ => format!("dev.keel.Conv.string({e})"),
                }
            };
            match key_fields.len() {
                0 => {
                    let _ = writeln!(o, "        /** Keyed by rowid: an object does not carry its key. */\n        override fun keyOf(value: {n}): Long? = null\n        override fun keyValues(key: Long): List<dev.keel.ffi.Value> = listOf(dev.keel.ffi.Value.Integer(key))");
                }
                1 => {
                    let k = key_fields[0];
                    let _ = writeln!(
                        o,
                        "        override fun keyOf(value: {n}): {key_ty} = value.{}\n        override fun keyValues(key: {key_ty}): List<dev.keel.ffi.Value> = listOf({})",
                        KEYWORDS.ident(&lower_camel(&k.name)),
                        conv(k, "key")
                    );
                }
                _ => {
                    let args: Vec<String> = key_fields
                        .iter()
                        .map(|k| format!("value.{}", KEYWORDS.ident(&lower_camel(&k.name))))
                        .collect();
                    let vals: Vec<String> = key_fields
                        .iter()
                        .map(|k| conv(k, &format!("key.{}", KEYWORDS.ident(&lower_camel(&k.name)))))
                        .collect();
                    let _ = writeln!(
                        o,
                        "        override fun keyOf(value: {n}): {key_ty} = Key({})\n        override fun keyValues(key: {key_ty}): List<dev.keel.ffi.Value> = listOf({})",
                        args.join(", "),
                        vals.join(", ")
                    );
                }
            }
            o.push('\n');
            for f in &live {
                let mut prop = lower_camel(&f.name);
                if RESERVED.contains(&prop.as_str()) {
                    prop.push('_');
                }
                let (ty, ctor) = self.handle(&f.ty, &string_lit(&f.name), &n);
                let _ = writeln!(
                    o,
                    "        /** Query handle for `{}`. */\n        @JvmField public val {}: {ty} = {ctor}",
                    f.name,
                    KEYWORDS.ident(&prop)
                );
            }
            self.relation_handles(o, &n, &handles(s, &plan));
            o.push('\n');
        } else {
            let _ = writeln!(o, "    public companion object {{\n        /** The object in [bytes] (a `{}` root table); malformed bytes throw `KeelException.InvalidObject`. */\n        @JvmStatic public fun decode(bytes: ByteArray): {n} = decodeFrom(bytes)\n", t.full_name());
        }
        let _ = writeln!(
            o,
            "        private fun decodeFrom(bytes: ByteArray): {n} = try {{\n            keelRead(FlatBufferReader.root(bytes, {}))\n        }} catch (e: dev.keel.ffi.KeelException) {{\n            throw e\n        }} catch (e: RuntimeException) {{\n            // the reader checks every position; this is a last line of defence\n            throw dev.keel.ffi.KeelException.InvalidObject(\"{}: \" + e)\n        }}\n",
            string_lit(&t.full_name()),
            t.full_name()
        );
        let _ = writeln!(o, "        /** Reads a `{}` table. */\n        @JvmStatic public fun keelRead(t: FbTable): {n} = {n}(", t.name);
        for f in &live {
            let expr = self.read_expr(plan.of(f));
            let _ = writeln!(
                o,
                "            {} = {expr},",
                KEYWORDS.ident(&lower_camel(&f.name))
            );
        }
        if !enum_fields.is_empty() {
            let kept: Vec<String> = enum_fields
                .iter()
                .map(|fp| {
                    let Kind::Enum(e, u) = fp.kind else {
                        unreachable!("enum_fields holds enums")
                    };
                    let en = self.names.enum_name(e);
                    format!(
                        "\n                .keep({1}, t.{0}OrNull({1})?.takeIf {{ {en}.fromRaw(it) == {en}.{2} }}?.toLong())",
                        sc(u).read,
                        fp.slot,
                        self.unknown_name(e)
                    )
                })
                .collect();
            // Allocates only for an unknown value: a read of known ones keeps `NONE`.
            let _ = writeln!(
                o,
                "            keelRetained = {}.Retained.NONE{},",
                self.schema_obj,
                kept.concat()
            );
        }
        let _ = writeln!(o, "        )\n    }}\n}}\n");

        // path class (nested tables and union members)
        let _ = writeln!(o, "/** Query handles for the fields of a [{n}] inside objects of [O]. */\npublic class {bare}Path<O>(path: String) : dev.keel.FieldRef<O>(path) {{");
        for f in &live {
            let (ty, ctor) = self.handle(&f.ty, &format!("\"$keelPath.{}\"", f.name), "O");
            let _ = writeln!(
                o,
                "    /** `{}`. */\n    public val {}: {ty} get() = {ctor}",
                f.name,
                KEYWORDS.ident(&lower_camel(&f.name))
            );
        }
        let _ = writeln!(o, "}}\n");
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::codegen::swift;
    use crate::codegen::testing::{
        assert_contains_all, blog, example, photos, scratch_dir, test_schema,
    };

    fn gen(s: &Schema) -> String {
        let files = generate(s, "blog").unwrap();
        files.into_iter().map(|(_, t)| t).collect()
    }

    #[test]
    fn blog_model_covers_every_field_kind() {
        let s = blog();
        let files = generate(&s, "blog").unwrap();
        assert_eq!(files.len(), 1);
        assert_eq!(files[0].0, "blog/Blog.kt");
        let k = &files[0].1;
        assert!(k.contains("package blog\n"), "{k}");
        assert_contains_all(
            k,
            &[
            "public data class Post(",
            "public val id: String,",
            "public val priority: Int = 1,",
            "public val color: Color = Color.Green,",
            "public val title: String? = null,",
            "public val author: Author? = null,",
            "public val content: Content? = null,",
            "public val pos: Vec2? = null,",
            "public val tags: List<String> = emptyList(),",
            "public val points: List<Vec2> = emptyList(),",
            "public val attachments: List<Image> = emptyList(),",
            "public val colors: List<Color> = emptyList(),",
            "public val rating: Double? = null,",
            "public val published: Boolean = true,",
            "public val views: ULong = 0uL,",
            "public val delta: Byte = -3,",
            "public val flags: List<UByte> = emptyList(),",
            "public enum class Color(",
            "Unknown(0);",
            "public sealed interface Content {",
            "public data class Image(public val value: blog.Image) : Content {",
            "public data class Rect(",
            "public val origin: Vec2 = Vec2(),",
            "public companion object : dev.keel.KeelModel<Post, String> {",
            "public const val COLLECTION: String = \"blog.Post\"",
            "@JvmField public val priority: dev.keel.Field<Post, Int> = dev.keel.Field(\"priority\", dev.keel.Conv.int)",
            "@JvmField public val author: AuthorPath<Post> = AuthorPath(\"author\")",
            "public val name: dev.keel.Field<O, String> get() = dev.keel.Field(\"$keelPath.name\", dev.keel.Conv.string)",
            "public fun isImage(): dev.keel.Predicate<O> = dev.keel.Predicate.unionIs(keelPath, \"Image\")",
            "public object BlogSchema {",
            "public val FILE_IDENTIFIER: String? = \"BLOG\"",
            "b.startTable(21)",
            ],
        );
        // deprecated fields are not generated, their slot stays reserved
        assert!(!k.contains("oldScore"));
    }

    /// Kotlin names fields and the schema object as Swift does, from
    /// the one naming plan (`codegen_shared::lower_camel` / `upper_camel`): a
    /// capitalised or hyphenated name gets the same spelling in both, and a stem
    /// with a `-` still makes a Kotlin identifier.
    #[test]
    fn names_follow_the_shared_plan() {
        let s = test_schema(
            "enum Code: byte { HTTP_OK, URLPath } \
             table T { HTTP_OK: int; URLPath: int; old_score: int; code: Code; } root_type T;",
        );
        let files = generate(&s, "api-v2").unwrap();
        let k: String = files.iter().map(|(_, t)| t.as_str()).collect();
        assert_contains_all(
            &k,
            &[
                "public object ApiV2Schema {",
                "public val httpOk: Int = 0,",
                "public val urlPath: Int = 0,",
                "public val oldScore: Int = 0,",
            ],
        );
        assert!(
            files.iter().all(|(name, _)| name.ends_with("ApiV2.kt")),
            "{files:?}"
        );
        let swift = swift::generate(&s, "api-v2").unwrap();
        for name in ["httpOk", "urlPath", "oldScore", "ApiV2Schema"] {
            assert!(
                swift.contains(name),
                "Swift spells {name} the same: {swift}"
            );
        }
    }

    /// References get a relation handle in the companion, to-many ones a
    /// `ManyRelation` (plain fields none).
    #[test]
    fn references_get_relation_handles() {
        let k = gen(&example("relations.fbs"));
        assert!(k.contains("public val authorRef: dev.keel.Relation<Post, Author> get() = dev.keel.Relation(\"author\", Post, Author)"), "{k}");
        assert!(k.contains("public val editorRef: dev.keel.Relation<Post, Author>"));
        assert!(k.contains("public val postRef: dev.keel.Relation<Comment, Post>"));
        assert!(k.contains("public val tagsRef: dev.keel.ManyRelation<Post, Tag> get() = dev.keel.ManyRelation(\"tags\", Post, Tag)"), "{k}");
        assert!(k.contains("public val postsRef: dev.keel.ManyRelation<Author, Post> get() = dev.keel.ManyRelation(\"posts\", Author, Post)"), "{k}");
        assert!(!gen(&blog()).contains("dev.keel.Relation"));
    }

    #[test]
    fn schema_text_is_embedded_and_escaped() {
        let s = blog();
        let k = gen(&s);
        let text = s.to_fbs();
        let first = text.lines().next().unwrap();
        assert!(k.contains(&string_lit(&format!("{first}\n"))), "{k}");
        assert_eq!(string_lit("a\"$\\\n"), "\"a\\\"\\$\\\\\\n\"");
    }

    #[test]
    fn composite_and_rowid_keys_and_unsigned_defaults() {
        let s = test_schema(
            r#"namespace t;
               enum Level : ubyte { Low = 1, High = 200 }
               table Pair (entity) { a: string (primary); b: uint (primary); lvl: Level = High;
                                     big: ulong = 18446744073709551615; min: long = -9223372036854775808;
                                     f: float = 0.5; n: float = nan; opt: short = null; opt_e: Level = null; }
               table Log (entity) { text: string; }
               root_type Pair;"#,
        );
        let k = gen(&s);
        assert_contains_all(
            &k,
            &[
            "public companion object : dev.keel.KeelModel<Pair, Pair.Key> {",
            "public data class Key(",
            "public val b: UInt,",
            "override fun keyValues(key: Pair.Key): List<dev.keel.ffi.Value> = listOf(dev.keel.Conv.string(key.a), dev.keel.Conv.uint(key.b))",
            "public companion object : dev.keel.KeelModel<Log, Long> {",
            "public val lvl: Level = Level.High,",
            "High(200u),",
            // an unknown value writes back the number it was read with
            "b.addByte(2, keelRetained.raw(2, lvl.raw.toLong(), lvl == Level.Unknown).toByte(), (-56).toByte())",
            "optE?.let { b.addByteAlways(8, keelRetained.raw(8, it.raw.toLong(), it == Level.Unknown).toByte()) }",
            "public val keelRetained: BlogSchema.Retained = BlogSchema.Retained.NONE,",
            ".keep(2, t.u8OrNull(2)?.takeIf { Level.fromRaw(it) == Level.Unknown }?.toLong())",
            "public val big: ULong = 18446744073709551615uL,",
            "public val min: Long = Long.MIN_VALUE,",
            "public val f: Float = 0.5f,",
            "public val n: Float = Float.NaN,",
            "public val opt: Short? = null,",
            "optE?.let { b.addByteAlways(",
            "t.i16OrNull(",
            ],
        );
    }

    #[test]
    fn key_strings_are_written_first() {
        // The key is neither the first field nor alone: both key strings must be
        // created before any other child, in key order.
        let s = test_schema(
            r#"namespace t;
               table Inner { s: string; }
               table Doc (entity) { title: string; inner: Inner; tags: [string];
                                    lang: string (primary); n: int; slug: string (primary); }
               root_type Doc;"#,
        );
        let k = gen(&s);
        let at = |needle: &str| {
            k.find(needle)
                .unwrap_or_else(|| panic!("missing {needle:?} in\n{k}"))
        };
        let lang = at("val oLang = b.createString(lang)");
        let slug = at("val oSlug = b.createString(slug)");
        assert!(lang < slug, "{k}");
        for other in ["val oTitle = ", "val oInner = ", "val oTags = "] {
            assert!(slug < at(other), "{other} before the key strings in\n{k}");
        }
    }

    #[test]
    fn keywords_are_escaped() {
        let s = test_schema("table T { val: int; object: string; when_done: bool; } root_type T;");
        let k = gen(&s);
        assert!(k.contains("public val `val`: Int = 0,"), "{k}");
        assert!(k.contains("public val `object`: String? = null,"), "{k}");
        assert!(k.contains("public val whenDone: Boolean = false,"), "{k}");
        assert!(!k.contains("\npackage "), "{k}");
    }

    #[test]
    fn empty_tables_and_multiple_namespaces() {
        let s = test_schema("namespace a; table Empty {} namespace b; table Holder { e: a.Empty; } root_type Holder;");
        let files = generate(&s, "t").unwrap();
        let names: Vec<&str> = files.iter().map(|(p, _)| p.as_str()).collect();
        assert_eq!(names, vec!["a/TA.kt", "b/T.kt"]);
        assert!(files[0].1.contains("package a\n"));
        assert!(files[0].1.contains("import b.*"));
        assert!(files[0].1.contains("public class Empty("));
        assert!(files[0]
            .1
            .contains("override fun equals(other: Any?): Boolean = other is Empty"));
        assert!(files[1].1.contains("public val e: Empty? = null,"));
        assert!(files[1].1.contains("public object TSchema {"));
    }

    #[test]
    fn vectors_of_unions() {
        let k = gen(&example("monster/monster_v2.fbs"));
        assert_contains_all(
            &k,
            &[
                "public val bag: List<Equipment> = emptyList(),",
                "val kBag = bag.filter { it !is Equipment.Unknown }",
                "t.unions(",
            ],
        );
    }

    /// The package is the app's choice; the collection names stay the schema's, so
    /// two apps generating into different packages share one database file.
    #[test]
    fn the_package_is_separate_from_the_collection_name() {
        let files = generate_in_package(&blog(), "blog", Some("com.example.feed")).unwrap();
        assert_eq!(files.len(), 1);
        assert_eq!(files[0].0, "com/example/feed/Blog.kt");
        let k = &files[0].1;
        assert_contains_all(
            k,
            &[
                "package com.example.feed\n",
                "public const val COLLECTION: String = \"blog.Post\"",
                "public data class Image(public val value: com.example.feed.Image) : Content {",
            ],
        );
        // other namespaces go under the package, and import each other
        let s = example("edge.fbs");
        let files = generate_in_package(&s, "edge", Some("app.`in`.x")).err();
        assert!(matches!(files, Some(CodegenError::Unsupported(_))));
        let files = generate_in_package(&s, "edge", Some("app.gen")).unwrap();
        let paths: Vec<&str> = files.iter().map(|(p, _)| p.as_str()).collect();
        assert!(paths.contains(&"app/gen/Edge.kt"), "{paths:?}");
        assert!(
            paths.contains(&"app/gen/edge/common/EdgeEdgeCommon.kt"),
            "{paths:?}"
        );
        assert!(files[0].1.contains("import app.gen"), "{}", files[0].1);
        assert!(files.iter().all(|(_, t)| t.contains("package app.gen")));
    }

    #[test]
    fn vector_fields_are_float_arrays_compared_by_content() {
        let s = photos();
        let code: String = generate(&s, "v")
            .unwrap()
            .into_iter()
            .map(|(_, t)| t)
            .collect();
        assert_contains_all(
            &code,
            &[
                "public val e: FloatArray = floatArrayOf(),",
                // A plain [float] stays a list.
                "public val n: List<Float> = emptyList(),",
                "e = t.f32Array(1),",
                "e.contentEquals(other.e)",
                "e.contentHashCode()",
                "e=${e.contentToString()}",
            ],
        );
    }

    #[test]
    fn write_sources_writes_the_files() {
        let dir = scratch_dir("kotlin");
        let path = concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../../examples/blog/schema/blog.fbs"
        );
        let written = write_sources(Path::new(path), &dir).unwrap();
        assert_eq!(written, vec![dir.join("blog/Blog.kt")]);
        assert!(std::fs::read_to_string(&written[0])
            .unwrap()
            .contains("data class Post("));
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
