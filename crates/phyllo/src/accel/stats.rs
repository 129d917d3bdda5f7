//! The accelerator's counters (van Renesse, "Masking the Overhead of Protocol Layering" (seed 004
//! §4): what the fast path hit and why it missed).

/// Why a message left the fast path.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Miss {
    /// The predicted header was disabled by a layer (e.g. window full), or the stack's shape
    /// keeps every delivery on the layered path (a body transform above a plain layer).
    Disabled,
    /// The filter rejected the message (non-zero return).
    Filter,
    /// A fragment, or a message that must be fragmented.
    Fragment,
    /// The protocol-specific header differed from the prediction.
    Mismatch,
    /// A layer that does not predict its header refused the message in its pre-phase, which
    /// the fast path runs for it (see [`crate::Layer::predicts`]).
    Unpredicted,
    /// This direction's fast path is off for good: a check against the layered path
    /// ([`FastPathCheck::Sampled`](super::FastPathCheck::Sampled)) caught a layer
    /// mispredicting, named in [`AccelStats::distrusted_send`] or
    /// [`AccelStats::distrusted_deliver`]. Counts the message the check caught and every
    /// later one: every send, and every delivery that passed the fast path's other checks.
    Distrusted,
    /// A layer had the message sent the layered way on purpose
    /// ([`crate::layer::Cx::raise_send_divert`]): the window holds one new message in a few
    /// thousand back a round trip, which only its pre-send does.
    Diverted,
}

impl Miss {
    /// Every reason, in the order of [`AccelStats::send_miss`] and
    /// [`AccelStats::deliver_miss`].
    pub const ALL: [Miss; 7] = [
        Miss::Disabled,
        Miss::Filter,
        Miss::Fragment,
        Miss::Mismatch,
        Miss::Unpredicted,
        Miss::Distrusted,
        Miss::Diverted,
    ];

    fn index(self) -> usize {
        self as usize
    }
}

/// Counters of the accelerator of one connection.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct AccelStats {
    /// Application messages sent on the fast path (packed ones counted one by one).
    pub fast_send_msgs: u64,
    /// Application messages sent on the layered path.
    pub slow_send_msgs: u64,
    /// Application messages delivered on the fast path.
    pub fast_deliver_msgs: u64,
    /// Application messages delivered on the layered path.
    pub slow_deliver_msgs: u64,
    /// Datagrams received that took the fast path.
    pub fast_deliver_datagrams: u64,
    /// Send misses by reason, indexed like [`Miss::ALL`].
    pub send_miss: [u64; Miss::ALL.len()],
    /// Delivery misses by reason, indexed like [`Miss::ALL`].
    pub deliver_miss: [u64; Miss::ALL.len()],
    /// Fast-path sends checked against the layered path
    /// ([`Config::fast_path_check`](crate::Config::fast_path_check)).
    pub checked_sends: u64,
    /// Fast-path deliveries checked against the layered path.
    pub checked_deliveries: u64,
    /// The layer a check caught mispredicting a send, after which every send took the
    /// layered path ([`Miss::Distrusted`]); `None` while the send fast path is trusted.
    pub distrusted_send: Option<&'static str>,
    /// The layer a check caught mispredicting a delivery (its pre-delivery refused what the
    /// fast path accepted), after which deliveries take the layered path.
    pub distrusted_deliver: Option<&'static str>,
    /// Datagrams dropped: unknown cookie without identification.
    pub unknown_cookie: u64,
    /// Datagrams dropped: identification of another connection.
    pub unknown_conn: u64,
    /// Datagrams dropped: packed body whose lengths lie.
    pub bad_packing: u64,
    /// Datagrams dropped: shorter than the preamble and headers.
    pub truncated: u64,
    /// Datagrams sent with the connection identification.
    pub with_conn_id: u64,
    /// Wire header bytes sent (preamble + identification + headers), all datagrams.
    pub header_bytes: u64,
    /// Packed datagrams sent.
    pub packed_datagrams: u64,
    /// Messages carried in packed datagrams.
    pub packed_msgs: u64,
    /// Most messages in one packed datagram.
    pub max_pack: u64,
}

impl AccelStats {
    /// Application messages that took the fast path, over all sent and delivered.
    pub fn hit_ratio(&self) -> f64 {
        let fast = self.fast_send_msgs + self.fast_deliver_msgs;
        let all = fast + self.slow_send_msgs + self.slow_deliver_msgs;
        if all == 0 {
            f64::NAN
        } else {
            fast as f64 / all as f64
        }
    }

    /// Count a miss of the send (`send`) or delivery fast path.
    pub(crate) fn miss(&mut self, send: bool, why: Miss) {
        if send {
            self.send_miss[why.index()] += 1;
        } else {
            self.deliver_miss[why.index()] += 1;
        }
    }

    /// Send misses for `why`.
    pub fn send_misses(&self, why: Miss) -> u64 {
        self.send_miss[why.index()]
    }

    /// Delivery misses for `why`.
    pub fn deliver_misses(&self, why: Miss) -> u64 {
        self.deliver_miss[why.index()]
    }
}
