//! One client connection: the protocol's state machine.
//!
//! A session starts unauthenticated. `hello` with an accepted token binds the client
//! id, the token's claims and the scopes they grant; a refused token gets a
//! `refused` frame and the session waits for a better one. From then on `upload`
//! applies batches ([`crate::upload`]) and `subscribe` sends a snapshot of the
//! scopes' rows, then every upstream transaction filtered to them. A snapshot is
//! one `REPEATABLE READ` transaction sent as `snapshot_start`, pages of rows in
//! primary key order (each naming its last key), `snapshot_done`; a `subscribe`
//! with a resume point gets, instead of the pages before it, the rows there
//! written since the interrupted snapshot (their `xmin` not visible in it) and
//! the keys there, so the client ends with exactly the new snapshot. When the
//! replication stream lost its slot, every session gets `resync` and a fresh
//! snapshot. When the token
//! expires the session says `token_expired` and stops serving (uploads and the down
//! stream) until a `token` frame brings a fresh one.
//!
//! No frame a client sends ends the session: a frame too large, not JSON, of an
//! unknown type, or an upload that cannot apply is answered with a typed frame and the
//! session reads on. Only a closed socket (or a frame beyond the transport's hard
//! limit, which the WebSocket layer closes with 1009) ends it.

use std::collections::HashSet;
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use axum::extract::ws::{Message, WebSocket};
use futures::StreamExt;
use serde_json::value::RawValue;
use tokio::sync::broadcast::{self, error::RecvError};
use tokio_postgres::IsolationLevel;
use tracing::{info, warn};

use crate::auth::Claims;
use crate::error::Error;
use crate::protocol::{
    format_lsn, Change, ClientFrame, ErrorCode, RawRow, RelayFrame, Resume, PROTOCOL_VERSION,
};
use crate::replication::{ChangeKind, Feed};
use crate::rows;
use crate::scope::{sql_filter, BoundScope};
use crate::shared::Shared;
use crate::sync_schema::{quote_ident, quote_literal, PgType, SyncCollection};
use crate::upload::{apply_batch, BatchOutcome, Uploader};

/// Rows per `snapshot` page (frame): the client applies each in one local
/// transaction and records its last key as the point to resume after.
const SNAPSHOT_PAGE: usize = 2000;
/// Keys per `snapshot_keys` frame.
const SNAPSHOT_KEYS_PAGE: usize = 20_000;

/// Whether `text` reads as a `pg_snapshot` (`xmin:xmax:xip,…`), so that
/// PostgreSQL will take it: a resume point the client garbled gives a full
/// snapshot, not an error.
fn usable_snapshot(text: &str) -> bool {
    let parts: Vec<&str> = text.split(':').collect();
    let number = |p: &str| !p.is_empty() && p.len() <= 20 && p.bytes().all(|b| b.is_ascii_digit());
    parts.len() == 3
        && number(parts[0])
        && number(parts[1])
        && (parts[2].is_empty() || parts[2].split(',').all(number))
}

/// Whether `key` holds every primary key field of `collection` with a value
/// PostgreSQL can cast to its column (a string for text, an integer otherwise).
fn valid_key(collection: &SyncCollection, key: &serde_json::Value) -> bool {
    let Some(key) = key.as_object() else {
        return false;
    };
    collection.primary_key.iter().all(|name| {
        let value = key.get(name);
        match collection.column(name).map(|c| &c.pg_type) {
            Some(PgType::Text) => value.is_some_and(|v| v.is_string()),
            Some(PgType::SmallInt | PgType::Integer | PgType::BigInt) => {
                value.is_some_and(|v| v.is_i64())
            }
            Some(PgType::Numeric) => value.is_some_and(|v| v.is_u64()),
            _ => false,
        }
    })
}

/// The primary key fields of `collection` read from the JSON parameter `$n`,
/// each cast to its column's type, as a row to compare with.
fn key_params(collection: &SyncCollection, n: usize) -> String {
    collection
        .primary_key
        .iter()
        .map(|k| {
            let ty = collection
                .column(k)
                .map_or_else(|| "text".to_owned(), |c| c.pg_type.sql());
            format!("((${n}::text)::jsonb->>{})::{ty}", quote_literal(k))
        })
        .collect::<Vec<_>>()
        .join(", ")
}

struct Session {
    shared: Arc<Shared>,
    client_id: Option<String>,
    claims: Option<Claims>,
    scopes: Vec<BoundScope>,
    /// Collections (indexes into the schema) the client subscribed to.
    subscribed: Option<HashSet<usize>>,
    feed: Option<broadcast::Receiver<Feed>>,
}

/// Serves one WebSocket until it closes.
pub async fn run(mut socket: WebSocket, shared: Arc<Shared>) {
    let mut session = Session {
        shared,
        client_id: None,
        claims: None,
        scopes: Vec::new(),
        subscribed: None,
        feed: None,
    };
    loop {
        let expiry = session.expiry();
        let message = tokio::select! {
            message = socket.recv() => message,
            feed = next_feed(&mut session.feed) => {
                if session.forward(&mut socket, feed).await.is_err() {
                    return;
                }
                continue;
            }
            () = sleep_until_epoch(expiry), if expiry.is_some() => {
                session.claims = None;
                let refused = RelayFrame::Refused {
                    code: "token_expired".into(),
                    message: "the token has expired; send a fresh one in a token frame".into(),
                };
                if send(&mut socket, &refused).await.is_err() {
                    return;
                }
                continue;
            }
        };
        let text = match message {
            None | Some(Err(_)) | Some(Ok(Message::Close(_))) => return,
            Some(Ok(Message::Text(text))) => text,
            Some(Ok(Message::Binary(_))) => {
                let error = frame_error(ErrorCode::BinaryFrame, "frames are JSON text");
                if send(&mut socket, &error).await.is_err() {
                    return;
                }
                continue;
            }
            Some(Ok(_)) => continue, // ping / pong: answered by the WebSocket layer
        };
        let answer = session.handle(&mut socket, text.as_str()).await;
        if answer.is_err() {
            return;
        }
    }
}

async fn next_feed(feed: &mut Option<broadcast::Receiver<Feed>>) -> Result<Feed, RecvError> {
    match feed {
        Some(receiver) => receiver.recv().await,
        None => std::future::pending().await,
    }
}

async fn sleep_until_epoch(at: Option<u64>) {
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0);
    let wait = at.unwrap_or(now).saturating_sub(now);
    tokio::time::sleep(Duration::from_secs(wait)).await;
}

fn frame_error(code: ErrorCode, message: impl Into<String>) -> RelayFrame {
    RelayFrame::Error {
        code,
        message: message.into(),
    }
}

/// Sends one frame; `Err` when the socket is gone.
async fn send(socket: &mut WebSocket, frame: &RelayFrame) -> Result<(), ()> {
    let text = serde_json::to_string(frame).map_err(|_| ())?;
    socket
        .send(Message::Text(text.into()))
        .await
        .map_err(|_| ())
}

impl Session {
    /// The `welcome` frame for the current token.
    fn welcome(&self) -> RelayFrame {
        RelayFrame::Welcome {
            relay_id: self.shared.config.relay_id.clone(),
            protocol: PROTOCOL_VERSION,
            subject: self
                .claims
                .as_ref()
                .map(|c| c.subject().to_owned())
                .unwrap_or_default(),
        }
    }

    /// When the token runs out (with the configured leeway), if authenticated.
    fn expiry(&self) -> Option<u64> {
        let exp = self.claims.as_ref()?.expires_at()?;
        Some(exp + self.shared.config.auth.leeway_seconds)
    }

    async fn handle(&mut self, socket: &mut WebSocket, text: &str) -> Result<(), ()> {
        let limit = self.shared.config.max_frame_bytes;
        if text.len() > limit {
            let error = frame_error(
                ErrorCode::FrameTooLarge,
                format!("the frame has {} bytes; the limit is {limit}", text.len()),
            );
            return send(socket, &error).await;
        }
        let frame: ClientFrame = match serde_json::from_str(text) {
            Ok(frame) => frame,
            Err(e) => {
                return send(
                    socket,
                    &frame_error(ErrorCode::MalformedFrame, e.to_string()),
                )
                .await
            }
        };
        match frame {
            ClientFrame::Hello {
                token,
                client_id,
                protocol,
            } => {
                if protocol != PROTOCOL_VERSION {
                    let error = frame_error(
                        ErrorCode::UnsupportedProtocol,
                        format!("this relay speaks protocol {PROTOCOL_VERSION}"),
                    );
                    return send(socket, &error).await;
                }
                if client_id.is_empty() || client_id.len() > 200 {
                    let error = frame_error(
                        ErrorCode::MalformedFrame,
                        "client_id must be 1 to 200 bytes",
                    );
                    return send(socket, &error).await;
                }
                if self.accept_token(socket, &token).await? {
                    self.client_id = Some(client_id.clone());
                    let subject = self.claims.as_ref().map(|c| c.subject().to_owned());
                    info!(
                        client_id,
                        subject = subject.as_deref(),
                        "client authenticated"
                    );
                    let welcome = RelayFrame::Welcome {
                        relay_id: self.shared.config.relay_id.clone(),
                        protocol: PROTOCOL_VERSION,
                        subject: subject.unwrap_or_default(),
                    };
                    send(socket, &welcome).await?;
                }
                Ok(())
            }
            ClientFrame::Token { token } => {
                if self.client_id.is_none() {
                    let error = frame_error(ErrorCode::NotAuthenticated, "send hello first");
                    return send(socket, &error).await;
                }
                if self.accept_token(socket, &token).await? {
                    send(socket, &self.welcome()).await?;
                    // The stream paused when the old token ran out: resume it with a
                    // fresh snapshot (what went by meanwhile was not sent).
                    if self.subscribed.is_some() && self.feed.is_none() {
                        return self.resnapshot(socket, None).await;
                    }
                }
                Ok(())
            }
            ClientFrame::Upload { ops, unacked_from } => {
                let (Some(client_id), Some(claims)) = (&self.client_id, &self.claims) else {
                    let error = frame_error(
                        ErrorCode::NotAuthenticated,
                        "upload needs an accepted token",
                    );
                    return send(socket, &error).await;
                };
                let max = self.shared.config.max_batch_ops;
                if ops.len() > max {
                    let error = frame_error(
                        ErrorCode::BatchTooLarge,
                        format!("{} operations; the limit is {max}", ops.len()),
                    );
                    return send(socket, &error).await;
                }
                let who = Uploader {
                    client_id,
                    subject: claims.subject(),
                    scopes: &self.scopes,
                    unacked_from,
                };
                let answer = match self.upload(&who, &ops).await {
                    Ok(BatchOutcome::Acked { lsn, results }) => RelayFrame::Ack { lsn, results },
                    Ok(BatchOutcome::Refused(ops)) => RelayFrame::UploadRefused { ops },
                    Err(e) => {
                        warn!(error = %e, detail = ?e, client_id, "upload failed");
                        frame_error(
                            ErrorCode::Unavailable,
                            "the database is unavailable; nothing was applied, retry later",
                        )
                    }
                };
                send(socket, &answer).await
            }
            ClientFrame::Subscribe {
                collections,
                resume,
            } => {
                if self.claims.is_none() {
                    let error = frame_error(
                        ErrorCode::NotAuthenticated,
                        "subscribe needs an accepted token",
                    );
                    return send(socket, &error).await;
                }
                let schema = &self.shared.schema;
                let mut wanted = HashSet::new();
                match collections {
                    None => wanted.extend(0..schema.collections.len()),
                    Some(names) => {
                        for name in names {
                            match schema.collections.iter().position(|c| {
                                Some(c.name.as_str())
                                    == schema.collection(&name).map(|x| x.name.as_str())
                            }) {
                                Some(i) => {
                                    wanted.insert(i);
                                }
                                None => {
                                    let error = frame_error(
                                        ErrorCode::MalformedFrame,
                                        format!("no synced collection {name:?}"),
                                    );
                                    return send(socket, &error).await;
                                }
                            }
                        }
                    }
                }
                self.subscribed = Some(wanted);
                self.resnapshot(socket, resume).await
            }
        }
    }

    /// Verifies a token; on refusal tells the client and returns `Ok(false)`.
    async fn accept_token(&mut self, socket: &mut WebSocket, token: &str) -> Result<bool, ()> {
        match self.shared.verifier.verify(token) {
            Ok(claims) => {
                if let Some(old) = &self.claims {
                    if old.subject() != claims.subject() {
                        let refused = RelayFrame::Refused {
                            code: "token_other_subject".into(),
                            message: "a session keeps its user; reconnect to change it".into(),
                        };
                        send(socket, &refused).await?;
                        return Ok(false);
                    }
                }
                self.scopes = self
                    .shared
                    .scopes
                    .iter()
                    .filter_map(|s| s.bind(&claims))
                    .collect();
                self.claims = Some(claims);
                Ok(true)
            }
            Err(refusal) => {
                info!(code = refusal.code(), "token refused");
                let refused = RelayFrame::Refused {
                    code: refusal.code().into(),
                    message: refusal.to_string(),
                };
                send(socket, &refused).await?;
                Ok(false)
            }
        }
    }

    async fn upload(
        &self,
        who: &Uploader<'_>,
        ops: &[serde_json::Value],
    ) -> Result<BatchOutcome, Error> {
        let mut guard = self.shared.pool.get().await?;
        let client = guard.as_mut().expect("the pool hands out live connections");
        apply_batch(client, &self.shared.schema, who, ops).await
    }

    /// Subscribes to the live stream, then sends a snapshot of the subscribed scopes.
    /// Live transactions arriving meanwhile wait in the channel; those that the
    /// snapshot already holds carry versions the client already has.
    /// `resume`: the client's point in an interrupted snapshot, if it has one.
    async fn resnapshot(
        &mut self,
        socket: &mut WebSocket,
        resume: Option<Resume>,
    ) -> Result<(), ()> {
        self.feed = Some(self.shared.feed.subscribe());
        match self.snapshot(socket, resume).await {
            Ok(()) => Ok(()),
            Err(SnapshotError::Socket) => Err(()),
            Err(SnapshotError::Database(e)) => {
                warn!(error = %e, "snapshot failed");
                self.feed = None;
                self.subscribed = None;
                let error = frame_error(
                    ErrorCode::Unavailable,
                    "the database is unavailable; subscribe again later",
                );
                send(socket, &error).await
            }
        }
    }

    async fn snapshot(
        &self,
        socket: &mut WebSocket,
        resume: Option<Resume>,
    ) -> Result<(), SnapshotError> {
        let Some(subscribed) = &self.subscribed else {
            return Ok(());
        };
        let schema = &self.shared.schema;
        let mut guard = self.shared.pool.get().await?;
        let client = guard.as_mut().expect("the pool hands out live connections");
        let tx = client
            .build_transaction()
            .isolation_level(IsolationLevel::RepeatableRead)
            .read_only(true)
            .start()
            .await
            .map_err(Error::from)?;
        // Pages are read in key order: the primary key's index gives that order
        // without sorting the whole table first.
        tx.batch_execute("SET LOCAL enable_sort = off")
            .await
            .map_err(Error::from)?;
        let head = tx
            .query_one(
                "SELECT pg_current_wal_lsn()::text, pg_current_snapshot()::text",
                &[],
            )
            .await
            .map_err(Error::from)?;
        let (lsn, pg_snapshot): (String, String) = (head.get(0), head.get(1));
        // The cursor, when the client's resume point is one this relay can use.
        let cursor = resume.and_then(|r| {
            let index = schema
                .collections
                .iter()
                .position(|c| c.name == r.collection)?;
            (usable_snapshot(&r.snapshot)
                && subscribed.contains(&index)
                && valid_key(&schema.collections[index], &r.after))
            .then_some((index, r))
        });
        let mut total = 0u64;
        for (i, collection) in schema.collections.iter().enumerate() {
            if !subscribed.contains(&i) {
                continue;
            }
            let (filter, params) = sql_filter(&self.scopes, collection, 1);
            if filter == "false" {
                continue;
            }
            let sql = format!(
                "SELECT count(*) FROM {} t WHERE {filter}",
                quote_ident(&collection.table)
            );
            let n: i64 = tx
                .query_one(&sql, &params.iter().map(|p| p as _).collect::<Vec<_>>())
                .await
                .map_err(Error::from)?
                .get(0);
            total += n as u64;
        }
        let start = RelayFrame::SnapshotStart {
            lsn: lsn.clone(),
            snapshot: pg_snapshot,
            rows: total,
            resumed: cursor.is_some(),
        };
        send(socket, &start)
            .await
            .map_err(|_| SnapshotError::Socket)?;
        for (i, collection) in schema.collections.iter().enumerate() {
            if !subscribed.contains(&i) {
                continue;
            }
            let (filter, mut params) = sql_filter(&self.scopes, collection, 1);
            if filter == "false" {
                continue;
            }
            let table = quote_ident(&collection.table);
            let order = collection
                .primary_key
                .iter()
                .map(|k| format!("t.{}", quote_ident(k)))
                .collect::<Vec<_>>()
                .join(", ");
            let mut rest = filter.clone();
            match &cursor {
                Some((at, r)) if i < *at => {
                    // Wholly before the cursor: applied in the interrupted run.
                    changed_since(socket, &tx, collection, &filter, &params, &r.snapshot, None)
                        .await?;
                    continue;
                }
                Some((at, r)) if i == *at => {
                    changed_since(
                        socket,
                        &tx,
                        collection,
                        &filter,
                        &params,
                        &r.snapshot,
                        Some(&r.after),
                    )
                    .await?;
                    params.push(r.after.to_string());
                    rest = format!(
                        "{filter} AND ({order}) > ({})",
                        key_params(collection, params.len())
                    );
                }
                _ => {}
            }
            let sql = format!(
                "SELECT {} FROM {table} t WHERE {rest} ORDER BY {order}",
                rows::snapshot_json(collection)
            );
            send_pages(socket, &tx, collection, &sql, &params, true).await?;
        }
        tx.commit().await.map_err(Error::from)?;
        send(socket, &RelayFrame::SnapshotDone { lsn })
            .await
            .map_err(|_| SnapshotError::Socket)
    }

    /// Sends what the feed brought, filtered to this client's scopes.
    async fn forward(
        &mut self,
        socket: &mut WebSocket,
        feed: Result<Feed, RecvError>,
    ) -> Result<(), ()> {
        if self.claims.is_none() {
            // Expired token: the stream pauses; a fresh token resumes with a snapshot.
            self.feed = None;
            return Ok(());
        }
        let (Some(subscribed), Ok(feed)) = (&self.subscribed, feed.as_ref()) else {
            if let Err(RecvError::Lagged(missed)) = feed {
                let error = frame_error(
                    ErrorCode::Resync,
                    format!("{missed} transactions went by faster than they could be sent; here is a fresh snapshot"),
                );
                send(socket, &error).await?;
                return self.resnapshot(socket, None).await;
            }
            self.feed = None;
            return Ok(());
        };
        match feed {
            Feed::Lost => {
                let error = frame_error(
                    ErrorCode::Resync,
                    "the relay lost its place in the change stream; here is a fresh snapshot",
                );
                send(socket, &error).await?;
                self.resnapshot(socket, None).await
            }
            Feed::Checkpoint(lsn) => {
                send(
                    socket,
                    &RelayFrame::Checkpoint {
                        lsn: format_lsn(*lsn),
                    },
                )
                .await
            }
            Feed::Tx(tx) => {
                let mut changes = Vec::new();
                for change in &tx.changes {
                    if !subscribed.contains(&change.collection) {
                        continue;
                    }
                    let collection = &self.shared.schema.collections[change.collection];
                    let scopes: Vec<&BoundScope> = self
                        .scopes
                        .iter()
                        .filter(|s| s.collection == collection.name)
                        .collect();
                    if scopes.is_empty() {
                        continue;
                    }
                    let in_scope = |row: &Vec<Option<String>>| {
                        scopes.iter().any(|s| {
                            s.matches(|name| {
                                change
                                    .columns
                                    .iter()
                                    .position(|c| c == name)
                                    .and_then(|i| row.get(i).cloned().flatten())
                            })
                        })
                    };
                    match &change.kind {
                        ChangeKind::Truncate => changes.push(Change::Truncate {
                            collection: collection.name.clone(),
                        }),
                        ChangeKind::Row { old, new } => {
                            let new_in = new.as_ref().filter(|r| in_scope(r));
                            let old_in = old.as_ref().filter(|r| in_scope(r));
                            if let Some(row) = new_in {
                                let (row, _, version) =
                                    rows::from_text(collection, &change.columns, row);
                                changes.push(Change::Upsert {
                                    collection: collection.name.clone(),
                                    row,
                                    version,
                                });
                            } else if let Some(row) = old_in {
                                // Deleted, or moved out of this client's scopes.
                                let (_, key, version) =
                                    rows::from_text(collection, &change.columns, row);
                                changes.push(Change::Delete {
                                    collection: collection.name.clone(),
                                    key,
                                    version,
                                });
                            }
                        }
                    }
                }
                if changes.is_empty() {
                    return Ok(());
                }
                let frame = RelayFrame::Changes {
                    lsn: format_lsn(tx.commit_lsn),
                    changes,
                };
                send(socket, &frame).await
            }
        }
    }
}

/// Streams the rows `sql` selects as `snapshot` pages of `collection`; each
/// page says its last key when `cursor`.
async fn send_pages(
    socket: &mut WebSocket,
    tx: &tokio_postgres::Transaction<'_>,
    collection: &SyncCollection,
    sql: &str,
    params: &[String],
    cursor: bool,
) -> Result<(), SnapshotError> {
    let stream = tx
        .query_raw(sql, params.iter())
        .await
        .map_err(Error::from)?;
    let mut stream = std::pin::pin!(stream);
    let mut page = Vec::with_capacity(SNAPSHOT_PAGE);
    loop {
        let row = stream.next().await.transpose().map_err(Error::from)?;
        let end = row.is_none();
        if let Some(row) = row {
            let text: String = row.get(0);
            let raw = RawValue::from_string(text)
                .map_err(|e| SnapshotError::Database(Error::SnapshotRow(e.to_string())))?;
            page.push(RawRow(raw));
        }
        if page.len() == SNAPSHOT_PAGE || (end && !page.is_empty()) {
            let after = cursor
                .then(|| page.last())
                .flatten()
                .and_then(|r| {
                    serde_json::from_str::<serde_json::Map<String, serde_json::Value>>(r.0.get())
                        .ok()
                })
                .map(|r| rows::key_of(collection, &r));
            let frame = RelayFrame::Snapshot {
                collection: collection.name.clone(),
                rows: std::mem::take(&mut page),
                after,
            };
            send(socket, &frame)
                .await
                .map_err(|_| SnapshotError::Socket)?;
        }
        if end {
            return Ok(());
        }
    }
}

/// For a resumed snapshot, the part of `collection` the interrupted one had
/// sent (all of it, or the keys up to `resume.after`): the rows written since
/// that snapshot (their `xmin` is not visible in it), then every key there,
/// so the client can tell which of its rows are gone.
async fn changed_since(
    socket: &mut WebSocket,
    tx: &tokio_postgres::Transaction<'_>,
    collection: &SyncCollection,
    filter: &str,
    params: &[String],
    old: &str,
    upto: Option<&serde_json::Value>,
) -> Result<(), SnapshotError> {
    let table = quote_ident(&collection.table);
    let order = collection
        .primary_key
        .iter()
        .map(|k| format!("t.{}", quote_ident(k)))
        .collect::<Vec<_>>()
        .join(", ");
    let mut params = params.to_vec();
    let mut before = filter.to_owned();
    if let Some(after) = upto {
        params.push(after.to_string());
        before = format!(
            "{filter} AND ({order}) <= ({})",
            key_params(collection, params.len())
        );
    }
    params.push(old.to_owned());
    let old_snapshot = params.len();
    // A row's xmin is a 32-bit transaction id; the snapshot speaks 64-bit
    // ones: the epoch is the current one, or the one before for ids above
    // the current counter.
    let current = "(pg_snapshot_xmax(pg_current_snapshot())::text::bigint)";
    let xid8 = format!(
        "((({current} >> 32) - CASE WHEN t.xmin::text::bigint > ({current} & 4294967295) \
         THEN 1 ELSE 0 END) << 32 | t.xmin::text::bigint)::text::xid8"
    );
    let changed = format!(
        "SELECT {} FROM {table} t WHERE {before} \
         AND NOT pg_visible_in_snapshot({xid8}, (${old_snapshot}::text)::pg_snapshot) ORDER BY {order}",
        rows::snapshot_json(collection)
    );
    send_pages(socket, tx, collection, &changed, &params, false).await?;
    params.pop();
    let keys = collection
        .primary_key
        .iter()
        .map(|k| format!("{}, t.{}", quote_literal(k), quote_ident(k)))
        .collect::<Vec<_>>()
        .join(", ");
    let sql =
        format!("SELECT jsonb_build_object({keys}) FROM {table} t WHERE {before} ORDER BY {order}");
    let stream = tx
        .query_raw(&sql, params.iter())
        .await
        .map_err(Error::from)?;
    let mut stream = std::pin::pin!(stream);
    let mut page = Vec::new();
    loop {
        let row = stream.next().await.transpose().map_err(Error::from)?;
        let end = row.is_none();
        if let Some(row) = row {
            page.push(row.get::<_, serde_json::Value>(0));
        }
        if page.len() == SNAPSHOT_KEYS_PAGE || (end && !page.is_empty()) {
            let frame = RelayFrame::SnapshotKeys {
                collection: collection.name.clone(),
                keys: std::mem::take(&mut page),
            };
            send(socket, &frame)
                .await
                .map_err(|_| SnapshotError::Socket)?;
        }
        if end {
            return Ok(());
        }
    }
}

enum SnapshotError {
    Socket,
    Database(Error),
}

impl From<Error> for SnapshotError {
    fn from(e: Error) -> SnapshotError {
        SnapshotError::Database(e)
    }
}
