//! Storing bodies without their key string changed the layout, so
//! it is a new storage format. A build that reads format 2 would hand such a body
//! out as stored, without its key; with format 3 recorded it refuses the file
//! instead. Files of format 2 (whole bodies) still open, read the same objects and
//! are brought to format 3 without a rewrite. Real SQLite files throughout.

use std::path::Path;
use std::time::Duration;

use keel_example_blog::blog::Post;
use keel_query::{inspect, Database, Error, StoreOptions};

fn quiet() -> StoreOptions {
    StoreOptions::default().idle_checkpoint_after(Duration::from_secs(3600))
}

fn recorded_format(path: &Path) -> i64 {
    rusqlite::Connection::open(path)
        .unwrap()
        .query_row(
            "SELECT value FROM keel_meta WHERE key = 'format'",
            [],
            |r| r.get(0),
        )
        .unwrap()
}

/// `(body bytes, key)` of every stored post, as plain SQLite sees them.
fn stored_bodies(path: &Path) -> Vec<(Vec<u8>, String)> {
    let c = rusqlite::Connection::open(path).unwrap();
    let table: String = c
        .query_row(
            "SELECT name FROM sqlite_schema WHERE type = 'table' AND name LIKE '%Post'",
            [],
            |r| r.get(0),
        )
        .unwrap();
    let mut st = c
        .prepare(&format!("SELECT body, k0 FROM \"{table}\" ORDER BY k0"))
        .unwrap();
    let rows = st
        .query_map([], |r| Ok((r.get(0)?, r.get(1)?)))
        .unwrap()
        .collect::<rusqlite::Result<Vec<_>>>()
        .unwrap();
    rows
}

#[test]
fn item9_bodies_without_the_key_are_a_new_format() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("new.db");
    let db = Database::open_for::<Post>(&path, quiet()).unwrap();
    let post = Post::builder().id("post-with-a-string-key").build();
    db.write(move |t| t.insert(&post).map(|_| ()))
        .wait()
        .unwrap();
    db.close().wait().unwrap();
    // The body was stored without its key string: the layout format 2 does not have.
    let (body, key) = stored_bodies(&path).remove(0);
    assert!(
        !body.windows(key.len()).any(|w| w == key.as_bytes()),
        "this test needs a stripped body"
    );
    assert!(
        recorded_format(&path) > 2,
        "a file with stripped bodies must not say format 2: a format-2 build would misread it"
    );
    assert_eq!(recorded_format(&path), inspect::STORAGE_FORMAT);

    // A newer format than this build knows is refused, as a format-2 build now
    // refuses this file.
    let c = rusqlite::Connection::open(&path).unwrap();
    c.execute(
        "UPDATE keel_meta SET value = ?1 WHERE key = 'format'",
        [inspect::STORAGE_FORMAT + 1],
    )
    .unwrap();
    drop(c);
    let r = Database::open_for::<Post>(&path, quiet());
    match r {
        Err(e @ Error::Schema { .. }) => assert!(e.to_string().contains("newer keel"), "{e}"),
        other => panic!("expected a schema error, got {:?}", other.map(|_| ())),
    }
}

#[test]
fn item9_a_format_2_file_with_whole_bodies_still_opens_and_moves_up() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("old.db");
    let db = Database::open_for::<Post>(&path, quiet()).unwrap();
    let post = Post::builder()
        .id("whole")
        .title("written whole")
        .priority(7)
        .build();
    let whole = post.encode();
    db.write(move |t| t.insert(&post).map(|_| ()))
        .wait()
        .unwrap();
    db.close().wait().unwrap();
    // What a format-2 build left: the whole buffer in `body`, format 2 recorded.
    let c = rusqlite::Connection::open(&path).unwrap();
    let table: String = c
        .query_row(
            "SELECT name FROM sqlite_schema WHERE type = 'table' AND name LIKE '%Post'",
            [],
            |r| r.get(0),
        )
        .unwrap();
    c.execute(&format!("UPDATE \"{table}\" SET body = ?1"), [&whole])
        .unwrap();
    c.execute("UPDATE keel_meta SET value = 2 WHERE key = 'format'", [])
        .unwrap();
    drop(c);

    let db = Database::open_for::<Post>(&path, quiet()).unwrap();
    let report = db.store().open_report().to_string();
    assert!(
        !report.contains("index columns of"),
        "format 2 → 3 rewrites nothing: {report}"
    );
    let got = db.get::<Post>(&"whole".to_string()).unwrap().unwrap();
    assert_eq!(got.encode(), whole);
    assert_eq!(got.priority, 7);
    db.close().wait().unwrap();
    assert_eq!(recorded_format(&path), inspect::STORAGE_FORMAT);
    assert_eq!(
        stored_bodies(&path)[0].0,
        whole,
        "the whole body is kept as it was"
    );
}
