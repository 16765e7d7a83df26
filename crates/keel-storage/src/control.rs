//! The writer's own transaction-control statements — `BEGIN IMMEDIATE`,
//! `COMMIT`, `ROLLBACK`, and the `SAVEPOINT` / `RELEASE` / `ROLLBACK TO` of the
//! savepoint each closure of a group runs in — prepared once per writer
//! connection and stepped in place.
//!
//! Every write runs at least `BEGIN` and `COMMIT`. Parsed anew each time
//! (`execute_batch`) they cost a single-object write a tenth of its
//! instructions; through rusqlite's statement cache (a hash of the text, an LRU
//! move, a reset on the way back) most of that again. So they live here, outside
//! the cache: a closure's own `prepare_cached("COMMIT")` can never get the
//! writer's statement, which was authorized when the writer prepared it, back
//! (the writer's authorizer refuses a closure's; `writer::guard_transaction`).
//!
//! Two probes each write also runs, `PRAGMA data_version` (another
//! connection's commits) and `PRAGMA schema_version` (the schema cookie keel's
//! layout check compares), are held the same way.
//!
//! A statement SQLite has expired (the authorizer was installed, the schema
//! changed) is prepared again by SQLite on its next step, and authorized again
//! then: the writer steps these only outside its closures, where it allows them.

use std::ffi::{c_int, CStr};
use std::ptr::NonNull;

use rusqlite::{ffi, Connection};

/// One of the writer's transaction-control statements.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Control {
    Begin,
    Commit,
    Rollback,
    Savepoint,
    Release,
    RollbackTo,
}

/// One of the writer's one-number probes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Probe {
    DataVersion,
    SchemaVersion,
}

/// Every statement [`Controls`] holds, by slot: the controls in [`Control`]'s
/// order, then the probes in [`Probe`]'s.
const SQL: [&CStr; 8] = [
    c"BEGIN IMMEDIATE",
    c"COMMIT",
    c"ROLLBACK",
    c"SAVEPOINT keel_write",
    c"RELEASE keel_write",
    c"ROLLBACK TO keel_write",
    c"PRAGMA data_version",
    c"PRAGMA schema_version",
];

/// The text of the statement in `slot`.
fn text(slot: usize) -> &'static str {
    SQL[slot].to_str().unwrap_or_else(|_| unreachable!("ASCII"))
}

impl Control {
    /// Its SQL.
    pub(crate) fn text(self) -> &'static str {
        text(self.slot())
    }

    fn slot(self) -> usize {
        self as usize
    }
}

impl Probe {
    /// Its SQL.
    pub(crate) fn text(self) -> &'static str {
        text(self.slot())
    }

    /// After the six controls.
    fn slot(self) -> usize {
        Control::RollbackTo as usize + 1 + self as usize
    }
}

/// The prepared [`Control`] and [`Probe`] statements of one connection. Must be dropped
/// before the connection closes (`KConn` declares it first): SQLite does not
/// close a connection with statements left unfinalized.
pub(crate) struct Controls {
    stmts: [NonNull<ffi::sqlite3_stmt>; SQL.len()],
}

// SAFETY: the statements belong to one connection opened with
// SQLITE_OPEN_NO_MUTEX (multi-thread mode: a connection and its statements may
// move between threads, used by one at a time). `Controls` lives in the
// connection's `KConn` and is used only through it, under the same lock.
#[allow(unsafe_code)]
unsafe impl Send for Controls {}

impl Controls {
    /// Prepare every control and probe statement on `conn`.
    #[allow(unsafe_code)]
    pub(crate) fn prepare(conn: &Connection) -> rusqlite::Result<Controls> {
        // SAFETY: the handle is valid while `conn` is, and the statements made
        // from it are finalized before it closes (see the type's docs).
        let db = unsafe { conn.handle() };
        let mut made: Vec<NonNull<ffi::sqlite3_stmt>> = Vec::with_capacity(SQL.len());
        for sql in SQL {
            let mut stmt = std::ptr::null_mut();
            // SAFETY: `db` is an open connection, `sql` is NUL-terminated
            // (length -1), and `stmt` is a valid out-pointer.
            let rc = unsafe {
                ffi::sqlite3_prepare_v3(
                    db,
                    sql.as_ptr(),
                    -1,
                    ffi::SQLITE_PREPARE_PERSISTENT,
                    &mut stmt,
                    std::ptr::null_mut(),
                )
            };
            match NonNull::new(stmt) {
                Some(s) if rc == ffi::SQLITE_OK => made.push(s),
                _ => {
                    let err = failure(db, rc);
                    for s in made {
                        // SAFETY: prepared above on `db`, not used since.
                        unsafe { ffi::sqlite3_finalize(s.as_ptr()) };
                    }
                    return Err(err);
                }
            }
        }
        let stmts = made
            .try_into()
            .unwrap_or_else(|_| unreachable!("one per statement"));
        Ok(Controls { stmts })
    }

    /// Run `c` to its end, then reset it for the next time.
    #[allow(unsafe_code)]
    pub(crate) fn exec(&self, c: Control) -> rusqlite::Result<()> {
        let stmt = self.stmts[c.slot()].as_ptr();
        // SAFETY: `stmt` is a live statement of this connection, used by one
        // thread at a time (see `Send` above). The error is read before the
        // reset, which would clear the connection's message.
        unsafe {
            let rc = ffi::sqlite3_step(stmt);
            let r = if rc == ffi::SQLITE_DONE {
                Ok(())
            } else {
                Err(failure(ffi::sqlite3_db_handle(stmt), rc))
            };
            ffi::sqlite3_reset(stmt);
            r
        }
    }
}

impl Controls {
    /// The number `p` reads (its first row's first column), then reset.
    #[allow(unsafe_code)]
    pub(crate) fn read(&self, p: Probe) -> rusqlite::Result<i64> {
        let stmt = self.stmts[p.slot()].as_ptr();
        // SAFETY: as in `exec`; the column is read while the statement is on
        // its row, before the reset.
        unsafe {
            let rc = ffi::sqlite3_step(stmt);
            let r = if rc == ffi::SQLITE_ROW {
                Ok(ffi::sqlite3_column_int64(stmt, 0))
            } else {
                Err(failure(ffi::sqlite3_db_handle(stmt), rc))
            };
            ffi::sqlite3_reset(stmt);
            r
        }
    }
}

impl Drop for Controls {
    #[allow(unsafe_code)]
    fn drop(&mut self) {
        for s in self.stmts {
            // SAFETY: each statement was prepared by `prepare` and is finalized
            // once, here, before its connection closes.
            unsafe { ffi::sqlite3_finalize(s.as_ptr()) };
        }
    }
}

/// The error `rc` on `db`, with SQLite's message, as rusqlite reports one.
#[allow(unsafe_code)]
fn failure(db: *mut ffi::sqlite3, rc: c_int) -> rusqlite::Error {
    // SAFETY: `db` is an open connection; `sqlite3_errmsg` returns a
    // NUL-terminated string it owns, copied here at once.
    let message = unsafe {
        let m = ffi::sqlite3_errmsg(db);
        (!m.is_null()).then(|| CStr::from_ptr(m).to_string_lossy().into_owned())
    };
    rusqlite::Error::SqliteFailure(ffi::Error::new(rc), message)
}
