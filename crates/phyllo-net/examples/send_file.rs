//! A file sender: sends one file over a phyllo session to `receive_file` and exits 0 once
//! the receiver has confirmed that it holds the whole file.
//!
//! ```text
//! cargo run -p phyllo-net --example send_file -- 127.0.0.1:7701 big.iso \
//!     --server-key receiver.key.pub --key sender.key
//! ```
//!
//! The protocol is this example's own: messages of `D` and up to 8 KiB of the file, then `E`
//! and the file's length (8 bytes, little-endian); the receiver answers `K` and the length
//! once the file is written. The session delivers in order and exactly once, so nothing more
//! is needed; if the session ends first, the endpoint hands back what it did not confirm
//! and this program exits 1 (the receiver keeps no partial file).

use phyllo::{Event, SessionSendError};
use phyllo_net::{keys, SessionSocket, DEFAULT_STACK};
use std::error::Error;
use std::io::Read;
use std::path::PathBuf;
use std::time::{Duration, Instant};

/// How much of the file goes into one message.
const CHUNK: usize = 8 * 1024;
/// How long the receiver may stay silent.
const TIMEOUT: Duration = Duration::from_secs(10);

fn main() -> Result<(), Box<dyn Error>> {
    let mut args = std::env::args().skip(1);
    let usage = "usage: send_file ADDR FILE --server-key KEY --key FILE";
    let server: std::net::SocketAddr = args.next().ok_or(usage)?.parse()?;
    let path = PathBuf::from(args.next().ok_or(usage)?);
    let (mut server_key, mut key_file) = (None, None);
    while let Some(flag) = args.next() {
        let value = args.next().ok_or(format!("{flag} needs a value"))?;
        match flag.as_str() {
            "--server-key" => server_key = Some(keys::read_public(&value)?),
            "--key" => key_file = Some(PathBuf::from(value)),
            _ => return Err(format!("unknown option {flag}").into()),
        }
    }
    let server_key = server_key.ok_or("--server-key KEY is required")?;
    let key = keys::read_or_generate(&key_file.ok_or("--key FILE is required")?)?;
    let mut file = std::fs::File::open(&path)?;

    let mut socket = SessionSocket::bind("0.0.0.0:0".parse()?, key, vec![], DEFAULT_STACK, false)?;
    let now = socket.now();
    let peer = socket.endpoint_mut().connect(now, server_key, server);

    // Send the file chunk by chunk; when the session is full, pump until it has room (the
    // endpoint queues messages during the handshake, so sending starts at once).
    let started = Instant::now();
    let mut sent: u64 = 0;
    let mut message = Vec::with_capacity(1 + CHUNK);
    loop {
        message.clear();
        message.push(b'D');
        let n = (&mut file).take(CHUNK as u64).read_to_end(&mut message)?;
        if n == 0 {
            break;
        }
        send(&mut socket, peer, &message)?;
        sent += n as u64;
    }
    let mut end = vec![b'E'];
    end.extend_from_slice(&sent.to_le_bytes());
    send(&mut socket, peer, &end)?;

    // Wait for the receiver's confirmation.
    let mut last_progress = Instant::now();
    loop {
        if let Some(reply) = socket
            .endpoint_mut()
            .poll_delivery_with(peer, |m| m.to_vec())
        {
            if reply.first() == Some(&b'K') && reply[1..] == sent.to_le_bytes() {
                break;
            }
            return Err(format!("the receiver answered {reply:?}").into());
        }
        check_events(&mut socket)?;
        if last_progress.elapsed() > TIMEOUT {
            return Err("no confirmation from the receiver".into());
        }
        if socket.pump(Duration::from_millis(20))? > 0 {
            last_progress = Instant::now();
        }
    }
    let secs = started.elapsed().as_secs_f64();
    println!(
        "sent {} ({sent} bytes) in {secs:.2} s, {:.1} MB/s",
        path.display(),
        sent as f64 / secs / 1e6
    );
    Ok(())
}

/// Queue one message, pumping the socket while the session has no room for it.
fn send(
    socket: &mut SessionSocket,
    peer: phyllo::PeerId,
    message: &[u8],
) -> Result<(), Box<dyn Error>> {
    let mut waiting_since = Instant::now();
    loop {
        let now = socket.now();
        match socket.endpoint_mut().send(now, peer, message) {
            Ok(()) => return Ok(()),
            Err(SessionSendError::WouldBlock) => {}
            Err(e) => return Err(e.into()),
        }
        check_events(socket)?;
        if waiting_since.elapsed() > TIMEOUT {
            return Err("the receiver stopped taking data".into());
        }
        if socket.pump(Duration::from_millis(20))? > 0 {
            waiting_since = Instant::now();
        }
    }
}

/// An ended session means messages the receiver may not have: give up.
fn check_events(socket: &mut SessionSocket) -> Result<(), Box<dyn Error>> {
    while let Some(event) = socket.endpoint_mut().poll_event() {
        if let Event::Ended {
            reason,
            unconfirmed,
            ..
        } = event
        {
            return Err(format!(
                "the session ended ({reason:?}) with {} messages unconfirmed",
                unconfirmed.len()
            )
            .into());
        }
    }
    Ok(())
}
