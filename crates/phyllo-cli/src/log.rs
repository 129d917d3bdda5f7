//! The command's log: `tracing` events on standard error, as text or one JSON object a line.
//!
//! `RUST_LOG` (an `EnvFilter` directive such as `debug` or `phyllo_cli=trace`) chooses what is
//! written when it is set; otherwise `-v` does: `info` and up by default, `debug` with `-v`,
//! `trace` with `-vv`. What `serve` logs names peers by their key's fingerprint
//! ([`crate::app_protocol::Fingerprint`]) and files by the paths written.

use tracing_subscriber::EnvFilter;

/// Write the log to standard error from now on: `verbose` is the count of `-v`, `json` picks
/// JSON lines over text. A second call changes nothing (the first subscriber stays).
pub fn init(verbose: u8, json: bool) {
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| {
        EnvFilter::new(match verbose {
            0 => "info",
            1 => "debug",
            _ => "trace",
        })
    });
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()));
    let _ = if json {
        builder.json().try_init()
    } else {
        builder.with_target(false).try_init()
    };
}
