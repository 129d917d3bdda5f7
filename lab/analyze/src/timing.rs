//! Timing model: issue width, latencies and miss penalties → CPU, data-access and
//! instruction-access time; CPI, iCPI and mCPI. (Seed 000 is Mosberger et al., "Analysis of
//! Techniques to Improve Protocol Processing Latency".)
//!
//! Seed 003 §2.1 extends SimpleScalar's sim-outorder to split execution time into *CPU
//! execution time* (instructions executing without stalls for memory), *data access time*
//! (stalls on data-cache misses) and *instruction access time* (stalls on i-cache misses), the
//! overlap of data and instruction stalls counted as data access time. Seed 000 §4.3 defines
//! CPI = cycles / trace length, iCPI = CPI with a perfect memory system, mCPI = CPI − iCPI.
//!
//! The model is an in-order, `issue_width`-wide pipeline with a decoupled front end:
//! - the front end fetches in program order; an i-cache miss delays it by the L2 latency (or the
//!   memory latency when L2 misses too); a taken control transfer costs a fixed bubble (as seed
//!   000's iCPI simulator does); it runs at most `fetch_queue` instructions ahead of issue, so
//!   i-cache misses can overlap data stalls;
//! - an instruction issues when fetched, when its source registers and flags are ready, and
//!   when fewer than `issue_width` instructions issued in that cycle; branches are predicted
//!   perfectly (Xie, Zhao and Bhuyan, "Architectural Analysis and Instruction-Set Optimization for
//!   Design of Network Protocol Processors" (seed 003) finds its bimodal predictor almost as good
//!   as a perfect one), so they never wait for their operands; results are ready after the
//!   instruction's latency, plus for loads the data-access latency (L1 hit latency, or the
//!   L2/memory latency on a miss: non-blocking, stall on use); stores retire into a write buffer
//!   and never stall;
//! - a repeated string instruction (`rep stosb`, `rep movsq`, `repe cmpsb`, ...) is one
//!   instruction of the trace length however many iterations it runs (see
//!   [`crate::analysis::RepStats`]); its iterations are charged as CPU cycles instead,
//!   [`rep_cycles`]: one cycle per 8 bytes for `movs`/`stos`/`lods`/`ins`/`outs` (fast-string
//!   microcode moves wide chunks whatever the element size; a quadword per cycle is a simple,
//!   conservative rate that leaves out its start-up cost), one cycle per element for
//!   `cmps`/`scas` (they test their condition after every element). The instruction holds the
//!   issue stage for those cycles (it is microcoded: nothing issues beside or after it
//!   meanwhile) and its results (`rcx`, `rdi`, `rsi`, flags) are ready that much later. The
//!   data accesses of all its iterations go through the caches; the timing model sees the
//!   slowest one, once, as for any instruction.
//!
//! Every trace is run through three copies of the pipeline: *perfect* memory (every access
//! hits L1; its time is the CPU time and gives iCPI), *perfect i-cache* (real data caches), and
//! *real*. Data access time = perfect-i-cache − perfect; instruction access time = real −
//! perfect-i-cache. Stalls that overlap therefore count as data access, as in the seed.

use crate::cache::Served;
use crate::insn::{Class, Insn, Rep};

/// Parameters of the timing model.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct TimingConfig {
    /// Instructions issued per cycle (seed 003's "ILP", default 4).
    pub issue_width: u32,
    /// Load-to-use latency on an L1 hit, cycles.
    pub l1_latency: u32,
    /// Penalty of an L1 miss that hits L2, cycles (seed 003: 6).
    pub l2_latency: u32,
    /// Penalty of a miss in every level, cycles.
    pub mem_latency: u32,
    /// Bubble after a taken control transfer, cycles.
    pub taken_penalty: u32,
    /// How many instructions the front end may run ahead of issue.
    pub fetch_queue: u32,
}

impl Default for TimingConfig {
    fn default() -> Self {
        TimingConfig {
            issue_width: 4,
            l1_latency: 1,
            l2_latency: 6,
            mem_latency: 60,
            taken_penalty: 1,
            fetch_queue: 16,
        }
    }
}

impl TimingConfig {
    /// The DEC Alpha 21064 of seed 000 §2.1, for [`crate::cache::HierarchyConfig::alpha21064`]:
    /// - single issue: the 21064 can dual-issue, but "for integer-only systems code, it is
    ///   therefore more accurate to view the CPU as a single-issue processor";
    /// - the lmbench load-to-use latencies the seed reports — 2, 10 and 48 cycles for the
    ///   d-cache, the b-cache and main memory. In this model a load is ready one cycle after it
    ///   issues plus `l1_latency`, plus `l2_latency` (b-cache) or `mem_latency` (memory) on a
    ///   miss, so `l1_latency` 1, `l2_latency` 8 and `mem_latency` 46 give exactly 2, 10 and 48;
    ///   an i-cache miss delays the front end by 8 or 46 cycles;
    /// - a one-cycle bubble after a taken control transfer (the seed's iCPI simulator adds a
    ///   fixed penalty per taken branch);
    /// - a fetch queue of two instructions: the 21064's front end delivers one aligned pair of
    ///   instructions at a time to an in-order issue stage, so it runs at most two instructions
    ///   ahead of issue and an i-cache miss hides little behind a data stall.
    pub fn alpha21064() -> Self {
        TimingConfig {
            issue_width: 1,
            l1_latency: 1,
            l2_latency: 8,
            mem_latency: 46,
            taken_penalty: 1,
            fetch_queue: 2,
        }
    }

    /// The same with another issue width.
    pub fn with_width(mut self, w: u32) -> Self {
        self.issue_width = w.max(1);
        self
    }

    fn penalty(&self, s: Served) -> u64 {
        match s {
            Served::L1 => 0,
            Served::L2 => self.l2_latency as u64,
            Served::Mem => self.mem_latency as u64,
        }
    }
}

/// Cycles a repeated string instruction takes for `iterations` iterations (at least 1, the
/// issue cycle of any instruction): `ceil(iterations × element size / 8)` for `movs`, `stos`,
/// `lods`, `ins`, `outs`; `iterations` for `cmps` and `scas`. 1 for any other instruction.
pub fn rep_cycles(insn: &Insn, iterations: u64) -> u64 {
    let Some(rep) = insn.rep else { return 1 };
    let c = if Rep::compares(insn.mnemonic) {
        iterations
    } else {
        iterations.saturating_mul(rep.elem as u64).div_ceil(8)
    };
    c.max(1)
}

/// The cycles of [`rep_cycles`] beyond the issue cycle every instruction takes.
pub fn rep_extra_cycles(insn: &Insn, iterations: u64) -> u64 {
    rep_cycles(insn, iterations) - 1
}

const FLAGS: usize = 48;
const RING: usize = 64;

/// One copy of the pipeline.
#[derive(Clone, Debug)]
pub struct Pipe {
    cycle: u64,
    in_cycle: u32,
    ready: [u64; FLAGS + 1],
    fetch: u64,
    ring: [u64; RING],
    n: u64,
}

impl Default for Pipe {
    fn default() -> Self {
        Pipe {
            cycle: 0,
            in_cycle: 0,
            ready: [0; FLAGS + 1],
            fetch: 0,
            ring: [0; RING],
            n: 0,
        }
    }
}

impl Pipe {
    /// Issues one instruction; `ifetch` and `data` say where its fetch and its loads were served.
    #[inline]
    pub fn step(
        &mut self,
        cfg: &TimingConfig,
        insn: &Insn,
        taken_before: bool,
        ifetch: Served,
        data: Served,
    ) {
        self.step_extra(cfg, insn, taken_before, ifetch, data, 0);
    }

    /// [`Pipe::step`] for an instruction that holds the issue stage `extra` cycles beyond its
    /// issue cycle (a repeated string instruction, [`rep_extra_cycles`]): nothing issues until
    /// they have passed, and its results are ready `extra` cycles later.
    #[inline]
    pub fn step_extra(
        &mut self,
        cfg: &TimingConfig,
        insn: &Insn,
        taken_before: bool,
        ifetch: Served,
        data: Served,
        extra: u64,
    ) {
        let q = (cfg.fetch_queue as usize).clamp(1, RING);
        let slot = (self.n as usize) % q;
        let gate = if self.n >= q as u64 {
            self.ring[slot]
        } else {
            0
        };
        let mut f = self.fetch.max(gate) + cfg.penalty(ifetch);
        if taken_before {
            f += cfg.taken_penalty as u64;
        }
        self.fetch = f;
        let mut t = self.cycle.max(f);
        // Branches are predicted (seed 003: its bimodal predictor is almost as good as a
        // perfect one): they never wait for their operands.
        let predicted = matches!(
            insn.class,
            Class::CondBranch | Class::UncondBranch | Class::CallRet
        );
        if !predicted {
            let mut r = insn.reads;
            while r != 0 {
                let b = r.trailing_zeros() as usize;
                t = t.max(self.ready[b]);
                r &= r - 1;
            }
            if insn.flags_read != 0 {
                t = t.max(self.ready[FLAGS]);
            }
        }
        if t == self.cycle && self.in_cycle >= cfg.issue_width {
            t += 1;
        }
        if t > self.cycle {
            self.cycle = t;
            self.in_cycle = 0;
        }
        self.in_cycle += 1;
        if extra > 0 {
            self.cycle = t + extra;
            self.in_cycle = cfg.issue_width;
        }
        let mut lat = insn.latency as u64 + extra;
        if insn.class == Class::Load {
            lat += cfg.l1_latency as u64 + cfg.penalty(data);
        }
        let mut w = insn.writes;
        while w != 0 {
            let b = w.trailing_zeros() as usize;
            self.ready[b] = t + lat;
            w &= w - 1;
        }
        if insn.flags_written != 0 {
            self.ready[FLAGS] = t + lat;
        }
        self.ring[slot] = t;
        self.n += 1;
    }

    /// Cycles so far (the last issue cycle + 1).
    pub fn cycles(&self) -> u64 {
        if self.n == 0 {
            0
        } else {
            self.cycle + 1
        }
    }

    /// Instructions issued.
    pub fn instructions(&self) -> u64 {
        self.n
    }
}

/// The three pipelines of one timing configuration (perfect, perfect i-cache, real).
#[derive(Clone, Debug, Default)]
pub struct TimingRun {
    /// Parameters.
    pub cfg: TimingConfig,
    perfect: Pipe,
    perfect_i: Pipe,
    real: Pipe,
}

/// Execution time split as seed 003 Figure 4 does, and seed 000's CPI figures.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Breakdown {
    /// Instructions (trace length; a repeated string instruction counts once per execution).
    pub instructions: u64,
    /// Total cycles.
    pub cycles: u64,
    /// CPU execution cycles (perfect memory).
    pub cpu: u64,
    /// Data access cycles (overlap with instruction stalls included).
    pub data: u64,
    /// Instruction access cycles.
    pub instr: u64,
    /// Cycles per instruction.
    pub cpi: f64,
    /// CPI with a perfect memory system.
    pub icpi: f64,
    /// Memory CPI = CPI − iCPI.
    pub mcpi: f64,
}

impl TimingRun {
    /// A run with parameters `cfg`.
    pub fn new(cfg: TimingConfig) -> Self {
        TimingRun {
            cfg,
            ..Default::default()
        }
    }

    /// Feeds one instruction.
    #[inline]
    pub fn step(&mut self, insn: &Insn, taken_before: bool, ifetch: Served, data: Served) {
        self.step_extra(insn, taken_before, ifetch, data, 0);
    }

    /// Feeds one instruction that holds the issue stage `extra` more cycles
    /// ([`Pipe::step_extra`]): the iterations of a repeated string instruction.
    #[inline]
    pub fn step_extra(
        &mut self,
        insn: &Insn,
        taken_before: bool,
        ifetch: Served,
        data: Served,
        extra: u64,
    ) {
        self.perfect
            .step_extra(&self.cfg, insn, taken_before, Served::L1, Served::L1, extra);
        self.perfect_i
            .step_extra(&self.cfg, insn, taken_before, Served::L1, data, extra);
        self.real
            .step_extra(&self.cfg, insn, taken_before, ifetch, data, extra);
    }

    /// The breakdown so far.
    pub fn breakdown(&self) -> Breakdown {
        let n = self.real.instructions();
        let cpu = self.perfect.cycles();
        let pi = self.perfect_i.cycles().max(cpu);
        let real = self.real.cycles().max(pi);
        let per = |c: u64| if n == 0 { 0.0 } else { c as f64 / n as f64 };
        Breakdown {
            instructions: n,
            cycles: real,
            cpu,
            data: pi - cpu,
            instr: real - pi,
            cpi: per(real),
            icpi: per(cpu),
            mcpi: per(real) - per(cpu),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use iced_x86::Mnemonic;

    fn alu(reads: u64, writes: u64) -> Insn {
        Insn {
            reads,
            writes,
            class: Class::IntAlu,
            mnemonic: Mnemonic::Add,
            ..Insn::unknown(3)
        }
    }

    #[test]
    fn width_and_dependences() {
        let cfg = TimingConfig::default().with_width(2);
        let mut p = Pipe::default();
        // Four independent instructions on a 2-wide machine: 2 cycles.
        for k in 0..4 {
            p.step(&cfg, &alu(0, 1 << k), false, Served::L1, Served::L1);
        }
        assert_eq!(p.cycles(), 2);
        // A chain of 4 dependent ones: one per cycle.
        let mut p = Pipe::default();
        for _ in 0..4 {
            p.step(&cfg, &alu(1, 1), false, Served::L1, Served::L1);
        }
        assert_eq!(p.cycles(), 4);
    }

    #[test]
    fn branches_do_not_wait() {
        let cfg = TimingConfig {
            issue_width: 1,
            ..Default::default()
        };
        let mut p = Pipe::default();
        let load = Insn {
            class: Class::Load,
            writes: 1,
            ..alu(0, 1)
        };
        p.step(&cfg, &load, false, Served::L1, Served::Mem);
        let jcc = Insn {
            class: Class::CondBranch,
            reads: 1,
            flags_read: 1,
            ..alu(0, 0)
        };
        p.step(&cfg, &jcc, false, Served::L1, Served::L1);
        assert_eq!(p.cycles(), 2);
    }

    #[test]
    fn repeated_string_cost() {
        let stos = |elem: u8, mnemonic: Mnemonic| Insn {
            class: Class::Store,
            mnemonic,
            reads: 0b11,
            writes: 0b11,
            rep: Some(Rep { ne: false, elem }),
            ..Insn::unknown(2)
        };
        let stosb = stos(1, Mnemonic::Stosb);
        assert_eq!(rep_cycles(&stosb, 0), 1);
        assert_eq!(rep_cycles(&stosb, 5), 1);
        assert_eq!(rep_cycles(&stosb, 1500), 188);
        assert_eq!(rep_cycles(&stos(8, Mnemonic::Stosq), 188), 188);
        assert_eq!(rep_cycles(&stos(1, Mnemonic::Cmpsb), 40), 40);
        assert_eq!(rep_extra_cycles(&stosb, 64), 7);
        assert_eq!(rep_extra_cycles(&alu(1, 1), 1000), 0);
        // A 4-wide machine: rep stosb of 64 bytes holds issue 8 cycles, then two independent
        // instructions issue together, and one that reads rcx waits for it.
        let cfg = TimingConfig::default();
        let mut p = Pipe::default();
        p.step_extra(&cfg, &stosb, false, Served::L1, Served::L1, 7);
        assert_eq!(p.cycles(), 8);
        p.step(&cfg, &alu(0, 1 << 4), false, Served::L1, Served::L1);
        p.step(&cfg, &alu(0, 1 << 5), false, Served::L1, Served::L1);
        assert_eq!(p.cycles(), 9);
        let mut q = Pipe::default();
        q.step_extra(&cfg, &stosb, false, Served::L1, Served::L1, 7);
        q.step(&cfg, &alu(0b10, 1 << 4), false, Served::L1, Served::L1);
        assert_eq!(q.cycles(), 9);
        assert_eq!(q.instructions(), 2);
    }

    #[test]
    fn alpha21064_single_issue() {
        let cfg = TimingConfig::alpha21064();
        assert_eq!(
            (
                cfg.issue_width,
                cfg.l1_latency,
                cfg.l2_latency,
                cfg.mem_latency
            ),
            (1, 1, 8, 46)
        );
        // Four independent instructions: four cycles; a load used at once waits 1 + 1 (the
        // d-cache's 2 cycles load-to-use).
        let mut p = Pipe::default();
        for k in 0..4 {
            p.step(&cfg, &alu(0, 1 << k), false, Served::L1, Served::L1);
        }
        assert_eq!(p.cycles(), 4);
        let load = Insn {
            class: Class::Load,
            ..alu(0, 1)
        };
        let mut q = Pipe::default();
        q.step(&cfg, &load, false, Served::L1, Served::L1);
        q.step(&cfg, &alu(1, 2), false, Served::L1, Served::L1);
        assert_eq!(q.cycles(), 3);
        // The front end runs two instructions ahead of issue: an i-cache miss of the
        // instruction after a load's user hides behind the load's data stall; one more
        // instruction later, its fetch starts only when the user issues.
        let cost = |gap: usize| {
            let run = |ifetch: Served| {
                let mut r = Pipe::default();
                r.step(&cfg, &load, false, Served::L1, Served::L2);
                r.step(&cfg, &alu(1, 2), false, Served::L1, Served::L1);
                for _ in 0..gap {
                    r.step(&cfg, &alu(0, 4), false, Served::L1, Served::L1);
                }
                r.step(&cfg, &alu(0, 8), false, ifetch, Served::L1);
                r.cycles()
            };
            run(Served::L2) - run(Served::L1)
        };
        assert_eq!((cost(0), cost(1)), (0, 6));
    }

    #[test]
    fn breakdown_splits_stalls() {
        let cfg = TimingConfig {
            issue_width: 1,
            fetch_queue: 1,
            ..Default::default()
        };
        let mut r = TimingRun::new(cfg);
        let load = Insn {
            class: Class::Load,
            writes: 1,
            ..alu(0, 1)
        };
        r.step(&load, false, Served::L1, Served::L2); // data miss
        r.step(&alu(1, 2), false, Served::L1, Served::L1); // uses it
        r.step(&alu(0, 4), false, Served::Mem, Served::L1); // i-miss
        let b = r.breakdown();
        assert_eq!(b.instructions, 3);
        assert_eq!(b.cpu, 4); // load latency 1 + 1 delays the user by one cycle
        assert_eq!(b.data, 6);
        assert_eq!(b.instr, b.cycles - b.cpu - b.data);
        assert!(b.instr > 0);
        assert!((b.mcpi - (b.cpi - b.icpi)).abs() < 1e-12);
    }
}
