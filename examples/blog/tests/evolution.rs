//! Schema evolution: v1 bytes read through v2 types and v2 bytes through v1 types,
//! with Rust-made and flatc-made buffers; `compat::check` agrees.

use keel_example_blog::{evo_v1, evo_v2};
use keel_schema::{compat, Schema, Value};

const NOTE_V1: &[u8] = include_bytes!("../../../tests/fixtures/note_v1.bin");
const NOTE_V2: &[u8] = include_bytes!("../../../tests/fixtures/note_v2.bin");

#[test]
fn v1_bytes_read_through_v2_types() {
    let v1 = evo_v1::Note::builder()
        .id("a")
        .body("old")
        .stars(4)
        .mood(evo_v1::Mood::Happy)
        .legacy(99)
        .build();
    let v2 = evo_v2::Note::decode(&v1.encode()).unwrap();
    assert_eq!(v2.id, "a");
    assert_eq!(v2.body.as_deref(), Some("old"));
    assert_eq!(v2.stars, 4);
    assert_eq!(v2.mood, evo_v2::Mood::Happy);
    assert_eq!(v2.views, 10, "new field reads its default");
    assert!(v2.tags.is_empty());
    assert_eq!(v2.score, None);

    // the deprecated field is gone from v2 types but still readable dynamically
    let schema = Schema::parse(evo_v2::SCHEMA_FBS, "v2.fbs").unwrap();
    let r = schema.reader("evo.Note").unwrap();
    let bytes = v1.encode();
    let o = r.read(&bytes).unwrap();
    assert_eq!(o.get(&r.path("legacy").unwrap()), Value::Int(99));
}

#[test]
fn v2_bytes_read_through_v1_types() {
    let v2 = evo_v2::Note::builder()
        .id("b")
        .body("new")
        .stars(2)
        .mood(evo_v2::Mood::Grumpy)
        .views(5)
        .tags(["x"])
        .score(1.5)
        .build();
    let bytes = v2.encode();
    let v1 = evo_v1::Note::decode(&bytes).unwrap();
    assert_eq!(v1.id, "b");
    assert_eq!(v1.stars, 2);
    // an enum value v1 does not know survives as Unknown and re-encodes unchanged
    assert_eq!(v1.mood, evo_v1::Mood::Unknown(2));
    assert_eq!(
        v1.legacy, 7,
        "v2 no longer writes the deprecated field: v1 sees its default"
    );
    let again = evo_v2::Note::decode(&v1.encode()).unwrap();
    assert_eq!(again.mood, evo_v2::Mood::Grumpy);
}

#[test]
fn flatc_v1_fixture_through_v2_and_v2_fixture_through_v1() {
    let n = evo_v2::Note::decode(NOTE_V1).unwrap();
    assert_eq!(
        (n.id.as_str(), n.stars, n.mood, n.views),
        ("n1", 5, evo_v2::Mood::Happy, 10)
    );
    let n = evo_v1::Note::decode(NOTE_V2).unwrap();
    assert_eq!(
        (n.id.as_str(), n.stars, n.mood),
        ("n2", 1, evo_v1::Mood::Unknown(2))
    );
    assert_eq!(n.body.as_deref(), Some("written by v2"));
    let n = evo_v2::Note::decode(NOTE_V2).unwrap();
    assert_eq!((n.views, n.score, n.tags.len()), (1234, Some(2.5), 2));
}

#[test]
fn compat_check_accepts_v1_to_v2_and_refuses_v2_to_v1() {
    let v1 = Schema::parse(evo_v1::SCHEMA_FBS, "v1.fbs").unwrap();
    let v2 = Schema::parse(evo_v2::SCHEMA_FBS, "v2.fbs").unwrap();
    let notes: Vec<String> = compat::check(&v1, &v2)
        .unwrap()
        .iter()
        .map(ToString::to_string)
        .collect();
    assert!(
        notes.contains(&"evo.Note.legacy: deprecated".to_string()),
        "{notes:?}"
    );
    assert!(
        notes.contains(&"evo.Mood.Grumpy: enum value added".to_string()),
        "{notes:?}"
    );
    assert!(
        notes.contains(&"evo.Note.views: field added (id 5)".to_string()),
        "{notes:?}"
    );
    let errs = compat::check(&v2, &v1).unwrap_err();
    assert!(errs.iter().any(|e| e.to_string()
        == "evo.Note.views: field was removed; keep it and mark it (deprecated) instead"));
}
