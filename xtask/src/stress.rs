//! `cargo xtask stress [--seeds N] [--seed S] [--policy P] [--points K] [--encrypted] [--debug]` —
//! long crash / power-loss / I/O-fault campaigns through keel-storage's simulated disk.
//!
//! Runs the `campaign_ci` test of `crates/keel-storage/tests/crash_campaign.rs` in a
//! release build with the campaign size in the environment, so the campaign code is
//! the one CI runs. Seeds rotate through the honest sync policies (full, barrier,
//! normal, custom, off) unless `--policy` pins one; each seed simulates `--points`
//! crash points and injects as many faults (default 100). `--seed S` replays one seed
//! exactly (the repro line printed with every failure). The last lines are the
//! summary: `crash points: N, faults: M, lost: 0, corrupt: 0, refused: 0`.
//! `--encrypted` runs the same campaign on SQLCipher files, every store keyed with a
//! data key from the seed (`campaign::run_encrypted`).
//!
//! `cargo xtask stress --sync [--seeds N] [--seed S] [--rounds R] [--debug]` runs
//! the sync convergence test instead (`tests/sync_converge.rs`): five client
//! processes and two relay processes on a throwaway PostgreSQL, fault-injecting
//! proxies between them, clients and relays killed with SIGKILL at every step;
//! N seeds (default 20) of R rounds (default 30). `--seed S` replays one seed
//! (the line each seed prints). The last line is the summary: `client kills: …,
//! diverged: 0`.

pub fn run(args: &[String]) -> Result<(), String> {
    if args.iter().any(|a| a == "--sync") {
        return sync(args);
    }
    campaign(args)
}

/// The sync convergence test, long.
fn sync(args: &[String]) -> Result<(), String> {
    let mut envs: Vec<(&str, String)> = Vec::new();
    let mut release = true;
    let mut it = args.iter();
    while let Some(a) = it.next() {
        let mut value = |name: &str| {
            it.next()
                .cloned()
                .ok_or_else(|| format!("`{name}` needs a value"))
        };
        match a.as_str() {
            "--sync" => {}
            "--seeds" => envs.push(("KEEL_SYNC_STRESS_SEEDS", number(&value("--seeds")?)?)),
            "--seed" => envs.push(("KEEL_SYNC_STRESS_SEED", number(&value("--seed")?)?)),
            "--rounds" => envs.push(("KEEL_SYNC_STRESS_ROUNDS", number(&value("--rounds")?)?)),
            "--debug" => release = false,
            other => {
                return Err(format!(
                    "unknown argument `{other}`\nusage: cargo xtask stress --sync [--seeds N] [--seed S] [--rounds R] [--debug]"
                ))
            }
        }
    }
    if !envs
        .iter()
        .any(|(k, _)| k.ends_with("SEEDS") || k.ends_with("SEED"))
    {
        envs.push(("KEEL_SYNC_STRESS_SEEDS", "20".into()));
    }
    if !envs.iter().any(|(k, _)| k.ends_with("ROUNDS")) {
        envs.push(("KEEL_SYNC_STRESS_ROUNDS", "30".into()));
    }
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".to_string());
    let mut cmd = std::process::Command::new(cargo);
    cmd.args(["test", "-p", "keel", "--test", "sync_converge"]);
    if release {
        cmd.arg("--release");
    }
    cmd.args([
        "--",
        "clients_converge_under_faults_kills_and_restarts",
        "--exact",
        "--nocapture",
    ]);
    for (k, v) in envs {
        cmd.env(k, v);
    }
    crate::util::run(&mut cmd)
}

fn campaign(args: &[String]) -> Result<(), String> {
    let mut envs: Vec<(&str, String)> = Vec::new();
    let mut release = true;
    let mut it = args.iter();
    while let Some(a) = it.next() {
        let mut value = |name: &str| {
            it.next()
                .cloned()
                .ok_or_else(|| format!("`{name}` needs a value"))
        };
        match a.as_str() {
            "--seeds" => envs.push(("KEEL_STRESS_SEEDS", number(&value("--seeds")?)?)),
            "--seed" => envs.push(("KEEL_STRESS_SEED", number(&value("--seed")?)?)),
            "--points" => envs.push(("KEEL_STRESS_POINTS", number(&value("--points")?)?)),
            "--policy" => envs.push(("KEEL_STRESS_POLICY", value("--policy")?)),
            "--debug" => release = false,
            "--encrypted" => envs.push(("KEEL_STRESS_ENCRYPTED", "1".into())),
            other => {
                return Err(format!(
                    "unknown argument `{other}`\nusage: cargo xtask stress [--seeds N] [--seed S] [--policy full|barrier|normal|custom|off|lying-custom|lying-checkpoint] [--points K] [--encrypted] [--debug]"
                ))
            }
        }
    }
    // No size given (`--encrypted` is not one): the long default.
    if envs.iter().all(|(k, _)| *k == "KEEL_STRESS_ENCRYPTED") {
        envs.push(("KEEL_STRESS_SEEDS", "100".into()));
    }
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".to_string());
    let mut cmd = std::process::Command::new(cargo);
    cmd.args(["test", "-p", "keel-storage", "--test", "crash_campaign"]);
    if release {
        cmd.arg("--release");
    }
    cmd.args(["--", "campaign_ci", "--exact", "--nocapture"]);
    for (k, v) in envs {
        cmd.env(k, v);
    }
    crate::util::run(&mut cmd)
}

fn number(s: &str) -> Result<String, String> {
    s.parse::<u64>()
        .map(|n| n.to_string())
        .map_err(|_| format!("`{s}` is not a number"))
}
