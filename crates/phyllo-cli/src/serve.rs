//! `phyllo serve`: many sessions on one UDP socket — echo for pings, sink for data, and with
//! `--out DIR` each stream written to a file; per-session statistics when it stops (Ctrl-C).

use crate::app_protocol::{self, DATA, END, HASH, PING};
use anyhow::{Context, Result};
use phyllo::{Event, PeerId, SessionSendError};
use phyllo_net::{EngineConfig, SessionSocket};
use sha2::{Digest, Sha256};
use std::collections::{HashMap, VecDeque};
use std::io::Write;
use std::ops::ControlFlow;
use std::path::PathBuf;
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
    /// Write each stream received to a file in this directory.
    #[arg(long)]
    pub out: Option<PathBuf>,
    /// Busy-poll the socket (lowest latency, one core busy).
    #[arg(long)]
    pub busy_poll: bool,
    /// Stop after this many streams have ended (0: run until Ctrl-C).
    #[arg(long, default_value_t = 0)]
    pub streams: u64,
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
    /// The most of each 10 ms the listening socket may take on the receive engine, in (0, 1]:
    /// under a flood of strangers' datagrams it waits out the rest of the period (the kernel
    /// drops what no longer fits) while established peers' own sockets are served, and the
    /// CPU it leaves goes to them and to other processes. The default, 5 %, holds 200
    /// handshakes per second with room to spare; raise it when many peers beyond the
    /// dedicated sockets share the listening socket.
    #[arg(long, default_value_t = EngineConfig::default().listen_share)]
    pub listen_share: f64,
}

#[derive(Default)]
struct Stream {
    bytes: u64,
    msgs: u64,
    hash: Sha256,
    file: Option<std::io::BufWriter<std::fs::File>>,
    /// Answers that did not fit yet.
    replies: VecDeque<Vec<u8>>,
    files: u64,
}

/// The server's application: echo pings, sink streams (hashing them, writing them with
/// `--out`), answer each stream's end with its hash.
struct App<'a> {
    args: &'a ServeArgs,
    streams: HashMap<PeerId, Stream>,
    ended_streams: u64,
}

impl App<'_> {
    /// Report session events and serve every peer with deliveries; answers are queued in the
    /// sessions (the next flush sends them).
    fn round(&mut self, node: &mut SessionSocket) -> Result<()> {
        while let Some(e) = node.endpoint_mut().poll_event() {
            match e {
                Event::Established { peer, key, .. } => eprintln!(
                    "session up: peer {}… at {}",
                    &key.to_string()[..12],
                    node.endpoint()
                        .peer_addr(peer)
                        .map_or("?".into(), |a| a.to_string())
                ),
                Event::Ended {
                    peer,
                    reason,
                    unconfirmed,
                } => eprintln!(
                    "session ended: peer {} ({reason:?}), {} messages unconfirmed",
                    peer.0,
                    unconfirmed.len()
                ),
            }
        }
        let readable = node.take_readable();
        for p in readable {
            let st = self.streams.entry(p).or_default();
            loop {
                let now = node.now();
                // Replies first, in order; a full session stops this peer's reading until
                // the next round (its messages wait in the session, nothing is lost).
                while let Some(r) = st.replies.front() {
                    match node.endpoint_mut().send(now, p, r) {
                        Ok(()) => {
                            st.replies.pop_front();
                        }
                        Err(SessionSendError::WouldBlock) => break,
                        Err(e) => {
                            eprintln!("peer {}: reply dropped: {e}", p.0);
                            st.replies.pop_front();
                        }
                    }
                }
                if !st.replies.is_empty() {
                    node.mark_readable(p);
                    break;
                }
                let dir = self.args.out.as_ref();
                let got =
                    node.endpoint_mut()
                        .poll_delivery_with(p, |m| -> Result<Option<Vec<u8>>> {
                            match m.first() {
                                Some(&PING) => Ok(Some(m.to_vec())),
                                Some(&DATA) => {
                                    st.bytes += m.len() as u64 - 1;
                                    st.msgs += 1;
                                    st.hash.update(&m[1..]);
                                    if let Some(dir) = dir {
                                        if st.file.is_none() {
                                            let path =
                                                dir.join(format!("stream-{}-{}", p.0, st.files));
                                            let f = std::fs::File::create(&path).with_context(
                                                || format!("creating {}", path.display()),
                                            )?;
                                            st.file = Some(std::io::BufWriter::new(f));
                                        }
                                        if let Some(f) = st.file.as_mut() {
                                            f.write_all(&m[1..]).context("writing the stream")?;
                                        }
                                    }
                                    Ok(None)
                                }
                                Some(&END) => {
                                    let digest = std::mem::take(&mut st.hash).finalize();
                                    if let Some(mut f) = st.file.take() {
                                        f.flush().context("writing the stream")?;
                                        st.files += 1;
                                    }
                                    let mut r = vec![HASH];
                                    r.extend_from_slice(
                                        app_protocol::hex_digest(&digest).as_bytes(),
                                    );
                                    Ok(Some(r))
                                }
                                _ => Ok(None),
                            }
                        });
                match got {
                    None => break,
                    Some(r) => {
                        if let Some(reply) = r? {
                            if reply[0] == HASH {
                                self.ended_streams += 1;
                                eprintln!(
                                    "stream from peer {} ended: {} bytes in {} messages, sha256 {}",
                                    p.0,
                                    st.bytes,
                                    st.msgs,
                                    String::from_utf8_lossy(&reply[1..])
                                );
                                st.bytes = 0;
                                st.msgs = 0;
                            }
                            st.replies.push_back(reply);
                        }
                    }
                }
            }
        }
        Ok(())
    }

    /// Whether `--streams N` streams have ended.
    fn done(&self) -> bool {
        self.args.streams > 0 && self.ended_streams >= self.args.streams
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
    let mut node = if engine {
        // Established peers get sockets of their own, which the engine serves in turn with
        // the listening one: a flood of junk or handshakes fills only the latter.
        SessionSocket::bind_dedicating(addr, key, allowed, &args.stack, args.accel)?
    } else {
        SessionSocket::bind(addr, key, allowed, &args.stack, args.accel)?
    };
    node.set_busy_poll(args.busy_poll);
    if let Some(dir) = &args.out {
        std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    }
    let stop = app_protocol::interrupted()?;
    if args.print_addr {
        println!("{}", node.local_addr());
    }
    eprintln!(
        "serving on {} (public key {}), stack `{}`{}",
        node.local_addr(),
        node.endpoint().public(),
        args.stack,
        if args.accel { ", accelerated" } else { "" }
    );
    let mut app = App {
        args: &args,
        streams: HashMap::new(),
        ended_streams: 0,
    };
    let started = Instant::now();
    if engine {
        let cfg = EngineConfig {
            quota: args.quota as usize,
            listen_share: args.listen_share,
        };
        node.serve_on_engine(&cfg, &stop, |node| {
            app.round(node)?;
            Ok(if app.done() {
                ControlFlow::Break(())
            } else {
                ControlFlow::Continue(())
            })
        })?;
    } else {
        serve_on_loop(&mut node, &mut app, &stop, beside)?;
    }
    if app.done() {
        // Let the last answers be confirmed before going.
        let until = Instant::now() + Duration::from_secs(1);
        while Instant::now() < until {
            node.pump(Duration::from_millis(10))?;
        }
    }
    eprintln!("stopping after {:.1} s", started.elapsed().as_secs_f64());
    for p in node.endpoint().peers().collect::<Vec<_>>() {
        if let (Some(k), Some(s)) = (node.endpoint().peer_key(p), node.endpoint().peer_stats(p)) {
            eprintln!(
                "{}",
                app_protocol::stats_line(&k, node.endpoint().peer_addr(p), &s)
            );
        }
    }
    eprintln!("{}", app_protocol::drops_line(node.endpoint()));
    Ok(())
}
