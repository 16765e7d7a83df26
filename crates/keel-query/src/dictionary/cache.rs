//! The sharded in-memory state: cache entries, values waiting for the writer, and
//! the bookkeeping that keeps memory and disk in the same order.
//!
//! Every key belongs to one shard (a hash of the key). Each shard has a
//! sequence counter; every change to a key takes the next number of its shard
//! under the shard's lock, so for any one key "later" means "larger number".
//!
//! * `entries`: what a read returns. A *dirty* entry holds a value the writer has
//!   not committed yet; dirty entries are never evicted, so a read never falls
//!   through to a disk that is older than memory.
//! * `dirty`: the changes not yet handed to the writer (latest per key). A flush
//!   takes them all (a consistent cut across shards) and marks the entries clean
//!   after its commit; if the commit fails it puts back whatever was not
//!   superseded meanwhile.
//! * `clear_pending`: a `remove_all` not committed yet: a miss in this shard means
//!   "absent" without asking the disk, which still holds the old rows.

use std::collections::HashMap;
use std::hash::{Hash, Hasher};
use std::sync::Arc;

use super::value::DictValue;

/// Shards: enough that 8+ threads rarely meet on a lock.
pub(crate) const SHARDS: usize = 32;

/// Fixed per-entry overhead counted against the cache budget.
const ENTRY_OVERHEAD: usize = 64;

pub(crate) type Val = Option<Arc<DictValue>>;

pub(crate) fn shard_of(key: &str) -> usize {
    // `DefaultHasher::new()` is deterministic; it only spreads keys over shards.
    let mut h = std::collections::hash_map::DefaultHasher::new();
    key.hash(&mut h);
    (h.finish() as usize) % SHARDS
}

#[derive(Debug)]
pub(crate) struct Entry {
    /// `None`: known to be absent.
    pub(crate) value: Val,
    /// Sequence number of the change that produced it (0: loaded from disk).
    pub(crate) seq: u64,
    /// Not committed yet: must stay in memory.
    pub(crate) dirty: bool,
}

#[derive(Debug, Default)]
pub(crate) struct Shard {
    pub(crate) entries: HashMap<String, Entry>,
    pub(crate) dirty: HashMap<String, (u64, Val)>,
    pub(crate) seq: u64,
    /// Bumped by every change to `entries`; a disk read fills the cache only if
    /// nothing changed in the shard while it ran.
    pub(crate) version: u64,
    pub(crate) clear_pending: Option<u64>,
    /// Sequence number of the latest `remove_all` in this shard: a transaction
    /// committing a value older than it must not bring the value back.
    pub(crate) cleared_at: u64,
    pub(crate) weight: usize,
}

fn weight(key: &str, v: &Val) -> usize {
    ENTRY_OVERHEAD + key.len() + v.as_ref().map_or(0, |v| v.weight())
}

impl Shard {
    pub(crate) fn next_seq(&mut self) -> u64 {
        self.seq += 1;
        self.seq
    }

    /// Put an entry (replacing any) and keep the weight right.
    pub(crate) fn put(&mut self, key: &str, value: Val, seq: u64, dirty: bool) {
        self.version += 1;
        let w = weight(key, &value);
        match self.entries.get_mut(key) {
            Some(e) => {
                self.weight = self.weight.saturating_sub(weight(key, &e.value)) + w;
                *e = Entry { value, seq, dirty };
            }
            None => {
                self.weight += w;
                self.entries
                    .insert(key.to_owned(), Entry { value, seq, dirty });
            }
        }
    }

    pub(crate) fn remove_entry(&mut self, key: &str) {
        if let Some(e) = self.entries.remove(key) {
            self.version += 1;
            self.weight = self.weight.saturating_sub(weight(key, &e.value));
        }
    }

    pub(crate) fn clear_entries(&mut self) {
        self.version += 1;
        self.entries.clear();
        self.weight = 0;
    }

    /// Drop every clean entry (the next read of those keys goes to disk); a fill
    /// already under way sees the version change and does not cache.
    pub(crate) fn keep_dirty_only(&mut self) {
        self.version += 1;
        self.entries.retain(|_, e| e.dirty);
        self.weight = self.entries.iter().map(|(k, e)| weight(k, &e.value)).sum();
    }

    /// Drop clean entries until the shard is at 3/4 of `limit` (or only dirty
    /// entries are left).
    pub(crate) fn evict(&mut self, limit: usize) {
        if self.weight <= limit {
            return;
        }
        let target = limit / 4 * 3;
        let mut gone = Vec::new();
        let mut w = self.weight;
        for (k, e) in &self.entries {
            if w <= target {
                break;
            }
            if !e.dirty {
                w = w.saturating_sub(weight(k, &e.value));
                gone.push(k.clone());
            }
        }
        for k in gone {
            self.remove_entry(&k);
        }
    }
}

/// What a flush took from the shards: at most one change per key (the latest),
/// after an optional `remove_all`.
#[derive(Debug, Default)]
pub(crate) struct Drained {
    pub(crate) clear: Option<u64>,
    /// Per shard: (key, seq, value; `None` = remove).
    pub(crate) ops: Vec<Vec<(String, u64, Val)>>,
}

impl Drained {
    pub(crate) fn is_empty(&self) -> bool {
        self.clear.is_none() && self.ops.iter().all(Vec::is_empty)
    }

    pub(crate) fn len(&self) -> usize {
        self.ops.iter().map(Vec::len).sum()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn eviction_keeps_dirty_entries() {
        let mut s = Shard::default();
        for i in 0..100 {
            let k = format!("k{i}");
            let dirty = i % 2 == 0;
            s.put(&k, Some(Arc::new(DictValue::Int(i))), 1, dirty);
        }
        s.evict(0);
        assert_eq!(s.entries.len(), 50);
        assert!(s.entries.values().all(|e| e.dirty));
        let w: usize = s.entries.iter().map(|(k, e)| weight(k, &e.value)).sum();
        assert_eq!(s.weight, w);
    }

    #[test]
    fn shards_spread() {
        let mut seen = [0usize; SHARDS];
        for i in 0..10_000 {
            seen[shard_of(&format!("key{i}"))] += 1;
        }
        assert!(seen.iter().all(|n| *n > 100));
    }
}
