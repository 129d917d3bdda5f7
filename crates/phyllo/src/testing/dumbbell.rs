//! `Dumbbell`: several connections sharing one bottleneck, on a virtual clock.
//!
//! The classic topology of congestion-control experiments: N senders on the left, N
//! receivers on the right, and every flow's datagrams from left to right crossing the same
//! link — one [`MemLink`] whose `Side::A → Side::B` direction is the shared forward path
//! (give it a [`Bottleneck`](crate::faults::Bottleneck), a delay, loss, jitter) and whose
//! `Side::B → Side::A` direction is the shared reverse path the acknowledgements take.
//! Each flow is a [`Connection`] pair; its datagrams carry the flow's index as their tag on
//! the link.
//!
//! The driver steps as [`Pair`](crate::testing::Pair) does: it moves every datagram the
//! connections want to send onto the link, hands every datagram that has arrived to its
//! connection, runs the accelerator's deferred work and due timers, drains the deliveries,
//! and — when nothing is left to do at the current instant — advances the clock to the next
//! event (an arrival, a deadline, or a flow's start).
//!
//! [`run_bulk`](Dumbbell::run_bulk) is a bulk sender: from its [`Flow::start`], each A side
//! is handed messages whenever [`Connection::send`] takes them (until it says
//! [`SendError::WouldBlock`]), up to the flow's [`Flow::limit`], and each B side's deliveries
//! are checked and counted. Every message says which it is — its sequence number at both
//! ends, and between them bytes that depend on the flow and the sequence number — so a
//! delivery out of order, twice, cut short, spliced or of another flow is counted
//! ([`FlowStats::misordered`], [`FlowStats::corrupt`]). The bytes delivered to the
//! application are counted per interval of the clock ([`Dumbbell::bucket`], 100 ms by
//! default), so a test reads a flow's goodput over any window
//! ([`Dumbbell::goodput`]) and the flows' fairness ([`jain_index`]).

use crate::conn::{BuildError, Connection, SendError};
use crate::stack::{build_dyn, DynStack, LayerSet};
use crate::testing::memlink::{MemLink, Side};
use crate::testing::seeded_pair;
use crate::time::{earliest, Time};
use std::collections::VecDeque;
use std::time::Duration;

/// The bulk driver's messages are at least this long: a sequence number at each end.
pub const MIN_BULK_MESSAGE: usize = 16;

/// The period of the bytes between a bulk message's sequence numbers (a prime, so messages
/// near each other in a flow, and the flows, differ).
const PATTERN_PERIOD: usize = 251;

/// Rounds of work at one instant after which the driver gives up ([`Stalled`]): a
/// connection whose deadline stays due after its timers ran would otherwise spin forever.
const MAX_ROUNDS_PER_INSTANT: u32 = 1_000_000;

/// Most messages handed to one A side in one round (a bound on a sender whose backlog
/// never fills).
const MAX_SENDS_PER_ROUND: u32 = 1 << 16;

/// Buckets of delivered bytes kept per flow at most (beyond, deliveries still count in the
/// totals): 10⁶ buckets are a day at 100 ms.
const MAX_BUCKETS: usize = 1 << 20;

/// The driver made no progress: at `at`, work kept appearing round after round without the
/// clock advancing (a connection whose deadline stays due however often its timers run).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Stalled {
    /// The instant it stalled at.
    pub at: Time,
}

impl std::fmt::Display for Stalled {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "no progress at {} ns after {MAX_ROUNDS_PER_INSTANT} rounds",
            self.at.0
        )
    }
}

impl std::error::Error for Stalled {}

/// The most datagrams put on the link within any window of a given length: a sender's
/// burstiness.
#[derive(Clone, Debug)]
pub struct BurstMeter {
    window: Duration,
    /// `(instant, datagrams)` within the last `window`, oldest first.
    recent: VecDeque<(Time, u64)>,
    in_window: u64,
    max: u64,
    max_at: Option<Time>,
}

impl BurstMeter {
    /// A meter over windows of `window` (a window is `(t − window, t]`).
    pub fn new(window: Duration) -> BurstMeter {
        BurstMeter {
            window,
            recent: VecDeque::new(),
            in_window: 0,
            max: 0,
            max_at: None,
        }
    }

    /// `n` datagrams went on the link at `now` (instants never go back).
    pub fn record(&mut self, now: Time, n: u64) {
        if n == 0 {
            return;
        }
        match self.recent.back_mut() {
            Some((t, k)) if *t == now => *k += n,
            _ => self.recent.push_back((now, n)),
        }
        self.in_window += n;
        while let Some(&(t, k)) = self.recent.front() {
            if t + self.window > now {
                break;
            }
            self.recent.pop_front();
            self.in_window -= k;
        }
        if self.in_window > self.max {
            self.max = self.in_window;
            self.max_at = Some(now);
        }
    }

    /// The most datagrams in any window since the meter was made or [`reset`](Self::reset).
    pub fn max(&self) -> u64 {
        self.max
    }

    /// The end of the window that held [`max`](Self::max).
    pub fn max_at(&self) -> Option<Time> {
        self.max_at
    }

    /// The window's length.
    pub fn window(&self) -> Duration {
        self.window
    }

    /// Measure the maximum afresh from now on (the datagrams in the current window still
    /// count towards the next windows).
    pub fn reset(&mut self) {
        self.max = 0;
        self.max_at = None;
    }
}

/// What one flow did.
#[derive(Clone, Debug)]
pub struct FlowStats {
    /// Messages the bulk driver handed to A.
    pub sent_msgs: u64,
    /// Their bytes.
    pub sent_bytes: u64,
    /// Messages delivered to B's application.
    pub delivered_msgs: u64,
    /// Their bytes.
    pub delivered_bytes: u64,
    /// When B's application got its first message.
    pub first_delivery: Option<Time>,
    /// When B's application got its latest message.
    pub last_delivery: Option<Time>,
    /// Bytes delivered to B's application in each interval of the clock: index `i` holds
    /// `[i × bucket, (i + 1) × bucket)`.
    pub delivered_per_bucket: Vec<u64>,
    /// Deliveries that were not the next message in order (a message lost, delivered twice
    /// or reordered): the count goes up once per break, and checking resumes after it.
    pub misordered: u64,
    /// Deliveries whose bytes were not those the driver sent under their sequence number.
    pub corrupt: u64,
    /// The sequence number of the next message B's application should get.
    pub next_expected: u64,
    /// Datagrams A put on the link.
    pub datagrams_out: u64,
    /// A's datagrams on the link per window of 1 ms at most.
    pub burst: BurstMeter,
}

impl Default for FlowStats {
    fn default() -> Self {
        FlowStats {
            sent_msgs: 0,
            sent_bytes: 0,
            delivered_msgs: 0,
            delivered_bytes: 0,
            first_delivery: None,
            last_delivery: None,
            delivered_per_bucket: Vec::new(),
            misordered: 0,
            corrupt: 0,
            next_expected: 0,
            datagrams_out: 0,
            burst: BurstMeter::new(Duration::from_millis(1)),
        }
    }
}

/// One flow: a connection pair and what the bulk driver did on it.
pub struct Flow<S: LayerSet = DynStack> {
    /// The sender (its datagrams take the forward path).
    pub a: Connection<S>,
    /// The receiver (its datagrams take the reverse path).
    pub b: Connection<S>,
    /// When the bulk driver starts handing A messages.
    pub start: Time,
    /// Messages the bulk driver hands A at most (`None`: no end).
    pub limit: Option<u64>,
    /// Counters.
    pub stats: FlowStats,
}

impl<S: LayerSet> Flow<S> {
    /// The flow has a limit and all its messages were delivered.
    pub fn is_complete(&self) -> bool {
        self.limit
            .is_some_and(|n| self.stats.delivered_msgs >= n && self.stats.sent_msgs >= n)
    }
}

/// N connection pairs over one shared link.
pub struct Dumbbell<S: LayerSet = DynStack> {
    /// The flows; a flow's index is its tag on the link.
    pub flows: Vec<Flow<S>>,
    /// The shared link: A sides send on `Side::A` (the forward path), B sides on `Side::B`.
    pub link: MemLink,
    /// The virtual clock.
    pub now: Time,
    bucket: Duration,
    /// A received datagram.
    buf: Vec<u8>,
    /// The message being sent.
    msg: Vec<u8>,
    /// The bytes between a message's sequence numbers are a slice of this.
    pattern: Vec<u8>,
    /// Rounds of [`pump`](Dumbbell::pump) so far: each starts its sends with the next flow,
    /// so that no flow's datagrams always reach the bottleneck first when several leave at
    /// one instant (the first would find room in a nearly full queue, the last be dropped).
    turn: usize,
}

impl<S: LayerSet> Dumbbell<S> {
    /// No flows yet, over `link`; bytes delivered are counted per 100 ms.
    pub fn new(link: MemLink) -> Dumbbell<S> {
        Dumbbell {
            flows: Vec::new(),
            link,
            now: Time::ZERO,
            bucket: Duration::from_millis(100),
            buf: Vec::with_capacity(2048),
            msg: Vec::new(),
            pattern: Vec::new(),
            turn: 0,
        }
    }

    /// The same, counting bytes delivered per `bucket` (at least 1 µs) instead.
    pub fn with_bucket(mut self, bucket: Duration) -> Dumbbell<S> {
        self.bucket = bucket.max(Duration::from_micros(1));
        self
    }

    /// The interval bytes delivered are counted in.
    pub fn bucket(&self) -> Duration {
        self.bucket
    }

    /// Add a flow of the connections `a` (the sender) and `b`, whose bulk sending starts at
    /// `start`; its index.
    pub fn add_flow(&mut self, a: Connection<S>, b: Connection<S>, start: Time) -> usize {
        self.flows.push(Flow {
            a,
            b,
            start,
            limit: None,
            stats: FlowStats::default(),
        });
        self.flows.len() - 1
    }

    /// Whether every flow has a limit and delivered all of it.
    pub fn all_complete(&self) -> bool {
        !self.flows.is_empty() && self.flows.iter().all(Flow::is_complete)
    }

    /// Flow `flow`'s goodput between `from` and `to` in bytes per second: the bytes
    /// delivered to its application in the buckets from the one holding `from` to the one
    /// before the one holding `to` (both rounded down to a bucket's start), over that span.
    /// Zero for a flow that does not exist or an empty span.
    pub fn goodput(&self, flow: usize, from: Time, to: Time) -> f64 {
        let Some(f) = self.flows.get(flow) else {
            return 0.0;
        };
        let width = u64::try_from(self.bucket.as_nanos()).unwrap_or(u64::MAX);
        let (first, end) = (from.0 / width, to.0 / width);
        if end <= first {
            return 0.0;
        }
        let bytes: u64 = f
            .stats
            .delivered_per_bucket
            .iter()
            .take(usize::try_from(end).unwrap_or(usize::MAX))
            .skip(usize::try_from(first).unwrap_or(usize::MAX))
            .sum();
        bytes as f64 / ((end - first) as f64 * self.bucket.as_secs_f64())
    }

    /// Jain's fairness index of the flows' goodputs between `from` and `to` ([`goodput`],
    /// [`jain_index`]).
    ///
    /// [`goodput`]: Dumbbell::goodput
    pub fn fairness(&self, from: Time, to: Time) -> f64 {
        let rates: Vec<f64> = (0..self.flows.len())
            .map(|i| self.goodput(i, from, to))
            .collect();
        jain_index(&rates)
    }

    /// Run until `until`, nobody sending: only what is already queued, in flight or
    /// deferred moves.
    pub fn run_until(&mut self, until: Time) -> Result<(), Stalled> {
        self.run(until, None).map(|_| ())
    }

    /// Run the bulk sender with messages of `msg_len` bytes (at least
    /// [`MIN_BULK_MESSAGE`]) until `until`, or until every flow has a limit and delivered
    /// all of it (then the clock stops there). Whether every flow completed.
    pub fn run_bulk(&mut self, until: Time, msg_len: usize) -> Result<bool, Stalled> {
        self.run(until, Some(msg_len.max(MIN_BULK_MESSAGE)))
    }

    fn run(&mut self, until: Time, bulk: Option<usize>) -> Result<bool, Stalled> {
        if let Some(len) = bulk {
            self.prepare_pattern(len);
        }
        let mut rounds = 0u32;
        loop {
            if bulk.is_some() && self.all_complete() {
                return Ok(true);
            }
            let mut worked = false;
            if let Some(len) = bulk {
                worked |= self.fill(len);
            }
            worked |= self.pump();
            if worked {
                rounds += 1;
                if rounds > MAX_ROUNDS_PER_INSTANT {
                    return Err(Stalled { at: self.now });
                }
                continue;
            }
            match self.next_event(bulk.is_some()) {
                Some(t) if t <= until => {
                    if t > self.now {
                        rounds = 0;
                    }
                    self.now = self.now.max(t);
                }
                _ => {
                    self.now = self.now.max(until);
                    return Ok(bulk.is_some() && self.all_complete());
                }
            }
        }
    }

    /// Make the pattern long enough for messages of `len` bytes.
    fn prepare_pattern(&mut self, len: usize) {
        let need = len.saturating_add(PATTERN_PERIOD);
        if self.pattern.len() < need {
            self.pattern = (0..need).map(|i| (i % PATTERN_PERIOD) as u8).collect();
        }
    }

    /// Hand every started A side messages of `len` bytes until it says WouldBlock (or its
    /// limit is reached). Whether any was taken.
    fn fill(&mut self, len: usize) -> bool {
        let now = self.now;
        let mut any = false;
        for (i, f) in self.flows.iter_mut().enumerate() {
            if now < f.start {
                continue;
            }
            for _ in 0..MAX_SENDS_PER_ROUND {
                if f.limit.is_some_and(|n| f.stats.sent_msgs >= n) || !f.a.can_send() {
                    break;
                }
                let seq = f.stats.sent_msgs;
                let off = pattern_offset(i, seq);
                self.msg.clear();
                self.msg.extend_from_slice(&seq.to_be_bytes());
                self.msg
                    .extend_from_slice(&self.pattern[off..off + len - MIN_BULK_MESSAGE]);
                self.msg.extend_from_slice(&seq.to_be_bytes());
                match f.a.send(now, &self.msg) {
                    Ok(()) => {
                        f.stats.sent_msgs += 1;
                        f.stats.sent_bytes += len as u64;
                        any = true;
                    }
                    // Full (or a message the stack refuses): try again after the next round.
                    Err(SendError::WouldBlock) | Err(SendError::TooLarge { .. }) => break,
                }
            }
        }
        any
    }

    /// One round of work at the current instant, the clock left as it is: datagrams onto
    /// the link and off it, deferred post-processing, due timers, deliveries. Whether
    /// anything was done.
    pub fn pump(&mut self) -> bool {
        let now = self.now;
        let mut worked = false;
        let bucket = u64::try_from(self.bucket.as_nanos()).unwrap_or(u64::MAX);
        let n = self.flows.len().max(1);
        self.turn = self.turn.wrapping_add(1);
        let first = self.turn % n;
        for k in 0..self.flows.len() {
            let i = (first + k) % n;
            let f = &mut self.flows[i];
            let tag = u32::try_from(i).unwrap_or(u32::MAX);
            // A lends its datagrams (as the UDP driver takes them), B hands them over.
            while f.a.transmit_ready() > 0 {
                let link = &mut self.link;
                let lent = f.a.transmit_with(usize::MAX, |queued| {
                    for m in queued {
                        link.send_flow(Side::A, now, m.data(), tag);
                    }
                    Ok::<_, std::convert::Infallible>(queued.len())
                });
                let n = lent.unwrap_or(0) as u64;
                if n == 0 {
                    break;
                }
                f.stats.datagrams_out += n;
                f.stats.burst.record(now, n);
                worked = true;
            }
            while let Some(m) = f.b.poll_transmit() {
                self.link.send_flow(Side::B, now, m.data(), tag);
                f.b.recycle(m);
                worked = true;
            }
        }
        while let Some(tag) = self.link.recv_flow_into(Side::B, now, &mut self.buf) {
            if let Some(f) = self.flows.get_mut(tag as usize) {
                f.b.handle_datagram(now, &self.buf);
            }
            worked = true;
        }
        while let Some(tag) = self.link.recv_flow_into(Side::A, now, &mut self.buf) {
            if let Some(f) = self.flows.get_mut(tag as usize) {
                f.a.handle_datagram(now, &self.buf);
            }
            worked = true;
        }
        for (i, f) in self.flows.iter_mut().enumerate() {
            for c in [&mut f.a, &mut f.b] {
                // The application is idle between rounds: the accelerator's deferred work
                // runs now.
                if c.needs_post_process() {
                    c.post_process(now);
                    worked = true;
                }
                if c.poll_timeout().is_some_and(|t| t <= now) {
                    c.handle_timeout(now);
                    worked = true;
                }
            }
            let pattern = &self.pattern;
            let stats = &mut f.stats;
            while f
                .b
                .poll_delivery_with(|d| stats.check(i, now, bucket, d, pattern))
                .is_some()
            {
                worked = true;
            }
            // A's application gets nothing in a bulk transfer; whatever comes is dropped.
            while f.a.poll_delivery_with(|_| ()).is_some() {
                worked = true;
            }
        }
        worked
    }

    /// The next instant anything is due: an arrival, a connection's deadline, or (`bulk`) a
    /// flow's start.
    pub fn next_event(&self, bulk: bool) -> Option<Time> {
        let mut next = self.link.next_arrival();
        for f in &self.flows {
            next = earliest(next, earliest(f.a.poll_timeout(), f.b.poll_timeout()));
            if bulk && f.start > self.now {
                next = earliest(next, Some(f.start));
            }
        }
        next
    }
}

impl FlowStats {
    /// Count and check a message delivered to B's application at `now`.
    fn check(&mut self, flow: usize, now: Time, bucket: u64, d: &[u8], pattern: &[u8]) {
        let len = d.len() as u64;
        self.delivered_msgs += 1;
        self.delivered_bytes += len;
        self.first_delivery.get_or_insert(now);
        self.last_delivery = Some(now);
        if let Ok(i) = usize::try_from(now.0 / bucket.max(1)) {
            if i < MAX_BUCKETS {
                if self.delivered_per_bucket.len() <= i {
                    self.delivered_per_bucket.resize(i + 1, 0);
                }
                self.delivered_per_bucket[i] += len;
            }
        }
        let seq = |b: &[u8]| b.try_into().ok().map(u64::from_be_bytes);
        let n = d.len();
        let (head, tail) = if n >= MIN_BULK_MESSAGE {
            (seq(&d[..8]), seq(&d[n - 8..]))
        } else {
            (None, None)
        };
        let intact = match (head, tail) {
            (Some(h), Some(t)) if h == t => {
                let off = pattern_offset(flow, h);
                let body = &d[8..n - 8];
                pattern.get(off..off + body.len()) == Some(body)
            }
            _ => false,
        };
        match head {
            Some(h) if intact => {
                if h != self.next_expected {
                    self.misordered += 1;
                }
                self.next_expected = h.saturating_add(1);
            }
            _ => self.corrupt += 1,
        }
    }
}

impl Dumbbell<DynStack> {
    /// Add a flow of two connections built from `spec` (accelerated or not, keyed from
    /// `key_seed` by [`seeded_pair`], so a run replays), whose bulk sending starts at
    /// `start`; its index. Give each flow of a dumbbell its own seed: two flows under one
    /// seed hold back the same messages.
    pub fn add_spec(
        &mut self,
        spec: &str,
        accelerate: bool,
        start: Time,
        key_seed: u64,
    ) -> Result<usize, BuildError> {
        let (a, b) = seeded_pair(accelerate, key_seed);
        let a = Connection::new(build_dyn(spec)?, a)?;
        let b = Connection::new(build_dyn(spec)?, b)?;
        Ok(self.add_flow(a, b, start))
    }
}

/// Where in the pattern the body of message `seq` of flow `flow` starts.
fn pattern_offset(flow: usize, seq: u64) -> usize {
    let p = PATTERN_PERIOD as u64;
    ((seq % p) * 7 + (flow as u64 % p) * 37) as usize % PATTERN_PERIOD
}

/// Jain's fairness index of `xs`: `(Σx)² / (n · Σx²)`, 1 when all are equal, `1/n` when one
/// has everything. 1 for no values or all zero.
pub fn jain_index(xs: &[f64]) -> f64 {
    let sum: f64 = xs.iter().sum();
    let squares: f64 = xs.iter().map(|x| x * x).sum();
    if xs.is_empty() || squares == 0.0 {
        return 1.0;
    }
    sum * sum / (xs.len() as f64 * squares)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::faults::{Bottleneck, Faults};

    #[test]
    fn the_burst_meter_finds_the_busiest_window() {
        let mut m = BurstMeter::new(Duration::from_millis(1));
        let ms = |x: u64| Time(x * 1_000_000);
        m.record(ms(0), 3);
        m.record(Time(500_000), 4);
        assert_eq!(m.max(), 7);
        m.record(ms(1), 2); // the window (0, 1 ms] drops the first 3
        assert_eq!(m.max(), 7);
        m.record(Time(1_200_000), 6); // 4 + 2 + 6
        assert_eq!((m.max(), m.max_at()), (12, Some(Time(1_200_000))));
        m.reset();
        m.record(ms(5), 1);
        assert_eq!(m.max(), 1);
    }

    #[test]
    fn jain_index_of_equal_and_unequal_shares() {
        assert_eq!(jain_index(&[3.0, 3.0, 3.0]), 1.0);
        assert!((jain_index(&[1.0, 0.0]) - 0.5).abs() < 1e-12);
        assert_eq!(jain_index(&[]), 1.0);
    }

    #[test]
    fn two_flows_share_a_bottleneck_and_every_message_is_checked() {
        // 1 MB/s, 10 ms each way, a queue of 20 ms: small enough for a unit test.
        let link = MemLink::new(Faults::none(Duration::from_millis(10)), 5).with_bottleneck(
            Side::A,
            Bottleneck::new(1_000_000, Duration::from_millis(20)),
        );
        let mut d: Dumbbell = Dumbbell::new(link);
        for (seed, start) in [(1, Time::ZERO), (2, Time(50_000_000))] {
            let i = d
                .add_spec("window(32)", false, start, seed)
                .expect("builds");
            d.flows[i].limit = Some(400);
        }
        let done = d.run_bulk(Time(10_000_000_000), 1000).expect("runs");
        assert!(done, "both transfers complete");
        let total = 2 * 400 * 1000;
        for f in &d.flows {
            assert_eq!((f.stats.delivered_msgs, f.stats.misordered), (400, 0));
            assert_eq!(f.stats.corrupt, 0);
            assert_eq!(f.stats.delivered_per_bucket.iter().sum::<u64>(), 400_000);
        }
        // The link's rate bounds the transfer: 800 kB (and headers) take at least 0.8 s.
        assert!(d.now >= Time(800_000_000), "{:?}", d.now);
        let b = d.link.bottleneck(Side::A).expect("bottleneck");
        assert!(b.stats().admitted_bytes >= total);
        assert!(d.goodput(0, Time::ZERO, d.now) > 0.0);
        assert!(d.goodput(0, Time::ZERO, d.now) <= 1_000_000.0);
    }

    #[test]
    fn a_delivery_out_of_order_or_altered_is_counted() {
        let mut s = FlowStats::default();
        let pattern: Vec<u8> = (0..300).map(|i| (i % PATTERN_PERIOD) as u8).collect();
        let msg = |flow, seq: u64| {
            let off = pattern_offset(flow, seq);
            let mut m = seq.to_be_bytes().to_vec();
            m.extend_from_slice(&pattern[off..off + 20]);
            m.extend_from_slice(&seq.to_be_bytes());
            m
        };
        s.check(0, Time::ZERO, 1, &msg(0, 0), &pattern);
        s.check(0, Time::ZERO, 1, &msg(0, 1), &pattern);
        assert_eq!((s.misordered, s.corrupt), (0, 0));
        s.check(0, Time::ZERO, 1, &msg(0, 1), &pattern); // twice
        assert_eq!(s.misordered, 1);
        s.check(0, Time::ZERO, 1, &msg(1, 2), &pattern); // another flow's
        let mut bad = msg(0, 2);
        bad[10] ^= 1;
        s.check(0, Time::ZERO, 1, &bad, &pattern);
        s.check(0, Time::ZERO, 1, &[1, 2, 3], &pattern);
        assert_eq!(s.corrupt, 3);
        s.check(0, Time::ZERO, 1, &msg(0, 2), &pattern);
        assert_eq!((s.misordered, s.next_expected), (1, 3));
    }
}
