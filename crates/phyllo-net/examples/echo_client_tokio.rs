//! `echo_client` on tokio ([`phyllo_net::tokio`]): connects to an echo server (`echo_server`,
//! `echo_server_tokio`, or `phyllo serve`, which echoes every message that starts with `p`),
//! sends messages one at a time and checks that each comes back unchanged.
//!
//! ```text
//! cargo run -p phyllo-net --features tokio --example echo_client_tokio -- 127.0.0.1:7700 \
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

use phyllo::endpoint::SessionEndpoint;
use phyllo_net::keys;
use phyllo_net::tokio::{Config, ConnectError, Endpoint};
use std::error::Error;
use std::path::PathBuf;
use std::time::Duration;
use tokio::time::{timeout, Instant};

/// How long the session, and then each echo, may take.
const TIMEOUT: Duration = Duration::from_secs(5);

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), Box<dyn Error>> {
    let mut args = std::env::args().skip(1);
    let server: std::net::SocketAddr = args
        .next()
        .ok_or("usage: echo_client_tokio ADDR ...")?
        .parse()?;
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
    let config = Config {
        connect_timeout: TIMEOUT,
        ..Config::default()
    };
    let session = SessionEndpoint::builder(key).build()?;
    let endpoint = Endpoint::bind_with(any.parse()?, session, config)?;
    let started = Instant::now();
    let mut conn = match endpoint.connect(server_key, server).await {
        Ok(conn) => conn,
        Err(e @ (ConnectError::TimedOut { .. } | ConnectError::Failed { .. })) => {
            return Err(format!("{e} (is this key allowed?)").into())
        }
        Err(e) => return Err(e.into()),
    };

    for i in 0..count {
        // "ping …": `phyllo serve` echoes messages that start with `p` too.
        let message = format!("ping {i}").into_bytes();
        conn.send(&message).await?;
        let echo = timeout(TIMEOUT, conn.recv())
            .await
            .map_err(|_| format!("no echo of message {i} after {TIMEOUT:?}"))??;
        if echo != message {
            return Err(format!("message {i}: the echo differs: {echo:?}").into());
        }
    }
    let elapsed = started.elapsed().as_secs_f64() * 1e3;
    println!("{count} echoes from {server} in {elapsed:.1} ms");
    Ok(())
}
