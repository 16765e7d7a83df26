//! How keel's three code generators — Rust ([`rust`](super::rust)), Swift
//! ([`swift`](super::swift)) and Kotlin ([`kotlin`](super::kotlin)) — name what a
//! schema declares, the same way in every language: which named types a schema
//! declares and in which order they are named ([`declared_types`]), the table of
//! generated names with its clash check ([`Names`]), how a schema name becomes an
//! `UpperCamelCase` type or a `lowerCamelCase` member, how a keyword is escaped,
//! and how a float or raw-string literal is spelled.
//!
//! What genuinely differs per language (the keyword lists, the escape, the names
//! the generated code reserves for itself) stays in each generator.

use std::collections::{HashMap, HashSet};
use std::path::Path;

use crate::codegen::error::CodegenError;
use crate::model::{qualify, FieldType, ScalarType, Schema};
use crate::resolve;

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
    /// Each name taken so far, by scope and name, and what took it (for the
    /// clash error).
    taken: HashMap<(String, String), String>,
}

impl Names {
    /// Marks `name` as taken by `what` (a name the generated code declares itself).
    pub fn reserve(&mut self, name: &str, what: &str) {
        self.reserve_in("", name, what);
    }

    /// Marks `name` as taken by `what` in `scope` (a Kotlin package).
    pub fn reserve_in(&mut self, scope: &str, name: &str, what: &str) {
        let key = (scope.to_owned(), name.to_owned());
        self.taken.insert(key, what.to_owned());
    }

    /// Takes `name` for the type `full` in the code generated for `language`; a
    /// name something else took before is an error naming both.
    pub fn claim(&mut self, name: &str, full: &str, language: &str) -> Result<(), CodegenError> {
        self.claim_in("", name, full, language)
    }

    /// [`claim`](Self::claim) in `scope`: a name taken in another scope (another
    /// Kotlin package) is no clash.
    pub fn claim_in(
        &mut self,
        scope: &str,
        name: &str,
        full: &str,
        language: &str,
    ) -> Result<(), CodegenError> {
        let key = (scope.to_owned(), name.to_owned());
        match self.taken.insert(key, full.to_owned()) {
            Some(other) => Err(clash(&other, full, name, language)),
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
        scalar: fn(ScalarType) -> &'static str,
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

/// The error for two types, `first` and `then`, that would both be named
/// `name` in `language`.
pub(crate) fn clash(first: &str, then: &str, name: &str, language: &str) -> CodegenError {
    CodegenError::Unsupported(format!(
        "{first} and {then} would both be named {name} in {language}; rename one"
    ))
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

/// A language's keywords, and how a name that is one becomes an identifier.
pub(crate) struct Keywords {
    /// The keywords, separated by white space.
    words: &'static str,
    /// The identifier for a keyword used as a name.
    escape: fn(&str) -> String,
}

impl Keywords {
    /// `words` (separated by white space), each made an identifier by `escape`.
    pub const fn new(words: &'static str, escape: fn(&str) -> String) -> Self {
        Keywords { words, escape }
    }

    /// `words` escaped with backticks (`` `name` ``), as Swift and Kotlin do.
    pub const fn backticked(words: &'static str) -> Self {
        Keywords::new(words, backticks)
    }

    /// Whether `name` is one of the keywords.
    pub fn contains(&self, name: &str) -> bool {
        self.words.split_whitespace().any(|k| k == name)
    }

    /// `name` as an identifier: itself, or escaped when it is a keyword.
    pub fn ident(&self, name: &str) -> String {
        if self.contains(name) {
            (self.escape)(name)
        } else {
            name.to_owned()
        }
    }
}

/// Swift's and Kotlin's escape of a keyword used as a name: `` `name` ``.
fn backticks(name: &str) -> String {
    format!("`{name}`")
}

/// Loads the schema file `path` (with its includes) and its stem (`blog` for
/// `blog.fbs`), which names the generated schema type and file.
pub(crate) fn load_with_stem(path: &Path) -> Result<(Schema, String), CodegenError> {
    let (s, _files) = resolve::load(path)?;
    Ok((s, stem(path).to_owned()))
}

/// The schema file's stem (`blog` for `blog.fbs`; `schema` when it has none),
/// which names the generated schema type and file in every language.
pub(crate) fn stem(path: &Path) -> &str {
    path.file_stem()
        .and_then(|s| s.to_str())
        .unwrap_or("schema")
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
        qualify(self.namespace, self.name)
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

/// The names that more than one declared type of `s` has (each in its own
/// namespace): a language whose types share one namespace must tell them apart.
pub(crate) fn shared_names(s: &Schema) -> HashSet<&str> {
    let mut seen = HashSet::new();
    declared_types(s)
        .filter(|t| !seen.insert(t.name))
        .map(|t| t.name)
        .collect()
}

/// The name of `t` in a language whose types share one namespace (Rust, Swift):
/// its own name, or, when another type has that name too (`shared`, from
/// [`shared_names`]), its namespace's parts in `UpperCamelCase` before it
/// (`game.v2.Monster` → `GameV2Monster`, `shop.Item` → `ShopItem`).
pub(crate) fn flat_name(t: &DeclaredType<'_>, shared: &HashSet<&str>) -> String {
    if shared.contains(t.name) && !t.namespace.is_empty() {
        let mut flat: String = t.namespace.split('.').map(upper_camel).collect();
        flat.push_str(t.name);
        flat
    } else {
        t.name.to_owned()
    }
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::codegen::testing::{assert_contains_all, example, test_schema};
    use crate::codegen::{kotlin, swift, Builder};

    /// Two tables named `Item` in the namespaces `shop` and `warehouse` (the
    /// schemas of `examples/blog/schema/namespaces/`) generate in every language.
    /// Rust and Swift, whose types share one namespace, give both the flat name
    /// that carries the namespace (`ShopItem`, `WarehouseItem`); Kotlin declares
    /// `Item` in each namespace's package and names each by its package
    /// (`shop.Item`) wherever the simple name could mean either.
    #[test]
    fn same_named_types_of_two_namespaces_generate_in_every_language() {
        for file in ["namespaces/ns_v1.fbs", "namespaces/ns_v2.fbs"] {
            let s = example(file);
            let rust = Builder::new().format(false).generate(&s).unwrap();
            assert_contains_all(
                &rust,
                &["pub struct ShopItem(", "pub struct WarehouseItem("],
            );

            let swift = swift::generate(&s, "ns").unwrap();
            assert_contains_all(
                &swift,
                &[
                    "public struct ShopItem: Sendable, Equatable, Hashable {",
                    "public struct WarehouseItem: Sendable, Equatable, Hashable {",
                    "extension ShopItem: KeelRecord {",
                    "public static let keelCollection = \"shop.Item\"",
                    "extension WarehouseItem: KeelRecord {",
                    "public static let keelCollection = \"warehouse.Item\"",
                    "public static let collections: [any KeelRecord.Type] = [ShopItem.self, WarehouseItem.self]",
                    "public static var sku: KeelField<WarehouseItem, String> { KeelField(\"sku\") }",
                    "public typealias Key = Int32",
                ],
            );
            assert!(!swift.contains("struct Item"), "{swift}");

            let files = kotlin::generate(&s, "ns").unwrap();
            let paths: Vec<&str> = files.iter().map(|(p, _)| p.as_str()).collect();
            assert_eq!(paths, ["shop/Ns.kt", "warehouse/NsWarehouse.kt"]);
            let (shop, warehouse) = (&files[0].1, &files[1].1);
            assert_contains_all(
                shop,
                &[
                    "package shop\n",
                    "public data class Item(",
                    "public const val COLLECTION: String = \"shop.Item\"",
                    "public companion object : dev.keel.KeelModel<shop.Item, String> {",
                    "public class ItemPath<O>(",
                ],
            );
            assert_contains_all(
                warehouse,
                &[
                    "package warehouse\n",
                    "public data class Item(",
                    "public const val COLLECTION: String = \"warehouse.Item\"",
                    "public companion object : dev.keel.KeelModel<warehouse.Item, Int> {",
                    "public class ItemPath<O>(",
                ],
            );
        }
    }

    /// Kotlin's packages keep same-named types of two namespaces apart, but not
    /// a type without a namespace (its file has no package to name it by), nor
    /// two types that `--package` puts in one package (the main namespace's and
    /// the unnamed one's).
    #[test]
    fn same_named_types_kotlin_cannot_tell_apart_are_refused() {
        let s = test_schema("table X { n: int; } namespace b; table X { m: int; } root_type b.X;");
        for package in [None, Some("app")] {
            match kotlin::generate_in_package(&s, "t", package) {
                Err(CodegenError::Unsupported(m)) => {
                    assert!(
                        m.contains("X and b.X would both be named X in Kotlin"),
                        "{m}"
                    )
                }
                other => panic!("{package:?}: {other:?}"),
            }
        }
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
}
