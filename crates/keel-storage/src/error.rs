//! The storage kernel's error type.

use std::cell::RefCell;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use crate::policy::{take_last_sync_error, FileKind, SyncReason};

/// Result alias used throughout `keel-storage`.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Everything that can go wrong in the storage kernel.
///
/// Every variant names the operation that was being done (`op`) and the file it was
/// done to (`path`). `Error` is `Clone` (sources are behind `Arc`) so that one failed
/// group commit can be reported to every closure of the group.
///
/// ```
/// use keel_storage::{Error, Store, StoreOptions};
/// let dir = tempfile::tempdir().unwrap();
/// let path = dir.path().join("junk.db");
/// std::fs::write(&path, vec![0x5a_u8; 8192]).unwrap();
/// match Store::open(&path, StoreOptions::default()) {
///     Err(Error::NotADatabase { path: p, .. }) => assert_eq!(p, path),
///     other => panic!("expected NotADatabase, got {other:?}"),
/// }
/// ```
#[derive(Debug, Clone, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The file exists but is not an SQLite database (bad header, foreign format).
    #[error("{op}: {} is not a database", path.display())]
    NotADatabase {
        /// What was being done.
        op: &'static str,
        /// The file.
        path: PathBuf,
    },
    /// The store is encrypted and its key cannot be read now (the device is locked,
    /// the key store is not ready): retry later. keel never makes a new key for an
    /// existing database; the files are unchanged.
    #[error("{op}: the key of {} is unavailable now (retry later): {detail}", path.display())]
    KeyUnavailable {
        /// What was being done.
        op: &'static str,
        /// The database file.
        path: PathBuf,
        /// What the key provider said.
        detail: String,
    },
    /// The database exists but its key does not (a backup restored without its key,
    /// a damaged key store): its data cannot be read. keel refuses rather than
    /// create a fresh, empty database over it; the files are unchanged.
    #[error("{op}: the key of {} is lost; its data cannot be read: {detail}", path.display())]
    KeyLost {
        /// What was being done.
        op: &'static str,
        /// The database file.
        path: PathBuf,
        /// What the key provider said.
        detail: String,
    },
    /// The file is encrypted but does not decrypt with the key given (another key,
    /// or the other plaintext-header setting); the files are unchanged.
    #[error("{op}: {} does not decrypt with the key given", path.display())]
    WrongKey {
        /// What was being done.
        op: &'static str,
        /// The database file.
        path: PathBuf,
    },
    /// A key was given but the file is a plaintext SQLite database. It is left as
    /// it is: encrypt it with a migration (`keel encrypt`), or open it without a key.
    #[error("{op}: {} is not encrypted, but a key was given", path.display())]
    NotEncrypted {
        /// What was being done.
        op: &'static str,
        /// The database file.
        path: PathBuf,
    },
    /// The file is encrypted (an SQLCipher file) but was opened without a key: open
    /// it with [`StoreOptions::encryption`](crate::options::StoreOptions::encryption).
    /// Not a bad file: `recover_corrupt` leaves it alone; the files are unchanged.
    #[error("{op}: {} is encrypted; open it with its key", path.display())]
    KeyRequired {
        /// What was being done.
        op: &'static str,
        /// The database file.
        path: PathBuf,
    },
    /// The file is an SQLite database but is damaged (truncated, malformed pages).
    #[error("{op}: {} is corrupt: {detail}", path.display())]
    Corrupt {
        /// What was being done.
        op: &'static str,
        /// The file.
        path: PathBuf,
        /// What is wrong with it.
        detail: String,
    },
    /// Another connection or process holds a lock keel needed and did not release
    /// it within the busy timeout.
    #[error("{op}: {} is locked by another connection or process", path.display())]
    Locked {
        /// What was being done.
        op: &'static str,
        /// The file.
        path: PathBuf,
    },
    /// The file (or its directory) cannot be read or opened: permissions, a directory
    /// in the way, a missing parent that cannot be created.
    #[error("{op}: cannot read {}: {source}", path.display())]
    Unreadable {
        /// What was being done.
        op: &'static str,
        /// The file.
        path: PathBuf,
        /// The OS error.
        #[source]
        source: Arc<std::io::Error>,
    },
    /// Any other OS-level I/O failure.
    #[error("{op}: I/O error on {}: {source}", path.display())]
    Io {
        /// What was being done.
        op: &'static str,
        /// The file.
        path: PathBuf,
        /// The OS error.
        #[source]
        source: Arc<std::io::Error>,
    },
    /// An SQLite call failed.
    #[error("{op}: SQLite error on {}: {source}", path.display())]
    Sqlite {
        /// What was being done.
        op: &'static str,
        /// The file.
        path: PathBuf,
        /// The SQLite error.
        #[source]
        source: Arc<rusqlite::Error>,
    },
    /// A sync (fsync, F_FULLFSYNC, a custom hook) failed. Data written since the last
    /// successful sync may not be durable; the transaction that asked for it failed.
    #[error("{reason:?} sync of the {kind:?} file of {} failed: {source}", path.display())]
    SyncFailed {
        /// Which file kind was being synced.
        kind: FileKind,
        /// Why it was being synced.
        reason: SyncReason,
        /// The database file.
        path: PathBuf,
        /// The OS (or hook) error.
        #[source]
        source: Arc<std::io::Error>,
    },
    /// The store was closed (by [`Store::close`](crate::store::Store::close) or because
    /// its threads stopped) before or while the operation ran.
    #[error("{op}: store {} is closed", path.display())]
    Closed {
        /// What was being attempted.
        op: &'static str,
        /// The database file.
        path: PathBuf,
    },
    /// The operation was cancelled, e.g. an [`OpenFuture`](crate::store::OpenFuture) was
    /// dropped before open completed.
    #[error("{op}: cancelled for {}", path.display())]
    Cancelled {
        /// What was cancelled.
        op: &'static str,
        /// The database file.
        path: PathBuf,
    },
    /// A user closure (write closure, schema hook, on-commit callback) panicked.
    /// keel caught the panic; the store keeps working.
    #[error("{op}: a closure panicked on {}: {message}", path.display())]
    Panicked {
        /// What was running.
        op: &'static str,
        /// The database file.
        path: PathBuf,
        /// The panic payload, if it was a string.
        message: String,
    },
    /// Backpressure: the writer queue already holds
    /// [`StoreOptions::max_queued_writes`](crate::options::StoreOptions::max_queued_writes)
    /// writes (the app produces faster than the disk commits). The write was not
    /// queued and its closure never runs; nothing else is affected. Retry after some
    /// of the queued writes resolved.
    #[error("{op}: the writer queue of {} is full ({capacity} writes waiting)", path.display())]
    QueueFull {
        /// What was being attempted.
        op: &'static str,
        /// The database file.
        path: PathBuf,
        /// The configured bound.
        capacity: usize,
    },
    /// Every pooled read connection stayed in use for
    /// [`StoreOptions::reader_wait`](crate::options::StoreOptions::reader_wait): the read did
    /// not run. Long snapshots (or reads nested inside reads on a small pool) hold
    /// connections; raise `reader_pool_size` or shorten them.
    #[error("{op}: all {pool} read connections of {} stayed busy for {waited:?}", path.display())]
    ReadersBusy {
        /// What was being attempted.
        op: &'static str,
        /// The database file.
        path: PathBuf,
        /// The reader pool size.
        pool: usize,
        /// How long the read waited.
        waited: std::time::Duration,
    },
    /// The file is an SQLite database of another application (not created by keel,
    /// no keel tables): keel refused it and wrote nothing. Set
    /// [`StoreOptions::adopt_foreign`](crate::options::StoreOptions::adopt_foreign) to take it
    /// over. Not a bad file: `recover_corrupt` leaves it alone.
    #[error("{}: not a keel database: {detail}; open it with adopt_foreign to take it over", path.display())]
    ForeignFile {
        /// The database file.
        path: PathBuf,
        /// Whose it looks like (application id, some table names).
        detail: String,
    },
    /// The `-wal` file beside the database does not belong to it: another database's
    /// WAL, or one of its own from another time (a backup of the file restored under
    /// a newer WAL) — its frames carry identity epochs the file cannot be at, see
    /// `docs/durability.md`. Nothing was applied or written; a bad file:
    /// `recover_corrupt` moves the database and its `-wal` aside together.
    #[error("{}: the -wal file beside it does not belong to it: {detail}", path.display())]
    ForeignWal {
        /// The database file.
        path: PathBuf,
        /// Which identities disagree.
        detail: String,
    },
    /// The open barrier (the sync of a WAL left by a previous run) was still running
    /// when a bounded wait for it ran out: [`Store::close`](crate::store::Store::close)
    /// during the barrier waited `StoreOptions::truncate_timeout`, then closed anyway
    /// and failed the writes still queued with this error (none of them committed).
    /// Nothing already on disk is affected.
    #[error("{op}: the open barrier sync of {} was still running after {waited:?}", path.display())]
    BarrierPending {
        /// What was waiting.
        op: &'static str,
        /// The database file.
        path: PathBuf,
        /// How long it waited.
        waited: std::time::Duration,
    },
    /// The store is suspended ([`Store::suspend`](crate::store::Store::suspend)): a read
    /// or write issued while suspended with
    /// [`SuspendOptions::fail_fast`](crate::suspend::SuspendOptions::fail_fast), or work that
    /// was in flight when the suspend interrupted it (its transaction rolled back:
    /// nothing of it committed). Retryable: run it again after
    /// [`Store::resume`](crate::store::Store::resume). keel only interrupts SQLite for a
    /// suspend, so an `SQLITE_INTERRUPT` is reported as this variant.
    #[error("{op}: store {} is suspended; retry after resume", path.display())]
    Suspended {
        /// What was being attempted.
        op: &'static str,
        /// The database file.
        path: PathBuf,
    },
    /// [`Store::suspend`](crate::store::Store::suspend) could not let go of every
    /// connection within [`SuspendOptions::timeout`](crate::suspend::SuspendOptions::timeout):
    /// a write closure or a read kept running outside SQLite (interrupts only stop
    /// SQL statements). The store stays suspended — new work waits or fails fast —
    /// and the last connections close as soon as that work returns; call
    /// [`Store::resume`](crate::store::Store::resume) as usual.
    #[error("suspend of {}: work in flight did not stop within {waited:?}", path.display())]
    SuspendTimeout {
        /// The database file.
        path: PathBuf,
        /// How long the suspend waited.
        waited: std::time::Duration,
    },
    /// The schema hook (the layer above) rejected the database.
    #[error("schema: {}: {message}", path.display())]
    Schema {
        /// The database file.
        path: PathBuf,
        /// The hook's message.
        message: String,
    },
    /// The database file was replaced by a key rotation or a migration (in this or
    /// another process) after this handle opened it, or a rotation of it was
    /// interrupted: this handle would write into a file nobody reads any more.
    /// Nothing was written; close the store and open it again, with the new key.
    #[error("{op}: {} was replaced by a key rotation or migration; reopen it with its new key", path.display())]
    Rotated {
        /// What was being done.
        op: &'static str,
        /// The database file.
        path: PathBuf,
    },
}

impl Error {
    /// The file this error is about.
    ///
    /// ```
    /// # use keel_storage::Error;
    /// let e = Error::Closed { op: "write", path: "/tmp/a.db".into() };
    /// assert_eq!(e.path(), std::path::Path::new("/tmp/a.db"));
    /// ```
    pub fn path(&self) -> &Path {
        match self {
            Error::NotADatabase { path, .. }
            | Error::Corrupt { path, .. }
            | Error::Locked { path, .. }
            | Error::Unreadable { path, .. }
            | Error::Io { path, .. }
            | Error::Sqlite { path, .. }
            | Error::SyncFailed { path, .. }
            | Error::Closed { path, .. }
            | Error::Cancelled { path, .. }
            | Error::Panicked { path, .. }
            | Error::QueueFull { path, .. }
            | Error::ReadersBusy { path, .. }
            | Error::BarrierPending { path, .. }
            | Error::Schema { path, .. }
            | Error::Suspended { path, .. }
            | Error::SuspendTimeout { path, .. }
            | Error::ForeignFile { path, .. }
            | Error::ForeignWal { path, .. }
            | Error::KeyUnavailable { path, .. }
            | Error::KeyLost { path, .. }
            | Error::WrongKey { path, .. }
            | Error::NotEncrypted { path, .. }
            | Error::KeyRequired { path, .. }
            | Error::Rotated { path, .. } => path,
        }
    }

    /// True for the errors the `recover_corrupt` option acts on
    /// ([`Error::NotADatabase`], [`Error::Corrupt`] and [`Error::ForeignWal`]).
    ///
    /// ```
    /// # use keel_storage::Error;
    /// assert!(Error::NotADatabase { op: "open", path: "x".into() }.is_bad_file());
    /// ```
    pub fn is_bad_file(&self) -> bool {
        matches!(
            self,
            Error::NotADatabase { .. } | Error::Corrupt { .. } | Error::ForeignWal { .. }
        )
    }

    /// Classify an SQLite error into the typed variants.
    pub(crate) fn sqlite(op: &'static str, path: &Path, e: rusqlite::Error) -> Error {
        use rusqlite::ErrorCode as C;
        let path = path.to_path_buf();
        if let Some(code) = e.sqlite_error_code() {
            match code {
                C::NotADatabase => return Error::NotADatabase { op, path },
                C::DatabaseCorrupt => {
                    return Error::Corrupt {
                        op,
                        path,
                        detail: e.to_string(),
                    }
                }
                C::DatabaseBusy | C::DatabaseLocked => return Error::Locked { op, path },
                // keel interrupts SQLite only to suspend (see `Error::Suspended`).
                C::OperationInterrupted => return Error::Suspended { op, path },
                // A file SQLite could only open read-only (permissions, a read-only
                // mount) fails at its first write: that is the file being
                // unwritable, not a schema or SQL problem.
                C::CannotOpen | C::PermissionDenied | C::ReadOnly => {
                    return Error::Unreadable {
                        op,
                        path,
                        source: Arc::new(std::io::Error::other(e.to_string())),
                    }
                }
                C::SystemIoFailure => {
                    if let Some((kind, reason, err)) = take_last_sync_error() {
                        return Error::SyncFailed {
                            kind,
                            reason,
                            path,
                            source: Arc::new(err),
                        };
                    }
                }
                _ => {}
            }
        }
        Error::Sqlite {
            op,
            path,
            source: Arc::new(e),
        }
    }

    pub(crate) fn io(op: &'static str, path: &Path, e: std::io::Error) -> Error {
        use std::io::ErrorKind as K;
        let path = path.to_path_buf();
        let unreadable = matches!(
            e.kind(),
            K::PermissionDenied | K::NotFound | K::IsADirectory | K::NotADirectory
        ) || e.raw_os_error() == Some(libc::EISDIR);
        if unreadable {
            Error::Unreadable {
                op,
                path,
                source: Arc::new(e),
            }
        } else {
            Error::Io {
                op,
                path,
                source: Arc::new(e),
            }
        }
    }

    pub(crate) fn suspended(op: &'static str, path: &Path) -> Error {
        Error::Suspended {
            op,
            path: path.to_path_buf(),
        }
    }

    /// True for errors that say "not now, the same call can succeed later":
    /// [`Error::Suspended`] (after resume), [`Error::QueueFull`],
    /// [`Error::ReadersBusy`] and [`Error::Locked`] (another process held the lock
    /// past the busy timeout). Nothing of the failed call was committed.
    ///
    /// ```
    /// # use keel_storage::Error;
    /// assert!(Error::Suspended { op: "write", path: "a.db".into() }.is_retryable());
    /// assert!(!Error::Closed { op: "write", path: "a.db".into() }.is_retryable());
    /// ```
    pub fn is_retryable(&self) -> bool {
        matches!(
            self,
            Error::Suspended { .. }
                | Error::QueueFull { .. }
                | Error::ReadersBusy { .. }
                | Error::Locked { .. }
        )
    }

    pub(crate) fn closed(op: &'static str, path: &Path) -> Error {
        Error::Closed {
            op,
            path: path.to_path_buf(),
        }
    }

    pub(crate) fn panicked(
        op: &'static str,
        path: &Path,
        payload: Box<dyn std::any::Any + Send>,
    ) -> Error {
        let message = if let Some(s) = payload.downcast_ref::<&str>() {
            (*s).to_string()
        } else if let Some(s) = payload.downcast_ref::<String>() {
            s.clone()
        } else {
            "non-string panic payload".to_string()
        };
        Error::Panicked {
            op,
            path: path.to_path_buf(),
            message,
        }
    }
}

thread_local! {
    /// The database file keel's code on this thread is currently working on; lets
    /// `From<rusqlite::Error>` (used by `?` in user closures) name the file.
    static CURRENT_PATH: RefCell<Option<PathBuf>> = const { RefCell::new(None) };
}

/// Sets the thread's "current database file" for the lifetime of the guard.
pub(crate) struct PathScope(Option<PathBuf>);

impl PathScope {
    pub(crate) fn enter(path: &Path) -> PathScope {
        PathScope(CURRENT_PATH.with(|c| c.replace(Some(path.to_path_buf()))))
    }
}

impl Drop for PathScope {
    fn drop(&mut self) {
        let prev = self.0.take();
        CURRENT_PATH.with(|c| *c.borrow_mut() = prev);
    }
}

/// `?` on a `rusqlite` call inside a keel closure: the error is classified
/// (corrupt, locked, …) and names the store's file (known from the thread keel runs the
/// closure on) with the operation `"statement"`.
impl From<rusqlite::Error> for Error {
    fn from(e: rusqlite::Error) -> Self {
        let path = CURRENT_PATH
            .with(|c| c.borrow().clone())
            .unwrap_or_default();
        Error::sqlite("statement", &path, e)
    }
}
