//! BBR: being written (placeholder that behaves as NewReno until then).

use super::{Controller, NewReno, RttEstimator};
use crate::time::Time;

/// The BBR controller.
#[derive(Clone, Debug)]
pub struct Bbr {
    inner: NewReno,
    mtu: u64,
}

impl Bbr {
    /// A controller for datagrams of `mtu` bytes.
    pub fn new(mtu: u64) -> Bbr {
        Bbr {
            inner: NewReno::new(mtu),
            mtu,
        }
    }
}

impl Controller for Bbr {
    fn on_ack(&mut self, now: Time, sent: Time, bytes: u64, app_limited: bool, rtt: &RttEstimator) {
        self.inner.on_ack(now, sent, bytes, app_limited, rtt)
    }
    fn on_congestion_event(&mut self, now: Time, sent: Time, persistent: bool, lost: u64) {
        self.inner.on_congestion_event(now, sent, persistent, lost)
    }
    fn window(&self) -> u64 {
        self.inner.window()
    }
    fn initial_window(&self) -> u64 {
        self.inner.initial_window()
    }
    fn name(&self) -> &'static str {
        "bbr"
    }
    fn clone_box(&self) -> Box<dyn Controller> {
        Box::new(Bbr::new(self.mtu))
    }
}
