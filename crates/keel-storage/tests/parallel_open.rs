//! Issue 26, item 6: an open whose schema step changes nothing does not hold the WAL
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
