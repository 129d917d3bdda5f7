//! `memlink`: an in-process pair of datagram queues with seeded fault injection.
//!
//! Each direction is a queue ordered by arrival time on a virtual clock. A
//! datagram sent at `now` is lost, duplicated, corrupted (one random bit flipped) or delayed
//! by extra time (which reorders it) with the configured probabilities; everything is drawn
//! from a ChaCha-based generator seeded by the caller, so every schedule replays exactly.
//! Buffers are recycled, so a lossless link allocates nothing in the steady state. The queue
//! is bounded: beyond `capacity` datagrams in flight per direction, new ones are dropped and
//! counted, like a full interface queue.

pub use crate::faults::{Arrival, Fate, Faults};
use crate::time::Time;
use rand::SeedableRng;
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

    fn enqueue(&mut self, dir: usize, at: Time, data: &[u8], arrival: Arrival) {
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
            data: buf,
        });
    }

    /// Send `data` from `from` at `now`.
    pub fn send(&mut self, from: Side, now: Time, data: &[u8]) {
        self.stats.sent += 1;
        let fate = self.faults.draw(&mut self.rng, data.len());
        if fate.copies[0].is_none() {
            self.stats.lost += 1;
            return;
        }
        if fate.copies[1].is_some() {
            self.stats.duplicated += 1;
        }
        for a in fate.copies.into_iter().flatten() {
            let mut at = now + self.faults.delay;
            if let Some(extra) = a.extra {
                self.stats.reordered += 1;
                at = at + extra;
            }
            self.stats.corrupted += u64::from(a.flip.is_some());
            self.enqueue(from.dir(), at, data, a);
        }
    }

    /// The next datagram that has arrived at `to` by `now`, copied into `out` (cleared first).
    pub fn recv_into(&mut self, to: Side, now: Time, out: &mut Vec<u8>) -> bool {
        let dir = 1 - to.dir();
        match self.queues[dir].peek() {
            Some(f) if f.at <= now => {}
            _ => return false,
        }
        let Some(f) = self.queues[dir].pop() else {
            return false;
        };
        out.clear();
        out.extend_from_slice(&f.data);
        self.spare.push(f.data);
        self.stats.delivered += 1;
        true
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
}
