//! The livelock-free poller: the polling discipline of Mogul & Ramakrishnan, "Eliminating
//! Receive Livelock in an Interrupt-Driven Kernel" (§5-§7), sans-IO — which source to serve
//! next and how much of it, when input is inhibited, and when notification is re-armed. A
//! driver does the work and reports back: the receive engine in `phyllo-net` (epoll one-shot
//! notifications on real sockets), or the lab's discrete-event model of a forwarding host.
//!
//! - **Interrupts only start polling** (§5.2, §6.4). A notification from a source
//!   ([`Poller::interrupt`]) disarms it and marks it pending; it is re-armed only once a poll
//!   finds it drained ([`Poller::polled`] with `drained`), so a busy source costs no more
//!   notifications.
//! - **Round-robin with a quota** (§6.4, §6.6.2): [`Poller::next`] hands out pending sources in
//!   turn, receive and transmit alike, each for at most `quota` packets, so one input stream
//!   cannot starve the output (the livelock of Fig. 5 without a quota).
//! - **Queue-state feedback** (§6.6.1): a consumer queue above its high watermark inhibits
//!   input until it falls below the low one or a timeout passes (seed: 75 % / 25 % of 32,
//!   1 ms).
//! - **CPU-share limit** (§7): busy time per period is summed; above the share, input is
//!   inhibited until the period ends. [`Poller::idle`] (the system had nothing else to run)
//!   clears the sum, as the seed's idle thread does.
//! - **A source's own share** ([`Poller::set_share`]): the same accounting for one receive
//!   source alone — a socket that strangers can flood (a listening socket) may take at most
//!   its share of each period, and the other sources (established peers) are served as before.
//! - Inhibiting input only stops polling receive sources: their packets stay in the socket
//!   (or interface) buffer, where the kernel drops what does not fit — the early drop of §5.1,
//!   before any work was invested. Transmit sources are always served (§7: the limit inhibits
//!   input, not output).

use crate::time::Time;
use std::time::Duration;
use thiserror::Error;

/// A misconfigured poller.
#[derive(Clone, Debug, Error, PartialEq)]
pub enum ConfigError {
    /// A quota of zero packets would never make progress.
    #[error("quota must be at least 1 packet (or none, for no limit)")]
    ZeroQuota,
    /// Watermarks must satisfy low < high <= capacity.
    #[error(
        "watermarks need low < high <= capacity (got low {low}, high {high}, capacity {capacity})"
    )]
    Watermarks {
        /// The low watermark given.
        low: usize,
        /// The high watermark given.
        high: usize,
        /// The capacity given.
        capacity: usize,
    },
    /// The CPU share must be in (0, 1] and the period positive.
    #[error("the CPU share must be above 0 and at most 1, over a positive period (got {share} over {period:?})")]
    CycleLimit {
        /// The share given.
        share: f64,
        /// The period given.
        period: Duration,
    },
}

/// Whether a source brings packets in or drains them out.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Direction {
    /// A receive source (a socket to read): inhibited by feedback and by the CPU limit.
    Receive,
    /// A transmit source (an output queue to drain): always served.
    Transmit,
}

/// A source registered with a [`Poller`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct SourceId(pub usize);

/// A consumer queue whose level feeds back ([`Poller::queue_len`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct QueueId(pub usize);

/// A consumer queue's watermarks.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Watermarks {
    /// Entries the queue holds at most.
    pub capacity: usize,
    /// At or above this many entries, input is inhibited.
    pub high: usize,
    /// At or below this many, input resumes.
    pub low: usize,
}

impl Watermarks {
    /// The seed's: 75 % and 25 % of `capacity` (32 in the seed).
    pub fn seed(capacity: usize) -> Watermarks {
        Watermarks {
            capacity,
            high: (capacity * 3 / 4).max(1),
            low: capacity / 4,
        }
    }

    /// Check low < high <= capacity.
    pub fn check(&self) -> Result<(), ConfigError> {
        if self.low < self.high && self.high <= self.capacity {
            Ok(())
        } else {
            Err(ConfigError::Watermarks {
                low: self.low,
                high: self.high,
                capacity: self.capacity,
            })
        }
    }
}

/// The accounting period of a source's own share when no cycle limit sets one (the seed's
/// 10 ms).
const SHARE_PERIOD: Duration = Duration::from_millis(10);

/// The CPU-share limit of §7.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct CycleLimit {
    /// The most of each period packet processing may take, in (0, 1].
    pub share: f64,
    /// The accounting period (seed: 10 ms).
    pub period: Duration,
}

/// How a [`Poller`] schedules.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct PollConfig {
    /// Packets per callback; `None` for no limit (the seed's livelocking variant).
    pub quota: Option<usize>,
    /// How long a full consumer queue may inhibit input before input resumes anyway (seed:
    /// 1 ms, "in case screend is hung").
    pub feedback_timeout: Duration,
    /// The CPU-share limit, if any.
    pub cycle_limit: Option<CycleLimit>,
}

impl Default for PollConfig {
    /// The seed's settings: a quota of 8 (its best, Fig. 8), a 1 ms feedback timeout, no
    /// cycle limit.
    fn default() -> Self {
        PollConfig {
            quota: Some(8),
            feedback_timeout: Duration::from_millis(1),
            cycle_limit: None,
        }
    }
}

impl PollConfig {
    /// Check the settings.
    pub fn check(&self) -> Result<(), ConfigError> {
        if self.quota == Some(0) {
            return Err(ConfigError::ZeroQuota);
        }
        if let Some(c) = self.cycle_limit {
            if !(c.share > 0.0 && c.share <= 1.0) || c.period.is_zero() {
                return Err(ConfigError::CycleLimit {
                    share: c.share,
                    period: c.period,
                });
            }
        }
        Ok(())
    }
}

/// Why input is inhibited.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Inhibit {
    /// A consumer queue is above its high watermark.
    Feedback(QueueId),
    /// Packet processing used its share of the period.
    CycleLimit,
}

/// What the driver should do next.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Next {
    /// Serve `source` for at most `quota` packets, then report with [`Poller::polled`].
    Poll {
        /// The source.
        source: SourceId,
        /// Packets it may handle.
        quota: usize,
    },
    /// Nothing to poll: sleep until a notification, or until `until` (when inhibited input
    /// resumes) if given.
    Sleep {
        /// When inhibited input resumes, if it is inhibited.
        until: Option<Time>,
    },
}

/// What a poller counted.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PollStats {
    /// Notifications that started polling (the "interrupts" taken).
    pub interrupts: u64,
    /// Callbacks handed out.
    pub polls: u64,
    /// Packets the callbacks reported handled.
    pub packets: u64,
    /// Times feedback inhibited input.
    pub feedback_inhibits: u64,
    /// Times a feedback inhibit ended by its timeout, not by the queue draining.
    pub feedback_timeouts: u64,
    /// Times the CPU limit inhibited input.
    pub cycle_inhibits: u64,
    /// Times a source used its own share and waited for the next period.
    pub share_inhibits: u64,
}

#[derive(Clone, Copy, Debug)]
struct Source {
    dir: Direction,
    /// Notification enabled.
    armed: bool,
    /// Has (or may have) work.
    pending: bool,
    /// Closed: ignores notifications and wake-ups.
    retired: bool,
    /// This source's own quota, if not the configured one.
    quota: Option<usize>,
    /// This source's own CPU share, if it has one.
    share: Option<f64>,
    /// Time spent serving it in its current period.
    busy: Duration,
    /// When its current period started.
    period_start: Time,
    /// Not polled until this time: it used its share.
    until: Option<Time>,
}

#[derive(Clone, Copy, Debug)]
struct Queue {
    marks: Watermarks,
    /// Inhibiting input until this time, if above the high watermark.
    until: Option<Time>,
}

/// The polling discipline (module docs).
#[derive(Clone, Debug)]
pub struct Poller {
    cfg: PollConfig,
    sources: Vec<Source>,
    queues: Vec<Queue>,
    cursor: usize,
    period_start: Time,
    busy: Duration,
    /// Input inhibited by the CPU limit until this time.
    cycle_until: Option<Time>,
    /// Packets receive callbacks handled in this period.
    period_rx: u64,
    /// Busy time per packet admitted, all sources' work counted (the transmit work a
    /// received packet causes included), from the last periods that admitted any.
    per_packet: Option<f64>,
    stats: PollStats,
}

impl Poller {
    /// A poller with no sources.
    pub fn new(cfg: PollConfig) -> Result<Poller, ConfigError> {
        cfg.check()?;
        Ok(Poller {
            cfg,
            sources: Vec::new(),
            queues: Vec::new(),
            cursor: 0,
            period_start: Time::ZERO,
            busy: Duration::ZERO,
            cycle_until: None,
            period_rx: 0,
            per_packet: None,
            stats: PollStats::default(),
        })
    }

    /// The configuration.
    pub fn config(&self) -> &PollConfig {
        &self.cfg
    }

    /// What it counted.
    pub fn stats(&self) -> PollStats {
        self.stats
    }

    /// Register a source, armed and idle.
    pub fn add_source(&mut self, dir: Direction) -> SourceId {
        self.sources.push(Source {
            dir,
            armed: true,
            pending: false,
            retired: false,
            quota: None,
            share: None,
            busy: Duration::ZERO,
            period_start: Time::ZERO,
            until: None,
        });
        SourceId(self.sources.len() - 1)
    }

    /// Give source `s` a quota of its own (a weight in the round-robin: a source that may only
    /// be flooded, such as a listening socket, can take fewer packets per turn than the
    /// sources of established peers). Zero is an error.
    pub fn set_quota(&mut self, s: SourceId, quota: usize) -> Result<(), ConfigError> {
        if quota == 0 {
            return Err(ConfigError::ZeroQuota);
        }
        if let Some(x) = self.sources.get_mut(s.0) {
            x.quota = Some(quota);
        }
        Ok(())
    }

    /// Give receive source `s` a CPU share of its own, in (0, 1]: the time spent serving it is
    /// summed per period (the cycle limit's, else 10 ms), and once above `share` of the period
    /// it is not polled until the period ends — its packets wait in the socket, where the
    /// kernel drops what does not fit. The other sources are served meanwhile, and when they
    /// have nothing the driver sleeps, leaving the CPU to other threads.
    pub fn set_share(&mut self, s: SourceId, share: f64) -> Result<(), ConfigError> {
        let period = self.share_period();
        if !(share > 0.0 && share <= 1.0) {
            return Err(ConfigError::CycleLimit { share, period });
        }
        if let Some(x) = self.sources.get_mut(s.0) {
            x.share = Some(share);
        }
        Ok(())
    }

    fn share_period(&self) -> Duration {
        self.cfg.cycle_limit.map_or(SHARE_PERIOD, |c| c.period)
    }

    /// Register a consumer queue whose level inhibits input.
    pub fn add_queue(&mut self, marks: Watermarks) -> Result<QueueId, ConfigError> {
        marks.check()?;
        self.queues.push(Queue { marks, until: None });
        Ok(QueueId(self.queues.len() - 1))
    }

    /// Whether `s` wants notifications (a driver enables them at the source while armed).
    pub fn is_armed(&self, s: SourceId) -> bool {
        self.sources.get(s.0).is_some_and(|x| x.armed)
    }

    /// A notification from `s` (its "interrupt"): disarm it and mark it pending. Ignored for a
    /// disarmed source (it should not have notified). Returns whether the notification was
    /// taken.
    pub fn interrupt(&mut self, s: SourceId) -> bool {
        match self.sources.get_mut(s.0) {
            Some(x) if x.armed && !x.retired => {
                x.armed = false;
                x.pending = true;
                self.stats.interrupts += 1;
                true
            }
            _ => false,
        }
    }

    /// The level of consumer queue `q` is now `len`: above the high watermark inhibits input
    /// (until the timeout), at or below the low one releases it.
    pub fn queue_len(&mut self, now: Time, q: QueueId, len: usize) {
        let timeout = self.cfg.feedback_timeout;
        let Some(x) = self.queues.get_mut(q.0) else {
            return;
        };
        match x.until {
            None if len >= x.marks.high => {
                x.until = Some(now + timeout);
                self.stats.feedback_inhibits += 1;
            }
            Some(_) if len <= x.marks.low => x.until = None,
            _ => {}
        }
    }

    /// Why input is inhibited at `now`, if it is (expiring feedback timeouts and CPU periods
    /// as it looks).
    pub fn inhibited(&mut self, now: Time) -> Option<Inhibit> {
        self.roll_period(now);
        if self.cycle_until.is_some_and(|t| now < t) {
            return Some(Inhibit::CycleLimit);
        }
        self.cycle_until = None;
        for (i, q) in self.queues.iter_mut().enumerate() {
            match q.until {
                Some(t) if now < t => return Some(Inhibit::Feedback(QueueId(i))),
                Some(_) => {
                    q.until = None;
                    self.stats.feedback_timeouts += 1;
                }
                None => {}
            }
        }
        None
    }

    /// When the first inhibition ends (a feedback timeout or the end of the period): the time
    /// to look again.
    fn inhibit_ends(&self) -> Option<Time> {
        self.queues
            .iter()
            .filter_map(|q| q.until)
            .chain(self.cycle_until)
            .min()
    }

    /// Whether input may be taken at `now`. A receive callback asks between packets, so that
    /// feedback stops it at once rather than after its quota.
    pub fn input_allowed(&mut self, now: Time) -> bool {
        self.inhibited(now).is_none()
    }

    /// The next thing to do: a pending source in round-robin order (receive sources only while
    /// input is not inhibited), or sleep. Under a CPU limit a receive source's quota is also
    /// cut to what the rest of the period's budget pays for, at the cost per packet seen so
    /// far, so a callback does not overrun the share by most of its quota.
    pub fn next(&mut self, now: Time) -> Next {
        let mut input_ok = self.inhibited(now).is_none();
        let mut rx_quota = self.cfg.quota.unwrap_or(usize::MAX);
        if let (Some(limit), Some(cost), true) = (self.cfg.cycle_limit, self.per_packet, input_ok) {
            let left = limit.share * limit.period.as_nanos() as f64 - self.busy.as_nanos() as f64;
            let affordable = (left / cost.max(1.0)).floor();
            if affordable < 1.0 {
                self.inhibit_for_period();
                input_ok = false;
            } else if affordable < rx_quota as f64 {
                rx_quota = affordable as usize;
            }
        }
        let n = self.sources.len();
        for k in 0..n {
            let i = (self.cursor + k) % n;
            let s = self.sources[i];
            let own_share_left = s.until.is_none_or(|t| now >= t);
            if s.pending && own_share_left && (input_ok || s.dir == Direction::Transmit) {
                self.cursor = (i + 1) % n;
                self.stats.polls += 1;
                let own = s.quota.unwrap_or(usize::MAX);
                return Next::Poll {
                    source: SourceId(i),
                    quota: match s.dir {
                        Direction::Receive => rx_quota.min(own),
                        Direction::Transmit => self.cfg.quota.unwrap_or(usize::MAX).min(own),
                    },
                };
            }
        }
        // Pending receive sources wait for input to resume, or for their own period to end.
        let resume = if input_ok { None } else { self.inhibit_ends() };
        let until = self
            .sources
            .iter()
            .filter(|s| s.pending && s.dir == Direction::Receive)
            .filter_map(|s| match s.until {
                Some(t) if now < t => Some(resume.map_or(t, |r| r.max(t))),
                _ => resume,
            })
            .min();
        Next::Sleep { until }
    }

    /// Source `s` was served at `now`: it handled `handled` packets in `busy` time and is
    /// `drained` (nothing left: it is re-armed) or not (it stays pending). The busy time
    /// counts against the CPU limit.
    pub fn polled(
        &mut self,
        now: Time,
        s: SourceId,
        handled: usize,
        drained: bool,
        busy: Duration,
    ) {
        self.stats.packets += handled as u64;
        let period = self.share_period();
        if let Some(x) = self.sources.get_mut(s.0) {
            if x.dir == Direction::Receive {
                self.period_rx += handled as u64;
            }
            if let Some(share) = x.share {
                let p = period.as_nanos() as u64;
                if now.0 >= x.period_start.0.saturating_add(p) {
                    x.period_start = Time(now.0 - now.0 % p.max(1));
                    x.busy = Duration::ZERO;
                    x.until = None;
                }
                x.busy += busy;
                if x.until.is_none() && x.busy.as_secs_f64() > share * period.as_secs_f64() {
                    x.until = Some(Time(x.period_start.0.saturating_add(p)));
                    self.stats.share_inhibits += 1;
                }
            }
            if drained && !x.retired {
                x.pending = false;
                x.armed = true;
            }
        }
        self.charge(now, busy);
    }

    /// Retire source `s` (its socket closed): never pending, never armed again. Its id is
    /// not reused.
    pub fn retire(&mut self, s: SourceId) {
        if let Some(x) = self.sources.get_mut(s.0) {
            x.pending = false;
            x.armed = false;
            x.retired = true;
        }
    }

    /// Work for source `s` appeared without a notification (an output queue the driver
    /// itself filled): mark it pending.
    pub fn wake(&mut self, s: SourceId) {
        if let Some(x) = self.sources.get_mut(s.0).filter(|x| !x.retired) {
            x.pending = true;
            x.armed = false;
        }
    }

    /// Count `busy` packet-processing time against the CPU limit.
    pub fn charge(&mut self, now: Time, busy: Duration) {
        let Some(limit) = self.cfg.cycle_limit else {
            return;
        };
        self.roll_period(now);
        self.busy += busy;
        if self.busy.as_secs_f64() > limit.share * limit.period.as_secs_f64() {
            self.inhibit_for_period();
        }
    }

    /// Inhibit input until the period ends.
    fn inhibit_for_period(&mut self) {
        if let (Some(limit), None) = (self.cfg.cycle_limit, self.cycle_until) {
            self.cycle_until = Some(self.period_start + limit.period);
            self.stats.cycle_inhibits += 1;
        }
    }

    /// Start a new accounting period when the current one has ended.
    fn roll_period(&mut self, now: Time) {
        let Some(limit) = self.cfg.cycle_limit else {
            return;
        };
        let p = limit.period.as_nanos() as u64;
        if now.0 >= self.period_start.0.saturating_add(p) {
            if self.period_rx > 0 {
                let cost = self.busy.as_nanos() as f64 / self.period_rx as f64;
                self.per_packet = Some(self.per_packet.map_or(cost, |c| (c + cost) / 2.0));
            }
            self.period_start = Time(now.0 - now.0 % p.max(1));
            self.busy = Duration::ZERO;
            self.period_rx = 0;
            self.cycle_until = None;
        }
    }

    /// The system had nothing else to run: clear the CPU account (seed §7: "execution of the
    /// system's idle thread also reenables input interrupts and clears the running total").
    pub fn idle(&mut self) {
        self.busy = Duration::ZERO;
        self.cycle_until = None;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn t(us: u64) -> Time {
        Time(us * 1000)
    }

    #[test]
    fn a_source_over_its_share_waits_for_the_next_period_while_others_are_served() {
        let mut p = Poller::new(PollConfig::default()).unwrap();
        let flooded = p.add_source(Direction::Receive);
        let peer = p.add_source(Direction::Receive);
        p.set_share(flooded, 0.25).unwrap();
        assert!(p.set_share(flooded, 0.0).is_err());
        assert!(p.set_share(flooded, 1.5).is_err());
        p.interrupt(flooded);
        // 3 ms of a 10 ms period: over a quarter.
        assert_eq!(
            p.next(t(0)),
            Next::Poll {
                source: flooded,
                quota: 8
            }
        );
        p.polled(t(3000), flooded, 8, false, Duration::from_millis(3));
        assert_eq!(p.stats().share_inhibits, 1);
        // Still pending, but not polled: nothing else to do until the period ends.
        assert_eq!(
            p.next(t(3000)),
            Next::Sleep {
                until: Some(t(10_000))
            }
        );
        // The peer's socket is served meanwhile.
        p.interrupt(peer);
        assert_eq!(
            p.next(t(4000)),
            Next::Poll {
                source: peer,
                quota: 8
            }
        );
        p.polled(t(4100), peer, 1, true, Duration::from_micros(100));
        // The next period: the flooded source is served again.
        assert_eq!(
            p.next(t(10_000)),
            Next::Poll {
                source: flooded,
                quota: 8
            }
        );
    }

    #[test]
    fn interrupts_start_polling_and_drained_sources_rearm() {
        let mut p = Poller::new(PollConfig::default()).unwrap();
        let rx = p.add_source(Direction::Receive);
        let tx = p.add_source(Direction::Transmit);
        assert_eq!(p.next(t(0)), Next::Sleep { until: None });
        assert!(p.interrupt(rx));
        assert!(!p.interrupt(rx), "a disarmed source does not notify again");
        assert_eq!(
            p.next(t(1)),
            Next::Poll {
                source: rx,
                quota: 8
            }
        );
        p.polled(t(2), rx, 8, false, Duration::from_micros(1));
        p.wake(tx);
        // Round-robin: transmit comes before receive again.
        assert_eq!(
            p.next(t(3)),
            Next::Poll {
                source: tx,
                quota: 8
            }
        );
        p.polled(t(4), tx, 3, true, Duration::ZERO);
        assert_eq!(
            p.next(t(5)),
            Next::Poll {
                source: rx,
                quota: 8
            }
        );
        p.polled(t(6), rx, 2, true, Duration::ZERO);
        assert!(p.is_armed(rx) && p.is_armed(tx));
        assert_eq!(p.next(t(7)), Next::Sleep { until: None });
        assert_eq!(p.stats().packets, 13);
        assert_eq!(p.stats().interrupts, 1);
    }

    #[test]
    fn feedback_inhibits_input_until_low_or_timeout() {
        let mut p = Poller::new(PollConfig::default()).unwrap();
        let rx = p.add_source(Direction::Receive);
        let tx = p.add_source(Direction::Transmit);
        let q = p.add_queue(Watermarks::seed(32)).unwrap();
        p.interrupt(rx);
        p.queue_len(t(0), q, 24);
        assert_eq!(p.inhibited(t(1)), Some(Inhibit::Feedback(q)));
        assert_eq!(
            p.next(t(1)),
            Next::Sleep {
                until: Some(t(1000))
            }
        );
        p.wake(tx);
        assert_eq!(
            p.next(t(2)),
            Next::Poll {
                source: tx,
                quota: 8
            },
            "output still runs"
        );
        p.queue_len(t(3), q, 9);
        assert!(p.inhibited(t(3)).is_some(), "above low: still inhibited");
        p.queue_len(t(4), q, 8);
        assert_eq!(p.inhibited(t(4)), None);
        p.queue_len(t(5), q, 30);
        assert!(p.inhibited(t(500)).is_some());
        assert_eq!(
            p.inhibited(t(1005)),
            None,
            "the timeout releases a hung consumer"
        );
        assert_eq!(p.stats().feedback_timeouts, 1);
    }

    #[test]
    fn the_cycle_limit_inhibits_input_for_the_rest_of_the_period() {
        let cfg = PollConfig {
            cycle_limit: Some(CycleLimit {
                share: 0.5,
                period: Duration::from_millis(10),
            }),
            ..PollConfig::default()
        };
        let mut p = Poller::new(cfg).unwrap();
        let rx = p.add_source(Direction::Receive);
        p.interrupt(rx);
        p.polled(t(100), rx, 8, false, Duration::from_millis(4));
        assert_eq!(p.inhibited(t(4100)), None);
        p.polled(t(6000), rx, 8, false, Duration::from_millis(2));
        assert_eq!(p.inhibited(t(6000)), Some(Inhibit::CycleLimit));
        assert_eq!(
            p.next(t(6000)),
            Next::Sleep {
                until: Some(t(10_000))
            }
        );
        assert_eq!(p.inhibited(t(10_000)), None, "a new period");
        p.polled(t(10_500), rx, 8, false, Duration::from_millis(6));
        assert!(p.inhibited(t(10_500)).is_some());
        p.idle();
        assert_eq!(p.inhibited(t(10_501)), None, "idle clears the account");
    }

    #[test]
    fn a_source_may_have_a_quota_of_its_own() {
        let mut p = Poller::new(PollConfig::default()).unwrap();
        let listen = p.add_source(Direction::Receive);
        let peer = p.add_source(Direction::Receive);
        p.set_quota(listen, 2).unwrap();
        assert!(p.set_quota(listen, 0).is_err());
        p.interrupt(listen);
        p.interrupt(peer);
        assert_eq!(
            p.next(t(0)),
            Next::Poll {
                source: listen,
                quota: 2
            }
        );
        p.polled(t(1), listen, 2, false, Duration::ZERO);
        assert_eq!(
            p.next(t(2)),
            Next::Poll {
                source: peer,
                quota: 8
            }
        );
    }

    #[test]
    fn misconfiguration_is_an_error() {
        assert_eq!(
            Poller::new(PollConfig {
                quota: Some(0),
                ..PollConfig::default()
            })
            .err(),
            Some(ConfigError::ZeroQuota)
        );
        let bad = Watermarks {
            capacity: 32,
            high: 8,
            low: 24,
        };
        assert!(Poller::new(PollConfig::default())
            .unwrap()
            .add_queue(bad)
            .is_err());
        for share in [0.0, 1.5, f64::NAN] {
            let cfg = PollConfig {
                cycle_limit: Some(CycleLimit {
                    share,
                    period: Duration::from_millis(10),
                }),
                ..PollConfig::default()
            };
            assert!(Poller::new(cfg).is_err(), "share {share}");
        }
    }
}
