//! The accelerator's critical path, in callgrind instruction counts (deterministic, unlike
//! wall-clock time): per 8-byte message over memlink, the accelerated send and delivery each
//! execute fewer instructions than the layered ones, and together at most 70 % of them — a
//! regression guard above the 0.60 measured in the test profile (0.54 without the sampled
//! check against the layered path, whose first 16 checks per direction weigh on these 220
//! messages: `phyllo-lab critical-path --fast-path-check off`). Seed 004's goal of ⅓
//! is checked where it is stated, in the release build: `phyllo report`, experiment `accel`,
//! figure `accel.critical_path_ratio` (0.32).
//!
//! Passes with a message when valgrind is missing.

use phyllo_analyze::capture;
use phyllo_lab::measure::critical_path_instructions;

#[test]
fn the_accelerated_critical_path_executes_fewer_instructions() {
    if !capture::have_valgrind() {
        eprintln!("valgrind not found: apt-get install valgrind (test skipped)");
        return;
    }
    let exe = std::path::Path::new(env!("CARGO_BIN_EXE_phyllo-lab"));
    let spec = "frag(1400):window(16):checksum";
    let off = critical_path_instructions(exe, spec, false, 200).unwrap();
    let on = critical_path_instructions(exe, spec, true, 200).unwrap();
    eprintln!("layered {off:?}, accelerated {on:?}");
    assert!(on.send < off.send, "send: {on:?} vs {off:?}");
    assert!(on.deliver < off.deliver, "deliver: {on:?} vs {off:?}");
    let ratio = (on.send + on.deliver) / (off.send + off.deliver);
    assert!(ratio <= 0.70, "critical path ratio {ratio:.3}");
}
