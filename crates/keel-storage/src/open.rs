//! The open pipeline: prepare → sync_wal → recover → checkpoint → schema → ready.

use std::io::Read;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{mpsc, Arc};
use std::time::{Instant, SystemTime, UNIX_EPOCH};

use rusqlite::config::DbConfig;
use rusqlite::types::Value;
use rusqlite::OpenFlags;

use crate::checkpointer::{checkpoint_on_writer, CkptCtx, CkptSignal};
use crate::conn::{open_conn, KConn, Reopen, Role};
use crate::durable::{self, start_threads, Gate, Parked, Wait};
use crate::encryption::{is_sqlcipher_reserve, looks_encrypted, Cipher};
use crate::error::{Error, PathScope, Result};
use crate::identity::{check_at_open, create_private_dirs, stamp_if_needed};
use crate::oneshot;
use crate::options::{
    ConnectionInit, Milestone, OpenPhase, OpenProgress, SchemaCtx, SchemaHook, StoreOptions,
};
use crate::park::Suspension;
use crate::paths::{uri_path, wal_path};
use crate::policy::{FileKind, ReasonScope, SyncPolicy, SyncReason};
use crate::readers::ReaderPool;
use crate::report::{OpenReport, PhaseReport};
use crate::rotate::{self, FileGuard};
use crate::stats::Counters;
use crate::store::{Inner, OpenFuture, Store};
use crate::vfs::{sync_dir, sync_file, VfsRegistration, VfsShared};
use crate::writer::{QueueGauge, WriterCtx, WriterShared};

const SQLITE_MAGIC: &[u8; 16] = b"SQLite format 3\0";

fn sibling(path: &Path, suffix: &str) -> PathBuf {
    let mut s = path.as_os_str().to_owned();
    s.push(suffix);
    PathBuf::from(s)
}

/// Run the whole pipeline, with the opt-in move-aside retry. `on_readable` gets the
/// store as soon as it is readable; the function returns when the store is durable
/// (or the barrier failed: then the store, readable, says so through
/// [`Store::durable`]).
pub(crate) fn open_store(
    path: &Path,
    mut opts: StoreOptions,
    cancelled: &dyn Fn() -> bool,
    on_readable: &dyn Fn(&Store),
) -> Result<Store> {
    let path = if path.is_absolute() {
        path.to_path_buf()
    } else {
        std::env::current_dir()
            .map_err(|e| Error::io("resolve current directory", path, e))?
            .join(path)
    };
    let _scope = PathScope::enter(&path);
    let span = tracing::info_span!("keel.open", path = %path.display());
    let _e = span.enter();
    let mut hook = opts.schema_hook.take();
    // A rotation interrupted by a crash is settled before the key is asked for:
    // which key opens the file depends on it.
    rotate::recover(&path)?;
    let cipher = obtain_key(&path, &opts)?;
    let once = |hook: &mut Option<SchemaHook>, moved| {
        open_once(
            &path,
            &opts,
            hook,
            cancelled,
            moved,
            cipher.clone(),
            on_readable,
        )
    };
    match once(&mut hook, None) {
        Err(e) if e.is_bad_file() && opts.recover_corrupt => {
            tracing::warn!(error = %e, "bad database file; moving it aside (recover_corrupt)");
            let moved = move_aside(&path)?;
            once(&mut hook, Some(moved))
        }
        r => r,
    }
}

/// The data key of an encrypted store, asked of its provider once per open, before
/// any file is created or read: a provider that has no key leaves no trace.
#[cfg(feature = "encryption-api")]
fn obtain_key(path: &Path, opts: &StoreOptions) -> Result<Option<Arc<Cipher>>> {
    match &opts.encryption {
        Some(provider) => Ok(Some(Arc::new(Cipher::obtain(
            provider.as_ref(),
            path,
            opts.plaintext_header,
        )?))),
        None => Ok(None),
    }
}

/// Without the `encryption` feature no store is encrypted.
#[cfg(not(feature = "encryption-api"))]
fn obtain_key(_: &Path, _: &StoreOptions) -> Result<Option<Arc<Cipher>>> {
    Ok(None)
}

/// The constructors of [`Store`]: they run the pipeline above, which builds the
/// store, so they live here rather than in `store.rs` (the handle and what it
/// does), keeping the dependency one way: `open` → `store`.
impl Store {
    /// Open (or create) a store, blocking the calling thread through the whole open
    /// pipeline (including any slow sync): it returns when the store is
    /// [durable](crate::options::Milestone::Durable). If the open barrier fails the store is
    /// closed and the barrier's error returned. Prefer [`Store::open_async`] on UI
    /// threads.
    ///
    /// ```
    /// # use keel_storage::{Store, StoreOptions};
    /// # let dir = tempfile::tempdir().unwrap();
    /// let store = Store::open(dir.path().join("a.db"), StoreOptions::default())?;
    /// assert!(store.open_report().created);
    /// # Ok::<(), keel_storage::Error>(())
    /// ```
    pub fn open(path: impl AsRef<Path>, options: StoreOptions) -> Result<Store> {
        let store = open_store(path.as_ref(), options, &|| false, &|_| {})?;
        match store.gate().wait(Some(std::time::Duration::ZERO)) {
            Wait::Failed(e) => {
                let _ = store.close();
                Err(e)
            }
            Wait::Durable | Wait::TimedOut => Ok(store),
        }
    }

    /// Start opening a store on a keel-owned thread and return at once. The future
    /// resolves when the store is **readable** ([`Milestone::Readable`](crate::options::Milestone)):
    /// reads, snapshots and subscriptions work at once, even while the open barrier
    /// (the sync of a WAL a previous run left, seconds under `F_FULLFSYNC`) still
    /// runs. Writes submitted meanwhile are queued and commit after it; await
    /// [`Store::durable`] to know when. Progress events go to
    /// [`StoreOptions::progress`], the last one (`Durable`) possibly after the
    /// future resolved. Works with or without an async runtime.
    ///
    /// ```
    /// # use keel_storage::{Store, StoreOptions};
    /// # let dir = tempfile::tempdir().unwrap();
    /// let fut = Store::open_async(dir.path().join("a.db"), StoreOptions::default());
    /// // … the caller keeps running …
    /// let store = futures::executor::block_on(fut)?;
    /// # Ok::<(), keel_storage::Error>(())
    /// ```
    pub fn open_async(path: impl AsRef<Path>, options: StoreOptions) -> OpenFuture {
        let path = path.as_ref().to_path_buf();
        let (tx, rx) = oneshot::channel::<Result<Store>>();
        let p2 = path.clone();
        let spawned = std::thread::Builder::new()
            .name("keel-open".into())
            .spawn(move || {
                let tx = std::sync::Mutex::new(Some(tx));
                let cancelled = || lock_sender(&tx).as_ref().is_some_and(|t| t.is_cancelled());
                // The future resolves at readable; this thread goes on to durable.
                let deliver = |r: Result<Store>| match lock_sender(&tx).take() {
                    Some(t) => t.send(r).is_ok(),
                    None => true,
                };
                let r = open_store(&p2, options, &cancelled, &|s: &Store| {
                    deliver(Ok(s.clone()));
                });
                match r {
                    Err(e) => {
                        deliver(Err(e));
                    }
                    Ok(store) => {
                        // Delivered at readable already (a no-op then). If the future
                        // is gone, this is the last handle: dropping it closes the
                        // store (threads joined) before this thread exits.
                        deliver(Ok(store.clone()));
                        drop(store);
                    }
                }
            });
        if let Err(e) = spawned {
            let (tx, rx) = oneshot::channel();
            let _ = tx.send(Err(Error::io("spawn open thread", &path, e)));
            return OpenFuture { rx, path };
        }
        OpenFuture { rx, path }
    }
}

fn lock_sender<T>(m: &std::sync::Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// UTC `YYYYMMDDTHHMMSSZ` without a date crate.
fn utc_stamp() -> String {
    let secs = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0);
    let days = i64::try_from(secs / 86_400).unwrap_or(0);
    let rem = secs % 86_400;
    // Howard Hinnant's civil_from_days.
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    format!(
        "{y:04}{m:02}{d:02}T{:02}{:02}{:02}Z",
        rem / 3600,
        (rem / 60) % 60,
        rem % 60
    )
}

/// Move `<db>`, `<db>-wal`, `<db>-shm`, `<db>-journal` to `<db>.corrupt-<stamp>[-n]…`
/// (the side files keep their suffix so the moved copy can still be opened).
fn move_aside(path: &Path) -> Result<PathBuf> {
    let stamp = utc_stamp();
    let mut n = 0u32;
    let target = loop {
        let base = if n == 0 {
            sibling(path, &format!(".corrupt-{stamp}"))
        } else {
            sibling(path, &format!(".corrupt-{stamp}-{n}"))
        };
        if !base.exists() {
            break base;
        }
        n += 1;
    };
    for suffix in ["-wal", "-shm", "-journal"] {
        let from = sibling(path, suffix);
        if from.exists() {
            let to = sibling(&target, suffix);
            std::fs::rename(&from, &to).map_err(|e| Error::io("move bad file aside", &from, e))?;
        }
    }
    std::fs::rename(path, &target).map_err(|e| Error::io("move bad file aside", path, e))?;
    // The renames live in the directory: `open_once` syncs it (under the open
    // barrier's policy, counted in `IoStats::dir_syncs`) before anything is created.
    tracing::warn!(from = %path.display(), to = %target.display(), "moved bad database aside");
    Ok(target)
}

struct Pipeline<'a> {
    t0: Instant,
    report: OpenReport,
    counters: &'a Counters,
    opts: &'a StoreOptions,
    cancelled: &'a dyn Fn() -> bool,
}

impl Pipeline<'_> {
    /// Check for cancellation and announce phase `p`.
    fn starting(&self, p: OpenPhase) -> Result<()> {
        if (self.cancelled)() {
            return Err(Error::Cancelled {
                op: "open (future dropped)",
                path: self.report.path.clone(),
            });
        }
        emit(
            self.opts,
            OpenProgress {
                phase: p,
                fraction: p.index() as f32 / OpenPhase::ALL.len() as f32,
                done: false,
                milestone: None,
            },
        );
        Ok(())
    }

    /// Syncs so far that were not the barrier's.
    fn phase_syncs(&self) -> u64 {
        self.counters
            .total_syncs()
            .saturating_sub(self.counters.barrier_syncs())
    }

    fn phase<T>(&mut self, p: OpenPhase, f: impl FnOnce(&mut String) -> Result<T>) -> Result<T> {
        self.starting(p)?;
        let span = tracing::info_span!("keel.open.phase", phase = p.name());
        let _e = span.enter();
        // The barrier's sync runs on its own thread: not this phase's. (The two
        // counters are read one after the other while that thread may count: never
        // let a sync landing in between underflow the difference.)
        let syncs = self.phase_syncs();
        let start = Instant::now();
        let mut note = String::new();
        let r = f(&mut note);
        let duration = start.elapsed();
        let syncs = self.phase_syncs().saturating_sub(syncs);
        tracing::info!(ms = duration.as_secs_f64() * 1e3, syncs, note = %note, "phase done");
        self.report.phases.push(PhaseReport {
            phase: p,
            duration,
            syncs,
            note,
        });
        r
    }
}

struct FileCheck {
    created: bool,
    wal_bytes: u64,
}

/// Header / size sanity checks on an existing file; creates a new one with mode 0600.
fn check_file(path: &Path, cipher: Option<&Cipher>) -> Result<FileCheck> {
    let op = "check database file";
    if let Some(parent) = path.parent() {
        if !parent.as_os_str().is_empty() {
            create_private_dirs(parent)
                .map_err(|e| Error::io("create database directory", parent, e))?;
        }
    }
    let wal = wal_path(path);
    let wal_bytes = std::fs::metadata(&wal).map(|m| m.len()).unwrap_or(0);
    let meta = match std::fs::metadata(path) {
        Ok(m) => Some(m),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => None,
        Err(e) => return Err(Error::io(op, path, e)),
    };
    let Some(meta) = meta else {
        let mut o = std::fs::OpenOptions::new();
        o.write(true).create_new(true);
        #[cfg(unix)]
        std::os::unix::fs::OpenOptionsExt::mode(&mut o, 0o600);
        match o.open(path) {
            // open(2) applies the umask to 0600; set it exactly (a umask can only
            // clear bits, so this never widens what was asked for).
            #[cfg(unix)]
            Ok(f) => f
                .set_permissions(std::os::unix::fs::PermissionsExt::from_mode(0o600))
                .map_err(|e| Error::io("set database file mode", path, e))?,
            #[cfg(not(unix))]
            Ok(_) => {}
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
            Err(e) => return Err(Error::io("create database file", path, e)),
        }
        return Ok(FileCheck {
            created: true,
            wal_bytes,
        });
    };
    if meta.is_dir() {
        return Err(Error::io(
            op,
            path,
            std::io::Error::from_raw_os_error(libc::EISDIR),
        ));
    }
    let mut f = std::fs::File::open(path)
        .map_err(|e| Error::io("open database file for reading", path, e))?;
    let len = meta.len();
    if len == 0 {
        // An empty file is a new database, unless a WAL holds its first pages
        // (a first session that never checkpointed).
        return Ok(FileCheck {
            created: wal_bytes == 0,
            wal_bytes,
        });
    }
    let mut header = [0u8; 100];
    let n =
        read_up_to(&mut f, &mut header).map_err(|e| Error::io("read database header", path, e))?;
    if let Some(cipher) = cipher {
        // An encrypted header cannot be read without the key: a plaintext file is
        // refused here, the rest is SQLCipher's to judge at the first read.
        cipher.check_header(path, &header[..n])?;
        return Ok(FileCheck {
            created: false,
            wal_bytes,
        });
    }
    // A power loss in the middle of a checkpoint can leave page 1 of the database file
    // torn; the WAL still holds it and SQLite's recovery reads it from there. So with a
    // valid WAL, a bad header is SQLite's to judge (it reports NOTADB/CORRUPT itself).
    // Found by the crash campaign (torn sectors, as SQLite's test6.c models them).
    let header_ok = n >= 100
        && &header[..16] == SQLITE_MAGIC
        && matches!(
            u16::from_be_bytes([header[16], header[17]]),
            1 | 512..=32_768
        )
        && u16::from_be_bytes([header[16], header[17]]).is_power_of_two();
    // Without a key SQLite would read an encrypted file as garbage, and with a WAL
    // beside it would even check that WAL in: say what it is before SQLite sees it,
    // so nothing changes and `recover_corrupt` never moves it aside. The
    // plaintext-header layout says so exactly (byte 20). Without it, ciphertext
    // cannot be told from noise by itself, so the file counts as encrypted only
    // with an SQLCipher WAL beside it (a valid WAL whose page-1 images are not
    // plaintext): a lone file of noise stays a bad file, as it always was.
    let sqlcipher_reserve = n >= 21 && header_ok && is_sqlcipher_reserve(header[20]);
    let wal_page = (!header_ok && wal_bytes >= 32)
        .then(|| wal_header_page_size(&wal))
        .flatten();
    let encrypted = if sqlcipher_reserve {
        looks_encrypted(path)
    } else if let Some(page_size) = wal_page {
        looks_encrypted(path) && !wal_holds_plaintext_page1(&wal, page_size)
    } else {
        false
    };
    if encrypted {
        return Err(Error::KeyRequired {
            op: "read database header",
            path: path.to_path_buf(),
        });
    }
    if !header_ok && wal_bytes >= 32 && wal_header_page_size(&wal).is_some() {
        tracing::warn!(
            wal_bytes,
            "database header unreadable but a WAL is present; leaving it to SQLite's recovery"
        );
        return Ok(FileCheck {
            created: false,
            wal_bytes,
        });
    }
    if n < 16 || &header[..16] != SQLITE_MAGIC {
        return Err(Error::NotADatabase {
            op: "read database header",
            path: path.to_path_buf(),
        });
    }
    if n < 100 {
        return Err(Error::Corrupt {
            op: "read database header",
            path: path.to_path_buf(),
            detail: format!("truncated: the file is {len} bytes, shorter than the 100-byte header"),
        });
    }
    let raw_ps = u32::from(u16::from_be_bytes([header[16], header[17]]));
    let page_size: u64 = if raw_ps == 1 {
        65_536
    } else {
        u64::from(raw_ps)
    };
    if !(512..=65_536).contains(&page_size) || !page_size.is_power_of_two() {
        return Err(Error::Corrupt {
            op: "read database header",
            path: path.to_path_buf(),
            detail: format!("invalid page size {raw_ps}"),
        });
    }
    let change = &header[24..28];
    let valid_for = &header[92..96];
    let pages = u64::from(u32::from_be_bytes([
        header[28], header[29], header[30], header[31],
    ]));
    // The in-header page count is valid only if "version-valid-for" matches the change
    // counter. With a non-empty WAL the file may legitimately be short (a checkpoint
    // interrupted by a crash is redone from the WAL), so only check without one.
    if change == valid_for && pages > 0 && wal_bytes == 0 && pages * page_size > len {
        return Err(Error::Corrupt {
            op: "check database size",
            path: path.to_path_buf(),
            detail: format!(
                "truncated: the header says {pages} pages of {page_size} bytes ({} bytes), the file has {len} bytes",
                pages * page_size
            ),
        });
    }
    if len % page_size != 0 && wal_bytes == 0 {
        tracing::warn!(
            len,
            page_size,
            "database size is not a multiple of the page size"
        );
    }
    Ok(FileCheck {
        created: false,
        wal_bytes,
    })
}

fn read_up_to(f: &mut std::fs::File, buf: &mut [u8]) -> std::io::Result<usize> {
    let mut n = 0;
    while n < buf.len() {
        match f.read(&mut buf[n..]) {
            Ok(0) => break,
            Ok(k) => n += k,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(n)
}

fn wal_header_page_size(wal: &Path) -> Option<u64> {
    let mut f = std::fs::File::open(wal).ok()?;
    let mut h = [0u8; 32];
    if read_up_to(&mut f, &mut h).ok()? < 32 {
        return None;
    }
    let magic = u32::from_be_bytes([h[0], h[1], h[2], h[3]]);
    if magic & !1 != 0x377f_0682 {
        return None;
    }
    let ps = u64::from(u32::from_be_bytes([h[8], h[9], h[10], h[11]]));
    (512..=65_536).contains(&ps).then_some(ps)
}

/// Whether a frame of `wal` holds page 1 in plaintext (it starts with the SQLite
/// magic): then the WAL is a plaintext database's, whose page 1 in the file is
/// torn, not encrypted. Reads frame headers only, and at most 100,000 of them.
fn wal_holds_plaintext_page1(wal: &Path, page_size: u64) -> bool {
    use std::io::{Seek, SeekFrom};
    let Ok(mut f) = std::fs::File::open(wal) else {
        return false;
    };
    let frame = 24 + page_size;
    let mut at = 32u64;
    for _ in 0..100_000 {
        let mut head = [0u8; 24 + 16];
        if f.seek(SeekFrom::Start(at)).is_err() || read_up_to(&mut f, &mut head).ok() != Some(40) {
            return false;
        }
        if u32::from_be_bytes([head[0], head[1], head[2], head[3]]) == 1
            && &head[24..] == SQLITE_MAGIC
        {
            return true;
        }
        at += frame;
    }
    false
}

fn pragma(conn: &rusqlite::Connection, path: &Path, op: &'static str, sql: &str) -> Result<()> {
    conn.execute_batch(sql)
        .map_err(|e| Error::sqlite(op, path, e))
}

fn open_once(
    path: &Path,
    opts: &StoreOptions,
    hook: &mut Option<SchemaHook>,
    cancelled: &dyn Fn() -> bool,
    moved_aside: Option<PathBuf>,
    cipher: Option<Arc<Cipher>>,
    on_readable: &dyn Fn(&Store),
) -> Result<Store> {
    let encrypted = cipher.is_some();
    let shared = Arc::new(VfsShared::new(path, opts, cipher));
    if moved_aside.is_some() {
        // Without this sync a power loss could bring the bad file back under the
        // database's name, or lose the moved copy.
        if let Some(dir) = path.parent() {
            sync_dir(&shared, SyncReason::OpenBarrier, dir)
                .map_err(|e| Error::io("sync directory after moving a bad file aside", dir, e))?;
        }
    }
    let mut pl = Pipeline {
        t0: Instant::now(),
        report: OpenReport {
            path: path.to_path_buf(),
            moved_aside,
            ..OpenReport::default()
        },
        counters: &shared.counters,
        opts,
        cancelled,
    };
    let wal = wal_path(path);

    // 1. prepare
    let (check, vfs, writer, guard) = pl.phase(OpenPhase::Prepare, |note| {
        let cipher = shared.cipher();
        let check = check_file(path, cipher.as_deref())?;
        // The file the name holds before any connection opens it (rotate.rs).
        let guard = Arc::new(FileGuard::at_open(path));
        // The identity check reads the header and the WAL's page-1 images, which
        // are encrypted in an encrypted store (see docs/encryption.md).
        if opts.keel_identity && !check.created && !encrypted {
            check_at_open(path, &wal, opts.adopt_foreign)?;
        }
        let vfs = VfsRegistration::register(Arc::clone(&shared))
            .map_err(|e| Error::io("register keel VFS", path, e))?;
        // The file alone judges the key first: page 1 authenticating under it
        // proves it right, and tells which page HMAC the file has, with no
        // connection. Anything else goes to a connection that never creates
        // or changes a file: with a WAL beside the file the writer would check
        // that WAL in (and make a wal-index) before the first page failed, and
        // so it would without one, keyed with the other page HMAC than the
        // file's (a wrong key cannot tell which the file has).
        let verified = match cipher.as_deref() {
            Some(cipher) if !check.created => verify_key_in_file(path, cipher)?,
            _ => true,
        };
        let writer = open_conn(path, &vfs, Role::Writer, None)?;
        if !verified {
            verify_key(&writer.conn, path)?;
        }
        writer
            .conn
            .busy_timeout(opts.busy_timeout)
            .map_err(|e| Error::sqlite("set busy timeout", path, e))?;
        *note = if check.created {
            "new database (mode 0600)".into()
        } else {
            format!("existing database, vfs {}", vfs.name())
        };
        Ok((check, vfs, writer, guard))
    })?;
    pl.report.created = check.created;
    pl.report.wal_bytes_at_open = check.wal_bytes;
    // A WAL left by a previous run must be synced before anything is written on top
    // of it, but not before it is read: its commits were already visible to the
    // previous run. So the barrier runs on its own thread while recovery goes on here.
    let parallel = check.wal_bytes > 0;

    std::thread::scope(|scope| {
        // 2. sync_wal
        let barrier = if parallel {
            pl.starting(OpenPhase::SyncWal)?;
            let (sh, wal2, policy) = (
                Arc::clone(&shared),
                wal.clone(),
                opts.sync.open_barrier.clone(),
            );
            let wal_bytes = check.wal_bytes;
            let h = std::thread::Builder::new()
                .name("keel-barrier".into())
                .spawn_scoped(scope, move || {
                    run_barrier(&sh, path, &wal2, wal_bytes, &policy)
                })
                .map_err(|e| Error::io("spawn the open barrier thread", path, e))?;
            Some(h)
        } else {
            pl.phase(OpenPhase::SyncWal, |note| {
                *note = "no WAL to sync".into();
                Ok(())
            })?;
            None
        };
        let join = |h: std::thread::ScopedJoinHandle<'_, (Result<()>, PhaseReport)>| {
            h.join().unwrap_or_else(|p| {
                (
                    Err(Error::panicked("open barrier", path, p)),
                    PhaseReport {
                        phase: OpenPhase::SyncWal,
                        duration: Default::default(),
                        syncs: 0,
                        note: "panicked".into(),
                    },
                )
            })
        };
        // 3.–6.: readable.
        let store = match readable(&mut pl, &shared, &check, vfs, writer, guard, hook, parallel) {
            Ok(s) => s,
            Err(e) => {
                if let Some(h) = barrier {
                    // The sync cannot be interrupted; wait so nothing outlives the open.
                    let _ = join(h);
                }
                return Err(e);
            }
        };
        #[cfg(feature = "encryption-api")]
        store.set_key_provider(opts.encryption.clone());
        on_readable(&store);
        // Durable.
        if let Some(h) = barrier {
            let (r, line) = join(h);
            let _ = store.gate().finish(r, Some(line));
        }
        Ok(store)
    })
}

/// Check the key on the database file alone, before SQLite opens its WAL: its
/// pages' HMACs first (no page authenticating anywhere is a wrong key), then, when
/// page 1 fails but another page passes, an `immutable` read-only connection,
/// which neither takes locks nor opens the `-wal` and `-shm` files, so a wrong key
/// leaves no trace (not even the wal-index). A page that does not decrypt reads as
/// "not a database", which here means a wrong key.
/// `Ok(false)` when the file alone cannot say (shorter than a page, its pages
/// still in the WAL only; or page 1 unreadable beside a valid WAL): then
/// [`verify_key`] judges on the writer, through the WAL.
fn verify_key_in_file(path: &Path, cipher: &Cipher) -> Result<bool> {
    let op = "verify the data key";
    let len = std::fs::metadata(path).map_or(0, |m| m.len());
    if len < 512 {
        return Ok(false);
    }
    // The common case needs no connection: page 1 authenticates under the key
    // (SQLCipher's own HMAC check, made here). Anything else — a torn page 1,
    // a wrong key — is SQLCipher's to judge below.
    let mut page = vec![0u8; 4096];
    let read = std::fs::File::open(path).and_then(|mut f| f.read_exact(&mut page));
    if read.is_ok() && cipher.authenticates_page1(&page) {
        return Ok(true);
    }
    // SQLCipher below must be keyed with the file's page HMAC: keyed with the
    // other one, a wrong key can read as right. A page that authenticates
    // anywhere (page 1 torn, the rest whole or in the WAL) names it and proves
    // the key right; none anywhere, in a file of whole pages, is a wrong key.
    if !cipher.learn_page_mac(path) {
        if len < 4096 {
            return Ok(false);
        }
        return Err(Error::WrongKey {
            op,
            path: path.to_path_buf(),
        });
    }
    let open = || -> Result<rusqlite::Connection> {
        let uri = format!("file:{}?immutable=1", uri_path(path));
        let flags = OpenFlags::SQLITE_OPEN_READ_ONLY
            | OpenFlags::SQLITE_OPEN_URI
            | OpenFlags::SQLITE_OPEN_NO_MUTEX;
        let c = rusqlite::Connection::open_with_flags(&uri, flags)
            .map_err(|e| Error::sqlite(op, path, e))?;
        cipher.apply(&c).map_err(|e| Error::sqlite(op, path, e))?;
        Ok(c)
    };
    let c = open()?;
    match c.query_row("SELECT count(*) FROM sqlite_schema", [], |r| {
        r.get::<_, i64>(0)
    }) {
        // A power loss mid-checkpoint can tear page 1 in the file while the WAL
        // still holds it whole (found by the encrypted crash campaign). A wrong
        // key fails every page's HMAC, a torn page 1 only its own: if another
        // page of the file passes, the key is right and the writer reads page 1
        // through the WAL.
        Err(e) if e.sqlite_error_code() == Some(rusqlite::ErrorCode::NotADatabase) => {
            drop(c);
            let c = open()?;
            let failing: Vec<String> = {
                let mut st = c
                    .prepare("PRAGMA cipher_integrity_check")
                    .map_err(|e| Error::sqlite(op, path, e))?;
                let rows = st
                    .query_map([], |r| r.get::<_, String>(0))
                    .map_err(|e| Error::sqlite(op, path, e))?;
                rows.filter_map(|r| r.ok()).collect()
            };
            let pages = len / 4096;
            let wal = wal_path(path);
            if pages > 1 && (failing.len() as u64) < pages && wal_header_page_size(&wal).is_some() {
                return Ok(false);
            }
            // A power loss in a checkpoint of a small file can tear every page
            // it copied, each one's HMAC failing, while the WAL holds them all
            // whole (found by the full encrypted campaign, a 4-page file): the
            // writer judges through the WAL.
            if !failing.is_empty() && failing_pages_torn_from_wal(&failing, path, &wal) {
                return Ok(false);
            }
            Err(Error::WrongKey {
                op,
                path: path.to_path_buf(),
            })
        }
        // Page 1 decrypted and passed its HMAC: the key is right. (A schema
        // spread over later pages that the WAL changed may read oddly from the
        // file alone; the real open reads it through the WAL.)
        _ => Ok(true),
    }
}

/// Whether every page `cipher_integrity_check` named ("HMAC verification failed
/// for page N") is a torn copy of one of its WAL frames: it shares at least one
/// whole 512-byte sector with a frame of the same page (salts matching the WAL
/// header). A checkpoint torn by a power loss leaves exactly that: some sectors
/// of the frame landed, the rest are the page's old bytes. A file under another
/// key shares no sector with the WAL's frames (SQLCipher writes every page with
/// a fresh random IV), so it is still `WrongKey` from the file alone, leaving no
/// trace. `false` for a line that names no page.
fn failing_pages_torn_from_wal(failing: &[String], path: &Path, wal: &Path) -> bool {
    const SECTOR: usize = 512;
    let Some(ps) = wal_header_page_size(wal) else {
        return false;
    };
    let ps = ps as usize;
    let (Ok(file), Ok(log)) = (std::fs::read(path), std::fs::read(wal)) else {
        return false;
    };
    let be = |b: &[u8]| u32::from_be_bytes([b[0], b[1], b[2], b[3]]);
    let salts = &log[16..24];
    let frames: Vec<(u32, &[u8])> = log[32..]
        .chunks_exact(24 + ps)
        .filter(|f| &f[8..16] == salts)
        .map(|f| (be(&f[0..4]), &f[24..]))
        .collect();
    failing.iter().all(|line| {
        let Some(n) = line
            .strip_prefix("HMAC verification failed for page ")
            .and_then(|n| n.trim().parse::<usize>().ok())
            .filter(|n| *n >= 1)
        else {
            return false;
        };
        let Some(page) = file.get((n - 1) * ps..n * ps) else {
            return false;
        };
        frames
            .iter()
            .filter(|(p, _)| *p as usize == n)
            .any(|(_, image)| {
                page.chunks_exact(SECTOR)
                    .zip(image.chunks_exact(SECTOR))
                    .any(|(a, b)| a == b)
            })
    })
}

/// Read the schema with the key applied, before anything else touches the file:
/// SQLCipher reports a page that does not decrypt as "not a database", which here
/// means the key is wrong. Until the key is known to be right, closing the
/// connection must not checkpoint: SQLite would copy the WAL's frames into the file.
fn verify_key(c: &rusqlite::Connection, path: &Path) -> Result<()> {
    let op = "verify the data key";
    let no_checkpoint = |on| {
        c.set_db_config(DbConfig::SQLITE_DBCONFIG_NO_CKPT_ON_CLOSE, on)
            .map_err(|e| Error::sqlite(op, path, e))
    };
    no_checkpoint(true)?;
    match c.query_row("SELECT count(*) FROM sqlite_schema", [], |r| {
        r.get::<_, i64>(0)
    }) {
        Ok(_) => no_checkpoint(false).map(|_| ()),
        Err(e) if e.sqlite_error_code() == Some(rusqlite::ErrorCode::NotADatabase) => {
            Err(Error::WrongKey {
                op,
                path: path.to_path_buf(),
            })
        }
        Err(e) => Err(Error::sqlite(op, path, e)),
    }
}

/// Sync `wal` through the open-barrier policy (`op` names the open for errors);
/// what [`sync_file`] returns.
fn sync_wal_for_barrier(
    shared: &VfsShared,
    path: &Path,
    wal: &Path,
    op: &'static str,
) -> Result<bool> {
    let f = match std::fs::OpenOptions::new().read(true).write(true).open(wal) {
        Ok(f) => f,
        // Another process's last connection closed between the size check and
        // here: SQLite checkpointed the WAL into the file, synced it and removed
        // the WAL, so nothing is left to make durable.
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(false),
        Err(e) => return Err(Error::io(op, wal, e)),
    };
    sync_file(shared, FileKind::Wal, SyncReason::OpenBarrier, &f).map_err(|e| Error::SyncFailed {
        kind: FileKind::Wal,
        reason: SyncReason::OpenBarrier,
        path: path.to_path_buf(),
        source: Arc::new(e),
    })
}

/// The open barrier: sync the WAL a previous run left, through the open-barrier
/// policy. Runs on `keel-barrier`, in parallel with recovery.
fn run_barrier(
    shared: &VfsShared,
    path: &Path,
    wal: &Path,
    wal_bytes: u64,
    policy: &SyncPolicy,
) -> (Result<()>, PhaseReport) {
    let _scope = PathScope::enter(path);
    let span = tracing::info_span!("keel.open.phase", phase = OpenPhase::SyncWal.name());
    let _e = span.enter();
    let start = Instant::now();
    let syncs0 = shared.counters.barrier_syncs();
    let mut note = String::new();
    let r = (|| {
        let issued = sync_wal_for_barrier(shared, path, wal, "open WAL for the open barrier")?;
        // The WAL's creator may have died before syncing its directory entry (a
        // WAL is only dir-synced at its first sync): make the entry durable too,
        // or a power loss after recovery could take the whole WAL away.
        if let Some(dir) = wal.parent() {
            sync_dir(shared, SyncReason::OpenBarrier, dir).map_err(|e| Error::SyncFailed {
                kind: FileKind::Wal,
                reason: SyncReason::OpenBarrier,
                path: path.to_path_buf(),
                source: Arc::new(e),
            })?;
        }
        note = format!(
            "{} bytes, policy {:?}{}, in parallel with recovery",
            wal_bytes,
            policy,
            if issued { "" } else { " (no sync issued)" }
        );
        Ok(())
    })();
    if let Err(e) = &r {
        note = format!("failed: {e}");
    }
    let duration = start.elapsed();
    let syncs = shared.counters.barrier_syncs().saturating_sub(syncs0);
    tracing::info!(ms = duration.as_secs_f64() * 1e3, syncs, note = %note, "phase done");
    (
        r,
        PhaseReport {
            phase: OpenPhase::SyncWal,
            duration,
            syncs,
            note,
        },
    )
}

/// Phases 3–6 (recover, checkpoint, schema, ready): the store is readable at the
/// end. With `parallel` (the barrier still running) the schema transaction stays
/// open and the writer and checkpointer stay parked until durable.
#[allow(clippy::too_many_arguments)] // the parts the prepare phase made, each once
fn readable(
    pl: &mut Pipeline<'_>,
    shared: &Arc<VfsShared>,
    check: &FileCheck,
    vfs: Arc<VfsRegistration>,
    writer: KConn,
    guard: Arc<FileGuard>,
    hook: &mut Option<SchemaHook>,
    parallel: bool,
) -> Result<Store> {
    let opts = pl.opts;
    let path = pl.report.path.clone();
    let path = path.as_path();
    let wal = wal_path(path);
    let init = opts.connection_init.as_ref();
    let over_threshold = check.wal_bytes > opts.checkpoint_threshold_bytes;

    // 3. recover
    let wal_frames = Arc::new(AtomicU64::new(0));
    let page_size = pl.phase(OpenPhase::Recover, |note| {
        let c = &writer.conn;
        let _r = ReasonScope::enter(SyncReason::Commit);
        // The first read transaction: SQLite reads the WAL and rebuilds the wal-index.
        c.execute_batch("BEGIN DEFERRED")
            .map_err(|e| Error::sqlite("recover: begin first read transaction", path, e))?;
        let r = c.query_row("SELECT count(*) FROM sqlite_schema", [], |r| {
            r.get::<_, i64>(0)
        });
        let _ = c.execute_batch("COMMIT");
        let tables = r.map_err(|e| Error::sqlite("recover: first read transaction", path, e))?;
        // SQLCipher answers `page_size` on a keyed connection as text (its
        // `cipher_page_size`); plain SQLite as an integer.
        let page_size = c
            .query_row("PRAGMA page_size", [], |r| r.get::<_, Value>(0))
            .map_err(|e| Error::sqlite("read page_size", path, e))?;
        let page_size = match page_size {
            Value::Integer(n) => u64::try_from(n).ok(),
            Value::Text(t) => t.trim().parse().ok(),
            _ => None,
        }
        .unwrap_or(4096);
        let frames = if check.wal_bytes >= 32 {
            let ps = wal_header_page_size(&wal).unwrap_or(page_size);
            (check.wal_bytes - 32) / (ps + 24)
        } else {
            0
        };
        if tables == 0 {
            // Must precede the first table; harmless if already set.
            pragma(c, path, "set auto_vacuum", "PRAGMA auto_vacuum=INCREMENTAL")?;
        }
        let mode: String = c
            .query_row("PRAGMA journal_mode=WAL", [], |r| r.get(0))
            .map_err(|e| Error::sqlite("set journal_mode=WAL", path, e))?;
        if !mode.eq_ignore_ascii_case("wal") {
            return Err(Error::Io {
                op: "set journal_mode=WAL",
                path: path.to_path_buf(),
                source: Arc::new(std::io::Error::other(format!(
                    "SQLite kept journal_mode={mode}"
                ))),
            });
        }
        configure_writer(c, path, opts)?;
        pl_frames(note, frames, tables);
        Ok((page_size, frames))
    })?;
    let (page_size, frames) = page_size;
    pl.report.page_size = page_size;
    pl.report.frames_recovered = frames;
    let mut writer = writer;
    install_wal_hook(&mut writer.conn, path, &wal_frames)?;

    // 4. checkpoint
    let checkpoint_first = parallel && over_threshold && opts.checkpoint_on_open;
    pl.phase(OpenPhase::Checkpoint, |note| {
        if !over_threshold {
            *note = "skipped (WAL under threshold)".into();
            return Ok(());
        }
        if !opts.checkpoint_on_open {
            *note = "deferred to the background checkpointer".into();
            return Ok(());
        }
        if checkpoint_first {
            // A checkpoint writes the database file: not before the barrier.
            *note = "runs when the open barrier is done".into();
            return Ok(());
        }
        let o = checkpoint_on_writer(&writer.conn, path, &wal, &opts.sync, opts.truncate_timeout)?;
        *note = format!(
            "passive: {} of {} frames",
            o.checkpointed_frames, o.wal_frames
        );
        Ok(())
    })?;

    // 5. schema
    pl.phase(OpenPhase::Schema, |note| {
        let Some(h) = hook.take() else {
            *note = "no schema hook".into();
            return Ok(());
        };
        let c = &writer.conn;
        pragma(c, path, "schema: begin", "BEGIN IMMEDIATE")?;
        let before = if parallel {
            Some(txn_fingerprint(c).map_err(|e| Error::sqlite("schema: inspect", path, e))?)
        } else {
            None
        };
        let mut ctx = SchemaCtx {
            conn: c,
            path,
            created: check.created,
            progress: opts.progress.as_ref(),
            note: None,
        };
        let r = match catch_unwind(AssertUnwindSafe(|| {
            // The identity stamp commits with the schema step (identity.rs).
            if opts.keel_identity {
                stamp_if_needed(c, path)?;
            }
            h(&mut ctx)
        })) {
            Ok(r) => r,
            Err(p) => Err(Error::panicked("schema hook", path, p)),
        };
        let ran = match ctx.note.take() {
            Some(n) => format!("schema hook ran: {n}"),
            None => "schema hook ran".into(),
        };
        match r {
            Ok(()) if parallel => {
                // Readers see the schema already in the file at once; what the hook
                // changed commits (and becomes visible) when the store is durable:
                // a commit must not land on top of WAL frames not yet synced. When
                // it changed nothing (a plain reopen), the transaction ends now: a
                // commit without a change writes no frame, and holding the WAL
                // write lock through the barrier would stall every other process's
                // writes (an app and its extension) for the barrier's sync.
                if !c.is_autocommit() {
                    let after = txn_fingerprint(c)
                        .map_err(|e| Error::sqlite("schema: inspect", path, e))?;
                    if before == Some(after) {
                        pragma(c, path, "schema: end unchanged", "COMMIT")?;
                    }
                }
                *note = if c.is_autocommit() {
                    format!("{ran}; nothing changed, write lock released at once")
                } else {
                    format!("{ran}; its changes commit after the open barrier")
                };
                Ok(())
            }
            Ok(()) => {
                if !c.is_autocommit() {
                    pragma(c, path, "schema: commit", "COMMIT")?;
                }
                *note = ran;
                Ok(())
            }
            Err(e) => {
                if !c.is_autocommit() {
                    let _ = c.execute_batch("ROLLBACK");
                }
                Err(e)
            }
        }
    })?;

    // 6. ready
    let t0 = pl.t0;
    let (store, n) = pl.phase(OpenPhase::Ready, |note| {
        let n = opts.reader_pool_size.max(1);
        let reader_opener = {
            let (path, vfs, init) = (path.to_path_buf(), Arc::clone(&vfs), init.cloned());
            let busy = opts.busy_timeout;
            Arc::new(move || open_reader(&path, &vfs, init.as_ref(), busy))
        };
        let mut readers: Vec<KConn> = Vec::with_capacity(n);
        for _ in 0..n {
            readers.push(reader_opener()?);
        }
        let ck_reopen: Reopen = {
            let (path, vfs, init) = (path.to_path_buf(), Arc::clone(&vfs), init.cloned());
            let (sync, threshold) = (
                opts.sync.checkpoint.clone(),
                opts.checkpoint_threshold_bytes,
            );
            Arc::new(move || open_checkpointer(&path, &vfs, init.as_ref(), &sync, threshold))
        };
        let ck = ck_reopen()?;
        let suspension = Arc::new(Suspension::default());
        let w_reopen: Reopen = {
            let (path, vfs, shared) = (path.to_path_buf(), Arc::clone(&vfs), Arc::clone(shared));
            let susp = Arc::clone(&suspension);
            let wf = Arc::clone(&wal_frames);
            let o = WriterConf::from(opts);
            // After a resume: a file a rotation replaced is not reopened by name.
            let g = Arc::clone(&guard);
            Arc::new(move || {
                g.check()?;
                reopen_writer(&path, &vfs, &shared, &susp, &wf, &o)
            })
        };
        let (ck_tx, ck_rx) = mpsc::channel();
        let (w_tx, w_rx) = mpsc::channel();
        let initial_wal_bytes = if over_threshold && opts.checkpoint_on_open {
            0 // checkpointed in the open pipeline
        } else {
            check.wal_bytes
        };
        let signal = Arc::new(CkptSignal::new(initial_wal_bytes > 0));
        if opts.keel_identity {
            // Without a WAL, the first write starts one (identity.rs: epochs).
            signal.enable_identity(check.wal_bytes == 0);
        }
        let ck_ctx = CkptCtx {
            path: path.to_path_buf(),
            wal_path: wal.clone(),
            wal_frames: Arc::clone(&wal_frames),
            page_size,
            threshold_bytes: opts.checkpoint_threshold_bytes,
            idle: opts.idle_checkpoint_delay,
            truncate_timeout: opts.truncate_timeout,
            initial_wal_bytes,
            signal: Arc::clone(&signal),
            suspension: Arc::clone(&suspension),
            reopen: ck_reopen,
        };
        let gauge = Arc::new(QueueGauge::new(opts.max_queued_writes));
        let w_shared = Arc::new(WriterShared::new(
            path,
            signal,
            Arc::clone(&wal_frames),
            (opts.checkpoint_threshold_bytes / page_size.max(512)).max(1),
            Arc::clone(&suspension),
            opts.sync.clone(),
            opts.truncate_timeout,
            guard,
        ));
        let w_ctx = WriterCtx {
            gauge: Arc::clone(&gauge),
            suspension: Arc::clone(&suspension),
            reopen: w_reopen,
            #[cfg(feature = "sim")]
            statement_trace: opts.statement_trace.clone(),
            path: path.to_path_buf(),
            ckpt_tx: ck_tx.clone(),
            idle: opts.idle_checkpoint_delay,
            max_group: opts.max_group_size.max(1),
            vacuum_min_free_pages: opts.vacuum_min_free_pages,
            shared: Arc::clone(&w_shared),
        };
        let parked = Parked {
            writer,
            w_rx,
            w_ctx,
            ck,
            ck_rx,
            ck_tx: ck_tx.clone(),
            ck_ctx,
            checkpoint_first,
        };
        let (gate_parked, threads) = if parallel {
            *note = format!("{n} readers; writer and checkpointer start when durable");
            (Some(parked), None)
        } else {
            let t = start_threads(parked, path)?;
            *note = format!("{n} readers, writer and checkpointer threads started");
            (None, Some(t))
        };
        let gate = Arc::new(Gate::new(
            path,
            gate_parked,
            OpenReport::default(),
            opts.progress.clone(),
            t0,
            opts.truncate_timeout,
        ));
        if let Some((w, c)) = threads {
            let _ = gate.threads.writer_id.set(w.thread().id());
            *gate
                .threads
                .writer
                .lock()
                .unwrap_or_else(|p| p.into_inner()) = Some(w);
            *gate.threads.ckpt.lock().unwrap_or_else(|p| p.into_inner()) = Some(c);
        }
        Ok((
            Store::from_inner(Inner::new(
                path.to_path_buf(),
                Arc::clone(shared),
                ReaderPool::new(readers, opts.reader_wait, reader_opener),
                w_tx,
                ck_tx,
                gate,
                Arc::clone(&vfs),
                gauge,
                w_shared,
                suspension,
            )),
            n,
        ))
    })?;
    let _ = n;
    let readable_at = pl.t0.elapsed();
    pl.report.readable_after = readable_at;
    pl.report.total = readable_at;
    pl.report.syncs_issued = pl.report.phases.iter().map(|p| p.syncs).sum();
    if !parallel {
        pl.report.durable_after = Some(readable_at);
    }
    store.set_report(std::mem::take(&mut pl.report));
    tracing::info!(ms = readable_at.as_secs_f64() * 1e3, "store readable");
    emit(
        opts,
        OpenProgress {
            phase: OpenPhase::Ready,
            fraction: if parallel {
                (OpenPhase::ALL.len() - 1) as f32 / OpenPhase::ALL.len() as f32
            } else {
                1.0
            },
            done: false,
            milestone: Some(Milestone::Readable),
        },
    );
    if !parallel {
        tracing::info!("store durable (no WAL to sync)");
        store.gate().emit_durable();
    }
    Ok(store)
}

/// What a write transaction can have changed, read inside it: rows changed
/// (`total_changes`, every INSERT/UPDATE/DELETE, triggers included), the schema
/// cookie (any DDL), the header fields keel and apps set (`user_version`,
/// `application_id`) and the page and free-page counts. Equal before and after the
/// schema hook: the hook wrote nothing, and its transaction can end at once.
/// Limit, said plainly: a change that moves none of these
/// (`REINDEX`, or `ANALYZE` refreshing existing statistics rows; keel's own hook
/// makes none) would commit at once rather than after durable — on top of the
/// unsynced WAL, exactly as a write of another process may.
fn txn_fingerprint(c: &rusqlite::Connection) -> rusqlite::Result<[i64; 6]> {
    let q = |sql: &str| c.query_row(sql, [], |r| r.get::<_, i64>(0));
    Ok([
        i64::try_from(c.total_changes()).unwrap_or(i64::MAX),
        q("PRAGMA schema_version")?,
        q("PRAGMA user_version")?,
        q("PRAGMA application_id")?,
        q("PRAGMA page_count")?,
        q("PRAGMA freelist_count")?,
    ])
}

/// The writer's pragmas and `connection_init` (at open, after recovery, and on each
/// reopen after a resume).
fn configure_writer(c: &rusqlite::Connection, path: &Path, opts: &StoreOptions) -> Result<()> {
    WriterConf::from(opts).apply(c, path)
}

/// What configuring a writer connection needs from the options (they are not
/// `Clone`: they hold the one-shot schema hook).
struct WriterConf {
    synchronous: &'static str,
    threshold: u64,
    busy: std::time::Duration,
    init: Option<ConnectionInit>,
    barrier: SyncPolicy,
}

impl WriterConf {
    fn from(opts: &StoreOptions) -> WriterConf {
        WriterConf {
            synchronous: opts.sync.commit.synchronous_pragma(),
            threshold: opts.checkpoint_threshold_bytes,
            busy: opts.busy_timeout,
            init: opts.connection_init.clone(),
            barrier: opts.sync.open_barrier.clone(),
        }
    }

    fn apply(&self, c: &rusqlite::Connection, path: &Path) -> Result<()> {
        pragma(
            c,
            path,
            "configure writer",
            &format!(
                "PRAGMA synchronous={}; PRAGMA secure_delete=FAST; PRAGMA journal_size_limit={}; PRAGMA wal_autocheckpoint=0;",
                self.synchronous, self.threshold
            ),
        )?;
        if let Some(init) = &self.init {
            init(c).map_err(|e| Error::sqlite("connection_init hook", path, e))?;
        }
        Ok(())
    }
}

/// The WAL hook keeps the checkpointer's frame count (it decides when to
/// checkpoint without a query).
fn install_wal_hook(
    c: &mut rusqlite::Connection,
    path: &Path,
    frames: &Arc<AtomicU64>,
) -> Result<()> {
    let wf = Arc::clone(frames);
    c.wal_hook(Some(
        move |_: &mut rusqlite::hooks::Wal, pages: std::ffi::c_int| {
            wf.store(u64::try_from(pages).unwrap_or(0), Ordering::Relaxed);
            Ok(())
        },
    ))
    .map_err(|e| Error::sqlite("install WAL hook", path, e))
}

/// The writer connection again, after a resume (on the writer thread, at the first
/// write). If another process changed the files while this one was suspended, its
/// WAL frames may not be durable yet: sync the WAL through the open-barrier policy
/// before a commit lands on top of them (the open barrier's reason). Skipped when
/// nothing changed: this process's own commits were synced by its commit policy.
fn reopen_writer(
    path: &Path,
    vfs: &Arc<VfsRegistration>,
    shared: &VfsShared,
    susp: &Suspension,
    frames: &Arc<AtomicU64>,
    conf: &WriterConf,
) -> Result<KConn> {
    if susp.external.load(Ordering::Acquire) {
        let wal = wal_path(path);
        if std::fs::metadata(&wal).is_ok_and(|m| m.len() > 0) {
            let _r = ReasonScope::enter(SyncReason::OpenBarrier);
            sync_wal_for_barrier(shared, path, &wal, "open WAL for the resume barrier")?;
            tracing::debug!(policy = ?conf.barrier, "resume: synced a WAL another process wrote");
        }
    }
    let mut w = open_conn(path, vfs, Role::Writer, None)?;
    w.conn
        .busy_timeout(conf.busy)
        .map_err(|e| Error::sqlite("set busy timeout", path, e))?;
    conf.apply(&w.conn, path)?;
    install_wal_hook(&mut w.conn, path, frames)?;
    Ok(w)
}

/// One pooled read-only connection. With a busy timeout: a read can meet another
/// process's WAL recovery or a checkpoint restarting the WAL (`SQLITE_BUSY`).
fn open_reader(
    path: &Path,
    vfs: &Arc<VfsRegistration>,
    init: Option<&ConnectionInit>,
    busy: std::time::Duration,
) -> Result<KConn> {
    let r = open_conn(path, vfs, Role::Reader, init)?;
    pragma(&r.conn, path, "configure reader", "PRAGMA query_only=1")?;
    r.conn
        .busy_timeout(busy)
        .map_err(|e| Error::sqlite("set busy timeout", path, e))?;
    Ok(r)
}

/// The checkpointer's connection.
fn open_checkpointer(
    path: &Path,
    vfs: &Arc<VfsRegistration>,
    init: Option<&ConnectionInit>,
    policy: &SyncPolicy,
    threshold: u64,
) -> Result<KConn> {
    let ck = open_conn(path, vfs, Role::Checkpointer, init)?;
    let ck_sync = if matches!(policy, SyncPolicy::Off) {
        "OFF"
    } else {
        "FULL"
    };
    pragma(
        &ck.conn,
        path,
        "configure checkpointer",
        &format!("PRAGMA synchronous={ck_sync}; PRAGMA wal_autocheckpoint=0; PRAGMA journal_size_limit={threshold};"),
    )?;
    Ok(ck)
}

/// Call the progress callback; a panic in it is logged, not propagated into open.
fn emit(opts: &StoreOptions, p: OpenProgress) {
    durable::emit(opts.progress.as_ref(), p);
}

fn pl_frames(note: &mut String, frames: u64, tables: i64) {
    *note = format!("{frames} WAL frames, {tables} schema entries");
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Another process's last connection may checkpoint and remove the WAL
    /// between the open's size check and the barrier's sync (SQLite deletes it on
    /// the last close): nothing is left to make durable, so the barrier issues no
    /// sync and the open goes on, where it used to fail with the WAL's
    /// "No such file".
    #[test]
    fn a_wal_removed_before_the_barrier_syncs_it_leaves_nothing_to_sync() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("gone.db");
        let shared = VfsShared::new(&path, &StoreOptions::default(), None);
        let r = sync_wal_for_barrier(&shared, &path, &wal_path(&path), "open (test)");
        assert!(matches!(r, Ok(false)), "{r:?}");
        assert_eq!(shared.counters.barrier_syncs(), 0);
    }

    /// The open checks the key on page 1 itself, as SQLCipher checks a page it
    /// reads, and asks SQLCipher only when that fails: page 1 of a file
    /// SQLCipher wrote authenticates under its key, in both layouts, and never
    /// under another key or the other layout.
    #[cfg(feature = "encryption-api")]
    #[test]
    fn page_1_authenticates_under_its_own_key_and_layout_alone() {
        use crate::encryption::DataKey;
        for header in [false, true] {
            let dir = tempfile::tempdir().unwrap();
            let path = dir.path().join("k.db");
            let key = DataKey::from_parts(&[7; 32], &[9; 16]);
            let given = key.clone();
            let opts = StoreOptions::default()
                .encryption(move |_: &Path, _| Ok(given.clone()))
                .plaintext_header(header);
            let store = Store::open(&path, opts).unwrap();
            store
                .write_blocking(|t| {
                    t.execute_batch("CREATE TABLE t(x); INSERT INTO t VALUES (1)")?;
                    Ok::<_, Error>(())
                })
                .unwrap();
            store.close().unwrap();
            let page = std::fs::read(&path).unwrap();
            assert!(Cipher::new(key.clone(), header).authenticates_page1(&page));
            let other = DataKey::from_parts(&[8; 32], &[9; 16]);
            assert!(!Cipher::new(other, header).authenticates_page1(&page));
            let salted = DataKey::from_parts(&[7; 32], &[10; 16]);
            assert!(!Cipher::new(salted, header).authenticates_page1(&page));
            assert!(!Cipher::new(key.clone(), !header).authenticates_page1(&page));
            let mut torn = page.clone();
            torn[2000] ^= 1;
            assert!(!Cipher::new(key.clone(), header).authenticates_page1(&torn));
            assert!(!Cipher::new(key, header).authenticates_page1(&page[..4000]));
        }
    }
}
