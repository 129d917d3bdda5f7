//! The experiments registered with the report, in report order.

mod accel;
mod aead;
mod analyze;
mod bulk;
mod engine;
mod ilp;
mod paths;
mod rawudp;
mod rtt;
mod session;
mod soak;
mod stack;
mod stream;
mod wan;

use crate::report::Experiment;

/// Every registered experiment, in the order the report shows them.
pub fn all() -> Vec<Box<dyn Experiment>> {
    vec![
        Box::new(stack::StackCost),
        Box::new(rtt::Rtt),
        Box::new(stream::Stream),
        Box::new(accel::Accel),
        Box::new(aead::Aead),
        Box::new(soak::Soak),
        Box::new(session::Session),
        Box::new(ilp::Ilp),
        Box::new(bulk::Bulk),
        Box::new(engine::Engine),
        Box::new(rawudp::RawUdp),
        Box::new(analyze::Analyze),
        Box::new(paths::Paths),
        Box::new(wan::Wan),
    ]
}

/// This program, if it is the `phyllo-lab` executable (experiments that start its `serve` or
/// `connect` — the product's own commands — as child processes need it; under `cargo test`
/// it is a test binary).
fn phyllo_exe() -> Option<std::path::PathBuf> {
    std::env::current_exe()
        .ok()
        .filter(|p| p.file_stem().and_then(|s| s.to_str()) == Some("phyllo-lab"))
}
