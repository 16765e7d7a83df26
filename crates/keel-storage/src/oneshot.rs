//! A tiny runtime-agnostic oneshot channel (blocking wait and `Future`).

use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::task::{Context, Poll, Waker};

struct State<T> {
    value: Option<T>,
    waker: Option<Waker>,
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

pub(crate) struct Sender<T>(Arc<Shared<T>>);
pub(crate) struct Receiver<T>(Arc<Shared<T>>);

pub(crate) fn channel<T>() -> (Sender<T>, Receiver<T>) {
    let s = Arc::new(Shared {
        state: Mutex::new(State {
            value: None,
            waker: None,
            sender_gone: false,
            receiver_gone: false,
        }),
        cv: Condvar::new(),
    });
    (Sender(Arc::clone(&s)), Receiver(s))
}

impl<T> Sender<T> {
    /// Deliver the value; gives it back if the receiver is gone.
    pub(crate) fn send(self, v: T) -> Result<(), T> {
        let mut st = self.0.lock();
        if st.receiver_gone {
            return Err(v);
        }
        st.value = Some(v);
        let w = st.waker.take();
        drop(st);
        self.0.cv.notify_all();
        if let Some(w) = w {
            w.wake();
        }
        Ok(())
    }

    pub(crate) fn is_cancelled(&self) -> bool {
        self.0.lock().receiver_gone
    }
}

impl<T> Drop for Sender<T> {
    fn drop(&mut self) {
        let mut st = self.0.lock();
        st.sender_gone = true;
        let w = st.waker.take();
        drop(st);
        self.0.cv.notify_all();
        if let Some(w) = w {
            w.wake();
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
            st = self.0.cv.wait(st).unwrap_or_else(|p| p.into_inner());
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
