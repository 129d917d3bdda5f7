//! Differential test: the dynamic stack (built from a spec string, virtual calls) and the
//! static stack (monomorphized) put the same datagrams on the wire, in the same order, for
//! the same inputs and the same fault schedule: the same count, the same lengths, and
//! byte-identical headers. The sealed bodies differ, as they must: every pair has keys of its
//! own ([`Config::pair`]), so the same message is a different ciphertext in each.

mod common;
use common::*;
use phyllo::testing::memlink::MemLink;
use phyllo::testing::Pair;
use phyllo::{Config, Connection};

#[test]
fn dynamic_and_static_stacks_put_the_same_datagrams_on_the_wire() {
    for seed in 0..100 {
        let mut r = rng(seed);
        let f = faults(&mut r);
        let msgs: Vec<Vec<u8>> = sizes(&mut r, 8)
            .into_iter()
            .enumerate()
            .map(|(i, n)| payload(i, n))
            .collect();
        let (ca, cb) = Config::pair(false).unwrap();
        let mut dynamic = Pair::new(
            Connection::from_spec(SPEC4, ca).unwrap(),
            Connection::from_spec(SPEC4, cb).unwrap(),
            MemLink::new(f.clone(), seed),
        );
        let mut stat = static_pair(MemLink::new(f, seed));
        let header = dynamic.a.layout().header_len();
        assert_eq!(header, stat.a.layout().header_len());
        dynamic.wire = Some(Vec::new());
        stat.wire = Some(Vec::new());
        let got_d = exchange(&mut dynamic, &msgs);
        let got_s = exchange(&mut stat, &msgs);
        assert_eq!(got_d, msgs, "seed {seed}");
        assert_eq!(got_s, msgs, "seed {seed}");
        let (wd, ws) = (dynamic.wire.unwrap(), stat.wire.unwrap());
        assert!(!wd.is_empty());
        assert_eq!(wd.len(), ws.len(), "seed {seed}: datagram counts differ");
        for (k, ((sd, d), (ss, s))) in wd.iter().zip(&ws).enumerate() {
            assert_eq!(sd, ss, "seed {seed}: datagram {k} from different ends");
            assert_eq!(d.len(), s.len(), "seed {seed}: datagram {k} lengths differ");
            assert!(
                d[..header] == s[..header],
                "seed {seed}: datagram {k} headers differ"
            );
        }
    }
}
