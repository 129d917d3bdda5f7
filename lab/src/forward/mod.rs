//! A forwarder — seed 002's router (§6) — between UDP sockets, run either on the receive
//! [`engine`](phyllo_net::receive) or as 4.2BSD's interrupt-driven structure with real threads and
//! real priorities; with an optional user-level stage (`screend` or a passive monitor, `stage`);
//! and the load that measures it ([`trial`](mod@trial): a paced generator, a sink, hosts on
//! loopback or in network namespaces). The report's `engine` experiment measures delivered against
//! offered rate for both designs on this machine. (Seed 002 is Mogul and Ramakrishnan, "Eliminating
//! Receive Livelock in an Interrupt-Driven Kernel".)
//!
//! Each input socket is one of the router's interfaces. A datagram is forwarded when it starts
//! with [`MAGIC`] (the forwarder's stand-in for a well-formed IP header); anything else is
//! garbage, dropped after the link-level work and counted. Per-packet protocol work is
//! simulated by spinning for a configured time (`link` when a packet is taken from the socket,
//! `ip` for the forwarding decision), so the forwarder's MLFRR sits where a generator on the
//! other core can offer ten times it.
//!
//! The engine runs on one thread at real-time priority (`SCHED_FIFO` 50, where a kernel's
//! network code runs: above every user thread), serving each interface, the stage's hand-back
//! and the output queue round-robin by quota.
//!
//! The baseline (§4.1, Fig. 3): per interface a receive thread at real-time priority (the
//! "device IPL") takes each datagram off the socket, does the link-level work and queues it on
//! a bounded `ipintrq`; a protocol thread at a lower real-time priority (the software
//! interrupt) does the IP work and sends it on (or queues it for the stage). All are pinned to
//! one core, so the receive threads preempt the protocol thread whenever a datagram arrives —
//! the structure that livelocks. Where real-time priorities are not permitted, both designs run
//! with ordinary ones and say so ([`Forwarded::realtime`]).

mod stage;
mod sys;
pub mod trial;

pub use stage::{StageKind, UserStage, SNAPLEN};
pub use trial::{burst_latency, generate, trial, Offer, Setup, Testbed, Trial};

use phyllo::poller::PollConfig;
use phyllo_net::receive::{Engine, Served};
use phyllo_udp::udp::{RecvBatch, UdpLink, MAX_BATCH};
use stage::{Handoff, Stage};
use std::collections::VecDeque;
use std::io;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

/// The first bytes of every datagram the forwarder forwards; anything else is garbage.
pub const MAGIC: [u8; 4] = *b"phyF";

/// Which structure forwards.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Design {
    /// 4.2BSD: receive threads → `ipintrq` → protocol thread, real-time priorities, one core.
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
    /// Pin the forwarder's threads (and the stage's) to this CPU.
    pub cpu: Option<usize>,
    /// A user-level stage between IP and output.
    pub user: Option<UserStage>,
}

impl Default for ForwardConfig {
    fn default() -> Self {
        ForwardConfig {
            link: Duration::from_micros(10),
            ip: Duration::from_micros(20),
            ipintrq: 50,
            output_queue: 50,
            cpu: None,
            user: None,
        }
    }
}

/// What a forwarder did.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Forwarded {
    /// Datagrams taken off the input sockets.
    pub received: u64,
    /// Datagrams sent on.
    pub forwarded: u64,
    /// Datagrams whose first bytes a monitor kept.
    pub captured: u64,
    /// Garbage: datagrams without [`MAGIC`], dropped after the link-level work.
    pub drops_invalid: u64,
    /// Dropped at the `ipintrq` (baseline).
    pub drops_ipintrq: u64,
    /// Dropped at the user-level stage's full queue.
    pub drops_stage: u64,
    /// Dropped at the output queue (engine), or refused by the kernel when sent on.
    pub drops_output: u64,
    /// Dropped by the kernel at the input sockets (`SO_RXQ_OVFL`).
    pub drops_socket: u64,
    /// Wake-ups: the engine's `epoll` notifications, or the baseline's blocking receives that
    /// returned.
    pub wakeups: u64,
    /// Whether the forwarder's threads got their real-time priorities.
    pub realtime: bool,
}

/// Busy-wait for `d` (simulated protocol work).
fn spin(d: Duration) {
    let end = Instant::now() + d;
    while Instant::now() < end {
        std::hint::spin_loop();
    }
}

/// Whether `p` is a datagram to forward.
fn well_formed(p: &[u8]) -> bool {
    p.starts_with(&MAGIC)
}

/// Forward from each of `inputs` to `to` through `output` until `stop` is set.
pub fn forward(
    inputs: Vec<UdpLink>,
    output: UdpLink,
    to: SocketAddr,
    design: Design,
    cfg: ForwardConfig,
    stop: Arc<AtomicBool>,
) -> io::Result<Forwarded> {
    if inputs.is_empty() {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            "a forwarder needs at least one input",
        ));
    }
    match design {
        Design::Engine(pc) => forward_engine(inputs, output, to, pc, cfg, &stop),
        Design::Baseline => forward_baseline(inputs, output, to, cfg, stop),
    }
}

fn forward_engine(
    mut inputs: Vec<UdpLink>,
    mut output: UdpLink,
    to: SocketAddr,
    pc: PollConfig,
    cfg: ForwardConfig,
    stop: &AtomicBool,
) -> io::Result<Forwarded> {
    let mut f = Forwarded::default();
    if let Some(cpu) = cfg.cpu {
        let _ = sys::pin_to(cpu);
    }
    f.realtime = sys::realtime(50).is_ok();
    let mut engine = Engine::new(pc)?;
    let mut rx = Vec::new();
    for input in &mut inputs {
        input.set_drop_counting(true)?;
        rx.push(engine.add_receive(input)?);
    }
    let tx = engine.add_transmit();
    let stage = match cfg.user {
        Some(u) => Some(Stage::start(u, cfg.cpu, Handoff::Engine)?),
        None => None,
    };
    // The stage's signal is a receive source: screened packets handed back, feedback news.
    let back = match stage.as_ref().and_then(Stage::signal) {
        Some(signal) => Some(engine.add_receive(signal)?),
        None => None,
    };
    let feedback = match (&stage, cfg.user) {
        (Some(s), Some(u)) if s.feedback() => Some(engine.add_queue(u.marks())?),
        _ => None,
    };
    let mut batch = RecvBatch::new(MAX_BATCH, 2048);
    // Per input: datagrams received but not yet handled (input inhibited mid-batch).
    let mut pending: Vec<VecDeque<Vec<u8>>> = vec![VecDeque::new(); inputs.len()];
    let mut outq: VecDeque<Vec<u8>> = VecDeque::new();
    // Output of a packet handled to completion: an idle transmitter is started at once, as
    // 4.2BSD's `ip_output` starts an inactive interface, so the first packet of a burst leaves
    // before the rest are received (seed §8.2). The transmitter then counts as active until
    // the transmit source has had its turn (the transmit interrupt); what comes meanwhile
    // queues, and the transmit source sends the queue in batches. Returns whether the transmit
    // source has work.
    let mut active = false;
    let output_or_queue = |out: &mut UdpLink,
                           outq: &mut VecDeque<Vec<u8>>,
                           active: &mut bool,
                           f: &mut Forwarded,
                           p: Vec<u8>| {
        if !*active {
            match out.send_batch_to(&[&p], to) {
                Ok(1) => f.forwarded += 1,
                _ => f.drops_output += 1,
            }
            *active = true;
            true
        } else if outq.len() < cfg.output_queue {
            outq.push_back(p);
            true
        } else {
            f.drops_output += 1;
            false
        }
    };
    while !stop.load(Ordering::Relaxed) {
        let until = Some(Instant::now() + Duration::from_millis(20));
        engine.run_until(until, |ctl, s, quota| {
            if let Some(i) = rx.iter().position(|&r| r == s) {
                let (input, pending) = (&mut inputs[i], &mut pending[i]);
                let (mut handled, mut empty) = (0, false);
                while handled < quota && ctl.input_allowed() {
                    if pending.is_empty() {
                        // No more than the quota leaves the socket: the rest waits there.
                        let want = (quota - handled).min(MAX_BATCH);
                        if input.try_recv_some(&mut batch, want)? == 0 {
                            empty = true;
                            break;
                        }
                        pending.extend(batch.iter().map(<[u8]>::to_vec));
                    }
                    let Some(p) = pending.pop_front() else {
                        break;
                    };
                    handled += 1;
                    f.received += 1;
                    spin(cfg.link);
                    if !well_formed(&p) {
                        f.drops_invalid += 1;
                        continue;
                    }
                    spin(cfg.ip);
                    match &stage {
                        None => {
                            if output_or_queue(&mut output, &mut outq, &mut active, &mut f, p) {
                                ctl.wake(tx);
                            }
                        }
                        Some(st) => match st.offer(p) {
                            Some(len) => {
                                if let Some(q) = feedback {
                                    ctl.queue_len(q, len);
                                }
                            }
                            None => f.drops_stage += 1,
                        },
                    }
                }
                Ok(Served {
                    handled,
                    drained: empty && pending.is_empty(),
                })
            } else if Some(s) == back {
                let Some(st) = &stage else {
                    return Ok(Served::default());
                };
                // Clear first: anything handed back after this signals again.
                st.clear_signal();
                if let Some(q) = feedback {
                    ctl.queue_len(q, st.len());
                }
                let mut handled = 0;
                while handled < quota {
                    let Some(p) = st.take_back() else {
                        break;
                    };
                    handled += 1;
                    if output_or_queue(&mut output, &mut outq, &mut active, &mut f, p) {
                        ctl.wake(tx);
                    }
                }
                Ok(Served {
                    handled,
                    drained: handled < quota,
                })
            } else {
                let n = outq.len().min(quota).min(MAX_BATCH);
                let views: Vec<&[u8]> = outq.iter().take(n).map(Vec::as_slice).collect();
                // A blocking send stops only at an error: what it did not take is dropped.
                let k = output.send_batch_to(&views, to).unwrap_or(0);
                f.forwarded += k as u64;
                f.drops_output += (n - k.min(n)) as u64;
                outq.drain(..n);
                active = !outq.is_empty();
                Ok(Served {
                    handled: n,
                    drained: outq.is_empty(),
                })
            }
        })?;
    }
    let _ = sys::ordinary();
    f.wakeups = engine.stats().notifications;
    f.drops_socket = inputs.iter().map(|i| i.stats().kernel_drops).sum();
    if let Some(st) = stage {
        f.captured = st.finish()?.captured;
    }
    Ok(f)
}

/// The baseline's `ipintrq`.
struct IpIntrQ {
    q: Mutex<VecDeque<Vec<u8>>>,
    ready: Condvar,
}

/// What one of the baseline's receive threads counted.
#[derive(Default)]
struct ReceiveCounts {
    received: u64,
    invalid: u64,
    drops_ipintrq: u64,
    wakeups: u64,
    drops_socket: u64,
    realtime: bool,
}

/// The baseline's receive thread for one interface: the device interrupt, at the top priority.
fn receive_thread(
    mut input: UdpLink,
    ipintrq: &IpIntrQ,
    cfg: ForwardConfig,
    stop: &AtomicBool,
) -> io::Result<ReceiveCounts> {
    if let Some(cpu) = cfg.cpu {
        let _ = sys::pin_to(cpu);
    }
    input.set_drop_counting(true)?;
    let mut c = ReceiveCounts {
        realtime: sys::realtime(50).is_ok(),
        ..ReceiveCounts::default()
    };
    let mut batch = RecvBatch::new(1, 2048);
    while !stop.load(Ordering::Relaxed) {
        if input.recv_timeout(&mut batch, Some(Duration::from_millis(10)))? == 0 {
            continue;
        }
        c.wakeups += 1;
        let Some(p) = batch.get(0) else {
            continue;
        };
        c.received += 1;
        spin(cfg.link);
        if !well_formed(p) {
            c.invalid += 1;
            continue;
        }
        let Ok(mut q) = ipintrq.q.lock() else {
            break;
        };
        if q.len() < cfg.ipintrq {
            q.push_back(p.to_vec());
            ipintrq.ready.notify_one();
        } else {
            c.drops_ipintrq += 1;
        }
    }
    let _ = sys::ordinary();
    c.drops_socket = input.stats().kernel_drops;
    Ok(c)
}

/// The baseline's protocol thread: the software interrupt, below the receive threads. It
/// forwards through `output`, or queues for the stage. Returns (forwarded, dropped at the
/// stage, real-time).
fn protocol_thread(
    mut output: Option<(UdpLink, SocketAddr)>,
    stage: Option<&Stage>,
    ipintrq: &IpIntrQ,
    cfg: ForwardConfig,
    stop: &AtomicBool,
) -> (u64, u64, bool) {
    if let Some(cpu) = cfg.cpu {
        let _ = sys::pin_to(cpu);
    }
    let rt = sys::realtime(40).is_ok();
    let (mut forwarded, mut drops_stage) = (0, 0);
    loop {
        let p = {
            let Ok(mut q) = ipintrq.q.lock() else {
                break;
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
                    Err(_) => break None,
                };
            }
        };
        let Some(p) = p else {
            break;
        };
        spin(cfg.ip);
        if let Some(st) = stage {
            if st.offer(p).is_none() {
                drops_stage += 1;
            }
        } else if let Some((out, to)) = &mut output {
            if out.send_batch_to(&[&p], *to).is_ok() {
                forwarded += 1;
            }
        }
    }
    let _ = sys::ordinary();
    (forwarded, drops_stage, rt)
}

fn forward_baseline(
    inputs: Vec<UdpLink>,
    output: UdpLink,
    to: SocketAddr,
    cfg: ForwardConfig,
    stop: Arc<AtomicBool>,
) -> io::Result<Forwarded> {
    let ipintrq = IpIntrQ {
        q: Mutex::new(VecDeque::new()),
        ready: Condvar::new(),
    };
    // With a stage, screend sends what it passes itself; the protocol thread only queues.
    let (stage, output) = match cfg.user {
        Some(u) => {
            let handoff = match u.kind {
                StageKind::Screend => Handoff::Send(Box::new(output), to),
                StageKind::Monitor => Handoff::Nowhere,
            };
            (Some(Stage::start(u, cfg.cpu, handoff)?), None)
        }
        None => (None, Some((output, to))),
    };
    let (receivers, protocol) = std::thread::scope(|scope| {
        let receivers: Vec<_> = inputs
            .into_iter()
            .map(|input| {
                let (q, stop) = (&ipintrq, &*stop);
                std::thread::Builder::new()
                    .name("bsd-rx".into())
                    .spawn_scoped(scope, move || receive_thread(input, q, cfg, stop))
            })
            .collect();
        let protocol = std::thread::Builder::new()
            .name("bsd-ipintr".into())
            .spawn_scoped(scope, || {
                protocol_thread(output, stage.as_ref(), &ipintrq, cfg, &stop)
            });
        let receivers: Vec<_> = receivers.into_iter().map(|r| r.map(|h| h.join())).collect();
        // The protocol thread ends when the receive threads have stopped and the queue is
        // empty: wake it for the last time.
        ipintrq.ready.notify_all();
        (receivers, protocol.map(|h| h.join()))
    });
    let mut f = Forwarded {
        realtime: true,
        ..Forwarded::default()
    };
    for r in receivers {
        let c = r?.map_err(|_| io::Error::other("a receive thread panicked"))??;
        f.received += c.received;
        f.drops_invalid += c.invalid;
        f.drops_ipintrq += c.drops_ipintrq;
        f.wakeups += c.wakeups;
        f.drops_socket += c.drops_socket;
        f.realtime &= c.realtime;
    }
    let (forwarded, drops_stage, rt) =
        protocol?.map_err(|_| io::Error::other("the protocol thread panicked"))?;
    f.forwarded = forwarded;
    f.drops_stage = drops_stage;
    f.realtime &= rt;
    if let Some(st) = stage {
        let c = st.finish()?;
        f.forwarded += c.sent;
        f.captured = c.captured;
    }
    Ok(f)
}

/// CPU time this process has used so far, user plus system (`getrusage`).
pub fn process_cpu_time() -> io::Result<Duration> {
    sys::process_cpu_time()
}

/// CPU time (user plus system) of the child processes that have ended and been waited for,
/// so far (`getrusage(RUSAGE_CHILDREN)`): the difference across one child's wait is its CPU.
pub fn children_cpu_time() -> io::Result<Duration> {
    sys::children_cpu_time()
}

/// Run the calling thread (and the processes it starts from now on) only on these CPUs; an
/// empty list means all of them.
pub fn pin_current_thread(cpus: &[usize]) -> io::Result<()> {
    sys::pin_to_set(cpus)
}
