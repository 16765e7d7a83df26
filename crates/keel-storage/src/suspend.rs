//! Suspension's public face: [`SuspendOptions`], [`SuspendReport`],
//! [`ResumeReport`]. How it works (connections closed, threads parked, what
//! resume re-checks) is in `park.rs`; the guarantees are on
//! [`Store::suspend`](crate::store::Store::suspend) and [`Store::resume`](crate::store::Store::resume).

use std::time::Duration;

use crate::checkpointer::CheckpointOutcome;

/// How [`Store::suspend`](crate::store::Store::suspend) treats work in flight and new work.
///
/// ```
/// use keel_storage::SuspendOptions;
/// use std::time::Duration;
/// let o = SuspendOptions::default()
///     .checkpoint_first(true) // going to the background: empty the WAL first
///     .fail_fast(true)        // reads and writes while suspended fail with `Suspended`
///     .interrupt_after(Duration::from_millis(20));
/// assert!(o.fail_fast);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct SuspendOptions {
    /// Run a TRUNCATE checkpoint (bounded by `StoreOptions::truncate_timeout`)
    /// before letting go of the connections, so the WAL is empty while the app is
    /// in the background and the next launch has nothing to sync or recover.
    /// Default `false`.
    pub checkpoint_first: bool,
    /// While suspended, new reads and writes fail at once with
    /// [`Error::Suspended`](crate::error::Error::Suspended) instead of waiting for resume.
    /// Default `false` (they wait).
    pub fail_fast: bool,
    /// How long the write group or read already running may go on before it is
    /// interrupted (it then fails with the retryable
    /// [`Error::Suspended`](crate::error::Error::Suspended)). Default 50 ms.
    pub interrupt_after: Duration,
    /// The bound on the whole suspend: work that does not stop by then (a closure
    /// busy in Rust code between two SQL statements cannot be interrupted) makes
    /// `suspend` return [`Error::SuspendTimeout`](crate::error::Error::SuspendTimeout).
    /// Default 1 s.
    pub timeout: Duration,
}

impl Default for SuspendOptions {
    fn default() -> Self {
        SuspendOptions {
            checkpoint_first: false,
            fail_fast: false,
            interrupt_after: Duration::from_millis(50),
            timeout: Duration::from_secs(1),
        }
    }
}

impl SuspendOptions {
    /// Set [`SuspendOptions::checkpoint_first`].
    pub fn checkpoint_first(mut self, yes: bool) -> Self {
        self.checkpoint_first = yes;
        self
    }
    /// Set [`SuspendOptions::fail_fast`].
    pub fn fail_fast(mut self, yes: bool) -> Self {
        self.fail_fast = yes;
        self
    }
    /// Set [`SuspendOptions::interrupt_after`].
    pub fn interrupt_after(mut self, d: Duration) -> Self {
        self.interrupt_after = d;
        self
    }
    /// Set [`SuspendOptions::timeout`].
    pub fn timeout(mut self, d: Duration) -> Self {
        self.timeout = d;
        self
    }
}

/// What [`Store::suspend`](crate::store::Store::suspend) did.
///
/// ```
/// # use keel_storage::{Store, StoreOptions, SuspendOptions};
/// # let dir = tempfile::tempdir().unwrap();
/// let store = Store::open(dir.path().join("s.db"), StoreOptions::default())?;
/// let r = store.suspend(SuspendOptions::default())?;
/// assert!(!r.interrupted);
/// store.resume()?;
/// # Ok::<(), keel_storage::Error>(())
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct SuspendReport {
    /// The TRUNCATE checkpoint's outcome, with [`SuspendOptions::checkpoint_first`]
    /// (`None` without it, or if it failed: the failure is logged and the suspend
    /// goes on — letting go of the locks matters more).
    pub checkpoint: Option<CheckpointOutcome>,
    /// True if work in flight had to be interrupted (it failed with
    /// [`Error::Suspended`](crate::error::Error::Suspended)).
    pub interrupted: bool,
    /// False if the store was suspended already (nothing was done).
    pub newly_suspended: bool,
    /// From the call to no connection open.
    pub duration: Duration,
}

/// What [`Store::resume`](crate::store::Store::resume) found.
///
/// ```
/// # use keel_storage::{Store, StoreOptions, SuspendOptions};
/// # let dir = tempfile::tempdir().unwrap();
/// let store = Store::open(dir.path().join("r.db"), StoreOptions::default())?;
/// store.suspend(SuspendOptions::default())?;
/// let r = store.resume()?;
/// assert!(r.was_suspended && !r.external_changes);
/// # Ok::<(), keel_storage::Error>(())
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct ResumeReport {
    /// False if the store was not suspended (nothing was done).
    pub was_suspended: bool,
    /// The database file or its `-wal` changed while suspended: another process
    /// wrote (or checkpointed). What this process cached (live query results) may
    /// be stale; the object layer refreshes its subscriptions on it.
    pub external_changes: bool,
    /// How long the store was suspended.
    pub suspended_for: Duration,
}
