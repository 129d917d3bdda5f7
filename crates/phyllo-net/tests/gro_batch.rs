//! Bad input inside a coalesced (GRO) receive batch.
//!
//! A man in the middle (a plain [`UdpLink`]) relays a session between a client and a server
//! [`SessionSocket`], and forwards a burst of the client's datagrams to the server as one
//! segmented (GSO) send, so that the server's GRO socket takes them in one coalesced receive:
//!
//! - one datagram of the batch with a byte flipped in its sealed body is refused for failing
//!   authentication, alone: the rest of the batch is accepted, the messages before the gap are
//!   delivered at once, and after the retransmission every message arrives, in order, on the
//!   same session;
//! - a batch whose last segment is shorter (what a segmented send allows) is accepted whole;
//! - a coalesced receive cut short by a buffer too small for it keeps its whole datagrams and
//!   never passes the cut one off as a shorter datagram (at the link: a [`SessionSocket`]'s
//!   receive buffers, with their 64 KiB spill area, always hold a whole batch).
//!
//! Where the kernel does not coalesce (no `UDP_SEGMENT` or `UDP_GRO`), the batch arrives as
//! separate datagrams; the tests then say so (`NOTE:`) and check what still holds.

use phyllo::layer::DropReason;
use phyllo::{Discard, Event, PeerId, StaticKey};
use phyllo_net::{SessionSocket, DEFAULT_STACK};
use phyllo_udp::udp::{LinkStats, RecvBatch, UdpLink, MAX_BATCH};
use std::net::SocketAddr;
use std::time::{Duration, Instant};

/// How long any phase may take.
const PHASE: Duration = Duration::from_secs(5);

/// The bytes of message `i`, `len` long: distinct for every message and offset.
fn message(i: usize, len: usize) -> Vec<u8> {
    (0..len).map(|j| (i * 31 + j * 7 + 1) as u8).collect()
}

/// A client and a server session socket with a relay between them: the client connects to the
/// relay's address, and the relay forwards what the client sends to the server and what the
/// server sends to the client.
struct Relay {
    client: SessionSocket,
    server: SessionSocket,
    middle: UdpLink,
    batch: RecvBatch,
    client_addr: Option<SocketAddr>,
    /// The server as the client knows it, and the client as the server knows it.
    to_server: PeerId,
    to_client: PeerId,
}

impl Relay {
    /// Both sockets on loopback and the session up through the relay.
    fn new() -> Relay {
        let (sk, ck) = (
            StaticKey::generate().unwrap(),
            StaticKey::generate().unwrap(),
        );
        let (spub, cpub) = (sk.public(), ck.public());
        let local: SocketAddr = "127.0.0.1:0".parse().unwrap();
        let server = SessionSocket::bind(local, sk, vec![cpub], DEFAULT_STACK, false).unwrap();
        let mut client = SessionSocket::bind(local, ck, vec![], DEFAULT_STACK, false).unwrap();
        // The relay reads datagram by datagram (no GRO): it sees each as the client sent it.
        let middle = UdpLink::bind(local).unwrap();
        middle.set_recv_buffer_size(1 << 20).unwrap();
        let now = client.now();
        let to_server = client
            .endpoint_mut()
            .connect(now, spub, middle.local_addr());
        let mut relay = Relay {
            client,
            server,
            middle,
            batch: RecvBatch::new(MAX_BATCH, 2048),
            client_addr: None,
            to_server,
            to_client: PeerId(u32::MAX),
        };
        let deadline = Instant::now() + PHASE;
        while !relay.client.endpoint().is_established(to_server) {
            assert!(Instant::now() < deadline, "no session through the relay");
            relay.round();
        }
        relay.to_client = relay
            .server
            .endpoint()
            .peers()
            .find(|&p| relay.server.endpoint().is_established(p))
            .expect("the server has the client's session");
        // Let anything the handshake left in flight settle before the tests count.
        for _ in 0..5 {
            relay.round();
        }
        relay
    }

    /// Everything queued at the relay now, with its source.
    fn take(&mut self) -> Vec<(SocketAddr, Vec<u8>)> {
        let mut got = Vec::new();
        while self.middle.try_recv(&mut self.batch).unwrap() > 0 {
            for (d, from) in self.batch.datagrams() {
                got.push((from.expect("a source address"), d.to_vec()));
            }
        }
        got
    }

    /// Pass `datagrams` on one by one: the server's to the client, anyone else's to the
    /// server (and the sender is the client from now on).
    fn forward(&mut self, datagrams: Vec<(SocketAddr, Vec<u8>)>) {
        let server = self.server.local_addr();
        for (from, d) in datagrams {
            let to = if from == server {
                match self.client_addr {
                    Some(c) => c,
                    None => continue,
                }
            } else {
                self.client_addr = Some(from);
                server
            };
            self.middle.send_batch_to(&[&d], to).unwrap();
        }
    }

    /// One round of plain relaying: the client, the relay, the server, the relay.
    fn round(&mut self) {
        self.client.pump(Duration::from_millis(1)).unwrap();
        let d = self.take();
        self.forward(d);
        self.server.pump(Duration::from_millis(1)).unwrap();
        let d = self.take();
        self.forward(d);
    }

    /// Have the client send one message of each length in `lens` (message `first + i` for
    /// the `i`-th) and capture at the relay the datagrams they make, without passing them on:
    /// exactly one each, as they left the client. The client only sends what is queued (it
    /// runs its timers only if some datagrams are held back, and its first probe timeout is
    /// 100 ms away); nothing reaches it, so nothing is retransmitted.
    fn capture(&mut self, first: usize, lens: &[usize]) -> Vec<Vec<u8>> {
        let before = self.client_out();
        for (i, &len) in lens.iter().enumerate() {
            let now = self.client.now();
            self.client
                .endpoint_mut()
                .send(now, self.to_server, &message(first + i, len))
                .unwrap();
        }
        self.client.flush().unwrap();
        let mut got = Vec::new();
        let deadline = Instant::now() + PHASE;
        loop {
            for (from, d) in self.take() {
                assert_eq!(Some(from), self.client_addr, "only the client is running");
                got.push(d);
            }
            if got.len() >= lens.len() {
                break;
            }
            assert!(
                Instant::now() < deadline,
                "{} of {} datagrams",
                got.len(),
                lens.len()
            );
            self.client.pump(Duration::from_millis(1)).unwrap();
        }
        // A little longer: nothing more comes of these messages.
        std::thread::sleep(Duration::from_millis(5));
        let extra = self.take();
        assert!(
            extra.is_empty(),
            "{} datagrams more than messages",
            extra.len()
        );
        assert_eq!(
            self.client_out() - before,
            lens.len() as u64,
            "one datagram per message"
        );
        got
    }

    /// Datagrams the client sent to the server so far.
    fn client_out(&self) -> u64 {
        let ep = self.client.endpoint();
        ep.peer_stats(self.to_server).unwrap().datagrams_out
    }

    /// Send `datagrams` to the server in one segmented send (if the kernel segments); whether
    /// it went as one.
    fn forward_segmented(&mut self, datagrams: &[Vec<u8>]) -> bool {
        let server = self.server.local_addr();
        let list: Vec<(SocketAddr, &[u8])> =
            datagrams.iter().map(|d| (server, d.as_slice())).collect();
        let before = self.middle.stats();
        let mut done = 0;
        while done < list.len() {
            self.middle.send_outgoing(&list, &mut done).unwrap();
        }
        let after = self.middle.stats();
        after.segmented_sends - before.segmented_sends == 1
            && after.send_calls - before.send_calls == 1
            && after.datagrams_sent - before.datagrams_sent == datagrams.len() as u64
    }

    /// Pump the server until a receive brought something (one pump, unless the datagrams were
    /// not there yet); the link's counters before and after.
    fn server_receives(&mut self) -> (LinkStats, LinkStats) {
        let before = self.server.socket().stats();
        let deadline = Instant::now() + PHASE;
        while self.server.pump(Duration::from_millis(20)).unwrap() == 0 {
            assert!(Instant::now() < deadline, "the server received nothing");
        }
        (before, self.server.socket().stats())
    }

    /// The messages the server has for the application now.
    fn delivered(&mut self) -> Vec<Vec<u8>> {
        let mut got = Vec::new();
        for p in self.server.take_readable() {
            assert_eq!(p, self.to_client);
            while let Some(m) = self
                .server
                .endpoint_mut()
                .poll_delivery_with(p, <[u8]>::to_vec)
            {
                got.push(m);
            }
        }
        got
    }

    /// Datagrams from the client that the server's session refused because they did not
    /// authenticate.
    fn auth_refusals(&self) -> u64 {
        let ep = self.server.endpoint();
        ep.connection(self.to_client)
            .unwrap()
            .stats()
            .drops(DropReason::Auth)
    }

    /// The server's datagrams in from the client and its session's input drops.
    fn server_in(&self) -> (u64, u64) {
        let s = self.server.endpoint().peer_stats(self.to_client).unwrap();
        (s.datagrams_in, s.input_drops)
    }

    /// Neither side's session ended or was replaced since the handshake.
    fn assert_same_session(&mut self) {
        for (name, s) in [("client", &mut self.client), ("server", &mut self.server)] {
            let stats = s.endpoint().stats().clone();
            assert_eq!(
                (stats.established, stats.ended),
                (1, 0),
                "{name}: one session, never ended"
            );
            while let Some(e) = s.endpoint_mut().poll_event() {
                assert!(matches!(e, Event::Established { .. }), "{name}: {e:?}");
            }
        }
        let p = self.to_client;
        assert_eq!(self.server.endpoint().peer_stats(p).unwrap().sessions, 1);
        assert!(self.client.endpoint().is_established(self.to_server));
        assert!(self.server.endpoint().is_established(p));
    }
}

/// Whether the server took `n` datagrams in one coalesced buffer of one receive call, from
/// its link's counters before and after; a loud note if not.
fn took_one_coalesced_batch(before: LinkStats, after: LinkStats, n: usize) -> bool {
    let calls = (after.recv_calls - after.empty_polls) - (before.recv_calls - before.empty_polls);
    let coalesced = after.coalesced_receives - before.coalesced_receives;
    let datagrams = after.datagrams_received - before.datagrams_received;
    let one = calls == 1 && coalesced == 1 && datagrams == n as u64;
    if !one {
        eprintln!(
            "NOTE: the kernel did not hand the server the batch as one coalesced buffer \
             ({datagrams} datagrams in {calls} receive calls, {coalesced} coalesced buffers); \
             the checks below still hold, but not for a GRO batch"
        );
    }
    one
}

#[test]
fn a_datagram_failing_authentication_mid_batch_is_dropped_alone() {
    const N: usize = 12;
    const LEN: usize = 1000;
    const BAD: usize = N / 2;
    let mut r = Relay::new();
    let mut datagrams = r.capture(0, &[LEN; N]);
    let size = datagrams[0].len();
    assert!(
        datagrams.iter().all(|d| d.len() == size),
        "equal messages make equal datagrams: {:?}",
        datagrams.iter().map(Vec::len).collect::<Vec<_>>()
    );
    // A byte of the sealed body (well past the session header, before the tag), length kept.
    datagrams[BAD][size / 2] ^= 0x40;

    let (auth0, refused0) = (
        r.auth_refusals(),
        r.server.endpoint().stats().dropped(Discard::Refused),
    );
    let (in0, drops0) = r.server_in();
    let drops_all0 = r.server.endpoint().stats().total_drops();
    let segmented = r.forward_segmented(&datagrams);
    if !segmented {
        eprintln!("NOTE: the relay's send was not one segmented message (no UDP_SEGMENT?)");
    }
    // One pump of the server, and the client not at all: no retransmission yet.
    let (before, after) = r.server_receives();
    took_one_coalesced_batch(before, after, N);

    let (in1, drops1) = r.server_in();
    assert_eq!(
        in1 - in0,
        N as u64,
        "every datagram of the batch reached the session"
    );
    assert_eq!(r.auth_refusals() - auth0, 1, "one failed authentication");
    assert_eq!(drops1 - drops0, 1, "and nothing else was dropped");
    assert_eq!(
        r.server.endpoint().stats().dropped(Discard::Refused) - refused0,
        1,
        "the endpoint refused one datagram"
    );
    assert_eq!(
        r.server.endpoint().stats().total_drops() - drops_all0,
        1,
        "the endpoint dropped nothing else"
    );
    let first = r.delivered();
    let want: Vec<Vec<u8>> = (0..N).map(|i| message(i, LEN)).collect();
    assert_eq!(
        first,
        want[..BAD],
        "the messages before the bad datagram, in order, and nothing past the gap"
    );
    // What came after the gap waits in the window.
    assert_eq!(r.server.endpoint().delivered_ready(r.to_client), 0);

    // Now plain relaying: the client learns of the gap and sends the message again.
    let mut got = first;
    let deadline = Instant::now() + PHASE;
    while got.len() < N {
        assert!(
            Instant::now() < deadline,
            "{} of {N} messages delivered",
            got.len()
        );
        r.round();
        got.extend(r.delivered());
    }
    assert_eq!(got, want, "every message once, in order, with its bytes");
    for _ in 0..5 {
        r.round();
        assert!(r.delivered().is_empty(), "nothing delivered twice");
    }
    assert_eq!(
        r.auth_refusals() - auth0,
        1,
        "the retransmission authenticated"
    );
    r.assert_same_session();
}

#[test]
fn a_batch_with_a_shorter_last_segment_is_accepted_whole() {
    let lens = [1000, 1000, 1000, 1000, 400];
    let mut r = Relay::new();
    let datagrams = r.capture(0, &lens);
    let size = datagrams[0].len();
    assert!(datagrams[..4].iter().all(|d| d.len() == size));
    assert!(datagrams[4].len() < size, "the last datagram is shorter");

    let (in0, drops0) = r.server_in();
    let drops_all0 = r.server.endpoint().stats().total_drops();
    if !r.forward_segmented(&datagrams) {
        eprintln!("NOTE: the relay's send was not one segmented message (no UDP_SEGMENT?)");
    }
    let (before, after) = r.server_receives();
    took_one_coalesced_batch(before, after, lens.len());

    let (in1, drops1) = r.server_in();
    assert_eq!(in1 - in0, lens.len() as u64);
    assert_eq!(drops1 - drops0, 0, "nothing refused");
    assert_eq!(r.server.endpoint().stats().total_drops(), drops_all0);
    let want: Vec<Vec<u8>> = lens
        .iter()
        .enumerate()
        .map(|(i, &l)| message(i, l))
        .collect();
    assert_eq!(r.delivered(), want, "all of them, in order, at once");
    r.assert_same_session();
}

#[test]
fn a_truncated_coalesced_receive_keeps_its_whole_datagrams() {
    let (mut a, mut b) = UdpLink::loopback_pair().unwrap();
    let gro = b.set_gro(true).unwrap();
    let sent: Vec<Vec<u8>> = (0..5).map(|i| message(i, 100)).collect();
    let list: Vec<(SocketAddr, &[u8])> = sent
        .iter()
        .map(|d| (b.local_addr(), d.as_slice()))
        .collect();
    let mut done = 0;
    a.send_outgoing(&list, &mut done).unwrap();
    assert_eq!(done, sent.len());
    // Room for two and a half of them.
    let mut batch = RecvBatch::new(1, 250);
    let n = b
        .recv_timeout(&mut batch, Some(Duration::from_secs(5)))
        .unwrap();
    assert_eq!(n, 1);
    let got: Vec<Vec<u8>> = batch.datagrams().map(|(d, _)| d.to_vec()).collect();
    if !(gro && a.stats().segmented_sends == 1 && b.stats().coalesced_receives == 1) {
        eprintln!("NOTE: the kernel did not coalesce the run; one datagram per receive");
        assert_eq!(got, sent[..1]);
        return;
    }
    assert!(batch.is_truncated(0), "the batch did not fit");
    assert_eq!(
        got,
        sent[..2],
        "the two whole datagrams, not half of the third"
    );
    let s = b.stats();
    assert_eq!((s.datagrams_received, s.truncated), (2, 1));
}
