//! The latest-value slot behind every keel stream: query and object subscription
//! streams and dictionary key streams.
//!
//! A [`Slot`] holds at most one undelivered value. Producers overwrite it, so a slow
//! consumer skips intermediate values and always ends on the newest one; memory
//! never grows with the number of changes. A consumer polls it like a stream:
//! the pending value, or `None` once the slot has ended and is drained, or
//! `Pending` with its waker kept for the next value.
//!
//! Two ways to fill it:
//! * [`Slot::put`]: one producer that delivers in order (the subscription hub, on
//!   the writer thread) — every value replaces the pending one.
//! * [`Slot::offer`]: producers that may race (two threads setting the same
//!   dictionary key): each value carries a sequence number that only grows per
//!   source, and an offer older than one already accepted is ignored, so the slot
//!   never goes back to a superseded value.
//!
//! `M` is extra state its owner keeps under the slot's lock (the dictionary keeps
//! "last offer was absent" and "queued for the notifier" there).

use std::sync::{Arc, Mutex, MutexGuard};
use std::task::{Poll, Waker};

pub(crate) struct Slot<T, M = ()> {
    st: Mutex<State<T, M>>,
}

struct State<T, M> {
    value: Option<T>,
    ended: bool,
    waker: Option<Waker>,
    /// Sequence number of the last accepted [`Slot::offer`].
    seq: Option<u64>,
    meta: M,
}

impl<T, M: Default> Slot<T, M> {
    pub(crate) fn new() -> Slot<T, M> {
        Slot {
            st: Mutex::new(State {
                value: None,
                ended: false,
                waker: None,
                seq: None,
                meta: M::default(),
            }),
        }
    }
}

impl<T, M> Slot<T, M> {
    fn lock(&self) -> MutexGuard<'_, State<T, M>> {
        self.st.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Store `v` and wake a waiting consumer (outside the lock).
    fn store(mut s: MutexGuard<'_, State<T, M>>, v: T, end: bool) {
        s.value = Some(v);
        s.ended |= end;
        let w = s.waker.take();
        drop(s);
        if let Some(w) = w {
            w.wake();
        }
    }

    /// Replace the pending value; `end` also ends the slot (the consumer gets `v`,
    /// then the end). Ignored once the slot has ended.
    pub(crate) fn put(&self, v: T, end: bool) {
        let s = self.lock();
        if !s.ended {
            Self::store(s, v, end);
        }
    }

    /// Offer `v` numbered `seq`. Ignored once the slot has ended, or when `seq` is
    /// not newer than the last accepted offer (a racing producer already offered
    /// a newer value). Otherwise `seq` becomes the last accepted number and
    /// `keep(meta, &v)`, run under the lock, decides whether `v` replaces the
    /// pending value. Returns whether it did.
    pub(crate) fn offer(&self, seq: u64, v: T, keep: impl FnOnce(&mut M, &T) -> bool) -> bool {
        let mut s = self.lock();
        if s.ended || s.seq.is_some_and(|l| seq <= l) {
            return false;
        }
        s.seq = Some(seq);
        if !keep(&mut s.meta, &v) {
            return false;
        }
        Self::store(s, v, false);
        true
    }

    /// End the slot: after the pending value (if any) the consumer gets the end.
    /// Later puts and offers are ignored.
    pub(crate) fn end(&self) {
        let w = {
            let mut s = self.lock();
            s.ended = true;
            s.waker.take()
        };
        if let Some(w) = w {
            w.wake();
        }
    }

    /// The pending value, without waiting; `f` sees the owner's state under the
    /// same lock.
    pub(crate) fn try_take_with(&self, f: impl FnOnce(&mut M)) -> Option<T> {
        let mut s = self.lock();
        f(&mut s.meta);
        s.value.take()
    }

    /// The pending value, without waiting.
    pub(crate) fn try_take(&self) -> Option<T> {
        self.try_take_with(|_| {})
    }

    /// For `Stream::poll_next`: the pending value, `Ready(None)` once the slot has
    /// ended and is drained, or `Pending` (the waker is kept for the next value).
    pub(crate) fn poll_take(&self, waker: &Waker) -> Poll<Option<T>> {
        let mut s = self.lock();
        if let Some(v) = s.value.take() {
            return Poll::Ready(Some(v));
        }
        if s.ended {
            return Poll::Ready(None);
        }
        match &s.waker {
            Some(w) if w.will_wake(waker) => {}
            _ => s.waker = Some(waker.clone()),
        }
        Poll::Pending
    }
}

/// The producing end of a slot, owned by a subscription's callback: when the
/// callback is dropped — the subscription is cancelled, delivered its last value,
/// or the database closed — the slot ends and its stream finishes.
pub(crate) struct Producer<T, M = ()>(Arc<Slot<T, M>>);

impl<T, M> Producer<T, M> {
    pub(crate) fn new(slot: Arc<Slot<T, M>>) -> Producer<T, M> {
        Producer(slot)
    }

    /// See [`Slot::put`].
    pub(crate) fn put(&self, v: T, end: bool) {
        self.0.put(v, end)
    }
}

impl<T, M> Drop for Producer<T, M> {
    fn drop(&mut self) {
        self.0.end();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use futures::task::noop_waker;

    #[test]
    fn keeps_only_the_latest_value_then_ends() {
        let s: Slot<i32> = Slot::new();
        let w = noop_waker();
        assert!(s.poll_take(&w).is_pending());
        s.put(1, false);
        s.put(2, false);
        assert_eq!(s.poll_take(&w), Poll::Ready(Some(2)));
        s.put(3, true);
        s.put(4, false); // after the end: ignored
        assert_eq!(s.poll_take(&w), Poll::Ready(Some(3)));
        assert_eq!(s.poll_take(&w), Poll::Ready(None));
    }

    #[test]
    fn dropping_the_producer_ends_the_slot() {
        let s: Arc<Slot<i32>> = Arc::new(Slot::new());
        let p = Producer::new(Arc::clone(&s));
        p.put(1, false);
        drop(p);
        assert_eq!(s.poll_take(&noop_waker()), Poll::Ready(Some(1)));
        assert_eq!(s.poll_take(&noop_waker()), Poll::Ready(None));
    }

    #[test]
    fn out_of_order_offers_are_ignored() {
        let s: Slot<&str, u32> = Slot::new();
        assert!(s.offer(5, "five", |_, _| true));
        // A racing producer with an older change arrives late: refused.
        assert!(!s.offer(4, "four", |_, _| true));
        assert!(!s.offer(5, "again", |_, _| true));
        assert_eq!(s.try_take(), Some("five"));
        // `keep` may drop a value; its number still counts as seen.
        assert!(!s.offer(6, "dup", |m, _| {
            *m += 1;
            false
        }));
        assert!(!s.offer(6, "six", |_, _| true));
        assert!(s.offer(7, "seven", |_, _| true));
        assert_eq!(s.try_take_with(|m| assert_eq!(*m, 1)), Some("seven"));
        s.end();
        assert!(!s.offer(8, "eight", |_, _| true));
        assert_eq!(s.poll_take(&noop_waker()), Poll::Ready(None));
    }
}
