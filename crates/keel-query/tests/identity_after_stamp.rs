//! A good file is never refused as foreign after keel stamps it.
//!
//! Stamping a file (a keel file from before the identity stamp, or an adopted file
//! of another application) commits into the WAL that is already there, behind page-1
//! images that carry no keel stamp. Once a checkpoint copied every frame, the file is
//! stamped while its WAL still holds those older images; a kill before the next write
//! (which would restart the WAL) leaves both on disk. The next open must accept them.
//! Real SQLite files throughout; the kill is a copy of the files taken while the
//! store is open, which is what a kill leaves.

use std::path::{Path, PathBuf};
use std::time::Duration;

use keel_example_blog::blog::Post;
use keel_query::{Database, StoreOptions};
use keel_storage::CheckpointMode;

fn quiet() -> StoreOptions {
    StoreOptions::default().idle_checkpoint_after(Duration::from_secs(3600))
}

fn sibling(p: &Path, suffix: &str) -> PathBuf {
    let mut s = p.as_os_str().to_owned();
    s.push(suffix);
    PathBuf::from(s)
}

/// Copy the database and its WAL as a kill of the process holding them leaves them
/// (the `-shm` is rebuilt from the WAL by the next open).
fn copy_as_killed(from: &Path, to: &Path) {
    std::fs::copy(from, to).unwrap();
    std::fs::copy(sibling(from, "-wal"), sibling(to, "-wal")).unwrap();
}

/// The page-1 images in a WAL carry `application_id` at offset 68 of the page:
/// how many of them are not keel's.
fn unstamped_page1_frames(wal: &Path) -> usize {
    let b = std::fs::read(wal).unwrap();
    let page = u32::from_be_bytes([b[8], b[9], b[10], b[11]]) as usize;
    b[32..]
        .chunks_exact(24 + page)
        .filter(|f| u32::from_be_bytes([f[0], f[1], f[2], f[3]]) == 1)
        .filter(|f| {
            u32::from_be_bytes([f[24 + 68], f[25 + 68], f[26 + 68], f[27 + 68]])
                != keel_storage::KEEL_APPLICATION_ID
        })
        .count()
}

/// Close a plain SQLite connection without the checkpoint SQLite runs when the last
/// connection closes: its WAL stays, page 1 in it, as after a kill.
fn keep_wal(c: rusqlite::Connection) {
    c.set_db_config(
        rusqlite::config::DbConfig::SQLITE_DBCONFIG_NO_CKPT_ON_CLOSE,
        true,
    )
    .unwrap();
    drop(c);
}

#[test]
fn item1_upgraded_file_with_page1_in_wal_is_not_refused() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("legacy.db");
    let db = Database::open_for::<Post>(&path, quiet()).unwrap();
    db.write(|t| t.insert(&Post::builder().id("old").build()).map(|_| ()))
        .wait()
        .unwrap();
    db.close().wait().unwrap();
    // A keel from before the stamp: application_id 0, and a WAL holding page 1 (the
    // old build was killed after a write).
    let c = rusqlite::Connection::open(&path).unwrap();
    c.execute_batch("PRAGMA application_id = 0; PRAGMA user_version = 0;")
        .unwrap();
    c.execute_batch(
        "PRAGMA wal_checkpoint(TRUNCATE); PRAGMA user_version = 0; CREATE TABLE legacy_note(x);",
    )
    .unwrap();
    keep_wal(c);
    assert!(unstamped_page1_frames(&sibling(&path, "-wal")) > 0);

    // The new build opens it and stamps it; the idle checkpoint copies every frame;
    // the process is killed before any write.
    let db = Database::open_for::<Post>(&path, quiet()).unwrap();
    let o = db.store().checkpoint(CheckpointMode::Passive).unwrap();
    assert_eq!(o.checkpointed_frames, o.wal_frames, "{o:?}");
    let killed = dir.path().join("killed.db");
    copy_as_killed(&path, &killed);
    db.close().wait().unwrap();
    assert!(unstamped_page1_frames(&sibling(&killed, "-wal")) > 0);

    let db = Database::open_for::<Post>(&killed, quiet())
        .unwrap_or_else(|e| panic!("the upgraded file was refused: {e}"));
    assert_eq!(db.fetch::<Post>().count().unwrap(), 1);
    db.close().wait().unwrap();
}

#[test]
fn item1_adopted_file_with_page1_in_wal_is_not_refused() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("contacts.db");
    // Another app's WAL-mode file, its WAL holding page 1 as after a kill.
    let c = rusqlite::Connection::open(&path).unwrap();
    c.execute_batch(
        "PRAGMA journal_mode = WAL; CREATE TABLE contacts(name TEXT); INSERT INTO contacts VALUES ('ada');",
    )
    .unwrap();
    keep_wal(c);
    assert!(unstamped_page1_frames(&sibling(&path, "-wal")) > 0);

    let db = Database::open_for::<Post>(&path, quiet().adopt_foreign(true)).unwrap();
    db.write(|t| t.insert(&Post::builder().id("mine").build()).map(|_| ()))
        .wait()
        .unwrap();
    let o = db.store().checkpoint(CheckpointMode::Passive).unwrap();
    assert_eq!(o.checkpointed_frames, o.wal_frames, "{o:?}");
    let killed = dir.path().join("killed.db");
    copy_as_killed(&path, &killed);
    db.close().wait().unwrap();

    // Neither refused nor, with recover_corrupt, moved aside for an empty store.
    let db = Database::open_for::<Post>(&killed, quiet().recover_corrupt(true))
        .unwrap_or_else(|e| panic!("the adopted file was refused: {e}"));
    assert!(db.store().open_report().moved_aside.is_none());
    assert_eq!(db.fetch::<Post>().count().unwrap(), 1);
    db.close().wait().unwrap();
    let c = rusqlite::Connection::open(&killed).unwrap();
    let n: i64 = c
        .query_row("SELECT count(*) FROM contacts", [], |r| r.get(0))
        .unwrap();
    assert_eq!(n, 1, "the adopted app's data is kept");
}

/// What the fix must not loosen: a WAL whose last page-1 image is not keel's, beside
/// a stamped file, is still another database's WAL.
#[test]
fn item1_a_foreign_wal_after_keel_images_is_still_refused() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("mine.db");
    let db = Database::open_for::<Post>(&path, quiet()).unwrap();
    db.write(|t| t.insert(&Post::builder().id("a").build()).map(|_| ()))
        .wait()
        .unwrap();
    db.close().wait().unwrap();
    // Another application's WAL (application_id 0), put beside the stamped file.
    let other = dir.path().join("other.db");
    let c = rusqlite::Connection::open(&other).unwrap();
    c.execute_batch("PRAGMA journal_mode = WAL; CREATE TABLE t(x); INSERT INTO t VALUES (1);")
        .unwrap();
    keep_wal(c);
    std::fs::copy(sibling(&other, "-wal"), sibling(&path, "-wal")).unwrap();
    let r = Database::open_for::<Post>(&path, quiet());
    assert!(
        matches!(
            &r,
            Err(keel_query::Error::Storage(
                keel_storage::Error::ForeignWal { .. }
            ))
        ),
        "{r:?}"
    );
}
