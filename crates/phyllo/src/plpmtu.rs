//! Datagram size from the path: Datagram Packetization Layer Path MTU Discovery (DPLPMTUD,
//! RFC 8899).
//!
//! A path carries datagrams up to some size and drops larger ones (IPv6 routers never
//! fragment, and the runtimes send IPv4 with "don't fragment" set). Every IPv4 and IPv6 path
//! carries [`BASE_PLPMTU`] bytes of UDP payload, so a connection starts there and searches
//! upward with **probes**: datagrams of the size to try, padded, that carry nothing else and
//! are never resent. A probe the peer acknowledges confirms its size; [`MAX_PROBES`] lost in a
//! row mark it too large. The first probe tries the largest size ([`MAX_PLPMTU`] by default:
//! a 1500-byte Ethernet MTU less the IPv6 and UDP headers), which most paths carry, so the
//! search usually ends one round trip after it starts; otherwise it halves the interval
//! between the largest size confirmed and the smallest that failed until they are within
//! [`SEARCH_GRANULARITY`] bytes. [`RAISE_AFTER`] later it searches again (a path may have
//! grown). A **black hole** — the path stopped carrying the confirmed size, seen as
//! consecutive probe timeouts of the reliable layer — sends the size back to the base.
//!
//! The reliable layer runs the search ([`Search`]; the `window` layer, whose acknowledgements
//! and timers it needs) and publishes the result in the connection's [`PathMtu`], which the
//! layer that cuts messages (`frag`) and the accelerator's fast path read. Sizes here are
//! datagrams' bytes of UDP payload; [`PathMtu::body_limit`] turns them into what a layer's
//! message body may hold.

use crate::time::Time;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::Duration;

/// Bytes of UDP payload every IPv4 and IPv6 path carries (RFC 8899 §5.1.2; QUIC's minimum).
pub const BASE_PLPMTU: usize = 1200;

/// The largest datagram a search tries by default: a 1500-byte Ethernet MTU less an IPv6
/// header (40 bytes) and a UDP header (8).
pub const MAX_PLPMTU: usize = 1452;

/// Probes of one size lost in a row before the size counts as too large (RFC 8899's
/// `MAX_PROBES`).
pub const MAX_PROBES: u32 = 3;

/// The search ends when the largest size confirmed and the smallest that failed are this
/// close.
pub const SEARCH_GRANULARITY: usize = 16;

/// How long after a search ended the next begins (RFC 8899's `PMTU_RAISE_TIMER`).
pub const RAISE_AFTER: Duration = Duration::from_secs(600);

/// What the layers of one connection share of the path's datagram size: the searching layer
/// sets it, the layer that cuts messages and the accelerator's fast path read it. Each
/// layer's copy knows the bytes a datagram carries besides that layer's message body (the
/// header area, what the layers below append, the accelerator's preamble, the driver's own
/// header), set when the connection's layout is known.
#[derive(Clone, Debug)]
pub struct PathMtu {
    inner: Arc<Shared>,
    layer: usize,
}

#[derive(Debug)]
struct Shared {
    /// The largest datagram known to cross the path; `usize::MAX` while nothing searches.
    datagram: AtomicUsize,
    /// Per layer, the bytes of a datagram besides that layer's body.
    overhead: OnceLock<Vec<usize>>,
}

impl PathMtu {
    /// A connection's: no size known (nothing searches yet).
    pub(crate) fn new() -> PathMtu {
        PathMtu {
            inner: Arc::new(Shared {
                datagram: AtomicUsize::new(usize::MAX),
                overhead: OnceLock::new(),
            }),
            layer: 0,
        }
    }

    /// The same, as layer `i` sees it.
    pub(crate) fn for_layer(&self, i: usize) -> PathMtu {
        PathMtu {
            inner: Arc::clone(&self.inner),
            layer: i,
        }
    }

    /// Set the per-layer overheads (once, when the layout is known).
    pub(crate) fn set_overheads(&self, overheads: Vec<usize>) {
        let _ = self.inner.overhead.set(overheads);
    }

    /// The largest datagram known to cross the path, bytes of UDP payload; `None` while no
    /// layer searches.
    pub fn datagram(&self) -> Option<usize> {
        match self.inner.datagram.load(Ordering::Relaxed) {
            usize::MAX => None,
            n => Some(n),
        }
    }

    /// Publish the size the search confirmed (the searching layer).
    pub fn set_datagram(&self, n: usize) {
        self.inner.datagram.store(n, Ordering::Relaxed);
    }

    /// Bytes a datagram carries besides this layer's message body (0 before the layout is
    /// known).
    pub fn overhead(&self) -> usize {
        self.inner
            .overhead
            .get()
            .and_then(|o| o.get(self.layer))
            .copied()
            .unwrap_or(0)
    }

    /// The largest body this layer's messages may have for their datagrams to cross the path;
    /// `None` while no layer searches.
    #[inline]
    pub fn body_limit(&self) -> Option<usize> {
        self.datagram().map(|d| d.saturating_sub(self.overhead()))
    }
}

/// A probe in flight.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Probe {
    id: u32,
    size: usize,
    sent: Time,
}

/// What a probe's end changed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Outcome {
    /// Nothing (not the probe in flight, or not yet lost).
    Nothing,
    /// A probe of this size was lost; the size is tried again.
    Lost(usize),
    /// The path carries this size: the new confirmed size.
    Confirmed(usize),
    /// This size failed [`MAX_PROBES`] times: the search goes on below it.
    TooLarge(usize),
}

/// One connection's search (RFC 8899 §5.2's states: base, searching, search complete).
#[derive(Clone, Debug)]
pub struct Search {
    /// The largest size confirmed.
    confirmed: usize,
    /// The largest size still to try (below the smallest that failed).
    ceiling: usize,
    /// The largest size any search tries.
    max: usize,
    probe: Option<Probe>,
    /// Probes of the current size lost in a row.
    lost: u32,
    /// The size the next probe tries again (one was lost).
    retry: Option<usize>,
    next_id: u32,
    /// When the search ended (it begins again [`RAISE_AFTER`] later).
    done_at: Option<Time>,
    /// Whether any probe had its answer ([`settled`](Self::settled)).
    answered: bool,
}

impl Search {
    /// A search from [`BASE_PLPMTU`] up to `max` bytes (a `max` at or below the base: no
    /// search, the base stays).
    pub fn new(max: usize) -> Search {
        let max = max.max(BASE_PLPMTU);
        Search {
            confirmed: BASE_PLPMTU,
            ceiling: max,
            max,
            probe: None,
            lost: 0,
            retry: None,
            next_id: 0,
            done_at: None,
            answered: false,
        }
    }

    /// The largest size confirmed.
    pub fn confirmed(&self) -> usize {
        self.confirmed
    }

    /// Whether the first probe had its answer (acknowledged, or lost while the path was
    /// alive): before that, the size to cut messages to is least known.
    pub fn settled(&self) -> bool {
        self.answered
    }

    /// Whether the search ended (until [`RAISE_AFTER`] has passed).
    pub fn complete(&self) -> bool {
        self.ceiling < self.confirmed + SEARCH_GRANULARITY
    }

    /// The probe to send at `now`, if one is due: its id and size, now counted in flight.
    /// None while one is in flight or the search is complete (a complete search older than
    /// [`RAISE_AFTER`] starts again first).
    pub fn next_probe(&mut self, now: Time) -> Option<(u32, usize)> {
        if self.probe.is_some() {
            return None;
        }
        if self.complete() {
            let again = self.done_at.is_some_and(|t| now >= t + RAISE_AFTER);
            if !again || self.confirmed >= self.max {
                self.done_at.get_or_insert(now);
                return None;
            }
            self.ceiling = self.max;
            self.done_at = None;
        }
        // A lost size again; else the largest first (most paths carry it); after a failure,
        // halfway.
        let size = match self.retry {
            Some(size) => size,
            None if self.ceiling == self.max => self.ceiling,
            None => (self.confirmed + self.ceiling).div_ceil(2),
        };
        let id = self.next_id;
        self.next_id = self.next_id.wrapping_add(1);
        self.probe = Some(Probe {
            id,
            size,
            sent: now,
        });
        Some((id, size))
    }

    /// When the probe in flight counts as lost, given the probe timeout `pto`.
    pub fn deadline(&self, pto: Duration) -> Option<Time> {
        self.probe.map(|p| p.sent + pto)
    }

    /// The peer acknowledged probe `id`.
    pub fn on_ack(&mut self, id: u32, now: Time) -> Outcome {
        match self.probe {
            Some(p) if p.id == id => {
                self.answered = true;
                self.probe = None;
                self.lost = 0;
                self.retry = None;
                self.confirmed = self.confirmed.max(p.size);
                if self.complete() {
                    self.done_at = Some(now);
                }
                Outcome::Confirmed(self.confirmed)
            }
            _ => Outcome::Nothing,
        }
    }

    /// Check the probe in flight against the probe timeout `pto` at `now`. A probe that timed
    /// out while the path was not `alive` (the reliable layer's own probes were going
    /// unanswered: an outage, not a size) says nothing of its size: it is tried again.
    pub fn on_timer(&mut self, now: Time, pto: Duration, alive: bool) -> Outcome {
        let Some(p) = self.probe.filter(|p| now >= p.sent + pto) else {
            return Outcome::Nothing;
        };
        self.probe = None;
        if !alive {
            self.retry = Some(p.size);
            return Outcome::Nothing;
        }
        self.answered = true;
        self.lost += 1;
        if self.lost < MAX_PROBES {
            // The next probe tries the same size again.
            self.retry = Some(p.size);
            return Outcome::Lost(p.size);
        }
        self.lost = 0;
        self.retry = None;
        self.ceiling = p.size - 1;
        if self.complete() {
            self.done_at = Some(now);
        }
        Outcome::TooLarge(p.size)
    }

    /// The path stopped carrying the confirmed size: back to the base, and the search
    /// begins again (its probes wait until the path is alive again, see
    /// [`on_timer`](Self::on_timer)).
    pub fn black_hole(&mut self) {
        self.confirmed = BASE_PLPMTU;
        self.ceiling = self.max;
        self.probe = None;
        self.lost = 0;
        self.retry = None;
        self.done_at = None;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn t(ms: u64) -> Time {
        Time(ms * 1_000_000)
    }

    const PTO: Duration = Duration::from_millis(100);

    /// Run a search against a path carrying `mtu` bytes, each probe answered (or lost) at
    /// once; the sizes probed and the size found.
    fn find(mtu: usize, max: usize) -> (Vec<usize>, usize) {
        let mut s = Search::new(max);
        let mut now = 0;
        let mut sizes = Vec::new();
        while let Some((id, size)) = s.next_probe(t(now)) {
            sizes.push(size);
            now += 1;
            if size <= mtu {
                s.on_ack(id, t(now));
            } else {
                now += 100;
                s.on_timer(t(now), PTO, true);
            }
            assert!(sizes.len() < 64, "{sizes:?}");
        }
        (sizes, s.confirmed())
    }

    #[test]
    fn a_path_that_carries_the_largest_size_takes_one_probe() {
        assert_eq!(find(1500, MAX_PLPMTU), (vec![MAX_PLPMTU], MAX_PLPMTU));
    }

    #[test]
    fn a_smaller_path_is_found_within_the_granularity_and_never_overestimated() {
        for mtu in [1200, 1250, 1280, 1400, 1420, 1451] {
            let (sizes, found) = find(mtu, MAX_PLPMTU);
            assert!(found <= mtu, "{mtu}: found {found}");
            assert!(
                mtu - found < SEARCH_GRANULARITY,
                "{mtu}: found {found}: {sizes:?}"
            );
            // Each failing size is tried MAX_PROBES times, no more.
            for &s in &sizes {
                let n = sizes.iter().filter(|&&x| x == s).count() as u32;
                assert!(n <= MAX_PROBES, "{mtu}: {s} probed {n} times");
            }
        }
    }

    #[test]
    fn a_black_hole_goes_back_to_the_base_and_searches_again() {
        let mut s = Search::new(MAX_PLPMTU);
        let (id, _) = s.next_probe(t(0)).unwrap();
        assert_eq!(s.on_ack(id, t(1)), Outcome::Confirmed(MAX_PLPMTU));
        assert_eq!(s.next_probe(t(2)), None, "complete");
        s.black_hole();
        assert_eq!(s.confirmed(), BASE_PLPMTU);
        assert_eq!(s.next_probe(t(3)).map(|p| p.1), Some(MAX_PLPMTU));
    }

    #[test]
    fn a_probe_lost_in_an_outage_says_nothing_of_its_size() {
        let mut s = Search::new(MAX_PLPMTU);
        for k in 0..10 {
            let (_, size) = s.next_probe(t(k * 200)).unwrap();
            assert_eq!(size, MAX_PLPMTU);
            assert_eq!(s.on_timer(t(k * 200 + 150), PTO, false), Outcome::Nothing);
        }
        let (id, size) = s.next_probe(t(5000)).unwrap();
        assert_eq!(s.on_ack(id, t(5001)), Outcome::Confirmed(size));
        assert_eq!(size, MAX_PLPMTU);
    }

    #[test]
    fn the_search_starts_again_after_the_raise_timer() {
        let (_, found) = find(1300, MAX_PLPMTU);
        let mut s = Search::new(MAX_PLPMTU);
        let mut now = 0;
        while let Some((id, size)) = s.next_probe(t(now)) {
            now += 100;
            if size <= 1300 {
                s.on_ack(id, t(now));
            } else {
                s.on_timer(t(now), PTO, true);
            }
        }
        assert_eq!(s.confirmed(), found);
        assert_eq!(s.next_probe(t(now + 1000)), None);
        let later = t(now) + RAISE_AFTER + Duration::from_secs(1);
        assert_eq!(s.next_probe(later).map(|p| p.1), Some(MAX_PLPMTU));
    }

    #[test]
    fn an_answer_to_another_probe_changes_nothing() {
        let mut s = Search::new(MAX_PLPMTU);
        let (id, _) = s.next_probe(t(0)).unwrap();
        assert_eq!(s.on_ack(id.wrapping_add(1), t(1)), Outcome::Nothing);
        assert_eq!(s.confirmed(), BASE_PLPMTU);
    }

    #[test]
    fn the_path_size_is_per_connection_and_each_layer_sees_its_body_limit() {
        let p = PathMtu::new();
        assert_eq!(p.body_limit(), None);
        p.set_overheads(vec![50, 40]);
        let (top, below) = (p.for_layer(0), p.for_layer(1));
        below.set_datagram(1200);
        assert_eq!(
            (top.body_limit(), below.body_limit()),
            (Some(1150), Some(1160))
        );
        assert_eq!(PathMtu::new().datagram(), None);
    }
}
