//! Sync policies: which primitive makes data durable, chosen per reason.
//!
//! A leaf of the crate: it also holds what `error` and `sim` need of syncs without
//! importing the VFS — the [`Primitive`] names and the last sync error of a
//! thread — and [`SyncContext`] runs primitives through a closure the VFS supplies.

use std::cell::Cell;
use std::fmt;
use std::path::Path;
use std::sync::Arc;

/// The kind of file a VFS operation touched.
///
/// ```
/// use keel_storage::FileKind;
/// assert_eq!(FileKind::Wal.name(), "wal");
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum FileKind {
    /// The main database file.
    MainDb,
    /// The write-ahead log (`<db>-wal`).
    Wal,
    /// A rollback journal (`<db>-journal`; only used before the switch to WAL).
    Journal,
    /// Temporary files, sub-journals, anything else.
    Other,
}

impl FileKind {
    /// Short lowercase name (`main_db`, `wal`, `journal`, `other`).
    pub fn name(self) -> &'static str {
        match self {
            FileKind::MainDb => "main_db",
            FileKind::Wal => "wal",
            FileKind::Journal => "journal",
            FileKind::Other => "other",
        }
    }

    pub(crate) fn index(self) -> usize {
        self as usize
    }
}

/// Why a sync is being issued; each reason has its own [`SyncPolicy`].
///
/// ```
/// use keel_storage::SyncReason;
/// assert_ne!(SyncReason::Commit, SyncReason::Checkpoint);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum SyncReason {
    /// A transaction commit on the writer (the WAL sync that makes a commit durable).
    Commit,
    /// A checkpoint (WAL sync before copying back, database sync after).
    Checkpoint,
    /// The open barrier: keel syncs a non-empty WAL left by a previous run before
    /// recovering from it.
    OpenBarrier,
}

/// A user-supplied sync implementation (tests inject latency and failures with it;
/// apps can log or route syncs).
///
/// ```
/// use keel_storage::{SyncContext, SyncHook};
/// #[derive(Debug)]
/// struct Logged;
/// impl SyncHook for Logged {
///     fn sync(&self, ctx: &SyncContext<'_>) -> std::io::Result<()> {
///         eprintln!("sync {:?} for {:?}", ctx.kind(), ctx.reason());
///         ctx.full_sync()
///     }
/// }
/// ```
pub trait SyncHook: Send + Sync + fmt::Debug {
    /// Make the file durable (or not). Return an error to fail the operation that
    /// asked for the sync (the commit fails with [`Error::SyncFailed`](crate::error::Error)).
    fn sync(&self, ctx: &SyncContext<'_>) -> std::io::Result<()>;
}

/// What a [`SyncHook`] is asked to sync, with the built-in primitives at hand.
///
/// ```
/// use keel_storage::{FileKind, SyncPolicy};
/// // Full sync for the WAL, a barrier for everything else.
/// let p = SyncPolicy::custom(|ctx| {
///     if ctx.kind() == FileKind::Wal { ctx.full_sync() } else { ctx.barrier_sync() }
/// });
/// # let _ = p;
/// ```
pub struct SyncContext<'a> {
    pub(crate) kind: FileKind,
    pub(crate) reason: SyncReason,
    pub(crate) db_path: &'a Path,
    pub(crate) data_only: bool,
    /// Runs a built-in policy's primitive on the file (the only place a sync
    /// becomes durable). The VFS supplies it: it knows the descriptor, SQLite's own
    /// xSync for a file without one, and (tests) the simulated disk.
    pub(crate) primitive: &'a dyn Fn(SyncPolicy) -> std::io::Result<()>,
}

impl fmt::Debug for SyncContext<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SyncContext")
            .field("kind", &self.kind)
            .field("reason", &self.reason)
            .field("db_path", &self.db_path)
            .finish()
    }
}

impl SyncContext<'_> {
    /// Which file is being synced.
    pub fn kind(&self) -> FileKind {
        self.kind
    }
    /// Why.
    pub fn reason(&self) -> SyncReason {
        self.reason
    }
    /// The store's main database path (the WAL is `<path>-wal`).
    pub fn db_path(&self) -> &Path {
        self.db_path
    }
    /// SQLite asked for a data-only sync (metadata may be skipped).
    pub fn data_only(&self) -> bool {
        self.data_only
    }
    /// Run the [`SyncPolicy::Full`] primitive (F_FULLFSYNC on Apple, fsync elsewhere).
    pub fn full_sync(&self) -> std::io::Result<()> {
        self.run(SyncPolicy::Full)
    }
    /// Run the [`SyncPolicy::Barrier`] primitive (F_BARRIERFSYNC on Apple, fdatasync elsewhere).
    pub fn barrier_sync(&self) -> std::io::Result<()> {
        self.run(SyncPolicy::Barrier)
    }
    /// Run the [`SyncPolicy::Normal`] primitive (plain fsync; no drive-cache flush on Apple).
    pub fn normal_sync(&self) -> std::io::Result<()> {
        self.run(SyncPolicy::Normal)
    }
    /// Run a built-in primitive.
    pub(crate) fn run(&self, p: SyncPolicy) -> std::io::Result<()> {
        (self.primitive)(p)
    }
}

/// A sync primitive, as the policy table in `docs/durability.md` names them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Primitive {
    /// `fcntl(F_FULLFSYNC)`: flush through the drive's cache (Apple).
    FullFsync,
    /// `fcntl(F_BARRIERFSYNC)`: an ordering barrier (Apple).
    BarrierFsync,
    /// `fsync`.
    Fsync,
    /// `fdatasync` (Linux, Android; `fsync` on other Unixes).
    Fdatasync,
}

thread_local! {
    static LAST_SYNC_ERROR: std::cell::RefCell<Option<(FileKind, SyncReason, std::io::Error)>> =
        const { std::cell::RefCell::new(None) };
}

/// Remember a failed sync on this thread (the VFS's `xSync`), for the error SQLite
/// reports next to say it was a sync.
pub(crate) fn record_sync_error(kind: FileKind, reason: SyncReason, e: std::io::Error) {
    LAST_SYNC_ERROR.with(|c| *c.borrow_mut() = Some((kind, reason, e)));
}

/// The last sync failure on this thread (set by `xSync`, read when SQLite reports
/// SQLITE_IOERR so the error can say it was a sync).
pub(crate) fn take_last_sync_error() -> Option<(FileKind, SyncReason, std::io::Error)> {
    LAST_SYNC_ERROR.with(|c| c.borrow_mut().take())
}

/// How a sync is performed. See `docs/durability.md` for the full table.
///
/// | policy | primitive (Apple) | primitive (elsewhere) | app crash | OS crash | power loss |
/// |---|---|---|---|---|---|
/// | `Full` | `fcntl(F_FULLFSYNC)` | `fsync` | safe | safe | safe |
/// | `Barrier` | `fcntl(F_BARRIERFSYNC)` | `fdatasync` | safe | safe | consistent, may lose the last commits (Apple); safe (elsewhere) |
/// | `Normal` | `fsync` at checkpoints only | `fsync` at checkpoints only | safe | consistent, may lose commits since the last checkpoint | same as OS crash (Apple: may corrupt without a cache flush) |
/// | `Off` | none | none | safe | may corrupt | may corrupt |
///
/// For commits `Full`, `Barrier` and `Custom` run SQLite with `synchronous=FULL`
/// (one WAL sync per commit; the policy picks the primitive), `Normal` with
/// `synchronous=NORMAL` (no sync per commit; the WAL is synced when checkpointed) and
/// `Off` with `synchronous=OFF`.
///
/// ```
/// use keel_storage::SyncPolicy;
/// assert!(matches!(SyncPolicy::default(), SyncPolicy::Full));
/// ```
#[derive(Clone, Default)]
pub enum SyncPolicy {
    /// Flush through the drive's cache: F_FULLFSYNC on Apple, fsync elsewhere. Default.
    #[default]
    Full,
    /// Ordering barrier: F_BARRIERFSYNC on Apple (writes before it reach the medium
    /// before writes after it, without waiting for a full flush), fdatasync elsewhere.
    Barrier,
    /// SQLite's `synchronous=NORMAL`: commits are not synced, checkpoints are (plain fsync).
    Normal,
    /// Never sync.
    Off,
    /// Call a user hook for each sync.
    Custom(Arc<dyn SyncHook>),
}

impl fmt::Debug for SyncPolicy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            SyncPolicy::Full => f.write_str("Full"),
            SyncPolicy::Barrier => f.write_str("Barrier"),
            SyncPolicy::Normal => f.write_str("Normal"),
            SyncPolicy::Off => f.write_str("Off"),
            SyncPolicy::Custom(h) => write!(f, "Custom({h:?})"),
        }
    }
}

impl SyncPolicy {
    /// A `Custom` policy from a closure.
    ///
    /// ```
    /// use keel_storage::SyncPolicy;
    /// let slow = SyncPolicy::custom(|ctx| {
    ///     std::thread::sleep(std::time::Duration::from_millis(1));
    ///     ctx.full_sync()
    /// });
    /// assert!(matches!(slow, SyncPolicy::Custom(_)));
    /// ```
    pub fn custom<F>(f: F) -> SyncPolicy
    where
        F: Fn(&SyncContext<'_>) -> std::io::Result<()> + Send + Sync + 'static,
    {
        SyncPolicy::Custom(Arc::new(FnHook(f)))
    }

    /// The `PRAGMA synchronous` value a connection checkpointing under this policy
    /// needs (SQLite issues no checkpoint sync at all with `OFF`).
    pub(crate) fn checkpoint_synchronous(&self) -> &'static str {
        match self {
            SyncPolicy::Off => "OFF",
            _ => "FULL",
        }
    }

    /// Whether SQLite's own `xSync` must flush through the drive's cache under this
    /// policy (`PRAGMA fullfsync` / `checkpoint_fullfsync`). keel's shim runs every
    /// sync it can attribute to a descriptor itself; the rest reach SQLite's `unix`
    /// VFS, which on Apple uses plain `fsync` unless these pragmas are on. Setting
    /// them keeps those syncs from being weaker than the policy (elsewhere they do
    /// nothing).
    pub(crate) fn sqlite_fullfsync(&self) -> bool {
        matches!(
            self,
            SyncPolicy::Full | SyncPolicy::Barrier | SyncPolicy::Custom(_)
        )
    }

    /// The `PRAGMA synchronous` value this policy implies for the writer.
    pub(crate) fn synchronous_pragma(&self) -> &'static str {
        match self {
            SyncPolicy::Full | SyncPolicy::Barrier | SyncPolicy::Custom(_) => "FULL",
            SyncPolicy::Normal => "NORMAL",
            SyncPolicy::Off => "OFF",
        }
    }
}

struct FnHook<F>(F);

impl<F> fmt::Debug for FnHook<F> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("closure")
    }
}

impl<F> SyncHook for FnHook<F>
where
    F: Fn(&SyncContext<'_>) -> std::io::Result<()> + Send + Sync + 'static,
{
    fn sync(&self, ctx: &SyncContext<'_>) -> std::io::Result<()> {
        (self.0)(ctx)
    }
}

/// One [`SyncPolicy`] per reason. Default: `Full` for all three.
///
/// ```
/// use keel_storage::{SyncPolicies, SyncPolicy};
/// let p = SyncPolicies { commit: SyncPolicy::Normal, ..SyncPolicies::default() };
/// assert!(matches!(p.checkpoint, SyncPolicy::Full));
/// ```
#[derive(Debug, Clone, Default)]
pub struct SyncPolicies {
    /// Syncs issued by commits on the writer.
    pub commit: SyncPolicy,
    /// Syncs issued by checkpoints (background, manual, at close).
    pub checkpoint: SyncPolicy,
    /// The open barrier on a WAL left by a previous run.
    pub open_barrier: SyncPolicy,
}

impl SyncPolicies {
    /// The same policy for every reason.
    ///
    /// ```
    /// use keel_storage::{SyncPolicies, SyncPolicy};
    /// let p = SyncPolicies::all(SyncPolicy::Off);
    /// assert!(matches!(p.open_barrier, SyncPolicy::Off));
    /// ```
    pub fn all(p: SyncPolicy) -> SyncPolicies {
        SyncPolicies {
            commit: p.clone(),
            checkpoint: p.clone(),
            open_barrier: p,
        }
    }

    /// The policy for a reason.
    pub fn for_reason(&self, r: SyncReason) -> &SyncPolicy {
        match r {
            SyncReason::Commit => &self.commit,
            SyncReason::Checkpoint => &self.checkpoint,
            SyncReason::OpenBarrier => &self.open_barrier,
        }
    }
}

thread_local! {
    static REASON: Cell<SyncReason> = const { Cell::new(SyncReason::Commit) };
}

/// The reason syncs issued on this thread are for (xSync runs on the thread that
/// caused it, so keel's threads set this around their work).
pub(crate) fn current_reason() -> SyncReason {
    REASON.with(|r| r.get())
}

/// Set the thread's sync reason; returns the previous one.
pub(crate) fn set_reason(r: SyncReason) -> SyncReason {
    REASON.with(|c| c.replace(r))
}

/// Sets the thread's sync reason until dropped.
pub(crate) struct ReasonScope(SyncReason);

impl ReasonScope {
    pub(crate) fn enter(r: SyncReason) -> ReasonScope {
        ReasonScope(REASON.with(|c| c.replace(r)))
    }
}

impl Drop for ReasonScope {
    fn drop(&mut self) {
        let prev = self.0;
        REASON.with(|c| c.set(prev));
    }
}
