//! Fuzz a cookie demux's input (`demux::CookieDemux::handle_datagram`): datagrams from the
//! network, each prefixed with a one-byte length, into a listening endpoint of sealed
//! accelerated connections. Nothing panics, nothing is delivered (no datagram can
//! authenticate), and the connections made for refused datagrams are dropped again.
#![no_main]

use libfuzzer_sys::fuzz_target;
use phyllo::demux::CookieDemux;
use phyllo::stack::DynStack;
use phyllo::{Config, Connection, Time};

fuzz_target!(|data: &[u8]| {
    let mut ep: CookieDemux<DynStack> = CookieDemux::new(
        // Every connection accepted has keys of its own, which no input can know.
        Some(Box::new(|| {
            Connection::from_spec(
                "frag(1400):window(16):checksum:seal",
                Config::pair(true)?.1,
            )
        })),
        4,
    );
    let mut rest = data;
    let mut t = 0u64;
    while let Some((&len, tail)) = rest.split_first() {
        let n = (len as usize).min(tail.len());
        let (d, tail) = tail.split_at(n);
        rest = tail;
        t += 1_000_000;
        ep.handle_datagram(Time(t), d);
        for c in ep.connections() {
            c.handle_timeout(Time(t));
            assert!(c.poll_delivery().is_none(), "forged datagram delivered");
        }
    }
    assert!(
        ep.connections().len() <= 1,
        "state kept for datagrams that did not authenticate"
    );
});
