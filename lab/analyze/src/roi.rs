//! Region-of-interest markers, linked into the workload.
//!
//! Seed 003 measures only the critical-path processing of its 10 k-packet trace, not start-up;
//! seed 000 (Mosberger et al., §2.1, §4.3) likewise measures trace length on the path itself.
//! A workload calls [`run`] around the work it wants measured: the non-inlined, unmangled
//! functions [`phyllo_roi_begin`] and [`phyllo_roi_end`] mark the region, and
//! [`phyllo_roi_region`] holds it as one function (so callgrind's `--toggle-collect` can measure
//! the same region). The analyzer finds their addresses in the workload's symbol table and
//! counts only records between the instruction fetch at `phyllo_roi_begin`'s entry and the one at
//! `phyllo_roi_end`'s entry.
//!
//! PIE executables are loaded by valgrind at a bias the analyzer must know; a workload that
//! calls [`probe_exit_if_requested`] first prints the run-time marker addresses and exits when
//! the environment variable [`PROBE_ENV`] is set, which lets the analyzer measure the bias under
//! `valgrind --tool=none` in a second.

use std::sync::atomic::{AtomicU32, Ordering};

/// Symbol name of the begin marker.
pub const BEGIN_SYMBOL: &str = "phyllo_roi_begin";
/// Symbol name of the end marker.
pub const END_SYMBOL: &str = "phyllo_roi_end";
/// Symbol name of the function that holds the whole region.
pub const REGION_SYMBOL: &str = "phyllo_roi_region";
/// Environment variable that makes [`probe_exit_if_requested`] print the markers and exit.
pub const PROBE_ENV: &str = "PHYLLO_ROI_PROBE";

static ROI_STATE: AtomicU32 = AtomicU32::new(0);

/// Begin marker: its entry address starts the region of interest.
#[inline(never)]
#[no_mangle]
pub extern "C" fn phyllo_roi_begin() {
    // Distinct bodies keep the linker and LLVM's function merging from folding the markers.
    ROI_STATE.store(0x5eed_0001, Ordering::Relaxed);
}

/// End marker: its entry address ends the region of interest.
#[inline(never)]
#[no_mangle]
pub extern "C" fn phyllo_roi_end() {
    ROI_STATE.store(0x5eed_0002, Ordering::Relaxed);
}

/// The region itself, one function for callgrind's `--toggle-collect`.
#[inline(never)]
#[no_mangle]
pub fn phyllo_roi_region(work: &mut dyn FnMut()) {
    work();
    ROI_STATE.fetch_add(4, Ordering::Relaxed);
}

/// Runs `f` as the region of interest: begin marker, region, end marker.
pub fn run<T>(f: impl FnOnce() -> T) -> T {
    let mut f = Some(f);
    let mut out = None;
    phyllo_roi_begin();
    phyllo_roi_region(&mut || {
        if let Some(g) = f.take() {
            out = Some(g());
        }
    });
    phyllo_roi_end();
    match out {
        Some(v) => v,
        None => unreachable!("phyllo_roi_region always runs its closure"),
    }
}

/// The line [`probe_exit_if_requested`] prints: run-time addresses of the markers.
pub fn marker_line() -> String {
    format!(
        "phyllo-roi begin={:#x} end={:#x} region={:#x}",
        phyllo_roi_begin as *const () as usize,
        phyllo_roi_end as *const () as usize,
        phyllo_roi_region as *const () as usize
    )
}

/// If [`PROBE_ENV`] is set, prints [`marker_line`] and the executable file mappings of the
/// process (`phyllo-map START OFFSET PATH`, from `/proc/self/maps`) on stdout and exits.
pub fn probe_exit_if_requested() {
    if std::env::var_os(PROBE_ENV).is_some() {
        println!("{}", marker_line());
        if let Ok(maps) = std::fs::read_to_string("/proc/self/maps") {
            for (start, off, path) in parse_maps(&maps) {
                println!("phyllo-map {start:#x} {off:#x} {path}");
            }
        }
        std::process::exit(0);
    }
}

/// Executable, file-backed mappings of a `/proc/PID/maps` text: (start, file offset, path).
/// valgrind's own files are left out.
pub fn parse_maps(text: &str) -> Vec<(u64, u64, String)> {
    text.lines()
        .filter_map(|l| {
            let mut it = l.split_whitespace();
            let range = it.next()?;
            let perms = it.next()?;
            let off = u64::from_str_radix(it.next()?, 16).ok()?;
            let _dev = it.next()?;
            let _inode = it.next()?;
            let path = it.next()?;
            let start = u64::from_str_radix(range.split('-').next()?, 16).ok()?;
            (perms.contains('x') && path.starts_with('/') && !path.contains("valgrind"))
                .then(|| (start, off, path.to_string()))
        })
        .collect()
}

/// The `phyllo-map` lines of a probe's output.
pub fn parse_map_lines(text: &str) -> Vec<(u64, u64, String)> {
    text.lines()
        .filter_map(|l| {
            let mut it = l.strip_prefix("phyllo-map ")?.splitn(3, ' ');
            let start = u64::from_str_radix(it.next()?.trim_start_matches("0x"), 16).ok()?;
            let off = u64::from_str_radix(it.next()?.trim_start_matches("0x"), 16).ok()?;
            Some((start, off, it.next()?.to_string()))
        })
        .collect()
}

/// Parses a [`marker_line`] (anywhere in `text`): run-time begin, end and region addresses.
pub fn parse_marker_line(text: &str) -> Option<(u64, u64, u64)> {
    let line = text.lines().find(|l| l.starts_with("phyllo-roi "))?;
    let mut it = line.split_whitespace().skip(1).map(|kv| {
        let v = kv.split_once('=')?.1.trim_start_matches("0x");
        u64::from_str_radix(v, 16).ok()
    });
    Some((it.next()??, it.next()??, it.next()??))
}

/// Filter that lets records through only inside the region: the instruction fetch at `begin`
/// opens it, the one at `end` closes it (the region may be entered many times).
#[derive(Clone, Debug)]
pub struct RoiFilter {
    begin: u64,
    end: u64,
    active: bool,
    /// Times the region was entered.
    pub entries: u64,
    /// Times the region was left.
    pub exits: u64,
}

impl RoiFilter {
    /// A filter for the run-time marker addresses `begin` and `end`.
    pub fn new(begin: u64, end: u64) -> Self {
        RoiFilter {
            begin,
            end,
            active: false,
            entries: 0,
            exits: 0,
        }
    }

    /// A filter that lets everything through (whole-program mode).
    pub fn whole_program() -> Self {
        RoiFilter {
            begin: u64::MAX,
            end: u64::MAX,
            active: true,
            entries: 1,
            exits: 1,
        }
    }

    /// Whether the region is open now.
    pub fn active(&self) -> bool {
        self.active
    }

    /// Updates the state with an instruction fetch at `addr`; returns whether it counts.
    #[inline(always)]
    pub fn instr(&mut self, addr: u64) -> bool {
        if addr == self.begin && !self.active {
            self.active = true;
            self.entries += 1;
        } else if addr == self.end && self.active {
            self.active = false;
            self.exits += 1;
        }
        self.active
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn markers_are_distinct_and_line_round_trips() {
        let (b, e, r) = parse_marker_line(&marker_line()).unwrap();
        assert_ne!(b, e);
        assert_ne!(b, r);
        assert_eq!(run(|| 7), 7);
    }

    #[test]
    fn maps() {
        let m = "55d0-55e0 r-xp 00002000 08:01 123 /usr/bin/x\n7f00-7f10 r--p 0 08:01 5 /lib/a.so\n7f20-7f30 r-xp 00001000 08:01 6 /usr/libexec/valgrind/vgpreload_core.so\n";
        let v = parse_maps(m);
        assert_eq!(v, vec![(0x55d0, 0x2000, "/usr/bin/x".to_string())]);
        let line = format!("phyllo-map {:#x} {:#x} {}", v[0].0, v[0].1, v[0].2);
        assert_eq!(parse_map_lines(&line), v);
    }

    #[test]
    fn filter_toggles() {
        let mut f = RoiFilter::new(10, 20);
        let seen: Vec<bool> = [1, 10, 11, 20, 21, 10, 12, 20]
            .iter()
            .map(|&a| f.instr(a))
            .collect();
        assert_eq!(seen, [false, true, true, false, false, true, true, false]);
        assert_eq!((f.entries, f.exits), (2, 2));
    }
}
