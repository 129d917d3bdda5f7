//! `frag` reassembles a message whatever order its fragments arrive in, with nothing below it
//! that restores order: in order (the common case, appended without a second write), in
//! reverse, in every order of a four-fragment message, and with fragments repeated.
//! Layered and accelerated. And a message of a whole number of the connection's
//! `fragment_payload` leaves in datagrams of one size.

mod common;

use common::{drain, spec_pair};
use phyllo::Time;

const SPEC: &str = "frag:seal";

/// Every order of `0..n`.
fn orders(n: usize) -> Vec<Vec<usize>> {
    if n == 0 {
        return vec![Vec::new()];
    }
    let mut all = Vec::new();
    for rest in orders(n - 1) {
        for at in 0..=rest.len() {
            let mut o = rest.clone();
            o.insert(at, n - 1);
            all.push(o);
        }
    }
    all
}

#[test]
fn fragments_in_any_order_make_the_message() {
    for accel in [false, true] {
        let (mut a, mut b) = spec_pair(SPEC, accel);
        let now = Time(1_000);
        // Four fragments: the message's size is found from the first one sent.
        let probe: Vec<u8> = (0..4000u32).map(|i| (i * 7 + i / 13) as u8).collect();
        a.send(now, &probe).unwrap();
        let n = drain(&mut a).len();
        assert!(n >= 3, "accel {accel}: {n} datagrams");
        let mut cases = orders(n.min(4));
        cases.push((0..n).rev().collect());
        cases.push((0..n).chain(0..n).collect());
        for (k, order) in cases.iter().enumerate() {
            let msg: Vec<u8> = probe.iter().map(|&x| x ^ k as u8).collect();
            a.send(now, &msg).unwrap();
            let frags = drain(&mut a);
            assert_eq!(frags.len(), n);
            // Orders of fewer fragments than the message has send the rest in order.
            let mut seq: Vec<usize> = order.clone();
            seq.extend(order.len()..n);
            for &i in &seq {
                b.handle_datagram(now, &frags[i]);
            }
            let got = b.poll_delivery().map(|m| m.data().to_vec());
            assert_eq!(
                got.as_deref(),
                Some(&msg[..]),
                "accel {accel}, order {seq:?}"
            );
            assert!(
                b.poll_delivery().is_none(),
                "accel {accel}: delivered twice"
            );
        }
    }
}

#[test]
fn a_message_of_whole_fragments_leaves_in_datagrams_of_one_size() {
    for accel in [false, true] {
        let (mut a, mut b) = spec_pair(SPEC, accel);
        let now = Time(1_000);
        let chunk = a.fragment_payload().expect("frag cuts messages");
        let msg: Vec<u8> = (0..5 * chunk).map(|i| (i % 251) as u8).collect();
        a.send(now, &msg).unwrap();
        let frags = drain(&mut a);
        assert_eq!(frags.len(), 5, "accel {accel}");
        assert!(
            frags.iter().all(|f| f.len() == frags[0].len()),
            "accel {accel}: {:?}",
            frags.iter().map(Vec::len).collect::<Vec<_>>()
        );
        for f in &frags {
            b.handle_datagram(now, f);
        }
        let got = b.poll_delivery().map(|m| m.data().to_vec());
        assert_eq!(got.as_deref(), Some(&msg[..]), "accel {accel}");
        // One byte more takes a sixth, shorter datagram.
        a.send(now, &[0u8; 1][..].repeat(5 * chunk + 1)).unwrap();
        assert_eq!(drain(&mut a).len(), 6, "accel {accel}");
    }
}
