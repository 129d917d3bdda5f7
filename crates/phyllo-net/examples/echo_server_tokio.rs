//! `echo_server` on tokio ([`phyllo_net::tokio`]): every message a client sends comes back
//! to it; each client is a task.
//!
//! ```text
//! cargo run -p phyllo-net --features tokio --example echo_server_tokio -- \
//!     --key server.key --allow client.key.pub
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

use phyllo::endpoint::SessionEndpoint;
use phyllo_net::keys;
use phyllo_net::tokio::{Connection, ConnectionError, Endpoint};
use std::error::Error;
use std::path::PathBuf;

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), Box<dyn Error>> {
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
    let session = SessionEndpoint::builder(key).allow_all(allowed).build()?;
    let endpoint = Endpoint::bind(listen.parse()?, session)?;
    println!(
        "listening on {} public key {}",
        endpoint.local_addr(),
        endpoint.public_key()
    );

    while let Some(conn) = endpoint.accept().await {
        eprintln!("peer {}: session with {}", conn.peer().0, conn.remote_key());
        tokio::spawn(echo(conn));
    }
    Err(endpoint
        .error()
        .map_or("the endpoint stopped".to_string(), |e| e.to_string())
        .into())
}

/// Send back every message the peer sends, until its connection ends.
async fn echo(mut conn: Connection) {
    let peer = conn.peer().0;
    loop {
        match conn.recv().await {
            Ok(message) => {
                // Waits while the endpoint has no room: the client's messages wait meanwhile.
                if let Err(e) = conn.send(&message).await {
                    eprintln!("peer {peer}: echo dropped: {e}");
                }
            }
            Err(ConnectionError::Ended {
                reason,
                unconfirmed,
            }) => {
                eprintln!(
                    "peer {peer}: ended ({reason:?}), {} echo(es) not confirmed",
                    unconfirmed.len()
                );
                return;
            }
            Err(e) => {
                eprintln!("peer {peer}: {e}");
                return;
            }
        }
    }
}
