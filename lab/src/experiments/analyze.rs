//! `analyze`: the architecture analysis of protocol processing, seed 003 (Xie, Zhao & Bhuyan)
//! Figures 2-5 and Tables 1-2, with seed 000's CPI, iCPI and mCPI (Mosberger et al. §4.3).
//!
//! Both workloads of `phyllo-lab workload` run under valgrind lackey; the trace of the marked
//! region streams through phyllo-analyze in one pass per workload, simulating every cache
//! geometry of Figure 3, the timing model at every issue width and i-cache geometry (Figures
//! 2 and 4), the instruction mix and dependent pairs (Figure 2, Table 1) and the fusion
//! alternatives (Figure 5). The cachegrind-compatible mode is cross-checked against cachegrind
//! and the region's instruction count against callgrind.

use anyhow::Result;
use phyllo_analyze::analysis::{FusionSetup, LayoutSetup, Report, Setup};
use phyllo_analyze::cache::{CacheConfig, HierarchyConfig};
use phyllo_analyze::capture;
use phyllo_analyze::insn::Class;
use phyllo_analyze::layout::{Layout, LayoutKind};
use phyllo_analyze::session;
use phyllo_analyze::timing::{Breakdown, TimingConfig};

use crate::analyze_cmd::{pct, workload};
use crate::report::{Ctx, Experiment, Outcome, Plot, Section, Series, Table};

/// The analyzer experiment.
pub struct Analyze;

const SIZES_KB: [u64; 5] = [8, 16, 32, 64, 128];
const ASSOCS: [u32; 4] = [1, 2, 4, 8];
const LINES: [u32; 4] = [16, 32, 64, 128];
const WIDTHS: [u32; 4] = [1, 2, 4, 8];

fn cfg(size_kb: u64, assoc: u32, line: u32) -> CacheConfig {
    CacheConfig::new(size_kb << 10, assoc, line).expect("valid sweep geometry")
}

/// The hierarchies of the Figure 3 sweep: index 0 is seed 003's default (16 KB 4-way 32 B).
struct Sweep {
    hier: Vec<HierarchyConfig>,
    size: Vec<usize>,
    assoc: Vec<usize>,
    line: Vec<usize>,
}

fn sweep() -> Sweep {
    let base = HierarchyConfig::seed003();
    let mut hier = vec![base];
    let idx = |c: CacheConfig, hier: &mut Vec<HierarchyConfig>| {
        let h = base.with_l1i(c);
        match hier.iter().position(|x| *x == h) {
            Some(i) => i,
            None => {
                hier.push(h);
                hier.len() - 1
            }
        }
    };
    let size = SIZES_KB
        .iter()
        .map(|&s| idx(cfg(s, 4, 32), &mut hier))
        .collect();
    let assoc = ASSOCS
        .iter()
        .map(|&a| idx(cfg(16, a, 32), &mut hier))
        .collect();
    let line = LINES
        .iter()
        .map(|&l| idx(cfg(16, 4, l), &mut hier))
        .collect();
    Sweep {
        hier,
        size,
        assoc,
        line,
    }
}

fn setup(sw: &Sweep, fusion: bool) -> Setup {
    let t = TimingConfig::default();
    let mut timings: Vec<(usize, TimingConfig)> =
        WIDTHS.iter().map(|&w| (0, t.with_width(w))).collect();
    for h in 1..sw.hier.len() {
        timings.push((h, t));
    }
    Setup {
        hierarchies: sw.hier.clone(),
        timings,
        instructions: true,
        fusion: fusion.then(|| FusionSetup::all(0, t)),
        layouts: None,
        unused: false,
        function_misses: false,
    }
}

fn breakdown(r: &Report, h: usize, width: u32) -> Breakdown {
    r.timings
        .iter()
        .find(|(hh, t, _)| *hh == h && t.issue_width == width)
        .map(|x| x.2)
        .unwrap_or_default()
}

fn s(v: impl ToString) -> String {
    v.to_string()
}

fn headers(h: &[&str]) -> Vec<String> {
    h.iter().map(|x| x.to_string()).collect()
}

impl Experiment for Analyze {
    fn name(&self) -> &'static str {
        "analyze"
    }

    fn title(&self) -> &'static str {
        "Architectural analysis of protocol processing: mix, ILP, i-cache, time breakdown, pairs, fusion"
    }

    fn seed_ref(&self) -> Option<&'static str> {
        Some("seed 003, Figures 2-5 and Tables 1-2; seed 000 §4.3 (CPI, iCPI, mCPI)")
    }

    fn run(&self, ctx: &Ctx) -> Result<Outcome> {
        if !capture::have_valgrind() {
            return Ok(Outcome::Skipped(
                "valgrind not found: apt-get install valgrind".into(),
            ));
        }
        let (packets, kib) = if ctx.quick { (400, 4) } else { (10_000, 64) };
        let sw = sweep();
        let mut sec = Section::default();

        // Protocol (LAN) and contrast (compute) passes.
        let mut lan_p = session::prepare(workload("lan", packets, kib, 1)?)?;
        let lan_t = session::analyze(&mut lan_p, setup(&sw, true), false)?;
        let lan = &lan_t.report;
        let mut cmp_p = session::prepare(workload("compute", packets, kib, 1)?)?;
        let cmp = session::analyze(&mut cmp_p, setup(&sw, false), false)?.report;

        sec.text.push(format!(
            "Workloads: **LAN** = spec `{}` over the in-memory link, {packets} packets of the seeded LAN size \
             distribution (seed 003 §2.2: ≈52 % under 200 B), send and receive sides; **compute** = deflate \
             round trip of {kib} KiB plus a sort (standing in for SPECint). Only the region between the \
             markers is counted: {} and {} instructions (trace length). Traced with valgrind lackey, streamed \
             through phyllo-analyze ({} + {} records; {:.0} s for the LAN pass including valgrind). Default \
             machine as seed 003 §2.1: 16 KB 4-way 32 B L1I and L1D (LRU, write-back, write-allocate), \
             256 KB 4-way 64 B L2, issue width 4; timing model penalties L2 6 cycles, memory 60 cycles.",
            crate::workload::SPEC,
            lan.instructions,
            cmp.instructions,
            lan.records,
            cmp.records,
            lan_t.elapsed.as_secs_f64()
        ));

        // Figure 2 (top): instruction mix.
        sec.tables.push(Table {
            title: "Seed 003 Figure 2 (top): dynamic instruction mix".into(),
            headers: headers(&["class", "LAN protocol", "compute (SPECint stand-in)"]),
            rows: Class::ALL
                .iter()
                .filter(|&&c| c != Class::Unknown || lan.mix_share(c) > 0.0)
                .map(|&c| vec![s(c.name()), pct(lan.mix_share(c)), pct(cmp.mix_share(c))])
                .collect(),
        });
        sec.text.push(
            "Classes (x86-64 decoded with iced-x86): an instruction with a memory source counts as a load, one \
             that writes memory (read-modify-write included) as a store, compares and moves as integer ALU; \
             SIMD/x87/system/NOP as other."
                .into(),
        );
        sec.text.push(
            "Repeated string instructions (`rep stosb`, `rep movsb`, `repe cmpsb`, ...) count as one instruction per \
             execution in the trace length, the mix, the dependent pairs, the i-cache and the timing models' CPI, \
             although lackey (like callgrind's Ir) reports one instruction fetch per iteration; every iteration's \
             data accesses still go to the data caches, the timing models charge the iterations as CPU cycles (one \
             per 8 bytes for movs/stos, one per element for cmps/scas), and the table below counts them."
                .into(),
        );
        let rep_row = |name: &str, r: &Report| {
            vec![
                s(name),
                s(r.rep.executions),
                pct(r.rep.executions as f64 / r.instructions.max(1) as f64),
                s(r.rep.iterations),
                s(r.rep.bytes),
                r.rep
                    .ops
                    .iter()
                    .take(3)
                    .map(|o| format!("{} ×{} ({} B)", o.name, o.executions, o.bytes))
                    .collect::<Vec<_>>()
                    .join(", "),
            ]
        };
        sec.tables.push(Table {
            title:
                "Repeated string instructions: executions (one instruction each), iterations, bytes"
                    .into(),
            headers: headers(&[
                "workload",
                "executions",
                "of instructions",
                "iterations",
                "bytes",
                "most bytes",
            ]),
            rows: vec![rep_row("LAN protocol", lan), rep_row("compute", &cmp)],
        });

        // Figure 2 (bottom): ILP.
        let norm = breakdown(&cmp, 0, 1).cycles.max(1) as f64;
        let norm_l = breakdown(lan, 0, 1).cycles.max(1) as f64;
        let mut rows = Vec::new();
        let mut ilp = vec![
            Series {
                name: "LAN".into(),
                ..Default::default()
            },
            Series {
                name: "compute".into(),
                ..Default::default()
            },
        ];
        for &w in &WIDTHS {
            let (l, c) = (breakdown(lan, 0, w), breakdown(&cmp, 0, w));
            ilp[0].points.push((w as f64, l.cycles as f64 / norm_l));
            ilp[1].points.push((w as f64, c.cycles as f64 / norm));
            rows.push(vec![
                s(w),
                format!("{:.3}", l.cycles as f64 / norm_l),
                format!(
                    "{} / {} / {}",
                    pct(l.cpu as f64 / l.cycles.max(1) as f64),
                    pct(l.data as f64 / l.cycles.max(1) as f64),
                    pct(l.instr as f64 / l.cycles.max(1) as f64)
                ),
                cpis(&l),
                format!("{:.3}", c.cycles as f64 / norm),
                cpis(&c),
            ]);
        }
        sec.tables.push(Table {
            title: "Seed 003 Figure 2 (bottom): issue width (ILP) sweep in the timing model; time normalised to width 1 of the same workload".into(),
            headers: headers(&["issue width", "LAN time", "LAN CPU / data / instr", "LAN CPI / iCPI / mCPI", "compute time", "compute CPI / iCPI / mCPI"]),
            rows,
        });
        sec.plots.push(Plot {
            id: "analyze_fig2_ilp".into(),
            title: "Seed 003 Fig 2: execution time vs issue width".into(),
            x_label: "issue width".into(),
            y_label: "time (normalised to width 1)".into(),
            log_x: true,
            log_y: false,
            series: ilp,
            caption: "Lower is better. Each workload is normalised to its own time at width 1, so \
                      how far a line drops is what wider issue buys that workload; the flatter \
                      line has less instruction-level parallelism to exploit (seed 003 compares \
                      protocol processing, `LAN`, with SPECint, `compute`, this way)."
                .into(),
        });

        // Figure 3: L1I miss ratio sweeps.
        let few = |xs: &[f64], unit: &str| {
            format!(
                "Only {} geometries were simulated ({} {unit}): the plot shows the direction of \
                 the trend, not the shape of a curve; exact values are in the table.",
                xs.len(),
                xs.iter()
                    .map(|x| x.to_string())
                    .collect::<Vec<_>>()
                    .join(", ")
            )
        };
        for (name, idxs, xs, unit, claim) in [
            (
                "size",
                &sw.size,
                SIZES_KB.iter().map(|&x| x as f64).collect::<Vec<_>>(),
                "KB (4-way, 32 B)",
                "Lower is better. The gap between `LAN` and `compute` at a size is how much \
                 harder the protocol code is on the L1I than the compute stand-in; where a line \
                 flattens, that workload's hot code fits in the cache.",
            ),
            (
                "associativity",
                &sw.assoc,
                ASSOCS.iter().map(|&x| x as f64).collect(),
                "ways (16 KB, 32 B)",
                "Lower is better. What a line loses from direct-mapped to more ways is conflict \
                 misses; what is left at 8 ways is capacity and cold misses. Compare `LAN` with \
                 `compute` at each point.",
            ),
            (
                "line",
                &sw.line,
                LINES.iter().map(|&x| x as f64).collect(),
                "B (16 KB, 4-way)",
                "Lower is better. A longer line brings in more sequential code per miss, so a \
                 line that falls shows spatial locality in the instruction stream; compare \
                 `LAN` with `compute`.",
            ),
        ] {
            let mut lan_s = Series {
                name: "LAN".into(),
                ..Default::default()
            };
            let mut cmp_s = Series {
                name: "compute".into(),
                ..Default::default()
            };
            let mut rows = Vec::new();
            for (k, &h) in idxs.iter().enumerate() {
                let (li, ci) = (lan.caches[h].1.miss_ratio(), cmp.caches[h].1.miss_ratio());
                lan_s.points.push((xs[k], 100.0 * li));
                cmp_s.points.push((xs[k], 100.0 * ci));
                rows.push(vec![
                    format!("{} {unit}", xs[k]),
                    s(sw.hier[h].l1i),
                    pct(li),
                    pct(ci),
                ]);
            }
            sec.tables.push(Table {
                title: format!("Seed 003 Figure 3: L1I miss ratio vs {name}"),
                headers: headers(&[name, "L1I", "LAN", "compute"]),
                rows,
            });
            sec.plots.push(Plot {
                id: format!("analyze_fig3_{}", &name[..4]),
                title: format!("Seed 003 Fig 3: L1I miss ratio vs {name}"),
                x_label: format!("{name} ({unit})"),
                y_label: "L1I miss ratio (%)".into(),
                log_x: true,
                log_y: false,
                series: vec![lan_s, cmp_s],
                caption: if name == "line" {
                    // Four points, at 16-128 B: too few for a curve; say so.
                    format!("{claim} {}", few(&xs, "B"))
                } else {
                    claim.into()
                },
            });
        }

        // Figure 4: time breakdown across i-cache geometries (width 4).
        let base_c = breakdown(lan, 0, 4).cycles.max(1) as f64;
        let mut rows = Vec::new();
        let mut f4 = ["CPU", "data access", "instruction access"].map(|n| Series {
            name: n.into(),
            ..Default::default()
        });
        for (k, &h) in sw.size.iter().chain(&sw.assoc).chain(&sw.line).enumerate() {
            let b = breakdown(lan, h, 4);
            if k < sw.size.len() {
                let x = SIZES_KB[k] as f64;
                f4[0].points.push((x, b.cpu as f64 / base_c));
                f4[1].points.push((x, b.data as f64 / base_c));
                f4[2].points.push((x, b.instr as f64 / base_c));
            }
            rows.push(vec![
                s(sw.hier[h].l1i),
                format!("{:.3}", b.cycles as f64 / base_c),
                format!("{:.3}", b.cpu as f64 / base_c),
                format!("{:.3}", b.data as f64 / base_c),
                format!("{:.3}", b.instr as f64 / base_c),
                cpis(&b),
            ]);
        }
        sec.tables.push(Table {
            title: "Seed 003 Figure 4: LAN execution time by L1I geometry, split into CPU, data-access and instruction-access time (normalised to the 16 KB 4-way 32 B baseline; overlap counted as data access)".into(),
            headers: headers(&["L1I", "total", "CPU", "data access", "instruction access", "CPI / iCPI / mCPI"]),
            rows,
        });
        sec.plots.push(Plot {
            id: "analyze_fig4_size".into(),
            title: "Seed 003 Fig 4: LAN time breakdown vs L1I size".into(),
            x_label: "L1I size (KB, 4-way, 32 B)".into(),
            y_label: "time (normalised to 16 KB)".into(),
            log_x: true,
            log_y: false,
            series: f4.to_vec(),
            caption: "Each line is one part of the LAN execution time at width 4, normalised to \
                      the total at 16 KB (where the three add up to 1). A bigger L1I can only \
                      shrink `instruction access`; `CPU` and `data access` should stay nearly \
                      flat, so the drop of the instruction-access line is all a bigger i-cache \
                      buys."
                .into(),
        });

        // Table 1: dependent pairs.
        let top: Vec<Vec<String>> = lan
            .pairs
            .iter()
            .take(10)
            .map(|p| vec![p.first.clone(), p.second.clone(), pct(p.share)])
            .collect();
        sec.tables.push(Table { title: format!("Seed 003 Table 1: most frequent dependent pairs, LAN ({} of {} instructions start a dependent pair)", lan.dependent_pairs, lan.instructions), headers: headers(&["1st instruction", "2nd instruction", "occurrence"]), rows: top });
        sec.text.push(
            "A repeated string instruction is one element of a pair per execution (its iterations do not pair with \
             themselves); occurrence is the share of all instructions so counted."
                .into(),
        );

        // Figure 5: fusion alternatives.
        let base_f = lan
            .fusion
            .iter()
            .find(|f| f.name == "--")
            .map(|f| f.breakdown)
            .unwrap_or_default();
        let gain = |a: u64, b: u64| {
            if a == 0 {
                0.0
            } else {
                1.0 - b as f64 / a as f64
            }
        };
        // The alternatives have no order of their own: the plot sorts them by the time
        // improvement (rank 1 = the largest), and the table gives each one's rank.
        let improvement: Vec<f64> = lan
            .fusion
            .iter()
            .map(|f| 100.0 * gain(base_f.cycles, f.breakdown.cycles))
            .collect();
        let mut order: Vec<usize> = (0..improvement.len()).collect();
        order.sort_by(|&a, &b| improvement[b].total_cmp(&improvement[a]));
        let mut rank = vec![0; order.len()];
        for (r, &k) in order.iter().enumerate() {
            rank[k] = r + 1;
        }
        // The sixteen seed-003 alternatives as one line, the x86 rules as marks of their own.
        let x86 = ["intel", "zen"];
        let mut f5 = vec![Series {
            name: "seed 003 alternatives".into(),
            ..Default::default()
        }];
        f5.extend(x86.map(|n| Series {
            name: n.into(),
            ..Default::default()
        }));
        for &k in &order {
            let line = x86
                .iter()
                .position(|n| *n == lan.fusion[k].name)
                .map_or(0, |i| i + 1);
            f5[line].points.push((rank[k] as f64, improvement[k]));
        }
        let mut rows = Vec::new();
        for (k, f) in lan.fusion.iter().enumerate() {
            let b = f.breakdown;
            rows.push(vec![
                f.name.clone(),
                s(rank[k]),
                pct(f.saved as f64 / lan.instructions.max(1) as f64),
                s(f.bytes_saved),
                pct(f.l1i.miss_ratio()),
                pct(gain(base_f.cycles, b.cycles)),
                pct(gain(base_f.cpu, b.cpu)),
                pct(gain(base_f.data, b.data)),
                pct(gain(base_f.instr, b.instr)),
            ]);
        }
        sec.text.push(
            "Fusion model (seed 003 §4.2-4.3 on x86): type 1 = integer/logic op with a register destination + a Jcc \
             reading its flags; type 2 = CMP/TEST + Jcc; R-type = register source, I-type = immediate; no memory \
             operands. `intel` = Sandy Bridge-Skylake macro-fusion (CMP/TEST/ADD/SUB/AND/INC/DEC + Jcc with their \
             condition-code restrictions, never memory+immediate), `zen` = AMD Zen 1/2 (CMP/TEST + Jcc). A fused pair \
             is one instruction as long as the longer of the two; every later code address shifts down by the bytes \
             saved, and the L1I is re-simulated on the compacted addresses (so conflict patterns change: a compacted \
             layout can miss more or less than the original). Timing of the fused ISA shares the baseline's data \
             caches and L2."
                .into(),
        );
        sec.tables.push(Table {
            title: "Seed 003 Table 2 / Figure 5: fusion alternatives on the LAN workload (first letter: type 1 compute+branch, second: type 2 compare+branch; i = I-type, r = R-type, b = both; intel/zen = x86 macro-fusion rules); i-cache re-simulated with the code compacted".into(),
            headers: headers(&["alternative", "rank (plot x)", "instructions saved", "code bytes saved", "L1I miss ratio", "time improvement", "CPU", "data access", "instr access"]),
            rows,
        });
        sec.plots.push(Plot {
            id: "analyze_fig5_fusion".into(),
            title: "Seed 003 Fig 5: improvement of each fusion alternative, sorted (x = rank in the table)"
                .into(),
            x_label: "alternatives, sorted by time improvement (rank in the table)".into(),
            y_label: "execution time improvement (%)".into(),
            log_x: false,
            log_y: false,
            series: f5,
            caption: "The alternatives have no order of their own, so they are sorted by the \
                      plotted value, best first, and the line falls monotonically; find each one \
                      by its `rank (plot x)` in the table. `--` (no fusion) is 0 by definition, \
                      so points below 0 are fusions that made the LAN workload slower (compacted \
                      code can miss more in the L1I); `intel` and `zen` mark where x86 \
                      macro-fusion falls among seed 003's alternatives."
                .into(),
        });

        // Virtual layouts (seed 000 §3), full mode only (a second traced run).
        if !ctx.quick {
            let l1i = sw.hier[0].l1i;
            let period = l1i.sets() * l1i.line as u64;
            let base = lan_p.map.funcs().first().map(|f| f.start).unwrap_or(0);
            let layouts = [
                LayoutKind::Original,
                LayoutKind::InvocationOrder,
                LayoutKind::Bipartite,
                LayoutKind::Bad,
            ]
            .iter()
            .map(|k| {
                Layout::compute(
                    k,
                    lan_p.map.funcs(),
                    &lan.profile,
                    period,
                    packets as u64,
                    base,
                )
            })
            .collect();
            let r = session::analyze(
                &mut lan_p,
                Setup {
                    layouts: Some(LayoutSetup {
                        l1i,
                        layouts,
                        timing: None,
                    }),
                    ..Default::default()
                },
                false,
            )?
            .report;
            sec.tables.push(Table {
                title: "Seed 000 §3: LAN L1I (16 KB 4-way 32 B) under virtual code layouts computed from the trace (no relinking)".into(),
                headers: headers(&["layout", "L1I misses", "miss ratio"]),
                rows: r.layouts.iter().map(|l| vec![l.name.clone(), s(l.l1i.misses()), pct(l.l1i.miss_ratio())]).collect(),
            });
        }

        // Cross-checks against cachegrind and callgrind (small compute run, whole program).
        let small = workload("compute", packets, 2, 1)?;
        let geoms = HierarchyConfig::cachegrind_crosscheck();
        let mut sp = session::prepare(small.clone())?;
        let ours = session::analyze(
            &mut sp,
            Setup {
                hierarchies: geoms.to_vec(),
                ..Default::default()
            },
            true,
        )?
        .report;
        let rel = |a: u64, b: u64| (a as f64 - b as f64).abs() / b.max(1) as f64;
        let mut max_rel: f64 = 0.0;
        let mut rows = Vec::new();
        for (k, h) in geoms.iter().enumerate() {
            let cg = capture::cachegrind(&small, h)?;
            let (_, i, d, _) = ours.caches[k];
            let (ci, cd) = (cg.get("I1mr"), cg.get("D1mr") + cg.get("D1mw"));
            max_rel = max_rel.max(rel(i.misses(), ci)).max(rel(d.misses(), cd));
            rows.push(vec![
                s(h),
                s(i.misses()),
                s(ci),
                pct(rel(i.misses(), ci)),
                s(d.misses()),
                s(cd),
                pct(rel(d.misses(), cd)),
            ]);
        }
        // callgrind's Ir counts every iteration of a repeated string instruction, as lackey's
        // I records do: compare with those, not with the folded trace length.
        let region_r = session::analyze(&mut sp, Setup::default(), false)?.report;
        let region = region_r.instruction_records();
        let cl = capture::callgrind(&small, phyllo_analyze::roi::REGION_SYMBOL, None)?.get("Ir");
        sec.tables.push(Table {
            title: "Cross-check: phyllo's cachegrind-compatible mode vs cachegrind 3.19 (compute workload, 2 KiB, whole program, same --I1/--D1/--LL)".into(),
            headers: headers(&["hierarchy", "L1I misses", "cachegrind I1mr", "diff", "L1D misses", "cachegrind D1mr+D1mw", "diff"]),
            rows,
        });
        sec.text.push(
            "Cachegrind-compatible mode: an access straddling two lines is one access (a miss if either line misses), \
             an L1 miss looks up the LL with the same address and size, `M` (modify) records count as one data read \
             (checked: cachegrind's Dr equals lackey's L + M), no write-backs. The workload is a PIE that valgrind 3.19 \
             loads at a bias (0x108000 here); the analyzer measures it with a probe run under `--tool=none` that prints \
             the run-time marker addresses."
                .into(),
        );
        sec.text.push(format!(
            "Region instruction fetches {region} (trace length {} plus {} iteration fetches of {} repeated string \
             instructions, which callgrind counts as instructions too) vs callgrind `--toggle-collect={}` {cl} ({} \
             difference). Cachegrind cannot be restricted to the markers, so the cache cross-check counts the whole \
             program on both sides.",
            region_r.instructions,
            region_r.rep.records - region_r.rep.executions,
            region_r.rep.executions,
            phyllo_analyze::roi::REGION_SYMBOL,
            pct(rel(region, cl))
        ));

        // Throughput of the analyzer alone (replayed from memory).
        let (recs, secs) = session::replay_throughput(
            &mut lan_p,
            Setup {
                hierarchies: vec![HierarchyConfig::seed003()],
                timings: vec![(0, TimingConfig::default())],
                instructions: true,
                ..Default::default()
            },
            if ctx.quick { 64 << 20 } else { 256 << 20 },
        )?;
        let rps = recs as f64 / secs.max(1e-9);
        sec.text.push(format!(
            "Analyzer throughput: {recs} records of the LAN workload's trace replayed from memory in {secs:.2} s = \
             {:.1} M records/s (parse, one seed-003 hierarchy, timing model, mix and pairs; one thread). Under \
             valgrind the end-to-end rate is bounded by lackey itself: {:.2} M records/s for the LAN pass with the \
             whole sweep.",
            rps / 1e6,
            lan.records as f64 / lan_t.elapsed.as_secs_f64() / 1e6
        ));

        let top_share = lan.pairs.first().map(|p| p.share).unwrap_or(0.0);
        sec.figures
            .push(("analyze.cachegrind_max_rel_diff".into(), max_rel));
        sec.figures.push(("analyze.records_per_s".into(), rps));
        sec.figures.push((
            "analyze.protocol_l1i_miss_ratio_16k".into(),
            lan.caches[0].1.miss_ratio(),
        ));
        sec.figures
            .push(("analyze.top_pair_share".into(), top_share));
        sec.figures
            .push(("analyze.protocol_mcpi".into(), breakdown(lan, 0, 4).mcpi));
        sec.figures
            .push(("analyze.protocol_icpi".into(), breakdown(lan, 0, 4).icpi));
        Ok(Outcome::Done(sec))
    }
}

/// A breakdown's "CPI / iCPI / mCPI" cell.
fn cpis(b: &Breakdown) -> String {
    format!("{:.3} / {:.3} / {:.3}", b.cpi, b.icpi, b.mcpi)
}
