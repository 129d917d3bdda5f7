//! The runtime: phyllo sessions on real UDP sockets.
//!
//! phyllo comes in three layers, like quinn's `quinn-proto` / `quinn` / `quinn-udp`:
//!
//! - `phyllo`, the sans-IO protocol: a
//!   [`SessionEndpoint`](phyllo::endpoint::SessionEndpoint) takes datagrams, timer
//!   expiries and messages, and hands back datagrams, deliveries and events; it makes no
//!   system calls and keeps no clock.
//! - `phyllo-net` (this crate), the runtime: a [`SessionSocket`] holds an endpoint on a UDP
//!   socket, moves datagrams between the two, maps the monotonic clock onto protocol time and
//!   runs the endpoint's timers — what a program embeds to run sessions; and [`keys`], the
//!   key files the endpoint's static keys live in. With the feature `tokio`,
//!   `phyllo_net::tokio` runs an endpoint as a task on a tokio runtime, with connections that
//!   tasks `send` to and `recv` from (quinn's `Endpoint` and `Connection`, for sessions).
//! - `phyllo-udp`, the sockets: batched `sendmmsg`/`recvmmsg`, segmentation offload, the
//!   receive engine.
//!
//! A client binds, connects and sends; a server binds with the keys it allows and answers
//! what the endpoint delivers:
//!
//! ```no_run
//! use phyllo::session::StaticKey;
//! use phyllo_net::{SessionSocket, DEFAULT_STACK};
//! use std::time::Duration;
//!
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let key = StaticKey::generate()?;
//! let server_key = phyllo_net::keys::read_public("server.pub")?;
//! let mut socket = SessionSocket::bind("0.0.0.0:0".parse()?, key, vec![], DEFAULT_STACK, false)?;
//! let now = socket.now();
//! let peer = socket.endpoint_mut().connect(now, server_key, "127.0.0.1:7700".parse()?);
//! while !socket.endpoint().is_established(peer) {
//!     socket.pump(Duration::from_millis(20))?;
//! }
//! let now = socket.now();
//! socket.endpoint_mut().send(now, peer, b"hello")?;
//! socket.flush()?;
//! # Ok(())
//! # }
//! ```
//!
//! The examples `echo_server` and `echo_client` are a whole server and client;
//! `echo_server_tokio` and `echo_client_tokio` are the same on tokio.

#![warn(missing_docs)]

pub mod driver;
mod error;
pub mod keys;
pub mod receive;
mod serve;
mod socket;
#[cfg(feature = "tokio")]
pub mod tokio;
mod waiting;

pub use error::NetError;
pub use phyllo::endpoint::DEFAULT_STACK;
pub use serve::EngineConfig;
pub use socket::SessionSocket;
