//! Encryption keys from the app: where an encrypted database's data key comes from
//! when it is opened through the FFI.
//!
//! ## The model
//!
//! An encrypted database has one random **data key**: 48 bytes, the 32-byte AES key
//! SQLCipher uses directly and 16 bytes of salt (see `docs/encryption.md`). The app
//! keeps it in its platform's key store — the Keychain on Apple, a file wrapped by
//! an Android Keystore key — and hands it to keel at open through a
//! [`KeyProvider`] it implements in Swift, Kotlin or Python. Or it names a key file
//! ([`KeySource::File`]), for tools and tests.
//!
//! The open asks the provider **once**, before it creates or reads any file, with a
//! [`KeyPurpose`]: `Create` for a database that does not exist yet (the provider
//! makes a key — [`new_data_key`] gives one — and stores it durably before it
//! returns) or `Open` for an existing one (it must never make a new key: a new key
//! opens nothing that is already there). The store keeps the key until it closes,
//! so nothing later needs the provider again (a device that locks after the open
//! does not fail the readers or the checkpointer).
//!
//! A provider without a key throws a [`KeyError`] saying why: `Unavailable` (the
//! device is locked; the open fails with `KeelError::KeyUnavailable`, retry after
//! the unlock) or `Lost` (the database exists but its key does not, as after a
//! backup restored without it; `KeelError::KeyLost`). keel itself finds the two
//! others: a key that does not decrypt the file (`WrongKey`) and a key for a
//! plaintext file (`NotEncrypted`). None of the four changes any file.
//!
//! ## Where the provider runs
//!
//! On the open's thread: a keel thread (`keel-open`) for `open_async`, the calling
//! thread for `open_blocking`. So it may block on the platform's key store (the
//! Keychain can take a few milliseconds), but never on a write of the database it
//! is opening. Like every foreign call (see `callbacks.rs`) it is counted while
//! it runs and refused after `stop_callbacks`; anything unexpected (an exception
//! of another type, a panic on the way back) becomes `Unavailable`, the answer that
//! makes nothing and loses nothing: the app can ask again.

use std::sync::Arc;

use crate::error::KeelError;

#[cfg(feature = "encryption-api")]
use with_cipher as imp;
#[cfg(not(feature = "encryption-api"))]
use without_cipher as imp;

/// Bytes of a data key as it crosses the FFI: the 32-byte AES key, then the 16-byte
/// salt.
pub const DATA_KEY_BYTES: u32 = 48;

/// Why the open asks for the key.
#[derive(Debug, Clone, Copy, PartialEq, Eq, uniffi::Enum)]
pub enum KeyPurpose {
    /// The database exists: return its key, or throw why not. Never make a new one.
    Open,
    /// The database does not exist yet: return its key, making (and durably storing)
    /// a new one if there is none. keel writes nothing before the provider returns.
    Create,
}

/// Why a [`KeyProvider`] has no key. Kotlin: `KeyException`; Python:
/// `KeyProviderError` (Python's builtin `KeyError` keeps its name).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error, uniffi::Error)]
pub enum KeyError {
    /// The key exists but cannot be read now (the device is locked, the key store
    /// is not ready): the open fails with `KeyUnavailable`; retry later.
    #[error("key unavailable: {reason}")]
    Unavailable {
        /// What the key store said. (Not `message`: Kotlin exceptions have one.)
        reason: String,
    },
    /// There is no usable key for an existing database (a backup restored without
    /// its key, a key store item that is gone): the open fails with `KeyLost`.
    #[error("key lost: {reason}")]
    Lost {
        /// What the key store said.
        reason: String,
    },
}

impl From<uniffi::UnexpectedUniFFICallbackError> for KeyError {
    fn from(e: uniffi::UnexpectedUniFFICallbackError) -> Self {
        KeyError::Unavailable {
            reason: format!("the key provider failed: {}", e.reason),
        }
    }
}

/// Where an encrypted database's data key comes from, implemented by the app (the
/// Keychain, an Android Keystore-wrapped key). Called once per open, **on the
/// open's thread** (see the module docs).
#[uniffi::export(with_foreign)]
pub trait KeyProvider: Send + Sync {
    /// The data key of the database at `database` (48 bytes, [`DATA_KEY_BYTES`]:
    /// the 32-byte key, then the 16-byte salt), or why there is none.
    fn data_key(&self, database: String, purpose: KeyPurpose) -> Result<Vec<u8>, KeyError>;
}

/// Where the data key of an encrypted database comes from.
#[derive(Clone, uniffi::Enum)]
pub enum KeySource {
    /// The app's own provider.
    Provider {
        /// The provider.
        provider: Arc<dyn KeyProvider>,
    },
    /// A file holding the key as 96 hex digits (mode 0600), made, synced and
    /// linked into place before a new database is created. For tools, services
    /// and tests; keep it out of the database's backups.
    File {
        /// The key file.
        path: String,
    },
}

impl std::fmt::Debug for KeySource {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            KeySource::Provider { .. } => f.write_str("Provider(..)"),
            KeySource::File { path } => f.debug_struct("File").field("path", path).finish(),
        }
    }
}

impl PartialEq for KeySource {
    fn eq(&self, other: &Self) -> bool {
        match (self, other) {
            (KeySource::Provider { provider: a }, KeySource::Provider { provider: b }) => {
                Arc::ptr_eq(a, b)
            }
            (KeySource::File { path: a }, KeySource::File { path: b }) => a == b,
            _ => false,
        }
    }
}

/// How an encrypted database is opened: set `OpenOptions.encryption`. A database
/// opened without it is a plaintext file.
#[derive(Debug, Clone, PartialEq, uniffi::Record)]
pub struct Encryption {
    /// Where the data key comes from.
    pub key: KeySource,
    /// Keep the first 32 bytes of the file plaintext (the SQLite magic and the
    /// fields iOS reads), for a file in an App Group container: without it iOS
    /// kills a suspended app that holds the file open (0xdead10cc). Part of how the
    /// file is read: opening with the other setting fails with `WrongKey`.
    #[uniffi(default = false)]
    pub plaintext_header: bool,
}

/// A new random data key ([`DATA_KEY_BYTES`] bytes from the operating system's
/// generator), for a provider asked to `Create`: store it durably, then return it.
#[uniffi::export]
pub fn new_data_key() -> Result<Vec<u8>, KeelError> {
    imp::new_data_key()
}

impl Encryption {
    /// The new key of a rotation (`Database::rotate_key`).
    pub(crate) fn rotation_target(&self) -> Result<imp::Target, KeelError> {
        imp::rotation_target(self)
    }

    /// Set `o` to encrypt with this key source.
    pub(crate) fn apply(
        &self,
        o: keel_storage::StoreOptions,
    ) -> Result<keel_storage::StoreOptions, KeelError> {
        imp::apply(self, o)
    }
}

#[cfg(feature = "encryption-api")]
mod with_cipher {
    use std::path::Path;
    use std::sync::Arc;

    use keel_storage::encryption::{self as kenc, DataKey, KeyFile, KEY_BYTES, SALT_BYTES};
    use keel_storage::StoreOptions;
    use zeroize::Zeroizing;

    use super::{Encryption, KeyError, KeyProvider, KeyPurpose, KeySource, DATA_KEY_BYTES};
    use crate::callbacks::{Foreign, ForeignCall};
    use crate::error::KeelError;

    pub(super) fn new_data_key() -> Result<Vec<u8>, KeelError> {
        let key = DataKey::generate().map_err(|e| KeelError::Io {
            message: format!("new data key: no random bytes: {e}"),
        })?;
        let hex = key.to_hex();
        let bytes = hex
            .as_bytes()
            .chunks_exact(2)
            .map(|p| {
                let digit = |c: u8| (c as char).to_digit(16).unwrap_or(0) as u8;
                digit(p[0]) << 4 | digit(p[1])
            })
            .collect();
        Ok(bytes)
    }

    /// What a rotation of an open database moves it to.
    pub(crate) type Target = keel_query::rotate::Encryption;

    pub(super) fn rotation_target(e: &Encryption) -> Result<Target, KeelError> {
        let target = match &e.key {
            KeySource::File { path } => Target::new(KeyFile::new(path)),
            KeySource::Provider { provider } => {
                Target::new(ForeignKeys(Foreign::new(Box::new(Arc::clone(provider)))))
            }
        };
        Ok(target.plaintext_header(e.plaintext_header))
    }

    pub(super) fn apply(e: &Encryption, o: StoreOptions) -> Result<StoreOptions, KeelError> {
        let o = o.plaintext_header(e.plaintext_header);
        Ok(match &e.key {
            KeySource::File { path } => o.encryption(KeyFile::new(path)),
            KeySource::Provider { provider } => {
                o.encryption(ForeignKeys(Foreign::new(Box::new(Arc::clone(provider)))))
            }
        })
    }

    /// The app's provider, as the storage kernel asks for keys. Held by the store's
    /// options for its life; freed through [`Foreign`] (never at exit).
    struct ForeignKeys(Foreign<Arc<dyn KeyProvider>>);

    impl kenc::KeyProvider for ForeignKeys {
        fn data_key(
            &self,
            database: &Path,
            purpose: kenc::KeyPurpose,
        ) -> Result<DataKey, kenc::KeyError> {
            let purpose = match purpose {
                kenc::KeyPurpose::Open => KeyPurpose::Open,
                kenc::KeyPurpose::Create => KeyPurpose::Create,
            };
            let database = database.display().to_string();
            let Some(_call) = ForeignCall::enter() else {
                return Err(kenc::KeyError::Unavailable(
                    "the process is exiting: keel no longer calls the key provider".into(),
                ));
            };
            let answer = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                self.0.data_key(database, purpose)
            }));
            match answer {
                Ok(Ok(bytes)) => data_key(Zeroizing::new(bytes)),
                Ok(Err(KeyError::Unavailable { reason })) => {
                    Err(kenc::KeyError::Unavailable(reason))
                }
                Ok(Err(KeyError::Lost { reason })) => Err(kenc::KeyError::Lost(reason)),
                Err(_) => Err(kenc::KeyError::Unavailable(
                    "the key provider panicked on its way back into keel".into(),
                )),
            }
        }
    }

    /// The provider's bytes as a key. Any other length is not a keel data key: the
    /// key store holds something else, so the key is as good as lost (as for a
    /// damaged key file), and nothing is made in its place.
    fn data_key(bytes: Zeroizing<Vec<u8>>) -> Result<DataKey, kenc::KeyError> {
        if bytes.len() != DATA_KEY_BYTES as usize {
            return Err(kenc::KeyError::Lost(format!(
                "the key provider returned {} bytes, not a keel data key ({DATA_KEY_BYTES} bytes: key, then salt)",
                bytes.len()
            )));
        }
        let mut key = Zeroizing::new([0u8; KEY_BYTES]);
        let mut salt = Zeroizing::new([0u8; SALT_BYTES]);
        key.copy_from_slice(&bytes[..KEY_BYTES]);
        salt.copy_from_slice(&bytes[KEY_BYTES..]);
        Ok(DataKey::from_parts(&key, &salt))
    }
}

/// Without an encryption feature this build of keel cannot encrypt: asking for it
/// is a typed error, never a plaintext file the app believes encrypted.
#[cfg(not(feature = "encryption-api"))]
mod without_cipher {
    use keel_storage::StoreOptions;

    use super::Encryption;
    use crate::error::KeelError;

    fn unsupported() -> KeelError {
        KeelError::invalid_argument(
            "this build of keel has no encryption (build keel-ffi with the feature `encryption` or `encryption-system-crypto`)",
        )
    }

    pub(super) fn new_data_key() -> Result<Vec<u8>, KeelError> {
        Err(unsupported())
    }

    /// No rotation target exists in this build.
    pub(crate) type Target = std::convert::Infallible;

    pub(super) fn rotation_target(_: &Encryption) -> Result<Target, KeelError> {
        Err(unsupported())
    }

    pub(super) fn apply(_: &Encryption, _: StoreOptions) -> Result<StoreOptions, KeelError> {
        Err(unsupported())
    }
}
