//! The report: every registered experiment, run in turn, written as one folder.
//!
//! An [`Experiment`] returns a [`Section`] of tables, plots, prose and named
//! figures; [`run_report`] runs them all with a progress bar and writes `index.md`,
//! `index.html`, one SVG per plot and `results.json` (top-level `figures` map plus the machine
//! the figures were measured on). An experiment that cannot run here returns
//! [`Outcome::Skipped`] with the reason, and the rest go on.

pub(crate) mod goals;
mod machine;
mod render;
mod svg;

use std::collections::HashSet;
use std::io::IsTerminal;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::Context as _;
use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};

pub use machine::Machine;
use render::{Doc, RenderedPlot};

/// How much work an experiment should do.
#[derive(Clone, Debug)]
pub struct Ctx {
    /// `--quick`: fewer repetitions, same figure names; each experiment within ~90 s.
    pub quick: bool,
    /// The report folder (SVGs are written here by the report, not by experiments).
    #[allow(dead_code)] // for experiments that leave extra files (traces) beside the report
    pub out_dir: PathBuf,
}

/// A table, rendered as markdown and HTML.
#[derive(Clone, Debug, Default, serde::Serialize, serde::Deserialize)]
#[serde(default)]
pub struct Table {
    /// Caption shown above the table (may be empty).
    pub title: String,
    /// Column headings.
    pub headers: Vec<String>,
    /// Rows of cells; short rows are padded with empty cells.
    pub rows: Vec<Vec<String>>,
}

/// One line (or scatter) of a plot.
#[derive(Clone, Debug, Default, serde::Serialize, serde::Deserialize)]
#[serde(default)]
pub struct Series {
    /// Legend entry.
    pub name: String,
    /// `(x, y)` points in drawing order; non-finite points are skipped when drawing.
    pub points: Vec<(f64, f64)>,
}

/// A 2-D plot, rendered to SVG with plotters.
#[derive(Clone, Debug, Default, serde::Serialize, serde::Deserialize)]
#[serde(default)]
pub struct Plot {
    /// File stem of the SVG (unique within the report), e.g. `accel_fig5`.
    pub id: String,
    /// Caption above the plot.
    pub title: String,
    /// X axis description.
    pub x_label: String,
    /// Y axis description.
    pub y_label: String,
    /// Logarithmic x axis (non-positive x values are skipped).
    pub log_x: bool,
    /// Logarithmic y axis (non-positive y values are skipped).
    pub log_y: bool,
    /// The lines of the plot.
    pub series: Vec<Series>,
    /// What to look for, shown under the plot (markdown).
    pub caption: String,
}

/// What an experiment produced.
#[derive(Clone, Debug, Default)]
pub struct Section {
    /// Paragraphs of markdown shown above the tables (method, the seed figure compared, caveats).
    pub text: Vec<String>,
    /// Tables, in order.
    pub tables: Vec<Table>,
    /// Plots, each written as `<id>.svg`.
    pub plots: Vec<Plot>,
    /// Stable figure names (e.g. `rtt.ratio_vs_raw_udp`) and their values.
    pub figures: Vec<(String, f64)>,
}

/// The result of running one experiment.
#[derive(Debug)]
pub enum Outcome {
    /// It ran; here is what it found.
    Done(Section),
    /// It cannot run on this machine (no valgrind, no permission, ...): the reason is printed in
    /// the report and the other experiments go on.
    Skipped(String),
}

/// One registered experiment.
pub trait Experiment {
    /// Short stable id, e.g. `rtt`.
    fn name(&self) -> &'static str;
    /// Heading in the report.
    fn title(&self) -> &'static str;
    /// The seed figure or table this reproduces, if any (e.g. "seed 004, Table 4").
    fn seed_ref(&self) -> Option<&'static str> {
        None
    }
    /// Run it. An `Err` is reported as a failure of this experiment; the others still run.
    fn run(&self, ctx: &Ctx) -> anyhow::Result<Outcome>;
}

/// `phyllo report` options.
#[derive(clap::Args, Debug)]
pub struct ReportArgs {
    /// Fewer repetitions, same figure names (CI and a first look).
    #[arg(long)]
    pub quick: bool,
    /// The folder to write.
    #[arg(long, default_value = "report")]
    pub out: PathBuf,
    /// Run only the experiments whose name contains this.
    #[arg(long)]
    pub only: Option<String>,
    /// Run nothing: write the pages again from this `results.json` of an earlier run.
    #[arg(long, conflicts_with_all = ["quick", "only"])]
    pub from: Option<PathBuf>,
}

/// How one experiment ended.
#[derive(Debug)]
pub enum Status {
    /// It ran and produced this section.
    Done(Section),
    /// It cannot run here, for this reason.
    Skipped(String),
    /// It returned an error or panicked; the message.
    Failed(String),
}

impl Status {
    /// `done`, `skipped` or `failed`.
    pub fn label(&self) -> &'static str {
        match self {
            Status::Done(_) => "done",
            Status::Skipped(_) => "skipped",
            Status::Failed(_) => "failed",
        }
    }
}

/// One experiment's run, as the report shows it.
#[derive(Debug)]
pub struct Record {
    /// [`Experiment::name`].
    pub name: String,
    /// [`Experiment::title`].
    pub title: String,
    /// [`Experiment::seed_ref`].
    pub seed_ref: Option<String>,
    /// How it ended.
    pub status: Status,
    /// Wall-clock seconds it took.
    pub seconds: f64,
}

/// Counts of a finished report.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Summary {
    /// Experiments that ran.
    pub done: usize,
    /// Experiments that could not run here.
    pub skipped: usize,
    /// Experiments that returned an error or panicked.
    pub failed: usize,
}

/// Run the report: `experiments` (the registered ones, `experiments::all`), then the folder.
/// Fails only when the folder cannot be written; failed experiments are reported in it.
pub fn main(experiments: &[Box<dyn Experiment>], args: ReportArgs) -> anyhow::Result<()> {
    let started = Instant::now();
    let summary = match &args.from {
        Some(results) => rerender(results, &args.out)?,
        None => run_report(experiments, &args)?,
    };
    println!(
        "report: {} done, {} skipped, {} failed in {:.1} s -> {}",
        summary.done,
        summary.skipped,
        summary.failed,
        started.elapsed().as_secs_f64(),
        args.out.join("index.html").display()
    );
    Ok(())
}

/// Run `experiments` (those whose name contains `args.only`, if given) and write the report
/// folder `args.out`.
pub fn run_report(
    experiments: &[Box<dyn Experiment>],
    args: &ReportArgs,
) -> anyhow::Result<Summary> {
    std::fs::create_dir_all(&args.out)
        .with_context(|| format!("cannot create report folder {}", args.out.display()))?;
    let ctx = Ctx {
        quick: args.quick,
        out_dir: args.out.clone(),
    };
    let selected: Vec<&dyn Experiment> = experiments
        .iter()
        .map(|e| e.as_ref())
        .filter(|e| args.only.as_deref().is_none_or(|o| e.name().contains(o)))
        .collect();
    if selected.is_empty() {
        eprintln!("report: no experiment selected");
    }
    let mut records = run_all(&selected, &ctx);
    if let Some(check) = baseline_check(&records) {
        records.push(check);
    }
    let machine = Machine::detect();
    write_report(
        &args.out,
        &records,
        &machine,
        args.quick,
        machine::utc_now(),
    )
}

/// A progress display: a bar on a terminal, one plain line per event otherwise (CI logs).
struct Progress {
    bar: Option<ProgressBar>,
    total: usize,
}

impl Progress {
    fn new(total: usize) -> Progress {
        let bar = std::io::stderr().is_terminal().then(|| {
            let bar =
                ProgressBar::with_draw_target(Some(total as u64), ProgressDrawTarget::stderr());
            if let Ok(style) = ProgressStyle::with_template(
                "{spinner} [{elapsed_precise}] {bar:30} {pos}/{len} {msg}",
            ) {
                bar.set_style(style);
            }
            bar.enable_steady_tick(Duration::from_millis(200));
            bar
        });
        Progress { bar, total }
    }

    fn start(&self, i: usize, name: &str) {
        match &self.bar {
            Some(bar) => bar.set_message(name.to_string()),
            None => eprintln!("report: [{}/{}] {name} ...", i + 1, self.total),
        }
    }

    fn finish_one(&self, i: usize, r: &Record) {
        let detail = match &r.status {
            Status::Done(_) => String::new(),
            Status::Skipped(why) => format!(": {why}"),
            Status::Failed(err) => format!(": {}", err.lines().next().unwrap_or("")),
        };
        let line = format!(
            "report: [{}/{}] {} {} in {:.1} s{detail}",
            i + 1,
            self.total,
            r.name,
            r.status.label(),
            r.seconds
        );
        match &self.bar {
            Some(bar) => {
                bar.println(line);
                bar.inc(1);
            }
            None => eprintln!("{line}"),
        }
    }

    fn finish(&self) {
        if let Some(bar) = &self.bar {
            bar.finish_and_clear();
        }
    }
}

/// The message of a panic payload.
fn panic_message(payload: &(dyn std::any::Any + Send)) -> String {
    payload
        .downcast_ref::<&str>()
        .map(|s| s.to_string())
        .or_else(|| payload.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "(non-string panic payload)".into())
}

/// Run one experiment, turning an `Err` or a panic into [`Status::Failed`].
fn run_one(e: &dyn Experiment, ctx: &Ctx) -> Record {
    let t = Instant::now();
    let status = match catch_unwind(AssertUnwindSafe(|| e.run(ctx))) {
        Ok(Ok(Outcome::Done(s))) => Status::Done(s),
        Ok(Ok(Outcome::Skipped(why))) => Status::Skipped(why),
        Ok(Err(err)) => Status::Failed(format!("{err:#}")),
        Err(payload) => Status::Failed(format!("panicked: {}", panic_message(payload.as_ref()))),
    };
    Record {
        name: e.name().to_string(),
        title: e.title().to_string(),
        seed_ref: e.seed_ref().map(str::to_string),
        status,
        seconds: t.elapsed().as_secs_f64(),
    }
}

fn run_all(experiments: &[&dyn Experiment], ctx: &Ctx) -> Vec<Record> {
    let progress = Progress::new(experiments.len());
    let records = experiments
        .iter()
        .enumerate()
        .map(|(i, e)| {
            progress.start(i, e.name());
            let r = run_one(*e, ctx);
            progress.finish_one(i, &r);
            r
        })
        .collect();
    progress.finish();
    records
}

/// Figures that measure the same baseline — the median round trip of 8-byte raw UDP
/// datagrams over loopback, busy-polled — in different experiments.
const RAW_UDP_RTT: [&str; 3] = [
    "rawudp.rtt_median_ns",
    "rtt.raw_median_ns",
    "accel.raw_udp_rtt_ns",
];

/// How far apart two measurements of one baseline may be before the report flags them.
const BASELINE_TOLERANCE: f64 = 1.10;

/// The baselines measured by more than one experiment, side by side: a ratio against a
/// baseline is only as good as the baseline, and on a shared machine two measurements of it
/// minutes apart can differ. `None` when fewer than two were measured.
fn baseline_check(records: &[Record]) -> Option<Record> {
    let found: Vec<(&str, f64)> = RAW_UDP_RTT
        .iter()
        .filter_map(|name| {
            records.iter().find_map(|r| match &r.status {
                Status::Done(s) => s
                    .figures
                    .iter()
                    .find(|(n, v)| n == name && v.is_finite() && *v > 0.0)
                    .map(|(_, v)| (*name, *v)),
                _ => None,
            })
        })
        .collect();
    if found.len() < 2 {
        return None;
    }
    let lo = found.iter().map(|f| f.1).fold(f64::INFINITY, f64::min);
    let hi = found.iter().map(|f| f.1).fold(0.0, f64::max);
    let spread = hi / lo;
    let verdict = if spread > BASELINE_TOLERANCE {
        format!(
            "**Flagged:** the raw-UDP baselines differ by {:.0} % (more than {:.0} %): the \
             machine's speed changed between the experiments, and ratios against these \
             baselines carry that error.",
            (spread - 1.0) * 100.0,
            (BASELINE_TOLERANCE - 1.0) * 100.0
        )
    } else {
        format!(
            "The raw-UDP baselines agree within {:.1} %.",
            (spread - 1.0) * 100.0
        )
    };
    Some(Record {
        name: "baselines".into(),
        title: "Baselines measured by several experiments".into(),
        seed_ref: None,
        status: Status::Done(Section {
            text: vec![verdict],
            tables: vec![Table {
                title: "Median round trip of 8-byte raw UDP datagrams, busy-poll".into(),
                headers: vec!["figure".into(), "ns".into()],
                rows: found
                    .iter()
                    .map(|(n, v)| vec![format!("`{n}`"), format!("{v:.0}")])
                    .collect(),
            }],
            plots: vec![],
            figures: vec![
                ("baselines.raw_udp_rtt_spread".into(), spread),
                (
                    "baselines.raw_udp_rtt_flagged".into(),
                    f64::from(u8::from(spread > BASELINE_TOLERANCE)),
                ),
            ],
        }),
        seconds: 0.0,
    })
}

/// A file stem made of `[A-Za-z0-9_-]`, unique among `taken`.
fn file_stem(id: &str, taken: &mut HashSet<String>) -> String {
    let mut base: String = id
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '-' || c == '_' {
                c
            } else {
                '_'
            }
        })
        .collect();
    if base.is_empty() {
        base = "plot".into();
    }
    let mut stem = base.clone();
    let mut n = 2;
    while !taken.insert(stem.clone()) {
        stem = format!("{base}-{n}");
        n += 1;
    }
    stem
}

fn write_file(path: &Path, contents: &[u8]) -> anyhow::Result<()> {
    std::fs::write(path, contents).with_context(|| format!("cannot write {}", path.display()))
}

/// Write the report folder `out` again from a `results.json` a run wrote (the same pages,
/// plots redrawn from their points): for reading an old run with today's rendering, and for
/// testing the rendering on fixed data.
pub fn rerender(results: &Path, out: &Path) -> anyhow::Result<Summary> {
    let text = std::fs::read_to_string(results)
        .with_context(|| format!("cannot read {}", results.display()))?;
    let v: serde_json::Value =
        serde_json::from_str(&text).with_context(|| format!("{}: not JSON", results.display()))?;
    let machine: Machine =
        serde_json::from_value(v["machine"].clone()).context("results.json: `machine`")?;
    let records = v["experiments"]
        .as_array()
        .context("results.json: no `experiments` list")?
        .iter()
        .map(record_from_json)
        .collect::<anyhow::Result<Vec<_>>>()?;
    let quick = v["quick"].as_bool().unwrap_or(false);
    let generated_at = v["generated_at"].as_str().unwrap_or("").to_string();
    write_report(out, &records, &machine, quick, generated_at)
}

/// One experiment of `results.json` back as a [`Record`].
fn record_from_json(e: &serde_json::Value) -> anyhow::Result<Record> {
    let text = |k: &str| e[k].as_str().map(String::from);
    let name = text("name").context("an experiment without a `name`")?;
    let status = match e["status"].as_str() {
        Some("skipped") => Status::Skipped(text("reason").unwrap_or_default()),
        Some("failed") => Status::Failed(text("error").unwrap_or_default()),
        _ => {
            let figures = e["figures"]
                .as_object()
                .map(|m| {
                    m.iter()
                        .map(|(k, v)| (k.clone(), v.as_f64().unwrap_or(f64::NAN)))
                        .collect()
                })
                .unwrap_or_default();
            let plots = e["plots"]
                .as_array()
                .map(|ps| {
                    ps.iter()
                        .map(|p| Plot {
                            series: p["series"]
                                .as_array()
                                .map(|ss| ss.iter().map(series_from_json).collect())
                                .unwrap_or_default(),
                            ..serde_json::from_value(p.clone()).unwrap_or_default()
                        })
                        .collect()
                })
                .unwrap_or_default();
            Status::Done(Section {
                text: field(e, "text"),
                tables: field(e, "tables"),
                plots,
                figures,
            })
        }
    };
    Ok(Record {
        title: text("title").unwrap_or_else(|| name.clone()),
        seed_ref: text("seed_ref"),
        seconds: e["seconds"].as_f64().unwrap_or(0.0),
        name,
        status,
    })
}

/// Field `k` of `e`, or its default where missing or malformed.
fn field<T: serde::de::DeserializeOwned + Default>(e: &serde_json::Value, k: &str) -> T {
    serde_json::from_value(e[k].clone()).unwrap_or_default()
}

/// A plot's series from `results.json`, where a point that was not a number is `null`.
fn series_from_json(s: &serde_json::Value) -> Series {
    let coord = |v: &serde_json::Value| v.as_f64().unwrap_or(f64::NAN);
    Series {
        name: s["name"].as_str().unwrap_or("").to_string(),
        points: s["points"]
            .as_array()
            .map(|ps| ps.iter().map(|p| (coord(&p[0]), coord(&p[1]))).collect())
            .unwrap_or_default(),
    }
}

/// Write the report folder from finished records.
pub fn write_report(
    out: &Path,
    records: &[Record],
    machine: &Machine,
    quick: bool,
    generated_at: String,
) -> anyhow::Result<Summary> {
    std::fs::create_dir_all(out)
        .with_context(|| format!("cannot create report folder {}", out.display()))?;
    let mut taken = HashSet::new();
    let mut plots = Vec::with_capacity(records.len());
    for r in records {
        let mut rendered = Vec::new();
        if let Status::Done(s) = &r.status {
            for p in &s.plots {
                let file = format!("{}.svg", file_stem(&p.id, &mut taken));
                let svg = svg::render(p);
                if let Ok(svg) = &svg {
                    write_file(&out.join(&file), svg.as_bytes())?;
                }
                rendered.push(RenderedPlot {
                    title: p.title.clone(),
                    file,
                    caption: p.caption.clone(),
                    svg,
                });
            }
        }
        plots.push(rendered);
    }
    let doc = Doc {
        machine,
        quick,
        generated_at,
        records,
        plots: &plots,
    };
    write_file(&out.join("index.md"), render::markdown(&doc).as_bytes())?;
    write_file(&out.join("index.html"), render::html(&doc).as_bytes())?;
    let json = serde_json::to_string_pretty(&render::results_json(&doc))
        .context("cannot serialize results.json")?;
    write_file(&out.join("results.json"), json.as_bytes())?;
    let (done, skipped, failed) = doc.counts();
    Ok(Summary {
        done,
        skipped,
        failed,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A fake experiment for the writer's tests.
    struct Fake {
        name: &'static str,
        outcome: fn() -> anyhow::Result<Outcome>,
    }

    impl Experiment for Fake {
        fn name(&self) -> &'static str {
            self.name
        }
        fn title(&self) -> &'static str {
            "A fake experiment"
        }
        fn seed_ref(&self) -> Option<&'static str> {
            Some("seed 999, Table 1")
        }
        fn run(&self, _ctx: &Ctx) -> anyhow::Result<Outcome> {
            (self.outcome)()
        }
    }

    fn done() -> anyhow::Result<Outcome> {
        Ok(Outcome::Done(Section {
            text: vec!["Ping-pong over `loopback`.".into()],
            tables: vec![Table {
                title: "RTT".into(),
                headers: vec!["stack".into(), "ns".into()],
                rows: vec![vec!["raw".into(), "9000".into()]],
            }],
            plots: vec![Plot {
                id: "fake_rtt".into(),
                title: "RTT vs size".into(),
                x_label: "bytes".into(),
                y_label: "ns".into(),
                log_x: true,
                log_y: false,
                series: vec![Series {
                    name: "raw-udp-series".into(),
                    points: vec![(8.0, 9000.0), (1024.0, 11000.0)],
                }],
                caption: "Lower is *better*.".into(),
            }],
            figures: vec![("fake.ratio".into(), 1.25), ("fake.nan".into(), f64::NAN)],
        }))
    }

    fn skipped() -> anyhow::Result<Outcome> {
        Ok(Outcome::Skipped("no valgrind here".into()))
    }

    fn failing() -> anyhow::Result<Outcome> {
        anyhow::bail!("socket exploded")
    }

    fn panicking() -> anyhow::Result<Outcome> {
        panic!("experiment bug")
    }

    fn temp_dir(tag: &str) -> PathBuf {
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos());
        std::env::temp_dir().join(format!(
            "phyllo-report-{tag}-{}-{nanos}",
            std::process::id()
        ))
    }

    fn args(out: &Path) -> ReportArgs {
        ReportArgs {
            quick: true,
            out: out.to_path_buf(),
            only: None,
            from: None,
        }
    }

    #[test]
    fn writes_report_for_done_and_skipped() {
        let dir = temp_dir("ok");
        let exps: Vec<Box<dyn Experiment>> = vec![
            Box::new(Fake {
                name: "fake_done",
                outcome: done,
            }),
            Box::new(Fake {
                name: "fake_skip",
                outcome: skipped,
            }),
        ];
        let summary = run_report(&exps, &args(&dir)).unwrap();
        assert_eq!(
            summary,
            Summary {
                done: 1,
                skipped: 1,
                failed: 0
            }
        );

        for f in ["index.md", "index.html", "results.json", "fake_rtt.svg"] {
            assert!(dir.join(f).is_file(), "{f} missing");
        }
        let json: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(dir.join("results.json")).unwrap())
                .unwrap();
        assert_eq!(json["figures"]["fake.ratio"], 1.25);
        assert!(
            json["figures"]["fake.nan"].is_null(),
            "NaN serialized as null"
        );
        assert_eq!(json["quick"], true);
        assert!(json["machine"]["logical_cores"].as_u64().unwrap() >= 1);
        assert!(json["generated_at"].as_str().unwrap().ends_with('Z'));
        let exps = json["experiments"].as_array().unwrap();
        assert_eq!(exps.len(), 2);
        assert_eq!(exps[0]["status"], "done");
        assert_eq!(exps[0]["tables"][0]["rows"][0][1], "9000");
        assert_eq!(exps[1]["status"], "skipped");
        assert_eq!(exps[1]["reason"], "no valgrind here");

        let svg = std::fs::read_to_string(dir.join("fake_rtt.svg")).unwrap();
        assert!(svg.contains("<svg"));
        assert!(svg.contains("raw-udp-series"));

        let md = std::fs::read_to_string(dir.join("index.md")).unwrap();
        assert!(md.contains("| stack | ns |"));
        assert!(md.contains("![RTT vs size](fake_rtt.svg)"));
        assert!(md.contains("*Lower is *better*.*"));
        assert!(md.contains("seed 999, Table 1"));
        assert!(md.contains("**Skipped:** no valgrind here"));
        let html = std::fs::read_to_string(dir.join("index.html")).unwrap();
        assert!(html.contains("<svg") && html.contains("<td class=\"num\">9000</td>"));
        assert!(html.contains("no valgrind here"));
        assert!(
            html.contains("Lower is <em>better</em>."),
            "the caption under the plot"
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn failures_and_panics_are_reported_and_the_rest_go_on() {
        let dir = temp_dir("fail");
        let exps: Vec<Box<dyn Experiment>> = vec![
            Box::new(Fake {
                name: "fake_err",
                outcome: failing,
            }),
            Box::new(Fake {
                name: "fake_panic",
                outcome: panicking,
            }),
            Box::new(Fake {
                name: "fake_done",
                outcome: done,
            }),
        ];
        let summary = run_report(&exps, &args(&dir)).unwrap();
        assert_eq!(
            summary,
            Summary {
                done: 1,
                skipped: 0,
                failed: 2
            }
        );
        let md = std::fs::read_to_string(dir.join("index.md")).unwrap();
        assert!(md.contains("socket exploded"));
        assert!(md.contains("panicked: experiment bug"));
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn only_filters_by_name() {
        let dir = temp_dir("only");
        let exps: Vec<Box<dyn Experiment>> = vec![
            Box::new(Fake {
                name: "fake_done",
                outcome: done,
            }),
            Box::new(Fake {
                name: "fake_skip",
                outcome: skipped,
            }),
        ];
        let mut a = args(&dir);
        a.only = Some("skip".into());
        let summary = run_report(&exps, &a).unwrap();
        assert_eq!(
            summary,
            Summary {
                done: 0,
                skipped: 1,
                failed: 0
            }
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn unwritable_folder_is_an_error() {
        let file = temp_dir("notadir");
        std::fs::write(&file, b"x").unwrap();
        let exps: Vec<Box<dyn Experiment>> = vec![];
        assert!(run_report(&exps, &args(&file.join("sub"))).is_err());
        std::fs::remove_file(&file).unwrap();
    }

    #[test]
    fn plot_file_stems_are_safe_and_unique() {
        let mut taken = HashSet::new();
        assert_eq!(file_stem("a/b c", &mut taken), "a_b_c");
        assert_eq!(file_stem("a/b c", &mut taken), "a_b_c-2");
        assert_eq!(file_stem("", &mut taken), "plot");
    }

    fn with_figure(name: &str, figure: &str, v: f64) -> Record {
        Record {
            name: name.into(),
            title: name.into(),
            seed_ref: None,
            status: Status::Done(Section {
                figures: vec![(figure.into(), v)],
                ..Section::default()
            }),
            seconds: 0.0,
        }
    }

    #[test]
    fn baselines_that_disagree_are_flagged() {
        let flagged = |a: f64, b: f64| {
            let r = baseline_check(&[
                with_figure("rawudp", "rawudp.rtt_median_ns", a),
                with_figure("accel", "accel.raw_udp_rtt_ns", b),
            ])
            .unwrap();
            match r.status {
                Status::Done(s) => s.figures[1].1,
                _ => panic!("not done"),
            }
        };
        assert_eq!(flagged(4000.0, 4200.0), 0.0);
        assert_eq!(flagged(4000.0, 5920.0), 1.0);
        assert!(baseline_check(&[with_figure("rawudp", "rawudp.rtt_median_ns", 1.0)]).is_none());
    }
}
