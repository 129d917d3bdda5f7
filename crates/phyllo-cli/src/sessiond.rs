//! The session endpoint over a real UDP socket, and what `serve` and `connect` say to each
//! other.
//!
//! [`Node`] is the thin driver: it moves datagrams between a [`UdpLink`] (batched
//! `sendmmsg`/`recvmmsg`) and a sans-IO [`SessionEndpoint`], maps the monotonic clock onto
//! protocol time and runs the endpoint's timers; the commands do the rest with the endpoint's
//! own calls. Initiation timestamps come from the wall clock at start-up plus the monotonic
//! time since, so they grow across restarts of the process.
//!
//! The application protocol on top: every message starts with a type byte — `p` a ping (the
//! server sends it back), `d` data (the server counts it and, with `--out`, writes it to a
//! file), `e` the end of a stream (the server answers `h` and the SHA-256 of the stream in
//! hexadecimal).

use anyhow::{bail, Context, Result};
use phyllo::session::endpoint::{Input, PeerId, PeerStats, SessionConfig, SessionEndpoint};
use phyllo::session::{PublicKey, StaticKey};
use phyllo::{Connection, Time};
use phyllo_udp::offload::TxQueue;
use phyllo_udp::udp::{RecvBatch, UdpLink, MAX_BATCH};
use std::net::SocketAddr;
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// A ping; echoed.
pub const PING: u8 = b'p';
/// Data of a stream.
pub const DATA: u8 = b'd';
/// End of a stream; answered by [`HASH`].
pub const END: u8 = b'e';
/// The SHA-256 of a stream, hexadecimal.
pub const HASH: u8 = b'h';

/// The default stack of sessions.
pub const DEFAULT_STACK: &str = "frag(1400):window(64):seal";

/// Bytes of datagrams a flush queues before it sends them: about sixteen segmented messages.
const TX_QUEUE_BYTES: usize = 1 << 20;

/// Read a public key from a `.pub` file, or take it as 64 hexadecimal digits.
pub fn read_public(arg: &str) -> Result<PublicKey> {
    let text = if Path::new(arg).exists() {
        std::fs::read_to_string(arg).with_context(|| format!("reading {arg}"))?
    } else {
        arg.to_string()
    };
    let bytes = phyllo::session::parse_key_hex(&text)
        .with_context(|| format!("{arg}: not a public key file or 64 hexadecimal digits"))?;
    Ok(PublicKey(bytes))
}

/// A flag Ctrl-C sets.
pub fn interrupted() -> Result<Arc<AtomicBool>> {
    let flag = Arc::new(AtomicBool::new(false));
    let f = flag.clone();
    ctrlc::set_handler(move || f.store(true, Ordering::SeqCst))
        .context("installing the Ctrl-C handler")?;
    Ok(flag)
}

/// Whether `flag` was set.
pub fn is_set(flag: &AtomicBool) -> bool {
    flag.load(Ordering::SeqCst)
}

/// A session endpoint on a UDP socket.
pub struct Node {
    /// The endpoint.
    pub ep: SessionEndpoint,
    link: UdpLink,
    batch: RecvBatch,
    epoch: Instant,
    tx: TxQueue,
    /// Busy-poll instead of sleeping in the kernel.
    pub busy: bool,
    /// Peers that received data since the caller last took this list.
    pub readable: Vec<PeerId>,
    /// Sockets of their own for peers with an established session, when on
    /// ([`Node::bind_dedicating`]): `(peer, socket)` by index, `None` once closed.
    dedicated: Vec<Option<(PeerId, UdpLink)>>,
    /// The open ones by peer (a datagram on the shared socket asks whether its peer has one).
    dedicated_of: std::collections::HashMap<PeerId, usize>,
    /// Indices of dedicated sockets opened, and to be closed, since the driver last looked.
    opened: Vec<usize>,
    closing: Vec<usize>,
    dedicating: bool,
}

/// Check a stack spec before binding anything, so a bad one is an error now, not a failed
/// session.
fn check_stack(stack: &str) -> Result<()> {
    phyllo::stack::build_dyn(stack).with_context(|| format!("stack `{stack}`"))?;
    Ok(())
}

/// The most peers that get a socket of their own (each costs a descriptor); the rest share the
/// listening socket.
const MAX_DEDICATED: usize = 512;

impl Node {
    /// Bind `addr` and make an endpoint with `key`, accepting `allowed`, whose sessions run
    /// `stack` (accelerated or not).
    pub fn bind(
        addr: SocketAddr,
        key: StaticKey,
        allowed: Vec<PublicKey>,
        stack: &str,
        accelerate: bool,
    ) -> Result<Node> {
        check_stack(stack)?;
        let link = UdpLink::bind(addr).with_context(|| format!("cannot listen on {addr}"))?;
        Node::with_link(link, key, allowed, stack, accelerate)
    }

    fn with_link(
        mut link: UdpLink,
        key: StaticKey,
        allowed: Vec<PublicKey>,
        stack: &str,
        accelerate: bool,
    ) -> Result<Node> {
        // Coalesced receives where the kernel has them: the batch's 64 KiB buffers take any.
        let _ = link.set_gro(true);
        let _ = link.set_recv_buffer_size(8 << 20);
        let _ = link.set_send_buffer_size(8 << 20);
        let mut seed = [0u8; 32];
        getrandom::fill(&mut seed).map_err(|e| anyhow::anyhow!("no randomness: {e}"))?;
        let spec = stack.to_string();
        let ep = SessionEndpoint::new(
            key,
            allowed,
            SessionConfig {
                accelerate,
                ..SessionConfig::default()
            },
            Box::new(move |mut c| {
                // What release builds run, in every build: sessions check a sample of
                // their fast-path operations (debug builds' default checks every one).
                c.fast_path_check = phyllo::FastPathCheck::Sampled;
                Connection::from_spec(&spec, c)
            }),
            seed,
        );
        Ok(Node {
            ep,
            link,
            batch: RecvBatch::new(MAX_BATCH, 65_536),
            epoch: Instant::now(),
            tx: TxQueue::new(),
            busy: false,
            readable: Vec::new(),
            dedicated: Vec::new(),
            dedicated_of: std::collections::HashMap::new(),
            opened: Vec::new(),
            closing: Vec::new(),
            dedicating: false,
        })
    }

    /// The socket's address.
    pub fn local_addr(&self) -> SocketAddr {
        self.link.local_addr()
    }

    /// Protocol time now.
    pub fn now(&self) -> Time {
        Time(self.epoch.elapsed().as_nanos() as u64)
    }

    /// Send everything the endpoint has to send: datagrams are written back to back into one
    /// queue, whose runs go to the kernel as segmented messages where it can
    /// ([`phyllo_udp::offload`]).
    pub fn flush(&mut self) -> Result<()> {
        loop {
            while self.tx.bytes() < TX_QUEUE_BYTES
                && self.tx.push_with(|b| self.ep.poll_transmit_append(b))
            {}
            if self.tx.is_empty() {
                return Ok(());
            }
            while !self.tx.is_empty() {
                // A datagram the network refuses (no route, unreachable peer) is a loss the
                // protocol recovers from; the link counts it and the rest still go.
                let _ = self.link.send_queue(&mut self.tx);
            }
        }
    }

    /// One round: send, wait for input at most `wait` (or until the endpoint's next timer),
    /// hand it to the endpoint, run due timers, send again. Returns datagrams received.
    pub fn pump(&mut self, wait: Duration) -> Result<usize> {
        self.flush()?;
        let now = self.now();
        let wait = match self.ep.poll_timeout() {
            Some(t) if t <= now => Duration::ZERO,
            Some(t) => wait.min(t - now),
            None => wait,
        };
        let mut got = if self.busy {
            self.link
                .recv_busy(&mut self.batch, Instant::now() + wait)
                .context("receiving")?
        } else if wait.is_zero() {
            self.link.try_recv(&mut self.batch).context("receiving")?
        } else {
            self.link
                .recv_timeout(&mut self.batch, Some(wait.max(Duration::from_micros(50))))
                .or_else(|e| match e.kind() {
                    std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut => Ok(0),
                    _ => Err(e),
                })
                .context("receiving")?
        };
        let mut total = 0;
        let mut rounds = 0;
        while got > 0 {
            total += self.handle_batch(true);
            rounds += 1;
            if rounds >= 8 {
                break;
            }
            self.flush()?;
            got = self.link.try_recv(&mut self.batch).context("receiving")?;
        }
        self.timers()?;
        Ok(total)
    }

    /// Hand the datagrams of the last receive to the endpoint; how many there were. Data that
    /// came in on the shared socket from a peer without a socket of its own gets it one, when
    /// dedicating.
    fn handle_batch(&mut self, shared: bool) -> usize {
        let now = self.now();
        let mut n = 0;
        let mut newcomers = Vec::new();
        for (d, from) in self.batch.datagrams() {
            n += 1;
            let Some(from) = from else {
                continue;
            };
            if let Input::Data(p) = self.ep.handle_datagram(now, from, d) {
                if !self.readable.contains(&p) {
                    self.readable.push(p);
                }
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
    ) -> Result<Node> {
        check_stack(stack)?;
        let local = UdpLink::bind(addr)
            .with_context(|| format!("cannot listen on {addr}"))?
            .local_addr();
        let link = UdpLink::bind_shared(local)
            .with_context(|| format!("cannot listen on {local} (shared)"))?;
        let mut node = Node::with_link(link, key, allowed, stack, accelerate)?;
        // The listening socket now takes handshakes and strays: one datagram per buffer, so a
        // receive quota counts datagrams (coalesced junk would make one buffer a flood).
        let _ = node.link.set_gro(false);
        node.dedicating = true;
        Ok(node)
    }

    /// Whether dedicated sockets were opened since [`take_opened`](Self::take_opened).
    pub fn has_opened(&self) -> bool {
        !self.opened.is_empty()
    }

    /// Dedicated sockets opened since the last call (indices for
    /// [`receive_dedicated`](Self::receive_dedicated) and [`dedicated_socket`](Self::dedicated_socket)).
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

    /// Like [`receive_some`](Self::receive_some), from dedicated socket `i`.
    pub fn receive_dedicated(&mut self, i: usize, max: usize) -> Result<usize> {
        let Some(Some((_, link))) = self.dedicated.get_mut(i) else {
            return Ok(0);
        };
        match link.try_recv_some(&mut self.batch, max) {
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
    pub fn receive_some(&mut self, max: usize) -> Result<usize> {
        let got = self
            .link
            .try_recv_some(&mut self.batch, max)
            .context("receiving")?;
        if got > 0 {
            self.handle_batch(true);
        }
        Ok(got)
    }

    /// Run the endpoint's due timers and send what they produce.
    pub fn timers(&mut self) -> Result<()> {
        let now = self.now();
        if self.ep.poll_timeout().is_some_and(|t| t <= now) {
            self.ep.handle_timeout(now);
        }
        if self.dedicating {
            self.prune_dedicated();
        }
        self.flush()
    }

    /// How long until the endpoint's next timer (`None`: no timer).
    pub fn next_timer(&self) -> Option<Duration> {
        let now = self.now();
        self.ep.poll_timeout().map(|t| t - now)
    }

    /// The socket (for registering with a receive engine).
    pub fn socket(&self) -> &UdpLink {
        &self.link
    }
}

/// A peer's statistics as one line.
pub fn stats_line(key: &PublicKey, addr: Option<SocketAddr>, s: &PeerStats) -> String {
    let fast = s.fast_msgs + s.slow_msgs;
    let ratio = if fast > 0 {
        format!("{:.3}", s.fast_msgs as f64 / fast as f64)
    } else {
        "-".into()
    };
    let key = key.to_string();
    format!(
        "peer {}… at {}: sessions {}, messages sent {} delivered {}, datagrams out {} in {}, bytes out {}, \
         fast-path ratio {}, datagrams dropped {}, returned unconfirmed {}",
        &key[..12],
        addr.map_or("?".into(), |a| a.to_string()),
        s.sessions,
        s.sent_msgs,
        s.delivered,
        s.datagrams_out,
        s.datagrams_in,
        s.bytes_out,
        ratio,
        s.input_drops,
        s.unconfirmed,
    )
}

/// The endpoint's drops by reason as one line.
pub fn drops_line(ep: &SessionEndpoint) -> String {
    let s = ep.stats();
    let drops: Vec<String> = phyllo::session::endpoint::Drop::ALL
        .iter()
        .filter(|&&d| s.dropped(d) > 0)
        .map(|&d| format!("{} {}", d.name(), s.dropped(d)))
        .collect();
    format!(
        "endpoint: sessions established {}, ended {}, cookie replies {}, drops: {}",
        s.established,
        s.ended,
        s.cookie_replies,
        if drops.is_empty() {
            "none".into()
        } else {
            drops.join(", ")
        }
    )
}

/// Hexadecimal SHA-256.
pub fn hex_digest(d: &[u8]) -> String {
    d.iter().map(|b| format!("{b:02x}")).collect()
}

/// Fail unless `s` names a socket address.
pub fn parse_addr(s: &str) -> Result<SocketAddr> {
    use std::net::ToSocketAddrs;
    match s.to_socket_addrs() {
        Ok(mut it) => match it.next() {
            Some(a) => Ok(a),
            None => bail!("{s}: no address"),
        },
        Err(e) => bail!("{s}: not an address ({e})"),
    }
}
