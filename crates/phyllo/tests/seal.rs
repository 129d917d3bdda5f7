//! `seal`: a tampered packet and a replayed packet are rejected and counted, never delivered.

use phyllo::layer::DropReason;
use phyllo::{Config, Connection, Role, Time};

const SPEC: &str = "window(16):seal";

fn pair() -> (phyllo::DynConnection, phyllo::DynConnection) {
    let (a, b) = Config::pair(false).unwrap();
    (
        Connection::from_spec(SPEC, a).unwrap(),
        Connection::from_spec(SPEC, b).unwrap(),
    )
}

#[test]
fn replayed_packet_is_rejected_and_counted() {
    let (mut a, mut b) = pair();
    a.send(Time(0), b"pay me once").unwrap();
    let d = a.poll_transmit().unwrap();
    b.handle_datagram(Time(1), d.data());
    assert_eq!(b.poll_delivery().unwrap().data(), b"pay me once");
    b.handle_datagram(Time(2), d.data());
    assert!(b.poll_delivery().is_none());
    assert_eq!(b.stats().drops(DropReason::Replay), 1);
    assert_eq!(b.stats().delivered, 1);
}

#[test]
fn tampered_packets_are_rejected_and_counted() {
    let (mut a, mut b) = pair();
    a.send(Time(0), b"attack at dawn").unwrap();
    let d = a.poll_transmit().unwrap();
    // Flip each bit in turn: header, ciphertext and tag are all covered.
    for bit in 0..d.len() * 8 {
        let mut t = d.data().to_vec();
        t[bit / 8] ^= 1 << (bit % 8);
        b.handle_datagram(Time(1), &t);
        assert!(
            b.poll_delivery().is_none(),
            "bit {bit} flipped was delivered"
        );
    }
    let dropped = b.stats().input_drops();
    assert_eq!(dropped, d.len() as u64 * 8, "every tampered copy counted");
    assert!(b.stats().drops(DropReason::Auth) > 0);
    // The genuine packet still gets through afterwards.
    b.handle_datagram(Time(2), d.data());
    assert_eq!(b.poll_delivery().unwrap().data(), b"attack at dawn");
}

#[test]
fn wrong_key_is_rejected() {
    // An initiator and a responder of two different pairs: each pair has its own keys.
    let (mut a, _) = pair();
    let (_, mut b) = pair();
    a.send(Time(0), b"x").unwrap();
    let d = a.poll_transmit().unwrap();
    b.handle_datagram(Time(1), d.data());
    assert!(b.poll_delivery().is_none());
    assert_eq!(b.stats().drops(DropReason::Auth), 1);
}

#[test]
fn a_sealed_stack_without_keys_is_refused_by_name() {
    let Err(e) = Connection::from_spec(SPEC, Config::new(Role::Initiator)) else {
        panic!("a sealed stack without keys was built");
    };
    assert!(matches!(e, phyllo::conn::BuildError::NoKeys("seal")), "{e}");
    assert!(e.to_string().contains("`seal` needs keys"));
    // Without `seal`, no keys are needed.
    assert!(Connection::from_spec("window(16)", Config::new(Role::Initiator)).is_ok());
}
