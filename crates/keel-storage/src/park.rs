//! Suspension: the store lets go of every file lock and takes them back on resume.
//!
//! iOS kills a suspended app that still holds a file lock in a shared (App Group)
//! container (`0xdead10cc`). In WAL mode every open connection holds locks: the
//! `-shm` read-lock and "DMS" bytes, the WAL write lock while a transaction runs,
//! the main file's shared lock. So [`Store::suspend`](crate::store::Store::suspend) closes
//! them all — the writer's, every pooled reader's and the checkpointer's — and the
//! threads that own them stay alive, parked on this module's [`Suspension`] until
//! [`Store::resume`](crate::store::Store::resume). Connections come back lazily: the writer
//! reopens its connection at the first write after resume, the pool at the first
//! read, the checkpointer at its next checkpoint.
//!
//! What resume re-checks: another process may have written while this one was
//! suspended. A fingerprint of the database file and its `-wal` (sizes, times, the
//! WAL header) is taken when the last connection closed; if it differs at resume,
//! (1) the writer syncs that WAL through the open-barrier policy before its first
//! commit lands on top of it — the same reason the open barrier exists, and skipped
//! when nothing changed, (2) the next write bumps the identity epoch (the WAL may
//! have restarted), and (3) [`ResumeReport::external_changes`](crate::suspend::ResumeReport::external_changes) tells the layer above
//! that cached state (subscriptions) may be stale.

use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Condvar, Mutex, MutexGuard};
use std::time::{Duration, Instant, SystemTime};

use rusqlite::InterruptHandle;

use crate::conn::KConn;
use crate::paths::wal_path;

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

thread_local! {
    /// Set by [`fail_fast_while_suspended`] on this thread.
    static NO_WAIT: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// Run `f` so that a read it makes while its store is suspended fails at once
/// with [`Error::Suspended`](crate::error::Error::Suspended) instead of waiting for
/// resume, whatever the suspend's `fail_fast`. For synchronous calls from a UI
/// thread (the FFI's): the resume that would end the wait is called from that
/// same thread, so waiting there could never end.
///
/// ```
/// # use keel_storage::{Error, Store, StoreOptions, SuspendOptions};
/// # let dir = tempfile::tempdir().unwrap();
/// let store = Store::open(dir.path().join("f.db"), StoreOptions::default())?;
/// store.suspend(SuspendOptions::default())?; // reads would wait...
/// let r = keel_storage::fail_fast_while_suspended(|| store.read(|_| Ok::<_, Error>(())));
/// assert!(matches!(r, Err(Error::Suspended { .. }))); // ...but not this one
/// # store.resume()?;
/// # Ok::<(), Error>(())
/// ```
pub fn fail_fast_while_suspended<T>(f: impl FnOnce() -> T) -> T {
    struct Restore(bool);
    impl Drop for Restore {
        fn drop(&mut self) {
            NO_WAIT.with(|c| c.set(self.0));
        }
    }
    let _restore = Restore(NO_WAIT.with(|c| c.replace(true)));
    f()
}

/// True inside [`fail_fast_while_suspended`] on this thread.
pub(crate) fn no_wait() -> bool {
    NO_WAIT.with(|c| c.get())
}

/// Which of keel's threads parks.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(crate) enum Parker {
    Writer,
    Checkpointer,
}

#[derive(Default)]
struct St {
    suspended: bool,
    fail_fast: bool,
    /// The writer / checkpointer thread sits in `park` (holding no connection).
    writer_parked: bool,
    ckpt_parked: bool,
    /// Whether those threads hold connections at all (not after a failed barrier).
    threads: bool,
    writer_int: Option<InterruptHandle>,
    ckpt_int: Option<InterruptHandle>,
    since: Option<Instant>,
    stamp: Option<FileStamp>,
}

impl St {
    fn released(&self) -> bool {
        !self.threads || (self.writer_parked && self.ckpt_parked)
    }
}

/// The suspension state one store's threads, pool and handles share.
#[derive(Default)]
pub(crate) struct Suspension {
    /// Cheap check on the hot paths (every write, the writer's loop).
    flag: AtomicBool,
    /// Set when the grace period ends and cleared by resume: the writer's
    /// progress handler reads it and stops the SQL it runs within a few VM
    /// instructions. `sqlite3_interrupt` alone only hits a statement that is
    /// running at that instant, so a write closure issuing many short statements
    /// from Rust would mostly slip between the interrupts.
    stopping: AtomicBool,
    st: Mutex<St>,
    cv: Condvar,
    /// Set by resume when another process changed the files: the writer syncs the
    /// WAL (open-barrier policy) before its first commit, and bumps the epoch.
    pub(crate) external: AtomicBool,
}

impl Suspension {
    /// True from the end of a suspend's grace period until resume (see
    /// `stopping`).
    pub(crate) fn is_stopping(&self) -> bool {
        self.stopping.load(Ordering::Relaxed)
    }

    pub(crate) fn is_suspended(&self) -> bool {
        self.flag.load(Ordering::Acquire)
    }

    /// Suspended with `fail_fast`: new work fails at once.
    pub(crate) fn fails_fast(&self) -> bool {
        self.is_suspended() && lock(&self.st).fail_fast
    }

    /// A thread (re)opened or closed its connection: what `suspend` interrupts.
    pub(crate) fn set_interrupt(&self, who: Parker, h: Option<InterruptHandle>) {
        let mut st = lock(&self.st);
        match who {
            Parker::Writer => st.writer_int = h,
            Parker::Checkpointer => st.ckpt_int = h,
        }
    }

    /// Called by a keel thread that let go of its connection: wait until resumed.
    /// (A close resumes first, so a parked thread always wakes.)
    pub(crate) fn park(&self, who: Parker) {
        let mut st = lock(&self.st);
        match who {
            Parker::Writer => st.writer_parked = true,
            Parker::Checkpointer => st.ckpt_parked = true,
        }
        self.cv.notify_all();
        // A resume followed at once by another suspend leaves it parked: the
        // second suspend finds it let go already.
        while st.suspended {
            st = self.cv.wait(st).unwrap_or_else(|p| p.into_inner());
        }
        match who {
            Parker::Writer => st.writer_parked = false,
            Parker::Checkpointer => st.ckpt_parked = false,
        }
    }

    /// Start suspending; false if already suspended. `threads`: whether the writer
    /// and checkpointer threads hold connections (not after a failed barrier).
    pub(crate) fn begin(&self, fail_fast: bool, threads: bool) -> bool {
        let mut st = lock(&self.st);
        if st.suspended {
            return false;
        }
        st.suspended = true;
        st.fail_fast = fail_fast;
        st.threads = threads;
        st.since = Some(Instant::now());
        st.stamp = None;
        self.flag.store(true, Ordering::Release);
        true
    }

    /// Wait until both threads let go, at most until `deadline`.
    pub(crate) fn wait_released(&self, deadline: Instant) -> bool {
        let st = lock(&self.st);
        let left = deadline.saturating_duration_since(Instant::now());
        let (st, _) = self
            .cv
            .wait_timeout_while(st, left, |s| !s.released())
            .unwrap_or_else(|p| p.into_inner());
        st.released()
    }

    /// Interrupt what the writer and checkpointer are running (if they still hold
    /// a connection).
    pub(crate) fn interrupt_threads(&self) {
        self.stopping.store(true, Ordering::Relaxed);
        let st = lock(&self.st);
        if st.threads && !st.writer_parked {
            if let Some(h) = &st.writer_int {
                h.interrupt();
            }
        }
        if st.threads && !st.ckpt_parked {
            if let Some(h) = &st.ckpt_int {
                h.interrupt();
            }
        }
    }

    /// Every connection is closed: remember what the files looked like.
    pub(crate) fn record_stamp(&self, path: &Path) {
        lock(&self.st).stamp = Some(FileStamp::read(path));
    }

    /// End the suspension; returns `(was suspended, files changed, suspended for)`.
    pub(crate) fn end(&self, path: &Path) -> (bool, bool, Duration) {
        let mut st = lock(&self.st);
        if !st.suspended {
            return (false, false, Duration::ZERO);
        }
        let changed = match &st.stamp {
            Some(s) => *s != FileStamp::read(path),
            // Suspend did not finish letting go: assume the worst.
            None => true,
        };
        if changed {
            self.external.store(true, Ordering::Release);
        }
        st.suspended = false;
        st.fail_fast = false;
        self.stopping.store(false, Ordering::Relaxed);
        let since = st.since.take().map(|t| t.elapsed()).unwrap_or_default();
        self.flag.store(false, Ordering::Release);
        drop(st);
        self.cv.notify_all();
        (true, changed, since)
    }
}

/// What the database file and its `-wal` looked like: any write or checkpoint by
/// another process changes it (sizes, modification times, the WAL header with its
/// salts and checkpoint sequence).
#[derive(Debug, Clone, PartialEq, Eq)]
struct FileStamp {
    db: Option<(u64, Option<SystemTime>)>,
    wal: Option<(u64, Option<SystemTime>, [u8; 32])>,
}

impl FileStamp {
    fn read(path: &Path) -> FileStamp {
        let meta = |p: &Path| {
            std::fs::metadata(p)
                .ok()
                .map(|m| (m.len(), m.modified().ok()))
        };
        let wal = wal_path(path);
        let wal_stamp = meta(&wal).map(|(len, t)| {
            let mut h = [0u8; 32];
            if let Ok(mut f) = std::fs::File::open(&wal) {
                let _ = std::io::Read::read(&mut f, &mut h);
            }
            (len, t, h)
        });
        FileStamp {
            db: meta(path),
            wal: wal_stamp,
        }
    }
}

/// Close a connection without SQLite's checkpoint-on-last-close: a suspend must
/// let go at once (the checkpoint, with its sync, is what
/// [`SuspendOptions::checkpoint_first`](crate::suspend::SuspendOptions::checkpoint_first) is for) and must not write after the
/// store said it was letting go.
pub(crate) fn release(conn: KConn) {
    let _ = conn.conn.set_db_config(
        rusqlite::config::DbConfig::SQLITE_DBCONFIG_NO_CKPT_ON_CLOSE,
        true,
    );
    drop(conn);
}
