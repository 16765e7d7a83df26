//! One helper thread per database that shares a long scan.
//!
//! A nearest query's coarse pass over the photos (`vector/codes.rs`) takes
//! about a third of a millisecond on one core, bound by instruction
//! throughput; a second core nearly halves it. Starting a thread for each query costs
//! ~50 µs on the machines this project is measured on, waking a parked one
//! ~10 µs, so the database keeps one parked thread (`keel-scan`), started the
//! first time a scan is long enough to split.
//!
//! The helper runs one job at a time. A caller that finds it busy (another
//! query on another pooled connection is using it) does all the work itself:
//! no query ever waits for another's share. The thread ends when the database
//! is dropped (its queue's sender goes with it). A job that panics reports
//! nothing; its caller then does that share itself.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc;
use std::sync::Mutex;

type Job = Box<dyn FnOnce() + Send + 'static>;

/// The helper thread of one database, started on first use.
#[derive(Debug, Default)]
pub(crate) struct ScanHelper {
    queue: Mutex<Option<mpsc::Sender<Job>>>,
    busy: std::sync::Arc<AtomicBool>,
}

impl ScanHelper {
    /// Whether this machine has a core for a helper at all. Asked once per
    /// process: on Linux the answer reads cgroup files, too slow for a query.
    pub(crate) fn worthwhile() -> bool {
        static CORES: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
        *CORES.get_or_init(|| std::thread::available_parallelism().is_ok_and(|n| n.get() >= 2))
    }

    /// Run `job` on the helper thread if it is idle, and return where its
    /// result will arrive; `None` when it is busy or cannot be started (the
    /// caller then runs the work itself). The receiver gets nothing if the job
    /// panicked.
    pub(crate) fn try_run<T: Send + 'static>(
        &self,
        job: impl FnOnce() -> T + Send + 'static,
    ) -> Option<mpsc::Receiver<T>> {
        if self
            .busy
            .compare_exchange(false, true, Ordering::Acquire, Ordering::Relaxed)
            .is_err()
        {
            return None;
        }
        let (tx, rx) = mpsc::channel();
        let busy = std::sync::Arc::clone(&self.busy);
        let job: Job = Box::new(move || {
            let out = std::panic::catch_unwind(std::panic::AssertUnwindSafe(job));
            // Idle before the result is sent, so the caller's next query finds
            // the helper free.
            busy.store(false, Ordering::Release);
            if let Ok(out) = out {
                let _ = tx.send(out);
            }
        });
        let mut queue = self.queue.lock().unwrap_or_else(|e| e.into_inner());
        if queue.is_none() {
            *queue = self.start();
        }
        match queue.as_ref().map(|q| q.send(job)) {
            Some(Ok(())) => Some(rx),
            // The thread is gone (or never started): not again.
            Some(Err(_)) | None => {
                *queue = None;
                self.busy.store(false, Ordering::Release);
                None
            }
        }
    }

    /// Whether the thread was started (a job was given to it).
    #[cfg(test)]
    pub(crate) fn started(&self) -> bool {
        self.queue
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .is_some()
    }

    /// The helper thread, parked on its queue until the sender is dropped.
    fn start(&self) -> Option<mpsc::Sender<Job>> {
        let (tx, rx) = mpsc::channel::<Job>();
        std::thread::Builder::new()
            .name("keel-scan".into())
            .spawn(move || {
                // Each job catches its own panic (see `try_run`).
                while let Ok(job) = rx.recv() {
                    job();
                }
            })
            .ok()?;
        Some(tx)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_job_runs_on_the_helper_and_a_busy_helper_declines() {
        let helper = ScanHelper::default();
        let (hold, wait) = mpsc::channel::<()>();
        let first = helper
            .try_run(move || {
                wait.recv().ok();
                std::thread::current().name().map(str::to_owned)
            })
            .expect("idle helper takes the job");
        assert!(helper.try_run(|| 1).is_none(), "busy helper declines");
        hold.send(()).unwrap();
        assert_eq!(first.recv().unwrap().as_deref(), Some("keel-scan"));
        // Idle again once the result is in.
        assert_eq!(helper.try_run(|| 2).expect("idle again").recv().unwrap(), 2);
    }

    #[test]
    fn a_panicking_job_reports_nothing_and_the_helper_lives_on() {
        let helper = ScanHelper::default();
        let rx = helper
            .try_run(|| -> u8 { panic!("a job that fails") })
            .unwrap();
        assert!(rx.recv().is_err());
        assert_eq!(helper.try_run(|| 3).expect("idle again").recv().unwrap(), 3);
    }
}
