//! `phyllo-lab analyze`: trace any phyllo workload under valgrind lackey and run the architecture
//! analyzer (seed 003's figures, seed 000's CPI/iCPI/mCPI) with your own cache geometry. (Seed 003
//! is Xie, Zhao and Bhuyan, "Architectural Analysis and Instruction-Set Optimization for Design of
//! Network Protocol Processors".)

use std::fmt::Write as _;

use anyhow::{Context, Result};
use phyllo_analyze::analysis::{FusionSetup, LayoutSetup, Report, Setup};
use phyllo_analyze::cache::{CacheConfig, HierarchyConfig, Mode, Policy};
use phyllo_analyze::capture::Workload;
use phyllo_analyze::layout::{Layout, LayoutKind};
use phyllo_analyze::session;
use phyllo_analyze::timing::TimingConfig;

/// `phyllo-lab analyze` options.
#[derive(clap::Args, Debug, Clone)]
#[command(
    after_help = "Example:\n  phyllo analyze --workload lan --packets 2000 --l1i 16k:4:32 --l1i 32k:4:32 --l1d 16k:4:32 --policy lru --width 1 --width 4 --fusion --layout bipartite\n\nGeometries are SIZE:ASSOC:LINE (k/m suffixes). Each --l1i × --l1d pair is one hierarchy, all simulated in one pass."
)]
pub struct AnalyzeArgs {
    /// Workload: lan, wan (protocol stack, synthetic bimodal packet trace) or compute.
    #[arg(long, default_value = "lan")]
    pub workload: String,
    /// Packets of the protocol workloads.
    #[arg(long, default_value_t = 10_000)]
    pub packets: usize,
    /// Input KiB of the compute workload.
    #[arg(long, default_value_t = 256)]
    pub size_kib: usize,
    /// Seed of the synthetic trace.
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// L1 instruction cache(s), SIZE:ASSOC:LINE (repeat for a sweep).
    #[arg(long, default_values_t = vec!["16k:4:32".to_string()])]
    pub l1i: Vec<String>,
    /// L1 data cache(s).
    #[arg(long, default_values_t = vec!["16k:4:32".to_string()])]
    pub l1d: Vec<String>,
    /// Unified L2, or `none`.
    #[arg(long, default_value = "256k:4:64")]
    pub l2: String,
    /// Replacement policy: lru, fifo, random.
    #[arg(long, default_value = "lru")]
    pub policy: String,
    /// Seed of the random replacement policy.
    #[arg(long, default_value_t = 1)]
    pub policy_seed: u64,
    /// Count accesses as cachegrind does (straddling accesses once, no write-backs).
    #[arg(long)]
    pub cachegrind_mode: bool,
    /// Issue width(s) of the timing model (repeat for a sweep).
    #[arg(long, default_values_t = vec![4u32])]
    pub width: Vec<u32>,
    /// L2 hit penalty, cycles.
    #[arg(long, default_value_t = 6)]
    pub l2_latency: u32,
    /// Memory penalty, cycles.
    #[arg(long, default_value_t = 60)]
    pub mem_latency: u32,
    /// Evaluate the fusion alternatives (seed 003 Table 2 types, Intel and Zen macro-fusion).
    #[arg(long)]
    pub fusion: bool,
    /// Virtual layouts to re-simulate the L1I with (original, invocation, bipartite, bad,
    /// list:f1,f2,...); needs a second traced run.
    #[arg(long)]
    pub layout: Vec<String>,
    /// Count the whole program instead of the marked region.
    #[arg(long)]
    pub whole_program: bool,
    /// Also measure the analyzer alone: replay the first MiB of the trace from memory with
    /// the same setup and print records per second (0: off).
    #[arg(long, default_value_t = 0)]
    pub throughput_mib: usize,
    /// Dependent pairs and functions to list.
    #[arg(long, default_value_t = 10)]
    pub top: usize,
}

/// The workload `name` of this very binary.
pub fn workload(name: &str, packets: usize, size_kib: usize, seed: u64) -> Result<Workload> {
    let exe = std::env::current_exe().context("locating the phyllo binary")?;
    Ok(Workload {
        program: exe,
        args: vec![
            "workload".into(),
            name.into(),
            "--packets".into(),
            packets.to_string(),
            "--size-kib".into(),
            size_kib.to_string(),
            "--seed".into(),
            seed.to_string(),
        ],
    })
}

fn hierarchies(a: &AnalyzeArgs) -> Result<Vec<HierarchyConfig>> {
    let policy: Policy = a.policy.parse()?;
    let with = |c: CacheConfig| CacheConfig {
        policy,
        seed: a.policy_seed,
        ..c
    };
    let l2 = if a.l2 == "none" {
        None
    } else {
        Some(with(CacheConfig::parse(&a.l2)?))
    };
    let mode = if a.cachegrind_mode {
        Mode::Cachegrind
    } else {
        Mode::Phyllo
    };
    let mut v = Vec::new();
    for i in &a.l1i {
        for d in &a.l1d {
            v.push(HierarchyConfig {
                l1i: with(CacheConfig::parse(i)?),
                l1d: with(CacheConfig::parse(d)?),
                l2,
                mode,
            });
        }
    }
    Ok(v)
}

/// Percent with two decimals.
pub fn pct(x: f64) -> String {
    format!("{:.2}%", 100.0 * x)
}

/// Renders a report as text.
pub fn render(r: &Report, top: usize) -> String {
    let mut s = String::new();
    let _ = writeln!(s, "trace length {} instructions, {} loads, {} stores, {} modifies; {} records read; region entered {} time(s)", r.instructions, r.data_refs[0], r.data_refs[1], r.data_refs[2], r.records, r.roi_entries);
    if r.rep.executions > 0 {
        let _ = writeln!(s, "repeated string instructions (one instruction per execution in the trace length, mix and pairs): {} executions, {} iterations, {} bytes ({} valgrind fetches)", r.rep.executions, r.rep.iterations, r.rep.bytes, r.rep.records);
        for o in r.rep.ops.iter().take(top) {
            let _ = writeln!(
                s,
                "  {:<12} {:>10} executions {:>12} iterations {:>14} bytes",
                o.name, o.executions, o.iterations, o.bytes
            );
        }
    }
    let _ = writeln!(s, "\ncaches:");
    for (h, i, d, l2) in &r.caches {
        let _ = write!(
            s,
            "  {h}: L1I {} misses / {} ({}), L1D {} / {} ({})",
            i.misses(),
            i.accesses(),
            pct(i.miss_ratio()),
            d.misses(),
            d.accesses(),
            pct(d.miss_ratio())
        );
        if let Some(l2) = l2 {
            let _ = write!(
                s,
                ", L2 {} / {} ({})",
                l2.misses(),
                l2.accesses(),
                pct(l2.miss_ratio())
            );
        }
        let _ = writeln!(s);
    }
    if !r.timings.is_empty() {
        let _ = writeln!(
            s,
            "\ntiming (seed 003 Fig 4 breakdown; seed 000 CPI/iCPI/mCPI):"
        );
        for (h, t, b) in &r.timings {
            let c = b.cycles.max(1) as f64;
            let _ = writeln!(s, "  {} width {}: {} cycles, CPU {} data {} instr {} | CPI {:.3} iCPI {:.3} mCPI {:.3}", r.caches[*h].0.l1i, t.issue_width, b.cycles, pct(b.cpu as f64 / c), pct(b.data as f64 / c), pct(b.instr as f64 / c), b.cpi, b.icpi, b.mcpi);
        }
    }
    if r.mix.iter().any(|m| m.1 > 0) {
        let _ = writeln!(s, "\ninstruction mix (seed 003 Fig 2):");
        for (c, n) in &r.mix {
            let _ = writeln!(s, "  {:<24} {:>12} {}", c.name(), n, pct(r.mix_share(*c)));
        }
        let _ = writeln!(
            s,
            "\ntop dependent pairs (seed 003 Table 1), {} dependent pairs in all:",
            r.dependent_pairs
        );
        for p in r.pairs.iter().take(top) {
            let _ = writeln!(s, "  {:<10} {:<10} {}", p.first, p.second, pct(p.share));
        }
        let _ = writeln!(s, "\nhottest functions:");
        for (f, n) in r.functions.iter().take(top) {
            let _ = writeln!(
                s,
                "  {:>6} {}",
                pct(*n as f64 / r.instructions.max(1) as f64),
                f
            );
        }
    }
    if !r.fusion.is_empty() {
        let base = r
            .fusion
            .iter()
            .find(|f| f.name == "--")
            .map(|f| f.breakdown.cycles)
            .unwrap_or(0)
            .max(1);
        let _ = writeln!(s, "\nfusion alternatives (seed 003 Fig 5):");
        for f in &r.fusion {
            let _ = writeln!(s, "  {:<6} instructions saved {} ({}), code bytes saved {}, L1I misses {}, time gain {}", f.name, f.saved, pct(f.saved as f64 / r.instructions.max(1) as f64), f.bytes_saved, f.l1i.misses(), pct(1.0 - f.breakdown.cycles as f64 / base as f64));
        }
    }
    if !r.layouts.is_empty() {
        let _ = writeln!(s, "\nvirtual layouts (seed 000 §3), L1I:");
        for l in &r.layouts {
            let _ = write!(
                s,
                "  {:<18} misses {} ({})",
                l.name,
                l.l1i.misses(),
                pct(l.l1i.miss_ratio())
            );
            if let Some(b) = &l.breakdown {
                let _ = write!(
                    s,
                    ", CPI {:.2} iCPI {:.2} mCPI {:.2}",
                    b.cpi, b.icpi, b.mcpi
                );
            }
            if let Some(u) = &l.unused {
                let _ = write!(s, ", unused {}", pct(u.fraction()));
            }
            let _ = writeln!(s);
        }
    }
    for m in r
        .messages
        .iter()
        .filter(|m| m.contains("rror") || m.contains("signal"))
    {
        let _ = writeln!(s, "valgrind: {m}");
    }
    s
}

/// Runs `phyllo-lab analyze`.
pub fn main(a: AnalyzeArgs) -> Result<()> {
    crate::workload::check_name(&a.workload)?;
    let hier = hierarchies(&a)?;
    let w = workload(&a.workload, a.packets, a.size_kib, a.seed)?;
    eprintln!("probing and decoding {} ...", w.program.display());
    let mut p = session::prepare(w)?;
    eprintln!(
        "load bias {:#x}; {} static instructions decoded ({} libraries)",
        p.bias,
        p.map.len(),
        p.libraries.len()
    );
    let timing = TimingConfig {
        l2_latency: a.l2_latency,
        mem_latency: a.mem_latency,
        ..TimingConfig::default()
    };
    let mut setup = Setup {
        hierarchies: hier.clone(),
        instructions: true,
        ..Default::default()
    };
    for h in 0..hier.len() {
        for &w in &a.width {
            setup.timings.push((h, timing.with_width(w)));
        }
    }
    if a.fusion {
        setup.fusion = Some(FusionSetup::all(0, timing));
    }
    let t = session::analyze(&mut p, setup.clone(), a.whole_program)?;
    print!("{}", render(&t.report, a.top));
    println!(
        "\n{} records in {:.1} s under lackey ({:.2} M records/s end to end)",
        t.report.records,
        t.elapsed.as_secs_f64(),
        t.report.records as f64 / t.elapsed.as_secs_f64() / 1e6
    );
    if a.throughput_mib > 0 {
        let (n, secs) = session::replay_throughput(&mut p, setup, a.throughput_mib << 20)?;
        println!(
            "analyzer alone: {n} records replayed from memory in {secs:.2} s = {:.1} M records/s",
            n as f64 / secs.max(1e-9) / 1e6
        );
    }
    if !a.layout.is_empty() {
        let l1i = hier[0].l1i;
        let period = l1i.sets() * l1i.line as u64;
        let base = p.map.funcs().first().map(|f| f.start).unwrap_or(0);
        let mut layouts = Vec::new();
        for l in &a.layout {
            let kind: LayoutKind = l.parse().map_err(anyhow::Error::msg)?;
            layouts.push(Layout::compute(
                &kind,
                p.map.funcs(),
                &t.report.profile,
                period,
                a.packets as u64,
                base,
            ));
        }
        let setup = Setup {
            layouts: Some(LayoutSetup {
                l1i,
                layouts,
                timing: None,
            }),
            ..Default::default()
        };
        let t2 = session::analyze(&mut p, setup, a.whole_program)?;
        print!("{}", render(&t2.report, a.top));
    }
    Ok(())
}
