//! The cross-process change feed ([`StoreOptions::share_changes`](crate::StoreOptions::share_changes)): how a
//! database open in process B learns what process A committed to the same file,
//! and hands it to B's subscriptions and dictionary cache.
//!
//! ## Writing: the change log
//!
//! With sharing on, every write closure that changed something appends one row to
//! `keel_changes` **inside its own transaction** (it commits or rolls back with
//! the closure): a sequence number (`AUTOINCREMENT`, so it only grows, even after
//! pruning), the writing handle's *origin* (random per open), the changed rows as
//! `(collection, rowid)` pairs and the changed dictionary keys. Object bytes are
//! not copied: a reader fetches the rows themselves. After COMMIT the writer posts
//! the [`CommitSignal`] (an `open`/`close` of a sidecar file, watched with inotify
//! on Linux and Android; a Darwin notification on Apple platforms). The log keeps
//! the last [`KEEP`] commits; a closure that changed more than [`MAX_ROWS`] rows
//! logs a *full* marker instead of its rows.
//!
//! ## Reading: the catch-up
//!
//! A `keel-feed` thread sleeps in the kernel until a post arrives, then runs
//! the catch-up (`db/catch_up.rs`; [`Database::catch_up`](crate::db::database::Database::catch_up) — and so
//! `resume` — runs it too): in **one read transaction** it reads the log after the
//! last sequence number this handle saw, skips its own origin (those commits were
//! delivered locally, before their futures resolved), and fetches the current
//! bytes of every changed row and the current value of every changed dictionary
//! key. The rows go to the subscription hub like a local commit (in-memory filter
//! and sort, a row-level diff); the values go to the dictionary's cache and
//! subscribers. If the log no longer holds everything since the last sequence
//! seen (this handle fell more than [`KEEP`] commits behind, or a commit logged a
//! full marker), every subscription is read again instead (`Hub::resync`) and the
//! dictionary's clean cache entries are dropped.
//!
//! ## Ordering with local commits: the gate
//!
//! A local commit is delivered by the writer thread after COMMIT. If a catch-up
//! read a snapshot that already contains a local commit not yet delivered, that
//! delivery would later overwrite newer rows with older ones. So a write closure
//! that logs *enters* the gate before COMMIT and leaves after its delivery, and a
//! catch-up enters only when no local commit is between the two and holds new
//! ones off (at the end of their closure, in the write transaction) while it
//! reads and delivers. The gate exists only with sharing on.
//!
//! **No lock is held across a wait for a reader.** A local commit waiting at the
//! gate holds the WAL write lock, so a catch-up inside the gate must never wait
//! for a pooled read connection (the pool may be busy for `reader_wait`, or
//! suspended until resume: `suspend()` would then time out with the write lock
//! held). The catch-up therefore takes its read connection first, holding
//! nothing, and only then tries the gate ([`Feed::try_feeding`], which never
//! waits); if a local commit is inside, it gives the connection back and waits
//! for the gate to empty ([`Feed::wait_idle`]) holding nothing, then tries again.
//! The `keel-feed` thread also runs its catch-ups failing fast while suspended
//! (a refill read of a delivery included), and a catch-up that failed is
//! retried: by the feed thread with a short backoff, and always by `resume`.
//!
//! This module is the low half (state, gate, log format), below the engine and
//! the dictionary, which write through it; `db/catch_up.rs`, above the engine, reads
//! the rows and hands them to the hub and the dictionary.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};

use keel_schema::Value;
use keel_storage::xproc::{CommitSignal, CommitWatch};

use crate::base::change::Change;
use crate::base::change::ChangeOp;
use crate::base::error::{Error, Result};

/// The change log's table.
pub(crate) const LOG_TABLE: &str = "keel_changes";

/// Creates the change log (in the schema phase, with sharing on).
pub(crate) const LOG_TABLE_SQL: &str = "CREATE TABLE IF NOT EXISTS keel_changes(\
     seq INTEGER PRIMARY KEY AUTOINCREMENT, \
     origin INTEGER NOT NULL, \
     full INTEGER NOT NULL DEFAULT 0, \
     rows BLOB, \
     dict BLOB, \
     dict_clear INTEGER NOT NULL DEFAULT 0, \
     ids BLOB)";

/// Adds the identity column to a log an older keel created (see [`encode_ids`]).
const LOG_IDS_SQL: &str = "ALTER TABLE keel_changes ADD COLUMN ids BLOB";

/// Commits the log keeps: a handle further behind reads every subscription again.
pub(crate) const KEEP: i64 = 512;
/// The log is pruned every this many commits (one small DELETE).
const PRUNE_EVERY: i64 = 64;
/// More changed rows than this in one closure log a full marker instead.
pub(crate) const MAX_ROWS: usize = 4096;
/// More bytes of changed dictionary keys than this log a full marker instead.
const MAX_DICT_BYTES: usize = 64 << 10;

pub(crate) fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// What the feed has done (tests and benchmarks read it).
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct FeedStats {
    /// Catch-ups that read another process's commits (a wake-up that finds only
    /// this process's own commits, or nothing, returns before counting).
    pub catch_ups: u64,
    /// Log entries of other processes applied.
    pub remote_commits: u64,
    /// Changed rows of other processes handed to the subscription hub.
    pub remote_rows: u64,
    /// Changed dictionary keys of other processes applied.
    pub remote_keys: u64,
    /// Catch-ups that read every subscription again (fell behind the log, or a
    /// commit too large to log row by row).
    pub full_refetches: u64,
}

#[derive(Default)]
struct GateState {
    /// The threads inside the gate (one entry per local commit or catch-up): a
    /// catch-up asked for on one of them (from a subscription callback, say)
    /// would wait for itself, so it is skipped (see [`Feed::inside`]).
    threads: Vec<std::thread::ThreadId>,
    /// Local commits between "logged" and "delivered".
    pending: usize,
    /// A catch-up is reading or delivering.
    feeding: bool,
    /// Threads blocked on `gate_cv` (counted under the lock before they sleep):
    /// leaving the gate notifies only when one is, since a notify is a system
    /// call even with no waiter, and a local commit leaves once per commit.
    waiting: usize,
}

/// The per-database feed state (`Inner::feed`, present with sharing on).
pub(crate) struct Feed {
    pub(crate) origin: i64,
    signal: CommitSignal,
    watch: Mutex<Option<CommitWatch>>,
    /// The last log sequence number this handle has applied; its lock also runs
    /// catch-ups one at a time.
    pub(crate) last: Mutex<i64>,
    gate: Mutex<GateState>,
    gate_cv: Condvar,
    pub(crate) catch_ups: AtomicU64,
    pub(crate) remote_commits: AtomicU64,
    pub(crate) remote_rows: AtomicU64,
    pub(crate) remote_keys: AtomicU64,
    pub(crate) full_refetches: AtomicU64,
}

/// A local commit inside the gate: leaves it when dropped (after delivery, or
/// when the commit failed and the callback holding it is dropped).
pub(crate) struct LocalCommit {
    feed: Arc<Feed>,
    /// The thread that entered (the callbacks that drop this may run elsewhere).
    thread: std::thread::ThreadId,
}

impl LocalCommit {
    /// Run after COMMIT and after the commit's own deliveries: tell other
    /// processes, then leave the gate.
    pub(crate) fn committed(self) {
        self.feed.signal.post();
    }
}

impl Drop for LocalCommit {
    fn drop(&mut self) {
        let mut g = lock(&self.feed.gate);
        if let Some(p) = g.threads.iter().rposition(|t| *t == self.thread) {
            g.threads.remove(p);
        }
        g.pending -= 1;
        if g.pending == 0 && g.waiting > 0 {
            self.feed.gate_cv.notify_all();
        }
    }
}

/// A catch-up inside the gate (local commits wait at the end of their closure).
pub(crate) struct Feeding<'a>(&'a Feed);

impl Drop for Feeding<'_> {
    fn drop(&mut self) {
        let mut g = lock(&self.0.gate);
        let me = std::thread::current().id();
        if let Some(p) = g.threads.iter().rposition(|t| *t == me) {
            g.threads.remove(p);
        }
        g.feeding = false;
        let wake = g.waiting > 0;
        drop(g);
        if wake {
            self.0.gate_cv.notify_all();
        }
    }
}

fn random_origin() -> i64 {
    use std::hash::{BuildHasher, Hasher};
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    // `RandomState` is seeded randomly per process; the pid and a counter keep two
    // handles of one process apart even if the seeds met.
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u32(std::process::id());
    h.write_u64(COUNTER.fetch_add(1, Ordering::Relaxed));
    h.write_u128(
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos())
            .unwrap_or(0),
    );
    h.finish() as i64
}

/// What the open's schema phase prepares for the feed (on the open thread).
pub(crate) struct Seed {
    signal: CommitSignal,
    last: i64,
}

impl Seed {
    /// Create the change log if missing, read its end and open the signal.
    pub(crate) fn prepare(conn: &rusqlite::Connection, path: &std::path::Path) -> Result<Seed> {
        let err = |e| Error::sqlite("create the change log", LOG_TABLE, e);
        conn.execute_batch(LOG_TABLE_SQL).map_err(err)?;
        let has_ids: bool = conn
            .query_row(
                "SELECT count(*) > 0 FROM pragma_table_info('keel_changes') WHERE name = 'ids'",
                [],
                |r| r.get(0),
            )
            .map_err(err)?;
        if !has_ids {
            conn.execute_batch(LOG_IDS_SQL).map_err(err)?;
        }
        let last = read_log_end(conn)?.1;
        let signal = CommitSignal::open(path)?;
        Ok(Seed { signal, last })
    }
}

impl Feed {
    /// The feed of a database just opened: starts after `seed`'s log end.
    pub(crate) fn new(seed: Seed) -> Feed {
        let Seed { signal, last } = seed;
        Feed {
            origin: random_origin(),
            signal,
            watch: Mutex::new(None),
            last: Mutex::new(last),
            gate: Mutex::new(GateState::default()),
            gate_cv: Condvar::new(),
            catch_ups: AtomicU64::new(0),
            remote_commits: AtomicU64::new(0),
            remote_rows: AtomicU64::new(0),
            remote_keys: AtomicU64::new(0),
            full_refetches: AtomicU64::new(0),
        }
    }

    /// Start the `keel-feed` thread: `on_post` runs after each post (the caller's
    /// catch-up).
    pub(crate) fn start(&self, on_post: impl FnMut() + Send + 'static) -> Result<()> {
        let w = self.signal.watch(on_post)?;
        *lock(&self.watch) = Some(w);
        Ok(())
    }

    /// Stop the `keel-feed` thread (at close).
    pub(crate) fn stop(&self) {
        let w = lock(&self.watch).take();
        if let Some(w) = w {
            w.stop();
        }
    }

    pub(crate) fn stats(&self) -> FeedStats {
        FeedStats {
            catch_ups: self.catch_ups.load(Ordering::Relaxed),
            remote_commits: self.remote_commits.load(Ordering::Relaxed),
            remote_rows: self.remote_rows.load(Ordering::Relaxed),
            remote_keys: self.remote_keys.load(Ordering::Relaxed),
            full_refetches: self.full_refetches.load(Ordering::Relaxed),
        }
    }

    /// Enter the gate as a local commit (blocks while a catch-up runs, unless a
    /// commit of the same group is already inside).
    pub(crate) fn enter(self: &Arc<Self>) -> LocalCommit {
        let mut g = lock(&self.gate);
        while g.feeding && g.pending == 0 {
            g.waiting += 1;
            g = self.gate_cv.wait(g).unwrap_or_else(|p| p.into_inner());
            g.waiting -= 1;
        }
        g.pending += 1;
        let thread = std::thread::current().id();
        g.threads.push(thread);
        LocalCommit {
            feed: Arc::clone(self),
            thread,
        }
    }

    /// Enter the gate as a catch-up if no local commit is inside (and no other
    /// catch-up): new local commits then wait until the returned guard drops.
    /// Never waits: the caller holds a pooled read connection, and a local
    /// commit's delivery may need one (see [`Feed::wait_idle`]).
    pub(crate) fn try_feeding(&self) -> Option<Feeding<'_>> {
        let mut g = lock(&self.gate);
        if g.feeding || g.pending > 0 {
            return None;
        }
        g.feeding = true;
        g.threads.push(std::thread::current().id());
        Some(Feeding(self))
    }

    /// Wait until no local commit and no catch-up is inside the gate (a catch-up
    /// that found it taken waits here holding nothing, then tries again).
    pub(crate) fn wait_idle(&self) {
        let mut g = lock(&self.gate);
        while g.feeding || g.pending > 0 {
            g.waiting += 1;
            g = self.gate_cv.wait(g).unwrap_or_else(|p| p.into_inner());
            g.waiting -= 1;
        }
    }

    /// True on a thread inside this feed's gate (a local commit not yet delivered,
    /// or a catch-up): a catch-up started there would wait for itself.
    pub(crate) fn inside(&self) -> bool {
        let me = std::thread::current().id();
        lock(&self.gate).threads.contains(&me)
    }

    /// Append one closure's changes to the log (inside its transaction).
    pub(crate) fn log(
        &self,
        conn: &rusqlite::Connection,
        changes: &[Change],
        dict_keys: &[&str],
        dict_clear: bool,
    ) -> Result<()> {
        let dict_bytes: usize = dict_keys.iter().map(|k| k.len() + 4).sum();
        let full = changes.len() > MAX_ROWS || dict_bytes > MAX_DICT_BYTES;
        let (rows, ids, dict) = if full {
            (None, None, None)
        } else {
            (
                (!changes.is_empty()).then(|| encode_rows(changes)),
                (!changes.is_empty()).then(|| encode_ids(changes)),
                (!dict_keys.is_empty()).then(|| encode_keys(dict_keys)),
            )
        };
        let err = |e| Error::sqlite("append to the change log", LOG_TABLE, e);
        conn.prepare_cached(
            "INSERT INTO keel_changes(origin, full, rows, dict, dict_clear, ids) VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
        )
        .and_then(|mut st| {
            st.execute(rusqlite::params![self.origin, full, rows, dict, dict_clear, ids])
        })
        .map_err(err)?;
        let seq = conn.last_insert_rowid();
        if seq % PRUNE_EVERY == 0 {
            conn.prepare_cached("DELETE FROM keel_changes WHERE seq <= ?1")
                .and_then(|mut st| st.execute([seq - KEEP]))
                .map_err(err)?;
        }
        Ok(())
    }
}

/// `(log exists, its last sequence number)`: 0 for a log never written.
pub(crate) fn read_log_end(c: &rusqlite::Connection) -> Result<(bool, i64)> {
    let err = |e| Error::sqlite("read the change log", LOG_TABLE, e);
    let exists: bool = c
        .query_row(
            "SELECT count(*) > 0 FROM sqlite_schema WHERE type = 'table' AND name = 'keel_changes'",
            [],
            |r| r.get(0),
        )
        .map_err(err)?;
    if !exists {
        return Ok((false, 0));
    }
    let end: Option<i64> = c
        .query_row(
            "SELECT seq FROM sqlite_sequence WHERE name = 'keel_changes'",
            [],
            |r| r.get(0),
        )
        .map(Some)
        .or_else(|e| match e {
            rusqlite::Error::QueryReturnedNoRows => Ok(None),
            e => Err(e),
        })
        .map_err(err)?;
    Ok((true, end.unwrap_or(0)))
}

/// `[u16 name length][name][u32 n][n × i64 rowid]`, one group per run of changes
/// to one collection.
fn encode_rows(changes: &[Change]) -> Vec<u8> {
    let mut out = Vec::with_capacity(changes.len() * 9 + 32);
    let mut i = 0;
    while i < changes.len() {
        let name = &changes[i].collection;
        let n = changes[i..]
            .iter()
            .take_while(|c| &c.collection == name)
            .count();
        let nb = name.as_bytes();
        out.extend_from_slice(&(nb.len().min(u16::MAX as usize) as u16).to_le_bytes());
        out.extend_from_slice(&nb[..nb.len().min(u16::MAX as usize)]);
        out.extend_from_slice(&(n as u32).to_le_bytes());
        for c in &changes[i..i + n] {
            out.extend_from_slice(&c.rowid.to_le_bytes());
        }
        i += n;
    }
    out
}

/// The identity of each change, in the order of [`encode_rows`]: its primary key
/// (`[rowid]` without one), as `[u8 n]` then per value a tag and its payload
/// (`0` null, `1` bool `[u8]`, `2` int `[i64]`, `3` float `[f64 bits]`, `4` text
/// and `5` blob `[u32 len][bytes]`).
///
/// Why: SQLite gives a new row the rowid of a deleted last row, so a rowid alone
/// cannot tell a reader that the object it follows was deleted and another took
/// its place (`delete x; insert y` in one write, or two commits caught up together,
/// as `delete_where` then inserts does). With the key logged beside the rowid, the
/// catch-up sees that the key stored at a rowid is no longer the one logged there
/// and delivers that object's delete (see `db/catch_up.rs`).
fn encode_ids(changes: &[Change]) -> Vec<u8> {
    let mut out = Vec::with_capacity(changes.len() * 16);
    for c in changes {
        out.push(c.key.len().min(u8::MAX as usize) as u8);
        for v in c.key.iter().take(u8::MAX as usize) {
            match v {
                Value::Null => out.push(0),
                Value::Bool(b) => out.extend_from_slice(&[1, u8::from(*b)]),
                Value::Int(i) => {
                    out.push(2);
                    out.extend_from_slice(&i.to_le_bytes());
                }
                Value::Float(f) => {
                    out.push(3);
                    out.extend_from_slice(&f.to_bits().to_le_bytes());
                }
                Value::Text(t) => {
                    out.push(4);
                    out.extend_from_slice(&(t.len() as u32).to_le_bytes());
                    out.extend_from_slice(t.as_bytes());
                }
                Value::Blob(b) => {
                    out.push(5);
                    out.extend_from_slice(&(b.len() as u32).to_le_bytes());
                    out.extend_from_slice(b);
                }
            }
        }
    }
    out
}

fn encode_keys(keys: &[&str]) -> Vec<u8> {
    let mut out = Vec::new();
    for k in keys {
        out.extend_from_slice(&(k.len() as u32).to_le_bytes());
        out.extend_from_slice(k.as_bytes());
    }
    out
}

struct Reader<'a>(&'a [u8]);

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize) -> Option<&'a [u8]> {
        if self.0.len() < n {
            return None;
        }
        let (a, b) = self.0.split_at(n);
        self.0 = b;
        Some(a)
    }
    fn u16(&mut self) -> Option<usize> {
        Some(u16::from_le_bytes(self.take(2)?.try_into().ok()?) as usize)
    }
    fn u32(&mut self) -> Option<usize> {
        Some(u32::from_le_bytes(self.take(4)?.try_into().ok()?) as usize)
    }
    fn i64(&mut self) -> Option<i64> {
        Some(i64::from_le_bytes(self.take(8)?.try_into().ok()?))
    }
    fn str(&mut self, n: usize) -> Option<&'a str> {
        std::str::from_utf8(self.take(n)?).ok()
    }
    fn value(&mut self) -> Option<Value> {
        Some(match self.take(1)?[0] {
            0 => Value::Null,
            1 => Value::Bool(self.take(1)?[0] != 0),
            2 => Value::Int(self.i64()?),
            3 => Value::Float(f64::from_bits(self.i64()? as u64)),
            4 => {
                let n = self.u32()?;
                Value::Text(self.str(n)?.to_owned())
            }
            5 => {
                let n = self.u32()?;
                Value::Blob(self.take(n)?.to_vec())
            }
            _ => return None,
        })
    }
}

/// `None` for a damaged payload, or one that does not hold `n` keys.
fn decode_ids(b: &[u8], n: usize) -> Option<Vec<Vec<Value>>> {
    let mut r = Reader(b);
    let mut out = Vec::with_capacity(n);
    while !r.0.is_empty() {
        let k = r.take(1)?[0] as usize;
        out.push((0..k).map(|_| r.value()).collect::<Option<Vec<_>>>()?);
    }
    (out.len() == n).then_some(out)
}

/// `None` for a damaged payload (the caller then reads everything again).
fn decode_rows(b: &[u8], out: &mut Vec<(String, i64)>) -> Option<()> {
    let mut r = Reader(b);
    while !r.0.is_empty() {
        let l = r.u16()?;
        let name = r.str(l)?.to_owned();
        let n = r.u32()?;
        for _ in 0..n {
            out.push((name.clone(), r.i64()?));
        }
    }
    Some(())
}

fn decode_keys(b: &[u8], out: &mut Vec<String>) -> Option<()> {
    let mut r = Reader(b);
    while !r.0.is_empty() {
        let l = r.u32()?;
        out.push(r.str(l)?.to_owned());
    }
    Some(())
}

/// A row another process changed, as it is now (`bytes: None`: deleted).
pub(crate) struct RemoteRow {
    pub(crate) collection: String,
    pub(crate) rowid: i64,
    /// The primary key read from the bytes (`[rowid]` without a primary key); for
    /// a deleted row the key logged with the change, or `None` for an entry of a
    /// keel that logged no keys (the hub then finds its object subscription by
    /// rowid).
    pub(crate) key: Option<Vec<Value>>,
    pub(crate) bytes: Option<Vec<u8>>,
}

impl RemoteRow {
    /// This row as a [`Change`] with primary key `key`: an
    /// update to its current bytes, or a delete; no old bytes (the log keeps
    /// none).
    pub(crate) fn change(&self, key: Vec<Value>) -> Change {
        Change {
            collection: self.collection.clone(),
            op: if self.bytes.is_some() {
                ChangeOp::Update
            } else {
                ChangeOp::Delete
            },
            key,
            rowid: self.rowid,
            old: None,
            new: self.bytes.clone(),
        }
    }
}

/// One change read from the log: collection, rowid and the key it had then.
pub(crate) type LoggedRow = (String, i64, Option<Vec<Value>>);

/// What the log holds after a sequence number, other origins only.
pub(crate) enum LogRead {
    /// Nothing new (or no log yet).
    Nothing,
    /// Not everything since is in the log (pruned, a full marker, a damaged
    /// entry): read every subscription again. `end`: the log's last number.
    Full { end: i64 },
    /// The entries after it, up to `end`.
    Changes {
        end: i64,
        /// Entries of other origins.
        commits: u64,
        /// `(collection, rowid, key logged with it)` in log order, repeats
        /// included; the key is `None` in entries of a keel that logged none.
        rows: Vec<LoggedRow>,
        /// Dictionary keys in log order, repeats included.
        keys: Vec<String>,
        /// Another origin ran `remove_all`.
        dict_clear: bool,
    },
}

/// `Some(end)` if everything the log holds after `last` is `origin`'s own (or
/// nothing is): the caller may move to `end` without reading or delivering
/// anything — the common wake-up by this process's own post. `None`: another
/// origin wrote, or entries were pruned.
pub(crate) fn own_only(conn: &rusqlite::Connection, origin: i64, last: i64) -> Result<Option<i64>> {
    let (exists, end) = read_log_end(conn)?;
    if !exists || end <= last {
        return Ok(Some(last));
    }
    let (first, others): (Option<i64>, i64) = conn
        .prepare_cached(
            "SELECT min(seq), coalesce(sum(origin != ?2), 0) FROM keel_changes WHERE seq > ?1",
        )
        .and_then(|mut st| {
            st.query_row(rusqlite::params![last, origin], |r| {
                Ok((r.get(0)?, r.get(1)?))
            })
        })
        .map_err(|e| Error::sqlite("read the change log", LOG_TABLE, e))?;
    Ok((first == Some(last + 1) && others == 0).then_some(end))
}

/// Read the log after `last`, skipping `origin`'s own entries (in the caller's
/// read transaction).
pub(crate) fn read_log(conn: &rusqlite::Connection, origin: i64, last: i64) -> Result<LogRead> {
    let (exists, end) = read_log_end(conn)?;
    if !exists || end <= last {
        return Ok(LogRead::Nothing);
    }
    let full = Ok(LogRead::Full { end });
    let err = |e| Error::sqlite("read the change log", LOG_TABLE, e);
    let mut st = conn
        .prepare_cached(
            "SELECT seq, origin, full, rows, dict, dict_clear, ids FROM keel_changes WHERE seq > ?1 ORDER BY seq",
        )
        .map_err(err)?;
    let mut q = st.query([last]).map_err(err)?;
    let mut expect = last + 1;
    let mut commits = 0u64;
    let mut rows: Vec<LoggedRow> = Vec::new();
    let mut these: Vec<(String, i64)> = Vec::new();
    let mut keys: Vec<String> = Vec::new();
    let mut dict_clear = false;
    while let Some(r) = q.next().map_err(err)? {
        let seq: i64 = r.get(0).map_err(err)?;
        if seq != expect {
            return full; // pruned past what this handle saw
        }
        expect += 1;
        if r.get::<_, i64>(1).map_err(err)? == origin {
            continue;
        }
        commits += 1;
        if r.get::<_, bool>(2).map_err(err)? {
            return full;
        }
        let rb: Option<Vec<u8>> = r.get(3).map_err(err)?;
        let kb: Option<Vec<u8>> = r.get(4).map_err(err)?;
        let ib: Option<Vec<u8>> = r.get(6).map_err(err)?;
        these.clear();
        let ok = rb
            .as_deref()
            .is_none_or(|b| decode_rows(b, &mut these).is_some())
            && match ib.as_deref() {
                // Logged by a keel that logged no keys: rowids only.
                None => {
                    rows.extend(these.drain(..).map(|(c, r)| (c, r, None)));
                    true
                }
                Some(b) => match decode_ids(b, these.len()) {
                    Some(ks) => {
                        rows.extend(these.drain(..).zip(ks).map(|((c, r), k)| (c, r, Some(k))));
                        true
                    }
                    None => false,
                },
            }
            && kb
                .as_deref()
                .is_none_or(|b| decode_keys(b, &mut keys).is_some());
        if !ok {
            tracing::warn!(
                seq,
                "damaged change-log entry; reading every subscription again"
            );
            return full;
        }
        dict_clear |= r.get::<_, bool>(5).map_err(err)?;
    }
    if expect <= end {
        return full; // the log ends before `end`: pruned entirely
    }
    Ok(LogRead::Changes {
        end,
        commits,
        rows,
        keys,
        dict_clear,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::base::change::ChangeOp;

    fn ch(coll: &str, rowid: i64) -> Change {
        Change {
            collection: coll.into(),
            op: ChangeOp::Insert,
            key: vec![],
            rowid,
            old: None,
            new: None,
        }
    }

    #[test]
    fn payloads_round_trip() {
        let b = encode_rows(&[ch("a.T", 1), ch("a.T", -2), ch("b.U", 3), ch("a.T", 4)]);
        let mut out = Vec::new();
        decode_rows(&b, &mut out).unwrap();
        assert_eq!(
            out,
            vec![
                ("a.T".into(), 1),
                ("a.T".into(), -2),
                ("b.U".into(), 3),
                ("a.T".into(), 4)
            ]
        );
        let mut changes = vec![ch("a.T", 1), ch("a.T", 2), ch("b.U", 3)];
        changes[0].key = vec![Value::Text("ü".into()), Value::Int(-7)];
        changes[1].key = vec![
            Value::Null,
            Value::Bool(true),
            Value::Float(1.5),
            Value::Blob(vec![0, 1]),
        ];
        let ids = encode_ids(&changes);
        let keys: Vec<Vec<Value>> = changes.iter().map(|c| c.key.clone()).collect();
        assert_eq!(decode_ids(&ids, 3), Some(keys));
        assert_eq!(decode_ids(&ids, 2), None);
        for cut in 1..ids.len() {
            assert!(decode_ids(&ids[..cut], 3).is_none(), "cut {cut}");
        }
        let k = encode_keys(&["x", "", "ü"]);
        let mut keys = Vec::new();
        decode_keys(&k, &mut keys).unwrap();
        assert_eq!(keys, vec!["x", "", "ü"]);
    }

    #[test]
    fn damaged_payloads_are_refused() {
        let b = encode_rows(&[ch("a.T", 1)]);
        for cut in 1..b.len() {
            assert!(
                decode_rows(&b[..cut], &mut Vec::new()).is_none(),
                "cut {cut}"
            );
        }
        assert!(decode_keys(&[9, 0, 0, 0, b'a'], &mut Vec::new()).is_none());
    }
}
