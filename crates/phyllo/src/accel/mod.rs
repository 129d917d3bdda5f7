//! The Protocol Accelerator of seed 004 (van Renesse, "Masking the Overhead of Protocol
//! Layering").
//!
//! So far this holds the packet filters of seed 004 §3.3 ([`filter`]); the layout compiler,
//! preamble, header prediction and packing live beside it as they land.

pub mod filter;
