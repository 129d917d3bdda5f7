//! Links: the drivers that move datagrams between endpoints.
//!
//! DESIGN.md §1. The protocol core is sans-IO; a link is where bytes meet a real (or simulated)
//! network. [`udp`] is the real one: UDP sockets batched with `sendmmsg`/`recvmmsg`, with
//! non-blocking, busy-poll and blocking receive modes. [`rawudp`] holds the raw-UDP baselines
//! (ping-pong and one-way stream) that experiments compare phyllo against in the same run.

pub mod rawudp;
pub mod udp;
