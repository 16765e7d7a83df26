//! The binding tests run by `cargo xtask test`: Python (asyncio) and Kotlin (JVM,
//! coroutines) programs under `bindings/` drive the generated bindings against the
//! freshly built `keel-ffi` cdylib. Each prints one line per test, `max tick gap: X
//! ms` for the open-never-blocks test, and a summary line
//! (`python bindings: N passed, M failed`); any failure fails the command.

use std::path::PathBuf;
use std::process::Command;
use std::time::Instant;

use crate::{bindings, kotlin, util};

/// Run every binding test suite; `Err` if any failed.
pub fn test() -> Result<(), String> {
    let t0 = Instant::now();
    let langs = ["python".to_string(), "kotlin".to_string()];
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
    util::run(
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
    if classes.exists() {
        std::fs::remove_dir_all(&classes).map_err(|e| format!("{}: {e}", classes.display()))?;
    }
    std::fs::create_dir_all(&classes).map_err(|e| format!("{}: {e}", classes.display()))?;
    let test_src = util::workspace_root().join("bindings/kotlin/KeelTest.kt");
    let t = Instant::now();
    kotlin::compile(&tc, &[g.kotlin.clone(), test_src], &classes, &[])
        .map_err(|e| format!("kotlin bindings: compile failed: {e}"))?;
    println!(
        "kotlin bindings: compiled in {:.1} s",
        t.elapsed().as_secs_f64()
    );
    let lib_dir: PathBuf = g
        .cdylib
        .parent()
        .map(PathBuf::from)
        .ok_or("cdylib has no directory")?;
    let mut cp = vec![classes];
    cp.extend(tc.runtime.iter().cloned());
    util::run(
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
