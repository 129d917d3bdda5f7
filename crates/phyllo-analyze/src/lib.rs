//! Architecture analyzer: traces, cache and timing models, instruction analysis.
//!
//! DESIGN.md §6, after seed 003 (Xie, Zhao & Bhuyan, *Architectural analysis and
//! instruction-set optimization for design of network protocol processors*) with the
//! measurement vocabulary of seed 000 (Mosberger et al., trace length, CPI, iCPI, mCPI).
//! valgrind's lackey traces a region of interest of a workload (delimited by the markers of
//! [`roi`]); the trace streams through [`trace::LackeyReader`] into any number of cache
//! hierarchies ([`cache`]), the timing model ([`timing`]) and the instruction analysis
//! ([`insn`]), all in one pass ([`analysis`]); [`capture`] runs valgrind.

#![warn(missing_docs)]

pub mod analysis;
pub mod cache;
pub mod capture;
pub mod codemap;
pub mod image;
pub mod insn;
pub mod layout;
pub mod roi;
pub mod session;
pub mod timing;
pub mod trace;
