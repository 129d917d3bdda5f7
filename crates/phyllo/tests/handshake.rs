//! Connections keyed by a Noise IK handshake (`phyllo::session`): every session has its own
//! keys, and nothing recorded in one session is accepted in another — layered and
//! accelerated.

use phyllo::conn::{Config, Connection, DynConnection};
use phyllo::layer::Role;
use phyllo::session::{Initiation, Responder, SessionKeys, StaticKey};
use phyllo::time::Time;

const SPEC: &str = "frag(1400):window(16):checksum:seal";

/// One session between `a` (initiator) and the responder `r`: the keys of both ends.
fn handshake(
    a: &StaticKey,
    r: &mut Responder,
    index: u32,
    timestamp: u128,
) -> (SessionKeys, SessionKeys) {
    let (mut i, m1) = Initiation::start(a, r.public(), index, timestamp).unwrap();
    let (kb, m2) = r.respond(&m1, index + 1000).unwrap();
    (i.finish(&m2).unwrap(), kb)
}

fn connections(ka: SessionKeys, kb: SessionKeys, accel: bool) -> (DynConnection, DynConnection) {
    let cfg = |k: SessionKeys| {
        let c = if accel {
            Config::accelerated(k.role)
        } else {
            Config::new(k.role)
        };
        c.with_session(k)
    };
    (
        Connection::from_spec(SPEC, cfg(ka)).unwrap(),
        Connection::from_spec(SPEC, cfg(kb)).unwrap(),
    )
}

/// Move every datagram each way until nothing moves; returns what `to` delivered and the
/// datagrams `from` sent (recorded).
fn exchange(
    a: &mut DynConnection,
    b: &mut DynConnection,
    now: Time,
) -> (Vec<Vec<u8>>, Vec<Vec<u8>>) {
    let mut delivered = Vec::new();
    let mut recorded = Vec::new();
    for _ in 0..100 {
        let mut moved = false;
        while let Some(m) = a.poll_transmit() {
            recorded.push(m.data().to_vec());
            b.handle_datagram(now, m.data());
            moved = true;
        }
        while let Some(m) = b.poll_transmit() {
            a.handle_datagram(now, m.data());
            moved = true;
        }
        a.post_process(now);
        b.post_process(now);
        while let Some(m) = b.poll_delivery() {
            delivered.push(m.data().to_vec());
        }
        if !moved {
            break;
        }
    }
    (delivered, recorded)
}

fn run(accel: bool) {
    let a = StaticKey::generate().unwrap();
    let b = StaticKey::generate().unwrap();
    let mut r = Responder::new(b, [a.public()]);
    let now = Time::ZERO;

    // Session 1 delivers; its datagrams are recorded.
    let (ka1, kb1) = handshake(&a, &mut r, 1, 1);
    assert_eq!((ka1.role, kb1.role), (Role::Initiator, Role::Responder));
    let key1 = *ka1.keys().initiator_to_responder();
    let (mut a1, mut b1) = connections(ka1, kb1, accel);
    a1.send(now, b"first session").unwrap();
    let (got, recorded) = exchange(&mut a1, &mut b1, now);
    assert_eq!(got, vec![b"first session".to_vec()], "accel {accel}");
    assert!(!recorded.is_empty());

    // Session 2, same static keys: fresh keys; session 1's datagrams are not accepted.
    let (ka2, kb2) = handshake(&a, &mut r, 2, 2);
    assert_ne!(&key1, ka2.keys().initiator_to_responder());
    let (mut a2, mut b2) = connections(ka2, kb2, accel);
    let before = b2.stats().input_drops()
        + b2.accel_stats()
            .map_or(0, |s| s.unknown_cookie + s.unknown_conn);
    for d in &recorded {
        b2.handle_datagram(now, d);
    }
    assert!(
        b2.poll_delivery().is_none(),
        "accel {accel}: a replay from session 1 was delivered"
    );
    let after = b2.stats().input_drops()
        + b2.accel_stats()
            .map_or(0, |s| s.unknown_cookie + s.unknown_conn);
    assert!(
        after >= before + recorded.len() as u64,
        "accel {accel}: drops not counted"
    );

    // And session 2 still works.
    a2.send(now, b"second session").unwrap();
    let (got, _) = exchange(&mut a2, &mut b2, now);
    assert_eq!(got, vec![b"second session".to_vec()], "accel {accel}");
}

#[test]
fn sessions_are_separate_layered() {
    run(false);
}

#[test]
fn sessions_are_separate_accelerated() {
    run(true);
}
