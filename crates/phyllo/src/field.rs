//! Header fields: the four information classes, handles, and bit-level accessors.
//!
//! Seed 004 §2.1 (van Renesse, "Masking the Overhead of Protocol Layering"): every layer asks
//! for its header fields with `add_field(class, name, bits, offset)` at initialisation and gets
//! a [`FieldHandle`] back; it never reads or writes its header by raw offset. Where a field
//! lands is decided afterwards by a layout compiler ([`crate::layout`]), so the same layer runs
//! unchanged over a traditional per-layer aligned layout or the accelerator's compact one.
//!
//! Bit numbering. A header is a byte string; a field occupies bits `[bit_offset, bit_offset +
//! bits)` of it. In [`ByteOrder::Big`] bits are numbered most-significant first within each
//! byte and the value's most significant bit comes first; in [`ByteOrder::Little`] bits are
//! numbered least-significant first and the value's least significant bit comes first. For
//! byte-aligned fields of 8, 16, 32 or 64 bits this is exactly the big- or little-endian
//! integer encoding, so a sender writes in its own order and the receiver converts (the
//! preamble's byte-order bit says which).

use std::fmt;

/// The header information classes of seed 004 §2.1.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum FieldClass {
    /// Never changes during a connection (addresses, ports): sent only occasionally.
    ConnId,
    /// Depends only on protocol state (sequence number, message type): predictable.
    ProtoSpecific,
    /// Depends on the message (length, checksum): computed by the packet filter.
    MsgSpecific,
    /// Piggybacked information that may be out of date (cumulative acks).
    Gossip,
}

impl FieldClass {
    /// All classes, in wire order of the accelerator's layout.
    pub const ALL: [FieldClass; 4] = [
        FieldClass::ConnId,
        FieldClass::ProtoSpecific,
        FieldClass::MsgSpecific,
        FieldClass::Gossip,
    ];
}

impl fmt::Display for FieldClass {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            FieldClass::ConnId => "conn-id",
            FieldClass::ProtoSpecific => "protocol-specific",
            FieldClass::MsgSpecific => "message-specific",
            FieldClass::Gossip => "gossip",
        })
    }
}

/// Byte order of a header, as announced by its sender.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ByteOrder {
    /// Most significant byte (and bit) first.
    Big,
    /// Least significant byte (and bit) first.
    Little,
}

impl ByteOrder {
    /// The order of the machine this code runs on.
    pub const NATIVE: ByteOrder = if cfg!(target_endian = "little") {
        ByteOrder::Little
    } else {
        ByteOrder::Big
    };
}

/// A field as a layer requested it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FieldSpec {
    /// Its information class.
    pub class: FieldClass,
    /// A name for listings and errors (need not be unique).
    pub name: &'static str,
    /// Width in bits, 1 to 64.
    pub bits: u8,
    /// Requested bit offset within its class header, or `None` for "don't care".
    pub offset: Option<u32>,
    /// Index of the requesting layer in its stack (0 = top).
    pub layer: usize,
}

/// The name by which a layer reads and writes one of its fields.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct FieldHandle(pub(crate) u16);

impl FieldHandle {
    /// Index into the layout's field table.
    pub fn index(self) -> usize {
        self.0 as usize
    }

    /// A handle for the field at `index` of a layout's table.
    pub fn from_index(index: usize) -> FieldHandle {
        FieldHandle(index as u16)
    }
}

/// Where a field lives in a header: bit offset from the start of the header and width.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct FieldLoc {
    /// First bit of the field (see the module docs for numbering).
    pub bit_offset: u32,
    /// Width in bits, 1 to 64.
    pub bits: u8,
}

impl FieldLoc {
    /// One past the last bit.
    pub fn end_bit(self) -> u32 {
        self.bit_offset + self.bits as u32
    }

    /// Whether the field fits in a header of `len` bytes.
    pub fn fits(self, len: usize) -> bool {
        (1..=64).contains(&self.bits) && self.end_bit() as usize <= len * 8
    }

    /// The largest value the field can hold.
    pub fn max_value(self) -> u64 {
        if self.bits >= 64 {
            u64::MAX
        } else {
            (1u64 << self.bits) - 1
        }
    }
}

/// Read the field at `loc` from `hdr`. Bits beyond the end of `hdr` read as zero, so a
/// malformed header can never make this panic; callers check [`FieldLoc::fits`] first.
#[inline]
pub fn read_bits(hdr: &[u8], loc: FieldLoc, order: ByteOrder) -> u64 {
    let first = (loc.bit_offset / 8) as usize;
    let shift = loc.bit_offset % 8;
    let nbytes = (shift + loc.bits as u32).div_ceil(8) as usize;
    // Fast path: a full 8-byte window inside the header (fixed-size load, no memcpy call).
    if nbytes <= 8 {
        if let Some(w) = hdr.get(first..first + 8) {
            let w: [u8; 8] = w.try_into().unwrap_or([0; 8]);
            return match order {
                ByteOrder::Big => (u64::from_be_bytes(w) << shift) >> (64 - loc.bits as u32),
                ByteOrder::Little => (u64::from_le_bytes(w) >> shift) & loc.max_value(),
            };
        }
    }
    // Whole bytes, aligned.
    if shift == 0 && loc.bits.is_multiple_of(8) && first + nbytes <= hdr.len() {
        let b = &hdr[first..first + nbytes];
        let mut v = 0u64;
        match order {
            ByteOrder::Big => b.iter().for_each(|&x| v = (v << 8) | x as u64),
            ByteOrder::Little => b.iter().rev().for_each(|&x| v = (v << 8) | x as u64),
        }
        return v;
    }
    if nbytes <= 8 {
        // Within one 8-byte window: one load, a shift and a mask.
        let mut w = [0u8; 8];
        let avail = hdr.len().saturating_sub(first).min(nbytes);
        if avail > 0 {
            w[..avail].copy_from_slice(&hdr[first..first + avail]);
        }
        return match order {
            ByteOrder::Big => (u64::from_be_bytes(w) << shift) >> (64 - loc.bits as u32),
            ByteOrder::Little => (u64::from_le_bytes(w) >> shift) & loc.max_value(),
        };
    }
    let mut acc: u128 = 0;
    for i in 0..nbytes {
        let byte = hdr.get(first + i).copied().unwrap_or(0) as u128;
        match order {
            ByteOrder::Big => acc = (acc << 8) | byte,
            ByteOrder::Little => acc |= byte << (8 * i),
        }
    }
    let v = match order {
        ByteOrder::Big => acc >> (nbytes as u32 * 8 - shift - loc.bits as u32),
        ByteOrder::Little => acc >> shift,
    };
    (v as u64) & loc.max_value()
}

/// Write `value` (truncated to the field's width) into the field at `loc` of `hdr`. Bits that
/// would fall beyond the end of `hdr` are not written.
#[inline]
pub fn write_bits(hdr: &mut [u8], loc: FieldLoc, order: ByteOrder, value: u64) {
    let value = value & loc.max_value();
    let first = (loc.bit_offset / 8) as usize;
    let shift = loc.bit_offset % 8;
    let nbytes = (shift + loc.bits as u32).div_ceil(8) as usize;
    if nbytes <= 8 {
        if let Some(b) = hdr.get_mut(first..first + 8) {
            let w: [u8; 8] = (&*b).try_into().unwrap_or([0; 8]);
            let out = match order {
                ByteOrder::Big => {
                    let s = 64 - shift - loc.bits as u32;
                    let m = loc.max_value() << s;
                    ((u64::from_be_bytes(w) & !m) | (value << s)).to_be_bytes()
                }
                ByteOrder::Little => {
                    let m = loc.max_value() << shift;
                    ((u64::from_le_bytes(w) & !m) | (value << shift)).to_le_bytes()
                }
            };
            b.copy_from_slice(&out);
            return;
        }
    }
    if shift == 0 && loc.bits.is_multiple_of(8) && first + nbytes <= hdr.len() {
        let b = &mut hdr[first..first + nbytes];
        match order {
            ByteOrder::Big => {
                for (i, x) in b.iter_mut().enumerate() {
                    *x = (value >> (8 * (nbytes - 1 - i))) as u8;
                }
            }
            ByteOrder::Little => {
                for (i, x) in b.iter_mut().enumerate() {
                    *x = (value >> (8 * i)) as u8;
                }
            }
        }
        return;
    }
    if nbytes <= 8 {
        let avail = hdr.len().saturating_sub(first).min(nbytes);
        if avail == 0 {
            return;
        }
        let mut w = [0u8; 8];
        w[..avail].copy_from_slice(&hdr[first..first + avail]);
        let w = match order {
            ByteOrder::Big => {
                let s = 64 - shift - loc.bits as u32;
                let m = loc.max_value() << s;
                (u64::from_be_bytes(w) & !m) | (value << s)
            }
            ByteOrder::Little => {
                let m = loc.max_value() << shift;
                (u64::from_le_bytes(w) & !m) | (value << shift)
            }
        };
        let bytes = match order {
            ByteOrder::Big => w.to_be_bytes(),
            ByteOrder::Little => w.to_le_bytes(),
        };
        hdr[first..first + avail].copy_from_slice(&bytes[..avail]);
        return;
    }
    let mask: u128 = loc.max_value() as u128;
    let (vmask, vbits) = match order {
        ByteOrder::Big => {
            let s = nbytes as u32 * 8 - shift - loc.bits as u32;
            (mask << s, (value as u128) << s)
        }
        ByteOrder::Little => (mask << shift, (value as u128) << shift),
    };
    for i in 0..nbytes {
        let Some(byte) = hdr.get_mut(first + i) else {
            return;
        };
        let s = match order {
            ByteOrder::Big => 8 * (nbytes - 1 - i),
            ByteOrder::Little => 8 * i,
        };
        let m = (vmask >> s) as u8;
        let v = (vbits >> s) as u8;
        *byte = (*byte & !m) | (v & m);
    }
}

/// Copy the `fields` of `header` (read in `order`) into `out` as a big-endian image, leaving
/// every other bit of `out` zero. Two hosts of different byte order that hold the same field
/// values produce the same image: what checksums and authentication cover.
pub fn canonical_image(header: &[u8], order: ByteOrder, fields: &[FieldLoc], out: &mut [u8]) {
    out.fill(0);
    for &l in fields {
        write_bits(out, l, ByteOrder::Big, read_bits(header, l, order));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn aligned_fields_are_plain_integers() {
        let mut b = [0u8; 8];
        let loc = FieldLoc {
            bit_offset: 16,
            bits: 16,
        };
        write_bits(&mut b, loc, ByteOrder::Big, 0x1234);
        assert_eq!(b[2..4], [0x12, 0x34]);
        write_bits(&mut b, loc, ByteOrder::Little, 0x1234);
        assert_eq!(b[2..4], [0x34, 0x12]);
        assert_eq!(read_bits(&b, loc, ByteOrder::Little), 0x1234);
    }

    #[test]
    fn big_endian_bits_are_msb_first() {
        let mut b = [0u8; 2];
        write_bits(
            &mut b,
            FieldLoc {
                bit_offset: 0,
                bits: 1,
            },
            ByteOrder::Big,
            1,
        );
        write_bits(
            &mut b,
            FieldLoc {
                bit_offset: 4,
                bits: 8,
            },
            ByteOrder::Big,
            0xAB,
        );
        assert_eq!(b, [0x8A, 0xB0]);
    }

    #[test]
    fn out_of_range_reads_zero_and_writes_nothing() {
        let mut b = [0xFFu8; 2];
        let loc = FieldLoc {
            bit_offset: 12,
            bits: 16,
        };
        write_bits(&mut b, loc, ByteOrder::Big, 0);
        assert_eq!(b, [0xFF, 0xF0]);
        assert!(!loc.fits(2));
        assert_eq!(read_bits(&[], loc, ByteOrder::Little), 0);
    }

    proptest! {
        #[test]
        fn short_headers_never_panic(off in 0u32..120, bits in 1u8..=64, v: u64, big: bool, len in 0usize..12) {
            let order = if big { ByteOrder::Big } else { ByteOrder::Little };
            let loc = FieldLoc { bit_offset: off, bits };
            let mut b = vec![0xA5u8; len];
            write_bits(&mut b, loc, order, v);
            let r = read_bits(&b, loc, order);
            if loc.fits(len) {
                prop_assert_eq!(r, v & loc.max_value());
            }
        }

        #[test]
        fn write_then_read_roundtrips_and_spares_neighbours(
            off in 0u32..100, bits in 1u8..=64, v: u64, big: bool, fill: u8,
        ) {
            let order = if big { ByteOrder::Big } else { ByteOrder::Little };
            let loc = FieldLoc { bit_offset: off, bits };
            let mut b = vec![fill; 24];
            let before = b.clone();
            write_bits(&mut b, loc, order, v);
            prop_assert_eq!(read_bits(&b, loc, order), v & loc.max_value());
            // Every bit outside the field is unchanged.
            write_bits(&mut b, loc, order, read_bits(&before, loc, order));
            prop_assert_eq!(b, before);
        }
    }
}
