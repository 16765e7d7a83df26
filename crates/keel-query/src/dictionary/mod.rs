//! The dictionary: a persistent key-value store for settings and small state, in
//! the same file and under the same guarantees as the objects.
//!
//! ## The model
//!
//! [`Database::dictionary`](crate::db::database::Database::dictionary) gives a [`Dictionary`](crate::Dictionary): string
//! keys, typed values (`bool`, every integer type, `f32`/`f64`, strings, bytes, keel
//! objects, serde values with feature `serde`). It behaves like `UserDefaults`:
//!
//! * **Reads come from memory.** A sharded in-memory cache answers every read of a
//!   key it holds without touching the disk; a key it does not hold is read from the
//!   database once (through the reader pool) and kept. The cache is bounded
//!   ([`Dictionary::set_cache_limit`](crate::Dictionary::set_cache_limit), default 16 MiB); it drops clean entries, never
//!   one whose value is not on disk yet.
//! * **Sets return at once.** A set updates the cache — every thread's next read sees
//!   it — and leaves the value for the writer thread, which persists it in the
//!   background. Pending sets are coalesced: the writer takes all of them at once,
//!   keeping only the latest value per key, so 40,000 sets become a handful of
//!   group commits and updating one key 40,000 times writes it a few times.
//! * **[`Dictionary::sync`](crate::Dictionary::sync)** returns a future that resolves once everything set
//!   before the call is committed.
//! * **Transactions.** [`Txn::dictionary`](crate::txn::transaction::Txn::dictionary) reads and writes
//!   the dictionary inside a [`Database::write`](crate::db::database::Database::write) closure:
//!   those changes commit or roll back together with the closure's objects.
//! * **Subscriptions.** [`Dictionary::subscribe`](crate::Dictionary::subscribe) (a `Stream`) and
//!   [`Dictionary::subscribe_with`](crate::Dictionary::subscribe_with) (a callback) deliver a key's current value,
//!   then each update and removal.
//!
//! ## Guarantees, in plain words
//!
//! * **Order.** For every key, the value on disk is the value of the last set in
//!   real time — across threads, `remove`, `remove_all` and transactions (a
//!   transaction's dictionary writes take their place when the closure makes them).
//!   After a clean close and reopen every key holds exactly what a read returned
//!   before the close.
//! * **After `sync().await` returns `Ok`**, everything set before the call is
//!   committed under the store's commit sync policy. With the default (`Full`) it
//!   survives an app crash, an OS crash and a power loss.
//! * **Set but not synced yet**: an *app crash* loses sets the writer has not
//!   committed yet — usually the last few milliseconds, since the writer starts on
//!   the first pending set at once. An *OS crash or power loss* loses those too,
//!   and under a commit policy weaker than `Full` also recent commits (see
//!   `docs/durability.md`). What survives is always a state some moment of the app
//!   had: an older value, never a mix and never garbage. A clean
//!   [`Database::close`](crate::db::database::Database::close) persists everything.
//! * **Types.** A value read as a different type is a
//!   [`Error::DictionaryTypeMismatch`](crate::Error::DictionaryTypeMismatch) (or the default with [`Dictionary::get_or`](crate::Dictionary::get_or)),
//!   never a reinterpretation: integers convert between widths only when the value
//!   fits, objects only decode as the collection they were stored as.
//! * **Failures.** If a background commit fails (disk full, I/O error) the values
//!   stay pending in memory — reads keep seeing them — and are retried by the next
//!   set, `sync` or close; `sync` reports the error. If the close cannot persist them
//!   either (it tries twice), it returns [`Error::DictionaryNotPersisted`](crate::Error::DictionaryNotPersisted) naming the
//!   keys: a value is never lost without the caller being told.
//!
//! ## Storage
//!
//! ```sql
//! CREATE TABLE keel_dict(key TEXT PRIMARY KEY, kind INTEGER NOT NULL, type TEXT, value) WITHOUT ROWID;
//! ```
//!
//! `kind` is the [`DictKind`] code, `type` the collection of an object value, and
//! `value` the value in its natural SQLite type (INTEGER, REAL, TEXT or BLOB), so the
//! table is readable with any SQLite tool. `WITHOUT ROWID`: one B-tree keyed by the
//! key, no separate index.
//!
//! ```
//! use keel_query::{Database, StoreOptions};
//! use keel_example_blog::blog::Post;
//! # let dir = tempfile::tempdir().unwrap();
//! let db = Database::open_for::<Post>(dir.path().join("app.db"), StoreOptions::default())?;
//! let settings = db.dictionary();
//! settings.set("launches", 1u32)?;
//! settings.set("username", "ada")?;
//! assert_eq!(settings.get::<u32>("launches")?, Some(1));
//! assert_eq!(settings.get_or("volume", 0.5f64), 0.5);
//! futures::executor::block_on(settings.sync())?; // durable from here on
//! # Ok::<(), keel_query::Error>(())
//! ```

pub(crate) mod cache;
pub(crate) mod shared;
pub(crate) mod staged;
pub(crate) mod subscribe;
pub(crate) mod value;

pub use subscribe::{DictStream, DictSubscription};
pub use value::{DictKind, DictValue, FromDictValue, ToDictValue};
