//! No input makes the parser, resolver, code generator or dynamic reader panic
//! (the in-`cargo test` counterpart of the `fuzz/` targets).

use keel_schema::{Builder, Schema};
use proptest::prelude::*;

const BLOG: &str = include_str!("../../../examples/blog/schema/blog.fbs");

const WORDS: &[&str] = &[
    "table",
    "struct",
    "enum",
    "union",
    "namespace",
    "include",
    "root_type",
    "attribute",
    "file_identifier",
    "T",
    "U",
    "E",
    "S",
    "a",
    "b",
    "int",
    "long",
    "ubyte",
    "float",
    "double",
    "string",
    "bool",
    "[",
    "]",
    "{",
    "}",
    "(",
    ")",
    ":",
    ";",
    ",",
    "=",
    ".",
    "id",
    "deprecated",
    "primary",
    "indexed",
    "unique",
    "entity",
    "null",
    "true",
    "0",
    "1",
    "-1",
    "255",
    "65536",
    "1.5",
    "\"x\"",
    "///doc\n",
    "/*",
    "*/",
    "\n",
    "nan",
    "-inf",
    "0x10",
    "required",
];

fn soup() -> impl Strategy<Value = String> {
    proptest::collection::vec(proptest::sample::select(WORDS), 0..60).prop_map(|w| w.join(" "))
}

/// Parses; if the schema is valid, its canonical form must re-parse to the same
/// fingerprint and code generation must succeed or fail cleanly.
fn check(text: &str) {
    if let Ok(s) = Schema::parse(text, "fuzz.fbs") {
        let canonical = s.to_fbs();
        let again = Schema::parse(&canonical, "canonical.fbs")
            .unwrap_or_else(|e| panic!("canonical form does not parse: {e}\n{canonical}"));
        assert_eq!(again.fingerprint(), s.fingerprint(), "{canonical}");
        let _ = Builder::new().format(false).generate(&s);
        let _ = keel_schema::compat::check(&s, &again).expect("a schema is compatible with itself");
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2000))]

    #[test]
    fn arbitrary_text_never_panics(text in any::<String>()) {
        check(&text);
    }

    #[test]
    fn token_soup_never_panics(text in soup()) {
        check(&text);
    }

    #[test]
    fn mutated_valid_schema_never_panics(cut in 0..BLOG.len(), len in 0usize..40, insert in proptest::sample::select(WORDS)) {
        let mut text = BLOG.to_owned();
        let start = (0..=cut).rev().find(|i| text.is_char_boundary(*i)).unwrap_or(0);
        let end = (start + len..=text.len()).find(|i| text.is_char_boundary(*i)).unwrap_or(text.len());
        text.replace_range(start..end, insert);
        check(&text);
    }

    #[test]
    fn arbitrary_bytes_never_panic_the_dynamic_reader(bytes in proptest::collection::vec(any::<u8>(), 0..300)) {
        let s = Schema::parse(BLOG, "blog.fbs").unwrap();
        let r = s.reader("Post").unwrap();
        if let Ok(o) = r.read(&bytes) {
            let _ = o.to_json();
        }
        if let Ok(o) = r.open(&bytes) {
            for p in ["id", "author.name", "content", "content.Video.url", "frame.origin.x", "tags", "flags", "rating"] {
                let _ = o.get(&r.path(p).unwrap());
            }
            let _ = o.to_json();
        }
    }
}

#[test]
fn deeply_nested_vectors_and_huge_numbers_are_errors_not_panics() {
    let deep = format!(
        "table T {{ a: {}int{}; }}",
        "[".repeat(10_000),
        "]".repeat(10_000)
    );
    assert!(Schema::parse(&deep, "d.fbs").is_err());
    assert!(Schema::parse(
        "table T { a: int = 99999999999999999999999999999999999; }",
        "n.fbs"
    )
    .is_err());
    assert!(Schema::parse("table T { a: int (id: 99999999999999999999); }", "n.fbs").is_err());
    assert!(Schema::parse(
        "enum E : ulong { A = 18446744073709551615 } table T { e: E; }",
        "n.fbs"
    )
    .is_ok());
}

#[test]
fn deeply_nested_tables_are_a_decode_error() {
    let s = Schema::parse("table T { t: T; n: int; } root_type T;", "t.fbs").unwrap();
    let r = s.reader("T").unwrap();
    let mut j = serde_json::json!({ "n": 1 });
    for _ in 0..200 {
        j = serde_json::json!({ "t": j });
    }
    let bytes = r.encode_json(&j).unwrap();
    assert!(matches!(
        r.read(&bytes),
        Err(keel_schema::DecodeError::TooDeep(_))
    ));
}
