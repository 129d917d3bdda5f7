//! The AEAD implementations the `seal` layer could use, measured side by side: RustCrypto's
//! ChaCha20-Poly1305 (portable Rust, SIMD by runtime detection), `ring`'s AES-256-GCM and
//! ChaCha20-Poly1305 (assembly chosen at run time by CPU features), and `aws-lc-rs`'s
//! AES-256-GCM (AWS-LC's assembly, with its own VAES paths). Each seals and opens in
//! place with a detached 16-byte tag and 16 bytes of associated data, as `seal` does; keys are
//! set up once (key schedule, GHASH tables), outside what is measured.
//!
//! `phyllo-lab aead` runs one implementation under callgrind (`phyllo_aead_seal`,
//! `phyllo_aead_open` mark what is counted); [`time_ns`] times them in-process.

use anyhow::{anyhow, Result};
use chacha20poly1305::aead::{AeadInPlace, KeyInit};
use clap::{Args, ValueEnum};
use ring::aead::{Aad, LessSafeKey, Nonce, Tag, UnboundKey, AES_256_GCM, CHACHA20_POLY1305};
use std::time::Instant;

/// An AEAD implementation.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum Impl {
    /// RustCrypto `chacha20poly1305`.
    RustcryptoChacha,
    /// `ring` AES-256-GCM.
    RingAes,
    /// `ring` ChaCha20-Poly1305.
    RingChacha,
    /// phyllo's AES-256-GCM split at the nonce (RustCrypto `aes` and `polyval` composed in
    /// `phyllo::layers::gcm`), here without its work done ahead.
    SplitAes,
    /// `aws-lc-rs` AES-256-GCM.
    AwsLcAes,
}

impl Impl {
    /// Every implementation, in report order.
    pub const ALL: [Impl; 5] = [
        Impl::RustcryptoChacha,
        Impl::RingAes,
        Impl::RingChacha,
        Impl::SplitAes,
        Impl::AwsLcAes,
    ];

    /// The name used in figure names and tables.
    pub fn name(self) -> &'static str {
        match self {
            Impl::RustcryptoChacha => "rustcrypto-chacha20poly1305",
            Impl::RingAes => "ring-aes256gcm",
            Impl::RingChacha => "ring-chacha20poly1305",
            Impl::SplitAes => "phyllo-split-aes256gcm",
            Impl::AwsLcAes => "aws-lc-aes256gcm",
        }
    }
}

/// A keyed AEAD. One lives per measurement; its keys stay inline so no variant pays an
/// indirection the others do not.
#[allow(clippy::large_enum_variant)]
pub enum Keyed {
    /// RustCrypto.
    RustCrypto(chacha20poly1305::ChaCha20Poly1305),
    /// ring.
    Ring(LessSafeKey),
    /// phyllo's split AES-256-GCM.
    Split(Box<phyllo::layers::gcm::Gcm>),
    /// aws-lc-rs.
    AwsLc(aws_lc_rs::aead::LessSafeKey),
}

impl Keyed {
    /// `which`, keyed with a fixed test key.
    pub fn new(which: Impl) -> Result<Keyed> {
        let key = [7u8; 32];
        Ok(match which {
            Impl::RustcryptoChacha => Keyed::RustCrypto(chacha20poly1305::ChaCha20Poly1305::new(
                chacha20poly1305::Key::from_slice(&key),
            )),
            Impl::RingAes => Keyed::Ring(LessSafeKey::new(
                UnboundKey::new(&AES_256_GCM, &key).map_err(|_| anyhow!("ring key"))?,
            )),
            Impl::RingChacha => Keyed::Ring(LessSafeKey::new(
                UnboundKey::new(&CHACHA20_POLY1305, &key).map_err(|_| anyhow!("ring key"))?,
            )),
            Impl::SplitAes => Keyed::Split(Box::new(phyllo::layers::gcm::Gcm::new(&key))),
            Impl::AwsLcAes => Keyed::AwsLc(aws_lc_rs::aead::LessSafeKey::new(
                aws_lc_rs::aead::UnboundKey::new(&aws_lc_rs::aead::AES_256_GCM, &key)
                    .map_err(|_| anyhow!("aws-lc-rs key"))?,
            )),
        })
    }

    /// Seal `data` in place under the counter `n`; the tag.
    pub fn seal(&self, n: u64, ad: &[u8], data: &mut [u8]) -> [u8; 16] {
        let nonce = nonce(n);
        let mut tag = [0u8; 16];
        match self {
            Keyed::RustCrypto(c) => {
                if let Ok(t) = c.encrypt_in_place_detached(
                    chacha20poly1305::Nonce::from_slice(&nonce),
                    ad,
                    data,
                ) {
                    tag.copy_from_slice(&t);
                }
            }
            Keyed::Ring(k) => {
                if let Ok(t) = k.seal_in_place_separate_tag(
                    Nonce::assume_unique_for_key(nonce),
                    Aad::from(ad),
                    data,
                ) {
                    tag.copy_from_slice(t.as_ref());
                }
            }
            Keyed::Split(g) => {
                if let Ok(t) = g.seal(None, n, ad, data) {
                    tag = t;
                }
            }
            Keyed::AwsLc(k) => {
                use aws_lc_rs::aead as lc;
                if let Ok(t) = k.seal_in_place_separate_tag(
                    lc::Nonce::assume_unique_for_key(nonce),
                    lc::Aad::from(ad),
                    data,
                ) {
                    tag.copy_from_slice(t.as_ref());
                }
            }
        }
        tag
    }

    /// Open `data` in place; whether the tag verified.
    pub fn open(&self, n: u64, ad: &[u8], data: &mut [u8], tag: &[u8; 16]) -> bool {
        let nonce = nonce(n);
        match self {
            Keyed::RustCrypto(c) => c
                .decrypt_in_place_detached(
                    chacha20poly1305::Nonce::from_slice(&nonce),
                    ad,
                    data,
                    chacha20poly1305::Tag::from_slice(tag),
                )
                .is_ok(),
            Keyed::Ring(k) => k
                .open_in_place_separate_tag(
                    Nonce::assume_unique_for_key(nonce),
                    Aad::from(ad),
                    Tag::from(*tag),
                    data,
                    0..,
                )
                .is_ok(),
            Keyed::Split(g) => g.open(None, n, ad, data, tag),
            Keyed::AwsLc(k) => {
                use aws_lc_rs::aead as lc;
                k.open_in_place_separate_tag(
                    lc::Nonce::assume_unique_for_key(nonce),
                    lc::Aad::from(ad),
                    tag,
                    data,
                )
                .is_ok()
            }
        }
    }
}

fn nonce(n: u64) -> [u8; 12] {
    let mut b = [0u8; 12];
    b[4..].copy_from_slice(&n.to_le_bytes());
    b
}

/// One seal, as one function: what `--toggle-collect=phyllo_aead_seal` counts.
#[inline(never)]
#[no_mangle]
pub fn phyllo_aead_seal(k: &Keyed, n: u64, ad: &[u8], data: &mut [u8]) -> [u8; 16] {
    k.seal(n, ad, data)
}

/// One open (`--toggle-collect=phyllo_aead_open`).
#[inline(never)]
#[no_mangle]
pub fn phyllo_aead_open(k: &Keyed, n: u64, ad: &[u8], data: &mut [u8], tag: &[u8; 16]) -> bool {
    k.open(n, ad, data, tag)
}

/// `phyllo-lab aead` options.
#[derive(Args, Debug)]
pub struct AeadArgs {
    /// The implementation.
    #[arg(long = "impl", value_enum)]
    pub which: Impl,
    /// Message bytes.
    #[arg(long, default_value_t = 8)]
    pub size: usize,
    /// Seal + open pairs.
    #[arg(long, default_value_t = 1000)]
    pub rounds: u64,
}

/// `phyllo-lab aead`: seal and open `rounds` messages (for callgrind), checking each opens.
pub fn main(args: AeadArgs) -> Result<()> {
    let k = Keyed::new(args.which)?;
    let ad = [0x5au8; 16];
    let mut data = vec![0x42u8; args.size];
    for n in 0..args.rounds {
        let tag = phyllo_aead_seal(&k, n, &ad, &mut data);
        if !phyllo_aead_open(&k, n, &ad, &mut data, &tag) {
            return Err(anyhow!("{}: message {n} did not open", args.which.name()));
        }
    }
    println!(
        "{} {} B: {} seal+open",
        args.which.name(),
        args.size,
        args.rounds
    );
    Ok(())
}

/// Nanoseconds per seal and per open of `size`-byte messages: `blocks` blocks of `per_block`
/// seals (each of its own message and nonce) and then the opens of those messages; the
/// median block of each.
pub fn time_ns(which: Impl, size: usize, blocks: usize, per_block: usize) -> Result<(f64, f64)> {
    let k = Keyed::new(which)?;
    let ad = [0x5au8; 16];
    let mut msgs = vec![vec![0x42u8; size]; per_block];
    let mut tags = vec![[0u8; 16]; per_block];
    let (mut seal, mut open) = (Vec::new(), Vec::new());
    for b in 0..blocks {
        let base = (b * per_block) as u64;
        let t0 = Instant::now();
        for (i, (m, t)) in msgs.iter_mut().zip(&mut tags).enumerate() {
            *t = phyllo_aead_seal(&k, base + i as u64, &ad, m);
        }
        let t1 = Instant::now();
        let mut ok = true;
        for (i, (m, t)) in msgs.iter_mut().zip(&tags).enumerate() {
            ok &= phyllo_aead_open(&k, base + i as u64, &ad, m, t);
        }
        let t2 = Instant::now();
        if !ok {
            return Err(anyhow!("{}: open failed", which.name()));
        }
        seal.push((t1 - t0).as_nanos() as f64 / per_block as f64);
        open.push((t2 - t1).as_nanos() as f64 / per_block as f64);
    }
    let med = |v: &mut Vec<f64>| {
        v.sort_by(f64::total_cmp);
        v[v.len() / 2]
    };
    Ok((med(&mut seal), med(&mut open)))
}
