//! The background checkpointer: PASSIVE over a threshold or when idle, TRUNCATE on
//! request (with a bounded wait), a last TRUNCATE at close. When commits land while
//! a PASSIVE over the threshold copies, it asks the writer to copy the tail
//! ([`CkptSignal::finish_on_writer`]) so that the WAL can start over.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc::{Receiver, RecvTimeoutError};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::conn::{KConn, Reopen};
use crate::error::{Error, PathScope, Result};
use crate::oneshot;
use crate::park::{self, Parker, Suspension};
use crate::policy::{ReasonScope, SyncPolicies, SyncReason};

/// Checkpoint modes (see SQLite's `wal_checkpoint`).
///
/// ```
/// use keel_storage::CheckpointMode;
/// assert_eq!(CheckpointMode::Truncate.sql(), "TRUNCATE");
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum CheckpointMode {
    /// Copy what can be copied without waiting for anyone.
    Passive,
    /// Wait (bounded by `StoreOptions::truncate_timeout`) for readers and the writer,
    /// copy everything, then truncate the WAL to zero bytes.
    Truncate,
}

impl CheckpointMode {
    /// The SQL keyword.
    pub fn sql(self) -> &'static str {
        match self {
            CheckpointMode::Passive => "PASSIVE",
            CheckpointMode::Truncate => "TRUNCATE",
        }
    }
}

/// The result of a checkpoint.
///
/// ```
/// # use keel_storage::{Store, StoreOptions, CheckpointMode};
/// # let dir = tempfile::tempdir().unwrap();
/// let store = Store::open(dir.path().join("c.db"), StoreOptions::default())?;
/// let out = store.checkpoint(CheckpointMode::Truncate)?;
/// assert!(!out.busy);
/// assert_eq!(out.wal_bytes_after, 0);
/// # Ok::<(), keel_storage::Error>(())
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CheckpointOutcome {
    /// The mode that ran.
    pub mode: CheckpointMode,
    /// True if it could not complete (readers or the writer were in the way past the
    /// bounded wait).
    pub busy: bool,
    /// Frames in the WAL.
    pub wal_frames: i64,
    /// Frames copied back into the database (in total, this WAL generation).
    pub checkpointed_frames: i64,
    /// Wall time.
    pub duration: Duration,
    /// Size of the `-wal` file afterwards.
    pub wal_bytes_after: u64,
}

pub(crate) enum CkptMsg {
    Committed,
    Run {
        mode: CheckpointMode,
        reply: oneshot::Sender<Result<CheckpointOutcome>>,
    },
    Shutdown,
    /// Wakes the checkpointer so it sees a suspend (see park.rs).
    Wake,
}

pub(crate) struct CkptCtx {
    pub(crate) path: PathBuf,
    pub(crate) wal_path: PathBuf,
    pub(crate) wal_frames: Arc<AtomicU64>,
    pub(crate) page_size: u64,
    pub(crate) threshold_bytes: u64,
    pub(crate) idle: Duration,
    pub(crate) truncate_timeout: Duration,
    /// Size of the WAL left by a previous run (the open pipeline defers its checkpoint here).
    pub(crate) initial_wal_bytes: u64,
    pub(crate) signal: Arc<CkptSignal>,
    pub(crate) suspension: Arc<Suspension>,
    /// Opens the checkpointer's connection again after a resume.
    pub(crate) reopen: Reopen,
}

pub(crate) fn run_checkpoint(
    conn: &rusqlite::Connection,
    path: &Path,
    wal_path: &Path,
    mode: CheckpointMode,
    truncate_timeout: Duration,
) -> Result<CheckpointOutcome> {
    let _reason = ReasonScope::enter(SyncReason::Checkpoint);
    let span = tracing::debug_span!("keel.checkpoint", mode = mode.sql());
    let _e = span.enter();
    let start = Instant::now();
    if mode == CheckpointMode::Truncate {
        conn.busy_timeout(truncate_timeout)
            .map_err(|e| Error::sqlite("set checkpoint busy timeout", path, e))?;
    }
    let sql = format!("PRAGMA wal_checkpoint({})", mode.sql());
    let row = conn.query_row(&sql, [], |r| {
        Ok((
            r.get::<_, i64>(0)?,
            r.get::<_, i64>(1)?,
            r.get::<_, i64>(2)?,
        ))
    });
    let (busy, log, done) = match row {
        Ok(v) => v,
        Err(e) if e.sqlite_error_code() == Some(rusqlite::ErrorCode::DatabaseBusy) => (1, -1, -1),
        Err(e) => return Err(Error::sqlite("wal checkpoint", path, e)),
    };
    let wal_bytes_after = std::fs::metadata(wal_path).map(|m| m.len()).unwrap_or(0);
    let out = CheckpointOutcome {
        mode,
        busy: busy != 0,
        wal_frames: log,
        checkpointed_frames: done,
        duration: start.elapsed(),
        wal_bytes_after,
    };
    tracing::debug!(
        busy = out.busy,
        frames = log,
        checkpointed = done,
        ms = out.duration.as_secs_f64() * 1e3,
        "checkpoint"
    );
    Ok(out)
}

/// The open pipeline's PASSIVE checkpoint (`checkpoint_on_open`), run on the writer
/// connection: under the checkpoint policy, not the commit one. The writer's
/// `synchronous` follows the commit policy (`OFF` would skip every checkpoint sync),
/// so it is switched to the checkpoint policy's for the checkpoint and back after.
pub(crate) fn checkpoint_on_writer(
    conn: &rusqlite::Connection,
    path: &Path,
    wal_path: &Path,
    policies: &SyncPolicies,
    truncate_timeout: Duration,
) -> Result<CheckpointOutcome> {
    let set = |v: &str| {
        conn.execute_batch(&format!("PRAGMA synchronous={v}"))
            .map_err(|e| Error::sqlite("set synchronous for a checkpoint", path, e))
    };
    set(policies.checkpoint.checkpoint_synchronous())?;
    let r = run_checkpoint(
        conn,
        path,
        wal_path,
        CheckpointMode::Passive,
        truncate_timeout,
    );
    set(policies.commit.synchronous_pragma())?;
    r
}

/// What the writer tells the checkpointer without a message per commit.
pub(crate) struct CkptSignal {
    /// Commits since the last complete checkpoint.
    pub(crate) dirty: AtomicBool,
    base: Instant,
    last_commit_ns: AtomicU64,
    /// keel's identity stamp is on (see identity.rs): the epoch is bumped in the
    /// first write of every new WAL.
    identity: AtomicBool,
    /// The next write may start a new WAL (a complete checkpoint ran, or the store
    /// opened without one): bump the epoch in it.
    epoch_bump: AtomicBool,
    /// Writes queued during the open barrier go first: no automatic checkpoint
    /// (idle, over the threshold, or the open's deferred one) starts until the
    /// writer's first group after durable is done, so its commit's sync is the
    /// first I/O after the barrier, not queued behind a checkpoint's two syncs.
    /// Explicit checkpoints are not held.
    writes_first: AtomicBool,
    /// A checkpoint over the threshold ended a few frames behind the commits that
    /// kept coming meanwhile: the writer copies that tail between two groups
    /// ([`WriterShared::finish_checkpoint`](crate::writer::WriterShared::finish_checkpoint)),
    /// so that the WAL can start over.
    pub(crate) finish_on_writer: AtomicBool,
}

impl CkptSignal {
    pub(crate) fn new(dirty: bool) -> CkptSignal {
        CkptSignal {
            dirty: AtomicBool::new(dirty),
            base: Instant::now(),
            last_commit_ns: AtomicU64::new(0),
            identity: AtomicBool::new(false),
            epoch_bump: AtomicBool::new(false),
            writes_first: AtomicBool::new(false),
            finish_on_writer: AtomicBool::new(false),
        }
    }

    /// At durable: count the idle delay from now (nothing could commit during the
    /// barrier: it was not idle time), and with writes `queued`, hold automatic
    /// checkpoints until the writer ran them ([`CkptSignal::release_writes_first`]).
    pub(crate) fn at_durable(&self, queued: bool) {
        self.writes_first.store(queued, Ordering::Release);
        let ns = u64::try_from(self.base.elapsed().as_nanos()).unwrap_or(u64::MAX);
        self.last_commit_ns.store(ns, Ordering::Relaxed);
    }

    /// The writer's first group after durable is done (or there was none): true
    /// if a hold was lifted, and the checkpointer must be woken to see it.
    pub(crate) fn release_writes_first(&self) -> bool {
        self.writes_first.load(Ordering::Acquire) && self.writes_first.swap(false, Ordering::AcqRel)
    }

    fn writes_first(&self) -> bool {
        self.writes_first.load(Ordering::Acquire)
    }

    /// Turn the identity epoch on; `armed`: the first write starts a new WAL.
    pub(crate) fn enable_identity(&self, armed: bool) {
        self.identity.store(true, Ordering::Release);
        self.epoch_bump.store(armed, Ordering::Release);
    }

    /// The WAL may restart at the next write (no-op without the identity stamp).
    pub(crate) fn arm_epoch_bump(&self) {
        if self.identity.load(Ordering::Acquire) {
            self.epoch_bump.store(true, Ordering::Release);
        }
    }

    /// True (once) if the next write transaction must bump the epoch.
    pub(crate) fn take_epoch_bump(&self) -> bool {
        self.epoch_bump.load(Ordering::Acquire) && self.epoch_bump.swap(false, Ordering::AcqRel)
    }

    /// Record a commit; returns true if the checkpointer must be woken (it was clean).
    pub(crate) fn committed(&self) -> bool {
        let ns = u64::try_from(self.base.elapsed().as_nanos()).unwrap_or(u64::MAX);
        self.last_commit_ns.store(ns, Ordering::Relaxed);
        !self.dirty.swap(true, Ordering::AcqRel)
    }

    fn since_last_commit(&self) -> Duration {
        let now = self.base.elapsed();
        now.saturating_sub(Duration::from_nanos(
            self.last_commit_ns.load(Ordering::Relaxed),
        ))
    }
}

/// When the next idle checkpoint may run after one that could not finish: the idle
/// delay, doubled after each unfinished attempt up to [`IdleRetry::MAX_PAUSE`], and
/// back to none once a checkpoint finishes.
struct IdleRetry {
    idle: Duration,
    pause: Duration,
    not_before: Option<Instant>,
}

impl IdleRetry {
    /// The longest pause between two attempts (a reader may hold frames for long).
    const MAX_PAUSE: Duration = Duration::from_secs(60);

    fn new(idle: Duration) -> IdleRetry {
        IdleRetry {
            idle,
            pause: Duration::ZERO,
            not_before: None,
        }
    }

    fn remaining(&self) -> Duration {
        self.not_before.map_or(Duration::ZERO, |t| {
            t.saturating_duration_since(Instant::now())
        })
    }

    fn after_attempt(&mut self, complete: bool) {
        if complete {
            self.pause = Duration::ZERO;
            self.not_before = None;
        } else {
            // Never less than a millisecond, so an idle delay of zero cannot spin.
            let floor = self.idle.max(Duration::from_millis(1));
            self.pause = (self.pause * 2).clamp(floor, Self::MAX_PAUSE.max(floor));
            self.not_before = Some(Instant::now() + self.pause);
        }
    }
}

/// The checkpointer's connection, reopened after a resume if needed.
fn connection<'c>(conn: &'c mut Option<KConn>, ctx: &CkptCtx) -> Result<&'c rusqlite::Connection> {
    if conn.is_none() {
        let c = (ctx.reopen)()?;
        ctx.suspension
            .set_interrupt(Parker::Checkpointer, Some(c.conn.get_interrupt_handle()));
        *conn = Some(c);
    }
    conn.as_ref()
        .map(|c| &c.conn)
        .ok_or_else(|| Error::closed("reopen the checkpointer connection", &ctx.path))
}

pub(crate) fn checkpointer_main(conn: KConn, rx: Receiver<CkptMsg>, ctx: CkptCtx) {
    let _path = PathScope::enter(&ctx.path);
    let _reason = ReasonScope::enter(SyncReason::Checkpoint);
    let threshold_frames = (ctx.threshold_bytes / ctx.page_size.max(512)).max(1);
    let sig = &ctx.signal;
    let mut last_auto: Option<Instant> = None;
    // An idle checkpoint that could not finish (a reader still holds old frames, or
    // the disk fails) is retried after a growing pause, not at once: retrying at
    // once spins a core forever while the reader lives, and never reads `Shutdown`.
    let mut idle_retry = IdleRetry::new(ctx.idle);
    ctx.suspension
        .set_interrupt(Parker::Checkpointer, Some(conn.conn.get_interrupt_handle()));
    let mut conn = Some(conn);
    // Clear `dirty` first so a commit racing with the checkpoint sets it again.
    let checkpoint = |conn: &mut Option<KConn>, mode: CheckpointMode| {
        sig.dirty.store(false, Ordering::Release);
        let r = connection(conn, &ctx)
            .and_then(|c| run_checkpoint(c, &ctx.path, &ctx.wal_path, mode, ctx.truncate_timeout));
        let complete = matches!(&r, Ok(o) if !o.busy && o.wal_frames == o.checkpointed_frames);
        if !complete {
            sig.dirty.store(true, Ordering::Release);
        } else {
            // Every frame is in the database file: the next write restarts the WAL.
            sig.arm_epoch_bump();
        }
        (r, complete)
    };
    let passive = |conn: &mut Option<KConn>| {
        let (r, complete) = checkpoint(conn, CheckpointMode::Passive);
        if let Err(e) = r {
            tracing::warn!(error = %e, "background checkpoint failed");
        }
        complete
    };
    // The open pipeline deferred this checkpoint to us: do it now, or once the
    // writes queued during the barrier committed.
    let mut deferred = ctx.initial_wal_bytes > ctx.threshold_bytes;
    loop {
        if deferred && !sig.writes_first() {
            deferred = false;
            tracing::debug!(
                wal_bytes = ctx.initial_wal_bytes,
                "deferred open checkpoint"
            );
            last_auto = Some(Instant::now());
            passive(&mut conn);
        }
        if ctx.suspension.is_suspended() {
            // Let go of every lock; the connection reopens at the next checkpoint.
            ctx.suspension.set_interrupt(Parker::Checkpointer, None);
            if let Some(c) = conn.take() {
                park::release(c);
            }
            ctx.suspension.park(Parker::Checkpointer);
            continue;
        }
        let msg = if sig.writes_first() {
            // Writes queued during the open barrier go first: wait for the writer.
            match rx.recv() {
                Ok(m) => Some(m),
                Err(_) => break,
            }
        } else if sig.dirty.load(Ordering::Acquire) {
            let wait = ctx
                .idle
                .saturating_sub(sig.since_last_commit())
                .max(idle_retry.remaining());
            if wait.is_zero() {
                None
            } else {
                match rx.recv_timeout(wait) {
                    Ok(m) => Some(m),
                    Err(RecvTimeoutError::Timeout) => continue,
                    Err(RecvTimeoutError::Disconnected) => break,
                }
            }
        } else {
            match rx.recv() {
                Ok(m) => Some(m),
                Err(_) => break,
            }
        };
        match msg {
            None => {
                // Idle: nothing committed for `idle`.
                tracing::debug!("idle checkpoint");
                let complete = passive(&mut conn);
                idle_retry.after_attempt(complete);
            }
            Some(CkptMsg::Committed) => {
                let frames = ctx.wal_frames.load(Ordering::Relaxed);
                // At most one automatic checkpoint per 50 ms, unless the WAL has
                // doubled since: sustained writes must not outrun the bound.
                let due = last_auto.is_none_or(|t| t.elapsed() >= Duration::from_millis(50))
                    || frames >= threshold_frames.saturating_mul(2);
                // The writer is about to finish the last one: let it.
                let finishing = sig.finish_on_writer.load(Ordering::Acquire);
                if frames >= threshold_frames && due && !finishing && !sig.writes_first() {
                    tracing::debug!(frames, "WAL over threshold: passive checkpoint");
                    last_auto = Some(Instant::now());
                    let (r, complete) = checkpoint(&mut conn, CheckpointMode::Passive);
                    let copied = match r {
                        Ok(o) => o.wal_frames,
                        Err(e) => {
                            tracing::warn!(error = %e, "background checkpoint failed");
                            -1
                        }
                    };
                    // "Complete" counts the frames there were when it began. If
                    // commits landed while it copied (the WAL has more frames now),
                    // the WAL cannot start over; with no pause in the writes that
                    // would be so after every checkpoint, and the WAL would grow
                    // without bound. The writer copies the tail between two groups.
                    let now = ctx.wal_frames.load(Ordering::Relaxed);
                    let now = i64::try_from(now).unwrap_or(i64::MAX);
                    if complete && now > copied {
                        sig.finish_on_writer.store(true, Ordering::Release);
                    }
                }
            }
            Some(CkptMsg::Run { mode, reply }) => {
                let _ = reply.send(checkpoint(&mut conn, mode).0);
            }
            Some(CkptMsg::Wake) => {}
            Some(CkptMsg::Shutdown) => break,
        }
    }
    ctx.suspension.set_interrupt(Parker::Checkpointer, None);
    let last = connection(&mut conn, &ctx).and_then(|c| {
        run_checkpoint(
            c,
            &ctx.path,
            &ctx.wal_path,
            CheckpointMode::Truncate,
            ctx.truncate_timeout,
        )
    });
    if let Err(e) = last {
        tracing::warn!(error = %e, "final checkpoint failed");
    }
    // Dropping the last connection lets SQLite checkpoint and remove the WAL; syncs
    // there are attributed to `Checkpoint` (the reason scope is still active).
    drop(conn);
}
