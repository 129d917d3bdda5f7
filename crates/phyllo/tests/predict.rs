//! Layers that cannot lie to the fast path (van Renesse, "Masking the Overhead of Protocol
//! Layering" (seed 004 §3.2)): a layer that does not declare predictions has its pre-phases run on
//! the fast path, and works; a layer that claims to predict but mispredicts is caught by the fast
//! path's check against the layered path, which names it: with `FastPathCheck::Every` (debug
//! builds) in a panic, with `FastPathCheck::Sampled` (release builds) by taking the layered path
//! from then on.

mod common;
use common::*;
use phyllo::accel::{AccelStats, Miss, CHECK_FIRST, CHECK_PERIOD};
use phyllo::field::{FieldClass, FieldHandle};
use phyllo::layer::{Cx, DropReason, Handoff, Hdr, InitCx, Packet, Predict, Verdict};
use phyllo::layers::{Checksum, Frag, Window};
use phyllo::layout::FieldRegistry;
use phyllo::stack::DynStack;
use phyllo::testing::memlink::{Faults, MemLink};
use phyllo::testing::Pair;
use phyllo::{Config, Connection, FastPathCheck, Layer, Role};
use std::time::Duration;

/// Numbers its messages in a protocol-specific field and checks the numbering on delivery.
/// With `claims`, it says it predicts, and its predictions are as `lie` says.
struct Numbered {
    claims: bool,
    lie: Lie,
    field: Option<FieldHandle>,
    sent: u64,
    delivered: u64,
}

/// How a [`Numbered`] that claims to predict gets its predictions wrong. The same function
/// of its counter serves both directions: a lie the sender's checks miss is the value the
/// receiver predicts too.
#[derive(Clone, Copy, Debug)]
enum Lie {
    /// Always zero (right only for the first message).
    Always,
    /// Right, except when the counter is a non-zero multiple of this.
    Every(u64),
    /// Right for counters below this, zero from there on.
    After(u64),
    /// Right except at this counter.
    Once(u64),
    /// Never: an honest layer that predicts.
    Never,
}

impl Lie {
    /// The prediction for counter `n`.
    fn predict(self, n: u64) -> u64 {
        let right = n & 0xffff;
        match self {
            Lie::Always => 0,
            Lie::Every(k) if n > 0 && n.is_multiple_of(k) => right ^ 0x5a5a,
            Lie::After(k) if n >= k => 0,
            Lie::Once(k) if n == k => right ^ 0x5a5a,
            _ => right,
        }
    }
}

impl Numbered {
    fn new(claims: bool) -> Numbered {
        Numbered::lying(claims, Lie::Always)
    }

    fn lying(claims: bool, lie: Lie) -> Numbered {
        Numbered {
            claims,
            lie,
            field: None,
            sent: 0,
            delivered: 0,
        }
    }
}

impl Layer for Numbered {
    fn name(&self) -> &'static str {
        if self.claims {
            "liar"
        } else {
            "numbered"
        }
    }
    fn init(&mut self, fields: &mut FieldRegistry, _: &InitCx) {
        self.field = Some(fields.add_field(FieldClass::ProtoSpecific, "n", 16, None));
    }
    fn predicts(&self) -> bool {
        self.claims
    }
    fn predict_send(&self, p: &mut Predict<'_>) {
        p.set(self.field.unwrap(), self.lie.predict(self.sent));
    }
    fn predict_deliver(&self, p: &mut Predict<'_>) {
        p.set(self.field.unwrap(), self.lie.predict(self.delivered));
    }
    fn pre_send(&self, pkt: &mut Packet<'_>) -> Verdict {
        pkt.set(self.field.unwrap(), self.sent & 0xffff);
        Verdict::Continue
    }
    fn post_send(&mut self, _: &Hdr<'_>, _: Handoff, _: &mut Cx<'_>) {
        self.sent += 1;
    }
    fn pre_deliver(&self, pkt: &mut Packet<'_>) -> Verdict {
        if pkt.get(self.field.unwrap()) == self.delivered & 0xffff {
            Verdict::Continue
        } else {
            Verdict::Drop(DropReason::OutOfWindow)
        }
    }
    fn post_deliver(&mut self, _: &Hdr<'_>, _: Handoff, _: &mut Cx<'_>) {
        self.delivered += 1;
    }
}

fn pair(claims: bool) -> Pair {
    let stack = || -> DynStack {
        vec![
            Box::new(Numbered::new(claims)),
            Box::new(Window::new(16)),
            Box::new(Checksum::new()),
        ]
    };
    Pair::new(
        Connection::new(stack(), Config::accelerated(Role::Initiator)).unwrap(),
        Connection::new(stack(), Config::accelerated(Role::Responder)).unwrap(),
        MemLink::perfect(),
    )
}

#[test]
fn a_layer_without_predictions_works_under_the_accelerator() {
    let mut p = pair(false);
    let msgs: Vec<Vec<u8>> = (0..50).map(|i| payload(i, 8 + i % 3)).collect();
    assert_eq!(exchange(&mut p, &msgs), msgs);
    let a = p.a.accel_stats().unwrap();
    let b = p.b.accel_stats().unwrap();
    // Still the fast path: its pre-phases ran there.
    assert!(a.fast_send_msgs >= 49, "{a:?}");
    assert!(b.fast_deliver_msgs >= 49, "{b:?}");
}

#[test]
#[cfg(debug_assertions)]
#[should_panic(expected = "layer `liar`")]
fn a_layer_that_mispredicts_is_named() {
    let mut p = pair(true);
    let msgs: Vec<Vec<u8>> = (0..5).map(|i| payload(i, 8)).collect();
    exchange(&mut p, &msgs);
}

/// A pair of `numbered:window(16):checksum` (with `frag(1400)` under the numbering if `frag`)
/// whose `Numbered` claims to predict and lies as `lie` says, under `check`, over `link`.
fn numbered_pair(lie: Lie, frag: bool, check: FastPathCheck, link: MemLink) -> Pair {
    let stack = || -> DynStack {
        let mut s: DynStack = vec![Box::new(Numbered::lying(true, lie))];
        if frag {
            s.push(Box::new(Frag::new(1400)));
        }
        s.push(Box::new(Window::new(16)));
        s.push(Box::new(Checksum::new()));
        s
    };
    let cfg = |role| Config {
        fast_path_check: check,
        ..Config::accelerated(role)
    };
    Pair::new(
        Connection::new(stack(), cfg(Role::Initiator)).unwrap(),
        Connection::new(stack(), cfg(Role::Responder)).unwrap(),
        link,
    )
}

/// A link that loses 20 % of the datagrams, reorders and duplicates some, drawn from `seed`.
fn lossy(seed: u64) -> MemLink {
    let faults = Faults {
        loss: 0.2,
        duplicate: 0.05,
        reorder: 0.2,
        corrupt: 0.0,
        delay: Duration::from_micros(50),
        reorder_delay: Duration::from_micros(300),
    };
    MemLink::new(faults, seed)
}

const MESSAGES: usize = 480;

/// 480 messages of 800 to 999 bytes: one per datagram (two never fit one packed datagram),
/// so the layer's counter is the message's index.
fn messages() -> Vec<Vec<u8>> {
    (0..MESSAGES).map(|i| payload(i, 800 + i % 200)).collect()
}

/// The indices in `sent` of the messages `got`, checking that they came in order and at
/// most once (a subsequence of `sent`).
fn delivered_in_order(sent: &[Vec<u8>], got: &[Vec<u8>]) -> Vec<usize> {
    let mut next = 0;
    got.iter()
        .map(|g| {
            let i = next
                + sent[next..]
                    .iter()
                    .position(|m| m == g)
                    .expect("in order, once");
            next = i + 1;
            i
        })
        .collect()
}

/// Messages the receiving end's `Numbered` refused (the only way it loses one).
fn refused_by_numbering(p: &Pair) -> u64 {
    p.b.stats().layers[0].1.drops(DropReason::OutOfWindow)
}

/// The audit's case: a layer that claims to predict and never does, above `window`, on a
/// lossy link, under the check release builds run. Without the check it loses most messages
/// (the next test); with it, the first check (its second message: the first prediction,
/// zero, was right) catches it, that message and every later one take the layered path,
/// and every message arrives in order, exactly once.
#[test]
fn a_sampled_check_sends_a_liar_the_layered_way_and_nothing_is_lost() {
    let msgs = messages();
    for seed in 0..6 {
        let mut p = numbered_pair(Lie::Always, false, FastPathCheck::Sampled, lossy(seed));
        assert_eq!(exchange(&mut p, &msgs), msgs, "seed {seed}");
        let a = p.a.accel_stats().unwrap();
        assert_eq!(a.distrusted_send, Some("liar"), "seed {seed}: {a:?}");
        assert_eq!(a.fast_send_msgs, 1, "seed {seed}");
        assert_eq!(a.send_misses(Miss::Distrusted), MESSAGES as u64 - 1);
        assert_eq!(a.slow_send_msgs, MESSAGES as u64 - 1);
        assert_eq!(refused_by_numbering(&p), 0, "seed {seed}");
    }
}

/// What the check is for: the same liar under `FastPathCheck::Off` (measurement only) loses
/// messages, as the audit found in release builds without a check. The receiver's `window`
/// acknowledges each datagram before the numbering above it refuses it, so none is resent;
/// the refusals are counted, nothing names the layer.
#[test]
fn without_the_check_the_same_liar_loses_messages() {
    let msgs = messages();
    let mut p = numbered_pair(Lie::Always, false, FastPathCheck::Off, lossy(0));
    let got = exchange(&mut p, &msgs);
    delivered_in_order(&msgs, &got);
    assert!(got.len() < MESSAGES / 2, "{} delivered", got.len());
    assert_eq!(refused_by_numbering(&p), (MESSAGES - got.len()) as u64);
    let a = p.a.accel_stats().unwrap();
    assert_eq!(a.distrusted_send, None);
    assert_eq!(a.checked_sends, 0);
}

/// A lie among the first `CHECK_FIRST` sends of a connection is checked before it leaves:
/// the layered path sends that message, nothing wrong reaches the wire, nothing is lost.
#[test]
fn a_lie_among_the_first_checks_never_leaves() {
    const LIE: u64 = 7;
    assert!(LIE < CHECK_FIRST as u64);
    let msgs = messages();
    for seed in 0..4 {
        let mut p = numbered_pair(Lie::Every(LIE), false, FastPathCheck::Sampled, lossy(seed));
        assert_eq!(exchange(&mut p, &msgs), msgs, "seed {seed}");
        let a = p.a.accel_stats().unwrap();
        assert_eq!(a.distrusted_send, Some("liar"));
        // Messages 0 to 6 on the fast path, checked and right; message 7 caught.
        assert_eq!(a.fast_send_msgs, LIE);
        assert_eq!(refused_by_numbering(&p), 0);
    }
}

/// One lie, at message 41: past the first checks and before the first periodic one, so the
/// sample lets it out unchecked. The receiver predicts the same (wrong) value, so its fast
/// path accepts it and nothing is lost, but nothing notices either. If message 40 took the
/// layered path (a message `frag` must fragment), the checks that follow a miss look at
/// message 41 and catch the lie before it leaves.
#[test]
fn the_checks_after_a_miss_catch_a_lie_the_sample_would_let_out() {
    const LIE: u64 = 41;
    assert!(LIE >= CHECK_FIRST as u64 && LIE < (CHECK_FIRST + CHECK_PERIOD - 1) as u64);
    for big in [false, true] {
        let mut msgs = messages();
        if big {
            msgs[40] = payload(40, 3000);
        }
        let mut p = numbered_pair(
            Lie::Once(LIE),
            true,
            FastPathCheck::Sampled,
            MemLink::perfect(),
        );
        assert_eq!(exchange(&mut p, &msgs), msgs, "big {big}");
        let a = p.a.accel_stats().unwrap();
        assert_eq!(refused_by_numbering(&p), 0);
        if big {
            assert_eq!(a.send_misses(Miss::Fragment), 1);
            assert_eq!(a.distrusted_send, Some("liar"));
            // Messages 0 to 39 on the fast path, 40 fragmented, 41 caught.
            assert_eq!(a.fast_send_msgs, 40);
        } else {
            assert_eq!(a.distrusted_send, None, "{a:?}");
            assert_eq!(a.fast_send_msgs, MESSAGES as u64);
        }
    }
}

/// A layer that predicts right for its first 50 messages and wrong from then on. The
/// periodic check (one in `CHECK_PERIOD`) catches it, but not before the lies of the
/// messages in between are on the wire.
///
/// On a perfect link that costs nothing: the receiver predicts the same wrong values, its
/// fast path accepts them in order, and the layered path takes over once the sender is
/// caught. On a lossy link it costs data: a lie that arrives out of order, or resent, goes
/// the receiver's layered path, whose numbering refuses it after the `window` below
/// acknowledged it; the numbering is then out of step for good, so every later message is
/// refused too. Every refusal is counted, the sender names the layer, and what is delivered
/// is in order, exactly once — but messages are lost. Sampling bounds how long a
/// mispredicting layer goes unnoticed, not what its first unnoticed lies do.
#[test]
fn a_layer_that_starts_lying_late_is_caught_by_the_periodic_check() {
    const FROM: u64 = 50;
    let msgs = messages();
    let mut p = numbered_pair(
        Lie::After(FROM),
        false,
        FastPathCheck::Sampled,
        MemLink::perfect(),
    );
    assert_eq!(exchange(&mut p, &msgs), msgs);
    let a = p.a.accel_stats().unwrap();
    assert_eq!(a.distrusted_send, Some("liar"));
    let unchecked_lies = a.fast_send_msgs - FROM;
    assert!(
        unchecked_lies > 0 && unchecked_lies < CHECK_PERIOD as u64,
        "{a:?}"
    );
    assert_eq!(refused_by_numbering(&p), 0);

    let mut lost_runs = 0;
    for seed in 0..6 {
        let mut p = numbered_pair(Lie::After(FROM), false, FastPathCheck::Sampled, lossy(seed));
        let got = exchange(&mut p, &msgs);
        let got = delivered_in_order(&msgs, &got);
        let a = p.a.accel_stats().unwrap();
        assert_eq!(a.distrusted_send, Some("liar"), "seed {seed}");
        assert!(a.fast_send_msgs > FROM && a.fast_send_msgs < FROM + CHECK_PERIOD as u64);
        // Everything before the first lie arrives.
        assert_eq!(
            got[..FROM as usize],
            (0..FROM as usize).collect::<Vec<_>>()[..]
        );
        let lost = MESSAGES - got.len();
        assert_eq!(refused_by_numbering(&p), lost as u64, "seed {seed}");
        lost_runs += usize::from(lost > 0);
    }
    // The truth of this stack on this link: the unchecked lies cost messages in every run.
    assert_eq!(lost_runs, 6);
}

/// An honest stack under the sampled check, over a lossy link with messages `frag` must
/// fragment (misses that start runs of checks): no check fails, everything arrives.
#[test]
fn honest_stacks_are_never_distrusted() {
    let cfg = |role| Config {
        fast_path_check: FastPathCheck::Sampled,
        ..Config::accelerated(role)
    };
    let spec = "frag(1400):window(16):checksum";
    for seed in 0..4 {
        let mut r = rng(seed);
        let msgs: Vec<Vec<u8>> = sizes(&mut r, 300)
            .into_iter()
            .enumerate()
            .map(|(i, n)| payload(i, n.min(8000)))
            .collect();
        let mut p = Pair::new(
            Connection::from_spec(spec, cfg(Role::Initiator)).unwrap(),
            Connection::from_spec(spec, cfg(Role::Responder)).unwrap(),
            lossy(seed),
        );
        assert_eq!(exchange(&mut p, &msgs), msgs, "seed {seed}");
        for end in [&p.a, &p.b] {
            let s = end.accel_stats().unwrap();
            assert_eq!(misses(s, Miss::Distrusted), 0, "seed {seed}: {s:?}");
            assert_eq!((s.distrusted_send, s.distrusted_deliver), (None, None));
        }
        let a = p.a.accel_stats().unwrap();
        assert!(
            a.checked_sends > 0 && a.checked_sends < a.fast_send_msgs,
            "{a:?}"
        );
        assert!(p.b.accel_stats().unwrap().checked_deliveries > 0);
    }
    // A layer that claims to predict and does.
    let msgs = messages();
    for seed in 0..4 {
        let mut p = numbered_pair(Lie::Never, false, FastPathCheck::Sampled, lossy(seed));
        assert_eq!(exchange(&mut p, &msgs), msgs, "seed {seed}");
        for end in [&p.a, &p.b] {
            assert_eq!(misses(end.accel_stats().unwrap(), Miss::Distrusted), 0);
        }
    }
}

fn misses(a: &AccelStats, why: Miss) -> u64 {
    a.send_misses(why) + a.deliver_misses(why)
}

/// Debug builds (every test) check every fast-path operation and panic on a misprediction.
#[test]
#[cfg(debug_assertions)]
fn debug_builds_check_every_operation() {
    assert_eq!(FastPathCheck::DEFAULT, FastPathCheck::Every);
    assert_eq!(
        Config::accelerated(Role::Initiator).fast_path_check,
        FastPathCheck::Every
    );
}

/// Release builds (CI runs this file with `cargo test --release`): the default configuration
/// catches the audit's liar on a lossy link, names it in a counter, and loses nothing.
#[test]
#[cfg(not(debug_assertions))]
fn release_builds_catch_a_liar_by_default_and_lose_nothing() {
    assert_eq!(FastPathCheck::DEFAULT, FastPathCheck::Sampled);
    let msgs = messages();
    for seed in 0..6 {
        let stack = || -> DynStack {
            vec![
                Box::new(Numbered::new(true)),
                Box::new(Window::new(16)),
                Box::new(Checksum::new()),
            ]
        };
        let mut p = Pair::new(
            Connection::new(stack(), Config::accelerated(Role::Initiator)).unwrap(),
            Connection::new(stack(), Config::accelerated(Role::Responder)).unwrap(),
            lossy(seed),
        );
        assert_eq!(exchange(&mut p, &msgs), msgs, "seed {seed}");
        let a = p.a.accel_stats().unwrap();
        assert_eq!(a.distrusted_send, Some("liar"), "seed {seed}: {a:?}");
        assert!(a.send_misses(Miss::Distrusted) > 0, "seed {seed}");
    }
}
