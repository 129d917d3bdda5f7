//! The seed's simplified SAFER K-64 block cipher — **insecure**, a reproduction only.
//!
//! Seed 001 §3.1 kept "at least one operation of each type occurring in the original
//! algorithm" and dropped everything else, to make encryption cheap enough for an ILP
//! experiment: per 8-byte block, add or xor a key byte into each byte, then exponentiate or take
//! the logarithm of each byte (base 45 modulo 257, from tables), then a 2-PHT on each byte pair,
//! `(a1, a2) -> (2·a1 + a2, a1 + a2)`. One round, a fixed key per direction, every block
//! alike (ECB): it hides nothing from anyone who looks. It exists so the integrated data path
//! can be measured with the seed's kind of cipher (byte operations, two 256-byte tables) beside
//! a real one.

/// `EXP[x] = 45^x mod 257` (with 256 stored as 0), SAFER's exponential table.
static EXP: [u8; 256] = exp_table();
/// The inverse of [`EXP`].
static LOG: [u8; 256] = log_table();

const fn exp_table() -> [u8; 256] {
    let mut t = [0u8; 256];
    let mut v: u32 = 1;
    let mut i = 0;
    while i < 256 {
        t[i] = (v & 0xff) as u8; // 256 becomes 0
        v = (v * 45) % 257;
        i += 1;
    }
    t
}

const fn log_table() -> [u8; 256] {
    let exp = exp_table();
    let mut t = [0u8; 256];
    let mut i = 0;
    while i < 256 {
        t[exp[i] as usize] = i as u8;
        i += 1;
    }
    t
}

/// Bytes of a block.
pub const BLOCK: usize = 8;

/// Bytes whose key byte is xored (the others are added), and which are exponentiated (the
/// others take the logarithm) — SAFER's pattern.
const XOR_EXP: [bool; BLOCK] = [true, false, false, true, true, false, false, true];

/// A key of the simplified cipher.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ToyKey(pub [u8; BLOCK]);

impl ToyKey {
    /// Encrypt one block.
    #[inline(always)]
    pub fn encrypt(&self, b: [u8; BLOCK]) -> [u8; BLOCK] {
        let mut x = [0u8; BLOCK];
        for i in 0..BLOCK {
            x[i] = if XOR_EXP[i] {
                EXP[(b[i] ^ self.0[i]) as usize]
            } else {
                LOG[b[i].wrapping_add(self.0[i]) as usize]
            };
        }
        for p in 0..BLOCK / 2 {
            let (a1, a2) = (x[2 * p], x[2 * p + 1]);
            x[2 * p] = a1.wrapping_mul(2).wrapping_add(a2);
            x[2 * p + 1] = a1.wrapping_add(a2);
        }
        x
    }

    /// Decrypt one block.
    #[inline(always)]
    pub fn decrypt(&self, c: [u8; BLOCK]) -> [u8; BLOCK] {
        let mut x = c;
        for p in 0..BLOCK / 2 {
            let (y1, y2) = (x[2 * p], x[2 * p + 1]);
            let a1 = y1.wrapping_sub(y2);
            x[2 * p] = a1;
            x[2 * p + 1] = y2.wrapping_sub(a1);
        }
        for i in 0..BLOCK {
            x[i] = if XOR_EXP[i] {
                LOG[x[i] as usize] ^ self.0[i]
            } else {
                EXP[x[i] as usize].wrapping_sub(self.0[i])
            };
        }
        x
    }

    /// [`ToyKey::encrypt`] of a block loaded as a little-endian word, in registers: the integrated
    /// loop's form. The key goes in with whole-word operations (XOR on its bytes, a bytewise
    /// add without carries across bytes on the others), a byte is a shift of the word, and
    /// only the table lookups touch memory.
    #[inline(always)]
    pub fn encrypt_word(&self, v: u64) -> u64 {
        let k = u64::from_le_bytes(self.0);
        let x = ((v ^ k) & XOR_BYTES) | (bytewise_add(v, k) & !XOR_BYTES);
        let byte = |i: usize| (x >> (8 * i)) as u8;
        let mut out = 0u64;
        for p in 0..BLOCK / 2 {
            let [a1, a2] = [2 * p, 2 * p + 1].map(|i| {
                if XOR_EXP[i] {
                    EXP[byte(i) as usize]
                } else {
                    LOG[byte(i) as usize]
                }
            });
            let y1 = a1.wrapping_mul(2).wrapping_add(a2);
            let y2 = a1.wrapping_add(a2);
            out |= (u64::from(y1) << (16 * p)) | (u64::from(y2) << (16 * p + 8));
        }
        out
    }

    /// [`ToyKey::decrypt`] of a block loaded as a little-endian word, in registers.
    #[inline(always)]
    pub fn decrypt_word(&self, v: u64) -> u64 {
        let k = u64::from_le_bytes(self.0);
        let byte = |i: usize| (v >> (8 * i)) as u8;
        let mut t = 0u64;
        for p in 0..BLOCK / 2 {
            let (y1, y2) = (byte(2 * p), byte(2 * p + 1));
            let a1 = y1.wrapping_sub(y2);
            let a2 = y2.wrapping_sub(a1);
            let [x1, x2] = [(2 * p, a1), (2 * p + 1, a2)].map(|(i, x)| {
                if XOR_EXP[i] {
                    LOG[x as usize]
                } else {
                    EXP[x as usize]
                }
            });
            t |= (u64::from(x1) << (16 * p)) | (u64::from(x2) << (16 * p + 8));
        }
        ((t ^ k) & XOR_BYTES) | (bytewise_sub(t, k) & !XOR_BYTES)
    }
}

/// The bytes of a little-endian word that [`XOR_EXP`] marks.
const XOR_BYTES: u64 = {
    let mut m = 0u64;
    let mut i = 0;
    while i < BLOCK {
        if XOR_EXP[i] {
            m |= 0xff << (8 * i);
        }
        i += 1;
    }
    m
};

/// The high bit of every byte.
const HIGH: u64 = 0x8080_8080_8080_8080;

/// `a + b` byte by byte (each byte wrapping, no carry into the next).
#[inline(always)]
fn bytewise_add(a: u64, b: u64) -> u64 {
    ((a & !HIGH) + (b & !HIGH)) ^ ((a ^ b) & HIGH)
}

/// `a - b` byte by byte (each byte wrapping, no borrow from the next).
#[inline(always)]
fn bytewise_sub(a: u64, b: u64) -> u64 {
    ((a | HIGH) - (b & !HIGH)) ^ ((a ^ !b) & HIGH)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_tables_are_safers_and_inverse() {
        assert_eq!(EXP[0], 1);
        assert_eq!(EXP[1], 45);
        assert_eq!(EXP[128], 0, "45^128 = 256 mod 257, stored as 0");
        for x in 0..=255u8 {
            assert_eq!(LOG[EXP[x as usize] as usize], x);
        }
    }

    #[test]
    fn decrypt_inverts_encrypt_for_every_byte_value() {
        let k = ToyKey([3, 141, 59, 26, 53, 58, 97, 93]);
        for v in 0..=255u8 {
            let b = [v, v ^ 1, v.wrapping_add(7), 0, 255, v, 1, v.rotate_left(3)];
            let c = k.encrypt(b);
            assert_ne!(c, b);
            assert_eq!(k.decrypt(c), b);
        }
    }

    #[test]
    fn the_word_forms_are_the_block_forms() {
        let k = ToyKey([3, 141, 59, 26, 53, 58, 97, 93]);
        let mut v = 0x0123_4567_89ab_cdefu64;
        for _ in 0..100_000 {
            let b = v.to_le_bytes();
            assert_eq!(k.encrypt_word(v).to_le_bytes(), k.encrypt(b));
            assert_eq!(k.decrypt_word(v).to_le_bytes(), k.decrypt(b));
            // xorshift: every byte value in every position
            v ^= v << 13;
            v ^= v >> 7;
            v ^= v << 17;
        }
    }
}
