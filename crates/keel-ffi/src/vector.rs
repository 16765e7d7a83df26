//! Nearest-neighbour queries for the bindings: [`Query::nearest`]
//! runs the engine's exact k-NN over a `(vector: N)` field with the query's
//! filters, and hands back each winner's rowid, distance and bytes, best first.
//! [`Query::subscribe_nearest`] keeps that result live: the engine's live k-NN
//! (`keel_query::Nearest::subscribe`), delivered with the same row-level
//! [`Diff`] as a query subscription.

use std::sync::{Arc, Condvar, Mutex};
use std::thread::ThreadId;

use crate::bytes::Bytes;
use crate::callbacks::{guarded, Foreign};
use crate::db::Query;
use crate::error::{CallbackError, KeelError};
use crate::expr::Resolver;
use crate::live::{Counted, Diff, Handle, Subscription};
use crate::txn::Txn;

/// One result of [`Query::nearest`].
#[derive(Debug, Clone, PartialEq, uniffi::Record)]
pub struct Neighbor {
    /// The object's rowid (equal distances are ordered by it).
    pub rowid: i64,
    /// Its distance to the query vector under the field's metric (smaller is
    /// nearer).
    pub distance: f32,
    /// The object's FlatBuffers bytes.
    pub bytes: Bytes,
}

/// One delivery of a live k-NN ([`Query::subscribe_nearest`]): the `k`
/// nearest now, best first, and the row-level difference against the previous
/// delivery (the first delivery lists every neighbour as inserted). A
/// neighbour whose bytes or distance changed is `updated`.
#[derive(Debug, Clone, PartialEq, uniffi::Record)]
pub struct NearestUpdate {
    /// The `k` nearest matching objects (fewer if fewer match), best first.
    pub neighbors: Vec<Neighbor>,
    /// Changes against the previous delivery, by index.
    pub diff: Diff,
}

/// Receives the results of a live k-NN. Same threads and rules as
/// [`crate::QueryListener`]: the first result on the subscribing thread before
/// `subscribe_nearest` returns, every later one on keel's writer thread after
/// the commit and before the write's `await` returns. Exceptions are caught
/// and ignored.
#[uniffi::export(callback_interface)]
pub trait NearestListener: Send + Sync {
    /// A new result.
    fn on_update(&self, update: NearestUpdate) -> Result<(), CallbackError>;
}

/// Lets `cancel` wait for a delivery that is running, as a query
/// subscription's does: the engine's handle stops new deliveries when dropped,
/// but not one already past its hook list.
#[derive(Default)]
struct Gate {
    state: Mutex<GateState>,
    idle: Condvar,
}

#[derive(Default)]
struct GateState {
    closed: bool,
    /// The thread running the listener now, if any.
    running: Option<ThreadId>,
}

impl Gate {
    /// Run `f` unless closed, marking this thread as delivering meanwhile.
    fn pass(&self, f: impl FnOnce()) {
        {
            let mut s = self.state.lock().unwrap_or_else(|p| p.into_inner());
            if s.closed {
                return;
            }
            s.running = Some(std::thread::current().id());
        }
        f();
        let mut s = self.state.lock().unwrap_or_else(|p| p.into_inner());
        s.running = None;
        // Only `close` waits on `idle`, and it sets `closed` under this lock
        // first; a notify is a system call even with no waiter, and this runs
        // after every delivery.
        if s.closed {
            self.idle.notify_all();
        }
    }

    /// Close, then wait for a running delivery, unless it is this thread's
    /// own (a listener cancelling itself).
    fn close(&self) {
        let me = std::thread::current().id();
        let mut s = self.state.lock().unwrap_or_else(|p| p.into_inner());
        s.closed = true;
        while s.running.is_some_and(|t| t != me) {
            s = self.idle.wait(s).unwrap_or_else(|p| p.into_inner());
        }
    }
}

/// A live k-NN held by a [`Subscription`]; dropping it ends the deliveries.
struct LiveNearest {
    gate: Arc<Gate>,
    sub: Option<keel_query::NearestSubscription>,
    /// Counted in `live_subscriptions` until cancelled.
    _counted: Counted,
}

impl Drop for LiveNearest {
    fn drop(&mut self) {
        self.gate.close();
        drop(self.sub.take());
    }
}

fn neighbor(n: &keel_query::Neighbor<keel_query::StoredObject>) -> Neighbor {
    Neighbor {
        rowid: n.rowid,
        distance: n.distance,
        bytes: Bytes(n.object.bytes.clone()),
    }
}

#[uniffi::export]
impl Txn {
    /// [`Query::nearest`] as this transaction sees the objects: its own writes
    /// so far included. Same errors; a query of another database, or a
    /// transaction whose body has returned, is `InvalidArgument`.
    pub fn nearest(
        &self,
        query: Arc<Query>,
        field: String,
        vector: Vec<f32>,
        k: u32,
    ) -> Result<Vec<Neighbor>, KeelError> {
        let schema = Arc::clone(query.db.schema());
        let path = Resolver::new(&schema, &query.collection, "nearest")?.path(&field)?;
        self.with("nearest", |t| {
            Ok(self
                .query_on(t, &query)?
                .nearest(path, &vector, k as usize)
                .all()?
                .iter()
                .map(neighbor)
                .collect())
        })
    }
}

#[uniffi::export]
impl Query {
    /// Keep [`Query::nearest`] live: `listener` gets the `k` nearest now (on
    /// this thread), then the new `k` nearest with their [`Diff`] after every
    /// commit that changes them (on keel's writer thread): an insert that beats
    /// the `k`-th distance, an update that moves a vector, a delete of a member.
    /// Equal distances are ordered by rowid, so diffs are stable. The errors are
    /// those of [`Query::nearest`], returned here before anything is delivered.
    pub fn subscribe_nearest(
        self: Arc<Self>,
        field: String,
        vector: Vec<f32>,
        k: u32,
        listener: Box<dyn NearestListener>,
    ) -> Result<Arc<Subscription>, KeelError> {
        let schema = Arc::clone(self.db.schema());
        let path = Resolver::new(&schema, &self.collection, "subscribe_nearest")?.path(&field)?;
        let listener = Foreign::new(listener);
        let gate = Arc::new(Gate::default());
        let g2 = Arc::clone(&gate);
        crate::db::sync_call(|| {
            let q = self.build_checked()?;
            let mut shown: Vec<Neighbor> = Vec::new();
            let mut first = true;
            let sub = q.nearest(path, &vector, k as usize).subscribe(
                move |u: keel_query::NearestUpdate| {
                    let now: Vec<Neighbor> = u.neighbors.iter().map(neighbor).collect();
                    let diff = if std::mem::take(&mut first) {
                        keel_query::Diff::initial(now.len())
                    } else {
                        keel_query::Diff::by(
                            &shown,
                            &now,
                            |n| n.rowid,
                            |a, b| {
                                a.distance.to_bits() == b.distance.to_bits() && a.bytes == b.bytes
                            },
                        )
                    };
                    let update = NearestUpdate {
                        neighbors: now.clone(),
                        diff: (&diff).into(),
                    };
                    shown = now;
                    g2.pass(|| guarded("nearest subscription", || listener.on_update(update)));
                },
            )?;
            Ok(Subscription::new(
                Handle::Owned(Box::new(LiveNearest {
                    gate,
                    sub: Some(sub),
                    _counted: Counted::new(&self.others),
                })),
                &self.closing,
            ))
        })
    }

    /// The `k` objects matching this query's filters whose vector `field` is
    /// nearest to `vector`, best first (exact). A vector of another dimension
    /// or with NaN/infinity is `InvalidArgument`; a field that is not a
    /// `(vector: N)` field is `UnknownField`; order, limit or offset on the
    /// query is `TypeMismatch`.
    pub fn nearest(
        self: Arc<Self>,
        field: String,
        vector: Vec<f32>,
        k: u32,
    ) -> Result<Vec<Neighbor>, KeelError> {
        let schema = Arc::clone(self.db.schema());
        let path = Resolver::new(&schema, &self.collection, "nearest")?.path(&field)?;
        let q = self.build_checked()?;
        Ok(q.nearest(path, &vector, k as usize)
            .all()?
            .into_iter()
            .map(|n| Neighbor {
                rowid: n.rowid,
                distance: n.distance,
                bytes: Bytes(n.object.bytes),
            })
            .collect())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn gate_waits_for_a_running_delivery_but_not_for_its_own() {
        // A listener cancelling itself: close inside pass returns at once.
        let g = Gate::default();
        let mut ran = 0;
        g.pass(|| {
            ran += 1;
            g.close();
        });
        g.pass(|| ran += 1);
        assert_eq!(ran, 1, "nothing passes a closed gate");

        // Another thread's close waits until the running delivery is done.
        let g = Arc::new(Gate::default());
        let done = Arc::new(Mutex::new(false));
        let (started_tx, started_rx) = std::sync::mpsc::channel();
        let (g2, d2) = (Arc::clone(&g), Arc::clone(&done));
        let t = std::thread::spawn(move || {
            g2.pass(|| {
                started_tx.send(()).unwrap();
                std::thread::sleep(std::time::Duration::from_millis(50));
                *d2.lock().unwrap() = true;
            })
        });
        started_rx.recv().unwrap();
        g.close();
        assert!(*done.lock().unwrap(), "close returned while a delivery ran");
        t.join().unwrap();
    }
}
