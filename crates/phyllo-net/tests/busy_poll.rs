//! The busy-poll latency loop ([`SessionSocket::set_busy_poll`]) and a client's connected
//! socket ([`SessionSocket::connect_to`]), through the public calls only: a busy-polling
//! server echoes every message of a connected, busy-polling client intact and in order,
//! datagrams longer than the spin's first receive buffer included; a datagram longer than the
//! spin's buffer is cut short once, counted and dropped, and the next fits; the loop's GRO
//! setting follows the mode; a connected client stays connected across a rebind.

use phyllo::{PeerId, StaticKey};
use phyllo_net::SessionSocket;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// One datagram per message of up to 3000 bytes (`frag(4000)`): longer than the 2 KiB a
/// busy spin first offers, so the first such datagram is cut short and dropped, and the
/// retransmission has to fit.
const STACK: &str = "frag(4000):window:seal";

/// The bytes of message `i`, `len` long: distinct for every message and offset.
fn message(i: usize, len: usize) -> Vec<u8> {
    (0..len).map(|j| (i * 31 + j * 7 + 1) as u8).collect()
}

/// A busy-polling server and a busy-polling client connected to it, the session asked for.
fn pair() -> (SessionSocket, SessionSocket, PeerId) {
    let (sk, ck) = (
        StaticKey::generate().unwrap(),
        StaticKey::generate().unwrap(),
    );
    let local: SocketAddr = "127.0.0.1:0".parse().unwrap();
    let mut server =
        SessionSocket::bind(local, sk.clone(), vec![ck.public()], STACK, true).unwrap();
    let mut client = SessionSocket::bind(local, ck, vec![], STACK, true).unwrap();
    server.set_busy_poll(true);
    client.set_busy_poll(true);
    let addr = server.local_addr();
    client.connect_to(addr).unwrap();
    let now = client.now();
    let p = client.endpoint_mut().connect(now, sk.public(), addr);
    (server, client, p)
}

#[test]
fn a_busy_polling_server_echoes_every_message_of_a_connected_client_intact_and_in_order() {
    let (mut server, mut client, p) = pair();
    assert!(!server.socket().is_gro(), "busy-polling turns GRO off");
    // The server spins in a thread of its own and echoes what it gets, so datagrams mostly
    // arrive while a spin waits for them, into buffers of any size the pool holds (the
    // cutting short of a long one is the next test's).
    let stop = Arc::new(AtomicBool::new(false));
    let stopped = stop.clone();
    let echo = std::thread::spawn(move || {
        while !stopped.load(Ordering::Relaxed) {
            server.pump(Duration::from_millis(1)).unwrap();
            for peer in server.take_readable() {
                while let Some(m) = server
                    .endpoint_mut()
                    .poll_delivery_with(peer, <[u8]>::to_vec)
                {
                    let now = server.now();
                    server.endpoint_mut().send(now, peer, &m).unwrap();
                }
            }
        }
        server
    });
    // Long and short messages in turn, the first a long one, each echoed before the next.
    for i in 0..20 {
        let m = message(i, if i % 2 == 0 { 3000 } else { 32 });
        let now = client.now();
        client.endpoint_mut().send(now, p, &m).unwrap();
        let until = Instant::now() + Duration::from_secs(10);
        let back = loop {
            assert!(Instant::now() < until, "message {i} not echoed within 10 s");
            client.pump(Duration::from_millis(1)).unwrap();
            if let Some(b) = client.endpoint_mut().poll_delivery_with(p, <[u8]>::to_vec) {
                break b;
            }
        };
        assert_eq!(back, m, "message {i}, intact");
    }
    stop.store(true, Ordering::Relaxed);
    let mut server = echo.join().unwrap();
    for (side, s) in [
        ("server", server.socket().stats()),
        ("client", client.socket().stats()),
    ] {
        eprintln!(
            "{side} link: {} datagrams received, {} cut short, {} empty polls",
            s.datagrams_received, s.truncated, s.empty_polls
        );
        assert!(s.empty_polls > 0, "the {side} spun");
        // The room grows at the first long datagram a spin cuts short: never a second.
        assert!(
            s.truncated <= 1,
            "the {side}'s spin cut {} datagrams short",
            s.truncated
        );
    }
    // Off again: the socket coalesces its receives again.
    server.set_busy_poll(false);
    assert!(
        server.socket().is_gro() || !gro_available(),
        "GRO is on again"
    );
}

#[test]
fn a_busy_spin_cuts_one_long_datagram_short_then_takes_the_next_whole() {
    let sk = StaticKey::generate().unwrap();
    let local: SocketAddr = "127.0.0.1:0".parse().unwrap();
    let mut server = SessionSocket::bind(local, sk, vec![], STACK, true).unwrap();
    server.set_busy_poll(true);
    let mut junk = phyllo_udp::udp::UdpLink::bind(local).unwrap();
    junk.connect(server.local_addr()).unwrap();
    // Longer than the 2 KiB a fresh buffer offers, and no session's: dropped either way.
    let long = vec![0xffu8; 3000];
    let dropped = |s: &SessionSocket| s.endpoint().stats().drops.iter().sum::<u64>();
    // The first lands in the spin's fresh buffer: cut short, counted, dropped whole.
    junk.send_batch(&[&long]).unwrap();
    let until = Instant::now() + Duration::from_secs(5);
    while server.socket().stats().truncated == 0 {
        assert!(Instant::now() < until, "the long datagram never arrived");
        server.pump(Duration::from_millis(1)).unwrap();
    }
    assert_eq!(
        dropped(&server),
        0,
        "a cut datagram never reaches the endpoint"
    );
    // The room grew: the second arrives whole and the endpoint drops it as junk.
    junk.send_batch(&[&long]).unwrap();
    while dropped(&server) == 0 {
        assert!(
            Instant::now() < until,
            "the second long datagram never reached the endpoint"
        );
        server.pump(Duration::from_millis(1)).unwrap();
    }
    assert_eq!(
        server.socket().stats().truncated,
        1,
        "only the first was cut short"
    );
}

/// Whether this kernel coalesces UDP receives at all (`UDP_GRO`, Linux 5.0).
fn gro_available() -> bool {
    let mut l = phyllo_udp::udp::UdpLink::bind("127.0.0.1:0".parse().unwrap()).unwrap();
    let on = l.set_gro(true).unwrap_or(false);
    if !on {
        eprintln!("NOTE: this kernel has no UDP_GRO; the GRO check after busy-polling is moot");
    }
    on
}

#[test]
fn a_connected_client_socket_stays_connected_to_its_server_across_a_rebind() {
    let (mut server, mut client, p) = pair();
    let addr = server.local_addr();
    assert_eq!(client.socket().peer_addr(), Some(addr));
    let old = client.local_addr();
    let new = client.rebind().unwrap();
    assert_ne!(old.port(), new.port());
    assert_eq!(
        client.socket().peer_addr(),
        Some(addr),
        "connected again after the rebind"
    );
    // And the session still carries a message from the new port.
    let now = client.now();
    client
        .endpoint_mut()
        .send(now, p, b"after the rebind")
        .unwrap();
    let until = Instant::now() + Duration::from_secs(10);
    loop {
        assert!(Instant::now() < until, "nothing delivered after the rebind");
        client.pump(Duration::from_micros(200)).unwrap();
        server.pump(Duration::from_micros(200)).unwrap();
        let got = server.take_readable().into_iter().find_map(|peer| {
            server
                .endpoint_mut()
                .poll_delivery_with(peer, <[u8]>::to_vec)
        });
        if let Some(m) = got {
            assert_eq!(m, b"after the rebind");
            break;
        }
    }
}
