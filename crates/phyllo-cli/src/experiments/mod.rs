//! The experiments registered with the report, in report order.

use crate::report::Experiment;

/// Every registered experiment, in the order the report shows them.
pub fn all() -> Vec<Box<dyn Experiment>> {
    vec![]
}
