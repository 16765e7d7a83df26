//! The writer thread and group commit, and the inline commit of an uncontended
//! blocking write on its caller's thread ([`WriterShared`]).

use std::marker::PhantomData;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU64, AtomicUsize, Ordering};
use std::sync::mpsc::{Receiver, RecvTimeoutError, Sender};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, TryLockError};
use std::time::{Duration, Instant};

use crate::checkpointer::{checkpoint_on_writer, CkptMsg, CkptSignal};
use crate::conn::{KConn, Reopen};
use crate::control::{Control, Controls, Probe};
use crate::error::{Error, PathScope, Result};
use crate::identity::bump_epoch;
use crate::oneshot;
use crate::park::{self, Parker, Suspension};
use crate::paths::wal_path;
use crate::policy::{take_last_sync_error, ReasonScope, SyncPolicies, SyncReason};
use crate::rotate::FileGuard;
#[cfg(feature = "sim")]
use crate::sim::StatementTrace;

type Callback = Box<dyn FnOnce() + Send>;

/// The handle a write closure gets: the writer connection, inside this closure's
/// SAVEPOINT (itself inside the group's transaction). Derefs to
/// [`rusqlite::Connection`].
///
/// The group's transaction is not the closure's to end: `BEGIN`, `COMMIT`, `END`,
/// `ROLLBACK`, and `RELEASE` / `ROLLBACK TO keel_write` (the closure's savepoint)
/// fail with an SQLite "not authorized" error inside a closure, so no closure can
/// make another closure's report false. To undo its own changes a closure returns
/// `Err`; nested savepoints of its own (`SAVEPOINT x` … `RELEASE x`) work.
///
/// ```
/// # use keel_storage::{Error, Store, StoreOptions};
/// # let dir = tempfile::tempdir().unwrap();
/// # let store = Store::open(dir.path().join("w.db"), StoreOptions::default())?;
/// let n = store.write_blocking(|txn| {
///     txn.execute_batch("CREATE TABLE IF NOT EXISTS kv(k TEXT PRIMARY KEY, v BLOB)")?;
///     let n = txn.execute("INSERT INTO kv VALUES ('a', x'01')", [])?;
///     txn.on_commit(Box::new(|| println!("committed")));
///     Ok::<_, Error>(n)
/// })?;
/// assert_eq!(n, 1);
/// # Ok::<(), keel_storage::Error>(())
/// ```
pub struct WriteTxn<'a> {
    conn: &'a KConn,
    path: &'a Path,
    callbacks: Vec<Callback>,
    rows: &'a RowHook,
}

/// What SQLite's update hook on the writer connection saw: how many rows were
/// inserted, updated or deleted so far (a running count) and the rowid of the last.
/// Lets a caller learn the rowid an `UPDATE … WHERE key = ?` changed without a
/// second statement (`UPDATE … RETURNING` buffers its rows and measured 7× slower).
#[derive(Default)]
pub(crate) struct RowHook {
    count: AtomicU64,
    rowid: AtomicI64,
}

/// A reading of the writer connection's row-change counter
/// ([`WriteTxn::row_changes`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RowChanges {
    /// Rows of rowid tables inserted, updated or deleted on the writer connection
    /// since it opened, counting rows changed by triggers too; a running count, so
    /// only the difference between two readings means anything.
    pub count: u64,
    /// The rowid of the last of those rows (`0` before the first).
    pub last_rowid: i64,
}

impl WriteTxn<'_> {
    /// Run `f` after the group's COMMIT succeeds, before the write futures resolve,
    /// on the thread that committed: keel's writer thread, or the caller of
    /// [`Store::write_blocking`](crate::store::Store::write_blocking) when it committed
    /// inline. Callbacks run in commit order (the next group waits for them); they
    /// are dropped if this closure fails (rolls back) or the commit fails.
    pub fn on_commit(&mut self, f: Box<dyn FnOnce() + Send>) {
        self.callbacks.push(f);
    }

    /// The database file.
    pub fn path(&self) -> &Path {
        self.path
    }

    /// The writer connection's row-change counter (SQLite's update hook). Read it
    /// before and after one statement: if `count` grew by exactly one, that
    /// statement changed one row (and no trigger changed another), the one at
    /// `last_rowid`. Not counted, as SQLite's hook does not report them: rows of
    /// `WITHOUT ROWID` tables and of SQLite's own tables, and a `DELETE` without
    /// `WHERE` that empties a table at once.
    ///
    /// ```
    /// # use keel_storage::{Error, Store, StoreOptions};
    /// # let dir = tempfile::tempdir().unwrap();
    /// # let store = Store::open(dir.path().join("r.db"), StoreOptions::default())?;
    /// store.write_blocking(|t| {
    ///     t.execute_batch("CREATE TABLE kv(k TEXT UNIQUE, v)")?;
    ///     t.execute("INSERT INTO kv VALUES ('a', 1), ('b', 2)", [])?;
    ///     let before = t.row_changes();
    ///     t.execute("UPDATE kv SET v = 3 WHERE k = 'b'", [])?;
    ///     let after = t.row_changes();
    ///     assert_eq!((after.count - before.count, after.last_rowid), (1, 2));
    ///     Ok::<_, Error>(())
    /// })?;
    /// # Ok::<(), keel_storage::Error>(())
    /// ```
    pub fn row_changes(&self) -> RowChanges {
        RowChanges {
            count: self.rows.count.load(Ordering::Relaxed),
            last_rowid: self.rows.rowid.load(Ordering::Relaxed),
        }
    }

    /// The file's schema cookie, `PRAGMA schema_version`, which SQLite bumps on
    /// every change of the schema: read through a statement the writer keeps
    /// prepared, as every write closure that checks the file's layout asks.
    ///
    /// ```
    /// # use keel_storage::{Error, Store, StoreOptions};
    /// # let dir = tempfile::tempdir().unwrap();
    /// # let store = Store::open(dir.path().join("c.db"), StoreOptions::default())?;
    /// store.write_blocking(|t| {
    ///     let before = t.schema_version()?;
    ///     t.execute_batch("CREATE TABLE kv(k, v)")?;
    ///     assert!(t.schema_version()? > before);
    ///     Ok::<_, Error>(())
    /// })?;
    /// # Ok::<(), keel_storage::Error>(())
    /// ```
    pub fn schema_version(&self) -> rusqlite::Result<i64> {
        self.conn.probe(Probe::SchemaVersion)
    }
}

impl std::ops::Deref for WriteTxn<'_> {
    type Target = rusqlite::Connection;
    fn deref(&self) -> &rusqlite::Connection {
        &self.conn.conn
    }
}

/// A future for a write's result; resolves after the group's COMMIT.
/// Runtime-agnostic: `.await` it anywhere or block with [`WriteFuture::wait`].
///
/// ```
/// # use keel_storage::{Error, Store, StoreOptions};
/// # let dir = tempfile::tempdir().unwrap();
/// # let store = Store::open(dir.path().join("f.db"), StoreOptions::default())?;
/// let fut = store.write(|t| t.execute_batch("CREATE TABLE t(x)").map_err(Error::from));
/// futures::executor::block_on(fut)?;
/// # Ok::<(), keel_storage::Error>(())
/// ```
#[must_use = "the write runs anyway; the future tells you whether it committed"]
pub struct WriteFuture<T> {
    rx: oneshot::Receiver<T>,
    closed: Option<Box<dyn FnOnce() -> T + Send>>,
}

impl<T> WriteFuture<T> {
    pub(crate) fn new(rx: oneshot::Receiver<T>, closed: Box<dyn FnOnce() -> T + Send>) -> Self {
        WriteFuture {
            rx,
            closed: Some(closed),
        }
    }

    fn lost(&mut self) -> T {
        match self.closed.take() {
            Some(f) => f(),
            // Polled again after completion: a caller bug; keep returning "closed".
            None => panic!("WriteFuture polled after completion"),
        }
    }

    /// Block the calling thread until the write committed (or failed).
    pub fn wait(mut self) -> T {
        match self.rx.wait() {
            Some(v) => v,
            None => self.lost(),
        }
    }
}

impl<T> std::future::Future for WriteFuture<T> {
    type Output = T;
    fn poll(self: std::pin::Pin<&mut Self>, cx: &mut std::task::Context<'_>) -> std::task::Poll<T> {
        let this = self.get_mut();
        match this.rx.poll_recv(cx) {
            std::task::Poll::Ready(Some(v)) => std::task::Poll::Ready(v),
            std::task::Poll::Ready(None) => std::task::Poll::Ready(this.lost()),
            std::task::Poll::Pending => std::task::Poll::Pending,
        }
    }
}

/// A type-erased queued write.
pub(crate) trait Job: Send {
    /// Run the closure; true if it succeeded.
    fn run(&mut self, txn: &mut WriteTxn<'_>) -> bool;
    /// Resolve the future given the group's commit result.
    fn finish(self: Box<Self>, commit: &Result<()>);
}

pub(crate) struct TypedJob<F, R, E> {
    f: Option<F>,
    out: Option<std::result::Result<R, E>>,
    tx: Option<oneshot::Sender<std::result::Result<R, E>>>,
    path: PathBuf,
    _p: PhantomData<fn() -> (R, E)>,
}

impl<F, R, E> TypedJob<F, R, E> {
    pub(crate) fn new(f: F, tx: oneshot::Sender<std::result::Result<R, E>>, path: PathBuf) -> Self {
        TypedJob {
            f: Some(f),
            out: None,
            tx: Some(tx),
            path,
            _p: PhantomData,
        }
    }
}

impl<F, R, E> Job for TypedJob<F, R, E>
where
    F: FnOnce(&mut WriteTxn<'_>) -> std::result::Result<R, E> + Send + 'static,
    R: Send + 'static,
    E: From<Error> + Send + 'static,
{
    fn run(&mut self, txn: &mut WriteTxn<'_>) -> bool {
        let Some(f) = self.f.take() else {
            return false;
        };
        let out = match catch_unwind(AssertUnwindSafe(|| f(txn))) {
            Ok(r) => r,
            Err(p) => Err(E::from(Error::panicked("write closure", &self.path, p))),
        };
        let ok = out.is_ok();
        self.out = Some(out);
        ok
    }

    fn finish(mut self: Box<Self>, commit: &Result<()>) {
        let out = match (self.out.take(), commit) {
            (Some(Ok(v)), Ok(())) => Ok(v),
            (Some(Err(e)), _) => Err(e),
            (_, Err(e)) => Err(E::from(e.clone())),
            (None, Ok(())) => Err(E::from(Error::Cancelled {
                op: "write (closure never ran)",
                path: self.path.clone(),
            })),
        };
        if let Some(tx) = self.tx.take() {
            let _ = tx.send(out);
        }
    }
}

impl<F, R, E> Drop for TypedJob<F, R, E> {
    fn drop(&mut self) {
        // Dropped without finishing (writer gone, queue refused it): the future sees
        // a dropped sender and reports `Closed`.
        self.tx.take();
    }
}

/// The writer queue's length and bound (backpressure, `StoreOptions::max_queued_writes`).
pub(crate) struct QueueGauge {
    queued: AtomicUsize,
    cap: usize,
    waiters: AtomicUsize,
    m: Mutex<()>,
    room: Condvar,
}

impl QueueGauge {
    pub(crate) fn new(cap: usize) -> QueueGauge {
        QueueGauge {
            queued: AtomicUsize::new(0),
            cap: cap.max(1),
            waiters: AtomicUsize::new(0),
            m: Mutex::new(()),
            room: Condvar::new(),
        }
    }

    pub(crate) fn capacity(&self) -> usize {
        self.cap
    }

    /// Take a place in the queue, if there is one.
    pub(crate) fn try_reserve(&self) -> bool {
        self.queued
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| {
                (n < self.cap).then_some(n + 1)
            })
            .is_ok()
    }

    /// Take a place, waiting for one (or until `give_up` says so).
    pub(crate) fn reserve_blocking(&self, give_up: impl Fn() -> bool) -> bool {
        loop {
            if self.try_reserve() {
                return true;
            }
            if give_up() {
                return false;
            }
            self.waiters.fetch_add(1, Ordering::AcqRel);
            let g = self.m.lock().unwrap_or_else(|p| p.into_inner());
            // Re-checked under the lock the writer takes to notify: no lost wake-up.
            if self.queued.load(Ordering::Acquire) >= self.cap {
                // The timeout only covers a store closing under us.
                let _ = self
                    .room
                    .wait_timeout(g, Duration::from_millis(100))
                    .unwrap_or_else(|p| p.into_inner());
            }
            self.waiters.fetch_sub(1, Ordering::AcqRel);
        }
    }

    /// A reserved place was not used (the send failed).
    pub(crate) fn release(&self) {
        self.left(1);
    }

    /// `n` jobs left the queue (the writer took them).
    fn left(&self, n: usize) {
        self.queued.fetch_sub(n, Ordering::AcqRel);
        if self.waiters.load(Ordering::Acquire) > 0 {
            let _g = self.m.lock().unwrap_or_else(|p| p.into_inner());
            self.room.notify_all();
        }
    }

    /// Writes waiting in the queue now.
    pub(crate) fn len(&self) -> usize {
        self.queued.load(Ordering::Acquire)
    }
}

pub(crate) enum WriterMsg {
    Job(Box<dyn Job>),
    Vacuum {
        pages: u32,
        reply: oneshot::Sender<Result<u64>>,
    },
    /// A group committed inline while the writer slept without a deadline: arm
    /// the idle vacuum check.
    Committed,
    Shutdown,
    /// Wakes the writer so it sees a suspend (see park.rs).
    Wake,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// The writer connection and what a commit needs, shared by keel's writer thread
/// and the callers that commit inline.
///
/// Whoever holds `conn` runs groups: the writer thread for queued writes (group
/// commit), or a [`Store::write_blocking`](crate::store::Store::write_blocking) caller
/// that found the queue empty and the connection free, running its one closure
/// and the COMMIT on its own thread — no handoff to the writer and back. The
/// writer thread takes the lock before it takes queued jobs off the queue gauge,
/// so "gauge empty and lock free" means no queued write is ahead of the caller.
pub(crate) struct WriterShared {
    path: PathBuf,
    /// `None` while parked (before durable: writes queue behind the open barrier)
    /// and after the writer thread shut down.
    conn: Mutex<Option<KConn>>,
    /// The authorizer's switch (see `guard_transaction`).
    in_closure: Arc<AtomicBool>,
    signal: Arc<CkptSignal>,
    wal_frames: Arc<AtomicU64>,
    threshold_frames: u64,
    /// The WAL size (in frames) at which the writer checkpoints by itself: see
    /// [`WriterShared::committed`].
    backstop_frames: AtomicU64,
    /// The next [`WriterShared::finish_checkpoint`] is the backstop's: it waits
    /// for a background checkpoint that holds the lock.
    backstop_due: AtomicBool,
    /// What [`WriterShared::finish_checkpoint`] needs: the WAL's path, the sync
    /// policies (a checkpoint syncs under its own) and the bounded wait.
    wal_path: PathBuf,
    policies: SyncPolicies,
    truncate_timeout: Duration,
    /// Groups committed inline since the writer thread last looked (its idle
    /// vacuum check waits for a quiet period).
    inline_groups: AtomicU64,
    /// The writer thread sleeps without a deadline; the next inline commit wakes
    /// it once so the idle vacuum check still follows the last commit.
    asleep: AtomicBool,
    /// Suspended (park.rs): nothing commits inline; writes queue until resume.
    suspension: Arc<Suspension>,
    /// Fed by the writer connection's update hook (see [`WriteTxn::row_changes`]).
    rows: Arc<RowHook>,
    /// Callers inside [`Store::write_blocking`](crate::store::Store::write_blocking) (see
    /// [`WriterShared::enter_blocking`]).
    blocking: AtomicUsize,
    /// How long the last COMMIT took (ns): what the writer may spend waiting for
    /// a blocking caller about to join a group.
    commit_ns: AtomicU64,
    /// The writer connection's last `PRAGMA data_version` ([`NO_VERSION`]: none
    /// read since the connection opened).
    data_version: AtomicI64,
    /// Times a check found that another connection committed (see
    /// [`WriterShared::check_data_version`]).
    foreign: AtomicU64,
    /// Refuses a write into a file a key rotation replaced (rotate.rs).
    guard: Arc<FileGuard>,
    /// The writer connection passed `guard`'s check under its write lock. Once
    /// is enough per connection: an open WAL connection keeps a shared lock on
    /// the database file until it closes, and a rotation needs the file
    /// exclusively, so none can replace it meanwhile. Cleared for each new
    /// connection (`install`): one opened after a suspend may meet a rotated file.
    guard_passed: AtomicBool,
    /// Set by the store: starts, on another thread, the suspend and resume by
    /// which the store adopts a file another process rotated (store.rs).
    on_replaced: Mutex<Option<Arc<dyn Fn() -> bool + Send + Sync>>>,
    /// An adoption started by [`WriterShared::adopt`] runs.
    adopting: AtomicBool,
}

/// No `data_version` read yet on the current writer connection.
const NO_VERSION: i64 = i64::MIN;

/// A caller inside [`Store::write_blocking`](crate::store::Store::write_blocking), counted
/// until it returns.
pub(crate) struct Blocking<'a>(&'a AtomicUsize);

impl Drop for Blocking<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::SeqCst);
    }
}

thread_local! {
    /// The `WriterShared`s (addresses) whose writer connection this thread holds
    /// for an inline group: a nested blocking write to the same store would wait
    /// for itself.
    static INLINE: std::cell::RefCell<Vec<usize>> = const { std::cell::RefCell::new(Vec::new()) };
}

struct InlineMark(usize);

impl InlineMark {
    fn enter(w: &WriterShared) -> InlineMark {
        let me = w as *const WriterShared as usize;
        INLINE.with(|v| v.borrow_mut().push(me));
        InlineMark(me)
    }
}

impl Drop for InlineMark {
    fn drop(&mut self) {
        INLINE.with(|v| {
            let mut v = v.borrow_mut();
            if let Some(i) = v.iter().rposition(|x| *x == self.0) {
                v.remove(i);
            }
        });
    }
}

/// What [`WriterShared::try_inline`] did.
pub(crate) enum Inline {
    /// The group ran and its future is resolved. `wake_ckpt`: tell the
    /// checkpointer; `wake_writer`: send the writer [`WriterMsg::Committed`].
    Ran { wake_ckpt: bool, wake_writer: bool },
    /// The writer connection is busy or not there: queue the job instead.
    Busy(Box<dyn Job>),
}

/// How many times the checkpoint threshold the WAL may reach before the writer
/// checkpoints it itself (see [`WriterShared::committed`]).
const BACKSTOP: u64 = 4;

impl WriterShared {
    #[allow(clippy::too_many_arguments)] // one field each, from the open pipeline
    pub(crate) fn new(
        path: &Path,
        signal: Arc<CkptSignal>,
        wal_frames: Arc<AtomicU64>,
        threshold_frames: u64,
        suspension: Arc<Suspension>,
        policies: SyncPolicies,
        truncate_timeout: Duration,
        guard: Arc<FileGuard>,
    ) -> WriterShared {
        WriterShared {
            path: path.to_path_buf(),
            conn: Mutex::new(None),
            in_closure: Arc::new(AtomicBool::new(false)),
            signal,
            wal_frames,
            threshold_frames,
            backstop_frames: AtomicU64::new(threshold_frames.saturating_mul(BACKSTOP)),
            backstop_due: AtomicBool::new(false),
            wal_path: wal_path(path),
            policies,
            truncate_timeout,
            inline_groups: AtomicU64::new(0),
            asleep: AtomicBool::new(false),
            suspension,
            rows: Arc::new(RowHook::default()),
            blocking: AtomicUsize::new(0),
            commit_ns: AtomicU64::new(0),
            data_version: AtomicI64::new(NO_VERSION),
            foreign: AtomicU64::new(0),
            guard,
            guard_passed: AtomicBool::new(false),
            on_replaced: Mutex::new(None),
            adopting: AtomicBool::new(false),
        }
    }

    /// What [`WriterShared::adopt`] calls: it starts the adoption on another
    /// thread and returns whether it did.
    #[cfg_attr(not(feature = "encryption-api"), allow(dead_code))]
    pub(crate) fn on_replaced(&self, f: Arc<dyn Fn() -> bool + Send + Sync>) {
        *lock(&self.on_replaced) = Some(f);
    }

    /// The adoption started by [`WriterShared::adopt`] ended.
    #[cfg_attr(not(feature = "encryption-api"), allow(dead_code))]
    pub(crate) fn adoption_ended(&self) {
        self.adopting.store(false, Ordering::SeqCst);
    }

    /// The file was replaced by a finished rotation: start adopting it (ask the
    /// key provider again, on another thread, while the store suspends). True
    /// when an adoption runs; the writer then holds its jobs until the store
    /// resumed, and tries them once more.
    fn adopt(&self) -> bool {
        if !self.guard.replaced() {
            return false;
        }
        let Some(hook) = lock(&self.on_replaced).clone() else {
            return false;
        };
        if self.adopting.swap(true, Ordering::SeqCst) {
            return true;
        }
        if hook() {
            true
        } else {
            self.adopting.store(false, Ordering::SeqCst);
            false
        }
    }

    /// Until the adoption suspended the store (or ended without).
    fn wait_adoption_started(&self) {
        while self.adopting.load(Ordering::SeqCst) && !self.suspension.is_suspended() {
            std::thread::sleep(Duration::from_millis(1));
        }
    }

    /// The guard the first write transaction of each connection checks (rotate.rs).
    #[cfg_attr(not(feature = "encryption-api"), allow(dead_code))]
    pub(crate) fn guard(&self) -> &FileGuard {
        &self.guard
    }

    /// Read the writer connection's `PRAGMA data_version` and count a change as
    /// foreign commits. Exact on this connection: SQLite changes a connection's
    /// `data_version` only when *another* connection committed, and every commit
    /// of this store goes through this connection — so a change means another
    /// process (or another handle on the file) committed. (A TRUNCATE or RESTART
    /// checkpoint that resets the WAL also changes it: a spurious count, which
    /// costs a re-read, never a missed commit.) One prepared statement (`control.rs`), no I/O
    /// beyond the shared-memory header SQLite reads anyway.
    fn check_data_version(&self, conn: &KConn) {
        let v = conn.probe(Probe::DataVersion);
        match v {
            Ok(v) => {
                let prev = self.data_version.swap(v, Ordering::AcqRel);
                if prev != NO_VERSION && prev != v {
                    self.foreign.fetch_add(1, Ordering::AcqRel);
                }
            }
            Err(e) => tracing::debug!(error = %e, "PRAGMA data_version failed"),
        }
    }

    /// Foreign commits found so far (see [`WriterShared::check_data_version`]);
    /// with `probe`, check now first if the writer connection is free (never
    /// waits: a busy writer checks at its next transaction).
    pub(crate) fn foreign_commits(&self, probe: bool) -> u64 {
        if probe {
            if let Ok(g) = self.conn.try_lock() {
                if let Some(c) = g.as_ref() {
                    self.check_data_version(c);
                }
            }
        }
        self.foreign.load(Ordering::Acquire)
    }

    /// Count the calling thread as a blocking writer until the guard drops. Group
    /// commit gathers what it can only while other writers are known to be
    /// coming: a caller that finds others in `write_blocking` (say, just woken
    /// by the group that committed theirs, about to write again) queues rather
    /// than commits alone inline, and the writer waits a moment for those not
    /// queued yet (`writer_main`). Without this, 8 threads writing in a loop
    /// commit in alternating groups of 1 and 7: 4 transactions per sync, not 8.
    pub(crate) fn enter_blocking(&self) -> (Blocking<'_>, bool) {
        let others = self.blocking.fetch_add(1, Ordering::SeqCst);
        (Blocking(&self.blocking), others > 0)
    }

    /// Record a commit; true if the checkpointer must be woken.
    ///
    /// The background checkpointer keeps the WAL near the threshold when it gets
    /// the CPU. On a loaded machine it may not run for a while, and commits that
    /// never pause would grow the WAL without bound. So past [`BACKSTOP`] times the
    /// threshold the writer copies the WAL itself between two groups (as SQLite's
    /// own autocheckpoint does in the committing connection), whatever the
    /// scheduler does. If a reader still holds frames, it tries again only once
    /// the WAL has grown by another threshold, so a long read does not make every
    /// group pay for a checkpoint.
    fn committed(&self) -> bool {
        let first = self.signal.committed();
        let frames = self.wal_frames.load(Ordering::Relaxed);
        let backstop = self.threshold_frames.saturating_mul(BACKSTOP);
        if frames < self.threshold_frames {
            self.backstop_frames.store(backstop, Ordering::Relaxed);
        } else if frames >= self.backstop_frames.load(Ordering::Relaxed) {
            self.backstop_frames.store(
                frames.saturating_add(self.threshold_frames),
                Ordering::Relaxed,
            );
            self.backstop_due.store(true, Ordering::Release);
            self.signal.finish_on_writer.store(true, Ordering::Release);
        }
        first || frames >= self.threshold_frames
    }

    /// True while this thread runs an inline group of this store (its closure or
    /// an `on_commit` callback).
    pub(crate) fn inline_here(&self) -> bool {
        let me = self as *const WriterShared as usize;
        INLINE.with(|v| v.borrow().contains(&me))
    }

    /// Copy the tail of the WAL that the checkpointer's last checkpoint left
    /// behind, if it asked ([`CkptSignal::finish_on_writer`]), on the writer
    /// connection between two groups: no commit can land meanwhile, so unless a
    /// reader still holds old frames the whole WAL is then in the database file and
    /// the next write starts it over. Without this, writes that never pause leave
    /// every background checkpoint a few commits behind and the WAL grows without
    /// bound. The tail is what committed while that checkpoint ran (a few
    /// milliseconds of writes), so the pause is short; the checkpoint syncs under
    /// the checkpoint policy. Skipped when the connection is busy (asked again
    /// after the next group).
    pub(crate) fn finish_checkpoint(&self) {
        if !self.signal.finish_on_writer.load(Ordering::Acquire) || self.suspension.is_suspended() {
            return;
        }
        let g = match self.conn.try_lock() {
            Ok(g) => g,
            Err(TryLockError::Poisoned(p)) => p.into_inner(),
            Err(TryLockError::WouldBlock) => return,
        };
        let Some(c) = g.as_ref() else {
            return;
        };
        if !self.signal.finish_on_writer.swap(false, Ordering::AcqRel) {
            return;
        }
        let _path = PathScope::enter(&self.path);
        let run = || {
            checkpoint_on_writer(
                &c.conn,
                &self.path,
                &self.wal_path,
                &self.policies,
                self.truncate_timeout,
            )
        };
        let mut outcome = run();
        // Past the backstop, a background checkpoint that holds the lock (slow
        // because it gets little CPU) is waited for, bounded: holding the writer
        // meanwhile is the back-pressure that keeps the WAL bounded.
        if self.backstop_due.swap(false, Ordering::AcqRel) {
            let start = Instant::now();
            while matches!(&outcome, Ok(o) if o.busy) && start.elapsed() < self.truncate_timeout {
                std::thread::sleep(Duration::from_millis(1));
                outcome = run();
            }
        }
        match outcome {
            Ok(o) if !o.busy && o.wal_frames == o.checkpointed_frames => {
                tracing::debug!(frames = o.wal_frames, "writer finished the checkpoint");
                self.signal.dirty.store(false, Ordering::Release);
                // Every frame is in the database file: the next write restarts the WAL.
                self.signal.arm_epoch_bump();
            }
            Ok(o) if o.busy => {
                // Another checkpoint (an explicit one) holds the lock: again
                // after the next group.
                self.signal.finish_on_writer.store(true, Ordering::Release);
            }
            Ok(o) => tracing::debug!(
                frames = o.wal_frames,
                checkpointed = o.checkpointed_frames,
                "writer could not finish the checkpoint (a reader holds frames)"
            ),
            Err(e) => tracing::warn!(error = %e, "writer could not finish the checkpoint"),
        }
    }

    /// Run `job` as a group of its own on the calling thread if the writer
    /// connection is free right now; give it back if not. Callers check first
    /// that no write is queued (the queue keeps its order). Only the blocking
    /// path calls this: an inline group includes the commit's disk sync.
    pub(crate) fn try_inline(&self, job: Box<dyn Job>) -> Inline {
        if self.suspension.is_suspended() {
            return Inline::Busy(job);
        }
        let g = match self.conn.try_lock() {
            Ok(g) => g,
            Err(TryLockError::Poisoned(p)) => p.into_inner(),
            Err(TryLockError::WouldBlock) => return Inline::Busy(job),
        };
        let Some(c) = g.as_ref() else {
            return Inline::Busy(job);
        };
        let done = {
            let _path = PathScope::enter(&self.path);
            let _reason = ReasonScope::enter(SyncReason::Commit);
            let _mark = InlineMark::enter(self);
            run_group(c, &self.path, vec![job], self)
        };
        let wake_ckpt = self.committed();
        self.inline_groups.fetch_add(1, Ordering::SeqCst);
        let wake_writer = self.asleep.swap(false, Ordering::SeqCst);
        drop(g);
        done.resolve();
        self.finish_checkpoint();
        Inline::Ran {
            wake_ckpt,
            wake_writer,
        }
    }
}

pub(crate) struct WriterCtx {
    pub(crate) path: PathBuf,
    pub(crate) ckpt_tx: Sender<CkptMsg>,
    pub(crate) idle: Duration,
    pub(crate) max_group: usize,
    pub(crate) vacuum_min_free_pages: u32,
    pub(crate) shared: Arc<WriterShared>,
    pub(crate) gauge: Arc<QueueGauge>,
    pub(crate) suspension: Arc<Suspension>,
    pub(crate) reopen: Reopen,
    #[cfg(feature = "sim")]
    pub(crate) statement_trace: Option<StatementTrace>,
}

impl WriterCtx {
    /// Tell the checkpointer about a commit, waking it only when needed.
    fn committed(&self) {
        if self.shared.committed() {
            let _ = self.ckpt_tx.send(CkptMsg::Committed);
        }
    }

    /// The writes queued during the open barrier are done (their group ran, or the
    /// writer found none): let the checkpointer's automatic checkpoints run again.
    fn writes_first_done(&self) {
        if self.shared.signal.release_writes_first() {
            let _ = self.ckpt_tx.send(CkptMsg::Wake);
        }
    }
}

/// The longest the writer waits for blocking callers to join a group (see
/// [`WriterShared::enter_blocking`]); below that, as long as the last COMMIT took.
const MAX_GATHER_NS: u64 = 2_000_000;

/// How long the writer looks for the next write before it sleeps, when writes
/// are coming one after another ([`BURST_GAP`]). A sleeping writer costs each
/// awaited write a thread wake-up, measured at about 35 µs on a 2-core VM: an
/// async write through the FFI took 0.075 ms with the writer asleep and 0.040 ms
/// with it looking. Looking yields the core to any thread that wants it.
const LOOK_FOR_NEXT: Duration = Duration::from_micros(40);

/// A write that arrived within this time of the writer going idle makes it look
/// for the next one ([`LOOK_FOR_NEXT`]) the next time it goes idle; a write after a
/// longer pause does not, so an app that writes now and then never pays for it.
const BURST_GAP: Duration = Duration::from_millis(1);

/// The savepoint each closure runs in; closures may not release or roll it back.
const SAVEPOINT: &str = "keel_write";

/// Install the writer's authorizer: while a closure runs (`in_closure`), statements
/// that would end or escape the group's transaction — `BEGIN`, `COMMIT`/`END`,
/// `ROLLBACK`, and `RELEASE`/`ROLLBACK TO` of the closure's own savepoint — are
/// refused when SQLite prepares them (`SQLITE_AUTH`, "not authorized"). The closure
/// sees an error for that statement only; every report of the group stays true. Its
/// own nested savepoints work as usual. Installed once: setting an authorizer
/// expires every prepared statement, which must not happen per closure.
fn guard_transaction(conn: &mut rusqlite::Connection, in_closure: Arc<AtomicBool>) {
    use rusqlite::hooks::{AuthAction, AuthContext, Authorization, TransactionOperation};
    let r = conn.authorizer(Some(move |ctx: AuthContext<'_>| {
        if !in_closure.load(Ordering::Relaxed) {
            return Authorization::Allow;
        }
        match ctx.action {
            AuthAction::Transaction { .. } => Authorization::Deny,
            AuthAction::Savepoint {
                operation: TransactionOperation::Release | TransactionOperation::Rollback,
                savepoint_name,
            } if savepoint_name.eq_ignore_ascii_case(SAVEPOINT) => Authorization::Deny,
            _ => Authorization::Allow,
        }
    }));
    if let Err(e) = r {
        tracing::error!(error = %e, "could not install the writer's authorizer");
    }
}

fn sqlite_abort(msg: &str) -> rusqlite::Error {
    rusqlite::Error::SqliteFailure(
        libsqlite3_sys::Error::new(libsqlite3_sys::SQLITE_ABORT),
        Some(msg.to_string()),
    )
}

pub(crate) fn incremental_vacuum(c: &KConn, path: &Path, pages: u32) -> Result<u64> {
    let conn = &c.conn;
    let before: i64 = conn
        .query_row("PRAGMA freelist_count", [], |r| r.get(0))
        .map_err(|e| Error::sqlite("read freelist_count", path, e))?;
    // Each step of this pragma frees one page: step it to the end. In an
    // IMMEDIATE transaction: the write lock is taken up front, where the busy
    // timeout applies, not by an upgrade halfway through (another process may write).
    let step = || -> rusqlite::Result<()> {
        c.control(Control::Begin)?;
        let r = (|| {
            let mut stmt = conn.prepare(&format!("PRAGMA incremental_vacuum({pages})"))?;
            let mut rows = stmt.query([])?;
            while rows.next()?.is_some() {}
            Ok(())
        })();
        match r {
            Ok(()) => c.control(Control::Commit),
            Err(e) => {
                if !conn.is_autocommit() {
                    let _ = c.control(Control::Rollback);
                }
                Err(e)
            }
        }
    };
    step().map_err(|e| Error::sqlite("incremental vacuum", path, e))?;
    let after: i64 = conn
        .query_row("PRAGMA freelist_count", [], |r| r.get(0))
        .map_err(|e| Error::sqlite("read freelist_count", path, e))?;
    Ok(u64::try_from(before - after).unwrap_or(0))
}

/// What the writer installs on its connection, at start and after each reopen:
/// the authorizer (and the statement trace), and the interrupt a suspend uses.
fn install(conn: &mut KConn, in_closure: &Arc<AtomicBool>, ctx: &WriterCtx) {
    // A new connection: its data_version starts a new baseline (what changed
    // while there was none, resume's file stamp finds).
    ctx.shared.data_version.store(NO_VERSION, Ordering::Release);
    // A new connection: it may meet a file rotated while there was none.
    ctx.shared.guard_passed.store(false, Ordering::Release);
    ctx.shared.check_data_version(conn);
    guard_transaction(&mut conn.conn, Arc::clone(in_closure));
    // After the authorizer: prepared while it allows them (outside closures).
    match Controls::prepare(&conn.conn) {
        Ok(c) => conn.controls = Some(c),
        // `exec` then parses each statement as it runs.
        Err(e) => tracing::error!(error = %e, "could not prepare the writer's statements"),
    }
    let rows = Arc::clone(&ctx.shared.rows);
    let r = conn.conn.update_hook(Some(
        move |_: rusqlite::hooks::Action, _: &str, _: &str, rowid: i64| {
            rows.rowid.store(rowid, Ordering::Relaxed);
            rows.count.fetch_add(1, Ordering::Relaxed);
        },
    ));
    if let Err(e) = r {
        // Callers then see no row change and fall back to reading the rowid.
        tracing::error!(error = %e, "could not install the writer's update hook");
    }
    #[cfg(feature = "sim")]
    if let Some(f) = ctx.statement_trace.clone() {
        use rusqlite::trace::{TraceEvent, TraceEventCodes};
        let r = conn.conn.trace_v2(
            TraceEventCodes::SQLITE_TRACE_STMT,
            Some(move |e: TraceEvent<'_>| {
                if let TraceEvent::Stmt(_, sql) = e {
                    f(sql);
                }
            }),
        );
        if let Err(e) = r {
            tracing::error!(error = %e, "could not install the statement trace");
        }
    }
    // Every 16 VM instructions (a one-row INSERT runs a few dozen), so the SQL
    // of a closure that goes on after the grace period fails at once with
    // `Suspended` instead of outliving repeated interrupts.
    let suspension = Arc::clone(&ctx.suspension);
    if let Err(e) = conn
        .conn
        .progress_handler(16, Some(move || suspension.is_stopping()))
    {
        // Without it a suspend still interrupts, only less promptly.
        tracing::error!(error = %e, "could not install the suspend progress handler");
    }
    ctx.suspension
        .set_interrupt(Parker::Writer, Some(conn.conn.get_interrupt_handle()));
}

/// Hand the writer connection to the store: install what the writer needs on
/// it, then put it where the writer thread and inline commits take it. Called
/// before the writer thread starts, so a blocking write right after the open
/// already commits inline.
pub(crate) fn attach_writer(mut conn: KConn, ctx: &WriterCtx) {
    install(&mut conn, &ctx.shared.in_closure, ctx);
    *lock(&ctx.shared.conn) = Some(conn);
}

impl WriterShared {
    /// Take the writer connection back (the writer thread could not start): no
    /// write may commit without it.
    pub(crate) fn detach(&self) -> Option<KConn> {
        lock(&self.conn).take()
    }
}

/// The writer connection in `slot`, reopened after a resume if needed (only the
/// writer thread reopens; inline commits use it only while it is there).
fn connection<'c>(slot: &'c mut Option<KConn>, ctx: &WriterCtx) -> Result<&'c KConn> {
    if slot.is_none() {
        let mut c = (ctx.reopen)()?;
        install(&mut c, &ctx.shared.in_closure, ctx);
        if ctx.suspension.external.swap(false, Ordering::AcqRel) {
            // Another process may have started a new WAL meanwhile.
            ctx.shared.signal.arm_epoch_bump();
        }
        *slot = Some(c);
    }
    slot.as_ref()
        .ok_or_else(|| Error::closed("reopen the writer connection", &ctx.path))
}

/// Commit `batch` on the writer connection (reopened if needed). A connection
/// refused because another process rotated the file starts the adoption and
/// hands the batch back (unless this is its `retried` run): the writer holds it
/// until the store resumed.
fn run_batch(
    mut g: MutexGuard<'_, Option<KConn>>,
    batch: Vec<Box<dyn Job>>,
    ctx: &WriterCtx,
    shared: &WriterShared,
    retried: bool,
) -> Option<Vec<Box<dyn Job>>> {
    let done = match connection(&mut g, ctx) {
        Ok(c) => Some(run_group(c, &ctx.path, batch, shared)),
        Err(e @ Error::Rotated { .. }) if !retried && shared.adopt() => {
            tracing::info!(error = %e, "the database was rotated by another process; asking its key provider again");
            drop(g);
            shared.wait_adoption_started();
            return Some(batch);
        }
        Err(e) => {
            tracing::error!(error = %e, "could not reopen the writer connection");
            for j in batch {
                j.finish(&Err(e.clone()));
            }
            None
        }
    };
    ctx.committed();
    drop(g);
    if let Some(d) = done {
        d.resolve();
    }
    ctx.writes_first_done();
    shared.finish_checkpoint();
    None
}

/// The writer thread: runs queued writes in groups, the idle vacuum check, lets
/// go of the connection while suspended, and closes it at shutdown. The
/// connection was attached with [`attach_writer`].
pub(crate) fn writer_main(rx: Receiver<WriterMsg>, ctx: WriterCtx) {
    let _path = PathScope::enter(&ctx.path);
    let _reason = ReasonScope::enter(SyncReason::Commit);
    let shared = Arc::clone(&ctx.shared);
    let mut pending: Option<WriterMsg> = None;
    let mut vacuum_checked = true;
    // Jobs that met a file another process rotated, held while the store adopts
    // it (suspended), then tried once more.
    let mut held: Option<Vec<Box<dyn Job>>> = None;
    // Whether writes are coming one after another (`BURST_GAP`).
    let mut bursting = false;
    loop {
        if ctx.suspension.is_suspended() {
            // Let go of every lock: close the connection and wait for resume. Queued
            // writes stay queued; the connection reopens at the next one.
            ctx.suspension.set_interrupt(Parker::Writer, None);
            // Waits for an inline group still running (the suspend interrupted it).
            let taken = lock(&shared.conn).take();
            if let Some(c) = taken {
                // The last look before the connection goes: a commit of another
                // process until now is counted, not lost with the baseline.
                shared.check_data_version(&c);
                park::release(c);
            }
            ctx.suspension.park(Parker::Writer);
            continue;
        }
        if let Some(batch) = held.take() {
            run_batch(lock(&shared.conn), batch, &ctx, &shared, true);
            vacuum_checked = false;
            continue;
        }
        if pending.is_none() && ctx.gauge.len() == 0 {
            // Nothing queued (any more): never hold the checkpointer while waiting.
            ctx.writes_first_done();
        }
        // Idle from here until the next message.
        let idle_since = Instant::now();
        if pending.is_none() && bursting {
            while idle_since.elapsed() < LOOK_FOR_NEXT {
                if let Ok(m) = rx.try_recv() {
                    pending = Some(m);
                    break;
                }
                std::thread::yield_now();
            }
        }
        let msg = match pending.take() {
            Some(m) => m,

            // Idle means asleep: the only deadline is the background vacuum check
            // `idle` after the last commit; once it ran, wait for work alone (a
            // phone's battery pays for every wake-up).
            None if vacuum_checked => {
                shared.asleep.store(true, Ordering::SeqCst);
                if shared.inline_groups.load(Ordering::SeqCst) > 0
                    && shared.asleep.swap(false, Ordering::SeqCst)
                {
                    // An inline commit slipped in since the last check.
                    vacuum_checked = false;
                    continue;
                }
                match rx.recv() {
                    Ok(m) => m,
                    Err(_) => break,
                }
            }
            None => match rx.recv_timeout(ctx.idle) {
                Ok(m) => m,
                Err(RecvTimeoutError::Timeout) => {
                    // Inline commits during the wait: not quiet yet, look again.
                    if shared.inline_groups.swap(0, Ordering::SeqCst) > 0 {
                        continue;
                    }
                    vacuum_checked = true;
                    if let Some(c) = lock(&shared.conn).as_ref() {
                        background_vacuum(c, &ctx);
                    }
                    continue;
                }
                Err(RecvTimeoutError::Disconnected) => break,
            },
        };
        shared.asleep.store(false, Ordering::SeqCst);
        bursting = matches!(msg, WriterMsg::Job(_)) && idle_since.elapsed() < BURST_GAP;
        match msg {
            WriterMsg::Shutdown => break,
            WriterMsg::Wake => {}
            WriterMsg::Committed => {
                shared.inline_groups.store(0, Ordering::SeqCst);
                vacuum_checked = false;
            }
            WriterMsg::Vacuum { pages, reply } => {
                let r = connection(&mut lock(&shared.conn), &ctx)
                    .and_then(|c| incremental_vacuum(c, &ctx.path, pages));
                ctx.committed();
                let _ = reply.send(r);
            }
            WriterMsg::Job(j) => {
                // The connection first, then the jobs off the gauge: a blocking
                // caller that sees an empty gauge and a free connection has no
                // queued write ahead of it.
                let g = lock(&shared.conn);
                let mut batch = vec![j];
                // A suspend waits for this group only: stop taking more.
                while batch.len() < ctx.max_group && !ctx.suspension.is_suspended() {
                    match rx.try_recv() {
                        Ok(WriterMsg::Job(j)) => batch.push(j),
                        Ok(other) => {
                            pending = Some(other);
                            break;
                        }
                        Err(_) => break,
                    }
                }
                ctx.gauge.left(batch.len());
                // Blocking callers not in the batch yet are about to queue (just
                // woken by the last group, or entering): wait for them, at most as
                // long as one commit takes, since a second commit is what the
                // wait saves. Not while a non-write message waits.
                if pending.is_none() && batch.len() < ctx.max_group {
                    let waited = Duration::from_nanos(
                        shared.commit_ns.load(Ordering::Relaxed).min(MAX_GATHER_NS),
                    );
                    let deadline = Instant::now() + waited;
                    while batch.len() < ctx.max_group
                        && shared.blocking.load(Ordering::SeqCst) > batch.len()
                        && !ctx.suspension.is_suspended()
                    {
                        let left = deadline.saturating_duration_since(Instant::now());
                        if left.is_zero() {
                            break;
                        }
                        match rx.recv_timeout(left) {
                            Ok(WriterMsg::Job(j)) => {
                                // Off the gauge at once: a caller waiting for
                                // room in a full queue is one of those awaited.
                                ctx.gauge.left(1);
                                batch.push(j);
                            }
                            Ok(other) => {
                                pending = Some(other);
                                break;
                            }
                            Err(_) => break,
                        }
                    }
                }
                held = run_batch(g, batch, &ctx, &shared, false);
                vacuum_checked = false;
            }
        }
    }
    // Writes that raced with shutdown: their futures resolve with `Closed` when the
    // jobs are dropped.
    while let Ok(m) = rx.try_recv() {
        drop(m);
    }
    ctx.suspension.set_interrupt(Parker::Writer, None);
    // Waits for an inline group still running; later blocking writes queue and
    // are told `Closed`.
    let conn = lock(&shared.conn).take();
    drop(conn);
}

fn background_vacuum(c: &KConn, ctx: &WriterCtx) {
    let free: i64 = match c.conn.query_row("PRAGMA freelist_count", [], |r| r.get(0)) {
        Ok(n) => n,
        Err(_) => return,
    };
    if free >= i64::from(ctx.vacuum_min_free_pages) && ctx.vacuum_min_free_pages > 0 {
        let pages = u32::try_from(free.min(4096)).unwrap_or(4096);
        match incremental_vacuum(c, &ctx.path, pages) {
            Ok(n) => tracing::debug!(pages = n, "background incremental vacuum"),
            Err(e) => tracing::warn!(error = %e, "background incremental vacuum failed"),
        }
        ctx.committed();
    }
}

/// Run one group: BEGIN IMMEDIATE; each job in its own SAVEPOINT (a group of one:
/// no savepoint, a failure rolls the transaction back); COMMIT; callbacks.
/// The futures resolve when the returned [`Done`] is resolved (or dropped).
fn run_group(c: &KConn, path: &Path, batch: Vec<Box<dyn Job>>, shared: &WriterShared) -> Done {
    let conn = &c.conn;
    let in_closure = &*shared.in_closure;
    let signal = &*shared.signal;
    let suspension = &*shared.suspension;
    let rows = &*shared.rows;
    let span = tracing::debug_span!("keel.commit", group = batch.len());
    let _e = span.enter();
    let start = Instant::now();
    // A stale sync failure from earlier on this thread must not label this group's errors.
    let _ = take_last_sync_error();
    // Jobs whose closure succeeded, with their callbacks, waiting for COMMIT.
    let mut committed: Vec<(Box<dyn Job>, Vec<Callback>)> = Vec::with_capacity(batch.len());
    // Jobs that failed alone (rolled back to their savepoint) or with a lost transaction.
    let mut settled: Vec<(Box<dyn Job>, Result<()>)> = Vec::new();
    let mut in_txn = false;
    let mut bumped = false;
    // A group of one needs no savepoint: its closure's failure rolls back the
    // whole transaction, which holds nothing else. Two statements less per
    // uncontended write (an inline commit is always a group of one).
    let solo = batch.len() == 1;
    for mut job in batch {
        if !in_txn {
            if let Err(e) = c.control(Control::Begin) {
                let err = Error::sqlite("begin write transaction", path, e);
                settled.push((job, Err(err)));
                continue;
            }
            in_txn = true;
            // Another process's commits, seen at each local one (in this
            // transaction's snapshot: everything committed before it).
            shared.check_data_version(c);
            // Under the write lock, so a rotation cannot rename between the check
            // and the COMMIT (rotate.rs); then not again on this connection
            // (`guard_passed`): two file-system lookups less per write.
            if !shared.guard_passed.load(Ordering::Acquire) {
                if let Err(e) = shared.guard.check() {
                    let _ = c.control(Control::Rollback);
                    in_txn = false;
                    settled.push((job, Err(e)));
                    continue;
                }
                shared.guard_passed.store(true, Ordering::Release);
            }
            // identity.rs: the first write of a new WAL records a new epoch.
            bumped |= signal.take_epoch_bump() && bump_epoch(conn, path);
        }
        if !solo {
            if let Err(e) = c.control(Control::Savepoint) {
                let err = Error::sqlite("savepoint", path, e);
                settled.push((job, Err(err)));
                continue;
            }
        }
        let mut txn = WriteTxn {
            conn: c,
            path,
            callbacks: Vec::new(),
            rows,
        };
        in_closure.store(true, Ordering::Relaxed);
        let ok = job.run(&mut txn);
        in_closure.store(false, Ordering::Relaxed);
        let callbacks = std::mem::take(&mut txn.callbacks);
        if conn.is_autocommit() {
            // SQLite rolled the whole transaction back (a closure cannot end it: see
            // `guard_transaction`): nothing of this group committed, so every closure
            // of it, earlier ones included, is told so — truthfully.
            let err = if suspension.is_suspended() {
                // A suspend interrupted the group (SQLite rolled it back): retryable.
                Error::suspended("group commit (interrupted by suspend)", path)
            } else {
                Error::sqlite(
                    "group commit (transaction ended inside a write closure)",
                    path,
                    sqlite_abort("the transaction was rolled back or ended by a write closure"),
                )
            };
            for (j, _) in committed.drain(..) {
                settled.push((j, Err(err.clone())));
            }
            settled.push((job, Err(err)));
            in_txn = false;
            if std::mem::take(&mut bumped) {
                signal.arm_epoch_bump(); // rolled back with the rest
            }
            continue;
        }
        if ok && solo {
            committed.push((job, callbacks));
        } else if ok {
            if let Err(e) = c.control(Control::Release) {
                // The closure reports an error, so its changes must not stay in the
                // group: roll them back, or (if even that fails) give up the whole
                // transaction and tell every closure of it.
                let err = Error::sqlite("release savepoint", path, e);
                drop(callbacks);
                let undone = c
                    .control(Control::RollbackTo)
                    .and_then(|()| c.control(Control::Release))
                    .is_ok();
                if !undone {
                    if !conn.is_autocommit() {
                        let _ = c.control(Control::Rollback);
                    }
                    for (j, _) in committed.drain(..) {
                        settled.push((j, Err(err.clone())));
                    }
                    in_txn = false;
                }
                settled.push((job, Err(err)));
                continue;
            }
            committed.push((job, callbacks));
        } else if solo {
            drop(callbacks);
            let _ = c.control(Control::Rollback);
            in_txn = false;
            if std::mem::take(&mut bumped) {
                signal.arm_epoch_bump(); // rolled back with the closure's changes
            }
            settled.push((job, Ok(())));
        } else {
            drop(callbacks);
            let _ = c.control(Control::RollbackTo);
            let _ = c.control(Control::Release);
            settled.push((job, Ok(())));
        }
    }
    let commit: Result<()> = if in_txn {
        let t = Instant::now();
        let r = c
            .control(Control::Commit)
            .map_err(|e| Error::sqlite("commit", path, e));
        let ns = u64::try_from(t.elapsed().as_nanos()).unwrap_or(u64::MAX);
        shared.commit_ns.store(ns, Ordering::Relaxed);
        tracing::debug!(
            commit_ms = t.elapsed().as_secs_f64() * 1e3,
            ok = r.is_ok(),
            "commit"
        );
        if r.is_err() && !conn.is_autocommit() {
            let _ = c.control(Control::Rollback);
        }
        r
    } else {
        Ok(())
    };
    if bumped && commit.is_err() {
        // The bump did not commit: the next group tries again.
        signal.arm_epoch_bump();
    }
    if commit.is_ok() {
        for (_, cbs) in committed.iter_mut() {
            for cb in cbs.drain(..) {
                if let Err(p) = catch_unwind(AssertUnwindSafe(cb)) {
                    let e = Error::panicked("on_commit callback", path, p);
                    tracing::error!(error = %e, "on_commit callback panicked");
                }
            }
        }
    }
    let mut done = Done(Vec::with_capacity(committed.len() + settled.len()));
    for (job, callbacks) in committed {
        // Callbacks of a failed commit are dropped before the future resolves: what
        // they restore on drop (the dictionary's pending values) is back in place
        // when the caller learns of the failure.
        drop(callbacks);
        done.0.push((job, commit.clone()));
    }
    done.0.extend(settled);
    tracing::debug!(ms = start.elapsed().as_secs_f64() * 1e3, "group done");
    done
}

/// The jobs of a group that ran, with their results: resolved by
/// [`Done::resolve`] once the writer connection is released (a caller woken by
/// its future finds it free), or when dropped.
#[must_use]
struct Done(Vec<(Box<dyn Job>, Result<()>)>);

impl Done {
    fn resolve(self) {}
}

impl Drop for Done {
    fn drop(&mut self) {
        for (job, r) in self.0.drain(..) {
            job.finish(&r);
        }
    }
}
