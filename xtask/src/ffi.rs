//! The binding tests run by `cargo xtask test`: Python (asyncio) and Kotlin (JVM,
//! coroutines) programs under `bindings/` drive the generated bindings against the
//! freshly built `keel-ffi` cdylib; the Swift suite (XCTest, see `swift.rs`) runs
//! too when a Swift toolchain is found. Each prints one line per test, `max tick gap: X
//! ms` for the open-never-blocks test, and a summary line
//! (`python bindings: N passed, M failed`); any failure fails the command.

use std::path::PathBuf;
use std::process::Command;
use std::time::{Duration, Instant};

use crate::{bindings, kotlin, util};

/// Run every binding test suite; `Err` if any failed.
pub fn test() -> Result<(), String> {
    let t0 = Instant::now();
    let langs = [
        "python".to_string(),
        "kotlin".to_string(),
        "swift".to_string(),
    ];
    let g = bindings::generate(false, &langs)?;
    let mut failures = Vec::new();
    let t = Instant::now();
    if let Err(e) = python(&g) {
        failures.push(e);
    }
    println!("python bindings: took {:.1} s", t.elapsed().as_secs_f64());
    let t = Instant::now();
    if let Err(e) = kotlin_jvm(&g) {
        failures.push(e);
    }
    println!("kotlin bindings: took {:.1} s", t.elapsed().as_secs_f64());
    let t = Instant::now();
    if let Err(e) = crate::swift::test(&g) {
        failures.push(e);
    }
    println!("swift bindings: took {:.1} s", t.elapsed().as_secs_f64());
    println!(
        "binding tests: {} in {:.1} s",
        if failures.is_empty() { "ok" } else { "FAILED" },
        t0.elapsed().as_secs_f64()
    );
    if failures.is_empty() {
        Ok(())
    } else {
        Err(failures.join("\n"))
    }
}

fn python_exe() -> Option<&'static str> {
    ["python3", "python"].into_iter().find(|p| {
        Command::new(p)
            .args([
                "-c",
                "import sys; sys.exit(0 if sys.version_info >= (3, 8) else 1)",
            ])
            .output()
            .map(|o| o.status.success())
            .unwrap_or(false)
    })
}

/// `bindings/python/test_keel.py` against the generated `keel.py`.
fn python(g: &bindings::Generated) -> Result<(), String> {
    let py = python_exe().ok_or("the Python binding tests need Python 3.8+ (`python3`)")?;
    let script = util::workspace_root().join("bindings/python/test_keel.py");
    run_bounded(
        Command::new(py)
            .arg("-u")
            .arg(&script)
            .env("KEEL_PY_BINDINGS", &g.python)
            .env("PYTHONDONTWRITEBYTECODE", "1"),
    )
    .map_err(|e| format!("python bindings failed: {e}"))
}

/// `bindings/kotlin/KeelTest.kt` compiled with the generated Kotlin and run on the JVM.
fn kotlin_jvm(g: &bindings::Generated) -> Result<(), String> {
    let target = bindings::target_dir()?;
    let tc = kotlin::toolchain(&target)?;
    let out = target.join("keel-kotlin-test");
    let classes = out.join("classes");
    let root = util::workspace_root();
    let sources = [
        g.kotlin.clone(),
        root.join("bindings/kotlin/layer"),
        root.join("bindings/kotlin/KeelTest.kt"),
    ];
    // Compiling takes about a minute: skip it when no source changed.
    let stamp = out.join(format!(".compiled-{:016x}", kotlin::fingerprint(&sources)));
    if stamp.exists() && classes.exists() {
        println!(
            "kotlin bindings: sources unchanged, reusing {}",
            classes.display()
        );
    } else {
        if out.exists() {
            std::fs::remove_dir_all(&out).map_err(|e| format!("{}: {e}", out.display()))?;
        }
        std::fs::create_dir_all(&classes).map_err(|e| format!("{}: {e}", classes.display()))?;
        let t = Instant::now();
        kotlin::compile(&tc, &sources, &classes, &[], "17")
            .map_err(|e| format!("kotlin bindings: compile failed: {e}"))?;
        std::fs::write(&stamp, b"").map_err(|e| format!("{}: {e}", stamp.display()))?;
        println!(
            "kotlin bindings: compiled in {:.1} s",
            t.elapsed().as_secs_f64()
        );
    }
    let lib_dir: PathBuf = g
        .cdylib
        .parent()
        .map(PathBuf::from)
        .ok_or("cdylib has no directory")?;
    let mut cp = vec![classes];
    cp.extend(tc.runtime.iter().cloned());
    run_bounded(
        Command::new("java")
            // Keep the JVM's own background work (JIT, GC) from stealing the
            // ticker's time slices on small CI machines.
            .args(["-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1"])
            .arg("-cp")
            .arg(kotlin::classpath(&cp))
            .arg(format!("-Djna.library.path={}", lib_dir.display()))
            .arg("KeelTestKt"),
    )
    .map_err(|e| format!("kotlin bindings failed: {e}"))
}

/// A test program may not hang CI: it gets this long, then it is killed.
const TEST_TIMEOUT: Duration = Duration::from_secs(600);

/// Like `util::run` (workspace root, inherited stdio), but kills the program after
/// [`TEST_TIMEOUT`].
pub(crate) fn run_bounded(cmd: &mut Command) -> Result<(), String> {
    cmd.current_dir(util::workspace_root());
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
