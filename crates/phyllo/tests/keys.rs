//! Keys: every connection has keys of its own, from a handshake ([`Config::pair`] runs one in
//! memory), so no (key, nonce) pair ever repeats across connections and nothing recorded from
//! one connection is accepted by another — layered and accelerated. A configuration keys one
//! connection (its clones share the grant), and within a connection every layer has its own
//! keys (`seal:seal`).

mod common;
use common::*;
use phyllo::conn::BuildError;
use phyllo::layer::{Cx, DropReason, Handoff, Hdr, InitCx, Layer, Packet, Verdict};
use phyllo::layers::Seal;
use phyllo::layout::FieldRegistry;
use phyllo::stack::DynStack;
use phyllo::testing::memlink::{MemLink, Side};
use phyllo::testing::Pair;
use phyllo::{Config, Connection, DynConnection, Time};
use std::sync::{Arc, Mutex};

const TAG: usize = 16;

/// The messages both pairs carry: short ones (the split AES-GCM path), long ones (`ring`'s),
/// and some that fragment.
fn messages() -> Vec<Vec<u8>> {
    (0..40).map(|i| payload(i, 1 + (i * 97) % 3000)).collect()
}

/// The 4-layer stack with a second `seal`.
const TWO_SEALS: &str = "frag(1400):window(16):checksum:seal:seal";

/// A pair of `spec` keyed by its own [`Config::pair`]; accelerated ends get fixed cookies, so
/// two such pairs differ only in their keys.
fn keyed_pair(spec: &str, accelerated: bool) -> Pair {
    let (mut a, mut b) = Config::pair(accelerated).unwrap();
    a.cookie = Some(0x0123_4567_89ab_cdef);
    b.cookie = Some(0x0fed_cba9_8765_4321);
    let mut p = Pair::new(
        Connection::from_spec(spec, a).unwrap(),
        Connection::from_spec(spec, b).unwrap(),
        MemLink::perfect(),
    );
    p.wire = Some(Vec::new());
    p
}

/// The datagrams a fresh pair puts on the wire carrying `messages()` from A to B.
fn recorded(accelerated: bool) -> Vec<(Side, Vec<u8>)> {
    let mut p = keyed_pair(SPEC4, accelerated);
    let msgs = messages();
    assert_eq!(exchange(&mut p, &msgs), msgs);
    p.wire.take().unwrap()
}

fn no_datagram_repeats_across_pairs(accelerated: bool) {
    let (w1, w2) = (recorded(accelerated), recorded(accelerated));
    // The same protocol both times: the same datagrams, in the same order, of the same
    // lengths, from the same ends, carrying the same plaintexts under the same nonces ...
    assert_eq!(w1.len(), w2.len());
    for (k, ((s1, d1), (s2, d2))) in w1.iter().zip(&w2).enumerate() {
        assert_eq!((s1, d1.len()), (s2, d2.len()), "datagram {k}");
    }
    // ... and yet not one datagram, nor one authentication tag, of the one pair's appears in
    // the other's,
    let tag = |d: &[u8]| d[d.len() - TAG..].to_vec();
    for (k, (_, d)) in w1.iter().enumerate() {
        assert!(
            !w2.iter().any(|(_, e)| e == d),
            "accelerated {accelerated}: datagram {k} of the first pair reappeared"
        );
        assert!(
            !w2.iter().any(|(_, e)| tag(e) == tag(d)),
            "accelerated {accelerated}: the tag of datagram {k} reappeared"
        );
    }
    // and no ciphertext either: the last bytes before the tag of a long datagram are body,
    // the same plaintext in both, so they would be the same bytes under a repeated (key,
    // nonce) pair (headers, which the accelerator's random connection identification sets
    // apart, are not compared).
    let mut bodies = 0;
    for (k, ((_, d1), (_, d2))) in w1.iter().zip(&w2).enumerate() {
        if d1.len() >= 200 {
            let end = d1.len() - TAG;
            assert!(
                d1[end - 64..end] != d2[end - 64..end],
                "accelerated {accelerated}: datagram {k}: the same ciphertext in both pairs"
            );
            bodies += 1;
        }
    }
    assert!(bodies >= 10, "{bodies} long datagrams");
}

#[test]
fn two_pairs_never_put_the_same_datagram_on_the_wire_layered() {
    no_datagram_repeats_across_pairs(false);
}

#[test]
fn two_pairs_never_put_the_same_datagram_on_the_wire_accelerated() {
    no_datagram_repeats_across_pairs(true);
}

/// Everything a connection refused so far: the stack's drops and the accelerator's.
fn refusals(c: &DynConnection) -> u64 {
    c.stats().input_drops()
        + c.accel_stats().map_or(0, |a| {
            a.unknown_cookie + a.unknown_conn + a.bad_packing + a.truncated
        })
}

fn a_recording_is_refused_by_another_pairs_responder(accelerated: bool) {
    let from_a: Vec<Vec<u8>> = recorded(accelerated)
        .into_iter()
        .filter(|(s, _)| *s == Side::A)
        .map(|(_, d)| d)
        .collect();
    assert!(!from_a.is_empty());
    let (_, b) = Config::pair(accelerated).unwrap();
    let mut fresh = Connection::from_spec(SPEC4, b).unwrap();
    for (k, d) in from_a.iter().enumerate() {
        let before = refusals(&fresh);
        fresh.handle_datagram(Time(1_000 * (k as u64 + 1)), d);
        assert_eq!(
            refusals(&fresh),
            before + 1,
            "accelerated {accelerated}: recorded datagram {k} not counted as a drop"
        );
        assert!(fresh.poll_delivery().is_none());
    }
    assert_eq!(fresh.stats().delivered, 0);
    // Refused by the key, not only by the accelerator's demultiplexing: the datagrams that
    // carried the identification reached `seal` and failed authentication.
    assert!(fresh.stats().drops(DropReason::Auth) > 0);
}

#[test]
fn a_recorded_datagram_is_refused_by_another_pairs_fresh_responder_layered() {
    a_recording_is_refused_by_another_pairs_responder(false);
}

#[test]
fn a_recorded_datagram_is_refused_by_another_pairs_fresh_responder_accelerated() {
    a_recording_is_refused_by_another_pairs_responder(true);
}

#[test]
fn a_second_connection_from_a_cloned_config_fails_with_keys_used() {
    for accelerated in [false, true] {
        let (a, b) = Config::pair(accelerated).unwrap();
        let (a2, b2) = (a.clone(), b.clone());
        Connection::from_spec(SPEC4, a).unwrap();
        Connection::from_spec(SPEC4, b).unwrap();
        for again in [a2, b2] {
            let Err(e) = Connection::from_spec(SPEC4, again) else {
                panic!("a second connection was keyed by the same keys");
            };
            assert!(matches!(e, BuildError::KeysUsed), "{e}");
            assert_eq!(
                e.to_string(),
                "these session keys already keyed a connection: every connection needs keys \
                 of its own"
            );
        }
    }
    // The grant is taken by any connection built from it, whatever its stack.
    let (a, _) = Config::pair(false).unwrap();
    let a2 = a.clone();
    Connection::from_spec("window(16)", a).unwrap();
    assert!(matches!(
        Connection::from_spec("window(16)", a2),
        Err(BuildError::KeysUsed)
    ));
}

#[test]
fn a_stack_of_two_seals_delivers() {
    for accelerated in [false, true] {
        let mut p = keyed_pair(TWO_SEALS, accelerated);
        let msgs = messages();
        assert_eq!(exchange(&mut p, &msgs), msgs, "accelerated {accelerated}");
    }
}

/// A layer that records the keys it is given (a layer of one's own reads them in `init`).
struct KeyProbe(Arc<Mutex<Vec<[u8; 64]>>>);

impl Layer for KeyProbe {
    fn name(&self) -> &'static str {
        "probe"
    }
    fn init(&mut self, _: &mut FieldRegistry, cx: &InitCx) {
        let k = cx.session.as_ref().expect("keys");
        let mut both = [0u8; 64];
        both[..32].copy_from_slice(k.initiator_to_responder());
        both[32..].copy_from_slice(k.responder_to_initiator());
        self.0.lock().unwrap().push(both);
    }
    fn pre_send(&self, _: &mut Packet<'_>) -> Verdict {
        Verdict::Continue
    }
    fn post_send(&mut self, _: &Hdr<'_>, _: Handoff, _: &mut Cx<'_>) {}
    fn pre_deliver(&self, _: &mut Packet<'_>) -> Verdict {
        Verdict::Continue
    }
    fn post_deliver(&mut self, _: &Hdr<'_>, _: Handoff, _: &mut Cx<'_>) {}
}

#[test]
fn every_layer_gets_keys_of_its_own_and_both_ends_the_same() {
    let (a, b) = Config::pair(false).unwrap();
    let keys = |cfg| {
        let seen = Arc::new(Mutex::new(Vec::new()));
        let stack: DynStack = vec![
            Box::new(KeyProbe(seen.clone())),
            Box::new(Seal::new()),
            Box::new(KeyProbe(seen.clone())),
            Box::new(Seal::new()),
        ];
        Connection::new(stack, cfg).unwrap();
        let v = seen.lock().unwrap().clone();
        v
    };
    let (ka, kb) = (keys(a), keys(b));
    assert_eq!(ka.len(), 2);
    assert_eq!(ka, kb, "both ends derive the same keys for each layer");
    assert_ne!(ka[0], ka[1], "layers 0 and 2 share keys");
    assert_ne!(ka[0][..32], ka[0][32..], "the two directions share a key");
}
