//! The decisions keel's three code generators — Rust ([`crate::codegen`]), Swift
//! ([`crate::swift`]) and Kotlin ([`crate::kotlin`]) — make the same way about a
//! schema, kept in one place so the three outputs cannot drift apart: which named
//! types a schema declares (and in which order they are named), how a schema name
//! becomes an `UpperCamelCase` type or case name, which table fields are optional
//! in a generated type, and the text of the doc comments every language shows.
//!
//! What genuinely differs per language (keywords, literal spelling, the wire
//! calls, Kotlin's `/** */` comments) stays in each generator.

use std::collections::HashMap;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use crate::parser::ParseError;

use crate::model::{EnumDef, EnumVal, Field, FieldType, ScalarType, Schema, StructDef, UnionDef};

/// Why code generation failed.
#[derive(Debug, thiserror::Error)]
pub enum CodegenError {
    /// The schema did not parse or resolve.
    #[error("{0}")]
    Parse(#[from] ParseError),
    /// Reading or writing a file failed.
    #[error("{path}: {source}")]
    Io {
        /// The file.
        path: PathBuf,
        /// The error.
        source: std::io::Error,
    },
    /// The schema cannot be expressed as Rust (e.g. two types with the same name in
    /// different namespaces).
    #[error("{0}")]
    Unsupported(String),
    /// No output directory: `OUT_DIR` is unset (not running in a build script) and
    /// [`Builder::out_dir`](crate::codegen::Builder::out_dir) was not called.
    #[error("OUT_DIR is not set; call keel_schema::Builder::out_dir or run from build.rs")]
    NoOutDir,
}

/// The kind half of a generator's `(kind, index)` type-name key: a table.
pub(crate) const TABLE: u8 = 0;
/// The kind of a struct in a `(kind, index)` type-name key.
pub(crate) const STRUCT: u8 = 1;
/// The kind of an enum in a `(kind, index)` type-name key.
pub(crate) const ENUM: u8 = 2;
/// The kind of a union in a `(kind, index)` type-name key.
pub(crate) const UNION: u8 = 3;

/// The names a generator gives the declared types, keyed `(kind, index)`, and the
/// check that no two types (or a type and a name the generated code uses itself)
/// end up with one name.
#[derive(Default)]
pub(crate) struct Names {
    by_key: HashMap<(u8, usize), String>,
    /// Each name taken so far and what took it (for the clash error).
    taken: HashMap<String, String>,
}

impl Names {
    /// Marks `name` as taken by `what` (a name the generated code declares itself).
    pub fn reserve(&mut self, name: &str, what: &str) {
        self.taken.insert(name.to_owned(), what.to_owned());
    }

    /// Takes `name` for the type `full` in the code generated for `language`; a
    /// name something else took before is an error naming both.
    pub fn claim(&mut self, name: &str, full: &str, language: &str) -> Result<(), CodegenError> {
        match self.taken.insert(name.to_owned(), full.to_owned()) {
            Some(other) => Err(CodegenError::Unsupported(format!(
                "{other} and {full} would both be named {name} in {language}; rename one"
            ))),
            None => Ok(()),
        }
    }

    /// Records `name` as the generated name of `(kind, index)`.
    pub fn set(&mut self, kind: u8, index: usize, name: String) {
        self.by_key.insert((kind, index), name);
    }

    /// The generated name of `(kind, index)`.
    pub fn get(&self, kind: u8, index: usize) -> &str {
        &self.by_key[&(kind, index)]
    }

    /// The generated name of table `i`.
    pub fn table_name(&self, i: usize) -> &str {
        self.get(TABLE, i)
    }
    /// The generated name of struct `i`.
    pub fn struct_name(&self, i: usize) -> &str {
        self.get(STRUCT, i)
    }
    /// The generated name of enum `i`.
    pub fn enum_name(&self, i: usize) -> &str {
        self.get(ENUM, i)
    }
    /// The generated name of union `i`.
    pub fn union_name(&self, i: usize) -> &str {
        self.get(UNION, i)
    }

    /// The name of a value of `ty` in a language: `scalar` spells scalars,
    /// `vector` wraps an element type, named types are looked up here.
    pub fn type_of(
        &self,
        ty: &FieldType,
        scalar: fn(crate::model::ScalarType) -> &'static str,
        vector: fn(String) -> String,
    ) -> String {
        match ty {
            FieldType::Scalar(t) => scalar(*t).into(),
            FieldType::Enum(i) => self.enum_name(*i).into(),
            FieldType::String => "String".into(),
            FieldType::Struct(i) => self.struct_name(*i).into(),
            FieldType::Table(i) => self.table_name(*i).into(),
            FieldType::Union(i) => self.union_name(*i).into(),
            FieldType::Vector(inner) => vector(self.type_of(inner, scalar, vector)),
        }
    }
}

/// The `#`s around a raw string literal holding `text` (Rust's `r#"…"#`, Swift's
/// `#"""…"""#`): the fewest that no `"#…` in `text` matches.
pub(crate) fn raw_string_hashes(text: &str) -> String {
    let mut hashes = String::from("#");
    while text.contains(&format!("\"{hashes}")) {
        hashes.push('#');
    }
    hashes
}

/// `name`, or `escape(name)` when it is one of the language's `keywords`
/// (separated by white space).
pub(crate) fn escaped(name: &str, keywords: &str, escape: fn(&str) -> String) -> String {
    if keywords.split_whitespace().any(|k| k == name) {
        escape(name)
    } else {
        name.to_owned()
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

/// Swift's and Kotlin's escape of a keyword used as a name: `` `name` ``.
pub(crate) fn backticks(name: &str) -> String {
    format!("`{name}`")
}

/// Loads the schema file `path` (with its includes) and its stem (`blog` for
/// `blog.fbs`), which names the generated schema type and file.
pub(crate) fn load_with_stem(path: &Path) -> Result<(Schema, String), CodegenError> {
    let (s, _files) = crate::resolve::load(path)?;
    Ok((s, stem(path).to_owned()))
}

/// The schema file's stem (`blog` for `blog.fbs`; `schema` when it has none),
/// which names the generated schema type and file in every language.
pub(crate) fn stem(path: &Path) -> &str {
    path.file_stem()
        .and_then(|s| s.to_str())
        .unwrap_or("schema")
}

/// Writes each `(relative path, text)` of `files` under `out_dir`, creating
/// directories as needed; returns the paths written.
pub(crate) fn write_files(
    out_dir: &Path,
    files: Vec<(String, String)>,
) -> Result<Vec<PathBuf>, CodegenError> {
    let io = |path: &Path| {
        let path = path.to_path_buf();
        move |source| CodegenError::Io { path, source }
    };
    let mut written = Vec::new();
    for (rel, text) in files {
        let path = out_dir.join(rel);
        let dir = path.parent().unwrap_or(out_dir);
        std::fs::create_dir_all(dir).map_err(io(dir))?;
        std::fs::write(&path, text).map_err(io(&path))?;
        written.push(path);
    }
    Ok(written)
}

/// One named type a schema declares, as the generators name it.
pub(crate) struct DeclaredType<'s> {
    /// [`TABLE`], [`STRUCT`], [`ENUM`] or [`UNION`].
    pub kind: u8,
    /// Index into the schema's list of that kind.
    pub index: usize,
    /// The name without namespace.
    pub name: &'s str,
    /// The namespace (`""` for none).
    pub namespace: &'s str,
}

impl DeclaredType<'_> {
    /// `namespace.name`, as error messages spell the type.
    pub fn full_name(&self) -> String {
        crate::model::qualify(self.namespace, self.name)
    }
}

/// Every named type of `s`: tables, then structs, enums and unions, each in
/// declaration order. The generators name types in this order, so a name clash is
/// always reported for the same pair of types whatever the language.
pub(crate) fn declared_types(s: &Schema) -> impl Iterator<Item = DeclaredType<'_>> {
    fn of_kind<'s>(
        kind: u8,
        names: impl Iterator<Item = (&'s String, &'s String)>,
    ) -> impl Iterator<Item = DeclaredType<'s>> {
        names
            .enumerate()
            .map(move |(index, (name, namespace))| DeclaredType {
                kind,
                index,
                name,
                namespace,
            })
    }
    let tables = s.tables.iter().map(|t| (&t.name, &t.namespace));
    let structs = s.structs.iter().map(|t| (&t.name, &t.namespace));
    let enums = s.enums.iter().map(|t| (&t.name, &t.namespace));
    let unions = s.unions.iter().map(|t| (&t.name, &t.namespace));
    of_kind(TABLE, tables)
        .chain(of_kind(STRUCT, structs))
        .chain(of_kind(ENUM, enums))
        .chain(of_kind(UNION, unions))
}

/// Every named type of `s` in the order a generated source declares them: enums,
/// structs, unions, then tables, each in declaration order — a reader of the
/// generated file meets a type before the tables that hold it.
pub(crate) fn types_in_emit_order(s: &Schema) -> Vec<DeclaredType<'_>> {
    let mut all: Vec<DeclaredType<'_>> = declared_types(s).collect();
    // A stable sort: declaration order stays within a kind.
    all.sort_by_key(|t| match t.kind {
        ENUM => 0,
        STRUCT => 1,
        UNION => 2,
        _ => 3,
    });
    all
}

/// `old_score` → `OldScore`, `HTTP_OK` → `HttpOk`, `blog-v2` → `BlogV2`: the
/// parts between `_`, `-` and `.` with their first letter raised (an all-capitals
/// name is lowered first); `V` goes in front of a name that would be empty or start
/// with a digit, which no language accepts as a type name.
pub(crate) fn upper_camel(name: &str) -> String {
    let all_caps = !name.chars().any(|c| c.is_lowercase());
    let mut out = String::new();
    for part in name.split(['_', '-', '.']).filter(|p| !p.is_empty()) {
        let mut cs = part.chars();
        if let Some(f) = cs.next() {
            out.extend(f.to_uppercase());
            if all_caps {
                out.extend(cs.flat_map(|c| c.to_lowercase()));
            } else {
                out.extend(cs);
            }
        }
    }
    if out.is_empty() || out.starts_with(|c: char| c.is_ascii_digit()) {
        out.insert(0, 'V');
    }
    out
}

/// `old_score` → `oldScore`, `Red` → `red`, `HTTP_OK` → `httpOk`, `URL` → `url`:
/// [`upper_camel`] with its leading capitals lowered. Field, property and enum-case
/// names in every generated language.
pub(crate) fn lower_camel(name: &str) -> String {
    let up = upper_camel(name);
    let chars: Vec<char> = up.chars().collect();
    // Lower the leading run of capitals (keeping the last one of a longer run when a
    // lowercase letter follows: `URLPath` → `urlPath`).
    let mut n = chars.iter().take_while(|c| c.is_uppercase()).count();
    if n > 1 && n < chars.len() && chars[n].is_lowercase() {
        n -= 1;
    }
    // `upper_camel` never returns "": there is a first character to lower.
    let (head, tail) = chars.split_at(n.max(1));
    let head: String = head.iter().collect();
    head.to_lowercase() + &tail.iter().collect::<String>()
}

/// Whether a table field's generated property is optional (`Option<T>`, `T?`):
/// yes unless a reader always has a value to give — a non-optional scalar or enum
/// (the schema default stands in for absence), a vector (absent reads as empty) or
/// the string primary key (always written).
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

pub(crate) fn field_is_optional(f: &Field) -> bool {
    match &f.ty {
        FieldType::Scalar(_) | FieldType::Enum(_) => f.optional,
        FieldType::Vector(_) => false,
        FieldType::String => !f.primary,
        _ => true,
    }
}

/// The declared value of enum `e` whose number is `raw`; `None` for a number the
/// schema does not name (a default the generators spell as the `Unknown` case).
pub(crate) fn enum_value(e: &EnumDef, raw: i64) -> Option<&EnumVal> {
    e.values.iter().find(|v| v.value == raw)
}

/// The doc line of an enum without a doc comment in the schema.
pub(crate) fn enum_doc_fallback(e: &EnumDef) -> String {
    format!(
        "The `{}` enum (underlying type `{}`).",
        e.full_name(),
        e.underlying.fbs_name()
    )
}

/// The doc line of a struct without a doc comment in the schema.
pub(crate) fn struct_doc_fallback(sd: &StructDef) -> String {
    format!(
        "The `{}` struct ({} bytes, stored inline).",
        sd.full_name(),
        sd.size
    )
}

/// The doc line of a union without a doc comment in the schema.
pub(crate) fn union_doc_fallback(u: &UnionDef) -> String {
    format!("The `{}` union.", u.full_name())
}

/// The doc line of an enum value without a doc comment in the schema.
pub(crate) fn enum_value_doc_fallback(v: &EnumVal) -> String {
    format!("`{}` (= {}).", v.name, v.value)
}

/// The doc line of every generated enum's catch-all case.
pub(crate) const UNKNOWN_VALUE_DOC: &str =
    "A value this version of the schema does not know (written by a newer one).";

/// Writes the declared values of enum `e` as cases, each under its `///` doc
/// comment (or the fallback naming the value and its number), indented one level:
/// the body of a Rust or Swift enum. `case` spells one value's case line.
pub(crate) fn write_enum_cases(out: &mut String, e: &EnumDef, case: impl Fn(&EnumVal) -> String) {
    for v in &e.values {
        doc(out, "    ", &v.doc, &enum_value_doc_fallback(v));
        let _ = writeln!(out, "{}", case(v));
    }
}

/// Opens a generated type (Rust, Swift): a blank line, its `///` doc comment
/// (the schema's `lines`, or `fallback`), then `head` (the declaration line).
pub(crate) fn open_type(lines: &[String], fallback: &str, head: &str) -> String {
    let mut o = String::from("\n");
    doc(&mut o, "", lines, fallback);
    let _ = writeln!(o, "{head}");
    o
}

/// Opens a generated enum (Rust, Swift): [`open_type`] with `head`, one case per
/// declared value, then the catch-all case `unknown_case` under its doc line.
pub(crate) fn open_enum(
    e: &EnumDef,
    head: &str,
    case: impl Fn(&EnumVal) -> String,
    unknown_case: &str,
) -> String {
    let mut o = open_type(&e.doc, &enum_doc_fallback(e), head);
    write_enum_cases(&mut o, e, case);
    let _ = writeln!(o, "    /// {UNKNOWN_VALUE_DOC}\n    {unknown_case}");
    o
}

/// A float literal as every generator plans it: NaN and the infinities by the
/// names the language gives them (`names`: NaN, infinity, negative infinity,
/// each after `prefix`), and a finite value as Rust's shortest round-trip text of
/// it, read as an `f32` when the field is one (`0.1`, not `0.10000000149011612`),
/// before `suffix`. Each generator only supplies the spellings.
pub(crate) fn float_lit(
    v: f64,
    ty: ScalarType,
    prefix: &str,
    names: [&str; 3],
    suffix: &str,
) -> String {
    let [nan, infinity, neg_infinity] = names;
    if v.is_nan() {
        format!("{prefix}{nan}")
    } else if v.is_infinite() {
        format!("{prefix}{}", if v > 0.0 { infinity } else { neg_infinity })
    } else if ty == ScalarType::F32 {
        format!("{:?}{suffix}", v as f32)
    } else {
        format!("{v:?}{suffix}")
    }
}

/// Writes the conversions of a generated enum (from and to the raw number, the
/// declared name): one `match` per `(head, arm, tail)` of `convs`, through
/// [`write_arms`]. In `arm`, `$case` stands for a value's case name (`case`),
/// `$raw` for its number as a literal (`raw`) and `$name` for its declared name
/// as a string literal.
pub(crate) fn write_conversions(
    out: &mut String,
    e: &EnumDef,
    case: impl Fn(&EnumVal) -> String,
    raw: impl Fn(&EnumVal) -> String,
    convs: &[(String, String, String)],
) {
    for (head, arm, tail) in convs {
        let line = |v: &EnumVal| {
            arm.replace("$case", &case(v))
                .replace("$raw", &raw(v))
                .replace("$name", &format!("{:?}", v.name))
        };
        write_arms(out, head, &e.values, line, tail);
    }
}

/// Writes a `match` (`switch`, `when`) with one arm line per item: `head` opens
/// it, `arm(item)` gives each item's line in declaration order, `tail` is the
/// catch-all arm (values a newer schema adds) and the closing lines. Every
/// generated enum and union converts from and to its raw tag through one of these.
pub(crate) fn write_arms<T>(
    out: &mut String,
    head: &str,
    items: &[T],
    arm: impl Fn(&T) -> String,
    tail: &str,
) {
    let _ = writeln!(out, "{head}");
    for item in items {
        let _ = writeln!(out, "{}", arm(item));
    }
    let _ = writeln!(out, "{tail}");
}

/// Writes `///` doc lines (the schema's doc comment, or `fallback`): the same form
/// in Rust and Swift. Blank lines stay bare `///` (rustfmt and swift-format keep
/// them so) and tabs become spaces (rustdoc would read them as code indentation).
pub(crate) fn doc(out: &mut String, indent: &str, lines: &[String], fallback: &str) {
    if lines.is_empty() {
        let _ = writeln!(out, "{indent}/// {fallback}");
    } else {
        for l in lines {
            let l = l.trim_end();
            if l.is_empty() {
                let _ = writeln!(out, "{indent}///");
            } else {
                let _ = writeln!(out, "{indent}/// {}", l.replace('\t', " "));
            }
        }
    }
}

/// Fails with the whole of `code` unless it contains each of `wants`.
#[cfg(test)]
pub(crate) fn assert_contains_all(code: &str, wants: &[&str]) {
    for want in wants {
        assert!(code.contains(want), "missing {want:?} in:\n{code}");
    }
}

/// The schema `text` (one file, no includes).
#[cfg(test)]
pub(crate) fn test_schema(text: &str) -> Schema {
    Schema::parse(text, "test.fbs").unwrap()
}

/// The schema `examples/blog/schema/<rel>`, with its includes.
#[cfg(test)]
pub(crate) fn example(rel: &str) -> Schema {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../examples/blog/schema")
        .join(rel);
    crate::resolve::load(&path).unwrap().0
}

/// The blog example's schema (`examples/blog/schema/blog.fbs`), which the
/// generators' tests render.
#[cfg(test)]
pub(crate) fn blog() -> Schema {
    example("blog.fbs")
}

/// Where a generated file goes in a test: a directory of its own under the
/// system's temporary one.
#[cfg(test)]
pub(crate) fn scratch_dir(lang: &str) -> std::path::PathBuf {
    std::env::temp_dir().join(format!("keel-{lang}-gen-{}", std::process::id()))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Swift and Kotlin name a type by its own name, whatever its namespace: two
    /// same-named types are refused (Rust qualifies one of them instead).
    #[test]
    fn same_named_types_of_two_namespaces_are_refused_where_names_are_flat() {
        let s = crate::codegen_shared::test_schema(
            "namespace a; table X { n: int; } namespace b; table X { m: int; } root_type X;",
        );
        let unsupported =
            |r: Result<(), CodegenError>| matches!(r, Err(CodegenError::Unsupported(_)));
        assert!(unsupported(crate::swift::generate(&s, "t").map(drop)));
        assert!(unsupported(crate::kotlin::generate(&s, "t").map(drop)));
        assert!(crate::codegen::Builder::new()
            .format(false)
            .generate(&s)
            .is_ok());
    }

    #[test]
    fn a_name_taken_twice_is_an_error_naming_both_types_and_the_language() {
        let mut names = Names::default();
        names.claim("Item", "shop.Item", "Swift").unwrap();
        match names.claim("Item", "warehouse.Item", "Swift") {
            Err(CodegenError::Unsupported(m)) => assert_eq!(
                m,
                "shop.Item and warehouse.Item would both be named Item in Swift; rename one"
            ),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn float_literals_name_the_specials_and_round_f32_values_as_f32() {
        let text = |v: f64, t| float_lit(v, t, "", ["nan", "inf", "-inf"], "");
        assert_eq!(text(f64::NAN, ScalarType::F64), "nan");
        assert_eq!(text(f64::INFINITY, ScalarType::F32), "inf");
        assert_eq!(text(f64::NEG_INFINITY, ScalarType::F64), "-inf");
        assert_eq!(text(f64::from(0.1_f32), ScalarType::F32), "0.1");
        assert_eq!(
            text(f64::from(0.1_f32), ScalarType::F64),
            "0.10000000149011612"
        );
        assert_eq!(text(2.0, ScalarType::F64), "2.0");
    }

    #[test]
    fn upper_camel_joins_parts_and_guards_the_first_character() {
        assert_eq!(upper_camel("old_score"), "OldScore");
        assert_eq!(upper_camel("HTTP_OK"), "HttpOk");
        assert_eq!(upper_camel("blog-v2"), "BlogV2");
        assert_eq!(upper_camel("game.v2"), "GameV2");
        assert_eq!(upper_camel("URLPath"), "URLPath");
        assert_eq!(upper_camel("2d"), "V2d");
        assert_eq!(upper_camel("_"), "V");
    }

    #[test]
    fn lower_camel_lowers_the_leading_capitals() {
        assert_eq!(lower_camel("old_score"), "oldScore");
        assert_eq!(lower_camel("Red"), "red");
        assert_eq!(lower_camel("HTTP_OK"), "httpOk");
        assert_eq!(lower_camel("URLPath"), "urlPath");
        assert_eq!(lower_camel("id"), "id");
    }

    #[test]
    fn declared_types_name_tables_first_then_structs_enums_unions() {
        let s = Schema::parse(
            "namespace n; enum E: byte { A } struct S { x: int; } table T { u: U; } \
             table W { e: E; } union U { T } root_type W;",
            "d.fbs",
        )
        .unwrap();
        let got: Vec<(u8, usize, String)> = declared_types(&s)
            .map(|d| (d.kind, d.index, d.full_name()))
            .collect();
        assert_eq!(
            got,
            [
                (TABLE, 0, "n.T".to_owned()),
                (TABLE, 1, "n.W".to_owned()),
                (STRUCT, 0, "n.S".to_owned()),
                (ENUM, 0, "n.E".to_owned()),
                (UNION, 0, "n.U".to_owned()),
            ]
        );
        let emitted: Vec<(u8, usize)> = types_in_emit_order(&s)
            .iter()
            .map(|d| (d.kind, d.index))
            .collect();
        assert_eq!(
            emitted,
            [(ENUM, 0), (STRUCT, 0), (UNION, 0), (TABLE, 0), (TABLE, 1)]
        );
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
