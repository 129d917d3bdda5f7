//! Pacing: a token bucket that spreads a sender's datagrams at the controller's rate.
//!
//! Tokens (bytes) accrue at the pacing rate up to a burst: two milliseconds of the rate, but
//! at least two and at most 64 datagrams. A driver's timer wakes it a little late (tokio's
//! timers resolve milliseconds; a scheduler tick is 4 ms on common kernels, which is why the
//! socket driver sleeps in `ppoll`), and a bucket shorter than that lateness would lose the
//! difference on every wakeup, which a rate-based controller (BBR) then measures as a slower
//! path; 64 datagrams is what segmentation offload gathers at once. A sender that has tokens for a datagram may send it; one that has
//! not learns when it will ([`Pacer::delay_until`]) and waits for that instant, which the
//! sans-IO connection reports through its timer. Without a rate the pacer lets everything
//! through.

use crate::time::Time;

/// A token-bucket pacer.
#[derive(Clone, Debug, Default)]
pub struct Pacer {
    /// Bytes per second; 0: not pacing.
    rate: u64,
    /// Tokens when last refilled.
    tokens: u64,
    /// The bucket's size.
    burst: u64,
    /// When the tokens were counted.
    at: Time,
}

impl Pacer {
    /// A pacer without a rate (it lets everything through).
    pub fn new() -> Pacer {
        Pacer::default()
    }

    /// Set the rate (bytes per second; `None`: stop pacing) for datagrams of about `mtu`
    /// bytes, counting the tokens earned at the old rate up to `now` first.
    pub fn set_rate(&mut self, now: Time, rate: Option<u64>, mtu: u64) {
        self.tokens = self.tokens_at(now);
        self.at = now.max(self.at);
        self.rate = rate.unwrap_or(0);
        self.burst = (self.rate / 500).clamp(2 * mtu, 64 * mtu);
        if self.rate == 0 {
            self.tokens = 0;
        }
    }

    /// The rate in force, bytes per second (0: not pacing).
    pub fn rate(&self) -> u64 {
        self.rate
    }

    fn tokens_at(&self, now: Time) -> u64 {
        if self.rate == 0 {
            return u64::MAX;
        }
        // f64: a 128-bit division on every send cost more than the rounding (a token is a
        // byte; the bucket is capped anyway).
        let earned = (now.since(self.at).as_nanos() as f64 * self.rate as f64 * 1e-9) as u64;
        self.tokens.saturating_add(earned).min(self.burst)
    }

    /// `None` if `len` bytes may leave at `now`, else the instant they may.
    pub fn delay_until(&self, now: Time, len: u64) -> Option<Time> {
        let have = self.tokens_at(now);
        if have >= len.min(self.burst) {
            return None;
        }
        let short = len.min(self.burst) - have;
        let nanos = (short as f64 * 1e9 / self.rate.max(1) as f64)
            .ceil()
            .max(1.0);
        Some(now + std::time::Duration::from_nanos(nanos.min(u64::MAX as f64) as u64))
    }

    /// `len` bytes left at `now`.
    pub fn spend(&mut self, now: Time, len: u64) {
        if self.rate == 0 {
            return;
        }
        self.tokens = self.tokens_at(now).saturating_sub(len);
        self.at = now.max(self.at);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn a_paced_sender_leaves_at_the_rate_after_a_burst() {
        let mut p = Pacer::new();
        let t0 = Time(1_000_000_000);
        assert_eq!(p.delay_until(t0, 1500), None);
        // 12.5 MB/s: a burst of 25 000 bytes, then one 1250-byte datagram every 100 µs.
        p.set_rate(t0, Some(12_500_000), 1250);
        let mut now = t0 + Duration::from_millis(5);
        let mut sent = 0;
        let start = now;
        while now < start + Duration::from_millis(10) {
            match p.delay_until(now, 1250) {
                None => {
                    p.spend(now, 1250);
                    sent += 1;
                }
                Some(t) => {
                    assert!(t > now);
                    now = t;
                }
            }
        }
        // 20 burst datagrams plus 100 paced in 10 ms.
        assert!((118..=121).contains(&sent), "{sent}");
    }
}
