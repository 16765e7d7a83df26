//! The down stream's source: this relay's logical replication slot, read with
//! `pgoutput`, as whole committed transactions.
//!
//! At start [`prepare`] makes sure the publication `keel_relay` lists every synced
//! table and that this relay's slot exists (one slot per relay, named by its
//! `relay_id`; PostgreSQL keeps WAL for it, bounded by the server's
//! `max_slot_wal_keep_size`). [`stream`] then reads the slot through
//! `pg_logical_slot_get_binary_changes`, which hands out only whole transactions and
//! advances the slot past what it returned, decodes them ([`crate::pgoutput`]) and
//! publishes each as a [`StreamedTx`] on a broadcast channel that every subscribed
//! session filters by its scopes. When the slot has nothing, it waits
//! `poll_interval_ms` and reads again.
//!
//! Reading through SQL needs no replication-protocol client (none of the Rust
//! PostgreSQL clients speaks it on a released version); the cost is two reads per
//! poll while idle, and a poll interval of delay at worst.
//!
//! An idle relay writes nothing. It records how far it has streamed in
//! `keel_relay.relays` only after it streamed a transaction, and at most once per
//! [`RECORD_EVERY`]: that record is itself a commit that moves the WAL, so
//! recording every checkpoint would make one commit per poll, forever, and send
//! every subscriber a checkpoint frame per poll for it.

use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::sync::broadcast;
use tokio_postgres::Client;

use crate::error::Error;
use crate::pgoutput::{Decoder, RowChange};
use crate::protocol::{format_lsn, parse_lsn};
use crate::state;
use crate::sync_schema::{quote_ident, SyncSchema};

/// The most messages one read of the slot returns (it finishes the transaction it is in).
const BATCH_CHANGES: usize = 10_000;

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

/// Reads the slot and publishes what it holds, forever; an error ends it (the
/// caller restarts it on a fresh connection). Besides each transaction it publishes
/// checkpoints: the stream is complete up to that LSN.
pub async fn stream(
    client: &Client,
    schema: &SyncSchema,
    relay_id: &str,
    slot: &str,
    poll: Duration,
    feed: &broadcast::Sender<Feed>,
) -> Result<(), Error> {
    let mut decoder = Decoder::new();
    let mut last_lsn: Option<u64> = None;
    // The checkpoint not yet recorded, kept only once a transaction streamed.
    let mut unrecorded: Option<u64> = None;
    let mut recorded_at: Option<Instant> = None;
    // The record is a hint (a restart resumes from the slot, not from it), so it
    // need not wait for its own fsync while the next transaction waits to stream.
    client.batch_execute("SET synchronous_commit = off").await?;
    loop {
        // Everything committed before this flush position is decoded by the call
        // below (it stops there), so once it returns a full answer, the stream is
        // complete up to here even if no synced table changed.
        let flushed: String = client
            .query_one("SELECT pg_current_wal_flush_lsn()::text", &[])
            .await?
            .get(0);
        let rows = client
            .query(
                "SELECT data FROM pg_logical_slot_get_binary_changes($1, $2::text::pg_lsn, $3, \
                 'proto_version', '1', 'publication_names', $4)",
                &[&slot, &flushed, &(BATCH_CHANGES as i32), &PUBLICATION],
            )
            .await?;
        let mut streamed = None;
        for row in &rows {
            let data: Vec<u8> = row.get(0);
            let tx = match decoder.push(&data) {
                Ok(Some(tx)) => tx,
                Ok(None) => continue,
                Err(e) => {
                    tracing::error!(error = %e, "undecodable replication message; skipped");
                    continue;
                }
            };
            let mut changes = Vec::new();
            for change in tx.changes {
                let (relation_ids, kind) = match change {
                    RowChange::Insert { relation, new } => (
                        vec![relation],
                        ChangeKind::Row {
                            old: None,
                            new: Some(new),
                        },
                    ),
                    RowChange::Update { relation, old, new } => (
                        vec![relation],
                        ChangeKind::Row {
                            old,
                            new: Some(new),
                        },
                    ),
                    RowChange::Delete { relation, old } => (
                        vec![relation],
                        ChangeKind::Row {
                            old: Some(old),
                            new: None,
                        },
                    ),
                    RowChange::Truncate { relations } => (relations, ChangeKind::Truncate),
                };
                for id in relation_ids {
                    let Some(relation) = decoder.relation(id) else {
                        continue;
                    };
                    let Some(collection) = schema
                        .collections
                        .iter()
                        .position(|c| c.table == relation.name)
                    else {
                        continue;
                    };
                    changes.push(TableChange {
                        collection,
                        columns: Arc::new(relation.columns.clone()),
                        kind: kind.clone(),
                    });
                }
            }
            streamed = Some(tx.end_lsn);
            // No receiver is fine: nobody is subscribed right now.
            let _ = feed.send(Feed::Tx(Arc::new(StreamedTx {
                commit_lsn: tx.commit_lsn,
                changes,
            })));
        }
        let complete = rows.len() < BATCH_CHANGES;
        let checkpoint = match (complete, parse_lsn(&flushed), streamed) {
            (true, Some(flushed), streamed) => Some(flushed.max(streamed.unwrap_or(0))),
            (_, _, streamed) => streamed,
        };
        if let Some(lsn) = checkpoint.filter(|lsn| !last_lsn.is_some_and(|last| *lsn <= last)) {
            let _ = feed.send(Feed::Checkpoint(lsn));
            last_lsn = Some(lsn);
            if streamed.is_some() || unrecorded.is_some() {
                unrecorded = Some(lsn);
            }
        }
        if let Some(lsn) = unrecorded {
            if !recorded_at.is_some_and(|at| at.elapsed() < RECORD_EVERY) {
                state::record_streamed(client, relay_id, &format_lsn(lsn)).await?;
                unrecorded = None;
                recorded_at = Some(Instant::now());
            }
        }
        if rows.is_empty() {
            tokio::time::sleep(poll).await;
        }
    }
}
