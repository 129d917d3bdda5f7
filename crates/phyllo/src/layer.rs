//! The `Layer` trait: canonical protocol processing.
//!
//! Seed 004 §3.1: the send and delivery processing of a layer is split in two phases.
//! **Pre-processing** ([`Layer::pre_send`], [`Layer::pre_deliver`]) builds or checks the header
//! and reads the protocol state but never changes it — hence `&self`. **Post-processing**
//! ([`Layer::post_send`], [`Layer::post_deliver`]) updates the state (sequence numbers,
//! retransmission copies, reassembly) and may originate messages (acks, retransmissions,
//! fragments) and ask for timers. Because pre-phases change no state, the pre-phases of every
//! layer can run before the post-phase of any layer: the message goes out (or up) first and the
//! state is updated afterwards — the Protocol Accelerator puts its fast path in front of exactly
//! this split.
//!
//! Layers never see raw header offsets: they declare fields at initialisation
//! ([`Layer::init`] with a [`FieldRegistry`]) and read and write them through
//! [`FieldHandle`]s on a [`Packet`] or a [`Hdr`].

use crate::field::{ByteOrder, FieldHandle};
use crate::filter::Segment;
use crate::layout::{FieldRegistry, Layout, MAX_HEADER};
use crate::msg::{Msg, Pool};
use crate::plpmtu::PathMtu;
use crate::time::Time;
use std::fmt;

/// Which end of a connection this is (chooses per-direction keys and the like).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Role {
    /// The side that opened the connection.
    Initiator,
    /// The side that accepted it.
    Responder,
}

/// A reliable layer's progress ([`Layer::acked_prefix`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct AckedPrefix {
    /// Messages taken from the layer above, all told.
    pub taken: u64,
    /// How many of them, from the first, the peer acknowledged.
    pub acked: u64,
}

/// What a layer learns at initialisation besides the field registry.
#[derive(Clone, Debug)]
pub struct InitCx {
    /// This end's role.
    pub role: Role,
    /// This layer's keys, from the session's handshake ([`crate::session`]): the connection
    /// derives its own pair for every layer of the stack ([`DirectionKeys`]), so two layers
    /// that encrypt never share a key. `None` when the connection has no keys.
    pub session: Option<DirectionKeys>,
    /// Largest application message the connection accepts.
    pub max_message: usize,
    /// The connection's path size, as this layer sees it: the layer that searches for it
    /// sets it, the layer that cuts messages reads it ([`crate::plpmtu`]).
    pub path: PathMtu,
}

/// Two keys, one per direction: a session's from its handshake, or one layer's, derived from
/// them. Only the crate makes them (a handshake, [`crate::Config::pair`]); a layer of your
/// own reads its pair in [`Layer::init`] ([`InitCx::session`]).
#[derive(Clone, PartialEq, Eq)]
pub struct DirectionKeys {
    initiator_to_responder: [u8; 32],
    responder_to_initiator: [u8; 32],
}

impl DirectionKeys {
    /// Keys from their bytes (a handshake's split).
    pub(crate) fn new(
        initiator_to_responder: [u8; 32],
        responder_to_initiator: [u8; 32],
    ) -> DirectionKeys {
        DirectionKeys {
            initiator_to_responder,
            responder_to_initiator,
        }
    }

    /// Key of the initiator-to-responder direction.
    pub fn initiator_to_responder(&self) -> &[u8; 32] {
        &self.initiator_to_responder
    }

    /// Key of the responder-to-initiator direction.
    pub fn responder_to_initiator(&self) -> &[u8; 32] {
        &self.responder_to_initiator
    }

    /// The keys of layer `index` of a stack keyed by these (both ends derive the same): each
    /// direction's key is HKDF-SHA256 of this one (no salt), info `"phyllo layer key"`
    /// followed by the index as 8 bytes little-endian.
    pub(crate) fn for_layer(&self, index: usize) -> DirectionKeys {
        use hkdf::Hkdf;
        use sha2::Sha256;
        let mut info = [0u8; 16 + 8];
        info[..16].copy_from_slice(b"phyllo layer key");
        info[16..].copy_from_slice(&(index as u64).to_le_bytes());
        let derive = |key: &[u8; 32]| {
            let mut out = [0u8; 32];
            // 32 bytes are always within HKDF-SHA256's limit of 255 * 32.
            let _ = Hkdf::<Sha256>::new(None, key).expand(&info, &mut out);
            out
        };
        DirectionKeys {
            initiator_to_responder: derive(&self.initiator_to_responder),
            responder_to_initiator: derive(&self.responder_to_initiator),
        }
    }
}

impl std::fmt::Debug for DirectionKeys {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("DirectionKeys(<hidden>)")
    }
}

/// Why a layer refused a packet. Counted per layer in the connection's statistics.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum DropReason {
    /// Shorter than the header area or than a layer's trailer.
    Truncated,
    /// A field holds a value the layer never sends.
    Malformed,
    /// The Internet checksum does not match.
    Checksum,
    /// AEAD authentication failed (tampered or wrong key).
    Auth,
    /// The replay window has seen this nonce, or it is too old.
    Replay,
    /// Outside the receive window.
    OutOfWindow,
    /// A duplicate of something already received.
    Duplicate,
    /// Larger than the configured maximum.
    TooLarge,
    /// Reassembly state was evicted to stay within its bound.
    Evicted,
    /// An acknowledgement that is malformed (ranges out of order, overlapping, empty),
    /// acknowledges what was never sent, or acknowledges what cannot have arrived yet
    /// (optimistic, to inflate the sender's window).
    BadAck,
}

impl fmt::Display for DropReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let s = match self {
            DropReason::Truncated => "truncated",
            DropReason::Malformed => "malformed",
            DropReason::Checksum => "checksum",
            DropReason::Auth => "auth",
            DropReason::Replay => "replay",
            DropReason::OutOfWindow => "out-of-window",
            DropReason::Duplicate => "duplicate",
            DropReason::TooLarge => "too-large",
            DropReason::Evicted => "evicted",
            DropReason::BadAck => "bad-ack",
        };
        f.write_str(s)
    }
}

/// The verdict of a pre-phase.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Verdict {
    /// Pass the message on (down when sending, up when delivering).
    Continue,
    /// Stop here: the layer takes the message in its post-phase ([`Handoff::Absorbed`]), to
    /// buffer, fragment, reassemble or reorder it.
    Absorb,
    /// Refuse the message; it is counted and freed.
    Drop(DropReason),
}

/// What a post-phase is handed.
#[derive(Debug)]
pub enum Handoff {
    /// The message passed this layer's pre-phase and went on. `copy` holds the copy the layer
    /// asked for with [`Packet::keep_copy`], taken as the message left this layer.
    Passed {
        /// The requested copy, if any.
        copy: Option<Msg>,
    },
    /// The layer's pre-phase absorbed the message; here it is.
    Absorbed(Msg),
}

/// A message being pre-processed: its header area and body.
pub struct Packet<'a> {
    pub(crate) msg: &'a mut Msg,
    pub(crate) layout: &'a Layout,
    pub(crate) order: ByteOrder,
    /// The order the header was written in (differs from `order` only for a delivery the
    /// accelerator converted from the peer's order).
    pub(crate) wire: ByteOrder,
    pub(crate) now: Time,
    pub(crate) layer: usize,
    pub(crate) pool: &'a mut Pool,
    pub(crate) kept: &'a mut Vec<(usize, Msg)>,
}

impl<'a> Packet<'a> {
    /// Read a field.
    #[inline(always)]
    pub fn get(&self, h: FieldHandle) -> u64 {
        let hl = self.layout.header_len().min(self.msg.len());
        self.layout
            .access(h)
            .read(&self.msg.data()[..hl], self.order)
    }

    /// Write a field (truncated to its width).
    #[inline(always)]
    pub fn set(&mut self, h: FieldHandle, v: u64) {
        let hl = self.layout.header_len().min(self.msg.len());
        self.layout
            .access(h)
            .write(&mut self.msg.data_mut()[..hl], self.order, v)
    }

    /// The header area.
    #[inline]
    pub fn header(&self) -> &[u8] {
        let hl = self.layout.header_len().min(self.msg.len());
        &self.msg.data()[..hl]
    }

    /// The body behind the header area.
    #[inline]
    pub fn body(&self) -> &[u8] {
        let hl = self.layout.header_len().min(self.msg.len());
        &self.msg.data()[hl..]
    }

    /// Header area and body, the body mutable (for in-place encryption).
    #[inline]
    pub fn split_mut(&mut self) -> (&[u8], &mut [u8]) {
        let hl = self.layout.header_len().min(self.msg.len());
        let (h, b) = self.msg.data_mut().split_at_mut(hl);
        (h, b)
    }

    /// The whole message, for trailers (`push_back`/`pop_back`).
    #[inline]
    pub fn msg_mut(&mut self) -> &mut Msg {
        self.msg
    }

    /// The layout in force.
    pub fn layout(&self) -> &Layout {
        self.layout
    }

    /// Now.
    #[inline]
    pub fn now(&self) -> Time {
        self.now
    }

    /// Index of the layer running (0 = top).
    #[inline]
    pub fn layer(&self) -> usize {
        self.layer
    }

    /// The byte order of the header.
    #[inline]
    pub fn order(&self) -> ByteOrder {
        self.order
    }

    /// The byte order the header was written in by its sender: [`Packet::order`], unless
    /// this is a delivery converted from a peer of the other order.
    #[inline]
    pub fn wire_order(&self) -> ByteOrder {
        self.wire
    }

    /// Ask for a copy of the message as it is now (header area and body) in this layer's
    /// post-phase ([`Handoff::Passed`]). Lower layers may still transform the message (e.g.
    /// encrypt it); the copy is taken before they do. Copying is not a state change.
    pub fn keep_copy(&mut self) {
        let copy = self.pool.alloc_copy(self.msg.data());
        self.kept.push((self.layer, copy));
    }
}

/// A read-only view of a header area, handed to post-phases.
#[derive(Clone, Copy)]
pub struct Hdr<'a> {
    pub(crate) bytes: &'a [u8],
    pub(crate) layout: &'a Layout,
    pub(crate) order: ByteOrder,
}

impl<'a> Hdr<'a> {
    /// A view of `bytes` under `layout`, in `order`.
    pub fn new(bytes: &'a [u8], layout: &'a Layout, order: ByteOrder) -> Hdr<'a> {
        Hdr {
            bytes,
            layout,
            order,
        }
    }

    /// Read a field.
    #[inline]
    pub fn get(&self, h: FieldHandle) -> u64 {
        self.layout.access(h).read(self.bytes, self.order)
    }

    /// The raw header bytes.
    pub fn bytes(&self) -> &[u8] {
        self.bytes
    }
}

/// A predicted header being written by the layers (seed 004 §3.2): each layer writes the
/// protocol-specific (and, for sending, gossip) fields it expects on the next message.
pub struct Predict<'a> {
    /// The whole header area; the prediction is its first `layout.header_len()` bytes.
    pub(crate) bytes: &'a mut [u8; MAX_HEADER],
    pub(crate) layout: &'a Layout,
}

impl<'a> Predict<'a> {
    /// Write a predicted field.
    #[inline(always)]
    pub fn set(&mut self, h: FieldHandle, v: u64) {
        match self.layout.put(h) {
            Some(p) => p.put(self.bytes, v),
            None => self.set_slow(h, v),
        }
    }

    /// [`set`](Self::set) of a field without an eight-byte window.
    #[cold]
    #[inline(never)]
    fn set_slow(&mut self, h: FieldHandle, v: u64) {
        let hl = self.layout.header_len();
        self.layout
            .access(h)
            .write(&mut self.bytes[..hl], self.layout.order(), v)
    }
}

/// A copy of a header area on the stack, so post-phases can read it after the message moved.
#[derive(Clone, Copy)]
pub(crate) struct HeaderCopy {
    pub(crate) bytes: [u8; MAX_HEADER],
    pub(crate) len: usize,
}

impl HeaderCopy {
    /// A header area of `len` zero bytes.
    pub(crate) const fn zeroed(len: usize) -> HeaderCopy {
        HeaderCopy {
            bytes: [0; MAX_HEADER],
            len,
        }
    }

    /// A copy of the first `header_len` bytes of `msg` (fewer if it is shorter).
    #[inline]
    pub(crate) fn of(msg: &Msg, header_len: usize) -> HeaderCopy {
        let mut c = HeaderCopy::zeroed(0);
        c.set(&msg.data()[..header_len.min(msg.len())]);
        c
    }

    /// Overwrite with a copy of `header` (at most [`MAX_HEADER`] bytes of it).
    #[inline(always)]
    pub(crate) fn set(&mut self, header: &[u8]) {
        let len = header.len().min(MAX_HEADER);
        crate::msg::copy_bytes(&mut self.bytes[..len], &header[..len]);
        self.len = len;
    }

    #[inline]
    pub(crate) fn view<'a>(&'a self, layout: &'a Layout, order: ByteOrder) -> Hdr<'a> {
        Hdr::new(&self.bytes[..self.len], layout, order)
    }
}

/// Where an originated message enters the stack.
#[derive(Debug)]
pub(crate) enum Origin {
    /// Pre-send from this layer index down.
    Down(usize),
    /// Pre-deliver from this layer index up.
    Up(usize),
}

/// Per-layer counters.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct LayerCounters {
    /// Drops by reason.
    pub drops: Vec<(DropReason, u64)>,
    /// Named events a layer counts ([`Cx::count_event`]), and high-water marks it records
    /// ([`Cx::record_peak`]): the `window` layer's retransmissions by cause, for instance.
    pub events: Vec<(&'static str, u64)>,
}

impl LayerCounters {
    pub(crate) fn count(&mut self, r: DropReason) {
        match self.drops.iter_mut().find(|(d, _)| *d == r) {
            Some((_, n)) => *n += 1,
            None => self.drops.push((r, 1)),
        }
    }

    fn event(&mut self, name: &'static str) -> &mut u64 {
        let i = match self.events.iter().position(|(n, _)| *n == name) {
            Some(i) => i,
            None => {
                self.events.push((name, 0));
                self.events.len() - 1
            }
        };
        &mut self.events[i].1
    }

    /// The count (or peak) recorded under `name`, zero if never recorded.
    pub fn event_count(&self, name: &str) -> u64 {
        self.events
            .iter()
            .find(|(n, _)| *n == name)
            .map_or(0, |(_, v)| *v)
    }

    /// Drops for `r`.
    pub fn drops(&self, r: DropReason) -> u64 {
        self.drops
            .iter()
            .find(|(d, _)| *d == r)
            .map_or(0, |(_, n)| *n)
    }
}

/// Datagrams refused since the connection was built, counted where they are refused, so that
/// a connection tells what one datagram did ([`Received`](crate::Received)) from two numbers.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct Refusals {
    /// Every refusal of received input.
    pub(crate) all: u64,
    /// Those before the keyed layer passed the datagram: at that layer or below it, or
    /// before the stack (truncated, not admitted). Every refusal, without a keyed layer.
    pub(crate) unauthenticated: u64,
    /// The keyed layer's index (the lowest layer that needs keys), if the stack has one.
    pub(crate) keyed: Option<usize>,
    /// Where the latest refusal happened.
    pub(crate) last: Option<RefusedAt>,
}

/// Where received input was refused.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum RefusedAt {
    /// By layer `.0`, for `.1`.
    Layer(usize, DropReason),
    /// Before the stack: shorter than the header area, or not admitted by the accelerator.
    Before,
    /// Above the stack, after every layer passed it: a packed body whose lengths lie.
    Above,
}

impl Refusals {
    /// Count a refusal `at`.
    #[inline(always)]
    pub(crate) fn count(&mut self, at: RefusedAt) {
        self.all += 1;
        let unauthenticated = match (at, self.keyed) {
            (_, None) | (RefusedAt::Before, _) => true,
            (RefusedAt::Layer(i, _), Some(k)) => i >= k,
            (RefusedAt::Above, Some(_)) => false,
        };
        if unauthenticated {
            self.unauthenticated += 1;
        }
        self.last = Some(at);
    }
}

/// What a post-phase or timer handler may do: allocate, originate messages, set its timer,
/// count drops.
pub struct Cx<'a> {
    pub(crate) now: Time,
    pub(crate) layer: usize,
    pub(crate) layout: &'a Layout,
    pub(crate) pool: &'a mut Pool,
    pub(crate) queue: &'a mut std::collections::VecDeque<(Origin, Msg)>,
    pub(crate) timer: &'a mut Option<Time>,
    pub(crate) counters: &'a mut LayerCounters,
    pub(crate) refusals: &'a mut Refusals,
    pub(crate) disable: &'a mut [u32; 3],
    pub(crate) template: &'a [u8],
}

impl<'a> Cx<'a> {
    /// Now.
    #[inline]
    pub fn now(&self) -> Time {
        self.now
    }

    /// An empty message from the pool.
    #[inline]
    pub fn alloc(&mut self) -> Msg {
        self.pool.alloc()
    }

    /// A copy of `m` from the pool. A retransmission copy the accelerator kept with the body
    /// transforms below still on ([`Layer::resends_copy_only`]) gives a copy that is the same:
    /// sent down, it has them taken back first.
    #[inline]
    pub fn copy(&mut self, m: &Msg) -> Msg {
        let mut c = self.pool.alloc_copy(m.data());
        c.set_transformed(m.transformed());
        c
    }

    /// A message with a zeroed header area and an empty body (for acks and the like).
    pub fn new_packet(&mut self) -> Msg {
        let mut m = self.pool.alloc();
        let h = m.push_front(self.layout.header_len());
        // The accelerator's own fields (connection identification, gossip) come pre-set.
        h.copy_from_slice(&self.template[..h.len()]);
        m
    }

    /// Give a message back to the pool.
    #[inline]
    pub fn free(&mut self, m: Msg) {
        self.pool.free(m)
    }

    /// Bytes of header area in front of every body.
    #[inline]
    pub fn header_len(&self) -> usize {
        self.layout.header_len()
    }

    /// Read a field of message `m` (which starts with a header area).
    #[inline]
    pub fn get(&self, m: &Msg, h: FieldHandle) -> u64 {
        let hl = self.layout.header_len().min(m.len());
        self.layout
            .access(h)
            .read(&m.data()[..hl], self.layout.order())
    }

    /// Write a field of message `m` (which starts with a header area).
    #[inline]
    pub fn set(&self, m: &mut Msg, h: FieldHandle, v: u64) {
        let hl = self.layout.header_len().min(m.len());
        self.layout
            .access(h)
            .write(&mut m.data_mut()[..hl], self.layout.order(), v)
    }

    /// Send `m` (header area + body) through the layers below this one.
    #[inline]
    pub fn send_down(&mut self, m: Msg) {
        self.queue.push_back((Origin::Down(self.layer + 1), m));
    }

    /// Deliver `m` (header area + body) through the layers above this one.
    #[inline]
    pub fn deliver_up(&mut self, m: Msg) {
        self.queue.push_back((Origin::Up(self.layer), m));
    }

    /// Ask for [`Layer::on_timer`] at `at` (replaces this layer's previous request).
    #[inline]
    pub fn set_timer(&mut self, at: Time) {
        *self.timer = Some(at);
    }

    /// Cancel this layer's timer.
    #[inline]
    pub fn clear_timer(&mut self) {
        *self.timer = None;
    }

    /// This layer's pending timer.
    pub fn timer(&self) -> Option<Time> {
        *self.timer
    }

    /// Disable the predicted send header (seed 004 §3.2), e.g. while the send window is full:
    /// the accelerator then queues messages in its backlog instead of taking the fast path.
    /// Every raise must be matched by a [`lower_send_disable`](Self::lower_send_disable).
    pub fn raise_send_disable(&mut self) {
        self.disable[0] += 1;
    }

    /// Undo one [`raise_send_disable`](Self::raise_send_disable).
    pub fn lower_send_disable(&mut self) {
        self.disable[0] = self.disable[0].saturating_sub(1);
    }

    /// Send the next messages the layered way, through every layer's pre-send, e.g. one
    /// this layer will hold back: the accelerator sends them on its layered path
    /// ([`Miss::Diverted`](crate::accel::Miss::Diverted)) instead of predicting their
    /// headers. Unlike [`raise_send_disable`](Self::raise_send_disable), they do not wait
    /// (unless a layer also disabled the send header). Every raise must be matched by a
    /// [`lower_send_divert`](Self::lower_send_divert).
    pub fn raise_send_divert(&mut self) {
        self.disable[0] += 1;
        self.disable[2] += 1;
    }

    /// Undo one [`raise_send_divert`](Self::raise_send_divert).
    pub fn lower_send_divert(&mut self) {
        if self.disable[2] > 0 {
            self.disable[2] -= 1;
            self.disable[0] = self.disable[0].saturating_sub(1);
        }
    }

    /// Disable the predicted delivery header: every delivery takes the layered path.
    pub fn raise_deliver_disable(&mut self) {
        self.disable[1] += 1;
    }

    /// Undo one [`raise_deliver_disable`](Self::raise_deliver_disable).
    pub fn lower_deliver_disable(&mut self) {
        self.disable[1] = self.disable[1].saturating_sub(1);
    }

    /// Count a drop decided in a post-phase (of received input: a duplicate, an evicted
    /// reassembly).
    pub fn count_drop(&mut self, r: DropReason) {
        self.counters.count(r);
        self.refusals.count(RefusedAt::Layer(self.layer, r));
    }

    /// Add `n` to the event counter `name` of this layer ([`LayerCounters::events`]).
    pub fn count_event(&mut self, name: &'static str, n: u64) {
        *self.counters.event(name) += n;
    }

    /// Raise the high-water mark `name` of this layer to `value` if it is higher.
    pub fn record_peak(&mut self, name: &'static str, value: u64) {
        let v = self.counters.event(name);
        *v = (*v).max(value);
    }
}

/// A protocol layer with canonical processing (seed 004 §3.1).
///
/// Index 0 of a stack is the top (next to the application). Pre-phases take `&self`: they may
/// build or check the header and transform the message (encrypt, decrypt), but never change
/// the layer's state. Post-phases take `&mut self` and see a copy of the header area.
pub trait Layer: Send {
    /// Short name, as in a spec string.
    fn name(&self) -> &'static str;

    /// Declare header fields (seed 004's `add_field`) and read the configuration.
    fn init(&mut self, fields: &mut FieldRegistry, cx: &InitCx);

    /// Whether one more application message can be accepted now (bounded backlogs).
    fn can_accept(&self) -> bool {
        true
    }

    /// Pre-sending: build this layer's header fields.
    fn pre_send(&self, pkt: &mut Packet<'_>) -> Verdict;

    /// Post-sending: update the state after the message went on.
    fn post_send(&mut self, hdr: &Hdr<'_>, handoff: Handoff, cx: &mut Cx<'_>);

    /// Pre-delivery: check this layer's header fields.
    fn pre_deliver(&self, pkt: &mut Packet<'_>) -> Verdict;

    /// Post-delivery: update the state after the message went up.
    fn post_deliver(&mut self, hdr: &Hdr<'_>, handoff: Handoff, cx: &mut Cx<'_>);

    /// This layer's timer expired.
    fn on_timer(&mut self, cx: &mut Cx<'_>) {
        let _ = cx;
    }

    /// Whether the layer still has work outstanding (unacknowledged data, buffered messages).
    fn busy(&self) -> bool {
        false
    }

    /// Whether data this layer sent still waits for the peer's acknowledgement (or waits to
    /// be sent): a session counts what the application sent as delivered only when no layer
    /// holds any. Acknowledgements this end owes do not count. By default, [`busy`](Self::busy).
    fn holds_unacked(&self) -> bool {
        self.busy()
    }

    /// Bytes this layer appends to every message's body on the way down (an authentication
    /// tag): what the path's datagram size must leave room for above it
    /// ([`crate::plpmtu::PathMtu::body_limit`]). 0 by default.
    fn trailer_len(&self) -> usize {
        0
    }

    /// A reliable layer's progress: the messages it took from the layer above so far, and
    /// how many of them, from the first, the peer acknowledged. A session confirms what the
    /// application sent from it while more is in flight ([`crate::Connection::delivery_mark`]),
    /// instead of waiting for a moment when nothing is; the messages must be acknowledged in
    /// the order they were taken. `None` (the default): the layer does not number them.
    /// Whether it is `None` must not change once the layer is initialised: a connection asks
    /// that once ([`crate::Connection::numbers_messages`]).
    fn acked_prefix(&self) -> Option<AckedPrefix> {
        None
    }

    /// Give back memory held for traffic that is not there (empty queues' capacity, slots
    /// for out-of-order data): a session idle for a while calls it, so that thousands of idle
    /// sessions cost little. The next burst allocates again.
    fn shrink(&mut self) {}

    /// Append this layer's instructions to the accelerator's send filter (seed 004 §3.3):
    /// fill message-specific fields, or reject (non-zero) what the fast path cannot send.
    fn send_filter(&self, seg: &mut Segment) {
        let _ = seg;
    }

    /// Append this layer's instructions to the delivery filter: check message-specific
    /// fields; reject (non-zero) what must take the layered path.
    fn deliver_filter(&self, seg: &mut Segment) {
        let _ = seg;
    }

    /// Write the fields this layer expects on the next message it sends (seed 004 §3.2).
    fn predict_send(&self, p: &mut Predict<'_>) {
        let _ = p;
    }

    /// Write the protocol-specific fields this layer expects on the next delivery.
    fn predict_deliver(&self, p: &mut Predict<'_>) {
        let _ = p;
    }

    /// Write into the send prediction `p` the gossip fields (an acknowledgement) as
    /// [`predict_send`](Self::predict_send) will write them once the delivery this layer
    /// predicts ([`predict_deliver`](Self::predict_deliver)) has been post-processed. The
    /// accelerator keeps this second send prediction beside the first: a send while the fast
    /// path's delivery still waits for its post-processing (a reply) carries it, as the
    /// layered path's send would (it runs `post_deliver` first). So a reply does not wait for
    /// the delivery's post-processing, and still acknowledges it.
    ///
    /// Gossip may be out of date (seed 004 §2.1), never ahead: write only what holds once
    /// `post_deliver` has run. The default writes nothing; a layer that writes something says
    /// so with [`gossips`](Self::gossips).
    fn predict_gossip(&self, p: &mut Predict<'_>) {
        let _ = p;
    }

    /// Whether [`predict_gossip`](Self::predict_gossip) writes anything: the accelerator
    /// calls only the layers that say so.
    fn gossips(&self) -> bool {
        false
    }

    /// Whether this layer tells the accelerator everything its pre-phases would do to a
    /// usual message: its protocol-specific and gossip fields through
    /// [`predict_send`](Self::predict_send) and [`predict_deliver`](Self::predict_deliver),
    /// its message-specific fields and its refusals through the packet filters
    /// ([`send_filter`](Self::send_filter), [`deliver_filter`](Self::deliver_filter)).
    ///
    /// Only then may the fast path skip its pre-phases. The default is `false`: the fast path
    /// runs this layer's `pre_send` and `pre_deliver` on every message (its fields are left
    /// out of the delivery prediction), so a layer that says nothing is never silently
    /// wrong, only slower; a refusal there takes the layered path, counted as
    /// [`Miss::Unpredicted`](crate::accel::Miss::Unpredicted). The fast path checks what it
    /// predicted against the layered pre-phases ([`Config::fast_path_check`](crate::Config)):
    /// in debug builds every message, panicking with the name of a layer that claims to
    /// predict and does not; in release builds a sample, after which a layer caught
    /// mispredicting sends its direction's messages on the layered path for the rest of the
    /// connection ([`Miss::Distrusted`](crate::accel::Miss::Distrusted)). A lie in a message
    /// the sample skipped goes out as the fast path built it.
    fn predicts(&self) -> bool {
        false
    }

    /// Whether the pre-phases transform the body (encryption): the accelerator's fast path
    /// then still runs them, since no filter can. They write and check this layer's fields
    /// there too, so such a layer need not predict them: the delivery prediction's
    /// comparison leaves them out.
    fn transforms_body(&self) -> bool {
        false
    }

    /// Whether [`undo_send`](Self::undo_send) takes back this layer's body transform on any
    /// message it sent. Then a layer above that wants a retransmission copy and only sends it
    /// again ([`resends_copy_only`](Self::resends_copy_only)) is given the sent datagram
    /// itself, in deferred post-processing, instead of a copy taken before the transform on
    /// the fast path's critical path (seed 004 §3.1's deferred copy); the transform is taken
    /// back only if the copy is sent again. Asked once, when the accelerator is built (after
    /// [`init`](Self::init)); `false` by default.
    fn can_undo_send(&self) -> bool {
        false
    }

    /// Take back this layer's pre-send body transform on a retransmission copy of a message it
    /// sent earlier, now sent again: `pkt` is the header area as the message left this layer
    /// (its fields as this layer's pre-send wrote them) and a prefix of the transformed body,
    /// without the trailers (the body as long as the layer holding the copy sent it);
    /// afterwards that prefix is what this layer's pre-send received. So only a transform that
    /// can take back a prefix of its output (a stream cipher) says it
    /// [`can_undo_send`](Self::can_undo_send). Called any time after the post-send (the
    /// layer's state has moved on: a cipher finds the nonce in its header field), only if the
    /// layer says it can, and it must then succeed: the copy is the only one kept.
    fn undo_send(&self, pkt: &mut Packet<'_>) {
        let _ = pkt;
    }

    /// Whether the layer needs keys ([`InitCx::session`]); a connection without them refuses
    /// to build ([`crate::conn::BuildError::NoKeys`]).
    fn needs_keys(&self) -> bool {
        false
    }

    /// Whether post-send wants a copy of the message as it left this layer (retransmission):
    /// the fast path, which skips pre-send, takes it for the layer.
    fn wants_copy(&self) -> bool {
        false
    }

    /// Whether this layer does nothing with its retransmission copy
    /// ([`wants_copy`](Self::wants_copy)) but free it or send it again: [`Cx::copy`] it, set
    /// header fields of that with [`Cx::set`], and [`Cx::send_down`] the result. It never
    /// reads the body, nor counts on its bytes. The fast path may then hand it, as the copy,
    /// the datagram that left with the body transforms of the layers below still on (their
    /// trailers cut off, so it is as long as what this layer sent); sent down again, the
    /// core takes them back first ([`undo_send`](Self::undo_send)). `false` by default: the
    /// copy is the message as it left this layer.
    fn resends_copy_only(&self) -> bool {
        false
    }

    /// A layer that cuts messages into fragments: the body bytes a full fragment carries on
    /// the current path. A message of a whole number of them leaves in datagrams of one size,
    /// which a socket with segmentation offload sends in long runs (a shorter datagram ends a
    /// run). `None` for every other layer.
    fn fragment_payload(&self) -> Option<usize> {
        None
    }
}

impl<L: Layer + ?Sized> Layer for Box<L> {
    fn name(&self) -> &'static str {
        (**self).name()
    }
    fn init(&mut self, fields: &mut FieldRegistry, cx: &InitCx) {
        (**self).init(fields, cx)
    }
    fn can_accept(&self) -> bool {
        (**self).can_accept()
    }
    #[inline]
    fn pre_send(&self, pkt: &mut Packet<'_>) -> Verdict {
        (**self).pre_send(pkt)
    }
    #[inline]
    fn post_send(&mut self, hdr: &Hdr<'_>, handoff: Handoff, cx: &mut Cx<'_>) {
        (**self).post_send(hdr, handoff, cx)
    }
    #[inline]
    fn pre_deliver(&self, pkt: &mut Packet<'_>) -> Verdict {
        (**self).pre_deliver(pkt)
    }
    #[inline]
    fn post_deliver(&mut self, hdr: &Hdr<'_>, handoff: Handoff, cx: &mut Cx<'_>) {
        (**self).post_deliver(hdr, handoff, cx)
    }
    fn on_timer(&mut self, cx: &mut Cx<'_>) {
        (**self).on_timer(cx)
    }
    fn busy(&self) -> bool {
        (**self).busy()
    }
    fn holds_unacked(&self) -> bool {
        (**self).holds_unacked()
    }
    fn acked_prefix(&self) -> Option<AckedPrefix> {
        (**self).acked_prefix()
    }
    fn trailer_len(&self) -> usize {
        (**self).trailer_len()
    }
    fn shrink(&mut self) {
        (**self).shrink()
    }
    fn send_filter(&self, seg: &mut Segment) {
        (**self).send_filter(seg)
    }
    fn deliver_filter(&self, seg: &mut Segment) {
        (**self).deliver_filter(seg)
    }
    fn predict_send(&self, p: &mut Predict<'_>) {
        (**self).predict_send(p)
    }
    fn predict_deliver(&self, p: &mut Predict<'_>) {
        (**self).predict_deliver(p)
    }
    fn predict_gossip(&self, p: &mut Predict<'_>) {
        (**self).predict_gossip(p)
    }
    fn gossips(&self) -> bool {
        (**self).gossips()
    }
    fn predicts(&self) -> bool {
        (**self).predicts()
    }
    fn transforms_body(&self) -> bool {
        (**self).transforms_body()
    }
    fn can_undo_send(&self) -> bool {
        (**self).can_undo_send()
    }
    fn undo_send(&self, pkt: &mut Packet<'_>) {
        (**self).undo_send(pkt)
    }
    fn needs_keys(&self) -> bool {
        (**self).needs_keys()
    }
    fn wants_copy(&self) -> bool {
        (**self).wants_copy()
    }
    fn resends_copy_only(&self) -> bool {
        (**self).resends_copy_only()
    }
    fn fragment_payload(&self) -> Option<usize> {
        (**self).fragment_payload()
    }
}

#[cfg(test)]
mod tests {
    use super::DirectionKeys;

    #[test]
    fn every_layer_index_derives_keys_of_its_own() {
        let k = DirectionKeys::new([1; 32], [2; 32]);
        let layers: Vec<DirectionKeys> = (0..8).map(|i| k.for_layer(i)).collect();
        for (i, a) in layers.iter().enumerate() {
            // The same for both ends (a function of the keys and the index alone).
            assert!(*a == k.for_layer(i));
            assert_ne!(a.initiator_to_responder(), a.responder_to_initiator());
            assert_ne!(a.initiator_to_responder(), k.initiator_to_responder());
            assert_ne!(a.responder_to_initiator(), k.responder_to_initiator());
            for b in &layers[i + 1..] {
                assert_ne!(a.initiator_to_responder(), b.initiator_to_responder());
                assert_ne!(a.responder_to_initiator(), b.responder_to_initiator());
            }
        }
        // Other session keys, other layer keys.
        let other = DirectionKeys::new([3; 32], [2; 32]).for_layer(0);
        assert_ne!(
            other.initiator_to_responder(),
            layers[0].initiator_to_responder()
        );
    }
}
