//! The [`Dictionary`] handle: the key-value store's methods, on a [`Database`].
//! The model and the guarantees are in the [`dictionary`](crate::dictionary)
//! module's docs; the cache and the pending writes it works on live there.

use std::collections::BTreeSet;
use std::sync::atomic::Ordering;
use std::sync::Arc;

use keel_schema::Record;
use keel_storage::WriteFuture;

use crate::base::error::{Error, Result};
use crate::db::database::Database;
use crate::dictionary::cache::{shard_of, SHARDS};
use crate::dictionary::subscribe::{self, DictStream, DictSubscription};
use crate::dictionary::value::{DictValue, FromDictValue, ToDictValue};

use crate::dictionary::shared::*;

/// Counters describing the dictionary's cache, for tests and tuning.
///
/// ```
/// # use keel_query::{Database, StoreOptions};
/// # use keel_example_blog::blog::Post;
/// # let dir = tempfile::tempdir().unwrap();
/// # let db = Database::open_for::<Post>(dir.path().join("d.db"), StoreOptions::default())?;
/// let d = db.dictionary();
/// d.set("a", 1)?;
/// let before = d.stats().disk_reads;
/// assert_eq!(d.get::<i32>("a")?, Some(1));
/// assert_eq!(d.stats().disk_reads, before); // hot read: no disk
/// # Ok::<(), keel_query::Error>(())
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub struct DictStats {
    /// Reads that missed the cache and went to the database.
    pub disk_reads: u64,
    /// Entries in the cache (including known-absent keys).
    pub cached_entries: usize,
    /// Cache entries not committed yet.
    pub dirty_entries: usize,
    /// Approximate bytes the cache holds.
    pub cached_bytes: usize,
    /// Flushes that wrote something.
    pub flushes: u64,
}

/// A persistent key-value store in the database file, with typed getters and
/// setters, an in-memory cache, background persistence and subscriptions. Get it
/// with [`Database::dictionary`](crate::db::database::Database::dictionary); cheap to clone,
/// `Send + Sync`. See the [module docs](crate::dictionary) for the model and the
/// guarantees.
///
/// ```
/// use keel_query::{Database, StoreOptions, Error};
/// use keel_example_blog::blog::Post;
/// # let dir = tempfile::tempdir().unwrap();
/// let db = Database::open_for::<Post>(dir.path().join("app.db"), StoreOptions::default())?;
/// let d = db.dictionary();
/// d.set("count", 300)?;
/// assert_eq!(d.get::<i64>("count")?, Some(300));
/// assert!(matches!(d.get::<u8>("count"), Err(Error::DictionaryTypeMismatch { .. })));
/// assert_eq!(d.get_or::<u8>("count", 0), 0);
/// # Ok::<(), keel_query::Error>(())
/// ```
#[derive(Clone)]
pub struct Dictionary {
    db: Database,
    shared: Arc<Shared>,
}

impl std::fmt::Debug for Dictionary {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Dictionary")
            .field("path", &self.db.path())
            .finish()
    }
}

impl Database {
    /// The key-value [`Dictionary`] stored in this database.
    ///
    /// ```
    /// # use keel_query::{Database, StoreOptions};
    /// # use keel_example_blog::blog::Post;
    /// # let dir = tempfile::tempdir().unwrap();
    /// # let db = Database::open_for::<Post>(dir.path().join("d.db"), StoreOptions::default())?;
    /// db.dictionary().set("onboarded", true)?;
    /// assert_eq!(db.dictionary().get::<bool>("onboarded")?, Some(true));
    /// # Ok::<(), keel_query::Error>(())
    /// ```
    pub fn dictionary(&self) -> Dictionary {
        Dictionary::new(self.clone(), Arc::clone(&self.inner().dict))
    }
}

impl Dictionary {
    pub(crate) fn new(db: Database, shared: Arc<Shared>) -> Dictionary {
        Dictionary { db, shared }
    }

    fn check(&self, op: &'static str) -> Result<()> {
        self.db.inner().check_open(op)
    }

    /// Set `key` to `value` (any [`ToDictValue`]: `bool`, integers, floats, `&str`,
    /// `String`, `&[u8]`, `Vec<u8>`, [`DictValue`]). Returns at once: every read
    /// from now on sees the value, and the writer persists it in the background.
    /// Fails only if the database is closed.
    ///
    /// ```
    /// # use keel_query::{Database, StoreOptions};
    /// # use keel_example_blog::blog::Post;
    /// # let dir = tempfile::tempdir().unwrap();
    /// # let db = Database::open_for::<Post>(dir.path().join("d.db"), StoreOptions::default())?;
    /// let d = db.dictionary();
    /// d.set("dark_mode", true)?;
    /// d.set("avatar", &[0xffu8, 0xd8][..])?;
    /// d.set("ratio", 1.5f32)?;
    /// assert_eq!(d.get::<bool>("dark_mode")?, Some(true));
    /// # Ok::<(), keel_query::Error>(())
    /// ```
    pub fn set<V: ToDictValue>(&self, key: &str, value: V) -> Result<()> {
        self.check("dictionary set")?;
        self.shared
            .change(key, Some(Arc::new(value.to_dict_value())));
        Ok(())
    }

    /// Store a keel object (a generated type) under `key`, as its FlatBuffers bytes
    /// tagged with its collection.
    ///
    /// ```
    /// # use keel_query::{Database, StoreOptions};
    /// use keel_example_blog::blog::{Author, Post};
    /// # let dir = tempfile::tempdir().unwrap();
    /// # let db = Database::open_for::<Post>(dir.path().join("d.db"), StoreOptions::default())?;
    /// let draft = Post::builder().id("draft").title("Unsent").build();
    /// db.dictionary().set_object("draft", &draft)?;
    /// assert_eq!(db.dictionary().get_object::<Post>("draft")?, Some(draft));
    /// # Ok::<(), keel_query::Error>(())
    /// ```
    pub fn set_object<R: Record>(&self, key: &str, obj: &R) -> Result<()> {
        self.set(key, object_value(obj))
    }

    /// Store any serde value under `key`, encoded as JSON (feature `serde`).
    ///
    /// ```
    /// # use keel_query::{Database, StoreOptions};
    /// # use keel_example_blog::blog::Post;
    /// # let dir = tempfile::tempdir().unwrap();
    /// # let db = Database::open_for::<Post>(dir.path().join("d.db"), StoreOptions::default())?;
    /// db.dictionary().set_serde("recent", &vec!["a".to_string(), "b".to_string()])?;
    /// assert_eq!(db.dictionary().get_serde::<Vec<String>>("recent")?.unwrap().len(), 2);
    /// # Ok::<(), keel_query::Error>(())
    /// ```
    #[cfg(feature = "serde")]
    pub fn set_serde<T: serde::Serialize + ?Sized>(&self, key: &str, value: &T) -> Result<()> {
        let v = serde_to(key, value)?;
        self.set(key, v)
    }

    /// Remove `key` (no error if it is absent). Returns at once, like [`Dictionary::set`].
    ///
    /// ```
    /// # use keel_query::{Database, StoreOptions};
    /// # use keel_example_blog::blog::Post;
    /// # let dir = tempfile::tempdir().unwrap();
    /// # let db = Database::open_for::<Post>(dir.path().join("d.db"), StoreOptions::default())?;
    /// let d = db.dictionary();
    /// d.set("token", "abc")?;
    /// d.remove("token")?;
    /// assert_eq!(d.get::<String>("token")?, None);
    /// # Ok::<(), keel_query::Error>(())
    /// ```
    pub fn remove(&self, key: &str) -> Result<()> {
        self.check("dictionary remove")?;
        self.shared.change(key, None);
        Ok(())
    }

    /// Remove every key. Returns at once, like [`Dictionary::set`].
    ///
    /// ```
    /// # use keel_query::{Database, StoreOptions};
    /// # use keel_example_blog::blog::Post;
    /// # let dir = tempfile::tempdir().unwrap();
    /// # let db = Database::open_for::<Post>(dir.path().join("d.db"), StoreOptions::default())?;
    /// let d = db.dictionary();
    /// d.set("a", 1)?;
    /// d.set("b", 2)?;
    /// d.remove_all()?;
    /// assert!(d.keys()?.is_empty());
    /// # Ok::<(), keel_query::Error>(())
    /// ```
    pub fn remove_all(&self) -> Result<()> {
        self.check("dictionary remove_all")?;
        self.shared.remove_all();
        Ok(())
    }

    /// The value of `key` as a `T`; `None` if absent (and no default is
    /// registered). A stored value of another kind, or one that does not fit `T`,
    /// is an [`Error::DictionaryTypeMismatch`].
    ///
    /// ```
    /// # use keel_query::{Database, StoreOptions, Error};
    /// # use keel_example_blog::blog::Post;
    /// # let dir = tempfile::tempdir().unwrap();
    /// # let db = Database::open_for::<Post>(dir.path().join("d.db"), StoreOptions::default())?;
    /// let d = db.dictionary();
    /// d.set("name", "ada")?;
    /// assert_eq!(d.get::<String>("name")?.as_deref(), Some("ada"));
    /// assert_eq!(d.get::<String>("missing")?, None);
    /// let e = d.get::<i32>("name").unwrap_err();
    /// assert_eq!(e.to_string(), "dictionary key \"name\": stored as string, cannot be read as i32");
    /// # Ok::<(), keel_query::Error>(())
    /// ```
    pub fn get<T: FromDictValue>(&self, key: &str) -> Result<Option<T>> {
        self.check("dictionary get")?;
        let r = self.shared.lookup(key, |v, _| {
            v.map(|v| T::from_dict_value(v).ok_or_else(|| mismatch(key, v, T::TYPE_NAME)))
        })?;
        match r {
            Some(r) => r.map(Some),
            None => self.default_as(key, |v| typed_from(key, v)),
        }
    }

    fn default_as<T>(
        &self,
        key: &str,
        f: impl FnOnce(&DictValue) -> Result<T>,
    ) -> Result<Option<T>> {
        match rd(&self.shared.defaults).get(key) {
            Some(v) => f(v).map(Some),
            None => Ok(None),
        }
    }

    /// The value of `key` as a `T`, or `default` if it is absent, of another type,
    /// or cannot be read (errors are logged).
    ///
    /// ```
    /// # use keel_query::{Database, StoreOptions};
    /// # use keel_example_blog::blog::Post;
    /// # let dir = tempfile::tempdir().unwrap();
    /// # let db = Database::open_for::<Post>(dir.path().join("d.db"), StoreOptions::default())?;
    /// let d = db.dictionary();
    /// d.set("volume", "loud")?;
    /// assert_eq!(d.get_or("volume", 0.8), 0.8);
    /// assert_eq!(d.get_or("volume", String::new()), "loud");
    /// # Ok::<(), keel_query::Error>(())
    /// ```
    pub fn get_or<T: FromDictValue>(&self, key: &str, default: T) -> T {
        match self.get::<T>(key) {
            Ok(Some(v)) => v,
            Ok(None) => default,
            Err(e) => {
                if !matches!(e, Error::DictionaryTypeMismatch { .. }) {
                    tracing::warn!(key, error = %e, "dictionary get_or: returning the default");
                }
                default
            }
        }
    }

    /// The value of `key` whatever its kind (the dynamic layer), or the registered
    /// default.
    ///
    /// ```
    /// # use keel_query::{Database, StoreOptions, DictValue};
    /// # use keel_example_blog::blog::Post;
    /// # let dir = tempfile::tempdir().unwrap();
    /// # let db = Database::open_for::<Post>(dir.path().join("d.db"), StoreOptions::default())?;
    /// db.dictionary().set("n", u64::MAX)?;
    /// assert_eq!(db.dictionary().get_value("n")?, Some(DictValue::UInt(u64::MAX)));
    /// # Ok::<(), keel_query::Error>(())
    /// ```
    pub fn get_value(&self, key: &str) -> Result<Option<DictValue>> {
        self.check("dictionary get")?;
        let v = self.shared.lookup(key, |v, _| v.cloned())?;
        match v {
            Some(v) => Ok(Some(v)),
            None => Ok(rd(&self.shared.defaults).get(key).cloned()),
        }
    }

    /// The object stored under `key`, decoded as `R`. A value of another kind or
    /// another collection is an [`Error::DictionaryTypeMismatch`].
    pub fn get_object<R: Record>(&self, key: &str) -> Result<Option<R>> {
        self.check("dictionary get")?;
        match self
            .shared
            .lookup(key, |v, _| v.map(|v| object_from::<R>(key, v)))?
        {
            Some(r) => r.map(Some),
            None => self.default_as(key, |v| object_from::<R>(key, v)),
        }
    }

    /// The object stored under `key`, or `default` when there is none or it is not
    /// an `R` (like [`get_or`](Self::get_or); a damaged value is logged).
    ///
    /// ```
    /// # use keel_query::{Database, StoreOptions};
    /// use keel_example_blog::blog::Post;
    /// # let dir = tempfile::tempdir().unwrap();
    /// # let db = Database::open_for::<Post>(dir.path().join("o.db"), StoreOptions::default())?;
    /// let d = db.dictionary();
    /// let draft = Post::builder().id("draft").build();
    /// assert_eq!(d.get_object_or("current", draft.clone()), draft);
    /// d.set_object("current", &Post::builder().id("p1").build())?;
    /// assert_eq!(d.get_object_or("current", draft).id, "p1");
    /// # Ok::<(), keel_query::Error>(())
    /// ```
    pub fn get_object_or<R: Record>(&self, key: &str, default: R) -> R {
        match self.get_object::<R>(key) {
            Ok(Some(v)) => v,
            Ok(None) => default,
            Err(e) => {
                if !matches!(e, Error::DictionaryTypeMismatch { .. }) {
                    tracing::warn!(key, error = %e, "dictionary get_object_or: returning the default");
                }
                default
            }
        }
    }

    /// The serde value stored under `key` (feature `serde`). A value of another
    /// kind, or JSON that does not deserialize as `T`, is an
    /// [`Error::DictionaryTypeMismatch`].
    #[cfg(feature = "serde")]
    pub fn get_serde<T: serde::de::DeserializeOwned>(&self, key: &str) -> Result<Option<T>> {
        self.check("dictionary get")?;
        match self
            .shared
            .lookup(key, |v, _| v.map(|v| serde_from::<T>(key, v)))?
        {
            Some(r) => r.map(Some),
            None => self.default_as(key, |v| serde_from::<T>(key, v)),
        }
    }

    /// True if a value is stored under `key` (registered defaults do not count).
    ///
    /// ```
    /// # use keel_query::{Database, StoreOptions};
    /// # use keel_example_blog::blog::Post;
    /// # let dir = tempfile::tempdir().unwrap();
    /// # let db = Database::open_for::<Post>(dir.path().join("d.db"), StoreOptions::default())?;
    /// let d = db.dictionary();
    /// d.register_defaults([("x", 1)]);
    /// assert!(!d.contains("x")?);
    /// d.set("x", 2)?;
    /// assert!(d.contains("x")?);
    /// # Ok::<(), keel_query::Error>(())
    /// ```
    pub fn contains(&self, key: &str) -> Result<bool> {
        self.check("dictionary contains")?;
        self.shared.lookup(key, |v, _| v.is_some())
    }

    /// Register defaults: values every getter returns for a key that has no stored
    /// value. They live in memory only (register them at each launch, as with
    /// `UserDefaults.register(defaults:)`), are not listed by [`Dictionary::keys`],
    /// and a later registration of the same key replaces the earlier one.
    ///
    /// ```
    /// # use keel_query::{Database, StoreOptions};
    /// # use keel_example_blog::blog::Post;
    /// # let dir = tempfile::tempdir().unwrap();
    /// # let db = Database::open_for::<Post>(dir.path().join("d.db"), StoreOptions::default())?;
    /// let d = db.dictionary();
    /// d.register_defaults([("font_size", 14)]);
    /// assert_eq!(d.get::<u16>("font_size")?, Some(14));
    /// d.set("font_size", 18)?;
    /// assert_eq!(d.get::<u16>("font_size")?, Some(18));
    /// d.remove("font_size")?;
    /// assert_eq!(d.get::<u16>("font_size")?, Some(14));
    /// # Ok::<(), keel_query::Error>(())
    /// ```
    pub fn register_defaults<K, V, I>(&self, defaults: I)
    where
        K: Into<String>,
        V: ToDictValue,
        I: IntoIterator<Item = (K, V)>,
    {
        let mut d = wr(&self.shared.defaults);
        for (k, v) in defaults {
            d.insert(k.into(), v.to_dict_value());
        }
    }

    /// Every key with a stored value (including values not persisted yet), sorted.
    ///
    /// ```
    /// # use keel_query::{Database, StoreOptions};
    /// # use keel_example_blog::blog::Post;
    /// # let dir = tempfile::tempdir().unwrap();
    /// # let db = Database::open_for::<Post>(dir.path().join("d.db"), StoreOptions::default())?;
    /// let d = db.dictionary();
    /// d.set("b", 1)?;
    /// d.set("a", 2)?;
    /// assert_eq!(d.keys()?, vec!["a".to_string(), "b".to_string()]);
    /// # Ok::<(), keel_query::Error>(())
    /// ```
    pub fn keys(&self) -> Result<Vec<String>> {
        self.check("dictionary keys")?;
        // Values not committed yet are the dirty entries (pending or being written);
        // everything else is on disk. Take them in one cut, then read the disk.
        let mut overlay: Vec<(String, bool)> = Vec::new();
        let mut cleared = false;
        {
            let shards: Vec<_> = self.shared.shards.iter().map(rd).collect();
            for sh in &shards {
                cleared |= sh.clear_pending.is_some();
                overlay.extend(
                    sh.entries
                        .iter()
                        .filter(|(_, e)| e.dirty)
                        .map(|(k, e)| (k.clone(), e.value.is_some())),
                );
            }
        }
        let mut keys: BTreeSet<String> = if cleared {
            BTreeSet::new()
        } else {
            self.db.inner().store.read(|c| {
                let sq = |e| Error::sqlite("dictionary keys", TABLE, e);
                let mut st = c.prepare_cached("SELECT key FROM keel_dict").map_err(sq)?;
                let rows = st.query_map([], |r| r.get::<_, String>(0)).map_err(sq)?;
                rows.collect::<rusqlite::Result<BTreeSet<String>>>()
                    .map_err(sq)
            })?
        };
        for (k, present) in overlay {
            if present {
                keys.insert(k);
            } else {
                keys.remove(&k);
            }
        }
        Ok(keys.into_iter().collect())
    }

    /// A future that resolves once every set, remove and `remove_all` made before
    /// this call is committed under the store's commit sync policy (with the default
    /// `Full`: durable against power loss). Runtime-agnostic; `.await` it or call
    /// `.wait()`. Do not wait on it inside a write closure (the writer would wait
    /// for itself).
    ///
    /// ```
    /// # use keel_query::{Database, StoreOptions};
    /// # use keel_example_blog::blog::Post;
    /// # let dir = tempfile::tempdir().unwrap();
    /// # let db = Database::open_for::<Post>(dir.path().join("d.db"), StoreOptions::default())?;
    /// let d = db.dictionary();
    /// for i in 0..1000 {
    ///     d.set(&format!("k{i}"), i)?;
    /// }
    /// d.sync().wait()?; // a few group commits, not 1000
    /// # Ok::<(), keel_query::Error>(())
    /// ```
    pub fn sync(&self) -> WriteFuture<Result<()>> {
        let me = Arc::clone(&self.shared);
        self.db.inner().store.write(move |w| flush(&me, w, false))
    }

    /// Follow `key`: a [`DictStream`] that yields the current value first, then
    /// each update and removal (absent: `None`, or the registered default). A slow
    /// consumer gets the latest value, not a backlog. Like
    /// [`subscribe_with`](Self::subscribe_with) it never reads the disk on the
    /// calling thread: a value not in the cache arrives once a read thread has it
    /// (after resume, while the database is suspended).
    ///
    /// ```
    /// # use keel_query::{Database, StoreOptions, DictValue};
    /// # use keel_example_blog::blog::Post;
    /// use futures::StreamExt;
    /// # let dir = tempfile::tempdir().unwrap();
    /// # let db = Database::open_for::<Post>(dir.path().join("d.db"), StoreOptions::default())?;
    /// let d = db.dictionary();
    /// d.set("n", 1)?;
    /// let mut s = d.subscribe("n");
    /// d.set("n", 2)?;
    /// d.set("n", 3)?;
    /// // The consumer was slow: it sees the latest value only.
    /// assert_eq!(futures::executor::block_on(s.next()), Some(Some(DictValue::Int(3))));
    /// # Ok::<(), keel_query::Error>(())
    /// ```
    pub fn subscribe(&self, key: &str) -> DictStream {
        let slot = subscribe::subscribe_stream(&self.shared, key);
        self.offer_initial(key, &slot);
        DictStream::new(Arc::clone(&self.shared), slot)
    }

    /// Follow `key` with a callback, run on the dictionary's notifier thread with
    /// the current value first, then each update and removal (see
    /// [`DictSubscription`]). Keep the returned handle; dropping it unsubscribes.
    ///
    /// Returns at once in every state: a value not in the cache is read on a keel
    /// read thread, and while the database is suspended that read waits for
    /// [`Database::resume`](crate::db::database::Database::resume) without holding any thread —
    /// the first callback then carries the stored value, never a false "absent".
    pub fn subscribe_with(
        &self,
        key: &str,
        callback: impl FnMut(Option<DictValue>) + Send + 'static,
    ) -> DictSubscription {
        let slot = subscribe::subscribe_callback(&self.shared, key, Box::new(callback));
        self.offer_initial(key, &slot);
        DictSubscription::new(Arc::clone(&self.shared), slot)
    }

    fn offer_initial(&self, key: &str, slot: &Arc<subscribe::Slot>) {
        self.shared.offer_initial(key, slot);
    }

    /// Load every stored value into the cache with one scan (up to the cache
    /// limit), so the reads that follow never miss — what to call at launch when
    /// the app will read most of its settings anyway. Returns how many values were
    /// loaded. Without it, each key is read from disk on its first access.
    ///
    /// ```
    /// # use keel_query::{Database, StoreOptions};
    /// # use keel_example_blog::blog::Post;
    /// # let dir = tempfile::tempdir().unwrap();
    /// # let path = dir.path().join("d.db");
    /// # let db = Database::open_for::<Post>(&path, StoreOptions::default())?;
    /// # db.dictionary().set("a", 1)?;
    /// # db.close().wait()?;
    /// let db = Database::open_for::<Post>(&path, StoreOptions::default())?;
    /// assert_eq!(db.dictionary().preload()?, 1);
    /// assert_eq!(db.dictionary().get::<i32>("a")?, Some(1));
    /// assert_eq!(db.dictionary().stats().disk_reads, 0);
    /// # Ok::<(), keel_query::Error>(())
    /// ```
    pub fn preload(&self) -> Result<usize> {
        self.check("dictionary preload")?;
        let shared = &self.shared;
        let versions: Vec<(u64, bool)> = shared
            .shards
            .iter()
            .map(|s| {
                let s = rd(s);
                (s.version, s.clear_pending.is_some())
            })
            .collect();
        let mut per_shard: Vec<Vec<(String, DictValue)>> = vec![Vec::new(); SHARDS];
        self.db.inner().store.read(|c| {
            let sq = |e| Error::sqlite("dictionary preload", TABLE, e);
            let mut st = c
                .prepare_cached("SELECT key, kind, type, value FROM keel_dict")
                .map_err(sq)?;
            let mut rows = st.query([]).map_err(sq)?;
            while let Some(r) = rows.next().map_err(sq)? {
                let key: String = r.get(0).map_err(sq)?;
                let kind: i64 = r.get(1).map_err(sq)?;
                let ty: Option<String> = r.get(2).map_err(sq)?;
                let value: rusqlite::types::Value = r.get(3).map_err(sq)?;
                // An unreadable row stays on disk; `get` reports it.
                if let Some(v) = DictValue::from_columns(kind, ty, value) {
                    per_shard[shard_of(&key)].push((key, v));
                }
            }
            Ok::<(), Error>(())
        })?;
        let limit = shared.shard_limit.load(Ordering::Relaxed);
        let mut loaded = 0;
        for (i, rows) in per_shard.into_iter().enumerate() {
            let mut sh = wr(&shared.shards[i]);
            if sh.version != versions[i].0 || versions[i].1 {
                continue; // changed meanwhile: these keys load on demand
            }
            for (k, v) in rows {
                if sh.weight >= limit {
                    break;
                }
                if !sh.entries.contains_key(&k) {
                    sh.put(&k, Some(Arc::new(v)), 0, false);
                    loaded += 1;
                }
            }
            // Filling is not a change: concurrent misses may still fill.
            sh.version = versions[i].0;
        }
        Ok(loaded)
    }

    /// Bound the cache to about `bytes` (default 16 MiB). Values not persisted yet
    /// always stay in memory, whatever the bound.
    ///
    /// ```
    /// # use keel_query::{Database, StoreOptions};
    /// # use keel_example_blog::blog::Post;
    /// # let dir = tempfile::tempdir().unwrap();
    /// # let db = Database::open_for::<Post>(dir.path().join("d.db"), StoreOptions::default())?;
    /// db.dictionary().set_cache_limit(1 << 20);
    /// # Ok::<(), keel_query::Error>(())
    /// ```
    pub fn set_cache_limit(&self, bytes: usize) {
        self.shared
            .shard_limit
            .store(bytes / SHARDS, Ordering::Relaxed);
    }

    /// Cache counters (see [`DictStats`]).
    pub fn stats(&self) -> DictStats {
        let mut s = DictStats {
            disk_reads: self.shared.disk_reads.load(Ordering::Relaxed),
            flushes: self.shared.flushes.load(Ordering::Relaxed),
            ..DictStats::default()
        };
        for sh in self.shared.shards.iter() {
            let sh = rd(sh);
            s.cached_entries += sh.entries.len();
            s.dirty_entries += sh.entries.values().filter(|e| e.dirty).count();
            s.cached_bytes += sh.weight;
        }
        s
    }

    /// The database this dictionary belongs to.
    pub fn database(&self) -> &Database {
        &self.db
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use keel_example_blog::blog::Post;

    /// A miss whose disk read overlapped a set that was then committed and evicted
    /// must not put the old value back into the cache.
    #[test]
    fn a_stale_disk_read_is_never_cached() {
        let dir = tempfile::tempdir().unwrap();
        let db = Database::open_for::<Post>(dir.path().join("s.db"), Default::default()).unwrap();
        let d = db.dictionary();
        d.set("k", 1).unwrap();
        d.sync().wait().unwrap();
        d.set_cache_limit(0);
        let shared = &d.shared;
        let s = shard_of("k");
        // Evict: a commit in the shard runs the eviction.
        d.set("k2-same-shard-probe", 0).unwrap();
        d.sync().wait().unwrap();
        wr(&shared.shards[s]).evict(0);
        assert!(!rd(&shared.shards[s]).entries.contains_key("k"));
        // A reader records the version and reads the disk (value 1)…
        let version = rd(&shared.shards[s]).version;
        let stale = shared.read_disk("k").unwrap();
        assert_eq!(stale, Some(DictValue::Int(1)));
        // …meanwhile a set commits and is evicted.
        d.set("k", 2).unwrap();
        d.sync().wait().unwrap();
        wr(&shared.shards[s]).evict(0);
        assert!(!rd(&shared.shards[s]).entries.contains_key("k"));
        d.set_cache_limit(1 << 20);
        // The reader answers with what it read, but does not cache it.
        let got = shared.fill("k", version, stale, |v, _| v.cloned());
        assert_eq!(got, Some(DictValue::Int(1)));
        assert!(!rd(&shared.shards[s]).entries.contains_key("k"));
        assert_eq!(d.get::<i64>("k").unwrap(), Some(2));
        // Without a change in between, the fill is cached.
        wr(&shared.shards[s]).evict(0);
        let version = rd(&shared.shards[s]).version;
        let fresh = shared.read_disk("k").unwrap();
        shared.fill("k", version, fresh, |_, _| ());
        assert!(rd(&shared.shards[s]).entries.contains_key("k"));
    }
}
