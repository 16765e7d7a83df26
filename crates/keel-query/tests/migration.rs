//! Migrations: `post_v1.fbs` → `post_v3.fbs`, an incompatible change (a new
//! primary key, a field whose type changes), moves every object, runs once, reports
//! progress, and — on keel-storage's simulated disk — a crash at any operation of the
//! migrating open followed by a power loss leaves either the old state or the new
//! one, never a mix; the next open finishes the job.

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use keel_query::{Database, Error, MigrationProgress, Migrator, Schema, StoreOptions, Value};
use keel_storage::sim::{SimDisk, SimRng};

fn evo(name: &str) -> Schema {
    let p = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../examples/blog/schema/evolution")
        .join(name);
    Schema::from_file(&p).unwrap()
}

fn quiet() -> StoreOptions {
    StoreOptions::default().idle_checkpoint_after(Duration::from_secs(3600))
}

fn fail(e: impl std::fmt::Display) -> Error {
    Error::Migration {
        message: e.to_string(),
    }
}

/// v1 note `i`: every third one leaves `stars` at its default (3).
fn v1_note(v1: &Schema, i: u32) -> Vec<u8> {
    let mut j =
        serde_json::json!({"id": format!("n{i:04}"), "body": format!("body {i}"), "mood": "Happy"});
    if !i.is_multiple_of(3) {
        j["stars"] = serde_json::json!(i % 11);
    }
    v1.reader("evo.Note").unwrap().encode_json(&j).unwrap()
}

fn v1_stars(i: u32) -> i64 {
    if i.is_multiple_of(3) {
        3
    } else {
        i64::from(i % 11)
    }
}

fn make_v1(path: &Path, n: u32) {
    let v1 = evo("post_v1.fbs");
    let db = Database::open(path, v1.clone(), quiet()).unwrap();
    let notes: Vec<Vec<u8>> = (0..n).map(|i| v1_note(&v1, i)).collect();
    db.write(move |t| {
        for b in notes {
            t.insert_bytes("evo.Note", b)?;
        }
        Ok(())
    })
    .wait()
    .unwrap();
    db.close().wait().unwrap();
}

/// The migration to v3: key notes by a serial (the number in their id), stars as text.
fn to_v3() -> Migrator {
    Migrator::new().register("v3: key notes by serial, stars as text", |m| {
        let old = m.old_schema().reader("evo.Note").map_err(fail)?;
        let stars = old.path("stars").map_err(fail)?;
        let id = old.path("id").map_err(fail)?;
        m.rewrite_collection("evo.Note", |obj, new| {
            let mut j = obj.to_json().map_err(fail)?;
            let map = j.as_object_mut().ok_or_else(|| fail("not an object"))?;
            map.remove("legacy"); // deprecated in v3
            let Value::Int(s) = obj.get(&stars) else {
                return Err(fail("stars is not an int"));
            };
            map.insert("stars".into(), serde_json::json!(s.to_string()));
            let Value::Text(id) = obj.get(&id) else {
                return Err(fail("no id"));
            };
            let serial: i64 = id[1..].parse().map_err(fail)?;
            map.insert("serial".into(), serde_json::json!(serial));
            Ok(Some(new.encode_json(&j).map_err(fail)?))
        })?;
        Ok(())
    })
}

/// Every note of `0..n`, as v3 objects, keyed by serial.
fn assert_all_v3(db: &Database, n: u32) {
    let v3 = db.schema().reader("evo.Note").unwrap();
    let (id, stars, serial) = (
        v3.path("id").unwrap(),
        v3.path("stars").unwrap(),
        v3.path("serial").unwrap(),
    );
    assert_eq!(db.query("evo.Note").count().unwrap(), u64::from(n));
    for i in 0..n {
        let o = db
            .get_bytes("evo.Note", &[Value::Int(i64::from(i))])
            .unwrap()
            .unwrap_or_else(|| panic!("note {i} missing after the migration"));
        let obj = v3.read(&o.bytes).unwrap();
        assert_eq!(obj.get(&id), Value::Text(format!("n{i:04}")));
        assert_eq!(obj.get(&stars), Value::Text(v1_stars(i).to_string()));
        assert_eq!(obj.get(&serial), Value::Int(i64::from(i)));
    }
}

#[test]
fn post_v1_to_incompatible_v3_moves_every_object_once_with_progress() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("m.db");
    let n = 600;
    make_v1(&path, n);
    let v3 = evo("post_v3.fbs");

    // Without a migration the change is refused, and nothing changes.
    let r = Database::open(&path, v3.clone(), quiet());
    assert!(
        matches!(&r, Err(Error::Schema { message, .. }) if message.contains("incompatible")),
        "{r:?}"
    );

    let events: Arc<Mutex<Vec<MigrationProgress>>> = Arc::default();
    let e2 = Arc::clone(&events);
    let migrator = to_v3().on_progress(move |p| e2.lock().unwrap().push(p));
    let db = Database::open_migrating(&path, v3.clone(), migrator, quiet()).unwrap();
    assert_all_v3(&db, n);
    db.wait_for_indexes().unwrap();
    assert_eq!(
        db.index_states().unwrap(),
        vec![("evo.Note#0".to_string(), "ready".to_string())]
    );
    db.close().wait().unwrap();
    let ev = events.lock().unwrap().clone();
    assert_eq!(ev.first().map(|e| (e.objects, e.done)), Some((0, false)));
    assert_eq!(ev.last().map(|e| (e.objects, e.done)), Some((600, true)));
    assert!(ev.iter().any(|e| !e.done && e.objects == 512), "{ev:?}");
    assert!(ev.iter().all(|e| e.total == 1 && e.index == 0));

    // It ran once: opening again with a migrator that would fail runs nothing.
    let again = Migrator::new().register("v3: key notes by serial, stars as text", |_| {
        Err(fail("must not run twice"))
    });
    let db = Database::open_migrating(&path, v3.clone(), again, quiet()).unwrap();
    assert_all_v3(&db, n);
    db.close().wait().unwrap();
    let db = Database::open(&path, v3, quiet()).unwrap();
    assert_all_v3(&db, n);
    db.close().wait().unwrap();
}

#[test]
fn a_failing_migration_fails_the_open_and_leaves_the_old_state() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("f.db");
    make_v1(&path, 20);
    let before = std::fs::read(&path).unwrap();
    let bad = to_v3().register("then fail", |_| Err(fail("boom")));
    let r = Database::open_migrating(&path, evo("post_v3.fbs"), bad, quiet());
    match &r {
        Err(Error::MigrationFailed { migration, .. }) => assert_eq!(migration, "then fail"),
        other => panic!("expected MigrationFailed, got {other:?}"),
    }
    // The first migration's work rolled back with the second's failure.
    assert_eq!(
        std::fs::read(&path).unwrap(),
        before,
        "the file is unchanged"
    );
    let db = Database::open(&path, evo("post_v1.fbs"), quiet()).unwrap();
    assert_eq!(db.query("evo.Note").count().unwrap(), 20);
    assert!(db
        .get_bytes("evo.Note", &["n0007".into()])
        .unwrap()
        .is_some());
    db.close().wait().unwrap();
}

#[test]
fn a_new_database_records_the_migrations_without_running_them() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("new.db");
    let never = Migrator::new().register("v3: key notes by serial, stars as text", |_| {
        Err(fail("nothing to migrate in a new database"))
    });
    let db = Database::open_migrating(&path, evo("post_v3.fbs"), never, quiet()).unwrap();
    db.close().wait().unwrap();
    let c = rusqlite::Connection::open(&path).unwrap();
    let n: i64 = c
        .query_row("SELECT count(*) FROM keel_migrations", [], |r| r.get(0))
        .unwrap();
    assert_eq!(n, 1);
}

/// What the file holds after a crash, read with plain SQLite: the stored schema's
/// fingerprint and the number of notes.
fn file_state(path: &Path) -> (String, i64) {
    let c = rusqlite::Connection::open(path).unwrap();
    let fp: String = c
        .query_row(
            "SELECT value FROM keel_meta WHERE key = 'fingerprint'",
            [],
            |r| r.get(0),
        )
        .unwrap();
    let n: i64 = c
        .query_row("SELECT count(*) FROM \"evo.Note\"", [], |r| r.get(0))
        .unwrap();
    (fp, n)
}

#[test]
fn a_crash_at_any_operation_of_the_migrating_open_leaves_the_old_state_or_the_new() {
    let n = 40;
    let dir = tempfile::tempdir().unwrap();
    let pristine = dir.path().join("pristine.db");
    make_v1(&pristine, n);
    let (v1fp, v3) = (
        format!("{:016x}", evo("post_v1.fbs").fingerprint()),
        evo("post_v3.fbs"),
    );
    let v3fp = format!("{:016x}", v3.fingerprint());
    let fresh = |k: u64| -> PathBuf {
        let d = dir.path().join(format!("run{k}"));
        std::fs::create_dir_all(&d).unwrap();
        let p = d.join("m.db");
        std::fs::copy(&pristine, &p).unwrap();
        p
    };

    // How many mutating operations a migrating open takes, without a crash.
    let probe = fresh(0);
    let disk = Arc::new(SimDisk::new());
    let db = Database::open_migrating(
        &probe,
        v3.clone(),
        to_v3(),
        quiet().sim_disk(Arc::clone(&disk)),
    )
    .unwrap();
    let ops = disk.clock();
    db.close().wait().unwrap();
    assert!(ops > 10, "the migrating open wrote only {ops} times");

    let (mut old_states, mut new_states) = (0, 0);
    // One past the end: the crash then hits what runs after the open (the background
    // index build), and the migration's commit must have survived it.
    for k in 1..=ops + 1 {
        let path = fresh(k);
        let disk = Arc::new(SimDisk::new());
        disk.crash_at(k);
        let r = Database::open_migrating(
            &path,
            v3.clone(),
            to_v3(),
            quiet().sim_disk(Arc::clone(&disk)),
        );
        disk.crash_now();
        // Whatever it was, the machine stops here. (Close, not drop: a drop finishes
        // the shutdown in the background, racing the power loss and the reopen.)
        if let Ok(db) = r {
            let _ = db.close().wait();
        }
        disk.power_loss(&mut SimRng::new(k));

        let (fp, count) = file_state(&path);
        assert_eq!(count, i64::from(n), "crash at op {k}: notes lost");
        if fp == v1fp {
            old_states += 1;
        } else {
            assert_eq!(
                fp, v3fp,
                "crash at op {k}: neither the old nor the new schema"
            );
            new_states += 1;
        }
        // The next open finishes (or finds finished) the migration.
        let db = Database::open_migrating(&path, v3.clone(), to_v3(), quiet())
            .unwrap_or_else(|e| panic!("crash at op {k}: reopen failed: {e}"));
        assert_all_v3(&db, n);
        db.close().wait().unwrap();
        let c = rusqlite::Connection::open(&path).unwrap();
        let ok: String = {
            keel_query::inspect::register_functions(&c, Arc::new(v3.clone())).unwrap();
            c.query_row("PRAGMA integrity_check", [], |r| r.get(0))
                .unwrap()
        };
        assert_eq!(ok, "ok", "crash at op {k}");
    }
    assert!(old_states > 0, "no crash point left the old state");
    assert!(new_states > 0, "no crash point left the new state");
}
