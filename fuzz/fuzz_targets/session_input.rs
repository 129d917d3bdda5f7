//! Fuzz a session endpoint's input (`endpoint::SessionEndpoint::handle_datagram`):
//! datagrams from the network, each prefixed with a one-byte length and a one-byte source,
//! into a server holding a live session with a client. Nothing panics, no forged datagram is
//! delivered, no session is made for a datagram that did not authenticate, and the live
//! session still carries a message afterwards.
#![no_main]

use libfuzzer_sys::fuzz_target;
use phyllo::endpoint::{Input, SessionEndpoint};
use phyllo::session::StaticKey;
use phyllo::Time;
use std::net::SocketAddr;
use std::sync::OnceLock;

fn keys() -> &'static (StaticKey, StaticKey) {
    static K: OnceLock<(StaticKey, StaticKey)> = OnceLock::new();
    K.get_or_init(|| {
        (
            StaticKey::from_private([1; 32]).unwrap(),
            StaticKey::from_private([2; 32]).unwrap(),
        )
    })
}

fn endpoint(k: &StaticKey, allowed: Vec<phyllo::session::PublicKey>) -> SessionEndpoint {
    SessionEndpoint::builder(k.clone())
        .allow_all(allowed)
        .stack("frag(1400):window(16):seal")
        .accelerate(true)
        .seed([9; 32])
        .build()
        .expect("a stack with seal")
}

fn exchange(s: &mut SessionEndpoint, c: &mut SessionEndpoint, now: Time) {
    let (sa, ca): (SocketAddr, SocketAddr) =
        ("10.0.0.1:1".parse().unwrap(), "10.0.0.2:1".parse().unwrap());
    let mut buf = Vec::new();
    for _ in 0..8 {
        while c.poll_transmit(&mut buf).is_some() {
            s.handle_datagram(now, ca, &buf);
        }
        while s.poll_transmit(&mut buf).is_some() {
            c.handle_datagram(now, sa, &buf);
        }
    }
}

fuzz_target!(|data: &[u8]| {
    let (sk, ck) = keys();
    let mut server = endpoint(sk, vec![ck.public()]);
    let mut client = endpoint(ck, vec![]);
    let sa: SocketAddr = "10.0.0.1:1".parse().unwrap();
    let p = client.connect(Time(0), sk.public(), sa);
    client.send(Time(0), p, b"hello").unwrap();
    exchange(&mut server, &mut client, Time(0));
    let sp = server.peers().next().unwrap();
    assert_eq!(server.poll_delivery_with(sp, |m| m.to_vec()).as_deref(), Some(&b"hello"[..]));
    let sessions = server.session_count();
    let mut rest = data;
    let mut t = 0u64;
    while let Some((&[len, src], tail)) = rest.split_first_chunk::<2>() {
        let n = (len as usize).min(tail.len());
        let (d, tail) = tail.split_at(n);
        rest = tail;
        t += 1_000_000;
        let from = SocketAddr::from(([10, 9, 9, src], 7));
        if let Input::Data(q) = server.handle_datagram(Time(t), from, d) {
            assert!(
                server.poll_delivery_with(q, |_| ()).is_none(),
                "forged datagram delivered"
            );
        }
        server.handle_timeout(Time(t));
        assert_eq!(server.session_count(), sessions, "state for a forgery");
    }
    client.send(Time(t), p, b"still there").unwrap();
    exchange(&mut server, &mut client, Time(t));
    assert_eq!(
        server.poll_delivery_with(sp, |m| m.to_vec()).as_deref(),
        Some(&b"still there"[..])
    );
});
