//! A small bounded thread pool. Each database has one as its fetch pool; the FFI
//! layer shares one for its async calls.
//!
//! The fetch pool: a few keel-owned threads that run the `_async` fetches
//! ([`Query::all_async`](crate::query::fetch::Query::all_async), [`Database::get_async`](crate::db::database::Database::get_async), …).
//!
//! Threads start on demand — one more only while every running one is busy — up
//! to a fixed bound (the database's reader pool size: more would only wait for a
//! read connection), are named `keel-fetch-0`, `keel-fetch-1`, …, and wait idle for
//! the next job. 200 concurrent async fetches therefore run on at most that many
//! threads instead of 200. [`Pool::close`] (run by `Database::close`) lets queued
//! jobs finish and joins the threads. No async runtime is involved: a job hands
//! its result to a oneshot channel that any executor can await.

use std::collections::VecDeque;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::thread::JoinHandle;

/// A job for a [`Pool`].
pub type Job = Box<dyn FnOnce() + Send>;

/// Why [`Pool::submit`] did not take a job.
#[derive(Debug)]
#[non_exhaustive]
pub enum Rejected {
    /// The pool was closed.
    Closed,
    /// No thread runs and none could be started.
    Spawn(std::io::Error),
}

///
/// ```
/// use keel_query::pool::Pool;
/// let pool = Pool::named(2, "my-worker");
/// let (tx, rx) = std::sync::mpsc::channel();
/// pool.submit(Box::new(move || tx.send(6 * 7).unwrap())).unwrap();
/// assert_eq!(rx.recv().unwrap(), 42);
/// pool.close();
/// ```
pub struct Pool {
    shared: Arc<Shared>,
}

struct Shared {
    max: usize,
    name: &'static str,
    st: Mutex<State>,
    cv: Condvar,
}

#[derive(Default)]
struct State {
    jobs: VecDeque<Job>,
    idle: usize,
    threads: Vec<JoinHandle<()>>,
    closed: bool,
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, State> {
        self.st.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn work(&self) {
        loop {
            let job = {
                let mut st = self.lock();
                loop {
                    if let Some(j) = st.jobs.pop_front() {
                        break j;
                    }
                    if st.closed {
                        return;
                    }
                    st.idle += 1;
                    st = self.cv.wait(st).unwrap_or_else(|p| p.into_inner());
                    st.idle -= 1;
                }
            };
            // A panicking job drops its result sender: its task reports the failure.
            if catch_unwind(AssertUnwindSafe(job)).is_err() {
                tracing::error!("an async fetch panicked");
            }
        }
    }
}

impl Pool {
    /// A fetch pool of at most `max` threads (at least one), named `keel-fetch-N`;
    /// none starts before a job.
    pub fn new(max: usize) -> Pool {
        Pool::named(max, "keel-fetch")
    }

    /// A pool of at most `max` threads (at least one) named `<name>-0`, `<name>-1`, …
    pub fn named(max: usize, name: &'static str) -> Pool {
        Pool {
            shared: Arc::new(Shared {
                max: max.max(1),
                name,
                st: Mutex::new(State::default()),
                cv: Condvar::new(),
            }),
        }
    }

    /// Queue `job`. Starts a thread if the queued jobs outnumber the idle threads
    /// and fewer than the bound run.
    ///
    /// # Errors
    /// [`Rejected::Closed`] after [`Pool::close`]; [`Rejected::Spawn`] if no thread
    /// runs and none could be started.
    pub fn submit(&self, job: Job) -> Result<(), Rejected> {
        let mut st = self.shared.lock();
        if st.closed {
            return Err(Rejected::Closed);
        }
        st.jobs.push_back(job);
        if st.jobs.len() <= st.idle || st.threads.len() >= self.shared.max {
            drop(st);
            self.shared.cv.notify_one();
            return Ok(());
        }
        let n = st.threads.len();
        let s2 = Arc::clone(&self.shared);
        match std::thread::Builder::new()
            .name(format!("{}-{n}", self.shared.name))
            .spawn(move || s2.work())
        {
            Ok(h) => {
                st.threads.push(h);
                Ok(())
            }
            Err(e) if st.threads.is_empty() => {
                st.jobs.pop_back();
                Err(Rejected::Spawn(e))
            }
            Err(e) => {
                // The running threads take the job when they are free.
                tracing::warn!(error = %e, "could not start another keel-fetch thread");
                Ok(())
            }
        }
    }

    /// Refuse new jobs, let the queued ones run, and join the threads (all but
    /// the calling one, should a job close the database).
    pub fn close(&self) {
        let threads = {
            let mut st = self.shared.lock();
            st.closed = true;
            std::mem::take(&mut st.threads)
        };
        self.shared.cv.notify_all();
        let me = std::thread::current().id();
        for h in threads {
            if h.thread().id() != me {
                let _ = h.join();
            }
        }
    }

    /// Threads started so far.
    #[cfg(test)]
    fn threads(&self) -> usize {
        self.shared.lock().threads.len()
    }
}

impl Drop for Pool {
    /// Without a close: idle threads exit once the queue is empty (not joined —
    /// the last database handle may be dropped by a job on one of them).
    fn drop(&mut self) {
        self.shared.lock().closed = true;
        self.shared.cv.notify_all();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::mpsc;

    #[test]
    fn bounded_threads_run_every_job_and_close_joins_them() {
        let pool = Pool::new(2);
        let done = Arc::new(AtomicUsize::new(0));
        let (tx, rx) = mpsc::channel();
        for _ in 0..50 {
            let (d, tx) = (Arc::clone(&done), tx.clone());
            pool.submit(Box::new(move || {
                std::thread::sleep(std::time::Duration::from_millis(1));
                d.fetch_add(1, Ordering::SeqCst);
                let _ = tx.send(std::thread::current().name().map(str::to_owned));
            }))
            .unwrap();
        }
        drop(tx);
        let names: Vec<Option<String>> = rx.iter().collect();
        assert_eq!(names.len(), 50);
        assert!(names
            .iter()
            .all(|n| matches!(n.as_deref(), Some("keel-fetch-0" | "keel-fetch-1"))));
        assert!(pool.threads() <= 2);
        pool.close();
        assert_eq!(done.load(Ordering::SeqCst), 50);
        assert!(matches!(
            pool.submit(Box::new(|| {})),
            Err(Rejected::Closed)
        ));
    }
}
