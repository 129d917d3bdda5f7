//! What `Connection::handle_datagram` says a datagram did, layered and accelerated: a new
//! datagram is accepted; a copy of one already handled is refused by `seal`'s replay window
//! (it proves nothing about its sender); a retransmission the window already has is
//! authenticated as new by `seal` and refused above it (`FreshRefused`: the peer is alive and
//! there); garbage is refused; a stack without a keyed layer never says `FreshRefused`.

mod common;

use common::{drain, spec_pair};
use phyllo::layer::DropReason;
use phyllo::{Received, Refusal, Time};

const SPEC: &str = "window(16):checksum:seal";

#[test]
fn a_datagram_says_whether_it_was_new_authentic_and_accepted() {
    for accel in [false, true] {
        let (mut a, mut b) = spec_pair(SPEC, accel);
        let mut now = Time(1_000);
        a.send(now, b"first").unwrap();
        let first = drain(&mut a);
        assert_eq!(first.len(), 1, "accel {accel}");
        assert_eq!(b.handle_datagram(now, &first[0]), Received::Accepted);
        // The same bytes again: seal has seen the nonce.
        assert_eq!(
            b.handle_datagram(now, &first[0]),
            Received::Refused(Refusal::Layer {
                name: "seal",
                reason: DropReason::Replay
            }),
            "accel {accel}"
        );
        // Garbage, and a truncated datagram: refused, proving nothing.
        assert!(!b.handle_datagram(now, &[0x55; 40]).is_fresh());
        assert_eq!(
            b.handle_datagram(now, &first[0][..3]),
            Received::Refused(Refusal::Unadmitted)
        );
        // B's acknowledgement is lost: A retransmits under a new nonce, which the window
        // already has.
        drain(&mut b);
        let mut retransmitted = Vec::new();
        for _ in 0..200 {
            now = now + std::time::Duration::from_millis(10);
            if a.poll_timeout().is_some_and(|t| t <= now) {
                a.handle_timeout(now);
            }
            retransmitted = drain(&mut a);
            if !retransmitted.is_empty() {
                break;
            }
        }
        assert!(
            !retransmitted.is_empty(),
            "accel {accel}: no retransmission"
        );
        assert_ne!(retransmitted[0], first[0], "a new nonce");
        let r = b.handle_datagram(now, &retransmitted[0]);
        assert!(
            matches!(
                r,
                Received::FreshRefused(Refusal::Layer { name: "window", .. })
            ),
            "accel {accel}: {r:?}"
        );
        assert!(r.is_fresh() && !r.is_accepted());
        let mut got = Vec::new();
        while let Some(m) = b.poll_delivery() {
            got.push(m.data().to_vec());
        }
        assert_eq!(got, [b"first".to_vec()], "delivered once");
    }
}

#[test]
fn without_a_keyed_layer_a_refusal_proves_nothing() {
    for accel in [false, true] {
        let (mut a, mut b) = spec_pair("window(16):checksum", accel);
        let now = Time(1_000);
        a.send(now, b"x").unwrap();
        let d = drain(&mut a);
        assert_eq!(b.handle_datagram(now, &d[0]), Received::Accepted);
        // A duplicate: refused by the window, and nothing authenticated it.
        let r = b.handle_datagram(now, &d[0]);
        assert!(matches!(r, Received::Refused(_)), "accel {accel}: {r:?}");
    }
}
