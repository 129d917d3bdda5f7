//! The code of every traced image, decoded once: run-time address → instruction and function.
//!
//! Seed 003 profiles instructions and pairs inside the protocol stack; this map gives each
//! instruction fetch of the trace its decoded [`Insn`] and its function in O(1) (a dense index
//! over each executable section), and holds the static fused-pair positions that the fusion
//! model (Xie, Zhao and Bhuyan, "Architectural Analysis and Instruction-Set Optimization for Design
//! of Network Protocol Processors" (seed 003 §4.2-4.3)) uses to compact code addresses.

use std::collections::HashMap;

use iced_x86::InstructionInfoFactory;

use crate::image::Image;
#[cfg(test)]
use crate::insn::FuseCat;
use crate::insn::{self, Insn};

/// A function of some image, in run-time addresses.
#[derive(Clone, Debug)]
pub struct RtFunc {
    /// Run-time start address.
    pub start: u64,
    /// Size in bytes.
    pub size: u64,
    /// Demangled name.
    pub name: String,
}

struct Region {
    start: u64,
    end: u64,
    /// Per byte: index into `insns`, or `u32::MAX`.
    index: Vec<u32>,
}

/// Global function id (index into [`CodeMap::funcs`]).
pub type GFunc = u32;

/// Sentinel: no function.
pub const NO_FUNC: GFunc = u32::MAX;

/// Decoded code of one or more images.
pub struct CodeMap {
    regions: Vec<Region>,
    insns: Vec<Insn>,
    insn_addr: Vec<u64>,
    insn_func: Vec<GFunc>,
    funcs: Vec<RtFunc>,
    unknown: HashMap<u64, u32>,
}

/// A fused pair in run-time addresses: (address of the first, lengths, categories).
#[derive(Clone, Copy, Debug)]
pub struct FusedPair {
    /// Address of the first instruction.
    pub addr: u64,
    /// Length of the first.
    pub len1: u8,
    /// Length of the second.
    pub len2: u8,
    /// [`crate::insn::FuseCat`] bits.
    pub cats: u8,
}

impl FusedPair {
    /// Bytes saved when the pair becomes one instruction as long as the longer of the two.
    pub fn saved(&self) -> u64 {
        self.len1.min(self.len2) as u64
    }
    /// First address after the pair.
    pub fn end(&self) -> u64 {
        self.addr + self.len1 as u64 + self.len2 as u64
    }
}

impl CodeMap {
    /// Decodes every function of every `(image, bias)`: run-time address = link-time + bias.
    pub fn new(images: &[(&Image, u64)]) -> CodeMap {
        let mut m = CodeMap {
            regions: Vec::new(),
            insns: Vec::new(),
            insn_addr: Vec::new(),
            insn_func: Vec::new(),
            funcs: Vec::new(),
            unknown: HashMap::new(),
        };
        let mut factory = InstructionInfoFactory::new();
        for &(img, bias) in images {
            for (s, e) in img.code_ranges() {
                let mut region = Region {
                    start: s + bias,
                    end: e + bias,
                    index: vec![u32::MAX; (e - s) as usize],
                };
                // Symbols, and the gaps between them (stripped libraries keep only exported
                // symbols: libc's memcpy variants live in such gaps), each decoded linearly.
                let mut pieces: Vec<(u64, u64, String)> = Vec::new();
                let mut cursor = s;
                for f in img.funcs().iter().filter(|f| f.start >= s && f.start < e) {
                    if f.start > cursor {
                        pieces.push((
                            cursor,
                            f.start - cursor,
                            format!("{}@{:#x}", img.name(), cursor),
                        ));
                    }
                    pieces.push((f.start, f.size, f.name.clone()));
                    cursor = cursor.max(f.start + f.size);
                }
                if cursor < e {
                    pieces.push((cursor, e - cursor, format!("{}@{:#x}", img.name(), cursor)));
                }
                for (start, size, name) in pieces {
                    let gid = m.funcs.len() as GFunc;
                    m.funcs.push(RtFunc {
                        start: start + bias,
                        size,
                        name,
                    });
                    let end = (start + size).min(e);
                    let Some(bytes) = img.code_at(start) else {
                        continue;
                    };
                    let bytes = &bytes[..((end - start) as usize).min(bytes.len())];
                    let v = insn::decode_function(bytes, start + bias);
                    for k in 0..v.len() {
                        let off = (v[k].ip() - bias - s) as usize;
                        if region.index[off] != u32::MAX {
                            continue;
                        }
                        region.index[off] = m.insns.len() as u32;
                        m.insns
                            .push(insn::describe(&v[k], v.get(k + 1), &mut factory));
                        m.insn_addr.push(v[k].ip());
                        m.insn_func.push(gid);
                    }
                }
                m.regions.push(region);
            }
        }
        m.regions.sort_by_key(|r| r.start);
        m
    }

    /// Index of the static instruction at run-time `addr`; instructions outside the decoded
    /// code get an `Unknown` entry of length `len` (created on first sight).
    #[inline]
    pub fn lookup(&mut self, addr: u64, len: u32) -> u32 {
        for r in &self.regions {
            if addr >= r.start && addr < r.end {
                let i = r.index[(addr - r.start) as usize];
                if i != u32::MAX {
                    return i;
                }
                break;
            }
        }
        if let Some(&i) = self.unknown.get(&addr) {
            return i;
        }
        let i = self.insns.len() as u32;
        self.insns.push(Insn::unknown(len.min(255) as u8));
        self.insn_addr.push(addr);
        self.insn_func.push(NO_FUNC);
        self.unknown.insert(addr, i);
        i
    }

    /// The static instruction `i`.
    #[inline]
    pub fn insn(&self, i: u32) -> &Insn {
        &self.insns[i as usize]
    }

    /// Run-time address of static instruction `i`.
    #[inline]
    pub fn addr(&self, i: u32) -> u64 {
        self.insn_addr[i as usize]
    }

    /// Function of static instruction `i` ([`NO_FUNC`] if none).
    #[inline]
    pub fn func(&self, i: u32) -> GFunc {
        self.insn_func[i as usize]
    }

    /// All functions.
    pub fn funcs(&self) -> &[RtFunc] {
        &self.funcs
    }

    /// Number of static instructions decoded (plus unknown ones seen).
    pub fn len(&self) -> usize {
        self.insns.len()
    }

    /// Whether nothing was decoded.
    pub fn is_empty(&self) -> bool {
        self.insns.is_empty()
    }

    /// Decoded instructions that start in run-time `[start, end)` (instructions outside the
    /// decoded code, [`CodeMap::lookup`]'s `Unknown` entries, are not counted).
    pub fn insns_between(&self, start: u64, end: u64) -> u64 {
        self.regions
            .iter()
            .filter(|r| r.start < end && start < r.end)
            .map(|r| {
                let lo = (start.max(r.start) - r.start) as usize;
                let hi = (end.min(r.end) - r.start) as usize;
                r.index[lo..hi].iter().filter(|&&i| i != u32::MAX).count() as u64
            })
            .sum()
    }

    /// Every static pair with at least one fusion category, sorted by address.
    pub fn fused_pairs(&self) -> Vec<FusedPair> {
        let mut v: Vec<FusedPair> = (0..self.insns.len())
            .filter(|&i| self.insns[i].fuse != 0)
            .filter_map(|i| {
                let a = self.insn_addr[i];
                let len1 = self.insns[i].len;
                let next = a + len1 as u64;
                let r = self
                    .regions
                    .iter()
                    .find(|r| next >= r.start && next < r.end)?;
                let j = r.index[(next - r.start) as usize];
                (j != u32::MAX).then(|| FusedPair {
                    addr: a,
                    len1,
                    len2: self.insns[j as usize].len,
                    cats: self.insns[i].fuse,
                })
            })
            .collect();
        v.sort_by_key(|p| p.addr);
        v
    }
}

/// Address compaction of one fusion alternative: new address = old − bytes saved by the
/// fused pairs that end at or before it.
#[derive(Clone, Debug, Default)]
pub struct Compaction {
    ends: Vec<u64>,
    cum: Vec<u64>,
}

impl Compaction {
    /// The compaction for pairs whose categories intersect `mask`.
    pub fn new(pairs: &[FusedPair], mask: u8) -> Self {
        let mut c = Compaction::default();
        let mut total = 0;
        let mut last_end = 0;
        for p in pairs.iter().filter(|p| p.cats & mask != 0) {
            if p.addr < last_end {
                continue; // overlapping pairs: the first wins
            }
            total += p.saved();
            last_end = p.end();
            c.ends.push(p.end());
            c.cum.push(total);
        }
        c
    }

    /// The compacted address of `addr`.
    pub fn map(&self, addr: u64) -> u64 {
        let k = self.ends.partition_point(|&e| e <= addr);
        if k == 0 {
            addr
        } else {
            addr - self.cum[k - 1]
        }
    }

    /// Total bytes saved.
    pub fn saved(&self) -> u64 {
        self.cum.last().copied().unwrap_or(0)
    }
}

/// Whether category bits `cats` are fused under alternative `mask`.
pub fn fused_under(cats: u8, mask: u8) -> bool {
    cats & mask != 0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn compaction_by_hand() {
        let pairs = [
            FusedPair {
                addr: 10,
                len1: 3,
                len2: 2,
                cats: 1 << FuseCat::T1R as u8,
            },
            FusedPair {
                addr: 20,
                len1: 4,
                len2: 6,
                cats: 1 << FuseCat::Intel as u8,
            },
        ];
        let c = Compaction::new(&pairs, 1 << FuseCat::T1R as u8);
        assert_eq!(
            (c.map(10), c.map(14), c.map(15), c.map(30)),
            (10, 14, 13, 28)
        );
        assert_eq!(c.saved(), 2);
        let both = Compaction::new(
            &pairs,
            (1 << FuseCat::T1R as u8) | (1 << FuseCat::Intel as u8),
        );
        assert_eq!((both.map(20), both.map(30)), (18, 24));
        assert_eq!(Compaction::new(&pairs, 0).map(30), 30);
    }

    #[test]
    fn decodes_own_binary() {
        let img = crate::image::Image::load(&std::env::current_exe().unwrap()).unwrap();
        let mut m = CodeMap::new(&[(&img, 0)]);
        let b = img.symbol(crate::roi::BEGIN_SYMBOL).unwrap();
        let i = m.lookup(b, 1);
        assert_ne!(m.insn(i).class, crate::insn::Class::Unknown);
        assert_eq!(m.funcs()[m.func(i) as usize].name, crate::roi::BEGIN_SYMBOL);
        assert!(!m.fused_pairs().is_empty());
    }
}
