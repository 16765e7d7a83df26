//! Cross-process benchmark: real processes sharing one file with
//! `StoreOptions::share_changes`.
//!
//! `cargo bench -p keel-benches --bench xproc -- [--quick]` writes
//! `target/keel-bench/xproc.json`. The writer processes are this benchmark's own
//! executable run again with `KEEL_XPROC_ROLE` set.
//!
//! 1. **Latency**: process B (this one) holds a live query (top 10 posts by
//!    priority); process A inserts posts of rising priority, one per transaction,
//!    10 ms apart. A stamps each COMMIT (a commit hook, wall clock), B stamps each
//!    delivery that inserts the post; the difference is commit-in-A →
//!    delivery-in-B. 200 commits (quick: 30).
//! 2. **Idle cost**: with its subscriptions live and nobody writing, B's CPU time
//!    (all threads, `/proc/self/stat`, 10 ms ticks) over 5 s (quick: 1 s).
//! 3. **Contention**: two writer processes (one writing thread each, one insert
//!    per transaction) and B (the reader, with the live query) for 60 s (quick:
//!    3 s). Every write error is counted; `SQLITE_BUSY` ("database is locked")
//!    separately. The baseline is one process with two writing threads on its own
//!    file for the same time: the ratio is time per commit across processes ÷ time
//!    per commit in one process. The same single process without `share_changes`
//!    gives what sharing costs a writer. B checks at the end that every
//!    acknowledged commit is in the file.
//!
//! 4. **Suspend**: this process runs one long write transaction (inserting posts
//!    until it is stopped) and calls `suspend()` while it runs; the time is from
//!    the call until `suspend()` returns, and `/proc/locks` is then checked to show
//!    no lock of this process on the database, its `-wal` or its `-shm`. 10 rounds
//!    (quick: 3), goal ≤ 100 ms.
//!
//! 5. **Foreign-commit check**: without `share_changes`, each
//!    read through the database checks `PRAGMA data_version` on the writer
//!    connection, so another process's commits still reach live queries. Keyed
//!    `get`s on a handle without sharing (checked) against the same `get`s on a
//!    handle with sharing (whose reads do not check: its change feed follows other
//!    processes), each with a live query, same file shape, alternating blocks of
//!    20,000 (quick: 5,000) gets, 7 rounds; the ratio of the median block times.
//!
//! 6. **The file watch** (without `share_changes`, where reads check
//!    `PRAGMA data_version`): process B holds the same live query and **never
//!    reads**; a `keel-watch` thread, running while a subscription is live, sees
//!    A's writes to the WAL. First B's CPU time while nobody writes, with no
//!    subscription (no watch) and then with one (watch running), 5 s each
//!    (quick: 1 s), from the per-thread run times in `/proc/self/task/*/schedstat`
//!    (nanoseconds). Then A (sharing off) commits 200 posts (quick: 20), one per
//!    transaction, 50 ms apart: commit-in-A → delivery-in-B as in 1, and B's CPU
//!    time per foreign commit (whole process, its idle rate taken off; the watch
//!    thread's own share, and its wake-ups). Last, B commits 5 times itself
//!    (quick: 2), each more than the watch's settle window (1 s) after the last:
//!    what one of its own commits costs the watch thread (its looks find nothing).
//!
//! Commits use `SyncPolicy::Normal` in every case (a shared build machine's fsync
//! would otherwise dominate); the comparison is between like runs.

use std::io::{BufRead, BufReader, Write};
use std::path::Path;
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use keel::prelude::*;
use keel::Update;
use keel_example_blog::blog::Post;

mod support;

const ROLE: &str = "KEEL_XPROC_ROLE";

fn opts() -> StoreOptions {
    StoreOptions::default()
        .commit_sync(SyncPolicy::Normal)
        .share_changes(true)
}

fn now_ns() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_nanos() as u64)
        .unwrap_or(0)
}

fn env(k: &str) -> String {
    std::env::var(k).unwrap_or_else(|_| panic!("{k} not set"))
}

/// Wait for the parent's "go" line.
fn wait_go() {
    let mut line = String::new();
    std::io::stdin().lock().read_line(&mut line).unwrap();
}

/// Child: insert `n` posts `KEEL_XPROC_GAP_MS` (10) ms apart, sharing changes
/// unless `KEEL_XPROC_SHARE` is `0`; print each commit's wall-clock time.
fn latency_writer() {
    let share = std::env::var("KEEL_XPROC_SHARE").map_or(true, |v| v == "1");
    let gap: u64 = std::env::var("KEEL_XPROC_GAP_MS").map_or(10, |v| v.parse().unwrap());
    let db = Database::open_for::<Post>(env("KEEL_XPROC_DB"), opts().share_changes(share)).unwrap();
    let n: usize = env("KEEL_XPROC_N").parse().unwrap();
    let stamps = Arc::new(Mutex::new(Vec::with_capacity(n)));
    let s2 = stamps.clone();
    let _hook = db.on_commit_changes(move |changes| {
        let t = now_ns();
        for c in changes {
            if let Some(Value::Text(id)) = c.key.first() {
                s2.lock().unwrap().push((id.clone(), t));
            }
        }
    });
    wait_go();
    for i in 0..n {
        let p = Post::builder()
            .id(format!("lat{i:05}"))
            .priority(1_000_000 + i as i32)
            .build();
        db.write(move |t| t.insert(&p).map(|_| ())).wait().unwrap();
        std::thread::sleep(Duration::from_millis(gap));
    }
    db.close().wait().unwrap();
    let mut out = std::io::stdout().lock();
    for (id, t) in stamps.lock().unwrap().iter() {
        writeln!(out, "c {id} {t}").unwrap();
    }
}

/// Child: `threads` threads insert one post per transaction for `secs` seconds;
/// print `r <commits> <busy> <other errors>`.
fn contention_writer() {
    let share = env("KEEL_XPROC_SHARE") == "1";
    let db = Database::open_for::<Post>(env("KEEL_XPROC_DB"), opts().share_changes(share)).unwrap();
    let threads: usize = env("KEEL_XPROC_THREADS").parse().unwrap();
    let secs: f64 = env("KEEL_XPROC_SECS").parse().unwrap();
    let tag = env("KEEL_XPROC_TAG");
    wait_go();
    let commits = Arc::new(AtomicU64::new(0));
    let busy = Arc::new(AtomicU64::new(0));
    let errors = Arc::new(AtomicU64::new(0));
    let end = Instant::now() + Duration::from_secs_f64(secs);
    let handles: Vec<_> = (0..threads)
        .map(|t| {
            let (db, commits, busy, errors, tag) = (
                db.clone(),
                commits.clone(),
                busy.clone(),
                errors.clone(),
                tag.clone(),
            );
            std::thread::spawn(move || {
                let mut i = 0u64;
                while Instant::now() < end {
                    let p = Post::builder()
                        .id(format!("{tag}-{t}-{i}"))
                        .priority(i as i32)
                        .build();
                    i += 1;
                    match db.write(move |t| t.insert(&p).map(|_| ())).wait() {
                        Ok(()) => {
                            commits.fetch_add(1, Ordering::Relaxed);
                        }
                        Err(e) => {
                            let text = format!("{e:?} {e}").to_lowercase();
                            if text.contains("locked") || text.contains("busy") {
                                busy.fetch_add(1, Ordering::Relaxed);
                            } else {
                                errors.fetch_add(1, Ordering::Relaxed);
                            }
                        }
                    }
                }
            })
        })
        .collect();
    for h in handles {
        h.join().unwrap();
    }
    db.close().wait().unwrap();
    println!(
        "r {} {} {}",
        commits.load(Ordering::Relaxed),
        busy.load(Ordering::Relaxed),
        errors.load(Ordering::Relaxed)
    );
}

struct Proc {
    child: Child,
    stdin: Option<ChildStdin>,
}

impl Proc {
    fn spawn(role: &str, vars: &[(&str, String)]) -> Proc {
        let mut cmd = Command::new(std::env::current_exe().unwrap());
        cmd.env(ROLE, role)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped());
        for (k, v) in vars {
            cmd.env(k, v);
        }
        let mut child = cmd.spawn().unwrap();
        let stdin = child.stdin.take();
        Proc { child, stdin }
    }

    fn go(&mut self) {
        let s = self.stdin.as_mut().unwrap();
        writeln!(s, "go").unwrap();
        s.flush().unwrap();
    }

    /// Wait for the process to end; its stdout lines.
    fn finish(mut self) -> Vec<String> {
        drop(self.stdin.take());
        let out = BufReader::new(self.child.stdout.take().unwrap())
            .lines()
            .map(|l| l.unwrap())
            .collect();
        assert!(self.child.wait().unwrap().success(), "child failed");
        out
    }
}

/// CPU time of this process (all threads) in ms, from `/proc/self/stat`.
fn cpu_ms() -> f64 {
    let Ok(s) = std::fs::read_to_string("/proc/self/stat") else {
        return f64::NAN;
    };
    // Fields after the command name (which is in parentheses).
    let rest = &s[s.rfind(')').map_or(0, |i| i + 2)..];
    let f: Vec<&str> = rest.split_whitespace().collect();
    let ticks = f[11].parse::<f64>().unwrap_or(0.0) + f[12].parse::<f64>().unwrap_or(0.0);
    ticks * 10.0 // USER_HZ is 100 on Linux
}

/// Nanoseconds on a CPU of this process's threads named `name` (all threads:
/// `None`), from `/proc/self/task/*/schedstat`; 0 where it is unavailable.
fn thread_cpu_ns(name: Option<&str>) -> u64 {
    tasks(name)
        .iter()
        .filter_map(|t| std::fs::read_to_string(t.join("schedstat")).ok())
        .filter_map(|s| s.split_whitespace().next()?.parse::<u64>().ok())
        .sum()
}

/// Times this process's threads named `name` went to sleep and were woken
/// (voluntary context switches, `/proc/self/task/*/status`).
fn thread_wakeups(name: &str) -> u64 {
    tasks(Some(name))
        .iter()
        .filter_map(|t| std::fs::read_to_string(t.join("status")).ok())
        .filter_map(|s| {
            s.lines()
                .find(|l| l.starts_with("voluntary_ctxt_switches"))?
                .split_whitespace()
                .last()?
                .parse::<u64>()
                .ok()
        })
        .sum()
}

/// `/proc/self/task/<tid>` of each thread named `name` (every thread: `None`).
fn tasks(name: Option<&str>) -> Vec<std::path::PathBuf> {
    let Ok(dir) = std::fs::read_dir("/proc/self/task") else {
        return Vec::new();
    };
    dir.filter_map(|e| Some(e.ok()?.path()))
        .filter(|t| {
            name.is_none_or(|n| {
                std::fs::read_to_string(t.join("comm")).is_ok_and(|c| c.trim() == n)
            })
        })
        .collect()
}

/// Pairs each of A's commit stamps (`c <id> <ns>` lines) with B's delivery of
/// that id: the latencies in ms.
fn latencies(lines: &[String], delivered: &[(String, u64)]) -> Vec<f64> {
    let delivered: std::collections::HashMap<&str, u64> =
        delivered.iter().map(|(id, t)| (id.as_str(), *t)).collect();
    lines
        .iter()
        .filter_map(|l| {
            let w: Vec<&str> = l.split_whitespace().collect();
            if w.len() != 3 || w[0] != "c" {
                return None;
            }
            let c: u64 = w[2].parse().ok()?;
            let d = delivered.get(w[1])?;
            Some(d.saturating_sub(c) as f64 / 1e6)
        })
        .collect()
}

fn percentile(mut v: Vec<f64>, p: f64) -> f64 {
    v.sort_by(f64::total_cmp);
    v[((v.len() - 1) as f64 * p).round() as usize]
}

/// A live query on the top 10 posts by priority; returns (subscription,
/// deliveries, stamps of inserted ids).
#[allow(clippy::type_complexity)]
fn top10(
    db: &Database,
) -> (
    keel::Subscription,
    Arc<AtomicU64>,
    Arc<Mutex<Vec<(String, u64)>>>,
) {
    let deliveries = Arc::new(AtomicU64::new(0));
    let seen = Arc::new(Mutex::new(Vec::new()));
    let (d2, s2) = (deliveries.clone(), seen.clone());
    let sub = db
        .fetch::<Post>()
        .order_by(Post::priority().desc())
        .limit(10)
        .subscribe(move |u: Update<Post>| {
            let t = now_ns();
            d2.fetch_add(1, Ordering::Relaxed);
            let mut s = s2.lock().unwrap();
            for &i in &u.diff.inserted {
                s.push((u.objects[i].id.clone(), t));
            }
        })
        .unwrap();
    (sub, deliveries, seen)
}

/// Run writers with `threads` threads each, one process per entry of `tags`, for
/// `secs`; returns (commits, busy, other errors, seconds).
fn contention(
    path: &Path,
    tags: &[&str],
    threads: usize,
    secs: f64,
    share: bool,
) -> (u64, u64, u64, f64) {
    let mut procs: Vec<Proc> = tags
        .iter()
        .map(|tag| {
            Proc::spawn(
                "writer",
                &[
                    ("KEEL_XPROC_DB", path.display().to_string()),
                    ("KEEL_XPROC_THREADS", threads.to_string()),
                    ("KEEL_XPROC_SECS", secs.to_string()),
                    ("KEEL_XPROC_TAG", tag.to_string()),
                    (
                        "KEEL_XPROC_SHARE",
                        if share { "1" } else { "0" }.to_string(),
                    ),
                ],
            )
        })
        .collect();
    // Let every writer open before any starts.
    std::thread::sleep(Duration::from_millis(500));
    let t = Instant::now();
    for p in &mut procs {
        p.go();
    }
    let (mut commits, mut busy, mut errors) = (0, 0, 0);
    for p in procs {
        let out = p.finish();
        let r = out
            .iter()
            .find(|l| l.starts_with("r "))
            .expect("writer report");
        let v: Vec<u64> = r[2..]
            .split_whitespace()
            .map(|x| x.parse().unwrap())
            .collect();
        commits += v[0];
        busy += v[1];
        errors += v[2];
    }
    (commits, busy, errors, t.elapsed().as_secs_f64())
}

fn main() {
    match std::env::var(ROLE).as_deref() {
        Ok("latency") => return latency_writer(),
        Ok("writer") => return contention_writer(),
        _ => {}
    }
    let quick = support::flag("--quick");
    let n: usize = if quick { 30 } else { 200 };
    let idle_secs = if quick { 1.0 } else { 5.0 };
    let secs = if quick { 3.0 } else { 60.0 };
    let root = tempfile::tempdir().unwrap();
    let mut metrics: Vec<(&'static str, f64)> = Vec::new();
    let mut add = |k: &'static str, v: f64| {
        eprintln!("{k:>32} {v:>12.3}");
        metrics.push((k, v));
    };

    // ---- 1. latency ----
    let path = root.path().join("latency.db");
    let b = Database::open_for::<Post>(&path, opts()).unwrap();
    let (sub, _, seen) = top10(&b);
    let mut a = Proc::spawn(
        "latency",
        &[
            ("KEEL_XPROC_DB", path.display().to_string()),
            ("KEEL_XPROC_N", n.to_string()),
        ],
    );
    std::thread::sleep(Duration::from_millis(300));
    a.go();
    let lines = a.finish();
    // Every commit reaches B (the last within the wait below).
    let start = Instant::now();
    while seen.lock().unwrap().len() < n && start.elapsed() < Duration::from_secs(30) {
        std::thread::sleep(Duration::from_millis(5));
    }
    let delivered: std::collections::HashMap<String, u64> =
        seen.lock().unwrap().iter().cloned().collect();
    let mut lat = Vec::new();
    for l in &lines {
        let w: Vec<&str> = l.split_whitespace().collect();
        if w.len() == 3 && w[0] == "c" {
            let c: u64 = w[2].parse().unwrap();
            if let Some(d) = delivered.get(w[1]) {
                lat.push(d.saturating_sub(c) as f64 / 1e6);
            }
        }
    }
    assert_eq!(lat.len(), n, "every commit of A reached B's live query");
    add("commits", n as f64);
    add("latency_median_ms", support::median(lat.clone()));
    add("latency_p95_ms", percentile(lat.clone(), 0.95));
    add("latency_max_ms", percentile(lat, 1.0));

    // ---- 2. idle cost ----
    let c0 = cpu_ms();
    std::thread::sleep(Duration::from_secs_f64(idle_secs));
    add("idle_cpu_ms_per_s", (cpu_ms() - c0) / idle_secs);
    let stats = b.feed_stats().unwrap();
    drop(sub);
    b.close().wait().unwrap();

    // ---- 3. contention ----
    let plain = root.path().join("plain.db");
    drop(Database::open_for::<Post>(&plain, opts().share_changes(false)).unwrap());
    let (c0, busy0, err0, t0) = contention(&plain, &["plain"], 2, secs, false);
    let one = root.path().join("one.db");
    drop(Database::open_for::<Post>(&one, opts()).unwrap());
    let (c1, busy1, err1, t1) = contention(&one, &["solo"], 2, secs, true);
    let two = root.path().join("two.db");
    let b = Database::open_for::<Post>(&two, opts()).unwrap();
    let (sub, deliveries, _) = top10(&b);
    let (c2, busy2, err2, t2) = contention(&two, &["w1", "w2"], 1, secs, true);
    b.catch_up().unwrap();
    let stored = b.fetch::<Post>().count().unwrap() as u64;
    assert_eq!(stored, c2, "every acknowledged commit is in the file");
    let feed = b.feed_stats().unwrap();
    drop(sub);
    b.close().wait().unwrap();
    let rate0 = c0 as f64 / t0;
    let rate1 = c1 as f64 / t1;
    let rate2 = c2 as f64 / t2;
    add("seconds", secs);
    add("one_process_unshared_commits_per_s", rate0);
    add("one_process_commits_per_s", rate1);
    add("two_processes_commits_per_s", rate2);
    add("sharing_per_commit_ratio", rate0 / rate1);
    add("xproc_per_commit_ratio", rate1 / rate2);
    add("busy_errors", (busy0 + busy1 + busy2) as f64);
    add("other_write_errors", (err0 + err1 + err2) as f64);
    add(
        "reader_deliveries",
        deliveries.load(Ordering::Relaxed) as f64,
    );
    add("reader_catch_ups", feed.catch_ups as f64);
    add("reader_full_refetches", feed.full_refetches as f64);

    // ---- 4. suspend with a write in flight ----
    let rounds = if quick { 3 } else { 10 };
    let mut took = Vec::new();
    let mut interrupted = 0u32;
    for r in 0..rounds {
        let (ms, cut) = suspend_round(&root.path().join(format!("suspend{r}.db")));
        took.push(ms);
        interrupted += u32::from(cut);
    }
    add("suspend_rounds", rounds as f64);
    add("suspend_interrupted", interrupted as f64);
    add("suspend_median_ms", support::median(took.clone()));
    add("suspend_max_ms", percentile(took, 1.0));

    // ---- 5. the foreign-commit check on reads (without sharing) ----
    let block = if quick { 5_000 } else { 20_000 };
    let handles: Vec<Database> = [false, true]
        .iter()
        .map(|&share| {
            let p = root.path().join(format!("check-{share}.db"));
            let db = Database::open_for::<Post>(&p, opts().share_changes(share)).unwrap();
            db.write(|t| {
                for i in 0..1_000 {
                    t.insert(&Post::builder().id(format!("p{i:04}")).priority(i).build())?;
                }
                Ok(())
            })
            .wait()
            .unwrap();
            db
        })
        .collect();
    let subs: Vec<_> = handles.iter().map(|db| top10(db).0).collect();
    let keys: Vec<String> = (0..1_000).map(|i| format!("p{i:04}")).collect();
    let mut times = [Vec::new(), Vec::new()];
    for _round in 0..7 {
        for (h, db) in handles.iter().enumerate() {
            let t = Instant::now();
            for i in 0..block {
                let p = db.get::<Post>(&keys[i % keys.len()]).unwrap();
                std::hint::black_box(p);
            }
            times[h].push(t.elapsed().as_secs_f64() * 1e9 / block as f64);
        }
    }
    let checked = support::median(times[0].clone());
    let unchecked = support::median(times[1].clone());
    add("get_checked_ns", checked);
    add("get_unchecked_ns", unchecked);
    add("foreign_check_per_read_ratio", checked / unchecked);
    drop(subs);
    for db in handles {
        db.close().wait().unwrap();
    }

    // ---- 6. without share_changes: the file watch, no reads in B ----
    let n_watch: usize = if quick { 20 } else { 200 };
    let own_commits: usize = if quick { 2 } else { 5 };
    let path = root.path().join("watch.db");
    let b = Database::open_for::<Post>(&path, opts().share_changes(false)).unwrap();
    // Idle, nothing live: no watch.
    std::thread::sleep(Duration::from_millis(200));
    let c0 = thread_cpu_ns(None);
    std::thread::sleep(Duration::from_secs_f64(idle_secs));
    add(
        "unwatched_idle_cpu_ms_per_s",
        (thread_cpu_ns(None) - c0) as f64 / 1e6 / idle_secs,
    );
    // Idle with a live query: the watch runs.
    let (sub, _, seen) = top10(&b);
    std::thread::sleep(Duration::from_millis(200));
    let (c0, w0) = (thread_cpu_ns(None), thread_wakeups("keel-watch"));
    std::thread::sleep(Duration::from_secs_f64(idle_secs));
    let idle_rate_ns = (thread_cpu_ns(None) - c0) as f64 / idle_secs;
    add("watch_idle_cpu_ms_per_s", idle_rate_ns / 1e6);
    add(
        "watch_idle_wakeups",
        (thread_wakeups("keel-watch") - w0) as f64,
    );
    // A commits; B reads nothing.
    let mut a = Proc::spawn(
        "latency",
        &[
            ("KEEL_XPROC_DB", path.display().to_string()),
            ("KEEL_XPROC_N", n_watch.to_string()),
            ("KEEL_XPROC_SHARE", "0".to_string()),
            ("KEEL_XPROC_GAP_MS", "50".to_string()),
        ],
    );
    std::thread::sleep(Duration::from_millis(300));
    let (c0, t0) = (thread_cpu_ns(None), Instant::now());
    let (wc0, ww0) = (
        thread_cpu_ns(Some("keel-watch")),
        thread_wakeups("keel-watch"),
    );
    a.go();
    let lines = a.finish();
    let start = Instant::now();
    while seen.lock().unwrap().len() < n_watch && start.elapsed() < Duration::from_secs(30) {
        std::thread::sleep(Duration::from_millis(5));
    }
    // The watch settles (1 s after the last write) before the books close.
    std::thread::sleep(Duration::from_millis(1_200));
    let run_ns = (thread_cpu_ns(None) - c0) as f64 - idle_rate_ns * t0.elapsed().as_secs_f64();
    let watch_ns = (thread_cpu_ns(Some("keel-watch")) - wc0) as f64;
    let looks = (thread_wakeups("keel-watch") - ww0) as f64;
    let lat = latencies(&lines, &seen.lock().unwrap());
    assert_eq!(
        lat.len(),
        n_watch,
        "every commit of A reached B's live query without a read"
    );
    add("watch_commits", n_watch as f64);
    add("watch_latency_median_ms", support::median(lat.clone()));
    add("watch_latency_p99_ms", percentile(lat.clone(), 0.99));
    add("watch_latency_max_ms", percentile(lat, 1.0));
    add(
        "watch_cpu_us_per_foreign_commit",
        run_ns / 1e3 / n_watch as f64,
    );
    add(
        "watch_thread_cpu_us_per_foreign_commit",
        watch_ns / 1e3 / n_watch as f64,
    );
    add("watch_looks_per_foreign_commit", looks / n_watch as f64);
    // B's own commits, each alone: what they cost the watch.
    let (wc0, ww0) = (
        thread_cpu_ns(Some("keel-watch")),
        thread_wakeups("keel-watch"),
    );
    for i in 0..own_commits {
        let p = Post::builder()
            .id(format!("own{i}"))
            .priority(i as i32)
            .build();
        b.write(move |t| t.insert(&p).map(|_| ())).wait().unwrap();
        std::thread::sleep(Duration::from_millis(1_200));
    }
    let own = own_commits as f64;
    add(
        "watch_thread_cpu_us_per_own_commit",
        (thread_cpu_ns(Some("keel-watch")) - wc0) as f64 / 1e3 / own,
    );
    add(
        "watch_looks_per_own_commit",
        (thread_wakeups("keel-watch") - ww0) as f64 / own,
    );
    drop(sub);
    b.close().wait().unwrap();

    let summary = format!(
        "Process B's live query receives process A's commit in a median of {:.2} ms \
         (p95 {:.2} ms, goal ≤ 50 ms; {} commits, {} catch-ups); idle, B uses {:.1} ms \
         of CPU per second. Two writer processes and a reading process for {secs:.0} s: \
         {} `SQLITE_BUSY` surfaced, {:.0} commits/s against {:.0} in one process with \
         two writing threads ({:.0} in one process without `share_changes`). \
         `suspend()` with a write in flight holds no lock after a median of {:.0} ms \
         (slowest {:.0} ms, goal ≤ 100 ms). Without `share_changes`, and with no read in B, \
         its live query receives A's commit through the file watch in a median of {:.2} ms \
         (p99 {:.2} ms, goal ≤ 100 ms; {} commits); idle, the watch costs {:.3} ms of CPU \
         per second ({:.3} without it) and {} wake-ups; each foreign commit costs B {:.0} µs \
         of CPU ({:.0} µs of it on the watch thread, {:.1} looks), each of B's own commits \
         {:.0} µs on the watch thread ({:.1} looks).",
        get(&metrics, "latency_median_ms"),
        get(&metrics, "latency_p95_ms"),
        n,
        stats.catch_ups,
        get(&metrics, "idle_cpu_ms_per_s"),
        busy0 + busy1 + busy2,
        rate2,
        rate1,
        rate0,
        get(&metrics, "suspend_median_ms"),
        get(&metrics, "suspend_max_ms"),
        get(&metrics, "watch_latency_median_ms"),
        get(&metrics, "watch_latency_p99_ms"),
        n_watch,
        get(&metrics, "watch_idle_cpu_ms_per_s"),
        get(&metrics, "unwatched_idle_cpu_ms_per_s"),
        get(&metrics, "watch_idle_wakeups"),
        get(&metrics, "watch_cpu_us_per_foreign_commit"),
        get(&metrics, "watch_thread_cpu_us_per_foreign_commit"),
        get(&metrics, "watch_looks_per_foreign_commit"),
        get(&metrics, "watch_thread_cpu_us_per_own_commit"),
        get(&metrics, "watch_looks_per_own_commit"),
    );
    support::write_metrics_report("xproc", &metrics, Some(3), note, summary);
}

/// One suspend round: a long write runs; `suspend()` is timed; afterwards this
/// process must hold no lock on the three files. Returns (ms, interrupted).
fn suspend_round(path: &Path) -> (f64, bool) {
    let db = Database::open_for::<Post>(path, opts()).unwrap();
    let (started_tx, started) = std::sync::mpsc::channel();
    let writer = {
        let db = db.clone();
        std::thread::spawn(move || {
            db.write(move |t| {
                for i in 0..50_000_000u32 {
                    t.insert(
                        &Post::builder()
                            .id(format!("s{i:08}"))
                            .priority(i as i32)
                            .build(),
                    )?;
                    if i == 1_000 {
                        let _ = started_tx.send(());
                    }
                }
                Ok(())
            })
            .wait()
        })
    };
    started.recv().unwrap();
    let t = Instant::now();
    let report = db.suspend().expect("suspend with a write in flight");
    let ms = t.elapsed().as_secs_f64() * 1e3;
    let held = locks_held(path);
    assert!(
        held.is_empty(),
        "after suspend() this process still holds locks:\n{}",
        held.join("\n")
    );
    db.resume().unwrap();
    let stopped = writer.join().unwrap();
    assert!(
        stopped.is_err(),
        "the write in flight was stopped, not committed"
    );
    db.close().wait().unwrap();
    (ms, report.interrupted)
}

/// This process's `/proc/locks` lines on `db`, its `-wal` and its `-shm` (plus
/// open-file-description locks, pid -1, on them).
fn locks_held(db: &Path) -> Vec<String> {
    use std::os::unix::fs::MetadataExt;
    let inodes: Vec<u64> = ["", "-wal", "-shm"]
        .iter()
        .filter_map(|s| {
            let mut p = db.as_os_str().to_owned();
            p.push(s);
            std::fs::metadata(p).ok().map(|m| m.ino())
        })
        .collect();
    let me = std::process::id() as i64;
    std::fs::read_to_string("/proc/locks")
        .unwrap_or_default()
        .lines()
        .filter(|l| {
            let f: Vec<&str> = l.split_whitespace().filter(|w| *w != "->").collect();
            let owner = f.get(4).and_then(|w| w.parse::<i64>().ok());
            let ino = f.get(5).and_then(|w| w.rsplit(':').next()?.parse::<u64>().ok());
            matches!((owner, ino), (Some(o), Some(i)) if (o == me || o == -1) && inodes.contains(&i))
        })
        .map(str::to_string)
        .collect()
}

fn get(metrics: &[(&str, f64)], k: &str) -> f64 {
    support::get(metrics, k)
}

fn note(k: &str) -> &'static str {
    match k {
        "commits" => "commits of process A in the latency run (one insert each, 10 ms apart)",
        "latency_median_ms" => "commit in A (its commit hook) → delivery in B's live query, median",
        "latency_p95_ms" => "the same, 95th percentile (goal ≤ 50 ms)",
        "latency_max_ms" => "the same, slowest",
        "idle_cpu_ms_per_s" => {
            "B's CPU time per second while nobody writes, subscriptions live (10 ms ticks)"
        }
        "seconds" => "length of each contention run",
        "one_process_unshared_commits_per_s" => {
            "one process, two writing threads, one insert per transaction, share_changes off"
        }
        "one_process_commits_per_s" => {
            "the same with share_changes on (the log row, the post, the gate)"
        }
        "sharing_per_commit_ratio" => "time per commit with share_changes ÷ without, one process",
        "two_processes_commits_per_s" => {
            "two writer processes (one thread each) and a reader process with a live query"
        }
        "xproc_per_commit_ratio" => {
            "time per commit across processes ÷ time per commit in one process"
        }
        "busy_errors" => "writes that failed with SQLITE_BUSY / database is locked (must be 0)",
        "other_write_errors" => "writes that failed otherwise",
        "reader_deliveries" => "deliveries to B's live query during the contention run",
        "reader_catch_ups" => "B's catch-ups during the contention run (wake-ups merge commits)",
        "reader_full_refetches" => {
            "catch-ups that read every subscription again (fell behind the log)"
        }
        "suspend_rounds" => "suspend rounds, each with one long write transaction in flight",
        "suspend_interrupted" => "rounds in which the write in flight had to be interrupted",
        "suspend_median_ms" => {
            "`suspend()` call → returned with no lock held (checked in /proc/locks), median (goal ≤ 100 ms)"
        }
        "suspend_max_ms" => "the same, slowest round",
        "get_checked_ns" => {
            "keyed get without share_changes: checks PRAGMA data_version for other processes' commits (median block)"
        }
        "get_unchecked_ns" => "the same get with share_changes (the feed follows other processes; no check)",
        "foreign_check_per_read_ratio" => "time per keyed get with the foreign-commit check ÷ without",
        "unwatched_idle_cpu_ms_per_s" => {
            "share_changes off, no subscription (so no file watch), nobody writing: B's CPU per second (schedstat)"
        }
        "watch_idle_cpu_ms_per_s" => {
            "the same with a live query, so the file watch runs (goal: as without)"
        }
        "watch_idle_wakeups" => "times the keel-watch thread woke while nobody wrote (goal 0)",
        "watch_commits" => {
            "commits of process A (share_changes off) in the watch run, one insert each, 50 ms apart"
        }
        "watch_latency_median_ms" => {
            "commit in A → delivery in B's live query, B never reading (the file watch), median (goal ≤ 100 ms)"
        }
        "watch_latency_p99_ms" => "the same, 99th percentile",
        "watch_latency_max_ms" => "the same, slowest",
        "watch_cpu_us_per_foreign_commit" => {
            "B's CPU per foreign commit, all threads (the watch's looks, the re-read of the live query, the delivery), idle rate taken off"
        }
        "watch_thread_cpu_us_per_foreign_commit" => "the keel-watch thread's share of it",
        "watch_looks_per_foreign_commit" => "the keel-watch thread's wake-ups per foreign commit",
        "watch_thread_cpu_us_per_own_commit" => {
            "keel-watch CPU per commit of B itself, each alone (its write wakes the watch; every look finds nothing)"
        }
        "watch_looks_per_own_commit" => "the keel-watch thread's wake-ups per own commit",
        _ => "",
    }
}
