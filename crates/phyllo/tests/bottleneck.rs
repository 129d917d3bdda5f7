//! Transports on long, narrow, lossy paths, simulated: one flow or several sharing a
//! deterministic bottleneck (rate, FIFO tail-drop queue, delay, loss, jitter) on the virtual
//! clock ([`Dumbbell`], [`Bottleneck`]), so CI measures throughput, fairness, spurious
//! retransmissions, recovery from a blackout, receiver memory and exactly-once delivery
//! without network namespaces.
//!
//! Every test runs twice, layered and accelerated (`Config::pair(true)`); connections are
//! built from a spec:
//! `frag:window:seal` is the default stack (CUBIC, datagrams sized by the path), `window(cubic)`, `window(newreno)`
//! and `window(bbr)` name the controllers. Each test prints what it measured (run with
//! `--nocapture`) and its wall time, then asserts the goal.
//!
//! The paths are symmetric: each direction has the bottleneck's rate and queue and half the
//! round trip as delay (the reverse direction carries the acknowledgements). Goodput is the
//! bytes delivered to the receiving application per second of virtual time, never the bytes
//! on the link. The bulk sender's messages are 1400 bytes: one datagram each below `frag`.

use phyllo::faults::{Bottleneck, Faults};
use phyllo::layer::DropReason;
use phyllo::layers::window::DEFAULT_CEILING;
use phyllo::testing::memlink::{MemLink, Side};
use phyllo::testing::Dumbbell;
use phyllo::{Connection, Time};
use std::time::{Duration, Instant};

/// The default stack (CUBIC).
const DEFAULT: &str = phyllo::DEFAULT_STACK;

/// The stacks of each controller.
const CONTROLLERS: [&str; 3] = [
    "frag(1400):window(cubic):seal",
    "frag(1400):window(newreno):seal",
    "frag(1400):window(bbr):seal",
];

thread_local! {
    /// Whether this thread's test runs accelerated connections ([`both_modes`]).
    static ACCELERATE: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// Run `test` layered, then accelerated.
fn both_modes(test: fn()) {
    for accel in [false, true] {
        println!("-- {}", if accel { "accelerated" } else { "layered" });
        ACCELERATE.with(|a| a.set(accel));
        test();
    }
}

/// The bulk sender's message: one datagram below `frag(1400)`.
const MSG: usize = 1400;

/// The window layer's default ceiling of the receiver's out-of-order buffer (16 MiB).
const CEILING: u64 = DEFAULT_CEILING;

/// A path: a bottleneck of `mbit` megabits per second each way with a queue of `queue_rtts`
/// round trips of its rate (1.0: one bandwidth-delay product), `rtt` of propagation delay
/// in all, random `loss` each way, and order-keeping `jitter` each way.
#[derive(Clone, Copy, Debug)]
struct Path {
    mbit: f64,
    rtt: Duration,
    queue_rtts: f64,
    loss: f64,
    jitter: Duration,
    seed: u64,
}

impl Path {
    /// A clean path of `mbit` and `rtt_ms` with a queue of one bandwidth-delay product.
    fn clean(mbit: f64, rtt_ms: u64) -> Path {
        Path {
            mbit,
            rtt: Duration::from_millis(rtt_ms),
            queue_rtts: 1.0,
            loss: 0.0,
            jitter: Duration::ZERO,
            seed: 1,
        }
    }

    /// The bottleneck's rate, bytes per second.
    fn bytes_per_sec(&self) -> f64 {
        self.mbit * 1e6 / 8.0
    }

    fn faults(&self, loss: f64) -> Faults {
        Faults {
            loss,
            ..Faults::none(self.rtt / 2)
        }
    }

    fn link(&self) -> MemLink {
        let bottleneck = Bottleneck::new(
            self.bytes_per_sec() as u64,
            self.rtt.mul_f64(self.queue_rtts),
        );
        MemLink::new(self.faults(self.loss), self.seed)
            .with_bottleneck(Side::A, bottleneck.clone())
            .with_bottleneck(Side::B, bottleneck)
            .with_jitter(Side::A, self.jitter)
            .with_jitter(Side::B, self.jitter)
    }
}

fn secs(s: f64) -> Time {
    Time((s * 1e9) as u64)
}

fn mbit(bytes_per_sec: f64) -> f64 {
    bytes_per_sec * 8.0 / 1e6
}

/// Retransmissions `c` counted, all causes (every layer event named `retransmit.*`).
fn retransmissions(c: &Connection) -> u64 {
    c.stats()
        .layers
        .iter()
        .flat_map(|(_, l)| l.events.iter())
        .filter(|(name, _)| name.starts_with("retransmit."))
        .map(|(_, n)| n)
        .sum()
}

/// A dumbbell over `path` with one flow of `spec` per start time, each keyed from the
/// path's seed and its index (so a run replays).
fn dumbbell(path: &Path, spec: &str, starts: &[Time]) -> Dumbbell {
    let mut d = Dumbbell::new(path.link());
    for (i, &start) in starts.iter().enumerate() {
        d.add_spec(
            spec,
            ACCELERATE.with(|a| a.get()),
            start,
            path.seed << 8 | i as u64,
        )
        .unwrap_or_else(|e| panic!("`{spec}` builds: {e}"));
    }
    d
}

/// Every flow delivered its whole transfer exactly once, in order, intact.
fn assert_exactly_once(d: &Dumbbell, what: &str) {
    for (i, f) in d.flows.iter().enumerate() {
        let s = &f.stats;
        assert_eq!(
            Some(s.delivered_msgs),
            f.limit,
            "{what}: flow {i} delivered"
        );
        assert_eq!(s.sent_msgs, s.delivered_msgs, "{what}: flow {i}");
        assert_eq!(s.misordered, 0, "{what}: flow {i} out of order or twice");
        assert_eq!(s.corrupt, 0, "{what}: flow {i} altered");
        assert_eq!(s.next_expected, s.sent_msgs, "{what}: flow {i}");
    }
}

/// (a) One flow fills a clean long path: 100 Mbit/s, 50 ms round trip, a queue of one
/// bandwidth-delay product (625 kB). Goodput over the second half of a 10 s run (after slow
/// start and its first loss) is at least 90 % of the link's rate — with the default stack,
/// CUBIC and BBR; at least 70 % with NewReno.
///
/// Why NewReno's bar is lower: slow start overshoots the path by about a window before the
/// first loss is seen, and the queue stays full of that overshoot for most of the next round
/// trip. A datagram the window lets go in that time (a retransmission, once the losses
/// declared and the acknowledgements bring the bytes in flight under the halved window) is
/// dropped too, and since it was sent after the recovery began, RFC 9002 starts a second
/// recovery: the window is halved again, to half the path, and NewReno's one datagram per
/// round trip takes longer than the run to grow it back. Traced (the congestion events of a
/// failing run): a first recovery at 0.50 s for a datagram sent at 0.40 s (window 2.48 MB,
/// cut from 1.19 MB to 596 kB), then a second at 0.63 s for one sent at 0.507 s (cut to
/// 298 kB); 76 % of the path over 5–10 s. Whether a datagram meets the full queue depends on
/// the run's timing (the keys seed which messages the window holds back): it happened in 2
/// of 7 layered runs before acknowledgements covered receive batches and in 4 of 5 after;
/// the accelerated runs and CUBIC (cut to 0.7, then a curve back) did not show it. Sending at
/// the rate of deliveries during recovery (PRR, RFC 6937) would keep such a datagram out of
/// the queue; it is not built.
#[test]
fn one_flow_fills_a_long_fat_path() {
    both_modes(one_flow_fills_a_long_fat_path_in);
}

fn one_flow_fills_a_long_fat_path_in() {
    let wall = Instant::now();
    let path = Path::clean(100.0, 50);
    let mut failures = Vec::new();
    for spec in [DEFAULT].into_iter().chain(CONTROLLERS) {
        let mut d = dumbbell(&path, spec, &[Time::ZERO]);
        d.run_bulk(secs(10.0), MSG).expect("runs");
        let goodput = d.goodput(0, secs(5.0), secs(10.0));
        let whole = d.goodput(0, Time::ZERO, secs(10.0));
        let b = d.link.bottleneck(Side::A).expect("bottleneck");
        let f = &d.flows[0];
        println!(
            "(a) {spec}: goodput 5-10 s {:.1} Mbit/s ({:.1} % of {} Mbit/s), 0-10 s {:.1} \
             Mbit/s; queue drops {}, peak queue {} kB of {} kB; retransmissions {}",
            mbit(goodput),
            100.0 * goodput / path.bytes_per_sec(),
            path.mbit,
            mbit(whole),
            d.link.stats().queue_drops,
            b.stats().peak_backlog / 1000,
            b.queue_bytes() / 1000,
            retransmissions(&f.a),
        );
        assert_eq!((f.stats.misordered, f.stats.corrupt), (0, 0), "{spec}");
        let bar = if spec.contains("newreno") { 0.7 } else { 0.9 };
        if goodput < bar * path.bytes_per_sec() {
            failures.push(format!("{spec}: {:.1} Mbit/s", mbit(goodput)));
        }
    }
    println!("(a) wall {:.1} s", wall.elapsed().as_secs_f64());
    assert!(
        failures.is_empty(),
        "under the bar (90 %, NewReno 70 %) of {} Mbit/s: {failures:?}",
        path.mbit
    );
}

/// (b) Two flows, the second starting 2 s after the first, share a 50 Mbit/s, 50 ms
/// bottleneck (a queue of one BDP): Jain's index of their goodputs over the last 30 s of a
/// 60 s run, with NewReno and with the default stack (CUBIC), each under three keyings
/// (seeds 1-3). Of the three, the median index is at least 0.95, the goal, and none is under
/// 0.85 (neither flow held to less than about half the other's share). Together they use the
/// link.
///
/// Why the median: the keys decide which messages the window holds back, and with them the
/// runs' timing, and two flows whose losses come together in one drop-tail queue trade shares
/// over tens of seconds. Over seeds 1-16, CUBIC gave 0.88-1.00 layered (3 under 0.95) and
/// 0.87-1.00 accelerated (4 under 0.95); NewReno 0.98-1.00 in both. In the low runs one flow
/// drifts to about a third of the link over the last 30 s and CUBIC's curve takes tens of
/// seconds to give it back. On the emulated path (`wan.fairness`: two CUBIC flows through a
/// real `tbf` queue, started together) the index is 0.99-1.00. The keys are seeded, so every
/// run here replays.
#[test]
fn two_flows_converge_to_a_fair_share() {
    both_modes(two_flows_converge_to_a_fair_share_in);
}

fn two_flows_converge_to_a_fair_share_in() {
    for spec in [CONTROLLERS[1], DEFAULT] {
        let mut indices: Vec<f64> = (1..=3).map(|seed| two_flows_share(spec, seed)).collect();
        indices.sort_by(f64::total_cmp);
        let median = indices[1];
        if median < 0.95 {
            println!("(b) {spec}: MISS: median Jain's index {median:.3} < 0.95, the goal");
        }
        assert!(
            median >= 0.95,
            "{spec}: median Jain's index {median:.3} < 0.95 ({indices:?})"
        );
    }
}

/// One run of (b) keyed from `seed`: its Jain's index (asserted at least 0.85).
fn two_flows_share(spec: &str, seed: u64) -> f64 {
    let wall = Instant::now();
    let path = Path {
        seed,
        ..Path::clean(50.0, 50)
    };
    let end = 60.0;
    let mut d = dumbbell(&path, spec, &[Time::ZERO, secs(2.0)]);
    d.run_bulk(secs(end), MSG).expect("runs");
    let (from, to) = (secs(end - 30.0), secs(end));
    let rates: Vec<f64> = (0..2).map(|i| d.goodput(i, from, to)).collect();
    let jain = d.fairness(from, to);
    // The shares over time, for the record: per 2 s.
    let timeline: Vec<String> = (0..(end as u64 / 2))
        .map(|k| {
            let (t0, t1) = (secs(2.0 * k as f64), secs(2.0 * (k + 1) as f64));
            format!(
                "{}s {:.0}/{:.0}",
                2 * k,
                mbit(d.goodput(0, t0, t1)),
                mbit(d.goodput(1, t0, t1))
            )
        })
        .collect();
    println!(
        "(b) {spec}, seed {seed}: goodputs {:.1} and {:.1} Mbit/s over {}-{} s, Jain's index \
         {:.3}; queue drops {}; Mbit/s per 2 s: {}; wall {:.1} s",
        mbit(rates[0]),
        mbit(rates[1]),
        end - 30.0,
        end,
        jain,
        d.link.stats().queue_drops,
        timeline.join(", "),
        wall.elapsed().as_secs_f64()
    );
    for f in &d.flows {
        assert_eq!((f.stats.misordered, f.stats.corrupt), (0, 0), "{spec}");
    }
    assert!(
        jain >= 0.85,
        "{spec}, seed {seed}: Jain's index {jain:.3} < 0.85"
    );
    let total: f64 = rates.iter().sum();
    assert!(
        total >= 0.8 * path.bytes_per_sec(),
        "together {:.1} Mbit/s of {}",
        mbit(total),
        path.mbit
    );
    jain
}

/// (c) No spurious retransmission on a clean path with jitter: 50 Mbit/s, 50 ms, each
/// datagram held up to 10 ms more each way, never reordered, and a queue (16 round trips,
/// 5 MB) the transfer cannot overflow. For every controller, a 4 MB transfer completes with
/// no retransmission counted by the sender and no duplicate seen by the receiver — within
/// 3 s (0.64 s at the link's rate): a sender that never opens its window proves nothing
/// about spurious retransmissions.
#[test]
fn jitter_without_loss_causes_no_retransmission() {
    both_modes(jitter_without_loss_causes_no_retransmission_in);
}

fn jitter_without_loss_causes_no_retransmission_in() {
    let wall = Instant::now();
    let path = Path {
        jitter: Duration::from_millis(10),
        queue_rtts: 16.0,
        ..Path::clean(50.0, 50)
    };
    let msgs = 4_000_000 / MSG as u64;
    let mut failures = Vec::new();
    for spec in CONTROLLERS {
        let mut d = dumbbell(&path, spec, &[Time::ZERO]);
        d.flows[0].limit = Some(msgs);
        let done = d.run_bulk(secs(60.0), MSG).expect("runs");
        let f = &d.flows[0];
        let (retx, dups) = (
            retransmissions(&f.a),
            f.b.stats().drops(DropReason::Duplicate),
        );
        println!(
            "(c) {spec}: done {done} in {:.2} s; retransmissions {retx}, duplicates at the \
             receiver {dups}; link lost {} queue drops {} peak queue {} kB",
            d.now.as_nanos() as f64 / 1e9,
            d.link.stats().lost,
            d.link.stats().queue_drops,
            d.link
                .bottleneck(Side::A)
                .map_or(0, |b| b.stats().peak_backlog / 1000),
        );
        assert_eq!(
            (d.link.stats().lost, d.link.stats().queue_drops),
            (0, 0),
            "the path is clean"
        );
        assert_exactly_once(&d, spec);
        if d.now > secs(3.0) {
            failures.push(format!("{spec}: took {:?}", d.now - Time::ZERO));
        }
        if retx != 0 || dups != 0 {
            failures.push(format!("{spec}: {retx} retransmissions, {dups} duplicates"));
        }
    }
    println!("(c) wall {:.1} s", wall.elapsed().as_secs_f64());
    assert!(failures.is_empty(), "{failures:?}");
}

/// (d) Recovery after a blackout, without a burst. A 25 MB transfer of the default stack on
/// 50 Mbit/s, 50 ms (a queue of one BDP); the path is cut both ways (loss 1.0) from 2 s to
/// 5 s, then healed — with the default stack and with BBR. The flow has filled the path when
/// the cut comes (at least half the link's rate over the second before it), the transfer
/// completes, exactly once and in order, and after the heal:
///
/// - the bottleneck's queue does not overflow for 2 s (40 round trips: a sender that came
///   back with its pre-blackout window would fill and overflow the queue in the first);
/// - the sender never puts more than [`burst_bound`] datagrams on the link in any 1 ms.
#[test]
fn recovery_after_a_blackout_has_no_burst() {
    both_modes(recovery_after_a_blackout_has_no_burst_in);
}

fn recovery_after_a_blackout_has_no_burst_in() {
    let wall = Instant::now();
    let path = Path::clean(50.0, 50);
    let (cut, heal) = (secs(2.0), secs(5.0));
    let msgs = 25_000_000 / MSG as u64;
    let bound = burst_bound(&path);
    let mut failures = Vec::new();
    for spec in [DEFAULT, "frag(1400):window(bbr):seal"] {
        let mut d = dumbbell(&path, spec, &[Time::ZERO]);
        d.flows[0].limit = Some(msgs);
        d.run_bulk(cut, MSG).expect("runs");
        let before = d.flows[0].stats.delivered_bytes;
        let filling = d.goodput(0, secs(1.0), cut);
        d.link.set_faults(path.faults(1.0));
        d.run_bulk(heal, MSG).expect("runs");
        let dark = d.flows[0].stats.delivered_bytes - before;
        d.link.set_faults(path.faults(0.0));
        let drops_at_heal = d.link.stats().queue_drops;
        d.flows[0].stats.burst.reset();
        if let Some(b) = d.link.bottleneck_mut(Side::A) {
            b.reset_peak();
        }
        d.run_bulk(heal + Duration::from_secs(2), MSG)
            .expect("runs");
        let drops_after = d.link.stats().queue_drops - drops_at_heal;
        let peak = d
            .link
            .bottleneck(Side::A)
            .map_or(0, |b| b.stats().peak_backlog);
        let done = d.run_bulk(secs(120.0), MSG).expect("runs");
        let f = &d.flows[0];
        println!(
            "(d) {spec}: delivered {} kB before the cut ({:.1} Mbit/s over 1-2 s), {} kB in \
             the dark; done {done} at {:.2} s; after the heal: {drops_after} queue drops in 2 s, peak queue {} kB of \
             {} kB, at most {} datagrams in 1 ms (at {:.4} s; bound {bound}); later queue \
             drops {}; retransmissions {}",
            before / 1000,
            mbit(filling),
            dark / 1000,
            d.now.as_nanos() as f64 / 1e9,
            peak / 1000,
            d.link
                .bottleneck(Side::A)
                .map_or(0, |b| b.queue_bytes() / 1000),
            f.stats.burst.max(),
            f.stats.burst.max_at().map_or(0.0, |t| t.as_nanos() as f64 / 1e9),
            d.link.stats().queue_drops - drops_at_heal - drops_after,
            retransmissions(&f.a),
        );
        assert!(done, "{spec}: the transfer completes");
        assert_exactly_once(&d, spec);
        if filling < 0.5 * path.bytes_per_sec() {
            failures.push(format!(
                "{spec}: only {:.1} Mbit/s before the cut",
                mbit(filling)
            ));
        }
        if drops_after != 0 {
            failures.push(format!("{spec}: {drops_after} queue drops after the heal"));
        }
        if f.stats.burst.max() > bound {
            failures.push(format!(
                "{spec}: {} datagrams in 1 ms after the heal (bound {bound})",
                f.stats.burst.max()
            ));
        }
    }
    println!("(d) wall {:.1} s", wall.elapsed().as_secs_f64());
    assert!(failures.is_empty(), "{failures:?}");
}

/// The most datagrams a paced sender may put on the link in any 1 ms after a blackout: the
/// initial window (10 datagrams, RFC 9002 §7.2: what a sender may send at once with no
/// knowledge of the path), plus 3 ms of twice the link's rate in datagrams (a pacer's
/// bucket holds 2 ms of its rate and earns another 1 ms in the window; the pacing rate of a
/// sender that has measured the path is within twice the bottleneck's rate). 50 Mbit/s,
/// 1400-byte datagrams: 10 + 27 = 37. An unpaced sender that resumes with its pre-blackout
/// window (hundreds of datagrams) is far beyond it.
fn burst_bound(path: &Path) -> u64 {
    let per_ms = path.bytes_per_sec() / 1000.0 / MSG as f64;
    10 + (6.0 * per_ms).ceil() as u64
}

/// (e) Receiver memory stays bounded: 5 % loss each way on a 50 Mbit/s path with a 400 ms
/// round trip (a BDP of 2.5 MB), with BBR, whose window random loss does not shrink (about
/// two BDPs). The receiver's buffer of out-of-order bytes (the window's `rcv.buffered_peak`)
/// stays at most the 16 MiB ceiling — having held at least 1 MB, so the window was large —
/// and everything is delivered exactly once, in order.
#[test]
fn receiver_memory_is_bounded_under_heavy_loss() {
    both_modes(receiver_memory_is_bounded_under_heavy_loss_in);
}

fn receiver_memory_is_bounded_under_heavy_loss_in() {
    let wall = Instant::now();
    let path = Path {
        loss: 0.05,
        ..Path::clean(50.0, 400)
    };
    let msgs = 20_000_000 / MSG as u64;
    let spec = "frag(1400):window(bbr):seal";
    let mut d = dumbbell(&path, spec, &[Time::ZERO]);
    d.flows[0].limit = Some(msgs);
    let done = d.run_bulk(secs(120.0), MSG).expect("runs");
    let f = &d.flows[0];
    let peak = f.b.stats().event("rcv.buffered_peak");
    println!(
        "(e) {spec}: done {done} at {:.2} s ({:.1} Mbit/s); receiver's out-of-order peak {} \
         kB (ceiling {} kB); link lost {}; retransmissions {}; wall {:.1} s",
        d.now.as_nanos() as f64 / 1e9,
        mbit(f.stats.delivered_bytes as f64 / (d.now.as_nanos() as f64 / 1e9)),
        peak / 1000,
        CEILING / 1000,
        d.link.stats().lost,
        retransmissions(&f.a),
        wall.elapsed().as_secs_f64()
    );
    assert!(done, "the transfer completes");
    assert_exactly_once(&d, spec);
    assert!(
        peak >= 1_000_000,
        "a small window: {peak} bytes buffered at most"
    );
    assert!(peak <= CEILING, "{peak} > {CEILING}");
}

/// (f) Exactly once and in order: for every controller and the legacy fixed window, a
/// transfer over a path that loses (2 %), duplicates (1 %), reorders (1 %, by up to 20 ms),
/// corrupts (0.5 %) and jitters (5 ms) datagrams, behind a 20 Mbit/s, 60 ms bottleneck with
/// half a BDP of queue, is delivered whole: every message once, in order, with the bytes
/// sent (each message carries its sequence number at both ends and bytes that depend on it).
#[test]
fn every_message_is_delivered_exactly_once_in_order() {
    both_modes(every_message_is_delivered_exactly_once_in_order_in);
}

fn every_message_is_delivered_exactly_once_in_order_in() {
    let wall = Instant::now();
    let path = Path {
        jitter: Duration::from_millis(5),
        queue_rtts: 0.5,
        ..Path::clean(20.0, 60)
    };
    let faults = Faults {
        loss: 0.02,
        duplicate: 0.01,
        reorder: 0.01,
        corrupt: 0.005,
        reorder_delay: Duration::from_millis(20),
        ..Faults::none(path.rtt / 2)
    };
    let msgs = 3_000_000 / MSG as u64;
    let specs = CONTROLLERS
        .iter()
        .copied()
        .chain(["frag(1400):window(64):seal"]);
    for (k, spec) in specs.enumerate() {
        let mut d = dumbbell(
            &Path {
                seed: 7 + k as u64,
                ..path
            },
            spec,
            &[Time::ZERO],
        );
        d.link.set_faults(faults.clone());
        d.flows[0].limit = Some(msgs);
        let done = d.run_bulk(secs(300.0), MSG).expect("runs");
        let l = d.link.stats();
        println!(
            "(f) {spec}: done {done} at {:.2} s; {} messages; link lost {} duplicated {} \
             reordered {} corrupted {} queue drops {}; retransmissions {}",
            d.now.as_nanos() as f64 / 1e9,
            d.flows[0].stats.delivered_msgs,
            l.lost,
            l.duplicated,
            l.reordered,
            l.corrupted,
            l.queue_drops,
            retransmissions(&d.flows[0].a),
        );
        assert!(done, "{spec}: the transfer completes");
        assert_exactly_once(&d, spec);
    }
    println!("(f) wall {:.1} s", wall.elapsed().as_secs_f64());
}
