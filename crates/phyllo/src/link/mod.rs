//! Links: what carries datagrams between two connections.
//!
//! - [`memlink`]: in-process, with loss, duplication, reordering, corruption and delay drawn
//!   from a seed, on a virtual clock, so every failure replays.
//! - [`udp`]: real sockets, batched with `sendmmsg`/`recvmmsg`, non-blocking, busy-poll or
//!   blocking.
//! - [`rawudp`]: raw-UDP baselines (ping-pong, stream) that phyllo's timings are divided by.

pub mod memlink;
pub mod rawudp;
pub mod udp;
