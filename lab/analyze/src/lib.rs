//! Architecture analyzer: traces, cache and timing models, instruction analysis.
//!
//! After seed 003 (Xie, Zhao & Bhuyan, *Architectural analysis and
//! instruction-set optimization for design of network protocol processors*) with the
//! measurement vocabulary of seed 000 (Mosberger et al.: trace length, CPI, iCPI, mCPI).
//! This host has no hardware performance counters: valgrind is the instrument, and these
//! models turn its traces into the papers' figures.
//!
//! - [`roi`]: the markers a workload links in to delimit its region of interest;
//! - [`capture`]: valgrind runs — lackey's trace on a pipe, the marker probe (PIE load bias),
//!   cachegrind and callgrind for the cross-checks;
//! - [`trace`]: the streaming lackey parser (never stores a trace);
//! - [`image`], [`codemap`]: ELF symbols and code, decoded once with iced-x86;
//! - [`cache`]: L1I/L1D/L2 models (LRU, FIFO, random; write-back, write-allocate; a
//!   cachegrind-compatible counting mode), the Alpha 21064's and this host's geometries, and
//!   the i-cache bytes fetched but never executed;
//! - [`timing`]: issue width, latencies, penalties → CPU / data / instruction time, CPI, iCPI,
//!   mCPI;
//! - [`insn`]: instruction classes, dependences and fusion rules (seed types 1 and 2, Intel,
//!   Zen);
//! - [`layout`]: virtual code layouts (invocation order, bipartite, bad, any list);
//! - [`analysis`]: all of the above in one pass; [`session`]: probe, trace, analyze.
//!
//! ```text
//! let mut p = session::prepare(Workload { program, args })?;   // probe + decode
//! let setup = Setup { hierarchies: vec![HierarchyConfig::seed003()], instructions: true, ..Default::default() };
//! let report = session::analyze(&mut p, setup, false)?.report; // lackey → one pass
//! ```

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
