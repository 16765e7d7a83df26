//! File identity: whose database is this, and does the WAL beside it belong to it?
//!
//! SQLite applies any `-wal` file whose frames are internally consistent, whatever
//! database it was written for: a WAL copied from another database, or left beside a
//! file restored from a backup, silently shows another database's pages, and the next
//! checkpoint makes them permanent. And SQLite opens any SQLite file, so keel would
//! add its tables to another application's database and switch it to WAL mode.
//!
//! With [`StoreOptions::keel_identity`](crate::options::StoreOptions::keel_identity) on (the
//! object layer turns it on), keel stamps every database it creates in the
//! database header, which lives in page 1 and so also in every WAL frame of page 1:
//!
//! * `application_id` (offset 68) = [`KEEL_APPLICATION_ID`] (`"keel"`): a keel file;
//! * `user_version` (offset 60) = the database's **epoch**: a random 32-bit value at
//!   creation, incremented (wrapping) by the first write of every new WAL — the first
//!   write after an open without a WAL, and the first after a checkpoint that copied
//!   every frame into the database file (the next write restarts the WAL).
//!
//! Before SQLite sees the files, the open checks (this module, no SQLite involved):
//!
//! 1. **A foreign file.** A non-empty SQLite file whose `application_id` is not
//!    keel's and which has tables but no `keel_meta` table (keel files from before the
//!    stamp have one; they are stamped on open) belongs to another application:
//!    [`Error::ForeignFile`], nothing written, unless
//!    [`StoreOptions::adopt_foreign`](crate::options::StoreOptions::adopt_foreign) is set.
//! 2. **A WAL that does not belong to the file.** Every frame of the WAL that SQLite
//!    would apply (salts equal to the WAL header's, an unbroken checksum chain, up to
//!    the last commit frame — SQLite's own rule) is read, and the epochs of its page-1
//!    frames, `first ..= last`, are compared with the database file's epoch `e`. A WAL
//!    restarts only after every frame of the previous one reached the file, so the
//!    file was at the WAL's start epoch (`first - 1` or `first`) then, and since then
//!    it can only have taken pages from this WAL: `first - 1 <= e <= last` (wrapping).
//!    Anything else — another database's WAL (random epochs), a backup of the file
//!    restored under a newer WAL (`e < first - 1`), an older WAL beside a newer file
//!    (`e > last`) — is [`Error::ForeignWal`], nothing written. It is a bad file, so
//!    `recover_corrupt` moves the database and its `-wal`/`-shm` aside together.
//!
//!    Only the page-1 images that follow the stamp are judged. Stamping a file (a
//!    keel file from before the stamp, an adopted one) commits into the WAL already
//!    beside it, behind page-1 images without keel's `application_id`; once a
//!    checkpoint copied every frame, the stamped file sits beside a WAL that still
//!    holds them until the next write restarts it. A keel file is
//!    never unstamped, so unstamped images *before* a stamped one are the file's own
//!    past; a WAL whose *latest* page 1 is not keel's is another database's.
//!
//! Limits, said plainly: a WAL none of whose valid frames is page 1 carries no epoch
//! and cannot be checked (keel's epoch bump writes page 1 at the start of every WAL it
//! starts); a WAL whose first transaction was not keel's bump (another process's
//! write, a reader holding the old WAL when the bump ran) admits a backup one epoch
//! older than it should; and random epochs of two databases collide with a
//! probability of about one in four billion per WAL.

use std::io::Read;
use std::path::Path;

use crate::error::{Error, Result};
use crate::paths::wal_path;

/// `application_id` keel writes into the header of the databases it creates
/// (`"keel"` in ASCII), so `file(1)`-style tools and keel itself recognise them.
pub const KEEL_APPLICATION_ID: u32 = 0x6B65_656C;

const WAL_HEADER: usize = 32;
const FRAME_HEADER: usize = 24;

/// The two stamp fields of a database header (or a WAL image of page 1).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Stamp {
    pub(crate) application_id: u32,
    /// `user_version`: the epoch (see the module docs).
    pub(crate) epoch: u32,
}

impl Stamp {
    pub(crate) fn from_header(h: &[u8]) -> Option<Stamp> {
        if h.len() < 100 {
            return None;
        }
        let be = |o: usize| u32::from_be_bytes([h[o], h[o + 1], h[o + 2], h[o + 3]]);
        Some(Stamp {
            application_id: be(68),
            epoch: be(60),
        })
    }

    pub(crate) fn is_keel(&self) -> bool {
        self.application_id == KEEL_APPLICATION_ID
    }
}

/// SQLite's WAL checksum over `data` (a multiple of 8 bytes), continuing `s`.
fn wal_checksum(big_endian: bool, data: &[u8], s: (u32, u32)) -> (u32, u32) {
    let (mut s0, mut s1) = s;
    for w in data.chunks_exact(8) {
        let (x0, x1) = if big_endian {
            (
                u32::from_be_bytes([w[0], w[1], w[2], w[3]]),
                u32::from_be_bytes([w[4], w[5], w[6], w[7]]),
            )
        } else {
            (
                u32::from_le_bytes([w[0], w[1], w[2], w[3]]),
                u32::from_le_bytes([w[4], w[5], w[6], w[7]]),
            )
        };
        s0 = s0.wrapping_add(x0).wrapping_add(s1);
        s1 = s1.wrapping_add(x1).wrapping_add(s0);
    }
    (s0, s1)
}

/// The stamps of every page-1 image SQLite would apply from the WAL at `wal`
/// (valid frames up to the last commit frame). Empty when there is no valid WAL.
/// Streams the file one frame at a time: memory does not grow with the WAL.
pub(crate) fn wal_page1_stamps(wal: &Path) -> std::io::Result<Vec<Stamp>> {
    match std::fs::File::open(wal) {
        Ok(f) => scan_wal(std::io::BufReader::with_capacity(1 << 16, f)),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(Vec::new()),
        Err(e) => Err(e),
    }
}

fn be32(b: &[u8], o: usize) -> u32 {
    u32::from_be_bytes([b[o], b[o + 1], b[o + 2], b[o + 3]])
}

/// Read exactly `buf.len()` bytes; `false` at a clean or partial end of file.
fn read_full(r: &mut impl Read, buf: &mut [u8]) -> std::io::Result<bool> {
    let mut n = 0;
    while n < buf.len() {
        match r.read(&mut buf[n..]) {
            Ok(0) => return Ok(false),
            Ok(k) => n += k,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(true)
}

/// SQLite's rule for which frames count (`walIndexRecover`): a valid header, then
/// frames whose salts match it and whose cumulative checksums chain, up to the last
/// commit frame.
fn scan_wal(mut r: impl Read) -> std::io::Result<Vec<Stamp>> {
    let mut h = [0u8; WAL_HEADER];
    if !read_full(&mut r, &mut h)? {
        return Ok(Vec::new());
    }
    let magic = be32(&h, 0);
    if magic & !1 != 0x377f_0682 {
        return Ok(Vec::new());
    }
    let big = magic & 1 == 1;
    let page_size = match be32(&h, 8) {
        1 => 65_536,
        p if (512..=32_768).contains(&p) && p.is_power_of_two() => p as usize,
        _ => return Ok(Vec::new()),
    };
    let (salt1, salt2) = (be32(&h, 16), be32(&h, 20));
    let mut sum = wal_checksum(big, &h[..24], (0, 0));
    if sum != (be32(&h, 24), be32(&h, 28)) {
        return Ok(Vec::new());
    }
    let mut committed = Vec::new();
    let mut since_commit = Vec::new();
    let mut frame = vec![0u8; FRAME_HEADER + page_size];
    while read_full(&mut r, &mut frame)? {
        let (fh, page) = frame.split_at(FRAME_HEADER);
        if be32(fh, 8) != salt1 || be32(fh, 12) != salt2 {
            break;
        }
        sum = wal_checksum(big, &fh[..8], sum);
        sum = wal_checksum(big, page, sum);
        if sum != (be32(fh, 16), be32(fh, 20)) {
            break;
        }
        if be32(fh, 0) == 1 {
            if let Some(s) = Stamp::from_header(page) {
                since_commit.push(s);
            }
        }
        if be32(fh, 4) != 0 {
            committed.append(&mut since_commit);
        }
    }
    Ok(committed)
}

/// The stamp in the database file's header and the WAL's 32-byte header, read
/// together to notice another process changing them.
fn read_heads(path: &Path, wal: &Path) -> std::io::Result<(Option<Stamp>, Vec<u8>)> {
    let mut h = Vec::with_capacity(100);
    std::fs::File::open(path)?.take(100).read_to_end(&mut h)?;
    let mut w = Vec::with_capacity(WAL_HEADER);
    match std::fs::File::open(wal) {
        Ok(f) => {
            f.take(WAL_HEADER as u64).read_to_end(&mut w)?;
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => return Err(e),
    }
    Ok((Stamp::from_header(&h), w))
}

/// Does the WAL beside a database stamped `db` belong to it (module docs, check 2)?
///
/// Another process may be using the database (an app and its extension): between
/// reading the file's header and the WAL it may checkpoint or restart the WAL, and
/// the two reads would then come from different moments. So both heads are read
/// before and after the WAL, and only a verdict over an unchanged pair counts; if they
/// keep changing, a live writer is vouching for the files and the check stands aside.
pub(crate) fn check_wal(path: &Path, wal: &Path, db: Stamp) -> Result<()> {
    if !db.is_keel() {
        return Ok(());
    }
    let io = |e| Error::io("read WAL to check it", wal, e);
    for _ in 0..3 {
        let before = read_heads(path, wal).map_err(io)?;
        let stamps = wal_page1_stamps(wal).map_err(io)?;
        let after = read_heads(path, wal).map_err(io)?;
        if before == after {
            return match after.0 {
                Some(db) if db.is_keel() => judge_wal(path, db, &stamps),
                _ => Ok(()),
            };
        }
        std::thread::sleep(std::time::Duration::from_millis(2));
    }
    tracing::debug!("database file or WAL changing under the check: another process writes it");
    Ok(())
}

fn judge_wal(path: &Path, db: Stamp, stamps: &[Stamp]) -> Result<()> {
    let refuse = |detail: String| {
        Err(Error::ForeignWal {
            path: path.to_path_buf(),
            detail,
        })
    };
    // Only what follows the stamp is judged. Stamping (a keel file from before the
    // stamp, an adopted file) commits into the WAL already there, behind page-1
    // images without keel's id; a keel file is never unstamped again. So unstamped
    // images followed by stamped ones are that file's own past, while a WAL whose
    // latest page 1 is not keel's was written for another database.
    if let Some(other) = stamps.last().filter(|s| !s.is_keel()) {
        return refuse(format!(
            "its -wal holds page 1 of a database with application_id {:#x} (not keel)",
            other.application_id
        ));
    }
    let since_stamp = stamps
        .iter()
        .rposition(|s| !s.is_keel())
        .map_or(stamps, |i| &stamps[i + 1..]);
    let (Some(first), Some(last)) = (since_stamp.first(), since_stamp.last()) else {
        return Ok(());
    };
    let lo = first.epoch.wrapping_sub(1);
    let span = last.epoch.wrapping_sub(lo);
    if db.epoch.wrapping_sub(lo) <= span {
        return Ok(());
    }
    let ahead = db.epoch.wrapping_sub(last.epoch);
    let behind = lo.wrapping_sub(db.epoch);
    refuse(if ahead < 1 << 16 {
        format!(
            "the database file (epoch {:08x}) is newer than its -wal (epochs {:08x}..={:08x}): a stale WAL",
            db.epoch, first.epoch, last.epoch
        )
    } else if behind < 1 << 16 {
        format!(
            "the database file (epoch {:08x}) is older than its -wal (epochs {:08x}..={:08x}): a backup restored under a newer WAL?",
            db.epoch, first.epoch, last.epoch
        )
    } else {
        format!(
            "the -wal (epochs {:08x}..={:08x}) was written for another database (file epoch {:08x})",
            first.epoch, last.epoch, db.epoch
        )
    })
}

/// Bump the epoch inside the writer's open transaction (the first write of a new
/// WAL). A failure is logged and leaves the group alone: the stamp is a check, the
/// user's writes matter more. Returns whether the bump was made.
pub(crate) fn bump_epoch(conn: &rusqlite::Connection, path: &Path) -> bool {
    let r = conn
        .query_row("PRAGMA user_version", [], |r| r.get::<_, i64>(0))
        .and_then(|v| {
            let next = (v as u32).wrapping_add(1) as i32;
            conn.execute_batch(&format!("PRAGMA user_version = {next}"))
        });
    match r {
        Ok(()) => true,
        Err(e) => {
            tracing::warn!(path = %path.display(), error = %e, "could not bump the identity epoch");
            false
        }
    }
}

/// Percent-encode the characters SQLite URIs give meaning to.
fn uri_path(path: &Path) -> String {
    let mut s = String::from("file:");
    for c in path.to_string_lossy().chars() {
        match c {
            '%' => s.push_str("%25"),
            '?' => s.push_str("%3f"),
            '#' => s.push_str("%23"),
            c => s.push(c),
        }
    }
    s
}

/// Table names of the main file alone, read through an `immutable` read-only
/// connection: no lock, no `-wal`/`-shm` created, nothing written.
fn main_file_tables(path: &Path) -> Result<Vec<String>> {
    use rusqlite::OpenFlags as F;
    let op = "inspect a database keel did not create";
    let c = rusqlite::Connection::open_with_flags(
        format!("{}?immutable=1", uri_path(path)),
        F::SQLITE_OPEN_READ_ONLY | F::SQLITE_OPEN_URI | F::SQLITE_OPEN_NO_MUTEX,
    )
    .map_err(|e| Error::sqlite(op, path, e))?;
    let mut st = c
        .prepare("SELECT name FROM sqlite_schema WHERE type = 'table'")
        .map_err(|e| Error::sqlite(op, path, e))?;
    let rows = st
        .query_map([], |r| r.get::<_, String>(0))
        .map_err(|e| Error::sqlite(op, path, e))?;
    rows.collect::<rusqlite::Result<Vec<_>>>()
        .map_err(|e| Error::sqlite(op, path, e))
}

/// The identity checks of the prepare phase on an existing file (after the header
/// checks: a file that is not an SQLite file was refused there).
pub(crate) fn check_at_open(path: &Path, wal: &Path, adopt_foreign: bool) -> Result<()> {
    let mut header = Vec::with_capacity(100);
    std::fs::File::open(path)
        .and_then(|f| f.take(100).read_to_end(&mut header))
        .map_err(|e| Error::io("read database header", path, e))?;
    if header.len() < 100 || !header.starts_with(b"SQLite format 3\0") {
        // Empty (a new database, or one whose pages are all still in its WAL) or
        // torn (left to SQLite's recovery): no stamp to check against.
        return Ok(());
    }
    check_existing(path, wal, &header, adopt_foreign)
}

/// Check, without opening it through SQLite and without writing anything, that the
/// `-wal` beside the keel database at `path` belongs to it (the same check the open
/// makes at open; see `docs/durability.md`); `keel check` uses it.
///
/// ```
/// let dir = tempfile::tempdir().unwrap();
/// let p = dir.path().join("none.db");
/// assert!(keel_storage::verify_wal_identity(&p).is_ok()); // nothing to check
/// ```
pub fn verify_wal_identity(path: &Path) -> Result<()> {
    let mut header = Vec::with_capacity(100);
    match std::fs::File::open(path) {
        Ok(f) => {
            f.take(100)
                .read_to_end(&mut header)
                .map_err(|e| Error::io("read database header", path, e))?;
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
        Err(e) => return Err(Error::io("read database header", path, e)),
    }
    match Stamp::from_header(&header) {
        Some(stamp) => check_wal(path, &wal_path(path), stamp),
        None => Ok(()),
    }
}

/// Create the missing directories of `dir` with mode 0700, whatever the umask: a
/// database directory is private to the app, like the 0600 database file.
pub(crate) fn create_private_dirs(dir: &Path) -> std::io::Result<()> {
    let mut missing = Vec::new();
    let mut d = dir;
    while !d.as_os_str().is_empty() && !d.exists() {
        missing.push(d.to_path_buf());
        match d.parent() {
            Some(p) => d = p,
            None => break,
        }
    }
    for m in missing.iter().rev() {
        let mut b = std::fs::DirBuilder::new();
        #[cfg(unix)]
        std::os::unix::fs::DirBuilderExt::mode(&mut b, 0o700);
        match b.create(m) {
            Ok(()) => {
                // mkdir applies the umask (it can only clear bits); set the mode
                // exactly so a umask like 0o077 or 0o777 gives the same result.
                #[cfg(unix)]
                std::fs::set_permissions(m, std::os::unix::fs::PermissionsExt::from_mode(0o700))?;
            }
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists && m.is_dir() => {}
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

/// The identity checks of the prepare phase, on a file whose 100-byte header is
/// `header` (already checked to be an SQLite header).
fn check_existing(path: &Path, wal: &Path, header: &[u8], adopt_foreign: bool) -> Result<()> {
    let Some(stamp) = Stamp::from_header(header) else {
        return Ok(());
    };
    if stamp.is_keel() {
        return check_wal(path, wal, stamp);
    }
    // The latest page 1 may still be in the WAL (a first session that never
    // checkpointed it, or a checkpoint torn by a power loss): if that one is keel's,
    // the file is keel's.
    let in_wal = wal_page1_stamps(wal).unwrap_or_default();
    if in_wal.last().is_some_and(Stamp::is_keel) {
        return Ok(());
    }
    // Only a positive finding refuses a file: if the main file cannot be read on its
    // own (pages torn by a power loss that the WAL repairs), SQLite's recovery judges.
    let tables = match main_file_tables(path) {
        Ok(t) => t,
        Err(e) => {
            tracing::debug!(error = %e, "could not list the main file's tables; leaving it to SQLite");
            return Ok(());
        }
    };
    let keel_legacy = tables.iter().any(|t| t == "keel_meta");
    let user_tables: Vec<&String> = tables
        .iter()
        .filter(|t| !t.starts_with("sqlite_"))
        .collect();
    if keel_legacy || user_tables.is_empty() || adopt_foreign {
        if !keel_legacy && !user_tables.is_empty() {
            tracing::warn!(
                tables = user_tables.len(),
                "adopting an SQLite database keel did not create (adopt_foreign)"
            );
        }
        return Ok(());
    }
    let mut names: Vec<String> = user_tables.iter().take(5).map(|s| (*s).clone()).collect();
    if user_tables.len() > 5 {
        names.push("…".into());
    }
    Err(Error::ForeignFile {
        path: path.to_path_buf(),
        detail: format!(
            "an SQLite database of another application (application_id {:#x}, tables {})",
            stamp.application_id,
            names.join(", ")
        ),
    })
}

/// Stamp the database inside the schema step's transaction (it commits with keel's
/// tables, after the open barrier when there is one): a new file, a keel file from
/// before the stamp, or an adopted one. A stamped file is left alone.
pub(crate) fn stamp_if_needed(conn: &rusqlite::Connection, path: &Path) -> Result<bool> {
    let op = "stamp the database identity";
    let app: i64 = conn
        .query_row("PRAGMA application_id", [], |r| r.get(0))
        .map_err(|e| Error::sqlite(op, path, e))?;
    if app as u32 == KEEL_APPLICATION_ID {
        return Ok(false);
    }
    let mut b = [0u8; 4];
    getrandom_bytes(&mut b);
    // A random start: two databases' epochs (and so their WALs) do not overlap.
    // Stored as the signed 32-bit value SQLite keeps in the header.
    let epoch = u32::from_be_bytes(b);
    conn.execute_batch(&format!(
        "PRAGMA application_id = {}; PRAGMA user_version = {};",
        KEEL_APPLICATION_ID as i32, epoch as i32
    ))
    .map_err(|e| Error::sqlite(op, path, e))?;
    Ok(true)
}

/// Random bytes from the OS (`/dev/urandom`): no extra crate.
fn getrandom_bytes(out: &mut [u8]) {
    let mut f = std::fs::File::open("/dev/urandom").ok();
    if let Some(f) = f.as_mut() {
        if f.read_exact(out).is_ok() {
            return;
        }
    }
    // Fallback: time and address entropy (uniqueness, not secrecy, is what matters).
    let t = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos())
        .unwrap_or(0);
    let x = (t as u64) ^ (out.as_ptr() as u64).rotate_left(17) ^ u64::from(std::process::id());
    for (i, b) in out.iter_mut().enumerate() {
        *b = (x >> ((i % 8) * 8)) as u8;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn k(epoch: u32) -> Stamp {
        Stamp {
            application_id: KEEL_APPLICATION_ID,
            epoch,
        }
    }

    fn verdict(db: u32, wal: &[u32]) -> std::result::Result<(), String> {
        let stamps: Vec<Stamp> = wal.iter().map(|e| k(*e)).collect();
        judge_wal(Path::new("x.db"), k(db), &stamps).map_err(|e| e.to_string())
    }

    #[test]
    fn the_file_epoch_must_lie_between_the_wal_start_and_its_last_page_1() {
        let e = 1000;
        assert!(verdict(e, &[e + 1, e + 1, e + 2]).is_ok()); // WAL started on this file
        assert!(verdict(e + 1, &[e + 1]).is_ok()); // partly checkpointed
        assert!(verdict(e + 2, &[e + 1, e + 2]).is_ok());
        assert!(verdict(e, &[e]).is_ok()); // a first write that was not a bump
        assert!(verdict(u32::MAX, &[0, 1]).is_ok()); // wrapping
        assert!(verdict(e, &[]).is_ok()); // nothing to compare with
        let older = verdict(e - 1, &[e + 1]).unwrap_err();
        assert!(older.contains("older"), "{older}");
        let newer = verdict(e + 3, &[e + 1, e + 2]).unwrap_err();
        assert!(newer.contains("newer"), "{newer}");
        let other = verdict(e, &[0x8000_0000]).unwrap_err();
        assert!(other.contains("another database"), "{other}");
        let plain = judge_wal(
            Path::new("x.db"),
            k(e),
            &[Stamp {
                application_id: 0,
                epoch: e,
            }],
        )
        .unwrap_err()
        .to_string();
        assert!(plain.contains("not keel"), "{plain}");
        // Stamped into a WAL that held unstamped page-1 images (an upgrade from a
        // keel before the stamp, an adoption): only what follows the stamp counts.
        let unstamped = Stamp {
            application_id: 0,
            epoch: 0,
        };
        assert!(judge_wal(Path::new("x.db"), k(e), &[unstamped, k(e)]).is_ok());
        assert!(judge_wal(Path::new("x.db"), k(e + 1), &[unstamped, k(e), k(e + 1)]).is_ok());
        let stale = judge_wal(Path::new("x.db"), k(e + 5), &[unstamped, k(e)])
            .unwrap_err()
            .to_string();
        assert!(stale.contains("newer"), "{stale}");
        let after = judge_wal(Path::new("x.db"), k(e), &[k(e), unstamped])
            .unwrap_err()
            .to_string();
        assert!(after.contains("not keel"), "{after}");
    }

    #[test]
    fn a_read_only_file_is_unreadable_not_an_sqlite_error() {
        // Root ignores file modes, so the read-only open is asked for explicitly:
        // SQLite reports the same SQLITE_READONLY as for a 0444 file.
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("ro.db");
        rusqlite::Connection::open(&p)
            .unwrap()
            .execute_batch("CREATE TABLE t(x)")
            .unwrap();
        let ro =
            rusqlite::Connection::open_with_flags(&p, rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY)
                .unwrap();
        let e = ro.execute_batch("PRAGMA application_id = 1").unwrap_err();
        assert!(matches!(
            Error::sqlite("stamp", &p, e),
            Error::Unreadable { .. }
        ));
    }

    #[test]
    fn checksum_chain_and_salts_decide_which_frames_count() {
        // A WAL written by SQLite itself: every page-1 frame is found, a frame with a
        // broken checksum ends the scan.
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("w.db");
        let c = rusqlite::Connection::open(&p).unwrap();
        c.execute_batch(
            "PRAGMA journal_mode=WAL; PRAGMA wal_autocheckpoint=0; PRAGMA application_id=1801807212; PRAGMA user_version=77; CREATE TABLE t(x);",
        )
        .unwrap();
        c.set_db_config(
            rusqlite::config::DbConfig::SQLITE_DBCONFIG_NO_CKPT_ON_CLOSE,
            true,
        )
        .unwrap();
        let wal = wal_path(&p);
        let stamps = wal_page1_stamps(&wal).unwrap();
        assert!(!stamps.is_empty());
        assert!(stamps.iter().any(|s| s.epoch == 77 && s.is_keel()));
        drop(c);
        let mut b = std::fs::read(&wal).unwrap();
        // Salts of the first frame no longer match the header: nothing counts.
        b[32 + 8] ^= 0xff;
        assert!(scan_wal(&b[..]).unwrap().is_empty());
        b[32 + 8] ^= 0xff;
        assert_eq!(scan_wal(&b[..]).unwrap(), stamps);
        b[24] ^= 0xff; // header checksum
        assert!(scan_wal(&b[..]).unwrap().is_empty());
    }
}
