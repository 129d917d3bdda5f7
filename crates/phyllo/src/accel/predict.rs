//! Header prediction (seed 004 §3.2): the protocol-specific (and, for sending, gossip) header
//! of the next message, computed by the layers' post-phases ahead of time.
//!
//! Each connection keeps a predicted header area for the next send and one for the next
//! delivery. A send copies the send prediction in front of the body; a delivery compares the
//! protocol-specific bits of its header with the delivery prediction. Layers write their own
//! fields ([`Layer::predict_send`](crate::Layer::predict_send),
//! [`Layer::predict_deliver`](crate::Layer::predict_deliver)); a layer that does not predict
//! ([`Layer::predicts`](crate::Layer::predicts) is false) has its fields masked out of the
//! comparison, and the fast path runs its pre-phases instead.
//!
//! With verification on (the default in debug builds, so in every test) every fast-path send
//! and delivery is checked against the layered computation on the same input and the same
//! state ([`check_send`], [`check_deliver`]): a layer whose prediction is wrong is named in
//! the panic.

use crate::field::FieldSpec;
use crate::field::{le_word, read_bits, write_bits, FieldClass};
use crate::layer::{HeaderCopy, Predict};
use crate::layered::Core;
use crate::layout::{Layout, MAX_HEADER};
use crate::msg::Msg;
use crate::stack::LayerSet;
use crate::time::Time;

/// The two predicted header areas of a connection.
pub(crate) struct Predictions {
    send: HeaderCopy,
    deliver: HeaderCopy,
    /// The protocol-specific bits of the header area that a delivery's prediction checks:
    /// those of layers that predict.
    proto_mask: [u8; MAX_HEADER],
    /// Which layers predict their header.
    predicts: Vec<bool>,
    /// The layer that declared each field (indexed by handle; the accelerator's own fields
    /// belong to none), to name a layer whose prediction is wrong.
    owner: Vec<usize>,
}

impl Predictions {
    /// Predictions for `layers` under `layout`, not yet computed.
    pub(crate) fn new<S: LayerSet>(
        layout: &Layout,
        specs: &[FieldSpec],
        layers: &S,
    ) -> Predictions {
        let predicts: Vec<bool> = (0..layers.count()).map(|i| layers.predicts_at(i)).collect();
        let mut proto_mask = [0; MAX_HEADER];
        let hl = layout.header_len().min(MAX_HEADER);
        for (loc, spec) in layout.locs().iter().zip(specs) {
            let predicted = predicts.get(spec.layer).copied().unwrap_or(true);
            if spec.class == FieldClass::ProtoSpecific && predicted {
                write_bits(&mut proto_mask[..hl], *loc, layout.order(), u64::MAX);
            }
        }
        let empty = HeaderCopy::zeroed(layout.header_len());
        Predictions {
            send: empty,
            deliver: empty,
            proto_mask,
            predicts,
            owner: specs.iter().map(|s| s.layer).collect(),
        }
    }

    /// Whether layer `i` predicts its header.
    #[inline]
    pub(crate) fn predicts(&self, i: usize) -> bool {
        self.predicts.get(i).copied().unwrap_or(true)
    }

    /// Recompute both predictions from the layers' state, in place: the send prediction
    /// starts from the core's template (the accelerator's own fields), the delivery
    /// prediction from zero (only its protocol-specific bits are compared).
    pub(crate) fn refresh<S: LayerSet>(&mut self, core: &Core<S>) {
        let layout = core.layout();
        let hl = layout.header_len();
        let ps = &mut self.send.bytes[..hl];
        ps.copy_from_slice(&core.template()[..hl]);
        let pd = &mut self.deliver.bytes[..hl];
        pd.fill(0);
        let layers = core.layers();
        for i in 0..layers.count() {
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
    }

    /// The predicted send header area.
    #[inline(always)]
    pub(crate) fn send_header(&self, header_len: usize) -> &[u8] {
        &self.send.bytes[..header_len]
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

/// Check of a fast-path send: the layered pre-phases, run on a copy of the same body
/// (`sent`: the fast path's message, header area and body as they leave, before the
/// preamble; `body`: the body before any transform), must build the same header area.
/// Panics naming the first layer whose field differs.
#[cold]
#[inline(never)]
pub(crate) fn check_send<S: LayerSet>(
    p: &Predictions,
    core: &mut Core<S>,
    now: Time,
    sent: &Msg,
    body: &[u8],
) {
    let hl = core.layout().header_len();
    let mut m = core.pool().alloc_copy(body);
    // The accelerator's own fields as the fast path set them (identification, packing); every
    // layer's field cleared, for its pre-send to write.
    m.prepend(&sent.data()[..hl]);
    let (layout, layers) = (core.layout(), core.layers().count());
    for (loc, _) in layout
        .locs()
        .iter()
        .zip(&p.owner)
        .filter(|(_, &o)| o < layers)
    {
        write_bits(&mut m.data_mut()[..hl], *loc, layout.order(), 0);
    }
    let n = core.layers().count();
    let stop = core.pre_phases(now, 0..n, true, &mut m);
    core.free_kept();
    if let Some((i, v)) = stop {
        let name = core.layers().name_at(i);
        panic!(
            "accelerator: the fast path sent a message that layer `{name}` refuses on the \
             layered path ({v:?}); its filter or prediction is wrong"
        );
    }
    let (fast, slow) = (&sent.data()[..hl], &m.data()[..hl]);
    if let Some(name) = p.differing_layer(core, fast, slow) {
        panic!(
            "accelerator: layer `{name}` predicted a header field that its pre_send writes \
             otherwise (fast {fast:02x?}, layered {slow:02x?})"
        );
    }
    core.pool().free(m);
}

/// Check of a fast-path delivery: every layer above the `transformed` bottom ones must
/// accept the datagram (header area and body as the fast path saw them) on the layered path.
/// Panics naming the layer that refuses.
#[cold]
#[inline(never)]
pub(crate) fn check_deliver<S: LayerSet>(
    core: &mut Core<S>,
    now: Time,
    m: &Msg,
    transformed: usize,
) {
    let mut copy = core.pool().alloc_copy(m.data());
    let n = core.layers().count();
    let stop = core.pre_phases(now, (0..n - transformed).rev(), false, &mut copy);
    core.free_kept();
    core.pool().free(copy);
    if let Some((i, v)) = stop {
        let name = core.layers().name_at(i);
        panic!(
            "accelerator: the fast path delivered a datagram that layer `{name}` refuses on \
             the layered path ({v:?}); its delivery prediction or filter is wrong"
        );
    }
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
