//! Fuzz the XDR reader (`ilp::xdr::Reader`, which `phyllo ilp-ftp` parses its requests and
//! server messages with) and `xdr::unmarshal`: any bytes, driven by the first byte's choice of
//! reads. No panic, and reads only move forward.
#![no_main]

use libfuzzer_sys::fuzz_target;
use phyllo_lab::ilp::xdr::{self, Reader};

fuzz_target!(|data: &[u8]| {
    let _ = xdr::unmarshal(data);
    let Some((&plan, rest)) = data.split_first() else {
        return;
    };
    let mut r = Reader(rest);
    for step in 0..8 {
        let before = r.0.len();
        let ok = match (plan >> step) & 3 {
            0 => r.u32().is_ok(),
            1 => r.u64().is_ok(),
            2 => r.opaque(4096).is_ok(),
            _ => r.end().is_ok(),
        };
        assert!(ok || r.0.len() <= before);
    }
    let _ = r.rest();
    assert!(r.end().is_ok());
});
