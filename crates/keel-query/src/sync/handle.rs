//! The public face of sync: [`Database::sync`] starts the client's loop on a
//! keel-owned thread (`keel-sync`) and returns a [`SyncHandle`]: its status as a
//! stream of [`SyncStatus`], its typed [`SyncEvent`]s,
//! `pause` / `resume`, `wait_uploaded`, and `close` (or drop), which stops the thread.

use std::sync::mpsc::{self, Receiver, Sender};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crate::base::error::{Error, Result};
use crate::db::database::Database;
use crate::sync::client;
use crate::sync::ledger;
use crate::sync::shared::{Command, Shared, SyncEvent, SyncOptions, SyncStatus};

/// A running sync client. Dropping it (or [`close`](Self::close)) stops the loop
/// and joins its thread; what is not uploaded stays in the outbox for the next
/// [`Database::sync`].
pub struct SyncHandle {
    db: Database,
    shared: Arc<Shared>,
    commands: Sender<Command>,
    thread: Option<JoinHandle<()>>,
}

/// The status as it changes: each `next()` blocks until the status differs from
/// the last one it returned (latest only: a slow reader skips to the newest).
/// Ends when the handle is closed.
pub struct StatusStream {
    shared: Arc<Shared>,
    seen: Option<u64>,
    commands: Sender<Command>,
}

impl Iterator for StatusStream {
    type Item = SyncStatus;

    fn next(&mut self) -> Option<SyncStatus> {
        loop {
            let (generation, status) = match self.seen {
                None => {
                    let g = self.shared.status.lock().unwrap_or_else(|p| p.into_inner());
                    (g.0, g.1.clone())
                }
                Some(seen) => self.shared.wait_newer(seen, Duration::from_millis(200)),
            };
            if Some(generation) != self.seen {
                self.seen = Some(generation);
                return Some(status);
            }
            // The loop is gone when its command channel is.
            if self.commands.send(Command::Wake).is_err() {
                return None;
            }
        }
    }
}

impl Database {
    /// Starts syncing this database with a keel relay (`docs/sync.md`): uploads
    /// the outbox — every write to a `(sync)` collection, queued in the write's
    /// own transaction, offline or not — and downloads the rows of `scopes` into
    /// the collections, where live queries see them as ordinary changes. The loop
    /// runs on its own thread; it reconnects with exponential backoff and jitter.
    ///
    /// [`Error::UnknownCollection`] if a scope names a collection that does not
    /// sync.
    pub fn sync(&self, options: SyncOptions) -> Result<SyncHandle> {
        for name in &options.scopes {
            let synced = self
                .schema()
                .collection(name)
                .is_some_and(|c| self.schema().table(c.table).sync.is_some());
            if !synced {
                return Err(Error::UnknownCollection {
                    op: "sync",
                    collection: name.clone(),
                });
            }
        }
        self.write_blocking(|txn| {
            ledger::ensure(txn.connection())
                .and_then(|()| ledger::client_id(txn.connection()).map(|_| ()))
                .map_err(|e| Error::sqlite("prepare the sync tables", "keel_sync_state", e))
        })?;
        let shared = Arc::new(Shared::new());
        let (tx, rx) = mpsc::channel();
        let wake = tx.clone();
        let wake = Mutex::new(wake);
        self.inner().outbox_waker.set(Some(Arc::new(move || {
            let _ = wake
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .send(Command::Wake);
        })));
        let db = self.clone();
        let s2 = Arc::clone(&shared);
        let thread = std::thread::Builder::new()
            .name("keel-sync".into())
            .spawn(move || client::run(db, options, s2, rx))
            .map_err(|e| {
                Error::Storage(keel_storage::Error::Io {
                    op: "start the keel-sync thread",
                    path: self.inner().path().to_path_buf(),
                    source: Arc::new(e),
                })
            })?;
        Ok(SyncHandle {
            db: self.clone(),
            shared,
            commands: tx,
            thread: Some(thread),
        })
    }
}

impl SyncHandle {
    /// The status now, then each change (see [`StatusStream`]).
    pub fn status(&self) -> StatusStream {
        StatusStream {
            shared: Arc::clone(&self.shared),
            seen: None,
            commands: self.commands.clone(),
        }
    }

    /// The status now.
    pub fn current_status(&self) -> SyncStatus {
        self.shared.current()
    }

    /// A receiver of every event from now on.
    pub fn events(&self) -> Receiver<SyncEvent> {
        let (tx, rx) = mpsc::channel();
        self.shared
            .events
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push(tx);
        rx
    }

    /// Closes the connection and stops retrying until [`resume`](Self::resume);
    /// local writes keep queueing.
    pub fn pause(&self) {
        let _ = self.commands.send(Command::Pause);
    }

    /// Connects again after [`pause`](Self::pause).
    pub fn resume(&self) {
        let _ = self.commands.send(Command::Resume);
    }

    /// Blocks until every operation committed locally before this call is
    /// acknowledged by the relay (or refused and rolled back).
    pub fn wait_uploaded(&self) -> Result<()> {
        while !self.wait_uploaded_for(Duration::from_secs(3600))? {}
        Ok(())
    }

    /// [`wait_uploaded`](Self::wait_uploaded) for at most `timeout`; `false` when
    /// operations were still pending then.
    pub fn wait_uploaded_for(&self, timeout: Duration) -> Result<bool> {
        self.waiter().wait_for(timeout)
    }

    /// A waiter for uploads that can wait on another thread than the handle's.
    pub fn waiter(&self) -> UploadWaiter {
        UploadWaiter {
            db: self.db.clone(),
            shared: Arc::clone(&self.shared),
        }
    }

    /// Stops the loop and joins its thread (what drop does).
    pub fn close(mut self) {
        self.stop();
    }

    fn stop(&mut self) {
        let _ = self.commands.send(Command::Close);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
        self.db.inner().outbox_waker.set(None);
        // Event receivers end here, not when the last waiter lets go.
        self.shared
            .events
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clear();
    }
}

/// Waits for uploads ([`SyncHandle::waiter`]).
#[derive(Clone)]
pub struct UploadWaiter {
    db: Database,
    shared: Arc<Shared>,
}

impl UploadWaiter {
    /// Blocks until every operation committed before this call is acknowledged
    /// (or refused and rolled back), for at most `timeout`; `false` when
    /// operations were still pending then.
    pub fn wait_for(&self, timeout: Duration) -> Result<bool> {
        let read = |through: Option<i64>| {
            self.db.inner().store.read(|conn| {
                let sql = |e| Error::sqlite("read the sync outbox", "keel_sync_outbox", e);
                let last = ledger::last_seq(conn).map_err(sql)?;
                let pending =
                    ledger::pending_count(conn, Some(through.unwrap_or(last))).map_err(sql)?;
                Ok::<_, Error>((last, pending))
            })
        };
        let (through, mut pending) = read(None)?;
        let deadline = Instant::now() + timeout;
        let mut seen = self
            .shared
            .status
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .0;
        while pending > 0 {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Ok(false);
            }
            seen = self
                .shared
                .wait_newer(seen, left.min(Duration::from_millis(100)))
                .0;
            pending = read(Some(through))?.1;
        }
        Ok(true)
    }
}

impl Drop for SyncHandle {
    fn drop(&mut self) {
        self.stop();
    }
}
