//! Compile-time layouts for static stacks.
//!
//! Seed 000's path-inlining (Mosberger et al., "Analysis of Techniques to Improve Protocol
//! Processing Latency") removes what layering costs on the path a message takes: in the
//! x-kernel, per-layer demultiplexing; here, the run-time header layout. A layer of a dynamic
//! stack reads and writes its fields through [`FieldHandle`](crate::field::FieldHandle)s looked up in the connection's
//! [`Layout`] on every message. A layer that declares its fields at compile time
//! ([`FixedFields::FIELDS`]) can instead be placed by the compiler: [`Fixed`], a static stack
//! of such layers, computes the traditional per-layer layout
//! ([`Layout::per_layer_aligned`], 4-byte aligned, big-endian) in `const` evaluation, so every
//! field's window, shift and mask is a constant folded into the inlined path.
//!
//! The bytes on the wire are the run-time layout's: [`Fixed`] checks when the connection is
//! built that every layer registered exactly the fields it declares, and on every message that
//! the layout in force is the per-layer one of the same length; otherwise (an accelerated
//! connection's compact layout, for instance) its layers run through their handles as in any
//! other stack.
//!
//! A layer opts in by implementing [`FixedFields`]: it writes its pre-phases once, generic over
//! [`Slots`] (its fields by position in its declaration), and runs them with its handles in
//! [`Layer::pre_send`](crate::Layer::pre_send) and with the constant slots [`At`] in [`FixedFields::pre_send_fixed`].
//! Layers that do not opt in are unchanged and keep working in [`stack!`](crate::stack!)
//! stacks.

pub(crate) mod decl;

use crate::field::{read_bits, write_bits, ByteOrder, FieldLoc};
use crate::filter::Segment;
use crate::layer::{AckedPrefix, Cx, Handoff, Hdr, InitCx, Packet, Predict, Verdict};
use crate::layout::{FieldRegistry, Layout};
use crate::stack::{LayerSet, PostParts};
pub use decl::{declare, FieldDecl, FixedFields, LayerHeader, Slots, ALIGN, MAX_FIELDS};
use std::marker::PhantomData;

/// Bytes of header above a layer of a [`Fixed`] stack, as a type: [`Top`], or [`Under`] a
/// layer.
pub trait Above {
    /// Bytes of the headers above.
    const BYTES: usize;
}

/// Nothing above: the top layer.
#[derive(Debug)]
pub struct Top;

impl Above for Top {
    const BYTES: usize = 0;
}

/// Below layer `L`, which is below `P`.
#[derive(Debug)]
pub struct Under<P, L>(PhantomData<fn() -> (P, L)>);

impl<P: Above, L: FixedFields> Above for Under<P, L> {
    const BYTES: usize = P::BYTES + LayerHeader::of(L::FIELDS).bytes;
}

/// One field's place in every header area of a [`Fixed`] stack, resolved at compile time:
/// its eight-byte window (as [`crate::field`] reads it: the field's first byte when eight
/// bytes follow it in the header area, else the area's last eight), and its shift and mask in
/// the window read as a big-endian integer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Slot {
    /// Where the field lives in the header area.
    pub loc: FieldLoc,
    /// The window's first byte; `None` when the field has none (header areas under eight
    /// bytes, fields over nine bytes): then it is read bit by bit.
    pub start: Option<usize>,
    /// The right shift that brings the field to the window's low bits.
    pub shift: u32,
    /// The field's value mask (its width's low bits).
    pub mask: u64,
}

impl Slot {
    /// The place of field `k` of a layer with header `h` under `above` bytes of headers, in
    /// header areas of `len` bytes.
    pub const fn of(h: &LayerHeader, k: usize, above: usize, len: usize) -> Slot {
        let bits = h.bits[k];
        let loc = FieldLoc {
            bit_offset: (above * 8) as u32 + h.offsets[k],
            bits,
        };
        let mask = if bits >= 64 {
            u64::MAX
        } else {
            (1u64 << bits) - 1
        };
        let end = (loc.bit_offset as usize + bits as usize).div_ceil(8);
        let first = loc.bit_offset as usize / 8;
        let start = if len < 8 || end > len || bits == 0 {
            None
        } else if first < len - 8 {
            Some(first)
        } else {
            Some(len - 8)
        };
        match start {
            Some(s) => {
                let off = loc.bit_offset - 8 * s as u32;
                if off + bits as u32 <= 64 {
                    Slot {
                        loc,
                        start,
                        shift: 64 - off - bits as u32,
                        mask,
                    }
                } else {
                    Slot {
                        loc,
                        start: None,
                        shift: 0,
                        mask,
                    }
                }
            }
            None => Slot {
                loc,
                start,
                shift: 0,
                mask,
            },
        }
    }
}

/// The types a constant place is computed from, as a marker that owns none of them.
type Marker<L, P, T> = PhantomData<fn() -> (L, P, T)>;

/// The fields of layer `L` under the headers `P` in a [`Fixed`] stack `T`: constant places.
pub struct At<L, P, T>(Marker<L, P, T>);

impl<L, P, T> Clone for At<L, P, T> {
    fn clone(&self) -> Self {
        *self
    }
}

impl<L, P, T> Copy for At<L, P, T> {}

impl<L: FixedFields, P: Above, T: FixedSet> At<L, P, T> {
    /// Bytes of header area.
    const LEN: usize = T::HEADER_BYTES;

    #[inline(always)]
    const fn new() -> Self {
        At(PhantomData)
    }

    /// Field `K`'s place.
    #[inline(always)]
    const fn slot<const K: usize>() -> Slot {
        const { Slot::of(&LayerHeader::of(L::FIELDS), K, P::BYTES, T::HEADER_BYTES) }
    }
}

impl<L: FixedFields, P: Above, T: FixedSet> Slots for At<L, P, T> {
    #[inline(always)]
    fn get<const K: usize>(self, pkt: &Packet<'_>) -> u64 {
        let s = Self::slot::<K>();
        let data = pkt.msg.data();
        if let Some(w) = s
            .start
            .and_then(|st| data.get(st..))
            .and_then(|t| t.first_chunk::<8>())
        {
            return (u64::from_be_bytes(*w) >> s.shift) & s.mask;
        }
        read_bits(&data[..Self::LEN.min(data.len())], s.loc, ByteOrder::Big)
    }

    #[inline(always)]
    fn set<const K: usize>(self, pkt: &mut Packet<'_>, v: u64) {
        let s = Self::slot::<K>();
        let data = pkt.msg.data_mut();
        if let Some(w) = s
            .start
            .and_then(|st| data.get_mut(st..))
            .and_then(|t| t.first_chunk_mut::<8>())
        {
            let m = s.mask << s.shift;
            *w = ((u64::from_be_bytes(*w) & !m) | ((v << s.shift) & m)).to_be_bytes();
            return;
        }
        let n = Self::LEN.min(data.len());
        write_bits(&mut data[..n], s.loc, ByteOrder::Big, v)
    }

    #[inline(always)]
    fn body_len(self, pkt: &Packet<'_>) -> usize {
        pkt.msg.len().saturating_sub(Self::LEN)
    }
}

/// A static stack whose every layer declares its fields ([`FixedFields`]): nested pairs
/// `(A, (B, (C, ())))`, as [`stack!`](crate::stack!) builds them.
pub trait FixedSet: LayerSet {
    /// Bytes of header area of the per-layer aligned layout.
    const HEADER_BYTES: usize;

    /// The fields layer `i` declares.
    fn decls_at(&self, i: usize) -> &'static [FieldDecl];

    /// [`LayerSet::pre_send_walk`] with every field at its constant place; `P` is the headers
    /// above this set, `T` the whole stack.
    #[doc(hidden)]
    fn pre_send_fixed<P: Above, T: FixedSet>(
        &self,
        depth: usize,
        from: usize,
        pkt: &mut Packet<'_>,
    ) -> Option<(usize, Verdict)>;

    /// [`LayerSet::pre_deliver_walk`] with every field at its constant place.
    #[doc(hidden)]
    fn pre_deliver_fixed<P: Above, T: FixedSet>(
        &self,
        depth: usize,
        below: usize,
        pkt: &mut Packet<'_>,
    ) -> Option<(usize, Verdict)>;
}

impl FixedSet for () {
    const HEADER_BYTES: usize = 0;

    fn decls_at(&self, _: usize) -> &'static [FieldDecl] {
        &[]
    }

    #[inline(always)]
    fn pre_send_fixed<P: Above, T: FixedSet>(
        &self,
        _: usize,
        _: usize,
        _: &mut Packet<'_>,
    ) -> Option<(usize, Verdict)> {
        None
    }

    #[inline(always)]
    fn pre_deliver_fixed<P: Above, T: FixedSet>(
        &self,
        _: usize,
        _: usize,
        _: &mut Packet<'_>,
    ) -> Option<(usize, Verdict)> {
        None
    }
}

impl<L: FixedFields, R: FixedSet> FixedSet for (L, R) {
    const HEADER_BYTES: usize = LayerHeader::of(L::FIELDS).bytes + R::HEADER_BYTES;

    fn decls_at(&self, i: usize) -> &'static [FieldDecl] {
        if i == 0 {
            L::FIELDS
        } else {
            self.1.decls_at(i - 1)
        }
    }

    #[inline(always)]
    fn pre_send_fixed<P: Above, T: FixedSet>(
        &self,
        depth: usize,
        from: usize,
        pkt: &mut Packet<'_>,
    ) -> Option<(usize, Verdict)> {
        if depth >= from {
            pkt.layer = depth;
            let v = self.0.pre_send_fixed(pkt, At::<L, P, T>::new());
            if v != Verdict::Continue {
                return Some((depth, v));
            }
        }
        self.1
            .pre_send_fixed::<Under<P, L>, T>(depth + 1, from, pkt)
    }

    #[inline(always)]
    fn pre_deliver_fixed<P: Above, T: FixedSet>(
        &self,
        depth: usize,
        below: usize,
        pkt: &mut Packet<'_>,
    ) -> Option<(usize, Verdict)> {
        if let Some(stop) = self
            .1
            .pre_deliver_fixed::<Under<P, L>, T>(depth + 1, below, pkt)
        {
            return Some(stop);
        }
        if depth < below {
            pkt.layer = depth;
            let v = self.0.pre_deliver_fixed(pkt, At::<L, P, T>::new());
            if v != Verdict::Continue {
                return Some((depth, v));
            }
        }
        None
    }
}

/// A static stack with its layout computed at compile time ([`FixedSet`]): the same layers,
/// the same bytes on the wire, its pre-phases reading and writing fields at constant places
/// when the connection's layout is the per-layer one it computed. Build it with
/// [`fixed_stack!`](crate::fixed_stack!).
#[derive(Debug)]
pub struct Fixed<S> {
    layers: S,
    /// Whether every layer registered exactly the fields it declares (checked at init).
    declared: bool,
}

impl<S: FixedSet> Fixed<S> {
    /// The stack `layers` (top first, as [`stack!`](crate::stack!) nests them).
    pub fn new(layers: S) -> Fixed<S> {
        Fixed {
            layers,
            declared: true,
        }
    }

    /// The layers.
    pub fn layers(&self) -> &S {
        &self.layers
    }

    /// Whether the constant places hold in `layout`: every layer registered what it
    /// declares, and `layout` is the per-layer one of the computed length.
    #[inline(always)]
    pub fn places_hold(&self, layout: &Layout) -> bool {
        self.declared
            && layout.per_layer_alignment() == Some(ALIGN)
            && layout.header_len() == S::HEADER_BYTES
            && layout.order() == ByteOrder::Big
    }
}

/// Build a [`Fixed`] stack from layer values, top first:
/// `fixed_stack!(Frag::new(1400), Window::new(16))`.
#[macro_export]
macro_rules! fixed_stack {
    ($($layer:expr),* $(,)?) => { $crate::fixed::Fixed::new($crate::stack!($($layer),*)) };
}

impl<S: FixedSet> LayerSet for Fixed<S> {
    #[inline(always)]
    fn count(&self) -> usize {
        self.layers.count()
    }
    fn name_at(&self, i: usize) -> &'static str {
        self.layers.name_at(i)
    }
    fn init_at(&mut self, i: usize, fields: &mut FieldRegistry, cx: &InitCx) {
        let before = fields.specs().len();
        self.layers.init_at(i, fields, cx);
        let got = &fields.specs()[before..];
        let want = self.layers.decls_at(i);
        let same = got.len() == want.len()
            && got.iter().zip(want).all(|(s, d)| {
                s.class == d.class && s.bits == d.bits && s.offset == d.offset && s.layer == i
            });
        self.declared &= same;
    }
    #[inline(always)]
    fn can_accept(&self) -> bool {
        self.layers.can_accept()
    }
    fn busy(&self) -> bool {
        self.layers.busy()
    }
    fn holds_unacked(&self) -> bool {
        self.layers.holds_unacked()
    }
    fn acked_prefix(&self) -> Option<(AckedPrefix, bool)> {
        self.layers.acked_prefix()
    }
    fn fragment_payload(&self) -> Option<usize> {
        self.layers.fragment_payload()
    }
    fn trailer_len_at(&self, i: usize) -> usize {
        self.layers.trailer_len_at(i)
    }
    fn shrink(&mut self) {
        self.layers.shrink()
    }
    #[inline(always)]
    fn pre_send_at(&self, i: usize, pkt: &mut Packet<'_>) -> Verdict {
        self.layers.pre_send_at(i, pkt)
    }
    #[inline(always)]
    fn post_send_at(&mut self, i: usize, hdr: &Hdr<'_>, h: Handoff, cx: &mut Cx<'_>) {
        self.layers.post_send_at(i, hdr, h, cx)
    }
    #[inline(always)]
    fn pre_deliver_at(&self, i: usize, pkt: &mut Packet<'_>) -> Verdict {
        self.layers.pre_deliver_at(i, pkt)
    }
    #[inline(always)]
    fn post_deliver_at(&mut self, i: usize, hdr: &Hdr<'_>, h: Handoff, cx: &mut Cx<'_>) {
        self.layers.post_deliver_at(i, hdr, h, cx)
    }
    fn on_timer_at(&mut self, i: usize, cx: &mut Cx<'_>) {
        self.layers.on_timer_at(i, cx)
    }
    fn send_filter_at(&self, i: usize, seg: &mut Segment) {
        self.layers.send_filter_at(i, seg)
    }
    fn deliver_filter_at(&self, i: usize, seg: &mut Segment) {
        self.layers.deliver_filter_at(i, seg)
    }
    #[inline(always)]
    fn predict_send_at(&self, i: usize, p: &mut Predict<'_>) {
        self.layers.predict_send_at(i, p)
    }
    #[inline(always)]
    fn predict_deliver_at(&self, i: usize, p: &mut Predict<'_>) {
        self.layers.predict_deliver_at(i, p)
    }
    fn predict_gossip_at(&self, i: usize, p: &mut Predict<'_>) {
        self.layers.predict_gossip_at(i, p)
    }
    fn gossips_at(&self, i: usize) -> bool {
        self.layers.gossips_at(i)
    }
    fn predicts_at(&self, i: usize) -> bool {
        self.layers.predicts_at(i)
    }
    fn transforms_body_at(&self, i: usize) -> bool {
        self.layers.transforms_body_at(i)
    }
    fn wants_copy_at(&self, i: usize) -> bool {
        self.layers.wants_copy_at(i)
    }
    fn resends_copy_only_at(&self, i: usize) -> bool {
        self.layers.resends_copy_only_at(i)
    }
    fn can_undo_send_at(&self, i: usize) -> bool {
        self.layers.can_undo_send_at(i)
    }
    fn undo_send_at(&self, i: usize, pkt: &mut Packet<'_>) {
        self.layers.undo_send_at(i, pkt)
    }
    fn needs_keys_at(&self, i: usize) -> bool {
        self.layers.needs_keys_at(i)
    }
    #[inline(always)]
    fn pre_send_walk(
        &self,
        depth: usize,
        from: usize,
        pkt: &mut Packet<'_>,
    ) -> Option<(usize, Verdict)> {
        if depth == 0 && self.places_hold(pkt.layout) {
            self.layers.pre_send_fixed::<Top, S>(0, from, pkt)
        } else {
            self.layers.pre_send_walk(depth, from, pkt)
        }
    }
    #[inline(always)]
    fn pre_deliver_walk(
        &self,
        depth: usize,
        below: usize,
        pkt: &mut Packet<'_>,
    ) -> Option<(usize, Verdict)> {
        if depth == 0 && self.places_hold(pkt.layout) {
            self.layers.pre_deliver_fixed::<Top, S>(0, below, pkt)
        } else {
            self.layers.pre_deliver_walk(depth, below, pkt)
        }
    }
    #[inline(always)]
    fn post_send_walk(
        &mut self,
        depth: usize,
        range: (usize, usize),
        hdr: &Hdr<'_>,
        parts: &mut PostParts<'_>,
    ) {
        self.layers.post_send_walk(depth, range, hdr, parts)
    }
    #[inline(always)]
    fn post_deliver_walk(
        &mut self,
        depth: usize,
        range: (usize, usize),
        hdr: &Hdr<'_>,
        parts: &mut PostParts<'_>,
    ) {
        self.layers.post_deliver_walk(depth, range, hdr, parts)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::field::FieldClass;

    const DECLS: [FieldDecl; 4] = [
        FieldDecl::new(FieldClass::ProtoSpecific, "kind", 2),
        FieldDecl::new(FieldClass::ProtoSpecific, "seq", 30),
        FieldDecl {
            offset: Some(40),
            ..FieldDecl::new(FieldClass::Gossip, "at40", 7)
        },
        FieldDecl::new(FieldClass::MsgSpecific, "len", 16),
    ];

    #[test]
    fn a_layer_header_is_the_run_time_compilers() {
        let mut r = FieldRegistry::new();
        r.set_layer(0);
        r.add_field(FieldClass::ProtoSpecific, "pad", 9, None);
        r.set_layer(1);
        let hs = declare(&mut r, &DECLS);
        let l = Layout::per_layer_aligned(r.specs(), 2, ALIGN).unwrap();
        let top = LayerHeader::of(&[FieldDecl::new(FieldClass::ProtoSpecific, "pad", 9)]);
        let h = LayerHeader::of(&DECLS);
        assert_eq!(top.bytes, 4);
        assert_eq!(top.bytes + h.bytes, l.header_len());
        for (k, handle) in hs.iter().enumerate() {
            let s = Slot::of(&h, k, top.bytes, l.header_len());
            assert_eq!(s.loc, l.loc(*handle), "field {k}");
        }
        // The field at a requested offset; the others first-fit around it.
        assert_eq!(h.offsets[..4], [0, 2, 40, 47]);
        assert_eq!(h.bytes, 8);
    }

    #[test]
    fn a_slot_reads_and_writes_as_the_general_accessors() {
        for len in [4usize, 8, 12, 20] {
            let h = LayerHeader::of(&DECLS);
            for above in [0, 4] {
                for k in 0..DECLS.len() {
                    let s = Slot::of(&h, k, above, len);
                    if !s.loc.fits(len) {
                        continue;
                    }
                    let mut a: Vec<u8> = (0..len as u8).map(|b| b.wrapping_mul(37)).collect();
                    let mut b = a.clone();
                    let v = 0x1234_5678_9abc_def0;
                    write_bits(&mut a, s.loc, ByteOrder::Big, v);
                    match s.start {
                        Some(st) => {
                            let m = s.mask << s.shift;
                            let w = u64::from_be_bytes(b[st..st + 8].try_into().unwrap());
                            let w = (w & !m) | ((v << s.shift) & m);
                            b[st..st + 8].copy_from_slice(&w.to_be_bytes());
                            let got = (w >> s.shift) & s.mask;
                            assert_eq!(got, read_bits(&a, s.loc, ByteOrder::Big));
                        }
                        None => write_bits(&mut b, s.loc, ByteOrder::Big, v),
                    }
                    assert_eq!(a, b, "len {len} above {above} field {k}");
                }
            }
        }
    }
}
