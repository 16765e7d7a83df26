//! `cargo xtask bench`: run scenario benchmarks and render `BENCHMARKS.md`.
//!
//! Every file `benches/<scenario>.rs` is a `harness = false` benchmark of the root
//! package. It runs real work against keel and, in the same process, a baseline
//! (raw rusqlite, a rewritten JSON file, …), then writes
//! `target/keel-bench/<scenario>.json`:
//!
//! ```json
//! {"scenario": "open", "metrics": {"caller_blocked_ms": 0.4, …},
//!  "notes": {"caller_blocked_ms": "longest block of the calling thread …"}}
//! ```
//!
//! `metrics` holds numbers only; `notes` (optional) explains each metric and is
//! what the report prints beside it; `labels` (optional) gives a metric a short
//! human name for the chart and the comparison table (`"case1_ratio": "pk queries"`);
//! `method` (optional, Markdown) says how the scenario is set up; `targets`
//! (optional) lists the goals the scenario is held to, each as `{"metric", "label",
//! "median", "min", "max", "target", "better": "lower"|"higher", "unit"}` — xtask
//! decides `met` from the median and prints which targets are missed (a report, not
//! a failure: benchmarks are not timed tests). A full run replaces that scenario's section of
//! `BENCHMARKS.md` (between `<!-- bench:NAME:start -->` and `<!-- bench:NAME:end -->`)
//! and leaves the other sections alone. `--quick` runs each scenario small enough
//! for CI: it writes the JSON and prints the table, but does not touch
//! `BENCHMARKS.md`, whose figures must come from full runs.
//!
//! Each run also draws the scenario's chart with plotters ([`charts`]): a full run
//! into `docs/bench-<scenario>.png` (linked from its section and from the README), a
//! quick run into `target/keel-bench/<scenario>.png` so CI draws it too without
//! changing the tree.

// The chart module lives beside this file and belongs to `bench` alone (declared
// here rather than in main.rs).
#[path = "charts.rs"]
pub mod charts;

use crate::util;
use serde_json::Value;
use std::fs;
use std::path::{Path, PathBuf};

pub fn run(args: &[String]) -> Result<(), String> {
    let mut quick = false;
    let mut print_json = false;
    let mut wanted = Vec::new();
    for arg in args {
        match arg.as_str() {
            "--quick" => quick = true,
            "--json" => print_json = true,
            flag if flag.starts_with('-') => return Err(format!("unknown bench flag `{flag}`")),
            name => wanted.push(name.to_string()),
        }
    }
    let mut available = scenarios()?;
    // `swift` is the Swift suite's typed-vs-bytes benchmark (xtask/src/swift.rs), not
    // a file under benches/: a full run includes it when a Swift toolchain exists;
    // quick runs (inside `cargo xtask test`) leave it to the Swift suite, which
    // prints the same figures.
    let swift_here = crate::util::swift_exe().is_some();
    if wanted.iter().any(|w| w == "swift") || (swift_here && !quick && wanted.is_empty()) {
        available.push("swift".to_string());
    }
    if available.is_empty() {
        println!("xtask bench: no scenarios under benches/ yet");
        return Ok(());
    }
    let selected: Vec<String> = if wanted.is_empty() {
        // The binding scenario needs a JDK: part of a full run only where one exists.
        // Quick runs leave it out: `cargo xtask test` runs it inside the Kotlin suite.
        let java = !quick
            && std::process::Command::new("java")
                .arg("-version")
                .output()
                .is_ok_and(|o| o.status.success());
        available
            .iter()
            .filter(|n| n.as_str() != KOTLIN || java)
            .cloned()
            .collect()
    } else {
        for name in &wanted {
            if !available.contains(name) {
                return Err(format!(
                    "no benchmark scenario `{name}` (have: {})",
                    available.join(", ")
                ));
            }
        }
        wanted
    };

    let out_dir = util::workspace_root().join("target").join("keel-bench");
    for name in &selected {
        let json_path = out_dir.join(format!("{name}.json"));
        // A stale file must not pass for this run's result.
        let _ = fs::remove_file(&json_path);
        if name == "vector" {
            ensure_numpy();
        }
        if name == "swift" {
            crate::swift::bench(quick, &json_path)?;
        } else if name == KOTLIN {
            crate::ffi::kotlin_bench(quick, &json_path)?;
        } else {
            let mut cargo_args = vec![
                "bench",
                "--package",
                package(name),
                "--bench",
                name.as_str(),
                "--",
            ];
            if quick {
                cargo_args.push("--quick");
            }
            util::cargo(&cargo_args)?;
        }
        let mut report = read_report(&json_path, name)?;
        // Whether each target is met is decided here, from the median and the goal,
        // whatever the bench wrote: one rule for every scenario.
        let missed = judge_targets(&mut report);
        // `--json`: stdout carries the JSON alone (one line per scenario), so it can be
        // piped; everything for humans goes to stderr.
        let say = |text: &str| {
            if print_json {
                eprintln!("{text}");
            } else {
                println!("{text}");
            }
        };
        if print_json {
            println!("{}", serde_json::to_string(&report).unwrap_or_default());
        }
        let section = render_section(name, &report, quick);
        say(&section);
        if let Some(line) = targets_line(name, &report, &missed) {
            say(&line);
        }
        // Quick runs draw their chart under target/ (so CI exercises the code) and
        // leave docs/ and BENCHMARKS.md alone: published figures come from full runs.
        let chart = if quick {
            out_dir.join(format!("{name}.png"))
        } else {
            util::workspace_root().join(chart_path(name))
        };
        let subtitle = format!("{}, {}", machine(), today());
        if charts::render(name, &report, &subtitle, &chart)? {
            say(&format!("xtask bench: drew {}", chart.display()));
        }
        if !quick {
            update_benchmarks_md(name, &section)?;
            update_docs(name, &report)?;
        }
    }
    Ok(())
}

/// The vector scenario compares keel with numpy in a child Python: install numpy
/// from PyPI for this user when it is missing (a fresh machine). Without Python or
/// PyPI the scenario runs anyway and its summary says the comparison was skipped.
fn ensure_numpy() {
    let has = |py: &str| {
        std::process::Command::new(py)
            .args(["-c", "import numpy"])
            .output()
            .is_ok_and(|o| o.status.success())
    };
    if has("python3") {
        return;
    }
    eprintln!(
        "xtask bench: vector compares with numpy, which is missing: pip install --user numpy"
    );
    let installed = std::process::Command::new("python3")
        .args(["-m", "pip", "install", "--quiet", "--user", "numpy"])
        .status()
        .is_ok_and(|s| s.success());
    if !installed || !has("python3") {
        eprintln!("xtask bench: numpy could not be installed; the numpy comparison is skipped");
    }
}

/// The binding scenario: the Kotlin suite's typed-vs-bytes benchmark
/// (`bindings/kotlin/KeelTest.kt`, run through `ffi::kotlin_bench`), which writes
/// `target/keel-bench/kotlin.json` like the Rust scenarios do.
const KOTLIN: &str = "kotlin";

/// The package whose `[[bench]]` a scenario is: `keel-benches`, except the
/// encryption scenario, whose `encryption` feature (SQLCipher for the whole
/// program) must not reach the others.
fn package(scenario: &str) -> &'static str {
    match scenario {
        "encryption" => "keel-bench-encryption",
        _ => "keel-benches",
    }
}

/// Scenario names: one per `benches/*.rs` file, then the binding scenario.
fn scenarios() -> Result<Vec<String>, String> {
    let dir = util::workspace_root().join("benches");
    let Ok(entries) = fs::read_dir(&dir) else {
        return Ok(vec![KOTLIN.to_string()]);
    };
    let mut names: Vec<String> = entries
        .filter_map(|e| e.ok())
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|x| x == "rs"))
        .filter_map(|p| p.file_stem().map(|s| s.to_string_lossy().into_owned()))
        .collect();
    names.sort();
    names.push(KOTLIN.to_string());
    Ok(names)
}

/// Reads and validates `target/keel-bench/<scenario>.json`.
fn read_report(path: &Path, name: &str) -> Result<Value, String> {
    let text = fs::read_to_string(path)
        .map_err(|e| format!("benchmark `{name}` did not write {}: {e}", path.display()))?;
    let report: Value = serde_json::from_str(&text)
        .map_err(|e| format!("{} is not valid JSON: {e}", path.display()))?;
    if report.get("scenario").and_then(Value::as_str) != Some(name) {
        return Err(format!("{}: `scenario` must be \"{name}\"", path.display()));
    }
    let metrics = report
        .get("metrics")
        .and_then(Value::as_object)
        .ok_or_else(|| format!("{}: missing `metrics` object", path.display()))?;
    if metrics.is_empty() {
        return Err(format!("{}: `metrics` is empty", path.display()));
    }
    if let Some((key, _)) = metrics.iter().find(|(_, v)| !v.is_number()) {
        return Err(format!(
            "{}: metric `{key}` is not a number",
            path.display()
        ));
    }
    Ok(report)
}

fn render_section(name: &str, report: &Value, quick: bool) -> String {
    let mut out = String::new();
    out.push_str(&format!("<!-- bench:{name}:start -->\n"));
    out.push_str(&format!("## `{name}`\n\n"));
    out.push_str(&format!(
        "Measured {} on {}{}.\n\n",
        today(),
        machine(),
        if quick {
            " (quick mode: small sizes, not representative)"
        } else {
            ""
        }
    ));
    if let Some(summary) = report.get("summary").and_then(Value::as_str) {
        out.push_str(summary);
        out.push_str("\n\n");
    }
    // How the scenario is set up (the bench's own doc comment, so it is said once).
    if let Some(method) = report.get("method").and_then(Value::as_str) {
        out.push_str(method.trim_end());
        out.push_str("\n\n");
    }
    if !quick && !charts::panels(report).is_empty() {
        out.push_str(&format!(
            "![{name} benchmark chart]({})\n\n",
            chart_path(name)
        ));
    }
    out.push_str(&comparison_table(report));
    out.push_str("| metric | value | what it is |\n|---|---:|---|\n");
    let notes = report.get("notes").and_then(Value::as_object);
    if let Some(metrics) = report.get("metrics").and_then(Value::as_object) {
        for (key, value) in metrics {
            let note = notes
                .and_then(|n| n.get(key))
                .and_then(Value::as_str)
                .unwrap_or("");
            out.push_str(&format!(
                "| `{key}` | {} | {note} |\n",
                format_number(value)
            ));
        }
    }
    out.push_str(&format!("\n<!-- bench:{name}:end -->"));
    out
}

/// Where a full run draws a scenario's chart (relative to the workspace root).
pub fn chart_path(name: &str) -> String {
    format!("docs/bench-{name}.png")
}

/// The comparisons at a glance: every `*_ratio` (keel ÷ baseline time) and every
/// speedup, before the full table.
fn headline_table(report: &Value) -> String {
    let Some(metrics) = report.get("metrics").and_then(Value::as_object) else {
        return String::new();
    };
    let mut rows = String::new();
    for (key, value) in metrics {
        let Some(x) = value.as_f64() else { continue };
        if let Some(op) = key.strip_suffix("_ratio") {
            let shown = if x >= 0.01 {
                format!("{x:.2}")
            } else {
                charts::sig3(x)
            };
            let verdict = charts::ratio_verdict(x);
            let op = charts::label(report, key).unwrap_or_else(|| op.to_string());
            rows.push_str(&format!("| {op} | {shown} | {verdict} |\n"));
        } else if key.contains("speedup") {
            let key = charts::label(report, key).unwrap_or_else(|| key.clone());
            rows.push_str(&format!(
                "| {key} | {x:.1}× | speedup (higher is better) |\n"
            ));
        }
    }
    if rows.is_empty() {
        return String::new();
    }
    format!("| comparison | figure | reading |\n|---|---:|---|\n{rows}\n")
}

/// The comparisons at a glance: the scenario's targets when it declares any (see
/// [`targets_table`]), else every ratio and speedup ([`headline_table`]).
fn comparison_table(report: &Value) -> String {
    targets_table(report).unwrap_or_else(|| headline_table(report))
}

/// A scenario's `targets`: `[{"metric", "label", "median", "min", "max", "target",
/// "better": "lower"|"higher", "unit"}]`, each figure the median of the bench's
/// repetitions with their spread. `None` when the report has none.
fn targets(report: &Value) -> Option<&Vec<Value>> {
    report
        .get("targets")
        .and_then(Value::as_array)
        .filter(|t| !t.is_empty())
}

/// Whether target `t` is met: its median on the good side of its goal (`false` when
/// a figure is missing or not finite).
fn target_met(t: &Value) -> bool {
    let (Some(median), Some(goal)) = (
        t.get("median").and_then(Value::as_f64),
        t.get("target").and_then(Value::as_f64),
    ) else {
        return false;
    };
    if !median.is_finite() {
        return false;
    }
    if t.get("better").and_then(Value::as_str) == Some("higher") {
        median >= goal
    } else {
        median <= goal
    }
}

/// Sets `met` on every target of `report` and returns the metrics of those missed.
fn judge_targets(report: &mut Value) -> Vec<String> {
    let mut missed = Vec::new();
    if let Some(list) = report.get_mut("targets").and_then(Value::as_array_mut) {
        for t in list.iter_mut() {
            let met = target_met(t);
            if !met {
                let metric = t.get("metric").and_then(Value::as_str).unwrap_or("?");
                missed.push(metric.to_string());
            }
            if let Some(obj) = t.as_object_mut() {
                obj.insert("met".into(), Value::Bool(met));
            }
        }
    }
    missed
}

/// The plain verdict printed after a scenario with targets: which are missed, or
/// that all are met. A missed target is reported, not an error: benchmarks are not
/// timed tests and CI does not fail on them.
fn targets_line(name: &str, report: &Value, missed: &[String]) -> Option<String> {
    let all = targets(report)?;
    Some(if missed.is_empty() {
        format!("xtask bench: {name}: all {} targets met", all.len())
    } else {
        let detail: Vec<String> = all
            .iter()
            .filter(|t| !target_met(t))
            .map(|t| {
                let metric = t.get("metric").and_then(Value::as_str).unwrap_or("?");
                format!("{metric} {} (target {})", figure(t, "median"), goal(t))
            })
            .collect();
        format!(
            "xtask bench: {name}: {} of {} targets MISSED: {}",
            missed.len(),
            all.len(),
            detail.join("; ")
        )
    })
}

/// `t[key]` with `t`'s unit (`2.18×`, `41.2 MB`).
fn figure(t: &Value, key: &str) -> String {
    let x = t.get(key).and_then(Value::as_f64).unwrap_or(f64::NAN);
    match t.get("unit").and_then(Value::as_str).unwrap_or("") {
        "×" => format!("{x:.2}×"),
        "" => format!("{x:.2}"),
        unit => format!("{x:.1} {unit}"),
    }
}

/// `≤ 1.5×` / `≥ 3×`.
fn goal(t: &Value) -> String {
    let higher = t.get("better").and_then(Value::as_str) == Some("higher");
    let g = t.get("target").and_then(Value::as_f64).unwrap_or(f64::NAN);
    let unit = match t.get("unit").and_then(Value::as_str).unwrap_or("") {
        "×" => "×".to_string(),
        "" => String::new(),
        u => format!(" {u}"),
    };
    format!("{} {g}{unit}", if higher { "≥" } else { "≤" })
}

/// The targets as a table: median, spread over the repetitions, goal, verdict.
fn targets_table(report: &Value) -> Option<String> {
    let all = targets(report)?;
    let mut out = String::from(
        "| target | median | spread (min–max) | goal | met |\n|---|---:|---:|---:|---|\n",
    );
    for t in all {
        let metric = t.get("metric").and_then(Value::as_str).unwrap_or("?");
        let label = t.get("label").and_then(Value::as_str).unwrap_or(metric);
        let spread = match t.get("unit").and_then(Value::as_str).unwrap_or("") {
            "×" | "" => {
                let f = |k: &str| t.get(k).and_then(Value::as_f64).unwrap_or(f64::NAN);
                format!("{:.2}–{:.2}", f("min"), f("max"))
            }
            _ => format!("{} – {}", figure(t, "min"), figure(t, "max")),
        };
        let verdict = if target_met(t) { "yes" } else { "**no**" };
        out.push_str(&format!(
            "| {label} (`{metric}`) | {} | {spread} | {} | {verdict} |\n",
            figure(t, "median"),
            goal(t)
        ));
    }
    out.push('\n');
    Some(out)
}

fn format_number(value: &Value) -> String {
    match value.as_f64() {
        Some(x) if value.is_i64() || value.is_u64() => format!("{}", x as i64),
        Some(x) if x.abs() >= 100.0 => format!("{x:.0}"),
        Some(x) if x.abs() >= 1.0 => format!("{x:.2}"),
        Some(x) => format!("{x:.3}"),
        None => value.to_string(),
    }
}

/// Replaces (or appends) one scenario's section of BENCHMARKS.md.
fn update_benchmarks_md(name: &str, section: &str) -> Result<(), String> {
    let path: PathBuf = util::workspace_root().join("BENCHMARKS.md");
    let current = fs::read_to_string(&path).unwrap_or_else(|_| HEADER.to_string());
    let start = format!("<!-- bench:{name}:start -->");
    let end = format!("<!-- bench:{name}:end -->");
    let updated = match (current.find(&start), current.find(&end)) {
        (Some(s), Some(e)) if e > s => {
            format!("{}{}{}", &current[..s], section, &current[e + end.len()..])
        }
        _ => format!("{}\n{}\n", current.trim_end(), section),
    };
    fs::write(&path, updated).map_err(|e| format!("writing {}: {e}", path.display()))?;
    eprintln!("xtask bench: updated {}", path.display());
    Ok(())
}

/// Put this run's figures into every `docs/*.md` that quotes them: between
/// `<!-- bench:<name>:figures:start -->` and `<!-- bench:<name>:figures:end -->`
/// (so no figure in the docs is typed by hand).
fn update_docs(name: &str, report: &Value) -> Result<(), String> {
    let dir = util::workspace_root().join("docs");
    let Ok(entries) = fs::read_dir(&dir) else {
        return Ok(());
    };
    let figures = docs_figures(name, report, &today(), &machine());
    for path in entries.filter_map(|e| e.ok()).map(|e| e.path()) {
        if path.extension().is_none_or(|x| x != "md") {
            continue;
        }
        let Ok(current) = fs::read_to_string(&path) else {
            continue;
        };
        if let Some(updated) = replace_figures(&current, name, &figures) {
            fs::write(&path, updated).map_err(|e| format!("writing {}: {e}", path.display()))?;
            eprintln!("xtask bench: updated {}", path.display());
        }
    }
    Ok(())
}

/// The block the docs quote: where and when, the bench's summary, the headline table.
fn docs_figures(name: &str, report: &Value, date: &str, machine: &str) -> String {
    let mut out = format!("Measured {date} on {machine} by `cargo xtask bench {name}`:\n\n");
    if let Some(summary) = report.get("summary").and_then(Value::as_str) {
        out.push_str(summary);
        out.push_str("\n\n");
    }
    out.push_str(&comparison_table(report));
    out
}

/// `text` with its `name` figures block replaced, or `None` if it has none.
fn replace_figures(text: &str, name: &str, figures: &str) -> Option<String> {
    let start = format!("<!-- bench:{name}:figures:start -->");
    let end = format!("<!-- bench:{name}:figures:end -->");
    let s = text.find(&start)?;
    let e = text[s..].find(&end)? + s;
    Some(format!(
        "{}{start}\n{}{}",
        &text[..s],
        figures.trim_end().to_owned() + "\n",
        &text[e..]
    ))
}

const HEADER: &str = "# keel benchmarks

Every figure below comes from `cargo xtask bench` on the machine named in its
section. Each scenario runs keel and its baseline (raw rusqlite doing the same SQL
work, or the file-rewrite strategy an app would otherwise use) in the same process;
`*_ratio` is keel's time divided by the baseline's, so below 1 means keel is faster.
Each section opens with its chart (`docs/bench-<scenario>.png`, also shown in the
README) and a keel-vs-baseline table, then lists every metric.
Re-run everything with `cargo xtask bench`, or one scenario with
`cargo xtask bench <scenario>` (its section and chart are replaced);
`cargo xtask bench --quick` is the CI-sized run and changes neither.
";

fn today() -> String {
    util::capture("date", &["-u", "+%Y-%m-%d"]).unwrap_or_else(|| "unknown date".into())
}

fn machine() -> String {
    let cpu = fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("model name"))
                .and_then(|l| l.split(':').nth(1))
                .map(|m| m.trim().to_string())
        })
        .unwrap_or_else(|| std::env::consts::ARCH.to_string());
    let cores = std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(1);
    let kernel = util::capture("uname", &["-sr"]).unwrap_or_else(|| std::env::consts::OS.into());
    format!("{cpu}, {cores} cores, {kernel}")
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn headline_table_reads_at_a_glance() {
        let t = headline_table(&json!({"metrics": {
            "insert_ratio": 2.2, "update_ratio": 0.5, "tiny_ratio": 0.000231,
            "group_speedup": 20.36, "objects": 10
        }}));
        assert!(
            t.contains("| insert | 2.20 | keel takes 2.20× the baseline's time |"),
            "{t}"
        );
        assert!(t.contains("| update | 0.50 | keel 2.0× faster |"), "{t}");
        assert!(t.contains("| tiny | 0.000231 | keel 4329× faster |"), "{t}");
        assert!(t.contains("| group_speedup | 20.4× |"), "{t}");
        // Close to 1 is a draw, not "1.0× faster"; small factors keep two digits.
        let t = headline_table(&json!({"metrics": {"a_ratio": 0.973, "b_ratio": 0.8}}));
        assert!(
            t.contains("| a | 0.97 | about the baseline's time (0.97×) |"),
            "{t}"
        );
        assert!(t.contains("| b | 0.80 | keel 1.25× faster |"), "{t}");
        assert!(!t.contains("1.0× faster"), "{t}");
        assert!(!t.contains("objects"));
        assert_eq!(headline_table(&json!({"metrics": {"objects": 1}})), "");
        let t = headline_table(
            &json!({"metrics": {"case1_ratio": 0.5}, "labels": {"case1_ratio": "pk queries"}}),
        );
        assert!(t.contains("| pk queries | 0.50 |"), "{t}");
    }

    #[test]
    fn docs_quote_the_bench_output_between_markers() {
        let report = json!({"summary": "S.", "metrics": {"case1_ratio": 0.5}});
        let figures = docs_figures("x", &report, "2026-01-01", "M");
        let doc = "intro\n<!-- bench:x:figures:start -->\nold 4.9 ms\n<!-- bench:x:figures:end -->\nrest\n";
        let out = replace_figures(doc, "x", &figures).unwrap();
        assert!(out.starts_with("intro\n<!-- bench:x:figures:start -->\nMeasured 2026-01-01 on M"));
        assert!(out.contains("S.\n\n| comparison |"), "{out}");
        assert!(out.contains("| case1 | 0.50 | keel 2.0× faster |"), "{out}");
        assert!(!out.contains("old 4.9 ms"));
        assert!(
            out.ends_with("<!-- bench:x:figures:end -->\nrest\n"),
            "{out}"
        );
        assert_eq!(replace_figures("no markers", "x", &figures), None);
    }

    #[test]
    fn targets_say_plainly_which_are_missed() {
        let mut report = json!({"scenario": "x", "metrics": {"a_ratio": 2.0},
        "method": "### Set-up\nraw is configured so.",
        "targets": [
            {"metric": "a_ratio", "label": "insert", "median": 2.0, "min": 1.9, "max": 2.4,
             "target": 1.5, "better": "lower", "unit": "×", "met": true},
            {"metric": "s_speedup", "label": "group commit", "median": 3.2, "min": 2.9,
             "max": 3.5, "target": 3.0, "better": "higher", "unit": "×"},
            {"metric": "rss_mb", "label": "peak RSS", "median": 41.0, "min": 40.5,
             "max": 42.0, "target": 64.0, "better": "lower", "unit": "MB"}
        ]});
        // The bench's own `met` is overruled by the median and the goal.
        assert_eq!(judge_targets(&mut report), vec!["a_ratio".to_string()]);
        assert_eq!(report["targets"][0]["met"], json!(false));
        assert_eq!(report["targets"][1]["met"], json!(true));
        let line = targets_line("x", &report, &["a_ratio".into()]).unwrap();
        assert_eq!(
            line,
            "xtask bench: x: 1 of 3 targets MISSED: a_ratio 2.00× (target ≤ 1.5×)"
        );
        let section = render_section("x", &report, true);
        assert!(
            section.contains("### Set-up\nraw is configured so."),
            "{section}"
        );
        assert!(
            section.contains("| insert (`a_ratio`) | 2.00× | 1.90–2.40 | ≤ 1.5× | **no** |"),
            "{section}"
        );
        assert!(
            section.contains("| group commit (`s_speedup`) | 3.20× | 2.90–3.50 | ≥ 3× | yes |"),
            "{section}"
        );
        assert!(
            section
                .contains("| peak RSS (`rss_mb`) | 41.0 MB | 40.5 MB – 42.0 MB | ≤ 64 MB | yes |"),
            "{section}"
        );
        // With targets, they replace the ratio headline table.
        assert!(!section.contains("| comparison | figure |"), "{section}");
        let mut ok = json!({"targets": [{"metric": "a", "median": 1.0, "target": 1.5}]});
        assert!(judge_targets(&mut ok).is_empty());
        assert_eq!(
            targets_line("x", &ok, &[]).unwrap(),
            "xtask bench: x: all 1 targets met"
        );
        assert_eq!(targets_line("x", &json!({"metrics": {}}), &[]), None);
    }

    #[test]
    fn section_links_the_chart_only_in_full_runs() {
        let report = json!({"scenario": "x", "metrics": {"a_ratio": 1.5}});
        assert!(
            render_section("x", &report, false).contains("![x benchmark chart](docs/bench-x.png)")
        );
        assert!(!render_section("x", &report, true).contains("docs/bench-x.png"));
    }
}
