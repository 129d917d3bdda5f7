//! Soak: seeded heavy-fault schedules that check a stack delivers everything, exactly once and
//! in order, and that its retransmissions back off instead of flooding.
//!
//! A check of the reliability that van Renesse, "Masking the Overhead of Protocol Layering" (seed
//! 004)'s sliding window (§5) provides, with and without the Protocol Accelerator in front of the
//! stack. A [`Schedule`] is a stack spec, whether the accelerator is on, and a seed. From the seed
//! it draws heavy link faults (loss up to 45 %, duplication up to 20 %, reordering up to 50 %,
//! corruption up to 8 %) and a set of application messages (1 B to 4 KiB, some larger than a
//! 1400-byte fragment) sent from A to B at seeded instants while the faults are on. Then the link
//! goes dark (every datagram lost), which shows whether retransmission backs off, and finally it
//! heals (no faults) and the run continues until both ends are idle or a virtual-time bound passes.
//!
//! The driver uses only the sans-IO contract of [`Connection`]: `poll_timeout` and
//! `handle_timeout` when due, `transmit_with` (A) and `poll_transmit` (B) to drain datagrams,
//! `handle_datagram`, `poll_delivery`, and `post_process` whenever `needs_post_process` says
//! so between rounds (the application is idle then).

use phyllo::conn::{BuildError, Config, Connection};
use phyllo::stack::{build_dyn, LayerSet};
use phyllo::testing::memlink::{Faults, MemLink};
use phyllo::testing::Pair;
use phyllo::time::{earliest, Time};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use std::time::Duration;

/// One soak run: a stack, the accelerator on or off, and the seed everything is drawn from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Schedule {
    /// The stack spec of both ends (e.g. `frag(1400):window(16):checksum:seal`).
    pub spec: String,
    /// Whether both ends run the Protocol Accelerator.
    pub accelerated: bool,
    /// The seed of the faults, the messages and the link.
    pub seed: u64,
}

/// The phases' lengths and the bounds a run is held to.
#[derive(Clone, Debug, PartialEq)]
pub struct SoakConfig {
    /// How long the heavy faults last; the messages are sent within this time.
    pub fault_time: Duration,
    /// How long every datagram is lost after the faults (the backoff check).
    pub blackout: Duration,
    /// How long after healing everything must have been delivered and both ends idle.
    pub settle_bound: Duration,
    /// Fewest and most messages per schedule.
    pub messages: (usize, usize),
    /// Largest message, bytes.
    pub max_message: usize,
    /// Most datagrams both ends may send, per virtual second, in the second half of the
    /// blackout: retransmission that backs off (exponentially, capped) stays far below it,
    /// a fixed timer exceeds it.
    pub max_blackout_rate: f64,
}

impl Default for SoakConfig {
    fn default() -> Self {
        SoakConfig {
            fault_time: Duration::from_millis(100),
            blackout: Duration::from_secs(4),
            settle_bound: Duration::from_secs(30),
            messages: (20, 50),
            max_message: 4096,
            max_blackout_rate: 100.0,
        }
    }
}

/// How a run ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Outcome {
    /// Every message delivered once, in order, with its bytes intact, and both ends idle.
    Pass,
    /// Not everything delivered (or an end not idle) within the bound after healing.
    Stall,
    /// A delivery that is not the next message sent: a duplicate, a reordering or corruption.
    Wrong,
}

/// What one run did.
#[derive(Clone, Debug, PartialEq)]
pub struct RunReport {
    /// How it ended.
    pub outcome: Outcome,
    /// Messages the application sent.
    pub messages: usize,
    /// Messages delivered correctly (a prefix of those sent).
    pub delivered: usize,
    /// Datagrams both ends sent, all phases.
    pub datagrams: u64,
    /// Datagrams sent during the faults.
    pub datagrams_faults: u64,
    /// Datagrams sent during the blackout's first and second half.
    pub datagrams_blackout: (u64, u64),
    /// Datagrams sent after healing.
    pub datagrams_healed: u64,
    /// Whether the second half of the blackout stayed within
    /// [`SoakConfig::max_blackout_rate`] and below the first half's count (backoff).
    pub backed_off: bool,
    /// Virtual time from healing until everything was delivered and both ends were idle
    /// (`None` unless the run passed).
    pub heal_to_done: Option<Duration>,
}

/// Totals over many runs.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Summary {
    /// Runs.
    pub schedules: u64,
    /// Runs that passed.
    pub passed: u64,
    /// Runs that stalled.
    pub stalls: u64,
    /// Runs with a wrong delivery.
    pub wrong: u64,
    /// Runs whose retransmission did not back off during the blackout.
    pub floods: u64,
    /// Most datagrams of one run.
    pub max_datagrams: u64,
    /// Most datagrams one run sent in the second half of the blackout.
    pub max_blackout_late: u64,
    /// Longest virtual time from healing to done, over the runs that passed.
    pub max_heal_to_done: Duration,
    /// Seeds of the runs that stalled or went wrong (the first few).
    pub failing_seeds: Vec<(u64, Outcome)>,
}

impl Summary {
    /// Add one run.
    pub fn add(&mut self, seed: u64, r: &RunReport) {
        self.schedules += 1;
        match r.outcome {
            Outcome::Pass => self.passed += 1,
            Outcome::Stall => self.stalls += 1,
            Outcome::Wrong => self.wrong += 1,
        }
        if r.outcome != Outcome::Pass && self.failing_seeds.len() < 16 {
            self.failing_seeds.push((seed, r.outcome));
        }
        self.floods += u64::from(!r.backed_off);
        self.max_datagrams = self.max_datagrams.max(r.datagrams);
        self.max_blackout_late = self.max_blackout_late.max(r.datagrams_blackout.1);
        if let Some(t) = r.heal_to_done {
            self.max_heal_to_done = self.max_heal_to_done.max(t);
        }
    }

    /// Whether every run passed and backed off.
    pub fn clean(&self) -> bool {
        self.passed == self.schedules && self.floods == 0
    }
}

/// Heavy faults drawn from `rng`: loss up to 45 %, duplication up to 20 %, reordering up to
/// 50 % (held back up to 1 ms), corruption up to 8 %, one-way delay 10-200 µs.
pub fn heavy_faults(rng: &mut impl Rng) -> Faults {
    Faults {
        loss: rng.random_range(0.0..0.45),
        duplicate: rng.random_range(0.0..0.2),
        reorder: rng.random_range(0.0..0.5),
        corrupt: rng.random_range(0.0..0.08),
        delay: Duration::from_micros(rng.random_range(10..200)),
        reorder_delay: Duration::from_micros(rng.random_range(0..1000)),
    }
}

/// A message whose bytes encode its index, so a misordering or corruption shows.
pub fn payload(i: usize, len: usize) -> Vec<u8> {
    (0..len)
        .map(|k| (i.wrapping_mul(31) ^ k.wrapping_mul(7) ^ (k >> 8)) as u8)
        .collect()
}

/// The two ends' configurations of a schedule: keyed by [`Config::pair`] (fresh keys every
/// run), accelerated ends with cookies drawn from `rng`. A run replays from its seed all the
/// same: the faults, the messages, the cookies and so every datagram's length and fate are
/// drawn from it, and nothing the ends do depends on the ciphertext's bytes.
fn configs(accelerated: bool, rng: &mut impl Rng) -> Result<(Config, Config), BuildError> {
    // 32 bytes drawn and unused, where a schedule's key was once drawn from its seed: every
    // seed keeps the cookies, messages and faults it had.
    let _: [u8; 32] = rng.random();
    let (mut ca, mut cb) = Config::pair(accelerated)?;
    ca.cookie = Some(rng.random());
    cb.cookie = Some(rng.random());
    Ok((ca, cb))
}

/// The driver's state: the two ends over their link ([`Pair`]), the application's progress.
struct Driver<S: LayerSet> {
    pair: Pair<S>,
    msgs: Vec<(Time, Vec<u8>)>,
    next_send: usize,
    delivered: usize,
    wrong: bool,
}

impl<S: LayerSet> Driver<S> {
    /// Datagrams both ends have handed to the link.
    fn datagrams(&self) -> u64 {
        self.pair.link.stats().sent
    }

    /// Send what is due, if the connection takes it.
    fn app_send(&mut self) -> bool {
        let p = &mut self.pair;
        let mut worked = false;
        while let Some((at, data)) = self.msgs.get(self.next_send) {
            if *at > p.now || !p.a.can_send() {
                break;
            }
            if p.a.send(p.now, data).is_err() {
                break;
            }
            self.next_send += 1;
            worked = true;
        }
        worked
    }

    /// Take B's deliveries and check each against the next message sent.
    fn app_receive(&mut self) -> bool {
        let mut worked = false;
        while let Some(m) = self.pair.b.poll_delivery() {
            worked = true;
            match self.msgs.get(self.delivered) {
                Some((_, want)) if self.delivered < self.next_send && m.data() == &want[..] => {
                    self.delivered += 1
                }
                _ => self.wrong = true,
            }
            self.pair.b.recycle(m);
        }
        worked
    }

    /// One round at the current instant; if there was nothing to do, advance the clock to the
    /// next event no later than `until`. `false` when nothing is pending before `until`.
    fn step(&mut self, until: Time) -> bool {
        let worked = self.app_send() | self.pair.pump() | self.app_receive();
        if worked {
            return true;
        }
        // A message held back by a full connection waits for the connection's own events.
        let now = self.pair.now;
        let app = self
            .msgs
            .get(self.next_send)
            .map(|(t, _)| *t)
            .filter(|t| *t > now);
        match earliest(self.pair.next_event(), app) {
            Some(t) if t <= until => {
                self.pair.now = now.max(t);
                true
            }
            _ => false,
        }
    }

    /// Step until `until` (virtual time; the clock then reads `until`) or, with
    /// `stop_when_done`, until everything is delivered and nothing is pending (the clock then
    /// reads that instant); returns whether everything is done.
    fn run(&mut self, until: Time, stop_when_done: bool) -> bool {
        // A safety net against a livelock at one instant; far above any legitimate run.
        let mut rounds = 0u64;
        while !(stop_when_done && self.done()) && rounds < 50_000_000 && self.step(until) {
            rounds += 1;
        }
        if !stop_when_done {
            self.pair.now = self.pair.now.max(until);
        }
        self.done()
    }

    fn done(&self) -> bool {
        self.delivered == self.msgs.len()
            && self.pair.a.is_idle()
            && self.pair.b.is_idle()
            && self.pair.link.in_flight() == 0
    }
}

/// Run one schedule.
pub fn run(s: &Schedule, cfg: &SoakConfig) -> Result<RunReport, BuildError> {
    run_with(s.seed, s.accelerated, cfg, |c| {
        Connection::new(build_dyn(&s.spec)?, c)
    })
}

/// Run one schedule on connections that `make` builds from each end's configuration (any
/// stack, static ones included): the faults, messages and link drawn from `seed`.
pub fn run_with<S: LayerSet>(
    seed: u64,
    accelerated: bool,
    cfg: &SoakConfig,
    mut make: impl FnMut(Config) -> Result<Connection<S>, BuildError>,
) -> Result<RunReport, BuildError> {
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let faults = heavy_faults(&mut rng);
    let (ca, cb) = configs(accelerated, &mut rng)?;
    let (a, b) = (make(ca)?, make(cb)?);
    let n = rng.random_range(cfg.messages.0..=cfg.messages.1.max(cfg.messages.0));
    let top = usize::BITS - cfg.max_message.max(1).leading_zeros();
    let fault_ns = cfg.fault_time.as_nanos() as u64;
    let mut times: Vec<u64> = (0..n)
        .map(|_| {
            // A third of the messages go at once, the rest while the faults are on.
            if rng.random_bool(1.0 / 3.0) {
                0
            } else {
                rng.random_range(0..fault_ns.max(1))
            }
        })
        .collect();
    times.sort_unstable();
    let msgs = times
        .into_iter()
        .enumerate()
        .map(|(i, t)| {
            let e = rng.random_range(0..top);
            let len = rng.random_range((1usize << e)..=(2usize << e).min(cfg.max_message));
            (Time(t), payload(i, len))
        })
        .collect();
    let base = faults.delay;
    let mut d = Driver {
        pair: Pair::new(a, b, MemLink::new(faults, seed)),
        msgs,
        next_send: 0,
        delivered: 0,
        wrong: false,
    };

    d.run(Time::ZERO + cfg.fault_time, false);
    let after_faults = d.datagrams();

    let dark = Faults {
        loss: 1.0,
        ..Faults::none(base)
    };
    d.pair.link.set_faults(dark);
    let half = d.pair.now + cfg.blackout / 2;
    d.run(half, false);
    let early = d.datagrams() - after_faults;
    let healed_at = d.pair.now + cfg.blackout / 2;
    d.run(healed_at, false);
    let late = d.datagrams() - after_faults - early;
    let half_secs = (cfg.blackout / 2).as_secs_f64();
    let backed_off =
        (late as f64) <= cfg.max_blackout_rate * half_secs && (late <= early || late <= 2);

    d.pair.link.set_faults(Faults::none(base));
    let before_heal = d.datagrams();
    let finished = d.run(healed_at + cfg.settle_bound, true);
    let outcome = if d.wrong {
        Outcome::Wrong
    } else if finished {
        Outcome::Pass
    } else {
        Outcome::Stall
    };
    Ok(RunReport {
        outcome,
        messages: n,
        delivered: d.delivered,
        datagrams: d.datagrams(),
        datagrams_faults: after_faults,
        datagrams_blackout: (early, late),
        datagrams_healed: d.datagrams() - before_heal,
        backed_off,
        heal_to_done: (outcome == Outcome::Pass).then(|| d.pair.now.since(healed_at)),
    })
}

/// Run the schedules of `spec` (accelerated or not) for each seed in `seeds`.
pub fn soak(
    spec: &str,
    accelerated: bool,
    seeds: impl IntoIterator<Item = u64>,
    cfg: &SoakConfig,
) -> Result<Summary, BuildError> {
    let mut sum = Summary::default();
    for seed in seeds {
        let s = Schedule {
            spec: spec.to_string(),
            accelerated,
            seed,
        };
        let r = run(&s, cfg)?;
        sum.add(seed, &r);
    }
    Ok(sum)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_schedule_replays() {
        let s = Schedule {
            spec: "frag(1400):window(16):checksum".into(),
            accelerated: false,
            seed: 3,
        };
        let cfg = SoakConfig::default();
        let r = run(&s, &cfg).unwrap();
        assert_eq!(r, run(&s, &cfg).unwrap());
        assert!(r.messages >= cfg.messages.0 && r.messages <= cfg.messages.1);
        assert!(r.datagrams_faults > 0 && r.datagrams_healed > 0 || r.delivered == r.messages);
    }

    #[test]
    fn a_link_that_never_heals_is_a_stall() {
        // Without healing the run cannot finish: the settle bound turns it into a stall.
        let s = Schedule {
            spec: "window(4)".into(),
            accelerated: false,
            seed: 1,
        };
        let cfg = SoakConfig {
            fault_time: Duration::ZERO,
            settle_bound: Duration::ZERO,
            ..SoakConfig::default()
        };
        assert_eq!(run(&s, &cfg).unwrap().outcome, Outcome::Stall);
    }
}
