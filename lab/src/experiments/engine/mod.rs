//! `engine`: the receive engine against receive livelock (Mogul and Ramakrishnan, "Eliminating
//! Receive Livelock in an Interrupt-Driven Kernel" (seed 002)), in the deterministic discrete-event
//! model of a forwarding host (`crate::livelock_model`), which runs the same `Poller` as the real
//! engine. Costs are the seed's order of magnitude (`Costs::seed`: about 200 µs of CPU per
//! forwarded packet), so the figures read beside the seed's:
//!
//! - delivered vs offered rate: 4.2BSD, the engine without a quota, with a quota of 8; through
//!   `screend` with and without queue-state feedback (Figs. 2, 5, 6);
//! - the quota from 1 to 64 (Figs. 7-9): the highest delivered rate and the rate at the highest
//!   load, with and without `screend`;
//! - the CPU left to a compute-bound user thread under cycle limits of 25, 50 and 75 % (Fig. 10);
//! - first-packet latency against burst size (Figs. 1 and 14).

mod real;
mod serve_flood;

use crate::livelock_model::{self, Arrivals, Design, Scenario};
use crate::report::goals::stated;
use crate::report::{Ctx, Experiment, Outcome, Plot, Section, Series, Table};
use anyhow::Result;
use phyllo::poller::{CycleLimit, PollConfig};
use std::time::Duration;

/// The engine experiment (model side).
pub struct Engine;

fn engine(quota: Option<usize>) -> Design {
    Design::Engine(PollConfig {
        quota,
        ..PollConfig::default()
    })
}

/// The named variants of Figs. 2, 5 and 6: (name, design, screend, feedback).
fn variants() -> Vec<(&'static str, Design, bool, bool)> {
    vec![
        ("4.2BSD", Design::Baseline, false, false),
        ("engine, no quota", engine(None), false, false),
        ("engine, quota 8", engine(Some(8)), false, false),
        ("4.2BSD + screend", Design::Baseline, true, false),
        (
            "engine + screend, no feedback",
            engine(Some(8)),
            true,
            false,
        ),
        ("engine + screend, feedback", engine(Some(8)), true, true),
    ]
}

fn scenario(design: Design, screend: bool, feedback: bool, rate: f64, quick: bool) -> Scenario {
    Scenario {
        screend,
        feedback,
        arrivals: Arrivals::Poisson,
        duration: Duration::from_millis(if quick { 300 } else { 1000 }),
        ..Scenario::new(design, rate)
    }
}

impl Experiment for Engine {
    fn name(&self) -> &'static str {
        "engine"
    }

    fn title(&self) -> &'static str {
        "Receive livelock and the polling engine: the model, real runs, serve under a flood"
    }

    fn seed_ref(&self) -> Option<&'static str> {
        Some("seed 002, Figs. 1-2, 5-10, 14")
    }

    fn run(&self, ctx: &Ctx) -> Result<Outcome> {
        let quick = ctx.quick;
        let mut figures = Vec::new();
        let mut tables = Vec::new();
        let mut plots = Vec::new();
        let top = 30_000.0;
        let rates: Vec<f64> = if quick {
            [
                500.0, 1000.0, 2000.0, 3000.0, 4000.0, 5000.0, 6000.0, 8000.0, 12_000.0, 20_000.0,
                top,
            ]
            .to_vec()
        } else {
            (1..=60).map(|i| f64::from(i) * 500.0).collect()
        };

        // Figs. 2, 5, 6: delivered vs offered.
        let mut curve = Plot {
            id: "engine_delivered".into(),
            title: "Delivered vs offered rate (model; seed Figs. 2, 5, 6)".into(),
            x_label: "offered, packets/s".into(),
            y_label: "delivered, packets/s".into(),
            caption: "Delivered should follow offered up to the MLFRR; a line that falls back \
                      toward zero past its peak is in receive livelock. The seed's fix, the \
                      engine with a quota (and, through `screend`, with queue-state feedback), \
                      should stay flat at its peak up to the highest load."
                .into(),
            ..Plot::default()
        };
        let mut summary = Table {
            title: "MLFRR and behaviour at the highest load (model)".into(),
            headers: [
                "design",
                "MLFRR, pkt/s",
                "delivered at 10× MLFRR",
                "÷ MLFRR",
                "drops: interface / ipintrq / output / screen (per s)",
            ]
            .map(String::from)
            .to_vec(),
            rows: vec![],
        };
        for (name, design, screend, feedback) in variants() {
            let base = scenario(design, screend, feedback, 0.0, quick);
            let mut series = Series {
                name: name.into(),
                points: vec![],
            };
            for &r in &rates {
                let o = livelock_model::run(&Scenario { rate: r, ..base })?;
                series.points.push((o.offered, o.delivered));
            }
            curve.series.push(series);
            let mlfrr = livelock_model::mlfrr(&base, 250.0, 12_000.0)?;
            let o = livelock_model::run(&Scenario {
                rate: 10.0 * mlfrr,
                ..base
            })?;
            let ratio = if mlfrr > 0.0 {
                o.delivered / mlfrr
            } else {
                0.0
            };
            match name {
                "4.2BSD" => {
                    figures.push(("engine.model_baseline_overload_ratio".into(), ratio));
                    figures.push(("engine.model_baseline_mlfrr".into(), mlfrr));
                }
                "engine, quota 8" => {
                    figures.push(("engine.model_overload_ratio".into(), ratio));
                    figures.push(("engine.model_mlfrr".into(), mlfrr));
                }
                "engine + screend, feedback" => {
                    figures.push(("engine.model_screend_feedback_overload_ratio".into(), ratio))
                }
                _ => {}
            }
            let d = o.drops;
            let per_s = |n: u64| n as f64 / base.duration.as_secs_f64();
            summary.rows.push(vec![
                name.into(),
                format!("{mlfrr:.0}"),
                format!("{:.0}", o.delivered),
                format!("{ratio:.2}"),
                format!(
                    "{:.0} / {:.0} / {:.0} / {:.0}",
                    per_s(d.interface),
                    per_s(d.ipintrq),
                    per_s(d.output),
                    per_s(d.screen)
                ),
            ]);
        }
        plots.push(curve);
        tables.push(summary);

        // Figs. 7-9: the quota.
        let mut quota_table = Table {
            title: "Quota sweep (model; seed Figs. 7-9): peak delivered and delivered at 30 000 \
                    pkt/s offered"
                .into(),
            headers: [
                "quota",
                "peak, no screend",
                "at 30k, no screend",
                "peak, screend + feedback",
                "at 30k, screend + feedback",
            ]
            .map(String::from)
            .to_vec(),
            rows: vec![],
        };
        let mut quota_plot = Plot {
            id: "engine_quota".into(),
            title: "Delivered at 30 000 pkt/s offered by quota (model; seed Fig. 8)".into(),
            x_label: "quota, packets per callback".into(),
            y_label: "delivered, packets/s".into(),
            log_x: true,
            caption: format!(
                "Higher is better: each point is what gets through at {top:.0} pkt/s offered, far \
                 past the MLFRR. Too small a quota spends the CPU on callbacks for few packets, \
                 too large a one lets input starve the later stages, so a line should peak at a \
                 moderate quota; with feedback `screend` throttles input itself, and its line \
                 should depend little on the quota."
            ),
            ..Plot::default()
        };
        let mut at_top_plain = Series {
            name: "no screend".into(),
            points: vec![],
        };
        let mut at_top_screend = Series {
            name: "screend + feedback".into(),
            points: vec![],
        };
        for q in [1usize, 2, 4, 8, 16, 32, 64] {
            let mut cells = vec![q.to_string()];
            for (screend, series) in [(false, &mut at_top_plain), (true, &mut at_top_screend)] {
                let base = scenario(engine(Some(q)), screend, screend, 0.0, quick);
                let mut peak: f64 = 0.0;
                for r in [2000.0, 3000.0, 4000.0, 5000.0, 6000.0, 8000.0] {
                    peak = peak.max(livelock_model::run(&Scenario { rate: r, ..base })?.delivered);
                }
                let at_top = livelock_model::run(&Scenario { rate: top, ..base })?.delivered;
                series.points.push((q as f64, at_top));
                cells.push(format!("{peak:.0}"));
                cells.push(format!("{at_top:.0}"));
            }
            quota_table.rows.push(cells);
        }
        quota_plot.series = vec![at_top_plain, at_top_screend];
        plots.push(quota_plot);
        tables.push(quota_table);

        // Fig. 10: the CPU left to a user thread.
        let mut cpu_plot = Plot {
            id: "engine_cycle_limit".into(),
            title: "CPU left to a compute-bound user thread (model; seed Fig. 10)".into(),
            x_label: "offered, packets/s".into(),
            y_label: "user share of the CPU".into(),
            caption: "With no limit the user thread's share should fall to zero as the load \
                      grows; a limit of s lets packet work take at most s of every 10 ms, so each \
                      limited line should level off at or above 1 − s \
                      (`engine.model_cycle_limit_margin` is the worst shortfall)."
                .into(),
            ..Plot::default()
        };
        let mut worst = f64::INFINITY;
        for share in [None, Some(0.25), Some(0.5), Some(0.75)] {
            let cfg = PollConfig {
                cycle_limit: share.map(|share| CycleLimit {
                    share,
                    period: Duration::from_millis(10),
                }),
                ..PollConfig::default()
            };
            let mut series = Series {
                name: share.map_or("no limit".into(), |s| format!("limit {:.0} %", s * 100.0)),
                points: vec![],
            };
            for &r in rates.iter().step_by(if quick { 1 } else { 3 }) {
                let o = livelock_model::run(&Scenario {
                    user_thread: true,
                    ..scenario(Design::Engine(cfg), false, false, r, quick)
                })?;
                series.points.push((o.offered, o.user_share));
                if let Some(s) = share {
                    // How far the user thread falls below 1 - s.
                    worst = worst.min(o.user_share - (1.0 - s));
                }
            }
            cpu_plot.series.push(series);
        }
        figures.push(("engine.model_cycle_limit_margin".into(), worst));
        plots.push(cpu_plot);

        // Figs. 1 and 14: first-packet latency by burst size.
        let mut lat_plot = Plot {
            id: "engine_burst_latency".into(),
            title: "First-packet latency by burst size (model; seed Figs. 1, 14)".into(),
            x_label: "packets in the burst".into(),
            y_label: "µs from the burst's first arrival to its first transmission".into(),
            caption: "Lower is better. 4.2BSD takes the whole burst through its interrupt-level \
                      stage before the first packet reaches output, so its line should rise with \
                      the burst; the engine carries each packet through to transmission before \
                      the next, so its line should stay flat."
                .into(),
            ..Plot::default()
        };
        for (name, design) in [("4.2BSD", Design::Baseline), ("engine", engine(Some(8)))] {
            let mut series = Series {
                name: name.into(),
                points: vec![],
            };
            for size in 1..=16usize {
                let o = livelock_model::run(&Scenario {
                    arrivals: Arrivals::Bursts {
                        size,
                        spacing: Duration::from_micros(10),
                    },
                    ..Scenario::new(design, 100.0 * size as f64)
                })?;
                if let Some(l) = o.first_packet_latency {
                    series.points.push((size as f64, l.as_secs_f64() * 1e6));
                }
            }
            lat_plot.series.push(series);
        }
        plots.push(lat_plot);

        let text = vec![
            "The model: one CPU forwarding packets, an interface ring of 32, 4.2BSD's \
                 ipintrq of 50, an output queue of 50 and 16 transmit descriptors that the CPU \
                 must reclaim; costs per packet link 50 µs, IP 70, output 40, descriptor 20, \
                 screend 150, interrupt 30, poll callback 5, wire 67. The engine is phyllo's \
                 `Poller` itself. MLFRR: the highest delivered rate with at most 1 % loss under \
                 periodic arrivals; overload runs are Poisson at ten times it."
                .into(),
            format!(
                "`engine.model_overload_ratio` ({}) and \
                 `engine.model_baseline_overload_ratio` (livelock: near 0); \
                 `engine.model_cycle_limit_margin` is the smallest user share minus (1 − limit) \
                 over the limits and rates (the Must-show wants ≥ −0.05).",
                stated("engine.model_overload_ratio")
            ),
        ];
        let mut section = Section {
            text,
            tables,
            plots,
            figures,
        };
        real::runs(quick, &mut section)?;
        let goodput = serve_flood::run(quick, &mut section)?;
        section.text.push(format!(
            "`phyllo serve` under a flood: a child `phyllo serve --accel` holds a session with this \
                 process, which counts 32-byte echoes per second for a while without a flood and \
                 then while a thread on the other CPU sends garbage and replayed handshake \
                 initiations (valid mac1, keys the server does not allow) at the highest rate it \
                 can. The server runs on the engine with its defaults (the listening socket \
                 limited to 5 % of each 10 ms, established peers on sockets of their own), on the \
                 engine without that limit (`--listen-share 1`), with `--no-engine` (a blocking \
                 loop left to the kernel's scheduling) and with `--busy-poll` (a loop spinning \
                 on its sockets, as busy-poll sockets do in the kernel). Server and client share \
                 CPU 0, so the echo loop is CPU-bound and any CPU the server spends on the flood \
                 comes out of it. `engine.serve_flood_goodput_ratio` = echoes under the flood / \
                 without, on the defaults ({}).",
            stated("engine.serve_flood_goodput_ratio")
        ));
        section.text.push(format!(
            "An established transfer and newcomers under a flood of replayed initiations: each \
                 round starts a child `phyllo serve --accel` (engine defaults, no `--out`, so \
                 the server only checks the file) that allows eight client keys, and a child \
                 `phyllo connect --accel --file` sends it {} MiB of random bytes ({} MiB in full \
                 runs) once without a flood and once with it, which first alternating by round \
                 ({} rounds quick, {} full). MB/s is what `connect` reports: bytes over the time \
                 from the session's establishment to the server's verified hash, so a slower \
                 handshake under the flood does not count. The flood is one allowed client's \
                 initiation, recorded once and replayed from one socket in batches of {} as fast \
                 as a thread on CPU 1 can send; the server, the transfer and the newcomers share \
                 CPU 0, so the flood takes none of their CPU and the ratio shows what the server \
                 does with its own. In the flooded phase the flood runs {} ms, then the \
                 transfer, and after it ends {} other allowed clients run `phyllo connect \
                 --accel --ping 3 --timeout 10` at once, still under the flood; the table \
                 counts those that exit 0 (a session and three pings answered) and the seconds \
                 until all {} ended (any still running after {} s are killed and count as \
                 without a session). \
                 `serve.flood_transfer_goodput_ratio` = the median over rounds of flooded / \
                 quiet MB/s{} ({}); `serve.flood_newcomers_min` = the fewest \
                 newcomers of {} with a session in any round ({}, within 10 s); \
                 `serve.flood_initiations_per_s` = the median rate of replayed initiations sent.",
            serve_flood::transfer_bytes(true) >> 20,
            serve_flood::transfer_bytes(false) >> 20,
            serve_flood::transfer_rounds(true),
            serve_flood::transfer_rounds(false),
            phyllo_udp::udp::MAX_BATCH,
            serve_flood::FLOOD_LEAD.as_millis(),
            serve_flood::NEWCOMERS,
            serve_flood::NEWCOMERS,
            serve_flood::NEWCOMER_LIMIT.as_secs(),
            goodput.map_or(String::new(), |s| format!(
                ", here {} with the smallest and largest round in brackets",
                s.show(2, "rounds")
            )),
            stated("serve.flood_transfer_goodput_ratio"),
            serve_flood::NEWCOMERS,
            stated("serve.flood_newcomers_min"),
        ));

        Ok(Outcome::Done(section))
    }
}
