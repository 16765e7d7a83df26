//! Calls from keel into foreign code: listeners, write bodies, migrations and the
//! wakes of async calls.
//!
//! ## On which thread
//!
//! keel never calls foreign code on a thread the app owns, except for the first
//! delivery of a subscription, made on the subscribing thread before `subscribe`
//! returns. Everything else runs on keel's own threads:
//!
//! * open progress on `keel-open` (and migration progress on the open's thread);
//! * later deliveries of query, object and `including` subscriptions, and write
//!   bodies, on the writer thread, after the commit and before the write's
//!   `await` returns; another process's commits (with `share_changes`) on
//!   `keel-feed`;
//! * live k-NN deliveries on the writer thread too;
//! * a batched-delivery sink's batches (`batch.rs`) where the deliveries they
//!   carry would be made: one call per commit on the writer thread (or
//!   `keel-feed`), a list's first delivery alone on the subscribing thread;
//! * dictionary changes on the dictionary's notifier thread;
//! * the wake of an async call on whichever keel thread finished its work (a
//!   `keel-ffi-N` task thread, the writer, the open thread).
//!
//! A listener must therefore be short and must never wait for a write of the same
//! database (the writer would wait for itself); the Swift and Kotlin layers only
//! hand each delivery to a stream or channel.
//!
//! ## No panic crosses the FFI
//!
//! Every call goes through [`guarded`]: an exception the foreign callback throws
//! arrives as a [`CallbackError`], which is logged and ignored; a Rust panic on
//! the way (only possible if the FFI contract were broken) is caught with
//! `catch_unwind` and logged too, so it never unwinds into the foreign caller's
//! frames. The work of async calls is caught the same way where it runs
//! (`tasks.rs`).
//!
//! ## Stopping at exit
//!
//! [`stop_callbacks`] ends every call into foreign code for the rest of the
//! process: each call is counted while it runs ([`ForeignCall`]) and refused once
//! the stop is set, a wake of an async call is dropped ([`gated`]), and a foreign
//! object keel holds is leaked rather than freed ([`Foreign`]).

use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::task::{Context, Poll, Wake, Waker};
use std::time::{Duration, Instant};

use crate::error::CallbackError;

/// Whether keel still calls foreign callbacks, and how many calls are running:
/// see [`stop_callbacks`].
struct Callbacks {
    stopped: AtomicBool,
    running: Mutex<usize>,
    idle: Condvar,
}

static CALLBACKS: Callbacks = Callbacks {
    stopped: AtomicBool::new(false),
    running: Mutex::new(0),
    idle: Condvar::new(),
};

/// One call into foreign code, counted while it runs ([`stop_callbacks`] waits for
/// it); `None` once callbacks are stopped.
pub(crate) struct ForeignCall(());

impl ForeignCall {
    pub(crate) fn enter() -> Option<ForeignCall> {
        let mut n = CALLBACKS.running.lock().unwrap_or_else(|e| e.into_inner());
        // Checked under the lock `stop_callbacks` sets it under: a call either
        // sees the stop, or is counted before the stop starts waiting.
        if CALLBACKS.stopped.load(Ordering::SeqCst) {
            return None;
        }
        *n += 1;
        Some(ForeignCall(()))
    }
}

impl Drop for ForeignCall {
    fn drop(&mut self) {
        let mut n = CALLBACKS.running.lock().unwrap_or_else(|e| e.into_inner());
        *n = n.saturating_sub(1);
        // Only `stop_callbacks` waits on `idle`, and it sets `stopped` under
        // this lock before it does: until then there is no one to wake. A
        // notify is a system call even with no waiter, and this runs after
        // every delivery of every live list.
        if *n == 0 && CALLBACKS.stopped.load(Ordering::SeqCst) {
            CALLBACKS.idle.notify_all();
        }
    }
}

/// Stop calling foreign callbacks (listeners of subscriptions, progress and
/// migrations) for the rest of the process, and wait up to `timeout_ms` for the
/// calls already running to return. Returns whether none is left running.
///
/// For a host that is shutting down its runtime under keel's threads: the
/// generated Python module registers it with `atexit`, so no keel thread enters
/// an interpreter that is finalizing (CPython ends such a thread with
/// `pthread_exit`, whose forced unwind through keel's frames aborts the
/// process). Calls into keel still work afterwards; only deliveries to foreign
/// code are dropped. The wait holds no lock foreign code needs: Python's
/// `ctypes` releases the GIL for the call, so a callback waiting for it finishes.
#[uniffi::export]
pub fn stop_callbacks(timeout_ms: u32) -> bool {
    let deadline = Instant::now() + Duration::from_millis(timeout_ms.into());
    let mut n = CALLBACKS.running.lock().unwrap_or_else(|e| e.into_inner());
    CALLBACKS.stopped.store(true, Ordering::SeqCst);
    while *n > 0 {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return false;
        }
        n = CALLBACKS
            .idle
            .wait_timeout(n, left)
            .unwrap_or_else(|e| e.into_inner())
            .0;
    }
    true
}

/// A foreign object keel holds (a listener): dropping it calls into foreign code
/// (the binding's free), so once [`stop_callbacks`] ran it is leaked instead —
/// the process is exiting, and a keel thread must not enter its runtime.
pub(crate) struct Foreign<T: ?Sized>(Option<Box<T>>);

impl<T: ?Sized> Foreign<T> {
    pub(crate) fn new(b: Box<T>) -> Foreign<T> {
        Foreign(Some(b))
    }
}

impl<T: ?Sized> std::ops::Deref for Foreign<T> {
    type Target = T;
    fn deref(&self) -> &T {
        match &self.0 {
            Some(b) => b,
            None => unreachable!("taken only by drop"),
        }
    }
}

impl<T: ?Sized> Drop for Foreign<T> {
    fn drop(&mut self) {
        if let Some(b) = self.0.take() {
            match ForeignCall::enter() {
                Some(_call) => drop(b),
                None => std::mem::forget(b),
            }
        }
    }
}

/// Runs `fut` (the body of an exported `async fn`) so that its wakes reach the
/// foreign runtime only while callbacks are allowed ([`stop_callbacks`]): a wake
/// is a call into foreign code on whichever keel thread completes the work (for
/// Python, the future's continuation takes the GIL). After the stop a wake is
/// dropped — the host is exiting and nothing will poll the future again.
pub(crate) async fn gated<F: Future>(fut: F) -> F::Output {
    Gated {
        fut: Box::pin(fut),
        waker: None,
    }
    .await
}

struct Gated<F> {
    fut: Pin<Box<F>>,
    /// The host's waker and the gated one made for it, reused while the host
    /// polls with the same waker.
    waker: Option<(Waker, Waker)>,
}

impl<F: Future> Future for Gated<F> {
    type Output = F::Output;
    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<F::Output> {
        let this = &mut *self;
        let gated = match &this.waker {
            Some((host, gated)) if host.will_wake(cx.waker()) => gated.clone(),
            _ => {
                let host = cx.waker().clone();
                let gated = Waker::from(Arc::new(GateWaker(host.clone())));
                this.waker = Some((host, gated.clone()));
                gated
            }
        };
        this.fut.as_mut().poll(&mut Context::from_waker(&gated))
    }
}

/// A host waker, woken only while callbacks are allowed (see [`gated`]).
struct GateWaker(Waker);

impl Wake for GateWaker {
    fn wake(self: Arc<Self>) {
        self.wake_by_ref();
    }
    fn wake_by_ref(self: &Arc<Self>) {
        if let Some(_call) = ForeignCall::enter() {
            self.0.wake_by_ref();
        }
    }
}

/// Call a foreign callback: an exception it throws is logged and ignored, and a
/// panic (should the FFI contract be broken) is contained. Nothing is called once
/// [`stop_callbacks`] ran.
pub(crate) fn guarded(what: &str, f: impl FnOnce() -> Result<(), CallbackError>) {
    let Some(_call) = ForeignCall::enter() else {
        return;
    };
    match std::panic::catch_unwind(std::panic::AssertUnwindSafe(f)) {
        Ok(Ok(())) => {}
        Ok(Err(e)) => tracing::warn!("{what}: {e}; ignored"),
        Err(_) => tracing::warn!("{what}: the foreign callback panicked; ignored"),
    }
}
