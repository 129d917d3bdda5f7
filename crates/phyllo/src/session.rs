//! Sessions: an authenticated key exchange that gives every session fresh keys.
//!
//! Not from a seed paper: the sealed stack that users deploy needs what WireGuard and QUIC
//! take for granted. The handshake is Noise IK (`Noise_IK_25519_ChaChaPoly_BLAKE2s`, through
//! the `snow` crate), as WireGuard's: the initiator knows the responder's static public key
//! beforehand, sends its own static key encrypted in the first message, and both ends hold
//! the session's keys after one round trip. The responder accepts only peers whose public keys
//! it was given.
//!
//! Every session's keys come from fresh ephemeral Diffie-Hellman, so no (key, nonce) pair of
//! one session can occur in another, and nothing recorded in one session authenticates in
//! another. A recorded first message cannot start a session again: it carries a timestamp
//! (the caller's clock, as WireGuard's TAI64N), encrypted and authenticated under the
//! initiator's static key, and the responder accepts from each peer only timestamps greater
//! than the last it accepted. A lost message is recovered by a new initiation (new ephemeral
//! key, new timestamp), not by resending the old one, which the responder would refuse.
//!
//! The session's two keys are Noise's split of the final chaining key, taken raw
//! (`snow`'s `risky-raw-split`): phyllo's `seal` layer, not Noise's transport messages,
//! carries the data, so that the accelerator's compact headers and predicted nonces apply to
//! the sealed stack.
//!
//! Sans-IO: the caller moves the messages and supplies the time. The wire format of the two
//! messages: a type byte (1: initiation, 2: response), a session index (4 bytes,
//! little-endian: the initiator's, in both, so each side finds its half), then the Noise
//! message. Each side's own index travels in its Noise payload, authenticated; the
//! initiation's copy in the clear must agree with it.
//!
//! What both ends must agree on besides keys — the session endpoint puts its stack and
//! whether the accelerator frames its datagrams there ([`crate::endpoint`]) — is Noise's
//! prologue: an initiation whose prologue differs from the responder's fails authentication,
//! so two ends that could not read each other's datagrams never hold a session.

pub mod mac;

use crate::layer::{DirectionKeys, Role};
use snow::params::NoiseParams;
use std::collections::HashMap;
use std::fmt;
use thiserror::Error;

/// The Noise protocol name.
pub const NOISE_PARAMS: &str = "Noise_IK_25519_ChaChaPoly_BLAKE2s";

/// Message type of an initiation.
pub(crate) const INITIATION: u8 = 1;
/// Message type of a response.
pub(crate) const RESPONSE: u8 = 2;
/// Bytes of the timestamp an initiation carries.
const TIMESTAMP_LEN: usize = 12;
/// Bytes of an initiation's payload: timestamp, the initiator's index, the responder's index
/// of the session it replaces (0: none).
const PAYLOAD_LEN: usize = TIMESTAMP_LEN + 8;
/// Largest handshake message (Noise IK: 32 + 48 + 12 + 16 for the first, 48 for the second).
const MAX_NOISE: usize = 256;

/// Why a handshake step failed. Every failure leaves the receiving side as it was.
#[derive(Debug, Error, PartialEq, Eq)]
pub enum HandshakeError {
    /// Too short, too long, or not the expected message type.
    #[error("malformed handshake message")]
    Malformed,
    /// The Noise message did not decrypt or authenticate.
    #[error("handshake message failed authentication")]
    Auth,
    /// The initiator's static key is not among the allowed peers.
    #[error("unknown peer {0}")]
    UnknownPeer(PublicKey),
    /// An initiation whose timestamp is not newer than the peer's last accepted one.
    #[error("replayed or stale initiation")]
    Replay,
    /// A response to another initiation.
    #[error("response to another initiation")]
    WrongSession,
    /// The key material could not be used (wrong length, bad parameters).
    #[error("bad key: {0}")]
    BadKey(String),
}

impl From<snow::Error> for HandshakeError {
    fn from(e: snow::Error) -> Self {
        match e {
            // A damaged ephemeral key fails the Diffie-Hellman step, like a damaged tag.
            snow::Error::Decrypt | snow::Error::Dh => HandshakeError::Auth,
            snow::Error::Input => HandshakeError::Malformed,
            other => HandshakeError::BadKey(other.to_string()),
        }
    }
}

fn params() -> NoiseParams {
    // The constant names a protocol snow implements; a failure here is a build defect that the
    // tests catch at once.
    NOISE_PARAMS
        .parse()
        .unwrap_or_else(|_| unreachable!("snow parses {NOISE_PARAMS}"))
}

/// A Curve25519 public key.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct PublicKey(pub [u8; 32]);

/// 32 bytes as 64 hexadecimal digits.
fn hex(bytes: &[u8; 32]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

impl fmt::Display for PublicKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&hex(&self.0))
    }
}

impl fmt::Debug for PublicKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "PublicKey({self})")
    }
}

/// A key file or key string could not be read.
#[derive(Debug, Error, PartialEq, Eq)]
pub enum KeyParseError {
    /// Not 64 hexadecimal digits.
    #[error("a key is 64 hexadecimal digits (32 bytes); found {0} characters")]
    Length(usize),
    /// A character that is not a hexadecimal digit.
    #[error("not a hexadecimal digit at position {0}")]
    Digit(usize),
}

/// 32 bytes from 64 hexadecimal digits (surrounding white space ignored).
pub fn parse_key_hex(s: &str) -> Result<[u8; 32], KeyParseError> {
    let s = s.trim();
    if s.len() != 64 {
        return Err(KeyParseError::Length(s.chars().count()));
    }
    let mut out = [0u8; 32];
    let digits = s.as_bytes();
    for (i, byte) in out.iter_mut().enumerate() {
        let nibble = |k: usize| {
            (digits[k] as char)
                .to_digit(16)
                .map(|d| d as u8)
                .ok_or(KeyParseError::Digit(k))
        };
        *byte = nibble(2 * i)? << 4 | nibble(2 * i + 1)?;
    }
    Ok(out)
}

/// This end's static key pair.
#[derive(Clone)]
pub struct StaticKey {
    private: [u8; 32],
    public: PublicKey,
}

impl fmt::Debug for StaticKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "StaticKey {{ public: {}, private: <hidden> }}",
            self.public
        )
    }
}

impl StaticKey {
    /// A new random key pair.
    pub fn generate() -> Result<StaticKey, HandshakeError> {
        let kp = snow::Builder::new(params()).generate_keypair()?;
        Self::from_parts(&kp.private, &kp.public)
    }

    /// The key pair of a private key.
    pub fn from_private(private: [u8; 32]) -> Result<StaticKey, HandshakeError> {
        // The public key is what a handshake with it shows the peer: derive it by X25519 of
        // the base point, through snow's resolver (no second curve implementation).
        let public = x25519_public(&private)?;
        Ok(StaticKey {
            private,
            public: PublicKey(public),
        })
    }

    fn from_parts(private: &[u8], public: &[u8]) -> Result<StaticKey, HandshakeError> {
        let bad = || HandshakeError::BadKey("key pair of the wrong length".into());
        Ok(StaticKey {
            private: private.try_into().map_err(|_| bad())?,
            public: PublicKey(public.try_into().map_err(|_| bad())?),
        })
    }

    /// The public half.
    pub fn public(&self) -> PublicKey {
        self.public
    }

    /// The private half as 64 hexadecimal digits (for a key file).
    pub fn private_hex(&self) -> String {
        hex(&self.private)
    }
}

/// The public key of `private`.
fn x25519_public(private: &[u8; 32]) -> Result<[u8; 32], HandshakeError> {
    use snow::resolvers::{CryptoResolver, DefaultResolver};
    let mut dh = DefaultResolver
        .resolve_dh(&snow::params::DHChoice::Curve25519)
        .ok_or_else(|| HandshakeError::BadKey("no Curve25519".into()))?;
    dh.set(private);
    dh.pubkey()
        .try_into()
        .map_err(|_| HandshakeError::BadKey("public key of the wrong length".into()))
}

/// A session's keys, one per direction, and who the peer is.
///
/// Not `Clone`: the keys key one connection ([`crate::Config::with_session`] takes them), and
/// a second connection under them would repeat its (key, nonce) pairs.
#[derive(PartialEq, Eq)]
pub struct SessionKeys {
    /// The two keys, one per direction (what `seal` takes: [`crate::Config::with_session`]).
    pub(crate) keys: DirectionKeys,
    /// This end's role in the handshake (the connection's role).
    pub role: Role,
    /// The peer's static public key.
    pub peer: PublicKey,
    /// This end's session index.
    pub local_index: u32,
    /// The peer's session index.
    pub peer_index: u32,
    /// At the responder: the responder's session index that the initiator says this session
    /// replaces (a rekey), authenticated; `None` from an initiator with no session to replace
    /// (a first contact, or a restarted process). Always `None` at the initiator.
    pub replaces: Option<u32>,
}

impl SessionKeys {
    /// The two keys, one per direction (to read; only [`crate::Config::with_session`] turns
    /// them into a connection's).
    pub fn keys(&self) -> &DirectionKeys {
        &self.keys
    }
}

impl fmt::Debug for SessionKeys {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SessionKeys")
            .field("role", &self.role)
            .field("peer", &self.peer)
            .field("local_index", &self.local_index)
            .field("peer_index", &self.peer_index)
            .finish_non_exhaustive()
    }
}

/// An initiation in flight: the initiator's side of one handshake.
pub struct Initiation {
    hs: snow::HandshakeState,
    peer: PublicKey,
    index: u32,
}

impl fmt::Debug for Initiation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Initiation")
            .field("peer", &self.peer)
            .field("index", &self.index)
            .finish_non_exhaustive()
    }
}

impl Initiation {
    /// Start a handshake with the responder whose static key is `peer`, under session
    /// index `index` (the caller's, unique among its sessions); `timestamp`: a value that
    /// grows with every initiation this static key makes to this peer (nanoseconds of wall
    /// time, say). Returns the initiation and the first message.
    pub fn start(
        local: &StaticKey,
        peer: PublicKey,
        index: u32,
        timestamp: u128,
    ) -> Result<(Initiation, Vec<u8>), HandshakeError> {
        Self::start_replacing(local, peer, index, timestamp, None, &[])
    }

    /// [`start`](Self::start) a handshake that replaces the session the responder knows as
    /// `replaces` (its own index): a rekey, which the responder retires gracefully, where a
    /// handshake replacing nothing tells it that any session it holds with this peer is dead.
    /// `prologue`: what the two ends must agree on (the responder's
    /// [`with_prologue`](Responder::with_prologue); empty for [`start`](Self::start)).
    pub fn start_replacing(
        local: &StaticKey,
        peer: PublicKey,
        index: u32,
        timestamp: u128,
        replaces: Option<u32>,
        prologue: &[u8],
    ) -> Result<(Initiation, Vec<u8>), HandshakeError> {
        let mut hs = snow::Builder::new(params())
            .prologue(prologue)?
            .local_private_key(&local.private)?
            .remote_public_key(&peer.0)?
            .build_initiator()?;
        let mut msg = vec![0u8; 5 + MAX_NOISE];
        msg[0] = INITIATION;
        msg[1..5].copy_from_slice(&index.to_le_bytes());
        // The payload, encrypted and authenticated: the timestamp and the index (the
        // header's copy only routes).
        let mut payload = [0u8; PAYLOAD_LEN];
        payload[..TIMESTAMP_LEN].copy_from_slice(&timestamp.to_be_bytes()[16 - TIMESTAMP_LEN..]);
        payload[TIMESTAMP_LEN..TIMESTAMP_LEN + 4].copy_from_slice(&index.to_le_bytes());
        // Index 0 is never a session's (the endpoint does not hand it out): it means none.
        payload[TIMESTAMP_LEN + 4..].copy_from_slice(&replaces.unwrap_or(0).to_le_bytes());
        let n = hs.write_message(&payload, &mut msg[5..])?;
        msg.truncate(5 + n);
        Ok((Initiation { hs, peer, index }, msg))
    }

    /// This initiation's session index.
    pub fn index(&self) -> u32 {
        self.index
    }

    /// Finish with the responder's message. On an error the initiation stays usable (a
    /// forged or damaged response does not end it).
    pub fn finish(&mut self, msg: &[u8]) -> Result<SessionKeys, HandshakeError> {
        let (ty, receiver, noise) = match msg {
            [ty, s @ ..] if s.len() >= 4 => (*ty, &s[..4], &s[4..]),
            _ => return Err(HandshakeError::Malformed),
        };
        if ty != RESPONSE || noise.len() > MAX_NOISE {
            return Err(HandshakeError::Malformed);
        }
        if u32::from_le_bytes(receiver.try_into().map_err(|_| HandshakeError::Malformed)?)
            != self.index
        {
            return Err(HandshakeError::WrongSession);
        }
        // snow's state advances only when the message authenticates; a failed read leaves
        // it as it was, so the next (genuine) response still completes.
        let mut payload = [0u8; MAX_NOISE];
        let n = self.hs.read_message(noise, &mut payload)?;
        // The responder's index, authenticated.
        let peer_index: [u8; 4] = payload[..n]
            .try_into()
            .map_err(|_| HandshakeError::Malformed)?;
        let (i2r, r2i) = self.hs.dangerously_get_raw_split();
        Ok(SessionKeys {
            keys: DirectionKeys::new(i2r, r2i),
            role: Role::Initiator,
            peer: self.peer,
            local_index: self.index,
            peer_index: u32::from_le_bytes(peer_index),
            replaces: None,
        })
    }
}

/// The responder's side: answers initiations from allowed peers.
pub struct Responder {
    local: StaticKey,
    /// Allowed peers, with the newest timestamp accepted from each.
    peers: HashMap<PublicKey, Option<[u8; TIMESTAMP_LEN]>>,
    /// Noise's prologue: what initiators must agree on.
    prologue: Vec<u8>,
}

impl fmt::Debug for Responder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Responder")
            .field("local", &self.local.public)
            .field("peers", &self.peers.len())
            .finish()
    }
}

impl Responder {
    /// A responder with `local` keys accepting the peers `allowed`.
    pub fn new(local: StaticKey, allowed: impl IntoIterator<Item = PublicKey>) -> Responder {
        Responder {
            local,
            peers: allowed.into_iter().map(|p| (p, None)).collect(),
            prologue: Vec::new(),
        }
    }

    /// Accept only initiations made with this `prologue`
    /// ([`Initiation::start_replacing`]); empty unless set.
    pub fn with_prologue(mut self, prologue: &[u8]) -> Responder {
        self.prologue = prologue.to_vec();
        self
    }

    /// This responder's static public key (what initiators must know).
    pub fn public(&self) -> PublicKey {
        self.local.public
    }

    /// Answer an initiation under session index `index`: the session's keys and the
    /// response to send. Nothing changes unless the initiation authenticates, comes from an
    /// allowed peer and is newer than the last one accepted from it.
    pub fn respond(
        &mut self,
        msg: &[u8],
        index: u32,
    ) -> Result<(SessionKeys, Vec<u8>), HandshakeError> {
        let (ty, sender, noise) = match msg {
            [ty, s @ ..] if s.len() >= 4 => (*ty, &s[..4], &s[4..]),
            _ => return Err(HandshakeError::Malformed),
        };
        if ty != INITIATION || noise.len() > MAX_NOISE {
            return Err(HandshakeError::Malformed);
        }
        let mut hs = snow::Builder::new(params())
            .prologue(&self.prologue)?
            .local_private_key(&self.local.private)?
            .build_responder()?;
        let mut payload = [0u8; MAX_NOISE];
        let n = hs.read_message(noise, &mut payload)?;
        let peer = hs
            .get_remote_static()
            .and_then(|k| <[u8; 32]>::try_from(k).ok())
            .map(PublicKey)
            .ok_or(HandshakeError::Malformed)?;
        let Some(last) = self.peers.get(&peer) else {
            return Err(HandshakeError::UnknownPeer(peer));
        };
        if n != PAYLOAD_LEN || payload[TIMESTAMP_LEN..TIMESTAMP_LEN + 4] != *sender {
            return Err(HandshakeError::Malformed);
        }
        let replaces = u32::from_le_bytes(
            payload[TIMESTAMP_LEN + 4..PAYLOAD_LEN]
                .try_into()
                .map_err(|_| HandshakeError::Malformed)?,
        );
        let ts: [u8; TIMESTAMP_LEN] = payload[..TIMESTAMP_LEN]
            .try_into()
            .map_err(|_| HandshakeError::Malformed)?;
        // Big-endian, so byte order is numeric order.
        if last.is_some_and(|last| ts <= last) {
            return Err(HandshakeError::Replay);
        }
        let mut out = vec![0u8; 5 + MAX_NOISE];
        out[0] = RESPONSE;
        out[1..5].copy_from_slice(sender);
        let m = hs.write_message(&index.to_le_bytes(), &mut out[5..])?;
        out.truncate(5 + m);
        let (i2r, r2i) = hs.dangerously_get_raw_split();
        self.peers.insert(peer, Some(ts));
        let keys = SessionKeys {
            keys: DirectionKeys::new(i2r, r2i),
            role: Role::Responder,
            peer,
            local_index: index,
            peer_index: u32::from_le_bytes(
                sender.try_into().map_err(|_| HandshakeError::Malformed)?,
            ),
            replaces: (replaces != 0).then_some(replaces),
        };
        Ok((keys, out))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashSet;

    fn pair() -> (StaticKey, StaticKey) {
        (
            StaticKey::generate().unwrap(),
            StaticKey::generate().unwrap(),
        )
    }

    #[test]
    fn one_round_trip_gives_both_ends_the_same_fresh_keys() {
        let (a, b) = pair();
        let mut r = Responder::new(b.clone(), [a.public()]);
        let (mut i, m1) = Initiation::start(&a, b.public(), 7, 1).unwrap();
        let (kb, m2) = r.respond(&m1, 9).unwrap();
        let ka = i.finish(&m2).unwrap();
        assert_eq!(
            ka.keys.initiator_to_responder(),
            kb.keys.initiator_to_responder()
        );
        assert_eq!(
            ka.keys.responder_to_initiator(),
            kb.keys.responder_to_initiator()
        );
        assert_ne!(
            ka.keys.initiator_to_responder(),
            ka.keys.responder_to_initiator()
        );
        assert_eq!((ka.peer, kb.peer), (b.public(), a.public()));
        assert_eq!((ka.local_index, ka.peer_index), (7, 9));
        assert_eq!((kb.local_index, kb.peer_index), (9, 7));
    }

    #[test]
    fn a_thousand_sessions_under_one_static_key_never_share_a_key() {
        let (a, b) = pair();
        let mut r = Responder::new(b.clone(), [a.public()]);
        let mut seen = HashSet::new();
        for n in 0..1000u32 {
            let (mut i, m1) = Initiation::start(&a, b.public(), n, u128::from(n) + 1).unwrap();
            let (_, m2) = r.respond(&m1, n).unwrap();
            let k = i.finish(&m2).unwrap();
            assert!(seen.insert(*k.keys.initiator_to_responder()), "session {n}");
            assert!(seen.insert(*k.keys.responder_to_initiator()), "session {n}");
        }
    }

    #[test]
    fn a_recorded_initiation_cannot_start_a_session_again() {
        let (a, b) = pair();
        let mut r = Responder::new(b.clone(), [a.public()]);
        let (_, m1) = Initiation::start(&a, b.public(), 1, 100).unwrap();
        r.respond(&m1, 1).unwrap();
        assert_eq!(r.respond(&m1, 2).unwrap_err(), HandshakeError::Replay);
        // An older timestamp too; a newer one is a new session.
        let (_, old) = Initiation::start(&a, b.public(), 3, 99).unwrap();
        assert_eq!(r.respond(&old, 3).unwrap_err(), HandshakeError::Replay);
        let (_, new) = Initiation::start(&a, b.public(), 4, 101).unwrap();
        assert!(r.respond(&new, 4).is_ok());
    }

    #[test]
    fn strangers_and_damaged_messages_are_refused_and_change_nothing() {
        let (a, b) = pair();
        let stranger = StaticKey::generate().unwrap();
        let mut r = Responder::new(b.clone(), [a.public()]);
        let (_, m) = Initiation::start(&stranger, b.public(), 1, 1).unwrap();
        assert_eq!(
            r.respond(&m, 1).unwrap_err(),
            HandshakeError::UnknownPeer(stranger.public())
        );
        let (mut i, m1) = Initiation::start(&a, b.public(), 5, 10).unwrap();
        for cut in 0..m1.len() {
            assert!(r.respond(&m1[..cut], 1).is_err(), "truncated to {cut}");
        }
        for bit in 0..m1.len() * 8 {
            let mut bad = m1.clone();
            bad[bit / 8] ^= 1 << (bit % 8);
            assert!(r.respond(&bad, 1).is_err(), "bit {bit}");
        }
        // None of that moved the replay state: the genuine initiation still works.
        let (_, m2) = r.respond(&m1, 6).unwrap();
        for bit in 0..m2.len() * 8 {
            let mut bad = m2.clone();
            bad[bit / 8] ^= 1 << (bit % 8);
            assert!(i.finish(&bad).is_err(), "response bit {bit}");
        }
        assert!(
            i.finish(&m2).is_ok(),
            "the genuine response after forged ones"
        );
    }

    #[test]
    fn keys_parse_from_hex_with_clear_errors() {
        let k = StaticKey::generate().unwrap();
        let again = StaticKey::from_private(parse_key_hex(&k.private_hex()).unwrap()).unwrap();
        assert_eq!(again.public(), k.public());
        assert_eq!(parse_key_hex("abc"), Err(KeyParseError::Length(3)));
        let mut s = "0".repeat(64);
        s.replace_range(5..6, "g");
        assert_eq!(parse_key_hex(&s), Err(KeyParseError::Digit(5)));
    }
}
