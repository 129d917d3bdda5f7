//! `phyllo-lab ilp-ftp`: seed 001's application — Braun & Diot's RPC file transfer over the
//! integrated data path ([`crate::ilp`]), between two threads of one process over UDP
//! loopback.
//!
//! The client requests a file, a number of copies and the largest reply it takes; the server
//! segments the file into replies, each marshalled (XDR), encrypted and checksummed in one
//! ILP packet by the chosen execution ([`Exec`]) and cipher ([`CipherArg`]), and sent as one
//! phyllo message over a stack of its own (`frag(1400):window(64)` by default: the packet
//! itself carries the encryption and the checksum, as in the seed, so the stack needs neither
//! `seal` nor `checksum`). The client verifies and decrypts every packet before it keeps a
//! byte of it, appends the data to its output and hashes each copy; at the end each copy's
//! SHA-256 is compared with the file's.
//!
//! Every message is XDR (RFC 4506, 4-byte big-endian units):
//!
//! ```text
//! request (client -> server): xid, file name (string), copies, max reply bytes
//! reply   (server -> client): REPLY, packet number n (unsigned hyper), ILP packet of
//!                                    Reply { xid, seq: n, data }
//!                             END, copy number, bytes of the copy (unsigned hyper)
//!                             ERROR, message (string)        -- the request was refused
//! ```
//!
//! Keys are fresh random bytes for every run, shared in-process by the two threads; ChaCha20
//! takes the packet number as its nonce, so no (key, nonce) pair is ever used twice.

use crate::ilp::safer::ToyKey;
use crate::ilp::xdr::{self, Reply};
use crate::ilp::{self, ChaCha, Execution, IlpError, Plain};
use crate::ilp_cmd::{CipherArg, Exec};
use anyhow::{anyhow, bail, ensure, Context, Result};
use clap::Args;
use phyllo::conn::{Config, Connection, SendError, MAX_MESSAGE};
use phyllo_cli::app_protocol::hex_digest;
use phyllo_net::driver::UdpDriver;
use phyllo_udp::udp::UdpLink;
use sha2::{Digest, Sha256};
use std::fs::File;
use std::io::{BufWriter, Seek, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

/// The stack under the transfer unless `--stack` says otherwise.
pub const DEFAULT_STACK: &str = "frag(1400):window(64)";
/// The largest reply payload unless `--max-reply` says otherwise, bytes.
pub const DEFAULT_MAX_REPLY: usize = 8192;
/// Bytes in front of a reply's ILP packet: the message's discriminant and the packet number
/// (in the clear: it is ChaCha20's nonce).
pub const REPLY_HEADER: usize = 3 * xdr::UNIT;
/// The most payload bytes one reply can carry: its header and ILP packet must fit in one
/// phyllo message of [`MAX_MESSAGE`] bytes.
pub const MAX_REPLY_LIMIT: usize = MAX_MESSAGE - REPLY_HEADER - ilp::packet_len(0);
/// How long either end waits without any progress before it gives up.
pub const STALL: Duration = Duration::from_secs(30);
/// The longest file name a request may carry, bytes.
const MAX_NAME: usize = 4096;
/// How long a blocking receive waits before the thread looks at the abort flag again.
const SLICE: Duration = Duration::from_millis(20);

/// Server message: an ILP reply packet follows.
const REPLY: u32 = 1;
/// Server message: a copy is complete.
const END: u32 = 2;
/// Server message: the request was refused.
const ERROR: u32 = 3;

/// `phyllo-lab ilp-ftp` options.
#[derive(Args, Debug, Clone)]
pub struct IlpFtpArgs {
    /// The file the client requests (the server opens this local path).
    #[arg(long)]
    pub file: PathBuf,
    /// Copies of the file to transfer.
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..))]
    pub copies: u32,
    /// Largest payload of one reply, bytes (1 to MAX_MESSAGE minus the ILP overhead).
    #[arg(long, default_value_t = DEFAULT_MAX_REPLY)]
    pub max_reply: usize,
    /// Which execution of the data path both ends run.
    #[arg(long, value_enum, default_value = "integrated")]
    pub path: Exec,
    /// Which cipher encrypts the replies.
    #[arg(long, value_enum, default_value = "chacha20")]
    pub cipher: CipherArg,
    /// The phyllo stack under the transfer.
    #[arg(long, default_value = DEFAULT_STACK)]
    pub stack: String,
    /// Write what the client receives (every copy, one after the other) here; without it the
    /// data is only hashed.
    #[arg(long)]
    pub out: Option<PathBuf>,
}

impl IlpFtpArgs {
    /// One copy of `file` with the command line's defaults.
    pub fn new(file: impl Into<PathBuf>) -> IlpFtpArgs {
        IlpFtpArgs {
            file: file.into(),
            copies: 1,
            max_reply: DEFAULT_MAX_REPLY,
            path: Exec::Integrated,
            cipher: CipherArg::Chacha20,
            stack: DEFAULT_STACK.to_string(),
            out: None,
        }
    }
}

/// What a transfer measured and what the client reassembled.
#[derive(Clone, Debug)]
pub struct Transfer {
    /// Payload bytes the client received, every copy.
    pub bytes: u64,
    /// From the request to the last copy's end, seconds.
    pub seconds: f64,
    /// `bytes` per second, in millions.
    pub mbytes_per_s: f64,
    /// ILP reply packets received.
    pub packets: u64,
    /// SHA-256 of each copy the client reassembled.
    pub copies_sha256: Vec<[u8; 32]>,
    /// SHA-256 of the file, read after the transfer.
    pub file_sha256: [u8; 32],
}

impl Transfer {
    /// Every copy is the file.
    pub fn verified(&self) -> bool {
        !self.copies_sha256.is_empty() && self.copies_sha256.iter().all(|h| *h == self.file_sha256)
    }

    /// The summary line: `bytes=… seconds=… mbytes_per_s=… packets=… sha256=… verified=…`
    /// (`sha256` is the copies' hash, or theirs comma-separated when they differ).
    pub fn line(&self) -> String {
        let mut hashes: Vec<String> = Vec::new();
        for h in &self.copies_sha256 {
            let h = hex_digest(h);
            if !hashes.contains(&h) {
                hashes.push(h);
            }
        }
        format!(
            "bytes={} seconds={:.3} mbytes_per_s={:.1} packets={} sha256={} verified={}",
            self.bytes,
            self.seconds,
            self.mbytes_per_s,
            self.packets,
            hashes.join(","),
            if self.verified() { "yes" } else { "no" }
        )
    }
}

/// Run `phyllo-lab ilp-ftp`: print the summary line; an error unless every copy is the file.
pub fn run(args: IlpFtpArgs) -> Result<()> {
    let t = transfer(&args)?;
    println!("{}", t.line());
    if !t.verified() {
        bail!(
            "a received copy differs from {} (sha256 {})",
            args.file.display(),
            hex_digest(&t.file_sha256)
        );
    }
    Ok(())
}

/// Check a `--max-reply`.
pub fn check_max_reply(max_reply: usize) -> Result<()> {
    ensure!(max_reply > 0, "--max-reply must be at least 1 byte");
    ensure!(
        max_reply <= MAX_REPLY_LIMIT,
        "--max-reply {max_reply} is more than {MAX_REPLY_LIMIT} bytes, the most one reply can \
         carry in a phyllo message of at most {MAX_MESSAGE} bytes ({} bytes of headers)",
        MAX_MESSAGE - MAX_REPLY_LIMIT
    );
    Ok(())
}

/// Transfer `args.file` (`args.copies` times) from a server thread to a client thread over a
/// loopback pair of UDP sockets, each end with its own [`UdpDriver`] on `args.stack`.
pub fn transfer(args: &IlpFtpArgs) -> Result<Transfer> {
    check_max_reply(args.max_reply)?;
    ensure!(args.copies > 0, "--copies must be at least 1");
    let keys = Keys::fresh(args.cipher)?;
    let (client_link, server_link) =
        UdpLink::loopback_pair().context("binding UDP sockets on 127.0.0.1")?;
    // A stream: room in the socket buffers on the data's way (best effort).
    server_link.set_send_buffer_size(4 << 20).ok();
    client_link.set_recv_buffer_size(4 << 20).ok();
    // Config::pair keys a `seal` layer should the stack have one.
    let (client_cfg, server_cfg) = Config::pair(false).context("configuring the connections")?;
    let conn = |cfg| {
        Connection::from_spec(&args.stack, cfg)
            .with_context(|| format!("building the stack '{}'", args.stack))
    };
    let epoch = Instant::now();
    let client_end = UdpDriver::new(conn(client_cfg)?, client_link, epoch);
    let server_end = UdpDriver::new(conn(server_cfg)?, server_link, epoch);
    let out = match &args.out {
        Some(p) => Some(BufWriter::with_capacity(
            1 << 20,
            File::create(p).with_context(|| format!("creating {}", p.display()))?,
        )),
        None => None,
    };

    let exec = args.path.execution();
    let abort = Arc::new(AtomicBool::new(false));
    let server_done = Arc::new(AtomicBool::new(false));
    let server = {
        let (keys, abort, done) = (keys.clone(), abort.clone(), server_done.clone());
        thread::Builder::new()
            .name("ilp-ftp server".into())
            .spawn(move || {
                let mut d = server_end;
                let r = serve(&mut d, exec, &keys, &abort);
                if r.is_err() {
                    abort.store(true, Ordering::Relaxed);
                }
                done.store(true, Ordering::Relaxed);
                r
            })
            .context("starting the server thread")?
    };

    let mut xid = [0u8; 4];
    getrandom::fill(&mut xid).map_err(|e| anyhow!("no randomness for the xid: {e}"))?;
    let mut client = Client {
        d: client_end,
        exec,
        keys,
        xid: u32::from_ne_bytes(xid),
        copies: args.copies,
        max_reply: args.max_reply,
        out,
        data: Vec::new(),
        packets: 0,
        copy: 0,
        copy_bytes: 0,
        bytes: 0,
        hash: Sha256::new(),
        hashes: Vec::new(),
    };
    let t0 = Instant::now();
    let client_result = client.run(&args.file, &abort);
    let seconds = t0.elapsed().as_secs_f64();
    if client_result.is_err() {
        abort.store(true, Ordering::Relaxed);
    } else {
        // Stay until the server has its acknowledgements (or gives up).
        client.linger(&server_done);
    }
    let server_result = server
        .join()
        .map_err(|_| anyhow!("the server thread panicked"))?;
    // The server's failure is the cause of the client's (which only saw it stop).
    server_result.context("server")?;
    if let (Err(e), Some(p)) = (&client_result, &args.out) {
        bail!(
            "{e:#} ({} holds only the {} bytes verified before the error)",
            p.display(),
            client.bytes
        );
    }
    client_result?;
    if let Some(mut w) = client.out.take() {
        w.flush()
            .with_context(|| format!("writing {}", display(&args.out)))?;
    }
    let file_sha256 = sha256_file(&args.file)?;
    Ok(Transfer {
        bytes: client.bytes,
        seconds,
        mbytes_per_s: client.bytes as f64 / seconds.max(1e-9) / 1e6,
        packets: client.packets,
        copies_sha256: client.hashes,
        file_sha256,
    })
}

fn display(p: &Option<PathBuf>) -> String {
    p.as_deref()
        .map_or_else(String::new, |p| p.display().to_string())
}

/// SHA-256 of the file at `path`.
fn sha256_file(path: &Path) -> Result<[u8; 32]> {
    let mut f = File::open(path).with_context(|| format!("opening {}", path.display()))?;
    let mut h = Sha256::new();
    std::io::copy(&mut f, &mut h).with_context(|| format!("reading {}", path.display()))?;
    Ok(h.finalize().into())
}

/// The run's key, shared by both ends.
#[derive(Clone)]
enum Keys {
    Toy(ToyKey),
    ChaCha([u8; 32]),
    Plain,
}

impl Keys {
    /// Fresh random keys for `cipher`.
    fn fresh(cipher: CipherArg) -> Result<Keys> {
        let mut k = [0u8; 32];
        getrandom::fill(&mut k).map_err(|e| anyhow!("no randomness for the key: {e}"))?;
        Ok(match cipher {
            CipherArg::Toy => {
                let mut t = [0u8; 8];
                t.copy_from_slice(&k[..8]);
                Keys::Toy(ToyKey(t))
            }
            CipherArg::Chacha20 => Keys::ChaCha(k),
            CipherArg::Plain => Keys::Plain,
        })
    }

    /// ChaCha20's nonce for packet `packet`.
    fn nonce(packet: u64) -> [u8; 12] {
        let mut n = [0u8; 12];
        n[4..].copy_from_slice(&packet.to_be_bytes());
        n
    }

    /// The ILP packet of `r`, packet number `packet`, into `out`.
    fn send(&self, exec: Execution, packet: u64, r: &Reply<'_>, out: &mut Vec<u8>) {
        match self {
            Keys::Toy(k) => ilp::send(exec, &mut k.clone(), r, out),
            Keys::ChaCha(k) => ilp::send(exec, &mut ChaCha::new(k, &Keys::nonce(packet)), r, out),
            Keys::Plain => ilp::send(exec, &mut Plain, r, out),
        }
    }

    /// Verify and decrypt the ILP packet `p`, packet number `packet`, into `data`.
    fn receive(
        &self,
        exec: Execution,
        packet: u64,
        p: &[u8],
        data: &mut Vec<u8>,
    ) -> Result<(u32, u32), IlpError> {
        match self {
            Keys::Toy(k) => ilp::receive(exec, &mut k.clone(), p, data),
            Keys::ChaCha(k) => {
                ilp::receive(exec, &mut ChaCha::new(k, &Keys::nonce(packet)), p, data)
            }
            Keys::Plain => ilp::receive(exec, &mut Plain, p, data),
        }
    }
}

/// A file transfer request.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Request {
    xid: u32,
    name: Vec<u8>,
    copies: u32,
    max_reply: u32,
}

impl Request {
    fn marshal(&self) -> Vec<u8> {
        let mut m = Vec::new();
        xdr::put_u32(&mut m, self.xid);
        xdr::put_opaque(&mut m, &self.name);
        xdr::put_u32(&mut m, self.copies);
        xdr::put_u32(&mut m, self.max_reply);
        m
    }

    fn unmarshal(m: &[u8]) -> Result<Request> {
        let mut r = xdr::Reader(m);
        let req = Request {
            xid: r.u32()?,
            name: r.opaque(MAX_NAME)?.to_vec(),
            copies: r.u32()?,
            max_reply: r.u32()?,
        };
        r.end()?;
        Ok(req)
    }
}

/// Fails, saying `what` did not happen, once [`STALL`] has passed since `since`.
fn within_stall(since: Instant, what: &str) -> Result<()> {
    ensure!(since.elapsed() < STALL, "{what} {} s", STALL.as_secs());
    Ok(())
}

/// Send one message, polling while the stack has no room (until `abort`, or [`STALL`]).
fn send_message(d: &mut UdpDriver, msg: &[u8], abort: &AtomicBool) -> Result<bool> {
    let t = Instant::now();
    loop {
        if abort.load(Ordering::Relaxed) {
            return Ok(false);
        }
        if d.conn.can_send() {
            match d.send(msg) {
                Ok(()) => return Ok(true),
                Err(SendError::WouldBlock) => {}
                Err(e) => return Err(e.into()),
            }
        }
        within_stall(t, "the stack took no message for")?;
        if d.poll()? == 0 {
            thread::yield_now();
        }
    }
}

/// The server: wait for a request, answer it, wait for the acknowledgements. A request it
/// cannot serve gets an ERROR reply (the server itself does not fail).
fn serve(d: &mut UdpDriver, exec: Execution, keys: &Keys, abort: &AtomicBool) -> Result<()> {
    let t = Instant::now();
    let request = loop {
        if abort.load(Ordering::Relaxed) {
            return Ok(());
        }
        within_stall(t, "no request within")?;
        if let Some(m) = d.recv_blocking(Instant::now() + SLICE)? {
            let r = Request::unmarshal(m.data()).context("a malformed request");
            d.conn.recycle(m);
            break r;
        }
    };
    let mut msg = Vec::new();
    match request.and_then(|r| answer(d, exec, keys, abort, &r, &mut msg)) {
        Ok(()) => {}
        Err(e) => {
            msg.clear();
            xdr::put_u32(&mut msg, ERROR);
            xdr::put_opaque(&mut msg, format!("{e:#}").as_bytes());
            if !send_message(d, &msg, abort)? {
                return Ok(());
            }
        }
    }
    // Until everything sent is acknowledged (or the client is gone).
    let t = Instant::now();
    while !d.conn.all_acknowledged() && !abort.load(Ordering::Relaxed) {
        within_stall(t, "the client acknowledged nothing for")?;
        if d.poll()? == 0 {
            thread::yield_now();
        }
    }
    Ok(())
}

/// Stream the copies `r` asks for; an error (before the first reply: the file cannot be
/// opened, the request is out of range) becomes the ERROR reply.
fn answer(
    d: &mut UdpDriver,
    exec: Execution,
    keys: &Keys,
    abort: &AtomicBool,
    r: &Request,
    msg: &mut Vec<u8>,
) -> Result<()> {
    use std::os::unix::ffi::OsStrExt;
    let path = Path::new(std::ffi::OsStr::from_bytes(&r.name));
    ensure!(r.copies > 0, "a request for no copies");
    let max_reply = r.max_reply as usize;
    check_max_reply(max_reply).context("the request's largest reply")?;
    let mut file = File::open(path).with_context(|| format!("cannot open {}", path.display()))?;
    let mut buf = vec![0u8; max_reply];
    let mut packet = Vec::new();
    let mut number = 0u64;
    for copy in 0..r.copies {
        file.rewind()
            .with_context(|| format!("rewinding {}", path.display()))?;
        let mut bytes = 0u64;
        loop {
            let n = phyllo_cli::app_protocol::read_full(&mut file, &mut buf)
                .with_context(|| format!("reading {}", path.display()))?;
            if n == 0 {
                break;
            }
            let seq = u32::try_from(number).map_err(|_| anyhow!("more than 2^32 replies"))?;
            let reply = Reply {
                xid: r.xid,
                seq,
                data: &buf[..n],
            };
            keys.send(exec, number, &reply, &mut packet);
            // The header and the packet straight into a pooled buffer: the one copy the stack
            // needs.
            let mut m = d.conn.alloc();
            m.extend_from_slice(&REPLY.to_be_bytes());
            m.extend_from_slice(&number.to_be_bytes());
            m.extend_from_slice(&packet);
            if !send_msg(d, m, abort)? {
                return Ok(());
            }
            number += 1;
            bytes += n as u64;
            // Take in the acknowledgements as they come.
            d.poll()?;
        }
        msg.clear();
        xdr::put_u32(msg, END);
        xdr::put_u32(msg, copy);
        xdr::put_u32(msg, (bytes >> 32) as u32);
        xdr::put_u32(msg, bytes as u32);
        if !send_message(d, msg, abort)? {
            return Ok(());
        }
    }
    Ok(())
}

/// [`send_message`] for a message in a pooled buffer.
fn send_msg(d: &mut UdpDriver, m: phyllo::msg::Msg, abort: &AtomicBool) -> Result<bool> {
    let t = Instant::now();
    while !d.conn.can_send() {
        if abort.load(Ordering::Relaxed) {
            d.conn.recycle(m);
            return Ok(false);
        }
        within_stall(t, "the stack took no message for")?;
        if d.poll()? == 0 {
            thread::yield_now();
        }
    }
    d.send_msg(m)?;
    Ok(true)
}

/// The client's end and what it has received.
struct Client {
    d: UdpDriver,
    exec: Execution,
    keys: Keys,
    xid: u32,
    copies: u32,
    max_reply: usize,
    out: Option<BufWriter<File>>,
    /// The current packet's data.
    data: Vec<u8>,
    /// Packets received (the next one's number).
    packets: u64,
    /// The copy being received.
    copy: u32,
    copy_bytes: u64,
    bytes: u64,
    hash: Sha256,
    hashes: Vec<[u8; 32]>,
}

impl Client {
    /// Request `file` and receive every copy.
    fn run(&mut self, file: &Path, abort: &AtomicBool) -> Result<()> {
        use std::os::unix::ffi::OsStrExt;
        let name = file.as_os_str().as_bytes();
        ensure!(
            name.len() <= MAX_NAME,
            "a file name longer than {MAX_NAME} bytes"
        );
        let request = Request {
            xid: self.xid,
            name: name.to_vec(),
            copies: self.copies,
            max_reply: u32::try_from(self.max_reply)?,
        };
        if !send_message(&mut self.d, &request.marshal(), abort)? {
            bail!("the server stopped");
        }
        let mut last = Instant::now();
        while self.hashes.len() < self.copies as usize {
            if abort.load(Ordering::Relaxed) {
                bail!("the server stopped");
            }
            match self.d.recv_blocking(Instant::now() + SLICE)? {
                Some(m) => {
                    let r = self.handle(m.data()).context("a message from the server");
                    self.d.conn.recycle(m);
                    r?;
                    last = Instant::now();
                }
                None => {
                    // A datagram longer than the driver's receive buffer is dropped: the
                    // stack's fragments are too large, and waiting will not help.
                    let truncated = self.d.link().stats().truncated;
                    ensure!(
                        truncated == 0,
                        "{truncated} datagrams longer than the receive buffer were dropped: \
                         the stack needs a smaller frag(N)"
                    );
                    within_stall(last, "nothing from the server for")?;
                }
            }
        }
        Ok(())
    }

    /// One message from the server.
    fn handle(&mut self, m: &[u8]) -> Result<()> {
        let mut r = xdr::Reader(m);
        match r.u32()? {
            REPLY => {
                let number = r.u64()?;
                self.reply(number, r.rest())
            }
            END => {
                let (copy, bytes) = (r.u32()?, r.u64()?);
                r.end()?;
                ensure!(
                    copy == self.copy,
                    "the end of copy {} while receiving copy {}",
                    copy + 1,
                    self.copy + 1
                );
                ensure!(
                    bytes == self.copy_bytes,
                    "copy {}: the server sent {bytes} bytes, {} arrived",
                    copy + 1,
                    self.copy_bytes
                );
                let hash = std::mem::take(&mut self.hash);
                self.hashes.push(hash.finalize().into());
                self.copy += 1;
                self.copy_bytes = 0;
                Ok(())
            }
            ERROR => {
                let text = r.opaque(usize::MAX)?;
                bail!(
                    "the server refused the request: {}",
                    String::from_utf8_lossy(text)
                )
            }
            other => bail!("a server message of unknown kind {other}"),
        }
    }

    /// ILP reply packet `number`: verified and decrypted before a byte of it is kept.
    fn reply(&mut self, number: u64, p: &[u8]) -> Result<()> {
        ensure!(
            number == self.packets,
            "reply packet {number} arrived when {} was expected: replies were lost or \
             reordered (the stack needs a reliable layer such as window)",
            self.packets
        );
        let (xid, seq) = self
            .keys
            .receive(self.exec, number, p, &mut self.data)
            .with_context(|| {
                format!(
                    "reply packet {number} (copy {}, {} bytes): refused",
                    self.copy + 1,
                    p.len()
                )
            })?;
        ensure!(
            xid == self.xid,
            "reply packet {number}: transaction {xid:#x}, not {:#x}",
            self.xid
        );
        ensure!(
            u64::from(seq) == number,
            "reply packet {number}: sequence number {seq}"
        );
        ensure!(
            self.data.len() <= self.max_reply,
            "reply packet {number}: {} bytes, more than the {} asked for",
            self.data.len(),
            self.max_reply
        );
        self.hash.update(&self.data);
        if let Some(w) = &mut self.out {
            w.write_all(&self.data).context("writing the output")?;
        }
        self.packets += 1;
        self.copy_bytes += self.data.len() as u64;
        self.bytes += self.data.len() as u64;
        Ok(())
    }

    /// Keep the connection running (acknowledgements) until the server is done.
    fn linger(&mut self, server_done: &AtomicBool) {
        let t = Instant::now();
        while !server_done.load(Ordering::Relaxed) && t.elapsed() < STALL {
            match self.d.recv_blocking(Instant::now() + SLICE) {
                Ok(Some(m)) => self.d.conn.recycle(m),
                Ok(None) => {}
                Err(_) => break,
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_largest_reply_fits_in_one_message() {
        assert_eq!(REPLY_HEADER + ilp::packet_len(MAX_REPLY_LIMIT), MAX_MESSAGE);
        assert!(REPLY_HEADER + ilp::packet_len(MAX_REPLY_LIMIT + 1) > MAX_MESSAGE);
        assert!(check_max_reply(0).is_err());
        assert!(check_max_reply(1).is_ok());
        assert!(check_max_reply(MAX_REPLY_LIMIT).is_ok());
        assert!(check_max_reply(MAX_REPLY_LIMIT + 1).is_err());
    }

    #[test]
    fn requests_round_trip_and_bad_ones_are_refused() {
        let r = Request {
            xid: 7,
            name: b"some/file".to_vec(),
            copies: 3,
            max_reply: 8192,
        };
        let m = r.marshal();
        assert_eq!(m.len(), 4 + 4 + 12 + 4 + 4);
        assert_eq!(Request::unmarshal(&m).ok(), Some(r));
        for cut in 0..m.len() {
            assert!(Request::unmarshal(&m[..cut]).is_err(), "cut {cut}");
        }
        let mut long = m.clone();
        long.push(0);
        assert!(Request::unmarshal(&long).is_err());
        let mut huge = m.clone();
        huge[4..8].copy_from_slice(&u32::MAX.to_be_bytes());
        assert!(Request::unmarshal(&huge).is_err());
    }

    #[test]
    fn a_small_file_arrives_by_every_path_and_cipher() {
        let path = std::env::temp_dir().join(format!("phyllo-ilp-ftp-unit-{}", std::process::id()));
        let data: Vec<u8> = (0..100_003u32).map(|i| (i * 7 + i / 251) as u8).collect();
        std::fs::write(&path, &data).unwrap();
        for exec in [Exec::Layered, Exec::Integrated, Exec::Blocked] {
            for cipher in [CipherArg::Toy, CipherArg::Chacha20, CipherArg::Plain] {
                let mut a = IlpFtpArgs::new(&path);
                a.path = exec;
                a.cipher = cipher;
                a.max_reply = 3000;
                a.copies = 2;
                let t = transfer(&a).unwrap();
                assert!(t.verified(), "{exec:?} {cipher:?}: {}", t.line());
                assert_eq!(t.bytes, 2 * data.len() as u64);
                assert_eq!(t.packets, 2 * data.len().div_ceil(3000) as u64);
            }
        }
        std::fs::remove_file(&path).unwrap();
    }

    #[test]
    fn a_missing_file_is_refused_by_the_server() {
        let a = IlpFtpArgs::new("/nonexistent/phyllo-ilp-ftp");
        let e = format!("{:#}", transfer(&a).unwrap_err());
        assert!(e.contains("the server refused the request"), "{e}");
        assert!(e.contains("/nonexistent/phyllo-ilp-ftp"), "{e}");
    }
}
