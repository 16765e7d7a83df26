//! At the object store: a plain reopen over a WAL a killed run
//! left (an app and its extension rarely leave none) changes nothing in its schema
//! step, dictionary, change log and identity stamp included, so the open ends its
//! schema transaction at once instead of holding the WAL write lock through the
//! barrier sync (`crates/keel-storage/tests/parallel_open.rs` shows the lock with
//! two processes).

use std::path::{Path, PathBuf};
use std::time::Duration;

use keel_example_blog::blog::Post;
use keel_query::{Database, StoreOptions};
use keel_storage::OpenPhase;

fn sibling(p: &Path, suffix: &str) -> PathBuf {
    let mut s = p.as_os_str().to_owned();
    s.push(suffix);
    PathBuf::from(s)
}

#[test]
fn item6_object_store_reopen_leaves_the_write_lock_free_during_the_barrier() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("app.db");
    let opts = || {
        StoreOptions::default()
            .idle_checkpoint_after(Duration::from_secs(3600))
            .share_changes(true)
    };
    let db = Database::open_for::<Post>(&path, opts()).unwrap();
    db.write(|t| t.insert(&Post::builder().id("a").build()).map(|_| ()))
        .wait()
        .unwrap();
    db.dictionary().set("launches", 1).unwrap();
    db.dictionary().sync().wait().unwrap();
    // Killed: the files as they are while the store is open, WAL included.
    let killed = dir.path().join("killed.db");
    std::fs::copy(&path, &killed).unwrap();
    std::fs::copy(sibling(&path, "-wal"), sibling(&killed, "-wal")).unwrap();
    db.close().wait().unwrap();

    let db = Database::open_for::<Post>(&killed, opts()).unwrap();
    let report = db.store().open_report();
    assert!(report.wal_bytes_at_open > 0, "{report}");
    let schema = report.phase(OpenPhase::Schema).unwrap();
    assert!(
        schema
            .note
            .contains("nothing changed, write lock released at once"),
        "{report}"
    );
    assert_eq!(db.fetch::<Post>().count().unwrap(), 1);
    db.close().wait().unwrap();
}
