//! `phyllo connect`: one session to a `phyllo serve` — send stdin or a file (the server's
//! SHA-256 of what it received is checked), ping (latency percentiles) or push data as fast as
//! the session takes it (throughput); statistics at the end.

use crate::app_protocol::{self, DATA, END, HASH, PING};
use anyhow::{bail, Context, Result};
use phyllo::session::endpoint::{Event, PeerId, SessionSendError};
use phyllo_net::SessionSocket;
use sha2::{Digest, Sha256};
use std::collections::VecDeque;
use std::io::Read;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::{Duration, Instant};

/// `phyllo connect` options.
#[derive(clap::Args, Debug)]
pub struct ConnectArgs {
    /// The server's address.
    pub addr: String,
    /// This client's private key file (from `phyllo keygen`).
    #[arg(long)]
    pub key: PathBuf,
    /// The server's public key (a `.pub` file or 64 hexadecimal digits).
    #[arg(long)]
    pub server_key: String,
    /// The stack of the session (the server's).
    #[arg(long, default_value = phyllo_net::DEFAULT_STACK)]
    pub stack: String,
    /// Put the Protocol Accelerator in front of the stack.
    #[arg(long)]
    pub accel: bool,
    /// Send this file (default: standard input).
    #[arg(long)]
    pub file: Option<PathBuf>,
    /// Ping this many times instead (latency percentiles).
    #[arg(long)]
    pub ping: Option<u64>,
    /// Push data for this many seconds instead (throughput).
    #[arg(long)]
    pub throughput: Option<f64>,
    /// Bytes per message (pings and data).
    #[arg(long, default_value_t = 16_384)]
    pub size: usize,
    /// Busy-poll the socket (lowest latency, one core busy).
    #[arg(long)]
    pub busy_poll: bool,
    /// Give up when no session is up after this many seconds.
    #[arg(long, default_value_t = 5.0)]
    pub timeout: f64,
    /// Print one machine-readable line of results on stdout (key=value ...).
    #[arg(long)]
    pub quiet: bool,
}

struct Client {
    node: SessionSocket,
    peer: PeerId,
    server: SocketAddr,
    /// Messages handed back by an ended session, to send again first.
    resend: VecDeque<Vec<u8>>,
    replies: VecDeque<Vec<u8>>,
}

impl Client {
    /// One round, then collect events and replies.
    fn pump(&mut self, wait: Duration) -> Result<()> {
        self.node.pump(wait)?;
        while let Some(e) = self.node.endpoint_mut().poll_event() {
            match e {
                Event::Established { .. } => {}
                Event::Ended {
                    reason,
                    unconfirmed,
                    ..
                } => {
                    eprintln!(
                        "session ended ({reason:?}); sending {} unconfirmed messages again",
                        unconfirmed.len()
                    );
                    self.resend.extend(unconfirmed);
                    let now = self.node.now();
                    let key = self
                        .node
                        .endpoint()
                        .peer_key(self.peer)
                        .context("the server vanished")?;
                    self.node.endpoint_mut().connect(now, key, self.server);
                }
            }
        }
        self.node.take_readable();
        while let Some(m) = self
            .node
            .endpoint_mut()
            .poll_delivery_with(self.peer, |m| m.to_vec())
        {
            self.replies.push_back(m);
        }
        Ok(())
    }

    /// Hand `m` to the session: `false` if it is full for now.
    fn offer(&mut self, m: &[u8]) -> Result<bool> {
        let now = self.node.now();
        match self.node.endpoint_mut().send(now, self.peer, m) {
            Ok(()) => Ok(true),
            Err(SessionSendError::WouldBlock) => Ok(false),
            Err(e) => bail!("sending: {e}"),
        }
    }

    /// Send again, in order, what ended sessions handed back, as far as the session takes
    /// it; whether all went.
    fn resend(&mut self) -> Result<bool> {
        while let Some(r) = self.resend.pop_front() {
            if !self.offer(&r)? {
                self.resend.push_front(r);
                return Ok(false);
            }
        }
        Ok(true)
    }

    /// Send `m` (after anything to resend), pumping while the session is full.
    fn send(&mut self, m: &[u8], busy: bool) -> Result<()> {
        loop {
            if self.resend()? && self.offer(m)? {
                return Ok(());
            }
            self.pump(if busy {
                Duration::ZERO
            } else {
                Duration::from_millis(1)
            })?;
        }
    }

    /// Pump until a reply of type `ty` arrives or `limit` passes.
    fn reply(&mut self, ty: u8, limit: Duration, busy: bool) -> Result<Option<Vec<u8>>> {
        let until = Instant::now() + limit;
        loop {
            if let Some(i) = self.replies.iter().position(|r| r.first() == Some(&ty)) {
                return Ok(self.replies.remove(i));
            }
            if Instant::now() >= until {
                return Ok(None);
            }
            self.resend()?;
            self.pump(if busy {
                Duration::from_millis(1)
            } else {
                Duration::from_millis(5)
            })?;
        }
    }
}

/// Run the client.
pub fn connect(args: ConnectArgs) -> Result<()> {
    let key = phyllo_net::keys::read_private(&args.key)?;
    let server_key = phyllo_net::keys::read_public(&args.server_key)?;
    let server = app_protocol::parse_addr(&args.addr)?;
    let bind: SocketAddr = if server.is_ipv4() {
        "0.0.0.0:0".parse()?
    } else {
        "[::]:0".parse()?
    };
    let mut node = SessionSocket::bind(bind, key, vec![], &args.stack, args.accel)?;
    node.set_busy_poll(args.busy_poll);
    let now = node.now();
    let peer = node.endpoint_mut().connect(now, server_key, server);
    let mut c = Client {
        node,
        peer,
        server,
        resend: VecDeque::new(),
        replies: VecDeque::new(),
    };
    let started = Instant::now();
    while !c.node.endpoint().is_established(peer) {
        if started.elapsed().as_secs_f64() > args.timeout {
            bail!(
                "no session with {server} after {} s: nothing listening there, a wrong server key, \
                 or this key is not allowed by the server",
                args.timeout
            );
        }
        c.pump(Duration::from_millis(20))?;
    }
    let handshake = started.elapsed();
    let stop = app_protocol::interrupted()?;
    let size = args.size.max(2);
    let result = if let Some(n) = args.ping {
        ping(&mut c, n, size, args.busy_poll, &stop)?
    } else if let Some(secs) = args.throughput {
        let deadline = Instant::now() + Duration::from_secs_f64(secs);
        let chunk = vec![0x5au8; size - 1];
        stream(&mut c, size, args.busy_poll, &stop, |buf| {
            if Instant::now() >= deadline {
                return Ok(0);
            }
            buf[..chunk.len()].copy_from_slice(&chunk);
            Ok(chunk.len())
        })?
    } else {
        let mut input: Box<dyn Read> = match &args.file {
            Some(f) => Box::new(
                std::fs::File::open(f).with_context(|| format!("opening {}", f.display()))?,
            ),
            None => Box::new(std::io::stdin()),
        };
        stream(&mut c, size, args.busy_poll, &stop, |buf| {
            app_protocol::read_full(&mut input, buf).context("reading the input")
        })?
    };
    let s = c.node.endpoint().peer_stats(peer).unwrap_or_default();
    eprintln!(
        "handshake {:.3} ms",
        s.handshake_time.unwrap_or(handshake).as_secs_f64() * 1e3
    );
    eprintln!(
        "{}",
        app_protocol::stats_line(&server_key, Some(server), &s)
    );
    eprintln!("{}", app_protocol::drops_line(c.node.endpoint()));
    if args.quiet {
        println!(
            "{result} handshake_us={:.1} datagrams_out={} bytes_out={}",
            s.handshake_time.unwrap_or(handshake).as_secs_f64() * 1e6,
            s.datagrams_out,
            s.bytes_out,
        );
    } else {
        eprintln!("{result}");
    }
    Ok(())
}

fn ping(
    c: &mut Client,
    n: u64,
    size: usize,
    busy: bool,
    stop: &std::sync::atomic::AtomicBool,
) -> Result<String> {
    let mut rtts = Vec::with_capacity(n as usize);
    let mut msg = vec![0u8; size];
    msg[0] = PING;
    for i in 0..n {
        if app_protocol::is_set(stop) {
            break;
        }
        msg[1..9.min(size)].copy_from_slice(&i.to_le_bytes()[..8.min(size - 1)]);
        let t = Instant::now();
        c.send(&msg, busy)?;
        loop {
            match c.reply(PING, Duration::from_secs(5), busy)? {
                Some(r) if r == msg => break,
                Some(_) => continue,
                None => bail!("ping {i}: no answer in 5 s"),
            }
        }
        rtts.push(t.elapsed());
    }
    if rtts.is_empty() {
        bail!("no pings");
    }
    rtts.sort();
    let pct = |q: f64| rtts[((rtts.len() - 1) as f64 * q).round() as usize].as_secs_f64() * 1e6;
    Ok(format!(
        "pings={} p50_us={:.1} p90_us={:.1} p99_us={:.1} max_us={:.1}",
        rtts.len(),
        pct(0.5),
        pct(0.9),
        pct(0.99),
        pct(1.0)
    ))
}

/// Send `d` messages filled by `fill` until it gives 0 bytes, then the end; check the
/// server's hash of what it received against ours.
fn stream(
    c: &mut Client,
    size: usize,
    busy: bool,
    stop: &std::sync::atomic::AtomicBool,
    mut fill: impl FnMut(&mut [u8]) -> Result<usize>,
) -> Result<String> {
    let mut msg = vec![0u8; size];
    msg[0] = DATA;
    let mut hash = Sha256::new();
    let mut bytes = 0u64;
    let t = Instant::now();
    let bar = indicatif::ProgressBar::new_spinner();
    bar.set_style(
        indicatif::ProgressStyle::with_template("{spinner} {bytes} sent ({bytes_per_sec})")
            .unwrap_or_else(|_| indicatif::ProgressStyle::default_spinner()),
    );
    loop {
        if app_protocol::is_set(stop) {
            eprintln!("interrupted: ending the stream");
            break;
        }
        let n = fill(&mut msg[1..])?;
        if n == 0 {
            break;
        }
        hash.update(&msg[1..1 + n]);
        c.send(&msg[..1 + n], busy)?;
        bytes += n as u64;
        bar.set_position(bytes);
    }
    c.send(&[END], busy)?;
    let Some(reply) = c.reply(HASH, Duration::from_secs(60), busy)? else {
        bail!("the server did not confirm the stream within 60 s");
    };
    bar.finish_and_clear();
    let elapsed = t.elapsed();
    let ours = app_protocol::hex_digest(&hash.finalize());
    let theirs = String::from_utf8_lossy(&reply[1..]).into_owned();
    if ours != theirs {
        bail!("the server's sha256 {theirs} differs from ours {ours}");
    }
    Ok(format!(
        "bytes={bytes} seconds={:.3} mbytes_per_s={:.1} sha256={ours} verified=yes",
        elapsed.as_secs_f64(),
        bytes as f64 / elapsed.as_secs_f64() / 1e6
    ))
}
