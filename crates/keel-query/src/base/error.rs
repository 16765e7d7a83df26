//! [`Error`]: everything keel-query can report.

use std::path::PathBuf;

use keel_schema::{DecodeError, Value};

/// Result alias for keel-query.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// What went wrong, with what was being done and to which collection or file.
///
/// ```
/// use keel_query::Error;
/// let e = Error::UnknownCollection { op: "fetch", collection: "blog.Nope".into() };
/// assert_eq!(e.to_string(), "fetch: no collection named \"blog.Nope\" in the schema");
/// ```
#[derive(Debug, Clone, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The storage kernel failed (I/O, SQLite, sync, a closed store…).
    #[error(transparent)]
    Storage(keel_storage::Error),
    /// The database is encrypted and its key cannot be read now (the device is
    /// locked, the key store is not ready): retry later, and never make a new key
    /// in its place. The files are unchanged; for a new database none was created.
    #[error("{op}: the key of {} is unavailable now (retry later): {detail}", path.display())]
    KeyUnavailable {
        /// What was being done.
        op: &'static str,
        /// The database file.
        path: PathBuf,
        /// What the key provider said.
        detail: String,
    },
    /// The database exists but its key does not (a backup restored without its
    /// key, a damaged key store): its data cannot be read, and keel never creates
    /// a fresh, empty database over it. The files are unchanged.
    #[error("{op}: the key of {} is lost; its data cannot be read: {detail}", path.display())]
    KeyLost {
        /// What was being done.
        op: &'static str,
        /// The database file.
        path: PathBuf,
        /// What the key provider said.
        detail: String,
    },
    /// The file is encrypted but does not decrypt with the key given (another
    /// key, or the other plaintext-header setting). The files are unchanged.
    #[error("{op}: {} does not decrypt with the key given", path.display())]
    WrongKey {
        /// What was being done.
        op: &'static str,
        /// The database file.
        path: PathBuf,
    },
    /// A key was given but the file is a plaintext SQLite database. It is left as
    /// it is: open it without a key (or encrypt it with a migration).
    #[error("{op}: {} is not encrypted, but a key was given", path.display())]
    NotEncrypted {
        /// What was being done.
        op: &'static str,
        /// The database file.
        path: PathBuf,
    },
    /// The file is encrypted but was opened without a key: open it with
    /// `StoreOptions::encryption`. The files are unchanged, and `recover_corrupt`
    /// leaves the file alone.
    #[error("{op}: {} is encrypted; open it with its key", path.display())]
    KeyRequired {
        /// What was being done.
        op: &'static str,
        /// The database file.
        path: PathBuf,
    },
    /// An object with the same primary key or unique value already exists. Only
    /// the request that hit it failed; the transaction can continue (Dflat semantics).
    #[error("{op} in {collection}: an object with the same primary key or unique value already exists ({detail})")]
    AlreadyExists {
        /// What was being done (`insert`, `update`, …).
        op: &'static str,
        /// The collection.
        collection: String,
        /// Which constraint (SQLite's message).
        detail: String,
    },
    /// `update` of an object whose primary key is not stored.
    #[error("{op} in {collection}: no object with key {key:?}")]
    NotFound {
        /// What was being done.
        op: &'static str,
        /// The collection.
        collection: String,
        /// The primary key that was looked up.
        key: Vec<Value>,
    },
    /// The database (or the write) was closed before or while the operation ran.
    #[error("{op}: database {} is closed", path.display())]
    Closed {
        /// What was being attempted.
        op: &'static str,
        /// The database file.
        path: PathBuf,
    },
    /// The call cannot be made from where it was made — e.g. an `_async` fetch on a
    /// query bound to a snapshot or transaction, whose connection is not free to move
    /// to another thread. The message says what to call instead.
    #[error("{op} is not supported on database {}: {hint}", path.display())]
    Unsupported {
        /// What was being attempted.
        op: &'static str,
        /// What to do instead.
        hint: &'static str,
        /// The database file.
        path: PathBuf,
    },
    /// The write closure called [`Txn::abort`](crate::txn::transaction::Txn::abort): its changes were
    /// rolled back and nothing of it was committed.
    #[error("write on {} aborted by the closure; its changes were rolled back", path.display())]
    Aborted {
        /// The database file.
        path: PathBuf,
    },
    /// A stored object could not be decoded: the row's bytes are not a valid
    /// FlatBuffers object of the collection's table.
    #[error("{op} in {collection}: row {rowid} is not a valid object: {source}")]
    Decode {
        /// What was being done.
        op: &'static str,
        /// The collection.
        collection: String,
        /// The SQLite rowid of the damaged row.
        rowid: i64,
        /// What is wrong with the bytes.
        #[source]
        source: DecodeError,
    },
    /// Bytes handed to a write are not a valid FlatBuffers object of the collection.
    #[error("{op} in {collection}: the bytes are not a valid object: {source}")]
    InvalidObject {
        /// What was being done.
        op: &'static str,
        /// The collection.
        collection: String,
        /// What is wrong with the bytes.
        #[source]
        source: DecodeError,
    },
    /// The collection is not part of the database's schema.
    #[error("{op}: no collection named {collection:?} in the schema")]
    UnknownCollection {
        /// What was being done.
        op: &'static str,
        /// The name asked for.
        collection: String,
    },
    /// A query names a field path that does not exist in the collection's table.
    #[error("{op} in {collection}: {message}")]
    UnknownField {
        /// What was being done.
        op: &'static str,
        /// The collection.
        collection: String,
        /// Which path and why.
        message: String,
    },
    /// A key value has the wrong type or number of parts, or an object lacks its key.
    #[error("{op} in {collection}: {message}")]
    TypeMismatch {
        /// What was being done.
        op: &'static str,
        /// The collection.
        collection: String,
        /// What was expected and what was given.
        message: String,
    },
    /// A vector given for a `(vector: N)` field — in an object written, or as a
    /// nearest query — has another number of dimensions than `N`, or holds NaN
    /// or infinity. Nothing was stored.
    #[error("{op} in {collection}: vector field {field:?}: {problem}")]
    InvalidVector {
        /// What was being done.
        op: &'static str,
        /// The collection.
        collection: String,
        /// The vector field.
        field: String,
        /// What is wrong: expected and got dimensions, or the non-finite element.
        problem: keel_schema::VectorProblem,
    },
    /// A full-text search query is malformed (an unclosed phrase or group, an
    /// operator without operands, no searchable word), or asks for relevance
    /// order without a full-text filter to rank by. Never an SQL error text.
    #[error("search query {query:?}: {message} (at byte {offset})")]
    InvalidSearch {
        /// The query text as given.
        query: String,
        /// Byte offset in `query` where the problem is.
        offset: usize,
        /// What is wrong.
        message: String,
    },
    /// The stored schema cannot be evolved into the given one, or the schema
    /// metadata of the file is damaged.
    #[error("open {}: schema: {message}", path.display())]
    Schema {
        /// The database file.
        path: PathBuf,
        /// What is incompatible.
        message: String,
    },
    /// Another process changed the file's layout since this database opened it
    /// (a newer build of the app added or dropped an index column, or changed what
    /// one holds): this handle's writes would leave a column wrong, so the write is
    /// refused and nothing of it is committed. Open the database again — an older
    /// schema then writes the columns the newer one declared (see `docs/schema.md`).
    #[error("{op} in {collection} on {}: the file's layout was changed by another process since this database opened it ({message}); open it again", path.display())]
    SchemaChanged {
        /// What was being done.
        op: &'static str,
        /// The collection whose table changed.
        collection: String,
        /// The database file.
        path: PathBuf,
        /// What changed.
        message: String,
    },
    /// An SQLite statement of the object layer failed.
    #[error("{op} in {collection}: SQLite error: {source}")]
    Sqlite {
        /// What was being done.
        op: &'static str,
        /// The collection (or `keel` for metadata).
        collection: String,
        /// SQLite's error.
        #[source]
        source: std::sync::Arc<rusqlite::Error>,
    },
    /// A dictionary value was read as a type it is not stored as, or does not fit
    /// (an integer out of range, an object of another collection, JSON of another
    /// shape). Nothing was reinterpreted.
    #[error("dictionary key {key:?}: stored as {stored}, cannot be read as {requested}")]
    DictionaryTypeMismatch {
        /// The key.
        key: String,
        /// What is stored (`int`, `string`, `object blog.Post`, …).
        stored: String,
        /// The type asked for (`u8`, `String`, `blog.Post`, …).
        requested: String,
    },
    /// A unique index new to the database could not be built because stored
    /// objects already share a value: the open failed and nothing changed. Remove
    /// or change one of the objects (e.g. with a migration) or drop `(unique)`.
    #[error("open {}: unique index {index} of {collection} cannot be built: objects (rowids {} and {}) share the value {value}", path.display(), rowids.0, rowids.1)]
    UniqueIndexViolated {
        /// The database file.
        path: PathBuf,
        /// The collection.
        collection: String,
        /// The index (`collection#field-id`).
        index: String,
        /// A value two or more objects share.
        value: Value,
        /// Two of the objects holding it.
        rowids: (i64, i64),
    },
    /// [`Database::close`](crate::db::database::Database::close) could not persist dictionary
    /// values set before it (a full disk, an I/O error): they are lost. `keys` names
    /// them (up to 100; `count` is the total). Everything else closed normally.
    #[error("close {}: {count} dictionary value(s) could not be persisted and are lost ({}): {source}", path.display(), keys.join(", "))]
    DictionaryNotPersisted {
        /// The database file.
        path: PathBuf,
        /// Keys whose latest set or remove did not reach the disk (at most 100).
        keys: Vec<String>,
        /// How many keys in all (plus one for a pending `remove_all`).
        count: usize,
        /// Why the last attempt failed.
        #[source]
        source: Box<Error>,
    },
    /// A migration failed (its closure returned an error, or a step of it did): the
    /// open failed and the database is unchanged — every migration of the open runs
    /// in one transaction with the schema phase.
    #[error("open {}: migration {migration:?} failed: {source}", path.display())]
    MigrationFailed {
        /// The database file.
        path: PathBuf,
        /// The migration's name.
        migration: String,
        /// What went wrong.
        #[source]
        source: Box<Error>,
    },
    /// What a migration returns when it fails for its own reasons (an old object
    /// it cannot convert, an app callback that threw); the open reports it inside
    /// [`Error::MigrationFailed`].
    ///
    /// ```
    /// use keel_query::Error;
    /// let e = Error::Migration { message: "note n7 has no id".into() };
    /// assert_eq!(e.to_string(), "migration: note n7 has no id");
    /// ```
    #[error("migration: {message}")]
    Migration {
        /// Why.
        message: String,
    },
    /// A value could not be encoded for the dictionary (a serde value whose
    /// serialization failed). Nothing was stored.
    #[error("dictionary key {key:?}: cannot encode the value: {message}")]
    DictionaryEncode {
        /// The key.
        key: String,
        /// Why.
        message: String,
    },
    /// A delete refused by an `on_delete: "restrict"` reference: other objects
    /// (not deleted in the same cascade) still refer to the object. Nothing of
    /// the delete happened; the transaction can continue.
    #[error(
        "delete in {collection}: object {key:?} is still referred to by {}",
        fmt_referrers(referrers)
    )]
    Restricted {
        /// The collection of the object whose delete was refused.
        collection: String,
        /// Its primary key.
        key: Vec<Value>,
        /// The referring objects: `(collection, reference field, primary key)`.
        referrers: Vec<(String, String, Vec<Value>)>,
    },
    /// A write naming an object that does not exist in a reference field
    /// declared `dangling: false`. Nothing of the write happened.
    #[error("{op} in {collection}: field {field:?} refers to {key:?} in {target}, which does not exist (the reference is declared dangling: false)")]
    DanglingReference {
        /// What was being done (`insert`, `update`, …).
        op: &'static str,
        /// The collection written to.
        collection: String,
        /// The reference field.
        field: String,
        /// The referenced collection.
        target: String,
        /// The missing primary key.
        key: Vec<Value>,
    },
}

impl From<keel_storage::Error> for Error {
    /// The kernel's `Closed` becomes [`Error::Closed`], its `Schema` (raised by
    /// this crate's schema hook at open) [`Error::Schema`], and its five key
    /// errors the variants of the same names; everything else is wrapped.
    fn from(e: keel_storage::Error) -> Self {
        use keel_storage::Error as S;
        match e {
            S::Closed { op, path } => Error::Closed { op, path },
            S::Schema { path, message } => Error::Schema { path, message },
            S::KeyUnavailable { op, path, detail } => Error::KeyUnavailable { op, path, detail },
            S::KeyLost { op, path, detail } => Error::KeyLost { op, path, detail },
            S::WrongKey { op, path } => Error::WrongKey { op, path },
            S::NotEncrypted { op, path } => Error::NotEncrypted { op, path },
            S::KeyRequired { op, path } => Error::KeyRequired { op, path },
            other => Error::Storage(other),
        }
    }
}

fn fmt_referrers(r: &[(String, String, Vec<Value>)]) -> String {
    const SHOWN: usize = 8;
    let mut out: Vec<String> = r
        .iter()
        .take(SHOWN)
        .map(|(c, f, k)| format!("{c} {k:?} (field {f:?})"))
        .collect();
    if r.len() > SHOWN {
        out.push(format!("and {} more", r.len() - SHOWN));
    }
    out.join(", ")
}

impl Error {
    /// True for errors that say "not now": the same call can succeed later and
    /// nothing of the failed one was committed — the database is suspended
    /// ([`Database::suspend`](crate::db::database::Database::suspend)), the writer queue or the
    /// reader pool is full, another process held the write lock past the busy
    /// timeout, or the key cannot be read yet ([`Error::KeyUnavailable`]: open
    /// again once the device is unlocked). See [`keel_storage::Error::is_retryable`].
    ///
    /// ```
    /// use keel_query::Error;
    /// let e = Error::from(keel_storage::Error::Suspended { op: "read", path: "a.db".into() });
    /// assert!(e.is_retryable());
    /// ```
    pub fn is_retryable(&self) -> bool {
        match self {
            Error::Storage(e) => e.is_retryable(),
            Error::KeyUnavailable { .. } => true,
            _ => false,
        }
    }

    /// [`Error::InvalidObject`]: bytes of `collection` that do not open as its
    /// table, found while doing `op`.
    pub(crate) fn invalid_object(op: &'static str, collection: &str, source: DecodeError) -> Error {
        Error::InvalidObject {
            op,
            collection: collection.to_owned(),
            source,
        }
    }

    pub(crate) fn sqlite(op: &'static str, collection: &str, e: rusqlite::Error) -> Error {
        if e.sqlite_error_code() == Some(rusqlite::ErrorCode::OperationInterrupted) {
            // A suspend interrupted the statement: the kernel's retryable
            // `Suspended` (it knows the file from the thread it runs on).
            return Error::Storage(keel_storage::Error::from(e));
        }
        if let rusqlite::Error::SqliteFailure(f, msg) = &e {
            if f.code == rusqlite::ErrorCode::ConstraintViolation
                && (f.extended_code == rusqlite::ffi::SQLITE_CONSTRAINT_UNIQUE
                    || f.extended_code == rusqlite::ffi::SQLITE_CONSTRAINT_PRIMARYKEY)
            {
                return Error::AlreadyExists {
                    op,
                    collection: collection.to_owned(),
                    detail: msg
                        .clone()
                        .unwrap_or_else(|| "UNIQUE constraint failed".into()),
                };
            }
        }
        Error::Sqlite {
            op,
            collection: collection.to_owned(),
            source: std::sync::Arc::new(e),
        }
    }

    /// True for [`Error::AlreadyExists`].
    ///
    /// ```
    /// # use keel_query::Error;
    /// let e = Error::AlreadyExists { op: "insert", collection: "blog.Post".into(), detail: String::new() };
    /// assert!(e.is_already_exists());
    /// ```
    pub fn is_already_exists(&self) -> bool {
        matches!(self, Error::AlreadyExists { .. })
    }

    /// True for [`Error::Closed`] and the storage kernel's `Closed`.
    ///
    /// ```
    /// # use keel_query::Error;
    /// let e = Error::Closed { op: "fetch", path: "/tmp/a.db".into() };
    /// assert!(e.is_closed());
    /// ```
    pub fn is_closed(&self) -> bool {
        matches!(
            self,
            Error::Closed { .. } | Error::Storage(keel_storage::Error::Closed { .. })
        )
    }
}
