//! Congestion control: how much a sender may have in flight, and how fast it may send.
//!
//! The `window` layer ([`crate::layers::window`]) asks a [`Controller`] for its congestion
//! window (bytes in flight at most) and its pacing rate, and tells it what happened: a
//! datagram left ([`Controller::on_sent`]), bytes were acknowledged ([`Controller::on_ack`],
//! then [`Controller::on_end_acks`] once per acknowledgement), or a loss was detected
//! ([`Controller::on_congestion_event`]). The trait has the shape of quinn's `Controller`, so
//! a controller written for one ports to the other; a user implements it for a controller of
//! their own and hands it to [`crate::layers::window::WindowConfig::controller`].
//!
//! Three controllers come with phyllo:
//!
//! - [`NewReno`] (RFC 9002 §7): slow start, then one datagram per round trip; halves on loss.
//! - [`Cubic`] (RFC 9438): the window grows as a cubic function of the time since the last
//!   loss, so it refills a long fat path much faster than NewReno; multiplies by 0.7 on loss.
//!   The default, chosen by measurement (see `docs/transport.md`).
//! - [`Bbr`]: a model-based controller (BBR version 1 as in the 2016 ACM Queue article and the
//!   IETF draft `draft-cardwell-iccrg-bbr-congestion-control-00`): it estimates the bottleneck
//!   bandwidth and the round-trip propagation time and paces at that rate, so random loss does
//!   not shrink its window. Recommended for lossy paths.
//!
//! Windows and rates are in bytes; times are the sans-IO [`Time`] the layer is handed.

mod bbr;
mod cubic;
mod newreno;
mod pacer;
mod slow_start;

pub use bbr::Bbr;
pub use cubic::Cubic;
pub use newreno::NewReno;
pub use pacer::Pacer;

use crate::time::Time;
use std::fmt;
use std::time::Duration;

/// The round-trip estimate of a sender (RFC 9002 §5): what controllers read.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RttEstimator {
    latest: Duration,
    smoothed: Option<Duration>,
    var: Duration,
    min: Option<Duration>,
}

impl RttEstimator {
    /// No sample yet.
    pub fn new() -> RttEstimator {
        RttEstimator {
            latest: Duration::ZERO,
            smoothed: None,
            var: Duration::ZERO,
            min: None,
        }
    }

    /// A sample: `rtt` measured from a datagram's send to its acknowledgement, of which the
    /// peer says it held the acknowledgement back for `ack_delay`. The delay is subtracted
    /// unless that would take the sample below the smallest round trip seen (RFC 9002 §5.3),
    /// and it never shortens the minimum.
    pub fn update(&mut self, rtt: Duration, ack_delay: Duration) {
        self.latest = rtt;
        let min = self.min.map_or(rtt, |m| m.min(rtt));
        self.min = Some(min);
        let adjusted = if rtt >= min + ack_delay {
            rtt - ack_delay
        } else {
            rtt
        };
        match self.smoothed {
            None => {
                self.smoothed = Some(adjusted);
                self.var = adjusted / 2;
            }
            Some(s) => {
                self.var = (self.var * 3 + s.abs_diff(adjusted)) / 4;
                self.smoothed = Some((s * 7 + adjusted) / 8);
            }
        }
    }

    /// The latest sample.
    pub fn latest(&self) -> Duration {
        self.latest
    }

    /// The smoothed round trip, once measured.
    pub fn smoothed(&self) -> Option<Duration> {
        self.smoothed
    }

    /// The smoothed round trip, or `default` before any sample.
    pub fn get_or(&self, default: Duration) -> Duration {
        self.smoothed.unwrap_or(default)
    }

    /// The round trip's mean deviation.
    pub fn var(&self) -> Duration {
        self.var
    }

    /// The smallest round trip seen, once measured.
    pub fn min(&self) -> Option<Duration> {
        self.min
    }
}

impl Default for RttEstimator {
    fn default() -> Self {
        RttEstimator::new()
    }
}

/// A congestion controller: the window of bytes in flight and the pacing rate.
///
/// The sender calls, in this order for every acknowledgement that acknowledges something new:
/// [`on_ack`](Controller::on_ack) once per newly acknowledged datagram, then
/// [`on_end_acks`](Controller::on_end_acks) once. A detected loss calls
/// [`on_congestion_event`](Controller::on_congestion_event) once per acknowledgement that
/// declares losses (not once per lost datagram).
pub trait Controller: Send + fmt::Debug {
    /// A datagram of `bytes` left at `now`; `in_flight` counts it.
    fn on_sent(&mut self, now: Time, bytes: u64, in_flight: u64) {
        let _ = (now, bytes, in_flight);
    }

    /// `bytes` sent at `sent` were acknowledged at `now`. `app_limited`: the sender had
    /// less in flight than the window allowed when it sent them, so the acknowledgement says
    /// nothing about the path's capacity and the window should not grow on it.
    fn on_ack(&mut self, now: Time, sent: Time, bytes: u64, app_limited: bool, rtt: &RttEstimator);

    /// The end of one acknowledgement's processing: `in_flight` bytes remain outstanding;
    /// `delivered` is the sender's running total of bytes acknowledged so far.
    fn on_end_acks(&mut self, now: Time, in_flight: u64, app_limited: bool, delivered: u64) {
        let _ = (now, in_flight, app_limited, delivered);
    }

    /// Datagrams were declared lost at `now`; the latest of them was sent at `sent`.
    /// `persistent`: every datagram over a span longer than the persistent-congestion period
    /// (RFC 9002 §7.6) was lost — the path went dark — and the window falls to its minimum.
    /// `lost_bytes` is what this event declared lost.
    fn on_congestion_event(&mut self, now: Time, sent: Time, persistent: bool, lost_bytes: u64);

    /// The datagram size changed (path MTU discovery).
    fn on_mtu_update(&mut self, mtu: u16) {
        let _ = mtu;
    }

    /// Bytes that may be in flight now.
    fn window(&self) -> u64;

    /// Bytes per second the sender may pace at, given the round-trip estimate. The default
    /// spreads a window over a smoothed round trip with a gain of 1.25 (so pacing never
    /// limits a window-limited sender), and does not pace before a round trip was measured.
    fn pacing_rate(&self, rtt: &RttEstimator) -> Option<u64> {
        window_pacing_rate(self.window(), false, rtt)
    }

    /// The window before anything was learnt.
    fn initial_window(&self) -> u64;

    /// A short name for logs and reports (`cubic`).
    fn name(&self) -> &'static str;

    /// A fresh controller of the same kind and configuration (for a new connection).
    fn clone_box(&self) -> Box<dyn Controller>;
}

impl Clone for Box<dyn Controller> {
    fn clone(&self) -> Self {
        self.clone_box()
    }
}

/// The pacing rate of a window-based controller: the window per smoothed round trip, times
/// 2 in slow start (so pacing does not slow the doubling) or 1.25 after it (so pacing never
/// limits a window-limited sender); none before a round trip was measured.
pub fn window_pacing_rate(window: u64, slow_start: bool, rtt: &RttEstimator) -> Option<u64> {
    let srtt = rtt.smoothed()?.max(Duration::from_micros(100));
    let gain = if slow_start { 2.0 } else { 1.25 };
    Some((window as f64 * gain / srtt.as_secs_f64()) as u64)
}

/// The initial window of RFC 9002 §7.2: ten datagrams, at most 14 720 bytes and at least two.
pub fn initial_window(mtu: u64) -> u64 {
    (10 * mtu).min(14_720.max(2 * mtu))
}

/// The smallest window (RFC 9002 §7.2): two datagrams.
pub fn minimum_window(mtu: u64) -> u64 {
    2 * mtu
}

/// Which controller a `window` spec names: `cubic`, `newreno` or `bbr`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Algorithm {
    /// [`NewReno`].
    NewReno,
    /// [`Cubic`].
    Cubic,
    /// [`Bbr`].
    Bbr,
}

impl Algorithm {
    /// The algorithm named `s`.
    pub fn parse(s: &str) -> Option<Algorithm> {
        match s {
            "newreno" | "reno" => Some(Algorithm::NewReno),
            "cubic" => Some(Algorithm::Cubic),
            "bbr" => Some(Algorithm::Bbr),
            _ => None,
        }
    }

    /// A controller of this kind for datagrams of `mtu` bytes.
    pub fn build(self, mtu: u64) -> Box<dyn Controller> {
        match self {
            Algorithm::NewReno => Box::new(NewReno::new(mtu)),
            Algorithm::Cubic => Box::new(Cubic::new(mtu)),
            Algorithm::Bbr => Box::new(Bbr::new(mtu)),
        }
    }
}
