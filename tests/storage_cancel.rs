//! Dropping an `OpenFuture` mid-open leaves no half-open database and no thread.
//! (Its own test binary, so keel threads of other tests cannot interfere.)

use std::time::{Duration, Instant};

use keel::storage::rusqlite::{self, config::DbConfig};
use keel::storage::{Store, StoreOptions, SyncPolicy};

fn keel_threads() -> Vec<String> {
    let mut v = Vec::new();
    if let Ok(rd) = std::fs::read_dir("/proc/self/task") {
        for t in rd.flatten() {
            if let Ok(name) = std::fs::read_to_string(t.path().join("comm")) {
                if name.starts_with("keel-") {
                    v.push(name.trim().to_string());
                }
            }
        }
    }
    v
}

#[test]
fn dropping_open_future_mid_open_leaves_nothing_behind() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("c.db");
    {
        let c = rusqlite::Connection::open(&path).unwrap();
        c.execute_batch(
            "PRAGMA journal_mode=WAL; PRAGMA wal_autocheckpoint=0; CREATE TABLE t(x); INSERT INTO t VALUES (1);",
        )
        .unwrap();
        c.set_db_config(DbConfig::SQLITE_DBCONFIG_NO_CKPT_ON_CLOSE, true)
            .unwrap();
    }
    let slow = SyncPolicy::custom(|ctx| {
        std::thread::sleep(Duration::from_millis(500));
        ctx.full_sync()
    });
    let fut = Store::open_async(&path, StoreOptions::default().open_barrier_sync(slow));
    std::thread::sleep(Duration::from_millis(100));
    if cfg!(target_os = "linux") {
        let mut t = keel_threads();
        t.sort();
        // The open thread (readable already) waits for the barrier thread.
        assert_eq!(
            t,
            ["keel-barrier", "keel-open"],
            "open threads running mid-open"
        );
    }
    drop(fut); // cancel while the barrier sync is in flight

    let deadline = Instant::now() + Duration::from_secs(5);
    while !keel_threads().is_empty() && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(20));
    }
    assert!(keel_threads().is_empty(), "leaked: {:?}", keel_threads());

    // Nothing half-open: an exclusive lock can be taken, and the data is intact.
    let c = rusqlite::Connection::open(&path).unwrap();
    c.execute_batch("PRAGMA locking_mode=EXCLUSIVE; BEGIN EXCLUSIVE; COMMIT;")
        .unwrap();
    let n: i64 = c
        .query_row("SELECT count(*) FROM t", [], |r| r.get(0))
        .unwrap();
    assert_eq!(n, 1);
    drop(c);

    // And a normal open works afterwards (also after cancel-after-completion).
    let fut = Store::open_async(&path, StoreOptions::default());
    std::thread::sleep(Duration::from_millis(300));
    drop(fut); // completed but never polled: the open thread closes the store
    let deadline = Instant::now() + Duration::from_secs(5);
    while !keel_threads().is_empty() && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(20));
    }
    assert!(keel_threads().is_empty(), "leaked: {:?}", keel_threads());
    let s = Store::open(&path, StoreOptions::default()).unwrap();
    s.close().unwrap();
    assert!(keel_threads().is_empty());
}
