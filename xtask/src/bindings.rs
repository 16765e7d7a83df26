//! `cargo xtask bindings`: build `keel-ffi` and generate its Swift, Kotlin and
//! Python sources with UniFFI in library mode (metadata read from the built
//! cdylib), configured by the workspace's `uniffi.toml`.
//!
//! Output (under the cargo target directory):
//!
//! ```text
//! target/keel-bindings/
//!   python/keel.py  python/libkeel_ffi.so     # importable as-is
//!   kotlin/dev/keel/ffi/keel.kt
//!   swift/KeelFFI.swift  swift/keel_ffiFFI.h  swift/keel_ffiFFI.modulemap
//! ```

use std::path::{Path, PathBuf};

use camino::Utf8PathBuf;
use uniffi_bindgen::bindings::{GenerateOptions, TargetLanguage};

use crate::util;

/// Where `generate` put things.
pub struct Generated {
    /// The built cdylib.
    pub cdylib: PathBuf,
    /// `keel.py` and a copy of the cdylib.
    pub python: PathBuf,
    /// Kotlin sources (package directories below).
    pub kotlin: PathBuf,
    /// Swift source, C header and module map.
    pub swift: PathBuf,
}

/// Appended to the generated `keel.py`: stop keel's deliveries to Python callbacks
/// when the interpreter exits (`keel-ffi` `stop_callbacks`).
const PYTHON_AT_EXIT: &str = "

# keel: no keel thread may call into this interpreter once it starts to exit.
# atexit runs before finalization; the wait (at most 2 s)
# lets callbacks already running return.
import atexit as _keel_atexit
_keel_atexit.register(stop_callbacks, 2000)
";

/// The languages `cargo xtask bindings` generates.
pub const LANGUAGES: [&str; 3] = ["python", "kotlin", "swift"];

/// `cargo xtask bindings [--release] [LANG…]`. (`--test`, the binding tests, is
/// dispatched by `main` to `ffi::test`: the tests build on this module, not the
/// other way round.)
pub fn run(args: &[String]) -> Result<(), String> {
    let mut release = false;
    let mut langs = Vec::new();
    for a in args {
        match a.as_str() {
            "--release" => release = true,
            l if LANGUAGES.contains(&l) => langs.push(l.to_string()),
            other => {
                return Err(format!(
                    "`cargo xtask bindings`: unknown argument `{other}` (expected --release, --test, {})",
                    LANGUAGES.join(", ")
                ))
            }
        }
    }
    if langs.is_empty() {
        langs = LANGUAGES.iter().map(|s| s.to_string()).collect();
    }
    let g = generate(release, &langs)?;
    println!("bindings: cdylib {}", g.cdylib.display());
    for l in &langs {
        let dir = match l.as_str() {
            "python" => &g.python,
            "kotlin" => &g.kotlin,
            _ => &g.swift,
        };
        println!("bindings: {l:<6} → {}", dir.display());
    }
    Ok(())
}

/// The cargo target directory (honours `CARGO_TARGET_DIR` and config).
pub fn target_dir() -> Result<PathBuf, String> {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".to_string());
    let out = std::process::Command::new(cargo)
        .args(["metadata", "--format-version", "1", "--no-deps"])
        .current_dir(util::workspace_root())
        .output()
        .map_err(|e| format!("could not run cargo metadata: {e}"))?;
    if !out.status.success() {
        return Err(format!(
            "cargo metadata failed: {}",
            String::from_utf8_lossy(&out.stderr)
        ));
    }
    let v: serde_json::Value = serde_json::from_slice(&out.stdout)
        .map_err(|e| format!("cargo metadata printed bad JSON: {e}"))?;
    v["target_directory"]
        .as_str()
        .map(PathBuf::from)
        .ok_or_else(|| "cargo metadata has no target_directory".to_string())
}

/// File name of the host cdylib.
pub fn cdylib_name() -> &'static str {
    if cfg!(target_os = "macos") {
        "libkeel_ffi.dylib"
    } else if cfg!(windows) {
        "keel_ffi.dll"
    } else {
        "libkeel_ffi.so"
    }
}

/// Build the host cdylib of `keel-ffi` and return its path.
pub fn build_cdylib(release: bool) -> Result<PathBuf, String> {
    let mut args = vec!["build", "--quiet", "-p", "keel-ffi", "--lib"];
    if release {
        args.push("--release");
    }
    util::cargo(&args)?;
    let lib = target_dir()?
        .join(if release { "release" } else { "debug" })
        .join(cdylib_name());
    if !lib.exists() {
        return Err(format!("built keel-ffi but {} is missing", lib.display()));
    }
    Ok(lib)
}

fn utf8(p: &Path) -> Result<Utf8PathBuf, String> {
    Utf8PathBuf::from_path_buf(p.to_path_buf())
        .map_err(|p| format!("path is not UTF-8: {}", p.display()))
}

/// Build the cdylib and generate sources for `langs` under
/// `<target>/keel-bindings/<lang>`.
pub fn generate(release: bool, langs: &[String]) -> Result<Generated, String> {
    let cdylib = build_cdylib(release)?;
    let out = target_dir()?.join("keel-bindings");
    let g = Generated {
        cdylib: cdylib.clone(),
        python: out.join("python"),
        kotlin: out.join("kotlin"),
        swift: out.join("swift"),
    };
    // UniFFI runs `cargo metadata` in the current directory to find crate roots.
    let root = util::workspace_root();
    std::env::set_current_dir(&root)
        .map_err(|e| format!("cannot enter {}: {e}", root.display()))?;
    for lang in langs {
        let (language, dir) = match lang.as_str() {
            "python" => (TargetLanguage::Python, &g.python),
            "kotlin" => (TargetLanguage::Kotlin, &g.kotlin),
            "swift" => (TargetLanguage::Swift, &g.swift),
            other => return Err(format!("unknown binding language {other}")),
        };
        if dir.exists() {
            std::fs::remove_dir_all(dir)
                .map_err(|e| format!("cannot clear {}: {e}", dir.display()))?;
        }
        uniffi_bindgen::bindings::generate(GenerateOptions {
            languages: vec![language],
            source: utf8(&cdylib)?,
            out_dir: utf8(dir)?,
            config_override: Some(utf8(&root.join("uniffi.toml"))?),
            format: false,
            crate_filter: Some("keel_ffi".to_string()),
            metadata_no_deps: true,
        })
        .map_err(|e| format!("uniffi-bindgen ({lang}) failed: {e:#}"))?;
    }
    if langs.iter().any(|l| l == "kotlin") {
        reuse_kotlin_call_statuses(&g.kotlin.join("dev/keel/ffi/keel.kt"))?;
    }
    if langs.iter().any(|l| l == "python") {
        // Once the interpreter starts exiting, keel's threads must not call into
        // it (a thread that takes the GIL during finalization is ended with
        // `pthread_exit`, and its forced unwind through keel's frames aborts the
        // process): `atexit` runs before finalization, with the threads alive.
        let module = g.python.join("keel.py");
        let mut py = std::fs::read_to_string(&module)
            .map_err(|e| format!("cannot read {}: {e}", module.display()))?;
        py.push_str(PYTHON_AT_EXIT);
        std::fs::write(&module, py)
            .map_err(|e| format!("cannot write {}: {e}", module.display()))?;
        // keel.py loads the library from its own directory.
        let dest = g.python.join(cdylib_name());
        std::fs::copy(&cdylib, &dest)
            .map_err(|e| format!("cannot copy the cdylib to {}: {e}", dest.display()))?;
    }
    Ok(g)
}

/// UniFFI's Kotlin makes a new call status for every call into Rust, and JNA
/// builds each `Structure` by reflection and registers its native memory with a
/// cleaner: a profile of an awaited write from Kotlin put most of the calling
/// thread's time there. The status is only ever used within the call (the
/// function is synchronous), so each thread keeps its statuses, one per depth of
/// nesting (a callback that calls Rust again takes another), and resets one
/// before each use. The replaced text must match exactly: a UniFFI that
/// generates it differently fails here instead of shipping unpatched.
fn reuse_kotlin_call_statuses(path: &Path) -> Result<(), String> {
    const GENERATED: &str = "    var status = UniffiRustCallStatus()
    val return_value = callback(status)
    uniffiCheckCallStatus(errorHandler, status)
    return return_value
}
";
    const REUSED: &str = "    val statuses = uniffiCallStatuses.get()
    val status = statuses.removeLastOrNull() ?: UniffiRustCallStatus()
    status.code = UNIFFI_CALL_SUCCESS
    status.error_buf.capacity = 0
    status.error_buf.len = 0
    status.error_buf.data = null
    try {
        val return_value = callback(status)
        uniffiCheckCallStatus(errorHandler, status)
        return return_value
    } finally {
        statuses.addLast(status)
    }
}

// keel: each thread's call statuses, one per depth of nesting, reused (a new
// JNA Structure per call costs more than most calls; see xtask/src/bindings.rs).
private val uniffiCallStatuses: ThreadLocal<ArrayDeque<UniffiRustCallStatus>> =
    ThreadLocal.withInitial { ArrayDeque<UniffiRustCallStatus>() }
";
    let text = std::fs::read_to_string(path)
        .map_err(|e| format!("cannot read {}: {e}", path.display()))?;
    if text.matches(GENERATED).count() != 1 {
        return Err(format!(
            "{}: UniFFI's call-status allocation is not where keel patches it (a new UniFFI?)",
            path.display()
        ));
    }
    std::fs::write(path, text.replace(GENERATED, REUSED))
        .map_err(|e| format!("cannot write {}: {e}", path.display()))
}
