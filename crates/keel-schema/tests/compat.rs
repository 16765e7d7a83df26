//! Evolution rules of `compat::check`.

use keel_schema::{compat, Schema};

fn s(body: &str) -> Schema {
    Schema::parse(
        &format!("enum E : byte {{ A, B }}\n{body}\nroot_type T;"),
        "t.fbs",
    )
    .unwrap()
}

fn errors(old: &str, new: &str) -> Vec<String> {
    compat::check(&s(old), &s(new))
        .unwrap_err()
        .iter()
        .map(ToString::to_string)
        .collect()
}

fn notes(old: &str, new: &str) -> Vec<String> {
    compat::check(&s(old), &s(new))
        .unwrap()
        .iter()
        .map(ToString::to_string)
        .collect()
}

#[test]
fn appending_deprecating_and_indexes_are_allowed() {
    let n = notes(
        "table T { id: string (primary); a: int; b: int (indexed); }",
        "table T { id: string (primary); a: int (deprecated, indexed); b: int; c: [string]; }",
    );
    assert_eq!(
        n,
        vec![
            "T.a: deprecated",
            "T.c: field added (id 3)",
            "T.a: index added (built in the background)",
            "T.b: index removed",
        ]
    );
}

#[test]
fn identical_schemas_have_no_notes() {
    let t = "table T { id: string (primary); a: int; }";
    assert!(notes(t, t).is_empty());
}

#[test]
fn type_change_is_refused_naming_the_field() {
    assert_eq!(
        errors("table T { a: int; }", "table T { a: long; }"),
        vec!["T.a: type changed from int to long; a field's type can never change (deprecate it and add a new field)"]
    );
}

#[test]
fn reordering_is_refused() {
    let e = errors(
        "table T { a: int; b: string; }",
        "table T { b: string; a: int; }",
    );
    assert_eq!(
        e,
        vec![
            "T.a: id changed from 0 to 1 (fields were reordered or ids reused); ids must never change",
            "T.b: id changed from 1 to 0 (fields were reordered or ids reused); ids must never change",
        ]
    );
}

#[test]
fn removing_a_field_is_refused() {
    assert_eq!(
        errors("table T { a: int; b: int; }", "table T { a: int; }"),
        vec!["T.b: field was removed; keep it and mark it (deprecated) instead"]
    );
}

#[test]
fn reusing_an_id_is_refused() {
    let e = errors(
        "table T { a: int (id: 0); b: int (id: 1); }",
        "table T { a: int (id: 0); c: string (id: 1); }",
    );
    assert_eq!(e, vec!["T.b: type changed from int to string; a field's type can never change (deprecate it and add a new field)"]);
}

#[test]
fn primary_key_change_is_refused() {
    assert_eq!(
        errors(
            "table T { id: string (primary); n: int; }",
            "table T { id: string (primary); n: int (primary); }"
        ),
        vec!["T: primary key changed from (id) to (id, n); the primary key can never change"]
    );
}

#[test]
fn optional_toggle_and_enum_changes_are_refused() {
    let e = errors(
        "table T { a: int; e: E; }",
        "table T { a: int = null; e: E; }",
    );
    assert_eq!(e.len(), 1);
    assert!(e[0].starts_with("T.a: became optional"), "{e:?}");
    let old = Schema::parse("enum E : byte { A, B } table T { e: E; } root_type T;", "a").unwrap();
    let new = Schema::parse("enum E : byte { B, A } table T { e: E; } root_type T;", "b").unwrap();
    let e = compat::check(&old, &new).unwrap_err();
    assert_eq!(e[0].to_string(), "E.A: enum value changed from 0 to 1");
}

#[test]
fn appending_enum_values_and_union_members_is_allowed() {
    let old = Schema::parse("enum E : byte { A } table X {} table Y {} union U { X } table T { e: E; u: U; } root_type T;", "a").unwrap();
    let new = Schema::parse("enum E : byte { A, B } table X {} table Y {} union U { X, Y } table T { e: E; u: U; } root_type T;", "b").unwrap();
    let n: Vec<String> = compat::check(&old, &new)
        .unwrap()
        .iter()
        .map(ToString::to_string)
        .collect();
    assert_eq!(n, vec!["E.B: enum value added", "U.Y: union member added"]);
}

#[test]
fn default_change_is_a_note() {
    assert_eq!(
        notes("table T { a: int = 1; }", "table T { a: int = 2; }"),
        vec!["T.a: default changed from 1 to 2; objects that omitted the field now read the new default"]
    );
}

#[test]
fn primary_key_default_change_is_refused() {
    // keel stores each key in its own column; a new default would make the field of
    // an object that omitted it disagree with its stored key.
    assert_eq!(
        errors(
            "table T { id: long = 1 (primary); }",
            "table T { id: long = 2 (primary); }"
        ),
        vec!["T.id: default of primary-key field changed from 1 to 2; objects that omitted it would read a key other than the one stored"]
    );
    // An unchanged NaN default is no change.
    assert!(notes(
        "table T { id: double = nan (primary); }",
        "table T { id: double = nan (primary); }"
    )
    .is_empty());
}
