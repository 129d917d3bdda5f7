//! Load for the forwarder: the paced generator, a counting sink, an optional compute-bound user
//! thread (seed 002's Fig. 10), and one measured run of them — with the hosts on loopback ports or
//! each in a network namespace of its own joined to the forwarder's by a veth pair ([`Testbed`]).
//! (Seed 002 is Mogul and Ramakrishnan, "Eliminating Receive Livelock in an Interrupt-Driven
//! Kernel".)
//!
//! With two CPUs or more the forwarder (and its stage and the user thread) is pinned to CPU 0
//! and the generators and sink to CPU 1, so the forwarder's core does only its work.

use super::{forward, sys, Design, ForwardConfig, Forwarded, MAGIC};
use crate::netns::{self, Netns, NetnsError, Veth};
use phyllo_udp::udp::{RecvBatch, UdpLink, MAX_BATCH};
use std::io;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Bytes in each generated datagram.
const PAYLOAD: usize = 32;

/// One generator: what it offers to one of the forwarder's interfaces.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Offer {
    /// Datagrams per second.
    pub rate: f64,
    /// Datagrams per `sendmmsg`, sent back to back.
    pub burst: usize,
    /// Garbage (no [`MAGIC`]) instead of datagrams to forward.
    pub garbage: bool,
}

impl Offer {
    /// Datagrams to forward at `rate`, in bursts of 8.
    pub fn valid(rate: f64) -> Offer {
        Offer {
            rate,
            burst: 8,
            garbage: false,
        }
    }

    /// Garbage at `rate`, in bursts of 32.
    pub fn garbage(rate: f64) -> Offer {
        Offer {
            rate,
            burst: 32,
            garbage: true,
        }
    }

    /// The datagram generator `index` sends.
    fn datagram(&self, index: u8) -> Vec<u8> {
        let mut d = vec![0u8; PAYLOAD];
        if self.garbage {
            // Deterministic noise that never starts with the magic.
            let mut x = 0x9e37_79b9_7f4a_7c15u64 ^ u64::from(index);
            for b in &mut d {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                *b = x as u8;
            }
            d[0] = !MAGIC[0];
        } else {
            d[..4].copy_from_slice(&MAGIC);
            d[4] = index;
        }
        d
    }
}

/// Send `offer`'s datagrams (tagged `index`) to `to` for `duration`, paced by the clock: a
/// burst leaves when the schedule says it is due; the generator sleeps when the next one is
/// far off, so generators sharing a core leave each other room. Returns how many were sent.
pub fn generate(
    link: &mut UdpLink,
    to: SocketAddr,
    offer: &Offer,
    index: u8,
    duration: Duration,
) -> io::Result<u64> {
    let burst = offer.burst.clamp(1, MAX_BATCH);
    let data = offer.datagram(index);
    let views = vec![data.as_slice(); burst];
    let start = Instant::now();
    let mut sent = 0u64;
    while start.elapsed() < duration {
        let due = Duration::from_secs_f64((sent + burst as u64) as f64 / offer.rate.max(1e-3));
        let ahead = due.saturating_sub(start.elapsed());
        if ahead > Duration::from_micros(200) {
            std::thread::sleep(ahead - Duration::from_micros(100));
            continue;
        }
        if !ahead.is_zero() {
            std::hint::spin_loop();
            continue;
        }
        sent += link.send_batch_to(&views, to)? as u64;
    }
    Ok(sent)
}

/// One measured run.
#[derive(Clone, Debug)]
pub struct Setup<'a> {
    /// Which structure forwards.
    pub design: Design,
    /// How it forwards.
    pub cfg: ForwardConfig,
    /// One generator per interface of the forwarder.
    pub offers: Vec<Offer>,
    /// How long the generators send.
    pub duration: Duration,
    /// Run a compute-bound user thread on the forwarder's core and report its share.
    pub user_thread: bool,
    /// Hosts in network namespaces (loopback ports when `None`).
    pub hosts: Option<&'a Testbed>,
}

impl Setup<'static> {
    /// One generator offering `rate` datagrams per second, on loopback.
    pub fn new(design: Design, rate: f64, duration: Duration) -> Setup<'static> {
        Setup {
            design,
            cfg: ForwardConfig::default(),
            offers: vec![Offer::valid(rate)],
            duration,
            user_thread: false,
            hosts: None,
        }
    }
}

/// What a run measured.
#[derive(Clone, Debug, PartialEq)]
pub struct Trial {
    /// Datagrams to forward the generators sent, per second.
    pub offered: f64,
    /// Of those, per second, how many reached the sink (or the monitor).
    pub delivered: f64,
    /// Per generator: (sent, delivered) per second (garbage is never delivered).
    pub inputs: Vec<(f64, f64)>,
    /// The forwarder's own counts.
    pub forwarder: Forwarded,
    /// The user thread's share of its core, when there was one.
    pub user_share: Option<f64>,
    /// How much the process's resident memory grew over the run, bytes.
    pub rss_growth: u64,
}

/// A forwarder of `design` fed by one generator offering `rate` datagrams per second (bursts
/// of 8, 32 bytes) for `duration`, on loopback.
pub fn trial(
    design: Design,
    cfg: ForwardConfig,
    rate: f64,
    duration: Duration,
) -> io::Result<Trial> {
    Setup {
        cfg,
        ..Setup::new(design, rate, duration)
    }
    .run()
}

/// Where a socket of a run lives.
#[derive(Clone, Copy)]
enum Place {
    Source(usize),
    Input(usize),
    Output,
    Sink,
}

impl Setup<'_> {
    /// Run it.
    pub fn run(&self) -> io::Result<Trial> {
        let n = self.offers.len();
        if n == 0 || n > Testbed::MAX_INPUTS {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("a run needs 1 to {} generators", Testbed::MAX_INPUTS),
            ));
        }
        if let Some(tb) = self.hosts {
            if tb.sources.len() < n {
                return Err(io::Error::new(
                    io::ErrorKind::InvalidInput,
                    "the testbed has fewer source hosts than the run has generators",
                ));
            }
        }
        let bind = |place| match self.hosts {
            Some(tb) => tb.bind(place),
            None => UdpLink::bind(SocketAddr::from((Ipv4Addr::LOCALHOST, 0))),
        };
        let mut inputs = Vec::new();
        let mut sources = Vec::new();
        for i in 0..n {
            let input = bind(Place::Input(i))?;
            input.set_recv_buffer_size(1 << 18)?;
            sources.push((bind(Place::Source(i))?, input.local_addr()));
            inputs.push(input);
        }
        let output = bind(Place::Output)?;
        let mut sink = bind(Place::Sink)?;
        sink.set_recv_buffer_size(1 << 22)?;
        let to_sink = sink.local_addr();
        let two = std::thread::available_parallelism().is_ok_and(|n| n.get() >= 2);
        let mut cfg = self.cfg;
        if two && cfg.cpu.is_none() {
            cfg.cpu = Some(0);
        }
        let rss0 = sys::resident_bytes();
        let stop = Arc::new(AtomicBool::new(false));
        let fwd = {
            let (stop, design) = (Arc::clone(&stop), self.design);
            std::thread::Builder::new()
                .name("forwarder".into())
                .spawn(move || forward(inputs, output, to_sink, design, cfg, stop))?
        };
        let user = if self.user_thread {
            let stop = Arc::clone(&stop);
            let cpu = cfg.cpu;
            Some(
                std::thread::Builder::new()
                    .name("user".into())
                    .spawn(move || compute_bound(cpu, &stop))?,
            )
        } else {
            None
        };
        let sink_done = Arc::new(AtomicBool::new(false));
        let counter = {
            let done = Arc::clone(&sink_done);
            std::thread::Builder::new()
                .name("sink".into())
                .spawn(move || count(&mut sink, two, n, &done))?
        };
        let generators: Vec<_> = sources
            .into_iter()
            .zip(&self.offers)
            .enumerate()
            .map(|(i, ((mut link, to), offer))| {
                let (offer, duration) = (*offer, self.duration);
                std::thread::Builder::new()
                    .name("generator".into())
                    .spawn(move || {
                        if two {
                            let _ = sys::pin_to(1);
                        }
                        generate(&mut link, to, &offer, i as u8, duration)
                    })
            })
            .collect::<io::Result<_>>()?;
        let mut sent = Vec::new();
        for g in generators {
            sent.push(
                g.join()
                    .map_err(|_| io::Error::other("a generator panicked"))??,
            );
        }
        let rss_growth = sys::resident_bytes().saturating_sub(rss0);
        // Let the forwarder finish what it holds, then stop it, the user thread and the sink.
        std::thread::sleep(Duration::from_millis(50));
        stop.store(true, Ordering::Relaxed);
        let forwarder = fwd
            .join()
            .map_err(|_| io::Error::other("the forwarder panicked"))??;
        let user_share = match user {
            Some(u) => Some(
                u.join()
                    .map_err(|_| io::Error::other("the user thread panicked"))??,
            ),
            None => None,
        };
        sink_done.store(true, Ordering::Relaxed);
        let got = counter
            .join()
            .map_err(|_| io::Error::other("the sink panicked"))??;
        let secs = self.duration.as_secs_f64();
        let inputs: Vec<(f64, f64)> = sent
            .iter()
            .zip(&got)
            .map(|(&s, &g)| (s as f64 / secs, g as f64 / secs))
            .collect();
        let valid = |k: usize| !self.offers[k].garbage;
        let offered = (0..n).filter(|&k| valid(k)).map(|k| inputs[k].0).sum();
        let sunk: f64 = (0..n).filter(|&k| valid(k)).map(|k| inputs[k].1).sum();
        Ok(Trial {
            offered,
            delivered: sunk + forwarder.captured as f64 / secs,
            inputs,
            forwarder,
            user_share,
            rss_growth,
        })
    }
}

/// Seed Figs. 1 and 14 on real sockets: `bursts` bursts of `size` datagrams (one `sendmmsg`
/// each), `spacing` apart, through a forwarder of `design` on loopback; the median time from a
/// burst's first send to the sink's receipt of the burst's first datagram, over all but the
/// first tenth of the bursts (the warm-up). Placement as for [`Setup::run`].
pub fn burst_latency(
    design: Design,
    mut cfg: ForwardConfig,
    size: usize,
    bursts: usize,
    spacing: Duration,
) -> io::Result<Duration> {
    let any = SocketAddr::from((Ipv4Addr::LOCALHOST, 0));
    let (input, output, mut sink, mut gen) = (
        UdpLink::bind(any)?,
        UdpLink::bind(any)?,
        UdpLink::bind(any)?,
        UdpLink::bind(any)?,
    );
    input.set_recv_buffer_size(1 << 18)?;
    let (to_fwd, to_sink) = (input.local_addr(), sink.local_addr());
    let two = std::thread::available_parallelism().is_ok_and(|n| n.get() >= 2);
    if two && cfg.cpu.is_none() {
        cfg.cpu = Some(0);
    }
    let epoch = Instant::now();
    let stop = Arc::new(AtomicBool::new(false));
    let fwd = {
        let stop = Arc::clone(&stop);
        std::thread::Builder::new()
            .name("forwarder".into())
            .spawn(move || forward(vec![input], output, to_sink, design, cfg, stop))?
    };
    let receiver = {
        let stop = Arc::clone(&stop);
        std::thread::Builder::new().name("sink".into()).spawn(
            move || -> io::Result<Vec<Duration>> {
                if two {
                    let _ = sys::pin_to(1);
                }
                let mut batch = RecvBatch::new(MAX_BATCH, 2048);
                let mut firsts = Vec::new();
                while !stop.load(Ordering::Relaxed) {
                    sink.recv_timeout(&mut batch, Some(Duration::from_millis(20)))?;
                    let now = epoch.elapsed();
                    for d in batch.iter() {
                        // The burst's first datagram carries position 0 and its send time.
                        if let (Some(0), Some(ts)) = (d.get(5), d.get(8..16)) {
                            let mut b = [0u8; 8];
                            b.copy_from_slice(ts);
                            let sent = Duration::from_nanos(u64::from_le_bytes(b));
                            firsts.push(now.saturating_sub(sent));
                        }
                    }
                }
                Ok(firsts)
            },
        )?
    };
    let sent = std::thread::Builder::new()
        .name("generator".into())
        .spawn(move || -> io::Result<()> {
            if two {
                let _ = sys::pin_to(1);
            }
            // Let the forwarder settle into its wait first.
            std::thread::sleep(Duration::from_millis(20));
            let mut burst = vec![Offer::valid(1.0).datagram(0); size.clamp(1, MAX_BATCH)];
            for _ in 0..bursts {
                let ts = (epoch.elapsed().as_nanos() as u64).to_le_bytes();
                for (i, d) in burst.iter_mut().enumerate() {
                    d[5] = i as u8;
                    d[8..16].copy_from_slice(&ts);
                }
                let views: Vec<&[u8]> = burst.iter().map(Vec::as_slice).collect();
                link_send_all(&mut gen, &views, to_fwd)?;
                std::thread::sleep(spacing);
            }
            Ok(())
        })?
        .join();
    std::thread::sleep(Duration::from_millis(50));
    stop.store(true, Ordering::Relaxed);
    let forwarded = fwd.join();
    let firsts = receiver.join();
    sent.map_err(|_| io::Error::other("the generator panicked"))??;
    forwarded.map_err(|_| io::Error::other("the forwarder panicked"))??;
    let mut firsts = firsts.map_err(|_| io::Error::other("the sink panicked"))??;
    // The first bursts find caches and the scheduler cold: a warm-up, not counted.
    let warm = (bursts / 10).min(firsts.len().saturating_sub(1));
    firsts.drain(..warm);
    if firsts.is_empty() {
        return Err(io::Error::other("no burst's first datagram arrived"));
    }
    firsts.sort();
    Ok(firsts[firsts.len() / 2])
}

/// Send all of `views` to `to`.
fn link_send_all(link: &mut UdpLink, views: &[&[u8]], to: SocketAddr) -> io::Result<()> {
    let mut sent = 0;
    while sent < views.len() {
        sent += link.send_batch_to(&views[sent..], to)?;
    }
    Ok(())
}

/// The sink: count datagrams by the generator that sent them until `done` and quiet.
fn count(sink: &mut UdpLink, two: bool, n: usize, done: &AtomicBool) -> io::Result<Vec<u64>> {
    if two {
        let _ = sys::pin_to(1);
    }
    let mut batch = RecvBatch::new(MAX_BATCH, 2048);
    let mut got = vec![0u64; n];
    loop {
        let k = sink.recv_timeout(&mut batch, Some(Duration::from_millis(20)))?;
        for d in batch.iter() {
            if let Some(slot) = d.get(4).and_then(|&i| got.get_mut(usize::from(i))) {
                *slot += 1;
            }
        }
        if k == 0 && done.load(Ordering::Relaxed) {
            return Ok(got);
        }
    }
}

/// A compute-bound user thread on `cpu` at ordinary priority: spins until `stop`, and returns
/// the share of the wall time it got the CPU.
fn compute_bound(cpu: Option<usize>, stop: &AtomicBool) -> io::Result<f64> {
    if let Some(cpu) = cpu {
        let _ = sys::pin_to(cpu);
    }
    let (t0, c0) = (Instant::now(), sys::thread_cpu_time()?);
    let mut x = 0u64;
    while !stop.load(Ordering::Relaxed) {
        for _ in 0..1000 {
            x = std::hint::black_box(x.wrapping_mul(6364136223846793005).wrapping_add(1));
        }
    }
    let used = sys::thread_cpu_time()?.saturating_sub(c0);
    Ok(used.as_secs_f64() / t0.elapsed().as_secs_f64().max(1e-9))
}

/// Hosts in network namespaces: source host `i` joined to the forwarder's host by a veth pair
/// of its own (10.77.`i+1`.0/24: source .1, forwarder .2 — one interface each), and the sink's
/// host joined to the forwarder's by another (10.77.100.0/24: forwarder .1, sink .2). A
/// datagram crosses a veth device, with its queue and softirq, on each hop instead of
/// loopback. Everything is removed when the testbed is dropped.
#[derive(Debug)]
pub struct Testbed {
    forwarder: Netns,
    sink: Netns,
    sources: Vec<Netns>,
    _links: Vec<Veth>,
}

impl Testbed {
    /// At most this many source hosts.
    pub const MAX_INPUTS: usize = 99;

    /// Create hosts for `inputs` generators; an error (no iproute2, no permission) says why.
    pub fn create(inputs: usize) -> Result<Testbed, NetnsError> {
        if inputs == 0 || inputs > Self::MAX_INPUTS {
            return Err(NetnsError::BadName(format!(
                "a testbed has 1 to {} source hosts",
                Self::MAX_INPUTS
            )));
        }
        netns::available()?;
        let tag = std::process::id() % 100_000;
        let forwarder = Netns::create(&format!("phy{tag}fwd"))?;
        let sink = Netns::create(&format!("phy{tag}sink"))?;
        let mut links = vec![netns::veth(
            &format!("p{tag}o"),
            &forwarder,
            Self::addr(100, 1),
            &sink,
            Self::addr(100, 2),
            24,
        )?];
        let mut sources = Vec::new();
        for i in 0..inputs {
            let host = Netns::create(&format!("phy{tag}s{i}"))?;
            links.push(netns::veth(
                &format!("p{tag}i{i}"),
                &host,
                Self::addr(i as u8 + 1, 1),
                &forwarder,
                Self::addr(i as u8 + 1, 2),
                24,
            )?);
            sources.push(host);
        }
        Ok(Testbed {
            forwarder,
            sink,
            sources,
            _links: links,
        })
    }

    fn addr(net: u8, host: u8) -> Ipv4Addr {
        Ipv4Addr::new(10, 77, net, host)
    }

    /// A socket at `place`, created inside its host's namespace.
    fn bind(&self, place: Place) -> io::Result<UdpLink> {
        let (ns, ip) = match place {
            Place::Source(i) => (self.sources.get(i), Self::addr(i as u8 + 1, 1)),
            Place::Input(i) => (Some(&self.forwarder), Self::addr(i as u8 + 1, 2)),
            Place::Output => (Some(&self.forwarder), Self::addr(100, 1)),
            Place::Sink => (Some(&self.sink), Self::addr(100, 2)),
        };
        let ns = ns.ok_or_else(|| io::Error::new(io::ErrorKind::InvalidInput, "no such host"))?;
        ns.in_ns(move || UdpLink::bind(SocketAddr::new(IpAddr::V4(ip), 0)))?
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::forward::{StageKind, UserStage};
    use phyllo::poller::PollConfig;
    use std::sync::{Mutex, MutexGuard};

    /// Runs pin real-time threads to CPU 0: one at a time, or they starve each other.
    fn one_at_a_time() -> MutexGuard<'static, ()> {
        static LOCK: Mutex<()> = Mutex::new(());
        LOCK.lock().unwrap_or_else(|e| e.into_inner())
    }

    #[test]
    fn both_designs_forward_everything_at_low_load() {
        let _one = one_at_a_time();
        for design in [Design::Baseline, Design::Engine(PollConfig::default())] {
            let t = trial(
                design,
                ForwardConfig::default(),
                2000.0,
                Duration::from_millis(300),
            )
            .unwrap();
            assert!(
                t.delivered >= 0.99 * t.offered,
                "{design:?}: {} of {} ({:?})",
                t.delivered,
                t.offered,
                t.forwarder
            );
            assert!(t.forwarder.wakeups > 0);
        }
    }

    #[test]
    fn screend_and_the_monitor_see_every_packet_at_low_load() {
        let _one = one_at_a_time();
        for design in [Design::Baseline, Design::Engine(PollConfig::default())] {
            for kind in [StageKind::Screend, StageKind::Monitor] {
                // A queue deep enough for the stage thread to be descheduled for a while (a
                // loaded machine, other tests) without dropping: what this checks is that
                // both designs hand every packet to the stage at low load, not the queue's
                // size.
                let cfg = ForwardConfig {
                    user: Some(UserStage {
                        kind,
                        cost: Duration::from_micros(20),
                        queue: 512,
                        feedback: true,
                    }),
                    ..ForwardConfig::default()
                };
                let t = trial(design, cfg, 2000.0, Duration::from_millis(300)).unwrap();
                let f = t.forwarder;
                assert!(
                    t.delivered >= 0.99 * t.offered,
                    "{design:?} {kind:?}: {} of {} ({f:?})",
                    t.delivered,
                    t.offered,
                );
                match kind {
                    StageKind::Screend => assert_eq!(f.captured, 0),
                    StageKind::Monitor => assert_eq!(f.forwarded, 0),
                }
            }
        }
    }

    /// Garbage on one interface at far more than the forwarder can take: counted drops, the
    /// other interface's traffic still forwarded, memory bounded.
    #[test]
    fn a_garbage_flood_on_one_interface_spares_the_other() {
        let _one = one_at_a_time();
        let t = Setup {
            offers: vec![Offer::valid(2000.0), Offer::garbage(300_000.0)],
            ..Setup::new(
                Design::Engine(PollConfig::default()),
                0.0,
                Duration::from_millis(500),
            )
        }
        .run()
        .unwrap();
        let f = t.forwarder;
        let (valid, _) = t.inputs[0];
        assert!(
            t.inputs[0].1 >= 0.95 * valid,
            "valid traffic forwarded: {:?} ({f:?})",
            t.inputs
        );
        assert_eq!(t.inputs[1].1, 0.0, "no garbage forwarded");
        assert!(
            f.drops_invalid > 0 && f.drops_invalid + f.drops_socket > 10_000,
            "{f:?}"
        );
        assert!(t.rss_growth <= 16 << 20, "grew {} bytes", t.rss_growth);
    }

    #[test]
    fn a_burst_s_first_packet_comes_through() {
        let _one = one_at_a_time();
        for design in [Design::Baseline, Design::Engine(PollConfig::default())] {
            let l = burst_latency(
                design,
                ForwardConfig::default(),
                4,
                20,
                Duration::from_millis(2),
            )
            .unwrap();
            // At least the simulated link and IP work of one packet.
            assert!(l >= Duration::from_micros(30), "{design:?}: {l:?}");
        }
    }

    #[test]
    fn hosts_in_namespaces_forward_across_veth() {
        let _one = one_at_a_time();
        let tb = match Testbed::create(1) {
            Ok(tb) => tb,
            Err(e) => {
                println!("SKIPPED: network namespaces unavailable here: {e}");
                return;
            }
        };
        let t = Setup {
            hosts: Some(&tb),
            ..Setup::new(
                Design::Engine(PollConfig::default()),
                2000.0,
                Duration::from_millis(300),
            )
        }
        .run()
        .unwrap();
        assert!(t.delivered >= 0.99 * t.offered && t.offered > 0.0, "{t:?}");
    }
}
