//! Live queries across a relation: [`Including::subscribe`] keeps a
//! list of `(R, Option<T>)` pairs current when either side changes — a post
//! inserted, or the author a shown post names renamed — with row-level diffs;
//! [`Including::subscribe_many`] keeps `(R, Vec<T>)` pairs current across a
//! to-many reference (a post's tags) the same way.
//!
//! A facade extension: it registers a change hook
//! ([`Database::on_file_changes`]) that looks at each committed closure's
//! changes — this handle's, and other connections' as a catch-up reads them
//! back (so a list follows another process as live queries do; without the
//! change feed, an empty slice: read again). A change is relevant when it is in `R`'s collection, or in `T`'s
//! with a key some shown `R` names (a hash lookup per change: commits that touch
//! neither cost nothing more). A change in `R`'s collection is relevant only when
//! the list's filter holds for its old or its new version (evaluated in memory,
//! as the subscription hub does), or when its old version is not known (another
//! process's commit): a post no list shows, before or after, reads nothing
//! again. When a closure changed only referenced objects
//! (an author renamed), the rows naming them take the new version from the
//! change itself, with no read: an `updated` row for every post showing it (the
//! rows, their order and the filter depend on `R` alone; a to-many row keeps its
//! vector's order, a deleted or missing object leaves it). When it changed `R`s
//! too, the list is re-read (two statements, as [`Including::all`]) and
//! delivered with the diff against the last delivery, if anything differs.

use std::collections::HashSet;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use keel_schema::{Record, Relation};

use crate::base::change::{Change, ChangeOp};
use crate::base::error::{Error, Result};
use crate::base::ref_keys::K;
use crate::db::database::{ChangeHook, Database};
use crate::query::eval::Filter;
use crate::query::fetch::{decode_row, Fetch, Source, Spec};
use crate::relations::prefetch::Including;
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
}

#[derive(Default)]
struct Counters {
    reads: AtomicU64,
    deliveries: AtomicU64,
}

/// A live query across a relation; dropping it (or [`cancel`](Self::cancel))
/// stops deliveries after the one in progress, if any.
#[must_use = "dropping the subscription ends it"]
pub struct IncludingSubscription {
    hook: Option<ChangeHook>,
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
        if let Some(h) = self.hook.take() {
            h.remove();
        }
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

struct State<R, T, X, F> {
    rows: Vec<Row<R, T>>,
    named: HashSet<K>,
    /// The last delivery's pairs (what the next diff is against).
    shown: Vec<(R, X)>,
    f: F,
}

impl<R: Record + PartialEq, T: Record + PartialEq> Including<'static, R, T> {
    /// Deliver the list now (on this thread) and again after every commit that
    /// changes it: see the module docs. This handle's commits are delivered on
    /// the committing thread before the write's future resolves; other
    /// connections' on the thread that notices them (the `keel-feed` thread with
    /// `share_changes`), as [`Database::on_file_changes`] describes. Only through a
    /// [`Database`] (not a snapshot or transaction), for a
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
            |row| row.named.first().cloned().flatten(),
            move |objects, diff| f(IncludingUpdate { objects, diff }),
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
            |row| row.named.iter().flatten().cloned().collect(),
            move |objects, diff| f(IncludingManyUpdate { objects, diff }),
        )
    }

    /// The live list behind both: `related` makes what a delivered pair
    /// holds of a row's named objects, `deliver` hands the pairs and their
    /// diff over.
    fn subscribe_rows<X: Clone + PartialEq + Send + 'static>(
        self,
        related: fn(&Row<R, T>) -> X,
        deliver: impl FnMut(Vec<(R, X)>, Diff) + Send + 'static,
    ) -> Result<IncludingSubscription> {
        let pair = move |row: &Row<R, T>| (row.r.clone(), related(row));
        let inner = match &self.fetch.q.src {
            Source::Db(inner) => Arc::clone(inner),
            Source::Conn(inner, _, _) => {
                return Err(Error::Unsupported {
                    op: "subscribe including",
                    hint: "subscribe through the Database, not a snapshot or transaction",
                    path: inner.path().to_path_buf(),
                })
            }
        };
        let db = Database::from_inner(Arc::clone(&inner));
        let spec: Spec = self.fetch.q.spec.clone();
        let filter = match &spec.filter {
            Some(e) => Some(Filter::with_schema(
                Arc::clone(&inner.schema),
                &spec.collection,
                e,
            )?),
            None => None,
        };
        let counters = Arc::new(Counters::default());
        let rel: Relation<R, T> = self.rel.clone();
        let related_order = self.related_order.clone();
        let related_filter = self.related_filter.clone();
        // Ordered by or filtered through a referenced field, a change of a
        // referenced object can move rows in, out or around: no in-place
        // update then.
        let in_place = related_order.is_none() && related_filter.is_none();
        let read = {
            let weak = db.weak();
            let counters = Arc::clone(&counters);
            move || -> Result<Option<Shown<R, T>>> {
                let Some(inner) = weak.upgrade() else {
                    return Ok(None);
                };
                counters.reads.fetch_add(1, Ordering::Relaxed);
                let mut fetch = Fetch::<R>::new(Source::Db(inner));
                fetch.q.spec = spec.clone();
                let keyed = Including {
                    fetch,
                    rel: rel.clone(),
                    related_order: related_order.clone(),
                    related_filter: related_filter.clone(),
                }
                .run_keyed_all::<Vec<Option<T>>>()?;
                let (keyed, every_key) = keyed;
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
        // The hook first, then the first read under the state's lock: a commit
        // landing in between waits for the lock in its hook and is applied
        // after the first delivery (applying one the read already saw changes
        // nothing), so none is lost.
        let read = Arc::new(read);
        let state = Arc::new(Mutex::new(State {
            rows: Vec::new(),
            named: HashSet::new(),
            shown: Vec::new(),
            f: deliver,
        }));
        let mut first = state.lock().unwrap_or_else(|p| p.into_inner());
        let target = self.rel.target();
        let (hook_state, hook_read) = (Arc::clone(&state), Arc::clone(&read));
        let hook_counters = Arc::clone(&counters);
        let hook = db.on_file_changes(move |changes| {
            let (state, read) = (&hook_state, &hook_read);
            // No changes: a commit that was not recorded (it started before this
            // hook): read again.
            let unknown = changes.is_empty();
            let mut st = state.lock().unwrap_or_else(|p| p.into_inner());
            let relevant = unknown
                || changes.iter().any(|c| {
                    (c.collection == R::COLLECTION && may_show(filter.as_ref(), c))
                        || (c.collection == target
                            && c.key.first().is_some_and(|k| st.named.contains(&K::of(k))))
                });
            if !relevant {
                return;
            }
            // Only referenced objects changed: the list's rows, order and filter
            // depend on `R` alone, so the rows naming them take the new version
            // in place, from the change itself (no read).
            let own_changed = changes
                .iter()
                .any(|c| c.collection == R::COLLECTION && may_show(filter.as_ref(), c));
            if in_place && !unknown && !own_changed {
                let mut touched = Vec::new();
                for c in changes.iter().filter(|c| c.collection == target) {
                    let Some(k) = c.key.first().map(K::of) else {
                        continue;
                    };
                    if !st.named.contains(&k) {
                        continue;
                    }
                    let new = match &c.new {
                        Some(b) => match decode_row::<T>("subscribe including", c.rowid, b) {
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
                let st = &mut *st;
                let mut updated = Indices::default();
                for i in touched {
                    let now = pair(&st.rows[i]);
                    if st.shown[i] != now {
                        st.shown[i] = now;
                        updated.push(i);
                    }
                }
                if !updated.is_empty() {
                    hook_counters.deliveries.fetch_add(1, Ordering::Relaxed);
                    (st.f)(
                        st.shown.clone(),
                        Diff {
                            updated,
                            ..Diff::default()
                        },
                    );
                }
                return;
            }
            // Read with the lock held, so deliveries keep the commits' order.
            let Ok(Some((rows, named))) = read() else {
                return; // closed, or a read error: the next commit tries again
            };
            let shown: Vec<(R, X)> = rows.iter().map(pair).collect();
            let diff = Diff::by(
                &st.shown,
                &shown,
                |(r, _)| r.primary_key().first().map(K::of),
                |a, b| a == b,
            );
            st.rows = rows;
            st.named = named;
            if diff.is_empty() {
                return;
            }
            st.shown = shown.clone();
            hook_counters.deliveries.fetch_add(1, Ordering::Relaxed);
            (st.f)(shown, diff);
        });
        // On an error the lock goes first: dropping the hook waits for a hook
        // call that may be waiting for this lock.
        let (rows, named) = match read() {
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
        let shown: Vec<(R, X)> = rows.iter().map(pair).collect();
        let n = shown.len();
        counters.deliveries.fetch_add(1, Ordering::Relaxed);
        (first.f)(shown.clone(), Diff::initial(n));
        first.rows = rows;
        first.named = named;
        first.shown = shown;
        drop(first);
        Ok(IncludingSubscription {
            hook: Some(hook),
            counters,
        })
    }
}
