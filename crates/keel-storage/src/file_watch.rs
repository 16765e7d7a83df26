//! A watch on a database's own files: a keel thread (`keel-watch`) that sleeps
//! in the kernel until some process writes to `<db>-wal` (or, on Linux and
//! Android, `<db>`), then asks its callback to look for a commit.
//!
//! **Why a write alone is not enough.** A commit in WAL mode writes its frames to
//! `<db>-wal` first and publishes them in the shared-memory index (`<db>-shm`, a
//! mapping no file event reports) only after the sync its policy asks for. So a
//! write says "a commit is under way", not "it is visible": a look made at the
//! write may come too early. The watch therefore looks at once and then again on a
//! schedule — 1 ms after the previous look, doubling to at most 64 ms — until
//! [`SETTLE`] has passed since the last write. A commit that becomes visible within
//! that window is seen at most 64 ms later; the schedule ends early once a look
//! finds a commit with no write since the previous look (SQLite's write lock
//! admits one writer at a time, and each writes before it publishes: the commit in
//! flight at the previous look was the only one, and it is now published).
//! A burst of writes gives one look per millisecond at most, and wakes the
//! thread about twice per look, never once per write: once a write is noted,
//! the thread sleeps until its look without watching the files, and the kernel
//! keeps (and merges) the events of the writes meanwhile.
//!
//! **Cost.** While no process writes, the thread is blocked without a timeout:
//! no wake-up, no CPU. Each burst of writes (this process's own included: a file
//! event does not say who wrote) costs a few dozen looks over [`SETTLE`], each as
//! cheap as the callback makes it (for keel: one `PRAGMA data_version`), and at
//! most two wake-ups of the thread per millisecond while it lasts
//! ([`FileWatch::wakes`] counts them).
//!
//! * **Linux and Android**: inotify. `IN_MODIFY` watches on `<db>` and
//!   `<db>-wal`, and an `IN_CREATE`/`IN_MOVED_TO` watch on the folder for a WAL made
//!   anew (after every connection closed it), so writes to other files in the
//!   folder wake nothing. inotify watches paths: no descriptor on the database
//!   is opened.
//! * **Apple platforms** (`cfg(target_vendor = "apple")`): kqueue,
//!   `EVFILT_VNODE` (`NOTE_WRITE`, `NOTE_EXTEND`) on an `O_EVTONLY` descriptor of
//!   `<db>-wal`, and `NOTE_WRITE` on the folder (an entry changed: a WAL made anew
//!   is opened again). Only the WAL: closing any descriptor of a file drops every
//!   POSIX lock the process holds on it, and SQLite holds such locks on `<db>` —
//!   a watch that closed its descriptor of `<db>` would release them under
//!   SQLite. In WAL mode every commit writes the WAL, so nothing is lost. **This
//!   branch has never been compiled**: no Apple toolchain exists on the machines
//!   keel is built on.
//! * **Elsewhere** the watch never fires; callers look when they read or write.
//!
//! A write that the watch misses, merges or reports twice costs latency or one
//! look, never correctness: what changed is read from the database.
//!
//! ```
//! use keel_storage::file_watch::{FileWatch, Seen};
//! use std::sync::mpsc;
//! # let dir = tempfile::tempdir().unwrap();
//! let db = dir.path().join("app.db");
//! std::fs::write(&db, b"")?;
//! let (tx, rx) = mpsc::channel();
//! let watch = FileWatch::start(&db, move || {
//!     let _ = tx.send(());
//!     Seen::Nothing
//! })?;
//! std::fs::write(&db, b"written")?; // as another process's checkpoint would
//! # #[cfg(any(target_os = "linux", target_os = "android"))]
//! rx.recv_timeout(std::time::Duration::from_secs(10)).unwrap();
//! watch.stop();
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::error::{Error, Result};

/// How long after the last write the watch keeps looking (see the module docs):
/// longer than a commit's sync takes on a phone, even an `F_FULLFSYNC` one.
pub const SETTLE: Duration = Duration::from_secs(1);

/// The first look after a write comes this soon; then the gap doubles.
const FIRST_STEP: Duration = Duration::from_millis(1);

/// The longest gap between two looks while the watch settles.
const MAX_STEP: Duration = Duration::from_millis(64);

/// The shortest gap between two looks: a burst of writes coalesces into one.
const MIN_GAP: Duration = Duration::from_millis(1);

/// What a look found (the callback's answer).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Seen {
    /// No commit of another connection since the previous look.
    Nothing,
    /// Another connection committed since the previous look.
    Commit,
    /// The look could not be made now (say, the last one's work is still
    /// queued): look again soon, even past [`SETTLE`].
    Later,
}

/// A running watch (see [`FileWatch::start`]). Dropping it stops the thread
/// without waiting for it; [`FileWatch::stop`] waits.
#[derive(Debug)]
pub struct FileWatch {
    stop: Option<sys::Stopper>,
    thread: Option<std::thread::JoinHandle<()>>,
    wakes: Arc<AtomicU64>,
}

impl FileWatch {
    /// Start a `keel-watch` thread that calls `on_write` after writes to the
    /// files of the database at `db` (see the module docs for when, and how
    /// often). The files need not exist yet.
    pub fn start(db: &Path, on_write: impl FnMut() -> Seen + Send + 'static) -> Result<FileWatch> {
        let files = Files::of(db)?;
        sys::start(files, Box::new(on_write))
    }

    /// Stop the thread and wait until it has ended and closed its descriptors
    /// (unless called on the watch's own thread, from its callback: then it ends
    /// once the callback returns).
    pub fn stop(mut self) {
        self.halt(true);
    }

    /// How often the thread has woken so far: each end of a wait, for a file
    /// event, a due look or the stop. What the watch costs a process that writes
    /// while it runs (see the module docs).
    pub fn wakes(&self) -> u64 {
        self.wakes.load(Ordering::Relaxed)
    }

    fn halt(&mut self, join: bool) {
        if let Some(s) = self.stop.take() {
            s.stop();
        }
        if let Some(t) = self.thread.take() {
            if join && t.thread().id() != std::thread::current().id() {
                let _ = t.join();
            }
        }
    }
}

impl Drop for FileWatch {
    fn drop(&mut self) {
        // No join: the last owner may drop it on the watch thread itself.
        self.halt(false);
    }
}

/// The paths a watch follows.
#[cfg_attr(
    not(any(target_os = "linux", target_os = "android", target_vendor = "apple")),
    allow(dead_code)
)]
#[derive(Debug, Clone)]
struct Files {
    dir: PathBuf,
    db: PathBuf,
    wal: PathBuf,
}

impl Files {
    fn of(db: &Path) -> Result<Files> {
        let name = db.file_name().ok_or_else(|| Error::Io {
            op: "watch the database's files",
            path: db.to_path_buf(),
            source: Arc::new(std::io::Error::other("the path names no file")),
        })?;
        let dir = match db.parent() {
            Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
            _ => PathBuf::from("."),
        };
        let mut wal = name.to_owned();
        wal.push("-wal");
        Ok(Files {
            db: dir.join(name),
            wal: dir.join(wal),
            dir,
        })
    }
}

/// When the next look is due, given what happened so far (the platform-free
/// half of the watch: the threads below feed it writes and time).
#[cfg_attr(
    not(any(target_os = "linux", target_os = "android", target_vendor = "apple")),
    allow(dead_code)
)]
#[derive(Debug)]
struct Schedule {
    /// A write arrived since the previous look.
    wrote: bool,
    /// The last write.
    last_write: Option<Instant>,
    /// The previous look.
    last_look: Option<Instant>,
    /// The next scheduled look (`None`: settled, sleep until a write).
    next: Option<Instant>,
    /// The gap before the scheduled look after the next one.
    step: Duration,
}

#[cfg_attr(
    not(any(target_os = "linux", target_os = "android", target_vendor = "apple")),
    allow(dead_code)
)]
impl Schedule {
    fn new() -> Schedule {
        Schedule {
            wrote: false,
            last_write: None,
            last_look: None,
            next: None,
            step: FIRST_STEP,
        }
    }

    /// A write happened now.
    fn write(&mut self, now: Instant) {
        self.wrote = true;
        self.last_write = Some(now);
        self.step = FIRST_STEP;
    }

    /// When to look next (`None`: no look is pending; wait for a write).
    fn due(&self) -> Option<Instant> {
        if self.wrote {
            // The first look comes at the write itself.
            return self.last_look.map(|t| t + MIN_GAP).or(self.last_write);
        }
        self.next
    }

    /// Make the look due at `now`, if one is, and plan the next.
    fn look(&mut self, now: Instant, look: &mut dyn FnMut() -> Seen) {
        match self.due() {
            Some(t) if t <= now => {}
            _ => return,
        }
        let wrote = std::mem::take(&mut self.wrote);
        let seen = look();
        let now = Instant::now();
        self.last_look = Some(now);
        let settling = self
            .last_write
            .is_some_and(|t| now.duration_since(t) < SETTLE);
        self.next = match seen {
            // The commit in flight at the previous look is published (module docs).
            Seen::Commit if !wrote => None,
            Seen::Later => Some(now + self.step),
            _ if settling => Some(now + self.step),
            _ => None,
        };
        self.step = (self.step * 2).min(MAX_STEP);
    }

    /// How long to block before the next look (`None`: until an event).
    fn timeout(&self, now: Instant) -> Option<Duration> {
        self.due().map(|t| t.saturating_duration_since(now))
    }

    /// Whether file events can wait until the next look: a write is noted
    /// already and its look is not due yet. Another write would only be noted
    /// again, so the thread sleeps until the look instead of waking for each
    /// write of a burst (the kernel keeps, and merges, the events meanwhile).
    fn noted(&self, now: Instant) -> bool {
        self.wrote && self.due().is_some_and(|t| t > now)
    }
}

/// Milliseconds for `poll(2)`, rounded up so a wait never ends before its time.
#[cfg(any(target_os = "linux", target_os = "android", target_vendor = "apple"))]
fn poll_ms(timeout: Option<Duration>) -> libc::c_int {
    match timeout {
        None => -1,
        Some(d) => {
            let ms = d.as_micros().div_ceil(1000);
            libc::c_int::try_from(ms).unwrap_or(libc::c_int::MAX)
        }
    }
}

#[cfg(any(target_os = "linux", target_os = "android", target_vendor = "apple"))]
#[allow(unsafe_code)]
mod sys {
    use super::*;
    use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};

    /// The write end of the stop pipe: writing (or dropping it) wakes the thread.
    #[derive(Debug)]
    pub(super) struct Stopper(OwnedFd);

    impl Stopper {
        pub(super) fn stop(self) {
            let b = [1u8];
            // SAFETY: `self.0` is an open pipe write end we own; `b` is a valid
            // 1-byte buffer. A failed write is fine: dropping the fd below closes
            // the pipe, which wakes the thread (POLLHUP / EV_EOF) all the same.
            unsafe {
                libc::write(self.0.as_raw_fd(), b.as_ptr().cast(), 1);
            }
        }
    }

    pub(super) fn io_err(op: &'static str, path: &Path, e: std::io::Error) -> Error {
        Error::Io {
            op,
            path: path.to_path_buf(),
            source: Arc::new(e),
        }
    }

    /// A close-on-exec pipe (read end, write end).
    fn pipe(path: &Path) -> Result<(OwnedFd, OwnedFd)> {
        let mut fds = [0 as libc::c_int; 2];
        // SAFETY: `fds` is a valid array of two ints for pipe(2) to fill.
        if unsafe { libc::pipe(fds.as_mut_ptr()) } != 0 {
            return Err(io_err(
                "create the watch's stop pipe",
                path,
                std::io::Error::last_os_error(),
            ));
        }
        // SAFETY: pipe(2) succeeded: both descriptors are open and ours alone.
        let (r, w) = unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) };
        for fd in [&r, &w] {
            // SAFETY: `fd` is open; F_SETFD with FD_CLOEXEC only sets a flag.
            unsafe {
                libc::fcntl(fd.as_raw_fd(), libc::F_SETFD, libc::FD_CLOEXEC);
            }
        }
        Ok((r, w))
    }

    /// What one wait ended with.
    pub(super) enum Wake {
        /// Stop was asked for (or the stop pipe closed).
        Stop,
        /// A watched file was written (or made anew).
        Write,
        /// The timeout passed, or only an event of no interest arrived.
        Nothing,
    }

    /// Run the watch loop on a `keel-watch` thread; `wait` blocks for events
    /// (at most the given time) and owns every descriptor it watches, which it
    /// closes when the thread ends.
    pub(super) fn spawn<W>(
        mut wait: W,
        mut on_write: Box<dyn FnMut() -> Seen + Send>,
        path: &Path,
    ) -> Result<FileWatch>
    where
        W: FnMut(RawFd, Option<Duration>) -> Wake + Send + 'static,
    {
        let (stop_r, stop_w) = pipe(path)?;
        let wakes = Arc::new(AtomicU64::new(0));
        let counted = Arc::clone(&wakes);
        let thread = std::thread::Builder::new()
            .name("keel-watch".into())
            .spawn(move || {
                let mut schedule = Schedule::new();
                loop {
                    let now = Instant::now();
                    let timeout = schedule.timeout(now);
                    let woke = if schedule.noted(now) {
                        wait_for_stop(stop_r.as_raw_fd(), timeout)
                    } else {
                        wait(stop_r.as_raw_fd(), timeout)
                    };
                    counted.fetch_add(1, Ordering::Relaxed);
                    match woke {
                        Wake::Stop => break,
                        Wake::Write => schedule.write(Instant::now()),
                        Wake::Nothing => {}
                    }
                    schedule.look(Instant::now(), &mut *on_write);
                }
                // The descriptors go with `wait` (and the pipe's read end) here,
                // before the thread ends.
                drop(wait);
            })
            .map_err(|e| io_err("start the keel-watch thread", path, e))?;
        Ok(FileWatch {
            stop: Some(Stopper(stop_w)),
            thread: Some(thread),
            wakes,
        })
    }

    /// Block until `stop` or `timeout`, leaving file events queued for the next
    /// wait ([`Schedule::noted`]).
    fn wait_for_stop(stop: RawFd, timeout: Option<Duration>) -> Wake {
        let mut fd = libc::pollfd {
            fd: stop,
            events: libc::POLLIN,
            revents: 0,
        };
        // SAFETY: `fd` is one valid pollfd for poll(2) to fill; `stop` is the
        // open read end of the stop pipe, owned by the thread's loop.
        let n = unsafe { libc::poll(&mut fd, 1, poll_ms(timeout)) };
        if n > 0 && fd.revents != 0 {
            Wake::Stop
        } else {
            Wake::Nothing
        }
    }

    #[cfg(any(target_os = "linux", target_os = "android"))]
    pub(super) fn start(
        files: Files,
        on_write: Box<dyn FnMut() -> Seen + Send>,
    ) -> Result<FileWatch> {
        let path = files.db.clone();
        let mut watch = super::linux::Inotify::new(files)?;
        spawn(
            move |stop, timeout| watch.wait(stop, timeout),
            on_write,
            &path,
        )
    }

    #[cfg(target_vendor = "apple")]
    pub(super) fn start(
        files: Files,
        on_write: Box<dyn FnMut() -> Seen + Send>,
    ) -> Result<FileWatch> {
        let path = files.db.clone();
        let mut watch = super::apple::Kqueue::new(files)?;
        spawn(
            move |stop, timeout| watch.wait(stop, timeout),
            on_write,
            &path,
        )
    }
}

/// inotify (`<sys/inotify.h>`).
#[cfg(any(target_os = "linux", target_os = "android"))]
#[allow(unsafe_code)]
mod linux {
    use super::sys::{io_err, Wake};
    use super::*;
    use std::ffi::CString;
    use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
    use std::os::unix::ffi::OsStrExt;

    /// Room for many events per read (each is 16 bytes plus a name).
    const BUF_WORDS: usize = 1024;

    pub(super) struct Inotify {
        fd: OwnedFd,
        files: Files,
        /// The folder's watch (a file made or moved in).
        dir: libc::c_int,
        /// The watches of `<db>` and `<db>-wal` that exist (-1: none).
        db: libc::c_int,
        wal: libc::c_int,
    }

    fn c_path(p: &Path) -> Result<CString> {
        CString::new(p.as_os_str().as_bytes())
            .map_err(|e| io_err("watch the database's files", p, std::io::Error::other(e)))
    }

    impl Inotify {
        pub(super) fn new(files: Files) -> Result<Inotify> {
            // SAFETY: inotify_init1 takes flags only and returns a new fd or -1.
            let fd = unsafe { libc::inotify_init1(libc::IN_NONBLOCK | libc::IN_CLOEXEC) };
            if fd < 0 {
                return Err(io_err(
                    "inotify_init1",
                    &files.db,
                    std::io::Error::last_os_error(),
                ));
            }
            // SAFETY: `fd` was just returned open by inotify_init1 and is owned here only.
            let fd = unsafe { OwnedFd::from_raw_fd(fd) };
            let mut w = Inotify {
                fd,
                files,
                dir: -1,
                db: -1,
                wal: -1,
            };
            w.dir = w.add(
                &w.files.dir.clone(),
                libc::IN_CREATE | libc::IN_MOVED_TO | libc::IN_ONLYDIR,
            );
            if w.dir < 0 {
                return Err(io_err(
                    "inotify_add_watch on the database's folder",
                    &w.files.dir,
                    std::io::Error::last_os_error(),
                ));
            }
            w.db = w.add(&w.files.db.clone(), libc::IN_MODIFY);
            w.wal = w.add(&w.files.wal.clone(), libc::IN_MODIFY);
            Ok(w)
        }

        /// Add (or find again: inotify gives the same watch for the same inode) a
        /// watch on `path`; -1 when the file does not exist or cannot be watched.
        fn add(&self, path: &Path, mask: u32) -> libc::c_int {
            let Ok(c) = c_path(path) else { return -1 };
            // SAFETY: `self.fd` is an open inotify fd and `c` a NUL-terminated path.
            unsafe { libc::inotify_add_watch(self.fd.as_raw_fd(), c.as_ptr(), mask) }
        }

        /// Block until `stop` or a watched write, or until `timeout`.
        pub(super) fn wait(&mut self, stop: RawFd, timeout: Option<Duration>) -> Wake {
            let mut fds = [
                libc::pollfd {
                    fd: self.fd.as_raw_fd(),
                    events: libc::POLLIN,
                    revents: 0,
                },
                libc::pollfd {
                    fd: stop,
                    events: libc::POLLIN,
                    revents: 0,
                },
            ];
            // SAFETY: `fds` is a valid array of two pollfd for poll(2) to fill.
            let n = unsafe { libc::poll(fds.as_mut_ptr(), 2, poll_ms(timeout)) };
            if n < 0 {
                // EINTR, or a failure to retry: the loop comes back here.
                return Wake::Nothing;
            }
            if fds[1].revents != 0 {
                return Wake::Stop;
            }
            if fds[0].revents & libc::POLLIN != 0 {
                return self.drain();
            }
            Wake::Nothing
        }

        /// Read every queued event; `Write` if one is about the database's files.
        fn drain(&mut self) -> Wake {
            let mut buf = [0u64; BUF_WORDS];
            let mut wrote = false;
            let mut renew = false;
            loop {
                // SAFETY: `buf` is a valid writable buffer of its size in bytes,
                // 8-byte aligned (inotify_event needs 4); `self.fd` is open.
                let n = unsafe {
                    libc::read(
                        self.fd.as_raw_fd(),
                        buf.as_mut_ptr().cast(),
                        std::mem::size_of_val(&buf),
                    )
                };
                if n <= 0 {
                    break;
                }
                let bytes = n as usize;
                let base = buf.as_ptr().cast::<u8>();
                let head = std::mem::size_of::<libc::inotify_event>();
                let mut at = 0;
                while at + head <= bytes {
                    // SAFETY: the kernel wrote whole events into `buf[..bytes]`;
                    // `at + head <= bytes` keeps the header inside what it wrote.
                    let ev: libc::inotify_event =
                        unsafe { std::ptr::read_unaligned(base.add(at).cast()) };
                    let name_len = ev.len as usize;
                    let name = if name_len > 0 && at + head + name_len <= bytes {
                        // SAFETY: the name (NUL-padded to `len`) follows the header
                        // inside the bytes the kernel wrote, as just checked.
                        let raw =
                            unsafe { std::slice::from_raw_parts(base.add(at + head), name_len) };
                        let end = raw.iter().position(|&b| b == 0).unwrap_or(raw.len());
                        &raw[..end]
                    } else {
                        &[][..]
                    };
                    if ev.mask & libc::IN_Q_OVERFLOW != 0 {
                        wrote = true; // events were lost: look
                        renew = true;
                    } else if ev.wd == self.dir {
                        let db_name = self.files.db.file_name().map(OsStrExt::as_bytes);
                        let wal_name = self.files.wal.file_name().map(OsStrExt::as_bytes);
                        if Some(name) == db_name || Some(name) == wal_name {
                            wrote = true;
                            renew = true;
                        }
                    } else if ev.wd == self.db || ev.wd == self.wal {
                        if ev.mask & libc::IN_MODIFY != 0 {
                            wrote = true;
                        }
                        if ev.mask & libc::IN_IGNORED != 0 {
                            // The file is gone (its watch with it).
                            if ev.wd == self.db {
                                self.db = -1;
                            } else {
                                self.wal = -1;
                            }
                        }
                    }
                    at += head + name_len;
                }
            }
            if renew {
                // A file made (or moved in) anew: watch the new inode.
                self.db = self.add(&self.files.db.clone(), libc::IN_MODIFY);
                self.wal = self.add(&self.files.wal.clone(), libc::IN_MODIFY);
            }
            if wrote {
                Wake::Write
            } else {
                Wake::Nothing
            }
        }
    }
}

/// kqueue (`<sys/event.h>`). Never compiled on this project's machines.
#[cfg(target_vendor = "apple")]
#[allow(unsafe_code)]
mod apple {
    use super::sys::{io_err, Wake};
    use super::*;
    use std::ffi::CString;
    use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
    use std::os::unix::ffi::OsStrExt;

    /// The kqueue and what it watches; each registration is known by its
    /// descriptor (`ident`), so no `udata` is needed.
    pub(super) struct Kqueue {
        kq: OwnedFd,
        files: Files,
        dir: OwnedFd,
        /// The WAL's descriptor and inode, while it exists.
        wal: Option<(OwnedFd, u64)>,
        /// Whether the stop pipe is registered yet (done at the first wait: the
        /// pipe is made after the watch).
        stop_added: bool,
    }

    fn open_evtonly(path: &Path) -> std::io::Result<OwnedFd> {
        let c = CString::new(path.as_os_str().as_bytes()).map_err(std::io::Error::other)?;
        // SAFETY: `c` is a NUL-terminated path; O_EVTONLY opens for event
        // notifications only (no read or write access, no hold on the volume).
        let fd = unsafe { libc::open(c.as_ptr(), libc::O_EVTONLY | libc::O_CLOEXEC) };
        if fd < 0 {
            return Err(std::io::Error::last_os_error());
        }
        // SAFETY: open(2) succeeded: `fd` is open and ours alone.
        Ok(unsafe { OwnedFd::from_raw_fd(fd) })
    }

    fn inode(path: &Path) -> Option<u64> {
        use std::os::unix::fs::MetadataExt;
        std::fs::metadata(path).ok().map(|m| m.ino())
    }

    impl Kqueue {
        pub(super) fn new(files: Files) -> Result<Kqueue> {
            // SAFETY: kqueue() takes no arguments and returns a new fd or -1.
            let kq = unsafe { libc::kqueue() };
            if kq < 0 {
                return Err(io_err("kqueue", &files.db, std::io::Error::last_os_error()));
            }
            // SAFETY: `kq` was just returned open by kqueue() and is owned here only.
            let kq = unsafe { OwnedFd::from_raw_fd(kq) };
            // SAFETY: `kq` is open; FD_CLOEXEC only sets a flag.
            unsafe {
                libc::fcntl(kq.as_raw_fd(), libc::F_SETFD, libc::FD_CLOEXEC);
            }
            let dir = open_evtonly(&files.dir)
                .map_err(|e| io_err("open the database's folder for events", &files.dir, e))?;
            let mut w = Kqueue {
                kq,
                files,
                dir,
                wal: None,
                stop_added: false,
            };
            w.register(w.dir.as_raw_fd(), libc::EVFILT_VNODE, libc::NOTE_WRITE)
                .map_err(|e| io_err("kevent on the database's folder", &w.files.dir, e))?;
            w.renew_wal();
            Ok(w)
        }

        /// Add (or replace) the registration of `fd` for `filter` with `fflags`.
        fn register(&self, fd: RawFd, filter: i16, fflags: u32) -> std::io::Result<()> {
            let change = libc::kevent {
                ident: fd as libc::uintptr_t,
                filter,
                flags: libc::EV_ADD | libc::EV_CLEAR,
                fflags,
                data: 0,
                udata: std::ptr::null_mut(),
            };
            // SAFETY: `self.kq` is an open kqueue; `change` is one valid kevent
            // read by the call; no events are asked back (null list, 0 entries).
            let n = unsafe {
                libc::kevent(
                    self.kq.as_raw_fd(),
                    &change,
                    1,
                    std::ptr::null_mut(),
                    0,
                    std::ptr::null(),
                )
            };
            if n < 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        }

        /// Watch the WAL that is at its path now (a new one after it was made
        /// anew); true if that changed what is watched. Closing the old
        /// descriptor removes its registration and drops no SQLite lock: SQLite
        /// locks `<db>` and `<db>-shm`, never the WAL.
        fn renew_wal(&mut self) -> bool {
            let now = inode(&self.files.wal);
            if now == self.wal.as_ref().map(|(_, ino)| *ino) {
                return false;
            }
            self.wal = None;
            let Some(ino) = now else { return true };
            let Ok(fd) = open_evtonly(&self.files.wal) else {
                return true;
            };
            let flags = libc::NOTE_WRITE
                | libc::NOTE_EXTEND
                | libc::NOTE_DELETE
                | libc::NOTE_RENAME
                | libc::NOTE_REVOKE;
            if self
                .register(fd.as_raw_fd(), libc::EVFILT_VNODE, flags)
                .is_ok()
            {
                self.wal = Some((fd, ino));
            }
            true
        }

        /// Block until `stop` or a watched write, or until `timeout`.
        pub(super) fn wait(&mut self, stop: RawFd, timeout: Option<Duration>) -> Wake {
            if !self.stop_added {
                if self.register(stop, libc::EVFILT_READ, 0).is_err() {
                    return Wake::Stop; // nothing could stop the thread
                }
                self.stop_added = true;
            }
            let ts = timeout.map(|d| libc::timespec {
                tv_sec: d.as_secs().min(i64::MAX as u64) as libc::time_t,
                tv_nsec: d.subsec_nanos() as libc::c_long,
            });
            let ts_ptr = ts
                .as_ref()
                .map_or(std::ptr::null(), |t| t as *const libc::timespec);
            // SAFETY: an all-zero kevent is a valid value of this plain C struct.
            let mut events: [libc::kevent; 8] = unsafe { std::mem::zeroed() };
            // SAFETY: `self.kq` is open; `events` has room for its length in
            // kevents; `ts_ptr` is null (wait without timeout) or points at `ts`,
            // alive for the call.
            let n = unsafe {
                libc::kevent(
                    self.kq.as_raw_fd(),
                    std::ptr::null(),
                    0,
                    events.as_mut_ptr(),
                    events.len() as libc::c_int,
                    ts_ptr,
                )
            };
            if n <= 0 {
                return Wake::Nothing; // timeout, or EINTR
            }
            let mut wrote = false;
            let mut renew = false;
            for ev in &events[..n as usize] {
                let fd = ev.ident as RawFd;
                if fd == stop {
                    return Wake::Stop;
                }
                if fd == self.dir.as_raw_fd() {
                    renew = true; // an entry changed: the WAL may be new
                } else if self.wal.as_ref().is_some_and(|(w, _)| w.as_raw_fd() == fd) {
                    if ev.fflags & (libc::NOTE_WRITE | libc::NOTE_EXTEND) != 0 {
                        wrote = true;
                    }
                    if ev.fflags & (libc::NOTE_DELETE | libc::NOTE_RENAME | libc::NOTE_REVOKE) != 0
                    {
                        renew = true;
                    }
                }
            }
            if renew && self.renew_wal() {
                wrote = true;
            }
            if wrote {
                Wake::Write
            } else {
                Wake::Nothing
            }
        }
    }
}

#[cfg(not(any(target_os = "linux", target_os = "android", target_vendor = "apple")))]
mod sys {
    use super::*;

    #[derive(Debug)]
    pub(super) struct Stopper;

    impl Stopper {
        pub(super) fn stop(self) {}
    }

    /// No file events on this platform: the watch never fires (module docs).
    pub(super) fn start(_: Files, _: Box<dyn FnMut() -> Seen + Send>) -> Result<FileWatch> {
        Ok(FileWatch {
            stop: None,
            thread: None,
            wakes: Arc::new(AtomicU64::new(0)),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicU32, Ordering};
    use std::sync::mpsc;

    #[test]
    fn a_schedule_looks_at_once_then_settles_and_stops_early_on_a_published_commit() {
        let t0 = Instant::now();
        let mut s = Schedule::new();
        assert_eq!(s.timeout(t0), None, "no write: sleep until one");
        s.write(t0);
        let mut looks = 0;
        s.look(t0, &mut || {
            looks += 1;
            Seen::Commit
        });
        assert_eq!(looks, 1, "a write is looked at at once");
        // Found at the write's own look: a later commit may be in flight; go on.
        let next = s.next.expect("still settling");
        s.look(next, &mut || {
            looks += 1;
            Seen::Nothing
        });
        assert_eq!(looks, 2);
        let next = s.next.expect("still settling");
        // A commit found with no write since the previous look: done.
        s.look(next, &mut || {
            looks += 1;
            Seen::Commit
        });
        assert_eq!(looks, 3);
        assert_eq!(s.next, None);
        assert_eq!(s.timeout(Instant::now()), None);
    }

    #[test]
    fn gaps_double_to_the_cap_and_later_outlasts_the_window() {
        let mut s = Schedule::new();
        let t0 = Instant::now() - SETTLE * 2; // the write is long past
        s.write(t0);
        s.look(Instant::now(), &mut || Seen::Nothing);
        assert_eq!(s.next, None, "past the window: settled");
        s.write(Instant::now());
        let mut gaps = Vec::new();
        for _ in 0..10 {
            let before = s.step;
            s.look(Instant::now() + MAX_STEP * 2, &mut || Seen::Later);
            gaps.push(before);
            assert!(s.next.is_some(), "Later always looks again");
        }
        assert_eq!(gaps[0], FIRST_STEP);
        assert!(gaps.windows(2).all(|w| w[1] >= w[0]));
        assert_eq!(*gaps.last().unwrap(), MAX_STEP);
    }

    /// A commit is several writes to the WAL, and a process writing steadily
    /// makes thousands a second: the watch wakes for the looks (one per
    /// millisecond at most), not for each write.
    #[cfg(any(target_os = "linux", target_os = "android"))]
    #[test]
    fn a_burst_of_writes_wakes_the_watch_per_look_not_per_write() {
        use std::io::Write;
        let dir = tempfile::tempdir().unwrap();
        let db = dir.path().join("x.db");
        let wal = dir.path().join("x.db-wal");
        let mut f = std::fs::File::create(&wal).unwrap();
        let w = FileWatch::start(&db, || Seen::Nothing).unwrap();
        let writes = 400;
        let t0 = Instant::now();
        for _ in 0..writes {
            f.write_all(b"a frame!").unwrap();
            std::thread::sleep(Duration::from_micros(50));
        }
        let ms = t0.elapsed().as_millis() as u64;
        let wakes = w.wakes();
        w.stop();
        // Two ends of a wait per look (the events, then the look's time), a
        // look per millisecond: bounded by the burst's length, whatever the
        // machine's load made of the writes' pace.
        assert!(
            wakes <= 3 * ms + 20,
            "{wakes} wakes for {writes} writes in {ms} ms"
        );
    }

    #[cfg(any(target_os = "linux", target_os = "android"))]
    #[test]
    fn writes_to_the_wal_wake_the_watch_other_files_do_not_and_stop_ends_it() {
        let dir = tempfile::tempdir().unwrap();
        let db = dir.path().join("x.db");
        let looks = Arc::new(AtomicU32::new(0));
        let (tx, rx) = mpsc::channel();
        let l2 = Arc::clone(&looks);
        let w = FileWatch::start(&db, move || {
            l2.fetch_add(1, Ordering::SeqCst);
            let _ = tx.send(());
            Seen::Commit
        })
        .unwrap();
        // Another file in the folder: nothing.
        std::fs::write(dir.path().join("other.txt"), b"x").unwrap();
        std::thread::sleep(Duration::from_millis(50));
        assert_eq!(looks.load(Ordering::SeqCst), 0);
        // The WAL made, then written: looks.
        let wal = dir.path().join("x.db-wal");
        std::fs::write(&wal, b"frames").unwrap();
        rx.recv_timeout(Duration::from_secs(10)).unwrap();
        w.stop();
        // The thread ended: its callback (and the sender in it) is gone.
        while rx.try_recv().is_ok() {}
        assert!(matches!(
            rx.recv_timeout(Duration::from_secs(10)),
            Err(mpsc::RecvTimeoutError::Disconnected)
        ));
    }
}
