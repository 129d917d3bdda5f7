//! Fuzz the stack-spec parser (`stack::Registry::build`): any string yields a stack or a
//! `SpecError` naming the bad token, never a panic; a stack it yields builds a connection
//! with or without the accelerator, or fails with a `BuildError`.

#![no_main]

use libfuzzer_sys::fuzz_target;
use phyllo::stack::Registry;
use phyllo::{Config, Connection, Role};

fuzz_target!(|data: &[u8]| {
    let Ok(spec) = std::str::from_utf8(data) else {
        return;
    };
    let reg = Registry::new();
    match reg.build(spec) {
        Ok(layers) => {
            let accelerate = data.len() % 2 == 0;
            let mut cfg = Config::new(Role::Initiator);
            cfg.accelerate = accelerate;
            let _ = Connection::new(layers, cfg);
        }
        Err(e) => {
            let _ = e.to_string();
        }
    }
});
