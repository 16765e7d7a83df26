//! The down stream's source: this relay's logical replication slot, streamed
//! with `pgoutput`, as whole committed transactions.
//!
//! At start [`prepare`] makes sure the publication `keel_relay` lists every synced
//! table and that this relay's slot exists (one slot per relay, named by its
//! `relay_id`; PostgreSQL keeps WAL for it, bounded by the server's
//! `max_slot_wal_keep_size`). [`stream`] then opens a replication connection
//! (`START_REPLICATION … LOGICAL`, through `pgwire-replication`), decodes what it
//! sends ([`crate::pgoutput`]) and publishes each transaction as a [`StreamedTx`]
//! on a broadcast channel that every subscribed session filters by its scopes.
//!
//! PostgreSQL's WAL sender decodes the slot once, in WAL order, and sends a
//! transaction as soon as its commit is flushed: a change reaches the relay
//! without waiting for a poll, and nothing already sent is decoded again. (Reading
//! the slot through SQL instead, `pg_logical_slot_get_changes`, decodes from the
//! slot's restart point on every call, which lags up to a running-transactions
//! record behind: after a large transaction, every call decodes it again.)
//!
//! Checkpoints come from two places: a transaction's end, and the server's
//! keepalive, which carries how far it has read while it waits for more WAL;
//! every transaction committed before that point has been sent. What is
//! published is confirmed to the server as consumed, as a read of the slot
//! would: a relay that restarts streams from there.
//!
//! An idle relay writes nothing. It records how far it has streamed in
//! `keel_relay.relays` only after it streamed a transaction, and at most once per
//! [`RECORD_EVERY`]: that record is itself a commit that moves the WAL, so
//! recording every checkpoint would make one commit per checkpoint, forever, and
//! send every subscriber a checkpoint frame for each.

use std::sync::Arc;
use std::time::{Duration, Instant};

use pgwire_replication::{
    Lsn, PgWireError, ReplicationClient, ReplicationConfig, ReplicationEvent, TlsConfig,
};
use tokio::sync::broadcast;
use tokio_postgres::config::Host;
use tokio_postgres::Client;

use crate::error::Error;
use crate::pgoutput::{Decoder, RowChange};
use crate::protocol::format_lsn;
use crate::state;
use crate::sync_schema::{quote_ident, SyncSchema};

/// The most time between a confirmation of what was published and the server
/// hearing of it.
const STATUS_EVERY: Duration = Duration::from_millis(20);

/// The least time between two records of how far this relay has streamed.
pub const RECORD_EVERY: Duration = Duration::from_secs(1);

/// The publication the relay reads.
pub const PUBLICATION: &str = "keel_relay";

/// One row change of a synced table, with the table's column names.
#[derive(Debug, Clone)]
pub struct TableChange {
    /// The collection's index in the schema.
    pub collection: usize,
    /// Column names of the replicated rows.
    pub columns: Arc<Vec<String>>,
    /// What happened.
    pub kind: ChangeKind,
}

/// What happened to a row.
#[derive(Debug, Clone)]
pub enum ChangeKind {
    /// A row was inserted, updated or deleted (`old` / `new` in text form).
    Row {
        /// The row before (updates and deletes).
        old: Option<Vec<Option<String>>>,
        /// The row after (inserts and updates).
        new: Option<Vec<Option<String>>>,
    },
    /// The table was truncated.
    Truncate,
}

/// A committed upstream transaction, as the sessions see it.
#[derive(Debug, Clone)]
pub struct StreamedTx {
    /// The commit's LSN.
    pub commit_lsn: u64,
    /// The changes to synced tables, in order.
    pub changes: Vec<TableChange>,
}

/// What the stream publishes.
#[derive(Debug, Clone)]
pub enum Feed {
    /// A transaction (possibly with no synced changes: it still moves the checkpoint).
    Tx(Arc<StreamedTx>),
    /// Everything up to this LSN has been published.
    Checkpoint(u64),
    /// The slot was gone (dropped, or invalidated past `max_slot_wal_keep_size`)
    /// and was made again: what was committed meanwhile will never be streamed,
    /// so every subscriber needs a fresh snapshot.
    Lost,
}

/// Makes sure the publication covers the synced tables and the slot exists;
/// whether it had to make the slot (a slot that existed has lost nothing).
pub async fn prepare(client: &Client, schema: &SyncSchema, slot: &str) -> Result<bool, Error> {
    let tables: Vec<String> = schema
        .collections
        .iter()
        .map(|c| quote_ident(&c.table))
        .collect();
    let exists = client
        .query_opt(
            "SELECT 1 FROM pg_publication WHERE pubname = $1",
            &[&PUBLICATION],
        )
        .await?
        .is_some();
    let list = tables.join(", ");
    if !exists {
        let made = client
            .batch_execute(&format!(
                "CREATE PUBLICATION {PUBLICATION} FOR TABLE {list}"
            ))
            .await;
        // Another relay may have made it in the meantime.
        if let Err(e) = made {
            if e.code() != Some(&tokio_postgres::error::SqlState::DUPLICATE_OBJECT) {
                return Err(e.into());
            }
        }
    }
    client
        .batch_execute(&format!("ALTER PUBLICATION {PUBLICATION} SET TABLE {list}"))
        .await?;
    let has_slot = client
        .query_opt(
            "SELECT 1 FROM pg_replication_slots WHERE slot_name = $1",
            &[&slot],
        )
        .await?
        .is_some();
    if !has_slot {
        client
            .query_one(
                "SELECT pg_create_logical_replication_slot($1, 'pgoutput')",
                &[&slot],
            )
            .await?;
    }
    Ok(!has_slot)
}

/// Whether `slot` exists and can still be read (not invalidated).
pub async fn slot_usable(client: &Client, slot: &str) -> Result<bool, Error> {
    let row = client
        .query_opt(
            "SELECT wal_status IS DISTINCT FROM 'lost' FROM pg_replication_slots WHERE slot_name = $1",
            &[&slot],
        )
        .await?;
    Ok(row.is_some_and(|r| r.get::<_, bool>(0)))
}

/// Streams the slot and publishes what it holds, forever; an error ends it (the
/// caller restarts it on a fresh connection). Besides each transaction it publishes
/// checkpoints: the stream is complete up to that LSN.
///
/// `client` is an ordinary connection, for the record of how far this relay has
/// streamed; the stream itself is a replication connection of its own to
/// `database_url`.
pub async fn stream(
    client: &Client,
    database_url: &str,
    schema: &SyncSchema,
    relay_id: &str,
    slot: &str,
    feed: &broadcast::Sender<Feed>,
) -> Result<(), Error> {
    let mut replication =
        ReplicationClient::connect(replication_config(database_url, slot)?).await?;
    let mut decoder = Decoder::new();
    let mut last_lsn: Option<u64> = None;
    // The checkpoint not yet recorded, kept only once a transaction streamed.
    let mut unrecorded: Option<u64> = None;
    let mut recorded_at: Option<Instant> = None;
    // The record is a hint (a restart resumes from the slot, not from it), so it
    // need not wait for its own fsync while the next transaction waits to stream.
    client.batch_execute("SET synchronous_commit = off").await?;
    loop {
        // A record that is due is written even when nothing else arrives.
        let due = unrecorded.map(|_| {
            recorded_at.map_or(Duration::ZERO, |at| {
                RECORD_EVERY.saturating_sub(at.elapsed())
            })
        });
        let event = match due {
            Some(due) => match tokio::time::timeout(due, replication.recv()).await {
                Ok(event) => Some(event?),
                Err(_) => None,
            },
            None => Some(replication.recv().await?),
        };
        let checkpoint = match event {
            None => None,
            Some(None) => {
                return Err(Error::Replication(PgWireError::Internal(
                    "the replication stream ended".into(),
                )))
            }
            Some(Some(ReplicationEvent::Begin { xid, .. })) => {
                decoder.begin(xid);
                None
            }
            Some(Some(ReplicationEvent::XLogData { data, .. })) => {
                if let Err(e) = decoder.push(&data) {
                    tracing::error!(error = %e, "undecodable replication message; skipped");
                }
                None
            }
            Some(Some(ReplicationEvent::Commit { lsn, end_lsn, .. })) => {
                match decoder.commit(lsn.0, end_lsn.0) {
                    Ok(tx) => {
                        let changes = table_changes(&decoder, schema, tx.changes);
                        // No receiver is fine: nobody is subscribed right now.
                        let _ = feed.send(Feed::Tx(Arc::new(StreamedTx {
                            commit_lsn: tx.commit_lsn,
                            changes,
                        })));
                        unrecorded = Some(tx.end_lsn);
                        Some(tx.end_lsn)
                    }
                    Err(e) => {
                        tracing::error!(error = %e, "undecodable replication message; skipped");
                        None
                    }
                }
            }
            // The server's position when it waits for more WAL: every
            // transaction committed before it has been sent.
            Some(Some(ReplicationEvent::KeepAlive { wal_end, .. })) => Some(wal_end.0),
            Some(Some(ReplicationEvent::Message { .. })) => None,
            Some(Some(ReplicationEvent::StoppedAt { .. })) => return Ok(()),
        };
        if let Some(lsn) = checkpoint.filter(|lsn| last_lsn.is_none_or(|last| *lsn > last)) {
            let _ = feed.send(Feed::Checkpoint(lsn));
            last_lsn = Some(lsn);
            // Published is consumed, as a read of the slot was: the slot moves on.
            replication.update_applied_lsn(Lsn(lsn));
            if unrecorded.is_some() {
                unrecorded = Some(lsn);
            }
        }
        if let Some(lsn) = unrecorded {
            if recorded_at.is_none_or(|at| at.elapsed() >= RECORD_EVERY) {
                state::record_streamed(client, relay_id, &format_lsn(lsn)).await?;
                unrecorded = None;
                recorded_at = Some(Instant::now());
            }
        }
    }
}

/// The stream's connection: the relay's database URL, as a replication
/// connection reading `slot` from where it was last confirmed.
fn replication_config(database_url: &str, slot: &str) -> Result<ReplicationConfig, Error> {
    let url: tokio_postgres::Config = database_url.parse()?;
    let host = match url.get_hosts().first() {
        Some(Host::Tcp(host)) => host.clone(),
        Some(Host::Unix(dir)) => dir.display().to_string(),
        None => "localhost".to_owned(),
    };
    let user = url.get_user().unwrap_or("postgres").to_owned();
    let password = url
        .get_password()
        .map(|p| String::from_utf8_lossy(p).into_owned())
        .unwrap_or_default();
    let database = url.get_dbname().map_or_else(|| user.clone(), str::to_owned);
    Ok(
        ReplicationConfig::new(host, user, password, database, slot, PUBLICATION)
            .with_port(url.get_ports().first().copied().unwrap_or(5432))
            .with_tls(TlsConfig::disabled())
            .with_start_lsn(Lsn::ZERO)
            // A confirmation goes out this soon after it is made, so the server
            // sends the next keepalive (a checkpoint) soon after WAL the
            // publication skips.
            .with_status_interval(STATUS_EVERY)
            .with_application_name(format!("keel-relay {slot}")),
    )
}

/// A transaction's row changes of synced tables, named by collection.
fn table_changes(
    decoder: &Decoder,
    schema: &SyncSchema,
    changes: Vec<RowChange>,
) -> Vec<TableChange> {
    // The synced table's collection and columns, for a relation id.
    let synced = |id: u32| {
        let relation = decoder.relation(id)?;
        let collection = schema
            .collections
            .iter()
            .position(|c| c.table == relation.name)?;
        Some((collection, Arc::clone(&relation.columns)))
    };
    let mut out = Vec::with_capacity(changes.len());
    for change in changes {
        let (relation, old, new) = match change {
            RowChange::Insert { relation, new } => (relation, None, Some(new)),
            RowChange::Update { relation, old, new } => (relation, old, Some(new)),
            RowChange::Delete { relation, old } => (relation, Some(old), None),
            RowChange::Truncate { relations } => {
                out.extend(relations.into_iter().filter_map(synced).map(
                    |(collection, columns)| TableChange {
                        collection,
                        columns,
                        kind: ChangeKind::Truncate,
                    },
                ));
                continue;
            }
        };
        if let Some((collection, columns)) = synced(relation) {
            out.push(TableChange {
                collection,
                columns,
                kind: ChangeKind::Row { old, new },
            });
        }
    }
    out
}
