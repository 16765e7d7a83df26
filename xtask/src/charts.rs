//! Benchmark charts: one PNG per scenario, drawn with plotters from the scenario's
//! `target/keel-bench/<scenario>.json`.
//!
//! The chart is generic — it knows no scenario — and reads the metric names:
//!
//! * `*_ratio` metrics (keel's time ÷ the baseline's; below 1 keel is faster) are
//!   the headline: horizontal bars with the baseline drawn at 1;
//! * metrics with `speedup` in their name (higher is better) get their own panel;
//! * a scenario with no ratios shows its times instead (`*_ms`, `*_s`, `*_us`, on a
//!   log scale, baseline runs — names starting `raw_` or holding `baseline` — in grey).
//!
//! Text is drawn with DejaVu Sans, committed under `xtask/assets/` (license beside
//! it), through plotters' `ab_glyph` feature: no system fonts or fontconfig needed.

use std::path::Path;

use plotters::coord::ranged1d::SegmentValue;
use plotters::prelude::*;
use plotters::style::{register_font, FontStyle};
use serde_json::Value;

const FONT: &[u8] = include_bytes!("../assets/DejaVuSans.ttf");

const WIDTH: u32 = 1000;
const ROW: u32 = 34;
const PANEL_EXTRA: u32 = 90;
const HEADER: u32 = 70;

const KEEL: RGBColor = RGBColor(0x2b, 0x6c, 0xb0);
const SPEEDUP: RGBColor = RGBColor(0x2f, 0x85, 0x5a);
const BASELINE: RGBColor = RGBColor(0x9a, 0xa0, 0xa6);
const REFERENCE: RGBColor = RGBColor(0xc5, 0x30, 0x30);

/// One bar.
#[derive(Debug, Clone, PartialEq)]
pub struct Bar {
    pub label: String,
    pub value: f64,
    pub baseline: bool,
}

/// What kind of panel: decides the axis, the reference line and the labels.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum PanelKind {
    /// keel ÷ baseline; reference line at 1, lower is better.
    Ratio,
    /// × faster; reference line at 1, higher is better.
    Speedup,
    /// Milliseconds, log scale.
    Time,
}

/// One panel of a chart.
#[derive(Debug, Clone, PartialEq)]
pub struct Panel {
    pub kind: PanelKind,
    pub title: String,
    pub bars: Vec<Bar>,
}

/// Picks the panels for a scenario report (see the module docs).
pub fn panels(report: &Value) -> Vec<Panel> {
    let Some(metrics) = report.get("metrics").and_then(Value::as_object) else {
        return Vec::new();
    };
    let num = |v: &Value| v.as_f64().filter(|x| x.is_finite());
    let named =
        |key: &str, default: &str| label(report, key).unwrap_or_else(|| default.to_string());
    let mut ratios = Vec::new();
    let mut speedups = Vec::new();
    let mut times = Vec::new();
    for (key, value) in metrics {
        let Some(x) = num(value) else { continue };
        if let Some(label) = key.strip_suffix("_ratio") {
            ratios.push(Bar {
                label: named(key, label),
                value: x,
                baseline: false,
            });
        } else if key.contains("speedup") {
            speedups.push(Bar {
                label: named(key, key),
                value: x,
                baseline: false,
            });
        } else if let Some(ms) = time_ms(key, x) {
            if ms > 0.0 {
                times.push(Bar {
                    label: named(key, key),
                    value: ms,
                    baseline: key.starts_with("raw_") || key.contains("baseline"),
                });
            }
        }
    }
    let mut out = Vec::new();
    if !ratios.is_empty() {
        out.push(Panel {
            kind: PanelKind::Ratio,
            title: "keel time ÷ baseline time, log scale (red line: the baseline; green bars, left of it: keel is faster)".into(),
            bars: ratios,
        });
    }
    if !speedups.is_empty() {
        out.push(Panel {
            kind: PanelKind::Speedup,
            title: "speedup, × (higher is better; red line: 1, no speedup)".into(),
            bars: speedups,
        });
    }
    if out.iter().all(|p| p.kind != PanelKind::Ratio) && !times.is_empty() {
        out.push(Panel {
            kind: PanelKind::Time,
            title: "time in ms, log scale (grey: baseline)".into(),
            bars: times,
        });
    }
    out
}

/// The optional human label of a metric: `"labels": {"case1_ratio": "pk queries"}`
/// in the scenario's JSON (used by the chart and the BENCHMARKS.md table).
pub fn label(report: &Value, key: &str) -> Option<String> {
    report
        .get("labels")
        .and_then(|l| l.get(key))
        .and_then(Value::as_str)
        .map(str::to_string)
}

/// A time metric in milliseconds, from its unit suffix.
fn time_ms(key: &str, x: f64) -> Option<f64> {
    if key.ends_with("_ms") || key.contains("_ms_") {
        Some(x)
    } else if key.ends_with("_us") {
        Some(x / 1e3)
    } else if key.ends_with("_s") {
        Some(x * 1e3)
    } else {
        None
    }
}

fn register() {
    use std::sync::Once;
    static ONCE: Once = Once::new();
    ONCE.call_once(|| {
        // The font is a committed asset; if it were unreadable the charts would
        // fail loudly below ("font" errors), which is what we want.
        let _ = register_font("sans-serif", FontStyle::Normal, FONT);
    });
}

fn err(e: impl std::fmt::Display) -> String {
    format!("drawing chart: {e}")
}

/// Draws `report`'s chart into `out` (PNG). `subtitle` names the machine and date.
/// Returns `false` (and draws nothing) when the report has nothing to chart.
pub fn render(name: &str, report: &Value, subtitle: &str, out: &Path) -> Result<bool, String> {
    let panels = panels(report);
    if panels.is_empty() {
        return Ok(false);
    }
    register();
    if let Some(dir) = out.parent() {
        std::fs::create_dir_all(dir).map_err(|e| format!("creating {}: {e}", dir.display()))?;
    }
    let heights: Vec<u32> = panels
        .iter()
        .map(|p| PANEL_EXTRA + ROW * p.bars.len() as u32)
        .collect();
    let height = HEADER + heights.iter().sum::<u32>();
    let root = BitMapBackend::new(out, (WIDTH, height)).into_drawing_area();
    root.fill(&WHITE).map_err(err)?;
    let (header, mut rest) = root.split_vertically(HEADER);
    header
        .draw(&Text::new(
            format!("keel benchmark: {name}"),
            (20, 14),
            ("sans-serif", 26).into_font().color(&BLACK),
        ))
        .map_err(err)?;
    header
        .draw(&Text::new(
            subtitle.to_string(),
            (20, 46),
            ("sans-serif", 14)
                .into_font()
                .color(&RGBColor(0x55, 0x55, 0x55)),
        ))
        .map_err(err)?;
    for (panel, h) in panels.iter().zip(&heights) {
        let (area, below) = rest.split_vertically(*h);
        draw_panel(&area, panel)?;
        rest = below;
    }
    root.present()
        .map_err(|e| format!("writing {}: {e}", out.display()))?;
    Ok(true)
}

/// Three significant digits, no exponent for ordinary values.
pub fn sig3(v: f64) -> String {
    if v == 0.0 || !v.is_finite() {
        return format!("{v}");
    }
    let digits = (2 - v.abs().log10().floor() as i32).max(0) as usize;
    if digits > 6 {
        format!("{v:.2e}")
    } else {
        format!("{v:.digits$}")
    }
}

/// Tick labels on a log axis: `0.001`, `1`, `1000`, `1e-6`.
fn tick(v: f64) -> String {
    if v >= 1.0 {
        format!("{v:.0}")
    } else if v >= 1e-4 {
        let s = format!("{v:.4}");
        s.trim_end_matches('0').to_string()
    } else {
        format!("{v:.0e}")
    }
}

/// How a `*_ratio` (keel time ÷ baseline time) reads in words. Within 5% of 1 it
/// is a draw (0.973 is not "1.0× faster"); otherwise the factor has as many digits
/// as it needs to be honest (1.25×, 3.4×, 4329×).
pub fn ratio_verdict(x: f64) -> String {
    if !(x.is_finite() && x > 0.0) {
        return "no comparison".into();
    }
    if (0.95..1.05).contains(&x) {
        return format!("about the baseline's time ({x:.2}×)");
    }
    if x >= 1.05 {
        return format!("keel takes {x:.2}× the baseline's time");
    }
    let f = 1.0 / x;
    if f < 2.0 {
        format!("keel {f:.2}× faster")
    } else if f < 10.0 {
        format!("keel {f:.1}× faster")
    } else {
        format!("keel {f:.0}× faster")
    }
}

fn value_text(kind: PanelKind, v: f64) -> String {
    match kind {
        PanelKind::Ratio if v >= 0.95 => format!("{v:.2}"),
        PanelKind::Ratio if v >= 0.1 => format!("{v:.2}  ({})", ratio_verdict(v)),
        PanelKind::Ratio => format!("{}  ({})", sig3(v), ratio_verdict(v)),
        PanelKind::Speedup => format!("{v:.1}×"),
        PanelKind::Time if v >= 100.0 => format!("{v:.0} ms"),
        PanelKind::Time => format!("{} ms", sig3(v)),
    }
}

fn bar_color(kind: PanelKind, b: &Bar) -> RGBColor {
    match (kind, b.baseline) {
        (_, true) => BASELINE,
        (PanelKind::Speedup, _) => SPEEDUP,
        (PanelKind::Ratio, _) if b.value < 1.0 => SPEEDUP,
        _ => KEEL,
    }
}

type Area<'a> = DrawingArea<BitMapBackend<'a>, plotters::coord::Shift>;

fn draw_panel(area: &Area<'_>, p: &Panel) -> Result<(), String> {
    let n = p.bars.len() as i32;
    let labels: Vec<String> = p.bars.iter().map(|b| b.label.clone()).collect();
    let label_width = labels
        .iter()
        .map(|l| l.chars().count() as u32)
        .max()
        .unwrap_or(4)
        .clamp(6, 40)
        * 9
        + 16;
    let max = p.bars.iter().map(|b| b.value).fold(0.0_f64, f64::max);
    let min = p
        .bars
        .iter()
        .map(|b| b.value)
        .filter(|v| *v > 0.0)
        .fold(f64::INFINITY, f64::min)
        .min(max.max(1e-9));
    let y_range = (0..n).into_segmented();
    let y_fmt = |v: &SegmentValue<i32>| match v {
        SegmentValue::CenterOf(i) | SegmentValue::Exact(i) => labels
            .get(usize::try_from(n - 1 - *i).unwrap_or(usize::MAX))
            .cloned()
            .unwrap_or_default(),
        SegmentValue::Last => String::new(),
    };
    // First metric at the top: bar i sits in row n-1-i.
    let rows: Vec<(i32, &Bar)> = p
        .bars
        .iter()
        .enumerate()
        .map(|(i, b)| (n - 1 - i as i32, b))
        .collect();
    let left = plotters::style::text_anchor::Pos::new(
        plotters::style::text_anchor::HPos::Left,
        plotters::style::text_anchor::VPos::Center,
    );
    let value_font = ("sans-serif", 14).into_font().color(&BLACK).pos(left);
    macro_rules! builder {
        ($area:expr) => {
            ChartBuilder::on($area)
                .caption(&p.title, ("sans-serif", 18))
                .margin(12)
                .margin_right(36)
                .x_label_area_size(28)
                .y_label_area_size(label_width)
        };
    }

    if p.kind == PanelKind::Speedup {
        // Linear, from 0, with "no speedup" at 1.
        let hi = max.max(1.0) * 1.18;
        let mut chart = builder!(area)
            .build_cartesian_2d(0.0..hi, y_range)
            .map_err(err)?;
        chart
            .configure_mesh()
            .disable_y_mesh()
            .y_labels(n as usize)
            .y_label_formatter(&y_fmt)
            .y_label_style(("sans-serif", 15))
            .x_label_style(("sans-serif", 13))
            .light_line_style(RGBColor(0xee, 0xee, 0xee))
            .draw()
            .map_err(err)?;
        chart
            .draw_series(rows.iter().map(|(i, b)| {
                let mut r = Rectangle::new(
                    [
                        (0.0, SegmentValue::Exact(*i)),
                        (b.value, SegmentValue::Exact(*i + 1)),
                    ],
                    bar_color(p.kind, b).filled(),
                );
                r.set_margin(5, 5, 0, 0);
                r
            }))
            .map_err(err)?;
        chart
            .draw_series(rows.iter().map(|(i, b)| {
                Text::new(
                    format!(" {}", value_text(p.kind, b.value)),
                    (b.value, SegmentValue::CenterOf(*i)),
                    value_font.clone(),
                )
            }))
            .map_err(err)?;
        chart
            .draw_series(std::iter::once(PathElement::new(
                vec![(1.0, SegmentValue::Exact(0)), (1.0, SegmentValue::Last)],
                REFERENCE.stroke_width(2),
            )))
            .map_err(err)?;
        return Ok(());
    }

    // Log scale. Ratios grow from 1 in both directions (left: keel is faster);
    // times grow from the left edge.
    let ratio = p.kind == PanelKind::Ratio;
    let (lo, hi) = if ratio {
        let lo = if min >= 1.0 {
            0.5
        } else {
            10f64.powf((min / 1.5).log10().floor())
        };
        // Keep at least a third of the axis right of 1 for the labels.
        let hi = (max.max(1.0) * 3.0).max(lo.powf(-0.6)).max(3.0);
        (lo, 10f64.powf(hi.log10().ceil()))
    } else {
        (
            10f64.powf(min.log10().floor()),
            10f64.powf((max * 3.0).log10().ceil()),
        )
    };
    let origin = if ratio { 1.0 } else { lo };
    let mut chart = builder!(area)
        .build_cartesian_2d((lo..hi).log_scale(), y_range)
        .map_err(err)?;
    chart
        .configure_mesh()
        .disable_y_mesh()
        .y_labels(n as usize)
        .y_label_formatter(&y_fmt)
        .y_label_style(("sans-serif", 15))
        .x_label_style(("sans-serif", 13))
        .x_label_formatter(&|v| tick(*v))
        .light_line_style(RGBColor(0xee, 0xee, 0xee))
        .draw()
        .map_err(err)?;
    chart
        .draw_series(rows.iter().map(|(i, b)| {
            let v = b.value.clamp(lo, hi);
            let mut r = Rectangle::new(
                [
                    (origin.min(v), SegmentValue::Exact(*i)),
                    (origin.max(v), SegmentValue::Exact(*i + 1)),
                ],
                bar_color(p.kind, b).filled(),
            );
            r.set_margin(5, 5, 0, 0);
            r
        }))
        .map_err(err)?;
    chart
        .draw_series(rows.iter().map(|(i, b)| {
            // Labels right of the bar's right end (for a ratio below 1: right of 1).
            let x = if ratio { b.value.max(1.0) } else { b.value };
            Text::new(
                format!(" {}", value_text(p.kind, b.value)),
                (x.clamp(lo, hi), SegmentValue::CenterOf(*i)),
                value_font.clone(),
            )
        }))
        .map_err(err)?;
    if ratio {
        chart
            .draw_series(std::iter::once(PathElement::new(
                vec![(1.0, SegmentValue::Exact(0)), (1.0, SegmentValue::Last)],
                REFERENCE.stroke_width(2),
            )))
            .map_err(err)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn ratios_are_the_headline_and_times_only_without_them() {
        let crud = json!({"metrics": {
            "insert_ratio": 2.0, "update_ratio": 0.5, "insert_s": 0.1,
            "concurrent_speedup": 3.0, "objects": 1000
        }});
        let p = panels(&crud);
        assert_eq!(p.len(), 2);
        assert_eq!(p[0].kind, PanelKind::Ratio);
        assert_eq!(p[0].bars[0].label, "insert");
        assert_eq!(p[1].kind, PanelKind::Speedup);

        let open = json!({"metrics": {
            "caller_blocked_ms": 0.1, "raw_rusqlite_open_ms_wal_16mib": 4.0,
            "fetch_us": 20.0, "tasks": 16
        }});
        let p = panels(&open);
        assert_eq!(p.len(), 1);
        assert_eq!(p[0].kind, PanelKind::Time);
        let raw = p[0]
            .bars
            .iter()
            .find(|b| b.label.starts_with("raw_"))
            .unwrap();
        assert!(raw.baseline);
        let us = p[0].bars.iter().find(|b| b.label == "fetch_us").unwrap();
        assert!((us.value - 0.02).abs() < 1e-12);
        assert!(panels(&json!({"metrics": {"tasks": 3}})).is_empty());
    }

    #[test]
    fn renders_a_png() {
        let dir = std::env::temp_dir().join(format!("keel-chart-{}", std::process::id()));
        let out = dir.join("t.png");
        let report = json!({"metrics": {"a_ratio": 1.5, "b_ratio": 0.4, "x_speedup": 4.0}});
        assert!(render("t", &report, "test machine", &out).unwrap());
        let bytes = std::fs::read(&out).unwrap();
        assert_eq!(&bytes[1..4], b"PNG");
        let _ = std::fs::remove_dir_all(dir);
    }
}
