//! The [`Database`](database::Database) facade and the handles that hang off it.
//!
//! * [`database`] — open, write, fetch, snapshot, close.
//! * [`catch_up`] — what other processes committed, read and delivered (the upper
//!   half of the cross-process change feed; `feed` has the lower half).
//! * [`dictionary`] — the [`Dictionary`](dictionary::Dictionary) handle.
//! * `rotation` — [`Database::rotate_key`](database::Database::rotate_key): a new key
//!   for the open database (feature `encryption-api`).

pub(crate) mod catch_up;
pub(crate) mod database;
pub(crate) mod dictionary;
#[cfg(feature = "encryption-api")]
pub(crate) mod rotation;
