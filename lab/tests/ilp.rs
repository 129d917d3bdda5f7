//! The integrated data path against the layered one: identical packets for random replies of
//! random sizes (most not multiples of any unit), the reply recovered, and random damage
//! refused by every execution with nothing delivered.

use phyllo_lab::ilp::safer::ToyKey;
use phyllo_lab::ilp::xdr::Reply;
use phyllo_lab::ilp::{packet_len, receive, send, Execution};
use proptest::prelude::*;

proptest! {
    #![proptest_config(ProptestConfig { cases: 300, ..ProptestConfig::default() })]

    #[test]
    fn executions_agree_and_invert(
        key in any::<[u8; 8]>(),
        xid in any::<u32>(),
        seq in any::<u32>(),
        data in proptest::collection::vec(any::<u8>(), 0..10_000),
    ) {
        let key = ToyKey(key);
        let r = Reply { xid, seq, data: &data };
        let mut want = Vec::new();
        send(Execution::Layered, &mut key.clone(), &r, &mut want);
        prop_assert_eq!(want.len(), packet_len(data.len()));
        for e in Execution::ALL {
            let mut p = vec![0xee; 3];
            send(e, &mut key.clone(), &r, &mut p);
            prop_assert_eq!(&p, &want);
            let mut got = Vec::new();
            prop_assert_eq!(receive(e, &mut key.clone(), &p, &mut got), Ok((xid, seq)));
            prop_assert_eq!(&got, &data);
        }
    }

    #[test]
    fn damage_is_refused_before_anything_is_delivered(
        data in proptest::collection::vec(any::<u8>(), 0..3000),
        at in any::<prop::sample::Index>(),
        flip in 1u8..=255,
    ) {
        let key = ToyKey([1, 2, 3, 4, 5, 6, 7, 8]);
        let r = Reply { xid: 1, seq: 2, data: &data };
        let mut p = Vec::new();
        send(Execution::Integrated, &mut key.clone(), &r, &mut p);
        let i = at.index(p.len());
        prop_assume!(i != 2 && i != 3); // the reserved bytes are not covered
        p[i] ^= flip;
        for e in Execution::ALL {
            let mut got = Vec::new();
            prop_assert!(receive(e, &mut key.clone(), &p, &mut got).is_err());
            prop_assert!(got.is_empty());
        }
    }
}
