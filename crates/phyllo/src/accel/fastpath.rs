//! The fast paths of van Renesse, "Masking the Overhead of Protocol Layering" (seed 004 §4), Figure
//! 3: `send`, `from_network` and `deliver`.
//!
//! - **send**: if the send header is disabled, post-sending is pending, or messages wait, the
//!   message joins the backlog (and will leave packed). Otherwise the predicted header is
//!   copied in, the pre-sends of layers that do not predict run, the send filter fills the
//!   message-specific fields, body-transforming layers (`seal`) run, the preamble goes on and
//!   the datagram is out; post-sending is deferred. A refusal takes the layered path
//!   (PRESEND), counted by reason.
//! - **from_network**: the preamble names the connection by cookie (or carries the
//!   identification); body transforms at the bottom run (decryption); the delivery filter
//!   checks the message-specific fields; if delivery is enabled and the protocol-specific
//!   header equals the prediction, the pre-deliveries of layers that do not predict run, and
//!   the message is delivered (unpacked if packed) with post-delivery deferred. Any miss takes
//!   the layered path (PREDELIVER).
//! - **post_process**: runs the deferred post-phases, refreshes the predictions, and sends the
//!   backlog packed.
//!
//! **The check.** A fast-path send or delivery may be checked against the layered path
//! ([`Config::fast_path_check`](crate::Config::fast_path_check); see `predict`): whether it
//! is, each direction's sampler decides first (one decrement when it is not). A checked send
//! copies the body before the fast path runs, and the check comes after the filter and any
//! body transform, just before the datagram is queued (`send_passed`); a checked delivery is
//! checked after the prediction matched, before anything is committed (the pending
//! post-delivery, the application's queue). When a check fails under
//! [`FastPathCheck::Sampled`](super::FastPathCheck::Sampled), the fast path's datagram (and
//! any retransmission copies taken for it) is freed and the original body sent on the layered
//! path, or the datagram delivered on the layered path; that direction then takes the layered
//! path for good ([`Miss::Distrusted`]).
//!
//! A datagram's way: [`Accelerator::receive`] → `cookie` admits it → [`Accelerator::deliver`]
//! → the application's queue in the [`core`](crate::layered), or the core's layered path.

use super::deferred::Reclaim;
use super::filters::Filters;
use super::pack;
use super::preamble::PREAMBLE_LEN;
use super::predict::{self, Predictions, Sample};
use super::stats::Miss;
use super::Accelerator;
use crate::field::{image_in, write_bits, ByteOrder};
use crate::filter::{FilterCtx, MISS_FRAGMENT};
use crate::layer::{Handoff, HeaderCopy, Verdict};
use crate::layered::Core;
use crate::layout::Layout;
use crate::msg::Msg;
use crate::stack::LayerSet;
use crate::time::Time;

/// How many layers at the bottom of `layers` transform the body: the fast delivery runs
/// them first, and the predictions leave them out.
pub(crate) fn bottom_transforms<S: LayerSet>(layers: &S) -> usize {
    (0..layers.count())
        .rev()
        .take_while(|&i| layers.transforms_body_at(i))
        .count()
}

/// How the fast path treats each layer of the stack, fixed when the connection is built.
pub(crate) struct Shape {
    /// Layers that do not predict and do not transform the body, top first: the fast send
    /// runs their pre-sends before the filter (which may cover their fields).
    send_unpredicted: Vec<usize>,
    /// Body-transforming layers, top first: the fast send runs them after the filter.
    transform: Vec<usize>,
    /// How many layers at the bottom of the stack transform the body (the fast delivery runs
    /// them before the filter, which must see the plaintext).
    bottom_transforms: usize,
    /// Layers that do not predict, above the bottom transforms, bottom first: the fast
    /// delivery runs their pre-deliveries after the prediction matched.
    deliver_unpredicted: Vec<usize>,
    /// Whether a send may take the fast path: no body transform sits above a layer with
    /// send-filter instructions or a layer that does not predict (both run before the
    /// transforms, so they would see the body untransformed).
    fast_send: bool,
    /// Whether a delivery may take the fast path: every body transform is at the bottom.
    fast_deliver: bool,
    /// Whether the usual send needs nothing but the prediction and the filter.
    plain_send: bool,
    /// Layers whose pre-send the fast path skips but which want a retransmission copy.
    copy: Vec<usize>,
    /// The one layer that wants a retransmission copy, when nothing else is run on the send
    /// path but body transforms below it: the sent datagram becomes its copy ([`Reclaim`]).
    /// With such transforms, the bytes of their trailers: the copy keeps the transformed
    /// body, trailers cut off, for a layer that only resends it
    /// ([`Layer::resends_copy_only`](crate::Layer::resends_copy_only)) when every transform
    /// can take itself back ([`Layer::can_undo_send`](crate::Layer::can_undo_send)).
    reclaim_layer: Option<(usize, Option<usize>)>,
}

impl Shape {
    /// The shape of `layers`.
    pub(crate) fn of<S: LayerSet>(layers: &S, predict: &Predictions, filters: &Filters) -> Shape {
        let n = layers.count();
        let transform: Vec<usize> = (0..n).filter(|&i| layers.transforms_body_at(i)).collect();
        let bottom_transforms = bottom_transforms(layers);
        let unpredicted = |i: &usize| !predict.predicts(*i) && !layers.transforms_body_at(*i);
        let send_unpredicted: Vec<usize> = (0..n).filter(unpredicted).collect();
        let deliver_unpredicted: Vec<usize> = (0..n - bottom_transforms)
            .rev()
            .filter(unpredicted)
            .collect();
        // A layer below a body transform must see the transformed body: its send-filter
        // instructions and its pre-send (a layer that does not predict) run before the
        // transforms on the fast path, so either one there sends the message the layered way.
        let fast_send = match transform.first() {
            Some(&t) => {
                filters.lowest_send_layer().is_none_or(|f| t > f)
                    && send_unpredicted.iter().all(|&u| u < t)
            }
            None => true,
        };
        let copy: Vec<usize> = (0..n)
            .filter(|&i| layers.wants_copy_at(i) && !send_unpredicted.contains(&i))
            .collect();
        let plain_send = send_unpredicted.is_empty();
        let trailers: usize = transform.iter().map(|&t| layers.trailer_len_at(t)).sum();
        let reclaim_layer = match *copy {
            [layer] if transform.iter().all(|&t| t > layer) && plain_send => {
                if transform.is_empty() {
                    Some((layer, None))
                } else if layers.resends_copy_only_at(layer)
                    && transform.iter().all(|&t| layers.can_undo_send_at(t))
                {
                    Some((layer, Some(trailers)))
                } else {
                    None
                }
            }
            _ => None,
        };
        Shape {
            fast_deliver: transform.len() == bottom_transforms,
            plain_send: plain_send && fast_send,
            send_unpredicted,
            transform,
            bottom_transforms,
            deliver_unpredicted,
            fast_send,
            copy,
            reclaim_layer,
        }
    }
}

/// What the send filter's result means.
#[inline(always)]
fn send_miss(verdict: u64) -> Option<Miss> {
    match verdict {
        0 => None,
        MISS_FRAGMENT => Some(Miss::Fragment),
        _ => Some(Miss::Filter),
    }
}

impl Accelerator {
    /// Accelerated send (seed 004 Figure 3, `send`).
    #[inline]
    pub(crate) fn send<S: LayerSet>(&mut self, core: &mut Core<S>, now: Time, m: Msg) {
        self.last = now;
        // A reply right after a delivery does not wait for that delivery's post-processing:
        // the send prediction's protocol-specific fields depend only on the send state, and
        // its gossip (the acknowledgement) may be out of date by definition (seed 004 §2.1).
        // This keeps the delivery's post-phase off the round trip's critical path.
        if self.must_wait(core) {
            if self.divertable(core) {
                self.send_layered(core, now, m, false, 1, true, Miss::Diverted);
            } else {
                self.backlog.push(m, core.pool());
            }
            return;
        }
        self.send_one(core, now, m, false, 1);
    }

    /// [`send`](Self::send) of bytes: a message that waits is packed straight from them,
    /// without a buffer of its own (a streaming sender's usual case).
    #[inline]
    pub(crate) fn send_bytes<S: LayerSet>(&mut self, core: &mut Core<S>, now: Time, data: &[u8]) {
        self.last = now;
        if self.must_wait(core) {
            if self.divertable(core) {
                let m = core.pool().alloc_copy(data);
                self.send_layered(core, now, m, false, 1, true, Miss::Diverted);
            } else {
                self.backlog.push_bytes(data, core.pool());
            }
            return;
        }
        let m = core.pool().alloc_copy(data);
        self.send_one(core, now, m, false, 1);
    }

    /// Whether a message sent now must wait in the backlog: post-processing is pending,
    /// older messages wait, or the responder does not know the identification yet.
    #[inline(always)]
    fn must_wait<S: LayerSet>(&self, core: &Core<S>) -> bool {
        self.pending.send || !self.backlog.is_empty() || !self.may_send(core)
    }

    /// Whether a message that may not take the fast path now goes the layered way at once:
    /// only diversions stop it, and nothing older waits.
    #[cold]
    fn divertable<S: LayerSet>(&self, core: &Core<S>) -> bool {
        !self.pending.send && self.backlog.is_empty() && core.send_diverted_only()
    }

    /// Send one body on the fast path if it can, else layered: the predicted header goes in
    /// front of it. Inlined into each caller: it is the body of the usual send, and out of
    /// line it adds a call with spilled arguments to every one.
    #[inline(always)]
    fn send_one<S: LayerSet>(
        &mut self,
        core: &mut Core<S>,
        now: Time,
        m: Msg,
        packed: bool,
        msgs: u64,
    ) {
        // Unchecked: a decrement. Otherwise the sampler decides, out of line.
        if !self.send_check.pass() {
            self.send_one_sampled(core, now, m, packed, msgs);
            return;
        }
        self.send_body(core, now, m, packed, msgs, false);
    }

    /// [`send_one`](Self::send_one) of a message the send sampler did not let through: send
    /// it unchecked, checked against the layered path (see
    /// [`AccelConfig::check`](super::AccelConfig)), or, once the send direction is
    /// distrusted, on the layered path.
    #[cold]
    #[inline(never)]
    fn send_one_sampled<S: LayerSet>(
        &mut self,
        core: &mut Core<S>,
        now: Time,
        m: Msg,
        packed: bool,
        msgs: u64,
    ) {
        match self.send_check.sample() {
            Sample::Skip => {
                self.send_body(core, now, m, packed, msgs, false);
            }
            Sample::Check => {
                if let Some((layer, body)) = self.send_body(core, now, m, packed, msgs, true) {
                    self.distrust(true, layer);
                    // Counted as packed when the fast path had it.
                    self.send_layered(core, now, body, packed, msgs, false, Miss::Distrusted);
                }
            }
            Sample::Distrusted => {
                self.send_layered(core, now, m, packed, msgs, true, Miss::Distrusted)
            }
        }
    }

    /// Send `body` on the layered path for `why`, the predicted header in front (the layered
    /// pre-sends write their fields over it), packed if `packed` (and counted as packed if
    /// `count_packing`).
    #[allow(clippy::too_many_arguments)]
    #[cold]
    #[inline(never)]
    fn send_layered<S: LayerSet>(
        &mut self,
        core: &mut Core<S>,
        now: Time,
        mut body: Msg,
        packed: bool,
        msgs: u64,
        count_packing: bool,
        why: Miss,
    ) {
        body.prepend(self.predict.send_header(self.header_len, false));
        if packed && count_packing {
            self.mark_packed(&mut body, core.layout(), msgs);
        } else if packed {
            self.set_packed(&mut body, core.layout());
        }
        self.send_missed(core, now, body, why, msgs);
    }

    /// A check caught `layer` mispredicting (a send if `send`, else a delivery): that
    /// direction's fast path is off from now on, and the layer is named in the stats.
    #[cold]
    #[inline(never)]
    fn distrust(&mut self, send: bool, layer: &'static str) {
        if send {
            self.send_check.distrust();
            self.stats.distrusted_send.get_or_insert(layer);
        } else {
            self.deliver_check.distrust();
            self.stats.distrusted_deliver.get_or_insert(layer);
        }
    }

    /// Check a fast-path send (`m`, as it would be queued; `body`, as it was given) against
    /// the layered path: the layer that mispredicts, if one does (under
    /// [`FastPathCheck::Every`](super::FastPathCheck::Every) the check panics instead).
    #[cold]
    #[inline(never)]
    fn check_send<S: LayerSet>(
        &mut self,
        core: &mut Core<S>,
        now: Time,
        m: &Msg,
        body: &Msg,
    ) -> Option<&'static str> {
        self.stats.checked_sends += 1;
        let panic = self.send_check.panics();
        // With a delivery's post-processing pending, the fast send carried its gossip; the
        // layered pre-sends, run before that post-processing, do not know it yet.
        let gossip = self.pending.deliver;
        predict::check_send(&self.predict, core, now, m, body.data(), gossip, panic)
    }

    /// [`send_one`](Self::send_one); `check`: check the sent header against the layered path.
    /// The check needs the body as the application gave it: it is copied once the filter
    /// passed (the fast path is taken; the body is untouched until the transforms), so a
    /// message that misses (a fragment, say) costs no copy. The layer a check caught
    /// mispredicting, if one did, and that copy: the fast path's datagram (and its
    /// retransmission copies) is then freed, nothing queued, and the caller sends the copy on
    /// the layered path.
    #[inline(always)]
    fn send_body<S: LayerSet>(
        &mut self,
        core: &mut Core<S>,
        now: Time,
        mut m: Msg,
        packed: bool,
        msgs: u64,
        check: bool,
    ) -> Option<(&'static str, Msg)> {
        let hl = self.header_len;
        // While the fast path's delivery waits for its post-processing, the send carries
        // the prediction that has its gossip (a reply acknowledges what it answers).
        m.prepend(self.predict.send_header(hl, self.pending.deliver));
        if packed {
            self.mark_packed(&mut m, core.layout(), msgs);
        }
        if core.send_disabled() || !self.shape.plain_send {
            if let Some(why) = self.send_checks(core, now, &mut m) {
                self.send_missed(core, now, m, why, msgs);
                return None;
            }
        } else if core.path().body_limit().is_some_and(|b| m.len() - hl > b) {
            // Larger than the path carries: the layer that cuts messages cuts it.
            self.send_missed(core, now, m, Miss::Fragment, msgs);
            return None;
        } else if let Some(why) = self.send_filter(&mut m, core.layout().order()) {
            self.send_missed(core, now, m, why, msgs);
            return None;
        }
        let verify = if check {
            Some(self.body_copy(core, &m))
        } else {
            None
        };
        let liar = match self.shape.reclaim_layer {
            Some(reclaim @ (_, None)) => {
                self.send_reclaimed(core, now, m, reclaim, verify.as_ref(), msgs)
            }
            Some(reclaim @ (_, Some(_))) => {
                let all = self.shape.transform.len();
                if self.transform_send(core, now, &mut m, 0..all) {
                    self.send_reclaimed(core, now, m, reclaim, verify.as_ref(), msgs)
                } else {
                    // Dropped by a transform: counted as sent on the fast path, as below.
                    self.stats.fast_send_msgs += msgs;
                    None
                }
            }
            _ => {
                // A message the transforms dropped counts as sent on the fast path too.
                let liar = self.send_passed_general(core, now, m, verify.as_ref());
                if liar.is_none() {
                    self.stats.fast_send_msgs += msgs;
                }
                liar
            }
        };
        match (liar, verify) {
            (Some(liar), Some(body)) => Some((liar, body)),
            (_, body) => {
                if let Some(body) = body {
                    core.pool().free(body);
                }
                None
            }
        }
    }

    /// Check (if `verify`) and send a fast-path datagram `m` whose retransmission copy is
    /// taken back from the link ([`Reclaim`]): `reclaim` is the layer that wants it and, if
    /// body transforms ran, the bytes of their trailers ([`Reclaim::trailers`]). What
    /// [`send_body`](Self::send_body) returns.
    #[inline(always)]
    fn send_reclaimed<S: LayerSet>(
        &mut self,
        core: &mut Core<S>,
        now: Time,
        m: Msg,
        reclaim: (usize, Option<usize>),
        verify: Option<&Msg>,
        msgs: u64,
    ) -> Option<&'static str> {
        let liar = match verify {
            Some(body) => self.check_send(core, now, &m, body),
            None => None,
        };
        if liar.is_some() {
            core.pool().free(m);
        } else {
            self.stats.fast_send_msgs += msgs;
            self.send_passed(core, m, Some(reclaim));
        }
        liar
    }

    /// A copy of the body of `m` (header area in front), for a check.
    #[cold]
    #[inline(never)]
    fn body_copy<S: LayerSet>(&self, core: &mut Core<S>, m: &Msg) -> Msg {
        core.pool().alloc_copy(&m.data()[self.header_len..])
    }

    /// The send's checks when the usual case does not hold: a disabled send header or a
    /// shape without fast sends; the pre-sends of layers that do not predict; the filter.
    /// `None` when the message may go on.
    #[inline(never)]
    fn send_checks<S: LayerSet>(
        &mut self,
        core: &mut Core<S>,
        now: Time,
        m: &mut Msg,
    ) -> Option<Miss> {
        if core.send_disabled() || !self.shape.fast_send {
            return Some(Miss::Disabled);
        }
        let stop = core.pre_phases(now, self.shape.send_unpredicted.iter().copied(), true, m);
        if stop.is_some() {
            core.free_kept();
            return Some(Miss::Unpredicted);
        }
        if core
            .path()
            .body_limit()
            .is_some_and(|b| m.len() - self.header_len > b)
        {
            return Some(Miss::Fragment);
        }
        self.send_filter(m, core.layout().order())
    }

    /// Run the send filter on `m` (header area and body); `None` when it passes.
    #[inline(always)]
    fn send_filter(&self, m: &mut Msg, order: ByteOrder) -> Option<Miss> {
        let (h, b) = m.data_mut().split_at_mut(self.header_len);
        send_miss(self.filters.send(&mut FilterCtx::send(h, order, b)))
    }

    /// Set the packed bit of a send's header area (the prediction says "not packed": a
    /// message-specific field starts at zero) and count the packing. Out of line: packed
    /// datagrams leave from post-processing, off the latency path.
    #[inline(never)]
    fn mark_packed(&mut self, m: &mut Msg, layout: &Layout, msgs: u64) {
        self.set_packed(m, layout);
        self.stats.packed_datagrams += 1;
        self.stats.packed_msgs += msgs;
        self.stats.max_pack = self.stats.max_pack.max(msgs);
    }

    /// Set the packed bit of a send's header area.
    fn set_packed(&self, m: &mut Msg, layout: &Layout) {
        let hl = self.header_len;
        write_bits(&mut m.data_mut()[..hl], self.packed_loc, layout.order(), 1);
    }

    /// The fast path refused a message (`why`): the layered path sends it.
    #[cold]
    #[inline(never)]
    fn send_missed<S: LayerSet>(
        &mut self,
        core: &mut Core<S>,
        now: Time,
        m: Msg,
        why: Miss,
        msgs: u64,
    ) {
        self.stats.miss(true, why);
        self.stats.slow_send_msgs += msgs;
        self.send_check.after_miss();
        core.run_send(now, 0, m, self);
        core.drain(now, self);
        self.predict.refresh(core);
    }

    /// A fast-path send whose retransmission copies are taken now (several layers want one,
    /// or layers that do not predict kept theirs) or whose body a layer transforms (sealing)
    /// before it goes out. `verify` and the result: as for [`send_body`](Self::send_body).
    #[inline(never)]
    fn send_passed_general<S: LayerSet>(
        &mut self,
        core: &mut Core<S>,
        now: Time,
        mut m: Msg,
        verify: Option<&Msg>,
    ) -> Option<&'static str> {
        for &i in &self.shape.send_unpredicted {
            if let Some(c) = core.kept_copy(i) {
                self.pending.copies.push((i, c));
            }
        }
        // A layer's copy is the message as it reaches that layer: after the transforms above
        // it (a window below a seal retransmits the sealed datagram), before those below.
        let mut transformed = 0;
        for k in 0..self.shape.copy.len() {
            let i = self.shape.copy[k];
            let above = self.shape.transform.partition_point(|&t| t < i);
            if above > transformed {
                if !self.transform_send(core, now, &mut m, transformed..above) {
                    return None;
                }
                transformed = above;
            }
            let copy = core.pool().alloc_copy(m.data());
            self.pending.copies.push((i, copy));
        }
        let all = self.shape.transform.len();
        if all > transformed && !self.transform_send(core, now, &mut m, transformed..all) {
            return None;
        }
        if let Some(body) = verify {
            if let Some(liar) = self.check_send(core, now, &m, body) {
                // Nothing of this send is kept: not the datagram, not the copies taken for
                // it (the only ones pending: a fast send starts with none).
                core.pool().free(m);
                for (_, c) in self.pending.copies.drain(..) {
                    core.pool().free(c);
                }
                return Some(liar);
            }
        }
        self.send_passed(core, m, None);
        None
    }

    /// Put a message that passed the send filter on the link and leave its post-processing
    /// pending; `reclaim`: the layer whose retransmission copy the sent datagram becomes, and
    /// the bytes of the transforms' trailers the copy leaves off ([`Reclaim`]).
    #[inline(always)]
    fn send_passed<S: LayerSet>(
        &mut self,
        core: &mut Core<S>,
        mut m: Msg,
        reclaim: Option<(usize, Option<usize>)>,
    ) {
        let hl = self.header_len;
        self.pending.send_hdr.set(&m.data()[..hl]);
        self.pending.send = true;
        let body_len = m.len() - hl;
        self.ident.wrap(&mut m, hl, self.order, &mut self.stats);
        if let Some((layer, trailers)) = reclaim {
            self.pending.reclaim = Some(Reclaim {
                layer,
                id: m.buffer_id(),
                body_len,
                trailers,
            });
        }
        core.queue_out(m, self);
    }

    /// Run the pre-sends of the body-transforming layers `which` (indices into the shape's
    /// transforms) on a fast-path message; `false` if one dropped it (the message and its
    /// retransmission copies are then freed).
    #[inline(always)]
    fn transform_send<S: LayerSet>(
        &mut self,
        core: &mut Core<S>,
        now: Time,
        m: &mut Msg,
        which: std::ops::Range<usize>,
    ) -> bool {
        let stop = match self.shape.transform[which] {
            [t] => core.pre_phase(now, t, true, m),
            ref ts => core.pre_phases(now, ts.iter().copied(), true, m),
        };
        match stop {
            None => true,
            Some((i, v)) => {
                self.transform_dropped(core, m, i, v);
                false
            }
        }
    }

    /// A body transform (layer `i`, verdict `v`) stopped a fast-path send: count the drop,
    /// free the message and its retransmission copies.
    #[cold]
    #[inline(never)]
    fn transform_dropped<S: LayerSet>(
        &mut self,
        core: &mut Core<S>,
        m: &mut Msg,
        i: usize,
        v: Verdict,
    ) {
        // Only a drop can stop a body transform on the send path.
        if let Verdict::Drop(r) = v {
            core.count_drop(i, r);
        }
        core.free_kept();
        core.pool().free(std::mem::take(m));
        for (_, c) in self.pending.copies.drain(..) {
            core.pool().free(c);
        }
    }

    /// Run the deferred post-processing, then send the backlog packed (seed 004 §3.4).
    /// Nothing to do costs a check.
    #[inline]
    pub(crate) fn post_process<S: LayerSet>(&mut self, core: &mut Core<S>, now: Time) {
        self.last = now;
        if self.actionable(core) {
            self.post_process_pending(core, now);
        }
    }

    /// [`post_process`](Self::post_process) with something to do: the pending delivery's
    /// post-phases, then the pending send's, then the backlog. Straight-line for the usual
    /// case (no backlog); as one loop, the backlog's set-up was hoisted into every call
    /// (callgrind: ~40 instructions a call).
    #[inline(never)]
    fn post_process_pending<S: LayerSet>(&mut self, core: &mut Core<S>, now: Time) {
        // A pending delivery is older than a pending send (receiving runs the pending
        // post-processing first), so it goes first.
        self.post_deliver_pending(core, now);
        self.post_send_pending(core, now);
        if !self.backlog.is_empty() {
            self.send_backlog(core, now);
        }
    }

    /// Send the backlog while the path lets the fast path send, each datagram's
    /// post-processing before the next (packing: seed 004 §3.4).
    #[inline(never)]
    fn send_backlog<S: LayerSet>(&mut self, core: &mut Core<S>, now: Time) {
        loop {
            let diverted = !self.may_send(core);
            if diverted && !core.send_diverted_only() {
                return;
            }
            let Some(w) = self.backlog.pop() else {
                return;
            };
            if diverted {
                self.send_layered(core, now, w.body, w.packed, w.msgs, true, Miss::Diverted);
            } else {
                self.send_one(core, now, w.body, w.packed, w.msgs);
            }
            self.post_deliver_pending(core, now);
            self.post_send_pending(core, now);
        }
    }

    /// The post-sends of the fast path's pending send, if any, and fresh predictions.
    #[inline(always)]
    fn post_send_pending<S: LayerSet>(&mut self, core: &mut Core<S>, now: Time) {
        if self.pending.send {
            self.pending.send = false;
            self.settle_queued_reclaim(core);
            let pending = &mut self.pending;
            core.post_send_passed(now, &pending.send_hdr, &mut pending.copies);
            core.drain(now, self);
            self.predict.refresh(core);
        }
    }

    /// The post-deliveries of the fast path's pending delivery, if any.
    #[inline(always)]
    fn post_deliver_pending<S: LayerSet>(&mut self, core: &mut Core<S>, now: Time) {
        if self.pending.deliver {
            self.pending.deliver = false;
            core.post_deliver_passed(now, &self.pending.deliver_hdr, 0);
            core.drain(now, self);
            // A send's post-processing that follows refreshes the predictions once for both
            // (nothing between reads them: what the delivery's post-phases originated went
            // the layered way).
            if !self.pending.send {
                self.predict.refresh(core);
            }
        }
    }

    /// Accelerated receive (seed 004 Figure 3, `from_network`).
    #[inline]
    pub(crate) fn receive<S: LayerSet>(&mut self, core: &mut Core<S>, now: Time, mut m: Msg) {
        if self.actionable(core) {
            self.post_process(core, now);
        }
        self.last = now;
        // The usual datagram: the predicted preamble, long enough. Its identification was
        // left off; restore it.
        if self.ident.is_usual(&m, self.header_len) {
            m.pop_front(PREAMBLE_LEN);
            m.prepend(self.ident.rx_ident());
            core.set_rx_wire(core.layout().order());
            self.accept(core, now, m, None);
            return;
        }
        self.receive_general(core, now, m);
    }

    /// [`receive`](Self::receive) for any datagram: admit it by cookie or identification,
    /// convert the byte order.
    #[inline(never)]
    fn receive_general<S: LayerSet>(&mut self, core: &mut Core<S>, now: Time, mut m: Msg) {
        let native = core.layout().order();
        match self.ident.admit(&mut m, self.header_len, native) {
            Err(why) => {
                use super::cookie::Refused;
                match why {
                    Refused::Truncated => self.stats.truncated += 1,
                    Refused::UnknownCookie => self.stats.unknown_cookie += 1,
                    Refused::UnknownConn => self.stats.unknown_conn += 1,
                }
                core.refuse_before();
                core.pool().free(m);
            }
            Ok(a) => {
                core.set_rx_wire(a.order);
                if a.order != native {
                    convert_order(&mut m.data_mut()[..self.header_len], core.layout(), a.order);
                }
                self.accept(core, now, m, a.learn);
            }
        }
    }

    /// A datagram with its full header area in native order: deliver it, first learning what
    /// it teaches (`learn`: the identification and the peer's cookie it carried; and whether
    /// the peer knows our cookie), undone if the stack drops it.
    #[inline(always)]
    fn accept<S: LayerSet>(
        &mut self,
        core: &mut Core<S>,
        now: Time,
        m: Msg,
        learn: Option<(u64, u64)>,
    ) {
        if self.ident.teaches_nothing(m.data(), &learn) {
            self.deliver(core, now, m);
        } else {
            self.learn(core, now, m, learn);
        }
    }

    /// [`accept`](Self::accept) of a datagram that teaches something: learn it, deliver, and
    /// forget it again if the stack dropped the datagram.
    #[inline(never)]
    fn learn<S: LayerSet>(
        &mut self,
        core: &mut Core<S>,
        now: Time,
        m: Msg,
        learn: Option<(u64, u64)>,
    ) {
        let saved = self.ident.learn(m.data(), learn);
        // A reply may leave before this delivery is post-processed: its prediction must
        // already carry the identification and the cookie acknowledgement.
        self.refresh_template(core);
        let drops_before = core.stats().input_drops();
        self.deliver(core, now, m);
        if core.stats().input_drops() != drops_before {
            self.ident.unlearn(saved);
            self.refresh_template(core);
        }
    }

    /// The delivery fast path, or the layered path on a miss.
    #[inline]
    fn deliver<S: LayerSet>(&mut self, core: &mut Core<S>, now: Time, m: Msg) {
        if self.shape.bottom_transforms > 0 {
            self.deliver_transformed(core, now, m);
        } else {
            self.deliver_checked(core, now, m, 0);
        }
    }

    /// The fast path's checks (filter, enabled, prediction, layers that do not predict) on a
    /// delivery whose `transformed` bottom layers have run; then to the application, or to
    /// the layered path on a miss.
    #[inline(always)]
    fn deliver_checked<S: LayerSet>(
        &mut self,
        core: &mut Core<S>,
        now: Time,
        mut m: Msg,
        transformed: usize,
    ) {
        let hl = self.header_len;
        let miss = {
            let (h, b) = m.data().split_at(hl);
            let mut ctx =
                FilterCtx::deliver(h, core.layout().order(), b).written_in(core.rx_wire());
            match self.filters.deliver(&mut ctx) {
                0 if core.deliver_disabled() || !self.shape.fast_deliver => Some(Miss::Disabled),
                0 => (!self.predict.delivery_matches(h)).then_some(Miss::Mismatch),
                MISS_FRAGMENT => Some(Miss::Fragment),
                _ => Some(Miss::Filter),
            }
        };
        if let Some(why) = miss {
            self.deliver_missed(core, now, m, why, transformed);
            return;
        }
        if !self.shape.deliver_unpredicted.is_empty()
            && !self.deliver_unpredicted(core, now, &mut m)
        {
            self.deliver_missed(core, now, m, Miss::Unpredicted, transformed);
            return;
        }
        if !self.deliver_check.pass() && !self.deliver_sampled(core, now, &m, transformed) {
            self.deliver_missed(core, now, m, Miss::Distrusted, transformed);
            return;
        }
        let h = &m.data()[..hl];
        let packed = self.packed.get(h);
        self.pending.deliver_hdr.set(h);
        self.pending.deliver = true;
        self.stats.fast_deliver_datagrams += 1;
        m.pop_front(hl);
        if !packed {
            self.stats.fast_deliver_msgs += 1;
            core.deliver(m);
            return;
        }
        self.deliver_packed(core, m);
    }

    /// A fast-path delivery the delivery sampler did not let through: whether it may go on
    /// (unchecked, or checked against the layered path and accepted there); `false` once the
    /// delivery direction is distrusted, or when the check caught a layer mispredicting
    /// (which distrusts it). Nothing of the delivery is committed yet.
    #[cold]
    #[inline(never)]
    fn deliver_sampled<S: LayerSet>(
        &mut self,
        core: &mut Core<S>,
        now: Time,
        m: &Msg,
        transformed: usize,
    ) -> bool {
        match self.deliver_check.sample() {
            Sample::Skip => true,
            Sample::Distrusted => false,
            Sample::Check => {
                self.stats.checked_deliveries += 1;
                let panic = self.deliver_check.panics();
                match predict::check_deliver(core, now, m, transformed, panic) {
                    None => true,
                    Some(layer) => {
                        self.distrust(false, layer);
                        false
                    }
                }
            }
        }
    }

    /// Run the pre-deliveries of the layers that do not predict; `false` if one refuses.
    #[inline(never)]
    fn deliver_unpredicted<S: LayerSet>(
        &mut self,
        core: &mut Core<S>,
        now: Time,
        m: &mut Msg,
    ) -> bool {
        let stop = core.pre_phases(
            now,
            self.shape.deliver_unpredicted.iter().copied(),
            false,
            m,
        );
        core.free_kept();
        stop.is_none()
    }

    /// Unpack a fast-path delivery's packed body to the application.
    #[inline(never)]
    fn deliver_packed<S: LayerSet>(&mut self, core: &mut Core<S>, body: Msg) {
        match pack::count(body.data()) {
            Some(count) => {
                self.stats.fast_deliver_msgs += count as u64;
                core.deliver_several(body, count, pack::split);
            }
            None => {
                self.stats.bad_packing += 1;
                core.refuse_above();
                core.pool().free(body);
            }
        }
    }

    /// A delivery that missed the fast path (`why`) above the `transformed` bottom layers
    /// (which have run): the layered path takes it from there.
    #[cold]
    #[inline(never)]
    fn deliver_missed<S: LayerSet>(
        &mut self,
        core: &mut Core<S>,
        now: Time,
        m: Msg,
        why: Miss,
        transformed: usize,
    ) {
        let n = core.layers().count();
        self.stats.miss(false, why);
        let hdr = HeaderCopy::of(&m, self.header_len);
        core.run_deliver(now, n - transformed, m, self);
        self.finish_layered_delivery(core, now, &hdr, n - transformed);
    }

    /// The delivery path of a stack with body transforms (decryption) at the bottom: they
    /// run first, as they would on the layered path, since the filter must see the
    /// plaintext; then the fast path's checks.
    #[inline]
    fn deliver_transformed<S: LayerSet>(&mut self, core: &mut Core<S>, now: Time, mut m: Msg) {
        let n = core.layers().count();
        let k = self.shape.bottom_transforms;
        let stop = if k == 1 {
            core.pre_phase(now, n - 1, false, &mut m)
        } else {
            core.pre_phases(now, (n - k..n).rev(), false, &mut m)
        };
        core.free_kept();
        let Some((i, v)) = stop else {
            self.deliver_checked(core, now, m, k);
            return;
        };
        // Refused below: finish on the layered path from there.
        let hdr = HeaderCopy::of(&m, self.header_len);
        match v {
            Verdict::Drop(r) => {
                core.count_refusal(i, r);
                core.pool().free(m);
            }
            _ => core.post_deliver(now, i, &hdr, Handoff::Absorbed(m)),
        }
        self.finish_layered_delivery(core, now, &hdr, i + 1);
    }

    /// A delivery that left the fast path below layer `from`: the post-phases of the layers
    /// from there to the bottom (whose pre-phases the accelerator ran), then what they
    /// queued, then fresh predictions.
    fn finish_layered_delivery<S: LayerSet>(
        &mut self,
        core: &mut Core<S>,
        now: Time,
        hdr: &HeaderCopy,
        from: usize,
    ) {
        self.deliver_check.after_miss();
        core.post_deliver_passed(now, hdr, from);
        core.drain(now, self);
        self.predict.refresh(core);
    }
}

/// Rewrite every field of a header from `from` byte order into the layout's (read from a copy
/// of it, which holds the whole header since layouts are at most `MAX_HEADER` bytes: no
/// allocation per datagram).
fn convert_order(h: &mut [u8], layout: &Layout, from: ByteOrder) {
    let mut src = HeaderCopy::zeroed(0);
    src.set(h);
    image_in(
        &src.bytes[..src.len],
        from,
        layout.locs(),
        h,
        layout.order(),
    );
}
