//! Physical I/O counters, per file kind, as seen by keel's VFS shim.

use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::time::Duration;

use crate::policy::{FileKind, SyncReason};

#[derive(Default)]
pub(crate) struct KindCounters {
    reads: AtomicU64,
    writes: AtomicU64,
    bytes_read: AtomicU64,
    bytes_written: AtomicU64,
    syncs: AtomicU64,
    sync_ns: AtomicU64,
    sync_max_ns: AtomicU64,
    truncates: AtomicU64,
}

#[derive(Default)]
pub(crate) struct Counters {
    kinds: [KindCounters; 4],
    by_reason: [AtomicU64; 3],
    dir_syncs: AtomicU64,
    sync_fallbacks: AtomicU64,
}

impl Counters {
    pub(crate) fn read(&self, k: FileKind, bytes: u64) {
        let c = &self.kinds[k.index()];
        c.reads.fetch_add(1, Relaxed);
        c.bytes_read.fetch_add(bytes, Relaxed);
    }
    pub(crate) fn write(&self, k: FileKind, bytes: u64) {
        let c = &self.kinds[k.index()];
        c.writes.fetch_add(1, Relaxed);
        c.bytes_written.fetch_add(bytes, Relaxed);
    }
    pub(crate) fn truncate(&self, k: FileKind) {
        self.kinds[k.index()].truncates.fetch_add(1, Relaxed);
    }
    pub(crate) fn sync(&self, k: FileKind, r: SyncReason, d: Duration) {
        let c = &self.kinds[k.index()];
        let ns = u64::try_from(d.as_nanos()).unwrap_or(u64::MAX);
        c.syncs.fetch_add(1, Relaxed);
        c.sync_ns.fetch_add(ns, Relaxed);
        c.sync_max_ns.fetch_max(ns, Relaxed);
        let i = match r {
            SyncReason::Commit => 0,
            SyncReason::Checkpoint => 1,
            SyncReason::OpenBarrier => 2,
        };
        self.by_reason[i].fetch_add(1, Relaxed);
    }
    pub(crate) fn dir_sync(&self) {
        self.dir_syncs.fetch_add(1, Relaxed);
    }
    pub(crate) fn sync_fallback(&self) {
        self.sync_fallbacks.fetch_add(1, Relaxed);
    }
    pub(crate) fn total_syncs(&self) -> u64 {
        self.kinds.iter().map(|c| c.syncs.load(Relaxed)).sum()
    }
    /// Syncs issued for the open barrier.
    pub(crate) fn barrier_syncs(&self) -> u64 {
        self.by_reason[2].load(Relaxed)
    }
    pub(crate) fn reset(&self) {
        for c in &self.kinds {
            for a in [
                &c.reads,
                &c.writes,
                &c.bytes_read,
                &c.bytes_written,
                &c.syncs,
                &c.sync_ns,
                &c.sync_max_ns,
                &c.truncates,
            ] {
                a.store(0, Relaxed);
            }
        }
        for a in &self.by_reason {
            a.store(0, Relaxed);
        }
        self.dir_syncs.store(0, Relaxed);
        self.sync_fallbacks.store(0, Relaxed);
    }
    pub(crate) fn snapshot(&self) -> IoStats {
        let f = |k: FileKind| {
            let c = &self.kinds[k.index()];
            FileStats {
                reads: c.reads.load(Relaxed),
                writes: c.writes.load(Relaxed),
                bytes_read: c.bytes_read.load(Relaxed),
                bytes_written: c.bytes_written.load(Relaxed),
                syncs: c.syncs.load(Relaxed),
                sync_time: Duration::from_nanos(c.sync_ns.load(Relaxed)),
                max_sync: Duration::from_nanos(c.sync_max_ns.load(Relaxed)),
                truncates: c.truncates.load(Relaxed),
            }
        };
        IoStats {
            main_db: f(FileKind::MainDb),
            wal: f(FileKind::Wal),
            journal: f(FileKind::Journal),
            other: f(FileKind::Other),
            commit_syncs: self.by_reason[0].load(Relaxed),
            checkpoint_syncs: self.by_reason[1].load(Relaxed),
            open_barrier_syncs: self.by_reason[2].load(Relaxed),
            dir_syncs: self.dir_syncs.load(Relaxed),
            sync_fallbacks: self.sync_fallbacks.load(Relaxed),
        }
    }
}

/// I/O counters for one file kind.
///
/// ```
/// # use keel_storage::{FileKind, Store, StoreOptions};
/// # let dir = tempfile::tempdir().unwrap();
/// # let store = Store::open(dir.path().join("a.db"), StoreOptions::default())?;
/// let wal = *store.io_stats().kind(FileKind::Wal);
/// println!("{} WAL syncs, longest {:?}", wal.syncs, wal.max_sync);
/// # Ok::<(), keel_storage::Error>(())
/// ```
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct FileStats {
    /// `xRead` calls.
    pub reads: u64,
    /// `xWrite` calls.
    pub writes: u64,
    /// Bytes read.
    pub bytes_read: u64,
    /// Bytes written.
    pub bytes_written: u64,
    /// Syncs actually issued (policy `Off` issues none and is not counted).
    pub syncs: u64,
    /// Total time spent in those syncs.
    pub sync_time: Duration,
    /// The longest single sync.
    pub max_sync: Duration,
    /// `xTruncate` calls.
    pub truncates: u64,
}

/// A snapshot of a store's physical I/O since open (or since
/// [`Store::reset_io_stats`](crate::store::Store::reset_io_stats)).
///
/// ```
/// # use keel_storage::{Store, StoreOptions};
/// # let dir = tempfile::tempdir().unwrap();
/// let store = Store::open(dir.path().join("a.db"), StoreOptions::default())?;
/// store.reset_io_stats();
/// store.write_blocking(|t| t.execute("CREATE TABLE t(x)", []).map_err(keel_storage::Error::from))?;
/// let s = store.io_stats();
/// assert!(s.wal.writes > 0);
/// println!("{s}");
/// # Ok::<(), keel_storage::Error>(())
/// ```
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct IoStats {
    /// The main database file.
    pub main_db: FileStats,
    /// The WAL.
    pub wal: FileStats,
    /// Rollback journals.
    pub journal: FileStats,
    /// Temp files and anything else.
    pub other: FileStats,
    /// Syncs issued for commits (all file kinds).
    pub commit_syncs: u64,
    /// Syncs issued for checkpoints.
    pub checkpoint_syncs: u64,
    /// Syncs issued by the open barrier.
    pub open_barrier_syncs: u64,
    /// Directory syncs after a new WAL/journal file was created (not counted above).
    pub dir_syncs: u64,
    /// Syncs that could not use the policy's primitive because the file system does
    /// not support it (`F_FULLFSYNC` / `F_BARRIERFSYNC` refused with `ENOTSUP` or
    /// `EINVAL`, e.g. on a network volume) and fell back to `fsync`. Always 0 where
    /// the policy's primitive is `fsync`/`fdatasync`. Any other failure of a primitive
    /// fails the sync (and the commit) instead.
    pub sync_fallbacks: u64,
}

impl IoStats {
    /// Counters for one kind.
    pub fn kind(&self, k: FileKind) -> &FileStats {
        match k {
            FileKind::MainDb => &self.main_db,
            FileKind::Wal => &self.wal,
            FileKind::Journal => &self.journal,
            FileKind::Other => &self.other,
        }
    }

    /// Syncs over all file kinds.
    pub fn total_syncs(&self) -> u64 {
        self.main_db.syncs + self.wal.syncs + self.journal.syncs + self.other.syncs
    }
}

impl fmt::Display for IoStats {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(
            f,
            "{:<8} {:>8} {:>8} {:>12} {:>12} {:>6} {:>11} {:>11}",
            "file",
            "reads",
            "writes",
            "bytes_read",
            "bytes_write",
            "syncs",
            "sync_total",
            "sync_max"
        )?;
        for k in [
            FileKind::MainDb,
            FileKind::Wal,
            FileKind::Journal,
            FileKind::Other,
        ] {
            let s = self.kind(k);
            writeln!(
                f,
                "{:<8} {:>8} {:>8} {:>12} {:>12} {:>6} {:>9.2}ms {:>9.2}ms",
                k.name(),
                s.reads,
                s.writes,
                s.bytes_read,
                s.bytes_written,
                s.syncs,
                s.sync_time.as_secs_f64() * 1e3,
                s.max_sync.as_secs_f64() * 1e3
            )?;
        }
        write!(
            f,
            "syncs by reason: commit {}, checkpoint {}, open barrier {}; directory syncs {}; fallbacks to fsync {}",
            self.commit_syncs,
            self.checkpoint_syncs,
            self.open_barrier_syncs,
            self.dir_syncs,
            self.sync_fallbacks
        )
    }
}
