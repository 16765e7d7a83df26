//! [`Ending`]: a one-shot signal many can await. A database's close and a
//! subscription's cancel are each one; live subscriptions wait on both (see
//! `live.rs`). A leaf, so that the database (which owns its close signal) and the
//! subscriptions (which wait on it) both sit above it.

use std::future::Future;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use futures::future::{FutureExt, Shared};

/// A one-shot signal many can await: a database's close, or a subscription's
/// cancel. Firing is idempotent; awaiting after it fired returns at once.
pub(crate) struct Ending {
    fired: AtomicBool,
    tx: Mutex<Option<futures::channel::oneshot::Sender<()>>>,
    rx: Shared<futures::channel::oneshot::Receiver<()>>,
}

impl std::fmt::Debug for Ending {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Ending")
            .field("fired", &self.has_fired())
            .finish()
    }
}

impl Ending {
    pub(crate) fn new() -> Arc<Ending> {
        let (tx, rx) = futures::channel::oneshot::channel();
        Arc::new(Ending {
            fired: AtomicBool::new(false),
            tx: Mutex::new(Some(tx)),
            rx: rx.shared(),
        })
    }

    pub(crate) fn fire(&self) {
        self.fired.store(true, Ordering::SeqCst);
        // Dropping the sender resolves every waiter.
        drop(self.tx.lock().unwrap_or_else(|p| p.into_inner()).take());
    }

    pub(crate) fn has_fired(&self) -> bool {
        self.fired.load(Ordering::SeqCst)
    }

    /// Resolves once fired.
    pub(crate) fn wait(&self) -> impl Future<Output = ()> + Send + 'static {
        self.rx.clone().map(|_| ())
    }
}
