//! `rtt`: ping-pong latency of phyllo stacks over UDP loopback (busy-poll) beside a raw-UDP
//! ping-pong measured in the same run, and over the in-memory link (processing cost only).
//!
//! The ratio `rtt.ratio_vs_raw_udp` divides the 4-layer stack's median round trip by raw
//! UDP's in each round, and is the median of those ratios ([`crate::stats`]); runs alternate
//! (raw, phyllo, raw, ...) in an odd number of rounds so slow phases of a shared machine hit
//! both.

use crate::measure::{median, rtt_mem, rtt_udp};
use crate::rawudp::{raw_pingpong, PingPongConfig, Summary};
use crate::report::{Ctx, Experiment, Outcome, Plot, Section, Series, Table};
use crate::stats::{ratio_summary, Summary as Spread};

pub const SPEC4: &str = "frag(1400):window(16):checksum:seal";
pub const SPEC3: &str = "frag(1400):window(16):checksum";

/// Ping-pong latency.
pub struct Rtt;

fn us(ns: f64) -> String {
    format!("{:.2}", ns / 1e3)
}

fn percentile(sorted: &[u64], p: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    let k = ((p / 100.0) * (sorted.len() - 1) as f64).round() as usize;
    sorted[k.min(sorted.len() - 1)] as f64
}

impl Experiment for Rtt {
    fn name(&self) -> &'static str {
        "rtt"
    }

    fn title(&self) -> &'static str {
        "Round-trip latency: phyllo over UDP loopback vs raw UDP"
    }

    fn seed_ref(&self) -> Option<&'static str> {
        Some("seed 004, Table 4 (one-way latency, round trips)")
    }

    fn run(&self, ctx: &Ctx) -> anyhow::Result<Outcome> {
        if let Err(e) = std::net::UdpSocket::bind(("127.0.0.1", 0)) {
            return Ok(Outcome::Skipped(format!("no UDP on 127.0.0.1: {e}")));
        }
        let (rounds, reps) = if ctx.quick { (2_000, 3) } else { (20_000, 5) };
        let mut raw = Vec::new();
        let mut p4 = Vec::new();
        let mut p3 = Vec::new();
        // Each rep's median round trip, ns: raw UDP, SPEC4, SPEC3.
        let mut per_rep = [vec![], vec![], vec![]];
        for _ in 0..reps {
            for (i, v) in [
                raw_pingpong(&PingPongConfig::new(rounds, 8))?.samples_ns,
                rtt_udp(SPEC4, false, 8, rounds, true)?.samples_ns,
                rtt_udp(SPEC3, false, 8, rounds, true)?.samples_ns,
            ]
            .into_iter()
            .enumerate()
            {
                per_rep[i].push(median(&v));
                [&mut raw, &mut p4, &mut p3][i].extend(v);
            }
        }
        // The UDP variants' ratios to raw UDP, the median of the reps' ratios.
        let rep_ratios: [Spread; 2] =
            std::array::from_fn(|i| ratio_summary(&per_rep[i + 1], &per_rep[0]));
        let m4 = rtt_mem(SPEC4, false, 8, rounds)?.samples_ns;
        let m3 = rtt_mem(SPEC3, false, 8, rounds)?.samples_ns;
        let rows = [
            ("raw UDP ping-pong", "udp", raw),
            (SPEC4, "udp", p4),
            (SPEC3, "udp", p3),
            (SPEC4, "mem", m4),
            (SPEC3, "mem", m3),
        ];
        let raw_median = Summary::from_samples(&rows[0].2)
            .ok_or_else(|| anyhow::anyhow!("raw ping-pong measured nothing"))?
            .median_ns as f64;
        let mut table = Table {
            title: format!(
                "8-byte ping-pong, {reps} × {rounds} round trips per UDP variant, busy-poll; \
                 ratio to raw UDP: the median of the {reps} rounds' ratios of medians \
                 (smallest–largest)"
            ),
            headers: [
                "stack",
                "link",
                "median µs",
                "p99 µs",
                "mean µs",
                "ratio to raw UDP",
            ]
            .map(String::from)
            .to_vec(),
            rows: vec![],
        };
        let mut plot = Plot {
            id: "rtt_percentiles".into(),
            title: "Round-trip latency percentiles (8 B)".into(),
            x_label: "percentile".into(),
            y_label: "round trip (µs)".into(),
            log_y: true,
            caption: format!(
                "Lower is better; on the log axis equal vertical gaps are equal ratios. The gap \
                 between `{SPEC4} (udp)` and raw UDP at the 50th percentile is what the stack adds \
                 to a round trip (`rtt.ratio_vs_raw_udp`); the `mem` lines are the protocol \
                 processing alone, so the rest of a UDP round trip is the kernel's. A line that \
                 shoots up at the right is preemption on a shared machine, not protocol work."
            ),
            ..Plot::default()
        };
        let mut figures = vec![];
        let mut headline = None;
        for (k, (name, link, samples)) in rows.iter().enumerate() {
            let s = Summary::from_samples(samples)
                .ok_or_else(|| anyhow::anyhow!("{name} over {link} measured nothing"))?;
            // Raw UDP is 1 by definition; the UDP variants' ratios are per round.
            let ratio = match k {
                1 | 2 => Some(rep_ratios[k - 1]),
                _ => None,
            };
            table.rows.push(vec![
                name.to_string(),
                link.to_string(),
                us(s.median_ns as f64),
                us(s.p99_ns as f64),
                us(s.mean_ns),
                match (k, ratio) {
                    (0, _) => "1".into(),
                    (_, Some(r)) => r.cell(3),
                    _ => "—".into(),
                },
            ]);
            let mut sorted = samples.clone();
            sorted.sort_unstable();
            plot.series.push(Series {
                name: format!("{name} ({link})"),
                points: [50.0, 75.0, 90.0, 95.0, 99.0]
                    .iter()
                    .map(|&p| (p, percentile(&sorted, p) / 1e3))
                    .collect(),
            });
            if let (1, Some(r)) = (k, ratio) {
                figures.push(("rtt.ratio_vs_raw_udp".to_string(), r.median));
                headline = Some(r);
                figures.push(("rtt.phyllo_median_ns".to_string(), s.median_ns as f64));
            }
        }
        figures.push(("rtt.raw_median_ns".to_string(), raw_median));
        Ok(Outcome::Done(Section {
            text: vec![
                "Two threads, each with its own socket and connection, busy-poll 127.0.0.1; \
                 the echo side sends every delivered message back. The raw baseline is the same \
                 ping-pong with no phyllo code. Over `mem` both ends run on one thread over the \
                 in-memory link: the round trip is pure protocol processing (both directions, \
                 both ends). Medians, not means: the machine is shared and preemption makes the \
                 tail."
                    .into(),
                format!(
                    "`rtt.ratio_vs_raw_udp` (`{SPEC4}` over UDP against raw UDP, the median of \
                     the rounds' ratios, smallest–largest round in brackets) = {}; \
                     `rtt.phyllo_median_ns` and `rtt.raw_median_ns` are the medians of all \
                     round trips pooled.",
                    headline.map_or("—".into(), |r| r.show(3, "rounds"))
                ),
            ],
            tables: vec![table],
            plots: vec![plot],
            figures,
        }))
    }
}
