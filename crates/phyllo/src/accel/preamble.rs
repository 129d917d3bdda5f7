//! The 8-byte preamble of every accelerated message (van Renesse, "Masking the Overhead of Protocol
//! Layering" (seed 004 §2.2), Figure 1).
//!
//! Bit 63 (first on the wire): connection identification present. Bit 62: byte order of the
//! headers that follow (1 = little-endian). Bits 0-61: the connection cookie, a random number
//! the sender chose for this direction of the connection. The preamble itself is always
//! big-endian, so it can be read before the byte order is known.

use crate::field::ByteOrder;
use thiserror::Error;

/// Bytes of the preamble.
pub const PREAMBLE_LEN: usize = 8;
const CONN_ID_BIT: u64 = 1 << 63;
const LITTLE_BIT: u64 = 1 << 62;
/// The cookie's bits.
pub const COOKIE_MASK: u64 = (1 << 62) - 1;

/// A decoded preamble.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Preamble {
    /// Whether the connection identification header follows.
    pub conn_id_present: bool,
    /// Byte order of the headers.
    pub order: ByteOrder,
    /// The 62-bit connection cookie.
    pub cookie: u64,
}

/// A preamble could not be read.
#[derive(Debug, Error, PartialEq, Eq)]
pub enum PreambleError {
    /// Fewer than eight bytes.
    #[error("datagram of {0} bytes is shorter than the 8-byte preamble")]
    Truncated(usize),
}

impl Preamble {
    /// Encode into the first eight bytes of `out` (which must hold at least eight).
    pub fn write(&self, out: &mut [u8; PREAMBLE_LEN]) {
        let mut v = self.cookie & COOKIE_MASK;
        if self.conn_id_present {
            v |= CONN_ID_BIT;
        }
        if self.order == ByteOrder::Little {
            v |= LITTLE_BIT;
        }
        *out = v.to_be_bytes();
    }

    /// The encoded bytes.
    pub fn to_bytes(&self) -> [u8; PREAMBLE_LEN] {
        let mut b = [0u8; PREAMBLE_LEN];
        self.write(&mut b);
        b
    }

    /// Decode the first eight bytes of `input`.
    pub fn read(input: &[u8]) -> Result<Preamble, PreambleError> {
        let b: [u8; PREAMBLE_LEN] = input
            .get(..PREAMBLE_LEN)
            .and_then(|s| s.try_into().ok())
            .ok_or(PreambleError::Truncated(input.len()))?;
        let v = u64::from_be_bytes(b);
        Ok(Preamble {
            conn_id_present: v & CONN_ID_BIT != 0,
            order: if v & LITTLE_BIT != 0 {
                ByteOrder::Little
            } else {
                ByteOrder::Big
            },
            cookie: v & COOKIE_MASK,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn layout_of_the_bits() {
        let p = Preamble {
            conn_id_present: true,
            order: ByteOrder::Little,
            cookie: 1,
        };
        assert_eq!(p.to_bytes(), [0xC0, 0, 0, 0, 0, 0, 0, 1]);
        assert_eq!(Preamble::read(&[0; 7]), Err(PreambleError::Truncated(7)));
    }

    proptest! {
        #[test]
        fn roundtrip(present: bool, little: bool, cookie: u64) {
            let p = Preamble {
                conn_id_present: present,
                order: if little { ByteOrder::Little } else { ByteOrder::Big },
                cookie: cookie & COOKIE_MASK,
            };
            prop_assert_eq!(Preamble::read(&p.to_bytes()), Ok(p));
        }

        #[test]
        fn any_eight_bytes_decode(b: [u8; 8]) {
            let p = Preamble::read(&b).unwrap();
            prop_assert_eq!(p.to_bytes(), b);
        }
    }
}
