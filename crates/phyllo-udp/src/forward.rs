//! A forwarder — seed 002's router (§6) — between UDP sockets, run either on the receive
//! [`engine`](crate::engine) or as 4.2BSD's interrupt-driven structure with real threads and
//! real priorities, plus the paced generator that offers it load. The report's `engine`
//! experiment measures delivered against offered rate for both on this machine.
//!
//! Per-packet protocol work is simulated by spinning for a configured time (`link` when a
//! packet is taken from the socket, `ip` for the forwarding decision), so the forwarder's
//! MLFRR sits where a generator on the other core can offer ten times it.
//!
//! The baseline (§4.1, Fig. 3): a receive thread at real-time priority (`SCHED_FIFO`, the
//! "device IPL") takes each datagram off the socket, does the link-level work and queues it on a
//! bounded `ipintrq`; a protocol thread at a lower real-time priority (the software interrupt)
//! does the IP work and sends it on. Both are pinned to one core, so the receive thread preempts
//! the protocol thread whenever a datagram arrives — the structure that livelocks. Where
//! real-time priorities are not permitted, it runs with ordinary ones and says so
//! ([`Forwarded::realtime`]).

use crate::engine::{Engine, Served};
use crate::udp::{RecvBatch, UdpLink, MAX_BATCH};
use phyllo::engine::PollConfig;
use std::collections::VecDeque;
use std::io;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

/// Which structure forwards.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Design {
    /// 4.2BSD: receive thread → `ipintrq` → protocol thread, real-time priorities, one core.
    Baseline,
    /// The engine with this discipline.
    Engine(PollConfig),
}

/// How the forwarder runs.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct ForwardConfig {
    /// Simulated link-level work per packet.
    pub link: Duration,
    /// Simulated IP work per packet.
    pub ip: Duration,
    /// The baseline's `ipintrq` (4.2BSD: 50).
    pub ipintrq: usize,
    /// The engine's output queue.
    pub output_queue: usize,
    /// Pin the forwarder's threads to this CPU.
    pub cpu: Option<usize>,
}

impl Default for ForwardConfig {
    fn default() -> Self {
        ForwardConfig {
            link: Duration::from_micros(10),
            ip: Duration::from_micros(20),
            ipintrq: 50,
            output_queue: 50,
            cpu: None,
        }
    }
}

/// What a forwarder did.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Forwarded {
    /// Datagrams taken off the input socket.
    pub received: u64,
    /// Datagrams sent on.
    pub forwarded: u64,
    /// Dropped at the `ipintrq` (baseline).
    pub drops_ipintrq: u64,
    /// Dropped at the output queue (engine), or refused by the kernel when sent on.
    pub drops_output: u64,
    /// Dropped by the kernel at the input socket (`SO_RXQ_OVFL`).
    pub drops_socket: u64,
    /// Wake-ups: the engine's `epoll` notifications, or the baseline's blocking receives that
    /// returned.
    pub wakeups: u64,
    /// Whether the baseline got its real-time priorities.
    pub realtime: bool,
}

/// Busy-wait for `d` (simulated protocol work).
fn spin(d: Duration) {
    let end = Instant::now() + d;
    while Instant::now() < end {
        std::hint::spin_loop();
    }
}

/// Forward from `input` to `to` through `output` until `stop` is set.
pub fn forward(
    input: UdpLink,
    output: UdpLink,
    to: SocketAddr,
    design: Design,
    cfg: ForwardConfig,
    stop: Arc<AtomicBool>,
) -> io::Result<Forwarded> {
    match design {
        Design::Engine(pc) => forward_engine(input, output, to, pc, cfg, &stop),
        Design::Baseline => forward_baseline(input, output, to, cfg, stop),
    }
}

fn forward_engine(
    mut input: UdpLink,
    mut output: UdpLink,
    to: SocketAddr,
    pc: PollConfig,
    cfg: ForwardConfig,
    stop: &AtomicBool,
) -> io::Result<Forwarded> {
    if let Some(cpu) = cfg.cpu {
        let _ = sys::pin_to(cpu);
    }
    input.set_drop_counting(true)?;
    let mut engine = Engine::new(pc)?;
    let rx = engine.add_receive(&input)?;
    let tx = engine.add_transmit();
    let mut batch = RecvBatch::new(MAX_BATCH, 2048);
    // Datagrams received but not yet handled (a batch may hold more than the quota).
    let mut pending: VecDeque<Vec<u8>> = VecDeque::new();
    let mut outq: VecDeque<Vec<u8>> = VecDeque::new();
    let mut f = Forwarded::default();
    while !stop.load(Ordering::Relaxed) {
        let until = Some(Instant::now() + Duration::from_millis(20));
        engine.run_until(until, |ctl, s, quota| {
            if s == rx {
                let mut handled = 0;
                while handled < quota && ctl.input_allowed() {
                    if pending.is_empty() {
                        // No more than the quota leaves the socket: the rest waits there.
                        let want = (quota - handled).min(MAX_BATCH);
                        if input.try_recv_some(&mut batch, want)? == 0 {
                            break;
                        }
                        pending.extend(batch.iter().map(<[u8]>::to_vec));
                    }
                    let Some(p) = pending.pop_front() else {
                        break;
                    };
                    f.received += 1;
                    spin(cfg.link);
                    spin(cfg.ip);
                    if outq.len() < cfg.output_queue {
                        outq.push_back(p);
                        ctl.wake(tx);
                    } else {
                        f.drops_output += 1;
                    }
                    handled += 1;
                }
                Ok(Served {
                    handled,
                    drained: handled < quota && pending.is_empty(),
                })
            } else {
                let n = outq.len().min(quota).min(MAX_BATCH);
                let views: Vec<&[u8]> = outq.iter().take(n).map(Vec::as_slice).collect();
                // A blocking send stops only at an error: what it did not take is dropped.
                let k = output.send_batch_to(&views, to).unwrap_or(0);
                f.forwarded += k as u64;
                f.drops_output += (n - k.min(n)) as u64;
                outq.drain(..n);
                Ok(Served {
                    handled: n,
                    drained: outq.is_empty(),
                })
            }
        })?;
    }
    f.wakeups = engine.stats().notifications;
    f.drops_socket = input.stats().kernel_drops;
    Ok(f)
}

/// The baseline's shared state: the `ipintrq` and its counters.
struct IpIntrQ {
    q: Mutex<VecDeque<Vec<u8>>>,
    ready: Condvar,
}

fn forward_baseline(
    mut input: UdpLink,
    output: UdpLink,
    to: SocketAddr,
    cfg: ForwardConfig,
    stop: Arc<AtomicBool>,
) -> io::Result<Forwarded> {
    input.set_drop_counting(true)?;
    let ipintrq = Arc::new(IpIntrQ {
        q: Mutex::new(VecDeque::new()),
        ready: Condvar::new(),
    });
    // The protocol thread: the software interrupt, below the receive thread.
    let protocol = {
        let (ipintrq, stop) = (Arc::clone(&ipintrq), Arc::clone(&stop));
        std::thread::Builder::new()
            .name("bsd-ipintr".into())
            .spawn(move || -> (u64, bool) {
                if let Some(cpu) = cfg.cpu {
                    let _ = sys::pin_to(cpu);
                }
                let rt = sys::realtime(40).is_ok();
                let mut forwarded = 0;
                let mut out = output;
                loop {
                    let p = {
                        let Ok(mut q) = ipintrq.q.lock() else {
                            return (forwarded, rt);
                        };
                        loop {
                            if let Some(p) = q.pop_front() {
                                break Some(p);
                            }
                            if stop.load(Ordering::Relaxed) {
                                break None;
                            }
                            q = match ipintrq.ready.wait_timeout(q, Duration::from_millis(10)) {
                                Ok((q, _)) => q,
                                Err(_) => return (forwarded, rt),
                            };
                        }
                    };
                    let Some(p) = p else {
                        return (forwarded, rt);
                    };
                    spin(cfg.ip);
                    if out.send_batch_to(&[&p], to).is_ok() {
                        forwarded += 1;
                    }
                }
            })?
    };
    // The receive thread: the device interrupt, at the top priority.
    if let Some(cpu) = cfg.cpu {
        let _ = sys::pin_to(cpu);
    }
    let rt = sys::realtime(50).is_ok();
    let mut f = Forwarded::default();
    let mut batch = RecvBatch::new(1, 2048);
    while !stop.load(Ordering::Relaxed) {
        if input.recv_timeout(&mut batch, Some(Duration::from_millis(10)))? == 0 {
            continue;
        }
        f.wakeups += 1;
        let Some(p) = batch.get(0) else {
            continue;
        };
        f.received += 1;
        spin(cfg.link);
        let Ok(mut q) = ipintrq.q.lock() else {
            break;
        };
        if q.len() < cfg.ipintrq {
            q.push_back(p.to_vec());
            ipintrq.ready.notify_one();
        } else {
            f.drops_ipintrq += 1;
        }
    }
    let _ = sys::ordinary();
    ipintrq.ready.notify_all();
    let (forwarded, prt) = protocol
        .join()
        .map_err(|_| io::Error::other("the protocol thread panicked"))?;
    f.forwarded = forwarded;
    f.realtime = rt && prt;
    f.drops_socket = input.stats().kernel_drops;
    Ok(f)
}

/// Send `payload`-byte datagrams to `to` at `rate` per second for `duration`, `burst` at a
/// time (one `sendmmsg`), paced by the clock; returns how many were sent.
pub fn generate(
    link: &mut UdpLink,
    to: SocketAddr,
    rate: f64,
    burst: usize,
    payload: usize,
    duration: Duration,
) -> io::Result<u64> {
    let burst = burst.clamp(1, MAX_BATCH);
    let data = vec![0x42u8; payload.max(1)];
    let views = vec![data.as_slice(); burst];
    let start = Instant::now();
    let mut sent = 0u64;
    while start.elapsed() < duration {
        // Where the schedule says we should be.
        let due = (start.elapsed().as_secs_f64() * rate) as u64;
        if sent + burst as u64 > due {
            std::hint::spin_loop();
            continue;
        }
        sent += link.send_batch_to(&views, to)? as u64;
    }
    Ok(sent)
}

/// One measured run: a forwarder of `design` between loopback sockets, a generator offering
/// `rate` datagrams per second (bursts of 8, 32 bytes) for `duration`, and a sink counting
/// what arrives. With two CPUs or more the forwarder is pinned to CPU 0 and the generator and
/// sink to CPU 1 (unless `cfg.cpu` says otherwise), so the forwarder's core does only its
/// work.
pub fn trial(
    design: Design,
    mut cfg: ForwardConfig,
    rate: f64,
    duration: Duration,
) -> io::Result<Trial> {
    let any = SocketAddr::from((std::net::Ipv4Addr::LOCALHOST, 0));
    let input = UdpLink::bind(any)?;
    input.set_recv_buffer_size(1 << 18)?;
    let output = UdpLink::bind(any)?;
    let mut sink = UdpLink::bind(any)?;
    sink.set_recv_buffer_size(1 << 22)?;
    let mut gen = UdpLink::bind(any)?;
    let (to_fwd, to_sink) = (input.local_addr(), sink.local_addr());
    let two = std::thread::available_parallelism().is_ok_and(|n| n.get() >= 2);
    if two && cfg.cpu.is_none() {
        cfg.cpu = Some(0);
    }
    let stop = Arc::new(AtomicBool::new(false));
    let fwd = {
        let stop = Arc::clone(&stop);
        std::thread::Builder::new()
            .name("forwarder".into())
            .spawn(move || forward(input, output, to_sink, design, cfg, stop))?
    };
    let sink_done = Arc::new(AtomicBool::new(false));
    let counter = {
        let done = Arc::clone(&sink_done);
        std::thread::Builder::new()
            .name("sink".into())
            .spawn(move || -> io::Result<u64> {
                if two {
                    let _ = sys::pin_to(1);
                }
                let mut batch = RecvBatch::new(MAX_BATCH, 2048);
                let mut n = 0u64;
                loop {
                    let got = sink.recv_timeout(&mut batch, Some(Duration::from_millis(20)))?;
                    n += got as u64;
                    if got == 0 && done.load(Ordering::Relaxed) {
                        return Ok(n);
                    }
                }
            })?
    };
    // The generator on a thread of its own, so the caller is never pinned.
    let sent = std::thread::Builder::new()
        .name("generator".into())
        .spawn(move || {
            if two {
                let _ = sys::pin_to(1);
            }
            generate(&mut gen, to_fwd, rate, 8, 32, duration)
        })?
        .join()
        .map_err(|_| io::Error::other("the generator panicked"))?;
    // Let the forwarder finish what it holds, then stop it and the sink.
    std::thread::sleep(Duration::from_millis(50));
    stop.store(true, Ordering::Relaxed);
    let forwarder = fwd
        .join()
        .map_err(|_| io::Error::other("the forwarder panicked"))??;
    sink_done.store(true, Ordering::Relaxed);
    let got = counter
        .join()
        .map_err(|_| io::Error::other("the sink panicked"))??;
    let secs = duration.as_secs_f64();
    Ok(Trial {
        offered: sent? as f64 / secs,
        delivered: got as f64 / secs,
        forwarder,
    })
}

/// What [`trial`] measured.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Trial {
    /// Datagrams per second the generator sent.
    pub offered: f64,
    /// Datagrams per second the sink received.
    pub delivered: f64,
    /// The forwarder's own counts.
    pub forwarder: Forwarded,
}

/// Run the calling thread (and the processes it starts from now on) only on these CPUs; an
/// empty list means all of them.
pub fn pin_current_thread(cpus: &[usize]) -> io::Result<()> {
    sys::pin_to_set(cpus)
}

/// Thread placement and priority.
mod sys {
    use std::io;
    use std::mem;

    /// Pin the calling thread to `cpu`.
    pub(super) fn pin_to(cpu: usize) -> io::Result<()> {
        pin_to_set(&[cpu])
    }

    /// Pin the calling thread to `cpus` (all CPUs the set can name when empty).
    pub(super) fn pin_to_set(cpus: &[usize]) -> io::Result<()> {
        let bits = 8 * mem::size_of::<libc::cpu_set_t>();
        // SAFETY: cpu_set_t is plain old data; all zeros is the empty set.
        let mut set: libc::cpu_set_t = unsafe { mem::zeroed() };
        let all: Vec<usize> = (0..bits).collect();
        for &cpu in if cpus.is_empty() { &all[..] } else { cpus } {
            if cpu >= bits {
                return Err(io::Error::new(io::ErrorKind::InvalidInput, "no such CPU"));
            }
            // SAFETY: `cpu` is within the set's bits (checked above).
            unsafe { libc::CPU_SET(cpu, &mut set) };
        }
        // SAFETY: `set` is a live cpu_set_t of the size passed; 0 is the calling thread.
        let r = unsafe { libc::sched_setaffinity(0, mem::size_of::<libc::cpu_set_t>(), &set) };
        if r < 0 {
            Err(io::Error::last_os_error())
        } else {
            Ok(())
        }
    }

    /// Run the calling thread at real-time priority `prio` (`SCHED_FIFO`).
    pub(super) fn realtime(prio: libc::c_int) -> io::Result<()> {
        set_scheduler(libc::SCHED_FIFO, prio)
    }

    /// Back to ordinary scheduling.
    pub(super) fn ordinary() -> io::Result<()> {
        set_scheduler(libc::SCHED_OTHER, 0)
    }

    fn set_scheduler(policy: libc::c_int, prio: libc::c_int) -> io::Result<()> {
        let param = libc::sched_param {
            sched_priority: prio,
        };
        // SAFETY: `param` is a live sched_param the kernel only reads; 0 is the calling
        // thread.
        let r = unsafe { libc::sched_setscheduler(0, policy, &param) };
        if r < 0 {
            Err(io::Error::last_os_error())
        } else {
            Ok(())
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn both_designs_forward_everything_at_low_load() {
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
}
