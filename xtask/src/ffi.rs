//! The binding tests run by `cargo xtask test`: Python (asyncio) and Kotlin (JVM,
//! coroutines) programs under `bindings/` drive the generated bindings against the
//! freshly built `keel-ffi` cdylib; the Swift suite (XCTest, see `swift.rs`) runs
//! too when a Swift toolchain is found. Each prints one line per test, `max tick gap: X
//! ms` for the open-never-blocks test, and a summary line
//! (`python bindings: N passed, M failed`); any failure fails the command.
//!
//! The Kotlin suite also compiles the models `keel_schema::kotlin` generates for
//! [`KOTLIN_MODEL_SCHEMAS`], checks that [`KOTLIN_COMPILE_FAIL`] does not compile,
//! and writes its typed-vs-bytes figures to `target/keel-bench/kotlin.json`.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Instant;

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
    util::run_bounded(
        Command::new(py)
            .arg("-u")
            .arg(&script)
            .env("KEEL_PY_BINDINGS", &g.python)
            .env("PYTHONDONTWRITEBYTECODE", "1"),
    )
    .map_err(|e| format!("python bindings failed: {e}"))
}

/// Schemas whose generated Kotlin (`keel_schema::kotlin`) the Kotlin suite compiles
/// with and tests: the blog example, a schema with composite and rowid keys, and
/// the shared hostile-bytes corpus's (`tests/bytes/`), a searchable collection,
/// collections with vector fields and with references (`including`, live across a
/// relation), and two same-named collections of two namespaces (packages `shop`
/// and `warehouse`).
const KOTLIN_MODEL_SCHEMAS: [&str; 7] = [
    "examples/blog/schema/blog.fbs",
    "bindings/kotlin/keys.fbs",
    "tests/bytes/corpus.fbs",
    "bindings/swift/Tests/search.fbs",
    "bindings/swift/Tests/vector.fbs",
    "examples/blog/schema/relations.fbs",
    "examples/blog/schema/namespaces/ns_v1.fbs",
];

/// Every other schema under `examples/`, compiled into the Kotlin suite (not
/// tested there) so that the generated Kotlin for each is known to build: the
/// code-generation edge cases and the evolving schemas, each in a package of its
/// own (`keel codegen kotlin --package`), since versions of one schema share their
/// namespace. The namespaced schemas come again under a package: their two `Item`s
/// then sit in `compiled.ns1` and `compiled.ns1.warehouse`.
const KOTLIN_COMPILE_ONLY: [(&str, &str); 8] = [
    ("examples/blog/schema/edge.fbs", "compiled.edge"),
    (
        "examples/blog/schema/evolution/post_v1.fbs",
        "compiled.evo1",
    ),
    (
        "examples/blog/schema/evolution/post_v2.fbs",
        "compiled.evo2",
    ),
    (
        "examples/blog/schema/evolution/post_v3.fbs",
        "compiled.evo3",
    ),
    (
        "examples/blog/schema/monster/monster_v1.fbs",
        "compiled.monster1",
    ),
    (
        "examples/blog/schema/monster/monster_v2.fbs",
        "compiled.monster2",
    ),
    ("examples/blog/schema/namespaces/ns_v1.fbs", "compiled.ns1"),
    ("examples/blog/schema/namespaces/ns_v2.fbs", "compiled.ns2"),
];

/// The snippet that must not compile (`Post.title ge 2`); the line marked
/// `KEEL-EXPECT-ERROR` must be the one the compiler rejects.
const KOTLIN_COMPILE_FAIL: &str = "bindings/kotlin/compile_fail/WrongType.kt";

/// Two versions of one evolving schema (an enum value, a union member and fields
/// added), for the test that changes a newer object through older types. Both
/// generate package `media`; the older one is moved to package `mediav1`, as if
/// compiled into an older build of the app (its collection name stays `media.Item`).
const KOTLIN_EVOLVING: [(&str, Option<&str>); 2] = [
    ("bindings/swift/Tests/media_v2.fbs", None),
    ("bindings/swift/Tests/media_v1.fbs", Some("mediav1")),
];

/// Generates [`KOTLIN_EVOLVING`] into `models`, renaming the older version's package.
fn old_build_models(root: &Path, models: &Path) -> Result<(), String> {
    for (schema, package) in KOTLIN_EVOLVING {
        let Some(package) = package else {
            keel_schema::kotlin::write_sources(&root.join(schema), models)
                .map_err(|e| format!("keel codegen kotlin {schema}: {e}"))?;
            continue;
        };
        let scratch = models.with_file_name("keel-kotlin-old-build");
        if scratch.exists() {
            std::fs::remove_dir_all(&scratch).map_err(|e| format!("{}: {e}", scratch.display()))?;
        }
        for w in keel_schema::kotlin::write_sources(&root.join(schema), &scratch)
            .map_err(|e| format!("keel codegen kotlin {schema}: {e}"))?
        {
            let text = std::fs::read_to_string(&w).map_err(|e| format!("{}: {e}", w.display()))?;
            let out = models.join(package).join(
                w.file_name()
                    .ok_or_else(|| format!("{}: no file name", w.display()))?,
            );
            std::fs::create_dir_all(out.parent().unwrap_or(models))
                .map_err(|e| format!("{}: {e}", out.display()))?;
            std::fs::write(&out, rename_package(&text, "media", package))
                .map_err(|e| format!("{}: {e}", out.display()))?;
        }
    }
    Ok(())
}

/// `text` with package `from` renamed `to`: the `package` line and every qualified
/// type name `from.X` in code, but nothing inside string literals (`"media.Item"`
/// names the collection; the schema text in `FBS` keeps its namespace).
fn rename_package(text: &str, from: &str, to: &str) -> String {
    let pat = format!("{from}.");
    let mut out = String::with_capacity(text.len());
    let (mut in_string, mut escaped) = (false, false);
    let mut prev: Option<char> = None;
    let mut i = 0;
    while let Some(c) = text[i..].chars().next() {
        if in_string {
            if escaped {
                escaped = false;
            } else if c == '\\' {
                escaped = true;
            } else if c == '"' {
                in_string = false;
            }
        } else if c == '"' {
            in_string = true;
        } else if text[i..].starts_with(&pat)
            && !prev.is_some_and(|p| p.is_alphanumeric() || p == '_' || p == '.')
        {
            out.push_str(to);
            out.push('.');
            i += pat.len();
            prev = Some('.');
            continue;
        }
        out.push(c);
        prev = Some(c);
        i += c.len_utf8();
    }
    out.replace(&format!("package {from}\n"), &format!("package {to}\n"))
}

/// A compiled Kotlin suite, ready to run.
struct KotlinSuite {
    classpath: String,
    lib_dir: PathBuf,
}

/// Generates the models, compiles `bindings/kotlin/KeelTest.kt` with them, the
/// UniFFI Kotlin and the thin layer (skipped when no source changed), and checks the
/// compile-fail snippet once per compiled suite.
fn kotlin_build(g: &bindings::Generated) -> Result<KotlinSuite, String> {
    let target = bindings::target_dir()?;
    let tc = kotlin::toolchain(&target)?;
    let out = target.join("keel-kotlin-test");
    let classes = out.join("classes");
    let root = util::workspace_root();
    let models = target.join("keel-kotlin-models");
    if models.exists() {
        std::fs::remove_dir_all(&models).map_err(|e| format!("{}: {e}", models.display()))?;
    }
    for schema in KOTLIN_MODEL_SCHEMAS {
        let written = keel_schema::kotlin::write_sources(&root.join(schema), &models)
            .map_err(|e| format!("keel codegen kotlin {schema}: {e}"))?;
        for w in written {
            println!("kotlin bindings: generated {} from {schema}", w.display());
        }
    }
    old_build_models(&root, &models)?;
    for (schema, package) in KOTLIN_COMPILE_ONLY {
        let files = keel_schema::kotlin::sources(&root.join(schema), Some(package))
            .map_err(|e| format!("keel codegen kotlin --package {package} {schema}: {e}"))?;
        for (rel, text) in files {
            let out = models.join(&rel);
            std::fs::create_dir_all(out.parent().unwrap_or(&models))
                .map_err(|e| format!("{}: {e}", out.display()))?;
            std::fs::write(&out, text).map_err(|e| format!("{}: {e}", out.display()))?;
        }
    }
    let sources = [
        g.kotlin.clone(),
        root.join("bindings/kotlin/layer"),
        models,
        root.join("bindings/kotlin/KeelTest.kt"),
        root.join("bindings/kotlin/BytesCorpus.kt"),
        root.join("bindings/kotlin/TxnTest.kt"),
        root.join("bindings/kotlin/SearchTest.kt"),
        root.join("bindings/kotlin/SyncTest.kt"),
        root.join("bindings/kotlin/ObservationTest.kt"),
        root.join("bindings/kotlin/VectorTest.kt"),
        root.join("bindings/kotlin/RelationsTest.kt"),
        root.join("bindings/kotlin/AndroidTest.kt"),
        root.join("bindings/kotlin/KeyTest.kt"),
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
    kotlin_compile_fail(&tc, &out, &classes)?;
    let lib_dir: PathBuf = g
        .cdylib
        .parent()
        .map(PathBuf::from)
        .ok_or("cdylib has no directory")?;
    let mut cp = vec![classes];
    cp.extend(tc.runtime.iter().cloned());
    Ok(KotlinSuite {
        classpath: kotlin::classpath(&cp),
        lib_dir,
    })
}

/// Compiles [`KOTLIN_COMPILE_FAIL`] against the suite's classes and checks that
/// the compiler rejects exactly the marked line, as a type mismatch. The result is
/// remembered next to the classes (a stamp per snippet version).
fn kotlin_compile_fail(tc: &kotlin::Toolchain, out: &Path, classes: &Path) -> Result<(), String> {
    let root = util::workspace_root();
    let snippet = root.join(KOTLIN_COMPILE_FAIL);
    let stamp = out.join(format!(
        ".compile-fail-{:016x}",
        kotlin::fingerprint(std::slice::from_ref(&snippet))
    ));
    if stamp.exists() {
        println!("kotlin compile-fail: {KOTLIN_COMPILE_FAIL} already checked against these classes (rejected)");
        return Ok(());
    }
    let text =
        std::fs::read_to_string(&snippet).map_err(|e| format!("{}: {e}", snippet.display()))?;
    let line = text
        .lines()
        .position(|l| l.contains("KEEL-EXPECT-ERROR"))
        .map(|i| i + 1)
        .ok_or_else(|| format!("{KOTLIN_COMPILE_FAIL} has no KEEL-EXPECT-ERROR line"))?;
    let scratch = out.join("compile-fail-classes");
    let t = Instant::now();
    let diag = kotlin::compile_expecting_failure(
        tc,
        std::slice::from_ref(&snippet),
        &scratch,
        &[classes.to_path_buf()],
    )
    .map_err(|e| format!("kotlin compile-fail: {e}"))?;
    let errors: Vec<&str> = diag.lines().filter(|l| l.contains(": error:")).collect();
    let at = format!("WrongType.kt:{line}:");
    let expected = errors.len() == 1
        && errors[0].contains(&at)
        && errors[0].contains("String")
        && errors[0].to_lowercase().contains("mismatch");
    if !expected {
        return Err(format!(
            "kotlin compile-fail: expected one type-mismatch error at {at} (`Post.title ge 2`), the compiler said:\n{diag}"
        ));
    }
    println!(
        "kotlin compile-fail: `Post.title ge 2` rejected by the compiler in {:.1} s: {}",
        t.elapsed().as_secs_f64(),
        errors[0].trim()
    );
    std::fs::write(&stamp, b"").map_err(|e| format!("{}: {e}", stamp.display()))?;
    Ok(())
}

/// Runs the compiled suite with `args` (test names; none = all). `full_jit`: let
/// the JVM use its optimising compiler (benchmark runs), else C1 only.
fn kotlin_run(
    suite: &KotlinSuite,
    args: &[&str],
    bench_out: &Path,
    bench_n: u32,
    full_jit: bool,
) -> Result<(), String> {
    let root = util::workspace_root();
    let mut cmd = Command::new("java");
    cmd.arg("-XX:+UseSerialGC");
    if !full_jit {
        // Keep the JVM's own background work (JIT, GC) from stealing the ticker's
        // time slices on small CI machines.
        cmd.arg("-XX:TieredStopAtLevel=1");
    }
    util::run_bounded(
        cmd.arg("-cp")
            .arg(&suite.classpath)
            .arg(format!("-Djna.library.path={}", suite.lib_dir.display()))
            .arg("KeelTestKt")
            .args(args)
            .env("KEEL_FIXTURES", root.join("tests/fixtures"))
            .env("KEEL_BYTES_CORPUS", root.join("tests/bytes/corpus.txt"))
            .env("KEEL_BENCH_OUT", bench_out)
            .env("KEEL_BENCH_N", bench_n.to_string())
            .env(
                "KEEL_BENCH_RUNS",
                util::bench_runs(bench_n < 10_000).to_string(),
            ),
    )
}

/// `bindings/kotlin/KeelTest.kt` compiled with the generated Kotlin and run on the
/// JVM. Its typed-vs-bytes benchmark writes `target/keel-bench/kotlin.json` (the
/// figures `cargo xtask bench kotlin` puts into BENCHMARKS.md).
fn kotlin_jvm(g: &bindings::Generated) -> Result<(), String> {
    let suite = kotlin_build(g)?;
    let bench_out = util::workspace_root().join("target/keel-bench/kotlin.json");
    kotlin_run(&suite, &[], &bench_out, 10_000, false)
        .map_err(|e| format!("kotlin bindings failed: {e}"))
}

/// `cargo xtask kotlin-test [TEST…]`: the Kotlin/JVM suite alone, or only the
/// tests named (as `KeelTest.kt` registers them).
pub fn kotlin_test(args: &[String]) -> Result<(), String> {
    let g = bindings::generate(false, &["kotlin".to_string()])?;
    let suite = kotlin_build(&g)?;
    let bench_out = util::workspace_root().join("target/keel-bench/kotlin.json");
    let names: Vec<&str> = args.iter().map(String::as_str).collect();
    kotlin_run(&suite, &names, &bench_out, 10_000, false)
        .map_err(|e| format!("kotlin bindings failed: {e}"))
}

/// The name of the suite's benchmark test (also its scenario in BENCHMARKS.md).
pub const KOTLIN_BENCH_TEST: &str = "typed vs bytes: 10,000 posts";

/// `cargo xtask bench kotlin`: only the Kotlin suite's typed-vs-bytes benchmark
/// (10,000 posts, 1,000 with `quick`), writing `json`.
pub fn kotlin_bench(quick: bool, json: &Path) -> Result<(), String> {
    // Published figures come from an optimised keel; quick runs reuse the debug build.
    let g = bindings::generate(!quick, &["kotlin".to_string()])?;
    let suite = kotlin_build(&g)?;
    kotlin_run(
        &suite,
        &[KOTLIN_BENCH_TEST],
        json,
        if quick { 1_000 } else { 10_000 },
        true,
    )
    .map_err(|e| format!("kotlin benchmark failed: {e}"))
}

#[cfg(test)]
mod tests {
    #[test]
    fn rename_package_renames_code_not_string_literals() {
        let src =
            "package media\nval x: media.Img = f(\"media.Item\", \"a \\\" media.X\") + amedia.Y\n";
        let want =
            "package mediav1\nval x: mediav1.Img = f(\"media.Item\", \"a \\\" media.X\") + amedia.Y\n";
        assert_eq!(super::rename_package(src, "media", "mediav1"), want);
    }
}
