//! Two real processes on one database file: a suspended process holds
//! no lock (read from `/proc/locks`), two writer processes never see
//! `SQLITE_BUSY`, and a writer SIGKILLed in the middle of a transaction leaves the
//! other process's acknowledged commits and the file intact.
//!
//! The other process is this test binary again (`--exact child_process`), told what
//! to do through environment variables; it talks to the test over stdin/stdout, one
//! line per step, so every step is an event, not a sleep.

use std::collections::HashSet;
use std::io::{BufRead, BufReader, Write};
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};
use std::time::Duration;

use keel_storage::{Error, Store, StoreOptions, SuspendOptions, SyncPolicy};

const ROLE: &str = "KEEL_MP_ROLE";
const DB: &str = "KEEL_MP_DB";
const ARG: &str = "KEEL_MP_ARG";

/// Options both processes use. Commit syncs are off by default: these tests are
/// about locks, not about surviving a power loss, and 20 000 fsyncs would take
/// minutes. `cargo xtask multiprocess --sync normal|full` (`KEEL_MP_SYNC`) runs
/// them with a real policy.
fn opts() -> StoreOptions {
    let p = match std::env::var("KEEL_MP_SYNC").as_deref() {
        Ok("full") => SyncPolicy::Full,
        Ok("normal") => SyncPolicy::Normal,
        _ => SyncPolicy::Off,
    };
    StoreOptions::default()
        .commit_sync(p.clone())
        .checkpoint_sync(p.clone())
        .open_barrier_sync(p)
        .readers(2)
}

/// Transactions per writer process: 10 000 here, more under `cargo xtask
/// multiprocess --txns N` (`KEEL_MP_TXNS`).
fn txns() -> i64 {
    std::env::var("KEEL_MP_TXNS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(10_000)
}

const SCHEMA: &str = "CREATE TABLE IF NOT EXISTS t(writer INTEGER, seq INTEGER, body BLOB, PRIMARY KEY(writer, seq))";

fn create(store: &Store) {
    store
        .write_blocking(|t| t.execute_batch(SCHEMA).map_err(Error::from))
        .unwrap();
}

fn count(store: &Store, sql: &str) -> i64 {
    store
        .read(|c| c.query_row(sql, [], |r| r.get(0)).map_err(Error::from))
        .unwrap()
}

fn integrity(store: &Store) -> String {
    store
        .read(|c| {
            c.query_row("PRAGMA integrity_check", [], |r| r.get::<_, String>(0))
                .map_err(Error::from)
        })
        .unwrap()
}

// ---------------------------------------------------------------- the child side

/// The entry point of the child processes; does nothing in a normal test run.
#[test]
fn child_process() {
    let Ok(role) = std::env::var(ROLE) else {
        return;
    };
    let db = PathBuf::from(std::env::var(DB).unwrap());
    let arg = std::env::var(ARG).unwrap_or_default();
    match role.as_str() {
        "suspender" => suspender(&db),
        "writer" => writer(&db, arg.parse().unwrap()),
        "killed" => killed(&db),
        "holder" => holder(&db),
        other => panic!("unknown role {other}"),
    }
}

fn say(line: &str) {
    // Marked: libtest's own "test child_process ... " has no newline before it.
    let mut out = std::io::stdout().lock();
    writeln!(out, "\n@@{line}").unwrap();
    out.flush().unwrap();
}

fn hear() -> String {
    let mut s = String::new();
    std::io::stdin().read_line(&mut s).unwrap();
    s.trim().to_string()
}

/// Opens, writes, then suspends with a long write in flight; reports, waits,
/// resumes and shows what it sees then.
fn suspender(db: &Path) {
    let store = Store::open(db, opts()).unwrap();
    create(&store);
    store
        .write_blocking(|t| {
            t.execute("INSERT INTO t VALUES (1, 0, x'00')", [])
                .map_err(Error::from)
        })
        .unwrap();
    say("open");
    assert_eq!(hear(), "write");
    // A write that runs for seconds (one long statement): suspend must interrupt it.
    let (started_tx, started) = std::sync::mpsc::channel();
    let long = store.write(move |t| {
        started_tx.send(()).unwrap();
        t.execute(
            "WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < 50000000)
             INSERT INTO t SELECT 2, i, NULL FROM n",
            [],
        )
        .map_err(Error::from)
    });
    // The group began (BEGIN IMMEDIATE ran): the writer holds the WAL write lock.
    started.recv().unwrap();
    say("writing");
    assert_eq!(hear(), "suspend");
    let r = store.suspend(SuspendOptions::default()).unwrap();
    let long = long.wait();
    say(&format!(
        "suspended interrupted={} ms={} long={}",
        r.interrupted,
        r.duration.as_millis(),
        match &long {
            Err(Error::Suspended { .. }) => "suspended-error".to_string(),
            other => format!("{other:?}"),
        }
    ));
    assert_eq!(hear(), "resume");
    let rr = store.resume().unwrap();
    let rows = count(&store, "SELECT count(*) FROM t");
    store
        .write_blocking(|t| {
            t.execute("INSERT INTO t VALUES (1, 1, x'01')", [])
                .map_err(Error::from)
        })
        .unwrap();
    say(&format!(
        "resumed external={} rows={rows}",
        rr.external_changes
    ));
    assert_eq!(hear(), "exit");
    store.close().unwrap();
}

/// Writes `n` transactions of one row each, one at a time; any error fails it.
fn writer(db: &Path, me: i64) {
    let n: i64 = std::env::var("KEEL_MP_N").unwrap().parse().unwrap();
    let store = Store::open(db, opts()).unwrap();
    say("open");
    assert_eq!(hear(), "go");
    for i in 0..n {
        let r = store.write_blocking(move |t| {
            t.execute("INSERT INTO t VALUES (?1, ?2, NULL)", [me, i])
                .map_err(Error::from)
        });
        if let Err(e) = r {
            say(&format!("error at {i}: {e}"));
            std::process::exit(3);
        }
    }
    say("done");
    store.close().unwrap();
}

/// Commits one transaction, then starts a big one (more than the page cache, so
/// uncommitted frames reach the WAL), says so and waits inside it to be killed.
fn killed(db: &Path) {
    let store = Store::open(db, opts()).unwrap();
    store
        .write_blocking(|t| {
            t.execute("INSERT INTO t VALUES (9, 0, zeroblob(1000))", [])
                .map_err(Error::from)
        })
        .unwrap();
    store
        .write_blocking(|t| {
            t.execute(
                "WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < 8000)
                 INSERT INTO t SELECT 9, i, randomblob(1000) FROM n",
                [],
            )?;
            say("in-transaction");
            // Held here, inside the transaction, until SIGKILL.
            loop {
                std::thread::sleep(Duration::from_secs(1));
            }
            #[allow(unreachable_code)]
            Ok::<(), Error>(())
        })
        .unwrap();
}

/// Holds the write lock (inside a transaction) until told to commit, then holds a
/// read transaction (a snapshot) until told to end it.
fn holder(db: &Path) {
    let store = Store::open(db, opts()).unwrap();
    store
        .write_blocking(|t| {
            t.execute("INSERT INTO t VALUES (5, 0, NULL)", [])?;
            say("holding-write");
            assert_eq!(hear(), "commit");
            Ok::<(), Error>(())
        })
        .unwrap();
    store
        .read(|c| {
            let n: i64 = c.query_row("SELECT count(*) FROM t", [], |r| r.get(0))?;
            say(&format!("holding-read {n}"));
            assert_eq!(hear(), "end");
            Ok::<(), Error>(())
        })
        .unwrap();
    say("done");
    store.close().unwrap();
}

// ---------------------------------------------------------------- the test side

struct Proc {
    child: Child,
    stdin: ChildStdin,
    stdout: BufReader<ChildStdout>,
}

impl Proc {
    fn spawn(role: &str, db: &Path, env: &[(&str, String)]) -> Proc {
        let mut cmd = Command::new(std::env::current_exe().unwrap());
        cmd.args([
            "--exact",
            "child_process",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(ROLE, role)
        .env(DB, db)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped());
        for (k, v) in env {
            cmd.env(k, v);
        }
        let mut child = cmd.spawn().unwrap();
        let stdin = child.stdin.take().unwrap();
        let stdout = BufReader::new(child.stdout.take().unwrap());
        Proc {
            child,
            stdin,
            stdout,
        }
    }

    fn pid(&self) -> i64 {
        i64::from(self.child.id())
    }

    /// The child's next protocol line (the test harness's own lines are skipped).
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

/// The `/proc/locks` lines on the inodes of `files` held by process `pid` — and
/// any open-file-description lock on them (pid -1 there), which would belong to
/// no process in particular and so must be absent too.
fn locks_held(pid: i64, files: &[PathBuf]) -> Vec<String> {
    let inodes: HashSet<u64> = files
        .iter()
        .filter_map(|f| std::fs::metadata(f).ok().map(|m| m.ino()))
        .collect();
    let text = std::fs::read_to_string("/proc/locks").unwrap();
    text.lines()
        .filter(|l| {
            // "1: POSIX  ADVISORY  READ 1234 08:01:5678 128 128", or with "->" for
            // a waiter.
            let f: Vec<&str> = l.split_whitespace().filter(|w| *w != "->").collect();
            if f.len() < 6 {
                return false;
            }
            let Ok(owner) = f[4].parse::<i64>() else {
                return false;
            };
            let ino = f[5].rsplit(':').next().and_then(|i| i.parse::<u64>().ok());
            ino.is_some_and(|i| inodes.contains(&i)) && (owner == pid || owner == -1)
        })
        .map(str::to_string)
        .collect()
}

fn files(db: &Path) -> Vec<PathBuf> {
    let side = |s: &str| {
        let mut p = db.as_os_str().to_owned();
        p.push(s);
        PathBuf::from(p)
    };
    vec![db.to_path_buf(), side("-wal"), side("-shm")]
}

#[test]
fn a_suspended_process_holds_no_lock_on_the_three_files() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("shared.db");
    let mut p = Proc::spawn("suspender", &db, &[]);
    assert_eq!(p.hear(), "open");
    let files = files(&db);
    // The check sees locks when there are some: an open WAL database holds at
    // least the -shm's DMS read lock.
    let before = locks_held(p.pid(), &files);
    assert!(
        !before.is_empty(),
        "an open store should hold locks; /proc/locks:\n{}",
        std::fs::read_to_string("/proc/locks").unwrap()
    );
    p.say("write");
    assert_eq!(p.hear(), "writing");
    // A write in flight holds the WAL write lock (a WRITE lock on the -shm).
    let writing = locks_held(p.pid(), &files);
    assert!(
        writing.iter().any(|l| l.contains("WRITE")),
        "a write in flight holds a write lock: {writing:#?}"
    );
    p.say("suspend");
    let line = p.hear();
    assert!(
        line.starts_with("suspended interrupted=true"),
        "the write in flight must be interrupted: {line}"
    );
    assert!(
        line.ends_with("long=suspended-error"),
        "the interrupted write reports Suspended: {line}"
    );
    let after = locks_held(p.pid(), &files);
    assert!(after.is_empty(), "locks after suspend: {after:#?}");

    // Meanwhile this process writes to the file the other one let go of.
    let me = Store::open(&db, opts()).unwrap();
    me.write_blocking(|t| {
        t.execute("INSERT INTO t VALUES (7, 0, NULL)", [])
            .map_err(Error::from)
    })
    .unwrap();
    me.close().unwrap();
    assert!(locks_held(p.pid(), &files).is_empty());

    p.say("resume");
    // It sees the other process's row (and none of its interrupted write).
    assert_eq!(p.hear(), "resumed external=true rows=2");
    p.say("exit");
    p.finish();
    let s = Store::open(&db, opts()).unwrap();
    assert_eq!(count(&s, "SELECT count(*) FROM t WHERE writer = 2"), 0);
    assert_eq!(count(&s, "SELECT count(*) FROM t"), 3);
    assert_eq!(integrity(&s), "ok");
    s.close().unwrap();
}

/// Two processes, 10 000 one-row transactions each, at the same time.
#[test]
fn two_writer_processes_commit_everything_without_busy() {
    two_writers(txns());
}

fn two_writers(n: i64) {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("two.db");
    {
        let s = Store::open(&db, opts()).unwrap();
        create(&s);
        s.close().unwrap();
    }
    let env = [("KEEL_MP_N", n.to_string())];
    let mut a = Proc::spawn("writer", &db, &[(ARG, "1".into()), env[0].clone()]);
    let mut b = Proc::spawn("writer", &db, &[(ARG, "2".into()), env[0].clone()]);
    assert_eq!(a.hear(), "open");
    assert_eq!(b.hear(), "open");
    a.say("go");
    b.say("go");
    assert_eq!(a.hear(), "done");
    assert_eq!(b.hear(), "done");
    a.finish();
    b.finish();
    let s = Store::open(&db, opts()).unwrap();
    assert_eq!(count(&s, "SELECT count(*) FROM t"), 2 * n);
    for w in [1, 2] {
        assert_eq!(
            count(
                &s,
                &format!("SELECT count(DISTINCT seq) FROM t WHERE writer = {w}")
            ),
            n
        );
    }
    assert_eq!(integrity(&s), "ok");
    s.close().unwrap();
}

#[test]
fn a_writer_killed_mid_transaction_leaves_the_other_process_data_intact() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("kill.db");
    let me = Store::open(&db, opts()).unwrap();
    create(&me);
    let mut acknowledged = 0i64;
    let mut write = |store: &Store| {
        let seq = acknowledged;
        store
            .write_blocking(move |t| {
                t.execute("INSERT INTO t VALUES (1, ?1, randomblob(100))", [seq])
                    .map_err(Error::from)
            })
            .unwrap();
        acknowledged += 1;
    };
    for _ in 0..100 {
        write(&me);
    }
    let mut victim = Proc::spawn("killed", &db, &[]);
    assert_eq!(victim.hear(), "in-transaction");
    // The victim holds the write lock with uncommitted frames in the WAL. Kill it.
    victim.child.kill().unwrap();
    let st = victim.child.wait().unwrap();
    assert!(!st.success());
    // The lock died with it: this process writes at once, on top of its frames.
    for _ in 0..100 {
        write(&me);
    }
    assert_eq!(count(&me, "SELECT count(*) FROM t WHERE writer = 1"), 200);
    // Of the victim, only its committed transaction.
    assert_eq!(count(&me, "SELECT count(*) FROM t WHERE writer = 9"), 1);
    assert_eq!(integrity(&me), "ok");
    me.close().unwrap();
    // And a fresh open (recovery from the WAL the dead process left) agrees.
    let again = Store::open(&db, opts()).unwrap();
    assert_eq!(
        count(&again, "SELECT count(*) FROM t WHERE writer = 1"),
        200
    );
    assert_eq!(count(&again, "SELECT count(*) FROM t WHERE writer = 9"), 1);
    assert_eq!(integrity(&again), "ok");
    again.close().unwrap();
}

/// Another process holds the write lock: this process's open (its schema step)
/// and its writes wait for it — the busy timeout applies because every write
/// transaction takes the lock up front — and succeed once it commits. Then the
/// other process holds a snapshot: a TRUNCATE checkpoint here cannot finish and
/// says so (`busy`) after its bounded wait, and the store keeps working.
#[test]
fn writes_and_the_open_wait_for_another_process_and_truncate_reports_busy() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("hold.db");
    {
        let s = Store::open(&db, opts()).unwrap();
        create(&s);
        s.close().unwrap();
    }
    let mut other = Proc::spawn("holder", &db, &[]);
    assert_eq!(other.hear(), "holding-write");
    let (tx, rx) = std::sync::mpsc::channel();
    let db2 = db.clone();
    let opener = std::thread::spawn(move || {
        let o = opts().schema_hook(|ctx| {
            ctx.execute_batch("CREATE TABLE IF NOT EXISTS side(x)")?;
            Ok(())
        });
        let s = Store::open(&db2, o).unwrap();
        s.write_blocking(|t| {
            t.execute("INSERT INTO t VALUES (6, 0, NULL)", [])
                .map_err(Error::from)
        })
        .unwrap();
        tx.send(()).unwrap();
        s
    });
    // The open waits for the other process's write lock (not a speed target: a
    // window in which it must not have finished).
    assert!(rx.recv_timeout(Duration::from_millis(300)).is_err());
    other.say("commit");
    rx.recv().unwrap();
    let me = opener.join().unwrap();
    assert_eq!(count(&me, "SELECT count(*) FROM t"), 2);

    let line = other.hear();
    assert!(line.starts_with("holding-read"), "{line}");
    // Frames the other process's snapshot still needs: TRUNCATE cannot finish.
    me.write_blocking(|t| {
        t.execute("INSERT INTO t VALUES (6, 1, NULL)", [])
            .map_err(Error::from)
    })
    .unwrap();
    let out = me
        .checkpoint(keel_storage::CheckpointMode::Truncate)
        .unwrap();
    assert!(out.busy, "{out:?}");
    me.write_blocking(|t| {
        t.execute("INSERT INTO t VALUES (6, 2, NULL)", [])
            .map_err(Error::from)
    })
    .unwrap();
    other.say("end");
    assert_eq!(other.hear(), "done");
    other.finish();
    let out = me
        .checkpoint(keel_storage::CheckpointMode::Truncate)
        .unwrap();
    assert!(!out.busy && out.wal_bytes_after == 0, "{out:?}");
    assert_eq!(count(&me, "SELECT count(*) FROM t"), 4);
    me.close().unwrap();
}
