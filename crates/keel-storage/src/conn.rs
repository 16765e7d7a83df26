//! Opening keel's connections through the store's VFS.

use std::path::Path;
use std::sync::Arc;

use rusqlite::{Connection, OpenFlags};

use crate::control::{Control, Controls, Probe};
use crate::error::{Error, Result};
use crate::options::ConnectionInit;
use crate::policy::{set_reason, SyncPolicies, SyncPolicy, SyncReason};
use crate::vfs::VfsRegistration;

/// A connection plus the VFS registration it uses (dropped after the connection:
/// field order matters).
///
/// Closing the last connection of a database makes SQLite checkpoint the WAL (and
/// remove it). That happens when a failed or cancelled open drops the writer, or when
/// the checkpointer closes at shutdown, so a close runs under the checkpoint policy:
/// its syncs are attributed to [`SyncReason::Checkpoint`] and the connection's
/// `synchronous` is the checkpoint policy's (the writer's is the commit policy's,
/// which may be `OFF`).
pub(crate) struct KConn {
    /// The writer's prepared transaction-control statements and probes
    /// (`control.rs`; `None` on other connections); finalized before `conn`
    /// closes (fields drop in this order).
    pub(crate) controls: Option<Controls>,
    pub(crate) conn: Connection,
    _vfs: Arc<VfsRegistration>,
    /// Puts the thread's sync reason back once `conn` has closed (dropped last).
    restore: RestoreReason,
}

struct RestoreReason(Option<SyncReason>);

impl Drop for RestoreReason {
    fn drop(&mut self) {
        if let Some(r) = self.0.take() {
            set_reason(r);
        }
    }
}

impl KConn {
    /// Run `control`: its prepared statement if there is one, else parsed now.
    pub(crate) fn control(&self, control: Control) -> rusqlite::Result<()> {
        match &self.controls {
            Some(c) => c.exec(control),
            None => self.conn.execute_batch(control.text()),
        }
    }

    /// Read `probe`: through its prepared statement if there is one.
    pub(crate) fn probe(&self, probe: Probe) -> rusqlite::Result<i64> {
        match &self.controls {
            Some(c) => c.read(probe),
            None => self
                .conn
                .prepare_cached(probe.text())
                .and_then(|mut st| st.query_row([], |r| r.get(0))),
        }
    }

    /// The store's sync policies.
    pub(crate) fn policies(&self) -> &SyncPolicies {
        &self._vfs.shared().policies
    }
}

impl Drop for KConn {
    fn drop(&mut self) {
        let policy = &self._vfs.shared().policies.checkpoint;
        let sql = format!("PRAGMA synchronous={}", policy.checkpoint_synchronous());
        if let Err(e) = self.conn.execute_batch(&sql) {
            tracing::debug!(error = %e, "could not set the closing connection's synchronous");
        }
        // Fields drop after this: `conn` closes under the Checkpoint reason, then
        // `restore` puts the previous reason back.
        self.restore.0 = Some(set_reason(SyncReason::Checkpoint));
    }
}

/// Opens one of keel's connections again after a resume (configured like the
/// one the open made).
pub(crate) type Reopen = Arc<dyn Fn() -> Result<KConn> + Send + Sync>;

#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) enum Role {
    Writer,
    Reader,
    Checkpointer,
}

/// The page cache of each reader connection: twice SQLite's default (see
/// `open_conn`).
const READER_CACHE_SIZE: &str = "PRAGMA cache_size=-4096";

pub(crate) fn open_conn(
    path: &Path,
    vfs: &Arc<VfsRegistration>,
    role: Role,
    init: Option<&ConnectionInit>,
) -> Result<KConn> {
    let (flags, op) = match role {
        Role::Writer => (
            OpenFlags::SQLITE_OPEN_READ_WRITE
                | OpenFlags::SQLITE_OPEN_CREATE
                | OpenFlags::SQLITE_OPEN_NO_MUTEX,
            "open writer connection",
        ),
        Role::Reader => (
            OpenFlags::SQLITE_OPEN_READ_ONLY | OpenFlags::SQLITE_OPEN_NO_MUTEX,
            "open reader connection",
        ),
        Role::Checkpointer => (
            OpenFlags::SQLITE_OPEN_READ_WRITE | OpenFlags::SQLITE_OPEN_NO_MUTEX,
            "open checkpointer connection",
        ),
    };
    let conn = Connection::open_with_flags_and_vfs(path, flags, vfs.name())
        .map_err(|e| Error::sqlite(op, path, e))?;
    if let Some(cipher) = vfs.shared().cipher() {
        // Before any other statement: the first read of the file needs the key.
        cipher
            .apply(&conn)
            .map_err(|e| Error::sqlite("apply the data key", path, e))?;
    }
    conn.set_prepared_statement_cache_capacity(64);
    if role == Role::Reader {
        // A keel row holds the object's FlatBuffers bytes beside its key and index
        // columns, so a table takes more pages than the same data in plain
        // columns. With SQLite's default 2 MB page cache a scan of a table just
        // over that size misses on every page (LRU against a sequential scan) and
        // reads each again from the file: measured on the crud benchmark's 10,000
        // objects (2.4 MB), a quarter of a filtered fetch's time went to them. The cache
        // fills only as reads touch pages; `connection_init` can still change it.
        conn.execute_batch(READER_CACHE_SIZE)
            .map_err(|e| Error::sqlite("set reader cache size", path, e))?;
    }
    if let Some(init) = init {
        init(&conn).map_err(|e| Error::sqlite("connection_init hook", path, e))?;
    }
    let policies = &vfs.shared().policies;
    // See `SyncPolicy::sqlite_fullfsync`: SQLite's own xSync must not be weaker
    // than the policy for the syncs keel's shim cannot run itself.
    let on = |p: &SyncPolicy| if p.sqlite_fullfsync() { "ON" } else { "OFF" };
    conn.execute_batch(&format!(
        "PRAGMA fullfsync={}; PRAGMA checkpoint_fullfsync={};",
        on(&policies.commit),
        on(&policies.checkpoint)
    ))
    .map_err(|e| Error::sqlite("set fullfsync", path, e))?;
    Ok(KConn {
        controls: None,
        conn,
        _vfs: Arc::clone(vfs),
        restore: RestoreReason(None),
    })
}
