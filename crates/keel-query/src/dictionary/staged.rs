//! [`TxnState`]: the dictionary changes one write closure made, staged until its
//! commit applies them to the cache (or its rollback puts back what it took
//! over). The handle a closure writes them through, and the ordering rules, are
//! in `txn/dictionary.rs`; this half sits below the engine so that the engine's
//! commit sequence can settle it.

use std::collections::HashMap;
use std::sync::Arc;

use crate::dictionary::cache::{shard_of, Val, SHARDS};
use crate::dictionary::shared::{wr, Shared};

/// Dictionary changes made by one write closure, settled at commit or rollback.
pub(crate) struct TxnState {
    pub(crate) shared: Arc<Shared>,
    /// This closure's writes: key → (seq, value; `None` = removed).
    pub(crate) overlay: HashMap<String, (u64, Val)>,
    /// `remove_all` in this closure: each shard's sequence number of it.
    pub(crate) cleared: Option<Vec<u64>>,
    /// Pending changes taken over (per shard), restored on rollback.
    pub(crate) taken: Vec<Vec<(String, u64, Val)>>,
    pub(crate) taken_clear: Option<u64>,
}

impl TxnState {
    pub(crate) fn new(shared: Arc<Shared>) -> TxnState {
        TxnState {
            shared,
            overlay: HashMap::new(),
            cleared: None,
            taken: vec![Vec::new(); SHARDS],
            taken_clear: None,
        }
    }

    /// The keys this closure wrote and whether it cleared the dictionary (for
    /// the cross-process change log).
    pub(crate) fn feed_keys(&self) -> (Vec<&str>, bool) {
        (
            self.overlay.keys().map(String::as_str).collect(),
            self.cleared.is_some(),
        )
    }

    /// The closure committed: apply to the cache and notify.
    pub(crate) fn commit(mut self) {
        let shared = Arc::clone(&self.shared);
        let mut notes: Vec<(String, u64, Val)> = Vec::new();
        let cleared = self.cleared.take();
        if self.taken_clear.is_some() && cleared.is_none() {
            // A pending `remove_all` this transaction executed before its writes:
            // committed now, so misses may read the disk again.
            for sh in shared.shards.iter() {
                let mut sh = wr(sh);
                if sh.clear_pending == self.taken_clear {
                    sh.clear_pending = None;
                }
            }
        }
        if let Some(seqs) = &cleared {
            let mut shards = shared.all_write();
            for (i, sh) in shards.iter_mut().enumerate() {
                let older: Vec<String> = sh
                    .entries
                    .iter()
                    .filter(|(_, e)| e.seq < seqs[i])
                    .map(|(k, _)| k.clone())
                    .collect();
                for k in older {
                    sh.remove_entry(&k);
                }
                if self.taken_clear.is_some() && sh.clear_pending == self.taken_clear {
                    sh.clear_pending = None;
                }
                sh.cleared_at = sh.cleared_at.max(seqs[i]);
                sh.version += 1;
            }
        }
        for (k, (seq, v)) in std::mem::take(&mut self.overlay) {
            let mut sh = wr(&shared.shards[shard_of(&k)]);
            // A later change of the key, or a later `remove_all`, wins.
            let newer = sh.cleared_at > seq || sh.entries.get(&k).is_some_and(|e| e.seq > seq);
            if !newer {
                sh.put(&k, v.clone(), seq, false);
            }
            drop(sh);
            notes.push((k, seq, v));
        }
        // Superseded: nothing to restore.
        self.taken.iter_mut().for_each(Vec::clear);
        self.taken_clear = None;
        if let Some(seqs) = &cleared {
            shared.subs.notify_all_absent(seqs);
        }
        for (k, seq, v) in notes {
            shared.subs.notify(&k, seq, &v);
        }
    }
}

impl Drop for TxnState {
    fn drop(&mut self) {
        let taken = std::mem::take(&mut self.taken);
        if self.taken_clear.is_some() || taken.iter().any(|v| !v.is_empty()) {
            self.shared.restore(self.taken_clear.take(), taken);
            self.shared.schedule_flush();
        }
    }
}
