//! Fuzz the transfer protocol's parser (`phyllo_cli::transfer::Message::parse`) and the name
//! check: any bytes give a message or a `ParseError`, never a panic; a message parsed encodes
//! to bytes that parse to it again; a name either passes `check_name` as a base name or is refused.

#![no_main]

use libfuzzer_sys::fuzz_target;
use phyllo_cli::transfer::{check_name, Message};

fuzz_target!(|data: &[u8]| {
    match Message::parse(data) {
        Ok(m) => {
            let bytes = m.encode();
            assert_eq!(Message::parse(&bytes).as_ref(), Ok(&m));
            if let Message::Offer { name, .. } = m {
                if let Ok(n) = check_name(name) {
                    assert!(!n.contains('/') && n != ".." && !n.contains('\0'));
                }
            }
        }
        Err(e) => {
            let _ = e.to_string();
        }
    }
});
