//! Where the FFI's async calls do their blocking work: never on the thread that
//! awaits them (an event loop, the main thread), but on a keel thread, and the
//! future resolves with the result.
//!
//! Most work goes to a small shared pool ([`FFI_THREADS`] threads named
//! `keel-ffi-N`, shared by every database of the process, started on demand,
//! asleep when idle): calls beyond it queue instead of each starting an OS
//! thread. A call that must never queue behind the pool's jobs (a `resume` that
//! reads waiting on the pool depend on) gets a thread of its own instead
//! ([`Runner::OwnThread`]).
//!
//! A panic in the work is caught where it runs and becomes
//! [`KeelError::Internal`], so it never unwinds into the foreign caller; the
//! resolution reaches the foreign runtime through `callbacks::gated`, as every
//! wake does.

use std::future::Future;
use std::sync::OnceLock;

use keel_query::pool::Pool;

use crate::callbacks::gated;
use crate::error::KeelError;

/// The threads that run the FFI's async calls (`keel-ffi-N`): at most this many.
pub(crate) const FFI_THREADS: usize = 4;

fn ffi_pool() -> &'static Pool {
    static POOL: OnceLock<Pool> = OnceLock::new();
    POOL.get_or_init(|| Pool::named(FFI_THREADS, "keel-ffi"))
}

/// Which keel thread runs a task.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Runner {
    /// The shared FFI pool: the default.
    Pool,
    /// A thread of its own (named `keel-{name}`), for the rare calls that must
    /// never queue behind the pool's jobs. Each call starts a thread.
    OwnThread,
}

/// Run `f` on a keel thread chosen by `runner`; the returned future resolves with
/// its result (a panic in `f` as `Internal`). Not gated: for use inside an
/// exported `async fn` that is (see [`run_async`] for the whole of one).
pub(crate) fn spawn<T: Send + 'static>(
    runner: Runner,
    name: &'static str,
    f: impl FnOnce() -> Result<T, KeelError> + Send + 'static,
) -> impl Future<Output = Result<T, KeelError>> + Send + 'static {
    let (tx, rx) = futures::channel::oneshot::channel();
    let job = move || {
        let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(f)).unwrap_or_else(|_| {
            Err(KeelError::internal(format!(
                "the keel task `{name}` panicked"
            )))
        });
        let _ = tx.send(r);
    };
    let rejected = match runner {
        Runner::Pool => ffi_pool()
            .submit(Box::new(job))
            .err()
            .map(|e| KeelError::Io {
                message: format!("could not run the keel task `{name}`: {e:?}"),
            }),
        Runner::OwnThread => std::thread::Builder::new()
            .name(format!("keel-{name}"))
            .spawn(job)
            .err()
            .map(|e| KeelError::Io {
                message: format!("could not start a thread for the keel task `{name}`: {e}"),
            }),
    };
    async move {
        if let Some(e) = rejected {
            return Err(e);
        }
        rx.await
            .unwrap_or_else(|_| Err(KeelError::internal("a keel task ended without a result")))
    }
}

/// [`spawn`] on the shared pool.
pub(crate) fn off_thread<T: Send + 'static>(
    name: &'static str,
    f: impl FnOnce() -> Result<T, KeelError> + Send + 'static,
) -> impl Future<Output = Result<T, KeelError>> + Send + 'static {
    spawn(Runner::Pool, name, f)
}

/// The whole body of an exported `async fn` whose work is one blocking call on
/// a database: `f` runs with its own handle of `db` on a keel thread chosen by
/// `runner`, and the wake that resolves the call is gated (see
/// `callbacks::gated`).
pub(crate) async fn run_async<T: Send + 'static>(
    db: &keel_query::Database,
    runner: Runner,
    name: &'static str,
    f: impl FnOnce(keel_query::Database) -> Result<T, KeelError> + Send + 'static,
) -> Result<T, KeelError> {
    let db = db.clone();
    gated(spawn(runner, name, move || f(db))).await
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::{Arc, Condvar, Mutex};

    /// Threads of this process whose name starts with `keel-ffi`.
    fn ffi_threads() -> usize {
        std::fs::read_dir("/proc/self/task")
            .unwrap()
            .filter(|t| {
                let comm = t.as_ref().unwrap().path().join("comm");
                std::fs::read_to_string(comm)
                    .unwrap_or_default()
                    .starts_with("keel-ffi")
            })
            .count()
    }

    #[test]
    fn async_calls_share_a_bounded_pool_instead_of_a_thread_each() {
        let gate = Arc::new((Mutex::new(false), Condvar::new()));
        let running = Arc::new(AtomicUsize::new(0));
        let futs: Vec<_> = (0..32)
            .map(|i| {
                let (gate, running) = (Arc::clone(&gate), Arc::clone(&running));
                off_thread("test", move || {
                    running.fetch_add(1, Ordering::SeqCst);
                    let (m, cv) = &*gate;
                    let mut open = m.lock().unwrap();
                    while !*open {
                        open = cv.wait(open).unwrap();
                    }
                    Ok(i)
                })
            })
            .collect();
        // Every pool thread is busy with a blocked call; the others wait in the queue.
        while running.load(Ordering::SeqCst) < FFI_THREADS {
            std::thread::sleep(std::time::Duration::from_millis(5));
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
        assert_eq!(running.load(Ordering::SeqCst), FFI_THREADS);
        assert!(ffi_threads() <= FFI_THREADS, "{} threads", ffi_threads());
        *gate.0.lock().unwrap() = true;
        gate.1.notify_all();
        let got: Vec<usize> = futs
            .into_iter()
            .map(|f| futures::executor::block_on(f).unwrap())
            .collect();
        assert_eq!(got, (0..32).collect::<Vec<_>>());
    }

    #[test]
    fn a_panicking_task_resolves_with_an_internal_error() {
        for runner in [Runner::Pool, Runner::OwnThread] {
            let r: Result<(), KeelError> =
                futures::executor::block_on(spawn(runner, "boom", || panic!("boom")));
            assert!(
                matches!(r, Err(KeelError::Internal { .. })),
                "{runner:?}: {r:?}"
            );
        }
    }
}
