//! `engine`: the receive engine against receive livelock (seed 002), in the deterministic
//! discrete-event model of a forwarding host (`phyllo::engine::model`), which runs the same
//! `Poller` as the real engine. Costs are the seed's order of magnitude (`Costs::seed`: about
//! 200 µs of CPU per forwarded packet), so the figures read beside the seed's:
//!
//! - delivered vs offered rate: 4.2BSD, the engine without a quota, with a quota of 8; through
//!   `screend` with and without queue-state feedback (Figs. 2, 5, 6);
//! - the quota from 1 to 64 (Figs. 7-9): the highest delivered rate and the rate at the highest
//!   load, with and without `screend`;
//! - the CPU left to a compute-bound user thread under cycle limits of 25, 50 and 75 % (Fig. 10);
//! - first-packet latency against burst size (Figs. 1 and 14).

use crate::report::{Ctx, Experiment, Outcome, Plot, Section, Series, Table};
use anyhow::Result;
use phyllo::engine::model::{self, Arrivals, Design, Scenario};
use phyllo::engine::{CycleLimit, PollConfig};
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
                let o = model::run(&Scenario { rate: r, ..base })?;
                series.points.push((o.offered, o.delivered));
            }
            curve.series.push(series);
            let mlfrr = model::mlfrr(&base, 250.0, 12_000.0)?;
            let o = model::run(&Scenario {
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
                    peak = peak.max(model::run(&Scenario { rate: r, ..base })?.delivered);
                }
                let at_top = model::run(&Scenario { rate: top, ..base })?.delivered;
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
                let o = model::run(&Scenario {
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
            ..Plot::default()
        };
        for (name, design) in [("4.2BSD", Design::Baseline), ("engine", engine(Some(8)))] {
            let mut series = Series {
                name: name.into(),
                points: vec![],
            };
            for size in 1..=16usize {
                let o = model::run(&Scenario {
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

        real_runs(quick, &mut figures, &mut tables, &mut plots)?;
        serve_flood(quick, &mut figures, &mut tables)?;

        Ok(Outcome::Done(Section {
            text: vec![
                "The model: one CPU forwarding packets, an interface ring of 32, 4.2BSD's \
                 ipintrq of 50, an output queue of 50 and 16 transmit descriptors that the CPU \
                 must reclaim; costs per packet link 50 µs, IP 70, output 40, descriptor 20, \
                 screend 150, interrupt 30, poll callback 5, wire 67. The engine is phyllo's \
                 `Poller` itself. MLFRR: the highest delivered rate with at most 1 % loss under \
                 periodic arrivals; overload runs are Poisson at ten times it."
                    .into(),
                "`engine.model_overload_ratio` (goal ≥ 0.95) and \
                 `engine.model_baseline_overload_ratio` (livelock: near 0); \
                 `engine.model_cycle_limit_margin` is the smallest user share minus (1 − limit) \
                 over the limits and rates (the Must-show wants ≥ −0.05)."
                    .into(),
                "Real runs: `phyllo_udp::forward::trial` — a generator on CPU 1 offers 32-byte \
                 datagrams in bursts of 8 to a forwarder pinned to CPU 0 (10 µs of simulated \
                 link work and 20 µs of IP work per packet), which sends them to a sink on CPU \
                 1. 4.2BSD: a receive thread at SCHED_FIFO 50 → ipintrq of 50 → protocol thread \
                 at SCHED_FIFO 40; the engine: one thread, quota 8. Real MLFRR: the highest \
                 delivered rate with at most 2 % loss. `engine.idle_cpu_percent`: the process's \
                 CPU time (utime + stime from /proc/self/stat, 10 ms ticks) while an engine \
                 forwarder waits with no traffic."
                    .into(),
                "`phyllo serve` under a flood: a child `phyllo serve --accel` (on the engine, \
                 and with `--no-engine`) holds a session with this process, which counts \
                 32-byte echoes per second for a while without a flood and then while a thread \
                 sends garbage and replayed handshake initiations (valid mac1, keys the server \
                 does not allow) at the highest rate it can. \
                 `engine.serve_flood_goodput_ratio` = echoes under the flood / without (goal ≥ \
                 0.90)."
                    .into(),
            ],
            tables,
            plots,
            figures,
        }))
    }
}

/// The real runs beside the model: delivered against offered for both designs on this machine,
/// the engine's idle CPU, and its wake-ups per packet at low load.
fn real_runs(
    quick: bool,
    figures: &mut Vec<(String, f64)>,
    tables: &mut Vec<Table>,
    plots: &mut Vec<Plot>,
) -> Result<()> {
    use phyllo_udp::forward::{trial, Design as Real, ForwardConfig};
    let rates = [
        5_000.0, 10_000.0, 15_000.0, 20_000.0, 25_000.0, 30_000.0, 40_000.0, 60_000.0, 100_000.0,
        200_000.0, 300_000.0,
    ];
    let secs = Duration::from_millis(if quick { 300 } else { 1000 });
    let mut table = Table {
        title: "Real runs on this machine: delivered by offered rate (pkt/s) and where the rest \
                died"
            .into(),
        headers: [
            "design",
            "offered",
            "delivered",
            "drops: socket (kernel) / ipintrq / output",
            "wake-ups per packet",
        ]
        .map(String::from)
        .to_vec(),
        rows: vec![],
    };
    let mut plot = Plot {
        id: "engine_real".into(),
        title: "Delivered vs offered, real sockets (seed Figs. 2, 5)".into(),
        x_label: "offered, packets/s".into(),
        y_label: "delivered, packets/s".into(),
        log_x: true,
        ..Plot::default()
    };
    let mut realtime = true;
    for (name, design) in [
        ("4.2BSD, real-time threads", Real::Baseline),
        ("engine, quota 8", Real::Engine(PollConfig::default())),
    ] {
        let mut series = Series {
            name: name.into(),
            points: vec![],
        };
        // The highest loss-free delivered rate, the last trial's (offered, delivered), and
        // wake-ups per packet at the second (low) rate.
        let (mut mlfrr, mut last, mut low_wakeups) = (0.0f64, (0.0, 0.0), f64::NAN);
        for &r in &rates {
            let t = trial(design, ForwardConfig::default(), r, secs)?;
            let f = t.forwarder;
            if matches!(design, Real::Baseline) {
                realtime &= f.realtime;
            }
            if t.delivered >= 0.98 * t.offered {
                mlfrr = mlfrr.max(t.delivered);
            }
            let wakeups = f.wakeups as f64 / f.received.max(1) as f64;
            if r == rates[1] {
                low_wakeups = wakeups;
            }
            last = (t.offered, t.delivered);
            series.points.push((t.offered, t.delivered));
            table.rows.push(vec![
                name.into(),
                format!("{:.0}", t.offered),
                format!("{:.0}", t.delivered),
                format!(
                    "{} / {} / {}",
                    f.drops_socket, f.drops_ipintrq, f.drops_output
                ),
                format!("{wakeups:.3}"),
            ]);
        }
        let ratio = if mlfrr > 0.0 { last.1 / mlfrr } else { 0.0 };
        match design {
            Real::Baseline => {
                figures.push(("engine.real_baseline_overload_ratio".into(), ratio));
                figures.push(("engine.real_baseline_mlfrr".into(), mlfrr));
            }
            Real::Engine(_) => {
                figures.push(("engine.real_overload_ratio".into(), ratio));
                figures.push(("engine.real_mlfrr".into(), mlfrr));
                figures.push((
                    "engine.real_wakeups_per_packet_low_load".into(),
                    low_wakeups,
                ));
                figures.push((
                    "engine.real_highest_offered_over_mlfrr".into(),
                    last.0 / mlfrr.max(1.0),
                ));
            }
        }
        plot.series.push(series);
    }
    if !realtime {
        table.title.push_str(
            " — NOTE: real-time priorities were refused here; the baseline ran with ordinary \
             ones",
        );
    }
    figures.push(("engine.idle_cpu_percent".into(), idle_cpu_percent(quick)?));
    tables.push(table);
    plots.push(plot);
    Ok(())
}

/// CPU time of this process, as a percentage of the wall time, while an engine forwarder waits
/// for traffic that never comes.
fn idle_cpu_percent(quick: bool) -> Result<f64> {
    use phyllo_udp::forward::{forward, Design as Real, ForwardConfig};
    use phyllo_udp::udp::UdpLink;
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::Arc;
    let any = std::net::SocketAddr::from((std::net::Ipv4Addr::LOCALHOST, 0));
    let (input, output) = (UdpLink::bind(any)?, UdpLink::bind(any)?);
    let to = input.local_addr();
    let stop = Arc::new(AtomicBool::new(false));
    let wait = Duration::from_secs(if quick { 2 } else { 10 });
    let cpu0 = process_cpu();
    let t0 = std::time::Instant::now();
    let fwd = {
        let stop = Arc::clone(&stop);
        std::thread::spawn(move || {
            forward(
                vec![input],
                output,
                to,
                Real::Engine(PollConfig::default()),
                ForwardConfig::default(),
                stop,
            )
        })
    };
    std::thread::sleep(wait);
    stop.store(true, Ordering::Relaxed);
    let _ = fwd.join();
    let used = process_cpu().saturating_sub(cpu0);
    Ok(100.0 * used.as_secs_f64() / t0.elapsed().as_secs_f64())
}

/// User plus system CPU time of this process so far.
fn process_cpu() -> Duration {
    let stat = std::fs::read_to_string("/proc/self/stat").unwrap_or_default();
    // Fields after the command name (which may hold spaces) end with ')'.
    let fields: Vec<&str> = stat
        .rsplit_once(')')
        .map_or(vec![], |(_, rest)| rest.split_whitespace().collect());
    // utime and stime are fields 14 and 15 (1-based), 12 and 13 after ')' and the state.
    let ticks: u64 = fields
        .get(11..13)
        .map_or(0, |f| f.iter().filter_map(|x| x.parse::<u64>().ok()).sum());
    Duration::from_secs_f64(ticks as f64 / 100.0)
}

/// `phyllo serve` under a flood of garbage and replayed initiations, on the engine and off:
/// the established session's echo rate with the flood over without it.
fn serve_flood(
    quick: bool,
    figures: &mut Vec<(String, f64)>,
    tables: &mut Vec<Table>,
) -> Result<()> {
    use phyllo::session::StaticKey;
    if super::phyllo_exe().is_none() {
        return Ok(());
    }
    let dir = std::env::temp_dir().join(format!("phyllo-engine-exp-{}", std::process::id()));
    std::fs::create_dir_all(&dir)?;
    let (sk, ck) = (StaticKey::generate()?, StaticKey::generate()?);
    crate::keys::write_pair(&dir.join("server"), &sk)?;
    crate::keys::write_pair(&dir.join("client"), &ck)?;
    let span = Duration::from_millis(if quick { 700 } else { 3000 });
    // With two CPUs: the server (a child, which inherits this thread's placement) and this
    // client on CPU 0 in both phases, the flood on CPU 1 — so the flood takes no CPU from
    // them and the ratio shows what the server does with its own.
    let two = std::thread::available_parallelism().is_ok_and(|n| n.get() >= 2);
    if two {
        let _ = phyllo_udp::forward::pin_current_thread(&[0]);
    }
    let result = serve_flood_runs(span, two, &sk, &ck, &dir, figures, tables);
    if two {
        let _ = phyllo_udp::forward::pin_current_thread(&[]);
    }
    let _ = std::fs::remove_dir_all(&dir);
    result
}

/// The runs of [`serve_flood`].
fn serve_flood_runs(
    span: Duration,
    two: bool,
    sk: &phyllo::session::StaticKey,
    ck: &phyllo::session::StaticKey,
    dir: &std::path::Path,
    figures: &mut Vec<(String, f64)>,
    tables: &mut Vec<Table>,
) -> Result<()> {
    use crate::sessiond::{Node, DEFAULT_STACK, PING};
    use phyllo::session::StaticKey;
    use phyllo_udp::udp::{UdpLink, MAX_BATCH};
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::Arc;
    let path = |p: &std::path::Path| p.to_string_lossy().into_owned();
    let (skf, cpub) = (
        path(&dir.join("server")),
        format!("{}.pub", path(&dir.join("client"))),
    );
    let mut table = Table {
        title: "`phyllo serve` under a flood: echoes per second of an established session".into(),
        headers: [
            "server",
            "without flood",
            "with flood",
            "ratio",
            "flood datagrams/s sent",
        ]
        .map(String::from)
        .to_vec(),
        rows: vec![],
    };
    for (name, extra) in [("engine", None), ("--no-engine", Some("--no-engine"))] {
        let mut args = vec![
            "--listen",
            "127.0.0.1:0",
            "--print-addr",
            "--accel",
            "--key",
            &skf,
            "--allow",
            &cpub,
        ];
        args.extend(extra);
        let (_server, addr) = super::session::spawn_serve(&args)?;
        let addr: std::net::SocketAddr = addr.parse()?;
        let mut node = Node::bind(
            "127.0.0.1:0".parse()?,
            ck.clone(),
            vec![],
            DEFAULT_STACK,
            true,
        )?;
        let p = node.ep.connect(node.now(), sk.public(), addr);
        let t0 = std::time::Instant::now();
        while !node.ep.is_established(p) {
            anyhow::ensure!(
                t0.elapsed() < Duration::from_secs(5),
                "no session with the server"
            );
            node.pump(Duration::from_millis(5))?;
        }
        // Initiations from keys the server does not allow (valid mac1), to replay.
        let mut inits = Vec::new();
        for _ in 0..16 {
            let mut stranger = Node::bind(
                "127.0.0.1:0".parse()?,
                StaticKey::generate()?,
                vec![],
                DEFAULT_STACK,
                true,
            )?;
            stranger.ep.connect(stranger.now(), sk.public(), addr);
            let mut d = Vec::new();
            if stranger.ep.poll_transmit(&mut d).is_some() {
                inits.push(d);
            }
        }
        let echoes = |node: &mut Node| -> Result<f64> {
            let mut msg = vec![0u8; 32];
            msg[0] = PING;
            let start = std::time::Instant::now();
            let mut n = 0u64;
            while start.elapsed() < span {
                node.ep
                    .send(node.now(), p, &msg)
                    .map_err(|e| anyhow::anyhow!("ping: {e}"))?;
                loop {
                    node.pump(Duration::from_millis(2))?;
                    if node.ep.poll_delivery_with(p, |_| ()).is_some() {
                        n += 1;
                        break;
                    }
                    if start.elapsed() >= span + Duration::from_secs(2) {
                        break;
                    }
                }
            }
            Ok(n as f64 / start.elapsed().as_secs_f64())
        };
        let quiet = echoes(&mut node)?;
        let stop = Arc::new(AtomicBool::new(false));
        let flood = {
            let stop = Arc::clone(&stop);
            std::thread::spawn(move || -> u64 {
                if two {
                    let _ = phyllo_udp::forward::pin_current_thread(&[1]);
                }
                let Ok(mut l) = UdpLink::bind("127.0.0.1:0".parse().unwrap_or(addr)) else {
                    return 0;
                };
                let mut junk = Vec::new();
                for i in 0..32u32 {
                    let mut d = vec![0u8; 60 + (i as usize * 13) % 90];
                    let _ = getrandom::fill(&mut d);
                    junk.push(d);
                }
                let mut views: Vec<&[u8]> = Vec::new();
                for i in 0..MAX_BATCH {
                    views.push(if i % 2 == 0 || inits.is_empty() {
                        &junk[i % junk.len()]
                    } else {
                        &inits[i % inits.len()]
                    });
                }
                let start = std::time::Instant::now();
                let mut sent = 0u64;
                while !stop.load(Ordering::Relaxed) {
                    sent += l.send_batch_to(&views, addr).unwrap_or(0) as u64;
                }
                (sent as f64 / start.elapsed().as_secs_f64()) as u64
            })
        };
        let flooded = echoes(&mut node)?;
        stop.store(true, Ordering::Relaxed);
        let rate = flood.join().unwrap_or(0);
        let ratio = if quiet > 0.0 { flooded / quiet } else { 0.0 };
        figures.push((
            if extra.is_none() {
                "engine.serve_flood_goodput_ratio".into()
            } else {
                "engine.serve_flood_goodput_ratio_no_engine".into()
            },
            ratio,
        ));
        table.rows.push(vec![
            name.into(),
            format!("{quiet:.0}"),
            format!("{flooded:.0}"),
            format!("{ratio:.2}"),
            format!("{rate}"),
        ]);
    }
    tables.push(table);
    Ok(())
}
