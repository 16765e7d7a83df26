//! Batched delivery: every live list of one [`Deliveries`] sink that a commit
//! changes, handed to foreign code in **one** call, as one packed buffer.
//!
//! ## Why
//!
//! A foreign callback costs far more than the core spends on a list: a JNA
//! upcall with its record is tens of microseconds, while the core edits a
//! list across a relation in place in a few. With one callback per list, a
//! rename that 100 open lists show costs 100 upcalls. A sink makes it one per
//! commit, whatever the number of lists, and packs the lists' diffs and rows
//! into one byte buffer instead of a record per row.
//!
//! ## The model
//!
//! The foreign layer makes one [`Deliveries`] for its runtime ([`deliveries`])
//! with a [`BatchListener`], and subscribes each list, of any database, to it
//! with an id of its own choosing (`Query::subscribe_including_to`). It keeps
//! a map id → list, and on each [`BatchListener::on_batch`] hands each
//! delivery to its list.
//!
//! While a database has lists subscribed to the sink, the sink holds the
//! core's `Database::around_file_changes` pair on it: its
//! `before` side marks the thread as delivering a commit, deliveries made on
//! that thread are gathered, and its `after` side, once every list has made
//! its delivery, hands the gathered ones over in one call and clears the mark.
//! A delivery made anywhere else — a list's first, on the subscribing thread
//! before `subscribe_including_to` returns — goes out at once, alone in its
//! batch. So each list's deliveries keep their order, and a batch holds one
//! commit's deliveries.
//!
//! ## On which thread
//!
//! As the per-list listeners ([`crate::callbacks`]): a batch of a commit of
//! this handle on keel's writer thread, after the commit and before the
//! write's `await` returns; another process's commits (with `share_changes`)
//! on `keel-feed`; a first delivery on the subscribing thread. Keep the
//! listener short (hand each delivery to a channel), never wait for a write
//! inside it. An exception it throws is logged and ignored; no panic crosses.
//!
//! ## Cancel
//!
//! A cancelled subscription's delivery is dropped from a batch not yet handed
//! over; `cancel` waits for a batch being handed over (unless called from
//! inside the listener), so once it returns the id is never delivered again.
//!
//! ## The buffer
//!
//! [`DeliveryBatch::bytes`], little-endian, `count` deliveries back to back,
//! each `id u64 | len u64 | body` (`len`: the body's bytes, to skip to the
//! next). An `including` body ([`IncludingUpdate`](crate::IncludingUpdate)
//! packed):
//!
//! ```text
//! count u32                      rows of the new list
//! removed  n u32, n × u32        indices in the previous list
//! inserted n u32, n × u32        indices in the new list
//! moved    n u32, n × (from u32, to u32)
//! updated  n u32, n × u32
//! changed  n u32, n × row        the rows at inserted and updated, ascending
//! row:     index u32 | rowid i64 | len u32 | bytes
//!          | related n u32, n × (rowid i64 | len u32 | bytes)
//! ```

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::thread::ThreadId;

use keel_query::ChangeHook;

use crate::bytes::Bytes;
use crate::callbacks::{guarded, Foreign};
use crate::error::CallbackError;

/// One batch of deliveries: see the module docs for the layout of `bytes`.
#[derive(Debug, Clone, PartialEq, Eq, uniffi::Record)]
pub struct DeliveryBatch {
    /// How many deliveries `bytes` holds.
    pub count: u32,
    /// The deliveries, packed (module docs).
    pub bytes: Bytes,
}

/// Receives the batches of a [`Deliveries`] sink: on keel's writer thread
/// after a commit (one call for every list the commit changed), on `keel-feed`
/// for another process's commits, on the subscribing thread for a list's first
/// delivery. Keep it short; never wait for a write inside it. Exceptions are
/// caught and ignored.
#[uniffi::export(callback_interface)]
pub trait BatchListener: Send + Sync {
    /// One commit's deliveries (or one first delivery).
    fn on_batch(&self, batch: DeliveryBatch) -> Result<(), CallbackError>;
}

/// A sink for the deliveries of many live lists of one database, handed to
/// its [`BatchListener`] in one call per commit (module docs). Made by
/// `Database::deliveries`; lists subscribe to it with
/// `Query::subscribe_including_to`.
#[derive(uniffi::Object)]
pub struct Deliveries {
    pub(crate) sink: Arc<Sink>,
}

impl std::fmt::Debug for Deliveries {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Deliveries").finish_non_exhaustive()
    }
}

/// Whether a subscription may still be delivered to: shared by the
/// subscription and its gathered deliveries.
pub(crate) type Ended = Arc<AtomicBool>;

/// The deliveries gathered on one thread during one commit.
struct Gathered {
    thread: ThreadId,
    count: u32,
    bytes: Vec<u8>,
    /// Each delivery's subscription and its span in `bytes`.
    spans: Vec<(Ended, usize, usize)>,
}

/// The sink behind [`Deliveries`], held by it and by every subscription to it.
pub(crate) struct Sink {
    listener: Foreign<dyn BatchListener>,
    /// Threads delivering a commit now (between the hooks' two sides).
    rounds: Mutex<Vec<ThreadId>>,
    gathered: Mutex<Vec<Gathered>>,
    /// Held through each call of the listener (`cancel` waits on it).
    lock: Mutex<()>,
    /// The thread calling the listener now.
    delivering: Mutex<Option<ThreadId>>,
    /// Per database with subscriptions here: how many, and its hooks.
    dbs: Mutex<Vec<Attached>>,
}

/// A database this sink follows while subscriptions to it deliver here: its
/// `around_file_changes` hooks, removed with the last subscription (while a
/// hook is registered every write records its changes).
struct Attached {
    /// The FFI database's identity (its close signal's address).
    key: usize,
    subs: usize,
    hook: Option<ChangeHook>,
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

impl Sink {
    /// Hand one delivery over: gathered if this thread is delivering a commit,
    /// else at once. `body` appends the packed body to the buffer it is given.
    pub(crate) fn deliver(&self, ended: &Ended, id: u64, body: impl FnOnce(&mut Vec<u8>)) {
        if ended.load(Ordering::SeqCst) {
            return;
        }
        let me = std::thread::current().id();
        // Inside this sink's listener (a list subscribed from there): gathered
        // too, and handed over once the listener returns.
        if lock(&self.rounds).contains(&me) || *lock(&self.delivering) == Some(me) {
            let mut g = lock(&self.gathered);
            let at = match g.iter().position(|x| x.thread == me) {
                Some(i) => i,
                None => {
                    g.push(Gathered {
                        thread: me,
                        count: 0,
                        bytes: Vec::new(),
                        spans: Vec::new(),
                    });
                    g.len() - 1
                }
            };
            let x = &mut g[at];
            let start = x.bytes.len();
            push(&mut x.bytes, id, body);
            x.count += 1;
            let end = x.bytes.len();
            x.spans.push((Arc::clone(ended), start, end));
            return;
        }
        let mut bytes = Vec::new();
        push(&mut bytes, id, body);
        self.hand(Gathered {
            thread: me,
            count: 1,
            spans: vec![(Arc::clone(ended), 0, bytes.len())],
            bytes,
        });
    }

    /// Call the listener with `g`, leaving out cancelled subscriptions; then
    /// with what was gathered on this thread while it ran.
    fn hand(&self, g: Gathered) {
        let active = lock(&self.lock);
        let me = g.thread;
        let mut next = Some(g);
        while let Some(g) = next.take() {
            let Gathered {
                mut count,
                mut bytes,
                spans,
                ..
            } = g;
            if spans.iter().any(|(e, _, _)| e.load(Ordering::SeqCst)) {
                let mut kept = Vec::with_capacity(bytes.len());
                count = 0;
                for (e, s, t) in &spans {
                    if !e.load(Ordering::SeqCst) {
                        kept.extend_from_slice(&bytes[*s..*t]);
                        count += 1;
                    }
                }
                bytes = kept;
            }
            if count > 0 {
                *lock(&self.delivering) = Some(me);
                guarded("live list deliveries", || {
                    self.listener.on_batch(DeliveryBatch {
                        count,
                        bytes: Bytes(bytes),
                    })
                });
                *lock(&self.delivering) = None;
            }
            if !lock(&self.rounds).contains(&me) {
                next = self.take_gathered(me);
            }
        }
        drop(active);
    }

    fn take_gathered(&self, me: ThreadId) -> Option<Gathered> {
        let mut g = lock(&self.gathered);
        g.iter()
            .position(|x| x.thread == me)
            .map(|i| g.swap_remove(i))
    }

    fn begin(&self) {
        let me = std::thread::current().id();
        let mut r = lock(&self.rounds);
        if !r.contains(&me) {
            r.push(me);
        }
    }

    fn end(&self) {
        let me = std::thread::current().id();
        lock(&self.rounds).retain(|t| *t != me);
        if let Some(g) = self.take_gathered(me) {
            self.hand(g);
        }
    }

    /// A subscription was cancelled (its `ended` set): wait for a batch being
    /// handed over, unless this thread is the one handing it.
    pub(crate) fn wait_idle(&self) {
        let me = std::thread::current().id();
        if *lock(&self.delivering) != Some(me) {
            drop(lock(&self.lock));
        }
    }
}

impl Sink {
    /// A subscription of the database `db` (identified by `key`) delivers
    /// here from now on: follow its commits.
    pub(crate) fn attach(self: &Arc<Self>, db: &keel_query::Database, key: usize) {
        let mut dbs = lock(&self.dbs);
        if let Some(a) = dbs.iter_mut().find(|a| a.key == key) {
            a.subs += 1;
            return;
        }
        let (b, a): (Weak<Sink>, Weak<Sink>) = (Arc::downgrade(self), Arc::downgrade(self));
        // A commit whose hooks were taken before these exist calls neither
        // side: its deliveries go out one by one, still in order.
        let hook = db.around_file_changes(
            move |_| {
                if let Some(s) = b.upgrade() {
                    s.begin();
                }
            },
            move |_| {
                if let Some(s) = a.upgrade() {
                    s.end();
                }
            },
        );
        dbs.push(Attached {
            key,
            subs: 1,
            hook: Some(hook),
        });
    }

    /// A subscription of the database `key` ended: the last one removes the
    /// hooks.
    pub(crate) fn detach(&self, key: usize) {
        let hook = {
            let mut dbs = lock(&self.dbs);
            let Some(i) = dbs.iter().position(|a| a.key == key) else {
                return;
            };
            dbs[i].subs = dbs[i].subs.saturating_sub(1);
            if dbs[i].subs > 0 {
                return;
            }
            dbs.swap_remove(i).hook
        };
        if let Some(h) = hook {
            h.remove();
        }
    }
}

impl Drop for Sink {
    fn drop(&mut self) {
        for a in lock(&self.dbs).drain(..) {
            if let Some(h) = a.hook {
                h.remove();
            }
        }
    }
}

/// Append one delivery: id, body length, body.
fn push(out: &mut Vec<u8>, id: u64, body: impl FnOnce(&mut Vec<u8>)) {
    out.extend_from_slice(&id.to_le_bytes());
    let at = out.len();
    out.extend_from_slice(&0u64.to_le_bytes());
    body(out);
    let len = (out.len() - at - 8) as u64;
    out[at..at + 8].copy_from_slice(&len.to_le_bytes());
}

/// A length or index in the packed layout (lists and objects stay far below
/// 4 Gi: SQLite's blobs are at most 2 GiB).
fn u32_of(n: usize) -> [u8; 4] {
    u32::try_from(n).unwrap_or(u32::MAX).to_le_bytes()
}

fn indices(out: &mut Vec<u8>, v: &[usize]) {
    out.extend_from_slice(&u32_of(v.len()));
    for &i in v {
        out.extend_from_slice(&u32_of(i));
    }
}

fn object(out: &mut Vec<u8>, rowid: i64, bytes: &[u8]) {
    out.extend_from_slice(&rowid.to_le_bytes());
    out.extend_from_slice(&u32_of(bytes.len()));
    out.extend_from_slice(bytes);
}

/// One row of a list: its object and the objects its reference names, as
/// (rowid, bytes).
pub(crate) trait PackRow {
    fn object(&self) -> (i64, &[u8]);
    fn related(&self) -> Vec<(i64, &[u8])>;
}

impl PackRow for keel_query::Included {
    fn object(&self) -> (i64, &[u8]) {
        (self.object.rowid, &self.object.bytes)
    }
    fn related(&self) -> Vec<(i64, &[u8])> {
        self.related
            .iter()
            .map(|o| (o.rowid, &o.bytes[..]))
            .collect()
    }
}

impl PackRow for crate::types::IncludedObject {
    fn object(&self) -> (i64, &[u8]) {
        (self.object.rowid, &self.object.bytes)
    }
    fn related(&self) -> Vec<(i64, &[u8])> {
        self.related
            .iter()
            .map(|o| (o.rowid, &o.bytes[..]))
            .collect()
    }
}

/// Pack an `including` delivery: the new list `rows` that `diff` makes of
/// the previous one (layout in the module docs).
pub(crate) fn pack_including<R: PackRow>(out: &mut Vec<u8>, rows: &[R], diff: &keel_query::Diff) {
    out.extend_from_slice(&u32_of(rows.len()));
    indices(out, &diff.removed);
    indices(out, &diff.inserted);
    out.extend_from_slice(&u32_of(diff.moved.len()));
    for &(f, t) in &diff.moved {
        out.extend_from_slice(&u32_of(f));
        out.extend_from_slice(&u32_of(t));
    }
    indices(out, &diff.updated);
    let mut at: Vec<usize> = diff
        .inserted
        .iter()
        .chain(diff.updated.iter())
        .copied()
        .filter(|&i| i < rows.len())
        .collect();
    at.sort_unstable();
    at.dedup();
    out.extend_from_slice(&u32_of(at.len()));
    for i in at {
        out.extend_from_slice(&u32_of(i));
        let r = &rows[i];
        let (rowid, bytes) = r.object();
        object(out, rowid, bytes);
        let related = r.related();
        out.extend_from_slice(&u32_of(related.len()));
        for (rowid, bytes) in related {
            object(out, rowid, bytes);
        }
    }
}

/// A sink handing every delivery of the lists subscribed to it
/// (`Query::subscribe_including_to`, of any database) that one commit makes
/// to `listener` in one call, packed (see [`DeliveryBatch`]). A foreign layer
/// makes one for its runtime and dispatches by id. It lives while this object
/// or any subscription to it does.
#[uniffi::export]
pub fn deliveries(listener: Box<dyn BatchListener>) -> Arc<Deliveries> {
    Arc::new(Deliveries {
        sink: Arc::new(Sink {
            listener: Foreign::new(listener),
            rounds: Mutex::new(Vec::new()),
            gathered: Mutex::new(Vec::new()),
            lock: Mutex::new(()),
            delivering: Mutex::new(None),
            dbs: Mutex::new(Vec::new()),
        }),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn including_layout() {
        let rows = vec![
            keel_query::Included {
                object: keel_query::StoredObject {
                    rowid: 5,
                    bytes: b"ab".to_vec(),
                },
                related: vec![],
            },
            keel_query::Included {
                object: keel_query::StoredObject {
                    rowid: 6,
                    bytes: b"c".to_vec(),
                },
                related: vec![keel_query::StoredObject {
                    rowid: 9,
                    bytes: b"xyz".to_vec(),
                }],
            },
        ];
        let diff = keel_query::Diff {
            removed: vec![3].into(),
            inserted: Vec::new().into(),
            moved: vec![(0, 1)],
            updated: vec![1].into(),
        };
        let mut out = Vec::new();
        push(&mut out, 42, |o| pack_including(o, &rows, &diff));
        let u32s = |v: &[u32]| v.iter().flat_map(|x| x.to_le_bytes()).collect::<Vec<u8>>();
        let mut want = Vec::new();
        want.extend_from_slice(&42u64.to_le_bytes());
        let mut body = u32s(&[2, 1, 3, 0, 1, 0, 1, 1, 1, 1, 1]);
        body.extend_from_slice(&6i64.to_le_bytes());
        body.extend_from_slice(&u32s(&[1]));
        body.extend_from_slice(b"c");
        body.extend_from_slice(&u32s(&[1]));
        body.extend_from_slice(&9i64.to_le_bytes());
        body.extend_from_slice(&u32s(&[3]));
        body.extend_from_slice(b"xyz");
        want.extend_from_slice(&(body.len() as u64).to_le_bytes());
        want.extend_from_slice(&body);
        assert_eq!(out, want);
    }
}
