//! The pool of read-only connections.
//!
//! The pool has a fixed size (`StoreOptions::reader_pool_size`). When every
//! connection is in use a read waits, at most `StoreOptions::reader_wait`, then fails
//! with [`Error::ReadersBusy`]: the pool does not grow, because each extra connection
//! costs a file descriptor and page cache, and a read nested inside another read on
//! the same thread would otherwise wait forever.
//!
//! While the store is suspended the pool holds no connection: idle ones close at
//! once, borrowed ones when they come back, and reads wait for resume (or fail with
//! [`Error::Suspended`] under `fail_fast`). After resume connections reopen one by
//! one as reads need them.

use std::panic::{catch_unwind, resume_unwind, AssertUnwindSafe};
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use rusqlite::InterruptHandle;

use crate::conn::{KConn, Reopen};
use crate::error::{Error, PathScope};
use crate::park;

/// Opens one more reader connection (configured like the ones the open made).
pub(crate) type Opener = Reopen;

struct PoolState {
    idle: Vec<KConn>,
    /// Connections that exist (idle or borrowed).
    opened: usize,
    /// Borrowed connections, by ticket, so a suspend can interrupt them.
    out: Vec<(u64, InterruptHandle)>,
    next_ticket: u64,
    /// Reads waiting for a connection to come back (see `release`).
    waiting: usize,
    closed: bool,
    suspended: bool,
    fail_fast: bool,
}

/// Install the progress handler that stops a connection's SQL once a suspend's
/// grace period has ended (every 16 VM instructions: a keyed read runs a few
/// dozen).
fn arm(c: &mut KConn, stopping: &Arc<AtomicBool>) {
    let stopping = Arc::clone(stopping);
    if let Err(e) = c
        .conn
        .progress_handler(16, Some(move || stopping.load(Ordering::Relaxed)))
    {
        // Without it a suspend still interrupts, only less promptly.
        tracing::error!(error = %e, "could not install the suspend progress handler");
    }
}

pub(crate) struct ReaderPool {
    state: Mutex<PoolState>,
    /// Set when a suspend's grace period ends, cleared by resume: each
    /// connection's progress handler reads it, so a snapshot running many short
    /// statements stops at its next one instead of slipping between interrupts
    /// (`sqlite3_interrupt` only hits a statement running at that instant).
    stopping: Arc<AtomicBool>,
    cv: Condvar,
    size: usize,
    wait: Duration,
    opener: Opener,
}

impl ReaderPool {
    pub(crate) fn new(mut conns: Vec<KConn>, wait: Duration, opener: Opener) -> ReaderPool {
        let stopping = Arc::new(AtomicBool::new(false));
        for c in &mut conns {
            arm(c, &stopping);
        }
        ReaderPool {
            stopping,
            size: conns.len(),
            wait,
            opener,
            state: Mutex::new(PoolState {
                opened: conns.len(),
                idle: conns,
                out: Vec::new(),
                next_ticket: 0,
                waiting: 0,
                closed: false,
                suspended: false,
                fail_fast: false,
            }),
            cv: Condvar::new(),
        }
    }

    fn lock(&self) -> MutexGuard<'_, PoolState> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn acquire(&self, path: &Path) -> Result<(KConn, u64), Error> {
        let start = Instant::now();
        let mut st = self.lock();
        loop {
            if st.closed {
                return Err(Error::closed("read", path));
            }
            if st.suspended {
                if st.fail_fast || park::no_wait() {
                    return Err(Error::suspended("read", path));
                }
                // Waits for resume (or close), however long: that is what a read
                // issued while suspended does without `fail_fast`.
                st = self.cv.wait(st).unwrap_or_else(|p| p.into_inner());
                continue;
            }
            let c = match st.idle.pop() {
                Some(c) => Some(c),
                None if st.opened < self.size => {
                    // Reopen after a resume; the slot is taken before the open so
                    // two reads cannot overshoot the pool size.
                    st.opened += 1;
                    drop(st);
                    let r = (self.opener)();
                    st = self.lock();
                    match r {
                        // Suspended or closed while opening: let go of it again.
                        Ok(c) if st.suspended || st.closed => {
                            st.opened -= 1;
                            park::release(c);
                            self.cv.notify_all();
                            continue;
                        }
                        Ok(mut c) => {
                            arm(&mut c, &self.stopping);
                            Some(c)
                        }
                        Err(e) => {
                            st.opened -= 1;
                            return Err(e);
                        }
                    }
                }
                None => None,
            };
            if let Some(c) = c {
                let t = st.next_ticket;
                st.next_ticket += 1;
                st.out.push((t, c.conn.get_interrupt_handle()));
                return Ok((c, t));
            }
            let waited = start.elapsed();
            let Some(left) = self.wait.checked_sub(waited).filter(|d| !d.is_zero()) else {
                return Err(Error::ReadersBusy {
                    op: "read",
                    path: path.to_path_buf(),
                    pool: self.size,
                    waited,
                });
            };
            st.waiting += 1;
            st = self
                .cv
                .wait_timeout(st, left)
                .unwrap_or_else(|p| p.into_inner())
                .0;
            st.waiting -= 1;
        }
    }

    fn release(&self, c: KConn, ticket: u64) {
        let mut st = self.lock();
        st.out.retain(|(t, _)| *t != ticket);
        if st.closed || st.suspended {
            st.opened -= 1;
            drop(st);
            // Wakes a suspend waiting for the last borrowed connection.
            self.cv.notify_all();
            park::release(c);
            return;
        }
        st.idle.push(c);
        // Only when a read waits: the futex condvar makes a system call for every
        // notify, waiter or not — one per read, measured, where a lookup by key
        // takes a few microseconds.
        let wake = st.waiting > 0;
        drop(st);
        if wake {
            self.cv.notify_one();
        }
    }

    /// Close the pool: idle connections now, borrowed ones when they come back.
    pub(crate) fn close(&self) {
        let idle = {
            let mut st = self.lock();
            st.closed = true;
            st.opened -= st.idle.len();
            std::mem::take(&mut st.idle)
        };
        self.cv.notify_all();
        drop(idle);
    }

    /// Close the idle connections (a memory warning: each holds its page and
    /// statement caches); reads open new ones as they need them. Returns how many
    /// were closed.
    pub(crate) fn release_idle(&self) -> usize {
        let idle = {
            let mut st = self.lock();
            st.opened -= st.idle.len();
            std::mem::take(&mut st.idle)
        };
        let n = idle.len();
        for c in idle {
            park::release(c);
        }
        self.cv.notify_all();
        n
    }

    /// Suspend: close the idle connections now; new reads wait (or fail fast).
    pub(crate) fn suspend(&self, fail_fast: bool) {
        let idle = {
            let mut st = self.lock();
            st.suspended = true;
            st.fail_fast = fail_fast;
            st.opened -= st.idle.len();
            std::mem::take(&mut st.idle)
        };
        for c in idle {
            park::release(c);
        }
    }

    /// Interrupt every borrowed connection's running statement.
    pub(crate) fn interrupt_borrowed(&self) {
        self.stopping.store(true, Ordering::Relaxed);
        for (_, h) in &self.lock().out {
            h.interrupt();
        }
    }

    /// Wait until no connection is open (the borrowed ones came back), at most
    /// until `deadline`.
    pub(crate) fn wait_released(&self, deadline: Instant) -> bool {
        let st = self.lock();
        let left = deadline.saturating_duration_since(Instant::now());
        let (st, _) = self
            .cv
            .wait_timeout_while(st, left, |s| s.opened != 0)
            .unwrap_or_else(|p| p.into_inner());
        st.opened == 0
    }

    /// Resume: waiting reads go on (connections reopen as they are needed).
    pub(crate) fn resume(&self) {
        {
            let mut st = self.lock();
            st.suspended = false;
            st.fail_fast = false;
            self.stopping.store(false, Ordering::Relaxed);
        }
        self.cv.notify_all();
    }

    /// Run `f` on a pooled connection: inside one read transaction if `txn`, else
    /// in autocommit (each statement of `f` is its own read transaction).
    pub(crate) fn read<R, E>(
        &self,
        path: &Path,
        txn: bool,
        f: impl FnOnce(&rusqlite::Connection) -> Result<R, E>,
    ) -> Result<R, E>
    where
        E: From<Error>,
    {
        let (c, ticket) = self.acquire(path)?;
        let _scope = PathScope::enter(path);
        // Cached: parsing `BEGIN` and `COMMIT` again on every read cost more than
        // the keyed lookup the read is for.
        if txn {
            if let Err(e) = run_cached(&c.conn, "BEGIN DEFERRED") {
                self.release(c, ticket);
                return Err(E::from(Error::sqlite("begin read transaction", path, e)));
            }
        }
        let r = catch_unwind(AssertUnwindSafe(|| f(&c.conn)));
        if !c.conn.is_autocommit() {
            // A read-only transaction (ours, or one `f` began): COMMIT just ends it.
            // If it fails, try ROLLBACK so the connection goes back to the pool clean.
            if run_cached(&c.conn, "COMMIT").is_err() {
                let _ = c.conn.execute_batch("ROLLBACK");
            }
        }
        self.release(c, ticket);
        match r {
            Ok(r) => r,
            Err(p) => resume_unwind(p),
        }
    }
}

/// Run a transaction-control statement through the connection's statement cache.
fn run_cached(conn: &rusqlite::Connection, sql: &str) -> rusqlite::Result<()> {
    conn.prepare_cached(sql)?.execute([]).map(|_| ())
}
