//! Cross-process commit signal: how a process learns, without polling, that
//! another process committed to the same database file.
//!
//! A writer calls [`CommitSignal::post`] after each commit; a reader runs a
//! [`CommitWatch`], a keel thread (`keel-feed`) that sleeps in the kernel until a
//! post arrives and then calls its callback. While nothing is posted the thread
//! is blocked in `poll(2)`: no timer, no wake-up, nothing for a phone's CPU to do.
//!
//! * **Linux and Android**: the signal is a keel-owned sidecar file next to the
//!   database (`<db>-keelsig`, mode 0600, always empty). A post opens and closes it
//!   (an `IN_OPEN` inotify event; nothing is written, so nothing reaches the disk);
//!   the watcher holds an inotify watch on it. A process that posts also wakes its
//!   own watcher: the caller filters its own commits out.
//! * **Apple platforms** (`cfg(target_vendor = "apple")`): Darwin notifications,
//!   `notify_post` and `notify_register_file_descriptor`, under a name derived from
//!   the database's canonical path (an app and its extensions see the same App
//!   Group path). **This branch has never been compiled**: no Apple toolchain
//!   exists on the machines keel is built on.
//! * **Elsewhere** posts do nothing and a watch never fires; callers catch up when
//!   told to (for keel: `Database::catch_up`, which `resume` calls).
//!
//! The signal only says "look": what changed is read from the database (for keel,
//! its change log), so a lost, merged or spurious wake-up costs latency or one
//! read, never correctness.
//!
//! ```
//! use keel_storage::xproc::CommitSignal;
//! use std::sync::mpsc;
//! # let dir = tempfile::tempdir().unwrap();
//! let db = dir.path().join("app.db");
//! let signal = CommitSignal::open(&db)?;
//! let (tx, rx) = mpsc::channel();
//! let watch = signal.watch(move || { let _ = tx.send(()); })?;
//! CommitSignal::open(&db)?.post(); // as another process would, after its commit
//! # #[cfg(any(target_os = "linux", target_os = "android"))]
//! rx.recv_timeout(std::time::Duration::from_secs(10)).unwrap();
//! watch.stop();
//! # Ok::<(), keel_storage::Error>(())
//! ```

use std::path::{Path, PathBuf};
use std::sync::Arc;

use crate::error::{Error, Result};

/// The suffix of the sidecar file next to the database (Linux, Android).
pub const SIDECAR_SUFFIX: &str = "-keelsig";

/// Posts "a commit happened" to every process watching the same database (see the
/// module docs). Cheap to clone; [`CommitSignal::post`] is one `open`/`close` pair
/// on Linux and one `notify_post` on Apple platforms.
#[derive(Debug, Clone)]
pub struct CommitSignal {
    inner: Arc<SignalInner>,
}

#[derive(Debug)]
struct SignalInner {
    sidecar: PathBuf,
    #[cfg_attr(not(target_vendor = "apple"), allow(dead_code))]
    name: String,
}

impl CommitSignal {
    /// The signal of the database at `db` (the file need not exist yet). Creates
    /// the sidecar file on Linux and Android.
    pub fn open(db: &Path) -> Result<CommitSignal> {
        let mut s = db.as_os_str().to_owned();
        s.push(SIDECAR_SUFFIX);
        let sidecar = PathBuf::from(s);
        #[cfg(any(target_os = "linux", target_os = "android"))]
        {
            use std::os::unix::fs::OpenOptionsExt;
            std::fs::OpenOptions::new()
                .create(true)
                .append(true)
                .mode(0o600)
                .open(&sidecar)
                .map_err(|e| Error::Io {
                    op: "create the cross-process signal file",
                    path: sidecar.clone(),
                    source: Arc::new(e),
                })?;
        }
        let canonical = db
            .parent()
            .and_then(|p| std::fs::canonicalize(p).ok())
            .map(|p| p.join(db.file_name().unwrap_or_default()))
            .unwrap_or_else(|| db.to_path_buf());
        let name = notification_name(&canonical);
        Ok(CommitSignal {
            inner: Arc::new(SignalInner { sidecar, name }),
        })
    }

    /// The sidecar file (Linux, Android; unused elsewhere).
    pub fn sidecar(&self) -> &Path {
        &self.inner.sidecar
    }

    /// Tell watchers a commit happened. Never fails the caller: a post that cannot
    /// be made is logged (readers then catch up at their next wake-up).
    pub fn post(&self) {
        #[cfg(any(target_os = "linux", target_os = "android"))]
        {
            // Opening is the event (IN_OPEN): nothing is written, no inode changes.
            if let Err(e) = std::fs::File::open(&self.inner.sidecar) {
                tracing::warn!(error = %e, path = %self.inner.sidecar.display(), "cross-process post failed");
            }
        }
        #[cfg(target_vendor = "apple")]
        apple::post(&self.inner.name);
    }

    /// Start a `keel-feed` thread that calls `on_post` after posts to this signal
    /// (several posts close together may give one call). Stop it with
    /// [`CommitWatch::stop`]; dropping the watch stops it too (without waiting).
    pub fn watch(&self, on_post: impl FnMut() + Send + 'static) -> Result<CommitWatch> {
        sys::watch(&self.inner, Box::new(on_post))
    }
}

/// The Darwin notification name of a database: `keel.commit.` and a 64-bit FNV-1a
/// hash of its canonical path (stable across builds, unlike `std`'s hasher).
fn notification_name(path: &Path) -> String {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in path.as_os_str().as_encoded_bytes() {
        h ^= u64::from(*b);
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    format!("keel.commit.{h:016x}")
}

/// A running watch (see [`CommitSignal::watch`]).
#[derive(Debug)]
pub struct CommitWatch {
    stop: Option<sys::Stopper>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl CommitWatch {
    /// Stop the thread and wait for it (unless called from the watch's own callback,
    /// where it only asks the thread to end after the callback returns).
    pub fn stop(mut self) {
        self.halt(true);
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

impl Drop for CommitWatch {
    fn drop(&mut self) {
        // No join: the last handle may be dropped on the watch thread itself.
        self.halt(false);
    }
}

#[cfg(any(target_os = "linux", target_os = "android", target_vendor = "apple"))]
#[allow(unsafe_code)]
mod sys {
    use super::*;
    use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};

    /// The write end of the stop pipe: writing (or dropping it) wakes the thread.
    #[derive(Debug)]
    pub(super) struct Stopper(OwnedFd);

    impl Stopper {
        pub(super) fn stop(self) {
            let b = [1u8];
            // SAFETY: `self.0` is an open pipe write end we own; `b` is a valid
            // 1-byte buffer. A failed write is fine: dropping the fd below closes
            // the pipe, which wakes the thread (POLLHUP) all the same.
            unsafe {
                libc::write(self.0.as_raw_fd(), b.as_ptr().cast(), 1);
            }
        }
    }

    fn pipe() -> std::io::Result<(OwnedFd, OwnedFd)> {
        let mut fds = [0 as libc::c_int; 2];
        // SAFETY: `fds` is a valid array of two ints for pipe(2) to fill.
        if unsafe { libc::pipe(fds.as_mut_ptr()) } != 0 {
            return Err(std::io::Error::last_os_error());
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

    fn io_err(op: &'static str, path: &Path, e: std::io::Error) -> Error {
        Error::Io {
            op,
            path: path.to_path_buf(),
            source: Arc::new(e),
        }
    }

    /// Read and discard everything readable on a non-blocking `fd`.
    fn drain(fd: libc::c_int) {
        let mut buf = [0u8; 4096];
        loop {
            // SAFETY: `buf` is a valid writable buffer of its length; `fd` is open.
            let n = unsafe { libc::read(fd, buf.as_mut_ptr().cast(), buf.len()) };
            if n <= 0 {
                break;
            }
        }
    }

    /// Block until `event` or `stop` is readable; true for an event.
    fn wait(event: libc::c_int, stop: libc::c_int) -> bool {
        loop {
            let mut fds = [
                libc::pollfd {
                    fd: event,
                    events: libc::POLLIN,
                    revents: 0,
                },
                libc::pollfd {
                    fd: stop,
                    events: libc::POLLIN,
                    revents: 0,
                },
            ];
            // SAFETY: `fds` is a valid array of two pollfd; -1 waits without timeout.
            let n = unsafe { libc::poll(fds.as_mut_ptr(), 2, -1) };
            if n < 0 {
                if std::io::Error::last_os_error().kind() == std::io::ErrorKind::Interrupted {
                    continue;
                }
                return false;
            }
            if fds[1].revents != 0 {
                return false;
            }
            if fds[0].revents & libc::POLLIN != 0 {
                return true;
            }
            if fds[0].revents != 0 {
                return false; // error or hang-up on the event source
            }
        }
    }

    fn spawn(
        event: OwnedFd,
        mut on_post: Box<dyn FnMut() + Send>,
        cleanup: impl FnOnce() + Send + 'static,
        path: &Path,
    ) -> Result<CommitWatch> {
        let (stop_r, stop_w) =
            pipe().map_err(|e| io_err("create the feed's stop pipe", path, e))?;
        let thread = std::thread::Builder::new()
            .name("keel-feed".into())
            .spawn(move || {
                while wait(event.as_raw_fd(), stop_r.as_raw_fd()) {
                    drain(event.as_raw_fd());
                    on_post();
                }
                cleanup();
            })
            .map_err(|e| io_err("start the keel-feed thread", path, e))?;
        Ok(CommitWatch {
            stop: Some(Stopper(stop_w)),
            thread: Some(thread),
        })
    }

    #[cfg(any(target_os = "linux", target_os = "android"))]
    pub(super) fn watch(s: &SignalInner, on_post: Box<dyn FnMut() + Send>) -> Result<CommitWatch> {
        use std::os::unix::ffi::OsStrExt;
        let path = &s.sidecar;
        // SAFETY: inotify_init1 takes flags only and returns a new fd or -1.
        let fd = unsafe { libc::inotify_init1(libc::IN_NONBLOCK | libc::IN_CLOEXEC) };
        if fd < 0 {
            return Err(io_err(
                "inotify_init1",
                path,
                std::io::Error::last_os_error(),
            ));
        }
        // SAFETY: `fd` was just returned open by inotify_init1 and is owned here only.
        let event = unsafe { OwnedFd::from_raw_fd(fd) };
        let c = std::ffi::CString::new(path.as_os_str().as_bytes())
            .map_err(|e| io_err("inotify watch path", path, std::io::Error::other(e)))?;
        // SAFETY: `fd` is an open inotify fd and `c` a NUL-terminated path.
        let wd = unsafe {
            libc::inotify_add_watch(
                event.as_raw_fd(),
                c.as_ptr(),
                libc::IN_OPEN | libc::IN_MODIFY | libc::IN_ATTRIB,
            )
        };
        if wd < 0 {
            return Err(io_err(
                "inotify_add_watch on the signal file",
                path,
                std::io::Error::last_os_error(),
            ));
        }
        spawn(event, on_post, || {}, path)
    }

    #[cfg(target_vendor = "apple")]
    pub(super) fn watch(s: &SignalInner, on_post: Box<dyn FnMut() + Send>) -> Result<CommitWatch> {
        let (fd, token) = super::apple::register(&s.name)
            .map_err(|e| io_err("notify_register_file_descriptor", &s.sidecar, e))?;
        // SAFETY: `fd` was returned by notify_register_file_descriptor for us alone.
        let event = unsafe { OwnedFd::from_raw_fd(fd) };
        // SAFETY: `fd` is open; O_NONBLOCK lets `drain` stop at the last token.
        unsafe {
            let fl = libc::fcntl(fd, libc::F_GETFL);
            libc::fcntl(fd, libc::F_SETFL, fl | libc::O_NONBLOCK);
        }
        spawn(
            event,
            on_post,
            move || super::apple::cancel(token),
            &s.sidecar,
        )
    }
}

/// Darwin notifications (`<notify.h>`). Never compiled on this project's machines.
#[cfg(target_vendor = "apple")]
#[allow(unsafe_code)]
mod apple {
    use std::ffi::CString;

    extern "C" {
        fn notify_post(name: *const libc::c_char) -> u32;
        fn notify_register_file_descriptor(
            name: *const libc::c_char,
            notify_fd: *mut libc::c_int,
            flags: libc::c_int,
            out_token: *mut libc::c_int,
        ) -> u32;
        fn notify_cancel(token: libc::c_int) -> u32;
    }

    pub(super) fn post(name: &str) {
        let Ok(c) = CString::new(name) else { return };
        // SAFETY: `c` is a NUL-terminated string alive for the call.
        let status = unsafe { notify_post(c.as_ptr()) };
        if status != 0 {
            tracing::warn!(status, "notify_post failed");
        }
    }

    pub(super) fn register(name: &str) -> std::io::Result<(libc::c_int, libc::c_int)> {
        let c = CString::new(name).map_err(std::io::Error::other)?;
        let (mut fd, mut token) = (-1, -1);
        // SAFETY: `c` is NUL-terminated; `fd` and `token` are valid out-pointers.
        let status = unsafe { notify_register_file_descriptor(c.as_ptr(), &mut fd, 0, &mut token) };
        if status != 0 {
            return Err(std::io::Error::other(format!(
                "notify_register_file_descriptor status {status}"
            )));
        }
        Ok((fd, token))
    }

    pub(super) fn cancel(token: libc::c_int) {
        // SAFETY: `token` came from a successful registration and is cancelled once.
        unsafe {
            notify_cancel(token);
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

    /// No wake-up on this platform: the watch never fires (see the module docs).
    pub(super) fn watch(_: &SignalInner, _: Box<dyn FnMut() + Send>) -> Result<CommitWatch> {
        Ok(CommitWatch {
            stop: None,
            thread: None,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::mpsc;
    use std::time::Duration;

    #[test]
    fn names_are_stable_and_distinct() {
        let a = notification_name(Path::new("/a/app.db"));
        assert_eq!(a, notification_name(Path::new("/a/app.db")));
        assert_ne!(a, notification_name(Path::new("/b/app.db")));
        assert!(a.starts_with("keel.commit."));
    }

    #[cfg(any(target_os = "linux", target_os = "android"))]
    #[test]
    fn a_post_wakes_the_watch_and_stop_ends_it() {
        let dir = tempfile::tempdir().unwrap();
        let db = dir.path().join("x.db");
        let s = CommitSignal::open(&db).unwrap();
        assert!(s.sidecar().exists());
        let (tx, rx) = mpsc::channel();
        let w = s
            .watch(move || {
                let _ = tx.send(());
            })
            .unwrap();
        // Nothing posted: nothing arrives (the thread sleeps in poll).
        assert!(rx.try_recv().is_err());
        CommitSignal::open(&db).unwrap().post();
        rx.recv_timeout(Duration::from_secs(10)).unwrap();
        w.stop();
        // The thread ended: its sender is gone.
        assert!(matches!(
            rx.recv_timeout(Duration::from_secs(10)),
            Err(mpsc::RecvTimeoutError::Disconnected)
        ));
    }
}
