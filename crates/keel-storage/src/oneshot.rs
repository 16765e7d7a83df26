//! A tiny runtime-agnostic oneshot channel (blocking wait and `Future`).
//!
//! Every write's result travels through one, sent by the writer after its
//! group's COMMIT, so the send is on the writer's serial path: it wakes the
//! receiver once, and only a receiver that is there to wake. A blocked
//! [`Receiver::wait`] is woken through the condition variable, a polled future
//! through its waker; a receiver that has not started waiting yet finds the
//! value when it does, and costs the sender no system call.

use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::task::{Context, Poll, Waker};

struct State<T> {
    value: Option<T>,
    waker: Option<Waker>,
    /// Threads blocked in [`Receiver::wait`] (counted under the lock before
    /// they sleep, so a sender that sees none needs no notify).
    waiting: usize,
    sender_gone: bool,
    receiver_gone: bool,
}

struct Shared<T> {
    state: Mutex<State<T>>,
    cv: Condvar,
}

impl<T> Shared<T> {
    fn lock(&self) -> MutexGuard<'_, State<T>> {
        // A poisoned lock only means another thread panicked while holding it; the
        // state is plain data and still consistent.
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// `None` once it has sent: the send already woke the receiver, so the drop
/// that follows must not wake it again.
pub(crate) struct Sender<T>(Option<Arc<Shared<T>>>);
pub(crate) struct Receiver<T>(Arc<Shared<T>>);

pub(crate) fn channel<T>() -> (Sender<T>, Receiver<T>) {
    let s = Arc::new(Shared {
        state: Mutex::new(State {
            value: None,
            waker: None,
            waiting: 0,
            sender_gone: false,
            receiver_gone: false,
        }),
        cv: Condvar::new(),
    });
    (Sender(Some(Arc::clone(&s))), Receiver(s))
}

/// Mark the sender gone (with `v`, if it sent one) and wake whoever waits.
/// Gives `v` back if the receiver is gone.
fn close<T>(shared: &Shared<T>, v: Option<T>) -> Result<(), T> {
    let mut st = shared.lock();
    if st.receiver_gone {
        return v.map_or(Ok(()), Err);
    }
    if v.is_some() {
        st.value = v;
    }
    st.sender_gone = true;
    let waiting = st.waiting > 0;
    let w = st.waker.take();
    drop(st);
    if waiting {
        shared.cv.notify_all();
    }
    if let Some(w) = w {
        w.wake();
    }
    Ok(())
}

impl<T> Sender<T> {
    /// Deliver the value; gives it back if the receiver is gone.
    pub(crate) fn send(mut self, v: T) -> Result<(), T> {
        match self.0.take() {
            Some(shared) => close(&shared, Some(v)),
            None => Err(v),
        }
    }

    pub(crate) fn is_cancelled(&self) -> bool {
        self.0.as_ref().is_none_or(|s| s.lock().receiver_gone)
    }
}

impl<T> Drop for Sender<T> {
    fn drop(&mut self) {
        if let Some(shared) = self.0.take() {
            let _ = close(&shared, None);
        }
    }
}

impl<T> Receiver<T> {
    /// Block until the value arrives; `None` if the sender was dropped without one.
    pub(crate) fn wait(&self) -> Option<T> {
        let mut st = self.0.lock();
        loop {
            if let Some(v) = st.value.take() {
                return Some(v);
            }
            if st.sender_gone {
                return None;
            }
            st.waiting += 1;
            st = self.0.cv.wait(st).unwrap_or_else(|p| p.into_inner());
            st.waiting -= 1;
        }
    }

    pub(crate) fn poll_recv(&self, cx: &mut Context<'_>) -> Poll<Option<T>> {
        let mut st = self.0.lock();
        if let Some(v) = st.value.take() {
            return Poll::Ready(Some(v));
        }
        if st.sender_gone {
            return Poll::Ready(None);
        }
        match &st.waker {
            Some(w) if w.will_wake(cx.waker()) => {}
            _ => st.waker = Some(cx.waker().clone()),
        }
        Poll::Pending
    }
}

impl<T> Drop for Receiver<T> {
    fn drop(&mut self) {
        self.0.lock().receiver_gone = true;
    }
}

impl<T> Future for Receiver<T> {
    type Output = Option<T>;
    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<T>> {
        self.poll_recv(cx)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn send_then_wait() {
        let (tx, rx) = channel();
        std::thread::spawn(move || tx.send(7).ok());
        assert_eq!(rx.wait(), Some(7));
    }

    #[test]
    fn a_blocked_waiter_is_woken_by_the_send() {
        let (tx, rx) = channel();
        let sender = std::thread::spawn(move || {
            // Long enough that the receiver is asleep in `wait` by then.
            std::thread::sleep(std::time::Duration::from_millis(50));
            tx.send(3).ok();
        });
        assert_eq!(rx.wait(), Some(3));
        sender.join().unwrap();
    }

    #[test]
    fn a_blocked_waiter_is_woken_by_a_sender_dropped_unsent() {
        let (tx, rx) = channel::<u8>();
        let sender = std::thread::spawn(move || {
            std::thread::sleep(std::time::Duration::from_millis(50));
            drop(tx);
        });
        assert_eq!(rx.wait(), None);
        sender.join().unwrap();
    }

    #[test]
    fn dropped_sender_gives_none() {
        let (tx, rx) = channel::<u8>();
        drop(tx);
        assert_eq!(futures::executor::block_on(rx), None);
    }

    #[test]
    fn dropped_receiver_is_cancel() {
        let (tx, rx) = channel::<u8>();
        drop(rx);
        assert!(tx.is_cancelled());
        assert_eq!(tx.send(1), Err(1));
    }
}
