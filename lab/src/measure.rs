//! Measurements shared by `phyllo-lab rtt/stream` and the report's experiments: round trips and
//! one-way streams of a phyllo stack, over the in-memory link (pure processing cost) or UDP
//! loopback (two threads, each end its own socket and connection).

use crate::rawudp::Summary;
use anyhow::{anyhow, bail, Context, Result};
use phyllo::conn::BuildError;
use phyllo::layers::{Checksum, Frag, Seal, Window};
use phyllo::testing::memlink::MemLink;
use phyllo::testing::Pair;
use phyllo::FastPathCheck;
use phyllo::LayerSet;
use phyllo::{Config, Connection, Msg, Stats};
use phyllo_net::driver::UdpDriver;
use phyllo_udp::udp::UdpLink;
use std::sync::atomic::{AtomicBool, AtomicU8, Ordering};
use std::sync::{Arc, Barrier};
use std::thread;
use std::time::{Duration, Instant};

/// Which link carries the datagrams.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum LinkKind {
    /// In-process, lossless, no delay: protocol processing cost only.
    Mem,
    /// UDP over 127.0.0.1, one thread per end.
    Udp,
}

/// What a round-trip run measured.
pub struct RttRun {
    /// Nanoseconds per round trip, in order.
    pub samples_ns: Vec<u64>,
    /// Counters of the initiating end.
    pub stats: Stats,
    /// Its accelerator's counters, if on.
    pub accel: Option<phyllo::accel::AccelStats>,
    /// Wall-clock time from the start of the first measured round trip to the end of the
    /// last: `samples_ns.len()` over it is the achieved round-trip rate.
    pub span: Duration,
}

impl RttRun {
    /// Round trips per second achieved over the measured rounds.
    pub fn achieved_rate(&self) -> f64 {
        self.samples_ns.len() as f64 / self.span.as_secs_f64().max(1e-9)
    }
}

/// What a stream run measured.
pub struct StreamRun {
    /// Messages delivered.
    pub delivered: u64,
    /// Seconds from the first send to the last delivery.
    pub seconds: f64,
    /// Counters of the sending end.
    pub sender: Stats,
    /// Counters of the receiving end.
    pub receiver: Stats,
    /// The sender's accelerator counters, if on.
    pub sender_accel: Option<phyllo::accel::AccelStats>,
    /// The receiver's accelerator counters, if on.
    pub receiver_accel: Option<phyllo::accel::AccelStats>,
}

impl StreamRun {
    /// Messages delivered per second.
    pub fn msgs_per_s(&self) -> f64 {
        self.delivered as f64 / self.seconds.max(1e-9)
    }
}

/// The fast path's check against the layered path, as the measured connections run it (see
/// [`set_fast_path_check`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum CheckArg {
    /// [`FastPathCheck::Off`]: the bare fast path.
    Off,
    /// [`FastPathCheck::Sampled`]: what release builds run.
    Sampled,
    /// [`FastPathCheck::Every`]: a layered pass per message (debug builds' default).
    Every,
}

impl From<CheckArg> for FastPathCheck {
    fn from(c: CheckArg) -> FastPathCheck {
        match c {
            CheckArg::Off => FastPathCheck::Off,
            CheckArg::Sampled => FastPathCheck::Sampled,
            CheckArg::Every => FastPathCheck::Every,
        }
    }
}

/// The check of this process's measured connections ([`CheckArg`] as a number).
static FAST_PATH_CHECK: AtomicU8 = AtomicU8::new(CheckArg::Sampled as u8);

/// Set the fast-path check every pair of configurations [`configs`] makes from now on runs.
pub fn set_fast_path_check(check: CheckArg) {
    FAST_PATH_CHECK.store(check as u8, Ordering::Relaxed);
}

/// The fast-path check [`configs`] puts in its configurations.
pub fn fast_path_check() -> FastPathCheck {
    let all = [CheckArg::Off, CheckArg::Sampled, CheckArg::Every];
    let stored = FAST_PATH_CHECK.load(Ordering::Relaxed) as usize;
    all.get(stored).copied().unwrap_or(CheckArg::Sampled).into()
}

/// Both ends' configurations (initiator, responder), accelerated or not, keyed by
/// [`Config::pair`]: fresh keys for every measured pair, each configuration for one
/// connection. The fast path's check against the layered path is [`FastPathCheck::Sampled`]
/// unless [`set_fast_path_check`] says otherwise, in every build: the figures are what users'
/// release builds get (the sampled checks included, about one layered pass in 128
/// operations), not a bare fast path no one runs, and not debug builds' default of checking
/// every message, which would measure the check instead of the protocol.
/// `--fast-path-check off` measures the bare fast path.
pub fn configs(accel: bool) -> Result<(Config, Config), BuildError> {
    let (mut a, mut b) = Config::pair(accel)?;
    a.fast_path_check = fast_path_check();
    b.fast_path_check = fast_path_check();
    Ok((a, b))
}

/// A pair over a perfect in-memory link.
pub fn mem_pair(spec: &str, accel: bool) -> Result<Pair> {
    let (ca, cb) = configs(accel)?;
    Ok(Pair::new(
        Connection::from_spec(spec, ca)?,
        Connection::from_spec(spec, cb)?,
        MemLink::perfect(),
    ))
}

fn payload(size: usize) -> Vec<u8> {
    (0..size).map(|i| i as u8).collect()
}

/// Ping-pong over the in-memory link: each round trip is A→B, B echoes, B→A, timed with the
/// wall clock, so it is the processing cost of both ends, both directions.
pub fn rtt_mem(spec: &str, accel: bool, size: usize, rounds: usize) -> Result<RttRun> {
    rtt_mem_on(mem_pair(spec, accel)?, size, rounds)
}

/// [`rtt_mem`] on a pair of any stack.
pub fn rtt_mem_on<S: LayerSet>(mut pair: Pair<S>, size: usize, rounds: usize) -> Result<RttRun> {
    let data = payload(size);
    let mut samples = Vec::with_capacity(rounds);
    let warmup = (rounds / 10).min(1000);
    let mut first = None;
    for r in 0..rounds + warmup {
        let t0 = Instant::now();
        if r == warmup {
            first = Some(t0);
        }
        pair.a.send(pair.now, &data)?;
        let echo = loop {
            if let Some(m) = pair.b.poll_delivery() {
                break m;
            }
            if !pair.step() {
                bail!("round {r}: the message was not delivered");
            }
        };
        pair.b.send(pair.now, echo.data())?;
        pair.b.recycle(echo);
        let back = loop {
            if let Some(m) = pair.a.poll_delivery() {
                break m;
            }
            if !pair.step() {
                bail!("round {r}: the echo was not delivered");
            }
        };
        pair.a.recycle(back);
        if r >= warmup {
            samples.push(t0.elapsed().as_nanos() as u64);
        }
    }
    Ok(RttRun {
        samples_ns: samples,
        stats: pair.a.stats().clone(),
        accel: pair.a.accel_stats().cloned(),
        span: first.map_or(Duration::ZERO, |t| t.elapsed()),
    })
}

/// Two ends of `spec` over a connected pair of loopback sockets, sharing one clock epoch;
/// `big_buffers` asks for 4 MiB socket buffers (streaming).
fn udp_pair(spec: &str, accel: bool, big_buffers: bool) -> Result<(UdpDriver, UdpDriver)> {
    let (la, lb) = UdpLink::loopback_pair().context("binding UDP sockets on 127.0.0.1")?;
    if big_buffers {
        la.set_send_buffer_size(4 << 20).ok();
        lb.set_recv_buffer_size(4 << 20).ok();
    }
    let epoch = Instant::now();
    let (ca, cb) = configs(accel)?;
    let end = |cfg, link| -> Result<UdpDriver> {
        Ok(UdpDriver::new(
            Connection::from_spec(spec, cfg)?,
            link,
            epoch,
        ))
    };
    Ok((end(ca, la)?, end(cb, lb)?))
}

/// Ping-pong over UDP loopback; both ends busy-poll (or block in the kernel).
pub fn rtt_udp(spec: &str, accel: bool, size: usize, rounds: usize, busy: bool) -> Result<RttRun> {
    rtt_udp_paced(spec, accel, size, rounds, busy, None)
}

/// [`rtt_udp`] with round trips started at most every `pace` (seed 004 Figure 5: latency
/// against offered round trips per second); between rounds the initiator keeps polling, so
/// deferred post-processing runs in the idle time.
pub fn rtt_udp_paced(
    spec: &str,
    accel: bool,
    size: usize,
    rounds: usize,
    busy: bool,
    pace: Option<Duration>,
) -> Result<RttRun> {
    let (a, b) = udp_pair(spec, accel, false)?;
    rtt_udp_on(a, b, size, rounds, busy, pace)
}

/// Two ends of any stack over a connected pair of loopback sockets, sharing one clock epoch.
pub fn udp_pair_of<S: LayerSet>(
    a: Connection<S>,
    b: Connection<S>,
) -> Result<(UdpDriver<S>, UdpDriver<S>)> {
    let (la, lb) = UdpLink::loopback_pair().context("binding UDP sockets on 127.0.0.1")?;
    let epoch = Instant::now();
    Ok((UdpDriver::new(a, la, epoch), UdpDriver::new(b, lb, epoch)))
}

/// [`rtt_udp_paced`] on two ends of any stack (`a` initiates, `b` echoes on a thread).
pub fn rtt_udp_on<S: LayerSet + Send + 'static>(
    mut a: UdpDriver<S>,
    mut b: UdpDriver<S>,
    size: usize,
    rounds: usize,
    busy: bool,
    pace: Option<Duration>,
) -> Result<RttRun> {
    let stop = Arc::new(AtomicBool::new(false));
    let stop_b = stop.clone();
    let deadline = Instant::now() + Duration::from_secs(120);
    let echo = thread::spawn(move || -> Result<()> {
        while !stop_b.load(Ordering::Relaxed) && Instant::now() < deadline {
            let until = Instant::now() + Duration::from_millis(20);
            let got = if busy {
                b.recv_busy(until)?
            } else {
                b.recv_blocking(until)?
            };
            if let Some(m) = got {
                // Echo the delivered buffer itself, as the raw UDP echo sends from the buffer
                // it received into.
                echo_msg(&mut b, m)?;
            }
        }
        // Let the last acks out.
        b.tick()?;
        Ok(())
    });
    let data = payload(size);
    let warmup = (rounds / 10).min(1000);
    let mut samples = Vec::with_capacity(rounds);
    let mut result = Ok(());
    let mut next_start = Instant::now();
    let mut first = None;
    let mut last = None;
    for r in 0..rounds + warmup {
        if let Some(p) = pace {
            while Instant::now() < next_start {
                a.poll()?;
            }
            // Behind schedule, the next rounds start at once until the schedule is met again
            // (a hiccup of the shared machine is made up for); beyond what the stack sustains
            // they run back to back, and the shortfall shows as the achieved rate.
            next_start += p;
        }
        if r == warmup {
            first = Some(Instant::now());
        }
        // The message is composed in a pooled buffer before the clock starts, as the raw
        // UDP client's is in its own buffer, and the connection is ready to take it.
        let mut m = a.conn.alloc();
        m.extend_from_slice(&data);
        if let Err(e) = wait_until_sendable(&mut a) {
            result = Err(e);
            break;
        }
        let t0 = Instant::now();
        // The time just read serves the send too (as an event loop passes its time along).
        if let Err(e) = a.send_msg_at(a.time_of(t0), m) {
            result = Err(e.into());
            break;
        }
        let until = t0 + Duration::from_secs(5);
        let got = if busy {
            a.recv_busy(until)
        } else {
            a.recv_blocking(until)
        };
        match got {
            Ok(Some(m)) => a.conn.recycle(m),
            Ok(None) => {
                result = Err(anyhow!("round {r}: no echo within 5 s"));
                break;
            }
            Err(e) => {
                result = Err(e.into());
                break;
            }
        }
        if r >= warmup {
            samples.push(t0.elapsed().as_nanos() as u64);
            last = Some(Instant::now());
        }
        if Instant::now() > deadline {
            break;
        }
    }
    stop.store(true, Ordering::Relaxed);
    echo.join()
        .map_err(|_| anyhow!("the echo thread panicked"))??;
    result?;
    Ok(RttRun {
        samples_ns: samples,
        stats: a.conn.stats().clone(),
        accel: a.conn.accel_stats().cloned(),
        span: match (first, last) {
            (Some(f), Some(l)) => l - f,
            _ => Duration::ZERO,
        },
    })
}

/// Send `m` back without copying it, once the connection can take it.
fn echo_msg<S: phyllo::LayerSet>(d: &mut UdpDriver<S>, m: Msg) -> Result<()> {
    wait_until_sendable(d)?;
    // The time the receive used (~6 µs old at most) serves the reply.
    let now = d.recent();
    d.send_msg_at(now, m)?;
    Ok(())
}

/// Poll until the connection can take a message (5 s at most).
fn wait_until_sendable<S: phyllo::LayerSet>(d: &mut UdpDriver<S>) -> Result<()> {
    if !d.conn.can_send() {
        let deadline = Instant::now() + Duration::from_secs(5);
        while !d.conn.can_send() {
            if Instant::now() >= deadline {
                bail!("the connection took no message for 5 s");
            }
            d.poll()?;
        }
    }
    Ok(())
}

/// One-way stream over the in-memory link: `count` messages of `size` bytes sent as fast as
/// the stack accepts them; both ends' processing on one thread.
pub fn stream_mem(spec: &str, accel: bool, size: usize, count: u64) -> Result<StreamRun> {
    let mut pair = mem_pair(spec, accel)?;
    let data = payload(size);
    let t0 = Instant::now();
    let mut sent = 0u64;
    let mut delivered = 0u64;
    while delivered < count {
        while sent < count && pair.a.can_send() {
            pair.a.send(pair.now, &data)?;
            sent += 1;
        }
        let more = pair.step();
        while let Some(m) = pair.b.poll_delivery() {
            delivered += 1;
            pair.b.recycle(m);
        }
        if !more && sent == count && delivered < count {
            bail!("stream stalled after {delivered} of {count} messages");
        }
    }
    Ok(StreamRun {
        delivered,
        seconds: t0.elapsed().as_secs_f64(),
        sender: pair.a.stats().clone(),
        receiver: pair.b.stats().clone(),
        sender_accel: pair.a.accel_stats().cloned(),
        receiver_accel: pair.b.accel_stats().cloned(),
    })
}

/// One-way stream over UDP loopback: a sender thread and a receiver thread, both busy-polling.
/// Bounded by `limit`: what was delivered by then counts.
pub fn stream_udp(
    spec: &str,
    accel: bool,
    size: usize,
    count: u64,
    limit: Duration,
) -> Result<StreamRun> {
    let (mut a, mut b) = udp_pair(spec, accel, true)?;
    let start = Arc::new(Barrier::new(2));
    let done = Arc::new(AtomicBool::new(false));
    let deadline = Instant::now() + limit;
    let (start_b, done_b) = (start.clone(), done.clone());
    type Received = (u64, Instant, Stats, Option<phyllo::accel::AccelStats>);
    let receiver = thread::spawn(move || -> Result<Received> {
        start_b.wait();
        let mut delivered = 0u64;
        let mut last = Instant::now();
        while delivered < count && Instant::now() < deadline {
            b.poll()?;
            // Lent, not handed over: a packed message is read where it arrived. The clock is
            // read once per batch, not per message.
            let before = delivered;
            while b.conn.poll_delivery_with(|_| ()).is_some() {
                delivered += 1;
            }
            if delivered > before {
                last = Instant::now();
            }
        }
        done_b.store(true, Ordering::Relaxed);
        // Acknowledge the tail so the sender can finish cleanly.
        b.tick()?;
        Ok((
            delivered,
            last,
            b.conn.stats().clone(),
            b.conn.accel_stats().cloned(),
        ))
    });
    let data = payload(size);
    start.wait();
    let t0 = Instant::now();
    let mut sent = 0u64;
    while !done.load(Ordering::Relaxed) && Instant::now() < deadline {
        // A burst of sends at one instant: one clock read for all of them (a read costs
        // ~25 ns, a quarter of a message's budget at 10 M msgs/s).
        let now = a.now();
        while sent < count && a.conn.can_send() {
            a.conn.send(now, &data)?;
            sent += 1;
        }
        a.poll()?;
    }
    let (delivered, last, receiver_stats, receiver_accel) = receiver
        .join()
        .map_err(|_| anyhow!("the receiver thread panicked"))??;
    Ok(StreamRun {
        delivered,
        seconds: last.duration_since(t0).as_secs_f64(),
        sender: a.conn.stats().clone(),
        receiver: receiver_stats,
        sender_accel: a.conn.accel_stats().cloned(),
        receiver_accel,
    })
}

/// Send + deliver cost per message over the lossless in-memory link, in nanoseconds: `count`
/// messages, each sent by A and delivered at B (acks included), on one thread.
pub fn ns_per_msg<S: LayerSet>(mut pair: Pair<S>, size: usize, count: u64) -> Result<f64> {
    let data = payload(size);
    let one = |pair: &mut Pair<S>| -> Result<()> {
        pair.a.send(pair.now, &data)?;
        while pair.step() {}
        while let Some(m) = pair.b.poll_delivery() {
            pair.b.recycle(m);
        }
        Ok(())
    };
    for _ in 0..count / 10 {
        one(&mut pair)?;
    }
    let t0 = Instant::now();
    for _ in 0..count {
        one(&mut pair)?;
    }
    let delivered = pair.b.stats().delivered;
    if delivered != count + count / 10 {
        bail!("{delivered} of {} messages delivered", count + count / 10);
    }
    Ok(t0.elapsed().as_nanos() as f64 / count as f64)
}

/// [`ns_per_msg`] for the dynamic stack built from `spec`.
pub fn stack_ns_per_msg(spec: &str, size: usize, count: u64) -> Result<f64> {
    ns_per_msg(Pair::from_spec(spec)?, size, count)
}

/// The static form of `frag(1400):window(16):checksum:seal`.
pub type Static4 = (Frag, (Window, (Checksum, (Seal, ()))));

/// A pair of static 4-layer stacks over a perfect in-memory link.
pub fn static4_pair() -> Result<Pair<Static4>> {
    let mk = |cfg| {
        Connection::new(
            phyllo::stack!(
                Frag::new(1400),
                Window::new(16),
                Checksum::new(),
                Seal::new()
            ),
            cfg,
        )
    };
    let (ca, cb) = configs(false)?;
    Ok(Pair::new(mk(ca)?, mk(cb)?, MemLink::perfect()))
}

/// Critical-path costs per message over the in-memory link, in nanoseconds (medians):
/// application send until the datagram is handed to the link, and datagram from the link
/// until the message is with the application. Deferred post-processing runs untimed where
/// the product's drivers run it ([`phyllo_net::SessionSocket::pump`]): after the datagram
/// left, so a node that delivered a message and answered it post-processes both at once.
/// Without the accelerator there is none to defer, so the layered path's whole cost is on the
/// critical path. The clock-read overhead, measured the same way, is subtracted.
///
/// The application hands its message in a pooled buffer it filled
/// ([`Connection::send_msg`](phyllo::Connection::send_msg)), and the link hands the datagram
/// in one ([`Connection::handle_msg`](phyllo::Connection::handle_msg)): filling those buffers
/// is the application's and the link's work (as the kernel's copy is in a `recv`), the same
/// with and without the accelerator, so the path starts at the protocol.
pub struct CriticalPath {
    /// Median send critical path.
    pub send_ns: f64,
    /// Median delivery critical path.
    pub deliver_ns: f64,
}

/// The median of `samples` (NaN if there are none), as [`Summary`] reports it.
pub fn median(samples: &[u64]) -> f64 {
    Summary::from_samples(samples).map_or(f64::NAN, |s| s.median_ns as f64)
}

/// Instructions per message on the critical path, counted by callgrind: the same loop as
/// [`critical_path`], run as `phyllo-lab critical-path` by `exe` under
/// `valgrind --tool=callgrind --toggle-collect=phyllo_cp_send` (and `_deliver`). Instruction
/// counts do not depend on the machine's load, unlike the ~100 ns wall-clock medians (±20 ns
/// between runs here). Only the timed rounds go through those functions, so the warm-up (a
/// connection's start: its first checked operations, cold state) is left out, as it is
/// left out of the times.
pub fn critical_path_instructions(
    exe: &std::path::Path,
    spec: &str,
    accel: bool,
    rounds: usize,
) -> Result<CriticalPathInstructions> {
    // One count per function asked for, in order.
    let n = instructions_per_call(
        exe,
        spec,
        accel,
        rounds,
        &["phyllo_cp_send", "phyllo_cp_deliver", "phyllo_cp_post"],
        2 * rounds,
    )?;
    Ok(CriticalPathInstructions {
        send: n[0],
        deliver: n[1],
        post: n[2],
    })
}

/// `phyllo-lab critical-path` for `spec` as `exe` runs it: what callgrind counts in.
fn critical_path_workload(
    exe: &std::path::Path,
    spec: &str,
    accel: bool,
    rounds: usize,
) -> phyllo_analyze::capture::Workload {
    let mut args = vec![
        "critical-path".to_string(),
        "--stack".into(),
        spec.into(),
        "--rounds".into(),
        rounds.to_string(),
    ];
    if accel {
        args.push("--accel".into());
    }
    phyllo_analyze::capture::Workload {
        program: exe.to_path_buf(),
        args,
    }
}

/// Instructions per message inside each of `funcs` (callgrind `--toggle-collect` patterns,
/// `*` matching anything), over the same loop as [`critical_path_instructions`]: a layer's
/// phases, say, wherever they run. Every round counts, the warm-up's too: a layer's phases
/// run in all of them.
pub fn function_instructions(
    exe: &std::path::Path,
    spec: &str,
    accel: bool,
    rounds: usize,
    funcs: &[&str],
) -> Result<Vec<f64>> {
    let calls = 2 * critical_path_rounds(rounds);
    instructions_per_call(exe, spec, accel, rounds, funcs, calls)
}

/// Instructions inside each of `funcs` over the critical-path loop, divided by `calls`.
fn instructions_per_call(
    exe: &std::path::Path,
    spec: &str,
    accel: bool,
    rounds: usize,
    funcs: &[&str],
    calls: usize,
) -> Result<Vec<f64>> {
    use phyllo_analyze::capture::callgrind;
    let w = critical_path_workload(exe, spec, accel, rounds);
    let calls = calls as f64;
    funcs
        .iter()
        .map(|f| Ok(callgrind(&w, f, None)?.get("Ir") as f64 / calls))
        .collect()
}

/// Instructions per message on the send and delivery critical paths, and off them.
#[derive(Clone, Copy, Debug)]
pub struct CriticalPathInstructions {
    /// Per send (`phyllo_cp_send`).
    pub send: f64,
    /// Per delivery (`phyllo_cp_deliver`).
    pub deliver: f64,
    /// Deferred post-processing per message (`phyllo_cp_post`): none on the layered path,
    /// whose post-phases run inside the send and the delivery.
    pub post: f64,
}

impl CriticalPathInstructions {
    /// Everything per message: both critical paths and the deferred work.
    pub fn total(&self) -> f64 {
        self.send + self.deliver + self.post
    }
}

/// The send critical path as one function, so callgrind's `--toggle-collect=phyllo_cp_send`
/// counts exactly its instructions.
#[inline(never)]
#[no_mangle]
pub fn phyllo_cp_send(c: &mut phyllo::DynConnection, now: phyllo::Time, m: Msg) -> Result<()> {
    c.send_msg(now, m)?;
    Ok(())
}

/// The delivery critical path as one function (`--toggle-collect=phyllo_cp_deliver`).
#[inline(never)]
#[no_mangle]
pub fn phyllo_cp_deliver(c: &mut phyllo::DynConnection, now: phyllo::Time, wire: Msg) {
    c.handle_msg(now, wire);
}

/// Deferred post-processing as one function (`--toggle-collect=phyllo_cp_post`): what the
/// accelerator does off the critical path, between messages. The layered path has none: its
/// post-phases run inside the send and the delivery.
#[inline(never)]
#[no_mangle]
pub fn phyllo_cp_post(c: &mut phyllo::DynConnection, now: phyllo::Time) {
    c.post_process(now);
}

/// Round trips [`critical_path`] runs for `rounds` timed ones: a 10 % warm-up first.
fn critical_path_rounds(rounds: usize) -> usize {
    rounds + rounds / 10
}

/// Measure [`CriticalPath`] for `spec`, ping-pong style so acknowledgements keep flowing.
pub fn critical_path(spec: &str, accel: bool, size: usize, rounds: usize) -> Result<CriticalPath> {
    let mut pair = mem_pair(spec, accel)?;
    let data = payload(size);
    let mut sends = Vec::with_capacity(rounds * 2);
    let mut delivers = Vec::with_capacity(rounds * 2);
    let mut clock = Vec::with_capacity(rounds);
    let mut wire = Vec::with_capacity(2048);
    for r in 0..critical_path_rounds(rounds) {
        // The warm-up (a connection's first operations: its first checked ones, cold state)
        // calls the connection directly, not through the counted functions: callgrind
        // counts the timed rounds. (Twins of those functions would be merged with them.)
        let timed = r >= rounds / 10;
        for dir in 0..2 {
            let (from, to) = if dir == 0 {
                (&mut pair.a, &mut pair.b)
            } else {
                (&mut pair.b, &mut pair.a)
            };
            let now = pair.now;
            let mut m = from.alloc();
            m.extend_from_slice(&data);
            let t0 = Instant::now();
            if timed {
                phyllo_cp_send(from, now, m)?;
            } else {
                from.send_msg(now, m)?;
            }
            let t1 = Instant::now();
            // The link borrows the datagram, as the UDP driver's does.
            wire.clear();
            from.transmit_with(1, |d| -> Result<usize> {
                d.iter().for_each(|x| wire.extend_from_slice(x.data()));
                Ok(d.len())
            })?;
            if wire.is_empty() {
                bail!("round {r}: nothing was sent");
            }
            // Anything else queued (acks) goes over untimed first.
            while let Some(x) = from.poll_transmit() {
                to.handle_datagram(now, x.data());
                from.recycle(x);
            }
            // The datagram left: the sender's deferred work (its send's, and the delivery's
            // it answered) runs now. The receiver's ran after its own last send; anything
            // the acknowledgements just left it runs before the timed delivery.
            if timed {
                phyllo_cp_post(from, now);
                phyllo_cp_post(to, now);
            } else {
                from.post_process(now);
                to.post_process(now);
            }
            let mut w = to.alloc();
            w.extend_from_slice(&wire);
            let t2 = Instant::now();
            if timed {
                phyllo_cp_deliver(to, now, w);
            } else {
                to.handle_msg(now, w);
            }
            let t3 = Instant::now();
            let Some(m) = to.poll_delivery() else {
                bail!("round {r}: nothing was delivered");
            };
            to.recycle(m);
            while let Some(x) = to.poll_transmit() {
                from.handle_datagram(now, x.data());
                to.recycle(x);
            }
            if timed {
                sends.push((t1 - t0).as_nanos() as u64);
                delivers.push((t3 - t2).as_nanos() as u64);
                let c0 = Instant::now();
                let c1 = Instant::now();
                clock.push((c1 - c0).as_nanos() as u64);
            }
        }
    }
    let overhead = median(&clock);
    Ok(CriticalPath {
        send_ns: (median(&sends) - overhead).max(0.0),
        deliver_ns: (median(&delivers) - overhead).max(0.0),
    })
}
