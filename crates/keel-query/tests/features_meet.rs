//! Where this round's features meet on one collection: a photo that references
//! its album (`on_delete: "cascade"`), has a `(searchable)` caption and a
//! `(vector: 2)` embedding. A cascade, a key change and a nullify must keep the
//! full-text index and the packed vector table equal to the rows, so that search
//! and nearest never return an object that is gone.

use std::sync::Arc;

use keel_query::{inspect, Database, StoreOptions};
use keel_schema::{Expr, Schema};

const SCHEMA: &str = r#"
attribute "searchable";
namespace meet;
table Album (entity) { id: string (primary); title: string; }
table Photo {
  id: string (primary);
  album: string (references: "Album", on_delete: "cascade");
  caption: string (searchable);
  e: [float] (vector: 2, metric: "l2");
}
root_type Photo;
"#;

fn photo(s: &Schema, id: &str, album: &str, caption: &str, e: [f32; 2]) -> Vec<u8> {
    s.reader("meet.Photo")
        .unwrap()
        .encode_json(&serde_json::json!({"id": id, "album": album, "caption": caption, "e": e}))
        .unwrap()
}

fn album(s: &Schema, id: &str) -> Vec<u8> {
    s.reader("meet.Album")
        .unwrap()
        .encode_json(&serde_json::json!({"id": id, "title": id}))
        .unwrap()
}

/// Rowids of the photos `nearest` and `search` find, and whether the side
/// tables equal the rows.
fn found(db: &Database, s: &Schema, path: &std::path::Path) -> (Vec<i64>, Vec<i64>) {
    let e = s.reader("meet.Photo").unwrap().path("e").unwrap();
    let mut near: Vec<i64> = db
        .query("meet.Photo")
        .nearest(e, &[0.0, 0.0], 10)
        .all()
        .unwrap()
        .iter()
        .map(|n| n.rowid)
        .collect();
    near.sort_unstable();
    let mut hits: Vec<i64> = db
        .query("meet.Photo")
        .filter(Expr::search("sunset"))
        .all()
        .unwrap()
        .iter()
        .map(|o| o.rowid)
        .collect();
    hits.sort_unstable();
    let conn = rusqlite::Connection::open(path).unwrap();
    let schema = Arc::new(s.clone());
    assert!(inspect::vector_drift(&conn, &schema, 10)
        .unwrap()
        .is_empty());
    assert!(inspect::search_drift(&conn, &schema, 10)
        .unwrap()
        .is_empty());
    (near, hits)
}

#[test]
fn a_cascade_keeps_search_and_nearest_equal_to_the_rows() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("meet.db");
    let s = Schema::parse(SCHEMA, "meet.fbs").unwrap();
    let db = Database::open(&path, s.clone(), StoreOptions::default()).unwrap();
    let rows = [
        album(&s, "trip"),
        album(&s, "home"),
        photo(&s, "p1", "trip", "sunset at sea", [1.0, 0.0]),
        photo(&s, "p2", "trip", "sunset in town", [2.0, 0.0]),
        photo(&s, "p3", "home", "sunset from the balcony", [3.0, 0.0]),
    ];
    db.write(move |t| {
        for (i, r) in rows.into_iter().enumerate() {
            let c = if i < 2 { "meet.Album" } else { "meet.Photo" };
            t.insert_bytes(c, r)?;
        }
        Ok(())
    })
    .wait()
    .unwrap();
    let all = db.query("meet.Photo").all().unwrap();
    let rowid = |id: &str| {
        all.iter()
            .find(|o| o.bytes.windows(id.len()).any(|w| w == id.as_bytes()))
            .unwrap()
            .rowid
    };
    let (p1, p2, p3) = (rowid("p1"), rowid("p2"), rowid("p3"));
    assert_eq!(found(&db, &s, &path), (vec![p1, p2, p3], vec![p1, p2, p3]));
    // The album goes, and its photos with it: from the rows, the full-text
    // index and the vector table, in the same transaction.
    db.write(|t| t.delete_key("meet.Album", &["trip".into()]).map(|_| ()))
        .wait()
        .unwrap();
    assert_eq!(found(&db, &s, &path), (vec![p3], vec![p3]));
    // A photo whose key changes keeps its vector and its words under the new key.
    let moved = photo(&s, "p9", "home", "", [0.0, 0.0]);
    db.write(move |t| {
        t.change_bytes("meet.Photo", &["p3".into()], &moved, &["id"])
            .map(|_| ())
    })
    .wait()
    .unwrap();
    let (near, hits) = found(&db, &s, &path);
    assert_eq!((near.len(), hits.len()), (1, 1));
    db.close().wait().unwrap();
}
