//! What a layer declares to be placed at compile time: its fields ([`FieldDecl`],
//! [`FixedFields`]), the per-layer placement computed from them in `const` evaluation
//! ([`LayerHeader`]), and the fields by position ([`Slots`]), through handles or constant
//! places. The layers depend on this part only; the stack that places them is the parent
//! module's.

use crate::field::{FieldClass, FieldHandle};
use crate::layer::{Layer, Packet, Verdict};
use crate::layout::FieldRegistry;

/// The alignment of each layer's header in the layout a [`Fixed`](super::Fixed) stack computes: the
/// connection's layout without the accelerator ([`Layout::per_layer_aligned`](crate::layout::Layout::per_layer_aligned) with 4).
pub const ALIGN: usize = 4;

/// The most fields one layer of a [`Fixed`](super::Fixed) stack may declare.
pub const MAX_FIELDS: usize = 8;

/// A field as a layer declares it at compile time: the arguments of its
/// [`FieldRegistry::add_field`] call.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FieldDecl {
    /// Its information class.
    pub class: FieldClass,
    /// A name for listings and errors.
    pub name: &'static str,
    /// Width in bits, 1 to 64.
    pub bits: u8,
    /// Requested bit offset within the layer's header, or `None`.
    pub offset: Option<u32>,
}

impl FieldDecl {
    /// A field of `bits` bits at no requested offset.
    pub const fn new(class: FieldClass, name: &'static str, bits: u8) -> FieldDecl {
        FieldDecl {
            class,
            name,
            bits,
            offset: None,
        }
    }
}

/// Register `decls` in order (a layer's [`Layer::init`]) and return their handles, so the
/// fields a layer registers are the ones it declares.
pub fn declare<const N: usize>(
    fields: &mut FieldRegistry,
    decls: &[FieldDecl; N],
) -> [FieldHandle; N] {
    decls.map(|d| fields.add_field(d.class, d.name, d.bits, d.offset))
}

/// One layer's header in the per-layer aligned layout, computed at compile time: each field's
/// bit offset within the header, and the header's size.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LayerHeader {
    /// Bit offset of each declared field within the layer's header (in declaration order).
    pub offsets: [u32; MAX_FIELDS],
    /// Width of each declared field.
    pub bits: [u8; MAX_FIELDS],
    /// Bytes of header, padded to [`ALIGN`].
    pub bytes: usize,
}

const fn overlaps(a: (u32, u32), b: (u32, u32)) -> bool {
    a.0 < b.1 && b.0 < a.1
}

impl LayerHeader {
    /// The header [`Layout::per_layer_aligned`](crate::layout::Layout::per_layer_aligned) gives a layer declaring `decls`: fields with
    /// a requested offset first, then the rest first-fit in declaration order. Declarations it
    /// would refuse (a width outside 1 to 64, overlapping offsets, more than [`MAX_FIELDS`])
    /// stop the build.
    pub const fn of(decls: &[FieldDecl]) -> LayerHeader {
        assert!(
            decls.len() <= MAX_FIELDS,
            "a fixed layer declares at most MAX_FIELDS fields"
        );
        let mut h = LayerHeader {
            offsets: [0; MAX_FIELDS],
            bits: [0; MAX_FIELDS],
            bytes: 0,
        };
        // Spans taken, in the order the run-time compiler takes them.
        let mut taken = [(0u32, 0u32); MAX_FIELDS];
        let mut n = 0;
        let mut pass = 0;
        while pass < 2 {
            let mut i = 0;
            while i < decls.len() {
                let d = decls[i];
                assert!(d.bits >= 1 && d.bits <= 64, "a field is 1 to 64 bits wide");
                let bits = d.bits as u32;
                let off = match (pass, d.offset) {
                    (0, Some(off)) => {
                        let mut j = 0;
                        while j < n {
                            assert!(
                                !overlaps(taken[j], (off, off + bits)),
                                "requested field offsets overlap"
                            );
                            j += 1;
                        }
                        Some(off)
                    }
                    (1, None) => {
                        // First fit: past the first taken span that overlaps, until none does.
                        let mut off = 0;
                        let mut j = 0;
                        while j < n {
                            if overlaps(taken[j], (off, off + bits)) {
                                off = taken[j].1;
                                j = 0;
                            } else {
                                j += 1;
                            }
                        }
                        Some(off)
                    }
                    _ => None,
                };
                if let Some(off) = off {
                    taken[n] = (off, off + bits);
                    n += 1;
                    h.offsets[i] = off;
                    h.bits[i] = d.bits;
                }
                i += 1;
            }
            pass += 1;
        }
        let mut used = 0;
        let mut j = 0;
        while j < n {
            if taken[j].1 > used {
                used = taken[j].1;
            }
            j += 1;
        }
        h.bytes = (used as usize).div_ceil(8).div_ceil(ALIGN) * ALIGN;
        h
    }
}

/// A layer whose fields are known at compile time, so that a [`Fixed`](super::Fixed) stack can place them.
///
/// Its [`Layer::init`] must register exactly [`FIELDS`](Self::FIELDS), in order (use
/// [`declare`]); a [`Fixed`](super::Fixed) stack checks this when the connection is built and uses the
/// handles otherwise. Its fixed pre-phases must do what [`Layer::pre_send`] and
/// [`Layer::pre_deliver`] do: write both once, generic over [`Slots`].
pub trait FixedFields: Layer {
    /// The fields [`Layer::init`] registers, in order.
    const FIELDS: &'static [FieldDecl];

    /// [`Layer::pre_send`], reading and writing the layer's fields through `at`.
    fn pre_send_fixed<A: Slots>(&self, pkt: &mut Packet<'_>, at: A) -> Verdict;

    /// [`Layer::pre_deliver`], reading and writing the layer's fields through `at`.
    fn pre_deliver_fixed<A: Slots>(&self, pkt: &mut Packet<'_>, at: A) -> Verdict;
}

/// A layer's fields in a message being pre-processed, by their position `K` in the layer's
/// declaration: through handles and the run-time layout, or at constant places ([`At`](super::At)).
pub trait Slots: Copy {
    /// Read field `K`.
    fn get<const K: usize>(self, pkt: &Packet<'_>) -> u64;
    /// Write field `K` (truncated to its width).
    fn set<const K: usize>(self, pkt: &mut Packet<'_>, v: u64);
    /// The body's length (behind the header area).
    #[inline(always)]
    fn body_len(self, pkt: &Packet<'_>) -> usize {
        pkt.body().len()
    }
}

/// A layer's handles, in declaration order: its fields through the run-time layout.
impl<const N: usize> Slots for &[FieldHandle; N] {
    #[inline(always)]
    fn get<const K: usize>(self, pkt: &Packet<'_>) -> u64 {
        pkt.get(self[K])
    }
    #[inline(always)]
    fn set<const K: usize>(self, pkt: &mut Packet<'_>, v: u64) {
        pkt.set(self[K], v)
    }
}
