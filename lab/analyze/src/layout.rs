//! Virtual code layouts: the i-cache re-simulated with functions placed in any order.
//!
//! Seed 000 §3 (Mosberger et al.) improves i-cache behaviour by *cloning* functions into a
//! chosen layout: invocation order ("closest is best"), the *bipartite* layout (path functions
//! executed once per path invocation in one partition of the cache, library functions executed
//! several times in the other, each in invocation order) and, for contrast, a deliberately BAD
//! layout that makes the hot path conflict. Here a layout is a map function → new base
//! address, applied to every instruction address of the trace, so no relinking is needed.

use std::collections::HashMap;

use crate::codemap::{GFunc, RtFunc};

/// How to compute a layout from a [`Profile`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum LayoutKind {
    /// As linked.
    Original,
    /// Executed functions packed in first-invocation order.
    InvocationOrder,
    /// Seed 000's bipartite layout: library functions (called more than once per path
    /// invocation) packed first, path functions placed only in the cache sets the library
    /// does not use, both in invocation order.
    Bipartite,
    /// Every executed function starts at the same cache set (maximal conflicts).
    Bad,
    /// The named functions first, in this order, then the other executed ones.
    List(Vec<String>),
}

impl std::str::FromStr for LayoutKind {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        Ok(match s {
            "original" => LayoutKind::Original,
            "invocation" | "invocation-order" => LayoutKind::InvocationOrder,
            "bipartite" | "clo" => LayoutKind::Bipartite,
            "bad" => LayoutKind::Bad,
            other => match other.strip_prefix("list:") {
                Some(l) => LayoutKind::List(l.split(',').map(str::to_string).collect()),
                None => {
                    return Err(format!(
                    "unknown layout {s:?} (original, invocation, bipartite, bad, list:f1,f2,...)"
                ))
                }
            },
        })
    }
}

/// What a trace says about functions: first-invocation order and call counts.
#[derive(Clone, Debug, Default)]
pub struct Profile {
    /// Functions in order of first execution.
    pub order: Vec<GFunc>,
    /// Entries (fetches of the function's first instruction) per function.
    pub calls: HashMap<GFunc, u64>,
}

/// A function → new start address map.
#[derive(Clone, Debug, Default)]
pub struct Layout {
    /// Layout name.
    pub name: String,
    new_start: HashMap<GFunc, u64>,
}

impl Layout {
    /// Computes a layout. `period` is the i-cache way size (sets × line) on which the
    /// bipartite and bad layouts are built; `path_invocations` the number of path invocations
    /// (packets) in the profile; functions are aligned to 16 bytes from `base`.
    pub fn compute(
        kind: &LayoutKind,
        funcs: &[RtFunc],
        profile: &Profile,
        period: u64,
        path_invocations: u64,
        base: u64,
    ) -> Layout {
        let al = |x: u64| (x + 15) & !15;
        let mut new_start = HashMap::new();
        let name;
        match kind {
            LayoutKind::Original => name = "original".to_string(),
            LayoutKind::InvocationOrder | LayoutKind::List(_) => {
                let mut order: Vec<GFunc> = Vec::new();
                if let LayoutKind::List(names) = kind {
                    for n in names {
                        if let Some(i) = funcs.iter().position(|f| &f.name == n) {
                            order.push(i as GFunc);
                        }
                    }
                    name = "list".to_string();
                } else {
                    name = "invocation order".to_string();
                }
                for &f in &profile.order {
                    if !order.contains(&f) {
                        order.push(f);
                    }
                }
                let mut at = base;
                for f in order {
                    new_start.insert(f, at);
                    at = al(at + funcs[f as usize].size);
                }
            }
            LayoutKind::Bipartite => {
                name = "bipartite".to_string();
                let per = path_invocations.max(1);
                let (lib, path): (Vec<GFunc>, Vec<GFunc>) = profile
                    .order
                    .iter()
                    .partition(|f| profile.calls.get(f).copied().unwrap_or(0) > per);
                let mut at = base;
                for &f in &lib {
                    new_start.insert(f, at);
                    at = al(at + funcs[f as usize].size);
                }
                let lib_bytes = at - base;
                let usable = period.saturating_sub(lib_bytes);
                if lib_bytes >= period || usable < 64 {
                    // The library fills the cache: plain invocation order for the path.
                    for &f in &path {
                        new_start.insert(f, at);
                        at = al(at + funcs[f as usize].size);
                    }
                } else {
                    // Path functions only in [lib_bytes, period) modulo period.
                    for &f in &path {
                        let size = funcs[f as usize].size;
                        let off = (at - base) % period;
                        if off < lib_bytes {
                            at += lib_bytes - off;
                        } else if size <= usable && off + size > period {
                            at += period - off + lib_bytes;
                        }
                        new_start.insert(f, at);
                        at = al(at + size);
                    }
                }
            }
            LayoutKind::Bad => {
                name = "bad".to_string();
                let mut at = base;
                for &f in &profile.order {
                    new_start.insert(f, at);
                    let size = funcs[f as usize].size;
                    at += size.div_ceil(period.max(1)).max(1) * period.max(1);
                }
            }
        }
        Layout { name, new_start }
    }

    /// The new address of `addr` in function `f` (unchanged if `f` is not placed).
    #[inline]
    pub fn map(&self, f: GFunc, fstart: u64, addr: u64) -> u64 {
        match self.new_start.get(&f) {
            Some(&s) => s + (addr - fstart),
            None => addr,
        }
    }

    /// Whether the layout moves nothing.
    pub fn is_identity(&self) -> bool {
        self.new_start.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn funcs() -> Vec<RtFunc> {
        (0..4)
            .map(|k| RtFunc {
                start: 0x1000 * (k + 1),
                size: 100,
                name: format!("f{k}"),
            })
            .collect()
    }

    #[test]
    fn orders() {
        let fs = funcs();
        let mut p = Profile {
            order: vec![2, 0, 3],
            ..Default::default()
        };
        p.calls.insert(2, 1);
        p.calls.insert(0, 10);
        p.calls.insert(3, 1);
        let inv = Layout::compute(&LayoutKind::InvocationOrder, &fs, &p, 1024, 1, 0);
        assert_eq!(inv.map(2, 0x3000, 0x3004), 4);
        assert_eq!(inv.map(0, 0x1000, 0x1000), 112);
        let bad = Layout::compute(&LayoutKind::Bad, &fs, &p, 1024, 1, 0);
        assert_eq!(bad.map(0, 0x1000, 0x1000) % 1024, 0);
        assert_eq!(bad.map(3, 0x4000, 0x4000) % 1024, 0);
        let bip = Layout::compute(&LayoutKind::Bipartite, &fs, &p, 1024, 1, 0);
        assert_eq!(bip.map(0, 0x1000, 0x1000), 0); // the library function first
        assert!(bip.map(2, 0x3000, 0x3000) >= 112);
        let list = Layout::compute(&"list:f3".parse().unwrap(), &fs, &p, 1024, 1, 0);
        assert_eq!(list.map(3, 0x4000, 0x4000), 0);
        assert!("nope".parse::<LayoutKind>().is_err());
    }
}
