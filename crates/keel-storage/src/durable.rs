//! The second milestone of an open: *durable*.
//!
//! An open whose WAL is not empty becomes **readable** as soon as SQLite has rebuilt
//! the wal-index and the schema was read, while the open barrier (the sync of the
//! WAL a previous run left) still runs on a keel thread. Reading those commits early
//! exposes nothing new: the previous launch already showed them. Writing is
//! different — a new commit must not become durable on top of frames that are not —
//! so the writer and the checkpointer threads are *parked* here until the barrier is
//! done. Writes submitted meanwhile wait in the writer's queue; their futures
//! resolve after their commit, which comes after the barrier.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{Receiver, Sender};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, OnceLock};
use std::task::{Context, Poll, Waker};
use std::thread::{JoinHandle, ThreadId};
use std::time::{Duration, Instant};

use crate::checkpointer::{checkpoint_on_writer, checkpointer_main, CkptCtx, CkptMsg};
use crate::conn::KConn;
use crate::error::{Error, PathScope, Result};
use crate::options::{Milestone, OpenPhase, OpenProgress, ProgressFn};
use crate::policy::{ReasonScope, SyncReason};
use crate::report::{OpenReport, PhaseReport};
use crate::writer::{attach_writer, writer_main, WriterCtx, WriterMsg};

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// Everything the writer and checkpointer threads need, held until durable.
pub(crate) struct Parked {
    /// The writer connection; inside the schema transaction if the schema step
    /// staged DDL (it commits after the barrier).
    pub(crate) writer: KConn,
    pub(crate) w_rx: Receiver<WriterMsg>,
    pub(crate) w_ctx: WriterCtx,
    pub(crate) ck: KConn,
    pub(crate) ck_rx: Receiver<CkptMsg>,
    pub(crate) ck_tx: Sender<CkptMsg>,
    pub(crate) ck_ctx: CkptCtx,
    /// Run the open's PASSIVE checkpoint on the writer connection before writes
    /// start (`checkpoint_on_open` with a WAL over the threshold).
    pub(crate) checkpoint_first: bool,
}

enum State {
    /// The barrier is running; the threads are parked.
    Pending(Box<Parked>),
    /// Someone took the parked threads and is starting them (or failing them).
    Finishing,
    Durable,
    Failed(Error),
}

/// How a bounded wait for durable ended.
pub(crate) enum Wait {
    Durable,
    Failed(Error),
    TimedOut,
}

/// The writer and checkpointer threads of a store, filled in when they start
/// (at once for an empty WAL, at durable otherwise).
#[derive(Default)]
pub(crate) struct Threads {
    pub(crate) writer: Mutex<Option<JoinHandle<()>>>,
    pub(crate) ckpt: Mutex<Option<JoinHandle<()>>>,
    pub(crate) writer_id: OnceLock<ThreadId>,
    /// Set just before the writer thread is spawned: once true, write closures may
    /// be running.
    pub(crate) writer_started: AtomicBool,
}

/// The durable milestone of one store, shared by the store, the open pipeline and
/// every [`DurableFuture`].
pub(crate) struct Gate {
    path: PathBuf,
    state: Mutex<(State, Vec<Waker>)>,
    cv: Condvar,
    pub(crate) threads: Threads,
    pub(crate) report: Mutex<OpenReport>,
    progress: Option<ProgressFn>,
    t0: Instant,
    pub(crate) truncate_timeout: Duration,
}

impl Gate {
    pub(crate) fn new(
        path: &Path,
        parked: Option<Parked>,
        report: OpenReport,
        progress: Option<ProgressFn>,
        t0: Instant,
        truncate_timeout: Duration,
    ) -> Gate {
        let started = parked.is_none();
        let state = match parked {
            Some(p) => State::Pending(Box::new(p)),
            None => State::Durable,
        };
        Gate {
            path: path.to_path_buf(),
            state: Mutex::new((state, Vec::new())),
            cv: Condvar::new(),
            threads: Threads {
                writer_started: AtomicBool::new(started),
                ..Threads::default()
            },
            report: Mutex::new(report),
            progress,
            t0,
            truncate_timeout,
        }
    }

    pub(crate) fn is_durable(&self) -> bool {
        matches!(lock(&self.state).0, State::Durable)
    }

    /// Wait for durable, at most `timeout` (forever with `None`).
    pub(crate) fn wait(&self, timeout: Option<Duration>) -> Wait {
        let deadline = timeout.map(|t| Instant::now() + t);
        let mut st = lock(&self.state);
        loop {
            match &st.0 {
                State::Durable => return Wait::Durable,
                State::Failed(e) => return Wait::Failed(e.clone()),
                State::Pending(_) | State::Finishing => {}
            }
            st = match deadline {
                None => self.cv.wait(st).unwrap_or_else(|p| p.into_inner()),
                Some(d) => {
                    let now = Instant::now();
                    if now >= d {
                        return Wait::TimedOut;
                    }
                    self.cv
                        .wait_timeout(st, d - now)
                        .unwrap_or_else(|p| p.into_inner())
                        .0
                }
            };
        }
    }

    fn poll(&self, cx: &mut Context<'_>) -> Poll<Result<()>> {
        let mut st = lock(&self.state);
        match &st.0 {
            State::Durable => Poll::Ready(Ok(())),
            State::Failed(e) => Poll::Ready(Err(e.clone())),
            State::Pending(_) | State::Finishing => {
                if !st.1.iter().any(|w| w.will_wake(cx.waker())) {
                    st.1.push(cx.waker().clone());
                }
                Poll::Pending
            }
        }
    }

    fn settle(&self, s: State) {
        let wakers = {
            let mut st = lock(&self.state);
            st.0 = s;
            std::mem::take(&mut st.1)
        };
        self.cv.notify_all();
        for w in wakers {
            w.wake();
        }
    }

    /// Take the parked threads if the barrier is still pending; if someone else is
    /// starting them, wait until they are done. `None`: already settled.
    fn take(&self) -> Option<Box<Parked>> {
        let mut st = lock(&self.state);
        loop {
            match std::mem::replace(&mut st.0, State::Finishing) {
                State::Pending(p) => return Some(p),
                State::Finishing => {
                    st = self.cv.wait(st).unwrap_or_else(|p| p.into_inner());
                }
                other => {
                    st.0 = other;
                    return None;
                }
            }
        }
    }

    /// The open barrier finished with `barrier` (its line of the report in
    /// `line`): commit the staged schema, run the open checkpoint if one is due,
    /// start the writer and checkpointer — or, if anything failed, fail every queued
    /// and future write with that error and keep the store readable.
    pub(crate) fn finish(&self, barrier: Result<()>, line: Option<PhaseReport>) -> Result<()> {
        let Some(parked) = self.take() else {
            // Abandoned by a close that stopped waiting.
            return match self.wait(Some(Duration::ZERO)) {
                Wait::Failed(e) => Err(e),
                _ => Ok(()),
            };
        };
        let _path = PathScope::enter(&self.path);
        let mut ckpt_line = None;
        let r = match barrier {
            Ok(()) => self.start(parked, &mut ckpt_line),
            Err(e) => Err((e, Some(parked))),
        };
        let r = match r {
            Ok(()) => Ok(()),
            Err((e, parked)) => {
                if let Some(p) = parked {
                    self.refuse(p, e.clone());
                }
                Err(e)
            }
        };
        {
            let mut rep = lock(&self.report);
            if let Some(line) = line {
                let at = rep
                    .phases
                    .iter()
                    .position(|p| p.phase.index() > line.phase.index())
                    .unwrap_or(rep.phases.len());
                rep.phases.insert(at, line);
            }
            if let Some((d, syncs, note)) = ckpt_line {
                if let Some(p) = rep
                    .phases
                    .iter_mut()
                    .find(|p| p.phase == OpenPhase::Checkpoint)
                {
                    p.duration += d;
                    p.syncs += syncs;
                    p.note = note;
                }
            }
            let at = self.t0.elapsed();
            rep.total = at;
            rep.syncs_issued = rep.phases.iter().map(|p| p.syncs).sum();
            if r.is_ok() {
                rep.durable_after = Some(at);
            }
        }
        match &r {
            Ok(()) => {
                self.settle(State::Durable);
                tracing::info!(ms = self.t0.elapsed().as_secs_f64() * 1e3, "store durable");
                self.emit_durable();
            }
            Err(e) => {
                tracing::error!(error = %e, "open barrier failed: the store stays readable, writes fail");
                self.settle(State::Failed(e.clone()));
            }
        }
        r
    }

    /// Emit the `Durable` progress event (the last one of an open).
    pub(crate) fn emit_durable(&self) {
        emit(
            self.progress.as_ref(),
            OpenProgress {
                phase: OpenPhase::Ready,
                fraction: 1.0,
                done: true,
                milestone: Some(Milestone::Durable),
            },
        );
    }

    /// Commit the staged schema, maybe checkpoint, start the threads. On failure
    /// the parked threads come back (if still whole) so the caller can refuse writes.
    fn start(
        &self,
        p: Box<Parked>,
        ckpt_line: &mut Option<(Duration, u64, String)>,
    ) -> std::result::Result<(), (Error, Option<Box<Parked>>)> {
        if !p.writer.conn.is_autocommit() {
            let _r = ReasonScope::enter(SyncReason::Commit);
            if let Err(e) = p.writer.conn.execute_batch("COMMIT") {
                let e = Error::sqlite("schema: commit after the open barrier", &self.path, e);
                return Err((e, Some(p)));
            }
        }
        // The writes queued during the barrier go first: no automatic checkpoint
        // before their group.
        let mut p = p;
        let queued = p.w_ctx.gauge.len() > 0;
        p.ck_ctx.signal.at_durable(queued);
        if p.checkpoint_first && queued {
            // The open's checkpoint goes to the checkpointer, which runs it once
            // the queued writes committed.
            p.ck_ctx.initial_wal_bytes = p.ck_ctx.threshold_bytes.saturating_add(1);
            *ckpt_line = Some((
                Duration::ZERO,
                0,
                "after the open barrier and the writes queued during it (background checkpointer)"
                    .into(),
            ));
        } else if p.checkpoint_first {
            let t = Instant::now();
            // Under the checkpoint policy, not the writer's commit policy.
            let o = checkpoint_on_writer(
                &p.writer.conn,
                &self.path,
                &p.ck_ctx.wal_path,
                p.writer.policies(),
                self.truncate_timeout,
            );
            match o {
                Ok(o) => {
                    *ckpt_line = Some((
                        t.elapsed(),
                        0,
                        format!(
                            "passive after the open barrier: {} of {} frames",
                            o.checkpointed_frames, o.wal_frames
                        ),
                    ))
                }
                Err(e) => return Err((e, Some(p))),
            }
        }
        self.threads.writer_started.store(true, Ordering::SeqCst);
        let (w, c) = start_threads(*p, &self.path).map_err(|e| (e, None))?;
        let _ = self.threads.writer_id.set(w.thread().id());
        *lock(&self.threads.writer) = Some(w);
        *lock(&self.threads.ckpt) = Some(c);
        Ok(())
    }

    /// Fail every write queued (and every later one) with `e`: a stand-in writer
    /// thread answers the queue until the store closes. The writer connection's
    /// staged schema transaction rolls back; the readers keep working.
    fn refuse(&self, p: Box<Parked>, e: Error) {
        let Parked {
            writer, w_rx, ck, ..
        } = *p;
        if !writer.conn.is_autocommit() {
            let _ = writer.conn.execute_batch("ROLLBACK");
        }
        // SQLite checkpoints when the last connection closes; after a failed (or
        // abandoned) barrier nothing may be written, so these two never do.
        for c in [&writer.conn, &ck.conn] {
            let _ = c.set_db_config(
                rusqlite::config::DbConfig::SQLITE_DBCONFIG_NO_CKPT_ON_CLOSE,
                true,
            );
        }
        drop(writer);
        drop(ck);
        let e2 = e.clone();
        let spawned = std::thread::Builder::new()
            .name("keel-writer".into())
            .spawn(move || refuse_writes(w_rx, e2));
        match spawned {
            Ok(h) => {
                let _ = self.threads.writer_id.set(h.thread().id());
                *lock(&self.threads.writer) = Some(h);
            }
            Err(err) => {
                // No thread: the queue is dropped and its futures report `Closed`.
                tracing::error!(error = %err, "could not start the refusing writer thread");
            }
        }
    }

    /// A close gave up waiting for the barrier: fail what is queued with
    /// [`Error::BarrierPending`]. Returns that error, or `None` if the store became
    /// durable (or failed) in the meantime.
    pub(crate) fn abandon(&self, op: &'static str, waited: Duration) -> Option<Error> {
        let parked = self.take()?;
        let e = Error::BarrierPending {
            op,
            path: self.path.clone(),
            waited,
        };
        self.refuse(parked, e.clone());
        self.settle(State::Failed(e.clone()));
        Some(e)
    }
}

fn refuse_writes(rx: Receiver<WriterMsg>, e: Error) {
    while let Ok(m) = rx.recv() {
        match m {
            WriterMsg::Job(j) => j.finish(&Err(e.clone())),
            WriterMsg::Vacuum { reply, .. } => {
                let _ = reply.send(Err(e.clone()));
            }
            WriterMsg::Committed => {}
            WriterMsg::Shutdown => break,
            WriterMsg::Wake => {}
        }
    }
    while let Ok(m) = rx.try_recv() {
        if let WriterMsg::Job(j) = m {
            j.finish(&Err(e.clone()));
        }
    }
}

/// Start the checkpointer and the writer threads.
pub(crate) fn start_threads(p: Parked, path: &Path) -> Result<(JoinHandle<()>, JoinHandle<()>)> {
    let Parked {
        writer,
        w_rx,
        w_ctx,
        ck,
        ck_rx,
        ck_tx,
        ck_ctx,
        checkpoint_first: _,
    } = p;
    let ck_handle = match std::thread::Builder::new()
        .name("keel-ckpt".into())
        .spawn(move || checkpointer_main(ck, ck_rx, ck_ctx))
    {
        Ok(h) => h,
        Err(e) => return Err(Error::io("spawn checkpointer thread", path, e)),
    };
    let w_shared = Arc::clone(&w_ctx.shared);
    attach_writer(writer, &w_ctx);
    let w_handle = match std::thread::Builder::new()
        .name("keel-writer".into())
        .spawn(move || writer_main(w_rx, w_ctx))
    {
        Ok(h) => h,
        Err(e) => {
            drop(w_shared.detach());
            let _ = ck_tx.send(CkptMsg::Shutdown);
            let _ = ck_handle.join();
            return Err(Error::io("spawn writer thread", path, e));
        }
    };
    Ok((w_handle, ck_handle))
}

/// Call a progress callback; a panic in it is logged, not propagated.
pub(crate) fn emit(cb: Option<&ProgressFn>, p: OpenProgress) {
    if let Some(cb) = cb {
        if std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| cb(p))).is_err() {
            tracing::error!(phase = p.phase.name(), "progress callback panicked");
        }
    }
}

/// Resolves when the store is **durable**: the open barrier (the sync of a WAL a
/// previous run left) is done, writes commit and checkpoints run. Returned by
/// [`Store::durable`](crate::store::Store::durable); resolves at once for a store whose
/// WAL was empty at open. Fails with the barrier's typed error (e.g.
/// [`Error::SyncFailed`]) if the barrier failed — the store then stays readable and
/// every write fails with that error.
///
/// ```
/// # use keel_storage::{Store, StoreOptions};
/// # let dir = tempfile::tempdir().unwrap();
/// let store = futures::executor::block_on(Store::open_async(dir.path().join("a.db"), StoreOptions::default()))?;
/// futures::executor::block_on(store.durable())?; // fresh file: durable at once
/// assert!(store.is_durable());
/// # Ok::<(), keel_storage::Error>(())
/// ```
#[must_use = "a future does nothing unless awaited or waited on"]
pub struct DurableFuture {
    pub(crate) gate: Arc<Gate>,
}

impl DurableFuture {
    /// Block the calling thread until durable (or the barrier failed).
    pub fn wait(self) -> Result<()> {
        match self.gate.wait(None) {
            Wait::Durable => Ok(()),
            Wait::Failed(e) => Err(e),
            Wait::TimedOut => unreachable_timeout(&self.gate.path),
        }
    }
}

fn unreachable_timeout(path: &Path) -> Result<()> {
    // `wait(None)` has no deadline; keep a typed answer instead of a panic anyway.
    Err(Error::BarrierPending {
        op: "wait for durable",
        path: path.to_path_buf(),
        waited: Duration::ZERO,
    })
}

impl std::future::Future for DurableFuture {
    type Output = Result<()>;
    fn poll(self: std::pin::Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Result<()>> {
        self.gate.poll(cx)
    }
}

impl std::fmt::Debug for DurableFuture {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DurableFuture")
            .field("path", &self.gate.path)
            .finish()
    }
}
