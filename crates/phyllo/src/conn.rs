//! A sans-IO connection: a stack of canonical layers between an application and a link.
//!
//! Quinn-proto style: the driver feeds datagrams ([`Connection::handle_datagram`]) and time
//! ([`Connection::handle_timeout`]), the application feeds messages ([`Connection::send`]); the
//! connection produces datagrams ([`Connection::poll_transmit`]), deliveries
//! ([`Connection::poll_delivery`]) and its next deadline ([`Connection::poll_timeout`]). It
//! never touches a socket or a clock, so every run replays.
//!
//! The layered path of seed 004 §3.1: for each message the pre-phases of the layers run in
//! order (down when sending, up when delivering); when the message leaves the stack the
//! post-phases run. Messages that layers originate in post-phases (acks, retransmissions,
//! fragments, reassembled or reordered messages) are queued and processed in turn within the
//! same call, so a call processes everything to completion.

use crate::accel::Pa;
use crate::field::ByteOrder;
use crate::layer::{
    Cx, DropReason, Handoff, HeaderCopy, InitCx, LayerCounters, Origin, Packet, Role, Verdict,
};
use crate::layout::{FieldRegistry, Layout, LayoutError};
use crate::msg::{Msg, Pool};
use crate::stack::{build_dyn, DynStack, LayerSet, SpecError};
use crate::time::{earliest, Time};
use std::collections::VecDeque;
use thiserror::Error;

/// Configuration of a connection.
#[derive(Clone, Debug)]
pub struct Config {
    /// This end's role.
    pub role: Role,
    /// Pre-shared key for `seal` (both ends must agree).
    pub psk: [u8; 32],
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
}

impl Config {
    /// Defaults for `role`: a fixed demonstration key (use [`Config::with_psk`] for real use),
    /// 1 MiB messages.
    pub fn new(role: Role) -> Config {
        Config {
            role,
            psk: *b"phyllo demo key: replace me!!!!!",
            max_message: 1 << 20,
            max_queue: 4096,
            accelerate: false,
            mtu: 1400,
            order: ByteOrder::NATIVE,
            cookie: None,
        }
    }

    /// Defaults for `role`, with the Protocol Accelerator on.
    pub fn accelerated(role: Role) -> Config {
        Config {
            accelerate: true,
            ..Config::new(role)
        }
    }

    /// The same with a pre-shared key.
    pub fn with_psk(mut self, psk: [u8; 32]) -> Config {
        self.psk = psk;
        self
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

/// Connection counters.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Stats {
    /// Application messages accepted.
    pub sent_msgs: u64,
    /// Datagrams handed to the link.
    pub datagrams_out: u64,
    /// Bytes handed to the link.
    pub bytes_out: u64,
    /// Datagrams received from the link.
    pub datagrams_in: u64,
    /// Messages delivered to the application.
    pub delivered: u64,
    /// Datagrams dropped because the transmit queue was full.
    pub tx_queue_drops: u64,
    /// Input shorter than the header area.
    pub truncated: u64,
    /// Per-layer drops, indexed like the stack.
    pub layers: Vec<(&'static str, LayerCounters)>,
}

impl Stats {
    /// Total drops of input, all layers and reasons.
    pub fn input_drops(&self) -> u64 {
        self.truncated
            + self
                .layers
                .iter()
                .flat_map(|(_, c)| c.drops.iter().map(|(_, n)| *n))
                .sum::<u64>()
    }

    /// Drops for `reason`, all layers.
    pub fn drops(&self, reason: DropReason) -> u64 {
        self.layers.iter().map(|(_, c)| c.drops(reason)).sum()
    }
}

/// A connection over the stack `S`.
pub struct Connection<S: LayerSet = DynStack> {
    pub(crate) layers: S,
    pub(crate) layout: Layout,
    pub(crate) pool: Pool,
    pub(crate) out: VecDeque<Msg>,
    pub(crate) delivered: VecDeque<Msg>,
    pub(crate) queue: VecDeque<(Origin, Msg)>,
    pub(crate) kept: Vec<(usize, Msg)>,
    pub(crate) timers: Vec<Option<Time>>,
    pub(crate) stats: Stats,
    pub(crate) cfg: Config,
    /// Seed 004's disable counters: send, deliver (raised by layers, zero = enabled).
    pub(crate) disable: [u32; 2],
    pub(crate) pa: Option<Box<Pa>>,
    pub(crate) unpack_scratch: Vec<(usize, usize)>,
    /// Header area that layer-originated messages start from (the accelerator's fields set).
    pub(crate) template: HeaderCopy,
    /// The byte order the datagram being delivered was written in (the accelerator converts
    /// headers to the layout's order; the covered checksum needs the sender's).
    pub(crate) rx_wire: ByteOrder,
}

/// A connection over a dynamic stack.
pub type DynConnection = Connection<DynStack>;

impl Connection<DynStack> {
    /// A connection over the dynamic stack described by `spec`.
    pub fn from_spec(spec: &str, cfg: Config) -> Result<DynConnection, BuildError> {
        Connection::new(build_dyn(spec)?, cfg)
    }
}

impl<S: LayerSet> Connection<S> {
    /// A connection over `layers`, with the traditional per-layer 4-byte-aligned layout.
    pub fn new(mut layers: S, cfg: Config) -> Result<Connection<S>, BuildError> {
        let n = layers.count();
        let mut reg = FieldRegistry::new();
        let icx = InitCx {
            role: cfg.role,
            psk: cfg.psk,
            max_message: cfg.max_message,
        };
        for i in 0..n {
            reg.set_layer(i);
            layers.init_at(i, &mut reg, &icx);
        }
        let (layout, pa) = if cfg.accelerate {
            let f = crate::accel::declare(&mut reg);
            let layout = Layout::compact(reg.specs(), n, cfg.order)?;
            let pa = crate::accel::build(
                &layers,
                &layout,
                f,
                cfg.mtu,
                cfg.role == Role::Initiator,
                cfg.cookie,
            )?;
            (layout, Some(Box::new(pa)))
        } else {
            (Layout::per_layer_aligned(reg.specs(), n, 4)?, None)
        };
        let layout_order = layout.order();
        let stats = Stats {
            layers: (0..n)
                .map(|i| (layers.name_at(i), LayerCounters::default()))
                .collect(),
            ..Stats::default()
        };
        let mut c = Connection {
            layers,
            layout,
            pool: Pool::default(),
            out: VecDeque::with_capacity(64),
            delivered: VecDeque::with_capacity(64),
            queue: VecDeque::with_capacity(64),
            kept: Vec::with_capacity(4),
            timers: vec![None; n],
            stats,
            cfg,
            disable: [0; 2],
            pa,
            unpack_scratch: Vec::new(),
            template: HeaderCopy::zeroed(0),
            rx_wire: layout_order,
        };
        c.update_template();
        Ok(c)
    }

    /// The layout in force.
    pub fn layout(&self) -> &Layout {
        &self.layout
    }

    /// Counters.
    pub fn stats(&self) -> &Stats {
        &self.stats
    }

    /// The layers.
    pub fn layers(&self) -> &S {
        &self.layers
    }

    /// Whether [`send`](Self::send) would accept a message now.
    pub fn can_send(&self) -> bool {
        if self.pa.is_some() {
            self.pa_can_accept()
        } else {
            self.layers.can_accept()
        }
    }

    /// Nothing to transmit, no timer pending, no layer busy.
    pub fn is_idle(&self) -> bool {
        self.out.is_empty() && !self.layers.busy() && !self.pa_busy()
    }

    /// Whether [`post_process`](Self::post_process) has work: deferred post-processing or a
    /// backlog waiting to be sent packed (accelerated connections only).
    pub fn needs_post_process(&self) -> bool {
        self.pa_actionable()
    }

    /// Send an application message (copied into a pooled buffer; [`send_msg`](Self::send_msg)
    /// takes one the application filled itself).
    pub fn send(&mut self, now: Time, data: &[u8]) -> Result<(), SendError> {
        self.check_send(data.len())?;
        let m = self.pool.alloc_copy(data);
        self.send_accepted(now, m);
        Ok(())
    }

    /// Send an application message already in a buffer, without copying it: the buffer
    /// should come from [`alloc`](Self::alloc), so the headers go in its headroom. On an
    /// error the buffer goes back to the pool.
    #[inline(always)]
    pub fn send_msg(&mut self, now: Time, m: Msg) -> Result<(), SendError> {
        if let Err(e) = self.check_send(m.len()) {
            self.pool.free(m);
            return Err(e);
        }
        self.send_accepted(now, m);
        Ok(())
    }

    /// Whether a message of `len` bytes may be sent now.
    #[inline]
    fn check_send(&self, len: usize) -> Result<(), SendError> {
        if len > self.cfg.max_message {
            return Err(SendError::TooLarge {
                len,
                max: self.cfg.max_message,
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
        self.stats.sent_msgs += 1;
        if self.pa.is_some() {
            self.pa_send(now, m);
        } else {
            self.send_layered(now, m);
        }
    }

    /// Send a message down the layers (each connection takes one path or the other, so
    /// each stays apart: callgrind counted ~25 instructions of set-up a message when both
    /// shared one function).
    #[inline(never)]
    fn send_layered(&mut self, now: Time, mut m: Msg) {
        m.push_front(self.layout.header_len());
        self.run_send(now, 0, m);
        self.drain(now);
    }

    /// Handle a datagram from the link (copied into a pooled buffer).
    pub fn handle_datagram(&mut self, now: Time, data: &[u8]) {
        let m = self.pool.alloc_copy(data);
        self.handle_msg(now, m);
    }

    /// Handle a datagram already in a [`Msg`] (e.g. from [`alloc`](Self::alloc)).
    pub fn handle_msg(&mut self, now: Time, m: Msg) {
        self.stats.datagrams_in += 1;
        if self.pa.is_some() {
            self.pa_receive(now, m);
        } else {
            self.receive_layered(now, m);
        }
    }

    /// Deliver a datagram up the layers (apart from the accelerator's path, as
    /// [`send_layered`](Self::send_layered)).
    #[inline(never)]
    fn receive_layered(&mut self, now: Time, m: Msg) {
        if m.len() < self.layout.header_len() {
            self.stats.truncated += 1;
            self.pool.free(m);
            return;
        }
        let n = self.layers.count();
        self.run_deliver(now, n, m);
        self.drain(now);
    }

    /// Run the timers that are due.
    pub fn handle_timeout(&mut self, now: Time) {
        self.post_process(now);
        for i in 0..self.timers.len() {
            if self.timers[i].is_some_and(|t| t <= now) {
                self.timers[i] = None;
                self.with_cx(now, i, |layers, cx| layers.on_timer_at(i, cx));
            }
        }
        self.drain(now);
        self.update_predictions();
    }

    /// The next datagram to put on the link. Give it back with [`recycle`](Self::recycle).
    /// [`transmit_with`](Self::transmit_with) is cheaper for an accelerated connection: it
    /// lends the datagrams instead, so the retransmission copy can be the datagram itself.
    #[inline]
    pub fn poll_transmit(&mut self) -> Option<Msg> {
        let m = self.out.pop_front()?;
        if self.awaits(&m) {
            return self.settle_reclaim(m, false);
        }
        Some(m)
    }

    /// Lend the link up to `max` queued datagrams, oldest first, without giving up their
    /// buffers: `send` puts them on the link and returns how many it took (an error leaves
    /// them all queued). The taken ones go back to the pool, or become the retransmission
    /// copy an accelerated send deferred (see `Reclaim` in the accelerator's engine): no
    /// copy on the send path. Returns how many were taken.
    pub fn transmit_with<E>(
        &mut self,
        max: usize,
        send: impl FnOnce(&[Msg]) -> Result<usize, E>,
    ) -> Result<usize, E> {
        // Contiguous, so a wrapped ring does not split a batch in two calls (the datagrams
        // are moved within the ring at most once per wrap).
        let queued = &*self.out.make_contiguous();
        let n = queued.len().min(max);
        let taken = send(&queued[..n])?.min(n);
        for _ in 0..taken {
            if let Some(m) = self.out.pop_front() {
                self.sent(m);
            }
        }
        Ok(taken)
    }

    /// A datagram the link is done with: the deferred retransmission copy if it is awaited,
    /// else back to the pool.
    #[inline]
    fn sent(&mut self, m: Msg) {
        if self.awaits(&m) {
            self.settle_reclaim(m, true);
        } else {
            self.pool.free(m);
        }
    }

    /// Datagrams queued for the link.
    pub fn transmit_ready(&self) -> usize {
        self.out.len()
    }

    /// The next message for the application (its bytes are [`Msg::data`]).
    #[inline]
    pub fn poll_delivery(&mut self) -> Option<Msg> {
        self.delivered.pop_front()
    }

    /// Messages waiting in [`poll_delivery`](Self::poll_delivery).
    pub fn delivered_ready(&self) -> usize {
        self.delivered.len()
    }

    /// When [`handle_timeout`](Self::handle_timeout) should next be called.
    pub fn poll_timeout(&self) -> Option<Time> {
        self.timers.iter().copied().fold(None, earliest)
    }

    /// Return a message buffer to the pool.
    #[inline]
    pub fn recycle(&mut self, m: Msg) {
        self.pool.free(m)
    }

    /// A pooled buffer to receive a datagram into.
    pub fn alloc(&mut self) -> Msg {
        self.pool.alloc()
    }

    /// The buffer pool (for drivers and counting tests).
    pub fn pool(&self) -> &Pool {
        &self.pool
    }

    pub(crate) fn drain(&mut self, now: Time) {
        // Each originated message is processed to completion; a misbehaving layer that
        // originates without end is cut off rather than hanging the caller.
        let mut budget = 1_000_000u32;
        while let Some((origin, m)) = self.queue.pop_front() {
            budget -= 1;
            if budget == 0 {
                self.queue.clear();
                break;
            }
            let older = self.queue.len();
            match origin {
                Origin::Down(from) => self.run_send(now, from, m),
                Origin::Up(from) => self.run_deliver(now, from, m),
            }
            // Depth first: what this message's processing originated (e.g. the message a
            // reassembly completed) goes before older siblings (the next in-order messages),
            // so FIFO order survives layers that hold messages back.
            let new = self.queue.len() - older;
            self.queue.rotate_right(new);
        }
    }

    /// Pre-send from layer `from` down; on reaching the bottom, post-send and transmit.
    pub(crate) fn run_send(&mut self, now: Time, from: usize, mut m: Msg) {
        let n = self.layers.count();
        let stop = self.pre_phases(now, from..n, true, &mut m);
        if let Some((i, Verdict::Drop(r))) = stop {
            self.stats.layers[i].1.count(r);
            self.pool.free(m);
            for (_, k) in self.kept.drain(..) {
                self.pool.free(k);
            }
            return;
        }
        let hdr = HeaderCopy::of(&m, self.layout.header_len());
        let last = stop.map_or(n, |(i, _)| i);
        for i in from..last {
            let copy = self.take_kept(i);
            self.post_send(now, i, &hdr, Handoff::Passed { copy });
        }
        match stop {
            Some((i, _)) => self.post_send(now, i, &hdr, Handoff::Absorbed(m)),
            None => self.transmit(m),
        }
    }

    fn take_kept(&mut self, layer: usize) -> Option<Msg> {
        let pos = self.kept.iter().position(|(l, _)| *l == layer)?;
        Some(self.kept.swap_remove(pos).1)
    }

    /// Run the pre-phases of `layers` in that order on `m` — `pre_send` if `send`, else
    /// `pre_deliver` — until one does not continue: that layer and its verdict.
    pub(crate) fn pre_phases(
        &mut self,
        now: Time,
        layers: impl Iterator<Item = usize>,
        send: bool,
        m: &mut Msg,
    ) -> Option<(usize, Verdict)> {
        let mut pkt = Packet {
            msg: m,
            layout: &self.layout,
            order: self.layout.order(),
            wire: if send {
                self.layout.order()
            } else {
                self.rx_wire
            },
            now,
            layer: 0,
            pool: &mut self.pool,
            kept: &mut self.kept,
        };
        for i in layers {
            pkt.layer = i;
            let v = if send {
                self.layers.pre_send_at(i, &mut pkt)
            } else {
                self.layers.pre_deliver_at(i, &mut pkt)
            };
            if v != Verdict::Continue {
                return Some((i, v));
            }
        }
        None
    }

    /// Call into layer `i` with a context for its post-phase or timer.
    fn with_cx(&mut self, now: Time, i: usize, f: impl FnOnce(&mut S, &mut Cx<'_>)) {
        let mut cx = Cx {
            now,
            layer: i,
            layout: &self.layout,
            pool: &mut self.pool,
            queue: &mut self.queue,
            timer: &mut self.timers[i],
            counters: &mut self.stats.layers[i].1,
            disable: &mut self.disable,
            template: &self.template.bytes,
        };
        f(&mut self.layers, &mut cx);
    }

    pub(crate) fn post_send(&mut self, now: Time, i: usize, hdr: &HeaderCopy, h: Handoff) {
        self.with_cx(now, i, |layers, cx| {
            let layout = cx.layout;
            layers.post_send_at(i, &hdr.view(layout, layout.order()), h, cx)
        });
    }

    pub(crate) fn post_deliver(&mut self, now: Time, i: usize, hdr: &HeaderCopy, h: Handoff) {
        self.with_cx(now, i, |layers, cx| {
            let layout = cx.layout;
            layers.post_deliver_at(i, &hdr.view(layout, layout.order()), h, cx)
        });
    }

    pub(crate) fn transmit(&mut self, mut m: Msg) {
        self.pa_wrap(&mut m);
        self.queue_out(m);
    }

    /// Queue a finished datagram for the link (the oldest is dropped if the queue is full).
    #[inline]
    pub(crate) fn queue_out(&mut self, m: Msg) {
        self.stats.datagrams_out += 1;
        self.stats.bytes_out += m.len() as u64;
        if self.out.len() >= self.cfg.max_queue {
            self.stats.tx_queue_drops += 1;
            // A dropped datagram the retransmission copy awaits becomes the copy (the
            // reliability layer then sends it again).
            if let Some(old) = self.out.pop_front() {
                self.sent(old);
            }
        }
        self.out.push_back(m);
    }

    /// Pre-deliver from layer `below - 1` up; on reaching the top, post-deliver and hand the
    /// body to the application.
    pub(crate) fn run_deliver(&mut self, now: Time, below: usize, mut m: Msg) {
        let hl = self.layout.header_len();
        if m.len() < hl {
            self.stats.truncated += 1;
            self.pool.free(m);
            return;
        }
        let stop = self.pre_phases(now, (0..below).rev(), false, &mut m);
        for (_, k) in self.kept.drain(..) {
            self.pool.free(k);
        }
        let hdr = HeaderCopy::of(&m, hl);
        // Post-delivery runs top down: first the message reaches the application (or the
        // layer that absorbed it), then the layers below that passed it update their state.
        // That order keeps FIFO: whatever the upper layer releases (a reassembled message)
        // is queued before what a lower layer releases next (the following in-order messages).
        let first_passed = stop.map_or(0, |(i, _)| i + 1);
        match stop {
            None => {
                let packed = self.pa_packed(&hdr.bytes[..hdr.len]);
                m.pop_front(hl);
                let n = self.deliver_to_app(m, packed);
                if let Some(pa) = self.pa.as_mut() {
                    pa.stats.slow_deliver_msgs += n;
                }
            }
            Some((i, Verdict::Absorb)) => {
                self.post_deliver(now, i, &hdr, Handoff::Absorbed(m));
            }
            Some((i, Verdict::Drop(r))) => {
                self.stats.layers[i].1.count(r);
                self.pool.free(m);
            }
            Some((_, Verdict::Continue)) => self.pool.free(m), // never: Continue does not stop
        }
        // Layers that passed the message post-process it whatever happened above them: from
        // their point of view it was delivered.
        for i in first_passed..below {
            self.post_deliver(now, i, &hdr, Handoff::Passed { copy: None });
        }
    }
}
