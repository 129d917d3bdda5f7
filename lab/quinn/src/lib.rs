//! What users pick instead of phyllo: quinn (QUIC over UDP, TLS 1.3) measured on loopback in
//! the same run as phyllo, for van Renesse, "Masking the Overhead of Protocol Layering" (seed
//! 004)'s basic figures — round-trip latency of small messages and small-message streaming
//! throughput (issue 3's `accel.rtt_ratio_vs_quinn`) — and for bulk transfer, a file sent on one
//! stream and checked by BLAKE3 at both ends, as `phyllo connect --file` does.
//!
//! Each end runs on its own thread with its own single-threaded tokio runtime, as phyllo's
//! measurements run each end on its own thread. Messages travel on one bidirectional QUIC
//! stream (reliable, ordered: the same service as phyllo's window layer); the certificate is
//! self-signed for `localhost` and trusted by the client. Everything is bounded by a deadline.
//!
//! [`quinn_path_transfer`] runs the same file transfer between two sockets the caller made
//! (in network namespaces of their own, across an emulated path), with flow-control windows and
//! a congestion controller chosen for the path ([`PathTransport`]).

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
    /// Hash it all (BLAKE3), then answer with the digest.
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
                let mut hash = blake3::Hasher::new();
                while let Ok(Some(n)) = recv.read(&mut buf).await {
                    match mode {
                        Mode::Echo => send.write_all(&buf[..n]).await.ok()?,
                        Mode::Hash => {
                            hash.update(&buf[..n]);
                        }
                        Mode::Sink => {}
                    }
                }
                match mode {
                    Mode::Echo => {}
                    Mode::Sink => send.write_all(b"done").await.ok()?,
                    Mode::Hash => send.write_all(hash.finalize().as_bytes()).await.ok()?,
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

/// A file transfer: `data` written in `size`-byte pieces on one stream, hashed (BLAKE3) by
/// the client as it writes and by the server as it reads; the transfer counts once the server's
/// digest has come back and matches. Returns bytes per second.
pub fn quinn_bulk(data: &[u8], size: usize) -> Result<f64, QuinnError> {
    with_stream(Mode::Hash, |mut send, mut recv| async move {
        let t0 = Instant::now();
        send_hashed(&mut send, &mut recv, data, size).await?;
        Ok(data.len() as f64 / t0.elapsed().as_secs_f64().max(1e-9))
    })
}

/// Write `data` in `size`-byte pieces on `send`, hashing it (BLAKE3), finish the stream, and
/// check the digest the server answers on `recv`.
async fn send_hashed(
    send: &mut quinn::SendStream,
    recv: &mut quinn::RecvStream,
    data: &[u8],
    size: usize,
) -> Result<(), QuinnError> {
    let mut hash = blake3::Hasher::new();
    for piece in data.chunks(size.max(1)) {
        hash.update(piece);
        send.write_all(piece).await.map_err(exchange)?;
    }
    send.finish().map_err(exchange)?;
    let mut theirs = [0u8; 32];
    recv.read_exact(&mut theirs).await.map_err(exchange)?;
    if hash.finalize() != theirs {
        return Err(exchange("the server's BLAKE3 differs from the client's"));
    }
    Ok(())
}

/// The congestion controller of a quinn sender ([`PathTransport::controller`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum QuinnController {
    /// CUBIC (`quinn::congestion::CubicConfig`): quinn's default.
    Cubic,
    /// BBR (`quinn::congestion::BbrConfig`).
    Bbr,
}

impl QuinnController {
    /// `cubic` or `bbr`.
    pub fn name(self) -> &'static str {
        match self {
            QuinnController::Cubic => "cubic",
            QuinnController::Bbr => "bbr",
        }
    }
}

/// quinn's flow-control windows and congestion controller for a transfer over a long path
/// ([`quinn_path_transfer`]); both ends get the same settings. quinn's defaults are sized for
/// 100 Mbit/s and 100 ms (a stream window of 1.25 MB, a send window of 10 MB, no
/// connection-level receive limit); a caller sizes them to its path's bandwidth-delay product
/// so that flow control does not limit the sender.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PathTransport {
    /// Bytes a stream may have unacknowledged by the receiving application
    /// (`TransportConfig::stream_receive_window`).
    pub stream_receive_window: u64,
    /// Bytes the whole connection may have so (`TransportConfig::receive_window`).
    pub receive_window: u64,
    /// Bytes the sender may have sent and not had acknowledged
    /// (`TransportConfig::send_window`).
    pub send_window: u64,
    /// The sender's congestion controller.
    pub controller: QuinnController,
}

impl PathTransport {
    fn config(&self) -> Result<quinn::TransportConfig, QuinnError> {
        let var = |v: u64| quinn::VarInt::from_u64(v).map_err(setup);
        let mut t = quinn::TransportConfig::default();
        t.stream_receive_window(var(self.stream_receive_window)?)
            .receive_window(var(self.receive_window)?)
            .send_window(self.send_window);
        match self.controller {
            QuinnController::Cubic => {
                t.congestion_controller_factory(Arc::new(quinn::congestion::CubicConfig::default()))
            }
            QuinnController::Bbr => {
                t.congestion_controller_factory(Arc::new(quinn::congestion::BbrConfig::default()))
            }
        };
        Ok(t)
    }
}

/// How a [`quinn_path_transfer`] went.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct PathTransfer {
    /// Bytes the receiving application had read, in order: the whole file if it completed,
    /// what had arrived by the limit otherwise.
    pub bytes: u64,
    /// Seconds from the connection's establishment to the server's digest back at the client
    /// (completed), or to the limit.
    pub seconds: f64,
    /// The server's digest came back and matched before the limit.
    pub completed: bool,
    /// Seconds of the handshake (from `connect` to the connection's establishment).
    pub handshake_seconds: f64,
}

impl PathTransfer {
    /// Bytes per second: [`bytes`](Self::bytes) over [`seconds`](Self::seconds).
    pub fn bytes_per_s(&self) -> f64 {
        self.bytes as f64 / self.seconds.max(1e-9)
    }
}

/// A file transfer between two sockets the caller made — each may belong to a network
/// namespace of its own, since a socket stays in the namespace it was created in — as
/// [`quinn_bulk`] does it: `data` written in `piece`-byte pieces on one stream by the client
/// (on `client`, sending to `to`: the server's address as the client reaches it, a relay's
/// perhaps), read and hashed (BLAKE3) by the server (on `server`, its own thread), whose
/// digest comes back and must match. Both ends run `transport`. The transfer stops at `limit`
/// after the call (the handshake included): then it has not completed and counts the bytes
/// the server had read by then.
pub fn quinn_path_transfer(
    server: std::net::UdpSocket,
    client: std::net::UdpSocket,
    to: SocketAddr,
    data: &[u8],
    piece: usize,
    transport: &PathTransport,
    limit: Duration,
) -> Result<PathTransfer, QuinnError> {
    use std::sync::atomic::{AtomicU64, Ordering};
    let start = Instant::now();
    let piece = piece.max(1);
    let mut c = configs()?;
    c.server.transport_config(Arc::new(transport.config()?));
    c.client.transport_config(Arc::new(transport.config()?));
    server.set_nonblocking(true).map_err(setup)?;
    client.set_nonblocking(true).map_err(setup)?;
    let received = Arc::new(AtomicU64::new(0));
    // The client's runtime first: failing here leaves no server thread behind.
    let rt = runtime()?;
    // The server: read everything, hash it, answer with the digest; bounded by the limit and
    // a little more, for the digest's way back.
    let (ready_tx, ready_rx) = mpsc::channel();
    let server_thread = {
        let received = Arc::clone(&received);
        let server_cfg = c.server;
        thread::spawn(move || {
            let rt = match runtime() {
                Ok(rt) => rt,
                Err(e) => {
                    let _ = ready_tx.send(Err(e));
                    return;
                }
            };
            rt.block_on(async move {
                let ep = match quinn::Endpoint::new(
                    quinn::EndpointConfig::default(),
                    Some(server_cfg),
                    server,
                    Arc::new(quinn::TokioRuntime),
                ) {
                    Ok(ep) => ep,
                    Err(e) => {
                        let _ = ready_tx.send(Err(setup(e)));
                        return;
                    }
                };
                let _ = ready_tx.send(Ok(()));
                let serve = async {
                    let conn = ep.accept().await?.await.ok()?;
                    let (mut send, mut recv) = conn.accept_bi().await.ok()?;
                    let mut buf = vec![0u8; 64 * 1024];
                    let mut hash = blake3::Hasher::new();
                    while let Ok(Some(n)) = recv.read(&mut buf).await {
                        hash.update(&buf[..n]);
                        received.fetch_add(n as u64, Ordering::Relaxed);
                    }
                    send.write_all(hash.finalize().as_bytes()).await.ok()?;
                    let _ = send.finish();
                    conn.closed().await;
                    Some(())
                };
                let _ = tokio::time::timeout(limit + Duration::from_secs(5), serve).await;
                ep.close(0u32.into(), b"done");
            });
        })
    };
    ready_rx
        .recv_timeout(Duration::from_secs(10))
        .map_err(|_| setup("server thread did not start"))??;
    let result = rt.block_on(async {
        let mut ep = quinn::Endpoint::new(
            quinn::EndpointConfig::default(),
            None,
            client,
            Arc::new(quinn::TokioRuntime),
        )
        .map_err(setup)?;
        ep.set_default_client_config(c.client);
        let connecting = ep.connect(to, "localhost").map_err(setup)?;
        let conn = tokio::time::timeout(limit, connecting)
            .await
            .map_err(|_| exchange("no connection within the limit"))?
            .map_err(exchange)?;
        let handshake_seconds = start.elapsed().as_secs_f64();
        let t0 = Instant::now();
        let send_all = async {
            let (mut send, mut recv) = conn.open_bi().await.map_err(exchange)?;
            send_hashed(&mut send, &mut recv, data, piece).await
        };
        let left = limit.saturating_sub(start.elapsed());
        let out = match tokio::time::timeout(left, send_all).await {
            Ok(Ok(())) => Ok(PathTransfer {
                bytes: data.len() as u64,
                seconds: t0.elapsed().as_secs_f64(),
                completed: true,
                handshake_seconds,
            }),
            Ok(Err(e)) => Err(e),
            Err(_) => Ok(PathTransfer {
                bytes: received.load(Ordering::Relaxed),
                seconds: t0.elapsed().as_secs_f64(),
                completed: false,
                handshake_seconds,
            }),
        };
        // Closed on every outcome, so the server's thread (and its socket in the server's
        // namespace) ends now rather than at its own timeout.
        conn.close(0u32.into(), b"done");
        // A path that stalled may not carry the close: do not wait for it long.
        let _ = tokio::time::timeout(Duration::from_secs(1), ep.wait_idle()).await;
        out
    });
    let _ = server_thread.join();
    result
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

    #[test]
    fn path_transfer_between_given_sockets() {
        let bind = || std::net::UdpSocket::bind((Ipv4Addr::LOCALHOST, 0)).unwrap();
        let (server, client) = (bind(), bind());
        let to = server.local_addr().unwrap();
        let data: Vec<u8> = (0..500_000u32).map(|i| (i * 13) as u8).collect();
        let t = PathTransport {
            stream_receive_window: 4 << 20,
            receive_window: 4 << 20,
            send_window: 8 << 20,
            controller: QuinnController::Bbr,
        };
        let r = quinn_path_transfer(
            server,
            client,
            to,
            &data,
            16_384,
            &t,
            Duration::from_secs(30),
        )
        .expect("quinn path transfer");
        assert!(r.completed);
        assert_eq!(r.bytes, data.len() as u64);
        assert!(r.bytes_per_s() > 0.0 && r.handshake_seconds > 0.0);
    }
}
