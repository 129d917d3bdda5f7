//! `phyllo connect`: one session to a `phyllo serve` — send a file or standard input as a
//! transfer ([`crate::transfer`]: resumable, checked whole, stored atomically), ping (latency
//! percentiles) or push data as fast as the session takes it (throughput); statistics at the
//! end. How it ends is in its exit status ([`Failure`]).

use crate::app_protocol;
use crate::outgoing::{Outgoing, Source};
use crate::transfer::{data_header, Message, TransferId, DATA_HEADER, PING};
use anyhow::{bail, Context, Result};
use phyllo::endpoint::{Event, PeerId, SessionSendError};
use phyllo::PublicKey;
use phyllo_net::SessionSocket;
use std::collections::VecDeque;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::{Duration, Instant};
use thiserror::Error;

/// How a `phyllo connect` failed, for its exit status ([`Failure::exit_code`]); any other
/// error exits with 1.
#[derive(Debug, Error)]
pub enum Failure {
    /// The server ended the transfer without storing it (exit status 1).
    #[error("the server refused the transfer: {0}")]
    Refused(String),
    /// No session with the server for `--timeout` (exit status 3).
    #[error(
        "no session with {server} for {secs} s: the server is down or unreachable, the server \
         key is wrong, this key is not allowed there, or the server runs another --stack or \
         --accel{partial}"
    )]
    Unreachable {
        /// The server's address.
        server: SocketAddr,
        /// The timeout.
        secs: f64,
        /// What the server may hold.
        partial: &'static str,
    },
    /// Ctrl-C (exit status 130).
    #[error("interrupted{0}")]
    Interrupted(&'static str),
}

impl Failure {
    /// The exit status `phyllo connect` ends with.
    pub fn exit_code(&self) -> u8 {
        match self {
            Failure::Refused(_) => 1,
            Failure::Unreachable { .. } => 3,
            Failure::Interrupted(_) => 130,
        }
    }
}

/// What `phyllo connect --help` says about transfers, after the options.
pub const TRANSFERS: &str = "\
Transfers:
  A file goes to the server under its base name (stdin under --name). The server writes it
  to a partial file in its --out directory and puts it under that name only once the whole
  file's BLAKE3 matches the sender's; it never follows a symlink there, and never replaces
  a file of that name unless it runs with --overwrite. A transfer is atomic: afterwards the
  name holds exactly the file, or nothing new.

  Interrupted transfers resume. If the session ends (the server restarted, the path broke
  for a while), connect starts a new one and goes on from the bytes the server already
  holds; running the same command again after it exited does the same for a file that has
  not changed. Standard input resumes only within one run. A partial file the server keeps
  (.phyllo-part-...) never looks complete; it may be removed at any time.

  A directory (--file DIR) goes file by file, each stored under DIR's base name and its
  path inside DIR (directories made on the server as needed, never through a symlink);
  symbolic links and special files are skipped, empty directories do not travel. Each file
  is offered with its BLAKE3: one the server already holds with the same bytes is
  confirmed without being sent, so sending a directory again moves only what is missing.
  The first file the server refuses ends the run (exit status 1).

Exit status:
  0    the server stored the file and confirmed its BLAKE3 (or pings/throughput done)
  1    the server refused or failed the transfer (the reason is printed: a bad name, a
       file that exists, no space, a write error, a hash mismatch), or another error
  2    bad command-line arguments
  3    no session with the server for --timeout seconds
  130  interrupted (Ctrl-C); the server keeps the partial file for a later resume";

/// What the server holds of an unfinished transfer.
const PARTIAL: &str = "; the server keeps what it received as a partial file, not under the \
                       file's name, and the same command resumes it";

/// `phyllo connect` options.
#[derive(clap::Args, Debug)]
pub struct ConnectArgs {
    /// The server's address.
    pub addr: String,
    /// This client's private key file (from `phyllo keygen`).
    #[arg(long)]
    pub key: PathBuf,
    /// The server's public key (a `.pub` file or 64 hexadecimal digits).
    #[arg(long)]
    pub server_key: String,
    /// The stack of the session (the server's).
    #[arg(long, default_value = phyllo_net::DEFAULT_STACK)]
    pub stack: String,
    /// Put the Protocol Accelerator in front of the stack.
    #[arg(long)]
    pub accel: bool,
    /// Send this file (default: standard input), stored by the server under its base name;
    /// or every file under this directory, stored under their paths in it.
    #[arg(long)]
    pub file: Option<PathBuf>,
    /// The name to store standard input under.
    #[arg(long, default_value = "stdin")]
    pub name: String,
    /// Ping this many times instead (latency percentiles).
    #[arg(long)]
    pub ping: Option<u64>,
    /// Push data for this many seconds instead (throughput).
    #[arg(long)]
    pub throughput: Option<f64>,
    /// Bytes per message (pings and data, headers included). A data message larger than one
    /// of the session's fragments is cut to a whole number of them, so that every datagram of
    /// a transfer has one size.
    #[arg(long, default_value_t = 16_384, value_parser = clap::value_parser!(u64).range(16..=1 << 20))]
    pub size: u64,
    /// Busy-poll the socket (lowest latency, one core busy).
    #[arg(long)]
    pub busy_poll: bool,
    /// Give up when no session with the server has been up for this many seconds (at the
    /// start, or after one ended: the server stopped, restarted or became unreachable).
    #[arg(long, default_value_t = 10.0)]
    pub timeout: f64,
    /// Print one machine-readable line of results on stdout (key=value ...).
    #[arg(long)]
    pub quiet: bool,
    /// Print the results on stdout as one JSON object (the same keys as --quiet).
    #[arg(long, conflicts_with = "quiet")]
    pub json: bool,
    /// The local address to send from (default: any address, a port the system picks). A
    /// move to a new port after an unanswered handshake keeps this address. A server with
    /// `--workers` steers clients to workers by address: on one machine, 127.0.0.2:0 and
    /// 127.0.0.3:0 reach different workers of a server on 127.0.0.1.
    #[arg(long)]
    pub bind: Option<String>,
}

struct Client {
    node: SessionSocket,
    peer: PeerId,
    server: SocketAddr,
    server_key: PublicKey,
    /// Messages from the server not yet taken.
    replies: VecDeque<Vec<u8>>,
    /// Messages an ended session handed back (not known delivered), oldest first.
    handed_back: VecDeque<Vec<u8>>,
    /// A session ended since [`Client::session`] last looked.
    ended: bool,
    /// Since when no session has been up (`None`: one is).
    down_since: Option<Instant>,
    timeout: Duration,
    /// Whether the transfer has started (what an unreachable server may hold).
    started: bool,
    /// When the socket last moved to a new port (or was made).
    rebound: Instant,
}

/// How long without a session before the client sends from a new source port (at most that
/// often).
const REBIND_AFTER: Duration = Duration::from_millis(1500);

impl Client {
    /// One round, then collect events and replies. A session that ends is reported
    /// ([`ended`](Self::ended)) and a new one started at once; no session for `timeout` is
    /// [`Failure::Unreachable`].
    fn pump(&mut self) -> Result<()> {
        // At most a millisecond, spinning on the socket when busy-polling (which returns as
        // soon as a datagram is in): a pump that never waited would spin through the whole
        // round (timers, flushes, events) between two looks at the socket.
        self.node.pump(Duration::from_millis(1))?;
        while let Some(e) = self.node.endpoint_mut().poll_event() {
            match e {
                Event::Established { .. } => {
                    self.down_since = None;
                    // The client talks to the server alone: once the server has answered from
                    // the address dialled, the socket is connected to it (sends without a
                    // route lookup, receives without source addresses). A server answering
                    // from another of its addresses leaves it unconnected, as does a failure
                    // to connect: connecting only saves work, so it never ends the run.
                    let ep = self.node.endpoint();
                    if self.node.socket().peer_addr().is_none()
                        && ep.peer_addr(self.peer) == Some(self.server)
                    {
                        if let Err(e) = self.node.connect_to(self.server) {
                            tracing::debug!("socket left unconnected: {e}");
                        }
                    }
                }
                Event::Ended {
                    reason,
                    unconfirmed,
                    ..
                } => {
                    eprintln!(
                        "session ended ({reason:?}) with {} messages unconfirmed; connecting again",
                        unconfirmed.len()
                    );
                    self.handed_back.extend(unconfirmed);
                    self.ended = true;
                    self.down_since.get_or_insert_with(Instant::now);
                    let now = self.node.now();
                    self.node
                        .endpoint_mut()
                        .connect(now, self.server_key, self.server);
                }
            }
        }
        if self.node.endpoint().is_established(self.peer) {
            self.down_since = None;
        }
        if let Some(t) = self.down_since {
            // Handshakes unanswered: try from another source port, which a server hashes
            // onto another of its listening sockets (one may be flooded) and a NAT maps
            // afresh.
            if t.elapsed() > REBIND_AFTER && self.rebound.elapsed() > REBIND_AFTER {
                let to = self.node.rebind()?;
                eprintln!("no answer from {} yet: trying again from {to}", self.server);
                self.rebound = Instant::now();
            }
            if t.elapsed() > self.timeout {
                return Err(Failure::Unreachable {
                    server: self.server,
                    secs: self.timeout.as_secs_f64(),
                    partial: if self.started { PARTIAL } else { "" },
                }
                .into());
            }
        }
        self.node.take_readable();
        while let Some(m) = self
            .node
            .endpoint_mut()
            .poll_delivery_with(self.peer, |m| m.to_vec())
        {
            self.replies.push_back(m);
        }
        Ok(())
    }

    /// Pump until a session is up.
    fn session(&mut self) -> Result<()> {
        while !self.node.endpoint().is_established(self.peer) {
            self.pump()?;
        }
        Ok(())
    }

    /// Send `m`, pumping while the session is full; `false` if the session ended first (the
    /// message is not sent).
    fn send(&mut self, m: &[u8]) -> Result<bool> {
        loop {
            if self.ended {
                return Ok(false);
            }
            let now = self.node.now();
            match self.node.endpoint_mut().send(now, self.peer, m) {
                Ok(()) => return Ok(true),
                Err(SessionSendError::WouldBlock) => self.pump()?,
                Err(e) => bail!("sending: {e}"),
            }
        }
    }

    /// Pump until a reply that `pick` takes arrives; `None` if the session ended first.
    fn reply<T>(&mut self, pick: impl FnMut(&[u8]) -> Option<T>) -> Result<Option<T>> {
        self.reply_by(None, pick)
    }

    /// [`reply`](Self::reply), giving up with an error at `deadline`.
    fn reply_by<T>(
        &mut self,
        deadline: Option<Instant>,
        mut pick: impl FnMut(&[u8]) -> Option<T>,
    ) -> Result<Option<T>> {
        loop {
            while let Some(r) = self.replies.pop_front() {
                if let Some(t) = pick(&r) {
                    return Ok(Some(t));
                }
            }
            if self.ended {
                return Ok(None);
            }
            if deadline.is_some_and(|d| Instant::now() > d) {
                bail!("no answer from {} within the session", self.server);
            }
            self.pump()?;
        }
    }
}

/// Run the client.
pub fn connect(args: ConnectArgs) -> Result<()> {
    let key = phyllo_net::keys::read_private(&args.key)?;
    let server_key = phyllo_net::keys::read_public(&args.server_key)?;
    let server = app_protocol::parse_addr(&args.addr)?;
    let bind: SocketAddr = match &args.bind {
        Some(b) => app_protocol::parse_addr(b).context("--bind")?,
        None if server.is_ipv4() => "0.0.0.0:0".parse()?,
        None => "[::]:0".parse()?,
    };
    if !(args.timeout > 0.0 && args.timeout.is_finite()) {
        bail!(
            "--timeout {}: not a positive number of seconds",
            args.timeout
        );
    }
    let mut node = SessionSocket::bind(bind, key, vec![], &args.stack, args.accel)?;
    node.set_busy_poll(args.busy_poll);
    let now = node.now();
    let peer = node.endpoint_mut().connect(now, server_key, server);
    let mut c = Client {
        node,
        peer,
        server,
        server_key,
        replies: VecDeque::new(),
        handed_back: VecDeque::new(),
        ended: false,
        down_since: Some(Instant::now()),
        timeout: Duration::from_secs_f64(args.timeout),
        started: false,
        rebound: Instant::now(),
    };
    let started = Instant::now();
    c.session()?;
    let handshake = started.elapsed();
    let stop = app_protocol::interrupted()?;
    let size = args.size as usize;
    let result = if let Some(n) = args.ping {
        ping(&mut c, n, size, &stop)?
    } else if let Some(secs) = args.throughput {
        let deadline = Instant::now() + Duration::from_secs_f64(secs);
        let source = Source::Stream(Box::new(std::io::repeat(0x5a)));
        let offer = Offering::base("throughput");
        transfer(&mut c, source, offer, size, &stop, Some(deadline))?.line()
    } else {
        match &args.file {
            Some(f) if f.is_dir() => send_tree(&mut c, f, size, &stop)?,
            Some(f) => {
                let name = base_name(f)?;
                let file =
                    std::fs::File::open(f).with_context(|| format!("opening {}", f.display()))?;
                let meta = file
                    .metadata()
                    .with_context(|| format!("reading {}", f.display()))?;
                if !meta.is_file() {
                    bail!("{}: not a regular file or a directory", f.display());
                }
                let offer = Offering::base(&name);
                transfer(
                    &mut c,
                    Source::File { file, meta },
                    offer,
                    size,
                    &stop,
                    None,
                )?
                .line()
            }
            None => {
                let source = Source::Stream(Box::new(std::io::stdin()));
                let offer = Offering::base(&args.name);
                transfer(&mut c, source, offer, size, &stop, None)?.line()
            }
        }
    };
    let s = c.node.endpoint().peer_stats(peer).unwrap_or_default();
    eprintln!(
        "handshake {:.3} ms",
        s.handshake_time.unwrap_or(handshake).as_secs_f64() * 1e3
    );
    eprintln!(
        "{}",
        app_protocol::stats_line(&server_key, Some(server), &s)
    );
    eprintln!("{}", app_protocol::drops_line(c.node.endpoint()));
    let line = format!(
        "{result} handshake_us={:.1} datagrams_out={} bytes_out={} fast_msgs={} slow_msgs={}",
        s.handshake_time.unwrap_or(handshake).as_secs_f64() * 1e6,
        s.datagrams_out,
        s.bytes_out,
        s.fast_msgs,
        s.slow_msgs,
    );
    if args.json {
        println!("{}", json_line(&line));
    } else if args.quiet {
        println!("{line}");
    } else {
        eprintln!("{result}");
    }
    Ok(())
}

/// The `key=value …` result line as one JSON object: numbers as numbers, `yes`/`no` as
/// booleans, the rest as strings.
fn json_line(line: &str) -> String {
    let mut o = serde_json::Map::new();
    for (k, v) in line.split_whitespace().filter_map(|w| w.split_once('=')) {
        let v = match v {
            "yes" => serde_json::Value::Bool(true),
            "no" => serde_json::Value::Bool(false),
            _ => match v.parse::<u64>() {
                Ok(n) => n.into(),
                Err(_) => match v.parse::<f64>() {
                    Ok(x) if x.is_finite() => x.into(),
                    _ => v.into(),
                },
            },
        };
        o.insert(k.to_owned(), v);
    }
    serde_json::Value::Object(o).to_string()
}

fn ping(
    c: &mut Client,
    n: u64,
    size: usize,
    stop: &std::sync::atomic::AtomicBool,
) -> Result<String> {
    let mut rtts = Vec::with_capacity(n as usize);
    let mut msg = vec![0u8; size];
    msg[0] = PING;
    let mut i = 0;
    while i < n {
        if app_protocol::is_set(stop) {
            return Err(Failure::Interrupted("").into());
        }
        msg[1..9].copy_from_slice(&i.to_le_bytes());
        let t = Instant::now();
        c.ended = false;
        c.session()?;
        if !c.send(&msg)? {
            continue;
        }
        let limit = Instant::now() + Duration::from_secs(5);
        let echoed = c
            .reply_by(Some(limit), |r| (r == msg).then_some(()))
            .with_context(|| format!("ping {i}: no echo in 5 s"))?;
        if echoed.is_none() {
            // The session ended first: ping again in the next one.
            continue;
        }
        rtts.push(t.elapsed());
        i += 1;
    }
    if rtts.is_empty() {
        bail!("no pings");
    }
    rtts.sort();
    let pct = |q: f64| rtts[((rtts.len() - 1) as f64 * q).round() as usize].as_secs_f64() * 1e6;
    Ok(format!(
        "pings={} p50_us={:.1} p90_us={:.1} p99_us={:.1} max_us={:.1}",
        rtts.len(),
        pct(0.5),
        pct(0.9),
        pct(0.99),
        pct(1.0)
    ))
}

/// A file's transfer id: its name, size, modification time and inode, so the same file
/// offered again (by this process after a session ended, or by a new one) is the same
/// transfer, and a changed file a new one.
fn file_id(name: &str, meta: &std::fs::Metadata) -> TransferId {
    use std::os::unix::fs::MetadataExt;
    let mut h = blake3::Hasher::new();
    h.update(name.as_bytes());
    h.update(&meta.len().to_le_bytes());
    h.update(&meta.mtime().to_le_bytes());
    h.update(&meta.mtime_nsec().to_le_bytes());
    h.update(&meta.ino().to_le_bytes());
    h.finalize().as_bytes()[..16]
        .try_into()
        .expect("16 of 32 bytes")
}

/// Bytes of a single file sent before the server's answer to its offer ([`transfer`]): more
/// than a first round trip's window carries (10 datagrams, RFC 9002's initial window), and
/// little enough that a refused offer wastes nothing that matters.
const EARLY_BYTES: u64 = 64 << 10;

/// What [`send_next`] did.
enum Step {
    /// It sent a message of data.
    Sent,
    /// The source has ended: nothing was sent.
    End,
    /// The session ended (the message read is kept for a stream, and counted).
    Ended,
}

/// Take the next message of data from `out` at `offset` into a session message and send it
/// (pumping while the session has no room); `offset` moves past what was taken.
fn send_next(c: &mut Client, out: &mut Outgoing, offset: &mut u64, size: usize) -> Result<Step> {
    let size = whole_fragments(
        size,
        c.node
            .endpoint()
            .connection(c.peer)
            .and_then(|k| k.fragment_payload()),
    );
    let mut m = c.node.endpoint_mut().alloc();
    m.reserve(size);
    m.extend_from_slice(&data_header(*offset));
    let n = out
        .take(size - DATA_HEADER, |bytes| m.extend_from_slice(bytes))
        .context("reading the input")?;
    if n == 0 {
        c.node.endpoint_mut().recycle(m);
        return Ok(Step::End);
    }
    loop {
        if c.ended {
            // Kept for a stream (a file is read again from what the server holds).
            c.handed_back.push_back(m.data().to_vec());
            c.node.endpoint_mut().recycle(m);
            *offset += n as u64;
            return Ok(Step::Ended);
        }
        let now = c.node.now();
        match c.node.endpoint_mut().send_msg(now, c.peer, m) {
            Ok(()) => break,
            Err(e) if e.error == SessionSendError::WouldBlock => {
                m = e.msg;
                c.pump()?;
            }
            Err(e) => bail!("sending: {}", e.error),
        }
    }
    *offset += n as u64;
    Ok(Step::Sent)
}

/// A data message's size: `size`, or where it is larger than one fragment of the session's
/// (`chunk` bytes), the largest whole number of fragments in it. Every datagram of the
/// transfer then has one size, and the socket hands them to the kernel in segmented runs of
/// up to 64 (a shorter datagram ends a run: an 8 KiB message in 1389-byte fragments ended
/// one every six datagrams). Measured on the bulk experiment's loopback transfer (64 MiB,
/// `--size 8192`, interleaved pairs of runs, medians of 7): 279.5 MB/s against 247.0
/// without it, and 225 against 258 ms of the sender's CPU.
fn whole_fragments(size: usize, chunk: Option<usize>) -> usize {
    match chunk {
        Some(c) if c > DATA_HEADER && size > c => size / c * c,
        _ => size,
    }
}

/// How a transfer is offered: the name and what else the offer says.
#[derive(Clone, Copy)]
struct Offering<'a> {
    /// The name to store it under.
    name: &'a str,
    /// `name` is a path inside a directory being sent.
    tree: bool,
    /// The BLAKE3 of the whole transfer, when known beforehand.
    hash: Option<[u8; 32]>,
}

impl<'a> Offering<'a> {
    /// A transfer under the base name `name`.
    fn base(name: &'a str) -> Self {
        Offering {
            name,
            tree: false,
            hash: None,
        }
    }
}

/// A finished transfer.
struct Sent {
    /// Its bytes.
    bytes: u64,
    /// Its BLAKE3.
    hash: [u8; 32],
    /// The name the server stored it under (`-`: the server keeps no files).
    stored: String,
    /// The bytes the server held when the transfer went on the last time.
    resumed_from: u64,
    /// From the first offer to the server's verdict.
    elapsed: Duration,
    /// The server held these bytes under the name already: nothing moved.
    held: bool,
}

impl Sent {
    /// The result line of a single transfer.
    fn line(&self) -> String {
        format!(
            "bytes={} seconds={:.3} mbytes_per_s={:.1} blake3={} verified=yes stored={} \
             resumed_from={}",
            self.bytes,
            self.elapsed.as_secs_f64(),
            self.bytes as f64 / self.elapsed.as_secs_f64() / 1e6,
            app_protocol::hex_digest(&self.hash),
            self.stored,
            self.resumed_from,
        )
    }
}

/// What the server answers about a transfer: how much it holds (to an offer), or its verdict.
enum Answer {
    /// It takes the transfer and holds its first bytes already.
    Have(u64),
    /// It stored the transfer under this name.
    Stored(String),
    /// It ended the transfer without storing it, for this reason.
    Refused(String),
}

impl Answer {
    /// The answer about transfer `id` in the server's message `r`, if it is one.
    fn to(id: TransferId, r: &[u8]) -> Option<Answer> {
        match Message::parse(r) {
            Ok(Message::Accept { id: got, have }) if got == id => Some(Answer::Have(have)),
            Ok(Message::Done { name }) => Some(Answer::Stored(name.to_owned())),
            Ok(Message::Fail { reason }) => Some(Answer::Refused(reason.to_owned())),
            _ => None,
        }
    }
}

/// The base name of `f`, to store it under.
fn base_name(f: &std::path::Path) -> Result<String> {
    Ok(f.file_name()
        .and_then(|n| n.to_str())
        .with_context(|| format!("{}: no file name to send it under", f.display()))?
        .to_owned())
}

/// Send every regular file under the directory `root`, one transfer each, named
/// `ROOT/path/inside` (`ROOT` the directory's base name) and offered with its BLAKE3, so
/// that a file the server already holds with the same bytes is confirmed without moving
/// again. Symbolic links and special files are skipped (and said so); empty directories do
/// not travel. The first transfer the server refuses ends the run; the result line counts
/// the files sent and those already held.
fn send_tree(
    c: &mut Client,
    root: &std::path::Path,
    size: usize,
    stop: &std::sync::atomic::AtomicBool,
) -> Result<String> {
    let top = match root.file_name() {
        Some(_) => base_name(root)?,
        // `.` or `..`: the directory's own name.
        None => base_name(
            &root
                .canonicalize()
                .with_context(|| root.display().to_string())?,
        )?,
    };
    let mut files = Vec::new();
    let mut skipped = 0u64;
    walk(root, &top, &mut files, &mut skipped)?;
    let t = Instant::now();
    let (mut bytes, mut moved, mut held) = (0u64, 0u64, 0u64);
    for (path, name) in &files {
        crate::transfer::check_path(name).map_err(|why| {
            anyhow::anyhow!("{}: cannot be named {name:?}: {why}", path.display())
        })?;
        let mut file =
            std::fs::File::open(path).with_context(|| format!("opening {}", path.display()))?;
        let meta = file
            .metadata()
            .with_context(|| format!("reading {}", path.display()))?;
        let mut h = blake3::Hasher::new();
        std::io::copy(&mut file, &mut h).with_context(|| format!("reading {}", path.display()))?;
        let offer = Offering {
            name,
            tree: true,
            hash: Some(*h.finalize().as_bytes()),
        };
        let sent = transfer(c, Source::File { file, meta }, offer, size, stop, None)
            .with_context(|| format!("sending {}", path.display()))?;
        bytes += sent.bytes;
        moved += sent.bytes - sent.resumed_from;
        held += sent.held as u64;
        tracing::info!(name, bytes = sent.bytes, stored = %sent.stored, "sent");
    }
    let elapsed = t.elapsed();
    Ok(format!(
        "files={} held_already={held} skipped={skipped} bytes={bytes} moved={moved} \
         seconds={:.3} mbytes_per_s={:.1} verified=yes stored={top}",
        files.len(),
        elapsed.as_secs_f64(),
        moved as f64 / elapsed.as_secs_f64() / 1e6,
    ))
}

/// The regular files under `dir`, sorted, each with its name `prefix/...`; symbolic links
/// and special files are counted in `skipped`, not followed.
fn walk(
    dir: &std::path::Path,
    prefix: &str,
    files: &mut Vec<(PathBuf, String)>,
    skipped: &mut u64,
) -> Result<()> {
    let mut entries = std::fs::read_dir(dir)
        .with_context(|| format!("reading the directory {}", dir.display()))?
        .collect::<std::io::Result<Vec<_>>>()
        .with_context(|| format!("reading the directory {}", dir.display()))?;
    entries.sort_by_key(|e| e.file_name());
    for e in entries {
        let path = e.path();
        let Some(leaf) = e.file_name().to_str().map(String::from) else {
            bail!(
                "{}: not UTF-8, cannot be named on the server",
                path.display()
            );
        };
        let name = format!("{prefix}/{leaf}");
        let ty = e
            .file_type()
            .with_context(|| format!("reading {}", path.display()))?;
        if ty.is_dir() {
            walk(&path, &name, files, skipped)?;
        } else if ty.is_file() {
            files.push((path, name));
        } else {
            tracing::warn!(path = %path.display(), "skipped: not a regular file or a directory");
            *skipped += 1;
        }
    }
    Ok(())
}

/// Offer the transfer `offer` from `source`, send it from wherever the server says it holds
/// bytes up to (again after every session that ends), finish it and wait for the server's
/// verdict. With `deadline` the data ends then (throughput).
fn transfer(
    c: &mut Client,
    source: Source,
    offer: Offering<'_>,
    size: usize,
    stop: &std::sync::atomic::AtomicBool,
    deadline: Option<Instant>,
) -> Result<Sent> {
    let name = offer.name;
    let (id, announced) = match &source {
        Source::File { meta, .. } => (file_id(name, meta), Some(meta.len())),
        Source::Stream(_) => (rand::random(), None),
    };
    let mut out = Outgoing::new(source);
    // The next byte to read and send, and whether the source has ended.
    let (mut offset, mut eof) = (0u64, false);
    // What the server held at the last offer: where the transfer went on from.
    let mut resumed_from;
    let t = Instant::now();
    let bar = indicatif::ProgressBar::new(announced.unwrap_or(0));
    bar.set_style(
        indicatif::ProgressStyle::with_template(if announced.is_some() {
            "{bar:30} {bytes}/{total_bytes} ({bytes_per_sec}, {eta})"
        } else {
            "{spinner} {bytes} sent ({bytes_per_sec})"
        })
        .unwrap_or_else(|_| indicatif::ProgressStyle::default_spinner()),
    );
    let interrupted = || Failure::Interrupted(PARTIAL);
    let (sent, hash, stored) = 'session: loop {
        if app_protocol::is_set(stop) {
            return Err(interrupted().into());
        }
        c.ended = false;
        c.session()?;
        let m = Message::Offer(crate::transfer::Offer {
            id,
            size: announced,
            hash: offer.hash,
            tree: offer.tree,
            name,
        });
        if !c.send(&m.encode())? {
            continue 'session;
        }
        // A single file offered from its start sends its first bytes before the answer, as
        // far as the first round trip can carry them: the server takes them after the offer
        // or drops them with it (a refusal). Not a file in a directory, whose offer may find
        // it held already (nothing should move), nor standard input, which cannot be read
        // again.
        let early = matches!(out.source(), Source::File { .. }) && !offer.tree && offset == 0;
        if early {
            while !eof && offset < EARLY_BYTES {
                match send_next(c, &mut out, &mut offset, size)? {
                    Step::Sent => {}
                    Step::End => eof = true,
                    Step::Ended => continue 'session,
                }
            }
        }
        let have = match c.reply(|r| Answer::to(id, r))? {
            None => continue 'session,
            Some(Answer::Refused(reason)) => return Err(Failure::Refused(reason).into()),
            Some(Answer::Have(have)) => have,
            // The server holds these very bytes under the name already (the offer's hash).
            Some(Answer::Stored(stored)) => {
                let (Some(bytes), Some(hash)) = (announced, offer.hash) else {
                    bail!("the server confirmed {stored:?} without its hash offered");
                };
                bar.finish_and_clear();
                return Ok(Sent {
                    bytes,
                    hash,
                    stored,
                    resumed_from: bytes,
                    elapsed: t.elapsed(),
                    held: true,
                });
            }
        };
        c.started = true;
        resumed_from = have;
        // Go on from `have`.
        let file_len = match out.source() {
            Source::File { meta, .. } => Some(meta.len()),
            Source::Stream(_) => None,
        };
        match file_len {
            Some(len) => {
                if have > len {
                    bail!("the server holds {have} bytes of a {len}-byte file");
                }
                // The bytes sent before the answer, in this session, reach the server after
                // the offer: if they extend what it holds, go on after them. Otherwise go on
                // from `have` (a new process resuming hashes the bytes before it first).
                if !(early && have <= offset) {
                    out.seek(have).context("reading the file")?;
                    offset = have;
                    eof = false;
                }
                c.handed_back.clear();
            }
            None => {
                // Only what the ended session handed back can be sent again.
                let back: Vec<Vec<u8>> = c.handed_back.drain(..).collect();
                let mut at = have;
                for m in back {
                    let Ok(Message::Data { offset: o, bytes }) = Message::parse(&m) else {
                        continue;
                    };
                    let end = o + bytes.len() as u64;
                    if end <= at {
                        continue;
                    }
                    if o > at {
                        break;
                    }
                    let rest = &bytes[(at - o) as usize..];
                    let again = Message::Data {
                        offset: at,
                        bytes: rest,
                    }
                    .encode();
                    if !c.send(&again)? {
                        continue 'session;
                    }
                    at = end;
                }
                if at != offset {
                    bail!(
                        "the server holds {have} bytes and the session handed back up to {at} of \
                         the {offset} read: standard input cannot be read again; send it again"
                    );
                }
            }
        }
        while !eof {
            if app_protocol::is_set(stop) {
                return Err(interrupted().into());
            }
            if deadline.is_some_and(|d| Instant::now() >= d) {
                eof = true;
                break;
            }
            match send_next(c, &mut out, &mut offset, size)? {
                Step::Sent => bar.set_position(offset),
                Step::End => eof = true,
                Step::Ended => continue 'session,
            }
        }
        let hash: [u8; 32] = out.digest();
        let finish = Message::Finish { size: offset, hash };
        if !c.send(&finish.encode())? {
            continue 'session;
        }
        // After the finish only a verdict counts.
        let verdict = c.reply(|r| Answer::to(id, r).filter(|a| !matches!(a, Answer::Have(_))))?;
        match verdict {
            // The session ended first (`Have` is filtered out above).
            None | Some(Answer::Have(_)) => continue 'session,
            Some(Answer::Refused(reason)) => return Err(Failure::Refused(reason).into()),
            Some(Answer::Stored(stored)) => break 'session (offset, hash, stored),
        }
    };
    bar.finish_and_clear();
    Ok(Sent {
        bytes: sent,
        hash,
        stored,
        resumed_from,
        elapsed: t.elapsed(),
        held: false,
    })
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_data_message_is_a_whole_number_of_fragments_when_larger_than_one() {
        use super::whole_fragments;
        assert_eq!(whole_fragments(8192, Some(1389)), 5 * 1389);
        assert_eq!(whole_fragments(8334, Some(1389)), 6 * 1389);
        // One fragment or less, no fragmenting layer, or a nonsensical one: as asked.
        assert_eq!(whole_fragments(1000, Some(1389)), 1000);
        assert_eq!(whole_fragments(8192, None), 8192);
        assert_eq!(whole_fragments(8192, Some(4)), 8192);
    }

    #[test]
    fn the_result_line_becomes_a_json_object() {
        let j = super::json_line("bytes=5 seconds=0.5 blake3=ab12 verified=yes stored=a b");
        let v: serde_json::Value = serde_json::from_str(&j).unwrap();
        assert_eq!(v["bytes"], 5);
        assert_eq!(v["seconds"], 0.5);
        assert_eq!(v["blake3"], "ab12");
        assert_eq!(v["verified"], true);
        assert_eq!(v["stored"], "a");
    }
}
