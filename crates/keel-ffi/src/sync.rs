//! Sync with PostgreSQL through keel-relay, for Swift, Kotlin and Python
//! (`docs/sync.md`): [`Database::sync`] starts keel's sync loop with a foreign
//! [`TokenProvider`] and an optional [`SyncListener`], and returns a
//! [`SyncHandle`] (`status`, `pause`, `resume`, `wait_uploaded`, `stop`).
//!
//! The loop is keel-query's (`keel-sync` thread). Foreign code is called on keel
//! threads only: the token provider on `keel-sync` (at each connect and after
//! `token_expired`), the listener on `keel-sync-status` (each status change, latest
//! only) and `keel-sync-events` (refusals), through [`crate::callbacks`]' guard:
//! an exception is logged and ignored (a provider that throws gives no token; the
//! loop retries after its backoff).

use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

use crate::callbacks::{guarded, Foreign, ForeignCall};
use crate::db::Database;
use crate::error::{CallbackError, KeelError};
use crate::tasks::{run_async, Runner};

/// Gives the JWT the relay checks; `null`: no token now.
#[uniffi::export(callback_interface)]
pub trait TokenProvider: Send + Sync {
    /// A token for the relay (asked at each connect and after it expired).
    fn token(&self) -> Result<Option<String>, CallbackError>;
}

/// Hears how sync goes.
#[uniffi::export(callback_interface)]
pub trait SyncListener: Send + Sync {
    /// The status changed (latest only: a slow listener skips to the newest).
    fn on_status(&self, status: SyncStatus) -> Result<(), CallbackError>;
    /// The relay refused these operations; they were rolled back locally.
    fn on_refused(&self, ops: Vec<RefusedOp>) -> Result<(), CallbackError>;
}

/// What [`Database::sync`] connects to.
#[derive(Debug, Clone, uniffi::Record)]
pub struct SyncOptions {
    /// The relay's WebSocket (`ws://host:port/sync`).
    pub url: String,
    /// The collections to download; empty: every synced collection.
    pub scopes: Vec<String>,
    /// Operations per upload batch, at most (0: the default, 500).
    pub batch_ops: u32,
}

/// Where sync stands (keel-query's `SyncStatus`).
#[derive(Debug, Clone, PartialEq, Eq, uniffi::Record)]
pub struct SyncStatus {
    /// A session with the relay is open.
    pub connected: bool,
    /// A batch is on its way.
    pub uploading: bool,
    /// A snapshot or downloaded rows are being applied.
    pub downloading: bool,
    /// Operations committed locally and not acknowledged.
    pub pending_ops: u64,
    /// The last LSN the download reached.
    pub last_synced_lsn: Option<String>,
    /// Why the last connection or upload failed.
    pub last_error: Option<String>,
    /// The snapshot arriving, while one is; null once it is applied whole.
    pub snapshot: Option<SnapshotProgress>,
}

/// How far a snapshot of the client's scopes has come (keel-query's
/// `SnapshotProgress`): it arrives in pages in primary key order, each applied
/// in its own local transaction, and one cut off continues after its last
/// applied page at the next connection.
#[derive(Debug, Clone, PartialEq, Eq, uniffi::Record)]
pub struct SnapshotProgress {
    /// Rows applied locally so far, those applied before a resume included.
    pub rows_applied: u64,
    /// Rows the snapshot holds, as the relay counted them when it began.
    pub rows_total: u64,
    /// This snapshot continues one an earlier connection began.
    pub resumed: bool,
    /// Applied whole: rows it did not name are gone, and the changes that
    /// arrived meanwhile are applied.
    pub done: bool,
}

impl From<keel_query::SnapshotProgress> for SnapshotProgress {
    fn from(p: keel_query::SnapshotProgress) -> SnapshotProgress {
        SnapshotProgress {
            rows_applied: p.rows_applied,
            rows_total: p.rows_total,
            resumed: p.resumed,
            done: p.done,
        }
    }
}

impl From<keel_query::SyncStatus> for SyncStatus {
    fn from(s: keel_query::SyncStatus) -> SyncStatus {
        SyncStatus {
            connected: s.connected,
            uploading: s.uploading,
            downloading: s.downloading,
            pending_ops: s.pending_ops,
            last_synced_lsn: s.last_synced_lsn,
            last_error: s.last_error,
            snapshot: s.snapshot.map(Into::into),
        }
    }
}

/// One refused operation, rolled back locally.
#[derive(Debug, Clone, PartialEq, Eq, uniffi::Record)]
pub struct RefusedOp {
    /// Its sequence number.
    pub seq: i64,
    /// The collection.
    pub collection: String,
    /// The row's key as JSON.
    pub key: String,
    /// `insert`, `patch` or `delete`.
    pub op: String,
    /// The relay's reason (`out_of_scope`, …).
    pub reason: String,
    /// Details for people.
    pub message: String,
}

/// A running sync client; `stop()` (or dropping it) stops it.
#[derive(uniffi::Object)]
pub struct SyncHandle {
    inner: Mutex<Option<keel_query::SyncHandle>>,
    forwarders: Mutex<Vec<JoinHandle<()>>>,
}

impl std::fmt::Debug for SyncHandle {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("SyncHandle")
    }
}

fn closed() -> KeelError {
    KeelError::Closed {
        message: "sync: the handle is closed".into(),
    }
}

#[uniffi::export]
impl Database {
    /// Starts syncing with a keel relay: the outbox (every write to a `(sync)`
    /// collection) goes up, the rows of `scopes` come down into the collections.
    pub fn sync(
        &self,
        options: SyncOptions,
        token_provider: Box<dyn TokenProvider>,
        listener: Option<Box<dyn SyncListener>>,
    ) -> Result<Arc<SyncHandle>, KeelError> {
        let provider = Arc::new(Foreign::new(token_provider));
        let tokens: keel_query::TokenProvider = Arc::new(move || {
            let _call = ForeignCall::enter()?;
            let p = &provider;
            match std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| p.token())) {
                Ok(Ok(t)) => t,
                Ok(Err(e)) => {
                    tracing::warn!("sync token provider: {e}; no token");
                    None
                }
                Err(_) => {
                    tracing::warn!("sync token provider panicked; no token");
                    None
                }
            }
        });
        let mut o = keel_query::SyncOptions::new(options.url, tokens);
        o.scopes = options.scopes;
        if options.batch_ops > 0 {
            o.batch_ops = options.batch_ops as usize;
        }
        o.min_backoff = Duration::from_millis(100);
        let handle = self.db.sync(o)?;
        let mut forwarders = Vec::new();
        if let Some(listener) = listener {
            let listener = Arc::new(Foreign::new(listener));
            let statuses = handle.status();
            let l = Arc::clone(&listener);
            let spawn = |name: &str, f: Box<dyn FnOnce() + Send>| {
                std::thread::Builder::new()
                    .name(name.into())
                    .spawn(f)
                    .map_err(|e| KeelError::Io {
                        message: format!("sync: could not start {name}: {e}"),
                    })
            };
            forwarders.push(spawn(
                "keel-sync-status",
                Box::new(move || {
                    for s in statuses {
                        guarded("sync status listener", || l.on_status(s.into()));
                    }
                }),
            )?);
            let events = handle.events();
            forwarders.push(spawn(
                "keel-sync-events",
                Box::new(move || {
                    for e in events {
                        if let keel_query::SyncEvent::Refused { ops } = e {
                            let ops = ops
                                .into_iter()
                                .map(|o| RefusedOp {
                                    seq: o.seq,
                                    collection: o.collection,
                                    key: o.key,
                                    op: o.op,
                                    reason: o.reason,
                                    message: o.message,
                                })
                                .collect();
                            guarded("sync refusal listener", || listener.on_refused(ops));
                        }
                    }
                }),
            )?);
        }
        Ok(Arc::new(SyncHandle {
            inner: Mutex::new(Some(handle)),
            forwarders: Mutex::new(forwarders),
        }))
    }
}

#[uniffi::export]
impl SyncHandle {
    /// The status now.
    pub fn status(&self) -> Result<SyncStatus, KeelError> {
        let g = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        Ok(g.as_ref().ok_or_else(closed)?.current_status().into())
    }

    /// Closes the connection until `resume`; local writes keep queueing.
    pub fn pause(&self) {
        if let Some(h) = self
            .inner
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .as_ref()
        {
            h.pause();
        }
    }

    /// Connects again after `pause`.
    pub fn resume(&self) {
        if let Some(h) = self
            .inner
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .as_ref()
        {
            h.resume();
        }
    }

    /// Resolves once every operation committed before the call is acknowledged
    /// (or refused), or after `timeout_ms` (then `false`).
    pub async fn wait_uploaded(
        &self,
        db: Arc<Database>,
        timeout_ms: u64,
    ) -> Result<bool, KeelError> {
        // The wait polls the outbox through `db`; the handle's own copy stays here.
        let waiter = {
            let g = self.inner.lock().unwrap_or_else(|e| e.into_inner());
            g.as_ref().ok_or_else(closed)?.waiter()
        };
        run_async(&db.db, Runner::OwnThread, "sync-wait", move |_| {
            Ok(waiter.wait_for(Duration::from_millis(timeout_ms))?)
        })
        .await
    }

    /// Stops the loop and its thread (idempotent); what is not uploaded stays in
    /// the outbox for the next `sync`. (Not `close`: Kotlin's `close()` frees the
    /// native handle.)
    pub fn stop(&self) {
        let h = self.inner.lock().unwrap_or_else(|e| e.into_inner()).take();
        drop(h);
        let threads =
            std::mem::take(&mut *self.forwarders.lock().unwrap_or_else(|e| e.into_inner()));
        for t in threads {
            // A listener that closes its own handle must not wait for itself.
            if t.thread().id() != std::thread::current().id() {
                let _ = t.join();
            }
        }
    }
}

impl Drop for SyncHandle {
    fn drop(&mut self) {
        self.stop();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_snapshot_in_progress_reaches_the_foreign_status() {
        let core = keel_query::SyncStatus {
            downloading: true,
            snapshot: Some(keel_query::SnapshotProgress {
                rows_applied: 500,
                rows_total: 1_200,
                resumed: true,
                done: false,
            }),
            ..keel_query::SyncStatus::default()
        };
        let status = SyncStatus::from(core);
        assert!(status.downloading);
        assert_eq!(
            status.snapshot,
            Some(SnapshotProgress {
                rows_applied: 500,
                rows_total: 1_200,
                resumed: true,
                done: false,
            })
        );
        assert_eq!(
            SyncStatus::from(keel_query::SyncStatus::default()).snapshot,
            None
        );
    }
}
