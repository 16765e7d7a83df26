//! `keel check` reports references that name no object. Only those
//! in fields declared `dangling: false` are problems (keel refuses to write
//! them, so another tool did); the others are listed as information.

use std::process::Command;

use keel_query::{Database, StoreOptions};
use keel_schema::Schema;
use keel_storage::rusqlite;
use serde_json::{json, Value as Json};

fn keel(args: &[&str]) -> (i32, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_keel"))
        .args(args)
        .output()
        .unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
    )
}

#[test]
fn keel_check_reports_dangling_references() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("rel.db");
    let schema = Schema::parse(
        r#"namespace fx;
           table Post (entity) { id: string (primary); }
           table Comment { id: string (primary); post: string (references: "Post", dangling: false);
                           seen: [string] (references: "Post"); }
           root_type Comment;"#,
        "r.fbs",
    )
    .unwrap();
    let db = Database::open(&path, schema.clone(), StoreOptions::default()).unwrap();
    let post = schema.reader("fx.Post").unwrap();
    let comment = schema.reader("fx.Comment").unwrap();
    let p1 = post.encode_json(&json!({"id": "p1"})).unwrap();
    let p2 = post.encode_json(&json!({"id": "p2"})).unwrap();
    let c1 = comment
        .encode_json(&json!({"id": "c1", "post": "p1", "seen": ["p1", "p2", "gone"]}))
        .unwrap();
    db.write(move |t| {
        t.insert_bytes("fx.Post", p1)?;
        t.insert_bytes("fx.Post", p2)?;
        t.insert_bytes("fx.Comment", c1)?;
        Ok(())
    })
    .wait()
    .unwrap();
    db.close().wait().unwrap();

    // A to-many key naming nothing is allowed (dangling: true by default).
    let (code, out) = keel(&["check", path.to_str().unwrap()]);
    assert_eq!(code, 0, "{out}");
    assert!(
        out.contains("references: 1 name no object (0 in fields declared dangling: false)"),
        "{out}"
    );

    // Another tool deletes the post the comment must name.
    let conn = rusqlite::Connection::open(&path).unwrap();
    conn.execute("DELETE FROM \"fx.Post\" WHERE k0 = 'p1'", [])
        .unwrap();
    drop(conn);
    let (code, out) = keel(&["check", path.to_str().unwrap()]);
    assert_eq!(code, 1, "{out}");
    assert!(
        out.contains("fx.Comment rowid 1: post -> fx.Post \"p1\" (declared dangling: false)"),
        "{out}"
    );
    let (_, out) = keel(&["check", "--json", path.to_str().unwrap()]);
    let j: Json = serde_json::from_str(&out).unwrap();
    let mut found: Vec<(String, String, bool)> = j["dangling_references"]
        .as_array()
        .unwrap()
        .iter()
        .map(|d| {
            (
                d["field"].as_str().unwrap().to_owned(),
                d["key"].as_str().unwrap().to_owned(),
                d["allowed"].as_bool().unwrap(),
            )
        })
        .collect();
    found.sort();
    assert_eq!(
        found,
        vec![
            ("post".into(), "\"p1\"".into(), false),
            ("seen".into(), "\"gone\"".into(), true),
            ("seen".into(), "\"p1\"".into(), true),
        ]
    );
}
