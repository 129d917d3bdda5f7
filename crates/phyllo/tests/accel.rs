//! The Protocol Accelerator (van Renesse, "Masking the Overhead of Protocol Layering" (seed 004)):
//! compact headers, fast-path hit ratio, correctness under loss and reordering with the fast path
//! resuming, first-message loss, packing, byte order, and bad input.

mod common;
use common::*;
use phyllo::accel::preamble::Preamble;
use phyllo::testing::memlink::{Faults, MemLink};
use phyllo::testing::Pair;
use phyllo::{Config, Connection, Role, Time};
use std::time::Duration;

const SPEC3: &str = "frag(1400):window(16):checksum";
const SPEC4_CHACHA: &str = "frag(1400):window(16):checksum:seal(chacha)";

#[test]
fn compact_header_of_an_ordinary_data_message_is_at_most_16_bytes() {
    let plain = Connection::from_spec(SPEC3, Config::new(Role::Initiator)).unwrap();
    let fast = Connection::from_spec(SPEC3, Config::accelerated(Role::Initiator)).unwrap();
    assert_eq!(
        plain.data_header_bytes(),
        16,
        "per-layer 4-byte-aligned headers"
    );
    assert!(
        fast.data_header_bytes() <= 16,
        "{}",
        fast.data_header_bytes()
    );
    // And what is measured on the wire agrees, once the peer knows the cookie.
    let mut pair = Pair::accelerated(SPEC3, MemLink::perfect()).unwrap();
    let msgs: Vec<Vec<u8>> = (0..50).map(|i| payload(i, 8)).collect();
    for m in &msgs {
        assert_eq!(
            exchange(&mut pair, std::slice::from_ref(m)),
            vec![m.clone()]
        );
    }
    pair.wire = Some(Vec::new());
    exchange(&mut pair, &[vec![1u8; 8]]);
    let first = &pair.wire.as_ref().unwrap()[0].1;
    assert_eq!(first.len(), fast.data_header_bytes() + 8);
}

fn pingpong<S: phyllo::LayerSet>(pair: &mut Pair<S>, rounds: usize) {
    for r in 0..rounds {
        let m = payload(r, 8);
        pair.a.send(pair.now, &m).unwrap();
        let echo = loop {
            if let Some(d) = pair.b.poll_delivery() {
                break d;
            }
            assert!(pair.step(), "round {r} stalled");
        };
        assert_eq!(echo.data(), &m[..]);
        pair.b.send(pair.now, echo.data()).unwrap();
        pair.b.recycle(echo);
        let back = loop {
            if let Some(d) = pair.a.poll_delivery() {
                break d;
            }
            assert!(pair.step(), "round {r} echo stalled");
        };
        pair.a.recycle(back);
    }
}

#[test]
fn fast_path_hit_ratio_ping_pong_and_stream() {
    for spec in [SPEC3, SPEC4] {
        let mut pair = Pair::accelerated(spec, MemLink::perfect()).unwrap();
        pingpong(&mut pair, 2000);
        for end in [&pair.a, &pair.b] {
            let s = end.accel_stats().unwrap();
            assert!(s.hit_ratio() >= 0.99, "{spec} ping-pong: {s:?}");
        }

        let mut pair = Pair::accelerated(spec, MemLink::perfect()).unwrap();
        let msgs: Vec<Vec<u8>> = (0..20_000).map(|i| payload(i, 8)).collect();
        assert!(exchange(&mut pair, &msgs) == msgs);
        let (a, b) = (pair.a.accel_stats().unwrap(), pair.b.accel_stats().unwrap());
        let ratio = (a.fast_send_msgs + b.fast_deliver_msgs) as f64
            / (a.fast_send_msgs + a.slow_send_msgs + b.fast_deliver_msgs + b.slow_deliver_msgs)
                as f64;
        assert!(ratio >= 0.99, "{spec} stream: {ratio} {a:?} {b:?}");
        assert!(a.packed_datagrams > 0, "the stream was packed");
    }
}

#[test]
fn reliable_under_loss_and_reordering_with_the_accelerator() {
    for seed in 0..500u64 {
        let mut r = rng(seed);
        let f = Faults {
            loss: 0.05,
            reorder: 0.05,
            reorder_delay: Duration::from_micros(300),
            duplicate: 0.01,
            corrupt: 0.01,
            ..Faults::none(Duration::from_micros(20))
        };
        let msgs: Vec<Vec<u8>> = sizes(&mut r, 12)
            .into_iter()
            .enumerate()
            .map(|(i, n)| payload(i, n))
            .collect();
        let spec = if seed % 2 == 0 { SPEC4 } else { SPEC3 };
        let mut pair = Pair::accelerated(spec, MemLink::new(f.clone(), seed)).unwrap();
        let got = exchange(&mut pair, &msgs);
        assert!(
            got == msgs,
            "dynamic seed {seed}: {} of {}",
            got.len(),
            msgs.len()
        );
        let mut pair = static_pair_with(MemLink::new(f, seed), true);
        let got = exchange(&mut pair, &msgs);
        assert!(
            got == msgs,
            "static seed {seed}: {} of {}",
            got.len(),
            msgs.len()
        );
    }
}

#[test]
fn fast_path_resumes_after_recovery() {
    let f = Faults {
        loss: 0.2,
        ..Faults::none(Duration::from_micros(20))
    };
    let mut pair = Pair::accelerated(SPEC3, MemLink::new(f, 42)).unwrap();
    let msgs: Vec<Vec<u8>> = (0..200).map(|i| payload(i, 100)).collect();
    assert!(exchange(&mut pair, &msgs) == msgs);
    let lossy = pair.b.accel_stats().unwrap().clone();
    assert!(
        lossy.deliver_miss.iter().sum::<u64>() > 0,
        "loss forced misses"
    );
    // Now a perfect link: the fast path takes over again.
    pair.link = MemLink::perfect();
    pingpong(&mut pair, 500);
    let after = pair.b.accel_stats().unwrap();
    let fast = after.fast_deliver_msgs - lossy.fast_deliver_msgs;
    let slow = after.slow_deliver_msgs - lossy.slow_deliver_msgs;
    assert!(fast >= 495 && slow <= 5, "fast {fast} slow {slow}");
}

/// The datagrams `c` transmits now, except those whose running number (counted in `n`)
/// is in `drop`. With `lend` the link borrows them (`transmit_with`: an accelerated send's
/// retransmission copy is then the datagram itself), else takes them (`poll_transmit`).
fn transmitted_except(
    c: &mut phyllo::DynConnection,
    drop: &[usize],
    n: &mut usize,
    lend: bool,
) -> Vec<Vec<u8>> {
    let mut keep = Vec::new();
    let mut take = |m: &phyllo::Msg| {
        if !drop.contains(n) {
            keep.push(m.data().to_vec());
        }
        *n += 1;
    };
    if lend {
        while c.transmit_ready() > 0 {
            let lent = c.transmit_with(2, |queued| {
                queued.iter().for_each(&mut take);
                Ok::<_, ()>(queued.len())
            });
            assert!(lent.is_ok_and(|k| k > 0));
        }
    } else {
        while let Some(m) = c.poll_transmit() {
            take(&m);
            c.recycle(m);
        }
    }
    keep
}

/// Drive A→B by hand, dropping chosen datagrams, and check what B delivers: unsealed, sealed
/// (AES-256-GCM, whose seal a resend takes back) and sealed with ChaCha20-Poly1305 (which
/// cannot take itself back: its copies are taken before the seal), A's datagrams taken and
/// lent.
fn first_loss_case(drop_a: &[usize], drop_b: &[usize]) {
    for spec in [SPEC3, SPEC4, SPEC4_CHACHA] {
        first_loss_case_with(spec, drop_a, drop_b, false);
        first_loss_case_with(spec, drop_a, drop_b, true);
    }
}

/// [`first_loss_case`] on `spec` with A's datagrams lent to the link or taken. When lent, A
/// also post-processes every third round before the link sees its datagram, so the deferred
/// retransmission copy is settled both ways: from the returned datagram and from the queue.
/// The messages run from 10 to 67 bytes, but one of 3000 the layered path cuts into
/// fragments. Sealed, a fast-path message's copy is its sealed datagram (the seal taken back
/// only when it is resent), a fragment's is taken before the seal, and both kinds sit in the
/// window together.
fn first_loss_case_with(spec: &str, drop_a: &[usize], drop_b: &[usize], lend: bool) {
    let mut pair = Pair::accelerated(
        spec,
        MemLink::new(Faults::none(Duration::from_micros(10)), 0),
    )
    .unwrap();
    let msgs: Vec<Vec<u8>> = (0..20)
        .map(|i| payload(i, if i == 7 { 3000 } else { 10 + 3 * i }))
        .collect();
    let (mut na, mut nb) = (0, 0);
    let mut got = Vec::new();
    let mut next = 0;
    for _ in 0..100_000 {
        if next < msgs.len() {
            pair.a.send(pair.now, &msgs[next]).unwrap();
            next += 1;
        }
        // Filter what each side transmits before the link sees it.
        if lend && next % 3 == 0 {
            pair.a.post_process(pair.now);
        }
        let keep_a = transmitted_except(&mut pair.a, drop_a, &mut na, lend);
        let keep_b = transmitted_except(&mut pair.b, drop_b, &mut nb, false);
        for d in keep_a {
            pair.link
                .send(phyllo::testing::memlink::Side::A, pair.now, &d);
        }
        for d in keep_b {
            pair.link
                .send(phyllo::testing::memlink::Side::B, pair.now, &d);
        }
        let more = pair.step();
        while let Some(m) = pair.b.poll_delivery() {
            got.push(m.data().to_vec());
            pair.b.recycle(m);
        }
        if !more && next == msgs.len() {
            break;
        }
    }
    assert_eq!(
        got, msgs,
        "{spec}: drop_a {drop_a:?} drop_b {drop_b:?} lend {lend}"
    );
    let b = pair.b.accel_stats().unwrap();
    assert_eq!(
        b.unknown_cookie, 0,
        "no message dropped for an unknown cookie: {b:?}"
    );
}

#[test]
fn losing_the_first_message_costs_no_extra_loss() {
    first_loss_case(&[0], &[]);
    first_loss_case(&[0, 1], &[]);
    first_loss_case(&[0], &[0]);
    first_loss_case(&[], &[0]);
    first_loss_case(&[1, 2, 3], &[0, 1]);
    first_loss_case(&[2, 5, 6, 9, 14], &[]);
}

#[test]
fn a_burst_of_small_messages_is_packed() {
    let mut pair = Pair::accelerated(SPEC3, MemLink::perfect()).unwrap();
    // Warm up: both sides know each other's cookies.
    exchange(&mut pair, &[b"hello".to_vec()]);
    let mut r = rng(9);
    let msgs: Vec<Vec<u8>> = (0..400)
        .map(|i| payload(i, rand::Rng::random_range(&mut r, 1..120)))
        .collect();
    let before = pair.a.stats().datagrams_out;
    for m in &msgs {
        pair.a.send(pair.now, m).unwrap();
    }
    let mut got = Vec::new();
    while pair.step() {
        while let Some(m) = pair.b.poll_delivery() {
            got.push(m.data().to_vec());
            pair.b.recycle(m);
        }
    }
    assert!(got == msgs, "in order, all of them");
    let data_datagrams = pair.a.stats().datagrams_out - before;
    // Each message costs its bytes plus a 1-byte length in a packed body of at most 1400.
    let total: usize = msgs.iter().map(|m| m.len() + 1).sum();
    let bound = total.div_ceil(1400) + 1;
    assert!(
        data_datagrams as usize <= bound,
        "{data_datagrams} datagrams > {bound}"
    );
}

#[test]
fn a_big_endian_sender_is_understood() {
    let (mut be, cb) = Config::pair(true).unwrap();
    be.order = phyllo::field::ByteOrder::Big;
    let a = Connection::from_spec(SPEC4, be).unwrap();
    let b = Connection::from_spec(SPEC4, cb).unwrap();
    let mut pair = Pair::new(a, b, MemLink::perfect());
    let msgs: Vec<Vec<u8>> = (0..300).map(|i| payload(i, 1 + i * 7)).collect();
    assert!(exchange(&mut pair, &msgs) == msgs);
}

#[test]
fn forged_and_truncated_input_is_counted_and_dropped() {
    let mut a = Connection::from_spec(SPEC3, Config::accelerated(Role::Initiator)).unwrap();
    let mut b = Connection::from_spec(SPEC3, Config::accelerated(Role::Responder)).unwrap();
    a.send(Time(0), b"first").unwrap();
    let d = a.poll_transmit().unwrap().data().to_vec();
    // Truncated preamble, truncated header.
    b.handle_datagram(Time(1), &d[..5]);
    b.handle_datagram(Time(1), &d[..10]);
    // Unknown cookie without identification.
    let mut forged = d.clone();
    forged[0] &= 0x7f;
    b.handle_datagram(Time(1), &forged);
    // Wrong byte-order bit: the header reads differently, so the cookie inside it is not the
    // preamble's.
    let mut flipped = d.clone();
    flipped[0] ^= 0x40;
    b.handle_datagram(Time(1), &flipped);
    // A flipped cookie bit in the preamble: the header's cookie (covered by the checksum)
    // tells it apart, and nothing is learnt from it.
    let mut cookie = d.clone();
    cookie[7] ^= 0x01;
    b.handle_datagram(Time(1), &cookie);
    assert!(b.poll_delivery().is_none());
    let s = b.accel_stats().unwrap();
    assert_eq!(s.truncated, 2);
    assert_eq!(s.unknown_cookie, 1);
    assert_eq!(s.unknown_conn, 2);
    assert_eq!(b.peer_cookie(), None, "nothing learnt");
    // A flipped bit of the cookie inside the header: the checksum catches it.
    let mut inner = d.clone();
    inner[8 + 8] ^= 0x01;
    b.handle_datagram(Time(1), &inner);
    assert!(b.poll_delivery().is_none());
    assert_eq!(b.peer_cookie(), None, "nothing learnt");
    // The genuine one still goes through.
    b.handle_datagram(Time(2), &d);
    assert_eq!(b.poll_delivery().unwrap().data(), b"first");
}

#[test]
fn an_endpoint_finds_connections_by_cookie_and_survives_a_collision() {
    use phyllo::demux::CookieDemux;
    let mk = |cookie| {
        let mut c = Config::accelerated(Role::Initiator);
        c.cookie = Some(cookie);
        Connection::from_spec(SPEC3, c).unwrap()
    };
    // Two initiators whose cookies collide, one with its own.
    let mut peers = [mk(42), mk(42), mk(7)];
    let mut ep: CookieDemux<phyllo::stack::DynStack> = CookieDemux::new(
        Some(Box::new(|| {
            Connection::from_spec(SPEC3, Config::accelerated(Role::Responder))
        })),
        8,
    );
    let mut route = [usize::MAX; 3];
    let mut got: Vec<Vec<Vec<u8>>> = vec![vec![]; 3];
    let msgs: Vec<Vec<u8>> = (0..300).map(|i| payload(i, 1 + i % 50)).collect();
    let mut t = 0u64;
    for round in 0..20_000 {
        t += 50_000;
        let now = Time(t);
        if round < msgs.len() {
            for p in peers.iter_mut() {
                p.send(now, &msgs[round]).unwrap();
            }
        }
        for (k, p) in peers.iter_mut().enumerate() {
            p.handle_timeout(now);
            p.post_process(now);
            while let Some(d) = p.poll_transmit() {
                if let Some(i) = ep.handle_datagram(now, d.data()) {
                    route[k] = i;
                }
                p.recycle(d);
            }
        }
        for (k, p) in peers.iter_mut().enumerate() {
            if route[k] == usize::MAX {
                continue;
            }
            let c = &mut ep.connections()[route[k]];
            c.handle_timeout(now);
            c.post_process(now);
            while let Some(m) = c.poll_delivery() {
                got[k].push(m.data().to_vec());
            }
            while let Some(d) = c.poll_transmit() {
                p.handle_datagram(now, d.data());
            }
        }
        if round > msgs.len() && got.iter().all(|g| g.len() == msgs.len()) {
            break;
        }
    }
    for (k, g) in got.iter().enumerate() {
        assert!(
            g == &msgs,
            "peer {k}: {} of {} in order",
            g.len(),
            msgs.len()
        );
    }
    let s = ep.stats().clone();
    assert_eq!(s.collisions, 1, "{s:?}");
    assert_eq!(s.accepted, 3, "{s:?}");
    // A cookie nobody knows, without identification, is counted and dropped.
    let mut forged = Preamble {
        conn_id_present: false,
        order: phyllo::field::ByteOrder::NATIVE,
        cookie: 999,
    }
    .to_bytes()
    .to_vec();
    forged.extend_from_slice(&[0; 20]);
    assert_eq!(ep.handle_datagram(Time(t), &forged), None);
    assert_eq!(ep.stats().unknown_cookie, s.unknown_cookie + 1);
}

/// What a busy-polling driver does: the application answers each delivery at once, before
/// any post-processing ran. The reply leaves on the fast path with the gossip it has (the
/// acknowledgement may lag one message) — the first reply must still carry the
/// identification and cookie state learnt from the first message, or the initiator drops it
/// as another connection's. Nothing is lost, everything arrives in order, the late
/// acknowledgements are sent by the window's delayed-ack timer, and no retransmission is
/// needed.
#[test]
fn replies_before_post_processing_are_understood() {
    for spec in [SPEC3, "frag(1400):window(16):checksum:seal"] {
        let (ca, cb) = Config::pair(true).unwrap();
        let mut a = Connection::from_spec(spec, ca).unwrap();
        let mut b = Connection::from_spec(spec, cb).unwrap();
        let mut now = Time::ZERO;
        let carry = |from: &mut phyllo::DynConnection, to: &mut phyllo::DynConnection, now| {
            while let Some(d) = from.poll_transmit() {
                to.handle_datagram(now, d.data());
                from.recycle(d);
            }
        };
        for r in 0..500u32 {
            now = now + Duration::from_micros(10);
            a.send(now, &r.to_le_bytes()).unwrap();
            carry(&mut a, &mut b, now);
            let m = b.poll_delivery().expect("request delivered");
            assert_eq!(m.data(), r.to_le_bytes());
            b.send(now, m.data()).unwrap(); // before b.post_process
            b.recycle(m);
            carry(&mut b, &mut a, now);
            let m = a.poll_delivery().expect("reply delivered");
            assert_eq!(m.data(), r.to_le_bytes(), "{spec}: round {r}");
            a.recycle(m);
            // The initiator is idle until its next send: its driver post-processes now.
            a.post_process(now);
            b.post_process(now);
            for c in [&mut a, &mut b] {
                if c.poll_timeout().is_some_and(|t| t <= now) {
                    c.handle_timeout(now);
                }
            }
            carry(&mut a, &mut b, now);
            carry(&mut b, &mut a, now);
        }
        // The piggybacked acks lag by one message, yet cover the rest: 5 ms of ping-pong
        // (25 delayed-ack intervals) needs no standalone ack.
        let out = a.stats().datagrams_out + b.stats().datagrams_out;
        assert!(out <= 1002, "{spec}: {out} datagrams for 1000 messages");
        let (sa, sb) = (a.accel_stats().unwrap(), b.accel_stats().unwrap());
        assert_eq!(sa.unknown_conn + sb.unknown_conn, 0, "{spec}");
        assert_eq!(sa.fast_send_msgs + sb.fast_send_msgs, 1000, "{spec}");
        assert_eq!(sa.fast_deliver_msgs + sb.fast_deliver_msgs, 1000, "{spec}");
        // Let the delayed acks out; nothing may need retransmitting.
        for _ in 0..100 {
            now = now + Duration::from_micros(100);
            a.handle_timeout(now);
            b.handle_timeout(now);
            carry(&mut a, &mut b, now);
            carry(&mut b, &mut a, now);
        }
        assert!(
            a.is_idle() && b.is_idle(),
            "{spec}: acknowledged in the end"
        );
        assert_eq!(
            a.stats().datagrams_out + b.stats().datagrams_out,
            a.stats().datagrams_in + b.stats().datagrams_in,
            "{spec}: lossless link"
        );
        assert_eq!(a.stats().sent_msgs, 500);
    }
}
