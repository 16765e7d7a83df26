//! Key rotation and migration: a database moves to a new key (or from plaintext to
//! encrypted, or back) by a whole new file, never by rewriting pages in place.
//!
//! ## The model
//!
//! SQLCipher's `PRAGMA rekey` rewrites every page in place: a crash in the middle
//! leaves a file whose pages are under two keys, which neither key opens. keel never
//! does that. A rotation writes a complete copy under the new key next to the
//! database (`<db>-keelnew`, through `sqlcipher_export`), makes it durable, and
//! renames it over the database: a rename is atomic, so the name always holds one
//! whole file under one key. A small **journal** (`<db>-keelrotate`) says how far
//! the rotation got, so whoever opens the database next finishes it or rolls it
//! back ([`recover`], which every open runs first):
//!
//! | step | files | a crash here leaves, after [`recover`] |
//! | --- | --- | --- |
//! | lock | the old file, its WAL checkpointed to 0 bytes, held exclusively | the old file, old key |
//! | journal: `copying` | + the journal | the old file, old key (the copy is deleted) |
//! | copy | + `<db>-keelnew`, partial | the old file, old key |
//! | sync | the copy complete, synced with its directory | the old file, old key |
//! | journal: `copied` | the journal's second block, synced | the new file, new key (the rename is redone) |
//! | rename | the copy is the database | the new file, new key |
//! | done | the journal removed | the new file, new key |
//!
//! The journal never holds a key. It names the two keys by [`KeyId`] (a data key's
//! salt, which is not secret: SQLCipher keeps it in the file's first 16 bytes
//! without the plaintext header), so an app that kept both keys can ask
//! [`Recovered::key`] which one to keep. It is two 512-byte blocks: the first is
//! written to a temporary file, synced and renamed into place before the copy
//! starts; the second, written and synced after the copy is durable, is the commit
//! point. Each block carries a checksum; a block that does not check (a power loss
//! while it was written) counts as not written, which is safe: the rename only
//! follows a second block that was synced.
//!
//! ## Other connections and processes
//!
//! A rotation needs the file to itself. It opens the database in SQLite's
//! `EXCLUSIVE` locking mode, which a WAL connection open anywhere (in any process)
//! refuses: then the rotation fails with [`Error::Locked`] and nothing changed.
//! Every other handle must be closed or suspended (`Store::suspend` closes its
//! connections). While it runs, nobody else can read or write the file. Two rules
//! keep a handle that was suspended across a rotation from writing into the old
//! file, which after the rename no name reaches (its writes would be lost):
//!
//! * keel's writer checks, inside the first write transaction of each connection it
//!   opens (after a suspend too), after taking the write lock, that the database's
//!   name still names the file it opened and that no rotation journal exists;
//!   otherwise the write fails with [`Error::Rotated`] and nothing is written. Once
//!   per connection is enough: an open WAL connection holds a shared lock on the
//!   database file until it closes, which the rotation's exclusive lock needs, so
//!   no rotation can start while the checked connection lives. The app closes the store and opens it again with the new
//!   key. (Its readers, reopening by name after a resume, meet the new file and
//!   fail to decrypt it with the old key.)
//! * after the rename, the rotation posts the cross-process commit signal
//!   ([`CommitSignal`](crate::xproc::CommitSignal)), so a watching process wakes and
//!   its next read or write learns of the new file.
//!
//! Only keel's writer knows the journal rule: another SQLite client must not write
//! to a database while a rotation journal sits beside it.
//!
//! ## Side files
//!
//! The old WAL is checkpointed with `TRUNCATE` under the exclusive lock, so it is
//! empty when the copy starts and stays empty (nobody else can write): the new file
//! can take over the `-wal` name without inheriting a frame. The exclusive mode
//! keeps its wal-index in memory, so the old `-shm` is not touched; the next
//! connection to the new file finds no other connection and resets it, as SQLite
//! always does. The rotation's own connection never checkpoints on close (that
//! would delete `<db>-wal` by name, which by then may be the new file's). The
//! signal file (`-keelsig`) names the database, not a file, and carries over.
//!
//! ## Test hook
//!
//! With the crate feature `sim` (test builds only, never production), the
//! environment variable `KEEL_ROTATE_PAUSE_AT=<step>` makes a rotation stop at that
//! step, write `keel-rotate paused at <step>` to standard error and sleep until
//! killed. The crash tests kill it there with SIGKILL. The steps are
//! [`PAUSE_POINTS`].

use std::fmt;
use std::fs::{File, OpenOptions};
use std::io::Read;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

#[cfg(feature = "encryption-api")]
use crate::encryption::DataKey;
use crate::error::{Error, Result};
use crate::paths::wal_path;

/// The journal's suffix: `<db>-keelrotate`.
pub const JOURNAL_SUFFIX: &str = "-keelrotate";
/// The copy's suffix while it is written: `<db>-keelnew`.
pub const NEW_SUFFIX: &str = "-keelnew";
/// The steps at which the test hook (`KEEL_ROTATE_PAUSE_AT`, feature `sim`) can
/// stop a rotation, in the order a rotation reaches them.
pub const PAUSE_POINTS: &[&str] = &[
    "locked",
    "journal",
    "copying",
    "copied",
    "synced",
    "committed",
    "renamed",
    "done",
];

const BLOCK: usize = 512;
const MAGIC: &str = "keel-rotate 1";

fn sibling(path: &Path, suffix: &str) -> PathBuf {
    let mut s = path.as_os_str().to_owned();
    s.push(suffix);
    PathBuf::from(s)
}

/// `<db>-keelrotate`.
pub fn journal_path(db: &Path) -> PathBuf {
    sibling(db, JOURNAL_SUFFIX)
}

/// `<db>-keelnew`.
pub fn new_path(db: &Path) -> PathBuf {
    sibling(db, NEW_SUFFIX)
}

/// Names a key without revealing it: a data key's salt, or plaintext.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum KeyId {
    /// No key: a plaintext SQLite file.
    Plaintext,
    /// The salt of a data key (`DataKey::salt`).
    Salt([u8; 16]),
}

impl KeyId {
    /// The id of `key`.
    #[cfg(feature = "encryption-api")]
    pub fn of(key: &DataKey) -> KeyId {
        KeyId::Salt(key.salt())
    }

    /// Parse the text form (`plaintext` or `salt:<32 hex digits>`).
    pub fn parse(text: &str) -> Option<KeyId> {
        if text == "plaintext" {
            return Some(KeyId::Plaintext);
        }
        let hex = text.strip_prefix("salt:")?.as_bytes();
        if hex.len() != 32 {
            return None;
        }
        let mut salt = [0u8; 16];
        for (i, pair) in hex.chunks_exact(2).enumerate() {
            let s = std::str::from_utf8(pair).ok()?;
            salt[i] = u8::from_str_radix(s, 16).ok()?;
        }
        Some(KeyId::Salt(salt))
    }
}

impl fmt::Display for KeyId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            KeyId::Plaintext => f.write_str("plaintext"),
            KeyId::Salt(s) => {
                f.write_str("salt:")?;
                for b in s {
                    write!(f, "{b:02x}")?;
                }
                Ok(())
            }
        }
    }
}

/// What [`recover`] did with an interrupted rotation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    /// The rotation had not reached its commit point: the copy was deleted and the
    /// database is the old file, under the old key.
    RolledBack,
    /// The rotation had passed its commit point: the database is the new file,
    /// under the new key.
    Finished,
}

/// An interrupted rotation that [`recover`] settled.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Recovered {
    /// Finished or rolled back.
    pub outcome: Outcome,
    /// The key the database had before the rotation.
    pub from: KeyId,
    /// The key the rotation was moving it to.
    pub to: KeyId,
}

impl Recovered {
    /// The key that opens the database now.
    pub fn key(&self) -> &KeyId {
        match self.outcome {
            Outcome::RolledBack => &self.from,
            Outcome::Finished => &self.to,
        }
    }
}

/// Device, inode, length and modification time of a file: what must not change
/// between a copy and its rename.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct FileStamp {
    dev: u64,
    ino: u64,
    len: u64,
    mtime_ns: i128,
}

impl FileStamp {
    fn of(path: &Path) -> std::io::Result<FileStamp> {
        let m = std::fs::metadata(path)?;
        Ok(FileStamp {
            dev: m.dev(),
            ino: m.ino(),
            len: m.len(),
            mtime_ns: i128::from(m.mtime()) * 1_000_000_000 + i128::from(m.mtime_nsec()),
        })
    }
}

/// FNV-1a (64 bits): enough to tell a torn block from a whole one.
fn checksum(bytes: &[u8]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for &b in bytes {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    h
}

/// One journal block: its text lines, a checksum line, padded to [`BLOCK`] bytes.
#[cfg_attr(not(feature = "encryption-api"), allow(dead_code))] // written by rotations only
fn block(lines: &str) -> Vec<u8> {
    let mut b = format!("{lines}sum {:016x}\n", checksum(lines.as_bytes())).into_bytes();
    b.resize(BLOCK, b' ');
    b
}

/// The text lines of a block whose checksum holds.
fn parse_block(b: &[u8]) -> Option<&str> {
    let text = std::str::from_utf8(b).ok()?.trim_end_matches(' ');
    let at = text.rfind("sum ")?;
    let (lines, sum) = text.split_at(at);
    let sum = u64::from_str_radix(sum.trim_start_matches("sum ").trim(), 16).ok()?;
    (checksum(lines.as_bytes()) == sum).then_some(lines)
}

fn field<'a>(lines: &'a str, name: &str) -> Option<&'a str> {
    lines
        .lines()
        .find_map(|l| l.strip_prefix(name)?.strip_prefix(' '))
}

/// The journal as read back.
struct Journal {
    from: KeyId,
    to: KeyId,
    /// Set once the second block (the commit point) is whole.
    copied: Option<FileStamp>,
}

#[cfg_attr(not(feature = "encryption-api"), allow(dead_code))] // written by rotations only
fn first_block(from: &KeyId, to: &KeyId) -> Vec<u8> {
    block(&format!("{MAGIC}\nstep copying\nfrom {from}\nto {to}\n"))
}

#[cfg_attr(not(feature = "encryption-api"), allow(dead_code))] // written by rotations only
fn second_block(old: &FileStamp) -> Vec<u8> {
    block(&format!(
        "{MAGIC}\nstep copied\nold {} {} {} {}\n",
        old.dev, old.ino, old.len, old.mtime_ns
    ))
}

fn parse_journal(bytes: &[u8]) -> Option<Journal> {
    let first = parse_block(bytes.get(..BLOCK)?)?;
    if !first.starts_with(MAGIC) || field(first, "step") != Some("copying") {
        return None;
    }
    let from = KeyId::parse(field(first, "from")?)?;
    let to = KeyId::parse(field(first, "to")?)?;
    let copied = bytes
        .get(BLOCK..2 * BLOCK)
        .and_then(parse_block)
        .filter(|l| l.starts_with(MAGIC) && field(l, "step") == Some("copied"))
        .and_then(|l| {
            let mut it = field(l, "old")?.split(' ');
            Some(FileStamp {
                dev: it.next()?.parse().ok()?,
                ino: it.next()?.parse().ok()?,
                len: it.next()?.parse().ok()?,
                mtime_ns: it.next()?.parse().ok()?,
            })
        });
    Some(Journal { from, to, copied })
}

fn dir_of(path: &Path) -> &Path {
    match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d,
        _ => Path::new("."),
    }
}

fn sync_dir(path: &Path) -> Result<()> {
    let dir = dir_of(path);
    File::open(dir)
        .and_then(|d| d.sync_all())
        .map_err(|e| Error::io("sync the database's directory", dir, e))
}

fn remove_if_there(path: &Path) -> Result<()> {
    match std::fs::remove_file(path) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(Error::io("remove a rotation's leftover file", path, e)),
    }
}

/// Delete the copy and the side files SQLite may have made for it.
fn remove_copy(db: &Path) -> Result<()> {
    let new = new_path(db);
    for suffix in ["", "-journal", "-wal", "-shm"] {
        remove_if_there(&sibling(&new, suffix))?;
    }
    Ok(())
}

/// An advisory lock (`flock`) on the journal: held by a running rotation, taken
/// by [`recover`], so a recovery never settles a rotation that is still running.
/// It is independent of SQLite's `fcntl` locks on the database.
struct JournalLock(File);

impl JournalLock {
    /// `None` when another open file holds it.
    fn try_take(f: File) -> std::io::Result<Option<JournalLock>> {
        use std::os::fd::AsRawFd;
        // SAFETY: `flock` on a descriptor this function owns (through `f`) for the
        // whole call; it reads no memory of ours.
        #[allow(unsafe_code)]
        let r = unsafe { libc::flock(f.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) };
        if r == 0 {
            return Ok(Some(JournalLock(f)));
        }
        let e = std::io::Error::last_os_error();
        if e.raw_os_error() == Some(libc::EWOULDBLOCK) {
            Ok(None)
        } else {
            Err(e)
        }
    }
}

/// Settle an interrupted rotation of the database at `db`, if its journal says
/// there was one: finish it when it passed its commit point, roll it back
/// otherwise (see the module docs). `Ok(None)` when there is no journal. Every
/// open runs this before it asks for a key. It needs no key.
///
/// [`Error::Locked`] when a rotation of the file is running now.
pub fn recover(db: &Path) -> Result<Option<Recovered>> {
    let jp = journal_path(db);
    let f = match OpenOptions::new().read(true).write(true).open(&jp) {
        Ok(f) => f,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(Error::io("open the rotation journal", &jp, e)),
    };
    let Some(lock) =
        JournalLock::try_take(f).map_err(|e| Error::io("lock the rotation journal", &jp, e))?
    else {
        return Err(Error::Locked {
            op: "open while a key rotation of the database runs",
            path: db.to_path_buf(),
        });
    };
    let mut bytes = Vec::with_capacity(2 * BLOCK);
    (&lock.0)
        .read_to_end(&mut bytes)
        .map_err(|e| Error::io("read the rotation journal", &jp, e))?;
    let Some(journal) = parse_journal(&bytes) else {
        // The first block is synced before the copy starts: a journal without a
        // whole one was not written by keel. Guessing could lose the database.
        return Err(Error::Corrupt {
            op: "read the rotation journal",
            path: jp,
            detail: "not a keel rotation journal; move it away to open the database".into(),
        });
    };
    let new = new_path(db);
    let outcome = match journal.copied {
        Some(old) if new.exists() => {
            if old_file_unchanged(db, &old) {
                std::fs::rename(&new, db).map_err(|e| Error::io("finish a key rotation", db, e))?;
                sync_dir(db)?;
                Outcome::Finished
            } else {
                // Someone wrote to the old file after the copy (only a writer that
                // does not know the journal rule can): its writes are not in the
                // copy, so the old file stays.
                tracing::warn!(path = %db.display(), "the database changed after its rotation's copy; keeping the old file");
                remove_copy(db)?;
                Outcome::RolledBack
            }
        }
        // Past the commit point and the copy is gone: the rename happened.
        Some(_) => Outcome::Finished,
        None => {
            remove_copy(db)?;
            Outcome::RolledBack
        }
    };
    sync_dir(db)?;
    remove_if_there(&jp)?;
    sync_dir(db)?;
    drop(lock);
    let recovered = Recovered {
        outcome,
        from: journal.from,
        to: journal.to,
    };
    tracing::warn!(path = %db.display(), outcome = ?recovered.outcome, key = %recovered.key(), "settled an interrupted key rotation");
    Ok(Some(recovered))
}

fn old_file_unchanged(db: &Path, old: &FileStamp) -> bool {
    let wal_empty = std::fs::metadata(wal_path(db)).map_or(true, |m| m.len() == 0);
    wal_empty && FileStamp::of(db).is_ok_and(|now| now == *old)
}

/// What a store's writer checks in the first write transaction of each connection (see the module docs):
/// the database's name still names the file the store opened, and no rotation
/// journal sits beside it. Shared by the store, its writer and the writer's
/// reopen; a rotation of the open store (or its adoption of a file another
/// process rotated) renews it to the new file while every connection is closed.
#[derive(Debug)]
pub(crate) struct FileGuard {
    path: PathBuf,
    journal: PathBuf,
    file: std::sync::Mutex<Option<(u64, u64)>>,
}

impl FileGuard {
    /// The file `path` names now (taken before the store's connections open them:
    /// a rename in between makes the guard refuse, never miss).
    pub(crate) fn at_open(path: &Path) -> FileGuard {
        FileGuard {
            path: path.to_path_buf(),
            journal: journal_path(path),
            file: std::sync::Mutex::new(Self::named(path)),
        }
    }

    fn named(path: &Path) -> Option<(u64, u64)> {
        std::fs::metadata(path).ok().map(|m| (m.dev(), m.ino()))
    }

    fn file(&self) -> Option<(u64, u64)> {
        *self.file.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// From now on, guard the file the name holds now.
    #[cfg_attr(not(feature = "encryption-api"), allow(dead_code))]
    pub(crate) fn renew(&self) {
        *self.file.lock().unwrap_or_else(|p| p.into_inner()) = Self::named(&self.path);
    }

    /// True when a finished rotation replaced the file (no journal: none runs).
    #[cfg_attr(not(feature = "encryption-api"), allow(dead_code))]
    pub(crate) fn replaced(&self) -> bool {
        std::fs::symlink_metadata(&self.journal).is_err()
            && matches!(
                (self.file(), Self::named(&self.path)),
                (Some(was), Some(now)) if was != now
            )
    }

    /// [`Error::Rotated`] when the file was replaced or a rotation is pending.
    pub(crate) fn check(&self) -> Result<()> {
        let rotated = || Error::Rotated {
            op: "write",
            path: self.path.clone(),
        };
        if std::fs::symlink_metadata(&self.journal).is_ok() {
            return Err(rotated());
        }
        match (self.file(), std::fs::metadata(&self.path)) {
            (Some(id), Ok(m)) if (m.dev(), m.ino()) != id => Err(rotated()),
            (Some(_), Err(_)) => Err(rotated()),
            _ => Ok(()),
        }
    }
}

#[cfg(feature = "encryption-api")]
pub use run::*;

#[cfg(feature = "encryption-api")]
mod run {
    use std::future::Future;
    use std::io::{Read, Write};
    use std::os::unix::fs::FileExt;
    use std::path::{Path, PathBuf};
    use std::pin::Pin;
    use std::sync::atomic::{AtomicU64, Ordering};
    use std::sync::Arc;
    use std::task::{Context, Poll};
    use std::time::{Duration, Instant};

    use rusqlite::config::DbConfig;
    use rusqlite::OpenFlags;
    use zeroize::Zeroizing;

    use super::{
        first_block, journal_path, new_path, recover, remove_copy, second_block, sync_dir,
        FileStamp, JournalLock, KeyId,
    };
    use crate::encryption::{
        is_sqlcipher_reserve, Cipher, DataKey, KeyProvider, KeyPurpose, PageMac,
    };
    use crate::error::{Error, Result};
    use crate::oneshot;
    use crate::paths::{uri_path, wal_path};
    use crate::xproc::CommitSignal;

    /// One side of a rotation: how the file is (or will be) stored.
    #[derive(Debug, Clone)]
    pub enum Side {
        /// A plaintext SQLite file.
        Plaintext,
        /// Encrypted under `key`, with or without the plaintext header
        /// (`StoreOptions::plaintext_header`).
        Encrypted {
            /// The data key.
            key: DataKey,
            /// The first 32 bytes stay plaintext.
            plaintext_header: bool,
        },
    }

    impl Side {
        /// Encrypted under `key`, without the plaintext header.
        pub fn encrypted(key: DataKey) -> Side {
            Side::Encrypted {
                key,
                plaintext_header: false,
            }
        }

        /// The key's id (what the journal records).
        pub fn id(&self) -> KeyId {
            match self {
                Side::Plaintext => KeyId::Plaintext,
                Side::Encrypted { key, .. } => KeyId::of(key),
            }
        }

        fn cipher(&self) -> Option<Cipher> {
            match self {
                Side::Plaintext => None,
                Side::Encrypted {
                    key,
                    plaintext_header,
                } => Some(Cipher::new(key.clone(), *plaintext_header)),
            }
        }
    }

    /// Where a rotation is, for progress events.
    #[derive(Debug, Clone, Copy, PartialEq, Eq)]
    pub enum Step {
        /// The file is held exclusively and its WAL checkpointed.
        Lock,
        /// The copy under the new key is being written (`fraction` grows).
        Copy,
        /// The copy is synced, with its directory.
        Sync,
        /// The copy is the database (the rename).
        Switch,
        /// Finished: the journal is gone.
        Done,
    }

    /// A progress event.
    #[derive(Debug, Clone, Copy, PartialEq)]
    pub struct Progress {
        /// The step.
        pub step: Step,
        /// How far the whole rotation is, `0.0 ..= 1.0`.
        pub fraction: f64,
        /// Bytes of the copy written so far.
        pub bytes: u64,
    }

    /// Receives [`Progress`] events, on the rotation's thread.
    pub type ProgressFn = Arc<dyn Fn(Progress) + Send + Sync>;

    /// How a rotation runs.
    #[derive(Clone)]
    pub struct RotateOptions {
        progress: Option<ProgressFn>,
        busy_timeout: Duration,
    }

    impl Default for RotateOptions {
        fn default() -> Self {
            RotateOptions {
                progress: None,
                busy_timeout: Duration::from_secs(5),
            }
        }
    }

    impl RotateOptions {
        /// Call `f` with each progress event.
        pub fn progress(mut self, f: impl Fn(Progress) + Send + Sync + 'static) -> Self {
            self.progress = Some(Arc::new(f));
            self
        }

        /// How long to wait for another connection to let go of the file before
        /// failing with [`Error::Locked`] (default 5 s).
        pub fn busy_timeout(mut self, d: Duration) -> Self {
            self.busy_timeout = d;
            self
        }
    }

    impl RotateOptions {
        pub(crate) fn busy_timeout_value(&self) -> Duration {
            self.busy_timeout
        }
    }

    impl std::fmt::Debug for RotateOptions {
        fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            f.debug_struct("RotateOptions")
                .field("progress", &self.progress.is_some())
                .field("busy_timeout", &self.busy_timeout)
                .finish()
        }
    }

    /// What a finished rotation did.
    #[derive(Debug, Clone, PartialEq)]
    pub struct RotateReport {
        /// The key before.
        pub from: KeyId,
        /// The key after.
        pub to: KeyId,
        /// Bytes of the new file.
        pub bytes: u64,
        /// Wall time of the whole rotation.
        pub duration: Duration,
        /// An earlier interrupted rotation the start settled first.
        pub recovered: Option<super::Recovered>,
    }

    /// A rotation running on a keel thread (`keel-rotate`): a future, or
    /// [`Rotation::wait`] to block. Dropping it does not stop the rotation.
    pub struct Rotation {
        rx: oneshot::Receiver<Result<RotateReport>>,
        path: PathBuf,
    }

    impl Rotation {
        /// Block until the rotation ends.
        pub fn wait(self) -> Result<RotateReport> {
            self.rx.wait().unwrap_or_else(|| {
                Err(Error::Panicked {
                    op: "rotate",
                    path: self.path.clone(),
                    message: "the rotation thread ended without an answer".into(),
                })
            })
        }
    }

    impl Future for Rotation {
        type Output = Result<RotateReport>;
        fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
            let path = self.path.clone();
            self.rx.poll_recv(cx).map(|r| {
                r.unwrap_or_else(|| {
                    Err(Error::Panicked {
                        op: "rotate",
                        path,
                        message: "the rotation thread ended without an answer".into(),
                    })
                })
            })
        }
    }

    /// Start moving the database at `path` from `from` to `to` on a keel thread,
    /// and return at once (see the module docs for what a crash leaves). The file
    /// must not be open anywhere else: [`Error::Locked`] otherwise. `from` must be
    /// how the file is stored now: [`Error::WrongKey`] or [`Error::NotEncrypted`]
    /// otherwise, with nothing changed.
    pub fn start(path: impl AsRef<Path>, from: Side, to: Side, opts: RotateOptions) -> Rotation {
        let path = path.as_ref().to_path_buf();
        let p2 = path.clone();
        Rotation::spawn(path, move || rotate(&p2, from, to, opts))
    }

    impl Rotation {
        /// Run `f` on a `keel-rotate` thread; the handle resolves with its answer
        /// (a panic becomes [`Error::Panicked`]).
        pub(crate) fn spawn(
            path: PathBuf,
            f: impl FnOnce() -> Result<RotateReport> + Send + 'static,
        ) -> Rotation {
            let (tx, rx) = oneshot::channel();
            let p2 = path.clone();
            let spawned = std::thread::Builder::new()
                .name("keel-rotate".into())
                .spawn(move || {
                    let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(f))
                        .unwrap_or_else(|p| Err(Error::panicked("rotate", &p2, p)));
                    let _ = tx.send(r);
                });
            if let Err(e) = spawned {
                let (tx, rx) = oneshot::channel();
                let _ = tx.send(Err(Error::io("spawn the rotation thread", &path, e)));
                return Rotation { rx, path };
            }
            Rotation { rx, path }
        }
    }

    /// How an open store is to be kept after [`Store::rotate_key`](crate::Store::rotate_key):
    /// the provider of its new key, and the header layout. `None` in its place
    /// means plaintext (an export for tools without a key).
    #[derive(Clone)]
    pub struct Encryption {
        provider: Arc<dyn KeyProvider>,
        plaintext_header: bool,
    }

    impl Encryption {
        /// Encrypted under the key `provider` gives (asked with
        /// [`KeyPurpose::Create`]: it may make the key, and must keep it durably
        /// before it returns), without the plaintext header.
        pub fn new(provider: impl KeyProvider + 'static) -> Encryption {
            Encryption::shared(Arc::new(provider))
        }

        /// [`Encryption::new`] with a provider already shared.
        pub fn shared(provider: Arc<dyn KeyProvider>) -> Encryption {
            Encryption {
                provider,
                plaintext_header: false,
            }
        }

        /// Keep the first 32 bytes plaintext (`StoreOptions::plaintext_header`).
        pub fn plaintext_header(mut self, on: bool) -> Encryption {
            self.plaintext_header = on;
            self
        }

        /// The provider of the new key.
        pub fn provider(&self) -> &Arc<dyn KeyProvider> {
            &self.provider
        }

        /// Whether the first 32 bytes stay plaintext.
        pub fn has_plaintext_header(&self) -> bool {
            self.plaintext_header
        }

        /// The new key, asked of the provider for a rotation of `path`.
        pub(crate) fn obtain(&self, path: &Path) -> Result<Cipher> {
            Cipher::obtain_for(
                self.provider.as_ref(),
                path,
                self.plaintext_header,
                KeyPurpose::Create,
            )
        }
    }

    impl std::fmt::Debug for Encryption {
        fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            f.debug_struct("Encryption")
                .field("plaintext_header", &self.plaintext_header)
                .finish_non_exhaustive()
        }
    }

    impl Side {
        /// How a store keyed with `cipher` (none: plaintext) is stored.
        pub(crate) fn of(cipher: Option<&Cipher>) -> Side {
            match cipher {
                None => Side::Plaintext,
                Some(c) => Side::Encrypted {
                    key: c.key().clone(),
                    plaintext_header: c.plaintext_header(),
                },
            }
        }
    }

    /// Whether `cipher` opens the database at `path`: its main file alone,
    /// through an `immutable` read-only connection (no lock, no `-wal` or
    /// `-shm` touched). [`Error::WrongKey`] when it does not.
    pub(crate) fn key_opens(path: &Path, cipher: &Cipher) -> Result<()> {
        let op = "check the key of a rotated database";
        let mut header = [0u8; 32];
        let n = std::fs::File::open(path)
            .and_then(|mut f| f.read(&mut header))
            .map_err(|e| Error::io(op, path, e))?;
        cipher.check_header(path, &header[..n])?;
        let uri = format!("file:{}?immutable=1", uri_path(path));
        let flags = OpenFlags::SQLITE_OPEN_READ_ONLY
            | OpenFlags::SQLITE_OPEN_URI
            | OpenFlags::SQLITE_OPEN_NO_MUTEX;
        let c = rusqlite::Connection::open_with_flags(&uri, flags)
            .map_err(|e| Error::sqlite(op, path, e))?;
        cipher.apply(&c).map_err(|e| Error::sqlite(op, path, e))?;
        match c.query_row("SELECT count(*) FROM sqlite_schema", [], |r| {
            r.get::<_, i64>(0)
        }) {
            Ok(_) => Ok(()),
            Err(e) if e.sqlite_error_code() == Some(rusqlite::ErrorCode::NotADatabase) => {
                Err(Error::WrongKey {
                    op,
                    path: path.to_path_buf(),
                })
            }
            Err(e) => Err(Error::sqlite(op, path, e)),
        }
    }

    /// [`start`], on the calling thread.
    pub fn rotate(
        path: impl AsRef<Path>,
        from: Side,
        to: Side,
        opts: RotateOptions,
    ) -> Result<RotateReport> {
        let path = path.as_ref();
        let path = if path.is_absolute() {
            path.to_path_buf()
        } else {
            std::env::current_dir()
                .map_err(|e| Error::io("resolve current directory", path, e))?
                .join(path)
        };
        let t0 = Instant::now();
        let recovered = recover(&path)?;
        let report = Run {
            path: &path,
            from: &from,
            to: &to,
            opts: &opts,
            copied: Arc::new(AtomicU64::new(0)),
        }
        .run()?;
        Ok(RotateReport {
            from: from.id(),
            to: to.id(),
            bytes: report,
            duration: t0.elapsed(),
            recovered,
        })
    }

    /// The test hook (module docs): stop here and wait to be killed.
    #[cfg(feature = "sim")]
    fn pause_point(step: &str) {
        use std::io::Write;
        if std::env::var("KEEL_ROTATE_PAUSE_AT").as_deref() == Ok(step) {
            let mut err = std::io::stderr();
            let _ = writeln!(err, "keel-rotate paused at {step}");
            let _ = err.flush();
            loop {
                std::thread::sleep(Duration::from_secs(60));
            }
        }
    }

    #[cfg(not(feature = "sim"))]
    fn pause_point(_: &str) {}

    struct Run<'a> {
        path: &'a Path,
        from: &'a Side,
        to: &'a Side,
        opts: &'a RotateOptions,
        copied: Arc<AtomicU64>,
    }

    impl Run<'_> {
        fn progress(&self, step: Step, fraction: f64) {
            if let Some(p) = &self.opts.progress {
                p(Progress {
                    step,
                    fraction,
                    bytes: self.copied.load(Ordering::Relaxed),
                });
            }
        }

        fn sql(&self, op: &'static str) -> impl Fn(rusqlite::Error) -> Error + '_ {
            move |e| Error::sqlite(op, self.path, e)
        }

        /// Wrong-key answers from SQLCipher read as "not a database".
        fn keyed(&self, op: &'static str) -> impl Fn(rusqlite::Error) -> Error + '_ {
            move |e| match Error::sqlite(op, self.path, e) {
                Error::NotADatabase { op, path } if matches!(self.from, Side::Encrypted { .. }) => {
                    Error::WrongKey { op, path }
                }
                other => other,
            }
        }

        /// Refuse a file stored otherwise than `from` says, before SQLite sees it.
        fn check_header(&self) -> Result<()> {
            let op = "check the database before a rotation";
            let mut header = [0u8; 32];
            let n = {
                let mut f =
                    std::fs::File::open(self.path).map_err(|e| Error::io(op, self.path, e))?;
                f.read(&mut header)
                    .map_err(|e| Error::io(op, self.path, e))?
            };
            if n == 0 {
                return Err(Error::NotADatabase {
                    op,
                    path: self.path.to_path_buf(),
                });
            }
            match self.from.cipher() {
                Some(c) => c.check_header(self.path, &header[..n]),
                None if n < 16
                    || &header[..16] != b"SQLite format 3\0"
                    || is_sqlcipher_reserve(header[20]) =>
                {
                    Err(Error::NotADatabase {
                        op,
                        path: self.path.to_path_buf(),
                    })
                }
                None => Ok(()),
            }
        }

        fn run(&self) -> Result<u64> {
            let path = self.path;
            self.check_header()?;
            // CREATE: the attached copy inherits these flags (the database itself
            // exists: its header was just read).
            let flags = OpenFlags::SQLITE_OPEN_READ_WRITE
                | OpenFlags::SQLITE_OPEN_CREATE
                | OpenFlags::SQLITE_OPEN_NO_MUTEX;
            let mut old = rusqlite::Connection::open_with_flags(path, flags)
                .map_err(self.sql("open the database to rotate it"))?;
            if let Some(c) = self.from.cipher() {
                c.apply(&old).map_err(self.sql("key the database"))?;
            }
            // Closing must not checkpoint: that deletes `<db>-wal` by name, which
            // after the rename may be the new file's.
            old.set_db_config(DbConfig::SQLITE_DBCONFIG_NO_CKPT_ON_CLOSE, true)
                .map_err(self.sql("configure the rotation's connection"))?;
            old.busy_timeout(self.opts.busy_timeout)
                .map_err(self.sql("set busy timeout"))?;
            // An exclusive lock, which any WAL connection open elsewhere refuses,
            // held until this connection closes.
            old.execute_batch("PRAGMA locking_mode = EXCLUSIVE")
                .map_err(self.sql("take the database exclusively"))?;
            let tables: i64 = old
                .query_row("SELECT count(*) FROM sqlite_schema", [], |r| r.get(0))
                .map_err(self.keyed("verify the key before a rotation"))?;
            let (busy, _, _): (i64, i64, i64) = old
                .query_row("PRAGMA wal_checkpoint(TRUNCATE)", [], |r| {
                    Ok((r.get(0)?, r.get(1)?, r.get(2)?))
                })
                .map_err(self.keyed("checkpoint before a rotation"))?;
            // In exclusive locking mode the lock a transaction takes stays after it.
            old.execute_batch("BEGIN EXCLUSIVE; COMMIT")
                .map_err(self.sql("take the database exclusively"))?;
            let wal_len = std::fs::metadata(wal_path(path)).map_or(0, |m| m.len());
            if busy != 0 || wal_len != 0 {
                return Err(Error::Locked {
                    op: "empty the WAL before a rotation",
                    path: path.to_path_buf(),
                });
            }
            pause_point("locked");
            self.progress(Step::Lock, 0.0);

            let journal = self.write_journal()?;
            pause_point("journal");

            let total = std::fs::metadata(path).map_or(1, |m| m.len().max(1));
            let result = self.copy(&mut old, total);
            let bytes = match result {
                Ok(b) => b,
                Err(e) => {
                    let _ = old.execute_batch("ROLLBACK");
                    let _ = old.execute_batch("DETACH DATABASE keel_new");
                    drop(old);
                    remove_copy(path)?;
                    std::fs::remove_file(journal_path(path))
                        .map_err(|e| Error::io("remove the rotation journal", path, e))?;
                    sync_dir(path)?;
                    return Err(e);
                }
            };
            pause_point("copied");
            self.finish_copy(tables)?;
            pause_point("synced");
            self.progress(Step::Sync, 0.95);

            // The commit point: after this block is synced, the new file wins.
            let old_stamp = FileStamp::of(path)
                .map_err(|e| Error::io("read the database's metadata", path, e))?;
            let jp = journal_path(path);
            journal
                .0
                .write_all_at(&second_block(&old_stamp), super::BLOCK as u64)
                .and_then(|_| journal.0.sync_all())
                .map_err(|e| Error::io("commit the rotation journal", &jp, e))?;
            pause_point("committed");

            std::fs::rename(new_path(path), path)
                .map_err(|e| Error::io("switch to the rotated file", path, e))?;
            sync_dir(path)?;
            pause_point("renamed");
            self.progress(Step::Switch, 0.99);

            std::fs::remove_file(&jp)
                .map_err(|e| Error::io("remove the rotation journal", &jp, e))?;
            sync_dir(path)?;
            pause_point("done");
            drop(old);
            drop(journal);
            // Wake the processes that watch this database: their next read or
            // write meets the new file.
            if let Ok(signal) = CommitSignal::open(path) {
                signal.post();
            }
            self.progress(Step::Done, 1.0);
            Ok(bytes)
        }

        /// The first block, durable before the copy exists; locked (`flock`)
        /// before its name appears, so no recovery takes it for an abandoned one.
        fn write_journal(&self) -> Result<JournalLock> {
            let jp = journal_path(self.path);
            let mut tmp = jp.as_os_str().to_owned();
            tmp.push(".tmp");
            let tmp = PathBuf::from(tmp);
            let op = "write the rotation journal";
            let mut o = std::fs::OpenOptions::new();
            o.read(true).write(true).create(true).truncate(true);
            std::os::unix::fs::OpenOptionsExt::mode(&mut o, 0o600);
            let f = o.open(&tmp).map_err(|e| Error::io(op, &tmp, e))?;
            let lock = JournalLock::try_take(f)
                .map_err(|e| Error::io(op, &tmp, e))?
                .ok_or_else(|| Error::Locked {
                    op: "start a key rotation while another runs",
                    path: self.path.to_path_buf(),
                })?;
            (&lock.0)
                .write_all(&first_block(&self.from.id(), &self.to.id()))
                .and_then(|_| lock.0.sync_all())
                .map_err(|e| Error::io(op, &tmp, e))?;
            std::fs::rename(&tmp, &jp).map_err(|e| Error::io(op, &jp, e))?;
            sync_dir(self.path)?;
            Ok(lock)
        }

        /// Export every table, index, trigger and view into `<db>-keelnew` under
        /// the new key, in one transaction on the attached copy.
        fn copy(&self, old: &mut rusqlite::Connection, total: u64) -> Result<u64> {
            let path = self.path;
            let new = new_path(path);
            remove_copy(path)?;
            let op = "copy the database under its new key";
            let (auto_vacuum, user_version, application_id): (i64, i64, i64) = old
                .query_row(
                    "SELECT (SELECT auto_vacuum FROM pragma_auto_vacuum), \
                     (SELECT user_version FROM pragma_user_version), \
                     (SELECT application_id FROM pragma_application_id)",
                    [],
                    |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)),
                )
                .map_err(self.sql(op))?;
            let key: Zeroizing<String> = match self.to.cipher() {
                Some(c) => c.raw_key_literal(),
                None => Zeroizing::new(String::new()),
            };
            let new_str = new.to_str().ok_or_else(|| {
                Error::io(
                    op,
                    &new,
                    std::io::Error::new(std::io::ErrorKind::InvalidInput, "path is not UTF-8"),
                )
            })?;
            old.execute(
                "ATTACH DATABASE ?1 AS keel_new KEY ?2",
                rusqlite::params![new_str, key.as_str()],
            )
            .map_err(self.sql(op))?;
            drop(key);
            let mut setup = format!(
                "PRAGMA keel_new.journal_mode = MEMORY; PRAGMA keel_new.synchronous = OFF; \
                 PRAGMA keel_new.cache_size = -2048; PRAGMA keel_new.auto_vacuum = {auto_vacuum};"
            );
            if let Side::Encrypted {
                plaintext_header, ..
            } = self.to
            {
                // An attached database takes SQLCipher's process-wide defaults,
                // not the main one's settings: the copy is a new file, with the
                // page HMAC of new files.
                setup.insert_str(
                    0,
                    &format!(
                        "PRAGMA keel_new.cipher_hmac_algorithm = {}; ",
                        PageMac::Sha256.pragma_name()
                    ),
                );
                if *plaintext_header {
                    setup.insert_str(0, "PRAGMA keel_new.cipher_plaintext_header_size = 32; ");
                }
            }
            old.execute_batch(&setup).map_err(self.sql(op))?;
            // One transaction on the copy (nothing is written to the database).
            old.execute_batch("BEGIN").map_err(self.sql(op))?;
            let copied = Arc::clone(&self.copied);
            let progress = self.opts.progress.clone();
            let new2 = new.clone();
            let mut last = -1.0f64;
            let mut calls = 0u64;
            old.progress_handler(
                1_000,
                Some(move || {
                    calls += 1;
                    if calls == 1 {
                        pause_point("copying");
                    }
                    // A stat every 64 calls keeps the handler's cost out of sight.
                    if calls % 64 != 1 {
                        return false;
                    }
                    let len = std::fs::metadata(&new2).map_or(0, |m| m.len());
                    copied.store(len, Ordering::Relaxed);
                    let f = (len as f64 / total as f64).min(1.0) * 0.9;
                    if let Some(p) = &progress {
                        if f - last >= 0.01 {
                            last = f;
                            p(Progress {
                                step: Step::Copy,
                                fraction: f,
                                bytes: len,
                            });
                        }
                    }
                    false
                }),
            )
            .map_err(self.sql(op))?;
            let r = old
                .query_row("SELECT sqlcipher_export('keel_new')", [], |_| Ok(()))
                .and_then(|_| {
                    old.execute_batch(&format!(
                        "PRAGMA keel_new.user_version = {user_version}; \
                         PRAGMA keel_new.application_id = {application_id}; COMMIT;"
                    ))
                });
            old.progress_handler(0, None::<fn() -> bool>)
                .map_err(self.sql(op))?;
            r.map_err(self.sql(op))?;
            old.execute_batch("DETACH DATABASE keel_new")
                .map_err(self.sql(op))?;
            let bytes = std::fs::metadata(&new).map_or(0, |m| m.len());
            self.copied.store(bytes, Ordering::Relaxed);
            self.progress(Step::Copy, 0.9);
            Ok(bytes)
        }

        /// Put the copy in WAL mode, check it opens with its key, and sync it and
        /// its directory.
        fn finish_copy(&self, tables: i64) -> Result<()> {
            let new = new_path(self.path);
            let op = "check the rotated file";
            let c = rusqlite::Connection::open_with_flags(
                &new,
                OpenFlags::SQLITE_OPEN_READ_WRITE | OpenFlags::SQLITE_OPEN_NO_MUTEX,
            )
            .map_err(|e| Error::sqlite(op, &new, e))?;
            if let Some(cipher) = self.to.cipher() {
                cipher.apply(&c).map_err(|e| Error::sqlite(op, &new, e))?;
            }
            let mode: String = c
                .query_row("PRAGMA journal_mode = WAL", [], |r| r.get(0))
                .map_err(|e| Error::sqlite(op, &new, e))?;
            let copied: i64 = c
                .query_row("SELECT count(*) FROM sqlite_schema", [], |r| r.get(0))
                .map_err(|e| Error::sqlite(op, &new, e))?;
            drop(c);
            if !mode.eq_ignore_ascii_case("wal") || copied != tables {
                return Err(Error::Corrupt {
                    op,
                    path: new,
                    detail: format!(
                        "journal mode {mode}, {copied} schema entries where the database has {tables}"
                    ),
                });
            }
            std::fs::File::open(&new)
                .and_then(|f| f.sync_all())
                .map_err(|e| Error::io("sync the rotated file", &new, e))?;
            sync_dir(self.path)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_torn_second_block_is_not_a_commit() {
        let from = KeyId::Salt([7; 16]);
        let mut bytes = first_block(&from, &KeyId::Plaintext);
        let stamp = FileStamp {
            dev: 1,
            ino: 2,
            len: 4096,
            mtime_ns: 5,
        };
        let second = second_block(&stamp);
        let whole = [bytes.clone(), second.clone()].concat();
        let j = parse_journal(&whole).unwrap();
        assert_eq!(j.from, from);
        assert_eq!(j.to, KeyId::Plaintext);
        assert_eq!(j.copied, Some(stamp));
        bytes.extend_from_slice(&second[..100]);
        bytes.resize(2 * BLOCK, 0);
        assert_eq!(parse_journal(&bytes).unwrap().copied, None);
        assert!(parse_journal(&whole[..BLOCK - 1]).is_none());
    }

    #[test]
    fn key_ids_round_trip_as_text() {
        for id in [KeyId::Plaintext, KeyId::Salt([0xab; 16])] {
            assert_eq!(KeyId::parse(&id.to_string()), Some(id));
        }
        assert_eq!(KeyId::parse("salt:12"), None);
    }
}
