//! Open-pipeline and group-commit benchmark (usable before durable).
//!
//! `cargo bench -p keel-benches --bench open -- [--quick]` writes `target/keel-bench/open.json`:
//! `{"scenario":"open","metrics":{...}}` (numbers only). `--quick` lowers repetition
//! only; sizes (16 MiB WAL, 1,000 transactions, 16 tasks, 3 s simulated sync) stay.
//! `first_write_ack_ms` is measured in the tour's shape (`examples/tour.rs`): every
//! sync slow, one at a time, the default idle checkpoint delay.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use keel::storage::rusqlite::{self, config::DbConfig};
use keel::storage::{Error, Store, StoreOptions, SyncPolicies, SyncPolicy};

mod support;
use support::median;

const WAL_TARGET: u64 = 16 << 20;
const TXNS: usize = 1000;
const TASKS: usize = 16;
const SLOW_SYNC: Duration = Duration::from_secs(3);

fn wal(p: &Path) -> PathBuf {
    let mut s = p.as_os_str().to_owned();
    s.push("-wal");
    s.into()
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

/// A database whose last writer was killed with `target` bytes in the WAL.
fn make_wal_template(dir: &Path, target: u64) -> PathBuf {
    let p = dir.join("template.db");
    let c = rusqlite::Connection::open(&p).unwrap();
    c.execute_batch(
        "PRAGMA journal_mode=WAL; PRAGMA wal_autocheckpoint=0; PRAGMA synchronous=OFF;
         CREATE TABLE t(id INTEGER PRIMARY KEY, v BLOB);",
    )
    .unwrap();
    while std::fs::metadata(wal(&p)).map(|m| m.len()).unwrap_or(0) < target {
        c.execute_batch("BEGIN").unwrap();
        for _ in 0..200 {
            c.execute("INSERT INTO t(v) VALUES (randomblob(1000))", [])
                .unwrap();
        }
        c.execute_batch("COMMIT").unwrap();
    }
    c.set_db_config(DbConfig::SQLITE_DBCONFIG_NO_CKPT_ON_CLOSE, true)
        .unwrap();
    drop(c);
    p
}

fn copy_db(template: &Path, to: &Path) {
    std::fs::copy(template, to).unwrap();
    if wal(template).exists() {
        std::fs::copy(wal(template), wal(to)).unwrap();
    }
}

fn quiet() -> StoreOptions {
    StoreOptions::default().idle_checkpoint_after(Duration::from_secs(3600))
}

fn main() {
    let quick = support::flag("--quick");
    let reps_slow = if quick { 1 } else { 3 };
    let reps = if quick { 3 } else { 7 };
    let root = tempfile::tempdir().unwrap();
    let mut metrics: Vec<(&str, f64)> = Vec::new();

    eprintln!("building a {} MiB WAL template…", WAL_TARGET >> 20);
    let template = make_wal_template(root.path(), WAL_TARGET);
    let wal_bytes = std::fs::metadata(wal(&template)).unwrap().len();
    let small = make_wal_template(&root.path().join("small").tap_mkdir(), 64 * 1024);

    // caller_blocked_ms / sync_open_ms: a leftover WAL and a 3 s open-barrier sync.
    let slow = || {
        SyncPolicy::custom(|ctx| {
            std::thread::sleep(SLOW_SYNC);
            ctx.full_sync()
        })
    };
    let mut blocked = 0f64;
    let mut sync_open = Vec::new();
    let mut first_read = Vec::new();
    let mut first_ack = Vec::new();
    let mut durable_at = Vec::new();
    let mut after_durable = Vec::new();
    for i in 0..reps_slow {
        let p = root.path().join(format!("slow-a{i}.db"));
        copy_db(&small, &p);
        let t = Instant::now();
        let fut = Store::open_async(&p, quiet().open_barrier_sync(slow()));
        blocked = blocked.max(ms(t.elapsed()));
        // The future resolves at readable: the first read runs while the 3 s
        // barrier sync is still in flight.
        let store = fut.wait().unwrap();
        let n: i64 = store
            .read(|c| {
                c.query_row("SELECT count(*) FROM t", [], |r| r.get(0))
                    .map_err(Error::from)
            })
            .unwrap();
        first_read.push(ms(t.elapsed()));
        assert!(n > 0);
        store.durable().wait().unwrap();
        store.close().unwrap();

        // first_write_ack_ms, in the tour's shape (examples/tour.rs): *every* sync is
        // slow, through one device that runs one sync at a time (as flash does), and
        // the idle checkpoint delay is the default, shorter than the barrier. A write
        // submitted right after readable is queued; it must be the first thing after
        // the barrier: acknowledged one commit sync after durable, not behind an
        // idle checkpoint's two syncs.
        let p = root.path().join(format!("slow-t{i}.db"));
        copy_db(&small, &p);
        let device = std::sync::Arc::new(std::sync::Mutex::new(()));
        let phone = SyncPolicy::custom(move |ctx| {
            let _one_at_a_time = device.lock().unwrap();
            std::thread::sleep(SLOW_SYNC);
            ctx.full_sync()
        });
        let t = Instant::now();
        let store = Store::open_async(&p, StoreOptions::default().sync(SyncPolicies::all(phone)))
            .wait()
            .unwrap();
        store
            .write(|t| {
                t.execute("INSERT INTO t(v) VALUES (randomblob(100))", [])?;
                Ok::<_, Error>(())
            })
            .wait()
            .unwrap();
        let ack = t.elapsed();
        let durable = store.open_report().durable_after.unwrap();
        first_ack.push(ms(ack));
        durable_at.push(ms(durable));
        after_durable.push(ack.saturating_sub(durable).as_secs_f64() / SLOW_SYNC.as_secs_f64());
        store.close().unwrap();

        let p = root.path().join(format!("slow-b{i}.db"));
        copy_db(&small, &p);
        let t = Instant::now();
        let store = Store::open(&p, quiet().open_barrier_sync(slow())).unwrap();
        sync_open.push(ms(t.elapsed()));
        store.close().unwrap();
    }
    metrics.push(("caller_blocked_ms", blocked));
    let sync_open_ms = median(sync_open);
    metrics.push(("sync_open_ms", sync_open_ms));
    metrics.push(("simulated_sync_ms", ms(SLOW_SYNC)));
    let ttfr = median(first_read);
    metrics.push(("time_to_first_read_ms", ttfr));
    metrics.push(("first_write_ack_ms", median(first_ack)));
    metrics.push(("durable_after_ms", median(durable_at)));
    metrics.push(("first_write_syncs_after_durable", median(after_durable)));
    metrics.push(("first_read_vs_blocking_open_ratio", ttfr / sync_open_ms));

    // open_ms_wal_0: empty WAL, real syncs, default policy.
    let base = root.path().join("wal0.db");
    copy_db(&template, &base);
    Store::open(&base, quiet()).unwrap().close().unwrap(); // checkpoints, removes WAL
    let mut v = Vec::new();
    for _ in 0..reps {
        let t = Instant::now();
        let s = Store::open(&base, quiet()).unwrap();
        v.push(ms(t.elapsed()));
        s.close().unwrap();
    }
    metrics.push(("open_ms_wal_0", median(v)));

    // open_ms_wal_16mib_no_checkpoint: 16 MiB left in the WAL by a killed process.
    let mut v = Vec::new();
    let mut raw = Vec::new();
    for i in 0..reps {
        let p = root.path().join(format!("wal16-{i}.db"));
        copy_db(&template, &p);
        let t = Instant::now();
        let s = Store::open(&p, quiet()).unwrap();
        v.push(ms(t.elapsed()));
        drop(s);
        // Baseline: raw rusqlite open + first read on the same kind of file.
        let p = root.path().join(format!("raw16-{i}.db"));
        copy_db(&template, &p);
        let t = Instant::now();
        let c = rusqlite::Connection::open(&p).unwrap();
        let _: i64 = c
            .query_row("SELECT count(*) FROM sqlite_schema", [], |r| r.get(0))
            .unwrap();
        raw.push(ms(t.elapsed()));
    }
    metrics.push(("open_ms_wal_16mib_no_checkpoint", median(v)));
    metrics.push(("raw_rusqlite_open_ms_wal_16mib", median(raw)));
    metrics.push(("wal_bytes_at_open", wal_bytes as f64));

    // open_ms_wal_16mib_after_background: on_background() ran before the app went away.
    let mut v = Vec::new();
    for i in 0..reps {
        let p = root.path().join(format!("bg16-{i}.db"));
        copy_db(&template, &p);
        let s = Store::open(&p, quiet()).unwrap();
        s.on_background().unwrap();
        s.close().unwrap();
        let t = Instant::now();
        let s = Store::open(&p, quiet()).unwrap();
        v.push(ms(t.elapsed()));
        s.close().unwrap();
    }
    metrics.push(("open_ms_wal_16mib_after_background", median(v)));

    // Group commit vs sequential, under Full.
    let full = || quiet().commit_sync(SyncPolicy::Full);
    let setup = |name: &str| {
        let s = Store::open(root.path().join(name), full()).unwrap();
        s.write_blocking(|t| {
            t.execute_batch("CREATE TABLE t(id INTEGER PRIMARY KEY, v BLOB)")
                .map_err(Error::from)
        })
        .unwrap();
        s.reset_io_stats();
        s
    };
    let one = |s: &Store| {
        s.write(|t| {
            t.execute("INSERT INTO t(v) VALUES (randomblob(100))", [])?;
            Ok::<_, Error>(())
        })
    };
    let seq = setup("seq.db");
    let t = Instant::now();
    for _ in 0..TXNS {
        one(&seq).wait().unwrap();
    }
    let seq_time = t.elapsed();
    let seq_syncs = seq.io_stats().wal.syncs;
    seq.close().unwrap();

    let grp = setup("grp.db");
    let t = Instant::now();
    let handles: Vec<_> = (0..TASKS)
        .map(|_| {
            let s = grp.clone();
            std::thread::spawn(move || {
                for _ in 0..TXNS / TASKS {
                    one(&s).wait().unwrap();
                }
            })
        })
        .collect();
    for h in handles {
        h.join().unwrap();
    }
    let grp_time = t.elapsed();
    let grp_syncs = grp.io_stats().wal.syncs;
    let n: i64 = grp
        .read(|c| {
            c.query_row("SELECT count(*) FROM t", [], |r| r.get(0))
                .map_err(Error::from)
        })
        .unwrap();
    assert_eq!(n as usize, TXNS / TASKS * TASKS);
    grp.close().unwrap();

    // Raw rusqlite baselines, each side durable per commit (raw: WAL,
    // synchronous=FULL, plain fsync per commit; keel `Full`: fsync per commit group
    // here, F_FULLFSYNC on Apple). Like with like: the same 1,000 single-row
    // transactions, sequential against sequential, and from the same 16 concurrent
    // threads (each with its own connection, as raw SQLite needs) against keel's 16
    // tasks.
    let raw_open = |name: &str| {
        let c = rusqlite::Connection::open(root.path().join(name)).unwrap();
        c.busy_timeout(std::time::Duration::from_secs(60)).unwrap();
        c.execute_batch("PRAGMA journal_mode=WAL; PRAGMA synchronous=FULL; CREATE TABLE IF NOT EXISTS t(id INTEGER PRIMARY KEY, v BLOB);")
            .unwrap();
        c
    };
    let c = raw_open("raw.db");
    let t = Instant::now();
    for _ in 0..TXNS {
        c.execute("INSERT INTO t(v) VALUES (randomblob(100))", [])
            .unwrap();
    }
    let raw_seq = t.elapsed();
    drop(c);
    drop(raw_open("raw16.db"));
    let t = Instant::now();
    let handles: Vec<_> = (0..TASKS)
        .map(|_| {
            let c = raw_open("raw16.db");
            std::thread::spawn(move || {
                for _ in 0..TXNS / TASKS {
                    c.execute("INSERT INTO t(v) VALUES (randomblob(100))", [])
                        .unwrap();
                }
            })
        })
        .collect();
    for h in handles {
        h.join().unwrap();
    }
    let raw_conc = t.elapsed();

    metrics.push(("group_commit_syncs", grp_syncs as f64));
    metrics.push(("sequential_commit_syncs", seq_syncs as f64));
    metrics.push(("group_commit_ms", ms(grp_time)));
    metrics.push(("sequential_commit_ms", ms(seq_time)));
    metrics.push(("raw_rusqlite_sequential_commit_ms", ms(raw_seq)));
    metrics.push(("raw_rusqlite_concurrent_commit_ms", ms(raw_conc)));
    metrics.push((
        "group_commit_speedup",
        seq_time.as_secs_f64() / grp_time.as_secs_f64(),
    ));
    metrics.push((
        "sequential_commit_ratio",
        seq_time.as_secs_f64() / raw_seq.as_secs_f64(),
    ));
    metrics.push((
        "concurrent_commit_ratio",
        grp_time.as_secs_f64() / raw_conc.as_secs_f64(),
    ));
    metrics.push(("transactions", TXNS as f64));
    metrics.push(("tasks", TASKS as f64));

    for (k, v) in &metrics {
        eprintln!("{k:>40} {v:>12.3}");
    }
    let metric = |name: &str| {
        metrics
            .iter()
            .find(|(k, _)| *k == name)
            .map_or(0.0, |x| x.1)
    };
    let summary = format!(
        "`open_async` blocks the caller for {:.2} ms while a simulated {:.0} s sync runs on a keel \
         thread; the first read answers {:.1} ms after the call ({:.2}% of the {:.0} ms blocking \
         open). With every sync that slow, as in the tour, a write submitted then is acknowledged \
         at {:.0} ms, {:.2} syncs after durable (its own commit sync: nothing runs before it). \
         {} durable single-row transactions from {} tasks under `Full` cost {} WAL syncs instead \
         of {} sequentially; they take {:.0} ms in keel and {:.0} ms on raw rusqlite with {} \
         threads (synchronous=FULL, each commit durable on both sides).",
        blocked,
        SLOW_SYNC.as_secs_f64(),
        metric("time_to_first_read_ms"),
        100.0 * metric("first_read_vs_blocking_open_ratio"),
        metric("sync_open_ms"),
        metric("first_write_ack_ms"),
        metric("first_write_syncs_after_durable"),
        TXNS,
        TASKS,
        grp_syncs,
        seq_syncs,
        ms(grp_time),
        ms(raw_conc),
        TASKS
    );
    support::write_metrics_report("open", &metrics, None, note, summary);
}

fn note(metric: &str) -> &'static str {
    match metric {
        "caller_blocked_ms" => "longest time `open_async` blocked the calling thread, with a 3 s simulated open-barrier sync",
        "sync_open_ms" => "the same open with the blocking `Store::open` (returns at durable)",
        "time_to_first_read_ms" => "from the `open_async` call to the first read's answer, with the 3 s barrier sync still running (goal ≤ 20)",
        "first_write_ack_ms" => "the tour's shape (every sync 3 s, one at a time; default 2 s idle checkpoint delay): from the `open_async` call to the acknowledgement of a write submitted right after readable (≈ the barrier sync + its own commit sync)",
        "durable_after_ms" => "`OpenReport::durable_after` of that open (the barrier done)",
        "first_write_syncs_after_durable" => "(first_write_ack_ms − durable_after_ms) ÷ the simulated sync: the queued write waits for its own commit sync only (goal ≈ 1; a checkpoint first would make it ≈ 3)",
        "first_read_vs_blocking_open_ratio" => "time_to_first_read_ms ÷ sync_open_ms (goal ≤ 0.01)",
        "simulated_sync_ms" => "latency injected per open-barrier sync (Custom policy)",
        "open_ms_wal_0" => "blocking open, empty WAL, default policy (real syncs)",
        "open_ms_wal_16mib_no_checkpoint" => "blocking open with 16 MiB left in the WAL by a killed process (barrier sync + recovery)",
        "raw_rusqlite_open_ms_wal_16mib" => "baseline: raw rusqlite open + first read on the same file (no barrier sync)",
        "wal_bytes_at_open" => "exact WAL size used for the 16 MiB scenarios",
        "open_ms_wal_16mib_after_background" => "blocking open after `on_background()` truncated that WAL before the app went away",
        "group_commit_syncs" => "WAL syncs for 1,000 single-row transactions from 16 concurrent tasks, `Full`",
        "sequential_commit_syncs" => "WAL syncs for 1,000 sequential single-row transactions, `Full`",
        "group_commit_ms" => "wall time, 16 concurrent tasks",
        "sequential_commit_ms" => "wall time, sequential",
        "raw_rusqlite_sequential_commit_ms" => "baseline: the same 1,000 transactions as autocommit inserts on one raw rusqlite connection, WAL, synchronous=FULL (durable per commit)",
        "raw_rusqlite_concurrent_commit_ms" => "baseline: the same 1,000 autocommit inserts from 16 threads, each with its own raw rusqlite connection, WAL, synchronous=FULL (durable per commit)",
        "group_commit_speedup" => "keel against itself: sequential_commit_ms / group_commit_ms",
        "sequential_commit_ratio" => "keel/raw time, 1,000 sequential durable single-row transactions (one task each side)",
        "concurrent_commit_ratio" => "keel/raw time, 1,000 durable single-row transactions from 16 concurrent tasks/threads (keel: group commit)",
        "transactions" => "transactions per commit scenario",
        "tasks" => "concurrent tasks in the group-commit scenario",
        _ => "",
    }
}

trait TapMkdir {
    fn tap_mkdir(self) -> Self;
}

impl TapMkdir for PathBuf {
    fn tap_mkdir(self) -> Self {
        std::fs::create_dir_all(&self).unwrap();
        self
    }
}
