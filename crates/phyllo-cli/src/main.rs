//! `phyllo`: run stacks, experiments and the report.

mod analyze_cmd;
mod experiments;
mod report;
mod workload;

use clap::{Parser, Subcommand};

/// phyllo: layered network protocols that cost (almost) nothing to layer.
#[derive(Parser)]
#[command(name = "phyllo", version, about)]
struct Cli {
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Subcommand)]
enum Cmd {
    /// Run every registered experiment and write the report folder.
    Report(report::ReportArgs),
    /// Run a workload traced by the analyzer (lan, wan, compute).
    Workload(workload::WorkloadArgs),
    /// Trace a workload under valgrind and run the architecture analyzer on it.
    Analyze(analyze_cmd::AnalyzeArgs),
}

fn main() -> anyhow::Result<()> {
    let cli = Cli::parse();
    match cli.cmd {
        Cmd::Report(args) => report::main(args),
        Cmd::Workload(args) => workload::main(args),
        Cmd::Analyze(args) => analyze_cmd::main(args),
    }
}
