//! `phyllo`: sessions between machines — `keygen`, `serve`, `connect` — and an impairing
//! `relay` for trying them on a bad path; shell completions and a man page generated from the
//! same definition.

use clap::{CommandFactory, Parser, Subcommand};

/// phyllo: layered network protocols that cost (almost) nothing to layer.
#[derive(Parser)]
#[command(name = "phyllo", version, about)]
struct Cli {
    #[command(subcommand)]
    cmd: Top,
    /// Log more: `-v` for debug events, `-vv` for trace (`RUST_LOG`, when set, decides
    /// instead).
    #[arg(short, long, action = clap::ArgAction::Count, global = true)]
    verbose: u8,
    /// Write the log (standard error) as one JSON object a line.
    #[arg(long, global = true)]
    log_json: bool,
}

#[derive(Subcommand)]
enum Top {
    // Boxed: the subcommands' options are large beside `completions` and `man`.
    #[command(flatten)]
    Run(Box<phyllo_cli::Command>),
    /// Print shell completions for `phyllo` (e.g. `phyllo completions bash >
    /// /etc/bash_completion.d/phyllo`).
    Completions {
        /// The shell.
        shell: clap_complete::Shell,
    },
    /// Print the man page of `phyllo` in roff (e.g. `phyllo man > phyllo.1; man ./phyllo.1`).
    Man,
}

/// Errors end the program with one line (the cause chain, no backtrace) and exit status 1, or
/// the status a `phyllo connect` failure names (`phyllo connect --help`).
fn main() -> std::process::ExitCode {
    let cli = Cli::parse();
    phyllo_cli::log::init(cli.verbose, cli.log_json);
    let result = match cli.cmd {
        Top::Run(cmd) => phyllo_cli::run(*cmd),
        Top::Completions { shell } => {
            clap_complete::generate(shell, &mut Cli::command(), "phyllo", &mut std::io::stdout());
            Ok(())
        }
        Top::Man => clap_mangen::Man::new(Cli::command())
            .render(&mut std::io::stdout())
            .map_err(anyhow::Error::from),
    };
    match result {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e:#}");
            match e.downcast_ref::<phyllo_cli::connect::Failure>() {
                Some(f) => std::process::ExitCode::from(f.exit_code()),
                None => std::process::ExitCode::FAILURE,
            }
        }
    }
}
