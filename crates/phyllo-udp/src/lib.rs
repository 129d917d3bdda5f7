//! UDP sockets for phyllo: the operating-system side of the sans-IO protocol, and nothing of
//! the protocol itself (this crate does not depend on it).
//!
//! The protocol crate (`phyllo`) makes no system calls and has no `unsafe`; the calls live
//! here, in small safe functions, with the `unsafe` foreign-function calls together in one
//! private module (`sys`) with `// SAFETY:` comments — where a measured need required them
//! (`sendmmsg`/`recvmmsg` batching, source addresses, segmentation offload).
//!
//! - [`udp`]: [`UdpLink`](udp::UdpLink), a UDP socket batched with `sendmmsg`/`recvmmsg`,
//!   non-blocking, busy-poll or blocking.
//! - [`offload`]: segmentation offload (`UDP_SEGMENT` sends of a [`TxQueue`](offload::TxQueue),
//!   `UDP_GRO` receives).
//! - [`steer`]: steering datagrams within an `SO_REUSEPORT` group by their source (a
//!   classic BPF program), for a server whose worker threads share one port.
//!
//! The runtime that runs phyllo on these sockets is `phyllo-net`.

#![warn(missing_docs)]

pub mod offload;
pub mod steer;
mod sys;
pub mod udp;
