//! Key subscriptions: a latest-value slot per subscriber, drained by a stream or by
//! the dictionary's notifier thread (callbacks).
//!
//! A change is *offered* to the slots of its key with the change's sequence number
//! (per shard, so per key it only grows). A slot keeps only the newest offer it has
//! not delivered yet: a slow consumer skips intermediate values and always ends on
//! the latest one; offers that arrive out of order (two setters racing) are ignored
//! when older than what the slot already has.
//!
//! This module sits below the dictionary's shared state (`shared.rs`), which owns
//! the [`Registry`]: it reaches that state only through [`SubsHost`].

use std::collections::HashMap;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::mpsc::Sender;
use std::sync::{Arc, Mutex, MutexGuard, RwLock, Weak};
use std::task::{Context, Poll};
use std::thread::ThreadId;

use super::cache::{shard_of, Val};
use super::value::DictValue;
use crate::base::slot;

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

type Callback = Box<dyn FnMut(Option<DictValue>) + Send>;

/// What key subscriptions need of the dictionary's shared state
/// (`shared::Shared` implements it): the registry of subscriptions it owns, and
/// the value a subscriber sees for "absent" (the registered default).
pub(crate) trait SubsHost: Send + Sync {
    /// The subscriptions of this dictionary.
    fn subs(&self) -> &Registry;
    /// `v`, or the default registered for `key` when `v` is absent.
    fn effective(&self, key: &str, v: Val) -> Option<DictValue>;
}

/// What a key subscription keeps next to its value, under the slot's lock.
#[derive(Default)]
struct Flags {
    /// The last accepted offer was "absent" (a second one in a row is not news).
    last_none: bool,
    /// A callback slot is in the notifier's queue.
    queued: bool,
}

pub(crate) struct Slot {
    id: u64,
    key: String,
    pub(crate) shard: usize,
    /// The latest undelivered value; offers carry the change's sequence number, so
    /// two setters racing never leave it on the older value.
    value: slot::Slot<Val, Flags>,
    cancelled: AtomicBool,
    /// `Some` for callback subscriptions; held while the callback runs.
    callback: Option<Mutex<Callback>>,
}

impl Slot {
    /// True once the subscription ended (dropped, or the database closed).
    pub(crate) fn is_cancelled(&self) -> bool {
        self.cancelled.load(Ordering::Acquire)
    }

    /// Offer a change; returns true if a callback slot must be queued.
    pub(crate) fn offer(&self, seq: u64, v: &Val) -> bool {
        let mut queue = false;
        self.value.offer(seq, v.clone(), |f, v| {
            if v.is_none() && f.last_none {
                return false;
            }
            f.last_none = v.is_none();
            if self.callback.is_some() && !f.queued {
                f.queued = true;
                queue = true;
            }
            true
        });
        queue
    }
}

/// All subscriptions of one dictionary.
#[derive(Default)]
pub(crate) struct Registry {
    /// Set by [`Registry::close`]: new subscriptions start ended.
    closed: AtomicBool,
    count: AtomicUsize,
    next_id: AtomicUsize,
    by_key: RwLock<HashMap<String, Vec<Arc<Slot>>>>,
    notifier: Mutex<Option<(Sender<Arc<Slot>>, ThreadId)>>,
}

impl Registry {
    fn read(&self) -> std::sync::RwLockReadGuard<'_, HashMap<String, Vec<Arc<Slot>>>> {
        self.by_key.read().unwrap_or_else(|p| p.into_inner())
    }

    fn write(&self) -> std::sync::RwLockWriteGuard<'_, HashMap<String, Vec<Arc<Slot>>>> {
        self.by_key.write().unwrap_or_else(|p| p.into_inner())
    }

    /// Every key with a subscriber (the change feed reads them after a remote
    /// `remove_all` or a full refetch).
    pub(crate) fn keys(&self) -> Vec<String> {
        if self.count.load(Ordering::Acquire) == 0 {
            return Vec::new();
        }
        self.read().keys().cloned().collect()
    }

    /// Offer a change of `key` to its subscribers (cheap when there are none).
    pub(crate) fn notify(&self, key: &str, seq: u64, v: &Val) {
        if self.count.load(Ordering::Acquire) == 0 {
            return;
        }
        let queue: Vec<Arc<Slot>> = match self.read().get(key) {
            Some(slots) => slots.iter().filter(|s| s.offer(seq, v)).cloned().collect(),
            None => return,
        };
        self.queue(queue);
    }

    /// Offer "absent" to every subscriber (after `remove_all`), with each shard's
    /// sequence number of the clear.
    pub(crate) fn notify_all_absent(&self, seqs: &[u64]) {
        if self.count.load(Ordering::Acquire) == 0 {
            return;
        }
        let queue: Vec<Arc<Slot>> = self
            .read()
            .values()
            .flatten()
            .filter(|s| s.offer(seqs[s.shard], &None))
            .cloned()
            .collect();
        self.queue(queue);
    }

    fn queue(&self, slots: Vec<Arc<Slot>>) {
        if slots.is_empty() {
            return;
        }
        let g = lock(&self.notifier);
        if let Some((tx, _)) = g.as_ref() {
            for s in slots {
                let _ = tx.send(s);
            }
        }
    }

    fn add(&self, key: &str, callback: Option<Callback>, shared: Arc<dyn SubsHost>) -> Arc<Slot> {
        let slot = Arc::new(Slot {
            id: self.next_id.fetch_add(1, Ordering::Relaxed) as u64,
            key: key.to_owned(),
            shard: shard_of(key),
            value: slot::Slot::new(),
            cancelled: AtomicBool::new(false),
            callback: callback.map(Mutex::new),
        });
        let mut m = self.write();
        if self.closed.load(Ordering::Acquire) {
            slot.cancelled.store(true, Ordering::Release);
            slot.value.end();
            return slot;
        }
        if slot.callback.is_some() {
            self.ensure_notifier(&shared);
        }
        m.entry(key.to_owned()).or_default().push(Arc::clone(&slot));
        self.count.fetch_add(1, Ordering::AcqRel);
        slot
    }

    /// End every subscription (the database closed): streams finish after their
    /// pending value, callbacks stop — once this returns none runs again (unless
    /// called from the notifier thread itself) — and the notifier thread exits.
    pub(crate) fn close(&self) {
        let slots: Vec<Arc<Slot>> = {
            let mut m = self.write();
            self.closed.store(true, Ordering::Release);
            self.count.store(0, Ordering::Release);
            m.drain().flat_map(|(_, v)| v).collect()
        };
        let notifier = lock(&self.notifier).take().map(|(_, t)| t);
        let on_notifier = notifier == Some(std::thread::current().id());
        for s in slots {
            s.cancelled.store(true, Ordering::Release);
            s.value.end();
            if let (Some(cb), false) = (&s.callback, on_notifier) {
                drop(lock(cb)); // wait for a callback in progress
            }
        }
    }

    fn remove(&self, slot: &Slot) {
        let mut m = self.write();
        if let Some(v) = m.get_mut(&slot.key) {
            let before = v.len();
            v.retain(|s| s.id != slot.id);
            if v.len() < before {
                self.count.fetch_sub(1, Ordering::AcqRel);
            }
            if v.is_empty() {
                m.remove(&slot.key);
            }
        }
    }

    fn notifier_thread(&self) -> Option<ThreadId> {
        lock(&self.notifier).as_ref().map(|(_, t)| *t)
    }

    fn ensure_notifier(&self, shared: &Arc<dyn SubsHost>) {
        let mut g = lock(&self.notifier);
        if g.is_some() {
            return;
        }
        let (tx, rx) = std::sync::mpsc::channel::<Arc<Slot>>();
        let weak: Weak<dyn SubsHost> = Arc::downgrade(shared);
        let spawned = std::thread::Builder::new()
            .name("keel-dict-notify".into())
            .spawn(move || {
                // Ends when the dictionary (which owns the sender) is dropped.
                for slot in rx {
                    let Some(shared) = weak.upgrade() else { break };
                    deliver(&*shared, &slot);
                }
            });
        match spawned {
            Ok(h) => *g = Some((tx, h.thread().id())),
            Err(e) => tracing::error!(error = %e, "could not start the dictionary notifier thread"),
        }
    }
}

/// Run a callback slot's callback with its pending value (notifier thread).
fn deliver(shared: &dyn SubsHost, slot: &Slot) {
    let Some(cb) = &slot.callback else { return };
    if slot.cancelled.load(Ordering::Acquire) {
        return;
    }
    let mut cb = lock(cb);
    if slot.cancelled.load(Ordering::Acquire) {
        return;
    }
    let v = slot.value.try_take_with(|f| f.queued = false);
    if let Some(v) = v {
        let v = shared.effective(&slot.key, v);
        if let Err(p) = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| (cb)(v))) {
            let msg = p
                .downcast_ref::<&str>()
                .map(|s| s.to_string())
                .or_else(|| p.downcast_ref::<String>().cloned())
                .unwrap_or_default();
            tracing::error!(key = %slot.key, panic = %msg, "dictionary subscription callback panicked");
        }
    }
}

pub(crate) fn subscribe_stream<H: SubsHost + 'static>(shared: &Arc<H>, key: &str) -> Arc<Slot> {
    shared
        .subs()
        .add(key, None, Arc::clone(shared) as Arc<dyn SubsHost>)
}

pub(crate) fn subscribe_callback<H: SubsHost + 'static>(
    shared: &Arc<H>,
    key: &str,
    cb: Callback,
) -> Arc<Slot> {
    shared
        .subs()
        .add(key, Some(cb), Arc::clone(shared) as Arc<dyn SubsHost>)
}

/// Offer the initial value and, for callbacks, queue it.
pub(crate) fn initial<H: SubsHost>(shared: &Arc<H>, slot: &Arc<Slot>, seq: u64, v: &Val) {
    if slot.offer(seq, v) {
        shared.subs().queue(vec![Arc::clone(slot)]);
    }
}

/// A stream of a key's values: first the current value, then each update and
/// removal (`None`; or the registered default, if any). Only the latest value is
/// kept for a slow consumer. Dropping it unsubscribes. Returned by
/// [`Dictionary::subscribe`](crate::Dictionary::subscribe).
///
/// ```
/// # use keel_query::{Database, StoreOptions, DictValue};
/// # use keel_example_blog::blog::Post;
/// use futures::StreamExt;
/// # let dir = tempfile::tempdir().unwrap();
/// # let db = Database::open_for::<Post>(dir.path().join("d.db"), StoreOptions::default())?;
/// let dict = db.dictionary();
/// let mut s = dict.subscribe("volume");
/// assert_eq!(futures::executor::block_on(s.next()), Some(None)); // initial: absent
/// dict.set("volume", 7)?;
/// assert_eq!(futures::executor::block_on(s.next()), Some(Some(DictValue::Int(7))));
/// # Ok::<(), keel_query::Error>(())
/// ```
#[must_use = "dropping the stream unsubscribes"]
pub struct DictStream {
    shared: Arc<dyn SubsHost>,
    slot: Arc<Slot>,
}

impl DictStream {
    pub(crate) fn new<H: SubsHost + 'static>(shared: Arc<H>, slot: Arc<Slot>) -> DictStream {
        DictStream { shared, slot }
    }

    /// The key this stream follows.
    pub fn key(&self) -> &str {
        &self.slot.key
    }

    /// The newest undelivered value, without waiting (`None` if nothing new —
    /// right after subscribing too, while the first value of a key that was not
    /// in the cache is still being read).
    pub fn try_next(&mut self) -> Option<Option<DictValue>> {
        let v = self.slot.value.try_take()?;
        Some(self.shared.effective(&self.slot.key, v))
    }
}

impl futures::Stream for DictStream {
    type Item = Option<DictValue>;
    fn poll_next(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        let this = self.get_mut();
        this.slot
            .value
            .poll_take(cx.waker())
            .map(|v| v.map(|v| this.shared.effective(&this.slot.key, v)))
    }
}

impl Drop for DictStream {
    fn drop(&mut self) {
        self.slot.cancelled.store(true, Ordering::Release);
        self.slot.value.end();
        self.shared.subs().remove(&self.slot);
    }
}

impl std::fmt::Debug for DictStream {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DictStream")
            .field("key", &self.slot.key)
            .finish()
    }
}

/// A callback subscription to one key, returned by
/// [`Dictionary::subscribe_with`](crate::Dictionary::subscribe_with). Callbacks run on
/// the dictionary's notifier thread, one at a time per subscription, never on the
/// thread that called `set`. Dropping it stops the callbacks at once: when `drop`
/// returns no callback is running or will run (unless you drop it from inside its
/// own callback, where the running call finishes).
///
/// ```
/// # use keel_query::{Database, StoreOptions, DictValue};
/// # use keel_example_blog::blog::Post;
/// use std::sync::mpsc;
/// # let dir = tempfile::tempdir().unwrap();
/// # let db = Database::open_for::<Post>(dir.path().join("d.db"), StoreOptions::default())?;
/// let (tx, rx) = mpsc::channel();
/// let sub = db.dictionary().subscribe_with("theme", move |v| { let _ = tx.send(v); });
/// assert_eq!(rx.recv().unwrap(), None);
/// db.dictionary().set("theme", "dark")?;
/// assert_eq!(rx.recv().unwrap(), Some(DictValue::String("dark".into())));
/// drop(sub);
/// # Ok::<(), keel_query::Error>(())
/// ```
#[must_use = "dropping the subscription stops its callbacks"]
pub struct DictSubscription {
    shared: Arc<dyn SubsHost>,
    slot: Arc<Slot>,
}

impl DictSubscription {
    pub(crate) fn new<H: SubsHost + 'static>(shared: Arc<H>, slot: Arc<Slot>) -> DictSubscription {
        DictSubscription { shared, slot }
    }

    /// The key this subscription follows.
    pub fn key(&self) -> &str {
        &self.slot.key
    }
}

impl Drop for DictSubscription {
    fn drop(&mut self) {
        self.slot.cancelled.store(true, Ordering::Release);
        self.slot.value.end();
        self.shared.subs().remove(&self.slot);
        if self.shared.subs().notifier_thread() != Some(std::thread::current().id()) {
            if let Some(cb) = &self.slot.callback {
                // Wait for a callback in progress.
                drop(lock(cb));
            }
        }
    }
}

impl std::fmt::Debug for DictSubscription {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DictSubscription")
            .field("key", &self.slot.key)
            .finish()
    }
}
