//! The integrated loop's kernels: copy (or copy-and-XOR) into the output while summing for the
//! Internet checksum, in one pass, the sum accumulated in wide lanes and folded once.
//!
//! Every function here computes the same integer: the sum of the data's little-endian 32-bit
//! words (a last partial word padded with zeros on the right) as a `u64` — the one's
//! complement sum before folding, exactly what summing the integrated loop's `unit_sum` over
//! 8-byte units gives, so results of the kernels and of the scalar units add up exactly (for
//! data under 16 GiB, 2^32 words, the most a `u64` of them holds; a packet's region is under
//! 4 GiB). Data that starts
//! at an even offset of the checksummed region sums correctly by itself (RFC 1071 §2: the sum
//! is independent of grouping and byte order up to the final swap).
//!
//! Two implementations, chosen at run time (no `target-cpu` or `target-feature` at build
//! time): AVX2 (x86-64 with `is_x86_feature_detected!("avx2")`) and a portable scalar one, 8
//! bytes a step, which every other machine runs and the tests hold the AVX2 path equal to
//! (every length to 300 and beyond, every output alignment, inputs across a page). The AVX2
//! loop takes 128 bytes a step into four accumulators; per 32 bytes it loads (two 16-byte
//! halves), XORs if asked, stores, and adds the vector into a wrapping sum of 64-bit lanes and
//! its high 32-bit words, shifted down, into a second one — one shift and two adds, exact
//! with no carry to catch (the AVX2 module's `Acc`). Its first bytes go one by one up to a 32-byte
//! boundary of the output (so that no store straddles cache lines), and it runs backwards
//! when the output sits just above an input modulo 4 KiB (4K aliasing; glibc's memmove does
//! the same).
//!
//! The output is written straight into a `Vec`'s spare capacity, so the integrated paths
//! neither zero the packet before filling it nor append it unit by unit. This is the lab's
//! one module of `unsafe` for the data path: raw loads and stores of the AVX2 kernels, writes
//! into spare capacity and the `set_len` after them; each block says why it is sound, and the
//! functions exported are safe.

use std::mem::MaybeUninit;

/// Bytes of a unit of [`append_units`].
pub const UNIT: usize = 8;

/// Which bytes the copy-and-XOR kernels sum: the ones they read (a receiver checks the
/// ciphertext it decrypts) or the ones they write (a sender sums the ciphertext it makes).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SumOf {
    /// The source bytes.
    Input,
    /// The bytes written.
    Output,
}

#[cfg(test)]
thread_local! {
    /// Tests of the whole data path set this to run it on the portable kernels.
    pub(crate) static PORTABLE: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// Bytes below which the copy kernels go straight to the portable loop: a packet's single
/// units (its header, its tail) would pay the AVX2 loop's set-up for a few words.
const SHORT: usize = 64;

/// Whether the AVX2 kernels run on this machine.
#[inline]
pub fn have_avx2() -> bool {
    #[cfg(test)]
    if PORTABLE.with(|p| p.get()) {
        return false;
    }
    #[cfg(target_arch = "x86_64")]
    {
        std::arch::is_x86_feature_detected!("avx2")
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        false
    }
}

/// The sum of `data`'s little-endian 32-bit words (the last one padded with zeros).
pub fn sum(data: &[u8]) -> u64 {
    #[cfg(target_arch = "x86_64")]
    if have_avx2() {
        // SAFETY: AVX2 is available (checked just above).
        return unsafe { avx2::sum(data) };
    }
    scalar::sum(data)
}

/// Append `src` to `out`; the sum of `src` (as [`sum`]).
pub fn append_copy_sum(out: &mut Vec<u8>, src: &[u8]) -> u64 {
    append_with(out, src.len(), |dst| {
        #[cfg(target_arch = "x86_64")]
        if src.len() >= SHORT && have_avx2() {
            // SAFETY: AVX2 is available (checked just above).
            return unsafe { avx2::xor_sum::<false, false>(src, &[], dst) };
        }
        scalar::xor_sum(src, None, false, dst)
    })
}

/// Append `src` XOR `ks` (as long as `src`) to `out`; the sum (as [`sum`]) of `src` or of the
/// bytes appended, as `of` says.
///
/// # Panics
/// If `ks` is shorter than `src`.
pub fn append_xor_sum(out: &mut Vec<u8>, src: &[u8], ks: &[u8], of: SumOf) -> u64 {
    let ks = &ks[..src.len()];
    append_with(out, src.len(), |dst| {
        #[cfg(target_arch = "x86_64")]
        if src.len() >= SHORT && have_avx2() {
            // SAFETY: AVX2 is available (checked just above); `ks` is as long as `src`.
            return unsafe {
                match of {
                    SumOf::Input => avx2::xor_sum::<true, false>(src, ks, dst),
                    SumOf::Output => avx2::xor_sum::<true, true>(src, ks, dst),
                }
            };
        }
        scalar::xor_sum(src, Some(ks), of == SumOf::Output, dst)
    })
}

/// Append `f` of each 8-byte unit of `src` (little-endian `u64`s) to `out`: a unit is loaded,
/// transformed in registers and stored once, straight into the output.
///
/// # Panics
/// If `src` is not whole units.
#[inline(always)]
pub fn append_units(out: &mut Vec<u8>, src: &[u8], mut f: impl FnMut(u64) -> u64) {
    assert!(src.len().is_multiple_of(UNIT), "whole units");
    append_with(out, src.len(), |dst| {
        for (d, s) in dst.chunks_exact_mut(UNIT).zip(src.chunks_exact(UNIT)) {
            let mut u = [0u8; UNIT];
            u.copy_from_slice(s);
            let v = f(u64::from_le_bytes(u)).to_le_bytes();
            // One 8-byte store (byte by byte, the writes are eight).
            let d: &mut [MaybeUninit<u8>; UNIT] = d.try_into().expect("a unit");
            *d = v.map(MaybeUninit::new);
        }
        0
    });
}

/// Reserve `n` bytes after `out`'s contents, let `fill` write all of them (it must: it is one
/// of this module's kernels), then take them into `out`; what `fill` returns.
#[inline(always)]
fn append_with(
    out: &mut Vec<u8>,
    n: usize,
    fill: impl FnOnce(&mut [MaybeUninit<u8>]) -> u64,
) -> u64 {
    out.reserve(n);
    let len = out.len();
    let s = fill(&mut out.spare_capacity_mut()[..n]);
    // SAFETY: `reserve` made room for `n` more bytes, and `fill` — one of this module's
    // closures, never a caller's (a caller's `f` in `append_units` only maps values) —
    // initialised all of `spare_capacity_mut()[..n]` (each writes every byte of the `dst` it
    // is given; the tests compare every byte). Had it panicked, the length would be unchanged.
    unsafe { out.set_len(len + n) };
    s
}

/// The portable kernels: 8 bytes a step, a 64-bit accumulator.
pub mod scalar {
    use std::mem::MaybeUninit;

    /// The sum of `data`'s little-endian 32-bit words (the last one padded with zeros).
    pub fn sum(data: &[u8]) -> u64 {
        let words = data.chunks_exact(4);
        let tail = words.remainder();
        let mut s: u64 = words
            .map(|w| u64::from(u32::from_le_bytes([w[0], w[1], w[2], w[3]])))
            .sum();
        if !tail.is_empty() {
            let mut w = [0u8; 4];
            w[..tail.len()].copy_from_slice(tail);
            s += u64::from(u32::from_le_bytes(w));
        }
        s
    }

    /// Write `src` (XOR `ks`, if given) to all of `dst` (as long as `src`); the sum of the
    /// bytes written if `sum_out`, else of `src`.
    pub fn xor_sum(
        src: &[u8],
        ks: Option<&[u8]>,
        sum_out: bool,
        dst: &mut [MaybeUninit<u8>],
    ) -> u64 {
        assert_eq!(src.len(), dst.len());
        let mut s = 0u64;
        let whole = src.len() / 8 * 8;
        let units = src[..whole]
            .chunks_exact(8)
            .zip(dst[..whole].chunks_exact_mut(8));
        for (i, (x, d)) in units.enumerate() {
            let x = u64::from_le_bytes(x.try_into().expect("8 bytes"));
            let y = match ks {
                Some(ks) => x ^ u64::from_le_bytes(ks[8 * i..8 * i + 8].try_into().expect("8")),
                None => x,
            };
            let v = if sum_out { y } else { x };
            s += (v & 0xffff_ffff) + (v >> 32);
            let d: &mut [MaybeUninit<u8>; 8] = d.try_into().expect("8 bytes");
            *d = y.to_le_bytes().map(MaybeUninit::new);
        }
        let k = src.len() - whole;
        if k > 0 {
            let mut x = [0u8; 8];
            x[..k].copy_from_slice(&src[whole..]);
            let mut y = x;
            if let Some(ks) = ks {
                for (y, k) in y.iter_mut().zip(&ks[whole..]) {
                    *y ^= k;
                }
            }
            // Bytes past `k` are zero in both (the key stream is not read there).
            let v = u64::from_le_bytes(if sum_out { y } else { x });
            s += (v & 0xffff_ffff) + (v >> 32);
            for (d, y) in dst[whole..].iter_mut().zip(y) {
                d.write(y);
            }
        }
        s
    }
}

/// The AVX2 kernels.
#[cfg(target_arch = "x86_64")]
mod avx2 {
    use std::arch::x86_64::*;
    use std::mem::MaybeUninit;

    /// Wide accumulators of a sum of 32-bit words: per 64-bit lane, the lanes' plain sum
    /// (wrapping) and the sum of their high words. A lane's low words sum to the plain sum
    /// minus the high words' sum shifted up 32 bits (exactly, while fewer than 2^32 vectors are
    /// added: the low words' sum stays below 2^64), so one shift and two adds per 32 bytes
    /// keep an exact sum, with no carry to catch.
    #[derive(Clone, Copy)]
    struct Acc {
        all: __m256i,
        hi: __m256i,
    }

    impl Acc {
        #[inline]
        #[target_feature(enable = "avx2")]
        fn new() -> Acc {
            Acc {
                all: _mm256_setzero_si256(),
                hi: _mm256_setzero_si256(),
            }
        }

        /// Add the two 32-bit words of each 64-bit lane of `x`.
        #[inline]
        #[target_feature(enable = "avx2")]
        fn add(&mut self, x: __m256i) {
            self.all = _mm256_add_epi64(self.all, x);
            self.hi = _mm256_add_epi64(self.hi, _mm256_srli_epi64::<32>(x));
        }

        /// The sum of every word added (lane sums: low words' plus high words').
        #[inline]
        #[target_feature(enable = "avx2")]
        fn total(self, other: Acc) -> u64 {
            let mut all = [0u64; 4];
            let mut hi = [0u64; 4];
            // SAFETY: each array is 32 bytes, written unaligned.
            unsafe {
                _mm256_storeu_si256(
                    all.as_mut_ptr().cast(),
                    _mm256_add_epi64(self.all, other.all),
                );
                _mm256_storeu_si256(hi.as_mut_ptr().cast(), _mm256_add_epi64(self.hi, other.hi));
            }
            all.iter()
                .zip(hi)
                .map(|(&a, h)| a.wrapping_sub(h << 32).wrapping_add(h))
                .fold(0u64, u64::wrapping_add)
        }
    }

    /// The sum of `data`'s little-endian 32-bit words (the last one padded with zeros).
    #[target_feature(enable = "avx2")]
    pub fn sum(data: &[u8]) -> u64 {
        let mut acc = [Acc::new(); 4];
        let mut i = 0;
        let p = data.as_ptr();
        while i + 128 <= data.len() {
            for (j, acc) in acc.iter_mut().enumerate() {
                // SAFETY: bytes `i..i + 128` are in `data`; the loads are unaligned.
                acc.add(unsafe { _mm256_loadu_si256(p.add(i + 32 * j).cast()) });
            }
            i += 128;
        }
        total(acc) + super::scalar::sum(&data[i..])
    }

    /// The sum of every word the four accumulators were given.
    #[inline]
    #[target_feature(enable = "avx2")]
    fn total(acc: [Acc; 4]) -> u64 {
        let [a, b, c, d] = acc;
        a.total(b).wrapping_add(c.total(d))
    }

    /// Write `src` (XOR `ks` if `XOR`) to all of `dst` (as long as `src`); the sum of the
    /// bytes written if `SUM_OUT`, else of `src`. `ks` is as long as `src` if `XOR`.
    #[target_feature(enable = "avx2")]
    pub fn xor_sum<const XOR: bool, const SUM_OUT: bool>(
        src: &[u8],
        ks: &[u8],
        dst: &mut [MaybeUninit<u8>],
    ) -> u64 {
        assert_eq!(src.len(), dst.len());
        assert!(!XOR || ks.len() == src.len());
        let n = src.len();
        let (s, k, d) = (src.as_ptr(), ks.as_ptr(), dst.as_mut_ptr().cast::<u8>());
        // Stores that straddle cache lines cost two: the first bytes go one by one up to a
        // 32-byte boundary of the destination (memcpy does the same), when that keeps the
        // 32-bit words where they were (a whole number of them; a `Vec`'s buffer is at
        // least 8-aligned and the integrated loops write at multiples of 4).
        let head = (32 - d as usize % 32) % 32;
        let start = if head.is_multiple_of(4) {
            head.min(n)
        } else {
            0
        };
        let head_ks = if XOR { Some(&ks[..start]) } else { None };
        let head_sum = super::scalar::xor_sum(&src[..start], head_ks, SUM_OUT, &mut dst[..start]);
        let whole = (n - start) / 32 * 32;
        // SAFETY: bytes `start..start + whole` are in `src`, in `dst` (as long) and, if `XOR`,
        // in `ks` (as long); `dst` (a `Vec`'s spare capacity, or a buffer of the tests)
        // overlaps neither input.
        let body =
            unsafe { vectors::<XOR, SUM_OUT>(s.add(start), k.add(start), d.add(start), whole) };
        let i = start + whole;
        let tail_ks = if XOR { Some(&ks[i..]) } else { None };
        head_sum + body + super::scalar::xor_sum(&src[i..], tail_ks, SUM_OUT, &mut dst[i..])
    }

    /// 32 bytes from `p` as two 16-byte loads: the destination is aligned, so the sources
    /// mostly are not, and a 16-byte load crosses a cache line half as often as a 32-byte one
    /// (measured on Zen 3: faster even when aligned).
    ///
    /// # Safety
    /// 32 bytes must be readable from `p`.
    #[inline]
    #[target_feature(enable = "avx2")]
    unsafe fn load(p: *const u8) -> __m256i {
        // SAFETY: the caller's contract.
        unsafe { _mm256_loadu2_m128i(p.add(16).cast(), p.cast()) }
    }

    /// How far apart (modulo 4 KiB) an input and the output must be for the loop's loads to
    /// miss the stores in flight: about the store queue's reach.
    const NEAR: usize = 1536;

    /// [`xor_sum`]'s loop over `len` bytes (a multiple of 32) from raw pointers: 128 bytes a
    /// step into four independent accumulators, then 32 at a time. Raw pointers and never
    /// inlined on purpose: given the slices' guarantee that the output overlaps no input, the
    /// compiler turns each load and store of the copy into a `memcpy` of the vector and loads
    /// the source a second time for the sum.
    ///
    /// # Safety
    /// `len` bytes must be readable from `s` and, if `XOR`, from `k`, and writable at `d`.
    #[inline(never)]
    #[target_feature(enable = "avx2")]
    unsafe fn vectors<const XOR: bool, const SUM_OUT: bool>(
        s: *const u8,
        k: *const u8,
        d: *mut u8,
        len: usize,
    ) -> u64 {
        let mut acc = [Acc::new(); 4];
        // 32 bytes at `i` into `acc[j]`.
        let mut vector = |i: usize, j: usize| {
            // SAFETY: `i + 32 <= len` at every call below; see the function's contract.
            unsafe {
                let x = load(s.add(i));
                let c = if XOR {
                    _mm256_xor_si256(x, load(k.add(i)))
                } else {
                    x
                };
                _mm256_storeu_si256(d.add(i).cast(), c);
                acc[j].add(if SUM_OUT { c } else { x });
            }
        };
        let lines = len / 128 * 128;
        // A load whose address matches, in its low 12 bits, a store still in flight waits for
        // it (4K aliasing): when the destination lies a little above an input modulo 4 KiB,
        // the loads of a forward loop meet the stores just issued, and when it lies a little
        // below, those of a backward loop do. The loop runs backwards (as glibc's memmove
        // does) when that meets fewer; the sum does not care about the order.
        let apart = |x: *const u8| (d as usize).wrapping_sub(x as usize) % 4096;
        let near = 1..NEAR;
        let far = 4096 - NEAR + 1..4096;
        let inputs = if XOR { &[s, k][..] } else { &[s][..] };
        let forward_meets = inputs.iter().filter(|&&x| near.contains(&apart(x))).count();
        let backward_meets = inputs.iter().filter(|&&x| far.contains(&apart(x))).count();
        if backward_meets < forward_meets {
            let mut i = lines;
            while i > 0 {
                i -= 128;
                for j in 0..4 {
                    vector(i + 32 * j, j);
                }
            }
        } else {
            let mut i = 0;
            while i < lines {
                for j in 0..4 {
                    vector(i + 32 * j, j);
                }
                i += 128;
            }
        }
        let mut i = lines;
        while i + 32 <= len {
            vector(i, 0);
            i += 32;
        }
        total(acc)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use phyllo::inet::{fold16, ones_sum_le};

    fn bytes(n: usize, seed: u8) -> Vec<u8> {
        (0..n)
            .map(|i| (i as u8).wrapping_mul(167).wrapping_add(seed) ^ (i >> 8) as u8)
            .collect()
    }

    fn sizes() -> impl Iterator<Item = usize> {
        (0..=300).chain([
            511, 512, 1023, 1024, 4095, 4096, 16_384, 65_535, 65_536, 100_003,
        ])
    }

    #[test]
    fn the_kernels_agree_with_each_other_and_with_rfc1071() {
        for n in sizes() {
            for seed in [0, 0xff, 0x5a] {
                let src = if seed == 0xff {
                    vec![0xff; n]
                } else {
                    bytes(n, seed)
                };
                let ks = bytes(n, seed ^ 0x33);
                let want = scalar::sum(&src);
                assert_eq!(sum(&src), want, "{n}");
                assert_eq!(fold16(want), fold16(ones_sum_le(&src)), "{n}");
                let mut out = vec![1, 2];
                assert_eq!(append_copy_sum(&mut out, &src), want, "{n}");
                assert_eq!(&out[2..], &src[..]);
                let x: Vec<u8> = src.iter().zip(&ks).map(|(a, b)| a ^ b).collect();
                for of in [SumOf::Input, SumOf::Output] {
                    out.truncate(1);
                    let s = append_xor_sum(&mut out, &src, &ks, of);
                    assert_eq!(&out[1..], &x[..], "{n} {of:?}");
                    let w = if of == SumOf::Input {
                        want
                    } else {
                        scalar::sum(&x)
                    };
                    assert_eq!(s, w, "{n} {of:?}");
                }
                // The portable kernels on their own (the AVX2 ones ran above, where present).
                let mut dst = vec![MaybeUninit::new(0u8); n];
                assert_eq!(scalar::xor_sum(&src, None, true, &mut dst), want);
                assert_eq!(scalar::xor_sum(&src, Some(&ks), false, &mut dst), want);
                assert_eq!(
                    scalar::xor_sum(&src, Some(&ks), true, &mut dst),
                    scalar::sum(&x)
                );
                // SAFETY: every element was initialised by `vec!`.
                let d: Vec<u8> = dst.iter().map(|b| unsafe { b.assume_init() }).collect();
                assert_eq!(d, x);
            }
        }
        if have_avx2() {
            eprintln!("AVX2 kernels tested against the portable ones");
        }
    }

    /// The AVX2 kernel's head (bytes up to a 32-byte boundary of the destination) and its loop
    /// direction (backwards when the destination sits just above the source modulo 4 KiB)
    /// depend on addresses: every destination offset and source offsets across a page.
    #[test]
    fn the_kernels_agree_wherever_the_bytes_lie() {
        let big = bytes(4096 + 3000, 77);
        let ks = bytes(3000, 1);
        for at in 0..40 {
            for o in (0..4096).step_by(97) {
                for n in [0, 3, 64, 200, 2999] {
                    let src = &big[o..o + n];
                    let mut out = vec![0xaa; at];
                    let s = append_xor_sum(&mut out, src, &ks, SumOf::Output);
                    let x: Vec<u8> = src.iter().zip(&ks).map(|(a, b)| a ^ b).collect();
                    assert_eq!((s, &out[at..]), (scalar::sum(&x), &x[..]), "{at} {o} {n}");
                    out.truncate(at);
                    assert_eq!(append_copy_sum(&mut out, src), scalar::sum(src));
                    assert_eq!(&out[at..], src);
                }
            }
        }
    }

    #[test]
    fn append_units_maps_every_unit_into_place() {
        let src = bytes(800, 9);
        let mut out = vec![7];
        append_units(&mut out, &src, |u| u.rotate_left(8) ^ 0x0102_0304_0506_0708);
        assert_eq!(out.len(), 801);
        for (o, s) in out[1..].chunks(8).zip(src.chunks(8)) {
            let u = u64::from_le_bytes(s.try_into().unwrap());
            assert_eq!(o, (u.rotate_left(8) ^ 0x0102_0304_0506_0708).to_le_bytes());
        }
    }
}
