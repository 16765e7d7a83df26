//! `cargo xtask <command>`: the project's own commands.
//!
//! * `cargo xtask test` — every test: first `cargo xtask lint` (fmt, clippy and
//!   rustdoc, warnings denied), then the Rust workspace, then every extra suite
//!   (benchmarks in `--quick` mode so their code paths stay honest). Cargo's own
//!   output (its `test result:` lines) passes straight through; any failure makes
//!   the command exit non-zero.
//! * `cargo xtask lint` — `cargo fmt --check`, `cargo clippy --workspace
//!   --all-targets -- -D warnings`, `cargo doc` with `-D warnings` (public items, then
//!   private ones too); a rustup component that is not installed is skipped with a
//!   message.
//! * `cargo xtask bench [SCENARIO…] [--quick] [--json]` — runs the scenario
//!   benchmarks under `benches/`, each of which writes
//!   `target/keel-bench/<scenario>.json`, then renders `BENCHMARKS.md` from those
//!   files. A scenario may declare targets (median, min–max over its repetitions,
//!   goal): the run prints which are missed, without failing. `--json` prints each
//!   scenario's JSON, targets judged, as the only output on stdout (the rest goes to
//!   stderr). Scenario `kotlin` is the Kotlin suite's typed-vs-bytes benchmark
//!   (needs a JDK).
//! * `cargo xtask bindings [--release] [--test] [python|kotlin|swift…]` — builds
//!   `keel-ffi` and generates its UniFFI sources under `target/keel-bindings/`;
//!   `--test` runs the Python and Kotlin binding tests.
//! * `cargo xtask swift-package` — assembles the SwiftPM package under
//!   `target/keel-swift/` (runs the xcframework build where Xcode exists, prints
//!   the steps elsewhere).
//! * `cargo xtask swift-test` — the Swift suite alone (what `cargo xtask test`
//!   runs when a Swift toolchain is found).
//! * `cargo xtask kotlin-test [TEST…]` — the Kotlin/JVM suite alone (named tests
//!   only, when given).
//! * `cargo xtask aar` — assembles the Android AAR under `target/keel-aar/`.
//! * `cargo xtask multiprocess [--txns N] [--sync P]` — the multi-process tests
//!   (suspend and locks, two writers, SIGKILL) with N transactions per writer.

mod aar;
mod bench;
mod bindings;
mod ffi;
mod kotlin;
mod lint;
mod multiprocess;
mod stress;
mod swift;
mod swift_package;
mod swift_plugin;
mod util;

use std::process::ExitCode;

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let result = match args.first().map(String::as_str) {
        Some("test") => test(&args[1..]),
        Some("lint") => lint::run(&args[1..]),
        Some("bench") => bench::run(&args[1..]),
        // The binding tests build on the generator, so `main` picks them out.
        Some("bindings") if args[1..].iter().any(|a| a == "--test") => ffi::test(),
        Some("bindings") => bindings::run(&args[1..]),
        Some("swift-package") => swift_package::run(&args[1..]),
        Some("swift-test") => swift::run(&args[1..]),
        Some("kotlin-test") => ffi::kotlin_test(&args[1..]),
        Some("aar") => aar::run(&args[1..]),
        Some("stress") => stress::run(&args[1..]),
        Some("multiprocess") => multiprocess::run(&args[1..]),
        Some("help") | Some("--help") | Some("-h") | None => {
            println!("{}", USAGE);
            Ok(())
        }
        Some(other) => Err(format!("unknown command `{other}`\n\n{USAGE}")),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(message) => {
            eprintln!("xtask: {message}");
            ExitCode::FAILURE
        }
    }
}

const USAGE: &str = "usage: cargo xtask <command>

commands:
  test                         lint, then every test (Rust workspace, quick
                               benchmarks, Python, Kotlin and Swift bindings)
  lint                         cargo fmt --check, clippy and rustdoc (-D warnings)
  bench [SCENARIO…] [--quick] [--json]
                               run scenario benchmarks and render BENCHMARKS.md;
                               --json: only the JSON results on stdout
  bindings [--release] [--test] [python|kotlin|swift…]
                               generate the UniFFI sources (target/keel-bindings/);
                               --test runs the Python and Kotlin binding tests
  swift-package [--debug]      assemble the Swift package (target/keel-swift/; release
                               libkeel_ffi.so, --debug: the debug build)
  swift-test                   run the Swift suite alone (XCTest, Linux or macOS)
  kotlin-test [TEST…]          run the Kotlin/JVM suite alone (or the named tests)
  aar                          assemble the Android AAR (target/keel-aar/)
  stress [--seeds N] [--seed S] [--policy P] [--points K]
                               crash/power-loss/fault campaign (simulated disk)
  stress --sync [--seeds N] [--seed S] [--rounds R]
                               sync convergence: 5 client and 2 relay processes,
                               faulty proxies, SIGKILLs; every client converges
  multiprocess [--txns N] [--sync off|normal|full]
                               the multi-process tests, heavier (N transactions
                               per writer process, default 100000; release build)";

/// Runs every test suite. Each step inherits stdio so cargo's own summary lines
/// reach the caller unchanged; the first failing step stops the run.
fn test(args: &[String]) -> Result<(), String> {
    if let Some(extra) = args.first() {
        return Err(format!(
            "`cargo xtask test` takes no arguments (got `{extra}`)"
        ));
    }
    // The tools check the code first: a formatting slip fails in seconds, not after
    // ten minutes of tests.
    lint::run(&[])?;
    util::cargo(&["test", "--workspace", "--exclude", "xtask"])?;
    // xtask's own unit tests (report rendering, charts) in a separate run, so the
    // workspace run above never unifies features with xtask's build tooling.
    util::cargo(&["test", "--package", "xtask"])?;
    // Benchmarks are code too: run them small so they cannot rot unnoticed.
    bench::run(&["--quick".to_string()])?;
    // The Python and Kotlin binding tests (they build keel-ffi and generate sources).
    ffi::test()?;
    println!("xtask test: all suites passed");
    Ok(())
}
