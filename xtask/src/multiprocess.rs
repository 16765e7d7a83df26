//! `cargo xtask multiprocess [--txns N] [--sync off|normal|full]`: the heavier
//! variant of `crates/keel-storage/tests/multiprocess.rs`: the same
//! real processes — a suspended process holding no lock, two writer processes, a
//! writer SIGKILLed mid-transaction — with N one-row transactions per writer
//! (default 100 000; the CI test uses 10 000) and a real commit sync policy, in a
//! release build.

use std::process::Command;

use crate::util;

pub fn run(args: &[String]) -> Result<(), String> {
    let mut txns = "100000".to_string();
    let mut sync = "normal".to_string();
    let mut it = args.iter();
    while let Some(a) = it.next() {
        match a.as_str() {
            "--txns" => txns = it.next().ok_or("--txns needs a number")?.clone(),
            "--sync" => sync = it.next().ok_or("--sync needs off, normal or full")?.clone(),
            other => return Err(format!("multiprocess: unknown argument `{other}`")),
        }
    }
    txns.parse::<u64>()
        .map_err(|_| format!("--txns: `{txns}` is not a number"))?;
    if !matches!(sync.as_str(), "off" | "normal" | "full") {
        return Err(format!("--sync: `{sync}` is not off, normal or full"));
    }
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".to_string());
    util::run(
        Command::new(cargo)
            .args([
                "test",
                "--release",
                "-p",
                "keel-storage",
                "--test",
                "multiprocess",
                "--",
                "--test-threads=1",
            ])
            .env("KEEL_MP_TXNS", &txns)
            .env("KEEL_MP_SYNC", &sync),
    )
}
