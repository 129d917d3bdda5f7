//! Property test of the framework core: over ≥ 1000 seeded memlink schedules (loss up to 30 %,
//! duplication, reordering, corruption) and messages from 1 B to 64 KiB, the application
//! receives exactly what was sent, in order, once — for the dynamic and the static stack.

mod common;
use common::*;
use phyllo::testing::memlink::MemLink;
use phyllo::testing::Pair;

const SCHEDULES: u64 = 1000;

/// Run `SCHEDULES` seeded fault schedules through pairs made by `pair`.
fn check<S: phyllo::LayerSet>(salt: u64, mut pair: impl FnMut(MemLink) -> Pair<S>) {
    for seed in 0..SCHEDULES {
        let mut r = rng(seed ^ salt);
        let f = faults(&mut r);
        let msgs: Vec<Vec<u8>> = sizes(&mut r, 10)
            .into_iter()
            .enumerate()
            .map(|(i, n)| payload(i, n))
            .collect();
        let mut p = pair(MemLink::new(f.clone(), seed));
        let got = exchange(&mut p, &msgs);
        assert!(
            got == msgs,
            "seed {seed} faults {f:?}: got {} of {} messages (or wrong bytes)",
            got.len(),
            msgs.len()
        );
    }
}

#[test]
fn reliable_fifo_exactly_once_under_faults_dynamic() {
    check(0, |link| Pair::from_spec_with(SPEC4, link).unwrap());
}

#[test]
fn reliable_fifo_exactly_once_under_faults_static() {
    check(0x5eed, static_pair);
}

#[test]
fn unsealed_stack_too() {
    check(0xabc, |link| {
        Pair::from_spec_with("frag(1400):window(16):checksum", link).unwrap()
    });
}
