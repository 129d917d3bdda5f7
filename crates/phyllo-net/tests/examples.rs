//! The examples against each other in two processes on 127.0.0.1: `echo_server` and
//! `echo_client`, `receive_file` and `send_file`. `cargo test` builds the examples before it runs
//! this.

use phyllo::session::StaticKey;
use phyllo_net::keys;
use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

mod common;
use common::{client, example, output_within, scratch, server, Killed};

#[test]
fn the_echo_client_gets_its_echoes_from_the_echo_server() {
    let (dir, client_key) = scratch("examples");
    // The server writes its key pair and prints where it listens on its first line.
    let (server, addr, public) = server("echo_server", &dir, &client_key);
    let (addr, public) = (addr.as_str(), public.as_str());

    // The server's public key as a file, and as hexadecimal digits.
    let server_pub = keys::public_path(&dir.join("server.key"));
    let o = client(
        "echo_client",
        addr,
        server_pub.to_str().unwrap(),
        &client_key,
        20,
    );
    let stdout = String::from_utf8_lossy(&o.stdout);
    assert!(
        o.status.success(),
        "{stdout}{}",
        String::from_utf8_lossy(&o.stderr)
    );
    assert!(stdout.starts_with("20 echoes from 127.0.0.1:"), "{stdout}");
    let o = client("echo_client", addr, public, &client_key, 3);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));

    // A key the server does not allow gets no session: the client fails, it does not hang.
    let stranger = dir.join("stranger.key");
    let o = client("echo_client", addr, public, &stranger, 1);
    assert!(!o.status.success());
    let stderr = String::from_utf8_lossy(&o.stderr);
    assert!(stderr.contains("no session"), "{stderr}");

    drop(server);
    std::fs::remove_dir_all(&dir).unwrap();
}

/// `send_file` to `receive_file` in two processes: the file arrives whole, under its name,
/// and both exit 0.
#[test]
fn send_file_delivers_a_file_to_receive_file() {
    let dir = std::env::temp_dir().join(format!("phyllo-net-send-file-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let (rk, sk) = (dir.join("receiver.key"), dir.join("sender.key"));
    keys::write_pair(&rk, &StaticKey::generate().unwrap()).unwrap();
    keys::write_pair(&sk, &StaticKey::generate().unwrap()).unwrap();
    // 3 MiB and a bit of bytes that are not all alike, so a lost or repeated chunk shows.
    let data: Vec<u8> = (0..3 * 1024 * 1024 + 777u32)
        .map(|i| (i.wrapping_mul(2_654_435_761) >> 13) as u8)
        .collect();
    let (input, output) = (dir.join("input"), dir.join("output"));
    std::fs::write(&input, &data).unwrap();
    let mut receiver = Killed(
        Command::new(example("receive_file"))
            .arg(&output)
            .args(["--listen", "127.0.0.1:0", "--key"])
            .arg(&rk)
            .arg("--allow")
            .arg(keys::public_path(&sk))
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap(),
    );
    // Kept open to the end: the receiver prints its last line when it is done.
    let mut stdout = BufReader::new(receiver.0.stdout.take().unwrap());
    let mut line = String::new();
    stdout.read_line(&mut line).unwrap();
    let addr = line.split_whitespace().nth(2).expect("listening on ADDR");
    let sender = Command::new(example("send_file"))
        .arg(addr)
        .arg(&input)
        .arg("--server-key")
        .arg(keys::public_path(&rk))
        .arg("--key")
        .arg(&sk)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let out = output_within(sender, Duration::from_secs(60));
    assert!(out.status.success(), "send_file: {out:?}");
    let until = Instant::now() + Duration::from_secs(10);
    while receiver.0.try_wait().unwrap().is_none() {
        assert!(Instant::now() < until, "receive_file still running");
        std::thread::sleep(Duration::from_millis(20));
    }
    assert!(receiver.0.wait().unwrap().success());
    line.clear();
    stdout.read_line(&mut line).unwrap();
    assert!(line.starts_with("received"), "{line}");
    assert!(std::fs::read(&output).unwrap() == data, "the file differs");
    assert!(!output.with_extension("part").exists());
    let _ = std::fs::remove_dir_all(&dir);
}
