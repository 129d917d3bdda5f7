//! Fuzz the handshake messages (`session::Responder::respond`, `session::Initiation::finish`)
//! and the key parser: any bytes yield an error or (for a genuine message) keys, never a
//! panic, and a refused message leaves the responder and the initiation usable.

#![no_main]

use libfuzzer_sys::fuzz_target;
use phyllo::session::{parse_key_hex, Initiation, Responder, StaticKey};

fuzz_target!(|data: &[u8]| {
    let (Ok(a), Ok(b)) = (
        StaticKey::from_private([1; 32]),
        StaticKey::from_private([2; 32]),
    ) else {
        return;
    };
    let mut r = Responder::new(b.clone(), [a.public()]);
    let _ = r.respond(data, 1);
    if let Ok((mut i, m1)) = Initiation::start(&a, b.public(), 7, 1) {
        let _ = i.finish(data);
        // Still usable after whatever the fuzzer sent.
        if let Ok((_, m2)) = r.respond(&m1, 2) {
            assert!(i.finish(&m2).is_ok());
        }
    }
    if let Ok(s) = std::str::from_utf8(data) {
        let _ = parse_key_hex(s);
    }
});
