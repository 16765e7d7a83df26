//! A Kotlin toolchain fetched from Maven Central, for the JVM binding test and the
//! AAR's `classes.jar`. Nothing has to be installed by hand beyond a JDK (17+) and
//! Maven: the compiler, the Kotlin standard library, kotlinx-coroutines and JNA are
//! resolved by `mvn dependency:copy-dependencies` into `target/kotlin-deps/`, once.
//! Where Maven Central cannot be reached, the same versions are taken from
//! `../shared/offline/kotlin` when that folder exists (machines without registries).

use std::path::{Path, PathBuf};
use std::process::Command;

use crate::util;

/// Kotlin compiler and standard library version.
pub const KOTLIN: &str = "2.1.0";
/// kotlinx-coroutines version (the generated code's `suspend fun`s need it).
pub const COROUTINES: &str = "1.9.0";
/// JNA version (UniFFI's Kotlin code loads the library through JNA).
pub const JNA: &str = "5.15.0";

/// Jars of the fetched toolchain.
pub struct Toolchain {
    /// Everything (compiler classpath).
    pub all: Vec<PathBuf>,
    /// What compiled code needs at compile and run time: stdlib, coroutines, JNA,
    /// annotations.
    pub runtime: Vec<PathBuf>,
}

fn pom() -> String {
    format!(
        r#"<?xml version="1.0" encoding="UTF-8"?>
<!-- Written by `cargo xtask` (xtask/src/kotlin.rs): the Kotlin toolchain the binding
     tests and the AAR build use. Resolved with `mvn dependency:copy-dependencies`. -->
<project xmlns="http://maven.apache.org/POM/4.0.0">
  <modelVersion>4.0.0</modelVersion>
  <groupId>dev.keel</groupId>
  <artifactId>keel-kotlin-deps</artifactId>
  <version>0</version>
  <packaging>pom</packaging>
  <dependencies>
    <dependency><groupId>org.jetbrains.kotlin</groupId><artifactId>kotlin-compiler-embeddable</artifactId><version>{KOTLIN}</version></dependency>
    <dependency><groupId>org.jetbrains.kotlin</groupId><artifactId>kotlin-stdlib</artifactId><version>{KOTLIN}</version></dependency>
    <dependency><groupId>org.jetbrains.kotlinx</groupId><artifactId>kotlinx-coroutines-core-jvm</artifactId><version>{COROUTINES}</version></dependency>
    <dependency><groupId>net.java.dev.jna</groupId><artifactId>jna</artifactId><version>{JNA}</version></dependency>
  </dependencies>
</project>
"#
    )
}

fn have(program: &str, arg: &str) -> bool {
    Command::new(program)
        .arg(arg)
        .output()
        .map(|o| o.status.success())
        .unwrap_or(false)
}

/// Fetch (once) and return the toolchain under `<target>/kotlin-deps/`.
pub fn toolchain(target: &Path) -> Result<Toolchain, String> {
    if !have("java", "-version") {
        return Err("the Kotlin steps need a JDK (17 or newer): `java` was not found".into());
    }
    let dir = target.join("kotlin-deps");
    let jars = dir.join("jars");
    let pom = pom();
    let stamp = jars.join(format!(".complete-kotlin-{KOTLIN}-{COROUTINES}-{JNA}"));
    if !stamp.exists() {
        if let Err(maven) = fetch_with_maven(&dir, &jars, &pom) {
            // A machine that reaches crates.io may still not reach Maven Central
            // (`.ci/run` only tests the former): use the offline copy beside the
            // checkout when it carries exactly these versions.
            copy_offline_jars(&jars).map_err(|offline| format!("{maven}\n{offline}"))?;
        }
        std::fs::write(&stamp, b"").map_err(|e| format!("{}: {e}", stamp.display()))?;
    }
    list_toolchain(&jars)
}

/// The jars of `../shared/offline/kotlin` (see its README), copied into `jars`; an
/// error unless the folder holds the compiler, stdlib, coroutines and JNA versions
/// this file asks Maven for.
fn copy_offline_jars(jars: &Path) -> Result<(), String> {
    let offline = crate::util::workspace_root().join("../shared/offline/kotlin");
    let wanted = [
        format!("kotlin-compiler-embeddable-{KOTLIN}.jar"),
        format!("kotlin-stdlib-{KOTLIN}.jar"),
        format!("kotlinx-coroutines-core-jvm-{COROUTINES}.jar"),
        format!("jna-{JNA}.jar"),
    ];
    if let Some(missing) = wanted.iter().find(|j| !offline.join(j).is_file()) {
        return Err(format!(
            "no offline Kotlin toolchain either: {} has no {missing}",
            offline.display()
        ));
    }
    std::fs::create_dir_all(jars).map_err(|e| format!("{}: {e}", jars.display()))?;
    for entry in std::fs::read_dir(&offline).map_err(|e| format!("{}: {e}", offline.display()))? {
        let from = entry
            .map_err(|e| format!("{}: {e}", offline.display()))?
            .path();
        if from.extension().is_some_and(|x| x == "jar") {
            let to = jars.join(from.file_name().unwrap_or_default());
            std::fs::copy(&from, &to)
                .map_err(|e| format!("{} -> {}: {e}", from.display(), to.display()))?;
        }
    }
    println!(
        "kotlin: Maven Central not reachable; using the jars of {}",
        offline.display()
    );
    Ok(())
}

/// Resolves the toolchain into `jars` with `mvn dependency:copy-dependencies`.
fn fetch_with_maven(dir: &Path, jars: &Path, pom: &str) -> Result<(), String> {
    if !have("mvn", "-v") {
        return Err(
            "the Kotlin steps fetch the compiler from Maven Central with Maven: `mvn` was not found"
                .into(),
        );
    }
    std::fs::create_dir_all(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    let pom_path = dir.join("pom.xml");
    std::fs::write(&pom_path, pom).map_err(|e| format!("{}: {e}", pom_path.display()))?;
    if jars.exists() {
        let _ = std::fs::remove_dir_all(jars);
    }
    println!("kotlin: fetching kotlin-compiler-embeddable {KOTLIN}, kotlinx-coroutines {COROUTINES}, jna {JNA} from Maven Central");
    // Quiet Maven still prints colour resets; show its output only on failure.
    let out = Command::new("mvn")
        .args(["-B", "-q", "-Dstyle.color=never", "-f"])
        .arg(&pom_path)
        .arg("dependency:copy-dependencies")
        .arg(format!("-DoutputDirectory={}", jars.display()))
        .arg("-Dkotlin.compiler.daemon=false")
        .current_dir(dir)
        .output()
        .map_err(|e| format!("could not run mvn: {e}"))?;
    if !out.status.success() {
        return Err(format!(
            "mvn dependency:copy-dependencies failed ({}):\n{}{}",
            out.status,
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        ));
    }
    Ok(())
}

/// The toolchain in `jars`, split into the compiler classpath and the runtime.
fn list_toolchain(jars: &Path) -> Result<Toolchain, String> {
    let mut all: Vec<PathBuf> = std::fs::read_dir(jars)
        .map_err(|e| format!("{}: {e}", jars.display()))?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "jar"))
        .collect();
    all.sort();
    let runtime = all
        .iter()
        .filter(|p| {
            let n = p.file_name().and_then(|n| n.to_str()).unwrap_or("");
            n.starts_with("kotlin-stdlib-")
                || n.starts_with("kotlinx-coroutines-core-jvm-")
                || n.starts_with("jna-")
                || n.starts_with("annotations-")
        })
        .cloned()
        .collect::<Vec<_>>();
    if !all.iter().any(|p| {
        p.file_name()
            .and_then(|n| n.to_str())
            .is_some_and(|n| n.starts_with("kotlin-compiler-embeddable-"))
    }) {
        return Err(format!(
            "{} has no kotlin-compiler-embeddable jar; delete the directory to refetch",
            jars.display()
        ));
    }
    Ok(Toolchain { all, runtime })
}

/// The platform's classpath separator.
pub fn classpath(paths: &[PathBuf]) -> String {
    let sep = if cfg!(windows) { ";" } else { ":" };
    paths
        .iter()
        .map(|p| p.display().to_string())
        .collect::<Vec<_>>()
        .join(sep)
}

/// Compile Kotlin `sources` (files or directories) into `out` (a directory or a
/// `.jar`), against the toolchain's runtime jars plus `extra_cp`, for JVM bytecode
/// level `jvm_target` (`"11"`, `"17"`).
pub fn compile(
    tc: &Toolchain,
    sources: &[PathBuf],
    out: &Path,
    extra_cp: &[PathBuf],
    jvm_target: &str,
) -> Result<(), String> {
    util::run(&mut compile_command(tc, sources, out, extra_cp, jvm_target))
}

/// Compile `sources` expecting the compiler to reject them: `Ok(diagnostics)` with
/// the compiler's output when it failed, `Err` when it compiled (or could not run).
pub fn compile_expecting_failure(
    tc: &Toolchain,
    sources: &[PathBuf],
    out: &Path,
    extra_cp: &[PathBuf],
) -> Result<String, String> {
    let mut cmd = compile_command(tc, sources, out, extra_cp, "17");
    cmd.current_dir(util::workspace_root());
    let o = cmd
        .output()
        .map_err(|e| format!("could not run the Kotlin compiler: {e}"))?;
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    );
    if o.status.success() {
        Err(format!(
            "the Kotlin compiler accepted code it must reject:\n{text}"
        ))
    } else {
        Ok(text)
    }
}

fn compile_command(
    tc: &Toolchain,
    sources: &[PathBuf],
    out: &Path,
    extra_cp: &[PathBuf],
    jvm_target: &str,
) -> Command {
    let mut cp = tc.runtime.clone();
    cp.extend(extra_cp.iter().cloned());
    let mut cmd = Command::new("java");
    cmd.arg("-Xss8m")
        .arg("-cp")
        .arg(classpath(&tc.all))
        .arg("-Dkotlin.compiler.daemon=false")
        .arg("org.jetbrains.kotlin.cli.jvm.K2JVMCompiler")
        .args([
            "-no-stdlib",
            "-no-reflect",
            "-nowarn",
            "-jvm-target",
            jvm_target,
        ])
        .arg("-classpath")
        .arg(classpath(&cp))
        .arg("-d")
        .arg(out)
        .args(sources);
    cmd
}

/// A stable fingerprint (FNV-1a) of the files under `paths`, to skip recompiling
/// unchanged Kotlin.
pub fn fingerprint(paths: &[PathBuf]) -> u64 {
    fn walk(p: &Path, out: &mut Vec<PathBuf>) {
        if p.is_dir() {
            if let Ok(rd) = std::fs::read_dir(p) {
                let mut v: Vec<PathBuf> = rd.filter_map(|e| e.ok().map(|e| e.path())).collect();
                v.sort();
                for c in v {
                    walk(&c, out);
                }
            }
        } else {
            out.push(p.to_path_buf());
        }
    }
    let mut files = Vec::new();
    for p in paths {
        walk(p, &mut files);
    }
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    let mut eat = |b: &[u8]| {
        for x in b {
            h ^= u64::from(*x);
            h = h.wrapping_mul(0x0100_0000_01b3);
        }
    };
    eat(KOTLIN.as_bytes());
    for f in files {
        eat(f.display().to_string().as_bytes());
        eat(&std::fs::read(&f).unwrap_or_default());
    }
    h
}
