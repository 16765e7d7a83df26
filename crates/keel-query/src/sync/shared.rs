//! What the sync loop and its handle share: the options, the status and events
//! the app reads, and the commands the handle sends the loop.

use std::sync::mpsc::Sender;
use std::sync::{Arc, Condvar, Mutex};
use std::time::Duration;

/// Asked for a token at every connect and after the relay said `token_expired`;
/// `None`: no token now (the loop tries again after its backoff).
pub type TokenProvider = Arc<dyn Fn() -> Option<String> + Send + Sync>;

/// What [`Database::sync`](crate::db::database::Database::sync) connects to and how.
#[derive(Clone)]
pub struct SyncOptions {
    /// The relay's WebSocket, `ws://host:port/sync` (`wss://` is not built: put a
    /// TLS-terminating proxy in front, or use a `ws://` on a private network).
    pub url: String,
    /// Gives the JWT the relay checks.
    pub token_provider: TokenProvider,
    /// The collections to download (full names, `blog.Post`); empty: every synced
    /// collection of the schema. Uploads cover every synced collection regardless.
    pub scopes: Vec<String>,
    /// Operations per upload batch, at most (halved when the relay says
    /// `batch_too_large`).
    pub batch_ops: usize,
    /// The first retry waits about this long; each failure doubles it (with
    /// jitter: a random wait between half the delay and the delay).
    pub min_backoff: Duration,
    /// The longest wait between retries.
    pub max_backoff: Duration,
}

impl SyncOptions {
    /// Options with the defaults: every synced collection, 500 operations per
    /// batch, backoff from 100 ms to 10 s.
    pub fn new(url: impl Into<String>, token_provider: TokenProvider) -> SyncOptions {
        SyncOptions {
            url: url.into(),
            token_provider,
            scopes: Vec::new(),
            batch_ops: 500,
            min_backoff: Duration::from_millis(100),
            max_backoff: Duration::from_secs(10),
        }
    }
}

impl std::fmt::Debug for SyncOptions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SyncOptions")
            .field("url", &self.url)
            .field("scopes", &self.scopes)
            .field("batch_ops", &self.batch_ops)
            .finish_non_exhaustive()
    }
}

/// Where sync stands.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct SyncStatus {
    /// A session with the relay is open (welcomed).
    pub connected: bool,
    /// A batch is on its way and not answered yet.
    pub uploading: bool,
    /// A snapshot is arriving, or downloaded rows are being applied.
    pub downloading: bool,
    /// Operations committed locally and not acknowledged by the relay.
    pub pending_ops: u64,
    /// The last LSN the download reached (a `changes`, `snapshot_done` or
    /// `checkpoint` frame), as PostgreSQL prints it.
    pub last_synced_lsn: Option<String>,
    /// Why the last connection or upload failed (cleared by the next welcome).
    pub last_error: Option<String>,
    /// The snapshot arriving, while one is (`None` once it is applied whole).
    pub snapshot: Option<SnapshotProgress>,
}

/// How far a snapshot of the client's scopes has come. It arrives in pages of
/// rows in primary key order, each applied in its own local transaction; the
/// last page applied is recorded in the file, so a snapshot cut off (a lost
/// connection, a closed app) continues after it at the next connection.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct SnapshotProgress {
    /// Rows applied locally so far, those applied before a resume included.
    pub rows_applied: u64,
    /// Rows the snapshot holds, as the relay counted them when it began.
    pub rows_total: u64,
    /// This snapshot continues one an earlier connection began.
    pub resumed: bool,
    /// The snapshot is applied whole: rows it did not name are gone and the
    /// changes that arrived meanwhile are applied.
    pub done: bool,
}

/// One refused operation, rolled back locally.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RefusedOp {
    /// Its sequence number.
    pub seq: i64,
    /// The collection.
    pub collection: String,
    /// The row's key, as JSON (`{"id":"p1"}`).
    pub key: String,
    /// `insert`, `patch` or `delete`.
    pub op: String,
    /// The relay's reason (`out_of_scope`, `rejected_by_database`, …).
    pub reason: String,
    /// Details for people.
    pub message: String,
}

/// Something the app may want to react to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SyncEvent {
    /// The relay refused these operations; nothing of their batch was applied,
    /// they were rolled back locally (the rows read again as the server's with
    /// the remaining operations on top), and the rest is sent again.
    Refused {
        /// The refused operations.
        ops: Vec<RefusedOp>,
    },
    /// A snapshot began, a page of it was applied, or it finished.
    Snapshot(SnapshotProgress),
    /// The relay refused the token for another reason than expiry
    /// (`token_bad_signature`, …): the loop retries after its backoff.
    TokenRefused {
        /// The relay's code.
        code: String,
        /// Details for people.
        message: String,
    },
    /// A frame from the relay could not be used: nothing of it was applied, the
    /// connection was dropped, and the loop reconnects after its backoff (the
    /// fresh snapshot brings whatever the frame carried). The same reading as the
    /// relay's `error` codes, for the other direction.
    BadFrame {
        /// `malformed_frame` (not JSON, truncated, not an object, no `type`, a
        /// change or row that cannot be read), `unknown_collection` (a
        /// collection this client did not subscribe to), `frame_too_large`
        /// (over the WebSocket's message limit), `binary_frame`.
        code: String,
        /// Details for people.
        message: String,
    },
}

/// What the loop and the handles share.
pub(crate) struct Shared {
    pub(crate) status: Mutex<(u64, SyncStatus)>,
    changed: Condvar,
    pub(crate) events: Mutex<Vec<Sender<SyncEvent>>>,
}

impl Shared {
    pub(crate) fn new() -> Shared {
        Shared {
            status: Mutex::new((0, SyncStatus::default())),
            changed: Condvar::new(),
            events: Mutex::new(Vec::new()),
        }
    }

    /// Changes the status; readers are woken only when it differs.
    pub(crate) fn update(&self, f: impl FnOnce(&mut SyncStatus)) {
        let mut g = self.status.lock().unwrap_or_else(|p| p.into_inner());
        let before = g.1.clone();
        f(&mut g.1);
        if g.1 != before {
            g.0 += 1;
            self.changed.notify_all();
        }
    }

    /// Wakes the waiters without a change (an ack may have finished a wait).
    pub(crate) fn poke(&self) {
        let mut g = self.status.lock().unwrap_or_else(|p| p.into_inner());
        g.0 += 1;
        self.changed.notify_all();
    }

    pub(crate) fn current(&self) -> SyncStatus {
        self.status
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .1
            .clone()
    }

    /// Sends `event` to every listener still there.
    pub(crate) fn emit(&self, event: SyncEvent) {
        let mut listeners = self.events.lock().unwrap_or_else(|p| p.into_inner());
        listeners.retain(|tx| tx.send(event.clone()).is_ok());
    }

    /// Waits up to `timeout` for a status newer than generation `seen`.
    pub(crate) fn wait_newer(&self, seen: u64, timeout: Duration) -> (u64, SyncStatus) {
        let g = self.status.lock().unwrap_or_else(|p| p.into_inner());
        let (g, _) = self
            .changed
            .wait_timeout_while(g, timeout, |s| s.0 == seen)
            .unwrap_or_else(|p| p.into_inner());
        (g.0, g.1.clone())
    }
}

/// What the handle tells the loop.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Command {
    /// A commit appended operations.
    Wake,
    /// Close the connection and wait.
    Pause,
    /// Connect again.
    Resume,
    /// Stop the thread.
    Close,
}
