//! Query and object subscriptions through foreign callbacks, each with `cancel()`
//! and `ended()`.
//!
//! A subscription ends when it is cancelled, when its object is deleted, or when
//! its database closes. The listener alone cannot tell the last case (keel just
//! stops calling it), so each subscription also answers `ended()`: an async call
//! that returns when the subscription is cancelled and throws `Closed` once its
//! database has closed, after the last delivery. The Swift and Kotlin layers
//! await it next to the deliveries, so a stream or `Flow` being consumed ends
//! with `Closed` instead of waiting forever.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use futures::future::select;

use crate::bytes::Bytes;
use crate::callbacks::{gated, guarded, Foreign};
use crate::db::{Database, Query};
use crate::ending::Ending;
use crate::error::{CallbackError, KeelError};
use crate::types::{StoredObject, Value};

/// The row-level difference between the previous and the new result of a query,
/// in the shape table and list views animate (`performBatchUpdates`, `DiffUtil`).
/// Objects are identified by rowid.
#[derive(Debug, Clone, PartialEq, Eq, uniffi::Record)]
pub struct Diff {
    /// Indices in the previous result of objects no longer in the result, ascending.
    pub removed: Vec<u64>,
    /// Indices in the new result of objects that were not in the previous one.
    pub inserted: Vec<u64>,
    /// Kept objects whose relative order changed (minimal), ascending by new index.
    pub moved: Vec<Move>,
    /// Indices in the new result of kept objects whose bytes changed.
    pub updated: Vec<u64>,
}

/// One moved object of a [`Diff`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, uniffi::Record)]
pub struct Move {
    /// Index in the previous result.
    pub from: u64,
    /// Index in the new result.
    pub to: u64,
}

fn idx(v: &[usize]) -> Vec<u64> {
    v.iter().map(|&i| i as u64).collect()
}

impl From<&keel_query::Diff> for Diff {
    fn from(d: &keel_query::Diff) -> Self {
        Diff {
            removed: idx(&d.removed),
            inserted: idx(&d.inserted),
            moved: d
                .moved
                .iter()
                .map(|&(f, t)| Move {
                    from: f as u64,
                    to: t as u64,
                })
                .collect(),
            updated: idx(&d.updated),
        }
    }
}

/// One delivery of a query subscription: the whole new result and its diff
/// against the previous delivery (the first delivery lists every object as
/// inserted).
#[derive(Debug, Clone, PartialEq, Eq, uniffi::Record)]
pub struct QueryUpdate {
    /// The result, in query order (after `offset`/`limit`).
    pub objects: Vec<StoredObject>,
    /// Changes against the previous delivery.
    pub diff: Diff,
}

/// One delivery of an object subscription.
#[derive(Debug, Clone, PartialEq, Eq, uniffi::Enum)]
pub enum ObjectEvent {
    /// The object's current version.
    Updated {
        /// The object's current version.
        current: StoredObject,
    },
    /// The object was deleted (or does not exist); the subscription has ended.
    Deleted,
}

/// Receives query results. The first result is delivered **on the subscribing
/// thread** before `subscribe` returns; every later one **on keel's writer
/// thread**, after the commit and before the write's `await` returns. Keep it
/// short and never wait for a write inside it (the writer would wait for itself);
/// hop to your own thread or event loop. Exceptions are caught and ignored.
#[uniffi::export(callback_interface)]
pub trait QueryListener: Send + Sync {
    /// A new result.
    fn on_update(&self, update: QueryUpdate) -> Result<(), CallbackError>;
}

/// Receives the versions of one object. Same threads and rules as
/// [`QueryListener`]; after `Deleted` nothing more arrives.
#[uniffi::export(callback_interface)]
pub trait ObjectListener: Send + Sync {
    /// A new version, or the deletion.
    fn on_event(&self, event: ObjectEvent) -> Result<(), CallbackError>;
}

/// One live subscription that the engine's hub does not count (a live list
/// across a relation, a live k-NN: both run on the engine's change hooks), in
/// its database's `live_subscriptions` while it is held.
#[derive(Debug)]
pub(crate) struct Counted(Arc<AtomicUsize>);

impl Counted {
    pub(crate) fn new(count: &Arc<AtomicUsize>) -> Counted {
        count.fetch_add(1, Ordering::SeqCst);
        Counted(Arc::clone(count))
    }
}

impl Drop for Counted {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::SeqCst);
    }
}

/// How a subscription learns it ended: its database's close signal and its own
/// cancel signal (see the module docs).
#[derive(Debug)]
pub(crate) struct Ends {
    closing: Arc<Ending>,
    cancelled: Arc<Ending>,
}

impl Ends {
    pub(crate) fn new(closing: &Arc<Ending>) -> Ends {
        Ends {
            closing: Arc::clone(closing),
            cancelled: Ending::new(),
        }
    }

    pub(crate) fn cancel(&self) {
        self.cancelled.fire();
    }

    /// False once the database closed or the subscription was cancelled.
    pub(crate) fn live(&self) -> bool {
        !self.closing.has_fired() && !self.cancelled.has_fired()
    }

    /// The body of `ended()`: returns at the cancel, throws `Closed` at the close.
    pub(crate) async fn ended(&self, what: &str) -> Result<(), KeelError> {
        let (closing, cancelled) = (self.closing.wait(), self.cancelled.wait());
        gated(select(Box::pin(closing), Box::pin(cancelled))).await;
        if self.cancelled.has_fired() {
            return Ok(());
        }
        Err(KeelError::Closed {
            message: format!("{what}: the database was closed"),
        })
    }
}

/// A live subscription. Call `cancel()` to end it: once `cancel` returns, its
/// listener is never called again (a delivery running at that moment is waited
/// for, unless `cancel` is called from inside the listener itself). Dropping the
/// last reference cancels too.
#[derive(uniffi::Object)]
pub struct Subscription {
    inner: Mutex<Option<Handle>>,
    ends: Ends,
}

/// What a [`Subscription`] ends when cancelled.
pub(crate) enum Handle {
    /// A query or object subscription of the engine's hub.
    Hub(keel_query::Subscription),
    /// Another kind of subscription (a live k-NN, `vector.rs`), held for its
    /// `Drop`, which ends the deliveries. Boxed so that this module does not
    /// import the ones built on it.
    Owned(#[allow(dead_code)] Box<dyn Send>),
}

impl std::fmt::Debug for Subscription {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Subscription")
            .field("active", &self.is_active())
            .finish()
    }
}

impl Subscription {
    pub(crate) fn new(h: Handle, closing: &Arc<Ending>) -> Arc<Subscription> {
        Arc::new(Subscription {
            inner: Mutex::new(Some(h)),
            ends: Ends::new(closing),
        })
    }
}

#[uniffi::export]
impl Subscription {
    /// End the subscription (idempotent).
    pub fn cancel(&self) {
        // Taken out of the lock first: a live k-NN's cancel waits for a running
        // delivery, which must not wait for this lock in turn.
        let s = self.inner.lock().unwrap_or_else(|p| p.into_inner()).take();
        drop(s);
        self.ends.cancel();
    }

    /// Returns when the subscription is cancelled; throws `Closed` once its
    /// database has closed (after the last delivery). An object subscription
    /// that delivered `Deleted` has ended too, but this waits for its cancel
    /// (or the close): the listener already saw the end.
    pub async fn ended(&self) -> Result<(), KeelError> {
        self.ends.ended("subscription").await
    }

    /// False once cancelled, once its database closed, or once an object
    /// subscription delivered `Deleted`.
    pub fn is_active(&self) -> bool {
        self.ends.live()
            && self
                .inner
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .as_ref()
                .is_some_and(|h| match h {
                    Handle::Hub(s) => s.is_active(),
                    // A live k-NN never ends by itself.
                    Handle::Owned(_) => true,
                })
    }
}

fn stored(o: &keel_query::StoredObject) -> StoredObject {
    StoredObject {
        rowid: o.rowid,
        bytes: Bytes(o.bytes.clone()),
    }
}

#[uniffi::export]
impl Query {
    /// Subscribe to this query: `listener` gets the current result at once (on this
    /// thread), then every changed result with its diff (on keel's writer thread).
    pub fn subscribe(
        &self,
        listener: Box<dyn QueryListener>,
    ) -> Result<Arc<Subscription>, KeelError> {
        let listener = Foreign::new(listener);
        crate::db::sync_call(|| {
            let q = self.build_checked()?;
            let sub = q.subscribe(move |u: keel_query::QueryUpdate| {
                let update = QueryUpdate {
                    objects: u.objects.iter().map(|o| stored(o)).collect(),
                    diff: (&u.diff).into(),
                };
                guarded("query subscription", || listener.on_update(update));
            })?;
            Ok(Subscription::new(Handle::Hub(sub), &self.closing))
        })
    }
}

#[uniffi::export]
impl Database {
    /// Subscribe to the object of `collection` with primary key `key`: `listener`
    /// gets its current version at once (or `Deleted` if it does not exist), then
    /// each new version, then `Deleted`.
    pub fn subscribe_object(
        &self,
        collection: String,
        key: Vec<Value>,
        listener: Box<dyn ObjectListener>,
    ) -> Result<Arc<Subscription>, KeelError> {
        let key: Vec<keel_schema::Value> = key.into_iter().map(Into::into).collect();
        let listener = Foreign::new(listener);
        crate::db::sync_call(|| {
            let sub = self
                .db
                .subscribe_object(&collection, &key, None, move |e| {
                    let event = match e {
                        keel_query::ObjectEvent::Updated(o) => ObjectEvent::Updated {
                            current: stored(&o),
                        },
                        keel_query::ObjectEvent::Deleted => ObjectEvent::Deleted,
                    };
                    guarded("object subscription", || listener.on_event(event));
                })?;
            Ok(Subscription::new(Handle::Hub(sub), &self.closing))
        })
    }
}
