//! An async endpoint for tokio (feature `tokio`): phyllo sessions as [`Connection`]s that
//! tasks `send` to and `recv` from, after quinn's `Endpoint` and `Connection`.
//!
//! [`Endpoint::bind`] takes a [`SessionEndpoint`] (made with its builder: key, allowed peers,
//! stack, settings), binds a UDP socket and spawns a *driver* task on the current tokio
//! runtime. The driver owns the endpoint and the socket: it hands the endpoint the datagrams
//! that arrive, sends what it has to send, runs its timers (protocol [`Time`] is the tokio
//! clock since the bind, so `sleep_until` waits for the endpoint's
//! [`poll_timeout`](SessionEndpoint::poll_timeout)), and routes each peer's deliveries and
//! events to its [`Connection`]. The handles talk to the driver over channels; nothing but the
//! driver touches the endpoint, and it uses only the endpoint's documented calls.
//!
//! - a client [`connect`](Endpoint::connect)s: the future resolves when the session is up
//!   (or fails after [`Config::connect_timeout`], or when the handshake fails);
//! - a server [`accept`](Endpoint::accept)s: each peer that completes a handshake with it
//!   comes out once, as a new [`Connection`];
//! - [`Connection::send`] waits while the endpoint has no room (its `send` says
//!   `WouldBlock`): the driver tries again after the input or timers that may have made some,
//!   and answers when the message is taken;
//! - [`Connection::recv`] returns the peer's messages in order, and then, once the
//!   connection is over, an error that says why and carries every message this end sent that
//!   the sessions did not confirm ([`ConnectionError`]). Messages handed back while the
//!   connection lives on (a session replaced by a restarted peer's, say) wait in
//!   [`Connection::take_returned`] and go into that error if not taken: the endpoint's
//!   promise — each message known delivered or handed back — reaches the program.
//!
//! A connection lasts while the endpoint can reach its peer: while a session is up or, for
//! the side that connected, may be made again (an idle session ends; the next message starts a
//! new handshake). Dropping every handle to a connection ([`Connection`], [`Sender`]) closes
//! it; what it still held is then given up. The driver stops when the [`Endpoint`] and every
//! connection are dropped, or when its runtime shuts down.
//!
//! ```no_run
//! use phyllo::endpoint::SessionEndpoint;
//! use phyllo::session::StaticKey;
//! use phyllo_net::tokio::Endpoint;
//!
//! # async fn run() -> Result<(), Box<dyn std::error::Error>> {
//! let key = StaticKey::generate()?;
//! let server_key = phyllo_net::keys::read_public("server.pub")?;
//! // A client allows no one: it only connects.
//! let endpoint = Endpoint::bind("0.0.0.0:0".parse()?, SessionEndpoint::builder(key).build()?)?;
//! let mut conn = endpoint.connect(server_key, "127.0.0.1:7700".parse()?).await?;
//! conn.send(b"ping").await?;
//! let echo = conn.recv().await?;
//! assert_eq!(echo, b"ping");
//! # Ok(())
//! # }
//! ```
//!
//! The examples `echo_server_tokio` and `echo_client_tokio` are a whole server and client.
//!
//! The driver moves one datagram per system call through tokio's socket;
//! [`SessionSocket`](crate::SessionSocket) is the batched, segmentation-offloading path.

use crate::error::NetError;
use crate::socket::push_once;
use ::tokio::net::UdpSocket;
use ::tokio::sync::{mpsc, oneshot, Notify};
use ::tokio::time::Instant;
use phyllo::endpoint::{EndReason, Event, Input, PeerId, SessionEndpoint, SessionSendError};
use phyllo::session::PublicKey;
use phyllo::{LayerSet, Role, Time};
use std::collections::{HashMap, VecDeque};
use std::io;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex, MutexGuard, OnceLock, PoisonError};
use std::time::Duration;

/// Datagrams taken off the socket in one turn of the driver before it looks at anything else.
const RECV_BURST: usize = 64;

/// Settings of an [`Endpoint`] (the session endpoint's own are in its
/// [`SessionConfig`](phyllo::endpoint::SessionConfig)).
#[derive(Clone, Debug)]
pub struct Config {
    /// How long [`Endpoint::connect`] waits for a session before it gives up (10 s).
    pub connect_timeout: Duration,
    /// Messages a connection holds received and not yet read (1024); beyond that they wait
    /// in the session endpoint until [`Connection::recv`] makes room.
    pub inbox: usize,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            connect_timeout: Duration::from_secs(10),
            inbox: 1024,
        }
    }
}

/// [`Endpoint::connect`] got no connection.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ConnectError {
    /// No session after [`Config::connect_timeout`] (no server there, or it does not allow
    /// this key: a server answers only the keys it allows).
    #[error("no session with {addr} after {after:?}")]
    TimedOut {
        /// The address connected to.
        addr: SocketAddr,
        /// How long it waited.
        after: Duration,
    },
    /// The endpoint gave up on the handshake.
    #[error("no session with {addr}: {reason:?}")]
    Failed {
        /// The address connected to.
        addr: SocketAddr,
        /// Why ([`EndReason::HandshakeFailed`] when every initiation went unanswered).
        reason: EndReason,
    },
    /// This endpoint already has a connection to that key, or is making one.
    #[error("already connected to peer {} (or connecting)", peer.0)]
    AlreadyConnected {
        /// The peer.
        peer: PeerId,
    },
    /// The endpoint's driver has stopped ([`Endpoint::error`] says why, if a socket error
    /// stopped it).
    #[error("the endpoint has stopped")]
    Stopped,
}

/// [`Connection::send`] did not take the message.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum SendError {
    /// The connection is over; [`Connection::recv`] returns the messages it did not confirm.
    #[error("the session ended ({reason:?})")]
    Ended {
        /// Why.
        reason: EndReason,
    },
    /// The message itself was refused (larger than a message may be).
    #[error(transparent)]
    Message(phyllo::SendError),
    /// The endpoint's driver has stopped.
    #[error("the endpoint has stopped")]
    Stopped,
}

/// The end of a [`Connection`], as [`Connection::recv`] reports it once every message
/// received was read.
///
/// `unconfirmed` are the messages this end sent that no session confirmed delivered, in the
/// order sent (some may have arrived all the same: their acknowledgement was lost). The first
/// call that reports the end takes them; later calls report it with none.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ConnectionError {
    /// The endpoint ended the session and cannot make another with the peer.
    #[error("the session ended ({reason:?}); {} message(s) sent were not confirmed", unconfirmed.len())]
    Ended {
        /// Why.
        reason: EndReason,
        /// The messages sent and not confirmed delivered.
        unconfirmed: Vec<Vec<u8>>,
    },
    /// The endpoint's driver stopped (its runtime shut down, or the socket failed).
    #[error("the endpoint has stopped; {} message(s) sent were not confirmed", unconfirmed.len())]
    Stopped {
        /// The messages sent and not confirmed delivered.
        unconfirmed: Vec<Vec<u8>>,
    },
}

/// How a connection ended.
#[derive(Clone, Copy, Debug)]
enum End {
    Session(EndReason),
    Stopped,
}

impl End {
    fn send_error(self) -> SendError {
        match self {
            End::Session(reason) => SendError::Ended { reason },
            End::Stopped => SendError::Stopped,
        }
    }

    fn connection_error(self, unconfirmed: Vec<Vec<u8>>) -> ConnectionError {
        match self {
            End::Session(reason) => ConnectionError::Ended {
                reason,
                unconfirmed,
            },
            End::Stopped => ConnectionError::Stopped { unconfirmed },
        }
    }
}

/// A connection's state that its handles and the driver share.
struct Shared {
    state: Mutex<State>,
    /// A message came, or the end: for the one receiver ([`Connection::recv`]).
    readable: Notify,
    /// The inbox length at which a stalled connection asks for more.
    resume_at: usize,
}

#[derive(Default)]
struct State {
    /// Received, not yet read.
    inbox: VecDeque<Vec<u8>>,
    /// The inbox filled while the endpoint held more: the receiver asks the driver for them.
    stalled: bool,
    /// Handed back by the endpoint, not yet taken.
    returned: Vec<Vec<u8>>,
    end: Option<End>,
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn end(&self) -> Option<End> {
        self.lock().end
    }
}

/// Which connection a command is about: a peer may have a new connection after an old one
/// ended, and the old one's handles must not reach it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct ConnKey {
    peer: PeerId,
    id: u64,
}

type Reply<T> = oneshot::Sender<T>;
/// The answer to a send (or to a wait for quiet).
type SendReply = Reply<Result<(), SendError>>;

/// What the handles ask of the driver.
enum Command {
    Connect {
        key: PublicKey,
        addr: SocketAddr,
        reply: Reply<Result<Connection, ConnectError>>,
    },
    Send {
        conn: ConnKey,
        data: Vec<u8>,
        reply: SendReply,
    },
    /// The receiver made room in a stalled inbox.
    Resume {
        conn: ConnKey,
    },
    Quiet {
        conn: ConnKey,
        reply: SendReply,
    },
    Close {
        conn: ConnKey,
        reply: Option<Reply<()>>,
    },
}

/// What every handle of one connection shares; the last one dropped closes it.
struct Handle {
    key: ConnKey,
    remote: PublicKey,
    cmd: mpsc::UnboundedSender<Command>,
    shared: Arc<Shared>,
}

impl Drop for Handle {
    fn drop(&mut self) {
        if self.shared.end().is_none() {
            let _ = self.cmd.send(Command::Close {
                conn: self.key,
                reply: None,
            });
        }
    }
}

impl Handle {
    async fn send(&self, message: &[u8]) -> Result<(), SendError> {
        self.request(|reply| Command::Send {
            conn: self.key,
            data: message.to_vec(),
            reply,
        })
        .await
    }

    async fn quiet(&self) -> Result<(), SendError> {
        self.request(|reply| Command::Quiet {
            conn: self.key,
            reply,
        })
        .await
    }

    /// Ask the driver (unless the connection is over) and wait for its answer.
    async fn request(&self, command: impl FnOnce(SendReply) -> Command) -> Result<(), SendError> {
        if let Some(end) = self.shared.end() {
            return Err(end.send_error());
        }
        let (reply, answer) = oneshot::channel();
        self.cmd
            .send(command(reply))
            .map_err(|_| SendError::Stopped)?;
        match answer.await {
            Ok(Ok(())) => Ok(()),
            // The driver knows the connection is over; the handle knows why.
            Ok(Err(SendError::Ended { reason })) => Err(self
                .shared
                .end()
                .map_or(SendError::Ended { reason }, End::send_error)),
            Ok(Err(e)) => Err(e),
            Err(_) => Err(SendError::Stopped),
        }
    }
}

/// A UDP socket with a session endpoint, driven by a task on a tokio runtime: connect to
/// servers, accept clients. Cheap to clone (every clone is the same endpoint).
#[derive(Clone)]
pub struct Endpoint {
    inner: Arc<EndpointInner>,
}

struct EndpointInner {
    cmd: mpsc::UnboundedSender<Command>,
    incoming: ::tokio::sync::Mutex<mpsc::UnboundedReceiver<Connection>>,
    local: SocketAddr,
    public: PublicKey,
    error: Arc<OnceLock<NetError>>,
}

impl Endpoint {
    /// Bind `addr` and spawn the driver of `endpoint` on the current tokio runtime, with the
    /// default [`Config`]. The endpoint accepts the peers it was built to allow (none: it only
    /// connects).
    ///
    /// # Panics
    ///
    /// Outside a tokio runtime (with I/O and time enabled), as `tokio::spawn` does.
    pub fn bind<S>(addr: SocketAddr, endpoint: SessionEndpoint<S>) -> Result<Endpoint, NetError>
    where
        S: LayerSet + 'static,
        SessionEndpoint<S>: Send,
    {
        Endpoint::bind_with(addr, endpoint, Config::default())
    }

    /// Like [`bind`](Self::bind), with the settings `config`.
    ///
    /// # Panics
    ///
    /// Outside a tokio runtime (with I/O and time enabled), as `tokio::spawn` does.
    pub fn bind_with<S>(
        addr: SocketAddr,
        endpoint: SessionEndpoint<S>,
        config: Config,
    ) -> Result<Endpoint, NetError>
    where
        S: LayerSet + 'static,
        SessionEndpoint<S>: Send,
    {
        let bind_error = |source| NetError::Bind { addr, source };
        let socket = std::net::UdpSocket::bind(addr).map_err(bind_error)?;
        socket.set_nonblocking(true).map_err(bind_error)?;
        let socket = UdpSocket::from_std(socket).map_err(bind_error)?;
        let local = socket.local_addr().map_err(bind_error)?;
        let (cmd, cmds) = mpsc::unbounded_channel();
        let (incoming_tx, incoming) = mpsc::unbounded_channel();
        let error = Arc::new(OnceLock::new());
        let public = endpoint.public();
        let driver = Driver {
            ep: endpoint,
            socket,
            origin: Instant::now(),
            cfg: config,
            cmds,
            cmd_tx: cmd.downgrade(),
            incoming: incoming_tx,
            error: error.clone(),
            next_id: 0,
            conns: HashMap::new(),
            connecting: HashMap::new(),
            unsettled: Vec::new(),
            readable: Vec::new(),
            blocked: Vec::new(),
            quiet: Vec::new(),
            rx: vec![0; 65_536],
            tx: Vec::new(),
            tx_to: None,
        };
        ::tokio::spawn(driver.run());
        Ok(Endpoint {
            inner: Arc::new(EndpointInner {
                cmd,
                incoming: ::tokio::sync::Mutex::new(incoming),
                local,
                public,
                error,
            }),
        })
    }

    /// The socket's address.
    pub fn local_addr(&self) -> SocketAddr {
        self.inner.local
    }

    /// This endpoint's static public key (for the peers to allow).
    pub fn public_key(&self) -> PublicKey {
        self.inner.public
    }

    /// Connect to the server whose static public key is `key` at `addr`: resolves when the
    /// session is up. Fails after [`Config::connect_timeout`], when the endpoint gives up the
    /// handshake, or when this endpoint already has a connection to `key`.
    ///
    /// Dropping the future abandons the attempt (a session made all the same is closed).
    pub async fn connect(
        &self,
        key: PublicKey,
        addr: SocketAddr,
    ) -> Result<Connection, ConnectError> {
        let (reply, answer) = oneshot::channel();
        self.inner
            .cmd
            .send(Command::Connect { key, addr, reply })
            .map_err(|_| ConnectError::Stopped)?;
        answer.await.unwrap_or(Err(ConnectError::Stopped))
    }

    /// The next peer that completed a handshake with this endpoint and has no connection
    /// here (a client, or one that comes back after its connection ended); `None` once the
    /// driver has stopped. Peers wait in order until accepted.
    pub async fn accept(&self) -> Option<Connection> {
        self.inner.incoming.lock().await.recv().await
    }

    /// The socket error that stopped the driver, if one did.
    pub fn error(&self) -> Option<&NetError> {
        self.inner.error.get()
    }
}

/// A connection to one peer: its messages in order ([`recv`](Self::recv)), and sending to it
/// ([`send`](Self::send), or from other tasks through [`sender`](Self::sender)).
///
/// Dropping the connection and every [`Sender`] of it closes it.
pub struct Connection {
    handle: Arc<Handle>,
}

impl std::fmt::Debug for Connection {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Connection")
            .field("peer", &self.handle.key.peer)
            .field("remote_key", &self.handle.remote)
            .finish()
    }
}

impl Connection {
    /// The peer (the endpoint's id for it, stable across its sessions).
    pub fn peer(&self) -> PeerId {
        self.handle.key.peer
    }

    /// The peer's static public key.
    pub fn remote_key(&self) -> PublicKey {
        self.handle.remote
    }

    /// Send `message` to the peer: resolves once the endpoint has taken it, waiting while it
    /// has no room. Taken is not delivered: a message the sessions do not confirm comes back
    /// ([`take_returned`](Self::take_returned), [`recv`](Self::recv)'s final error).
    ///
    /// A send future dropped before it resolves may or may not have been taken.
    pub async fn send(&self, message: &[u8]) -> Result<(), SendError> {
        self.handle.send(message).await
    }

    /// The peer's next message, in order. Once the connection is over and every message
    /// received was read: the end, with the messages sent that were not confirmed
    /// ([`ConnectionError`]).
    ///
    /// Cancel-safe: a future dropped before it resolves took no message.
    pub async fn recv(&mut self) -> Result<Vec<u8>, ConnectionError> {
        let h = &self.handle;
        loop {
            {
                let mut st = h.shared.lock();
                if let Some(m) = st.inbox.pop_front() {
                    if st.stalled && st.inbox.len() <= h.shared.resume_at {
                        st.stalled = false;
                        drop(st);
                        let _ = h.cmd.send(Command::Resume { conn: h.key });
                    }
                    return Ok(m);
                }
                if let Some(end) = st.end {
                    return Err(end.connection_error(std::mem::take(&mut st.returned)));
                }
            }
            // A notification sent since the check above is kept for this wait.
            h.shared.readable.notified().await;
        }
    }

    /// The messages the endpoint handed back so far (sent, not confirmed by the session that
    /// carried them: it was replaced or ended), in the order sent. Those not taken here come
    /// with [`recv`](Self::recv)'s final error.
    pub fn take_returned(&self) -> Vec<Vec<u8>> {
        std::mem::take(&mut self.handle.shared.lock().returned)
    }

    /// Why the connection is over, once it is (`None` while it lasts, and when the driver
    /// stopped).
    pub fn end_reason(&self) -> Option<EndReason> {
        match self.handle.shared.end() {
            Some(End::Session(reason)) => Some(reason),
            _ => None,
        }
    }

    /// Resolves when everything sent to the peer was acknowledged and nothing is owed to it
    /// (the endpoint's `is_quiet`): a good moment to close.
    pub async fn quiet(&self) -> Result<(), SendError> {
        self.handle.quiet().await
    }

    /// A handle that sends on this connection, for other tasks.
    pub fn sender(&self) -> Sender {
        Sender {
            handle: self.handle.clone(),
        }
    }

    /// End the session now (for every [`Sender`] too); returns the messages sent that it had
    /// not confirmed, with any handed back before and not taken. Messages received and not
    /// read are dropped.
    pub async fn close(self) -> Vec<Vec<u8>> {
        let h = &self.handle;
        if h.shared.end().is_none() {
            let (reply, answer) = oneshot::channel();
            let close = Command::Close {
                conn: h.key,
                reply: Some(reply),
            };
            if h.cmd.send(close).is_ok() {
                let _ = answer.await;
            }
        }
        self.take_returned()
    }
}

/// Sends on a [`Connection`] from another task; cheap to clone. The connection stays open
/// while a sender lives, even if the [`Connection`] is dropped (its messages then go unread).
#[derive(Clone)]
pub struct Sender {
    handle: Arc<Handle>,
}

impl Sender {
    /// The peer.
    pub fn peer(&self) -> PeerId {
        self.handle.key.peer
    }

    /// As [`Connection::send`].
    pub async fn send(&self, message: &[u8]) -> Result<(), SendError> {
        self.handle.send(message).await
    }
}

/// A connection as the driver keeps it.
struct Conn {
    id: u64,
    key: PublicKey,
    shared: Arc<Shared>,
    /// Sends the endpoint had no room for, in order; tried again after every turn.
    parked: VecDeque<(Vec<u8>, SendReply)>,
    /// Why the last of the peer's sessions ended.
    last_reason: Option<EndReason>,
}

/// A [`Endpoint::connect`] waiting for its session.
struct Connecting {
    key: PublicKey,
    addr: SocketAddr,
    deadline: Instant,
    reply: Reply<Result<Connection, ConnectError>>,
}

/// The task that owns the session endpoint and the socket.
struct Driver<S: LayerSet> {
    ep: SessionEndpoint<S>,
    socket: UdpSocket,
    /// Protocol time zero.
    origin: Instant,
    cfg: Config,
    cmds: mpsc::UnboundedReceiver<Command>,
    /// To give new connections a way to the driver; weak, so the driver stops once no handle
    /// is left.
    cmd_tx: mpsc::WeakUnboundedSender<Command>,
    incoming: mpsc::UnboundedSender<Connection>,
    error: Arc<OnceLock<NetError>>,
    next_id: u64,
    conns: HashMap<PeerId, Conn>,
    connecting: HashMap<PeerId, Connecting>,
    /// Connections whose session ended while the peer stays reachable: looked at again until
    /// a session is up or the peer cannot be reached (a handshake that fails with nothing
    /// waiting ends without an event).
    unsettled: Vec<PeerId>,
    /// Peers whose sessions took data this turn.
    readable: Vec<PeerId>,
    /// Peers with parked sends.
    blocked: Vec<PeerId>,
    quiet: Vec<(ConnKey, SendReply)>,
    rx: Vec<u8>,
    /// The datagram the socket would not take yet (`tx_to` is where it goes).
    tx: Vec<u8>,
    tx_to: Option<SocketAddr>,
}

/// Receive errors that say something about one datagram or one peer, not the socket.
fn transient(e: &io::Error) -> bool {
    matches!(
        e.kind(),
        io::ErrorKind::Interrupted
            | io::ErrorKind::ConnectionRefused
            | io::ErrorKind::ConnectionReset
    )
}

impl<S: LayerSet> Driver<S> {
    async fn run(mut self) {
        let mut sleep = std::pin::pin!(::tokio::time::sleep_until(self.origin));
        loop {
            self.flush();
            let wake = self.next_wake();
            if let Some(at) = wake {
                if sleep.deadline() != at {
                    sleep.as_mut().reset(at);
                }
            }
            ::tokio::select! {
                cmd = self.cmds.recv() => match cmd {
                    Some(c) => {
                        self.command(c);
                        // Take what else is queued, within reason.
                        for _ in 0..RECV_BURST {
                            match self.cmds.try_recv() {
                                Ok(c) => self.command(c),
                                Err(_) => break,
                            }
                        }
                    }
                    None => break,
                },
                ready = self.socket.readable() => {
                    if let Err(e) = ready.and_then(|()| self.receive()) {
                        let _ = self.error.set(NetError::Receive(e));
                        break;
                    }
                }
                _ = self.socket.writable(), if self.tx_to.is_some() => {}
                () = &mut sleep, if wake.is_some() => {}
            }
            self.timers();
            self.settle();
        }
    }

    /// Protocol time now.
    fn now(&self) -> Time {
        Time(self.origin.elapsed().as_nanos() as u64)
    }

    /// When the driver has work without input: the endpoint's next timer, or a connect's
    /// deadline.
    fn next_wake(&self) -> Option<Instant> {
        let timer = self
            .ep
            .poll_timeout()
            .map(|t| self.origin + Duration::from_nanos(t.as_nanos()));
        let connect = self.connecting.values().map(|c| c.deadline).min();
        match (timer, connect) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    /// Send what the endpoint has to send, until the socket would block.
    fn flush(&mut self) {
        loop {
            let to = match self.tx_to {
                Some(to) => to,
                None => match self.ep.poll_transmit(&mut self.tx) {
                    Some(to) => to,
                    None => return,
                },
            };
            match self.socket.try_send_to(&self.tx, to) {
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                    self.tx_to = Some(to);
                    return;
                }
                // Sent, or refused by the network (no route, unreachable peer): a loss the
                // protocol recovers from.
                _ => self.tx_to = None,
            }
        }
    }

    /// Hand the datagrams waiting in the socket (a burst of them) to the endpoint.
    fn receive(&mut self) -> io::Result<()> {
        let now = self.now();
        for _ in 0..RECV_BURST {
            match self.socket.try_recv_from(&mut self.rx) {
                Ok((n, from)) => {
                    if let Input::Data(p) = self.ep.handle_datagram(now, from, &self.rx[..n]) {
                        push_once(&mut self.readable, p);
                    }
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                Err(e) if transient(&e) => continue,
                Err(e) => return Err(e),
            }
        }
        Ok(())
    }

    /// Run the endpoint's due timers; fail the connects past their deadline.
    fn timers(&mut self) {
        let now = self.now();
        if self.ep.poll_timeout().is_some_and(|t| t <= now) {
            self.ep.handle_timeout(now);
        }
        let instant = Instant::now();
        let late: Vec<PeerId> = self
            .connecting
            .iter()
            .filter(|(_, c)| c.deadline <= instant)
            .map(|(p, _)| *p)
            .collect();
        for p in late {
            if let Some(c) = self.connecting.remove(&p) {
                // Stop the handshake: nothing waits for it any more.
                self.ep.close(now, p);
                let _ = c.reply.send(Err(ConnectError::TimedOut {
                    addr: c.addr,
                    after: self.cfg.connect_timeout,
                }));
            }
        }
    }

    /// After anything happened: events, deliveries, parked sends, peers to look at again.
    fn settle(&mut self) {
        self.events();
        for p in std::mem::take(&mut self.readable) {
            self.deliver(p);
        }
        for p in std::mem::take(&mut self.blocked) {
            self.unpark(p);
        }
        // A handshake that fails with nothing waiting ends without an event; a connect
        // given up needs its handshake no more.
        let over: Vec<PeerId> = self
            .connecting
            .iter()
            .filter(|(p, c)| !self.reachable(**p) || c.reply.is_closed())
            .map(|(p, _)| *p)
            .collect();
        for p in over {
            if let Some(c) = self.connecting.remove(&p) {
                if c.reply.is_closed() {
                    self.ep.close(self.now(), p);
                } else {
                    let _ = c.reply.send(Err(ConnectError::Failed {
                        addr: c.addr,
                        reason: EndReason::HandshakeFailed,
                    }));
                }
            }
        }
        for p in std::mem::take(&mut self.unsettled) {
            let Some(last) = self.conns.get(&p).map(|c| c.last_reason) else {
                continue;
            };
            if self.ep.is_established(p) {
                continue;
            }
            if self.reachable(p) {
                self.unsettled.push(p);
            } else {
                let reason = last.unwrap_or(EndReason::HandshakeFailed);
                self.end_connection(p, End::Session(reason));
            }
        }
        // (The waits of connections that ended were answered when they ended.)
        for (key, reply) in std::mem::take(&mut self.quiet) {
            if reply.is_closed() || self.conn(key).is_none() {
                continue;
            }
            if self.ep.is_quiet(key.peer) {
                let _ = reply.send(Ok(()));
            } else {
                self.quiet.push((key, reply));
            }
        }
    }

    /// Whether the endpoint can still carry messages to `p`: a session is up, or this end
    /// connected and may handshake again.
    fn reachable(&self, p: PeerId) -> bool {
        self.ep.is_established(p) || self.ep.can_send(p, 0)
    }

    fn events(&mut self) {
        while let Some(event) = self.ep.poll_event() {
            match event {
                Event::Established { peer, key, role } => self.established(peer, key, role),
                Event::Ended {
                    peer,
                    reason,
                    unconfirmed,
                } => self.ended(peer, reason, unconfirmed),
            }
        }
    }

    fn established(&mut self, peer: PeerId, key: PublicKey, role: Role) {
        if let Some(c) = self.connecting.remove(&peer) {
            match self.new_connection(peer, key) {
                // A connect given up meanwhile drops the connection, which closes it.
                Some(conn) => drop(c.reply.send(Ok(conn))),
                None => self.ep.close(self.now(), peer),
            }
        } else if self.conns.contains_key(&peer) {
            // A rekey, or the peer restarted: the same connection goes on.
        } else if role == Role::Responder {
            match self.new_connection(peer, key) {
                // With no one to accept it, the connection is dropped, which closes it.
                Some(conn) => drop(self.incoming.send(conn)),
                None => self.ep.close(self.now(), peer),
            }
        } else {
            // A session this end made and nobody waits for.
            self.ep.close(self.now(), peer);
        }
    }

    fn ended(&mut self, peer: PeerId, reason: EndReason, unconfirmed: Vec<Vec<u8>>) {
        let reachable = self.reachable(peer);
        if let Some(c) = self.conns.get_mut(&peer) {
            c.last_reason = Some(reason);
            c.shared.lock().returned.extend(unconfirmed);
            if !reachable {
                self.end_connection(peer, End::Session(reason));
            } else if !self.ep.is_established(peer) {
                push_once(&mut self.unsettled, peer);
            }
        } else if !reachable {
            // A connect sends nothing before its session is up: `unconfirmed` is empty.
            if let Some(c) = self.connecting.remove(&peer) {
                let _ = c.reply.send(Err(ConnectError::Failed {
                    addr: c.addr,
                    reason,
                }));
            }
        }
        // Otherwise nobody holds a connection to the peer: its handles were dropped, and what
        // it held was given up with them.
    }

    fn new_connection(&mut self, peer: PeerId, key: PublicKey) -> Option<Connection> {
        let cmd = self.cmd_tx.upgrade()?;
        self.next_id += 1;
        let id = self.next_id;
        let shared = Arc::new(Shared {
            state: Mutex::new(State::default()),
            readable: Notify::new(),
            resume_at: self.cfg.inbox / 2,
        });
        self.conns.insert(
            peer,
            Conn {
                id,
                key,
                shared: shared.clone(),
                parked: VecDeque::new(),
                last_reason: None,
            },
        );
        // Anything that came before the connection was made is its.
        self.deliver(peer);
        Some(Connection {
            handle: Arc::new(Handle {
                key: ConnKey { peer, id },
                remote: key,
                cmd,
                shared,
            }),
        })
    }

    /// The live connection `key` names.
    fn conn(&mut self, key: ConnKey) -> Option<&mut Conn> {
        self.conns.get_mut(&key.peer).filter(|c| c.id == key.id)
    }

    /// Move the peer's deliveries into its connection's inbox, while it has room.
    fn deliver(&mut self, p: PeerId) {
        let Some(c) = self.conns.get(&p) else {
            return;
        };
        let mut st = c.shared.lock();
        let mut got = false;
        while st.inbox.len() < self.cfg.inbox.max(1) {
            match self.ep.poll_delivery_with(p, <[u8]>::to_vec) {
                Some(m) => {
                    st.inbox.push_back(m);
                    got = true;
                }
                None => break,
            }
        }
        if self.ep.delivered_ready(p) > 0 {
            st.stalled = true;
        }
        drop(st);
        if got {
            c.shared.readable.notify_one();
        }
    }

    /// The connection is over: the rest of its deliveries into its inbox, the end recorded,
    /// everything waiting on it answered.
    fn end_connection(&mut self, p: PeerId, end: End) {
        let Some(mut c) = self.conns.remove(&p) else {
            return;
        };
        {
            let mut st = c.shared.lock();
            while let Some(m) = self.ep.poll_delivery_with(p, <[u8]>::to_vec) {
                st.inbox.push_back(m);
            }
            st.stalled = false;
            st.end = Some(end);
        }
        c.shared.readable.notify_one();
        for (_, reply) in c.parked.drain(..) {
            let _ = reply.send(Err(end.send_error()));
        }
        let key = ConnKey { peer: p, id: c.id };
        let (mine, rest) = std::mem::take(&mut self.quiet)
            .into_iter()
            .partition(|(k, _)| *k == key);
        self.quiet = rest;
        for (_, reply) in mine {
            let _ = reply.send(Err(end.send_error()));
        }
    }

    fn command(&mut self, cmd: Command) {
        match cmd {
            Command::Connect { key, addr, reply } => self.connect(key, addr, reply),
            Command::Send { conn, data, reply } => self.send(conn, data, reply),
            Command::Resume { conn } => {
                if self.conn(conn).is_some() {
                    self.deliver(conn.peer);
                }
            }
            Command::Quiet { conn, reply } => match self.conn(conn) {
                Some(_) => self.quiet.push((conn, reply)),
                None => {
                    let _ = reply.send(Err(SendError::Ended {
                        reason: EndReason::Closed,
                    }));
                }
            },
            Command::Close { conn, reply } => {
                if self.conn(conn).is_some() {
                    let now = self.now();
                    self.ep.close(now, conn.peer);
                    self.events();
                    // A peer between sessions had nothing to end, and no event says so.
                    if self.conn(conn).is_some() {
                        self.end_connection(conn.peer, End::Session(EndReason::Closed));
                    }
                }
                if let Some(reply) = reply {
                    let _ = reply.send(());
                }
            }
        }
    }

    fn connect(
        &mut self,
        key: PublicKey,
        addr: SocketAddr,
        reply: Reply<Result<Connection, ConnectError>>,
    ) {
        if reply.is_closed() {
            return;
        }
        // Looked up before the endpoint is asked: connecting to a peer makes this end its
        // dialer.
        let existing = self
            .conns
            .iter()
            .find(|(_, c)| c.key == key)
            .map(|(p, _)| *p)
            .or_else(|| {
                self.connecting
                    .iter()
                    .find(|(_, c)| c.key == key)
                    .map(|(p, _)| *p)
            });
        if let Some(peer) = existing {
            let _ = reply.send(Err(ConnectError::AlreadyConnected { peer }));
            return;
        }
        let p = self.ep.connect(self.now(), key, addr);
        if self.ep.is_established(p) {
            match self.new_connection(p, key) {
                Some(conn) => drop(reply.send(Ok(conn))),
                None => drop(reply.send(Err(ConnectError::Stopped))),
            }
            return;
        }
        self.connecting.insert(
            p,
            Connecting {
                key,
                addr,
                deadline: Instant::now() + self.cfg.connect_timeout,
                reply,
            },
        );
    }

    fn send(&mut self, key: ConnKey, data: Vec<u8>, reply: SendReply) {
        let now = self.now();
        let Some(c) = self.conns.get_mut(&key.peer).filter(|c| c.id == key.id) else {
            // The handle knows the real reason.
            let _ = reply.send(Err(SendError::Ended {
                reason: EndReason::Closed,
            }));
            return;
        };
        if reply.is_closed() {
            return;
        }
        if !c.parked.is_empty() {
            c.parked.push_back((data, reply));
            return;
        }
        match self.ep.send(now, key.peer, &data) {
            Ok(()) => drop(reply.send(Ok(()))),
            Err(SessionSendError::WouldBlock) => {
                c.parked.push_back((data, reply));
                push_once(&mut self.blocked, key.peer);
            }
            Err(e) => drop(reply.send(Err(send_error(e, c.last_reason)))),
        }
    }

    /// Try the peer's parked sends again, in order.
    fn unpark(&mut self, p: PeerId) {
        let now = self.now();
        let Some(c) = self.conns.get_mut(&p) else {
            return;
        };
        while let Some((data, reply)) = c.parked.front() {
            // A send given up is not sent.
            if reply.is_closed() {
                c.parked.pop_front();
                continue;
            }
            if !self.ep.can_send(p, data.len()) {
                break;
            }
            let r = self.ep.send(now, p, data);
            if r == Err(SessionSendError::WouldBlock) {
                break;
            }
            if let Some((_, reply)) = c.parked.pop_front() {
                let _ = reply.send(r.map_err(|e| send_error(e, c.last_reason)));
            }
        }
        if !c.parked.is_empty() {
            push_once(&mut self.blocked, p);
        }
    }
}

/// The endpoint's refusal of a message, for the application.
fn send_error(e: SessionSendError, last: Option<EndReason>) -> SendError {
    match e {
        SessionSendError::Send(e) => SendError::Message(e),
        // No session and none to be made (the events that say why were handled before):
        // the connection is over, or about to be.
        _ => SendError::Ended {
            reason: last.unwrap_or(EndReason::Closed),
        },
    }
}

impl<S: LayerSet> Drop for Driver<S> {
    /// The driver stops (no handle left, its runtime shutting down, a socket error): every
    /// session is closed, so what it had not confirmed goes to its connection.
    fn drop(&mut self) {
        let now = self.now();
        let peers: Vec<PeerId> = self.conns.keys().copied().collect();
        for p in &peers {
            self.ep.close(now, *p);
        }
        while let Some(event) = self.ep.poll_event() {
            if let Event::Ended {
                peer, unconfirmed, ..
            } = event
            {
                if let Some(c) = self.conns.get(&peer) {
                    c.shared.lock().returned.extend(unconfirmed);
                }
            }
        }
        for p in peers {
            self.end_connection(p, End::Stopped);
        }
    }
}
