//! `phyllo-lab serve-raw-echo`: `phyllo serve` with a raw-UDP echo polled in the same busy
//! loop — the latency baseline of the `session` experiment, paying the same polling as the
//! sessions beside it.

use anyhow::{Context, Result};
use phyllo_cli::serve::{serve_with, ServeArgs};
use std::net::UdpSocket;

/// `phyllo-lab serve-raw-echo` options.
#[derive(clap::Args, Debug)]
pub struct RawEchoArgs {
    /// Echo raw UDP datagrams on this address (with `--print-addr`, the address bound is the
    /// first line printed, the session socket's the second).
    #[arg(long)]
    pub raw_echo: String,
    /// The server's own options.
    #[command(flatten)]
    pub serve: ServeArgs,
}

/// Run the server with the raw echo beside it.
pub fn main(args: RawEchoArgs) -> Result<()> {
    let addr = phyllo_cli::app_protocol::parse_addr(&args.raw_echo)?;
    let raw = UdpSocket::bind(addr).with_context(|| format!("cannot listen on {addr}"))?;
    raw.set_nonblocking(true)?;
    if args.serve.print_addr {
        println!("{}", raw.local_addr()?);
    }
    let mut buf = vec![0u8; 65_536];
    let mut echo = || -> Result<()> {
        while let Ok((n, from)) = raw.recv_from(&mut buf) {
            let _ = raw.send_to(&buf[..n], from);
        }
        Ok(())
    };
    serve_with(args.serve, Some(&mut echo))
}
