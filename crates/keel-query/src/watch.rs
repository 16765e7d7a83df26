//! While anything is live, a watch on the database's files, so another process's
//! commit reaches live queries without this process reading or writing.
//!
//! Without the change feed (`share_changes` off) a handle learns of other
//! connections' commits from the writer connection's `PRAGMA data_version`
//! (`Inner::notice_foreign`), which its own reads and writes check. A screen that
//! only observes does neither, so while a subscription or a hook that follows
//! other connections is live, a [`FileWatch`] (`keel-watch` thread, see
//! `keel_storage::file_watch`) looks whenever a process writes `<db>-wal` or
//! `<db>`: one `data_version` check on its thread, and when another connection
//! committed, the usual re-read of every subscription, queued to the writer
//! thread, which delivers what differs in commit order. With the feed its own
//! wake-up does this (row by row), so no watch runs.
//!
//! The watch starts with the first live subscription or foreign-following hook and
//! stops with the last (its thread ends by itself; close waits for it). A re-read
//! still queued when the next write arrives is not queued twice: the watch looks
//! again once it ran.
//!
//! It sits below the engine, which owns it in `Inner` and gives it its look as a
//! closure: this module names no engine type.

use std::future::Future;
use std::path::{Path, PathBuf};
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll, Wake, Waker};

use keel_storage::file_watch::{FileWatch, Seen};
use keel_storage::WriteFuture;

/// The re-read a look queued on the writer thread.
pub(crate) type Reread = WriteFuture<Result<(), keel_storage::Error>>;

/// What a look found.
pub(crate) enum Looked {
    /// No commit of another connection since the last look.
    Nothing,
    /// Another connection committed; the re-read it queued, if anything is live.
    Changed(Option<Reread>),
}

/// Who needs the watch: it runs while either does.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Demand {
    /// The subscription hub has a live subscription.
    Subscriptions,
    /// A change hook follows other connections' commits.
    Hooks,
}

/// The look (`true`: re-read even if nothing new is found — the last re-read
/// failed, say on a full write queue).
type Look = dyn Fn(bool) -> Looked + Send + Sync;
type Paused = dyn Fn() -> bool + Send + Sync;

struct State {
    running: Option<FileWatch>,
    closed: bool,
}

/// The watch of one database (see the module docs).
pub(crate) struct Watch {
    path: PathBuf,
    /// False with the change feed: its wake-up already follows other processes.
    enabled: bool,
    subscriptions: AtomicBool,
    hooks: AtomicBool,
    state: Mutex<State>,
    look: Arc<Look>,
    /// True while the store is suspended: resume catches up, the watch need not.
    paused: Arc<Paused>,
}

impl Watch {
    pub(crate) fn new(path: &Path, enabled: bool, look: Arc<Look>, paused: Arc<Paused>) -> Watch {
        Watch {
            path: path.to_path_buf(),
            enabled,
            subscriptions: AtomicBool::new(false),
            hooks: AtomicBool::new(false),
            state: Mutex::new(State {
                running: None,
                closed: false,
            }),
            look,
            paused,
        }
    }

    /// `who` has something live (or no longer): start or stop the watch. Costs
    /// one atomic swap when nothing changes.
    pub(crate) fn demand(&self, who: Demand, live: bool) {
        if !self.enabled {
            return;
        }
        let flag = match who {
            Demand::Subscriptions => &self.subscriptions,
            Demand::Hooks => &self.hooks,
        };
        if flag.swap(live, Ordering::AcqRel) == live {
            return;
        }
        let mut st = self.state.lock().unwrap_or_else(|p| p.into_inner());
        // Both flags read under the lock: concurrent callers settle on the last word.
        let wanted = !st.closed
            && (self.subscriptions.load(Ordering::Acquire) || self.hooks.load(Ordering::Acquire));
        match (wanted, st.running.is_some()) {
            (true, false) => match FileWatch::start(
                &self.path,
                looker(Arc::clone(&self.look), Arc::clone(&self.paused)),
            ) {
                Ok(w) => st.running = Some(w),
                // Reads and writes still check; only the unprompted delivery is lost.
                Err(e) => tracing::warn!(error = %e, "could not watch the database's files"),
            },
            // The thread ends by itself within one look; this runs under the
            // hub's lock, so it does not wait for that (`close` does).
            (false, true) => drop(st.running.take()),
            _ => {}
        }
    }

    /// The database closes: stop the watch and wait until its thread has ended;
    /// it never starts again.
    pub(crate) fn close(&self) {
        let running = {
            let mut st = self.state.lock().unwrap_or_else(|p| p.into_inner());
            st.closed = true;
            st.running.take()
        };
        if let Some(w) = running {
            w.stop();
        }
    }
}

/// The watch's callback: `look`, unless the re-read the last one queued has not
/// run yet (then "later": the watch comes back) or the store is suspended (then
/// nothing: resume catches up, and a queued re-read runs after it). A re-read
/// that never ran is queued again.
fn looker(look: Arc<Look>, paused: Arc<Paused>) -> impl FnMut() -> Seen + Send + 'static {
    let mut pending: Option<Reread> = None;
    move || {
        if paused() {
            pending = None;
            return Seen::Nothing;
        }
        let mut again = false;
        if let Some(f) = pending.as_mut() {
            match finished(f) {
                None => return Seen::Later,
                Some(ok) => again = !ok,
            }
            pending = None;
        }
        match look(again) {
            Looked::Nothing => Seen::Nothing,
            // A retry is not a find: the watch comes back to see it through.
            Looked::Changed(reread) if again => {
                pending = reread;
                Seen::Later
            }
            Looked::Changed(reread) => {
                pending = reread;
                Seen::Commit
            }
        }
    }
}

/// Wakes nobody: `finished` only asks whether the re-read is done.
struct NoWake;

impl Wake for NoWake {
    fn wake(self: Arc<Self>) {}
}

/// Whether the queued re-read has run (`None`: not yet), and whether it was
/// queued and ran (`false`: it never ran — a full queue, a close).
fn finished(f: &mut Reread) -> Option<bool> {
    let waker = Waker::from(Arc::new(NoWake));
    let mut cx = Context::from_waker(&waker);
    match Pin::new(f).poll(&mut cx) {
        Poll::Ready(r) => Some(r.is_ok()),
        Poll::Pending => None,
    }
}
