//! Live queries and object subscriptions with row-level diffs.
//!
//! ## The model
//!
//! A *subscription* is a standing question — "this object" or "this query" — that
//! keel answers again after every commit that could change the answer. Answers
//! arrive in a callback or as a [`futures::Stream`]:
//!
//! * **Object subscription** ([`Database::subscribe`], [`Database::subscribe_object`]):
//!   each new version of one object ([`ObjectUpdate::Updated`]), then
//!   [`ObjectUpdate::Deleted`] when it is deleted, and then nothing: the subscription
//!   has ended.
//! * **Query subscription** ([`Fetch::subscribe`], [`Query::subscribe`]): first the
//!   current result, then each new result together with a [`Diff`] against the
//!   previous one — the removed, inserted, moved and updated positions a table view
//!   animates. `filter`, multi-key `order_by`, `limit` and `offset` all work.
//!
//! After each COMMIT, the writer thread hands the changed objects to the database's
//! *hub*. The hub finds the subscriptions a changed object could affect through
//! indexes, evaluates the query's filter on the object **in memory** (with
//! [`eval::Filter`](crate::eval::Filter), which agrees exactly with the SQL keel runs)
//! and places it in the stored result with [`eval::Order`](crate::eval::Order). No
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
//!   [`Database::write_blocking`](crate::Database::write_blocking) when it committed
//!   inline — except, with `StoreOptions::share_changes`, what other processes
//!   committed, which the `keel-feed` thread (or a [`Database::catch_up`] caller)
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
//! * **Stale input.** [`Database::subscribe`] (given an object) and
//!   [`Fetch::subscribe_from`] / [`Query::subscribe_from`] (given a result) compare
//!   what they were given with a fresh read made while registering. If the input is
//!   older than the last commit, the fresh object or result is delivered at once.
//!   This needs no version number on objects: the fresh read is the truth.
//! * **Cancellation.** Dropping a [`Subscription`] (or its stream) unregisters it.
//!   Once `drop` returns no callback runs — if one is running on the writer thread
//!   at that moment, `drop` waits for it to finish. Dropping a subscription inside
//!   its own callback is allowed and takes effect when the callback returns.
//! * **Close.** [`Database::close`] ends every subscription once its task has
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
pub(crate) mod hub;
mod indices;
mod nearest;
mod update;

use std::collections::HashMap;
use std::fmt;
use std::pin::Pin;
use std::sync::{Arc, Weak};
use std::task::{Context, Poll};

use futures::Stream;
use keel_schema::{Record, Value};

pub use diff::Diff;
pub(crate) use hub::Hub;
pub use indices::{Indices, IntoIter as IndicesIntoIter};
pub use nearest::{NearestStats, NearestSubscription, NearestUpdate};
pub use update::{ObjectEvent, ObjectUpdate, Objects, QueryUpdate, Update};

use delivery::{Callback, Shared};

use crate::slot::{Producer, Slot};
use hub::{hkeys, Compiled, Obj};

use crate::db::Database;
use crate::engine::CommitObserver;
use crate::error::{Error, Result};
use crate::query::{Fetch, Query, Source, StoredObject};

trait Cancel: Send + Sync {
    fn cancel(&self);
    fn active(&self) -> bool;
}

impl<T> Cancel for Shared<T> {
    fn cancel(&self) {
        Shared::cancel(self)
    }
    fn active(&self) -> bool {
        Shared::active(self)
    }
}

/// A live subscription. Dropping it (or calling [`Subscription::cancel`])
/// unregisters it: after that returns, its callback never runs again.
/// `Send + Sync`.
///
/// ```
/// use keel_query::{Database, StoreOptions};
/// use keel_example_blog::blog::Post;
/// # let dir = tempfile::tempdir().unwrap();
/// # let db = Database::open_for::<Post>(dir.path().join("s.db"), StoreOptions::default())?;
/// let sub = db.fetch::<Post>().subscribe(|_| {})?;
/// assert!(sub.is_active());
/// sub.cancel();
/// # Ok::<(), keel_query::Error>(())
/// ```
#[must_use = "dropping a Subscription ends it at once"]
pub struct Subscription {
    hub: Weak<Hub>,
    collection: String,
    id: u64,
    sink: Arc<dyn Cancel>,
}

impl fmt::Debug for Subscription {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Subscription")
            .field("collection", &self.collection)
            .field("id", &self.id)
            .field("active", &self.is_active())
            .finish()
    }
}

impl Subscription {
    /// End the subscription now (same as dropping it).
    pub fn cancel(self) {}

    /// False once cancelled, or once an object subscription delivered `Deleted`.
    pub fn is_active(&self) -> bool {
        self.sink.active()
    }
}

impl Drop for Subscription {
    fn drop(&mut self) {
        self.sink.cancel();
        if let Some(h) = self.hub.upgrade() {
            h.remove(&self.collection, self.id);
        }
    }
}

/// The database's hub, created by the first subscription. Subscribing never waits
/// for the writer: a write closure that started before the subscription made
/// writes record their changes commits unrecorded, and the hub then re-reads its
/// subscriptions ([`Hub::resync`]).
fn hub_of(db: &Database) -> Arc<Hub> {
    let inner = db.inner();
    let hub = inner.hub.get_or_init(|| {
        Arc::new(Hub::new(db.weak(), Arc::clone(&inner.schema))) as Arc<dyn CommitObserver>
    });
    as_hub(Arc::clone(hub))
}

/// The engine holds the hub as a [`CommitObserver`] (it sits below this module);
/// only [`hub_of`] installs one, always a [`Hub`].
fn as_hub(observer: Arc<dyn CommitObserver>) -> Arc<Hub> {
    match observer.into_any().downcast::<Hub>() {
        Ok(hub) => hub,
        Err(_) => unreachable!("the engine's commit observer is always the subscription hub"),
    }
}

impl CommitObserver for Hub {
    fn interested(&self) -> bool {
        Hub::interested(self)
    }
    fn on_commit(&self, changes: &[crate::Change], one_collection: bool) {
        Hub::on_commit(self, changes, one_collection)
    }
    fn resync(&self) {
        Hub::resync(self)
    }
    fn on_remote(&self, changes: &[crate::Change]) {
        Hub::on_remote(self, changes)
    }
    fn close(&self) {
        Hub::close(self)
    }
    fn into_any(self: Arc<Self>) -> Arc<dyn std::any::Any + Send + Sync> {
        self
    }
}

type SeenFn = Box<dyn FnOnce(&[Obj]) -> Vec<Obj> + Send>;

fn query_core(
    q: Query<'_>,
    seen: Option<SeenFn>,
    cb: Callback<QueryUpdate>,
) -> Result<Subscription> {
    let db = match &q.src {
        Source::Db(inner) => Database::from_inner(Arc::clone(inner)),
        Source::Conn(i, _, _) => {
            return Err(Error::Closed {
                op: "subscribe inside a snapshot or transaction (subscribe on the Database)",
                path: i.path().to_path_buf(),
            })
        }
    };
    db.inner().check_open("subscribe")?;
    let compiled = Compiled::new(db.inner(), q.spec)?;
    let collection = compiled.coll.clone();
    let hub = hub_of(&db);
    let shared = Arc::new(Shared::new(cb));
    let mut g = shared.guard();
    let (id, first) = hub.add_query(compiled, Arc::clone(&shared))?;
    let sub = Subscription {
        hub: Arc::downgrade(&hub),
        collection,
        id,
        sink: Arc::clone(&shared) as Arc<dyn Cancel>,
    };
    match seen {
        None => {
            let diff = Diff::initial(first.len());
            shared.call(
                &mut g,
                QueryUpdate {
                    objects: first,
                    diff,
                },
                false,
            );
        }
        Some(seen) => {
            let seen = seen(&first);
            let diff = Diff::between(&seen, &first);
            if !diff.is_empty() {
                shared.call(
                    &mut g,
                    QueryUpdate {
                        objects: first,
                        diff,
                    },
                    false,
                );
            }
        }
    }
    drop(g);
    Ok(sub)
}

fn object_core(
    db: &Database,
    collection: &str,
    key: &[Value],
    stale: Box<dyn FnOnce(&StoredObject) -> bool + Send>,
    cb: Callback<ObjectEvent>,
) -> Result<Subscription> {
    db.inner().check_open("subscribe")?;
    let hub = hub_of(db);
    let shared = Arc::new(Shared::new(cb));
    let mut g = shared.guard();
    let (id, coll, cur) = hub.add_object(collection, key, Arc::clone(&shared))?;
    let sub = Subscription {
        hub: Arc::downgrade(&hub),
        collection: coll,
        id,
        sink: Arc::clone(&shared) as Arc<dyn Cancel>,
    };
    match cur {
        None => shared.call(&mut g, ObjectEvent::Deleted, true),
        Some(o) => {
            if stale(&o) {
                shared.call(&mut g, ObjectEvent::Updated(o), false);
            }
        }
    }
    drop(g);
    Ok(sub)
}

// ---------------------------------------------------------------- dynamic API

impl Query<'_> {
    /// Subscribe to this query: `f` gets the current result at once (on this
    /// thread), then every changed result with its [`Diff`] (on the writer thread,
    /// before the write future resolves). Only queries made by
    /// [`Database::query`] can be subscribed to.
    ///
    /// ```
    /// use keel_query::{Database, StoreOptions, Expr, SortKey};
    /// use keel_example_blog::blog::Post;
    /// use std::sync::{Arc, Mutex};
    /// # let dir = tempfile::tempdir().unwrap();
    /// # let db = Database::open_for::<Post>(dir.path().join("q.db"), StoreOptions::default())?;
    /// let last = Arc::new(Mutex::new(None));
    /// let l2 = last.clone();
    /// let _sub = db.query("blog.Post")
    ///     .filter(Post::priority().gt(1))
    ///     .subscribe(move |u| *l2.lock().unwrap() = Some(u))?;
    /// let bytes = Post::builder().id("p").priority(5).build().encode();
    /// db.write(move |t| t.insert_bytes("blog.Post", bytes)).wait()?;
    /// let u = last.lock().unwrap().take().unwrap();
    /// assert_eq!((u.objects.len(), u.diff.inserted.to_vec()), (1, vec![0]));
    /// # Ok::<(), keel_query::Error>(())
    /// ```
    pub fn subscribe(self, f: impl FnMut(QueryUpdate) + Send + 'static) -> Result<Subscription> {
        query_core(self, None, Box::new(f))
    }

    /// Like [`Query::subscribe`], starting from a result the caller already has
    /// (`seen`, e.g. from [`Query::all`]): `f` is called at once only if the result
    /// changed since, with the diff against `seen`.
    ///
    /// ```
    /// # use keel_query::{Database, StoreOptions};
    /// # use keel_example_blog::blog::Post;
    /// # let dir = tempfile::tempdir().unwrap();
    /// # let db = Database::open_for::<Post>(dir.path().join("q.db"), StoreOptions::default())?;
    /// let seen = db.query("blog.Post").all()?;
    /// let sub = db.query("blog.Post").subscribe_from(&seen, |_| panic!("not stale"))?;
    /// # Ok::<(), keel_query::Error>(())
    /// ```
    pub fn subscribe_from(
        self,
        seen: &[StoredObject],
        f: impl FnMut(QueryUpdate) + Send + 'static,
    ) -> Result<Subscription> {
        let seen: Vec<Obj> = seen.iter().cloned().map(Arc::new).collect();
        query_core(self, Some(Box::new(move |_| seen)), Box::new(f))
    }

    /// [`Query::subscribe`] as a [`Stream`] of [`QueryUpdate`]s. The first item is
    /// the current result. A slow consumer gets the latest result, with a diff
    /// against the last item it received.
    ///
    /// ```
    /// # use keel_query::{Database, StoreOptions};
    /// # use keel_example_blog::blog::Post;
    /// use futures::StreamExt;
    /// # let dir = tempfile::tempdir().unwrap();
    /// # let db = Database::open_for::<Post>(dir.path().join("q.db"), StoreOptions::default())?;
    /// let mut s = db.query("blog.Post").subscribe_stream()?;
    /// let first = futures::executor::block_on(s.next()).unwrap();
    /// assert!(first.objects.is_empty());
    /// # Ok::<(), keel_query::Error>(())
    /// ```
    pub fn subscribe_stream(self) -> Result<QueryStream> {
        let slot = Arc::new(Slot::new());
        let s2 = Producer::new(Arc::clone(&slot));
        let sub = self.subscribe(move |u| s2.put(u.objects, false))?;
        Ok(QueryStream {
            _sub: sub,
            slot,
            last: Objects::default(),
            started: false,
        })
    }
}

/// How every stream type shows itself: its name and the subscription it holds.
fn debug_stream(f: &mut fmt::Formatter<'_>, name: &str, sub: &Subscription) -> fmt::Result {
    f.debug_struct(name).field("sub", sub).finish()
}

/// A [`Stream`] of [`QueryUpdate`]s ([`Query::subscribe_stream`]). Dropping it
/// ends the subscription.
pub struct QueryStream {
    _sub: Subscription,
    slot: Arc<Slot<Objects>>,
    last: Objects,
    started: bool,
}

impl fmt::Debug for QueryStream {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        debug_stream(f, "QueryStream", &self._sub)
    }
}

impl Stream for QueryStream {
    type Item = QueryUpdate;
    fn poll_next(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<QueryUpdate>> {
        let this = self.get_mut();
        loop {
            match this.slot.poll_take(cx.waker()) {
                Poll::Ready(Some(objs)) => {
                    let diff = Diff::between(&this.last, &objs);
                    if diff.is_empty() && this.started {
                        continue; // overwritten back to what the consumer has
                    }
                    this.started = true;
                    this.last = objs.clone();
                    return Poll::Ready(Some(QueryUpdate {
                        objects: objs,
                        diff,
                    }));
                }
                Poll::Ready(None) => return Poll::Ready(None),
                Poll::Pending => return Poll::Pending,
            }
        }
    }
}

impl Database {
    /// Subscribe to one object by collection and primary key (`[rowid]` for
    /// collections without one). `f` gets each new version, then
    /// [`ObjectEvent::Deleted`], and the subscription ends. If `seen` (the bytes the
    /// caller has) differs from the stored object, or is `None`, the stored object
    /// is delivered at once on this thread; if the object does not exist, `Deleted`
    /// is.
    ///
    /// ```
    /// use keel_query::{Database, StoreOptions, ObjectEvent};
    /// use keel_example_blog::blog::Post;
    /// use std::sync::{Arc, Mutex};
    /// # let dir = tempfile::tempdir().unwrap();
    /// # let db = Database::open_for::<Post>(dir.path().join("o.db"), StoreOptions::default())?;
    /// db.write(|t| t.insert(&Post::builder().id("p").build())).wait()?;
    /// let events = Arc::new(Mutex::new(Vec::new()));
    /// let e2 = events.clone();
    /// let sub = db.subscribe_object("blog.Post", &["p".into()], None, move |e| e2.lock().unwrap().push(e))?;
    /// db.write(|t| t.delete::<Post>(&"p".to_string())).wait()?;
    /// assert!(matches!(events.lock().unwrap()[..], [ObjectEvent::Updated(_), ObjectEvent::Deleted]));
    /// assert!(!sub.is_active());
    /// # Ok::<(), keel_query::Error>(())
    /// ```
    pub fn subscribe_object(
        &self,
        collection: &str,
        key: &[Value],
        seen: Option<&[u8]>,
        f: impl FnMut(ObjectEvent) + Send + 'static,
    ) -> Result<Subscription> {
        let seen = seen.map(<[u8]>::to_vec);
        object_core(
            self,
            collection,
            key,
            Box::new(move |o| seen.as_deref() != Some(&o.bytes[..])),
            Box::new(f),
        )
    }

    /// [`Database::subscribe_object`] as a [`Stream`]; it ends after `Deleted`.
    pub fn subscribe_object_stream(
        &self,
        collection: &str,
        key: &[Value],
        seen: Option<&[u8]>,
    ) -> Result<ObjectStream> {
        let slot = Arc::new(Slot::new());
        let s2 = Producer::new(Arc::clone(&slot));
        let sub = self.subscribe_object(collection, key, seen, move |e| {
            let end = e == ObjectEvent::Deleted;
            s2.put(e, end)
        })?;
        Ok(ObjectStream { _sub: sub, slot })
    }

    /// Live subscriptions on this database: `(object, query)`.
    ///
    /// ```
    /// # use keel_query::{Database, StoreOptions};
    /// # use keel_example_blog::blog::Post;
    /// # let dir = tempfile::tempdir().unwrap();
    /// # let db = Database::open_for::<Post>(dir.path().join("c.db"), StoreOptions::default())?;
    /// let sub = db.fetch::<Post>().subscribe(|_| {})?;
    /// assert_eq!(db.subscription_counts(), (0, 1));
    /// drop(sub);
    /// assert_eq!(db.subscription_counts(), (0, 0));
    /// # Ok::<(), keel_query::Error>(())
    /// ```
    pub fn subscription_counts(&self) -> (usize, usize) {
        self.inner()
            .hub
            .get()
            .map_or((0, 0), |h| as_hub(Arc::clone(h)).counts())
    }
}

/// A [`Stream`] of [`ObjectEvent`]s ([`Database::subscribe_object_stream`]): ends
/// after `Deleted`. Holds at most the latest undelivered event.
pub struct ObjectStream {
    _sub: Subscription,
    slot: Arc<Slot<ObjectEvent>>,
}

impl fmt::Debug for ObjectStream {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        debug_stream(f, "ObjectStream", &self._sub)
    }
}

impl Stream for ObjectStream {
    type Item = ObjectEvent;
    fn poll_next(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<ObjectEvent>> {
        self.slot.poll_take(cx.waker())
    }
}

// ---------------------------------------------------------------- typed API

fn decode<R: Record>(o: &StoredObject) -> Result<R> {
    keel_schema::wire::decode_stored::<R>(&o.bytes).map_err(|source| Error::Decode {
        op: "subscription",
        collection: R::COLLECTION.to_owned(),
        rowid: o.rowid,
        source,
    })
}

/// Turns dynamic query updates into typed ones, decoding only inserted and updated
/// objects and reusing the rest from the previous result.
struct Typed<R> {
    prev: Vec<Arc<R>>,
}

impl<R: Record> Typed<R> {
    fn next(&mut self, u: QueryUpdate) -> Option<Update<R>> {
        let objs = &u.objects;
        match u
            .diff
            .try_apply(&self.prev, |i| decode::<R>(&objs[i]).map(Arc::new))
        {
            Ok(v) => {
                self.prev = v.clone();
                Some(Update {
                    objects: v,
                    diff: u.diff,
                })
            }
            Err(e) => {
                tracing::error!(error = %e, "subscription: an object does not decode; update skipped");
                None
            }
        }
    }
}

impl<R: Record> Fetch<'_, R> {
    /// Subscribe to this query: `f` gets the current result at once (on this
    /// thread), then every changed result with its [`Diff`] (on the writer thread,
    /// before the write future resolves).
    ///
    /// ```
    /// use keel_query::{Database, StoreOptions};
    /// use keel_example_blog::blog::Post;
    /// use std::sync::{Arc, Mutex};
    /// # let dir = tempfile::tempdir().unwrap();
    /// # let db = Database::open_for::<Post>(dir.path().join("t.db"), StoreOptions::default())?;
    /// let n = Arc::new(Mutex::new(Vec::new()));
    /// let n2 = n.clone();
    /// let _sub = db.fetch::<Post>()
    ///     .order_by(Post::priority().desc())
    ///     .limit(2)
    ///     .subscribe(move |u| n2.lock().unwrap().push(u.objects.len()))?;
    /// db.write(|t| (0..5).try_for_each(|i| t.insert(&Post::builder().id(format!("{i}")).priority(i).build()).map(|_| ()))).wait()?;
    /// assert_eq!(*n.lock().unwrap(), vec![0, 2]);
    /// # Ok::<(), keel_query::Error>(())
    /// ```
    pub fn subscribe(self, mut f: impl FnMut(Update<R>) + Send + 'static) -> Result<Subscription> {
        let mut t = Typed::<R> { prev: Vec::new() };
        self.q.subscribe(move |u| {
            if let Some(u) = t.next(u) {
                f(u)
            }
        })
    }

    /// Like [`Fetch::subscribe`], starting from a result the caller already has:
    /// `f` is called at once only if the stored result differs from `seen` (with
    /// the diff against `seen`), and otherwise at the next change.
    ///
    /// ```
    /// # use keel_query::{Database, StoreOptions};
    /// # use keel_example_blog::blog::Post;
    /// # let dir = tempfile::tempdir().unwrap();
    /// # let db = Database::open_for::<Post>(dir.path().join("t.db"), StoreOptions::default())?;
    /// let seen = db.fetch::<Post>().all()?;
    /// let _sub = db.fetch::<Post>().subscribe_from(&seen, |_| unreachable!("nothing changed"))?;
    /// # Ok::<(), keel_query::Error>(())
    /// ```
    pub fn subscribe_from(
        self,
        seen: &[R],
        mut f: impl FnMut(Update<R>) + Send + 'static,
    ) -> Result<Subscription> {
        let seen_r: Vec<Arc<R>> = seen.iter().cloned().map(Arc::new).collect();
        let keys: Vec<(Vec<hub::HKey>, Vec<u8>)> = seen
            .iter()
            .map(|r| (hkeys(&r.primary_key()), r.encode()))
            .collect();
        let seen_fn: SeenFn = Box::new(move |fresh: &[Obj]| {
            // Give the caller's objects the rowids of the stored ones with the same key.
            let by_key: HashMap<Vec<hub::HKey>, i64> = fresh
                .iter()
                .filter_map(|o| {
                    Some((
                        hkeys(
                            &keel_schema::wire::decode_stored::<R>(&o.bytes)
                                .ok()?
                                .primary_key(),
                        ),
                        o.rowid,
                    ))
                })
                .collect();
            keys.into_iter()
                .enumerate()
                .map(|(i, (k, bytes))| {
                    let rowid = by_key.get(&k).copied().unwrap_or(-1 - i as i64);
                    Arc::new(StoredObject { rowid, bytes })
                })
                .collect()
        });
        let mut t = Typed::<R> { prev: seen_r };
        query_core(
            self.q,
            Some(seen_fn),
            Box::new(move |u| {
                if let Some(u) = t.next(u) {
                    f(u)
                }
            }),
        )
    }

    /// [`Fetch::subscribe`] as a [`Stream`] of [`Update`]s; a slow consumer gets the
    /// latest result with a diff against the last item it received.
    ///
    /// ```
    /// # use keel_query::{Database, StoreOptions};
    /// # use keel_example_blog::blog::Post;
    /// use futures::StreamExt;
    /// # let dir = tempfile::tempdir().unwrap();
    /// # let db = Database::open_for::<Post>(dir.path().join("t.db"), StoreOptions::default())?;
    /// let mut s = db.fetch::<Post>().subscribe_stream()?;
    /// db.write(|t| t.insert(&Post::builder().id("x").build())).wait()?;
    /// // The consumer was slow: it gets the latest result only.
    /// let u = futures::executor::block_on(s.next()).unwrap();
    /// assert_eq!((u.objects.len(), u.diff.inserted.to_vec()), (1, vec![0]));
    /// # Ok::<(), keel_query::Error>(())
    /// ```
    pub fn subscribe_stream(self) -> Result<UpdateStream<R>> {
        Ok(UpdateStream {
            inner: self.q.subscribe_stream()?,
            typed: Typed { prev: Vec::new() },
        })
    }
}

/// A [`Stream`] of typed [`Update`]s ([`Fetch::subscribe_stream`]).
pub struct UpdateStream<R> {
    inner: QueryStream,
    typed: Typed<R>,
}

impl<R> fmt::Debug for UpdateStream<R> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        debug_stream(f, "UpdateStream", &self.inner._sub)
    }
}

impl<R> Unpin for UpdateStream<R> {}

impl<R: Record> Stream for UpdateStream<R> {
    type Item = Update<R>;
    fn poll_next(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Update<R>>> {
        let this = self.get_mut();
        loop {
            match Pin::new(&mut this.inner).poll_next(cx) {
                Poll::Ready(Some(u)) => {
                    if let Some(t) = this.typed.next(u) {
                        return Poll::Ready(Some(t));
                    }
                }
                Poll::Ready(None) => return Poll::Ready(None),
                Poll::Pending => return Poll::Pending,
            }
        }
    }
}

impl Database {
    /// Subscribe to `obj`: `f` gets each new version of it, then
    /// [`ObjectUpdate::Deleted`], and then the subscription ends. If the stored
    /// object already differs from `obj` (it is older than the last commit), the
    /// stored one is delivered at once on this thread; if it no longer exists,
    /// `Deleted` is.
    ///
    /// ```
    /// use keel_query::{Database, StoreOptions, ObjectUpdate};
    /// use keel_example_blog::blog::Post;
    /// use std::sync::{Arc, Mutex};
    /// # let dir = tempfile::tempdir().unwrap();
    /// # let db = Database::open_for::<Post>(dir.path().join("p.db"), StoreOptions::default())?;
    /// let post = Post::builder().id("p").priority(1).build();
    /// let p2 = post.clone();
    /// db.write(move |t| t.insert(&p2)).wait()?;
    /// let got = Arc::new(Mutex::new(Vec::new()));
    /// let g2 = got.clone();
    /// let sub = db.subscribe(&post, move |u| g2.lock().unwrap().push(u))?;
    /// db.write(|t| t.upsert(&Post::builder().id("p").priority(2).build())).wait()?;
    /// db.write(|t| t.delete::<Post>(&"p".to_string())).wait()?;
    /// let got = got.lock().unwrap();
    /// assert!(matches!(&got[..], [ObjectUpdate::Updated(p), ObjectUpdate::Deleted] if p.priority == 2));
    /// assert!(!sub.is_active());
    /// # Ok::<(), keel_query::Error>(())
    /// ```
    pub fn subscribe<R: Record>(
        &self,
        obj: &R,
        mut f: impl FnMut(ObjectUpdate<R>) + Send + 'static,
    ) -> Result<Subscription> {
        let mine = obj.encode();
        object_core(
            self,
            R::COLLECTION,
            &obj.primary_key(),
            Box::new(
                move |o| match keel_schema::wire::decode_stored::<R>(&o.bytes) {
                    Ok(r) => r.encode() != mine,
                    Err(_) => true,
                },
            ),
            Box::new(move |e| match e {
                ObjectEvent::Deleted => f(ObjectUpdate::Deleted),
                ObjectEvent::Updated(o) => match decode::<R>(&o) {
                    Ok(r) => f(ObjectUpdate::Updated(r)),
                    Err(e) => tracing::error!(error = %e, "subscription: object does not decode"),
                },
            }),
        )
    }

    /// [`Database::subscribe`] as a [`Stream`]; it ends after `Deleted`. A slow
    /// consumer gets the latest version.
    ///
    /// ```
    /// use keel_query::{Database, StoreOptions, ObjectUpdate};
    /// use keel_example_blog::blog::Post;
    /// use futures::StreamExt;
    /// # let dir = tempfile::tempdir().unwrap();
    /// # let db = Database::open_for::<Post>(dir.path().join("p.db"), StoreOptions::default())?;
    /// let post = Post::builder().id("p").build();
    /// let p2 = post.clone();
    /// db.write(move |t| t.insert(&p2)).wait()?;
    /// let s = db.subscribe_stream(&post)?;
    /// db.write(|t| t.delete::<Post>(&"p".to_string())).wait()?;
    /// let all: Vec<_> = futures::executor::block_on(s.collect());
    /// assert_eq!(all, vec![ObjectUpdate::Deleted]);
    /// # Ok::<(), keel_query::Error>(())
    /// ```
    pub fn subscribe_stream<R: Record>(&self, obj: &R) -> Result<ObjectUpdateStream<R>> {
        let mine = obj.encode();
        let slot = Arc::new(Slot::new());
        let s2 = Producer::new(Arc::clone(&slot));
        let sub = object_core(
            self,
            R::COLLECTION,
            &obj.primary_key(),
            Box::new(
                move |o| match keel_schema::wire::decode_stored::<R>(&o.bytes) {
                    Ok(r) => r.encode() != mine,
                    Err(_) => true,
                },
            ),
            Box::new(move |e| {
                let end = e == ObjectEvent::Deleted;
                s2.put(e, end)
            }),
        )?;
        Ok(ObjectUpdateStream {
            inner: ObjectStream { _sub: sub, slot },
            _r: std::marker::PhantomData,
        })
    }
}

/// A [`Stream`] of typed [`ObjectUpdate`]s ([`Database::subscribe_stream`]).
pub struct ObjectUpdateStream<R> {
    inner: ObjectStream,
    _r: std::marker::PhantomData<fn() -> R>,
}

impl<R> fmt::Debug for ObjectUpdateStream<R> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        debug_stream(f, "ObjectUpdateStream", &self.inner._sub)
    }
}

impl<R: Record> Stream for ObjectUpdateStream<R> {
    type Item = ObjectUpdate<R>;
    fn poll_next(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<ObjectUpdate<R>>> {
        let this = self.get_mut();
        loop {
            match Pin::new(&mut this.inner).poll_next(cx) {
                Poll::Ready(Some(ObjectEvent::Deleted)) => {
                    return Poll::Ready(Some(ObjectUpdate::Deleted))
                }
                Poll::Ready(Some(ObjectEvent::Updated(o))) => match decode::<R>(&o) {
                    Ok(r) => return Poll::Ready(Some(ObjectUpdate::Updated(r))),
                    Err(e) => tracing::error!(error = %e, "subscription: object does not decode"),
                },
                Poll::Ready(None) => return Poll::Ready(None),
                Poll::Pending => return Poll::Pending,
            }
        }
    }
}
