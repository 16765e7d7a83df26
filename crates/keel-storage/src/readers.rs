//! The pool of read-only connections.

use std::panic::{catch_unwind, resume_unwind, AssertUnwindSafe};
use std::path::Path;
use std::sync::{Condvar, Mutex, MutexGuard};

use crate::conn::KConn;
use crate::error::{Error, PathScope};

struct PoolState {
    idle: Vec<KConn>,
    closed: bool,
}

pub(crate) struct ReaderPool {
    state: Mutex<PoolState>,
    cv: Condvar,
}

impl ReaderPool {
    pub(crate) fn new(conns: Vec<KConn>) -> ReaderPool {
        ReaderPool {
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
        let mut st = self.lock();
        loop {
            if st.closed {
                return Err(Error::closed("read", path));
            }
            if let Some(c) = st.idle.pop() {
                return Ok(c);
            }
            st = self.cv.wait(st).unwrap_or_else(|p| p.into_inner());
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
