//! Stacks: layers composed top to bottom, in two forms with identical behaviour. (Seed 000 is
//! Mosberger et al., "Analysis of Techniques to Improve Protocol Processing Latency".)
//!
//! - **Dynamic**: a [`DynStack`] (`Vec<Box<dyn Layer>>`) built at run time from a spec string
//!   such as `"frag(1400):window(16):checksum:seal"` ([`build_dyn`]); every layer call is a
//!   virtual call.
//! - **Static**: nested pairs `(A, (B, (C, ())))` built with [`stack!`](crate::stack!); every call
//!   is resolved at compile time and can be inlined across layers — seed 000's path-inlining, done
//!   by the compiler.
//!
//! Both implement [`LayerSet`], over which the connection's processing loop is written once;
//! `tests/differential.rs` checks they put byte-identical datagrams on the wire. A
//! [`Registry`] turns spec strings into dynamic stacks, with layers of the application's own
//! beside the built-in ones.

use crate::filter::Segment;
use crate::layer::{
    AckedPrefix, Cx, Handoff, Hdr, InitCx, Layer, LayerCounters, Origin, Packet, Predict, Verdict,
};
use crate::layers::{Checksum, Cipher, Frag, Seal};
use crate::layout::FieldRegistry;
use crate::layout::Layout;
use crate::msg::{Msg, Pool};
use crate::time::Time;
use std::collections::VecDeque;
use thiserror::Error;

/// A sequence of layers, addressed by index (0 = top).
pub trait LayerSet {
    /// Number of layers.
    fn count(&self) -> usize;
    /// Name of layer `i`.
    fn name_at(&self, i: usize) -> &'static str;
    /// [`Layer::init`] of layer `i`.
    fn init_at(&mut self, i: usize, fields: &mut FieldRegistry, cx: &InitCx);
    /// [`Layer::can_accept`] of every layer.
    fn can_accept(&self) -> bool;
    /// [`Layer::busy`] of any layer.
    fn busy(&self) -> bool;
    /// [`Layer::holds_unacked`] of any layer.
    fn holds_unacked(&self) -> bool;
    /// [`Layer::acked_prefix`] of the topmost layer that reports one, and whether no layer
    /// above it holds messages ([`Layer::holds_unacked`]): only then does the count of
    /// messages it took cover everything the application sent.
    fn acked_prefix(&self) -> Option<(AckedPrefix, bool)>;
    /// [`Layer::fragment_payload`] of the topmost layer that reports one.
    fn fragment_payload(&self) -> Option<usize>;
    /// [`Layer::trailer_len`] of layer `i`.
    fn trailer_len_at(&self, i: usize) -> usize;
    /// [`Layer::shrink`] of every layer.
    fn shrink(&mut self);
    /// [`Layer::pre_send`] of layer `i`.
    fn pre_send_at(&self, i: usize, pkt: &mut Packet<'_>) -> Verdict;
    /// [`Layer::post_send`] of layer `i`.
    fn post_send_at(&mut self, i: usize, hdr: &Hdr<'_>, h: Handoff, cx: &mut Cx<'_>);
    /// [`Layer::pre_deliver`] of layer `i`.
    fn pre_deliver_at(&self, i: usize, pkt: &mut Packet<'_>) -> Verdict;
    /// [`Layer::post_deliver`] of layer `i`.
    fn post_deliver_at(&mut self, i: usize, hdr: &Hdr<'_>, h: Handoff, cx: &mut Cx<'_>);
    /// [`Layer::on_timer`] of layer `i`.
    fn on_timer_at(&mut self, i: usize, cx: &mut Cx<'_>);
    /// [`Layer::send_filter`] of layer `i`.
    fn send_filter_at(&self, i: usize, seg: &mut Segment);
    /// [`Layer::deliver_filter`] of layer `i`.
    fn deliver_filter_at(&self, i: usize, seg: &mut Segment);
    /// [`Layer::predict_send`] of layer `i`.
    fn predict_send_at(&self, i: usize, p: &mut Predict<'_>);
    /// [`Layer::predict_deliver`] of layer `i`.
    fn predict_deliver_at(&self, i: usize, p: &mut Predict<'_>);
    /// [`Layer::predict_gossip`] of layer `i`.
    fn predict_gossip_at(&self, i: usize, p: &mut Predict<'_>);
    /// [`Layer::gossips`] of layer `i`.
    fn gossips_at(&self, i: usize) -> bool;
    /// [`Layer::predicts`] of layer `i`.
    fn predicts_at(&self, i: usize) -> bool;
    /// [`Layer::transforms_body`] of layer `i`.
    fn transforms_body_at(&self, i: usize) -> bool;
    /// [`Layer::wants_copy`] of layer `i`.
    fn wants_copy_at(&self, i: usize) -> bool;
    /// [`Layer::resends_copy_only`] of layer `i`.
    fn resends_copy_only_at(&self, i: usize) -> bool;
    /// [`Layer::can_undo_send`] of layer `i`.
    fn can_undo_send_at(&self, i: usize) -> bool;
    /// [`Layer::undo_send`] of layer `i`.
    fn undo_send_at(&self, i: usize, pkt: &mut Packet<'_>);
    /// [`Layer::needs_keys`] of layer `i`.
    fn needs_keys_at(&self, i: usize) -> bool;

    /// The pre-sends of the layers from `from` down (those at `depth` and below; `depth` is where
    /// this set starts in its stack), until one does not continue: that layer and its verdict. The
    /// static stack walks its layers in straight-line code the compiler inlines into one function
    /// (seed 000's path-inlining); the default loops over [`pre_send_at`](Self::pre_send_at).
    #[doc(hidden)]
    #[inline]
    fn pre_send_walk(
        &self,
        depth: usize,
        from: usize,
        pkt: &mut Packet<'_>,
    ) -> Option<(usize, Verdict)> {
        for i in from.max(depth)..depth + self.count() {
            pkt.layer = i;
            let v = self.pre_send_at(i - depth, pkt);
            if v != Verdict::Continue {
                return Some((i, v));
            }
        }
        None
    }

    /// The pre-deliveries of the layers below `below`, bottom up, until one does not
    /// continue ([`pre_send_walk`](Self::pre_send_walk)'s counterpart).
    #[doc(hidden)]
    #[inline]
    fn pre_deliver_walk(
        &self,
        depth: usize,
        below: usize,
        pkt: &mut Packet<'_>,
    ) -> Option<(usize, Verdict)> {
        for i in (depth..below.min(depth + self.count())).rev() {
            pkt.layer = i;
            let v = self.pre_deliver_at(i - depth, pkt);
            if v != Verdict::Continue {
                return Some((i, v));
            }
        }
        None
    }

    /// The post-sends of the layers `from..last` that passed a message, top down, each handed
    /// the copy its pre-send kept.
    #[doc(hidden)]
    #[inline]
    fn post_send_walk(
        &mut self,
        depth: usize,
        range: (usize, usize),
        hdr: &Hdr<'_>,
        parts: &mut PostParts<'_>,
    ) {
        for i in range.0.max(depth)..range.1.min(depth + self.count()) {
            let copy = parts.take_kept(i);
            if let Some(mut cx) = parts.cx(i) {
                self.post_send_at(i - depth, hdr, Handoff::Passed { copy }, &mut cx);
            }
        }
    }

    /// The post-deliveries of the layers `from..below` that passed a message, top down.
    #[doc(hidden)]
    #[inline]
    fn post_deliver_walk(
        &mut self,
        depth: usize,
        range: (usize, usize),
        hdr: &Hdr<'_>,
        parts: &mut PostParts<'_>,
    ) {
        for i in range.0.max(depth)..range.1.min(depth + self.count()) {
            if let Some(mut cx) = parts.cx(i) {
                self.post_deliver_at(i - depth, hdr, Handoff::Passed { copy: None }, &mut cx);
            }
        }
    }
}

/// What the post-phases of a run of layers share: the connection's state a [`Cx`] borrows,
/// per layer where it is per layer. Built by the connection's core.
#[doc(hidden)]
pub struct PostParts<'a> {
    pub(crate) now: Time,
    pub(crate) layout: &'a Layout,
    pub(crate) pool: &'a mut Pool,
    pub(crate) queue: &'a mut VecDeque<(Origin, Msg)>,
    pub(crate) timers: &'a mut [Option<Time>],
    pub(crate) counters: &'a mut [(&'static str, LayerCounters)],
    pub(crate) refusals: &'a mut crate::layer::Refusals,
    pub(crate) disable: &'a mut [u32; 3],
    pub(crate) template: &'a [u8],
    pub(crate) kept: &'a mut Vec<(usize, Msg)>,
}

impl PostParts<'_> {
    /// The context of layer `i`'s post-phase.
    #[inline(always)]
    pub(crate) fn cx(&mut self, i: usize) -> Option<Cx<'_>> {
        Some(Cx {
            now: self.now,
            layer: i,
            layout: self.layout,
            pool: self.pool,
            queue: self.queue,
            timer: self.timers.get_mut(i)?,
            counters: &mut self.counters.get_mut(i)?.1,
            refusals: self.refusals,
            disable: self.disable,
            template: self.template,
        })
    }

    /// The copy layer `i`'s pre-send kept, if any.
    #[inline(always)]
    fn take_kept(&mut self, i: usize) -> Option<Msg> {
        take_kept(self.kept, i)
    }
}

/// Take the copy layer `i`'s pre-send kept out of `kept`, if it kept one.
#[inline(always)]
pub(crate) fn take_kept(kept: &mut Vec<(usize, Msg)>, i: usize) -> Option<Msg> {
    if kept.is_empty() {
        return None;
    }
    let pos = kept.iter().position(|(l, _)| *l == i)?;
    Some(kept.swap_remove(pos).1)
}

/// The dynamic stack.
pub type DynStack = Vec<Box<dyn Layer>>;

impl LayerSet for DynStack {
    fn count(&self) -> usize {
        self.len()
    }
    fn name_at(&self, i: usize) -> &'static str {
        self[i].name()
    }
    fn init_at(&mut self, i: usize, fields: &mut FieldRegistry, cx: &InitCx) {
        self[i].init(fields, cx)
    }
    fn can_accept(&self) -> bool {
        self.iter().all(|l| l.can_accept())
    }
    fn busy(&self) -> bool {
        self.iter().any(|l| l.busy())
    }
    fn holds_unacked(&self) -> bool {
        self.iter().any(|l| l.holds_unacked())
    }
    fn trailer_len_at(&self, i: usize) -> usize {
        self.get(i).map_or(0, |l| l.trailer_len())
    }
    fn fragment_payload(&self) -> Option<usize> {
        self.iter().find_map(|l| l.fragment_payload())
    }
    fn acked_prefix(&self) -> Option<(AckedPrefix, bool)> {
        let mut clear = true;
        for l in self {
            if let Some(p) = l.acked_prefix() {
                return Some((p, clear));
            }
            clear &= !l.holds_unacked();
        }
        None
    }
    fn shrink(&mut self) {
        self.iter_mut().for_each(|l| l.shrink())
    }
    #[inline]
    fn pre_send_at(&self, i: usize, pkt: &mut Packet<'_>) -> Verdict {
        self[i].pre_send(pkt)
    }
    #[inline]
    fn post_send_at(&mut self, i: usize, hdr: &Hdr<'_>, h: Handoff, cx: &mut Cx<'_>) {
        self[i].post_send(hdr, h, cx)
    }
    #[inline]
    fn pre_deliver_at(&self, i: usize, pkt: &mut Packet<'_>) -> Verdict {
        self[i].pre_deliver(pkt)
    }
    #[inline]
    fn post_deliver_at(&mut self, i: usize, hdr: &Hdr<'_>, h: Handoff, cx: &mut Cx<'_>) {
        self[i].post_deliver(hdr, h, cx)
    }
    fn on_timer_at(&mut self, i: usize, cx: &mut Cx<'_>) {
        self[i].on_timer(cx)
    }
    fn send_filter_at(&self, i: usize, seg: &mut Segment) {
        self[i].send_filter(seg)
    }
    fn deliver_filter_at(&self, i: usize, seg: &mut Segment) {
        self[i].deliver_filter(seg)
    }
    #[inline]
    fn predict_send_at(&self, i: usize, p: &mut Predict<'_>) {
        self[i].predict_send(p)
    }
    #[inline]
    fn predict_deliver_at(&self, i: usize, p: &mut Predict<'_>) {
        self[i].predict_deliver(p)
    }
    fn predict_gossip_at(&self, i: usize, p: &mut Predict<'_>) {
        self[i].predict_gossip(p)
    }
    fn gossips_at(&self, i: usize) -> bool {
        self[i].gossips()
    }
    fn predicts_at(&self, i: usize) -> bool {
        self[i].predicts()
    }
    fn transforms_body_at(&self, i: usize) -> bool {
        self[i].transforms_body()
    }
    fn wants_copy_at(&self, i: usize) -> bool {
        self[i].wants_copy()
    }
    fn resends_copy_only_at(&self, i: usize) -> bool {
        self[i].resends_copy_only()
    }
    fn can_undo_send_at(&self, i: usize) -> bool {
        self[i].can_undo_send()
    }
    fn undo_send_at(&self, i: usize, pkt: &mut Packet<'_>) {
        self[i].undo_send(pkt)
    }
    fn needs_keys_at(&self, i: usize) -> bool {
        self[i].needs_keys()
    }
}

/// The end of a static stack.
impl LayerSet for () {
    fn count(&self) -> usize {
        0
    }
    fn name_at(&self, _: usize) -> &'static str {
        ""
    }
    fn init_at(&mut self, _: usize, _: &mut FieldRegistry, _: &InitCx) {}
    fn can_accept(&self) -> bool {
        true
    }
    fn busy(&self) -> bool {
        false
    }
    fn holds_unacked(&self) -> bool {
        false
    }
    fn acked_prefix(&self) -> Option<(AckedPrefix, bool)> {
        None
    }
    fn fragment_payload(&self) -> Option<usize> {
        None
    }
    fn trailer_len_at(&self, _: usize) -> usize {
        0
    }
    fn shrink(&mut self) {}
    fn pre_send_at(&self, _: usize, _: &mut Packet<'_>) -> Verdict {
        Verdict::Continue
    }
    fn post_send_at(&mut self, _: usize, _: &Hdr<'_>, _: Handoff, _: &mut Cx<'_>) {}
    fn pre_deliver_at(&self, _: usize, _: &mut Packet<'_>) -> Verdict {
        Verdict::Continue
    }
    fn post_deliver_at(&mut self, _: usize, _: &Hdr<'_>, _: Handoff, _: &mut Cx<'_>) {}
    fn on_timer_at(&mut self, _: usize, _: &mut Cx<'_>) {}
    fn send_filter_at(&self, _: usize, _: &mut Segment) {}
    fn deliver_filter_at(&self, _: usize, _: &mut Segment) {}
    fn predict_send_at(&self, _: usize, _: &mut Predict<'_>) {}
    fn predict_deliver_at(&self, _: usize, _: &mut Predict<'_>) {}
    fn predict_gossip_at(&self, _: usize, _: &mut Predict<'_>) {}
    fn gossips_at(&self, _: usize) -> bool {
        false
    }
    fn predicts_at(&self, _: usize) -> bool {
        true
    }
    fn transforms_body_at(&self, _: usize) -> bool {
        false
    }
    fn wants_copy_at(&self, _: usize) -> bool {
        false
    }
    fn resends_copy_only_at(&self, _: usize) -> bool {
        false
    }
    fn can_undo_send_at(&self, _: usize) -> bool {
        false
    }
    fn undo_send_at(&self, _: usize, _: &mut Packet<'_>) {}
    fn needs_keys_at(&self, _: usize) -> bool {
        false
    }
    #[inline(always)]
    fn pre_send_walk(&self, _: usize, _: usize, _: &mut Packet<'_>) -> Option<(usize, Verdict)> {
        None
    }
    #[inline(always)]
    fn pre_deliver_walk(&self, _: usize, _: usize, _: &mut Packet<'_>) -> Option<(usize, Verdict)> {
        None
    }
    #[inline(always)]
    fn post_send_walk(&mut self, _: usize, _: (usize, usize), _: &Hdr<'_>, _: &mut PostParts<'_>) {}
    #[inline(always)]
    fn post_deliver_walk(
        &mut self,
        _: usize,
        _: (usize, usize),
        _: &Hdr<'_>,
        _: &mut PostParts<'_>,
    ) {
    }
}

/// A static stack: layer `L` on top of the rest `R`.
impl<L: Layer, R: LayerSet> LayerSet for (L, R) {
    #[inline(always)]
    fn count(&self) -> usize {
        1 + self.1.count()
    }
    fn name_at(&self, i: usize) -> &'static str {
        if i == 0 {
            self.0.name()
        } else {
            self.1.name_at(i - 1)
        }
    }
    fn init_at(&mut self, i: usize, fields: &mut FieldRegistry, cx: &InitCx) {
        if i == 0 {
            self.0.init(fields, cx)
        } else {
            self.1.init_at(i - 1, fields, cx)
        }
    }
    #[inline(always)]
    fn can_accept(&self) -> bool {
        self.0.can_accept() && self.1.can_accept()
    }
    fn busy(&self) -> bool {
        self.0.busy() || self.1.busy()
    }
    fn holds_unacked(&self) -> bool {
        self.0.holds_unacked() || self.1.holds_unacked()
    }
    fn trailer_len_at(&self, i: usize) -> usize {
        if i == 0 {
            self.0.trailer_len()
        } else {
            self.1.trailer_len_at(i - 1)
        }
    }
    fn fragment_payload(&self) -> Option<usize> {
        self.0
            .fragment_payload()
            .or_else(|| self.1.fragment_payload())
    }
    fn acked_prefix(&self) -> Option<(AckedPrefix, bool)> {
        if let Some(p) = self.0.acked_prefix() {
            return Some((p, true));
        }
        let above = self.0.holds_unacked();
        self.1.acked_prefix().map(|(p, clear)| (p, clear && !above))
    }
    fn shrink(&mut self) {
        self.0.shrink();
        self.1.shrink();
    }
    #[inline(always)]
    fn pre_send_at(&self, i: usize, pkt: &mut Packet<'_>) -> Verdict {
        if i == 0 {
            self.0.pre_send(pkt)
        } else {
            self.1.pre_send_at(i - 1, pkt)
        }
    }
    #[inline(always)]
    fn post_send_at(&mut self, i: usize, hdr: &Hdr<'_>, h: Handoff, cx: &mut Cx<'_>) {
        if i == 0 {
            self.0.post_send(hdr, h, cx)
        } else {
            self.1.post_send_at(i - 1, hdr, h, cx)
        }
    }
    #[inline(always)]
    fn pre_deliver_at(&self, i: usize, pkt: &mut Packet<'_>) -> Verdict {
        if i == 0 {
            self.0.pre_deliver(pkt)
        } else {
            self.1.pre_deliver_at(i - 1, pkt)
        }
    }
    #[inline(always)]
    fn post_deliver_at(&mut self, i: usize, hdr: &Hdr<'_>, h: Handoff, cx: &mut Cx<'_>) {
        if i == 0 {
            self.0.post_deliver(hdr, h, cx)
        } else {
            self.1.post_deliver_at(i - 1, hdr, h, cx)
        }
    }
    fn on_timer_at(&mut self, i: usize, cx: &mut Cx<'_>) {
        if i == 0 {
            self.0.on_timer(cx)
        } else {
            self.1.on_timer_at(i - 1, cx)
        }
    }
    fn send_filter_at(&self, i: usize, seg: &mut Segment) {
        if i == 0 {
            self.0.send_filter(seg)
        } else {
            self.1.send_filter_at(i - 1, seg)
        }
    }
    fn deliver_filter_at(&self, i: usize, seg: &mut Segment) {
        if i == 0 {
            self.0.deliver_filter(seg)
        } else {
            self.1.deliver_filter_at(i - 1, seg)
        }
    }
    #[inline(always)]
    fn predict_send_at(&self, i: usize, p: &mut Predict<'_>) {
        if i == 0 {
            self.0.predict_send(p)
        } else {
            self.1.predict_send_at(i - 1, p)
        }
    }
    #[inline(always)]
    fn predict_deliver_at(&self, i: usize, p: &mut Predict<'_>) {
        if i == 0 {
            self.0.predict_deliver(p)
        } else {
            self.1.predict_deliver_at(i - 1, p)
        }
    }
    fn predict_gossip_at(&self, i: usize, p: &mut Predict<'_>) {
        if i == 0 {
            self.0.predict_gossip(p)
        } else {
            self.1.predict_gossip_at(i - 1, p)
        }
    }
    fn gossips_at(&self, i: usize) -> bool {
        if i == 0 {
            self.0.gossips()
        } else {
            self.1.gossips_at(i - 1)
        }
    }
    fn predicts_at(&self, i: usize) -> bool {
        if i == 0 {
            self.0.predicts()
        } else {
            self.1.predicts_at(i - 1)
        }
    }
    fn transforms_body_at(&self, i: usize) -> bool {
        if i == 0 {
            self.0.transforms_body()
        } else {
            self.1.transforms_body_at(i - 1)
        }
    }
    fn wants_copy_at(&self, i: usize) -> bool {
        if i == 0 {
            self.0.wants_copy()
        } else {
            self.1.wants_copy_at(i - 1)
        }
    }
    fn resends_copy_only_at(&self, i: usize) -> bool {
        if i == 0 {
            self.0.resends_copy_only()
        } else {
            self.1.resends_copy_only_at(i - 1)
        }
    }
    fn can_undo_send_at(&self, i: usize) -> bool {
        if i == 0 {
            self.0.can_undo_send()
        } else {
            self.1.can_undo_send_at(i - 1)
        }
    }
    fn undo_send_at(&self, i: usize, pkt: &mut Packet<'_>) {
        if i == 0 {
            self.0.undo_send(pkt)
        } else {
            self.1.undo_send_at(i - 1, pkt)
        }
    }
    fn needs_keys_at(&self, i: usize) -> bool {
        if i == 0 {
            self.0.needs_keys()
        } else {
            self.1.needs_keys_at(i - 1)
        }
    }
    // The walks: this layer, then the rest, each level its own function inlined into the one
    // above — straight-line code for the whole path, no index dispatch.
    #[inline(always)]
    fn pre_send_walk(
        &self,
        depth: usize,
        from: usize,
        pkt: &mut Packet<'_>,
    ) -> Option<(usize, Verdict)> {
        if depth >= from {
            pkt.layer = depth;
            let v = self.0.pre_send(pkt);
            if v != Verdict::Continue {
                return Some((depth, v));
            }
        }
        self.1.pre_send_walk(depth + 1, from, pkt)
    }
    #[inline(always)]
    fn pre_deliver_walk(
        &self,
        depth: usize,
        below: usize,
        pkt: &mut Packet<'_>,
    ) -> Option<(usize, Verdict)> {
        if let Some(stop) = self.1.pre_deliver_walk(depth + 1, below, pkt) {
            return Some(stop);
        }
        if depth < below {
            pkt.layer = depth;
            let v = self.0.pre_deliver(pkt);
            if v != Verdict::Continue {
                return Some((depth, v));
            }
        }
        None
    }
    #[inline(always)]
    fn post_send_walk(
        &mut self,
        depth: usize,
        range: (usize, usize),
        hdr: &Hdr<'_>,
        parts: &mut PostParts<'_>,
    ) {
        if depth >= range.1 {
            return;
        }
        if depth >= range.0 {
            let copy = parts.take_kept(depth);
            if let Some(mut cx) = parts.cx(depth) {
                self.0.post_send(hdr, Handoff::Passed { copy }, &mut cx);
            }
        }
        self.1.post_send_walk(depth + 1, range, hdr, parts)
    }
    #[inline(always)]
    fn post_deliver_walk(
        &mut self,
        depth: usize,
        range: (usize, usize),
        hdr: &Hdr<'_>,
        parts: &mut PostParts<'_>,
    ) {
        if depth >= range.1 {
            return;
        }
        if depth >= range.0 {
            if let Some(mut cx) = parts.cx(depth) {
                self.0
                    .post_deliver(hdr, Handoff::Passed { copy: None }, &mut cx);
            }
        }
        self.1.post_deliver_walk(depth + 1, range, hdr, parts)
    }
}

/// Build a static stack from layer values, top first:
/// `stack!(Frag::new(1400), Window::new(16), Checksum::new())`.
#[macro_export]
macro_rules! stack {
    () => { () };
    ($top:expr $(, $rest:expr)* $(,)?) => { ($top, $crate::stack!($($rest),*)) };
}

/// A spec string could not be parsed; the message names the bad token.
#[derive(Debug, Error, PartialEq, Eq)]
pub enum SpecError {
    /// The spec names no layer.
    #[error("empty stack spec")]
    Empty,
    /// A token is not a layer the registry knows.
    #[error("unknown layer `{token}` (position {position}); known: {known}")]
    UnknownLayer {
        /// The token.
        token: String,
        /// 1-based position in the spec.
        position: usize,
        /// The layers the registry knows, as a spec would name them.
        known: String,
    },
    /// A layer's arguments are wrong.
    #[error("layer `{token}` (position {position}): {reason}")]
    BadArgs {
        /// The token.
        token: String,
        /// 1-based position in the spec.
        position: usize,
        /// What is wrong.
        reason: String,
    },
}

/// Makes a layer from the arguments of its spec token (the text between the parentheses,
/// trimmed; `None` without parentheses), or says what is wrong with them.
pub type LayerMaker = Box<dyn Fn(Option<&str>) -> Result<Box<dyn Layer>, String> + Send + Sync>;

/// The layers a spec string may name: the built-in ones, and any registered by the
/// application.
///
/// ```
/// use phyllo::stack::Registry;
/// use phyllo::layers::Window;
///
/// let mut reg = Registry::new();
/// // A layer of your own (here a built-in one under another name, to keep the example short).
/// reg.register("reliable", "reliable", |args| match args {
///     None => Ok(Box::new(Window::new(8))),
///     Some(a) => Err(format!("takes no arguments, got `{a}`")),
/// });
/// let stack = reg.build("reliable:checksum")?;
/// assert_eq!(stack.len(), 2);
/// assert!(reg.build("nosuch").err().unwrap().to_string().contains("reliable"));
/// # Ok::<(), phyllo::SpecError>(())
/// ```
///
/// A layer that is to be fast under the accelerator implements
/// [`Layer::predicts`] (with its predictions and filters); one that does not still works,
/// its pre-phases run on the fast path.
pub struct Registry {
    makers: Vec<(String, String, LayerMaker)>,
}

impl Default for Registry {
    fn default() -> Self {
        Registry::new()
    }
}

impl std::fmt::Debug for Registry {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_list()
            .entries(self.makers.iter().map(|(n, _, _)| n))
            .finish()
    }
}

/// A whole-number argument in `lo..=hi`, `default` when absent.
fn number(args: Option<&str>, default: usize, lo: usize, hi: usize) -> Result<usize, String> {
    match args {
        None | Some("") => Ok(default),
        Some(a) => match a.parse::<usize>() {
            Ok(n) if (lo..=hi).contains(&n) => Ok(n),
            Ok(n) => Err(format!("{n} is outside {lo}..={hi}")),
            Err(_) => Err(format!("`{a}` is not a whole number")),
        },
    }
}

/// No argument.
fn nothing(args: Option<&str>) -> Result<(), String> {
    match args {
        None | Some("") => Ok(()),
        Some(a) => Err(format!("takes no arguments, got `{a}`")),
    }
}

impl Registry {
    /// The built-in layers: `frag` or `frag(N)`, `window(N)`, `checksum`, `seal` (`seal(aes)`, the
    /// default, or `seal(chacha)`).
    pub fn new() -> Registry {
        let mut r = Registry { makers: Vec::new() };
        r.register("frag", "frag or frag(N)", |a| match a {
            None | Some("") => Ok(Box::new(Frag::path_sized()) as Box<dyn Layer>),
            a => number(a, 0, 64, 65_000).map(|n| Box::new(Frag::new(n)) as Box<dyn Layer>),
        });
        r.register("window", "window(N|cubic|newreno|bbr)", |a| {
            crate::layers::window::from_spec(a).map(|w| Box::new(w) as Box<dyn Layer>)
        });
        r.register("checksum", "checksum", |a| {
            nothing(a).map(|_| Box::new(Checksum::new()) as Box<dyn Layer>)
        });
        r.register("seal", "seal(aes|chacha)", |a| {
            let cipher = match a {
                None | Some("") | Some("aes") => Cipher::Aes256Gcm,
                Some("chacha") => Cipher::ChaCha20Poly1305,
                Some(other) => return Err(format!("cipher `{other}`: aes or chacha")),
            };
            Ok(Box::new(Seal::with_cipher(cipher)) as Box<dyn Layer>)
        });
        r
    }

    /// Let specs name `name`, made by `make` from the token's arguments; `usage` shows how
    /// (e.g. `"counter(N)"`) in errors. Replaces an earlier layer of that name.
    pub fn register(
        &mut self,
        name: &str,
        usage: &str,
        make: impl Fn(Option<&str>) -> Result<Box<dyn Layer>, String> + Send + Sync + 'static,
    ) -> &mut Registry {
        self.makers.retain(|(n, _, _)| n != name);
        self.makers
            .push((name.to_string(), usage.to_string(), Box::new(make)));
        self
    }

    /// The names a spec may use.
    pub fn names(&self) -> impl Iterator<Item = &str> {
        self.makers.iter().map(|(n, _, _)| n.as_str())
    }

    /// Build the stack a spec such as `"frag(1400):window(16):checksum:seal"` describes (top
    /// layer first).
    pub fn build(&self, spec: &str) -> Result<DynStack, SpecError> {
        let spec = spec.trim();
        if spec.is_empty() {
            return Err(SpecError::Empty);
        }
        spec.split(':')
            .enumerate()
            .map(|(i, tok)| self.build_token(tok.trim(), i + 1))
            .collect()
    }

    fn build_token(&self, tok: &str, position: usize) -> Result<Box<dyn Layer>, SpecError> {
        let bad = |reason: String| SpecError::BadArgs {
            token: tok.to_string(),
            position,
            reason,
        };
        let (name, args) = match tok.find('(') {
            Some(open) => {
                let Some(inner) = tok[open + 1..].strip_suffix(')') else {
                    return Err(bad("missing `)`".into()));
                };
                (tok[..open].trim(), Some(inner.trim()))
            }
            None => (tok, None),
        };
        let Some((_, _, make)) = self.makers.iter().find(|(n, _, _)| n == name) else {
            return Err(SpecError::UnknownLayer {
                token: tok.to_string(),
                position,
                known: self
                    .makers
                    .iter()
                    .map(|(_, u, _)| u.as_str())
                    .collect::<Vec<_>>()
                    .join(", "),
            });
        };
        make(args).map_err(bad)
    }
}

/// Build a dynamic stack of built-in layers from a spec string (see [`Registry::build`]).
pub fn build_dyn(spec: &str) -> Result<DynStack, SpecError> {
    Registry::new().build(spec)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn err(spec: &str) -> SpecError {
        build_dyn(spec).err().expect("an error")
    }

    fn names(spec: &str) -> Vec<&'static str> {
        build_dyn(spec).unwrap().iter().map(|l| l.name()).collect()
    }

    #[test]
    fn builds_the_four_layer_spec() {
        assert_eq!(
            names("frag(1400):window(16):checksum:seal"),
            ["frag", "window", "checksum", "seal"]
        );
        assert_eq!(names(" window "), ["window"]);
    }

    #[test]
    fn errors_name_the_bad_token() {
        let e = err("window(16):chekcsum");
        assert!(e.to_string().contains("`chekcsum`"), "{e}");
        assert!(e.to_string().contains("position 2"), "{e}");
        assert!(e.to_string().contains("window(N|cubic|newreno|bbr)"), "{e}");
        let e = err("window(0)");
        assert!(e.to_string().contains("outside"), "{e}");
        let e = err("frag(12x)");
        assert!(e.to_string().contains("`12x`"), "{e}");
        let e = err("checksum(3)");
        assert!(e.to_string().contains("no arguments"), "{e}");
        let e = err("seal(des)");
        assert!(e.to_string().contains("aes or chacha"), "{e}");
        assert!(build_dyn("window(16").is_err());
        assert_eq!(err("  "), SpecError::Empty);
        assert!(build_dyn("window::checksum").is_err());
    }

    #[test]
    fn registered_layers_can_be_named() {
        let mut reg = Registry::new();
        reg.register("frag2", "frag2(N)", |a| {
            number(a, 100, 64, 1000).map(|n| Box::new(Frag::new(n)) as Box<dyn Layer>)
        });
        assert_eq!(reg.build("frag2(200):window").unwrap().len(), 2);
        let e = reg.build("frag2(5)").err().expect("an error");
        assert!(
            e.to_string().contains("frag2(5)") && e.to_string().contains("outside"),
            "{e}"
        );
        assert!(reg.names().any(|n| n == "frag2"));
        let e = Registry::new().build("frag2").err().expect("an error");
        assert!(matches!(e, SpecError::UnknownLayer { .. }), "{e}");
    }
}
