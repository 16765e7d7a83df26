//! Parse and resolve errors: positions (file:line:col) and messages.

use keel_schema::Schema;

fn err(text: &str) -> String {
    match Schema::parse(text, "s.fbs") {
        Ok(_) => panic!("expected an error for:\n{text}"),
        Err(e) => e.to_string(),
    }
}

#[test]
fn missing_semicolon_points_at_the_next_token() {
    assert_eq!(
        err("table T {\n  a: int\n}"),
        "s.fbs:3:1: expected \";\" after the field, found \"}\""
    );
}

#[test]
fn missing_type() {
    assert_eq!(
        err("table T { a: ; }"),
        "s.fbs:1:14: expected a type, found \";\""
    );
}

#[test]
fn unknown_type_names_the_type() {
    assert_eq!(
        err("namespace n;\ntable T {\n  a: Missing;\n}"),
        "s.fbs:3:6: expected a type (a scalar, string, or a declared table, struct, enum or union), found unknown type \"Missing\""
    );
}

#[test]
fn enum_needs_an_underlying_type() {
    assert_eq!(
        err("enum E { A }"),
        "s.fbs:1:8: expected \":\" and an underlying integer type (enum Color : byte), found \"{\""
    );
    assert_eq!(
        err("enum E : float { A }"),
        "s.fbs:1:10: expected an integer type (byte, ubyte, short, ushort, int, uint, long, ulong) for enum E, found \"float\""
    );
}

#[test]
fn enum_value_out_of_range() {
    assert_eq!(
        err("enum E : byte { A = 127, B }"),
        "s.fbs:1:26: enum value B = 128 does not fit the underlying type byte; expected -128..=127"
    );
}

#[test]
fn duplicate_ids_name_both_fields() {
    assert_eq!(
        err("table T { a: int (id: 0); b: int (id: 0); }"),
        "s.fbs:1:27: field \"b\": id 0 is already used by field \"a\"; expected a unique id"
    );
}

#[test]
fn ids_must_be_all_or_nothing_and_contiguous() {
    assert_eq!(
        err("table T { a: int (id: 0); b: int; }"),
        "s.fbs:1:27: field \"b\" has no id; expected an id on every field of T once one field has one"
    );
    assert_eq!(
        err("table T { a: int (id: 0); b: int (id: 2); }"),
        "s.fbs:1:7: table T: field ids must be contiguous from 0; expected a field with id 1"
    );
}

#[test]
fn default_of_wrong_type() {
    assert_eq!(
        err("table T { a: int = \"x\"; }"),
        "s.fbs:1:20: field \"a\": expected a int default value, found \"x\""
    );
    assert_eq!(
        err("table T { a: ubyte = 300; }"),
        "s.fbs:1:22: field \"a\": expected a ubyte value between 0 and 255, found 300"
    );
    assert_eq!(
        err("table T { a: string = null; }"),
        "s.fbs:1:23: field \"a\": `= null` is only for scalar and enum fields; non-scalar fields are already optional"
    );
}

#[test]
fn unknown_attribute_says_how_to_declare_it() {
    assert_eq!(
        err("table T { a: int (colour); }"),
        "s.fbs:1:19: expected a known attribute, found \"colour\"; declare custom attributes first with `attribute \"colour\";`"
    );
    // declared attributes are fine
    Schema::parse(
        "attribute \"colour\"; table T { a: int (colour); }",
        "s.fbs",
    )
    .unwrap();
}

#[test]
fn primary_only_on_collections() {
    assert_eq!(
        err("table A { id: string (primary); }\ntable B { a: A; }\nroot_type B;"),
        "s.fbs:1:11: field \"id\": primary only applies to collections; expected table A to be the root_type or marked (entity)"
    );
    Schema::parse("table A (entity) { id: string (primary); }", "s.fbs").unwrap();
    // (indexed) on a table that is not a collection indexes that path in the
    // collections reaching it.
    let s = Schema::parse(
        "table A { n: int (indexed); }\ntable B { id: int (primary); a: A; }\nroot_type B;",
        "s.fbs",
    )
    .unwrap();
    assert_eq!(s.collection("B").unwrap().indexes[0].name, "a.n");
}

#[test]
fn unterminated_comment_and_string() {
    assert_eq!(
        err("table T {}\n/* never closed"),
        "s.fbs:2:1: expected \"*/\" to close this comment, found end of file"
    );
    assert_eq!(
        err("include \"a.fbs;\n"),
        "s.fbs:1:9: expected a closing '\"' for this string, found end of line"
    );
}

#[test]
fn includes_need_a_file() {
    assert!(err("include \"other.fbs\";").contains("use Schema::from_file"));
}

#[test]
fn root_type_must_be_a_table() {
    assert_eq!(
        err("struct S { a: int; }\nroot_type S;"),
        "s.fbs:2:11: expected a table name after root_type, found \"S\""
    );
}

#[test]
fn union_of_non_table() {
    assert_eq!(
        err("struct S { a: int; }\nunion U { S }"),
        "s.fbs:2:11: expected a table as union member, found \"S\" (keel unions hold tables only)"
    );
}

#[test]
fn recursive_struct() {
    assert_eq!(
        err("struct S { a: S; }"),
        "s.fbs:1:8: struct S contains itself; expected a finite layout"
    );
}

#[test]
fn column_counts_characters_not_bytes() {
    // "é" is two bytes but one column
    assert_eq!(
        err("/// é\ntable T { é: int; }"),
        "s.fbs:2:11: expected a name, number, string or punctuation, found 'é' (names use ASCII letters, digits and _)"
    );
}

#[test]
fn include_errors_point_at_the_include() {
    let dir = tempfile::tempdir().unwrap();
    let main = dir.path().join("main.fbs");
    std::fs::write(&main, "include \"missing.fbs\";\ntable T { a: int; }").unwrap();
    let e = Schema::from_file(&main).unwrap_err();
    assert_eq!((e.line, e.col), (1, 9));
    assert!(e.message.starts_with("cannot read included file"), "{e}");

    // relative includes resolve next to the including file, once each
    std::fs::create_dir(dir.path().join("sub")).unwrap();
    std::fs::write(
        dir.path().join("sub/a.fbs"),
        "include \"b.fbs\";\nnamespace x;\ntable A { b: B; }",
    )
    .unwrap();
    std::fs::write(
        dir.path().join("sub/b.fbs"),
        "include \"a.fbs\";\nnamespace x;\ntable B { n: int; }",
    )
    .unwrap();
    std::fs::write(
        &main,
        "include \"sub/a.fbs\";\nnamespace x;\ntable Root { a: A; }\nroot_type Root;",
    )
    .unwrap();
    let s = Schema::from_file(&main).unwrap();
    assert_eq!(s.tables.len(), 3);
    assert_eq!(s.collections[0].name, "x.Root");

    // errors inside an included file carry that file's name
    std::fs::write(dir.path().join("sub/b.fbs"), "table B { n: int }").unwrap();
    let e = Schema::from_file(&main).unwrap_err();
    assert!(e.file.ends_with("b.fbs"), "{e}");
    assert_eq!((e.line, e.col), (1, 18));
}

#[test]
fn oversized_tables_are_refused() {
    let fields: String = (0..9000).map(|i| format!("f{i}: long; ")).collect();
    let e = err(&format!("table Big {{ {fields} }}"));
    assert!(e.starts_with("s.fbs:1:7: table Big is too large"), "{e}");
}
