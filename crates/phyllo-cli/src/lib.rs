//! The `phyllo` command: `keygen`, `serve`, `connect` and `relay`, a thin front end on the
//! runtime crate (`phyllo-net`), which holds the sockets and the sessions.
//!
//! [`Command`] is the command line's subcommands and [`run`] runs one; the lab's binary
//! embeds the same [`Command`] so that its experiments run the very `serve` and `connect`
//! that operators run.

pub mod app_protocol;
pub mod connect;
pub mod incoming;
pub mod keys;
pub mod log;
pub mod outgoing;
pub mod relay;
pub mod serve;
pub mod transfer;

use clap::Subcommand;

/// The product's subcommands.
#[derive(Subcommand)]
pub enum Command {
    /// Generate a static key pair for sessions (FILE private, FILE.pub public).
    Keygen(keys::KeygenArgs),
    /// Hold sessions on one UDP socket: echo pings, receive transfers (into files with --out).
    Serve(serve::ServeArgs),
    /// A session to `phyllo serve`: send a file or stdin, ping, or measure throughput.
    #[command(after_help = connect::TRANSFERS)]
    Connect(connect::ConnectArgs),
    /// A UDP relay that impairs what it forwards (loss, delay, jitter, reordering,
    /// duplication, corruption).
    Relay(relay::RelayArgs),
}

/// Run one subcommand.
pub fn run(cmd: Command) -> anyhow::Result<()> {
    match cmd {
        Command::Keygen(args) => keys::keygen(args),
        Command::Serve(args) => serve::serve(args),
        Command::Connect(args) => connect::connect(args),
        Command::Relay(args) => relay::relay(args),
    }
}
