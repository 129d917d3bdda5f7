//! A sans-IO connection: the layered core, with the Protocol Accelerator in front of it when
//! configured.
//!
//! Quinn-proto style: the driver feeds datagrams ([`Connection::handle_datagram`]) and time
//! ([`Connection::handle_timeout`]), the application feeds messages ([`Connection::send`]); the
//! connection produces datagrams ([`Connection::poll_transmit`]), deliveries
//! ([`Connection::poll_delivery`]) and its next deadline ([`Connection::poll_timeout`]). It
//! never touches a socket or a clock, so every run replays.
//!
//! **The contract.** An event loop that calls [`handle_timeout`](Connection::handle_timeout)
//! whenever [`poll_timeout`](Connection::poll_timeout) says (a deadline at or before now: at
//! once), drains [`poll_transmit`](Connection::poll_transmit) (or
//! [`transmit_with`](Connection::transmit_with)) and [`poll_delivery`](Connection::poll_delivery)
//! after every call, and hands every datagram to [`handle_datagram`](Connection::handle_datagram)
//! gets every retransmission and every delivery. Nothing else is needed:
//! [`post_process`](Connection::post_process) only lets an idle application run the
//! accelerator's deferred work earlier than its deadline.
//!
//! The connection is two parts: the layered core (`layered`: the stack, its timers and
//! queues; it stands on its own and is all a plain connection is), and, when
//! [`Config::accelerate`] is set, the [`accel`](crate::accel)erator wrapped around it, which
//! owns its own state and calls the core through a narrow interface.

use crate::accel::preamble::PREAMBLE_LEN;
use crate::accel::{AccelConfig, AccelStats, Accelerator, FastPathCheck};
use crate::field::{ByteOrder, FieldLoc};
use crate::layer::{DirectionKeys, DropReason, InitCx, RefusedAt, Role};
pub use crate::layered::Stats;
use crate::layered::{Bare, Core};
use crate::layout::{FieldRegistry, Layout, LayoutError};
use crate::msg::{Msg, Pool};
use crate::plpmtu::PathMtu;
use crate::stack::{build_dyn, DynStack, LayerSet, SpecError};
use crate::time::{earliest, Time};
use std::sync::{Arc, Mutex};
use thiserror::Error;

/// The default largest application message, bytes.
pub const MAX_MESSAGE: usize = 1 << 20;

/// Configuration of a connection.
///
/// **Keys.** A stack with `seal` needs keys, and they come only from a session's Noise IK
/// handshake ([`crate::session`]; [`Config::with_session`]), or, for two ends in one process
/// (tests, benchmarks, experiments), from [`Config::pair`], which runs that handshake in
/// memory. There is no built-in key and no pre-shared key: a [`Connection`] has no handshake
/// of its own, and its nonces start at zero, so any fixed key shared by several connections
/// (a restarted process, the next connection an endpoint accepts) would encrypt different
/// messages under the same (key, nonce) pair, and a fresh connection would accept a datagram
/// recorded from an earlier one. No derivation from a fixed key avoids that unless both ends
/// contribute fresh randomness — which is a handshake, which is what sessions are (a static
/// key pair is as easy to distribute as a pre-shared key).
///
/// The keys are a one-shot grant ([`KeyGrant`]): a `Config` is `Clone`, and every clone
/// shares the grant, so only the first connection built from any of them gets the keys; a
/// second fails with [`BuildError::KeysUsed`]. Within a connection, every layer gets keys of
/// its own, derived from the session's ([`InitCx::session`]).
#[derive(Clone, Debug)]
pub struct Config {
    /// This end's role.
    pub role: Role,
    /// Keys of a session from a handshake ([`crate::session`]), for one connection: set by
    /// [`Config::with_session`] or [`Config::pair`]. `None` by default (a stack with `seal`
    /// then refuses to build: [`BuildError::NoKeys`]).
    pub session: Option<KeyGrant>,
    /// Largest application message accepted by [`Connection::send`].
    pub max_message: usize,
    /// Largest number of datagrams or deliveries waiting to be polled; beyond it the oldest
    /// datagrams are dropped (counted) — reliability layers recover them.
    pub max_queue: usize,
    /// Put the Protocol Accelerator in front of the stack (compact headers, cookies, header
    /// prediction, packet filters, deferred post-processing, packing).
    pub accelerate: bool,
    /// Largest packed body, bytes (the accelerator packs the backlog up to this).
    pub mtu: usize,
    /// Byte order of the accelerator's headers (the preamble announces it).
    pub order: ByteOrder,
    /// The accelerator's cookie for this end (random when `None`; tests force collisions).
    pub cookie: Option<u64>,
    /// Which sends and deliveries of the accelerator's fast path to check against the
    /// layered path on the same input and state (the header the layers' pre-sends would
    /// build; that every layer's pre-delivery would accept), and what a failed check does.
    /// [`FastPathCheck::Every`] by default in debug builds (so in every test): every one,
    /// panicking with the name of the layer that mispredicts. [`FastPathCheck::Sampled`] by
    /// default in release builds: the first operations of each direction, a few after every
    /// miss, then one in [`CHECK_PERIOD`](crate::accel::CHECK_PERIOD); a failed check takes
    /// the layered path for that message and for every later one of that direction, counted
    /// as [`Miss::Distrusted`](crate::accel::Miss::Distrusted) with the layer named in
    /// [`AccelStats`]. [`FastPathCheck::Off`] only to measure the bare fast path.
    pub fast_path_check: FastPathCheck,
    /// Bytes the driver puts around each datagram the connection makes, inside the UDP
    /// payload (a session endpoint's header): what the path's datagram size must leave room
    /// for ([`crate::plpmtu`]). 0 by default.
    pub datagram_overhead: usize,
}

/// A session's keys as a one-shot grant: the first connection built from a [`Config`]
/// holding it takes them ([`Connection::new`]); clones of the `Config` share the grant, so
/// no two connections are ever keyed by the same keys (their nonces both start at zero). Only
/// [`Config::with_session`] and [`Config::pair`] make one.
#[derive(Clone)]
pub struct KeyGrant(Arc<Mutex<Option<DirectionKeys>>>);

impl KeyGrant {
    fn new(keys: DirectionKeys) -> KeyGrant {
        KeyGrant(Arc::new(Mutex::new(Some(keys))))
    }

    /// The keys, unless a connection took them already (then never again).
    fn take(&self) -> Option<DirectionKeys> {
        // A panic while the lock was held cannot leave the `Option` half-written.
        self.0.lock().unwrap_or_else(|e| e.into_inner()).take()
    }

    /// Whether a connection took the keys already.
    pub fn is_used(&self) -> bool {
        self.0.lock().unwrap_or_else(|e| e.into_inner()).is_none()
    }
}

impl std::fmt::Debug for KeyGrant {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(if self.is_used() {
            "KeyGrant(<used>)"
        } else {
            "KeyGrant(<hidden>)"
        })
    }
}

impl Config {
    /// Defaults for `role`: no keys (a stack with `seal` needs [`Config::with_session`] or
    /// [`Config::pair`]), messages up to [`MAX_MESSAGE`].
    pub fn new(role: Role) -> Config {
        Config {
            role,
            session: None,
            max_message: MAX_MESSAGE,
            max_queue: 4096,
            accelerate: false,
            mtu: 1400,
            order: ByteOrder::NATIVE,
            cookie: None,
            fast_path_check: FastPathCheck::DEFAULT,
            datagram_overhead: 0,
        }
    }

    /// Defaults for `role`, with the Protocol Accelerator on.
    pub fn accelerated(role: Role) -> Config {
        Config {
            accelerate: true,
            ..Config::new(role)
        }
    }

    /// The same keyed by the session `keys` (its role too), for one connection: they are
    /// consumed, and the first connection built from this configuration or a clone of it
    /// takes them ([`KeyGrant`]).
    pub fn with_session(mut self, keys: crate::session::SessionKeys) -> Config {
        self.role = keys.role;
        self.session = Some(KeyGrant::new(keys.keys));
        self
    }

    /// Two ends in one process (tests, benchmarks, experiments): an initiator and a
    /// responder, accelerated or not, keyed by a Noise IK handshake run in memory between two
    /// freshly generated static keys. Every call gives fresh keys; each configuration keys
    /// one connection.
    pub fn pair(accelerate: bool) -> Result<(Config, Config), BuildError> {
        use crate::session::{Initiation, Responder, StaticKey};
        let random = |e: crate::session::HandshakeError| BuildError::Random(e.to_string());
        let initiator = StaticKey::generate().map_err(random)?;
        let responder = StaticKey::generate().map_err(random)?;
        let mut r = Responder::new(responder.clone(), [initiator.public()]);
        // Indices and timestamp only matter to a session endpoint: any will do here.
        let (mut init, m1) = Initiation::start(&initiator, responder.public(), 1, 1)?;
        let (kr, m2) = r.respond(&m1, 2)?;
        let ki = init.finish(&m2)?;
        let mk = |keys| {
            Config {
                accelerate,
                ..Config::new(Role::Initiator)
            }
            .with_session(keys)
        };
        Ok((mk(ki), mk(kr)))
    }
}

/// A connection could not be built.
#[derive(Debug, Error)]
pub enum BuildError {
    /// The spec string is malformed.
    #[error(transparent)]
    Spec(#[from] SpecError),
    /// The layers' fields do not fit a layout.
    #[error(transparent)]
    Layout(#[from] LayoutError),
    /// A layer's packet-filter instructions do not verify.
    #[error("packet filter: {0}")]
    Filter(#[from] crate::filter::VerifyError),
    /// A layer needs keys and the configuration has none.
    #[error(
        "layer `{0}` needs keys: Config::with_session (from a session's handshake), or \
         Config::pair for two ends in one process"
    )]
    NoKeys(&'static str),
    /// The configuration's keys were taken by a connection built before from it or from a
    /// clone of it ([`KeyGrant`]).
    #[error(
        "these session keys already keyed a connection: every connection needs keys of its own"
    )]
    KeysUsed,
    /// The in-memory handshake of [`Config::pair`] failed.
    #[error("handshake: {0}")]
    Handshake(#[from] crate::session::HandshakeError),
    /// The system's random source failed.
    #[error("no randomness: {0}")]
    Random(String),
}

/// What a datagram handed to [`Connection::handle_datagram`] did.
///
/// A stack's *keyed layer* (the lowest layer that [needs keys](crate::Layer::needs_keys):
/// `seal`) authenticates datagrams and refuses any nonce it has seen. A datagram it passed is
/// genuine and new, even when a layer above it refuses it — most often a retransmission
/// whose first copy arrived, which `window` counts as a duplicate. That is the evidence a
/// session needs to follow a peer that changed address (as WireGuard follows every
/// authenticated datagram with a fresh counter): a copy an attacker replays from elsewhere
/// is refused by the keyed layer itself.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Received {
    /// Every layer took it.
    Accepted,
    /// The keyed layer authenticated it as new; something above refused it, and why.
    FreshRefused(Refusal),
    /// Refused before it was authenticated as new (or, without a keyed layer, refused at
    /// all), and why: it proves nothing about its sender.
    Refused(Refusal),
}

/// Why a datagram was refused (also counted: [`Stats`], [`AccelStats`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Refusal {
    /// A layer refused it.
    Layer {
        /// The layer's name.
        name: &'static str,
        /// Why.
        reason: DropReason,
    },
    /// Before the stack: shorter than the header area, or (accelerated) a cookie or an
    /// identification of no connection of this end's.
    Unadmitted,
    /// After every layer passed it: a packed body whose lengths lie.
    BadPacking,
}

impl Received {
    /// Every layer took it.
    pub fn is_accepted(self) -> bool {
        self == Received::Accepted
    }

    /// It came from the peer and is new: accepted, or authenticated as new by the keyed
    /// layer and refused above it.
    pub fn is_fresh(self) -> bool {
        !matches!(self, Received::Refused(_))
    }

    /// Why it was refused, if it was.
    pub fn refusal(self) -> Option<Refusal> {
        match self {
            Received::Accepted => None,
            Received::FreshRefused(r) | Received::Refused(r) => Some(r),
        }
    }
}

/// The application's message was not accepted.
#[derive(Debug, Error, PartialEq, Eq)]
pub enum SendError {
    /// Larger than [`Config::max_message`].
    #[error("message of {len} bytes exceeds the limit of {max}")]
    TooLarge {
        /// Its length.
        len: usize,
        /// The limit.
        max: usize,
    },
    /// A layer's backlog is full; try again after polling and handling input.
    #[error("backlog full: try again later")]
    WouldBlock,
}

/// A connection over the stack `S`: the layered core, and the Protocol Accelerator in front
/// of it when [`Config::accelerate`] is set.
pub struct Connection<S: LayerSet = DynStack> {
    core: Core<S>,
    pa: Option<Box<Accelerator>>,
    max_message: usize,
    /// Whether a layer numbers what it takes ([`numbers_messages`](Self::numbers_messages)):
    /// the stack's, known once it is built (asking the layers walks them).
    numbers: bool,
}

/// A point in a connection's sending ([`Connection::delivery_mark`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DeliveryMark {
    messages: u64,
    taken: u64,
    outstanding: u64,
}

impl DeliveryMark {
    /// Application messages sent before the mark.
    pub fn messages(&self) -> u64 {
        self.messages
    }

    /// Messages the reliable layer had taken and the peer had not acknowledged when the mark
    /// was made.
    pub fn outstanding(&self) -> u64 {
        self.outstanding
    }

    /// How many messages the reliable layer took between `earlier` and this mark.
    pub fn since(&self, earlier: &DeliveryMark) -> u64 {
        self.taken.saturating_sub(earlier.taken)
    }
}

/// A connection over a dynamic stack.
pub type DynConnection = Connection<DynStack>;

impl Connection<DynStack> {
    /// A connection over the dynamic stack described by `spec` (built-in layers; see
    /// [`Registry`](crate::stack::Registry) for layers of your own).
    pub fn from_spec(spec: &str, cfg: Config) -> Result<DynConnection, BuildError> {
        Connection::new(build_dyn(spec)?, cfg)
    }
}

impl<S: LayerSet> Connection<S> {
    /// A connection over `layers`: with the accelerator, its compact layout; without, the
    /// traditional per-layer 4-byte-aligned one. It takes the keys of `cfg` (whatever the
    /// stack, and even when building fails afterwards): another connection built from `cfg`
    /// or a clone of it fails with [`BuildError::KeysUsed`]. A stack with a layer that needs
    /// keys ([`Layer::needs_keys`](crate::Layer::needs_keys)) fails without them
    /// ([`BuildError::NoKeys`]).
    pub fn new(layers: S, cfg: Config) -> Result<Connection<S>, BuildError> {
        // The grant's keys are this connection's alone, whatever the stack: a configuration
        // keys one connection.
        let session = match &cfg.session {
            Some(grant) => Some(grant.take().ok_or(BuildError::KeysUsed)?),
            None => None,
        };
        if session.is_none() {
            if let Some(i) = (0..layers.count()).find(|&i| layers.needs_keys_at(i)) {
                return Err(BuildError::NoKeys(layers.name_at(i)));
            }
        }
        // The session's keys: the core gives every layer its own, derived from them.
        let icx = InitCx {
            role: cfg.role,
            session,
            max_message: cfg.max_message,
            path: PathMtu::new(),
        };
        let preamble = if cfg.accelerate { PREAMBLE_LEN } else { 0 };
        let mut reg = FieldRegistry::new();
        let mut fields = None;
        let outer = preamble + cfg.datagram_overhead;
        let core = Core::new(layers, &icx, outer, cfg.max_queue, &mut reg, |reg, n| {
            if cfg.accelerate {
                fields = Some(crate::accel::declare(reg));
                Layout::compact(reg.specs(), n, cfg.order)
            } else {
                Layout::per_layer_aligned(reg.specs(), n, 4)
            }
        })?;
        let numbers = core.layers().acked_prefix().is_some();
        let mut c = Connection {
            core,
            pa: None,
            max_message: cfg.max_message,
            numbers,
        };
        if let Some(f) = fields {
            let acfg = AccelConfig {
                mtu: cfg.mtu,
                initiator: cfg.role == Role::Initiator,
                cookie: cfg.cookie,
                check: cfg.fast_path_check,
            };
            let pa = Accelerator::build(&mut c.core, reg.specs(), f, &acfg)?;
            c.pa = Some(Box::new(pa));
        }
        Ok(c)
    }

    /// The layout in force.
    pub fn layout(&self) -> &Layout {
        self.core.layout()
    }

    /// Counters.
    pub fn stats(&self) -> &Stats {
        self.core.stats()
    }

    /// The layers.
    pub fn layers(&self) -> &S {
        self.core.layers()
    }

    /// Whether [`send`](Self::send) would accept a message now.
    pub fn can_send(&self) -> bool {
        match &self.pa {
            Some(pa) => pa.can_accept(),
            None => self.core.can_accept(),
        }
    }

    /// Nothing to transmit, no deferred work, no layer busy.
    pub fn is_idle(&self) -> bool {
        !self.core.busy() && !self.pa.as_ref().is_some_and(|pa| pa.busy())
    }

    /// Give back memory an idle connection does not need (spare queue capacity, pooled
    /// buffers, the window's out-of-order slots); the next traffic allocates again. A
    /// [`SessionEndpoint`](crate::endpoint::SessionEndpoint) calls it on sessions
    /// idle for a while.
    pub fn shrink(&mut self) {
        if let Some(pa) = self.pa.as_deref_mut() {
            pa.shrink();
        }
        self.core.shrink();
    }

    /// The body bytes of a full fragment on the current path, when the stack cuts messages
    /// into fragments ([`Layer::fragment_payload`](crate::Layer::fragment_payload)): a
    /// message of a whole number of them leaves in datagrams of one size, which a socket with
    /// segmentation offload sends in long runs. `None` without such a layer.
    pub fn fragment_payload(&self) -> Option<usize> {
        self.core.layers().fragment_payload()
    }

    /// Everything sent so far was acknowledged: nothing waits for the link, for an
    /// acknowledgement, or in the accelerator's deferred work (acknowledgements this end owes
    /// may still be pending). Without a reliable layer, as soon as it left.
    pub fn all_acknowledged(&self) -> bool {
        !self.core.holds_unacked() && !self.pa.as_ref().is_some_and(|pa| pa.busy())
    }

    /// A mark of what has been sent so far, for confirming messages in order while more are
    /// in flight: once [`acknowledged_to`](Self::acknowledged_to) says so, the first
    /// [`DeliveryMark::messages`] messages the application sent were all acknowledged by the
    /// peer's reliable layer. `None` when the stack has no layer that numbers what it takes
    /// ([`Layer::acked_prefix`](crate::Layer::acked_prefix)), or when not everything sent has
    /// reached that layer yet (the accelerator's deferred work or backlog, a layer above it
    /// holding messages): ask again later, or wait for
    /// [`all_acknowledged`](Self::all_acknowledged).
    pub fn delivery_mark(&self) -> Option<DeliveryMark> {
        if self.pa.as_ref().is_some_and(|pa| pa.busy()) {
            return None;
        }
        match self.core.layers().acked_prefix() {
            Some((p, true)) => Some(DeliveryMark {
                messages: self.core.stats().sent_msgs,
                taken: p.taken,
                outstanding: p.taken - p.acked.min(p.taken),
            }),
            _ => None,
        }
    }

    /// Whether the stack has a layer that numbers what it takes
    /// ([`Layer::acked_prefix`](crate::Layer::acked_prefix)): then
    /// [`delivery_mark`](Self::delivery_mark) confirms messages while others are in flight, as
    /// soon as the accelerator's deferred work has run.
    pub fn numbers_messages(&self) -> bool {
        self.numbers
    }

    /// Whether the peer acknowledged everything sent before `mark` (a mark of this
    /// connection's).
    pub fn acknowledged_to(&self, mark: &DeliveryMark) -> bool {
        self.core
            .layers()
            .acked_prefix()
            .is_some_and(|(p, _)| p.acked >= mark.taken)
    }

    /// Whether [`post_process`](Self::post_process) has work: deferred post-processing or a
    /// backlog waiting to be sent packed (accelerated connections only).
    pub fn needs_post_process(&self) -> bool {
        self.pa.as_ref().is_some_and(|pa| pa.actionable(&self.core))
    }

    /// Run the accelerator's deferred post-processing, then send its backlog packed (seed 004
    /// §3.1, §3.4). An idle application calls it to take that work off the next operation's
    /// path; [`handle_timeout`](Self::handle_timeout) runs it too, when
    /// [`poll_timeout`](Self::poll_timeout) asks.
    pub fn post_process(&mut self, now: Time) {
        if let Some(pa) = self.pa.as_deref_mut() {
            pa.post_process(&mut self.core, now);
        }
    }

    /// Send an application message (copied into a pooled buffer; [`send_msg`](Self::send_msg)
    /// takes one the application filled itself).
    pub fn send(&mut self, now: Time, data: &[u8]) -> Result<(), SendError> {
        self.check_send(data.len())?;
        match self.pa.as_deref_mut() {
            Some(pa) => {
                self.core.stats_mut().sent_msgs += 1;
                pa.send_bytes(&mut self.core, now, data);
            }
            None => {
                let m = self.core.pool().alloc_copy(data);
                self.send_accepted(now, m);
            }
        }
        Ok(())
    }

    /// Send an application message already in a buffer, without copying it: the buffer
    /// should come from [`alloc`](Self::alloc), so the headers go in its headroom. On an
    /// error the buffer goes back to the pool.
    #[inline(always)]
    pub fn send_msg(&mut self, now: Time, m: Msg) -> Result<(), SendError> {
        if let Err(e) = self.check_send(m.len()) {
            self.core.pool().free(m);
            return Err(e);
        }
        self.send_accepted(now, m);
        Ok(())
    }

    /// Whether a message of `len` bytes may be sent now.
    #[inline]
    fn check_send(&self, len: usize) -> Result<(), SendError> {
        if len > self.max_message {
            return Err(SendError::TooLarge {
                len,
                max: self.max_message,
            });
        }
        // With the accelerator its bounded backlog stands in front of the layers' own: a
        // message reaches the layers only when no layer disables the send header.
        if !self.can_send() {
            return Err(SendError::WouldBlock);
        }
        Ok(())
    }

    /// Send a message [`check_send`](Self::check_send) accepted: to the accelerator, or
    /// down the layers.
    #[inline]
    fn send_accepted(&mut self, now: Time, m: Msg) {
        self.core.stats_mut().sent_msgs += 1;
        match self.pa.as_deref_mut() {
            Some(pa) => pa.send(&mut self.core, now, m),
            None => self.core.send(now, m, &mut Bare),
        }
    }

    /// Handle a datagram from the link (copied into a pooled buffer); what it did.
    pub fn handle_datagram(&mut self, now: Time, data: &[u8]) -> Received {
        let m = self.core.pool().alloc_copy(data);
        self.handle_msg(now, m)
    }

    /// Handle a datagram already in a [`Msg`] (e.g. from [`alloc`](Self::alloc)); what it did.
    #[inline]
    pub fn handle_msg(&mut self, now: Time, m: Msg) -> Received {
        let before = self.core.refusals();
        self.core.stats_mut().datagrams_in += 1;
        match self.pa.as_deref_mut() {
            Some(pa) => pa.receive(&mut self.core, now, m),
            None => self.core.receive(now, m, &mut Bare),
        }
        let after = self.core.refusals();
        if after.all == before.all {
            return Received::Accepted;
        }
        let why = match after.last {
            Some(RefusedAt::Layer(i, reason)) => Refusal::Layer {
                name: self.core.layers().name_at(i),
                reason,
            },
            Some(RefusedAt::Above) => Refusal::BadPacking,
            Some(RefusedAt::Before) | None => Refusal::Unadmitted,
        };
        // Without a keyed layer every refusal is unauthenticated: nothing is ever fresh.
        if after.unauthenticated == before.unauthenticated {
            Received::FreshRefused(why)
        } else {
            Received::Refused(why)
        }
    }

    /// Run what is due: the accelerator's deferred work, then the layers' timers.
    pub fn handle_timeout(&mut self, now: Time) {
        match self.pa.as_deref_mut() {
            Some(pa) => pa.handle_timeout(&mut self.core, now),
            None => {
                self.core.run_timers(now, &mut Bare);
            }
        }
    }

    /// When [`handle_timeout`](Self::handle_timeout) should next be called: the earliest
    /// layer timer, or — when the accelerator has deferred work — shortly after the operation
    /// that deferred it ([`DEFERRED_GRACE`](crate::accel::DEFERRED_GRACE)).
    pub fn poll_timeout(&self) -> Option<Time> {
        let deferred = self.pa.as_ref().and_then(|pa| pa.deadline(&self.core));
        earliest(self.core.next_timer(), deferred)
    }

    /// The next datagram to put on the link. Give it back with [`recycle`](Self::recycle).
    /// [`transmit_with`](Self::transmit_with) is cheaper for an accelerated connection: it
    /// lends the datagrams instead, so the retransmission copy can be the datagram itself.
    #[inline]
    pub fn poll_transmit(&mut self) -> Option<Msg> {
        let m = self.core.pop_out()?;
        match self.pa.as_deref_mut() {
            Some(pa) => Some(pa.unqueued(&mut self.core, m)),
            None => Some(m),
        }
    }

    /// Lend the link up to `max` queued datagrams, oldest first, without giving up their
    /// buffers: `send` puts them on the link and returns how many it took (an error leaves
    /// them all queued). The taken ones go back to the pool, or become the retransmission
    /// copy an accelerated send deferred (see the accelerator's `deferred` module): no copy
    /// on the send path. Returns how many were taken.
    pub fn transmit_with<E>(
        &mut self,
        max: usize,
        send: impl FnOnce(&[Msg]) -> Result<usize, E>,
    ) -> Result<usize, E> {
        self.transmit_framed(max, |d| send(d))
    }

    /// [`transmit_with`](Self::transmit_with), lending the datagrams for the link to put its
    /// own framing in front of them (the endpoint's session header) before they leave. A
    /// datagram `send` does not take must be left as it was lent.
    pub(crate) fn transmit_framed<E>(
        &mut self,
        max: usize,
        send: impl FnOnce(&mut [Msg]) -> Result<usize, E>,
    ) -> Result<usize, E> {
        match self.pa.as_deref_mut() {
            Some(pa) => self.core.transmit_with(max, send, pa),
            None => self.core.transmit_with(max, send, &mut Bare),
        }
    }

    /// Datagrams queued for the link.
    pub fn transmit_ready(&self) -> usize {
        self.core.out().len()
    }

    /// The next message for the application (its bytes are [`Msg::data`]).
    #[inline]
    pub fn poll_delivery(&mut self) -> Option<Msg> {
        self.core.poll_delivery()
    }

    /// The next message for the application, lent to `f` instead of handed over: a message
    /// packed with others is read where it arrived, without a buffer of its own. `None` if
    /// none is waiting.
    #[inline]
    pub fn poll_delivery_with<R>(&mut self, f: impl FnOnce(&[u8]) -> R) -> Option<R> {
        self.core.poll_delivery_with(f)
    }

    /// Messages waiting in [`poll_delivery`](Self::poll_delivery).
    pub fn delivered_ready(&self) -> usize {
        self.core.delivered_ready()
    }

    /// Return a message buffer to the pool.
    #[inline]
    pub fn recycle(&mut self, m: Msg) {
        self.core.pool().free(m)
    }

    /// A pooled buffer to receive a datagram into.
    pub fn alloc(&mut self) -> Msg {
        self.core.pool().alloc()
    }

    /// An idle buffer of the connection's pool, if it holds one (never allocates): a driver
    /// that moves buffers between the connection and pools of its own (a
    /// [`SessionEndpoint`](crate::endpoint::SessionEndpoint) giving it received
    /// datagrams, taking its datagrams to send) takes one back for each it gave, so neither
    /// side runs dry.
    pub fn spare(&mut self) -> Option<Msg> {
        self.core.pool().take()
    }

    /// The buffer pool (for drivers and counting tests).
    pub fn pool(&self) -> &Pool {
        self.core.pool_ref()
    }

    /// Counters of the accelerator, if this connection has one.
    pub fn accel_stats(&self) -> Option<&AccelStats> {
        self.pa.as_ref().map(|pa| pa.stats())
    }

    /// This end's cookie (the one its datagrams carry), if accelerated.
    pub fn cookie(&self) -> Option<u64> {
        self.pa.as_ref().map(|pa| pa.ident().cookie())
    }

    /// The peer's cookie, once learnt from a datagram with the identification.
    pub fn peer_cookie(&self) -> Option<u64> {
        self.pa.as_ref().and_then(|pa| pa.ident().peer_cookie())
    }

    /// The connection identification (the initiator's choice), once known.
    pub fn conn_ident(&self) -> Option<u64> {
        self.pa.as_ref().and_then(|pa| pa.ident().conn_ident())
    }

    /// Where the accelerator's connection identification lives in the header area.
    pub fn conn_ident_loc(&self) -> Option<FieldLoc> {
        self.pa
            .as_ref()
            .map(|pa| pa.conn_ident_loc(self.core.layout()))
    }

    /// Stop telling the peer that its cookie is known, so it keeps sending the
    /// identification: used by an [`CookieDemux`](crate::demux::CookieDemux) that found the
    /// cookie shared by two connections.
    pub fn block_cookie_ack(&mut self) {
        if let Some(pa) = self.pa.as_deref_mut() {
            pa.block_cookie_ack(&mut self.core);
        }
    }

    /// The wire header of an ordinary data message once the peer knows the cookie: preamble
    /// plus headers without the identification (or the per-layer header area when not
    /// accelerated).
    pub fn data_header_bytes(&self) -> usize {
        let hl = self.core.layout().header_len();
        match &self.pa {
            Some(pa) => pa.data_header_bytes(hl),
            None => hl,
        }
    }
}
