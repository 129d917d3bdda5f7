//! A seeded fault model for datagrams: loss, duplication, reordering (extra delay) and
//! one-bit corruption with given probabilities, drawn from a generator the caller seeds, so
//! every schedule replays. The in-memory link of the test support and the `phyllo relay`
//! command, which impairs real traffic, draw their datagrams' fates from it.

use rand::Rng;
use std::time::Duration;

/// Fault probabilities and delays.
#[derive(Clone, Debug, PartialEq)]
pub struct Faults {
    /// Probability a datagram is lost.
    pub loss: f64,
    /// Probability a datagram is delivered twice.
    pub duplicate: f64,
    /// Probability a datagram is held back by up to `reorder_delay` extra.
    pub reorder: f64,
    /// Probability one bit of a datagram is flipped.
    pub corrupt: f64,
    /// Base one-way delay.
    pub delay: Duration,
    /// Largest extra delay of a reordered datagram.
    pub reorder_delay: Duration,
}

impl Faults {
    /// A perfect link with `delay`.
    pub fn none(delay: Duration) -> Faults {
        Faults {
            loss: 0.0,
            duplicate: 0.0,
            reorder: 0.0,
            corrupt: 0.0,
            delay,
            reorder_delay: Duration::ZERO,
        }
    }
}

/// What [`Faults`] do to one datagram: no copy (lost), one, or two (duplicated), each
/// delayed beyond the base delay and perhaps with one bit flipped.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Fate {
    /// The copies that arrive.
    pub copies: [Option<Arrival>; 2],
}

/// One arriving copy of a datagram.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Arrival {
    /// Held back (reordered) by this much beyond the base delay.
    pub extra: Option<Duration>,
    /// The bit flipped (corruption), counted from the first byte's lowest.
    pub flip: Option<usize>,
}

impl Arrival {
    /// Apply the corruption to the copy `data`.
    pub fn corrupt(&self, data: &mut [u8]) {
        if let Some(bit) = self.flip {
            data[bit / 8] ^= 1 << (bit % 8);
        }
    }
}

impl Faults {
    /// Draw the fate of a datagram of `len` bytes from `rng`: loss, then duplication, then
    /// for each copy reordering and corruption, each drawn only when its probability is not
    /// zero (so a perfect link draws nothing).
    pub fn draw(&self, rng: &mut impl Rng, len: usize) -> Fate {
        fn chance(rng: &mut impl Rng, p: f64) -> bool {
            p > 0.0 && rng.random_bool(p.clamp(0.0, 1.0))
        }
        let mut fate = Fate::default();
        if chance(rng, self.loss) {
            return fate;
        }
        let copies = if chance(rng, self.duplicate) { 2 } else { 1 };
        for c in &mut fate.copies[..copies] {
            let mut a = Arrival::default();
            if chance(rng, self.reorder) {
                let max = self.reorder_delay.as_nanos() as u64;
                a.extra = Some(Duration::from_nanos(rng.random_range(0..=max)));
            }
            if len > 0 && chance(rng, self.corrupt) {
                a.flip = Some(rng.random_range(0..len * 8));
            }
            *c = Some(a);
        }
        fate
    }
}
