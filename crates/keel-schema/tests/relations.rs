//! `(references: …)` fields parse, validate against the target's
//! primary key, are indexed, and survive the canonical text.

use keel_schema::{OnDelete, Reference, Schema};

const BLOG: &str = r#"
namespace blog;
table Author (entity) { id: string (primary); name: string; }
table Tag (entity) { id: long (primary); label: string; }
table Post {
  id: string (primary);
  author: string (references: "Author", on_delete: "cascade", dangling: false, inverse: "posts");
  editor: string (references: "blog.Author", on_delete: "nullify");
  tags: [long] (references: "Tag");
  title: string;
}
root_type Post;
"#;

fn parse_err(text: &str) -> String {
    Schema::parse(text, "t.fbs").unwrap_err().to_string()
}

#[test]
fn references_resolve_to_collections_with_rules() {
    let s = Schema::parse(BLOG, "blog.fbs").unwrap();
    let post = s.table(s.collection("blog.Post").unwrap().table);
    let author = post.field("author").unwrap().references.clone().unwrap();
    assert_eq!(author.target, "blog.Author");
    assert!(!author.to_many);
    assert_eq!(author.on_delete, OnDelete::Cascade);
    assert!(!author.dangling);
    assert_eq!(author.inverse.as_deref(), Some("posts"));
    let editor: &Reference = post.field("editor").unwrap().references.as_ref().unwrap();
    assert_eq!(
        (editor.on_delete, editor.dangling),
        (OnDelete::Nullify, true)
    );
    let tags = post.field("tags").unwrap().references.as_ref().unwrap();
    assert_eq!((tags.target.as_str(), tags.to_many), ("blog.Tag", true));
    assert_eq!(
        tags.on_delete,
        OnDelete::Restrict,
        "restrict is the default"
    );
    assert!(post.field("title").unwrap().references.is_none());
    let to_author: Vec<&str> = s
        .references_to("blog.Author")
        .iter()
        .map(|(c, f)| {
            assert_eq!(c.name, "blog.Post");
            f.name.as_str()
        })
        .collect();
    assert_eq!(to_author, ["author", "editor"]);
}

#[test]
fn to_one_reference_fields_are_indexed() {
    let s = Schema::parse(BLOG, "blog.fbs").unwrap();
    let idx: Vec<&str> = s
        .collection("blog.Post")
        .unwrap()
        .indexes
        .iter()
        .map(|i| i.name.as_str())
        .collect();
    // A vector has no index column; its referrers are found by a scan.
    assert_eq!(idx, ["author", "editor"]);
}

#[test]
fn references_survive_the_canonical_text() {
    let s = Schema::parse(BLOG, "blog.fbs").unwrap();
    let text = s.to_fbs();
    let again = Schema::parse(&text, "canonical.fbs").unwrap();
    assert_eq!(again, s);
    assert_eq!(again.fingerprint(), s.fingerprint());
    // A schema without references keeps its text (and fingerprint) as before.
    let plain = Schema::parse("table T { id: string (primary); } root_type T;", "p.fbs").unwrap();
    assert!(!plain.to_fbs().contains("references"));
}

#[test]
fn reference_errors_are_clear_schema_errors() {
    let unknown = parse_err(
        r#"table P { id: string (primary); a: string (references: "Nope"); } root_type P;"#,
    );
    assert!(
        unknown.contains("Nope") && unknown.contains("collection"),
        "{unknown}"
    );

    let not_collection = parse_err(
        r#"table A { id: string (primary); }
           table P { id: string (primary); a: string (references: "A"); } root_type P;"#,
    );
    assert!(
        not_collection.contains("expected a collection"),
        "{not_collection}"
    );

    let mismatch = parse_err(
        r#"table A (entity) { id: string (primary); }
           table P { id: string (primary); a: int (references: "A"); } root_type P;"#,
    );
    assert!(mismatch.contains("primary key"), "{mismatch}");

    let no_key = parse_err(
        r#"table A (entity) { name: string; }
           table P { id: string (primary); a: string (references: "A"); } root_type P;"#,
    );
    assert!(no_key.contains("primary key of one field"), "{no_key}");

    let bad_rule = parse_err(
        r#"table A (entity) { id: string (primary); }
           table P { id: string (primary); a: string (references: "A", on_delete: "explode"); } root_type P;"#,
    );
    assert!(bad_rule.contains("cascade"), "{bad_rule}");

    let orphan_rule = parse_err(
        r#"table P { id: string (primary); a: string (on_delete: "cascade"); } root_type P;"#,
    );
    assert!(orphan_rule.contains("need (references"), "{orphan_rule}");

    let clash = parse_err(
        r#"table A (entity) { id: string (primary); posts: int; }
           table P { id: string (primary); a: string (references: "A", inverse: "posts"); } root_type P;"#,
    );
    assert!(clash.contains("inverse"), "{clash}");

    // An inverse is a name the generators turn into a handle (`posts_ref()`).
    let not_a_name = parse_err(
        r#"table A (entity) { id: string (primary); }
           table P { id: string (primary); a: string (references: "A", inverse: "my posts"); } root_type P;"#,
    );
    assert!(
        not_a_name.contains("inverse") && not_a_name.contains("identifier"),
        "{not_a_name}"
    );

    let nested = parse_err(
        r#"table A (entity) { id: string (primary); }
           table Sub { a: string (references: "A"); }
           table P { id: string (primary); s: Sub; } root_type P;"#,
    );
    assert!(nested.contains("only apply to collections"), "{nested}");
}

#[test]
fn adding_a_reference_is_a_compatible_evolution_with_notes() {
    let v1 = Schema::parse(
        r#"table A (entity) { id: string (primary); }
           table P { id: string (primary); a: string; } root_type P;"#,
        "v1.fbs",
    )
    .unwrap();
    let v2 = Schema::parse(
        r#"table A (entity) { id: string (primary); }
           table P { id: string (primary); a: string (references: "A", on_delete: "cascade"); } root_type P;"#,
        "v2.fbs",
    )
    .unwrap();
    let notes: Vec<String> = keel_schema::compat::check(&v1, &v2)
        .unwrap()
        .iter()
        .map(ToString::to_string)
        .collect();
    assert!(
        notes
            .iter()
            .any(|n| n.contains("P.a") && n.contains("now references A")),
        "{notes:?}"
    );
    assert!(notes.iter().any(|n| n.contains("index added")), "{notes:?}");
    let back: Vec<String> = keel_schema::compat::check(&v2, &v1)
        .unwrap()
        .iter()
        .map(ToString::to_string)
        .collect();
    assert!(
        back.iter().any(|n| n.contains("no longer a reference")),
        "{back:?}"
    );
}
