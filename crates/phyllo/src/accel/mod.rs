//! The Protocol Accelerator of seed 004 (van Renesse, "Masking the Overhead of Protocol
//! Layering"): the compact layout ([`crate::layout::Layout::compact`]), the [`preamble`] with
//! its connection cookie, and the packet [`filter`]s of §3.3.

pub mod filter;
pub mod preamble;
