//! `phyllo-lab udp-echo`: a plain UDP echo that does nothing else — one std socket, every
//! datagram sent back to its sender, no sessions, no other sockets, no timers. The `session`
//! experiment's plain baseline (`serve.rtt_ratio_vs_plain_udp`): a ping-pong between two
//! processes that do nothing but the ping-pong.
//!
//! It runs until it is killed; SIGTERM and SIGINT end it by their default action (it holds
//! nothing to flush). A busy-polling echo whose parent has gone would spin on a core for
//! good, so while idle it checks every so often whether its parent changed, and exits if so.

use anyhow::{Context, Result};
use std::io::ErrorKind;
use std::net::UdpSocket;

/// `phyllo-lab udp-echo` options.
#[derive(clap::Args, Debug)]
pub struct UdpEchoArgs {
    /// The address to echo on.
    #[arg(long, default_value = "127.0.0.1:0")]
    pub listen: String,
    /// Busy-poll the socket (nonblocking, spinning between datagrams: one core busy) instead
    /// of blocking in `recv`.
    #[arg(long)]
    pub busy_poll: bool,
    /// Print the address actually bound (for `--listen 127.0.0.1:0`) on the first line.
    #[arg(long)]
    pub print_addr: bool,
}

/// Idle spins between two checks of the parent process: a few milliseconds of spinning, so
/// the check (one system call) costs nothing measurable and an orphan stops promptly.
const SPINS_PER_PARENT_CHECK: u32 = 1 << 16;

/// Echo datagrams until killed.
pub fn main(args: UdpEchoArgs) -> Result<()> {
    let addr = phyllo_cli::app_protocol::parse_addr(&args.listen)?;
    let sock = UdpSocket::bind(addr).with_context(|| format!("cannot listen on {addr}"))?;
    sock.set_nonblocking(args.busy_poll)?;
    if args.print_addr {
        println!("{}", sock.local_addr()?);
    }
    let parent = std::os::unix::process::parent_id();
    let mut buf = vec![0u8; 65_536];
    let mut idle: u32 = 0;
    loop {
        match sock.recv_from(&mut buf) {
            Ok((n, from)) => {
                idle = 0;
                // A reply that cannot be sent (the sender gone, a full buffer) is a lost
                // datagram, as on any network; the echo goes on.
                let _ = sock.send_to(&buf[..n], from);
            }
            Err(e) if e.kind() == ErrorKind::WouldBlock => {
                idle = idle.wrapping_add(1);
                if idle.is_multiple_of(SPINS_PER_PARENT_CHECK)
                    && std::os::unix::process::parent_id() != parent
                {
                    return Ok(());
                }
                std::hint::spin_loop();
            }
            // An interrupted call, or an ICMP error a departed sender left behind: not the
            // echo's failure.
            Err(e)
                if matches!(
                    e.kind(),
                    ErrorKind::Interrupted
                        | ErrorKind::ConnectionRefused
                        | ErrorKind::ConnectionReset
                ) => {}
            Err(e) => return Err(e).context("receiving a datagram to echo"),
        }
    }
}
