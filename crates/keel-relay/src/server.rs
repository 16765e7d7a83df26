//! Starting a relay: check the database, start the replication stream, serve HTTP.
//!
//! [`start`] loads the schema, scopes and keys named by the [`Config`], installs the
//! relay's state tables ([`crate::state`]), refuses to run when the synced tables do
//! not match the schema (the report of [`crate::ddl::check`] says what differs),
//! prepares the publication and this relay's slot, and then serves:
//!
//! * `GET /health` — `200 {"status":"ok",…}` when PostgreSQL answers, `503` when not;
//! * `GET /sync` — the WebSocket endpoint ([`crate::session`]).
//!
//! The replication stream runs as one task per relay and restarts on a fresh
//! connection after an error (logged), so a PostgreSQL restart pauses the down
//! stream rather than ending the relay. A restart that finds the slot gone
//! (dropped, or invalidated by `max_slot_wal_keep_size`) makes it again and
//! tells every session, which sends its client `resync` and a fresh snapshot.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use axum::extract::ws::WebSocketUpgrade;
use axum::extract::State;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::serve::ListenerExt;
use axum::{Json, Router};
use tokio::sync::{broadcast, oneshot};
use tokio::task::JoinHandle;
use tracing::{error, info, warn};

use crate::auth::Verifier;
use crate::config::Config;
use crate::ddl;
use crate::error::Error;
use crate::pool::{connect, Pool};
use crate::replication;
use crate::scope::Scope;
use crate::session;
use crate::shared::Shared;
use crate::state;
use crate::sync_schema::SyncSchema;

/// How many transactions a slow subscriber may fall behind before it is re-snapshotted.
const FEED_CAPACITY: usize = 4096;

/// A running relay.
#[derive(Debug)]
pub struct RunningRelay {
    /// The address it listens on.
    pub addr: SocketAddr,
    shutdown: Option<oneshot::Sender<()>>,
    server: JoinHandle<()>,
    stream: JoinHandle<()>,
}

impl RunningRelay {
    /// Stops serving and streaming, and waits for the server to finish.
    pub async fn stop(mut self) {
        if let Some(shutdown) = self.shutdown.take() {
            let _ = shutdown.send(());
        }
        self.stream.abort();
        let _ = (&mut self.server).await;
    }

    /// Waits until the server ends (it ends when [`RunningRelay::stop`] is called
    /// elsewhere, or on a fatal error).
    pub async fn wait(&mut self) {
        let _ = (&mut self.server).await;
    }
}

/// Loads, checks and starts a relay.
pub async fn start(config: Config) -> Result<RunningRelay, Error> {
    let schema = SyncSchema::from_file(&config.schema)?;
    let scopes = config
        .scopes
        .iter()
        .map(|s| Scope::parse(&schema, &s.collection, &s.filter))
        .collect::<Result<Vec<_>, _>>()?;
    let verifier = Verifier::from_config(&config.auth)?;

    let mut admin = connect(&config.database_url).await?;
    state::install(&mut admin).await?;
    let differences = ddl::check(&admin, &schema).await?;
    if !differences.is_empty() {
        let report: Vec<String> = differences.iter().map(|d| format!("  {d}")).collect();
        return Err(Error::SchemaMismatch(report.join("\n")));
    }
    let slot = config.slot_name();
    replication::prepare(&admin, &schema, &slot).await?;
    state::register_relay(&admin, &config.relay_id, &slot).await?;
    let keep: String = admin
        .query_one("SHOW max_slot_wal_keep_size", &[])
        .await?
        .get(0);
    if keep == "-1" {
        warn!(
            slot,
            "max_slot_wal_keep_size is unlimited: a relay that stays down keeps WAL without bound"
        );
    }
    drop(admin);

    let (feed, _) = broadcast::channel(FEED_CAPACITY);
    let shared = Arc::new(Shared {
        pool: Pool::new(&config.database_url, config.pool_size),
        config,
        schema,
        scopes,
        verifier,
        feed,
    });
    let stream = tokio::spawn(run_stream(shared.clone(), slot));

    let listener = tokio::net::TcpListener::bind(&shared.config.listen)
        .await
        .map_err(Error::Serve)?;
    let addr = listener.local_addr().map_err(Error::Serve)?;
    // Frames are small and each one is news: without TCP_NODELAY a frame sent
    // while the last one is unacknowledged waits for that ack (Nagle), up to the
    // client's delayed-ack timer.
    let listener = listener.tap_io(|tcp| {
        if let Err(e) = tcp.set_nodelay(true) {
            warn!(error = %e, "could not set TCP_NODELAY on a client connection");
        }
    });
    let app = Router::new()
        .route("/health", get(health))
        .route("/sync", get(sync))
        .with_state(shared.clone());
    let (shutdown, stopped) = oneshot::channel::<()>();
    let server = tokio::spawn(async move {
        let served = axum::serve(listener, app)
            .with_graceful_shutdown(async {
                let _ = stopped.await;
            })
            .await;
        if let Err(e) = served {
            error!(error = %e, "the server failed");
        }
    });
    info!(%addr, relay_id = shared.config.relay_id, "relay listening");
    Ok(RunningRelay {
        addr,
        shutdown: Some(shutdown),
        server,
        stream,
    })
}

async fn run_stream(shared: Arc<Shared>, slot: String) {
    loop {
        let result = async {
            let client = connect(&shared.config.database_url).await?;
            if !replication::slot_usable(&client, &slot).await? {
                // Dropped, or invalidated past max_slot_wal_keep_size: what it
                // held is gone. Make it again, then every subscriber re-snapshots
                // from a point the new slot streams after.
                client
                    .execute(
                        "SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots \
                         WHERE slot_name = $1",
                        &[&slot],
                    )
                    .await?;
                replication::prepare(&client, &shared.schema, &slot).await?;
                warn!(
                    slot,
                    "the replication slot was lost and made again; clients re-snapshot"
                );
                let _ = shared.feed.send(replication::Feed::Lost);
            }
            replication::stream(
                &client,
                &shared.config.database_url,
                &shared.schema,
                &shared.config.relay_id,
                &slot,
                &shared.feed,
            )
            .await
        }
        .await;
        if let Err(e) = result {
            error!(error = %e, slot, "the replication stream stopped; restarting in 1 s");
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
}

async fn health(State(shared): State<Arc<Shared>>) -> Response {
    let probe = async {
        let guard = shared.pool.get().await?;
        let client = guard.as_ref().expect("the pool hands out live connections");
        client.query_one("SELECT 1", &[]).await?;
        Ok::<_, Error>(())
    };
    let status = match tokio::time::timeout(Duration::from_secs(5), probe).await {
        Ok(Ok(())) => Ok(()),
        Ok(Err(e)) => Err(e.to_string()),
        Err(_) => Err("PostgreSQL did not answer within 5 s".to_owned()),
    };
    let relay_id = shared.config.relay_id.clone();
    match status {
        Ok(()) => (
            StatusCode::OK,
            Json(serde_json::json!({"status": "ok", "relay_id": relay_id, "database": "ok"})),
        )
            .into_response(),
        Err(e) => (
            StatusCode::SERVICE_UNAVAILABLE,
            Json(serde_json::json!({"status": "unavailable", "relay_id": relay_id, "database": e})),
        )
            .into_response(),
    }
}

async fn sync(ws: WebSocketUpgrade, State(shared): State<Arc<Shared>>) -> Response {
    // Frames above max_frame_bytes still arrive, so the session can answer them
    // with a typed `frame_too_large`; only far larger ones are cut by the transport.
    let hard_limit = shared
        .config
        .max_frame_bytes
        .saturating_mul(4)
        .max(64 * 1024);
    ws.max_message_size(hard_limit)
        .max_frame_size(hard_limit)
        .on_upgrade(move |socket| session::run(socket, shared))
}
