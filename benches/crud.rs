//! CRUD benchmark: keel, used through its generated Rust types,
//! against raw rusqlite storing the same six fields as plain columns — what a Rust
//! developer would write by hand instead — both in this process.
//!
//! `cargo bench -p keel-benches --bench crud -- [--quick]` (or `cargo xtask bench crud
//! [--quick] [--json]`) writes `target/keel-bench/crud.json`: the usual `metrics`,
//! `notes` and `summary`, plus `targets` — each issue-14 target with the median, min
//! and max of its repetitions, the goal, and whether the median meets it.
//!
//! `crud --count keel|raw insert|fetch|get|update N` runs one of the comparisons
//! alone over N objects inside `measured_region`, for an instruction counter:
//! `valgrind --tool=callgrind --collect-atstart=no
//! --toggle-collect='*measured_region*'` counts only that region, and counts do
//! not depend on the machine's load, so keel ÷ raw per operation can be compared
//! on a machine too busy for calm timings.
//!
//! This doc comment's sections *How each side is configured* and *Method* are the one
//! description of the set-up: the report quotes them (`method`) into BENCHMARKS.md.
//!
//! # The object
//!
//! `bench.Doc` (`support/crud.fbs`): `id: string (primary)`, `title: string`,
//! `priority: int (indexed)`, `color: Color` (a byte enum), `score: double`,
//! `body: string`. The same generated `Doc` values feed both sides, built before the
//! timers start (except in the large insert, see below).
//!
//! # How each side is configured
//!
//! * **keel**: `Database::open_for::<Doc>` with `StoreOptions::default()` and every
//!   sync policy set to the policy under test. keel then runs SQLite in WAL mode with
//!   `synchronous` = `NORMAL` (policy `Normal`) or `FULL` (policy `Full`),
//!   `wal_autocheckpoint=0`, `journal_size_limit` = the checkpoint threshold (4 MiB),
//!   and a background checkpointer thread on its own connection (`synchronous=FULL`)
//!   running `wal_checkpoint(PASSIVE)` once the WAL holds 4 MiB of frames or after 2 s
//!   without commits (when commits landed while one ran, the writer copies that tail
//!   after its next commit, so that the WAL starts over), `TRUNCATE` at close. keel also sets `auto_vacuum=INCREMENTAL`
//!   and `secure_delete=FAST` (its own choices, part of what is measured), verifies
//!   and encodes FlatBuffers, stores each body without the key string its key column
//!   holds (and puts it back on every read), maintains its indexes and runs every
//!   write on its writer thread.
//! * **raw rusqlite**: one connection, `CREATE TABLE doc(id TEXT PRIMARY KEY NOT NULL,
//!   title TEXT, priority INTEGER NOT NULL, color INTEGER NOT NULL, score REAL NOT
//!   NULL, body TEXT)` and `CREATE INDEX doc_priority ON doc(priority)` (keel's key and
//!   its one index), cached prepared statements, WAL with the same `synchronous` as
//!   keel, the same `wal_autocheckpoint=0` and `journal_size_limit`, and its own
//!   background checkpoint thread copying keel's rule (a second connection with
//!   `synchronous=FULL`, woken from a WAL hook: PASSIVE at keel's threshold or after
//!   keel's idle delay, both read from `StoreOptions::default()`; the same tail copied
//!   by the writer connection from its WAL hook; TRUNCATE at close).
//!   A single statement runs in autocommit; batches run in `BEGIN … COMMIT`.
//!
//! What each side guarantees: under `Full` a transaction that returned is durable on
//! both sides (the WAL is fsynced in the commit); under `Normal` both are atomic and
//! survive an application crash, but the last commits can roll back on power loss.
//! keel additionally validates every object against the schema on the way in.
//!
//! # Method
//!
//! Every comparison runs several times in this one process, keel and raw alternately
//! first: the short ones (a batch of 10,000, the reads) 11 times, the long ones
//! (single-object transactions, the large insert) 7 times; 5 times each with
//! `--quick`. Each repetition gives one keel ÷ raw time ratio; the
//! report gives their median (the figure compared with the target) and min–max. The
//! batch and read comparisons use `Normal` (they measure engine overhead, not the
//! disk's fsync latency: one fsync per batch on both sides); sequential single-object
//! transactions run under both `Normal` and `Full`. The concurrent speedup is keel
//! only: the same single-object update transactions from 8 threads at once against
//! one after another, under `Full`, where group commit saves fsyncs. Each repetition
//! of the single-object transactions is cut into 10 blocks, and keel sequential, raw
//! sequential and keel concurrent take turns block by block: an fsync on this
//! machine's shared disk takes 0.1 ms or 4 ms by the moment, and turns spread a slow
//! spell over all three instead of whichever ran then. keel's write closures must own
//! their inputs (objects, keys); they hand them back, and both sides free their
//! inputs after the clock stops.
//!
//! The large insert (1,000,000 objects in 10 transactions; 50,000 with `--quick`)
//! runs each side in a child process of this binary (`--child-insert`), since peak
//! RSS (`VmHWM` in `/proc/self/status`) is per process. Its objects are built inside
//! the timed loop on both sides, so neither holds them all in memory. After the
//! insert each side closes (TRUNCATE checkpoint) and the file sizes are compared.

use std::ops::Range;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{mpsc, Arc};
use std::time::{Duration, Instant};

use keel::prelude::*;
use keel::storage::rusqlite::{self, params};
use keel::storage::SyncPolicies;

mod support;

/// Generated from `support/crud.fbs` by `support/build.rs`.
#[allow(dead_code, unused_imports, clippy::all)]
mod model {
    include!(concat!(env!("OUT_DIR"), "/crud.rs"));
}
use model::{Color, Doc, DocFields};

/// The text every object carries in `body`.
const BODY: &str = "the quick brown fox jumps over the lazy dog, twice: the quick brown fox";

/// Concurrent writers in the speedup comparison.
const WRITERS: usize = 8;

/// Blocks each repetition of the single-transaction comparisons is cut into (see
/// [`interleaved`]).
const BLOCKS: usize = 10;

/// The primary key of object `i`.
fn key(i: usize) -> String {
    format!("doc-{i:08}")
}

/// Object `i`; `version` changes every field but the key (so an update writes).
fn doc(i: usize, version: i32) -> Doc {
    DocFields {
        id: key(i),
        title: Some(format!("title {i} v{version}")),
        priority: ((i * 7_919) % 10_000) as i32 + version,
        color: Color::from_raw((i % 6) as i8),
        score: i as f64 * 0.25 + f64::from(version),
        body: Some(BODY.to_string()),
    }
    .into()
}

fn docs(range: Range<usize>, version: i32) -> Vec<Doc> {
    range.map(|i| doc(i, version)).collect()
}

/// Seconds `f` takes.
fn time(f: impl FnOnce()) -> f64 {
    let t = Instant::now();
    f();
    t.elapsed().as_secs_f64()
}

/// Seconds `f` takes. What it returns (the inputs keel's write closure had to own)
/// is freed after the clock stops, as raw's borrowed inputs are.
fn time_returning<T>(f: impl FnOnce() -> T) -> f64 {
    let t = Instant::now();
    let out = f();
    let secs = t.elapsed().as_secs_f64();
    drop(out);
    secs
}

// ---------------------------------------------------------------- keel side

fn open_keel(path: &Path, policy: SyncPolicy) -> Database {
    let opts = StoreOptions::default().sync(SyncPolicies::all(policy));
    Database::open_for::<Doc>(path, opts).expect("open keel")
}

/// Inserts `d` in one transaction; gives the objects back.
fn keel_insert(db: &Database, d: Vec<Doc>) -> Vec<Doc> {
    db.write(move |t| {
        for x in &d {
            t.insert(x)?;
        }
        Ok(d)
    })
    .wait()
    .unwrap()
}

/// One transaction per object, one after another.
fn keel_update_each(db: &Database, d: Vec<Doc>) {
    for x in d {
        // The blocking path: inline when no other write is queued, group commit
        // when the other threads' writes are.
        db.write_blocking(move |t| t.update(&x)).unwrap();
    }
}

/// One transaction per object, from [`WRITERS`] threads at once.
fn keel_update_each_concurrently(db: &Database, d: Vec<Doc>) {
    std::thread::scope(|s| {
        for w in 0..WRITERS {
            let mine: Vec<Doc> = d.iter().skip(w).step_by(WRITERS).cloned().collect();
            s.spawn(move || keel_update_each(db, mine));
        }
    });
}

// ---------------------------------------------------------------- raw side

const RAW_SCHEMA: &str = "
    CREATE TABLE IF NOT EXISTS doc(id TEXT PRIMARY KEY NOT NULL, title TEXT,
        priority INTEGER NOT NULL, color INTEGER NOT NULL, score REAL NOT NULL, body TEXT);
    CREATE INDEX IF NOT EXISTS doc_priority ON doc(priority);";
const RAW_COLUMNS: &str = "id, title, priority, color, score, body";
const RAW_INSERT: &str =
    "INSERT INTO doc(id, title, priority, color, score, body) VALUES (?1, ?2, ?3, ?4, ?5, ?6)";
const RAW_UPDATE: &str =
    "UPDATE doc SET title = ?2, priority = ?3, color = ?4, score = ?5, body = ?6 WHERE id = ?1";

/// What the raw writer's WAL hook tells its checkpoint thread (keel's rule, copied).
struct RawSignal {
    frames: AtomicU64,
    dirty: AtomicBool,
    /// The checkpointer's last PASSIVE ended behind commits that landed meanwhile:
    /// the writer copies the tail after its next commit (keel's `finish_checkpoint`).
    finish: AtomicBool,
    base: Instant,
    last_commit_ns: AtomicU64,
}

impl RawSignal {
    fn since_last_commit(&self) -> Duration {
        self.base.elapsed().saturating_sub(Duration::from_nanos(
            self.last_commit_ns.load(Ordering::Relaxed),
        ))
    }
}

enum RawCkpt {
    Committed,
    Shutdown,
}

/// Raw rusqlite as a careful hand-written app runs it: see the module docs.
struct Raw {
    conn: rusqlite::Connection,
    ckpt: Option<(mpsc::Sender<RawCkpt>, std::thread::JoinHandle<()>)>,
}

impl Raw {
    fn open(path: &Path, policy: SyncPolicy) -> Raw {
        let defaults = StoreOptions::default();
        let threshold = defaults.checkpoint_threshold_bytes;
        let idle = defaults.idle_checkpoint_delay;
        let synchronous = match policy {
            SyncPolicy::Normal => "NORMAL",
            _ => "FULL",
        };
        let mut conn = rusqlite::Connection::open(path).expect("open raw");
        conn.execute_batch(&format!(
            "PRAGMA journal_mode=WAL; PRAGMA synchronous={synchronous};
             PRAGMA wal_autocheckpoint=0; PRAGMA journal_size_limit={threshold};{RAW_SCHEMA}"
        ))
        .expect("raw schema");
        conn.set_prepared_statement_cache_capacity(64);
        let page_size: i64 = conn
            .query_row("PRAGMA page_size", [], |r| r.get(0))
            .unwrap();
        let page_size = u64::try_from(page_size).unwrap_or(4096);
        let threshold_frames = (threshold / page_size.max(512)).max(1);

        let ck = rusqlite::Connection::open(path).expect("open raw checkpointer");
        ck.execute_batch(&format!(
            "PRAGMA synchronous=FULL; PRAGMA wal_autocheckpoint=0; PRAGMA journal_size_limit={threshold};"
        ))
        .unwrap();
        let sig = Arc::new(RawSignal {
            frames: AtomicU64::new(0),
            dirty: AtomicBool::new(false),
            finish: AtomicBool::new(false),
            base: Instant::now(),
            last_commit_ns: AtomicU64::new(0),
        });
        let (tx, rx) = mpsc::channel();
        let thread = {
            let sig = Arc::clone(&sig);
            std::thread::spawn(move || raw_checkpointer(ck, rx, &sig, threshold_frames, idle))
        };
        let hook_tx = tx.clone();
        conn.wal_hook(Some(
            move |wal: &mut rusqlite::hooks::Wal, pages: std::ffi::c_int| {
                if sig.finish.swap(false, Ordering::AcqRel) {
                    // On the writer connection, after its commit: nothing can land
                    // meanwhile, so the next write starts the WAL over. Under the
                    // writer's `synchronous`, which both sides here share with the
                    // checkpoint policy.
                    if let Ok((log, done)) =
                        wal.checkpoint_v2(rusqlite::wal::CheckpointMode::PASSIVE)
                    {
                        if log == done {
                            sig.dirty.store(false, Ordering::Release);
                        }
                    }
                }
                let pages = u64::try_from(pages).unwrap_or(0);
                sig.frames.store(pages, Ordering::Relaxed);
                let ns = u64::try_from(sig.base.elapsed().as_nanos()).unwrap_or(u64::MAX);
                sig.last_commit_ns.store(ns, Ordering::Relaxed);
                let first = !sig.dirty.swap(true, Ordering::AcqRel);
                if first || pages >= threshold_frames {
                    let _ = hook_tx.send(RawCkpt::Committed);
                }
                Ok(())
            },
        ))
        .unwrap();
        Raw {
            conn,
            ckpt: Some((tx, thread)),
        }
    }

    fn insert(&self, d: &[Doc]) {
        self.conn.execute_batch("BEGIN").unwrap();
        {
            let mut st = self.conn.prepare_cached(RAW_INSERT).unwrap();
            for x in d {
                raw_bind_exec(&mut st, x);
            }
        }
        self.conn.execute_batch("COMMIT").unwrap();
    }

    /// One autocommit statement per object.
    fn update_each(&self, d: &[Doc]) {
        let mut st = self.conn.prepare_cached(RAW_UPDATE).unwrap();
        for x in d {
            raw_bind_exec(&mut st, x);
        }
    }

    /// Final TRUNCATE checkpoint on the checkpoint thread, then close.
    fn close(mut self) {
        if let Some((tx, thread)) = self.ckpt.take() {
            let _ = tx.send(RawCkpt::Shutdown);
            thread.join().unwrap();
        }
    }
}

impl Drop for Raw {
    fn drop(&mut self) {
        if let Some((tx, thread)) = self.ckpt.take() {
            let _ = tx.send(RawCkpt::Shutdown);
            let _ = thread.join();
        }
    }
}

fn raw_bind_exec(st: &mut rusqlite::CachedStatement<'_>, x: &Doc) {
    let n = st
        .execute(params![
            x.id,
            x.title,
            x.priority,
            x.color.to_raw(),
            x.score,
            x.body
        ])
        .unwrap();
    assert_eq!(n, 1);
}

fn raw_row(r: &rusqlite::Row<'_>) -> rusqlite::Result<Doc> {
    Ok(DocFields {
        id: r.get(0)?,
        title: r.get(1)?,
        priority: r.get(2)?,
        color: Color::from_raw(r.get(3)?),
        score: r.get(4)?,
        body: r.get(5)?,
    }
    .into())
}

/// keel's checkpointer loop (keel-storage `checkpointer_main`) minus what a raw app
/// has no use for: PASSIVE once the WAL passes the threshold (at most every 50 ms,
/// unless it has doubled) or after `idle` without commits, TRUNCATE at shutdown;
/// when commits landed while an over-threshold PASSIVE copied, the writer finishes
/// it after its next commit, so that the WAL starts over.
fn raw_checkpointer(
    conn: rusqlite::Connection,
    rx: mpsc::Receiver<RawCkpt>,
    sig: &RawSignal,
    threshold_frames: u64,
    idle: Duration,
) {
    // Returns whether it copied every frame, and how many frames it saw.
    let passive = || {
        sig.dirty.store(false, Ordering::Release);
        let (busy, log, done): (i64, i64, i64) = conn
            .query_row("PRAGMA wal_checkpoint(PASSIVE)", [], |r| {
                Ok((r.get(0)?, r.get(1)?, r.get(2)?))
            })
            .unwrap_or((1, -1, -1));
        let complete = busy == 0 && log == done;
        if !complete {
            sig.dirty.store(true, Ordering::Release);
        }
        (complete, log)
    };
    let mut last_auto: Option<Instant> = None;
    let mut not_before = Instant::now();
    loop {
        let msg = if sig.dirty.load(Ordering::Acquire) {
            let wait = idle
                .saturating_sub(sig.since_last_commit())
                .max(not_before.saturating_duration_since(Instant::now()));
            if wait.is_zero() {
                None
            } else {
                match rx.recv_timeout(wait) {
                    Ok(m) => Some(m),
                    Err(mpsc::RecvTimeoutError::Timeout) => continue,
                    Err(mpsc::RecvTimeoutError::Disconnected) => break,
                }
            }
        } else {
            match rx.recv() {
                Ok(m) => Some(m),
                Err(_) => break,
            }
        };
        match msg {
            None => {
                if !passive().0 {
                    // A reader holds old frames: retry after another idle delay.
                    not_before = Instant::now() + idle.max(Duration::from_millis(1));
                }
            }
            Some(RawCkpt::Committed) => {
                let frames = sig.frames.load(Ordering::Relaxed);
                let due = last_auto.is_none_or(|t| t.elapsed() >= Duration::from_millis(50))
                    || frames >= threshold_frames.saturating_mul(2);
                if frames >= threshold_frames && due && !sig.finish.load(Ordering::Acquire) {
                    last_auto = Some(Instant::now());
                    let (complete, copied) = passive();
                    let now = i64::try_from(sig.frames.load(Ordering::Relaxed)).unwrap_or(i64::MAX);
                    if complete && now > copied {
                        sig.finish.store(true, Ordering::Release);
                    }
                }
            }
            Some(RawCkpt::Shutdown) => break,
        }
    }
    let _ = conn.busy_timeout(Duration::from_secs(1));
    let _ = conn.query_row("PRAGMA wal_checkpoint(TRUNCATE)", [], |_| Ok(()));
}

// ---------------------------------------------------------------- the large insert, per process

/// What a `--child-insert` run prints on its one stdout line.
struct ChildResult {
    secs: f64,
    peak_rss_mb: f64,
    file_bytes: u64,
}

/// `crud --child-insert keel|raw PATH N`: insert N objects in 10 transactions into a
/// new database at PATH, close it, print `secs peak_rss_mb file_bytes`.
fn child_insert(args: &[String]) {
    let [side, path, n] = args else {
        panic!("usage: --child-insert keel|raw PATH N");
    };
    let path = PathBuf::from(path);
    let n: usize = n.parse().expect("N");
    let chunk = n.div_ceil(10);
    let ranges: Vec<Range<usize>> = (0..n)
        .step_by(chunk)
        .map(|s| s..(s + chunk).min(n))
        .collect();
    let secs = match side.as_str() {
        "keel" => {
            let db = open_keel(&path, SyncPolicy::Normal);
            let secs = time(|| {
                for r in ranges {
                    db.write(move |t| {
                        for i in r {
                            t.insert(&doc(i, 0))?;
                        }
                        Ok(())
                    })
                    .wait()
                    .unwrap();
                }
            });
            assert_eq!(db.fetch::<Doc>().count().unwrap() as usize, n);
            db.close().wait().unwrap();
            secs
        }
        "raw" => {
            let raw = Raw::open(&path, SyncPolicy::Normal);
            let secs = time(|| {
                for r in ranges {
                    raw.conn.execute_batch("BEGIN").unwrap();
                    {
                        let mut st = raw.conn.prepare_cached(RAW_INSERT).unwrap();
                        for i in r {
                            raw_bind_exec(&mut st, &doc(i, 0));
                        }
                    }
                    raw.conn.execute_batch("COMMIT").unwrap();
                }
            });
            raw.close();
            secs
        }
        other => panic!("unknown side `{other}`"),
    };
    let file_bytes: u64 = ["", "-wal"]
        .iter()
        .map(|suffix| {
            let mut p = path.clone().into_os_string();
            p.push(suffix);
            std::fs::metadata(p).map_or(0, |m| m.len())
        })
        .sum();
    println!("{secs} {} {file_bytes}", peak_rss_mb_exact());
}

/// Peak RSS in MB, unrounded (support's `peak_rss_mb` rounds to whole MB).
fn peak_rss_mb_exact() -> f64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("VmHWM:"))
                .and_then(|l| l.split_whitespace().nth(1))
                .and_then(|kb| kb.parse::<f64>().ok())
        })
        .map_or(0.0, |kb| kb / 1024.0)
}

fn run_child(side: &str, path: &Path, n: usize) -> ChildResult {
    let out = std::process::Command::new(std::env::current_exe().unwrap())
        .arg("--child-insert")
        .arg(side)
        .arg(path)
        .arg(n.to_string())
        .stderr(std::process::Stdio::inherit())
        .output()
        .expect("re-run the bench binary");
    assert!(out.status.success(), "{side} child insert failed");
    let line = String::from_utf8(out.stdout).unwrap();
    let f: Vec<f64> = line
        .split_whitespace()
        .map(|x| x.parse().expect("child output"))
        .collect();
    let _ = std::fs::remove_file(path);
    ChildResult {
        secs: f[0],
        peak_rss_mb: f[1],
        file_bytes: f[2] as u64,
    }
}

// ---------------------------------------------------------------- reporting

/// One issue-14 target: its repetitions, the goal and which side of it is good.
struct Target {
    metric: &'static str,
    label: String,
    values: Vec<f64>,
    goal: f64,
    higher_is_better: bool,
    unit: &'static str,
}

impl Target {
    fn ratio(metric: &'static str, label: String, keel: &[f64], raw: &[f64]) -> Target {
        Target {
            metric,
            label,
            values: keel.iter().zip(raw).map(|(k, r)| k / r).collect(),
            goal: 1.5,
            higher_is_better: false,
            unit: "×",
        }
    }

    fn sorted(&self) -> Vec<f64> {
        let mut v = self.values.clone();
        v.sort_by(f64::total_cmp);
        v
    }

    fn median(&self) -> f64 {
        support::median(self.values.clone())
    }

    fn met(&self) -> bool {
        if self.higher_is_better {
            self.median() >= self.goal
        } else {
            self.median() <= self.goal
        }
    }

    fn json(&self) -> serde_json::Value {
        let r = |x: f64| (x * 1000.0).round() / 1000.0;
        let v = self.sorted();
        serde_json::json!({
            "metric": self.metric,
            "label": self.label,
            "median": r(self.median()),
            "min": r(v[0]),
            "max": r(v[v.len() - 1]),
            "repetitions": v.len(),
            "values": self.values.iter().map(|&x| r(x)).collect::<Vec<_>>(),
            "target": self.goal,
            "better": if self.higher_is_better { "higher" } else { "lower" },
            "unit": self.unit,
            "met": self.met(),
        })
    }
}

/// Runs keel's and raw's halves of one repetition, alternating which goes first so
/// neither always meets the warmer cache.
fn pair(rep: usize, keel: impl FnOnce() -> f64, raw: impl FnOnce() -> f64) -> (f64, f64) {
    if rep.is_multiple_of(2) {
        let k = keel();
        (k, raw())
    } else {
        let r = raw();
        (keel(), r)
    }
}

/// One repetition of "keel sequential, raw sequential, keel concurrent" over `count`
/// objects, cut into [`BLOCKS`] blocks run in turn (the order rotating), so that a
/// slow spell of the shared disk (fsync here takes 0.1 ms or 4 ms, by the moment)
/// lands on all three rather than on whichever ran then. Returns the three times.
fn interleaved(
    rep: usize,
    count: usize,
    mut keel_seq: impl FnMut(Range<usize>) -> f64,
    mut raw_seq: impl FnMut(Range<usize>) -> f64,
    mut keel_conc: impl FnMut(Range<usize>) -> f64,
) -> [f64; 3] {
    let mut t = [0.0; 3];
    let size = count.div_ceil(BLOCKS);
    for (b, start) in (0..count).step_by(size).enumerate() {
        let range = start..(start + size).min(count);
        for i in 0..3 {
            match (rep + b + i) % 3 {
                0 => t[0] += keel_seq(range.clone()),
                1 => t[1] += raw_seq(range.clone()),
                _ => t[2] += keel_conc(range.clone()),
            }
        }
    }
    t
}

fn loadavg() -> f64 {
    std::fs::read_to_string("/proc/loadavg")
        .ok()
        .and_then(|s| s.split_whitespace().next().and_then(|x| x.parse().ok()))
        .unwrap_or(f64::NAN)
}

/// `crud --count keel|raw insert|fetch|get|update|txn|conc N`: one operation of the
/// benchmark over N objects, alone, for an instruction counter (see
/// [`support::measured_region`]): instruction counts do not depend on the machine's
/// load, so they show where keel's time goes against raw rusqlite's on a
/// machine too busy for a calm timing.
fn count_one(args: &[String]) {
    let [side, op, n] = args else {
        panic!("usage: --count keel|raw insert|fetch|get|update|txn|conc N");
    };
    let n: usize = n.parse().expect("N");
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("count.db");
    let base = docs(0..n, 0);
    let changed = docs(0..n, 1);
    let keys: Vec<String> = (0..n).map(key).collect();
    match side.as_str() {
        "keel" => {
            let db = open_keel(&path, SyncPolicy::Normal);
            if op != "insert" {
                keel_insert(&db, base.clone());
            }
            // Warm: the statements are prepared, a reader is open.
            db.get::<Doc>(&keys[0]).unwrap();
            let mut d = Some(if op == "update" || op == "txn" {
                changed
            } else {
                base
            });
            // The objects go back out of the write and are freed after the
            // region, as raw's borrowed ones are.
            let mut back = None;
            support::measured(|| match op.as_str() {
                "insert" => {
                    let d = d.take().unwrap();
                    back = Some(
                        db.write_blocking(move |t| {
                            for x in &d {
                                t.insert(x)?;
                            }
                            Ok(d)
                        })
                        .unwrap(),
                    );
                }
                "update" => {
                    let d = d.take().unwrap();
                    back = Some(
                        db.write_blocking(move |t| {
                            for x in &d {
                                t.update(x)?;
                            }
                            Ok(d)
                        })
                        .unwrap(),
                    );
                }
                "txn" => keel_update_each(&db, d.take().unwrap()),
                "conc" => keel_update_each_concurrently(&db, d.take().unwrap()),
                "fetch" => {
                    let rows = db
                        .fetch::<Doc>()
                        .filter(Doc::color().eq(Color::Blue))
                        .all()
                        .unwrap();
                    assert!(!rows.is_empty());
                }
                "get" => {
                    for k in &keys {
                        assert!(db.get::<Doc>(k).unwrap().is_some());
                    }
                }
                other => panic!("unknown op `{other}`"),
            });
            drop(back);
            db.close().wait().unwrap();
        }
        "raw" => {
            let raw = Raw::open(&path, SyncPolicy::Normal);
            if op != "insert" {
                raw.insert(&base);
            }
            let mut st = raw
                .conn
                .prepare_cached(&format!("SELECT {RAW_COLUMNS} FROM doc WHERE id = ?1"))
                .unwrap();
            // Warm, as keel's side (no row yet before an insert).
            let _ = st.query_row([&keys[0]], raw_row);
            drop(st);
            support::measured(|| match op.as_str() {
                "insert" => raw.insert(&base),
                "update" => {
                    raw.conn.execute_batch("BEGIN").unwrap();
                    raw.update_each(&changed);
                    raw.conn.execute_batch("COMMIT").unwrap();
                }
                "txn" => raw.update_each(&changed),
                "fetch" => {
                    let mut st = raw
                        .conn
                        .prepare_cached(&format!("SELECT {RAW_COLUMNS} FROM doc WHERE color = ?1"))
                        .unwrap();
                    let rows: Vec<Doc> = st
                        .query_map([Color::Blue.to_raw()], raw_row)
                        .unwrap()
                        .collect::<rusqlite::Result<_>>()
                        .unwrap();
                    assert!(!rows.is_empty());
                }
                "get" => {
                    let mut st = raw
                        .conn
                        .prepare_cached(&format!("SELECT {RAW_COLUMNS} FROM doc WHERE id = ?1"))
                        .unwrap();
                    for k in &keys {
                        st.query_row([k], raw_row).unwrap();
                    }
                }
                other => panic!("unknown op `{other}`"),
            });
            raw.close();
        }
        other => panic!("unknown side `{other}`"),
    }
}

fn main() {
    if let Some(rest) = support::mode_args("--count") {
        count_one(&rest);
        return;
    }
    if let Some(rest) = support::mode_args("--child-insert") {
        child_insert(&rest);
        return;
    }
    let quick = support::flag("--quick");
    let n: usize = if quick { 1_000 } else { 10_000 };
    let big: usize = if quick { 50_000 } else { 1_000_000 };
    // Single-object transactions per repetition under Full (an fsync each, sequentially).
    let m = if quick { 200 } else { 1_000 };
    // Odd, so the median is one measured repetition. The short comparisons (tens of
    // milliseconds) afford more repetitions against a busy machine's noise.
    let reps = if quick { 5 } else { 7 };
    let short_reps = if quick { 5 } else { 11 };
    let load_start = loadavg();
    let root = tempfile::tempdir_in(support::out_dir()).unwrap();
    let dir = root.path();
    let mut targets: Vec<Target> = Vec::new();
    let mut metrics: Vec<(&'static str, f64)> = Vec::new();
    let ms = |v: &[f64]| support::median(v.to_vec()) * 1e3;

    // ---- insert n in one transaction, into a new database ----
    let (mut k, mut r) = (Vec::new(), Vec::new());
    for rep in 0..short_reps {
        let kdb = open_keel(&dir.join(format!("k-ins-{rep}.db")), SyncPolicy::Normal);
        let raw = Raw::open(&dir.join(format!("r-ins-{rep}.db")), SyncPolicy::Normal);
        let d = docs(0..n, 0);
        let kd = d.clone();
        let (a, b) = pair(
            rep,
            || time_returning(|| keel_insert(&kdb, kd)),
            || time(|| raw.insert(&d)),
        );
        k.push(a);
        r.push(b);
        kdb.close().wait().unwrap();
        raw.close();
    }
    targets.push(Target::ratio(
        "insert_10k_ratio",
        format!("insert {n}"),
        &k,
        &r,
    ));
    metrics.push(("insert_10k_keel_ms", ms(&k)));
    metrics.push(("insert_10k_raw_ms", ms(&r)));

    // Working databases for the reads, the updates and the deletes.
    let kdb = open_keel(&dir.join("k.db"), SyncPolicy::Normal);
    let raw = Raw::open(&dir.join("r.db"), SyncPolicy::Normal);
    keel_insert(&kdb, docs(0..n, 0));
    raw.insert(&docs(0..n, 0));

    // ---- fetch the objects matching a non-indexed filter (1 in 6), 10 times ----
    let (mut k, mut r) = (Vec::new(), Vec::new());
    let expected = (0..n).filter(|i| i % 6 == 2).count();
    let mut matched = 0;
    for rep in 0..short_reps {
        let (a, b) = pair(
            rep,
            || {
                time(|| {
                    for _ in 0..10 {
                        let rows = kdb
                            .fetch::<Doc>()
                            .filter(Doc::color().eq(Color::Blue))
                            .all()
                            .unwrap();
                        matched = rows.len();
                    }
                })
            },
            || {
                time(|| {
                    let mut st = raw
                        .conn
                        .prepare_cached(&format!("SELECT {RAW_COLUMNS} FROM doc WHERE color = ?1"))
                        .unwrap();
                    for _ in 0..10 {
                        let rows: Vec<Doc> = st
                            .query_map([Color::Blue.to_raw()], raw_row)
                            .unwrap()
                            .collect::<rusqlite::Result<_>>()
                            .unwrap();
                        assert_eq!(rows.len(), expected);
                    }
                })
            },
        );
        k.push(a);
        r.push(b);
    }
    assert_eq!(matched, expected);
    targets.push(Target::ratio(
        "fetch_nonindexed_ratio",
        format!("non-indexed fetch ({matched} of {n}, ×10)"),
        &k,
        &r,
    ));
    metrics.push(("fetch_nonindexed_keel_ms", ms(&k) / 10.0));
    metrics.push(("fetch_nonindexed_objects", matched as f64));

    // ---- fetch every object by key, one by one ----
    let keys: Vec<String> = (0..n).map(key).collect();
    let (mut k, mut r) = (Vec::new(), Vec::new());
    for rep in 0..short_reps {
        let (a, b) = pair(
            rep,
            || {
                time(|| {
                    for key in &keys {
                        let d = kdb.get::<Doc>(key).unwrap().expect("stored");
                        assert_eq!(&d.id, key);
                    }
                })
            },
            || {
                time(|| {
                    let mut st = raw
                        .conn
                        .prepare_cached(&format!("SELECT {RAW_COLUMNS} FROM doc WHERE id = ?1"))
                        .unwrap();
                    for key in &keys {
                        let d = st.query_row([key], raw_row).unwrap();
                        assert_eq!(&d.id, key);
                    }
                })
            },
        );
        k.push(a);
        r.push(b);
    }
    targets.push(Target::ratio(
        "fetch_by_key_ratio",
        format!("fetch by key, {n} one by one"),
        &k,
        &r,
    ));
    metrics.push(("fetch_by_key_keel_us", ms(&k) * 1e3 / n as f64));

    // ---- update n in one transaction ----
    let (mut k, mut r) = (Vec::new(), Vec::new());
    for rep in 0..short_reps {
        let d = docs(0..n, 1 + rep as i32);
        let kd = d.clone();
        let (a, b) = pair(
            rep,
            || {
                time_returning(|| {
                    kdb.write(move |t| {
                        for x in &kd {
                            t.update(x)?;
                        }
                        Ok(kd)
                    })
                    .wait()
                    .unwrap()
                })
            },
            || {
                time(|| {
                    raw.conn.execute_batch("BEGIN").unwrap();
                    raw.update_each(&d);
                    raw.conn.execute_batch("COMMIT").unwrap();
                })
            },
        );
        k.push(a);
        r.push(b);
    }
    targets.push(Target::ratio(
        "update_10k_ratio",
        format!("update {n}"),
        &k,
        &r,
    ));
    metrics.push(("update_10k_keel_ms", ms(&k)));

    // ---- n single-object transactions, sequentially, under Normal; keel's concurrent speedup ----
    let (mut k, mut r, mut speedup) = (Vec::new(), Vec::new(), Vec::new());
    for rep in 0..reps {
        let v = 100 + 2 * rep as i32;
        let [a, b, c] = interleaved(
            rep,
            n,
            |range| {
                let d = docs(range, v);
                time(|| keel_update_each(&kdb, d))
            },
            |range| {
                let d = docs(range, v);
                time(|| raw.update_each(&d))
            },
            |range| {
                let d = docs(range, v + 1);
                time(|| keel_update_each_concurrently(&kdb, d))
            },
        );
        k.push(a);
        r.push(b);
        speedup.push(a / c);
    }
    targets.push(Target::ratio(
        "txn_each_normal_ratio",
        format!("{n} single-object txns, Normal"),
        &k,
        &r,
    ));
    metrics.push(("txn_each_normal_keel_us", ms(&k) * 1e3 / n as f64));
    metrics.push(("txn_each_normal_raw_us", ms(&r) * 1e3 / n as f64));
    metrics.push(("concurrent_speedup_normal", support::median(speedup)));

    // ---- delete n in one transaction (then put them back, untimed) ----
    let (mut k, mut r) = (Vec::new(), Vec::new());
    for rep in 0..short_reps {
        let kk = keys.clone();
        let (a, b) = pair(
            rep,
            || {
                // The keys come back out of the closure and are freed after the
                // timer stops, as raw's borrowed keys are.
                time_returning(|| {
                    kdb.write(move |t| {
                        for key in &kk {
                            assert!(t.delete::<Doc>(key)?);
                        }
                        Ok(kk)
                    })
                    .wait()
                    .unwrap()
                })
            },
            || {
                time(|| {
                    raw.conn.execute_batch("BEGIN").unwrap();
                    {
                        let mut st = raw
                            .conn
                            .prepare_cached("DELETE FROM doc WHERE id = ?1")
                            .unwrap();
                        for key in &keys {
                            assert_eq!(st.execute([key]).unwrap(), 1);
                        }
                    }
                    raw.conn.execute_batch("COMMIT").unwrap();
                })
            },
        );
        k.push(a);
        r.push(b);
        assert_eq!(kdb.fetch::<Doc>().count().unwrap(), 0);
        keel_insert(&kdb, docs(0..n, 0));
        raw.insert(&docs(0..n, 0));
    }
    targets.push(Target::ratio(
        "delete_10k_ratio",
        format!("delete {n}"),
        &k,
        &r,
    ));
    metrics.push(("delete_10k_keel_ms", ms(&k)));
    kdb.close().wait().unwrap();
    raw.close();

    // ---- single-object transactions under Full: sequential ratio, concurrent speedup ----
    let kdb = open_keel(&dir.join("k-full.db"), SyncPolicy::Full);
    let raw = Raw::open(&dir.join("r-full.db"), SyncPolicy::Full);
    keel_insert(&kdb, docs(0..n, 0));
    raw.insert(&docs(0..n, 0));
    let (mut k, mut r, mut speedup) = (Vec::new(), Vec::new(), Vec::new());
    let syncs_before = kdb.store().io_stats().commit_syncs;
    for rep in 0..reps {
        let v = 300 + 2 * rep as i32;
        let [a, b, c] = interleaved(
            rep,
            m,
            |range| {
                let d = docs(range, v);
                time(|| keel_update_each(&kdb, d))
            },
            |range| {
                let d = docs(range, v);
                time(|| raw.update_each(&d))
            },
            |range| {
                let d = docs(range, v + 1);
                time(|| keel_update_each_concurrently(&kdb, d))
            },
        );
        k.push(a);
        r.push(b);
        speedup.push(a / c);
    }
    // Sequential and concurrent transactions alternate: count the syncs of both, then
    // the sequential ones are one per transaction (`reps * m`), the rest group commits.
    let all_syncs = kdb.store().io_stats().commit_syncs - syncs_before;
    let seq_syncs = (reps * m) as u64;
    let conc_syncs = all_syncs.saturating_sub(seq_syncs) / reps as u64;
    kdb.close().wait().unwrap();
    raw.close();
    targets.push(Target::ratio(
        "txn_each_full_ratio",
        format!("{m} single-object txns, Full"),
        &k,
        &r,
    ));
    metrics.push(("txn_each_full_keel_us", ms(&k) * 1e3 / m as f64));
    metrics.push(("txn_each_full_raw_us", ms(&r) * 1e3 / m as f64));
    targets.push(Target {
        metric: "concurrent_speedup_full",
        label: format!("{m} single-object txns, Full: {WRITERS} threads vs sequential"),
        values: speedup,
        goal: 3.0,
        higher_is_better: true,
        unit: "×",
    });
    metrics.push(("full_concurrent_commit_syncs", conc_syncs as f64));

    // ---- the large insert, each side in its own process ----
    let (mut k, mut r, mut rss, mut raw_rss, mut size) =
        (Vec::new(), Vec::new(), Vec::new(), Vec::new(), Vec::new());
    for rep in 0..reps {
        let kp = dir.join(format!("k-big-{rep}.db"));
        let rp = dir.join(format!("r-big-{rep}.db"));
        let mut kr = None;
        let mut rr = None;
        pair(
            rep,
            || {
                kr = Some(run_child("keel", &kp, big));
                0.0
            },
            || {
                rr = Some(run_child("raw", &rp, big));
                0.0
            },
        );
        let (kr, rr) = (kr.unwrap(), rr.unwrap());
        k.push(kr.secs);
        r.push(rr.secs);
        rss.push(kr.peak_rss_mb);
        raw_rss.push(rr.peak_rss_mb);
        size.push(kr.file_bytes as f64 / rr.file_bytes as f64);
        metrics.retain(|(name, _)| !name.ends_with("_file_mb"));
        metrics.push(("insert_1m_keel_file_mb", kr.file_bytes as f64 / 1e6));
        metrics.push(("insert_1m_raw_file_mb", rr.file_bytes as f64 / 1e6));
    }
    targets.push(Target::ratio(
        "insert_1m_ratio",
        format!("insert {big} (10 txns)"),
        &k,
        &r,
    ));
    metrics.push(("insert_1m_keel_s", support::median(k)));
    targets.push(Target {
        metric: "insert_1m_peak_rss_mb",
        label: format!("keel peak RSS, insert {big}"),
        values: rss,
        goal: 64.0,
        higher_is_better: false,
        unit: "MB",
    });
    metrics.push(("insert_1m_raw_peak_rss_mb", support::median(raw_rss)));
    targets.push(Target {
        metric: "file_size_factor",
        label: format!("file size keel ÷ raw, {big} objects"),
        values: size,
        goal: 1.3,
        higher_is_better: false,
        unit: "×",
    });

    metrics.push(("objects", n as f64));
    metrics.push(("full_sync_objects", m as f64));
    metrics.push(("insert_1m_objects", big as f64));
    metrics.push(("repetitions", reps as f64));
    metrics.push(("short_repetitions", short_reps as f64));
    metrics.push(("loadavg_start", load_start));
    metrics.push(("loadavg_end", loadavg()));
    report(&targets, metrics, quick, n, big);
}

fn report(
    targets: &[Target],
    mut metrics: Vec<(&'static str, f64)>,
    quick: bool,
    n: usize,
    big: usize,
) {
    for t in targets {
        metrics.push((t.metric, t.median()));
    }
    metrics.sort_by(|a, b| a.0.cmp(b.0));
    for (k, v) in &metrics {
        eprintln!("{k:>36} {v:>12.4}");
    }
    let (m, notes) = support::metrics_and_notes(&metrics, Some(4), note);
    let mut labels = serde_json::Map::new();
    labels.insert(
        "concurrent_speedup_normal".into(),
        serde_json::json!(format!(
            "single-object txns, Normal: {WRITERS} threads vs sequential"
        )),
    );
    for t in targets {
        labels.insert(t.metric.to_string(), serde_json::json!(t.label));
    }
    let missed: Vec<&str> = targets
        .iter()
        .filter(|t| !t.met())
        .map(|t| t.metric)
        .collect();
    let cores = std::thread::available_parallelism().map_or(1, |c| c.get());
    let summary = format!(
        "keel through its generated Rust types against raw rusqlite storing the same six \
         fields as plain columns ({n} objects{}; large insert {big}{}). Each figure is the \
         median of its repetitions in one run (see Method), keel ÷ raw time unless marked; \
         spread is min–max. Both sides run WAL with the same `synchronous` and keel's checkpoint rule \
         (raw: `wal_autocheckpoint=0` and its own background checkpoint thread); batches and \
         reads under `Normal`. Load average {:.1} at the start and {:.1} at the end on {cores} \
         cores (other builds may share the machine). {} of {} targets met{}.",
        if quick { ", quick run" } else { "" },
        if quick { " instead of 1,000,000" } else { "" },
        support::get(&metrics, "loadavg_start"),
        support::get(&metrics, "loadavg_end"),
        targets.len() - missed.len(),
        targets.len(),
        if missed.is_empty() {
            String::new()
        } else {
            format!("; missed: {}", missed.join(", "))
        }
    );
    let report = serde_json::json!({
        "scenario": "crud",
        "metrics": m,
        "notes": notes,
        "labels": labels,
        "summary": summary,
        "method": support::doc_sections(
            include_str!("crud.rs"),
            &["How each side is configured", "Method"],
        ),
        "targets": targets.iter().map(Target::json).collect::<Vec<_>>(),
    });
    support::write_report("crud", &report);
}

fn note(metric: &str) -> &'static str {
    match metric {
        "insert_10k_ratio" => "keel ÷ raw time: insert `objects` objects in one transaction into a new database",
        "insert_10k_keel_ms" => "keel: that insert (ms)",
        "insert_10k_raw_ms" => "raw: that insert (ms)",
        "fetch_nonindexed_ratio" => "keel ÷ raw time: fetch the objects matching a filter on the non-indexed `color` (1 in 6), decoded into `Doc`, 10 times",
        "fetch_nonindexed_keel_ms" => "keel: one such fetch (ms)",
        "fetch_nonindexed_objects" => "objects one such fetch returns",
        "fetch_by_key_ratio" => "keel ÷ raw time: get every object by primary key, one by one, decoded into `Doc`",
        "fetch_by_key_keel_us" => "keel: one get by key (µs)",
        "update_10k_ratio" => "keel ÷ raw time: update every object (every field but the key) in one transaction",
        "update_10k_keel_ms" => "keel: that update (ms)",
        "txn_each_normal_ratio" => "keel ÷ raw time: update every object, one transaction each, one after another, under Normal",
        "txn_each_normal_keel_us" => "keel: one such transaction under Normal (µs)",
        "txn_each_normal_raw_us" => "raw: one such transaction under Normal (µs)",
        "concurrent_speedup_normal" => "keel under Normal: the same single-object transactions from 8 threads, sequential time ÷ concurrent time",
        "delete_10k_ratio" => "keel ÷ raw time: delete every object by primary key in one transaction",
        "delete_10k_keel_ms" => "keel: that delete (ms)",
        "txn_each_full_ratio" => "keel ÷ raw time: `full_sync_objects` single-object update transactions one after another under Full (an fsync each on both sides)",
        "txn_each_full_keel_us" => "keel: one such transaction under Full (µs)",
        "txn_each_full_raw_us" => "raw: one such transaction under Full (µs)",
        "concurrent_speedup_full" => "keel under Full: the same transactions from 8 threads, sequential time ÷ concurrent time (group commit)",
        "full_concurrent_commit_syncs" => "keel commit syncs for `full_sync_objects` transactions from 8 threads under Full (one per transaction when sequential; fewer is group commit)",
        "insert_1m_ratio" => "keel ÷ raw time: insert `insert_1m_objects` objects in 10 transactions, each side in its own process",
        "insert_1m_keel_s" => "keel: that insert (s)",
        "insert_1m_peak_rss_mb" => "keel's process: peak RSS (VmHWM) over that insert and close (MB)",
        "insert_1m_raw_peak_rss_mb" => "raw's process: the same (MB)",
        "file_size_factor" => "database file size after that insert and a TRUNCATE checkpoint, keel ÷ raw",
        "insert_1m_keel_file_mb" => "keel's file after that insert (MB)",
        "insert_1m_raw_file_mb" => "raw's file after that insert (MB)",
        "objects" => "objects in the CRUD comparisons (10,000; 1,000 with --quick)",
        "full_sync_objects" => "single-object transactions per repetition under Full (1,000; 200 with --quick)",
        "insert_1m_objects" => "objects in the large insert (1,000,000; 50,000 with --quick)",
        "repetitions" => "repetitions of the long comparisons (single-object transactions, large insert); the figure is their median",
        "short_repetitions" => "repetitions of the short comparisons (batches of `objects`, reads)",
        "loadavg_start" => "1-minute load average when the run started (other work on the machine)",
        "loadavg_end" => "1-minute load average when the run ended",
        _ => "",
    }
}
