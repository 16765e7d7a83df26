//! Reads inside a write closure: through the `Txn` they see the group's earlier
//! closures and the closure's own writes; through the `Database` they would use a
//! pooled connection and miss them, so they fail loudly (never an older state).
//! Also: an incompatible schema at open is the documented `Error::Schema`.

use std::sync::mpsc;

use keel::prelude::*;
use keel_example_blog::blog::Post;

fn open(dir: &tempfile::TempDir) -> Database {
    Database::open_for::<Post>(dir.path().join("w.db"), StoreOptions::default()).unwrap()
}

/// Two closures queued behind a blocker land in one group commit: the second one's
/// `db.fetch()` must not silently show the state before the first one's insert.
#[test]
fn db_fetch_inside_a_closure_never_shows_an_older_state() {
    let dir = tempfile::tempdir().unwrap();
    let db = open(&dir);
    let (started_tx, started_rx) = mpsc::channel();
    let (go_tx, go_rx) = mpsc::channel::<()>();
    // Hold the writer so the next two closures queue up behind it.
    let blocker = db.write(move |_| {
        started_tx.send(()).unwrap();
        go_rx.recv().unwrap();
        Ok(())
    });
    started_rx.recv().unwrap();
    let first = db.write(|t| t.insert(&Post::builder().id("a").build()).map(|_| ()));
    let db2 = db.clone();
    let second = db.write(move |t| {
        // Through the Txn: sees the first closure's insert.
        let via_txn = t.fetch::<Post>().count()?;
        // Through the Database: an error, not the committed state (0 posts).
        let via_db = db2.fetch::<Post>().count();
        let via_get = db2.get::<Post>(&"a".to_string());
        let via_async = db2.fetch::<Post>().count_async().wait();
        Ok((via_txn, via_db, via_get.is_err(), via_async.is_err()))
    });
    go_tx.send(()).unwrap();
    blocker.wait().unwrap();
    first.wait().unwrap();
    let (via_txn, via_db, get_failed, async_failed) = second.wait().unwrap();
    assert_eq!(
        via_txn, 1,
        "txn.fetch sees the earlier closure of the group"
    );
    match via_db {
        Err(Error::Unsupported { hint, .. }) => assert!(hint.contains("txn.fetch()"), "{hint}"),
        other => panic!("db.fetch inside a write closure gave {other:?}"),
    }
    assert!(get_failed && async_failed);
    // Outside the closure the database reads normally again.
    assert_eq!(db.fetch::<Post>().count().unwrap(), 1);
}

#[test]
fn incompatible_schema_at_open_is_error_schema() {
    use keel::schema::Schema;
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("s.db");
    let v1 = Schema::parse(
        "table T { id: int (primary); n: int; } root_type T;",
        "v1.fbs",
    )
    .unwrap();
    let db = Database::open(&path, v1, StoreOptions::default()).unwrap();
    db.close().wait().unwrap();
    // `n` changes type: not a valid FlatBuffers evolution.
    let v2 = Schema::parse(
        "table T { id: int (primary); n: string; } root_type T;",
        "v2.fbs",
    )
    .unwrap();
    match Database::open(&path, v2, StoreOptions::default()) {
        Err(Error::Schema { message, .. }) => assert!(!message.is_empty()),
        Err(other) => panic!("expected Error::Schema, got {other:?}"),
        Ok(_) => panic!("an incompatible schema opened"),
    }
}

/// An async fetch on a snapshot's query cannot leave the snapshot's thread: it is an
/// `Unsupported` error that says what to call instead — not `Closed`, which would
/// send a reader hunting for a close that never happened.
#[test]
fn async_fetch_inside_a_snapshot_is_unsupported_not_closed() {
    let dir = tempfile::tempdir().unwrap();
    let db = Database::open_for::<Post>(dir.path().join("s.db"), StoreOptions::default()).unwrap();
    let err = db
        .snapshot(|s| Ok(s.fetch::<Post>().count_async().wait()))
        .unwrap()
        .unwrap_err();
    assert!(matches!(err, Error::Unsupported { .. }), "{err:?}");
    assert!(err.to_string().contains("use the blocking call"), "{err}");
    assert!(!err.is_closed());
    db.close().wait().unwrap();
}
