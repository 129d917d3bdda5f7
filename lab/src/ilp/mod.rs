//! Integrated layer processing: marshalling, encryption, checksum and copy of a message in one
//! pass (seed 001, Braun & Diot's ILP over a user-level TCP).
//!
//! The seed's protocol suite, its packet format and its three data manipulations:
//!
//! ```text
//! packet = [checksum 2][0 0]  [enc header: length of M, 4]  [M = XDR reply][padding to 8]
//!           transport header   '------------------ encrypted (8-byte blocks) -----------'
//!                              '------------------ checksummed (2-byte words) ----------'
//! ```
//!
//! - [`xdr`] marshals the reply (`M`, 4-byte units), [`safer`] encrypts (8-byte blocks; the
//!   seed's simplified, insecure SAFER K-64), the Internet checksum (RFC 1071, 2-byte words)
//!   covers the ciphertext and sits in a header before it, and the result is copied into the
//!   transmit buffer. Each function is free of ordering constraints, so the message can be
//!   processed in any order of its units — what makes an integrated loop possible (§2.2).
//! - Three executions give byte-identical packets ([`Execution`]): `Layered`, one pass per
//!   function through intermediate buffers (the seed's non-ILP: marshal, encrypt, copy, then
//!   checksum); `Integrated`, one loop whose exchanged unit is LCM(4, 8, 2) = 8 bytes (a machine
//!   word), processing the seed's part B (the body) and part C (the tail with its padding)
//!   before part A (the first block, holding the length field — the header that depends on
//!   the data), writing each unit once into the packet; `Blocked`, the layered passes chunk by
//!   chunk over L1-sized pieces, the alternative the seed did not try.
//! - Receiving mirrors it; every execution checks the checksum and the format (lengths, XDR
//!   padding) before it returns anything, so a damaged packet delivers nothing.
//!
//! Why the integrated loop is written by hand rather than as a chain of crate calls: a chain
//! is the layered execution — each call reads and writes the whole message — and the point is
//! that a unit, once loaded, is marshalled, encrypted, summed and stored while it is in
//! registers. The crates (XDR here, the checksum of [`phyllo::inet`]) are its test oracles.
//!
//! The loop's step over the body is the cipher's ([`UnitCipher::encrypt_append`] and
//! [`UnitCipher::decrypt_append`]), which writes straight into the packet's spare capacity —
//! sized once, never zeroed, never appended to unit by unit — and returns the checksum's sum
//! of what it wrote (or read), accumulated wide and folded once per packet: [`Plain`] is a
//! copy-and-checksum, [`ChaCha`] a copy-and-XOR with keystream its core writes into an
//! L1-sized window, and the toy cipher takes each unit through its tables in a register
//! ([`safer::ToyKey::encrypt_word`]). The copy kernels ([`simd`]) use AVX2 where the CPU has
//! it (detected at run time; the build targets no CPU) and a portable loop elsewhere, tested
//! equal.

pub mod safer;
pub mod simd;
pub mod xdr;

use phyllo::inet::{fold16, ones_sum_le};
use safer::BLOCK;
use thiserror::Error;
use xdr::{Reply, XdrError};

/// The encryption the data path runs, applied in place to whole 8-byte units that start `at`
/// bytes into the encrypted region: the seed's toy block cipher ([`safer::ToyKey`], which
/// ignores the position), ChaCha20 ([`ChaCha`], whose keystream is seekable, so it is not
/// ordering-constrained either), or [`Plain`] (no encryption: marshalling, checksum and copy
/// alone).
pub trait UnitCipher {
    /// Encrypt `buf` (whole units) found `at` bytes into the region.
    fn encrypt_at(&mut self, at: usize, buf: &mut [u8]);
    /// Decrypt `buf` (whole units) found `at` bytes into the region.
    fn decrypt_at(&mut self, at: usize, buf: &mut [u8]);
    /// A packet whose encrypted region is `len` bytes begins (a cipher may prepare for it).
    fn begin(&mut self, len: usize) {
        let _ = len;
    }
    /// The integrated loop's step: append `src` (whole units, found `at` bytes into the
    /// region) encrypted to `out`, each byte loaded once and stored once; return the sum of the
    /// ciphertext appended ([`simd::sum`], the one's complement sum before folding).
    ///
    /// By default a [`LINE`] at a time: copied into the output, encrypted there and summed
    /// while in L1. Every cipher here does better: [`Plain`] copies and sums in one pass,
    /// [`safer::ToyKey`] encrypts and sums each unit in registers, [`ChaCha`] XORs its
    /// keystream into the copy.
    fn encrypt_append(&mut self, at: usize, src: &[u8], out: &mut Vec<u8>) -> u64 {
        let mut sum = 0;
        for (j, line) in src.chunks(LINE).enumerate() {
            let start = out.len();
            out.extend_from_slice(line);
            self.encrypt_at(at + j * LINE, &mut out[start..]);
            sum += simd::sum(&out[start..]);
        }
        sum
    }
    /// The receiving loop's step: append `src` (whole units, found `at` bytes into the region)
    /// decrypted to `out`; return the sum of `src` (the ciphertext, as [`simd::sum`]).
    fn decrypt_append(&mut self, at: usize, src: &[u8], out: &mut Vec<u8>) -> u64 {
        let mut sum = 0;
        for (j, line) in src.chunks(LINE).enumerate() {
            let start = out.len();
            sum += simd::append_copy_sum(out, line);
            self.decrypt_at(at + j * LINE, &mut out[start..]);
        }
        sum
    }
}

impl UnitCipher for safer::ToyKey {
    #[inline(always)]
    fn encrypt_at(&mut self, _: usize, buf: &mut [u8]) {
        for b in buf.chunks_exact_mut(BLOCK) {
            let c = self.encrypt(to_block(b));
            b.copy_from_slice(&c);
        }
    }
    #[inline(always)]
    fn decrypt_at(&mut self, _: usize, buf: &mut [u8]) {
        for b in buf.chunks_exact_mut(BLOCK) {
            let p = self.decrypt(to_block(b));
            b.copy_from_slice(&p);
        }
    }
    /// Each unit loaded, encrypted and summed in registers, and stored once.
    fn encrypt_append(&mut self, _: usize, src: &[u8], out: &mut Vec<u8>) -> u64 {
        let key = *self;
        let mut sum = 0;
        simd::append_units(out, src, |u| {
            let c = key.encrypt_word(u);
            sum += word_sum(c);
            c
        });
        sum
    }
    /// Each unit loaded, summed and decrypted in registers, and stored once.
    fn decrypt_append(&mut self, _: usize, src: &[u8], out: &mut Vec<u8>) -> u64 {
        let key = *self;
        let mut sum = 0;
        simd::append_units(out, src, |c| {
            sum += word_sum(c);
            key.decrypt_word(c)
        });
        sum
    }
}

/// No encryption: the data path of marshalling, checksum and copy alone.
#[derive(Clone, Copy, Debug, Default)]
pub struct Plain;

impl UnitCipher for Plain {
    #[inline(always)]
    fn encrypt_at(&mut self, _: usize, _: &mut [u8]) {}
    #[inline(always)]
    fn decrypt_at(&mut self, _: usize, _: &mut [u8]) {}
    /// A copy and a sum in one pass ([`simd::append_copy_sum`]).
    #[inline(always)]
    fn encrypt_append(&mut self, _: usize, src: &[u8], out: &mut Vec<u8>) -> u64 {
        simd::append_copy_sum(out, src)
    }
    #[inline(always)]
    fn decrypt_append(&mut self, _: usize, src: &[u8], out: &mut Vec<u8>) -> u64 {
        simd::append_copy_sum(out, src)
    }
}

/// ChaCha20 (RFC 8439, RustCrypto's implementation) over the encrypted region, the keystream
/// position following the region's byte offset. Confidentiality only: this data path's
/// integrity check is the Internet checksum, as in the seed; phyllo's sealed sessions add the
/// authenticator.
pub struct ChaCha {
    /// The stream cipher, for long in-place stretches (the layered passes).
    cipher: chacha20::ChaCha20,
    /// Its core (same key and nonce), which writes whole keystream blocks where it is told:
    /// into the windows below, with no XOR on the way (a window is zeroed once, when it is
    /// first allocated, not per fill).
    core: chacha20::ChaChaCore<chacha20::cipher::consts::U10>,
    /// Keystream computed ahead: one bulk call of the core per window (four blocks at a time
    /// in its SIMD backends, its per-call cost paid once), then XORs.
    window: Vec<u8>,
    /// The region offset of `window[0]` (a multiple of 64, a ChaCha block).
    window_at: usize,
    /// The keystream of the region's first unit (the integrated send's part A comes last).
    head: Option<[u8; BLOCK]>,
    /// The length of the current packet's region, from [`UnitCipher::begin`] (windows end
    /// there).
    region: Option<usize>,
}

/// Bytes of keystream [`ChaCha`] computes at once for small in-place requests.
const KS_WINDOW: usize = 4096;
/// Bytes of keystream [`ChaCha`] computes at once for the integrated loops: with the source
/// and the output they stay in L1.
const KS_LINE: usize = 4096;
/// A ChaCha block.
const CHACHA_BLOCK: usize = 64;

impl ChaCha {
    /// ChaCha20 with `key` and `nonce` (one nonce per packet: never reuse a pair).
    pub fn new(key: &[u8; 32], nonce: &[u8; 12]) -> ChaCha {
        use chacha20::cipher::KeyIvInit;
        ChaCha {
            cipher: chacha20::ChaCha20::new(key.into(), nonce.into()),
            core: chacha20::ChaChaCore::new(key.into(), nonce.into()),
            window: Vec::new(),
            window_at: 0,
            head: None,
            region: None,
        }
    }

    /// XOR the keystream from byte `at` into `buf`.
    pub fn apply_at(&mut self, at: usize, buf: &mut [u8]) {
        use chacha20::cipher::{StreamCipher, StreamCipherSeek};
        if let Some(head) = self.head.filter(|_| at + buf.len() <= BLOCK) {
            for (b, x) in buf.iter_mut().zip(&head[at..]) {
                *b ^= x;
            }
            return;
        }
        let mut at = at;
        let mut rest = buf;
        while !rest.is_empty() {
            let end = self.window_at + self.window.len();
            if at >= self.window_at && at < end {
                let k = rest.len().min(end - at);
                let ks = &self.window[at - self.window_at..at - self.window_at + k];
                let (now, later) = rest.split_at_mut(k);
                for (b, x) in now.iter_mut().zip(ks) {
                    *b ^= x;
                }
                at += k;
                rest = later;
                continue;
            }
            if rest.len() >= KS_WINDOW {
                // A long stretch: straight through the crate, no window.
                self.cipher.seek(at);
                self.cipher.apply_keystream(rest);
                return;
            }
            // A new window from the block that holds `at`: twice the last one when the
            // requests run on from it (up to `KS_WINDOW`), else as long as this request needs
            // (whole 256-byte steps), so a short packet computes no keystream it will not use.
            let start = at - at % CHACHA_BLOCK;
            let mut len = if at == end && !self.window.is_empty() {
                (2 * self.window.len()).min(KS_WINDOW)
            } else {
                (at + rest.len() - start).div_ceil(256).min(KS_WINDOW / 256) * 256
            };
            if let Some(region) = self.region {
                // Never past the packet's end (but always what this request needs).
                let needed = (at + rest.len() - start).div_ceil(CHACHA_BLOCK) * CHACHA_BLOCK;
                len = len
                    .min(region.saturating_sub(start).div_ceil(CHACHA_BLOCK) * CHACHA_BLOCK)
                    .max(needed);
            }
            self.fill(start, len);
        }
    }

    /// Append `src`, found `at` bytes into the region, XORed with the keystream, to `out`,
    /// in one pass ([`simd::append_xor_sum`]) from windows of [`KS_LINE`] bytes; the sum of
    /// `src` or of what was appended, as `of` says.
    fn xor_append(&mut self, at: usize, src: &[u8], out: &mut Vec<u8>, of: simd::SumOf) -> u64 {
        let (mut at, mut rest, mut sum) = (at, src, 0);
        while !rest.is_empty() {
            let end = self.window_at + self.window.len();
            if at >= self.window_at && at < end {
                let k = rest.len().min(end - at);
                let ks = &self.window[at - self.window_at..];
                sum += simd::append_xor_sum(out, &rest[..k], ks, of);
                at += k;
                rest = &rest[k..];
                continue;
            }
            // The next window: `KS_LINE` bytes from the block that holds `at`, never past the
            // region's end (the loop runs on to it), always what this request needs.
            let start = at - at % CHACHA_BLOCK;
            let needed = (at + rest.len() - start).div_ceil(CHACHA_BLOCK) * CHACHA_BLOCK;
            let region = self.region.unwrap_or(at + rest.len());
            let len = KS_LINE
                .min(region.saturating_sub(start).div_ceil(CHACHA_BLOCK) * CHACHA_BLOCK)
                .max(needed.min(KS_LINE));
            self.fill(start, len);
        }
        sum
    }

    /// Compute the keystream window `[start, start + len)` (`start` and `len` whole blocks),
    /// written by the core straight into the window.
    fn fill(&mut self, start: usize, len: usize) {
        use chacha20::cipher::inout::InOutBuf;
        use chacha20::cipher::{consts::U64, StreamCipherCore, StreamCipherSeekCore};
        debug_assert!(start.is_multiple_of(CHACHA_BLOCK) && len.is_multiple_of(CHACHA_BLOCK));
        self.window_at = start;
        self.window.resize(len, 0);
        // The region's keystream positions fit the 32-bit block counter (a region is at most
        // 4 GiB: its length field is 32 bits).
        self.core.set_block_pos((start / CHACHA_BLOCK) as u32);
        let (mut blocks, _) = InOutBuf::from(&mut self.window[..]).into_chunks::<U64>();
        self.core.write_keystream_blocks(blocks.get_out());
        if start == 0 && len >= BLOCK {
            self.head = self.window[..BLOCK].try_into().ok();
        }
    }
}

impl UnitCipher for ChaCha {
    /// The region's length, so that no window runs past it; no keystream yet (the first
    /// request computes what it needs, and its windows run on).
    fn begin(&mut self, len: usize) {
        self.region = Some(len);
        self.window.clear();
        self.window_at = 0;
        self.head = None;
    }
    #[inline(always)]
    fn encrypt_at(&mut self, at: usize, buf: &mut [u8]) {
        self.apply_at(at, buf)
    }
    #[inline(always)]
    fn decrypt_at(&mut self, at: usize, buf: &mut [u8]) {
        self.apply_at(at, buf)
    }
    /// Plaintext XOR keystream straight into the output, summed on the way.
    fn encrypt_append(&mut self, at: usize, src: &[u8], out: &mut Vec<u8>) -> u64 {
        self.xor_append(at, src, out, simd::SumOf::Output)
    }
    /// Ciphertext summed and XORed with the keystream straight into the output.
    fn decrypt_append(&mut self, at: usize, src: &[u8], out: &mut Vec<u8>) -> u64 {
        self.xor_append(at, src, out, simd::SumOf::Input)
    }
}

/// Bytes of the transport header (the checksum and two reserved bytes).
pub const HEADER: usize = 4;
/// Bytes of the encryption header (the length of the marshalled reply).
pub const ENC_HEADER: usize = 4;
/// Bytes the integrated loops hand a cipher's in-place encryption at a time by default
/// ([`UnitCipher::encrypt_append`]): eight units, one cache line.
pub const LINE: usize = 8 * BLOCK;
/// The chunk of the cache-blocked execution: well inside any L1 data cache.
pub const CHUNK: usize = 4096;

/// How the data manipulations run.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Execution {
    /// One pass per function, through intermediate buffers.
    Layered,
    /// One loop over 8-byte units.
    Integrated,
    /// The layered passes over [`CHUNK`]-byte pieces.
    Blocked,
}

impl Execution {
    /// All three.
    pub const ALL: [Execution; 3] = [
        Execution::Layered,
        Execution::Integrated,
        Execution::Blocked,
    ];
}

/// A packet that must not be delivered.
#[derive(Clone, Copy, Debug, Error, PartialEq, Eq)]
pub enum IlpError {
    /// Shorter than its headers, or not whole blocks.
    #[error("ILP packet: truncated")]
    Truncated,
    /// The checksum does not match.
    #[error("ILP packet: checksum mismatch")]
    Checksum,
    /// The encryption header's length disagrees with the packet.
    #[error("ILP packet: inconsistent length")]
    Length,
    /// The decrypted message is not a reply.
    #[error(transparent)]
    Format(#[from] XdrError),
}

/// Bytes of the encrypted region for a reply of `data_len` bytes.
pub const fn encrypted_len(data_len: usize) -> usize {
    (ENC_HEADER + xdr::reply_len(data_len)).div_ceil(BLOCK) * BLOCK
}

/// Bytes of the packet for a reply of `data_len` bytes.
pub const fn packet_len(data_len: usize) -> usize {
    HEADER + encrypted_len(data_len)
}

/// The big-endian Internet checksum field for a region whose little-endian one's complement
/// sum is `sum_le` (RFC 1071: complement of the folded sum).
fn checksum_field(sum_le: u64) -> [u8; 2] {
    (!fold16(sum_le).swap_bytes()).to_be_bytes()
}

/// Whether `field` is the checksum of a region whose little-endian sum is `sum_le`.
fn checksum_ok(sum_le: u64, field: [u8; 2]) -> bool {
    // Adding the stored complement makes the folded sum all ones.
    let stored = u16::from_be_bytes(field).swap_bytes() as u64;
    fold16(sum_le + stored) == 0xffff
}

/// The little-endian one's complement contribution of one 8-byte unit (two 32-bit words).
#[inline(always)]
fn unit_sum(b: [u8; BLOCK]) -> u64 {
    word_sum(u64::from_le_bytes(b))
}

/// [`unit_sum`] of a unit loaded little-endian.
#[inline(always)]
fn word_sum(v: u64) -> u64 {
    (v & 0xffff_ffff) + (v >> 32)
}

/// Write the packet for `r` into `out` (replacing what it held).
pub fn send(exec: Execution, key: &mut impl UnitCipher, r: &Reply<'_>, out: &mut Vec<u8>) {
    key.begin(encrypted_len(r.data.len()));
    match exec {
        Execution::Layered => send_layered(key, r, out),
        Execution::Integrated => send_integrated(key, r, out),
        Execution::Blocked => send_blocked(key, r, out),
    }
}

/// Read the packet `p` into `data` (replacing what it held); the reply's id and sequence
/// number. On an error `data` is empty.
pub fn receive(
    exec: Execution,
    key: &mut impl UnitCipher,
    p: &[u8],
    data: &mut Vec<u8>,
) -> Result<(u32, u32), IlpError> {
    data.clear();
    key.begin(p.len().saturating_sub(HEADER));
    let r = match exec {
        Execution::Layered => receive_layered(key, p, data),
        Execution::Integrated => receive_integrated(key, p, data),
        Execution::Blocked => receive_blocked(key, p, data),
    };
    if r.is_err() {
        data.clear();
    }
    r
}

/// The plaintext of the encrypted region (encryption header, marshalled reply, padding).
fn plaintext(r: &Reply<'_>, out: &mut Vec<u8>) {
    out.clear();
    xdr::put_u32(out, xdr::reply_len(r.data.len()) as u32);
    xdr::marshal(r, out);
    out.resize(encrypted_len(r.data.len()), 0);
}

/// Append `plain`, found `at` bytes into the region, encrypted.
fn encrypt_into(key: &mut impl UnitCipher, plain: &[u8], at: usize, out: &mut Vec<u8>) {
    let start = out.len();
    out.extend_from_slice(plain);
    key.encrypt_at(at, &mut out[start..]);
}

#[inline(always)]
fn to_block(b: &[u8]) -> [u8; BLOCK] {
    let mut x = [0u8; BLOCK];
    x.copy_from_slice(b);
    x
}

fn send_layered(key: &mut impl UnitCipher, r: &Reply<'_>, out: &mut Vec<u8>) {
    // Marshal, encrypt, copy into the transmit buffer, checksum: four passes.
    let mut plain = Vec::new();
    plaintext(r, &mut plain);
    let mut cipher = Vec::with_capacity(plain.len());
    encrypt_into(key, &plain, 0, &mut cipher);
    out.clear();
    out.extend_from_slice(&[0; HEADER]);
    out.extend_from_slice(&cipher);
    let c = checksum_field(ones_sum_le(&out[HEADER..]));
    out[..2].copy_from_slice(&c);
}

fn send_blocked(key: &mut impl UnitCipher, r: &Reply<'_>, out: &mut Vec<u8>) {
    // The same passes, one L1-sized chunk at a time (the plaintext is built whole here; the
    // passes that follow it run chunk by chunk while the chunk is in the cache).
    let mut plain = Vec::new();
    plaintext(r, &mut plain);
    let mut cipher = Vec::with_capacity(CHUNK);
    out.clear();
    out.extend_from_slice(&[0; HEADER]);
    let mut sum = 0u64;
    for (j, chunk) in plain.chunks(CHUNK).enumerate() {
        cipher.clear();
        encrypt_into(key, chunk, j * CHUNK, &mut cipher);
        let at = out.len();
        out.extend_from_slice(&cipher);
        sum += ones_sum_le(&out[at..]);
    }
    let c = checksum_field(sum);
    out[..2].copy_from_slice(&c);
}

fn send_integrated(key: &mut impl UnitCipher, r: &Reply<'_>, out: &mut Vec<u8>) {
    let n = r.data.len();
    let m_len = xdr::reply_len(n) as u32;
    // The packet is sized once; every byte after the headers is written once, by the cipher's
    // step straight into the spare capacity (no zeroing first, no appending unit by unit).
    out.clear();
    out.reserve(packet_len(n));
    // Room for the transport header and part A, written last.
    out.extend_from_slice(&[0; HEADER + BLOCK]);
    // Part B: the second unit (sequence number, data length), then the data, which starts on a
    // unit boundary (after 16 bytes of headers): its whole units in one step of the cipher,
    // which loads each byte once, encrypts, sums and stores it while it is in registers.
    let mut b1 = [0u8; BLOCK];
    b1[..4].copy_from_slice(&r.seq.to_be_bytes());
    b1[4..].copy_from_slice(&(n as u32).to_be_bytes());
    let mut sum = key.encrypt_append(BLOCK, &b1, out);
    let whole = n - n % BLOCK;
    let (body, tail) = r.data.split_at(whole);
    sum += key.encrypt_append(2 * BLOCK, body, out);
    // Part C: the last data bytes with the XDR and the block padding (zeros).
    if !tail.is_empty() {
        let mut c = [0u8; BLOCK];
        c[..tail.len()].copy_from_slice(tail);
        sum += key.encrypt_append(2 * BLOCK + whole, &c, out);
    }
    // Part A: the encryption header, which holds the length, and the transaction id.
    let mut a = [0u8; BLOCK];
    a[..4].copy_from_slice(&m_len.to_be_bytes());
    a[4..].copy_from_slice(&r.xid.to_be_bytes());
    key.encrypt_at(0, &mut a);
    sum += unit_sum(a);
    out[HEADER..HEADER + BLOCK].copy_from_slice(&a);
    let field = checksum_field(sum);
    out[..2].copy_from_slice(&field);
}

/// The transport header's checksum field and the encrypted region, if whole.
fn split(p: &[u8]) -> Result<([u8; 2], &[u8]), IlpError> {
    if p.len() < HEADER + 2 * BLOCK || !(p.len() - HEADER).is_multiple_of(BLOCK) {
        return Err(IlpError::Truncated);
    }
    Ok(([p[0], p[1]], &p[HEADER..]))
}

/// Unmarshal a decrypted region into `data`.
fn finish(plain: &[u8], data: &mut Vec<u8>) -> Result<(u32, u32), IlpError> {
    // `split` checked the region holds at least two units.
    let m_len = u32::from_be_bytes([plain[0], plain[1], plain[2], plain[3]]) as usize;
    let m = plain
        .get(ENC_HEADER..ENC_HEADER.saturating_add(m_len))
        .ok_or(IlpError::Length)?;
    if encrypted_len_of(m_len) != Some(plain.len())
        || plain[ENC_HEADER + m_len..].iter().any(|&b| b != 0)
    {
        return Err(IlpError::Length);
    }
    let r = xdr::unmarshal(m)?;
    data.extend_from_slice(r.data);
    Ok((r.xid, r.seq))
}

/// The encrypted length for a marshalled reply of `m_len` bytes.
fn encrypted_len_of(m_len: usize) -> Option<usize> {
    Some(ENC_HEADER.checked_add(m_len)?.div_ceil(BLOCK) * BLOCK)
}

fn receive_layered(
    key: &mut impl UnitCipher,
    p: &[u8],
    data: &mut Vec<u8>,
) -> Result<(u32, u32), IlpError> {
    let (field, e) = split(p)?;
    if !checksum_ok(ones_sum_le(e), field) {
        return Err(IlpError::Checksum);
    }
    let mut plain = e.to_vec();
    key.decrypt_at(0, &mut plain);
    finish(&plain, data)
}

fn receive_blocked(
    key: &mut impl UnitCipher,
    p: &[u8],
    data: &mut Vec<u8>,
) -> Result<(u32, u32), IlpError> {
    let (field, e) = split(p)?;
    let mut plain = Vec::with_capacity(e.len());
    let mut sum = 0u64;
    for (j, chunk) in e.chunks(CHUNK).enumerate() {
        sum += ones_sum_le(chunk);
        let start = plain.len();
        plain.extend_from_slice(chunk);
        key.decrypt_at(j * CHUNK, &mut plain[start..]);
    }
    if !checksum_ok(sum, field) {
        return Err(IlpError::Checksum);
    }
    finish(&plain, data)
}

fn receive_integrated(
    key: &mut impl UnitCipher,
    p: &[u8],
    data: &mut Vec<u8>,
) -> Result<(u32, u32), IlpError> {
    let (field, e) = split(p)?;
    // The first two units hold every length: check them against the packet before the loop.
    let mut h = [0u8; 2 * BLOCK];
    h.copy_from_slice(&e[..2 * BLOCK]);
    let mut sum = unit_sum(to_block(&h[..BLOCK])) + unit_sum(to_block(&h[BLOCK..]));
    key.decrypt_at(0, &mut h);
    let word = |i: usize| u32::from_be_bytes([h[i], h[i + 1], h[i + 2], h[i + 3]]);
    let (m_len, xid, seq, n) = (word(0) as usize, word(4), word(8), word(12) as usize);
    if m_len != xdr::reply_len(n) || encrypted_len(n) != e.len() {
        return Err(IlpError::Length);
    }
    // The region is now known to be 16 bytes of headers, the data's whole units and, if the
    // data ends inside a unit, that unit.
    let whole = n - n % BLOCK;
    let (body, last) = e[2 * BLOCK..].split_at(whole);
    data.reserve(n);
    // The whole units in one step of the cipher, as on the send side: each loaded once,
    // summed as ciphertext, decrypted and stored straight into the destination.
    sum += key.decrypt_append(2 * BLOCK, body, data);
    let tail = n % BLOCK;
    if tail > 0 {
        let mut b = to_block(last.get(..BLOCK).ok_or(IlpError::Truncated)?);
        sum += unit_sum(b);
        key.decrypt_at(2 * BLOCK + whole, &mut b);
        if b[tail..].iter().any(|&x| x != 0) {
            return Err(XdrError::Padding.into());
        }
        data.extend_from_slice(&b[..tail]);
    }
    // Nothing is handed on before the checksum of the whole packet is known good.
    if !checksum_ok(sum, field) {
        return Err(IlpError::Checksum);
    }
    Ok((xid, seq))
}

#[cfg(test)]
mod tests {
    use super::*;
    use safer::ToyKey;

    const KEY: ToyKey = ToyKey([3, 141, 59, 26, 53, 58, 97, 93]);

    /// RFC 1071 §3's example: the bytes 00 01 f2 03 f4 f5 f6 f7 sum to ddf2 (big-endian words).
    #[test]
    fn rfc1071_example() {
        let d = [0x00, 0x01, 0xf2, 0x03, 0xf4, 0xf5, 0xf6, 0xf7];
        assert_eq!(fold16(ones_sum_le(&d)).swap_bytes(), 0xddf2);
        assert_eq!(fold16(unit_sum(d)).swap_bytes(), 0xddf2);
        assert_eq!(checksum_field(ones_sum_le(&d)), [0x22, 0x0d]);
        assert!(checksum_ok(ones_sum_le(&d), [0x22, 0x0d]));
    }

    #[test]
    fn the_three_executions_make_the_same_packet_and_get_the_reply_back() {
        for n in (0..40).chain([511, 512, 513, 4095, 4096, 4097, 9000]) {
            let data: Vec<u8> = (0..n).map(|i| (i * 7 + 3) as u8).collect();
            let r = Reply {
                xid: 0x0102_0304,
                seq: n as u32,
                data: &data,
            };
            let mut want = Vec::new();
            send(Execution::Layered, &mut KEY.clone(), &r, &mut want);
            assert_eq!(want.len(), packet_len(n));
            for e in Execution::ALL {
                let mut p = Vec::new();
                send(e, &mut KEY.clone(), &r, &mut p);
                assert_eq!(p, want, "{e:?} send, {n} bytes");
                let mut got = Vec::new();
                assert_eq!(
                    receive(e, &mut KEY.clone(), &p, &mut got),
                    Ok((r.xid, r.seq)),
                    "{e:?}"
                );
                assert_eq!(got, data, "{e:?} receive, {n} bytes");
            }
        }
    }

    /// RFC 8439 §2.4.2: ChaCha20 encryption, key 00..1f, the nonce below, block counter 1
    /// (byte 64 of the keystream).
    #[test]
    fn rfc8439_chacha20_encryption() {
        let key: [u8; 32] = core::array::from_fn(|i| i as u8);
        let nonce = [0, 0, 0, 0, 0, 0, 0, 0x4a, 0, 0, 0, 0];
        let mut text = b"Ladies and Gentlemen of the class of '99: If I could offer you only one tip for the future, sunscreen would be it.".to_vec();
        ChaCha::new(&key, &nonce).apply_at(64, &mut text);
        assert_eq!(
            &text[..16],
            &[
                0x6e, 0x2e, 0x35, 0x9a, 0x25, 0x68, 0xf9, 0x80, 0x41, 0xba, 0x07, 0x28, 0xdd, 0x0d,
                0x69, 0x81
            ]
        );
        assert_eq!(&text[text.len() - 2..], &[0x87, 0x4d]);
    }

    #[test]
    fn the_executions_agree_under_chacha20_and_without_a_cipher() {
        let (k, nonce) = ([7u8; 32], [1u8; 12]);
        for n in [0, 1, 7, 8, 63, 64, 65, 200, 4096, 5000] {
            let data: Vec<u8> = (0..n).map(|i| (i * 13) as u8).collect();
            let r = Reply {
                xid: 5,
                seq: 6,
                data: &data,
            };
            let mut want = Vec::new();
            send(
                Execution::Layered,
                &mut ChaCha::new(&k, &nonce),
                &r,
                &mut want,
            );
            let mut plain_want = Vec::new();
            send(Execution::Layered, &mut Plain, &r, &mut plain_want);
            assert_ne!(want, plain_want);
            for e in Execution::ALL {
                let mut p = Vec::new();
                send(e, &mut ChaCha::new(&k, &nonce), &r, &mut p);
                assert_eq!(p, want, "{e:?} ChaCha20, {n} bytes");
                let mut got = Vec::new();
                let back = receive(e, &mut ChaCha::new(&k, &nonce), &p, &mut got);
                assert_eq!((back, &got), (Ok((5, 6)), &data), "{e:?}");
                send(e, &mut Plain, &r, &mut p);
                assert_eq!(p, plain_want, "{e:?} no cipher");
            }
        }
    }

    /// Every size to 300 bytes and some large ones, every cipher, on the AVX2 kernels (where
    /// the CPU has them) and on the portable ones: the three executions make the layered
    /// packet, get the reply back, and refuse the packet with a byte of the body or the
    /// checksum damaged.
    #[test]
    fn every_size_every_cipher_both_kernels() {
        let (k, nonce) = ([9u8; 32], [4u8; 12]);
        for n in (0..=300).chain([1000, 4095, 4096, 4097, 16_384, 16_400, 65_539]) {
            let data: Vec<u8> = (0..n).map(|i| (i * 151 + n) as u8).collect();
            let r = Reply {
                xid: 0xdead_beef,
                seq: n as u32,
                data: &data,
            };
            for cipher in 0..3 {
                let run = |e: Execution, p: Option<&[u8]>, out: &mut Vec<u8>| match cipher {
                    0 => match p {
                        None => {
                            send(e, &mut KEY.clone(), &r, out);
                            Ok((0, 0))
                        }
                        Some(p) => receive(e, &mut KEY.clone(), p, out),
                    },
                    1 => match p {
                        None => {
                            send(e, &mut ChaCha::new(&k, &nonce), &r, out);
                            Ok((0, 0))
                        }
                        Some(p) => receive(e, &mut ChaCha::new(&k, &nonce), p, out),
                    },
                    _ => match p {
                        None => {
                            send(e, &mut Plain, &r, out);
                            Ok((0, 0))
                        }
                        Some(p) => receive(e, &mut Plain, p, out),
                    },
                };
                let mut want = Vec::new();
                run(Execution::Layered, None, &mut want).unwrap();
                for portable in [false, true] {
                    simd::PORTABLE.with(|p| p.set(portable));
                    for e in Execution::ALL {
                        let what =
                            format!("{e:?}, cipher {cipher}, {n} bytes, portable {portable}");
                        let mut p = vec![1, 2, 3];
                        run(e, None, &mut p).unwrap();
                        assert_eq!(p, want, "{what}");
                        let mut got = Vec::new();
                        assert_eq!(run(e, Some(&p), &mut got), Ok((r.xid, r.seq)), "{what}");
                        assert_eq!(got, data, "{what}");
                        for at in [
                            0,
                            (HEADER + 2 * BLOCK + n / 2).min(p.len() - 1),
                            p.len() - 1,
                        ] {
                            let mut bad = p.clone();
                            bad[at] ^= 0x20;
                            let got_bad = run(e, Some(&bad), &mut got);
                            assert!(got_bad.is_err() && got.is_empty(), "{what}: byte {at}");
                        }
                    }
                }
                simd::PORTABLE.with(|p| p.set(false));
            }
        }
    }

    #[test]
    fn every_corruption_is_refused_by_every_execution() {
        let data: Vec<u8> = (0..37u8).collect();
        let r = Reply {
            xid: 9,
            seq: 1,
            data: &data,
        };
        let mut p = Vec::new();
        send(Execution::Integrated, &mut KEY.clone(), &r, &mut p);
        for e in Execution::ALL {
            let mut got = vec![1, 2, 3];
            for bit in 0..p.len() * 8 {
                let mut bad = p.clone();
                bad[bit / 8] ^= 1 << (bit % 8);
                // The reserved header bytes are not covered; every other bit is.
                if (16..32).contains(&bit) {
                    continue;
                }
                assert!(
                    receive(e, &mut KEY.clone(), &bad, &mut got).is_err(),
                    "{e:?} bit {bit}"
                );
                assert!(got.is_empty(), "{e:?}: something delivered");
            }
            for cut in 0..p.len() {
                assert!(
                    receive(e, &mut KEY.clone(), &p[..cut], &mut got).is_err(),
                    "{e:?} cut {cut}"
                );
            }
        }
    }
}
