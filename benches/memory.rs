//! What `Database::release_memory` gives back, in resident memory.
//!
//! `cargo bench -p keel-benches --bench memory -- [--quick]` writes
//! `target/keel-bench/memory.json`.
//!
//! # Data
//! 20,000 photos (quick: 2,000), each with a 512-d `(vector, metric: "cosine")`
//! embedding, so the in-memory copy of the vectors is 40 MB (quick: 4 MB), plus the
//! codes keel keeps beside it.
//!
//! # What is measured
//! The app's state before a memory warning: a nearest query has built the vector
//! copy, and four threads have read at once, so the reader pool holds idle
//! connections with their page and statement caches. Then:
//!
//! 1. the process's resident memory (`VmRSS`) before and after
//!    `db.release_memory()`, and what the call reports it dropped;
//! 2. the share of the vector copy's bytes that left the process's resident set
//!    (what the OS got back, not only what keel freed);
//! 3. the first nearest query after the release (which reads the copy again)
//!    against a steady one: the price of giving the memory back.

use std::time::Instant;

use keel::schema::Schema;
use keel::storage::{SyncPolicies, SyncPolicy};
use keel::{Database, StoreOptions};

mod support;

const COLL: &str = "bench.Photo";
const DIM: usize = 512;
const K: usize = 20;

fn schema() -> Schema {
    Schema::parse(
        "namespace bench; table Photo { id: int (primary); album: int; \
         embedding: [float] (vector: 512, metric: \"cosine\"); } root_type Photo;",
        "m.fbs",
    )
    .unwrap()
}

/// `n` pseudo-random vectors, flat (a xorshift; the values do not matter here).
fn vectors(n: usize) -> Vec<f32> {
    let mut s: u64 = 0x9E37_79B9_7F4A_7C15;
    (0..n * DIM)
        .map(|_| {
            s ^= s << 13;
            s ^= s >> 7;
            s ^= s << 17;
            (s >> 40) as f32 / (1u64 << 24) as f32 - 0.5
        })
        .collect()
}

fn nearest_ms(db: &Database, query: &[f32]) -> f64 {
    let path = schema().reader(COLL).unwrap().path("embedding").unwrap();
    let t = Instant::now();
    let found = db.query(COLL).nearest(path, query, K).all().unwrap();
    assert_eq!(found.len(), K);
    t.elapsed().as_secs_f64() * 1e3
}

fn main() {
    let quick = support::flag("--quick");
    let n = if quick { 2_000 } else { 20_000 };
    let dir = tempfile::tempdir().unwrap();
    let s = schema();
    let db = Database::open(
        dir.path().join("memory.db"),
        s.clone(),
        StoreOptions::default().sync(SyncPolicies::all(SyncPolicy::Normal)),
    )
    .unwrap();
    let flat = vectors(n);
    let reader = s.reader(COLL).unwrap();
    for (c, chunk) in flat.chunks(1000 * DIM).enumerate() {
        let objs: Vec<Vec<u8>> = chunk
            .chunks_exact(DIM)
            .enumerate()
            .map(|(i, v)| {
                let id = c * 1000 + i;
                reader
                    .encode_json(&serde_json::json!({"id": id, "album": id % 50, "embedding": v}))
                    .unwrap()
            })
            .collect();
        db.write(move |t| {
            for o in objs {
                t.insert_bytes(COLL, o)?;
            }
            Ok(())
        })
        .wait()
        .unwrap();
    }
    let query = &flat[..DIM];

    // The state before a warning: the copy built, the pool's readers warm.
    nearest_ms(&db, query);
    std::thread::scope(|scope| {
        for _ in 0..4 {
            scope.spawn(|| {
                for _ in 0..20 {
                    db.query(COLL).count().unwrap();
                }
            });
        }
    });
    let steady: Vec<f64> = (0..5).map(|_| nearest_ms(&db, query)).collect();
    let steady_ms = support::median(steady);

    let before = support::rss_mb();
    let released = db.release_memory();
    let after = support::rss_mb();
    let copy_mb = released.vector_copy_bytes as f64 / (1024.0 * 1024.0);
    let returned_mb = before - after;
    let first_after_ms = nearest_ms(&db, query);
    let rebuilt = support::rss_mb();

    let metrics: Vec<(&str, f64)> = vec![
        ("photos", n as f64),
        ("rss_before_mb", before),
        ("rss_after_mb", after),
        ("rss_returned_mb", returned_mb),
        ("vector_copy_mb", copy_mb),
        ("reader_connections", released.reader_connections as f64),
        ("returned_share", returned_mb / copy_mb),
        ("rss_after_next_query_mb", rebuilt),
        ("steady_query_ms", steady_ms),
        ("first_query_after_release_ms", first_after_ms),
        ("release_price_ratio", first_after_ms / steady_ms),
    ];
    let summary = format!(
        "release_memory on {n} photos: resident {before:.1} MB → {after:.1} MB \
         ({returned_mb:.1} MB back to the OS; keel dropped a {copy_mb:.1} MB vector copy \
         and {} idle readers); the next nearest query read the copy again in \
         {first_after_ms:.1} ms (steady {steady_ms:.2} ms)",
        released.reader_connections
    );
    println!("{summary}");
    let round3 = |v: f64| (v * 1000.0).round() / 1000.0;
    let share = returned_mb / copy_mb;
    let targets = vec![serde_json::json!({
        "metric": "returned_share", "label": "resident memory returned ÷ vector copy dropped",
        "median": round3(share), "min": round3(share), "max": round3(share), "repetitions": 1,
        "target": 0.8, "better": "higher", "unit": "×",
    })];
    support::write_targets_report(
        "memory",
        &metrics,
        note,
        targets,
        summary,
        include_str!("memory.rs"),
        &["Data", "What is measured"],
    );
}

fn note(k: &str) -> &'static str {
    match k {
        "photos" => "photos with a 512-d embedding",
        "rss_before_mb" => "resident memory (VmRSS) before release_memory, MB",
        "rss_after_mb" => "resident memory right after it, MB",
        "rss_returned_mb" => "before − after, MB",
        "vector_copy_mb" => "bytes of vector copies release_memory reports it dropped, MB",
        "reader_connections" => "idle reader connections it closed",
        "returned_share" => {
            "returned ÷ vector copy: how much of what keel freed the OS got back (goal ≥ 0.8)"
        }
        "rss_after_next_query_mb" => {
            "resident memory after the next nearest query read the copy again, MB"
        }
        "steady_query_ms" => "top-20 nearest query with the copy in memory, median of 5, ms",
        "first_query_after_release_ms" => {
            "the first top-20 query after the release (reads the copy again), ms"
        }
        "release_price_ratio" => {
            "that ÷ the steady query: what giving the memory back costs the next query"
        }
        _ => "",
    }
}
