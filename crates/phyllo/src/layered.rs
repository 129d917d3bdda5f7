//! The layered core of a connection: a stack of canonical layers between an application and a
//! link, sans-IO (van Renesse, "Masking the Overhead of Protocol Layering" (seed 004 §3.1), the
//! layered path).
//!
//! For each message the pre-phases of the layers run in order (down when sending, up when
//! delivering); when the message leaves the stack the post-phases run. Messages that layers
//! originate in post-phases (acks, retransmissions, fragments, reassembled or reordered
//! messages) are queued and processed in turn within the same call, so a call processes
//! everything to completion.
//!
//! The core stands on its own: a [`Connection`](crate::Connection) without the accelerator is
//! this core and nothing more. It knows nothing of the Protocol Accelerator. What stands at its
//! two ends — where a datagram leaves the bottom of the stack for the link, and where a
//! message leaves the top for the application — is an [`Edge`]: [`Bare`] for a plain
//! connection; the accelerator's own for an accelerated one (it frames datagrams with the
//! preamble and unpacks packed messages). The accelerator drives the core through the
//! `pub(crate)` methods below and nothing else.

use crate::field::ByteOrder;
use crate::layer::{
    Cx, DropReason, Handoff, HeaderCopy, InitCx, LayerCounters, Origin, Packet, Refusals,
    RefusedAt, Verdict,
};
use crate::layout::{FieldRegistry, Layout, MAX_HEADER};
use crate::msg::{Msg, Pool};
use crate::plpmtu::PathMtu;
use crate::ready::{Ready, Split};
use crate::stack::LayerSet;
use crate::stack::PostParts;
use crate::time::{earliest, Time};
use std::collections::VecDeque;

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
    /// What the layers recorded under `name` ([`LayerCounters::event_count`]): a count or a
    /// peak, the largest any layer recorded (a name belongs to one layer: `window`'s
    /// `retransmit.order`, `pmtu.datagram`, …). 0 when none did.
    pub fn event(&self, name: &str) -> u64 {
        self.layers
            .iter()
            .map(|(_, l)| l.event_count(name))
            .max()
            .unwrap_or(0)
    }

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

/// What stands at the core's two ends.
pub(crate) trait Edge {
    /// A datagram (header area and body) leaves the bottom of the stack for the link: frame
    /// it.
    fn frame(&mut self, m: &mut Msg, header_len: usize);

    /// A datagram left the transmit queue without being handed on by value: the link is done
    /// with it, or the full queue evicted it. It goes back to `pool` unless the edge keeps it.
    fn release(&mut self, m: Msg, pool: &mut Pool) {
        pool.free(m)
    }

    /// A message leaves the top of the stack: `header` is its header area (already popped
    /// from `body`). Hand what the application gets to `to_app`; returns how many, or `None`
    /// if the edge refused it (counted by the edge).
    fn arrive(
        &mut self,
        header: &[u8],
        body: Msg,
        pool: &mut Pool,
        to_app: &mut Ready,
    ) -> Option<u64> {
        let _ = (header, pool);
        to_app.push(body);
        Some(1)
    }
}

/// The edge of a plain connection: datagrams leave as the layers made them, messages arrive
/// as the top layer passed them.
pub(crate) struct Bare;

impl Edge for Bare {
    #[inline(always)]
    fn frame(&mut self, _: &mut Msg, _: usize) {}
}

/// The layered connection over the stack `S`.
pub(crate) struct Core<S: LayerSet> {
    layers: S,
    layout: Layout,
    pool: Pool,
    out: VecDeque<Msg>,
    delivered: Ready,
    queue: VecDeque<(Origin, Msg)>,
    kept: Vec<(usize, Msg)>,
    timers: Vec<Option<Time>>,
    stats: Stats,
    max_queue: usize,
    /// Seed 004's disable counters: send, deliver (raised by layers, zero = enabled); and
    /// the send diversions, each of which also counts as a send disable.
    disable: [u32; 3],
    /// The header area layer-originated messages start from (zero, unless the edge has
    /// fields of its own there).
    template: HeaderCopy,
    /// The byte order the datagram being delivered was written in (an edge may convert
    /// headers to the layout's order; the covered checksum needs the sender's).
    rx_wire: ByteOrder,
    /// Received input refused so far.
    refusals: Refusals,
    /// The path's datagram size, as the top layer sees it ([`crate::plpmtu`]).
    path: PathMtu,
}

impl<S: LayerSet> Core<S> {
    /// Initialise every layer (seed 004's `add_field` calls go to `reg`), then let `layout`
    /// turn the registry into the layout in force. `icx` carries the session's keys; each
    /// layer gets its own, derived from them for its index (`DirectionKeys::for_layer`), so
    /// two layers that encrypt (`seal:seal`) never share a key or a nonce sequence.
    pub(crate) fn new<E>(
        mut layers: S,
        icx: &InitCx,
        outer: usize,
        max_queue: usize,
        reg: &mut FieldRegistry,
        layout: impl FnOnce(&mut FieldRegistry, usize) -> Result<Layout, E>,
    ) -> Result<Core<S>, E> {
        let n = layers.count();
        for i in 0..n {
            reg.set_layer(i);
            let cx = InitCx {
                role: icx.role,
                session: icx.session.as_ref().map(|k| k.for_layer(i)),
                max_message: icx.max_message,
                path: icx.path.for_layer(i),
            };
            layers.init_at(i, reg, &cx);
        }
        let layout = layout(reg, n)?;
        // What a datagram carries besides layer i's body: the header area, the trailers of
        // the layers below, and `outer` (the accelerator's preamble, the driver's header).
        let mut below = outer + layout.header_len();
        let mut overheads = vec![0; n];
        for i in (0..n).rev() {
            overheads[i] = below;
            below += layers.trailer_len_at(i);
        }
        icx.path.set_overheads(overheads);
        let path = icx.path.for_layer(0);
        let keyed = (0..n).rev().find(|&i| layers.needs_keys_at(i));
        let stats = Stats {
            layers: (0..n)
                .map(|i| (layers.name_at(i), LayerCounters::default()))
                .collect(),
            ..Stats::default()
        };
        Ok(Core {
            rx_wire: layout.order(),
            template: HeaderCopy::zeroed(layout.header_len()),
            layers,
            layout,
            pool: Pool::default(),
            // Queues grow with the first traffic (a connection that never carries any, like
            // most of a server's idle sessions, costs nothing for them).
            out: VecDeque::new(),
            delivered: Ready::new(),
            queue: VecDeque::new(),
            kept: Vec::new(),
            timers: vec![None; n],
            stats,
            max_queue,
            disable: [0; 3],
            refusals: Refusals {
                keyed,
                ..Refusals::default()
            },
            path,
        })
    }

    /// The layout in force.
    #[inline(always)]
    pub(crate) fn layout(&self) -> &Layout {
        &self.layout
    }

    /// The path's datagram size, as the top layer sees it.
    #[inline(always)]
    pub(crate) fn path(&self) -> &PathMtu {
        &self.path
    }

    /// The layers.
    #[inline(always)]
    pub(crate) fn layers(&self) -> &S {
        &self.layers
    }

    /// Counters.
    #[inline(always)]
    pub(crate) fn stats(&self) -> &Stats {
        &self.stats
    }

    /// Counters, to count in.
    #[inline(always)]
    pub(crate) fn stats_mut(&mut self) -> &mut Stats {
        &mut self.stats
    }

    /// The buffer pool.
    #[inline(always)]
    pub(crate) fn pool(&mut self) -> &mut Pool {
        &mut self.pool
    }

    /// The buffer pool, to look at.
    pub(crate) fn pool_ref(&self) -> &Pool {
        &self.pool
    }

    /// Whether a layer disabled the predicted send header (seed 004 §3.2).
    #[inline(always)]
    pub(crate) fn send_disabled(&self) -> bool {
        self.disable[0] > 0
    }

    /// Whether the send header is disabled only by diversions
    /// ([`Cx::raise_send_divert`](crate::layer::Cx::raise_send_divert)): a message sent now
    /// takes the layered path instead of waiting.
    #[inline]
    pub(crate) fn send_diverted_only(&self) -> bool {
        self.disable[2] > 0 && self.disable[0] == self.disable[2]
    }

    /// Whether a layer disabled the predicted delivery header.
    #[inline(always)]
    pub(crate) fn deliver_disabled(&self) -> bool {
        self.disable[1] > 0
    }

    /// Set the header area layer-originated messages start from.
    pub(crate) fn set_template(&mut self, header: &[u8]) {
        self.template.set(header);
    }

    /// The header area layer-originated messages start from, whole (its first `header_len`
    /// bytes hold it).
    #[inline(always)]
    pub(crate) fn template_area(&self) -> &[u8; MAX_HEADER] {
        &self.template.bytes
    }

    /// Say which byte order the next delivery's header was written in.
    #[inline(always)]
    pub(crate) fn set_rx_wire(&mut self, order: ByteOrder) {
        self.rx_wire = order;
    }

    /// The byte order the delivery being processed was written in.
    #[inline(always)]
    pub(crate) fn rx_wire(&self) -> ByteOrder {
        self.rx_wire
    }

    /// Whether one more application message can enter the layers.
    pub(crate) fn can_accept(&self) -> bool {
        self.layers.can_accept()
    }

    /// Whether a layer has work outstanding or a datagram waits for the link.
    pub(crate) fn busy(&self) -> bool {
        !self.out.is_empty() || self.layers.busy()
    }

    /// Give back what idle traffic does not need: the layers' spare capacity, the queues'
    /// and the pool's idle buffers.
    pub(crate) fn shrink(&mut self) {
        self.layers.shrink();
        self.pool.trim();
        if self.out.is_empty() {
            self.out = VecDeque::new();
        }
        if self.queue.is_empty() {
            self.queue = VecDeque::new();
        }
        self.delivered.shrink();
        // The counters' lists grow by doubling; an idle session keeps only what they hold.
        for (_, c) in &mut self.stats.layers {
            c.drops.shrink_to_fit();
            c.events.shrink_to_fit();
        }
    }

    /// Whether sent data waits for the link or for an acknowledgement.
    pub(crate) fn holds_unacked(&self) -> bool {
        !self.out.is_empty() || self.layers.holds_unacked()
    }

    /// The earliest layer timer.
    #[inline]
    pub(crate) fn next_timer(&self) -> Option<Time> {
        self.timers.iter().copied().fold(None, earliest)
    }

    /// Send an application message (no header area yet) down the whole stack.
    #[inline(never)]
    pub(crate) fn send(&mut self, now: Time, mut m: Msg, edge: &mut impl Edge) {
        m.push_front(self.layout.header_len());
        self.run_send(now, 0, m, edge);
        self.drain(now, edge);
    }

    /// Deliver a datagram (header area and body) up the whole stack.
    #[inline(never)]
    pub(crate) fn receive(&mut self, now: Time, m: Msg, edge: &mut impl Edge) {
        let n = self.layers.count();
        self.run_deliver(now, n, m, edge);
        self.drain(now, edge);
    }

    /// Run the layer timers that are due; whether any was.
    pub(crate) fn run_timers(&mut self, now: Time, edge: &mut impl Edge) -> bool {
        let mut ran = false;
        for i in 0..self.timers.len() {
            if self.timers[i].is_some_and(|t| t <= now) {
                self.timers[i] = None;
                self.with_cx(now, i, |layers, cx| layers.on_timer_at(i, cx));
                ran = true;
            }
        }
        self.drain(now, edge);
        ran
    }

    /// Process what layers originated, each message to completion. Usually nothing: then
    /// this is a check, inlined (out of line, its prologue cost more than the check).
    #[inline(always)]
    pub(crate) fn drain(&mut self, now: Time, edge: &mut impl Edge) {
        if !self.queue.is_empty() {
            self.drain_queue(now, edge);
        }
    }

    /// [`drain`](Self::drain) with something queued.
    #[inline(never)]
    fn drain_queue(&mut self, now: Time, edge: &mut impl Edge) {
        // A misbehaving layer that originates without end is cut off rather than hanging the
        // caller.
        let mut budget = 1_000_000u32;
        while let Some((origin, mut m)) = self.queue.pop_front() {
            budget -= 1;
            if budget == 0 {
                self.queue.clear();
                break;
            }
            let older = self.queue.len();
            match origin {
                Origin::Down(from) => {
                    if m.transformed() {
                        self.undo_transforms(now, from, &mut m);
                    }
                    self.run_send(now, from, m, edge)
                }
                Origin::Up(from) => self.run_deliver(now, from, m, edge),
            }
            // Depth first: what this message's processing originated (e.g. the message a
            // reassembly completed) goes before older siblings (the next in-order messages),
            // so FIFO order survives layers that hold messages back.
            let new = self.queue.len() - older;
            self.queue.rotate_right(new);
        }
    }

    /// Pre-send from layer `from` down; on reaching the bottom, post-send and transmit.
    pub(crate) fn run_send(&mut self, now: Time, from: usize, mut m: Msg, edge: &mut impl Edge) {
        let n = self.layers.count();
        let stop = self.pre_walk(now, true, from, &mut m);
        if let Some((i, Verdict::Drop(r))) = stop {
            self.stats.layers[i].1.count(r);
            self.pool.free(m);
            self.free_kept();
            return;
        }
        let hdr = HeaderCopy::of(&m, self.layout.header_len());
        let last = stop.map_or(n, |(i, _)| i);
        self.post_walk(now, true, (from, last), &hdr);
        match stop {
            Some((i, _)) => self.post_send(now, i, &hdr, Handoff::Absorbed(m)),
            None => {
                edge.frame(&mut m, self.layout.header_len());
                self.queue_out(m, edge);
            }
        }
    }

    fn take_kept(&mut self, layer: usize) -> Option<Msg> {
        crate::stack::take_kept(&mut self.kept, layer)
    }

    /// Give back the copies pre-phases kept (the message did not get to their post-phases).
    #[inline(always)]
    pub(crate) fn free_kept(&mut self) {
        // Usually none: a check, not a call.
        if !self.kept.is_empty() {
            self.free_kept_copies();
        }
    }

    /// [`free_kept`](Self::free_kept) with copies to give back.
    #[inline(never)]
    fn free_kept_copies(&mut self) {
        for (_, k) in self.kept.drain(..) {
            self.pool.free(k);
        }
    }

    /// Take the copy layer `layer`'s pre-send kept, if any.
    pub(crate) fn kept_copy(&mut self, layer: usize) -> Option<Msg> {
        self.take_kept(layer)
    }

    /// [`pre_phases`](Self::pre_phases) of the one layer `i`, without the loop (the
    /// accelerator's one body transform, on every sealed message).
    #[inline(always)]
    pub(crate) fn pre_phase(
        &mut self,
        now: Time,
        i: usize,
        send: bool,
        m: &mut Msg,
    ) -> Option<(usize, Verdict)> {
        let (layers, mut pkt) = self.stack_and_packet(now, send, m);
        pkt.layer = i;
        let v = if send {
            layers.pre_send_at(i, &mut pkt)
        } else {
            layers.pre_deliver_at(i, &mut pkt)
        };
        (v != Verdict::Continue).then_some((i, v))
    }

    /// Run the pre-phases of the layers `which`, in that order, on `m` — `pre_send` if
    /// `send`, else `pre_deliver` — until one does not continue: that layer and its verdict.
    pub(crate) fn pre_phases(
        &mut self,
        now: Time,
        which: impl Iterator<Item = usize>,
        send: bool,
        m: &mut Msg,
    ) -> Option<(usize, Verdict)> {
        let (layers, mut pkt) = self.stack_and_packet(now, send, m);
        for i in which {
            pkt.layer = i;
            let v = if send {
                layers.pre_send_at(i, &mut pkt)
            } else {
                layers.pre_deliver_at(i, &mut pkt)
            };
            if v != Verdict::Continue {
                return Some((i, v));
            }
        }
        None
    }

    /// Take back the body transforms of the layers from `from` down, bottom up, on `m`: a
    /// retransmission copy kept as the datagram left ([`Msg::transformed`]), sent down again
    /// ([`Layer::undo_send`](crate::Layer::undo_send)). Its mark goes.
    #[cold]
    #[inline(never)]
    fn undo_transforms(&mut self, now: Time, from: usize, m: &mut Msg) {
        m.set_transformed(false);
        let (layers, mut pkt) = self.stack_and_packet(now, true, m);
        for i in (from..layers.count()).rev() {
            if layers.transforms_body_at(i) {
                pkt.layer = i;
                layers.undo_send_at(i, &mut pkt);
            }
        }
    }

    /// Call into layer `i` with a context for its post-phase or timer.
    fn with_cx(&mut self, now: Time, i: usize, f: impl FnOnce(&mut S, &mut Cx<'_>)) {
        let (layers, mut parts) = self.split(now);
        if let Some(mut cx) = parts.cx(i) {
            f(layers, &mut cx);
        }
    }

    /// The stack, and the rest of the core's state as its post-phases borrow it.
    #[inline(always)]
    fn split(&mut self, now: Time) -> (&mut S, PostParts<'_>) {
        (
            &mut self.layers,
            PostParts {
                now,
                layout: &self.layout,
                pool: &mut self.pool,
                queue: &mut self.queue,
                timers: &mut self.timers,
                counters: &mut self.stats.layers,
                refusals: &mut self.refusals,
                disable: &mut self.disable,
                template: &self.template.bytes,
                kept: &mut self.kept,
            },
        )
    }

    /// The stack, and a message `m` for its pre-phases at `now`: sending (this end's byte
    /// order) or delivering (the order it was received in).
    #[inline(always)]
    fn stack_and_packet<'a>(
        &'a mut self,
        now: Time,
        send: bool,
        m: &'a mut Msg,
    ) -> (&'a S, Packet<'a>) {
        let layout = &self.layout;
        let pkt = Packet {
            msg: m,
            layout,
            order: layout.order(),
            wire: if send { layout.order() } else { self.rx_wire },
            now,
            layer: 0,
            pool: &mut self.pool,
            kept: &mut self.kept,
        };
        (&self.layers, pkt)
    }

    /// Post-send of layer `i` for a message whose header area was `hdr`.
    pub(crate) fn post_send(&mut self, now: Time, i: usize, hdr: &HeaderCopy, h: Handoff) {
        self.with_cx(now, i, |layers, cx| {
            let layout = cx.layout;
            layers.post_send_at(i, &hdr.view(layout, layout.order()), h, cx)
        });
    }

    /// Post-delivery of layer `i` for a message whose header area was `hdr`.
    pub(crate) fn post_deliver(&mut self, now: Time, i: usize, hdr: &HeaderCopy, h: Handoff) {
        self.with_cx(now, i, |layers, cx| {
            let layout = cx.layout;
            layers.post_deliver_at(i, &hdr.view(layout, layout.order()), h, cx)
        });
    }

    /// The post-sends of every layer for a message the accelerator sent with header area
    /// `hdr`, top down, each handed its retransmission copy from `copies` (emptied: a copy no
    /// layer took goes back to the pool). One walk with one context split, as the layered
    /// path's own post-phases run.
    pub(crate) fn post_send_passed(
        &mut self,
        now: Time,
        hdr: &HeaderCopy,
        copies: &mut Vec<(usize, Msg)>,
    ) {
        self.kept.append(copies);
        self.post_walk(now, true, (0, self.layers.count()), hdr);
        self.free_kept();
    }

    /// The post-deliveries of the layers from `from` to the bottom for a message with header
    /// area `hdr` that they passed, top down (the layered path's order).
    pub(crate) fn post_deliver_passed(&mut self, now: Time, hdr: &HeaderCopy, from: usize) {
        self.post_walk(now, false, (from, self.layers.count()), hdr);
    }

    /// Count a drop of layer `i`'s on the send path.
    pub(crate) fn count_drop(&mut self, i: usize, r: DropReason) {
        self.stats.layers[i].1.count(r);
    }

    /// Count a refusal of received input by layer `i`.
    pub(crate) fn count_refusal(&mut self, i: usize, r: DropReason) {
        self.stats.layers[i].1.count(r);
        self.refusals.count(RefusedAt::Layer(i, r));
    }

    /// Count a refusal of received input before the stack (not admitted by the edge).
    #[inline]
    pub(crate) fn refuse_before(&mut self) {
        self.refusals.count(RefusedAt::Before);
    }

    /// Count a refusal of received input above the stack (by the edge, after every layer
    /// passed it).
    #[inline]
    pub(crate) fn refuse_above(&mut self) {
        self.refusals.count(RefusedAt::Above);
    }

    /// Received input refused so far.
    #[inline(always)]
    pub(crate) fn refusals(&self) -> Refusals {
        self.refusals
    }

    /// Queue a finished datagram for the link (the oldest goes to the edge if the queue is
    /// full). Inline: out of line, the call was ~20 instructions of every fast-path send.
    #[inline(always)]
    pub(crate) fn queue_out(&mut self, m: Msg, edge: &mut impl Edge) {
        self.stats.datagrams_out += 1;
        self.stats.bytes_out += m.len() as u64;
        if self.out.len() >= self.max_queue {
            self.drop_oldest_out(edge);
        }
        self.out.push_back(m);
    }

    /// The transmit queue is full: its oldest datagram goes to the edge, counted.
    #[cold]
    #[inline(never)]
    fn drop_oldest_out(&mut self, edge: &mut impl Edge) {
        self.stats.tx_queue_drops += 1;
        if let Some(old) = self.out.pop_front() {
            edge.release(old, &mut self.pool);
        }
    }

    /// The next datagram for the link, by value.
    #[inline]
    pub(crate) fn pop_out(&mut self) -> Option<Msg> {
        self.out.pop_front()
    }

    /// The datagrams waiting for the link, oldest first.
    pub(crate) fn out(&self) -> &VecDeque<Msg> {
        &self.out
    }

    /// The datagrams waiting for the link, to settle one in place.
    pub(crate) fn out_mut(&mut self) -> &mut VecDeque<Msg> {
        &mut self.out
    }

    /// Lend the link up to `max` queued datagrams (see
    /// [`Connection::transmit_with`](crate::Connection::transmit_with)); the taken ones go to
    /// the edge. The link may put bytes in front of a datagram it takes (its own framing):
    /// the edge takes what it keeps from the back.
    pub(crate) fn transmit_with<E>(
        &mut self,
        max: usize,
        send: impl FnOnce(&mut [Msg]) -> Result<usize, E>,
        edge: &mut impl Edge,
    ) -> Result<usize, E> {
        // Contiguous, so a wrapped ring does not split a batch in two calls (the datagrams
        // are moved within the ring at most once per wrap).
        let queued = self.out.make_contiguous();
        let n = queued.len().min(max);
        let taken = send(&mut queued[..n])?.min(n);
        for _ in 0..taken {
            if let Some(m) = self.out.pop_front() {
                edge.release(m, &mut self.pool);
            }
        }
        Ok(taken)
    }

    /// Hand a message to the application.
    #[inline(always)]
    pub(crate) fn deliver(&mut self, m: Msg) {
        self.stats.delivered += 1;
        self.delivered.push(m);
    }

    /// Hand the application the `count` messages that `split` finds in `body` (checked to
    /// be there); they are split off as it takes them ([`Ready`]).
    pub(crate) fn deliver_several(&mut self, body: Msg, count: usize, split: Split) {
        self.stats.delivered += count as u64;
        self.delivered.push_several(body, count, split);
    }

    /// Hand a message that leaves the top of the stack (header area still on) to the
    /// application through the edge.
    pub(crate) fn arrive(&mut self, mut m: Msg, edge: &mut impl Edge) {
        let hl = self.layout.header_len();
        let hdr = HeaderCopy::of(&m, hl);
        m.pop_front(hl);
        match edge.arrive(
            &hdr.bytes[..hdr.len],
            m,
            &mut self.pool,
            &mut self.delivered,
        ) {
            Some(n) => self.stats.delivered += n,
            None => self.refuse_above(),
        }
    }

    /// The next message for the application.
    #[inline]
    pub(crate) fn poll_delivery(&mut self) -> Option<Msg> {
        self.delivered.pop(&mut self.pool)
    }

    /// The next message for the application, lent to `f`.
    #[inline]
    pub(crate) fn poll_delivery_with<R>(&mut self, f: impl FnOnce(&[u8]) -> R) -> Option<R> {
        self.delivered.pop_with(&mut self.pool, f)
    }

    /// Messages waiting for the application.
    pub(crate) fn delivered_ready(&self) -> usize {
        self.delivered.len()
    }

    /// Pre-deliver from layer `below - 1` up; on reaching the top, post-deliver and hand the
    /// body to the application.
    pub(crate) fn run_deliver(
        &mut self,
        now: Time,
        below: usize,
        mut m: Msg,
        edge: &mut impl Edge,
    ) {
        let hl = self.layout.header_len();
        if m.len() < hl {
            self.stats.truncated += 1;
            self.refuse_before();
            self.pool.free(m);
            return;
        }
        let stop = self.pre_walk(now, false, below, &mut m);
        self.free_kept();
        let hdr = HeaderCopy::of(&m, hl);
        // Post-delivery runs top down: first the message reaches the application (or the
        // layer that absorbed it), then the layers below that passed it update their state.
        // That order keeps FIFO: whatever the upper layer releases (a reassembled message)
        // is queued before what a lower layer releases next (the following in-order messages).
        let first_passed = stop.map_or(0, |(i, _)| i + 1);
        match stop {
            None => self.arrive(m, edge),
            Some((i, Verdict::Absorb)) => {
                self.post_deliver(now, i, &hdr, Handoff::Absorbed(m));
            }
            Some((i, Verdict::Drop(r))) => {
                self.count_refusal(i, r);
                self.pool.free(m);
            }
            Some((_, Verdict::Continue)) => self.pool.free(m), // never: Continue does not stop
        }
        // Layers that passed the message post-process it whatever happened above them: from
        // their point of view it was delivered.
        self.post_walk(now, false, (first_passed, below), &hdr);
    }

    /// [`pre_phases`](Self::pre_phases) along the stack's walk (straight-line code for a
    /// static stack): sending, the layers from `edge` down; delivering, those below `edge`,
    /// bottom up.
    #[inline(always)]
    fn pre_walk(
        &mut self,
        now: Time,
        send: bool,
        edge: usize,
        m: &mut Msg,
    ) -> Option<(usize, Verdict)> {
        let (layers, mut pkt) = self.stack_and_packet(now, send, m);
        if send {
            layers.pre_send_walk(0, edge, &mut pkt)
        } else {
            layers.pre_deliver_walk(0, edge, &mut pkt)
        }
    }

    /// The post-phases of the layers `range` that passed a message (post-send with the copies
    /// their pre-sends kept, or post-delivery), top down, along the stack's walk.
    #[inline(always)]
    fn post_walk(&mut self, now: Time, send: bool, range: (usize, usize), hdr: &HeaderCopy) {
        let (layers, mut parts) = self.split(now);
        let view = hdr.view(parts.layout, parts.layout.order());
        if send {
            layers.post_send_walk(0, range, &view, &mut parts);
        } else {
            layers.post_deliver_walk(0, range, &view, &mut parts);
        }
    }
}
