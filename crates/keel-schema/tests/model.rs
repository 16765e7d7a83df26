//! The resolved model: ids, defaults, collections, keys, fingerprint, canonical text.

use keel_schema::{FieldType, ScalarType, Schema, Value};

const BLOG: &str = include_str!("../../../examples/blog/schema/blog.fbs");

#[test]
fn blog_schema_resolves() {
    let s = Schema::parse(BLOG, "blog.fbs").unwrap();
    let c = s.collection("blog.Post").unwrap();
    let t = s.table(c.table);
    assert_eq!(c.primary_key, vec![0]);
    let idx: Vec<_> = c
        .indexes
        .iter()
        .map(|i| (i.name.as_str(), i.unique))
        .collect();
    assert_eq!(
        idx,
        vec![("priority", false), ("title", false), ("slug", true)]
    );
    // union `content` takes two slots: 5 (type) and 6 (value)
    let content = t.field("content").unwrap();
    assert_eq!((content.id, content.union_type_id()), (6, Some(5)));
    assert_eq!(t.field("pos").unwrap().id, 7);
    assert_eq!(t.field("pos").unwrap().vtable_offset(), 18);
    let rating = t.field("rating").unwrap();
    assert!(rating.optional);
    assert_eq!(rating.default, Value::Null);
    assert_eq!(t.field("color").unwrap().default, Value::Int(1));
    assert_eq!(t.field("delta").unwrap().default, Value::Int(-3));
    assert_eq!(t.field("published").unwrap().default, Value::Bool(true));
    assert_eq!(
        t.field("views").unwrap().ty,
        FieldType::Scalar(ScalarType::U64)
    );
    assert!(t.field("old_score").unwrap().deprecated);
    let rect = &s.structs[1];
    assert_eq!((rect.name.as_str(), rect.size, rect.align), ("Rect", 20, 4));
    assert_eq!(s.file_identifier.as_deref(), Some("BLOG"));
}

#[test]
fn canonical_text_round_trips_and_fingerprint_is_stable() {
    let s = Schema::parse(BLOG, "blog.fbs").unwrap();
    let text = s.to_fbs();
    let again = Schema::parse(&text, "canonical.fbs").unwrap();
    assert_eq!(again.to_fbs(), text);
    assert_eq!(again.fingerprint(), s.fingerprint());
    // pinned: the fingerprint must not change across runs, platforms or refactors
    // that keep the canonical form
    let tiny = Schema::parse("table T { a: int; } root_type T;", "t.fbs").unwrap();
    assert_eq!(tiny.fingerprint(), keel_schema_fnv(&tiny.to_fbs()));
}

fn keel_schema_fnv(s: &str) -> u64 {
    let mut h: u64 = 0xcbf29ce484222325;
    for b in s.as_bytes() {
        h ^= *b as u64;
        h = h.wrapping_mul(0x100000001b3);
    }
    h
}

#[test]
fn canonical_form_is_accepted_by_flatc_syntax() {
    let s = Schema::parse(BLOG, "blog.fbs").unwrap();
    let text = s.to_fbs();
    assert!(text.starts_with("attribute \"primary\";"));
    assert!(text.contains("content: blog.Content (id: 6);"));
    assert!(text.contains("rating: double = null (id: 14);"));
}

#[test]
fn composite_primary_keys_keep_declaration_order() {
    let s = Schema::parse(
        "table T { b: int (primary); x: string; a: string (primary); } root_type T;",
        "t.fbs",
    )
    .unwrap();
    assert_eq!(s.collections[0].primary_key, vec![0, 2]);
}

#[test]
fn entity_tables_are_collections() {
    let s = Schema::parse(
        "namespace a.b; table U (entity) { k: long (primary); } table R { u: U; } root_type R;",
        "t.fbs",
    )
    .unwrap();
    let names: Vec<_> = s.collections.iter().map(|c| c.name.as_str()).collect();
    assert_eq!(names, vec!["a.b.R", "a.b.U"]);
}

#[test]
fn generated_code_is_rustfmt_formatted_when_rustfmt_exists() {
    let s = Schema::parse(BLOG, "blog.fbs").unwrap();
    let code = keel_schema::Builder::new().generate(&s).unwrap();
    assert!(code.contains("pub struct Post(::std::sync::Arc<PostFields>);"));
    assert!(!code.contains("unsafe"));
    let Ok(out) = std::process::Command::new("rustfmt")
        .arg("--version")
        .output()
    else {
        eprintln!("rustfmt not installed; skipping the format check");
        return;
    };
    if !out.status.success() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("gen.rs");
    std::fs::write(&file, &code).unwrap();
    let check = std::process::Command::new("rustfmt")
        .args(["--edition", "2021", "--check"])
        .arg(&file)
        .output()
        .unwrap();
    assert!(
        check.status.success(),
        "{}",
        String::from_utf8_lossy(&check.stdout)
    );
}

/// Found by the `parse_schema` fuzz target (`fuzz/regressions/parse_schema/`): a
/// `ulong` above `i64::MAX` was printed as a negative number, so the canonical text
/// did not parse back.
#[test]
fn canonical_text_keeps_ulong_values_above_i64_max() {
    let src = include_str!("../../../fuzz/regressions/parse_schema/ulong_enum_above_i64_max.fbs");
    let schema = Schema::parse(src, "big.fbs").expect("reproducer parses");
    let canonical = schema.to_fbs();
    assert!(canonical.contains("18446744073709551615"), "{canonical}");
    let back = Schema::parse(&canonical, "canonical.fbs").expect("canonical text parses back");
    assert_eq!(back.fingerprint(), schema.fingerprint());

    let with_default = "table T { big: ulong = 18446744073709551615; } root_type T;";
    let schema = Schema::parse(with_default, "d.fbs").expect("parses");
    let back = Schema::parse(&schema.to_fbs(), "canonical.fbs").expect("default parses back");
    assert_eq!(back.fingerprint(), schema.fingerprint());
}
