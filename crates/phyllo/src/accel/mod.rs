//! The Protocol Accelerator of seed 004 (van Renesse, "Masking the Overhead of Protocol
//! Layering"), wrapped around the layered core (`layered`).
//!
//! The accelerator owns its state and drives the core through a narrow interface; the core
//! knows nothing of it beyond the `Edge` the accelerator implements (framing datagrams,
//! unpacking deliveries). One module per idea of the paper:
//!
//! | module | seed 004 | what |
//! |---|---|---|
//! | [`preamble`] | §2.2, Figure 1 | the 8-byte preamble: identification bit, byte order, cookie |
//! | `cookie` | §2.2 | connection identification and cookies: framing and admitting datagrams |
//! | `predict` | §3.2 | predicted send and delivery headers; the check against the layered path ([`FastPathCheck`]) |
//! | `filters` | §3.3 | the send and delivery packet filters built from the layers' segments |
//! | `deferred` | §3.1 | deferred post-processing, and the retransmission copy taken after sending |
//! | `pack` | §3.4 | the backlog and message packing |
//! | `fastpath` | §4, Figure 3 | `send`, `from_network`, `deliver`: the fast paths that tie them |
//! | `stats` | §4 | hits and misses by reason |
//!
//! The compact layout itself is [`crate::layout::Layout::compact`] (§2.1); many accelerated
//! connections behind one socket, found by cookie (§2.2), are [`crate::demux`], which stands
//! above the connection. Enable the accelerator with [`crate::Config::accelerated`].

mod cookie;
mod deferred;
mod fastpath;
mod filters;
mod pack;
pub mod preamble;
mod predict;
mod stats;

pub use crate::filter::{MISS_FILTER, MISS_FRAGMENT};
pub use pack::unpack_ranges;
pub use predict::{FastPathCheck, CHECK_AFTER_MISS, CHECK_FIRST, CHECK_PERIOD};
pub use stats::{AccelStats, Miss};

pub(crate) use cookie::{declare, PaFields};

use crate::field::FieldSpec;
use crate::field::{Bit, ByteOrder, FieldLoc};
use crate::filter::VerifyError;
use crate::layered::{Core, Edge};
use crate::layout::{Layout, MAX_HEADER};
use crate::msg::{Msg, Pool};
use crate::ready::Ready;
use crate::stack::LayerSet;
use crate::time::Time;
use cookie::Ident;
use deferred::Pending;
use fastpath::Shape;
use filters::Filters;
use pack::Backlog;
use predict::{Predictions, Sampler};

/// How long after an operation its deferred post-processing falls due in
/// [`Connection::poll_timeout`](crate::Connection::poll_timeout). The next operation runs it
/// first in any case, and a driver that knows when the application is idle runs it then
/// ([`Connection::post_process`](crate::Connection::post_process)); the grace keeps a driver
/// that checks its deadlines right after handing over a datagram from running it on the
/// critical path, before the application has even seen the delivery. An event loop that
/// follows only the sans-IO contract runs it this much later: 10 µs, against a window's
/// acknowledgement delay of 200 µs.
pub const DEFERRED_GRACE: std::time::Duration = std::time::Duration::from_micros(10);

/// What the accelerator needs from the connection's configuration.
pub(crate) struct AccelConfig {
    /// Largest packed body, bytes.
    pub(crate) mtu: usize,
    /// Whether this end chooses the identification.
    pub(crate) initiator: bool,
    /// This end's cookie (random when `None`).
    pub(crate) cookie: Option<u64>,
    /// Which fast-path sends and deliveries to check against the layered path, and what a
    /// failed check does ([`crate::Config::fast_path_check`]).
    pub(crate) check: FastPathCheck,
}

/// The accelerator of one connection (seed 004 Table 3, both directions).
pub(crate) struct Accelerator {
    filters: std::sync::Arc<Filters>,
    shape: Shape,
    ident: Ident,
    predict: Predictions,
    pending: Pending,
    backlog: Backlog,
    packed: Bit,
    packed_loc: FieldLoc,
    header_len: usize,
    order: ByteOrder,
    /// The time of the latest operation: deferred work is due from then.
    last: Time,
    /// Which fast-path sends to check against the layered path ([`AccelConfig::check`]).
    send_check: Sampler,
    /// Which fast-path deliveries to check.
    deliver_check: Sampler,
    stats: AccelStats,
}

impl Accelerator {
    /// Build the accelerator for `core` (whose layout is compact and holds the fields `f`;
    /// `specs` are the fields as the layers declared them): filters, cookies, first
    /// predictions. A filter that does not verify is an error.
    pub(crate) fn build<S: LayerSet>(
        core: &mut Core<S>,
        specs: &[FieldSpec],
        f: PaFields,
        cfg: &AccelConfig,
    ) -> Result<Accelerator, VerifyError> {
        let layout = core.layout();
        let hl = layout.header_len();
        let filters = Filters::build(core.layers(), layout)?;
        let predict = Predictions::new(layout, specs, core.layers());
        let shape = Shape::of(core.layers(), &predict, &filters);
        let (cookie, ident) = cookie::fresh(cfg.cookie);
        let packed_loc = layout.loc(f.packed);
        let mut pa = Accelerator {
            filters,
            shape,
            ident: Ident::new(layout, f, cookie, cfg.initiator.then_some(ident)),
            predict,
            pending: Pending::new(hl),
            backlog: Backlog::new(cfg.mtu),
            packed: Bit::of(packed_loc, hl, layout.order()).unwrap_or(Bit::NEVER),
            packed_loc,
            header_len: hl,
            order: layout.order(),
            last: Time::ZERO,
            send_check: Sampler::new(cfg.check),
            deliver_check: Sampler::new(cfg.check),
            stats: AccelStats::default(),
        };
        pa.refresh_template(core);
        Ok(pa)
    }

    /// Counters.
    pub(crate) fn stats(&self) -> &AccelStats {
        &self.stats
    }

    /// The identification state.
    pub(crate) fn ident(&self) -> &Ident {
        &self.ident
    }

    /// Where the identification lives in the header area.
    pub(crate) fn conn_ident_loc(&self, _: &Layout) -> FieldLoc {
        self.ident.conn_loc()
    }

    /// The wire header of a usual data message.
    pub(crate) fn data_header_bytes(&self, header_len: usize) -> usize {
        self.ident.data_header_bytes(header_len)
    }

    /// Stop acknowledging the peer's cookie (see
    /// [`Connection::block_cookie_ack`](crate::Connection::block_cookie_ack)).
    pub(crate) fn block_cookie_ack<S: LayerSet>(&mut self, core: &mut Core<S>) {
        self.ident.block_cookie_ack();
        self.refresh_template(core);
    }

    /// Whether the backlog can take another message.
    pub(crate) fn can_accept(&self) -> bool {
        self.backlog.can_accept()
    }

    /// Give back the capacity of an empty list of retransmission copies (an idle connection).
    pub(crate) fn shrink(&mut self) {
        if self.pending.copies.is_empty() {
            self.pending.copies = Vec::new();
        }
    }

    /// Whether post-processing or backlog is pending.
    pub(crate) fn busy(&self) -> bool {
        !self.pending.is_none() || !self.backlog.is_empty()
    }

    /// Whether [`post_process`](Self::post_process) would do something now.
    #[inline]
    pub(crate) fn actionable<S: LayerSet>(&self, core: &Core<S>) -> bool {
        !self.pending.is_none()
            || (!self.backlog.is_empty() && (self.may_send(core) || core.send_diverted_only()))
    }

    /// Whether a message may leave the backlog: no layer disabled the send header, and this
    /// end knows the identification.
    #[inline(always)]
    fn may_send<S: LayerSet>(&self, core: &Core<S>) -> bool {
        !core.send_disabled() && self.ident.can_send()
    }

    /// When deferred work is due, if there is any: [`DEFERRED_GRACE`] after the operation
    /// that left it.
    pub(crate) fn deadline<S: LayerSet>(&self, core: &Core<S>) -> Option<Time> {
        self.actionable(core).then(|| self.last + DEFERRED_GRACE)
    }

    /// Run the deferred work, then the layers' due timers. The deferred work leaves the
    /// predictions refreshed; a timer that ran (a retransmission, an acknowledgement) changed
    /// what they predict, so they are refreshed again only then.
    pub(crate) fn handle_timeout<S: LayerSet>(&mut self, core: &mut Core<S>, now: Time) {
        self.post_process(core, now);
        if core.run_timers(now, self) {
            self.predict.refresh(core);
        }
    }

    /// Rebuild the template the layers' originated messages and the send prediction start
    /// from (the accelerator's own fields), then the predictions. Called whenever the
    /// identification or the cookie state changes.
    fn refresh_template<S: LayerSet>(&mut self, core: &mut Core<S>) {
        let hl = self.header_len;
        let mut t = [0u8; MAX_HEADER];
        self.ident
            .write_template(&mut t[..hl], core.layout().order());
        core.set_template(&t[..hl]);
        self.predict.refresh(core);
    }

    /// A datagram taken from the transmit queue by value: if the deferred retransmission
    /// copy waits for it, the copy is taken now (the caller keeps the datagram).
    pub(crate) fn unqueued<S: LayerSet>(&mut self, core: &mut Core<S>, m: Msg) -> Msg {
        if self.pending.awaits(&m) {
            self.reclaim_copy(&m, core.pool());
        }
        m
    }

    /// The link is done with the datagram `m` the deferred copy waits for: `m` becomes the
    /// copy (its preamble off, the full header area back on, any transforms' trailers off).
    fn reclaim_sent(&mut self, mut m: Msg) {
        let Some(r) = self.pending.reclaim.take() else {
            return;
        };
        let wire_hdr = m.len().saturating_sub(r.body_len);
        m.pop_front(wire_hdr);
        if let Some(trailers) = r.trailers {
            m.pop_back(trailers);
            m.set_transformed(true);
        }
        m.prepend(&self.pending.send_hdr.bytes[..self.header_len]);
        self.pending.copies.push((r.layer, m));
    }

    /// Take the deferred copy from the datagram `m`, which stays with the caller.
    fn reclaim_copy(&mut self, m: &Msg, pool: &mut Pool) {
        let Some(r) = self.pending.reclaim.take() else {
            return;
        };
        let wire_hdr = m.len().saturating_sub(r.body_len);
        let end = m
            .len()
            .saturating_sub(r.trailers.unwrap_or(0))
            .max(wire_hdr);
        let mut copy = pool.alloc_copy(&m.data()[wire_hdr..end]);
        copy.set_transformed(r.trailers.is_some());
        copy.prepend(&self.pending.send_hdr.bytes[..self.header_len]);
        self.pending.copies.push((r.layer, copy));
    }

    /// Settle a deferred copy whose datagram is still queued (post-processing before the link
    /// took it): copy it from the queue.
    #[inline(always)]
    fn settle_queued_reclaim<S: LayerSet>(&mut self, core: &mut Core<S>) {
        // Usually settled already: the link released the datagram before post-processing.
        if let Some(r) = self.pending.reclaim {
            self.settle_reclaim_from_queue(core, r);
        }
    }

    /// [`settle_queued_reclaim`](Self::settle_queued_reclaim) of `r`.
    #[inline(never)]
    fn settle_reclaim_from_queue<S: LayerSet>(&mut self, core: &mut Core<S>, r: deferred::Reclaim) {
        // It is usually the newest datagram (post-processing a streaming backlog settles one
        // copy per datagram while they all wait for the link).
        let Some(at) = core.out().iter().rposition(|m| m.buffer_id() == r.id) else {
            // Unreachable by the invariant on `Reclaim`.
            debug_assert!(false, "deferred copy's datagram left the queue unsettled");
            self.pending.reclaim = None;
            return;
        };
        let m = std::mem::take(&mut core.out_mut()[at]);
        self.reclaim_copy(&m, core.pool());
        core.out_mut()[at] = m;
    }
}

impl Edge for Accelerator {
    /// A datagram the layered path sent: the preamble goes on.
    #[inline]
    fn frame(&mut self, m: &mut Msg, header_len: usize) {
        self.ident.wrap(m, header_len, self.order, &mut self.stats);
    }

    #[inline]
    fn release(&mut self, m: Msg, pool: &mut Pool) {
        if self.pending.awaits(&m) {
            self.reclaim_sent(m);
        } else {
            pool.free(m);
        }
    }

    /// A message the layered path delivers: unpacked if packed.
    fn arrive(
        &mut self,
        header: &[u8],
        body: Msg,
        pool: &mut Pool,
        to_app: &mut Ready,
    ) -> Option<u64> {
        let packed = self.packed.get(header);
        let n = if !packed {
            to_app.push(body);
            1
        } else if let Some(count) = pack::count(body.data()) {
            to_app.push_several(body, count, pack::split);
            count as u64
        } else {
            self.stats.bad_packing += 1;
            pool.free(body);
            return None;
        };
        self.stats.slow_deliver_msgs += n;
        Some(n)
    }
}
