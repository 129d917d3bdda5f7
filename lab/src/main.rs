//! `phyllo-lab`: the report, the experiments, the measurement targets — and the product's
//! own commands (`serve`, `connect`, ...), so that experiments run as child processes the
//! very code operators run.

use phyllo_lab::{
    aead, analyze_cmd, cmd, ilp_cmd, ilp_ftp, paths_cmd, raw_echo, report, udp_echo, workload,
};

use clap::{Parser, Subcommand};

/// phyllo's lab: the report, its experiments and the targets they measure.
#[derive(Parser)]
#[command(name = "phyllo-lab", version, about)]
struct Cli {
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Subcommand)]
enum Cmd {
    /// Run every registered experiment and write the report folder.
    Report(report::ReportArgs),
    /// Ping-pong: round-trip latency of a stack over memlink or UDP loopback.
    Rtt(cmd::RttArgs),
    /// One-way stream: messages per second of a stack over memlink or UDP loopback.
    Stream(cmd::StreamArgs),
    /// Run a workload traced by the analyzer (lan, wan, compute).
    Workload(workload::WorkloadArgs),
    /// Trace a workload under valgrind and run the architecture analyzer on it.
    Analyze(analyze_cmd::AnalyzeArgs),
    /// Time the critical path of one send and one delivery over memlink (run under callgrind
    /// by the report to count its instructions).
    CriticalPath(cmd::CriticalPathArgs),
    /// Seal and open messages with one AEAD implementation (run under callgrind by the
    /// report's `aead` experiment to count instructions per operation).
    Aead(aead::AeadArgs),
    /// Send or receive packets through one execution of the integrated data path (run under
    /// callgrind by the report's `ilp` experiment to count memory accesses).
    Ilp(ilp_cmd::IlpArgs),
    /// Seed 001's RPC file transfer: a file's replies marshalled, encrypted and checksummed
    /// by one execution of the integrated data path, between two threads over UDP loopback.
    IlpFtp(ilp_ftp::IlpFtpArgs),
    /// Seed 000's reference stacks in their six versions: time round trips, or run them
    /// between the analyzer's markers for valgrind.
    Paths(paths_cmd::PathsArgs),
    /// `phyllo serve` with a raw-UDP echo polled in the same busy loop (a latency baseline).
    ServeRawEcho(raw_echo::RawEchoArgs),
    /// A plain UDP echo that does nothing else (the latency baseline of two processes doing
    /// only a ping-pong).
    UdpEcho(udp_echo::UdpEchoArgs),
    /// The product's commands, as `phyllo` runs them.
    #[command(flatten)]
    Product(phyllo_cli::Command),
}

/// Errors end the program with one line (the cause chain, no backtrace) and exit status 1.
/// The product's commands log as `phyllo` does (`RUST_LOG` chooses what).
fn main() -> std::process::ExitCode {
    phyllo_cli::log::init(0, false);
    match run(Cli::parse()) {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e:#}");
            std::process::ExitCode::FAILURE
        }
    }
}

fn run(cli: Cli) -> anyhow::Result<()> {
    match cli.cmd {
        Cmd::Report(args) => report::main(&phyllo_lab::experiments::all(), args),
        Cmd::Rtt(args) => cmd::rtt(args),
        Cmd::Stream(args) => cmd::stream(args),
        Cmd::Workload(args) => workload::main(args),
        Cmd::Analyze(args) => analyze_cmd::main(args),
        Cmd::CriticalPath(args) => cmd::critical_path(args),
        Cmd::Aead(args) => aead::main(args),
        Cmd::Ilp(args) => ilp_cmd::ilp(args),
        Cmd::IlpFtp(args) => ilp_ftp::run(args),
        Cmd::Paths(args) => paths_cmd::main(args),
        Cmd::ServeRawEcho(args) => raw_echo::main(args),
        Cmd::UdpEcho(args) => udp_echo::main(args),
        Cmd::Product(cmd) => phyllo_cli::run(cmd),
    }
}
