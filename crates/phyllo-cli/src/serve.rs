//! `phyllo serve`: many sessions on one UDP port — echo for pings, sink for data, and with
//! `--out DIR` each stream written to a file; per-session statistics when it stops (Ctrl-C).
//!
//! With `--workers N` the sessions are spread over N threads, each a whole server of its own
//! (its socket, endpoint, receive engine and peers) on the shared port: the kernel steers
//! each datagram to a worker by its source address
//! ([`SessionSocket::bind_dedicating_workers`]), so a client stays on one worker while its
//! address does, whatever its port. The workers share only the port, the output directory
//! (with the set of partial files being received, so two never write one:
//! [`crate::incoming::Store`]), the stop flag and the count of ended transfers
//! (`--transfers`).

use crate::app_protocol::{self, Fingerprint};
use crate::incoming::{Incoming, Refusal, Store, Taken};
use crate::transfer::{Message, PING};
use anyhow::{bail, Context, Result};
use phyllo::{Event, PeerId, PublicKey, SessionSendError};
use phyllo_net::{EngineConfig, SessionSocket};
use rustc_hash::FxHashMap;
use std::collections::VecDeque;
use std::ops::ControlFlow;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// `phyllo serve` options.
#[derive(clap::Args, Debug)]
pub struct ServeArgs {
    /// Address to listen on.
    #[arg(long, default_value = "0.0.0.0:7700")]
    pub listen: String,
    /// This server's private key file (from `phyllo keygen`).
    #[arg(long)]
    pub key: PathBuf,
    /// A client's public key (a `.pub` file or 64 hexadecimal digits); repeat for more.
    #[arg(long, required_unless_present = "allow_file")]
    pub allow: Vec<String>,
    /// A file of allowed public keys, one per line (blank lines and `#` comments are
    /// skipped).
    #[arg(long)]
    pub allow_file: Option<PathBuf>,
    /// The stack of every session.
    #[arg(long, default_value = phyllo_net::DEFAULT_STACK)]
    pub stack: String,
    /// Put the Protocol Accelerator in front of the stack.
    #[arg(long)]
    pub accel: bool,
    /// Store each transfer received in this directory, under the name its sender gave: written
    /// to a partial file (`.phyllo-part-…`), checked whole (BLAKE3), then put in place. Without
    /// it the server checks transfers and keeps nothing.
    #[arg(long)]
    pub out: Option<PathBuf>,
    /// Replace a file that has a transfer's name (by default such a transfer is refused).
    #[arg(long)]
    pub overwrite: bool,
    /// Busy-poll the socket (lowest latency, one core busy).
    #[arg(long)]
    pub busy_poll: bool,
    /// Stop after this many transfers have ended, stored or refused (0: run until Ctrl-C).
    #[arg(long, default_value_t = 0)]
    pub transfers: u64,
    /// Print the address actually bound (for `--listen 127.0.0.1:0`) on the first line.
    #[arg(long)]
    pub print_addr: bool,
    /// Receive with a plain loop instead of the receive engine (which is used unless
    /// `--busy-poll` asks for the latency loop).
    #[arg(long)]
    pub no_engine: bool,
    /// The receive engine's quota: receive buffers taken off the socket per turn.
    #[arg(long, default_value_t = EngineConfig::default().quota as u64,
          value_parser = clap::value_parser!(u64).range(1..))]
    pub quota: u64,
    /// The most of each 10 ms the listening sockets may take together on the receive engine,
    /// in (0, 1]: under a flood of strangers' datagrams they wait out the rest of the period
    /// (the kernel drops what no longer fits) while established peers' own sockets are
    /// served, and the CPU they leave goes to them and to other processes. The kernel spreads
    /// strangers over eight listening sockets by source, so a flood from one source fills one
    /// of them and handshakes from elsewhere go on. The default, 5 %, holds 200
    /// handshakes per second with room to spare; raise it when many peers beyond the
    /// dedicated sockets share the listening socket.
    #[arg(long, default_value_t = EngineConfig::default().listen_share)]
    pub listen_share: f64,
    /// Worker threads, each serving its share of the sessions with a socket, session
    /// endpoint and receive engine of its own on the same port. The kernel steers each
    /// datagram to a worker by its source address (the port spreads it over that worker's
    /// listening sockets), so a client stays on its worker when its port changes; a client
    /// whose address changes starts a new session on another worker, and all clients
    /// behind one address (a NAT) share a worker. The workers share the output directory and
    /// --transfers' count. More workers than cores gain nothing. Needs the receive engine
    /// (not with --no-engine or --busy-poll).
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u64).range(1..=64),
          conflicts_with_all = ["no_engine", "busy_poll"])]
    pub workers: u64,
}

/// What the server holds for one peer.
#[derive(Default)]
struct Peer {
    /// The transfer being received (boxed: most peers of a busy server are idle, and the
    /// server keeps one of these per peer).
    transfer: Option<Box<Incoming>>,
    /// The last transfer was refused: its data is dropped without more answers until the
    /// next offer.
    refused: bool,
    /// Answers that did not fit the session yet.
    replies: VecDeque<Vec<u8>>,
}

/// The server's application: echo pings, receive transfers ([`crate::incoming`]).
struct App<'a> {
    args: &'a ServeArgs,
    store: Store,
    /// By peer: the endpoint's identifiers, which no datagram chooses, so a fast hash.
    peers: FxHashMap<PeerId, Peer>,
    /// Transfers ended, stored or refused, by every worker.
    ended_transfers: &'a AtomicU64,
    /// The peers with deliveries this round (kept to keep its allocation).
    readable: Vec<PeerId>,
}

impl App<'_> {
    /// Report session events and serve every peer with deliveries; answers are queued in the
    /// sessions (the next flush sends them). Nothing a peer sends, and no failure to store
    /// what it sends, ends the server: the transfer ends, with the reason sent back.
    fn round(&mut self, node: &mut SessionSocket) -> Result<()> {
        while let Some(e) = node.endpoint_mut().poll_event() {
            match e {
                Event::Established { peer, key, .. } => tracing::info!(
                    peer = %Fingerprint(key),
                    addr = %node.endpoint()
                        .peer_addr(peer)
                        .map_or("?".into(), |a| a.to_string()),
                    "session up"
                ),
                Event::Ended {
                    peer,
                    reason,
                    unconfirmed,
                } => {
                    let fp = fingerprint_of(node, peer);
                    tracing::info!(
                        peer = %fp,
                        ?reason,
                        unconfirmed = unconfirmed.len(),
                        "session ended"
                    );
                    // What it sent so far goes to its partial file, which is let go: the peer
                    // resumes it in its next session, which may be on another worker (its
                    // address changed), and that one may take the file only once this one
                    // has let it go.
                    if let Some(mut t) = self.peers.get_mut(&peer).and_then(|st| st.transfer.take())
                    {
                        if let Err(r) = t.flush() {
                            tracing::warn!(peer = %fp, name = t.name(), "transfer failed: {r}");
                            t.abandon();
                            self.peers.remove(&peer);
                        }
                        // Dropped here: the partial file is closed and let go.
                    }
                }
            }
        }
        let mut readable = std::mem::take(&mut self.readable);
        node.take_readable_into(&mut readable);
        for &p in &readable {
            // Every readable peer has a key; one the endpoint forgot has nothing to read.
            let Some(key) = node.endpoint().peer_key(p) else {
                continue;
            };
            let st = self.peers.entry(p).or_default();
            loop {
                // Replies first, in order; a full session stops this peer's reading until
                // the next round (its messages wait in the session, nothing is lost).
                if !st.replies.is_empty() {
                    let now = node.now();
                    while let Some(r) = st.replies.front() {
                        match node.endpoint_mut().send(now, p, r) {
                            Ok(()) => {
                                st.replies.pop_front();
                            }
                            Err(SessionSendError::WouldBlock) => break,
                            Err(e) => {
                                tracing::warn!(peer = %Fingerprint(key), "reply dropped: {e}");
                                st.replies.pop_front();
                            }
                        }
                    }
                    if !st.replies.is_empty() {
                        node.mark_readable(p);
                        break;
                    }
                }
                let Some(m) = node.endpoint_mut().poll_delivery_msg(p) else {
                    break;
                };
                if m.data().first() == Some(&PING) {
                    // The echo is the delivered buffer, sent back as it is: no copy, no
                    // allocation. No reply waits before it (see above).
                    let now = node.now();
                    if let Err(e) = node.endpoint_mut().send_msg(now, p, m) {
                        if e.error == SessionSendError::WouldBlock {
                            st.replies.push_back(e.msg.data().to_vec());
                        } else {
                            tracing::warn!(peer = %Fingerprint(key), "reply dropped: {}", e.error);
                        }
                        node.endpoint_mut().recycle(e.msg);
                    }
                    continue;
                }
                let reply = answer(st, &self.store, key, m.data(), self.ended_transfers);
                node.endpoint_mut().recycle(m);
                // Into the session at the top of the loop, before the next delivery.
                if let Some(reply) = reply {
                    st.replies.push_back(reply);
                }
            }
        }
        self.readable = readable;
        Ok(())
    }

    /// Whether `--transfers N` transfers have ended (on every worker together).
    fn done(&self) -> bool {
        self.args.transfers > 0
            && self.ended_transfers.load(Ordering::Relaxed) >= self.args.transfers
    }
}

/// Handle message `m` from the peer whose key is `key`; the answer, if any. Not a ping: the
/// server's loop echoes those in their own buffers before it comes here.
fn answer(
    st: &mut Peer,
    store: &Store,
    key: PublicKey,
    m: &[u8],
    ended: &AtomicU64,
) -> Option<Vec<u8>> {
    let end = || {
        ended.fetch_add(1, Ordering::Relaxed);
    };
    let fp = Fingerprint(key);
    let fail = |st: &mut Peer, reason: String| {
        st.refused = true;
        Some(Message::Fail { reason: &reason }.encode())
    };
    match Message::parse(m) {
        Ok(Message::Offer(offer)) => {
            st.refused = false;
            match st.transfer.take() {
                // The same transfer offered again in this session.
                Some(t) if t.id() == offer.id => {
                    let have = t.have();
                    st.transfer = Some(t);
                    return Some(Message::Accept { id: offer.id, have }.encode());
                }
                Some(t) => {
                    if let Err(r) = t.suspend() {
                        tracing::warn!(peer = %fp, "the transfer it left failed: {r}");
                    }
                }
                None => {}
            }
            let (id, name, size) = (offer.id, offer.name, offer.size);
            match store.offer(&key.to_string(), &offer) {
                Ok(Taken::Receive(t)) => {
                    tracing::info!(
                        peer = %fp,
                        name,
                        size,
                        from = t.have(),
                        partial = %t.partial_path().map_or("-".into(), |p| p.display().to_string()),
                        "receiving"
                    );
                    let have = t.have();
                    st.transfer = Some(t);
                    Some(Message::Accept { id, have }.encode())
                }
                Ok(Taken::Held(stored)) => {
                    tracing::info!(peer = %fp, name, "already held with the same bytes");
                    end();
                    Some(Message::Done { name: &stored }.encode())
                }
                Err(r) => {
                    tracing::warn!(peer = %fp, name, "refused: {r}");
                    end();
                    fail(st, r.to_string())
                }
            }
        }
        Ok(Message::Data { offset, bytes }) => {
            let t = match st.transfer.as_mut() {
                Some(t) => t,
                None if st.refused => return None,
                None => return fail(st, Refusal::NoTransfer.to_string()),
            };
            match t.data(offset, bytes) {
                Ok(()) => None,
                Err(r) => {
                    tracing::warn!(peer = %fp, name = t.name(), "transfer failed: {r}");
                    t.abandon();
                    st.transfer = None;
                    end();
                    fail(st, r.to_string())
                }
            }
        }
        Ok(Message::Finish { size, hash }) => {
            let Some(t) = st.transfer.take() else {
                return (!st.refused).then(|| {
                    Message::Fail {
                        reason: &Refusal::NoTransfer.to_string(),
                    }
                    .encode()
                });
            };
            let name = t.name().to_owned();
            end();
            match t.finish(size, hash, store) {
                Ok(stored) => {
                    tracing::info!(
                        peer = %fp,
                        name,
                        bytes = size,
                        blake3 = %app_protocol::hex_digest(&hash),
                        path = %store
                            .dir
                            .as_ref()
                            .map_or("-".into(), |d| d.join(&stored).display().to_string()),
                        "transfer complete"
                    );
                    Some(Message::Done { name: &stored }.encode())
                }
                Err(r) => {
                    tracing::warn!(peer = %fp, name, "transfer failed: {r}");
                    fail(st, r.to_string())
                }
            }
        }
        Ok(other) => fail(st, format!("unexpected message from a client: {other:?}")),
        Err(e) => fail(st, format!("malformed message: {e}")),
    }
}

/// Serve with the plain loop: wait for input (up to 50 ms, or not at all when `beside` is
/// polled in the same loop), serve the application, send its answers.
fn serve_on_loop(
    node: &mut SessionSocket,
    app: &mut App<'_>,
    stop: &std::sync::atomic::AtomicBool,
    mut beside: Option<&mut dyn FnMut() -> Result<()>>,
) -> Result<()> {
    while !app_protocol::is_set(stop) && !app.done() {
        match beside.as_mut() {
            // Poll both without sleeping in either.
            Some(f) => {
                node.pump(Duration::ZERO)?;
                f()?;
            }
            None => {
                node.pump(Duration::from_millis(50))?;
            }
        }
        app.round(node)?;
        // Answers go out now, not after the next wait for input.
        node.flush()?;
    }
    Ok(())
}

/// Run the server.
pub fn serve(args: ServeArgs) -> Result<()> {
    serve_with(args, None)
}

/// Run the server with `beside` polled in the same busy loop, every turn (the lab puts a
/// raw-UDP echo there: a latency baseline that pays the same polling).
pub fn serve_with(args: ServeArgs, beside: Option<&mut dyn FnMut() -> Result<()>>) -> Result<()> {
    let key = phyllo_net::keys::read_private(&args.key)?;
    let mut allowed = args
        .allow
        .iter()
        .map(|a| phyllo_net::keys::read_public(a).map_err(anyhow::Error::from))
        .collect::<Result<Vec<_>>>()?;
    if let Some(f) = &args.allow_file {
        allowed.extend(phyllo_net::keys::read_allow_file(f)?);
    }
    let addr = app_protocol::parse_addr(&args.listen)?;
    let engine = !(args.no_engine || args.busy_poll || beside.is_some());
    let workers = usize::try_from(args.workers).unwrap_or(usize::MAX);
    if workers > 1 && !engine {
        bail!("--workers {workers} needs the receive engine (not --no-engine or --busy-poll)");
    }
    let mut nodes = if engine {
        // Established peers get sockets of their own, which the engine serves in turn with
        // the listening ones: a flood of junk or handshakes fills only the latter. With more
        // than one worker, every worker's sockets share the port, steered by source address.
        SessionSocket::bind_dedicating_workers(
            addr,
            key,
            allowed,
            &args.stack,
            args.accel,
            workers,
        )?
    } else {
        vec![SessionSocket::bind(
            addr,
            key,
            allowed,
            &args.stack,
            args.accel,
        )?]
    };
    for node in &mut nodes {
        node.set_busy_poll(args.busy_poll);
    }
    if let Some(dir) = &args.out {
        check_out(dir)?;
    }
    let stop = app_protocol::interrupted()?;
    let local = nodes[0].local_addr();
    if args.print_addr {
        println!("{local}");
    }
    tracing::info!(
        addr = %local,
        public_key = %nodes[0].endpoint().public(),
        stack = %args.stack,
        accel = args.accel,
        workers,
        out = %args.out.as_ref().map_or("-".into(), |d| d.display().to_string()),
        "serving"
    );
    // What the workers share: the output directory and its partial files being received, the
    // stop flag, and the count of ended transfers.
    let store = Store::new(args.out.clone(), args.overwrite);
    let ended = AtomicU64::new(0);
    let shared = Shared {
        args: &args,
        store: &store,
        ended: &ended,
        stop: &stop,
    };
    if !engine {
        let mut node = nodes.pop().context("no socket bound")?;
        let mut app = shared.app();
        let started = Instant::now();
        serve_on_loop(&mut node, &mut app, &stop, beside)?;
        return finish_node(&mut node, app, started);
    }
    if workers == 1 {
        let node = nodes.pop().context("no socket bound")?;
        return shared.run_worker(node);
    }
    // One thread per worker; the first error stops the others (through the stop flag) and
    // is the server's.
    std::thread::scope(|scope| {
        let mut running = Vec::new();
        for (i, node) in nodes.into_iter().enumerate() {
            let shared = &shared;
            let spawned = std::thread::Builder::new()
                .name(format!("worker-{i}"))
                .spawn_scoped(scope, move || {
                    // Every line a worker logs says which it is.
                    let _span = tracing::info_span!("worker", worker = i).entered();
                    shared.run_worker(node)
                });
            match spawned {
                Ok(h) => running.push(h),
                Err(e) => {
                    stop.store(true, Ordering::SeqCst);
                    return Err(anyhow::Error::from(e).context(format!("starting worker {i}")));
                }
            }
        }
        let mut first = None;
        for (i, h) in running.into_iter().enumerate() {
            let r = h
                .join()
                .unwrap_or_else(|_| Err(anyhow::anyhow!("worker {i} panicked")));
            if let Err(e) = r {
                stop.store(true, Ordering::SeqCst);
                first.get_or_insert(e.context(format!("worker {i}")));
            }
        }
        first.map_or(Ok(()), Err)
    })
}

/// What every worker of a server shares.
struct Shared<'a> {
    args: &'a ServeArgs,
    store: &'a Store,
    ended: &'a AtomicU64,
    stop: &'a AtomicBool,
}

impl<'a> Shared<'a> {
    /// A worker's application: peers of its own, the shared store (a clone shares the set of
    /// partial files being received) and count.
    fn app(&self) -> App<'a> {
        App {
            args: self.args,
            store: self.store.clone(),
            peers: FxHashMap::default(),
            ended_transfers: self.ended,
            readable: Vec::new(),
        }
    }

    /// Serve `node` on the receive engine until Ctrl-C, or until `--transfers` have ended on
    /// all workers together (then the stop flag ends the other workers too), or an error
    /// (which sets the stop flag as well).
    fn run_worker(&self, mut node: SessionSocket) -> Result<()> {
        let mut app = self.app();
        let started = Instant::now();
        let cfg = EngineConfig {
            quota: self.args.quota as usize,
            listen_share: self.args.listen_share,
        };
        let stop = self.stop;
        let served = node.serve_on_engine(&cfg, stop, |node| {
            app.round(node)?;
            Ok(if app.done() {
                // The other workers, idle or not, stop within one turn (50 ms).
                stop.store(true, Ordering::SeqCst);
                ControlFlow::Break(())
            } else {
                ControlFlow::Continue(())
            })
        });
        if let Err(e) = served {
            stop.store(true, Ordering::SeqCst);
            return Err(e.into());
        }
        finish_node(&mut node, app, started)
    }
}

/// The end of serving on `node`: with `--transfers` done, a second for the last answers to be
/// confirmed; then unfinished transfers are suspended (their partial files written out, for
/// their senders to resume) and each session's statistics logged.
fn finish_node(node: &mut SessionSocket, mut app: App<'_>, started: Instant) -> Result<()> {
    if app.done() {
        // Let the last answers be confirmed before going.
        let until = Instant::now() + Duration::from_secs(1);
        while Instant::now() < until {
            node.pump(Duration::from_millis(10))?;
        }
    }
    tracing::info!(seconds = started.elapsed().as_secs_f64(), "stopping");
    for (p, st) in app.peers.drain() {
        if let Some(t) = st.transfer {
            let name = t.name().to_owned();
            if let Err(r) = t.suspend() {
                tracing::warn!(peer = %fingerprint_of(node, p), name, "transfer failed: {r}");
            }
        }
    }
    for p in node.endpoint().peers().collect::<Vec<_>>() {
        if let (Some(k), Some(s)) = (node.endpoint().peer_key(p), node.endpoint().peer_stats(p)) {
            tracing::info!(
                "{}",
                app_protocol::stats_line(&k, node.endpoint().peer_addr(p), &s)
            );
        }
    }
    tracing::info!("{}", app_protocol::drops_line(node.endpoint()));
    Ok(())
}

/// Peer `p`'s key fingerprint, for the log (`?` once the endpoint forgot it).
fn fingerprint_of(node: &SessionSocket, p: PeerId) -> String {
    node.endpoint()
        .peer_key(p)
        .map_or_else(|| "?".into(), |k| Fingerprint(k).to_string())
}

/// Make `--out` if it is missing and check that the server can write there, before serving.
fn check_out(dir: &std::path::Path) -> Result<()> {
    std::fs::create_dir_all(dir).with_context(|| format!("creating --out {}", dir.display()))?;
    if !std::fs::metadata(dir)?.is_dir() {
        bail!("--out {}: not a directory", dir.display());
    }
    let probe = dir.join(format!(
        "{}probe-{}",
        crate::transfer::PARTIAL_PREFIX,
        std::process::id()
    ));
    std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(&probe)
        .with_context(|| format!("--out {}: cannot write there", dir.display()))?;
    std::fs::remove_file(&probe).with_context(|| format!("removing {}", probe.display()))?;
    Ok(())
}
