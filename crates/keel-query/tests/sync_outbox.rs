//! The sync outbox: every local commit to a synced collection appends its
//! operations in the same SQLite transaction (insert with every field, patch with
//! only the changed fields and counters as deltas, delete — cascades included);
//! a rolled-back write appends nothing, and a collection without `(sync)` leaves
//! no trace. Read back from the real file with a second SQLite connection.

use keel_query::{Database, Schema, StoreOptions, Value};
use serde_json::{json, Value as Json};

const SCHEMA: &str = r#"
attribute "sync";
namespace blog;
table Post (entity, sync: "posts") {
  id: string (primary);
  owner: string;
  title: string;
  likes: long (sync: counter);
  pinned: bool (sync: server_wins);
}
table Comment (entity, sync) {
  id: long (primary);
  post: string (references: "blog.Post", on_delete: "cascade");
  text: string;
}
table Note (entity) { id: string (primary); text: string; }
root_type Post;
"#;

fn open(dir: &tempfile::TempDir) -> Database {
    let schema = Schema::parse(SCHEMA, "blog.fbs").unwrap();
    Database::open(dir.path().join("o.db"), schema, StoreOptions::default()).unwrap()
}

fn bytes(db: &Database, collection: &str, v: Json) -> Vec<u8> {
    db.schema()
        .reader(collection)
        .unwrap()
        .encode_json(&v)
        .unwrap()
}

/// `(seq, collection, key, op, fields, deltas, base)` of every outbox row.
fn outbox(dir: &tempfile::TempDir) -> Vec<(i64, String, Json, String, Json, Json, i64)> {
    let conn = rusqlite::Connection::open(dir.path().join("o.db")).unwrap();
    let mut st = conn
        .prepare("SELECT seq, collection, key, op, fields, deltas, base FROM keel_sync_outbox ORDER BY seq")
        .unwrap();
    let parse = |s: Option<String>| s.map_or(Json::Null, |s| serde_json::from_str(&s).unwrap());
    st.query_map([], |r| {
        Ok((
            r.get(0)?,
            r.get(1)?,
            parse(r.get(2)?),
            r.get(3)?,
            parse(r.get(4)?),
            parse(r.get(5)?),
            r.get(6)?,
        ))
    })
    .unwrap()
    .collect::<Result<_, _>>()
    .unwrap()
}

#[test]
fn writes_become_operations_in_the_same_transaction() {
    let dir = tempfile::tempdir().unwrap();
    let db = open(&dir);
    let post = bytes(
        &db,
        "blog.Post",
        json!({"id": "p1", "owner": "ann", "title": "Hi", "likes": 2}),
    );
    db.write_blocking(move |t| t.insert_bytes("blog.Post", post).map(|_| ()))
        .unwrap();
    // A change request that names two fields, one of them unchanged: only the
    // changed one is sent; the counter goes as a delta.
    db.write_blocking(|t| {
        t.change_values(
            "blog.Post",
            &["p1".into()],
            &[
                ("title".into(), "Hello".into()),
                ("owner".into(), "ann".into()),
                ("likes".into(), Value::Int(7)),
            ],
        )
        .map(|_| ())
    })
    .unwrap();
    db.write_blocking(|t| t.delete_key("blog.Post", &["p1".into()]).map(|_| ()))
        .unwrap();
    let ops = outbox(&dir);
    assert_eq!(ops.len(), 3, "{ops:?}");
    let (s1, c1, k1, o1, f1, d1, b1) = &ops[0];
    assert_eq!((c1.as_str(), o1.as_str(), *b1), ("blog.Post", "insert", 0));
    assert_eq!(k1, &json!({"id": "p1"}));
    assert_eq!(
        f1,
        &json!({"owner": "ann", "title": "Hi", "likes": 2, "pinned": false})
    );
    assert_eq!(d1, &Json::Null);
    let (s2, _, _, o2, f2, d2, _) = &ops[1];
    assert_eq!(o2, "patch");
    assert_eq!(f2, &json!({"title": "Hello"}), "only the changed field");
    assert_eq!(d2, &json!({"likes": 5}), "the counter as a delta");
    let (s3, _, k3, o3, _, _, _) = &ops[2];
    assert_eq!((o3.as_str(), k3), ("delete", &json!({"id": "p1"})));
    assert!(s1 < s2 && s2 < s3, "sequence numbers grow");
}

#[test]
fn a_rolled_back_write_appends_nothing_and_unsynced_collections_leave_no_trace() {
    let dir = tempfile::tempdir().unwrap();
    let db = open(&dir);
    let note = bytes(&db, "blog.Note", json!({"id": "n1", "text": "local"}));
    db.write_blocking(move |t| t.insert_bytes("blog.Note", note).map(|_| ()))
        .unwrap();
    let conn = rusqlite::Connection::open(dir.path().join("o.db")).unwrap();
    let tables: i64 = conn
        .query_row(
            "SELECT count(*) FROM sqlite_schema WHERE name LIKE 'keel_sync%'",
            [],
            |r| r.get(0),
        )
        .unwrap();
    assert_eq!(
        tables, 0,
        "a write to an unsynced collection makes no sync table"
    );
    let post = bytes(&db, "blog.Post", json!({"id": "p1"}));
    let r = db.write_blocking(move |t| {
        t.insert_bytes("blog.Post", post)?;
        t.abort();
        Ok(())
    });
    assert!(r.is_err());
    let post = bytes(&db, "blog.Post", json!({"id": "p2"}));
    db.write_blocking(move |t| {
        t.insert_bytes("blog.Post", post)?;
        // A failing closure in a group rolls back its own operations.
        Ok(())
    })
    .unwrap();
    let ops = outbox(&dir);
    assert_eq!(ops.len(), 1, "{ops:?}");
    assert_eq!(ops[0].2, json!({"id": "p2"}));
}

#[test]
fn cascading_deletes_produce_delete_operations() {
    let dir = tempfile::tempdir().unwrap();
    let db = open(&dir);
    let post = bytes(&db, "blog.Post", json!({"id": "p1"}));
    let c1 = bytes(
        &db,
        "blog.Comment",
        json!({"id": 1, "post": "p1", "text": "a"}),
    );
    let c2 = bytes(
        &db,
        "blog.Comment",
        json!({"id": 2, "post": "p1", "text": "b"}),
    );
    db.write_blocking(move |t| {
        t.insert_bytes("blog.Post", post)?;
        t.insert_bytes("blog.Comment", c1)?;
        t.insert_bytes("blog.Comment", c2)?;
        Ok(())
    })
    .unwrap();
    db.write_blocking(|t| t.delete_key("blog.Post", &["p1".into()]).map(|_| ()))
        .unwrap();
    let deletes: Vec<(String, Json)> = outbox(&dir)
        .into_iter()
        .filter(|o| o.3 == "delete")
        .map(|o| (o.1, o.2))
        .collect();
    assert_eq!(deletes.len(), 3, "{deletes:?}");
    assert!(deletes.contains(&("blog.Comment".into(), json!({"id": 1}))));
    assert!(deletes.contains(&("blog.Comment".into(), json!({"id": 2}))));
    assert!(deletes.contains(&("blog.Post".into(), json!({"id": "p1"}))));
}
