//! Handshake MACs and the stateless cookie reply: how a responder under load makes an
//! initiator prove its address before paying for Diffie-Hellman.
//!
//! Not from a seed paper; WireGuard's denial-of-service defence (its paper, §5.3 and §5.4.7),
//! applied to the initiations of [`super`]:
//!
//! - **mac1**, keyed by a hash of the responder's static public key, ends every initiation.
//!   Anyone who knows whom they talk to can compute it; a responder checks it with one keyed
//!   BLAKE2s and drops junk before any Diffie-Hellman.
//! - **mac2**, keyed by a *cookie*, follows it. Normally it is zero and ignored. Under load the
//!   responder requires a valid one, and answers an initiation without it by a **cookie
//!   reply**: `MAC(secret, source address)` — a secret that rotates every two minutes, so the
//!   responder keeps no state per initiator — encrypted (XChaCha20-Poly1305, keyed by another
//!   hash of its public key, with the initiation's mac1 as associated data, so only the
//!   initiator that sent it can use it). An initiator at a real address retries with mac2 and
//!   gets through; a flood from spoofed addresses never sees its cookies and costs the
//!   responder one MAC and one small encryption per datagram, with a reply smaller than the
//!   request (no amplification).

use crate::time::Time;
use blake2::digest::consts::U16;
use blake2::digest::{FixedOutput, KeyInit, Update};
use blake2::{Blake2s256, Blake2sMac, Digest};
use chacha20poly1305::aead::AeadInPlace;
use chacha20poly1305::{XChaCha20Poly1305, XNonce};
use std::net::{IpAddr, SocketAddr};
use std::time::Duration;

/// Bytes of a MAC.
pub const MAC_LEN: usize = 16;
/// Bytes the two MACs add to an initiation.
pub const MACS_LEN: usize = 2 * MAC_LEN;
/// Message type of a cookie reply.
pub const COOKIE_REPLY: u8 = 3;
/// A cookie reply: type, the initiator's index, a 24-byte nonce, the sealed cookie.
pub const COOKIE_REPLY_LEN: usize = 1 + 4 + 24 + MAC_LEN + 16;
/// How long a cookie secret (and a cookie an initiator holds) stays valid.
pub const COOKIE_LIFETIME: Duration = Duration::from_secs(120);

const LABEL_MAC1: &[u8] = b"mac1----";
const LABEL_COOKIE: &[u8] = b"cookie--";

type Mac16 = Blake2sMac<U16>;

fn hash_label(label: &[u8], public: &[u8; 32]) -> [u8; 32] {
    let mut h = Blake2s256::new();
    Digest::update(&mut h, label);
    Digest::update(&mut h, public);
    h.finalize().into()
}

fn mac(key: &[u8], parts: &[&[u8]]) -> [u8; MAC_LEN] {
    // A BLAKE2s key is at most 32 bytes; every key here is 16 or 32.
    let mut m = <Mac16 as KeyInit>::new_from_slice(key)
        .unwrap_or_else(|_| unreachable!("BLAKE2s keys of 16 and 32 bytes are valid"));
    for p in parts {
        Update::update(&mut m, p);
    }
    m.finalize_fixed().into()
}

/// The keys derived from a responder's static public key: what initiators use to reach it.
#[derive(Clone)]
pub struct ResponderMacKeys {
    mac1: [u8; 32],
    cookie: [u8; 32],
}

impl ResponderMacKeys {
    /// The keys for the responder whose static public key is `public`.
    pub fn new(public: &[u8; 32]) -> ResponderMacKeys {
        ResponderMacKeys {
            mac1: hash_label(LABEL_MAC1, public),
            cookie: hash_label(LABEL_COOKIE, public),
        }
    }

    /// Append mac1 and mac2 (a MAC under `cookie` when the initiator holds one, else zeros)
    /// to the handshake message `msg`.
    pub fn append_macs(&self, msg: &mut Vec<u8>, cookie: Option<&[u8; MAC_LEN]>) {
        let m1 = mac(&self.mac1, &[msg]);
        msg.extend_from_slice(&m1);
        let m2 = cookie.map_or([0; MAC_LEN], |c| mac(c, &[msg]));
        msg.extend_from_slice(&m2);
    }

    /// Split a message into (handshake message, mac1, mac2) if mac1 is valid.
    pub fn check_mac1<'a>(&self, msg: &'a [u8]) -> Option<(&'a [u8], &'a [u8], &'a [u8])> {
        let body_len = msg.len().checked_sub(MACS_LEN)?;
        let (body, macs) = msg.split_at(body_len);
        let (m1, m2) = macs.split_at(MAC_LEN);
        let want = mac(&self.mac1, &[body]);
        bool::from(subtle::ConstantTimeEq::ct_eq(&want[..], m1)).then_some((body, m1, m2))
    }

    /// Open a cookie reply to the initiation whose mac1 was `mac1`: the cookie, or `None` if
    /// the reply is malformed or does not authenticate.
    pub fn open_cookie_reply(&self, reply: &[u8], mac1: &[u8]) -> Option<[u8; MAC_LEN]> {
        if reply.len() != COOKIE_REPLY_LEN || reply[0] != COOKIE_REPLY {
            return None;
        }
        let nonce = XNonce::from_slice(&reply[5..29]);
        let mut cookie: [u8; MAC_LEN] = reply[29..29 + MAC_LEN].try_into().ok()?;
        let tag = chacha20poly1305::Tag::from_slice(&reply[29 + MAC_LEN..]);
        XChaCha20Poly1305::new((&self.cookie).into())
            .decrypt_in_place_detached(nonce, mac1, &mut cookie, tag)
            .ok()?;
        Some(cookie)
    }
}

/// The responder's rotating cookie secret.
pub struct CookieJar {
    keys: ResponderMacKeys,
    secret: [u8; 32],
    rotated: Option<Time>,
}

impl CookieJar {
    /// A jar for the responder with static public key `public`.
    pub fn new(public: &[u8; 32]) -> CookieJar {
        CookieJar {
            keys: ResponderMacKeys::new(public),
            secret: [0; 32],
            rotated: None,
        }
    }

    /// The MAC keys of this responder.
    pub fn keys(&self) -> &ResponderMacKeys {
        &self.keys
    }

    /// The cookie of `addr` at `now`; `fresh` supplies a new secret every
    /// [`COOKIE_LIFETIME`].
    fn cookie(
        &mut self,
        now: Time,
        addr: SocketAddr,
        fresh: impl FnOnce() -> [u8; 32],
    ) -> [u8; 16] {
        if self.rotated.is_none_or(|t| now.since(t) >= COOKIE_LIFETIME) {
            self.secret = fresh();
            self.rotated = Some(now);
        }
        let ip = match addr.ip() {
            IpAddr::V4(a) => a.to_ipv6_mapped().octets(),
            IpAddr::V6(a) => a.octets(),
        };
        mac(&self.secret, &[&ip, &addr.port().to_le_bytes()])
    }

    /// Whether `mac2` is the MAC of `body_and_mac1` under the current cookie of `addr`.
    pub fn check_mac2(
        &mut self,
        now: Time,
        addr: SocketAddr,
        body_and_mac1: &[u8],
        mac2: &[u8],
        fresh: impl FnOnce() -> [u8; 32],
    ) -> bool {
        let c = self.cookie(now, addr, fresh);
        let want = mac(&c, &[body_and_mac1]);
        bool::from(subtle::ConstantTimeEq::ct_eq(&want[..], mac2))
    }

    /// The cookie reply to an initiation from `addr` under initiator index `index` whose
    /// mac1 was `mac1`; `nonce` must be fresh (random).
    pub fn reply(
        &mut self,
        now: Time,
        addr: SocketAddr,
        index: [u8; 4],
        mac1: &[u8],
        nonce: [u8; 24],
        fresh: impl FnOnce() -> [u8; 32],
    ) -> Vec<u8> {
        let mut cookie = self.cookie(now, addr, fresh);
        let tag = XChaCha20Poly1305::new((&self.keys.cookie).into())
            .encrypt_in_place_detached(XNonce::from_slice(&nonce), mac1, &mut cookie)
            .unwrap_or_else(|_| unreachable!("16 bytes are within XChaCha20-Poly1305's limit"));
        let mut out = Vec::with_capacity(COOKIE_REPLY_LEN);
        out.push(COOKIE_REPLY);
        out.extend_from_slice(&index);
        out.extend_from_slice(&nonce);
        out.extend_from_slice(&cookie);
        out.extend_from_slice(&tag);
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_initiator_with_the_cookie_of_its_address_passes_mac2_and_no_other() {
        let public = [7u8; 32];
        let mut jar = CookieJar::new(&public);
        let keys = ResponderMacKeys::new(&public);
        let addr: SocketAddr = "10.0.0.1:4000".parse().unwrap();
        let other: SocketAddr = "10.0.0.2:4000".parse().unwrap();
        let now = Time::ZERO;
        let mut msg = b"an initiation".to_vec();
        keys.append_macs(&mut msg, None);
        let (body, m1, m2) = jar.keys().check_mac1(&msg).unwrap();
        let with_m1 = &msg[..body.len() + MAC_LEN];
        assert!(!jar.check_mac2(now, addr, with_m1, m2, || [1; 32]));
        let reply = jar.reply(now, addr, [1, 2, 3, 4], m1, [9; 24], || [1; 32]);
        assert_eq!(reply.len(), COOKIE_REPLY_LEN);
        let cookie = keys.open_cookie_reply(&reply, m1).unwrap();
        // Another initiation's mac1 does not open it; a flipped bit does not either.
        assert!(keys.open_cookie_reply(&reply, &[0; 16]).is_none());
        let mut bad = reply.clone();
        bad[40] ^= 1;
        assert!(keys.open_cookie_reply(&bad, m1).is_none());
        let mut again = b"an initiation".to_vec();
        keys.append_macs(&mut again, Some(&cookie));
        let (body, _, m2) = jar.keys().check_mac1(&again).unwrap();
        let with_m1 = &again[..body.len() + MAC_LEN];
        assert!(jar.check_mac2(now, addr, with_m1, m2, || [1; 32]));
        assert!(!jar.check_mac2(now, other, with_m1, m2, || [1; 32]));
        // After the secret rotates the old cookie is worthless.
        let later = now + COOKIE_LIFETIME;
        assert!(!jar.check_mac2(later, addr, with_m1, m2, || [2; 32]));
    }

    #[test]
    fn mac1_needs_the_responders_public_key() {
        let mut msg = b"hello".to_vec();
        ResponderMacKeys::new(&[1; 32]).append_macs(&mut msg, None);
        assert!(ResponderMacKeys::new(&[1; 32]).check_mac1(&msg).is_some());
        assert!(ResponderMacKeys::new(&[2; 32]).check_mac1(&msg).is_none());
        assert!(ResponderMacKeys::new(&[1; 32])
            .check_mac1(&msg[..msg.len() - 1])
            .is_none());
    }
}
