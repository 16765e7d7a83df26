//! `cargo xtask <command>`: the project's own commands.
//!
//! * `cargo xtask test` — every test: the Rust workspace, then every extra suite
//!   (benchmarks in `--quick` mode so their code paths stay honest). Cargo's own
//!   output (its `test result:` lines) passes straight through; any failure makes
//!   the command exit non-zero.
//! * `cargo xtask bench [SCENARIO…] [--quick] [--json]` — runs the scenario
//!   benchmarks under `benches/`, each of which writes
//!   `target/keel-bench/<scenario>.json`, then renders `BENCHMARKS.md` from those
//!   files. `--json` also prints the JSON of each scenario to stdout.

mod bench;
mod stress;
mod util;

use std::process::ExitCode;

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let result = match args.first().map(String::as_str) {
        Some("test") => test(&args[1..]),
        Some("bench") => bench::run(&args[1..]),
        Some("stress") => stress::run(&args[1..]),
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
  test                         run every test (Rust workspace, quick benchmarks)
  bench [SCENARIO…] [--quick] [--json]
                               run scenario benchmarks and render BENCHMARKS.md
  stress [--seeds N] [--seed S] [--policy P] [--points K]
                               crash/power-loss/fault campaign (simulated disk)";

/// Runs every test suite. Each step inherits stdio so cargo's own summary lines
/// reach the caller unchanged; the first failing step stops the run.
fn test(args: &[String]) -> Result<(), String> {
    if let Some(extra) = args.first() {
        return Err(format!(
            "`cargo xtask test` takes no arguments (got `{extra}`)"
        ));
    }
    util::cargo(&["test", "--workspace", "--exclude", "xtask"])?;
    // Benchmarks are code too: run them small so they cannot rot unnoticed.
    bench::run(&["--quick".to_string()])?;
    println!("xtask test: all suites passed");
    Ok(())
}
