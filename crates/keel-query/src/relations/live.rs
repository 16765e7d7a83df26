//! Live queries across a relation: [`Including::subscribe`] keeps a
//! list of `(R, Option<T>)` pairs current when either side changes — a post
//! inserted, or the author a shown post names renamed — with row-level diffs;
//! [`Including::subscribe_many`] keeps `(R, Vec<T>)` pairs current across a
//! to-many reference (a post's tags) the same way, and
//! [`Query::subscribe_including`] is the untyped form (bytes, for the FFI).
//!
//! A facade extension. Every list of a database sits in one registry
//! (`relations/registry.rs`) behind one change hook
//! ([`Database::on_file_changes`](crate::Database::on_file_changes): this handle's commits, and other
//! connections' as a catch-up reads them back), which hands each committed
//! closure's changes only to the lists they can change: those whose filter
//! holds for a changed `R`'s old or new version, and those whose matching `R`s
//! name a changed `T`'s key. A write no list shows visits no list. When a
//! closure changed only referenced objects for a list (an author renamed), its
//! rows naming them take the new version from the change itself, with no read:
//! an `updated` row for every row showing it (the rows, their order and the
//! filter depend on `R` alone; a to-many row keeps its vector's order, a deleted
//! or missing object leaves it). When it changed `R`s the list may show, or the
//! list is ordered or filtered through the referenced objects, the list is
//! re-read (two statements, as [`Including::all`]) and delivered with the diff
//! against the last delivery, if anything differs.

use std::collections::HashSet;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use keel_schema::{Expr, Record, Relation};

use crate::base::change::{Change, ChangeOp};
use crate::base::error::{Error, Result};
use crate::base::ref_keys::K;
use crate::engine::Inner;
use crate::query::eval::Filter;
use crate::query::fetch::{decode_row, Fetch, Query, Source, Spec, StoredObject};
use crate::relations::prefetch::{Included, Including};
use crate::relations::registry::{Listed, Registry, Verdict};
use crate::subscribe::indices::Indices;
use crate::subscribe::Diff;

/// One delivery of [`Including::subscribe`]: the whole list and its diff
/// against the previous delivery (the first: everything inserted).
#[derive(Debug, Clone)]
pub struct IncludingUpdate<R, T> {
    /// Each matching `R` with the object its reference names.
    pub objects: Vec<(R, Option<T>)>,
    /// Row-level changes since the previous delivery: a pair whose `R` or `T`
    /// changed is `updated`.
    pub diff: Diff,
}

/// One delivery of [`Including::subscribe_many`]: the whole list and its diff
/// against the previous delivery (the first: everything inserted).
#[derive(Debug, Clone)]
pub struct IncludingManyUpdate<R, T> {
    /// Each matching `R` with the objects its reference names, in the order of
    /// its keys (a key naming no object is left out).
    pub objects: Vec<(R, Vec<T>)>,
    /// Row-level changes since the previous delivery: a pair whose `R` or any
    /// of its `T`s changed is `updated`.
    pub diff: Diff,
}

/// What a live list across a relation has done so far
/// ([`IncludingSubscription::stats`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub struct IncludingStats {
    /// Times the list was read from the database: the first read, then once per
    /// commit that changed objects of the list's own collection it may show.
    pub reads: u64,
    /// Deliveries made, the first included.
    pub deliveries: u64,
    /// Commits the list looked at: those that changed an object it may show
    /// or one its objects name (a commit touching neither does not reach it).
    pub visits: u64,
}

#[derive(Default)]
struct Counters {
    reads: AtomicU64,
    deliveries: AtomicU64,
    visits: AtomicU64,
    /// Cancelled: a commit already on its way delivers nothing.
    cancelled: AtomicBool,
}

/// A live query across a relation; dropping it (or [`cancel`](Self::cancel))
/// stops deliveries after the one in progress, if any.
#[must_use = "dropping the subscription ends it"]
pub struct IncludingSubscription {
    registry: Arc<Registry>,
    id: u64,
    counters: Arc<Counters>,
}

impl IncludingSubscription {
    /// End the subscription.
    pub fn cancel(self) {}

    /// How often the list was read and delivered so far.
    pub fn stats(&self) -> IncludingStats {
        IncludingStats {
            reads: self.counters.reads.load(Ordering::Relaxed),
            deliveries: self.counters.deliveries.load(Ordering::Relaxed),
            visits: self.counters.visits.load(Ordering::Relaxed),
        }
    }
}

/// Whether a change to an object of the list's own collection can change the
/// list: its old or new version matches the filter, or the old one is unknown.
fn may_show(filter: Option<&Filter>, c: &Change) -> bool {
    let Some(f) = filter else {
        return true;
    };
    let matches = |b: &Option<Vec<u8>>| b.as_deref().is_some_and(|b| f.eval_bytes(b) == Some(true));
    let old_unknown = c.op != ChangeOp::Insert && c.old.is_none();
    old_unknown || matches(&c.old) || matches(&c.new)
}

impl Drop for IncludingSubscription {
    fn drop(&mut self) {
        self.counters.cancelled.store(true, Ordering::SeqCst);
        self.registry.remove(self.id);
    }
}

/// One shown row: the object, the keys its reference holds and the object
/// each names (`None`: missing), parallel.
struct Row<R, T> {
    r: R,
    keys: Vec<K>,
    named: Vec<Option<T>>,
}

/// What a live list shows: its rows and every key they hold (dangling ones
/// included: their target may appear).
type Shown<R, T> = (Vec<Row<R, T>>, HashSet<K>);

struct State<R, T, P, F> {
    rows: Vec<Row<R, T>>,
    named: HashSet<K>,
    /// The last delivery's pairs (what the next diff is against).
    shown: Vec<P>,
    f: F,
}

impl<R: Record + PartialEq, T: Record + PartialEq> Including<'static, R, T> {
    /// Deliver the list now (on this thread) and again after every commit that
    /// changes it: see the module docs. This handle's commits are delivered on
    /// the committing thread before the write's future resolves; other
    /// connections' on the thread that notices them (the `keel-feed` thread with
    /// `share_changes`), as [`Database::on_file_changes`](crate::Database::on_file_changes) describes. Only through a
    /// [`Database`](crate::Database) (not a snapshot or transaction), for a
    /// to-one relation ([`subscribe_many`](Self::subscribe_many) follows
    /// to-many ones).
    ///
    /// ```
    /// # use keel_query::{Database, StoreOptions};
    /// use keel_example_blog::rel::{Author, Post};
    /// use std::sync::{Arc, Mutex};
    /// # let dir = tempfile::tempdir().unwrap();
    /// # let db = Database::open_for::<Post>(dir.path().join("l.db"), StoreOptions::default())?;
    /// db.write(|t| {
    ///     t.insert(&Author::builder().id("ada").name("Ada").build())?;
    ///     t.insert(&Post::builder().id("p1").author("ada").build())
    /// }).wait()?;
    /// let names = Arc::new(Mutex::new(Vec::new()));
    /// let n2 = names.clone();
    /// let _sub = db.fetch::<Post>().including(Post::author_ref()).subscribe(move |u| {
    ///     n2.lock().unwrap().push((u.objects[0].1.as_ref().unwrap().name.clone(), u.diff.updated.to_vec()));
    /// })?;
    /// db.write(|t| t.update(&Author::builder().id("ada").name("Ada L.").build())).wait()?;
    /// assert_eq!(*names.lock().unwrap(), vec![
    ///     (Some("Ada".to_string()), vec![]),
    ///     (Some("Ada L.".to_string()), vec![0]),
    /// ]);
    /// # Ok::<(), keel_query::Error>(())
    /// ```
    pub fn subscribe(
        self,
        mut f: impl FnMut(IncludingUpdate<R, T>) + Send + 'static,
    ) -> Result<IncludingSubscription> {
        if self.rel.to_many() {
            return Err(Error::TypeMismatch {
                op: "subscribe including",
                collection: R::COLLECTION.to_owned(),
                message: format!(
                    "{} holds several keys: follow it with subscribe_many",
                    self.rel.path()
                ),
            });
        }
        self.subscribe_rows(
            |row| (row.r.clone(), row.named.first().cloned().flatten()),
            move |objects, diff| {
                f(IncludingUpdate {
                    objects: objects.to_vec(),
                    diff: diff.clone(),
                })
            },
        )
    }

    /// [`subscribe`](Self::subscribe) for a to-many reference (a vector of
    /// keys; a to-one reference works too): each `R` comes with the objects
    /// its keys name, in the vector's order, as
    /// [`all_many`](Including::all_many) reads them.
    ///
    /// ```
    /// # use keel_query::{Database, StoreOptions};
    /// use keel_example_blog::rel::{Post, Tag};
    /// use std::sync::{Arc, Mutex};
    /// # let dir = tempfile::tempdir().unwrap();
    /// # let db = Database::open_for::<Post>(dir.path().join("m.db"), StoreOptions::default())?;
    /// db.write(|t| {
    ///     t.insert(&Tag::builder().id("db").label("DB").build())?;
    ///     t.insert(&Post::builder().id("p1").tags(["db", "rust"]).build())
    /// }).wait()?;
    /// let seen = Arc::new(Mutex::new(Vec::new()));
    /// let s2 = seen.clone();
    /// let _sub = db.fetch::<Post>().including(Post::tags_ref()).subscribe_many(move |u| {
    ///     s2.lock().unwrap().push(u.objects[0].1.iter().map(|t| t.id.clone()).collect::<Vec<_>>());
    /// })?;
    /// db.write(|t| t.insert(&Tag::builder().id("rust").label("Rust").build())).wait()?;
    /// assert_eq!(*seen.lock().unwrap(), vec![vec!["db"], vec!["db", "rust"]]);
    /// # Ok::<(), keel_query::Error>(())
    /// ```
    pub fn subscribe_many(
        self,
        mut f: impl FnMut(IncludingManyUpdate<R, T>) + Send + 'static,
    ) -> Result<IncludingSubscription> {
        self.subscribe_rows(
            |row| (row.r.clone(), row.named.iter().flatten().cloned().collect()),
            move |objects, diff| {
                f(IncludingManyUpdate {
                    objects: objects.to_vec(),
                    diff: diff.clone(),
                })
            },
        )
    }

    /// The live list behind both: `pair` makes a delivered pair of a row,
    /// `deliver` hands the pairs and their diff over.
    fn subscribe_rows<P: Paired + Clone + PartialEq + Send + 'static>(
        self,
        pair: fn(&Row<R, T>) -> P,
        deliver: impl FnMut(&[P], &Diff) + Send + 'static,
    ) -> Result<IncludingSubscription> {
        let inner = through_db(&self.fetch.q.src)?;
        let spec: Spec = self.fetch.q.spec.clone();
        let rel: Relation<R, T> = self.rel.clone();
        let related_order = self.related_order.clone();
        let related_filter = self.related_filter.clone();
        // Ordered by or filtered through a referenced field, a change of a
        // referenced object can move rows in, out or around: no in-place
        // update then.
        let in_place = related_order.is_none() && related_filter.is_none();
        let counters = Arc::new(Counters::default());
        let read = {
            let weak = Arc::downgrade(&inner);
            let counters = Arc::clone(&counters);
            let spec = spec.clone();
            move || -> Result<Option<Shown<R, T>>> {
                let Some(inner) = weak.upgrade() else {
                    return Ok(None);
                };
                counters.reads.fetch_add(1, Ordering::Relaxed);
                let mut fetch = Fetch::<R>::new(Source::Db(inner));
                fetch.q.spec = spec.clone();
                let (keyed, every_key) = Including {
                    fetch,
                    rel: rel.clone(),
                    related_order: related_order.clone(),
                    related_filter: related_filter.clone(),
                }
                .run_keyed_all::<Vec<Option<T>>>()?;
                // Every key any matching `R` holds, shown or not: renaming one
                // can bring its rows into a filtered or ordered window.
                let named = every_key.iter().map(K::of).collect();
                let rows = keyed
                    .into_iter()
                    .map(|(r, ts, ks)| Row {
                        r,
                        keys: ks.iter().map(|i| K::of(&every_key[i])).collect(),
                        named: ts,
                    })
                    .collect();
                Ok(Some((rows, named)))
            }
        };
        start(
            &inner,
            Parts {
                spec,
                target: self.rel.target().to_owned(),
                in_place,
                read: Box::new(read),
                decode: |rowid, bytes| decode_row::<T>("subscribe including", rowid, bytes),
                pair,
            },
            counters,
            deliver,
        )
    }
}

/// The database a live list reads through: only a [`Database`](crate::db::database::Database)'s source.
fn through_db(src: &Source<'_>) -> Result<Arc<Inner>> {
    match src {
        Source::Db(inner) => Ok(Arc::clone(inner)),
        Source::Conn(inner, _, _) => Err(Error::Unsupported {
            op: "subscribe including",
            hint: "subscribe through the Database, not a snapshot or transaction",
            path: inner.path().to_path_buf(),
        }),
    }
}

/// A delivered pair: what identifies its row between two deliveries.
pub(crate) trait Paired {
    /// The row's identity.
    fn ident(&self) -> Option<K>;
}

impl<R: Record, X> Paired for (R, X) {
    fn ident(&self) -> Option<K> {
        self.0.primary_key().first().map(K::of)
    }
}

impl Paired for Included {
    fn ident(&self) -> Option<K> {
        Some(K::Int(self.object.rowid))
    }
}

/// A list's read of itself: `None` once its database is gone.
type Read<R, T> = dyn Fn() -> Result<Option<Shown<R, T>>> + Send + Sync;

/// How one list reads itself and makes its deliveries.
struct Parts<R, T, P> {
    spec: Spec,
    target: String,
    in_place: bool,
    read: Box<Read<R, T>>,
    /// A referenced object from a change's bytes.
    decode: fn(i64, &[u8]) -> Result<T>,
    pair: fn(&Row<R, T>) -> P,
}

/// A registered live list.
struct List<R, T, P, F> {
    id: u64,
    /// The list's collection (full name, as changes name it).
    coll: String,
    parts: Parts<R, T, P>,
    /// The list's own filter, for judging a commit itself.
    filter: Option<Filter>,
    counters: Arc<Counters>,
    state: Mutex<State<R, T, P, F>>,
}

impl<R, T, P, F> List<R, T, P, F> {
    fn lock(&self) -> MutexGuard<'_, State<R, T, P, F>> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// Register a list, read it and make its first delivery (on this thread).
fn start<R, T, P, F>(
    inner: &Arc<Inner>,
    parts: Parts<R, T, P>,
    counters: Arc<Counters>,
    deliver: F,
) -> Result<IncludingSubscription>
where
    R: Send + 'static,
    T: Clone + PartialEq + Send + 'static,
    P: Paired + Clone + PartialEq + Send + 'static,
    F: FnMut(&[P], &Diff) + Send + 'static,
{
    let coll = inner.coll(&parts.spec.collection, "subscribe including")?;
    let (coll_name, table) = (coll.name.clone(), coll.table);
    let filter = match &parts.spec.filter {
        Some(e) => Some(Filter::with_schema(
            Arc::clone(&inner.schema),
            &coll_name,
            e,
        )?),
        None => None,
    };
    let registry = Registry::of(inner);
    let target = parts.target.clone();
    let expr: Option<Expr> = parts.spec.filter.clone();
    let mut made: Option<Arc<List<R, T, P, F>>> = None;
    let own_filter = filter.clone();
    let id = registry.add(
        |id| {
            let list = Arc::new(List {
                id,
                coll: coll_name.clone(),
                parts,
                filter: own_filter,
                counters: Arc::clone(&counters),
                state: Mutex::new(State {
                    rows: Vec::new(),
                    named: HashSet::new(),
                    shown: Vec::new(),
                    f: deliver,
                }),
            });
            made = Some(Arc::clone(&list));
            list
        },
        &coll_name,
        table,
        &target,
        expr.as_ref(),
        filter,
    );
    let Some(list) = made else {
        unreachable!("Registry::add makes the list");
    };
    let sub = IncludingSubscription {
        registry: Arc::clone(&registry),
        id,
        counters,
    };
    // Registered first, then the first read under the state's lock: a commit
    // landing in between waits for the lock (the registry has it judge the
    // changes itself until `settled`) and is applied after the first delivery
    // (applying one the read already saw changes nothing), so none is lost.
    let mut first = list.lock();
    let (rows, named) = match (list.parts.read)() {
        Ok(Some(shown)) => shown,
        Ok(None) => {
            drop(first);
            return Err(Error::Closed {
                op: "subscribe including",
                path: inner.path().to_path_buf(),
            });
        }
        Err(e) => {
            drop(first);
            return Err(e);
        }
    };
    let shown: Vec<P> = rows.iter().map(list.parts.pair).collect();
    list.counters.deliveries.fetch_add(1, Ordering::Relaxed);
    (first.f)(&shown, &Diff::initial(shown.len()));
    registry.settled(id, &named);
    first.rows = rows;
    first.named = named;
    first.shown = shown;
    drop(first);
    Ok(sub)
}

impl<R, T, P, F> Listed for List<R, T, P, F>
where
    R: Send + 'static,
    T: Clone + PartialEq + Send + 'static,
    P: Paired + Clone + PartialEq + Send + 'static,
    F: FnMut(&[P], &Diff) + Send + 'static,
{
    fn commit(&self, registry: &Registry, changes: &[Change], verdict: Verdict) {
        if self.counters.cancelled.load(Ordering::SeqCst) {
            return;
        }
        let mut st = self.lock();
        let target = self.parts.target.as_str();
        let reread = match verdict {
            Verdict::Reread => true,
            Verdict::Referenced => false,
            Verdict::Judge => {
                // No changes: a commit that was not recorded: read again.
                let unknown = changes.is_empty();
                let own = changes
                    .iter()
                    .any(|c| c.collection == self.coll && may_show(self.filter.as_ref(), c));
                let named = changes.iter().any(|c| {
                    c.collection == target
                        && c.key.first().is_some_and(|k| st.named.contains(&K::of(k)))
                });
                if !unknown && !own && !named {
                    return;
                }
                unknown || own
            }
        };
        if self.counters.cancelled.load(Ordering::SeqCst) {
            return;
        }
        self.counters.visits.fetch_add(1, Ordering::Relaxed);
        if self.parts.in_place && !reread {
            self.update_in_place(&mut st, changes);
            return;
        }
        // Read with the lock held, so deliveries keep the commits' order.
        let Ok(Some((rows, named))) = (self.parts.read)() else {
            return; // closed, or a read error: the next commit tries again
        };
        let shown: Vec<P> = rows.iter().map(self.parts.pair).collect();
        let diff = Diff::by(&st.shown, &shown, P::ident, |a, b| a == b);
        st.rows = rows;
        if st.named != named {
            registry.rekey(self.id, &named);
            st.named = named;
        }
        if diff.is_empty() {
            return;
        }
        st.shown = shown;
        self.counters.deliveries.fetch_add(1, Ordering::Relaxed);
        let st = &mut *st;
        (st.f)(&st.shown, &diff);
    }
}

impl<R, T, P, F> List<R, T, P, F>
where
    T: Clone + PartialEq,
    P: Clone + PartialEq,
    F: FnMut(&[P], &Diff),
{
    /// Only referenced objects changed: the list's rows, order and filter
    /// depend on `R` alone, so the rows naming them take the new version in
    /// place, from the change itself (no read).
    fn update_in_place(&self, st: &mut State<R, T, P, F>, changes: &[Change]) {
        let mut touched = Vec::new();
        for c in changes.iter().filter(|c| c.collection == self.parts.target) {
            let Some(k) = c.key.first().map(K::of) else {
                continue;
            };
            if !st.named.contains(&k) {
                continue;
            }
            let new = match &c.new {
                Some(b) => match (self.parts.decode)(c.rowid, b) {
                    Ok(t) => Some(t),
                    Err(_) => continue,
                },
                None => None,
            };
            for (i, row) in st.rows.iter_mut().enumerate() {
                for (key, named) in row.keys.iter().zip(row.named.iter_mut()) {
                    if *key == k && *named != new {
                        named.clone_from(&new);
                        touched.push(i);
                    }
                }
            }
        }
        touched.sort_unstable();
        touched.dedup();
        let mut updated = Indices::default();
        for i in touched {
            let now = (self.parts.pair)(&st.rows[i]);
            if st.shown[i] != now {
                st.shown[i] = now;
                updated.push(i);
            }
        }
        if updated.is_empty() {
            return;
        }
        self.counters.deliveries.fetch_add(1, Ordering::Relaxed);
        (st.f)(
            &st.shown,
            &Diff {
                updated,
                ..Diff::default()
            },
        );
    }
}

impl Query<'static> {
    /// The untyped [`Including::subscribe`] / [`Including::subscribe_many`]:
    /// this query's objects with the objects its reference field `field`
    /// names ([`Included`], as [`Query::including_where`] reads them, with
    /// `related`'s condition on the referenced objects), delivered now (on
    /// this thread) and after every commit that changes the list, each time as
    /// the whole list and its diff against the last delivery (rows identified
    /// by rowid). What the FFI's live lists ride on. A field that is not a
    /// reference field of the collection (an inverse name too) is
    /// [`Error::UnknownField`].
    pub fn subscribe_including(
        self,
        field: &str,
        related: Option<Expr>,
        deliver: impl FnMut(&[Included], &Diff) + Send + 'static,
    ) -> Result<IncludingSubscription> {
        let op = "subscribe including";
        let inner = through_db(&self.src)?;
        let c = inner.coll(&self.spec.collection, op)?;
        let link = c
            .links
            .outgoing
            .iter()
            .find(|o| o.field == field)
            .ok_or_else(|| Error::UnknownField {
                op,
                collection: c.name.clone(),
                message: format!("{} has no reference field {field:?}", c.name),
            })?;
        let target = link.target.clone();
        let in_place = related.is_none();
        let counters = Arc::new(Counters::default());
        let spec = self.spec.clone();
        let read = {
            let weak = Arc::downgrade(&inner);
            let counters = Arc::clone(&counters);
            let (spec, field) = (spec.clone(), field.to_owned());
            move || -> Result<Option<Shown<StoredObject, StoredObject>>> {
                let Some(inner) = weak.upgrade() else {
                    return Ok(None);
                };
                counters.reads.fetch_add(1, Ordering::Relaxed);
                let q = Query {
                    src: Source::Db(inner),
                    spec: spec.clone(),
                };
                let (rows, wanted, at) = q.including_keyed(&field, related.as_ref())?;
                let named = wanted.iter().map(K::of).collect();
                let rows = rows
                    .into_iter()
                    .map(|(r, keys)| Row {
                        r,
                        keys: keys.iter().map(|i| K::of(&wanted[i])).collect(),
                        named: keys.iter().map(|i| at[i].clone()).collect(),
                    })
                    .collect();
                Ok(Some((rows, named)))
            }
        };
        start(
            &inner,
            Parts {
                spec,
                target,
                in_place,
                read: Box::new(read),
                decode: |rowid, bytes| {
                    Ok(StoredObject {
                        rowid,
                        bytes: bytes.to_vec(),
                    })
                },
                pair: |row| Included {
                    object: row.r.clone(),
                    related: row.named.iter().flatten().cloned().collect(),
                },
            },
            counters,
            deliver,
        )
    }
}
