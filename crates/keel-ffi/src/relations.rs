//! Live queries across a relation through the FFI: the untyped form of
//! keel-query's `Including::subscribe` and `subscribe_many`, for the Swift and
//! Kotlin typed layers (`KeelRelations.swift`, `Relations.kt`) and Python.
//!
//! [`Query::subscribe_including`] delivers the query's objects with the objects
//! their reference field names ([`IncludedObject`]: one for a to-one field, the
//! vector's in its order for a to-many one), at once and again after every
//! commit that changes the list — this handle's, or another connection's
//! (another process with `share_changes`, through keel-query's
//! `Database::on_file_changes`). A delivery carries the row-level diff against
//! the last one and only the rows it names as inserted or updated
//! ([`IncludingUpdate::changed`]): the foreign list applies the diff to what it
//! shows (`Diff.applyTo` in Kotlin, `Diff.apply(to:)` in Swift), so a rename
//! that changes one row of a thousand crosses the FFI as one row.
//!
//! A list through a reference field (filtered through it or not) is the core's
//! live list (`Query::subscribe_including`): one registry per database finds
//! the lists a commit can change, and an author's rename edits their rows in
//! place, with no read. An inverse name, or an order by a related field, is
//! served here by re-reading the list on each relevant commit (a change in
//! either collection; a change of a referenced object only when a shown row
//! names it) and diffing it against the last delivery.

use std::collections::HashSet;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::ThreadId;

use keel_query::{Change, ChangeHook};
use keel_schema::{FieldPath, Value};

use keel_query::eval::{order_cmp, SqlValue};

use crate::batch::{pack_including, Deliveries, Ended, PackRow, Sink};
use crate::bytes::Bytes;
use crate::callbacks::{guarded, Foreign};
use crate::db::Query;
use crate::error::{CallbackError, KeelError};
use crate::expr::{Expr, Resolver};
use crate::live::{Counted, Diff, Ends};
use crate::types::Value as FfiValue;
use crate::types::{IncludedObject, StoredObject};

/// One delivery of [`Query::subscribe_including`]: the diff against the
/// previous delivery (the first lists every row as inserted) and the rows it
/// inserts or updates. Rows are identified by the referring object's rowid; a
/// row whose object or referenced objects changed is `updated`. The previous
/// list with `diff` applied, taking each inserted or updated row from
/// `changed`, is the new list.
#[derive(Debug, Clone, PartialEq, Eq, uniffi::Record)]
pub struct IncludingUpdate {
    /// The number of rows of the new list.
    pub count: u64,
    /// Changes against the previous delivery.
    pub diff: Diff,
    /// The new list's rows at `diff.inserted` and `diff.updated`, once each,
    /// ascending by index.
    pub changed: Vec<ChangedRow>,
}

/// One row of a delivery of [`Query::subscribe_including`].
#[derive(Debug, Clone, PartialEq, Eq, uniffi::Record)]
pub struct ChangedRow {
    /// Its index in the new list.
    pub index: u64,
    /// The object with the object (to-one) or objects (to-many, in the order
    /// of its keys) its reference names; none when absent or naming no object.
    pub row: IncludedObject,
}

/// The delivery of a new list `rows` that `diff` makes of the previous one.
fn delivery(
    count: usize,
    diff: &keel_query::Diff,
    row: impl Fn(usize) -> IncludedObject,
) -> IncludingUpdate {
    let mut at: Vec<usize> = diff
        .inserted
        .iter()
        .chain(diff.updated.iter())
        .copied()
        .collect();
    at.sort_unstable();
    at.dedup();
    IncludingUpdate {
        count: count as u64,
        diff: Diff::from(diff),
        changed: at
            .into_iter()
            .filter(|&i| i < count)
            .map(|i| ChangedRow {
                index: i as u64,
                row: row(i),
            })
            .collect(),
    }
}

/// A core row as the FFI's.
fn included_one(i: &keel_query::Included) -> IncludedObject {
    let stored = |o: &keel_query::StoredObject| StoredObject {
        rowid: o.rowid,
        bytes: Bytes(o.bytes.clone()),
    };
    IncludedObject {
        object: stored(&i.object),
        related: i.related.iter().map(stored).collect(),
    }
}

/// Receives the deliveries of [`Query::subscribe_including`]: the first **on the
/// subscribing thread** before `subscribe_including` returns, later ones **on
/// keel's writer thread**, after the commit — or, for another process's commits
/// with `share_changes`, **on keel's `keel-feed` thread** once it has read them. Same rules as `QueryListener`: keep
/// it short, never wait for a write inside it. Exceptions are caught and ignored.
#[uniffi::export(callback_interface)]
pub trait IncludingListener: Send + Sync {
    /// A new list.
    fn on_update(&self, update: IncludingUpdate) -> Result<(), CallbackError>;
}

/// A live query across a relation. `cancel()` ends it: once `cancel` returns its
/// listener is never called again (a delivery running at that moment is waited
/// for, unless `cancel` is called from inside the listener). Dropping the last
/// reference cancels too.
#[derive(uniffi::Object)]
pub struct IncludingSubscription {
    /// The engine's list or hook, and this subscription's place in
    /// `live_subscriptions`, both given up at the cancel.
    live: Mutex<Option<(Live, Counted)>>,
    ends: Ends,
    gate: Arc<Gate>,
}

/// What keeps a list live.
enum Live {
    /// The core's live list.
    Core(#[allow(dead_code)] keel_query::IncludingSubscription),
    /// This module's hook, re-reading the list.
    Hook(ChangeHook),
}

/// The listener's side of a subscription: whether it may still be called, and
/// where its deliveries go.
struct Gate {
    ended: Ended,
    to: To,
}

/// Where a subscription's deliveries go.
enum To {
    /// Its own listener, one call per delivery: held through each call (so
    /// `cancel` waits for a delivery in progress), with the thread running one
    /// (`cancel` from inside the listener must not wait for itself).
    Listener {
        lock: Mutex<()>,
        delivering: Mutex<Option<ThreadId>>,
        listener: Arc<Foreign<dyn IncludingListener>>,
    },
    /// A sink of batches (`batch.rs`), under the foreign side's id, attached
    /// to the database `key` until the subscription is cancelled.
    Sink {
        sink: Arc<Sink>,
        id: u64,
        key: usize,
    },
}

impl Gate {
    fn new(to: To) -> Arc<Gate> {
        Arc::new(Gate {
            ended: Arc::new(AtomicBool::new(false)),
            to,
        })
    }

    /// Deliver the new list `rows` that `diff` makes of the previous one.
    fn deliver<R: PackRow>(
        &self,
        rows: &[R],
        diff: &keel_query::Diff,
        row: impl Fn(&R) -> IncludedObject,
    ) {
        match &self.to {
            To::Listener {
                lock,
                delivering,
                listener,
            } => {
                let active = lock.lock().unwrap_or_else(|p| p.into_inner());
                if self.ended.load(Ordering::SeqCst) {
                    return;
                }
                let update = delivery(rows.len(), diff, |i| row(&rows[i]));
                *delivering.lock().unwrap_or_else(|p| p.into_inner()) =
                    Some(std::thread::current().id());
                guarded("including subscription", || listener.on_update(update));
                *delivering.lock().unwrap_or_else(|p| p.into_inner()) = None;
                drop(active);
            }
            To::Sink { sink, id, .. } => {
                sink.deliver(&self.ended, *id, |out| pack_including(out, rows, diff));
            }
        }
    }

    /// Ended: wait for a delivery in progress (none starts after this),
    /// unless called from inside it.
    fn end(&self) {
        self.ended.store(true, Ordering::SeqCst);
        match &self.to {
            To::Listener {
                lock, delivering, ..
            } => {
                let me = std::thread::current().id();
                let inside = *delivering.lock().unwrap_or_else(|p| p.into_inner()) == Some(me);
                if !inside {
                    drop(lock.lock().unwrap_or_else(|p| p.into_inner()));
                }
            }
            To::Sink { sink, .. } => sink.wait_idle(),
        }
    }
}

impl std::fmt::Debug for IncludingSubscription {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("IncludingSubscription")
            .field("active", &self.is_active())
            .finish()
    }
}

#[uniffi::export]
impl IncludingSubscription {
    /// End the subscription (idempotent).
    pub fn cancel(&self) {
        // Taken out of the lock first: ending the list must not wait for it.
        let live = self.live.lock().unwrap_or_else(|p| p.into_inner()).take();
        if let Some((live, counted)) = live {
            match live {
                Live::Core(sub) => drop(sub),
                Live::Hook(h) => h.remove(),
            }
            drop(counted);
            if let To::Sink { sink, key, .. } = &self.gate.to {
                sink.detach(*key);
            }
        }
        self.gate.end();
        self.ends.cancel();
    }

    /// Returns when the subscription is cancelled; throws `Closed` once its
    /// database has closed (after the last delivery).
    pub async fn ended(&self) -> Result<(), KeelError> {
        self.ends.ended("including subscription").await
    }

    /// False once cancelled or once its database closed.
    pub fn is_active(&self) -> bool {
        self.ends.live()
            && self
                .live
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .is_some()
    }
}

impl Drop for IncludingSubscription {
    fn drop(&mut self) {
        self.cancel();
    }
}

/// What a re-read list shows, and what its hook needs to judge a commit.
struct State {
    rows: Vec<IncludedObject>,
    /// Every key the shown objects name, dangling ones included (their target
    /// may appear), as [`key_id`]s.
    named: HashSet<String>,
}

/// The engine's rows of an `including` read as the FFI's.
fn included(rows: Vec<keel_query::Included>) -> Vec<IncludedObject> {
    rows.into_iter()
        .map(|i| IncludedObject {
            object: i.object.into(),
            related: i.related.into_iter().map(Into::into).collect(),
        })
        .collect()
}

/// A hashable identity for a key value (`Value` holds floats, so it is not
/// `Hash`; reference keys are strings, integers or bytes).
fn key_id(v: &Value) -> String {
    format!("{v:?}")
}

/// The reference field `field` of `query`'s collection: the collection's full
/// name, the field's path and the referenced collection's full name.
/// The reference field `field` of the query's collection: the collection, the
/// field's path, the target collection and whether it holds several keys. A
/// to-many field is `InvalidArgument` unless `many` allows it.
impl Query {
    /// What `all_including(field)` returns: the engine's two reads, then, with
    /// `order_by_related`, every match sorted by the related field and cut to
    /// the query's window.
    pub(crate) fn including_rows(&self, field: &str) -> Result<Vec<IncludedObject>, KeelError> {
        let related = self.related_expr(field)?;
        let Some((by, descending)) = &self.related_order else {
            return Ok(included(
                self.build_checked()?
                    .including_where(field, related.as_ref())?,
            ));
        };
        let (_, _, target, _) = reference(self, field, true)?;
        let schema = Arc::clone(self.db.schema());
        let path = Resolver::new(&schema, &target, "order by related")?.path(by)?;
        let reader = schema
            .reader(&target)
            .map_err(|e| KeelError::InvalidArgument {
                message: e.to_string(),
            })?;
        // Every match is read to sort it; the window is cut after.
        let unwindowed = self.without_window();
        let rows = included(
            unwindowed
                .build_checked()?
                .including_where(field, related.as_ref())?,
        );
        // The value each row sorts by: its first related object's field (none:
        // absent), read once per row.
        let mut keyed: Vec<(Value, IncludedObject)> = rows
            .into_iter()
            .map(|r| {
                let v = r
                    .related
                    .first()
                    .and_then(|o| reader.open(&o.bytes).ok())
                    .map_or(Value::Null, |o| o.get(&path));
                (v, r)
            })
            .collect();
        // SQL's order (absent first ascending); stable, so equal values keep
        // the query's own order, as the core's `order_by_related` does.
        keyed.sort_by(|(a, _), (b, _)| {
            let o = order_cmp(SqlValue::from_value(a), SqlValue::from_value(b));
            if *descending {
                o.reverse()
            } else {
                o
            }
        });
        let (offset, limit) = self.window();
        let skip = usize::try_from(offset).unwrap_or(usize::MAX);
        let take = limit.map_or(usize::MAX, |l| usize::try_from(l).unwrap_or(usize::MAX));
        Ok(keyed
            .into_iter()
            .map(|(_, r)| r)
            .skip(skip)
            .take(take)
            .collect())
    }

    /// The engine expression of this query's `where_related` condition, for
    /// a read including `field` (none without one; another field is an error).
    pub(crate) fn related_expr(&self, field: &str) -> Result<Option<keel_query::Expr>, KeelError> {
        let Some((on, filter)) = &self.related else {
            return Ok(None);
        };
        if on != field {
            return Err(KeelError::InvalidArgument {
                message: format!(
                    "this query filters through {on:?}; including {field:?} would ignore that"
                ),
            });
        }
        let (_, _, target, _) = reference(self, field, true)?;
        let schema = Arc::clone(self.db.schema());
        Ok(Some(
            Resolver::new(&schema, &target, "where related")?.expr(filter)?,
        ))
    }
}

fn reference(
    query: &Query,
    field: &str,
    many: bool,
) -> Result<(String, Option<FieldPath>, String, bool), KeelError> {
    let schema = query.db.schema();
    let invalid = |message: String| KeelError::InvalidArgument { message };
    let coll = schema
        .collection(&query.collection)
        .ok_or_else(|| invalid(format!("no collection named {:?}", query.collection)))?;
    let own = schema.tables[coll.table]
        .fields
        .iter()
        .find(|f| f.name == field);
    if own.is_none() && many {
        // The way back along a reference declared `inverse: "<field>"`: the
        // referring collection, several objects per row, no path here.
        let back = schema.references().into_iter().find(|(_, f)| {
            f.references
                .as_ref()
                .is_some_and(|r| r.target == coll.name && r.inverse.as_deref() == Some(field))
        });
        if let Some((from, _)) = back {
            return Ok((coll.name.clone(), None, from.name.clone(), true));
        }
    }
    let f = own.ok_or_else(|| invalid(format!("{} has no field {field:?}", coll.name)))?;
    let r = f.references.as_ref().ok_or_else(|| {
        invalid(format!(
            "{}.{field} is not a reference field (no `references:`)",
            coll.name
        ))
    })?;
    if r.to_many && !many {
        return Err(invalid(format!(
            "{}.{field} holds several keys: a filter through a reference follows to-one references only",
            coll.name
        )));
    }
    let path = schema
        .reader(&coll.name)
        .and_then(|t| t.path(field))
        .map_err(|e| invalid(e.to_string()))?;
    Ok((coll.name.clone(), Some(path), r.target.clone(), r.to_many))
}

/// The list now, and the keys its objects name.
fn read(
    query: &Query,
    coll: &str,
    path: Option<&FieldPath>,
    field: &str,
    to_many: bool,
) -> Result<(Vec<IncludedObject>, HashSet<String>), KeelError> {
    let rows = query.all_including(field.to_owned())?;
    let Some(path) = path else {
        // An inverse: every change of the referring collection is relevant.
        return Ok((rows, HashSet::new()));
    };
    let schema = query.db.schema();
    let reader = schema
        .reader(coll)
        .map_err(|e| KeelError::InvalidArgument {
            message: e.to_string(),
        })?;
    let mut named = HashSet::new();
    for r in &rows {
        // Stored objects were verified on write; one that does not open names
        // nothing the hook could match.
        let Ok(obj) = reader.open(&r.object.bytes) else {
            continue;
        };
        if to_many {
            let id = path.steps().first().map_or(0, |s| s.id());
            for k in obj.elements(id).unwrap_or_default() {
                named.insert(key_id(&k));
            }
        } else {
            let v = obj.get(path);
            if !v.is_null() {
                named.insert(key_id(&v));
            }
        }
    }
    Ok((rows, named))
}

#[uniffi::export]
impl Query {
    /// A filter for this query's collection keeping the objects whose to-one
    /// reference field `field` names an object (of the referenced collection)
    /// that matches `filter`, an expression over the referenced collection's
    /// fields (`Post.author` → `Author.name == "Ada"`). The referenced objects
    /// are read **now**, once: the result is `field IN (their keys)`, which a
    /// later write to the referenced collection does not change (re-make it, or
    /// subscribe with the referenced objects through `subscribe_including`).
    /// A field that is not a to-one reference is `InvalidArgument`; a bad
    /// filter is the error a query over the referenced collection gives.
    pub fn through(&self, field: String, filter: Arc<Expr>) -> Result<Arc<Expr>, KeelError> {
        crate::db::sync_call(|| {
            let (_, _, target, _) = reference(self, &field, false)?;
            let schema = Arc::clone(self.db.schema());
            let r = Resolver::new(&schema, &target, "filter through")?;
            let tc = schema
                .collection(&target)
                .ok_or_else(|| KeelError::InvalidArgument {
                    message: format!("no collection named {target:?}"),
                })?;
            let key = match tc.primary_key.as_slice() {
                [id] => schema.tables[tc.table]
                    .fields
                    .iter()
                    .find(|f| f.id == *id)
                    .map(|f| f.name.clone()),
                _ => None,
            }
            .ok_or_else(|| KeelError::InvalidArgument {
                message: format!("{target} has no single-field primary key"),
            })?;
            let reader = schema
                .reader(&target)
                .map_err(|e| KeelError::InvalidArgument {
                    message: e.to_string(),
                })?;
            let kpath = reader.path(&key).map_err(|e| KeelError::InvalidArgument {
                message: e.to_string(),
            })?;
            let mut keys: Vec<FfiValue> = Vec::new();
            for o in self.db.query(&target).filter(r.expr(&filter)?).all()? {
                let obj = reader
                    .open(&o.bytes)
                    .map_err(|e| KeelError::InvalidObject {
                        message: format!("stored {target} does not open: {e}"),
                    })?;
                keys.push(obj.get(&kpath).into());
            }
            Ok(Expr::is_in(field, keys))
        })
    }

    /// This query keeping only the objects whose reference field `field`
    /// names an object matching `filter` (an expression over the referenced
    /// collection's fields; to-many: at least one of them), for
    /// `all_including(field)` and `subscribe_including(field)`. Unlike
    /// `through`, the condition is evaluated on every read, so the live list
    /// follows renames: an author renamed into it brings their posts in, one
    /// renamed out takes them away. `limit`/`offset` apply after it. A field
    /// that is not a reference, or a bad filter, is `InvalidArgument`; running
    /// `all_including` on another field is `InvalidArgument` too.
    pub fn where_related(&self, field: String, filter: Arc<Expr>) -> Result<Arc<Query>, KeelError> {
        crate::db::sync_call(|| {
            let (_, _, target, _) = reference(self, &field, true)?;
            let schema = Arc::clone(self.db.schema());
            // Checked now, resolved again when run.
            Resolver::new(&schema, &target, "where related")?.expr(&filter)?;
            let mut q = self.clone();
            q.related = Some((field, filter));
            Ok(Arc::new(q))
        })
    }

    /// This query with `all_including`, `count_including` and
    /// `subscribe_including` in the order of the field `field` of the related
    /// objects (to-one: the object; to-many: the first one; an inverse: the
    /// first referrer), ascending or `descending`, as SQL orders (an absent
    /// object or field first when ascending). It replaces an earlier
    /// `order_by_related`; equal values keep the query's own order, and
    /// `limit`/`offset` apply after this order (every match is read to sort
    /// it). A field the related collection does not have is `UnknownField`
    /// when the query runs.
    pub fn order_by_related(&self, field: String, descending: bool) -> Arc<Query> {
        let mut q = self.clone();
        q.related_order = Some((field, descending));
        Arc::new(q)
    }

    /// Subscribe to this query with the objects its reference field `field`
    /// names (to-one, or to-many: a vector of keys, named in its order; keys
    /// naming no object are left out): `listener` gets the list at once (on
    /// this thread, every row `inserted`), then each change of it (on keel's
    /// writer thread): its diff and the rows the diff inserts or updates — a
    /// change of a referenced object only too (an author renamed: the posts
    /// naming it are `updated`, edited in place with no read). `field` may also
    /// be an inverse name (`posts` of `Post.author: (inverse: "posts")`): each
    /// object with the objects referring to it, re-read on any change of the
    /// referring collection. Any other name is `InvalidArgument`. Other
    /// processes' commits arrive with `share_changes` (on the `keel-feed`
    /// thread).
    pub fn subscribe_including(
        &self,
        field: String,
        listener: Box<dyn IncludingListener>,
    ) -> Result<Arc<IncludingSubscription>, KeelError> {
        let listener = Arc::new(Foreign::new(listener));
        self.subscribe_including_gated(
            field,
            Gate::new(To::Listener {
                lock: Mutex::new(()),
                delivering: Mutex::new(None),
                listener,
            }),
        )
    }

    /// [`Query::subscribe_including`] delivering through the sink
    /// `deliveries` under `id` (chosen by the caller, to dispatch on): every
    /// delivery of one commit to the lists of one sink reaches its listener in
    /// one call (`crate::batch`); the first, made on this thread before this
    /// returns, alone. Same threads as `subscribe_including`.
    pub fn subscribe_including_to(
        &self,
        field: String,
        deliveries: Arc<Deliveries>,
        id: u64,
    ) -> Result<Arc<IncludingSubscription>, KeelError> {
        let key = Arc::as_ptr(&self.closing) as usize;
        deliveries.sink.attach(&self.db, key);
        let made = self.subscribe_including_gated(
            field,
            Gate::new(To::Sink {
                sink: Arc::clone(&deliveries.sink),
                id,
                key,
            }),
        );
        if made.is_err() {
            deliveries.sink.detach(key);
        }
        made
    }
}

impl Query {
    fn subscribe_including_gated(
        &self,
        field: String,
        gate: Arc<Gate>,
    ) -> Result<Arc<IncludingSubscription>, KeelError> {
        crate::db::sync_call(|| {
            let (coll, path, target, to_many) = reference(self, &field, true)?;
            let live = if path.is_some() && self.related_order.is_none() {
                let related = self.related_expr(&field)?;
                let g = Arc::clone(&gate);
                Live::Core(self.build_checked()?.subscribe_including(
                    &field,
                    related,
                    move |rows, diff| g.deliver(rows, diff, included_one),
                )?)
            } else {
                Live::Hook(self.reread_including(&coll, path, target, to_many, &field, &gate)?)
            };
            Ok(Arc::new(IncludingSubscription {
                live: Mutex::new(Some((live, Counted::new(&self.others)))),
                ends: Ends::new(&self.closing),
                gate,
            }))
        })
    }
}

impl Query {
    /// The list through an inverse, or ordered by a related field: re-read on
    /// each relevant commit (see the module docs), delivered through `gate`.
    fn reread_including(
        &self,
        coll: &str,
        path: Option<FieldPath>,
        target: String,
        to_many: bool,
        field: &str,
        gate: &Arc<Gate>,
    ) -> Result<ChangeHook, KeelError> {
        // Filtered through the reference, or an inverse (the referrers are the
        // rows' related objects): a change of any object of the target can
        // change the list, so every one counts.
        let filtered = self.related_expr(field)?.is_some() || path.is_none();
        let state = Arc::new(Mutex::new(State {
            rows: Vec::new(),
            named: HashSet::new(),
        }));
        // Held from before the hook exists until the first delivery is made: a
        // commit landing meanwhile waits in the hook, then compares with what
        // the first delivery showed, so none is missed and nothing is delivered
        // before the first.
        let mut first_guard = state.lock().unwrap_or_else(|p| p.into_inner());
        let hook = {
            let state = Arc::clone(&state);
            let gate = Arc::clone(gate);
            let query = self.clone();
            let (coll, path, field) = (coll.to_owned(), path.clone(), field.to_owned());
            self.db.on_file_changes(move |changes: &[Change]| {
                let mut st = state.lock().unwrap_or_else(|p| p.into_inner());
                if gate.ended.load(Ordering::SeqCst) {
                    return;
                }
                // No changes: a commit that was not recorded (it started
                // before this hook): read again.
                let relevant = changes.is_empty()
                    || changes.iter().any(|c| {
                        c.collection == coll
                            || (c.collection == target
                                && (filtered
                                    || c.key
                                        .first()
                                        .is_some_and(|k| st.named.contains(&key_id(k)))))
                    });
                if !relevant {
                    return;
                }
                let Ok((rows, named)) = read(&query, &coll, path.as_ref(), &field, to_many) else {
                    return; // closed, or a read error: the next commit tries again
                };
                let diff = keel_query::Diff::by(&st.rows, &rows, |r| r.object.rowid, |a, b| a == b);
                st.named = named;
                if diff.is_empty() {
                    return;
                }
                gate.deliver(&rows, &diff, Clone::clone);
                st.rows = rows;
            })
        };
        let (rows, named) = match read(self, coll, path.as_ref(), field, to_many) {
            Ok(read) => read,
            Err(e) => {
                drop(first_guard);
                hook.remove();
                return Err(e);
            }
        };
        gate.deliver(&rows, &keel_query::Diff::initial(rows.len()), Clone::clone);
        first_guard.rows = rows;
        first_guard.named = named;
        drop(first_guard);
        Ok(hook)
    }
}
