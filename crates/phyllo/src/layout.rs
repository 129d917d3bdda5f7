//! Header layouts: where each layer's fields land on the wire.
//!
//! Seed 004 §2.1: layers call `add_field` at initialisation ([`FieldRegistry::add_field`]);
//! afterwards a layout compiler places every field. This module has the traditional compiler,
//! [`Layout::per_layer_aligned`]: each layer's fields in a header of its own, padded to a 4-byte
//! boundary, the headers concatenated top layer first — the per-layer padded layout that the
//! Protocol Accelerator's compact layout is measured against. Every datagram starts with the
//! whole header area ([`Layout::header_len`] bytes), followed by the body.

use crate::field::{
    bit_mask, write_bits, Access, ByteOrder, Cover, FieldClass, FieldHandle, FieldLoc, FieldSpec,
    Put, ShortHeader,
};
use thiserror::Error;

/// The layer index under which the Protocol Accelerator registers its own fields: above
/// every layer, so checksums cover them.
pub const ACCEL_LAYER: usize = usize::MAX;

/// The largest header area a layout may produce, in bytes.
pub const MAX_HEADER: usize = 64;

/// A layout could not be compiled.
#[derive(Debug, Error, PartialEq, Eq)]
pub enum LayoutError {
    /// A field asked for 0 or more than 64 bits.
    #[error("field `{name}` of layer {layer} asks for {bits} bits (1 to 64 allowed)")]
    BadWidth {
        /// Field name.
        name: &'static str,
        /// Requesting layer.
        layer: usize,
        /// Requested width.
        bits: u8,
    },
    /// Two fields asked for overlapping fixed offsets.
    #[error("field `{name}` of layer {layer}: requested offset {offset} overlaps another field")]
    OffsetConflict {
        /// Field name.
        name: &'static str,
        /// Requesting layer.
        layer: usize,
        /// Requested bit offset.
        offset: u32,
    },
    /// The header area would exceed [`MAX_HEADER`] bytes.
    #[error("header area of {0} bytes exceeds the limit of {MAX_HEADER}")]
    TooLarge(usize),
}

/// Collects the fields layers request at initialisation.
#[derive(Debug, Default, Clone)]
pub struct FieldRegistry {
    specs: Vec<FieldSpec>,
    layer: usize,
}

impl FieldRegistry {
    /// An empty registry.
    pub fn new() -> FieldRegistry {
        FieldRegistry::default()
    }

    /// Subsequent [`add_field`](Self::add_field) calls are made by layer `layer` (0 = top).
    pub fn set_layer(&mut self, layer: usize) {
        self.layer = layer;
    }

    /// Seed 004's `add_field(class, name, size, offset)`: request a field of `bits` bits,
    /// optionally at bit `offset` within its header, and get the handle to access it.
    pub fn add_field(
        &mut self,
        class: FieldClass,
        name: &'static str,
        bits: u8,
        offset: Option<u32>,
    ) -> FieldHandle {
        self.specs.push(FieldSpec {
            class,
            name,
            bits,
            offset,
            layer: self.layer,
        });
        FieldHandle((self.specs.len() - 1) as u16)
    }

    /// All requested fields, indexed by handle.
    pub fn specs(&self) -> &[FieldSpec] {
        &self.specs
    }
}

/// A compiled layout: a location for every field handle.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Layout {
    locs: Vec<FieldLoc>,
    /// Each field's name, indexed like `locs`.
    names: Vec<&'static str>,
    header_len: usize,
    order: ByteOrder,
    /// Byte range of each layer's own header (per-layer layouts) for listings.
    layer_spans: Vec<(usize, usize)>,
    /// Per layer `i` (and one past the bottom layer: every field): the fields of the layers
    /// above `i` (and of the accelerator).
    upper_fields: Vec<Cover>,
    /// Every field resolved for `header_len`, indexed like `locs`.
    access: Vec<Access>,
    /// Every field's write resolved for `header_len` and `order` (where it has a window),
    /// indexed like `locs`.
    puts: Vec<Option<Put>>,
    /// The bits that belong to some field (the rest is padding and must be zero).
    field_mask: Vec<u8>,
    /// The padding bits of the first 32 bytes of the header as little-endian words (none
    /// beyond the header): [`padding_is_zero`](Self::padding_is_zero)'s four loads.
    padding_words: [u64; 4],
    /// Bit range of each class (indexed like [`FieldClass::ALL`]); empty for per-layer layouts.
    class_spans: [(u32, u32); 4],
    /// The alignment of a per-layer layout ([`Layout::per_layer_aligned`]); 0 for others.
    per_layer: usize,
}

/// The padding bits (those of no field) of the first 32 bytes of a header whose field bits
/// are `field_mask`, as little-endian words; zero beyond the header.
fn padding_words(field_mask: &[u8]) -> [u64; 4] {
    let mut pad = [0u8; 32];
    for (p, m) in pad.iter_mut().zip(field_mask) {
        *p = !m;
    }
    std::array::from_fn(|k| u64::from_le_bytes(pad[8 * k..8 * k + 8].try_into().unwrap_or([0; 8])))
}

impl Layout {
    /// The traditional layout: per layer, its fields packed in request order (honouring
    /// requested offsets), the layer's header padded to `align` bytes; headers concatenated
    /// from the top layer down. Fields are written in network (big-endian) order.
    pub fn per_layer_aligned(
        specs: &[FieldSpec],
        layers: usize,
        align: usize,
    ) -> Result<Layout, LayoutError> {
        let align = align.max(1);
        let mut locs = vec![
            FieldLoc {
                bit_offset: 0,
                bits: 0
            };
            specs.len()
        ];
        let mut layer_spans = Vec::with_capacity(layers);
        let mut base_bits = 0u32;
        for layer in 0..layers {
            let mine: Vec<usize> = (0..specs.len())
                .filter(|&i| specs[i].layer == layer)
                .collect();
            let mut taken: Vec<(u32, u32)> = Vec::new();
            // Fixed offsets first, then the rest first-fit.
            for &i in mine.iter().filter(|&&i| specs[i].offset.is_some()) {
                let s = &specs[i];
                check_width(s)?;
                let off = s.offset.unwrap_or(0);
                let span = (off, off + s.bits as u32);
                if taken.iter().any(|t| overlaps(*t, span)) {
                    return Err(LayoutError::OffsetConflict {
                        name: s.name,
                        layer: s.layer,
                        offset: off,
                    });
                }
                taken.push(span);
                locs[i] = FieldLoc {
                    bit_offset: base_bits + off,
                    bits: s.bits,
                };
            }
            for &i in mine.iter().filter(|&&i| specs[i].offset.is_none()) {
                let s = &specs[i];
                check_width(s)?;
                let off = first_fit(&taken, s.bits as u32);
                taken.push((off, off + s.bits as u32));
                locs[i] = FieldLoc {
                    bit_offset: base_bits + off,
                    bits: s.bits,
                };
            }
            let used_bits = taken.iter().map(|t| t.1).max().unwrap_or(0);
            let bytes = (used_bits as usize).div_ceil(8).div_ceil(align) * align;
            let start = base_bits as usize / 8;
            layer_spans.push((start, start + bytes));
            base_bits += bytes as u32 * 8;
        }
        let header_len = base_bits as usize / 8;
        Layout::from_locs(specs, layers, locs, header_len, ByteOrder::Big).map(|l| Layout {
            layer_spans,
            per_layer: align,
            ..l
        })
    }

    /// The Protocol Accelerator's compact layout (seed 004 §2.1): fields are grouped by class,
    /// not by layer. The connection-identification header comes first and is whole bytes, so
    /// it can be left off the wire; then protocol-specific, gossip and message-specific fields
    /// are packed bit-tight into one region, each class contiguous (so a prediction compares
    /// or copies one bit range). Within a class, requested offsets are honoured first; the
    /// rest go largest first into the lowest free bits, byte-aligned when alignment costs no
    /// extra byte. Fields are written in `order` (normally [`ByteOrder::NATIVE`]; the preamble
    /// tells the receiver).
    pub fn compact(
        specs: &[FieldSpec],
        layers: usize,
        order: ByteOrder,
    ) -> Result<Layout, LayoutError> {
        let mut locs = vec![
            FieldLoc {
                bit_offset: 0,
                bits: 0
            };
            specs.len()
        ];
        let mut class_spans = [(0u32, 0u32); 4];
        let mut base = 0u32;
        // ConnId, then ProtoSpecific, Gossip, MsgSpecific.
        let wire_order = [
            FieldClass::ConnId,
            FieldClass::ProtoSpecific,
            FieldClass::Gossip,
            FieldClass::MsgSpecific,
        ];
        for class in wire_order {
            let idx: Vec<usize> = (0..specs.len())
                .filter(|&i| specs[i].class == class)
                .collect();
            let placed = pack_class(specs, &idx)?;
            let bits = placed.iter().map(|(_, l)| l.end_bit()).max().unwrap_or(0);
            for (i, l) in placed {
                locs[i] = FieldLoc {
                    bit_offset: base + l.bit_offset,
                    bits: l.bits,
                };
            }
            let slot = FieldClass::ALL
                .iter()
                .position(|c| *c == class)
                .unwrap_or(0);
            class_spans[slot] = (base, base + bits);
            base += bits;
            if class == FieldClass::ConnId {
                base = base.div_ceil(8) * 8;
            }
        }
        let header_len = (base as usize).div_ceil(8);
        Layout::from_locs(specs, layers, locs, header_len, order)
            .map(|l| Layout { class_spans, ..l })
    }

    /// Whether every header bit outside the fields (padding) is zero, as senders leave it.
    /// Eight bytes per step; a header of at most 32 bytes in four loads, no loop (a sealed
    /// delivery asks on every datagram: the loop cost ~40 instructions a delivery).
    #[inline]
    pub fn padding_is_zero(&self, header: &[u8]) -> bool {
        if let Some(short) = ShortHeader::new(header) {
            return self.short_padding_is_zero(&short);
        }
        let n = header.len().min(self.field_mask.len());
        let (h, m) = (&header[..n], &self.field_mask[..n]);
        let (hw, mw) = (h.chunks_exact(8), m.chunks_exact(8));
        let tail = hw
            .remainder()
            .iter()
            .zip(mw.remainder())
            .fold(0, |acc, (h, m)| acc | (h & !m));
        let words = hw.zip(mw).fold(0u64, |acc, (h, m)| {
            let word = |b: &[u8]| b.try_into().map_or(0, u64::from_le_bytes);
            acc | (word(h) & !word(m))
        });
        words == 0 && tail == 0
    }

    /// [`padding_is_zero`](Self::padding_is_zero) of a short header loaded already.
    #[inline(always)]
    pub fn short_padding_is_zero(&self, header: &ShortHeader) -> bool {
        let (w, p) = (header.words(), &self.padding_words);
        (w[0] & p[0]) | (w[1] & p[1]) | (w[2] & p[2]) | (w[3] & p[3]) == 0
    }

    /// The fields of the layers above `layer` (and the accelerator's own): what a layer may
    /// cover with a checksum, since lower layers write their fields after it. `layer + 1`
    /// gives them with the layer's own; one past the bottom layer, every field.
    pub fn upper_fields(&self, layer: usize) -> &[FieldLoc] {
        self.upper_fields.get(layer).map_or(&[], |c| c.locs())
    }

    /// [`Layout::upper_fields`] resolved for this layout's header length.
    pub fn upper_cover(&self, layer: usize) -> Option<&Cover> {
        self.upper_fields.get(layer)
    }

    /// The bit range `[start, end)` of a class in a compact layout (empty in per-layer ones).
    pub fn class_span(&self, class: FieldClass) -> (u32, u32) {
        let slot = FieldClass::ALL
            .iter()
            .position(|c| *c == class)
            .unwrap_or(0);
        self.class_spans[slot]
    }

    /// Whole bytes of connection identification at the start of a compact layout's header.
    pub fn conn_id_len(&self) -> usize {
        (self.class_span(FieldClass::ConnId).1 as usize).div_ceil(8)
    }

    /// A mask (one byte per header byte) of the bits of the given classes.
    pub fn class_mask(&self, classes: &[FieldClass]) -> Vec<u8> {
        let mut m = vec![0u8; self.header_len];
        for &c in classes {
            let (a, b) = self.class_span(c);
            let mut bit = a;
            while bit < b {
                let n = (b - bit).min(64) as u8;
                write_bits(
                    &mut m,
                    FieldLoc {
                        bit_offset: bit,
                        bits: n,
                    },
                    self.order,
                    u64::MAX,
                );
                bit += n as u32;
            }
        }
        m
    }

    /// A layout from explicit locations of `specs` (used by the layout compilers here and
    /// by others): everything derived from the locations (covers, accessors, padding mask),
    /// with no layer spans and no class spans; checks the header length.
    pub fn from_locs(
        specs: &[FieldSpec],
        layers: usize,
        locs: Vec<FieldLoc>,
        header_len: usize,
        order: ByteOrder,
    ) -> Result<Layout, LayoutError> {
        if header_len > MAX_HEADER {
            return Err(LayoutError::TooLarge(header_len));
        }
        let access: Vec<Access> = locs.iter().map(|&l| Access::new(l, header_len)).collect();
        let field_mask = bit_mask(&locs, header_len, order);
        Ok(Layout {
            upper_fields: upper_fields(specs, &locs, layers, header_len),
            padding_words: padding_words(&field_mask),
            field_mask,
            puts: access.iter().map(|a| Put::of(a, order)).collect(),
            access,
            names: specs.iter().map(|s| s.name).collect(),
            locs,
            header_len,
            order,
            layer_spans: Vec::new(),
            class_spans: [(0, 0); 4],
            per_layer: 0,
        })
    }

    /// Where the field behind `h` lives.
    #[inline]
    pub fn loc(&self, h: FieldHandle) -> FieldLoc {
        self.locs[h.index()]
    }

    /// The field behind `h`, resolved for this layout's header length.
    #[inline]
    pub fn access(&self, h: FieldHandle) -> Access {
        self.access[h.index()]
    }

    /// The write of the field behind `h` into header areas of this layout, if it has one.
    #[inline(always)]
    pub(crate) fn put(&self, h: FieldHandle) -> Option<Put> {
        self.puts.get(h.index()).copied().flatten()
    }

    /// All locations, indexed by handle.
    pub fn locs(&self) -> &[FieldLoc] {
        &self.locs
    }

    /// Where the (first) field called `name` lives.
    pub fn find(&self, name: &str) -> Option<FieldLoc> {
        let i = self.names.iter().position(|n| *n == name)?;
        self.locs.get(i).copied()
    }

    /// A mask (one byte per header byte) of the bits of the fields called `names`; `None`
    /// if one of them is not in the layout.
    pub fn mask_of(&self, names: &[&str]) -> Option<Vec<u8>> {
        let locs = names
            .iter()
            .map(|n| self.find(n))
            .collect::<Option<Vec<FieldLoc>>>()?;
        Some(crate::field::bit_mask(&locs, self.header_len, self.order))
    }

    /// Bytes of header in front of every body.
    #[inline]
    pub fn header_len(&self) -> usize {
        self.header_len
    }

    /// The byte order fields are written in.
    #[inline]
    pub fn order(&self) -> ByteOrder {
        self.order
    }

    /// The alignment of each layer's header if this is a per-layer layout
    /// ([`Layout::per_layer_aligned`]), else `None`.
    #[inline(always)]
    pub fn per_layer_alignment(&self) -> Option<usize> {
        (self.per_layer > 0).then_some(self.per_layer)
    }

    /// Byte ranges of each layer's own header (empty for cross-layer layouts).
    pub fn layer_spans(&self) -> &[(usize, usize)] {
        &self.layer_spans
    }
}

fn upper_fields(
    specs: &[FieldSpec],
    locs: &[FieldLoc],
    layers: usize,
    header_len: usize,
) -> Vec<Cover> {
    (0..=layers)
        .map(|layer| {
            let upper: Vec<FieldLoc> = specs
                .iter()
                .zip(locs)
                .filter(|(s, _)| s.layer < layer || s.layer == ACCEL_LAYER)
                .map(|(_, l)| *l)
                .collect();
            Cover::new(&upper, header_len)
        })
        .collect()
}

/// Place the fields `idx` of one class: requested offsets first, then largest first, each at
/// the lowest free bit — byte-aligned instead when that needs no more bytes in the end.
fn pack_class(specs: &[FieldSpec], idx: &[usize]) -> Result<Vec<(usize, FieldLoc)>, LayoutError> {
    let mut fixed = Vec::new();
    for &i in idx.iter().filter(|&&i| specs[i].offset.is_some()) {
        let s = &specs[i];
        check_width(s)?;
        let off = s.offset.unwrap_or(0);
        let span = (off, off + s.bits as u32);
        if fixed
            .iter()
            .any(|(_, l): &(usize, FieldLoc)| overlaps((l.bit_offset, l.end_bit()), span))
        {
            return Err(LayoutError::OffsetConflict {
                name: s.name,
                layer: s.layer,
                offset: off,
            });
        }
        fixed.push((
            i,
            FieldLoc {
                bit_offset: off,
                bits: s.bits,
            },
        ));
    }
    let mut free: Vec<usize> = idx
        .iter()
        .copied()
        .filter(|&i| specs[i].offset.is_none())
        .collect();
    for &i in &free {
        check_width(&specs[i])?;
    }
    // Largest first; ties keep request order.
    free.sort_by_key(|&i| std::cmp::Reverse(specs[i].bits));
    let place = |aligned: bool| {
        let mut placed = fixed.clone();
        for &i in &free {
            let bits = specs[i].bits as u32;
            let taken: Vec<(u32, u32)> = placed
                .iter()
                .map(|(_, l)| (l.bit_offset, l.end_bit()))
                .collect();
            let mut off = first_fit(&taken, bits);
            if aligned && bits.is_multiple_of(8) {
                while !off.is_multiple_of(8)
                    || taken.iter().any(|t| overlaps(*t, (off, off + bits)))
                {
                    off += 1;
                }
            }
            placed.push((
                i,
                FieldLoc {
                    bit_offset: off,
                    bits: bits as u8,
                },
            ));
        }
        placed
    };
    let bytes = |p: &[(usize, FieldLoc)]| {
        (p.iter().map(|(_, l)| l.end_bit()).max().unwrap_or(0) as usize).div_ceil(8)
    };
    let tight = place(false);
    let aligned = place(true);
    Ok(if bytes(&aligned) <= bytes(&tight) {
        aligned
    } else {
        tight
    })
}

fn check_width(s: &FieldSpec) -> Result<(), LayoutError> {
    if (1..=64).contains(&s.bits) {
        Ok(())
    } else {
        Err(LayoutError::BadWidth {
            name: s.name,
            layer: s.layer,
            bits: s.bits,
        })
    }
}

fn overlaps(a: (u32, u32), b: (u32, u32)) -> bool {
    a.0 < b.1 && b.0 < a.1
}

/// The lowest bit offset where `bits` bits fit between the already `taken` spans.
pub(crate) fn first_fit(taken: &[(u32, u32)], bits: u32) -> u32 {
    let mut off = 0;
    loop {
        match taken.iter().find(|t| overlaps(**t, (off, off + bits))) {
            Some(t) => off = t.1,
            None => return off,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn per_layer_headers_are_padded_to_four_bytes() {
        let mut r = FieldRegistry::new();
        r.set_layer(0);
        let f = r.add_field(FieldClass::ProtoSpecific, "frag", 1, None);
        r.set_layer(1);
        let k = r.add_field(FieldClass::ProtoSpecific, "kind", 2, None);
        let s = r.add_field(FieldClass::ProtoSpecific, "seq", 16, None);
        let a = r.add_field(FieldClass::Gossip, "ack", 16, None);
        r.set_layer(2);
        let c = r.add_field(FieldClass::MsgSpecific, "csum", 16, Some(0));
        let l = Layout::per_layer_aligned(r.specs(), 3, 4).unwrap();
        assert_eq!(l.header_len(), 4 + 8 + 4);
        assert_eq!(l.loc(f).bit_offset, 0);
        assert_eq!(l.loc(k).bit_offset, 32);
        assert_eq!(l.loc(s).bit_offset, 34);
        assert_eq!(l.loc(a).bit_offset, 50);
        assert_eq!(l.loc(c).bit_offset, 96);
        assert_eq!(l.layer_spans(), &[(0, 4), (4, 12), (12, 16)]);
        // The checksum layer (2) covers the fields of layers 0 and 1, not its own.
        assert_eq!(l.upper_fields(2), &[l.loc(f), l.loc(k), l.loc(s), l.loc(a)]);
    }

    fn three_layer_registry() -> FieldRegistry {
        let mut r = FieldRegistry::new();
        r.set_layer(0);
        r.add_field(FieldClass::ProtoSpecific, "frag", 1, None);
        r.set_layer(1);
        r.add_field(FieldClass::ProtoSpecific, "kind", 2, None);
        r.add_field(FieldClass::ProtoSpecific, "seq", 16, None);
        r.add_field(FieldClass::Gossip, "ack", 16, None);
        r.set_layer(2);
        r.add_field(FieldClass::MsgSpecific, "checksum", 16, None);
        r
    }

    #[test]
    fn compact_layout_packs_by_class_without_padding() {
        let r = three_layer_registry();
        let per_layer = Layout::per_layer_aligned(r.specs(), 3, 4).unwrap();
        let compact = Layout::compact(r.specs(), 3, ByteOrder::NATIVE).unwrap();
        assert_eq!(per_layer.header_len(), 16);
        // 19 protocol-specific + 16 gossip + 16 message-specific bits = 51 bits.
        assert_eq!(compact.header_len(), 7);
        assert_eq!(compact.class_span(FieldClass::ProtoSpecific), (0, 19));
        assert_eq!(compact.class_span(FieldClass::Gossip), (19, 35));
        assert_eq!(compact.class_span(FieldClass::MsgSpecific), (35, 51));
        assert_eq!(compact.conn_id_len(), 0);
        // No two fields overlap and each lies in its class's span.
        let locs = compact.locs();
        for (i, a) in locs.iter().enumerate() {
            let (s, e) = compact.class_span(r.specs()[i].class);
            assert!(a.bit_offset >= s && a.end_bit() <= e);
            for b in &locs[i + 1..] {
                assert!(!overlaps(
                    (a.bit_offset, a.end_bit()),
                    (b.bit_offset, b.end_bit())
                ));
            }
        }
        let m = compact.class_mask(&[FieldClass::ProtoSpecific]);
        match compact.order() {
            ByteOrder::Little => assert_eq!(&m[..3], &[0xff, 0xff, 0x07]),
            ByteOrder::Big => assert_eq!(&m[..3], &[0xff, 0xff, 0xe0]),
        }
    }

    #[test]
    fn padding_is_every_bit_outside_the_fields() {
        let specs = three_layer_registry();
        // 16 bytes per layer, aligned: the fields leave padding in every word. In full (the
        // loop, past 32 bytes), and its first 32, 24, 16 and 8 bytes (the four loads).
        let l = Layout::per_layer_aligned(specs.specs(), 3, 16).unwrap();
        let n = l.header_len();
        assert!(n > 32, "a header the loop checks");
        let mut mask = vec![0u8; n];
        for &loc in l.locs() {
            write_bits(&mut mask, loc, l.order(), u64::MAX);
        }
        assert!(l.padding_is_zero(&mask[..n]), "every field bit set");
        for len in [n, 32, 24, 16, 8] {
            for byte in 0..len {
                for bit in 0..8 {
                    let mut h = vec![0u8; len];
                    h[byte] = 1 << bit;
                    let padding = mask[byte] & (1 << bit) == 0;
                    assert_eq!(
                        l.padding_is_zero(&h),
                        !padding,
                        "first {len} B: byte {byte} bit {bit}"
                    );
                }
            }
        }
    }

    #[test]
    fn compact_layout_aligns_when_it_costs_nothing_and_honours_offsets() {
        let mut r = FieldRegistry::new();
        r.add_field(FieldClass::ConnId, "id", 64, None);
        r.add_field(FieldClass::ConnId, "flag", 3, None);
        r.add_field(FieldClass::MsgSpecific, "len", 16, None);
        r.add_field(FieldClass::MsgSpecific, "at5", 4, Some(20));
        let l = Layout::compact(r.specs(), 1, ByteOrder::NATIVE).unwrap();
        assert_eq!(
            l.conn_id_len(),
            9,
            "67 bits of identification in whole bytes"
        );
        assert_eq!(l.loc(FieldHandle(0)).bit_offset, 0);
        // The message-specific region starts right after the conn-id bytes.
        assert_eq!(l.loc(FieldHandle(3)).bit_offset, 72 + 20);
        assert_eq!(
            l.loc(FieldHandle(2)).bit_offset % 8,
            0,
            "16-bit field byte-aligned"
        );
        assert_eq!(l.header_len(), 9 + 3);
    }

    #[test]
    fn conflicting_offsets_and_bad_widths_are_named() {
        let mut r = FieldRegistry::new();
        r.add_field(FieldClass::MsgSpecific, "a", 8, Some(0));
        r.add_field(FieldClass::MsgSpecific, "b", 8, Some(4));
        let e = Layout::per_layer_aligned(r.specs(), 1, 4).unwrap_err();
        assert!(e.to_string().contains("`b`"), "{e}");
        let mut r = FieldRegistry::new();
        r.add_field(FieldClass::MsgSpecific, "wide", 65, None);
        assert!(matches!(
            Layout::per_layer_aligned(r.specs(), 1, 4),
            Err(LayoutError::BadWidth { bits: 65, .. })
        ));
    }
}
