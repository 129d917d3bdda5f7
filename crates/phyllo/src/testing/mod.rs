//! Test support, behind the `testing` cargo feature (as smoltcp gates its fault injector):
//! deterministic drivers on a virtual clock, for property tests, benchmarks and the lab's
//! experiments. Nothing here touches a socket or a real clock, so every failure replays.
//!
//! - [`memlink`]: an in-process link with loss, duplication, reordering, corruption and delay
//!   drawn from a seed.
//! - [`Pair`]: two connections joined by a [`MemLink`]. Each [`step`](Pair::step) moves every
//!   datagram both connections want to send onto the link, hands every datagram that has
//!   arrived to its connection, runs due timers, and — when nothing is left to do at the
//!   current instant — advances the clock to the next event (an arrival or a deadline).
//! - [`net::SessionNet`]: session endpoints at addresses on one in-memory network, and an
//!   attacker who may inject anything from anywhere.
//! - [`Dumbbell`]: several connection pairs whose datagrams share one link — one
//!   [`Bottleneck`](crate::faults::Bottleneck) (rate and queue), delay, loss and jitter —
//!   with a bulk sender and per-flow goodput, so a test measures a transport's throughput,
//!   fairness and recovery on a long, narrow, lossy path without network namespaces.

pub mod dumbbell;
pub mod memlink;
pub mod net;

pub use dumbbell::{jain_index, Dumbbell};

use crate::conn::{BuildError, Config, Connection, SendError};
use crate::stack::{build_dyn, DynStack, LayerSet};
use crate::testing::memlink::{Faults, MemLink, Side};
use crate::time::{earliest, Time};

/// Two ends in one process keyed from `seed` instead of a handshake: an initiator and a
/// responder, accelerated or not, whose keys are HKDF-SHA256 of the seed (info
/// `"phyllo testing keys"`). The same seed gives the same keys, so a simulation whose
/// behaviour depends on them (the window layer draws which messages it holds back from its
/// key) replays exactly; [`Config::pair`] gives fresh keys every call.
///
/// Anyone who knows the seed knows the keys: this is for simulations, never for a network.
pub fn seeded_pair(accelerate: bool, seed: u64) -> (Config, Config) {
    use crate::layer::{DirectionKeys, Role};
    use crate::session::{PublicKey, SessionKeys};
    use hkdf::Hkdf;
    use sha2::Sha256;
    let mut okm = [0u8; 64];
    // 64 bytes are always within HKDF-SHA256's limit of 255 * 32.
    let _ = Hkdf::<Sha256>::new(None, &seed.to_le_bytes()).expand(b"phyllo testing keys", &mut okm);
    let (mut i2r, mut r2i) = ([0u8; 32], [0u8; 32]);
    i2r.copy_from_slice(&okm[..32]);
    r2i.copy_from_slice(&okm[32..]);
    let end = |role| {
        let keys = SessionKeys {
            keys: DirectionKeys::new(i2r, r2i),
            role,
            peer: PublicKey([0; 32]),
            local_index: 0,
            peer_index: 0,
            replaces: None,
        };
        Config {
            accelerate,
            ..Config::new(role)
        }
        .with_session(keys)
    };
    (end(Role::Initiator), end(Role::Responder))
}

/// Two connections over an in-memory link.
pub struct Pair<S: LayerSet = DynStack> {
    /// End A (the initiator).
    pub a: Connection<S>,
    /// End B (the responder).
    pub b: Connection<S>,
    /// The link.
    pub link: MemLink,
    /// The virtual clock.
    pub now: Time,
    /// When set, every datagram put on the link is recorded here (for differential tests).
    pub wire: Option<Vec<(Side, Vec<u8>)>>,
    buf: Vec<u8>,
}

impl Pair<DynStack> {
    /// Both ends built from `spec`, over a perfect link.
    pub fn from_spec(spec: &str) -> Result<Pair, BuildError> {
        Pair::from_spec_with(spec, MemLink::perfect())
    }

    /// Both ends built from `spec`, over `link`.
    pub fn from_spec_with(spec: &str, link: MemLink) -> Result<Pair, BuildError> {
        let (a, b) = Config::pair(false)?;
        Ok(Pair::new(
            Connection::new(build_dyn(spec)?, a)?,
            Connection::new(build_dyn(spec)?, b)?,
            link,
        ))
    }

    /// Both ends from `spec` with the Protocol Accelerator on, over `link`.
    pub fn accelerated(spec: &str, link: MemLink) -> Result<Pair, BuildError> {
        let (a, b) = Config::pair(true)?;
        Ok(Pair::new(
            Connection::new(build_dyn(spec)?, a)?,
            Connection::new(build_dyn(spec)?, b)?,
            link,
        ))
    }

    /// Both ends from `spec` over a link with `faults` drawn from `seed`.
    pub fn with_faults(spec: &str, faults: Faults, seed: u64) -> Result<Pair, BuildError> {
        Pair::from_spec_with(spec, MemLink::new(faults, seed))
    }
}

impl<S: LayerSet> Pair<S> {
    /// A pair of given connections over `link`.
    pub fn new(a: Connection<S>, b: Connection<S>, link: MemLink) -> Pair<S> {
        Pair {
            a,
            b,
            link,
            now: Time::ZERO,
            wire: None,
            buf: Vec::with_capacity(2048),
        }
    }

    /// One round of work at the current instant; if there was none, advance the clock to the
    /// next event. Returns `false` when nothing at all is pending.
    pub fn step(&mut self) -> bool {
        if self.pump() {
            return true;
        }
        match self.next_event() {
            Some(t) => {
                self.now = self.now.max(t);
                true
            }
            None => false,
        }
    }

    /// One round of work at the current instant, the clock left as it is: datagrams onto
    /// the link and off it, deferred post-processing, due timers. Whether anything was done.
    pub fn pump(&mut self) -> bool {
        let mut worked = false;
        // A's link borrows its datagrams (`transmit_with`, as the UDP driver does), B's takes
        // them (`poll_transmit`): every test runs both ways a driver may hand datagrams over.
        let (link, wire, now) = (&mut self.link, &mut self.wire, self.now);
        while self.a.transmit_ready() > 0 {
            let lent = self.a.transmit_with(usize::MAX, |queued| {
                for m in queued {
                    link.send(Side::A, now, m.data());
                    if let Some(w) = wire.as_mut() {
                        w.push((Side::A, m.data().to_vec()));
                    }
                }
                Ok::<_, std::convert::Infallible>(queued.len())
            });
            worked |= lent.is_ok_and(|n| n > 0);
        }
        while let Some(m) = self.b.poll_transmit() {
            self.link.send(Side::B, self.now, m.data());
            if let Some(w) = &mut self.wire {
                w.push((Side::B, m.data().to_vec()));
            }
            self.b.recycle(m);
            worked = true;
        }
        while self.link.recv_into(Side::B, self.now, &mut self.buf) {
            self.b.handle_datagram(self.now, &self.buf);
            worked = true;
        }
        while self.link.recv_into(Side::A, self.now, &mut self.buf) {
            self.a.handle_datagram(self.now, &self.buf);
            worked = true;
        }
        // The application is idle between rounds: the accelerator's deferred
        // post-processing (and packed backlog) runs now.
        if self.a.needs_post_process() {
            self.a.post_process(self.now);
            worked = true;
        }
        if self.b.needs_post_process() {
            self.b.post_process(self.now);
            worked = true;
        }
        if self.a.poll_timeout().is_some_and(|t| t <= self.now) {
            self.a.handle_timeout(self.now);
            worked = true;
        }
        if self.b.poll_timeout().is_some_and(|t| t <= self.now) {
            self.b.handle_timeout(self.now);
            worked = true;
        }
        worked
    }

    /// The next instant anything is due: a datagram's arrival or a connection's deadline.
    pub fn next_event(&self) -> Option<Time> {
        earliest(
            self.link.next_arrival(),
            earliest(self.a.poll_timeout(), self.b.poll_timeout()),
        )
    }

    /// Step until nothing is pending or `max_steps` steps were taken; `true` if idle.
    pub fn run_until_idle(&mut self, max_steps: usize) -> bool {
        for _ in 0..max_steps {
            if !self.step() {
                return true;
            }
        }
        false
    }

    /// Send `payload` from A, run both ends until idle, return how many messages B has ready
    /// (they stay queued: drain them with `b.poll_delivery()`).
    pub fn transfer(&mut self, payload: &[u8]) -> Result<usize, SendError> {
        self.a.send(self.now, payload)?;
        self.run_until_idle(1_000_000);
        Ok(self.b.delivered_ready())
    }
}
