//! Cross-checks of the architecture analyzer against valgrind's own tools.
//!
//! - L1I and L1D misses of phyllo's cachegrind-compatible mode agree with cachegrind within
//!   1 % for three geometries. Cachegrind 3.19 cannot restrict itself to a region, so both
//!   sides count the *whole program* (`--whole-program`): the same instruction stream through
//!   two simulators.
//! - The instruction count between the markers equals callgrind's count with
//!   `--toggle-collect=phyllo_roi_region` (the region as one function) within 1 %.
//!
//! Every test prints a message and passes when valgrind is missing.

use std::process::Command;

use phyllo_analyze::analysis::Setup;
use phyllo_analyze::cache::HierarchyConfig;
use phyllo_analyze::capture::{self, Workload};
use phyllo_analyze::session;

fn compute(kib: usize) -> Workload {
    Workload {
        program: env!("CARGO_BIN_EXE_phyllo-lab").into(),
        args: vec![
            "workload".into(),
            "compute".into(),
            "--size-kib".into(),
            kib.to_string(),
        ],
    }
}

fn skip() -> bool {
    if !capture::have_valgrind() {
        eprintln!("valgrind not found: apt-get install valgrind (test skipped)");
        return true;
    }
    false
}

fn rel(a: u64, b: u64) -> f64 {
    (a as f64 - b as f64).abs() / (b.max(1) as f64)
}

#[test]
fn cachegrind_agrees_within_one_percent() {
    if skip() {
        return;
    }
    let geoms = HierarchyConfig::cachegrind_crosscheck();
    let mut p = session::prepare(compute(2)).unwrap();
    let setup = Setup {
        hierarchies: geoms.to_vec(),
        ..Default::default()
    };
    let ours = session::analyze(&mut p, setup, true).unwrap().report;
    for (k, h) in geoms.iter().enumerate() {
        let cg = capture::cachegrind(&compute(2), h).unwrap();
        let (_, i, d, _) = ours.caches[k];
        let cg_i = cg.get("I1mr");
        let cg_d = cg.get("D1mr") + cg.get("D1mw");
        eprintln!(
            "{h}: L1I {} vs cachegrind {cg_i}, L1D {} vs {cg_d}; Ir {} vs {}",
            i.misses(),
            d.misses(),
            i.accesses(),
            cg.get("Ir")
        );
        assert!(
            rel(i.misses(), cg_i) < 0.01,
            "L1I misses {} vs cachegrind {cg_i}",
            i.misses()
        );
        assert!(
            rel(d.misses(), cg_d) < 0.01,
            "L1D misses {} vs cachegrind {cg_d}",
            d.misses()
        );
        // cachegrind fetches every iteration of a rep string instruction; the analyzer once
        // per execution (the folded iterations are repeated fetches of one line: hits).
        let folded = ours.rep.records - ours.rep.executions;
        assert!(rel(i.accesses() + folded, cg.get("Ir")) < 0.01);
    }
}

#[test]
fn region_instruction_count_matches_callgrind() {
    if skip() {
        return;
    }
    let mut p = session::prepare(compute(2)).unwrap();
    let setup = Setup {
        instructions: true,
        ..Default::default()
    };
    let ours = session::analyze(&mut p, setup, false).unwrap().report;
    let cl = capture::callgrind(&compute(2), phyllo_analyze::roi::REGION_SYMBOL, None).unwrap();
    eprintln!(
        "region: {} instructions ({} fetches), callgrind {}",
        ours.instructions,
        ours.instruction_records(),
        cl.get("Ir")
    );
    assert_eq!(ours.roi_entries, 1);
    // callgrind counts a rep string instruction once per iteration, as lackey's records.
    assert!(rel(ours.instruction_records(), cl.get("Ir")) < 0.01);
}

#[test]
fn clear_errors() {
    let phyllo = env!("CARGO_BIN_EXE_phyllo-lab");
    let out = Command::new(phyllo)
        .args(["analyze", "--l1i", "1000:4:32"])
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("not a multiple"), "{err}");
    let out = Command::new(phyllo)
        .args(["analyze", "--workload", "compute"])
        .env("PHYLLO_VALGRIND", "/nonexistent/valgrind")
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("valgrind not found"));
    if skip() {
        return;
    }
    let out = Command::new(phyllo)
        .args(["analyze", "--workload", "nosuch"])
        .output()
        .unwrap();
    assert!(String::from_utf8_lossy(&out.stderr).contains("unknown workload"));
    // A workload that fails under valgrind: a clear error naming the failure, no hang.
    let bad = Workload {
        program: phyllo.into(),
        args: vec!["workload".into(), "nosuch".into()],
    };
    let err = session::prepare(bad)
        .err()
        .expect("a failing workload is an error")
        .to_string();
    assert!(
        err.contains("workload failed") && err.contains("unknown workload"),
        "{err}"
    );
}
