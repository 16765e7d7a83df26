//! The subscription handles: the methods that open live queries and object
//! subscriptions on [`Database`], [`Query`] and [`Fetch`], the [`Subscription`]
//! that ends one when dropped, and the streams that deliver them. The model and
//! the guarantees are in the [module docs](super).

use std::collections::HashMap;
use std::fmt;
use std::pin::Pin;
use std::sync::{Arc, Weak};
use std::task::{Context, Poll};

use futures::Stream;
use keel_schema::{Record, Value};

use super::delivery::{Callback, Shared};
use super::diff::Diff;
use super::hub::Hub;
use super::update::{ObjectEvent, ObjectUpdate, Objects, QueryUpdate, Update};

use super::hub::{hkeys, Compiled, HKey, Obj};
use crate::base::slot::{Producer, Slot};

use crate::base::change::Change;
use crate::base::error::{Error, Result};
use crate::db::database::Database;
use crate::engine::CommitObserver;
use crate::query::fetch::{Fetch, Query, Source, StoredObject};

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
    fn on_commit(&self, changes: &[Change], one_collection: bool) {
        Hub::on_commit(self, changes, one_collection)
    }
    fn resync(&self) {
        Hub::resync(self)
    }
    fn on_remote(&self, changes: &[Change]) {
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
        let keys: Vec<(Vec<HKey>, Vec<u8>)> = seen
            .iter()
            .map(|r| (hkeys(&r.primary_key()), r.encode()))
            .collect();
        let seen_fn: SeenFn = Box::new(move |fresh: &[Obj]| {
            // Give the caller's objects the rowids of the stored ones with the same key.
            let by_key: HashMap<Vec<HKey>, i64> = fresh
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
