//! `phyllo relay`: a UDP relay that impairs what it forwards — seeded loss, delay, jitter,
//! reordering, duplication and corruption, like netem or toxiproxy for UDP.
//!
//! Clients send to `--listen`; for each client address the relay opens its own socket
//! towards `--to`, so the server sees one address per client and its answers find their way
//! back. Both directions are impaired alike. Put it in front of any UDP service where the
//! kernel has no netem qdisc.

use anyhow::{Context, Result};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap};
use std::net::{SocketAddr, UdpSocket};
use std::time::{Duration, Instant};

/// `phyllo relay` options.
#[derive(clap::Args, Debug, Clone)]
pub struct RelayArgs {
    /// Address clients send to.
    #[arg(long)]
    pub listen: String,
    /// Address of the service behind the relay.
    #[arg(long)]
    pub to: String,
    /// Probability a datagram is lost.
    #[arg(long, default_value_t = 0.0)]
    pub loss: f64,
    /// Fixed one-way delay, milliseconds.
    #[arg(long, default_value_t = 0.0)]
    pub delay: f64,
    /// Extra uniform random delay up to this, milliseconds (reorders what it spreads).
    #[arg(long, default_value_t = 0.0)]
    pub jitter: f64,
    /// Probability a datagram is held back by up to `--reorder-ms` more.
    #[arg(long, default_value_t = 0.0)]
    pub reorder: f64,
    /// How far a reordered datagram is held back, milliseconds.
    #[arg(long, default_value_t = 10.0)]
    pub reorder_ms: f64,
    /// Probability a datagram is delivered twice.
    #[arg(long, default_value_t = 0.0)]
    pub duplicate: f64,
    /// Probability one bit of a datagram is flipped.
    #[arg(long, default_value_t = 0.0)]
    pub corrupt: f64,
    /// Seed of the impairments.
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// Print the address actually bound on the first line.
    #[arg(long)]
    pub print_addr: bool,
}

/// The impairment of one datagram: when (if ever) its copies go out, and which bit flips.
struct Impair {
    rng: ChaCha8Rng,
    a: RelayArgs,
}

impl Impair {
    /// The release instants of `d`'s copies, corrupting it in place if so drawn.
    fn plan(&mut self, now: Instant, d: &mut [u8]) -> Vec<Instant> {
        let a = &self.a;
        if self.rng.random_bool(a.loss.clamp(0.0, 1.0)) {
            return Vec::new();
        }
        let copies = if self.rng.random_bool(a.duplicate.clamp(0.0, 1.0)) {
            2
        } else {
            1
        };
        if !d.is_empty() && self.rng.random_bool(a.corrupt.clamp(0.0, 1.0)) {
            let bit = self.rng.random_range(0..d.len() * 8);
            d[bit / 8] ^= 1 << (bit % 8);
        }
        (0..copies)
            .map(|_| {
                let mut ms = a.delay + a.jitter * self.rng.random::<f64>();
                if self.rng.random_bool(a.reorder.clamp(0.0, 1.0)) {
                    ms += a.reorder_ms * self.rng.random::<f64>();
                }
                now + Duration::from_secs_f64(ms.max(0.0) / 1e3)
            })
            .collect()
    }
}

/// Where a held datagram goes: to the service through a client's socket, or back to a client.
#[derive(PartialEq, Eq, PartialOrd, Ord)]
enum Dest {
    Up(usize),
    Down(SocketAddr),
}

/// A datagram held until its release instant (the serial keeps equal instants in order).
type Held = (Instant, u64, Dest, Vec<u8>);

/// Run the relay until killed.
pub fn relay(args: RelayArgs) -> Result<()> {
    let listen_addr = crate::sessiond::parse_addr(&args.listen)?;
    let to = crate::sessiond::parse_addr(&args.to)?;
    let front =
        UdpSocket::bind(listen_addr).with_context(|| format!("cannot listen on {listen_addr}"))?;
    front.set_nonblocking(true)?;
    if args.print_addr {
        println!("{}", front.local_addr()?);
    }
    eprintln!(
        "relaying {} -> {to}: loss {} delay {} ms jitter {} ms reorder {} dup {} corrupt {}",
        front.local_addr()?,
        args.loss,
        args.delay,
        args.jitter,
        args.reorder,
        args.duplicate,
        args.corrupt
    );
    let mut imp = Impair {
        rng: ChaCha8Rng::seed_from_u64(args.seed),
        a: args.clone(),
    };
    let mut clients: HashMap<SocketAddr, usize> = HashMap::new();
    let mut backs: Vec<(UdpSocket, SocketAddr)> = Vec::new();
    let mut held: BinaryHeap<Reverse<Held>> = BinaryHeap::new();
    let mut serial = 0u64;
    let mut buf = vec![0u8; 65_536];
    let bind_any: SocketAddr = if to.is_ipv4() {
        "0.0.0.0:0".parse()?
    } else {
        "[::]:0".parse()?
    };
    loop {
        let mut moved = false;
        // From clients.
        loop {
            match front.recv_from(&mut buf) {
                Ok((n, from)) => {
                    moved = true;
                    let i = match clients.get(&from) {
                        Some(&i) => i,
                        None => {
                            let s = UdpSocket::bind(bind_any).context("opening a relay socket")?;
                            s.connect(to)
                                .with_context(|| format!("connecting to {to}"))?;
                            s.set_nonblocking(true)?;
                            backs.push((s, from));
                            clients.insert(from, backs.len() - 1);
                            backs.len() - 1
                        }
                    };
                    let mut d = buf[..n].to_vec();
                    for at in imp.plan(Instant::now(), &mut d) {
                        serial += 1;
                        held.push(Reverse((at, serial, Dest::Up(i), d.clone())));
                    }
                }
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => break,
                Err(_) => break,
            }
        }
        // From the service.
        for (s, client) in &backs {
            while let Ok(n) = s.recv(&mut buf) {
                moved = true;
                let mut d = buf[..n].to_vec();
                for at in imp.plan(Instant::now(), &mut d) {
                    serial += 1;
                    held.push(Reverse((at, serial, Dest::Down(*client), d.clone())));
                }
            }
        }
        // Release what is due.
        let now = Instant::now();
        while held.peek().is_some_and(|Reverse(h)| h.0 <= now) {
            let Some(Reverse((_, _, dest, d))) = held.pop() else {
                break;
            };
            moved = true;
            // A send that fails is a loss, as on a real path.
            let _ = match dest {
                Dest::Up(i) => backs[i].0.send(&d),
                Dest::Down(c) => front.send_to(&d, c),
            };
        }
        if !moved {
            let next = held
                .peek()
                .map(|Reverse(h)| h.0.saturating_duration_since(now))
                .unwrap_or(Duration::from_millis(1));
            std::thread::sleep(next.min(Duration::from_micros(200)));
        }
    }
}
