//! `cargo xtask lint` (and the first step of `cargo xtask test`): let the tools check
//! the code before any test runs — `cargo fmt --check`, clippy with warnings denied,
//! and rustdoc with warnings denied (broken intra-doc links, missing docs where a
//! crate denies them), for the public items and again with the private ones. A component that is not installed (`rustup component add
//! rustfmt clippy`) is skipped with a message saying so, never silently.

use std::process::Command;

use crate::util;

/// Runs every check; the first failure stops the run.
pub fn run(args: &[String]) -> Result<(), String> {
    if let Some(extra) = args.first() {
        return Err(format!(
            "`cargo xtask lint` takes no arguments (got `{extra}`)"
        ));
    }
    if available("fmt") {
        util::cargo(&["fmt", "--all", "--", "--check"])
            .map_err(|e| format!("formatting differs (run `cargo fmt --all`): {e}"))?;
        println!("lint: cargo fmt --check passed");
    } else {
        println!("lint: rustfmt skipped (not installed: `rustup component add rustfmt`)");
    }
    if available("clippy") {
        util::cargo(&[
            "clippy",
            "--workspace",
            "--all-targets",
            "--quiet",
            "--",
            "-D",
            "warnings",
        ])?;
        println!("lint: cargo clippy -D warnings passed");
        // The workspace run unifies features (the tests turn encryption on), so
        // it never builds what a cargo dependency on keel builds by default:
        // check those feature sets on their own.
        for features in ["", "sync"] {
            util::cargo(&[
                "clippy",
                "--package",
                "keel",
                "--features",
                features,
                "--quiet",
                "--",
                "-D",
                "warnings",
            ])
            .map_err(|e| format!("keel with features [{features}]: {e}"))?;
        }
        println!("lint: cargo clippy -p keel (default features, and sync) passed");
    } else {
        println!("lint: clippy skipped (not installed: `rustup component add clippy`)");
    }
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".to_string());
    util::run(
        Command::new(&cargo)
            .args(["doc", "--workspace", "--no-deps", "--quiet"])
            .env("RUSTDOCFLAGS", "-D warnings"),
    )?;
    println!("lint: cargo doc -D warnings passed");
    // Again with the private items: module and function docs are what a maintainer
    // reads, and their links break without the public run seeing it.
    util::run(
        Command::new(&cargo)
            .args([
                "doc",
                "--workspace",
                "--no-deps",
                "--document-private-items",
                "--quiet",
            ])
            .env("RUSTDOCFLAGS", "-D warnings"),
    )?;
    println!("lint: cargo doc --document-private-items -D warnings passed");
    Ok(())
}

/// Whether `cargo <component> --version` runs (rustfmt and clippy are optional
/// rustup components).
fn available(component: &str) -> bool {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".to_string());
    Command::new(cargo)
        .args([component, "--version"])
        .output()
        .map(|o| o.status.success())
        .unwrap_or(false)
}
