//! What the relay's test files share: the fixture schema, a database connection.
#![allow(dead_code)]

use std::path::PathBuf;

use keel_relay::sync_schema::SyncSchema;
use tokio_postgres::{Client, NoTls};

/// The fixture `.fbs`.
pub fn blog_fbs() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/blog.fbs")
}

/// The fixture's synced collections.
pub fn blog_schema() -> SyncSchema {
    SyncSchema::from_file(blog_fbs()).expect("the fixture schema maps")
}

/// A connection to `url`, its driver spawned on the current runtime.
pub async fn connect(url: &str) -> Client {
    let (client, connection) = tokio_postgres::connect(url, NoTls)
        .await
        .expect("connects to the test database");
    tokio::spawn(connection);
    client
}

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use futures::{SinkExt, StreamExt};
use jsonwebtoken::{encode, Algorithm, EncodingKey, Header};
use keel_relay::config::Config;
use keel_relay::ddl;
use keel_relay::server::{self, RunningRelay};
use keel_relay::test_postgres::TestPostgres;
use serde_json::{json, Value};
use tokio::net::TcpStream;
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::{MaybeTlsStream, WebSocketStream};

/// The HS256 secret of the test relays.
pub const SECRET: &str = "a test secret, long enough for HS256 (32+ bytes)";

/// A database with the fixture's tables and a relay serving it.
pub struct Fixture {
    /// The relay.
    pub relay: RunningRelay,
    /// A connection to the database, for plain SQL.
    pub sql: Client,
    /// The relay's config.
    pub config: Config,
    // Dropped last: the server outlives the relay and the connection.
    pub pg: TestPostgres,
}

fn fixture_path(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures")
        .join(name)
}

/// The config text of a test relay (posts scoped to their owner, comments whole).
pub fn config_text(database_url: &str, relay_id: &str) -> String {
    format!(
        r#"
listen = "127.0.0.1:0"
database_url = "{database_url}"
schema = "{schema}"
relay_id = "{relay_id}"
max_frame_bytes = 65536
max_batch_ops = 100

[auth]
hs256_secrets = ["{SECRET}"]
jwks_file = "{jwks}"

[[scope]]
collection = "blog.Post"
filter = "owner == token.sub"

[[scope]]
collection = "blog.Comment"
filter = ""
"#,
        schema = blog_fbs().display(),
        jwks = fixture_path("jwks.json").display(),
    )
}

/// Starts a relay named `relay_id` on the database at `url`.
pub async fn start_relay(url: &str, relay_id: &str) -> (RunningRelay, Config) {
    let text = config_text(url, relay_id);
    let config = Config::parse(&text, std::path::Path::new("relay.toml")).unwrap();
    let relay = server::start(config.clone())
        .await
        .expect("the relay starts");
    (relay, config)
}

/// Starts PostgreSQL, creates the fixture's tables and starts a relay; `None` when
/// the machine has no PostgreSQL (the harness printed that it skipped).
pub async fn fixture() -> Option<Fixture> {
    let pg = TestPostgres::start().expect("PostgreSQL starts")?;
    let sql = connect(pg.url()).await;
    sql.batch_execute(&ddl::ddl(&blog_schema())).await.unwrap();
    let (relay, config) = start_relay(pg.url(), "test").await;
    Some(Fixture {
        relay,
        sql,
        config,
        pg,
    })
}

fn now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_secs()
}

/// An HS256 token for `sub`, expiring `valid_for` seconds from now (negative: past).
pub fn hs256(sub: &str, valid_for: i64) -> String {
    let claims = json!({"sub": sub, "exp": (now() as i64 + valid_for)});
    encode(
        &Header::new(Algorithm::HS256),
        &claims,
        &EncodingKey::from_secret(SECRET.as_bytes()),
    )
    .unwrap()
}

/// A token signed with one of the JWKS fixture's private keys.
pub fn signed(algorithm: Algorithm, sub: &str, valid_for: i64) -> String {
    let claims = json!({"sub": sub, "exp": (now() as i64 + valid_for)});
    let (pem, kid) = match algorithm {
        Algorithm::RS256 => ("rsa_private.pem", "rsa-1"),
        Algorithm::EdDSA => ("ed25519_private.pem", "ed-1"),
        other => panic!("no fixture key for {other:?}"),
    };
    let pem = std::fs::read(fixture_path(pem)).unwrap();
    let key = match algorithm {
        Algorithm::RS256 => EncodingKey::from_rsa_pem(&pem).unwrap(),
        _ => EncodingKey::from_ed_pem(&pem).unwrap(),
    };
    let mut header = Header::new(algorithm);
    header.kid = Some(kid.to_owned());
    encode(&header, &claims, &key).unwrap()
}

/// A WebSocket client speaking the relay's protocol.
pub struct WsClient {
    socket: WebSocketStream<MaybeTlsStream<TcpStream>>,
}

/// How long a test waits for one frame before failing.
pub const FRAME_WAIT: Duration = Duration::from_secs(20);

impl WsClient {
    /// Connects to the relay's `/sync`.
    pub async fn connect(relay: &RunningRelay) -> WsClient {
        WsClient::connect_to(relay.addr).await
    }

    /// Connects to `/sync` at an address.
    pub async fn connect_to(addr: std::net::SocketAddr) -> WsClient {
        let url = format!("ws://{addr}/sync");
        let (socket, _) = tokio_tungstenite::connect_async(url).await.unwrap();
        WsClient { socket }
    }

    /// Sends a JSON frame.
    pub async fn send(&mut self, frame: Value) {
        self.send_text(frame.to_string()).await;
    }

    /// Sends raw text.
    pub async fn send_text(&mut self, text: String) {
        self.socket.send(Message::Text(text.into())).await.unwrap();
    }

    /// Sends a binary frame.
    pub async fn send_binary(&mut self, bytes: Vec<u8>) {
        self.socket
            .send(Message::Binary(bytes.into()))
            .await
            .unwrap();
    }

    /// The next frame other than `checkpoint` and `snapshot_start`.
    pub async fn recv(&mut self) -> Value {
        loop {
            let frame = self.recv_any().await;
            if frame["type"] != "checkpoint" && frame["type"] != "snapshot_start" {
                return frame;
            }
        }
    }

    /// Every frame that arrives within `window`.
    pub async fn frames_within(&mut self, window: Duration) -> Vec<Value> {
        let deadline = tokio::time::Instant::now() + window;
        let mut frames = Vec::new();
        while let Ok(message) = tokio::time::timeout_at(deadline, self.socket.next()).await {
            match message
                .expect("the socket is open")
                .expect("the frame reads")
            {
                Message::Text(text) => frames.push(serde_json::from_str(text.as_str()).unwrap()),
                Message::Close(c) => panic!("the relay closed the socket: {c:?}"),
                _ => continue,
            }
        }
        frames
    }

    /// The next frame, whatever it is.
    pub async fn recv_any(&mut self) -> Value {
        loop {
            let message = tokio::time::timeout(FRAME_WAIT, self.socket.next())
                .await
                .expect("a frame arrives in time")
                .expect("the socket is open")
                .expect("the frame reads");
            match message {
                Message::Text(text) => return serde_json::from_str(text.as_str()).unwrap(),
                Message::Close(c) => panic!("the relay closed the socket: {c:?}"),
                _ => continue,
            }
        }
    }

    /// Sends `hello` and returns the answer.
    pub async fn hello(&mut self, token: &str, client_id: &str) -> Value {
        self.send(json!({"type": "hello", "token": token, "client_id": client_id}))
            .await;
        self.recv().await
    }

    /// Connects and says hello with an HS256 token for `sub`; panics unless welcomed.
    pub async fn signed_in(relay: &RunningRelay, sub: &str, client_id: &str) -> WsClient {
        let mut client = WsClient::connect(relay).await;
        let welcome = client.hello(&hs256(sub, 3600), client_id).await;
        assert_eq!(welcome["type"], "welcome", "{welcome}");
        client
    }

    /// Uploads ops and returns the answer.
    pub async fn upload(&mut self, ops: Value) -> Value {
        self.send(json!({"type": "upload", "ops": ops})).await;
        self.recv().await
    }
}

/// Post `id` as PostgreSQL holds it: owner, title, likes, pinned, version and
/// created version (`None`: no such row).
pub async fn post(f: &Fixture, id: &str) -> Option<(String, Option<String>, i64, bool, i64, i64)> {
    f.sql
        .query_opt(
            "SELECT owner, title, likes, pinned, keel_version, keel_created FROM posts WHERE id = $1",
            &[&id],
        )
        .await
        .unwrap()
        .map(|r| (r.get(0), r.get(1), r.get(2), r.get(3), r.get(4), r.get(5)))
}
