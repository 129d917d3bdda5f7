//! Cache models: L1I, L1D and a unified L2, any number simulated in one pass. (Seed 003 is Xie,
//! Zhao and Bhuyan, "Architectural Analysis and Instruction-Set Optimization for Design of Network
//! Protocol Processors".)
//!
//! Seed 003 §2.1 and §3.2 (Figure 3): set-associative caches of any size, associativity and
//! line size, LRU by default, the data cache write-back and write-allocate; Mosberger et al.,
//! "Analysis of Techniques to Improve Protocol Processing Latency" (seed 000 §2.1) uses the same
//! vocabulary for the Alpha 21064's direct-mapped 8 KB caches. Replacement is LRU, FIFO or random
//! (seeded, so every run replays).
//!
//! Two ways of counting, [`Mode`]:
//! - [`Mode::Phyllo`]: every cache line an access touches is one access; an `M` record (modify)
//!   is a read then a write of the same line; dirty victims are written back to the next level
//!   (and counted), write-through and no-write-allocate are available.
//! - [`Mode::Cachegrind`]: counts as cachegrind 3.19 does (cg_sim.c): an access that straddles
//!   two lines is one access, and one miss if either line misses; an L1 miss looks up the last
//!   level with the same address and size; `M` counts as one data *read* (checked against
//!   cachegrind: its `Dr` equals lackey's `L` + `M`); no write-backs are modelled.
//!
//! Built-in geometries: seed 003's ([`HierarchyConfig::seed003`]), seed 000's Alpha 21064
//! ([`HierarchyConfig::alpha21064`]) and this host's, read from sysfs ([`HierarchyConfig::host`]).
//! Beside an i-cache, an [`ExecTracker`] counts the bytes fetched into it that never executed
//! ([`Unused`], seed 000 Table 5).

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
    /// The line is longer than an executed-bytes tracker can follow ([`ExecTracker`]).
    #[error("line size {line} B is too long to track executed bytes (at most {max} B)")]
    LineTooLong {
        /// The line size.
        line: u64,
        /// The longest line tracked.
        max: u64,
    },
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

/// Bytes an instruction cache fetched, and how many of them were never executed while their
/// line was resident: seed 000 Table 5's "i-cache unused" (§4.3.2: without outlining about 20 %
/// of the instructions loaded into the i-cache never execute).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Unused {
    /// Bytes brought into the cache: one whole line per fill.
    pub fetched_bytes: u64,
    /// Of these, the bytes not executed between a line's fill and its eviction (or the end of
    /// the pass, for the lines still resident).
    pub unused_bytes: u64,
}

impl Unused {
    /// `unused_bytes / fetched_bytes` (0 when nothing was fetched).
    pub fn fraction(&self) -> f64 {
        if self.fetched_bytes == 0 {
            0.0
        } else {
            self.unused_bytes as f64 / self.fetched_bytes as f64
        }
    }
}

/// The longest line an [`ExecTracker`] follows (a `u128` bitmask per line).
pub const MAX_TRACKED_LINE: u32 = 128;

/// Follows, beside an instruction [`Cache`], which bytes of each resident line were executed,
/// giving [`Unused`]. It keeps its own copy of the cache's residency (block and executed-byte
/// mask per way), kept in step by [`ExecTracker::executed`] after every fetch (every fetch
/// into the cache must be reported to it): a line new to the tracker was filled by that fetch
/// (its bytes count as fetched) and the lines of its set that the cache no longer holds were
/// evicted (their never-executed bytes count as unused). The cache itself is unchanged, so a
/// pass that does not ask for it pays nothing. It works under any replacement policy and
/// either counting [`Mode`] (it only asks the cache which lines it holds).
#[derive(Clone, Debug)]
pub struct ExecTracker {
    line_bits: u32,
    line: u64,
    set_mask: u64,
    assoc: usize,
    /// Per way: block number (`INVALID` if none) and executed-bytes mask.
    slots: Vec<(u64, u128)>,
    fetched: u64,
    unused: u64,
}

impl ExecTracker {
    /// A tracker for a cache of configuration `cfg` (lines of at most [`MAX_TRACKED_LINE`]).
    pub fn new(cfg: &CacheConfig) -> Result<Self, GeometryError> {
        cfg.validate()?;
        if cfg.line > MAX_TRACKED_LINE {
            return Err(GeometryError::LineTooLong {
                line: cfg.line as u64,
                max: MAX_TRACKED_LINE as u64,
            });
        }
        let sets = cfg.sets();
        Ok(ExecTracker {
            line_bits: cfg.line.trailing_zeros(),
            line: cfg.line as u64,
            set_mask: sets - 1,
            assoc: cfg.assoc as usize,
            slots: vec![(INVALID, 0); (sets * cfg.assoc as u64) as usize],
            fetched: 0,
            unused: 0,
        })
    }

    /// Records the execution of the instruction at `[addr, addr + size)`, to be called right
    /// after `cache` (of the configuration the tracker was built for) fetched it. An instruction
    /// that straddles two lines marks bytes in both.
    #[inline]
    pub fn executed(&mut self, cache: &Cache, addr: u64, size: u32) {
        let end = addr.saturating_add(size.max(1) as u64);
        let (first, last) = (addr >> self.line_bits, (end - 1) >> self.line_bits);
        let off = self.line - 1;
        for b in first..=last {
            let lo = if b == first { addr & off } else { 0 };
            let hi = if b == last {
                ((end - 1) & off) + 1
            } else {
                self.line
            };
            let n = hi - lo;
            let ones = if n >= 128 {
                u128::MAX
            } else {
                (1u128 << n) - 1
            };
            self.mark(cache, b, ones << lo);
        }
    }

    fn mark(&mut self, cache: &Cache, block: u64, mask: u128) {
        let set = (block & self.set_mask) as usize;
        let line = self.line;
        let slots = &mut self.slots[set * self.assoc..(set + 1) * self.assoc];
        if let Some(s) = slots.iter_mut().find(|s| s.0 == block) {
            s.1 |= mask;
            return;
        }
        // A fill: the lines of the set the cache no longer holds were evicted by it.
        let mut unused = 0;
        for s in slots.iter_mut() {
            if s.0 != INVALID && !cache.contains(s.0) {
                unused += line - s.1.count_ones() as u64;
                *s = (INVALID, 0);
            }
        }
        self.fetched += line;
        let free = slots.iter_mut().find(|s| s.0 == INVALID);
        match free {
            Some(s) if cache.contains(block) => *s = (block, mask),
            // Filled and evicted again within the same fetch (a straddle in a one-set cache),
            // or a cache out of step with the tracker: the line is accounted at once.
            _ => unused += line - mask.count_ones() as u64,
        }
        self.unused += unused;
    }

    /// Fetched and unused bytes so far, the lines still resident included (their
    /// never-executed bytes count as unused).
    pub fn unused(&self) -> Unused {
        let resident: u64 = self
            .slots
            .iter()
            .filter(|s| s.0 != INVALID)
            .map(|s| self.line - s.1.count_ones() as u64)
            .sum();
        Unused {
            fetched_bytes: self.fetched,
            unused_bytes: self.unused + resident,
        }
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

    /// The DEC Alpha 21064 of seed 000 §2.1 (a DEC 3000/600): split 8 KB direct-mapped L1I
    /// and L1D with 32 B lines, and a unified 2 MB direct-mapped second level (the b-cache) with
    /// 32 B lines. The 21064's d-cache is write-through and no-write-allocate, and so is this
    /// L1D (every store goes on to the b-cache, a store miss fills nothing); the b-cache is
    /// write-back and write-allocate. Pair it with [`crate::timing::TimingConfig::alpha21064`].
    pub fn alpha21064() -> Self {
        let c = |s, a, l| CacheConfig::new(s, a, l).expect("valid built-in geometry");
        HierarchyConfig {
            l1i: c(8 << 10, 1, 32),
            l1d: CacheConfig {
                write_back: false,
                write_allocate: false,
                ..c(8 << 10, 1, 32)
            },
            l2: Some(c(2 << 20, 1, 32)),
            mode: Mode::Phyllo,
        }
    }

    /// This host's caches, read from `/sys/devices/system/cpu/cpu0/cache/index*/` (`level`,
    /// `type`, `size`, `ways_of_associativity`, `coherency_line_size`): the level-1
    /// `Instruction` and `Data` caches and the level-2 `Unified` cache, LRU, write-back and
    /// write-allocate. The string says where the geometry came from, e.g.
    /// `sysfs: L1I 32 KB 8-way 64 B, L1D 48 KB 12-way 64 B, L2 2 MB 16-way 64 B`. When sysfs is
    /// missing, incomplete or unparsable (or describes a geometry the model cannot build), the
    /// result is 32 KB 8-way 64 B L1I and L1D and a 512 KB 8-way 64 B L2, and the string begins
    /// `fallback (sysfs unreadable)` and gives the reason.
    pub fn host() -> (HierarchyConfig, String) {
        host_from(std::path::Path::new(SYSFS_CACHE))
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

/// Where Linux lists cpu0's caches.
const SYSFS_CACHE: &str = "/sys/devices/system/cpu/cpu0/cache";

/// Why the host's caches could not be read from sysfs.
#[derive(Debug, thiserror::Error)]
enum SysfsError {
    #[error("{0}: {1}")]
    Io(String, std::io::Error),
    #[error("{path}: cannot parse {value:?}")]
    Parse { path: String, value: String },
    #[error("no {0} cache listed")]
    Missing(&'static str),
    #[error("{0}: {1}")]
    Geometry(&'static str, GeometryError),
}

/// `32 KB 8-way 64 B`.
fn describe_cache(c: &CacheConfig) -> String {
    let size = if c.size.is_multiple_of(1 << 20) {
        format!("{} MB", c.size >> 20)
    } else if c.size.is_multiple_of(1024) {
        format!("{} KB", c.size >> 10)
    } else {
        format!("{} B", c.size)
    };
    format!("{size} {}-way {} B", c.assoc, c.line)
}

fn describe_host(h: &HierarchyConfig) -> String {
    let mut s = format!(
        "L1I {}, L1D {}",
        describe_cache(&h.l1i),
        describe_cache(&h.l1d)
    );
    if let Some(l2) = &h.l2 {
        s.push_str(&format!(", L2 {}", describe_cache(l2)));
    }
    s
}

/// [`HierarchyConfig::host`] over the cache directory `root`.
fn host_from(root: &std::path::Path) -> (HierarchyConfig, String) {
    match read_sysfs(root) {
        Ok(h) => {
            let s = format!("sysfs: {}", describe_host(&h));
            (h, s)
        }
        Err(e) => {
            let c = |s, a, l| CacheConfig::new(s, a, l).expect("valid built-in geometry");
            let h = HierarchyConfig {
                l1i: c(32 << 10, 8, 64),
                l1d: c(32 << 10, 8, 64),
                l2: Some(c(512 << 10, 8, 64)),
                mode: Mode::Phyllo,
            };
            let s = format!(
                "fallback (sysfs unreadable): {} ({e} in {})",
                describe_host(&h),
                root.display()
            );
            (h, s)
        }
    }
}

/// A sysfs size: `32K`, `1024K`, `8M`, `1G` (an optional `B`), or plain bytes.
fn parse_sysfs_size(v: &str) -> Option<u64> {
    let t = v.trim().to_ascii_uppercase();
    let t = t.strip_suffix('B').unwrap_or(&t);
    let (digits, mult) = match t.chars().last()? {
        'K' => (&t[..t.len() - 1], 1u64 << 10),
        'M' => (&t[..t.len() - 1], 1 << 20),
        'G' => (&t[..t.len() - 1], 1 << 30),
        _ => (t, 1),
    };
    digits.trim().parse::<u64>().ok()?.checked_mul(mult)
}

fn read_sysfs(root: &std::path::Path) -> Result<HierarchyConfig, SysfsError> {
    let io = |p: &std::path::Path, e| SysfsError::Io(p.display().to_string(), e);
    let mut dirs: Vec<(u32, std::path::PathBuf)> = std::fs::read_dir(root)
        .map_err(|e| io(root, e))?
        .filter_map(|e| {
            let e = e.ok()?;
            let n = e
                .file_name()
                .to_str()?
                .strip_prefix("index")?
                .parse()
                .ok()?;
            Some((n, e.path()))
        })
        .collect();
    dirs.sort();
    let read = |dir: &std::path::Path, f: &str| -> Result<String, SysfsError> {
        let p = dir.join(f);
        std::fs::read_to_string(&p)
            .map(|s| s.trim().to_string())
            .map_err(|e| io(&p, e))
    };
    let number = |dir: &std::path::Path, f: &str| -> Result<u64, SysfsError> {
        let v = read(dir, f)?;
        let n = if f == "size" {
            parse_sysfs_size(&v)
        } else {
            v.parse().ok()
        };
        n.ok_or_else(|| SysfsError::Parse {
            path: dir.join(f).display().to_string(),
            value: v,
        })
    };
    let mut found: [Option<CacheConfig>; 3] = [None; 3];
    const WANTED: [(u64, &str, &str); 3] = [
        (1, "Instruction", "L1 Instruction"),
        (1, "Data", "L1 Data"),
        (2, "Unified", "L2 Unified"),
    ];
    for (_, dir) in &dirs {
        // Entries this model does not use (L3, ...) may be partial: they are skipped.
        let (Ok(level), Ok(kind)) = (number(dir, "level"), read(dir, "type")) else {
            continue;
        };
        let Some(k) = WANTED
            .iter()
            .position(|w| w.0 == level && w.1.eq_ignore_ascii_case(&kind))
        else {
            continue;
        };
        if found[k].is_some() {
            continue;
        }
        let size = number(dir, "size")?;
        let line = number(dir, "coherency_line_size")?;
        let mut ways = number(dir, "ways_of_associativity")?;
        if ways == 0 {
            // Fully associative.
            ways = size / line.max(1);
        }
        let (Ok(ways), Ok(line)) = (u32::try_from(ways), u32::try_from(line)) else {
            return Err(SysfsError::Parse {
                path: dir.display().to_string(),
                value: format!("{ways} ways, {line} B lines"),
            });
        };
        found[k] = Some(
            CacheConfig::new(size, ways, line).map_err(|e| SysfsError::Geometry(WANTED[k].2, e))?,
        );
    }
    let get = |k: usize| found[k].ok_or(SysfsError::Missing(WANTED[k].2));
    Ok(HierarchyConfig {
        l1i: get(0)?,
        l1d: get(1)?,
        l2: Some(get(2)?),
        mode: Mode::Phyllo,
    })
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

    #[test]
    fn alpha21064_geometry() {
        let h = HierarchyConfig::alpha21064();
        assert_eq!(h.to_string(), "L1I 8k:1:32 L1D 8k:1:32 L2 2048k:1:32");
        assert!(!h.l1d.write_back && !h.l1d.write_allocate);
        assert!(h.l1i.write_back && h.l2.unwrap().write_back);
        // A store miss fills nothing and goes on to the b-cache; a store hit writes through.
        use crate::trace::Kind;
        let mut m = Hierarchy::new(h).unwrap();
        assert_eq!(m.data(Kind::Store, 0x100, 8), Served::Mem);
        assert!(!m.l1d.contains(0x100 >> 5));
        assert_eq!(m.data(Kind::Load, 0x100, 8), Served::L2);
        m.data(Kind::Store, 0x100, 8);
        let l2 = m.l2.as_ref().unwrap().stats;
        assert_eq!((l2.writes, m.l1d.stats.writebacks), (2, 0));
    }

    /// Writes a fake sysfs cache directory: one `index*` per entry.
    fn fake_sysfs(name: &str, entries: &[&[(&str, &str)]]) -> std::path::PathBuf {
        let root = std::env::temp_dir().join(format!("phyllo-sysfs-{}-{name}", std::process::id()));
        let _ = std::fs::remove_dir_all(&root);
        for (k, files) in entries.iter().enumerate() {
            let d = root.join(format!("index{k}"));
            std::fs::create_dir_all(&d).unwrap();
            for (f, v) in files.iter() {
                std::fs::write(d.join(f), format!("{v}\n")).unwrap();
            }
        }
        std::fs::create_dir_all(&root).unwrap();
        std::fs::write(root.join("uevent"), "").unwrap();
        root
    }

    fn entry<'a>(
        level: &'a str,
        kind: &'a str,
        size: &'a str,
        ways: &'a str,
    ) -> [(&'a str, &'a str); 5] {
        [
            ("level", level),
            ("type", kind),
            ("size", size),
            ("ways_of_associativity", ways),
            ("coherency_line_size", "64"),
        ]
    }

    #[test]
    fn host_geometry_from_sysfs() {
        let d = entry("1", "Data", "48K", "12");
        let i = entry("1", "Instruction", "32K", "8");
        let l2 = entry("2", "Unified", "2048K", "16");
        let l3 = [("level", "3"), ("type", "Unified"), ("size", "junk")];
        let root = fake_sysfs("ok", &[&d, &i, &l2, &l3]);
        let (h, s) = host_from(&root);
        assert_eq!(h.l1i, CacheConfig::new(32 << 10, 8, 64).unwrap());
        assert_eq!(h.l1d, CacheConfig::new(48 << 10, 12, 64).unwrap());
        assert_eq!(h.l2, Some(CacheConfig::new(2 << 20, 16, 64).unwrap()));
        assert_eq!(h.mode, Mode::Phyllo);
        assert_eq!(
            s,
            "sysfs: L1I 32 KB 8-way 64 B, L1D 48 KB 12-way 64 B, L2 2 MB 16-way 64 B"
        );
        std::fs::remove_dir_all(&root).unwrap();
        // Unparsable, incomplete, impossible or missing: the fallback, saying so.
        let bad = entry("1", "Instruction", "32Q", "8");
        let odd = entry("2", "Unified", "1536K", "8"); // 3072 sets
        for (name, entries) in [
            ("bad", vec![&d[..], &bad[..], &l2[..]]),
            ("partial", vec![&d[..], &i[..]]),
            ("odd", vec![&d[..], &i[..], &odd[..]]),
        ] {
            let root = fake_sysfs(name, &entries);
            let (h, s) = host_from(&root);
            assert!(s.starts_with("fallback (sysfs unreadable)"), "{s}");
            assert_eq!(h.l1i, CacheConfig::new(32 << 10, 8, 64).unwrap());
            assert_eq!(h.l2, Some(CacheConfig::new(512 << 10, 8, 64).unwrap()));
            std::fs::remove_dir_all(&root).unwrap();
        }
        let (_, s) = host_from(std::path::Path::new("/nonexistent/phyllo/cache"));
        assert!(s.starts_with("fallback (sysfs unreadable): L1I 32 KB 8-way 64 B, L1D 32 KB 8-way 64 B, L2 512 KB 8-way 64 B"), "{s}");
        // The real host: either way a buildable hierarchy.
        let (h, s) = HierarchyConfig::host();
        assert!(Hierarchy::new(h).is_ok(), "{s}");
        assert_eq!(parse_sysfs_size(" 1024K"), Some(1 << 20));
        assert_eq!(parse_sysfs_size("8M"), Some(8 << 20));
        assert_eq!(parse_sysfs_size("65536"), Some(65536));
        assert_eq!(parse_sysfs_size("32KB"), Some(32 << 10));
        assert_eq!(parse_sysfs_size("K"), None);
        assert_eq!(parse_sysfs_size(""), None);
    }

    fn tracked(size: u64, assoc: u32, line: u32) -> (Cache, ExecTracker) {
        let cfg = CacheConfig::new(size, assoc, line).unwrap();
        (Cache::new(cfg).unwrap(), ExecTracker::new(&cfg).unwrap())
    }

    /// Fetches `[addr, addr + size)` line by line, then tells the tracker.
    fn exec(c: &mut Cache, t: &mut ExecTracker, addr: u64, size: u32) {
        let lb = c.line_bits();
        for b in (addr >> lb)..=((addr + size as u64 - 1) >> lb) {
            c.access_line(b, false);
        }
        t.executed(c, addr, size);
    }

    #[test]
    fn unused_bytes_by_hand() {
        // 4 sets × 1 way of 32 B.
        let (mut c, mut t) = tracked(128, 1, 32);
        exec(&mut c, &mut t, 0, 4);
        exec(&mut c, &mut t, 4, 4);
        exec(&mut c, &mut t, 0, 4); // again: nothing new
        assert_eq!(
            t.unused(),
            Unused {
                fetched_bytes: 32,
                unused_bytes: 24
            }
        );
        // A straddle marks 2 bytes of line 0 and 2 of line 1.
        exec(&mut c, &mut t, 30, 4);
        assert_eq!(t.unused().fetched_bytes, 64);
        assert_eq!(t.unused().unused_bytes, 22 + 30);
        // Block 4 evicts block 0 (10 bytes executed): 22 unused; block 4 itself 31 unused.
        exec(&mut c, &mut t, 128, 1);
        assert_eq!(t.unused().fetched_bytes, 96);
        assert_eq!(t.unused().unused_bytes, 22 + 30 + 31);
        // Block 0 again: a new fill, nothing of it executed before.
        exec(&mut c, &mut t, 0, 32);
        assert_eq!(
            t.unused(),
            Unused {
                fetched_bytes: 128,
                unused_bytes: 22 + 30 + 31
            }
        );
        assert!((t.unused().fraction() - 83.0 / 128.0).abs() < 1e-12);
        assert_eq!(Unused::default().fraction(), 0.0);
        // A whole 128 B line, and too long a line.
        let (mut c, mut t) = tracked(256, 2, 128);
        exec(&mut c, &mut t, 0, 128);
        exec(&mut c, &mut t, 128, 64);
        assert_eq!(t.unused().unused_bytes, 64);
        let long = CacheConfig::new(1024, 1, 256).unwrap();
        assert_eq!(
            ExecTracker::new(&long).unwrap_err(),
            GeometryError::LineTooLong {
                line: 256,
                max: 128
            }
        );
    }

    #[test]
    fn unused_follows_lru_evictions() {
        // One set of 2 ways: 0, 1, 0, 2 evicts 1 (LRU), not 0.
        let (mut c, mut t) = tracked(64, 2, 32);
        for (a, n) in [(0, 8), (32, 16), (8, 8), (64, 32)] {
            exec(&mut c, &mut t, a, n);
        }
        // Evicted: block 1 with 16 unused; resident: block 0 (16 unused), block 2 (0).
        assert_eq!(
            t.unused(),
            Unused {
                fetched_bytes: 96,
                unused_bytes: 32
            }
        );
        // A one-set direct-mapped cache: a straddle fills line 0 then evicts it for line 1.
        let (mut c, mut t) = tracked(32, 1, 32);
        exec(&mut c, &mut t, 28, 8);
        assert_eq!(
            t.unused(),
            Unused {
                fetched_bytes: 64,
                unused_bytes: 28 + 28
            }
        );
    }
}
