//! phyllo: layered network protocols whose layering costs almost nothing.
//!
//! A sans-IO core (DESIGN.md Principles): layers with canonical processing (seed 004 §3.1,
//! [`layer`]), composed into dynamic or static stacks ([`mod@stack`]), driven by a
//! [`Connection`] that consumes datagrams and time and produces datagrams,
//! deliveries and timer deadlines. Links ([`link`]) and drivers do the I/O.

#![warn(missing_docs)]
#![forbid(unsafe_code)]

pub mod accel;
pub mod conn;
pub mod endpoint;
pub mod engine;
pub mod field;
pub mod filter;
pub mod harness;
pub mod ilp;
pub mod inet;
pub mod layer;
mod layered;
pub mod layers;
pub mod layout;
pub mod link;
pub mod msg;
pub mod outline;
pub mod paths;
mod ready;
pub mod session;
pub mod stack;
pub mod time;

pub use accel::FastPathCheck;
pub use conn::{Config, Connection, DynConnection, Received, SendError, Stats};
pub use layer::{Layer, Role};
pub use msg::{Msg, Pool};
pub use stack::{LayerSet, SpecError};
pub use time::Time;
