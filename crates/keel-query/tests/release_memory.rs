//! `Database::release_memory`, as an app calls it on a memory warning: the vector
//! copies and the idle reader connections go, nothing is lost, and each is
//! rebuilt by the next query that needs it.

use keel_query::{Database, StoreOptions};
use keel_schema::Schema;

#[test]
fn item8_release_memory_drops_caches_and_queries_rebuild_them() {
    let dir = tempfile::tempdir().unwrap();
    let schema = Schema::parse(
        "table T { id: int (primary); e: [float] (vector: 4); } root_type T;",
        "t.fbs",
    )
    .unwrap();
    let db = Database::open(
        dir.path().join("m.db"),
        schema.clone(),
        StoreOptions::default(),
    )
    .unwrap();
    let reader = schema.reader("T").unwrap();
    let objs: Vec<Vec<u8>> = (0..200)
        .map(|i| {
            let f = i as f32;
            reader
                .encode_json(&serde_json::json!({"id": i, "e": [f, 1.0, f * 0.5, 2.0]}))
                .unwrap()
        })
        .collect();
    db.write(move |t| {
        for o in objs {
            t.insert_bytes("T", o)?;
        }
        Ok(())
    })
    .wait()
    .unwrap();
    let path = schema.reader("T").unwrap().path("e").unwrap();
    let query = [10.0, 1.0, 5.0, 2.0];
    let first: Vec<i64> = db
        .query("T")
        .nearest(path.clone(), &query, 5)
        .all()
        .unwrap()
        .iter()
        .map(|n| n.rowid)
        .collect();
    let released = db.release_memory();
    assert!(released.vector_copy_bytes > 0, "{released:?}");
    assert!(released.reader_connections >= 1, "{released:?}");
    // Nothing more to give back right away.
    assert_eq!(db.release_memory().vector_copy_bytes, 0);
    let again: Vec<i64> = db
        .query("T")
        .nearest(path, &query, 5)
        .all()
        .unwrap()
        .iter()
        .map(|n| n.rowid)
        .collect();
    assert_eq!(first, again);
    assert_eq!(db.query("T").count().unwrap(), 200);
    db.close().wait().unwrap();
}
