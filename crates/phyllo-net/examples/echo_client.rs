//! An echo client: connects to `echo_server` (or to `phyllo serve`, which echoes every
//! message that starts with `p`), sends messages one at a time and checks that each comes back
//! unchanged.
//!
//! ```text
//! cargo run -p phyllo-net --example echo_client -- 127.0.0.1:7700 \
//!     --server-key server.key.pub --key client.key --count 10
//! ```
//!
//! - `ADDR`: the server's address.
//! - `--server-key KEY`: the server's public key, a `.pub` file or 64 hexadecimal digits.
//! - `--key FILE`: this client's private key (if `FILE` does not exist, a new pair is written
//!   as `FILE` and `FILE.pub`; the server must allow `FILE.pub`).
//! - `--count N`: how many messages (default 10).
//!
//! It prints one line and exits 0 when every echo came back; it exits 1 on a wrong echo, or
//! when the session or an echo takes longer than 5 seconds.

use phyllo_net::{keys, SessionSocket, DEFAULT_STACK};
use std::error::Error;
use std::path::PathBuf;
use std::time::{Duration, Instant};

/// How long the session, and then each echo, may take.
const TIMEOUT: Duration = Duration::from_secs(5);

fn main() -> Result<(), Box<dyn Error>> {
    let mut args = std::env::args().skip(1);
    let server: std::net::SocketAddr = args.next().ok_or("usage: echo_client ADDR ...")?.parse()?;
    let (mut server_key, mut key_file, mut count) = (None, None, 10u32);
    while let Some(flag) = args.next() {
        let value = args.next().ok_or(format!("{flag} needs a value"))?;
        match flag.as_str() {
            "--server-key" => server_key = Some(keys::read_public(&value)?),
            "--key" => key_file = Some(PathBuf::from(value)),
            "--count" => count = value.parse()?,
            _ => return Err(format!("unknown option {flag}").into()),
        }
    }
    let server_key = server_key.ok_or("--server-key KEY is required")?;
    let key_file = key_file.ok_or("--key FILE is required")?;
    let key = keys::read_or_generate(&key_file)?;

    // A client allows no one: it only connects, from any free port.
    let any = if server.is_ipv4() {
        "0.0.0.0:0"
    } else {
        "[::]:0"
    };
    let mut socket = SessionSocket::bind(any.parse()?, key, vec![], DEFAULT_STACK, false)?;
    let now = socket.now();
    let peer = socket.endpoint_mut().connect(now, server_key, server);
    let started = Instant::now();
    while !socket.endpoint().is_established(peer) {
        if started.elapsed() > TIMEOUT {
            return Err(format!("no session with {server} (is this key allowed?)").into());
        }
        socket.pump(Duration::from_millis(20))?;
    }

    for i in 0..count {
        // "ping …": `phyllo serve` echoes messages that start with `p` too.
        let message = format!("ping {i}").into_bytes();
        let now = socket.now();
        socket.endpoint_mut().send(now, peer, &message)?;
        let deadline = Instant::now() + TIMEOUT;
        let echo = loop {
            if let Some(echo) = socket
                .endpoint_mut()
                .poll_delivery_with(peer, |m| m.to_vec())
            {
                break echo;
            }
            if Instant::now() > deadline {
                return Err(format!("no echo of message {i} after {TIMEOUT:?}").into());
            }
            socket.pump(Duration::from_millis(5))?;
        };
        if echo != message {
            return Err(format!("message {i}: the echo differs: {echo:?}").into());
        }
    }
    let elapsed = started.elapsed().as_secs_f64() * 1e3;
    println!("{count} echoes from {server} in {elapsed:.1} ms");
    Ok(())
}
