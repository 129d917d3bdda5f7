//! phyllo: layered network protocols whose layering costs almost nothing.
//!
//! See `DESIGN.md` in the shared folder for the design this crate builds: a sans-IO core of
//! canonical layers (seed 004 §3.1), stacks built from a spec string or monomorphized, links,
//! and (in later modules) the Protocol Accelerator, the integrated data path and the receive
//! engine.

#![warn(missing_docs)]

pub mod accel;
pub mod field;
