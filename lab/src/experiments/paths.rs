//! `paths`: seed 000's latency techniques (Mosberger et al.) on phyllo's two reference stacks
//! — outlining (OUT), cloning with a bipartite layout (CLO, and the deliberately bad BAD),
//! path-inlining (PIN) and all of them (ALL) against the standard dynamic stack (STD).
//!
//! - Instructions per round trip, counted by callgrind over `phyllo-lab paths trace` (measured,
//!   deterministic): a layout moves code, it does not change what runs, so CLO and BAD count
//!   as OUT and ALL as PIN.
//! - Table 2: round-trip time per version over memlink and UDP loopback, and Table 4's T_p
//!   (measured), each version in a process of its own: CLO and ALL in this binary relinked
//!   in the bipartite order, from a cache under the target directory ([`crate::relink`]).
//! - Tables 4 and 5 (modelled): trace length, CPI, iCPI and mCPI, i-cache misses and the
//!   fetched-but-never-executed share under the Alpha 21064's memory system and under this
//!   host's cache geometry, from lackey traces run through phyllo-analyze; CLO, BAD and ALL
//!   as virtual layouts of OUT's and PIN's traces; the i-cache misses by function, which
//!   explain where the modelled mCPI order departs from the seed's.

use crate::paths::{with_stack, OnStack, StackKind, Version};
use crate::paths_cmd::{direct_round_trip, ends, learn, workload, LinkArg};
use crate::report::{Ctx, Experiment, Outcome, Section, Table};
use anyhow::{Context, Result};
use phyllo::conn::BuildError;
use phyllo::{Config, Connection, LayerSet};
use phyllo_analyze::analysis::{FunctionMisses, LayoutSetup, Report, Setup};
use phyllo_analyze::cache::{HierarchyConfig, Unused};
use phyllo_analyze::capture;
use phyllo_analyze::image::Image;
use phyllo_analyze::layout::{Layout, LayoutKind};
use phyllo_analyze::session;
use phyllo_analyze::timing::{Breakdown, TimingConfig};

/// The experiment.
pub struct Paths;

/// A stack's bipartite function orders per code version (mangled names, for the linker).
type StackOrders = (StackKind, Vec<(Version, Vec<String>)>);

/// The versions whose code differs (the others are layouts of these).
const CODE: [Version; 3] = [Version::Std, Version::Out, Version::Pin];

impl Experiment for Paths {
    fn name(&self) -> &'static str {
        "paths"
    }

    fn title(&self) -> &'static str {
        "Latency techniques: outlining, bipartite layout, path-inlining (seed 000)"
    }

    fn seed_ref(&self) -> Option<&'static str> {
        Some("seed 000, Tables 2, 4, 5")
    }

    fn run(&self, ctx: &Ctx) -> Result<Outcome> {
        let quick = ctx.quick;
        let mut sec = Section {
            text: vec![
                "The stacks: short `tcp:ip:eth` (three big layers: `tcp` holds the connection's \
                 ports, window, retransmission and a transport checksum) and tall \
                 `xrpctest:mselect:vchan:chan:bid:blast:vnet:eth` (eight small layers, the \
                 x-kernel RPC stack's shape). STD runs the dynamic stack (a virtual call per \
                 layer and phase) without hints; OUT the same with rare paths marked cold; PIN \
                 the static stack, which the compiler inlines; CLO, BAD and ALL are layouts of \
                 OUT's and PIN's code. Both ends of a round trip run the version measured (the \
                 seed optimised only the RPC client)."
                    .into(),
            ],
            tables: vec![],
            plots: vec![],
            figures: vec![],
        };
        let traced = trace_all(quick, &mut sec)?;
        if let Some((rounds, t)) = &traced {
            instructions(*rounds, t, &mut sec)?;
        }
        let orders: Vec<StackOrders> = traced
            .iter()
            .flat_map(|(_, t)| t.iter().map(|(k, t)| (*k, t.orders.clone())))
            .collect();
        match super::phyllo_exe() {
            Some(exe) => {
                let bins = binaries(&exe, &orders, &mut sec);
                round_trips(quick, &bins, &mut sec)?;
                processing_times(quick, &bins, &mut sec)?;
            }
            None => sec.text.push(
                "Table 2 and Table 4's T_p: SKIPPED — each version runs in a process of its \
                 own, which needs the phyllo-lab binary."
                    .into(),
            ),
        }
        if let Some((rounds, t)) = &traced {
            modelled(*rounds, t, &mut sec);
        }
        classifier(quick, &mut sec)?;
        Ok(Outcome::Done(sec))
    }
}

/// Instructions per round trip of each code version: the trace length lackey gave (a rep
/// string instruction once per iteration, as callgrind counts), cross-checked against
/// callgrind's count of the region for the tall stack's STD.
fn instructions(rounds: usize, traced: &[(StackKind, Traced)], sec: &mut Section) -> Result<()> {
    let mut table = Table {
        title: "Instructions per round trip (both ends; valgrind, measured)".into(),
        headers: [
            "stack",
            "STD",
            "OUT (= CLO, BAD)",
            "PIN (= ALL)",
            "ALL / STD",
        ]
        .map(String::from)
        .to_vec(),
        rows: vec![],
    };
    for (kind, t) in traced {
        let per = |v: Version| {
            t.reports
                .iter()
                .find(|(x, _)| *x == v)
                .map_or(0.0, |(_, r)| r.instruction_records() as f64 / rounds as f64)
        };
        let (std, out, pin) = (per(Version::Std), per(Version::Out), per(Version::Pin));
        let ratio = pin / std.max(1.0);
        sec.figures.push((
            match kind {
                StackKind::Short => "paths.short_all_vs_std_instructions",
                StackKind::Tall => "paths.tall_all_vs_std_instructions",
            }
            .into(),
            ratio,
        ));
        table.rows.push(vec![
            kind.name().into(),
            format!("{std:.0}"),
            format!("{out:.0}"),
            format!("{pin:.0}"),
            format!("{ratio:.3}"),
        ]);
        if *kind == StackKind::Tall {
            if let Some(exe) = super::phyllo_exe() {
                let w = workload(&exe, "trace", *kind, Version::Std, rounds);
                let ir =
                    capture::callgrind(&w, phyllo_analyze::roi::REGION_SYMBOL, None)?.get("Ir");
                sec.text.push(format!(
                    "Instruction counts: the lackey traces' lengths; callgrind counts the tall \
                     stack's STD region at {:.0} per round trip against lackey's {std:.0}.",
                    ir as f64 / rounds as f64
                ));
            }
        }
    }
    sec.tables.push(table);
    Ok(())
}

/// Seed Table 2: round-trip time per version (measured), both stacks, memlink and UDP, each
/// version in a process of its own: STD, OUT and PIN in this binary, CLO and ALL in its
/// relinked copies ([`binaries`]).
fn round_trips(quick: bool, bins: &Binaries, sec: &mut Section) -> Result<()> {
    let runs = if quick { 3 } else { 11 };
    for link in [LinkArg::Mem, LinkArg::Udp] {
        let udp = matches!(link, LinkArg::Udp);
        let rounds = match (quick, udp) {
            (true, false) => 3000,
            (true, true) => 1000,
            (false, false) => 30_000,
            (false, true) => 10_000,
        };
        let means = bins.measure(runs, |bin, kind, v| rtt_of(bin, kind, v, link, rounds))?;
        sec.tables.push(Table {
            title: format!(
                "Seed Table 2: round-trip time over {} (measured; median (min–max) of {runs} \
                 runs' mean round trips, {rounds} round trips a run, each version in its own \
                 process, runs of the versions interleaved; CLO and ALL are this binary \
                 relinked in the bipartite order)",
                if udp { "UDP loopback" } else { "memlink" }
            ),
            headers: version_headers("short, ns", "tall, ns"),
            rows: bins.rows(&means),
        });
    }
    Ok(())
}

/// The classifier's own cost and its effect on round trips (ALL's code).
struct ClassifierCost {
    kind: StackKind,
    packets: usize,
    rounds: usize,
    runs: usize,
}

/// What [`ClassifierCost`] measured.
struct Cost {
    /// ns per classification.
    ns: f64,
    /// Round trip without classification, mean ns of each run.
    plain: Vec<f64>,
    /// The same with it.
    classified: Vec<f64>,
    /// Header bytes the key's words span.
    key_bytes: usize,
}

impl OnStack for ClassifierCost {
    type Out = Result<Cost>;
    fn run<S: LayerSet + Send + 'static, M: FnMut(Config) -> Result<Connection<S>, BuildError>>(
        self,
        mut make: M,
    ) -> Result<Cost> {
        let (mut a, mut b) = ends(&mut make)?;
        let l = learn(self.kind, &mut a, &mut b)?;
        let inputs = [&l.samples[0][..], &l.samples[1][..]];
        let t0 = std::time::Instant::now();
        let mut hits = 0usize;
        for i in 0..self.packets {
            hits += usize::from(l.at_b.matches(std::hint::black_box(inputs[i & 1])));
        }
        let ns = t0.elapsed().as_nanos() as f64 / self.packets.max(1) as f64;
        anyhow::ensure!(hits == self.packets.div_ceil(2), "the classifier misrouted");
        let epoch = std::time::Instant::now();
        let (mut plain, mut classified) = (Vec::new(), Vec::new());
        let mut general = 0;
        let data = [0x5au8];
        for _ in 0..self.runs {
            for with in [false, true] {
                let c = with.then_some((&l.at_b, &l.at_a));
                let t = std::time::Instant::now();
                for _ in 0..self.rounds {
                    let now = phyllo::Time(epoch.elapsed().as_nanos() as u64);
                    direct_round_trip(&mut a, &mut b, now, &data, c, &mut general)?;
                }
                let per = t.elapsed().as_nanos() as f64 / self.rounds.max(1) as f64;
                if with {
                    classified.push(per);
                } else {
                    plain.push(per);
                }
            }
        }
        anyhow::ensure!(
            general == 0,
            "{general} datagrams of the flow were not matched"
        );
        Ok(Cost {
            ns,
            plain,
            classified,
            key_bytes: l.at_b.key_bytes(),
        })
    }
}

/// The classifier: instructions (callgrind) and time per datagram, and round trips with and
/// without it in front of both ends.
fn classifier(quick: bool, sec: &mut Section) -> Result<()> {
    let (packets, rounds, runs) = if quick {
        (1_000_000, 3000, 3)
    } else {
        (10_000_000, 30_000, 11)
    };
    let mut table = Table {
        title: "The path classifier (ALL's code): its own cost per datagram, and round trips \
                over a direct hand-off with and without it at both ends (measured)"
            .into(),
        headers: [
            "stack",
            "key bytes compared",
            "instructions per datagram",
            "ns per datagram",
            "round trip without, ns",
            "with, ns",
            "Δ per round trip (2 datagrams), ns",
        ]
        .map(String::from)
        .to_vec(),
        rows: vec![],
    };
    let exe = super::phyllo_exe().filter(|_| capture::have_valgrind());
    for kind in StackKind::BOTH {
        let cost = with_stack(
            kind,
            Version::All,
            ClassifierCost {
                kind,
                packets,
                rounds,
                runs,
            },
        )?;
        let insns = match &exe {
            Some(exe) => {
                let n = if quick { 20_000 } else { 200_000 };
                let w = workload(exe, "classify", kind, Version::All, n);
                let ir =
                    capture::callgrind(&w, phyllo_analyze::roi::REGION_SYMBOL, None)?.get("Ir");
                format!("{:.1}", ir as f64 / n as f64)
            }
            None => "— (valgrind missing)".into(),
        };
        let (ns, p, w) = (
            cost.ns,
            crate::stats::Summary::of(&cost.plain).median,
            crate::stats::Summary::of(&cost.classified).median,
        );
        if kind == StackKind::Tall {
            sec.figures
                .push(("paths.classifier_ns_per_packet".into(), ns));
        }
        table.rows.push(vec![
            kind.name().into(),
            cost.key_bytes.to_string(),
            insns,
            format!("{ns:.2}"),
            format!("{p:.0}"),
            format!("{w:.0}"),
            format!("{:+.0}", w - p),
        ]);
    }
    sec.tables.push(table);
    Ok(())
}

/// A memory model of Tables 4 and 5.
struct Model {
    name: String,
    hier: HierarchyConfig,
    timing: TimingConfig,
}

/// The Alpha 21064 of the seed, and this host's cache geometry with the analyzer's default
/// timing (4-wide, L1 1, L2 6, memory 60 cycles).
fn models() -> [Model; 2] {
    let (host, how) = HierarchyConfig::host();
    [
        Model {
            name: "Alpha 21064 (8 KB direct-mapped L1I, 32 B lines; 2 MB b-cache; 2/10/48 \
                   cycles; single issue)"
                .into(),
            hier: HierarchyConfig::alpha21064(),
            timing: TimingConfig::alpha21064(),
        },
        Model {
            name: format!("this host's geometry ({how}; 4-wide, 1/6/60 cycles)"),
            hier: host,
            timing: TimingConfig::default(),
        },
    ]
}

/// One row of Table 4: a version under a model.
#[derive(Clone, Debug)]
struct Row {
    version: String,
    b: Breakdown,
    l1i_misses: u64,
    unused: Option<Unused>,
    /// The L1I misses per function, most first.
    functions: Vec<FunctionMisses>,
}

/// What the traces of one stack gave: per model, the rows; per code version, its report
/// under the first pass; OUT's and PIN's functions in the bipartite order (mangled names,
/// for the linker: CLO's and ALL's relinked binaries).
struct Traced {
    rows: Vec<Vec<Row>>,
    reports: Vec<(Version, Report)>,
    orders: Vec<(Version, Vec<String>)>,
    /// Per code version: the functions its trace runs that the bipartite layout takes for
    /// library functions (entered more than once per path invocation), and all it runs.
    split: Vec<(Version, usize, usize)>,
}

/// Trace each code version of `kind` under lackey and run Tables 4 and 5's models: the
/// linker's layout in one pass (both models), then OUT's and PIN's code under the bipartite,
/// bad and linear (invocation order) layouts, per model.
fn trace_stack(exe: &std::path::Path, kind: StackKind, rounds: usize) -> Result<Traced> {
    let ms = models();
    let mut rows: Vec<Vec<Row>> = vec![Vec::new(); ms.len()];
    let mut reports = Vec::new();
    let mut orders = Vec::new();
    let mut split = Vec::new();
    let image = Image::load(exe).context("reading the phyllo-lab binary's symbols")?;
    // Both ends run in the traced process: each path runs twice per round trip.
    let per = crate::relink::path_invocations(rounds);
    for v in CODE {
        let mut p = session::prepare(workload(exe, "trace", kind, v, rounds))?;
        let setup = Setup {
            hierarchies: ms.iter().map(|m| m.hier).collect(),
            timings: ms.iter().enumerate().map(|(i, m)| (i, m.timing)).collect(),
            instructions: true,
            unused: true,
            function_misses: true,
            ..Setup::default()
        };
        let r = session::analyze(&mut p, setup, false)?.report;
        for (k, _) in ms.iter().enumerate() {
            let b = r
                .timings
                .iter()
                .find(|t| t.0 == k)
                .map(|t| t.2)
                .unwrap_or_default();
            rows[k].push(Row {
                version: v.name().into(),
                b,
                l1i_misses: r.caches.get(k).map_or(0, |c| c.1.misses()),
                unused: r.unused.get(k).copied(),
                functions: r.function_misses.get(k).cloned().unwrap_or_default(),
            });
        }
        if v != Version::Std {
            let names = crate::relink::order_of(
                &image,
                &p,
                &r.profile,
                crate::relink::Order::Bipartite,
                per,
            )?;
            orders.push((v, names));
            // The layouts of this code: CLO/ALL (bipartite), BAD (OUT's only) and a linear
            // allocation in invocation order (the seed's advice when the path fits the cache).
            let kinds: Vec<(String, LayoutKind)> = match v {
                Version::Out => vec![
                    ("CLO".into(), LayoutKind::Bipartite),
                    ("BAD".into(), LayoutKind::Bad),
                    ("OUT, linear".into(), LayoutKind::InvocationOrder),
                ],
                _ => vec![
                    ("ALL".into(), LayoutKind::Bipartite),
                    ("PIN, linear".into(), LayoutKind::InvocationOrder),
                ],
            };
            let base = p.map.funcs().first().map_or(0, |f| f.start);
            for (k, m) in ms.iter().enumerate() {
                let period = m.hier.l1i.sets() * u64::from(m.hier.l1i.line);
                let layouts = kinds
                    .iter()
                    .map(|(_, lk)| {
                        Layout::compute(lk, p.map.funcs(), &r.profile, period, per, base)
                    })
                    .collect();
                let lr = session::analyze(
                    &mut p,
                    Setup {
                        layouts: Some(LayoutSetup {
                            l1i: m.hier.l1i,
                            layouts,
                            timing: Some((m.hier, m.timing)),
                        }),
                        unused: true,
                        function_misses: true,
                        ..Setup::default()
                    },
                    false,
                )?
                .report;
                for ((name, _), res) in kinds.iter().zip(&lr.layouts) {
                    rows[k].push(Row {
                        version: name.clone(),
                        b: res.breakdown.unwrap_or_default(),
                        l1i_misses: res.l1i.misses(),
                        unused: res.unused,
                        functions: res.function_misses.clone(),
                    });
                }
            }
        }
        let library = r
            .profile
            .order
            .iter()
            .filter(|f| r.profile.calls.get(f).copied().unwrap_or(0) > per)
            .count();
        split.push((v, library, r.profile.order.len()));
        reports.push((v, r));
    }
    Ok(Traced {
        rows,
        reports,
        orders,
        split,
    })
}

/// The lackey traces of every code version of both stacks (`None`, and a note in the
/// section, when valgrind or the phyllo binary is missing), and the round trips each holds.
/// Round trips per trace, and each stack's traces.
type AllTraced = (usize, Vec<(StackKind, Traced)>);

fn trace_all(quick: bool, sec: &mut Section) -> Result<Option<AllTraced>> {
    let Some(exe) = super::phyllo_exe().filter(|_| capture::have_valgrind()) else {
        sec.text.push(
            "Instruction counts and Tables 4 and 5: SKIPPED — they need valgrind (apt-get \
             install valgrind) and the phyllo binary."
                .into(),
        );
        return Ok(None);
    };
    let rounds = if quick { 200 } else { 2000 };
    let mut all = Vec::new();
    for kind in StackKind::BOTH {
        let t =
            trace_stack(&exe, kind, rounds).with_context(|| format!("tracing {}", kind.spec()))?;
        all.push((kind, t));
    }
    Ok(Some((rounds, all)))
}

/// Seed Tables 4 and 5, modelled, from the traces.
fn modelled(rounds: usize, traced: &[(StackKind, Traced)], sec: &mut Section) {
    let ms = models();
    let order = [
        "BAD",
        "STD",
        "OUT",
        "CLO",
        "PIN",
        "ALL",
        "OUT, linear",
        "PIN, linear",
    ];
    let mut t5 = Table {
        title: "Seed Table 5 (modelled): fetched i-cache bytes never executed (Alpha L1I, 32 B \
                lines; this host's L1I) and the static size of the code the round trips run, \
                without (STD) and with (OUT) outlining"
            .into(),
        headers: [
            "stack",
            "version",
            "unused, Alpha",
            "unused, host",
            "functions run",
            "their size, instructions",
            "up to the last one run, instructions",
        ]
        .map(String::from)
        .to_vec(),
        rows: vec![],
    };
    for (kind, t) in traced {
        let kind = *kind;
        for (k, m) in ms.iter().enumerate() {
            let all = t.rows[k].iter().find(|r| r.version == "ALL").map(|r| r.b);
            let mut table = Table {
                title: format!(
                    "Seed Table 4 (modelled), {} stack, {}: per round trip",
                    kind.name(),
                    m.name
                ),
                headers: [
                    "version",
                    "trace length",
                    "cycles",
                    "CPI",
                    "iCPI",
                    "mCPI",
                    "L1I misses",
                    "fetched, never run",
                    "Δ cycles vs ALL",
                ]
                .map(String::from)
                .to_vec(),
                rows: vec![],
            };
            for name in order {
                let Some(r) = t.rows[k].iter().find(|r| r.version == name) else {
                    continue;
                };
                let per = |x: u64| x as f64 / rounds as f64;
                table.rows.push(vec![
                    name.into(),
                    format!("{:.0}", per(r.b.instructions)),
                    format!("{:.0}", per(r.b.cycles)),
                    format!("{:.2}", r.b.cpi),
                    format!("{:.2}", r.b.icpi),
                    format!("{:.2}", r.b.mcpi),
                    format!("{:.1}", per(r.l1i_misses)),
                    r.unused
                        .map_or("—".into(), |u| format!("{:.1} %", 100.0 * u.fraction())),
                    all.map_or("—".into(), |a| {
                        format!(
                            "{:+.1} %",
                            100.0 * (r.b.cycles as f64 / a.cycles.max(1) as f64 - 1.0)
                        )
                    }),
                ]);
            }
            if k == 0 && kind == StackKind::Tall {
                let mcpi = |n: &str| t.rows[k].iter().find(|r| r.version == n).map(|r| r.b.mcpi);
                if let (Some(bad), Some(all)) = (mcpi("BAD"), mcpi("ALL")) {
                    sec.figures
                        .push(("paths.alpha_mcpi_bad_vs_all".into(), bad / all.max(1e-9)));
                }
            }
            sec.tables.push(table);
        }
        // Why the Alpha model's mCPI orders the versions as it does: its misses by function.
        mcpi_order(kind, rounds, &t.rows[0], &ms[0].hier, sec);
        for (v, r) in &t.reports {
            if *v == Version::Pin {
                continue;
            }
            let frac = |k: usize| {
                r.unused
                    .get(k)
                    .map_or("—".into(), |u| format!("{:.1} %", 100.0 * u.fraction()))
            };
            let c = &r.code_size;
            t5.rows.push(vec![
                kind.name().into(),
                v.name().into(),
                frac(0),
                frac(1),
                c.functions.to_string(),
                c.total_insns.to_string(),
                c.hot_insns.to_string(),
            ]);
        }
    }
    sec.tables.push(t5);
    sec.text.push(format!(
        "Tables 4 and 5 are modelled: {rounds} round trips of `phyllo-lab paths trace` (both ends, \
         datagrams handed over directly) traced by valgrind lackey and run through \
         phyllo-analyze under each memory model. CLO, BAD and ALL are virtual layouts of OUT's \
         and PIN's traces (functions re-placed, no relinking): bipartite (library functions, \
         entered more than once per path invocation, in one part of the cache; path functions in \
         the rest; each in invocation order), bad (every function at the same cache set) and, \
         as the seed's §3.2 advises when the whole path fits the cache, linear (invocation \
         order). The static sizes count every named function the region runs, the C \
         library's included."
    ));
    let split: Vec<String> = traced
        .iter()
        .flat_map(|(kind, t)| {
            t.split
                .iter()
                .map(move |(v, lib, all)| format!("{} {}: {lib} of {all}", kind.name(), v.name()))
        })
        .collect();
    sec.text.push(format!(
        "Both ends run in the traced process, so each path (one end's send, one end's \
         delivery) runs twice per round trip: a library function is one entered more than \
         twice per round trip. Library functions among those run: {}.",
        split.join("; ")
    ));
}

/// The order of seed 000's Table 4 mCPI, as pairs (higher, lower): BAD > STD > OUT > CLO,
/// PIN > ALL in both of its stacks. CLO and PIN have no order between them there (TCP/IP:
/// PIN 1.31 above CLO 1.28; RPC: both 1.25).
const SEED_MCPI_ORDER: [(&str, &str); 6] = [
    ("BAD", "STD"),
    ("STD", "OUT"),
    ("OUT", "CLO"),
    ("OUT", "PIN"),
    ("CLO", "ALL"),
    ("PIN", "ALL"),
];

/// Of [`SEED_MCPI_ORDER`]'s pairs, those `mcpi` (a version's mCPI) orders the other way or
/// cannot tell (a version missing), and how many pairs it could check.
fn order_breaks(mcpi: impl Fn(&str) -> Option<f64>) -> (Vec<(&'static str, &'static str)>, usize) {
    let mut broken = Vec::new();
    let mut checked = 0;
    for (hi, lo) in SEED_MCPI_ORDER {
        if let (Some(a), Some(b)) = (mcpi(hi), mcpi(lo)) {
            checked += 1;
            if a <= b {
                broken.push((hi, lo));
            }
        }
    }
    (broken, checked)
}

/// `name` without generic arguments (`Connection<…>::send`), at most 100 characters: a
/// demangled Rust name of the static stack runs to thousands. A `<` right after a name
/// character opens generic arguments; one elsewhere opens a qualified path
/// (`<T as Trait>::f`), which is kept.
fn short_name(name: &str) -> String {
    let mut out = String::new();
    let mut depth = 0usize;
    let mut prev = ' ';
    for c in name.chars() {
        match c {
            '<' if depth > 0 => depth += 1,
            '<' if prev.is_alphanumeric() || prev == '_' => {
                depth = 1;
                out.push_str("<…>");
            }
            '>' if depth > 0 => depth -= 1,
            _ if depth > 0 => {}
            _ => out.push(c),
        }
        prev = c;
    }
    if out.chars().count() > 100 {
        out = out.chars().take(99).collect::<String>() + "…";
    }
    out
}

/// How many functions per version the misses-by-function table lists.
const TOP_FUNCTIONS: usize = 4;

/// The Alpha model's mCPI order for one stack against the seed's, and what explains it: per
/// version its i-cache misses, the lines its executed code spans and the stall cycles split
/// into instruction and data access (a table), the functions that miss most (a table), and
/// the comparison of PIN with OUT written from these figures.
fn mcpi_order(
    kind: StackKind,
    rounds: usize,
    rows: &[Row],
    hier: &HierarchyConfig,
    sec: &mut Section,
) {
    let per = |x: u64| x as f64 / rounds as f64;
    let row = |n: &str| rows.iter().find(|r| r.version == n);
    let lines = |r: &Row| r.functions.iter().map(|f| f.lines).sum::<u64>();
    let line = u64::from(hier.l1i.line);
    let versions = ["BAD", "STD", "OUT", "CLO", "PIN", "ALL"];
    let mut summary = Table {
        title: format!(
            "Why the mCPI orders as it does, {} stack, Alpha 21064 model: per round trip, the \
             i-cache misses against the {line} B lines the executed code spans, and the \
             memory stall cycles split into instruction and data access",
            kind.name()
        ),
        headers: [
            "version",
            "trace length",
            "L1I misses",
            "lines executed",
            "misses per line executed",
            "i-stall cycles",
            "d-stall cycles",
            "mCPI (i + d)",
        ]
        .map(String::from)
        .to_vec(),
        rows: vec![],
    };
    let mut top = Table {
        title: format!(
            "L1I misses by function, {} stack, Alpha 21064 model (8 KB direct-mapped, {line} B \
             lines): the {TOP_FUNCTIONS} functions of each version that miss most, per round trip",
            kind.name()
        ),
        headers: [
            "version",
            "function",
            "bytes",
            "lines executed",
            "misses",
            "misses per line executed",
            "share of the version's misses",
        ]
        .map(String::from)
        .to_vec(),
        rows: vec![],
    };
    for v in versions {
        let Some(r) = row(v) else { continue };
        let n = r.b.instructions.max(1) as f64;
        let l = lines(r);
        summary.rows.push(vec![
            v.into(),
            format!("{:.0}", per(r.b.instructions)),
            format!("{:.1}", per(r.l1i_misses)),
            l.to_string(),
            format!("{:.2}", per(r.l1i_misses) / l.max(1) as f64),
            format!("{:.0}", per(r.b.instr)),
            format!("{:.0}", per(r.b.data)),
            format!(
                "{:.2} ({:.2} + {:.2})",
                r.b.mcpi,
                r.b.instr as f64 / n,
                r.b.data as f64 / n
            ),
        ]);
        for f in r.functions.iter().take(TOP_FUNCTIONS) {
            top.rows.push(vec![
                v.into(),
                format!("`{}`", short_name(&f.name)),
                f.size.to_string(),
                f.lines.to_string(),
                format!("{:.1}", per(f.misses)),
                format!("{:.2}", per(f.misses) / f.lines.max(1) as f64),
                format!(
                    "{:.1} %",
                    100.0 * f.misses as f64 / r.l1i_misses.max(1) as f64
                ),
            ]);
        }
    }
    let mcpi = |n: &str| row(n).map(|r| r.b.mcpi);
    let (broken, checked) = order_breaks(mcpi);
    let stack = match kind {
        StackKind::Short => "short",
        StackKind::Tall => "tall",
    };
    if checked > 0 {
        sec.figures.push((
            format!("paths.{stack}_alpha_mcpi_seed_order"),
            (checked - broken.len()) as f64 / checked as f64,
        ));
    }
    let order: Vec<String> = {
        let mut v: Vec<(&str, f64)> = versions
            .iter()
            .filter_map(|n| mcpi(n).map(|m| (*n, m)))
            .collect();
        v.sort_by(|a, b| b.1.total_cmp(&a.1));
        v.iter().map(|(n, m)| format!("{n} {m:.2}")).collect()
    };
    let mut text = format!(
        "The mCPI order, {} stack, Alpha model: {} (seed 000's Table 4: BAD > STD > OUT > \
         CLO, PIN > ALL; `paths.{stack}_alpha_mcpi_seed_order` is the share of those {checked} \
         pairs that hold here). ",
        kind.name(),
        order.join(" > "),
    );
    if broken.is_empty() {
        text.push_str("Every pair holds.");
    } else {
        let b: Vec<String> = broken.iter().map(|(h, l)| format!("{h} > {l}")).collect();
        text.push_str(&format!("Not holding: {}. ", b.join(", ")));
    }
    if let (Some(out), Some(pin)) = (row("OUT"), row("PIN")) {
        text.push_str(&pin_vs_out(out, pin, rounds, line, &lines));
        sec.figures.push((
            format!("paths.{stack}_alpha_pin_vs_out_l1i_misses"),
            pin.l1i_misses as f64 / out.l1i_misses.max(1) as f64,
        ));
    }
    sec.text.push(text);
    sec.tables.push(summary);
    sec.tables.push(top);
}

/// PIN against OUT under the Alpha model, from the figures: the trace lengths, the misses and
/// the stall cycles per round trip (which of them moved more decides which mCPI is higher),
/// the lines the executed code spans and how often each misses, and PIN's function that
/// misses most beside the same function in OUT.
fn pin_vs_out(
    out: &Row,
    pin: &Row,
    rounds: usize,
    line: u64,
    lines: &dyn Fn(&Row) -> u64,
) -> String {
    let per = |x: u64| x as f64 / rounds as f64;
    let stall = |r: &Row| per(r.b.instr + r.b.data);
    let (lo, lp) = (lines(out), lines(pin));
    let mpl = |r: &Row, l: u64| per(r.l1i_misses) / l.max(1) as f64;
    let kb = |l: u64| (l * line) as f64 / 1024.0;
    let dn = pct(per(pin.b.instructions), per(out.b.instructions));
    let ds = pct(stall(pin), stall(out));
    let mut s = format!(
        "PIN against OUT: {:.0} instructions per round trip against {:.0} ({dn:+.1} %), {:.0} \
         i-cache misses against {:.0} ({:+.1} %), {:.0} memory stall cycles against {:.0} \
         ({ds:+.1} %: instruction access {:.0} against {:.0}, data access {:.0} against \
         {:.0}). mCPI is stall cycles over trace length, so ",
        per(pin.b.instructions),
        per(out.b.instructions),
        per(pin.l1i_misses),
        per(out.l1i_misses),
        pct(per(pin.l1i_misses), per(out.l1i_misses)),
        stall(pin),
        stall(out),
        per(pin.b.instr),
        per(out.b.instr),
        per(pin.b.data),
        per(out.b.data),
    );
    s.push_str(&if ds > dn {
        format!(
            "with the stalls falling less than the trace (or rising) PIN's mCPI is the \
             higher, {:.2} against {:.2}, though it takes {:+.1} % cycles: inlining removed \
             instructions, not i-cache misses. ",
            pin.b.mcpi,
            out.b.mcpi,
            pct(per(pin.b.cycles), per(out.b.cycles)),
        )
    } else {
        format!(
            "with the stalls falling more than the trace PIN's mCPI is the lower, {:.2} \
             against {:.2}. ",
            pin.b.mcpi, out.b.mcpi
        )
    });
    s.push_str(&format!(
        "The misses follow the code the round trip runs, not its instruction count: PIN's \
         executed code spans {lp} lines ({:.1} KB) against OUT's {lo} ({:.1} KB), {:.1} and \
         {:.1} times the 8 KB cache, and an executed line misses {:.2} times per round trip \
         against {:.2}{}. ",
        kb(lp),
        kb(lo),
        kb(lp) / 8.0,
        kb(lo) / 8.0,
        mpl(pin, lp),
        mpl(out, lo),
        // Each path runs twice a round trip (once per end): near two misses a line, the
        // rest of the round trip's code has evicted a line before its next run.
        if mpl(pin, lp).min(mpl(out, lo)) >= 1.5 {
            " — about every time it runs (each path runs twice a round trip, once per end, \
             and the rest of the round trip's code evicts it in between)"
        } else {
            ""
        },
    ));
    if let Some(f) = pin.functions.first() {
        let name = short_name(&f.name);
        s.push_str(&format!(
            "PIN's function that misses most, `{name}` ({} B, {} lines executed), misses {:.1} \
             times per round trip ({:.1} % of PIN's misses)",
            f.size,
            f.lines,
            per(f.misses),
            100.0 * f.misses as f64 / pin.l1i_misses.max(1) as f64,
        ));
        match out.functions.iter().find(|g| short_name(&g.name) == name) {
            Some(g) => s.push_str(&format!(
                "; in OUT the same function is {} B with {} lines executed and misses {:.1} \
                 times{}",
                g.size,
                g.lines,
                per(g.misses),
                if f.size > g.size && f.misses > g.misses {
                    ": inlined, the layers' code moved into it, and their misses with it."
                } else {
                    "."
                },
            )),
            None => s.push_str("; OUT has no function of that name."),
        }
    }
    s
}

/// `a` relative to `b`, per cent.
fn pct(a: f64, b: f64) -> f64 {
    100.0 * (a / b.max(1e-9) - 1.0)
}

/// One `phyllo-lab paths rtt --link <link>` run of `exe`: mean ns per round trip.
fn rtt_of(
    exe: &std::path::Path,
    kind: StackKind,
    v: Version,
    link: LinkArg,
    rounds: usize,
) -> Result<f64> {
    let w = workload(exe, "rtt", kind, v, rounds);
    let link = match link {
        LinkArg::Mem => "mem",
        LinkArg::Udp => "udp",
        LinkArg::Direct => "direct",
    };
    let out = std::process::Command::new(&w.program)
        .args(&w.args)
        .args(["--link", link])
        .output()
        .with_context(|| format!("running {}", exe.display()))?;
    let text = String::from_utf8_lossy(&out.stdout);
    text.split("mean ")
        .nth(1)
        .and_then(|t| t.split_whitespace().next())
        .and_then(|x| x.parse::<f64>().ok())
        .with_context(|| {
            format!(
                "no mean in {:?} ({})",
                text,
                String::from_utf8_lossy(&out.stderr)
            )
        })
}

/// The binary each version runs in, per stack: STD, OUT and PIN in this one, CLO and ALL in
/// copies relinked in the bipartite order of OUT's and PIN's functions.
struct Binaries {
    per: Vec<(StackKind, Vec<(Version, std::path::PathBuf)>)>,
    /// Versions without a binary, and why.
    missing: Vec<(StackKind, Version, String)>,
}

/// Per stack, per version of [`Binaries::per`]: the figure of each run.
type Measured = Vec<Vec<(Version, Vec<f64>)>>;

impl Binaries {
    /// `runs` runs of `f(binary, stack, code version)` for every binary, the versions' runs
    /// interleaved.
    fn measure(
        &self,
        runs: usize,
        mut f: impl FnMut(&std::path::Path, StackKind, Version) -> Result<f64>,
    ) -> Result<Measured> {
        let mut m: Measured = self
            .per
            .iter()
            .map(|(_, b)| b.iter().map(|(v, _)| (*v, Vec::new())).collect())
            .collect();
        for _ in 0..runs {
            for (k, (kind, bins)) in self.per.iter().enumerate() {
                for (i, (v, bin)) in bins.iter().enumerate() {
                    m[k][i].1.push(f(bin, *kind, v.code())?);
                }
            }
        }
        Ok(m)
    }

    /// A row per version: per stack, median (min–max) and Δ against ALL (PIN where ALL has
    /// no binary), or why it was not measured.
    fn rows(&self, m: &Measured) -> Vec<Vec<String>> {
        let stat = |k: usize, v: Version| {
            m.get(k)?
                .iter()
                .find(|x| x.0 == v)
                .map(|x| crate::stats::Summary::of(&x.1))
        };
        let mut rows = Vec::new();
        for v in Version::ALL {
            let mut row = vec![v.name().to_string()];
            for (k, (kind, _)) in self.per.iter().enumerate() {
                let best = stat(k, Version::All)
                    .or(stat(k, Version::Pin))
                    .map_or(1.0, |x| x.median);
                match stat(k, v) {
                    Some(s) => {
                        row.push(format!("{:.0} ({:.0}–{:.0})", s.median, s.min, s.max));
                        row.push(format!("{:+.1} %", pct(s.median, best.max(1.0))));
                    }
                    None => {
                        row.push(match v {
                            Version::Bad => "modelled only (needs gaps)".into(),
                            _ => self
                                .missing
                                .iter()
                                .find(|x| x.0 == *kind && x.1 == v)
                                .map_or("not relinked".into(), |x| x.2.clone()),
                        });
                        row.push("—".into());
                    }
                }
            }
            rows.push(row);
        }
        rows
    }
}

/// The headers of a table of [`Binaries::rows`].
fn version_headers(short: &str, tall: &str) -> Vec<String> {
    [
        "version",
        short,
        "Δ vs ALL (PIN where ALL was not relinked)",
        tall,
        "Δ vs ALL (PIN where ALL was not relinked)",
    ]
    .map(String::from)
    .to_vec()
}

/// The binaries of every version ([`Binaries`]): CLO and ALL relinked in the bipartite order
/// `orders` gives (from the modelled section's traces), taken from the relink cache under the
/// target directory or, when it is cold, relinked and stored there
/// ([`crate::relink::cached`]); in `--quick` too. A relink that fails leaves its version
/// saying why. Adds the relinks' table and what they cost to `sec`.
fn binaries(exe: &std::path::Path, orders: &[StackOrders], sec: &mut Section) -> Binaries {
    let mut relinks = Table {
        title: "The relinked binaries (bipartite order; cached under the target directory, \
                `paths-relink/cache/<hash of this binary>/`, keyed by the order's hash)"
            .into(),
        headers: [
            "stack",
            "version",
            "functions ordered",
            "placed in order",
            "cache",
            "seconds",
        ]
        .map(String::from)
        .to_vec(),
        rows: vec![],
    };
    let mut bins = Binaries {
        per: Vec::new(),
        missing: Vec::new(),
    };
    let (mut built, mut hit) = (Vec::new(), Vec::new());
    for kind in StackKind::BOTH {
        let mut row: Vec<(Version, std::path::PathBuf)> =
            CODE.iter().map(|v| (*v, exe.to_path_buf())).collect();
        let of_kind = orders.iter().find(|o| o.0 == kind);
        for (v, code) in [(Version::Clo, Version::Out), (Version::All, Version::Pin)] {
            let Some(names) = of_kind.and_then(|o| o.1.iter().find(|x| x.0 == code)) else {
                bins.missing
                    .push((kind, v, "no trace to order by (needs valgrind)".into()));
                continue;
            };
            match crate::relink::cached(exe, &names.1) {
                Ok(r) => {
                    relinks.rows.push(vec![
                        kind.name().into(),
                        v.name().into(),
                        names.1.len().to_string(),
                        format!("{} of {}", r.in_order, r.ordered),
                        if r.cached { "hit" } else { "cold: relinked" }.into(),
                        format!("{:.1}", r.seconds),
                    ]);
                    let into = if r.cached { &mut hit } else { &mut built };
                    into.push(r.seconds);
                    row.push((v, r.path));
                }
                Err(e) => {
                    let why = format!("not relinked: {e:#}");
                    relinks.rows.push(vec![
                        kind.name().into(),
                        v.name().into(),
                        names.1.len().to_string(),
                        "—".into(),
                        why.clone(),
                        "—".into(),
                    ]);
                    bins.missing.push((kind, v, why));
                }
            }
        }
        bins.per.push((kind, row));
    }
    if !relinks.rows.is_empty() {
        sec.tables.push(relinks);
    }
    sec.text.push(relink_cost(&built, &hit));
    bins
}

/// Seed Table 4's T_p, measured: protocol processing per round trip (both ends, datagrams
/// handed over directly), each version in a process of its own ([`binaries`]), runs
/// interleaved.
fn processing_times(quick: bool, bins: &Binaries, sec: &mut Section) -> Result<()> {
    let (runs, rounds) = if quick { (3, 5000) } else { (7, 50_000) };
    let means = bins.measure(runs, |bin, kind, v| {
        rtt_of(bin, kind, v, LinkArg::Direct, rounds)
    })?;
    sec.tables.push(Table {
        title: format!(
            "Seed Table 4's T_p (measured): ns of protocol processing per round trip, both ends, \
             datagrams handed over directly; median (min–max) of {runs} runs of {rounds}, each \
             version in its own process, runs interleaved; CLO and ALL are this binary relinked \
             in the bipartite order"
        ),
        headers: version_headers("short", "tall"),
        rows: bins.rows(&means),
    });
    Ok(())
}

/// What the relinks of this run cost, from the seconds of those `built` (the cache was cold)
/// and of those found in the cache (`hit`).
fn relink_cost(built: &[f64], hit: &[f64]) -> String {
    let sum = |x: &[f64]| x.iter().sum::<f64>();
    let mut s = String::from(
        "CLO and ALL in Table 2 and the T_p table run this binary relinked with the bipartite symbol order \
         (`--symbol-ordering-file`), kept in a cache keyed by this binary's hash and the \
         order's, each checked to hold this binary's functions at their sizes before it is \
         kept. ",
    );
    if built.is_empty() && hit.is_empty() {
        s.push_str("No relinked binary was used in this run.");
        return s;
    }
    if !built.is_empty() {
        s.push_str(&format!(
            "This run found the cache cold for {} of them and relinked them in {:.0} s \
             ({:.0}–{:.0} s each: cargo rebuilds in its own target directory what changed \
             since the last relink, then links), which is what a cold cache adds to the \
             report. ",
            built.len(),
            sum(built),
            built.iter().copied().fold(f64::INFINITY, f64::min),
            built.iter().copied().fold(0.0, f64::max),
        ));
    }
    if !hit.is_empty() {
        s.push_str(&format!(
            "{} came from the cache in {:.2} s in all (hashing this binary and checking the \
             placement).",
            hit.len(),
            sum(hit)
        ));
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn generic_arguments_are_elided() {
        assert_eq!(
            short_name("phyllo::conn::Connection<phyllo::stack::Static<(A, B<C>)>>::send"),
            "phyllo::conn::Connection<…>::send"
        );
        // A qualified path keeps its `<… as …>`, its generics go.
        assert_eq!(
            short_name("<phyllo::layers::Tcp<X> as phyllo::layer::Layer>::pre_send"),
            "<phyllo::layers::Tcp<…> as phyllo::layer::Layer>::pre_send"
        );
        let long = "f".repeat(300);
        assert_eq!(short_name(&long).chars().count(), 100);
    }

    #[test]
    fn the_seed_order_checked_pair_by_pair() {
        // The seed's own RPC column: every pair holds (CLO and PIN tie, unordered).
        let seed = |n: &str| {
            let m = [
                ("BAD", 4.66),
                ("STD", 1.69),
                ("OUT", 1.65),
                ("CLO", 1.25),
                ("PIN", 1.25),
                ("ALL", 0.81),
            ];
            m.iter().find(|x| x.0 == n).map(|x| x.1)
        };
        assert_eq!(order_breaks(seed), (vec![], 6));
        // PIN above OUT (and above STD) breaks OUT > PIN, and nothing else.
        let pin_high = |n: &str| if n == "PIN" { Some(1.7) } else { seed(n) };
        assert_eq!(order_breaks(pin_high), (vec![("OUT", "PIN")], 6));
        // A version missing: its pairs are not counted.
        let no_bad = |n: &str| if n == "BAD" { None } else { seed(n) };
        assert_eq!(order_breaks(no_bad), (vec![], 5));
    }

    #[test]
    fn relink_cost_states_what_was_built() {
        let s = relink_cost(&[40.0, 20.0], &[0.5]);
        assert!(
            s.contains("cold for 2 of them and relinked them in 60 s"),
            "{s}"
        );
        assert!(s.contains("(20–40 s each"), "{s}");
        assert!(s.contains("1 came from the cache in 0.50 s"), "{s}");
        assert!(relink_cost(&[], &[]).contains("No relinked binary"));
    }
}
