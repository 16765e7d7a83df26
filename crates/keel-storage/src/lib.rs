//! # keel-storage
//!
//! keel's storage kernel: the whole life of one SQLite file.
//!
//! * **Open never blocks the caller.** [`Store::open_async`] returns a future at once;
//!   the pipeline (prepare → sync_wal → recover → checkpoint → schema → ready) runs on
//!   keel-owned threads, reports [`OpenProgress`] and leaves an [`OpenReport`].
//! * **Usable before durable.** The future resolves when the store is *readable*
//!   ([`Milestone`]); the open barrier (the sync of a WAL a previous run left) runs
//!   beside recovery, and writes queue until it is done ([`Store::durable`]).
//! * **Every sync is a policy.** A VFS shim over SQLite's `unix` VFS routes each
//!   `xSync` through [`SyncPolicies`] (commit / checkpoint / open barrier) and counts
//!   I/O per file kind ([`IoStats`]).
//! * **Group commit.** [`Store::write`] closures queue to one writer thread which
//!   runs many in one transaction, each in its own SAVEPOINT. [`Store::write_blocking`]
//!   skips the handoff when nothing is queued: the caller commits on its own thread.
//! * **Small WAL.** A background checkpointer runs PASSIVE checkpoints over a
//!   threshold (default 4 MiB) or when idle; [`Store::on_background`] truncates.
//!
//! Platforms: Unix (Linux, Android, macOS, iOS): the shim wraps SQLite's `unix` VFS.
//! Threads keel owns: `keel-open` (during `open_async` only, until durable),
//! `keel-barrier` (during an open barrier), `keel-writer`, `keel-ckpt`; all are
//! joined by [`Store::close`]. A [`file_watch::FileWatch`] (`keel-watch`) and an
//! [`xproc::CommitWatch`] (`keel-feed`) run until their owner stops them. Dropping the last clone without a close hands the same
//! shutdown to a `keel-close` thread and returns at once.
//!
//! ## Default durability
//!
//! The default is [`SyncPolicy::Full`] for commits, checkpoints and the open barrier:
//! a committed write survives an app crash, an OS crash and a power loss (on Apple
//! that means `F_FULLFSYNC`, which plain `fsync` does not give). It costs one WAL sync
//! per *group* of commits, and the open barrier no longer freezes the UI because it
//! runs off the caller's thread. See `docs/durability.md` for each policy.
//!
//! ```
//! use keel_storage::{Error, Store, StoreOptions};
//! # let dir = tempfile::tempdir().unwrap();
//! let store = futures::executor::block_on(Store::open_async(
//!     dir.path().join("app.db"),
//!     StoreOptions::default(),
//! ))?;
//! futures::executor::block_on(store.write(|t| {
//!     t.execute_batch("CREATE TABLE kv(k TEXT PRIMARY KEY, v BLOB)")?;
//!     t.execute("INSERT INTO kv VALUES ('greeting', 'hello')", [])?;
//!     Ok::<_, Error>(())
//! }))?;
//! let v: String = store.read(|c| {
//!     c.query_row("SELECT v FROM kv WHERE k = 'greeting'", [], |r| r.get(0)).map_err(Error::from)
//! })?;
//! assert_eq!(v, "hello");
//! println!("{}", store.open_report());
//! store.close()?;
//! # Ok::<(), Error>(())
//! ```
#![warn(missing_docs)]
#![deny(unsafe_code)]

#[cfg(feature = "sim")]
pub mod campaign;
mod checkpointer;
mod conn;
mod control;
mod durable;
pub mod encryption;
mod error;
pub mod file_watch;
mod identity;
mod oneshot;
mod open;
mod options;
mod park;
mod paths;
mod policy;
mod readers;
mod report;
pub mod rotate;
#[cfg(feature = "sim")]
pub mod sim;
mod stats;
mod store;
mod suspend;
#[allow(unsafe_code)]
mod vfs;
mod writer;
pub mod xproc;

pub use checkpointer::{CheckpointMode, CheckpointOutcome};
pub use durable::DurableFuture;
pub use error::{Error, Result};
pub use identity::{verify_wal_identity, KEEL_APPLICATION_ID};
pub use options::{
    ConnectionInit, Milestone, OpenPhase, OpenProgress, ProgressFn, SchemaCtx, SchemaHook,
    StoreOptions,
};
pub use park::fail_fast_while_suspended;
pub use policy::{FileKind, SyncContext, SyncHook, SyncPolicies, SyncPolicy, SyncReason};
pub use report::{OpenReport, PhaseReport};
pub use stats::{FileStats, IoStats};
pub use store::{OpenFuture, Store};
pub use suspend::{ResumeReport, SuspendOptions, SuspendReport};
pub use writer::{RowChanges, WriteFuture, WriteTxn};

/// Re-export of the `rusqlite` this crate is built on (closures get its `Connection`).
pub use rusqlite;
#[cfg(test)]
mod tests;
