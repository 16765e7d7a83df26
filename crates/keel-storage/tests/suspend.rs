//! `Store::suspend` / `Store::resume` in one process: what waits, what fails fast,
//! what survives, what resume re-checks. (The lock-level proof, read from
//! `/proc/locks` with a second process, is in `multiprocess.rs`.)

use std::sync::mpsc;
use std::time::Duration;

use keel_storage::{CheckpointMode, Error, Store, StoreOptions, SuspendOptions};

fn open(dir: &tempfile::TempDir) -> Store {
    let s = Store::open(dir.path().join("s.db"), StoreOptions::default()).unwrap();
    s.write_blocking(|t| {
        t.execute_batch("CREATE TABLE t(x INTEGER)")?;
        t.execute("INSERT INTO t VALUES (1)", [])
            .map_err(Error::from)
    })
    .unwrap();
    s
}

fn count(s: &Store) -> Result<i64, Error> {
    s.read(|c| {
        c.query_row("SELECT count(*) FROM t", [], |r| r.get(0))
            .map_err(Error::from)
    })
}

/// How long a call issued while suspended is given to (wrongly) finish before the
/// test concludes it is waiting. Not a speed target: a window.
const WINDOW: Duration = Duration::from_millis(150);

#[test]
fn reads_and_writes_issued_while_suspended_wait_and_complete_after_resume() {
    let dir = tempfile::tempdir().unwrap();
    let s = open(&dir);
    let r = s.suspend(SuspendOptions::default()).unwrap();
    assert!(r.newly_suspended && !r.interrupted);
    assert!(s.is_suspended());

    let (tx, rx) = mpsc::channel();
    let (s1, tx1) = (s.clone(), tx.clone());
    let reader = std::thread::spawn(move || tx1.send(("read", count(&s1))).unwrap());
    let (s2, tx2) = (s.clone(), tx);
    let writer = std::thread::spawn(move || {
        let r = s2.write_blocking(|t| {
            t.execute("INSERT INTO t VALUES (2)", [])
                .map_err(Error::from)
        });
        tx2.send(("write", r.map(|n| n as i64))).unwrap()
    });
    // Both wait: nothing arrives while suspended.
    assert!(
        rx.recv_timeout(WINDOW).is_err(),
        "a call completed while suspended"
    );
    assert_eq!(s.queued_writes(), 1, "the write waits in the queue");

    let rr = s.resume().unwrap();
    assert!(rr.was_suspended);
    assert!(!rr.external_changes, "nothing else touched the file");
    let mut got = vec![rx.recv().unwrap(), rx.recv().unwrap()];
    got.sort_by_key(|(k, _)| *k);
    assert!(matches!(got[0], ("read", Ok(1 | 2))), "{got:?}");
    assert!(matches!(got[1], ("write", Ok(1))), "{got:?}");
    reader.join().unwrap();
    writer.join().unwrap();
    assert_eq!(count(&s).unwrap(), 2);
    s.close().unwrap();
}

#[test]
fn with_fail_fast_reads_and_writes_fail_at_once_with_a_retryable_error() {
    let dir = tempfile::tempdir().unwrap();
    let s = open(&dir);
    s.suspend(SuspendOptions::default().fail_fast(true))
        .unwrap();
    let e = count(&s).unwrap_err();
    assert!(matches!(e, Error::Suspended { .. }), "{e:?}");
    assert!(e.is_retryable());
    let w = s.write_blocking(|t| {
        t.execute("INSERT INTO t VALUES (2)", [])
            .map_err(Error::from)
    });
    assert!(matches!(w, Err(Error::Suspended { .. })), "{w:?}");
    let c = s.checkpoint(CheckpointMode::Passive);
    assert!(matches!(c, Err(Error::Suspended { .. })), "{c:?}");
    // A second suspend is a no-op; resume brings everything back.
    assert!(
        !s.suspend(SuspendOptions::default())
            .unwrap()
            .newly_suspended
    );
    s.resume().unwrap();
    assert!(!s.resume().unwrap().was_suspended);
    s.write_blocking(|t| {
        t.execute("INSERT INTO t VALUES (2)", [])
            .map_err(Error::from)
    })
    .unwrap();
    assert_eq!(count(&s).unwrap(), 2);
    s.close().unwrap();
}

#[test]
fn a_write_waiting_for_resume_ignores_fail_fast() {
    let dir = tempfile::tempdir().unwrap();
    let s = open(&dir);
    s.suspend(SuspendOptions::default().fail_fast(true))
        .unwrap();
    let fut = s.write_waiting(|t| {
        t.execute("INSERT INTO t VALUES (3)", [])
            .map_err(Error::from)
    });
    assert_eq!(s.queued_writes(), 1);
    s.resume().unwrap();
    assert_eq!(fut.wait().unwrap(), 1);
    s.close().unwrap();
}

#[test]
fn a_read_in_flight_is_interrupted_with_suspended() {
    let dir = tempfile::tempdir().unwrap();
    let s = open(&dir);
    let (tx, rx) = mpsc::channel();
    let s1 = s.clone();
    let reader = std::thread::spawn(move || {
        s1.read(|c| {
            tx.send(()).unwrap();
            // A query that runs for a long time.
            c.query_row(
                "WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < 1000000000)
                 SELECT count(*) FROM n",
                [],
                |r| r.get::<_, i64>(0),
            )
            .map_err(Error::from)
        })
    });
    rx.recv().unwrap();
    let r = s
        .suspend(SuspendOptions::default().interrupt_after(Duration::from_millis(10)))
        .unwrap();
    assert!(r.interrupted);
    let e = reader.join().unwrap().unwrap_err();
    assert!(matches!(e, Error::Suspended { .. }), "{e:?}");
    s.resume().unwrap();
    assert_eq!(count(&s).unwrap(), 1);
    s.close().unwrap();
}

#[test]
fn suspend_with_checkpoint_first_leaves_an_empty_wal_and_resume_skips_the_barrier() {
    let dir = tempfile::tempdir().unwrap();
    let s = open(&dir);
    let r = s
        .suspend(SuspendOptions::default().checkpoint_first(true))
        .unwrap();
    let ck = r.checkpoint.expect("the checkpoint ran");
    assert!(!ck.busy);
    assert_eq!(ck.wal_bytes_after, 0);
    s.reset_io_stats();
    let rr = s.resume().unwrap();
    assert!(!rr.external_changes);
    s.write_blocking(|t| {
        t.execute("INSERT INTO t VALUES (2)", [])
            .map_err(Error::from)
    })
    .unwrap();
    assert_eq!(
        s.io_stats().open_barrier_syncs,
        0,
        "nothing changed while suspended: no barrier"
    );
    s.close().unwrap();
}

#[test]
fn resume_after_another_connection_wrote_reports_it_and_syncs_that_wal_first() {
    let dir = tempfile::tempdir().unwrap();
    let s = open(&dir);
    s.suspend(SuspendOptions::default()).unwrap();
    // Another handle on the same file (as another process would) writes meanwhile.
    let other = Store::open(dir.path().join("s.db"), StoreOptions::default()).unwrap();
    other
        .write_blocking(|t| {
            t.execute("INSERT INTO t VALUES (5)", [])
                .map_err(Error::from)
        })
        .unwrap();
    s.reset_io_stats();
    let rr = s.resume().unwrap();
    assert!(rr.external_changes);
    assert_eq!(count(&s).unwrap(), 2, "the other handle's row is seen");
    s.write_blocking(|t| {
        t.execute("INSERT INTO t VALUES (6)", [])
            .map_err(Error::from)
    })
    .unwrap();
    assert_eq!(
        s.io_stats().open_barrier_syncs,
        1,
        "the WAL the other handle wrote is synced before this one commits on top"
    );
    other.close().unwrap();
    s.close().unwrap();
}

#[test]
fn close_while_suspended_commits_the_queued_writes() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("s.db");
    let s = open(&dir);
    s.suspend(SuspendOptions::default()).unwrap();
    let fut = s.write(|t| {
        t.execute("INSERT INTO t VALUES (2)", [])
            .map_err(Error::from)
    });
    s.close().unwrap();
    assert_eq!(fut.wait().unwrap(), 1);
    let again = Store::open(&path, StoreOptions::default()).unwrap();
    assert_eq!(count(&again).unwrap(), 2);
    again.close().unwrap();
}

#[test]
fn suspend_and_resume_many_times_keep_the_store_working() {
    let dir = tempfile::tempdir().unwrap();
    let s = open(&dir);
    for i in 0..20 {
        s.suspend(SuspendOptions::default()).unwrap();
        // Resume and suspend again at once: the threads may not even have woken.
        s.resume().unwrap();
        if i % 2 == 0 {
            s.suspend(SuspendOptions::default()).unwrap();
            s.resume().unwrap();
        }
        s.write_blocking(move |t| {
            t.execute("INSERT INTO t VALUES (?1)", [i])
                .map_err(Error::from)
        })
        .unwrap();
    }
    assert_eq!(count(&s).unwrap(), 21);
    assert!(!s.checkpoint(CheckpointMode::Truncate).unwrap().busy);
    s.close().unwrap();
}

#[test]
fn suspend_inside_a_write_closure_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let s = open(&dir);
    let s2 = s.clone();
    let r = s
        .write_blocking(move |_| Ok::<_, Error>(s2.suspend(SuspendOptions::default())))
        .unwrap();
    assert!(matches!(r, Err(Error::Cancelled { .. })), "{r:?}");
    assert!(!s.is_suspended());
    s.close().unwrap();
}

#[test]
fn a_closure_busy_outside_sql_makes_suspend_time_out_and_its_write_still_commits() {
    let dir = tempfile::tempdir().unwrap();
    let s = open(&dir);
    let (started_tx, started) = mpsc::channel();
    let (go_tx, go) = mpsc::channel::<()>();
    let fut = s.write(move |t| {
        t.execute("INSERT INTO t VALUES (2)", [])?;
        started_tx.send(()).unwrap();
        // Rust work between statements: an SQLite interrupt cannot stop it.
        go.recv().unwrap();
        t.execute("INSERT INTO t VALUES (3)", [])
            .map_err(Error::from)
    });
    started.recv().unwrap();
    let e = s
        .suspend(
            SuspendOptions::default()
                .interrupt_after(Duration::from_millis(5))
                .timeout(Duration::from_millis(50)),
        )
        .unwrap_err();
    assert!(matches!(e, Error::SuspendTimeout { .. }), "{e:?}");
    assert!(s.is_suspended(), "the store stays suspended");
    go_tx.send(()).unwrap();
    // The closure's later statements ran after the interrupts: its group commits.
    assert_eq!(fut.wait().unwrap(), 1);
    s.resume().unwrap();
    assert_eq!(count(&s).unwrap(), 3);
    s.close().unwrap();
}
