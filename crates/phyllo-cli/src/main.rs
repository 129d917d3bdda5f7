//! `phyllo`: sessions between machines — `keygen`, `serve`, `connect` — and an impairing
//! `relay` for trying them on a bad path.

use clap::Parser;

/// phyllo: layered network protocols that cost (almost) nothing to layer.
#[derive(Parser)]
#[command(name = "phyllo", version, about)]
struct Cli {
    #[command(subcommand)]
    cmd: phyllo_cli::Command,
}

/// Errors end the program with one line (the cause chain, no backtrace) and exit status 1.
fn main() -> std::process::ExitCode {
    match phyllo_cli::run(Cli::parse().cmd) {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e:#}");
            std::process::ExitCode::FAILURE
        }
    }
}
