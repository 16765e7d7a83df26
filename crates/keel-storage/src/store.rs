//! `Store`: the handle apps and the object layer use.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::Sender;
use std::sync::{Arc, Mutex, MutexGuard};

use crate::checkpointer::{CheckpointMode, CheckpointOutcome, CkptMsg};
use crate::durable::{DurableFuture, Gate, Wait};
#[cfg(feature = "encryption-api")]
use crate::encryption::{Cipher, KeyProvider, KeyPurpose};
use crate::error::{Error, Result};
use crate::oneshot;
use crate::park::Suspension;
use crate::paths::wal_path;
use crate::readers::ReaderPool;
use crate::report::OpenReport;
#[cfg(feature = "encryption-api")]
use crate::rotate::{self, Encryption, RotateOptions, RotateReport, Rotation, Side};
use crate::stats::IoStats;
use crate::suspend::{ResumeReport, SuspendOptions, SuspendReport};
use crate::vfs::{VfsRegistration, VfsShared};
use crate::writer::{
    Inline, Job, QueueGauge, TypedJob, WriteFuture, WriteTxn, WriterMsg, WriterShared,
};

pub(crate) struct Inner {
    path: PathBuf,
    shared: Arc<VfsShared>,
    writer_tx: Mutex<Option<Sender<WriterMsg>>>,
    ckpt_tx: Mutex<Option<Sender<CkptMsg>>>,
    /// The durable milestone, the open report and the writer/checkpointer threads
    /// (which start at durable).
    gate: Arc<Gate>,
    readers: ReaderPool,
    gauge: Arc<QueueGauge>,
    /// The writer connection (for inline commits of blocking writes).
    writer: Arc<WriterShared>,
    closed: AtomicBool,
    close_lock: Mutex<()>,
    /// Suspend/resume state shared with the writer and checkpointer threads.
    suspension: Arc<Suspension>,
    /// Serializes suspend and resume.
    suspend_lock: Mutex<()>,
    /// While [`Store::rotate_key`] runs: whether the store stays suspended when it
    /// ends (the app's own suspend and resume meanwhile only change this).
    rotating: Mutex<Option<bool>>,
    /// Signalled when a rotation of the open store ends (a close waits for it).
    rotation_ended: std::sync::Condvar,
    /// The provider of the store's key, asked again when the store meets a file
    /// that another process rotated (see [`Store::resume`]).
    #[cfg(feature = "encryption-api")]
    provider: Mutex<Option<Arc<dyn KeyProvider>>>,
    // Last: the VFS must outlive every connection (connections also hold an Arc).
    _vfs: Arc<VfsRegistration>,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

impl Inner {
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn new(
        path: PathBuf,
        shared: Arc<VfsShared>,
        readers: ReaderPool,
        writer_tx: Sender<WriterMsg>,
        ckpt_tx: Sender<CkptMsg>,
        gate: Arc<Gate>,
        vfs: Arc<VfsRegistration>,
        gauge: Arc<QueueGauge>,
        writer: Arc<WriterShared>,
        suspension: Arc<Suspension>,
    ) -> Inner {
        Inner {
            path,
            shared,
            writer_tx: Mutex::new(Some(writer_tx)),
            ckpt_tx: Mutex::new(Some(ckpt_tx)),
            gate,
            readers,
            gauge,
            writer,
            closed: AtomicBool::new(false),
            close_lock: Mutex::new(()),
            suspension,
            suspend_lock: Mutex::new(()),
            rotating: Mutex::new(None),
            rotation_ended: std::sync::Condvar::new(),
            #[cfg(feature = "encryption-api")]
            provider: Mutex::new(None),
            _vfs: vfs,
        }
    }

    /// True on a thread that holds the writer connection: keel's writer thread,
    /// or a caller running an inline group (its closure or `on_commit` callbacks).
    /// Waiting for the writer there would wait for itself.
    fn on_writer(&self) -> bool {
        self.gate.threads.writer_id.get() == Some(&std::thread::current().id())
            || self.writer.inline_here()
    }

    fn close(&self) -> Result<()> {
        let _g = lock(&self.close_lock);
        // A rotation of the open store ends first: closing under it would let the
        // queued writes meet the file it holds exclusively.
        let mut r = lock(&self.rotating);
        while r.is_some() {
            r = self
                .rotation_ended
                .wait(r)
                .unwrap_or_else(|p| p.into_inner());
        }
        drop(r);
        if self.closed.swap(true, Ordering::SeqCst) {
            return Ok(());
        }
        // A suspended store resumes to close: the queued writes commit and the
        // final checkpoint runs, as for any close.
        self.end_suspension();
        // 0. During the open barrier the writer is parked: wait for it (bounded),
        //    then fail what is queued rather than hang.
        let t = std::time::Instant::now();
        let abandoned = match self.gate.wait(Some(self.gate.truncate_timeout)) {
            Wait::TimedOut => self.gate.abandon("close", t.elapsed()),
            Wait::Durable | Wait::Failed(_) => None,
        };
        let on_writer = self.on_writer();
        // 1. The writer finishes what is queued, then exits.
        if let Some(tx) = lock(&self.writer_tx).take() {
            let _ = tx.send(WriterMsg::Shutdown);
        }
        if !on_writer {
            if let Some(h) = lock(&self.gate.threads.writer).take() {
                let _ = h.join();
            }
        }
        // 2. Readers.
        self.readers.close();
        // 3. The checkpointer: TRUNCATE (bounded wait), then closes the last connection.
        if let Some(tx) = lock(&self.ckpt_tx).take() {
            let _ = tx.send(CkptMsg::Shutdown);
        }
        if let Some(h) = lock(&self.gate.threads.ckpt).take() {
            let _ = h.join();
        }
        tracing::info!(path = %self.path.display(), "store closed");
        match abandoned {
            Some(e) => Err(e),
            None => Ok(()),
        }
    }
}

impl Inner {
    fn end_suspension(&self) -> (bool, bool, std::time::Duration) {
        let r = self.suspension.end(&self.path);
        if r.0 {
            self.readers.resume();
        }
        r
    }
}

impl Drop for Inner {
    /// The last handle went away without [`Store::close`]: hand the shutdown to a
    /// keel thread and return at once. Dropping usually happens on an app's main
    /// thread (a Swift `deinit`, a Kotlin `close()`), and the shutdown ends with a
    /// TRUNCATE checkpoint and its full sync, which can take seconds. The queued
    /// writes still commit and the checkpoint still runs, on `keel-close`; call
    /// [`Store::close`] to wait for them.
    fn drop(&mut self) {
        let _g = lock(&self.close_lock);
        if self.closed.swap(true, Ordering::SeqCst) {
            return;
        }
        // Nobody can read any more.
        self.readers.close();
        // Suspended: the threads wake to shut down (see `close`).
        self.end_suspension();
        let gate = Arc::clone(&self.gate);
        let writer_tx = lock(&self.writer_tx).take();
        let ckpt_tx = lock(&self.ckpt_tx).take();
        let path = self.path.clone();
        let on_writer = self.on_writer();
        // The same steps as `close`, on another thread.
        let shutdown = move || {
            // During the open barrier the writer is parked: wait for it (bounded),
            // then fail what is queued rather than hang.
            let t = std::time::Instant::now();
            if let Wait::TimedOut = gate.wait(Some(gate.truncate_timeout)) {
                if let Some(e) = gate.abandon("close (last handle dropped)", t.elapsed()) {
                    tracing::warn!(error = %e, "closed during the open barrier");
                }
            }
            // The writer finishes what is queued, then exits.
            if let Some(tx) = writer_tx {
                let _ = tx.send(WriterMsg::Shutdown);
            }
            if !on_writer {
                if let Some(h) = lock(&gate.threads.writer).take() {
                    let _ = h.join();
                }
            }
            // The checkpointer: TRUNCATE (bounded wait), then closes the last connection.
            if let Some(tx) = ckpt_tx {
                let _ = tx.send(CkptMsg::Shutdown);
            }
            if let Some(h) = lock(&gate.threads.ckpt).take() {
                let _ = h.join();
            }
            tracing::info!(path = %path.display(), "store closed (last handle dropped)");
        };
        // The closure moves into the thread only if the spawn succeeds; keep a way
        // to run it here when it does not.
        let slot = Arc::new(Mutex::new(Some(shutdown)));
        let s2 = Arc::clone(&slot);
        let spawned = std::thread::Builder::new()
            .name("keel-close".into())
            .spawn(move || {
                if let Some(f) = lock(&s2).take() {
                    f();
                }
            });
        if let Err(e) = spawned {
            tracing::warn!(error = %e, "could not start keel-close; closing on the dropping thread");
            if let Some(f) = lock(&slot).take() {
                f();
            }
        }
    }
}

/// An open keel store: one SQLite database with a writer thread (group commit), a
/// pool of read-only connections and a background checkpointer. Cheap to clone;
/// `Send + Sync`. Dropping the last clone closes the store in the background: the
/// drop returns at once and a keel thread (`keel-close`) commits the queued writes,
/// runs the final checkpoint and closes the connections. Call [`Store::close`] to
/// wait for that (before a process exits, for instance).
///
/// ```
/// use keel_storage::{Error, Store, StoreOptions};
/// let dir = tempfile::tempdir().unwrap();
/// let store = Store::open(dir.path().join("app.db"), StoreOptions::default())?;
/// store.write_blocking(|t| {
///     t.execute_batch("CREATE TABLE note(id INTEGER PRIMARY KEY, body TEXT)")?;
///     t.execute("INSERT INTO note(body) VALUES ('hi')", [])?;
///     Ok::<_, Error>(())
/// })?;
/// let n: i64 = store.read(|c| c.query_row("SELECT count(*) FROM note", [], |r| r.get(0)).map_err(Error::from))?;
/// assert_eq!(n, 1);
/// store.close()?;
/// # Ok::<(), Error>(())
/// ```
#[derive(Clone)]
pub struct Store {
    inner: Arc<Inner>,
}

impl std::fmt::Debug for Store {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Store")
            .field("path", &self.inner.path)
            .field("closed", &self.inner.closed.load(Ordering::Relaxed))
            .finish()
    }
}

/// The future returned by [`Store::open_async`] (`Future<Output = Result<Store>>`).
///
/// ```
/// # use keel_storage::{Store, StoreOptions};
/// # let dir = tempfile::tempdir().unwrap();
/// let fut = Store::open_async(dir.path().join("a.db"), StoreOptions::default());
/// drop(fut); // cancels: no store, no thread left behind
/// ```
/// Runtime-agnostic: `.await` it on
/// any executor or block with [`OpenFuture::wait`]. Dropping it before it resolves
/// cancels the open: the open thread stops at the next phase boundary, closes what
/// it opened and exits.
#[must_use = "dropping the future cancels the open"]
pub struct OpenFuture {
    pub(crate) rx: oneshot::Receiver<Result<Store>>,
    pub(crate) path: PathBuf,
}

impl OpenFuture {
    /// Block until the open finishes.
    ///
    /// ```
    /// # use keel_storage::{Store, StoreOptions};
    /// # let dir = tempfile::tempdir().unwrap();
    /// let store = Store::open_async(dir.path().join("a.db"), StoreOptions::default()).wait()?;
    /// # Ok::<(), keel_storage::Error>(())
    /// ```
    pub fn wait(self) -> Result<Store> {
        match self.rx.wait() {
            Some(r) => r,
            None => Err(Error::Cancelled {
                op: "open (open thread ended without a result)",
                path: self.path.clone(),
            }),
        }
    }
}

impl std::future::Future for OpenFuture {
    type Output = Result<Store>;
    fn poll(
        self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Result<Store>> {
        match self.rx.poll_recv(cx) {
            std::task::Poll::Ready(Some(r)) => std::task::Poll::Ready(r),
            std::task::Poll::Ready(None) => std::task::Poll::Ready(Err(Error::Cancelled {
                op: "open (open thread ended without a result)",
                path: self.path.clone(),
            })),
            std::task::Poll::Pending => std::task::Poll::Pending,
        }
    }
}

impl Store {
    pub(crate) fn from_inner(inner: Inner) -> Store {
        Store {
            inner: Arc::new(inner),
        }
    }

    pub(crate) fn set_report(&self, r: OpenReport) {
        *lock(&self.inner.gate.report) = r;
    }

    pub(crate) fn gate(&self) -> &Gate {
        &self.inner.gate
    }

    /// Queue a write. The closure runs on keel's writer thread inside its own
    /// SAVEPOINT, grouped with other queued writes into one transaction (group
    /// commit). If it returns `Err` only its own changes roll back. The future
    /// resolves after COMMIT (and after `on_commit` callbacks ran); if COMMIT fails
    /// every closure of the group gets the error. If the queue already holds
    /// [`StoreOptions::max_queued_writes`](crate::options::StoreOptions::max_queued_writes)
    /// writes the future resolves at once with [`Error::QueueFull`] and the closure
    /// never runs (backpressure, see `docs/durability.md`).
    ///
    /// The closure never runs on the calling thread, so awaiting the future never
    /// blocks an executor thread for a disk sync. A thread that waits anyway should
    /// call [`Store::write_blocking`], which skips the handoff when it can.
    ///
    /// Another process writing the same file: the group's transaction starts with
    /// `BEGIN IMMEDIATE`, so the write lock is taken up front where the busy timeout
    /// ([`StoreOptions::busy_timeout`](crate::options::StoreOptions::busy_timeout)) applies,
    /// on the writer thread — never on the caller's. Only a lock held past that
    /// timeout fails the group, with the retryable [`Error::Locked`].
    ///
    /// While the store is [suspended](Store::suspend) the write waits in the queue
    /// until [`Store::resume`], or fails at once with [`Error::Suspended`] if the
    /// suspend asked for `fail_fast`.
    ///
    /// ```
    /// # use keel_storage::{Error, Store, StoreOptions};
    /// # let dir = tempfile::tempdir().unwrap();
    /// # let store = Store::open(dir.path().join("a.db"), StoreOptions::default())?;
    /// let id = futures::executor::block_on(store.write(|t| {
    ///     t.execute_batch("CREATE TABLE IF NOT EXISTS t(x)")?;
    ///     t.execute("INSERT INTO t VALUES (1)", [])?;
    ///     Ok::<_, Error>(t.last_insert_rowid())
    /// }))?;
    /// assert_eq!(id, 1);
    /// # Ok::<(), Error>(())
    /// ```
    pub fn write<F, R, E>(&self, f: F) -> WriteFuture<std::result::Result<R, E>>
    where
        F: FnOnce(&mut WriteTxn<'_>) -> std::result::Result<R, E> + Send + 'static,
        R: Send + 'static,
        E: From<Error> + Send + 'static,
    {
        let (job, fut) = self.job(f);
        self.enqueue(job, self.inner.gauge.try_reserve(), true);
        fut
    }

    /// [`Store::write`] for background work that must not be dropped (a cache's
    /// flush): while suspended it always waits for resume, even when the suspend
    /// asked for `fail_fast`.
    ///
    /// ```
    /// # use keel_storage::{Error, Store, StoreOptions};
    /// # let dir = tempfile::tempdir().unwrap();
    /// # let store = Store::open(dir.path().join("a.db"), StoreOptions::default())?;
    /// store.write_waiting(|t| t.execute_batch("CREATE TABLE t(x)").map_err(Error::from)).wait()?;
    /// # Ok::<(), Error>(())
    /// ```
    pub fn write_waiting<F, R, E>(&self, f: F) -> WriteFuture<std::result::Result<R, E>>
    where
        F: FnOnce(&mut WriteTxn<'_>) -> std::result::Result<R, E> + Send + 'static,
        R: Send + 'static,
        E: From<Error> + Send + 'static,
    {
        let (job, fut) = self.job(f);
        self.enqueue(job, self.inner.gauge.try_reserve(), false);
        fut
    }

    /// A write's job and the future it resolves.
    fn job<F, R, E>(&self, f: F) -> (Box<dyn Job>, WriteFuture<std::result::Result<R, E>>)
    where
        F: FnOnce(&mut WriteTxn<'_>) -> std::result::Result<R, E> + Send + 'static,
        R: Send + 'static,
        E: From<Error> + Send + 'static,
    {
        let (tx, rx) = oneshot::channel();
        let path = self.inner.path.clone();
        let p2 = path.clone();
        let fut = WriteFuture::new(
            rx,
            Box::new(move || Err(E::from(Error::closed("write", &p2)))),
        );
        (Box::new(TypedJob::new(f, tx, path)), fut)
    }

    /// Queue `job` if `reserved` (a place in the writer queue was taken for it);
    /// otherwise resolve its future with [`Error::QueueFull`] (or, `fail_fast`
    /// while suspended so, [`Error::Suspended`]). A job dropped unrun resolves its
    /// future with `Closed`.
    fn enqueue(&self, job: Box<dyn Job>, reserved: bool, fail_fast: bool) {
        if self.inner.closed.load(Ordering::SeqCst) {
            if reserved {
                self.inner.gauge.release();
            }
            return;
        }
        if fail_fast && self.inner.suspension.fails_fast() {
            if reserved {
                self.inner.gauge.release();
            }
            job.finish(&Err(Error::suspended("write", &self.inner.path)));
            return;
        }
        if !reserved {
            job.finish(&Err(Error::QueueFull {
                op: "write",
                path: self.inner.path.clone(),
                capacity: self.inner.gauge.capacity(),
            }));
            return;
        }
        let sent = match lock(&self.inner.writer_tx).as_ref() {
            // On failure the job is dropped: the future reports `Closed`.
            Some(wtx) => wtx.send(WriterMsg::Job(job)).is_ok(),
            None => false,
        };
        if !sent {
            self.inner.gauge.release();
        }
    }

    /// Writes waiting in the writer queue now (at most
    /// [`StoreOptions::max_queued_writes`](crate::options::StoreOptions::max_queued_writes)).
    ///
    /// ```
    /// # use keel_storage::{Store, StoreOptions};
    /// # let dir = tempfile::tempdir().unwrap();
    /// let store = Store::open(dir.path().join("q.db"), StoreOptions::default())?;
    /// assert_eq!(store.queued_writes(), 0);
    /// # Ok::<(), keel_storage::Error>(())
    /// ```
    pub fn queued_writes(&self) -> usize {
        self.inner.gauge.len()
    }

    /// [`Store::write`] and wait for it, without the handoff when the writer is
    /// idle: if no write is queued, no other `write_blocking` call is in progress
    /// and the writer connection is free, the closure and the COMMIT (with its disk
    /// sync) run on the calling thread, as a group of their own, with every promise
    /// of a queued write (its own SAVEPOINT, the authorizer, `on_commit` callbacks
    /// before this returns). Otherwise the write queues behind the others and this
    /// waits for its group; a full queue makes it wait for room rather than fail.
    /// Blocking writers from several threads thus share group commits: the writer
    /// waits briefly (at most as long as a commit takes) for those in progress to
    /// join a group rather than commit them one by one. Before the store is
    /// durable every write queues behind the open barrier.
    ///
    /// Must not be called from inside a write closure or an `on_commit` callback
    /// of the same store (it returns an error there instead of deadlocking).
    ///
    /// ```
    /// # use keel_storage::{Error, Store, StoreOptions};
    /// # let dir = tempfile::tempdir().unwrap();
    /// # let store = Store::open(dir.path().join("a.db"), StoreOptions::default())?;
    /// let caller = std::thread::current().id();
    /// let ran_on = store.write_blocking(|t| {
    ///     t.execute_batch("CREATE TABLE t(x)")?;
    ///     Ok::<_, Error>(std::thread::current().id())
    /// })?;
    /// assert_eq!(ran_on, caller); // nothing queued: committed inline
    /// # Ok::<(), Error>(())
    /// ```
    pub fn write_blocking<F, R, E>(&self, f: F) -> std::result::Result<R, E>
    where
        F: FnOnce(&mut WriteTxn<'_>) -> std::result::Result<R, E> + Send + 'static,
        R: Send + 'static,
        E: From<Error> + Send + 'static,
    {
        let inner = &self.inner;
        if inner.on_writer() {
            return Err(E::from(Error::Cancelled {
                op: "write_blocking on the writer thread (would deadlock)",
                path: inner.path.clone(),
            }));
        }
        let (mut job, fut) = self.job(f);
        let (_counted, others) = inner.writer.enter_blocking();
        // Other blocking writers in flight: queue, so that the writer commits
        // them together (see `enter_blocking`), rather than commit alone.
        if !others && !inner.closed.load(Ordering::SeqCst) && inner.gauge.len() == 0 {
            match inner.writer.try_inline(job) {
                Inline::Ran {
                    wake_ckpt,
                    wake_writer,
                } => {
                    if wake_ckpt {
                        if let Some(tx) = lock(&inner.ckpt_tx).as_ref() {
                            let _ = tx.send(CkptMsg::Committed);
                        }
                    }
                    if wake_writer {
                        if let Some(tx) = lock(&inner.writer_tx).as_ref() {
                            let _ = tx.send(WriterMsg::Committed);
                        }
                    }
                    return fut.wait();
                }
                Inline::Busy(j) => job = j,
            }
        }
        // Blocking anyway: wait for room in the queue rather than fail.
        let reserved = inner
            .gauge
            .reserve_blocking(|| inner.closed.load(Ordering::SeqCst));
        self.enqueue(job, reserved, true);
        fut.wait()
    }

    /// Run `f` synchronously on the calling thread with a pooled read-only connection,
    /// inside one read transaction: every query in `f` sees the same snapshot. Readers
    /// never wait for the writer. Blocks only if every pooled connection is in use,
    /// or while the store is [suspended](Store::suspend) (until [`Store::resume`];
    /// with `fail_fast` it returns [`Error::Suspended`] at once instead).
    ///
    /// ```
    /// # use keel_storage::{Error, Store, StoreOptions};
    /// # let dir = tempfile::tempdir().unwrap();
    /// # let store = Store::open(dir.path().join("a.db"), StoreOptions::default())?;
    /// let (a, b) = store.read(|c| {
    ///     let a: i64 = c.query_row("SELECT count(*) FROM sqlite_schema", [], |r| r.get(0))?;
    ///     let b: i64 = c.query_row("SELECT count(*) FROM sqlite_schema", [], |r| r.get(0))?;
    ///     Ok::<_, Error>((a, b))
    /// })?;
    /// assert_eq!(a, b);
    /// # Ok::<(), Error>(())
    /// ```
    pub fn read<R, E>(
        &self,
        f: impl FnOnce(&rusqlite::Connection) -> std::result::Result<R, E>,
    ) -> std::result::Result<R, E>
    where
        E: From<Error>,
    {
        self.read_on_pool(true, f)
    }

    /// [`Store::read`] without the read transaction around `f`: each statement `f`
    /// runs is a read transaction of its own (SQLite's autocommit), seeing what was
    /// committed when it started. For `f` that runs one statement the view is the
    /// same as with [`Store::read`], without the cost of `BEGIN` and `COMMIT` — what
    /// a lookup by key is dominated by. Several statements may see different
    /// commits: use [`Store::read`] when they must agree.
    ///
    /// ```
    /// # use keel_storage::{Error, Store, StoreOptions};
    /// # let dir = tempfile::tempdir().unwrap();
    /// # let store = Store::open(dir.path().join("a.db"), StoreOptions::default())?;
    /// let n: i64 = store.read_autocommit(|c| {
    ///     assert!(c.is_autocommit());
    ///     c.query_row("SELECT count(*) FROM sqlite_schema", [], |r| r.get(0)).map_err(Error::from)
    /// })?;
    /// assert!(n >= 0);
    /// # Ok::<(), Error>(())
    /// ```
    pub fn read_autocommit<R, E>(
        &self,
        f: impl FnOnce(&rusqlite::Connection) -> std::result::Result<R, E>,
    ) -> std::result::Result<R, E>
    where
        E: From<Error>,
    {
        self.read_on_pool(false, f)
    }

    /// [`Store::read`] (`in_txn`) or [`Store::read_autocommit`].
    fn read_on_pool<R, E>(
        &self,
        in_txn: bool,
        f: impl FnOnce(&rusqlite::Connection) -> std::result::Result<R, E>,
    ) -> std::result::Result<R, E>
    where
        E: From<Error>,
    {
        if self.inner.closed.load(Ordering::SeqCst) {
            return Err(E::from(Error::closed("read", &self.inner.path)));
        }
        self.inner.readers.read(&self.inner.path, in_txn, f)
    }

    /// Alias of [`Store::read`]: several reads in one consistent snapshot.
    ///
    /// ```
    /// # use keel_storage::{Error, Store, StoreOptions};
    /// # let dir = tempfile::tempdir().unwrap();
    /// # let store = Store::open(dir.path().join("a.db"), StoreOptions::default())?;
    /// let n: i64 = store.snapshot(|c| c.query_row("SELECT 1", [], |r| r.get(0)).map_err(Error::from))?;
    /// # Ok::<(), Error>(())
    /// ```
    pub fn snapshot<R, E>(
        &self,
        f: impl FnOnce(&rusqlite::Connection) -> std::result::Result<R, E>,
    ) -> std::result::Result<R, E>
    where
        E: From<Error>,
    {
        self.read(f)
    }

    /// Run a checkpoint now on the checkpointer thread and wait for it. `Truncate`
    /// waits at most `StoreOptions::truncate_timeout` for readers and the writer;
    /// if they stay in the way the outcome says `busy`.
    ///
    /// A checkpoint writes the database file, so it runs only once the store is
    /// durable: called while the open barrier still runs, it waits for it at most
    /// `truncate_timeout` too, and then answers `busy` (nothing was copied, the
    /// WAL is untouched). If the barrier failed it returns the barrier's error.
    ///
    /// ```
    /// # use keel_storage::{CheckpointMode, Store, StoreOptions};
    /// # let dir = tempfile::tempdir().unwrap();
    /// # let store = Store::open(dir.path().join("a.db"), StoreOptions::default())?;
    /// let out = store.checkpoint(CheckpointMode::Passive)?;
    /// assert!(!out.busy);
    /// # Ok::<(), keel_storage::Error>(())
    /// ```
    pub fn checkpoint(&self, mode: CheckpointMode) -> Result<CheckpointOutcome> {
        if self.inner.closed.load(Ordering::SeqCst) {
            return Err(Error::closed("checkpoint", &self.inner.path));
        }
        if self.inner.suspension.is_suspended() {
            return Err(Error::suspended("checkpoint", &self.inner.path));
        }
        let t = std::time::Instant::now();
        match self.inner.gate.wait(Some(self.inner.gate.truncate_timeout)) {
            Wait::Durable => {}
            Wait::Failed(e) => return Err(e),
            Wait::TimedOut => {
                tracing::info!(
                    mode = mode.sql(),
                    "checkpoint: the open barrier is still running"
                );
                return Ok(CheckpointOutcome {
                    mode,
                    busy: true,
                    wal_frames: -1,
                    checkpointed_frames: -1,
                    duration: t.elapsed(),
                    wal_bytes_after: std::fs::metadata(wal_path(&self.inner.path))
                        .map(|m| m.len())
                        .unwrap_or(0),
                });
            }
        }
        let (tx, rx) = oneshot::channel();
        {
            let g = lock(&self.inner.ckpt_tx);
            let Some(ctx) = g.as_ref() else {
                return Err(Error::closed("checkpoint", &self.inner.path));
            };
            if self.inner.closed.load(Ordering::SeqCst)
                || ctx.send(CkptMsg::Run { mode, reply: tx }).is_err()
            {
                return Err(Error::closed("checkpoint", &self.inner.path));
            }
        }
        rx.wait()
            .unwrap_or_else(|| Err(Error::closed("checkpoint", &self.inner.path)))
    }

    /// The app is going to the background: TRUNCATE checkpoint with a bounded wait so
    /// the WAL is empty (and the next launch has nothing to sync or recover). During
    /// the open barrier it first waits for it (same bound); see [`Store::checkpoint`].
    ///
    /// ```
    /// # use keel_storage::{Store, StoreOptions};
    /// # let dir = tempfile::tempdir().unwrap();
    /// # let store = Store::open(dir.path().join("a.db"), StoreOptions::default())?;
    /// let out = store.on_background()?;
    /// assert_eq!(out.wal_bytes_after, 0);
    /// # Ok::<(), keel_storage::Error>(())
    /// ```
    pub fn on_background(&self) -> Result<CheckpointOutcome> {
        self.checkpoint(CheckpointMode::Truncate)
    }

    /// Let go of every file lock this process holds on the database, its `-wal`
    /// and its `-shm`, within a bounded time — what an iOS app must do before it
    /// is suspended in the background with its database in a shared App Group
    /// container (or the system kills it with `0xdead10cc`).
    ///
    /// * **What is held afterwards:** no SQLite connection is open, so no lock of
    ///   any kind (main-file, WAL write lock, `-shm` read marks and DMS byte). The
    ///   keel threads stay alive, parked; every `Store` clone stays valid.
    /// * **Work in flight:** the write group already running and the reads already
    ///   running may go on for [`SuspendOptions::interrupt_after`]; then their SQL
    ///   is interrupted and they fail with the retryable [`Error::Suspended`]
    ///   (nothing of an interrupted group commits). Writes queued but not started
    ///   stay queued.
    /// * **New work:** reads block their calling thread and writes wait in the
    ///   queue until [`Store::resume`] — or both fail at once with
    ///   [`Error::Suspended`] under [`SuspendOptions::fail_fast`].
    ///   [`Store::checkpoint`] fails with [`Error::Suspended`].
    /// * **Which thread:** this call blocks its caller for at most
    ///   [`SuspendOptions::timeout`] (plus the TRUNCATE checkpoint with
    ///   [`SuspendOptions::checkpoint_first`], bounded by `truncate_timeout`); the
    ///   connections close on the threads that own them. Call it off the main
    ///   thread (the FFI does) or accept that bound.
    /// * **Not closing:** no checkpoint runs when the connections close (unless
    ///   `checkpoint_first`), so nothing is written after the call.
    ///
    /// Called during the open barrier it waits for it (at most `truncate_timeout`,
    /// then [`Error::BarrierPending`]). A second call while suspended does nothing.
    /// Called from inside a write closure it returns [`Error::Cancelled`] (it would
    /// wait for itself); from inside a read closure it cannot close that read's
    /// connection and ends with [`Error::SuspendTimeout`].
    ///
    /// ```
    /// # use keel_storage::{Error, Store, StoreOptions, SuspendOptions};
    /// # let dir = tempfile::tempdir().unwrap();
    /// let store = Store::open(dir.path().join("app.db"), StoreOptions::default())?;
    /// store.write_blocking(|t| t.execute_batch("CREATE TABLE t(x)").map_err(Error::from))?;
    /// // applicationDidEnterBackground:
    /// let r = store.suspend(SuspendOptions::default().checkpoint_first(true).fail_fast(true))?;
    /// assert_eq!(r.checkpoint.map(|c| c.wal_bytes_after), Some(0));
    /// assert!(matches!(store.read(|_| Ok::<_, Error>(())), Err(Error::Suspended { .. })));
    /// // applicationWillEnterForeground:
    /// store.resume()?;
    /// store.read(|c| c.query_row("SELECT count(*) FROM t", [], |r| r.get::<_, i64>(0)).map_err(Error::from))?;
    /// # Ok::<(), Error>(())
    /// ```
    pub fn suspend(&self, opts: SuspendOptions) -> Result<SuspendReport> {
        let t0 = std::time::Instant::now();
        if self.inner.on_writer() {
            return Err(Error::Cancelled {
                op: "suspend inside a write closure (it would wait for itself)",
                path: self.inner.path.clone(),
            });
        }
        if let Some(stay) = lock(&self.inner.rotating).as_mut() {
            // A rotation holds the store suspended: it stays so when it ends.
            *stay = true;
            return Ok(SuspendReport {
                checkpoint: None,
                interrupted: false,
                newly_suspended: false,
                duration: t0.elapsed(),
            });
        }
        self.suspend_now(opts, t0)
    }

    fn suspend_now(&self, opts: SuspendOptions, t0: std::time::Instant) -> Result<SuspendReport> {
        let inner = &self.inner;
        let _g = lock(&inner.suspend_lock);
        if inner.closed.load(Ordering::SeqCst) {
            return Err(Error::closed("suspend", &inner.path));
        }
        if inner.suspension.is_suspended() {
            return Ok(SuspendReport {
                checkpoint: None,
                interrupted: false,
                newly_suspended: false,
                duration: t0.elapsed(),
            });
        }
        // The writer and checkpointer hold connections from durable on; after a
        // failed barrier they hold none.
        let threads = match inner.gate.wait(Some(inner.gate.truncate_timeout)) {
            Wait::Durable => true,
            Wait::Failed(_) => false,
            Wait::TimedOut => {
                return Err(Error::BarrierPending {
                    op: "suspend",
                    path: inner.path.clone(),
                    waited: t0.elapsed(),
                })
            }
        };
        let checkpoint = if opts.checkpoint_first && threads {
            match self.checkpoint(CheckpointMode::Truncate) {
                Ok(o) => Some(o),
                Err(e) => {
                    tracing::warn!(error = %e, "suspend: the TRUNCATE checkpoint failed; suspending anyway");
                    None
                }
            }
        } else {
            None
        };
        let t1 = std::time::Instant::now();
        inner.suspension.begin(opts.fail_fast, threads);
        // Wake the threads so they see it (each closes its connection and parks).
        if let Some(tx) = lock(&inner.writer_tx).as_ref() {
            let _ = tx.send(WriterMsg::Wake);
        }
        if let Some(tx) = lock(&inner.ckpt_tx).as_ref() {
            let _ = tx.send(CkptMsg::Wake);
        }
        inner.readers.suspend(opts.fail_fast);
        let grace = t1 + opts.interrupt_after;
        let deadline = t1 + opts.timeout.max(opts.interrupt_after);
        let mut interrupted = false;
        let released = loop {
            let now = std::time::Instant::now();
            // Before the grace ends: wait for it; after: interrupt, then poll briefly
            // (an interrupt only stops a statement that is running, so repeat it).
            let until = if now < grace {
                grace
            } else {
                interrupted |= !self.released_now();
                inner.suspension.interrupt_threads();
                inner.readers.interrupt_borrowed();
                (now + std::time::Duration::from_millis(5)).min(deadline)
            };
            let threads_done = inner.suspension.wait_released(until);
            let pool_done = threads_done && inner.readers.wait_released(until);
            if threads_done && pool_done {
                break true;
            }
            if std::time::Instant::now() >= deadline {
                break false;
            }
        };
        if !released {
            return Err(Error::SuspendTimeout {
                path: inner.path.clone(),
                waited: t0.elapsed(),
            });
        }
        inner.suspension.record_stamp(&inner.path);
        tracing::info!(
            ms = t0.elapsed().as_secs_f64() * 1e3,
            interrupted,
            "store suspended: no connection open"
        );
        Ok(SuspendReport {
            checkpoint,
            interrupted,
            newly_suspended: true,
            duration: t0.elapsed(),
        })
    }

    /// True if every connection is closed (used to tell whether an interrupt hit).
    fn released_now(&self) -> bool {
        let now = std::time::Instant::now();
        self.inner.suspension.wait_released(now) && self.inner.readers.wait_released(now)
    }

    /// End a [`Store::suspend`]: waiting reads and queued writes go on. Returns at
    /// once, on any thread: connections reopen lazily on the threads that use
    /// them (the writer's at the next write, a reader's at the next read). Not
    /// suspended: does nothing.
    ///
    /// Another process may have written meanwhile. Resume compares the database
    /// file and `-wal` with what they were when the last connection closed; if they
    /// changed, [`ResumeReport::external_changes`] says so (the object layer then
    /// refreshes what it cached), and before its first commit the writer syncs that
    /// WAL through the open-barrier policy (frames another process wrote may not be
    /// durable yet, and a commit must not land on top of frames that are not). When
    /// nothing changed no sync runs: this process's own commits were synced by its
    /// commit policy. SQLite itself rebuilds its view of the WAL when each
    /// connection reopens.
    ///
    /// ```
    /// # use keel_storage::{Store, StoreOptions, SuspendOptions};
    /// # let dir = tempfile::tempdir().unwrap();
    /// # let store = Store::open(dir.path().join("a.db"), StoreOptions::default())?;
    /// store.suspend(SuspendOptions::default())?;
    /// assert!(store.is_suspended());
    /// assert!(store.resume()?.was_suspended);
    /// assert!(!store.is_suspended());
    /// # Ok::<(), keel_storage::Error>(())
    /// ```
    pub fn resume(&self) -> Result<ResumeReport> {
        if let Some(stay) = lock(&self.inner.rotating).as_mut() {
            // A rotation holds the store suspended: it resumes when it ends.
            *stay = false;
            return Ok(ResumeReport {
                was_suspended: true,
                external_changes: false,
                suspended_for: std::time::Duration::ZERO,
            });
        }
        self.resume_now()
    }

    fn resume_now(&self) -> Result<ResumeReport> {
        let inner = &self.inner;
        let _g = lock(&inner.suspend_lock);
        if inner.closed.load(Ordering::SeqCst) {
            return Err(Error::closed("resume", &inner.path));
        }
        #[cfg(feature = "encryption-api")]
        if inner.suspension.is_suspended() && inner.writer.guard().replaced() {
            // Another process rotated the file while this store let go of it.
            if let Err(e) = self.adopt_rotated() {
                tracing::warn!(error = %e, "the database was rotated and its key provider gave no key that opens it; writes fail with Rotated");
            }
        }
        let (was_suspended, external_changes, suspended_for) = inner.end_suspension();
        if was_suspended {
            tracing::info!(
                external_changes,
                ms = suspended_for.as_secs_f64() * 1e3,
                "store resumed"
            );
        }
        Ok(ResumeReport {
            was_suspended,
            external_changes,
            suspended_for,
        })
    }

    /// True between [`Store::suspend`] and [`Store::resume`].
    ///
    /// ```
    /// # use keel_storage::{Store, StoreOptions};
    /// # let dir = tempfile::tempdir().unwrap();
    /// # let store = Store::open(dir.path().join("a.db"), StoreOptions::default())?;
    /// assert!(!store.is_suspended());
    /// # Ok::<(), keel_storage::Error>(())
    /// ```
    pub fn is_suspended(&self) -> bool {
        self.inner.suspension.is_suspended()
    }

    /// How many times this store found that another connection — another process,
    /// or another `Store` on the same file — committed since it last looked
    /// (`PRAGMA data_version` on the writer connection, which only another
    /// connection's commit changes). Checked at the start of each write
    /// transaction and before a suspend closes the connection; with `probe`, also
    /// now, if the writer connection is free (it never waits for a running write,
    /// which checks by itself). A check costs one cached pragma (about a
    /// microsecond, no I/O). A TRUNCATE or RESTART checkpoint, which resets the
    /// WAL, may count once too: callers re-read, they never miss a commit.
    ///
    /// A caller that caches what it read (keel's live queries) compares the
    /// number with the one it last acted on.
    ///
    /// ```
    /// # use keel_storage::{Error, Store, StoreOptions};
    /// # let dir = tempfile::tempdir().unwrap();
    /// let path = dir.path().join("two.db");
    /// let a = Store::open(&path, StoreOptions::default())?;
    /// let b = Store::open(&path, StoreOptions::default())?; // as another process would
    /// let seen = a.foreign_commits(true);
    /// a.write_blocking(|t| t.execute_batch("CREATE TABLE mine(x)").map_err(Error::from))?;
    /// assert_eq!(a.foreign_commits(true), seen); // its own commit does not count
    /// b.write_blocking(|t| t.execute_batch("CREATE TABLE theirs(x)").map_err(Error::from))?;
    /// assert!(a.foreign_commits(true) > seen);
    /// # Ok::<(), Error>(())
    /// ```
    pub fn foreign_commits(&self, probe: bool) -> u64 {
        self.inner.writer.foreign_commits(probe)
    }

    /// Reclaim up to `pages` free pages now (runs on the writer thread). Returns the
    /// number of pages reclaimed. The writer also does this by itself when idle.
    /// It writes, so before the store is durable it waits for the open barrier.
    ///
    /// ```
    /// # use keel_storage::{Store, StoreOptions};
    /// # let dir = tempfile::tempdir().unwrap();
    /// # let store = Store::open(dir.path().join("a.db"), StoreOptions::default())?;
    /// let freed = store.incremental_vacuum(100)?;
    /// assert_eq!(freed, 0);
    /// # Ok::<(), keel_storage::Error>(())
    /// ```
    pub fn incremental_vacuum(&self, pages: u32) -> Result<u64> {
        if self.inner.on_writer() {
            return Err(Error::Cancelled {
                op: "incremental vacuum inside a write (would deadlock)",
                path: self.inner.path.clone(),
            });
        }
        let (tx, rx) = oneshot::channel();
        {
            let g = lock(&self.inner.writer_tx);
            let Some(w) = g.as_ref() else {
                return Err(Error::closed("incremental vacuum", &self.inner.path));
            };
            if w.send(WriterMsg::Vacuum { pages, reply: tx }).is_err() {
                return Err(Error::closed("incremental vacuum", &self.inner.path));
            }
        }
        rx.wait()
            .unwrap_or_else(|| Err(Error::closed("incremental vacuum", &self.inner.path)))
    }

    /// Finish queued writes, TRUNCATE-checkpoint (bounded wait), close every
    /// connection and join keel's threads. Later calls on any clone return
    /// [`Error::Closed`]. Idempotent.
    ///
    /// ```
    /// # use keel_storage::{Error, Store, StoreOptions};
    /// # let dir = tempfile::tempdir().unwrap();
    /// # let store = Store::open(dir.path().join("a.db"), StoreOptions::default())?;
    /// store.close()?;
    /// assert!(matches!(store.read(|_| Ok::<_, Error>(())), Err(Error::Closed { .. })));
    /// # Ok::<(), Error>(())
    /// ```
    pub fn close(&self) -> Result<()> {
        self.inner.close()
    }

    /// True after [`Store::close`].
    ///
    /// ```
    /// # use keel_storage::{Store, StoreOptions};
    /// # let dir = tempfile::tempdir().unwrap();
    /// let store = Store::open(dir.path().join("a.db"), StoreOptions::default())?;
    /// store.close()?;
    /// assert!(store.is_closed());
    /// # Ok::<(), keel_storage::Error>(())
    /// ```
    pub fn is_closed(&self) -> bool {
        self.inner.closed.load(Ordering::SeqCst)
    }

    /// Physical I/O since open or the last reset.
    ///
    /// ```
    /// # use keel_storage::{Store, StoreOptions};
    /// # let dir = tempfile::tempdir().unwrap();
    /// # let store = Store::open(dir.path().join("a.db"), StoreOptions::default())?;
    /// let s = store.io_stats();
    /// assert_eq!(s.open_barrier_syncs, 0);
    /// # Ok::<(), keel_storage::Error>(())
    /// ```
    pub fn io_stats(&self) -> IoStats {
        self.inner.shared.counters.snapshot()
    }

    /// Close the idle reader connections, each with its page cache and
    /// statement cache, to give memory back (an app's memory warning). Reads
    /// open connections again as they need them, configured as at open.
    /// Returns how many connections were closed.
    ///
    /// ```
    /// # use keel_storage::{Error, Store, StoreOptions};
    /// # let dir = tempfile::tempdir().unwrap();
    /// # let store = Store::open(dir.path().join("m.db"), StoreOptions::default())?;
    /// let one = |c: &rusqlite::Connection| c.query_row("SELECT 1", [], |r| r.get::<_, i64>(0)).map_err(Error::from);
    /// store.read(one)?;
    /// assert!(store.release_memory() >= 1);
    /// assert_eq!(store.read(one)?, 1); // a reader opens again
    /// # Ok::<(), keel_storage::Error>(())
    /// ```
    pub fn release_memory(&self) -> usize {
        self.inner.readers.release_idle()
    }

    /// Reset the I/O counters to zero.
    ///
    /// ```
    /// # use keel_storage::{Store, StoreOptions};
    /// # let dir = tempfile::tempdir().unwrap();
    /// # let store = Store::open(dir.path().join("a.db"), StoreOptions::default())?;
    /// store.reset_io_stats();
    /// assert_eq!(store.io_stats().total_syncs(), 0);
    /// # Ok::<(), keel_storage::Error>(())
    /// ```
    pub fn reset_io_stats(&self) {
        self.inner.shared.counters.reset();
    }

    /// What the open pipeline did, phase by phase, with the times of both
    /// milestones (`readable_after`, `durable_after`). A snapshot: taken before
    /// durable it has no `sync_wal` line and no `durable_after` yet.
    ///
    /// ```
    /// # use keel_storage::{OpenPhase, Store, StoreOptions};
    /// # let dir = tempfile::tempdir().unwrap();
    /// # let store = Store::open(dir.path().join("a.db"), StoreOptions::default())?;
    /// let r = store.open_report();
    /// println!("{r}"); // a tree: one line per phase with time and syncs
    /// assert_eq!(r.wal_bytes_at_open, 0);
    /// # Ok::<(), keel_storage::Error>(())
    /// ```
    pub fn open_report(&self) -> OpenReport {
        lock(&self.inner.gate.report).clone()
    }

    /// A future that resolves when the store is **durable**
    /// ([`Milestone::Durable`](crate::options::Milestone)): the open barrier is done, queued
    /// writes commit, checkpoints run. Resolves at once if it already is (always
    /// after a blocking [`Store::open`], and for a WAL that was empty at open). If
    /// the barrier failed it resolves with that error; the store stays readable and
    /// every write fails with the same error.
    ///
    /// ```
    /// # use keel_storage::{Store, StoreOptions};
    /// # let dir = tempfile::tempdir().unwrap();
    /// let store = futures::executor::block_on(Store::open_async(dir.path().join("a.db"), StoreOptions::default()))?;
    /// // Reads work now; writes are accepted and commit once durable.
    /// futures::executor::block_on(store.durable())?;
    /// # Ok::<(), keel_storage::Error>(())
    /// ```
    pub fn durable(&self) -> DurableFuture {
        DurableFuture {
            gate: Arc::clone(&self.inner.gate),
        }
    }

    /// True once keel's writer thread may have started running write closures
    /// (from durable on; before, writes only queue). Layers that install an
    /// `on_commit` hook use it to skip a barrier write that could only wait for the
    /// open barrier.
    ///
    /// ```
    /// # use keel_storage::{Store, StoreOptions};
    /// # let dir = tempfile::tempdir().unwrap();
    /// let store = Store::open(dir.path().join("a.db"), StoreOptions::default())?;
    /// assert!(store.writer_started());
    /// # Ok::<(), keel_storage::Error>(())
    /// ```
    pub fn writer_started(&self) -> bool {
        self.inner
            .gate
            .threads
            .writer_started
            .load(Ordering::SeqCst)
    }

    /// True once the store is durable (see [`Store::durable`]).
    ///
    /// ```
    /// # use keel_storage::{Store, StoreOptions};
    /// # let dir = tempfile::tempdir().unwrap();
    /// let store = Store::open(dir.path().join("a.db"), StoreOptions::default())?;
    /// assert!(store.is_durable()); // the blocking open returns at durable
    /// # Ok::<(), keel_storage::Error>(())
    /// ```
    pub fn is_durable(&self) -> bool {
        self.inner.gate.is_durable()
    }

    /// The database file (absolute).
    ///
    /// ```
    /// # use keel_storage::{Store, StoreOptions};
    /// # let dir = tempfile::tempdir().unwrap();
    /// let store = Store::open(dir.path().join("a.db"), StoreOptions::default())?;
    /// assert!(store.path().ends_with("a.db"));
    /// # Ok::<(), keel_storage::Error>(())
    /// ```
    pub fn path(&self) -> &Path {
        &self.inner.path
    }
}

/// Rotating an open store, and adopting a file that another process rotated.
#[cfg(feature = "encryption-api")]
impl Store {
    /// Keep the provider the store's key came from (the open's), and let the
    /// writer start an adoption when it meets a file another process rotated.
    pub(crate) fn set_key_provider(&self, provider: Option<Arc<dyn KeyProvider>>) {
        *lock(&self.inner.provider) = provider;
        let store = Arc::downgrade(&self.inner);
        let writer = Arc::downgrade(&self.inner.writer);
        self.inner.writer.on_replaced(Arc::new(move || {
            let (store, writer) = (store.clone(), writer.clone());
            std::thread::Builder::new()
                .name("keel-rotate".into())
                .spawn(move || {
                    if let Some(inner) = store.upgrade() {
                        Store { inner }.readopt();
                    }
                    if let Some(w) = writer.upgrade() {
                        w.adoption_ended();
                    }
                })
                .is_ok()
        }));
    }

    /// The writer met a file another process rotated while this store was
    /// open: suspend and resume, which asks the provider again (see
    /// [`Store::resume`]). The writer holds the write that met it meanwhile and
    /// tries it once more on the new file. A store the app suspended meanwhile
    /// stays suspended (the adoption then happens at the app's resume).
    fn readopt(&self) {
        let inner = &self.inner;
        {
            let mut r = lock(&inner.rotating);
            if r.is_some() {
                return;
            }
            *r = Some(inner.suspension.is_suspended());
        }
        let suspended = self.suspend_now(SuspendOptions::default(), std::time::Instant::now());
        let stay = lock(&inner.rotating).take().unwrap_or(false);
        inner.rotation_ended.notify_all();
        match suspended {
            Ok(_) if !stay => {
                if let Err(e) = self.resume_now() {
                    tracing::warn!(error = %e, "resume after adopting a rotated file failed");
                }
            }
            Ok(_) => {}
            Err(e) => {
                tracing::warn!(error = %e, "could not suspend to adopt a rotated file");
                if !stay {
                    let _ = self.resume_now();
                }
            }
        }
    }

    /// Move this open store to a new key (`Some`), or to plaintext (`None`: an
    /// export for tools without a key), on a `keel-rotate` thread; returns at
    /// once. The rotation ([`rotate`]) needs the file to itself,
    /// so the store first suspends its own connections ([`Store::suspend`]),
    /// then rotates the file, keys its connections with the new key, takes
    /// `to`'s provider as its own and resumes. Meanwhile writes wait in the
    /// queue and commit into the new file afterwards (none is refused or lost),
    /// and reads wait as they do while suspended. A write or read running when
    /// the rotation starts may finish first (up to `RotateOptions::busy_timeout`).
    ///
    /// The new key is asked of `to`'s provider first, with
    /// [`KeyPurpose::Create`]: a provider without one ends the rotation with
    /// its key error before anything changed. A failure ([`Error::Locked`] when
    /// another process has the file open) leaves the old file under the old key
    /// and the store resumes on it. A store the app suspended stays suspended
    /// after the rotation; the app's own suspend and resume while it runs take
    /// effect when it ends. [`Store::close`] waits for it.
    pub fn rotate_key(&self, to: Option<Encryption>, opts: RotateOptions) -> Rotation {
        let store = self.clone();
        Rotation::spawn(self.inner.path.clone(), move || store.rotate_open(to, opts))
    }

    fn rotate_open(&self, to: Option<Encryption>, opts: RotateOptions) -> Result<RotateReport> {
        let inner = &self.inner;
        let path = &inner.path;
        if inner.closed.load(Ordering::SeqCst) {
            return Err(Error::closed("rotate the key", path));
        }
        let new_cipher = match &to {
            Some(e) => Some(e.obtain(path)?),
            None => None,
        };
        {
            let mut r = lock(&inner.rotating);
            if r.is_some() {
                return Err(Error::Locked {
                    op: "rotate the key while another rotation of this store runs",
                    path: path.clone(),
                });
            }
            *r = Some(inner.suspension.is_suspended());
        }
        let wait = opts.busy_timeout_value();
        let result = self
            .suspend_now(
                SuspendOptions {
                    checkpoint_first: false,
                    fail_fast: false,
                    interrupt_after: wait,
                    timeout: wait.saturating_mul(2),
                },
                std::time::Instant::now(),
            )
            .and_then(|_| {
                let from = Side::of(inner.shared.cipher().as_deref());
                rotate::rotate(path, from, Side::of(new_cipher.as_ref()), opts)
            });
        if result.is_ok() {
            // Every connection is closed: the next ones open the new file with
            // the new key, and the writer guards the new file.
            inner.shared.set_cipher(new_cipher.map(Arc::new));
            inner.writer.guard().renew();
            *lock(&inner.provider) = to.map(|e| Arc::clone(e.provider()));
            // This store changed the file: resume must not take it for another
            // process's change.
            inner.suspension.record_stamp(path);
        }
        let stay = lock(&inner.rotating).take().unwrap_or(false);
        inner.rotation_ended.notify_all();
        if !stay {
            if let Err(e) = self.resume_now() {
                tracing::warn!(error = %e, "resume after a key rotation failed");
            }
        }
        result
    }

    /// The file was replaced by another process's rotation while this store was
    /// suspended: ask the provider again (with [`KeyPurpose::Open`]) and, if its
    /// key opens the new file, key the connections with it and guard the new
    /// file. Runs while every connection is closed.
    fn adopt_rotated(&self) -> Result<()> {
        let inner = &self.inner;
        let path = &inner.path;
        let Some(provider) = lock(&inner.provider).clone() else {
            return Err(Error::Rotated {
                op: "resume (the store has no key provider to ask)",
                path: path.clone(),
            });
        };
        let header = inner.shared.cipher().is_some_and(|c| c.plaintext_header());
        let cipher = Cipher::obtain_for(provider.as_ref(), path, header, KeyPurpose::Open)?;
        rotate::key_opens(path, &cipher)?;
        inner.shared.set_cipher(Some(Arc::new(cipher)));
        inner.writer.guard().renew();
        tracing::info!(path = %path.display(), "reopened a database another process rotated, with its new key");
        Ok(())
    }
}
