//! Opening keel's connections through the store's VFS.

use std::path::Path;
use std::sync::Arc;

use rusqlite::{Connection, OpenFlags};

use crate::error::{Error, Result};
use crate::options::ConnectionInit;
use crate::vfs::VfsRegistration;

/// A connection plus the VFS registration it uses (dropped after the connection:
/// field order matters).
pub(crate) struct KConn {
    pub(crate) conn: Connection,
    _vfs: Arc<VfsRegistration>,
}

#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) enum Role {
    Writer,
    Reader,
    Checkpointer,
}

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
    conn.set_prepared_statement_cache_capacity(64);
    if let Some(init) = init {
        init(&conn).map_err(|e| Error::sqlite("connection_init hook", path, e))?;
    }
    Ok(KConn {
        conn,
        _vfs: Arc::clone(vfs),
    })
}
