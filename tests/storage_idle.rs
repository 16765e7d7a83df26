//! An idle database's threads sleep: no wake-up while there is no work.
//!
//! Wake-ups are counted by the kernel, not timed: a thread's context switches
//! (`/proc/self/task/<tid>/status`) only grow when it runs. This file holds one test
//! so that its process has exactly one `keel-writer` and one `keel-ckpt` thread.

use std::time::Duration;

use keel::storage::{Error, Store, StoreOptions};

/// Context switches of every thread of this process named `name`.
fn switches(name: &str) -> Vec<(String, u64)> {
    let mut out = Vec::new();
    for task in std::fs::read_dir("/proc/self/task").unwrap() {
        let dir = task.unwrap().path();
        let comm = std::fs::read_to_string(dir.join("comm")).unwrap_or_default();
        if comm.trim() != name {
            continue;
        }
        let status = std::fs::read_to_string(dir.join("status")).unwrap_or_default();
        let n: u64 = status
            .lines()
            .filter(|l| l.contains("ctxt_switches"))
            .filter_map(|l| l.split_whitespace().last()?.parse::<u64>().ok())
            .sum();
        out.push((dir.display().to_string(), n));
    }
    out
}

#[test]
fn an_idle_databases_writer_and_checkpointer_do_not_wake_for_10_s() {
    let dir = tempfile::tempdir().unwrap();
    // A short idle delay: the one deadline that exists (idle checkpoint and
    // vacuum check after the last commit) passes quickly.
    let store = Store::open(
        dir.path().join("idle.db"),
        StoreOptions::default().idle_checkpoint_after(Duration::from_millis(100)),
    )
    .unwrap();
    store
        .write_blocking(|t| {
            t.execute_batch("CREATE TABLE t(x); INSERT INTO t VALUES (1);")
                .map_err(Error::from)
        })
        .unwrap();
    // Let the post-commit deadlines pass.
    std::thread::sleep(Duration::from_secs(1));
    let writer0 = switches("keel-writer");
    let ckpt0 = switches("keel-ckpt");
    assert_eq!(writer0.len(), 1, "{writer0:?}");
    assert_eq!(ckpt0.len(), 1, "{ckpt0:?}");
    std::thread::sleep(Duration::from_secs(10));
    assert_eq!(
        switches("keel-writer"),
        writer0,
        "the idle writer thread woke up"
    );
    assert_eq!(
        switches("keel-ckpt"),
        ckpt0,
        "the idle checkpointer thread woke up"
    );
    // And it still works.
    store
        .write_blocking(|t| {
            t.execute_batch("INSERT INTO t VALUES (2)")
                .map_err(Error::from)
        })
        .unwrap();
    store.close().unwrap();
}
