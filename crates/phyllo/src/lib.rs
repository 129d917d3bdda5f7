//! phyllo: layered network protocols whose layering costs almost nothing.
//!
//! A protocol here is a stack of small layers — `frag`, `window` (reliable, in order), `checksum`,
//! `seal` (authenticated encryption) or layers of your own ([`Layer`]) — with the Protocol
//! Accelerator in front when you want it: compact headers, predicted headers and a fast path that
//! is the same protocol as the layered one (van Renesse, "Masking the Overhead of Protocol
//! Layering" (seed 004); the papers behind phyllo are listed in `docs/papers.md`). The crate is
//! sans-IO: nothing in it touches a socket or a clock. Application calls, datagrams and the time go
//! in; datagrams, deliveries and deadlines come out, so every run replays. The sockets are
//! `phyllo-udp`'s; `docs/architecture.md` is the map.
//!
//! # Where to start
//!
//! - One connection between two ends: [`Connection`] over a stack built from a spec string
//!   ([`Connection::from_spec`]) or monomorphized ([`stack!`]). Its contract — what an event loop
//!   calls, and when — is at the top of [`conn`].
//! - Many peers on one socket, with handshakes, fresh keys per session, restarts, rekeys and
//!   a written reliability contract: [`endpoint::SessionEndpoint`], made with
//!   [`SessionEndpoint::builder`](endpoint::SessionEndpoint::builder).
//! - A stack with `seal` needs keys, and they come only from a session's handshake
//!   ([`Config::with_session`]), or, for two ends in one process, from [`Config::pair`].
//!
//! # Getting started
//!
//! Two ends of a sealed, reliable, accelerated stack in one process, the datagrams handed
//! across by hand — what a driver does with a socket:
//!
//! ```
//! use phyllo::{Config, Connection, Time};
//!
//! let spec = "frag(1400):window(16):checksum:seal";
//! let (a, b) = Config::pair(true)?; // keys from a Noise handshake run in memory
//! let mut alice = Connection::from_spec(spec, a)?;
//! let mut bob = Connection::from_spec(spec, b)?;
//!
//! let now = Time::ZERO;
//! alice.send(now, b"hello")?;
//! // The driver's loop: move datagrams both ways until neither end has any.
//! loop {
//!     let mut moved = false;
//!     while let Some(d) = alice.poll_transmit() {
//!         assert!(bob.handle_datagram(now, d.data()).is_accepted());
//!         alice.recycle(d);
//!         moved = true;
//!     }
//!     while let Some(d) = bob.poll_transmit() {
//!         alice.handle_datagram(now, d.data());
//!         bob.recycle(d);
//!         moved = true;
//!     }
//!     if !moved {
//!         break;
//!     }
//! }
//! let got = bob.poll_delivery().expect("delivered");
//! assert_eq!(got.data(), b"hello");
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! Sessions between two endpoints, the same way (a real program runs each endpoint on a UDP
//! socket and calls `handle_timeout` when `poll_timeout` says):
//!
//! ```
//! use phyllo::endpoint::{Event, SessionEndpoint};
//! use phyllo::session::StaticKey;
//! use phyllo::Time;
//! use std::net::SocketAddr;
//!
//! let (server_key, client_key) = (StaticKey::generate()?, StaticKey::generate()?);
//! let server_public = server_key.public();
//! let mut server = SessionEndpoint::builder(server_key)
//!     .allow(client_key.public())
//!     .build()?;
//! let mut client = SessionEndpoint::builder(client_key).build()?;
//! let (at_server, at_client): (SocketAddr, SocketAddr) =
//!     ("10.0.0.1:7700".parse()?, "10.0.0.2:7700".parse()?);
//!
//! let now = Time::ZERO;
//! let peer = client.connect(now, server_public, at_server);
//! client.send(now, peer, b"hello")?; // waits for the handshake, then goes
//! let mut buf = Vec::new();
//! for _ in 0..4 {
//!     while client.poll_transmit(&mut buf).is_some() {
//!         server.handle_datagram(now, at_client, &buf);
//!     }
//!     while server.poll_transmit(&mut buf).is_some() {
//!         client.handle_datagram(now, at_server, &buf);
//!     }
//! }
//! assert!(matches!(server.poll_event(), Some(Event::Established { .. })));
//! let from = server.peers().next().expect("the client");
//! let got = server.poll_delivery_with(from, |m| m.to_vec());
//! assert_eq!(got.as_deref(), Some(&b"hello"[..]));
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

#![warn(missing_docs)]
// `unsafe` is allowed in one module only, `layers::clmul`: the call into GHASH's carry-less
// multiply, made once the CPU was found to have the instruction.
#![deny(unsafe_code)]

pub mod accel;
pub mod congestion;
pub mod conn;
pub mod demux;
pub mod endpoint;
pub mod faults;
pub mod field;
pub mod filter;
pub mod fixed;
pub mod inet;
pub mod layer;
mod layered;
pub mod layers;
pub mod layout;
pub mod msg;
pub mod outline;
pub mod plpmtu;
pub mod poller;
mod ready;
pub mod session;
pub mod stack;
#[cfg(any(test, feature = "testing"))]
pub mod testing;
pub mod time;

// What a user needs, in one flat list; the modules above hold the rest (layer authors'
// `layer`, `field` and `layout`; the accelerator's parts; the filter machine).
pub use accel::FastPathCheck;
pub use conn::{
    BuildError, Config, Connection, DeliveryMark, DynConnection, Received, Refusal, SendError,
    Stats,
};
pub use endpoint::{
    Discard, EndReason, EndpointBuildError, Event, Input, PeerId, PeerStats, SendMsgError,
    SessionConfig, SessionEndpoint, SessionEndpointBuilder, SessionEndpointStats, SessionSendError,
    DEFAULT_STACK,
};
pub use layer::{Layer, Role};
pub use msg::{Msg, Pool};
pub use poller::{PollConfig, Poller};
pub use session::{KeyParseError, PublicKey, SessionKeys, StaticKey};
pub use stack::{LayerSet, SpecError};
pub use time::Time;
