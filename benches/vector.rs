//! Vector search benchmark: exact k-NN over `(vector: 512)` fields
//! against numpy and against this machine's memory bandwidth, live k-NN against
//! re-running the queries, and the write overhead of a vector field, all in the
//! same process (numpy in a child process on the same vectors).
//!
//! `cargo bench -p keel-benches --bench vector -- [--quick]` writes
//! `target/keel-bench/vector.json` (`cargo xtask bench vector` also renders it
//! into BENCHMARKS.md). `--query-only` runs the photos' queries over and over
//! and writes nothing: a workload for a profiler. `--insert-only plain|vector N`
//! inserts N photos the way the write-overhead comparison does and writes
//! nothing: under `valgrind --tool=callgrind` (every thread counted), the two
//! sides' instruction counts show where a vector field's write cost goes on a
//! machine too busy for calm timings.
//!
//! # Data
//! The seed app's shape: 8,155 photos, each with a 512-d embedding normalised
//! to length 1 (cosine metric), plus a second collection of 100,000 such vectors.
//! The vectors are pseudo-random (a fixed-seed generator: each element the sum
//! of four uniforms, so roughly Gaussian, then normalised); query vectors are
//! stored vectors. `--quick` (CI): 1,000 and 5,000.
//!
//! # What is measured
//! * **query**: `db.query(..).nearest(embedding, &q, 20).all()` (k = 20, the
//!   objects loaded), median over the query set, against numpy on the same
//!   vectors in memory: `d = 1 - X @ q; i = argpartition(d, 20)[:20]` sorted
//!   (`query_vs_numpy`, goal ≤ 1.2). For the photos keel and numpy take five
//!   turns each (two with `--quick`), so a machine whose speed drifts during
//!   the run moves both sides of a round; the ratio is the median of the
//!   rounds' ratios, its spread their range. numpy's BLAS uses every core
//!   and AVX-512 where the CPU has it; keel's coarse pass picks its widest loop
//!   at run time (AVX-512BW, AVX2, NEON; `vector/kernel.rs` in keel-query).
//!   Against the memory-bandwidth bound: bytes of f32 vectors ÷ the
//!   sequential-read bandwidth of a `copy_from_slice` of a buffer of the same
//!   size, measured in this run (`query_vs_bandwidth`, goal ≤ 2). numpy
//!   absent: the comparison is skipped and said so. keel answers from its
//!   in-memory copy (`StoreOptions::vector_cache_bytes`, default 64 MiB: the
//!   photos' floats and codes fit; of the 100,000 vectors, 205 MB of floats,
//!   only the 54 MB of codes do, and the candidates' floats come from the side
//!   table), so three more figures say what the copy changes: the photos'
//!   query with the copy off (`query_table_ms`), the first query after a
//!   single-photo write (`query_after_write_ms`, goal ≤ 2× `query_ms`:
//!   `query_after_write_ratio`),
//!   and the 100,000 vectors with a 256 MiB budget, floats and codes in memory
//!   (`large_query_copy_ms`).
//! * **live**: 100 live k-NN subscriptions (k = 20, different query vectors) on
//!   the 8,155 photos, then single-photo inserts, one per write: the writer's
//!   time per commit with the subscriptions minus without them, against the
//!   time to re-run the 100 queries (`live_lead`, goal ≥ 20).
//! * **write overhead**: inserting the photos, 1,000 per transaction, into the
//!   collection with `(vector: 512)` ÷ the same objects into one without the
//!   attribute, each into a fresh database, 3 rounds with the two sides taking
//!   turns going first; the median of the rounds' ratios (`write_overhead_ratio`,
//!   goal ≤ 2). Each object's body already holds its 512 floats, so the side
//!   table writes the same 2 KB again, and a 2 KB row takes a page of its own (two
//!   do not fit in 4 KB): a vector insert allocates and writes two pages where a
//!   plain one writes one. About 2× is that floor; the rest is the side table's
//!   triggers, which catch writes by other SQLite clients.

use std::path::{Path, PathBuf};
use std::time::Instant;

use keel::schema::Schema;
use keel::storage::{SyncPolicies, SyncPolicy};
use keel::{Database, StoreOptions};

mod support;

const COLL: &str = "bench.Photo";
const DIM: usize = 512;
/// Rounds of the photos' query, keel's and numpy's in turn.
const ROUNDS: usize = 5;
const K: usize = 20;
/// Rounds of the write-overhead comparison, the two sides in turn.
const WRITE_ROUNDS: usize = 3;

fn schema(vector: bool) -> Schema {
    let attr = if vector {
        "(vector: 512, metric: \"cosine\")"
    } else {
        ""
    };
    Schema::parse(
        &format!("namespace bench; table Photo {{ id: int (primary); album: int; embedding: [float] {attr}; }} root_type Photo;"),
        "b.fbs",
    )
    .unwrap()
}

/// `n` normalised pseudo-random vectors, flat.
fn vectors(n: usize, seed: u64) -> Vec<f32> {
    let mut s = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    let mut next = move || {
        s ^= s << 13;
        s ^= s >> 7;
        s ^= s << 17;
        (s >> 40) as f32 / (1u64 << 24) as f32 - 0.5
    };
    let mut out = Vec::with_capacity(n * DIM);
    for _ in 0..n {
        let v: Vec<f32> = (0..DIM)
            .map(|_| next() + next() + next() + next())
            .collect();
        let norm = v.iter().map(|x| x * x).sum::<f32>().sqrt();
        out.extend(v.iter().map(|x| x / norm));
    }
    out
}

fn options() -> StoreOptions {
    StoreOptions::default().sync(SyncPolicies::all(SyncPolicy::Normal))
}

fn encode(s: &Schema, flat: &[f32]) -> Vec<Vec<u8>> {
    let r = s.reader(COLL).unwrap();
    flat.chunks_exact(DIM)
        .enumerate()
        .map(|(i, v)| {
            r.encode_json(&serde_json::json!({"id": i, "album": i % 50, "embedding": v}))
                .unwrap()
        })
        .collect()
}

/// Insert `objs`, 1,000 per write; ms.
fn load(db: &Database, objs: &[Vec<u8>]) -> f64 {
    let t = Instant::now();
    for chunk in objs.chunks(1000) {
        let chunk = chunk.to_vec();
        db.write(move |t| {
            for o in chunk {
                t.insert_bytes(COLL, o)?;
            }
            Ok(())
        })
        .wait()
        .unwrap();
    }
    t.elapsed().as_secs_f64() * 1e3
}

/// Median ms of a top-K query per query vector.
fn query_ms(db: &Database, queries: &[&[f32]]) -> f64 {
    let path = schema(true)
        .reader(COLL)
        .unwrap()
        .path("embedding")
        .unwrap();
    // One warm-up (page cache, statement cache).
    db.query(COLL)
        .nearest(path.clone(), queries[0], K)
        .all()
        .unwrap();
    let mut t = Vec::new();
    for q in queries {
        let s = Instant::now();
        let r = db.query(COLL).nearest(path.clone(), q, K).all().unwrap();
        t.push(s.elapsed().as_secs_f64() * 1e3);
        assert_eq!(r.len(), K);
    }
    support::median(t)
}

/// Sequential-read bandwidth (GB/s) of copying a buffer of `bytes`.
fn bandwidth_gbs(bytes: usize) -> f64 {
    let src = vec![1u8; bytes];
    let mut dst = vec![0u8; bytes];
    dst.copy_from_slice(&src);
    let mut t = Vec::new();
    for _ in 0..5 {
        let s = Instant::now();
        dst.copy_from_slice(std::hint::black_box(&src));
        std::hint::black_box(&dst);
        t.push(s.elapsed().as_secs_f64());
    }
    bytes as f64 / support::median(t) / 1e9
}

/// `flat` written for numpy to `dir/name`.
fn numpy_file(dir: &Path, name: &str, flat: &[f32]) -> Option<PathBuf> {
    let data = dir.join(name);
    let bytes: Vec<u8> = flat.iter().flat_map(|x| x.to_le_bytes()).collect();
    std::fs::write(&data, bytes).ok()?;
    Some(data)
}

/// numpy's median ms per top-K query on the vectors in `data` (see
/// [`numpy_file`]), or `None` without numpy.
fn numpy_ms(data: Option<&Path>, queries: &[usize]) -> Option<f64> {
    let data = data?;
    let qs: Vec<String> = queries.iter().map(|q| q.to_string()).collect();
    let script = format!(
        r#"
import numpy as np, time, statistics
x = np.fromfile({data:?}, dtype='<f4').reshape(-1, {DIM})
ts = []
for qi in [{qs}]:
    q = x[qi].copy()
    s = time.perf_counter()
    d = 1.0 - x @ q
    i = np.argpartition(d, {K})[:{K}]
    i = i[np.argsort(d[i])]
    ts.append((time.perf_counter() - s) * 1e3)
print(statistics.median(ts[1:] if len(ts) > 1 else ts))
"#,
        data = data.display().to_string(),
        qs = qs.join(", ")
    );
    let out = std::process::Command::new("python3")
        .arg("-c")
        .arg(script)
        .output()
        .ok()?;
    if !out.status.success() {
        eprintln!(
            "numpy comparison skipped: {}",
            String::from_utf8_lossy(&out.stderr)
                .lines()
                .last()
                .unwrap_or("")
        );
        return None;
    }
    String::from_utf8_lossy(&out.stdout).trim().parse().ok()
}

/// `--insert-only plain|vector N` (see the module docs).
fn insert_only(args: &[String]) {
    let [side, n] = args else {
        panic!("usage: --insert-only plain|vector N");
    };
    let n: usize = n.parse().expect("N");
    let dir = tempfile::tempdir().unwrap();
    let objs = encode(&schema(true), &vectors(n, 1));
    let db = Database::open(dir.path().join("i.db"), schema(side == "vector"), options()).unwrap();
    let ms = load(&db, &objs);
    db.close().wait().unwrap();
    eprintln!("insert {n} ({side}): {ms:.1} ms");
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    if let Some(i) = args.iter().position(|a| a == "--insert-only") {
        return insert_only(&args[i + 1..]);
    }
    let quick = support::flag("--quick");
    let (n_small, n_large) = if quick {
        (1_000, 5_000)
    } else {
        (8_155, 100_000)
    };
    let nq = if quick { 5 } else { 21 };
    let dir = tempfile::tempdir().unwrap();
    let with = schema(true);
    let plain = schema(false);
    let flat = vectors(n_small, 1);
    let q_idx: Vec<usize> = (0..nq).map(|i| (i * 7919) % n_small).collect();
    let queries: Vec<&[f32]> = q_idx
        .iter()
        .map(|i| &flat[i * DIM..(i + 1) * DIM])
        .collect();

    // Write overhead: the same objects with and without the attribute, into a
    // fresh database each round, the two sides taking turns going first; the
    // figure is the median of the rounds' ratios. The last vector database is
    // the one the queries below read.
    let objs = encode(&with, &flat);
    let mut overhead = Vec::new();
    let (mut plain_runs, mut vec_runs) = (Vec::new(), Vec::new());
    let mut db = None;
    for round in 0..WRITE_ROUNDS {
        let side = |vector: bool| {
            let name = format!("{}{round}.db", if vector { "vec" } else { "plain" });
            let s = if vector { with.clone() } else { plain.clone() };
            let d = Database::open(dir.path().join(name), s, options()).unwrap();
            let ms = load(&d, &objs);
            (d, ms)
        };
        let ((dp, p), (dv, v)) = if round.is_multiple_of(2) {
            let a = side(false);
            (a, side(true))
        } else {
            let b = side(true);
            (side(false), b)
        };
        dp.close().wait().unwrap();
        if let Some(old) = db.replace(dv) {
            let old: Database = old;
            old.close().wait().unwrap();
        }
        overhead.push(v / p);
        plain_runs.push(p);
        vec_runs.push(v);
    }
    let db = db.expect("one round");
    let vec_db = dir.path().join(format!("vec{}.db", WRITE_ROUNDS - 1));
    let (plain_ms, vec_ms) = (support::median(plain_runs), support::median(vec_runs));
    let overhead_ratio = support::median(overhead.clone());
    eprintln!("insert {n_small}: plain {plain_ms:.0} ms, vector {vec_ms:.0} ms");

    // Query, 8,155.
    if support::flag("--query-only") {
        // For a profiler: the photos' queries, many times, and nothing else.
        let rounds: Vec<f64> = (0..400).map(|_| query_ms(&db, &queries)).collect();
        eprintln!(
            "query {n_small}: keel {:.3} ms (median of 400 rounds' medians)",
            support::median(rounds)
        );
        return;
    }
    // keel and numpy take turns, so a machine that speeds up or slows down
    // over the run moves both sides of each round's ratio.
    let (mut keel_rounds, mut numpy_rounds) = (Vec::new(), Vec::new());
    // Written once: a file rewritten between rounds would have the kernel
    // writing it back during keel's turn.
    let small_file = numpy_file(dir.path(), "photos.f32", &flat);
    for _ in 0..ROUNDS.min(if quick { 2 } else { ROUNDS }) {
        keel_rounds.push(query_ms(&db, &queries));
        if let Some(np) = numpy_ms(small_file.as_deref(), &q_idx) {
            numpy_rounds.push(np);
        }
    }
    let small_ratios: Vec<f64> = keel_rounds
        .iter()
        .zip(&numpy_rounds)
        .map(|(k, n)| k / n)
        .collect();
    let small_ms = support::median(keel_rounds.clone());
    let small_np = (!numpy_rounds.is_empty()).then(|| support::median(numpy_rounds.clone()));
    let small_bytes = n_small * DIM * 4;
    let bw = bandwidth_gbs(small_bytes);
    let small_bound_ms = small_bytes as f64 / (bw * 1e9) * 1e3;
    eprintln!(
        "query {n_small}: keel {keel_rounds:.3?} ms, numpy {numpy_rounds:.3?} ms, bandwidth bound {small_bound_ms:.2} ms ({bw:.1} GB/s)"
    );

    // The first query after a write: the copy is read again.
    let after_write_ms = {
        let path = with.reader(COLL).unwrap().path("embedding").unwrap();
        let r = with.reader(COLL).unwrap();
        let mut t = Vec::new();
        for (i, q) in queries.iter().enumerate() {
            let o = r
                .encode_json(&serde_json::json!({"id": 2_000_000 + i, "album": 2, "embedding": q}))
                .unwrap();
            db.write(move |t| t.insert_bytes(COLL, o).map(|_| ()))
                .wait()
                .unwrap();
            let s = Instant::now();
            db.query(COLL).nearest(path.clone(), q, K).all().unwrap();
            t.push(s.elapsed().as_secs_f64() * 1e3);
        }
        support::median(t)
    };
    eprintln!("query {n_small}: first query after a write {after_write_ms:.2} ms");

    // Live k-NN: 100 subscriptions, single-photo inserts.
    let path = with.reader(COLL).unwrap().path("embedding").unwrap();
    let extra = vectors(if quick { 20 } else { 100 }, 2);
    let extra_objs: Vec<Vec<u8>> = {
        let r = with.reader(COLL).unwrap();
        extra
            .chunks_exact(DIM)
            .enumerate()
            .map(|(i, v)| {
                r.encode_json(&serde_json::json!({"id": 1_000_000 + i, "album": 1, "embedding": v}))
                    .unwrap()
            })
            .collect()
    };
    let insert_each = |objs: &[Vec<u8>]| -> Vec<f64> {
        objs.iter()
            .map(|o| {
                let o = o.clone();
                let s = Instant::now();
                db.write(move |t| t.insert_bytes(COLL, o).map(|_| ()))
                    .wait()
                    .unwrap();
                s.elapsed().as_secs_f64() * 1e3
            })
            .collect()
    };
    let half = extra_objs.len() / 2;
    let without = support::median(insert_each(&extra_objs[..half]));
    let subs: Vec<_> = (0..100)
        .map(|i| {
            let q = &flat[((i * 31) % n_small) * DIM..][..DIM];
            db.query(COLL)
                .nearest(path.clone(), q, K)
                .subscribe(|_| {})
                .unwrap()
        })
        .collect();
    let with_subs = support::median(insert_each(&extra_objs[half..]));
    let scans: u64 = subs.iter().map(|s| s.stats().scans).sum();
    drop(subs);
    let live_cost = (with_subs - without).max(1e-3);
    let rerun_ms = {
        let s = Instant::now();
        for i in 0..100 {
            let q = &flat[((i * 31) % n_small) * DIM..][..DIM];
            db.query(COLL).nearest(path.clone(), q, K).all().unwrap();
        }
        s.elapsed().as_secs_f64() * 1e3
    };
    eprintln!(
        "live: commit {without:.3} ms alone, {with_subs:.3} ms with 100 subscriptions ({scans} scans in all); re-running 100 queries {rerun_ms:.1} ms"
    );
    db.close().wait().unwrap();
    // The photos again, with the copy off: every query scans the side table.
    let table_ms = {
        let db = Database::open(&vec_db, with.clone(), options().vector_cache_bytes(0)).unwrap();
        let ms = query_ms(&db, &queries);
        db.close().wait().unwrap();
        ms
    };
    eprintln!("query {n_small}: side table, no copy {table_ms:.2} ms");

    // Query, 100,000.
    let big = vectors(n_large, 3);
    let db_big = Database::open(dir.path().join("big.db"), with.clone(), options()).unwrap();
    let big_load_ms = load(&db_big, &encode(&with, &big));
    let big_q_idx: Vec<usize> = (0..nq.min(11)).map(|i| (i * 7919) % n_large).collect();
    let big_queries: Vec<&[f32]> = big_q_idx
        .iter()
        .map(|i| &big[i * DIM..(i + 1) * DIM])
        .collect();
    let large_ms = query_ms(&db_big, &big_queries);
    let large_bytes = n_large * DIM * 4;
    let bw_large = bandwidth_gbs(large_bytes);
    let large_bound_ms = large_bytes as f64 / (bw_large * 1e9) * 1e3;
    let large_np = numpy_ms(
        numpy_file(dir.path(), "large.f32", &big).as_deref(),
        &big_q_idx,
    );
    eprintln!(
        "query {n_large}: keel {large_ms:.2} ms, numpy {large_np:?} ms, bandwidth bound {large_bound_ms:.2} ms ({bw_large:.1} GB/s); load {big_load_ms:.0} ms"
    );
    db_big.close().wait().unwrap();
    let large_copy_ms = {
        let db = Database::open(
            dir.path().join("big.db"),
            with.clone(),
            options().vector_cache_bytes(256 << 20),
        )
        .unwrap();
        let ms = query_ms(&db, &big_queries);
        db.close().wait().unwrap();
        ms
    };
    eprintln!("query {n_large}: with a 256 MiB copy {large_copy_ms:.2} ms");

    let mut metrics: Vec<(&str, f64)> = vec![
        ("photos", n_small as f64),
        ("large_vectors", n_large as f64),
        ("query_ms", small_ms),
        ("large_query_ms", large_ms),
        ("query_table_ms", table_ms),
        ("query_after_write_ms", after_write_ms),
        ("query_after_write_ratio", after_write_ms / small_ms),
        ("large_query_copy_ms", large_copy_ms),
        (
            "large_query_copy_vs_bandwidth",
            large_copy_ms / large_bound_ms,
        ),
        ("bandwidth_gb_s", bw),
        ("bandwidth_bound_ms", small_bound_ms),
        ("large_bandwidth_bound_ms", large_bound_ms),
        ("query_vs_bandwidth", small_ms / small_bound_ms),
        ("large_query_vs_bandwidth", large_ms / large_bound_ms),
        ("live_commit_cost_ms", live_cost),
        ("rerun_100_queries_ms", rerun_ms),
        ("live_lead", rerun_ms / live_cost),
        ("live_scans", scans as f64),
        ("insert_plain_ms", plain_ms),
        ("insert_vector_ms", vec_ms),
        ("write_overhead_ratio", overhead_ratio),
    ];
    let mut summary = format!(
        "{n_small} photos and {n_large} vectors, 512-d normalised, k = {K}; sequential read {bw:.1} GB/s."
    );
    if let Some(np) = small_np {
        metrics.push(("numpy_query_ms", np));
        metrics.push(("query_vs_numpy", support::median(small_ratios.clone())));
    }
    if let Some(np) = large_np {
        metrics.push(("large_numpy_query_ms", np));
        metrics.push(("large_query_vs_numpy", large_ms / np));
        metrics.push(("large_query_copy_vs_numpy", large_copy_ms / np));
    }
    if small_np.is_none() || large_np.is_none() {
        summary.push_str(" numpy was not available: the numpy comparison was skipped.");
    }
    let get = |k: &str| metrics.iter().find(|m| m.0 == k).map(|m| m.1);
    let round3 = |v: f64| (v * 1000.0).round() / 1000.0;
    let target = |metric: &str, label: &str, goal: f64, better: &str| {
        get(metric).map(|v| {
            // The photos' ratio has one value per round; the others one.
            let (min, max, n) = match metric {
                "query_vs_numpy" => (
                    small_ratios.iter().copied().fold(f64::INFINITY, f64::min),
                    small_ratios.iter().copied().fold(0.0, f64::max),
                    small_ratios.len(),
                ),
                "write_overhead_ratio" => (
                    overhead.iter().copied().fold(f64::INFINITY, f64::min),
                    overhead.iter().copied().fold(0.0, f64::max),
                    overhead.len(),
                ),
                _ => (v, v, 1),
            };
            serde_json::json!({
                "metric": metric, "label": label, "median": round3(v), "min": round3(min),
                "max": round3(max), "repetitions": n, "target": goal, "better": better, "unit": "×",
            })
        })
    };
    let targets: Vec<serde_json::Value> = [
        target(
            "query_vs_numpy",
            "8,155 × 512-d top-20 vs numpy",
            1.2,
            "lower",
        ),
        target(
            "large_query_vs_numpy",
            "100,000 × 512-d top-20 vs numpy",
            1.2,
            "lower",
        ),
        target(
            "large_query_copy_vs_numpy",
            "100,000 × 512-d top-20 vs numpy, 256 MiB copy",
            1.2,
            "lower",
        ),
        target(
            "query_vs_bandwidth",
            "8,155 × 512-d top-20 vs bandwidth bound",
            2.0,
            "lower",
        ),
        target(
            "large_query_vs_bandwidth",
            "100,000 × 512-d top-20 vs bandwidth bound",
            2.0,
            "lower",
        ),
        target(
            "large_query_copy_vs_bandwidth",
            "100,000 × 512-d top-20 vs bandwidth bound, 256 MiB copy",
            2.0,
            "lower",
        ),
        target(
            "query_after_write_ratio",
            "first top-20 after a single-photo write ÷ a steady one",
            2.0,
            "lower",
        ),
        target(
            "write_overhead_ratio",
            "insert with (vector: 512) ÷ without",
            2.0,
            "lower",
        ),
        target(
            "live_lead",
            "re-running 100 queries ÷ live k-NN writer cost per commit",
            20.0,
            "higher",
        ),
    ]
    .into_iter()
    .flatten()
    .collect();
    support::write_targets_report(
        "vector",
        &metrics,
        note,
        targets,
        summary,
        include_str!("vector.rs"),
        &["Data", "What is measured"],
    );
}

fn note(k: &str) -> &'static str {
    match k {
        "photos" => "photos with a 512-d embedding (the seed app's shape)",
        "large_vectors" => "vectors in the large collection",
        "query_ms" => {
            "keel: ms per top-20 nearest query over the photos, objects loaded (from the in-memory copy), median of the rounds"
        }
        "large_query_ms" => {
            "keel: ms per top-20 nearest query over the large collection (default budget: codes in memory, the candidates' floats from the side table)"
        }
        "query_table_ms" => "keel, copy off (vector_cache_bytes 0): ms per top-20 over the photos, from the side table",
        "query_after_write_ms" => "keel: the first top-20 query after a single-photo write, ms",
        "query_after_write_ratio" => "that ÷ query_ms (goal ≤ 2)",
        "large_query_copy_ms" => "keel with vector_cache_bytes = 256 MiB: ms per top-20 over the large collection",
        "large_query_copy_vs_numpy" => "that ÷ numpy (goal ≤ 1.2)",
        "large_query_copy_vs_bandwidth" => "that ÷ the bandwidth bound (goal ≤ 2)",
        "numpy_query_ms" => {
            "numpy (in memory): ms per top-20 (X @ q, argpartition) over the photos, median of the rounds"
        }
        "large_numpy_query_ms" => "numpy: ms per top-20 over the large collection",
        "query_vs_numpy" => "keel ÷ numpy, photos: the median of the rounds' ratios (goal ≤ 1.2)",
        "large_query_vs_numpy" => "keel ÷ numpy, large collection (goal ≤ 1.2)",
        "bandwidth_gb_s" => {
            "sequential read (copy_from_slice) of a buffer the photos' vectors' size, GB/s"
        }
        "bandwidth_bound_ms" => "bytes of the photos' vectors ÷ that bandwidth, ms",
        "large_bandwidth_bound_ms" => "bytes of the large collection's vectors ÷ its bandwidth, ms",
        "query_vs_bandwidth" => "keel query ÷ bandwidth bound, photos (goal ≤ 2)",
        "large_query_vs_bandwidth" => "keel query ÷ bandwidth bound, large (goal ≤ 2)",
        "live_commit_cost_ms" => {
            "writer: ms per single-photo commit with 100 live k-NN minus without"
        }
        "rerun_100_queries_ms" => "re-running the 100 nearest queries, ms",
        "live_lead" => "re-run ÷ live cost per commit (goal ≥ 20)",
        "live_scans" => "full scans the 100 subscriptions ran (100 = only their first)",
        "insert_plain_ms" => "insert the photos without (vector), ms",
        "insert_vector_ms" => "insert the photos with (vector: 512), ms",
        "write_overhead_ratio" => "with ÷ without (vector) (goal ≤ 2)",
        _ => "",
    }
}
