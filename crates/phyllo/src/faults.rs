//! A seeded fault model for datagrams: loss, duplication, reordering (extra delay) and
//! one-bit corruption with given probabilities, drawn from a generator the caller seeds, so
//! every schedule replays. The in-memory link of the test support and the `phyllo relay`
//! command, which impairs real traffic, draw their datagrams' fates from it.
//!
//! Beside the random faults, a [`Bottleneck`]: a link of a fixed rate behind a bounded FIFO
//! queue, on the sans-IO clock, which the in-memory link and the relay put in front of their
//! delay.

use crate::time::Time;
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

/// A link of a fixed rate behind a FIFO tail-drop queue, on the sans-IO clock ([`Time`]).
///
/// A datagram offered at `now` ([`admit`](Bottleneck::admit)) waits for the ones ahead of it,
/// then takes `len / rate` to cross; [`admit`](Bottleneck::admit) says when it has crossed.
///
/// **The queue is bounded in time**: a datagram is dropped (tail drop) when the link would
/// start sending it more than [`queue`](Bottleneck::queue) after it arrived. At a fixed rate
/// that is a bound of `rate × queue` bytes on the backlog ahead of it (the rest of the
/// datagram being sent and everything waiting), so the backlog including the admitted
/// datagram peaks at most one datagram above `rate × queue`;
/// [`with_queue_bytes`](Bottleneck::with_queue_bytes) states the bound in bytes instead. A
/// queue of one bandwidth-delay product is a queue of one round trip. Time is what the relay's
/// `--queue-ms` and a router's buffer sizing speak.
///
/// Times are exact: the link keeps the start of its current busy period and the bytes
/// admitted since, and a datagram leaves at `start + ⌈bytes × 10⁹ / rate⌉` nanoseconds, so no
/// rounding accumulates over a long run. Nothing here allocates.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Bottleneck {
    /// Bytes per second, at least 1.
    rate: u64,
    /// The longest a datagram may wait before the link starts sending it.
    queue: Duration,
    /// When the current busy period began (the link has been sending since, without a gap).
    epoch: Time,
    /// Bytes admitted since `epoch`.
    committed: u64,
    /// When the link has sent everything admitted (at or before `now`: idle).
    busy_until: Time,
    stats: BottleneckStats,
}

/// What a [`Bottleneck`] did.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct BottleneckStats {
    /// Datagrams admitted.
    pub admitted: u64,
    /// Bytes admitted.
    pub admitted_bytes: u64,
    /// Datagrams dropped because the queue was full.
    pub dropped: u64,
    /// Bytes dropped because the queue was full.
    pub dropped_bytes: u64,
    /// The largest backlog, in bytes, right after admitting a datagram (it counted): the
    /// queue's peak occupancy since the bottleneck was made or
    /// [`reset_peak`](Bottleneck::reset_peak) was called.
    pub peak_backlog: u64,
}

impl Bottleneck {
    /// A link of `bytes_per_sec` (a rate of 0 is taken as 1 byte per second) behind a queue in
    /// which a datagram waits at most `queue`.
    pub fn new(bytes_per_sec: u64, queue: Duration) -> Bottleneck {
        Bottleneck {
            rate: bytes_per_sec.max(1),
            queue,
            epoch: Time::ZERO,
            committed: 0,
            busy_until: Time::ZERO,
            stats: BottleneckStats::default(),
        }
    }

    /// A link of `bytes_per_sec` behind a queue that holds `queue_bytes` ahead of an arriving
    /// datagram: the time bound of [`new`](Bottleneck::new) that is those bytes at the rate
    /// (rounded up to the nanosecond).
    pub fn with_queue_bytes(bytes_per_sec: u64, queue_bytes: u64) -> Bottleneck {
        let rate = bytes_per_sec.max(1);
        Bottleneck::new(rate, Duration::from_nanos(nanos_for(queue_bytes, rate)))
    }

    /// The rate, bytes per second.
    pub fn rate(&self) -> u64 {
        self.rate
    }

    /// The longest a datagram may wait before the link starts sending it.
    pub fn queue(&self) -> Duration {
        self.queue
    }

    /// The queue's bound in bytes: `rate × queue`.
    pub fn queue_bytes(&self) -> u64 {
        bytes_in(self.queue.as_nanos(), self.rate)
    }

    /// When a datagram of `len` bytes offered at `now` has crossed the link, or `None` when
    /// the queue is full and it is dropped (counted).
    pub fn admit(&mut self, now: Time, len: usize) -> Option<Time> {
        let len = u64::try_from(len).unwrap_or(u64::MAX);
        // How long the datagram would wait for those ahead of it (zero on an idle link).
        if self.busy_until.since(now) > self.queue {
            self.stats.dropped += 1;
            self.stats.dropped_bytes = self.stats.dropped_bytes.saturating_add(len);
            return None;
        }
        if self.busy_until <= now {
            // Idle: a new busy period starts with this datagram.
            self.epoch = now;
            self.committed = 0;
        }
        self.committed = self.committed.saturating_add(len);
        let done = Time(
            self.epoch
                .as_nanos()
                .saturating_add(nanos_for(self.committed, self.rate)),
        );
        self.busy_until = done;
        self.stats.admitted += 1;
        self.stats.admitted_bytes = self.stats.admitted_bytes.saturating_add(len);
        self.stats.peak_backlog = self.stats.peak_backlog.max(self.backlog(now));
        Some(done)
    }

    /// Bytes not yet sent at `now`: the rest of the datagram being sent and those waiting.
    pub fn backlog(&self, now: Time) -> u64 {
        if self.busy_until <= now {
            return 0;
        }
        let sent = bytes_in(u128::from(now.0.saturating_sub(self.epoch.0)), self.rate);
        self.committed.saturating_sub(sent)
    }

    /// When the link has sent everything admitted so far (at or before now: it is idle).
    pub fn busy_until(&self) -> Time {
        self.busy_until
    }

    /// Counters.
    pub fn stats(&self) -> &BottleneckStats {
        &self.stats
    }

    /// Start measuring the peak backlog afresh (e.g. once a path has healed).
    pub fn reset_peak(&mut self) {
        self.stats.peak_backlog = 0;
    }
}

/// Nanoseconds `bytes` take at `rate` bytes per second, rounded up (saturating).
fn nanos_for(bytes: u64, rate: u64) -> u64 {
    let n = (u128::from(bytes) * 1_000_000_000).div_ceil(u128::from(rate.max(1)));
    u64::try_from(n).unwrap_or(u64::MAX)
}

/// Whole bytes sent in `nanos` at `rate` bytes per second (saturating).
fn bytes_in(nanos: u128, rate: u64) -> u64 {
    let b = nanos.saturating_mul(u128::from(rate)) / 1_000_000_000;
    u64::try_from(b).unwrap_or(u64::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: u64 = 1_000_000;

    #[test]
    fn a_burst_leaves_at_the_rate_and_the_tail_past_the_queue_is_dropped() {
        // 1 MB/s and a 3 ms queue: a 1000-byte datagram takes 1 ms on the link.
        let mut b = Bottleneck::new(1_000_000, Duration::from_millis(3));
        let t0 = Time(5 * MS);
        let done: Vec<Option<Time>> = (0..6).map(|_| b.admit(t0, 1000)).collect();
        for (i, d) in done.iter().take(4).enumerate() {
            assert_eq!(*d, Some(Time(t0.0 + (i as u64 + 1) * MS)), "datagram {i}");
        }
        // The fifth would wait 4 ms > 3 ms.
        assert_eq!(&done[4..], &[None, None]);
        assert_eq!(b.stats().admitted, 4);
        assert_eq!((b.stats().dropped, b.stats().dropped_bytes), (2, 2000));
        assert_eq!(b.stats().peak_backlog, 4000);
        assert_eq!(b.backlog(Time(t0.0 + MS / 2)), 3500);
        assert_eq!(b.queue_bytes(), 3000);
        // Idle again: through at once, and a new busy period starts.
        let t1 = Time(t0.0 + 10 * MS);
        assert_eq!(b.backlog(t1), 0);
        assert_eq!(b.admit(t1, 500), Some(Time(t1.0 + MS / 2)));
    }

    #[test]
    fn a_saturated_link_keeps_its_rate_exactly() {
        // 3 bytes per second does not divide a second: rounding must not accumulate.
        let mut b = Bottleneck::new(3, Duration::from_secs(1_000_000));
        let mut last = None;
        for _ in 0..3000 {
            last = b.admit(Time::ZERO, 1);
        }
        assert_eq!(last, Some(Time(1000 * 1_000_000_000)));
    }

    #[test]
    fn the_queue_in_bytes_is_the_same_bound() {
        let mut b = Bottleneck::with_queue_bytes(1_000_000, 3000);
        assert_eq!(b.queue(), Duration::from_millis(3));
        let admitted = (0..10)
            .filter(|_| b.admit(Time::ZERO, 1000).is_some())
            .count();
        assert_eq!(admitted, 4);
    }

    #[test]
    fn no_input_panics() {
        let mut b = Bottleneck::new(0, Duration::MAX);
        assert_eq!(b.rate(), 1);
        assert!(b.admit(Time(u64::MAX), usize::MAX).is_some());
        assert!(b.admit(Time::ZERO, usize::MAX).is_some());
        let _ = b.backlog(Time::ZERO);
        let _ = b.queue_bytes();
        let mut c = Bottleneck::with_queue_bytes(u64::MAX, u64::MAX);
        assert!(c.admit(Time(7), 1500).is_some());
        assert!(c.admit(Time(3), 1500).is_some(), "time going backwards");
    }
}
