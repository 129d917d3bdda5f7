//! Property test of the framework core: over ≥ 1000 seeded memlink schedules (loss up to 30 %,
//! duplication, reordering, corruption) and messages from 1 B to 64 KiB, the application
//! receives exactly what was sent, in order, once — for the dynamic and the static stack.

mod common;
use common::*;
use phyllo::harness::Pair;
use phyllo::link::memlink::MemLink;

const SCHEDULES: u64 = 1000;

#[test]
fn reliable_fifo_exactly_once_under_faults_dynamic() {
    for seed in 0..SCHEDULES {
        let mut r = rng(seed);
        let f = faults(&mut r);
        let msgs: Vec<Vec<u8>> = sizes(&mut r, 10)
            .into_iter()
            .enumerate()
            .map(|(i, n)| payload(i, n))
            .collect();
        let mut pair = Pair::from_spec_with(SPEC4, MemLink::new(f.clone(), seed)).unwrap();
        let got = exchange(&mut pair, &msgs);
        assert!(
            got == msgs,
            "seed {seed} faults {f:?}: got {} of {} messages (or wrong bytes)",
            got.len(),
            msgs.len()
        );
    }
}

#[test]
fn reliable_fifo_exactly_once_under_faults_static() {
    for seed in 0..SCHEDULES {
        let mut r = rng(seed ^ 0x5eed);
        let f = faults(&mut r);
        let msgs: Vec<Vec<u8>> = sizes(&mut r, 10)
            .into_iter()
            .enumerate()
            .map(|(i, n)| payload(i, n))
            .collect();
        let mut pair = static_pair(MemLink::new(f.clone(), seed));
        let got = exchange(&mut pair, &msgs);
        assert!(
            got == msgs,
            "seed {seed} faults {f:?}: got {} of {} messages (or wrong bytes)",
            got.len(),
            msgs.len()
        );
    }
}

#[test]
fn unsealed_stack_too() {
    for seed in 0..200 {
        let mut r = rng(seed ^ 0xabc);
        let f = faults(&mut r);
        let msgs: Vec<Vec<u8>> = sizes(&mut r, 10)
            .into_iter()
            .enumerate()
            .map(|(i, n)| payload(i, n))
            .collect();
        let mut pair =
            Pair::from_spec_with("frag(1400):window(16):checksum", MemLink::new(f, seed)).unwrap();
        assert!(exchange(&mut pair, &msgs) == msgs, "seed {seed}");
    }
}
