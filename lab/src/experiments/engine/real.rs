//! The engine experiment's real runs: `crate::forward` on this machine's sockets, beside
//! the model — delivered against offered for 4.2BSD's threads and the engine (seed Figs. 2, 5),
//! through `screend` with and without feedback (Fig. 6), the quota (Figs. 7-9), the CPU left to
//! a user thread under cycle limits (Fig. 10), a garbage flood on one interface, and hosts in
//! network namespaces.

use crate::forward::{
    self, trial, Design, ForwardConfig, Forwarded, Offer, Setup, Testbed, Trial, UserStage,
};
use crate::report::{Plot, Section, Series, Table};
use anyhow::Result;
use phyllo::poller::{CycleLimit, PollConfig};
use std::time::Duration;

/// The highest offered rate: ten times the real MLFRR and more.
const TOP: f64 = 300_000.0;

/// The engine with `quota`.
fn engine(quota: usize) -> Design {
    Design::Engine(PollConfig {
        quota: Some(quota),
        ..PollConfig::default()
    })
}

/// The simulated work of screend per packet.
const SCREEND: Duration = Duration::from_micros(20);

/// The drops of a run, per place.
fn drops(f: &Forwarded) -> String {
    format!(
        "{} / {} / {} / {} / {}",
        f.drops_socket, f.drops_invalid, f.drops_ipintrq, f.drops_stage, f.drops_output
    )
}

const DROPS: &str = "drops: socket / garbage / ipintrq / stage / output";

/// One delivered-vs-offered curve.
struct Curve {
    series: Series,
    /// The highest delivered rate with at most 2 % loss.
    mlfrr: f64,
    /// The run at the highest offered rate.
    last: Option<Trial>,
    /// Whether every run got its real-time priorities.
    realtime: bool,
}

impl Curve {
    /// Delivered at the highest load over the MLFRR.
    fn overload_ratio(&self) -> f64 {
        match &self.last {
            Some(t) if self.mlfrr > 0.0 => t.delivered / self.mlfrr,
            _ => 0.0,
        }
    }
}

/// Run `run` at each rate, adding a row per run to `table`.
fn curve(
    name: &str,
    rates: &[f64],
    table: &mut Table,
    mut run: impl FnMut(f64) -> std::io::Result<Trial>,
) -> Result<Curve> {
    let mut c = Curve {
        series: Series {
            name: name.into(),
            points: vec![],
        },
        mlfrr: 0.0,
        last: None,
        realtime: true,
    };
    for &r in rates {
        let t = run(r)?;
        let f = t.forwarder;
        c.realtime &= f.realtime;
        if t.delivered >= 0.98 * t.offered {
            c.mlfrr = c.mlfrr.max(t.delivered);
        }
        c.series.points.push((t.offered, t.delivered));
        table.rows.push(vec![
            name.into(),
            format!("{:.0}", t.offered),
            format!("{:.0}", t.delivered),
            drops(&f),
            format!("{:.3}", f.wakeups as f64 / f.received.max(1) as f64),
        ]);
        c.last = Some(t);
    }
    Ok(c)
}

fn curve_table(title: &str) -> Table {
    Table {
        title: title.into(),
        headers: [
            "design",
            "offered",
            "delivered",
            DROPS,
            "wake-ups per packet",
        ]
        .map(String::from)
        .to_vec(),
        rows: vec![],
    }
}

fn curve_plot(id: &str, title: &str, caption: &str) -> Plot {
    Plot {
        id: id.into(),
        title: title.into(),
        caption: caption.into(),
        x_label: "offered, packets/s".into(),
        y_label: "delivered, packets/s".into(),
        log_x: true,
        ..Plot::default()
    }
}

/// All the real runs, in the order the section shows them.
pub(super) fn runs(quick: bool, out: &mut Section) -> Result<()> {
    let secs = Duration::from_millis(if quick { 300 } else { 1000 });
    let mlfrr = delivered_vs_offered(secs, out)?;
    out.figures
        .push(("engine.idle_cpu_percent".into(), idle_cpu_percent(quick)?));
    screend(secs, out)?;
    quota_sweep(quick, secs, out)?;
    cycle_limit(secs, out)?;
    garbage_flood(mlfrr, secs, out)?;
    namespaces(mlfrr, secs, out)?;
    burst_latency(quick, out)?;
    out.text.push(
        "Real runs: `crate::forward` — generators on CPU 1 offer 32-byte datagrams in \
         bursts of 8 to a forwarder pinned to CPU 0 (10 µs of simulated link work and 20 µs of \
         IP work per packet), which sends them to a sink on CPU 1. 4.2BSD: a receive thread per \
         interface at SCHED_FIFO 50 → ipintrq of 50 → protocol thread at SCHED_FIFO 40; the \
         engine: one thread at SCHED_FIFO 50, quota 8, starting an idle transmitter at once. \
         screend (and the passive monitor, which keeps each packet's first 68 bytes) is an \
         ordinary thread on CPU 0 behind a queue of 32 (20 µs per packet; feedback at 75 % / \
         25 %). A garbage datagram is one without the forwarder's magic, dropped after the \
         link-level work. First-packet latency: bursts sent by one sendmmsg 2 ms apart, the \
         median from the send to the sink's receipt of the first datagram. The user thread of \
         Fig. 10 is an ordinary thread on CPU 0 that only computes, its share read from \
         getrusage(RUSAGE_THREAD). Real MLFRR: the highest delivered rate with at most 2 % \
         loss. `engine.idle_cpu_percent`: the process's CPU time (getrusage) while an engine \
         forwarder waits with no traffic (2 s with --quick, else 10 s)."
            .into(),
    );
    Ok(())
}

/// Seed Figs. 2 and 5 on this machine; returns the engine's MLFRR.
fn delivered_vs_offered(secs: Duration, out: &mut Section) -> Result<f64> {
    let rates = [
        5_000.0, 10_000.0, 15_000.0, 20_000.0, 25_000.0, 30_000.0, 40_000.0, 60_000.0, 100_000.0,
        200_000.0, TOP,
    ];
    let mut table = curve_table(
        "Real runs on this machine: delivered by offered rate (pkt/s) and where the rest died",
    );
    let mut plot = curve_plot(
        "engine_real",
        "Delivered vs offered, real sockets (seed Figs. 2, 5)",
        "The model's claim on this machine's sockets: delivered follows offered up to the \
         MLFRR; past it 4.2BSD's real-time threads should fall back (receive livelock) while the \
         engine with a quota of 8 holds its peak up to the highest offered rate. The x axis is \
         logarithmic, so the overload region gets as much room as the rise.",
    );
    let base = curve("4.2BSD, real-time threads", &rates, &mut table, |r| {
        trial(Design::Baseline, ForwardConfig::default(), r, secs)
    })?;
    let eng = curve("engine, quota 8", &rates, &mut table, |r| {
        trial(engine(8), ForwardConfig::default(), r, secs)
    })?;
    let f = &mut out.figures;
    f.push((
        "engine.real_baseline_overload_ratio".into(),
        base.overload_ratio(),
    ));
    f.push(("engine.real_baseline_mlfrr".into(), base.mlfrr));
    f.push(("engine.real_overload_ratio".into(), eng.overload_ratio()));
    f.push(("engine.real_mlfrr".into(), eng.mlfrr));
    // Wake-ups per packet at the second (low) rate: one per burst of 8 is 0.125.
    if let Some(row) = table
        .rows
        .iter()
        .filter(|r| r[0] == "engine, quota 8")
        .nth(1)
    {
        if let Ok(w) = row[4].parse::<f64>() {
            f.push(("engine.real_wakeups_per_packet_low_load".into(), w));
        }
    }
    if let Some(t) = &eng.last {
        f.push((
            "engine.real_highest_offered_over_mlfrr".into(),
            t.offered / eng.mlfrr.max(1.0),
        ));
    }
    if !(base.realtime && eng.realtime) {
        table.title.push_str(
            " — NOTE: real-time priorities were refused here; the threads ran with ordinary ones",
        );
    }
    let mlfrr = eng.mlfrr;
    plot.series = vec![base.series, eng.series];
    out.tables.push(table);
    out.plots.push(plot);
    Ok(mlfrr)
}

/// Seed Fig. 6: through screend, with and without feedback.
fn screend(secs: Duration, out: &mut Section) -> Result<()> {
    let rates = [
        5_000.0, 10_000.0, 15_000.0, 20_000.0, 30_000.0, 60_000.0, 150_000.0, TOP,
    ];
    let mut table =
        curve_table("Real runs through screend, and into a passive monitor (seed Fig. 6)");
    let mut plot = curve_plot(
        "engine_real_screend",
        "Delivered vs offered through screend, real sockets (seed Fig. 6)",
        "Without queue-state feedback both designs spend the CPU on packets that `screend`'s \
         full queue then drops, and should collapse past their peak; with feedback the engine \
         stops taking input while that queue is full and should hold its peak. The passive \
         68-byte monitor with feedback should behave like `screend` with feedback.",
    );
    for (name, design, feedback, figure) in [
        (
            "4.2BSD + screend",
            Design::Baseline,
            false,
            "engine.real_screend_baseline_overload_ratio",
        ),
        (
            "engine + screend, no feedback",
            engine(8),
            false,
            "engine.real_screend_no_feedback_overload_ratio",
        ),
        (
            "engine + screend, feedback",
            engine(8),
            true,
            "engine.real_screend_feedback_overload_ratio",
        ),
        (
            "engine + 68-byte monitor, feedback",
            engine(8),
            true,
            "engine.real_monitor_feedback_overload_ratio",
        ),
    ] {
        let stage = if name.contains("monitor") {
            UserStage::monitor(SCREEND, feedback)
        } else {
            UserStage::screend(SCREEND, feedback)
        };
        let cfg = ForwardConfig {
            user: Some(stage),
            ..ForwardConfig::default()
        };
        let c = curve(name, &rates, &mut table, |r| trial(design, cfg, r, secs))?;
        out.figures.push((figure.into(), c.overload_ratio()));
        plot.series.push(c.series);
    }
    out.tables.push(table);
    out.plots.push(plot);
    Ok(())
}

/// Seed Figs. 7-9: delivered at the highest load by quota, with and without screend.
fn quota_sweep(quick: bool, secs: Duration, out: &mut Section) -> Result<()> {
    let loads: &[f64] = if quick { &[TOP] } else { &[20_000.0, TOP] };
    let mut headers = vec!["quota".to_string()];
    for l in loads {
        headers.push(format!("at {l:.0} pkt/s, no screend"));
        headers.push(format!("at {l:.0} pkt/s, screend + feedback"));
    }
    let mut table = Table {
        title: "Real runs: delivered (pkt/s) by quota (seed Figs. 7-9)".into(),
        headers,
        rows: vec![],
    };
    let mut plot = Plot {
        id: "engine_real_quota".into(),
        title: format!("Delivered at {TOP:.0} pkt/s offered by quota, real sockets (seed Fig. 8)"),
        x_label: "quota, packets per callback".into(),
        y_label: "delivered, packets/s".into(),
        log_x: true,
        caption: format!(
            "Higher is better: each point is what gets through at {TOP:.0} pkt/s offered, far past \
             the MLFRR. Too small a quota spends the CPU on callbacks for few packets, too large \
             a one lets input starve the later stages (output, `screend`), so a line should \
             peak at a moderate quota."
        ),
        ..Plot::default()
    };
    let mut plain = Series {
        name: "no screend".into(),
        points: vec![],
    };
    let mut screened = Series {
        name: "screend + feedback".into(),
        points: vec![],
    };
    for q in [1usize, 2, 4, 8, 16, 32, 64] {
        let mut row = vec![q.to_string()];
        for &load in loads {
            for user in [None, Some(UserStage::screend(SCREEND, true))] {
                let cfg = ForwardConfig {
                    user,
                    ..ForwardConfig::default()
                };
                let t = trial(engine(q), cfg, load, secs)?;
                row.push(format!("{:.0}", t.delivered));
                if load == TOP {
                    let s = if user.is_none() {
                        &mut plain
                    } else {
                        &mut screened
                    };
                    s.points.push((q as f64, t.delivered));
                }
            }
        }
        table.rows.push(row);
    }
    plot.series = vec![plain, screened];
    out.tables.push(table);
    out.plots.push(plot);
    Ok(())
}

/// Seed Fig. 10: the CPU a compute-bound user thread keeps under cycle limits.
fn cycle_limit(secs: Duration, out: &mut Section) -> Result<()> {
    let rates = [10_000.0, 30_000.0, TOP];
    let mut headers = vec!["limit".to_string()];
    for r in rates {
        headers.push(format!("user share at {r:.0} pkt/s"));
    }
    for r in rates {
        headers.push(format!("delivered at {r:.0}"));
    }
    let mut table = Table {
        title: "Real runs: the share of CPU 0 left to a compute-bound user thread (seed Fig. 10)"
            .into(),
        headers,
        rows: vec![],
    };
    let mut plot = Plot {
        id: "engine_real_cycle_limit".into(),
        title: "CPU left to a compute-bound user thread, real (seed Fig. 10)".into(),
        x_label: "offered, packets/s".into(),
        y_label: "user share of the CPU".into(),
        log_x: true,
        caption: format!(
            "With no limit the user thread's share should fall as the load grows; under a limit \
             of s it should stay at or above 1 − s at every load \
             (`engine.real_cycle_limit_margin` is the worst shortfall). Only {} offered rates a \
             line ({} pkt/s asked): enough to see where each line levels off, too few to show \
             the shape of the curve between them.",
            rates.len(),
            rates.map(|r| format!("{r:.0}")).join(", ")
        ),
        ..Plot::default()
    };
    let mut margin = f64::INFINITY;
    for share in [None, Some(0.25), Some(0.5), Some(0.75)] {
        let pc = PollConfig {
            cycle_limit: share.map(|share| CycleLimit {
                share,
                period: Duration::from_millis(10),
            }),
            ..PollConfig::default()
        };
        let name = share.map_or("no limit".into(), |s| format!("limit {:.0} %", s * 100.0));
        let mut series = Series {
            name: name.clone(),
            points: vec![],
        };
        let (mut shares, mut delivered) = (vec![name], vec![]);
        for r in rates {
            let t = Setup {
                user_thread: true,
                ..Setup::new(Design::Engine(pc), r, secs)
            }
            .run()?;
            let u = t.user_share.unwrap_or(0.0);
            if let Some(s) = share {
                margin = margin.min(u - (1.0 - s));
            }
            series.points.push((t.offered, u));
            shares.push(format!("{u:.2}"));
            delivered.push(format!("{:.0}", t.delivered));
        }
        shares.extend(delivered);
        table.rows.push(shares);
        plot.series.push(series);
    }
    out.figures
        .push(("engine.real_cycle_limit_margin".into(), margin));
    out.tables.push(table);
    out.plots.push(plot);
    Ok(())
}

/// Garbage at ten times the MLFRR on one interface while another carries valid traffic at half
/// of it: what gets through, where the garbage died, and how memory grew.
fn garbage_flood(mlfrr: f64, secs: Duration, out: &mut Section) -> Result<()> {
    let mut table = Table {
        title: format!(
            "Real runs: garbage at 10 × MLFRR ({:.0} pkt/s asked) on one interface, valid \
             traffic at 0.5 × MLFRR on another",
            10.0 * mlfrr
        ),
        headers: [
            "design",
            "garbage sent/s",
            "valid sent/s",
            "valid delivered/s",
            DROPS,
            "resident memory growth, MiB",
        ]
        .map(String::from)
        .to_vec(),
        rows: vec![],
    };
    for (name, design) in [("4.2BSD", Design::Baseline), ("engine, quota 8", engine(8))] {
        let t = Setup {
            offers: vec![Offer::valid(0.5 * mlfrr), Offer::garbage(10.0 * mlfrr)],
            ..Setup::new(design, 0.0, secs)
        }
        .run()?;
        let ((valid, got), (garbage, _)) = (t.inputs[0], t.inputs[1]);
        let ratio = if valid > 0.0 { got / valid } else { 0.0 };
        let mib = t.rss_growth as f64 / f64::from(1 << 20);
        if matches!(design, Design::Baseline) {
            out.figures
                .push(("engine.garbage_flood_valid_ratio_baseline".into(), ratio));
        } else {
            out.figures
                .push(("engine.garbage_flood_valid_ratio".into(), ratio));
            out.figures
                .push(("engine.garbage_flood_rss_growth_mib".into(), mib));
            out.figures.push((
                "engine.garbage_flood_over_mlfrr".into(),
                garbage / mlfrr.max(1.0),
            ));
        }
        table.rows.push(vec![
            name.into(),
            format!("{garbage:.0}"),
            format!("{valid:.0}"),
            format!("{got:.0}"),
            drops(&t.forwarder),
            format!("{mib:.2}"),
        ]);
    }
    out.tables.push(table);
    Ok(())
}

/// Seed Figs. 1 and 14: first-packet latency by burst size.
fn burst_latency(quick: bool, out: &mut Section) -> Result<()> {
    let bursts = if quick { 50 } else { 300 };
    let mut plot = Plot {
        id: "engine_real_burst_latency".into(),
        title: "First-packet latency by burst size, real sockets (seed Figs. 1, 14)".into(),
        x_label: "packets in the burst".into(),
        y_label: "µs from the burst's send to its first datagram at the sink (median)".into(),
        caption: "Lower is better. 4.2BSD's receive thread takes the whole burst in before its \
                  protocol thread forwards the first packet, so its line should rise with the \
                  burst; the engine forwards each packet before taking the next, so its line \
                  should stay flat. Points are medians over bursts: a wiggle between neighbouring \
                  sizes is noise, not a trend."
            .into(),
        ..Plot::default()
    };
    for (name, key, design) in [
        ("4.2BSD", "baseline", Design::Baseline),
        ("engine, quota 8", "engine", engine(8)),
    ] {
        let mut series = Series {
            name: name.into(),
            points: vec![],
        };
        for size in 1..=16usize {
            let l = forward::burst_latency(
                design,
                ForwardConfig::default(),
                size,
                bursts,
                Duration::from_millis(2),
            )?;
            let us = l.as_secs_f64() * 1e6;
            series.points.push((size as f64, us));
            if size == 1 || size == 16 {
                out.figures
                    .push((format!("engine.real_first_packet_us.{key}.burst{size}"), us));
            }
        }
        plot.series.push(series);
    }
    out.plots.push(plot);
    Ok(())
}

/// Delivered vs offered with each host in a network namespace of its own, joined by veth.
fn namespaces(mlfrr: f64, secs: Duration, out: &mut Section) -> Result<()> {
    let tb = match Testbed::create(1) {
        Ok(tb) => tb,
        Err(e) => {
            out.text.push(format!(
                "Hosts in network namespaces: SKIPPED here — {e}. The loopback runs above \
                 stand."
            ));
            return Ok(());
        }
    };
    let rates: Vec<f64> = [0.25, 0.5, 0.75, 1.0, 3.0, 10.0]
        .iter()
        .map(|k| k * mlfrr)
        .collect();
    let mut table = curve_table(
        "Real runs with generator, forwarder and sink in network namespaces joined by veth",
    );
    for (name, design, figure) in [
        (
            "4.2BSD, namespaces",
            Design::Baseline,
            "engine.netns_baseline_overload_ratio",
        ),
        (
            "engine, namespaces",
            engine(8),
            "engine.netns_overload_ratio",
        ),
    ] {
        let c = curve(name, &rates, &mut table, |r| {
            Setup {
                hosts: Some(&tb),
                ..Setup::new(design, r, secs)
            }
            .run()
        })?;
        out.figures.push((figure.into(), c.overload_ratio()));
    }
    out.tables.push(table);
    Ok(())
}

/// CPU time of this process, as a percentage of the wall time, while an engine forwarder waits
/// for traffic that never comes.
fn idle_cpu_percent(quick: bool) -> Result<f64> {
    use crate::forward::forward;
    use phyllo_udp::udp::UdpLink;
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::Arc;
    let any = std::net::SocketAddr::from((std::net::Ipv4Addr::LOCALHOST, 0));
    let (input, output) = (UdpLink::bind(any)?, UdpLink::bind(any)?);
    let to = input.local_addr();
    let stop = Arc::new(AtomicBool::new(false));
    let wait = Duration::from_secs(if quick { 2 } else { 10 });
    let cpu0 = forward::process_cpu_time()?;
    let t0 = std::time::Instant::now();
    let fwd = {
        let stop = Arc::clone(&stop);
        std::thread::spawn(move || {
            forward(
                vec![input],
                output,
                to,
                Design::Engine(PollConfig::default()),
                ForwardConfig::default(),
                stop,
            )
        })
    };
    std::thread::sleep(wait);
    stop.store(true, Ordering::Relaxed);
    let _ = fwd.join();
    let used = forward::process_cpu_time()?.saturating_sub(cpu0);
    Ok(100.0 * used.as_secs_f64() / t0.elapsed().as_secs_f64())
}
