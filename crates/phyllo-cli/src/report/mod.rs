//! The report: every registered experiment, run in turn, written as one folder.
//!
//! DESIGN.md §7. An [`Experiment`] returns a [`Section`] of tables, plots, prose and named
//! figures; [`run_report`] runs them all with a progress bar and writes `index.md`,
//! `index.html`, one SVG per plot and `results.json` (top-level `figures` map plus the machine
//! the figures were measured on). An experiment that cannot run here returns
//! [`Outcome::Skipped`] with the reason, and the rest go on.

use std::path::PathBuf;

/// How much work an experiment should do.
#[derive(Clone, Debug)]
pub struct Ctx {
    /// `--quick`: fewer repetitions, same figure names; each experiment within ~90 s.
    pub quick: bool,
    /// The report folder (SVGs are written here by the report, not by experiments).
    pub out_dir: PathBuf,
}

/// A table, rendered as markdown and HTML.
#[derive(Clone, Debug, Default, serde::Serialize)]
pub struct Table {
    pub title: String,
    pub headers: Vec<String>,
    pub rows: Vec<Vec<String>>,
}

/// One line (or scatter) of a plot.
#[derive(Clone, Debug, Default, serde::Serialize)]
pub struct Series {
    pub name: String,
    pub points: Vec<(f64, f64)>,
}

/// A 2-D plot, rendered to SVG with plotters.
#[derive(Clone, Debug, Default, serde::Serialize)]
pub struct Plot {
    /// File stem of the SVG (unique within the report), e.g. `accel_fig5`.
    pub id: String,
    pub title: String,
    pub x_label: String,
    pub y_label: String,
    pub log_x: bool,
    pub log_y: bool,
    pub series: Vec<Series>,
}

/// What an experiment produced.
#[derive(Clone, Debug, Default)]
pub struct Section {
    /// Paragraphs of markdown shown above the tables (method, the seed figure compared, caveats).
    pub text: Vec<String>,
    pub tables: Vec<Table>,
    pub plots: Vec<Plot>,
    /// Stable figure names (e.g. `rtt.ratio_vs_raw_udp`) and their values.
    pub figures: Vec<(String, f64)>,
}

/// The result of running one experiment.
#[derive(Debug)]
pub enum Outcome {
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
}

/// Run the report.
pub fn main(args: ReportArgs) -> anyhow::Result<()> {
    let _ = crate::experiments::all();
    let _ = args;
    anyhow::bail!("report writer not yet implemented")
}
