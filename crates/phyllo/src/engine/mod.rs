//! The receive engine that never livelocks (seed 002: Mogul & Ramakrishnan, "Eliminating
//! Receive Livelock in an Interrupt-Driven Kernel").
//!
//! Sans-IO, like the rest of this crate: [`poll`] is the discipline — interrupts only to start
//! polling, round-robin with a quota, queue-state feedback, a CPU-share limit, inhibited input
//! left in the socket buffer for the kernel to drop — as a state machine that says which source
//! to serve next. The epoll engine in `phyllo-udp` drives it with real sockets; [`model`]
//! drives the same poller in a deterministic discrete-event model of a forwarding host, beside
//! the 4.2BSD interrupt-driven baseline, for loads no generator reaches and for `cargo test`.

pub mod model;
pub mod poll;

pub use poll::{
    ConfigError, CycleLimit, Direction, Inhibit, Next, PollConfig, PollStats, Poller, QueueId,
    SourceId, Watermarks,
};
