//! `phyllo serve` with its listening socket flooded by replayed handshake initiations (an
//! allowed client's, recorded, sent again from another socket on the same host as fast as this
//! test can): new clients still get sessions within 10 s. The server spreads strangers over
//! several listening sockets by source (SO_REUSEPORT), so the flood fills one, and a client
//! whose handshakes go unanswered tries again from a new port; a transfer still completes.

mod common;

use common::*;
use phyllo::StaticKey;
use phyllo_net::{SessionSocket, DEFAULT_STACK};
use phyllo_udp::udp::{UdpLink, MAX_BATCH};
use std::net::SocketAddr;
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// An initiation of `key`'s to the server `(public, addr)`, as it left the client.
fn recorded_initiation(key: StaticKey, server: phyllo::PublicKey, addr: SocketAddr) -> Vec<u8> {
    let mut s = SessionSocket::bind(
        "127.0.0.1:0".parse().unwrap(),
        key,
        vec![],
        DEFAULT_STACK,
        false,
    )
    .unwrap();
    let now = s.now();
    s.endpoint_mut().connect(now, server, addr);
    let mut d = Vec::new();
    s.endpoint_mut()
        .poll_transmit(&mut d)
        .expect("an initiation");
    d
}

#[test]
fn new_clients_get_sessions_while_the_listening_socket_is_flooded() {
    let dir = tmpdir("flood");
    let s = keygen(&dir, "server");
    // Six newcomers, the key whose initiation is replayed, and an established sender.
    let clients: Vec<_> = (0..8).map(|i| keygen(&dir, &format!("c{i}"))).collect();
    let file = dir.join("bulk");
    random_file(&file, 64 << 20);
    let mut serve = Command::new(BIN);
    serve.args(["serve", "--listen", "127.0.0.1:0", "--print-addr", "--key"]);
    serve.arg(&s);
    for c in &clients {
        serve.args(["--allow", &pubfile(c)]);
    }
    let (mut server, addr) = spawn_with_addr(serve);
    let server_addr: SocketAddr = addr.parse().unwrap();
    let server_key = phyllo_net::keys::read_public(&pubfile(&s)).unwrap();
    let replayed = recorded_initiation(
        phyllo_net::keys::read_private(&clients[6]).unwrap(),
        server_key,
        server_addr,
    );

    // A transfer (its goodput under the flood against without is the lab's `engine`
    // experiment, `serve.flood_transfer_goodput_ratio`: a benchmark, not a timed test).
    let transfer = || -> f64 {
        let o = Command::new(BIN)
            .args([
                "connect",
                &addr,
                "--quiet",
                "--key",
                clients[7].to_str().unwrap(),
            ])
            .args(["--server-key", &pubfile(&s), "--file"])
            .arg(&file)
            .output()
            .unwrap();
        assert!(o.status.success(), "{}", stderr(&o));
        stdout(&o)
            .split_whitespace()
            .find_map(|w| w.strip_prefix("mbytes_per_s="))
            .and_then(|v| v.parse().ok())
            .unwrap()
    };
    let stop = Arc::new(AtomicBool::new(false));
    let sent = Arc::new(AtomicU64::new(0));
    let flood = {
        let (stop, sent) = (Arc::clone(&stop), Arc::clone(&sent));
        std::thread::spawn(move || {
            let mut l = UdpLink::bind("127.0.0.1:0".parse().unwrap()).unwrap();
            let views: Vec<&[u8]> = (0..MAX_BATCH).map(|_| &replayed[..]).collect();
            while !stop.load(Ordering::Relaxed) {
                let n = l.send_batch_to(&views, server_addr).unwrap_or(0);
                sent.fetch_add(n as u64, Ordering::Relaxed);
            }
        })
    };
    std::thread::sleep(Duration::from_millis(500));
    let started = Instant::now();
    let before = sent.load(Ordering::Relaxed);
    let children: Vec<_> = clients[..6]
        .iter()
        .map(|c| {
            Command::new(BIN)
                .args([
                    "connect",
                    &addr,
                    "--ping",
                    "3",
                    "--quiet",
                    "--timeout",
                    "10",
                ])
                .args(["--key", c.to_str().unwrap(), "--server-key", &pubfile(&s)])
                .stdout(Stdio::piped())
                .stderr(Stdio::piped())
                .spawn()
                .unwrap()
        })
        .collect();
    let mut got = 0;
    let mut why = Vec::new();
    for c in children {
        let o = c.wait_with_output().unwrap();
        if o.status.success() {
            got += 1;
        } else {
            why.push(stderr(&o).lines().last().unwrap_or("").to_owned());
        }
    }
    let secs = started.elapsed().as_secs_f64();
    let rate = (sent.load(Ordering::Relaxed) - before) as f64 / secs;
    let flooded = transfer();
    eprintln!("a transfer under the flood: {flooded:.0} MB/s");
    stop.store(true, Ordering::Relaxed);
    flood.join().unwrap();
    eprintln!(
        "under a flood of {rate:.0} replayed initiations/s: {got} of 6 new clients got a session \
         ({secs:.1} s for all) {why:?}"
    );
    assert!(got >= 5, "{got} of 6 new clients got a session: {why:?}");
    assert!(matches!(server.0.try_wait(), Ok(None)), "the server is up");
    let _ = std::fs::remove_dir_all(&dir);
}
