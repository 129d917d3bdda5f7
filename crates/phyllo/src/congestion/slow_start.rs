//! Slow start and recovery periods, as the loss-based controllers ([`super::NewReno`],
//! [`super::Cubic`]) share them ([`SlowStart`]), with HyStart++ ([`HyStart`]).
//!
//! HyStart++ (RFC 9406): leave slow start when the round trip starts to grow — the queue at
//! the bottleneck is filling — instead of at the first loss, which on a path with a deep queue
//! comes a round trip after the window has overshot by up to the whole queue (a burst of
//! losses, resent bytes, a long recovery).
//!
//! Each round trip (a round ends when a datagram sent after it began is acknowledged), the
//! smallest of the round's first eight round-trip samples is compared with the previous
//! round's: a rise of at least an eighth of it (clamped to 4–16 ms) ends slow start for
//! Conservative Slow Start, which grows the window a quarter as fast for up to five rounds; if
//! the round trip falls back in that time slow start resumes, otherwise congestion avoidance
//! begins at the window reached.

use super::RttEstimator;
use crate::time::Time;
use std::collections::VecDeque;
use std::time::Duration;

/// RFC 9406 §4.3's constants.
const MIN_RTT_THRESH: Duration = Duration::from_millis(4);
const MAX_RTT_THRESH: Duration = Duration::from_millis(16);
const MIN_RTT_DIVISOR: u32 = 8;
const N_RTT_SAMPLE: u32 = 8;
const CSS_GROWTH_DIVISOR: u64 = 4;
const CSS_ROUNDS: u32 = 5;
/// Below this window, in datagrams, a rising round trip does not end slow start (Linux's
/// `hystart_low_window`): a flow that joins a queue another flow keeps filling sees that
/// flow's queue grow, and leaving slow start with a window of a few datagrams would leave it
/// growing by CUBIC's curve from there — tens of seconds to its share on a 50 ms path.
const LOW_WINDOW: u64 = 16;
/// Slow start notes the window each time it has grown by this fraction (an eighth), so the
/// window in force when a datagram left is known to within it ([`SlowStart::enter_recovery`]).
const HISTORY_STEP_DIVISOR: u64 = 8;
/// At most this many notes (an eighth at a time, 64 notes span a growth of 1.125^64 ≈ 1900
/// times: from the initial window past any ceiling).
const HISTORY_LEN: usize = 64;

/// What slow start should do with an acknowledgement.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Phase {
    /// Grow by the bytes acknowledged.
    SlowStart,
    /// Grow by a quarter of them.
    Conservative,
    /// Slow start is over: congestion avoidance from the current window.
    Done,
}

/// HyStart++'s state for one sender.
#[derive(Clone, Debug, Default)]
pub(crate) struct HyStart {
    /// When the current round began: it ends at the acknowledgement of a datagram sent later.
    round_start: Option<Time>,
    last_round_min: Option<Duration>,
    round_min: Option<Duration>,
    samples: u32,
    /// The round trip that made slow start conservative, and the rounds spent so.
    css: Option<(Duration, u32)>,
}

impl HyStart {
    /// An acknowledgement of a datagram sent at `sent`, measuring `rtt` (the latest sample),
    /// at `now`: the phase to grow in.
    pub(crate) fn on_ack(&mut self, now: Time, sent: Time, rtt: Duration) -> Phase {
        if self.round_start.is_none_or(|r| sent >= r) {
            // A new round.
            if let Some((_, rounds)) = &mut self.css {
                *rounds += 1;
                if *rounds >= CSS_ROUNDS {
                    return Phase::Done;
                }
            }
            self.round_start = Some(now);
            self.last_round_min = self.round_min.or(self.last_round_min);
            self.round_min = None;
            self.samples = 0;
        }
        if self.samples < N_RTT_SAMPLE {
            self.samples += 1;
            self.round_min = Some(self.round_min.map_or(rtt, |m| m.min(rtt)));
        }
        let (Some(cur), Some(last)) = (self.round_min, self.last_round_min) else {
            return self.phase();
        };
        match self.css {
            None if self.samples >= N_RTT_SAMPLE => {
                let thresh = (last / MIN_RTT_DIVISOR).clamp(MIN_RTT_THRESH, MAX_RTT_THRESH);
                if cur >= last + thresh {
                    self.css = Some((last, 0));
                }
            }
            // The round trip came back down: it was jitter, not a queue.
            Some((base, _)) if cur < base => self.css = None,
            _ => {}
        }
        self.phase()
    }

    fn phase(&self) -> Phase {
        if self.css.is_some() {
            Phase::Conservative
        } else {
            Phase::SlowStart
        }
    }

    /// How much of `bytes` acknowledged grows the window in `phase`.
    pub(crate) fn growth(phase: Phase, bytes: u64) -> u64 {
        match phase {
            Phase::SlowStart => bytes,
            Phase::Conservative => bytes / CSS_GROWTH_DIVISOR,
            Phase::Done => 0,
        }
    }

    /// Slow start begins again (after a loss or persistent congestion).
    pub(crate) fn reset(&mut self) {
        *self = HyStart::default();
    }
}

/// Slow start (up to `ssthresh`, HyStart++ inside it) and the recovery period: after a loss,
/// acknowledgements and further losses of datagrams sent before it began change nothing.
///
/// Slow start also keeps a short history of its window, for the loss that ends it: that loss
/// is learnt a round trip after the datagram left, and in that round trip slow start doubled
/// the window again. A cut from the doubled window leaves it above what the path holds, and
/// the next round trip overflows the queue again — in the simulator (100 Mbit/s, 50 ms, a
/// queue of one round trip) three recoveries in a row, the last leaving the window below the
/// path's. The controllers cut from the window in force when the lost datagram left instead
/// ([`SlowStart::enter_recovery`]): the window that overflowed the path.
#[derive(Clone, Debug)]
pub(crate) struct SlowStart {
    ssthresh: u64,
    recovery_start: Option<Time>,
    hystart: HyStart,
    /// (when, window from then on), oldest first, while in slow start (given back when slow
    /// start ends: an idle session keeps nothing of it).
    history: VecDeque<(Time, u64)>,
}

impl SlowStart {
    pub(crate) fn new() -> SlowStart {
        SlowStart {
            ssthresh: u64::MAX,
            recovery_start: None,
            hystart: HyStart::default(),
            history: VecDeque::new(),
        }
    }

    /// Whether a sender of `window` is in slow start.
    pub(crate) fn active(&self, window: u64) -> bool {
        window < self.ssthresh
    }

    /// Whether the acknowledgement of a datagram sent at `sent` may grow the window: not
    /// application-limited, not from before the recovery period.
    pub(crate) fn counts(&self, sent: Time, app_limited: bool) -> bool {
        !app_limited && self.recovery_start.is_none_or(|r| sent > r)
    }

    /// In slow start, grow `window` for `bytes` acknowledged (HyStart++ may end slow start
    /// here) and say so; `false` in congestion avoidance, which is the caller's.
    pub(crate) fn grow(
        &mut self,
        window: &mut u64,
        mtu: u64,
        now: Time,
        sent: Time,
        bytes: u64,
        rtt: &RttEstimator,
    ) -> bool {
        if !self.active(*window) {
            return false;
        }
        if *window < LOW_WINDOW * mtu {
            *window += bytes;
        } else {
            match self.hystart.on_ack(now, sent, rtt.latest()) {
                Phase::Done => {
                    self.ssthresh = *window;
                    self.history = VecDeque::new();
                    return true;
                }
                phase => *window += HyStart::growth(phase, bytes),
            }
        }
        let noted = self.history.back().map_or(0, |n| n.1);
        if *window >= noted + noted / HISTORY_STEP_DIVISOR {
            if self.history.len() == HISTORY_LEN {
                self.history.pop_front();
            }
            self.history.push_back((now, *window));
        }
        true
    }

    /// In slow start, the window in force when a datagram sent at `sent` left (to within an
    /// eighth, never above), if slow start noted it; `None` outside slow start.
    fn window_at(&self, window: u64, sent: Time) -> Option<u64> {
        if !self.active(window) {
            return None;
        }
        let i = self.history.partition_point(|n| n.0 <= sent);
        i.checked_sub(1).map(|i| self.history[i].1.min(window))
    }

    /// A loss of a datagram sent at `sent`, declared at `now`, by a sender of `window`: `None`
    /// if it belongs to the recovery period under way (and is not `persistent`), else a new
    /// period begins and the caller cuts from the window returned — `window`, or in slow start
    /// the window in force when the lost datagram left ([`SlowStart`]'s history) — then sets
    /// the threshold to the result ([`Self::set_threshold`]).
    pub(crate) fn enter_recovery(
        &mut self,
        now: Time,
        sent: Time,
        persistent: bool,
        window: u64,
    ) -> Option<u64> {
        if self.recovery_start.is_some_and(|r| sent <= r) && !persistent {
            return None;
        }
        let basis = self.window_at(window, sent).unwrap_or(window);
        self.recovery_start = Some(now);
        self.hystart.reset();
        self.history = VecDeque::new();
        Some(basis)
    }

    /// Slow start ends at `window` (the window after a cut).
    pub(crate) fn set_threshold(&mut self, window: u64) {
        self.ssthresh = window;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(v: u64) -> Duration {
        Duration::from_millis(v)
    }

    #[test]
    fn a_rising_round_trip_ends_slow_start_and_a_steady_one_does_not() {
        let mut h = HyStart::default();
        let mut t = 0u64;
        let at = |ms: u64| Time(ms * 1_000_000);
        // Five rounds at 50 ms: slow start throughout.
        for _ in 0..5 {
            let sent = t;
            t += 50;
            for _ in 0..10 {
                assert_eq!(h.on_ack(at(t), at(sent), ms(50)), Phase::SlowStart);
            }
        }
        // The round trip grows by 10 ms (over 50/8 = 6.25 ms): conservative.
        let sent = t;
        t += 60;
        let mut phase = Phase::SlowStart;
        for _ in 0..10 {
            phase = h.on_ack(at(t), at(sent), ms(60));
        }
        assert_eq!(phase, Phase::Conservative);
        // It stays up for five rounds: slow start is over.
        for _ in 0..5 {
            let sent = t;
            t += 60;
            for _ in 0..10 {
                phase = h.on_ack(at(t), at(sent), ms(60));
            }
        }
        assert_eq!(phase, Phase::Done);
    }
}
