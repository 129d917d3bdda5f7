//! Datagram size from the path (DPLPMTUD, `phyllo::plpmtu`) through the documented calls:
//! connections of the default stack over simulated paths that drop datagrams above an MTU,
//! each layered and accelerated. The search finds what the path carries (within its
//! granularity, never above), `frag` cuts to it, no data datagram is ever too large, and
//! every message arrives exactly once.

use phyllo::faults::Faults;
use phyllo::plpmtu::{BASE_PLPMTU, MAX_PLPMTU, SEARCH_GRANULARITY};
use phyllo::testing::memlink::{MemLink, Side};
use phyllo::testing::Dumbbell;
use phyllo::{Time, DEFAULT_STACK};
use std::time::Duration;

/// A bulk transfer of `msgs` messages of `len` bytes over a 20 ms round trip whose
/// datagrams above `mtu` bytes are dropped (both ways); the link and the sender.
fn transfer(mtu: usize, accel: bool, msgs: u64, len: usize) -> Dumbbell {
    let link = MemLink::new(Faults::none(Duration::from_millis(10)), 3)
        .with_mtu(Side::A, mtu)
        .with_mtu(Side::B, mtu);
    let mut d: Dumbbell = Dumbbell::new(link);
    let i = d
        .add_spec(DEFAULT_STACK, accel, Time::ZERO, 1)
        .expect("builds");
    d.flows[i].limit = Some(msgs);
    let done = d.run_bulk(Time(30_000_000_000), len).expect("no stall");
    assert!(done, "mtu {mtu} accel {accel}: not complete");
    let s = &d.flows[0].stats;
    assert_eq!(s.delivered_msgs, msgs, "mtu {mtu} accel {accel}");
    assert_eq!((s.misordered, s.corrupt), (0, 0), "mtu {mtu} accel {accel}");
    // The search goes on while the connection is idle (each failing size costs three probe
    // timeouts).
    let until = d.now + Duration::from_secs(10);
    d.run_until(until).expect("no stall");
    d
}

#[test]
fn the_search_finds_what_the_path_carries_and_frag_cuts_to_it() {
    for accel in [false, true] {
        for mtu in [1500, 1452, 1400, 1300, 1280, BASE_PLPMTU] {
            let d = transfer(mtu, accel, 3000, 4000);
            let a = &d.flows[0].a;
            let found = a.stats().event("pmtu.datagram") as usize;
            let found = if found == 0 { BASE_PLPMTU } else { found };
            let carries = mtu.min(MAX_PLPMTU);
            let probes = a.stats().event("pmtu.probe");
            let too_big = d.link.stats().too_big;
            println!(
                "accel {accel}: path {mtu}: found {found} with {probes} probes; {too_big} \
                 datagrams too large"
            );
            // Sizes count the accelerator's connection identification, which only its first
            // datagrams carry: an accelerated connection's count runs up to that much (16
            // bytes) above the wire's. What matters holds either way: data is never too large.
            let slack = if accel { 16 } else { 0 };
            assert!(
                found <= carries + slack,
                "accel {accel}: {mtu}: found {found}"
            );
            assert!(
                carries + slack - found < SEARCH_GRANULARITY + slack,
                "accel {accel}: {mtu}: found {found}"
            );
            // Only probes were ever too large: no retransmission of data was needed for it.
            assert!(
                too_big <= probes,
                "accel {accel}: {mtu}: {too_big} > {probes}"
            );
        }
    }
}

#[test]
fn a_path_that_carries_full_frames_is_found_with_one_probe_and_used() {
    for accel in [false, true] {
        let d = transfer(1500, accel, 3000, 1400);
        let a = &d.flows[0].a;
        assert_eq!(a.stats().event("pmtu.probe"), 1, "accel {accel}");
        assert_eq!(a.stats().event("pmtu.datagram") as usize, MAX_PLPMTU);
        // 1400-byte messages fit a datagram once the search confirmed 1452 bytes: after the
        // first round trips, one datagram per message.
        let out = d.flows[0].stats.datagrams_out;
        assert!(
            out < 3000 + 300,
            "accel {accel}: {out} datagrams for 3000 messages"
        );
    }
}
