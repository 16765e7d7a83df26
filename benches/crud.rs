//! CRUD benchmark (issue 4): keel's object store against raw rusqlite doing the same
//! SQL work in the same process.
//!
//! `cargo bench -p keel-benches --bench crud -- [--quick]` writes `target/keel-bench/crud.json`:
//! `{"scenario":"crud","metrics":{...},"notes":{...}}`. `--quick` shrinks the sizes
//! (1,000 objects, 100,000 for the "1M" insert) and reports the sizes used as the
//! `objects` and `insert_1m_objects` metrics.
//!
//! Setup: a Dflat-like schema (string primary key, one indexed int, an enum, a string
//! and a union), objects pre-encoded as FlatBuffers outside the timed sections. keel
//! goes through its dynamic core (`insert_bytes`, `update_bytes`, `delete_key`,
//! `query`, `get_bytes`: bytes verified against the schema, key extracted, indexes
//! maintained through `keel_field` expression indexes). The raw baseline stores the
//! same bytes plus the queried fields as plain columns (`title` UNIQUE, `priority`
//! indexed, `color`) — what a hand-written rusqlite app would do. Both run WAL with
//! `synchronous=NORMAL` (keel: `SyncPolicy::Normal`), so the figures measure engine
//! overhead, not the disk's fsync latency.

use std::path::Path;
use std::time::{Duration, Instant};

use keel::prelude::*;
use keel::schema::wire::Builder;
use keel::storage::rusqlite::{self, params};
use keel::storage::SyncPolicies;

mod support;
use support::{get, median, peak_rss_mb};

const SCHEMA: &str = r#"
attribute "primary";
attribute "indexed";
namespace bench;
enum Color : byte { Red = 0, Green, Blue, Cyan, Magenta, Yellow }
table TextContent { text: string; }
table ImageContent { images: [string]; }
union Content { TextContent, ImageContent }
table BenchDoc {
  title: string (primary);
  tag: string;
  priority: int (indexed);
  color: Color = Red;
  content: Content;
}
root_type BenchDoc;
"#;
const COLL: &str = "bench.BenchDoc";

struct Doc {
    title: String,
    priority: i32,
    color: i8,
    bytes: Vec<u8>,
}

fn doc(i: usize, version: i32) -> Doc {
    let title = format!("title-{i:08}");
    let priority = (i % 10_000) as i32 + version;
    let color = (i % 6) as i8;
    let mut b = Builder::new();
    let content = if i & 1 == 0 {
        let t = b.create_string("the quick brown fox jumps over the lazy dog");
        b.start_table();
        b.add_offset(0, t);
        (1u8, b.end_table())
    } else {
        let a = b.create_string("https://example.invalid/a.png");
        let c = b.create_string("https://example.invalid/b.png");
        let v = b.create_offset_vector(&[a, c]);
        b.start_table();
        b.add_offset(0, v);
        (2u8, b.end_table())
    };
    let t = b.create_string(&title);
    let tag = b.create_string("tag");
    b.start_table();
    b.add_offset(0, t);
    b.add_offset(1, tag);
    b.add_scalar::<i32>(2, priority, 0);
    b.add_scalar::<i8>(3, color, 0);
    b.add_scalar::<u8>(4, content.0, 0);
    b.add_offset(5, content.1);
    let root = b.end_table();
    Doc {
        title,
        priority,
        color,
        bytes: b.finish(root, None),
    }
}

fn docs(range: std::ops::Range<usize>, version: i32) -> Vec<Doc> {
    range.map(|i| doc(i, version)).collect()
}

fn secs(d: Duration) -> f64 {
    d.as_secs_f64()
}

fn open_keel(path: &Path) -> Database {
    let schema = Schema::parse(SCHEMA, "bench.fbs").expect("bench schema parses");
    let opts = StoreOptions::default()
        .sync(SyncPolicies::all(SyncPolicy::Normal))
        .idle_checkpoint_after(Duration::from_secs(3600));
    Database::open(path, schema, opts).expect("open keel")
}

fn open_raw(path: &Path) -> rusqlite::Connection {
    let c = rusqlite::Connection::open(path).expect("open raw");
    c.execute_batch(
        "PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL;
         CREATE TABLE IF NOT EXISTS doc(rowid INTEGER PRIMARY KEY, title TEXT NOT NULL UNIQUE,
             priority INTEGER, color INTEGER, body BLOB NOT NULL);
         CREATE INDEX IF NOT EXISTS doc_priority ON doc(priority);",
    )
    .expect("raw schema");
    c.set_prepared_statement_cache_capacity(64);
    c
}

fn raw_insert(c: &rusqlite::Connection, d: &[Doc]) {
    c.execute_batch("BEGIN").unwrap();
    {
        let mut st = c
            .prepare_cached("INSERT INTO doc(title, priority, color, body) VALUES (?1, ?2, ?3, ?4)")
            .unwrap();
        for x in d {
            st.execute(params![x.title, x.priority, x.color, x.bytes])
                .unwrap();
        }
    }
    c.execute_batch("COMMIT").unwrap();
}

fn keel_insert(db: &Database, d: Vec<Doc>) {
    db.write(move |t| {
        for x in d {
            t.insert_bytes(COLL, x.bytes)?;
        }
        Ok(())
    })
    .wait()
    .unwrap();
}

const RAW_UPDATE: &str = "UPDATE doc SET priority = ?1, color = ?2, body = ?3 WHERE title = ?4";

fn main() {
    let quick = support::flag("--quick");
    let n: usize = if quick { 1_000 } else { 10_000 };
    let big: usize = if quick { 100_000 } else { 1_000_000 };
    let chunk = big / 10;
    let reps = if quick { 3 } else { 5 };
    let root = tempfile::tempdir().unwrap();
    let mut metrics: Vec<(&str, f64)> = Vec::new();
    let add = |k: &'static str, v: f64, ms: &mut Vec<(&str, f64)>| {
        eprintln!("{k:>40} {v:>12.4}");
        ms.push((k, v));
    };

    // ---- insert N in one transaction ----
    let mut ki = Vec::new();
    let mut ri = Vec::new();
    for rep in 0..reps {
        let db = open_keel(&root.path().join(format!("k-ins-{rep}.db")));
        let d = docs(0..n, 0);
        let t = Instant::now();
        keel_insert(&db, d);
        ki.push(secs(t.elapsed()));
        db.close().wait().unwrap();
        let c = open_raw(&root.path().join(format!("r-ins-{rep}.db")));
        let d = docs(0..n, 0);
        let t = Instant::now();
        raw_insert(&c, &d);
        ri.push(secs(t.elapsed()));
    }
    add(
        "insert_10k_ratio",
        median(ki.clone()) / median(ri.clone()),
        &mut metrics,
    );
    add("insert_10k_s", median(ki), &mut metrics);
    add("raw_insert_10k_s", median(ri), &mut metrics);

    // Working databases for the rest.
    let db = open_keel(&root.path().join("k.db"));
    keel_insert(&db, docs(0..n, 0));
    let raw = open_raw(&root.path().join("r.db"));
    raw_insert(&raw, &docs(0..n, 0));

    // ---- fetch the 1/6 matching a non-indexed filter ----
    let schema = db.schema().clone();
    let color = schema.reader(COLL).unwrap().path("color").unwrap();
    let (mut kf, mut rf) = (Vec::new(), Vec::new());
    let mut matched = 0;
    for _ in 0..reps * 2 {
        let t = Instant::now();
        let rows = db
            .query(COLL)
            .filter(Expr::eq(color.clone(), 2))
            .all()
            .unwrap();
        kf.push(secs(t.elapsed()));
        matched = rows.len();
        let t = Instant::now();
        let mut st = raw
            .prepare_cached("SELECT rowid, body FROM doc WHERE color = ?1")
            .unwrap();
        let rows: Vec<(i64, Vec<u8>)> = st
            .query_map([2], |r| Ok((r.get(0)?, r.get(1)?)))
            .unwrap()
            .collect::<rusqlite::Result<_>>()
            .unwrap();
        rf.push(secs(t.elapsed()));
        assert_eq!(rows.len(), matched);
    }
    add(
        "fetch_nonindexed_ratio",
        median(kf.clone()) / median(rf.clone()),
        &mut metrics,
    );
    add("fetch_nonindexed_ms", median(kf) * 1e3, &mut metrics);
    add("fetch_nonindexed_objects", matched as f64, &mut metrics);

    // ---- update N in one transaction ----
    let (mut ku, mut ru) = (Vec::new(), Vec::new());
    for rep in 0..reps {
        let d = docs(0..n, 1 + rep);
        let t = Instant::now();
        db.write(move |t| {
            for x in d {
                t.update_bytes(COLL, x.bytes)?;
            }
            Ok(())
        })
        .wait()
        .unwrap();
        ku.push(secs(t.elapsed()));
        let d = docs(0..n, 1 + rep);
        let t = Instant::now();
        raw.execute_batch("BEGIN").unwrap();
        {
            let mut st = raw.prepare_cached(RAW_UPDATE).unwrap();
            for x in &d {
                st.execute(params![x.priority, x.color, x.bytes, x.title])
                    .unwrap();
            }
        }
        raw.execute_batch("COMMIT").unwrap();
        ru.push(secs(t.elapsed()));
    }
    add(
        "update_10k_ratio",
        median(ku.clone()) / median(ru.clone()),
        &mut metrics,
    );
    add("update_10k_s", median(ku), &mut metrics);

    // ---- update N in separate transactions, sequentially ----
    let d = docs(0..n, 100);
    let t = Instant::now();
    for x in d {
        db.write_blocking(move |t| t.update_bytes(COLL, x.bytes))
            .unwrap();
    }
    let k_seq = t.elapsed();
    let d = docs(0..n, 100);
    let t = Instant::now();
    {
        let mut st = raw.prepare_cached(RAW_UPDATE).unwrap();
        for x in &d {
            st.execute(params![x.priority, x.color, x.bytes, x.title])
                .unwrap();
        }
    }
    let r_seq = t.elapsed();
    add(
        "update_individual_ratio",
        secs(k_seq) / secs(r_seq),
        &mut metrics,
    );
    add("update_individual_s", secs(k_seq), &mut metrics);

    // ---- the same from 8 concurrent tasks ----
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let t = Instant::now();
    rt.block_on(async {
        let mut tasks = Vec::new();
        for w in 0..8 {
            let db = db.clone();
            tasks.push(tokio::spawn(async move {
                for i in (w..n).step_by(8) {
                    let x = doc(i, 200);
                    db.write(move |t| t.update_bytes(COLL, x.bytes))
                        .await
                        .unwrap();
                }
            }));
        }
        for t in tasks {
            t.await.unwrap();
        }
    });
    let k_conc = t.elapsed();
    add(
        "update_individual_concurrent_speedup",
        secs(k_seq) / secs(k_conc),
        &mut metrics,
    );

    // ---- the same under the default `Full` policy (one fsync per commit group) ----
    let m = n / 10;
    let full = Database::open(
        root.path().join("k-full.db"),
        Schema::parse(SCHEMA, "bench.fbs").expect("bench schema parses"),
        StoreOptions::default().idle_checkpoint_after(Duration::from_secs(3600)),
    )
    .expect("open keel (Full)");
    keel_insert(&full, docs(0..m, 0));
    full.store().reset_io_stats();
    let t = Instant::now();
    for i in 0..m {
        let x = doc(i, 300);
        full.write_blocking(move |t| t.update_bytes(COLL, x.bytes))
            .unwrap();
    }
    let f_seq = t.elapsed();
    let seq_syncs = full.store().io_stats().commit_syncs;
    full.store().reset_io_stats();
    let t = Instant::now();
    rt.block_on(async {
        let mut tasks = Vec::new();
        for w in 0..8 {
            let db = full.clone();
            tasks.push(tokio::spawn(async move {
                for i in (w..m).step_by(8) {
                    let x = doc(i, 400);
                    db.write(move |t| t.update_bytes(COLL, x.bytes))
                        .await
                        .unwrap();
                }
            }));
        }
        for t in tasks {
            t.await.unwrap();
        }
    });
    let f_conc = t.elapsed();
    let conc_syncs = full.store().io_stats().commit_syncs;
    full.close().wait().unwrap();
    add(
        "update_individual_concurrent_speedup_full_sync",
        secs(f_seq) / secs(f_conc),
        &mut metrics,
    );
    add(
        "full_sync_sequential_commit_syncs",
        seq_syncs as f64,
        &mut metrics,
    );
    add(
        "full_sync_concurrent_commit_syncs",
        conc_syncs as f64,
        &mut metrics,
    );
    add("full_sync_updates", m as f64, &mut metrics);

    // ---- fetch N one by one by primary key ----
    let keys: Vec<String> = (0..n).map(|i| format!("title-{i:08}")).collect();
    let t = Instant::now();
    for k in &keys {
        let o = db.get_bytes(COLL, &[Value::Text(k.clone())]).unwrap();
        assert!(o.is_some());
    }
    let kg = t.elapsed();
    let t = Instant::now();
    {
        let mut st = raw
            .prepare_cached("SELECT rowid, body FROM doc WHERE title = ?1")
            .unwrap();
        for k in &keys {
            let r: (i64, Vec<u8>) = st.query_row([k], |r| Ok((r.get(0)?, r.get(1)?))).unwrap();
            assert!(!r.1.is_empty());
        }
    }
    let rg = t.elapsed();
    add("fetch_individual_ratio", secs(kg) / secs(rg), &mut metrics);
    add(
        "fetch_individual_us",
        secs(kg) * 1e6 / n as f64,
        &mut metrics,
    );

    // ---- delete N in one transaction ----
    let k2 = keys.clone();
    let t = Instant::now();
    db.write(move |t| {
        for k in k2 {
            t.delete_key(COLL, &[Value::Text(k)])?;
        }
        Ok(())
    })
    .wait()
    .unwrap();
    let kd = t.elapsed();
    let t = Instant::now();
    raw.execute_batch("BEGIN").unwrap();
    {
        let mut st = raw
            .prepare_cached("DELETE FROM doc WHERE title = ?1")
            .unwrap();
        for k in &keys {
            st.execute([k]).unwrap();
        }
    }
    raw.execute_batch("COMMIT").unwrap();
    let rd = t.elapsed();
    add("delete_10k_ratio", secs(kd) / secs(rd), &mut metrics);
    assert_eq!(db.query(COLL).count().unwrap(), 0);
    db.close().wait().unwrap();
    drop(raw);

    // ---- 1M objects in chunks of 100k ----
    let db = open_keel(&root.path().join("k-big.db"));
    let mut k_big = Duration::ZERO;
    for c in 0..10 {
        let d = docs(c * chunk..(c + 1) * chunk, 0);
        let t = Instant::now();
        keel_insert(&db, d);
        k_big += t.elapsed();
    }
    assert_eq!(db.query(COLL).count().unwrap() as usize, big);
    db.close().wait().unwrap();
    let raw = open_raw(&root.path().join("r-big.db"));
    let mut r_big = Duration::ZERO;
    for c in 0..10 {
        let d = docs(c * chunk..(c + 1) * chunk, 0);
        let t = Instant::now();
        raw_insert(&raw, &d);
        r_big += t.elapsed();
    }
    drop(raw);
    add("insert_1m_s", secs(k_big), &mut metrics);
    add("insert_1m_ratio", secs(k_big) / secs(r_big), &mut metrics);
    add("peak_rss_mb", peak_rss_mb(), &mut metrics);
    add("objects", n as f64, &mut metrics);
    add("insert_1m_objects", big as f64, &mut metrics);

    let summary = format!(
        "{} objects: keel/raw rusqlite time ratios — insert {:.2}, non-indexed fetch {:.2}, update {:.2}, \
         individual updates {:.2}, individual fetches {:.2}, delete {:.2}; single-update \
         transactions from 8 concurrent tasks {:.1}x faster than sequential with Normal sync and \
         {:.1}x with the default Full sync ({} commit syncs instead of {}: group commit); {} objects \
         inserted in {:.1} s.",
        n,
        get(&metrics, "insert_10k_ratio"),
        get(&metrics, "fetch_nonindexed_ratio"),
        get(&metrics, "update_10k_ratio"),
        get(&metrics, "update_individual_ratio"),
        get(&metrics, "fetch_individual_ratio"),
        get(&metrics, "delete_10k_ratio"),
        get(&metrics, "update_individual_concurrent_speedup"),
        get(&metrics, "update_individual_concurrent_speedup_full_sync"),
        get(&metrics, "full_sync_concurrent_commit_syncs"),
        get(&metrics, "full_sync_sequential_commit_syncs"),
        big,
        get(&metrics, "insert_1m_s"),
    );
    support::write_metrics_report("crud", &metrics, Some(4), note, summary);
}

fn note(metric: &str) -> &'static str {
    match metric {
        "insert_10k_ratio" => "keel/raw time: insert `objects` objects in one transaction",
        "insert_10k_s" => "keel: insert `objects` objects in one transaction (s)",
        "raw_insert_10k_s" => "raw rusqlite: the same inserts (s)",
        "fetch_nonindexed_ratio" => "keel/raw time: fetch the 1/6 of objects matching a non-indexed filter (keel: verified bytes)",
        "fetch_nonindexed_ms" => "keel: that fetch (ms)",
        "fetch_nonindexed_objects" => "objects that fetch returns",
        "update_10k_ratio" => "keel/raw time: update every object in one transaction",
        "update_10k_s" => "keel: update every object in one transaction (s)",
        "update_individual_ratio" => "keel/raw time: update every object, one transaction each, sequentially (raw pays SQLite's inline auto-checkpoints; keel checkpoints in the background)",
        "update_individual_s" => "keel: those sequential single-update transactions (s)",
        "update_individual_concurrent_speedup" => "the same single-update transactions from 8 concurrent tasks: sequential time / concurrent time (Normal: no fsync per commit)",
        "update_individual_concurrent_speedup_full_sync" => "the same speedup under the default Full policy (fsync per commit group), over `full_sync_updates` updates",
        "full_sync_sequential_commit_syncs" => "commit syncs of the sequential run under Full",
        "full_sync_concurrent_commit_syncs" => "commit syncs of the 8-task run under Full (group commit)",
        "full_sync_updates" => "single-update transactions in the Full-policy runs (objects / 10)",
        "fetch_individual_ratio" => "keel/raw time: fetch every object one by one by primary key",
        "fetch_individual_us" => "keel: one fetch by primary key (µs)",
        "delete_10k_ratio" => "keel/raw time: delete every object by primary key in one transaction",
        "insert_1m_s" => "keel: insert `insert_1m_objects` objects in 10 transactions (s)",
        "insert_1m_ratio" => "keel/raw time for that insert",
        "peak_rss_mb" => "peak resident memory of the whole benchmark process (VmHWM, MB)",
        "objects" => "objects in the CRUD scenarios (10,000; 1,000 with --quick)",
        "insert_1m_objects" => "objects in the large insert (1,000,000; 100,000 with --quick)",
        _ => "",
    }
}
