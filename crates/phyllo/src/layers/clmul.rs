//! GHASH's multiplications with the CPU's carry-less multiply (x86-64 `pclmulqdq`): the
//! products of a run of blocks with powers of the key are summed, then reduced once
//! (aggregated reduction: Gueron and Kounavis, "Intel Carry-Less Multiplication Instruction
//! and its Usage for Computing the GCM Mode").
//!
//! Why it is written here: the `polyval` crate reduces after every block and goes through
//! `universal-hash`'s block API. Callgrind put its GHASH of a sealed 8-byte message (three
//! blocks after the cached first one) at ~510 instructions, two thirds of `seal`'s part of the
//! critical path. Here the same blocks cost one product each and one reduction.
//!
//! Elements are POLYVAL's (RFC 8452): a block is a little-endian `u128`, and the product is
//! `dot(a, b) = a · b · x^-128` modulo `x^128 + x^127 + x^126 + x^121 + 1`, which the
//! instruction computes with no bit reflection ([`super::gcm`] maps GHASH onto it).
//!
//! This is the crate's one `unsafe` module: the call into code compiled for the instruction
//! is `unsafe`, and it is made only through a [`Clmul`], which exists only once the CPU was
//! found to have the instruction (and SSSE3's byte shuffle, which reverses a short message's
//! blocks in registers). Elsewhere (an older CPU, another architecture) [`Clmul::detect`]
//! gives `None` and [`super::gcm`] hashes block by block with `polyval`'s own dispatch.
#![allow(unsafe_code)]

/// Blocks [`Clmul::absorb`] takes at once: the powers of the key kept.
pub(crate) const RUN: usize = 8;

/// Proof that this CPU has the carry-less multiply.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Clmul(());

impl Clmul {
    /// The token, if the CPU has the instruction (and the byte shuffle that reverses a
    /// block, SSSE3, which every CPU with it has).
    pub(crate) fn detect() -> Option<Clmul> {
        #[cfg(target_arch = "x86_64")]
        if std::arch::is_x86_feature_detected!("pclmulqdq")
            && std::arch::is_x86_feature_detected!("ssse3")
        {
            return Some(Clmul(()));
        }
        None
    }

    /// `dot(a, b)`.
    pub(crate) fn dot(self, a: u128, b: u128) -> u128 {
        self.absorb(0, &[a], &[b])
    }

    /// The state after absorbing `blocks` into `state` by GHASH's rule `s = dot(s ^ x, k)`,
    /// given `powers[j]` = the key to the power `j + 1` (each a `dot` of the one before with
    /// the key): the sum of `dot(block_i, powers[n - 1 - i])`, the first block XOR `state`,
    /// reduced once (`state` itself when there are none). At most [`RUN`] blocks and no more
    /// than `powers` holds.
    #[inline]
    pub(crate) fn absorb(self, state: u128, blocks: &[u128], powers: &[u128]) -> u128 {
        assert!(blocks.len() <= powers.len().min(RUN));
        if blocks.is_empty() {
            return state;
        }
        #[cfg(target_arch = "x86_64")]
        // SAFETY: a `Clmul` is made only by `detect`, after the CPU was found to have
        // `pclmulqdq`, the one feature `x86::absorb` is compiled for beyond the x86-64 baseline
        // (SSE2).
        return unsafe { x86::absorb(state, blocks, powers) };
        #[cfg(not(target_arch = "x86_64"))]
        unreachable!("`detect` makes no Clmul off x86-64")
    }

    /// [`absorb`](Self::absorb) of exactly `N` blocks from state zero, unrolled (no loop, no
    /// slice lengths): a short message's GHASH, whose leading blocks may be zero (they add
    /// nothing to the sum). The blocks and the result are in GHASH's byte order, reversed
    /// from POLYVAL's in the vector registers (one shuffle each). At most [`RUN`] blocks and
    /// no more than `powers` holds.
    #[inline]
    pub(crate) fn absorb_exact<const N: usize>(self, blocks: &[u128; N], powers: &[u128]) -> u128 {
        let powers: &[u128; N] = powers[..N]
            .try_into()
            .expect("a power of the key per block");
        assert!(N <= RUN);
        #[cfg(target_arch = "x86_64")]
        // SAFETY: a `Clmul` is made only by `detect`, after the CPU was found to have
        // `pclmulqdq` and `ssse3`, the features `x86::absorb_exact` is compiled for.
        return unsafe { x86::absorb_exact(blocks, powers) };
        #[cfg(not(target_arch = "x86_64"))]
        unreachable!("`detect` makes no Clmul off x86-64")
    }
}

#[cfg(target_arch = "x86_64")]
mod x86 {
    use std::arch::x86_64::*;

    /// `x` as a vector, straight from memory (no trip through general registers).
    #[inline(always)]
    fn load(x: &u128) -> __m128i {
        // SAFETY: `x` is a valid, readable 16-byte location; the unaligned load has no
        // alignment requirement, and SSE2 is in the x86-64 baseline.
        unsafe { _mm_loadu_si128((x as *const u128).cast::<__m128i>()) }
    }

    /// See [`super::Clmul::absorb`]: four 64-bit products per block, summed into the low,
    /// middle and high parts of a 256-bit sum, then one Montgomery reduction by `x^128`
    /// (two products by the polynomial's constant).
    #[target_feature(enable = "pclmulqdq")]
    pub(super) fn absorb(state: u128, blocks: &[u128], powers: &[u128]) -> u128 {
        let n = blocks.len();
        let mut sum = [_mm_setzero_si128(); 3];
        // The first block takes `state`; block `i` is multiplied by `powers[n - 1 - i]`.
        let mut first = _mm_set_epi64x((state >> 64) as i64, state as i64);
        for (b, k) in blocks.iter().zip(powers[..n].iter().rev()) {
            let a = _mm_xor_si128(load(b), first);
            first = _mm_setzero_si128();
            multiply_into(&mut sum, a, load(k));
        }
        store(reduce(sum))
    }

    /// See [`super::Clmul::absorb_exact`].
    #[target_feature(enable = "pclmulqdq,ssse3")]
    pub(super) fn absorb_exact<const N: usize>(blocks: &[u128; N], powers: &[u128; N]) -> u128 {
        let reverse = _mm_set_epi8(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
        let mut sum = [_mm_setzero_si128(); 3];
        for i in 0..N {
            let a = _mm_shuffle_epi8(load(&blocks[i]), reverse);
            multiply_into(&mut sum, a, load(&powers[N - 1 - i]));
        }
        store(_mm_shuffle_epi8(reduce(sum), reverse))
    }

    /// Add the 256-bit product `a · k` into `sum` (its low, middle and high parts): four
    /// 64-bit products.
    #[target_feature(enable = "pclmulqdq")]
    #[inline]
    fn multiply_into(sum: &mut [__m128i; 3], a: __m128i, k: __m128i) {
        let [lo, mid, hi] = sum;
        *lo = _mm_xor_si128(*lo, _mm_clmulepi64_si128::<0x00>(a, k));
        *hi = _mm_xor_si128(*hi, _mm_clmulepi64_si128::<0x11>(a, k));
        *mid = _mm_xor_si128(*mid, _mm_clmulepi64_si128::<0x01>(a, k));
        *mid = _mm_xor_si128(*mid, _mm_clmulepi64_si128::<0x10>(a, k));
    }

    /// The sum of products (low, middle, high) reduced to an element: one Montgomery
    /// reduction by `x^128` (two products by the polynomial's constant).
    #[target_feature(enable = "pclmulqdq")]
    #[inline]
    fn reduce([lo, mid, hi]: [__m128i; 3]) -> __m128i {
        // The 256-bit sum as two halves.
        let lo = _mm_xor_si128(lo, _mm_slli_si128::<8>(mid));
        let hi = _mm_xor_si128(hi, _mm_srli_si128::<8>(mid));
        // Reduction (RFC 8452's polynomial, as 0xc2000000000000000000000000000001): twice,
        // fold the low 64 bits up by the constant's high word.
        let poly = _mm_set_epi64x(0xc200_0000_0000_0000_u64 as i64, 1);
        let t = _mm_clmulepi64_si128::<0x10>(lo, poly);
        let lo = _mm_xor_si128(_mm_shuffle_epi32::<0x4e>(lo), t);
        let t = _mm_clmulepi64_si128::<0x10>(lo, poly);
        let lo = _mm_xor_si128(_mm_shuffle_epi32::<0x4e>(lo), t);
        _mm_xor_si128(lo, hi)
    }

    /// A vector as a little-endian `u128`.
    #[target_feature(enable = "sse2")]
    #[inline]
    fn store(v: __m128i) -> u128 {
        let lo = _mm_cvtsi128_si64(v) as u64;
        let hi = _mm_cvtsi128_si64(_mm_unpackhi_epi64(v, v)) as u64;
        u128::from(lo) | u128::from(hi) << 64
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use polyval::universal_hash::UniversalHash;
    use polyval::Polyval;
    use proptest::prelude::*;

    /// POLYVAL by the crate, block by block from `state`.
    fn horner(key: u128, state: u128, blocks: &[u128]) -> u128 {
        let mut p = Polyval::new_with_init_block(&key.to_le_bytes().into(), state.swap_bytes());
        for b in blocks {
            p.update(&[b.to_le_bytes().into()]);
        }
        u128::from_le_bytes(p.finalize().into())
    }

    proptest! {
        /// The aggregated sum is POLYVAL's Horner rule, for every run length.
        #[test]
        fn absorb_is_polyval(
            key in any::<u128>(),
            state in any::<u128>(),
            blocks in proptest::collection::vec(any::<u128>(), 0..=RUN),
        ) {
            let Some(c) = Clmul::detect() else {
                eprintln!("SKIPPED: this CPU has no carry-less multiply");
                return Ok(());
            };
            let mut powers = [key; RUN];
            for j in 1..RUN {
                powers[j] = c.dot(powers[j - 1], key);
            }
            prop_assert_eq!(c.dot(state, key), horner(key, 0, &[state]));
            let got = c.absorb(state, &blocks, &powers);
            prop_assert_eq!(got, horner(key, state, &blocks));
            // From state zero, unrolled, leading zero blocks included.
            // (It takes and gives GHASH's byte order, POLYVAL's reversed.)
            let ghash_order: Vec<u128> = blocks.iter().map(|b| b.swap_bytes()).collect();
            let mut three = [0u128; 3];
            let k = blocks.len().min(3);
            three[3 - k..].copy_from_slice(&ghash_order[..k]);
            let got = c.absorb_exact(&three, &powers).swap_bytes();
            prop_assert_eq!(got, horner(key, 0, &blocks[..k]));
            let mut five = [0u128; 5];
            let k = blocks.len().min(5);
            five[5 - k..].copy_from_slice(&ghash_order[..k]);
            let got = c.absorb_exact(&five, &powers).swap_bytes();
            prop_assert_eq!(got, horner(key, 0, &blocks[..k]));
        }
    }
}
