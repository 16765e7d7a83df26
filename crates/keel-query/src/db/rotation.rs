//! Rotating the key of an open [`Database`]: the store suspends its own
//! connections, rotates the file ([`keel_storage::rotate`]), keys its connections
//! with the new key and resumes; the database handle, its subscriptions and its
//! dictionary go on over the new file. What a rotation of a closed file does,
//! and what a crash leaves, is in `keel_storage::rotate` and `docs/encryption.md`.

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};

use keel_storage::rotate::{self, Encryption, RotateOptions, RotateReport};

use crate::base::error::{Error, Result};
use crate::db::database::Database;
use crate::engine;

/// A rotation of an open database running on a keel thread (`keel-rotate`):
/// a future, or [`Rotation::wait`] to block. Dropping it does not stop it.
#[must_use = "the rotation runs anyway; await it to learn whether it succeeded"]
pub struct Rotation {
    run: Option<rotate::Rotation>,
    refused: Option<Error>,
}

impl Rotation {
    /// Block until the rotation ends.
    pub fn wait(mut self) -> Result<RotateReport> {
        match (self.refused.take(), self.run.take()) {
            (Some(e), _) => Err(e),
            (None, Some(r)) => r.wait().map_err(Error::from),
            (None, None) => unreachable!("a rotation is either refused or running"),
        }
    }
}

impl Future for Rotation {
    type Output = Result<RotateReport>;
    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        if let Some(e) = self.refused.take() {
            return Poll::Ready(Err(e));
        }
        match self.run.as_mut() {
            Some(r) => Pin::new(r).poll(cx).map(|r| r.map_err(Error::from)),
            None => Poll::Pending,
        }
    }
}

impl Database {
    /// Move this open database to a new key (`Some`), or to plaintext (`None`,
    /// an export for tools without a key), without closing it. Returns at once;
    /// the rotation runs on a keel thread (`keel-rotate`) with progress events
    /// ([`RotateOptions::progress`]), like [`rotate::start`] on a closed file.
    ///
    /// * **Meanwhile:** the store lets go of its connections, as
    ///   [`Database::suspend`] does. Writes submitted meanwhile wait in the queue
    ///   and commit into the new file once it is done: none is refused and none
    ///   is lost. Reads wait likewise. A write already running may finish first.
    /// * **After:** the connections open the new file with the new key, and `to`'s
    ///   provider becomes the database's key provider. Subscriptions and the
    ///   dictionary go on; the rows are the same, so they deliver nothing new.
    /// * **Failure** (another process has the file open: `Locked`; the new key's
    ///   provider has no key: `KeyUnavailable` / `KeyLost`) leaves the old file
    ///   under the old key, and the database usable on it.
    /// * **Another process** that had the database open must have suspended it
    ///   (else the rotation fails with `Locked`). When it resumes, it asks its key
    ///   provider again and goes on with the new file if that key opens it; if it
    ///   does not, its writes fail with `Rotated` and nothing is written to the
    ///   old file.
    ///
    /// Inside a write closure it is refused with [`Error::Unsupported`] (the
    /// rotation waits for the running write).
    ///
    /// ```
    /// # use keel_query::{Database, StoreOptions};
    /// use keel_query::rotate::{Encryption, RotateOptions};
    /// use keel_storage::encryption::KeyFile;
    /// use keel_example_blog::blog::Post;
    /// # let dir = tempfile::tempdir().unwrap();
    /// let db = Database::open_for::<Post>(dir.path().join("m.db"), StoreOptions::default())?;
    /// // Plaintext -> encrypted, the database open all along.
    /// let key = Encryption::new(KeyFile::new(dir.path().join("m.key")));
    /// let report = db.rotate_key(Some(key), RotateOptions::default()).wait()?;
    /// assert_eq!(report.from, keel_query::rotate::KeyId::Plaintext);
    /// assert_eq!(db.fetch::<Post>().count()?, 0);
    /// # Ok::<(), keel_query::Error>(())
    /// ```
    pub fn rotate_key(&self, to: Option<Encryption>, opts: RotateOptions) -> Rotation {
        let refused = self.inner.check_open("rotate the key").err().or_else(|| {
            engine::in_write_closure(&self.inner).then(|| Error::Unsupported {
                op: "rotate the key",
                hint: "a rotation waits for the running write to finish: start it outside the write closure",
                path: self.inner.path.clone(),
            })
        });
        match refused {
            Some(e) => Rotation {
                run: None,
                refused: Some(e),
            },
            None => Rotation {
                run: Some(self.inner.store.rotate_key(to, opts)),
                refused: None,
            },
        }
    }
}
