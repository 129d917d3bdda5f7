//! What can go wrong on the way between a program and the sockets.

use phyllo::endpoint::EndpointBuildError;
use phyllo::session::{HandshakeError, KeyParseError};
use std::io;
use std::net::SocketAddr;
use std::path::PathBuf;

/// An error of the runtime or its key files.
///
/// The message says what was being done; the cause, where there is one, is the error's
/// [`source`](std::error::Error::source) (print the whole chain, e.g. with anyhow's `{:#}`).
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum NetError {
    /// The address could not be bound (in use, not local, not permitted).
    #[error("cannot listen on {addr}")]
    Bind {
        /// The address asked for.
        addr: SocketAddr,
        /// Why the operating system refused.
        #[source]
        source: io::Error,
    },
    /// The socket could not be connected to its one peer
    /// ([`SessionSocket::connect_to`](crate::SessionSocket::connect_to)).
    #[error("cannot connect the socket to {addr}")]
    Connect {
        /// The peer's address.
        addr: SocketAddr,
        /// Why the operating system refused, or why this socket cannot be connected.
        #[source]
        source: io::Error,
    },
    /// The shared (`SO_REUSEPORT`) listening socket of
    /// [`SessionSocket::bind_dedicating`](crate::SessionSocket::bind_dedicating) could not be
    /// bound.
    #[error("cannot listen on {addr} (shared)")]
    BindShared {
        /// The address claimed first with an ordinary bind.
        addr: SocketAddr,
        /// Why the operating system refused.
        #[source]
        source: io::Error,
    },
    /// The steering program of
    /// [`SessionSocket::bind_dedicating_workers`](crate::SessionSocket::bind_dedicating_workers)
    /// could not be attached to the port's `SO_REUSEPORT` group.
    #[error("cannot steer {addr}'s datagrams to workers by source")]
    Steer {
        /// The address the workers share.
        addr: SocketAddr,
        /// Why the operating system refused.
        #[source]
        source: io::Error,
    },
    /// A number of workers out of range (1 to
    /// [`SessionSocket::MAX_WORKERS`](crate::SessionSocket::MAX_WORKERS)).
    #[error("{workers} workers: between 1 and {max}")]
    Workers {
        /// The number asked for.
        workers: usize,
        /// The most there may be.
        max: usize,
    },
    /// [`SessionSocket::rebind`](crate::SessionSocket::rebind) on a socket whose port is its
    /// peers' address (one made with `bind_dedicating`).
    #[error("a dedicating socket cannot move to another port")]
    Rebind,
    /// The session endpoint's description is wrong: a stack that does not parse, or one
    /// without a keyed layer (`seal`).
    #[error("the session endpoint")]
    Endpoint(#[source] EndpointBuildError),
    /// Receiving from the socket failed.
    #[error("receiving")]
    Receive(#[source] io::Error),
    /// The receive engine could not start or register a socket.
    #[error("the receive engine")]
    Engine(#[source] io::Error),
    /// The application's callback failed (the engine stopped serving).
    #[error("the application")]
    App(#[source] Box<dyn std::error::Error + Send + Sync>),
    /// The operating system had no randomness for the endpoint's seed.
    #[error("no randomness")]
    Randomness(#[source] getrandom::Error),
    /// A key file could not be read.
    #[error("reading {}", path.display())]
    Read {
        /// The file.
        path: PathBuf,
        /// Why.
        #[source]
        source: io::Error,
    },
    /// A key file could not be written.
    #[error("writing {}", path.display())]
    Write {
        /// The file.
        path: PathBuf,
        /// Why.
        #[source]
        source: io::Error,
    },
    /// Neither a public key file nor a public key in hexadecimal.
    #[error("{arg}: not a public key file or 64 hexadecimal digits")]
    PublicKey {
        /// The path or text given.
        arg: String,
        /// What is wrong with the text.
        #[source]
        source: KeyParseError,
    },
    /// A private key file others may read (on Unix: any group or other permission bit), as
    /// ssh refuses one: whoever can read it can be this end.
    #[error(
        "{}: the private key is readable by others (mode {mode:o}); `chmod 600` it",
        path.display()
    )]
    KeyPermissions {
        /// The file.
        path: PathBuf,
        /// Its permission bits.
        mode: u32,
    },
    /// A private key file whose text is not a key.
    #[error("{}: not a key", path.display())]
    PrivateKeyText {
        /// The file.
        path: PathBuf,
        /// What is wrong with the text.
        #[source]
        source: KeyParseError,
    },
    /// A private key file whose 32 bytes are not a usable private key.
    #[error("{}: not a key", path.display())]
    PrivateKey {
        /// The file.
        path: PathBuf,
        /// Why the key was refused.
        #[source]
        source: HandshakeError,
    },
    /// A new key pair could not be made (no randomness).
    #[error("generating a key pair")]
    KeyGeneration(#[source] HandshakeError),
    /// A line of an allow file that is not a public key.
    #[error("{}:{line}: not a public key", path.display())]
    AllowFile {
        /// The file.
        path: PathBuf,
        /// The line, counting from 1.
        line: usize,
        /// What is wrong with it.
        #[source]
        source: KeyParseError,
    },
}
