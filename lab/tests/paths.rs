//! Seed 000's reference stacks: every version of each stack is the same protocol — the same
//! datagrams on the wire and the same deliveries for the same inputs and faults — and STD and
//! ALL survive heavy faults, deliver everything once and in order when the link heals, and back
//! off while it is dark.

// The protocol crate's test helpers (schedules, payloads, the exchange loop), shared.
#[path = "../../crates/phyllo/tests/common/mod.rs"]
mod common;
use common::*;
use phyllo::conn::BuildError;
use phyllo::testing::memlink::Side;
use phyllo::testing::memlink::{Faults, MemLink};
use phyllo::testing::Pair;
use phyllo::{Config, Connection, LayerSet, Role};
use phyllo_lab::paths::{with_stack, OnStack, StackKind, Version};
use phyllo_lab::soak::{run_with, Outcome, SoakConfig};

/// Messages A sends B over a link with `faults`: what B got and every datagram on the wire.
struct Exchange<'a> {
    seed: u64,
    faults: Faults,
    msgs: &'a [Vec<u8>],
}

type Seen = (Vec<Vec<u8>>, Vec<(Side, Vec<u8>)>);

impl OnStack for Exchange<'_> {
    type Out = Result<Seen, BuildError>;
    fn run<S: LayerSet + Send + 'static, M: FnMut(Config) -> Result<Connection<S>, BuildError>>(
        self,
        mut make: M,
    ) -> Self::Out {
        let mut p = Pair::new(
            make(Config::new(Role::Initiator))?,
            make(Config::new(Role::Responder))?,
            MemLink::new(self.faults, self.seed),
        );
        p.wire = Some(Vec::new());
        let got = exchange(&mut p, self.msgs);
        Ok((got, p.wire.take().unwrap_or_default()))
    }
}

#[test]
fn every_version_is_the_same_protocol() {
    for kind in StackKind::BOTH {
        for seed in 0..40 {
            let mut r = rng(seed);
            let f = faults(&mut r);
            // Up to 8 KiB: the tall stack fragments what exceeds 1400 bytes.
            let msgs: Vec<Vec<u8>> = sizes(&mut r, 8)
                .into_iter()
                .enumerate()
                .map(|(i, n)| payload(i, n.min(8192)))
                .collect();
            let mut seen: Vec<(Version, Seen)> = Vec::new();
            for v in Version::ALL {
                let e = Exchange {
                    seed,
                    faults: f.clone(),
                    msgs: &msgs,
                };
                seen.push((v, with_stack(kind, v, e).unwrap()));
            }
            let (_, (got0, wire0)) = &seen[0];
            assert_eq!(got0, &msgs, "{kind:?} seed {seed}: BAD delivered wrong");
            assert!(!wire0.is_empty());
            for (v, (got, wire)) in &seen[1..] {
                assert_eq!(got, &msgs, "{kind:?} {v:?} seed {seed}");
                assert_eq!(
                    wire.len(),
                    wire0.len(),
                    "{kind:?} {v:?} seed {seed}: datagrams"
                );
                for (k, (a, b)) in wire.iter().zip(wire0).enumerate() {
                    assert!(a == b, "{kind:?} {v:?} seed {seed}: datagram {k} differs");
                }
            }
        }
    }
}

/// The soak harness's heavy faults (loss up to 45 %, duplication, reordering, corruption),
/// a blackout, then a healed link.
struct Soak(u64);

impl OnStack for Soak {
    type Out = Result<phyllo_lab::soak::RunReport, BuildError>;
    fn run<S: LayerSet + Send + 'static, M: FnMut(Config) -> Result<Connection<S>, BuildError>>(
        self,
        make: M,
    ) -> Self::Out {
        let cfg = SoakConfig {
            // Each message fragments into at most a few dozen 1400-byte pieces.
            max_message: 32 << 10,
            ..SoakConfig::default()
        };
        run_with(self.0, false, &cfg, make)
    }
}

#[test]
fn std_and_all_survive_heavy_faults_and_heal() {
    for kind in StackKind::BOTH {
        for v in [Version::Std, Version::All] {
            for seed in 0..100 {
                let r = with_stack(kind, v, Soak(seed)).unwrap();
                assert_eq!(
                    r.outcome,
                    Outcome::Pass,
                    "{kind:?} {v:?} seed {seed}: {r:?}"
                );
                assert!(r.backed_off, "{kind:?} {v:?} seed {seed}: {r:?}");
            }
        }
    }
}

/// The classifier at B, learned from one of A's datagrams, takes every datagram of A's flow
/// (data, acknowledgements, fragments, under faults) and nothing of the reverse flow or with a
/// changed identifying field.
struct Classify;

impl OnStack for Classify {
    type Out = Result<(), BuildError>;
    fn run<S: LayerSet + Send + 'static, M: FnMut(Config) -> Result<Connection<S>, BuildError>>(
        self,
        mut make: M,
    ) -> Self::Out {
        use phyllo_lab::paths::classify::{Classifier, Route};
        for seed in 0..10 {
            let mut r = rng(seed);
            let msgs: Vec<Vec<u8>> = sizes(&mut r, 8)
                .into_iter()
                .enumerate()
                .map(|(i, n)| payload(i, n.min(8192)))
                .collect();
            let mut p = Pair::new(
                make(Config::new(Role::Initiator))?,
                make(Config::new(Role::Responder))?,
                MemLink::new(faults(&mut r), seed),
            );
            p.wire = Some(Vec::new());
            assert_eq!(exchange(&mut p, &msgs), msgs);
            let wire = p.wire.take().unwrap_or_default();
            let first = wire
                .iter()
                .find(|(s, _)| *s == Side::A)
                .map(|(_, d)| d.clone());
            let kind = if p.b.layout().find("bid").is_some() {
                StackKind::Tall
            } else {
                StackKind::Short
            };
            let fields = phyllo_lab::paths::classify::flow_fields(kind);
            let c = Classifier::learn(p.b.layout(), fields, &first.unwrap_or_default()).unwrap();
            for (side, d) in &wire {
                let want = if *side == Side::A {
                    Route::Inlined
                } else {
                    Route::General
                };
                // Corrupted datagrams may have hit an identifying field; the rest must route.
                if c.route(d) != want {
                    assert!(*side == Side::A, "a reverse datagram matched");
                }
            }
            let from_a: Vec<&Vec<u8>> = wire
                .iter()
                .filter(|(s, _)| *s == Side::A)
                .map(|(_, d)| d)
                .collect();
            let hits = from_a.iter().filter(|d| c.matches(d)).count();
            assert!(
                hits * 100 >= from_a.len() * 95,
                "{hits} of {}",
                from_a.len()
            );
            // Any identifying byte changed: no match.
            let h = p.b.layout().header_len();
            let mask = p.b.layout().mask_of(fields).unwrap();
            let d = from_a.iter().find(|d| c.matches(d)).unwrap();
            for (i, m) in mask.iter().enumerate().take(h) {
                if *m != 0 {
                    let mut x = d.to_vec();
                    x[i] ^= m;
                    assert!(!c.matches(&x), "byte {i} changed and still matched");
                }
            }
            assert!(!c.matches(&d[..h - 1]), "a short datagram matched");
        }
        Ok(())
    }
}

#[test]
fn the_classifier_takes_its_flow_and_nothing_else() {
    for kind in StackKind::BOTH {
        with_stack(kind, Version::All, Classify).unwrap();
    }
}

/// Bad input: random datagrams and valid ones with one bit flipped, into every code version of
/// both stacks — refused and counted, never a panic, and nothing delivered that A did not send.
/// (One bit: the frame check is an Internet checksum, which catches every single-bit error but
/// not every pair — compensating flips in two words cancel; sealed stacks are for strangers.)
struct Garbage;

impl OnStack for Garbage {
    type Out = Result<(), BuildError>;
    fn run<S: LayerSet + Send + 'static, M: FnMut(Config) -> Result<Connection<S>, BuildError>>(
        self,
        mut make: M,
    ) -> Self::Out {
        use rand::Rng;
        let mut p = Pair::new(
            make(Config::new(Role::Initiator))?,
            make(Config::new(Role::Responder))?,
            MemLink::perfect(),
        );
        p.wire = Some(Vec::new());
        let msgs: Vec<Vec<u8>> = (0..4).map(|i| payload(i, 100 + i * 900)).collect();
        assert_eq!(exchange(&mut p, &msgs), msgs);
        let valid: Vec<Vec<u8>> = p
            .wire
            .take()
            .unwrap_or_default()
            .into_iter()
            .filter(|(s, _)| *s == Side::A)
            .map(|(_, d)| d)
            .collect();
        let mut r = rng(77);
        let mut b = make(Config::new(Role::Responder))?;
        for k in 0..3000u64 {
            let d: Vec<u8> = if k % 2 == 0 {
                let n = r.random_range(0..200);
                (0..n).map(|_| r.random()).collect()
            } else {
                let mut d = valid[r.random_range(0..valid.len())].clone();
                let i = r.random_range(0..d.len());
                d[i] ^= 1 << r.random_range(0..8);
                d
            };
            let now = phyllo::Time(k * 1_000_000);
            b.handle_datagram(now, &d);
            b.handle_timeout(now);
            while let Some(m) = b.poll_delivery() {
                assert!(
                    msgs.iter().any(|x| x == m.data()),
                    "a forged message was delivered"
                );
                b.recycle(m);
            }
            while let Some(m) = b.poll_transmit() {
                b.recycle(m);
            }
        }
        Ok(())
    }
}

#[test]
fn bad_input_is_refused_without_a_panic() {
    for kind in StackKind::BOTH {
        for v in [Version::Std, Version::Out, Version::Pin] {
            with_stack(kind, v, Garbage).unwrap();
        }
    }
}

#[test]
fn pin_places_the_tall_stacks_fields_at_compile_time() {
    // PIN's tall stack computes the layout the connection compiles at run time, so its
    // pre-phases take the constant places (the wire is checked above against every version).
    for role in [Role::Initiator, Role::Responder] {
        let c = Connection::new(phyllo_lab::paths::tall_pin(), Config::new(role)).unwrap();
        assert!(c.layers().places_hold(c.layout()));
    }
}
