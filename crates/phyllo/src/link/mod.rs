//! Links: what carries datagrams between two connections.
//!
//! - [`memlink`]: in-process, with loss, duplication, reordering, corruption and delay drawn
//!   from a seed, on a virtual clock, so every failure replays.

pub mod memlink;
