//! Small helpers shared by the xtask commands (the lowest layer: it imports no
//! other xtask module, so the commands above it can share it without a cycle).

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

/// The workspace root (xtask lives one level below it).
pub fn workspace_root() -> PathBuf {
    let manifest = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    manifest.parent().map(PathBuf::from).unwrap_or(manifest)
}

/// Runs `cargo <args>` in the workspace root with inherited stdio.
pub fn cargo(args: &[&str]) -> Result<(), String> {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".to_string());
    run(Command::new(cargo).args(args))
}

/// Runs a command in the workspace root, inheriting stdio; non-zero exit is an error
/// that names the command.
pub fn run(cmd: &mut Command) -> Result<(), String> {
    cmd.current_dir(workspace_root());
    let shown = format!("{cmd:?}");
    let status = cmd
        .status()
        .map_err(|e| format!("could not start {shown}: {e}"))?;
    if status.success() {
        Ok(())
    } else {
        Err(format!("{shown} failed with {status}"))
    }
}

/// Output of a command as text, or `None` when it cannot run (used for machine facts).
pub fn capture(program: &str, args: &[&str]) -> Option<String> {
    let out = Command::new(program).args(args).output().ok()?;
    out.status
        .success()
        .then(|| String::from_utf8_lossy(&out.stdout).trim().to_string())
}

/// The Swift toolchain's `swift`, if there is one.
pub fn swift_exe() -> Option<PathBuf> {
    let works = |p: &Path| {
        Command::new(p)
            .arg("--version")
            .output()
            .map(|o| o.status.success())
            .unwrap_or(false)
    };
    let on_path = PathBuf::from("swift");
    if works(&on_path) {
        return Some(on_path);
    }
    let opt = PathBuf::from("/opt/swift/usr/bin/swift");
    works(&opt).then_some(opt)
}

/// Measured runs of the typed-vs-bytes benchmarks (Kotlin and Swift alike, each
/// after one unmeasured warm-up run; the figures are medians): 8, or 1 in quick
/// mode.
pub fn bench_runs(quick: bool) -> u32 {
    if quick {
        1
    } else {
        8
    }
}

/// A test program may not hang CI: it gets this long, then it is killed.
const TEST_TIMEOUT: Duration = Duration::from_secs(600);

/// Like [`run`] (workspace root, inherited stdio), but kills the program after
/// [`TEST_TIMEOUT`].
pub fn run_bounded(cmd: &mut Command) -> Result<(), String> {
    cmd.current_dir(workspace_root());
    let shown = format!("{cmd:?}");
    let mut child = cmd
        .spawn()
        .map_err(|e| format!("could not start {shown}: {e}"))?;
    let t0 = Instant::now();
    loop {
        match child.try_wait() {
            Ok(Some(status)) if status.success() => return Ok(()),
            Ok(Some(status)) => return Err(format!("{shown} failed with {status}")),
            Ok(None) if t0.elapsed() > TEST_TIMEOUT => {
                let _ = child.kill();
                let _ = child.wait();
                return Err(format!(
                    "{shown} did not finish in {} s and was killed",
                    TEST_TIMEOUT.as_secs()
                ));
            }
            Ok(None) => std::thread::sleep(Duration::from_millis(50)),
            Err(e) => return Err(format!("waiting for {shown}: {e}")),
        }
    }
}
