//! Header prediction (van Renesse, "Masking the Overhead of Protocol Layering" (seed 004 §3.2)):
//! the protocol-specific (and, for sending, gossip) header of the next message, computed by the
//! layers' post-phases ahead of time.
//!
//! Each connection keeps a predicted header area for the next send and one for the next
//! delivery. A send copies the send prediction in front of the body; a delivery compares the
//! protocol-specific bits of its header with the delivery prediction. Layers write their own
//! fields ([`Layer::predict_send`](crate::Layer::predict_send),
//! [`Layer::predict_deliver`](crate::Layer::predict_deliver)); a layer that does not predict
//! ([`Layer::predicts`](crate::Layer::predicts) is false) has its fields masked out of the
//! comparison, and the fast path runs its pre-phases instead. A body transform's fields
//! (`seal`'s nonce) are left out of the comparison too: the fast path runs its pre-phases on
//! every message, which write and check them, so it predicts nothing.
//!
//! **The check against the layered path.** A layer that claims to predict but whose pre-send
//! would write other values (or whose pre-delivery would refuse what the fast path accepts)
//! makes the fast path a different protocol from the layered one. The fast path therefore
//! checks what it does against the layered computation on the same input and the same state
//! ([`check_send`]: the header the pre-sends would build; [`check_deliver`]: that every
//! pre-delivery accepts the datagram), as [`Config::fast_path_check`](crate::Config) says
//! ([`FastPathCheck`]):
//!
//! - [`FastPathCheck::Every`] (the default in debug builds, so in every test): every fast-path
//!   send and delivery, panicking with the name of the layer that mispredicts.
//! - [`FastPathCheck::Sampled`] (the default in release builds): per direction of a
//!   connection, the first [`CHECK_FIRST`] fast-path operations, the [`CHECK_AFTER_MISS`]
//!   after every operation of that direction that took the layered path, and then one in
//!   [`CHECK_PERIOD`] (a counter, no randomness). A failed check does not panic: that message
//!   takes the layered path before the fast path committed anything, and that direction's
//!   fast path is off for the rest of the connection's life
//!   ([`Miss::Distrusted`](super::Miss::Distrusted), the layer named in
//!   [`AccelStats`](super::AccelStats)). Unchecked operations cost one counter decrement; a
//!   lie in one of them goes out unseen, so sampling finds a layer that keeps mispredicting
//!   soon, but not necessarily before its first wrong datagram, and a layer that lies rarely
//!   perhaps never. A wrong header that went out is the receiver's to judge: its fast path
//!   takes it when its own prediction is just as wrong; otherwise (or when its check samples
//!   it) its layered path does what the layered protocol does with such a header. For a layer
//!   that refuses it above a reliable layer that already acknowledged it, that loses the
//!   message (`tests/predict.rs` shows both).
//! - [`FastPathCheck::Off`]: no check (measurements of the bare fast path).
//!
//! Taking the layered path after a failed check is safe because of canonical processing:
//! pre-phases change no layer state, and the check comes before the fast path touches its own
//! (the pending post-processing, the preamble's counters, the predictions).

use crate::field::FieldSpec;
use crate::field::{le_word, read_bits, write_bits, FieldClass};
use crate::layer::{HeaderCopy, Predict};
use crate::layered::Core;
use crate::layout::{Layout, MAX_HEADER};
use crate::msg::Msg;
use crate::stack::LayerSet;
use crate::time::Time;

/// How the accelerator checks its fast path against the layered path
/// ([`Config::fast_path_check`](crate::Config::fast_path_check); see the module docs of
/// `predict`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum FastPathCheck {
    /// No check: a layer that mispredicts makes the fast path send or accept what the layered
    /// path would not. Only for measuring the bare fast path.
    Off,
    /// Check a sample of the fast-path operations of each direction: the first
    /// [`CHECK_FIRST`], the [`CHECK_AFTER_MISS`] after every operation of that direction that
    /// took the layered path, then one in [`CHECK_PERIOD`]. A failed check sends (or
    /// delivers) that message on the layered path and turns the direction's fast path off for
    /// good, counted as
    /// [`Miss::Distrusted`](super::Miss::Distrusted) and named in
    /// [`AccelStats::distrusted_send`](super::AccelStats::distrusted_send) /
    /// [`AccelStats::distrusted_deliver`](super::AccelStats::distrusted_deliver). Never
    /// panics. The default in release builds.
    Sampled,
    /// Check every fast-path send and delivery, and panic naming the layer that mispredicts.
    /// It costs a layered pass (and a copy of the body) per message. The default in debug
    /// builds, so every test runs it.
    Every,
}

impl FastPathCheck {
    /// The default of the build: [`Every`](Self::Every) with debug assertions,
    /// [`Sampled`](Self::Sampled) without.
    pub const DEFAULT: FastPathCheck = if cfg!(debug_assertions) {
        FastPathCheck::Every
    } else {
        FastPathCheck::Sampled
    };
}

impl Default for FastPathCheck {
    fn default() -> FastPathCheck {
        FastPathCheck::DEFAULT
    }
}

/// [`FastPathCheck::Sampled`]: the first fast-path operations of each direction a connection
/// checks, one after the other. The first messages are where a layer's predictions start from
/// its initial state, and where most mispredicting layers show (the test suite's `liar` on
/// its second message); 16 is a few round trips of a window, and costs nothing measurable
/// once per connection.
pub const CHECK_FIRST: u32 = 16;

/// [`FastPathCheck::Sampled`]: the fast-path operations of a direction checked one after the
/// other after an operation of that direction took the layered path (a miss). A miss moves
/// the layers' state outside the fast path (a fragmented or refused send; an out-of-order,
/// duplicate or unexpected delivery), and the predictions of that direction that follow are
/// computed from a state the fast path has not shown right yet. 4 covers the few operations
/// before the usual case returns, and keeps a lossy link's many misses from making most
/// operations checked ones.
///
/// Only the direction that missed: a reliable sender delivers every pure acknowledgement on
/// the layered path, so counting a delivery miss against the sends too checked half of the
/// sends of a bulk stream (`phyllo-lab stream --stack 'window(16):checksum' --size 1000`: 50 008
/// of 100 000); the periodic check covers what deliveries change in the send state.
pub const CHECK_AFTER_MISS: u32 = 4;

/// [`FastPathCheck::Sampled`]: outside those runs, one fast-path operation in this many is
/// checked (by a counter). A check costs about a layered pass: on `window(16):checksum` with
/// 8-byte messages, ~1 150 instructions for a send (a copy of the body, every pre-send, a
/// compare) and ~570 for a delivery, against ~455 for either on the fast path. Counted by
/// callgrind on `phyllo-lab critical-path` (two sends and two deliveries per round trip), the
/// sampled checks against none cost 3.0 % of the round trip at 64, 1.6 % at 128 and 0.9 % at
/// 256; 128 is the smallest power of two under 2 %. A layer that keeps mispredicting is
/// caught within 128 operations; one that lies rarely may not be (see the module docs).
pub const CHECK_PERIOD: u32 = 128;

/// What a direction's [`Sampler`] says about a fast-path operation.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Sample {
    /// Go on unchecked.
    Skip,
    /// Check it against the layered path.
    Check,
    /// This direction caught a layer mispredicting: take the layered path.
    Distrusted,
}

/// The check decision of one direction of a connection. The usual fast-path operation pays
/// one decrement ([`pass`](Self::pass)); the rest ([`sample`](Self::sample)) is out of line.
pub(crate) struct Sampler {
    /// Operations to let pass before the next one asks [`sample`](Self::sample): 0 for every
    /// operation under [`FastPathCheck::Every`], during a run of checks, and once distrusted.
    skip: u32,
    /// Checks still due back to back (the first ones, or those after a miss).
    run: u32,
    policy: FastPathCheck,
    /// A check caught a layer mispredicting in this direction (named in the stats).
    distrusted: bool,
}

impl Sampler {
    /// A direction's sampler under `policy`, at the start of a connection.
    pub(crate) fn new(policy: FastPathCheck) -> Sampler {
        Sampler {
            skip: if policy == FastPathCheck::Off {
                u32::MAX
            } else {
                0
            },
            run: CHECK_FIRST,
            policy,
            distrusted: false,
        }
    }

    /// Whether the operation goes on unchecked without asking [`sample`](Self::sample).
    #[inline(always)]
    pub(crate) fn pass(&mut self) -> bool {
        if self.skip == 0 {
            return false;
        }
        self.skip -= 1;
        true
    }

    /// What to do with an operation [`pass`](Self::pass) did not let through.
    #[cold]
    #[inline(never)]
    pub(crate) fn sample(&mut self) -> Sample {
        if self.distrusted {
            return Sample::Distrusted;
        }
        match self.policy {
            FastPathCheck::Every => Sample::Check,
            FastPathCheck::Off => {
                self.skip = u32::MAX;
                Sample::Skip
            }
            FastPathCheck::Sampled => {
                self.run = self.run.saturating_sub(1);
                self.skip = if self.run > 0 { 0 } else { CHECK_PERIOD - 1 };
                Sample::Check
            }
        }
    }

    /// An operation of this direction took the layered path: check the next
    /// [`CHECK_AFTER_MISS`].
    #[inline]
    pub(crate) fn after_miss(&mut self) {
        if self.policy == FastPathCheck::Sampled {
            self.run = self.run.max(CHECK_AFTER_MISS);
            self.skip = 0;
        }
    }

    /// A check caught a layer mispredicting: every later operation takes the layered path.
    pub(crate) fn distrust(&mut self) {
        self.distrusted = true;
        self.skip = 0;
    }

    /// Whether a failed check panics ([`FastPathCheck::Every`]) rather than distrusting.
    pub(crate) fn panics(&self) -> bool {
        self.policy == FastPathCheck::Every
    }
}

/// The two predicted header areas of a connection.
pub(crate) struct Predictions {
    send: HeaderCopy,
    /// The send prediction once the predicted delivery has been post-processed: `send` with
    /// the gossip of the layers in `gossip` ([`Layer::predict_gossip`]). A send while the
    /// fast path's delivery waits for its post-processing carries this one.
    ///
    /// [`Layer::predict_gossip`]: crate::Layer::predict_gossip
    send_gossiped: HeaderCopy,
    /// The layers that write gossip.
    gossip: Vec<usize>,
    deliver: HeaderCopy,
    /// The protocol-specific bits of the header area that a delivery's prediction checks:
    /// those of layers that predict and do not transform the body.
    proto_mask: [u8; MAX_HEADER],
    /// Which layers predict their header.
    predicts: Vec<bool>,
    /// How many layers from the top [`refresh`](Self::refresh) asks: all but the body
    /// transforms at the bottom, whose pre-phases write and check their fields on every
    /// fast-path message. A range bounded by the stack's count, so the calls need no index
    /// checks (callgrind: a list of layers, or a range the compiler cannot bound, cost the
    /// unsealed path 15 to 20 instructions a refresh).
    asked: usize,
    /// The layer that declared each field (indexed by handle; the accelerator's own fields
    /// belong to none), to name a layer whose prediction is wrong.
    owner: Vec<usize>,
    /// The bits of the header area that belong to the layers' fields (not the
    /// accelerator's): what a checked send clears for the layered pre-sends to write.
    layer_mask: [u8; MAX_HEADER],
}

impl Predictions {
    /// Predictions for `layers` under `layout`, not yet computed.
    pub(crate) fn new<S: LayerSet>(
        layout: &Layout,
        specs: &[FieldSpec],
        layers: &S,
    ) -> Predictions {
        let predicts: Vec<bool> = (0..layers.count()).map(|i| layers.predicts_at(i)).collect();
        // The layers whose predicted fields a delivery compares: those that predict, except
        // body transforms, whose pre-phases run on every fast-path message and write (sending)
        // or check (delivering) their own fields there.
        let compared: Vec<bool> = (0..layers.count())
            .map(|i| predicts[i] && !layers.transforms_body_at(i))
            .collect();
        let mut proto_mask = [0; MAX_HEADER];
        let hl = layout.header_len().min(MAX_HEADER);
        for (loc, spec) in layout.locs().iter().zip(specs) {
            // The accelerator's own fields (no layer's) are predicted.
            let predicted = compared.get(spec.layer).copied().unwrap_or(true);
            if spec.class == FieldClass::ProtoSpecific && predicted {
                write_bits(&mut proto_mask[..hl], *loc, layout.order(), u64::MAX);
            }
        }
        let mut layer_mask = [0; MAX_HEADER];
        for (loc, spec) in layout.locs().iter().zip(specs) {
            if spec.layer < layers.count() {
                write_bits(&mut layer_mask[..hl], *loc, layout.order(), u64::MAX);
            }
        }
        let empty = HeaderCopy::zeroed(layout.header_len());
        Predictions {
            send: empty,
            send_gossiped: empty,
            gossip: (0..layers.count())
                .filter(|&i| layers.gossips_at(i))
                .collect(),
            deliver: empty,
            proto_mask,
            predicts,
            asked: layers.count() - super::fastpath::bottom_transforms(layers),
            owner: specs.iter().map(|s| s.layer).collect(),
            layer_mask,
        }
    }

    /// Whether layer `i` predicts its header.
    #[inline]
    pub(crate) fn predicts(&self, i: usize) -> bool {
        self.predicts.get(i).copied().unwrap_or(true)
    }

    /// Recompute both predictions from the layers' state, in place: the send prediction
    /// starts from the core's template (the accelerator's own fields), the delivery
    /// prediction from zero (only its protocol-specific bits are compared). Every layer is
    /// asked but the body transforms at the bottom; a body transform writes nothing (`seal`
    /// does not predict its nonce: its pre-send writes it on the fast path, and its
    /// pre-delivery checks it, as on the layered path), and a layer that does not predict
    /// has its fields masked out.
    pub(crate) fn refresh<S: LayerSet>(&mut self, core: &Core<S>) {
        let layout = core.layout();
        // Whole header areas, copied and cleared with fixed-size moves; only the first
        // `header_len` bytes are the predictions.
        let ps = &mut self.send.bytes;
        *ps = *core.template_area();
        let pd = &mut self.deliver.bytes;
        *pd = [0; MAX_HEADER];
        let layers = core.layers();
        for i in 0..self.asked.min(layers.count()) {
            layers.predict_send_at(
                i,
                &mut Predict {
                    bytes: &mut *ps,
                    layout,
                },
            );
            layers.predict_deliver_at(
                i,
                &mut Predict {
                    bytes: &mut *pd,
                    layout,
                },
            );
        }
        if !self.gossip.is_empty() {
            self.send_gossiped.bytes = self.send.bytes;
            gossip_into(&mut self.send_gossiped.bytes, core, &self.gossip);
        }
    }

    /// The predicted send header area; `gossiped`: the one for a send while the fast path's
    /// delivery waits for its post-processing (the same when no layer writes gossip).
    #[inline(always)]
    pub(crate) fn send_header(&self, header_len: usize, gossiped: bool) -> &[u8] {
        let p = if gossiped && !self.gossip.is_empty() {
            &self.send_gossiped
        } else {
            &self.send
        };
        &p.bytes[..header_len]
    }

    /// Whether a delivery's header area `h` has the predicted protocol-specific fields.
    #[inline(always)]
    pub(crate) fn delivery_matches(&self, h: &[u8]) -> bool {
        masked_eq(h, &self.deliver.bytes, &self.proto_mask)
    }
}

/// Whether `a` agrees with the first `a.len()` bytes of `b` on every bit set in `mask`,
/// eight bytes per load: the bytes after the last whole word are compared in the last eight
/// (callgrind: a byte loop over them cost ~40 instructions per delivery). `b` and `mask` are
/// whole header areas, so only `a`'s length is checked.
#[inline(always)]
pub(crate) fn masked_eq(a: &[u8], b: &[u8; MAX_HEADER], mask: &[u8; MAX_HEADER]) -> bool {
    let n = a.len().min(MAX_HEADER);
    #[inline(always)]
    fn differs(a: &[u8], b: &[u8], mask: &[u8], i: usize) -> bool {
        (le_word(&a[i..]) ^ le_word(&b[i..])) & le_word(&mask[i..]) != 0
    }
    if (8..=16).contains(&n) {
        // A short header area: two loads each.
        return !differs(a, b, mask, 0) && !differs(a, b, mask, n - 8);
    }
    if (17..=32).contains(&n) {
        // The usual accelerated header area (identification and cookie restored): four.
        return !differs(a, b, mask, 0)
            && !differs(a, b, mask, 8)
            && !differs(a, b, mask, 16.min(n - 8))
            && !differs(a, b, mask, n - 8);
    }
    let mut i = 0;
    while i + 8 <= n {
        if differs(a, b, mask, i) {
            return false;
        }
        i += 8;
    }
    if i == n {
        true
    } else if n >= 8 {
        !differs(a, b, mask, n - 8)
    } else {
        (i..n).all(|j| (a[j] ^ b[j]) & mask[j] == 0)
    }
}

/// Layers `which` write their gossip ([`Layer::predict_gossip`](crate::Layer::predict_gossip))
/// into the header area `bytes`.
fn gossip_into<S: LayerSet>(bytes: &mut [u8; MAX_HEADER], core: &Core<S>, which: &[usize]) {
    let layout = core.layout();
    let layers = core.layers();
    for &i in which {
        layers.predict_gossip_at(i, &mut Predict { bytes, layout });
    }
}

/// Check of a fast-path send: the layered pre-phases, run on a copy of the same body
/// (`sent`: the fast path's message, header area and body as they leave, before the
/// preamble; `body`: the body before any transform), must build the same header area.
/// `gossiped`: a fast-path delivery waits for its post-processing, so the fast send carried
/// its gossip, which the layered pre-sends get too. The name of the first layer whose field
/// differs (or that refuses the message); with `panic`, a panic naming it instead. Changes no
/// state: the pre-phases run on a copy, and what they kept is freed.
#[cold]
#[inline(never)]
pub(crate) fn check_send<S: LayerSet>(
    p: &Predictions,
    core: &mut Core<S>,
    now: Time,
    sent: &Msg,
    body: &[u8],
    gossiped: bool,
    panic: bool,
) -> Option<&'static str> {
    let hl = core.layout().header_len();
    let mut m = core.pool().alloc_copy(body);
    // The accelerator's own fields as the fast path set them (identification, packing); every
    // layer's field cleared, for its pre-send to write.
    m.prepend(&sent.data()[..hl]);
    for (b, k) in m.data_mut()[..hl].iter_mut().zip(&p.layer_mask) {
        *b &= !k;
    }
    let n = core.layers().count();
    let stop = if gossiped && !p.gossip.is_empty() {
        // Layer by layer: a gossiping layer's pre-send writes the gossip it knows, which its
        // `predict_gossip` then brings up to the pending delivery, before the layers below
        // it (a checksum over the header) see the header.
        (0..n).find_map(|i| {
            let stop = core.pre_phases(now, i..i + 1, true, &mut m);
            if stop.is_none() && p.gossip.contains(&i) {
                let mut area = [0u8; MAX_HEADER];
                area[..hl].copy_from_slice(&m.data()[..hl]);
                gossip_into(&mut area, core, &[i]);
                m.data_mut()[..hl].copy_from_slice(&area[..hl]);
            }
            stop
        })
    } else {
        core.pre_phases(now, 0..n, true, &mut m)
    };
    core.free_kept();
    let wrong = if let Some((i, v)) = stop {
        let name = core.layers().name_at(i);
        if panic {
            panic!(
                "accelerator: the fast path sent a message that layer `{name}` refuses on the \
                 layered path ({v:?}); its filter or prediction is wrong"
            );
        }
        Some(name)
    } else {
        let (fast, slow) = (&sent.data()[..hl], &m.data()[..hl]);
        let name = if fast == slow {
            None
        } else {
            p.differing_layer(core, fast, slow)
        };
        if let (Some(name), true) = (name, panic) {
            panic!(
                "accelerator: layer `{name}` predicted a header field that its pre_send writes \
                 otherwise (fast {fast:02x?}, layered {slow:02x?})"
            );
        }
        name
    };
    core.pool().free(m);
    wrong
}

/// Check of a fast-path delivery: every layer above the `transformed` bottom ones must
/// accept the datagram (header area and body as the fast path saw them) on the layered path.
/// The name of the layer that refuses; with `panic`, a panic naming it instead. Changes no
/// state: the pre-phases run on a copy.
#[cold]
#[inline(never)]
pub(crate) fn check_deliver<S: LayerSet>(
    core: &mut Core<S>,
    now: Time,
    m: &Msg,
    transformed: usize,
    panic: bool,
) -> Option<&'static str> {
    let mut copy = core.pool().alloc_copy(m.data());
    let n = core.layers().count();
    let stop = core.pre_phases(now, (0..n - transformed).rev(), false, &mut copy);
    core.free_kept();
    core.pool().free(copy);
    let (i, v) = stop?;
    let name = core.layers().name_at(i);
    if panic {
        panic!(
            "accelerator: the fast path delivered a datagram that layer `{name}` refuses on \
             the layered path ({v:?}); its delivery prediction or filter is wrong"
        );
    }
    Some(name)
}

impl Predictions {
    /// The name of the layer owning the first field in which header areas `a` and `b`
    /// differ.
    fn differing_layer<S: LayerSet>(
        &self,
        core: &Core<S>,
        a: &[u8],
        b: &[u8],
    ) -> Option<&'static str> {
        let layout = core.layout();
        let order = layout.order();
        let at = layout
            .locs()
            .iter()
            .position(|&loc| read_bits(a, loc, order) != read_bits(b, loc, order))?;
        let layer = self.owner.get(at).copied().unwrap_or(usize::MAX);
        Some(if layer < core.layers().count() {
            core.layers().name_at(layer)
        } else {
            "accelerator"
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn masked_eq_looks_only_at_masked_bits() {
        for n in [3usize, 8, 15, 16, 17, 23, 24, 25, 31, 32, 33, 64] {
            let a = vec![0xffu8; n];
            let mut b = [0xffu8; MAX_HEADER];
            b[n - 1] = 0xfe;
            let mut k = [0u8; MAX_HEADER];
            // Bytes beyond `a` never count.
            k[n..].fill(0xff);
            b[n..].fill(0);
            assert!(masked_eq(&a, &b, &k), "{n}");
            k[n - 1] = 0x01;
            assert!(!masked_eq(&a, &b, &k), "{n}");
            k[n - 1] = 0xfe;
            assert!(masked_eq(&a, &b, &k), "{n}");
            k[0] = 0x80;
            b[0] = 0x7f;
            assert!(!masked_eq(&a, &b, &k), "{n}");
        }
    }
}
