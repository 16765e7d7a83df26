//! A small pool of PostgreSQL connections for uploads and snapshots.
//!
//! Each connection sits behind its own async mutex; [`Pool::get`] takes a free one,
//! or waits for the least recently handed-out one. A connection that PostgreSQL
//! closed (a restart, an admin's `pg_terminate_backend`) is replaced on the next
//! `get`, so one lost connection costs one failed request, not the relay.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use tokio::sync::{Mutex, OwnedMutexGuard};
use tokio_postgres::{Client, NoTls};

use crate::error::Error;

/// A connection taken from the pool (returned on drop).
pub type PooledClient = OwnedMutexGuard<Option<Client>>;

/// A fixed number of connections to one database.
#[derive(Debug)]
pub struct Pool {
    url: String,
    slots: Vec<Arc<Mutex<Option<Client>>>>,
    next: AtomicUsize,
}

impl Pool {
    /// A pool of `size` connections to `url`, opened lazily.
    pub fn new(url: &str, size: usize) -> Pool {
        Pool {
            url: url.to_owned(),
            slots: (0..size.max(1))
                .map(|_| Arc::new(Mutex::new(None)))
                .collect(),
            next: AtomicUsize::new(0),
        }
    }

    /// A live connection (`Some` inside the guard).
    pub async fn get(&self) -> Result<PooledClient, Error> {
        let free = self
            .slots
            .iter()
            .find_map(|slot| slot.clone().try_lock_owned().ok());
        let mut guard = match free {
            Some(guard) => guard,
            None => {
                let i = self.next.fetch_add(1, Ordering::Relaxed) % self.slots.len();
                self.slots[i].clone().lock_owned().await
            }
        };
        if guard.as_ref().is_none_or(|c| c.is_closed()) {
            *guard = Some(connect(&self.url).await?);
        }
        Ok(guard)
    }
}

/// Opens one connection, its driver on the current runtime.
pub async fn connect(url: &str) -> Result<Client, Error> {
    let (client, connection) = tokio_postgres::connect(url, NoTls).await?;
    tokio::spawn(async move {
        if let Err(e) = connection.await {
            tracing::warn!(error = %e, "a PostgreSQL connection ended");
        }
    });
    Ok(client)
}
