//! Fuzz the transfer protocol's parser (`phyllo_cli::transfer::Message::parse`) and the name
//! check: any bytes give a message or a `ParseError`, never a panic; a message parsed encodes
//! to bytes that parse to it again; a name either passes `check_name` as a base name or is refused, and a path passes
//! `check_path` only as components that stay inside the output directory.

#![no_main]

use libfuzzer_sys::fuzz_target;
use phyllo_cli::transfer::{check_name, check_path, Message};

fuzz_target!(|data: &[u8]| {
    match Message::parse(data) {
        Ok(m) => {
            let bytes = m.encode();
            assert_eq!(Message::parse(&bytes).as_ref(), Ok(&m));
            if let Message::Offer(offer) = m {
                let name = offer.name;
                if let Ok(n) = check_name(name) {
                    assert!(!n.contains('/') && n != ".." && !n.contains('\0'));
                }
                if let Ok(p) = check_path(name) {
                    assert!(!p.starts_with('/') && !p.contains('\0'));
                    assert!(p.split('/').all(|c| !c.is_empty() && c != "." && c != ".."));
                }
            }
        }
        Err(e) => {
            let _ = e.to_string();
        }
    }
});
