//! Every ordering of the built-in layers builds and works.
//!
//! The 64 orderings of one to four of `frag(1400)`, `window(16)`, `checksum` and `seal` (every
//! permutation of every non-empty subset), each layered and with the Protocol Accelerator
//! (van Renesse, "Masking the Overhead of Protocol Layering" (seed 004)), over a perfect memlink:
//! messages of 1, 8, 1000 and 3000 bytes go both ways as a ping-pong with an echo (B sends back
//! what it got) and as simultaneous bursts; everything must arrive once, in order, with its bytes
//! intact, no layer may drop anything, and both connections must go idle. Every ordering is
//! meaningful (a layer authenticates or checks what the layers above it wrote and the body as they
//! left it), so none is refused.
//!
//! A 3000-byte message exceeds `frag(1400)`'s fragment size. Without `frag` nothing in the
//! stack knows a link MTU: the connection accepts any message up to `Config::max_message`
//! and sends it as one datagram, which the in-memory link carries, so it must be delivered
//! like any other (a real link would refuse the datagram; keeping datagrams within an MTU is
//! `frag`'s job).
//!
//! Over a lossy link (seeded loss, duplication and reordering, no corruption) stacks with
//! `window` must still deliver everything exactly once, in order; stacks without it are
//! unreliable, so only the absence of corruption and panics is asserted for them.

use phyllo::testing::memlink::{Faults, MemLink};
use phyllo::testing::Pair;
use std::time::Duration;

/// The layers, as spec tokens.
const LAYERS: [&str; 4] = ["frag(1400)", "window(16)", "checksum", "seal"];

/// Message sizes: tiny, a word, most of a fragment, more than a fragment.
const SIZES: [usize; 4] = [1, 8, 1000, 3000];

/// Steps a pair may take to go idle before it is declared hung.
const MAX_STEPS: usize = 200_000;

/// Every permutation of every non-empty subset of [`LAYERS`], as spec strings.
fn orderings() -> Vec<String> {
    fn perms(rest: &[&'static str], prefix: &mut Vec<&'static str>, out: &mut Vec<String>) {
        if !prefix.is_empty() {
            out.push(prefix.join(":"));
        }
        for (i, l) in rest.iter().enumerate() {
            let mut r = rest.to_vec();
            r.remove(i);
            prefix.push(l);
            perms(&r, prefix, out);
            prefix.pop();
        }
    }
    let mut out = Vec::new();
    perms(&LAYERS, &mut Vec::new(), &mut out);
    out
}

/// The layer names of a spec, top first (arguments dropped).
fn names(spec: &str) -> Vec<&str> {
    spec.split(':')
        .map(|t| t.split('(').next().unwrap_or(t))
        .collect()
}

/// How a pair is built.
#[derive(Clone, Copy, Debug)]
enum Mode {
    Layered,
    Accelerated,
}

fn build(spec: &str, mode: Mode, link: MemLink) -> Result<Pair, phyllo::conn::BuildError> {
    match mode {
        Mode::Layered => Pair::from_spec_with(spec, link),
        Mode::Accelerated => Pair::accelerated(spec, link),
    }
}

/// A message whose bytes encode its direction, index and length.
fn payload(tag: u8, i: usize, len: usize) -> Vec<u8> {
    (0..len)
        .map(|k| tag ^ (i.wrapping_mul(31) ^ k.wrapping_mul(7) ^ (k >> 8)) as u8)
        .collect()
}

/// Everything delivered so far at each end, in order.
#[derive(Default)]
struct Got {
    a: Vec<Vec<u8>>,
    b: Vec<Vec<u8>>,
}

impl Got {
    fn collect(&mut self, p: &mut Pair) {
        while let Some(m) = p.a.poll_delivery() {
            self.a.push(m.data().to_vec());
            p.a.recycle(m);
        }
        while let Some(m) = p.b.poll_delivery() {
            self.b.push(m.data().to_vec());
            p.b.recycle(m);
        }
    }
}

/// Step until both ends are idle, collecting deliveries; `Err` if they never are.
fn settle(p: &mut Pair, got: &mut Got) -> Result<(), String> {
    for _ in 0..MAX_STEPS {
        let more = p.step();
        got.collect(p);
        if !more {
            return Ok(());
        }
    }
    Err(format!(
        "did not go idle within {MAX_STEPS} steps (now {:?}, A timer {:?}, B timer {:?})",
        p.now,
        p.a.poll_timeout(),
        p.b.poll_timeout()
    ))
}

/// Drop counts by layer and reason, for failure messages.
fn drops(c: &phyllo::Connection) -> String {
    let s = c.stats();
    let mut out = Vec::new();
    if s.truncated > 0 {
        out.push(format!("truncated {}", s.truncated));
    }
    for (name, lc) in &s.layers {
        for (r, n) in &lc.drops {
            out.push(format!("{name}:{r} {n}"));
        }
    }
    out.join(", ")
}

/// One message from `from` (A if true) to the other end, which must receive exactly it.
fn one_way(p: &mut Pair, got: &mut Got, from_a: bool, msg: &[u8]) -> Result<(), String> {
    let (sender, name) = if from_a {
        (&mut p.a, "A")
    } else {
        (&mut p.b, "B")
    };
    sender
        .send(p.now, msg)
        .map_err(|e| format!("{name} send of {} B refused: {e}", msg.len()))?;
    settle(p, got)?;
    let rx = if from_a { &mut got.b } else { &mut got.a };
    match rx.as_slice() {
        [m] if m == msg => {
            rx.clear();
            Ok(())
        }
        [] => Err(format!(
            "{} B from {name} not delivered (drops A: [{}], B: [{}])",
            msg.len(),
            drops(&p.a),
            drops(&p.b)
        )),
        got => Err(format!(
            "{} B from {name}: got {} messages of sizes {:?}, wanted exactly it",
            msg.len(),
            got.len(),
            got.iter().map(Vec::len).collect::<Vec<_>>()
        )),
    }
}

/// The whole perfect-link scenario on one pair.
fn scenario(p: &mut Pair) -> Result<(), String> {
    let mut got = Got::default();
    // Ping-pong with an echo, started by either end.
    for (i, &n) in SIZES.iter().enumerate() {
        let m = payload(0xa0, i, n);
        one_way(p, &mut got, true, &m).map_err(|e| format!("ping: {e}"))?;
        one_way(p, &mut got, false, &m).map_err(|e| format!("echo: {e}"))?;
        let m = payload(0xb0, i, n);
        one_way(p, &mut got, false, &m).map_err(|e| format!("ping from B: {e}"))?;
        one_way(p, &mut got, true, &m).map_err(|e| format!("echo from A: {e}"))?;
    }
    // Bursts both ways at once, three rounds of every size.
    let burst = |tag: u8| -> Vec<Vec<u8>> {
        (0..3 * SIZES.len())
            .map(|i| payload(tag, i, SIZES[i % SIZES.len()]))
            .collect()
    };
    let (to_b, to_a) = (burst(0xc0), burst(0xd0));
    for (x, y) in to_b.iter().zip(&to_a) {
        p.a.send(p.now, x)
            .map_err(|e| format!("burst: A send refused: {e}"))?;
        p.b.send(p.now, y)
            .map_err(|e| format!("burst: B send refused: {e}"))?;
    }
    settle(p, &mut got).map_err(|e| format!("burst: {e}"))?;
    for (end, sent, rx) in [("B", &to_b, &got.b), ("A", &to_a, &got.a)] {
        if rx != sent {
            return Err(format!(
                "burst to {end}: got {} of {} messages (or wrong bytes/order); drops A: [{}], B: [{}]",
                rx.len(),
                sent.len(),
                drops(&p.a),
                drops(&p.b)
            ));
        }
    }
    for (end, c) in [("A", &p.a), ("B", &p.b)] {
        if c.stats().input_drops() > 0 {
            return Err(format!("{end} dropped input: [{}]", drops(c)));
        }
        if !c.is_idle() || c.poll_timeout().is_some() || c.transmit_ready() > 0 {
            return Err(format!("{end} not idle at the end"));
        }
    }
    Ok(())
}

/// A pair built from `spec`; every ordering the parser accepts must build.
fn built(spec: &str, mode: Mode, link: MemLink) -> Result<Pair, String> {
    build(spec, mode, link).map_err(|e| format!("refused: {e}"))
}

fn perfect(mode: Mode) {
    let specs = orderings();
    let failures: Vec<String> = specs
        .iter()
        .filter_map(|spec| {
            built(spec, mode, MemLink::perfect())
                .and_then(|mut p| scenario(&mut p))
                .err()
                .map(|e| format!("{spec}: {e}"))
        })
        .collect();
    assert!(
        failures.is_empty(),
        "{mode:?}: {} of {} orderings fail:\n{}",
        failures.len(),
        specs.len(),
        failures.join("\n")
    );
}

#[test]
fn every_ordering_works_layered() {
    perfect(Mode::Layered);
}

#[test]
fn every_ordering_works_accelerated() {
    perfect(Mode::Accelerated);
}

/// A lossy schedule: 10 % loss, 5 % duplication, 20 % reordering, no corruption.
fn lossy(seed: u64) -> MemLink {
    MemLink::new(
        Faults {
            loss: 0.10,
            duplicate: 0.05,
            reorder: 0.20,
            corrupt: 0.0,
            delay: Duration::from_micros(20),
            reorder_delay: Duration::from_micros(200),
        },
        seed,
    )
}

/// Messages both ways at once over a lossy link:
/// with `window` everything arrives once and in order; without it whatever arrives is one of
/// the messages sent, intact.
fn lossy_scenario(p: &mut Pair, reliable: bool) -> Result<(), String> {
    let msgs = |tag: u8| -> Vec<Vec<u8>> {
        (0..4 * SIZES.len())
            .map(|i| payload(tag, i, SIZES[i % SIZES.len()]))
            .collect()
    };
    let (to_b, to_a) = (msgs(0x10), msgs(0x20));
    let mut got = Got::default();
    let (mut next_a, mut next_b) = (0, 0);
    let mut idle = false;
    for _ in 0..2_000_000 {
        while next_a < to_b.len() && p.a.can_send() {
            p.a.send(p.now, &to_b[next_a])
                .map_err(|e| format!("A send refused: {e}"))?;
            next_a += 1;
        }
        while next_b < to_a.len() && p.b.can_send() {
            p.b.send(p.now, &to_a[next_b])
                .map_err(|e| format!("B send refused: {e}"))?;
            next_b += 1;
        }
        let more = p.step();
        got.collect(p);
        if !more && next_a == to_b.len() && next_b == to_a.len() {
            idle = true;
            break;
        }
    }
    if !idle {
        return Err("did not go idle".into());
    }
    for (end, sent, rx) in [("B", &to_b, &got.b), ("A", &to_a, &got.a)] {
        if reliable {
            if rx != sent {
                let first_bad = rx.iter().zip(sent.iter()).position(|(r, s)| r != s);
                return Err(format!(
                    "to {end}: got {} of {} messages, first difference at {first_bad:?} \
                     (drops A: [{}], B: [{}]; A {:?}; B {:?})",
                    rx.len(),
                    sent.len(),
                    drops(&p.a),
                    drops(&p.b),
                    p.a.accel_stats(),
                    p.b.accel_stats(),
                ));
            }
        } else if let Some(bad) = rx.iter().find(|m| !sent.contains(m)) {
            return Err(format!(
                "to {end}: a {} B message that was never sent",
                bad.len()
            ));
        }
    }
    Ok(())
}

fn lossy_all(mode: Mode) {
    let mut failures = Vec::new();
    for spec in &orderings() {
        let reliable = names(spec).contains(&"window");
        for seed in 0..3 {
            let result =
                built(spec, mode, lossy(seed)).and_then(|mut p| lossy_scenario(&mut p, reliable));
            if let Err(e) = result {
                failures.push(format!("{spec} (seed {seed}): {e}"));
            }
        }
    }
    assert!(
        failures.is_empty(),
        "{mode:?}, lossy link: {} failures:\n{}",
        failures.len(),
        failures.join("\n")
    );
}

#[test]
fn every_ordering_survives_a_lossy_link_layered() {
    lossy_all(Mode::Layered);
}

#[test]
fn every_ordering_survives_a_lossy_link_accelerated() {
    lossy_all(Mode::Accelerated);
}

#[test]
fn there_are_64_orderings_of_distinct_layers() {
    let specs = orderings();
    assert_eq!(specs.len(), 4 + 12 + 24 + 24);
    let mut sorted = specs.clone();
    sorted.sort();
    sorted.dedup();
    assert_eq!(sorted.len(), specs.len());
}

/// With `frag(1400)` anywhere in the stack no datagram's body exceeds 1400 bytes, plus a seal
/// tag when seal is below frag (it seals each fragment): a message just under the fragment
/// size that seal above frag lengthens past it must still be fragmented, on the accelerator's
/// path as on the layered one.
#[test]
fn frag_bounds_every_datagram_in_every_ordering() {
    const FRAG: usize = 1400;
    const TAG: usize = 16;
    for spec in orderings().iter().filter(|s| s.contains("frag")) {
        for mode in [Mode::Layered, Mode::Accelerated] {
            let mut p = built(spec, mode, MemLink::perfect())
                .unwrap_or_else(|e| panic!("{spec} {mode:?}: {e}"));
            p.wire = Some(Vec::new());
            let preamble = match mode {
                Mode::Layered => 0,
                Mode::Accelerated => phyllo::accel::preamble::PREAMBLE_LEN,
            };
            // Only a seal below frag adds its tag to a fragment.
            let n = names(spec);
            let pos = |l: &str| n.iter().position(|x| *x == l);
            let tag = match (pos("frag"), pos("seal")) {
                (Some(f), Some(s)) if s > f => TAG,
                _ => 0,
            };
            let bound = preamble + p.a.layout().header_len() + FRAG + tag;
            let mut got = Got::default();
            for n in [FRAG - TAG, FRAG - 1, FRAG, FRAG + 1] {
                let m = payload(0x33, n, n);
                one_way(&mut p, &mut got, true, &m)
                    .unwrap_or_else(|e| panic!("{spec} {mode:?}: {e}"));
            }
            let wire = p.wire.take().unwrap_or_default();
            let largest = wire.iter().map(|(_, d)| d.len()).max().unwrap_or(0);
            assert!(
                largest <= bound,
                "{spec} {mode:?}: a {largest}-byte datagram, more than {bound}"
            );
        }
    }
}

/// A responder that sends before the initiator's first datagram reached it is heard: its
/// messages wait until it has learnt the connection identification from the initiator (before,
/// they left without it, the initiator dropped them as another connection's, and `window`
/// retransmitted its copies of them, stale identification included, without end).
#[test]
fn responder_speaking_first_is_heard_accelerated() {
    let mut p = Pair::accelerated("window(16)", lossy(0)).unwrap_or_else(|e| panic!("{e}"));
    let m = payload(0x44, 0, 8);
    p.b.send(p.now, &m).unwrap_or_else(|e| panic!("{e}"));
    p.a.send(p.now, &m).unwrap_or_else(|e| panic!("{e}"));
    let mut got = Got::default();
    settle(&mut p, &mut got).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(got.a, vec![m.clone()]);
    assert_eq!(got.b, vec![m]);
}
