//! The writer thread and group commit.

use std::marker::PhantomData;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::{Receiver, RecvTimeoutError, Sender};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::checkpointer::{CkptMsg, CkptSignal};
use crate::conn::KConn;
use crate::error::{Error, PathScope, Result};
use crate::oneshot;
use crate::policy::{ReasonScope, SyncReason};

type Callback = Box<dyn FnOnce() + Send>;

/// The handle a write closure gets: the writer connection, inside this closure's
/// SAVEPOINT (itself inside the group's transaction). Derefs to
/// [`rusqlite::Connection`].
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
    conn: &'a rusqlite::Connection,
    path: &'a Path,
    callbacks: Vec<Callback>,
}

impl WriteTxn<'_> {
    /// Run `f` on the writer thread after the group's COMMIT succeeds, before the
    /// write futures resolve. Callbacks run in commit order; they are dropped if this
    /// closure fails (rolls back) or the commit fails.
    pub fn on_commit(&mut self, f: Box<dyn FnOnce() + Send>) {
        self.callbacks.push(f);
    }

    /// The database file.
    pub fn path(&self) -> &Path {
        self.path
    }
}

impl std::ops::Deref for WriteTxn<'_> {
    type Target = rusqlite::Connection;
    fn deref(&self) -> &rusqlite::Connection {
        self.conn
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

pub(crate) enum WriterMsg {
    Job(Box<dyn Job>),
    Vacuum {
        pages: u32,
        reply: oneshot::Sender<Result<u64>>,
    },
    Shutdown,
}

pub(crate) struct WriterCtx {
    pub(crate) path: PathBuf,
    pub(crate) ckpt_tx: Sender<CkptMsg>,
    pub(crate) idle: Duration,
    pub(crate) max_group: usize,
    pub(crate) vacuum_min_free_pages: u32,
    pub(crate) signal: Arc<CkptSignal>,
    pub(crate) wal_frames: Arc<AtomicU64>,
    pub(crate) threshold_frames: u64,
}

impl WriterCtx {
    /// Tell the checkpointer about a commit, waking it only when needed.
    fn committed(&self) {
        let first = self.signal.committed();
        if first || self.wal_frames.load(Ordering::Relaxed) >= self.threshold_frames {
            let _ = self.ckpt_tx.send(CkptMsg::Committed);
        }
    }
}

/// Run a parameterless statement through the connection's statement cache.
fn exec(conn: &rusqlite::Connection, sql: &str) -> rusqlite::Result<()> {
    conn.prepare_cached(sql)?.execute([]).map(|_| ())
}

fn sqlite_abort(msg: &str) -> rusqlite::Error {
    rusqlite::Error::SqliteFailure(
        libsqlite3_sys::Error::new(libsqlite3_sys::SQLITE_ABORT),
        Some(msg.to_string()),
    )
}

pub(crate) fn incremental_vacuum(
    conn: &rusqlite::Connection,
    path: &Path,
    pages: u32,
) -> Result<u64> {
    let before: i64 = conn
        .query_row("PRAGMA freelist_count", [], |r| r.get(0))
        .map_err(|e| Error::sqlite("read freelist_count", path, e))?;
    // Each step of this pragma frees one page: step it to the end.
    let step = || -> rusqlite::Result<()> {
        let mut stmt = conn.prepare(&format!("PRAGMA incremental_vacuum({pages})"))?;
        let mut rows = stmt.query([])?;
        while rows.next()?.is_some() {}
        Ok(())
    };
    step().map_err(|e| Error::sqlite("incremental vacuum", path, e))?;
    let after: i64 = conn
        .query_row("PRAGMA freelist_count", [], |r| r.get(0))
        .map_err(|e| Error::sqlite("read freelist_count", path, e))?;
    Ok(u64::try_from(before - after).unwrap_or(0))
}

pub(crate) fn writer_main(conn: KConn, rx: Receiver<WriterMsg>, ctx: WriterCtx) {
    let _path = PathScope::enter(&ctx.path);
    let _reason = ReasonScope::enter(SyncReason::Commit);
    let mut pending: Option<WriterMsg> = None;
    let mut vacuum_checked = true;
    loop {
        let msg = match pending.take() {
            Some(m) => m,
            None => match rx.recv_timeout(ctx.idle) {
                Ok(m) => m,
                Err(RecvTimeoutError::Timeout) => {
                    if !vacuum_checked {
                        vacuum_checked = true;
                        background_vacuum(&conn.conn, &ctx);
                    }
                    continue;
                }
                Err(RecvTimeoutError::Disconnected) => break,
            },
        };
        match msg {
            WriterMsg::Shutdown => break,
            WriterMsg::Vacuum { pages, reply } => {
                let r = incremental_vacuum(&conn.conn, &ctx.path, pages);
                ctx.committed();
                let _ = reply.send(r);
            }
            WriterMsg::Job(j) => {
                let mut batch = vec![j];
                while batch.len() < ctx.max_group {
                    match rx.try_recv() {
                        Ok(WriterMsg::Job(j)) => batch.push(j),
                        Ok(other) => {
                            pending = Some(other);
                            break;
                        }
                        Err(_) => break,
                    }
                }
                run_group(&conn.conn, &ctx.path, batch, &ctx.signal);
                vacuum_checked = false;
                ctx.committed();
            }
        }
    }
    // Writes that raced with shutdown: their futures resolve with `Closed` when the
    // jobs are dropped.
    while let Ok(m) = rx.try_recv() {
        drop(m);
    }
    drop(conn);
}

fn background_vacuum(conn: &rusqlite::Connection, ctx: &WriterCtx) {
    let free: i64 = match conn.query_row("PRAGMA freelist_count", [], |r| r.get(0)) {
        Ok(n) => n,
        Err(_) => return,
    };
    if free >= i64::from(ctx.vacuum_min_free_pages) && ctx.vacuum_min_free_pages > 0 {
        let pages = u32::try_from(free.min(4096)).unwrap_or(4096);
        match incremental_vacuum(conn, &ctx.path, pages) {
            Ok(n) => tracing::debug!(pages = n, "background incremental vacuum"),
            Err(e) => tracing::warn!(error = %e, "background incremental vacuum failed"),
        }
        ctx.committed();
    }
}

/// Run one group: BEGIN IMMEDIATE; each job in its own SAVEPOINT; COMMIT; callbacks;
/// resolve futures.
fn run_group(
    conn: &rusqlite::Connection,
    path: &Path,
    batch: Vec<Box<dyn Job>>,
    signal: &crate::checkpointer::CkptSignal,
) {
    let span = tracing::debug_span!("keel.commit", group = batch.len());
    let _e = span.enter();
    let start = Instant::now();
    // A stale sync failure from earlier on this thread must not label this group's errors.
    let _ = crate::vfs::take_last_sync_error();
    // Jobs whose closure succeeded, with their callbacks, waiting for COMMIT.
    let mut committed: Vec<(Box<dyn Job>, Vec<Callback>)> = Vec::with_capacity(batch.len());
    // Jobs that failed alone (rolled back to their savepoint) or with a lost transaction.
    let mut settled: Vec<(Box<dyn Job>, Result<()>)> = Vec::new();
    let mut in_txn = false;
    let mut bumped = false;
    for mut job in batch {
        if !in_txn {
            if let Err(e) = exec(conn, "BEGIN IMMEDIATE") {
                let err = Error::sqlite("begin write transaction", path, e);
                settled.push((job, Err(err)));
                continue;
            }
            in_txn = true;
            // identity.rs: the first write of a new WAL records a new epoch.
            bumped |= signal.take_epoch_bump() && crate::identity::bump_epoch(conn, path);
        }
        if let Err(e) = exec(conn, "SAVEPOINT keel_write") {
            let err = Error::sqlite("savepoint", path, e);
            settled.push((job, Err(err)));
            continue;
        }
        let mut txn = WriteTxn {
            conn,
            path,
            callbacks: Vec::new(),
        };
        let ok = job.run(&mut txn);
        let callbacks = std::mem::take(&mut txn.callbacks);
        if conn.is_autocommit() {
            // SQLite rolled the whole transaction back (or the closure ended it): the
            // earlier closures of this group are lost too.
            let err = Error::sqlite(
                "group commit (transaction ended inside a write closure)",
                path,
                sqlite_abort("the transaction was rolled back or ended by a write closure"),
            );
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
        if ok {
            if let Err(e) = exec(conn, "RELEASE keel_write") {
                let err = Error::sqlite("release savepoint", path, e);
                settled.push((job, Err(err)));
                continue;
            }
            committed.push((job, callbacks));
        } else {
            drop(callbacks);
            let _ = exec(conn, "ROLLBACK TO keel_write");
            let _ = exec(conn, "RELEASE keel_write");
            settled.push((job, Ok(())));
        }
    }
    let commit: Result<()> = if in_txn {
        let t = Instant::now();
        let r = conn
            .prepare_cached("COMMIT")
            .and_then(|mut s| s.execute([]).map(|_| ()))
            .map_err(|e| Error::sqlite("commit", path, e));
        tracing::debug!(
            commit_ms = t.elapsed().as_secs_f64() * 1e3,
            ok = r.is_ok(),
            "commit"
        );
        if r.is_err() && !conn.is_autocommit() {
            let _ = conn.execute_batch("ROLLBACK");
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
    for (job, callbacks) in committed {
        // Callbacks of a failed commit are dropped before the future resolves: what
        // they restore on drop (the dictionary's pending values) is back in place
        // when the caller learns of the failure.
        drop(callbacks);
        job.finish(&commit);
    }
    for (job, r) in settled {
        job.finish(&r);
    }
    tracing::debug!(ms = start.elapsed().as_secs_f64() * 1e3, "group done");
}
