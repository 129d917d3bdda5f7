//! A deterministic discrete-event model of seed 002's two designs on one CPU, for loads beyond what
//! a generator can offer and for checks fast enough for `cargo test`. (Seed 002 is Mogul and
//! Ramakrishnan, "Eliminating Receive Livelock in an Interrupt-Driven Kernel".)
//!
//! The host forwards packets (the seed's router, §6): an interface ring receives them, the CPU
//! takes each through link-level and IP processing to the transmitter, optionally by way of a
//! user-level screening process (`screend`, §6.6.1), and a compute-bound user thread (§7) takes
//! whatever CPU is left. Every per-packet cost is a parameter ([`Costs`]); arrivals are
//! periodic, Poisson or bursts ([`Arrivals`]). Two designs:
//!
//! - [`Design::Baseline`], 4.2BSD (§4.1, Fig. 3): the receive interrupt handler, at the
//!   highest priority, moves every packet it finds to the bounded `ipintrq` (it handles transmit
//!   completions only when no packet is waiting: receive first, §4.4); a software interrupt
//!   runs IP and hands packets to the transmitter or its output queue; `screend` and the user
//!   thread run below.
//! - [`Design::Engine`], the polling engine (§6.4-§7): an interrupt only disarms the source and
//!   wakes the polling thread; the thread serves sources round-robin through the very
//!   [`Poller`] the real engine uses, each receive callback taking packets through IP to the
//!   transmitter or the screening queue in one go (no `ipintrq`), with quota, queue-state
//!   feedback and CPU-share limit as configured.
//!
//! The transmitter has a ring of descriptors; a sent packet's descriptor comes back only when
//! the CPU reclaims it (a transmit callback, or the baseline's transmit interrupt), which is how
//! an input stream that never yields the CPU also stops the output (Fig. 5's livelock at the
//! output queue). A packet counts as delivered when the wire has sent it.
//!
//! Preemption happens between units of work (one packet's step of a stage, or a slice of the
//! user thread no longer than the time to the next arrival), which is exact for the work
//! itself and delays an interrupt by at most one such unit.

use phyllo::poller::{
    ConfigError, Direction, Next, PollConfig, Poller, QueueId, SourceId, Watermarks,
};
use phyllo::time::Time;
use std::collections::VecDeque;
use std::time::Duration;

/// CPU time per unit of work, and the output link's time per packet.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Costs {
    /// Taking an interrupt (dispatch, and the thread switch it causes).
    pub interrupt: Duration,
    /// Per packet: the driver and link level (taking it off the interface).
    pub link: Duration,
    /// Per packet: IP input and the forwarding decision.
    pub ip: Duration,
    /// Per packet: handing it to the transmitter.
    pub output: Duration,
    /// Per packet: reclaiming a sent packet's transmit descriptor.
    pub txdone: Duration,
    /// Per packet: the user-level screening process, its system calls included.
    pub screen: Duration,
    /// Per callback: the polling loop's own overhead.
    pub poll: Duration,
    /// Per packet: time on the output wire.
    pub wire: Duration,
}

impl Costs {
    /// Costs in the seed's range (a DECstation 3000/300 forwarding minimum-size packets on
    /// 10 Mb/s Ethernet): about 200 µs of CPU per forwarded packet, 150 µs more through
    /// `screend`.
    pub fn seed() -> Costs {
        let us = Duration::from_micros;
        Costs {
            interrupt: us(30),
            link: us(50),
            ip: us(70),
            output: us(40),
            txdone: us(20),
            screen: us(150),
            poll: us(5),
            wire: us(67),
        }
    }
}

/// How packets arrive.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Arrivals {
    /// Evenly spaced.
    Periodic,
    /// A Poisson process.
    Poisson,
    /// Bursts of `size` packets `spacing` apart, the bursts themselves periodic at the offered
    /// rate divided by `size`.
    Bursts {
        /// Packets per burst.
        size: usize,
        /// Time between the packets of a burst.
        spacing: Duration,
    },
}

/// Which design runs the host.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Design {
    /// 4.2BSD's interrupt-driven structure.
    Baseline,
    /// The polling engine with this discipline.
    Engine(PollConfig),
}

/// One run of the model.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Scenario {
    /// The design.
    pub design: Design,
    /// The costs.
    pub costs: Costs,
    /// Offered packets per second.
    pub rate: f64,
    /// Their pattern.
    pub arrivals: Arrivals,
    /// Packets go through a user-level screening process.
    pub screend: bool,
    /// The engine inhibits input while the screening queue is full (queue-state feedback).
    pub feedback: bool,
    /// A compute-bound user thread competes for the CPU.
    pub user_thread: bool,
    /// Packets the interface buffers before it drops (the socket buffer, in user space).
    pub interface_ring: usize,
    /// The baseline's IP input queue (4.2BSD's `IFQ_MAXLEN`, 50).
    pub ipintrq: usize,
    /// The output queue in front of the transmitter.
    pub output_queue: usize,
    /// Transmit descriptors.
    pub tx_ring: usize,
    /// The screening queue (seed: 32 entries, watermarks at 75 % and 25 %).
    pub screen_queue: usize,
    /// Model time measured, after the warm-up.
    pub duration: Duration,
    /// Model time before measuring starts.
    pub warmup: Duration,
    /// Seed of the arrival process.
    pub seed: u64,
}

impl Scenario {
    /// `design` at `rate` packets per second, periodic arrivals, the seed's costs and queues,
    /// no screening, no user thread, 0.5 s measured after 0.1 s.
    pub fn new(design: Design, rate: f64) -> Scenario {
        Scenario {
            design,
            costs: Costs::seed(),
            rate,
            arrivals: Arrivals::Periodic,
            screend: false,
            feedback: false,
            user_thread: false,
            interface_ring: 32,
            ipintrq: 50,
            output_queue: 50,
            tx_ring: 16,
            screen_queue: 32,
            duration: Duration::from_millis(500),
            warmup: Duration::from_millis(100),
            seed: 1,
        }
    }
}

/// Packets dropped, by place.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Drops {
    /// At the interface (its ring full): no work was spent on them.
    pub interface: u64,
    /// At the baseline's IP input queue.
    pub ipintrq: u64,
    /// At the output queue.
    pub output: u64,
    /// At the screening queue.
    pub screen: u64,
}

/// What a run measured (over the measured window).
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Outcome {
    /// Packets per second offered.
    pub offered: f64,
    /// Packets per second the wire sent.
    pub delivered: f64,
    /// Drops by place.
    pub drops: Drops,
    /// The user thread's share of the CPU.
    pub user_share: f64,
    /// Interrupts taken per packet offered.
    pub interrupts_per_packet: f64,
    /// Mean time from a burst's first arrival to its first packet reaching the transmitter
    /// (the seed's first-packet latency, Figs. 1 and 14).
    pub first_packet_latency: Option<Duration>,
}

/// A packet: when it arrived, and whether it opened a burst.
#[derive(Clone, Copy, Debug)]
struct Pkt {
    arrived: u64,
    first: bool,
}

/// Who the CPU worked for.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Who {
    Kernel,
    Screend,
    User,
}

/// splitmix64: a small deterministic generator for the arrival process.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// Uniform in (0, 1].
    fn unit(&mut self) -> f64 {
        ((self.next() >> 11) as f64 + 1.0) / (1u64 << 53) as f64
    }
}

/// The engine's poller and what it polls.
struct EngineState {
    poller: Poller,
    rx: SourceId,
    tx: SourceId,
    screen: Option<QueueId>,
    /// The poller has nothing to do before this time (or a notification).
    asleep_until: Option<u64>,
}

struct Sim {
    s: Scenario,
    now: u64,
    end: u64,
    window_start: u64,
    rng: Rng,
    next_arrival: u64,
    burst_left: usize,
    ring: VecDeque<Pkt>,
    ipintrq: VecDeque<Pkt>,
    outq: VecDeque<Pkt>,
    screenq: VecDeque<Pkt>,
    /// Packets handed to the transmitter and not yet on the wire.
    tx_waiting: usize,
    /// When the packet on the wire is done, if one is.
    wire: Option<u64>,
    /// Sent packets whose descriptors are not reclaimed yet.
    unreclaimed: usize,
    /// The baseline's receive interrupt handler is running.
    in_handler: bool,
    engine: Option<EngineState>,
    // Counters over the window.
    offered: u64,
    delivered: u64,
    drops: Drops,
    user_ns: u64,
    interrupts: u64,
    latencies: Vec<u64>,
}

impl Sim {
    fn new(s: Scenario) -> Result<Sim, ConfigError> {
        let engine = match s.design {
            Design::Baseline => None,
            Design::Engine(cfg) => {
                let mut poller = Poller::new(cfg)?;
                let rx = poller.add_source(Direction::Receive);
                let tx = poller.add_source(Direction::Transmit);
                let screen = if s.screend && s.feedback {
                    Some(poller.add_queue(Watermarks::seed(s.screen_queue))?)
                } else {
                    None
                };
                Some(EngineState {
                    poller,
                    rx,
                    tx,
                    screen,
                    asleep_until: None,
                })
            }
        };
        let warm = s.warmup.as_nanos() as u64;
        Ok(Sim {
            s,
            now: 0,
            end: warm + s.duration.as_nanos() as u64,
            window_start: warm,
            rng: Rng(s.seed),
            next_arrival: 0,
            burst_left: 0,
            ring: VecDeque::new(),
            ipintrq: VecDeque::new(),
            outq: VecDeque::new(),
            screenq: VecDeque::new(),
            tx_waiting: 0,
            wire: None,
            unreclaimed: 0,
            in_handler: false,
            engine,
            offered: 0,
            delivered: 0,
            drops: Drops::default(),
            user_ns: 0,
            interrupts: 0,
            latencies: Vec::new(),
        })
    }

    fn measuring(&self) -> bool {
        self.now >= self.window_start
    }

    /// Nanoseconds until the next arrival after the one at `self.next_arrival` (a burst's
    /// first packet follows a gap that set `burst_left` to the burst's size).
    fn gap(&mut self) -> u64 {
        let mean = 1e9 / self.s.rate.max(1e-9);
        match self.s.arrivals {
            Arrivals::Periodic => mean as u64,
            Arrivals::Poisson => (-self.rng.unit().ln() * mean) as u64,
            Arrivals::Bursts { size, spacing } => {
                let size = size.max(1);
                if self.burst_left > 1 {
                    self.burst_left -= 1;
                    spacing.as_nanos() as u64
                } else {
                    self.burst_left = size;
                    let period = mean * size as f64;
                    let within = spacing.as_nanos() as f64 * (size - 1) as f64;
                    (period - within).max(1.0) as u64
                }
            }
        }
    }

    /// Let the interface and the wire run up to `until` (arrivals, transmissions).
    fn advance_to(&mut self, until: u64) {
        loop {
            let wire_done = self.wire;
            let next = match wire_done {
                Some(w) if w <= self.next_arrival => w,
                _ => self.next_arrival,
            };
            if next > until {
                break;
            }
            self.now = next;
            if wire_done == Some(next) {
                self.wire = None;
                self.unreclaimed += 1;
                if self.measuring() {
                    self.delivered += 1;
                }
                self.start_wire();
            } else {
                self.arrive();
            }
        }
        self.now = until;
    }

    fn arrive(&mut self) {
        // `gap` set `burst_left` to the burst's size when it returned the gap before a burst.
        let first = match self.s.arrivals {
            Arrivals::Bursts { size, .. } => self.burst_left == size.max(1),
            _ => true,
        };
        let p = Pkt {
            arrived: self.now,
            first: first && matches!(self.s.arrivals, Arrivals::Bursts { .. }),
        };
        if self.measuring() {
            self.offered += 1;
        }
        if self.ring.len() < self.s.interface_ring {
            self.ring.push_back(p);
        } else if self.measuring() {
            self.drops.interface += 1;
        }
        let gap = self.gap();
        self.next_arrival = self.now + gap.max(1);
    }

    fn start_wire(&mut self) {
        if self.wire.is_none() && self.tx_waiting > 0 {
            self.tx_waiting -= 1;
            self.wire = Some(self.now + self.s.costs.wire.as_nanos() as u64);
        }
    }

    /// Spend `d` of CPU for `who`.
    fn spend(&mut self, d: Duration, who: Who) {
        let start = self.now;
        self.advance_to(start + d.as_nanos() as u64);
        if who == Who::User {
            // Only the window's part counts.
            let from = start.max(self.window_start);
            self.user_ns += self.now.saturating_sub(from);
        }
    }

    fn free_descriptors(&self) -> usize {
        let used = self.tx_waiting + self.unreclaimed + usize::from(self.wire.is_some());
        self.s.tx_ring.saturating_sub(used)
    }

    /// Hand a packet to the transmitter, or queue it for later.
    fn ip_output(&mut self, p: Pkt, who: Who) {
        if self.free_descriptors() > 0 && self.outq.is_empty() {
            self.spend(self.s.costs.output, who);
            self.transmit(p);
        } else if self.outq.len() < self.s.output_queue {
            self.outq.push_back(p);
            if let Some(e) = &mut self.engine {
                e.poller.wake(e.tx);
            }
        } else if self.measuring() {
            self.drops.output += 1;
        }
    }

    fn transmit(&mut self, p: Pkt) {
        if p.first && p.arrived >= self.window_start {
            self.latencies.push(self.now - p.arrived);
        }
        self.tx_waiting += 1;
        self.start_wire();
    }

    /// The packet after IP: to the screening queue, or out.
    fn forward(&mut self, p: Pkt, who: Who) {
        if self.s.screend {
            if self.screenq.len() < self.s.screen_queue {
                self.screenq.push_back(p);
            } else if self.measuring() {
                self.drops.screen += 1;
            }
            self.feed_back();
        } else {
            self.ip_output(p, who);
        }
    }

    fn feed_back(&mut self) {
        let (now, len) = (Time(self.now), self.screenq.len());
        if let Some(e) = &mut self.engine {
            if let Some(q) = e.screen {
                e.poller.queue_len(now, q, len);
            }
        }
    }

    /// Reclaim one descriptor and start one queued packet; whether there was work.
    fn transmit_step(&mut self) -> usize {
        let mut n = 0;
        if self.unreclaimed > 0 {
            self.spend(self.s.costs.txdone, Who::Kernel);
            self.unreclaimed -= 1;
            n += 1;
        }
        if self.free_descriptors() > 0 {
            if let Some(p) = self.outq.pop_front() {
                self.spend(self.s.costs.output, Who::Kernel);
                self.transmit(p);
                n += 1;
            }
        }
        n
    }

    /// The user-level processes: `screend` first when it has work, else the user thread.
    /// Returns false when neither wants the CPU.
    fn user_level(&mut self, horizon: u64) -> bool {
        if let Some(p) = self.screenq.pop_front() {
            self.feed_back();
            self.spend(self.s.costs.screen, Who::Screend);
            self.ip_output(p, Who::Screend);
            return true;
        }
        if self.s.user_thread {
            // Run until something could preempt: the next arrival, the wire, or a timer.
            let slice = horizon.max(self.now + 1).min(self.now + 100_000);
            self.spend(Duration::from_nanos(slice - self.now), Who::User);
            return true;
        }
        false
    }

    /// The next time anything happens without the CPU (an arrival or the wire).
    fn next_event(&self) -> u64 {
        let w = self.wire.unwrap_or(u64::MAX);
        self.next_arrival.min(w)
    }

    fn step_baseline(&mut self) {
        let c = self.s.costs;
        // The receive interrupt handler: receive first, then transmit completions.
        if self.in_handler || !self.ring.is_empty() || self.unreclaimed > 0 {
            if !self.in_handler {
                self.in_handler = true;
                if self.measuring() {
                    self.interrupts += 1;
                }
                self.spend(c.interrupt, Who::Kernel);
            }
            if let Some(p) = self.ring.pop_front() {
                self.spend(c.link, Who::Kernel);
                if self.ipintrq.len() < self.s.ipintrq {
                    self.ipintrq.push_back(p);
                } else if self.measuring() {
                    self.drops.ipintrq += 1;
                }
            } else if self.transmit_step() == 0 {
                self.in_handler = false;
            }
            return;
        }
        // The software interrupt: IP.
        if let Some(p) = self.ipintrq.pop_front() {
            self.spend(c.ip, Who::Kernel);
            self.forward(p, Who::Kernel);
            return;
        }
        let horizon = self.next_event();
        if !self.user_level(horizon) {
            self.advance_to(horizon.min(self.end));
        }
    }

    fn step_engine(&mut self) {
        let c = self.s.costs;
        let Some(mut e) = self.engine.take() else {
            return;
        };
        // Interrupts: only from armed sources, and they only wake the poller.
        let mut woke = false;
        if !self.ring.is_empty() && e.poller.is_armed(e.rx) {
            woke |= e.poller.interrupt(e.rx);
        }
        if self.unreclaimed > 0 && e.poller.is_armed(e.tx) {
            woke |= e.poller.interrupt(e.tx);
        }
        if woke {
            if self.measuring() {
                self.interrupts += 1;
            }
            e.asleep_until = None;
            self.engine = Some(e);
            self.spend(c.interrupt, Who::Kernel);
            return;
        }
        let asleep = e.asleep_until.is_some_and(|t| self.now < t);
        let next = if asleep {
            Next::Sleep {
                until: e.asleep_until.map(Time),
            }
        } else {
            e.poller.next(Time(self.now))
        };
        match next {
            Next::Poll { source, quota } => {
                self.engine = Some(e);
                let start = self.now;
                self.spend(c.poll, Who::Kernel);
                let mut handled = 0;
                let drained = if self.engine.as_ref().is_some_and(|e| e.rx == source) {
                    // (A callback without a quota may never end under overload: the run's
                    // end stops it.)
                    while handled < quota && self.now < self.end {
                        let Some(p) = self.ring.pop_front() else {
                            break;
                        };
                        self.spend(c.link, Who::Kernel);
                        self.spend(c.ip, Who::Kernel);
                        self.forward(p, Who::Kernel);
                        handled += 1;
                        // Feedback stops the callback at once.
                        let now = Time(self.now);
                        if self
                            .engine
                            .as_mut()
                            .is_some_and(|e| !e.poller.input_allowed(now))
                        {
                            break;
                        }
                    }
                    self.ring.is_empty()
                } else {
                    while handled < quota && self.now < self.end {
                        let n = self.transmit_step();
                        if n == 0 {
                            break;
                        }
                        handled += n;
                    }
                    self.unreclaimed == 0 && (self.outq.is_empty() || self.free_descriptors() == 0)
                };
                let busy = Duration::from_nanos(self.now - start);
                if let Some(e) = &mut self.engine {
                    e.poller
                        .polled(Time(self.now), source, handled, drained, busy);
                }
            }
            Next::Sleep { until } => {
                e.asleep_until = until.map(|t| t.0);
                let wake = e.asleep_until.unwrap_or(u64::MAX);
                self.engine = Some(e);
                let horizon = self.next_event().min(wake);
                if !self.user_level(horizon) {
                    if let Some(e) = &mut self.engine {
                        e.poller.idle();
                    }
                    self.advance_to(horizon.min(self.end).max(self.now + 1));
                }
                if let Some(e) = &mut self.engine {
                    if e.asleep_until.is_some_and(|t| self.now >= t) {
                        e.asleep_until = None;
                    }
                }
            }
        }
    }

    fn run(mut self) -> Outcome {
        let gap = self.gap();
        self.next_arrival = gap.min(1_000_000);
        while self.now < self.end {
            if self.engine.is_some() {
                self.step_engine();
            } else {
                self.step_baseline();
            }
        }
        let secs = self.s.duration.as_secs_f64();
        Outcome {
            offered: self.offered as f64 / secs,
            delivered: self.delivered as f64 / secs,
            drops: self.drops,
            user_share: self.user_ns as f64 / self.s.duration.as_nanos() as f64,
            interrupts_per_packet: self.interrupts as f64 / self.offered.max(1) as f64,
            first_packet_latency: (!self.latencies.is_empty()).then(|| {
                Duration::from_nanos(
                    self.latencies.iter().sum::<u64>() / self.latencies.len() as u64,
                )
            }),
        }
    }
}

/// Run the model.
pub fn run(s: &Scenario) -> Result<Outcome, ConfigError> {
    Ok(Sim::new(*s)?.run())
}

/// The maximum loss-free receive rate (§3.1) of `base` (its rate ignored): the highest
/// delivered rate among periodic offered rates from `step` up in steps of `step`, up to
/// `max`, at which at most 1 % of the offered packets were lost.
pub fn mlfrr(base: &Scenario, step: f64, max: f64) -> Result<f64, ConfigError> {
    let mut best: f64 = 0.0;
    let mut rate = step;
    while rate <= max {
        let o = run(&Scenario {
            rate,
            arrivals: Arrivals::Periodic,
            ..*base
        })?;
        if o.delivered >= 0.99 * o.offered {
            best = best.max(o.delivered);
        }
        rate += step;
    }
    Ok(best)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn engine(quota: Option<usize>) -> Design {
        Design::Engine(PollConfig {
            quota,
            ..PollConfig::default()
        })
    }

    /// Delivered at ten times the MLFRR, over the MLFRR.
    fn overload_ratio(base: Scenario) -> (f64, f64, Outcome) {
        let m = mlfrr(&base, 250.0, 12_000.0).unwrap();
        let o = run(&Scenario {
            rate: 10.0 * m,
            arrivals: Arrivals::Poisson,
            ..base
        })
        .unwrap();
        (m, o.delivered / m, o)
    }

    #[test]
    fn the_baseline_livelocks_past_its_mlfrr() {
        let (m, ratio, o) = overload_ratio(Scenario::new(Design::Baseline, 0.0));
        assert!(m > 1000.0, "MLFRR {m}");
        assert!(
            ratio < 0.1,
            "baseline at 10x keeps {ratio} of its MLFRR ({o:?})"
        );
    }

    #[test]
    fn the_engine_with_a_quota_holds_its_mlfrr_at_ten_times_overload() {
        let (m, ratio, o) = overload_ratio(Scenario::new(engine(Some(8)), 0.0));
        assert!(m > 1000.0, "MLFRR {m}");
        assert!(
            ratio >= 0.95,
            "engine at 10x keeps {ratio} of its MLFRR ({o:?})"
        );
        assert!(
            o.drops.interface > 0 && o.drops.output == 0,
            "early drops only: {o:?}"
        );
    }

    #[test]
    fn without_a_quota_the_engine_livelocks_at_the_output_queue() {
        let (m, _, _) = overload_ratio(Scenario::new(engine(Some(8)), 0.0));
        let o = run(&Scenario {
            rate: 10.0 * m,
            arrivals: Arrivals::Poisson,
            ..Scenario::new(engine(None), 0.0)
        })
        .unwrap();
        assert!(o.delivered < 0.1 * m, "{o:?}");
        assert!(o.drops.output > 0, "dropped at the output queue: {o:?}");
    }

    #[test]
    fn feedback_keeps_the_screend_path_at_its_mlfrr() {
        let with = Scenario {
            screend: true,
            feedback: true,
            ..Scenario::new(engine(Some(8)), 0.0)
        };
        let (m, ratio, o) = overload_ratio(with);
        assert!(
            ratio >= 0.95,
            "screend with feedback keeps {ratio} of {m} ({o:?})"
        );
        let without = run(&Scenario {
            rate: 10.0 * m,
            arrivals: Arrivals::Poisson,
            feedback: false,
            ..with
        })
        .unwrap();
        assert!(without.delivered < 0.2 * m, "no feedback: {without:?}");
        assert!(without.drops.screen > 0);
    }

    #[test]
    fn the_cycle_limit_leaves_the_user_thread_its_share() {
        for share in [0.25, 0.5, 0.75] {
            let cfg = PollConfig {
                cycle_limit: Some(phyllo::poller::CycleLimit {
                    share,
                    period: Duration::from_millis(10),
                }),
                ..PollConfig::default()
            };
            let o = run(&Scenario {
                user_thread: true,
                arrivals: Arrivals::Poisson,
                ..Scenario::new(Design::Engine(cfg), 50_000.0)
            })
            .unwrap();
            assert!(
                o.user_share >= 1.0 - share - 0.05,
                "limit {share}: user keeps {} ({o:?})",
                o.user_share
            );
            assert!(o.delivered > 0.0);
        }
    }

    #[test]
    fn first_packet_latency_grows_with_the_burst_only_in_the_baseline() {
        let at = |design, size| {
            run(&Scenario {
                arrivals: Arrivals::Bursts {
                    size,
                    spacing: Duration::from_micros(10),
                },
                ..Scenario::new(design, 100.0 * size as f64)
            })
            .unwrap()
            .first_packet_latency
            .unwrap()
        };
        let (b1, b16) = (at(Design::Baseline, 1), at(Design::Baseline, 16));
        let (e1, e16) = (at(engine(Some(8)), 1), at(engine(Some(8)), 16));
        assert!(b16 > b1 * 3, "baseline {b1:?} -> {b16:?}");
        assert!(e16 < e1 * 2, "engine {e1:?} -> {e16:?}");
        assert!(e16 < b16);
    }

    #[test]
    fn runs_are_deterministic() {
        let s = Scenario {
            arrivals: Arrivals::Poisson,
            ..Scenario::new(engine(Some(8)), 9000.0)
        };
        assert_eq!(run(&s).unwrap(), run(&s).unwrap());
    }
}
