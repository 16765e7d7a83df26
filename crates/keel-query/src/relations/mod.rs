//! Relations: reading through `(references: …)` fields, and keeping such reads live.
//!
//! * [`prefetch`] — [`Fetch::including`](crate::query::fetch::Fetch::including),
//!   one batched read per relation, filters and order through references.
//! * [`live`] — [`Including::subscribe`](prefetch::Including::subscribe), live lists
//!   of `(R, Option<T>)` pairs with row-level diffs.
//!
//! The delete rules a write obeys are in `txn::rules`; the links they read, in
//! `layout::links`.

pub(crate) mod live;
pub(crate) mod prefetch;
pub(crate) mod registry;
