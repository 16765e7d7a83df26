//! The pool of read-only connections.
//!
//! The pool has a fixed size (`StoreOptions::reader_pool_size`). When every
//! connection is in use a read waits, at most `StoreOptions::reader_wait`, then fails
//! with [`Error::ReadersBusy`]: the pool does not grow, because each extra connection
//! costs a file descriptor and page cache, and a read nested inside another read on
//! the same thread would otherwise wait forever.

use std::panic::{catch_unwind, resume_unwind, AssertUnwindSafe};
use std::path::Path;
use std::sync::{Condvar, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use crate::conn::KConn;
use crate::error::{Error, PathScope};

struct PoolState {
    idle: Vec<KConn>,
    closed: bool,
}

pub(crate) struct ReaderPool {
    state: Mutex<PoolState>,
    cv: Condvar,
    size: usize,
    wait: Duration,
}

impl ReaderPool {
    pub(crate) fn new(conns: Vec<KConn>, wait: Duration) -> ReaderPool {
        ReaderPool {
            size: conns.len(),
            wait,
            state: Mutex::new(PoolState {
                idle: conns,
                closed: false,
            }),
            cv: Condvar::new(),
        }
    }

    fn lock(&self) -> MutexGuard<'_, PoolState> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn acquire(&self, path: &Path) -> Result<KConn, Error> {
        let start = Instant::now();
        let mut st = self.lock();
        loop {
            if st.closed {
                return Err(Error::closed("read", path));
            }
            if let Some(c) = st.idle.pop() {
                return Ok(c);
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
            st = self
                .cv
                .wait_timeout(st, left)
                .unwrap_or_else(|p| p.into_inner())
                .0;
        }
    }

    fn release(&self, c: KConn) {
        let mut st = self.lock();
        if st.closed {
            drop(st);
            drop(c);
            return;
        }
        st.idle.push(c);
        drop(st);
        self.cv.notify_one();
    }

    /// Close the pool: idle connections now, borrowed ones when they come back.
    pub(crate) fn close(&self) {
        let idle = {
            let mut st = self.lock();
            st.closed = true;
            std::mem::take(&mut st.idle)
        };
        self.cv.notify_all();
        drop(idle);
    }

    pub(crate) fn read<R, E>(
        &self,
        path: &Path,
        f: impl FnOnce(&rusqlite::Connection) -> Result<R, E>,
    ) -> Result<R, E>
    where
        E: From<Error>,
    {
        let c = self.acquire(path)?;
        let _scope = PathScope::enter(path);
        if let Err(e) = c.conn.execute_batch("BEGIN DEFERRED") {
            self.release(c);
            return Err(E::from(Error::sqlite("begin read transaction", path, e)));
        }
        let r = catch_unwind(AssertUnwindSafe(|| f(&c.conn)));
        if !c.conn.is_autocommit() {
            // A read-only transaction: COMMIT just ends it. If it fails, try ROLLBACK
            // so the connection goes back to the pool clean.
            if c.conn.execute_batch("COMMIT").is_err() {
                let _ = c.conn.execute_batch("ROLLBACK");
            }
        }
        self.release(c);
        match r {
            Ok(r) => r,
            Err(p) => resume_unwind(p),
        }
    }
}
