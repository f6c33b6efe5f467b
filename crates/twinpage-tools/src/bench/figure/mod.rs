//! `twinpage bench figure NAME`: one command per figure of a paper, each
//! printing a table, the paper's claims beside ours, and writing the JSON
//! and a chart. Figures run on the benchmark's machinery (the Mobibench
//! workload, the recovery crash child) with the paper's settings as
//! defaults; every option can shorten a run for a smoke test.

mod ips;
mod ips_conc;
mod lsmvbt;

use super::workload::PrefillOrder;
use super::{BenchError, EnvArgs};
use plotters::coord::Shift;
use plotters::prelude::*;
use serde_json::{json, Value};
use std::path::{Path, PathBuf};

/// Arguments of `twinpage bench figure`.
#[derive(clap::Args, Debug, Clone)]
pub struct FigureArgs {
    /// The figure (`list` prints the known ones).
    pub name: String,
    /// Measured transactions per run, per thread in the concurrency
    /// figures (default: the paper's).
    #[arg(long)]
    pub txns: Option<u64>,
    /// Rows loaded before measuring (default: the paper's).
    #[arg(long)]
    pub prefill: Option<u64>,
    /// Thread counts of the concurrency figures, e.g. `1,2,4,8` (ips-8;
    /// the others use the largest).
    #[arg(long, value_delimiter = ',', value_parser = clap::value_parser!(u32).range(1..=8))]
    pub threads: Option<Vec<u32>>,
    /// Order of the pre-fill in the concurrency figures (default random,
    /// as the paper's Mobibench inserts random keys).
    #[arg(long, value_enum)]
    pub prefill_order: Option<PrefillOrder>,
    /// Rounds per cell; timings are medians over them.
    #[arg(long, default_value_t = 3)]
    pub repeat: u32,
    /// Write every figure as JSON.
    #[arg(long, value_name = "FILE")]
    pub json: Option<PathBuf>,
    /// Draw the chart (.svg or .png).
    #[arg(long, value_name = "FILE")]
    pub chart: Option<PathBuf>,
    /// TrueType font for the chart.
    #[arg(long, value_name = "FILE")]
    pub font: Option<PathBuf>,
    /// Where to run.
    #[command(flatten)]
    pub env: EnvArgs,
}

/// A claim of the paper and what this run measured.
#[derive(Debug, Clone)]
pub struct Claim {
    /// What is compared.
    pub what: String,
    /// The paper's figure.
    pub paper: String,
    /// Ours.
    pub ours: String,
    /// Whether our figure shows the paper's trend (`None`: not comparable).
    pub holds: Option<bool>,
}

/// One horizontal bar: a label and stacked segments.
#[derive(Debug, Clone)]
pub struct Bar {
    /// Row label.
    pub label: String,
    /// Stacked segments (name, value).
    pub segments: Vec<(String, f64)>,
}

/// One panel of the chart.
#[derive(Debug, Clone)]
pub struct Panel {
    /// Title.
    pub title: String,
    /// Unit of the axis.
    pub unit: String,
    /// Bars, top to bottom.
    pub bars: Vec<Bar>,
}

/// A measured figure.
#[derive(Debug, Clone)]
pub struct Figure {
    /// Its command name.
    pub name: &'static str,
    /// What it shows.
    pub title: String,
    /// Column names of the table.
    pub header: Vec<String>,
    /// Table rows.
    pub rows: Vec<Vec<String>>,
    /// Paper versus ours.
    pub claims: Vec<Claim>,
    /// Chart panels.
    pub panels: Vec<Panel>,
    /// Everything measured, for the JSON file.
    pub data: Value,
    /// Environment and settings, printed and saved.
    pub notes: Vec<(String, String)>,
}

type Run = fn(&FigureArgs) -> Result<Figure, BenchError>;

/// Every figure: name, what it shows, how to run it.
const FIGURES: &[(&str, &str, Run)] = &[
    (
        "ips-5",
        "[IPS] Fig. 5: 1-thread latency of insert, update, delete split into compute, write() and fsync()",
        ips::fig5,
    ),
    (
        "ips-7",
        "[IPS] Fig. 7: recovery time after a crash in a transaction of 1-16 inserts",
        ips::fig7,
    ),
    (
        "ips-8",
        "[IPS] Fig. 8: throughput for 1-4 threads at 10/20/50% writes, shared keys",
        ips_conc::fig8,
    ),
    (
        "ips-9",
        "[IPS] Fig. 9: transactions of 2/4/6 statements at 4 threads, 85% SELECT",
        ips_conc::fig9,
    ),
    (
        "ips-10",
        "[IPS] Fig. 10: latency breakdown at 4 threads, 20% writes",
        ips_conc::fig10,
    ),
    (
        "ips-11",
        "[IPS] Fig. 11: Zipf skew 0-1.0 at 4 threads, 15% writes: throughput and replays",
        ips_conc::fig11,
    ),
    (
        "lsmvbt-6",
        "[LSM] Fig. 6: latency and pages written per insert/delete vs WAL checkpoint interval",
        lsmvbt::fig6,
    ),
    (
        "lsmvbt-9",
        "[LSM] Fig. 9: throughput vs share of writes (point reads and insert/delete)",
        lsmvbt::fig9,
    ),
    (
        "lsmvbt-10",
        "[LSM] Fig. 10: recovery time vs size of the outstanding transaction (10-2,560 inserts)",
        lsmvbt::fig10,
    ),
    (
        "lsmvbt-11",
        "[LSM] Fig. 11: insert time and pages written, sibling redistribution on/off, 512 B-8 KiB nodes",
        lsmvbt::fig11,
    ),
    (
        "lsmvbt-12",
        "[LSM] Fig. 12: throughput of TRUNCATE, WAL, MVBT, MVBT + embedding, MVBT + lazy split, LS-MVBT",
        lsmvbt::fig12,
    ),
];

/// Run `twinpage bench figure`.
pub fn run(a: &FigureArgs) -> Result<(), BenchError> {
    if a.name == "list" {
        for (name, what, _) in FIGURES {
            println!("{name:<10} {what}");
        }
        return Ok(());
    }
    let Some((_, _, f)) = FIGURES.iter().find(|(n, _, _)| *n == a.name) else {
        let names: Vec<&str> = FIGURES.iter().map(|f| f.0).collect();
        return Err(BenchError::Msg(format!(
            "unknown figure {:?} (known: {})",
            a.name,
            names.join(", ")
        )));
    };
    let fig = f(a)?;
    print(&fig);
    if let Some(path) = &a.json {
        let doc = json!({
            "tool": "twinpage bench figure",
            "figure": fig.name,
            "title": fig.title,
            "environment": fig.notes.iter().map(|(k, v)| (k.clone(), json!(v))).collect::<serde_json::Map<_, _>>(),
            "table": { "header": fig.header, "rows": fig.rows },
            "claims": fig.claims.iter().map(|c| json!({
                "what": c.what, "paper": c.paper, "ours": c.ours, "trend_holds": c.holds,
            })).collect::<Vec<_>>(),
            "data": fig.data,
        });
        let text =
            serde_json::to_string_pretty(&doc).map_err(|e| BenchError::Msg(e.to_string()))?;
        std::fs::write(path, text + "\n")
            .map_err(|e| BenchError::Io(format!("write {}", path.display()), e))?;
        println!("JSON written to {}", path.display());
    }
    if let Some(path) = &a.chart {
        chart(path, &fig, a.font.as_deref())?;
        println!("chart written to {}", path.display());
    }
    Ok(())
}

fn print(fig: &Figure) {
    println!();
    println!("{}: {}", fig.name, fig.title);
    for (k, v) in &fig.notes {
        println!("  {k:<18} {v}");
    }
    println!();
    let cols = fig.header.len();
    let width: Vec<usize> = (0..cols)
        .map(|c| {
            fig.rows
                .iter()
                .map(|r| r.get(c).map_or(0, |s| s.chars().count()))
                .chain(std::iter::once(fig.header[c].chars().count()))
                .max()
                .unwrap_or(0)
        })
        .collect();
    let line = |cells: &[String]| {
        let parts: Vec<String> = cells
            .iter()
            .enumerate()
            .map(|(i, s)| {
                if i == 0 {
                    format!("{s:<w$}", w = width[i])
                } else {
                    format!("{s:>w$}", w = width[i])
                }
            })
            .collect();
        println!("{}", parts.join("  "));
    };
    line(&fig.header);
    for r in &fig.rows {
        line(r);
    }
    if !fig.claims.is_empty() {
        println!();
        println!("paper's claims beside ours:");
        for c in &fig.claims {
            let verdict = match c.holds {
                Some(true) => "holds",
                Some(false) => "DOES NOT HOLD",
                None => "-",
            };
            println!("  - {}", c.what);
            println!("      paper: {}", c.paper);
            println!("      ours:  {}  [{verdict}]", c.ours);
        }
    }
}

const PALETTE: [RGBColor; 6] = [
    RGBColor(31, 119, 180),
    RGBColor(255, 127, 14),
    RGBColor(44, 160, 44),
    RGBColor(214, 39, 40),
    RGBColor(148, 103, 189),
    RGBColor(140, 86, 75),
];

fn draw<DB: DrawingBackend>(root: DrawingArea<DB, Shift>, fig: &Figure) -> Result<(), String>
where
    DB::ErrorType: 'static,
{
    let e = |x: DrawingAreaErrorKind<DB::ErrorType>| x.to_string();
    root.fill(&WHITE).map_err(e)?;
    let root = root
        .titled(&format!("{}: {}", fig.name, fig.title), ("sans-serif", 18))
        .map_err(e)?;
    let cols = fig.panels.len().clamp(1, 3);
    let rows = fig.panels.len().div_ceil(cols);
    let areas = root.split_evenly((rows, cols));
    for (p, area) in fig.panels.iter().zip(areas.iter()) {
        let n = p.bars.len();
        let total = |b: &Bar| b.segments.iter().map(|s| s.1.max(0.0)).sum::<f64>();
        let max = p.bars.iter().map(total).fold(0.0, f64::max).max(1e-9) * 1.25;
        let names: Vec<String> = p.bars.iter().map(|b| b.label.clone()).collect();
        let mut chart = ChartBuilder::on(area)
            .caption(&p.title, ("sans-serif", 14))
            .margin(8)
            .x_label_area_size(22)
            .y_label_area_size(150)
            .build_cartesian_2d(0.0..max, (0..n).into_segmented())
            .map_err(e)?;
        chart
            .configure_mesh()
            .disable_y_mesh()
            .y_labels(n)
            .y_label_formatter(&|v| match v {
                SegmentValue::CenterOf(i) if *i < n => names[n - 1 - *i].clone(),
                _ => String::new(),
            })
            .x_labels(5)
            .x_label_formatter(&|v| {
                if max >= 10.0 {
                    format!("{v:.0}")
                } else {
                    format!("{v:.2}")
                }
            })
            .x_desc(p.unit.as_str())
            .label_style(("sans-serif", 11))
            .draw()
            .map_err(e)?;
        let mut seg_names: Vec<String> = Vec::new();
        for b in &p.bars {
            for (s, _) in &b.segments {
                if !seg_names.contains(s) {
                    seg_names.push(s.clone());
                }
            }
        }
        for (k, seg) in seg_names.iter().enumerate() {
            let color = PALETTE[k % PALETTE.len()];
            let rects: Vec<Rectangle<(f64, SegmentValue<usize>)>> = p
                .bars
                .iter()
                .enumerate()
                .filter_map(|(i, b)| {
                    let at = b.segments.iter().position(|(s, _)| s == seg)?;
                    let from: f64 = b.segments[..at].iter().map(|s| s.1.max(0.0)).sum();
                    let to = from + b.segments[at].1.max(0.0);
                    let y = n - 1 - i;
                    let mut r = Rectangle::new(
                        [
                            (from, SegmentValue::Exact(y)),
                            (to, SegmentValue::Exact(y + 1)),
                        ],
                        color.filled(),
                    );
                    r.set_margin(2, 2, 0, 0);
                    Some(r)
                })
                .collect();
            let series = chart.draw_series(rects).map_err(e)?;
            if seg_names.len() > 1 {
                series.label(seg.as_str()).legend(move |(x, y)| {
                    Rectangle::new([(x, y - 5), (x + 10, y + 5)], color.filled())
                });
            }
        }
        chart
            .draw_series(p.bars.iter().enumerate().map(|(i, b)| {
                let v = total(b);
                let label = if v >= 100.0 {
                    format!(" {v:.0}")
                } else if v >= 1.0 || v == 0.0 {
                    format!(" {v:.2}")
                } else {
                    format!(" {v:.4}")
                };
                Text::new(
                    label,
                    (v, SegmentValue::CenterOf(n - 1 - i)),
                    ("sans-serif", 10),
                )
            }))
            .map_err(e)?;
        if seg_names.len() > 1 {
            chart
                .configure_series_labels()
                .position(SeriesLabelPosition::LowerRight)
                .background_style(WHITE.mix(0.8))
                .border_style(BLACK)
                .label_font(("sans-serif", 10))
                .draw()
                .map_err(e)?;
        }
    }
    root.present().map_err(e)?;
    Ok(())
}

/// Draw `fig` to `path` (.svg, or .png through the bitmap backend).
fn chart(path: &Path, fig: &Figure, font: Option<&Path>) -> Result<(), BenchError> {
    super::report::load_font(font)?;
    let cols = fig.panels.len().clamp(1, 3) as u32;
    let rows = fig.panels.len().div_ceil(cols as usize) as u32;
    let bars = fig.panels.iter().map(|p| p.bars.len()).max().unwrap_or(3) as u32;
    let size = (500 * cols, 50 + rows * (70 + 24 * bars.max(3)));
    let ext = path
        .extension()
        .and_then(|e| e.to_str())
        .unwrap_or("")
        .to_ascii_lowercase();
    let r = match ext.as_str() {
        "svg" => draw(SVGBackend::new(path, size).into_drawing_area(), fig),
        "png" => draw(BitMapBackend::new(path, size).into_drawing_area(), fig),
        _ => {
            return Err(BenchError::Msg(format!(
                "--chart {}: the file name must end in .svg or .png",
                path.display()
            )))
        }
    };
    r.map_err(|e| BenchError::Msg(format!("chart {}: {e}", path.display())))
}

/// Owned copies of `v` (table headers).
pub(crate) fn strings(v: &[&str]) -> Vec<String> {
    v.iter().map(|s| s.to_string()).collect()
}

/// `x` with `p` decimals.
pub(crate) fn f(x: f64, p: usize) -> String {
    format!("{x:.p$}")
}

/// `a / b` as a percentage difference: "+12.3%".
pub(crate) fn pct(a: f64, b: f64) -> String {
    if b == 0.0 {
        return "-".into();
    }
    format!("{:+.1}%", (a / b - 1.0) * 100.0)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every concurrency figure runs end to end on a tiny workload (CI).
    #[test]
    fn concurrency_figures_run() {
        let tmp = crate::bench::scratch_dir();
        for name in ["ips-8", "ips-9", "ips-10", "ips-11"] {
            let a = FigureArgs {
                name: name.into(),
                txns: Some(30),
                prefill: Some(200),
                repeat: 1,
                threads: Some(vec![1, 2]),
                prefill_order: None,
                json: Some(tmp.path().join(format!("{name}.json"))),
                chart: None,
                font: None,
                env: EnvArgs {
                    dir: Some(tmp.path().to_path_buf()),
                    no_isolate: true,
                    ..EnvArgs::default()
                },
            };
            run(&a).unwrap();
            let v: Value = serde_json::from_str(
                &std::fs::read_to_string(tmp.path().join(format!("{name}.json"))).unwrap(),
            )
            .unwrap();
            assert!(!v["claims"].as_array().unwrap().is_empty(), "{name}");
            for d in v["data"].as_array().unwrap() {
                assert!(d["txn_per_sec"].as_f64().unwrap() > 0.0, "{name}");
                let how = d["verified"].as_str().unwrap();
                assert!(
                    how == "per-key model" || (how == "exact contents" && d["threads"] == 1),
                    "{name}: {how}"
                );
            }
        }
    }
}
