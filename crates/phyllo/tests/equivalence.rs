//! Equivalence of the layered path and the Protocol Accelerator (van Renesse, "Masking the Overhead
//! of Protocol Layering" (seed 004)): they must be the same protocol, for the built-in layers and
//! for layers written outside the crate.
//!
//! Two external layers, written as a naive author would (canonical pre/post phases only: no
//! predictions, no packet filters):
//!
//! - [`Counter`]: a protocol-specific 16-bit per-datagram counter, assigned in post-send;
//!   pre-deliver refuses a counter older than the next expected one (an anti-replay check).
//! - [`Gossip`]: a gossip field piggybacking how many datagrams this end has delivered through
//!   the layer; post-deliver records the largest count the peer reported.
//!
//! Stacks drawn from `frag(N)`, `window(N)`, `checksum`, `seal` and the two external layers,
//! in various orders, run layered and accelerated over the same seeded memlink schedules.
//! What "the same" means:
//!
//! - Over a perfect link every stack delivers the same messages, in the same order, on both
//!   paths (and what was sent).
//! - Under faults (loss up to 45 %, duplication, reordering, corruption where a checksum or
//!   seal can catch it) the two paths put different datagrams on the wire (compact headers,
//!   packing), so the link treats them differently; for stacks with `window` both paths must
//!   deliver every message exactly once, in order, byte for byte, once the link heals.
//! - On each path the external layers' own state agrees between the ends: the counters one
//!   end's `Counter` received are the ones the other's assigned, and the count a `Gossip`
//!   learns is one its peer actually reached. (Packing makes one datagram of several
//!   messages, so how many datagrams a layer saw legitimately differs between the paths; the
//!   agreement is checked within each path.)
//!
//! `seal` sits below `checksum` in every stack here (`...:checksum:seal`): `seal` above
//! `checksum` is a separate, known problem of the accelerator.

mod common;
use common::{payload, rng, sizes};
use phyllo::field::{FieldClass, FieldHandle};
use phyllo::layer::{Cx, DropReason, Handoff, Hdr, InitCx, Layer, Packet, Verdict};
use phyllo::layout::FieldRegistry;
use phyllo::stack::{build_dyn, DynStack};
use phyllo::testing::memlink::{Faults, MemLink};
use phyllo::testing::Pair;
use phyllo::{Config, Connection, Time};
use rand::Rng;
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// The counter's width on the wire.
const COUNTER_MASK: u64 = 0xffff;

/// What a [`Counter`] did, shared with the test.
#[derive(Debug, Default)]
struct CounterLog {
    /// Counters assigned to the datagrams this end sent through the layer, in order.
    sent: Vec<u64>,
    /// Counters of the datagrams this end accepted, in order.
    received: Vec<u64>,
}

/// A per-datagram counter: an external layer with a protocol-specific field and no
/// prediction.
struct Counter {
    f: Option<FieldHandle>,
    next_send: u64,
    expected: u64,
    log: Arc<Mutex<CounterLog>>,
}

impl Counter {
    fn new(log: Arc<Mutex<CounterLog>>) -> Counter {
        Counter {
            f: None,
            next_send: 0,
            expected: 0,
            log,
        }
    }

    /// How far a wire counter is ahead of the expected one (negative: older).
    fn ahead(wire: u64, expected: u64) -> i64 {
        (wire.wrapping_sub(expected) & COUNTER_MASK) as u16 as i16 as i64
    }
}

impl Layer for Counter {
    fn name(&self) -> &'static str {
        "counter"
    }

    fn init(&mut self, fields: &mut FieldRegistry, _: &InitCx) {
        self.f = Some(fields.add_field(FieldClass::ProtoSpecific, "counter", 16, None));
    }

    fn pre_send(&self, pkt: &mut Packet<'_>) -> Verdict {
        if let Some(f) = self.f {
            pkt.set(f, self.next_send);
        }
        Verdict::Continue
    }

    fn post_send(&mut self, _: &Hdr<'_>, h: Handoff, cx: &mut Cx<'_>) {
        match h {
            Handoff::Passed { copy } => {
                if let Some(c) = copy {
                    cx.free(c);
                }
                self.log
                    .lock()
                    .unwrap()
                    .sent
                    .push(self.next_send & COUNTER_MASK);
                self.next_send += 1;
            }
            Handoff::Absorbed(m) => cx.free(m),
        }
    }

    fn pre_deliver(&self, pkt: &mut Packet<'_>) -> Verdict {
        let Some(f) = self.f else {
            return Verdict::Continue;
        };
        if Self::ahead(pkt.get(f), self.expected) < 0 {
            Verdict::Drop(DropReason::Replay)
        } else {
            Verdict::Continue
        }
    }

    fn post_deliver(&mut self, hdr: &Hdr<'_>, h: Handoff, cx: &mut Cx<'_>) {
        let Some(f) = self.f else { return };
        match h {
            Handoff::Passed { .. } => {
                let c = hdr.get(f);
                let d = Self::ahead(c, self.expected);
                if d >= 0 {
                    self.expected += d as u64 + 1;
                }
                self.log.lock().unwrap().received.push(c);
            }
            Handoff::Absorbed(m) => cx.free(m),
        }
    }
}

/// What a [`Gossip`] knows, shared with the test.
#[derive(Debug, Default)]
struct GossipLog {
    /// Datagrams this end delivered through the layer.
    delivered: u64,
    /// The largest delivered count the peer reported.
    peer_delivered: u64,
}

/// Piggybacks this end's delivered count on everything it sends: an external layer with a
/// gossip field and no prediction.
struct Gossip {
    f: Option<FieldHandle>,
    delivered: u64,
    peer_delivered: u64,
    log: Arc<Mutex<GossipLog>>,
}

impl Gossip {
    fn new(log: Arc<Mutex<GossipLog>>) -> Gossip {
        Gossip {
            f: None,
            delivered: 0,
            peer_delivered: 0,
            log,
        }
    }
}

impl Layer for Gossip {
    fn name(&self) -> &'static str {
        "gossip"
    }

    fn init(&mut self, fields: &mut FieldRegistry, _: &InitCx) {
        self.f = Some(fields.add_field(FieldClass::Gossip, "delivered", 32, None));
    }

    fn pre_send(&self, pkt: &mut Packet<'_>) -> Verdict {
        if let Some(f) = self.f {
            pkt.set(f, self.delivered);
        }
        Verdict::Continue
    }

    fn post_send(&mut self, _: &Hdr<'_>, h: Handoff, cx: &mut Cx<'_>) {
        match h {
            Handoff::Passed { copy: Some(c) } | Handoff::Absorbed(c) => cx.free(c),
            Handoff::Passed { copy: None } => {}
        }
    }

    fn pre_deliver(&self, _: &mut Packet<'_>) -> Verdict {
        Verdict::Continue
    }

    fn post_deliver(&mut self, hdr: &Hdr<'_>, h: Handoff, cx: &mut Cx<'_>) {
        let Some(f) = self.f else { return };
        match h {
            Handoff::Passed { .. } => {
                self.delivered += 1;
                self.peer_delivered = self.peer_delivered.max(hdr.get(f));
                let mut log = self.log.lock().unwrap();
                log.delivered = self.delivered;
                log.peer_delivered = self.peer_delivered;
            }
            Handoff::Absorbed(m) => cx.free(m),
        }
    }
}

/// The shared state of one end's external layers.
#[derive(Default)]
struct Probes {
    counter: Option<Arc<Mutex<CounterLog>>>,
    gossip: Option<Arc<Mutex<GossipLog>>>,
}

/// Build a stack from a spec of built-in layers plus `counter` and `gossip`.
fn build(spec: &str) -> (DynStack, Probes) {
    let mut probes = Probes::default();
    let mut stack: DynStack = Vec::new();
    for tok in spec.split(':') {
        match tok {
            "counter" => {
                let log = Arc::new(Mutex::new(CounterLog::default()));
                probes.counter = Some(log.clone());
                stack.push(Box::new(Counter::new(log)));
            }
            "gossip" => {
                let log = Arc::new(Mutex::new(GossipLog::default()));
                probes.gossip = Some(log.clone());
                stack.push(Box::new(Gossip::new(log)));
            }
            _ => stack.extend(build_dyn(tok).unwrap()),
        }
    }
    (stack, probes)
}

/// Index of the layer named `name` in `spec` (top = 0).
fn position(spec: &str, name: &str) -> Option<usize> {
    spec.split(':')
        .position(|t| t.split('(').next() == Some(name))
}

/// Stacks under test, top layer first. `seal` always sits below `checksum`.
const STACKS: &[&str] = &[
    // Each external layer alone, and the built-ins alone.
    "counter",
    "gossip",
    "frag(1400)",
    "checksum",
    "seal",
    // Each external layer with a window, above and below it.
    "counter:window(16)",
    "window(16):counter",
    "gossip:window(16)",
    "window(16):gossip",
    // Built-ins only.
    "window(16):checksum",
    "frag(1400):window(16):checksum:seal",
    // Combinations.
    "counter:gossip:window(16):checksum",
    "window(8):gossip:counter:checksum",
    "frag(1400):counter:window(16):checksum:seal",
    "frag(1400):window(16):gossip:checksum:seal",
    "gossip:frag(600):window(8):counter:checksum",
    "counter:frag(1400):gossip:window(16):checksum:seal",
    "window(16):frag(1400):counter:checksum",
];

/// The virtual time after which a faulty link heals (all messages have been offered by then).
const HEAL_AT: Time = Time(30_000_000);

/// The message the responder sends once everything arrived (it carries its gossip back).
const REPORT: &[u8] = b"report";

/// What one run showed.
struct Outcome {
    /// What B delivered, in order.
    b_got: Vec<Vec<u8>>,
    /// What A delivered, in order (the report).
    a_got: Vec<Vec<u8>>,
    a: Probes,
    b: Probes,
    /// B's gossip count just before it sent the report.
    b_delivered_before_report: u64,
    /// Drops by B's `counter` layer.
    b_counter_drops: u64,
}

/// Step `pair` until idle or out of budget, collecting deliveries; `msgs` are sent from A as
/// the window lets them; the link heals (becomes perfect, in-flight datagrams lost) at
/// [`HEAL_AT`] once everything was offered.
fn drive(pair: &mut Pair, msgs: &[Vec<u8>], delay: Duration, out: &mut Outcome) {
    let mut next = 0;
    let mut healed = false;
    for _ in 0..2_000_000 {
        while next < msgs.len() && pair.a.can_send() {
            pair.a.send(pair.now, &msgs[next]).unwrap();
            next += 1;
        }
        if !healed && next == msgs.len() && pair.now >= HEAL_AT {
            pair.link = MemLink::new(Faults::none(delay), 1);
            healed = true;
        }
        let more = pair.step();
        while let Some(m) = pair.b.poll_delivery() {
            out.b_got.push(m.data().to_vec());
            pair.b.recycle(m);
        }
        while let Some(m) = pair.a.poll_delivery() {
            out.a_got.push(m.data().to_vec());
            pair.a.recycle(m);
        }
        if !more && next == msgs.len() {
            return;
        }
    }
}

/// Run `msgs` from A to B, then a report from B to A, over a link with `faults` from `seed`.
fn run(spec: &str, accelerated: bool, faults: &Faults, seed: u64, msgs: &[Vec<u8>]) -> Outcome {
    let (ca, cb) = Config::pair(accelerated).unwrap();
    let (sa, a) = build(spec);
    let (sb, b) = build(spec);
    let mut pair = Pair::new(
        Connection::new(sa, ca).unwrap(),
        Connection::new(sb, cb).unwrap(),
        MemLink::new(faults.clone(), seed),
    );
    let mut out = Outcome {
        b_got: Vec::new(),
        a_got: Vec::new(),
        a,
        b,
        b_delivered_before_report: 0,
        b_counter_drops: 0,
    };
    drive(&mut pair, msgs, faults.delay, &mut out);
    out.b_delivered_before_report = out
        .b
        .gossip
        .as_ref()
        .map_or(0, |g| g.lock().unwrap().delivered);
    pair.b.send(pair.now, REPORT).unwrap();
    drive(&mut pair, &[], faults.delay, &mut out);
    out.b_counter_drops = pair
        .b
        .stats()
        .layers
        .iter()
        .find(|(n, _)| *n == "counter")
        .map_or(0, |(_, c)| c.drops.iter().map(|(_, n)| n).sum());
    out
}

/// Whether `sub` is a subsequence of `of`.
fn is_subsequence(sub: &[u64], of: &[u64]) -> bool {
    let mut it = of.iter();
    sub.iter().all(|x| it.any(|y| y == x))
}

/// Check the external layers' state agrees between the ends of one run. `exact_counter`:
/// every datagram a counter sent must have been received, in order (perfect link, or a window
/// below the counter); else what was received must be a subsequence of what was sent.
fn check_probes(o: &Outcome, exact_counter: bool) -> Result<(), String> {
    if let (Some(a), Some(b)) = (&o.a.counter, &o.b.counter) {
        let (a, b) = (a.lock().unwrap(), b.lock().unwrap());
        for (dir, sent, received) in [
            ("A->B", &a.sent, &b.received),
            ("B->A", &b.sent, &a.received),
        ] {
            let ok = if exact_counter {
                received == sent
            } else {
                is_subsequence(received, sent)
            };
            if !ok {
                let zeros = received.iter().filter(|&&c| c == 0).count();
                return Err(format!(
                    "counter {dir}: sent {} counters (first {:?}), received {} ({zeros} of them \
                     0; first {:?}); B's counter dropped {}",
                    sent.len(),
                    &sent[..sent.len().min(6)],
                    received.len(),
                    &received[..received.len().min(6)],
                    o.b_counter_drops,
                ));
            }
        }
    }
    if let (Some(a), Some(b)) = (&o.a.gossip, &o.b.gossip) {
        let (a, b) = (a.lock().unwrap(), b.lock().unwrap());
        let lo = o.b_delivered_before_report;
        if !(lo..=b.delivered).contains(&a.peer_delivered) {
            return Err(format!(
                "gossip: A learnt B delivered {}, B had delivered {lo} when it sent the report \
                 ({} at the end)",
                a.peer_delivered, b.delivered
            ));
        }
        if b.peer_delivered > a.delivered {
            return Err(format!(
                "gossip: B learnt A delivered {}, more than A's {}",
                b.peer_delivered, a.delivered
            ));
        }
    }
    Ok(())
}

/// Messages for one schedule.
fn messages(seed: u64) -> Vec<Vec<u8>> {
    let mut r = rng(seed ^ 0xe9_u64);
    sizes(&mut r, 12)
        .into_iter()
        .enumerate()
        .map(|(i, n)| payload(i, n))
        .collect()
}

/// Failures, collected over every stack and seed so one run shows the whole picture.
#[derive(Default)]
struct Failures {
    lines: Vec<String>,
    /// (stack, path) → failed runs.
    counts: Vec<((String, &'static str), u64)>,
}

impl Failures {
    fn add(&mut self, spec: &str, path: &'static str, seed: u64, why: String) {
        let key = (spec.to_string(), path);
        match self.counts.iter_mut().find(|(k, _)| *k == key) {
            Some((_, n)) => *n += 1,
            None => {
                self.counts.push((key, 1));
                // The first failure of each stack and path, in full.
                self.lines
                    .push(format!("{spec} [{path}] seed {seed}: {why}"));
            }
        }
    }

    fn assert_none(&self, runs: u64) {
        let summary: Vec<String> = self
            .counts
            .iter()
            .map(|((s, p), n)| format!("{s} [{p}]: {n} of {runs} runs failed"))
            .collect();
        assert!(
            self.lines.is_empty(),
            "{}\nfirst failures:\n{}",
            summary.join("\n"),
            self.lines.join("\n")
        );
    }
}

/// One run's deliveries against what was sent: every message once, in order, equal bytes.
fn delivered_all(got: &[Vec<u8>], msgs: &[Vec<u8>]) -> Result<(), String> {
    if got == msgs {
        return Ok(());
    }
    let in_order = got.iter().zip(msgs).take_while(|(g, m)| g == m).count();
    Err(format!(
        "delivered {} of {} messages ({in_order} correct in order)",
        got.len(),
        msgs.len()
    ))
}

const PERFECT_SEEDS: u64 = 20;

#[test]
fn same_deliveries_and_layer_state_over_a_perfect_link() {
    let mut fails = Failures::default();
    for delay in [Duration::ZERO, Duration::from_micros(50)] {
        let perfect = Faults::none(delay);
        for spec in STACKS {
            for seed in 0..PERFECT_SEEDS {
                let msgs = messages(seed);
                let layered = run(spec, false, &perfect, seed, &msgs);
                let accel = run(spec, true, &perfect, seed, &msgs);
                if let Err(e) = delivered_all(&layered.b_got, &msgs) {
                    fails.add(spec, "layered", seed, e);
                }
                if accel.b_got != layered.b_got {
                    let e = delivered_all(&accel.b_got, &msgs).err().unwrap_or_default();
                    fails.add(spec, "accelerated", seed, format!("deliveries differ: {e}"));
                }
                if accel.a_got != layered.a_got || layered.a_got != [REPORT.to_vec()] {
                    fails.add(
                        spec,
                        "report",
                        seed,
                        format!(
                            "A delivered {} reports layered, {} accelerated",
                            layered.a_got.len(),
                            accel.a_got.len()
                        ),
                    );
                }
                if let Err(e) = check_probes(&layered, true) {
                    fails.add(spec, "layered state", seed, e);
                }
                if let Err(e) = check_probes(&accel, true) {
                    fails.add(spec, "accelerated state", seed, e);
                }
            }
        }
    }
    fails.assert_none(2 * PERFECT_SEEDS);
}

const FAULT_SEEDS: u64 = 40;

/// A fault schedule: the common model with loss up to 45 %; corruption only where a checksum
/// or seal can catch it (a window alone would deliver the flipped bit).
fn schedule(seed: u64, spec: &str) -> Faults {
    let mut r = rng(seed);
    let mut f = common::faults(&mut r);
    f.loss = r.random_range(0.0..0.45);
    if position(spec, "checksum").is_none() && position(spec, "seal").is_none() {
        f.corrupt = 0.0;
    }
    f
}

#[test]
fn every_message_once_in_order_under_faults_on_both_paths() {
    let mut fails = Failures::default();
    for spec in STACKS {
        let Some(window) = position(spec, "window") else {
            continue;
        };
        // A counter above the window sees each message exactly once, in order.
        let exact_counter = position(spec, "counter").is_some_and(|c| c < window);
        for seed in 0..FAULT_SEEDS {
            let f = schedule(seed, spec);
            let msgs = messages(seed);
            for (path, accelerated) in [("layered", false), ("accelerated", true)] {
                let o = run(spec, accelerated, &f, seed, &msgs);
                if let Err(e) = delivered_all(&o.b_got, &msgs) {
                    fails.add(spec, path, seed, format!("{e}; faults {f:?}"));
                }
                if o.a_got != [REPORT.to_vec()] {
                    fails.add(
                        spec,
                        path,
                        seed,
                        format!("A delivered {} reports", o.a_got.len()),
                    );
                }
                if let Err(e) = check_probes(&o, exact_counter) {
                    let state = if accelerated {
                        "accelerated state"
                    } else {
                        "layered state"
                    };
                    fails.add(spec, state, seed, e);
                }
            }
        }
    }
    fails.assert_none(FAULT_SEEDS);
}
