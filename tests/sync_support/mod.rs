//! What the sync tests share: a throwaway PostgreSQL with the relay fixture's
//! tables, a real relay serving it in this process, keel databases on the same
//! schema, tokens, and waiting for a condition.
#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use jsonwebtoken::{encode, Algorithm, EncodingKey, Header};
use keel_query::{Database, Schema, StoreOptions, SyncHandle, SyncOptions};
use keel_relay::config::Config;
use keel_relay::ddl;
use keel_relay::server::{self, RunningRelay};
use keel_relay::sync_schema::SyncSchema;
use keel_relay::test_postgres::TestPostgres;
use serde_json::json;

pub mod proxy;

/// The HS256 secret of the test relay.
pub const SECRET: &str = "a test secret, long enough for HS256 (32+ bytes)";

/// How long a test waits for something that takes milliseconds when it works.
pub const WAIT: Duration = Duration::from_secs(30);

/// The fixture schema the relay tests sync (posts scoped to their owner, comments whole).
pub fn fixture_fbs() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("crates/keel-relay/tests/fixtures/blog.fbs")
}

/// PostgreSQL, a connection to it and a relay.
pub struct Net {
    /// Runs the relay and the SQL connection.
    pub rt: tokio::runtime::Runtime,
    /// The relay (`None` while stopped).
    pub relay: Option<RunningRelay>,
    /// Plain SQL.
    pub sql: tokio_postgres::Client,
    /// The relay's config.
    pub config: Config,
    // Dropped last.
    pub pg: TestPostgres,
}

/// The relay config: `max_batch_ops` operations per batch at most, tokens valid
/// `leeway` seconds past their expiry.
pub fn config_text(database_url: &str, max_batch_ops: usize, leeway: u64) -> String {
    format!(
        r#"
listen = "127.0.0.1:0"
database_url = "{database_url}"
schema = "{schema}"
relay_id = "client_tests"
max_frame_bytes = 4194304
max_batch_ops = {max_batch_ops}

[auth]
hs256_secrets = ["{SECRET}"]
leeway_seconds = {leeway}

[[scope]]
collection = "blog.Post"
filter = "owner == token.sub"

[[scope]]
collection = "blog.Comment"
filter = ""
"#,
        schema = fixture_fbs().display(),
    )
}

/// Starts it all; `None` (after the plain skipped line) without PostgreSQL.
pub fn start() -> Option<Net> {
    start_with(100, 30)
}

/// [`start`] with a relay taking `max_batch_ops` per batch and `leeway` seconds.
pub fn start_with(max_batch_ops: usize, leeway: u64) -> Option<Net> {
    let pg = TestPostgres::start().expect("PostgreSQL starts")?;
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let url = pg.url().to_owned();
    let (sql, config, relay) = rt.block_on(async {
        let (sql, connection) = tokio_postgres::connect(&url, tokio_postgres::NoTls)
            .await
            .expect("connects");
        tokio::spawn(connection);
        let schema = SyncSchema::from_file(fixture_fbs()).unwrap();
        sql.batch_execute(&ddl::ddl(&schema)).await.unwrap();
        let config = Config::parse(
            &config_text(&url, max_batch_ops, leeway),
            Path::new("relay.toml"),
        )
        .unwrap();
        let relay = server::start(config.clone())
            .await
            .expect("the relay starts");
        (sql, config, relay)
    });
    Some(Net {
        rt,
        relay: Some(relay),
        sql,
        config,
        pg,
    })
}

impl Net {
    /// The relay's WebSocket URL.
    pub fn url(&self) -> String {
        format!(
            "ws://{}/sync",
            self.relay.as_ref().expect("the relay runs").addr
        )
    }

    /// Runs SQL statements.
    pub fn exec(&self, sql: &str) {
        self.rt.block_on(self.sql.batch_execute(sql)).unwrap();
    }

    /// The rows of a query, each as JSON (`to_jsonb`).
    pub fn rows(&self, sql: &str) -> Vec<serde_json::Value> {
        let rows = self
            .rt
            .block_on(
                self.sql
                    .query(&format!("SELECT to_jsonb(q) FROM ({sql}) q"), &[]),
            )
            .unwrap();
        rows.iter().map(|r| r.get(0)).collect()
    }

    /// One integer.
    pub fn int(&self, sql: &str) -> i64 {
        let row = self.rt.block_on(self.sql.query_one(sql, &[])).unwrap();
        row.get(0)
    }

    /// Stops the relay (clients lose their connection).
    pub fn stop_relay(&mut self) {
        if let Some(relay) = self.relay.take() {
            self.rt.block_on(relay.stop());
        }
    }

    /// Starts the relay again (on a new port: clients must be given the new URL).
    pub fn start_relay(&mut self) {
        let config = self.config.clone();
        self.relay = Some(
            self.rt
                .block_on(server::start(config))
                .expect("the relay starts"),
        );
    }
}

/// A token for `sub`, valid for an hour.
pub fn token(sub: &str) -> String {
    token_for(sub, 3600)
}

/// A token for `sub`, valid for `seconds`.
pub fn token_for(sub: &str, seconds: u64) -> String {
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_secs();
    encode(
        &Header::new(Algorithm::HS256),
        &json!({"sub": sub, "exp": now + seconds}),
        &EncodingKey::from_secret(SECRET.as_bytes()),
    )
    .unwrap()
}

/// A keel database on the fixture schema at `path`.
pub fn open(path: &Path) -> Database {
    let schema = Schema::from_file(fixture_fbs()).unwrap();
    Database::open(path, schema, StoreOptions::default()).unwrap()
}

/// Sync options for user `sub` at `url`, fast retries.
pub fn options(url: &str, sub: &str) -> SyncOptions {
    let token = token(sub);
    let mut o = SyncOptions::new(url, Arc::new(move || Some(token.clone())));
    o.min_backoff = Duration::from_millis(20);
    o.max_backoff = Duration::from_millis(500);
    o
}

/// Starts syncing `db` as `sub`.
pub fn sync(db: &Database, url: &str, sub: &str) -> SyncHandle {
    db.sync(options(url, sub)).unwrap()
}

/// Waits until `f` holds, for at most [`WAIT`]; whether it did.
pub fn eventually(mut f: impl FnMut() -> bool) -> bool {
    let deadline = Instant::now() + WAIT;
    while Instant::now() < deadline {
        if f() {
            return true;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    f()
}

/// The bytes of a `blog.Post` or `blog.Comment` given as JSON.
pub fn object(db: &Database, collection: &str, v: serde_json::Value) -> Vec<u8> {
    db.schema()
        .reader(collection)
        .unwrap()
        .encode_json(&v)
        .unwrap()
}

/// Inserts the `collection` object given as JSON, in a write of its own.
pub fn insert(db: &Database, collection: &str, v: serde_json::Value) {
    let bytes = object(db, collection, v);
    let collection = collection.to_owned();
    db.write_blocking(move |t| t.insert_bytes(&collection, bytes).map(|_| ()))
        .unwrap();
}

/// The local object `key` of `collection` as JSON, if stored.
pub fn local(db: &Database, collection: &str, key: &str) -> Option<serde_json::Value> {
    let reader = db.schema().reader(collection).unwrap();
    db.query(collection)
        .all()
        .unwrap()
        .into_iter()
        .map(|o| reader.read(&o.bytes).unwrap().to_json().unwrap())
        .find(|j| j["id"] == key)
}

/// Adds `by` to the local post `id`'s likes.
pub fn like(db: &Database, id: &str, by: i64) {
    let id = id.to_owned();
    db.write_blocking(move |t| {
        let stored = t
            .get_bytes("blog.Post", &[id.clone().into()])?
            .expect("the post exists");
        let reader = t_reader();
        let likes = reader.read(&stored.bytes).unwrap().to_json().unwrap()["likes"]
            .as_i64()
            .unwrap_or(0);
        t.change_values(
            "blog.Post",
            &[id.into()],
            &[("likes".into(), (likes + by).into())],
        )
        .map(|_| ())
    })
    .unwrap();
}

fn t_reader() -> keel_schema::DynamicTable<'static> {
    static SCHEMA: std::sync::OnceLock<Schema> = std::sync::OnceLock::new();
    SCHEMA
        .get_or_init(|| Schema::from_file(fixture_fbs()).unwrap())
        .reader("blog.Post")
        .unwrap()
}
