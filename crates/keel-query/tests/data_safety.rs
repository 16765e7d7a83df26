//! Data safety at the edges: a full disk, damaged and foreign files, a
//! unique index that cannot be built, and an older build opening a newer file.
//! Real SQLite files throughout; the full disk is keel-storage's simulated disk
//! (feature `sim`), which fails every write that would grow a file with `ENOSPC`.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use keel_example_blog::blog::Post;
use keel_query::{Database, Error, Schema, StoreOptions};
use keel_storage::sim::SimDisk;

fn evo(name: &str) -> Schema {
    let p = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../examples/blog/schema/evolution")
        .join(name);
    Schema::from_file(&p).unwrap()
}

fn note(schema: &Schema, json: serde_json::Value) -> Vec<u8> {
    schema
        .reader("evo.Note")
        .unwrap()
        .encode_json(&json)
        .unwrap()
}

fn quiet() -> StoreOptions {
    StoreOptions::default().idle_checkpoint_after(Duration::from_secs(3600))
}

fn sibling(p: &Path, suffix: &str) -> PathBuf {
    let mut s = p.as_os_str().to_owned();
    s.push(suffix);
    PathBuf::from(s)
}

fn moved_aside(dir: &Path) -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.contains(".corrupt-"))
        .collect();
    v.sort();
    v
}

// ---------------------------------------------------------------- full disk

/// Open `path` (made durable on the real disk first) on a fresh simulated disk.
fn open_on_sim(path: &Path) -> (Database, Arc<SimDisk>) {
    Database::open_for::<Post>(path, StoreOptions::default())
        .unwrap()
        .close()
        .wait()
        .unwrap();
    let disk = Arc::new(SimDisk::new());
    let db = Database::open_for::<Post>(path, quiet().sim_disk(Arc::clone(&disk))).unwrap();
    (db, disk)
}

#[test]
fn on_a_full_disk_close_reports_the_dictionary_values_it_could_not_persist() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("full.db");
    let (db, disk) = open_on_sim(&path);
    let d = db.dictionary();
    for i in 0..25 {
        d.set(&format!("early{i:02}"), i).unwrap();
    }
    d.sync().wait().unwrap();
    disk.set_full(true);
    for i in 0..25 {
        d.set(&format!("late{i:02}"), i).unwrap();
    }
    let synced = d.sync().wait();
    assert!(synced.is_err(), "sync on a full disk must fail: {synced:?}");
    // Still readable: pending in memory.
    assert_eq!(d.get::<i32>("late07").unwrap(), Some(7));
    let closed = db.close().wait();
    let Err(Error::DictionaryNotPersisted { keys, count, .. }) = closed else {
        panic!("close on a full disk must report the lost values, got {closed:?}");
    };
    assert_eq!(count, 25);
    let want: Vec<String> = (0..25).map(|i| format!("late{i:02}")).collect();
    assert_eq!(keys, want);
    drop(d);
    drop(db);

    // Space is freed; every value not reported lost is there.
    disk.set_full(false);
    let db = Database::open_for::<Post>(&path, StoreOptions::default()).unwrap();
    let d = db.dictionary();
    for i in 0..25 {
        assert_eq!(d.get::<i32>(&format!("early{i:02}")).unwrap(), Some(i));
    }
    db.close().wait().unwrap();
}

#[test]
fn values_that_met_a_full_disk_are_persisted_once_space_is_freed_before_close() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("freed.db");
    let (db, disk) = open_on_sim(&path);
    let d = db.dictionary();
    disk.set_full(true);
    for i in 0..50 {
        d.set(&format!("k{i:02}"), i).unwrap();
    }
    assert!(d.sync().wait().is_err());
    assert!(d.sync().wait().is_err(), "still full: still failing");
    disk.set_full(false);
    assert_eq!(
        d.get::<i32>("k00").unwrap(),
        Some(0),
        "pending, still visible"
    );
    // Nothing set since: the close alone persists what the failed flushes kept.
    db.close().wait().unwrap();
    drop(d);
    drop(db);
    let db = Database::open_for::<Post>(&path, StoreOptions::default()).unwrap();
    let d = db.dictionary();
    for i in 0..50 {
        assert_eq!(
            d.get::<i32>(&format!("k{i:02}")).unwrap(),
            Some(i),
            "k{i:02}"
        );
    }
    db.close().wait().unwrap();
}

// ------------------------------------------------------ unique index builds

#[test]
fn a_unique_index_that_cannot_be_built_fails_the_open_naming_a_duplicate() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("u.db");
    let plain = Schema::parse(
        "namespace u; table T { id: string (primary); email: string; } root_type T;",
        "t.fbs",
    )
    .unwrap();
    let unique = Schema::parse(
        "namespace u; table T { id: string (primary); email: string (unique); } root_type T;",
        "t.fbs",
    )
    .unwrap();
    let t = plain.reader("u.T").unwrap();
    let db = Database::open(&path, plain.clone(), quiet()).unwrap();
    let rows: Vec<Vec<u8>> = [("a", "x@k.el"), ("b", "y@k.el"), ("c", "x@k.el")]
        .iter()
        .map(|(id, e)| {
            t.encode_json(&serde_json::json!({"id": id, "email": e}))
                .unwrap()
        })
        .collect();
    db.write(move |txn| {
        for r in rows {
            txn.insert_bytes("u.T", r)?;
        }
        Ok(())
    })
    .wait()
    .unwrap();
    db.close().wait().unwrap();

    let r = Database::open(&path, unique.clone(), quiet());
    match r {
        Err(Error::UniqueIndexViolated {
            collection,
            value,
            rowids,
            ..
        }) => {
            assert_eq!(collection, "u.T");
            assert_eq!(value, keel_query::Value::Text("x@k.el".into()));
            assert_eq!(rowids, (1, 3));
        }
        other => panic!("expected UniqueIndexViolated, got {other:?}"),
    }
    // Nothing changed: the old schema still opens, no index was recorded.
    let db = Database::open(&path, plain, quiet()).unwrap();
    assert!(db.index_states().unwrap().is_empty());
    assert_eq!(db.query("u.T").count().unwrap(), 3);
    db.close().wait().unwrap();
}

// ------------------------------------------------- an older build opens a file

#[test]
fn an_older_schema_opens_a_newer_file_without_destroying_what_the_newer_recorded() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("older.db");
    let (v1, v2) = (evo("post_v1.fbs"), evo("post_v2.fbs"));
    let db = Database::open(&path, v2.clone(), quiet()).unwrap();
    let b = note(
        &v2,
        serde_json::json!({"id": "n1", "stars": 5, "views": 99}),
    );
    db.write(move |t| t.insert_bytes("evo.Note", b).map(|_| ()))
        .wait()
        .unwrap();
    db.close().wait().unwrap();

    // An app extension built with v1 opens it, reads, writes.
    let db = Database::open(&path, v1.clone(), quiet()).unwrap();
    assert!(db.get_bytes("evo.Note", &["n1".into()]).unwrap().is_some());
    let b = note(&v1, serde_json::json!({"id": "n2", "stars": 4}));
    db.write(move |t| {
        t.insert_bytes("evo.Note", b)?;
        t.delete_key("evo.Note", &["n1".into()])?;
        Ok(())
    })
    .wait()
    .unwrap();
    db.close().wait().unwrap();

    // The newer schema, its index and consistent index entries survived.
    {
        let c = rusqlite::Connection::open(&path).unwrap();
        let stored = keel_query::inspect::stored_schema(&c).unwrap().unwrap();
        assert_eq!(
            Schema::parse(&stored, "s").unwrap().fingerprint(),
            v2.fingerprint()
        );
        keel_query::inspect::register_functions(&c, Arc::new(v2.clone())).unwrap();
        let ok: String = c
            .query_row("PRAGMA integrity_check", [], |r| r.get(0))
            .unwrap();
        assert_eq!(ok, "ok");
        let n: i64 = c
            .query_row(
                "SELECT count(*) FROM sqlite_schema WHERE type='index' AND name='evo.Note#2'",
                [],
                |r| r.get(0),
            )
            .unwrap();
        assert_eq!(n, 1, "v2's index on stars must survive the v1 open");
        // The v1 build wrote v2's index column for its object, from the bytes.
        let bad = keel_query::inspect::column_mismatches(&c, &Arc::new(v2.clone()), 10).unwrap();
        assert!(bad.is_empty(), "{bad:?}");
        let stars: i64 = c
            .query_row("SELECT f2 FROM \"evo.Note\" WHERE k0 = 'n2'", [], |r| {
                r.get(0)
            })
            .unwrap();
        assert_eq!(stars, 4);
    }
    let db = Database::open(&path, v2.clone(), quiet()).unwrap();
    assert_eq!(db.query("evo.Note").count().unwrap(), 1);
    db.close().wait().unwrap();
}

// ------------------------------------------------------------ damaged files

/// Overwrite the stored schema's text inside the file with bytes that are not UTF-8.
fn damage_stored_schema(path: &Path) {
    let mut bytes = std::fs::read(path).unwrap();
    let needle = b"table Note";
    let at = bytes
        .windows(needle.len())
        .position(|w| w == needle)
        .expect("stored schema text in the file");
    for b in &mut bytes[at..at + needle.len()] {
        *b = 0xff;
    }
    std::fs::write(path, bytes).unwrap();
}

#[test]
fn damage_where_the_stored_schema_lives_is_corruption_and_recover_corrupt_moves_it_aside() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("dmg.db");
    let v1 = evo("post_v1.fbs");
    Database::open(&path, v1.clone(), quiet())
        .unwrap()
        .close()
        .wait()
        .unwrap();
    damage_stored_schema(&path);
    let before = std::fs::read(&path).unwrap();
    let r = Database::open(&path, v1.clone(), quiet());
    assert!(
        matches!(&r, Err(Error::Storage(e)) if matches!(e, keel_storage::Error::Corrupt { .. })),
        "{r:?}"
    );
    assert_eq!(std::fs::read(&path).unwrap(), before, "refused: untouched");
    let db = Database::open(&path, v1, quiet().recover_corrupt(true)).unwrap();
    assert!(db.store().open_report().moved_aside.is_some());
    assert_eq!(moved_aside(dir.path()).len(), 1);
    db.close().wait().unwrap();
}

// ------------------------------------------------------------ foreign files

/// A keel database with a few objects, its WAL still holding them (the store is
/// open): returns the WAL's bytes, then closes it.
fn wal_of_another_database(dir: &Path) -> Vec<u8> {
    let other = dir.join("other.db");
    let db = Database::open_for::<Post>(&other, quiet()).unwrap();
    db.write(|t| {
        for i in 0..20 {
            t.insert(&Post::builder().id(format!("other{i}")).build())?;
        }
        Ok(())
    })
    .wait()
    .unwrap();
    let wal = std::fs::read(sibling(&other, "-wal")).unwrap();
    assert!(wal.len() > 32);
    db.close().wait().unwrap();
    wal
}

#[test]
fn a_wal_of_another_database_is_refused_untouched_and_moved_aside_on_request() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("mine.db");
    let db = Database::open_for::<Post>(&path, quiet()).unwrap();
    db.write(|t| t.insert(&Post::builder().id("mine").build()).map(|_| ()))
        .wait()
        .unwrap();
    db.close().wait().unwrap();
    let foreign = wal_of_another_database(dir.path());
    std::fs::write(sibling(&path, "-wal"), &foreign).unwrap();
    let (db_before, wal_before) = (std::fs::read(&path).unwrap(), foreign.clone());

    let r = Database::open_for::<Post>(&path, quiet());
    assert!(
        matches!(
            &r,
            Err(Error::Storage(keel_storage::Error::ForeignWal { .. }))
        ),
        "{r:?}"
    );
    assert_eq!(std::fs::read(&path).unwrap(), db_before);
    assert_eq!(std::fs::read(sibling(&path, "-wal")).unwrap(), wal_before);

    let db = Database::open_for::<Post>(&path, quiet().recover_corrupt(true)).unwrap();
    assert_eq!(db.fetch::<Post>().count().unwrap(), 0, "a fresh database");
    db.close().wait().unwrap();
    let aside = moved_aside(dir.path());
    assert!(aside.iter().any(|n| n.ends_with("-wal")), "{aside:?}");
    let main = aside
        .iter()
        .find(|n| !n.ends_with("-wal") && !n.ends_with("-shm"))
        .unwrap();
    assert_eq!(std::fs::read(dir.path().join(main)).unwrap(), db_before);
}

#[test]
fn a_backup_restored_under_a_newer_wal_is_refused_untouched() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("restored.db");
    let db = Database::open_for::<Post>(&path, quiet()).unwrap();
    db.write(|t| t.insert(&Post::builder().id("a").build()).map(|_| ()))
        .wait()
        .unwrap();
    db.close().wait().unwrap();
    let backup = std::fs::read(&path).unwrap(); // a clean copy: the file is all of it

    let db = Database::open_for::<Post>(&path, quiet()).unwrap();
    db.write(|t| t.insert(&Post::builder().id("b").build()).map(|_| ()))
        .wait()
        .unwrap();
    // Every frame reaches the file; the next write starts a new WAL.
    let o = db
        .store()
        .checkpoint(keel_storage::CheckpointMode::Truncate)
        .unwrap();
    assert!(!o.busy);
    db.write(|t| t.insert(&Post::builder().id("c").build()).map(|_| ()))
        .wait()
        .unwrap();
    let newer_wal = std::fs::read(sibling(&path, "-wal")).unwrap();
    db.close().wait().unwrap();

    // The device restores the backup of the file; the newer WAL stays beside it.
    std::fs::write(&path, &backup).unwrap();
    std::fs::write(sibling(&path, "-wal"), &newer_wal).unwrap();
    let r = Database::open_for::<Post>(&path, quiet());
    match &r {
        Err(Error::Storage(keel_storage::Error::ForeignWal { detail, .. })) => {
            assert!(detail.contains("older"), "{detail}")
        }
        other => panic!("expected ForeignWal, got {other:?}"),
    }
    assert_eq!(std::fs::read(&path).unwrap(), backup, "untouched");
    assert_eq!(std::fs::read(sibling(&path, "-wal")).unwrap(), newer_wal);

    // Without the stale WAL the backup is a consistent database of its own.
    std::fs::remove_file(sibling(&path, "-wal")).unwrap();
    let _ = std::fs::remove_file(sibling(&path, "-shm"));
    let db = Database::open_for::<Post>(&path, quiet()).unwrap();
    assert_eq!(db.fetch::<Post>().count().unwrap(), 1);
    db.close().wait().unwrap();
}

#[test]
fn a_wal_left_by_a_crash_beside_its_own_file_still_opens() {
    // The same WAL as above, but beside the file it was written for (a crash: the
    // file and its WAL both current): it belongs, and every commit is there.
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("crashed.db");
    let copy = dir.path().join("copy.db");
    let db = Database::open_for::<Post>(&path, quiet()).unwrap();
    for id in ["a", "b"] {
        db.write(move |t| t.insert(&Post::builder().id(id).build()).map(|_| ()))
            .wait()
            .unwrap();
        db.store()
            .checkpoint(keel_storage::CheckpointMode::Truncate)
            .unwrap();
    }
    db.write(|t| t.insert(&Post::builder().id("c").build()).map(|_| ()))
        .wait()
        .unwrap();
    // A consistent copy of a live database: file and WAL, no checkpoint in between.
    std::fs::copy(&path, &copy).unwrap();
    std::fs::copy(sibling(&path, "-wal"), sibling(&copy, "-wal")).unwrap();
    db.close().wait().unwrap();
    let db = Database::open_for::<Post>(&copy, quiet()).unwrap();
    assert_eq!(db.fetch::<Post>().count().unwrap(), 3);
    db.close().wait().unwrap();
}

#[test]
fn a_second_process_opening_while_the_first_writes_and_checkpoints_is_never_refused() {
    // An app and its extension: one writes, checkpoints and restarts the WAL (epoch
    // bumps) while the other opens and closes the same file over and over.
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("shared.db");
    let app = Database::open_for::<Post>(&path, quiet()).unwrap();
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let (p2, s2) = (path.clone(), Arc::clone(&stop));
    let extension = std::thread::spawn(move || {
        let mut opens = 0;
        while !s2.load(std::sync::atomic::Ordering::Relaxed) || opens < 20 {
            let db = Database::open_for::<Post>(&p2, quiet().busy_timeout(Duration::from_secs(10)))
                .unwrap_or_else(|e| panic!("open {opens} refused: {e}"));
            db.close().wait().unwrap();
            opens += 1;
        }
        opens
    });
    for i in 0..60 {
        app.write(move |t| {
            t.insert(&Post::builder().id(format!("p{i}")).build())
                .map(|_| ())
        })
        .wait()
        .unwrap();
        if i % 3 == 0 {
            let _ = app
                .store()
                .checkpoint(keel_storage::CheckpointMode::Truncate);
        }
    }
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let opens = extension.join().unwrap();
    assert!(opens >= 20);
    assert_eq!(app.fetch::<Post>().count().unwrap(), 60);
    app.close().wait().unwrap();
}

#[test]
fn a_plain_sqlite_file_of_another_app_is_refused_unless_adoption_is_asked_for() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("contacts.db");
    {
        let c = rusqlite::Connection::open(&path).unwrap();
        c.execute_batch(
            "CREATE TABLE contacts(name TEXT, phone TEXT); INSERT INTO contacts VALUES ('ada', '1');",
        )
        .unwrap();
    }
    let before = std::fs::read(&path).unwrap();
    let r = Database::open_for::<Post>(&path, quiet().recover_corrupt(true));
    match &r {
        Err(Error::Storage(keel_storage::Error::ForeignFile { detail, .. })) => {
            assert!(detail.contains("contacts"), "{detail}")
        }
        other => panic!("expected ForeignFile, got {other:?}"),
    }
    assert_eq!(std::fs::read(&path).unwrap(), before, "untouched");
    assert!(!sibling(&path, "-wal").exists());
    assert!(
        moved_aside(dir.path()).is_empty(),
        "not damage: never moved aside"
    );

    let db = Database::open_for::<Post>(&path, quiet().adopt_foreign(true)).unwrap();
    db.close().wait().unwrap();
    // Adopted: stamped, so a plain open works from now on, and the data is kept.
    let db = Database::open_for::<Post>(&path, quiet()).unwrap();
    db.close().wait().unwrap();
    let c = rusqlite::Connection::open(&path).unwrap();
    let n: i64 = c
        .query_row("SELECT count(*) FROM contacts", [], |r| r.get(0))
        .unwrap();
    assert_eq!(n, 1);
}

#[test]
fn a_keel_file_from_before_the_identity_stamp_opens_and_is_stamped() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("legacy.db");
    let db = Database::open_for::<Post>(&path, quiet()).unwrap();
    db.write(|t| t.insert(&Post::builder().id("x").build()).map(|_| ()))
        .wait()
        .unwrap();
    db.close().wait().unwrap();
    {
        let c = rusqlite::Connection::open(&path).unwrap();
        c.execute_batch("PRAGMA application_id = 0; PRAGMA user_version = 0;")
            .unwrap();
    }
    let db = Database::open_for::<Post>(&path, quiet()).unwrap();
    assert_eq!(db.fetch::<Post>().count().unwrap(), 1);
    db.close().wait().unwrap();
    let c = rusqlite::Connection::open(&path).unwrap();
    let app: i64 = c
        .query_row("PRAGMA application_id", [], |r| r.get(0))
        .unwrap();
    assert_eq!(app as u32, keel_storage::KEEL_APPLICATION_ID);
}
