//! Acknowledgements a peer forges or gets wrong are refused whole and counted, and change
//! nothing: malformed and overlapping ranges, acknowledgements of what was never sent, of a
//! message held back (optimistic), and an absurd advertised buffer.

use phyllo::congestion::Algorithm;
use phyllo::field::{read_bits, write_bits};
use phyllo::layer::DropReason;
use phyllo::layers::sack::AckFrame;
use phyllo::layers::{Window, WindowConfig};
use phyllo::Layer;
use phyllo::{Config, Connection, Role, Time};
use std::time::Duration;

/// A sender and a receiver of the unprotected stack `window` (so a test can write
/// datagrams), without the path-size search (its probes would be among what a test reads).
fn ends() -> (Connection, Connection) {
    let end = |role| {
        let cfg = WindowConfig {
            max_datagram: 0,
            ..WindowConfig::with_controller(Algorithm::Cubic.build(1400))
        };
        let layers: Vec<Box<dyn Layer>> = vec![Box::new(Window::with_config(cfg))];
        Connection::new(layers, Config::new(role)).unwrap()
    };
    (end(Role::Initiator), end(Role::Responder))
}

fn at(ms: u64) -> Time {
    Time(ms * 1_000_000)
}

fn bad_acks(c: &Connection) -> u64 {
    c.stats()
        .layers
        .iter()
        .map(|(_, l)| l.drops(DropReason::BadAck))
        .sum()
}

/// An acknowledgement datagram: `header` (taken from a genuine one) with the body `body`.
fn forged(header: &[u8], body: &[u8]) -> Vec<u8> {
    let mut d = header.to_vec();
    d.extend_from_slice(body);
    d
}

#[test]
fn forged_acknowledgements_are_refused_whole_and_counted() {
    let (mut a, mut b) = ends();
    let hl = a.layout().header_len();
    // Four messages out; the receiver gets 0, 2 and 3 (1 is lost), so it acknowledges 1
    // cumulatively with a range 2..4 (offsets 1..3).
    for i in 0..4u8 {
        a.send(at(0), &[i; 100]).unwrap();
    }
    let mut data = Vec::new();
    while let Some(m) = a.poll_transmit() {
        data.push(m.data().to_vec());
        a.recycle(m);
    }
    assert_eq!(data.len(), 4);
    for (i, d) in data.iter().enumerate() {
        if i != 1 {
            b.handle_datagram(at(10), d);
        }
    }
    let mut acks: Vec<Vec<u8>> = Vec::new();
    while let Some(m) = b.poll_transmit() {
        acks.push(m.data().to_vec());
        b.recycle(m);
    }
    let ack = acks.last().expect("a gap is acknowledged at once").clone();
    let frame = AckFrame::parse(&ack[hl..]).expect("a well-formed acknowledgement");
    assert_eq!(frame.ranges(), &[(1, 3)]);
    let header = &ack[..hl];
    let body = |ranges: &[(u32, u32)], n: Option<u8>| {
        let f = AckFrame::new(0, 16 << 20);
        let mut v = vec![0u8; 9 + 8 * ranges.len()];
        f.write(&mut v[..9]);
        v[8] = n.unwrap_or(ranges.len() as u8);
        for (i, (s, e)) in ranges.iter().enumerate() {
            v[9 + 8 * i..13 + 8 * i].copy_from_slice(&s.to_le_bytes());
            v[13 + 8 * i..17 + 8 * i].copy_from_slice(&e.to_le_bytes());
        }
        v
    };
    let cases: [(&str, Vec<u8>); 6] = [
        ("overlapping ranges", body(&[(1, 3), (2, 3)], None)),
        ("ranges out of order", body(&[(2, 3), (1, 2)], None)),
        ("an empty range", body(&[(2, 2)], None)),
        ("a range beyond what was sent", body(&[(1, 9)], None)),
        ("a count that lies", body(&[(1, 2)], Some(3))),
        ("a truncated body", body(&[(1, 2)], None)[..12].to_vec()),
    ];
    for (what, b) in &cases {
        let before = (bad_acks(&a), a.stats().datagrams_out);
        a.handle_datagram(at(20), &forged(header, b));
        assert_eq!(bad_acks(&a), before.0 + 1, "{what}: refused and counted");
        assert!(a.poll_transmit().is_none(), "{what}: nothing sent on it");
        assert_eq!(a.stats().datagrams_out, before.1, "{what}");
    }
    // The genuine acknowledgement still works: message 1 is the only one outstanding, and it
    // is resent once the loss is detected.
    a.handle_datagram(at(20), &ack);
    assert_eq!(bad_acks(&a), cases.len() as u64);
    let mut resent = Vec::new();
    for t in 20..200 {
        a.handle_timeout(at(t));
        while let Some(m) = a.poll_transmit() {
            resent.push(m.data().to_vec());
            a.recycle(m);
        }
        if !resent.is_empty() {
            break;
        }
    }
    assert_eq!(
        resent,
        vec![data[1].clone()],
        "only the lost message is resent"
    );
}

#[test]
fn an_optimistic_peer_is_caught_by_the_held_back_message() {
    // A bulk sender over a 20 ms round trip. For its first second the peer is honest; then a
    // forger takes its place that acknowledges every message as soon as it is sent (the
    // highest sequence number on the wire, plus one), without waiting for it to arrive, to
    // make the sender send faster.
    let (mut a, mut b) = ends();
    let layout = a.layout().clone();
    let (seq, ack) = (layout.find("seq").unwrap(), layout.find("ack").unwrap());
    let hl = layout.header_len();
    let mut now = at(0);
    let mut wire: Vec<(Time, Vec<u8>)> = Vec::new();
    let mut template: Option<Vec<u8>> = None;
    let mut highest = 0u64;
    let mut honest_refusals = None;
    while now < at(4000) {
        now = now + Duration::from_micros(500);
        while a.send(now, &[7; 1000]).is_ok() {}
        let forging = now >= at(1000);
        if forging && honest_refusals.is_none() {
            honest_refusals = Some(bad_acks(&a));
        }
        while let Some(m) = a.poll_transmit() {
            let d = m.data().to_vec();
            a.recycle(m);
            if forging {
                highest = highest.max(read_bits(&d[..hl], seq, layout.order()));
            } else {
                wire.push((now + Duration::from_millis(10), d));
            }
        }
        if forging {
            if let Some(mut f) = template.clone() {
                write_bits(&mut f[..hl], ack, layout.order(), highest + 1);
                a.handle_datagram(now, &f);
            }
        } else {
            let due: Vec<Vec<u8>> = {
                let (due, rest) = wire.drain(..).partition(|(t, _)| *t <= now);
                wire = rest;
                due.into_iter().map(|(_, d)| d).collect::<Vec<_>>()
            };
            for d in due {
                b.handle_datagram(now, &d);
            }
            while let Some(m) = b.poll_delivery() {
                b.recycle(m);
            }
            while let Some(m) = b.poll_transmit() {
                // Acknowledgements come straight back (the delay is all on the way out).
                if m.len() >= hl + 9 {
                    // No ranges, no delay, the receiver's buffer as it says.
                    let mut t = m.data()[..hl].to_vec();
                    let mut body = [0u8; 9];
                    AckFrame::new(0, 16 << 20).write(&mut body);
                    t.extend_from_slice(&body);
                    template = Some(t);
                }
                a.handle_datagram(now, m.data());
                b.recycle(m);
            }
            b.handle_timeout(now);
        }
        a.handle_timeout(now);
    }
    let held: u64 = a.stats().event("ack_check.held");
    eprintln!("{} messages sent, {held} held back", a.stats().sent_msgs);
    let honest = honest_refusals.unwrap();
    let caught = bad_acks(&a) - honest;
    eprintln!(
        "honest second: {honest} refused; forged: {caught} refused of the forger's acknowledgements"
    );
    assert_eq!(
        honest, 0,
        "an honest peer's acknowledgements are never refused"
    );
    assert!(held > 0, "a bulk sender holds messages back");
    assert!(
        caught > 0,
        "the forger acknowledged a held-back message and was caught"
    );
}

#[test]
fn an_absurd_advertised_buffer_does_not_take_the_sender_past_its_ceiling() {
    // A peer that advertises 4 GiB of buffer and acknowledges by ranges everything it sees
    // except the first message, so the sender keeps every copy from the first on and its
    // window keeps opening (BBR: the first message's losses do not close it) — past this
    // end's ceiling, here 256 KiB.
    const CEILING: u64 = 256 << 10;
    let window = Window::with_config(WindowConfig {
        ceiling: CEILING,
        ..WindowConfig::with_controller(Algorithm::Bbr.build(1000))
    });
    let stack: Vec<Box<dyn Layer>> = vec![Box::new(window)];
    let mut a = Connection::new(stack, Config::new(Role::Initiator)).unwrap();
    let layout = a.layout().clone();
    let (seq, ack, kind) = (
        layout.find("seq").unwrap(),
        layout.find("ack").unwrap(),
        layout.find("kind").unwrap(),
    );
    let hl = layout.header_len();
    let mut seen = std::collections::BTreeSet::new();
    let mut now = at(0);
    let mut last_ack = None;
    while now < at(3000) {
        now = now + Duration::from_micros(500);
        while a.send(now, &[9; 1000]).is_ok() {}
        while let Some(m) = a.poll_transmit() {
            let d = m.data();
            if read_bits(&d[..hl], kind, layout.order()) == 0 {
                seen.insert(read_bits(&d[..hl], seq, layout.order()));
            }
            a.recycle(m);
        }
        // Every 10 ms (a round trip), the forged acknowledgement: cumulative 0, the top 32
        // ranges of what was seen above it.
        if last_ack.is_none_or(|t| now >= t + Duration::from_millis(10)) && !seen.is_empty() {
            last_ack = Some(now);
            let mut ranges: Vec<(u64, u64)> = Vec::new();
            for &s in seen.range(1..) {
                match ranges.last_mut() {
                    Some((_, e)) if *e == s => *e += 1,
                    _ => ranges.push((s, s + 1)),
                }
            }
            let top = &ranges[ranges.len().saturating_sub(32)..];
            let mut f = AckFrame::new(0, u32::MAX);
            for &(s, e) in top {
                assert!(f.push(s as u32, e as u32));
            }
            let mut d = vec![0u8; hl + f.encoded_len()];
            write_bits(&mut d[..hl], kind, layout.order(), 1);
            write_bits(&mut d[..hl], ack, layout.order(), 0);
            f.write(&mut d[hl..]);
            a.handle_datagram(now, &d);
        }
        a.handle_timeout(now);
    }
    let peak: u64 = a.stats().event("snd.span_peak");
    eprintln!("retransmission copies peaked at {peak} B (ceiling {CEILING} B)");
    assert!(peak <= CEILING, "{peak} > {CEILING}");
    assert!(
        peak + 2000 > CEILING,
        "the window opened far enough to meet the ceiling: {peak}"
    );
}

#[test]
fn the_fast_path_holds_messages_back_as_the_layered_path_does() {
    // A bulk transfer of the default stack over a clean 50 Mbit/s, 50 ms path, layered and
    // accelerated. The window holds about one message in 2048 back in both: on the fast
    // path, the accelerator sends each one it is told to divert the layered way, where the
    // window holds it, and counts it (`Miss::Diverted`). Every message arrives once, in order.
    use phyllo::accel::Miss;
    use phyllo::faults::{Bottleneck, Faults};
    use phyllo::testing::memlink::{MemLink, Side};
    use phyllo::testing::Dumbbell;
    for accelerate in [false, true] {
        let rate = 50_000_000 / 8;
        let link = MemLink::new(Faults::none(Duration::from_millis(25)), 1)
            .with_bottleneck(Side::A, Bottleneck::new(rate, Duration::from_millis(50)))
            .with_bottleneck(Side::B, Bottleneck::new(rate, Duration::from_millis(50)));
        let mut d: Dumbbell = Dumbbell::new(link);
        d.add_spec(phyllo::DEFAULT_STACK, accelerate, Time::ZERO, 5)
            .expect("builds");
        d.flows[0].limit = Some(20_000);
        assert!(d.run_bulk(at(30_000), 1000).expect("runs"), "completes");
        let f = &d.flows[0];
        let s = &f.stats;
        assert_eq!(s.delivered_msgs, 20_000, "accelerated {accelerate}");
        assert_eq!(
            (s.misordered, s.corrupt),
            (0, 0),
            "accelerated {accelerate}"
        );
        let held = f.a.stats().event("ack_check.held");
        eprintln!("accelerated {accelerate}: {held} of 20000 messages held back");
        assert!(held > 0, "accelerated {accelerate}: none held back");
        if let Some(accel) = f.a.accel_stats() {
            assert_eq!(
                accel.send_misses(Miss::Diverted),
                held,
                "one diversion per hold"
            );
            assert!(accel.fast_send_msgs > 15_000, "the rest took the fast path");
        }
    }
}
