//! Exit statuses and the error type every command returns.

use std::path::Path;

use keel_storage::rusqlite;

/// Everything went as asked; the file is healthy (for `check`), the schemas are
/// compatible (for `schema check`).
pub const OK: u8 = 0;
/// The command ran and found problems: objects that do not verify (`check`, `dump`),
/// an incompatible schema change (`schema check`), a vacuum that cannot run.
pub const PROBLEMS: u8 = 1;
/// Usage or I/O error: bad arguments, a missing or unreadable file.
pub const USAGE_OR_IO: u8 = 2;
/// The file is not an SQLite database, or it is corrupt.
pub const CORRUPT: u8 = 3;
/// The schema does not parse, or does not fit the database.
pub const WRONG_SCHEMA: u8 = 4;
/// Another process holds a lock on the database (or kept a checkpoint from finishing).
pub const LOCKED: u8 = 5;
/// The key does not fit the file: a wrong key (or header layout), a key given for
/// a plaintext file, a key file that holds no key.
pub const WRONG_KEY: u8 = 6;

/// The text `keel --help` ends with.
pub const HELP: &str = "\
Exit status:
  0  ok (file healthy, schemas compatible)
  1  the command ran and found problems (objects that do not verify, an
     incompatible schema change, a vacuum that cannot run)
  2  usage or I/O error (bad arguments, missing or unreadable file)
  3  not a database, or a corrupt database
  4  wrong schema (does not parse, or does not fit the database)
  5  locked: another process holds the database, or kept a checkpoint from
     finishing
  6  wrong key: the key does not decrypt the file, a key was given for a
     plaintext file, or the key file holds no key

What each command may write: `info`, `dump` and `check` open the file read-only
and leave no `-wal` or `-shm` behind (with a `-wal` present, SQLite may create
the `-shm` index file next to it). `checkpoint`,
`vacuum` and `explain-open` open it like an app does: see their --help.";

/// A failed command: the exit status and the message for the user.
#[derive(Debug)]
pub struct Failure {
    /// Exit status (one of the constants above).
    pub code: u8,
    /// What went wrong, naming the file.
    pub message: String,
}

impl Failure {
    pub fn new(code: u8, message: impl Into<String>) -> Failure {
        Failure {
            code,
            message: message.into(),
        }
    }

    /// The kind of failure, for `--json` output.
    pub fn kind(&self) -> &'static str {
        match self.code {
            PROBLEMS => "problems",
            USAGE_OR_IO => "io",
            CORRUPT => "corrupt",
            WRONG_SCHEMA => "wrong_schema",
            LOCKED => "locked",
            WRONG_KEY => "wrong_key",
            _ => "error",
        }
    }

    /// A storage-kernel error, classified.
    pub fn storage(e: keel_storage::Error) -> Failure {
        use keel_storage::Error as E;
        let code = match &e {
            E::NotADatabase { .. } | E::Corrupt { .. } | E::ForeignWal { .. } => CORRUPT,
            E::ForeignFile { .. } => WRONG_SCHEMA,
            E::Locked { .. } => LOCKED,
            E::WrongKey { .. } | E::NotEncrypted { .. } | E::KeyLost { .. } => WRONG_KEY,
            E::Schema { .. } => WRONG_SCHEMA,
            E::Sqlite { source, .. } => sqlite_code(source),
            _ => USAGE_OR_IO,
        };
        Failure::new(code, e.to_string())
    }

    /// An object-store error, classified.
    pub fn query(e: keel_query::Error) -> Failure {
        match e {
            keel_query::Error::Storage(e) => Failure::storage(e),
            e @ keel_query::Error::Decode { .. } => Failure::new(CORRUPT, e.to_string()),
            e @ keel_query::Error::Schema { .. } => Failure::new(WRONG_SCHEMA, e.to_string()),
            e => Failure::new(USAGE_OR_IO, e.to_string()),
        }
    }

    /// An SQLite error from a direct (read-only) connection, with what was being done.
    pub fn sqlite(op: &str, path: &Path, e: rusqlite::Error) -> Failure {
        let code = sqlite_code(&e);
        let what = match code {
            CORRUPT => format!("{} is corrupt", path.display()),
            LOCKED => format!("{} is locked by another process", path.display()),
            _ => format!("SQLite error on {}", path.display()),
        };
        Failure::new(code, format!("{op}: {what}: {e}"))
    }
}

/// The exit status an SQLite error deserves.
pub fn sqlite_code(e: &rusqlite::Error) -> u8 {
    use rusqlite::ErrorCode as C;
    match e.sqlite_error_code() {
        Some(C::NotADatabase | C::DatabaseCorrupt) => CORRUPT,
        Some(C::DatabaseBusy | C::DatabaseLocked) => LOCKED,
        _ => USAGE_OR_IO,
    }
}

pub type Result<T> = std::result::Result<T, Failure>;
