//! `seal`: authenticated encryption (AES-256-GCM by default, or ChaCha20-Poly1305, RFC 8439)
//! with a replay window.
//!
//! AES-256-GCM is the default because it costs the fewest instructions at every message size
//! measured (the report's `aead` experiment: 8-byte messages ~710 instructions to seal with
//! `ring` against ~1220 for ring's ChaCha20-Poly1305 and ~5100 for RustCrypto's portable
//! ChaCha20-Poly1305); `seal(chacha)` chooses ChaCha20-Poly1305, for CPUs without AES
//! instructions. Both ends must name the same cipher. Every cipher picks its code (AES-NI,
//! carry-less multiplication, AVX, NEON) by the CPU it finds at run time, so one binary is fast
//! on every x86-64 and aarch64 machine. Keys are expanded once, at initialisation.
//!
//! The nonce is predicted, so the post-phases do its share of AES-GCM ahead (van Renesse, "Masking
//! the Overhead of Protocol Layering" (seed 004 §3.2), [`super::gcm`]): after a send, the keystream
//! and tag mask of the next counter; after a delivery, those of the next counter expected. For a
//! short body the pre-phases, on the critical path, then only XOR and GHASH; a long one goes
//! through `ring`'s AES-256-GCM (the same bytes), and so does ChaCha20-Poly1305.
//!
//! Integrated layer processing (Braun and Diot's integrated layer processing (seed 001)) is
//! measured here, not assumed: a body is copied into its datagram and then sealed in place by
//! `ring`, because `ring`'s AES-256-GCM only works in place and a copy fused into the one cipher
//! that can be split (the one above) costs more than the copy saves — the report's
//! `aead.fused_copy_bound.N` (split seal over memcpy plus `ring`'s seal) is 4-5 at 1 and 8 KiB.
//! What integration does buy a sealed session is that nothing is zeroed before it is written
//! ([`crate::msg`]) and datagrams reach the kernel back to back for segmentation offload.
//!
//! Keys: one per direction, this layer's own pair, which the connection derives for the
//! layer's index from a session's two keys ([`crate::layer::DirectionKeys`]), so the two
//! directions, and two `seal` layers of one stack, never share a (key, nonce) pair. The
//! session's keys come only from its Noise IK handshake ([`crate::session`],
//! [`crate::Config::with_session`]; [`crate::Config::pair`] runs one in memory for two ends
//! in one process), and they key one connection. There is no pre-shared key: a connection has
//! no handshake and its nonces start at zero, so a fixed key shared by several connections
//! (a restarted process, the next connection an endpoint accepts) would encrypt different
//! messages under the same (key, nonce) pair, and a fresh receiver would accept a datagram
//! recorded from an earlier connection; no derivation from a fixed key avoids that unless
//! both ends contribute fresh randomness — a handshake, which is what sessions are (a static
//! key pair is as easy to distribute as a pre-shared key).
//!
//! Nonce: a 64-bit per-direction counter, from zero; its low 32 bits travel as a
//! protocol-specific field (predictable: it depends only on state) and the receiver
//! reconstructs the full counter next to the highest it has accepted. The
//! associated data is the image of this layer's field and those above it; the body is
//! encrypted in place and the 16-byte tag is a trailer. A 64-entry sliding replay window
//! rejects repeats and packets too old to judge.
//! Pre-phases encrypt or verify and decrypt (transforming the message, not the state); the
//! counter, the replay window and the work done ahead advance in the post-phases.

use super::gcm::{Ahead, Gcm, ShortAd};
use crate::field::{ByteOrder, Cover, FieldClass, FieldHandle, ShortHeader};
use crate::layer::{Cx, DropReason, Handoff, Hdr, InitCx, Layer, Packet, Role, Verdict};
use crate::layout::FieldRegistry;
use crate::layout::MAX_HEADER;
use ring::aead::{Aad, LessSafeKey, Nonce, Tag, UnboundKey, AES_256_GCM, CHACHA20_POLY1305};
use zeroize::Zeroizing;

/// Bytes of the authentication tag trailer.
pub const TAG_LEN: usize = super::gcm::TAG_LEN;
const REPLAY_WINDOW: u64 = 64;

/// The AEAD a seal layer uses.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Cipher {
    /// AES-256-GCM (the default).
    #[default]
    Aes256Gcm,
    /// ChaCha20-Poly1305 (RFC 8439).
    ChaCha20Poly1305,
}

impl Cipher {
    /// The expanded key for `bytes` (always 32 bytes, which both ciphers take).
    fn key(self, bytes: &[u8; 32]) -> Option<Key> {
        let alg = match self {
            Cipher::Aes256Gcm => &AES_256_GCM,
            Cipher::ChaCha20Poly1305 => &CHACHA20_POLY1305,
        };
        let whole = LessSafeKey::new(UnboundKey::new(alg, bytes).ok()?);
        let raw = (self == Cipher::Aes256Gcm).then(|| Zeroizing::new(*bytes));
        let split = raw.as_ref().map(|r| Box::new(Gcm::new(r)));
        Some(Key { whole, split, raw })
    }
}

/// Bodies up to this long take AES-256-GCM split at the nonce: their keystream was computed
/// ahead. Longer ones (a packed datagram) go through `ring`, whose GHASH costs less per byte.
const SHORT: usize = super::gcm::AHEAD_BYTES;

/// An expanded key of one direction: `ring`'s AEAD, and for AES-256-GCM also the same
/// cipher split at the nonce ([`Gcm`]) for short bodies. Both give the same bytes, so each
/// message may take either.
struct Key {
    whole: LessSafeKey,
    split: Option<Box<Gcm>>,
    /// The key's bytes, to build `split` again after [`Layer::shrink`] dropped it (AES-256-GCM
    /// only; wiped when dropped).
    raw: Option<Zeroizing<[u8; 32]>>,
}

impl Key {
    /// The work of the nonce of `counter` done ahead, where the cipher allows it (building the
    /// split cipher again if an idle session gave it back).
    fn ahead(&mut self, counter: u64) -> Option<Ahead> {
        if self.split.is_none() {
            self.split = self.raw.as_ref().map(|r| Box::new(Gcm::new(r)));
        }
        self.split.as_ref().map(|g| g.ahead(counter))
    }

    /// Seal `body` in place under `counter`; the tag (`None` beyond the cipher's limit).
    fn seal(
        &self,
        ahead: Option<&Ahead>,
        c: u64,
        ad: &Ad,
        body: &mut [u8],
    ) -> Option<[u8; TAG_LEN]> {
        match (&self.split, ad) {
            (Some(g), Ad::Blocks(ad)) if body.len() <= SHORT => {
                g.seal_short_ad(ahead, c, ad, body).ok()
            }
            (Some(g), Ad::Image(ad, n)) if body.len() <= SHORT => {
                g.seal(ahead, c, &ad[..*n], body).ok()
            }
            _ => self
                .whole
                .seal_in_place_separate_tag(nonce_bytes(c), Aad::from(ad.bytes(&mut [0; 32])), body)
                .ok()
                .and_then(|t| t.as_ref().try_into().ok()),
        }
    }

    /// Whether [`decrypt_own`](Self::decrypt_own) takes back what this key sealed: under
    /// AES-256-GCM (the split cipher's CTR keystream, whichever of the two sealed it), not
    /// under ChaCha20-Poly1305 (`ring` keeps its keystream to itself).
    fn can_undo(&self) -> bool {
        self.raw.is_some()
    }

    /// Decrypt `data`, sealed by this key under `counter`, without a tag check (CTR mode is
    /// its own inverse). AES-256-GCM only; the split cipher is built for the call if an idle
    /// session gave it back.
    fn decrypt_own(&self, ahead: Option<&Ahead>, c: u64, data: &mut [u8]) {
        match (&self.split, &self.raw) {
            (Some(g), _) => g.decrypt_own(ahead, c, data),
            (None, Some(raw)) => Gcm::new(raw).decrypt_own(None, c, data),
            (None, None) => debug_assert!(false, "decrypt_own of a key without the split cipher"),
        }
    }

    /// Check `tag` and decrypt `ct` in place; whether it was genuine.
    fn open(
        &self,
        ahead: Option<&Ahead>,
        c: u64,
        ad: &Ad,
        ct: &mut [u8],
        tag: [u8; TAG_LEN],
    ) -> bool {
        match (&self.split, ad) {
            (Some(g), Ad::Blocks(ad)) if ct.len() <= SHORT => {
                g.open_short_ad(ahead, c, ad, ct, &tag)
            }
            (Some(g), Ad::Image(ad, n)) if ct.len() <= SHORT => {
                g.open(ahead, c, &ad[..*n], ct, &tag)
            }
            _ => {
                let mut buf = [0; 32];
                let ad = Aad::from(ad.bytes(&mut buf));
                self.whole
                    .open_in_place_separate_tag(nonce_bytes(c), ad, Tag::from(tag), ct, 0..)
                    .is_ok()
            }
        }
    }
}

/// The seal layer.
pub struct Seal {
    cipher: Cipher,
    nonce: Option<FieldHandle>,
    tx: Option<Key>,
    rx: Option<Key>,
    /// The send key's work for `tx_counter`, done in the last post-send.
    tx_ahead: Option<Ahead>,
    /// The receive key's work for the next counter expected, done in the last post-deliver.
    rx_ahead: Option<Ahead>,
    tx_counter: u64,
    rx_highest: Option<u64>,
    rx_seen: u64,
}

impl Default for Seal {
    fn default() -> Self {
        Seal::new()
    }
}

impl std::fmt::Debug for Seal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Seal")
            .field("tx_counter", &self.tx_counter)
            .field("rx_highest", &self.rx_highest)
            .finish()
    }
}

/// The associated data: this layer's own field (the nonce's wire bits: the receiver's
/// reconstruction maps several to one counter) and the fields of the layers above and of the
/// accelerator, as their sender wrote them. Fields of layers below are written after
/// `pre_send` ran, so they cannot be covered (as a checksum covers only the fields above it);
/// those layers check their own. The image is in the sender's byte order, so a receiver that
/// converted the header authenticates the same bytes.
///
/// `short` is the header, if it is short, loaded already: its image goes to the hash as
/// blocks, not written out and read back.
#[inline(always)]
fn associated_data(pkt: &Packet<'_>, short: Option<&ShortHeader>) -> Ad {
    let Some(cover) = pkt.layout().upper_cover(pkt.layer() + 1) else {
        return Ad::Blocks(ShortAd::of_image(0, [0; 2]));
    };
    let (hdr, order, wire) = (pkt.header(), pkt.order(), pkt.wire_order());
    match short.and_then(|s| cover.image_blocks(s, order, wire)) {
        // Zero past the header, as the image is.
        Some(b) => Ad::Blocks(ShortAd::of_image(hdr.len(), b)),
        None => long_associated_data(cover, hdr, order, wire),
    }
}

/// [`associated_data`] of a long header (or one in the other byte order): its image written
/// out.
#[cold]
#[inline(never)]
fn long_associated_data(cover: &Cover, hdr: &[u8], order: ByteOrder, wire: ByteOrder) -> Ad {
    let mut image = [0u8; MAX_HEADER];
    let n = cover.image(hdr, order, wire, &mut image);
    Ad::Image(image, n)
}

/// A message's associated data: a short header's image as its GHASH blocks, or the image.
#[derive(Clone, Copy)]
enum Ad {
    Blocks(ShortAd),
    Image([u8; MAX_HEADER], usize),
}

impl Ad {
    /// The bytes (`buf` holds them when they are blocks).
    fn bytes<'b>(&'b self, buf: &'b mut [u8; 32]) -> &'b [u8] {
        match self {
            Ad::Blocks(s) => {
                *buf = s.to_bytes();
                &buf[..s.len()]
            }
            Ad::Image(b, n) => &b[..*n],
        }
    }
}

fn nonce_bytes(counter: u64) -> Nonce {
    let mut n = [0u8; 12];
    n[4..].copy_from_slice(&counter.to_le_bytes());
    Nonce::assume_unique_for_key(n)
}

impl Seal {
    /// A seal layer with the default cipher; keys are derived at initialisation from the
    /// connection's key.
    pub fn new() -> Seal {
        Seal::with_cipher(Cipher::default())
    }

    /// A seal layer with `cipher`.
    pub fn with_cipher(cipher: Cipher) -> Seal {
        Seal {
            cipher,
            nonce: None,
            tx: None,
            rx: None,
            tx_ahead: None,
            rx_ahead: None,
            tx_counter: 0,
            rx_highest: None,
            rx_seen: 0,
        }
    }

    /// The full counter for a received low-32-bit nonce: the value nearest the next expected.
    fn reconstruct(&self, wire: u64) -> u64 {
        let expected = self.rx_highest.map_or(0, |h| h + 1);
        let delta = (wire as u32).wrapping_sub(expected as u32) as i32 as i64;
        (expected as i64 + delta).max(0) as u64
    }

    fn replayed(&self, c: u64) -> bool {
        match self.rx_highest {
            None => false,
            Some(h) if c > h => false,
            Some(h) => h - c >= REPLAY_WINDOW || self.rx_seen & (1 << (h - c)) != 0,
        }
    }

    fn mark(&mut self, c: u64) {
        match self.rx_highest {
            None => {
                self.rx_highest = Some(c);
                self.rx_seen = 1;
            }
            Some(h) if c > h => {
                let shift = c - h;
                self.rx_seen = if shift >= 64 {
                    0
                } else {
                    self.rx_seen << shift
                };
                self.rx_seen |= 1;
                self.rx_highest = Some(c);
            }
            Some(h) if h - c < REPLAY_WINDOW => self.rx_seen |= 1 << (h - c),
            Some(_) => {}
        }
    }
}

impl Layer for Seal {
    fn name(&self) -> &'static str {
        "seal"
    }

    /// The tag.
    fn trailer_len(&self) -> usize {
        TAG_LEN
    }

    /// Yes: its pre-phases (encryption, decryption) run on the fast path, as a body
    /// transform's must, and they write and check its one field (the nonce), so there is
    /// nothing to predict.
    fn predicts(&self) -> bool {
        true
    }

    fn init(&mut self, fields: &mut FieldRegistry, cx: &InitCx) {
        self.nonce = Some(fields.add_field(FieldClass::ProtoSpecific, "nonce", 32, None));
        // A connection refuses to build without keys (`needs_keys`); a layer initialised by
        // hand without them keeps none, and its pre-phases drop everything.
        let Some(k) = &cx.session else {
            return;
        };
        let (i2r, r2i) = (k.initiator_to_responder(), k.responder_to_initiator());
        let (tx, rx) = match cx.role {
            Role::Initiator => (i2r, r2i),
            Role::Responder => (r2i, i2r),
        };
        self.tx = self.cipher.key(tx);
        self.rx = self.cipher.key(rx);
        self.tx_ahead = self.tx.as_mut().and_then(|k| k.ahead(0));
        self.rx_ahead = self.rx.as_mut().and_then(|k| k.ahead(0));
    }

    fn pre_send(&self, pkt: &mut Packet<'_>) -> Verdict {
        let Some(h) = self.nonce else {
            return Verdict::Continue;
        };
        // Never in the clear: without a key nothing leaves.
        let Some(tx) = &self.tx else {
            return Verdict::Drop(DropReason::Auth);
        };
        pkt.set(h, self.tx_counter);
        let short = ShortHeader::new(pkt.header());
        let ad = associated_data(pkt, short.as_ref());
        let (_, body) = pkt.split_mut();
        let c = self.tx_counter;
        match tx.seal(self.tx_ahead.as_ref(), c, &ad, body) {
            Some(tag) => {
                // A trailer written, not content copied ([`crate::msg::copied_bytes`]).
                pkt.msg_mut().append_array(&tag);
                Verdict::Continue
            }
            // Only for bodies beyond the cipher's per-message limit (64 GiB and more).
            None => Verdict::Drop(DropReason::TooLarge),
        }
    }

    fn post_send(&mut self, _: &Hdr<'_>, _: Handoff, _: &mut Cx<'_>) {
        self.tx_counter += 1;
        self.tx_ahead = self.tx.as_mut().and_then(|k| k.ahead(self.tx_counter));
    }

    fn pre_deliver(&self, pkt: &mut Packet<'_>) -> Verdict {
        let Some(h) = self.nonce else {
            return Verdict::Continue;
        };
        let Some(rx) = &self.rx else {
            return Verdict::Drop(DropReason::Auth);
        };
        if pkt.body().len() < TAG_LEN {
            return Verdict::Drop(DropReason::Truncated);
        }
        // Authentication covers the fields (byte-order independent); padding must be zero, so
        // no bit of the header can be flipped unnoticed. A short header is loaded once for
        // both.
        let short = ShortHeader::new(pkt.header());
        let padding_is_zero = match &short {
            Some(s) => pkt.layout().short_padding_is_zero(s),
            None => pkt.layout().padding_is_zero(pkt.header()),
        };
        if !padding_is_zero {
            return Verdict::Drop(DropReason::Malformed);
        }
        let c = self.reconstruct(pkt.get(h));
        if self.replayed(c) {
            return Verdict::Drop(DropReason::Replay);
        }
        let ad = associated_data(pkt, short.as_ref());
        let (_, body) = pkt.split_mut();
        let (ct, tag) = body.split_at_mut(body.len() - TAG_LEN);
        let mut t = [0u8; TAG_LEN];
        t.copy_from_slice(tag);
        if !rx.open(self.rx_ahead.as_ref(), c, &ad, ct, t) {
            return Verdict::Drop(DropReason::Auth);
        }
        pkt.msg_mut().pop_back(TAG_LEN);
        Verdict::Continue
    }

    fn transforms_body(&self) -> bool {
        true
    }

    /// Under AES-256-GCM: its CTR keystream takes the seal back on a prefix as on the whole.
    fn can_undo_send(&self) -> bool {
        self.nonce.is_some() && self.tx.as_ref().is_some_and(Key::can_undo)
    }

    /// Decrypt the body (its tag already cut off) with the keystream of the counter it was
    /// sealed under. The nonce field carries its low 32 bits; it is the latest counter with
    /// those bits not beyond the current one. That holds while fewer than 2^32 datagrams
    /// left after it, as for the receiver's reconstruction: the copy is of a message the
    /// peer has not acknowledged, and sessions rekey after far fewer (`rekey_after`).
    fn undo_send(&self, pkt: &mut Packet<'_>) {
        let (Some(h), Some(tx)) = (self.nonce, &self.tx) else {
            return;
        };
        let back = (self.tx_counter as u32).wrapping_sub(pkt.get(h) as u32);
        let Some(c) = self.tx_counter.checked_sub(u64::from(back)) else {
            debug_assert!(false, "undo_send of a nonce this layer never sent");
            return;
        };
        let (_, body) = pkt.split_mut();
        tx.decrypt_own(self.tx_ahead.as_ref(), c, body);
    }

    fn needs_keys(&self) -> bool {
        true
    }

    /// An idle session gives back the AES-GCM work-ahead state (about 2 KiB for both
    /// directions); the next message goes through `ring`, and its post-phase builds it again.
    fn shrink(&mut self) {
        for k in [&mut self.tx, &mut self.rx].into_iter().flatten() {
            k.split = None;
        }
        self.tx_ahead = None;
        self.rx_ahead = None;
    }

    fn post_deliver(&mut self, hdr: &Hdr<'_>, _: Handoff, _: &mut Cx<'_>) {
        if let Some(h) = self.nonce {
            let c = self.reconstruct(hdr.get(h));
            self.mark(c);
            let next = self.rx_highest.map_or(0, |x| x + 1);
            if self.rx_ahead.as_ref().is_none_or(|a| a.counter() != next) {
                self.rx_ahead = self.rx.as_mut().and_then(|k| k.ahead(next));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// RFC 8439 §2.8.2: the AEAD_CHACHA20_POLY1305 test vector, through the crate we use.
    #[test]
    fn rfc8439_aead_vector() {
        let key: Vec<u8> = (0x80u8..=0x9f).collect();
        let nonce = [
            0x07, 0x00, 0x00, 0x00, 0x40, 0x41, 0x42, 0x43, 0x44, 0x45, 0x46, 0x47,
        ];
        let aad = [
            0x50, 0x51, 0x52, 0x53, 0xc0, 0xc1, 0xc2, 0xc3, 0xc4, 0xc5, 0xc6, 0xc7,
        ];
        let mut text = b"Ladies and Gentlemen of the class of '99: If I could offer you only one tip for the future, sunscreen would be it.".to_vec();
        let c = LessSafeKey::new(UnboundKey::new(&CHACHA20_POLY1305, &key).unwrap());
        let tag = c
            .seal_in_place_separate_tag(
                Nonce::assume_unique_for_key(nonce),
                Aad::from(&aad),
                &mut text,
            )
            .unwrap();
        assert_eq!(
            &text[..16],
            &[
                0xd3, 0x1a, 0x8d, 0x34, 0x64, 0x8e, 0x60, 0xdb, 0x7b, 0x86, 0xaf, 0xbc, 0x53, 0xef,
                0x7e, 0xc2
            ]
        );
        assert_eq!(
            &text[text.len() - 2..],
            &[0x61, 0x16],
            "last ciphertext bytes"
        );
        assert_eq!(
            tag.as_ref(),
            &[
                0x1a, 0xe1, 0x0b, 0x59, 0x4f, 0x09, 0xe2, 0x6a, 0x7e, 0x90, 0x2e, 0xcb, 0xd0, 0x60,
                0x06, 0x91
            ]
        );
    }

    /// A key that gave back its split cipher (an idle session) seals and opens the same bytes
    /// through `ring`, and builds the split again for the next counter.
    #[test]
    fn a_shrunk_key_gives_the_same_bytes_and_rebuilds() {
        let bytes = [9u8; 32];
        let (mut k, mut fresh) = (
            Cipher::Aes256Gcm.key(&bytes).unwrap(),
            Cipher::Aes256Gcm.key(&bytes).unwrap(),
        );
        k.split = None;
        let blocks = Ad::Blocks(ShortAd::from_bytes(b"ad").unwrap());
        let mut image = [0; MAX_HEADER];
        image[..2].copy_from_slice(b"ad");
        let image = Ad::Image(image, 2);
        for (c, ad) in (0..6u64).zip([image, blocks].into_iter().cycle()) {
            let mut a = *b"sixteen byte msg";
            let mut b = a;
            let ahead = fresh.ahead(c);
            let ta = k.seal(None, c, &ad, &mut a).unwrap();
            let tb = fresh.seal(ahead.as_ref(), c, &ad, &mut b).unwrap();
            assert_eq!((a, ta), (b, tb), "counter {c}");
            assert!(k.open(None, c, &ad, &mut a, ta));
            assert_eq!(&a, b"sixteen byte msg");
            k.split = None;
        }
        assert!(k.ahead(7).is_some() && k.split.is_some(), "rebuilt");
    }

    #[test]
    fn replay_window_marks_and_rejects() {
        let mut s = Seal::new();
        assert!(!s.replayed(5));
        s.mark(5);
        assert!(s.replayed(5));
        assert!(!s.replayed(4));
        s.mark(100);
        assert!(s.replayed(5), "too old");
        assert!(!s.replayed(99));
        s.mark(99);
        assert!(s.replayed(99));
        assert_eq!(s.reconstruct(101), 101);
        assert_eq!(s.reconstruct(98), 98);
        assert_eq!(
            s.reconstruct((1u64 << 32) + 3),
            3,
            "wraps near the expected"
        );
    }
}
