//! An endpoint that learns only from what its connections authenticated: forged
//! identifications carrying a live connection's cookie, and every single-bit mutation of
//! recorded datagrams, change nothing — the live session keeps delivering.

mod common;
use common::payload;
use phyllo::accel::preamble::{Preamble, PREAMBLE_LEN as PREAMBLE};
use phyllo::demux::CookieDemux;
use phyllo::stack::DynStack;
use phyllo::{Config, Connection, DynConnection, Time};

const SPEC: &str = "frag(1400):window(16):checksum:seal";

/// A listening endpoint whose first accepted connection is the responder `peer_end` (the
/// other end of the peer's pair); every later one has keys of its own that no peer holds
/// (each connection needs its own).
fn endpoint(peer_end: Config) -> CookieDemux<DynStack> {
    let mut first = Some(peer_end);
    CookieDemux::new(
        Some(Box::new(move || {
            let cfg = match first.take() {
                Some(c) => c,
                None => Config::pair(true)?.1,
            };
            Connection::from_spec(SPEC, cfg)
        })),
        8,
    )
}

/// Carry traffic both ways until idle; returns what the endpoint's connection 0 delivered.
/// Every datagram the peer sends is also recorded.
fn run(
    peer: &mut DynConnection,
    ep: &mut CookieDemux<DynStack>,
    now: &mut Time,
    recorded: &mut Vec<Vec<u8>>,
) -> Vec<Vec<u8>> {
    let mut got = Vec::new();
    for _ in 0..2_000 {
        *now = Time(now.0 + 50_000);
        peer.handle_timeout(*now);
        peer.post_process(*now);
        let mut moved = false;
        while let Some(d) = peer.poll_transmit() {
            recorded.push(d.data().to_vec());
            ep.handle_datagram(*now, d.data());
            moved = true;
        }
        if let Some(c) = ep.connections().first_mut() {
            c.handle_timeout(*now);
            c.post_process(*now);
            while let Some(m) = c.poll_delivery() {
                got.push(m.data().to_vec());
            }
            while let Some(d) = c.poll_transmit() {
                peer.handle_datagram(*now, d.data());
                moved = true;
            }
        }
        if !moved && peer.poll_timeout().is_none() {
            break;
        }
    }
    got
}

#[test]
fn forgeries_and_mutations_teach_the_endpoint_nothing() {
    let (ci, cr) = Config::pair(true).unwrap();
    let mut peer = Connection::from_spec(SPEC, ci).unwrap();
    let mut ep = endpoint(cr);
    let mut now = Time::ZERO;
    let mut recorded = Vec::new();
    let first: Vec<Vec<u8>> = (0..5).map(|i| payload(i, 10 + i)).collect();
    for m in &first {
        peer.send(now, m).unwrap();
    }
    assert_eq!(run(&mut peer, &mut ep, &mut now, &mut recorded), first);
    assert_eq!(ep.connections().len(), 1);

    // A forged identification with the live connection's cookie (from a recorded datagram
    // that carried the identification): before, it made a second connection, marked the
    // cookie ambiguous, and the live one stopped acknowledging its cookie for good.
    let with_id = recorded
        .iter()
        .find(|d| Preamble::read(d).is_ok_and(|p| p.conn_id_present))
        .cloned()
        .expect("a datagram with the identification");
    let mut forged = with_id.clone();
    for b in &mut forged[PREAMBLE..PREAMBLE + 8] {
        *b ^= 0x5a;
    }
    assert!(ep.handle_datagram(now, &forged).is_none());
    // Every single-bit mutation and truncation of every recorded datagram.
    for d in &recorded {
        for bit in 0..d.len() * 8 {
            let mut bad = d.clone();
            bad[bit / 8] ^= 1 << (bit % 8);
            ep.handle_datagram(now, &bad);
        }
        for cut in 0..d.len() {
            ep.handle_datagram(now, &d[..cut]);
        }
    }
    let s = ep.stats().clone();
    assert_eq!(s.collisions, 0, "{s:?}");
    assert_eq!(ep.connections().len(), 1, "{s:?}");
    assert!(s.refused > 0, "{s:?}");

    // The live session keeps delivering, in order, nothing lost.
    let more: Vec<Vec<u8>> = (5..50).map(|i| payload(i, 1 + i * 3)).collect();
    for m in &more {
        peer.send(now, m).unwrap();
    }
    let got = run(&mut peer, &mut ep, &mut now, &mut Vec::new());
    assert_eq!(got, more);
}
