//! The dictionary: typed key-value settings in the same file as the objects.

use std::sync::{Arc, Mutex};

use keel_query::dictionary::{DictValue as KDict, FromDictValue};

use crate::callbacks::{gated, guarded, Foreign};
use crate::db::Database;
use crate::error::{CallbackError, KeelError};

/// A dictionary value. Reading a value as another type is a `TypeMismatch`, never
/// a reinterpretation (integers convert between widths only when they fit).
#[derive(Debug, Clone, PartialEq, uniffi::Enum)]
pub enum DictValue {
    /// A boolean.
    Bool {
        /// The value.
        v: bool,
    },
    /// A signed integer.
    Integer {
        /// The value.
        v: i64,
    },
    /// An unsigned integer.
    Unsigned {
        /// The value.
        v: u64,
    },
    /// A floating-point number.
    Real {
        /// The value.
        v: f64,
    },
    /// A string.
    Text {
        /// The value.
        v: String,
    },
    /// Bytes.
    Bytes {
        /// The value.
        v: Vec<u8>,
    },
    /// A FlatBuffers object of `collection` (verified against the schema when set).
    Object {
        /// The collection the bytes are a root of.
        collection: String,
        /// The object.
        bytes: Vec<u8>,
    },
    /// JSON text.
    Json {
        /// The value.
        v: String,
    },
}

impl From<KDict> for DictValue {
    fn from(v: KDict) -> Self {
        match v {
            KDict::Bool(v) => DictValue::Bool { v },
            KDict::Int(v) => DictValue::Integer { v },
            KDict::UInt(v) => DictValue::Unsigned { v },
            KDict::Float(v) => DictValue::Real { v },
            KDict::String(v) => DictValue::Text { v },
            KDict::Bytes(v) => DictValue::Bytes { v },
            KDict::Object { collection, bytes } => DictValue::Object { collection, bytes },
            KDict::Json(v) => DictValue::Json { v },
        }
    }
}

impl From<DictValue> for KDict {
    fn from(v: DictValue) -> Self {
        match v {
            DictValue::Bool { v } => KDict::Bool(v),
            DictValue::Integer { v } => KDict::Int(v),
            DictValue::Unsigned { v } => KDict::UInt(v),
            DictValue::Real { v } => KDict::Float(v),
            DictValue::Text { v } => KDict::String(v),
            DictValue::Bytes { v } => KDict::Bytes(v),
            DictValue::Object { collection, bytes } => KDict::Object { collection, bytes },
            DictValue::Json { v } => KDict::Json(v),
        }
    }
}

/// Receives a dictionary key's value: the current one first, then each update
/// (`null` when removed). Every call, the first included, runs **on the
/// dictionary's notifier thread** (`keel-dict-notify`, a keel thread), one at a time
/// per subscription, never on the thread that subscribed or set; hop to your own
/// thread or event loop. Exceptions are caught and ignored.
#[uniffi::export(callback_interface)]
pub trait DictionaryListener: Send + Sync {
    /// The key's value changed (or was removed: `value` is null).
    fn on_change(&self, key: String, value: Option<DictValue>) -> Result<(), CallbackError>;
}

/// A subscription to one dictionary key; `cancel()` ends it.
#[derive(uniffi::Object)]
pub struct DictionarySubscription {
    inner: Mutex<Option<keel_query::dictionary::DictSubscription>>,
}

impl std::fmt::Debug for DictionarySubscription {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("DictionarySubscription")
    }
}

#[uniffi::export]
impl DictionarySubscription {
    /// Stop the callbacks (idempotent). A callback running at that moment is
    /// waited for, unless `cancel` is called from inside it.
    pub fn cancel(&self) {
        let s = self.inner.lock().unwrap_or_else(|p| p.into_inner()).take();
        drop(s);
    }
}

/// The database's dictionary, like `UserDefaults` / `SharedPreferences` but in the
/// same file and under the same guarantees as the objects: reads come from memory,
/// sets return at once and are persisted by the writer in the background; `sync()`
/// resolves once everything set before it is committed.
#[derive(uniffi::Object)]
pub struct Dictionary {
    d: keel_query::Dictionary,
    db: keel_query::Database,
}

impl std::fmt::Debug for Dictionary {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Dictionary")
    }
}

impl Dictionary {
    fn typed<T: FromDictValue>(&self, key: &str) -> Result<Option<T>, KeelError> {
        crate::db::sync_call(|| Ok(self.d.get::<T>(key)?))
    }
}

#[uniffi::export]
impl Database {
    /// The dictionary of this database.
    pub fn dictionary(&self) -> Arc<Dictionary> {
        Arc::new(Dictionary {
            d: self.db.dictionary(),
            db: self.db.clone(),
        })
    }
}

#[uniffi::export]
impl Dictionary {
    /// The value of `key`, whatever its type, or null.
    pub fn get(&self, key: String) -> Result<Option<DictValue>, KeelError> {
        crate::db::sync_call(|| Ok(self.d.get_value(&key)?.map(Into::into)))
    }

    /// Set `key` (returns at once; persisted in the background). An `Object` value
    /// is verified against the schema first (`InvalidObject`, `UnknownCollection`).
    pub fn set(&self, key: String, value: DictValue) -> Result<(), KeelError> {
        if let DictValue::Object { collection, bytes } = &value {
            let schema = self.db.schema();
            let c = schema
                .collection(collection)
                .ok_or_else(|| KeelError::UnknownCollection {
                    message: format!(
                        "dictionary set {key:?}: no collection named {collection:?} in the schema"
                    ),
                })?;
            let reader = schema
                .table_reader(c.table)
                .ok_or_else(|| KeelError::internal("collection table missing"))?;
            reader.read(bytes).map_err(|e| KeelError::InvalidObject {
                message: format!(
                    "dictionary set {key:?}: the bytes are not a valid {collection}: {e}"
                ),
            })?;
            let full = c.name.clone();
            let bytes = bytes.clone();
            return Ok(self.d.set(
                &key,
                KDict::Object {
                    collection: full,
                    bytes,
                },
            )?);
        }
        Ok(self.d.set(&key, KDict::from(value))?)
    }

    /// Remove `key` (no error if absent).
    pub fn remove(&self, key: String) -> Result<(), KeelError> {
        Ok(self.d.remove(&key)?)
    }

    /// Remove every key.
    pub fn remove_all(&self) -> Result<(), KeelError> {
        Ok(self.d.remove_all()?)
    }

    /// True if `key` holds a value.
    pub fn contains(&self, key: String) -> Result<bool, KeelError> {
        crate::db::sync_call(|| Ok(self.d.contains(&key)?))
    }

    /// Every key, sorted.
    pub fn keys(&self) -> Result<Vec<String>, KeelError> {
        crate::db::sync_call(|| Ok(self.d.keys()?))
    }

    /// `key` as a bool; `TypeMismatch` if it holds something else.
    pub fn get_bool(&self, key: String) -> Result<Option<bool>, KeelError> {
        self.typed(&key)
    }
    /// `key` as a signed integer (unsigned values that fit convert).
    pub fn get_int(&self, key: String) -> Result<Option<i64>, KeelError> {
        self.typed(&key)
    }
    /// `key` as a floating-point number.
    pub fn get_double(&self, key: String) -> Result<Option<f64>, KeelError> {
        self.typed(&key)
    }
    /// `key` as a string.
    pub fn get_string(&self, key: String) -> Result<Option<String>, KeelError> {
        self.typed(&key)
    }
    /// `key` as bytes.
    pub fn get_bytes(&self, key: String) -> Result<Option<Vec<u8>>, KeelError> {
        self.typed(&key)
    }

    /// Set a bool.
    pub fn set_bool(&self, key: String, value: bool) -> Result<(), KeelError> {
        Ok(self.d.set(&key, value)?)
    }
    /// Set a signed integer.
    pub fn set_int(&self, key: String, value: i64) -> Result<(), KeelError> {
        Ok(self.d.set(&key, value)?)
    }
    /// Set a floating-point number.
    pub fn set_double(&self, key: String, value: f64) -> Result<(), KeelError> {
        Ok(self.d.set(&key, value)?)
    }
    /// Set a string.
    pub fn set_string(&self, key: String, value: String) -> Result<(), KeelError> {
        Ok(self.d.set(&key, value)?)
    }
    /// Set bytes.
    pub fn set_bytes(&self, key: String, value: Vec<u8>) -> Result<(), KeelError> {
        Ok(self.d.set(&key, value)?)
    }

    /// Resolves once everything set before the call is committed (durable under the
    /// commit sync policy).
    pub async fn sync(&self) -> Result<(), KeelError> {
        gated(async move { Ok(self.d.sync().await?) }).await
    }

    /// Follow `key`: `listener` gets the current value, then each change (all on
    /// the notifier thread, see [`DictionaryListener`]).
    ///
    /// Returns at once whatever the database is doing: the current value is read
    /// from memory or, on a cache miss, on a keel thread. While the database is
    /// suspended that read waits for `resume` (holding no thread), so the first
    /// callback carries the stored value after resume — never a false `null`.
    pub fn subscribe(
        &self,
        key: String,
        listener: Box<dyn DictionaryListener>,
    ) -> Arc<DictionarySubscription> {
        let k2 = key.clone();
        let listener = Foreign::new(listener);
        let sub = self.d.subscribe_with(&key, move |v| {
            let v = v.map(DictValue::from);
            guarded("dictionary subscription", || {
                listener.on_change(k2.clone(), v)
            });
        });
        Arc::new(DictionarySubscription {
            inner: Mutex::new(Some(sub)),
        })
    }
}
