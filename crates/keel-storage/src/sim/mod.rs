//! Simulated storage and fault injection (cargo feature `sim`, off by default).
//!
//! A [`SimDisk`] is attached to a store with [`StoreOptions::sim_disk`](crate::options::StoreOptions::sim_disk)
//! and sits behind keel's VFS shim: every read, write, sync, truncate and delete of the
//! store's main database, WAL and journal is reported to it before it reaches the real
//! file. The real files keep the *live* image (what the OS page cache would hold); the
//! disk keeps, per file, the *durable* image (the bytes as of the last sync that really
//! ran a sync primitive) and the list of writes and truncates since. Modelled on SQLite's
//! crash-test VFS (`src/test6.c`):
//!
//! * **Crash at op N** ([`SimDisk::crash_at`]): from the N-th mutating operation (write,
//!   sync, truncate) on, every mutating operation fails with an I/O error and reaches
//!   nothing, as if the machine had stopped. Drop the store afterwards.
//! * **Power loss** ([`SimDisk::power_loss`]): the real files are rewritten as the durable
//!   image plus each unsynced write *applied*, *dropped* or *torn* — torn per 512-byte
//!   sector of the write: each sector gets the new bytes, keeps the old ones, or gets
//!   garbage — and each unsynced truncate applied or dropped; a file whose directory
//!   entry was never synced may vanish; the `-shm` file is deleted (it is not durable
//!   state). Every choice comes from the seed, so a seed reproduces exactly.
//! * **App crash** ([`SimDisk::app_crash`]): the process dies, the OS keeps the page
//!   cache: the live image stays, unsynced writes stay unsynced (a later power loss can
//!   still take them).
//! * **Faults** ([`SimDisk::inject_fault`]): the N-th read, write, sync or truncate fails
//!   once with `EIO` or `ENOSPC` (mapped to the SQLite codes the `unix` VFS returns).
//!
//! A sync counts as durable only when the sync *primitive* ran (`fsync`/`F_FULLFSYNC`/…,
//! directly, through the real `xSync`, or from a [`SyncHook`](crate::policy::SyncHook) calling
//! [`SyncContext::full_sync`](crate::policy::SyncContext::full_sync) and friends): a hook that
//! returns `Ok` without syncing is caught as lost data. By default the primitive itself
//! is skipped (the simulated disk is the medium; the real files are only storage), see
//! [`SimDisk::set_real_sync`].
//!
//! The campaigns that drive whole stores through crashes and faults with an oracle sit
//! above the store, in [`crate::campaign`]: this module is only the medium.

mod rng;

use std::collections::HashMap;
use std::ffi::c_int;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Mutex, MutexGuard};

use libsqlite3_sys as ffi;

use crate::policy::{FileKind, Primitive};
pub use rng::SimRng;

/// An Apple `fcntl` sync primitive, as handed to an injected [`PlatformSync`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum StrongSync {
    /// `fcntl(F_FULLFSYNC)` (policies `Full` and `Custom`'s `full_sync`).
    FullFsync,
    /// `fcntl(F_BARRIERFSYNC)` (policy `Barrier`).
    BarrierFsync,
}

impl From<Primitive> for StrongSync {
    fn from(p: Primitive) -> StrongSync {
        match p {
            Primitive::BarrierFsync => StrongSync::BarrierFsync,
            _ => StrongSync::FullFsync,
        }
    }
}

/// A stand-in for the Apple `fcntl` primitive (`StoreOptions::platform_sync`): with
/// it, the store selects primitives as on Apple on any platform and calls this
/// instead of `fcntl`, so the selection and the error handling (fall back to `fsync`
/// on `ENOTSUP`/`EINVAL`, counted; fail the sync on anything else) are tested on
/// Linux. Return `Ok(())` for a successful primitive.
pub type PlatformSync =
    std::sync::Arc<dyn Fn(i32, StrongSync) -> std::io::Result<()> + Send + Sync>;

/// A statement trace (`StoreOptions::statement_trace`): called with the SQL of every
/// statement the writer thread starts.
pub type StatementTrace = std::sync::Arc<dyn Fn(&str) + Send + Sync>;

/// Sector size used for torn writes (as SQLite's `test6.c` default).
pub const SECTOR: u64 = 512;

/// A class of I/O operation, for counting and fault injection.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum OpClass {
    /// `xRead`.
    Read,
    /// `xWrite`.
    Write,
    /// `xSync` (and keel's own open-barrier sync).
    Sync,
    /// `xTruncate`.
    Truncate,
}

impl OpClass {
    /// All classes.
    pub const ALL: [OpClass; 4] = [
        OpClass::Read,
        OpClass::Write,
        OpClass::Sync,
        OpClass::Truncate,
    ];
    fn index(self) -> usize {
        self as usize
    }
    /// Lowercase name.
    pub fn name(self) -> &'static str {
        match self {
            OpClass::Read => "read",
            OpClass::Write => "write",
            OpClass::Sync => "sync",
            OpClass::Truncate => "truncate",
        }
    }
}

/// The error an injected fault reports.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum FaultErrno {
    /// `EIO`: SQLite sees `SQLITE_IOERR_READ/WRITE/FSYNC/TRUNCATE`.
    Eio,
    /// `ENOSPC`: SQLite sees `SQLITE_FULL` for writes and truncates, `SQLITE_IOERR_FSYNC`
    /// for syncs, `SQLITE_IOERR_READ` for reads.
    Enospc,
}

impl FaultErrno {
    fn errno(self) -> i32 {
        match self {
            FaultErrno::Eio => libc::EIO,
            FaultErrno::Enospc => libc::ENOSPC,
        }
    }
}

/// A fault that fired.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FiredFault {
    /// Which operation failed.
    pub class: OpClass,
    /// Its number within the class since the fault was armed (1-based).
    pub nth: u64,
    /// The error.
    pub errno: FaultErrno,
    /// The file kind it hit.
    pub kind: FileKind,
}

/// Operation counts since the disk was created or last reset.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct OpCounts {
    /// Reads.
    pub reads: u64,
    /// Writes.
    pub writes: u64,
    /// Syncs.
    pub syncs: u64,
    /// Truncates.
    pub truncates: u64,
}

impl OpCounts {
    /// Count for one class.
    pub fn get(&self, c: OpClass) -> u64 {
        match c {
            OpClass::Read => self.reads,
            OpClass::Write => self.writes,
            OpClass::Sync => self.syncs,
            OpClass::Truncate => self.truncates,
        }
    }
    /// Mutating operations (writes + syncs + truncates): the crash-point clock.
    pub fn mutating(&self) -> u64 {
        self.writes + self.syncs + self.truncates
    }
}

/// What a power loss did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PowerLossReport {
    /// Unsynced writes applied whole.
    pub applied: u64,
    /// Unsynced writes dropped.
    pub dropped: u64,
    /// Unsynced writes torn (per sector: new, old or garbage).
    pub torn: u64,
    /// Unsynced truncates applied.
    pub truncates_applied: u64,
    /// Unsynced truncates dropped.
    pub truncates_dropped: u64,
    /// Files whose directory entry was never synced and that vanished.
    pub vanished: u64,
}

enum Pending {
    Write { off: u64, data: Vec<u8> },
    Truncate(u64),
}

struct SimFile {
    path: PathBuf,
    kind: FileKind,
    /// Bytes as of the last durable sync.
    durable: Vec<u8>,
    /// Writes and truncates since.
    pending: Vec<Pending>,
    /// The directory entry is durable (existed when first seen, or its directory was
    /// synced after it was created).
    entry_durable: bool,
    /// The file exists in the live image.
    live: bool,
}

fn apply(img: &mut Vec<u8>, op: &Pending) {
    match op {
        Pending::Write { off, data } => write_at(img, *off, data),
        // ftruncate both shrinks and extends (with zeros).
        Pending::Truncate(n) => img.resize(usize::try_from(*n).unwrap_or(usize::MAX), 0),
    }
}

/// The file's size in the live image (durable bytes plus the writes and truncates
/// since).
fn live_len(f: &SimFile) -> u64 {
    f.pending
        .iter()
        .fold(f.durable.len() as u64, |len, op| match op {
            Pending::Write { off, data } => len.max(off + data.len() as u64),
            Pending::Truncate(n) => *n,
        })
}

fn write_at(img: &mut Vec<u8>, off: u64, data: &[u8]) {
    let off = usize::try_from(off).unwrap_or(usize::MAX);
    let end = off.saturating_add(data.len());
    if img.len() < end {
        img.resize(end, 0);
    }
    img[off..end].copy_from_slice(data);
}

#[derive(Default)]
struct State {
    files: Vec<SimFile>,
    by_path: HashMap<PathBuf, usize>,
    counts: [u64; 4],
    /// Mutating ops since `crash_at` was armed.
    clock: u64,
    crash_at: Option<u64>,
    crashed: bool,
    /// (class, nth since armed, errno); one shot.
    fault: Option<(OpClass, u64, FaultErrno)>,
    fault_base: [u64; 4],
    fired: Vec<FiredFault>,
    /// The disk is full: writes that would grow a file fail with `ENOSPC`.
    full: bool,
}

/// A simulated disk behind one store's VFS shim (see the [module docs](self)).
///
/// ```
/// use std::sync::Arc;
/// use keel_storage::sim::{SimDisk, SimRng};
/// use keel_storage::{Error, Store, StoreOptions};
/// let dir = tempfile::tempdir().unwrap();
/// let path = dir.path().join("s.db");
/// Store::open(&path, StoreOptions::default())?.close()?; // a durable, empty database
/// let disk = Arc::new(SimDisk::new());
/// let store = Store::open(&path, StoreOptions::default().sim_disk(Arc::clone(&disk)))?;
/// store.write_blocking(|t| t.execute_batch("CREATE TABLE t(x); INSERT INTO t VALUES (1)").map_err(Error::from))?;
/// disk.crash_now();
/// let _ = store.close(); // wait for keel's threads (a drop would close in the background)
/// disk.power_loss(&mut SimRng::new(7));
/// // The commit was acknowledged under `Full`: it survives.
/// let store = Store::open(&path, StoreOptions::default())?;
/// let n: i64 = store.read(|c| c.query_row("SELECT count(*) FROM t", [], |r| r.get(0)).map_err(Error::from))?;
/// assert_eq!(n, 1);
/// # Ok::<(), Error>(())
/// ```
pub struct SimDisk {
    state: Mutex<State>,
    real_sync: AtomicBool,
}

impl std::fmt::Debug for SimDisk {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let s = self.lock();
        f.debug_struct("SimDisk")
            .field("files", &s.files.len())
            .field("clock", &s.clock)
            .field("crash_at", &s.crash_at)
            .field("crashed", &s.crashed)
            .finish()
    }
}

impl Default for SimDisk {
    fn default() -> Self {
        SimDisk::new()
    }
}

/// Result of asking the disk whether an operation may proceed: `Err(sqlite rc)`.
pub(crate) type Gate = Result<(), (c_int, i32)>;

impl SimDisk {
    /// A disk with no files known yet. Files are adopted when the store first opens
    /// them: their current content counts as durable.
    pub fn new() -> SimDisk {
        SimDisk {
            state: Mutex::new(State::default()),
            real_sync: AtomicBool::new(false),
        }
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Also run the real sync primitive when a sync is durable (default `false`: the
    /// simulated disk is the medium, so real `fsync`s would only cost time).
    pub fn set_real_sync(&self, yes: bool) {
        self.real_sync.store(yes, Ordering::Relaxed);
    }

    pub(crate) fn real_sync(&self) -> bool {
        self.real_sync.load(Ordering::Relaxed)
    }

    /// Crash at the `n`-th mutating operation from now (1-based): it and every later
    /// write, sync, truncate and delete fail and reach nothing.
    pub fn crash_at(&self, n: u64) {
        let mut s = self.lock();
        s.clock = 0;
        s.crash_at = Some(n.max(1));
        s.crashed = false;
    }

    /// Crash now (every later mutating operation fails).
    pub fn crash_now(&self) {
        self.lock().crashed = true;
    }

    /// True once the crash point was reached.
    pub fn crashed(&self) -> bool {
        self.lock().crashed
    }

    /// Mutating operations since [`SimDisk::crash_at`] (or creation).
    pub fn clock(&self) -> u64 {
        self.lock().clock
    }

    /// Arm a one-shot fault: the `nth` operation of `class` from now (1-based) fails
    /// with `errno`. Replaces an armed fault that has not fired.
    pub fn inject_fault(&self, class: OpClass, nth: u64, errno: FaultErrno) {
        let mut s = self.lock();
        s.fault_base = s.counts;
        s.fault = Some((class, nth.max(1), errno));
    }

    /// Fill the disk (`true`) or free space again (`false`). While full, every write
    /// and truncate that would make a file longer than it is fails with `ENOSPC`
    /// (SQLite sees `SQLITE_FULL`), as on a real full file system; writes inside a
    /// file's current size still succeed. Unlike [`SimDisk::inject_fault`] this lasts
    /// until cleared.
    ///
    /// ```
    /// use keel_storage::sim::SimDisk;
    /// let d = SimDisk::new();
    /// d.set_full(true);
    /// assert!(d.is_full());
    /// ```
    pub fn set_full(&self, yes: bool) {
        self.lock().full = yes;
    }

    /// True while [`SimDisk::set_full`] holds the disk full.
    pub fn is_full(&self) -> bool {
        self.lock().full
    }

    /// Disarm a fault that has not fired.
    pub fn clear_fault(&self) {
        self.lock().fault = None;
    }

    /// Faults that fired, oldest first.
    pub fn fired(&self) -> Vec<FiredFault> {
        self.lock().fired.clone()
    }

    /// Operation counts since creation.
    pub fn op_counts(&self) -> OpCounts {
        let s = self.lock();
        OpCounts {
            reads: s.counts[0],
            writes: s.counts[1],
            syncs: s.counts[2],
            truncates: s.counts[3],
        }
    }

    /// Bytes written but not yet durable, over all files.
    pub fn unsynced_bytes(&self) -> u64 {
        let s = self.lock();
        s.files
            .iter()
            .flat_map(|f| f.pending.iter())
            .map(|p| match p {
                Pending::Write { data, .. } => data.len() as u64,
                Pending::Truncate(_) => 0,
            })
            .sum()
    }

    /// One line per known file: kind, durable length, unsynced operations, whether
    /// its directory entry is durable.
    pub fn describe(&self) -> String {
        let s = self.lock();
        s.files
            .iter()
            .map(|f| {
                format!(
                    "{}: {} durable bytes, {} unsynced ops{}{}",
                    f.path
                        .file_name()
                        .map(|n| n.to_string_lossy())
                        .unwrap_or_default(),
                    f.durable.len(),
                    f.pending.len(),
                    if f.entry_durable {
                        ""
                    } else {
                        ", entry not durable"
                    },
                    if f.live { "" } else { ", deleted" }
                )
            })
            .collect::<Vec<_>>()
            .join("; ")
    }

    /// The process died; the OS survived: the live image stays as it is and unsynced
    /// writes stay unsynced. Clears the crash state so the next store can use the disk.
    pub fn app_crash(&self) {
        let mut s = self.lock();
        s.crashed = false;
        s.crash_at = None;
        s.clock = 0;
        s.fault = None;
    }

    /// Power loss: rewrite every known file as its durable image plus each unsynced
    /// write applied, dropped or torn (per 512-byte sector: new, old or garbage) and
    /// each unsynced truncate applied or dropped, chosen by `rng`; files whose directory
    /// entry was never synced may vanish; `<db>-shm` files are deleted. Afterwards the
    /// rewritten images are the durable state and the disk is ready for the next store.
    /// Call only after every store using this disk was dropped.
    pub fn power_loss(&self, rng: &mut SimRng) -> PowerLossReport {
        let mut s = self.lock();
        let mut rep = PowerLossReport::default();
        let mut shm = Vec::new();
        for f in s.files.iter_mut() {
            if !f.live {
                // Deleted in the session (modelled as durable at once).
                let _ = std::fs::remove_file(&f.path);
                continue;
            }
            let vanish = !f.entry_durable && rng.below(2) == 0;
            let mut img = if f.entry_durable {
                std::mem::take(&mut f.durable)
            } else {
                Vec::new()
            };
            for op in &f.pending {
                match op {
                    Pending::Write { off, data } => match rng.below(3) {
                        0 => {
                            rep.applied += 1;
                            write_at(&mut img, *off, data);
                        }
                        1 => rep.dropped += 1,
                        _ => {
                            rep.torn += 1;
                            let mut pos = *off;
                            let end = *off + data.len() as u64;
                            while pos < end {
                                let next = ((pos / SECTOR) + 1) * SECTOR;
                                let chunk_end = next.min(end);
                                let lo = (pos - off) as usize;
                                let hi = (chunk_end - off) as usize;
                                match rng.below(3) {
                                    0 => write_at(&mut img, pos, &data[lo..hi]),
                                    1 => {}
                                    _ => {
                                        let junk: Vec<u8> =
                                            (lo..hi).map(|_| rng.next_u64() as u8).collect();
                                        write_at(&mut img, pos, &junk);
                                    }
                                }
                                pos = chunk_end;
                            }
                        }
                    },
                    Pending::Truncate(_) => {
                        if rng.below(2) == 0 {
                            rep.truncates_applied += 1;
                            apply(&mut img, op);
                        } else {
                            rep.truncates_dropped += 1;
                        }
                    }
                }
            }
            f.pending.clear();
            if f.kind == FileKind::MainDb {
                let mut p = f.path.clone().into_os_string();
                p.push("-shm");
                shm.push(PathBuf::from(p));
            }
            if vanish {
                rep.vanished += 1;
                let _ = std::fs::remove_file(&f.path);
                f.durable = Vec::new();
                f.live = false;
                continue;
            }
            // Best effort: the directory may have been removed by the test.
            if std::fs::write(&f.path, &img).is_ok() {
                f.live = true;
            }
            f.durable = img;
            f.entry_durable = true;
        }
        // Files that vanished are forgotten: the next open adopts what is on disk.
        let keep: Vec<SimFile> = std::mem::take(&mut s.files)
            .into_iter()
            .filter(|f| f.live)
            .collect();
        s.files = keep;
        s.by_path = s
            .files
            .iter()
            .enumerate()
            .map(|(i, f)| (f.path.clone(), i))
            .collect();
        for p in shm {
            let _ = std::fs::remove_file(p);
        }
        s.crashed = false;
        s.crash_at = None;
        s.clock = 0;
        s.fault = None;
        rep
    }

    // ---- hooks called by the VFS shim ----

    /// A file was opened (or is about to be synced by path): its id.
    pub(crate) fn file_id(&self, path: &Path, kind: FileKind) -> usize {
        let mut s = self.lock();
        if let Some(&id) = s.by_path.get(path) {
            let f = &mut s.files[id];
            if !f.live {
                // Deleted earlier in this session and created again.
                f.live = true;
                f.entry_durable = false;
                f.durable.clear();
                f.pending.clear();
            }
            return id;
        }
        let existing = std::fs::read(path).ok();
        let id = s.files.len();
        s.files.push(SimFile {
            path: path.to_path_buf(),
            kind,
            entry_durable: existing.is_some(),
            durable: existing.unwrap_or_default(),
            pending: Vec::new(),
            live: true,
        });
        s.by_path.insert(path.to_path_buf(), id);
        id
    }

    /// Count the op; fire an armed fault; refuse mutating ops after the crash point.
    fn gate(s: &mut State, class: OpClass, kind: FileKind) -> Option<FaultErrno> {
        s.counts[class.index()] += 1;
        if let Some((c, nth, errno)) = s.fault {
            if c == class && s.counts[class.index()] - s.fault_base[class.index()] == nth {
                s.fault = None;
                s.fired.push(FiredFault {
                    class,
                    nth,
                    errno,
                    kind,
                });
                return Some(errno);
            }
        }
        None
    }

    fn tick(s: &mut State) -> bool {
        if s.crashed {
            return true;
        }
        s.clock += 1;
        if s.crash_at.is_some_and(|n| s.clock >= n) {
            s.crashed = true;
        }
        s.crashed
    }

    pub(crate) fn read(&self, id: usize) -> Gate {
        let mut s = self.lock();
        let kind = s.files[id].kind;
        match Self::gate(&mut s, OpClass::Read, kind) {
            Some(e) => Err((ffi::SQLITE_IOERR_READ, e.errno())),
            None => Ok(()),
        }
    }

    pub(crate) fn write(&self, id: usize, off: u64, data: &[u8]) -> Gate {
        let mut s = self.lock();
        let kind = s.files[id].kind;
        if Self::tick(&mut s) {
            return Err((ffi::SQLITE_IOERR_WRITE, libc::EIO));
        }
        if let Some(e) = Self::gate(&mut s, OpClass::Write, kind) {
            let rc = match e {
                FaultErrno::Eio => ffi::SQLITE_IOERR_WRITE,
                FaultErrno::Enospc => ffi::SQLITE_FULL,
            };
            return Err((rc, e.errno()));
        }
        if s.full && off + data.len() as u64 > live_len(&s.files[id]) {
            return Err((ffi::SQLITE_FULL, libc::ENOSPC));
        }
        s.files[id].pending.push(Pending::Write {
            off,
            data: data.to_vec(),
        });
        Ok(())
    }

    pub(crate) fn truncate(&self, id: usize, size: u64) -> Gate {
        let mut s = self.lock();
        let kind = s.files[id].kind;
        if Self::tick(&mut s) {
            return Err((ffi::SQLITE_IOERR_TRUNCATE, libc::EIO));
        }
        if let Some(e) = Self::gate(&mut s, OpClass::Truncate, kind) {
            let rc = match e {
                FaultErrno::Eio => ffi::SQLITE_IOERR_TRUNCATE,
                FaultErrno::Enospc => ffi::SQLITE_FULL,
            };
            return Err((rc, e.errno()));
        }
        if s.full && size > live_len(&s.files[id]) {
            return Err((ffi::SQLITE_FULL, libc::ENOSPC));
        }
        s.files[id].pending.push(Pending::Truncate(size));
        Ok(())
    }

    /// Before a sync is attempted.
    pub(crate) fn sync(&self, id: usize) -> Gate {
        let mut s = self.lock();
        let kind = s.files[id].kind;
        if Self::tick(&mut s) {
            return Err((ffi::SQLITE_IOERR_FSYNC, libc::EIO));
        }
        match Self::gate(&mut s, OpClass::Sync, kind) {
            Some(e) => Err((ffi::SQLITE_IOERR_FSYNC, e.errno())),
            None => Ok(()),
        }
    }

    /// A sync primitive really ran on the file: its live image is now durable.
    pub(crate) fn synced(&self, id: usize) {
        let mut s = self.lock();
        let f = &mut s.files[id];
        let ops = std::mem::take(&mut f.pending);
        for op in &ops {
            apply(&mut f.durable, op);
        }
    }

    /// A directory was synced: entries of live files in it are durable.
    pub(crate) fn dir_synced(&self, dir: &Path) {
        let mut s = self.lock();
        for f in s.files.iter_mut() {
            if f.live && f.path.parent() == Some(dir) {
                f.entry_durable = true;
            }
        }
    }

    /// Before `xDelete`. Deletion is modelled as durable at once (keel's sessions only
    /// delete at a clean close).
    pub(crate) fn delete(&self, path: &Path) -> Gate {
        let mut s = self.lock();
        if s.crashed {
            return Err((ffi::SQLITE_IOERR_DELETE, libc::EIO));
        }
        if let Some(&id) = s.by_path.get(path) {
            let f = &mut s.files[id];
            f.live = false;
            f.durable.clear();
            f.pending.clear();
            f.entry_durable = true;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeSet;

    fn disk_with_file(dir: &Path, content: &[u8]) -> (SimDisk, usize, PathBuf) {
        let p = dir.join("f.db");
        std::fs::write(&p, content).unwrap();
        let d = SimDisk::new();
        let id = d.file_id(&p, FileKind::MainDb);
        (d, id, p)
    }

    #[test]
    fn synced_writes_survive_power_loss_exactly() {
        let t = tempfile::tempdir().unwrap();
        let (d, id, p) = disk_with_file(t.path(), &[1u8; 2048]);
        d.write(id, 100, &[9u8; 1000]).unwrap();
        d.sync(id).unwrap();
        d.synced(id);
        for seed in 0..20 {
            d.power_loss(&mut SimRng::new(seed));
            let got = std::fs::read(&p).unwrap();
            let mut want = vec![1u8; 2048];
            want[100..1100].fill(9);
            assert_eq!(got, want);
        }
    }

    #[test]
    fn unsynced_writes_are_applied_dropped_or_torn_per_sector_and_only_inside_the_write() {
        let t = tempfile::tempdir().unwrap();
        let mut outcomes = BTreeSet::new();
        let mut sector_kinds = BTreeSet::new();
        for seed in 0..200 {
            let (d, id, p) = disk_with_file(t.path(), &[1u8; 4096]);
            // Unaligned: partial first and last sectors.
            d.write(id, 300, &[9u8; 2000]).unwrap();
            let rep = d.power_loss(&mut SimRng::new(seed));
            outcomes.insert((rep.applied, rep.dropped, rep.torn));
            let got = std::fs::read(&p).unwrap();
            assert_eq!(got.len(), 4096);
            assert!(
                got[..300].iter().all(|&b| b == 1),
                "outside the write: untouched"
            );
            assert!(
                got[2300..].iter().all(|&b| b == 1),
                "outside the write: untouched"
            );
            // Each sector-chunk of the write is all new, all old, or (torn) anything.
            let chunks = [
                (300usize, 512usize),
                (512, 1024),
                (1024, 1536),
                (1536, 2048),
                (2048, 2300),
            ];
            for (a, b) in chunks {
                let c = &got[a..b];
                let kind = if c.iter().all(|&x| x == 9) {
                    "new"
                } else if c.iter().all(|&x| x == 1) {
                    "old"
                } else {
                    "garbage"
                };
                sector_kinds.insert(kind);
            }
            if rep.applied == 1 {
                assert!(got[300..2300].iter().all(|&b| b == 9));
            }
            if rep.dropped == 1 {
                assert!(got.iter().all(|&b| b == 1));
            }
        }
        assert_eq!(
            outcomes.len(),
            3,
            "applied, dropped and torn all happen: {outcomes:?}"
        );
        assert_eq!(sector_kinds.len(), 3, "{sector_kinds:?}");
    }

    #[test]
    fn same_seed_same_image() {
        let t = tempfile::tempdir().unwrap();
        let mut images = Vec::new();
        for _ in 0..2 {
            let (d, id, p) = disk_with_file(t.path(), &[0u8; 8192]);
            for i in 0..8u64 {
                d.write(id, i * 1000, &[i as u8 + 1; 700]).unwrap();
            }
            d.truncate(id, 6000).unwrap();
            d.power_loss(&mut SimRng::new(77));
            images.push(std::fs::read(&p).unwrap());
        }
        assert_eq!(images[0], images[1]);
    }

    #[test]
    fn crash_point_stops_every_mutation_and_faults_fire_once() {
        let t = tempfile::tempdir().unwrap();
        let (d, id, _p) = disk_with_file(t.path(), &[0u8; 1024]);
        d.inject_fault(OpClass::Write, 2, FaultErrno::Enospc);
        assert!(d.write(id, 0, b"a").is_ok());
        assert_eq!(d.write(id, 0, b"b"), Err((ffi::SQLITE_FULL, libc::ENOSPC)));
        assert!(d.write(id, 0, b"c").is_ok());
        assert_eq!(d.fired().len(), 1);
        d.crash_at(2);
        assert!(d.sync(id).is_ok());
        assert!(d.truncate(id, 0).is_err());
        assert!(d.write(id, 0, b"d").is_err());
        assert!(d.sync(id).is_err());
        assert!(d.crashed());
    }

    #[test]
    fn a_new_file_whose_directory_was_never_synced_may_vanish() {
        let t = tempfile::tempdir().unwrap();
        let mut vanished = 0;
        for seed in 0..40 {
            let d = SimDisk::new();
            let p = t.path().join("new-wal");
            let _ = std::fs::remove_file(&p);
            let id = d.file_id(&p, FileKind::Wal);
            std::fs::write(&p, b"x").unwrap();
            d.write(id, 0, b"x").unwrap();
            d.synced(id); // file data synced, directory not
            let rep = d.power_loss(&mut SimRng::new(seed));
            vanished += rep.vanished;
            assert_eq!(p.exists(), rep.vanished == 0);
        }
        assert!(vanished > 0 && vanished < 40);
    }
}
