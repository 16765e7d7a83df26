//! # keel-ffi
//!
//! keel's UniFFI bindings: the API Swift, Kotlin and Python apps call. It is the
//! *FFI front* of keel's one dynamic core (see `docs/architecture.md`): objects cross as
//! FlatBuffers bytes made by the app's own `flatc --swift/--kotlin` code, the
//! schema crosses as `.fbs` text at open, and queries are built from exported
//! [`Expr`] constructors. Same engine as the Rust front, no second implementation.
//!
//! ## The API
//!
//! * [`open_async`]`(path, schema_fbs, options, progress)` — returns at once (an
//!   `async` function in Swift, a `suspend fun` in Kotlin, a coroutine in Python);
//!   the open, including a slow WAL sync, runs on keel's threads. [`open_blocking`] blocks.
//! * [`Database`] — async [`write`](Database::write) of a batch of [`WriteOp`]s;
//!   sync and async [`get`](Database::get), [`query`](Database::query) (→ [`Query`]:
//!   `filter`, `order_by`, `limit`, `offset`, `all`, `first`, `count`),
//!   [`checkpoint`](Database::checkpoint), [`on_background`](Database::on_background),
//!   [`io_stats`](Database::io_stats), [`open_report`](Database::open_report),
//!   [`close`](Database::close).
//! * [`Database::write_txn`] — a write transaction whose body is foreign code (a
//!   [`WriteBody`]) run inside the transaction on keel's writer thread: its
//!   [`Txn`] reads what the transaction wrote so far (`get`, `all`,
//!   `first`, `count`), writes at once (`write`), and changes an object field-wise
//!   from two encodings (`change_diff`); a throw rolls back that body only.
//! * [`Query::all_packed`] / `all_packed_async` — [`Query::all`]'s objects in one
//!   buffer ([`PackedObjects`]): what Swift's typed fetch decodes from, without a
//!   `Data` per object.
//! * Subscriptions — [`Query::subscribe`] and [`Database::subscribe_object`] take a
//!   foreign listener ([`QueryListener`], [`ObjectListener`]) and return a
//!   [`Subscription`] with `cancel()`; query deliveries carry a row-level [`Diff`].
//! * The dictionary — [`Database::dictionary`] → [`Dictionary`]: typed
//!   `get`/`set`/`remove`/`keys`, `sync`, and `subscribe` (a [`DictionaryListener`]).
//! * Sync — [`Database::sync`] with a [`TokenProvider`] and a [`SyncListener`] →
//!   [`SyncHandle`] (`status`, `pause`, `resume`, `wait_uploaded`, `stop`):
//!   keel-relay's client (`docs/sync.md`).
//! * [`KeelError`] — typed errors; each variant is its own exception type.
//! * Encryption — `OpenOptions.encryption` ([`Encryption`]): the data key from the
//!   app's [`KeyProvider`] (Keychain, Android Keystore) or a key file
//!   ([`KeySource`]); the five key errors are `KeelError` cases of their own.
//! * [`SyncPolicy`] — per reason in [`OpenOptions`], including
//!   [`SyncPolicy::SimulatedLatency`] for demos and tests.
//!
//! ## Threads
//!
//! Async calls never block the thread that awaits them: the work runs on keel's
//! writer thread, open thread or a short-lived keel thread, and the foreign side is
//! woken when it is done (UniFFI's continuation callback; Python hops to its event
//! loop with `call_soon_threadsafe`). Foreign callbacks are called **on keel
//! threads**: progress on `keel-open`, subscription updates on the writer thread
//! (the first result on the subscribing thread), dictionary changes on the
//! dictionary's notifier thread. An exception a callback throws is caught, logged
//! and ignored, and no panic crosses into foreign code. The callback runtime is
//! `callbacks.rs`; where async calls run is `tasks.rs`.
//!
//! ## Bad input
//!
//! Nothing a caller passes can crash the process: schema text is parsed with
//! errors, object bytes are verified against the schema before they are stored,
//! key and filter values are checked against the field types, and unknown
//! collections or fields are typed errors.
//!
//! ```
//! use keel_ffi::{open_blocking, Expr, OpenOptions, Value, WriteOp};
//! # let dir = tempfile::tempdir().unwrap();
//! let fbs = "table Note { id: long (primary); text: string; } root_type Note;";
//! let db = open_blocking(dir.path().join("n.db").display().to_string(), fbs.into(), OpenOptions::default(), None)?;
//! let bytes = db.encode_json("Note".into(), r#"{"id": 1, "text": "hi"}"#.into())?;
//! futures::executor::block_on(db.write(vec![WriteOp::Insert { collection: "Note".into(), bytes }]))?;
//! let n = db.query("Note".into()).filter(Expr::eq("text".into(), Value::Text { v: "hi".into() })).count()?;
//! assert_eq!(n, 1);
//! futures::executor::block_on(db.close())?;
//! # Ok::<(), keel_ffi::KeelError>(())
//! ```
#![warn(missing_docs)]
#![deny(unsafe_code)]

uniffi::setup_scaffolding!("keel");

mod batch;
mod bytes;
mod callbacks;
mod db;
mod dict;
mod ending;
mod error;
mod expr;
mod keys;
mod live;
mod migrate;
mod packed;
mod relations;
mod rotation;
mod search;
mod sync;
mod tasks;
mod txn;
mod types;
mod vector;

pub use batch::{deliveries, BatchListener, Deliveries, DeliveryBatch};
pub use bytes::Bytes;
pub use callbacks::stop_callbacks;
pub use db::{check_schema, encode_json, open_async, open_blocking, Database, Query};
pub use dict::{DictValue, Dictionary, DictionaryListener, DictionarySubscription};
pub use error::{CallbackError, KeelError};
pub use expr::{Expr, Term};
pub use keys::{
    new_data_key, Encryption, KeyError, KeyProvider, KeyPurpose, KeySource, DATA_KEY_BYTES,
};
pub use live::{Diff, Move, ObjectEvent, ObjectListener, QueryListener, QueryUpdate, Subscription};
pub use migrate::{
    open_migrating_async, open_migrating_blocking, BackfillRule, MigrationProgress,
    MigrationProgressListener, Migrator, ObjectMigration,
};
pub use packed::{PackedObjects, PACKED_OBJECT_ENTRY};
pub use relations::{ChangedRow, IncludingListener, IncludingSubscription, IncludingUpdate};
pub use rotation::{RotateProgress, RotateProgressListener, RotateReport, RotateStep};
pub use search::{search_highlight, search_snippet, TextRange, TextSnippet};
pub use sync::{
    RefusedOp, SnapshotProgress, SyncHandle, SyncListener, SyncOptions, SyncStatus, TokenProvider,
};
pub use txn::{Txn, WriteBody};

/// The write transaction's former FFI name; the core, the FFI and Kotlin call it
/// `Txn` (see the vocabulary in `docs/bindings.md`).
#[deprecated(note = "renamed `Txn`, the core's name")]
pub type Transaction = Txn;
pub use types::{
    CheckpointResult, FieldValue, FileStats, IncludedCount, IncludedObject, IoStats, Milestone,
    OpenOptions, OpenPhase, OpenProgress, OpenProgressListener, OpenReport, PhaseReport,
    StoredObject, SyncPolicy, Value, WriteOp, WriteResult,
};
pub use vector::{NearestListener, NearestUpdate, Neighbor};
