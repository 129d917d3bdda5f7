//! `window`: a sliding-window protocol — reliable, FIFO, exactly-once delivery.
//!
//! The basic sliding window of van Renesse, "Masking the Overhead of Protocol Layering" (seed 004
//! §5) (window of 16 messages by default), in canonical form. Fields: `kind` (data or ack) and
//! `seq` are protocol-specific (they depend only on state, so the next ones are predictable);
//! `ack`, the cumulative acknowledgement (the next sequence number expected from the peer), is
//! gossip, piggybacked on every data message.
//!
//! - Pre-send stamps `seq` and `ack` and keeps a copy of the message for retransmission; if the
//!   window is full (or older messages wait) it absorbs the message into a bounded backlog.
//! - Post-send advances `snd_next`, stores the copy and arms the retransmission timer.
//! - Pre-deliver passes the in-order message and absorbs everything else (acks, out-of-order
//!   and duplicate data) for the post-phase to sort out.
//! - Post-deliver consumes the ack, releases acknowledged copies, sends from the backlog,
//!   advances `rcv_next`, delivers buffered successors, and schedules an ack: at once after
//!   half a window of unacknowledged data or a duplicate, otherwise after a short delay unless
//!   data going the other way carries it first.
//! - On timeout everything unacknowledged is retransmitted and the timeout doubles (capped at
//!   `max_rto`), so a dead path sees fewer and fewer retransmissions; an acknowledgement of
//!   new data ends the backoff. Otherwise the timeout follows the measured round trip (RFC
//!   6298, Karn's rule).
//!
//! Sequence numbers are 16 bits on the wire, 64 bits in the state; with at most 1024
//! messages in flight the receiver places every wire value unambiguously.

use crate::field::{FieldClass, FieldHandle};
use crate::layer::{Cx, DropReason, Handoff, Hdr, InitCx, Layer, Packet, Predict, Verdict};
use crate::layout::FieldRegistry;
use crate::msg::Msg;
use crate::outline::cold;
use crate::time::Time;
use std::collections::VecDeque;
use std::time::Duration;

const KIND_DATA: u64 = 0;
const KIND_ACK: u64 = 1;
const SEQ_BITS: u8 = 16;
const SEQ_MASK: u64 = (1 << SEQ_BITS) - 1;

/// Configuration of the window layer.
#[derive(Clone, Debug)]
pub struct WindowConfig {
    /// Messages in flight at most.
    pub size: usize,
    /// Application messages waiting for room at most (beyond it `send` says WouldBlock).
    pub backlog: usize,
    /// First retransmission timeout (before any round trip was measured).
    pub rto: Duration,
    /// Smallest retransmission timeout.
    pub min_rto: Duration,
    /// Largest retransmission timeout.
    pub max_rto: Duration,
    /// How long an ack may wait for data to ride on.
    pub ack_delay: Duration,
    /// The name the layer goes by (`window`; the latency stacks' transports call it `tcp` or
    /// `chan`).
    pub name: &'static str,
    /// A transport header of ports and a checksum (the latency experiments' TCP-like stack).
    pub transport: Option<Ports>,
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
    /// Defaults for a window of `size`.
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

/// The window layer. `O` turns on outlining of its rare paths ([`crate::outline`]); the
/// ordinary layer is `Window` (`O = false`).
#[derive(Debug)]
pub struct Window<const O: bool = false> {
    cfg: WindowConfig,
    f: Option<Fields>,
    // Sender.
    snd_una: u64,
    snd_next: u64,
    unacked: VecDeque<Msg>,
    /// When each unacknowledged message was first sent; `None` once retransmitted (Karn).
    sent_at: VecDeque<Option<Time>>,
    backlog: VecDeque<Msg>,
    srtt: Option<Duration>,
    rttvar: Duration,
    rto: Duration,
    rto_at: Option<Time>,
    /// Whether this layer holds the accelerator's send header disabled (window full).
    send_disabled: bool,
    // Receiver.
    rcv_next: u64,
    ooo: Vec<Option<Msg>>,
    unacked_rx: usize,
    ack_at: Option<Time>,
}

impl Window {
    /// A window of `size` messages with default timers.
    pub fn new(size: usize) -> Window {
        Window::with_config(WindowConfig::new(size))
    }

    /// A window with an explicit configuration.
    pub fn with_config(cfg: WindowConfig) -> Window {
        Window::build(cfg)
    }
}

impl<const O: bool> Window<O> {
    /// A window with an explicit configuration, outlined or not as `O` says.
    pub fn build(cfg: WindowConfig) -> Window<O> {
        let size = cfg.size.clamp(1, 1024);
        Window {
            rto: cfg.rto,
            cfg: WindowConfig { size, ..cfg },
            f: None,
            snd_una: 0,
            snd_next: 0,
            unacked: VecDeque::with_capacity(size),
            sent_at: VecDeque::with_capacity(size),
            srtt: None,
            rttvar: Duration::ZERO,
            backlog: VecDeque::new(),
            rto_at: None,
            send_disabled: false,
            rcv_next: 0,
            // Allocated when the first message arrives out of order.
            ooo: Vec::new(),
            unacked_rx: 0,
            ack_at: None,
        }
    }

    /// Messages sent but not yet acknowledged.
    pub fn in_flight(&self) -> usize {
        self.unacked.len()
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

    fn full(&self) -> bool {
        self.unacked.len() >= self.cfg.size || !self.backlog.is_empty()
    }

    /// Place a 16-bit wire value relative to `base` (the value within ±2^15 of it).
    fn unwrap_seq(base: u64, wire: u64) -> i64 {
        ((wire.wrapping_sub(base) & SEQ_MASK) as u16) as i16 as i64
    }

    /// Keep the accelerator's send-disable counter in step with a full window (seed 004
    /// §3.2: "when the send window of a sliding window protocol is full").
    fn sync_disable(&mut self, cx: &mut Cx<'_>) {
        let full = self.full();
        if full != self.send_disabled {
            if full {
                cx.raise_send_disable();
            } else {
                cx.lower_send_disable();
            }
            self.send_disabled = full;
        }
    }

    fn rearm(&mut self, cx: &mut Cx<'_>) {
        self.sync_disable(cx);
        match (self.rto_at, self.ack_at) {
            (Some(a), Some(b)) => cx.set_timer(a.min(b)),
            (Some(a), None) | (None, Some(a)) => cx.set_timer(a),
            (None, None) => cx.clear_timer(),
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
        let copy = cx.copy(&m);
        self.sent(copy, cx.now());
        cx.send_down(m);
    }

    /// Book-keeping after a data message left: the sequence number is used, its copy kept,
    /// the piggybacked ack sent.
    fn sent(&mut self, copy: Msg, now: Time) {
        self.snd_next += 1;
        self.unacked.push_back(copy);
        self.sent_at.push_back(Some(now));
        if self.rto_at.is_none() {
            self.rto_at = Some(now + self.rto);
        }
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

    fn send_ack(&mut self, f: Fields, cx: &mut Cx<'_>) {
        let mut m = cx.new_packet();
        cx.set(&mut m, f.kind, KIND_ACK);
        cx.set(&mut m, f.seq, self.snd_next);
        cx.set(&mut m, f.ack, self.rcv_next);
        self.stamp(&mut m, f, KIND_ACK, self.snd_next, cx);
        cx.send_down(m);
        self.ack_sent();
    }

    /// Consume a cumulative ack; release acknowledged copies; fill the window from the backlog.
    fn on_ack(&mut self, wire_ack: u64, f: Fields, cx: &mut Cx<'_>) {
        let d = Self::unwrap_seq(self.snd_una, wire_ack);
        if d > 0 && d as usize <= self.unacked.len() {
            let mut sample = None;
            for _ in 0..d {
                if let Some(m) = self.unacked.pop_front() {
                    cx.free(m);
                }
                if let Some(Some(t)) = self.sent_at.pop_front() {
                    sample = Some(cx.now().since(t));
                }
            }
            self.snd_una += d as u64;
            match sample {
                Some(r) => self.rtt_sample(r),
                // Progress without a sample (Karn: only retransmitted messages were
                // acknowledged): the path works again, so the backoff ends.
                None => self.rto = self.estimated_rto(),
            }
            self.rto_at = if self.unacked.is_empty() {
                None
            } else {
                Some(cx.now() + self.rto)
            };
        }
        while self.unacked.len() < self.cfg.size {
            let Some(m) = self.backlog.pop_front() else {
                break;
            };
            self.send_data(m, f, cx);
        }
    }

    /// RFC 6298's estimator: smoothed round trip and its variation give the timeout.
    fn rtt_sample(&mut self, r: Duration) {
        match self.srtt {
            None => {
                self.srtt = Some(r);
                self.rttvar = r / 2;
            }
            Some(s) => {
                let diff = s.abs_diff(r);
                self.rttvar = (self.rttvar * 3 + diff) / 4;
                self.srtt = Some((s * 7 + r) / 8);
            }
        }
        self.rto = self.estimated_rto();
    }

    /// The timeout the round-trip estimate gives (RFC 6298), without backoff; the first
    /// timeout before any measurement.
    fn estimated_rto(&self) -> Duration {
        match self.srtt {
            Some(s) => (s + self.rttvar * 4).clamp(self.cfg.min_rto, self.cfg.max_rto),
            None => self.cfg.rto,
        }
    }

    /// The smoothed round-trip time, once measured.
    pub fn srtt(&self) -> Option<Duration> {
        self.srtt
    }

    fn ack_soon(&mut self, now: Time) {
        self.unacked_rx += 1;
        if self.ack_at.is_none() {
            self.ack_at = Some(now + self.cfg.ack_delay);
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

    fn init(&mut self, fields: &mut FieldRegistry, _: &InitCx) {
        let transport = self.cfg.transport.map(|ports| Transport {
            sport: fields.add_field(FieldClass::ProtoSpecific, "sport", 16, None),
            dport: fields.add_field(FieldClass::ProtoSpecific, "dport", 16, None),
            sum: fields.add_field(FieldClass::MsgSpecific, "tsum", 16, None),
            ports,
        });
        self.f = Some(Fields {
            kind: fields.add_field(FieldClass::ProtoSpecific, "kind", 2, None),
            seq: fields.add_field(FieldClass::ProtoSpecific, "seq", SEQ_BITS, None),
            ack: fields.add_field(FieldClass::Gossip, "ack", SEQ_BITS, None),
            transport,
        });
    }

    fn can_accept(&self) -> bool {
        self.backlog.len() < self.cfg.backlog
    }

    fn busy(&self) -> bool {
        self.holds_unacked() || self.ack_at.is_some()
    }

    fn holds_unacked(&self) -> bool {
        !self.unacked.is_empty() || !self.backlog.is_empty()
    }

    fn shrink(&mut self) {
        if self.unacked.is_empty() {
            self.unacked.shrink_to_fit();
            self.sent_at.shrink_to_fit();
        }
        if self.backlog.is_empty() {
            self.backlog.shrink_to_fit();
        }
        if self.ooo.iter().all(Option::is_none) {
            self.ooo = Vec::new();
        }
    }

    fn pre_send(&self, pkt: &mut Packet<'_>) -> Verdict {
        let Some(f) = self.f else {
            return Verdict::Continue;
        };
        if self.full() {
            cold::<O>();
            return Verdict::Absorb;
        }
        pkt.set(f.kind, KIND_DATA);
        pkt.set(f.seq, self.snd_next);
        pkt.set(f.ack, self.rcv_next);
        if let Some(t) = f.transport {
            for (h, v) in t.stamp(KIND_DATA, self.snd_next, pkt.body()) {
                pkt.set(h, v);
            }
        }
        pkt.keep_copy();
        Verdict::Continue
    }

    fn post_send(&mut self, hdr: &Hdr<'_>, h: Handoff, cx: &mut Cx<'_>) {
        match h {
            Handoff::Passed { copy: Some(c) } => {
                self.sent(c, cx.now());
                if let Some(f) = self.f {
                    self.acked_up_to(hdr.get(f.ack), cx.now());
                }
            }
            Handoff::Passed { copy: None } => {}
            Handoff::Absorbed(m) => {
                cold::<O>();
                self.backlog.push_back(m)
            }
        }
        self.rearm(cx);
    }

    fn pre_deliver(&self, pkt: &mut Packet<'_>) -> Verdict {
        let Some(f) = self.f else {
            return Verdict::Continue;
        };
        if let Some(t) = f.transport {
            // The peer's source port is our `peer`, its destination our `local`.
            let (sport, dport) = (pkt.get(t.sport), pkt.get(t.dport));
            if sport != u64::from(t.ports.peer) || dport != u64::from(t.ports.local) {
                cold::<O>();
                return Verdict::Drop(DropReason::Malformed);
            }
            let want = transport_sum(sport, dport, pkt.get(f.kind), pkt.get(f.seq), pkt.body());
            if pkt.get(t.sum) != want {
                cold::<O>();
                return Verdict::Drop(DropReason::Checksum);
            }
        }
        match pkt.get(f.kind) {
            KIND_DATA if pkt.get(f.seq) == self.rcv_next & SEQ_MASK => Verdict::Continue,
            KIND_DATA | KIND_ACK => Verdict::Absorb,
            _ => {
                cold::<O>();
                Verdict::Drop(DropReason::Malformed)
            }
        }
    }

    fn post_deliver(&mut self, hdr: &Hdr<'_>, h: Handoff, cx: &mut Cx<'_>) {
        let Some(f) = self.f else { return };
        self.on_ack(hdr.get(f.ack), f, cx);
        match h {
            Handoff::Passed { .. } => {
                // The in-order message went up.
                self.rcv_next += 1;
                self.ack_soon(cx.now());
                let w = self.cfg.size;
                while let Some(m) = self
                    .ooo
                    .get_mut((self.rcv_next % w as u64) as usize)
                    .and_then(Option::take)
                {
                    self.rcv_next += 1;
                    self.unacked_rx += 1;
                    cx.deliver_up(m);
                }
                if self.unacked_rx * 2 >= w {
                    self.send_ack(f, cx);
                }
            }
            Handoff::Absorbed(m) if hdr.get(f.kind) == KIND_DATA => {
                // Out of order or a duplicate: loss, reordering or a lost ack.
                cold::<O>();
                let d = Self::unwrap_seq(self.rcv_next, hdr.get(f.seq));
                let w = self.cfg.size;
                if d < 0 {
                    // Already delivered: the peer missed our ack.
                    cx.count_drop(DropReason::Duplicate);
                    cx.free(m);
                    self.send_ack(f, cx);
                } else if (d as usize) < w {
                    let seq = self.rcv_next + d as u64;
                    if self.ooo.is_empty() {
                        self.ooo.resize_with(w, || None);
                    }
                    let slot = &mut self.ooo[(seq % w as u64) as usize];
                    if slot.is_none() {
                        *slot = Some(m);
                    } else {
                        cx.count_drop(DropReason::Duplicate);
                        cx.free(m);
                    }
                    // A gap: tell the sender where we are at once.
                    self.send_ack(f, cx);
                } else {
                    cx.count_drop(DropReason::OutOfWindow);
                    cx.free(m);
                }
            }
            Handoff::Absorbed(m) => cx.free(m), // an ack: consumed above
        }
        self.rearm(cx);
    }

    fn wants_copy(&self) -> bool {
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

    fn on_timer(&mut self, cx: &mut Cx<'_>) {
        let Some(f) = self.f else { return };
        let now = cx.now();
        if self.rto_at.is_some_and(|t| t <= now) {
            // A retransmission timeout: loss.
            cold::<O>();
            for i in 0..self.unacked.len() {
                let mut m = cx.copy(&self.unacked[i]);
                cx.set(&mut m, f.ack, self.rcv_next);
                cx.send_down(m);
            }
            self.sent_at.iter_mut().for_each(|t| *t = None);
            self.ack_sent();
            self.rto = (self.rto * 2).min(self.cfg.max_rto);
            self.rto_at = (!self.unacked.is_empty()).then(|| now + self.rto);
        }
        if self.ack_at.is_some_and(|t| t <= now) {
            self.send_ack(f, cx);
        }
        self.rearm(cx);
    }
}
