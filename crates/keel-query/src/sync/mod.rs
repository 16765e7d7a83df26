//! The client side of sync with PostgreSQL through keel-relay (`docs/sync.md`;
//! feature `sync`).
//!
//! Writes to `(sync)` collections reach the outbox in their own transaction
//! whether or not this module runs (`layout/outbox.rs`, below the engine). This
//! band uploads them and brings the server's rows down:
//!
//! * [`handle`] — [`Database::sync`](crate::Database::sync), [`SyncHandle`](handle::SyncHandle);
//! * [`shared`] — what the loop and the handle share: [`SyncOptions`](shared::SyncOptions),
//!   [`SyncStatus`](shared::SyncStatus), [`SyncEvent`](shared::SyncEvent);
//! * `client` — the loop on the `keel-sync` thread: the WebSocket, the protocol,
//!   retries with backoff and jitter;
//! * `apply` — downloaded rows into the collections, one write per server
//!   transaction, this client's own operations re-applied on top;
//! * `ledger` — the client's tables: the outbox as it is uploaded, the server's
//!   view of each row, the install's client id.

pub(crate) mod apply;
pub(crate) mod client;
pub mod handle;
pub(crate) mod ledger;
pub mod shared;

/// The steps of the sync loop's test hook (`KEEL_SYNC_PAUSE_AT`, feature `sim`).
pub use client::PAUSE_POINTS;
