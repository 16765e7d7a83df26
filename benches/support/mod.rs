//! What every scenario benchmark shares: its command-line flags, medians, peak memory
//! and the `target/keel-bench/<scenario>.json` report that `cargo xtask bench` reads.
//!
//! Lives in a subdirectory because `xtask bench` treats every `benches/*.rs` file as a
//! scenario. Each bench includes it with `mod support;` and uses a subset of it.
#![allow(dead_code)]

use std::path::PathBuf;

/// The arguments after `--mode` (a bench's child or counting mode, e.g.
/// `"--count"`), other flags left out; `None` when it was not passed.
pub fn mode_args(mode: &str) -> Option<Vec<String>> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let i = args.iter().position(|a| a == mode)?;
    Some(
        args[i + 1..]
            .iter()
            .filter(|a| !a.starts_with("--"))
            .cloned()
            .collect(),
    )
}

/// Whether `--flag` (e.g. `"--quick"`) was passed after `--` to `cargo bench`.
pub fn flag(name: &str) -> bool {
    std::env::args().any(|a| a == name)
}

/// The number given as `--name=N` after `--` to `cargo bench`, if any.
pub fn number(name: &str) -> Option<usize> {
    let prefix = format!("{name}=");
    std::env::args().find_map(|a| a.strip_prefix(&prefix).and_then(|v| v.parse().ok()))
}

/// The upper median (element `len / 2` once sorted).
pub fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

/// Peak resident memory of this process in MB (Linux `VmHWM`; 0 where unavailable).
pub fn peak_rss_mb() -> f64 {
    status_mb("VmHWM:").map_or(0.0, f64::round)
}

/// Resident memory of this process now, in MB (Linux `VmRSS`; NaN where unavailable).
pub fn rss_mb() -> f64 {
    status_mb("VmRSS:").unwrap_or(f64::NAN)
}

/// A `kB` line of `/proc/self/status`, in MB.
fn status_mb(key: &str) -> Option<f64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with(key))?;
    let kb: f64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kb / 1024.0)
}

/// The value of metric `k` in `metrics`, NaN if it was not recorded.
pub fn get(metrics: &[(&str, f64)], k: &str) -> f64 {
    metrics
        .iter()
        .find(|(n, _)| *n == k)
        .map_or(f64::NAN, |x| x.1)
}

/// `target/keel-bench/`, created if missing.
pub fn out_dir() -> PathBuf {
    // The workspace target directory: beside the Cargo.lock above this package
    // (`benches/` or `benches/encryption/`).
    let mut root = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    while !root.join("Cargo.lock").exists() && root.pop() {}
    let dir = root.join("target/keel-bench");
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// The report's `metrics` and `notes` objects: whole numbers as JSON integers, the
/// rest rounded to `decimals` places (`None`: as measured), each with `note(metric)`.
pub fn metrics_and_notes(
    metrics: &[(&str, f64)],
    decimals: Option<i32>,
    note: impl Fn(&str) -> &'static str,
) -> (
    serde_json::Map<String, serde_json::Value>,
    serde_json::Map<String, serde_json::Value>,
) {
    let mut m = serde_json::Map::new();
    let mut notes = serde_json::Map::new();
    for (k, v) in metrics {
        let value = if v.fract() == 0.0 && v.abs() < 9.0e15 {
            serde_json::json!(*v as i64)
        } else if let Some(d) = decimals {
            let scale = 10f64.powi(d);
            serde_json::json!((v * scale).round() / scale)
        } else {
            serde_json::json!(v)
        };
        m.insert((*k).to_string(), value);
        notes.insert((*k).to_string(), serde_json::json!(note(k)));
    }
    (m, notes)
}

/// Write the `{"scenario", "metrics", "notes", "summary"}` report for `scenario` to
/// `target/keel-bench/<scenario>.json`, rounding and noting `metrics` as
/// [`metrics_and_notes`] does.
pub fn write_metrics_report(
    scenario: &str,
    metrics: &[(&str, f64)],
    decimals: Option<i32>,
    note: impl Fn(&str) -> &'static str,
    summary: String,
) {
    let (m, notes) = metrics_and_notes(metrics, decimals, note);
    write_report(
        scenario,
        &serde_json::json!({ "scenario": scenario, "metrics": m, "notes": notes, "summary": summary }),
    );
}

/// Write the report of a scenario held to `targets`: its metrics and notes (3
/// decimals, as [`metrics_and_notes`]), the targets, a one-line summary, and as
/// `method` the sections `headings` of the bench's module docs (`source`, the
/// bench's own `include_str!`, see [`doc_sections`]).
pub fn write_targets_report(
    scenario: &str,
    metrics: &[(&str, f64)],
    note: impl Fn(&str) -> &'static str,
    targets: Vec<serde_json::Value>,
    summary: String,
    source: &str,
    headings: &[&str],
) {
    let (m, notes) = metrics_and_notes(metrics, Some(3), note);
    let method = doc_sections(source, headings);
    write_report(
        scenario,
        &serde_json::json!({
            "scenario": scenario,
            "metrics": m,
            "notes": notes,
            "targets": targets,
            "summary": summary,
            "method": method,
        }),
    );
}

/// Write `report` (pretty-printed) to `target/keel-bench/<scenario>.json` and say so.
pub fn write_report(scenario: &str, report: &serde_json::Value) {
    let file = out_dir().join(format!("{scenario}.json"));
    std::fs::write(&file, serde_json::to_string_pretty(report).unwrap()).unwrap();
    eprintln!("wrote {}", file.display());
}

/// The sections `headings` of a bench's module doc comment (`//! # Heading` up to the
/// next `//! # `), as Markdown with `###` headings: the report's `method`, so the
/// set-up is described once, in the bench's source, and quoted in BENCHMARKS.md.
pub fn doc_sections(source: &str, headings: &[&str]) -> String {
    let mut out = String::new();
    let mut on = false;
    for line in source.lines().take_while(|l| l.starts_with("//!")) {
        let text = line.strip_prefix("//!").unwrap_or("");
        let text = text.strip_prefix(' ').unwrap_or(text);
        if let Some(h) = text.strip_prefix("# ") {
            on = headings.iter().any(|w| h.starts_with(w));
            if on {
                out.push_str(&format!("### {h}\n"));
            }
            continue;
        }
        if on {
            out.push_str(text);
            out.push('\n');
        }
    }
    out.trim().to_string()
}

/// The operation under an instruction counter: callgrind, started with
/// `--collect-atstart=no --toggle-collect='*measured_region*'`, counts only
/// what runs inside it (on the calling thread: keel's writes run inline with
/// `write_blocking`, so the whole write is counted).
#[inline(never)]
pub fn measured_region(f: &mut dyn FnMut()) {
    f()
}

/// Runs `f` inside [`measured_region`], called through an opaque pointer so
/// the optimiser cannot inline it away.
pub fn measured(mut f: impl FnMut()) {
    let region: fn(&mut dyn FnMut()) = std::hint::black_box(measured_region);
    region(&mut f)
}
