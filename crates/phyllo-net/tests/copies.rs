//! The session path's copies over real sockets: a client sends messages written into the
//! endpoint's own buffers ([`SessionEndpoint::alloc`](phyllo::SessionEndpoint::alloc) and
//! `send_msg`), the server receives them through [`SessionSocket::pump`].
//!
//! - Send: the session copies each message once, into its datagram. With `seal` alone that is
//!   all; the default stack's `window` also keeps a copy of each datagram to retransmit (its
//!   own copy, the same a bare connection makes), so N messages of L bytes cost 2·N·L there.
//! - Receive: nothing is copied between the server's socket and its stack once its receive
//!   buffers have learnt the traffic: the first receive of a burst of datagrams of a size they
//!   had not seen lands across buffers and is copied out (`copied_on_receive`), so each test
//!   sends a first round to warm the path and counts the second.
//!
//! Without the accelerator: in debug builds its fast-path check copies every message that
//! takes the fast path, to compare it with the layered path's result.

mod handshake;

use phyllo::msg::copied_bytes;
use phyllo::{PeerId, StaticKey};
use phyllo_net::{SessionSocket, DEFAULT_STACK};
use std::time::{Duration, Instant};

const LEN: usize = 1000;

#[test]
fn one_copy_per_message_on_send_and_none_between_socket_and_stack() {
    const MESSAGES: usize = 2000;
    let c = run("seal", MESSAGES);
    assert_eq!(
        c.client,
        (MESSAGES * LEN) as u64,
        "one copy per message on send"
    );
    assert_eq!(c.server, 0, "no copy in the stack on receive");
    assert_eq!(c.joined, 0, "no copy between socket and stack");
}

#[test]
fn the_default_stack_adds_only_its_retransmission_copy() {
    const MESSAGES: usize = 2000;
    let c = run(DEFAULT_STACK, MESSAGES);
    // The session's copy and `window`'s; anything more is retransmission (loopback: little).
    let twice = 2 * (MESSAGES * LEN) as u64;
    assert!(
        c.client >= twice && c.client < twice + twice / 10,
        "the client copied {} bytes for {MESSAGES} messages of {LEN} bytes",
        c.client
    );
    assert_eq!(c.server, 0, "no copy in the stack on receive");
    assert_eq!(c.joined, 0, "no copy between socket and stack");
}

/// What one round copied.
#[derive(Debug, Default)]
struct Copies {
    /// Bytes the client copied sending the messages (and pumping).
    client: u64,
    /// Bytes the server copied receiving them (pumping, taking deliveries).
    server: u64,
    /// Datagrams the server's socket copied out of its receive buffers.
    joined: u64,
}

/// A client and a server on `stack` (not accelerated), with a session between them.
struct Two {
    client: SessionSocket,
    server: SessionSocket,
    peer: PeerId,
    /// The most messages sent ahead of the server's deliveries.
    burst: usize,
}

impl Two {
    fn new(stack: &str, burst: usize) -> Two {
        let (sk, ck) = (
            StaticKey::generate().unwrap(),
            StaticKey::generate().unwrap(),
        );
        let (spub, cpub) = (sk.public(), ck.public());
        let local = "127.0.0.1:0".parse().unwrap();
        let mut server = SessionSocket::bind(local, sk, vec![cpub], stack, false).unwrap();
        let mut client = SessionSocket::bind(local, ck, vec![], stack, false).unwrap();
        let peer = handshake::establish(&mut client, &mut server, spub, |s| {
            s.pump(Duration::from_millis(1)).unwrap();
        });
        Two {
            client,
            server,
            peer,
            burst,
        }
    }

    /// `messages` messages of `LEN` bytes from the client, each written into a buffer of the
    /// endpoint's, until the server has every one: what that copied.
    fn round(&mut self, messages: usize) -> Copies {
        let deadline = Instant::now() + Duration::from_secs(20);
        let joined = self.server.copied_on_receive();
        let mut c = Copies::default();
        let (mut sent, mut delivered) = (0, 0);
        while delivered < messages {
            assert!(
                Instant::now() < deadline,
                "{delivered} of {messages} delivered"
            );
            let before = copied_bytes();
            // At most `burst` unacknowledged by delivery: `seal` alone has no window, and the
            // server's socket buffer may be the kernel's default.
            while sent < messages && sent < delivered + self.burst {
                let ep = self.client.endpoint_mut();
                let mut m = ep.alloc();
                m.tail_room(LEN)[..LEN].fill(sent as u8);
                m.commit_tail(LEN);
                let now = self.client.now();
                match self.client.endpoint_mut().send_msg(now, self.peer, m) {
                    Ok(()) => sent += 1,
                    Err(e) => {
                        self.client.endpoint_mut().recycle(e.msg);
                        break;
                    }
                }
            }
            self.client.pump(Duration::ZERO).unwrap();
            c.client += copied_bytes() - before;
            let before = copied_bytes();
            self.server.pump(Duration::from_millis(1)).unwrap();
            for p in self.server.take_readable() {
                let ep = self.server.endpoint_mut();
                while ep
                    .poll_delivery_with(p, |d| {
                        assert_eq!(d.len(), LEN);
                        assert!(d.iter().all(|&b| b == d[0]));
                    })
                    .is_some()
                {
                    delivered += 1;
                }
            }
            c.server += copied_bytes() - before;
        }
        c.joined = self.server.copied_on_receive() - joined;
        c
    }
}

/// A first round of `messages` to warm the path, then the round counted; at most 100 (about
/// 100 KB) in flight.
fn run(stack: &str, messages: usize) -> Copies {
    let mut t = Two::new(stack, 100);
    let warm = t.round(messages);
    let c = t.round(messages);
    println!("{stack}: {messages} x {LEN} B: warm-up {warm:?}, then {c:?}");
    c
}
