//! Copies on the session path, counted ([`phyllo::msg::copied_bytes`]) through the endpoint's
//! public calls, layered and accelerated.
//!
//! - **Send**: a message the application wrote into a buffer of the endpoint's
//!   ([`SessionEndpoint::alloc`], [`SessionEndpoint::send_msg`]) is copied once, by the
//!   session's connection into its datagram, and the sealed datagram reaches the "socket" in
//!   that buffer ([`SessionEndpoint::poll_transmit_msg`]): N messages of L bytes cost N·L
//!   bytes copied with a stack whose layers copy nothing (`seal`), and N·L more than the
//!   layers' own copies with the default stack (`frag` cuts fragments, `window` keeps
//!   retransmission copies — the same copies a bare connection makes).
//! - **Receive**: a datagram received into a buffer of the endpoint's
//!   ([`SessionEndpoint::handle_msg`]) is opened and delivered where it is: nothing is copied
//!   between the socket and the application with `seal`, and nothing beyond the layers' own
//!   (`frag`'s reassembly) with the default stack.
//! - **The old calls** (`send(&[u8])`, `poll_transmit_append`, `handle_datagram(&[u8])`)
//!   still work and copy what they always did: the kept copy, the connection's copy and the
//!   datagram into the driver's buffer on send (3·N·L and the datagrams' bytes), every
//!   datagram on receive. The zero-copy assertions fail on them, which is what makes this a
//!   test: `old_calls_copy_three_times_on_send_and_every_datagram_on_receive`.
//!
//! The "socket" between the endpoints writes each datagram into a receive buffer the way the
//! kernel does (into [`Msg::tail_room`], which is not a copy of the protocol's).

use phyllo::endpoint::{
    Discard, Event, Input, PeerId, SessionConfig, SessionEndpoint, DEFAULT_STACK,
};
use phyllo::msg::copied_bytes;
use phyllo::session::StaticKey;
use phyllo::{Config, Connection, FastPathCheck, Msg, Time};
use std::net::SocketAddr;
use std::time::Duration;

const EPOCH: u128 = 1_700_000_000_000_000_000;

fn addr(host: u8) -> SocketAddr {
    SocketAddr::from(([10, 0, 0, host], 4000))
}

/// An endpoint whose sessions run `spec`, without the fast path's check against the layered
/// path (a checked operation copies its message to check it: debug builds check every one,
/// release builds a sample).
fn endpoint(
    key: &StaticKey,
    allowed: &[StaticKey],
    spec: &'static str,
    accel: bool,
) -> SessionEndpoint {
    let cfg = SessionConfig {
        accelerate: accel,
        epoch_ns: Some(EPOCH),
        ..SessionConfig::default()
    };
    SessionEndpoint::new(
        key.clone(),
        allowed.iter().map(StaticKey::public),
        cfg,
        Box::new(move |mut c: Config| {
            c.fast_path_check = FastPathCheck::Off;
            Connection::from_spec(spec, c)
        }),
        [7; 32],
    )
}

/// What the kernel does on receive: the datagram written into a pooled buffer's tail room.
fn arrive(ep: &mut SessionEndpoint, d: &[u8]) -> Msg {
    let mut m = ep.alloc();
    m.tail_room(d.len())[..d.len()].copy_from_slice(d);
    m.commit_tail(d.len());
    m
}

/// A message of `len` bytes written by the application straight into a buffer of `ep`'s (as
/// a read from a file or a socket would), not copied from elsewhere.
fn written(ep: &mut SessionEndpoint, len: usize, seed: usize) -> Msg {
    let mut m = ep.alloc();
    for (i, b) in m.tail_room(len)[..len].iter_mut().enumerate() {
        *b = (i * 7 + seed * 13) as u8;
    }
    m.commit_tail(len);
    m
}

struct Two {
    client: SessionEndpoint,
    server: SessionEndpoint,
    /// The server, as the client knows it; the client, as the server knows it.
    to_server: PeerId,
    to_client: PeerId,
    now: Time,
}

impl Two {
    fn new(spec: &'static str, accel: bool) -> Two {
        let (ck, sk) = (
            StaticKey::generate().unwrap(),
            StaticKey::generate().unwrap(),
        );
        let mut client = endpoint(&ck, &[], spec, accel);
        let server = endpoint(&sk, std::slice::from_ref(&ck), spec, accel);
        let now = Time(1_000_000);
        let to_server = client.connect(now, sk.public(), addr(1));
        let mut t = Two {
            client,
            server,
            to_server,
            to_client: PeerId(0),
            now,
        };
        t.exchange();
        assert!(t.client.is_established(to_server));
        let mut established = None;
        while let Some(e) = t.server.poll_event() {
            if let Event::Established { peer, .. } = e {
                established = Some(peer);
            }
        }
        t.to_client = established.expect("the server has the session");
        // Warm up: a few messages each way, so both sessions are past their first datagrams
        // (the accelerator learns the peer's cookie and identification).
        for i in 0..8 {
            let m = written(&mut t.client, 100, i);
            t.client.send_msg(t.now, t.to_server, m).unwrap();
            let m = written(&mut t.server, 100, i);
            t.server.send_msg(t.now, t.to_client, m).unwrap();
            t.exchange();
            t.deliveries();
        }
        t
    }

    /// Move datagrams both ways with the zero-copy calls until neither has any.
    fn exchange(&mut self) {
        loop {
            let c = self.transmit(true);
            let s = self.transmit(false);
            if c.is_empty() && s.is_empty() {
                return;
            }
            self.receive(false, c);
            self.receive(true, s);
        }
    }

    /// Let the clock run a few milliseconds, both ends' timers firing as they fall due, so
    /// that the acknowledgements (sent after a delay) go and everything sent is confirmed.
    fn settle(&mut self) {
        for _ in 0..10 {
            self.now = self.now + Duration::from_millis(1);
            let now = self.now;
            for client in [true, false] {
                if self.ep(client).poll_timeout().is_some_and(|t| t <= now) {
                    self.ep(client).handle_timeout(now);
                }
            }
            self.exchange();
            self.deliveries();
        }
    }

    fn ep(&mut self, client: bool) -> &mut SessionEndpoint {
        if client {
            &mut self.client
        } else {
            &mut self.server
        }
    }

    /// Everything `client` (or the server) has to send, in its buffers. Deferred work due
    /// within a few microseconds (the accelerator's post-processing, which sends its backlog)
    /// runs first; nothing later (no retransmission timer fires).
    fn transmit(&mut self, client: bool) -> Vec<Msg> {
        let mut out = Vec::new();
        for _ in 0..4 {
            while let Some((_, m)) = self.ep(client).poll_transmit_msg() {
                out.push(m);
            }
            match self.ep(client).poll_timeout() {
                Some(t) if t <= self.now + Duration::from_micros(20) => {
                    self.now = self.now.max(t);
                    let now = self.now;
                    self.ep(client).handle_timeout(now);
                }
                _ => break,
            }
        }
        out
    }

    /// The kernel's part: each datagram written into a receive buffer of the receiver's, the
    /// sender's buffers recycled. Returns the receive buffers.
    fn wire(&mut self, to_client: bool, sent: Vec<Msg>) -> Vec<Msg> {
        let mut bufs = Vec::new();
        for d in sent {
            bufs.push(arrive(self.ep(to_client), d.data()));
            self.ep(!to_client).recycle(d);
        }
        bufs
    }

    /// Hand `sent` datagrams to `client` (or the server) through the wire.
    fn receive(&mut self, client: bool, sent: Vec<Msg>) {
        let bufs = self.wire(client, sent);
        self.handle(client, bufs);
    }

    fn handle(&mut self, client: bool, bufs: Vec<Msg>) {
        let (now, from) = (self.now, if client { addr(1) } else { addr(2) });
        for m in bufs {
            // A retransmission whose first copy arrived is refused as a duplicate; nothing
            // else is.
            let r = self.ep(client).handle_msg(now, from, m);
            assert!(
                !matches!(r, Input::Dropped(d) if d != Discard::Refused),
                "{r:?}"
            );
        }
    }

    /// Every delivery at both ends, lent: their lengths (client's, server's).
    fn deliveries(&mut self) -> (Vec<usize>, Vec<usize>) {
        let (c, s) = (self.to_server, self.to_client);
        let mut at_client = Vec::new();
        while let Some(n) = self.client.poll_delivery_with(c, <[u8]>::len) {
            at_client.push(n);
        }
        let mut at_server = Vec::new();
        while let Some(n) = self.server.poll_delivery_with(s, <[u8]>::len) {
            at_server.push(n);
        }
        (at_client, at_server)
    }
}

/// Copies counted while `f` runs.
fn copies<R>(f: impl FnOnce() -> R) -> (u64, R) {
    let before = copied_bytes();
    let r = f();
    (copied_bytes() - before, r)
}

/// `n` messages of `len` bytes from client to server with the zero-copy calls: bytes copied
/// on the way to the socket, and on the way from the socket to the application (the
/// deliveries lent). The acknowledgements go back afterwards, uncounted.
fn zero_copy_run(t: &mut Two, n: usize, len: usize) -> (u64, u64) {
    let msgs: Vec<Msg> = (0..n).map(|i| written(&mut t.client, len, i)).collect();
    let (now, p) = (t.now, t.to_server);
    let (sent, datagrams) = copies(|| {
        for m in msgs {
            t.client.send_msg(now, p, m).unwrap();
        }
        t.transmit(true)
    });
    let bufs = t.wire(false, datagrams);
    let (received, (_, got)) = copies(|| {
        t.handle(false, bufs);
        t.deliveries()
    });
    assert_eq!(got, vec![len; n], "every message delivered whole");
    t.settle();
    (sent, received)
}

#[test]
fn one_copy_per_message_on_send_and_none_on_receive() {
    let (n, len) = (100, 1000);
    for accel in [false, true] {
        let mut t = Two::new("seal", accel);
        let (sent, received) = zero_copy_run(&mut t, n, len);
        eprintln!("seal, accel {accel}: {n} x {len} B: sent {sent} B copied, received {received} B copied");
        assert_eq!(
            sent,
            (n * len) as u64,
            "accel {accel}: one copy per message"
        );
        assert_eq!(
            received, 0,
            "accel {accel}: none between socket and application"
        );
        // The buffers go round: the endpoint's pool feeds the messages and the receives.
        assert!(t.client.pool().idle() > 0 && t.server.pool().idle() > 0);
    }
}

/// Everything `a` has to send (its deferred work run first), each datagram written into a
/// receive buffer of `b`'s and `a`'s recycled.
fn pass(now: Time, a: &mut phyllo::DynConnection, b: &mut phyllo::DynConnection) -> Vec<Msg> {
    if a.needs_post_process() {
        a.post_process(now);
    }
    let mut bufs = Vec::new();
    while let Some(d) = a.poll_transmit() {
        let mut m = b.alloc();
        m.tail_room(d.len())[..d.len()].copy_from_slice(d.data());
        m.commit_tail(d.len());
        bufs.push(m);
        a.recycle(d);
    }
    bufs
}

/// A message of `len` bytes written into a buffer of `c`'s.
fn filled(c: &mut phyllo::DynConnection, len: usize, byte: u8) -> Msg {
    let mut m = c.alloc();
    m.tail_room(len)[..len].fill(byte);
    m.commit_tail(len);
    m
}

/// A connection pair of `spec` without the fast path's check (which copies what it checks).
fn unchecked_pair(spec: &str, accel: bool) -> (phyllo::DynConnection, phyllo::DynConnection) {
    let (mut ca, mut cb) = Config::pair(accel).unwrap();
    ca.fast_path_check = FastPathCheck::Off;
    cb.fast_path_check = FastPathCheck::Off;
    (
        Connection::from_spec(spec, ca).unwrap(),
        Connection::from_spec(spec, cb).unwrap(),
    )
}

/// The same stack as a bare connection pair, the messages given by buffer
/// (`Connection::send_msg`: no copy of the connection's) and the datagrams received in their
/// buffers: what the stack's own layers copy on send and on receive.
fn layers_own_copies(spec: &str, accel: bool, n: usize, len: usize) -> (u64, u64) {
    let (mut a, mut b) = unchecked_pair(spec, accel);
    let now = Time(1_000_000);
    for i in 0..8 {
        let m = filled(&mut a, 100, i);
        a.send_msg(now, m).unwrap();
        let m = filled(&mut b, 100, i);
        b.send_msg(now, m).unwrap();
        loop {
            let (to_b, to_a) = (pass(now, &mut a, &mut b), pass(now, &mut b, &mut a));
            if to_b.is_empty() && to_a.is_empty() {
                break;
            }
            for m in to_b {
                let _ = b.handle_msg(now, m);
            }
            for m in to_a {
                let _ = a.handle_msg(now, m);
            }
        }
        while b.poll_delivery_with(|_| ()).is_some() {}
        while a.poll_delivery_with(|_| ()).is_some() {}
    }
    let msgs: Vec<Msg> = (0..n).map(|i| filled(&mut a, len, i as u8)).collect();
    let (sent, bufs) = copies(|| {
        for m in msgs {
            a.send_msg(now, m).unwrap();
        }
        let mut bufs = Vec::new();
        for _ in 0..4 {
            bufs.extend(pass(now, &mut a, &mut b));
        }
        bufs
    });
    let (received, got) = copies(|| {
        for m in bufs {
            assert!(b.handle_msg(now, m).is_accepted());
        }
        let mut got = 0;
        while b.poll_delivery_with(|d| assert_eq!(d.len(), len)).is_some() {
            got += 1;
        }
        got
    });
    assert_eq!(got, n);
    (sent, received)
}

#[test]
fn the_session_adds_one_copy_to_the_layers_own_on_send_and_none_on_receive() {
    // An 8 KiB message through the default stack, as `phyllo connect --file` sends them (one:
    // its six fragments fit the initial congestion window without an acknowledgement).
    let (n, len) = (1, 8192);
    for accel in [false, true] {
        let mut t = Two::new(DEFAULT_STACK, accel);
        let (sent, received) = zero_copy_run(&mut t, n, len);
        let (layers_sent, layers_received) = layers_own_copies(DEFAULT_STACK, accel, n, len);
        eprintln!(
            "{DEFAULT_STACK}, accel {accel}: {n} x {len} B: session sent {sent} B copied \
             (the layers alone {layers_sent}), received {received} B copied (the layers alone \
             {layers_received})"
        );
        assert_eq!(
            sent,
            layers_sent + (n * len) as u64,
            "accel {accel}: the connection's one copy, then the layers' own"
        );
        assert_eq!(
            received, layers_received,
            "accel {accel}: nothing beyond the layers' own"
        );
        // `frag` cuts each message into fragments (a copy) and `window` keeps a copy of each
        // fragment for retransmission; `frag` reassembles (a copy).
        assert!(layers_sent >= 2 * (n * len) as u64);
        assert_eq!(layers_received, (n * len) as u64);
    }
}

#[test]
fn old_calls_copy_three_times_on_send_and_every_datagram_on_receive() {
    let (n, len) = (100, 1000);
    for accel in [false, true] {
        let mut t = Two::new("seal", accel);
        let data: Vec<Vec<u8>> = (0..n).map(|i| vec![i as u8; len]).collect();
        let (now, p) = (t.now, t.to_server);
        let (sent, wire) = copies(|| {
            for d in &data {
                t.client.send(now, p, d).unwrap();
            }
            let mut wire = Vec::new();
            let mut buf = Vec::new();
            while t.client.poll_transmit_append(&mut buf).is_some() {
                wire.push(std::mem::take(&mut buf));
            }
            wire
        });
        let wire_bytes: u64 = wire.iter().map(|d| d.len() as u64).sum();
        let (received, (_, got)) = copies(|| {
            for d in &wire {
                t.server.handle_datagram(now, addr(2), d);
            }
            t.deliveries()
        });
        assert_eq!(got, vec![len; n]);
        eprintln!(
            "old calls, seal, accel {accel}: {n} x {len} B: sent {sent} B copied, received \
             {received} B copied ({wire_bytes} B on the wire)"
        );
        // The kept copy, the connection's copy, the datagram into the driver's buffer.
        assert_eq!(sent, 2 * (n * len) as u64 + wire_bytes, "accel {accel}");
        // Every datagram into a pooled buffer.
        assert_eq!(received, wire_bytes, "accel {accel}");
        // The assertions of the zero-copy calls do not hold for these.
        assert_ne!(sent, (n * len) as u64);
        assert_ne!(received, 0);
    }
}

#[test]
fn a_refused_message_comes_back_and_unconfirmed_buffers_are_handed_back() {
    let mut t = Two::new("window(4):seal", false);
    let (now, p) = (t.now, t.to_server);
    // Fill the window and the retention limit's worth of sends until one is refused.
    let mut refused = None;
    for i in 0..10_000 {
        let m = written(&mut t.client, 1000, i);
        if let Err(e) = t.client.send_msg(now, p, m) {
            refused = Some(e);
            break;
        }
    }
    let e = refused.expect("a full window refuses");
    assert_eq!(e.msg.len(), 1000, "the message comes back untouched");
    // Nothing was confirmed: closing hands every message back, in order.
    t.client.close(now, p);
    let ended: Vec<Vec<u8>> = std::iter::from_fn(|| t.client.poll_event())
        .find_map(|e| match e {
            Event::Ended { unconfirmed, .. } => Some(unconfirmed),
            _ => None,
        })
        .expect("the session ended");
    // The warm-up's last messages may not be confirmed yet either: they come first, intact
    // (small ones, kept as copies in the session's arena rather than in their 2 KiB buffers).
    let (small, ours): (Vec<&Vec<u8>>, Vec<&Vec<u8>>) = ended.iter().partition(|m| m.len() == 100);
    assert!(!ours.is_empty());
    assert!(
        !small.is_empty(),
        "the warm-up's last messages are not acknowledged yet"
    );
    assert_eq!(small.len() + ours.len(), ended.len());
    assert!(
        ended[..small.len()].iter().all(|m| m.len() == 100),
        "in order"
    );
    let first = 8 - small.len();
    for (i, m) in small.iter().enumerate() {
        let seed = first + i;
        assert!(m
            .iter()
            .enumerate()
            .all(|(k, &b)| b == (k * 7 + seed * 13) as u8));
    }
    for (i, m) in ours.iter().enumerate() {
        assert!(
            m.iter()
                .enumerate()
                .all(|(k, &b)| b == (k * 7 + i * 13) as u8),
            "message {i}"
        );
    }
}

/// Buffers allocated so far: the endpoint's pool and its session's connection's.
fn fresh(ep: &SessionEndpoint, p: PeerId) -> (u64, u64) {
    let conn = ep.connection(p).map_or(0, |c| c.pool().fresh);
    (ep.pool().fresh, conn)
}

#[test]
fn buffers_go_round_between_the_pools_without_allocating() {
    // The application's buffers and the receives come from the endpoint's pool, datagrams
    // from the connection's; each side gives the other a buffer for each it takes, so in the
    // steady state neither allocates.
    for accel in [false, true] {
        let mut t = Two::new(DEFAULT_STACK, accel);
        // Warm-up: the pools reach the most buffers in flight at once.
        for _ in 0..40 {
            zero_copy_run(&mut t, 1, 8192);
        }
        let before = (fresh(&t.client, t.to_server), fresh(&t.server, t.to_client));
        for _ in 0..50 {
            zero_copy_run(&mut t, 1, 8192);
        }
        let after = (fresh(&t.client, t.to_server), fresh(&t.server, t.to_client));
        assert_eq!(
            after, before,
            "accel {accel}: fresh buffers (client, server)"
        );
    }
}

/// [`pass`] as a driver sends: the link borrows each datagram
/// ([`Connection::transmit_with`]), which then goes back to `a`'s pool or becomes a
/// retransmission copy.
fn lend(now: Time, a: &mut phyllo::DynConnection, b: &mut phyllo::DynConnection) -> Vec<Msg> {
    let mut bufs = Vec::new();
    loop {
        let taken = a.transmit_with(16, |ds| -> Result<usize, ()> {
            for d in ds {
                let mut m = b.alloc();
                m.tail_room(d.len())[..d.len()].copy_from_slice(d.data());
                m.commit_tail(d.len());
                bufs.push(m);
            }
            Ok(ds.len())
        });
        if taken != Ok(0) {
            continue;
        }
        if !a.needs_post_process() {
            return bufs;
        }
        a.post_process(now);
    }
}

/// Bytes `spec`'s layers copy sending `n` messages of `len` bytes one at a time, each
/// delivered and acknowledged before the next (so each can take the fast path, not the
/// backlog's packing), the datagrams lent to the link as a driver does.
fn sent_copies_one_by_one(spec: &str, accel: bool, n: usize, len: usize) -> u64 {
    let (mut a, mut b) = unchecked_pair(spec, accel);
    let now = Time(1_000_000);
    let mut copied = 0;
    for i in 0..n + 8 {
        let m = filled(&mut a, len, i as u8);
        let (c, bufs) = copies(|| {
            a.send_msg(now, m).unwrap();
            lend(now, &mut a, &mut b)
        });
        // The first eight warm the connection up.
        if i >= 8 {
            copied += c;
        }
        for m in bufs {
            assert!(b.handle_msg(now, m).is_accepted());
        }
        assert!(b.poll_delivery_with(|d| assert_eq!(d.len(), len)).is_some());
        for m in pass(now, &mut b, &mut a) {
            let _ = a.handle_msg(now, m);
        }
    }
    copied
}

/// A small sealed message's retransmission copy: the layered path copies the plaintext for
/// `window` before `seal` encrypts it in place; the accelerated fast path copies nothing and
/// takes the sealed datagram back from the link as the copy, decrypted again in deferred
/// post-processing ([`phyllo::Layer::undo_send`]). (That the copy is right is the next
/// test's.)
#[test]
fn a_small_sealed_message_leaves_the_fast_path_without_a_retransmission_copy() {
    let (n, len) = (8, 8);
    let layered = sent_copies_one_by_one("window(16):seal", false, n, len);
    let accel = sent_copies_one_by_one("window(16):seal", true, n, len);
    eprintln!("window(16):seal, {n} x {len} B: layered copied {layered} B, accelerated {accel} B");
    assert!(layered >= (n * len) as u64, "the layered path's copies");
    assert_eq!(accel, 0, "the fast path copies nothing");
}

/// The copy taken back from the link is what the window retransmits: a small sealed message
/// sent on the fast path whose datagram is lost arrives intact from the retransmission (with
/// the copy left sealed, the receiver would get the first encryption's bytes).
#[test]
fn a_lost_small_sealed_message_is_retransmitted_intact_from_the_copy_taken_back() {
    let (mut a, mut b) = unchecked_pair("window(16):seal", true);
    let mut now = Time(1_000_000);
    // A few exchanges first, so the message below takes the fast path.
    for i in 0..4 {
        let m = filled(&mut a, 8, i);
        a.send_msg(now, m).unwrap();
        for m in lend(now, &mut a, &mut b) {
            assert!(b.handle_msg(now, m).is_accepted());
        }
        assert!(b.poll_delivery_with(|_| ()).is_some());
        for m in lend(now, &mut b, &mut a) {
            let _ = a.handle_msg(now, m);
        }
    }
    let fast_before = a.accel_stats().unwrap().fast_send_msgs;
    let m = filled(&mut a, 8, 0xab);
    a.send_msg(now, m).unwrap();
    assert_eq!(a.accel_stats().unwrap().fast_send_msgs, fast_before + 1);
    let lost = lend(now, &mut a, &mut b);
    assert_eq!(lost.len(), 1, "the message's datagram, lost");
    drop(lost);
    // The window's retransmission timer.
    let mut resent = Vec::new();
    for _ in 0..8 {
        now = a.poll_timeout().expect("a retransmission is due");
        a.handle_timeout(now);
        resent = lend(now, &mut a, &mut b);
        if !resent.is_empty() {
            break;
        }
    }
    assert!(!resent.is_empty(), "nothing was retransmitted");
    for m in resent {
        let _ = b.handle_msg(now, m);
    }
    let got = b.poll_delivery_with(|d| d.to_vec());
    assert_eq!(got, Some(vec![0xab; 8]));
}

/// The only datagram waiting leaves from its session's own buffer
/// ([`SessionEndpoint::transmit_single`]): on the accelerated path the retransmission copy is
/// that buffer taken back (nothing is copied on the way to the socket, where
/// [`SessionEndpoint::poll_transmit_msg`] copies the body for it), and a lost message comes
/// back intact from it, decrypted again.
#[test]
fn a_single_datagram_is_lent_from_its_session_and_a_loss_comes_back_intact() {
    for accel in [false, true] {
        let mut t = Two::new(DEFAULT_STACK, accel);
        t.settle();
        let p = t.to_server;
        // By value, for comparison: the accelerator copies the sealed body for its copy.
        let m = written(&mut t.client, 8, 1);
        t.client.send_msg(t.now, p, m).unwrap();
        let (by_value, d) = copies(|| t.client.poll_transmit_msg());
        let (_, d) = d.expect("a datagram");
        t.receive(false, vec![d]);
        t.settle();
        // Lent, and lost.
        let m = written(&mut t.client, 8, 2);
        let want = m.data().to_vec();
        t.client.send_msg(t.now, p, m).unwrap();
        let mut lost = Vec::new();
        let (lent, took) = copies(|| {
            t.client
                .transmit_single(|to, d| lost.push((to, d.to_vec())))
        });
        assert!(took, "accel {accel}: the one datagram was lent");
        assert_eq!(lost.len(), 1);
        assert_eq!(lost[0].0, addr(1), "accel {accel}: to the server");
        assert!(
            t.client.poll_transmit_msg().is_none(),
            "accel {accel}: nothing else waits"
        );
        eprintln!("accel {accel}: copied {by_value} B by value, {lent} B lent");
        if accel {
            assert!(by_value > 0, "the copy taken by value");
            assert_eq!(lent, 0, "lent: the datagram's buffer is the copy");
        }
        // The retransmission, from the copy.
        let mut resent = Vec::new();
        for _ in 0..50 {
            let Some(at) = t.client.poll_timeout() else {
                break;
            };
            t.now = t.now.max(at);
            let now = t.now;
            t.client.handle_timeout(now);
            while let Some((_, d)) = t.client.poll_transmit_msg() {
                resent.push(d);
            }
            if !resent.is_empty() {
                break;
            }
        }
        assert!(
            !resent.is_empty(),
            "accel {accel}: nothing was retransmitted"
        );
        let bufs = t.wire(false, resent);
        t.handle(false, bufs);
        let got = t.server.poll_delivery_with(t.to_client, <[u8]>::to_vec);
        assert_eq!(got, Some(want), "accel {accel}: the lost message, intact");
    }
}

/// An echo in the delivered buffer ([`SessionEndpoint::poll_delivery_msg`], then
/// [`SessionEndpoint::send_msg`]): the echoing end copies each message once (its connection,
/// into the datagram; the session keeps the delivered buffer, which a message this long is
/// worth), and its buffers go round without new allocations.
#[test]
fn an_echo_sent_on_in_its_delivered_buffer_is_copied_once() {
    let (n, len) = (50, 1000);
    for accel in [false, true] {
        let mut t = Two::new("seal", accel);
        t.settle();
        let (c, s) = (t.to_server, t.to_client);
        let mut fresh_after_warm_up = (0, 0);
        for i in 0..n {
            let m = written(&mut t.client, len, i);
            let want = m.data().to_vec();
            t.client.send_msg(t.now, c, m).unwrap();
            let d = t.transmit(true);
            t.receive(false, d);
            let now = t.now;
            let (taken, m) = copies(|| t.server.poll_delivery_msg(s).expect("delivered"));
            assert_eq!(taken, 0, "accel {accel}: taken in its buffer");
            assert_eq!(m.data(), &want[..]);
            let (sent, ()) = copies(|| t.server.send_msg(now, s, m).unwrap());
            assert_eq!(sent, len as u64, "accel {accel}: the connection's one copy");
            let d = t.transmit(false);
            t.receive(true, d);
            let echo = t.client.poll_delivery_with(c, <[u8]>::to_vec);
            assert_eq!(echo, Some(want), "accel {accel}: the echo, intact");
            t.settle();
            if i == 4 {
                fresh_after_warm_up = fresh(&t.server, s);
            }
        }
        assert_eq!(
            fresh(&t.server, s),
            fresh_after_warm_up,
            "accel {accel}: the echoing end (endpoint, connection) allocated no new buffers"
        );
    }
}
