//! One pass over a trace: every cache hierarchy, timing model, instruction statistic, fusion
//! alternative and virtual layout at once. (Seed 000 is Mosberger et al., "Analysis of Techniques
//! to Improve Protocol Processing Latency".)
//!
//! This is the analysis pipeline of Xie, Zhao and Bhuyan, "Architectural Analysis and
//! Instruction-Set Optimization for Design of Network Protocol Processors" (seed 003) (§3:
//! instruction mix and ILP, Figure 2; i-cache behaviour, Figure 3; execution-time breakdown, Figure
//! 4; §4: dependent pairs, Table 1; fused pairs, Figure 5) with seed 000's trace length, CPI, iCPI
//! and mCPI (§4.3) and virtual layouts (§3). The trace is consumed record by record
//! ([`Analyzer::record`]) and never stored.
//!
//! **Repeated string instructions.** valgrind (lackey, and callgrind's `Ir` alike) reports one
//! instruction fetch per *iteration* of a `rep`/`repe`/`repne`-prefixed string instruction
//! (`rep stosb`, `rep movsq`, `repe cmpsb`, ...), plus one more for the final check when the
//! count runs out: `rep stosb` with `rcx = 5` gives six `I` records and five stores. The
//! analyzer counts a dynamic *execution* of such an instruction as one dynamic instruction: an
//! `I` record at the same address as the immediately preceding `I` record, where the decoded
//! instruction there is a repeated string instruction ([`crate::insn::Rep`]), is another
//! iteration of the same execution (a new execution always has some other instruction fetched
//! in between, as in `L: rep movsb; dec ecx; jnz L`). So the trace length, the instruction mix,
//! the dependent pairs, the function profile, the i-cache models (one fetch), the fusion and
//! layout models and the timing models' trace length all see one instruction per execution;
//! the data accesses of every iteration still go to the data caches, and the iterations are
//! charged as CPU cycles in the timing model ([`crate::timing::rep_cycles`]) and reported in
//! [`Report::rep`]. An iteration is an `I` record of the execution followed by at least one
//! data access (the final check reads and writes no memory).
//!
//! **Seed 000's Tables 4 and 5.** Besides CPI, iCPI and mCPI under any hierarchy (Table 4;
//! [`crate::cache::HierarchyConfig::alpha21064`] with
//! [`crate::timing::TimingConfig::alpha21064`] for the seed's machine), each virtual layout can
//! run a whole memory and timing model of its own ([`LayoutSetup::timing`]); the i-cache bytes
//! fetched but never executed are counted per hierarchy and per layout when asked for
//! ([`Setup::unused`]); and the static size of the code executed in the region, whole and up to
//! each function's last executed instruction, is always reported ([`CodeSize`]).

use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};
use std::io::Read;

use crate::cache::{
    Cache, CacheConfig, CacheStats, ExecTracker, GeometryError, Hierarchy, HierarchyConfig, Served,
    Unused,
};
use crate::codemap::{CodeMap, Compaction, NO_FUNC};
use crate::insn::{fusion_alternatives, Class, FusionAlt, Insn, Rep};
use crate::layout::{Layout, Profile};
use crate::roi::RoiFilter;
use crate::timing::{rep_extra_cycles, Breakdown, TimingConfig, TimingRun};
use crate::trace::{Kind, LackeyReader, Record, Summary, TraceError};

/// Why an analysis failed.
#[derive(Debug, thiserror::Error)]
pub enum AnalyzeError {
    /// The trace could not be read.
    #[error(transparent)]
    Trace(#[from] TraceError),
    /// An impossible cache geometry.
    #[error(transparent)]
    Geometry(#[from] GeometryError),
    /// The begin marker never executed.
    #[error("the region of interest never began (marker {0:#x} not in the trace): wrong load bias, or the workload failed before its region")]
    NoRegion(u64),
    /// The trace ended inside the region.
    #[error("truncated trace: it ended inside the region of interest (entered {entries} times, left {exits})")]
    UnfinishedRegion {
        /// Times the region was entered.
        entries: u64,
        /// Times it was left.
        exits: u64,
    },
    /// A setup refers to a hierarchy that does not exist.
    #[error("setup error: {0}")]
    Setup(String),
}

/// What to simulate in the pass.
#[derive(Clone, Debug, Default)]
pub struct Setup {
    /// Cache hierarchies, all fed every access.
    pub hierarchies: Vec<HierarchyConfig>,
    /// Timing models: (index into `hierarchies`, parameters).
    pub timings: Vec<(usize, TimingConfig)>,
    /// Instruction mix, dependent pairs, function profile.
    pub instructions: bool,
    /// Fusion alternatives, if wanted.
    pub fusion: Option<FusionSetup>,
    /// Virtual layouts, if wanted.
    pub layouts: Option<LayoutSetup>,
    /// Fetched-but-never-executed bytes of every hierarchy's L1I ([`Report::unused`]) and of
    /// every layout's i-cache ([`LayoutResult::unused`]); seed 000 Table 5's "i-cache unused".
    pub unused: bool,
    /// L1I misses attributed to the function whose instruction fetch missed, per hierarchy
    /// ([`Report::function_misses`]) and per layout ([`LayoutResult::function_misses`]).
    pub function_misses: bool,
}

/// Fusion model setup (seed 003 §4.3, Figure 5).
#[derive(Clone, Debug)]
pub struct FusionSetup {
    /// The hierarchy whose data caches and L2 outcome the fused runs share.
    pub hierarchy: usize,
    /// The timing parameters of the fused runs.
    pub timing: TimingConfig,
    /// Alternatives (default: [`fusion_alternatives`]).
    pub alternatives: Vec<FusionAlt>,
}

impl FusionSetup {
    /// All 18 alternatives over hierarchy `hierarchy`.
    pub fn all(hierarchy: usize, timing: TimingConfig) -> Self {
        FusionSetup {
            hierarchy,
            timing,
            alternatives: fusion_alternatives(),
        }
    }
}

/// Virtual layouts setup (seed 000 §3).
#[derive(Clone, Debug)]
pub struct LayoutSetup {
    /// The i-cache simulated under each layout.
    pub l1i: CacheConfig,
    /// The layouts.
    pub layouts: Vec<Layout>,
    /// A whole memory model per layout, if wanted: each layout then also runs its own
    /// hierarchy of this configuration (instruction fetches at the layout's addresses, data
    /// accesses unchanged) and its own timing model with these parameters, giving
    /// [`LayoutResult::breakdown`] (seed 000 Table 4's CPI, iCPI and mCPI per layout), and
    /// [`LayoutResult::unused`] for the layout's i-cache. Taken control transfers are those
    /// of the trace: a layout moves functions, it does not rewrite their code, so the
    /// original layout gives the breakdown of the plain timing model on the same hierarchy.
    pub timing: Option<(HierarchyConfig, TimingConfig)>,
}

/// What one virtual layout gave ([`Report::layouts`]).
#[derive(Clone, Debug, PartialEq)]
pub struct LayoutResult {
    /// Layout name.
    pub name: String,
    /// The counters of the layout's i-cache ([`LayoutSetup::l1i`]).
    pub l1i: CacheStats,
    /// Timing under the layout, when [`LayoutSetup::timing`] is set.
    pub breakdown: Option<Breakdown>,
    /// Fetched and never-executed bytes of the layout's i-cache ([`LayoutSetup::l1i`]), when
    /// [`LayoutSetup::timing`] or [`Setup::unused`] is set.
    pub unused: Option<Unused>,
    /// The layout's i-cache misses per function, most first; empty unless
    /// [`Setup::function_misses`] is set.
    pub function_misses: Vec<FunctionMisses>,
}

/// The L1I misses of one function's instruction fetches ([`Setup::function_misses`]), beside
/// what they can be compared with: how many distinct cache lines its executed instructions
/// span (at the addresses of the hierarchy or layout the misses are counted in), so
/// `misses / lines` is how often each of those lines was fetched again.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct FunctionMisses {
    /// The function's name ([`OUTSIDE`] for code outside any decoded function).
    pub name: String,
    /// Bytes of the function (its symbol's size; 0 for [`OUTSIDE`]).
    pub size: u64,
    /// Dynamic instructions executed in it.
    pub instructions: u64,
    /// Distinct i-cache lines its executed instructions touch.
    pub lines: u64,
    /// Line fetches of its instructions that missed the i-cache.
    pub misses: u64,
}

/// [`FunctionMisses::name`] of code outside any decoded function.
pub const OUTSIDE: &str = "(outside any function)";

/// Static code size of the functions executed in the region (seed 000 Table 5's "Size": the
/// critical-path code with and without outlining). *Total* is the whole of every function
/// that executed at least one instruction; *hot* is, per such function, the extent from its
/// start to the end of the highest-addressed instruction executed in it, so code outlined to
/// the end of a function (or never reached at its end) falls outside it. Instructions are
/// counted by decoding ([`CodeMap::insns_between`]); code outside any decoded function, and the
/// unnamed stretches between symbols (`image@0x…`), are not counted.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CodeSize {
    /// Functions executed in the region.
    pub functions: usize,
    /// Bytes of these functions.
    pub total_bytes: u64,
    /// Decoded instructions of these functions.
    pub total_insns: u64,
    /// Bytes from each function's start to the end of its last executed instruction.
    pub hot_bytes: u64,
    /// Decoded instructions in these extents.
    pub hot_insns: u64,
}

/// A ranked dependent pair.
#[derive(Clone, Debug, PartialEq)]
pub struct PairCount {
    /// Mnemonic of the first instruction.
    pub first: String,
    /// Mnemonic of the second.
    pub second: String,
    /// Dynamic occurrences.
    pub count: u64,
    /// Share of all dynamic instructions (seed 003 Table 1's "occurrence").
    pub share: f64,
}

/// The outcome of one fusion alternative.
#[derive(Clone, Debug)]
pub struct FusionResult {
    /// Alternative name.
    pub name: String,
    /// Dynamic instructions saved (pairs fused).
    pub saved: u64,
    /// Static code bytes saved by compaction.
    pub bytes_saved: u64,
    /// Compacted i-cache counters.
    pub l1i: CacheStats,
    /// Timing with the fused ISA.
    pub breakdown: Breakdown,
}

/// One kind of repeated string instruction (`REP STOSB`, `REPE CMPSB`, ...) in [`RepStats`].
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RepOp {
    /// Prefix and mnemonic, as `REP MOVSB`.
    pub name: String,
    /// Dynamic executions (each one instruction of the trace length).
    pub executions: u64,
    /// Iterations of all executions.
    pub iterations: u64,
    /// Bytes stored, moved, loaded, compared or scanned: iterations × element size.
    pub bytes: u64,
}

/// Repeated string instructions in the region (see the module documentation): each
/// execution is one instruction of [`Report::instructions`], the mix and the pairs; its
/// iterations are counted here.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RepStats {
    /// Dynamic executions.
    pub executions: u64,
    /// Iterations of all executions (`I` records followed by a data access).
    pub iterations: u64,
    /// Bytes stored, moved, loaded, compared or scanned (per string): iterations × element
    /// size (1 for `stosb`, 2 for `stosw`, 4 for `stosd`, 8 for `stosq`; the same for `movs`,
    /// `lods`, `cmps`, `scas`).
    pub bytes: u64,
    /// valgrind's instruction fetches (`I` records) of these executions, at least one per
    /// execution, usually iterations + 1.
    pub records: u64,
    /// CPU cycles the timing models charge for the iterations beyond each execution's issue
    /// cycle ([`crate::timing::rep_extra_cycles`]), summed; the same for every timing model.
    pub extra_cycles: u64,
    /// Per kind, most bytes first.
    pub ops: Vec<RepOp>,
}

/// Everything one pass measured.
#[derive(Clone, Debug, Default)]
pub struct Report {
    /// Trace records read (all, in and out of the region).
    pub records: u64,
    /// Instructions in the region (trace length): a repeated string instruction counts once
    /// per execution, however many iterations it runs ([`Report::rep`]).
    pub instructions: u64,
    /// Loads, stores and modifies in the region.
    pub data_refs: [u64; 3],
    /// Times the region was entered.
    pub roi_entries: u64,
    /// Per hierarchy: configuration, L1I, L1D and L2 counters.
    pub caches: Vec<(HierarchyConfig, CacheStats, CacheStats, Option<CacheStats>)>,
    /// Per timing model: hierarchy index, parameters, breakdown.
    pub timings: Vec<(usize, TimingConfig, Breakdown)>,
    /// Dynamic instruction mix (a repeated string instruction once per execution).
    pub mix: Vec<(Class, u64)>,
    /// Repeated string instructions: executions, iterations, bytes.
    pub rep: RepStats,
    /// Dependent pairs (a repeated string instruction is one element per execution), most
    /// frequent first.
    pub pairs: Vec<PairCount>,
    /// All dynamic dependent pairs.
    pub dependent_pairs: u64,
    /// Fusion alternatives.
    pub fusion: Vec<FusionResult>,
    /// Layouts: name, i-cache counters, and timing and unused bytes when asked for.
    pub layouts: Vec<LayoutResult>,
    /// Per hierarchy (index-aligned with [`Report::caches`]): the L1I's fetched and
    /// never-executed bytes; empty unless [`Setup::unused`] is set.
    pub unused: Vec<Unused>,
    /// Per hierarchy (index-aligned with [`Report::caches`]): the L1I's misses per function,
    /// most first; empty unless [`Setup::function_misses`] is set.
    pub function_misses: Vec<Vec<FunctionMisses>>,
    /// Static code size of the functions executed in the region.
    pub code_size: CodeSize,
    /// Function profile (invocation order, calls).
    pub profile: Profile,
    /// Instructions per function, most first: (name, count).
    pub functions: Vec<(String, u64)>,
    /// valgrind's messages seen in the trace.
    pub messages: Vec<String>,
}

impl Report {
    /// valgrind's instruction fetches in the region: [`Report::instructions`] with every
    /// iteration-fetch of a repeated string instruction counted, as lackey's `I` records and
    /// callgrind's `Ir` count them.
    pub fn instruction_records(&self) -> u64 {
        self.instructions + self.rep.records - self.rep.executions
    }

    /// Share of class `c` in the mix.
    pub fn mix_share(&self, c: Class) -> f64 {
        let t: u64 = self.mix.iter().map(|m| m.1).sum();
        let n = self.mix.iter().find(|m| m.0 == c).map(|m| m.1).unwrap_or(0);
        if t == 0 {
            0.0
        } else {
            n as f64 / t as f64
        }
    }
}

#[derive(Default)]
struct Fx(u64);
impl Hasher for Fx {
    fn finish(&self) -> u64 {
        self.0
    }
    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.write_u64(b as u64);
        }
    }
    fn write_u32(&mut self, n: u32) {
        self.write_u64(n as u64)
    }
    fn write_u64(&mut self, n: u64) {
        self.0 = (self.0.rotate_left(5) ^ n).wrapping_mul(0x51_7c_c1_b7_27_22_0a_95);
    }
}
type FxMap<K, V> = HashMap<K, V, BuildHasherDefault<Fx>>;

struct FusionRun {
    alt: FusionAlt,
    comp: Compaction,
    l1i: Cache,
    timing: TimingRun,
    skip: Option<u64>,
    skipped_cur: bool,
    served: Served,
    saved: u64,
}

struct LayoutRun {
    layout: Layout,
    l1i: Cache,
    exec: Option<ExecTracker>,
    model: Option<LayoutModel>,
    /// When [`Setup::function_misses`]: the layout's i-cache misses per function.
    misses: Option<MissTracker>,
}

/// Per function (index `nf` for code outside any function): the i-cache misses of its
/// fetches, its executed instructions and the distinct lines they touch
/// ([`Setup::function_misses`]).
struct MissTracker {
    misses: Vec<u64>,
    instrs: Vec<u64>,
    /// Every line fetched, and the function of its first fetch.
    lines: FxMap<u64, u32>,
    /// The last line fetched: most fetches stay on the line before, and need no lookup.
    last: u64,
}

impl MissTracker {
    fn new(nf: usize) -> Self {
        MissTracker {
            misses: vec![0; nf + 1],
            instrs: vec![0; nf + 1],
            lines: FxMap::default(),
            last: u64::MAX,
        }
    }

    /// One instruction of function `f` (its index, or `nf`) fetched lines `first..=last`,
    /// `missed` of which missed.
    #[inline]
    fn fetched(&mut self, f: usize, first: u64, last: u64, missed: u64) {
        self.misses[f] += missed;
        self.instrs[f] += 1;
        if first == last && last == self.last {
            return;
        }
        for l in first..=last {
            self.lines.entry(l).or_insert(f as u32);
        }
        self.last = last;
    }

    /// The functions that executed, most misses first (then most instructions, then name).
    fn result(&self, funcs: &[crate::codemap::RtFunc]) -> Vec<FunctionMisses> {
        let mut lines = vec![0u64; self.misses.len()];
        for &f in self.lines.values() {
            lines[f as usize] += 1;
        }
        let mut out: Vec<FunctionMisses> = (0..self.misses.len())
            .filter(|&f| self.instrs[f] > 0)
            .map(|f| {
                let (name, size) = funcs
                    .get(f)
                    .map_or((OUTSIDE.to_string(), 0), |x| (x.name.clone(), x.size));
                FunctionMisses {
                    name,
                    size,
                    instructions: self.instrs[f],
                    lines: lines[f],
                    misses: self.misses[f],
                }
            })
            .collect();
        out.sort_by(|a, b| {
            b.misses
                .cmp(&a.misses)
                .then(b.instructions.cmp(&a.instructions))
                .then(a.name.cmp(&b.name))
        });
        out
    }
}

/// The memory and timing model of one layout ([`LayoutSetup::timing`]).
struct LayoutModel {
    hier: Hierarchy,
    timing: TimingRun,
    iserved: Served,
    dserved: Served,
}

#[derive(Clone, Copy)]
struct Pending {
    idx: u32,
    taken_before: bool,
    /// `I` records of this execution (more than one for a repeated string instruction).
    fetches: u64,
    /// Of these, those followed by a data access (a repeated string instruction's iterations).
    iterations: u64,
    /// Whether the last `I` record had a data access yet.
    data: bool,
}

/// A kind of repeated string instruction in [`RepStats::ops`]: mnemonic and prefix.
type RepKey = (iced_x86::Mnemonic, Rep);

/// The one-pass analyzer.
pub struct Analyzer<'m> {
    map: &'m mut CodeMap,
    roi: RoiFilter,
    roi_begin: u64,
    setup: Setup,
    hier: Vec<Hierarchy>,
    timings: Vec<(usize, TimingRun)>,
    iserved: Vec<Served>,
    dserved: Vec<Served>,
    cur: Option<Pending>,
    prev: Option<(u32, u64, u8)>,
    mix: [u64; 8],
    rep: RepStats,
    rep_ops: FxMap<u32, (RepKey, [u64; 3])>,
    pairs: FxMap<u32, u64>,
    dependent: u64,
    instrs: u64,
    data: [u64; 3],
    records: u64,
    seen_func: Vec<bool>,
    func_instrs: Vec<u64>,
    profile: Profile,
    fusion: Vec<FusionRun>,
    fusion_hier: usize,
    exec_id: Vec<u32>,
    remap: Vec<u64>,
    layouts: Vec<LayoutRun>,
    /// Per hierarchy, when [`Setup::unused`]: its L1I's executed-bytes tracker.
    exec: Vec<ExecTracker>,
    /// Per function: the highest end address of an instruction executed in it (0: none).
    hot_end: Vec<u64>,
    /// Per hierarchy, when [`Setup::function_misses`]: its L1I's misses per function.
    misses: Vec<MissTracker>,
}

impl<'m> Analyzer<'m> {
    /// An analyzer over code `map`, counting inside `roi`, simulating `setup`.
    pub fn new(
        map: &'m mut CodeMap,
        roi: RoiFilter,
        roi_begin: u64,
        setup: Setup,
    ) -> Result<Self, AnalyzeError> {
        let hier = setup
            .hierarchies
            .iter()
            .map(|c| Hierarchy::new(*c))
            .collect::<Result<Vec<_>, _>>()?;
        for (h, _) in &setup.timings {
            if *h >= hier.len() {
                return Err(AnalyzeError::Setup(format!(
                    "timing model refers to hierarchy {h} of {}",
                    hier.len()
                )));
            }
        }
        let timings = setup
            .timings
            .iter()
            .map(|(h, t)| (*h, TimingRun::new(*t)))
            .collect();
        let mut fusion = Vec::new();
        let mut fusion_hier = 0;
        if let Some(f) = &setup.fusion {
            let Some(hc) = setup.hierarchies.get(f.hierarchy) else {
                return Err(AnalyzeError::Setup(
                    "fusion refers to a missing hierarchy".into(),
                ));
            };
            fusion_hier = f.hierarchy;
            let pairs = map.fused_pairs();
            for alt in &f.alternatives {
                fusion.push(FusionRun {
                    alt: alt.clone(),
                    comp: Compaction::new(&pairs, alt.mask),
                    l1i: Cache::new(hc.l1i)?,
                    timing: TimingRun::new(f.timing),
                    skip: None,
                    skipped_cur: false,
                    served: Served::L1,
                    saved: 0,
                });
            }
        }
        let mut layouts = Vec::new();
        if let Some(l) = &setup.layouts {
            for layout in &l.layouts {
                let model = match &l.timing {
                    Some((hc, tc)) => Some(LayoutModel {
                        hier: Hierarchy::new(*hc)?,
                        timing: TimingRun::new(*tc),
                        iserved: Served::L1,
                        dserved: Served::L1,
                    }),
                    None => None,
                };
                let exec = if l.timing.is_some() || setup.unused {
                    Some(ExecTracker::new(&l.l1i)?)
                } else {
                    None
                };
                layouts.push(LayoutRun {
                    layout: layout.clone(),
                    l1i: Cache::new(l.l1i)?,
                    exec,
                    model,
                    misses: setup
                        .function_misses
                        .then(|| MissTracker::new(map.funcs().len())),
                });
            }
        }
        let exec = if setup.unused {
            setup
                .hierarchies
                .iter()
                .map(|c| ExecTracker::new(&c.l1i))
                .collect::<Result<Vec<_>, _>>()?
        } else {
            Vec::new()
        };
        let nf = map.funcs().len();
        let n = hier.len();
        let misses = if setup.function_misses {
            (0..n).map(|_| MissTracker::new(nf)).collect()
        } else {
            Vec::new()
        };
        Ok(Analyzer {
            roi,
            roi_begin,
            setup,
            hier,
            timings,
            iserved: vec![Served::L1; n],
            dserved: vec![Served::L1; n],
            cur: None,
            prev: None,
            mix: [0; 8],
            rep: RepStats::default(),
            rep_ops: FxMap::default(),
            pairs: FxMap::default(),
            dependent: 0,
            instrs: 0,
            data: [0; 3],
            records: 0,
            seen_func: vec![false; nf],
            func_instrs: vec![0; nf],
            profile: Profile::default(),
            fusion,
            fusion_hier,
            exec_id: Vec::new(),
            remap: Vec::new(),
            layouts,
            exec,
            hot_end: vec![0; nf],
            misses,
            map,
        })
    }

    fn flush(&mut self) {
        let Some(p) = self.cur.take() else { return };
        let insn = *self.map.insn(p.idx);
        let extra = match insn.rep {
            Some(rep) => {
                let bytes = p.iterations.saturating_mul(rep.elem as u64);
                let extra = rep_extra_cycles(&insn, p.iterations);
                self.rep.executions += 1;
                self.rep.iterations += p.iterations;
                self.rep.bytes += bytes;
                self.rep.records += p.fetches;
                self.rep.extra_cycles += extra;
                // F2 on movs/stos is a plain `rep`: only cmps/scas have two kinds.
                let ne = rep.ne && Rep::compares(insn.mnemonic);
                let key = ((insn.mnemonic as u32) << 1) | ne as u32;
                let e = self
                    .rep_ops
                    .entry(key)
                    .or_insert(((insn.mnemonic, rep), [0; 3]));
                e.1[0] += 1;
                e.1[1] += p.iterations;
                e.1[2] += bytes;
                extra
            }
            None => 0,
        };
        for (h, t) in &mut self.timings {
            t.step_extra(
                &insn,
                p.taken_before,
                self.iserved[*h],
                self.dserved[*h],
                extra,
            );
        }
        if !self.fusion.is_empty() {
            let d = self.dserved[self.fusion_hier];
            for f in &mut self.fusion {
                if !f.skipped_cur {
                    f.timing
                        .step_extra(&insn, p.taken_before, f.served, d, extra);
                }
            }
        }
        for l in &mut self.layouts {
            if let Some(m) = &mut l.model {
                m.timing
                    .step_extra(&insn, p.taken_before, m.iserved, m.dserved, extra);
            }
        }
    }

    /// Feeds one trace record. An `I` record that repeats the preceding one's address at a
    /// repeated string instruction is another iteration of that execution, not a new
    /// instruction (module documentation).
    #[inline]
    pub fn record(&mut self, r: Record) {
        self.records += 1;
        if r.kind != Kind::Instr {
            let Some(p) = self.cur.as_mut() else { return };
            if !p.data {
                p.data = true;
                p.iterations += 1;
            }
            let k = match r.kind {
                Kind::Load => 0,
                Kind::Store => 1,
                _ => 2,
            };
            self.data[k] += 1;
            for (i, h) in self.hier.iter_mut().enumerate() {
                let s = h.data(r.kind, r.addr, r.size);
                if r.kind != Kind::Store {
                    self.dserved[i] = self.dserved[i].max(s);
                }
            }
            for l in &mut self.layouts {
                if let Some(m) = &mut l.model {
                    let s = m.hier.data(r.kind, r.addr, r.size);
                    if r.kind != Kind::Store {
                        m.dserved = m.dserved.max(s);
                    }
                }
            }
            return;
        }
        if !self.roi.instr(r.addr) {
            self.flush_all();
            self.prev = None;
            return;
        }
        if let (Some(p), Some((prev, prev_addr, _))) = (self.cur.as_mut(), self.prev) {
            if prev_addr == r.addr && self.map.insn(prev).rep.is_some() {
                // The next iteration of the same execution: its data accesses still go to
                // the data caches, nothing else sees it.
                p.fetches += 1;
                p.data = false;
                return;
            }
        }
        self.flush_all();
        let idx = self.map.lookup(r.addr, r.size);
        let insn = *self.map.insn(idx);
        let taken_before = match self.prev {
            Some((_, a, l)) => a + l as u64 != r.addr,
            None => false,
        };
        self.instrs += 1;
        let f = self.map.func(idx);
        // The function misses are charged to: its index, or one past the last for none.
        let fm = if f == NO_FUNC {
            self.map.funcs().len()
        } else {
            f as usize
        };
        let last_byte = r.addr + r.size.max(1) as u64 - 1;
        for (i, h) in self.hier.iter_mut().enumerate() {
            let before = h.l1i.stats.misses();
            self.iserved[i] = h.instr(r.addr, r.size);
            self.dserved[i] = Served::L1;
            if let Some(m) = self.misses.get_mut(i) {
                let lb = h.l1i.line_bits();
                let missed = h.l1i.stats.misses() - before;
                m.fetched(fm, r.addr >> lb, last_byte >> lb, missed);
            }
        }
        for (t, h) in self.exec.iter_mut().zip(&self.hier) {
            t.executed(&h.l1i, r.addr, r.size);
        }
        if let Some(e) = self.hot_end.get_mut(f as usize) {
            let end = r
                .addr
                .saturating_add((insn.len as u64).max(r.size as u64).max(1));
            *e = (*e).max(end);
        }
        if self.setup.instructions {
            self.instruction_stats(idx, &insn, r.addr);
        }
        if !self.fusion.is_empty() {
            self.fusion_fetch(idx, &insn, r.addr, r.size);
        }
        if !self.layouts.is_empty() {
            let fstart = if f == NO_FUNC {
                0
            } else {
                self.map.funcs()[f as usize].start
            };
            for l in &mut self.layouts {
                let a = if f == NO_FUNC {
                    r.addr
                } else {
                    l.layout.map(f, fstart, r.addr)
                };
                let lb = l.l1i.line_bits();
                let (first, last) = (a >> lb, (a + r.size.max(1) as u64 - 1) >> lb);
                let mut missed = 0;
                for b in first..=last {
                    missed += u64::from(!l.l1i.access_line(b, false).hit);
                }
                if let Some(m) = &mut l.misses {
                    m.fetched(fm, first, last, missed);
                }
                if let Some(t) = &mut l.exec {
                    t.executed(&l.l1i, a, r.size);
                }
                if let Some(m) = &mut l.model {
                    m.iserved = m.hier.instr(a, r.size);
                    m.dserved = Served::L1;
                }
            }
        }
        self.cur = Some(Pending {
            idx,
            taken_before,
            fetches: 1,
            iterations: 0,
            data: false,
        });
        self.prev = Some((idx, r.addr, insn.len.max(r.size.min(255) as u8)));
    }

    fn instruction_stats(&mut self, idx: u32, insn: &Insn, addr: u64) {
        self.mix[insn.class as usize] += 1;
        if let Some((p, _, _)) = self.prev {
            let pi = self.map.insn(p);
            if pi.feeds(insn) {
                self.dependent += 1;
                *self
                    .pairs
                    .entry(((pi.mnemonic as u32) << 16) | insn.mnemonic as u32)
                    .or_insert(0) += 1;
            }
        }
        let f = self.map.func(idx);
        if f != NO_FUNC {
            let fu = f as usize;
            self.func_instrs[fu] += 1;
            if !self.seen_func[fu] {
                self.seen_func[fu] = true;
                self.profile.order.push(f);
            }
            if self.map.funcs()[fu].start == addr {
                *self.profile.calls.entry(f).or_insert(0) += 1;
            }
        }
    }

    fn fusion_fetch(&mut self, idx: u32, insn: &Insn, addr: u64, size: u32) {
        let n = self.fusion.len();
        if self.exec_id.len() < self.map.len() {
            self.exec_id.resize(self.map.len(), u32::MAX);
        }
        let mut e = self.exec_id[idx as usize];
        if e == u32::MAX {
            e = (self.remap.len() / n) as u32;
            self.exec_id[idx as usize] = e;
            for f in &self.fusion {
                self.remap.push(f.comp.map(addr));
            }
        }
        let base_served = self.iserved[self.fusion_hier];
        let next_len = if insn.fuse != 0 {
            let j = self.map.lookup(addr + insn.len as u64, 1);
            self.map.insn(j).len as u64
        } else {
            0
        };
        for (k, f) in self.fusion.iter_mut().enumerate() {
            if f.skip == Some(addr) {
                f.skip = None;
                f.skipped_cur = true;
                f.saved += 1;
                continue;
            }
            f.skip = None;
            f.skipped_cur = false;
            let a = self.remap[e as usize * n + k];
            let len = if insn.fuse & f.alt.mask != 0 && next_len > 0 {
                f.skip = Some(addr + insn.len as u64);
                (insn.len as u64).max(next_len)
            } else {
                size.max(1) as u64
            };
            let lb = f.l1i.line_bits();
            let mut miss = false;
            for b in (a >> lb)..=((a + len - 1) >> lb) {
                miss |= !f.l1i.access_line(b, false).hit;
            }
            // The fused runs keep the baseline's L2: a miss is served by L2 unless the
            // baseline fetch went to memory.
            f.served = if miss {
                base_served.max(Served::L2)
            } else {
                Served::L1
            };
        }
    }

    fn flush_all(&mut self) {
        self.flush();
    }

    /// Consumes a whole lackey trace from `input`.
    pub fn run(mut self, input: impl Read) -> Result<Report, AnalyzeError> {
        let summary = LackeyReader::new(input).for_each(|r| self.record(r))?;
        self.finish(summary)
    }

    /// Ends the pass and builds the report.
    pub fn finish(mut self, summary: Summary) -> Result<Report, AnalyzeError> {
        self.flush_all();
        if self.roi.entries == 0 {
            return Err(AnalyzeError::NoRegion(self.roi_begin));
        }
        if self.roi.active() && self.roi_begin != u64::MAX {
            return Err(AnalyzeError::UnfinishedRegion {
                entries: self.roi.entries,
                exits: self.roi.exits,
            });
        }
        let mut pairs: Vec<PairCount> = self
            .pairs
            .iter()
            .map(|(&k, &count)| PairCount {
                first: mnemonic_name(k >> 16),
                second: mnemonic_name(k & 0xffff),
                count,
                share: count as f64 / self.instrs.max(1) as f64,
            })
            .collect();
        pairs.sort_by(|a, b| b.count.cmp(&a.count).then(a.first.cmp(&b.first)));
        let mut functions: Vec<(String, u64)> = self
            .func_instrs
            .iter()
            .enumerate()
            .filter(|(_, &c)| c > 0)
            .map(|(i, &c)| (self.map.funcs()[i].name.clone(), c))
            .collect();
        functions.sort_by_key(|f| std::cmp::Reverse(f.1));
        let mut rep = std::mem::take(&mut self.rep);
        rep.ops = self
            .rep_ops
            .values()
            .map(|&((mnemonic, r), [executions, iterations, bytes])| RepOp {
                name: r.name(mnemonic),
                executions,
                iterations,
                bytes,
            })
            .collect();
        rep.ops
            .sort_by(|a, b| b.bytes.cmp(&a.bytes).then(a.name.cmp(&b.name)));
        let mut code_size = CodeSize::default();
        for (f, &end) in self.hot_end.iter().enumerate() {
            if end == 0 {
                continue;
            }
            let func = &self.map.funcs()[f];
            // Named functions only: an unnamed stretch between symbols (`image@0x…`, where the
            // C library keeps its string functions) has no extent of its own to measure.
            if func.name.contains("@0x") {
                continue;
            }
            let fend = func.start.saturating_add(func.size);
            let hot = end.clamp(func.start, fend);
            code_size.functions += 1;
            code_size.total_bytes += func.size;
            code_size.total_insns += self.map.insns_between(func.start, fend);
            code_size.hot_bytes += hot - func.start;
            code_size.hot_insns += self.map.insns_between(func.start, hot);
        }
        Ok(Report {
            records: self.records,
            instructions: self.instrs,
            data_refs: self.data,
            roi_entries: self.roi.entries,
            caches: self
                .hier
                .iter()
                .map(|h| {
                    (
                        *h.config(),
                        h.l1i.stats,
                        h.l1d.stats,
                        h.l2.as_ref().map(|c| c.stats),
                    )
                })
                .collect(),
            timings: self
                .timings
                .iter()
                .map(|(h, t)| (*h, t.cfg, t.breakdown()))
                .collect(),
            mix: Class::ALL
                .iter()
                .map(|&c| (c, self.mix[c as usize]))
                .collect(),
            rep,
            pairs,
            dependent_pairs: self.dependent,
            fusion: self
                .fusion
                .iter()
                .map(|f| FusionResult {
                    name: f.alt.name.clone(),
                    saved: f.saved,
                    bytes_saved: f.comp.saved(),
                    l1i: f.l1i.stats,
                    breakdown: f.timing.breakdown(),
                })
                .collect(),
            layouts: self
                .layouts
                .iter()
                .map(|l| LayoutResult {
                    name: l.layout.name.clone(),
                    l1i: l.l1i.stats,
                    breakdown: l.model.as_ref().map(|m| m.timing.breakdown()),
                    unused: l.exec.as_ref().map(ExecTracker::unused),
                    function_misses: l
                        .misses
                        .as_ref()
                        .map_or_else(Vec::new, |m| m.result(self.map.funcs())),
                })
                .collect(),
            unused: self.exec.iter().map(ExecTracker::unused).collect(),
            function_misses: self
                .misses
                .iter()
                .map(|m| m.result(self.map.funcs()))
                .collect(),
            code_size,
            profile: self.profile,
            functions,
            messages: summary.messages,
        })
    }
}

fn mnemonic_name(m: u32) -> String {
    let m = iced_x86::Mnemonic::values()
        .nth(m as usize)
        .unwrap_or(iced_x86::Mnemonic::INVALID);
    format!("{m:?}").to_ascii_uppercase()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cache::CacheConfig;

    fn setup() -> Setup {
        let l1 = CacheConfig::new(1024, 2, 32).unwrap();
        Setup {
            hierarchies: vec![HierarchyConfig {
                l1i: l1,
                l1d: l1,
                l2: None,
                mode: crate::cache::Mode::Phyllo,
            }],
            timings: vec![(0, TimingConfig::default())],
            instructions: true,
            ..Default::default()
        }
    }

    const TRACE: &str = "I  00001000,4\n L 00008000,8\nI  00002000,1\nI  00002001,4\n S 00008008,8\nI  00002005,4\nI  00003000,1\nI  00001004,4\n";

    #[test]
    fn counts_only_inside_the_markers() {
        let mut map = CodeMap::new(&[]);
        let a = Analyzer::new(&mut map, RoiFilter::new(0x2000, 0x3000), 0x2000, setup()).unwrap();
        let r = a.run(TRACE.as_bytes()).unwrap();
        assert_eq!(r.instructions, 3);
        assert_eq!(r.data_refs, [0, 1, 0]);
        assert_eq!(r.records, 8);
        assert_eq!(r.roi_entries, 1);
        // 0x2000..0x2009 spans one 32 B line: one cold miss, then hits.
        assert_eq!(r.caches[0].1.misses(), 1);
        assert_eq!(r.caches[0].1.accesses(), 3);
        assert_eq!(r.timings[0].2.instructions, 3);
        let mut map = CodeMap::new(&[]);
        let a = Analyzer::new(&mut map, RoiFilter::whole_program(), u64::MAX, setup()).unwrap();
        assert_eq!(a.run(TRACE.as_bytes()).unwrap().instructions, 6);
    }

    /// At 0x1000: `mov ecx, 16; rep stosb; add rax, rcx; dec edx; jne 0x1000; ret`.
    const LOOP: [u8; 15] = [
        0xb9, 0x10, 0, 0, 0, 0xf3, 0xaa, 0x48, 0x01, 0xc8, 0xff, 0xca, 0x75, 0xf2, 0xc3,
    ];

    /// The lackey trace of `rounds` rounds of [`LOOP`] storing `n` bytes each: one `I` record
    /// and one store per iteration, then the final `I` record of the count check.
    fn loop_trace(rounds: u64, n: u64) -> String {
        let mut t = String::from("==7== Lackey\n");
        for round in 0..rounds {
            t.push_str("I  00001000,5\n");
            for k in 0..n {
                t.push_str(&format!(
                    "I  00001005,2\n S {:08x},1\n",
                    0x8000 + round * n + k
                ));
            }
            t.push_str("I  00001005,2\nI  00001007,3\nI  0000100a,2\nI  0000100c,2\n");
        }
        t.push_str("I  0000100e,1\n");
        t
    }

    fn run_loop(rounds: u64, n: u64) -> Report {
        let img = crate::image::Image::synthetic("fill", 0x1000, &LOOP);
        let mut map = CodeMap::new(&[(&img, 0)]);
        let a = Analyzer::new(&mut map, RoiFilter::whole_program(), u64::MAX, setup()).unwrap();
        a.run(loop_trace(rounds, n).as_bytes()).unwrap()
    }

    #[test]
    fn rep_stosb_counts_once_per_execution() {
        let r = run_loop(3, 16);
        // 5 instructions per round + ret; lackey has 3 × (1 + 17 + 3) + 1 fetches.
        assert_eq!(r.instructions, 16);
        assert_eq!(r.instruction_records(), 64);
        assert_eq!(r.records, 64 + 48);
        assert_eq!(r.timings[0].2.instructions, 16);
        assert_eq!(
            r.rep,
            RepStats {
                executions: 3,
                iterations: 48,
                bytes: 48,
                records: 51,
                extra_cycles: 3, // 16 bytes: 2 cycles, 1 beyond the issue cycle
                ops: vec![RepOp {
                    name: "REP STOSB".into(),
                    executions: 3,
                    iterations: 48,
                    bytes: 48,
                }],
            }
        );
        // One fetch per execution for the i-cache (one 32 B line: one cold miss).
        assert_eq!((r.caches[0].1.accesses(), r.caches[0].1.misses()), (16, 1));
        // Every store of every iteration reaches the data cache: 48 bytes, 2 lines.
        assert_eq!(r.data_refs, [0, 48, 0]);
        assert_eq!(r.caches[0].2.writes, 48);
        assert_eq!(r.caches[0].2.misses(), 2);
        // The mix: mov, add, dec are integer ALU; rep stosb one store per execution.
        assert_eq!(r.mix_share(Class::Store), 3.0 / 16.0);
        assert_eq!(r.mix_share(Class::IntAlu), 9.0 / 16.0);
        assert_eq!(r.mix_share(Class::CondBranch), 3.0 / 16.0);
        // Pairs: MOV→STOSB (rcx), STOSB→ADD (rcx), DEC→JNE (flags); no STOSB→STOSB.
        assert_eq!(r.dependent_pairs, 9);
        let mut pairs: Vec<(&str, &str, u64)> = r
            .pairs
            .iter()
            .map(|p| (p.first.as_str(), p.second.as_str(), p.count))
            .collect();
        pairs.sort();
        assert_eq!(
            pairs,
            [("DEC", "JNE", 3), ("MOV", "STOSB", 3), ("STOSB", "ADD", 3)]
        );
        assert!(r.pairs.iter().all(|p| p.share <= 3.0 / 16.0));
        assert_eq!(r.functions, [("fill".to_string(), 16)]);
        assert_eq!(r.profile.calls.values().sum::<u64>(), 3);
    }

    #[test]
    fn rep_iterations_cost_cycles_not_instructions() {
        let (short, long) = (run_loop(3, 16), run_loop(3, 160));
        assert_eq!(short.instructions, long.instructions);
        assert_eq!(long.rep.iterations, 480);
        assert_eq!(long.rep.bytes, 480);
        // 160 bytes: 20 cycles, 19 beyond issue, per execution.
        assert_eq!(long.rep.extra_cycles, 57);
        let (a, b) = (short.timings[0].2, long.timings[0].2);
        assert_eq!(a.instructions, b.instructions);
        assert_eq!(b.cpu - a.cpu, 57 - 3);
        assert!(b.cpi > a.cpi);
        assert_eq!(long.caches[0].2.writes, 480);
        assert_eq!(long.caches[0].1.accesses(), 16);
    }

    /// valgrind 3.19 lackey's own trace of a C function (gcc -O1, inline assembly):
    /// `rep stosb` with rcx = 5, `rep movsb` with rcx = 3, `rep stosb` with rcx = 0, and a
    /// `repe cmpsb` with rcx = 4 that stops at the second byte. callgrind counts 33 `Ir`.
    #[test]
    fn real_lackey_rep_trace() {
        const MAIN: [u8; 82] = [
            0xb8, 0x07, 0, 0, 0, 0x48, 0x8d, 0x15, 0x4b, 0x2f, 0, 0, 0x48, 0x89, 0xd7, 0xb9, 0x05,
            0, 0, 0, 0x90, 0x90, 0xf3, 0xaa, 0x90, 0x90, 0x4c, 0x8d, 0x05, 0xf6, 0x2e, 0, 0, 0x48,
            0x89, 0xd7, 0x4c, 0x89, 0xc6, 0xb9, 0x03, 0, 0, 0, 0xf3, 0xa4, 0x48, 0x89, 0xd7, 0xb9,
            0, 0, 0, 0, 0xf3, 0xaa, 0xc6, 0x05, 0x19, 0x2f, 0, 0, 0x01, 0x48, 0x89, 0xd7, 0x4c,
            0x89, 0xc6, 0xb9, 0x04, 0, 0, 0, 0xf3, 0xa6, 0xb8, 0, 0, 0, 0, 0xc3,
        ];
        #[rustfmt::skip]
        const T: [&str; 49] = [
            "I  00109129,5", "I  0010912e,7", "I  00109135,3", "I  00109138,5", "I  0010913d,1",
            "I  0010913e,1", "I  0010913f,2", " S 0010c080,1", "I  0010913f,2", " S 0010c081,1",
            "I  0010913f,2", " S 0010c082,1", "I  0010913f,2", " S 0010c083,1", "I  0010913f,2",
            " S 0010c084,1", "I  0010913f,2", "I  00109141,1", "I  00109142,1", "I  00109143,7",
            "I  0010914a,3", "I  0010914d,3", "I  00109150,5", "I  00109155,2", " L 0010c040,1",
            " S 0010c080,1", "I  00109155,2", " L 0010c041,1", " S 0010c081,1", "I  00109155,2",
            " L 0010c042,1", " S 0010c082,1", "I  00109155,2", "I  00109157,3", "I  0010915a,5",
            "I  0010915f,2", "I  00109161,7", " S 0010c081,1", "I  00109168,3", "I  0010916b,3",
            "I  0010916e,5", "I  00109173,2", " L 0010c080,1", " L 0010c040,1", "I  00109173,2",
            " L 0010c081,1", " L 0010c041,1", "I  00109175,5", "I  0010917a,1",
        ];
        let img = crate::image::Image::synthetic("main", 0x1129, &MAIN);
        let mut map = CodeMap::new(&[(&img, 0x108000)]);
        let a = Analyzer::new(&mut map, RoiFilter::whole_program(), u64::MAX, setup()).unwrap();
        let r = a.run(format!("{}\n", T.join("\n")).as_bytes()).unwrap();
        assert_eq!(r.instruction_records(), 33);
        assert_eq!(r.instructions, 24);
        assert_eq!(r.data_refs, [7, 9, 0]);
        assert_eq!(
            (r.rep.executions, r.rep.iterations, r.rep.bytes),
            (4, 10, 10)
        );
        assert_eq!(r.rep.records, 13);
        let ops: Vec<(&str, u64, u64, u64)> = r
            .rep
            .ops
            .iter()
            .map(|o| (o.name.as_str(), o.executions, o.iterations, o.bytes))
            .collect();
        assert_eq!(
            ops,
            [
                ("REP STOSB", 2, 5, 5),
                ("REP MOVSB", 1, 3, 3),
                ("REPE CMPSB", 1, 2, 2)
            ]
        );
        assert_eq!(r.caches[0].2.accesses(), 16);
        // One fetch per instruction, two for the two that straddle a 32 B line (both rep
        // stosb at 0x10913f and 0x10915f): lackey's 33 fetches would have been 40 accesses.
        assert_eq!(r.caches[0].1.accesses(), 26);
        assert!(!r.pairs.iter().any(|p| p.first == p.second));
    }

    #[test]
    fn region_errors() {
        let mut map = CodeMap::new(&[]);
        let a = Analyzer::new(&mut map, RoiFilter::new(0x9000, 0x3000), 0x9000, setup()).unwrap();
        assert!(matches!(
            a.run(TRACE.as_bytes()),
            Err(AnalyzeError::NoRegion(0x9000))
        ));
        // The trace stops inside the region (a crash or a truncated pipe).
        let cut = &TRACE[..TRACE.find("I  00003000").unwrap()];
        let mut map = CodeMap::new(&[]);
        let a = Analyzer::new(&mut map, RoiFilter::new(0x2000, 0x3000), 0x2000, setup()).unwrap();
        assert!(matches!(
            a.run(cut.as_bytes()),
            Err(AnalyzeError::UnfinishedRegion {
                entries: 1,
                exits: 0
            })
        ));
        let mut map = CodeMap::new(&[]);
        let a = Analyzer::new(&mut map, RoiFilter::new(0x2000, 0x3000), 0x2000, setup()).unwrap();
        assert!(matches!(
            a.run(&TRACE.as_bytes()[..20]),
            Err(AnalyzeError::Trace(TraceError::Truncated { .. }))
        ));
        let mut map = CodeMap::new(&[]);
        let bad = Setup {
            timings: vec![(3, TimingConfig::default())],
            ..setup()
        };
        assert!(matches!(
            Analyzer::new(&mut map, RoiFilter::whole_program(), 0, bad),
            Err(AnalyzeError::Setup(_))
        ));
    }

    #[test]
    fn unused_half_of_every_line() {
        // Straight-line code executing the first 16 bytes of each of 8 lines of 32 B (four
        // 4-byte instructions, then a jump to the next line).
        let mut t = String::new();
        for round in 0..3 {
            for line in 0..8u64 {
                for k in 0..4u64 {
                    t.push_str(&format!("I  {:08x},4\n", 0x2000 + 32 * line + 4 * k));
                }
                if round == 0 && line == 0 {
                    t.push_str(" L 00008000,8\n");
                }
            }
        }
        let mut s = setup();
        let cg = HierarchyConfig {
            mode: crate::cache::Mode::Cachegrind,
            ..s.hierarchies[0]
        };
        s.hierarchies.push(cg);
        let plain = s.clone();
        s.unused = true;
        let mut map = CodeMap::new(&[]);
        let a = Analyzer::new(&mut map, RoiFilter::whole_program(), u64::MAX, s).unwrap();
        let r = a.run(t.as_bytes()).unwrap();
        let half = Unused {
            fetched_bytes: 256,
            unused_bytes: 128,
        };
        assert_eq!(r.unused, [half, half]);
        assert_eq!(r.unused[0].fraction(), 0.5);
        // Not asked for: not reported.
        let mut map = CodeMap::new(&[]);
        let a = Analyzer::new(&mut map, RoiFilter::whole_program(), u64::MAX, plain).unwrap();
        assert!(a.run(t.as_bytes()).unwrap().unused.is_empty());
        // An L1I line longer than a tracker follows is a setup error, not a panic.
        let mut long = setup();
        long.hierarchies[0].l1i = CacheConfig::new(4096, 2, 256).unwrap();
        long.unused = true;
        let mut map = CodeMap::new(&[]);
        assert!(matches!(
            Analyzer::new(&mut map, RoiFilter::whole_program(), u64::MAX, long),
            Err(AnalyzeError::Geometry(GeometryError::LineTooLong { .. }))
        ));
    }

    /// Four functions of 64 B at 0x1000 (256 B in all): `mov rcx, [rax]; add rcx, 1;` 14 ×
    /// `nop dword ptr [rax]; ret`.
    fn four_functions() -> crate::image::Image {
        let mut f = vec![0x48, 0x8b, 0x08, 0x48, 0x83, 0xc1, 0x01];
        for _ in 0..14 {
            f.extend_from_slice(&[0x0f, 0x1f, 0x40, 0x00]);
        }
        f.push(0xc3);
        assert_eq!(f.len(), 64);
        let code: Vec<u8> = (0..4).flat_map(|_| f.iter().copied()).collect();
        crate::image::Image::synthetic_funcs(
            0x1000,
            &code,
            &[
                ("f0", 0, 64),
                ("f1", 64, 64),
                ("f2", 128, 64),
                ("f3", 192, 64),
            ],
        )
    }

    /// `rounds` rounds of the four functions, each loading from one data line.
    fn four_functions_trace(rounds: u64) -> String {
        let mut t = String::new();
        for _ in 0..rounds {
            for k in 0..4u64 {
                let b = 0x1000 + 64 * k;
                t.push_str(&format!(
                    "I  {b:08x},3\n L {:08x},8\nI  {:08x},4\n",
                    0x8000 + 8 * k,
                    b + 3
                ));
                for j in 0..14 {
                    t.push_str(&format!("I  {:08x},4\n", b + 7 + 4 * j));
                }
                t.push_str(&format!("I  {:08x},1\n", b + 63));
            }
        }
        t
    }

    #[test]
    fn layouts_with_timing() {
        use crate::layout::LayoutKind;
        let img = four_functions();
        let trace = four_functions_trace(50);
        let mut map = CodeMap::new(&[(&img, 0)]);
        // A 256 B direct-mapped i-cache holds all four functions as linked; the bad layout
        // puts them all on its first two sets.
        let g = |s: &str| CacheConfig::parse(s).unwrap();
        let h = HierarchyConfig {
            l1i: g("256:1:32"),
            l1d: g("1k:1:32"),
            l2: Some(g("8k:1:32")),
            mode: crate::cache::Mode::Phyllo,
        };
        let t = TimingConfig::alpha21064();
        let first = Setup {
            hierarchies: vec![h],
            timings: vec![(0, t)],
            instructions: true,
            unused: true,
            ..Default::default()
        };
        let a = Analyzer::new(
            &mut map,
            RoiFilter::whole_program(),
            u64::MAX,
            first.clone(),
        )
        .unwrap();
        let r1 = a.run(trace.as_bytes()).unwrap();
        assert_eq!(r1.profile.order, [0, 1, 2, 3]);
        let period = h.l1i.sets() * h.l1i.line as u64;
        let layouts = [
            LayoutKind::Original,
            LayoutKind::Bipartite,
            LayoutKind::Bad,
            LayoutKind::InvocationOrder,
        ]
        .iter()
        .map(|k| Layout::compute(k, map.funcs(), &r1.profile, period, 50, 0x1000))
        .collect();
        let second = Setup {
            layouts: Some(LayoutSetup {
                l1i: h.l1i,
                layouts,
                timing: Some((h, t)),
            }),
            ..first
        };
        let a = Analyzer::new(&mut map, RoiFilter::whole_program(), u64::MAX, second).unwrap();
        let r = a.run(trace.as_bytes()).unwrap();
        let names: Vec<&str> = r.layouts.iter().map(|l| l.name.as_str()).collect();
        assert_eq!(names, ["original", "bipartite", "bad", "invocation order"]);
        let bd = |k: usize| r.layouts[k].breakdown.unwrap();
        // The original layout is the plain model on the same hierarchy.
        assert_eq!(bd(0), r.timings[0].2);
        assert_eq!(r.layouts[0].l1i, r.caches[0].1);
        assert_eq!(r.layouts[0].unused, Some(r.unused[0]));
        assert_eq!(bd(0).instructions, 50 * 4 * 17);
        // Conflicts cost memory cycles, not instruction cycles.
        assert_eq!(r.layouts[0].l1i.misses(), 8);
        assert_eq!(r.layouts[1].l1i.misses(), 8);
        assert_eq!(r.layouts[2].l1i.misses(), 50 * 8);
        assert!(bd(2).mcpi > bd(0).mcpi + 0.2, "{:?} {:?}", bd(2), bd(0));
        assert!(bd(2).mcpi > bd(1).mcpi + 0.2);
        assert_eq!(bd(2).icpi, bd(0).icpi);
        assert_eq!(bd(1), bd(3));
        // Every byte of the functions executes: nothing fetched goes unused.
        for l in &r.layouts {
            assert_eq!(l.unused.unwrap().unused_bytes, 0, "{}", l.name);
        }
        assert_eq!(r.layouts[2].unused.unwrap().fetched_bytes, 50 * 8 * 32);
        // Without timing (nor unused): the i-cache alone, as before.
        let only = Setup {
            layouts: Some(LayoutSetup {
                l1i: h.l1i,
                layouts: vec![Layout::compute(
                    &LayoutKind::Bad,
                    map.funcs(),
                    &r1.profile,
                    period,
                    50,
                    0x1000,
                )],
                timing: None,
            }),
            ..Default::default()
        };
        let a = Analyzer::new(&mut map, RoiFilter::whole_program(), u64::MAX, only).unwrap();
        let r = a.run(trace.as_bytes()).unwrap();
        assert_eq!(
            r.layouts,
            [LayoutResult {
                name: "bad".into(),
                l1i: r.layouts[0].l1i,
                breakdown: None,
                unused: None,
                function_misses: vec![],
            }]
        );
        assert_eq!(r.layouts[0].l1i.misses(), 400);
    }

    #[test]
    fn misses_attributed_to_functions() {
        use crate::layout::LayoutKind;
        let img = four_functions();
        let trace = four_functions_trace(50);
        let mut map = CodeMap::new(&[(&img, 0)]);
        let g = |s: &str| CacheConfig::parse(s).unwrap();
        let h = HierarchyConfig {
            l1i: g("256:1:32"),
            l1d: g("1k:1:32"),
            l2: None,
            mode: crate::cache::Mode::Phyllo,
        };
        let first = Setup {
            hierarchies: vec![h],
            instructions: true,
            function_misses: true,
            ..Default::default()
        };
        let a = Analyzer::new(&mut map, RoiFilter::whole_program(), u64::MAX, first).unwrap();
        let r1 = a.run(trace.as_bytes()).unwrap();
        // As linked the four functions fit: each misses its two lines once (cold).
        assert_eq!(r1.function_misses.len(), 1);
        let f = &r1.function_misses[0];
        assert_eq!(f.len(), 4);
        for (k, m) in f.iter().enumerate() {
            // Equal misses: most instructions, then the name, decides the order.
            assert_eq!(m.name, format!("f{k}"));
            assert_eq!((m.size, m.lines, m.misses), (64, 2, 2));
            assert_eq!(m.instructions, 50 * 17);
        }
        assert_eq!(
            f.iter().map(|m| m.misses).sum::<u64>(),
            r1.caches[0].1.misses()
        );
        // Not asked for: nothing attributed.
        let mut map2 = CodeMap::new(&[(&img, 0)]);
        let plain = Setup {
            hierarchies: vec![h],
            ..Default::default()
        };
        let a = Analyzer::new(&mut map2, RoiFilter::whole_program(), u64::MAX, plain).unwrap();
        assert!(a.run(trace.as_bytes()).unwrap().function_misses.is_empty());
        // The bad layout puts every function on the first two sets, f3 twice as far: all
        // four conflict, so every line misses every round, and the misses add up to the
        // layout's i-cache's.
        let period = h.l1i.sets() * h.l1i.line as u64;
        let mut p = r1.profile.clone();
        p.order = vec![0, 1, 2, 3];
        let bad = Layout::compute(&LayoutKind::Bad, map.funcs(), &p, period, 50, 0x1000);
        let second = Setup {
            layouts: Some(LayoutSetup {
                l1i: h.l1i,
                layouts: vec![bad],
                timing: None,
            }),
            function_misses: true,
            ..Default::default()
        };
        let a = Analyzer::new(&mut map, RoiFilter::whole_program(), u64::MAX, second).unwrap();
        let r = a.run(trace.as_bytes()).unwrap();
        let l = &r.layouts[0];
        assert_eq!(l.function_misses.len(), 4);
        assert!(l
            .function_misses
            .iter()
            .all(|m| m.misses == 50 * 2 && m.lines == 2));
        assert_eq!(
            l.function_misses.iter().map(|m| m.misses).sum::<u64>(),
            l.l1i.misses()
        );
    }

    #[test]
    fn code_size_of_executed_functions() {
        // f0: 4 × `nop dword ptr [rax]`, `ret`, then 3 × `mov eax, 1` outlined past the ret
        // (32 B, 8 instructions); f1: 2 nops and `ret` (9 B), then int3 padding; f2 never runs.
        let nop = [0x0f, 0x1f, 0x40, 0x00];
        let mov = [0xb8, 0x01, 0x00, 0x00, 0x00];
        let mut code = Vec::new();
        for _ in 0..4 {
            code.extend_from_slice(&nop);
        }
        code.push(0xc3);
        for _ in 0..3 {
            code.extend_from_slice(&mov);
        }
        code.extend_from_slice(&nop);
        code.extend_from_slice(&nop);
        code.push(0xc3);
        code.resize(48, 0xcc);
        code.extend_from_slice(&[0x90; 16]);
        let img = crate::image::Image::synthetic_funcs(
            0x1000,
            &code,
            &[("f0", 0, 32), ("f1", 32, 9), ("f2", 48, 16)],
        );
        let mut map = CodeMap::new(&[(&img, 0)]);
        assert_eq!(map.insns_between(0x1000, 0x1020), 8);
        let mut t = String::new();
        for _ in 0..2 {
            for a in [0x1000, 0x1004, 0x1008, 0x100c] {
                t.push_str(&format!("I  {a:08x},4\n"));
            }
            t.push_str("I  00001010,1\nI  00001020,4\nI  00001024,4\nI  00001028,1\n");
        }
        let a = Analyzer::new(
            &mut map,
            RoiFilter::whole_program(),
            u64::MAX,
            Setup::default(),
        )
        .unwrap();
        let r = a.run(t.as_bytes()).unwrap();
        assert_eq!(
            r.code_size,
            CodeSize {
                functions: 2,
                total_bytes: 41,
                total_insns: 11,
                hot_bytes: 26,
                hot_insns: 8,
            }
        );
        // Only the region counts: entered at f1, left at f0's next entry.
        let mut map = CodeMap::new(&[(&img, 0)]);
        let a = Analyzer::new(
            &mut map,
            RoiFilter::new(0x1020, 0x1000),
            0x1020,
            Setup::default(),
        )
        .unwrap();
        let r = a.run(format!("{t}I  00001000,4\n").as_bytes()).unwrap();
        assert_eq!(
            r.code_size,
            CodeSize {
                functions: 1,
                total_bytes: 9,
                total_insns: 3,
                hot_bytes: 9,
                hot_insns: 3,
            }
        );
    }
}
