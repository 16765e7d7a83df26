//! The second process of the cross-process tests (`xproc_*.rs`): the test
//! binary runs itself again as process A, naming one of its own tests (the
//! writer) and handing it the database path and the sharing choice in
//! environment variables; A runs one command per stdin line and answers each
//! with a line `KEEL> ok` (or `KEEL> err …`) once it has committed.

use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};

/// The variable that names process A's database (unset in a normal run).
const ROLE: &str = "KEEL_XPROC_WRITER_DB";
/// The variable that says whether A opens with `share_changes` ("1").
const SHARE: &str = "KEEL_XPROC_WRITER_SHARE";
/// What precedes A's answer on its stdout.
const REPLY: &str = "KEEL> ";

/// In process A: the database path and whether to share changes, or `None` in
/// a normal test run (the writer test then does nothing).
pub fn writer_role() -> Option<(PathBuf, bool)> {
    let path = std::env::var(ROLE).ok()?;
    let share = std::env::var(SHARE).is_ok_and(|v| v == "1");
    Some((path.into(), share))
}

/// In process A: run `command` for each stdin line (split at white space)
/// until `quit`, answering each with its outcome.
pub fn serve(mut command: impl FnMut(&[&str]) -> keel::Result<()>) {
    let mut out = std::io::stdout();
    for line in std::io::stdin().lock().lines() {
        let line = line.unwrap();
        let words: Vec<&str> = line.split_whitespace().collect();
        if words == ["quit"] {
            break;
        }
        match command(&words) {
            Ok(()) => writeln!(out, "{REPLY}ok").unwrap(),
            Err(e) => writeln!(out, "{REPLY}err {e}").unwrap(),
        }
        out.flush().unwrap();
    }
}

/// Process A, driven from the test.
pub struct Writer {
    child: Child,
    stdin: ChildStdin,
    stdout: BufReader<ChildStdout>,
}

impl Writer {
    /// Start process A as the test `writer` of this binary on `db`.
    #[allow(dead_code)] // the rotation test passes more variables
    pub fn spawn(writer: &str, db: &Path, share: bool) -> Writer {
        Writer::spawn_with(writer, db, share, &[])
    }

    /// [`Writer::spawn`] with more environment variables for process A.
    #[allow(dead_code)] // only the rotation test passes more
    pub fn spawn_with(writer: &str, db: &Path, share: bool, env: &[(&str, &Path)]) -> Writer {
        let mut child = Command::new(std::env::current_exe().unwrap())
            .args([writer, "--exact", "--nocapture", "--test-threads=1"])
            .envs(env.iter().map(|(k, v)| (*k, v.as_os_str())))
            .env(ROLE, db)
            .env(SHARE, if share { "1" } else { "0" })
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .unwrap();
        let stdin = child.stdin.take().unwrap();
        let stdout = BufReader::new(child.stdout.take().unwrap());
        Writer {
            child,
            stdin,
            stdout,
        }
    }

    /// Run one command in process A and wait for its commit.
    pub fn run(&mut self, cmd: &str) {
        assert_eq!(self.answer(cmd), "ok", "process A: {cmd}");
    }

    /// Run one command in process A and return its answer (`ok`, `err …`).
    #[allow(dead_code)] // not every test binary asks for the error
    pub fn answer(&mut self, cmd: &str) -> String {
        writeln!(self.stdin, "{cmd}").unwrap();
        self.stdin.flush().unwrap();
        loop {
            let mut line = String::new();
            assert!(
                self.stdout.read_line(&mut line).unwrap() > 0,
                "process A ended"
            );
            // The harness may have written "test writer ... " first.
            if let Some(r) = line.trim_end().split(REPLY).nth(1) {
                return r.to_string();
            }
        }
    }

    /// End process A and check that it exited cleanly.
    pub fn quit(mut self) {
        writeln!(self.stdin, "quit").unwrap();
        drop(self.stdin);
        assert!(self.child.wait().unwrap().success());
    }
}
