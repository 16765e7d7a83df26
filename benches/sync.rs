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
//!
//! Parts 4–6 run against a relay of their own, in a child process (this bench
//! binary started again with `--relay-child`), so that its memory is its own;
//! PostgreSQL is a second throwaway one.
//!
//! 4. **Fan-out**: 1,000 (quick: 100) clients connected to the one relay, each
//!    a lightweight WebSocket client in this process speaking the protocol
//!    (`hello`, `subscribe`, then reading frames) — what is measured is the
//!    relay's fan-out, not keel's client. They share one scope (the posts of one
//!    user). 20 (quick: 5) times, this process inserts one post by SQL; each
//!    client's time is from the INSERT's return to its `changes` frame: the p50
//!    and p99 over every client and change. The relay's resident memory
//!    (`VmRSS`) is read before the clients connect and with them connected.
//! 5. **Client A's write → client B's delivery**: two keel clients of one user;
//!    B holds a live query on the posts; A inserts a post locally
//!    (`write_blocking`), 200 times (quick: 30), 10 ms apart. The time is from
//!    A's commit returning to B's delivery holding the post (A's upload, the
//!    relay's apply, PostgreSQL's commit, the slot read, the stream to B, B's
//!    apply): p50 and p99.
//! 6. **Initial sync**: 1,000,000 rows (quick: 50,000) of one user inserted by
//!    one `INSERT … SELECT generate_series`; then a fresh client (an empty file)
//!    calls `db.sync(…)`, timed until its snapshot is applied whole (the
//!    `SyncEvent::Snapshot` with `done`) and the file holds every row. Goal:
//!    1,000,000 rows in ≤ 10 s, reported as rows per second (≥ 100,000/s) so that
//!    the quick run is held to the same rate.

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
         max_frame_bytes = 4194304\nmax_batch_ops = 1000\n\
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

/// A relay in a child process: this binary run with `--relay-child <config>`.
struct ChildRelay {
    child: std::process::Child,
    ws: String,
}

impl ChildRelay {
    fn start(config: &Path) -> ChildRelay {
        use std::io::BufRead;
        let mut child = std::process::Command::new(std::env::current_exe().unwrap())
            .arg("--relay-child")
            .arg(config)
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        let mut line = String::new();
        std::io::BufReader::new(child.stdout.take().unwrap())
            .read_line(&mut line)
            .unwrap();
        let addr = line
            .trim()
            .strip_prefix("listening ")
            .expect("the child relay says where it listens")
            .to_owned();
        ChildRelay {
            child,
            ws: format!("ws://{addr}/sync"),
        }
    }

    /// Its resident memory, MB.
    fn rss_mb(&self) -> f64 {
        let status = std::fs::read_to_string(format!("/proc/{}/status", self.child.id()))
            .unwrap_or_default();
        status
            .lines()
            .find_map(|l| l.strip_prefix("VmRSS:"))
            .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<f64>().ok())
            .map_or(0.0, |kb| kb / 1024.0)
    }
}

impl Drop for ChildRelay {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The child's side: serve until stdin closes.
fn relay_child(config: &str) {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let text = std::fs::read_to_string(config).unwrap();
    let relay = rt
        .block_on(server::start(
            Config::parse(&text, Path::new(config)).unwrap(),
        ))
        .unwrap();
    println!("listening {}", relay.addr);
    let mut sink = String::new();
    let _ = std::io::Read::read_to_string(&mut std::io::stdin(), &mut sink);
    rt.block_on(relay.stop());
}

fn options_for(url: &str, sub: &str) -> SyncOptions {
    let t = token(sub);
    let mut o = SyncOptions::new(url, Arc::new(move || Some(t.clone())));
    o.scopes = vec!["blog.Post".into()];
    o
}

fn percentile(sorted: &[f64], p: f64) -> f64 {
    sorted[((sorted.len() as f64 * p).ceil() as usize).clamp(1, sorted.len()) - 1]
}

/// Waits for the handle's snapshot to be applied whole.
fn snapshot_done(events: &mpsc::Receiver<keel::SyncEvent>) {
    loop {
        match events.recv_timeout(Duration::from_secs(600)) {
            Ok(keel::SyncEvent::Snapshot(p)) if p.done => return,
            Ok(_) => {}
            Err(e) => panic!("the snapshot did not finish: {e}"),
        }
    }
}

/// Parts 4–6.
struct Down {
    fan_clients: usize,
    fan_p50: f64,
    fan_p99: f64,
    relay_idle_mb: f64,
    relay_clients_mb: f64,
    ab_p50: f64,
    ab_p99: f64,
    ab_samples: usize,
    initial_rows: usize,
    initial_s: f64,
}

fn downstream(dir: &Path, quick: bool) -> Option<Down> {
    let pg = TestPostgres::start().expect("PostgreSQL starts")?;
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let url = pg.url().to_owned();
    let sql = rt.block_on(async {
        let (sql, conn) = tokio_postgres::connect(&url, tokio_postgres::NoTls)
            .await
            .unwrap();
        tokio::spawn(conn);
        let s = SyncSchema::from_file(fixture()).unwrap();
        sql.batch_execute(&keel_relay::ddl::ddl(&s)).await.unwrap();
        sql
    });
    let config = dir.join("down-relay.toml");
    std::fs::write(
        &config,
        format!(
            "listen = \"127.0.0.1:0\"\ndatabase_url = \"{url}\"\nschema = \"{}\"\nrelay_id = \"down\"\n\
             max_frame_bytes = 4194304\nmax_batch_ops = 1000\nlog_format = \"text\"\n\
             [auth]\nhs256_secrets = [\"{SECRET}\"]\n\
             [[scope]]\ncollection = \"blog.Post\"\nfilter = \"owner == token.sub\"\n",
            fixture().display()
        ),
    )
    .unwrap();
    let relay = ChildRelay::start(&config);
    std::thread::sleep(Duration::from_millis(300));

    // 4. Fan-out to many connected clients.
    let (clients, changes) = if quick { (100, 5) } else { (1000, 20) };
    let relay_idle_mb = relay.rss_mb();
    let (fan, relay_clients_mb) = rt.block_on(fan_out(&relay, &sql, clients, changes));
    eprintln!(
        "fan-out: {clients} clients × {changes} changes: p50 {:.1} ms, p99 {:.1} ms; relay {relay_idle_mb:.1} MB idle, {relay_clients_mb:.1} MB with the clients",
        fan.0, fan.1
    );

    // 5. Client A's write → client B's delivery.
    let samples: usize = if quick { 30 } else { 200 };
    let a = Database::open(dir.join("ab-a.db"), schema(true), options()).unwrap();
    let b = Database::open(dir.join("ab-b.db"), schema(true), options()).unwrap();
    let ha = a.sync(options_for(&relay.ws, "bea")).unwrap();
    let hb = b.sync(options_for(&relay.ws, "bea")).unwrap();
    let (ea, eb) = (ha.events(), hb.events());
    snapshot_done(&ea);
    snapshot_done(&eb);
    let (tx, rx) = mpsc::channel::<(usize, Instant)>();
    let _sub = b
        .query("blog.Post")
        .subscribe(move |u| {
            let _ = tx.send((u.objects.len(), Instant::now()));
        })
        .unwrap();
    while rx.recv_timeout(Duration::from_millis(100)).is_ok() {}
    let mut lat = Vec::new();
    for i in 0..samples {
        let bytes = post(&a, &format!("ab{i}"), "bea");
        a.write_blocking(move |t| t.insert_bytes("blog.Post", bytes).map(|_| ()))
            .unwrap();
        let committed = Instant::now();
        loop {
            let (len, at) = rx
                .recv_timeout(Duration::from_secs(30))
                .expect("B gets A's post");
            if len > i {
                lat.push(at.saturating_duration_since(committed).as_secs_f64() * 1000.0);
                break;
            }
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    drop((ha, hb));
    lat.sort_by(f64::total_cmp);
    let (ab_p50, ab_p99) = (percentile(&lat, 0.5), percentile(&lat, 0.99));
    eprintln!("A → B: p50 {ab_p50:.2} ms, p99 {ab_p99:.2} ms over {samples}");

    // 6. Initial sync of many rows into a fresh client.
    let rows = support::number("--initial-rows").unwrap_or(if quick { 50_000 } else { 1_000_000 });
    rt.block_on(sql.batch_execute(&format!(
        "INSERT INTO posts (id, owner, title, likes, tags) \
         SELECT 'r' || lpad(i::text, 8, '0'), 'ivy', 'post number ' || i, i % 1000, ARRAY['a', 'b'] \
         FROM generate_series(1, {rows}) i"
    )))
    .unwrap();
    // On its own: several statements in one batch run as one transaction, and
    // VACUUM refuses to run inside one.
    rt.block_on(sql.batch_execute("VACUUM ANALYZE posts"))
        .unwrap();
    let fresh = Database::open(dir.join("initial.db"), schema(true), options()).unwrap();
    let start = Instant::now();
    let handle = fresh.sync(options_for(&relay.ws, "ivy")).unwrap();
    snapshot_done(&handle.events());
    let initial_s = start.elapsed().as_secs_f64();
    drop(handle);
    assert_eq!(
        fresh.query("blog.Post").count().unwrap(),
        rows as u64,
        "every row arrived"
    );
    eprintln!(
        "initial sync: {rows} rows in {initial_s:.2} s = {:.0} rows/s",
        rows as f64 / initial_s
    );
    Some(Down {
        fan_clients: clients,
        fan_p50: fan.0,
        fan_p99: fan.1,
        relay_idle_mb,
        relay_clients_mb,
        ab_p50,
        ab_p99,
        ab_samples: samples,
        initial_rows: rows,
        initial_s,
    })
}

/// `clients` protocol-speaking WebSocket clients on `relay`, `changes` SQL
/// inserts: ((p50, p99) ms from the INSERT's return to each client's frame,
/// the relay's RSS in MB with them connected).
async fn fan_out(
    relay: &ChildRelay,
    sql: &tokio_postgres::Client,
    clients: usize,
    changes: usize,
) -> ((f64, f64), f64) {
    use futures::{SinkExt, StreamExt};
    use tokio_tungstenite::tungstenite::Message;
    let token = token("fan");
    let (arrived, mut arrivals) = tokio::sync::mpsc::unbounded_channel::<Instant>();
    let mut tasks = Vec::new();
    for i in 0..clients {
        let (mut socket, _) = tokio_tungstenite::connect_async(relay.ws.as_str())
            .await
            .expect("a client connects");
        let hello =
            serde_json::json!({"type": "hello", "token": token, "client_id": format!("fan{i}")});
        socket.send(Message::text(hello.to_string())).await.unwrap();
        let subscribe = serde_json::json!({"type": "subscribe", "collections": ["blog.Post"]});
        socket
            .send(Message::text(subscribe.to_string()))
            .await
            .unwrap();
        loop {
            let Some(Ok(Message::Text(text))) = socket.next().await else {
                continue;
            };
            let frame: serde_json::Value = serde_json::from_str(text.as_str()).unwrap();
            if frame["type"] == "snapshot_done" {
                break;
            }
        }
        let arrived = arrived.clone();
        tasks.push(tokio::spawn(async move {
            while let Some(Ok(message)) = socket.next().await {
                if let Message::Text(text) = message {
                    // The frame's type is all a client here needs to read.
                    if text.as_str().starts_with("{\"type\":\"changes\"") {
                        let _ = arrived.send(Instant::now());
                    }
                }
            }
        }));
    }
    tokio::time::sleep(Duration::from_millis(500)).await;
    let rss = relay.rss_mb();
    let mut lat = Vec::new();
    for c in 0..changes {
        sql.batch_execute(&format!(
            "INSERT INTO posts (id, owner) VALUES ('fan{c}', 'fan')"
        ))
        .await
        .unwrap();
        let committed = Instant::now();
        for _ in 0..clients {
            let at = tokio::time::timeout(Duration::from_secs(60), arrivals.recv())
                .await
                .expect("every client gets the change")
                .unwrap();
            lat.push(at.saturating_duration_since(committed).as_secs_f64() * 1000.0);
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    for t in tasks {
        t.abort();
    }
    lat.sort_by(f64::total_cmp);
    ((percentile(&lat, 0.5), percentile(&lat, 0.99)), rss)
}

/// `sync --count synced|plain N`: N commits of the outbox scenario on one side
/// alone, for an instruction counter (see [`support::measured_region`]): what
/// the outbox adds to a commit, whatever the machine's load.
fn count_outbox(side: &str, n: usize) {
    let dir = tempfile::tempdir().unwrap();
    let synced = match side {
        "synced" => true,
        "plain" => false,
        other => panic!("usage: --count synced|plain N (not `{other}`)"),
    };
    let db = Database::open(dir.path().join("count.db"), schema(synced), options()).unwrap();
    let bytes = post(&db, "p0", "ann");
    db.write_blocking(move |t| t.insert_bytes("blog.Post", bytes).map(|_| ()))
        .unwrap();
    let mut next = 0;
    block(&db, 50, &mut next); // warm
    support::measured(|| {
        block(&db, n, &mut next);
    });
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    if let Some(i) = args.iter().position(|a| a == "--relay-child") {
        relay_child(&args[i + 1]);
        return;
    }
    if let Some(i) = args.iter().position(|a| a == "--count") {
        let n = args
            .get(i + 2)
            .and_then(|n| n.parse().ok())
            .unwrap_or(1_000);
        count_outbox(args.get(i + 1).map_or("", String::as_str), n);
        return;
    }
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
    if let Some(d) = downstream(dir.path(), quick) {
        let rate = d.initial_rows as f64 / d.initial_s;
        metrics.extend([
            ("initial_sync_rows", d.initial_rows as f64),
            ("initial_sync_s", d.initial_s),
            ("initial_sync_rows_per_s", rate.round()),
            ("a_to_b_p50_ms", d.ab_p50),
            ("a_to_b_p99_ms", d.ab_p99),
            ("a_to_b_samples", d.ab_samples as f64),
            ("fan_out_clients", d.fan_clients as f64),
            ("fan_out_p50_ms", d.fan_p50),
            ("fan_out_p99_ms", d.fan_p99),
            ("relay_rss_idle_mb", d.relay_idle_mb),
            ("relay_rss_clients_mb", d.relay_clients_mb),
        ]);
        summary.push_str(&format!(
            " Initial sync of {} rows into a fresh client {:.2} s ({rate:.0} rows/s); client A's write → client B's delivery p50 {:.1} ms, p99 {:.1} ms; one change fanned out to {} connected clients p50 {:.1} ms, p99 {:.1} ms, the relay at {:.0} MB with them ({:.0} MB before they connected).",
            d.initial_rows, d.initial_s, d.ab_p50, d.ab_p99, d.fan_clients, d.fan_p50, d.fan_p99,
            d.relay_clients_mb, d.relay_idle_mb
        ));
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
        target(
            "initial_sync_rows_per_s",
            "initial sync into a fresh client, rows/s",
            100_000.0,
            "higher",
            "/s",
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
        "initial_sync_rows" => "rows of the initial sync (one user's posts, inserted by generate_series)",
        "initial_sync_s" => "seconds from db.sync() on an empty file to the snapshot applied whole",
        "initial_sync_rows_per_s" => "those rows ÷ those seconds (goal ≥ 100,000: 1,000,000 rows in ≤ 10 s)",
        "a_to_b_p50_ms" => "ms from client A's local commit to client B's live query delivering it, median",
        "a_to_b_p99_ms" => "the same, 99th percentile",
        "a_to_b_samples" => "A's commits timed",
        "fan_out_clients" => "lightweight protocol clients connected to one relay, one shared scope",
        "fan_out_p50_ms" => "ms from an SQL INSERT's return to a client's changes frame, median over clients and changes",
        "fan_out_p99_ms" => "the same, 99th percentile",
        "relay_rss_idle_mb" => "the relay process's resident memory before the clients connect, MB",
        "relay_rss_clients_mb" => "the same with the fan-out clients connected, MB",
        _ => "",
    }
}
