//! Callback holders (the streams' single-slot queue is [`crate::base::slot::Slot`]).

use std::cell::RefCell;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Mutex, MutexGuard};

pub(crate) type Callback<T> = Box<dyn FnMut(T) + Send>;

thread_local! {
    /// Addresses of the [`Shared`]s whose callback this thread is running now.
    static DELIVERING: RefCell<Vec<usize>> = const { RefCell::new(Vec::new()) };
}

pub(crate) fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// One subscription's callback. Deliveries to one subscription never overlap (the
/// mutex is held during the call); cancelling waits for a running call on another
/// thread, and inside the callback itself just marks it cancelled.
pub(crate) struct Shared<T> {
    cancelled: AtomicBool,
    ended: AtomicBool,
    cb: Mutex<Option<Callback<T>>>,
}

impl<T> Shared<T> {
    pub(crate) fn new(cb: Callback<T>) -> Shared<T> {
        Shared {
            cancelled: AtomicBool::new(false),
            ended: AtomicBool::new(false),
            cb: Mutex::new(Some(cb)),
        }
    }

    fn addr(&self) -> usize {
        self as *const Self as usize
    }

    pub(crate) fn guard(&self) -> MutexGuard<'_, Option<Callback<T>>> {
        lock(&self.cb)
    }

    /// Call the callback with `v` (unless cancelled). `last` ends the subscription.
    pub(crate) fn deliver(&self, v: T, last: bool) {
        if self.cancelled.load(Ordering::Acquire) {
            return;
        }
        let mut g = self.guard();
        self.call(&mut g, v, last);
    }

    /// Call with the lock already held (the first delivery, made while registering).
    pub(crate) fn call(&self, g: &mut MutexGuard<'_, Option<Callback<T>>>, v: T, last: bool) {
        if last {
            self.ended.store(true, Ordering::Release);
        }
        if self.cancelled.load(Ordering::Acquire) {
            return;
        }
        let Some(f) = g.as_mut() else { return };
        let me = self.addr();
        DELIVERING.with(|d| d.borrow_mut().push(me));
        let r = catch_unwind(AssertUnwindSafe(|| f(v)));
        DELIVERING.with(|d| {
            let mut d = d.borrow_mut();
            if let Some(p) = d.iter().rposition(|x| *x == me) {
                d.remove(p);
            }
        });
        if r.is_err() {
            tracing::error!("a subscription callback panicked; the subscription goes on");
        }
        if last || self.cancelled.load(Ordering::Acquire) {
            let f = g.take();
            drop(f);
        }
    }

    /// Stop deliveries. After this returns (outside the callback itself) no call runs.
    pub(crate) fn cancel(&self) {
        self.cancelled.store(true, Ordering::Release);
        let me = self.addr();
        if DELIVERING.with(|d| d.borrow().contains(&me)) {
            return; // inside our own callback: `call` drops it when it returns
        }
        let f = self.guard().take();
        drop(f);
    }

    pub(crate) fn active(&self) -> bool {
        !self.cancelled.load(Ordering::Acquire) && !self.ended.load(Ordering::Acquire)
    }
}
