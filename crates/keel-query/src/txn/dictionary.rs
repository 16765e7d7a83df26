//! [`TxnDictionary`]: the dictionary inside a write transaction.
//!
//! A transaction writes its dictionary changes straight into its SQLite
//! transaction, so they commit or roll back with its objects. Order with the
//! background path is kept per key by sequence numbers: a transactional set takes
//! the key's next number and *takes over* any older pending (not yet flushed)
//! change of that key, so the flush cannot write the older value after it. At
//! commit the cache gets the transaction's values (unless a newer set happened
//! meanwhile); if the transaction rolls back, the taken-over changes are put back.

use std::sync::Arc;

use keel_schema::Record;

use crate::base::error::{Error, Result};
use crate::dictionary::cache::{shard_of, Val, SHARDS};
#[cfg(feature = "serde")]
use crate::dictionary::shared;
use crate::dictionary::shared::{
    clear_rows, delete_row, lock, mismatch, object_from, object_value, put_row, rd, read_row,
    typed_from, wr,
};
use crate::dictionary::staged::TxnState;
use crate::dictionary::value::{DictValue, FromDictValue, ToDictValue};
use crate::engine::Inner;

/// The dictionary inside a write transaction, from
/// [`Txn::dictionary`](crate::txn::transaction::Txn::dictionary). Its changes are part of the
/// closure's transaction: they commit with its objects, roll back with them, and
/// become visible to other threads at commit. Reads see the closure's own changes
/// first, then the dictionary as everyone sees it.
///
/// ```
/// use keel_query::{Database, StoreOptions};
/// use keel_example_blog::blog::Post;
/// # let dir = tempfile::tempdir().unwrap();
/// let db = Database::open_for::<Post>(dir.path().join("t.db"), StoreOptions::default())?;
/// db.write(|txn| {
///     txn.insert(&Post::builder().id("p1").build())?;
///     let n = txn.dictionary().get_or("post_count", 0u32);
///     txn.dictionary().set("post_count", n + 1)?;
///     Ok(())
/// }).wait()?;
/// assert_eq!(db.dictionary().get::<u32>("post_count")?, Some(1));
/// # Ok::<(), keel_query::Error>(())
/// ```
pub struct TxnDictionary<'t> {
    conn: &'t rusqlite::Connection,
    inner: &'t Inner,
    aborted: bool,
    state: &'t mut Option<TxnState>,
}

impl<'t> TxnDictionary<'t> {
    pub(crate) fn new(
        conn: &'t rusqlite::Connection,
        inner: &'t Inner,
        aborted: bool,
        state: &'t mut Option<TxnState>,
    ) -> TxnDictionary<'t> {
        TxnDictionary {
            conn,
            inner,
            aborted,
            state,
        }
    }

    fn check(&self) -> Result<()> {
        if self.aborted {
            Err(Error::Aborted {
                path: self.inner.path().to_path_buf(),
            })
        } else {
            Ok(())
        }
    }

    fn state(&mut self) -> &mut TxnState {
        let shared = &self.inner.dict;
        self.state
            .get_or_insert_with(|| TxnState::new(Arc::clone(shared)))
    }

    /// A `remove_all` made before this transaction but not flushed yet must reach
    /// the disk before the transaction's own writes (a flush after the commit would
    /// delete them): take it over and run it here.
    fn take_pending_clear(&mut self) -> Result<()> {
        let shared = Arc::clone(&self.inner.dict);
        let Some(id) = lock(&shared.clear_op).take() else {
            return Ok(());
        };
        if let Err(e) = clear_rows(self.conn) {
            let mut c = lock(&shared.clear_op);
            if c.is_none() {
                *c = Some(id);
            }
            return Err(e);
        }
        self.state().taken_clear = Some(id);
        Ok(())
    }

    fn change(&mut self, key: &str, v: Val) -> Result<()> {
        self.check()?;
        self.take_pending_clear()?;
        match &v {
            Some(v) => put_row(self.conn, key, v)?,
            None => delete_row(self.conn, key)?,
        }
        let st = self.state();
        let s = shard_of(key);
        let seq = {
            let mut sh = wr(&st.shared.shards[s]);
            let seq = sh.next_seq();
            if let Some((old_seq, old)) = sh.dirty.remove(key) {
                st.taken[s].push((key.to_owned(), old_seq, old));
            }
            seq
        };
        st.overlay.insert(key.to_owned(), (seq, v));
        Ok(())
    }

    /// Set `key` in this transaction.
    pub fn set<V: ToDictValue>(&mut self, key: &str, value: V) -> Result<()> {
        self.change(key, Some(Arc::new(value.to_dict_value())))
    }

    /// Store a keel object under `key` in this transaction.
    pub fn set_object<R: Record>(&mut self, key: &str, obj: &R) -> Result<()> {
        self.set(key, object_value(obj))
    }

    /// Store a serde value (as JSON) under `key` in this transaction (feature `serde`).
    #[cfg(feature = "serde")]
    pub fn set_serde<T: serde::Serialize + ?Sized>(&mut self, key: &str, value: &T) -> Result<()> {
        let v = shared::serde_to(key, value)?;
        self.set(key, v)
    }

    /// Remove `key` in this transaction.
    pub fn remove(&mut self, key: &str) -> Result<()> {
        self.change(key, None)
    }

    /// Remove every key in this transaction.
    ///
    /// ```
    /// # use keel_query::{Database, StoreOptions};
    /// # use keel_example_blog::blog::Post;
    /// # let dir = tempfile::tempdir().unwrap();
    /// # let db = Database::open_for::<Post>(dir.path().join("t.db"), StoreOptions::default())?;
    /// db.dictionary().set("a", 1)?;
    /// db.write(|t| { t.dictionary().remove_all()?; t.dictionary().set("b", 2) }).wait()?;
    /// assert_eq!(db.dictionary().keys()?, vec!["b".to_string()]);
    /// # Ok::<(), keel_query::Error>(())
    /// ```
    pub fn remove_all(&mut self) -> Result<()> {
        self.check()?;
        clear_rows(self.conn)?;
        let st = self.state();
        let shared = Arc::clone(&st.shared);
        let mut shards = shared.all_write();
        let pending_clear = lock(&shared.clear_op).take();
        if pending_clear.is_some() {
            st.taken_clear = pending_clear;
        }
        let mut seqs = Vec::with_capacity(SHARDS);
        for (i, sh) in shards.iter_mut().enumerate() {
            seqs.push(sh.next_seq());
            st.taken[i].extend(sh.dirty.drain().map(|(k, (seq, v))| (k, seq, v)));
        }
        drop(shards);
        st.overlay.clear();
        st.cleared = Some(seqs);
        Ok(())
    }

    /// Look `key` up as this transaction sees it.
    fn lookup<R>(&mut self, key: &str, f: impl FnOnce(Option<&DictValue>) -> R) -> Result<R> {
        self.check()?;
        if let Some(st) = self.state.as_ref() {
            if let Some((_, v)) = st.overlay.get(key) {
                return Ok(f(v.as_deref()));
            }
            if st.cleared.is_some() {
                return Ok(f(None));
            }
        }
        let shared = &self.inner.dict;
        {
            let sh = rd(&shared.shards[shard_of(key)]);
            if let Some(e) = sh.entries.get(key) {
                return Ok(f(e.value.as_deref()));
            }
            if sh.clear_pending.is_some() {
                return Ok(f(None));
            }
        }
        let v = read_row(self.conn, key)?;
        Ok(f(v.as_ref()))
    }

    fn with_default<T>(
        &mut self,
        key: &str,
        r: Option<Result<T>>,
        conv: impl FnOnce(&DictValue) -> Result<T>,
    ) -> Result<Option<T>> {
        match r {
            Some(r) => r.map(Some),
            None => match rd(&self.inner.dict.defaults).get(key) {
                Some(v) => conv(v).map(Some),
                None => Ok(None),
            },
        }
    }

    /// The value of `key` as a `T`, as this transaction sees it (see
    /// [`Dictionary::get`](crate::Dictionary::get)).
    pub fn get<T: FromDictValue>(&mut self, key: &str) -> Result<Option<T>> {
        let r = self.lookup(key, |v| {
            v.map(|v| T::from_dict_value(v).ok_or_else(|| mismatch(key, v, T::TYPE_NAME)))
        })?;
        self.with_default(key, r, |v| typed_from(key, v))
    }

    /// The value of `key` as a `T`, or `default` (see
    /// [`Dictionary::get_or`](crate::Dictionary::get_or)).
    pub fn get_or<T: FromDictValue>(&mut self, key: &str, default: T) -> T {
        match self.get::<T>(key) {
            Ok(Some(v)) => v,
            _ => default,
        }
    }

    /// The value of `key` whatever its kind, as this transaction sees it.
    pub fn get_value(&mut self, key: &str) -> Result<Option<DictValue>> {
        let r = self.lookup(key, |v| v.cloned().map(Ok))?;
        self.with_default(key, r, |v| Ok(v.clone()))
    }

    /// The object stored under `key`, decoded as `R`.
    pub fn get_object<R: Record>(&mut self, key: &str) -> Result<Option<R>> {
        let r = self.lookup(key, |v| v.map(|v| object_from::<R>(key, v)))?;
        self.with_default(key, r, |v| object_from::<R>(key, v))
    }

    /// The serde value stored under `key` (feature `serde`).
    #[cfg(feature = "serde")]
    pub fn get_serde<T: serde::de::DeserializeOwned>(&mut self, key: &str) -> Result<Option<T>> {
        let r = self.lookup(key, |v| v.map(|v| shared::serde_from::<T>(key, v)))?;
        self.with_default(key, r, |v| shared::serde_from::<T>(key, v))
    }

    /// True if a value is stored under `key`, as this transaction sees it.
    pub fn contains(&mut self, key: &str) -> Result<bool> {
        self.lookup(key, |v| v.is_some())
    }
}
