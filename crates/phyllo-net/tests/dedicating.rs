//! A dedicating server (`SessionSocket::bind_dedicating`) gives an established peer a socket
//! of its own; what the peer sent before that socket existed waits on the listening socket and
//! must be taken before anything the new socket receives.

mod handshake;

use phyllo::StaticKey;
use phyllo_net::{SessionSocket, DEFAULT_STACK};
use std::time::Duration;

/// Receive at most `max` buffers from each listening socket, then send what that produced;
/// the buffers taken.
fn serve_listeners(server: &mut SessionSocket, max: usize) -> usize {
    let got = (0..server.listeners())
        .map(|i| server.receive_listener(i, max).unwrap())
        .sum();
    server.flush().unwrap();
    got
}

#[test]
fn a_peer_given_its_own_socket_has_its_earlier_datagrams_taken_first() {
    let (sk, ck) = (
        StaticKey::generate().unwrap(),
        StaticKey::generate().unwrap(),
    );
    let (spub, cpub) = (sk.public(), ck.public());
    let local = "127.0.0.1:0".parse().unwrap();
    let mut server =
        SessionSocket::bind_dedicating(local, sk, vec![cpub], DEFAULT_STACK, false).unwrap();
    let mut client = SessionSocket::bind(local, ck, vec![], DEFAULT_STACK, false).unwrap();
    let peer = handshake::establish(&mut client, &mut server, spub, |s| {
        serve_listeners(s, 64);
    });
    assert!(!server.has_opened(), "the handshake alone gives no socket");
    // A burst right after the handshake, all of it queued on the listening socket before the
    // server reads any.
    let before = client.endpoint().peer_stats(peer).unwrap().datagrams_out;
    for i in 0..8u8 {
        let now = client.now();
        client.endpoint_mut().send(now, peer, &[i; 100]).unwrap();
    }
    client.flush().unwrap();
    let sent = client.endpoint().peer_stats(peer).unwrap().datagrams_out - before;
    assert!(sent >= 2, "{sent} datagrams sent");
    std::thread::sleep(Duration::from_millis(20));
    // One buffer at a time: the first data datagram gives the peer its socket, and the rest
    // of the burst still on the listening socket comes with it.
    let got = serve_listeners(&mut server, 1);
    assert!(server.has_opened(), "the peer got a socket of its own");
    assert_eq!(
        got as u64, sent,
        "the whole burst taken from the listening socket"
    );
}
