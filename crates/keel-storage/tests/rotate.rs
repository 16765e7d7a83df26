//! Key rotation and migration on real files (feature `encryption`): each direction
//! keeps every row and moves the file to exactly the new key; a rotation refuses a
//! file another handle holds; a store suspended across a rotation refuses to write
//! into the old file; and a rotation killed with SIGKILL at every step, in a real
//! child process, leaves a file that opens with exactly one of its two keys and
//! holds every acknowledged write.
//!
//! The child is this test binary again (`--exact child_process`), told what to do
//! through environment variables. It acknowledges each committed row on stdout,
//! and stops at the step named by `KEEL_ROTATE_PAUSE_AT` (the crate's test hook,
//! feature `sim`), saying so on stderr, where the test kills it.

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::{Arc, Mutex};

use keel_storage::encryption::{DataKey, KeyError, KeyPurpose};
use keel_storage::rotate::{self, KeyId, Outcome, RotateOptions, Side, Step};
use keel_storage::{Error, Store, StoreOptions, SuspendOptions, SyncPolicy};

const ROLE: &str = "KEEL_ROT_ROLE";
const DB: &str = "KEEL_ROT_DB";
const ROWS: i64 = 300;

fn key(byte: u8) -> DataKey {
    DataKey::from_parts(&[byte; 32], &[byte ^ 0x5a; 16])
}

fn provider(k: DataKey) -> impl Fn(&Path, KeyPurpose) -> Result<DataKey, KeyError> + Send + Sync {
    move |_: &Path, _| Ok(k.clone())
}

fn opts(side: &Side) -> StoreOptions {
    let o = StoreOptions::default()
        .readers(2)
        .commit_sync(SyncPolicy::Normal);
    match side {
        Side::Plaintext => o,
        Side::Encrypted {
            key,
            plaintext_header,
        } => o
            .encryption(provider(key.clone()))
            .plaintext_header(*plaintext_header),
    }
}

fn open(db: &Path, side: &Side) -> keel_storage::Result<Store> {
    Store::open(db, opts(side))
}

fn insert(store: &Store, i: i64) {
    store
        .write_blocking(move |t| {
            t.execute(
                "INSERT INTO t(i, body) VALUES (?1, ?2)",
                rusqlite::params![i, format!("row {i} ").repeat(20)],
            )?;
            Ok::<_, Error>(())
        })
        .unwrap();
}

fn create(store: &Store) {
    store
        .write_blocking(|t| {
            t.execute_batch(
                "CREATE TABLE IF NOT EXISTS t(i INTEGER PRIMARY KEY, body TEXT); \
                 CREATE INDEX IF NOT EXISTS t_body ON t(body)",
            )?;
            Ok::<_, Error>(())
        })
        .unwrap();
}

fn rows(store: &Store) -> Vec<i64> {
    store
        .read(|c| {
            let mut st = c.prepare("SELECT i FROM t ORDER BY i")?;
            let v = st
                .query_map([], |r| r.get(0))?
                .collect::<rusqlite::Result<Vec<i64>>>()?;
            Ok::<_, Error>(v)
        })
        .unwrap()
}

fn integrity(store: &Store) -> String {
    store
        .read(|c| Ok::<_, Error>(c.query_row("PRAGMA integrity_check", [], |r| r.get(0))?))
        .unwrap()
}

/// Which of the two sides opens the file (each tried, the first open settling
/// any journal), with the store of the one that did.
fn which_opens(db: &Path, a: &Side, b: &Side) -> (Vec<usize>, Option<Store>) {
    let mut opened = Vec::new();
    let mut store = None;
    for (n, side) in [a, b].into_iter().enumerate() {
        match open(db, side) {
            Ok(s) => {
                opened.push(n);
                if let Some(prev) = store.replace(s) {
                    prev.close().unwrap();
                }
            }
            Err(
                Error::WrongKey { .. } | Error::NotEncrypted { .. } | Error::NotADatabase { .. },
            ) => {}
            // An encrypted file opened without a key: keel tells it from the
            // plaintext header or its WAL (docs/encryption.md).
            Err(Error::KeyRequired { .. }) if matches!(side, Side::Plaintext) => {}
            Err(e) => panic!("opening with side {n}: {e}"),
        }
    }
    (opened, store)
}

fn side_from_env(name: &str) -> Side {
    match std::env::var(name).unwrap().as_str() {
        "plain" => Side::Plaintext,
        hex => Side::encrypted(DataKey::from_hex(hex).unwrap()),
    }
}

fn side_to_env(side: &Side) -> String {
    match side {
        Side::Plaintext => "plain".into(),
        Side::Encrypted { key, .. } => key.to_hex().to_string(),
    }
}

// ---------------------------------------------------------------- the child side

/// The entry point of the child processes; does nothing in a normal test run.
#[test]
fn child_process() {
    let Ok(role) = std::env::var(ROLE) else {
        return;
    };
    assert_eq!(role, "rotate");
    let db = PathBuf::from(std::env::var(DB).unwrap());
    let from = side_from_env("KEEL_ROT_FROM");
    let to = side_from_env("KEEL_ROT_TO");
    let store = open(&db, &from).unwrap();
    create(&store);
    for i in 0..ROWS {
        insert(&store, i);
        println!("acked {i}");
    }
    store.close().unwrap();
    let r = rotate::start(&db, from, to, RotateOptions::default()).wait();
    println!("rotated {}", r.is_ok());
    r.unwrap();
}

/// Run the child until it pauses at `step` (or finishes, for `None`), kill it
/// with SIGKILL, and return the rows it acknowledged.
fn run_child(db: &Path, from: &Side, to: &Side, step: Option<&str>) -> Vec<i64> {
    let mut cmd = Command::new(std::env::current_exe().unwrap());
    cmd.args([
        "--exact",
        "child_process",
        "--nocapture",
        "--test-threads=1",
    ])
    .env(ROLE, "rotate")
    .env(DB, db)
    .env("KEEL_ROT_FROM", side_to_env(from))
    .env("KEEL_ROT_TO", side_to_env(to))
    .stdout(Stdio::piped())
    .stderr(Stdio::piped());
    match step {
        Some(s) => cmd.env("KEEL_ROTATE_PAUSE_AT", s),
        None => cmd.env_remove("KEEL_ROTATE_PAUSE_AT"),
    };
    let mut child = cmd.spawn().unwrap();
    let out = child.stdout.take().unwrap();
    let acked = Arc::new(Mutex::new(Vec::new()));
    let acked2 = Arc::clone(&acked);
    let reader = std::thread::spawn(move || {
        for line in BufReader::new(out).lines() {
            let line = line.unwrap();
            // libtest's "test child_process ... " may start the first line.
            if let Some((_, i)) = line.split_once("acked ") {
                acked2.lock().unwrap().push(i.parse::<i64>().unwrap());
            }
        }
    });
    let err = BufReader::new(child.stderr.take().unwrap());
    let mut paused = false;
    let mut stderr_text = String::new();
    for line in err.lines() {
        let line = line.unwrap();
        if step.is_some_and(|s| line.ends_with(&format!("keel-rotate paused at {s}"))) {
            paused = true;
            break;
        }
        stderr_text.push_str(&line);
        stderr_text.push('\n');
    }
    if let Some(s) = step {
        assert!(paused, "the child never reached {s}:\n{stderr_text}");
        if !matches!(s, "renamed" | "done") {
            // Until the rename the child holds the file: nobody else reads it.
            let c = rusqlite::Connection::open(db).unwrap();
            let r = c.query_row("SELECT count(*) FROM sqlite_schema", [], |r| {
                r.get::<_, i64>(0)
            });
            assert!(
                r.is_err(),
                "the file was readable while the rotation held it at {s}"
            );
        }
        // Child::kill sends SIGKILL.
        child.kill().unwrap();
    }
    let status = child.wait().unwrap();
    if step.is_none() {
        assert!(status.success(), "child failed:\n{stderr_text}");
    }
    reader.join().unwrap();
    let v = acked.lock().unwrap().clone();
    v
}

fn crash_every_step(from: Side, to: Side) {
    for (n, &step) in rotate::PAUSE_POINTS.iter().enumerate() {
        let dir = tempfile::tempdir().unwrap();
        let db = dir.path().join("app.db");
        let acked = run_child(&db, &from, &to, Some(step));
        assert_eq!(
            acked.len() as i64,
            ROWS,
            "every row was acknowledged before the rotation"
        );
        let journal = rotate::journal_path(&db);
        let recovered = if journal.exists() {
            Some(rotate::recover(&db).unwrap().expect("a journal to settle"))
        } else {
            None
        };
        let (opened, store) = which_opens(&db, &from, &to);
        assert_eq!(
            opened.len(),
            1,
            "after a kill at {step}: exactly one key opens the file, got {opened:?}"
        );
        // Before the commit point the old key holds; from it on, the new one.
        let committed = rotate::PAUSE_POINTS
            .iter()
            .position(|s| *s == "committed")
            .unwrap();
        let expected = usize::from(n >= committed);
        assert_eq!(opened, vec![expected], "after a kill at {step}");
        if let Some(r) = &recovered {
            let want = if expected == 0 { from.id() } else { to.id() };
            assert_eq!(
                r.key(),
                &want,
                "after a kill at {step}: the journal names the key that opens the file"
            );
            assert_eq!(r.outcome == Outcome::Finished, expected == 1);
        }
        let store = store.unwrap();
        assert_eq!(
            rows(&store),
            acked,
            "after a kill at {step}: every acknowledged row"
        );
        assert_eq!(integrity(&store), "ok");
        // The file takes writes under the key that opened it.
        insert(&store, ROWS);
        store.close().unwrap();
        for leftover in [rotate::new_path(&db), journal] {
            assert!(
                !leftover.exists(),
                "{} left after a kill at {step}",
                leftover.display()
            );
        }
    }
}

#[test]
fn a_rekey_killed_at_every_step_leaves_one_key_and_every_row() {
    crash_every_step(Side::encrypted(key(1)), Side::encrypted(key(2)));
}

#[test]
fn an_encryption_killed_at_every_step_leaves_one_key_and_every_row() {
    crash_every_step(Side::Plaintext, Side::encrypted(key(3)));
}

#[test]
fn a_rotation_in_a_child_that_is_not_killed_moves_the_file() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("app.db");
    let (from, to) = (Side::encrypted(key(4)), Side::encrypted(key(5)));
    let acked = run_child(&db, &from, &to, None);
    let (opened, store) = which_opens(&db, &from, &to);
    assert_eq!(opened, vec![1]);
    assert_eq!(rows(&store.unwrap()), acked);
}

// ---------------------------------------------------------------- in-process cases

fn seeded(db: &Path, side: &Side) {
    let store = open(db, side).unwrap();
    create(&store);
    store
        .write_blocking(|t| {
            t.execute_batch(&format!(
                "PRAGMA application_id = {}; PRAGMA user_version = 77",
                keel_storage::KEEL_APPLICATION_ID
            ))?;
            Ok::<_, Error>(())
        })
        .unwrap();
    for i in 0..ROWS {
        insert(&store, i);
    }
    store.close().unwrap();
}

fn every_direction(from: Side, to: Side) {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("app.db");
    seeded(&db, &from);
    let events = Arc::new(Mutex::new(Vec::new()));
    let ev = Arc::clone(&events);
    let report = futures::executor::block_on(rotate::start(
        &db,
        from.clone(),
        to.clone(),
        RotateOptions::default().progress(move |p| ev.lock().unwrap().push(p)),
    ))
    .unwrap();
    assert_eq!(
        (report.from.clone(), report.to.clone()),
        (from.id(), to.id())
    );
    assert!(report.bytes > 0);
    let events = events.lock().unwrap().clone();
    assert_eq!(events.first().map(|p| p.step), Some(Step::Lock));
    assert_eq!(
        events.last().map(|p| (p.step, p.fraction)),
        Some((Step::Done, 1.0))
    );
    assert!(
        events.windows(2).all(|w| w[0].fraction <= w[1].fraction),
        "progress only grows: {events:?}"
    );
    let (opened, store) = which_opens(&db, &from, &to);
    assert_eq!(opened, vec![1], "only the new side opens the file");
    let store = store.unwrap();
    assert_eq!(rows(&store), (0..ROWS).collect::<Vec<_>>());
    assert_eq!(integrity(&store), "ok");
    // keel's stamp (identity.rs) came along: the file still reads as keel's,
    // at the same epoch.
    let stamp: (i64, i64) = store
        .read(|c| {
            Ok::<_, Error>(c.query_row(
                "SELECT (SELECT application_id FROM pragma_application_id), \
                        (SELECT user_version FROM pragma_user_version)",
                [],
                |r| Ok((r.get(0)?, r.get(1)?)),
            )?)
        })
        .unwrap();
    assert_eq!(stamp, (i64::from(keel_storage::KEEL_APPLICATION_ID), 77));
    insert(&store, ROWS);
    store.close().unwrap();
    let names: Vec<String> = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    assert!(
        names
            .iter()
            .all(|n| !n.contains("keelnew") && !n.contains("keelrotate")),
        "no rotation file left: {names:?}"
    );
}

#[test]
fn plaintext_to_encrypted_to_another_key_and_back() {
    every_direction(Side::Plaintext, Side::encrypted(key(6)));
    every_direction(Side::encrypted(key(6)), Side::encrypted(key(7)));
    every_direction(Side::encrypted(key(7)), Side::Plaintext);
    every_direction(
        Side::Plaintext,
        Side::Encrypted {
            key: key(8),
            plaintext_header: true,
        },
    );
}

#[test]
fn a_rotation_refuses_a_file_another_handle_holds() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("app.db");
    let from = Side::encrypted(key(9));
    seeded(&db, &from);
    let store = open(&db, &from).unwrap();
    let _ = rows(&store);
    let r = rotate::rotate(
        &db,
        from.clone(),
        Side::encrypted(key(10)),
        RotateOptions::default().busy_timeout(std::time::Duration::from_millis(50)),
    );
    assert!(matches!(r, Err(Error::Locked { .. })), "{r:?}");
    assert!(!rotate::journal_path(&db).exists());
    assert!(!rotate::new_path(&db).exists());
    insert(&store, ROWS);
    assert_eq!(rows(&store).len() as i64, ROWS + 1);
    store.close().unwrap();
}

#[test]
fn a_rotation_with_the_wrong_key_changes_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("app.db");
    seeded(&db, &Side::encrypted(key(11)));
    let before = std::fs::read(&db).unwrap();
    let r = rotate::rotate(
        &db,
        Side::encrypted(key(12)),
        Side::Plaintext,
        RotateOptions::default(),
    );
    assert!(matches!(r, Err(Error::WrongKey { .. })), "{r:?}");
    let r = rotate::rotate(
        &db,
        Side::Plaintext,
        Side::encrypted(key(13)),
        RotateOptions::default(),
    );
    assert!(matches!(r, Err(Error::NotADatabase { .. })), "{r:?}");
    assert_eq!(std::fs::read(&db).unwrap(), before);
    assert!(!rotate::journal_path(&db).exists());
}

#[test]
fn a_store_suspended_across_a_rotation_refuses_to_write_into_the_old_file() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("app.db");
    let (from, to) = (Side::encrypted(key(14)), Side::encrypted(key(15)));
    seeded(&db, &from);
    let stale = open(&db, &from).unwrap();
    stale.suspend(SuspendOptions::default()).unwrap();
    rotate::rotate(&db, from.clone(), to.clone(), RotateOptions::default()).unwrap();
    stale.resume().unwrap();
    let r = stale.write_blocking(|t| {
        t.execute("INSERT INTO t(i, body) VALUES (-1, 'lost?')", [])?;
        Ok::<_, Error>(())
    });
    assert!(matches!(r, Err(Error::Rotated { .. })), "{r:?}");
    drop(stale);
    let store = open(&db, &to).unwrap();
    assert_eq!(rows(&store), (0..ROWS).collect::<Vec<_>>());
    store.close().unwrap();
}

#[test]
fn the_journal_never_holds_a_key() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("app.db");
    let (from, to) = (key(16), key(17));
    seeded(&db, &Side::encrypted(from.clone()));
    let journal_text = Arc::new(Mutex::new(Vec::new()));
    let jt = Arc::clone(&journal_text);
    let jp = rotate::journal_path(&db);
    rotate::rotate(
        &db,
        Side::encrypted(from.clone()),
        Side::encrypted(to.clone()),
        RotateOptions::default().progress(move |p| {
            if p.step == Step::Sync {
                *jt.lock().unwrap() = std::fs::read(&jp).unwrap();
            }
        }),
    )
    .unwrap();
    let text = journal_text.lock().unwrap().clone();
    let text = String::from_utf8(text).unwrap();
    assert!(text.contains(&KeyId::of(&from).to_string()));
    assert!(text.contains(&KeyId::of(&to).to_string()));
    for k in [from, to] {
        let hex = k.to_hex();
        assert!(!text.contains(&hex[..64]), "the journal holds a key");
    }
}
