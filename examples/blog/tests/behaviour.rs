//! The behaviour table of `docs/schema.md` ("What generated types do with bytes
//! they do not fully know"), row by row, for the Rust types. The byte vectors are
//! shared: they live in `tests/fixtures/behaviour/` and the Swift suite
//! (`KeelTests.swift`, `testBehaviourTable`) and the Kotlin suite (`KeelTest.kt`,
//! "behaviour table") check the same rows on the same bytes.
//!
//! Each vector is a `blog.Post` built here with the wire builder, so it can hold
//! what no generated type writes (an undeclared enum value, an undeclared union
//! member, an explicitly empty vector, a field of a newer schema).
//! `KEEL_UPDATE_SNAPSHOTS=1` rewrites the files; otherwise the test fails when the
//! checked-in bytes differ from what it builds.

use keel_example_blog::blog::{Color, Content, Post};
use keel_schema::wire::{Builder, TableRef};

/// The vtable slots of `blog.Post` the rows use (see `schema/blog.fbs`).
const ID: u16 = 0;
const COLOR: u16 = 2;
const CONTENT_TYPE: u16 = 5;
const CONTENT: u16 = 6;
const TAGS: u16 = 9;
const RATING: u16 = 14;
/// A slot `blog.Post` does not have: a field a newer schema added.
const NEWER: u16 = 30;

fn post(id: &str, fields: impl FnOnce(&mut Builder)) -> Vec<u8> {
    keel_schema::wire::encode(Some("BLOG"), |b| {
        let id = b.create_string(id);
        // `fields` makes its children, starts the table and adds its fields
        fields(b);
        b.add_offset(ID, id);
        b.end_table()
    })
}

/// The shared vectors: file name and bytes.
fn vectors() -> Vec<(&'static str, Vec<u8>)> {
    vec![
        (
            "unknown_enum.bin",
            post("enum", |b| {
                b.start_table();
                b.add_scalar_always::<i8>(COLOR, 7);
            }),
        ),
        (
            "unknown_union.bin",
            post("union", |b| {
                b.start_table();
                b.add_scalar_always::<u32>(0, 5);
                let member = b.end_table();
                b.start_table();
                b.add_scalar_always::<u8>(CONTENT_TYPE, 9);
                b.add_offset(CONTENT, member);
            }),
        ),
        (
            "empty_vector.bin",
            post("empty", |b| {
                let tags = b.create_offset_vector(&[]);
                b.start_table();
                b.add_offset(TAGS, tags);
            }),
        ),
        ("absent_vector.bin", post("absent", |b| b.start_table())),
        (
            "negative_zero.bin",
            post("zero", |b| {
                b.start_table();
                b.add_scalar_always::<f64>(RATING, -0.0);
            }),
        ),
        (
            "newer_field.bin",
            post("newer", |b| {
                b.start_table();
                b.add_scalar_always::<i32>(NEWER, 5);
            }),
        ),
    ]
}

#[test]
fn the_shared_vectors_are_the_checked_in_ones() {
    let dir =
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/fixtures/behaviour");
    for (name, bytes) in vectors() {
        let path = dir.join(name);
        if std::env::var_os("KEEL_UPDATE_SNAPSHOTS").is_some() {
            std::fs::write(&path, &bytes).unwrap();
        }
        assert_eq!(std::fs::read(&path).unwrap(), bytes, "{name}");
    }
}

fn vector(name: &str) -> Vec<u8> {
    vectors().into_iter().find(|(n, _)| *n == name).unwrap().1
}

fn root(bytes: &[u8]) -> TableRef<'_> {
    TableRef::root(bytes).unwrap()
}

#[test]
fn unknown_enum_values_read_as_unknown_and_are_written_back() {
    let p = Post::decode(&vector("unknown_enum.bin")).unwrap();
    assert_eq!(p.color, Color::Unknown(7));
    let again = p.to_builder().title("edited").build().encode();
    assert_eq!(root(&again).get_opt::<i8>(COLOR).unwrap(), Some(7));
}

#[test]
fn unknown_union_members_read_as_unknown_and_are_left_out_when_written() {
    let p = Post::decode(&vector("unknown_union.bin")).unwrap();
    assert_eq!(p.content, Some(Content::Unknown(9)));
    let again = p.encode();
    let t = root(&again);
    assert_eq!(t.get_opt::<u8>(CONTENT_TYPE).unwrap(), None);
    assert!(t.table(CONTENT).unwrap().is_none());
}

#[test]
fn empty_and_absent_vectors_read_alike_and_are_written_as_absent() {
    let empty = Post::decode(&vector("empty_vector.bin")).unwrap();
    let absent = Post::decode(&vector("absent_vector.bin")).unwrap();
    assert!(root(&vector("empty_vector.bin"))
        .vector(TAGS, 4)
        .unwrap()
        .is_some());
    assert_eq!((empty.tags.len(), absent.tags.len()), (0, 0));
    assert!(root(&empty.encode()).vector(TAGS, 4).unwrap().is_none());
}

#[test]
fn negative_zero_keeps_its_sign_and_float_defaults_compare_by_bits() {
    let p = Post::decode(&vector("negative_zero.bin")).unwrap();
    let r = p.rating.unwrap();
    assert!(r == 0.0 && r.is_sign_negative());
    let back = root(&p.encode()).get_opt::<f64>(RATING).unwrap().unwrap();
    assert!(back.is_sign_negative());
    // What every generated non-optional float goes through: a value is left out
    // only when its bits are the default's.
    let fields = |v: f32, d: f32| {
        let bytes = keel_schema::wire::encode(None, |b| {
            b.start_table();
            b.add_scalar(0, v, d);
            b.end_table()
        });
        root(&bytes).get_opt::<f32>(0).unwrap().map(f32::to_bits)
    };
    assert_eq!(
        fields(-0.0, 0.0),
        Some((-0.0f32).to_bits()),
        "-0.0 on a 0.0 default"
    );
    assert_eq!(
        fields(0.0, -0.0),
        Some(0.0f32.to_bits()),
        "0.0 on a -0.0 default"
    );
    assert_eq!(fields(f32::NAN, f32::NAN), None, "NaN on a NaN default");
    assert_eq!(fields(1.5, f32::NAN), Some(1.5f32.to_bits()));
}

#[test]
fn fields_of_a_newer_schema_are_ignored_and_not_written_back() {
    let bytes = vector("newer_field.bin");
    assert_eq!(root(&bytes).get_opt::<i32>(NEWER).unwrap(), Some(5));
    let p = Post::decode(&bytes).unwrap();
    assert_eq!(p.id, "newer");
    assert_eq!(root(&p.encode()).get_opt::<i32>(NEWER).unwrap(), None);
}
