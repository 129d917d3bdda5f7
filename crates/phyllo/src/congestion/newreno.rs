//! NewReno (RFC 9002 §7): slow start doubles the window every round trip until the first
//! loss; congestion avoidance then adds one datagram per window acknowledged; a loss halves
//! the window once per recovery period (losses of datagrams sent before the period began do
//! not cut again).

use super::slow_start::SlowStart;
use super::{initial_window, minimum_window, window_pacing_rate, Controller, RttEstimator};
use crate::time::Time;

/// The NewReno controller.
#[derive(Clone, Debug)]
pub struct NewReno {
    mtu: u64,
    window: u64,
    /// Slow start (HyStart++) and the recovery period.
    slow_start: SlowStart,
    /// Bytes acknowledged towards the next one-datagram increase in congestion avoidance.
    acked: u64,
}

impl NewReno {
    /// A controller for datagrams of `mtu` bytes.
    pub fn new(mtu: u64) -> NewReno {
        NewReno {
            mtu,
            window: initial_window(mtu),
            slow_start: SlowStart::new(),
            acked: 0,
        }
    }

    /// Whether this sender is in slow start.
    pub fn in_slow_start(&self) -> bool {
        self.slow_start.active(self.window)
    }
}

impl Controller for NewReno {
    fn on_ack(&mut self, now: Time, sent: Time, bytes: u64, app_limited: bool, rtt: &RttEstimator) {
        if !self.slow_start.counts(sent, app_limited)
            || self
                .slow_start
                .grow(&mut self.window, self.mtu, now, sent, bytes, rtt)
        {
            return;
        }
        self.acked += bytes;
        if self.acked >= self.window {
            self.acked -= self.window;
            self.window += self.mtu;
        }
    }

    fn on_congestion_event(&mut self, now: Time, sent: Time, persistent: bool, _lost: u64) {
        // A loss that ends slow start cuts from the window that overflowed the path.
        let Some(basis) = self
            .slow_start
            .enter_recovery(now, sent, persistent, self.window)
        else {
            return;
        };
        self.window = (basis / 2).max(minimum_window(self.mtu));
        self.slow_start.set_threshold(self.window);
        self.acked = 0;
        if persistent {
            self.window = minimum_window(self.mtu);
        }
    }

    fn on_mtu_update(&mut self, mtu: u16) {
        self.mtu = u64::from(mtu);
        self.window = self.window.max(minimum_window(self.mtu));
    }

    fn window(&self) -> u64 {
        self.window
    }

    fn pacing_rate(&self, rtt: &RttEstimator) -> Option<u64> {
        window_pacing_rate(self.window, self.in_slow_start(), rtt)
    }

    fn initial_window(&self) -> u64 {
        initial_window(self.mtu)
    }

    fn name(&self) -> &'static str {
        "newreno"
    }

    fn clone_box(&self) -> Box<dyn Controller> {
        Box::new(NewReno::new(self.mtu))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn at(ms: u64) -> Time {
        Time(ms * 1_000_000)
    }

    #[test]
    fn slow_start_doubles_then_a_loss_halves_once_per_period() {
        let rtt = RttEstimator::new();
        let mut c = NewReno::new(1000);
        let w0 = c.window();
        c.on_ack(at(10), at(0), w0, false, &rtt);
        assert_eq!(c.window(), 2 * w0);
        c.on_congestion_event(at(20), at(15), false, 1000);
        assert_eq!(c.window(), w0);
        // A loss of a datagram sent before the period began does not cut again.
        c.on_congestion_event(at(21), at(19), false, 1000);
        assert_eq!(c.window(), w0);
        // Congestion avoidance: one datagram per window acknowledged.
        c.on_ack(at(40), at(30), w0, false, &rtt);
        assert_eq!(c.window(), w0 + 1000);
        c.on_congestion_event(at(50), at(45), true, 1000);
        assert_eq!(c.window(), 2000);
        let _ = Duration::ZERO;
    }

    #[test]
    fn app_limited_acks_do_not_grow_the_window() {
        let mut c = NewReno::new(1000);
        let w0 = c.window();
        c.on_ack(at(10), at(0), 5000, true, &RttEstimator::new());
        assert_eq!(c.window(), w0);
    }
}
