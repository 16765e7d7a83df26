//! Storage kernel integration tests: the "Must show" list.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use keel::storage::rusqlite::{self, config::DbConfig};
use keel::storage::{
    CheckpointMode, Error, FileKind, OpenPhase, OpenProgress, Store, StoreOptions, SyncPolicy,
};

fn quiet() -> StoreOptions {
    // No idle checkpoints during a test unless it asks for them.
    StoreOptions::default().idle_checkpoint_after(Duration::from_secs(3600))
}

/// A database whose last writer died without checkpointing: `rows` rows left in the WAL.
fn db_with_leftover_wal(path: &std::path::Path, rows: usize) -> u64 {
    let c = rusqlite::Connection::open(path).unwrap();
    c.execute_batch(
        "PRAGMA journal_mode=WAL; PRAGMA wal_autocheckpoint=0;
         CREATE TABLE t(id INTEGER PRIMARY KEY, v BLOB);",
    )
    .unwrap();
    for _ in 0..rows {
        c.execute("INSERT INTO t(v) VALUES (randomblob(1000))", [])
            .unwrap();
    }
    c.set_db_config(DbConfig::SQLITE_DBCONFIG_NO_CKPT_ON_CLOSE, true)
        .unwrap();
    drop(c);
    std::fs::metadata(wal(path)).unwrap().len()
}

fn wal(path: &std::path::Path) -> std::path::PathBuf {
    let mut s = path.as_os_str().to_owned();
    s.push("-wal");
    s.into()
}

fn count(store: &Store, table: &str) -> i64 {
    let sql = format!("SELECT count(*) FROM {table}");
    store
        .read(|c| c.query_row(&sql, [], |r| r.get(0)).map_err(Error::from))
        .unwrap()
}

fn insert_one(store: &Store) -> keel::storage::WriteFuture<Result<(), Error>> {
    store.write(|t| {
        t.execute("INSERT INTO t(v) VALUES (randomblob(100))", [])?;
        Ok(())
    })
}

#[test]
fn open_async_returns_at_once_while_a_3s_barrier_sync_runs() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("slow.db");
    let wal_bytes = db_with_leftover_wal(&path, 50);
    assert!(wal_bytes > 0);

    const BARRIER_SYNC: Duration = Duration::from_secs(3);
    let slow = SyncPolicy::custom(|ctx| {
        std::thread::sleep(BARRIER_SYNC);
        ctx.full_sync()
    });
    let events: Arc<Mutex<Vec<OpenProgress>>> = Arc::default();
    let ev = Arc::clone(&events);
    let opts = quiet()
        .open_barrier_sync(slow)
        .on_progress(move |p| ev.lock().unwrap().push(p));

    let t = Instant::now();
    let fut = Store::open_async(&path, opts);
    let call = t.elapsed();
    // What this proves is that the caller never waits for the 3 s sync, so the
    // bound is a fraction of that sync: it holds on a loaded machine, where a
    // scheduler pause alone can take tens of milliseconds.
    assert!(
        call < BARRIER_SYNC / 10,
        "open_async blocked the caller for {call:?}"
    );

    // The caller's thread keeps running: tick while the open is in flight.
    let done = Arc::new(AtomicBool::new(false));
    let d2 = Arc::clone(&done);
    let waiter = std::thread::spawn(move || {
        // Readable first (reads work), then durable (the barrier done).
        let r = fut.wait().and_then(|s| s.durable().wait().map(|()| s));
        d2.store(true, Ordering::SeqCst);
        r
    });
    let mut ticks = 0u32;
    let mut largest_gap = Duration::ZERO;
    let mut last = Instant::now();
    while !done.load(Ordering::SeqCst) {
        ticks += 1;
        std::thread::sleep(Duration::from_millis(10));
        largest_gap = largest_gap.max(last.elapsed());
        last = Instant::now();
    }
    let store = waiter.join().unwrap().unwrap();
    assert!(
        ticks > 1 && largest_gap < BARRIER_SYNC / 4,
        "the caller was held during the open: {ticks} ticks, largest gap {largest_gap:?}"
    );

    let report = store.open_report();
    let sync_wal = report.phase(OpenPhase::SyncWal).unwrap();
    assert!(sync_wal.duration >= Duration::from_secs(3), "{report}");
    assert_eq!(sync_wal.syncs, 1, "{report}");
    assert_eq!(
        report.slowest_phase().unwrap().phase,
        OpenPhase::SyncWal,
        "{report}"
    );
    assert_eq!(report.wal_bytes_at_open, wal_bytes);
    assert!(report.frames_recovered > 0, "{report}");
    assert_eq!(store.io_stats().open_barrier_syncs, 1);
    assert_eq!(count(&store, "t"), 50);

    let ev = events.lock().unwrap();
    let phases: Vec<_> = ev
        .iter()
        .filter(|p| p.milestone.is_none())
        .map(|p| p.phase)
        .collect();
    assert_eq!(phases, OpenPhase::ALL.to_vec());
    assert!(ev.last().unwrap().done && ev.last().unwrap().fraction == 1.0);
    println!("{report}");
}

#[test]
fn one_wal_sync_per_commit_under_full_none_under_normal() {
    for (policy, expected) in [(SyncPolicy::Full, 1), (SyncPolicy::Normal, 0)] {
        let dir = tempfile::tempdir().unwrap();
        let store =
            Store::open(dir.path().join("s.db"), quiet().commit_sync(policy.clone())).unwrap();
        store
            .write_blocking(|t| {
                t.execute_batch("CREATE TABLE t(id INTEGER PRIMARY KEY, v BLOB)")
                    .map_err(Error::from)
            })
            .unwrap();
        insert_one(&store).wait().unwrap(); // warm: WAL header written
        for _ in 0..3 {
            store.reset_io_stats();
            insert_one(&store).wait().unwrap();
            let s = store.io_stats();
            assert_eq!(s.wal.syncs, expected, "{policy:?}: {s}");
            assert_eq!(s.main_db.syncs, 0, "{policy:?}: {s}");
            assert_eq!(s.commit_syncs, expected, "{policy:?}: {s}");
        }
    }
}

#[test]
fn group_commit_64_concurrent_writes_cost_far_fewer_syncs() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("g.db");
    let store = Store::open(&path, quiet().commit_sync(SyncPolicy::Full)).unwrap();
    store
        .write_blocking(|t| {
            t.execute_batch("CREATE TABLE t(id INTEGER PRIMARY KEY, v BLOB)")
                .map_err(Error::from)
        })
        .unwrap();
    insert_one(&store).wait().unwrap();
    store.reset_io_stats();
    let threads: Vec<_> = (0..64)
        .map(|_| {
            let s = store.clone();
            std::thread::spawn(move || insert_one(&s).wait())
        })
        .collect();
    for t in threads {
        t.join().unwrap().unwrap();
    }
    let syncs = store.io_stats().wal.syncs;
    assert!(syncs <= 16, "64 concurrent commits cost {syncs} WAL syncs");
    store.close().unwrap();
    let again = Store::open(&path, quiet()).unwrap();
    assert_eq!(count(&again, "t"), 65);
}

#[test]
fn one_failing_closure_in_a_group_rolls_back_alone() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path().join("f.db"), quiet()).unwrap();
    store
        .write_blocking(|t| {
            t.execute_batch("CREATE TABLE t(id INTEGER PRIMARY KEY, v TEXT UNIQUE)")
                .map_err(Error::from)
        })
        .unwrap();
    // Hold the writer so the next writes queue up and run as one group.
    let gate = store.write(|_| {
        std::thread::sleep(Duration::from_millis(150));
        Ok::<_, Error>(())
    });
    let committed_groups = Arc::new(AtomicU64::new(0));
    let mut futs = Vec::new();
    for i in 0..5 {
        let cg = Arc::clone(&committed_groups);
        futs.push(store.write(move |t| {
            t.execute("INSERT INTO t(v) VALUES (?1)", [format!("row{i}")])?;
            t.on_commit(Box::new(move || {
                cg.fetch_add(1, Ordering::SeqCst);
            }));
            if i == 2 {
                // A second statement that violates UNIQUE: the whole closure must go.
                t.execute("INSERT INTO t(v) VALUES ('row0')", [])?;
            }
            Ok::<_, Error>(i)
        }));
    }
    gate.wait().unwrap();
    store.reset_io_stats();
    let results: Vec<_> = futs.into_iter().map(|f| f.wait()).collect();
    for (i, r) in results.iter().enumerate() {
        assert_eq!(r.is_ok(), i != 2, "closure {i}: {r:?}");
    }
    let rows: Vec<String> = store
        .read(|c| {
            let mut s = c.prepare("SELECT v FROM t ORDER BY id")?;
            let v = s
                .query_map([], |r| r.get(0))?
                .collect::<Result<Vec<String>, _>>()?;
            Ok::<_, Error>(v)
        })
        .unwrap();
    assert_eq!(rows, ["row0", "row1", "row3", "row4"]);
    assert_eq!(
        committed_groups.load(Ordering::SeqCst),
        4,
        "on_commit dropped for the failed closure"
    );
}

#[test]
fn on_background_leaves_at_most_one_page_and_next_open_needs_no_barrier() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("b.db");
    let store = Store::open(&path, quiet()).unwrap();
    store
        .write_blocking(|t| {
            t.execute_batch("CREATE TABLE t(id INTEGER PRIMARY KEY, v BLOB)")?;
            for _ in 0..500 {
                t.execute("INSERT INTO t(v) VALUES (randomblob(1000))", [])?;
            }
            Ok::<_, Error>(())
        })
        .unwrap();
    assert!(std::fs::metadata(wal(&path)).unwrap().len() > 100_000);
    let out = store.on_background().unwrap();
    assert!(!out.busy, "{out:?}");
    let page: i64 = store
        .read(|c| {
            c.query_row("PRAGMA page_size", [], |r| r.get(0))
                .map_err(Error::from)
        })
        .unwrap();
    let wal_len = std::fs::metadata(wal(&path)).map(|m| m.len()).unwrap_or(0);
    assert!(
        wal_len <= page as u64,
        "WAL is {wal_len} bytes after on_background"
    );

    // The app is killed in the background now: the next launch sees this WAL.
    let next = Store::open(&path, quiet()).unwrap();
    let r = next.open_report();
    assert_eq!(r.phase(OpenPhase::SyncWal).unwrap().syncs, 0, "{r}");
    assert_eq!(next.io_stats().open_barrier_syncs, 0);
    assert_eq!(count(&next, "t"), 500);
}

#[test]
fn random_bytes_and_truncated_db_are_typed_errors_and_recovery_moves_aside() {
    let dir = tempfile::tempdir().unwrap();

    // Random bytes.
    let junk = dir.path().join("junk.db");
    let bytes: Vec<u8> = (0..16_384u32)
        .map(|i| (i.wrapping_mul(2_654_435_761) >> 13) as u8)
        .collect();
    std::fs::write(&junk, &bytes).unwrap();
    match Store::open(&junk, quiet()) {
        Err(e @ Error::NotADatabase { .. }) => {
            assert_eq!(e.path(), junk);
            assert!(e.to_string().contains("junk.db"), "{e}");
        }
        other => panic!("expected NotADatabase, got {other:?}"),
    }
    let fut = Store::open_async(&junk, quiet());
    assert!(matches!(fut.wait(), Err(Error::NotADatabase { .. })));

    // A truncated database.
    let trunc = dir.path().join("trunc.db");
    {
        let s = Store::open(&trunc, quiet()).unwrap();
        s.write_blocking(|t| {
            t.execute_batch("CREATE TABLE t(id INTEGER PRIMARY KEY, v BLOB)")?;
            for _ in 0..200 {
                t.execute("INSERT INTO t(v) VALUES (randomblob(1000))", [])?;
            }
            Ok::<_, Error>(())
        })
        .unwrap();
        s.close().unwrap();
    }
    let len = std::fs::metadata(&trunc).unwrap().len();
    std::fs::OpenOptions::new()
        .write(true)
        .open(&trunc)
        .unwrap()
        .set_len(len / 2)
        .unwrap();
    match Store::open(&trunc, quiet()) {
        Err(e @ Error::Corrupt { .. }) => assert!(e.to_string().contains("truncated"), "{e}"),
        other => panic!("expected Corrupt, got {other:?}"),
    }

    // Opt-in recovery: moved aside (never deleted), fresh database.
    for (bad, original) in [
        (&junk, bytes.clone()),
        (&trunc, std::fs::read(&trunc).unwrap()),
    ] {
        let store = Store::open(bad, quiet().recover_corrupt(true)).unwrap();
        let r = store.open_report();
        let moved = r.moved_aside.clone().expect("moved aside");
        assert!(r.created);
        assert_eq!(
            std::fs::read(&moved).unwrap(),
            original,
            "moved file keeps the user's bytes"
        );
        assert!(moved
            .file_name()
            .unwrap()
            .to_string_lossy()
            .contains(".corrupt-"));
        store
            .write_blocking(|t| {
                t.execute_batch("CREATE TABLE fresh(x)")
                    .map_err(Error::from)
            })
            .unwrap();
        assert_eq!(count(&store, "fresh"), 0);
    }
}

#[test]
fn locked_and_unreadable_files_are_typed_errors() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("l.db");
    Store::open(&path, quiet()).unwrap().close().unwrap();
    let holder = rusqlite::Connection::open(&path).unwrap();
    holder
        .execute_batch("PRAGMA locking_mode=EXCLUSIVE; BEGIN EXCLUSIVE; CREATE TABLE x(y);")
        .unwrap();
    let r = Store::open(&path, quiet().busy_timeout(Duration::from_millis(100)));
    assert!(matches!(r, Err(Error::Locked { .. })), "{r:?}");
    drop(holder);

    let r = Store::open(dir.path(), quiet());
    assert!(matches!(r, Err(Error::Unreadable { .. })), "{r:?}");
}

#[test]
fn checkpoint_modes_and_stats_kinds() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path().join("c.db"), quiet()).unwrap();
    store
        .write_blocking(|t| {
            t.execute_batch("CREATE TABLE t(id INTEGER PRIMARY KEY, v BLOB)")?;
            t.execute("INSERT INTO t(v) VALUES (randomblob(5000))", [])?;
            Ok::<_, Error>(())
        })
        .unwrap();
    store.reset_io_stats();
    let p = store.checkpoint(CheckpointMode::Passive).unwrap();
    assert!(
        p.wal_frames > 0 && p.checkpointed_frames == p.wal_frames,
        "{p:?}"
    );
    let s = store.io_stats();
    assert!(
        s.kind(FileKind::MainDb).writes > 0 && s.checkpoint_syncs >= 1,
        "{s}"
    );
    assert_eq!(s.commit_syncs, 0, "{s}");
}
