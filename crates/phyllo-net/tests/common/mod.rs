//! What the tests that run the examples as processes share: finding an example's binary,
//! killing a child that outlives its test, a child's output within a time limit, and an echo
//! server example and client example started with fresh keys.

use phyllo::session::StaticKey;
use phyllo_net::keys;
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

/// An example's binary: cargo puts them in `examples/` beside the `deps/` directory this test
/// runs from.
pub fn example(name: &str) -> PathBuf {
    let exe = std::env::current_exe().unwrap();
    let dir = exe.parent().unwrap().parent().unwrap().join("examples");
    let path = dir.join(format!("{name}{}", std::env::consts::EXE_SUFFIX));
    assert!(
        path.exists(),
        "{} not built: run `cargo test -p phyllo-net` (which builds the examples)",
        path.display()
    );
    path
}

/// A process killed when dropped, so a failing test leaves no server behind.
pub struct Killed(pub Child);

impl Drop for Killed {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// The output of `child` once it exits; panics (killing it) if that takes longer than `limit`.
pub fn output_within(child: Child, limit: Duration) -> Output {
    let mut child = Killed(child);
    let until = Instant::now() + limit;
    while child.0.try_wait().unwrap().is_none() {
        assert!(Instant::now() < until, "still running after {limit:?}");
        std::thread::sleep(Duration::from_millis(20));
    }
    // It has exited (dropping `child` kills nothing): its output, which fits in the pipes.
    let c = &mut child.0;
    Output {
        status: c.wait().unwrap(),
        stdout: std::io::read_to_string(c.stdout.take().unwrap())
            .unwrap()
            .into_bytes(),
        stderr: std::io::read_to_string(c.stderr.take().unwrap())
            .unwrap()
            .into_bytes(),
    }
}

/// A directory of this test's own, with a client key pair in it.
pub fn scratch(name: &str) -> (PathBuf, PathBuf) {
    let dir = std::env::temp_dir().join(format!("phyllo-net-{name}-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let client_key = dir.join("client.key");
    keys::write_pair(&client_key, &StaticKey::generate().unwrap()).unwrap();
    (dir, client_key)
}

/// Start the server example `name` allowing `client_key`, with a new key in `dir`; the
/// process, its address and its public key, from its first line.
pub fn server(name: &str, dir: &Path, client_key: &Path) -> (Killed, String, String) {
    let server_key = dir.join("server.key");
    let _ = std::fs::remove_file(&server_key);
    let mut server = Killed(
        Command::new(example(name))
            .args(["--listen", "127.0.0.1:0", "--allow"])
            .arg(keys::public_path(client_key))
            .arg("--key")
            .arg(&server_key)
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap(),
    );
    let stdout = server.0.stdout.take().unwrap();
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let mut line = String::new();
        let _ = BufReader::new(stdout).read_line(&mut line);
        let _ = tx.send(line);
    });
    let line = rx
        .recv_timeout(Duration::from_secs(30))
        .unwrap_or_else(|_| panic!("{name} printed no address"));
    let words: Vec<&str> = line.split_whitespace().collect();
    let (addr, public) = match words[..] {
        ["listening", "on", addr, "public", "key", public] => (addr, public),
        _ => panic!("unexpected first line from {name}: {line:?}"),
    };
    assert_eq!(
        keys::read_public(keys::public_path(&server_key).to_str().unwrap())
            .unwrap()
            .to_string(),
        public
    );
    (server, addr.to_string(), public.to_string())
}

/// Run the client example `name` against `addr` with the server's public key and the client
/// key `key`.
pub fn client(name: &str, addr: &str, server_key: &str, key: &Path, count: u32) -> Output {
    let child = Command::new(example(name))
        .args([
            addr,
            "--server-key",
            server_key,
            "--count",
            &count.to_string(),
        ])
        .arg("--key")
        .arg(key)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    output_within(child, Duration::from_secs(30))
}
