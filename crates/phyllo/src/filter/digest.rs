//! Message digests for the `DIGEST` operation (van Renesse, "Masking the Overhead of Protocol
//! Layering" (seed 004 §3.3) / Table 2).
//!
//! In the paper `DIGEST` takes a function pointer. A function pointer cannot travel in a
//! program's wire encoding nor be checked by a verifier, so here a digest is named by a
//! [`DigestId`], a small integer looked up in a fixed registry ([`Digest`]). The verifier
//! rejects an id that names no registered digest (`VerifyError::UnknownDigest`), so a
//! verified program only ever computes digests that exist.
//!
//! Every digest but the covered checksum is a pure function of the message body; the covered
//! checksum also reads a fixed list of header fields (the cover), never the one it is written
//! to, so a send filter may compute a digest and write it into a header field (`POP_FIELD`)
//! without the write changing the digest.

use std::fmt;

/// The raw name of a digest in a program: an index into the registry of [`Digest`]s.
///
/// Any `u16` can appear in a decoded program; only the ids of [`Digest::ALL`] pass the
/// verifier.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct DigestId(pub u16);

impl DigestId {
    /// The Internet checksum of the body ([`Digest::InetChecksum`]).
    pub const INET_CHECKSUM: DigestId = DigestId(0);
    /// The length of the body in bytes ([`Digest::BodyLen`]).
    pub const BODY_LEN: DigestId = DigestId(1);
    /// The covered Internet checksum ([`Digest::InetChecksumCovered`]).
    pub const INET_CHECKSUM_COVERED: DigestId = DigestId(2);

    /// The registered digest this id names, if any.
    pub fn resolve(self) -> Option<Digest> {
        Digest::ALL.into_iter().find(|d| d.id() == self)
    }
}

impl fmt::Display for DigestId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.resolve() {
            Some(d) => f.write_str(d.name()),
            None => write!(f, "digest#{}", self.0),
        }
    }
}

/// The registry of message digests a filter can push.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Digest {
    /// RFC 1071 Internet checksum: the 16-bit one's complement of the one's complement sum of
    /// the body taken as big-endian 16-bit words (an odd last byte is padded with a zero).
    /// The value pushed is that 16-bit checksum, zero-extended.
    InetChecksum,
    /// The body length in bytes (the same value as `PUSH_SIZE`).
    BodyLen,
    /// The one's complement checksum of the filter's *cover* fields, as the header's sender
    /// wrote them (the header masked to them, see [`crate::inet::covered_checksum`]), and of
    /// the body: the `checksum` layer's value, which protects the header fields of the layers
    /// above it too. The cover is fixed when the filter is built
    /// ([`VerifiedFilter::with_cover`](super::VerifiedFilter::with_cover)); it must not include
    /// the field the checksum is written to.
    InetChecksumCovered,
}

/// What a digest reads besides the header: the body, the header's byte order, and the cover.
#[derive(Clone, Copy, Debug)]
pub(crate) struct DigestIn<'a> {
    pub(crate) body: &'a [u8],
    pub(crate) order: crate::field::ByteOrder,
    pub(crate) wire: crate::field::ByteOrder,
    pub(crate) cover: &'a crate::field::Cover,
}

impl Digest {
    /// Every registered digest.
    pub const ALL: [Digest; 3] = [
        Digest::InetChecksum,
        Digest::BodyLen,
        Digest::InetChecksumCovered,
    ];

    /// The id under which this digest is registered.
    pub fn id(self) -> DigestId {
        match self {
            Digest::InetChecksum => DigestId::INET_CHECKSUM,
            Digest::BodyLen => DigestId::BODY_LEN,
            Digest::InetChecksumCovered => DigestId::INET_CHECKSUM_COVERED,
        }
    }

    /// A short name for listings and errors.
    pub fn name(self) -> &'static str {
        match self {
            Digest::InetChecksum => "inet-checksum",
            Digest::BodyLen => "body-len",
            Digest::InetChecksumCovered => "inet-checksum-covered",
        }
    }

    /// Compute the digest of `body` (a covered checksum with an empty cover).
    #[inline]
    pub fn compute(self, body: &[u8]) -> u64 {
        match self {
            Digest::InetChecksum => inet_checksum(body) as u64,
            Digest::BodyLen => body.len() as u64,
            // An empty cover: the sum of the body alone.
            Digest::InetChecksumCovered => Digest::InetChecksumCovered.compute_in(
                &[],
                &DigestIn {
                    body,
                    order: crate::field::ByteOrder::Little,
                    wire: crate::field::ByteOrder::Little,
                    cover: &crate::field::Cover::EMPTY,
                },
            ),
        }
    }

    /// Compute the digest of a message with `header`.
    #[inline]
    pub(crate) fn compute_in(self, header: &[u8], m: &DigestIn<'_>) -> u64 {
        match self {
            Digest::InetChecksumCovered => {
                crate::inet::covered_checksum(header, m.order, m.wire, m.cover, m.body) as u64
            }
            d => d.compute(m.body),
        }
    }
}

/// The RFC 1071 Internet checksum of `data`: the little-endian sum
/// ([`crate::inet::ones_sum_le`]), folded, swapped back to the textbook big-endian value
/// (RFC 1071 §2(B)) and complemented.
pub fn inet_checksum(data: &[u8]) -> u16 {
    !crate::inet::fold16(crate::inet::ones_sum_le(data)).swap_bytes()
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// The textbook RFC 1071 loop, as the reference.
    fn naive(data: &[u8]) -> u16 {
        let mut sum: u32 = 0;
        for pair in data.chunks(2) {
            let w = ((pair[0] as u32) << 8) | pair.get(1).copied().unwrap_or(0) as u32;
            sum += w;
            sum = (sum & 0xffff) + (sum >> 16);
        }
        !(sum as u16)
    }

    #[test]
    fn rfc1071_example() {
        // RFC 1071 §3: the sum of these bytes is 0xddf2, so the checksum is its complement.
        let data = [0x00, 0x01, 0xf2, 0x03, 0xf4, 0xf5, 0xf6, 0xf7];
        assert_eq!(inet_checksum(&data), !0xddf2);
        assert_eq!(inet_checksum(&[]), 0xffff);
    }

    #[test]
    fn long_bodies_cross_block_boundaries() {
        let data: Vec<u8> = (0..140_001u32)
            .map(|i| (i.wrapping_mul(2_654_435_761) >> 13) as u8)
            .collect();
        for len in [65_535, 65_536, 65_537, 140_001] {
            assert_eq!(inet_checksum(&data[..len]), naive(&data[..len]), "{len}");
        }
    }

    #[test]
    fn registry_ids_resolve_to_themselves() {
        for d in Digest::ALL {
            assert_eq!(d.id().resolve(), Some(d));
        }
        assert_eq!(DigestId(999).resolve(), None);
        assert_eq!(DigestId::BODY_LEN.to_string(), "body-len");
        assert_eq!(DigestId(7).to_string(), "digest#7");
    }

    proptest! {
        #[test]
        fn wide_sum_equals_textbook_loop(data in proptest::collection::vec(any::<u8>(), 0..300)) {
            prop_assert_eq!(inet_checksum(&data), naive(&data));
        }

        #[test]
        fn all_ones_words_fold_correctly(n in prop::sample::select(vec![0usize, 1, 2, 3, 7, 63, 65535, 65536, 65537, 131_075])) {
            let data = vec![0xffu8; n];
            prop_assert_eq!(inet_checksum(&data), naive(&data));
        }
    }
}
