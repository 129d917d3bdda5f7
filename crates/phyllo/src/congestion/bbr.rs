//! BBR version 1 (Cardwell et al., "BBR: Congestion-Based Congestion Control", ACM Queue
//! 2016; IETF `draft-cardwell-iccrg-bbr-congestion-control-00`).
//!
//! BBR does not read loss as congestion. It keeps a model of the path: the bottleneck bandwidth
//! (`BtlBw`, the largest delivery rate measured over the last ten round trips) and the
//! round-trip propagation time (`RTprop`, the smallest round trip measured over the last ten
//! seconds). It paces at `pacing_gain × BtlBw` and keeps at most `cwnd_gain × BtlBw × RTprop`
//! bytes in flight. Random loss does not change either estimate, so it does not shrink the
//! window.
//!
//! # States
//!
//! - **Startup**: pacing gain 2/ln 2 ≈ 2.885 (the smallest gain that doubles the delivery rate
//!   every round trip), window gain 2. (The draft uses 2/ln 2 for the window too; 2 is enough
//!   for the window to double every round trip, since it grows by the bytes acknowledged
//!   while below twice the measured BDP, and it bounds Startup's queue to one BDP.) Ends when
//!   the bandwidth estimate has not grown by 25 % in three round trips in a row (the pipe is
//!   full).
//! - **Drain**: pacing gain ln 2/2, the inverse of Startup's, to drain the queue Startup built;
//!   ends once the bytes in flight fall to one bandwidth-delay product (BDP).
//! - **ProbeBW**: window gain 2 and a pacing gain that cycles through 1.25, 0.75 and six times
//!   1, one phase per `RTprop`: the 1.25 phase probes for more bandwidth, the 0.75 phase drains
//!   the queue the probe built, the rest cruise at the estimate. The phase to start at is
//!   drawn from a deterministic generator (never the 0.75 phase).
//! - **ProbeRTT**: entered from any state when `RTprop` was not lowered for ten seconds. The
//!   window falls to four datagrams so the queue drains and the propagation time can be seen
//!   again; it lasts 200 ms and at least one round trip once the flight is that small, then
//!   the window of before is restored and BBR goes back to ProbeBW (or Startup, if the pipe
//!   was never found full).
//!
//! # Delivery rate
//!
//! The rate samples follow the delivery-rate estimation of `draft-cheng-iccrg-delivery-rate-
//! estimation`: for a datagram `P`, `rate = (delivered now − delivered when P was sent) /
//! max(ack interval, send interval)`, where the ack interval runs from the last
//! acknowledgement before `P` was sent to now, and the send interval from the send time of
//! the datagram that acknowledgement covered to `P`'s send time (a guard against ack
//! compression). The standard keeps those values in every datagram's send record; the
//! [`Controller`] trait does not give the controller a per-datagram record, so this
//! controller keeps a short history instead: one snapshot (time, bytes delivered, newest
//! acknowledged send time) per acknowledgement, and looks up the newest snapshot taken no
//! later than the acknowledged datagram's send time. That is exactly the state the standard
//! would have stamped on the datagram when it left, as long as
//!
//! - acknowledgements are reported in send order (a datagram acknowledged after a later-sent
//!   one finds its snapshot pruned and gives no sample: the samples come from the newest
//!   datagram of each acknowledgement, as in the standard, so little is lost);
//! - snapshots are not thinned. To bound the memory (at most [`HISTORY_CAP`] snapshots of 24
//!   bytes), they are kept at least `RTprop / 256` apart ([`HISTORY_PER_MIN_RTT`]), so at
//!   high rates (more than 256 acknowledgements per round trip) a lookup may land up to that
//!   spacing early: the interval is then up to 1/256 longer and the sample that much lower,
//!   never higher. If a round trip outgrows the cap even so (a round trip over four times
//!   `RTprop`), the history is thinned to every other snapshot, which can lower samples more;
//! - the sender calls [`Controller::on_sent`]: it is how a send into an empty pipe restarts
//!   the intervals, so an idle period is not counted as time spent delivering. Without it,
//!   the first samples after an idle period come out low; a sender normally marks them
//!   application-limited, and such samples only count when they raise the estimate.
//!
//! The bytes delivered are this controller's own running total of the bytes
//! [`Controller::on_ack`] reports, which equals the `delivered` argument of
//! [`Controller::on_end_acks`] when the sender keeps the trait's contract; using its own
//! total keeps the samples consistent with the acknowledgements it saw even if a sender counts
//! differently.
//!
//! Rounds are counted by send time: a round trip ends when a datagram sent after the round
//! began is acknowledged.
//!
//! # Loss
//!
//! A loss that is not persistent congestion changes nothing but ProbeBW's 1.25 phase, which
//! it ends early (the probe found the buffer's limit). This is BBR version 1's design: it
//! keeps its rate under 1–2 % random loss where a loss-based controller collapses. The
//! draft's packet conservation during fast recovery (for one round trip after a loss, the
//! window is bounded by the flight plus what was just acknowledged) is left out: the window
//! follows the model alone, so a loss that is not persistent congestion leaves it untouched.
//! On persistent congestion (the path went dark for longer than
//! RFC 9002's persistent-congestion period) the window falls to its minimum of two datagrams
//! and regrows by the bytes each acknowledgement delivers, at most doubling per round trip,
//! back towards `2 × BDP` — the draft's behaviour after a retransmission timeout, except that
//! the window of before is not restored: after a black-out the old estimate is not trusted.

use super::{initial_window, minimum_window, Controller, RttEstimator};
use crate::time::Time;
use std::collections::VecDeque;
use std::fmt;
use std::time::Duration;

/// Startup's pacing gain, 2/ln 2 ≈ 2.885: the smallest gain that lets the sending rate double
/// every round trip (draft §4.3.2.1).
const HIGH_GAIN: f64 = 2.0 / std::f64::consts::LN_2;
/// Drain's pacing gain, the inverse of Startup's: drains in one round trip the queue Startup
/// built in one.
const DRAIN_GAIN: f64 = std::f64::consts::LN_2 / 2.0;
/// The window gain in Startup, Drain and ProbeBW: twice the BDP, room for delayed and
/// aggregated acknowledgements and for the 1.25 probe.
const CWND_GAIN: f64 = 2.0;
/// ProbeBW's pacing gains, one phase per `RTprop` (draft §4.3.4.3).
const GAIN_CYCLE: [f64; 8] = [1.25, 0.75, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0];
/// The bandwidth filter's window, in round trips (draft §4.1.1.4).
const BW_FILTER_ROUNDS: u64 = 10;
/// How long a minimum round trip stays valid without being lowered (draft §4.1.2.3).
const MIN_RTT_EXPIRY: Duration = Duration::from_secs(10);
/// How long ProbeRTT holds the small window once the flight has drained (draft §4.3.5).
const PROBE_RTT_DURATION: Duration = Duration::from_millis(200);
/// The smallest window BBR uses, in datagrams: enough to keep the pipe busy with delayed
/// acknowledgements (draft's `BBRMinPipeCwnd`), and ProbeRTT's window.
const MIN_PIPE_DATAGRAMS: u64 = 4;
/// Startup goes on while the bandwidth estimate grows by this factor per round trip.
const FULL_BW_GROWTH: f64 = 1.25;
/// Startup ends after this many round trips without such growth.
const FULL_BW_ROUNDS: u32 = 3;
/// The most snapshots the delivery history keeps before thinning itself (see the module
/// documentation); 24 bytes each.
const HISTORY_CAP: usize = 1024;
/// The delivery history keeps at most this many snapshots per minimum round trip, so a
/// round trip of up to `HISTORY_CAP / HISTORY_PER_MIN_RTT` = 4 minimum round trips fits
/// without thinning, and a lookup lands at most 1/256 of a round trip early.
const HISTORY_PER_MIN_RTT: u32 = 256;

/// The state machine's states (see the module documentation).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Mode {
    Startup,
    Drain,
    ProbeBw,
    ProbeRtt,
}

/// A windowed maximum over the last [`BW_FILTER_ROUNDS`] round trips: one slot per round,
/// indexed by round number modulo the window. The window ends at the newest round that gave
/// a sample (not the current round), so the estimate does not expire while no samples come
/// (an application-limited or ProbeRTT period), as with Linux's `minmax` filter.
#[derive(Clone, Copy, Debug)]
struct MaxFilter {
    /// `(round, largest sample in that round)`.
    slots: [(u64, u64); BW_FILTER_ROUNDS as usize],
    /// The newest round that gave a sample.
    latest: u64,
}

impl MaxFilter {
    fn new() -> MaxFilter {
        MaxFilter {
            slots: [(0, 0); BW_FILTER_ROUNDS as usize],
            latest: 0,
        }
    }

    /// Takes a sample `value` measured in round `round`.
    fn update(&mut self, round: u64, value: u64) {
        // A sample from before the window (the round counter never goes back, so only a
        // misuse could give one) is dropped rather than allowed to overwrite a newer slot.
        if round.saturating_add(BW_FILTER_ROUNDS) <= self.latest {
            return;
        }
        let slot = &mut self.slots[(round % BW_FILTER_ROUNDS) as usize];
        if slot.0 == round {
            slot.1 = slot.1.max(value);
        } else {
            *slot = (round, value);
        }
        self.latest = self.latest.max(round);
    }

    /// The largest sample of the window, 0 before any.
    fn get(&self) -> u64 {
        self.slots
            .iter()
            .filter(|(round, _)| {
                *round <= self.latest && round.saturating_add(BW_FILTER_ROUNDS) > self.latest
            })
            .map(|(_, value)| *value)
            .max()
            .unwrap_or(0)
    }
}

/// What the sender knew at one instant: the state the delivery-rate standard stamps on each
/// datagram it sends.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Snapshot {
    /// When the snapshot was taken: an acknowledgement's time, or a send into an empty pipe.
    at: Time,
    /// Bytes delivered by then.
    delivered: u64,
    /// The send time of the newest datagram acknowledged by then (the send that `at`'s
    /// acknowledgement answers); a send into an empty pipe sets it to its own time.
    newest_acked_sent: Time,
}

/// The snapshots of about the last round trip, oldest first, with `at` non-decreasing.
#[derive(Clone, Default)]
struct DeliveryHistory {
    entries: VecDeque<Snapshot>,
}

impl DeliveryHistory {
    fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// Appends `snap`; one taken at the same instant as the newest replaces it. A snapshot
    /// dated before the newest (a clock that went back) is dated at the newest, so the
    /// history stays sorted for the lookups' binary search.
    ///
    /// Snapshots are kept at least `spacing` apart, except the newest, which is always the
    /// current state: a snapshot within `spacing` of the one before the newest replaces the
    /// newest. A lookup then lands at most `spacing` (plus one acknowledgement's gap) before
    /// the exact snapshot, which lengthens the interval by that much and never shortens it.
    /// If the history still outgrows [`HISTORY_CAP`] (a round trip far longer than
    /// `HISTORY_CAP × spacing`), it is thinned to every other snapshot, keeping the oldest
    /// (in-flight datagrams may still look it up) and the newest.
    fn record(&mut self, mut snap: Snapshot, spacing: Duration) {
        let n = self.entries.len();
        if let Some(last) = self.entries.back_mut() {
            snap.at = snap.at.max(last.at);
            if last.at == snap.at {
                *last = snap;
                return;
            }
        }
        if let Some(before_last) = n.checked_sub(2).and_then(|i| self.entries.get(i)) {
            if snap.at.since(before_last.at) < spacing {
                if let Some(last) = self.entries.back_mut() {
                    *last = snap;
                }
                return;
            }
        }
        self.entries.push_back(snap);
        if self.entries.len() > HISTORY_CAP {
            let n = self.entries.len();
            let mut i = 0;
            self.entries.retain(|_| {
                let keep = i % 2 == 0 || i + 1 == n;
                i += 1;
                keep
            });
        }
    }

    /// The number of snapshots taken no later than `sent`.
    fn count_until(&self, sent: Time) -> usize {
        self.entries.partition_point(|s| s.at <= sent)
    }

    /// The newest snapshot taken no later than `sent`: the sender's state when a datagram
    /// sent at `sent` left.
    fn at_send(&self, sent: Time) -> Option<Snapshot> {
        let n = self.count_until(sent);
        n.checked_sub(1).and_then(|i| self.entries.get(i)).copied()
    }

    /// Drops the snapshots older than the one [`at_send`](Self::at_send) finds for `sent`:
    /// datagrams acknowledged from now on were sent no earlier, so they cannot need them.
    fn forget_before(&mut self, sent: Time) {
        let n = self.count_until(sent);
        if n > 1 {
            self.entries.drain(..n - 1);
        }
    }

    fn newest(&self) -> Option<Snapshot> {
        self.entries.back().copied()
    }
}

impl fmt::Debug for DeliveryHistory {
    // The snapshots themselves are noise in a log line: their count and span say enough.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("DeliveryHistory")
            .field("len", &self.entries.len())
            .field("oldest", &self.entries.front().map(|s| s.at))
            .field("newest", &self.entries.back().map(|s| s.at))
            .finish()
    }
}

/// What the datagrams of the acknowledgement being processed said, gathered by
/// [`Controller::on_ack`] for [`Controller::on_end_acks`].
#[derive(Clone, Copy, Debug, Default)]
struct AckBatch {
    /// Bytes newly acknowledged.
    bytes: u64,
    /// The earliest send time among them.
    oldest_sent: Option<Time>,
    /// The latest send time among them: the datagram the rate sample is taken from.
    newest_sent: Option<Time>,
    /// Whether that newest datagram was sent while the sender was application-limited.
    newest_app_limited: bool,
    /// The smallest round-trip sample among them.
    rtt: Option<Duration>,
}

/// The BBR (version 1) controller: see the module documentation.
#[derive(Clone, Debug)]
pub struct Bbr {
    mtu: u64,
    mode: Mode,
    pacing_gain: f64,
    cwnd_gain: f64,
    /// The congestion window, in bytes.
    cwnd: u64,
    /// The window saved on entering ProbeRTT, restored on leaving it.
    prior_cwnd: u64,
    /// The pacing rate in bytes per second; 0 until the first acknowledgement.
    pacing_rate: u64,
    /// The latest smoothed round trip seen, for the pacing rate before a bandwidth estimate.
    srtt: Option<Duration>,
    /// `BtlBw`: the bandwidth filter, in bytes per second.
    max_bw: MaxFilter,
    history: DeliveryHistory,
    /// Bytes acknowledged so far (the sum of [`Controller::on_ack`]'s `bytes`).
    delivered: u64,
    /// Round trips counted so far.
    round: u64,
    /// When the current round began; datagrams sent after it end the round when acknowledged.
    round_started_at: Option<Time>,
    /// Whether the acknowledgement being processed began a new round.
    round_start: bool,
    /// The bandwidth estimate at the last round that grew it by 25 %.
    full_bw: u64,
    /// Round trips in a row without such growth.
    full_bw_rounds: u32,
    /// Whether Startup found the pipe full.
    filled_pipe: bool,
    /// `RTprop`: the smallest round trip of the last [`MIN_RTT_EXPIRY`].
    min_rtt: Option<Duration>,
    /// When `min_rtt` was last lowered (or refreshed by a ProbeRTT).
    min_rtt_stamp: Time,
    /// When ProbeRTT may end (once a round has passed too); `None` while the flight drains.
    probe_rtt_done_at: Option<Time>,
    /// Whether a round has passed since ProbeRTT's flight drained.
    probe_rtt_round_done: bool,
    /// The send-time span of the current or last ProbeRTT (its end `None` while in it): rate
    /// samples of datagrams sent in it measure the small window, not the path, so they are
    /// treated as application-limited.
    probe_rtt_span: Option<(Time, Option<Time>)>,
    /// The ProbeBW phase, an index into [`GAIN_CYCLE`].
    cycle_index: usize,
    /// When the current ProbeBW phase began.
    cycle_stamp: Time,
    /// A xorshift generator's state, for ProbeBW's starting phase.
    rng: u64,
    /// Whether the sender just restarted from an application-limited idle period: ProbeRTT
    /// is not entered on that acknowledgement (the idle period drained the queue already).
    idle_restart: bool,
    /// Whether the sender was application-limited at the last acknowledgement.
    app_limited: bool,
    /// Whether a loss was declared since the last acknowledgement was processed.
    lost_since_ack: bool,
    batch: AckBatch,
}

impl Bbr {
    /// A controller for datagrams of `mtu` bytes (at most 65 535, the largest UDP payload;
    /// a larger value is taken as that).
    pub fn new(mtu: u64) -> Bbr {
        // The clamp keeps every window computed from the size (ten datagrams at most) far
        // from overflowing.
        let mtu = mtu.min(u64::from(u16::MAX));
        Bbr {
            mtu,
            mode: Mode::Startup,
            pacing_gain: HIGH_GAIN,
            cwnd_gain: CWND_GAIN,
            cwnd: initial_window(mtu),
            prior_cwnd: 0,
            pacing_rate: 0,
            srtt: None,
            max_bw: MaxFilter::new(),
            history: DeliveryHistory::default(),
            delivered: 0,
            round: 0,
            round_started_at: None,
            round_start: false,
            full_bw: 0,
            full_bw_rounds: 0,
            filled_pipe: false,
            min_rtt: None,
            min_rtt_stamp: Time::ZERO,
            probe_rtt_done_at: None,
            probe_rtt_round_done: false,
            probe_rtt_span: None,
            cycle_index: 0,
            cycle_stamp: Time::ZERO,
            // Any non-zero seed; fixed so a run is reproducible.
            rng: 0x9e37_79b9_7f4a_7c15,
            idle_restart: false,
            app_limited: false,
            lost_since_ack: false,
            batch: AckBatch::default(),
        }
    }

    /// The smallest window: [`MIN_PIPE_DATAGRAMS`] datagrams.
    fn min_pipe_cwnd(&self) -> u64 {
        MIN_PIPE_DATAGRAMS.saturating_mul(self.mtu)
    }

    /// `gain × BtlBw × RTprop` in bytes; the initial window before both are measured.
    fn inflight(&self, gain: f64) -> u64 {
        let bw = self.max_bw.get();
        match self.min_rtt {
            Some(rtt) if bw > 0 => (bw as f64 * rtt.as_secs_f64() * gain) as u64,
            _ => initial_window(self.mtu),
        }
    }

    /// The pacing rate before a bandwidth estimate: the initial window per smoothed round
    /// trip (at least 1 ms), times Startup's gain (draft §4.2.1).
    fn nominal_rate(&self, srtt: Duration) -> u64 {
        let srtt = srtt.max(Duration::from_millis(1));
        (initial_window(self.mtu) as f64 * HIGH_GAIN / srtt.as_secs_f64()) as u64
    }

    /// A xorshift64 step: enough to spread ProbeBW's starting phase, reproducibly.
    fn next_random(&mut self) -> u64 {
        let mut x = self.rng;
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        self.rng = x;
        x
    }

    /// Updates `RTprop` with `sample` and says whether it had expired (draft §4.1.2.3). It is
    /// lowered only by a strictly smaller round trip (as Linux does), so ProbeRTT comes every
    /// ten seconds on a path whose minimum is seen again but never beaten.
    fn update_min_rtt(&mut self, now: Time, sample: Option<Duration>) -> bool {
        let expired = self.min_rtt.is_some() && now.since(self.min_rtt_stamp) > MIN_RTT_EXPIRY;
        if let Some(sample) = sample {
            if expired || self.min_rtt.is_none_or(|min| sample < min) {
                self.min_rtt = Some(sample);
                self.min_rtt_stamp = now;
            }
        }
        expired
    }

    /// Whether a datagram sent at `sent` left during a ProbeRTT.
    fn sent_in_probe_rtt(&self, sent: Time) -> bool {
        self.probe_rtt_span
            .is_some_and(|(start, end)| sent >= start && end.is_none_or(|end| sent <= end))
    }

    /// The delivery rate measured by the acknowledgement of the datagram sent at `sent`, in
    /// bytes per second, if the history covers it and the interval is long enough to be
    /// meaningful (see the module documentation).
    fn delivery_rate(&self, now: Time, sent: Time) -> Option<u64> {
        let snap = self.history.at_send(sent)?;
        let ack_elapsed = now.since(snap.at);
        let send_elapsed = sent.since(snap.newest_acked_sent);
        let interval = ack_elapsed.max(send_elapsed);
        let bytes = self.delivered.saturating_sub(snap.delivered);
        // An interval shorter than the minimum round trip measures a burst of
        // acknowledgements, not the path: the standard discards it.
        if bytes == 0 || interval.is_zero() || self.min_rtt.is_some_and(|min| interval < min) {
            return None;
        }
        let rate = u128::from(bytes) * 1_000_000_000 / interval.as_nanos();
        Some(u64::try_from(rate).unwrap_or(u64::MAX))
    }

    /// Feeds a rate sample to the bandwidth filter. An application-limited sample
    /// underestimates the path, so it only counts if it beats the estimate (draft §4.1.1.5).
    fn update_max_bw(&mut self, rate: u64, app_limited: bool) {
        if !app_limited || rate >= self.max_bw.get() {
            self.max_bw.update(self.round, rate);
        }
    }

    /// Startup's exit test, once per round (draft §4.3.2.2): the pipe is full when three
    /// rounds in a row did not grow the estimate by 25 %.
    fn check_full_pipe(&mut self, app_limited: bool) {
        if self.filled_pipe || !self.round_start || app_limited {
            return;
        }
        let bw = self.max_bw.get();
        if bw as f64 >= self.full_bw as f64 * FULL_BW_GROWTH {
            self.full_bw = bw;
            self.full_bw_rounds = 0;
            return;
        }
        self.full_bw_rounds = self.full_bw_rounds.saturating_add(1);
        if self.full_bw_rounds >= FULL_BW_ROUNDS {
            self.filled_pipe = true;
        }
    }

    /// Startup → Drain once the pipe is full; Drain → ProbeBW once the queue is gone.
    fn check_drain(&mut self, now: Time, in_flight: u64) {
        if self.mode == Mode::Startup && self.filled_pipe {
            self.mode = Mode::Drain;
            self.pacing_gain = DRAIN_GAIN;
            self.cwnd_gain = CWND_GAIN;
        }
        if self.mode == Mode::Drain && in_flight <= self.inflight(1.0) {
            self.enter_probe_bw(now);
        }
    }

    fn enter_startup(&mut self) {
        self.mode = Mode::Startup;
        self.pacing_gain = HIGH_GAIN;
        self.cwnd_gain = CWND_GAIN;
    }

    /// Enters ProbeBW at a pseudo-random phase other than the 0.75 one (draft §4.3.4.4:
    /// draining before having probed would only lose throughput).
    fn enter_probe_bw(&mut self, now: Time) {
        self.mode = Mode::ProbeBw;
        self.cwnd_gain = CWND_GAIN;
        let skip = (self.next_random() % (GAIN_CYCLE.len() as u64 - 1)) as usize;
        // The phase before the one to start at; advancing lands on index 0 or 2..=7.
        self.cycle_index = GAIN_CYCLE.len() - 1 - skip;
        self.advance_cycle_phase(now);
    }

    fn advance_cycle_phase(&mut self, now: Time) {
        self.cycle_stamp = now;
        self.cycle_index = (self.cycle_index + 1) % GAIN_CYCLE.len();
        self.pacing_gain = GAIN_CYCLE[self.cycle_index];
    }

    /// ProbeBW's phase change (draft §4.3.4.4). A phase lasts one `RTprop`, except that the
    /// probe (1.25) goes on until the flight actually reached 1.25 BDP or a loss says the
    /// buffer is full, and the drain (0.75) ends as soon as the flight is down to one BDP.
    /// `prior_in_flight` is the flight before this acknowledgement.
    fn check_cycle_phase(&mut self, now: Time, prior_in_flight: u64, lost: bool) {
        if self.mode != Mode::ProbeBw {
            return;
        }
        let full_length = now.since(self.cycle_stamp) > self.min_rtt.unwrap_or(Duration::ZERO);
        let next = if self.pacing_gain > 1.0 {
            full_length && (lost || prior_in_flight >= self.inflight(self.pacing_gain))
        } else if self.pacing_gain < 1.0 {
            full_length || prior_in_flight <= self.inflight(1.0)
        } else {
            full_length
        };
        if next {
            self.advance_cycle_phase(now);
        }
    }

    /// ProbeRTT's entry and exit (draft §4.3.5).
    fn check_probe_rtt(&mut self, now: Time, in_flight: u64, min_rtt_expired: bool) {
        if self.mode != Mode::ProbeRtt && min_rtt_expired && !self.idle_restart {
            self.mode = Mode::ProbeRtt;
            self.pacing_gain = 1.0;
            self.cwnd_gain = 1.0;
            self.prior_cwnd = self.cwnd;
            self.probe_rtt_done_at = None;
            self.probe_rtt_span = Some((now, None));
        }
        if self.mode != Mode::ProbeRtt {
            return;
        }
        match self.probe_rtt_done_at {
            None => {
                if in_flight <= self.min_pipe_cwnd() {
                    // The flight has drained: hold it for 200 ms and a full round, counted
                    // from now.
                    self.probe_rtt_done_at = Some(now + PROBE_RTT_DURATION);
                    self.probe_rtt_round_done = false;
                    self.round_started_at = Some(now);
                }
            }
            Some(done_at) => {
                if self.round_start {
                    self.probe_rtt_round_done = true;
                }
                if self.probe_rtt_round_done && now >= done_at {
                    // The round trips measured now are the propagation time: keep the
                    // minimum another ten seconds.
                    self.min_rtt_stamp = now;
                    self.cwnd = self.cwnd.max(self.prior_cwnd);
                    self.probe_rtt_span = self.probe_rtt_span.map(|(start, _)| (start, Some(now)));
                    if self.filled_pipe {
                        self.enter_probe_bw(now);
                    } else {
                        self.enter_startup();
                    }
                }
            }
        }
    }

    /// The pacing rate: `pacing_gain × BtlBw`; in Startup it only ever rises, starting from
    /// the nominal rate of the initial window (draft §4.2.1).
    fn set_pacing_rate(&mut self) {
        if self.pacing_rate == 0 {
            if let Some(srtt) = self.srtt {
                self.pacing_rate = self.nominal_rate(srtt);
            }
        }
        let bw = self.max_bw.get();
        if bw == 0 {
            return;
        }
        let rate = (bw as f64 * self.pacing_gain) as u64;
        if self.filled_pipe || rate > self.pacing_rate {
            self.pacing_rate = rate;
        }
    }

    /// The window (draft §4.2.3): once the pipe is full it moves towards `cwnd_gain × BDP`,
    /// growing by at most the bytes acknowledged (so a cut regrows gradually) and falling at
    /// once; in Startup it grows by the bytes acknowledged while below the target.
    fn set_cwnd(&mut self, acked: u64) {
        let min_pipe = self.min_pipe_cwnd();
        let target = self.inflight(self.cwnd_gain).max(min_pipe);
        if self.filled_pipe {
            self.cwnd = self.cwnd.saturating_add(acked).min(target);
        } else if self.cwnd < target || self.delivered < initial_window(self.mtu) {
            self.cwnd = self.cwnd.saturating_add(acked);
        }
        self.cwnd = self.cwnd.max(min_pipe);
        if self.mode == Mode::ProbeRtt {
            self.cwnd = self.cwnd.min(min_pipe);
        }
    }
}

impl Controller for Bbr {
    fn on_sent(&mut self, now: Time, bytes: u64, in_flight: u64) {
        if in_flight > bytes {
            return;
        }
        // A send into an empty pipe: the delivery-rate intervals start afresh here, so the
        // time the pipe stood empty does not count as slow delivery.
        self.history.record(
            Snapshot {
                at: now,
                delivered: self.delivered,
                newest_acked_sent: now,
            },
            Duration::ZERO,
        );
        if self.app_limited {
            // Restart from idle (draft §4.3.4.4): the queue drained while idle, so cruise at
            // the estimate rather than resuming a probe or drain phase.
            self.idle_restart = true;
            let bw = self.max_bw.get();
            if self.mode == Mode::ProbeBw && bw > 0 {
                self.pacing_rate = bw;
            }
        }
    }

    fn on_ack(&mut self, now: Time, sent: Time, bytes: u64, app_limited: bool, rtt: &RttEstimator) {
        self.delivered = self.delivered.saturating_add(bytes);
        if let Some(srtt) = rtt.smoothed() {
            self.srtt = Some(srtt);
        }
        // The estimator's latest sample once it has one; the datagram's own round trip for a
        // sender that does not keep the estimator up to date.
        let sample = if rtt.min().is_some() {
            rtt.latest()
        } else {
            now.since(sent)
        };
        let batch = &mut self.batch;
        batch.bytes = batch.bytes.saturating_add(bytes);
        if batch.newest_sent.is_none_or(|newest| sent >= newest) {
            batch.newest_sent = Some(sent);
            batch.newest_app_limited = app_limited;
        }
        batch.oldest_sent = Some(batch.oldest_sent.map_or(sent, |oldest| oldest.min(sent)));
        batch.rtt = Some(batch.rtt.map_or(sample, |r| r.min(sample)));
    }

    fn on_end_acks(&mut self, now: Time, in_flight: u64, app_limited: bool, _delivered: u64) {
        // `_delivered` is not needed: the controller sums `on_ack`'s bytes itself (see the
        // module documentation).
        self.app_limited = app_limited;
        let batch = std::mem::take(&mut self.batch);
        let Some(newest_sent) = batch.newest_sent else {
            return;
        };
        if self.srtt.is_none() {
            self.srtt = batch.rtt;
        }
        if self.history.is_empty() {
            // No send into an empty pipe was reported: date the start of delivery at the
            // earliest send this acknowledgement covers.
            let oldest_sent = batch.oldest_sent.unwrap_or(newest_sent);
            self.history.record(
                Snapshot {
                    at: oldest_sent,
                    delivered: self.delivered.saturating_sub(batch.bytes),
                    newest_acked_sent: oldest_sent,
                },
                Duration::ZERO,
            );
        }

        // Round counting: a round ends when a datagram sent after it began is acknowledged.
        self.round_start = self
            .round_started_at
            .is_none_or(|start| newest_sent > start);
        if self.round_start {
            self.round = self.round.saturating_add(1);
            self.round_started_at = Some(now);
        }

        let min_rtt_expired = self.update_min_rtt(now, batch.rtt);

        // The rate sample, from the newest datagram acknowledged.
        let sample_app_limited = batch.newest_app_limited || self.sent_in_probe_rtt(newest_sent);
        if let Some(rate) = self.delivery_rate(now, newest_sent) {
            self.update_max_bw(rate, sample_app_limited);
        }
        self.history.forget_before(newest_sent);
        let newest_acked_sent = self
            .history
            .newest()
            .map_or(newest_sent, |s| s.newest_acked_sent.max(newest_sent));
        let spacing = self
            .min_rtt
            .map_or(Duration::ZERO, |min| min / HISTORY_PER_MIN_RTT);
        self.history.record(
            Snapshot {
                at: now,
                delivered: self.delivered,
                newest_acked_sent,
            },
            spacing,
        );

        // The state machine, in the draft's order (§4.3.1.1 `BBRUpdateModelAndState`).
        let prior_in_flight = in_flight.saturating_add(batch.bytes);
        let lost = std::mem::take(&mut self.lost_since_ack);
        self.check_cycle_phase(now, prior_in_flight, lost);
        self.check_full_pipe(sample_app_limited);
        self.check_drain(now, in_flight);
        self.check_probe_rtt(now, in_flight, min_rtt_expired);
        self.idle_restart = false;

        self.set_pacing_rate();
        self.set_cwnd(batch.bytes);
    }

    fn on_congestion_event(&mut self, _now: Time, _sent: Time, persistent: bool, _lost: u64) {
        // Loss is not congestion to BBR: it only ends a bandwidth probe (see
        // `check_cycle_phase`).
        self.lost_since_ack = true;
        if persistent {
            // The path went dark: start again from the minimum and regrow by the bytes
            // delivered (see the module documentation). A ProbeRTT in progress must not
            // restore the window of before.
            self.cwnd = minimum_window(self.mtu);
            self.prior_cwnd = self.prior_cwnd.min(self.cwnd);
        }
    }

    fn on_mtu_update(&mut self, mtu: u16) {
        self.mtu = u64::from(mtu);
        self.cwnd = self.cwnd.max(self.min_pipe_cwnd());
    }

    fn window(&self) -> u64 {
        self.cwnd
    }

    fn pacing_rate(&self, rtt: &RttEstimator) -> Option<u64> {
        if self.pacing_rate > 0 {
            return Some(self.pacing_rate);
        }
        Some(self.nominal_rate(rtt.smoothed()?))
    }

    fn initial_window(&self) -> u64 {
        initial_window(self.mtu)
    }

    fn name(&self) -> &'static str {
        "bbr"
    }

    fn clone_box(&self) -> Box<dyn Controller> {
        Box::new(Bbr::new(self.mtu))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MTU: u64 = 1400;
    /// The bottleneck: 100 Mbit/s.
    const RATE: f64 = 12_500_000.0;
    /// The round-trip propagation time.
    const PROP: Duration = Duration::from_millis(50);
    /// The path's bandwidth-delay product, in bytes (625 000).
    const BDP: f64 = RATE * 0.050;

    fn secs(s: f64) -> Time {
        Time((s * 1e9) as u64)
    }

    /// A datagram on the path: when it left and when its acknowledgement (or, if it was
    /// lost, the acknowledgement that reveals the loss) reaches the sender.
    struct Flight {
        sent: Time,
        due: Time,
        lost: bool,
    }

    /// A sender that always has data, driving a [`Bbr`] over a FIFO bottleneck of `RATE`
    /// bytes per second with a buffer of `buffer` bytes, followed by `PROP` of propagation
    /// (all of it on the way back, which changes nothing for the sender). Every datagram is
    /// acknowledged on its own; a lost one is declared lost when its acknowledgement would
    /// have arrived (as if the next one's acknowledgement revealed the gap).
    struct Sim {
        bbr: Bbr,
        rtt: RttEstimator,
        now: Time,
        in_flight: u64,
        delivered: u64,
        flights: VecDeque<Flight>,
        /// When the bottleneck finishes sending what it holds.
        link_free: Time,
        next_send: Time,
        buffer: u64,
        /// The probability of a random loss, per datagram.
        loss: f64,
        rng: u64,
        /// Loss events reported, and how many of them shrank the window.
        loss_events: u64,
        loss_cuts: u64,
    }

    impl Sim {
        fn new(buffer: u64, loss: f64) -> Sim {
            Sim {
                bbr: Bbr::new(MTU),
                rtt: RttEstimator::new(),
                now: Time::ZERO,
                in_flight: 0,
                delivered: 0,
                flights: VecDeque::new(),
                link_free: Time::ZERO,
                next_send: Time::ZERO,
                buffer,
                loss,
                rng: 0x2545_f491_4f6c_dd1d,
                loss_events: 0,
                loss_cuts: 0,
            }
        }

        /// A deep buffer (4 BDP) and no random loss.
        fn clean() -> Sim {
            Sim::new((4.0 * BDP) as u64, 0.0)
        }

        fn random(&mut self) -> f64 {
            self.rng ^= self.rng << 13;
            self.rng ^= self.rng >> 7;
            self.rng ^= self.rng << 17;
            (self.rng >> 11) as f64 / (1u64 << 53) as f64
        }

        /// Runs until `end`, calling `observe` after every event.
        fn run(&mut self, end: Time, mut observe: impl FnMut(&Sim)) {
            while self.now < end {
                self.step();
                observe(self);
            }
        }

        fn step(&mut self) {
            let ack_due = self.flights.front().map(|f| f.due);
            let send_at =
                (self.in_flight + MTU <= self.bbr.window()).then(|| self.next_send.max(self.now));
            match (ack_due, send_at) {
                (Some(ack), Some(send)) if ack <= send => self.ack(ack),
                (Some(ack), None) => self.ack(ack),
                (_, Some(send)) => self.send(send),
                (None, None) => panic!("the sender stalled with an empty pipe"),
            }
        }

        fn ack(&mut self, at: Time) {
            self.now = at;
            let mut acked = false;
            let mut lost: Option<(Time, u64)> = None;
            while let Some(flight) = self.flights.front() {
                if flight.due > at {
                    break;
                }
                let flight = self.flights.pop_front().unwrap();
                self.in_flight -= MTU;
                if flight.lost {
                    let bytes = lost.map_or(0, |(_, b)| b) + MTU;
                    lost = Some((flight.sent, bytes));
                } else {
                    self.delivered += MTU;
                    self.rtt.update(at.since(flight.sent), Duration::ZERO);
                    self.bbr.on_ack(at, flight.sent, MTU, false, &self.rtt);
                    acked = true;
                }
            }
            if let Some((sent, bytes)) = lost {
                let before = self.bbr.window();
                self.bbr.on_congestion_event(at, sent, false, bytes);
                self.loss_events += 1;
                if self.bbr.window() < before {
                    self.loss_cuts += 1;
                }
            }
            if acked {
                self.bbr
                    .on_end_acks(at, self.in_flight, false, self.delivered);
            }
        }

        fn send(&mut self, at: Time) {
            self.now = at;
            let queued = (self.link_free.since(at).as_secs_f64() * RATE) as u64;
            let start = self.link_free.max(at);
            let departs = start + Duration::from_secs_f64(MTU as f64 / RATE);
            let overflow = queued + MTU > self.buffer;
            if !overflow {
                self.link_free = departs;
            }
            let lost = overflow || self.random() < self.loss;
            self.flights.push_back(Flight {
                sent: at,
                due: departs + PROP,
                lost,
            });
            self.in_flight += MTU;
            self.bbr.on_sent(at, MTU, self.in_flight);
            let gap = match self.bbr.pacing_rate(&self.rtt) {
                Some(rate) if rate > 0 => Duration::from_secs_f64(MTU as f64 / rate as f64),
                _ => Duration::ZERO,
            };
            self.next_send = at + gap;
        }
    }

    fn within(value: f64, target: f64, tolerance: f64) -> bool {
        (value - target).abs() <= tolerance * target
    }

    #[test]
    fn startup_finds_the_link_rate_within_fifteen_rounds() {
        let mut sim = Sim::clean();
        let mut exit: Option<(u64, u64, Time)> = None;
        sim.run(secs(3.0), |s| {
            if exit.is_none() && s.bbr.mode != Mode::Startup {
                exit = Some((s.bbr.round, s.bbr.max_bw.get(), s.now));
            }
        });
        let (round, bw, at) = exit.expect("Startup never ended");
        assert!((5..=15).contains(&round), "Startup ended in round {round}");
        assert!(
            within(bw as f64, RATE, 0.2),
            "bandwidth at Startup's end {bw} B/s, link {RATE}"
        );
        assert!(at < secs(1.0), "Startup ended at {at:?}");
        // Drain then led to ProbeBW, and the model is right: the propagation time is the
        // path's (plus one datagram's serialization).
        assert_eq!(sim.bbr.mode, Mode::ProbeBw);
        let min_rtt = sim.bbr.min_rtt.unwrap();
        assert!(
            min_rtt >= PROP && min_rtt < PROP + Duration::from_millis(1),
            "{min_rtt:?}"
        );
    }

    #[test]
    fn probe_bw_keeps_the_window_near_twice_the_bdp_and_the_queue_short() {
        let mut sim = Sim::clean();
        sim.run(secs(3.0), |_| {});
        let (mut lo, mut hi) = (u64::MAX, 0);
        let mut worst_rtt = Duration::ZERO;
        let delivered_before = sim.delivered;
        sim.run(secs(6.0), |s| {
            assert_eq!(s.bbr.mode, Mode::ProbeBw, "at {:?}", s.now);
            lo = lo.min(s.bbr.window());
            hi = hi.max(s.bbr.window());
            worst_rtt = worst_rtt.max(s.rtt.latest());
        });
        assert!(
            within(lo as f64, 2.0 * BDP, 0.25) && within(hi as f64, 2.0 * BDP, 0.25),
            "window between {lo} and {hi}, 2 × BDP = {}",
            2.0 * BDP
        );
        // The link stays busy...
        let goodput = (sim.delivered - delivered_before) as f64 / 3.0;
        assert!(goodput > 0.95 * RATE, "goodput {goodput} B/s");
        // ...without the standing queue a loss-based controller would build in a 4-BDP
        // buffer: the 1.25 probe adds a quarter of a BDP, at most about 12.5 ms.
        assert!(
            worst_rtt < PROP + Duration::from_millis(20),
            "{worst_rtt:?}"
        );
    }

    #[test]
    fn probe_bw_paces_at_the_link_rate_on_average() {
        let mut sim = Sim::clean();
        sim.run(secs(3.0), |_| {});
        // Time-weighted over 4 s: ten cycles of eight phases.
        let mut weighted = 0.0;
        let mut last = sim.now;
        let mut rate = sim.bbr.pacing_rate(&sim.rtt).unwrap() as f64;
        let (mut lo, mut hi) = (f64::MAX, 0.0f64);
        let start = sim.now;
        sim.run(secs(7.0), |s| {
            weighted += rate * s.now.since(last).as_secs_f64();
            last = s.now;
            rate = s.bbr.pacing_rate(&s.rtt).unwrap() as f64;
            lo = lo.min(rate);
            hi = hi.max(rate);
        });
        let average = weighted / last.since(start).as_secs_f64();
        assert!(within(average, RATE, 0.1), "average pacing {average} B/s");
        // The cycle ran: the probe and the drain phases were both paced.
        assert!(within(hi, 1.25 * RATE, 0.1), "highest pacing {hi}");
        assert!(within(lo, 0.75 * RATE, 0.1), "lowest pacing {lo}");
    }

    #[test]
    fn one_percent_random_loss_does_not_shrink_the_window() {
        let mut sim = Sim::new((4.0 * BDP) as u64, 0.01);
        sim.run(secs(3.0), |_| {});
        assert_eq!(sim.bbr.mode, Mode::ProbeBw);
        let delivered_before = sim.delivered;
        let mut lo = u64::MAX;
        sim.run(secs(6.0), |s| lo = lo.min(s.bbr.window()));
        assert!(sim.loss_events > 100, "{} loss events", sim.loss_events);
        assert_eq!(sim.loss_cuts, 0, "a random loss shrank the window");
        assert!(lo as f64 > 1.5 * BDP, "window fell to {lo}");
        let bw = sim.bbr.max_bw.get() as f64;
        assert!(within(bw, RATE, 0.2), "bandwidth estimate {bw}");
        // 99 % of the link rate is what is left to deliver.
        let goodput = (sim.delivered - delivered_before) as f64 / 3.0;
        assert!(goodput > 0.9 * RATE, "goodput {goodput} B/s");
    }

    #[test]
    fn persistent_congestion_drops_the_window_then_it_regrows() {
        let mut sim = Sim::clean();
        sim.run(secs(3.0), |_| {});
        let before = sim.bbr.window();
        assert!(before as f64 > 1.5 * BDP);
        let now = sim.now;
        sim.bbr.on_congestion_event(now, now, true, 100 * MTU);
        assert_eq!(sim.bbr.window(), minimum_window(MTU));
        // It regrows by the bytes acknowledged, not at once.
        sim.run(now + Duration::from_millis(25), |_| {});
        assert!(sim.bbr.window() < before / 2, "{}", sim.bbr.window());
        sim.run(now + Duration::from_secs(1), |_| {});
        assert!(sim.bbr.window() as f64 > 1.5 * BDP, "{}", sim.bbr.window());
    }

    #[test]
    fn non_persistent_losses_change_nothing_but_the_probe_phase() {
        let mut sim = Sim::clean();
        sim.run(secs(3.0), |_| {});
        let window = sim.bbr.window();
        let rate = sim.bbr.pacing_rate(&sim.rtt);
        let now = sim.now;
        for _ in 0..50 {
            sim.bbr.on_congestion_event(now, now, false, 10 * MTU);
        }
        assert_eq!(sim.bbr.window(), window);
        assert_eq!(sim.bbr.pacing_rate(&sim.rtt), rate);
    }

    #[test]
    fn probe_rtt_after_ten_seconds_without_a_lower_rtt() {
        let mut sim = Sim::clean();
        let mut entered: Option<Time> = None;
        let mut left: Option<(Time, u64)> = None;
        let mut largest_in_probe_rtt = 0;
        sim.run(secs(12.0), |s| {
            let in_probe_rtt = s.bbr.mode == Mode::ProbeRtt;
            if in_probe_rtt {
                entered.get_or_insert(s.now);
                largest_in_probe_rtt = largest_in_probe_rtt.max(s.bbr.window());
            } else if entered.is_some() && left.is_none() {
                left = Some((s.now, s.bbr.window()));
            }
        });
        // The minimum was measured by the first acknowledgement, at 50 ms, and never beaten.
        let entered = entered.expect("no ProbeRTT");
        assert!(
            entered > secs(10.0) && entered < secs(10.2),
            "ProbeRTT at {entered:?}"
        );
        assert_eq!(largest_in_probe_rtt, MIN_PIPE_DATAGRAMS * MTU);
        let (left, window_on_leaving) = left.expect("ProbeRTT never ended");
        let lasted = left.since(entered);
        assert!(
            lasted >= PROBE_RTT_DURATION && lasted < PROBE_RTT_DURATION + 4 * PROP,
            "ProbeRTT lasted {lasted:?}"
        );
        // Back to ProbeBW with the window of before at once, and the minimum kept ten more
        // seconds.
        assert!(
            window_on_leaving as f64 > 1.5 * BDP,
            "window {window_on_leaving} on leaving ProbeRTT"
        );
        assert_eq!(sim.bbr.mode, Mode::ProbeBw);
        assert!(sim.bbr.window() as f64 > 1.5 * BDP, "{}", sim.bbr.window());
        assert!(sim.bbr.min_rtt_stamp >= left);
    }

    #[test]
    fn pacing_before_an_estimate_spreads_the_initial_window() {
        let bbr = Bbr::new(MTU);
        let mut rtt = RttEstimator::new();
        assert_eq!(bbr.pacing_rate(&rtt), None);
        rtt.update(Duration::from_millis(50), Duration::ZERO);
        let expected = initial_window(MTU) as f64 * HIGH_GAIN / 0.05;
        let rate = bbr.pacing_rate(&rtt).unwrap() as f64;
        assert!(within(rate, expected, 1e-6), "{rate}");
        // A tiny round trip is floored at 1 ms.
        let mut short = RttEstimator::new();
        short.update(Duration::from_micros(10), Duration::ZERO);
        let expected = initial_window(MTU) as f64 * HIGH_GAIN / 0.001;
        let rate = bbr.pacing_rate(&short).unwrap() as f64;
        assert!(within(rate, expected, 1e-6), "{rate}");
        assert_eq!(bbr.window(), initial_window(MTU));
    }

    #[test]
    fn the_bandwidth_filter_keeps_ten_rounds_and_survives_silence() {
        let mut f = MaxFilter::new();
        assert_eq!(f.get(), 0);
        f.update(1, 100);
        for round in 2..=10 {
            f.update(round, 50);
        }
        assert_eq!(f.get(), 100);
        // Round 11: round 1 is out of the window.
        f.update(11, 60);
        assert_eq!(f.get(), 60);
        // No samples: the estimate stays.
        assert_eq!(f.get(), 60);
        // A stale round cannot overwrite a newer slot.
        f.update(1, 1000);
        assert_eq!(f.get(), 60);
    }

    #[test]
    fn application_limited_samples_only_raise_the_estimate() {
        let mut bbr = Bbr::new(MTU);
        bbr.round = 1;
        bbr.update_max_bw(1000, false);
        bbr.round = 2;
        bbr.update_max_bw(10, true);
        assert_eq!(bbr.max_bw.get(), 1000);
        bbr.update_max_bw(2000, true);
        assert_eq!(bbr.max_bw.get(), 2000);
    }

    #[test]
    fn the_history_stays_small_and_finds_the_state_at_send() {
        // 10 Gbit/s of 1400-byte datagrams, each acknowledged on its own, over a 50 ms
        // round trip: 45 000 acknowledgements per round trip.
        let gap = 1120u64;
        let rtt = 50_000_000u64;
        let spacing = Duration::from_nanos(rtt) / HISTORY_PER_MIN_RTT;
        let mut h = DeliveryHistory::default();
        let mut largest = 0;
        for i in 0..200_000u64 {
            let now = Time(rtt + i * gap);
            // The datagram acknowledged now was sent one round trip ago.
            let sent = Time(i * gap);
            if let Some(snap) = h.at_send(sent) {
                assert!(snap.at <= sent);
                assert!(
                    sent.since(snap.at) <= spacing + Duration::from_nanos(2 * gap),
                    "a snapshot {:?} before the send",
                    sent.since(snap.at)
                );
            }
            h.forget_before(sent);
            h.record(
                Snapshot {
                    at: now,
                    delivered: i * 1400,
                    newest_acked_sent: sent,
                },
                spacing,
            );
            largest = largest.max(h.entries.len());
        }
        // One round trip of snapshots `spacing` apart, plus the newest and the partial ends.
        assert!(
            largest <= HISTORY_PER_MIN_RTT as usize + 4,
            "{largest} snapshots"
        );
        assert_eq!(h.newest().unwrap().at, Time(rtt + 199_999 * gap));
    }

    #[test]
    fn the_history_thins_itself_when_a_round_trip_outgrows_it() {
        let mut h = DeliveryHistory::default();
        for i in 0..10_000u64 {
            let snap = Snapshot {
                at: Time(i * 1000),
                delivered: i,
                newest_acked_sent: Time(i * 1000),
            };
            h.record(snap, Duration::ZERO);
        }
        assert!(h.entries.len() <= HISTORY_CAP);
        assert_eq!(h.entries.front().unwrap().at, Time(0));
        assert_eq!(h.newest().unwrap().at, Time(9_999_000));
        for sent in [0u64, 1, 4_321_987, 9_999_000, u64::MAX] {
            assert!(h.at_send(Time(sent)).unwrap().at <= Time(sent));
        }
        // Pruning keeps the snapshot a later send still needs.
        h.forget_before(Time(5_000_500));
        assert_eq!(h.at_send(Time(5_000_500)).unwrap().at, h.entries[0].at);
        assert!(h.entries[0].at <= Time(5_000_500));
        if let Some(before) = h.entries[0].at.0.checked_sub(1) {
            assert_eq!(h.at_send(Time(before)), None);
        }
        // A clock that goes back does not unsort it.
        let back = Snapshot {
            at: Time(1),
            delivered: 0,
            newest_acked_sent: Time(1),
        };
        h.record(back, Duration::ZERO);
        assert!(h
            .entries
            .iter()
            .zip(h.entries.iter().skip(1))
            .all(|(a, b)| a.at <= b.at));
    }

    #[test]
    fn any_sequence_of_calls_is_handled_without_panic() {
        let mut rng: u64 = 0x1234_5678_9abc_def1;
        let mut next = move || {
            rng ^= rng << 13;
            rng ^= rng >> 7;
            rng ^= rng << 17;
            rng
        };
        for mtu in [0u64, 1, 1200, u64::MAX] {
            let mut bbr = Bbr::new(mtu);
            let mut rtt = RttEstimator::new();
            for _ in 0..20_000 {
                let r = next();
                let now = Time(match r % 4 {
                    0 => 0,
                    1 => u64::MAX,
                    _ => next() % 100_000_000_000,
                });
                let sent = Time(next() % (now.0.saturating_add(1)));
                let bytes = match next() % 4 {
                    0 => 0,
                    1 => u64::MAX,
                    _ => next() % 100_000,
                };
                match r % 7 {
                    0 => bbr.on_sent(now, bytes, (next() % 3).saturating_mul(bytes)),
                    1 | 2 => {
                        if next() % 2 == 0 {
                            rtt.update(now.since(sent), Duration::from_micros(next() % 1000));
                        }
                        bbr.on_ack(now, sent, bytes, next() % 5 == 0, &rtt);
                    }
                    3 | 4 => bbr.on_end_acks(now, next() % 1_000_000, next() % 5 == 0, bytes),
                    5 => bbr.on_congestion_event(now, sent, next() % 3 == 0, bytes),
                    _ => bbr.on_mtu_update((next() % 2000) as u16),
                }
                let _ = bbr.window();
                let _ = bbr.pacing_rate(&rtt);
            }
        }
    }

    #[test]
    fn a_fresh_copy_for_a_new_connection() {
        let mut bbr = Bbr::new(1200);
        bbr.on_mtu_update(1400);
        let fresh = bbr.clone_box();
        assert_eq!(fresh.name(), "bbr");
        assert_eq!(fresh.initial_window(), initial_window(1400));
        assert_eq!(fresh.window(), initial_window(1400));
    }
}
