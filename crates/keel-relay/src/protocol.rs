//! The wire protocol: JSON text frames over one WebSocket, each an object with a
//! `type` (`docs/sync.md` is the reference).
//!
//! A client sends [`ClientFrame`]s: `hello` (token and client id), `token` (a fresh
//! token), `upload` (a batch of operations), `subscribe` (start receiving rows).
//! The relay sends [`RelayFrame`]s: `welcome`, `refused` (a token refusal),
//! `error` (a frame it could not use), `ack` / `upload_refused` (the answer to one
//! upload), `snapshot_start` / `snapshot` / `snapshot_keys` / `snapshot_done`
//! (initial rows, in key-ordered pages a client can resume after), `changes` (one upstream
//! transaction, filtered to the client's scopes) and `checkpoint` (the relay has
//! streamed everything up to this LSN).
//!
//! Upload operations stay raw JSON here: each is checked on its own by
//! [`crate::upload`], so one malformed operation is named by its position instead
//! of spoiling the whole frame.

use serde::{Deserialize, Serialize};

/// The protocol version this relay speaks.
pub const PROTOCOL_VERSION: u32 = 1;

/// A frame from a client.
#[derive(Debug, Clone, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case", deny_unknown_fields)]
pub enum ClientFrame {
    /// Opens the session: who the client is.
    Hello {
        /// The JWT the app issued.
        token: String,
        /// A stable id of this client install (the op ledger's key).
        client_id: String,
        /// The protocol version the client speaks.
        #[serde(default = "default_protocol")]
        protocol: u32,
    },
    /// Replaces the session's token (after a `token_expired` refusal, or before).
    Token {
        /// The new JWT.
        token: String,
    },
    /// A batch of operations, applied all or nothing.
    Upload {
        /// The operations, in sequence order.
        ops: Vec<serde_json::Value>,
        /// The lowest sequence number the client has had no answer for (an ack
        /// or a refusal): the relay may forget its ledger rows below it.
        #[serde(default)]
        unacked_from: Option<i64>,
    },
    /// Starts the down stream: a snapshot of the scopes' rows, then live changes.
    Subscribe {
        /// Only these collections (all scoped collections when absent).
        #[serde(default)]
        collections: Option<Vec<String>>,
        /// Continue an interrupted snapshot instead of starting over.
        #[serde(default)]
        resume: Option<Resume>,
    },
}

/// Where an interrupted snapshot stopped: what a client kept of it.
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct Resume {
    /// The interrupted snapshot's `snapshot` (from its `snapshot_start`).
    pub snapshot: String,
    /// The collection of the last page the client applied.
    pub collection: String,
    /// That page's `after`: the primary key of its last row.
    pub after: serde_json::Value,
}

fn default_protocol() -> u32 {
    PROTOCOL_VERSION
}

/// One operation's result in an `ack`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct OpResult {
    /// The operation's sequence number.
    pub seq: i64,
    /// `applied` or `skipped`.
    pub outcome: Outcome,
    /// Why a `skipped` operation changed nothing (`row_gone`, `stale_delete`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// The row's version after the write (absent for deletes and skips).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub version: Option<i64>,
    /// Fields of the operation the server kept its own value for (`server_wins`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub ignored_fields: Vec<String>,
    /// This operation was applied by an earlier upload; this is that result again.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub replayed: bool,
}

impl OpResult {
    /// An applied operation; `version` is the row's after the write.
    pub fn applied(seq: i64, version: Option<i64>, ignored_fields: Vec<String>) -> OpResult {
        OpResult {
            seq,
            outcome: Outcome::Applied,
            reason: None,
            version,
            ignored_fields,
            replayed: false,
        }
    }

    /// An accepted operation that had nothing to do, and why.
    pub fn skipped(seq: i64, reason: &str) -> OpResult {
        OpResult {
            seq,
            outcome: Outcome::Skipped,
            reason: Some(reason.to_owned()),
            version: None,
            ignored_fields: Vec::new(),
            replayed: false,
        }
    }
}

/// What an accepted operation did.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Outcome {
    /// The write is in the database.
    Applied,
    /// Accepted, but there was nothing to do (see the reason).
    Skipped,
}

/// Why an operation made its batch be refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RefusalReason {
    /// Not an operation: missing or mistyped `seq`, `op`, `key`, …
    MalformedOp,
    /// The collection is not synced.
    UnknownCollection,
    /// A field the collection does not have.
    UnknownField,
    /// A value of the wrong type or out of range for its field.
    InvalidValue,
    /// A counter field patched with a value instead of a delta.
    CounterNeedsDelta,
    /// The row is outside the client's scopes, or the write would move it out.
    OutOfScope,
    /// A sequence number not above the last applied one, and not a replay.
    SequenceRegressed,
    /// The client id belongs to another user.
    ClientIdTaken,
    /// PostgreSQL refused the write (a constraint or a validation function).
    RejectedByDatabase,
}

/// One operation named in an `upload_refused`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct OpRefusal {
    /// The operation's position in the batch.
    pub index: usize,
    /// Its sequence number, when it had a readable one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub seq: Option<i64>,
    /// Why.
    pub reason: RefusalReason,
    /// Details for people (the field, the SQLSTATE, …).
    pub message: String,
}

/// A frame-level problem, sent in an `error` frame; the connection stays usable.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ErrorCode {
    /// Not JSON, or not a known frame (a truncated frame lands here).
    MalformedFrame,
    /// Larger than `max_frame_bytes`.
    FrameTooLarge,
    /// A binary frame (the protocol is JSON text).
    BinaryFrame,
    /// `upload` or `subscribe` before an accepted `hello`.
    NotAuthenticated,
    /// More operations than `max_batch_ops`.
    BatchTooLarge,
    /// The client speaks another protocol version.
    UnsupportedProtocol,
    /// The relay could not reach PostgreSQL; retry later (nothing was applied).
    Unavailable,
    /// The client fell too far behind the live stream: it gets a fresh snapshot.
    Resync,
}

/// A row as JSON text, sent as it is: a snapshot's rows come from PostgreSQL
/// already in the form clients read ([`crate::rows::snapshot_json`]), so the
/// relay neither parses nor re-writes them.
#[derive(Debug, Clone, Serialize)]
#[serde(transparent)]
pub struct RawRow(pub Box<serde_json::value::RawValue>);

impl PartialEq for RawRow {
    fn eq(&self, other: &RawRow) -> bool {
        self.0.get() == other.0.get()
    }
}

/// A frame from the relay (the relay only writes these).
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum RelayFrame {
    /// The `hello` was accepted.
    Welcome {
        /// The relay's id.
        relay_id: String,
        /// The protocol version.
        protocol: u32,
        /// The token's subject.
        subject: String,
    },
    /// The token was refused; the session waits for a `token` or `hello`.
    Refused {
        /// `token_expired`, `token_bad_signature`, …
        code: String,
        /// Details for people.
        message: String,
    },
    /// A frame could not be used; nothing of it was applied.
    Error {
        /// What kind of problem.
        code: ErrorCode,
        /// Details for people.
        message: String,
    },
    /// An upload was applied (or replayed) in one transaction.
    Ack {
        /// An LSN at or after the transaction's commit: once the down stream reaches
        /// it, the client's writes are in what it downloads.
        lsn: String,
        /// One result per operation, in batch order.
        results: Vec<OpResult>,
    },
    /// An upload was refused whole; nothing of it was applied.
    UploadRefused {
        /// The operations that caused it.
        ops: Vec<OpRefusal>,
    },
    /// A snapshot begins: its pages follow, then `snapshot_done`.
    SnapshotStart {
        /// The LSN the snapshot is consistent as of.
        lsn: String,
        /// PostgreSQL's snapshot (`pg_current_snapshot()`): a client that is cut
        /// off sends it back in `subscribe.resume`, so the relay can tell which rows
        /// changed since.
        snapshot: String,
        /// Rows the snapshot holds, every subscribed collection together.
        rows: u64,
        /// This snapshot continues an interrupted one (the `resume` was usable):
        /// only rows after its cursor, and those before it that changed, follow.
        resumed: bool,
    },
    /// Rows of the snapshot: one page, in primary key order within the collection.
    Snapshot {
        /// The collection.
        collection: String,
        /// Rows (each with its fields and `keel_version`), as PostgreSQL wrote them.
        rows: Vec<RawRow>,
        /// The primary key of the last row: a client that has applied this page
        /// resumes after it. Absent on the pages of a resumed snapshot that carry
        /// rows before the cursor (rows changed since the interrupted snapshot).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        after: Option<serde_json::Value>,
    },
    /// A resumed snapshot's keys before its cursor: every row there that still
    /// exists. A row the client holds there and this list lacks is gone.
    SnapshotKeys {
        /// The collection.
        collection: String,
        /// Primary keys (objects of the key fields).
        keys: Vec<serde_json::Value>,
    },
    /// The snapshot is complete, consistent as of `lsn`.
    SnapshotDone {
        /// The snapshot's LSN.
        lsn: String,
    },
    /// One upstream transaction's changes within the client's scopes.
    Changes {
        /// The transaction's commit LSN.
        lsn: String,
        /// The changes, in order.
        changes: Vec<Change>,
    },
    /// Everything up to this LSN has been streamed to the client.
    Checkpoint {
        /// The LSN.
        lsn: String,
    },
}

/// One row change in a `changes` frame.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "op", rename_all = "snake_case")]
pub enum Change {
    /// The row now reads like this (inserted, updated, or entered the scope).
    Upsert {
        /// The collection.
        collection: String,
        /// The row's synced fields.
        row: serde_json::Value,
        /// The row's version.
        version: i64,
    },
    /// The row is gone (deleted, or it left the scope).
    Delete {
        /// The collection.
        collection: String,
        /// The primary key fields.
        key: serde_json::Value,
        /// The version of the row that is gone.
        version: i64,
    },
    /// Every row of the collection is gone (`TRUNCATE`).
    Truncate {
        /// The collection.
        collection: String,
    },
}

/// An LSN as PostgreSQL prints it (`16/B374D848`).
pub fn format_lsn(lsn: u64) -> String {
    format!("{:X}/{:X}", lsn >> 32, lsn & 0xFFFF_FFFF)
}

/// Parses an LSN as PostgreSQL prints it.
pub fn parse_lsn(text: &str) -> Option<u64> {
    let (high, low) = text.split_once('/')?;
    let high = u64::from_str_radix(high, 16).ok()?;
    let low = u64::from_str_radix(low, 16).ok()?;
    (high <= u32::MAX as u64 && low <= u32::MAX as u64).then_some((high << 32) | low)
}
