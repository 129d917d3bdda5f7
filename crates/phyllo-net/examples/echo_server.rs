//! An echo server on phyllo sessions: every message a client sends comes back to it.
//!
//! ```text
//! cargo run -p phyllo-net --example echo_server -- --key server.key --allow client.key.pub
//! ```
//!
//! Keys are files of hexadecimal digits (see `phyllo_net::keys`):
//!
//! - `--key FILE`: this server's private key. If `FILE` does not exist, a new pair is written
//!   as `FILE` and `FILE.pub` (give `FILE.pub` to the clients).
//! - `--allow KEY`: a client's public key, a `.pub` file or 64 hexadecimal digits; repeat it
//!   for more clients, or use `--allow-file FILE` (one key per line, `#` comments).
//! - `--listen ADDR`: where to listen (default `127.0.0.1:7700`; port 0 picks a free one).
//!
//! The first line on standard output is `listening on ADDR public key KEY`; then it serves
//! until killed.

use phyllo_net::{keys, SessionSocket, DEFAULT_STACK};
use std::error::Error;
use std::path::PathBuf;
use std::time::Duration;

/// The largest echo the server makes room for before taking a message.
const MAX_MESSAGE: usize = 64 * 1024;

fn main() -> Result<(), Box<dyn Error>> {
    let mut listen = "127.0.0.1:7700".to_string();
    let mut key_file = None;
    let mut allowed = Vec::new();
    let mut args = std::env::args().skip(1);
    while let Some(flag) = args.next() {
        let value = args.next().ok_or(format!("{flag} needs a value"))?;
        match flag.as_str() {
            "--listen" => listen = value,
            "--key" => key_file = Some(PathBuf::from(value)),
            "--allow" => allowed.push(keys::read_public(&value)?),
            "--allow-file" => allowed.extend(keys::read_allow_file(value.as_ref())?),
            _ => return Err(format!("unknown option {flag}").into()),
        }
    }
    let key_file = key_file.ok_or("--key FILE is required")?;
    let key = keys::read_or_generate(&key_file)?;

    // Only the allowed clients' handshakes are answered.
    let mut socket = SessionSocket::bind(listen.parse()?, key, allowed, DEFAULT_STACK, false)?;
    let public = socket.endpoint().public();
    println!("listening on {} public key {public}", socket.local_addr());

    loop {
        // Send what is queued, wait up to 50 ms for datagrams, run the timers.
        socket.pump(Duration::from_millis(50))?;
        while let Some(event) = socket.endpoint_mut().poll_event() {
            eprintln!("{event:?}");
        }
        for peer in socket.take_readable() {
            let now = socket.now();
            let endpoint = socket.endpoint_mut();
            let mut full = false;
            // Take a message only when its echo fits: the rest wait in the endpoint.
            while !full {
                if !endpoint.can_send(peer, MAX_MESSAGE) {
                    full = true;
                    break;
                }
                let Some(message) = endpoint.poll_delivery_with(peer, |m| m.to_vec()) else {
                    break;
                };
                if let Err(e) = endpoint.send(now, peer, &message) {
                    eprintln!("echo to peer {} dropped: {e}", peer.0);
                }
            }
            if full {
                // Come back to this peer after the next pump has made room.
                socket.mark_readable(peer);
            }
        }
    }
}
