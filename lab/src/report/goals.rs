//! The report's headline figures: each with its unit, the goal it is held to, and the seed's
//! or an anchor's figure where one exists. The report marks every one met or missed at the top
//! of the page and in its section, a section with a missed goal says so in its status, and
//! `results.json` carries them as `goals` so a script can check a run.
//!
//! The goals are the project's, set by the issues that built each part (and the papers' own
//! figures where those are the bar); one table, so that a goal is written once and the prose
//! of an experiment need not repeat it.

use serde::Serialize;

/// Which side of its target a figure must be on.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Direction {
    /// The figure must be at least the target.
    AtLeast,
    /// The figure must be at most the target.
    AtMost,
    /// No bar: the figure is asked for, to be reported (met once it is measured); the target
    /// is unused.
    Reported,
}

/// A headline figure's goal.
#[derive(Clone, Copy, Debug, Serialize)]
pub struct Goal {
    /// The figure's stable name (as in `results.json`'s `figures`).
    pub figure: &'static str,
    /// Its unit (`ratio` for a dimensionless quotient).
    pub unit: &'static str,
    /// Which side of `target` it must be on.
    pub direction: Direction,
    /// The bar.
    pub target: f64,
    /// The seed's or an anchor's figure, where one exists.
    pub anchor: Option<&'static str>,
}

impl Goal {
    /// Whether `value` meets the goal (a value that is not a number does not).
    pub fn met(&self, value: f64) -> bool {
        value.is_finite()
            && match self.direction {
                Direction::AtLeast => value >= self.target,
                Direction::AtMost => value <= self.target,
                Direction::Reported => true,
            }
    }

    /// The goal as text: `≥ 0.9`, `≤ 8192 B`, `reported`.
    pub fn text(&self) -> String {
        let op = match self.direction {
            Direction::AtLeast => "≥",
            Direction::AtMost => "≤",
            Direction::Reported => return "reported".into(),
        };
        let target = if self.target.abs() >= 1e6 {
            format!("{}M", self.target / 1e6)
        } else {
            format!("{}", self.target)
        };
        match self.unit {
            "ratio" | "count" => format!("{op} {target}"),
            unit => format!("{op} {target} {unit}"),
        }
    }
}

const fn goal_of(
    direction: Direction,
    figure: &'static str,
    unit: &'static str,
    target: f64,
) -> Goal {
    Goal {
        figure,
        unit,
        direction,
        target,
        anchor: None,
    }
}

const fn at_least(figure: &'static str, unit: &'static str, target: f64) -> Goal {
    goal_of(Direction::AtLeast, figure, unit, target)
}

const fn at_most(figure: &'static str, unit: &'static str, target: f64) -> Goal {
    goal_of(Direction::AtMost, figure, unit, target)
}

/// A figure the issues ask for without a bar: reported, "met" once measured.
const fn reported(figure: &'static str, unit: &'static str) -> Goal {
    goal_of(Direction::Reported, figure, unit, 0.0)
}

const fn anchored(goal: Goal, anchor: &'static str) -> Goal {
    Goal {
        anchor: Some(anchor),
        ..goal
    }
}

/// Seed 004's claim behind both total-instruction goals.
const WORK_MOVES: &str = "seed 004: deferred work moves off the critical path, it does not grow";

/// Every headline figure, in the order the summary lists them.
pub const GOALS: &[Goal] = &[
    // The Protocol Accelerator (seed 004).
    anchored(
        at_most("accel.critical_path_ratio", "ratio", 0.34),
        "seed 004: the accelerated critical path about a third of the layered one",
    ),
    at_most("accel.sealed_critical_path_ratio", "ratio", 0.40),
    at_most("accel.sealed_vs_unsealed_critical_path", "ratio", 2.5),
    anchored(
        at_most("accel.total_instructions_ratio", "ratio", 1.0),
        WORK_MOVES,
    ),
    anchored(
        at_most("accel.sealed_total_instructions_ratio", "ratio", 1.0),
        WORK_MOVES,
    ),
    at_most("accel.rtt_ratio_vs_raw_udp", "ratio", 1.10),
    at_most("accel.sealed_rtt_ratio_vs_raw_udp", "ratio", 1.20),
    anchored(
        at_least("accel.knee_rate_ratio", "ratio", 1.5),
        "seed 004 Figure 5: the accelerated knee well past the layered one",
    ),
    at_least("accel.fast_path_hit_ratio", "ratio", 0.99),
    at_least("accel.stream_msgs_per_s", "msg/s", 10e6),
    // Integrated layer processing (seed 001) and bulk transfer.
    anchored(
        at_least("ilp.integrated_vs_memcpy", "ratio", 0.70),
        "the Internet checksum at ~100 GB/s with AVX2 (wireguard-go): a fused copy and checksum \
         should cost about one memcpy",
    ),
    at_least("ilp.chacha_integrated_vs_cipher_alone", "ratio", 0.90),
    at_least("ilp.memory_access_reduction", "ratio", 0.10),
    // Issue 26: each end hashes, seals and copies what raw UDP only sends.
    at_least("ilp.bulk_vs_raw_udp", "ratio", 0.35),
    anchored(
        at_least("ilp.bulk_vs_quinn", "ratio", 2.0),
        "lsquic moved 2.35× quinn's bytes in a same-harness comparison of QUIC servers",
    ),
    anchored(
        reported("bulk.two_thread_scaling", "ratio"),
        "issue 26: two clients against a server with two worker threads, beside one; report it",
    ),
    // Sessions and the server.
    at_most("session.handshake_rtts", "round trips", 1.0),
    at_most("serve.rtt_ratio_vs_raw_udp", "ratio", 1.25),
    anchored(
        at_most("serve.rtt_ratio_vs_plain_udp", "ratio", 1.25),
        "issue 28: against two processes that do nothing but a UDP ping-pong, both \
         busy-polling",
    ),
    at_most("serve.bytes_per_idle_session", "B", 8192.0),
    at_most("serve.attack_sessions_lost", "count", 0.0),
    at_least("serve.flood_transfer_goodput_ratio", "ratio", 0.80),
    anchored(
        at_least("serve.flood_newcomers_min", "of 6", 5.0),
        "WireGuard: a client that answers the cookie challenge gets a session under a flood",
    ),
    // The receive engine (seed 002).
    anchored(
        at_least("engine.model_overload_ratio", "ratio", 0.95),
        "seed 002 Figure 8: with a quota, delivered throughput stays at the MLFRR under overload",
    ),
    at_least("engine.serve_flood_goodput_ratio", "ratio", 0.90),
    // Reliability under faults.
    at_most("soak.stalls", "count", 0.0),
    // A long, narrow, lossy path (the `wan` experiment: 100 Mbit/s, 50 ms, 1 % loss).
    anchored(
        at_least("wan.utilization", "ratio", 0.90),
        "the WAN issue: phyllo's goodput fills 90 % of a clean 100 Mbit/s, 50 ms path",
    ),
    anchored(
        at_least("wan.utilization_lossy", "ratio", 0.70),
        "the WAN issue: with 1 % random loss and the controller recommended for lossy paths \
         (BBR), 70 % of the link",
    ),
    anchored(
        at_most("wan.wire_overhead", "ratio", 1.05),
        "the WAN issue: the client sends at most 5 % more UDP payload than the file's bytes",
    ),
    anchored(
        at_least("wan.fairness", "ratio", 0.95),
        "the WAN issue: two flows on one bottleneck share it equally after convergence \
         (Jain's index)",
    ),
    anchored(
        at_least("wan.vs_quinn", "ratio", 1.0),
        "the WAN issue: at least quinn's goodput on the same clean path",
    ),
    anchored(
        at_least("wan.vs_quinn_lossy", "ratio", 1.5),
        "the WAN issue: 1.5 times quinn's goodput (its default controller) with 1 % loss",
    ),
    // Latency techniques (seed 000).
    anchored(
        at_most("paths.tall_all_vs_std_instructions", "ratio", 0.80),
        "seed 000: path-inlining and the other techniques together remove a fifth of the work",
    ),
];

/// The goal of `figure`, if it is a headline figure.
pub fn goal(figure: &str) -> Option<&'static Goal> {
    GOALS.iter().find(|g| g.figure == figure)
}

/// A figure's goal as report prose states it (`goal ≥ 0.9`), from [`GOALS`], so prose never
/// writes a goal again.
pub fn stated(figure: &str) -> String {
    goal(figure).map_or_else(|| "no goal".into(), |g| format!("goal {}", g.text()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_figure_has_one_goal() {
        let mut names: Vec<_> = GOALS.iter().map(|g| g.figure).collect();
        names.sort_unstable();
        let n = names.len();
        names.dedup();
        assert_eq!(names.len(), n, "a figure with two goals");
        assert!(GOALS.iter().all(|g| g.target.is_finite()));
    }

    #[test]
    fn met_follows_the_direction_and_refuses_non_numbers() {
        let g = goal("accel.critical_path_ratio").unwrap();
        assert!(g.met(0.3) && g.met(0.34) && !g.met(0.35) && !g.met(f64::NAN));
        let g = goal("accel.fast_path_hit_ratio").unwrap();
        assert!(g.met(0.995) && !g.met(0.98));
        assert_eq!(g.text(), "≥ 0.99");
        assert_eq!(
            goal("accel.stream_msgs_per_s").unwrap().text(),
            "≥ 10M msg/s"
        );
        assert_eq!(
            goal("serve.bytes_per_idle_session").unwrap().text(),
            "≤ 8192 B"
        );
        let g = goal("bulk.two_thread_scaling").unwrap();
        assert_eq!(g.text(), "reported");
        assert!(g.met(0.4) && g.met(1.9) && !g.met(f64::NAN));
    }
}
