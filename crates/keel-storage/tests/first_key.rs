//! The first connections of a process: a connection keyed while another thread
//! is starting SQLite is keyed, never refused.
//!
//! SQLite marks itself initialized, and lets go of its initialization lock,
//! before it runs SQLCipher's part of the initialization. A thread that opens a
//! connection in that gap is told SQLite is ready, and its `PRAGMA key` fails
//! ("An error occurred with PRAGMA key or rekey …") because SQLCipher is not. On a
//! loaded machine the gap is hit now and then (a crash-campaign test's first key
//! was refused so). Here the gap is held open: SQLite's mutexes are wrapped
//! (`SQLITE_CONFIG_MUTEX`, before anything starts SQLite), and the starting
//! thread, on letting go of the initialization lock, waits until another thread
//! has keyed a connection. It happens once per process, so the round runs in a
//! fresh process: this test binary again (`--exact child_process`).

use std::ffi::c_int;
use std::process::Command;
use std::sync::atomic::{AtomicBool, AtomicPtr, Ordering};
use std::sync::{Mutex, OnceLock};
use std::time::{Duration, Instant};

use keel_storage::encryption::{key_connection, DataKey};
use rusqlite::ffi;

const CHILD: &str = "KEEL_FIRST_KEY_CHILD";

#[test]
fn a_key_set_while_another_thread_starts_sqlite_is_set() {
    let out = Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            "child_process",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(CHILD, "1")
        .output()
        .unwrap();
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(out.status.success(), "the child failed:\n{text}");
    assert!(
        text.contains("keyed inside the gap"),
        "the child never held the gap open:\n{text}"
    );
}

/// SQLite's own mutex methods, which the wrappers call.
static REAL: OnceLock<ffi::sqlite3_mutex_methods> = OnceLock::new();
/// SQLite's initialization lock: the first recursive mutex of the process.
static INIT_LOCK: AtomicPtr<ffi::sqlite3_mutex> = AtomicPtr::new(std::ptr::null_mut());
/// Set by the starting thread once it let go of the initialization lock.
static IN_GAP: AtomicBool = AtomicBool::new(false);
/// Set once the keying thread is done: the starting thread goes on.
static KEYED: AtomicBool = AtomicBool::new(false);
static HELD: Mutex<bool> = Mutex::new(false);

fn real() -> &'static ffi::sqlite3_mutex_methods {
    REAL.get().expect("the real mutex methods")
}

unsafe extern "C" fn alloc(id: c_int) -> *mut ffi::sqlite3_mutex {
    // SAFETY: forwarded unchanged to SQLite's own allocator.
    let m = unsafe { (real().xMutexAlloc.unwrap())(id) };
    if id == ffi::SQLITE_MUTEX_RECURSIVE {
        let _ =
            INIT_LOCK.compare_exchange(std::ptr::null_mut(), m, Ordering::SeqCst, Ordering::SeqCst);
    }
    m
}

unsafe extern "C" fn leave(m: *mut ffi::sqlite3_mutex) {
    // SAFETY: forwarded unchanged: `m` is a mutex SQLite allocated and holds.
    unsafe { (real().xMutexLeave.unwrap())(m) };
    if m == INIT_LOCK.load(Ordering::SeqCst) && sqlite_started() {
        let mut held = HELD.lock().unwrap();
        if !*held {
            *held = true;
            drop(held);
            // SQLite is marked initialized now and SQLCipher's start has not
            // run: hold the gap open until the other thread has keyed.
            IN_GAP.store(true, Ordering::SeqCst);
            let until = Instant::now() + Duration::from_secs(20);
            while !KEYED.load(Ordering::SeqCst) && Instant::now() < until {
                std::thread::sleep(Duration::from_millis(1));
            }
        }
    }
}

/// Whether SQLite is marked initialized: configuring it is refused from then
/// on (the lock is also let go of by calls nested inside the initialization).
fn sqlite_started() -> bool {
    let mut probe = std::mem::MaybeUninit::<ffi::sqlite3_mutex_methods>::zeroed();
    // SAFETY: `GETMUTEX` only copies the mutex methods into `probe`, or is
    // refused (`SQLITE_MISUSE`) once SQLite is initialized.
    unsafe {
        ffi::sqlite3_config(ffi::SQLITE_CONFIG_GETMUTEX, probe.as_mut_ptr()) == ffi::SQLITE_MISUSE
    }
}

/// Wrap SQLite's mutex methods: before anything starts SQLite.
fn wrap_mutexes() {
    let mut methods = std::mem::MaybeUninit::<ffi::sqlite3_mutex_methods>::zeroed();
    // SAFETY: allocating a static mutex sets up SQLite's mutex methods without
    // starting SQLite; `GETMUTEX` then copies them into `methods`, and `MUTEX`
    // copies the wrapped set in (allowed while SQLite is not started). The
    // wrappers forward every call to the real methods.
    unsafe {
        ffi::sqlite3_mutex_alloc(ffi::SQLITE_MUTEX_STATIC_MAIN);
        assert_eq!(
            ffi::sqlite3_config(ffi::SQLITE_CONFIG_GETMUTEX, methods.as_mut_ptr()),
            ffi::SQLITE_OK
        );
        let real = REAL.get_or_init(|| methods.assume_init());
        let mut wrapped = *real;
        wrapped.xMutexAlloc = Some(alloc);
        wrapped.xMutexLeave = Some(leave);
        assert_eq!(
            ffi::sqlite3_config(
                ffi::SQLITE_CONFIG_MUTEX,
                &wrapped as *const ffi::sqlite3_mutex_methods
            ),
            ffi::SQLITE_OK
        );
    }
}

/// One round: a thread opens the process's first (plain) connection; while it
/// is in the gap, this thread keys a connection of its own.
#[test]
fn child_process() {
    if std::env::var_os(CHILD).is_none() {
        return;
    }
    wrap_mutexes();
    let starter = std::thread::spawn(|| {
        let conn = rusqlite::Connection::open_in_memory().unwrap();
        conn.execute_batch("CREATE TABLE t(x)").unwrap();
    });
    let until = Instant::now() + Duration::from_secs(20);
    while !IN_GAP.load(Ordering::SeqCst) {
        assert!(Instant::now() < until, "SQLite never started");
        std::thread::sleep(Duration::from_millis(1));
    }
    let keyed = (|| -> rusqlite::Result<()> {
        let conn = rusqlite::Connection::open_in_memory()?;
        key_connection(&conn, &DataKey::from_parts(&[7; 32], &[0x5a; 16]), false)?;
        conn.execute_batch("CREATE TABLE t(x); INSERT INTO t VALUES (1);")
    })();
    KEYED.store(true, Ordering::SeqCst);
    starter.join().unwrap();
    if let Err(e) = keyed {
        panic!("the key was refused: {e}");
    }
    println!("keyed inside the gap");
}
