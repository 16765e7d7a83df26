//! Convergence under faults: five client processes and two relay processes on one
//! PostgreSQL, a fault-injecting proxy in front of each relay, everything killed
//! with SIGKILL along the way — and at the end every client holds exactly the
//! PostgreSQL rows of its scopes, and every counter increment a client committed
//! is counted on the server exactly once.
//!
//! Every process is this test binary run again in a child mode
//! (`sync_converge_child`): a relay (`keel_relay::server` on a config file, the
//! address it listens on printed on standard output), or a client (a keel file
//! syncing through a proxy while it writes at random from a seed). The parent
//! runs rounds, each drawn from the seed:
//!
//! * **faults** on each proxy (`tests/sync_support/proxy.rs`): delays, random
//!   cuts, bad frames toward the clients, and offline or stalled periods;
//! * **relays** killed with SIGKILL and restarted (same relay id: it resumes its
//!   slot), or left down for the round;
//! * **clients** killed with SIGKILL, either at an exact step of upload or
//!   download — the client's test hook `KEEL_SYNC_PAUSE_AT` (keel-query feature
//!   `sim`) stops it there: a batch sent and not answered, an ack read and not
//!   recorded or just recorded, a snapshot or `changes` frame read and not
//!   applied or just applied, a checkpoint — or at a random moment, then
//!   restarted on the same file with the other proxy now and then.
//!
//! The writes: counter increments on posts that are never deleted (each in one
//! transaction with a local, unsynced `blog.Note` naming the increment, so what a
//! client committed survives its kill exactly), and inserts, title edits,
//! deletes and re-inserts of other posts and of shared comments. Two clients
//! share each of two users (so their offline edits race) and a fifth is alone.
//!
//! At the end the faults stop, both relays run, and each file syncs once more in
//! this process until its outbox is empty; then each client's posts and comments
//! must equal PostgreSQL's rows of its scopes, and each counter the sum of the
//! increments its users' clients committed. A seed that fails prints the line
//! that replays it. `cargo xtask stress --sync` runs many seeds (release build);
//! this test runs `KEEL_SYNC_STRESS_SEEDS` seeds (1 by default) of
//! `KEEL_SYNC_STRESS_ROUNDS` rounds (2), or just `KEEL_SYNC_STRESS_SEED`: the
//! small variant, a few minutes on 2 cores, that CI runs.

mod sync_support;

use std::collections::{BTreeMap, HashMap};
use std::io::{BufRead, BufReader};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc::{self, Receiver};
use std::time::{Duration, Instant};

use keel_query::sync::PAUSE_POINTS;
use keel_query::{Database, Value};
use keel_relay::config::Config;
use keel_relay::ddl;
use keel_relay::sync_schema::SyncSchema;
use keel_relay::test_postgres::TestPostgres;
use serde_json::{json, Value as Json};
use sync_support::proxy::{Faults, Proxy, Rng};
use sync_support::{fixture_fbs, open, options, SECRET, WAIT};

const ROLE: &str = "KEEL_CONVERGE_ROLE";
const CONFIG: &str = "KEEL_CONVERGE_CONFIG";
const DB: &str = "KEEL_CONVERGE_DB";
const URL: &str = "KEEL_CONVERGE_URL";
const USER: &str = "KEEL_CONVERGE_USER";
const SEED: &str = "KEEL_CONVERGE_SEED";
const NAME: &str = "KEEL_CONVERGE_NAME";

/// The users of the five clients: two share `ann`, two `bob`.
const USERS: [&str; 5] = ["ann", "ann", "bob", "bob", "cy"];
/// Counter posts per user (never deleted), churned posts per user, shared comments.
const COUNTERS: u64 = 3;
const CHURNED: u64 = 4;
const COMMENTS: u64 = 8;

/// The child's body: a relay or a client, when the parent started it.
#[test]
fn sync_converge_child() {
    if std::env::var(ROLE).is_ok() {
        // A child whose parent died (a failed or interrupted run) ends too.
        std::thread::spawn(|| loop {
            // SAFETY: getppid has no preconditions and cannot fail.
            if unsafe { libc::getppid() } == 1 {
                std::process::exit(0);
            }
            std::thread::sleep(Duration::from_millis(200));
        });
    }
    match std::env::var(ROLE).as_deref() {
        Ok("relay") => relay_child(),
        Ok("client") => client_child(),
        _ => {}
    }
}

fn relay_child() {
    tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        .with_max_level(tracing::Level::INFO)
        .init();
    let config = Config::from_file(Path::new(&std::env::var(CONFIG).unwrap())).unwrap();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let mut relay = keel_relay::server::start(config)
            .await
            .expect("the relay starts");
        println!("relay listening on {}", relay.addr);
        relay.wait().await;
    });
}

/// Writes at random until killed.
fn client_child() {
    let path = PathBuf::from(std::env::var(DB).unwrap());
    let url = std::env::var(URL).unwrap();
    let user = std::env::var(USER).unwrap();
    let name = std::env::var(NAME).unwrap();
    let mut rng = Rng::new(std::env::var(SEED).unwrap().parse().unwrap());
    let db = open(&path);
    let mut o = options(&url, &user);
    o.batch_ops = 1 + rng.below(40) as usize;
    let _handle = db.sync(o).unwrap();
    // Increments of this run are named after the run's seed: unique per run.
    let run = rng.next_u64();
    for n in 0.. {
        write_at_random(&db, &mut rng, &user, &format!("{name}/{run:x}/{n}"));
        std::thread::sleep(Duration::from_micros(500 + rng.below(3000)));
    }
}

fn encode(db: &Database, collection: &str, v: Json) -> Vec<u8> {
    db.schema()
        .reader(collection)
        .unwrap()
        .encode_json(&v)
        .unwrap()
}

fn read_json(db: &Database, collection: &str, bytes: &[u8]) -> Json {
    db.schema()
        .reader(collection)
        .unwrap()
        .read(bytes)
        .unwrap()
        .to_json()
        .unwrap()
}

/// One random write: an increment (with its note), a churned post, or a comment.
fn write_at_random(db: &Database, rng: &mut Rng, user: &str, tag: &str) {
    let pick = rng.below(100);
    let db2 = db.clone();
    if pick < 45 {
        let id = format!("{user}-c{}", rng.below(COUNTERS));
        let by = 1 + rng.below(5) as i64;
        let note = encode(
            db,
            "blog.Note",
            json!({"id": format!("inc/{tag}/{id}/{by}")}),
        );
        let user = user.to_owned();
        db.write_blocking(move |t| {
            let key = [Value::from(id.clone())];
            let likes = match t.get_bytes("blog.Post", &key)? {
                Some(s) => read_json(&db2, "blog.Post", &s.bytes)["likes"]
                    .as_i64()
                    .unwrap_or(0),
                None => {
                    let post = encode(
                        &db2,
                        "blog.Post",
                        json!({"id": id, "owner": user, "title": "counter", "likes": 0}),
                    );
                    t.upsert_bytes("blog.Post", post)?;
                    0
                }
            };
            t.change_values("blog.Post", &key, &[("likes".into(), (likes + by).into())])?;
            t.upsert_bytes("blog.Note", note).map(|_| ())
        })
        .unwrap();
    } else if pick < 75 {
        let id = format!("{user}-r{}", rng.below(CHURNED));
        let what = rng.below(3);
        let title = format!("t {tag}");
        let user = user.to_owned();
        db.write_blocking(move |t| {
            let key = [Value::from(id.clone())];
            let exists = t.get_bytes("blog.Post", &key)?.is_some();
            match (exists, what) {
                (true, 0) => t.delete_key("blog.Post", &key).map(|_| ()),
                (true, _) => t
                    .change_values("blog.Post", &key, &[("title".into(), title.into())])
                    .map(|_| ()),
                (false, _) => {
                    let post = encode(
                        &db2,
                        "blog.Post",
                        json!({"id": id, "owner": user, "title": title}),
                    );
                    t.upsert_bytes("blog.Post", post).map(|_| ())
                }
            }
        })
        .unwrap();
    } else {
        let id = 1 + rng.below(COMMENTS) as i64;
        let what = rng.below(3);
        let text = format!("c {tag}");
        let user = user.to_owned();
        db.write_blocking(move |t| {
            let key = [Value::from(id)];
            let exists = t.get_bytes("blog.Comment", &key)?.is_some();
            match (exists, what) {
                (true, 0) => t.delete_key("blog.Comment", &key).map(|_| ()),
                (true, _) => t
                    .change_values("blog.Comment", &key, &[("text".into(), text.into())])
                    .map(|_| ()),
                (false, _) => {
                    let c = encode(
                        &db2,
                        "blog.Comment",
                        json!({"id": id, "post": "p", "owner": user, "text": text}),
                    );
                    t.upsert_bytes("blog.Comment", c).map(|_| ())
                }
            }
        })
        .unwrap();
    }
}

/// A relay process and how to start it again.
struct Relay {
    config: PathBuf,
    child: Option<Child>,
}

impl Relay {
    fn start(&mut self) -> SocketAddr {
        let mut child = Command::new(std::env::current_exe().unwrap())
            .args([
                "--exact",
                "sync_converge_child",
                "--nocapture",
                "--test-threads=1",
            ])
            .env(ROLE, "relay")
            .env(CONFIG, &self.config)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let stdout = child.stdout.take().unwrap();
        let stderr = child.stderr.take().unwrap();
        // Its log lines, for a failing seed: warnings and errors only.
        std::thread::spawn(move || {
            for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                if line.contains("WARN") || line.contains("ERROR") || line.contains("panicked") {
                    eprintln!("relay: {line}");
                }
            }
        });
        let (tx, rx) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                // The harness's `test … ... ` may precede it on the line.
                if let Some((_, addr)) = line.split_once("relay listening on ") {
                    let _ = tx.send(addr.parse::<SocketAddr>().unwrap());
                }
            }
        });
        let addr = rx.recv_timeout(WAIT).expect("the relay process starts");
        self.child = Some(child);
        addr
    }

    fn kill(&mut self) {
        if let Some(mut c) = self.child.take() {
            c.kill().unwrap(); // SIGKILL
            c.wait().unwrap();
        }
    }
}

impl Drop for Relay {
    fn drop(&mut self) {
        self.kill();
    }
}

/// A client process (when running) on its file.
struct Client {
    user: &'static str,
    path: PathBuf,
    child: Option<Child>,
    /// `keel-sync paused at …` lines of the running child.
    paused: Option<Receiver<String>>,
    pause_at: Option<&'static str>,
}

impl Client {
    fn start(&mut self, name: usize, url: &str, seed: u64, pause_at: Option<&'static str>) {
        let mut cmd = Command::new(std::env::current_exe().unwrap());
        cmd.args([
            "--exact",
            "sync_converge_child",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(ROLE, "client")
        .env(DB, &self.path)
        .env(URL, url)
        .env(USER, self.user)
        .env(SEED, seed.to_string())
        .env(NAME, format!("client{name}"))
        .stdout(Stdio::null())
        .stderr(Stdio::piped());
        match pause_at {
            Some(step) => cmd.env("KEEL_SYNC_PAUSE_AT", step),
            None => cmd.env_remove("KEEL_SYNC_PAUSE_AT"),
        };
        let mut child = cmd.spawn().unwrap();
        let stderr = child.stderr.take().unwrap();
        let (tx, rx) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                if line.contains("keel-sync paused at") {
                    let _ = tx.send(line);
                } else if !line.starts_with("running ") && !line.trim().is_empty() {
                    eprintln!("client{name}: {line}");
                }
            }
        });
        self.child = Some(child);
        self.paused = Some(rx);
        self.pause_at = pause_at;
    }

    /// Whether the child stopped at its pause point (within `wait`).
    fn reached_pause(&self, wait: Duration) -> bool {
        self.paused
            .as_ref()
            .is_some_and(|rx| rx.recv_timeout(wait).is_ok())
    }

    fn kill(&mut self) {
        if let Some(mut c) = self.child.take() {
            c.kill().unwrap(); // SIGKILL
            c.wait().unwrap();
        }
        self.paused = None;
        self.pause_at = None;
    }

    fn running(&mut self) -> bool {
        match &mut self.child {
            Some(c) => {
                if let Some(status) = c.try_wait().unwrap() {
                    panic!("a client process ended by itself: {status}");
                }
                true
            }
            None => false,
        }
    }
}

impl Drop for Client {
    fn drop(&mut self) {
        self.kill();
    }
}

fn relay_config(dir: &Path, url: &str, id: &str) -> PathBuf {
    let text = format!(
        r#"
listen = "127.0.0.1:0"
database_url = "{url}"
schema = "{schema}"
relay_id = "{id}"
max_frame_bytes = 4194304
max_batch_ops = 100
log_format = "text"

[auth]
hs256_secrets = ["{SECRET}"]
leeway_seconds = 30

[[scope]]
collection = "blog.Post"
filter = "owner == token.sub"

[[scope]]
collection = "blog.Comment"
filter = ""
"#,
        schema = fixture_fbs().display(),
    );
    let path = dir.join(format!("{id}.toml"));
    std::fs::write(&path, text).unwrap();
    path
}

/// Faults for one round of one proxy.
fn draw_faults(rng: &mut Rng) -> Faults {
    let mut f = Faults {
        delay_max: Duration::from_micros(rng.below(20_000)),
        cut_per_mille: rng.below(25) as u32,
        corrupt_per_mille: rng.below(8) as u32,
        ..Faults::default()
    };
    match rng.below(10) {
        0 => f.offline = true,
        1 => f.stall = true,
        2 => f = Faults::default(),
        _ => {}
    }
    f
}

/// What one seed did, for the summary line.
#[derive(Default, Debug)]
struct Tally {
    client_kills: u64,
    paused_kills: u64,
    relay_kills: u64,
    injected: u64,
    cuts: u64,
    increments: u64,
}

/// One seed's run; `None` without PostgreSQL.
fn converge(seed: u64, rounds: u64) -> Option<Tally> {
    let pg = TestPostgres::start().expect("PostgreSQL starts")?;
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .unwrap();
    let url = pg.url().to_owned();
    let sql = rt.block_on(async {
        let (sql, connection) = tokio_postgres::connect(&url, tokio_postgres::NoTls)
            .await
            .expect("connects");
        tokio::spawn(connection);
        let schema = SyncSchema::from_file(fixture_fbs()).unwrap();
        sql.batch_execute(&ddl::ddl(&schema)).await.unwrap();
        sql
    });
    let rows = |q: &str| -> Vec<Json> {
        rt.block_on(sql.query(&format!("SELECT to_jsonb(q) FROM ({q}) q"), &[]))
            .unwrap()
            .iter()
            .map(|r| r.get(0))
            .collect()
    };
    let dir = tempfile::tempdir().unwrap();
    let mut rng = Rng::new(seed);
    let mut relays: Vec<Relay> = ["converge_a", "converge_b"]
        .iter()
        .map(|id| Relay {
            config: relay_config(dir.path(), &url, id),
            child: None,
        })
        .collect();
    let proxies: Vec<Proxy> = relays
        .iter_mut()
        .map(|r| {
            let addr = r.start();
            Proxy::start(Some(addr), rng.next_u64())
        })
        .collect();
    let mut clients: Vec<Client> = USERS
        .iter()
        .enumerate()
        .map(|(i, user)| Client {
            user,
            path: dir.path().join(format!("client{i}.db")),
            child: None,
            paused: None,
            pause_at: None,
        })
        .collect();
    let mut tally = Tally::default();
    for _round in 0..rounds {
        // Faults of this round.
        for p in &proxies {
            p.set_faults(draw_faults(&mut rng));
        }
        // Relays: killed and restarted, or left down for the round.
        let mut down = Vec::new();
        for (i, r) in relays.iter_mut().enumerate() {
            match rng.below(8) {
                0 => {
                    r.kill();
                    tally.relay_kills += 1;
                    proxies[i].set_upstream(Some(r.start()));
                }
                1 => {
                    r.kill();
                    tally.relay_kills += 1;
                    proxies[i].set_upstream(None);
                    down.push(i);
                }
                _ => {}
            }
        }
        // Clients: each not running starts, some with a pause point.
        for (i, c) in clients.iter_mut().enumerate() {
            if !c.running() {
                let proxy = &proxies[rng.below(2) as usize];
                let pause = (rng.below(10) < 6)
                    .then(|| PAUSE_POINTS[rng.below(PAUSE_POINTS.len() as u64) as usize]);
                c.start(i, &proxy.url(), rng.next_u64(), pause);
            }
        }
        let length = Duration::from_millis(1500 + rng.below(2500));
        let end = Instant::now() + length;
        let kill_at: Vec<Option<Duration>> = clients
            .iter()
            .map(|_| {
                (rng.below(3) == 0)
                    .then(|| Duration::from_millis(rng.below(length.as_millis() as u64)))
            })
            .collect();
        let start = Instant::now();
        while Instant::now() < end {
            for (c, at) in clients.iter_mut().zip(&kill_at) {
                if c.child.is_none() {
                    continue;
                }
                if c.pause_at.is_some() && c.reached_pause(Duration::ZERO) {
                    c.kill();
                    tally.client_kills += 1;
                    tally.paused_kills += 1;
                } else if at.is_some_and(|at| start.elapsed() >= at) {
                    c.kill();
                    tally.client_kills += 1;
                }
            }
            std::thread::sleep(Duration::from_millis(5));
        }
        for i in down {
            proxies[i].set_upstream(Some(relays[i].start()));
        }
        if std::env::var("KEEL_SYNC_STRESS_VERBOSE").is_ok() {
            for (i, p) in proxies.iter().enumerate() {
                eprintln!(
                    "round {_round} proxy {i}: {:?}, connections {}, cuts {}, bad frames {}",
                    p.faults(),
                    p.connections(),
                    p.cuts(),
                    p.injected()
                );
            }
        }
    }
    // The end: no faults, both relays up, every client process gone.
    for c in &mut clients {
        c.kill();
    }
    for p in &proxies {
        tally.injected += p.injected();
        tally.cuts += p.cuts();
        p.set_faults(Faults::default());
    }
    let handles: Vec<(Database, keel_query::SyncHandle)> = clients
        .iter()
        .enumerate()
        .map(|(i, c)| {
            let db = open(&c.path);
            let h = db.sync(options(&proxies[i % 2].url(), c.user)).unwrap();
            (db, h)
        })
        .collect();
    for (i, (_, h)) in handles.iter().enumerate() {
        assert!(
            h.wait_uploaded_for(WAIT * 4).unwrap(),
            "seed {seed}: client{i} uploads everything: {:?}",
            h.current_status()
        );
    }
    // Uploads are done: PostgreSQL holds the final rows.
    let posts = |user: &str| {
        normalize(rows(&format!(
            "SELECT id, owner, title, likes FROM posts WHERE owner = '{user}'"
        )))
    };
    let comments = normalize(rows("SELECT id, post, owner, text FROM comment"));
    for (i, ((db, h), c)) in handles.iter().zip(&clients).enumerate() {
        let want_posts = posts(c.user);
        let deadline = Instant::now() + WAIT * 2;
        let mut converged = false;
        while Instant::now() < deadline {
            if local_rows(db, "blog.Post", &["id", "owner", "title", "likes"]) == want_posts
                && local_rows(db, "blog.Comment", &["id", "post", "owner", "text"]) == comments
            {
                converged = true;
                break;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        assert!(
            converged,
            "seed {seed}: client{i} ({}) equals PostgreSQL's rows of its scopes\nlocal posts: {:?}\nserver posts: {:?}\nlocal comments: {:?}\nserver comments: {:?}\nstatus: {:?}",
            c.user,
            local_rows(db, "blog.Post", &["id", "owner", "title", "likes"]),
            want_posts,
            local_rows(db, "blog.Comment", &["id", "post", "owner", "text"]),
            comments,
            h.current_status()
        );
    }
    // Exactly once: each counter is the sum of the increments committed by the
    // clients of its user, read from their notes.
    let mut committed: HashMap<String, i64> = HashMap::new();
    for (db, _) in &handles {
        for note in db.query("blog.Note").all().unwrap() {
            let id = read_json(db, "blog.Note", &note.bytes)["id"]
                .as_str()
                .unwrap()
                .to_owned();
            let parts: Vec<&str> = id.split('/').collect();
            // inc / client / run / n / post / by
            let (post, by) = (parts[parts.len() - 2], parts[parts.len() - 1]);
            *committed.entry(post.to_owned()).or_default() += by.parse::<i64>().unwrap();
            tally.increments += 1;
        }
    }
    let server: HashMap<String, i64> = rows("SELECT id, likes FROM posts WHERE id LIKE '%-c%'")
        .into_iter()
        .map(|r| {
            (
                r["id"].as_str().unwrap().to_owned(),
                r["likes"].as_i64().unwrap(),
            )
        })
        .collect();
    assert_eq!(
        server, committed,
        "seed {seed}: every committed increment counted once on the server"
    );
    drop(handles);
    drop(proxies);
    drop(relays);
    Some(tally)
}

/// Rows as maps of their non-null fields, keyed by id (PostgreSQL's and keel's
/// JSON then read the same).
fn normalize(rows: Vec<Json>) -> BTreeMap<String, BTreeMap<String, Json>> {
    rows.into_iter()
        .map(|r| {
            let fields: BTreeMap<String, Json> = r
                .as_object()
                .unwrap()
                .iter()
                .filter(|(_, v)| !v.is_null())
                .map(|(k, v)| (k.clone(), v.clone()))
                .collect();
            (fields["id"].to_string(), fields)
        })
        .collect()
}

fn local_rows(
    db: &Database,
    collection: &str,
    fields: &[&str],
) -> BTreeMap<String, BTreeMap<String, Json>> {
    let rows = db
        .query(collection)
        .all()
        .unwrap()
        .into_iter()
        .map(|o| {
            let j = read_json(db, collection, &o.bytes);
            let mut m = serde_json::Map::new();
            for f in fields {
                let v = j.get(*f).cloned().unwrap_or(Json::Null);
                // An unset counter reads as its default.
                let v = if *f == "likes" && v.is_null() {
                    json!(0)
                } else {
                    v
                };
                m.insert((*f).to_owned(), v);
            }
            Json::Object(m)
        })
        .collect();
    normalize(rows)
}

fn env_number(name: &str) -> Option<u64> {
    std::env::var(name)
        .ok()
        .map(|v| v.parse().expect("a number"))
}

#[test]
fn clients_converge_under_faults_kills_and_restarts() {
    if std::env::var(ROLE).is_ok() {
        return;
    }
    let rounds = env_number("KEEL_SYNC_STRESS_ROUNDS").unwrap_or(2);
    let seeds: Vec<u64> = match env_number("KEEL_SYNC_STRESS_SEED") {
        Some(s) => vec![s],
        None => {
            let n = env_number("KEEL_SYNC_STRESS_SEEDS").unwrap_or(1);
            let base = env_number("KEEL_SYNC_STRESS_BASE").unwrap_or(0xC0FFEE);
            (0..n).map(|i| base + i).collect()
        }
    };
    let mut total = Tally::default();
    for seed in seeds {
        eprintln!(
            "seed {seed} (replay: cargo xtask stress --sync --seed {seed} --rounds {rounds})"
        );
        let Some(t) = converge(seed, rounds) else {
            return;
        };
        eprintln!("seed {seed}: {t:?}");
        total.client_kills += t.client_kills;
        total.paused_kills += t.paused_kills;
        total.relay_kills += t.relay_kills;
        total.injected += t.injected;
        total.cuts += t.cuts;
        total.increments += t.increments;
    }
    eprintln!(
        "client kills: {} ({} at a pause point), relay kills: {}, bad frames: {}, cuts: {}, increments: {}, diverged: 0",
        total.client_kills, total.paused_kills, total.relay_kills, total.injected, total.cuts, total.increments
    );
}
