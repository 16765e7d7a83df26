//! Live queries across a relation (issue 30): [`Including::subscribe`] keeps a
//! list of `(R, Option<T>)` pairs current when either side changes — a post
//! inserted, or the author a shown post names renamed — with row-level diffs.
//!
//! A facade extension: it registers a commit hook
//! ([`Database::on_commit_changes`]) that looks at each committed closure's
//! changes. A change is relevant when it is in `R`'s collection, or in `T`'s
//! with a key some shown `R` names (a hash lookup per change: commits that touch
//! neither cost nothing more). When a closure changed only referenced objects
//! (an author renamed), the rows naming them take the new version from the
//! change itself, with no read: an `updated` row for every post showing it (the
//! rows, their order and the filter depend on `R` alone). When it changed `R`s
//! too, the list is re-read (two statements, as [`Including::all`]) and
//! delivered with the diff against the last delivery, if anything differs.

use std::collections::HashSet;
use std::sync::{Arc, Mutex};

use keel_schema::{Record, Relation};

use crate::db::{ChangeHook, Database};
use crate::error::{Error, Result};
use crate::query::{decode_row, Fetch, Source, Spec};
use crate::relation::{Including, K};
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

/// A live query across a relation; dropping it (or [`cancel`](Self::cancel))
/// stops deliveries after the one in progress, if any.
#[must_use = "dropping the subscription ends it"]
pub struct IncludingSubscription {
    hook: Option<ChangeHook>,
}

impl IncludingSubscription {
    /// End the subscription.
    pub fn cancel(self) {}
}

impl Drop for IncludingSubscription {
    fn drop(&mut self) {
        if let Some(h) = self.hook.take() {
            h.remove();
        }
    }
}

/// What a live list shows: the pairs, every key the `R`s name, and the key
/// each row names.
type Shown<R, T> = (Vec<(R, Option<T>)>, HashSet<K>, Vec<Option<K>>);

struct State<R, T, F> {
    rows: Vec<(R, Option<T>)>,
    /// Every key the shown `R`s name, dangling ones included (their target may
    /// appear).
    named: HashSet<K>,
    /// The key each row names (parallel to `rows`).
    keys: Vec<Option<K>>,
    f: F,
}

impl<R: Record + PartialEq, T: Record + PartialEq> Including<'static, R, T> {
    /// Deliver the list now (on this thread) and again after every commit that
    /// changes it: see the module docs. Only through a
    /// [`Database`](crate::Database) (not a snapshot or transaction), for a
    /// to-one relation.
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
    ///     n2.lock().unwrap().push((u.objects[0].1.as_ref().unwrap().name.clone(), u.diff.updated));
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
        f: impl FnMut(IncludingUpdate<R, T>) + Send + 'static,
    ) -> Result<IncludingSubscription> {
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
        if self.rel.to_many() {
            return Err(Error::TypeMismatch {
                op: "subscribe including",
                collection: R::COLLECTION.to_owned(),
                message: format!(
                    "{} holds several keys: live lists follow to-one references only",
                    self.rel.path()
                ),
            });
        }
        let db = Database::from_inner(Arc::clone(&inner));
        let spec: Spec = self.fetch.q.spec.clone();
        let rel: Relation<R, T> = self.rel.clone();
        let related_order = self.related_order.clone();
        // Ordered by a referenced field, a rename can move rows: no in-place
        // update then.
        let in_place = related_order.is_none();
        let read = {
            let weak = db.weak();
            move || -> Result<Option<Shown<R, T>>> {
                let Some(inner) = weak.upgrade() else {
                    return Ok(None);
                };
                let mut fetch = Fetch::<R>::new(Source::Db(inner));
                fetch.q.spec = spec.clone();
                let rows = Including {
                    fetch,
                    rel: rel.clone(),
                    related_order: related_order.clone(),
                }
                .run_keyed()?;
                let named = rows
                    .iter()
                    .flat_map(|(_, _, ks)| ks.iter().map(K::of))
                    .collect();
                let keys = rows
                    .iter()
                    .map(|(_, _, ks)| ks.first().map(K::of))
                    .collect();
                Ok(Some((
                    rows.into_iter()
                        .map(|(r, ts, _)| (r, ts.into_iter().next()))
                        .collect(),
                    named,
                    keys,
                )))
            }
        };
        // The hook first, then the first read under the state's lock: a commit
        // landing in between waits for the lock in its hook and is applied
        // after the first delivery (applying one the read already saw changes
        // nothing), so none is lost.
        let read = Arc::new(read);
        let state = Arc::new(Mutex::new(State {
            rows: Vec::new(),
            named: Default::default(),
            keys: Vec::new(),
            f,
        }));
        let mut first = state.lock().unwrap_or_else(|p| p.into_inner());
        let target = self.rel.target();
        let (hook_state, hook_read) = (Arc::clone(&state), Arc::clone(&read));
        let hook = db.on_commit_changes(move |changes| {
            let (state, read) = (&hook_state, &hook_read);
            // No changes: a commit that was not recorded (it started before this
            // hook): read again.
            let unknown = changes.is_empty();
            let relevant = unknown || {
                let st = state.lock().unwrap_or_else(|p| p.into_inner());
                changes.iter().any(|c| {
                    c.collection == R::COLLECTION
                        || (c.collection == target
                            && c.key.first().is_some_and(|k| st.named.contains(&K::of(k))))
                })
            };
            if !relevant {
                return;
            }
            // Only referenced objects changed: the list's rows, order and filter
            // depend on `R` alone, so the rows naming them take the new version
            // in place, from the change itself (no read).
            if in_place && !unknown && changes.iter().all(|c| c.collection != R::COLLECTION) {
                let mut st = state.lock().unwrap_or_else(|p| p.into_inner());
                let mut rows = st.rows.clone();
                let mut updated = Vec::new();
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
                    for (i, (_, t)) in rows.iter_mut().enumerate() {
                        if st.keys[i].as_ref() == Some(&k) && *t != new {
                            *t = new.clone();
                            updated.push(i);
                        }
                    }
                }
                if updated.is_empty() {
                    return;
                }
                updated.sort_unstable();
                updated.dedup();
                st.rows = rows.clone();
                (st.f)(IncludingUpdate {
                    objects: rows,
                    diff: Diff {
                        updated,
                        ..Diff::default()
                    },
                });
                return;
            }
            let Ok(Some((rows, named, keys))) = read() else {
                return; // closed, or a read error: the next commit tries again
            };
            let mut st = state.lock().unwrap_or_else(|p| p.into_inner());
            let diff = Diff::by(
                &st.rows,
                &rows,
                |(r, _)| r.primary_key().first().map(K::of),
                |a, b| a == b,
            );
            st.named = named;
            st.keys = keys;
            if diff.is_empty() {
                return;
            }
            st.rows = rows.clone();
            (st.f)(IncludingUpdate {
                objects: rows,
                diff,
            });
        });
        // On an error the lock goes first: dropping the hook waits for a hook
        // call that may be waiting for this lock.
        let (rows, named, keys) = match read() {
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
        (first.f)(IncludingUpdate {
            objects: rows.clone(),
            diff: Diff::initial(rows.len()),
        });
        first.rows = rows;
        first.named = named;
        first.keys = keys;
        drop(first);
        Ok(IncludingSubscription { hook: Some(hook) })
    }
}
