//! `phyllo relay`: a UDP relay that impairs what it forwards — seeded loss, delay, jitter,
//! reordering, duplication and corruption, like netem or toxiproxy for UDP.
//!
//! Clients send to `--listen`; for each client address the relay opens its own socket
//! towards `--to`, so the server sees one address per client and its answers find their way
//! back. Both directions are impaired alike. Put it in front of any UDP service where the
//! kernel has no netem qdisc.
//!
//! With `--rate`, each direction is also a bottleneck: a link of that rate with a FIFO queue
//! in front of it that holds `--queue-ms` of the rate. A datagram waits for the ones ahead of
//! it to be sent at the rate, then for the delay; one that finds the queue full is dropped
//! (tail drop, counted), as a router's queue does. It is the test support's bottleneck
//! ([`Bottleneck`]), on the relay's clock: nanoseconds since the relay started.

use anyhow::{Context, Result};
use phyllo::faults::{Bottleneck, Faults};
use phyllo::Time;
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
    #[arg(long, default_value_t = 0.0, value_parser = non_negative)]
    pub delay: f64,
    /// Extra uniform random delay up to this, milliseconds (reorders what it spreads).
    #[arg(long, default_value_t = 0.0, value_parser = non_negative)]
    pub jitter: f64,
    /// Probability a datagram is held back by up to `--reorder-ms` more.
    #[arg(long, default_value_t = 0.0)]
    pub reorder: f64,
    /// How far a reordered datagram is held back, milliseconds.
    #[arg(long, default_value_t = 10.0, value_parser = non_negative)]
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
    /// A bottleneck of this many megabits per second in each direction (0: none).
    #[arg(long, default_value_t = 0.0, value_parser = non_negative)]
    pub rate: f64,
    /// The bottleneck's queue, in milliseconds of its rate (beyond it datagrams are dropped).
    #[arg(long, default_value_t = 25.0, value_parser = non_negative)]
    pub queue_ms: f64,
    /// Print the address actually bound on the first line.
    #[arg(long)]
    pub print_addr: bool,
}

/// A finite number of milliseconds or megabits per second, zero or more: what the relay's
/// delays, queue and rate take (an infinite or negative one is refused with a clear error
/// instead of panicking when it is turned into a duration).
fn non_negative(s: &str) -> Result<f64, String> {
    match s.parse::<f64>() {
        Ok(v) if v.is_finite() && v >= 0.0 => Ok(v),
        Ok(_) => Err(format!("`{s}` is not a finite number of zero or more")),
        Err(e) => Err(format!("`{s}`: {e}")),
    }
}

/// The impairment of datagrams: the in-memory link's faults ([`Faults::draw`]: loss,
/// duplication, reordering, corruption), plus a fixed delay and uniform jitter on every copy.
struct Impair {
    rng: ChaCha8Rng,
    faults: Faults,
    delay: Duration,
    jitter: Duration,
    /// The bottleneck of each direction (up, down), with `--rate`, on the clock of `epoch`.
    bottleneck: [Option<Bottleneck>; 2],
    /// When the relay started: the bottlenecks' [`Time`] counts nanoseconds from it.
    epoch: Instant,
    counts: Counts,
}

/// What the relay did, printed when it stops.
#[derive(Debug, Default)]
struct Counts {
    received: u64,
    lost: u64,
    duplicated: u64,
    reordered: u64,
    corrupted: u64,
    forwarded: u64,
    send_failed: u64,
}

impl Impair {
    fn new(a: &RelayArgs) -> Impair {
        let ms = |v: f64| Duration::from_secs_f64(v.max(0.0) / 1e3);
        Impair {
            rng: ChaCha8Rng::seed_from_u64(a.seed),
            faults: Faults {
                loss: a.loss,
                duplicate: a.duplicate,
                reorder: a.reorder,
                corrupt: a.corrupt,
                delay: Duration::ZERO,
                reorder_delay: ms(a.reorder_ms),
            },
            delay: ms(a.delay),
            jitter: ms(a.jitter),
            bottleneck: std::array::from_fn(|_| {
                (a.rate > 0.0 && a.rate.is_finite()).then(|| {
                    // Megabits to bytes per second (the float cast saturates; the bottleneck takes at
                    // least one).
                    let bytes_per_sec = (a.rate * 1e6 / 8.0).round() as u64;
                    Bottleneck::new(bytes_per_sec, ms(a.queue_ms))
                })
            }),
            epoch: Instant::now(),
            counts: Counts::default(),
        }
    }

    /// Datagrams the bottlenecks' full queues dropped, both directions.
    fn queue_drops(&self) -> u64 {
        self.bottleneck
            .iter()
            .flatten()
            .map(|b| b.stats().dropped)
            .sum()
    }

    /// The release instants of `d`'s copies going `up` (to the service) or down, corrupting
    /// it in place if so drawn (both copies of a duplicated datagram carry the first copy's
    /// corruption, if any); each copy crosses the direction's bottleneck first, if any.
    fn plan(&mut self, now: Instant, d: &mut [u8], up: bool) -> Vec<Instant> {
        let fate = self.faults.draw(&mut self.rng, d.len());
        let c = &mut self.counts;
        c.received += 1;
        let mut at = Vec::new();
        for (i, a) in fate.copies.into_iter().flatten().enumerate() {
            if i == 0 {
                a.corrupt(d);
                c.corrupted += u64::from(a.flip.is_some());
            } else {
                c.duplicated += 1;
            }
            c.reordered += u64::from(a.extra.is_some());
            let crossed = match &mut self.bottleneck[usize::from(!up)] {
                Some(b) => match b.admit(to_time(self.epoch, now), d.len()) {
                    // Beyond what an `Instant` holds (centuries away): as good as now.
                    Some(t) => self
                        .epoch
                        .checked_add(Duration::from_nanos(t.as_nanos()))
                        .unwrap_or(now),
                    // Dropped by a full queue (the bottleneck counts it).
                    None => continue,
                },
                None => now,
            };
            let jitter = self.jitter.mul_f64(self.rng.random::<f64>());
            at.push(crossed + self.delay + jitter + a.extra.unwrap_or_default());
        }
        c.lost += u64::from(fate.copies.iter().all(Option::is_none));
        at
    }
}

/// `at` on the sans-IO clock that counts nanoseconds since `epoch` (an instant before the
/// epoch is the epoch; one 584 years after it, the clock's end).
fn to_time(epoch: Instant, at: Instant) -> Time {
    Time(u64::try_from(at.saturating_duration_since(epoch).as_nanos()).unwrap_or(u64::MAX))
}

/// Where a held datagram goes: to the service through a client's socket, or back to a client.
#[derive(PartialEq, Eq, PartialOrd, Ord)]
enum Dest {
    Up(usize),
    Down(SocketAddr),
}

/// A datagram held until its release instant (the serial keeps equal instants in order).
type Held = (Instant, u64, Dest, Vec<u8>);

/// Run the relay until SIGINT or SIGTERM; then print what it did.
pub fn relay(args: RelayArgs) -> Result<()> {
    let stop = crate::app_protocol::interrupted()?;
    let listen_addr = crate::app_protocol::parse_addr(&args.listen)?;
    let to = crate::app_protocol::parse_addr(&args.to)?;
    let front =
        UdpSocket::bind(listen_addr).with_context(|| format!("cannot listen on {listen_addr}"))?;
    front.set_nonblocking(true)?;
    if args.print_addr {
        println!("{}", front.local_addr()?);
    }
    eprintln!(
        "relaying {} -> {to}: loss {} delay {} ms jitter {} ms reorder {} dup {} corrupt {}{}",
        front.local_addr()?,
        args.loss,
        args.delay,
        args.jitter,
        args.reorder,
        args.duplicate,
        args.corrupt,
        if args.rate > 0.0 {
            format!(" rate {} Mbit/s queue {} ms", args.rate, args.queue_ms)
        } else {
            String::new()
        }
    );
    let mut imp = Impair::new(&args);
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
    while !crate::app_protocol::is_set(&stop) {
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
                    for at in imp.plan(Instant::now(), &mut d, true) {
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
                for at in imp.plan(Instant::now(), &mut d, false) {
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
            let sent = match dest {
                Dest::Up(i) => backs[i].0.send(&d),
                Dest::Down(c) => front.send_to(&d, c),
            };
            match sent {
                Ok(_) => imp.counts.forwarded += 1,
                Err(_) => imp.counts.send_failed += 1,
            }
        }
        if !moved {
            let next = held
                .peek()
                .map(|Reverse(h)| h.0.saturating_duration_since(now))
                .unwrap_or(Duration::from_millis(1));
            std::thread::sleep(next.min(Duration::from_micros(200)));
        }
    }
    let c = &imp.counts;
    let queue_dropped = imp.queue_drops();
    eprintln!(
        "relay stopping: {} datagrams received from {} clients, {} lost, {} dropped by a full \
         queue, {} duplicated, {} reordered, {} corrupted, {} forwarded, {} sends failed, {} \
         still held",
        c.received,
        clients.len(),
        c.lost,
        queue_dropped,
        c.duplicated,
        c.reordered,
        c.corrupted,
        c.forwarded,
        c.send_failed,
        held.len()
    );
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_bottleneck_spaces_datagrams_at_its_rate_and_drops_past_its_queue() {
        // 8 Mbit/s (1 MB/s) and a 3 ms queue: a 1000-byte datagram takes 1 ms on the link.
        let args = RelayArgs {
            listen: String::new(),
            to: String::new(),
            loss: 0.0,
            delay: 0.0,
            jitter: 0.0,
            reorder: 0.0,
            reorder_ms: 0.0,
            duplicate: 0.0,
            corrupt: 0.0,
            seed: 1,
            rate: 8.0,
            queue_ms: 3.0,
            print_addr: false,
        };
        let mut imp = Impair::new(&args);
        let t0 = imp.epoch + Duration::from_millis(7);
        let ms = |n: u64| Duration::from_millis(n);
        // A burst at t0: each leaves 1 ms after the one before; the queue holds 3 ms of
        // waiting, so the fifth and sixth, which would wait 4 and 5 ms, are dropped.
        let mut d = [0u8; 1000];
        let done: Vec<Vec<Instant>> = (0..6).map(|_| imp.plan(t0, &mut d, true)).collect();
        for (i, at) in done.iter().take(4).enumerate() {
            assert_eq!(*at, [t0 + ms(i as u64 + 1)], "datagram {i}");
        }
        assert!(
            done[4].is_empty() && done[5].is_empty(),
            "waits > 3 ms: dropped"
        );
        assert_eq!(imp.queue_drops(), 2);
        // The other direction has a bottleneck of its own.
        assert_eq!(imp.plan(t0, &mut d, false), [t0 + ms(1)]);
        // Once the link is idle again a datagram goes through at once.
        let mut half = [0u8; 500];
        assert_eq!(
            imp.plan(t0 + ms(10), &mut half, true),
            [t0 + ms(10) + Duration::from_micros(500)]
        );
        // Before the epoch is the epoch.
        assert_eq!(to_time(t0, imp.epoch), Time::ZERO);
    }
}
