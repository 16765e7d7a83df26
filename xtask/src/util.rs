//! Small helpers shared by the xtask commands.

use std::path::PathBuf;
use std::process::Command;

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
