//! The names of a store's side files, derived from its path: a leaf every layer
//! may use (the VFS, the identity checks, the open pipeline, the store).

use std::path::{Path, PathBuf};

/// `<db>-wal`: the write-ahead log SQLite keeps next to the database.
pub(crate) fn wal_path(path: &Path) -> PathBuf {
    let mut s = path.as_os_str().to_owned();
    s.push("-wal");
    PathBuf::from(s)
}

/// `path` as the path part of an SQLite `file:` URI (RFC 3986 escapes).
pub(crate) fn uri_path(path: &Path) -> String {
    use std::os::unix::ffi::OsStrExt;
    let mut out = String::new();
    for &b in path.as_os_str().as_bytes() {
        if b.is_ascii_alphanumeric() || b"/-_.~".contains(&b) {
            out.push(char::from(b));
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}
