//! Internet checksum arithmetic (RFC 1071): one's complement sums of little-endian words, folding,
//! and the covered checksum of seed 004 §2.1's typical message-specific field. (Seed 004 is van
//! Renesse, "Masking the Overhead of Protocol Layering".)
//!
//! Shared by the `checksum` layer (its pre-phases) and the packet filter's digest (the
//! accelerator's fast paths), so both compute the same value by the same code.

use crate::field::{oc_add, word_sum, ByteOrder, Cover};

/// The one's complement sum of `data` taken as little-endian 16-bit words (an odd last byte
/// padded with a zero), unfolded: a value congruent to that sum modulo 0xffff.
///
/// RFC 1071 §2(B): summing byte-swapped words gives the byte-swapped sum, so once folded this
/// is the textbook big-endian sum with its two bytes swapped. Little-endian words are what a
/// little-endian machine loads for free; short data is summed eight bytes per load, long data
/// by a loop the compiler vectorises.
#[inline]
pub fn ones_sum_le(data: &[u8]) -> u64 {
    if data.len() > 64 {
        ones_sum_le_long(data)
    } else {
        word_sum(data, |_| u64::MAX)
    }
}

/// [`ones_sum_le`] for long data: little-endian 32-bit words added into a 64-bit accumulator
/// (vectorised), in blocks of at most 2^16 bytes so that a block's plain sum cannot overflow
/// (at most 2^14 words below 2^32 each); blocks are added with end-around carry. Never
/// inlined: one copy of the loop serves every caller.
#[inline(never)]
fn ones_sum_le_long(data: &[u8]) -> u64 {
    let mut total: u64 = 0;
    for block in data.chunks(1 << 16) {
        let words = block.chunks_exact(4);
        let rest = words.remainder();
        let mut sum: u64 = words
            .map(|w| {
                let mut b = [0u8; 4];
                b.copy_from_slice(w);
                u32::from_le_bytes(b) as u64
            })
            .sum();
        if !rest.is_empty() {
            // Blocks and words start at even offsets, so zero padding on the right is
            // RFC 1071's padding of an odd last byte.
            let mut b = [0u8; 4];
            b[..rest.len()].copy_from_slice(rest);
            sum += u32::from_le_bytes(b) as u64;
        }
        let (t, carry) = total.overflowing_add(sum);
        // On overflow `t <= u64::MAX - 1`, so adding the carry back cannot overflow again.
        total = t + carry as u64;
    }
    total
}

/// A one's complement sum folded to 16 bits: the two 32-bit halves added with end-around
/// carry, then the two 16-bit halves of that. Adding the carry back cannot carry again (a
/// sum that carried is at most `2 * (2^32 - 1) - 2^32`), so two steps suffice; zero only
/// for a zero sum, like the textbook loop.
#[inline]
pub fn fold16(sum: u64) -> u16 {
    let (lo, carry) = (sum as u32).overflowing_add((sum >> 32) as u32);
    let s = lo + carry as u32;
    let (lo, carry) = (s as u16).overflowing_add((s >> 16) as u16);
    lo + carry as u16
}

/// The checksum over the `cover` fields of `header` and the body: the complement of the one's
/// complement sum of the cover's image of the header as its sender wrote it, in `wire` order
/// ([`Cover::image_sum`]; `header` is now in `order`), and of the body, both as
/// little-endian 16-bit words (each part padded on its own). A header still in its wire order
/// is summed masked, eight bytes per load; a receiver that converted one from the other order
/// rebuilds the sender's image, so both ends compute the same value.
#[inline(always)]
pub fn covered_checksum(
    header: &[u8],
    order: ByteOrder,
    wire: ByteOrder,
    cover: &Cover,
    body: &[u8],
) -> u16 {
    !fold16(oc_add(
        cover.image_sum(header, order, wire),
        ones_sum_le(body),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::field::{write_bits, FieldLoc};

    /// The textbook RFC 1071 sum over big-endian words, folded.
    fn naive_be(data: &[u8]) -> u16 {
        let mut s: u64 = 0;
        for c in data.chunks(2) {
            s += u16::from_be_bytes([c[0], *c.get(1).unwrap_or(&0)]) as u64;
        }
        fold16(s)
    }

    #[test]
    fn fold16_is_the_textbook_fold() {
        // Fold 16 bits at a time until nothing is left above them.
        let textbook = |mut s: u64| {
            while s >> 16 != 0 {
                s = (s & 0xffff) + (s >> 16);
            }
            s as u16
        };
        let mut x = 0x9e37_79b9_7f4a_7c15u64;
        let edges = [
            0,
            1,
            0xffff,
            0x1_0000,
            0x1_fffe,
            0xffff_ffff,
            0x1_0000_0000,
            u64::MAX,
        ];
        for v in edges.into_iter().chain((0..100_000).map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x >> (x % 40)
        })) {
            assert_eq!(fold16(v), textbook(v), "{v:#x}");
        }
    }

    #[test]
    fn little_endian_sum_is_the_swapped_rfc1071_sum() {
        // RFC 1071 §3: the words 0001 f203 f4f5 f6f7 sum to ddf2.
        let data = [0x00, 0x01, 0xf2, 0x03, 0xf4, 0xf5, 0xf6, 0xf7];
        assert_eq!(fold16(ones_sum_le(&data)), 0xf2dd);
        assert_eq!(fold16(ones_sum_le(&[0x12])), 0x0012);
        let long: Vec<u8> = (0..=255u8).cycle().take(70_001).collect();
        for n in [0, 1, 7, 8, 9, 15, 63, 64, 65, 1001, 65_537, 70_001] {
            assert_eq!(
                fold16(ones_sum_le(&long[..n])),
                naive_be(&long[..n]).swap_bytes(),
                "{n} bytes"
            );
        }
    }

    #[test]
    fn covered_checksum_is_the_senders_in_either_order() {
        let locs = [
            FieldLoc {
                bit_offset: 3,
                bits: 13,
            },
            FieldLoc {
                bit_offset: 16,
                bits: 32,
            },
            FieldLoc {
                bit_offset: 50,
                bits: 7,
            },
        ];
        let cover = Cover::new(&locs, 11);
        let values = [0x1abc, 0xdead_beef, 0x55];
        let (mut big, mut little) = ([0u8; 11], [0u8; 11]);
        for (&l, &v) in locs.iter().zip(&values) {
            write_bits(&mut big, l, ByteOrder::Big, v);
            write_bits(&mut little, l, ByteOrder::Little, v);
        }
        let body = b"payload";
        let (le, be) = (ByteOrder::Little, ByteOrder::Big);
        let c = covered_checksum(&little, le, le, &cover, body);
        // A receiver that converted the header to its own order gets the sender's value.
        assert_eq!(covered_checksum(&big, be, le, &cover, body), c);
        let cb = covered_checksum(&big, be, be, &cover, body);
        assert_eq!(covered_checksum(&little, le, be, &cover, body), cb);
        // Bits outside the cover do not count; every bit inside does.
        little[10] ^= 0xff;
        assert_eq!(covered_checksum(&little, le, le, &cover, body), c);
        little[10] ^= 0xff;
        for bit in 0..88 {
            let inside = locs
                .iter()
                .any(|l| (l.bit_offset..l.end_bit()).contains(&bit));
            let mut h = little;
            h[bit as usize / 8] ^= 1 << (bit % 8);
            let changed = covered_checksum(&h, le, le, &cover, body) != c;
            assert_eq!(changed, inside, "bit {bit}");
        }
    }
}
