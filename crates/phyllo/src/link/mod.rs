//! Links: what carries datagrams between two connections.
//!
//! - [`memlink`]: in-process, with loss, duplication, reordering, corruption and delay drawn
//!   from a seed, on a virtual clock, so every failure replays.
//!
//! Real sockets live in the `phyllo-udp` crate (this one makes no system calls).

pub mod memlink;
