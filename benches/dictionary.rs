//! Dictionary benchmark: keel's dictionary against the way plist/JSON
//! settings stores persist, in the same process.
//!
//! `cargo bench -p keel-benches --bench dictionary -- [--quick] [--exact]` writes
//! `target/keel-bench/dictionary.json` (`cargo xtask bench dictionary` also renders
//! it into BENCHMARKS.md).
//!
//! Operations (N = 40,000; `--quick`: 1,000):
//! * insert N int keys — keel in memory (every `set` returned), durable at the end
//!   (then one `sync()` resolved, default `Full` sync policy) and durable after
//!   every change (`set` + `sync()` each);
//! * update one key N times — the same three ways;
//! * read the N keys hot (in keel's cache) and cold (fresh open: keel's cache
//!   empty, the OS page cache warm).
//!
//! Baselines, each on a JSON object file holding the same keys and values:
//! * `rewrite_each`: after every change the whole file is serialized, written to a
//!   temporary file, fsync'ed and renamed over the old one — what a plist-backed
//!   store that persists each change does. Its cost grows with the file, so N
//!   changes cost O(N²): at N = 40,000 about 40,000 fsyncs of up to 800 KB. To
//!   keep the run short, by default only every `SAMPLE`-th rewrite is performed
//!   and timed (at the true file size of that moment) and the total is that time
//!   × `SAMPLE`; the metrics say so (`rewrite_each_sample_every`,
//!   `rewrite_each_timed_rewrites`). `--exact` performs every rewrite. (Check on
//!   the 2-core CI VM at N = 1,000: sampled 1 in 10 gave 7.48 s / 7.58 s for the
//!   inserts and 7.52 s / 7.84 s for the updates; `--exact` gave 7.20 s and 7.67 s —
//!   the rewrites are fsync-bound, so the sample is representative.)
//! * `rewrite_once`: all changes in memory, then the file rewritten once, fsync'ed.
//! * Reads for both baselines: the file is read and parsed (cold), then N lookups
//!   in the parsed map (hot).
//!
//! `*_ratio` = keel's time / the baseline's time (below 1: keel is faster), always
//! between strategies with the same guarantee: keel durable at the end against
//! `rewrite_once`, keel durable after every change against `rewrite_each`. keel's
//! in-memory time has no ratio (no baseline promises as little).

use std::collections::BTreeMap;
use std::io::Write;
use std::path::Path;
use std::time::{Duration, Instant};

use keel::{Database, StoreOptions};
use keel_example_blog::blog::Post;
use serde_json::{Map, Value};

mod support;

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

fn key(i: usize) -> String {
    format!("key{i:06}")
}

/// Write `map` as JSON to `path` atomically and durably (temp file, fsync, rename).
fn rewrite(path: &Path, map: &Map<String, Value>) {
    let tmp = path.with_extension("tmp");
    let bytes = serde_json::to_vec(map).unwrap();
    let mut f = std::fs::File::create(&tmp).unwrap();
    f.write_all(&bytes).unwrap();
    f.sync_all().unwrap();
    drop(f);
    std::fs::rename(&tmp, path).unwrap();
}

struct JsonRun {
    /// Estimated (or exact) total time of the strategy.
    total: Duration,
    timed: usize,
}

/// Apply `n` changes with `change(map, i)`, rewriting the file after every
/// `sample`-th one (timed), everything else in memory. Returns the total scaled by
/// `sample` plus the in-memory work.
fn rewrite_each(
    path: &Path,
    map: &mut Map<String, Value>,
    n: usize,
    sample: usize,
    change: impl Fn(&mut Map<String, Value>, usize),
) -> JsonRun {
    let mut rewrites = Duration::ZERO;
    let mut other = Duration::ZERO;
    let mut timed = 0;
    for i in 0..n {
        let t = Instant::now();
        change(map, i);
        other += t.elapsed();
        if i % sample == sample - 1 || sample == 1 {
            let t = Instant::now();
            rewrite(path, map);
            rewrites += t.elapsed();
            timed += 1;
        }
    }
    JsonRun {
        total: other + rewrites * sample as u32,
        timed,
    }
}

fn rewrite_once(
    path: &Path,
    map: &mut Map<String, Value>,
    n: usize,
    change: impl Fn(&mut Map<String, Value>, usize),
) -> Duration {
    let t = Instant::now();
    for i in 0..n {
        change(map, i);
    }
    rewrite(path, map);
    t.elapsed()
}

/// Cold: read + parse the file, then look every key up. Hot: the lookups only.
fn json_reads(path: &Path, n: usize) -> (Duration, Duration) {
    let t = Instant::now();
    let bytes = std::fs::read(path).unwrap();
    let map: Map<String, Value> = serde_json::from_slice(&bytes).unwrap();
    let mut sum = 0i64;
    for i in 0..n {
        sum += map.get(&key(i)).and_then(Value::as_i64).unwrap();
    }
    let cold = t.elapsed();
    let t = Instant::now();
    for i in 0..n {
        sum += map.get(&key(i)).and_then(Value::as_i64).unwrap();
    }
    let hot = t.elapsed();
    assert_eq!(sum, 2 * (0..n as i64).sum::<i64>());
    (cold, hot)
}

fn open(path: &Path) -> Database {
    Database::open_for::<Post>(path, StoreOptions::default()).unwrap()
}

fn main() {
    let quick = support::flag("--quick");
    let exact = support::flag("--exact");
    let n: usize = if quick { 1_000 } else { 40_000 };
    let sample: usize = if exact {
        1
    } else if quick {
        10
    } else {
        20
    };
    let root = support::out_dir();
    // On the real disk (not a tmpfs /tmp): the fsyncs must be real.
    let work = tempfile::tempdir_in(&root).unwrap();
    let mut m: Vec<(&str, f64)> = Vec::new();
    let mut notes: Vec<(&str, String)> = Vec::new();

    // ---- keel ----
    eprintln!("keel: insert {n} ints…");
    let db_path = work.path().join("dict.db");
    let db = open(&db_path);
    let d = db.dictionary();
    let keys: Vec<String> = (0..n).map(key).collect();
    db.store().reset_io_stats();
    let flushes0 = d.stats().flushes;
    let t = Instant::now();
    for (i, k) in keys.iter().enumerate() {
        d.set(k, i as i64).unwrap();
    }
    let insert_mem = t.elapsed();
    d.sync().wait().unwrap();
    let insert_dur = t.elapsed();
    let insert_syncs = db.store().io_stats().commit_syncs;
    let insert_flushes = d.stats().flushes - flushes0;

    eprintln!("keel: update one key {n} times…");
    db.store().reset_io_stats();
    let flushes0 = d.stats().flushes;
    let t = Instant::now();
    for i in 0..n {
        d.set("counter", i as i64).unwrap();
    }
    let update_mem = t.elapsed();
    d.sync().wait().unwrap();
    let update_dur = t.elapsed();
    let update_syncs = db.store().io_stats().commit_syncs;
    let update_flushes = d.stats().flushes - flushes0;

    eprintln!("keel: read {n} keys hot…");
    let disk0 = d.stats().disk_reads;
    let t = Instant::now();
    let mut sum = 0i64;
    for k in &keys {
        sum += d.get::<i64>(k).unwrap().unwrap();
    }
    let read_hot = t.elapsed();
    assert_eq!(d.stats().disk_reads, disk0, "hot reads went to disk");
    db.close().wait().unwrap();
    drop((d, db));

    eprintln!("keel: read {n} keys cold…");
    let db = open(&db_path);
    let d = db.dictionary();
    let t = Instant::now();
    for k in &keys {
        sum += d.get::<i64>(k).unwrap().unwrap();
    }
    let read_cold = t.elapsed();
    assert_eq!(sum, 2 * (0..n as i64).sum::<i64>());
    assert_eq!(d.get::<i64>("counter").unwrap(), Some(n as i64 - 1));
    db.close().wait().unwrap();
    drop((d, db));

    eprintln!("keel: preload, then read {n} keys…");
    let db = open(&db_path);
    let d = db.dictionary();
    let t = Instant::now();
    let loaded = d.preload().unwrap();
    let mut sum2 = 0i64;
    for k in &keys {
        sum2 += d.get::<i64>(k).unwrap().unwrap();
    }
    let read_preload = t.elapsed();
    assert_eq!(loaded, n + 1);
    assert_eq!(sum2, (0..n as i64).sum::<i64>());
    assert_eq!(d.stats().disk_reads, 0);
    db.close().wait().unwrap();
    drop((d, db));

    // keel, each change made durable before the next (set, then `sync()`): the
    // same guarantee as `rewrite_each`. Every change costs about the same here
    // (one commit sync, whatever the size), so with `sample` > 1 the first
    // n / sample changes are timed and the total scaled by `sample`, like the
    // baseline's estimate.
    eprintln!("keel: each change durable (set + sync)…");
    let each_db = open(&work.path().join("each.db"));
    let ed = each_db.dictionary();
    let m_each = (n / sample).max(1);
    let t = Instant::now();
    for i in 0..m_each {
        ed.set(&key(i), i as i64).unwrap();
        ed.sync().wait().unwrap();
    }
    let insert_each_keel = t.elapsed() * sample as u32;
    let t = Instant::now();
    for i in 0..m_each {
        ed.set("counter", i as i64).unwrap();
        ed.sync().wait().unwrap();
    }
    let update_each_keel = t.elapsed() * sample as u32;
    each_db.close().wait().unwrap();
    drop((ed, each_db));

    // ---- baselines ----
    eprintln!("json rewrite_each: insert (every {sample}th rewrite timed)…");
    let each_path = work.path().join("each.json");
    let mut map = Map::new();
    let ins = |m: &mut Map<String, Value>, i: usize| {
        m.insert(key(i), Value::from(i as i64));
    };
    let insert_each = rewrite_each(&each_path, &mut map, n, sample, ins);
    eprintln!("json rewrite_each: update…");
    let upd = |m: &mut Map<String, Value>, i: usize| {
        m.insert("counter".into(), Value::from(i as i64));
    };
    let update_each = rewrite_each(&each_path, &mut map, n, sample, upd);
    let (cold_each, hot_each) = json_reads(&each_path, n);

    eprintln!("json rewrite_once…");
    let once_path = work.path().join("once.json");
    let mut map = Map::new();
    let insert_once = rewrite_once(&once_path, &mut map, n, ins);
    let update_once = rewrite_once(&once_path, &mut map, n, upd);
    let (cold_once, hot_once) = json_reads(&once_path, n);
    let file_bytes = std::fs::metadata(&once_path).unwrap().len();

    // ---- report ----
    m.push(("n_keys", n as f64));
    m.push(("n_updates", n as f64));
    m.push(("quick", quick as u8 as f64));
    m.push(("rewrite_each_sample_every", sample as f64));
    m.push((
        "rewrite_each_timed_rewrites",
        (insert_each.timed + update_each.timed) as f64,
    ));
    m.push(("json_file_bytes", file_bytes as f64));
    // Every ratio pairs strategies with the same guarantee: durable once at the
    // end (keel: N sets + one `sync()`; JSON: N changes in memory + one fsync'd
    // write), or durable after every change (keel: set + `sync()` each; JSON:
    // whole-file rewrite + fsync each). `*_memory_ms` (sets returned, not yet
    // durable) has no baseline with that guarantee and no ratio.
    m.push(("insert_40k_memory_ms", ms(insert_mem)));
    m.push(("update_40k_memory_ms", ms(update_mem)));
    m.push(("insert_40k_durable_ms", ms(insert_dur)));
    m.push(("update_40k_durable_ms", ms(update_dur)));
    m.push(("insert_40k_each_durable_ms", ms(insert_each_keel)));
    m.push(("update_40k_each_durable_ms", ms(update_each_keel)));
    m.push((
        "insert_40k_durable_at_end_ratio",
        ms(insert_dur) / ms(insert_once),
    ));
    m.push((
        "update_40k_durable_at_end_ratio",
        ms(update_dur) / ms(update_once),
    ));
    m.push((
        "insert_40k_durable_each_ratio",
        ms(insert_each_keel) / ms(insert_each.total),
    ));
    m.push((
        "update_40k_durable_each_ratio",
        ms(update_each_keel) / ms(update_each.total),
    ));
    let mut op = |name: &'static str,
                  keel: Duration,
                  each: Duration,
                  once: Duration,
                  ratio_each: &'static str,
                  ratio_once: &'static str| {
        m.push((name, ms(keel)));
        m.push((ratio_each, ms(keel) / ms(each)));
        m.push((ratio_once, ms(keel) / ms(once)));
    };
    op(
        "read_40k_hot_ms",
        read_hot,
        hot_each,
        hot_once,
        "read_40k_hot_rewrite_each_ratio",
        "read_40k_hot_rewrite_once_ratio",
    );
    op(
        "read_40k_cold_ms",
        read_cold,
        cold_each,
        cold_once,
        "read_40k_cold_rewrite_each_ratio",
        "read_40k_cold_rewrite_once_ratio",
    );
    op(
        "read_40k_cold_preload_ms",
        read_preload,
        cold_each,
        cold_once,
        "read_40k_cold_preload_rewrite_each_ratio",
        "read_40k_cold_preload_rewrite_once_ratio",
    );
    m.push(("insert_40k_rewrite_each_ms", ms(insert_each.total)));
    m.push(("insert_40k_rewrite_once_ms", ms(insert_once)));
    m.push(("update_40k_rewrite_each_ms", ms(update_each.total)));
    m.push(("update_40k_rewrite_once_ms", ms(update_once)));
    m.push(("read_40k_hot_rewrite_each_ms", ms(hot_each)));
    m.push(("read_40k_hot_rewrite_once_ms", ms(hot_once)));
    m.push(("read_40k_cold_rewrite_each_ms", ms(cold_each)));
    m.push(("read_40k_cold_rewrite_once_ms", ms(cold_once)));
    m.push(("insert_40k_commit_syncs", insert_syncs as f64));
    m.push(("insert_40k_flushes", insert_flushes as f64));
    m.push(("update_40k_commit_syncs", update_syncs as f64));
    m.push(("update_40k_flushes", update_flushes as f64));

    let est = if sample == 1 {
        "every rewrite performed".to_string()
    } else {
        format!("ESTIMATE: every {sample}th rewrite performed and timed at its true file size, total × {sample}")
    };
    notes.push((
        "n_keys",
        "keys inserted (and reads); 40,000 in a full run".into(),
    ));
    notes.push((
        "n_updates",
        "updates of the one key; 40,000 in a full run".into(),
    ));
    notes.push((
        "quick",
        "1 if --quick (small sizes, not representative)".into(),
    ));
    notes.push(("rewrite_each_sample_every", "rewrite_each baselines: 1 = every rewrite performed; k = every k-th rewrite timed and the total scaled by k".into()));
    notes.push((
        "rewrite_each_timed_rewrites",
        "rewrites actually performed and fsync'ed for the rewrite_each baselines".into(),
    ));
    notes.push((
        "json_file_bytes",
        "size of the JSON file holding all keys".into(),
    ));
    notes.push(("insert_40k_memory_ms", "keel: N `set` calls returned (values visible to every reader, persisting in the background)".into()));
    notes.push((
        "insert_40k_durable_ms",
        "keel: N `set` calls, then `sync()` resolved (committed with the default Full sync policy)"
            .into(),
    ));
    notes.push((
        "update_40k_memory_ms",
        "keel: one key set N times, calls returned".into(),
    ));
    notes.push((
        "update_40k_durable_ms",
        "keel: one key set N times, then `sync()` resolved".into(),
    ));
    notes.push((
        "read_40k_hot_ms",
        "keel: N typed gets, all in the cache (no disk access, checked)".into(),
    ));
    notes.push(("read_40k_cold_ms", "keel: N typed gets after a fresh open (each a miss read from SQLite through the reader pool; OS page cache warm)".into()));
    notes.push((
        "read_40k_cold_preload_ms",
        "keel: fresh open, `preload()` (one table scan into the cache), then N typed gets".into(),
    ));
    notes.push((
        "insert_40k_rewrite_each_ms",
        format!("JSON file rewritten whole + fsync + rename after every insert ({est})"),
    ));
    notes.push((
        "insert_40k_rewrite_once_ms",
        "JSON: N inserts in memory, file rewritten once + fsync".into(),
    ));
    notes.push((
        "update_40k_rewrite_each_ms",
        format!("JSON file (all keys) rewritten whole + fsync + rename after every update ({est})"),
    ));
    notes.push((
        "update_40k_rewrite_once_ms",
        "JSON: N updates in memory, file rewritten once + fsync".into(),
    ));
    notes.push((
        "read_40k_hot_rewrite_each_ms",
        "JSON: N lookups in the parsed map".into(),
    ));
    notes.push((
        "read_40k_hot_rewrite_once_ms",
        "JSON: N lookups in the parsed map (same read path as rewrite_each, its own file)".into(),
    ));
    notes.push((
        "read_40k_cold_rewrite_each_ms",
        "JSON: read + parse the file, then N lookups".into(),
    ));
    notes.push(("read_40k_cold_rewrite_once_ms", "JSON: read + parse the file, then N lookups (same read path as rewrite_each, its own file)".into()));
    notes.push((
        "insert_40k_commit_syncs",
        "WAL syncs keel issued for the N inserts (group commit + coalescing)".into(),
    ));
    notes.push((
        "insert_40k_flushes",
        "background flushes (commits) that wrote the N inserts".into(),
    ));
    notes.push((
        "update_40k_commit_syncs",
        "WAL syncs keel issued for the N updates".into(),
    ));
    notes.push((
        "update_40k_flushes",
        "flushes that wrote the N updates (coalesced: latest value per key)".into(),
    ));
    notes.push((
        "insert_40k_each_durable_ms",
        format!(
            "keel: N inserts, each `set` followed by `sync()` (durable before the next){}",
            if sample == 1 {
                String::new()
            } else {
                format!("; ESTIMATE: the first N/{sample} timed, × {sample}")
            }
        ),
    ));
    notes.push((
        "update_40k_each_durable_ms",
        format!(
            "keel: one key set N times, each followed by `sync()`{}",
            if sample == 1 {
                String::new()
            } else {
                format!("; ESTIMATE: the first N/{sample} timed, × {sample}")
            }
        ),
    ));
    notes.push(("insert_40k_durable_at_end_ratio", "durable once, at the end: keel N sets + one sync() / JSON N inserts in memory + one fsync'd write".into()));
    notes.push(("update_40k_durable_at_end_ratio", "durable once, at the end: keel N sets of one key + one sync() / JSON N updates in memory + one fsync'd write".into()));
    notes.push(("insert_40k_durable_each_ratio", "durable after every change: keel set + sync() each / JSON whole-file rewrite + fsync each (both estimated when sampled)".into()));
    notes.push(("update_40k_durable_each_ratio", "durable after every change: keel set + sync() each / JSON whole-file rewrite + fsync each (both estimated when sampled)".into()));
    for (k, _) in m.iter() {
        if k.ends_with("_ratio") && !notes.iter().any(|(n, _)| n == k) {
            notes.push((
                k,
                "keel's time / the baseline's (below 1: keel is faster)".into(),
            ));
        }
    }

    let metrics: BTreeMap<&str, f64> = m.iter().cloned().collect();
    let notes: BTreeMap<&str, String> = notes.into_iter().collect();
    let report = serde_json::json!({
        "scenario": "dictionary",
        "summary": format!(
            "keel's dictionary vs a JSON settings file, N = {n}, each comparison between strategies with the same guarantee. Durable once at the end: keel's N sets + one `sync()` take {:.0} ms, the JSON file's N changes + one fsync'd write {:.0} ms. Durable after every change: keel's set + `sync()` per change {:.0} ms, the JSON file rewritten and fsync'ed per change (the plist way) {:.0} ms{}. Sets return in {:.1} ms in all (visible at once, not yet durable). Default Full sync policy for keel.",
            ms(insert_dur),
            ms(insert_once),
            ms(insert_each_keel),
            ms(insert_each.total),
            if sample == 1 { String::new() } else { format!(" (both estimated from 1 change in {sample}, see `rewrite_each_sample_every`)") },
            ms(insert_mem)
        ),
        "metrics": metrics,
        "notes": notes,
    });
    for (k, v) in &metrics {
        println!("{k:>40} {v:>14.3}");
    }
    support::write_report("dictionary", &report);
}
