//! `window`: a sliding-window protocol — reliable, FIFO, exactly-once delivery — with
//! selective acknowledgements, RACK loss detection, tail-loss probes, congestion control and
//! pacing.
//!
//! The basic sliding window of van Renesse, "Masking the Overhead of Protocol Layering" (seed
//! 004 §5), in canonical form, grown into a transport for long, lossy and shared paths. Fields:
//! `kind` (data or ack) and `seq` are protocol-specific (they depend only on state, so the
//! next ones are predictable); `ack`, the cumulative acknowledgement (the next sequence number
//! expected from the peer), is gossip, piggybacked on every data message. Data datagrams carry
//! nothing else, so the accelerator still predicts them; standalone acknowledgements carry a
//! body ([`super::sack`]): selective-acknowledgement ranges, the receiver's buffer and its
//! acknowledgement delay.
//!
//! **Two ways to limit what is in flight.** [`Window::new`]`(n)` is the seed's window: at most
//! `n` messages in flight, no congestion control, no pacing. [`Window::with_controller`] (the
//! spec `window`, `window(cubic)`, `window(newreno)`, `window(bbr)`) lets a
//! [`Controller`] set the bytes in flight and the pacing rate, within the receiver's
//! advertised buffer and this end's ceiling ([`WindowConfig::ceiling`], 16 MiB by default).
//!
//! **Loss recovery resends only what is lost** (RFC 8985's RACK with RFC 9002's thresholds):
//! an acknowledgement marks messages delivered, cumulatively or by range. A message not
//! delivered is declared lost once a message sent after it was delivered and either three
//! later messages were delivered (order) or a round trip plus a quarter of the smallest round
//! trip passed since it was sent (time; the quarter absorbs jitter). Lost messages are resent
//! first, within the window and the pacing. When acknowledgements stop, a probe timeout
//! (smoothed round trip + 4 × its deviation + the peer's acknowledgement delay, doubling with
//! every probe) sends one probe — new data if any waits, else the newest unacknowledged
//! message — so a tail loss or a blackout is detected without resending everything.
//! Retransmissions are counted by cause in the layer's events: `retransmit.time`,
//! `retransmit.order`, `retransmit.probe`.
//!
//! **Bad acknowledgements are refused and counted** ([`DropReason::BadAck`]; an acknowledgement
//! piggybacked on data is ignored and counted as the event `ack.beyond_sent` or
//! `ack.optimistic`): malformed or overlapping ranges, ranges or a cumulative acknowledgement
//! beyond what was sent, and acknowledgements of a message that was never sent. For the last,
//! a sender in bulk holds back about one new message in 2048 for a round trip (numbered, not
//! sent), as QUIC skips packet numbers: a peer acknowledging ahead of delivery, to inflate the
//! window, acknowledges it and is caught. A refused acknowledgement changes no state. A peer's
//! advertised buffer is only ever a limit below this end's ceiling.
//!
//! **Sender memory is bounded** the same way: the copies kept for retransmission span at
//! most the ceiling, whatever buffer the peer advertises (the peak is the event
//! `snd.span_peak`).
//!
//! **Receiver memory is bounded**: messages above a gap wait in a buffer of at most the
//! ceiling in bytes (beyond it they are dropped, counted `OutOfWindow`); the peak is recorded
//! as the event `rcv.buffered_peak`. Under a controller the receiver acknowledges every second
//! message (the seed's window: half a window) when the layer's timer next runs, which is at
//! once: a driver runs timers after handing over what one receive brought, so one
//! acknowledgement covers a whole receive batch, as TCP acknowledges a GRO batch once, and a
//! reply sent in the same turn carries it instead. A gap or duplicate is acknowledged at
//! once, and anything else within `ack_delay` unless data going the other way carries the
//! acknowledgement first.
//!
//! **The path's datagram size** ([`crate::plpmtu`]): under a controller the layer searches
//! for the largest datagram the path carries, from 1200 bytes up to
//! [`WindowConfig::max_datagram`], with probes of two more kinds: a padded probe (never resent,
//! outside the window and the pacing) and its answer. The size it confirms is what the layers
//! above cut messages to.
//!
//! Sequence numbers are 20 bits on the wire (the seed's window had 16; the compact header grows
//! by one byte, to 16 bytes for `frag:window:seal`), 64 bits in the state; with at most 2^18
//! messages in flight (262 144: 16 MiB of 64-byte messages) the receiver places every wire
//! value unambiguously.

use super::sack::{AckFrame, MAX_OFFSET, MAX_RANGES};
use crate::congestion::{Algorithm, Controller, Pacer, RttEstimator};
use crate::field::{FieldClass, FieldHandle};
use crate::fixed::decl::{declare, FieldDecl, FixedFields, Slots};
use crate::layer::{
    AckedPrefix, Cx, DropReason, Handoff, Hdr, InitCx, Layer, Packet, Predict, Verdict,
};
use crate::layout::FieldRegistry;
use crate::msg::Msg;
use crate::outline::cold;
use crate::plpmtu::{PathMtu, Search, BASE_PLPMTU, MAX_PLPMTU, MAX_PROBES};
use crate::time::Time;
use std::collections::{BTreeMap, VecDeque};
use std::time::Duration;

const KIND_DATA: u64 = 0;
const KIND_ACK: u64 = 1;
/// A path-size probe: padding after a 4-byte probe id, never resent.
const KIND_PROBE: u64 = 2;
/// The answer to a probe: its id.
const KIND_PROBE_ACK: u64 = 3;
/// Bytes of a probe's id.
const PROBE_ID: usize = 4;
/// The backlog's room before the path-size search's first answer ([`Window`]'s
/// `can_accept`).
const UNSETTLED_BACKLOG: usize = 64;
const SEQ_BITS: u8 = 20;
const SEQ_MASK: u64 = (1 << SEQ_BITS) - 1;

/// Messages in flight at most under a controller (a quarter of the sequence space).
pub const MAX_IN_FLIGHT: usize = MAX_OFFSET as usize;

/// The default ceiling of bytes in flight and of the receiver's buffer: 16 MiB.
pub const DEFAULT_CEILING: u64 = 16 << 20;

/// One new message in this many (in bulk) is held back a round trip ([`Window`]'s check for
/// optimistic acknowledgements).
const SKIP_ONE_IN: u64 = 2048;

/// Transmissions after a held message before it may leave.
const HOLD_FOR: u64 = 16;

/// Later messages delivered before an earlier one counts as lost (RFC 9002 §6.1.1).
const PACKET_THRESHOLD: u64 = 3;

/// The largest acknowledgement delay a peer's report is believed up to (RFC 9000's default
/// `max_ack_delay`).
const MAX_ACK_DELAY: Duration = Duration::from_millis(25);

/// Configuration of the window layer.
#[derive(Clone, Debug)]
pub struct WindowConfig {
    /// Messages in flight at most: the whole limit without a controller, a cap beside the
    /// controller's window with one.
    pub size: usize,
    /// Application messages waiting for room at most (beyond it `send` says WouldBlock).
    pub backlog: usize,
    /// The probe timeout before any round trip was measured.
    pub rto: Duration,
    /// Smallest probe timeout.
    pub min_rto: Duration,
    /// Largest probe timeout (raised to three smoothed round trips on longer paths).
    pub max_rto: Duration,
    /// How long an ack may wait for data to ride on.
    pub ack_delay: Duration,
    /// The name the layer goes by (`window`; the latency stacks' transports call it `tcp` or
    /// `chan`).
    pub name: &'static str,
    /// A transport header of ports and a checksum (the latency experiments' TCP-like stack).
    pub transport: Option<Ports>,
    /// The congestion controller; `None`: the seed's fixed window of `size` messages.
    pub controller: Option<Box<dyn Controller>>,
    /// Bytes in flight at most, whatever the controller and the peer say; also the receiver's
    /// buffer for messages above a gap, advertised to the peer.
    pub ceiling: u64,
    /// The largest datagram the path-size search tries ([`crate::plpmtu`]), bytes of UDP
    /// payload; 0: no search (the seed's window), datagrams as large as the layers above
    /// make them.
    pub max_datagram: usize,
}

/// A transport header's ports: this end's and the peer's. With them the window stamps every
/// message it sends — data, retransmissions, acknowledgements — with both ports and a 16-bit
/// Internet checksum over the ports, kind, sequence number and body, and refuses deliveries
/// whose ports or checksum do not match. The cumulative ack is left out of the checksum: it is
/// gossip that a retransmission refreshes, and a lower layer's frame check covers it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Ports {
    /// The port this end sends from (and the peer sends to).
    pub local: u16,
    /// The port the peer sends from.
    pub peer: u16,
}

impl WindowConfig {
    /// The seed's window: `size` messages in flight, no congestion control.
    pub fn new(size: usize) -> WindowConfig {
        WindowConfig {
            size: size.clamp(1, 1024),
            backlog: 4096,
            rto: Duration::from_millis(4),
            min_rto: Duration::from_millis(1),
            max_rto: Duration::from_millis(500),
            ack_delay: Duration::from_micros(200),
            name: "window",
            transport: None,
            controller: None,
            ceiling: DEFAULT_CEILING,
            max_datagram: 0,
        }
    }

    /// A window whose in-flight limit comes from `controller`, up to [`DEFAULT_CEILING`],
    /// which searches for the path's datagram size up to [`MAX_PLPMTU`]. The first probe
    /// timeout, before a round trip is measured, is 100 ms (a path may be long).
    pub fn with_controller(controller: Box<dyn Controller>) -> WindowConfig {
        WindowConfig {
            size: MAX_IN_FLIGHT,
            rto: Duration::from_millis(100),
            controller: Some(controller),
            max_datagram: MAX_PLPMTU,
            ..WindowConfig::new(1)
        }
    }
}

#[derive(Clone, Copy, Debug)]
struct Fields {
    kind: FieldHandle,
    seq: FieldHandle,
    ack: FieldHandle,
    /// The transport header, if the window has one.
    transport: Option<Transport>,
}

/// A transport header's fields and this end's ports.
#[derive(Clone, Copy, Debug)]
struct Transport {
    sport: FieldHandle,
    dport: FieldHandle,
    sum: FieldHandle,
    ports: Ports,
}

impl Transport {
    /// The transport fields of a message this end sends, each with its value.
    fn stamp(&self, kind: u64, seq: u64, body: &[u8]) -> [(FieldHandle, u64); 3] {
        let (local, peer) = (u64::from(self.ports.local), u64::from(self.ports.peer));
        [
            (self.sport, local),
            (self.dport, peer),
            (self.sum, transport_sum(local, peer, kind, seq, body)),
        ]
    }
}

/// The transport checksum over the ports, kind, sequence number (as on the wire) and body.
fn transport_sum(sport: u64, dport: u64, kind: u64, seq: u64, body: &[u8]) -> u64 {
    let head = sport + dport + kind + (seq & SEQ_MASK);
    u64::from(!crate::inet::fold16(head + crate::inet::ones_sum_le(body)))
}

/// Why a message was declared lost (and resent).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Cause {
    /// RACK's time threshold.
    Time,
    /// Three later messages were delivered.
    Order,
}

impl Cause {
    fn event(self) -> &'static str {
        match self {
            Cause::Time => "retransmit.time",
            Cause::Order => "retransmit.order",
        }
    }
}

/// A message sent and not yet cumulatively acknowledged.
#[derive(Debug)]
struct Sent {
    /// The retransmission copy (header area and body); `None` once selectively acknowledged.
    msg: Option<Msg>,
    len: u64,
    /// The latest transmission: when, and its place in the order of all transmissions
    /// (RACK's "sent before", which send times alone cannot tell at one instant).
    xmit: Time,
    order: u64,
    retransmitted: bool,
    sacked: bool,
    /// Declared lost and not resent since.
    lost: Option<Cause>,
    /// Held back on purpose and not yet sent (the check for optimistic acknowledgements).
    held: bool,
    /// Sent while the sender had less in flight than the window allowed.
    app_limited: bool,
}

/// The window layer. `O` turns on outlining of its rare paths ([`crate::outline`]); the
/// ordinary layer is `Window` (`O = false`).
#[derive(Debug)]
pub struct Window<const O: bool = false> {
    cfg: WindowConfig,
    f: Option<Fields>,
    cc: Option<Box<dyn Controller>>,
    // Sender.
    snd_una: u64,
    snd_next: u64,
    /// `sent[i]` is message `snd_una + i`.
    sent: VecDeque<Sent>,
    /// Messages declared lost, to resend, in the order they were declared.
    lost: VecDeque<u64>,
    /// Resent messages not yet delivered, in the order they were resent (RACK watches them
    /// apart: their send times are out of sequence order).
    resent: VecDeque<u64>,
    /// Messages below this were all delivered, declared lost or resent (RACK's scan starts
    /// here).
    scan: u64,
    backlog: VecDeque<Msg>,
    /// Bytes sent, not delivered and not declared lost.
    in_flight: u64,
    /// Bytes of every message in `sent`, and the most there were (the event `snd.span_peak`).
    span: u64,
    span_peak: u64,
    /// Bytes delivered, all told.
    delivered: u64,
    rtt: RttEstimator,
    pacer: Pacer,
    /// The buffer the peer advertised.
    peer_window: u64,
    /// The largest message sent (the controller's datagram size).
    mtu: u64,
    /// Transmissions so far (data and resends).
    transmissions: u64,
    /// RACK: the latest transmission delivered (its order and send time), and the round trip
    /// it measured.
    rack: Option<(u64, Time, Duration)>,
    largest_acked: Option<u64>,
    loss_at: Option<Time>,
    pace_at: Option<Time>,
    last_sent: Option<Time>,
    probes: u32,
    /// A message held back, and when it may leave (a round trip later, and after
    /// [`HOLD_FOR`] more transmissions or when nothing else waits): an acknowledgement that
    /// covers it before then acknowledges what was never sent.
    held: Option<(u64, Time, u64)>,
    /// The generator that picks which messages are held back (xorshift, seeded from the
    /// session's keys so a peer cannot predict it).
    skip_state: u64,
    /// Whether the generator picked the message numbered next (`snd_next`) to be held back,
    /// drawn when the number before it was used: decided ahead, so that the accelerator is
    /// told to send it the layered way ([`Cx::raise_send_divert`]), where it is held.
    hold_next: bool,
    /// The search for the path's datagram size, and where it publishes the result (with
    /// `max_datagram`).
    search: Option<Box<(Search, PathMtu)>>,
    /// Whether this layer holds the accelerator's send header disabled.
    send_disabled: bool,
    /// Whether this layer diverts the accelerator's sends to the layered path (the next
    /// message is to be held back).
    send_diverted: bool,
    /// Whether the window or the pacer said no since the last send (so the next send is not
    /// application-limited).
    blocked: bool,
    // Receiver.
    rcv_next: u64,
    /// Messages above a gap, and the ranges they form (start → end, exclusive).
    ooo: BTreeMap<u64, Msg>,
    ranges: BTreeMap<u64, u64>,
    ooo_bytes: u64,
    /// The most `ooo_bytes` were (the event `rcv.buffered_peak`).
    ooo_peak: u64,
    /// Data messages received since the last acknowledgement.
    unacked_rx: usize,
    /// The highest sequence number received, and when.
    largest_rx: Option<(u64, Time)>,
    ack_at: Option<Time>,
    /// Scratch: the messages one acknowledgement delivered (kept to spare an allocation).
    newly: Vec<(u64, Acked)>,
}

impl Window {
    /// The seed's window of `size` messages with default timers.
    pub fn new(size: usize) -> Window {
        Window::with_config(WindowConfig::new(size))
    }

    /// A window whose in-flight limit comes from `controller`.
    pub fn with_controller(controller: Box<dyn Controller>) -> Window {
        Window::with_config(WindowConfig::with_controller(controller))
    }

    /// A window with an explicit configuration.
    pub fn with_config(cfg: WindowConfig) -> Window {
        Window::build(cfg)
    }
}

/// The datagram size a controller starts from before any message was sent: `frag`'s default.
const INITIAL_MTU: u64 = 1400;

impl<const O: bool> Window<O> {
    /// A window with an explicit configuration, outlined or not as `O` says.
    pub fn build(mut cfg: WindowConfig) -> Window<O> {
        let size = if cfg.controller.is_some() {
            cfg.size.clamp(1, MAX_IN_FLIGHT)
        } else {
            cfg.size.clamp(1, 1024)
        };
        let ceiling = cfg.ceiling.max(INITIAL_MTU);
        Window {
            // The layer runs the controller; its configuration keeps none (a second copy
            // would cost every idle session its size).
            cc: cfg.controller.take(),
            cfg: WindowConfig {
                size,
                ceiling,
                ..cfg
            },
            f: None,
            snd_una: 0,
            snd_next: 0,
            sent: VecDeque::new(),
            lost: VecDeque::new(),
            resent: VecDeque::new(),
            scan: 0,
            backlog: VecDeque::new(),
            in_flight: 0,
            span: 0,
            span_peak: 0,
            delivered: 0,
            rtt: RttEstimator::new(),
            pacer: Pacer::new(),
            peer_window: ceiling,
            mtu: INITIAL_MTU,
            transmissions: 0,
            rack: None,
            largest_acked: None,
            loss_at: None,
            pace_at: None,
            last_sent: None,
            probes: 0,
            held: None,
            skip_state: 0x9e37_79b9_7f4a_7c15,
            hold_next: false,
            search: None,
            send_disabled: false,
            send_diverted: false,
            blocked: false,
            rcv_next: 0,
            ooo: BTreeMap::new(),
            ranges: BTreeMap::new(),
            ooo_bytes: 0,
            ooo_peak: 0,
            unacked_rx: 0,
            largest_rx: None,
            ack_at: None,
            newly: Vec::new(),
        }
    }

    /// Messages sent but not yet acknowledged.
    pub fn in_flight(&self) -> usize {
        self.sent.len()
    }

    /// Bytes sent, not yet delivered and not declared lost.
    pub fn bytes_in_flight(&self) -> u64 {
        self.in_flight
    }

    /// Messages waiting for room in the window.
    pub fn backlog_len(&self) -> usize {
        self.backlog.len()
    }

    /// The next sequence number this side will send.
    pub fn snd_next(&self) -> u64 {
        self.snd_next
    }

    /// The next sequence number expected from the peer.
    pub fn rcv_next(&self) -> u64 {
        self.rcv_next
    }

    /// The smoothed round-trip time, once measured.
    pub fn srtt(&self) -> Option<Duration> {
        self.rtt.smoothed()
    }

    /// The congestion window in bytes, with a controller.
    pub fn congestion_window(&self) -> Option<u64> {
        self.cc.as_ref().map(|c| c.window())
    }

    /// Bytes buffered above a gap on the receiving side.
    pub fn buffered_bytes(&self) -> u64 {
        self.ooo_bytes
    }

    /// The record of sent message `seq`, while it is not cumulatively acknowledged.
    fn entry(&self, seq: u64) -> Option<&Sent> {
        seq.checked_sub(self.snd_una)
            .and_then(|i| self.sent.get(i as usize))
    }

    /// [`entry`](Self::entry), mutable.
    fn entry_mut(&mut self, seq: u64) -> Option<&mut Sent> {
        seq.checked_sub(self.snd_una)
            .and_then(|i| self.sent.get_mut(i as usize))
    }

    /// Place a 20-bit wire value relative to `base` (the value within ±2^19 of it).
    fn unwrap_seq(base: u64, wire: u64) -> i64 {
        let d = wire.wrapping_sub(base) & SEQ_MASK;
        if d >= 1 << (SEQ_BITS - 1) {
            d as i64 - (1 << SEQ_BITS)
        } else {
            d as i64
        }
    }

    /// Whether a new message of `len` bytes may leave at `now`: `Err(Some(t))` when pacing
    /// holds it until `t`, `Err(None)` when the window is full.
    fn may_send_new(&self, now: Time, len: u64) -> Result<(), Option<Time>> {
        if self.sent.len() >= self.cfg.size {
            return Err(None);
        }
        self.may_send(now, len, true)
    }

    /// The controller's window, the peer's buffer and this end's ceiling (`new`: a message
    /// that widens the span), then the pacer.
    fn may_send(&self, now: Time, len: u64, new: bool) -> Result<(), Option<Time>> {
        let Some(cc) = &self.cc else {
            return Ok(());
        };
        if self.in_flight > 0 && self.in_flight + len > cc.window() {
            return Err(None);
        }
        let limit = self.peer_window.min(self.cfg.ceiling);
        if new && self.span > 0 && self.span + len > limit {
            return Err(None);
        }
        match self.pacer.delay_until(now, len) {
            None => Ok(()),
            Some(t) => Err(Some(t)),
        }
    }

    /// Whether a message sent now must wait: older ones wait, or the window or the pacer
    /// says no to a message of the largest size sent.
    fn full(&self, now: Time, len: u64) -> bool {
        !self.backlog.is_empty() || !self.lost.is_empty() || self.may_send_new(now, len).is_err()
    }

    /// Keep the accelerator's send-disable counter in step with a full window (seed 004
    /// §3.2: "when the send window of a sliding window protocol is full"), and its
    /// diversion with a message to be held back (only the layered send holds one).
    fn sync_disable(&mut self, cx: &mut Cx<'_>) {
        let may = self.may_send_new(cx.now(), self.mtu);
        let full = !self.backlog.is_empty() || !self.lost.is_empty() || may.is_err();
        self.blocked |= full;
        // Held by the pacer alone: wake when it lets the next message go, so that the
        // accelerator's backlog (which this layer does not see) leaves at the pacing rate,
        // not at the next acknowledgement.
        if let Err(Some(t)) = may {
            self.pace_at = Some(self.pace_at.map_or(t, |p| p.min(t)));
        }
        if full != self.send_disabled {
            if full {
                cx.raise_send_disable();
            } else {
                cx.lower_send_disable();
            }
            self.send_disabled = full;
        }
        let divert = self.holds_next();
        if divert != self.send_diverted {
            if divert {
                cx.raise_send_divert();
            } else {
                cx.lower_send_divert();
            }
            self.send_diverted = divert;
        }
    }

    /// The probe timeout without backoff (RFC 9002 §6.2.1).
    fn pto_base(&self) -> Duration {
        match self.rtt.smoothed() {
            Some(s) => s + (self.rtt.var() * 4).max(Duration::from_millis(1)) + self.cfg.ack_delay,
            None => self.cfg.rto,
        }
    }

    /// The largest probe timeout: `max_rto`, or three smoothed round trips on a longer path.
    fn pto_cap(&self) -> Duration {
        self.cfg.max_rto.max(self.rtt.get_or(Duration::ZERO) * 3)
    }

    /// When the next probe is due: a probe timeout (doubled per probe already sent) after
    /// the latest send, while anything is outstanding.
    fn pto_at(&self) -> Option<Time> {
        if self.in_flight == 0 && self.lost.is_empty() {
            return None;
        }
        let backoff = self
            .pto_base()
            .checked_mul(1 << self.probes.min(16))
            .unwrap_or(Duration::MAX);
        let pto = backoff.clamp(self.cfg.min_rto, self.pto_cap());
        self.last_sent.map(|t| t + pto)
    }

    fn rearm(&mut self, cx: &mut Cx<'_>) {
        self.sync_disable(cx);
        // The held message's time, while it is to come (after it, transmissions release it).
        let held = self.held.map(|(_, t, _)| t).filter(|&t| t > cx.now());
        let probe = self
            .search
            .as_ref()
            .and_then(|s| s.0.deadline(self.pto_base()));
        let due = [
            self.pto_at(),
            self.loss_at,
            self.ack_at,
            self.pace_at,
            held,
            probe,
        ]
        .into_iter()
        .flatten()
        .min();
        match due {
            Some(t) => cx.set_timer(t),
            None => cx.clear_timer(),
        }
    }

    /// With a transport header, write the ports and checksum of a message this layer
    /// originates (header area + body).
    fn stamp(&self, m: &mut Msg, f: Fields, kind: u64, seq: u64, cx: &Cx<'_>) {
        if let Some(t) = f.transport {
            let body = m.data().get(cx.header_len()..).unwrap_or(&[]);
            for (h, v) in t.stamp(kind, seq, body) {
                cx.set(m, h, v);
            }
        }
    }

    /// Stamp a data message (header area + body) with `seq` and the current ack, keep a copy
    /// for retransmission and send it below.
    fn send_data(&mut self, mut m: Msg, f: Fields, cx: &mut Cx<'_>) {
        cx.set(&mut m, f.kind, KIND_DATA);
        cx.set(&mut m, f.seq, self.snd_next);
        cx.set(&mut m, f.ack, self.rcv_next);
        self.stamp(&mut m, f, KIND_DATA, self.snd_next, cx);
        if self.holds_next() {
            // Numbered and kept, not sent: it leaves a round trip later.
            let until = cx.now() + self.rtt.get_or(Duration::ZERO);
            self.held = Some((self.snd_next, until, self.transmissions + HOLD_FOR));
            self.sent(m, cx, false);
            cx.count_event("ack_check.held", 1);
            return;
        }
        let copy = cx.copy(&m);
        self.sent(copy, cx, true);
        self.ack_sent();
        cx.send_down(m);
    }

    /// Whether the next new message is held back: the generator picked it (about one in
    /// [`SKIP_ONE_IN`]), and the flow is in bulk (under a controller whose window holds 32
    /// datagrams or more, with a round trip measured, and none held already). Like QUIC's
    /// skipped packet numbers (RFC 9000 §21.4) this exposes a peer that acknowledges ahead of
    /// delivery; it costs the messages after the held one a round trip of delay at the
    /// receiver, once in a few thousand. The same on both paths: while it holds, the
    /// accelerator sends the next message the layered way ([`sync_disable`](Self::sync_disable)).
    fn holds_next(&self) -> bool {
        self.hold_next
            && self.held.is_none()
            && self.rtt.smoothed().is_some()
            && self
                .cc
                .as_ref()
                .is_some_and(|c| c.window() >= 32 * self.mtu)
    }

    /// Draw whether the message numbered next is to be held back (see
    /// [`holds_next`](Self::holds_next)).
    fn draw_hold(&mut self) {
        let mut x = self.skip_state;
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        self.skip_state = x;
        self.hold_next = x.is_multiple_of(SKIP_ONE_IN);
    }

    /// Send the held message once its time has come ([`resend`](Self::resend) takes it out
    /// of hold: sent out of sequence order, RACK watches it with the resent ones).
    fn release_held(&mut self, f: Fields, cx: &mut Cx<'_>) {
        let Some((seq, until, after)) = self.held else {
            return;
        };
        // The count matters against a peer that acknowledges at once (its round trip is
        // near zero). Without more to send, or when the held message pins the span at the
        // peer's buffer (nothing more may be sent until it is delivered), the time alone.
        let span_full = self.span + self.mtu > self.peer_window.min(self.cfg.ceiling);
        let counted = self.transmissions >= after || self.backlog.is_empty() || span_full;
        if cx.now() >= until && counted {
            self.resend(seq, f, cx);
        }
    }

    /// Book-keeping after a data message was numbered: the sequence number is used and its
    /// copy kept; if it `left` (it was not held back), the window, the pacer and the
    /// controller are told.
    fn sent(&mut self, copy: Msg, cx: &mut Cx<'_>, left: bool) {
        let now = cx.now();
        let len = copy.len() as u64;
        if len > self.mtu {
            self.mtu = len;
            if let Some(cc) = &mut self.cc {
                cc.on_mtu_update(len.min(u64::from(u16::MAX)) as u16);
            }
        }
        // Application-limited: nothing held this send back since the last one (neither the
        // window nor the pacer; with the accelerator the messages that wait are in its
        // backlog, which this layer does not see) and the window is far from used.
        let app_limited = !self.blocked
            && self.backlog.is_empty()
            && self
                .cc
                .as_ref()
                .is_some_and(|c| (self.in_flight + len) * 2 < c.window());
        self.blocked = false;
        self.snd_next += 1;
        self.draw_hold();
        self.sent.push_back(Sent {
            msg: Some(copy),
            len,
            xmit: now,
            // A held message is sent after everything numbered so far (RACK's order).
            order: if left { self.transmissions } else { u64::MAX },
            retransmitted: false,
            sacked: false,
            lost: None,
            held: !left,
            app_limited,
        });
        self.span += len;
        if self.span > self.span_peak {
            self.span_peak = self.span;
            cx.record_peak("snd.span_peak", self.span);
        }
        if left {
            self.in_flight += len;
            self.on_transmit(now, len);
        }
    }

    /// A datagram of `len` bytes left at `now`.
    fn on_transmit(&mut self, now: Time, len: u64) {
        self.transmissions += 1;
        self.pacer.spend(now, len);
        self.last_sent = Some(now);
        if let Some(cc) = &mut self.cc {
            cc.on_sent(now, len, self.in_flight);
        }
    }

    /// Resend message `seq` (declared lost, or a probe): a fresh copy with the current ack.
    fn resend(&mut self, seq: u64, f: Fields, cx: &mut Cx<'_>) -> bool {
        let (now, rcv_next, order) = (cx.now(), self.rcv_next, self.transmissions);
        if self.held.is_some_and(|(h, _, _)| h == seq) {
            self.held = None;
        }
        let Some(s) = self.entry_mut(seq) else {
            return false;
        };
        let Some(copy) = &s.msg else {
            return false;
        };
        let mut m = cx.copy(copy);
        cx.set(&mut m, f.ack, rcv_next);
        // Already in `resent` only if resent before and not declared lost since (losses
        // leave that list).
        let listed = s.retransmitted && s.lost.is_none();
        let back_in_flight = s.lost.take().is_some() || std::mem::take(&mut s.held);
        s.xmit = now;
        s.order = order;
        s.retransmitted = true;
        let len = s.len;
        if back_in_flight {
            self.in_flight += len;
        }
        if listed {
            self.resent.retain(|&r| r != seq);
        }
        self.resent.push_back(seq);
        self.on_transmit(now, len);
        self.ack_sent();
        cx.send_down(m);
        true
    }

    /// Send what the window and the pacer allow: lost messages first, then the backlog.
    fn pump(&mut self, f: Fields, cx: &mut Cx<'_>) {
        self.pace_at = self.send_allowed(f, cx).err().flatten();
        self.release_held(f, cx);
        self.probe_path(f, cx);
    }

    /// Send the path-size search's next probe, if one is due: once a round trip was
    /// measured (the path carries data), and not while the probe timeout is backing off.
    /// The probe is a datagram of exactly the size to try: the probe id, then zeros.
    fn probe_path(&mut self, f: Fields, cx: &mut Cx<'_>) {
        if self.probes > 0 || self.rtt.smoothed().is_none() {
            return;
        }
        let Some(s) = self.search.as_deref_mut() else {
            return;
        };
        let Some((id, size)) = s.0.next_probe(cx.now()) else {
            return;
        };
        let len = size.saturating_sub(s.1.overhead()).max(PROBE_ID);
        let mut m = cx.new_packet();
        let body = m.push_back(len);
        body.fill(0);
        body[..PROBE_ID].copy_from_slice(&id.to_be_bytes());
        self.send_control(m, f, KIND_PROBE, cx);
        cx.count_event("pmtu.probe", 1);
    }

    /// Send a control message this layer originates (a probe or its answer): stamped with
    /// `kind`, the next sequence number (not taken) and the cumulative ack.
    fn send_control(&mut self, mut m: Msg, f: Fields, kind: u64, cx: &mut Cx<'_>) {
        cx.set(&mut m, f.kind, kind);
        cx.set(&mut m, f.seq, self.snd_next);
        cx.set(&mut m, f.ack, self.rcv_next);
        self.stamp(&mut m, f, kind, self.snd_next, cx);
        cx.send_down(m);
    }

    /// A probe or a probe's answer arrived (authenticated by the layers below).
    fn on_path_probe(&mut self, kind: u64, m: Msg, f: Fields, cx: &mut Cx<'_>) {
        let id = m
            .data()
            .get(cx.header_len()..)
            .and_then(|b| b.first_chunk::<PROBE_ID>())
            .map(|b| u32::from_be_bytes(*b));
        cx.free(m);
        let Some(id) = id else { return };
        if kind == KIND_PROBE {
            let mut a = cx.new_packet();
            a.append_array(&id.to_be_bytes());
            self.send_control(a, f, KIND_PROBE_ACK, cx);
            return;
        }
        let Some(s) = self.search.as_deref_mut() else {
            return;
        };
        match s.0.on_ack(id, cx.now()) {
            crate::plpmtu::Outcome::Confirmed(n) => {
                s.1.set_datagram(n);
                cx.record_peak("pmtu.datagram", n as u64);
            }
            _ => cx.count_event("pmtu.stale_answer", 1),
        }
    }

    /// [`pump`](Self::pump)'s sends, until the window or the pacer says no (`Err`, with the
    /// instant the pacer lets the next one go).
    fn send_allowed(&mut self, f: Fields, cx: &mut Cx<'_>) -> Result<(), Option<Time>> {
        let now = cx.now();
        while let Some(&seq) = self.lost.front() {
            let Some(s) = self.entry(seq).filter(|s| s.lost.is_some() && !s.sacked) else {
                self.lost.pop_front();
                continue;
            };
            let cause = s.lost.unwrap_or(Cause::Time);
            self.may_send(now, s.len, false)?;
            self.lost.pop_front();
            if self.resend(seq, f, cx) {
                cx.count_event(cause.event(), 1);
            }
        }
        while let Some(m) = self.backlog.front() {
            self.may_send_new(now, m.len() as u64)?;
            if let Some(m) = self.backlog.pop_front() {
                self.send_data(m, f, cx);
            }
        }
        Ok(())
    }

    /// A data message left at `now` carrying the cumulative ack `wire_ack` (gossip: with the
    /// accelerator a reply may leave before the delivery it answers is post-processed, so it
    /// can be behind `rcv_next`). What it covers needs no separate ack; the rest still does,
    /// within the ack delay counted from now: those messages arrived after the ack was
    /// predicted. (Keeping the first deadline instead sent a standalone ack every 200 µs of a
    /// ping-pong whose piggybacked acks always lag by one: 7 % more datagrams.)
    fn acked_up_to(&mut self, wire_ack: u64, now: Time) {
        let behind = (self.rcv_next.wrapping_sub(wire_ack) & SEQ_MASK) as usize;
        if behind == 0 {
            self.ack_sent();
        } else if behind < self.unacked_rx {
            self.unacked_rx = behind;
            self.ack_at = Some(now + self.cfg.ack_delay);
        }
    }

    fn ack_sent(&mut self) {
        self.unacked_rx = 0;
        self.ack_at = None;
    }

    /// A standalone acknowledgement: the cumulative ack in the header, the highest ranges
    /// received above it, the buffer and the delay in the body.
    fn send_ack(&mut self, f: Fields, cx: &mut Cx<'_>) {
        let now = cx.now();
        let delay = self
            .largest_rx
            .map_or(Duration::ZERO, |(_, t)| now.since(t));
        let mut frame = AckFrame::new(
            delay.as_micros().min(u128::from(u32::MAX)) as u32,
            self.cfg.ceiling.min(u64::from(u32::MAX)) as u32,
        );
        let top: Vec<(u64, u64)> = self
            .ranges
            .iter()
            .rev()
            .take(MAX_RANGES)
            .map(|(&s, &e)| (s, e))
            .collect();
        for &(s, e) in top.iter().rev() {
            let off = |x: u64| x.saturating_sub(self.rcv_next).min(u64::from(MAX_OFFSET)) as u32;
            frame.push(off(s), off(e));
        }
        let mut m = cx.new_packet();
        frame.write(m.push_back(frame.encoded_len()));
        cx.set(&mut m, f.kind, KIND_ACK);
        cx.set(&mut m, f.seq, self.snd_next);
        cx.set(&mut m, f.ack, self.rcv_next);
        self.stamp(&mut m, f, KIND_ACK, self.snd_next, cx);
        cx.send_down(m);
        self.ack_sent();
    }

    /// Check an acknowledgement against what was sent, changing nothing: the cumulative
    /// acknowledgement `cum` (absolute) and the frame's ranges (offsets from it).
    fn check_ack(&self, cum: u64, frame: Option<&AckFrame>) -> Result<(), &'static str> {
        if cum > self.snd_next {
            return Err("ack.beyond_sent");
        }
        // The held message was never sent: whoever acknowledges it guessed.
        if let Some((h, _, _)) = self.held {
            let covered = cum > h
                || frame.is_some_and(|f| {
                    f.ranges()
                        .iter()
                        .any(|&(s, e)| (cum + u64::from(s)..cum + u64::from(e)).contains(&h))
                });
            if covered {
                return Err("ack.optimistic");
            }
        }
        // Ranges ascend: the last reaches furthest.
        let reach = frame
            .and_then(|f| f.ranges().last())
            .map(|&(_, e)| u64::from(e));
        if reach.is_some_and(|e| cum + e > self.snd_next) {
            return Err("ack.beyond_sent");
        }
        Ok(())
    }

    /// The cumulative acknowledgement on a received message, placed in the sequence space. It
    /// may be behind `snd_una` (an acknowledgement overtaken by a later one): its ranges are
    /// offsets from it, not from `snd_una`.
    fn cumulative(&self, wire_ack: u64) -> u64 {
        let d = Self::unwrap_seq(self.snd_una, wire_ack);
        self.snd_una.saturating_add_signed(d)
    }

    /// Mark a sent message delivered (cumulatively or by a range): its copy is freed and
    /// it leaves the bytes in flight. What the controller and RACK need to know of it, unless
    /// it was delivered before.
    fn deliver_sent(s: &mut Sent, in_flight: &mut u64, cx: &mut Cx<'_>) -> Option<Acked> {
        if s.sacked {
            return None;
        }
        s.sacked = true;
        if let Some(m) = s.msg.take() {
            cx.free(m);
        }
        if s.lost.take().is_none() {
            *in_flight = in_flight.saturating_sub(s.len);
        }
        Some(Acked {
            xmit: s.xmit,
            order: s.order,
            len: s.len,
            retransmitted: s.retransmitted,
            app_limited: s.app_limited,
        })
    }

    /// Apply an acknowledgement that passed [`check_ack`](Self::check_ack).
    fn on_ack(&mut self, cum: u64, frame: Option<&AckFrame>, cx: &mut Cx<'_>) {
        let now = cx.now();
        let mut newly = std::mem::take(&mut self.newly);
        newly.clear();
        while self.snd_una < cum {
            let Some(mut s) = self.sent.pop_front() else {
                break;
            };
            if let Some(a) = Self::deliver_sent(&mut s, &mut self.in_flight, cx) {
                newly.push((self.snd_una, a));
            }
            self.span = self.span.saturating_sub(s.len);
            self.snd_una += 1;
        }
        self.scan = self.scan.max(self.snd_una);
        if let Some(frame) = frame {
            self.peer_window = u64::from(frame.window);
            for &(s, e) in frame.ranges() {
                let (start, end) = (cum + u64::from(s), cum + u64::from(e));
                for seq in start.max(self.snd_una)..end {
                    let i = (seq - self.snd_una) as usize;
                    let Some(sent) = self.sent.get_mut(i) else {
                        break;
                    };
                    if let Some(a) = Self::deliver_sent(sent, &mut self.in_flight, cx) {
                        newly.push((seq, a));
                    }
                }
            }
        }
        if newly.is_empty() {
            self.newly = newly;
            return;
        }
        // The round trip from the newest transmission delivered, unless it was resent
        // (Karn: which copy arrived is unknown).
        let newest = newly.iter().max_by_key(|(_, a)| a.xmit).map(|&(_, a)| a);
        if let Some(a) = newest.filter(|a| !a.retransmitted) {
            let delay = frame.map_or(Duration::ZERO, |f| {
                Duration::from_micros(u64::from(f.delay_us))
            });
            self.rtt.update(now.since(a.xmit), delay.min(MAX_ACK_DELAY));
        }
        for &(seq, a) in &newly {
            self.delivered += a.len;
            self.largest_acked = Some(self.largest_acked.map_or(seq, |l| l.max(seq)));
            // RACK (RFC 8985 §6.2): a resent message delivered sooner than the smallest round
            // trip after its resend was the original's delivery; it says nothing of the resend.
            let ambiguous =
                a.retransmitted && self.rtt.min().is_some_and(|m| now.since(a.xmit) < m);
            if !ambiguous && self.rack.is_none_or(|(o, _, _)| a.order > o) {
                self.rack = Some((a.order, a.xmit, now.since(a.xmit)));
            }
            if let Some(cc) = &mut self.cc {
                cc.on_ack(now, a.xmit, a.len, a.app_limited, &self.rtt);
            }
        }
        self.newly = newly;
        self.probes = 0;
        let app_limited = !self.blocked && self.backlog.is_empty() && self.lost.is_empty();
        if let Some(cc) = &mut self.cc {
            cc.on_end_acks(now, self.in_flight, app_limited, self.delivered);
        }
        self.detect_losses(cx);
        self.resent.retain(|&r| {
            r >= self.snd_una
                && self
                    .sent
                    .get((r - self.snd_una) as usize)
                    .is_some_and(|s| !s.sacked)
        });
        if let Some(cc) = &self.cc {
            self.pacer
                .set_rate(now, cc.pacing_rate(&self.rtt), self.mtu);
        }
    }

    /// RACK: declare lost what was sent before the newest delivered message and has waited
    /// a round trip plus the reordering window, or has three later messages delivered; arm
    /// the loss timer for the first that may still arrive.
    fn detect_losses(&mut self, cx: &mut Cx<'_>) {
        let now = cx.now();
        self.loss_at = None;
        let Some((rack_order, _, rack_rtt)) = self.rack else {
            return;
        };
        // A round trip plus a quarter of the smallest (reordering), at least a millisecond
        // (RFC 9002's timer granularity).
        let reo = self.rtt.min().unwrap_or(rack_rtt) / 4;
        let wait = (rack_rtt.max(self.rtt.get_or(rack_rtt)) + reo).max(Duration::from_millis(1));
        let largest = self.largest_acked.unwrap_or(0);
        let mut event: Option<(Time, Time, u64)> = None; // earliest, latest send, bytes
        let mut judge = |s: &mut Sent, seq: u64, loss_at: &mut Option<Time>| -> Option<bool> {
            if s.sacked || s.lost.is_some() {
                return Some(true);
            }
            if s.order > rack_order {
                return None;
            }
            let cause = if !s.retransmitted && largest >= seq + PACKET_THRESHOLD {
                Some(Cause::Order)
            } else if now >= s.xmit + wait {
                Some(Cause::Time)
            } else {
                None
            };
            match cause {
                Some(c) => {
                    s.lost = Some(c);
                    let (lo, hi, b) = event.unwrap_or((s.xmit, s.xmit, 0));
                    event = Some((lo.min(s.xmit), hi.max(s.xmit), b + s.len));
                    Some(true)
                }
                None => {
                    let at = s.xmit + wait;
                    *loss_at = Some(loss_at.map_or(at, |l: Time| l.min(at)));
                    Some(false)
                }
            }
        };
        let mut lost_now = Vec::new();
        // Never-resent messages, in sequence (= send) order from the scan point.
        let mut seq = self.scan.max(self.snd_una);
        while let Some(s) = self.sent.get_mut((seq - self.snd_una) as usize) {
            // Resent and held messages are judged below, in the order they were (will be)
            // sent; the scan passes them.
            if (s.retransmitted || s.held) && !s.sacked && s.lost.is_none() {
                if seq == self.scan {
                    self.scan += 1;
                }
                seq += 1;
                continue;
            }
            let was_lost = s.lost.is_some();
            match judge(s, seq, &mut self.loss_at) {
                Some(true) => {
                    if !was_lost && s.lost.is_some() {
                        lost_now.push(seq);
                    }
                    if seq == self.scan {
                        self.scan += 1;
                    }
                    seq += 1;
                }
                Some(false) | None => break,
            }
        }
        // Resent messages, in resend order.
        for &r in &self.resent {
            let Some(s) = r
                .checked_sub(self.snd_una)
                .and_then(|i| self.sent.get_mut(i as usize))
            else {
                continue;
            };
            let was_lost = s.lost.is_some();
            match judge(s, r, &mut self.loss_at) {
                Some(true) => {
                    if !was_lost && s.lost.is_some() {
                        lost_now.push(r);
                    }
                }
                Some(false) | None => break,
            }
        }
        let Some((earliest, latest, bytes)) = event else {
            return;
        };
        for seq in lost_now {
            if let Some(s) = self.sent.get((seq - self.snd_una) as usize) {
                self.in_flight = self.in_flight.saturating_sub(s.len);
            }
            self.lost.push_back(seq);
        }
        self.resent.retain(|&r| {
            r.checked_sub(self.snd_una)
                .and_then(|i| self.sent.get(i as usize))
                .is_some_and(|s| s.lost.is_none())
        });
        // Persistent congestion (RFC 9002 §7.6): losses spanning three probe timeouts.
        let persistent =
            self.rtt.smoothed().is_some() && latest.since(earliest) > self.pto_base() * 3;
        if let Some(cc) = &mut self.cc {
            cc.on_congestion_event(now, latest, persistent, bytes);
        }
        cx.count_event("loss.events", 1);
    }

    /// The path-size probe's timeout; and a black hole: [`MAX_PROBES`] probe timeouts in a
    /// row while the confirmed size is above the base send the size back to the base (new
    /// messages are cut smaller; the search starts again once the path answers).
    fn path_timer(&mut self, cx: &mut Cx<'_>) {
        let pto = self.pto_base();
        let alive = self.probes == 0;
        let Some(s) = self.search.as_deref_mut() else {
            return;
        };
        match s.0.on_timer(cx.now(), pto, alive) {
            crate::plpmtu::Outcome::Lost(_) => cx.count_event("pmtu.probe_lost", 1),
            crate::plpmtu::Outcome::TooLarge(_) => cx.count_event("pmtu.too_large", 1),
            _ => {}
        }
        if self.probes >= MAX_PROBES && s.0.confirmed() > BASE_PLPMTU {
            s.0.black_hole();
            s.1.set_datagram(BASE_PLPMTU);
            cx.count_event("pmtu.black_hole", 1);
        }
    }

    /// The probe timeout fired: send one probe — new data if any waits, else the newest
    /// message not delivered — and back off.
    fn on_probe_timeout(&mut self, f: Fields, cx: &mut Cx<'_>) {
        self.probes += 1;
        // New data if it fits the peer's buffer and this end's ceiling (a probe may exceed
        // the congestion window, never those).
        let limit = self.peer_window.min(self.cfg.ceiling);
        if let Some(m) = self.backlog.pop_front() {
            let fits = self.span == 0 || self.span + m.len() as u64 <= limit;
            if self.sent.len() < self.cfg.size && fits {
                self.send_data(m, f, cx);
                return;
            }
            self.backlog.push_front(m);
        }
        let newest = (0..self.sent.len())
            .rev()
            .find(|&i| !self.sent[i].sacked)
            .map(|i| self.snd_una + i as u64);
        if let Some(seq) = newest {
            if self.resend(seq, f, cx) {
                cx.count_event("retransmit.probe", 1);
            }
        }
    }

    fn ack_soon(&mut self, now: Time) {
        self.unacked_rx += 1;
        if self.ack_at.is_none() {
            self.ack_at = Some(now + self.cfg.ack_delay);
        }
    }

    /// Whether enough arrived to acknowledge at once: half the window of the seed's window;
    /// every second message under a controller (RFC 9000 §13.2.2), so the sender's window
    /// grows and its round-trip samples come at the rate data arrives.
    fn ack_now(&self) -> bool {
        if self.cc.is_none() {
            return self.unacked_rx * 2 >= self.cfg.size;
        }
        self.unacked_rx >= 2
    }

    /// Whether message `seq` (ahead of `rcv_next`) of `len` bytes may wait in the buffer.
    fn may_buffer(&self, d: u64, len: u64) -> bool {
        if self.cc.is_none() {
            return d < self.cfg.size as u64;
        }
        d < MAX_IN_FLIGHT as u64 && self.ooo_bytes + len <= self.cfg.ceiling
    }

    /// Buffer message `seq` above a gap and add it to the ranges.
    fn buffer(&mut self, seq: u64, m: Msg, cx: &mut Cx<'_>) {
        self.ooo_bytes += m.len() as u64;
        self.ooo.insert(seq, m);
        // Join the range ending at `seq` and the one starting after it.
        let before = self
            .ranges
            .range(..=seq)
            .next_back()
            .filter(|&(_, &e)| e == seq)
            .map(|(&s, _)| s);
        let after = self.ranges.remove(&(seq + 1));
        let start = before.unwrap_or(seq);
        self.ranges.insert(start, after.unwrap_or(seq + 1));
        if self.ooo_bytes > self.ooo_peak {
            self.ooo_peak = self.ooo_bytes;
            cx.record_peak("rcv.buffered_peak", self.ooo_bytes);
        }
    }
}

/// What a delivered message tells the controller and RACK.
#[derive(Clone, Copy, Debug)]
struct Acked {
    xmit: Time,
    order: u64,
    len: u64,
    retransmitted: bool,
    app_limited: bool,
}

/// The fields of a window without a transport header, as [`Layer::init`] registers them
/// (`kind`, `seq`, `ack`): what a [`Fixed`](crate::fixed::Fixed) stack places at compile time.
const WINDOW_FIELDS: [FieldDecl; 3] = [
    FieldDecl::new(FieldClass::ProtoSpecific, "kind", 2),
    FieldDecl::new(FieldClass::ProtoSpecific, "seq", SEQ_BITS),
    FieldDecl::new(FieldClass::Gossip, "ack", SEQ_BITS),
];
/// Positions of `kind`, `seq` and `ack` in [`WINDOW_FIELDS`] (and in [`Slots`] of a window).
const KIND: usize = 0;
const SEQ: usize = 1;
const ACK: usize = 2;

/// A window's `kind`, `seq` and `ack` through its handles.
impl Slots for &Fields {
    #[inline(always)]
    fn get<const K: usize>(self, pkt: &Packet<'_>) -> u64 {
        pkt.get([self.kind, self.seq, self.ack][K])
    }
    #[inline(always)]
    fn set<const K: usize>(self, pkt: &mut Packet<'_>, v: u64) {
        pkt.set([self.kind, self.seq, self.ack][K], v)
    }
}

/// A window without a transport header declares its fields; one with a transport header
/// registers three more, which a [`Fixed`](crate::fixed::Fixed) stack notices when the
/// connection is built, running the window through its handles.
impl<const O: bool> FixedFields for Window<O> {
    const FIELDS: &'static [FieldDecl] = &WINDOW_FIELDS;

    #[inline(always)]
    fn pre_send_fixed<A: Slots>(&self, pkt: &mut Packet<'_>, at: A) -> Verdict {
        self.pre_send_with(pkt, at, self.f.and_then(|f| f.transport))
    }

    #[inline(always)]
    fn pre_deliver_fixed<A: Slots>(&self, pkt: &mut Packet<'_>, at: A) -> Verdict {
        self.pre_deliver_with(pkt, at, self.f.and_then(|f| f.transport))
    }
}

impl<const O: bool> Window<O> {
    /// [`Layer::pre_send`] with `kind`, `seq` and `ack` through `f`.
    #[inline(always)]
    fn pre_send_with<A: Slots>(
        &self,
        pkt: &mut Packet<'_>,
        f: A,
        transport: Option<Transport>,
    ) -> Verdict {
        // A message to be held back is absorbed too: `send_data` numbers and holds it.
        if self.full(
            pkt.now(),
            pkt.header().len() as u64 + f.body_len(pkt) as u64,
        ) || self.holds_next()
        {
            cold::<O>();
            return Verdict::Absorb;
        }
        f.set::<KIND>(pkt, KIND_DATA);
        f.set::<SEQ>(pkt, self.snd_next);
        f.set::<ACK>(pkt, self.rcv_next);
        if let Some(t) = transport {
            for (h, v) in t.stamp(KIND_DATA, self.snd_next, pkt.body()) {
                pkt.set(h, v);
            }
        }
        pkt.keep_copy();
        Verdict::Continue
    }

    /// [`Layer::pre_deliver`] with `kind`, `seq` and `ack` through `f`.
    #[inline(always)]
    fn pre_deliver_with<A: Slots>(
        &self,
        pkt: &mut Packet<'_>,
        f: A,
        transport: Option<Transport>,
    ) -> Verdict {
        if let Some(t) = transport {
            // The peer's source port is our `peer`, its destination our `local`.
            let (sport, dport) = (pkt.get(t.sport), pkt.get(t.dport));
            if sport != u64::from(t.ports.peer) || dport != u64::from(t.ports.local) {
                cold::<O>();
                return Verdict::Drop(DropReason::Malformed);
            }
            let want = transport_sum(
                sport,
                dport,
                f.get::<KIND>(pkt),
                f.get::<SEQ>(pkt),
                pkt.body(),
            );
            if pkt.get(t.sum) != want {
                cold::<O>();
                return Verdict::Drop(DropReason::Checksum);
            }
        }
        match f.get::<KIND>(pkt) {
            KIND_DATA if f.get::<SEQ>(pkt) == self.rcv_next & SEQ_MASK => Verdict::Continue,
            KIND_DATA => Verdict::Absorb,
            KIND_ACK => {
                // Refused whole, before any state changes: a body that does not parse, or
                // that acknowledges what was not sent or cannot have arrived.
                let frame = AckFrame::parse(pkt.body());
                let cum = self.cumulative(f.get::<ACK>(pkt));
                match frame {
                    Ok(fr) if self.check_ack(cum, Some(&fr)).is_ok() => Verdict::Absorb,
                    _ => {
                        cold::<O>();
                        Verdict::Drop(DropReason::BadAck)
                    }
                }
            }
            KIND_PROBE if f.body_len(pkt) >= PROBE_ID => Verdict::Absorb,
            KIND_PROBE_ACK if f.body_len(pkt) == PROBE_ID => Verdict::Absorb,
            _ => {
                cold::<O>();
                Verdict::Drop(DropReason::Malformed)
            }
        }
    }
}

impl<const O: bool> Layer for Window<O> {
    fn name(&self) -> &'static str {
        self.cfg.name
    }

    /// Yes: sequence number, kind and acknowledgement are predicted — unless a transport
    /// header's checksum (which no packet filter computes) makes the pre-phases necessary.
    fn predicts(&self) -> bool {
        self.cfg.transport.is_none()
    }

    fn init(&mut self, fields: &mut FieldRegistry, cx: &InitCx) {
        if let Some(k) = &cx.session {
            let mut seed = [0u8; 8];
            seed.copy_from_slice(&k.initiator_to_responder()[..8]);
            // Never zero (xorshift's fixed point); each direction its own sequence.
            let role = u64::from(cx.role == crate::layer::Role::Initiator);
            self.skip_state = (u64::from_le_bytes(seed) ^ role.wrapping_mul(0x9e37_79b9)) | 1;
        }
        let transport = self.cfg.transport.map(|ports| Transport {
            sport: fields.add_field(FieldClass::ProtoSpecific, "sport", 16, None),
            dport: fields.add_field(FieldClass::ProtoSpecific, "dport", 16, None),
            sum: fields.add_field(FieldClass::MsgSpecific, "tsum", 16, None),
            ports,
        });
        let [kind, seq, ack] = declare(fields, &WINDOW_FIELDS);
        self.f = Some(Fields {
            kind,
            seq,
            ack,
            transport,
        });
        if self.cfg.max_datagram > 0 {
            let path = cx.path.clone();
            path.set_datagram(BASE_PLPMTU);
            self.search = Some(Box::new((Search::new(self.cfg.max_datagram), path)));
        }
    }

    /// Room in the backlog. While the path-size search has no answer yet, at most
    /// 64 messages wait: the layers above cut what they send to the size
    /// known so far (the base), and a sender that filled the whole backlog in its first
    /// round trip would send thousands of datagrams smaller than the path carries.
    fn can_accept(&self) -> bool {
        let unsettled = self.search.as_ref().is_some_and(|s| !s.0.settled());
        let room = if unsettled {
            self.cfg.backlog.min(UNSETTLED_BACKLOG)
        } else {
            self.cfg.backlog
        };
        self.backlog.len() < room
    }

    fn busy(&self) -> bool {
        self.holds_unacked() || self.ack_at.is_some()
    }

    fn holds_unacked(&self) -> bool {
        !self.sent.is_empty() || !self.backlog.is_empty()
    }

    /// Messages are numbered in the order they are taken (the backlog's wait for a
    /// number), from 0, and `snd_una` is the cumulative acknowledgement.
    fn acked_prefix(&self) -> Option<AckedPrefix> {
        self.f?;
        Some(AckedPrefix {
            taken: self.snd_next + self.backlog.len() as u64,
            acked: self.snd_una,
        })
    }

    fn shrink(&mut self) {
        if self.sent.is_empty() {
            self.sent.shrink_to_fit();
            self.lost.shrink_to_fit();
            self.resent.shrink_to_fit();
        }
        if self.backlog.is_empty() {
            self.backlog.shrink_to_fit();
        }
        self.newly = Vec::new();
    }

    fn pre_send(&self, pkt: &mut Packet<'_>) -> Verdict {
        match &self.f {
            Some(f) => self.pre_send_with(pkt, f, f.transport),
            None => Verdict::Continue,
        }
    }

    fn post_send(&mut self, hdr: &Hdr<'_>, h: Handoff, cx: &mut Cx<'_>) {
        match h {
            Handoff::Passed { copy: Some(c) } => {
                self.sent(c, cx, true);
                if let Some(f) = self.f {
                    self.acked_up_to(hdr.get(f.ack), cx.now());
                }
            }
            Handoff::Passed { copy: None } => {}
            Handoff::Absorbed(m) => {
                cold::<O>();
                self.backlog.push_back(m);
                if let Some(f) = self.f {
                    // Room may have come back since the message was refused (the pacer's
                    // tokens grow with time).
                    self.pump(f, cx);
                }
            }
        }
        self.rearm(cx);
    }

    fn pre_deliver(&self, pkt: &mut Packet<'_>) -> Verdict {
        match &self.f {
            Some(f) => self.pre_deliver_with(pkt, f, f.transport),
            None => Verdict::Continue,
        }
    }

    fn post_deliver(&mut self, hdr: &Hdr<'_>, h: Handoff, cx: &mut Cx<'_>) {
        let Some(f) = self.f else { return };
        let now = cx.now();
        let kind = hdr.get(f.kind);
        if kind == KIND_PROBE || kind == KIND_PROBE_ACK {
            cold::<O>();
            if let Handoff::Absorbed(m) = h {
                self.on_path_probe(kind, m, f, cx);
            }
            self.pump(f, cx);
            self.rearm(cx);
            return;
        }
        let cum = self.cumulative(hdr.get(f.ack));
        let is_ack = kind == KIND_ACK;
        if is_ack {
            let Handoff::Absorbed(m) = h else {
                self.rearm(cx);
                return;
            };
            let frame = m
                .data()
                .get(cx.header_len()..)
                .and_then(|b| AckFrame::parse(b).ok());
            // Checked in the pre-phase; checked again because post-processing may run later
            // (deferred), after other acknowledgements moved the state on.
            match self.check_ack(cum, frame.as_ref()) {
                Ok(()) => self.on_ack(cum, frame.as_ref(), cx),
                Err(why) => cx.count_event(why, 1),
            }
            cx.free(m);
            self.pump(f, cx);
            self.rearm(cx);
            return;
        }
        // Data: the gossip acknowledgement first. A lying one is ignored (the data is
        // delivered: it passed every layer below), and counted.
        match self.check_ack(cum, None) {
            Ok(()) => self.on_ack(cum, None, cx),
            Err(why) => cx.count_event(why, 1),
        }
        match h {
            Handoff::Passed { .. } => {
                // The in-order message went up.
                self.largest_rx = Some((self.rcv_next, now));
                self.rcv_next += 1;
                self.ack_soon(now);
                while let Some(m) = self.ooo.remove(&self.rcv_next) {
                    self.ooo_bytes -= m.len() as u64;
                    self.rcv_next += 1;
                    self.unacked_rx += 1;
                    cx.deliver_up(m);
                }
                while let Some((&s, &e)) = self.ranges.first_key_value() {
                    if s >= self.rcv_next {
                        break;
                    }
                    self.ranges.remove(&s);
                    if e > self.rcv_next {
                        self.ranges.insert(self.rcv_next, e);
                    }
                }
                if self.ack_now() {
                    // Due now, sent by the timer the driver runs once it has handed over
                    // the datagrams it received together: one acknowledgement covers a
                    // whole receive batch (as TCP acknowledges a GRO batch once), and a
                    // reply sent in the same turn carries it instead.
                    self.ack_at = Some(now);
                }
            }
            Handoff::Absorbed(m) => {
                // Out of order or a duplicate: loss, reordering or a lost ack.
                cold::<O>();
                let d = Self::unwrap_seq(self.rcv_next, hdr.get(f.seq));
                let len = m.len() as u64;
                if d < 0 {
                    // Already delivered: the peer missed our ack.
                    cx.count_drop(DropReason::Duplicate);
                    cx.free(m);
                    self.send_ack(f, cx);
                } else if self.may_buffer(d as u64, len) {
                    let seq = self.rcv_next + d as u64;
                    if self.ooo.contains_key(&seq) {
                        cx.count_drop(DropReason::Duplicate);
                        cx.free(m);
                    } else {
                        if self.largest_rx.is_none_or(|(l, _)| seq > l) {
                            self.largest_rx = Some((seq, now));
                        }
                        self.buffer(seq, m, cx);
                    }
                    // A gap: tell the sender where we are at once.
                    self.send_ack(f, cx);
                } else {
                    cx.count_drop(DropReason::OutOfWindow);
                    cx.free(m);
                }
            }
        }
        self.pump(f, cx);
        self.rearm(cx);
    }

    fn wants_copy(&self) -> bool {
        true
    }

    /// Yes: a copy is only resent (copied, its acknowledgement field set, sent down) or freed.
    fn resends_copy_only(&self) -> bool {
        true
    }

    fn predict_send(&self, p: &mut Predict<'_>) {
        if let Some(f) = self.f {
            p.set(f.kind, KIND_DATA);
            p.set(f.seq, self.snd_next);
            p.set(f.ack, self.rcv_next);
        }
    }

    fn predict_deliver(&self, p: &mut Predict<'_>) {
        if let Some(f) = self.f {
            p.set(f.kind, KIND_DATA);
            p.set(f.seq, self.rcv_next);
        }
    }

    /// Once the predicted delivery (data, sequence number `rcv_next`) is post-processed,
    /// `rcv_next` has moved past it (and past any held messages it releases, which this
    /// leaves out: out of date, not ahead): the acknowledgement is `rcv_next + 1`.
    fn predict_gossip(&self, p: &mut Predict<'_>) {
        if let Some(f) = self.f {
            p.set(f.ack, self.rcv_next.wrapping_add(1));
        }
    }

    fn gossips(&self) -> bool {
        self.f.is_some()
    }

    fn on_timer(&mut self, cx: &mut Cx<'_>) {
        let Some(f) = self.f else { return };
        let now = cx.now();
        if self.loss_at.is_some_and(|t| t <= now) {
            cold::<O>();
            self.detect_losses(cx);
        }
        if self.pto_at().is_some_and(|t| t <= now) {
            cold::<O>();
            self.on_probe_timeout(f, cx);
        }
        self.path_timer(cx);
        if self.ack_at.is_some_and(|t| t <= now) {
            self.send_ack(f, cx);
        }
        self.pump(f, cx);
        self.rearm(cx);
    }
}

/// The `window` spec's argument: a message count (the seed's window) or a controller's name
/// (`cubic`, `newreno`, `bbr`); none: CUBIC.
pub fn from_spec(args: Option<&str>) -> Result<Window, String> {
    match args.map(str::trim) {
        None | Some("") => Ok(Window::with_controller(Algorithm::Cubic.build(INITIAL_MTU))),
        Some(a) => {
            if let Some(alg) = Algorithm::parse(a) {
                return Ok(Window::with_controller(alg.build(INITIAL_MTU)));
            }
            match a.parse::<usize>() {
                Ok(n) if (1..=1024).contains(&n) => Ok(Window::new(n)),
                Ok(n) => Err(format!("{n} is outside 1..=1024")),
                Err(_) => Err(format!(
                    "`{a}` is neither a message count nor a controller (cubic, newreno, bbr)"
                )),
            }
        }
    }
}
