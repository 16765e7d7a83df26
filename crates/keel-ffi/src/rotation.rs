//! Rotating the key of an open database through the FFI: `Database::rotate_key`,
//! the async call Swift, Kotlin and Python apps make to move a database to a new
//! key, from plaintext to encrypted, or back to plaintext (an export), without
//! closing it.
//!
//! It is `keel_query::Database::rotate_key` (see `docs/encryption.md`): the
//! store lets go of its connections, the file is copied under the new key and
//! renamed over the old one, and the connections reopen with the new key; writes
//! made meanwhile wait and land in the new file. The new key comes from an
//! [`Encryption`] like the one `OpenOptions.encryption` takes, asked with
//! `KeyPurpose::Create` (the provider may make the key, and must store it before
//! it returns); `None` means plaintext. Progress events reach an optional
//! listener on the rotation's thread (`keel-rotate`), each counted as a foreign
//! call and refused after `stop_callbacks`; what a listener throws is ignored.
//! The call itself runs on a keel thread of its own: the caller never waits.

use std::sync::Arc;

#[cfg(feature = "encryption-api")]
use keel_query::rotate::{RotateOptions, Step};

use crate::callbacks::Foreign;
#[cfg(feature = "encryption-api")]
use crate::callbacks::ForeignCall;
use crate::db::Database;
use crate::error::{CallbackError, KeelError};
use crate::keys::Encryption;
use crate::tasks::{run_async, Runner};

/// Where a rotation is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, uniffi::Enum)]
pub enum RotateStep {
    /// The file is held exclusively and its WAL emptied.
    Lock,
    /// The copy under the new key is being written (`fraction` grows).
    Copy,
    /// The copy is synced.
    Sync,
    /// The copy became the database (the rename).
    Switch,
    /// Finished.
    Done,
}

/// A progress event of a rotation.
#[derive(Debug, Clone, PartialEq, uniffi::Record)]
pub struct RotateProgress {
    /// The step.
    pub step: RotateStep,
    /// How far the whole rotation is, `0.0 ..= 1.0`.
    pub fraction: f64,
    /// Bytes of the copy written so far.
    pub bytes: u64,
}

/// Receives a rotation's progress, **on a keel thread** (`keel-rotate`).
/// Exceptions are ignored.
#[uniffi::export(callback_interface)]
pub trait RotateProgressListener: Send + Sync {
    /// One progress event.
    fn on_progress(&self, progress: RotateProgress) -> Result<(), CallbackError>;
}

/// What a finished rotation did.
#[derive(Debug, Clone, PartialEq, uniffi::Record)]
pub struct RotateReport {
    /// The key before: `plaintext`, or `salt:<32 hex digits>` (the data key's
    /// salt, which is not secret).
    pub from: String,
    /// The key after, in the same form.
    pub to: String,
    /// Bytes of the new file.
    pub bytes: u64,
    /// Wall time of the rotation, in milliseconds.
    pub duration_ms: f64,
}

#[uniffi::export]
impl Database {
    /// Move this open database to a new key (`to`), or to plaintext (`None`: an
    /// export for tools without a key), on a keel thread. The database stays
    /// open: writes made meanwhile wait and land in the new file, reads wait,
    /// subscriptions go on, and afterwards `to`'s key source is the database's.
    /// Fails with `Locked` when another process has the file open (it must
    /// suspend first), with `KeyUnavailable` / `KeyLost` when `to`'s provider has
    /// no key; then the old file and key stay and the database goes on with them.
    ///
    /// Swift: `try await db.rotateKey(to: enc, progress: nil)`; Kotlin:
    /// `db.rotateKey(enc) { p -> ... }`.
    #[uniffi::method(default(progress = None))]
    pub async fn rotate_key(
        &self,
        to: Option<Encryption>,
        progress: Option<Box<dyn RotateProgressListener>>,
    ) -> Result<RotateReport, KeelError> {
        let to = match to {
            Some(e) => Some(e.rotation_target()?),
            None => None,
        };
        let listener = progress.map(|l| Arc::new(Foreign::new(l)));
        run_async(&self.db, Runner::OwnThread, "rotate_key", move |db| {
            rotate(&db, to, listener)
        })
        .await
    }
}

#[cfg(feature = "encryption-api")]
fn rotate(
    db: &keel_query::Database,
    to: Option<keel_query::rotate::Encryption>,
    listener: Option<Arc<Foreign<dyn RotateProgressListener>>>,
) -> Result<RotateReport, KeelError> {
    let mut opts = RotateOptions::default();
    if let Some(l) = listener {
        opts = opts.progress(move |p| {
            let Some(_call) = ForeignCall::enter() else {
                return;
            };
            let step = match p.step {
                Step::Lock => RotateStep::Lock,
                Step::Copy => RotateStep::Copy,
                Step::Sync => RotateStep::Sync,
                Step::Switch => RotateStep::Switch,
                Step::Done => RotateStep::Done,
            };
            let event = RotateProgress {
                step,
                fraction: p.fraction,
                bytes: p.bytes,
            };
            // A listener's failure (or a panic on its way back) is not the
            // rotation's: it goes on.
            let _ = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| l.on_progress(event)));
        });
    }
    let r = db.rotate_key(to, opts).wait()?;
    Ok(RotateReport {
        from: r.from.to_string(),
        to: r.to.to_string(),
        bytes: r.bytes,
        duration_ms: r.duration.as_secs_f64() * 1e3,
    })
}

/// Without an encryption feature `rotation_target` refuses every key; a
/// rotation to plaintext has nothing to do on a database that is plaintext.
#[cfg(not(feature = "encryption-api"))]
fn rotate(
    _: &keel_query::Database,
    _: Option<std::convert::Infallible>,
    _: Option<Arc<Foreign<dyn RotateProgressListener>>>,
) -> Result<RotateReport, KeelError> {
    Err(KeelError::invalid_argument(
        "this build of keel has no encryption (build keel-ffi with the feature `encryption` or `encryption-system-crypto`)",
    ))
}
