//! phyllo over real UDP sockets: the operating-system side of the sans-IO library.
//!
//! The protocol crate (`phyllo`) makes no system calls and has no `unsafe`; everything that
//! does lives here, in small safe functions with `// SAFETY:` comments where a measured need
//! required `unsafe` (`sendmmsg`/`recvmmsg` batching, source addresses, segmentation offload).
//!
//! - [`udp`]: [`UdpLink`](udp::UdpLink), a UDP socket batched with `sendmmsg`/`recvmmsg`,
//!   non-blocking, busy-poll or blocking.
//! - [`offload`]: segmentation offload (`UDP_SEGMENT` sends of a [`TxQueue`](offload::TxQueue),
//!   `UDP_GRO` receives).
//! - [`engine`]: the receive engine (seed 002): `epoll` one-shot notifications driving the
//!   library's `Poller` — quota, round-robin, feedback, a CPU share, early drop in the socket.
//! - [`forward`]: seed 002's router between sockets, on the engine or as 4.2BSD's threads
//!   with real-time priorities, with `screend` or a monitor behind it, and the paced
//!   generator that loads it.
//! - [`netns`]: test hosts in network namespaces joined by veth pairs.
//! - [`driver`]: [`UdpDriver`](driver::UdpDriver), one connection over a `UdpLink`.
//! - [`rawudp`]: raw-UDP baselines (ping-pong, stream) that phyllo's timings are divided by.

#![warn(missing_docs)]

pub mod driver;
pub mod engine;
pub mod forward;
pub mod netns;
pub mod offload;
pub mod rawudp;
pub mod udp;
