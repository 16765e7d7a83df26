//! Sync benchmark: what the outbox costs a commit, how fast the client uploads,
//! and how soon a row written in PostgreSQL reaches a live query.
//!
//! `cargo bench -p keel-benches --bench sync -- [--quick]` writes
//! `target/keel-bench/sync.json`. Parts 2 and 3 start a throwaway PostgreSQL
//! (`keel_relay::test_postgres`) and a relay in this process; without PostgreSQL
//! binaries they are skipped and the summary says so.
//!
//! # Method
//!
//! 1. **Outbox writer cost**: two databases on the relay fixture's schema, one
//!    with its `(sync)` markings and one with them removed (the same tables
//!    otherwise). Each commit inserts one post and changes one field of another
//!    (`change_values`), `SyncPolicy::Normal`, `write_blocking`. Blocks of 2,000
//!    commits (quick: 300), alternating between the two, 7 rounds (quick: 3); the
//!    ratio is the median synced block ÷ the median unsynced block (goal ≤ 1.3).
//! 2. **Sustained upload**: 20,000 (quick: 2,000) local commits of one counter
//!    increment each, made offline (before the sync starts); then `db.sync(…)`
//!    with 1,000 operations per batch against a relay taking 1,000 per batch,
//!    timed from the start until `wait_uploaded` returns: operations ÷ seconds
//!    (goal ≥ 20,000/s). The server's counter is checked to equal the commits.
//! 3. **PostgreSQL commit → live query**: a client holds a live query on its
//!    posts; this process inserts a post by SQL (tokio-postgres, autocommit),
//!    200 times (quick: 30), 10 ms apart. The time is from the INSERT's return
//!    (the commit is done) to the live query's delivery that holds the post;
//!    p50 (goal ≤ 10 ms) and p99 (goal ≤ 50 ms).

use std::path::{Path, PathBuf};
use std::sync::{mpsc, Arc};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use keel::prelude::*;
use keel::SyncOptions;
use keel_relay::config::Config;
use keel_relay::server;
use keel_relay::sync_schema::SyncSchema;
use keel_relay::test_postgres::TestPostgres;

mod support;

const SECRET: &str = "a bench secret, long enough for HS256 (32+ bytes)";

fn fixture() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../crates/keel-relay/tests/fixtures/blog.fbs")
}

fn schema(synced: bool) -> Schema {
    let text = std::fs::read_to_string(fixture()).unwrap();
    let text = if synced {
        text
    } else {
        text.replace(", sync: \"posts\"", "")
            .replace(", sync)", ")")
            .replace(" (sync: counter)", "")
            .replace(" (sync: server_wins)", "")
    };
    Schema::parse(&text, "blog.fbs").unwrap()
}

fn options() -> StoreOptions {
    StoreOptions::default().commit_sync(SyncPolicy::Normal)
}

fn post(db: &Database, id: &str, owner: &str) -> Vec<u8> {
    db.schema()
        .reader("blog.Post")
        .unwrap()
        .encode_json(&serde_json::json!({"id": id, "owner": owner, "title": "a post", "likes": 0}))
        .unwrap()
}

/// ms per commit over `n` commits on `db`, starting at post number `*next`.
fn block(db: &Database, n: usize, next: &mut u64) -> f64 {
    let start = Instant::now();
    for _ in 0..n {
        *next += 1;
        let bytes = post(db, &format!("p{next}"), "ann");
        let prev = format!("p{}", *next - 1);
        let i = *next as i64;
        db.write_blocking(move |t| {
            t.insert_bytes("blog.Post", bytes)?;
            t.change_values(
                "blog.Post",
                &[prev.into()],
                &[("title".into(), format!("t{i}").into())],
            )
            .map(|_| ())
        })
        .unwrap();
    }
    start.elapsed().as_secs_f64() * 1000.0 / n as f64
}

fn outbox_cost(dir: &Path, quick: bool) -> (f64, f64, f64) {
    let (n, rounds) = if quick { (300, 3) } else { (2000, 7) };
    let synced = Database::open(dir.join("synced.db"), schema(true), options()).unwrap();
    let plain = Database::open(dir.join("plain.db"), schema(false), options()).unwrap();
    let (mut a, mut b) = (0u64, 0u64);
    for (db, next) in [(&synced, &mut a), (&plain, &mut b)] {
        let bytes = post(db, "p0", "ann");
        db.write_blocking(move |t| t.insert_bytes("blog.Post", bytes).map(|_| ()))
            .unwrap();
        block(db, n / 4, next); // warm
    }
    let (mut s, mut p) = (Vec::new(), Vec::new());
    for _ in 0..rounds {
        s.push(block(&synced, n, &mut a));
        p.push(block(&plain, n, &mut b));
    }
    let (s, p) = (support::median(s), support::median(p));
    eprintln!(
        "outbox: synced {s:.4} ms/commit, unsynced {p:.4} ms/commit, ratio {:.3}",
        s / p
    );
    (s, p, s / p)
}

fn token(sub: &str) -> String {
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_secs();
    jsonwebtoken::encode(
        &jsonwebtoken::Header::new(jsonwebtoken::Algorithm::HS256),
        &serde_json::json!({"sub": sub, "exp": now + 3600}),
        &jsonwebtoken::EncodingKey::from_secret(SECRET.as_bytes()),
    )
    .unwrap()
}

fn sync_options(url: &str) -> SyncOptions {
    let t = token("ann");
    let mut o = SyncOptions::new(url, Arc::new(move || Some(t.clone())));
    o.batch_ops = 1000;
    o
}

/// (ops/s, p50 ms, p99 ms, samples)
fn network(dir: &Path, quick: bool) -> Option<(f64, f64, f64, usize)> {
    let pg = TestPostgres::start().expect("PostgreSQL starts")?;
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let url = pg.url().to_owned();
    let config = format!(
        "listen = \"127.0.0.1:0\"\ndatabase_url = \"{url}\"\nschema = \"{}\"\nrelay_id = \"bench\"\n\
         max_frame_bytes = 4194304\nmax_batch_ops = 1000\npoll_interval_ms = 2\n\
         [auth]\nhs256_secrets = [\"{SECRET}\"]\n\
         [[scope]]\ncollection = \"blog.Post\"\nfilter = \"owner == token.sub\"\n",
        fixture().display()
    );
    let (sql, relay) = rt.block_on(async {
        let (sql, conn) = tokio_postgres::connect(&url, tokio_postgres::NoTls)
            .await
            .unwrap();
        tokio::spawn(conn);
        let s = SyncSchema::from_file(fixture()).unwrap();
        sql.batch_execute(&keel_relay::ddl::ddl(&s)).await.unwrap();
        let config = Config::parse(&config, Path::new("relay.toml")).unwrap();
        (sql, server::start(config).await.unwrap())
    });
    let ws = format!("ws://{}/sync", relay.addr);

    // 2. Sustained upload.
    let n = if quick { 2_000 } else { 20_000 };
    let db = Database::open(dir.join("up.db"), schema(true), options()).unwrap();
    let bytes = post(&db, "c", "ann");
    db.write_blocking(move |t| t.insert_bytes("blog.Post", bytes).map(|_| ()))
        .unwrap();
    for i in 1..=n as i64 {
        db.write_blocking(move |t| {
            t.change_values("blog.Post", &["c".into()], &[("likes".into(), i.into())])
                .map(|_| ())
        })
        .unwrap();
    }
    let start = Instant::now();
    let handle = db.sync(sync_options(&ws)).unwrap();
    handle.wait_uploaded().unwrap();
    let secs = start.elapsed().as_secs_f64();
    let likes: i64 = rt
        .block_on(sql.query_one("SELECT likes FROM posts WHERE id = 'c'", &[]))
        .unwrap()
        .get(0);
    assert_eq!(likes, n as i64, "every increment arrived once");
    let ops_s = (n + 1) as f64 / secs;
    eprintln!("upload: {} ops in {secs:.2} s = {ops_s:.0} ops/s", n + 1);
    drop(handle);

    // 3. PostgreSQL commit → live query.
    let samples: usize = if quick { 30 } else { 200 };
    let live = Database::open(dir.join("live.db"), schema(true), options()).unwrap();
    let (tx, rx) = mpsc::channel::<(usize, Instant)>();
    let _sub = live
        .query("blog.Post")
        .subscribe(move |u| {
            let _ = tx.send((u.objects.len(), Instant::now()));
        })
        .unwrap();
    let handle = live.sync(sync_options(&ws)).unwrap();
    // Wait for the snapshot (the upload's post).
    let deadline = Instant::now() + Duration::from_secs(30);
    while live.query("blog.Post").count().unwrap() < 1 && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(10));
    }
    let have = live.query("blog.Post").count().unwrap() as usize;
    while rx.try_recv().is_ok() {}
    let mut lat = Vec::new();
    for i in 0..samples {
        let insert = format!("INSERT INTO posts (id, owner) VALUES ('l{i}', 'ann')");
        rt.block_on(sql.batch_execute(&insert)).unwrap();
        let committed = Instant::now();
        let want = have + i + 1;
        loop {
            let (len, at) = rx
                .recv_timeout(Duration::from_secs(10))
                .expect("a delivery");
            if len >= want {
                lat.push(at.saturating_duration_since(committed).as_secs_f64() * 1000.0);
                break;
            }
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    drop(handle);
    lat.sort_by(f64::total_cmp);
    let p50 = lat[lat.len() / 2];
    let p99 = lat[((lat.len() as f64 * 0.99).ceil() as usize).min(lat.len()) - 1];
    eprintln!("latency: p50 {p50:.2} ms, p99 {p99:.2} ms over {samples}");
    rt.block_on(relay.stop());
    Some((ops_s, p50, p99, samples))
}

fn main() {
    let quick = support::flag("--quick");
    let dir = tempfile::tempdir().unwrap();
    let (synced_ms, plain_ms, ratio) = outbox_cost(dir.path(), quick);
    let mut metrics: Vec<(&str, f64)> = vec![
        ("synced_commit_ms", synced_ms),
        ("unsynced_commit_ms", plain_ms),
        ("outbox_ratio", ratio),
    ];
    let mut summary = format!(
        "A synced commit (one insert, one field change) costs {ratio:.2}× the same commit unsynced."
    );
    match network(dir.path(), quick) {
        Some((ops_s, p50, p99, n)) => {
            metrics.extend([
                ("upload_ops_per_s", ops_s.round()),
                ("pg_to_live_p50_ms", p50),
                ("pg_to_live_p99_ms", p99),
                ("latency_samples", n as f64),
            ]);
            summary.push_str(&format!(
                " Upload {ops_s:.0} ops/s; PostgreSQL commit → live query p50 {p50:.1} ms, p99 {p99:.1} ms."
            ));
        }
        None => summary.push_str(" No PostgreSQL binaries: upload and latency were skipped."),
    }
    let get = |k: &str| metrics.iter().find(|m| m.0 == k).map(|m| m.1);
    let round3 = |v: f64| (v * 1000.0).round() / 1000.0;
    let target = |metric: &str, label: &str, goal: f64, better: &str, unit: &str| {
        get(metric).map(|v| {
            serde_json::json!({
                "metric": metric, "label": label, "median": round3(v), "min": round3(v),
                "max": round3(v), "repetitions": 1, "target": goal, "better": better, "unit": unit,
            })
        })
    };
    let targets: Vec<serde_json::Value> = [
        target(
            "outbox_ratio",
            "synced commit ÷ unsynced",
            1.3,
            "lower",
            "×",
        ),
        target(
            "upload_ops_per_s",
            "sustained upload, ops/s",
            20_000.0,
            "higher",
            "/s",
        ),
        target(
            "pg_to_live_p50_ms",
            "PostgreSQL commit → live query, p50",
            10.0,
            "lower",
            "ms",
        ),
        target(
            "pg_to_live_p99_ms",
            "PostgreSQL commit → live query, p99",
            50.0,
            "lower",
            "ms",
        ),
    ]
    .into_iter()
    .flatten()
    .collect();
    support::write_targets_report(
        "sync",
        &metrics,
        note,
        targets,
        summary,
        include_str!("sync.rs"),
        &["Method"],
    );
}

fn note(k: &str) -> &'static str {
    match k {
        "synced_commit_ms" => "ms per commit (insert + change of one field) on a (sync) collection, outbox included",
        "unsynced_commit_ms" => "ms per the same commit with the sync markings removed",
        "outbox_ratio" => "that ÷ unsynced (goal ≤ 1.3)",
        "upload_ops_per_s" => "operations per second from db.sync() to wait_uploaded(), 1,000 per batch (goal ≥ 20,000)",
        "pg_to_live_p50_ms" => "ms from an SQL INSERT's return to the live query's delivery, median (goal ≤ 10)",
        "pg_to_live_p99_ms" => "the same, 99th percentile (goal ≤ 50)",
        "latency_samples" => "SQL inserts timed",
        _ => "",
    }
}
