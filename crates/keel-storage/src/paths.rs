//! The names of a store's side files, derived from its path: a leaf every layer
//! may use (the VFS, the identity checks, the open pipeline, the store).

use std::path::{Path, PathBuf};

/// `<db>-wal`: the write-ahead log SQLite keeps next to the database.
pub(crate) fn wal_path(path: &Path) -> PathBuf {
    let mut s = path.as_os_str().to_owned();
    s.push("-wal");
    PathBuf::from(s)
}
