//! `SessionEndpoint`: one socket, many peers, every datagram authenticated before it acts.
//!
//! Not from a seed paper: what turns the sealed stack into something deployable, after
//! quinn-proto's `Endpoint` (sans-IO: datagrams, time and application calls in; datagrams,
//! events and deliveries out) and WireGuard's sessions (a handshake per session, indices that
//! route, a new handshake superseding the old session, cookies under load).
//!
//! # Wire
//!
//! The first byte says what a datagram is: 1 an initiation and 2 a response (the Noise IK
//! messages of [`crate::session`]; an initiation ends with
//! [`mac1` and `mac2`](crate::session::mac)), 3 a cookie reply, 4 data:
//! `[4][receiver's session index, 4 bytes LE][the connection's datagram]` — five bytes that
//! route a datagram to its session without a lookup by address, so a peer may change address
//! (it is followed once a datagram from the new one authenticates).
//!
//! # Authenticate, then act
//!
//! A datagram changes nothing unless it authenticates: an initiation must pass mac1, the
//! Noise handshake, the allowed-peer list and the replay rule before any state exists for it;
//! a response must complete the pending initiation it names; data must be authenticated as
//! new by its session's connection ([`Received::is_fresh`]: for a sealed stack, `seal` passed
//! it) before the session's liveness or the peer's address is updated. Everything else is a
//! counted [`Discard`]. State before authentication is none at all: a responder keeps
//! nothing per initiation it has not accepted; under load (initiations arriving faster than
//! [`SessionConfig::handshakes_per_sec`], a second's worth ahead) it asks for a cookie
//! ([`crate::session::mac`]) before doing any Diffie-Hellman, so a flood of replayed
//! initiations costs no Diffie-Hellman at all.
//!
//! # The reliability contract
//!
//! Within one session the stack's guarantees hold (with `window`: every message delivered
//! once, in order). Sessions end — superseded by a new handshake (a restarted peer, a rekey),
//! a peer silent for [`dead_after`](SessionConfig::dead_after) while data is outstanding, a
//! failed handshake, the key-usage limit, an idle timeout, or [`close`](SessionEndpoint::close)
//! — and then every message the application sent that the session had not *confirmed* is
//! handed back in [`Event::Ended`], in order: confirmed means that the peer's reliable layer
//! acknowledged it and everything sent before it ([`Connection::delivery_mark`]; with a stack
//! whose layers do not number what they take: that afterwards, at some moment, everything the
//! connection had sent was acknowledged, [`Connection::all_acknowledged`]), so a message is
//! either known delivered or returned, never silently lost. (A returned message may have
//! arrived all the same — its acknowledgement was lost — so an application that sends
//! returned messages again gets at-least-once across sessions.) Messages sent while a session
//! is being replaced wait and go into the new one, after the old one's are confirmed, so order
//! between sessions holds.
//! The copies kept for this are bounded by [`retain_limit`](SessionConfig::retain_limit):
//! beyond it `send` says `WouldBlock` until the session confirms.
//!
//! **The bound.** Whatever the rekey, restart and loss timing, no message `send` accepted
//! waits longer than [`delivery_bound`](SessionConfig::delivery_bound) without the endpoint
//! delivering or handing back one of this end's messages to that peer (a queue may be long —
//! low rekey limits make many handshakes — but it never stands still), and each is delivered
//! or handed back in the end. Messages waiting for a session (a rekey under way, a session at
//! its key-usage limit) count as outstanding, so a silent peer is found dead after
//! `dead_after`; this end starts the handshake waiting messages need by itself; while
//! messages wait, handshakes are retried without backing off (after four times the last
//! handshake's round trip, at most `handshake_timeout`); and a handshake that fails
//! `handshake_attempts` times hands everything back. While the peer is heard from, its
//! session is alive and the stack's own retransmissions carry the messages. (A path that
//! fails in one direction only, while the peer keeps sending, keeps the session alive: the
//! bound counts from silence, not from acknowledgement progress.)
//!
//! A restarted peer is detected within a bound. A restarted initiator sends a new initiation
//! (newer timestamp) that names no session to replace: the responder ends the old session at
//! once, reporting what it held — one round trip after the restart. (A rekey's initiation
//! names the session it replaces, authenticated, and that one retires gracefully: it has
//! [`retire_after`](SessionConfig::retire_after) to confirm what it holds.) A restarted
//! responder no longer knows the session: the initiator, hearing nothing for `dead_after`
//! while data is outstanding, handshakes again and ends the dead session when the new one is
//! up — within `dead_after` plus one handshake (retried at most every
//! [`handshake_timeout`](SessionConfig::handshake_timeout) while messages wait; backing off
//! otherwise).
//!
//! A peer's address is the one its last authenticated, *new* datagram came from (a nonce its
//! session had not seen, as WireGuard follows its peers): a copy of a datagram replayed from
//! elsewhere, even ahead of the original, moves it at most until the peer's next datagram.
//!
//! # Buffers and copies
//!
//! The data path copies a message once on its way out and not at all on its way in, besides
//! what the stack's own layers do (`frag` cuts fragments and reassembles them; `window` keeps
//! retransmission copies). [`crate::msg::copied_bytes`] counts every copy; `tests/copies.rs`
//! holds the path to it.
//!
//! - **Out.** The application writes a message into a buffer from [`alloc`](SessionEndpoint::alloc)
//!   (reading a file straight into it, say) and hands it over with
//!   [`send_msg`](SessionEndpoint::send_msg). The session keeps *that buffer* as the copy the
//!   reliability contract hands back — which is why a copy must exist at all: `seal` encrypts
//!   in place, so the sealed datagram cannot serve — and its connection copies the message
//!   once into its own datagram(s), which it seals in place. The session's five-byte header is
//!   written into the datagram's headroom, and [`poll_transmit_msg`](SessionEndpoint::poll_transmit_msg)
//!   hands the buffer to the driver as it is, to be given to the kernel from there (as
//!   `phyllo_udp`'s `UdpLink::send_outgoing` does, a segmented run's datagrams gathered) and
//!   then [`recycle`](SessionEndpoint::recycle)d. Once the session confirms a message its
//!   buffer goes back to the endpoint's pool, for the next `alloc`. A small message in a much
//!   larger buffer is kept as a copy instead (in one arena per session, emptied at once on
//!   confirmation), since [`retain_limit`](SessionConfig::retain_limit) counts messages'
//!   bytes, not their buffers' (a message of up to 24 bytes is kept in the entry itself).
//! - **In.** The driver receives each datagram into a buffer from `alloc` (a coalesced run
//!   one datagram per buffer: `phyllo_udp`'s `RecvBufs`) and hands it over with
//!   [`handle_msg`](SessionEndpoint::handle_msg): the session header comes off in place, and
//!   the connection opens the datagram and delivers the message in that buffer;
//!   [`poll_delivery_with`](SessionEndpoint::poll_delivery_with) lends it to the application.
//! - **Pools.** The endpoint's pool feeds `alloc`; each session's connection has its own. A
//!   buffer that moves from one to the other (a received datagram into the session, a
//!   datagram out of it) is answered by an idle one moving back, so in the steady state
//!   neither allocates.
//!
//! [`send`](SessionEndpoint::send), [`poll_transmit`](SessionEndpoint::poll_transmit),
//! [`poll_transmit_append`](SessionEndpoint::poll_transmit_append) and
//! [`handle_datagram`](SessionEndpoint::handle_datagram) take and give slices instead, and
//! each copies once more: the message into a buffer of the session's, the datagram into the
//! driver's `Vec`, the datagram into a pooled buffer. Nothing on the wire depends on which
//! calls a driver uses.
//!
//! # Key usage limits
//!
//! A (key, nonce) pair never repeats: `seal`'s nonce is a 64-bit per-direction counter and
//! every session has fresh keys. The limit that binds first is AES-GCM's: QUIC (RFC 9001
//! §6.6) allows 2^23 packets per key for confidentiality. The initiator starts a new
//! handshake after [`rekey_after`](SessionConfig::rekey_after) datagrams in either direction
//! (2^22 by default) and a session that reaches
//! [`reject_after`](SessionConfig::reject_after) datagrams sent (2^23) stops sending and
//! ends; ChaCha20-Poly1305 sessions keep the same limits (well inside its own).

#[cfg(doc)]
use crate::conn::Received;
use crate::conn::{BuildError, Config, Connection, DeliveryMark, SendError, Stats, MAX_MESSAGE};
use crate::layer::Role;
use crate::msg::{count_copy, Msg, Pool, FRESH_TAILROOM, HEADROOM};
use crate::session::mac::{CookieJar, ResponderMacKeys, COOKIE_REPLY, MAC_LEN};
use crate::session::{HandshakeError, Initiation, PublicKey, Responder, SessionKeys, StaticKey};
use crate::stack::{DynStack, LayerSet};
use crate::time::Time;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha20Rng;
use rustc_hash::FxHashMap;
use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap, VecDeque};
use std::net::SocketAddr;
use std::time::Duration;
use thiserror::Error;

/// Message type of a data datagram.
pub const DATA: u8 = 4;
/// Bytes the endpoint puts in front of a connection's datagram.
pub const DATA_HEADER: usize = 5;

/// Settings of a [`SessionEndpoint`].
#[derive(Clone, Debug)]
pub struct SessionConfig {
    /// Put the Protocol Accelerator in front of every session's stack.
    pub accelerate: bool,
    /// A session with data outstanding and nothing authenticated heard for this long is
    /// dead: the initiator handshakes again, the responder ends it.
    pub dead_after: Duration,
    /// A handshake unanswered for this long is retried with a new initiation (the wait
    /// doubles with each attempt, up to eight times this).
    pub handshake_timeout: Duration,
    /// Initiations sent at most before a handshake fails.
    pub handshake_attempts: u32,
    /// How long a superseded session may take to confirm what it holds.
    pub retire_after: Duration,
    /// A session with nothing outstanding and no traffic for this long ends.
    pub idle_timeout: Option<Duration>,
    /// A session with no traffic and nothing outstanding for this long gives back its
    /// spare memory ([`Connection::shrink`]); the endpoint's pool of idle buffers is emptied
    /// then too.
    pub shrink_after: Duration,
    /// Datagrams (both directions) after which the initiator rekeys.
    pub rekey_after: u64,
    /// Datagrams sent after which a session sends no more.
    pub reject_after: u64,
    /// Initiations per second (all that arrive, answered or not) beyond which initiations must
    /// carry a cookie: at most this many Diffie-Hellman handshakes per second happen without
    /// one.
    pub handshakes_per_sec: u32,
    /// Under load, initiations (or anything claiming to be one) per second taken from one
    /// source address (IP and port); more are dropped before any MAC is checked, so a flood
    /// from one socket costs a table lookup per datagram instead of a MAC and a cookie reply.
    /// Keyed by the port too, unlike WireGuard's per-IP limiter (20 per second), so that a
    /// flood from one host leaves that host's other clients, and clients behind the same
    /// NAT, their own budget.
    pub initiations_per_source_per_sec: u32,
    /// Sessions at most.
    pub max_sessions: usize,
    /// Bytes of unconfirmed and waiting messages kept per peer at most.
    pub retain_limit: usize,
    /// Wall-clock time at [`Time::ZERO`], nanoseconds since the Unix epoch. Initiation
    /// timestamps must grow across restarts of this end (the responder refuses one not newer
    /// than the last it accepted from this key), so they are wall time: this plus the
    /// endpoint's `now`. `None` (the default): the endpoint reads the system's wall clock
    /// once, at its first initiation, and anchors it to that call's `now` — right for any
    /// driver whose clock starts anywhere, at every start of the process (its
    /// [`config`](SessionEndpoint::config) shows the value from then on). Set it only for a
    /// simulated clock (tests).
    pub epoch_ns: Option<u128>,
    /// The stack the sessions run, as both ends name it. It is bound into every handshake
    /// together with [`accelerate`](Self::accelerate) (Noise's prologue,
    /// [`crate::session`]), so two ends whose datagrams would not read each other's — another
    /// stack, or the accelerator's framing on one end only — get no session: the initiation
    /// fails authentication at the responder (a counted drop) instead of a session that
    /// carries nothing. [`SessionEndpoint::builder`] sets it to its stack spec (blanks
    /// removed); empty for an endpoint made with [`SessionEndpoint::new`], whose sessions
    /// then bind only `accelerate`.
    pub profile: String,
}

impl SessionConfig {
    /// The reliability contract's bound: a message [`send`](SessionEndpoint::send) accepted
    /// never waits this long without the endpoint making progress for its peer (a message
    /// of this end's delivered to the peer's application or handed back in
    /// [`Event::Ended`]): a silent peer is found dead after `dead_after`, then
    /// `handshake_attempts` initiations go out at most one `handshake_timeout` apart (no
    /// back-off while messages wait) before everything is handed back; a retiring session
    /// hands back what it holds after `retire_after` if that is longer.
    pub fn delivery_bound(&self) -> Duration {
        let handshakes = self.handshake_timeout * self.handshake_attempts;
        (self.dead_after + handshakes).max(self.retire_after)
    }
}

impl Default for SessionConfig {
    fn default() -> Self {
        SessionConfig {
            accelerate: false,
            dead_after: Duration::from_secs(2),
            handshake_timeout: Duration::from_secs(1),
            handshake_attempts: 12,
            retire_after: Duration::from_secs(1),
            idle_timeout: Some(Duration::from_secs(180)),
            shrink_after: Duration::from_millis(100),
            rekey_after: 1 << 22,
            reject_after: 1 << 23,
            handshakes_per_sec: 200,
            initiations_per_source_per_sec: 20,
            max_sessions: 1 << 16,
            retain_limit: 8 << 20,
            epoch_ns: None,
            profile: String::new(),
        }
    }
}

impl SessionConfig {
    /// The handshake prologue of sessions with these settings: a label, whether the
    /// accelerator frames the datagrams, and the [`profile`](Self::profile).
    fn prologue(&self) -> Vec<u8> {
        let mut p = b"phyllo session profile 1\0".to_vec();
        p.push(self.accelerate as u8);
        p.extend_from_slice(self.profile.as_bytes());
        p
    }
}

/// Builds a session's connection from its configuration (keys and role filled in). `Send`, so
/// that an endpoint over a `Send` stack may move to another thread (an async runtime's task).
pub type MakeConnection<S> = Box<dyn FnMut(Config) -> Result<Connection<S>, BuildError> + Send>;

/// The stack a [`SessionEndpoint::builder`] gives its sessions unless told otherwise:
/// fragmentation to the datagram size the path carries (searched for from 1200 bytes up to
/// 1452, [`crate::plpmtu`]), a reliable window under CUBIC congestion control with pacing (up
/// to 16 MiB in flight), authenticated encryption.
pub const DEFAULT_STACK: &str = "frag:window:seal";

/// A session endpoint could not be built ([`SessionEndpointBuilder::build`]).
#[derive(Debug, Error)]
pub enum EndpointBuildError {
    /// The stack spec does not parse.
    #[error("stack `{spec}`: {source}")]
    Stack {
        /// The spec as given.
        spec: String,
        /// Why it does not parse.
        source: crate::stack::SpecError,
    },
    /// The stack has no layer that authenticates datagrams (`seal`): a session's datagrams
    /// must be authenticated before they change anything.
    #[error("stack `{0}` has no keyed layer (`seal`): sessions need authenticated datagrams")]
    Unauthenticated(String),
    /// The system's random source failed (session indices and cookie secrets come from it).
    #[error("no randomness: {0}")]
    Random(String),
}

/// Builds a [`SessionEndpoint`] over a dynamic stack: this end's static key, the peers it
/// accepts, the stack every session runs, and its settings.
///
/// ```
/// use phyllo::endpoint::SessionEndpoint;
/// use phyllo::session::StaticKey;
///
/// let server_key = StaticKey::generate()?;
/// let client_key = StaticKey::generate()?;
/// let server = SessionEndpoint::builder(server_key)
///     .allow(client_key.public())
///     .stack("frag(1400):window(bbr):seal")
///     .accelerate(true)
///     .build()?;
/// assert_eq!(server.session_count(), 0);
/// // A stack that does not parse is a typed error naming it.
/// assert!(SessionEndpoint::builder(client_key).stack("window(x)").build().is_err());
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug)]
pub struct SessionEndpointBuilder {
    key: StaticKey,
    allowed: Vec<PublicKey>,
    stack: String,
    cfg: SessionConfig,
    seed: Option<[u8; 32]>,
    fast_path_check: Option<crate::FastPathCheck>,
}

impl SessionEndpointBuilder {
    /// Accept sessions from the peer whose static public key is `peer` (none: the endpoint
    /// only connects).
    pub fn allow(mut self, peer: PublicKey) -> Self {
        self.allowed.push(peer);
        self
    }

    /// Accept sessions from each of `peers`.
    pub fn allow_all(mut self, peers: impl IntoIterator<Item = PublicKey>) -> Self {
        self.allowed.extend(peers);
        self
    }

    /// The stack every session runs, as a spec ([`crate::stack::build_dyn`]); it must have a
    /// keyed layer (`seal`). [`DEFAULT_STACK`] unless set.
    pub fn stack(mut self, spec: &str) -> Self {
        self.stack = spec.to_string();
        self
    }

    /// Put the Protocol Accelerator in front of every session's stack.
    pub fn accelerate(mut self, on: bool) -> Self {
        self.cfg.accelerate = on;
        self
    }

    /// The settings (timeouts, rekey limits, limits); `accelerate` set before is kept only
    /// if `cfg` sets it too.
    pub fn config(mut self, cfg: SessionConfig) -> Self {
        self.cfg = cfg;
        self
    }

    /// How sessions check the accelerator's fast path against the layered path
    /// ([`crate::Config::fast_path_check`]; unset: that field's default, every operation in
    /// debug builds and a sample in release builds).
    pub fn fast_path_check(mut self, check: crate::FastPathCheck) -> Self {
        self.fast_path_check = Some(check);
        self
    }

    /// Seed session indices and cookie secrets with `seed` instead of the system's random
    /// source (reproducible simulations only).
    pub fn seed(mut self, seed: [u8; 32]) -> Self {
        self.seed = Some(seed);
        self
    }

    /// The endpoint, or what is wrong with the description.
    pub fn build(self) -> Result<SessionEndpoint, EndpointBuildError> {
        let spec = self.stack;
        let layers =
            crate::stack::build_dyn(&spec).map_err(|source| EndpointBuildError::Stack {
                spec: spec.clone(),
                source,
            })?;
        if !(0..layers.count()).any(|i| layers.needs_keys_at(i)) {
            return Err(EndpointBuildError::Unauthenticated(spec));
        }
        let seed = match self.seed {
            Some(s) => s,
            None => {
                let mut s = [0u8; 32];
                getrandom::fill(&mut s).map_err(|e| EndpointBuildError::Random(e.to_string()))?;
                s
            }
        };
        let check = self.fast_path_check;
        let mut cfg = self.cfg;
        cfg.profile = spec.chars().filter(|c| !c.is_whitespace()).collect();
        Ok(SessionEndpoint::new(
            self.key,
            self.allowed,
            cfg,
            Box::new(move |mut c| {
                if let Some(check) = check {
                    c.fast_path_check = check;
                }
                Connection::from_spec(&spec, c)
            }),
            seed,
        ))
    }
}

/// A peer of the endpoint: stable across its sessions (restarts, rekeys).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct PeerId(pub u32);

/// Why a session ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum EndReason {
    /// A new handshake with the same peer replaced it (a restart or a rekey) and it did not
    /// confirm what it held within `retire_after`.
    Superseded,
    /// The peer was silent for `dead_after` with data outstanding.
    PeerDead,
    /// Every initiation went unanswered.
    HandshakeFailed,
    /// The key-usage limit was reached.
    KeyLimit,
    /// Nothing happened for `idle_timeout`.
    IdleTimeout,
    /// The application closed it.
    Closed,
}

/// What the application hears about.
#[derive(Debug, PartialEq, Eq)]
pub enum Event {
    /// A session is up: messages flow.
    Established {
        /// The peer.
        peer: PeerId,
        /// Its static public key.
        key: PublicKey,
        /// This end's role in the handshake.
        role: Role,
    },
    /// A session (or a peer's handshake) ended; `unconfirmed` are the messages sent that it
    /// did not confirm delivered, in the order sent.
    Ended {
        /// The peer.
        peer: PeerId,
        /// Why.
        reason: EndReason,
        /// Messages not known delivered.
        unconfirmed: Vec<Vec<u8>>,
    },
}

/// Why a datagram was discarded (each reason counted in [`SessionEndpointStats`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Discard {
    /// Too short for its type.
    Truncated,
    /// An unknown first byte.
    UnknownType,
    /// A session index this endpoint does not have.
    UnknownIndex,
    /// An initiation whose mac1 is wrong.
    Mac1,
    /// An initiation without a valid cookie while under load (a cookie reply was sent).
    CookieRequired,
    /// A handshake message that did not authenticate.
    HandshakeAuth,
    /// An initiation from a key not allowed.
    UnknownPeer,
    /// A replayed or stale initiation.
    Replay,
    /// A malformed handshake message.
    Malformed,
    /// A cookie reply that does not open.
    BadCookieReply,
    /// The session limit is reached.
    TooManySessions,
    /// Data its session refused (authentication, checksum, duplicate).
    Refused,
    /// Under load, an initiation beyond its source address's rate.
    RateLimited,
}

impl Discard {
    /// Every reason, in declaration order: a reason's counter is `drops[reason as usize]`.
    pub const ALL: [Discard; 13] = [
        Discard::Truncated,
        Discard::UnknownType,
        Discard::UnknownIndex,
        Discard::Mac1,
        Discard::CookieRequired,
        Discard::HandshakeAuth,
        Discard::UnknownPeer,
        Discard::Replay,
        Discard::Malformed,
        Discard::BadCookieReply,
        Discard::TooManySessions,
        Discard::Refused,
        Discard::RateLimited,
    ];

    /// A short name for reports.
    pub fn name(self) -> &'static str {
        match self {
            Discard::Truncated => "truncated",
            Discard::UnknownType => "unknown type",
            Discard::UnknownIndex => "unknown session",
            Discard::Mac1 => "bad mac1",
            Discard::CookieRequired => "cookie required",
            Discard::HandshakeAuth => "handshake auth",
            Discard::UnknownPeer => "unknown peer",
            Discard::Replay => "replayed initiation",
            Discard::Malformed => "malformed handshake",
            Discard::BadCookieReply => "bad cookie reply",
            Discard::TooManySessions => "too many sessions",
            Discard::Refused => "refused by session",
            Discard::RateLimited => "rate-limited source",
        }
    }

    fn of(e: &HandshakeError) -> Discard {
        match e {
            HandshakeError::Malformed | HandshakeError::BadKey(_) => Discard::Malformed,
            HandshakeError::Auth | HandshakeError::WrongSession => Discard::HandshakeAuth,
            HandshakeError::UnknownPeer(_) => Discard::UnknownPeer,
            HandshakeError::Replay => Discard::Replay,
        }
    }
}

/// What a datagram did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Input {
    /// Accepted by the peer's session: deliveries may be waiting.
    Data(PeerId),
    /// A handshake message that moved a peer's handshake on.
    Handshake(PeerId),
    /// A cookie reply was taken; the initiation went out again with the cookie.
    Cookie(PeerId),
    /// Counted and dropped.
    Dropped(Discard),
}

/// The application's message was not taken.
#[derive(Debug, Error, PartialEq, Eq)]
pub enum SessionSendError {
    /// No such peer.
    #[error("no such peer")]
    NoPeer,
    /// No session with the peer and this end cannot start one (it was the responder).
    #[error("no session with this peer")]
    NoSession,
    /// The session, or the copies kept until confirmation, are full: poll and try again.
    #[error("would block: try again after polling")]
    WouldBlock,
    /// Larger than a message may be.
    #[error(transparent)]
    Send(SendError),
}

/// A message given by buffer ([`SessionEndpoint::send_msg`]) was not taken: why, and the
/// buffer, to send again later or to give back ([`SessionEndpoint::recycle`]).
#[derive(Debug, Error)]
#[error("{error}")]
pub struct SendMsgError {
    /// Why.
    pub error: SessionSendError,
    /// The message, untouched.
    pub msg: Msg,
}

/// Endpoint counters.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SessionEndpointStats {
    /// Drops, indexed like [`Discard::ALL`].
    pub drops: [u64; Discard::ALL.len()],
    /// Initiations sent.
    pub initiations_sent: u64,
    /// Cookie replies sent.
    pub cookie_replies: u64,
    /// Sessions established.
    pub established: u64,
    /// Sessions ended, by any reason.
    pub ended: u64,
}

impl SessionEndpointStats {
    /// Drops for `reason`.
    pub fn dropped(&self, reason: Discard) -> u64 {
        self.drops[reason as usize]
    }

    /// All drops.
    pub fn total_drops(&self) -> u64 {
        self.drops.iter().sum()
    }
}

/// Totals over a peer's sessions.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PeerStats {
    /// Sessions established.
    pub sessions: u64,
    /// Handshakes begun by this end.
    pub initiations: u64,
    /// Time from the first initiation to the session of the last handshake this end began.
    pub handshake_time: Option<Duration>,
    /// Application messages sent.
    pub sent_msgs: u64,
    /// Messages delivered.
    pub delivered: u64,
    /// Datagrams out.
    pub datagrams_out: u64,
    /// Datagrams in.
    pub datagrams_in: u64,
    /// Bytes out.
    pub bytes_out: u64,
    /// Datagrams the sessions dropped.
    pub input_drops: u64,
    /// Messages on the accelerator's fast path (sent and delivered).
    pub fast_msgs: u64,
    /// Messages on the layered path (sent and delivered), accelerated sessions only.
    pub slow_msgs: u64,
    /// Messages handed back unconfirmed.
    pub unconfirmed: u64,
}

impl PeerStats {
    fn add_conn(&mut self, s: &Stats, c: &Connection<impl LayerSet>) {
        self.sent_msgs += s.sent_msgs;
        self.delivered += s.delivered;
        self.datagrams_out += s.datagrams_out;
        self.datagrams_in += s.datagrams_in;
        self.bytes_out += s.bytes_out;
        self.input_drops += s.input_drops();
        if let Some(a) = c.accel_stats() {
            self.fast_msgs += a.fast_send_msgs + a.fast_deliver_msgs;
            self.slow_msgs += a.slow_send_msgs + a.slow_deliver_msgs;
        }
    }
}

struct Session<S: LayerSet> {
    conn: Connection<S>,
    local: u32,
    remote: u32,
    /// The last authenticated datagram, or the moment data became outstanding after none
    /// was, whichever is later: silence is counted from here.
    quiet_since: Time,
    /// The last authenticated datagram (or the session's start).
    last_rx: Time,
    last_active: Time,
    /// The messages sent and not yet confirmed: the copy the reliability contract hands back.
    unconfirmed: Unconfirmed,
    /// Marks of the sending waiting for the peer's acknowledgement, oldest first, at most
    /// [`MARKS`] (boxed, made by the first message that waits for one and given back when
    /// the session idles: an idle session pays a pointer).
    #[allow(clippy::box_collection)]
    marks: Option<Box<VecDeque<DeliveryMark>>>,
    dead: bool,
    /// Spare memory given back since the last traffic.
    shrunk: bool,
}

/// The messages a session sent and has not confirmed, in order: each in the buffer the
/// application gave ([`SessionEndpoint::send_msg`]), kept without a copy — unless that buffer
/// is more than about twice the message (a few bytes in a pooled 2 KiB buffer), when the
/// message is copied — into the entry itself up to [`TINY`] bytes, else into one arena — and
/// the buffer goes back to the pool. The retention limit counts messages' bytes: kept whole, a
/// stream of tiny messages would pin hundreds of times as much memory. The arena is emptied at
/// once when the session confirms, so it allocates nothing per message either.
#[derive(Default)]
struct Unconfirmed {
    kept: VecDeque<Kept>,
    /// Boxed, and only once a small message came: a session that never keeps one (most of a
    /// server's idle sessions) pays a pointer for it, not a `Vec`'s three words.
    #[allow(clippy::box_collection)]
    arena: Option<Box<Vec<u8>>>,
    /// Bytes of the messages (what [`SessionConfig::retain_limit`] counts).
    bytes: usize,
    /// The session's number of the first message kept (how many were confirmed before it).
    first: u64,
    /// Bytes of the arena that confirmed messages left behind (reclaimed when the arena
    /// empties, or compacted once they are most of it).
    dead: usize,
}

/// One message of [`Unconfirmed`].
enum Kept {
    /// In its own buffer.
    Buf(Msg),
    /// At these bytes of the arena.
    Small(std::ops::Range<usize>),
    /// A tiny message, in the entry itself (a ping, a request: no allocation at all).
    Tiny(u8, [u8; TINY]),
}

/// Delivery marks a session waits on at most ([`Session::confirm`]).
const MARKS: usize = 4;

/// The longest message [`Kept::Tiny`] holds: what fits in an entry without making it larger
/// than one holding a buffer (40 bytes).
const TINY: usize = 24;

impl Unconfirmed {
    fn len(&self) -> usize {
        self.kept.len()
    }

    fn is_empty(&self) -> bool {
        self.kept.is_empty()
    }

    /// Keep `m`: its buffer, or a copy in the arena (the buffer back to `pool`).
    fn push(&mut self, m: Msg, pool: &mut Pool) {
        if worth_its_buffer(m.capacity(), m.len()) {
            self.bytes += m.len();
            self.kept.push_back(Kept::Buf(m));
        } else {
            self.push_bytes(m.data(), pool);
            recycle(pool, m);
        }
    }

    /// Keep a copy of `data`: in a pooled buffer if the message is worth one, else in the
    /// arena.
    fn push_bytes(&mut self, data: &[u8], pool: &mut Pool) {
        if data.len() <= TINY {
            count_copy(data.len());
            let mut b = [0; TINY];
            b[..data.len()].copy_from_slice(data);
            self.bytes += data.len();
            self.kept.push_back(Kept::Tiny(data.len() as u8, b));
            return;
        }
        if worth_its_buffer(HEADROOM + FRESH_TAILROOM, data.len()) {
            self.bytes += data.len();
            self.kept.push_back(Kept::Buf(pool.alloc_copy(data)));
            return;
        }
        count_copy(data.len());
        let arena = self.arena.get_or_insert_with(Box::default);
        let at = arena.len();
        arena.extend_from_slice(data);
        self.bytes += data.len();
        self.kept.push_back(Kept::Small(at..arena.len()));
    }

    /// Confirmed: the buffers go back to `pool`.
    fn clear(&mut self, pool: &mut Pool) {
        self.first += self.kept.len() as u64;
        for k in self.kept.drain(..) {
            if let Kept::Buf(m) = k {
                recycle(pool, m);
            }
        }
        if let Some(a) = &mut self.arena {
            a.clear();
        }
        self.bytes = 0;
        self.dead = 0;
    }

    /// The session's first `n` messages are confirmed: those still kept go (their buffers
    /// back to `pool`).
    fn confirm_upto(&mut self, n: u64, pool: &mut Pool) {
        if n >= self.first + self.kept.len() as u64 {
            self.clear(pool);
            return;
        }
        while self.first < n {
            let Some(k) = self.kept.pop_front() else {
                break;
            };
            self.first += 1;
            match k {
                Kept::Buf(m) => {
                    self.bytes -= m.len();
                    recycle(pool, m);
                }
                Kept::Small(r) => {
                    self.bytes -= r.len();
                    self.dead += r.len();
                }
                Kept::Tiny(len, _) => self.bytes -= usize::from(len),
            }
        }
        self.compact();
    }

    /// Move the arena's live messages to its front once the dead bytes are most of it (and
    /// more than 64 KiB): a session that is never fully acknowledged still reuses its arena.
    fn compact(&mut self) {
        let Some(arena) = self.arena.as_deref_mut() else {
            return;
        };
        if self.dead < 64 << 10 || self.dead * 2 < arena.len() {
            return;
        }
        let mut to = 0;
        for k in &mut self.kept {
            if let Kept::Small(r) = k {
                let len = r.len();
                arena.copy_within(r.clone(), to);
                *r = to..to + len;
                to += len;
            }
        }
        arena.truncate(to);
        self.dead = 0;
    }

    /// Every message, in order, as the `Vec`s [`Event::Ended`] hands back (copies, at the end
    /// of a session only); the buffers go back to `pool`.
    fn hand_back(&mut self, pool: &mut Pool) -> Vec<Vec<u8>> {
        let arena = self.arena.as_deref().map_or(&[][..], Vec::as_slice);
        let out = self
            .kept
            .drain(..)
            .map(|k| match k {
                Kept::Buf(m) => handed_back(m, pool),
                Kept::Small(r) => {
                    count_copy(r.len());
                    arena.get(r).unwrap_or_default().to_vec()
                }
                Kept::Tiny(n, b) => {
                    count_copy(n.into());
                    b[..usize::from(n)].to_vec()
                }
            })
            .collect();
        if let Some(a) = &mut self.arena {
            a.clear();
        }
        self.bytes = 0;
        out
    }

    /// Give back spare capacity (an idle session).
    fn shrink(&mut self) {
        self.kept.shrink_to_fit();
        if self.arena.as_ref().is_some_and(|a| a.is_empty()) {
            self.arena = None;
        }
    }
}

/// Whether a message of `len` bytes is kept in a buffer of `capacity` bytes: at most about
/// twice the message (and its headroom), so the buffer costs no more than the message again.
fn worth_its_buffer(capacity: usize, len: usize) -> bool {
    capacity <= 2 * (len + HEADROOM)
}

/// Give a kept buffer back to `pool`, unless it is smaller than the pool's own (an exact-size
/// copy): it would have to grow for most uses.
fn recycle(pool: &mut Pool, m: Msg) {
    if m.capacity() >= HEADROOM + FRESH_TAILROOM {
        pool.free(m);
    }
}

/// A message to wait in a peer's outbox: its own buffer when it is worth it (see
/// [`worth_its_buffer`]), else an exact-size copy (the buffer back to `pool`).
fn waiting(m: Msg, pool: &mut Pool) -> Msg {
    if worth_its_buffer(m.capacity(), m.len()) {
        return m;
    }
    let c = Msg::from_slice(0, m.data());
    recycle(pool, m);
    c
}

impl<S: LayerSet> Session<S> {
    fn outstanding(&self) -> bool {
        !self.unconfirmed.is_empty() || !self.conn.all_acknowledged()
    }

    /// Confirm what the peer acknowledged; the buffers go back to `pool`. Everything, once
    /// everything sent so far was acknowledged; before that, in order, the messages sent
    /// before a [`DeliveryMark`] the reliable layer's acknowledgements passed. Marks are made
    /// here, while messages are unconfirmed, at most [`MARKS`] at once and each after at
    /// least a [`MARKS`]th of what was outstanding at the last: a bulk sender's messages are
    /// confirmed about every quarter of a round trip, and the copies it keeps span little
    /// more than what is in flight (without marks a sender at its retention limit would wait
    /// until its whole window was acknowledged, leaving the path idle for a round trip).
    fn confirm(&mut self, pool: &mut Pool) {
        if self.unconfirmed.is_empty() {
            self.forget_marks();
            return;
        }
        if self.conn.all_acknowledged() {
            self.unconfirmed.clear(pool);
            self.forget_marks();
            return;
        }
        let marks = self.marks.get_or_insert_with(Default::default);
        let mut upto = None;
        while let Some(m) = marks.front().filter(|m| self.conn.acknowledged_to(m)) {
            upto = Some(m.messages());
            marks.pop_front();
        }
        if let Some(n) = upto {
            self.unconfirmed.confirm_upto(n, pool);
        }
        if marks.len() < MARKS {
            if let Some(m) = self.conn.delivery_mark() {
                let due = marks.back().is_none_or(|b| {
                    m.messages() > b.messages()
                        && m.since(b) >= (b.outstanding() / MARKS as u64).max(1)
                });
                if due {
                    marks.push_back(m);
                }
            }
        }
    }

    /// No marks: everything they stood for is confirmed. Their list stays for the next
    /// message (a request-response exchange empties it every round trip); an idle session
    /// gives it back ([`SessionEndpoint`]'s shrink).
    fn forget_marks(&mut self) {
        if let Some(m) = &mut self.marks {
            m.clear();
        }
    }

    /// Before a send: confirm what can be confirmed now. For a stack whose layers number what
    /// they take ([`Connection::numbers_messages`], every stack with `window`) that waits:
    /// the accelerator's deferred post-processing runs after the datagram left
    /// ([`SessionEndpoint::post_process`], or at its deadline through
    /// [`SessionEndpoint::handle_timeout`]), and the marks confirm there what the peer
    /// acknowledged, so a reply never carries the last delivery's post-processing on its
    /// critical path (seed 004 §3.1). Any other stack is confirmed only when everything sent
    /// was acknowledged, a moment which, in a request-response exchange, lies between a
    /// delivery's deferred work and the next send: for it the deferred work runs here.
    fn settle(&mut self, now: Time, pool: &mut Pool) {
        if !self.unconfirmed.is_empty()
            && self.conn.needs_post_process()
            && !self.conn.numbers_messages()
        {
            self.conn.post_process(now);
            self.confirm(pool);
        }
    }

    /// Hand `data` to the connection (which copies it into its datagrams: the one copy of a
    /// message on the send path); silence counts from now if nothing was outstanding before.
    /// The caller then [`keep`](Self::keep)s the buffer `data` is in.
    fn send(&mut self, now: Time, data: &[u8], pool: &mut Pool) -> Result<(), SendError> {
        self.settle(now, pool);
        let was_outstanding = self.outstanding();
        self.conn.send(now, data)?;
        if !was_outstanding {
            self.quiet_since = now;
        }
        self.last_active = now;
        self.shrunk = false;
        Ok(())
    }

    /// Keep a message the connection took until it is confirmed.
    fn keep(&mut self, m: Msg, pool: &mut Pool) {
        self.unconfirmed.push(m, pool);
    }

    /// Whether new messages may go into this session: below the key-usage limit, and, where
    /// this end rekeys, below the rekey point (later ones wait for the new session). The
    /// messages it holds unconfirmed count as datagrams still to send (at most one each), so
    /// a session never takes more than its key may still carry.
    fn takes_more(&self, rekey_after: u64, reject_after: u64, dialer: bool) -> bool {
        let held = self.unconfirmed.len() as u64;
        self.conn.stats().datagrams_out + held < reject_after
            && (!dialer || self.datagrams() + held < rekey_after)
    }

    /// The session header of its data datagrams: the type, and the peer's index for it.
    fn data_header(&self) -> [u8; DATA_HEADER] {
        let mut h = [DATA; DATA_HEADER];
        h[1..].copy_from_slice(&self.remote.to_le_bytes());
        h
    }

    fn datagrams(&self) -> u64 {
        let s = self.conn.stats();
        s.datagrams_out + s.datagrams_in
    }
}

struct Pending {
    init: Initiation,
    /// The initiation without its MACs, and its mac1 (a cookie reply is sealed to it).
    body: Vec<u8>,
    mac1: [u8; MAC_LEN],
    sent_at: Time,
    first_sent: Time,
    attempts: u32,
}

/// A session replaced by a newer one. It stays while either end may still need it: until
/// what this end sent on it is confirmed and the peer has been quiet on it for a quarter of
/// `retire_after` (the peer sends its new messages into the new session only once its own
/// old ones are confirmed), or until its deadline — `retire_after` after the last datagram
/// it received — when what it still holds is reported.
struct Retiring<S: LayerSet> {
    session: Session<S>,
    deadline: Time,
    reason: EndReason,
    /// Replaced by a rekey (its deadline follows its traffic), not by a restart or a dead
    /// peer (its deadline is fixed).
    graceful: bool,
}

impl<S: LayerSet> Retiring<S> {
    /// Everything this end sent on it is confirmed: new messages may go into the new
    /// session without overtaking old ones.
    fn drained(&self) -> bool {
        !self.session.outstanding()
    }

    /// When it may go quietly (drained, the peer quiet on it, nothing left to deliver).
    fn quiet_at(&self, retire_after: Duration) -> Time {
        self.session.last_rx + retire_after / 4
    }
}

struct Peer<S: LayerSet> {
    key: PublicKey,
    addr: Option<SocketAddr>,
    /// This end may start handshakes with it (it called `connect`).
    dialer: bool,
    current: Option<Session<S>>,
    // Boxed: rarely there, and large (a whole session; a Noise handshake state), so an idle
    // peer does not carry their room.
    retiring: Option<Box<Retiring<S>>>,
    pending: Option<Box<Pending>>,
    /// Messages waiting for a session to take them, in the buffers they came in.
    outbox: VecDeque<Msg>,
    outbox_bytes: usize,
    /// Messages an ended session had delivered that the application had not taken yet.
    leftover: VecDeque<Msg>,
    cookie: Option<([u8; MAC_LEN], Time)>,
    scheduled: Option<Time>,
    /// On the endpoint's list of peers whose deadline is to be worked out again
    /// ([`SessionEndpoint::settle_schedule`]).
    resched: bool,
    tx_flagged: bool,
    /// On the endpoint's list of peers with deferred post-processing.
    deferred_listed: bool,
    /// The round trip of the last handshake this end began (its last initiation to the
    /// response), which paces retries while messages wait.
    handshake_rtt: Option<Duration>,
    stats: PeerStats,
}

impl<S: LayerSet> Peer<S> {
    /// New messages may go into the current session: no retiring one still holds messages
    /// of this end's that they would overtake.
    fn open(&self) -> bool {
        self.retiring.as_ref().is_none_or(|r| r.drained())
    }

    /// Messages of this end's wait for the peer: unconfirmed in the current session, or
    /// waiting for a session to take them. Silence from the peer meanwhile counts towards
    /// [`dead_after`](SessionConfig::dead_after), and handshakes are retried without backing
    /// off.
    fn waiting(&self) -> bool {
        !self.outbox.is_empty() || self.current.as_ref().is_some_and(|s| s.outstanding())
    }

    fn retained(&self) -> usize {
        self.outbox_bytes
            + self.current.as_ref().map_or(0, |s| s.unconfirmed.bytes)
            + self
                .retiring
                .as_ref()
                .map_or(0, |r| r.session.unconfirmed.bytes)
    }

    fn sessions(&self) -> impl Iterator<Item = &Session<S>> {
        self.retiring
            .as_ref()
            .map(|r| &r.session)
            .into_iter()
            .chain(self.current.as_ref())
    }

    fn sessions_mut(&mut self) -> impl Iterator<Item = &mut Session<S>> {
        self.retiring
            .as_mut()
            .map(|r| &mut r.session)
            .into_iter()
            .chain(self.current.as_mut())
    }

    fn next_deadline(&self, cfg: &SessionConfig) -> Option<Time> {
        let mut t: Option<Time> = None;
        let mut at = |x: Option<Time>| {
            if let Some(x) = x {
                t = Some(t.map_or(x, |t| t.min(x)));
            }
        };
        for s in self.sessions().filter(|s| !s.dead) {
            at(s.conn.poll_timeout());
        }
        if let Some(r) = &self.retiring {
            at(Some(r.deadline));
            if r.drained() {
                at(Some(r.quiet_at(cfg.retire_after)));
            }
        }
        if let Some(p) = &self.pending {
            let wait = retry_after(cfg, p.attempts, self.waiting(), self.handshake_rtt);
            at(Some(p.sent_at + wait));
        }
        if let Some(s) = &self.current {
            if self.waiting() && !s.dead {
                at(Some(s.quiet_since + cfg.dead_after));
            } else {
                // Only when shrinking could happen then (the connection's own timers wake the
                // peer otherwise): a deadline that changes nothing would come back at once.
                if !s.shrunk && s.conn.is_idle() && !s.conn.needs_post_process() {
                    at(Some(s.last_active + cfg.shrink_after));
                }
                if let Some(idle) = cfg.idle_timeout {
                    at(Some(s.last_active + idle_limit(idle, self.dialer)));
                }
            }
        }
        t
    }
}

/// A message offered to [`SessionEndpoint::offer`]: bytes to copy, or a buffer to keep.
enum Payload<'a> {
    Bytes(&'a [u8]),
    Owned(Msg),
}

impl Payload<'_> {
    fn bytes(&self) -> &[u8] {
        match self {
            Payload::Bytes(b) => b,
            Payload::Owned(m) => m.data(),
        }
    }

    /// The message in a buffer of its own to wait in an outbox: the one given, or a copy (in
    /// a pooled buffer, or an exact-size one for a small message: see [`waiting`]).
    fn into_msg(self, pool: &mut Pool) -> Msg {
        match self {
            Payload::Bytes(b) if worth_its_buffer(HEADROOM + FRESH_TAILROOM, b.len()) => {
                pool.alloc_copy(b)
            }
            Payload::Bytes(b) => Msg::from_slice(0, b),
            Payload::Owned(m) => waiting(m, pool),
        }
    }

    /// The buffer given, if one was.
    fn into_owned(self) -> Option<Msg> {
        match self {
            Payload::Bytes(_) => None,
            Payload::Owned(m) => Some(m),
        }
    }
}

/// A message handed back in [`Event::Ended`]: a copy of it as a `Vec`, its buffer back to
/// `pool`.
fn handed_back(m: Msg, pool: &mut Pool) -> Vec<u8> {
    count_copy(m.len());
    let v = m.data().to_vec();
    recycle(pool, m);
    v
}

/// The session index after a datagram's type byte (every message type but the initiation
/// carries the receiver's there).
fn receiver_index(d: &[u8]) -> Result<u32, Discard> {
    d.get(1..DATA_HEADER)
        .and_then(|b| b.try_into().ok())
        .map(u32::from_le_bytes)
        .ok_or(Discard::Truncated)
}

/// How long after the `attempts`-th initiation the next goes out. While messages wait
/// (`waiting`): four times the last handshake's round trip (`rtt`, at least 10 ms), at most
/// the handshake timeout, so that a lost initiation or response costs a few round trips and
/// not a second, and the contract's bound holds. Otherwise (a rekey with nothing to send,
/// say): the handshake timeout, doubled for each attempt up to eight times it, so an
/// unreachable peer costs fewer and fewer initiations.
fn retry_after(
    cfg: &SessionConfig,
    attempts: u32,
    waiting: bool,
    rtt: Option<Duration>,
) -> Duration {
    if waiting {
        let quick = rtt.map_or(cfg.handshake_timeout, |r| (r * 4).max(MIN_RETRY));
        return quick.min(cfg.handshake_timeout);
    }
    cfg.handshake_timeout * (1 << attempts.saturating_sub(1).min(3))
}

/// The most peers whose deadlines wait to be worked out (`SessionEndpoint`'s `resched`):
/// bounds what [`SessionEndpoint::poll_timeout`] looks at for a driver that neither
/// post-processes nor runs timers for a while.
const MAX_UNSETTLED: usize = 64;

/// How far ahead the load limiter's theoretical arrival time may run: under load is a second
/// of initiations beyond the rate, so the load ends at most a second after they stop.
const LOAD_HOLD: Duration = Duration::from_secs(2);

/// The shortest handshake retry (see [`retry_after`]).
const MIN_RETRY: Duration = Duration::from_millis(10);

/// How long a session may be idle at this end: the initiator gives up first (at two thirds),
/// so it never sends into a session its peer has already dropped for idleness — its next
/// message starts a new handshake instead.
fn idle_limit(idle: Duration, dialer: bool) -> Duration {
    if dialer {
        idle * 2 / 3
    } else {
        idle
    }
}

/// What installing a session needs of its handshake's [`SessionKeys`], copied out before the
/// keys themselves go to its connection (they key that one connection only).
#[derive(Clone, Copy)]
struct Handshook {
    role: Role,
    peer: PublicKey,
    local_index: u32,
    peer_index: u32,
    replaces: Option<u32>,
}

/// Sessions with many peers behind one socket (sans-IO).
pub struct SessionEndpoint<S: LayerSet = DynStack> {
    cfg: SessionConfig,
    local: StaticKey,
    responder: Responder,
    jar: CookieJar,
    make: MakeConnection<S>,
    rng: ChaCha20Rng,
    peers: Vec<Peer<S>>,
    by_key: HashMap<PublicKey, PeerId>,
    /// Sessions by their local index, which every data datagram names. The indices are this
    /// end's own random choices ([`fresh_index`](Self::fresh_index)), never a sender's, so a
    /// fast unkeyed hash serves: a datagram chooses only which entry it looks up.
    by_index: FxHashMap<u32, PeerId>,
    sessions: usize,
    /// Buffers for the application's messages and the driver's receives
    /// ([`alloc`](SessionEndpoint::alloc)), fed by the datagrams the driver sent
    /// ([`recycle`](SessionEndpoint::recycle)) and balanced against the sessions' pools.
    pool: Pool,
    control: VecDeque<(SocketAddr, Vec<u8>)>,
    tx_ready: VecDeque<PeerId>,
    /// Peers whose sessions have the accelerator's post-processing pending
    /// ([`post_process`](Self::post_process)), and the list's spare for the next round.
    deferred: Vec<PeerId>,
    deferred_spare: Vec<PeerId>,
    timers: BinaryHeap<Reverse<(Time, u32)>>,
    /// Peers touched since their deadlines were last worked out: `touch` lists a peer, and
    /// its deadline goes into `timers` at the next [`post_process`](Self::post_process) or
    /// [`handle_timeout`](Self::handle_timeout) (a driver's turn after the answers left), not
    /// between a datagram's arrival and the answer. [`poll_timeout`](Self::poll_timeout)
    /// counts the listed peers' deadlines meanwhile; more than [`MAX_UNSETTLED`] are settled
    /// at once.
    resched: Vec<PeerId>,
    events: VecDeque<Event>,
    /// Theoretical arrival time of the handshake rate limiter (GCRA).
    load_tat: Time,
    /// Under load, the per-source limiter's theoretical arrival times (GCRA), bounded.
    sources: HashMap<SocketAddr, Time>,
    /// When the full table was last swept of expired entries.
    sources_swept: Time,
    /// The last initiation timestamp sent: the next is later, whatever the wall clock does.
    last_timestamp: u128,
    stats: SessionEndpointStats,
}

impl SessionEndpoint<DynStack> {
    /// A builder of an endpoint with the static key `key` over a dynamic stack
    /// ([`SessionEndpointBuilder`]): the usual way to make one.
    pub fn builder(key: StaticKey) -> SessionEndpointBuilder {
        SessionEndpointBuilder {
            key,
            allowed: Vec::new(),
            stack: DEFAULT_STACK.to_string(),
            cfg: SessionConfig::default(),
            seed: None,
            fast_path_check: None,
        }
    }
}

impl<S: LayerSet> SessionEndpoint<S> {
    /// An endpoint with the static key `local` that accepts sessions from the peers
    /// `allowed` (none: it only connects), building each session's connection with `make`
    /// (any stack, static ones too); `seed` seeds its session indices and cookie secrets
    /// (draw it from the OS). [`SessionEndpoint::builder`] does all this for a stack given
    /// as a spec, and checks it.
    pub fn new(
        local: StaticKey,
        allowed: impl IntoIterator<Item = PublicKey>,
        cfg: SessionConfig,
        make: MakeConnection<S>,
        seed: [u8; 32],
    ) -> SessionEndpoint<S> {
        let public = local.public();
        let responder = Responder::new(local.clone(), allowed).with_prologue(&cfg.prologue());
        SessionEndpoint {
            cfg,
            responder,
            local,
            jar: CookieJar::new(&public.0),
            make,
            rng: ChaCha20Rng::from_seed(seed),
            peers: Vec::new(),
            by_key: HashMap::new(),
            by_index: FxHashMap::default(),
            sessions: 0,
            pool: Pool::default(),
            control: VecDeque::new(),
            tx_ready: VecDeque::new(),
            deferred: Vec::new(),
            deferred_spare: Vec::new(),
            timers: BinaryHeap::new(),
            resched: Vec::new(),
            events: VecDeque::new(),
            load_tat: Time::ZERO,
            sources: HashMap::new(),
            sources_swept: Time::ZERO,
            last_timestamp: 0,
            stats: SessionEndpointStats::default(),
        }
    }

    /// This endpoint's static public key.
    pub fn public(&self) -> PublicKey {
        self.local.public()
    }

    /// Counters.
    pub fn stats(&self) -> &SessionEndpointStats {
        &self.stats
    }

    /// The settings.
    pub fn config(&self) -> &SessionConfig {
        &self.cfg
    }

    /// Sessions up (current or retiring).
    pub fn session_count(&self) -> usize {
        self.sessions
    }

    /// Every peer.
    pub fn peers(&self) -> impl Iterator<Item = PeerId> {
        (0..self.peers.len() as u32).map(PeerId)
    }

    /// A peer's static public key.
    pub fn peer_key(&self, p: PeerId) -> Option<PublicKey> {
        self.peers.get(p.0 as usize).map(|x| x.key)
    }

    /// A peer's address (the last one an authenticated datagram came from).
    pub fn peer_addr(&self, p: PeerId) -> Option<SocketAddr> {
        self.peers.get(p.0 as usize).and_then(|x| x.addr)
    }

    /// Whether the peer has a session up that takes new messages now.
    pub fn is_established(&self, p: PeerId) -> bool {
        self.peers
            .get(p.0 as usize)
            .is_some_and(|x| x.current.is_some() && x.open())
    }

    /// Totals over the peer's sessions, the live ones included.
    pub fn peer_stats(&self, p: PeerId) -> Option<PeerStats> {
        let peer = self.peers.get(p.0 as usize)?;
        let mut s = peer.stats.clone();
        for x in peer.sessions() {
            s.add_conn(x.conn.stats(), &x.conn);
        }
        Some(s)
    }

    /// The connection of the peer's current session (for its statistics).
    pub fn connection(&self, p: PeerId) -> Option<&Connection<S>> {
        self.peers
            .get(p.0 as usize)?
            .current
            .as_ref()
            .map(|s| &s.conn)
    }

    /// Start a session with the responder whose static key is `key` at `addr` (or, for a
    /// known peer without a session, start a new handshake). Messages may be sent at once;
    /// they wait for the session.
    pub fn connect(&mut self, now: Time, key: PublicKey, addr: SocketAddr) -> PeerId {
        let p = self.peer_for(key);
        let peer = &mut self.peers[p.0 as usize];
        peer.dialer = true;
        peer.addr = Some(addr);
        if peer.current.is_none() && peer.pending.is_none() {
            self.initiate(now, p);
        }
        self.touch(now, p);
        p
    }

    /// This end moved to another address (a new source port, another network): every
    /// handshake waiting for an answer sends a new initiation now, since the answer to the
    /// last one would go to the old address (each counts as an attempt, within
    /// [`SessionConfig::handshake_attempts`]). Established sessions need nothing: the peer
    /// follows their authenticated datagrams to the new address.
    pub fn local_address_changed(&mut self, now: Time) {
        let limit = self.cfg.handshake_attempts;
        let waiting: Vec<PeerId> = (0..self.peers.len() as u32)
            .map(PeerId)
            .filter(|p| {
                self.peers[p.0 as usize]
                    .pending
                    .as_ref()
                    .is_some_and(|pd| pd.attempts < limit)
            })
            .collect();
        for p in waiting {
            self.initiate(now, p);
            self.touch(now, p);
        }
    }

    fn peer_for(&mut self, key: PublicKey) -> PeerId {
        if let Some(&p) = self.by_key.get(&key) {
            return p;
        }
        let p = PeerId(self.peers.len() as u32);
        self.peers.push(Peer {
            key,
            addr: None,
            dialer: false,
            current: None,
            retiring: None,
            pending: None,
            outbox: VecDeque::new(),
            outbox_bytes: 0,
            leftover: VecDeque::new(),
            cookie: None,
            scheduled: None,
            resched: false,
            tx_flagged: false,
            deferred_listed: false,
            handshake_rtt: None,
            stats: PeerStats::default(),
        });
        self.by_key.insert(key, p);
        p
    }

    fn fresh_index(&mut self) -> u32 {
        loop {
            let i: u32 = self.rng.random();
            if i != 0 && !self.by_index.contains_key(&i) {
                return i;
            }
        }
    }

    /// Send a new initiation to the peer (a first one, or a retry with a new ephemeral key
    /// and timestamp).
    fn initiate(&mut self, now: Time, p: PeerId) {
        let index = self.fresh_index();
        let ts = self.timestamp(now);
        let peer = &mut self.peers[p.0 as usize];
        let Some(addr) = peer.addr else { return };
        let (attempts, first_sent) = match peer.pending.take() {
            Some(old) => {
                self.by_index.remove(&old.init.index());
                (old.attempts, old.first_sent)
            }
            None => (0, now),
        };
        // A rekey names the session it replaces, so the responder retires that one gracefully;
        // a session found dead is not named (the responder may have forgotten it).
        let replaces = peer.current.as_ref().filter(|s| !s.dead).map(|s| s.remote);
        let Ok((init, body)) = Initiation::start_replacing(
            &self.local,
            peer.key,
            index,
            ts,
            replaces,
            &self.cfg.prologue(),
        ) else {
            return;
        };
        let keys = ResponderMacKeys::new(&peer.key.0);
        let cookie = peer
            .cookie
            .filter(|(_, at)| now.since(*at) < crate::session::mac::COOKIE_LIFETIME)
            .map(|(c, _)| c);
        let mut msg = body.clone();
        keys.append_macs(&mut msg, cookie.as_ref());
        let mac1: [u8; MAC_LEN] = msg[body.len()..body.len() + MAC_LEN]
            .try_into()
            .unwrap_or([0; MAC_LEN]);
        peer.pending = Some(Box::new(Pending {
            init,
            body,
            mac1,
            sent_at: now,
            first_sent,
            attempts: attempts + 1,
        }));
        peer.stats.initiations += 1;
        self.by_index.insert(index, p);
        self.control.push_back((addr, msg));
        self.stats.initiations_sent += 1;
    }

    /// The timestamp of an initiation sent at `now`: wall time, nanoseconds (see
    /// [`SessionConfig::epoch_ns`]), and later than the last one sent.
    fn timestamp(&mut self, now: Time) -> u128 {
        let now_ns = u128::from(now.as_nanos());
        let epoch = *self.cfg.epoch_ns.get_or_insert_with(|| {
            let wall = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| d.as_nanos());
            wall.saturating_sub(now_ns)
        });
        let ts = (epoch + now_ns).max(self.last_timestamp + 1);
        self.last_timestamp = ts;
        ts
    }

    /// Queue a message for the peer, copied from `data`.
    ///
    /// The convenience: the message is copied into a pooled buffer, which the session keeps
    /// as the copy the reliability contract hands back, and the connection copies it into
    /// its datagrams — one copy more than [`send_msg`](Self::send_msg), which takes a buffer
    /// the application filled itself. (Nothing is copied for a message refused.)
    pub fn send(&mut self, now: Time, p: PeerId, data: &[u8]) -> Result<(), SessionSendError> {
        self.offer(now, p, Payload::Bytes(data))
            .map_err(|(error, _)| error)
    }

    /// Queue a message the application wrote into a buffer from [`alloc`](Self::alloc) (or
    /// any [`Msg`]), without copying it here: the session keeps this very buffer as the copy
    /// the reliability contract hands back if the session ends before confirming it, and the
    /// session's connection copies it once into its datagrams — the one copy on the way to
    /// the socket ([`poll_transmit_msg`](Self::poll_transmit_msg) hands the datagrams over
    /// as they are). Once confirmed, the buffer goes back to the endpoint's pool for the next
    /// [`alloc`](Self::alloc). A message not taken comes back in the error.
    pub fn send_msg(&mut self, now: Time, p: PeerId, m: Msg) -> Result<(), SendMsgError> {
        self.offer(now, p, Payload::Owned(m))
            .map_err(|(error, m)| SendMsgError {
                error,
                msg: m.unwrap_or_default(),
            })
    }

    /// [`send`](Self::send) and [`send_msg`](Self::send_msg): a refused message's buffer, if
    /// it had one, comes back with the error.
    fn offer(
        &mut self,
        now: Time,
        p: PeerId,
        data: Payload<'_>,
    ) -> Result<(), (SessionSendError, Option<Msg>)> {
        let cfg_limit = self.cfg.retain_limit;
        let Some(peer) = self.peers.get_mut(p.0 as usize) else {
            return Err((SessionSendError::NoPeer, data.into_owned()));
        };
        let len = data.bytes().len();
        if peer.retained() + len > cfg_limit && peer.retained() > 0 {
            return Err((SessionSendError::WouldBlock, data.into_owned()));
        }
        let open = peer.open() && peer.outbox.is_empty();
        let (rekey_after, reject_after, dialer) =
            (self.cfg.rekey_after, self.cfg.reject_after, peer.dialer);
        match peer.current.as_mut() {
            Some(s) if open && s.takes_more(rekey_after, reject_after, dialer) => {
                match s.send(now, data.bytes(), &mut self.pool) {
                    Ok(()) => match data {
                        Payload::Bytes(b) => s.unconfirmed.push_bytes(b, &mut self.pool),
                        Payload::Owned(m) => s.keep(m, &mut self.pool),
                    },
                    Err(SendError::WouldBlock) => {
                        return Err((SessionSendError::WouldBlock, data.into_owned()))
                    }
                    Err(e) => return Err((SessionSendError::Send(e), data.into_owned())),
                }
            }
            _ => {
                if peer.current.is_none() && peer.pending.is_none() && !peer.dialer {
                    return Err((SessionSendError::NoSession, data.into_owned()));
                }
                // Sessions' connections take the default largest message (`build`).
                if len > MAX_MESSAGE {
                    let e = SendError::TooLarge {
                        len,
                        max: MAX_MESSAGE,
                    };
                    return Err((SessionSendError::Send(e), data.into_owned()));
                }
                // Waiting messages count as outstanding for dead-peer detection: silence
                // counts from now if nothing was outstanding before.
                if !peer.waiting() {
                    if let Some(s) = peer.current.as_mut() {
                        s.quiet_since = now;
                    }
                }
                peer.outbox.push_back(data.into_msg(&mut self.pool));
                peer.outbox_bytes += len;
                if peer.current.is_none() && peer.pending.is_none() {
                    self.initiate(now, p);
                }
            }
        }
        self.touch(now, p);
        Ok(())
    }

    /// A buffer for a message (write it, then [`send_msg`](Self::send_msg)) or for a
    /// datagram to receive into ([`handle_msg`](Self::handle_msg)): empty, with
    /// [`HEADROOM`] free bytes in front, from the endpoint's pool (it
    /// allocates only when the pool is empty).
    pub fn alloc(&mut self) -> Msg {
        self.pool.alloc()
    }

    /// Give a buffer back to the endpoint's pool: a datagram from
    /// [`poll_transmit_msg`](Self::poll_transmit_msg) once sent, a buffer not used.
    pub fn recycle(&mut self, m: Msg) {
        self.pool.free(m);
    }

    /// The endpoint's pool of buffers ([`alloc`](Self::alloc), [`recycle`](Self::recycle)):
    /// its [`fresh`](Pool::fresh) count says how many it had to allocate.
    pub fn pool(&self) -> &Pool {
        &self.pool
    }

    /// Whether [`send`](Self::send) to the peer would take a message of `len` bytes now
    /// without waiting.
    pub fn can_send(&self, p: PeerId, len: usize) -> bool {
        self.peers.get(p.0 as usize).is_some_and(|peer| {
            let room = peer.retained() == 0 || peer.retained() + len <= self.cfg.retain_limit;
            let conn_ok = match &peer.current {
                Some(s) => peer.open() && s.conn.can_send(),
                None => peer.dialer,
            };
            room && conn_ok
        })
    }

    /// The peer's next delivered message, lent to `f` (the retiring session's come first).
    pub fn poll_delivery_with<R>(&mut self, p: PeerId, f: impl FnOnce(&[u8]) -> R) -> Option<R> {
        let peer = self.peers.get_mut(p.0 as usize)?;
        if let Some(m) = peer.leftover.pop_front() {
            let r = f(m.data());
            self.pool.free(m);
            return Some(r);
        }
        let mut f = Some(f);
        for s in peer.sessions_mut() {
            if s.conn.delivered_ready() > 0 {
                let f = f.take()?;
                return s.conn.poll_delivery_with(f);
            }
        }
        None
    }

    /// The peer's next delivered message, taken in its buffer (the retiring session's come
    /// first; a message packed with others gets a buffer of its own). Give the buffer back
    /// with [`recycle`](Self::recycle), or send it on as it is with
    /// [`send_msg`](Self::send_msg) (an echo, a forward): no copy either way.
    pub fn poll_delivery_msg(&mut self, p: PeerId) -> Option<Msg> {
        let peer = self.peers.get_mut(p.0 as usize)?;
        if let Some(m) = peer.leftover.pop_front() {
            return Some(m);
        }
        let s = peer.sessions_mut().find(|s| s.conn.delivered_ready() > 0)?;
        let m = s.conn.poll_delivery()?;
        // The buffer leaves the connection's pool for good: one of the endpoint's takes its
        // place, as for a datagram taken by value, so that pool does not run dry.
        if let Some(spare) = self.pool.take() {
            s.conn.recycle(spare);
        }
        Some(m)
    }

    /// Whether everything sent to the peer was acknowledged and the peer's data to this end
    /// too (no acknowledgement owed): a good moment to go away.
    pub fn is_quiet(&self, p: PeerId) -> bool {
        self.peers
            .get(p.0 as usize)
            .is_some_and(|peer| peer.outbox.is_empty() && peer.sessions().all(|s| s.conn.is_idle()))
    }

    /// Messages waiting for the application from the peer.
    pub fn delivered_ready(&self, p: PeerId) -> usize {
        self.peers.get(p.0 as usize).map_or(0, |x| {
            x.leftover.len()
                + x.sessions()
                    .map(|s| s.conn.delivered_ready())
                    .sum::<usize>()
        })
    }

    /// The next event.
    pub fn poll_event(&mut self) -> Option<Event> {
        self.events.pop_front()
    }

    /// End the peer's session now; its unconfirmed messages come back in
    /// [`Event::Ended`].
    pub fn close(&mut self, now: Time, p: PeerId) {
        if (p.0 as usize) < self.peers.len() {
            self.end_peer(p, EndReason::Closed);
            self.peers[p.0 as usize].dialer = false;
            self.touch(now, p);
        }
    }

    /// The next datagram to send, written into `out` (replacing what it held); returns where
    /// it goes. A copy of the datagram; [`poll_transmit_msg`](Self::poll_transmit_msg) hands
    /// it over without one.
    pub fn poll_transmit(&mut self, out: &mut Vec<u8>) -> Option<SocketAddr> {
        out.clear();
        self.poll_transmit_append(out)
    }

    /// The next datagram to send, appended to `out` (nothing appended when there is none);
    /// returns where it goes. Lets a driver write datagrams back to back into one buffer for
    /// a segmented send — at the price of copying each there;
    /// [`poll_transmit_msg`](Self::poll_transmit_msg) hands them over as they are.
    pub fn poll_transmit_append(&mut self, out: &mut Vec<u8>) -> Option<SocketAddr> {
        if let Some((to, msg)) = self.control.pop_front() {
            count_copy(msg.len());
            out.extend_from_slice(&msg);
            return Some(to);
        }
        let (to, m) = self.next_data()?;
        count_copy(m.len());
        out.extend_from_slice(m.data());
        self.pool.free(m);
        Some(to)
    }

    /// The next datagram to send, and where it goes, in the buffer it was written in: a
    /// session's sealed datagram with the session's header put in front of it in place (in
    /// the buffer's headroom), not copied. Put it on the link as it is, then give the buffer
    /// back with [`recycle`](Self::recycle) (it feeds [`alloc`](Self::alloc)). A handshake
    /// message comes in a pooled buffer too.
    pub fn poll_transmit_msg(&mut self) -> Option<(SocketAddr, Msg)> {
        if let Some((to, msg)) = self.control.pop_front() {
            // Handshakes are built as `Vec`s: the one copy of a datagram on this path, off
            // the data path.
            return Some((to, self.pool.alloc_copy(&msg)));
        }
        self.next_data()
    }

    /// Whether [`poll_transmit_msg`](Self::poll_transmit_msg) (or `poll_transmit`) may have a
    /// datagram: `false` means it has none, at the cost of two loads.
    #[inline]
    pub fn transmit_waiting(&self) -> bool {
        !self.control.is_empty() || !self.tx_ready.is_empty()
    }

    /// Put the next data datagram on the link from its session's own buffer, when it is the
    /// only datagram waiting (a request-response exchange's usual case): `send` gets where
    /// it goes and its bytes, session header in front, and is done with them when it
    /// returns. The buffer stays with the session, so the retransmission copy an accelerated
    /// send deferred is that buffer, not a copy of it (seed 004 §3.1). Whether it sent one;
    /// when it did not, [`poll_transmit_msg`](Self::poll_transmit_msg) hands out what
    /// waits, by value, for a batched send.
    pub fn transmit_single(&mut self, send: impl FnOnce(SocketAddr, &[u8])) -> bool {
        if !self.control.is_empty() || self.tx_ready.len() != 1 {
            return false;
        }
        let p = self.tx_ready[0];
        let peer = &mut self.peers[p.0 as usize];
        let Some(to) = peer.addr else {
            return false;
        };
        {
            let mut waiting = peer.sessions_mut().filter(|s| s.conn.transmit_ready() > 0);
            let (Some(s), None) = (waiting.next(), waiting.next()) else {
                return false;
            };
            if s.conn.transmit_ready() != 1 {
                return false;
            }
            let h = s.data_header();
            // The one datagram waiting is taken (the closure takes what it is lent).
            let _ = s.conn.transmit_framed(1, |d| {
                d[0].prepend_array(&h);
                send(to, d[0].data());
                Ok::<_, std::convert::Infallible>(1)
            });
        }
        peer.tx_flagged = false;
        self.tx_ready.pop_front();
        true
    }

    /// The next data datagram of a session with something to send, its header prepended in
    /// place: where it goes, and its buffer. The session's connection gets an idle buffer of
    /// the endpoint's in exchange (when there is one), so its pool does not run dry while its
    /// datagrams leave through the endpoint's.
    fn next_data(&mut self) -> Option<(SocketAddr, Msg)> {
        while let Some(&p) = self.tx_ready.front() {
            let peer = &mut self.peers[p.0 as usize];
            let addr = peer.addr;
            for s in peer.sessions_mut() {
                if let Some(mut m) = s.conn.poll_transmit() {
                    let Some(to) = addr else {
                        // Nowhere to send it (never: a session has an address).
                        s.conn.recycle(m);
                        continue;
                    };
                    m.prepend_array(&s.data_header());
                    if let Some(spare) = self.pool.take() {
                        s.conn.recycle(spare);
                    }
                    return Some((to, m));
                }
            }
            peer.tx_flagged = false;
            self.tx_ready.pop_front();
        }
        None
    }

    /// The next instant [`handle_timeout`](Self::handle_timeout) has work.
    pub fn poll_timeout(&self) -> Option<Time> {
        let listed = self
            .resched
            .iter()
            .filter_map(|p| self.peers[p.0 as usize].next_deadline(&self.cfg));
        let heap = self.timers.peek().map(|Reverse((t, _))| *t);
        listed.chain(heap).min()
    }

    /// Work out the deadlines of the peers touched since the last time, into `timers` (a
    /// deadline later than the one a peer is scheduled for waits for that one to pass:
    /// [`handle_timeout`](Self::handle_timeout) puts it back).
    fn settle_schedule(&mut self) {
        if self.resched.is_empty() {
            return;
        }
        let mut list = std::mem::take(&mut self.resched);
        for &p in &list {
            let peer = &mut self.peers[p.0 as usize];
            peer.resched = false;
            if let Some(t) = peer.next_deadline(&self.cfg) {
                if peer.scheduled.is_none_or(|s| t < s) {
                    peer.scheduled = Some(t);
                    self.timers.push(Reverse((t, p.0)));
                }
            }
        }
        list.clear();
        self.resched = list;
    }

    /// Run what is due at `now`: the sessions' timers, handshake retries, dead-peer checks,
    /// retiring sessions, idle timeouts.
    pub fn handle_timeout(&mut self, now: Time) {
        // The peers due now, each once: what becomes due again (at `now`) waits for the next
        // call, so a deadline that makes no progress cannot spin here. A peer's entry stays
        // in the heap when its deadline moves later (a request-response client's deferred
        // work, done by the driver before it fell due): such a peer is put back at its
        // deadline, not woken for nothing.
        self.settle_schedule();
        let mut due = Vec::new();
        while let Some(&Reverse((t, i))) = self.timers.peek() {
            if t > now {
                break;
            }
            self.timers.pop();
            let peer = &mut self.peers[i as usize];
            if peer.scheduled != Some(t) {
                continue;
            }
            match peer.next_deadline(&self.cfg) {
                Some(later) if later > now => {
                    peer.scheduled = Some(later);
                    self.timers.push(Reverse((later, i)));
                }
                Some(_) => {
                    peer.scheduled = None;
                    due.push(PeerId(i));
                }
                None => peer.scheduled = None,
            }
        }
        for p in due {
            self.peer_timeout(now, p);
            self.touch(now, p);
        }
    }

    /// Run the accelerator's deferred post-processing of every session that has some, now,
    /// without waiting for its deadline; then confirm what it took in and send what it made.
    /// A driver calls this when the application is idle: its answers have left and nothing
    /// new has come in (seed 004 §3.1: the post-processing runs between messages, off both
    /// critical paths). Without it the post-processing waits for its deadline
    /// ([`poll_timeout`](Self::poll_timeout), [`DEFERRED_GRACE`](crate::accel::DEFERRED_GRACE)
    /// after the operation that left it), or runs first thing in the session's next send or
    /// delivery, which in a fast request-response exchange is often the next request's.
    /// It also puts the deadlines of the peers touched since the last call into the timer
    /// queue (worked out here, after the answers left, rather than on their way).
    pub fn post_process(&mut self, now: Time) {
        self.settle_schedule();
        if self.deferred.is_empty() {
            return;
        }
        let mut list =
            std::mem::replace(&mut self.deferred, std::mem::take(&mut self.deferred_spare));
        for &p in &list {
            let peer = &mut self.peers[p.0 as usize];
            peer.deferred_listed = false;
            for s in peer.sessions_mut().filter(|s| !s.dead) {
                s.conn.post_process(now);
            }
            self.touch(now, p);
        }
        list.clear();
        self.deferred_spare = list;
    }

    fn peer_timeout(&mut self, now: Time, p: PeerId) {
        let peer = &mut self.peers[p.0 as usize];
        // A dead session waits for the new handshake silently: its retransmissions could only
        // reach a peer that no longer knows it.
        for s in peer.sessions_mut().filter(|s| !s.dead) {
            if s.conn.poll_timeout().is_some_and(|t| t <= now) {
                s.conn.handle_timeout(now);
            }
        }
        let (waiting, rtt) = (peer.waiting(), peer.handshake_rtt);
        if let Some(pd) = &peer.pending {
            if pd.sent_at + retry_after(&self.cfg, pd.attempts, waiting, rtt) <= now {
                if pd.attempts >= self.cfg.handshake_attempts {
                    let pd = peer.pending.take();
                    if let Some(pd) = pd {
                        self.by_index.remove(&pd.init.index());
                    }
                    self.end_peer(p, EndReason::HandshakeFailed);
                    self.peers[p.0 as usize].dialer = false;
                    return;
                }
                self.initiate(now, p);
            }
        }
        let peer = &mut self.peers[p.0 as usize];
        if let Some(s) = &mut peer.current {
            s.confirm(&mut self.pool);
        }
        let (waiting, dialer) = (peer.waiting(), peer.dialer);
        let cfg = &self.cfg;
        if let Some(s) = &mut peer.current {
            if !s.shrunk
                && !s.outstanding()
                && s.conn.is_idle()
                && !s.conn.needs_post_process()
                && now.since(s.last_active) >= cfg.shrink_after
            {
                s.conn.shrink();
                s.unconfirmed.shrink();
                s.marks = None;
                s.shrunk = true;
                // The endpoint's idle buffers go too (a busy session's traffic brings them
                // back through its swaps): an idle server keeps none.
                self.pool.trim();
            }
            if waiting && !s.dead && now.since(s.quiet_since) >= cfg.dead_after {
                s.dead = true;
                if dialer {
                    // A new handshake at once, naming no session (the peer may have
                    // restarted): a rekey under way named this one, and backed off.
                    self.initiate(now, p);
                } else {
                    self.end_current(p, EndReason::PeerDead);
                }
            } else if !waiting
                && cfg
                    .idle_timeout
                    .is_some_and(|idle| now.since(s.last_active) >= idle_limit(idle, dialer))
            {
                self.end_current(p, EndReason::IdleTimeout);
            }
        }
    }

    /// Handle a datagram from `from`. A data datagram is copied into a pooled buffer first;
    /// [`handle_msg`](Self::handle_msg) takes one received into such a buffer instead.
    pub fn handle_datagram(&mut self, now: Time, from: SocketAddr, d: &[u8]) -> Input {
        let r = match d.first() {
            Some(&DATA) => {
                let m = self.pool.alloc_copy(d);
                self.on_data(now, from, m)
            }
            _ => self.on_control(now, from, d),
        };
        self.outcome(r)
    }

    /// Handle a datagram from `from` that the driver received into a buffer from
    /// [`alloc`](Self::alloc) (written at its [`tail_room`](Msg::tail_room)), where it is:
    /// the session's header comes off in place and its connection opens and delivers the
    /// datagram in this very buffer — no copy between the socket and the stack. The buffer
    /// goes to the session's pool (which gives the endpoint an idle one back) or, for
    /// anything but data, back to the endpoint's.
    pub fn handle_msg(&mut self, now: Time, from: SocketAddr, m: Msg) -> Input {
        let r = match m.data().first() {
            Some(&DATA) => self.on_data(now, from, m),
            _ => {
                let r = self.on_control(now, from, m.data());
                self.pool.free(m);
                r
            }
        };
        self.outcome(r)
    }

    /// A datagram of any type but data.
    fn on_control(&mut self, now: Time, from: SocketAddr, d: &[u8]) -> Result<Input, Discard> {
        match d.first() {
            None => Err(Discard::Truncated),
            Some(&crate::session::INITIATION) => self.on_initiation(now, from, d),
            Some(&crate::session::RESPONSE) => self.on_response(now, from, d),
            Some(&COOKIE_REPLY) => self.on_cookie_reply(now, d),
            Some(_) => Err(Discard::UnknownType),
        }
    }

    /// What a datagram did: its input, or its drop counted.
    fn outcome(&mut self, r: Result<Input, Discard>) -> Input {
        match r {
            Ok(input) => input,
            Err(drop) => {
                self.stats.drops[drop as usize] += 1;
                Input::Dropped(drop)
            }
        }
    }

    fn under_load(&self, now: Time) -> bool {
        self.load_tat > now + Duration::from_secs(1)
    }

    /// Under load, whether one more initiation from `from` (IP and port) fits its rate (GCRA
    /// with a burst of five). The table is bounded: when full, expired entries go, and if none has
    /// expired, sources it does not hold are refused (while under load only).
    fn source_allows(&mut self, now: Time, from: SocketAddr) -> bool {
        const BURST: u32 = 5;
        const MAX_SOURCES: usize = 4096;
        let rate = self.cfg.initiations_per_source_per_sec.max(1);
        let interval = Duration::from_secs(1) / rate;
        if !self.sources.contains_key(&from) && self.sources.len() >= MAX_SOURCES {
            // Sweep out expired entries at most every 100 ms: a flood from many addresses
            // would otherwise pay a scan of the whole table per datagram.
            if now < self.sources_swept + Duration::from_millis(100) {
                return false;
            }
            self.sources_swept = now;
            self.sources.retain(|_, tat| *tat > now);
            if self.sources.len() >= MAX_SOURCES {
                return false;
            }
        }
        let tat = self.sources.entry(from).or_insert(now);
        if *tat > now + interval * BURST {
            return false;
        }
        *tat = (*tat).max(now) + interval;
        true
    }

    fn on_initiation(&mut self, now: Time, from: SocketAddr, d: &[u8]) -> Result<Input, Discard> {
        // Every initiation that arrives counts towards the load, whatever becomes of it, so a
        // flood keeps the endpoint under load (cookies required, the per-source limit on) for
        // as long as it lasts and replays never reach a Diffie-Hellman; the load ends at most
        // a second after the arrivals fall below the rate (the cap).
        let interval = Duration::from_secs(1) / self.cfg.handshakes_per_sec.max(1);
        self.load_tat = (self.load_tat.max(now) + interval).min(now + LOAD_HOLD);
        if self.under_load(now) {
            if !self.source_allows(now, from) {
                return Err(Discard::RateLimited);
            }
        } else if !self.sources.is_empty() {
            // Load is over: the per-source state goes.
            self.sources = HashMap::new();
        }
        let (body, mac1, mac2) = self.jar.keys().check_mac1(d).ok_or(Discard::Mac1)?;
        if body.len() < 5 {
            return Err(Discard::Truncated);
        }
        if self.under_load(now) {
            let with_mac1 = &d[..body.len() + MAC_LEN];
            let rng = &mut self.rng;
            if !self
                .jar
                .check_mac2(now, from, with_mac1, mac2, || rng.random())
            {
                let nonce: [u8; 24] = self.rng.random();
                let index: [u8; 4] = body[1..5].try_into().map_err(|_| Discard::Truncated)?;
                let rng = &mut self.rng;
                let reply = self
                    .jar
                    .reply(now, from, index, mac1, nonce, || rng.random());
                self.control.push_back((from, reply));
                self.stats.cookie_replies += 1;
                return Err(Discard::CookieRequired);
            }
        }
        if self.sessions >= self.cfg.max_sessions {
            return Err(Discard::TooManySessions);
        }
        let index = self.fresh_index();
        let (keys, response) = self
            .responder
            .respond(body, index)
            .map_err(|e| Discard::of(&e))?;
        let p = self.peer_for(keys.peer);
        let (conn, keys) = self.build(keys).ok_or(Discard::Malformed)?;
        let peer = &mut self.peers[p.0 as usize];
        // Crossing handshakes: the peer's initiation wins, ours is dropped.
        if let Some(pd) = peer.pending.take() {
            self.by_index.remove(&pd.init.index());
        }
        self.install(now, p, keys, conn, from);
        self.control.push_back((from, response));
        Ok(Input::Handshake(p))
    }

    fn on_response(&mut self, now: Time, from: SocketAddr, d: &[u8]) -> Result<Input, Discard> {
        let index = receiver_index(d)?;
        let p = *self.by_index.get(&index).ok_or(Discard::UnknownIndex)?;
        let peer = &mut self.peers[p.0 as usize];
        let pd = match &mut peer.pending {
            Some(pd) if pd.init.index() == index => pd,
            _ => return Err(Discard::UnknownIndex),
        };
        let keys = pd.init.finish(d).map_err(|e| Discard::of(&e))?;
        let first = pd.first_sent;
        peer.handshake_rtt = Some(now.since(pd.sent_at));
        peer.pending = None;
        peer.stats.handshake_time = Some(now.since(first));
        let (conn, keys) = self.build(keys).ok_or(Discard::Malformed)?;
        self.install(now, p, keys, conn, from);
        Ok(Input::Handshake(p))
    }

    fn on_cookie_reply(&mut self, now: Time, d: &[u8]) -> Result<Input, Discard> {
        let index = receiver_index(d)?;
        let p = *self.by_index.get(&index).ok_or(Discard::UnknownIndex)?;
        let peer = &mut self.peers[p.0 as usize];
        let (Some(pd), Some(addr)) = (&peer.pending, peer.addr) else {
            return Err(Discard::UnknownIndex);
        };
        if pd.init.index() != index {
            return Err(Discard::UnknownIndex);
        }
        let keys = ResponderMacKeys::new(&peer.key.0);
        let cookie = keys
            .open_cookie_reply(d, &pd.mac1)
            .ok_or(Discard::BadCookieReply)?;
        peer.cookie = Some((cookie, now));
        // The responder did no work for the initiation: send the same one again, with mac2.
        let mut msg = pd.body.clone();
        keys.append_macs(&mut msg, Some(&cookie));
        self.control.push_back((addr, msg));
        Ok(Input::Cookie(p))
    }

    /// A data datagram, in its buffer: to its session's connection without its header.
    fn on_data(&mut self, now: Time, from: SocketAddr, mut m: Msg) -> Result<Input, Discard> {
        let index = match receiver_index(m.data()) {
            Ok(i) => i,
            Err(e) => {
                self.pool.free(m);
                return Err(e);
            }
        };
        let Some(&p) = self.by_index.get(&index) else {
            self.pool.free(m);
            return Err(Discard::UnknownIndex);
        };
        let peer = &mut self.peers[p.0 as usize];
        let Some(s) = peer.sessions_mut().find(|s| s.local == index) else {
            self.pool.free(m);
            return Err(Discard::UnknownIndex);
        };
        m.pop_front(DATA_HEADER);
        let received = s.conn.handle_msg(now, m);
        // The buffer went to the session's pool: one of its idle ones comes back.
        if let Some(spare) = s.conn.spare() {
            self.pool.free(spare);
        }
        if received.is_fresh() {
            // Authenticated and new (a nonce the session had not seen): the peer is alive,
            // and may have moved. A copy replayed from another address carries a nonce seen
            // already, so it never gets here; the genuine peer's next datagram (a
            // retransmission too, which the window then refuses as a duplicate) wins its
            // address back.
            s.quiet_since = now;
            s.last_rx = now;
            s.last_active = now;
            s.shrunk = false;
            s.dead = false;
            peer.addr = Some(from);
        }
        // The connection may have moved even for a refused datagram (one refused after it
        // authenticated), so its timers are looked at again.
        self.touch(now, p);
        if received.is_accepted() {
            Ok(Input::Data(p))
        } else {
            Err(Discard::Refused)
        }
    }

    fn build(&mut self, keys: SessionKeys) -> Option<(Connection<S>, Handshook)> {
        let hs = Handshook {
            role: keys.role,
            peer: keys.peer,
            local_index: keys.local_index,
            peer_index: keys.peer_index,
            replaces: keys.replaces,
        };
        let cfg = Config {
            accelerate: self.cfg.accelerate,
            // The session header goes in front of every datagram.
            datagram_overhead: DATA_HEADER,
            ..Config::new(keys.role)
        }
        .with_session(keys);
        Some(((self.make)(cfg).ok()?, hs))
    }

    /// Make a handshake's session the peer's current one; the old one retires.
    fn install(
        &mut self,
        now: Time,
        p: PeerId,
        keys: Handshook,
        conn: Connection<S>,
        from: SocketAddr,
    ) {
        let retire_after = self.cfg.retire_after;
        let peer = &self.peers[p.0 as usize];
        // A rekey retried after its response was lost names the session the initiator still
        // uses — already retiring here, replaced by the first attempt's session, which the
        // initiator never learnt of. That one ends (handing back what this end sent on it);
        // the one the initiator uses keeps retiring.
        let retried = keys.role == Role::Responder
            && keys.replaces.is_some()
            && peer
                .retiring
                .as_ref()
                .is_some_and(|r| Some(r.session.local) == keys.replaces);
        if retried {
            if let Some(mut abandoned) = self.peers[p.0 as usize].current.take() {
                self.unregister(&mut abandoned, p);
                if !abandoned.unconfirmed.is_empty() {
                    let lost = abandoned.unconfirmed.hand_back(&mut self.pool);
                    self.report(p, EndReason::Superseded, lost);
                }
            }
        } else if self.peers[p.0 as usize].retiring.is_some() {
            self.end_retiring(p);
        }
        let peer = &mut self.peers[p.0 as usize];
        if let Some(old) = peer.current.take() {
            // The old session retires gracefully only when it is alive and the handshake says
            // it replaces it (a rekey: its messages may still be confirmed); a restarted peer
            // replaces nothing, and what the old session holds is reported at once.
            let (deadline, reason, graceful) = if old.dead {
                (now, EndReason::PeerDead, false)
            } else if keys.role == Role::Initiator || keys.replaces == Some(old.local) {
                (now + retire_after, EndReason::Superseded, true)
            } else {
                (now, EndReason::Superseded, false)
            };
            peer.retiring = Some(Box::new(Retiring {
                session: old,
                deadline,
                reason,
                graceful,
            }));
        }
        self.sessions += 1;
        let peer = &mut self.peers[p.0 as usize];
        peer.addr = Some(from);
        peer.current = Some(Session {
            conn,
            local: keys.local_index,
            remote: keys.peer_index,
            quiet_since: now,
            last_rx: now,
            last_active: now,
            unconfirmed: Unconfirmed::default(),
            marks: None,
            dead: false,
            shrunk: false,
        });
        peer.stats.sessions += 1;
        self.by_index.insert(keys.local_index, p);
        self.stats.established += 1;
        self.events.push_back(Event::Established {
            peer: p,
            key: keys.peer,
            role: keys.role,
        });
        self.touch(now, p);
    }

    /// After anything happened to a peer: confirm, resolve the retiring session, move waiting
    /// messages into the current one, note datagrams to send, schedule its next timer.
    fn touch(&mut self, now: Time, p: PeerId) {
        let peer = &mut self.peers[p.0 as usize];
        for s in peer.sessions_mut() {
            // While the accelerator's post-processing is pending, the acknowledgements the
            // last datagram carried are not taken in yet, so nothing new can be confirmed:
            // this runs again once it has run (`post_process`, or its timer).
            if !s.conn.needs_post_process() {
                s.confirm(&mut self.pool);
            }
        }
        let retire_after = self.cfg.retire_after;
        if let Some(r) = &mut peer.retiring {
            if r.graceful {
                r.deadline = r.deadline.max(r.session.last_rx + retire_after);
            }
            if r.drained() && now >= r.quiet_at(retire_after) {
                // Everything it held is confirmed and the peer is done with it.
                self.drop_retiring(p);
            } else if r.deadline <= now {
                self.end_retiring(p);
            }
        }
        let (rekey_after, reject_after) = (self.cfg.rekey_after, self.cfg.reject_after);
        let peer = &mut self.peers[p.0 as usize];
        if peer.open() {
            if let Some(s) = &mut peer.current {
                while let Some(m) = peer.outbox.front() {
                    if !s.takes_more(rekey_after, reject_after, peer.dialer) {
                        break;
                    }
                    match s.send(now, m.data(), &mut self.pool) {
                        Ok(()) => {
                            let m = peer.outbox.pop_front().unwrap_or_default();
                            peer.outbox_bytes -= m.len();
                            s.keep(m, &mut self.pool);
                        }
                        Err(SendError::WouldBlock) => break,
                        Err(_) => {
                            // Too large for this session's stack: hand it back.
                            let m = peer.outbox.pop_front().unwrap_or_default();
                            peer.outbox_bytes -= m.len();
                            peer.stats.unconfirmed += 1;
                            let unconfirmed = vec![handed_back(m, &mut self.pool)];
                            self.events.push_back(Event::Ended {
                                peer: p,
                                reason: EndReason::Closed,
                                unconfirmed,
                            });
                        }
                    }
                }
                if s.conn.stats().datagrams_out >= reject_after && !s.outstanding() {
                    self.end_current(p, EndReason::KeyLimit);
                }
            }
        }
        // Messages wait and no session will take them (it ended at the key-usage limit, say):
        // this end starts the handshake they wait for.
        let peer = &self.peers[p.0 as usize];
        if peer.dialer
            && peer.current.is_none()
            && peer.pending.is_none()
            && !peer.outbox.is_empty()
        {
            self.initiate(now, p);
        }
        // Rekey: the initiator starts a new handshake once the session has carried
        // `rekey_after` datagrams; the old one keeps going until the new one is up.
        let peer = &self.peers[p.0 as usize];
        if peer.dialer
            && peer.pending.is_none()
            && peer.retiring.is_none()
            && peer
                .current
                .as_ref()
                .is_some_and(|s| !s.dead && s.datagrams() >= self.cfg.rekey_after)
        {
            self.initiate(now, p);
        }
        let peer = &mut self.peers[p.0 as usize];
        if !peer.tx_flagged && peer.sessions().any(|s| s.conn.transmit_ready() > 0) {
            peer.tx_flagged = true;
            self.tx_ready.push_back(p);
        }
        if !peer.deferred_listed && peer.sessions().any(|s| s.conn.needs_post_process()) {
            peer.deferred_listed = true;
            self.deferred.push(p);
        }
        if !peer.resched {
            peer.resched = true;
            self.resched.push(p);
            if self.resched.len() > MAX_UNSETTLED {
                self.settle_schedule();
            }
        }
    }

    /// Free a session: its index, its count, its statistics into the peer's totals; what it
    /// delivered that the application has not taken yet stays with the peer.
    fn unregister(&mut self, s: &mut Session<S>, p: PeerId) {
        self.by_index.remove(&s.local);
        self.sessions -= 1;
        self.stats.ended += 1;
        let peer = &mut self.peers[p.0 as usize];
        peer.stats.add_conn(s.conn.stats(), &s.conn);
        while let Some(m) = s.conn.poll_delivery() {
            peer.leftover.push_back(m);
        }
    }

    fn drop_retiring(&mut self, p: PeerId) {
        if let Some(mut r) = self.peers[p.0 as usize].retiring.take() {
            self.unregister(&mut r.session, p);
        }
    }

    fn end_retiring(&mut self, p: PeerId) {
        if let Some(mut r) = self.peers[p.0 as usize].retiring.take() {
            self.unregister(&mut r.session, p);
            // A rekeyed session that lost nothing ends without news.
            if r.graceful && r.session.unconfirmed.is_empty() {
                return;
            }
            let lost = r.session.unconfirmed.hand_back(&mut self.pool);
            self.report(p, r.reason, lost);
        }
    }

    fn end_current(&mut self, p: PeerId, reason: EndReason) {
        if let Some(mut s) = self.peers[p.0 as usize].current.take() {
            self.unregister(&mut s, p);
            let mut lost = s.unconfirmed.hand_back(&mut self.pool);
            let peer = &mut self.peers[p.0 as usize];
            // Messages waiting for this session went nowhere either (they would go into a
            // new one, but this end cannot make one).
            if !peer.dialer || matches!(reason, EndReason::Closed | EndReason::HandshakeFailed) {
                let pool = &mut self.pool;
                lost.extend(peer.outbox.drain(..).map(|m| handed_back(m, pool)));
                peer.outbox_bytes = 0;
            }
            self.report(p, reason, lost);
        }
    }

    /// End everything the peer has: retiring and current sessions, waiting messages.
    fn end_peer(&mut self, p: PeerId, reason: EndReason) {
        self.end_retiring(p);
        if self.peers[p.0 as usize].current.is_some() {
            self.end_current(p, reason);
        }
        let peer = &mut self.peers[p.0 as usize];
        if let Some(pd) = peer.pending.take() {
            self.by_index.remove(&pd.init.index());
        }
        if !peer.outbox.is_empty() {
            let pool = &mut self.pool;
            let lost = peer
                .outbox
                .drain(..)
                .map(|m| handed_back(m, pool))
                .collect();
            peer.outbox_bytes = 0;
            self.report(p, reason, lost);
        }
    }

    /// Hand back what a session did not confirm ([`Event::Ended`]).
    fn report(&mut self, p: PeerId, reason: EndReason, unconfirmed: Vec<Vec<u8>>) {
        self.peers[p.0 as usize].stats.unconfirmed += unconfirmed.len() as u64;
        self.events.push_back(Event::Ended {
            peer: p,
            reason,
            unconfirmed,
        });
    }
}
