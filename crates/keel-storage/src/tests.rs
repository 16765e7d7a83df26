//! Unit tests for the storage kernel (the Must-show tests live in the root package's
//! `tests/storage_kernel.rs`).

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use crate::*;

fn opts() -> StoreOptions {
    StoreOptions::default().idle_checkpoint_after(Duration::from_secs(3600))
}

fn create_table(store: &Store) {
    store
        .write_blocking(|t| {
            t.execute_batch("CREATE TABLE IF NOT EXISTS t(id INTEGER PRIMARY KEY, v TEXT)")
                .map_err(Error::from)
        })
        .unwrap();
}

/// Insert one row with value `v` into `t`, in a transaction of its own.
fn insert_row(store: &Store, v: &'static str) -> Result<usize> {
    store.write_blocking(move |t| {
        t.execute("INSERT INTO t(v) VALUES (?1)", [v])
            .map_err(Error::from)
    })
}

/// The number of rows in `t`, as a reader sees it.
fn count_rows(store: &Store) -> i64 {
    store
        .read(|c| {
            c.query_row("SELECT count(*) FROM t", [], |r| r.get(0))
                .map_err(Error::from)
        })
        .unwrap()
}

#[test]
fn wal_mode_through_our_vfs() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path().join("a.db"), opts()).unwrap();
    let mode: String = store
        .read(|c| {
            c.query_row("PRAGMA journal_mode", [], |r| r.get(0))
                .map_err(Error::from)
        })
        .unwrap();
    assert_eq!(mode, "wal");
    create_table(&store);
    let s = store.io_stats();
    assert!(s.wal.writes > 0, "{s}");
    assert!(s.main_db.reads > 0, "{s}");
    let av: i64 = store
        .read(|c| {
            c.query_row("PRAGMA auto_vacuum", [], |r| r.get(0))
                .map_err(Error::from)
        })
        .unwrap();
    assert_eq!(av, 2, "auto_vacuum=INCREMENTAL");
    store.close().unwrap();
    assert!(!dir.path().join("a.db-wal").exists());
}

#[cfg(unix)]
#[test]
fn new_file_is_private() {
    use std::os::unix::fs::PermissionsExt;
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("sub/dir/p.db");
    let store = Store::open(&p, opts()).unwrap();
    let mode = std::fs::metadata(&p).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode, 0o600);
    store.close().unwrap();
}

#[test]
fn on_commit_order_and_rollback() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path().join("a.db"), opts()).unwrap();
    create_table(&store);
    let log = Arc::new(Mutex::new(Vec::new()));
    // Hold the writer so the next three land in one group.
    let gate = store.write(|_| {
        std::thread::sleep(Duration::from_millis(100));
        Ok::<_, Error>(())
    });
    let mut futs = Vec::new();
    for i in 0..3 {
        let log = Arc::clone(&log);
        futs.push(store.write(move |t| {
            t.execute("INSERT INTO t(v) VALUES (?1)", [i.to_string()])?;
            let l2 = Arc::clone(&log);
            t.on_commit(Box::new(move || l2.lock().unwrap().push(i)));
            if i == 1 {
                return Err(Error::Schema {
                    path: t.path().into(),
                    message: "no".into(),
                });
            }
            Ok(i)
        }));
    }
    gate.wait().unwrap();
    let res: Vec<_> = futs.into_iter().map(|f| f.wait()).collect();
    assert!(res[0].is_ok() && res[1].is_err() && res[2].is_ok());
    assert_eq!(*log.lock().unwrap(), vec![0, 2]);
    let n = count_rows(&store);
    assert_eq!(n, 2);
}

#[test]
fn panicking_closure_is_an_error_and_writer_survives() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path().join("a.db"), opts()).unwrap();
    create_table(&store);
    let r: Result<()> = store.write_blocking(|_| panic!("boom"));
    assert!(matches!(r, Err(Error::Panicked { .. })), "{r:?}");
    insert_row(&store, "x").unwrap();
}

#[test]
fn closed_store_errors() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path().join("a.db"), opts()).unwrap();
    let s2 = store.clone();
    store.close().unwrap();
    assert!(matches!(
        s2.write_blocking(|_| Ok::<_, Error>(())),
        Err(Error::Closed { .. })
    ));
    assert!(matches!(
        s2.checkpoint(CheckpointMode::Passive),
        Err(Error::Closed { .. })
    ));
    assert!(matches!(
        s2.read(|_| Ok::<_, Error>(())),
        Err(Error::Closed { .. })
    ));
}

#[test]
fn connection_init_runs_on_every_connection() {
    let dir = tempfile::tempdir().unwrap();
    let count = Arc::new(AtomicUsize::new(0));
    let c2 = Arc::clone(&count);
    let store = Store::open(
        dir.path().join("a.db"),
        opts().readers(2).connection_init(move |c| {
            c2.fetch_add(1, Ordering::SeqCst);
            c.create_scalar_function(
                "keel_twice",
                1,
                rusqlite::functions::FunctionFlags::SQLITE_DETERMINISTIC
                    | rusqlite::functions::FunctionFlags::SQLITE_INNOCUOUS,
                |ctx| Ok(ctx.get::<i64>(0)? * 2),
            )
        }),
    )
    .unwrap();
    // writer + 2 readers + checkpointer
    assert_eq!(count.load(Ordering::SeqCst), 4);
    let v: i64 = store
        .read(|c| {
            c.query_row("SELECT keel_twice(21)", [], |r| r.get(0))
                .map_err(Error::from)
        })
        .unwrap();
    assert_eq!(v, 42);
    let w: i64 = store
        .write_blocking(|t| {
            t.query_row("SELECT keel_twice(2)", [], |r| r.get(0))
                .map_err(Error::from)
        })
        .unwrap();
    assert_eq!(w, 4);
}

#[test]
fn schema_hook_runs_in_transaction_and_errors_abort_open() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("a.db");
    let store = Store::open(
        &p,
        opts().schema_hook(|ctx| {
            assert!(ctx.created());
            assert!(!ctx.is_autocommit());
            ctx.execute_batch("CREATE TABLE post(id INTEGER PRIMARY KEY)")?;
            Ok(())
        }),
    )
    .unwrap();
    store.close().unwrap();
    let r = Store::open(
        &p,
        opts().schema_hook(|ctx| Err(ctx.error("version too new"))),
    );
    assert!(matches!(r, Err(Error::Schema { .. })), "{r:?}");
}

#[test]
fn background_checkpoint_over_threshold() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(
        dir.path().join("a.db"),
        opts()
            .checkpoint_threshold(64 * 1024)
            .commit_sync(SyncPolicy::Off)
            .checkpoint_sync(SyncPolicy::Off),
    )
    .unwrap();
    create_table(&store);
    for _ in 0..40 {
        store
            .write_blocking(|t| {
                t.execute("INSERT INTO t(v) VALUES (hex(randomblob(4000)))", [])
                    .map_err(Error::from)
            })
            .unwrap();
    }
    std::thread::sleep(Duration::from_millis(200));
    let wal = std::fs::metadata(dir.path().join("a.db-wal"))
        .unwrap()
        .len();
    // journal_size_limit = threshold keeps the file itself near the threshold.
    assert!(wal < 1024 * 1024, "wal {wal}");
    assert!(
        store.io_stats().main_db.writes > 0,
        "checkpoint copied pages back"
    );
}

#[test]
fn incremental_vacuum_reclaims() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path().join("a.db"), opts().commit_sync(SyncPolicy::Off)).unwrap();
    create_table(&store);
    store
        .write_blocking(|t| {
            for _ in 0..200 {
                t.execute("INSERT INTO t(v) VALUES (hex(randomblob(2000)))", [])?;
            }
            t.execute("DELETE FROM t", [])?;
            Ok::<_, Error>(())
        })
        .unwrap();
    let freed = store.incremental_vacuum(10_000).unwrap();
    assert!(freed > 10, "freed {freed}");
}

/// A store on `dir/a.db` with table `t` whose commit syncs fail with `message` while
/// the returned flag is set (they are real full syncs otherwise).
fn store_with_failing_sync(
    dir: &std::path::Path,
    message: &'static str,
) -> (Store, Arc<AtomicBool>) {
    let fail = Arc::new(AtomicBool::new(false));
    let f2 = Arc::clone(&fail);
    let store = Store::open(
        dir.join("a.db"),
        opts().commit_sync(SyncPolicy::custom(move |ctx| {
            if f2.load(Ordering::SeqCst) {
                Err(std::io::Error::other(message))
            } else {
                ctx.full_sync()
            }
        })),
    )
    .unwrap();
    create_table(&store);
    (store, fail)
}

#[test]
fn custom_sync_failure_is_sync_failed() {
    let dir = tempfile::tempdir().unwrap();
    let (store, fail) = store_with_failing_sync(dir.path(), "injected");
    fail.store(true, Ordering::SeqCst);
    let r = insert_row(&store, "x");
    assert!(
        matches!(
            r,
            Err(Error::SyncFailed {
                kind: FileKind::Wal,
                reason: SyncReason::Commit,
                ..
            })
        ),
        "{r:?}"
    );
    fail.store(false, Ordering::SeqCst);
}

#[test]
fn works_inside_tokio() {
    let dir = tempfile::tempdir().unwrap();
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let store = Store::open_async(dir.path().join("a.db"), opts())
            .await
            .unwrap();
        store
            .write(|t| t.execute_batch("CREATE TABLE t(x)").map_err(Error::from))
            .await
            .unwrap();
        store.close().unwrap();
    });
}

#[test]
fn relative_paths_and_report_display() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path().join("r.db"), opts()).unwrap();
    assert!(store.path().is_absolute());
    let txt = store.open_report().to_string();
    for p in OpenPhase::ALL {
        assert!(txt.contains(p.name()), "{txt}");
    }
}

#[test]
fn commit_failure_reaches_every_closure_of_the_group() {
    let dir = tempfile::tempdir().unwrap();
    let (store, fail) = store_with_failing_sync(dir.path(), "disk on fire");
    let gate = store.write(|_| {
        std::thread::sleep(Duration::from_millis(100));
        Ok::<_, Error>(())
    });
    let callbacks = Arc::new(AtomicUsize::new(0));
    let futs: Vec<_> = (0..3)
        .map(|_| {
            let cb = Arc::clone(&callbacks);
            store.write(move |t| {
                t.execute("INSERT INTO t(v) VALUES ('x')", [])?;
                t.on_commit(Box::new(move || {
                    cb.fetch_add(1, Ordering::SeqCst);
                }));
                Ok::<_, Error>(())
            })
        })
        .collect();
    fail.store(true, Ordering::SeqCst);
    let _ = gate.wait();
    for f in futs {
        let r = f.wait();
        assert!(matches!(r, Err(Error::SyncFailed { .. })), "{r:?}");
    }
    assert_eq!(callbacks.load(Ordering::SeqCst), 0);
    fail.store(false, Ordering::SeqCst);
    let n = count_rows(&store);
    assert_eq!(n, 0);
    // The store keeps working after the failed group.
    insert_row(&store, "y").unwrap();
}

#[test]
fn stats_reset_and_display() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path().join("a.db"), opts()).unwrap();
    create_table(&store);
    assert!(store.io_stats().total_syncs() > 0);
    store.reset_io_stats();
    assert_eq!(store.io_stats(), IoStats::default());
    assert!(store.io_stats().to_string().contains("wal"));
}

#[test]
fn handles_are_send_sync() {
    fn send_sync_clone<T: Send + Sync + Clone>() {}
    fn send<T: Send>() {}
    send_sync_clone::<Store>();
    send_sync_clone::<Error>();
    send::<OpenFuture>();
    send::<WriteFuture<Result<()>>>();
    send::<StoreOptions>();
}

#[test]
fn big_leftover_wal_is_checkpointed_in_background_right_after_open() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("a.db");
    {
        let c = rusqlite::Connection::open(&p).unwrap();
        c.execute_batch(
            "PRAGMA journal_mode=WAL; PRAGMA wal_autocheckpoint=0; CREATE TABLE t(v);
             WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i+1 FROM n WHERE i < 300)
             INSERT INTO t SELECT randomblob(1000) FROM n;",
        )
        .unwrap();
        c.set_db_config(
            rusqlite::config::DbConfig::SQLITE_DBCONFIG_NO_CKPT_ON_CLOSE,
            true,
        )
        .unwrap();
    }
    let store = Store::open(&p, opts().checkpoint_threshold(64 * 1024)).unwrap();
    let r = store.open_report();
    assert!(r.wal_bytes_at_open > 64 * 1024);
    assert!(
        r.phase(OpenPhase::Checkpoint)
            .unwrap()
            .note
            .contains("deferred"),
        "{r}"
    );
    let deadline = std::time::Instant::now() + Duration::from_secs(5);
    while store.io_stats().main_db.syncs == 0 && std::time::Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(10));
    }
    assert!(store.io_stats().main_db.writes > 0, "{}", store.io_stats());
}

#[test]
fn idle_checkpoint_runs_after_quiet_period() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(
        dir.path().join("a.db"),
        StoreOptions::default().idle_checkpoint_after(Duration::from_millis(100)),
    )
    .unwrap();
    create_table(&store);
    store.reset_io_stats();
    insert_row(&store, "x").unwrap();
    assert_eq!(store.io_stats().checkpoint_syncs, 0);
    let deadline = std::time::Instant::now() + Duration::from_secs(5);
    // A checkpoint syncs the WAL, copies pages back, then syncs the database file.
    while store.io_stats().main_db.syncs == 0 && std::time::Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(20));
    }
    let s = store.io_stats();
    assert!(s.checkpoint_syncs >= 2 && s.main_db.writes > 0, "{s}");
}

#[test]
fn syncs_per_commit_for_each_builtin_policy() {
    for (policy, expected) in [
        (SyncPolicy::Full, 1),
        (SyncPolicy::Barrier, 1),
        (SyncPolicy::Normal, 0),
        (SyncPolicy::Off, 0),
    ] {
        let dir = tempfile::tempdir().unwrap();
        let store =
            Store::open(dir.path().join("a.db"), opts().commit_sync(policy.clone())).unwrap();
        create_table(&store);
        insert_row(&store, "w").unwrap();
        store.reset_io_stats();
        insert_row(&store, "x").unwrap();
        assert_eq!(store.io_stats().wal.syncs, expected, "{policy:?}");
    }
}

/// A file whose last writer died with `rows` rows of table `t` in the WAL.
fn leftover_wal(p: &std::path::Path, rows: u32) {
    let c = rusqlite::Connection::open(p).unwrap();
    c.execute_batch(&format!(
        "PRAGMA journal_mode=WAL; PRAGMA wal_autocheckpoint=0; CREATE TABLE t(id INTEGER PRIMARY KEY, v);
         WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i+1 FROM n WHERE i < {rows})
         INSERT INTO t(v) SELECT randomblob(1000) FROM n;"
    ))
    .unwrap();
    c.set_db_config(
        rusqlite::config::DbConfig::SQLITE_DBCONFIG_NO_CKPT_ON_CLOSE,
        true,
    )
    .unwrap();
}

/// An open-barrier policy that blocks until the returned sender sends (or drops).
fn latched() -> (SyncPolicy, std::sync::mpsc::Sender<()>) {
    let (tx, rx) = std::sync::mpsc::channel::<()>();
    let rx = Mutex::new(rx);
    let p = SyncPolicy::custom(move |ctx| {
        let _ = rx.lock().unwrap().recv();
        ctx.full_sync()
    });
    (p, tx)
}

#[test]
fn writes_queued_during_the_barrier_commit_after_it_in_order() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("q.db");
    leftover_wal(&p, 20);
    let (policy, release) = latched();
    let store = Store::open_async(&p, opts().open_barrier_sync(policy))
        .wait()
        .unwrap();
    assert!(!store.is_durable() && !store.writer_started());
    assert_eq!(count_rows(&store), 20);
    let order = Arc::new(Mutex::new(Vec::new()));
    let futs: Vec<_> = (0..5)
        .map(|i| {
            let o = Arc::clone(&order);
            store.write(move |t| {
                o.lock().unwrap().push(i);
                t.execute("INSERT INTO t(v) VALUES ('queued')", [])
                    .map_err(Error::from)
            })
        })
        .collect();
    assert!(
        order.lock().unwrap().is_empty(),
        "a closure ran before durable"
    );
    drop(release);
    for f in futs {
        f.wait().unwrap();
    }
    store.durable().wait().unwrap();
    assert_eq!(*order.lock().unwrap(), [0, 1, 2, 3, 4]);
    assert_eq!(count_rows(&store), 25);
    let r = store.open_report();
    assert!(r.durable_after.unwrap() >= r.readable_after, "{r}");
    assert_eq!(r.phase(OpenPhase::SyncWal).unwrap().syncs, 1, "{r}");
    assert_eq!(r.phases.len(), 6, "{r}");
    store.close().unwrap();
}

#[test]
fn checkpoint_on_open_runs_after_the_barrier_and_blocking_open_is_durable() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("c.db");
    leftover_wal(&p, 300);
    let mut o = opts().checkpoint_threshold(64 * 1024);
    o.checkpoint_on_open = true;
    let store = Store::open(&p, o).unwrap();
    assert!(store.is_durable());
    let r = store.open_report();
    let ck = r.phase(OpenPhase::Checkpoint).unwrap();
    assert!(ck.note.contains("after the open barrier"), "{r}");
    assert!(store.io_stats().main_db.writes > 0, "{}", store.io_stats());
    assert_eq!(r.durable_after, Some(r.total), "{r}");
    store.close().unwrap();
}

/// The renames that move a bad file aside live in its directory: the open syncs
/// that directory (one more `dir_syncs` than a plain create), so a power loss
/// cannot bring the bad file back under the database's name. Under an `Off` open
/// barrier policy it is skipped like every other barrier sync.
#[test]
fn moving_a_bad_file_aside_syncs_its_directory() {
    let dir = tempfile::tempdir().unwrap();
    let junk = vec![0x5a_u8; 8192];
    let plain = Store::open(dir.path().join("plain.db"), opts()).unwrap();
    let baseline = plain.io_stats().dir_syncs;
    plain.close().unwrap();

    let bad = dir.path().join("bad.db");
    std::fs::write(&bad, &junk).unwrap();
    let store = Store::open(&bad, opts().recover_corrupt(true)).unwrap();
    let moved = store.open_report().moved_aside.expect("moved aside");
    assert_eq!(std::fs::read(&moved).unwrap(), junk);
    assert_eq!(store.io_stats().dir_syncs, baseline + 1);
    store.close().unwrap();

    let off = dir.path().join("off.db");
    std::fs::write(&off, &junk).unwrap();
    let store = Store::open(
        &off,
        opts()
            .recover_corrupt(true)
            .open_barrier_sync(SyncPolicy::Off),
    )
    .unwrap();
    assert!(store.open_report().moved_aside.is_some());
    assert_eq!(store.io_stats().dir_syncs, baseline);
    store.close().unwrap();
}
