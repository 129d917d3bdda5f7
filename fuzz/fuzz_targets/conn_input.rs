//! The input path of a connection: arbitrary datagrams (and timer firings) into the 4-layer
//! stack (layered and accelerated) and a fragmenting unprotected stack. Nothing may panic; the
//! sealed stack may never deliver anything.
#![no_main]

use libfuzzer_sys::fuzz_target;
use phyllo::{Config, Connection, Role, Time};

fuzz_target!(|data: &[u8]| {
    // Responders of pairs of their own: keys no input can know.
    let mut sealed = Connection::from_spec(
        "frag(1400):window(16):checksum:seal",
        Config::pair(false).expect("keys").1,
    )
    .expect("valid spec");
    let mut accel = Connection::from_spec(
        "frag(1400):window(16):checksum:seal",
        Config::pair(true).expect("keys").1,
    )
    .expect("valid spec");
    let mut plain = Connection::from_spec("frag(64):window(4)", Config::new(Role::Responder))
        .expect("valid spec");
    // A window under a controller: acknowledgement bodies (ranges) reach it unprotected.
    let mut congested = Connection::from_spec("frag(64):window", Config::new(Role::Responder))
        .expect("valid spec");
    // The input is a sequence of datagrams, each prefixed with a one-byte length.
    let mut rest = data;
    let mut t = 0u64;
    while let Some((&len, tail)) = rest.split_first() {
        let n = (len as usize).min(tail.len());
        let (d, tail) = tail.split_at(n);
        rest = tail;
        t += 1_000_000;
        sealed.handle_datagram(Time(t), d);
        plain.handle_datagram(Time(t), d);
        congested.handle_datagram(Time(t), d);
        congested.handle_timeout(Time(t));
        while let Some(m) = congested.poll_delivery() {
            congested.recycle(m);
        }
        while let Some(m) = congested.poll_transmit() {
            congested.recycle(m);
        }
        accel.handle_datagram(Time(t), d);
        accel.handle_timeout(Time(t));
        accel.post_process(Time(t));
        assert!(
            accel.poll_delivery().is_none(),
            "forged datagram delivered (accelerated)"
        );
        while let Some(m) = accel.poll_transmit() {
            accel.recycle(m);
        }
        sealed.handle_timeout(Time(t));
        plain.handle_timeout(Time(t));
        assert!(
            sealed.poll_delivery().is_none(),
            "forged datagram delivered"
        );
        while let Some(m) = plain.poll_delivery() {
            plain.recycle(m);
        }
        while let Some(m) = plain.poll_transmit() {
            plain.recycle(m);
        }
        while let Some(m) = sealed.poll_transmit() {
            sealed.recycle(m);
        }
    }
});
