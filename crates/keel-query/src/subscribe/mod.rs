//! Live queries and object subscriptions with row-level diffs.
//!
//! ## The model
//!
//! A *subscription* is a standing question — "this object" or "this query" — that
//! keel answers again after every commit that could change the answer. Answers
//! arrive in a callback or as a [`futures::Stream`]:
//!
//! * **Object subscription** ([`Database::subscribe`](crate::Database::subscribe), [`Database::subscribe_object`](crate::Database::subscribe_object)):
//!   each new version of one object ([`ObjectUpdate::Updated`]), then
//!   [`ObjectUpdate::Deleted`] when it is deleted, and then nothing: the subscription
//!   has ended.
//! * **Query subscription** ([`Fetch::subscribe`](crate::Fetch::subscribe), [`Query::subscribe`](crate::Query::subscribe)): first the
//!   current result, then each new result together with a [`Diff`] against the
//!   previous one — the removed, inserted, moved and updated positions a table view
//!   animates. `filter`, multi-key `order_by`, `limit` and `offset` all work.
//!
//! After each COMMIT, the writer thread hands the changed objects to the database's
//! *hub*. The hub finds the subscriptions a changed object could affect through
//! indexes, evaluates the query's filter on the object **in memory** (with
//! [`eval::Filter`](crate::query::eval::Filter), which agrees exactly with the SQL keel runs)
//! and places it in the stored result with [`eval::Order`](crate::query::eval::Order). No
//! query goes to disk per commit; a `limit`ed window is refilled from disk only when
//! deletions leave it short of rows it cannot know otherwise.
//!
//! ```
//! use keel_query::{Database, StoreOptions};
//! use keel_example_blog::blog::Post;
//! use std::sync::{Arc, Mutex};
//! # let dir = tempfile::tempdir().unwrap();
//! let db = Database::open_for::<Post>(dir.path().join("live.db"), StoreOptions::default())?;
//! let seen = Arc::new(Mutex::new(Vec::new()));
//! let s2 = seen.clone();
//! let sub = db.fetch::<Post>()
//!     .filter(Post::priority().le(50))
//!     .order_by(Post::priority().asc())
//!     .subscribe(move |u| {
//!         s2.lock().unwrap().push(u.objects.iter().map(|p| p.id.clone()).collect::<Vec<_>>())
//!     })?;
//! db.write(|t| {
//!     t.insert(&Post::builder().id("b").priority(20).build())?;
//!     t.insert(&Post::builder().id("a").priority(10).build())?;
//!     t.insert(&Post::builder().id("z").priority(99).build()) // not in the result
//! }).wait()?;
//! // Delivered before the write future resolved: first the empty result, then the new one.
//! assert_eq!(*seen.lock().unwrap(), vec![vec![], vec!["a".to_string(), "b".to_string()]]);
//! drop(sub); // no callback runs after this
//! # Ok::<(), keel_query::Error>(())
//! ```
//!
//! ## Guarantees
//!
//! * **When.** Every committed write closure with changes is delivered to the
//!   affected subscriptions *after* its COMMIT and *before* its write future
//!   resolves: when `db.write(..).await` returns, every callback has run and every
//!   stream has its new value.
//! * **Which thread.** The first result of a query subscription (and a fresh object
//!   for a stale object subscription) is delivered synchronously on the thread that
//!   subscribes, before `subscribe` returns. Every later delivery runs on the thread
//!   that committed the write: keel's writer thread, or the caller of
//!   [`Database::write_blocking`](crate::db::database::Database::write_blocking) when it committed
//!   inline — except, with `StoreOptions::share_changes`, what other processes
//!   committed, which the `keel-feed` thread (or a [`Database::catch_up`](crate::Database::catch_up) caller)
//!   delivers, in order with local commits (see `docs/app-groups.md`). Keep
//!   callbacks short — the next write waits for them — and hand
//!   heavy work to your own thread or runtime. A callback may read, subscribe,
//!   unsubscribe and queue writes, but **must not wait for a write future** (the
//!   writer would wait for itself: a deadlock; `write_blocking` there returns an
//!   error instead).
//! * **Order.** One subscription's deliveries never overlap and arrive in commit
//!   order. Each diff is relative to the previous delivery of the same callback or
//!   stream, so applying the diffs in order reproduces every result.
//! * **Slow consumers.** Callbacks are called synchronously, so nothing queues. A
//!   stream holds at most one undelivered value: if the consumer falls behind, the
//!   value is replaced by the newest result (object or query), and the diff it gets
//!   is computed against the last result *it* received. Memory never grows with the
//!   number of commits.
//! * **Stale input.** [`Database::subscribe`](crate::Database::subscribe) (given an object) and
//!   [`Fetch::subscribe_from`](crate::Fetch::subscribe_from) / [`Query::subscribe_from`](crate::Query::subscribe_from) (given a result) compare
//!   what they were given with a fresh read made while registering. If the input is
//!   older than the last commit, the fresh object or result is delivered at once.
//!   This needs no version number on objects: the fresh read is the truth.
//! * **Cancellation.** Dropping a [`Subscription`] (or its stream) unregisters it.
//!   Once `drop` returns no callback runs — if one is running on the writer thread
//!   at that moment, `drop` waits for it to finish. Dropping a subscription inside
//!   its own callback is allowed and takes effect when the callback returns.
//! * **Close.** [`Database::close`](crate::Database::close) ends every subscription once its task has
//!   finished (writes queued before it are delivered first): streams yield the
//!   value they hold and then end (`None`), callbacks never run again.
//! * **Identity.** Objects in a result are identified by their rowid, which stays
//!   the same for an object's whole life.
//!
//! ## Cost
//!
//! Work per commit follows the number of changed objects, not changes ×
//! subscriptions. Object subscriptions, and query subscriptions whose filter has a
//! top-level `field == value` or `field IN (…)` conjunct (primary key preferred),
//! sit in hash tables: a changed object reaches only the subscriptions under its
//! old and new values. Other query subscriptions are scanned per changed object of
//! their collection, with their range conjuncts (`<`, `>=`, …) checked first on
//! values extracted once per object. Each subscription keeps its result as an
//! ordered array of sort keys; a commit merges its changed rows in O(n + k log k)
//! and diffs in O(n). See `docs/subscriptions.md` for measurements.

mod delivery;
mod diff;
mod handles;
pub(crate) mod hub;
pub(crate) mod indices;
mod nearest;
mod update;

pub use diff::Diff;
pub use handles::{ObjectStream, ObjectUpdateStream, QueryStream, Subscription, UpdateStream};
pub use indices::{Indices, IntoIter as IndicesIntoIter};
pub use nearest::{NearestStats, NearestSubscription, NearestUpdate};
pub use update::{ObjectEvent, ObjectUpdate, Objects, QueryUpdate, Update};
