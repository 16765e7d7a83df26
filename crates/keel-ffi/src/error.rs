//! [`KeelError`]: every error that crosses the FFI, as typed exceptions.

use keel_query::Error as QErr;
use keel_storage::Error as SErr;

/// Everything that can go wrong in a keel call made from Swift, Kotlin or Python.
///
/// Each variant arrives as its own exception type (`KeelError.InvalidObject` in
/// Python and Swift, `KeelException.InvalidObject` in Kotlin) whose message says
/// what was being done, to which collection or file, and why. Bad input never
/// panics and never takes the process down: it is one of these.
///
/// ```
/// use keel_ffi::KeelError;
/// let e = KeelError::UnknownCollection { message: "get: no collection named \"Nope\"".into() };
/// assert!(e.to_string().contains("Nope"));
/// ```
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error, uniffi::Error)]
#[uniffi(flat_error)]
pub enum KeelError {
    /// The schema text does not parse, or cannot replace the schema stored in the
    /// file (an incompatible evolution).
    #[error("{message}")]
    InvalidSchema {
        /// What is wrong, with line and column for parse errors.
        message: String,
    },
    /// Bytes handed to a write are not a valid FlatBuffers object of the collection
    /// (or JSON handed to `encode_json` does not fit the table).
    #[error("{message}")]
    InvalidObject {
        /// What is wrong with the bytes.
        message: String,
    },
    /// The collection is not part of the database's schema.
    #[error("{message}")]
    UnknownCollection {
        /// Which name was asked for.
        message: String,
    },
    /// A query names a field that does not exist in the collection's table.
    #[error("{message}")]
    UnknownField {
        /// Which path and why.
        message: String,
    },
    /// A key or filter value has the wrong type for its field (or a key has the
    /// wrong number of parts).
    #[error("{message}")]
    TypeMismatch {
        /// What was expected and what was given.
        message: String,
    },
    /// An argument is malformed in a way not covered above (bad JSON text, …).
    #[error("{message}")]
    InvalidArgument {
        /// What is wrong.
        message: String,
    },
    /// An insert hit an object with the same primary key or unique value.
    #[error("{message}")]
    AlreadyExists {
        /// The collection and constraint.
        message: String,
    },
    /// An update named a primary key that is not stored.
    #[error("{message}")]
    NotFound {
        /// The collection and key.
        message: String,
    },
    /// The database was closed before or while the call ran.
    #[error("{message}")]
    Closed {
        /// What was attempted.
        message: String,
    },
    /// The file is not a keel/SQLite database or is damaged (or a stored object no
    /// longer decodes). `OpenOptions.recover_corrupt` moves such a file aside.
    #[error("{message}")]
    Corrupt {
        /// Which file and what is wrong.
        message: String,
    },
    /// The database is encrypted and its key cannot be read now: the key provider
    /// threw `KeyError.Unavailable` (the device is locked, the key store is not
    /// ready). Retry after the unlock, and never make a new key in its place. The
    /// files are unchanged; for a new database none was created.
    #[error("{message}")]
    KeyUnavailable {
        /// Which file, and what the provider said.
        message: String,
    },
    /// The database exists but its key does not (the provider threw
    /// `KeyError.Lost`, or the key file is missing or damaged): a backup was
    /// restored without its key. The data cannot be read, and keel never creates a
    /// fresh, empty database over it. The files are unchanged.
    #[error("{message}")]
    KeyLost {
        /// Which file, and what the provider said.
        message: String,
    },
    /// The file is encrypted but does not decrypt with the key given (another key,
    /// or the other `plaintext_header` setting). The files are unchanged.
    #[error("{message}")]
    WrongKey {
        /// Which file.
        message: String,
    },
    /// A key was given but the file is a plaintext SQLite database; it is left as
    /// it is. Open it without `encryption`.
    #[error("{message}")]
    NotEncrypted {
        /// Which file.
        message: String,
    },
    /// The file is encrypted but was opened without `encryption`. The files are
    /// unchanged; `recoverCorrupt` leaves the file alone.
    #[error("{message}")]
    KeyRequired {
        /// Which file.
        message: String,
    },
    /// Another process holds a lock keel needed.
    #[error("{message}")]
    Locked {
        /// Which file.
        message: String,
    },
    /// keel is overloaded and did not run the call: the write queue is full (the app
    /// writes faster than the disk commits) or every read connection stayed busy.
    /// Nothing changed; retry later.
    #[error("{message}")]
    Busy {
        /// Which limit was reached.
        message: String,
    },
    /// The database is suspended (`suspend`, or `on_background(and_suspend: true)`):
    /// a synchronous read while suspended (those never wait: the resume would come
    /// from the same thread), any call under `suspend(fail_fast: true)`, or work that
    /// was running when the suspend interrupted it. Nothing of it was committed;
    /// retry after `resume`.
    #[error("{message}")]
    Suspended {
        /// What was attempted.
        message: String,
    },
    /// An I/O error: permissions, a full disk, a failed sync.
    #[error("{message}")]
    Io {
        /// The operation, file and OS error.
        message: String,
    },
    /// The operation was cancelled (e.g. the open's future was dropped).
    #[error("{message}")]
    Cancelled {
        /// What was cancelled.
        message: String,
    },
    /// The file is an SQLite database of another application: keel refused it and
    /// wrote nothing. Set `OpenOptions.adopt_foreign` to take it over.
    #[error("{message}")]
    ForeignFile {
        /// Which file, and whose it looks like.
        message: String,
    },
    /// A migration failed (its callback threw, or it produced an object that does not
    /// fit the new schema): the open failed and the file is unchanged.
    #[error("{message}")]
    MigrationFailed {
        /// Which migration and why.
        message: String,
    },
    /// Anything else (an SQLite error of the object layer, a caught panic). Please
    /// report these.
    #[error("{message}")]
    Internal {
        /// The details.
        message: String,
    },
}

/// What a foreign callback (progress listener, subscription) may throw. keel logs
/// it and goes on: a failing callback never disturbs the database. Any exception
/// (not only this type) is caught the same way.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error, uniffi::Error)]
pub enum CallbackError {
    /// The callback failed.
    #[error("callback failed: {reason}")]
    Failed {
        /// What went wrong. (Not `message`: Kotlin exceptions have one already.)
        reason: String,
    },
}

impl From<uniffi::UnexpectedUniFFICallbackError> for CallbackError {
    fn from(e: uniffi::UnexpectedUniFFICallbackError) -> Self {
        CallbackError::Failed { reason: e.reason }
    }
}

impl KeelError {
    pub(crate) fn invalid_argument(message: impl Into<String>) -> KeelError {
        KeelError::InvalidArgument {
            message: message.into(),
        }
    }
    pub(crate) fn internal(message: impl Into<String>) -> KeelError {
        KeelError::Internal {
            message: message.into(),
        }
    }
}

impl From<SErr> for KeelError {
    fn from(e: SErr) -> Self {
        let message = e.to_string();
        match e {
            SErr::NotADatabase { .. } | SErr::Corrupt { .. } | SErr::ForeignWal { .. } => {
                KeelError::Corrupt { message }
            }
            SErr::ForeignFile { .. } => KeelError::ForeignFile { message },
            SErr::KeyUnavailable { .. } => KeelError::KeyUnavailable { message },
            SErr::KeyLost { .. } => KeelError::KeyLost { message },
            SErr::WrongKey { .. } => KeelError::WrongKey { message },
            // The file is under another key now than the one this handle has.
            SErr::Rotated { .. } => KeelError::WrongKey { message },
            SErr::NotEncrypted { .. } => KeelError::NotEncrypted { message },
            SErr::KeyRequired { .. } => KeelError::KeyRequired { message },
            SErr::Locked { .. } => KeelError::Locked { message },
            SErr::Unreadable { .. } | SErr::Io { .. } | SErr::SyncFailed { .. } => {
                KeelError::Io { message }
            }
            // Closed while the open barrier still ran: the write never committed.
            SErr::Closed { .. } | SErr::BarrierPending { .. } => KeelError::Closed { message },
            SErr::Cancelled { .. } => KeelError::Cancelled { message },
            SErr::Schema { .. } => KeelError::InvalidSchema { message },
            SErr::QueueFull { .. } | SErr::ReadersBusy { .. } => KeelError::Busy { message },
            SErr::Suspended { .. } => KeelError::Suspended { message },
            // Some work did not stop in time: the locks are not all released yet.
            SErr::SuspendTimeout { .. } => KeelError::Busy { message },
            _ => KeelError::Internal { message },
        }
    }
}

impl From<QErr> for KeelError {
    fn from(e: QErr) -> Self {
        let message = e.to_string();
        match e {
            QErr::Storage(s) => s.into(),
            QErr::AlreadyExists { .. } => KeelError::AlreadyExists { message },
            QErr::NotFound { .. } => KeelError::NotFound { message },
            QErr::Closed { .. } => KeelError::Closed { message },
            QErr::KeyUnavailable { .. } => KeelError::KeyUnavailable { message },
            QErr::KeyLost { .. } => KeelError::KeyLost { message },
            QErr::WrongKey { .. } => KeelError::WrongKey { message },
            QErr::NotEncrypted { .. } => KeelError::NotEncrypted { message },
            QErr::KeyRequired { .. } => KeelError::KeyRequired { message },
            QErr::Decode { .. } => KeelError::Corrupt { message },
            QErr::InvalidObject { .. } => KeelError::InvalidObject { message },
            QErr::UnknownCollection { .. } => KeelError::UnknownCollection { message },
            QErr::UnknownField { .. } => KeelError::UnknownField { message },
            QErr::InvalidSearch { .. } => KeelError::InvalidArgument { message },
            QErr::InvalidVector { .. } => KeelError::InvalidArgument { message },
            QErr::TypeMismatch { .. } => KeelError::TypeMismatch { message },
            QErr::Schema { .. } | QErr::SchemaChanged { .. } => {
                KeelError::InvalidSchema { message }
            }
            QErr::DictionaryTypeMismatch { .. } => KeelError::TypeMismatch { message },
            QErr::DictionaryEncode { .. } => KeelError::InvalidArgument { message },
            QErr::Unsupported { .. } => KeelError::InvalidArgument { message },
            QErr::UniqueIndexViolated { .. } => KeelError::AlreadyExists { message },
            QErr::DictionaryNotPersisted { .. } => KeelError::Io { message },
            QErr::MigrationFailed { .. } => KeelError::MigrationFailed { message },
            // A write refused by a reference rule: the request's input names
            // objects that must (not) exist; the message names them.
            QErr::Restricted { .. } | QErr::DanglingReference { .. } => {
                KeelError::InvalidArgument { message }
            }
            _ => KeelError::Internal { message },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn maps_query_errors_to_typed_variants() {
        let e: KeelError = QErr::UnknownCollection {
            op: "get",
            collection: "Nope".into(),
        }
        .into();
        assert!(matches!(e, KeelError::UnknownCollection { .. }));
        assert_eq!(
            e.to_string(),
            "get: no collection named \"Nope\" in the schema"
        );
        let e: KeelError = QErr::Closed {
            op: "get",
            path: "/tmp/a.db".into(),
        }
        .into();
        assert!(matches!(e, KeelError::Closed { .. }));
        let e: KeelError = SErr::Locked {
            op: "open",
            path: "/tmp/a.db".into(),
        }
        .into();
        assert!(matches!(e, KeelError::Locked { .. }));
    }

    /// Each key error keeps its own case, from the kernel and from the object
    /// layer alike; none becomes `Corrupt` or `Internal`.
    #[test]
    fn key_errors_keep_their_own_cases() {
        let path = std::path::PathBuf::from("/tmp/k.db");
        let kernel = [
            SErr::KeyUnavailable {
                op: "open",
                path: path.clone(),
                detail: "locked".into(),
            },
            SErr::KeyLost {
                op: "open",
                path: path.clone(),
                detail: "no item".into(),
            },
            SErr::WrongKey {
                op: "open",
                path: path.clone(),
            },
            SErr::NotEncrypted {
                op: "open",
                path: path.clone(),
            },
            SErr::KeyRequired {
                op: "open",
                path: path.clone(),
            },
        ];
        let mut cases = Vec::new();
        for s in kernel {
            let direct = KeelError::from(s.clone());
            let through_query = KeelError::from(QErr::from(s));
            assert_eq!(direct, through_query);
            let expected = match &direct {
                KeelError::KeyUnavailable { .. } => "KeyUnavailable",
                KeelError::KeyLost { .. } => "KeyLost",
                KeelError::WrongKey { .. } => "WrongKey",
                KeelError::NotEncrypted { .. } => "NotEncrypted",
                KeelError::KeyRequired { .. } => "KeyRequired",
                other => panic!("a key error became {other:?}"),
            };
            assert!(
                !direct.to_string().contains("not a database"),
                "{expected}: {direct}"
            );
            cases.push(expected);
        }
        assert_eq!(
            cases,
            [
                "KeyUnavailable",
                "KeyLost",
                "WrongKey",
                "NotEncrypted",
                "KeyRequired"
            ]
        );
    }
}
