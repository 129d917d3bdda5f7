//! `phyllo`: run stacks, experiments and the report.

mod experiments;
mod report;

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
}

fn main() -> anyhow::Result<()> {
    let cli = Cli::parse();
    match cli.cmd {
        Cmd::Report(args) => report::main(args),
    }
}
