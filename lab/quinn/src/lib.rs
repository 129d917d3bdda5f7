//! What users pick instead of phyllo: quinn (QUIC over UDP, TLS 1.3) measured on loopback in
//! the same run as phyllo, for van Renesse, "Masking the Overhead of Protocol Layering" (seed
//! 004)'s basic figures — round-trip latency of small messages and small-message streaming
//! throughput (issue 3's `accel.rtt_ratio_vs_quinn`) — and for bulk transfer, a file sent on one
//! stream and checked by SHA-256 at both ends, as `phyllo connect --file` does.
//!
//! Each end runs on its own thread with its own single-threaded tokio runtime, as phyllo's
//! measurements run each end on its own thread. Messages travel on one bidirectional QUIC
//! stream (reliable, ordered: the same service as phyllo's window layer); the certificate is
//! self-signed for `localhost` and trusted by the client. Everything is bounded by a deadline.

use sha2::{Digest, Sha256};
use std::net::{Ipv4Addr, SocketAddr};
use std::sync::{mpsc, Arc};
use std::thread;
use std::time::{Duration, Instant};
use thiserror::Error;

/// Why a quinn measurement failed.
#[derive(Debug, Error)]
pub enum QuinnError {
    /// Setting up TLS or the endpoints failed.
    #[error("quinn setup: {0}")]
    Setup(String),
    /// The exchange failed or ran past its deadline.
    #[error("quinn exchange: {0}")]
    Exchange(String),
}

fn setup<E: std::fmt::Display>(e: E) -> QuinnError {
    QuinnError::Setup(e.to_string())
}

fn exchange<E: std::fmt::Display>(e: E) -> QuinnError {
    QuinnError::Exchange(e.to_string())
}

struct Configs {
    server: quinn::ServerConfig,
    client: quinn::ClientConfig,
}

fn configs() -> Result<Configs, QuinnError> {
    // Both may already be installed by an earlier run in this process.
    let _ = rustls::crypto::ring::default_provider().install_default();
    let ck = rcgen::generate_simple_self_signed(vec!["localhost".into()]).map_err(setup)?;
    let cert = ck.cert.der().clone();
    let key = rustls::pki_types::PrivateKeyDer::Pkcs8(ck.signing_key.serialize_der().into());
    let server = quinn::ServerConfig::with_single_cert(vec![cert.clone()], key).map_err(setup)?;
    let mut roots = rustls::RootCertStore::empty();
    roots.add(cert).map_err(setup)?;
    let client = quinn::ClientConfig::with_root_certificates(Arc::new(roots)).map_err(setup)?;
    Ok(Configs { server, client })
}

fn runtime() -> Result<tokio::runtime::Runtime, QuinnError> {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(setup)
}

/// What the server does with what it reads.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Mode {
    /// Write it back.
    Echo,
    /// Read it all, then answer `done`.
    Sink,
    /// Hash it all (SHA-256), then answer with the digest.
    Hash,
}

/// Start the server on its own thread; returns its address.
fn server(
    cfg: quinn::ServerConfig,
    mode: Mode,
    deadline: Duration,
) -> Result<SocketAddr, QuinnError> {
    let (tx, rx) = mpsc::channel();
    thread::spawn(move || {
        let rt = match runtime() {
            Ok(rt) => rt,
            Err(e) => {
                let _ = tx.send(Err(e));
                return;
            }
        };
        rt.block_on(async move {
            let ep = match quinn::Endpoint::server(cfg, SocketAddr::from((Ipv4Addr::LOCALHOST, 0)))
            {
                Ok(ep) => ep,
                Err(e) => {
                    let _ = tx.send(Err(setup(e)));
                    return;
                }
            };
            let _ = tx.send(ep.local_addr().map_err(setup));
            let serve = async {
                let conn = ep.accept().await?.await.ok()?;
                let (mut send, mut recv) = conn.accept_bi().await.ok()?;
                let mut buf = vec![0u8; 64 * 1024];
                let mut hash = Sha256::new();
                while let Ok(Some(n)) = recv.read(&mut buf).await {
                    match mode {
                        Mode::Echo => send.write_all(&buf[..n]).await.ok()?,
                        Mode::Hash => hash.update(&buf[..n]),
                        Mode::Sink => {}
                    }
                }
                match mode {
                    Mode::Echo => {}
                    Mode::Sink => send.write_all(b"done").await.ok()?,
                    Mode::Hash => send.write_all(&hash.finalize()).await.ok()?,
                }
                let _ = send.finish();
                conn.closed().await;
                Some(())
            };
            let _ = tokio::time::timeout(deadline, serve).await;
        });
    });
    rx.recv_timeout(Duration::from_secs(10))
        .map_err(|_| setup("server thread did not start"))?
}

async fn connect(
    client: quinn::ClientConfig,
    server: SocketAddr,
) -> Result<(quinn::Endpoint, quinn::Connection), QuinnError> {
    let mut ep =
        quinn::Endpoint::client(SocketAddr::from((Ipv4Addr::LOCALHOST, 0))).map_err(setup)?;
    ep.set_default_client_config(client);
    let conn = ep
        .connect(server, "localhost")
        .map_err(setup)?
        .await
        .map_err(setup)?;
    Ok((ep, conn))
}

/// Run `exchange` as the client of a fresh server (in `mode`) on one bidirectional stream,
/// then close the connection; all of it within the deadline.
fn with_stream<T, F, Fut>(mode: Mode, exchange_fn: F) -> Result<T, QuinnError>
where
    F: FnOnce(quinn::SendStream, quinn::RecvStream) -> Fut,
    Fut: std::future::Future<Output = Result<T, QuinnError>>,
{
    let deadline = Duration::from_secs(120);
    let c = configs()?;
    let addr = server(c.server, mode, deadline)?;
    let rt = runtime()?;
    rt.block_on(async move {
        let run = async {
            let (ep, conn) = connect(c.client, addr).await?;
            let (send, recv) = conn.open_bi().await.map_err(exchange)?;
            let out = exchange_fn(send, recv).await?;
            conn.close(0u32.into(), b"done");
            ep.wait_idle().await;
            Ok(out)
        };
        tokio::time::timeout(deadline, run)
            .await
            .map_err(|_| exchange("deadline passed"))?
    })
}

/// Round trips of `size`-byte messages echoed on one bidirectional stream: nanoseconds of each
/// of `rounds` round trips after a 10 % warm-up.
pub fn quinn_rtt(size: usize, rounds: usize) -> Result<Vec<u64>, QuinnError> {
    with_stream(Mode::Echo, |mut send, mut recv| async move {
        let msg = vec![7u8; size];
        let mut back = vec![0u8; size];
        let warm = (rounds / 10).min(1000);
        let mut samples = Vec::with_capacity(rounds);
        for r in 0..rounds + warm {
            let t0 = Instant::now();
            send.write_all(&msg).await.map_err(exchange)?;
            recv.read_exact(&mut back).await.map_err(exchange)?;
            if r >= warm {
                samples.push(t0.elapsed().as_nanos() as u64);
            }
        }
        let _ = send.finish();
        Ok(samples)
    })
}

/// Messages per second of a one-way stream of `count` `size`-byte writes on one stream,
/// from the first write until the receiver has read them all.
pub fn quinn_stream(size: usize, count: u64) -> Result<f64, QuinnError> {
    with_stream(Mode::Sink, |mut send, mut recv| async move {
        let msg = vec![7u8; size];
        let t0 = Instant::now();
        for _ in 0..count {
            send.write_all(&msg).await.map_err(exchange)?;
        }
        send.finish().map_err(exchange)?;
        // The server answers once it has read everything.
        let mut done = [0u8; 4];
        recv.read_exact(&mut done).await.map_err(exchange)?;
        Ok(count as f64 / t0.elapsed().as_secs_f64().max(1e-9))
    })
}

/// A file transfer: `data` written in `size`-byte pieces on one stream, hashed (SHA-256) by
/// the client as it writes and by the server as it reads; the transfer counts once the server's
/// digest has come back and matches. Returns bytes per second.
pub fn quinn_bulk(data: &[u8], size: usize) -> Result<f64, QuinnError> {
    let size = size.max(1);
    with_stream(Mode::Hash, |mut send, mut recv| async move {
        let t0 = Instant::now();
        let mut hash = Sha256::new();
        for piece in data.chunks(size) {
            hash.update(piece);
            send.write_all(piece).await.map_err(exchange)?;
        }
        send.finish().map_err(exchange)?;
        let mut theirs = [0u8; 32];
        recv.read_exact(&mut theirs).await.map_err(exchange)?;
        if theirs[..] != hash.finalize()[..] {
            return Err(exchange("the server's SHA-256 differs from the client's"));
        }
        Ok(data.len() as f64 / t0.elapsed().as_secs_f64().max(1e-9))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn echoes_and_streams_on_loopback() {
        let s = quinn_rtt(8, 200).expect("quinn round trips");
        assert_eq!(s.len(), 200);
        assert!(s.iter().all(|&x| x > 0));
        let rate = quinn_stream(8, 10_000).expect("quinn stream");
        assert!(rate > 0.0);
        let data: Vec<u8> = (0..300_000u32).map(|i| (i * 7) as u8).collect();
        assert!(quinn_bulk(&data, 8192).expect("quinn bulk") > 0.0);
    }
}
