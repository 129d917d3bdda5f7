//! [`SessionSocket`]: a session endpoint on a UDP socket.

use crate::error::NetError;
use crate::waiting::{unrefused, Took, WaitingBuffer};
use phyllo::endpoint::{Input, PeerId, SessionEndpoint};
use phyllo::msg::HEADROOM;
use phyllo::session::{PublicKey, StaticKey};
use phyllo::{Msg, Time};
use phyllo_udp::udp::{RecvBufs, UdpLink};
use std::collections::HashMap;
use std::net::SocketAddr;
use std::time::{Duration, Instant};

/// Receive buffers a listening socket gives up at most, after one of its peers got a socket of
/// its own, so that what the peer sent before is handled first
/// ([`SessionSocket::receive_listener`]): a bound against a flood that keeps the listening
/// socket full.
const DRAIN_AFTER_DEDICATING: usize = 1024;

/// Bytes of datagrams a flush queues before it sends them: about sixteen segmented messages.
const TX_QUEUE_BYTES: usize = 1 << 20;

/// Messages (`recvmmsg` slots) one receive takes at most.
const RX_SLOTS: usize = 16;

/// Buffers each message of a receive is offered at first: a coalesced run of up to this many
/// datagrams lands one datagram per buffer (a longer one teaches the batch to offer more).
/// Seven, and the spill area, make eight iovecs per message: the most the kernel takes without
/// allocating an array for them on every message (`UIO_FASTIOV`). A sealed 8 KiB message is
/// six datagrams.
const RX_PER_SLOT: usize = 7;

/// Listening sockets of a [`SessionSocket::bind_dedicating`] socket: one port, SO_REUSEPORT,
/// and the kernel spreads strangers' datagrams over them by a hash of their source address
/// and port, so a flood from one source fills one socket's queue while handshakes from
/// elsewhere land in the others (with eight, a given client shares the flooded one with
/// probability 1/8).
const LISTENING_SOCKETS: usize = 8;

/// The most peers that get a socket of their own (each costs a descriptor); the rest share the
/// listening socket.
const MAX_DEDICATED: usize = 512;

/// A session endpoint on a UDP socket: the thin driver between a [`UdpLink`] (batched
/// `sendmmsg`/`recvmmsg`, segmentation offload) and a sans-IO [`SessionEndpoint`].
///
/// Nothing is copied between the socket and the endpoint: datagrams are received into the
/// endpoint's pooled buffers ([`RecvBufs`] refilled from [`SessionEndpoint::alloc`], one
/// datagram per buffer, coalesced runs included) and handed over as they are
/// ([`SessionEndpoint::handle_msg`]); the endpoint's sealed datagrams go to the kernel from the
/// buffers they were written in: the only one waiting lent from its session
/// ([`SessionEndpoint::transmit_single`]), several taken ([`SessionEndpoint::poll_transmit_msg`])
/// and gathered into segmented sends by [`UdpLink::send_outgoing`], then back to its pool.
///
/// It moves datagrams between the two, maps the monotonic clock onto protocol time
/// ([`now`](Self::now)) and runs the endpoint's timers; everything else — connecting,
/// sending, taking deliveries and events — is the endpoint's own calls, through
/// [`endpoint`](Self::endpoint) and [`endpoint_mut`](Self::endpoint_mut).
///
/// Two ways to drive it:
///
/// - blocking: call [`pump`](Self::pump) in a loop; it sends what is queued, waits for input
///   (at most until the endpoint's next timer), hands it to the endpoint and runs the timers.
/// - a receive engine ([`receive`](crate::receive), or [`serve_on_engine`](Self::serve_on_engine)):
///   register [`socket`](Self::socket) (and, with [`bind_dedicating`](Self::bind_dedicating), each
///   dedicated socket), call [`receive_some`](Self::receive_some) /
///   [`receive_dedicated`](Self::receive_dedicated) when one is readable, and
///   [`timers`](Self::timers) and [`flush`](Self::flush) between turns.
///
/// Peers that received data are listed for the program ([`take_readable`](Self::take_readable)),
/// which then takes their messages with the endpoint's `poll_delivery_with`.
pub struct SessionSocket {
    ep: SessionEndpoint,
    link: UdpLink,
    /// More listening sockets on the same port ([`LISTENING_SOCKETS`]), when dedicating.
    listeners: Vec<UdpLink>,
    /// Receive buffers: the endpoint's, one datagram each.
    rx: RecvBufs,
    /// Protocol time zero.
    epoch: Instant,
    /// Datagrams to send, in the endpoint's buffers, and their bytes.
    tx: Vec<(SocketAddr, Msg)>,
    tx_bytes: usize,
    /// Busy-poll instead of sleeping in the kernel.
    busy: bool,
    /// A busy poll's receive buffer, when it spins with one `recvfrom` per turn
    /// ([`SessionSocket::spin_one`]): the endpoint's, waiting for the datagram to fill it.
    spin: WaitingBuffer,
    /// The room it offers: a whole datagram of any stack's usual size, until one arrives
    /// cut short, then the most UDP carries.
    spin_room: usize,
    /// Peers that received data since the caller last took this list.
    readable: Vec<PeerId>,
    /// The current [`pump`](SessionSocket::pump) round handed the endpoint data for the
    /// application.
    delivered: bool,
    /// Sockets of their own for peers with an established session, when on
    /// ([`SessionSocket::bind_dedicating`]): `(peer, socket)` by index, `None` once closed.
    dedicated: Vec<Option<(PeerId, UdpLink)>>,
    /// The open ones by peer (a datagram on the shared socket asks whether its peer has one).
    dedicated_of: HashMap<PeerId, usize>,
    /// Indices of dedicated sockets opened, and to be closed, since the driver last looked.
    opened: Vec<usize>,
    closing: Vec<usize>,
    dedicating: bool,
}

/// The endpoint a session socket runs, made before anything is bound, so a bad stack (one
/// that does not parse, or has no keyed layer) is an error now, not a failed session. Its
/// sessions check a sample of their fast-path operations in every build: what release builds
/// run (debug builds' default checks every one).
fn endpoint(
    key: StaticKey,
    allowed: Vec<PublicKey>,
    stack: &str,
    accelerate: bool,
) -> Result<SessionEndpoint, NetError> {
    SessionEndpoint::builder(key)
        .allow_all(allowed)
        .stack(stack)
        .accelerate(accelerate)
        .fast_path_check(phyllo::FastPathCheck::Sampled)
        .build()
        .map_err(NetError::Endpoint)
}

/// Claim `addr` with an ordinary bind (so a port already in use is an error, not a share of
/// someone's `SO_REUSEPORT` group) and let it go; the address bound, with the port chosen
/// when `addr` says port 0.
fn claim(addr: SocketAddr) -> Result<SocketAddr, NetError> {
    Ok(UdpLink::bind(addr)
        .map_err(|source| NetError::Bind { addr, source })?
        .local_addr())
}

/// A receive's count, a refusal read as nothing received ([`unrefused`]: a connected
/// socket, [`SessionSocket::connect_to`], hears of its server's port unreachable).
fn received(r: std::io::Result<usize>) -> Result<usize, NetError> {
    unrefused(r).map_err(NetError::Receive)
}

/// Put `peer` on `list` unless it is there.
pub(crate) fn push_once(list: &mut Vec<PeerId>, peer: PeerId) {
    if !list.contains(&peer) {
        list.push(peer);
    }
}

impl SessionSocket {
    /// Bind `addr` and make an endpoint with `key`, accepting the peers whose public keys are
    /// `allowed` (none: it only connects), whose sessions run `stack` (a spec such as
    /// [`DEFAULT_STACK`](crate::DEFAULT_STACK)), behind the Protocol Accelerator if
    /// `accelerate`.
    ///
    /// The stack is checked first, so a bad spec, or one without a keyed layer (`seal`), is
    /// an error here ([`NetError::Endpoint`]), not a failed or unauthenticated session.
    pub fn bind(
        addr: SocketAddr,
        key: StaticKey,
        allowed: Vec<PublicKey>,
        stack: &str,
        accelerate: bool,
    ) -> Result<SessionSocket, NetError> {
        let ep = endpoint(key, allowed, stack, accelerate)?;
        let link = UdpLink::bind(addr).map_err(|source| NetError::Bind { addr, source })?;
        Ok(SessionSocket::with_link(link, ep))
    }

    /// Like [`bind`](Self::bind), and every peer with an established session gets a socket of
    /// its own on this address (SO_REUSEPORT, so only sockets of this user may share it), so the
    /// kernel queues its datagrams apart from whatever else arrives: a flood of junk or
    /// handshakes fills the listening socket, not theirs. A receive engine serves the sockets
    /// ([`take_opened`](Self::take_opened), [`take_closing`](Self::take_closing)). The address
    /// is claimed first with an ordinary bind, so a port already in use is still an error.
    pub fn bind_dedicating(
        addr: SocketAddr,
        key: StaticKey,
        allowed: Vec<PublicKey>,
        stack: &str,
        accelerate: bool,
    ) -> Result<SessionSocket, NetError> {
        let ep = endpoint(key, allowed, stack, accelerate)?;
        let local = claim(addr)?;
        SessionSocket::dedicating_on(local, ep, false)
    }

    /// Like [`bind_dedicating`](Self::bind_dedicating), for `workers` threads on one port:
    /// one socket per worker, each with its own endpoint (a clone of `key`, the same
    /// `allowed`, `stack` and `accelerate`) and its own listening sockets, all of them in one
    /// `SO_REUSEPORT` group, and the group steered by source
    /// ([`UdpLink::steer_by_source`]): every datagram from one source *address* reaches the
    /// same worker, whatever its port, so a client whose port changes (a NAT rebinding, its
    /// own [`rebind`](Self::rebind)) stays with the worker that holds its session; within a
    /// worker the source port spreads sources over its listening sockets, as the kernel's
    /// hash does for one. A worker's established peers get sockets of their own as with one
    /// socket (they join the group after the listeners and the kernel serves them by their
    /// connection).
    ///
    /// Run each returned socket on its own thread (the sockets share nothing but the port);
    /// the `n`-th serves the sources [`phyllo_udp::steer::steering_index`] puts on worker
    /// `n`. A session never moves between workers: a client whose *address* changes starts a
    /// new one on the worker of its new address, and all clients behind one address (a NAT)
    /// share one worker.
    ///
    /// Every socket is bound here, in order (worker 0's listening sockets, then worker 1's,
    /// …), which the steering's indices need; so a listening socket that cannot be made is an
    /// error here ([`NetError::BindShared`]), not a worker with fewer. The steering program is
    /// attached only for two or more workers (one is [`bind_dedicating`](Self::bind_dedicating):
    /// the kernel's hash); a kernel that refuses it is [`NetError::Steer`]; `workers` of 0 or
    /// past [`MAX_WORKERS`](Self::MAX_WORKERS) is [`NetError::Workers`].
    pub fn bind_dedicating_workers(
        addr: SocketAddr,
        key: StaticKey,
        allowed: Vec<PublicKey>,
        stack: &str,
        accelerate: bool,
        workers: usize,
    ) -> Result<Vec<SessionSocket>, NetError> {
        if !(1..=Self::MAX_WORKERS).contains(&workers) {
            return Err(NetError::Workers {
                workers,
                max: Self::MAX_WORKERS,
            });
        }
        if workers == 1 {
            return Ok(vec![SessionSocket::bind_dedicating(
                addr, key, allowed, stack, accelerate,
            )?]);
        }
        // Every endpoint first: a bad stack is an error before anything is bound.
        let eps = (0..workers)
            .map(|_| endpoint(key.clone(), allowed.clone(), stack, accelerate))
            .collect::<Result<Vec<_>, _>>()?;
        let local = claim(addr)?;
        let sockets = eps
            .into_iter()
            .map(|ep| SessionSocket::dedicating_on(local, ep, true))
            .collect::<Result<Vec<_>, _>>()?;
        sockets[0]
            .link
            .steer_by_source(workers, LISTENING_SOCKETS)
            .map_err(|source| NetError::Steer {
                addr: local,
                source,
            })?;
        Ok(sockets)
    }

    /// The most workers [`bind_dedicating_workers`](Self::bind_dedicating_workers) makes
    /// (each has eight listening sockets: 512 descriptors at most).
    pub const MAX_WORKERS: usize = 64;

    /// A dedicating socket on `local` (already claimed) with endpoint `ep`: the main link and
    /// [`LISTENING_SOCKETS`] − 1 more on the same port. With `strict`, a listening socket
    /// that cannot be made is an error (workers' steering counts on every one); without, the
    /// others serve.
    fn dedicating_on(
        local: SocketAddr,
        ep: SessionEndpoint,
        strict: bool,
    ) -> Result<SessionSocket, NetError> {
        let shared = || {
            UdpLink::bind_shared(local).map_err(|source| NetError::BindShared {
                addr: local,
                source,
            })
        };
        let mut socket = SessionSocket::with_link(shared()?, ep);
        // The listening sockets now take handshakes and strays: one datagram per buffer, so a
        // receive quota counts datagrams (coalesced junk would make one buffer a flood).
        let _ = socket.link.set_gro(false);
        for _ in 1..LISTENING_SOCKETS {
            match shared() {
                Ok(l) => {
                    let _ = l.set_recv_buffer_size(8 << 20);
                    socket.listeners.push(l);
                }
                Err(e) if strict => return Err(e),
                // One that cannot be made (descriptors exhausted) leaves the others.
                Err(_) => {}
            }
        }
        socket.dedicating = true;
        Ok(socket)
    }

    fn with_link(mut link: UdpLink, ep: SessionEndpoint) -> SessionSocket {
        // Coalesced receives where the kernel has them: the receive buffers learn the runs'
        // segment size, and each message's spill area takes what does not fit them.
        let _ = link.set_gro(true);
        let _ = link.set_recv_buffer_size(8 << 20);
        let _ = link.set_send_buffer_size(8 << 20);
        SessionSocket {
            ep,
            link,
            listeners: Vec::new(),
            rx: RecvBufs::new(RX_SLOTS, RX_PER_SLOT, HEADROOM),
            epoch: Instant::now(),
            tx: Vec::new(),
            tx_bytes: 0,
            busy: false,
            spin: WaitingBuffer::default(),
            spin_room: phyllo::msg::FRESH_TAILROOM,
            readable: Vec::new(),
            delivered: false,
            dedicated: Vec::new(),
            dedicated_of: HashMap::new(),
            opened: Vec::new(),
            closing: Vec::new(),
            dedicating: false,
        }
    }

    /// The endpoint (its peers, statistics, keys).
    pub fn endpoint(&self) -> &SessionEndpoint {
        &self.ep
    }

    /// The endpoint, to connect, send, and take deliveries and events. What it queues goes out
    /// at the next [`flush`](Self::flush) (which [`pump`](Self::pump) and
    /// [`timers`](Self::timers) call).
    pub fn endpoint_mut(&mut self) -> &mut SessionEndpoint {
        &mut self.ep
    }

    /// Busy-poll the socket in [`pump`](Self::pump) instead of sleeping in the kernel: the
    /// lowest latency, for one core kept busy. Off by default.
    ///
    /// Busy-polling is the latency loop, so it also turns the socket's coalesced receives
    /// (GRO) off, and each turn of the spin is one `recvfrom` of one datagram straight into
    /// an endpoint buffer, the cheapest receive there is: an empty `recvmmsg` costs about 1.6
    /// times an empty `recvfrom` on loopback. A bulk transfer in this mode takes a system
    /// call per datagram; turning busy-polling off turns GRO on again.
    pub fn set_busy_poll(&mut self, busy: bool) {
        self.busy = busy;
        if !self.dedicating {
            let _ = self.link.set_gro(!busy);
        }
    }

    /// The peers that received data since the last call, each once, in the order their data
    /// came; their messages wait in the endpoint (`poll_delivery_with`).
    pub fn take_readable(&mut self) -> Vec<PeerId> {
        std::mem::take(&mut self.readable)
    }

    /// [`take_readable`](Self::take_readable) into `into` (cleared first), keeping both
    /// lists' allocations: a server's loop that calls this every round allocates nothing.
    pub fn take_readable_into(&mut self, into: &mut Vec<PeerId>) {
        into.clear();
        std::mem::swap(into, &mut self.readable);
    }

    /// Put `peer` back on the list [`take_readable`](Self::take_readable) returns, e.g. when
    /// the program stopped reading it before its messages ran out.
    pub fn mark_readable(&mut self, peer: PeerId) {
        push_once(&mut self.readable, peer);
    }

    /// The socket's address.
    pub fn local_addr(&self) -> SocketAddr {
        self.link.local_addr()
    }

    /// Protocol time now: the monotonic time since the socket was made.
    pub fn now(&self) -> Time {
        Time(self.epoch.elapsed().as_nanos() as u64)
    }

    /// Send everything the endpoint has to send: the only datagram waiting goes to the kernel
    /// from its session's buffer, which stays there (a request-response exchange's usual
    /// case); several are taken in the buffers they were sealed in, and their runs go to the
    /// kernel from there as segmented messages where it can ([`phyllo_udp::offload`]); then
    /// the buffers go back to the endpoint.
    ///
    /// A datagram the network refuses (no route, unreachable peer) is a loss the protocol
    /// recovers from, not an error: this does not fail today, and returns a `Result` so that
    /// it may.
    pub fn flush(&mut self) -> Result<(), NetError> {
        // The only datagram waiting goes from its session's buffer, not a copy of it.
        let link = &mut self.link;
        self.ep.transmit_single(|to, d| {
            // As below: a full socket buffer is waited out; a refusal is a counted loss.
            while let Ok(false) = link.send_one(d, to) {}
        });
        if self.ep.transmit_waiting() {
            self.flush_taken();
        }
        Ok(())
    }

    /// [`flush`](Self::flush) of several datagrams: taken from the endpoint and sent in
    /// batches. Out of line: the usual flush is of one datagram, and this loop's set-up cost
    /// it ~100 instructions (callgrind).
    #[inline(never)]
    fn flush_taken(&mut self) {
        loop {
            while self.tx_bytes < TX_QUEUE_BYTES {
                let Some((to, m)) = self.ep.poll_transmit_msg() else {
                    break;
                };
                self.tx_bytes += m.len();
                self.tx.push((to, m));
            }
            if self.tx.is_empty() {
                return;
            }
            let mut done = 0;
            while done < self.tx.len() {
                // A datagram the network refuses (no route, unreachable peer) is a loss the
                // protocol recovers from; the link counts it and the rest still go.
                let _ = self.link.send_outgoing(&self.tx, &mut done);
            }
            for (_, m) in self.tx.drain(..) {
                self.ep.recycle(m);
            }
            self.tx_bytes = 0;
        }
    }

    /// Put the endpoint's buffers where the last receive's datagrams were taken.
    fn refill(&mut self) {
        let ep = &mut self.ep;
        self.rx.refill(|| ep.alloc().into_parts().0);
    }

    /// One round: send, run the accelerator's deferred post-processing and the endpoint's due
    /// timers and send what they made ([`timers`](Self::timers)), wait for input at most
    /// `wait` (or until the endpoint's next timer), hand it to the endpoint, run due timers
    /// again, send again. Returns datagrams received.
    ///
    /// The order keeps deferred work off the round trip (seed 004 §3.1): the post-processing
    /// runs once what is queued has left, while the answer travels, not when the next request
    /// is already in. When this round delivered data, the timers after the receive wait for
    /// the next round instead: the application answers the deliveries first, and the next
    /// `pump` sends the answers before it post-processes both.
    pub fn pump(&mut self, wait: Duration) -> Result<usize, NetError> {
        self.timers()?;
        let now = self.now();
        let wait = match self.ep.poll_timeout() {
            Some(t) if t <= now => Duration::ZERO,
            Some(t) => wait.min(t - now),
            None => wait,
        };
        self.refill();
        self.delivered = false;
        let mut total = 0;
        // A busy socket that does not dedicate has GRO off (`set_busy_poll`): it spins with
        // one `recvfrom` per turn.
        let mut got = if self.busy && !self.dedicating {
            // The datagram the spin took is handled already. A delivery goes to the
            // application at once (as below); after anything else (an acknowledgement, say),
            // what else is queued is taken without waiting.
            total = self.spin_one(Instant::now() + wait)?;
            if total == 0 || self.delivered {
                0
            } else {
                received(self.link.try_recv(&mut self.rx))?
            }
        } else if self.busy {
            received(self.link.recv_busy(&mut self.rx, Instant::now() + wait))?
        } else if wait.is_zero() {
            received(self.link.try_recv(&mut self.rx))?
        } else {
            // A bounded wait says Ok(0) when it times out.
            received(
                self.link
                    .recv_timeout(&mut self.rx, Some(wait.max(Duration::from_micros(50)))),
            )?
        };
        let mut rounds = 0;
        while got > 0 {
            total += self.handle_batch(true);
            rounds += 1;
            // Busy-polling is the latency loop: deliveries go to the application at once,
            // not after one more receive that finds nothing (a system call on every round
            // trip's critical path); the next round receives the rest.
            if rounds >= 8 || (self.busy && self.delivered) {
                break;
            }
            self.flush()?;
            self.refill();
            got = received(self.link.try_recv(&mut self.rx))?;
        }
        self.flush()?;
        if !self.delivered {
            // With deliveries, the next round runs the timers, after the answers left.
            self.run_due()?;
        }
        Ok(total)
    }

    /// The endpoint's timers due now, and what they send.
    fn run_due(&mut self) -> Result<(), NetError> {
        let now = self.now();
        if self.ep.poll_timeout().is_some_and(|t| t <= now) {
            self.ep.handle_timeout(now);
            self.flush()?;
        }
        Ok(())
    }

    /// Spin with one non-blocking `recvfrom` per turn until a datagram arrives (it is handed
    /// to the endpoint: returns 1) or `deadline` passes (returns 0; one turn if it has
    /// passed already). The datagram lands in an endpoint buffer that waits across turns, so
    /// an empty turn costs the system call alone. One longer than the buffer's room is
    /// dropped (the link counts it truncated) and the room grows to the most UDP carries, so
    /// the peer's retransmission fits.
    fn spin_one(&mut self, deadline: Instant) -> Result<usize, NetError> {
        let mut spins: u32 = 0;
        loop {
            let ep = &mut self.ep;
            let took = self
                .spin
                .recv(&mut self.link, self.spin_room, || ep.alloc())
                .map_err(NetError::Receive)?;
            match took {
                Took::Datagram(m, Some(from)) => {
                    let now = self.now();
                    self.take_in(now, from, m);
                    return Ok(1);
                }
                // No source address to answer (a family the kernel should not give): nothing
                // a session can take.
                Took::Datagram(m, None) => self.ep.recycle(m),
                Took::CutShort => self.spin_room = 1 << 16,
                Took::Nothing => {}
            }
            spins = spins.wrapping_add(1);
            // The clock after the first turn (a deadline already passed, a zero wait, takes
            // one receive), then only every few: reading it costs about as much as the
            // receive.
            if spins % 8 == 1 && Instant::now() >= deadline {
                return Ok(0);
            }
            std::hint::spin_loop();
        }
    }

    /// Hand one datagram to the endpoint; the peer it delivered data of, listed as readable.
    fn take_in(&mut self, now: Time, from: SocketAddr, m: Msg) -> Option<PeerId> {
        let Input::Data(p) = self.ep.handle_msg(now, from, m) else {
            return None;
        };
        self.delivered = true;
        push_once(&mut self.readable, p);
        Some(p)
    }

    /// Hand the datagrams of the last receive to the endpoint; how many there were. Data that
    /// came in on the shared socket from a peer without a socket of its own gets it one, when
    /// dedicating.
    fn handle_batch(&mut self, shared: bool) -> usize {
        let now = self.now();
        let mut n = 0;
        let mut newcomers = Vec::new();
        loop {
            let ep = &mut self.ep;
            let Some(d) = self.rx.pop(|| ep.alloc().into_parts().0) else {
                break;
            };
            n += 1;
            let m = Msg::from_parts(d.buf, d.data);
            let Some(from) = d.from else {
                self.ep.recycle(m);
                continue;
            };
            if let Some(p) = self.take_in(now, from, m) {
                if shared && self.dedicating && !newcomers.contains(&(p, from)) {
                    newcomers.push((p, from));
                }
            }
        }
        for (p, from) in newcomers {
            self.dedicate_to(p, from);
        }
        n
    }

    /// Give peer `p` at `from` a socket of its own (unless it has one, or too many have).
    fn dedicate_to(&mut self, p: PeerId, from: SocketAddr) {
        if self.dedicated_of.len() >= MAX_DEDICATED || self.dedicated_of.contains_key(&p) {
            return;
        }
        // A socket that cannot be made (descriptors exhausted) leaves the peer on the shared
        // one, which still works.
        if let Ok(mut link) = self.link.dedicated(from) {
            // Bulk data comes here: coalesced receives, and room to queue it.
            let _ = link.set_gro(true);
            let _ = link.set_recv_buffer_size(8 << 20);
            let i = match self.dedicated.iter().position(Option::is_none) {
                Some(i) => i,
                None => {
                    self.dedicated.push(None);
                    self.dedicated.len() - 1
                }
            };
            self.dedicated[i] = Some((p, link));
            self.dedicated_of.insert(p, i);
            self.opened.push(i);
        }
    }

    /// Whether dedicated sockets were opened since [`take_opened`](Self::take_opened).
    pub fn has_opened(&self) -> bool {
        !self.opened.is_empty()
    }

    /// Dedicated sockets opened since the last call (indices for
    /// [`receive_dedicated`](Self::receive_dedicated) and
    /// [`dedicated_socket`](Self::dedicated_socket)).
    pub fn take_opened(&mut self) -> Vec<usize> {
        std::mem::take(&mut self.opened)
    }

    /// Dedicated sockets to close (their session ended or the peer moved): the driver stops
    /// watching each, then calls [`close_dedicated`](Self::close_dedicated).
    pub fn take_closing(&mut self) -> Vec<usize> {
        std::mem::take(&mut self.closing)
    }

    /// Close dedicated socket `i`.
    pub fn close_dedicated(&mut self, i: usize) {
        if let Some((p, _)) = self.dedicated.get_mut(i).and_then(Option::take) {
            self.dedicated_of.remove(&p);
        }
    }

    /// Dedicated socket `i`, if open.
    pub fn dedicated_socket(&self, i: usize) -> Option<&UdpLink> {
        self.dedicated.get(i)?.as_ref().map(|(_, l)| l)
    }

    /// Like [`receive_some`](Self::receive_some), from dedicated socket `i`. An error on the
    /// socket (the peer's ICMP port unreachable when it has gone) marks it for closing
    /// ([`take_closing`](Self::take_closing)) and is not returned.
    pub fn receive_dedicated(&mut self, i: usize, max: usize) -> Result<usize, NetError> {
        let Some(Some((_, link))) = self.dedicated.get_mut(i) else {
            return Ok(0);
        };
        let ep = &mut self.ep;
        self.rx.refill(|| ep.alloc().into_parts().0);
        match link.try_recv_some(&mut self.rx, max) {
            Ok(got) => {
                if got > 0 {
                    self.handle_batch(false);
                }
                Ok(got)
            }
            // A connected socket hears of the peer's errors (ICMP port unreachable when it has
            // gone): that ends the socket, not the server; the session has its own timers.
            Err(_) => {
                if !self.closing.contains(&i) {
                    self.closing.push(i);
                }
                Ok(0)
            }
        }
    }

    /// Mark for closing the dedicated sockets whose peer has no session any more or has
    /// moved to another address.
    fn prune_dedicated(&mut self) {
        for (i, d) in self.dedicated.iter().enumerate() {
            if let Some((p, link)) = d {
                let stale =
                    !self.ep.is_established(*p) || self.ep.peer_addr(*p) != link.peer_addr();
                if stale && !self.closing.contains(&i) {
                    self.closing.push(i);
                }
            }
        }
    }

    /// Take at most `max` receive buffers off the socket without waiting and hand their
    /// datagrams to the endpoint (the receive engine's callback: the rest stays in the socket);
    /// how many buffers were taken.
    pub fn receive_some(&mut self, max: usize) -> Result<usize, NetError> {
        self.receive_listener(0, max)
    }

    /// Move to a new socket on a new local port (same address): a client whose handshakes go
    /// unanswered may be hashed onto a server's flooded listening socket (see
    /// [`bind_dedicating`](Self::bind_dedicating)) or sit behind a stale NAT mapping, and a
    /// new source port gets it another. Sessions carry on (a server learns the new address
    /// from the next authenticated datagram); what was queued is sent first, and a handshake
    /// under way sends a new initiation at once from the new port
    /// ([`SessionEndpoint::local_address_changed`]). Not for a
    /// dedicating socket, whose port is its address: [`NetError::Rebind`].
    pub fn rebind(&mut self) -> Result<SocketAddr, NetError> {
        if self.dedicating {
            return Err(NetError::Rebind);
        }
        self.flush()?;
        let addr = SocketAddr::new(self.link.local_addr().ip(), 0);
        let mut link = UdpLink::bind(addr).map_err(|source| NetError::Bind { addr, source })?;
        let _ = link.set_gro(!self.busy);
        let _ = link.set_recv_buffer_size(8 << 20);
        let _ = link.set_send_buffer_size(8 << 20);
        if let Some(server) = self.link.peer_addr() {
            link.connect(server).map_err(|source| NetError::Connect {
                addr: server,
                source,
            })?;
        }
        self.link = link;
        // Handshakes under way start again from here: their answers would go to the old port.
        let now = self.now();
        self.ep.local_address_changed(now);
        Ok(self.link.local_addr())
    }

    /// Connect the socket to `server`, the one address a client's socket talks to. The kernel
    /// then keeps the route instead of looking it up for every send, and a receive hands no
    /// source address over; on loopback that is a tenth of a busy-polled session round trip
    /// (`phyllo connect --busy-poll --ping` against a plain UDP ping-pong, 15 interleaved
    /// rounds: 1.50 × the plain round trip unconnected, 1.34 × connected). Datagrams from any
    /// other address are not received any more, so connect once the server has answered from
    /// `server` ([`SessionEndpoint::peer_addr`]): a server with several addresses may answer
    /// from another than the one dialled. It stays connected to `server` across
    /// [`rebind`](Self::rebind). Not for a dedicating socket, which serves many peers.
    pub fn connect_to(&mut self, server: SocketAddr) -> Result<(), NetError> {
        let fail = |source| NetError::Connect {
            addr: server,
            source,
        };
        if self.dedicating {
            return Err(fail(std::io::Error::new(
                std::io::ErrorKind::InvalidInput,
                "a dedicating socket serves many peers",
            )));
        }
        self.link.connect(server).map_err(fail)
    }

    /// How many listening sockets there are: one, or with
    /// [`bind_dedicating`](Self::bind_dedicating) several on the same port, among which the
    /// kernel spreads strangers' datagrams by source, so a flood from one source fills one of
    /// them. A receive engine serves each ([`listener`](Self::listener),
    /// [`receive_listener`](Self::receive_listener)).
    pub fn listeners(&self) -> usize {
        1 + self.listeners.len()
    }

    /// Listening socket `i` (0: [`socket`](Self::socket)), for registering with a receive
    /// engine.
    pub fn listener(&self, i: usize) -> Option<&UdpLink> {
        match i {
            0 => Some(&self.link),
            _ => self.listeners.get(i - 1),
        }
    }

    /// Like [`receive_some`](Self::receive_some), from listening socket `i`.
    ///
    /// A peer given a socket of its own in this batch may have more datagrams queued on the
    /// listening socket, sent before its socket existed: older than anything that reaches the
    /// new socket. They are taken now (up to 1024 buffers, a bound against a flood), before the
    /// driver serves the new socket, which would otherwise hand the endpoint the peer's later
    /// datagrams first — a burst sent right after the handshake would arrive reordered, and
    /// its sender would take the reordering for losses.
    pub fn receive_listener(&mut self, i: usize, max: usize) -> Result<usize, NetError> {
        let opened = self.opened.len();
        let mut got = self.receive_listener_once(i, max)?;
        if self.opened.len() > opened {
            let mut drained = 0;
            while drained < DRAIN_AFTER_DEDICATING {
                let more = self.receive_listener_once(i, max)?;
                if more == 0 {
                    break;
                }
                drained += more;
            }
            got += drained;
        }
        Ok(got)
    }

    /// One receive of at most `max` buffers from listening socket `i`, handed to the endpoint.
    fn receive_listener_once(&mut self, i: usize, max: usize) -> Result<usize, NetError> {
        self.refill();
        let link = match i {
            0 => &mut self.link,
            _ => match self.listeners.get_mut(i - 1) {
                Some(l) => l,
                None => return Ok(0),
            },
        };
        let got = link
            .try_recv_some(&mut self.rx, max)
            .map_err(NetError::Receive)?;
        if got > 0 {
            self.handle_batch(true);
        }
        Ok(got)
    }

    /// Send what is queued, then run the accelerator's deferred post-processing and the
    /// endpoint's due timers, and send what they produce. What is queued goes first: the
    /// post-processing belongs after the datagram left, not before it; and it runs now,
    /// while the answer travels, not at its deadline, when the next request may be in
    /// ([`SessionEndpoint::post_process`](phyllo::SessionEndpoint::post_process)).
    pub fn timers(&mut self) -> Result<(), NetError> {
        self.flush()?;
        let now = self.now();
        self.ep.post_process(now);
        self.flush()?;
        self.run_due()?;
        if self.dedicating {
            self.prune_dedicated();
        }
        Ok(())
    }

    /// How long until the endpoint's next timer (`None`: no timer).
    pub fn next_timer(&self) -> Option<Duration> {
        let now = self.now();
        self.ep.poll_timeout().map(|t| t - now)
    }

    /// The listening socket (for registering with a receive engine).
    pub fn socket(&self) -> &UdpLink {
        &self.link
    }

    /// Received datagrams so far that were copied on their way from the socket to the
    /// endpoint, because they did not land alone in one receive buffer: a datagram longer than
    /// the buffers had learnt to offer, or one of a coalesced run of small ones
    /// (acknowledgements, under 512 bytes), which are copied out rather than shrink the
    /// buffers ([`RecvBufs::joined`]). Every other datagram is handed over in the buffer the
    /// kernel wrote it into.
    pub fn copied_on_receive(&self) -> u64 {
        self.rx.joined()
    }
}
