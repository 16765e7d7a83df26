//! The dictionary's engine half: the cache and pending writes every handle of
//! one database shares ([`Shared`], owned by the engine state), the rows in
//! `keel_dict`, the flush, the close steps and the value conversions.
//! [`Dictionary`](crate::Dictionary) (`db/dictionary.rs`) and [`TxnDictionary`](crate::TxnDictionary)
//! (`txn/transaction.rs`) are built on it. It sits below the engine state that owns it and
//! reaches that only through [`DictHost`] (the store and the open check), never
//! the engine or the `Database` facade.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, RwLock, RwLockReadGuard, RwLockWriteGuard, Weak};

use keel_schema::Record;
use keel_storage::{Store, WriteFuture, WriteTxn};

use super::cache::{shard_of, Drained, Shard, Val, SHARDS};
use super::subscribe;
use super::value::{DictValue, FromDictValue};
use crate::base::error::{Error, Result};
use crate::feed::Feed;

pub(crate) const SQL_GET: &str = "SELECT kind, type, value FROM keel_dict WHERE key = ?1";
pub(crate) const SQL_PUT: &str =
    "INSERT OR REPLACE INTO keel_dict(key, kind, type, value) VALUES (?1, ?2, ?3, ?4)";
pub(crate) const SQL_DEL: &str = "DELETE FROM keel_dict WHERE key = ?1";
pub(crate) const SQL_CLEAR: &str = "DELETE FROM keel_dict";
pub(crate) const TABLE: &str = "keel_dict";

pub(crate) const DEFAULT_CACHE_LIMIT: usize = 16 << 20;

pub(crate) fn rd<T>(l: &RwLock<T>) -> RwLockReadGuard<'_, T> {
    l.read().unwrap_or_else(|p| p.into_inner())
}

pub(crate) fn wr<T>(l: &RwLock<T>) -> RwLockWriteGuard<'_, T> {
    l.write().unwrap_or_else(|p| p.into_inner())
}

pub(crate) fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

impl subscribe::SubsHost for Shared {
    fn subs(&self) -> &subscribe::Registry {
        &self.subs
    }
    fn effective(&self, key: &str, v: Val) -> Option<DictValue> {
        Shared::effective(self, key, v)
    }
}

/// What the dictionary's cache needs of the database that owns it (the engine's
/// `Inner` implements it). The engine sits above this module, so [`Shared`] holds
/// it as a `Weak<dyn DictHost>`.
pub(crate) trait DictHost: Send + Sync {
    /// The store the flushes write to and cache misses read from.
    fn store(&self) -> &Store;
    /// `Err(Closed)` once the database is closed.
    fn check_open(&self, op: &'static str) -> Result<()>;
    /// The cross-process change feed, with sharing on: flushes log their keys.
    fn feed(&self) -> Option<&Arc<Feed>>;
    /// Run `job` on one of the database's read threads; false if it cannot run
    /// (the database closed, or no thread could start).
    fn spawn_read(&self, job: Box<dyn FnOnce() + Send>) -> bool;
}

/// The dictionary's shared state; one per database, owned by it.
pub(crate) struct Shared {
    pub(crate) shards: Box<[RwLock<Shard>]>,
    /// A `remove_all` not yet taken by a flush (or a transaction). Lock order:
    /// shard locks first, then this; never a shard lock while holding it.
    pub(crate) clear_op: Mutex<Option<u64>>,
    pub(crate) next_clear: AtomicU64,
    pub(crate) flush_queued: AtomicBool,
    pub(crate) shard_limit: AtomicUsize,
    pub(crate) disk_reads: AtomicU64,
    pub(crate) flushes: AtomicU64,
    pub(crate) defaults: RwLock<HashMap<String, DictValue>>,
    pub(crate) subs: subscribe::Registry,
    /// Subscriptions whose first value missed the cache while the database was
    /// suspended: read again after resume (see [`Shared::offer_initial`]). Weak:
    /// a subscription dropped meanwhile is not kept alive (nor its callback).
    pending_initial: Mutex<Vec<(String, Weak<subscribe::Slot>)>>,
    pub(crate) db: Weak<dyn DictHost>,
}

impl Shared {
    pub(crate) fn new(db: Weak<dyn DictHost>) -> Arc<Shared> {
        Arc::new(Shared {
            shards: (0..SHARDS).map(|_| RwLock::new(Shard::default())).collect(),
            clear_op: Mutex::new(None),
            next_clear: AtomicU64::new(0),
            flush_queued: AtomicBool::new(false),
            shard_limit: AtomicUsize::new(DEFAULT_CACHE_LIMIT / SHARDS),
            disk_reads: AtomicU64::new(0),
            flushes: AtomicU64::new(0),
            defaults: RwLock::new(HashMap::new()),
            subs: subscribe::Registry::default(),
            pending_initial: Mutex::new(Vec::new()),
            db,
        })
    }

    pub(crate) fn all_write(&self) -> Vec<RwLockWriteGuard<'_, Shard>> {
        self.shards.iter().map(wr).collect()
    }

    /// Registered default for `key` when `v` is absent.
    pub(crate) fn effective(&self, key: &str, v: Val) -> Option<DictValue> {
        match v {
            Some(v) => Some(Arc::unwrap_or_clone(v)),
            None => rd(&self.defaults).get(key).cloned(),
        }
    }

    /// Queue a background flush unless one is queued already.
    pub(crate) fn schedule_flush(self: &Arc<Self>) {
        // The load keeps the common case (a flush is queued already) a shared read.
        if self.flush_queued.load(Ordering::Acquire)
            || self.flush_queued.swap(true, Ordering::AcqRel)
        {
            return;
        }
        match self.db.upgrade() {
            Some(inner) => {
                let me = Arc::clone(self);
                // The future is dropped: the job runs anyway; errors are logged.
                // While suspended it waits for resume even under `fail_fast`: a
                // refused flush would leave `flush_queued` set for good.
                drop(inner.store().write_waiting(move |w| flush(&me, w, true)));
            }
            None => self.flush_queued.store(false, Ordering::Release),
        }
    }

    /// A set or remove through the cache: visible at once, persisted by a flush.
    pub(crate) fn change(self: &Arc<Self>, key: &str, value: Val) {
        let s = shard_of(key);
        let seq = {
            let mut sh = wr(&self.shards[s]);
            let seq = sh.next_seq();
            sh.put(key, value.clone(), seq, true);
            sh.dirty.insert(key.to_owned(), (seq, value.clone()));
            let limit = self.shard_limit.load(Ordering::Relaxed);
            sh.evict(limit);
            seq
        };
        self.subs.notify(key, seq, &value);
        self.schedule_flush();
    }

    pub(crate) fn remove_all(self: &Arc<Self>) {
        let seqs = {
            let mut shards = self.all_write();
            let mut clear = lock(&self.clear_op);
            let id = self.next_clear.fetch_add(1, Ordering::Relaxed) + 1;
            let seqs: Vec<u64> = shards
                .iter_mut()
                .map(|sh| {
                    let seq = sh.next_seq();
                    sh.clear_entries();
                    sh.dirty.clear();
                    sh.clear_pending = Some(id);
                    sh.cleared_at = seq;
                    seq
                })
                .collect();
            *clear = Some(id);
            seqs
        };
        self.subs.notify_all_absent(&seqs);
        self.schedule_flush();
    }

    /// Another process may have changed the file (seen at resume): forget every
    /// committed value so the next read of a key goes to disk. Values not yet
    /// flushed stay (they are this process's latest word). Bumping each shard's
    /// version keeps a read already under way from caching what it read before.
    pub(crate) fn forget_clean(&self) {
        for sh in self.all_write().iter_mut() {
            sh.keep_dirty_only();
        }
    }

    /// Look `key` up: cache, else disk (and fill the cache if nothing changed
    /// meanwhile). `f` sees the stored value and its sequence number.
    pub(crate) fn lookup<R>(
        &self,
        key: &str,
        f: impl FnOnce(Option<&DictValue>, u64) -> R,
    ) -> Result<R> {
        let s = shard_of(key);
        let version = {
            let sh = rd(&self.shards[s]);
            if let Some(e) = sh.entries.get(key) {
                return Ok(f(e.value.as_deref(), e.seq));
            }
            if sh.clear_pending.is_some() {
                return Ok(f(None, 0));
            }
            sh.version
        };
        let disk = self.read_disk(key)?;
        Ok(self.fill(key, version, disk, f))
    }

    /// The cached value of `key` and its sequence number, from memory only;
    /// `None` on a miss (the value is on disk, or nowhere).
    fn cached(&self, key: &str) -> Option<(u64, Val)> {
        let sh = rd(&self.shards[shard_of(key)]);
        if let Some(e) = sh.entries.get(key) {
            return Some((e.seq, e.value.clone()));
        }
        sh.clear_pending.is_some().then_some((0, None))
    }

    /// Give a new subscription its first value without making the subscribing
    /// thread wait: from the cache at once, else read on one of the database's
    /// read threads. That read never waits for a suspended database either: it
    /// fails fast, and the subscription is read again after resume — a suspended
    /// database must not report a stored key as absent, nor hold the thread that
    /// would call resume (usually the subscriber's). Either way the value goes
    /// through the slot, so a change offered meanwhile (newer sequence number) wins.
    pub(crate) fn offer_initial(self: &Arc<Self>, key: &str, slot: &Arc<subscribe::Slot>) {
        match self.cached(key) {
            Some((seq, v)) => subscribe::initial(self, slot, seq, &v),
            None => self.read_initial_later(key.to_owned(), Arc::clone(slot)),
        }
    }

    fn read_initial_later(self: &Arc<Self>, key: String, slot: Arc<subscribe::Slot>) {
        let Some(host) = self.db.upgrade() else {
            return; // closed: `after_close` ended the subscription
        };
        let me = Arc::clone(self);
        let (k, s) = (key.clone(), Arc::clone(&slot));
        if !host.spawn_read(Box::new(move || me.read_initial(k, s))) && !slot.is_cancelled() {
            tracing::warn!(
                key,
                "dictionary subscribe: no thread to read the initial value; reporting absent"
            );
            subscribe::initial(self, &slot, 0, &None);
        }
    }

    /// The read of [`Shared::offer_initial`], on a read thread.
    fn read_initial(self: &Arc<Self>, key: String, slot: Arc<subscribe::Slot>) {
        if slot.is_cancelled() {
            return;
        }
        let r = keel_storage::fail_fast_while_suspended(|| {
            self.lookup(&key, |v, seq| (seq, v.cloned().map(Arc::new)))
        });
        match r {
            Ok((seq, v)) => subscribe::initial(self, &slot, seq, &v),
            Err(Error::Storage(keel_storage::Error::Suspended { .. })) => {
                lock(&self.pending_initial).push((key, Arc::downgrade(&slot)));
                // A resume that came between the failed read and the push found
                // nothing to retry: retry here.
                let suspended = self.db.upgrade().is_some_and(|h| h.store().is_suspended());
                if !suspended {
                    self.retry_initial();
                }
            }
            Err(Error::Closed { .. }) => {}
            Err(e) => {
                tracing::warn!(key, error = %e, "dictionary subscribe: initial value unreadable; reporting absent");
                subscribe::initial(self, &slot, 0, &None);
            }
        }
    }

    /// Read again the first values a suspension held back (after resume).
    fn retry_initial(self: &Arc<Self>) {
        let pending = std::mem::take(&mut *lock(&self.pending_initial));
        for (key, slot) in pending {
            if let Some(slot) = slot.upgrade().filter(|s| !s.is_cancelled()) {
                self.read_initial_later(key, slot);
            }
        }
    }

    /// Second half of a miss: `disk` was read after the shard was at `version`.
    pub(crate) fn fill<R>(
        &self,
        key: &str,
        version: u64,
        disk: Option<DictValue>,
        f: impl FnOnce(Option<&DictValue>, u64) -> R,
    ) -> R {
        let mut sh = wr(&self.shards[shard_of(key)]);
        if let Some(e) = sh.entries.get(key) {
            return f(e.value.as_deref(), e.seq);
        }
        if sh.version != version {
            // Something changed in the shard while we read: the disk value may be
            // older than memory; answer with it (the read overlapped the change)
            // but do not cache it.
            return f(disk.as_ref(), 0);
        }
        let v: Val = disk.map(Arc::new);
        sh.put(key, v.clone(), 0, false);
        let limit = self.shard_limit.load(Ordering::Relaxed);
        let r = f(v.as_deref(), 0);
        sh.evict(limit);
        r
    }

    /// Values another process committed, read by the change feed in one
    /// snapshot (`cleared`: it ran `remove_all`, or the feed fell behind and
    /// `values` holds every subscribed key). Clean cache entries take the new
    /// values (or, after a clear, are dropped) and subscribers are told; a value
    /// this process set and has not committed yet wins (its flush commits later),
    /// and so does a pending `remove_all` of this process. The shard's version
    /// moves, so a disk read that overlapped cannot cache an older value.
    pub(crate) fn apply_remote(&self, values: Vec<(String, Option<DictValue>)>, cleared: bool) {
        let limit = self.shard_limit.load(Ordering::Relaxed);
        if cleared {
            for sh in self.shards.iter() {
                let mut sh = wr(sh);
                if sh.clear_pending.is_some() {
                    continue;
                }
                let clean: Vec<String> = sh
                    .entries
                    .iter()
                    .filter(|(_, e)| !e.dirty)
                    .map(|(k, _)| k.clone())
                    .collect();
                for k in clean {
                    sh.remove_entry(&k);
                }
                sh.version += 1;
            }
        }
        for (k, v) in values {
            let v: Val = v.map(Arc::new);
            let seq = {
                let mut sh = wr(&self.shards[shard_of(&k)]);
                if sh.clear_pending.is_some() {
                    continue;
                }
                match sh.entries.get(&k) {
                    Some(e) if e.dirty => continue,
                    // Unchanged: nothing to tell (a replayed or merged change).
                    Some(e) if e.value == v => continue,
                    _ => {}
                }
                let seq = sh.next_seq();
                sh.put(&k, v.clone(), seq, false);
                sh.evict(limit);
                seq
            };
            self.subs.notify(&k, seq, &v);
        }
    }

    pub(crate) fn read_disk(&self, key: &str) -> Result<Option<DictValue>> {
        let inner = self.db.upgrade().ok_or_else(|| Error::Closed {
            op: "dictionary read",
            path: Default::default(),
        })?;
        inner.check_open("dictionary read")?;
        self.disk_reads.fetch_add(1, Ordering::Relaxed);
        inner.store().read(|c| read_row(c, key))
    }
}

/// Read one row on any connection.
pub(crate) fn read_row(c: &rusqlite::Connection, key: &str) -> Result<Option<DictValue>> {
    let sq = |e| Error::sqlite("dictionary read", TABLE, e);
    let mut st = c.prepare_cached(SQL_GET).map_err(sq)?;
    let mut rows = st.query([key]).map_err(sq)?;
    let Some(r) = rows.next().map_err(sq)? else {
        return Ok(None);
    };
    let kind: i64 = r.get(0).map_err(sq)?;
    let ty: Option<String> = r.get(1).map_err(sq)?;
    let value: rusqlite::types::Value = r.get(2).map_err(sq)?;
    let desc = format!("{value:?}");
    DictValue::from_columns(kind, ty, value)
        .map(Some)
        .ok_or_else(|| Error::DictionaryTypeMismatch {
            key: key.to_owned(),
            stored: format!("an unreadable row (kind {kind}, value {desc})"),
            requested: "any dictionary value".into(),
        })
}

pub(crate) fn put_row(c: &rusqlite::Connection, key: &str, v: &DictValue) -> Result<()> {
    let sq = |e| Error::sqlite("dictionary write", TABLE, e);
    c.prepare_cached(SQL_PUT)
        .map_err(sq)?
        .execute(rusqlite::params![key, v.kind().code(), v.type_column(), v])
        .map_err(sq)?;
    Ok(())
}

pub(crate) fn delete_row(c: &rusqlite::Connection, key: &str) -> Result<()> {
    let sq = |e| Error::sqlite("dictionary remove", TABLE, e);
    c.prepare_cached(SQL_DEL)
        .map_err(sq)?
        .execute([key])
        .map_err(sq)?;
    Ok(())
}

pub(crate) fn clear_rows(c: &rusqlite::Connection) -> Result<()> {
    c.execute(SQL_CLEAR, [])
        .map_err(|e| Error::sqlite("dictionary remove_all", TABLE, e))?;
    Ok(())
}

/// Restores a drained batch if its commit does not happen; marks it clean if it does.
pub(crate) struct FlushGuard {
    pub(crate) shared: Arc<Shared>,
    pub(crate) batch: Option<Drained>,
}

impl FlushGuard {
    pub(crate) fn committed(mut self) {
        let Some(batch) = self.batch.take() else {
            return;
        };
        let limit = self.shared.shard_limit.load(Ordering::Relaxed);
        for (i, ops) in batch.ops.iter().enumerate() {
            if ops.is_empty() && batch.clear.is_none() {
                continue;
            }
            let mut sh = wr(&self.shared.shards[i]);
            if batch.clear.is_some() && sh.clear_pending == batch.clear {
                sh.clear_pending = None;
            }
            for (k, seq, _) in ops {
                if let Some(e) = sh.entries.get_mut(k) {
                    if e.seq == *seq {
                        e.dirty = false;
                    }
                }
            }
            sh.evict(limit);
        }
    }
}

impl Drop for FlushGuard {
    fn drop(&mut self) {
        if let Some(batch) = self.batch.take() {
            tracing::warn!(
                values = batch.len(),
                clear = batch.clear.is_some(),
                "dictionary flush did not commit; the values stay pending"
            );
            self.shared.restore(batch.clear, batch.ops);
        }
    }
}

impl Shared {
    /// Take every pending change: a consistent cut across shards. The locks are
    /// held only to swap the maps out.
    pub(crate) fn drain(&self) -> Drained {
        let (clear, maps) = {
            let mut shards = self.all_write();
            let clear = lock(&self.clear_op).take();
            let maps: Vec<_> = shards
                .iter_mut()
                .map(|sh| std::mem::take(&mut sh.dirty))
                .collect();
            (clear, maps)
        };
        let ops = maps
            .into_iter()
            .map(|m| m.into_iter().map(|(k, (seq, v))| (k, seq, v)).collect())
            .collect();
        Drained { clear, ops }
    }

    /// Put back changes that did not commit, unless superseded meanwhile.
    pub(crate) fn restore(&self, clear: Option<u64>, ops: Vec<Vec<(String, u64, Val)>>) {
        let mut shards = self.all_write();
        if let Some(id) = clear {
            let mut c = lock(&self.clear_op);
            if c.is_none() && shards.iter().all(|sh| sh.clear_pending == Some(id)) {
                *c = Some(id);
            }
        }
        for (i, list) in ops.into_iter().enumerate() {
            let sh = &mut shards[i];
            for (k, seq, v) in list {
                let current = sh.entries.get(&k).is_some_and(|e| e.seq == seq);
                if current && !sh.dirty.contains_key(&k) {
                    sh.dirty.insert(k, (seq, v));
                }
            }
        }
        // The next set, sync or close flushes them (no retry loop on a failing disk).
        self.flush_queued.store(false, Ordering::Release);
    }
}

/// The writer-side flush: drain, write, and settle the cache at commit.
pub(crate) fn flush(shared: &Arc<Shared>, w: &mut WriteTxn<'_>, background: bool) -> Result<()> {
    if background {
        shared.flush_queued.store(false, Ordering::Release);
    }
    let batch = shared.drain();
    if batch.is_empty() {
        return Ok(());
    }
    shared.flushes.fetch_add(1, Ordering::Relaxed);
    let n = batch.len();
    let guard = FlushGuard {
        shared: Arc::clone(shared),
        batch: Some(batch),
    };
    let written = (|| {
        let b = guard.batch.as_ref().expect("batch present until commit");
        if b.clear.is_some() {
            clear_rows(w)?;
        }
        for (k, _, v) in b.ops.iter().flatten() {
            match v {
                Some(v) => put_row(w, k, v)?,
                None => delete_row(w, k)?,
            }
        }
        Ok::<(), Error>(())
    })();
    // Sharing: log the keys in the same transaction (see `crate::feed`).
    let logged = match (&written, shared.db.upgrade()) {
        (Ok(()), Some(host)) => match host.feed() {
            Some(feed) => {
                let b = guard.batch.as_ref().expect("batch present until commit");
                let keys: Vec<&str> = b.ops.iter().flatten().map(|(k, _, _)| k.as_str()).collect();
                let entered = feed.enter();
                feed.log(w, &[], &keys, b.clear.is_some())
                    .map(|()| Some(entered))
            }
            None => Ok(None),
        },
        _ => Ok(None),
    };
    let written = written.and(logged.as_ref().map(|_| ()).map_err(Clone::clone));
    match written {
        Ok(()) => {
            tracing::debug!(values = n, "dictionary flush");
            w.on_commit(Box::new(move || guard.committed()));
            if let Ok(Some(l)) = logged {
                w.on_commit(Box::new(move || l.committed()));
            }
            Ok(())
        }
        Err(e) => {
            tracing::error!(error = %e, "dictionary flush failed");
            drop(guard);
            Err(e)
        }
    }
}

/// Start persisting what is pending before the store closes (called by
/// `Database::close`, before it marks the database closed): the flush is queued
/// ahead of the close, and its future tells the close whether it committed.
pub(crate) fn before_close(shared: &Arc<Shared>) -> Option<WriteFuture<Result<()>>> {
    if !has_pending(shared) {
        return None;
    }
    let inner = shared.db.upgrade()?;
    let me = Arc::clone(shared);
    // Waits through a suspend (a close resumes first; a suspend flushes first).
    Some(inner.store().write_waiting(move |w| flush(&me, w, false)))
}

pub(crate) fn has_pending(shared: &Shared) -> bool {
    shared.shards.iter().any(|s| !rd(s).dirty.is_empty()) || lock(&shared.clear_op).is_some()
}

/// Make sure nothing set before the close is dropped silently: wait for the flush
/// `before_close` queued; if it failed, its values are pending again (the flush
/// guard restores them) and one more flush is tried; if that fails too, the close
/// reports every key it could not persist. Runs on the close's thread, before the
/// store closes.
pub(crate) fn settle_before_close(
    shared: &Arc<Shared>,
    first: Option<WriteFuture<Result<()>>>,
    path: &std::path::Path,
) -> Result<()> {
    let Some(first) = first else {
        return Ok(());
    };
    let w = first.wait();
    let mut last = match w {
        Ok(()) if !has_pending(shared) => return Ok(()),
        Ok(()) => None,
        Err(e) => Some(e),
    };
    if let Some(inner) = shared.db.upgrade() {
        let me = Arc::clone(shared);
        match inner.store().write(move |w| flush(&me, w, false)).wait() {
            Ok(()) if !has_pending(shared) => return Ok(()),
            Ok(()) => {}
            Err(e) => last = Some(e),
        }
    }
    let (keys, count) = pending_keys(shared);
    if count == 0 {
        return Ok(());
    }
    tracing::error!(count, "close: dictionary values could not be persisted");
    Err(Error::DictionaryNotPersisted {
        path: path.to_path_buf(),
        keys,
        count,
        source: Box::new(last.unwrap_or_else(|| Error::Closed {
            op: "dictionary flush before close",
            path: path.to_path_buf(),
        })),
    })
}

/// Keys with a change not on disk (at most 100 named), and how many in all (a
/// pending `remove_all` counts as one, named `*`).
pub(crate) fn pending_keys(shared: &Shared) -> (Vec<String>, usize) {
    let mut all: Vec<String> = Vec::new();
    for s in shared.shards.iter() {
        all.extend(rd(s).dirty.keys().cloned());
    }
    all.sort();
    let mut count = all.len();
    if lock(&shared.clear_op).is_some() {
        count += 1;
        all.insert(0, "*".into());
    }
    all.truncate(100);
    (all, count)
}

/// After a resume: subscriptions whose first value the suspension held back read
/// it now (on a read thread).
pub(crate) fn after_resume(shared: &Arc<Shared>) {
    shared.retry_initial();
}

/// After the database closed: end every key stream and stop every callback.
pub(crate) fn after_close(shared: &Shared) {
    shared.subs.close();
    lock(&shared.pending_initial).clear();
}

pub(crate) fn mismatch(key: &str, stored: &DictValue, requested: &str) -> Error {
    Error::DictionaryTypeMismatch {
        key: key.to_owned(),
        stored: stored.describe(),
        requested: requested.to_owned(),
    }
}

/// Decode a stored object as `R`, checking its collection first.
pub(crate) fn object_from<R: Record>(key: &str, v: &DictValue) -> Result<R> {
    match v {
        DictValue::Object { collection, bytes } if collection == R::COLLECTION => R::decode(bytes)
            .map_err(|e| Error::DictionaryTypeMismatch {
                key: key.to_owned(),
                stored: format!("object {collection} whose bytes do not decode ({e})"),
                requested: R::COLLECTION.to_owned(),
            }),
        other => Err(mismatch(key, other, R::COLLECTION)),
    }
}

/// A typed value from a stored one.
pub(crate) fn typed_from<T: FromDictValue>(key: &str, v: &DictValue) -> Result<T> {
    T::from_dict_value(v).ok_or_else(|| mismatch(key, v, T::TYPE_NAME))
}

/// How `set_object` stores `obj` (on the dictionary and in a transaction): its
/// FlatBuffers bytes tagged with its collection.
pub(crate) fn object_value<R: Record>(obj: &R) -> DictValue {
    DictValue::Object {
        collection: R::COLLECTION.to_owned(),
        bytes: obj.encode(),
    }
}

#[cfg(feature = "serde")]
pub(crate) fn serde_to(key: &str, v: &(impl serde::Serialize + ?Sized)) -> Result<DictValue> {
    serde_json::to_string(v)
        .map(DictValue::Json)
        .map_err(|e| Error::DictionaryEncode {
            key: key.to_owned(),
            message: e.to_string(),
        })
}

#[cfg(feature = "serde")]
pub(crate) fn serde_from<T: serde::de::DeserializeOwned>(key: &str, v: &DictValue) -> Result<T> {
    match v {
        DictValue::Json(s) => serde_json::from_str(s).map_err(|e| Error::DictionaryTypeMismatch {
            key: key.to_owned(),
            stored: format!("json that does not deserialize ({e})"),
            requested: std::any::type_name::<T>().to_owned(),
        }),
        other => Err(mismatch(key, other, std::any::type_name::<T>())),
    }
}
