//! AES-256-GCM split at the nonce: what depends only on the nonce is computed ahead, in the
//! post-processing of the previous message, and only what depends on the message stays on the
//! critical path. (Seed 004 is van Renesse, "Masking the Overhead of Protocol Layering".)
//!
//! This is seed 004's header prediction (§3.2) applied to the cipher. `seal`'s nonce is a counter,
//! so the next message's nonce is known as soon as the last one is sent (or, for a receiver,
//! accepted). In GCM (NIST SP 800-38D) the ciphertext is the plaintext XOR AES(K, counter blocks)
//! and the tag is GHASH(AD, ciphertext) XOR AES(K, J0): the counter blocks and J0 are functions of
//! the nonce alone. [`Gcm::ahead`] encrypts them in advance ([`Ahead`]); [`Gcm::seal`] and
//! [`Gcm::open`] then cost an XOR and a GHASH for a short message, and fall back to computing the
//! blocks themselves when the nonce is not the predicted one or the message is longer than the
//! keystream kept ahead.
//!
//! Why not `ring` (which `seal` uses for ChaCha20-Poly1305 and long bodies): its one-shot AEAD
//! cannot be split at the nonce. The block cipher is RustCrypto's `aes` (AES-NI chosen at run
//! time). GHASH is `layers/clmul.rs`'s: the carry-less multiply with the key's powers computed
//! at key setup, a message's blocks summed and reduced once (a short message's unrolled, inline
//! in [`Gcm::seal`] and [`Gcm::open`]); `polyval`'s own code on a CPU without the instruction.
//! A sealing layer may give short associated data as its two blocks ([`ShortAd`], built from
//! a header's words) instead of bytes. Only the GCM composition is written here, and the tests
//! hold it byte for byte to `ring`'s AES-256-GCM and to the GCM specification's test vectors,
//! both ways of hashing.
//!
//! Public so that the report's `aead` experiment can set it beside the whole-message AEADs
//! (`seal` is its user). The nonce is `seal`'s: four zero bytes, then the 64-bit counter
//! little-endian.
//!
//! Nonce reuse: a precomputed keystream belongs to one counter value and is used only for a
//! message under that value; `seal` never sends two messages under one counter.

use super::clmul::{Clmul, RUN};
use aes::cipher::{generic_array::GenericArray, BlockEncrypt, KeyInit};
use aes::Aes256;
use polyval::universal_hash::UniversalHash;
use polyval::Polyval;
use subtle::ConstantTimeEq;

/// Keystream blocks computed ahead: 32 bytes cover a short message.
pub(crate) const AHEAD_BLOCKS: usize = 2;

/// Bytes of keystream computed ahead.
pub(crate) const AHEAD_BYTES: usize = 16 * AHEAD_BLOCKS;

/// Bytes of the tag.
pub(crate) const TAG_LEN: usize = 16;

/// Largest message GCM allows under one nonce: 2^32 - 2 blocks.
const MAX_LEN: u64 = ((1u64 << 32) - 2) * 16;

type Block = GenericArray<u8, aes::cipher::consts::U16>;

/// An AES-256-GCM key, expanded (round keys and the GHASH key).
pub struct Gcm {
    aes: Aes256,
    hash: HashKey,
}

/// GHASH's key, used as POLYVAL's (RFC 8452, Appendix A): the key is mulX(reverse(H)), and
/// blocks go in and the result comes out byte-reversed. POLYVAL's order is the one the
/// carry-less multiply computes in without reflecting bits.
enum HashKey {
    /// The key's first [`RUN`] powers, for the carry-less multiply ([`super::clmul`]): a
    /// message's blocks are summed and reduced once.
    Clmul(Clmul, [u128; RUN]),
    /// The key, for `polyval`'s own code (a CPU without the instruction), block by block.
    Polyval(Block),
}

impl HashKey {
    /// The key, with its powers where `clmul` says the CPU has the instruction.
    fn new(key: Block, clmul: Option<Clmul>) -> HashKey {
        match clmul {
            Some(c) => {
                let k = u128::from_le_bytes(key.into());
                let mut powers = [k; RUN];
                for j in 1..RUN {
                    powers[j] = c.dot(powers[j - 1], k);
                }
                HashKey::Clmul(c, powers)
            }
            None => HashKey::Polyval(key),
        }
    }

    /// `state` after POLYVAL absorbed `blocks` (at most [`RUN`]).
    #[inline(always)]
    fn absorb(&self, state: u128, blocks: &[u128]) -> u128 {
        match self {
            HashKey::Clmul(c, powers) => c.absorb(state, blocks, powers),
            HashKey::Polyval(key) => {
                // `polyval` reads the initial state as a big-endian integer.
                let mut p = Polyval::new_with_init_block(key, state.swap_bytes());
                for b in blocks {
                    p.update(&[b.to_le_bytes().into()]);
                }
                u128::from_le_bytes(p.finalize().into())
            }
        }
    }
}

/// `data ^= key`, eight bytes at a time (as long as each other).
#[inline(always)]
fn xor(data: &mut [u8], key: &[u8]) {
    let mut d = data.chunks_exact_mut(8);
    let mut k = key.chunks_exact(8);
    for (d, k) in (&mut d).zip(&mut k) {
        let word = |b: &[u8]| b.first_chunk::<8>().map_or(0, |c| u64::from_ne_bytes(*c));
        d.copy_from_slice(&(word(d) ^ word(k)).to_ne_bytes());
    }
    for (d, k) in d.into_remainder().iter_mut().zip(k.remainder()) {
        *d ^= k;
    }
}

/// GHASH's blocks, gathered in runs of [`RUN`] for [`HashKey::absorb`].
struct Run {
    blocks: [u128; RUN],
    filled: usize,
    /// The state after the runs absorbed so far.
    state: u128,
}

impl Run {
    /// Add the block whose bytes are `block` little-endian (GHASH's byte order).
    #[inline(always)]
    fn push(&mut self, key: &HashKey, block: u128) {
        // POLYVAL takes the bytes reversed.
        self.blocks[self.filled] = block.swap_bytes();
        self.filled += 1;
        if self.filled == RUN {
            self.state = key.absorb(self.state, &self.blocks);
            self.filled = 0;
        }
    }
}

/// Associated data of at most 32 bytes as its two GHASH blocks: bytes `0..16` and `16..32`
/// as little-endian integers, zero past its length. A sealing layer builds it straight from
/// a header's words ([`crate::field::Cover::image_blocks`]) instead of writing the header's
/// image out for the hash to read back.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ShortAd {
    len: usize,
    blocks: [u128; 2],
}

impl ShortAd {
    /// `len` bytes (at most 32) held in `blocks`, whose bits past `len` bytes are zero;
    /// `None` for a longer length or a stray bit.
    #[inline(always)]
    pub fn new(len: usize, blocks: [u128; 2]) -> Option<ShortAd> {
        let past = |k: usize| {
            let keep = len.saturating_sub(16 * k).min(16);
            if keep == 16 {
                0
            } else {
                blocks[k] >> (8 * keep)
            }
        };
        (len <= 32 && past(0) == 0 && past(1) == 0).then_some(ShortAd { len, blocks })
    }

    /// A header's image of `len` bytes (at most 32) as
    /// [`Cover::image_blocks`](crate::field::Cover::image_blocks) gives it, zero past `len`:
    /// not checked again.
    #[inline(always)]
    pub(crate) fn of_image(len: usize, blocks: [u128; 2]) -> ShortAd {
        debug_assert!(ShortAd::new(len, blocks).is_some());
        ShortAd { len, blocks }
    }

    /// `ad` (at most 32 bytes) as blocks; `None` if it is longer.
    #[inline(always)]
    pub fn from_bytes(ad: &[u8]) -> Option<ShortAd> {
        (ad.len() <= 32).then(|| ShortAd {
            len: ad.len(),
            blocks: [padded_block(ad), ad.get(16..).map_or(0, padded_block)],
        })
    }

    /// The bytes (the first [`len`](Self::len) of the 32 returned).
    pub fn to_bytes(&self) -> [u8; 32] {
        let mut b = [0u8; 32];
        b[..16].copy_from_slice(&self.blocks[0].to_le_bytes());
        b[16..].copy_from_slice(&self.blocks[1].to_le_bytes());
        b
    }

    /// Its length in bytes.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether it has no bytes.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
}

/// The GHASH blocks of `ad` and `ct` (at most 32 bytes each, in at most `N - 1` blocks),
/// then the lengths block, ending the `N` blocks (in GHASH's byte order, as
/// [`Clmul::absorb_exact`] takes them); any leading ones left zero.
#[inline(always)]
fn short_blocks<const N: usize>(ad: &ShortAd, ct: &[u8]) -> [u128; N] {
    let mut b = [0u128; N];
    let mut i = N;
    let mut put = |x: u128| {
        i -= 1;
        b[i] = x;
    };
    put(lengths_block(ad.len, ct.len()));
    if ct.len() > 16 {
        put(padded_block(&ct[16..]));
    }
    if !ct.is_empty() {
        put(padded_block(ct));
    }
    if ad.len > 16 {
        put(ad.blocks[1]);
    }
    if ad.len > 0 {
        put(ad.blocks[0]);
    }
    b
}

/// GHASH's lengths block of `ad` and `ct` bytes: both bit lengths big-endian, as bytes (a
/// little-endian integer).
#[inline(always)]
fn lengths_block(ad: usize, ct: usize) -> u128 {
    let bits = |n: usize| u128::from(u64::from_le_bytes((n as u64 * 8).to_be_bytes()));
    bits(ad) | bits(ct) << 64
}

/// The first `min(16, len)` bytes of `d` as a little-endian integer, zero-padded: two loads
/// for eight bytes and more (no copy into a zeroed block).
#[inline(always)]
fn padded_block(d: &[u8]) -> u128 {
    let n = d.len().min(16);
    let word = |b: &[u8]| b.first_chunk::<8>().map_or(0, |c| u64::from_le_bytes(*c));
    if n >= 8 {
        let hi = if n > 8 {
            word(&d[n - 8..n]) >> (8 * (16 - n))
        } else {
            0
        };
        u128::from(word(d)) | u128::from(hi) << 64
    } else {
        let mut b = [0u8; 8];
        b[..n].copy_from_slice(&d[..n]);
        u128::from(u64::from_le_bytes(b))
    }
}

/// What the nonce of `counter` contributes, computed before the message exists: the tag mask
/// AES(K, J0) and the first `AHEAD_BLOCKS` (2) keystream blocks.
#[derive(Clone)]
pub struct Ahead {
    counter: u64,
    mask: [u8; 16],
    stream: [u8; 16 * AHEAD_BLOCKS],
}

/// The message is longer than GCM allows under one nonce.
#[derive(Debug, PartialEq, Eq)]
pub struct TooLong;

/// The 96-bit nonce of `counter` (as `seal` forms it: four zero bytes, then the counter
/// little-endian) followed by the 32-bit big-endian block counter `block`.
#[inline(always)]
fn counter_block(counter: u64, block: u32) -> Block {
    let mut b = [0u8; 16];
    b[4..12].copy_from_slice(&counter.to_le_bytes());
    b[12..].copy_from_slice(&block.to_be_bytes());
    b.into()
}

impl Ahead {
    /// The counter whose work this is.
    pub fn counter(&self) -> u64 {
        self.counter
    }
}

impl Gcm {
    /// Expand `key`.
    pub fn new(key: &[u8; 32]) -> Gcm {
        Gcm::with_clmul(key, Clmul::detect())
    }

    /// Expand `key`, for the carry-less multiply if `clmul`, else for `polyval`'s code.
    fn with_clmul(key: &[u8; 32], clmul: Option<Clmul>) -> Gcm {
        let aes = Aes256::new(key.into());
        let mut h = Block::default();
        aes.encrypt_block(&mut h);
        h.reverse();
        Gcm {
            aes,
            hash: HashKey::new(polyval::mulx(&h), clmul),
        }
    }

    /// The work of the nonce of `counter`, done ahead.
    pub fn ahead(&self, counter: u64) -> Ahead {
        let mut blocks = [Block::default(); 1 + AHEAD_BLOCKS];
        for (i, b) in blocks.iter_mut().enumerate() {
            *b = counter_block(counter, 1 + i as u32);
        }
        self.aes.encrypt_blocks(&mut blocks);
        let mut a = Ahead {
            counter,
            mask: blocks[0].into(),
            stream: [0; 16 * AHEAD_BLOCKS],
        };
        for (dst, b) in a.stream.chunks_exact_mut(16).zip(&blocks[1..]) {
            dst.copy_from_slice(b);
        }
        a
    }

    /// The work `ahead` holds, if it is for `counter`.
    #[inline(always)]
    fn ahead_for(ahead: Option<&Ahead>, counter: u64) -> Option<&Ahead> {
        ahead.filter(|a| a.counter == counter)
    }

    /// The tag mask AES(K, J0) of `counter`: from `ahead` where it holds that counter's.
    fn mask(&self, ahead: Option<&Ahead>, counter: u64) -> [u8; 16] {
        match Self::ahead_for(ahead, counter) {
            Some(a) => a.mask,
            None => {
                let mut j0 = counter_block(counter, 1);
                self.aes.encrypt_block(&mut j0);
                j0.into()
            }
        }
    }

    /// XOR `data` with the keystream of `counter`, starting at its first block: from `ahead`
    /// where it holds that counter's, computed for the rest. The usual short message, all of
    /// whose keystream was computed ahead, is one XOR inline; the rest is out of line (its
    /// AES loop made every call save and restore registers: ~35 instructions a call).
    #[inline(always)]
    fn apply(&self, ahead: Option<&Ahead>, counter: u64, data: &mut [u8]) {
        match Self::ahead_for(ahead, counter) {
            Some(a) if data.len() <= a.stream.len() => xor(data, &a.stream[..data.len()]),
            _ => self.apply_long(ahead, counter, data),
        }
    }

    /// [`apply`](Self::apply) beyond the keystream computed ahead.
    #[inline(never)]
    fn apply_long(&self, ahead: Option<&Ahead>, counter: u64, data: &mut [u8]) {
        let pre: &[u8] = Self::ahead_for(ahead, counter).map_or(&[], |a| &a.stream);
        let n = data.len().min(pre.len());
        xor(&mut data[..n], &pre[..n]);
        let rest = &mut data[n..];
        // Eight blocks per call so AES-NI pipelines them. `n` is a whole number of blocks
        // here (it is the keystream kept ahead, or zero).
        let mut next = 2 + (n / 16) as u32;
        for chunk in rest.chunks_mut(16 * 8) {
            let mut ks = [Block::default(); 8];
            let blocks = chunk.len().div_ceil(16);
            for b in &mut ks[..blocks] {
                *b = counter_block(counter, next);
                next = next.wrapping_add(1);
            }
            self.aes.encrypt_blocks(&mut ks[..blocks]);
            for (d, k) in chunk.chunks_mut(16).zip(&ks) {
                xor(d, &k[..d.len()]);
            }
        }
    }

    /// GHASH of the associated data and the ciphertext (its bytes as a little-endian
    /// integer): XOR the tag mask, the tag. A short message's blocks are gathered without a
    /// loop; longer ones in runs of [`RUN`], each absorbed at once.
    #[inline(always)]
    fn ghash(&self, ad: &[u8], ct: &[u8]) -> u128 {
        match ShortAd::from_bytes(ad) {
            Some(ad) => self.ghash_short_ad(&ad, ct),
            None => self.ghash_long(ad, ct),
        }
    }

    /// [`ghash`](Self::ghash) of short associated data.
    #[inline(always)]
    fn ghash_short_ad(&self, ad: &ShortAd, ct: &[u8]) -> u128 {
        if let HashKey::Clmul(c, powers) = &self.hash {
            // A short message (a header's associated data, a small body): at most five
            // blocks, gathered without a loop and absorbed unrolled, inline. Four cover the
            // usual sealed message, an accelerated header area (17 to 32 bytes) and a body of
            // up to 16 (an exact count for every size cost more in the choosing than the
            // spare block's product).
            if ct.len() <= 16 {
                return c.absorb_exact(&short_blocks::<4>(ad, ct), powers);
            }
            if ct.len() <= 32 {
                return c.absorb_exact(&short_blocks::<5>(ad, ct), powers);
            }
        }
        self.ghash_long(&ad.to_bytes()[..ad.len], ct)
    }

    /// [`ghash`](Self::ghash) of a longer message, or without the carry-less multiply.
    #[inline(never)]
    fn ghash_long(&self, ad: &[u8], ct: &[u8]) -> u128 {
        let lengths = lengths_block(ad.len(), ct.len());
        let mut run = Run {
            blocks: [0; RUN],
            filled: 0,
            state: 0,
        };
        for c in ad.chunks(16) {
            run.push(&self.hash, padded_block(c));
        }
        for c in ct.chunks(16) {
            run.push(&self.hash, padded_block(c));
        }
        run.push(&self.hash, lengths);
        self.hash
            .absorb(run.state, &run.blocks[..run.filled])
            .swap_bytes()
    }

    /// Decrypt `data`, which this key sealed under the nonce of `counter`, without checking
    /// a tag: the keystream again (CTR mode is its own inverse), from `ahead` where it holds
    /// that counter's. For a datagram this end sent itself, whose plaintext is wanted back.
    pub(crate) fn decrypt_own(&self, ahead: Option<&Ahead>, counter: u64, data: &mut [u8]) {
        self.apply(ahead, counter, data);
    }

    /// Encrypt `data` in place under the nonce of `counter` with associated data `ad`; the tag.
    /// `ahead` is the work done ahead for some counter (used only if it is this one's).
    #[inline]
    pub fn seal(
        &self,
        ahead: Option<&Ahead>,
        counter: u64,
        ad: &[u8],
        data: &mut [u8],
    ) -> Result<[u8; TAG_LEN], TooLong> {
        self.seal_with(ahead, counter, data, |g, ct| g.ghash(ad, ct))
    }

    /// [`seal`](Self::seal) with short associated data given as its blocks.
    #[inline]
    pub fn seal_short_ad(
        &self,
        ahead: Option<&Ahead>,
        counter: u64,
        ad: &ShortAd,
        data: &mut [u8],
    ) -> Result<[u8; TAG_LEN], TooLong> {
        self.seal_with(ahead, counter, data, |g, ct| g.ghash_short_ad(ad, ct))
    }

    /// [`seal`](Self::seal) with the associated data hashed with the ciphertext by `hash`.
    #[inline(always)]
    fn seal_with(
        &self,
        ahead: Option<&Ahead>,
        counter: u64,
        data: &mut [u8],
        hash: impl FnOnce(&Self, &[u8]) -> u128,
    ) -> Result<[u8; TAG_LEN], TooLong> {
        if data.len() as u64 > MAX_LEN {
            return Err(TooLong);
        }
        self.apply(ahead, counter, data);
        let mask = u128::from_le_bytes(self.mask(ahead, counter));
        Ok((hash(self, data) ^ mask).to_le_bytes())
    }

    /// Check `tag` over `ad` and the ciphertext `data` under the nonce of `counter` and, if
    /// it holds, decrypt `data` in place. `data` is untouched when the tag is wrong.
    #[inline]
    pub fn open(
        &self,
        ahead: Option<&Ahead>,
        counter: u64,
        ad: &[u8],
        data: &mut [u8],
        tag: &[u8; TAG_LEN],
    ) -> bool {
        self.open_with(ahead, counter, data, tag, |g, ct| g.ghash(ad, ct))
    }

    /// [`open`](Self::open) with short associated data given as its blocks.
    #[inline]
    pub fn open_short_ad(
        &self,
        ahead: Option<&Ahead>,
        counter: u64,
        ad: &ShortAd,
        data: &mut [u8],
        tag: &[u8; TAG_LEN],
    ) -> bool {
        self.open_with(ahead, counter, data, tag, |g, ct| g.ghash_short_ad(ad, ct))
    }

    /// [`open`](Self::open) with the associated data hashed with the ciphertext by `hash`.
    #[inline(always)]
    fn open_with(
        &self,
        ahead: Option<&Ahead>,
        counter: u64,
        data: &mut [u8],
        tag: &[u8; TAG_LEN],
        hash: impl FnOnce(&Self, &[u8]) -> u128,
    ) -> bool {
        if data.len() as u64 > MAX_LEN {
            return false;
        }
        let tag = u128::from_le_bytes(*tag);
        let want = hash(self, data) ^ u128::from_le_bytes(self.mask(ahead, counter));
        if !bool::from(want.ct_eq(&tag)) {
            return false;
        }
        self.apply(ahead, counter, data);
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use ring::aead::{Aad, LessSafeKey, Nonce, UnboundKey, AES_256_GCM};

    fn ring_seal(key: &[u8; 32], counter: u64, ad: &[u8], data: &mut Vec<u8>) {
        let k = LessSafeKey::new(UnboundKey::new(&AES_256_GCM, key).unwrap());
        let mut n = [0u8; 12];
        n[4..].copy_from_slice(&counter.to_le_bytes());
        k.seal_in_place_append_tag(Nonce::assume_unique_for_key(n), Aad::from(ad), data)
            .unwrap();
    }

    fn hex(b: &[u8]) -> String {
        b.iter().map(|x| format!("{x:02x}")).collect()
    }

    /// The GCM specification's test cases 13 and 14 (AES-256, zero key and IV), both ways of
    /// hashing.
    #[test]
    fn gcm_spec_vectors() {
        for clmul in [Clmul::detect(), None] {
            spec_vectors(&Gcm::with_clmul(&[0; 32], clmul));
        }
    }

    fn spec_vectors(g: &Gcm) {
        let t = g.seal(None, 0, &[], &mut []).unwrap();
        assert_eq!(hex(&t), "530f8afbc74536b9a963b4f1c4cb738b");
        let mut text = [0u8; 16];
        let t = g.seal(None, 0, &[], &mut text).unwrap();
        assert_eq!(hex(&text), "cea7403d4d606b6e074ec5d3baf39d18");
        assert_eq!(hex(&t), "d0d1c8a799996bf0265b98b5d48ab919");
    }

    proptest! {
        /// Byte for byte `ring`'s AES-256-GCM, with and without the work done ahead (also for
        /// the wrong counter's), and `open` inverts `seal` and refuses any flipped bit.
        #[test]
        fn same_as_ring(
            key in any::<[u8; 32]>(),
            counter in any::<u64>(),
            ad in proptest::collection::vec(any::<u8>(), 0..40),
            body in proptest::collection::vec(any::<u8>(), 0..300),
            ahead_of in 0u8..3,
            flip in any::<usize>(),
            portable in any::<bool>(),
        ) {
            // Both ways of hashing: the carry-less multiply (where the CPU has it) and
            // `polyval`'s code.
            let g = Gcm::with_clmul(&key, if portable { None } else { Clmul::detect() });
            let ahead = match ahead_of {
                0 => None,
                1 => Some(g.ahead(counter)),
                _ => Some(g.ahead(counter.wrapping_add(1))),
            };
            let mut want = body.clone();
            ring_seal(&key, counter, &ad, &mut want);
            let mut got = body.clone();
            let tag = g.seal(ahead.as_ref(), counter, &ad, &mut got).unwrap();
            got.extend_from_slice(&tag);
            prop_assert_eq!(&got, &want);
            // Again under the next counter: the associated data's first block now comes
            // from the cache.
            let next = counter.wrapping_add(1);
            let mut want2 = body.clone();
            ring_seal(&key, next, &ad, &mut want2);
            let mut got2 = body.clone();
            let tag2 = g.seal(None, next, &ad, &mut got2).unwrap();
            got2.extend_from_slice(&tag2);
            prop_assert_eq!(&got2, &want2);

            let mut ct = got[..body.len()].to_vec();
            prop_assert!(g.open(ahead.as_ref(), counter, &ad, &mut ct, &tag));
            prop_assert_eq!(&ct, &body);

            // Short associated data given as blocks: the same tag, the same opening; a block
            // with a bit past the data's length is refused.
            if let Some(short) = ShortAd::from_bytes(&ad) {
                let mut got3 = body.clone();
                let tag3 = g.seal_short_ad(ahead.as_ref(), counter, &short, &mut got3).unwrap();
                prop_assert_eq!((&got3[..], tag3), (&got[..body.len()], tag));
                prop_assert!(g.open_short_ad(ahead.as_ref(), counter, &short, &mut got3, &tag3));
                prop_assert_eq!(&got3, &body);
                prop_assert_eq!(ShortAd::new(ad.len(), short.blocks), Some(short));
                prop_assert_eq!(&short.to_bytes()[..ad.len()], &ad[..]);
                if ad.len() < 32 {
                    let mut stray = short.blocks;
                    stray[ad.len() / 16] |= 1 << (8 * (ad.len() % 16));
                    prop_assert_eq!(ShortAd::new(ad.len(), stray), None);
                }
            } else {
                prop_assert!(ad.len() > 32);
            }

            let mut sealed = got.clone();
            let bit = flip % (sealed.len() * 8);
            sealed[bit / 8] ^= 1 << (bit % 8);
            let (ct, t) = sealed.split_at_mut(body.len());
            let before = ct.to_vec();
            let t: [u8; 16] = t.try_into().unwrap();
            prop_assert!(!g.open(ahead.as_ref(), counter, &ad, ct, &t));
            prop_assert_eq!(ct.to_vec(), before);
        }
    }
}
