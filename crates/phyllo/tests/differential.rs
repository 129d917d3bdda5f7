//! Differential test: the dynamic stack (built from a spec string, virtual calls) and the
//! static stack (monomorphized) put byte-identical datagrams on the wire, in the same order,
//! for the same inputs and the same fault schedule.

mod common;
use common::*;
use phyllo::harness::Pair;
use phyllo::link::memlink::MemLink;
use phyllo::{Config, Connection, Role};

#[test]
fn dynamic_and_static_stacks_are_byte_identical() {
    for seed in 0..100 {
        let mut r = rng(seed);
        let f = faults(&mut r);
        let msgs: Vec<Vec<u8>> = sizes(&mut r, 8)
            .into_iter()
            .enumerate()
            .map(|(i, n)| payload(i, n))
            .collect();
        let end = |role| Connection::from_spec(SPEC4, Config::new(role).with_psk(TEST_KEY));
        let mut dynamic = Pair::new(
            end(Role::Initiator).unwrap(),
            end(Role::Responder).unwrap(),
            MemLink::new(f.clone(), seed),
        );
        let mut stat = static_pair(MemLink::new(f, seed));
        dynamic.wire = Some(Vec::new());
        stat.wire = Some(Vec::new());
        let got_d = exchange(&mut dynamic, &msgs);
        let got_s = exchange(&mut stat, &msgs);
        assert_eq!(got_d, msgs, "seed {seed}");
        assert_eq!(got_s, msgs, "seed {seed}");
        let (wd, ws) = (dynamic.wire.unwrap(), stat.wire.unwrap());
        assert!(!wd.is_empty());
        assert_eq!(wd.len(), ws.len(), "seed {seed}: datagram counts differ");
        for (k, (d, s)) in wd.iter().zip(&ws).enumerate() {
            assert!(d == s, "seed {seed}: datagram {k} differs");
        }
    }
}
