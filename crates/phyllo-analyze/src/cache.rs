//! Cache models: L1I, L1D and a unified L2, any number simulated in one pass.
//!
//! Seed 003 §2.1 and §3.2 (Figure 3): set-associative caches of any size, associativity and
//! line size, LRU by default, the data cache write-back and write-allocate; seed 000 §2.1 uses
//! the same vocabulary for the Alpha 21064's direct-mapped 8 KB caches. Replacement is LRU,
//! FIFO or random (seeded, so every run replays).
//!
//! Two ways of counting, [`Mode`]:
//! - [`Mode::Phyllo`]: every cache line an access touches is one access; an `M` record (modify)
//!   is a read then a write of the same line; dirty victims are written back to the next level
//!   (and counted), write-through and no-write-allocate are available.
//! - [`Mode::Cachegrind`]: counts as cachegrind 3.19 does (cg_sim.c): an access that straddles
//!   two lines is one access, and one miss if either line misses; an L1 miss looks up the last
//!   level with the same address and size; `M` counts as one data *read* (checked against
//!   cachegrind: its `Dr` equals lackey's `L` + `M`); no write-backs are modelled.

use std::fmt;

/// Replacement policy.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Policy {
    /// Least recently used.
    Lru,
    /// First in, first out (hits do not refresh a line).
    Fifo,
    /// Random victim among the ways (seeded xorshift); invalid ways are filled first.
    Random,
}

impl std::str::FromStr for Policy {
    type Err = GeometryError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s.to_ascii_lowercase().as_str() {
            "lru" => Ok(Policy::Lru),
            "fifo" => Ok(Policy::Fifo),
            "random" | "rand" => Ok(Policy::Random),
            _ => Err(GeometryError::Syntax(format!(
                "unknown policy {s:?} (lru, fifo, random)"
            ))),
        }
    }
}

/// An impossible or unparsable cache geometry.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum GeometryError {
    /// The line size is not a power of two (or is zero).
    #[error("line size {0} B is not a power of two")]
    LineNotPowerOfTwo(u64),
    /// Associativity zero.
    #[error("associativity must be at least 1")]
    ZeroAssoc,
    /// Size is not a multiple of line × associativity.
    #[error("size {size} B is not a multiple of line {line} B × associativity {assoc}")]
    NotMultiple {
        /// Cache size in bytes.
        size: u64,
        /// Line size.
        line: u64,
        /// Associativity.
        assoc: u64,
    },
    /// The number of sets is not a power of two.
    #[error("{sets} sets (size / (line × assoc)) is not a power of two")]
    SetsNotPowerOfTwo {
        /// The number of sets.
        sets: u64,
    },
    /// A geometry string could not be parsed.
    #[error("bad cache geometry: {0}")]
    Syntax(String),
}

/// Geometry and policies of one cache.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct CacheConfig {
    /// Total size in bytes.
    pub size: u64,
    /// Associativity (ways per set).
    pub assoc: u32,
    /// Line (block) size in bytes.
    pub line: u32,
    /// Replacement policy.
    pub policy: Policy,
    /// Seed of the random policy.
    pub seed: u64,
    /// Write-back (dirty lines written on eviction) rather than write-through.
    pub write_back: bool,
    /// Allocate a line on a write miss.
    pub write_allocate: bool,
}

impl CacheConfig {
    /// A validated LRU, write-back, write-allocate cache.
    pub fn new(size: u64, assoc: u32, line: u32) -> Result<Self, GeometryError> {
        let c = CacheConfig {
            size,
            assoc,
            line,
            policy: Policy::Lru,
            seed: 1,
            write_back: true,
            write_allocate: true,
        };
        c.validate()?;
        Ok(c)
    }

    /// The same cache with another replacement policy.
    pub fn with_policy(mut self, policy: Policy) -> Self {
        self.policy = policy;
        self
    }

    /// Checks that the geometry can be built.
    pub fn validate(&self) -> Result<(), GeometryError> {
        let line = self.line as u64;
        if line == 0 || !line.is_power_of_two() {
            return Err(GeometryError::LineNotPowerOfTwo(line));
        }
        if self.assoc == 0 {
            return Err(GeometryError::ZeroAssoc);
        }
        let way = line * self.assoc as u64;
        if self.size == 0 || (self.size / way) * way != self.size {
            return Err(GeometryError::NotMultiple {
                size: self.size,
                line,
                assoc: self.assoc as u64,
            });
        }
        let sets = self.size / way;
        if !sets.is_power_of_two() {
            return Err(GeometryError::SetsNotPowerOfTwo { sets });
        }
        Ok(())
    }

    /// Number of sets.
    pub fn sets(&self) -> u64 {
        self.size / (self.line as u64 * self.assoc as u64)
    }

    /// Parses `SIZE:ASSOC:LINE`, e.g. `16k:4:32`, `8192:1:32`, `1m:16:64` (k, m suffixes).
    pub fn parse(s: &str) -> Result<Self, GeometryError> {
        let parts: Vec<&str> = s.split(':').collect();
        let [size, assoc, line] = parts.as_slice() else {
            return Err(GeometryError::Syntax(format!(
                "{s:?}: expected SIZE:ASSOC:LINE, e.g. 16k:4:32"
            )));
        };
        let num = |t: &str| -> Result<u64, GeometryError> {
            let t = t.trim().to_ascii_lowercase();
            let (digits, mult) = match t.strip_suffix('k').or(t.strip_suffix("kb")) {
                Some(d) => (d.to_string(), 1024),
                None => match t.strip_suffix('m').or(t.strip_suffix("mb")) {
                    Some(d) => (d.to_string(), 1 << 20),
                    None => (t.clone(), 1),
                },
            };
            digits
                .parse::<u64>()
                .ok()
                .and_then(|v| v.checked_mul(mult))
                .ok_or_else(|| GeometryError::Syntax(format!("{s:?}: {t:?} is not a number")))
        };
        let assoc = u32::try_from(num(assoc)?).map_err(|_| GeometryError::Syntax(s.into()))?;
        let line = u32::try_from(num(line)?).map_err(|_| GeometryError::Syntax(s.into()))?;
        Self::new(num(size)?, assoc, line)
    }
}

impl fmt::Display for CacheConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.size & 1023 == 0 {
            write!(f, "{}k:{}:{}", self.size / 1024, self.assoc, self.line)
        } else {
            write!(f, "{}:{}:{}", self.size, self.assoc, self.line)
        }
    }
}

/// Counters of one cache.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CacheStats {
    /// Read accesses.
    pub reads: u64,
    /// Write accesses.
    pub writes: u64,
    /// Read misses.
    pub read_misses: u64,
    /// Write misses.
    pub write_misses: u64,
    /// Dirty lines written back to the next level.
    pub writebacks: u64,
}

impl CacheStats {
    /// All accesses.
    pub fn accesses(&self) -> u64 {
        self.reads + self.writes
    }
    /// All misses.
    pub fn misses(&self) -> u64 {
        self.read_misses + self.write_misses
    }
    /// Misses per access (0 when there was no access).
    pub fn miss_ratio(&self) -> f64 {
        if self.accesses() == 0 {
            0.0
        } else {
            self.misses() as f64 / self.accesses() as f64
        }
    }
}

const INVALID: u64 = u64::MAX;
const DIRTY: u64 = 1 << 62;

/// Result of looking up one line.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LineOutcome {
    /// The line was present.
    pub hit: bool,
    /// A dirty line (block number) was evicted.
    pub writeback: Option<u64>,
}

/// One set-associative cache.
#[derive(Clone, Debug)]
pub struct Cache {
    cfg: CacheConfig,
    line_bits: u32,
    set_mask: u64,
    assoc: usize,
    tags: Vec<u64>,
    rng: u64,
    /// Counters.
    pub stats: CacheStats,
}

impl Cache {
    /// An empty (cold) cache.
    pub fn new(cfg: CacheConfig) -> Result<Self, GeometryError> {
        cfg.validate()?;
        let sets = cfg.sets();
        Ok(Cache {
            cfg,
            line_bits: cfg.line.trailing_zeros(),
            set_mask: sets - 1,
            assoc: cfg.assoc as usize,
            tags: vec![INVALID; (sets * cfg.assoc as u64) as usize],
            rng: cfg.seed | 1,
            stats: CacheStats::default(),
        })
    }

    /// Its configuration.
    pub fn config(&self) -> &CacheConfig {
        &self.cfg
    }

    /// log2 of the line size.
    pub fn line_bits(&self) -> u32 {
        self.line_bits
    }

    fn next_rand(&mut self) -> u64 {
        let mut x = self.rng;
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        self.rng = x;
        x
    }

    /// Looks up block number `block` (address >> line bits), without touching the counters.
    /// `write` marks the line dirty (write-back) and, with no-write-allocate, a write miss does
    /// not fill the line.
    #[inline]
    pub fn touch(&mut self, block: u64, write: bool) -> LineOutcome {
        let set = (block & self.set_mask) as usize;
        let ways = &mut self.tags[set * self.assoc..(set + 1) * self.assoc];
        let dirty_flag = if write && self.cfg.write_back {
            DIRTY
        } else {
            0
        };
        if let Some(p) = ways.iter().position(|&t| t & !DIRTY == block) {
            if self.cfg.policy == Policy::Lru && p > 0 {
                ways[..=p].rotate_right(1);
                ways[0] |= dirty_flag;
            } else {
                ways[p] |= dirty_flag;
            }
            return LineOutcome {
                hit: true,
                writeback: None,
            };
        }
        if write && !self.cfg.write_allocate {
            return LineOutcome {
                hit: false,
                writeback: None,
            };
        }
        let victim_slot = match self.cfg.policy {
            Policy::Lru | Policy::Fifo => {
                let v = ways[self.assoc - 1];
                ways.rotate_right(1);
                ways[0] = block | dirty_flag;
                v
            }
            Policy::Random => {
                let slot = match ways.iter().position(|&t| t == INVALID) {
                    Some(i) => i,
                    None => {
                        let r = self.next_rand();
                        (r % self.assoc as u64) as usize
                    }
                };
                let ways = &mut self.tags[set * self.assoc..(set + 1) * self.assoc];
                let v = ways[slot];
                ways[slot] = block | dirty_flag;
                v
            }
        };
        let writeback =
            (victim_slot != INVALID && victim_slot & DIRTY != 0).then_some(victim_slot & !DIRTY);
        LineOutcome {
            hit: false,
            writeback,
        }
    }

    /// Whether block `block` is present (no state change).
    pub fn contains(&self, block: u64) -> bool {
        let set = (block & self.set_mask) as usize;
        self.tags[set * self.assoc..(set + 1) * self.assoc]
            .iter()
            .any(|&t| t & !DIRTY == block)
    }

    /// Counts one access (per-line accounting); returns whether it hit.
    #[inline]
    pub fn access_line(&mut self, block: u64, write: bool) -> LineOutcome {
        let o = self.touch(block, write);
        if write {
            self.stats.writes += 1;
            self.stats.write_misses += (!o.hit) as u64;
        } else {
            self.stats.reads += 1;
            self.stats.read_misses += (!o.hit) as u64;
        }
        if o.writeback.is_some() {
            self.stats.writebacks += 1;
        }
        o
    }

    /// Cachegrind's `cachesim_ref_is_miss`: one access over `[addr, addr+size)`, a miss if any
    /// line misses (every line is looked up, as state changes).
    #[inline]
    pub fn access_cg(&mut self, addr: u64, size: u32, write: bool) -> bool {
        let b1 = addr >> self.line_bits;
        let b2 = (addr + size.max(1) as u64 - 1) >> self.line_bits;
        let mut miss = false;
        for b in b1..=b2 {
            miss |= !self.touch(b, false).hit;
        }
        if write {
            self.stats.writes += 1;
            self.stats.write_misses += miss as u64;
        } else {
            self.stats.reads += 1;
            self.stats.read_misses += miss as u64;
        }
        miss
    }
}

/// How accesses are counted.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum Mode {
    /// Per line, write-back modelled (phyllo's own).
    #[default]
    Phyllo,
    /// As cachegrind 3.19 counts.
    Cachegrind,
}

/// Where an access was served.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Served {
    /// First-level hit.
    L1,
    /// First-level miss, second-level hit.
    L2,
    /// Missed every level.
    Mem,
}

/// Geometry of a whole hierarchy.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct HierarchyConfig {
    /// Instruction cache.
    pub l1i: CacheConfig,
    /// Data cache.
    pub l1d: CacheConfig,
    /// Unified second level (the last level in cachegrind mode), if any.
    pub l2: Option<CacheConfig>,
    /// Counting mode.
    pub mode: Mode,
}

impl HierarchyConfig {
    /// Seed 003's default: 16 KB 4-way 32 B L1I and L1D, 256 KB 4-way 64 B L2, LRU.
    pub fn seed003() -> Self {
        let c = |s, a, l| CacheConfig::new(s, a, l).expect("valid built-in geometry");
        HierarchyConfig {
            l1i: c(16 << 10, 4, 32),
            l1d: c(16 << 10, 4, 32),
            l2: Some(c(256 << 10, 4, 64)),
            mode: Mode::Phyllo,
        }
    }

    /// Three cachegrind-mode hierarchies of differing geometry (sizes, ways, line sizes,
    /// a direct-mapped L1D among them): what the analyzer is cross-checked against
    /// cachegrind on, in the report and in the tests.
    pub fn cachegrind_crosscheck() -> [HierarchyConfig; 3] {
        let g = |s: &str| CacheConfig::parse(s).expect("valid built-in geometry");
        let h = |l1i, l1d, l2| HierarchyConfig {
            l1i: g(l1i),
            l1d: g(l1d),
            l2: Some(g(l2)),
            mode: Mode::Cachegrind,
        };
        [
            h("16k:4:32", "16k:4:32", "256k:8:64"),
            h("8k:2:64", "32k:8:64", "1m:16:64"),
            h("32k:8:64", "8k:1:32", "512k:8:64"),
        ]
    }

    /// The same hierarchy with another L1I.
    pub fn with_l1i(mut self, l1i: CacheConfig) -> Self {
        self.l1i = l1i;
        self
    }

    /// The same with every cache's replacement policy set to `p`.
    pub fn with_policy(mut self, p: Policy) -> Self {
        self.l1i.policy = p;
        self.l1d.policy = p;
        if let Some(l2) = &mut self.l2 {
            l2.policy = p;
        }
        self
    }
}

impl fmt::Display for HierarchyConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "L1I {} L1D {}", self.l1i, self.l1d)?;
        if let Some(l2) = &self.l2 {
            write!(f, " L2 {l2}")?;
        }
        Ok(())
    }
}

/// L1I, L1D and optional L2 simulated together.
#[derive(Clone, Debug)]
pub struct Hierarchy {
    cfg: HierarchyConfig,
    /// Instruction cache.
    pub l1i: Cache,
    /// Data cache.
    pub l1d: Cache,
    /// Unified second level.
    pub l2: Option<Cache>,
    /// Dirty L2 lines written to memory.
    pub mem_writebacks: u64,
}

impl Hierarchy {
    /// A cold hierarchy.
    pub fn new(cfg: HierarchyConfig) -> Result<Self, GeometryError> {
        Ok(Hierarchy {
            cfg,
            l1i: Cache::new(cfg.l1i)?,
            l1d: Cache::new(cfg.l1d)?,
            l2: cfg.l2.map(Cache::new).transpose()?,
            mem_writebacks: 0,
        })
    }

    /// Its configuration.
    pub fn config(&self) -> &HierarchyConfig {
        &self.cfg
    }

    fn l2_range(&mut self, addr: u64, size: u64, write: bool) -> Served {
        let Some(l2) = &mut self.l2 else {
            return Served::Mem;
        };
        let lb = l2.line_bits();
        let mut served = Served::L2;
        for b in (addr >> lb)..=((addr + size.max(1) - 1) >> lb) {
            let o = l2.access_line(b, write);
            if !o.hit {
                served = Served::Mem;
            }
            if o.writeback.is_some() {
                self.mem_writebacks += 1;
            }
        }
        served
    }

    fn phyllo_access(&mut self, instr: bool, addr: u64, size: u32, write: bool) -> Served {
        let c = if instr { &mut self.l1i } else { &mut self.l1d };
        let lb = c.line_bits();
        let line = 1u64 << lb;
        let mut served = Served::L1;
        for b in (addr >> lb)..=((addr + size.max(1) as u64 - 1) >> lb) {
            let c = if instr { &mut self.l1i } else { &mut self.l1d };
            let o = c.access_line(b, write);
            if let Some(victim) = o.writeback {
                self.l2_range(victim << lb, line, true);
            }
            if !o.hit {
                let c = if instr { &self.l1i } else { &self.l1d };
                // A write miss without allocation goes through as a write; otherwise a fill.
                let fill_write = write && !c.config().write_allocate;
                served = served.max(self.l2_range(b << lb, line, fill_write));
            } else if write && !self.cfg.l1d.write_back && !instr {
                self.l2_range(b << lb, line, true);
            }
        }
        served
    }

    fn cg_access(&mut self, instr: bool, addr: u64, size: u32, write: bool) -> Served {
        let c = if instr { &mut self.l1i } else { &mut self.l1d };
        if !c.access_cg(addr, size, write) {
            return Served::L1;
        }
        match &mut self.l2 {
            Some(l2) => {
                if l2.access_cg(addr, size, write) {
                    Served::Mem
                } else {
                    Served::L2
                }
            }
            None => Served::Mem,
        }
    }

    /// An instruction fetch of `size` bytes at `addr`.
    #[inline]
    pub fn instr(&mut self, addr: u64, size: u32) -> Served {
        match self.cfg.mode {
            Mode::Phyllo => self.phyllo_access(true, addr, size, false),
            Mode::Cachegrind => self.cg_access(true, addr, size, false),
        }
    }

    /// A data access (`Load`, `Store` or `Modify`).
    #[inline]
    pub fn data(&mut self, kind: crate::trace::Kind, addr: u64, size: u32) -> Served {
        use crate::trace::Kind;
        match (self.cfg.mode, kind) {
            (Mode::Phyllo, Kind::Modify) => {
                let s = self.phyllo_access(false, addr, size, false);
                self.phyllo_access(false, addr, size, true);
                s
            }
            (Mode::Phyllo, k) => self.phyllo_access(false, addr, size, k == Kind::Store),
            (Mode::Cachegrind, k) => self.cg_access(false, addr, size, k == Kind::Store),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cache(size: u64, assoc: u32, line: u32, p: Policy) -> Cache {
        Cache::new(CacheConfig::new(size, assoc, line).unwrap().with_policy(p)).unwrap()
    }

    /// Runs block numbers through a cache, returning the hit pattern as a string (h/m).
    fn run(c: &mut Cache, blocks: &[u64]) -> String {
        blocks
            .iter()
            .map(|&b| {
                if c.access_line(b, false).hit {
                    'h'
                } else {
                    'm'
                }
            })
            .collect()
    }

    // One set of 2 ways (size 64, line 32, assoc 2): blocks 0,1,2 all map to the set.
    #[test]
    fn lru_by_hand() {
        let mut c = cache(64, 2, 32, Policy::Lru);
        // 0 m, 1 m, 0 h (0 MRU), 2 m evicts 1, 0 h, 1 m evicts 2, 2 m evicts 0.
        assert_eq!(run(&mut c, &[0, 1, 0, 2, 0, 1, 2]), "mmhmhmm");
        assert_eq!(c.stats.reads, 7);
        assert_eq!(c.stats.read_misses, 5);
    }

    #[test]
    fn fifo_by_hand() {
        let mut c = cache(64, 2, 32, Policy::Fifo);
        // 0 m, 1 m, 0 h (no refresh), 2 m evicts 0 (oldest), 0 m evicts 1, 1 m evicts 2, 2 m.
        assert_eq!(run(&mut c, &[0, 1, 0, 2, 0, 1, 2]), "mmhmmmm");
    }

    #[test]
    fn random_fills_invalid_first_and_replays() {
        let mut a = cache(128, 4, 32, Policy::Random);
        assert_eq!(run(&mut a, &[0, 1, 2, 3, 0, 1, 2, 3]), "mmmmhhhh");
        let seq: Vec<u64> = (0..200).map(|i| (i * 7 % 11) as u64).collect();
        let mut b = a.clone();
        assert_eq!(run(&mut a, &seq), run(&mut b, &seq));
        // Exactly one block of the 4 resident ones was evicted by block 4.
        let mut c = cache(128, 4, 32, Policy::Random);
        run(&mut c, &[0, 1, 2, 3, 4]);
        assert_eq!((0..5).filter(|&b| c.contains(b)).count(), 4);
        assert!(c.contains(4));
    }

    #[test]
    fn direct_mapped_sets() {
        // 4 sets × 1 way, 16 B lines: blocks 0 and 4 conflict, 1 does not.
        let mut c = cache(64, 1, 16, Policy::Lru);
        assert_eq!(run(&mut c, &[0, 1, 4, 1, 0, 4]), "mmmhmm");
    }

    #[test]
    fn write_back_and_no_write_allocate() {
        let mut c = cache(64, 2, 32, Policy::Lru);
        assert!(!c.access_line(0, true).hit);
        c.access_line(1, false);
        let o = c.access_line(2, false); // evicts dirty 0
        assert_eq!(o.writeback, Some(0));
        assert_eq!(c.access_line(3, false).writeback, None); // evicts clean 1
        assert_eq!(c.stats.writebacks, 1);
        let mut cfg = CacheConfig::new(64, 2, 32).unwrap();
        cfg.write_allocate = false;
        let mut n = Cache::new(cfg).unwrap();
        assert!(!n.access_line(0, true).hit);
        assert!(!n.access_line(0, false).hit);
    }

    #[test]
    fn geometry_errors() {
        assert_eq!(
            CacheConfig::new(1000, 4, 32),
            Err(GeometryError::NotMultiple {
                size: 1000,
                line: 32,
                assoc: 4
            })
        );
        assert_eq!(
            CacheConfig::new(1024, 4, 24),
            Err(GeometryError::LineNotPowerOfTwo(24))
        );
        assert_eq!(CacheConfig::new(1024, 0, 32), Err(GeometryError::ZeroAssoc));
        assert_eq!(
            CacheConfig::new(96 * 32, 1, 32),
            Err(GeometryError::SetsNotPowerOfTwo { sets: 96 })
        );
        assert!(CacheConfig::parse("16k:4").is_err());
        assert!(CacheConfig::parse("16q:4:32").is_err());
        assert_eq!(
            CacheConfig::parse("16k:4:32").unwrap(),
            CacheConfig::new(16384, 4, 32).unwrap()
        );
        assert_eq!(
            CacheConfig::parse("16k:4:32").unwrap().to_string(),
            "16k:4:32"
        );
        assert!("lru".parse::<Policy>().is_ok() && "x".parse::<Policy>().is_err());
    }

    #[test]
    fn cachegrind_mode_straddle_is_one_access() {
        let l1 = CacheConfig::new(64, 2, 32).unwrap();
        let cfg = HierarchyConfig {
            l1i: l1,
            l1d: l1,
            l2: Some(CacheConfig::new(1024, 2, 64).unwrap()),
            mode: Mode::Cachegrind,
        };
        let mut h = Hierarchy::new(cfg).unwrap();
        assert_eq!(h.instr(30, 4), Served::Mem); // lines 0 and 1: one access, one miss
        assert_eq!(h.l1i.stats.reads, 1);
        assert_eq!(h.l1i.stats.read_misses, 1);
        assert_eq!(h.instr(31, 2), Served::L1);
        // One set of two ways now holding blocks 1 (MRU) and 0: block 2 evicts block 0, which
        // is then found in L2 (its 64 B line 0 holds L1 blocks 0 and 1).
        assert_eq!(h.instr(64, 1), Served::Mem);
        assert_eq!(h.instr(0, 1), Served::L2);
        assert_eq!(h.instr(70, 1), Served::L1);
        let mut p = Hierarchy::new(HierarchyConfig {
            mode: Mode::Phyllo,
            ..cfg
        })
        .unwrap();
        p.instr(30, 4);
        assert_eq!(p.l1i.stats.reads, 2);
        assert_eq!(p.l1i.stats.read_misses, 2);
    }

    #[test]
    fn modify_counts() {
        use crate::trace::Kind;
        let l1 = CacheConfig::new(64, 2, 32).unwrap();
        let cfg = HierarchyConfig {
            l1i: l1,
            l1d: l1,
            l2: None,
            mode: Mode::Cachegrind,
        };
        let mut h = Hierarchy::new(cfg).unwrap();
        h.data(Kind::Modify, 0, 8);
        assert_eq!((h.l1d.stats.reads, h.l1d.stats.writes), (1, 0));
        let mut p = Hierarchy::new(HierarchyConfig {
            mode: Mode::Phyllo,
            ..cfg
        })
        .unwrap();
        p.data(Kind::Modify, 0, 8);
        assert_eq!(
            (p.l1d.stats.reads, p.l1d.stats.writes, p.l1d.stats.misses()),
            (1, 1, 1)
        );
    }
}
