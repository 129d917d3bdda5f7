//! Fuzz the integrated data path's receive (`ilp::receive`): any bytes, every execution. No
//! panic, the three agree on accepting or refusing, and a refused packet delivers nothing.
#![no_main]

use libfuzzer_sys::fuzz_target;
use phyllo_lab::ilp::safer::ToyKey;
use phyllo_lab::ilp::{receive, Execution};

fuzz_target!(|data: &[u8]| {
    let mut key = ToyKey([1, 2, 3, 4, 5, 6, 7, 8]);
    let mut outs = Vec::new();
    for e in Execution::ALL {
        let mut got = Vec::new();
        let r = receive(e, &mut key, data, &mut got);
        if r.is_err() {
            assert!(got.is_empty());
        }
        outs.push((r.is_ok(), got));
    }
    assert!(outs.windows(2).all(|w| w[0] == w[1]), "executions disagree");
});
