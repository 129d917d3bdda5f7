//! CUBIC (RFC 9438): after a loss the window grows as a cubic function of the time since it,
//! centred on the window where the loss happened (`w_max`): fast when far below it, flat near
//! it, fast again beyond. The growth does not depend on the round trip, so a long path refills
//! as fast as a short one. A loss multiplies the window by β = 0.7; a Reno-friendly estimate
//! keeps CUBIC at least as fast as NewReno on short paths. Slow start is NewReno's.

use super::slow_start::SlowStart;
use super::{initial_window, minimum_window, window_pacing_rate, Controller, RttEstimator};
use crate::time::Time;
use std::time::Duration;

/// RFC 9438 §4.1: the cubic's scaling constant, in datagrams per second cubed.
const C: f64 = 0.4;
/// RFC 9438 §4.6: the multiplicative decrease factor.
const BETA: f64 = 0.7;

/// The CUBIC controller.
#[derive(Clone, Debug)]
pub struct Cubic {
    mtu: u64,
    window: u64,
    /// Slow start (HyStart++) and the recovery period.
    slow_start: SlowStart,
    /// The window (in datagrams) where the last loss happened.
    w_max: f64,
    /// The time the cubic takes to grow back to `w_max`.
    k: f64,
    /// The start of the current congestion-avoidance epoch.
    epoch: Option<Time>,
    /// The Reno-friendly window estimate, in datagrams.
    w_est: f64,
    /// Bytes acknowledged and not yet turned into window growth.
    acked: u64,
}

impl Cubic {
    /// A controller for datagrams of `mtu` bytes.
    pub fn new(mtu: u64) -> Cubic {
        Cubic {
            mtu,
            window: initial_window(mtu),
            slow_start: SlowStart::new(),
            w_max: 0.0,
            k: 0.0,
            epoch: None,
            w_est: 0.0,
            acked: 0,
        }
    }

    /// Whether this sender is in slow start.
    pub fn in_slow_start(&self) -> bool {
        self.slow_start.active(self.window)
    }

    fn datagrams(&self, bytes: u64) -> f64 {
        bytes as f64 / self.mtu as f64
    }
}

impl Controller for Cubic {
    fn on_ack(&mut self, now: Time, sent: Time, bytes: u64, app_limited: bool, rtt: &RttEstimator) {
        if !self.slow_start.counts(sent, app_limited)
            || self
                .slow_start
                .grow(&mut self.window, self.mtu, now, sent, bytes, rtt)
        {
            return;
        }
        let epoch = *self.epoch.get_or_insert_with(|| {
            // Congestion avoidance without a loss before (slow start ended by ssthresh):
            // start the cubic at the current window.
            self.w_max = bytes as f64 / self.mtu as f64 + self.window as f64 / self.mtu as f64;
            self.k = 0.0;
            self.w_est = self.window as f64 / self.mtu as f64;
            now
        });
        let cwnd = self.datagrams(self.window);
        let srtt = rtt.get_or(Duration::from_millis(100)).as_secs_f64();
        let t = now.since(epoch).as_secs_f64() + srtt;
        let w_cubic = C * (t - self.k).powi(3) + self.w_max;
        // RFC 9438 §4.3: the Reno-friendly region.
        let alpha = 3.0 * (1.0 - BETA) / (1.0 + BETA);
        self.w_est += alpha * self.datagrams(bytes) / cwnd;
        let target = w_cubic.max(self.w_est).clamp(cwnd, 1.5 * cwnd);
        // Grow by (target - cwnd) / cwnd datagrams per datagram acknowledged.
        self.acked += bytes;
        let per_datagram = (target - cwnd) / cwnd;
        let grow = per_datagram * self.datagrams(self.acked);
        if grow >= 1.0 / self.mtu as f64 {
            self.window += (grow * self.mtu as f64) as u64;
            self.acked = 0;
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
        let cwnd = self.datagrams(basis);
        // Fast convergence (RFC 9438 §4.7): a flow whose maximum is falling releases
        // bandwidth to newcomers.
        self.w_max = if cwnd < self.w_max {
            cwnd * (1.0 + BETA) / 2.0
        } else {
            cwnd
        };
        let reduced = (cwnd * BETA).max(2.0);
        self.window = ((reduced * self.mtu as f64) as u64).max(minimum_window(self.mtu));
        self.slow_start.set_threshold(self.window);
        self.k = (self.w_max * (1.0 - BETA) / C).cbrt();
        self.w_est = reduced;
        self.epoch = Some(now);
        self.acked = 0;
        if persistent {
            self.window = minimum_window(self.mtu);
            self.epoch = None;
        }
    }

    fn on_mtu_update(&mut self, mtu: u16) {
        let old = self.mtu as f64;
        self.mtu = u64::from(mtu);
        // Keep the window in datagrams.
        self.w_max *= old / self.mtu as f64;
        self.w_est *= old / self.mtu as f64;
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
        "cubic"
    }

    fn clone_box(&self) -> Box<dyn Controller> {
        Box::new(Cubic::new(self.mtu))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(ms: u64) -> Time {
        Time(ms * 1_000_000)
    }

    #[test]
    fn a_loss_cuts_to_seventy_percent_and_the_cubic_regrows_past_the_old_maximum() {
        let mut rtt = RttEstimator::new();
        rtt.update(Duration::from_millis(50), Duration::ZERO);
        let mut c = Cubic::new(1000);
        c.window = 100_000;
        c.on_congestion_event(at(0), at(0), false, 1000);
        assert_eq!(c.window(), 70_000);
        assert!(!c.in_slow_start());
        // K = cbrt(100 × 0.3 / 0.4) ≈ 4.2 s: by then the window is back near 100 datagrams,
        // and beyond it grows again.
        let mut t = 0;
        let mut sent = 1;
        while t < 8_000 {
            t += 50;
            for _ in 0..(c.window() / 1000) {
                c.on_ack(at(t), at(sent), 1000, false, &rtt);
            }
            sent = t;
        }
        assert!(c.window() > 110_000, "{}", c.window());
    }

    #[test]
    fn the_loss_that_ends_slow_start_cuts_from_the_window_the_lost_datagram_left_under() {
        let mut rtt = RttEstimator::new();
        rtt.update(Duration::from_millis(50), Duration::ZERO);
        let mut c = Cubic::new(1000);
        // Slow start, a round trip of 50 ms with a steady round trip (HyStart++ never ends
        // it): each round's acknowledgements double the window.
        let mut t = 0;
        let mut window_at_200 = 0;
        while t < 400 {
            let sent = t;
            t += 50;
            for _ in 0..(c.window() / 1000) {
                c.on_ack(at(t), at(sent), 1000, false, &rtt);
            }
            if t == 200 {
                window_at_200 = c.window();
            }
        }
        assert!(c.in_slow_start());
        let now = c.window();
        assert!(now >= 4 * window_at_200, "{now} vs {window_at_200}");
        // A datagram sent at 210 ms is found lost at 400 ms: the window it left under was
        // (to within an eighth, never above) the one at 200 ms.
        c.on_congestion_event(at(400), at(210), false, 1000);
        let basis = c.window() as f64 / BETA;
        assert!(
            basis <= window_at_200 as f64 + 1.0 && basis >= window_at_200 as f64 * 7.0 / 8.0,
            "cut to {} from a window of {window_at_200} at the send ({now} now)",
            c.window()
        );
        assert!(!c.in_slow_start());
        // Out of slow start, a loss cuts from the window in force (RFC 9438).
        let before = c.window();
        c.on_congestion_event(at(500), at(450), false, 1000);
        assert!(c.window().abs_diff((before as f64 * BETA) as u64) <= 1);
    }

    #[test]
    fn persistent_congestion_falls_to_the_minimum() {
        let mut c = Cubic::new(1200);
        c.on_congestion_event(at(5), at(4), true, 1200);
        assert_eq!(c.window(), 2400);
    }
}
