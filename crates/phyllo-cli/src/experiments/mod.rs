//! The experiments registered with the report, in report order.

mod rawudp;

use crate::report::Experiment;

/// Every registered experiment, in the order the report shows them.
pub fn all() -> Vec<Box<dyn Experiment>> {
    vec![Box::new(rawudp::RawUdp)]
}
