//! `memlink`: an in-process pair of datagram queues with seeded fault injection.
//!
//! Each direction is a queue ordered by arrival time on a virtual clock. A
//! datagram sent at `now` is lost, duplicated, corrupted (one random bit flipped) or delayed
//! by extra time (which reorders it) with the configured probabilities; everything is drawn
//! from a ChaCha-based generator seeded by the caller, so every schedule replays exactly.
//! Buffers are recycled, so a lossless link allocates nothing in the steady state. The queue
//! is bounded: beyond `capacity` datagrams in flight per direction, new ones are dropped and
//! counted, like a full interface queue.
//!
//! Each direction may also have, off by default (and then nothing changes):
//!
//! - a [`Bottleneck`] ([`MemLink::with_bottleneck`]): a link of a fixed rate behind a bounded
//!   FIFO queue, crossed *before* the faults and the propagation delay. A datagram that finds
//!   the queue full is dropped and counted ([`LinkStats::queue_drops`]); one admitted arrives
//!   at `crossed + delay`, where `crossed` is when the bottleneck has sent it. Lost datagrams
//!   have used the bottleneck's capacity (they are lost beyond it, on the path).
//! - jitter ([`MemLink::with_jitter`]): an extra delay drawn uniformly from `[0, jitter]` for
//!   every datagram, which never lets it overtake the datagram sent before it in the same
//!   direction: one that would is held until that one arrives (as on a real path, where
//!   jitter is queueing, which is FIFO). Only the `reorder` fault reorders. Datagrams sent
//!   much closer together than the jitter therefore bunch up near the largest extra delay,
//!   as behind a queue; the spread shows between bursts and on sparse traffic.
//!
//! Datagrams may carry a flow tag ([`MemLink::send_flow`], [`MemLink::recv_flow_into`]), so
//! several connections can share one link and its bottleneck (the test support's
//! [`Dumbbell`](crate::testing::dumbbell::Dumbbell)).

pub use crate::faults::{Arrival, Bottleneck, BottleneckStats, Fate, Faults};
use crate::time::Time;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use std::collections::BinaryHeap;
use std::time::Duration;

/// One end of the link.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Side {
    /// End A.
    A,
    /// End B.
    B,
}

impl Side {
    fn dir(self) -> usize {
        match self {
            Side::A => 0,
            Side::B => 1,
        }
    }
}

#[derive(Debug, PartialEq, Eq)]
struct InFlight {
    at: Time,
    serial: u64,
    /// The sender's flow tag (0 for untagged sends).
    flow: u32,
    data: Vec<u8>,
}

impl Ord for InFlight {
    fn cmp(&self, o: &Self) -> std::cmp::Ordering {
        // BinaryHeap is a max-heap: earliest arrival (then earliest sent) first.
        (o.at, o.serial).cmp(&(self.at, self.serial))
    }
}

impl PartialOrd for InFlight {
    fn partial_cmp(&self, o: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(o))
    }
}

/// Counters of what the link did.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct LinkStats {
    /// Datagrams offered.
    pub sent: u64,
    /// Lost on purpose.
    pub lost: u64,
    /// Duplicated.
    pub duplicated: u64,
    /// Delayed extra (reordered).
    pub reordered: u64,
    /// Corrupted.
    pub corrupted: u64,
    /// Dropped because the direction's queue was full.
    pub overflow: u64,
    /// Handed to the receiving side.
    pub delivered: u64,
    /// Dropped because a direction's bottleneck queue was full (see [`Bottleneck`]).
    pub queue_drops: u64,
    /// Dropped because they were larger than the direction's MTU ([`MemLink::with_mtu`]).
    pub too_big: u64,
    /// Bytes handed to B (sent by A).
    pub delivered_bytes_to_b: u64,
    /// Bytes handed to A (sent by B).
    pub delivered_bytes_to_a: u64,
}

impl LinkStats {
    /// Bytes handed to `to`.
    pub fn delivered_bytes(&self, to: Side) -> u64 {
        match to {
            Side::A => self.delivered_bytes_to_a,
            Side::B => self.delivered_bytes_to_b,
        }
    }
}

/// The shaping of one direction: its bottleneck and jitter, and the arrival instants the
/// jitter must not reorder.
#[derive(Clone, Debug, Default)]
struct Shape {
    bottleneck: Option<Bottleneck>,
    /// Datagrams larger than this are dropped.
    mtu: Option<usize>,
    jitter: Duration,
    /// The latest in-order arrival (before any `reorder` extra) of any datagram so far.
    last: Time,
    /// The latest in-order arrival of a jittered datagram: no later datagram, jittered or
    /// not, arrives before it (so switching jitter off keeps the order too). Zero while
    /// jitter was never on, so an unjittered link is unchanged.
    floor: Time,
}

/// The in-memory link.
#[derive(Debug)]
pub struct MemLink {
    faults: Faults,
    rng: ChaCha8Rng,
    queues: [BinaryHeap<InFlight>; 2],
    spare: Vec<Vec<u8>>,
    serial: u64,
    capacity: usize,
    stats: LinkStats,
    /// Per direction, indexed by the sending side.
    shapes: [Shape; 2],
}

impl MemLink {
    /// A link with `faults`, drawing from `seed`.
    pub fn new(faults: Faults, seed: u64) -> MemLink {
        MemLink {
            faults,
            rng: ChaCha8Rng::seed_from_u64(seed),
            queues: [BinaryHeap::with_capacity(64), BinaryHeap::with_capacity(64)],
            spare: Vec::new(),
            serial: 0,
            capacity: 100_000,
            stats: LinkStats::default(),
            shapes: [Shape::default(), Shape::default()],
        }
    }

    /// A perfect link with no delay.
    pub fn perfect() -> MemLink {
        MemLink::new(Faults::none(Duration::ZERO), 0)
    }

    /// Change the faults of datagrams sent from now on (datagrams in flight keep theirs):
    /// a soak heals the link, or cuts it off, mid-run.
    pub fn set_faults(&mut self, faults: Faults) {
        self.faults = faults;
    }

    /// The faults in force.
    pub fn faults(&self) -> &Faults {
        &self.faults
    }

    /// Counters.
    pub fn stats(&self) -> &LinkStats {
        &self.stats
    }

    /// The same link with datagrams sent by `from` crossing `bottleneck` before the faults
    /// and the delay.
    pub fn with_bottleneck(mut self, from: Side, bottleneck: Bottleneck) -> MemLink {
        self.set_bottleneck(from, Some(bottleneck));
        self
    }

    /// Put `bottleneck` in the way of datagrams sent by `from` from now on (`None`: remove
    /// it). Datagrams already on the link keep their arrival.
    pub fn set_bottleneck(&mut self, from: Side, bottleneck: Option<Bottleneck>) {
        self.shapes[from.dir()].bottleneck = bottleneck;
    }

    /// The bottleneck of datagrams sent by `from`, with its counters.
    pub fn bottleneck(&self, from: Side) -> Option<&Bottleneck> {
        self.shapes[from.dir()].bottleneck.as_ref()
    }

    /// The bottleneck of datagrams sent by `from`, to reset its peak.
    pub fn bottleneck_mut(&mut self, from: Side) -> Option<&mut Bottleneck> {
        self.shapes[from.dir()].bottleneck.as_mut()
    }

    /// The same link dropping datagrams sent by `from` that are larger than `mtu` bytes (a
    /// path that does not fragment), counted as [`LinkStats::too_big`].
    pub fn with_mtu(mut self, from: Side, mtu: usize) -> MemLink {
        self.set_mtu(from, Some(mtu));
        self
    }

    /// Drop datagrams sent by `from` larger than `mtu` from now on (`None`: any size passes).
    pub fn set_mtu(&mut self, from: Side, mtu: Option<usize>) {
        self.shapes[from.dir()].mtu = mtu;
    }

    /// The same link with datagrams sent by `from` delayed by up to `jitter` more, in order
    /// (see the module documentation).
    pub fn with_jitter(mut self, from: Side, jitter: Duration) -> MemLink {
        self.set_jitter(from, jitter);
        self
    }

    /// Jitter datagrams sent by `from` from now on by up to `jitter` (zero: none), in order.
    pub fn set_jitter(&mut self, from: Side, jitter: Duration) {
        self.shapes[from.dir()].jitter = jitter;
    }

    /// The jitter of datagrams sent by `from`.
    pub fn jitter(&self, from: Side) -> Duration {
        self.shapes[from.dir()].jitter
    }

    /// Change how many datagrams each direction holds in flight at most (100 000 by
    /// default); beyond it they are dropped and counted ([`LinkStats::overflow`]).
    pub fn set_capacity(&mut self, datagrams: usize) {
        self.capacity = datagrams;
    }

    fn enqueue(&mut self, dir: usize, at: Time, flow: u32, data: &[u8], arrival: Arrival) {
        if self.queues[dir].len() >= self.capacity {
            self.stats.overflow += 1;
            return;
        }
        let mut buf = self.spare.pop().unwrap_or_default();
        buf.clear();
        buf.extend_from_slice(data);
        arrival.corrupt(&mut buf);
        self.serial += 1;
        self.queues[dir].push(InFlight {
            at,
            serial: self.serial,
            flow,
            data: buf,
        });
    }

    /// Send `data` from `from` at `now`.
    pub fn send(&mut self, from: Side, now: Time, data: &[u8]) {
        self.send_flow(from, now, data, 0);
    }

    /// Send `data` from `from` at `now`, tagged with `flow` ([`recv_flow_into`] tells the
    /// tag on arrival).
    ///
    /// [`recv_flow_into`]: MemLink::recv_flow_into
    pub fn send_flow(&mut self, from: Side, now: Time, data: &[u8], flow: u32) {
        self.stats.sent += 1;
        let dir = from.dir();
        if self.shapes[dir].mtu.is_some_and(|m| data.len() > m) {
            self.stats.too_big += 1;
            return;
        }
        // The bottleneck comes first: what it drops draws no fate (only a link with a
        // bottleneck draws differently from one without).
        let crossed = match &mut self.shapes[dir].bottleneck {
            Some(b) => match b.admit(now, data.len()) {
                Some(t) => t,
                None => {
                    self.stats.queue_drops += 1;
                    return;
                }
            },
            None => now,
        };
        let fate = self.faults.draw(&mut self.rng, data.len());
        if fate.copies[0].is_none() {
            self.stats.lost += 1;
            return;
        }
        if fate.copies[1].is_some() {
            self.stats.duplicated += 1;
        }
        for a in fate.copies.into_iter().flatten() {
            let mut at = self.in_order_arrival(dir, crossed + self.faults.delay);
            if let Some(extra) = a.extra {
                self.stats.reordered += 1;
                at = at + extra;
            }
            self.stats.corrupted += u64::from(a.flip.is_some());
            self.enqueue(dir, at, flow, data, a);
        }
    }

    /// When a datagram due at `due` (sent, crossed and delayed) arrives in direction `dir`
    /// with the direction's jitter, keeping the order (see [`Shape`]). Draws only when the
    /// jitter is not zero, so an unjittered link replays as before.
    fn in_order_arrival(&mut self, dir: usize, due: Time) -> Time {
        let shape = &mut self.shapes[dir];
        let at = if shape.jitter.is_zero() {
            due.max(shape.floor)
        } else {
            let max = u64::try_from(shape.jitter.as_nanos()).unwrap_or(u64::MAX);
            let extra = Duration::from_nanos(self.rng.random_range(0..=max));
            let at = (due + extra).max(shape.last);
            shape.floor = at;
            at
        };
        shape.last = shape.last.max(at);
        at
    }

    /// The next datagram that has arrived at `to` by `now`, copied into `out` (cleared first).
    pub fn recv_into(&mut self, to: Side, now: Time, out: &mut Vec<u8>) -> bool {
        self.recv_flow_into(to, now, out).is_some()
    }

    /// The next datagram that has arrived at `to` by `now`, copied into `out` (cleared
    /// first); its flow tag ([`send_flow`](MemLink::send_flow); 0 for [`send`](MemLink::send)),
    /// or `None` if none has arrived.
    pub fn recv_flow_into(&mut self, to: Side, now: Time, out: &mut Vec<u8>) -> Option<u32> {
        let dir = 1 - to.dir();
        match self.queues[dir].peek() {
            Some(f) if f.at <= now => {}
            _ => return None,
        }
        let f = self.queues[dir].pop()?;
        out.clear();
        out.extend_from_slice(&f.data);
        self.spare.push(f.data);
        self.stats.delivered += 1;
        let bytes = u64::try_from(out.len()).unwrap_or(u64::MAX);
        match to {
            Side::A => self.stats.delivered_bytes_to_a += bytes,
            Side::B => self.stats.delivered_bytes_to_b += bytes,
        }
        Some(f.flow)
    }

    /// When the next datagram arrives at either side.
    pub fn next_arrival(&self) -> Option<Time> {
        self.queues
            .iter()
            .filter_map(|q| q.peek().map(|f| f.at))
            .min()
    }

    /// Datagrams in flight.
    pub fn in_flight(&self) -> usize {
        self.queues.iter().map(|q| q.len()).sum()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn perfect_link_preserves_order_and_bytes() {
        let mut l = MemLink::perfect();
        for i in 0..10u8 {
            l.send(Side::A, Time(0), &[i; 3]);
        }
        let mut buf = Vec::new();
        for i in 0..10u8 {
            assert!(l.recv_into(Side::B, Time(0), &mut buf));
            assert_eq!(buf, [i; 3]);
        }
        assert!(!l.recv_into(Side::B, Time(0), &mut buf));
        assert!(!l.recv_into(Side::A, Time(0), &mut buf));
    }

    #[test]
    fn delay_holds_datagrams_until_due() {
        let mut l = MemLink::new(Faults::none(Duration::from_micros(10)), 1);
        l.send(Side::B, Time(0), b"x");
        let mut buf = Vec::new();
        assert!(!l.recv_into(Side::A, Time(9_999), &mut buf));
        assert_eq!(l.next_arrival(), Some(Time(10_000)));
        assert!(l.recv_into(Side::A, Time(10_000), &mut buf));
    }

    #[test]
    fn faults_replay_from_the_seed() {
        let run = |seed| {
            let f = Faults {
                loss: 0.2,
                duplicate: 0.1,
                reorder: 0.2,
                corrupt: 0.1,
                delay: Duration::from_micros(5),
                reorder_delay: Duration::from_micros(50),
            };
            let mut l = MemLink::new(f, seed);
            for i in 0..200u16 {
                l.send(Side::A, Time(i as u64 * 1000), &i.to_be_bytes());
            }
            let mut got = Vec::new();
            let mut buf = Vec::new();
            while l.recv_into(Side::B, Time(u64::MAX), &mut buf) {
                got.push(buf.clone());
            }
            (got, l.stats().clone())
        };
        let (a, sa) = run(7);
        assert_eq!((a.clone(), sa.clone()), run(7));
        assert_ne!(a, run(8).0);
        assert!(sa.lost > 0 && sa.duplicated > 0 && sa.reordered > 0 && sa.corrupted > 0);
    }

    #[test]
    fn a_bottleneck_spaces_datagrams_before_the_delay_and_drops_past_its_queue() {
        // 1 MB/s (1000 bytes: 1 ms), a queue of 2 ms, 10 ms of delay, A to B only.
        let mut l = MemLink::new(Faults::none(Duration::from_millis(10)), 1).with_bottleneck(
            Side::A,
            Bottleneck::new(1_000_000, Duration::from_millis(2)),
        );
        for i in 0..5u8 {
            l.send_flow(Side::A, Time(0), &[i; 1000], u32::from(i));
        }
        l.send(Side::B, Time(0), &[9; 1000]);
        assert_eq!(l.stats().queue_drops, 2);
        assert_eq!(
            l.bottleneck(Side::A).map(|b| b.stats().peak_backlog),
            Some(3000)
        );
        assert!(l.bottleneck(Side::B).is_none());
        let mut buf = Vec::new();
        // B to A has no bottleneck: there at 10 ms.
        assert!(l.recv_into(Side::A, Time(10_000_000), &mut buf));
        for i in 0..3u8 {
            let due = Time((11 + u64::from(i)) * 1_000_000);
            assert_eq!(l.next_arrival(), Some(due));
            assert_eq!(l.recv_flow_into(Side::B, Time(due.0 - 1), &mut buf), None);
            assert_eq!(l.recv_flow_into(Side::B, due, &mut buf), Some(u32::from(i)));
            assert_eq!(buf, [i; 1000]);
        }
        assert_eq!(l.stats().delivered_bytes(Side::B), 3000);
        assert_eq!(l.stats().delivered_bytes(Side::A), 1000);
    }

    #[test]
    fn jitter_spreads_arrivals_but_never_reorders() {
        let run = |seed| {
            let mut l = MemLink::new(Faults::none(Duration::from_millis(5)), seed)
                .with_jitter(Side::A, Duration::from_millis(3));
            for i in 0..500u16 {
                l.send(Side::A, Time(u64::from(i) * 1_000_000), &i.to_be_bytes());
            }
            let mut got = Vec::new();
            let mut buf = Vec::new();
            while let Some(now) = l.next_arrival() {
                while l.recv_into(Side::B, now, &mut buf) {
                    got.push((now, u16::from_be_bytes([buf[0], buf[1]])));
                }
            }
            got
        };
        let got = run(3);
        assert_eq!(got, run(3), "replays from the seed");
        assert_ne!(got, run(4));
        let order: Vec<u16> = got.iter().map(|g| g.1).collect();
        assert_eq!(order, (0..500).collect::<Vec<u16>>());
        // Every datagram is delayed by 5 to 8 ms (the one before arrives by then), and the
        // extra delays are spread, not constant.
        let extra: Vec<u64> = got
            .iter()
            .map(|(t, i)| t.0 - u64::from(*i) * 1_000_000 - 5_000_000)
            .collect();
        assert!(extra.iter().all(|&e| e <= 3_000_000));
        assert!(extra.iter().any(|&e| e < 1_000_000));
        assert!(extra.iter().any(|&e| e > 2_000_000));
    }

    #[test]
    fn switching_jitter_off_keeps_the_order() {
        let mut l = MemLink::new(Faults::none(Duration::ZERO), 9)
            .with_jitter(Side::A, Duration::from_secs(1));
        for i in 0..20u8 {
            l.send(Side::A, Time(u64::from(i)), &[i]);
        }
        l.set_jitter(Side::A, Duration::ZERO);
        for i in 20..40u8 {
            l.send(Side::A, Time(u64::from(i)), &[i]);
        }
        let mut buf = Vec::new();
        for i in 0..40u8 {
            assert!(l.recv_into(Side::B, Time(u64::MAX), &mut buf));
            assert_eq!(buf, [i]);
        }
    }
}
