//! The tokio API ([`phyllo_net::tokio`]): its examples against each other and against the
//! blocking ones, in two processes on 127.0.0.1, and two endpoints in one process.
//! `cargo test` builds the examples (with the `tokio` feature) before it runs this.

use phyllo::endpoint::{EndReason, SessionConfig, SessionEndpoint};
use phyllo::session::StaticKey;
use phyllo_net::keys;
use phyllo_net::tokio::{Config, ConnectError, ConnectionError, Endpoint};
use std::process::Output;
use std::time::{Duration, Instant};

mod common;
use common::{client, scratch, server};

/// `client` got all `count` echoes (it checks each, and fails on a wrong one).
fn assert_echoed(o: &Output, count: u32) {
    let stdout = String::from_utf8_lossy(&o.stdout);
    assert!(
        o.status.success(),
        "{stdout}{}",
        String::from_utf8_lossy(&o.stderr)
    );
    assert!(
        stdout.starts_with(&format!("{count} echoes from 127.0.0.1:")),
        "{stdout}"
    );
}

/// The client example `client_name` against the server example `server_name`.
fn client_against_server(client_name: &str, server_name: &str) {
    let (dir, client_key) = scratch(&format!("{client_name}-{server_name}"));
    let (server, addr, public) = server(server_name, &dir, &client_key);
    let server_pub = keys::public_path(&dir.join("server.key"));
    let o = client(
        client_name,
        &addr,
        server_pub.to_str().unwrap(),
        &client_key,
        20,
    );
    assert_echoed(&o, 20);
    // Again, the same client key in a new process (a restarted peer to the server).
    let o = client(client_name, &addr, &public, &client_key, 3);
    assert_echoed(&o, 3);
    drop(server);
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn the_tokio_client_gets_its_echoes_from_the_tokio_server() {
    client_against_server("echo_client_tokio", "echo_server_tokio");
}

#[test]
fn the_tokio_client_gets_its_echoes_from_the_blocking_server() {
    client_against_server("echo_client_tokio", "echo_server");
}

#[test]
fn the_blocking_client_gets_its_echoes_from_the_tokio_server() {
    client_against_server("echo_client", "echo_server_tokio");
}

#[test]
fn a_key_the_tokio_server_does_not_allow_gets_no_session() {
    let (dir, client_key) = scratch("tokio-stranger");
    let (server, addr, public) = server("echo_server_tokio", &dir, &client_key);
    let stranger = dir.join("stranger.key");
    let o = client("echo_client_tokio", &addr, &public, &stranger, 1);
    assert!(!o.status.success());
    let stderr = String::from_utf8_lossy(&o.stderr);
    assert!(stderr.contains("no session"), "{stderr}");
    drop(server);
    std::fs::remove_dir_all(&dir).unwrap();
}

/// Message `i` of the in-process exchange: its number, padded to a length that varies; every
/// 100th is several datagrams long.
fn message(i: u32) -> Vec<u8> {
    let len = if i % 100 == 7 {
        5000
    } else {
        16 + (i as usize * 37) % 900
    };
    let mut m = format!("message {i} ").into_bytes();
    m.resize(len, b'a' + (i % 26) as u8);
    m
}

/// A server endpoint allowing `client`, and the client's endpoint, on 127.0.0.1.
fn pair(client: &StaticKey, cfg: SessionConfig) -> (Endpoint, Endpoint) {
    pair_with(client, cfg, Config::default())
}

/// Like [`pair`], with `config` for both.
fn pair_with(client: &StaticKey, cfg: SessionConfig, config: Config) -> (Endpoint, Endpoint) {
    let server_key = StaticKey::generate().unwrap();
    let server = SessionEndpoint::builder(server_key)
        .allow(client.public())
        .config(cfg.clone())
        .build()
        .unwrap();
    let client = SessionEndpoint::builder(client.clone())
        .config(cfg)
        .build()
        .unwrap();
    let any = "127.0.0.1:0".parse().unwrap();
    (
        Endpoint::bind_with(any, server, config.clone()).unwrap(),
        Endpoint::bind_with(any, client, config).unwrap(),
    )
}

#[tokio::test]
async fn a_thousand_messages_go_and_come_back_in_order() {
    exchange(SessionConfig::default(), Config::default()).await;
}

#[tokio::test]
async fn a_thousand_messages_go_and_come_back_in_order_through_small_buffers() {
    // Sends wait for room (the endpoint keeps at most 8 KiB unconfirmed per peer), and
    // deliveries wait in the endpoint while a connection holds 4 unread.
    let cfg = SessionConfig {
        retain_limit: 8 << 10,
        ..SessionConfig::default()
    };
    let config = Config {
        inbox: 4,
        ..Config::default()
    };
    exchange(cfg, config).await;
}

/// A thousand messages from a client to a server that echoes them: each arrives, and its echo
/// comes back, unchanged and in order.
async fn exchange(cfg: SessionConfig, config: Config) {
    const COUNT: u32 = 1000;
    let client_key = StaticKey::generate().unwrap();
    let (server, client) = pair_with(&client_key, cfg, config);

    // The server echoes whatever comes, and counts it.
    let accepting = server.clone();
    let echoing = tokio::spawn(async move {
        let mut conn = accepting.accept().await.unwrap();
        assert_eq!(conn.remote_key(), client_key.public());
        let mut n = 0u32;
        while n < COUNT {
            let m = conn.recv().await.unwrap();
            assert_eq!(m, message(n), "the server got message {n} wrong");
            conn.send(&m).await.unwrap();
            n += 1;
        }
        conn
    });

    let mut conn = client
        .connect(server.public_key(), server.local_addr())
        .await
        .unwrap();
    // One task sends everything while this one reads the echoes: sends wait for room as the
    // windows fill.
    let sender = conn.sender();
    let sending = tokio::spawn(async move {
        for i in 0..COUNT {
            sender.send(&message(i)).await.unwrap();
        }
    });
    for i in 0..COUNT {
        let echo = tokio::time::timeout(Duration::from_secs(20), conn.recv())
            .await
            .unwrap_or_else(|_| panic!("no echo of message {i}"))
            .unwrap();
        assert_eq!(echo, message(i), "echo {i} differs");
    }
    sending.await.unwrap();
    let server_conn = echoing.await.unwrap();
    conn.quiet().await.unwrap();
    assert!(conn.take_returned().is_empty());
    // Closing a quiet connection hands nothing back; the connection is over.
    assert!(conn.close().await.is_empty());
    drop(server_conn);
    // Connecting again makes a new connection.
    let again = client
        .connect(server.public_key(), server.local_addr())
        .await
        .unwrap();
    again.send(b"again").await.unwrap();
    let mut back = server.accept().await.unwrap();
    assert_eq!(back.recv().await.unwrap(), b"again");
}

#[tokio::test]
async fn messages_to_a_server_that_went_away_come_back() {
    // Short timeouts: a silent peer is dead after 200 ms, then two initiations fail.
    let cfg = SessionConfig {
        dead_after: Duration::from_millis(200),
        handshake_timeout: Duration::from_millis(50),
        handshake_attempts: 2,
        ..SessionConfig::default()
    };
    let client_key = StaticKey::generate().unwrap();
    let (server, client) = pair(&client_key, cfg);
    let mut conn = client
        .connect(server.public_key(), server.local_addr())
        .await
        .unwrap();
    let mut served = server.accept().await.unwrap();
    conn.send(b"first").await.unwrap();
    assert_eq!(served.recv().await.unwrap(), b"first");
    // Once the client's end is quiet, "first" is confirmed: it will not come back.
    tokio::time::timeout(Duration::from_secs(5), conn.quiet())
        .await
        .expect("never quiet")
        .unwrap();
    // A second connect to the same key is refused.
    let err = client
        .connect(server.public_key(), server.local_addr())
        .await
        .unwrap_err();
    assert!(
        matches!(err, ConnectError::AlreadyConnected { peer } if peer == conn.peer()),
        "{err:?}"
    );

    // The server goes away (its driver stops with its last handle): what the client sends
    // now is never confirmed, and comes back when the client gives up.
    drop(served);
    drop(server);
    tokio::time::sleep(Duration::from_millis(50)).await;
    conn.send(b"lost 1").await.unwrap();
    conn.send(b"lost 2").await.unwrap();
    let err = tokio::time::timeout(Duration::from_secs(10), conn.recv())
        .await
        .expect("the client never gave up")
        .unwrap_err();
    match err {
        ConnectionError::Ended {
            reason,
            unconfirmed,
        } => {
            assert_eq!(reason, EndReason::HandshakeFailed);
            assert_eq!(unconfirmed, vec![b"lost 1".to_vec(), b"lost 2".to_vec()]);
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(conn.end_reason(), Some(EndReason::HandshakeFailed));
    assert!(conn.send(b"late").await.is_err());
}

#[tokio::test]
async fn a_connect_nobody_answers_times_out() {
    let key = StaticKey::generate().unwrap();
    let session = SessionEndpoint::builder(key).build().unwrap();
    let config = Config {
        connect_timeout: Duration::from_millis(300),
        ..Config::default()
    };
    let client = Endpoint::bind_with("127.0.0.1:0".parse().unwrap(), session, config).unwrap();
    // A socket that never answers.
    let silent = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
    let nobody = StaticKey::generate().unwrap().public();
    let started = Instant::now();
    let err = client
        .connect(nobody, silent.local_addr().unwrap())
        .await
        .unwrap_err();
    assert!(matches!(err, ConnectError::TimedOut { .. }), "{err:?}");
    assert!(started.elapsed() >= Duration::from_millis(300));
}
