//! An open whose schema step changes nothing does not hold the WAL
//! write lock through its open barrier. Two real processes: the child opens a file a
//! killed run left with a WAL, its barrier sync held until the test releases it; the
//! test process opens the same file and writes meanwhile.
//!
//! The child is this test binary again (`--exact child_process`, as in
//! `multiprocess.rs`), talking over stdin/stdout one line per step: every step is an
//! event, not a sleep.

use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};
use std::time::{Duration, Instant};

use keel_storage::{Error, Store, StoreOptions, SyncPolicy};

const ROLE: &str = "KEEL_PO_ROLE";
const DB: &str = "KEEL_PO_DB";

const SCHEMA: &str = "CREATE TABLE IF NOT EXISTS t(x INTEGER)";

/// The schema step of both processes: the table exists already, so it changes
/// nothing (as a plain reopen of an app's file).
fn opts() -> StoreOptions {
    StoreOptions::default()
        .busy_timeout(Duration::from_secs(5))
        .schema_hook(|ctx| ctx.execute_batch(SCHEMA).map_err(Error::from))
}

fn release_file(db: &Path) -> PathBuf {
    db.with_extension("release")
}

fn count(store: &Store) -> i64 {
    store
        .read(|c| {
            c.query_row("SELECT count(*) FROM t", [], |r| r.get(0))
                .map_err(Error::from)
        })
        .unwrap()
}

/// The entry point of the child process; does nothing in a normal test run.
#[test]
fn child_process() {
    let Ok(role) = std::env::var(ROLE) else {
        return;
    };
    let db = PathBuf::from(std::env::var(DB).unwrap());
    match role.as_str() {
        "slow_barrier" => slow_barrier(&db),
        other => panic!("unknown role {other}"),
    }
}

fn say(line: &str) {
    let mut out = std::io::stdout().lock();
    writeln!(out, "\n@@{line}").unwrap();
    out.flush().unwrap();
}

fn hear() -> String {
    let mut s = String::new();
    std::io::stdin().read_line(&mut s).unwrap();
    s.trim().to_string()
}

/// Opens with an open barrier whose sync lasts until the test creates the release
/// file (at most 30 s, so a broken run cannot hang), and says when it is readable.
fn slow_barrier(db: &Path) {
    let release = release_file(db);
    let policy = SyncPolicy::custom(move |ctx| {
        let t0 = Instant::now();
        while !release.exists() && t0.elapsed() < Duration::from_secs(30) {
            std::thread::sleep(Duration::from_millis(5));
        }
        ctx.full_sync()
    });
    let store =
        futures::executor::block_on(Store::open_async(db, opts().open_barrier_sync(policy)))
            .unwrap();
    say(&format!("readable durable={}", store.is_durable()));
    assert_eq!(hear(), "durable?");
    say(&format!("durable={}", store.is_durable()));
    assert_eq!(hear(), "released");
    futures::executor::block_on(store.durable()).unwrap();
    say(&format!("durable rows={}", count(&store)));
    store.close().unwrap();
}

struct Proc {
    child: Child,
    stdin: ChildStdin,
    stdout: BufReader<ChildStdout>,
}

impl Proc {
    fn spawn(role: &str, db: &Path) -> Proc {
        let mut child = Command::new(std::env::current_exe().unwrap())
            .args([
                "--exact",
                "child_process",
                "--nocapture",
                "--test-threads=1",
            ])
            .env(ROLE, role)
            .env(DB, db)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .unwrap();
        let stdin = child.stdin.take().unwrap();
        let stdout = BufReader::new(child.stdout.take().unwrap());
        Proc {
            child,
            stdin,
            stdout,
        }
    }

    fn hear(&mut self) -> String {
        loop {
            let mut s = String::new();
            let n = self.stdout.read_line(&mut s).unwrap();
            assert!(
                n > 0,
                "the child process ended early: {:?}",
                self.child.wait()
            );
            if let Some((_, line)) = s.trim().split_once("@@") {
                return line.to_string();
            }
        }
    }

    fn say(&mut self, line: &str) {
        writeln!(self.stdin, "{line}").unwrap();
        self.stdin.flush().unwrap();
    }

    fn finish(mut self) {
        let st = self.child.wait().unwrap();
        assert!(st.success(), "child exited with {st}");
    }
}

/// A file with table `t`, one row, and a WAL holding them, as a killed run leaves it.
fn file_with_wal(path: &Path) {
    let c = rusqlite::Connection::open(path).unwrap();
    c.execute_batch(&format!(
        "PRAGMA journal_mode = WAL; {SCHEMA}; INSERT INTO t VALUES (1);"
    ))
    .unwrap();
    c.set_db_config(
        rusqlite::config::DbConfig::SQLITE_DBCONFIG_NO_CKPT_ON_CLOSE,
        true,
    )
    .unwrap();
    drop(c);
    let mut wal = path.as_os_str().to_owned();
    wal.push("-wal");
    assert!(std::fs::metadata(PathBuf::from(wal)).unwrap().len() > 32);
}

#[test]
fn item6_parallel_open_with_unchanged_schema_does_not_hold_the_write_lock() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("shared.db");
    file_with_wal(&db);

    let mut child = Proc::spawn("slow_barrier", &db);
    assert_eq!(child.hear(), "readable durable=false");

    // While the child's barrier sync runs, this process opens and writes.
    let opened = Store::open(&db, opts());
    let store = match opened {
        Ok(s) => s,
        Err(e) => {
            std::fs::write(release_file(&db), b"").unwrap();
            panic!("the second open waited for the other process's barrier: {e}");
        }
    };
    let wrote = store.write_blocking(|t| {
        t.execute("INSERT INTO t VALUES (2)", [])
            .map_err(Error::from)
    });
    child.say("durable?");
    let during = child.hear();
    std::fs::write(release_file(&db), b"").unwrap();
    wrote.unwrap();
    assert_eq!(
        during, "durable=false",
        "the write committed while the other process's barrier still ran"
    );
    child.say("released");
    assert_eq!(child.hear(), "durable rows=2");
    child.finish();
    assert_eq!(count(&store), 2);
    store.close().unwrap();
}

/// A write queued during the open barrier is the first thing
/// after it. Every sync goes through one slow "device" that runs one sync at a time
/// (as a phone's flash does) and records why it ran; the idle checkpoint delay is
/// shorter than the barrier, as in the tour (2 s idle, a 2 s barrier sync and the
/// time to open). Before the fix, the idle PASSIVE checkpoint started right at
/// durable and the queued write's commit sync queued behind the checkpoint's.
#[test]
fn item8_first_queued_write_is_the_first_thing_after_the_barrier() {
    first_write_after_the_barrier(|o| o);
}

/// The same with a WAL over the checkpoint threshold and `checkpoint_on_open`: the
/// open's own checkpoint, due right after the barrier, waits for the queued write.
#[test]
fn item8_the_open_checkpoint_waits_for_the_queued_write_too() {
    first_write_after_the_barrier(|mut o| {
        o.checkpoint_on_open = true;
        o.checkpoint_threshold(1)
    });
}

fn first_write_after_the_barrier(shape: impl FnOnce(StoreOptions) -> StoreOptions) {
    use keel_storage::{SyncPolicies, SyncReason};
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::{Arc, Mutex};

    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("tour.db");
    file_with_wal(&db);
    let idle = Duration::from_millis(20);
    let release = Arc::new(AtomicBool::new(false));
    let log: Arc<Mutex<Vec<SyncReason>>> = Arc::default();
    let device = Arc::new(Mutex::new(()));
    let (r2, l2) = (Arc::clone(&release), Arc::clone(&log));
    let slow = SyncPolicy::custom(move |ctx| {
        if ctx.reason() == SyncReason::OpenBarrier {
            while !r2.load(Ordering::Acquire) {
                std::thread::sleep(Duration::from_millis(1));
            }
        }
        let _one_at_a_time = device.lock().unwrap();
        l2.lock().unwrap().push(ctx.reason());
        // A sync that takes a while, so a checkpoint started first holds the device.
        std::thread::sleep(Duration::from_millis(30));
        ctx.full_sync()
    });
    let opened = Instant::now();
    let store = futures::executor::block_on(Store::open_async(
        &db,
        shape(
            opts()
                .sync(SyncPolicies::all(slow))
                .idle_checkpoint_after(idle),
        ),
    ))
    .unwrap();
    let write = store.write(|t| {
        t.execute("INSERT INTO t VALUES (2)", [])
            .map_err(Error::from)
    });
    // The barrier outlasts the idle delay (as a 2 s F_FULLFSYNC outlasts 2 s idle).
    while opened.elapsed() < idle * 3 {
        std::thread::sleep(Duration::from_millis(1));
    }
    release.store(true, Ordering::Release);
    write.wait().unwrap();
    let before_ack = log.lock().unwrap().clone();
    let after_barrier: Vec<SyncReason> = before_ack
        .iter()
        .copied()
        .skip_while(|r| *r == SyncReason::OpenBarrier)
        .collect();
    assert_eq!(
        after_barrier.first(),
        Some(&SyncReason::Commit),
        "the queued write's commit must be the first sync after the barrier: {before_ack:?}"
    );
    // The log is read after the acknowledgement, and the checkpointer may sync
    // right after the commit: so what holds is the order — no checkpoint sync
    // between the barrier and the queued write's commit (asserted above), and
    // at most checkpoint syncs after it.
    assert!(
        after_barrier[1..]
            .iter()
            .all(|r| *r == SyncReason::Checkpoint),
        "only checkpoint syncs may follow the queued write's commit here: {before_ack:?}"
    );
    assert_eq!(count(&store), 2);
    store.close().unwrap();
}
