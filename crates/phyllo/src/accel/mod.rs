//! The Protocol Accelerator of seed 004 (van Renesse, "Masking the Overhead of Protocol
//! Layering"): the compact layout ([`crate::layout::Layout::compact`]), the [`preamble`] with
//! its connection cookie, the packet [`filter`]s of §3.3, and the engine that puts the fast
//! paths of Figure 3, deferred post-processing and message packing in front of a
//! connection's stack (enable it with [`crate::Config::accelerated`]).

mod engine;

pub mod preamble;

pub use crate::filter::{MISS_FILTER, MISS_FRAGMENT};
pub(crate) use engine::{build, declare, Pa};
pub use engine::{unpack_ranges, AccelStats, Miss};
