//! What the command's end-to-end tests share: temporary directories, keys, files, and child
//! processes that are killed when dropped.
#![allow(dead_code)]

use rand::{RngCore, SeedableRng};
use sha2::{Digest, Sha256};
use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

pub const BIN: &str = env!("CARGO_BIN_EXE_phyllo");

pub fn tmpdir(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("phyllo-e2e-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

pub fn keygen(dir: &Path, name: &str) -> PathBuf {
    let p = dir.join(name);
    let out = Command::new(BIN)
        .args(["keygen", "--out"])
        .arg(&p)
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    p
}

pub fn pubfile(p: &Path) -> String {
    format!("{}.pub", p.display())
}

/// A file of `bytes` seeded random bytes; returns its SHA-256.
pub fn random_file(path: &Path, bytes: usize) -> Vec<u8> {
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(42);
    let mut f = std::io::BufWriter::new(std::fs::File::create(path).unwrap());
    let mut h = Sha256::new();
    let mut chunk = vec![0u8; 1 << 20];
    let mut left = bytes;
    while left > 0 {
        let n = left.min(chunk.len());
        rng.fill_bytes(&mut chunk[..n]);
        h.update(&chunk[..n]);
        f.write_all(&chunk[..n]).unwrap();
        left -= n;
    }
    f.flush().unwrap();
    h.finalize().to_vec()
}

pub fn sha256_of(path: &Path) -> Vec<u8> {
    let mut h = Sha256::new();
    let mut f = std::fs::File::open(path).unwrap();
    std::io::copy(&mut f, &mut h).unwrap();
    h.finalize().to_vec()
}

/// A child process killed when dropped.
pub struct Kill(pub Child);

impl Drop for Kill {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Start a command that prints its bound address on its first line, its standard error
/// shown with the test's; returns it and the line.
pub fn spawn_with_addr(mut cmd: Command) -> (Kill, String) {
    cmd.stderr(Stdio::inherit());
    let (child, addr) = spawn_reading_addr(cmd);
    (Kill(child), addr)
}

/// Start a command that prints its bound address on its first line (its standard error as
/// `cmd` says); returns it and the line.
pub fn spawn_reading_addr(mut cmd: Command) -> (Child, String) {
    let mut child = cmd.stdout(Stdio::piped()).spawn().unwrap();
    let mut line = String::new();
    BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    (child, line.trim().to_string())
}

pub fn wait_exit(k: &mut Kill, limit: Duration) -> bool {
    let until = Instant::now() + limit;
    while Instant::now() < until {
        if let Ok(Some(s)) = k.0.try_wait() {
            return s.success();
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    false
}

pub fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

pub fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

/// A child's output, once it exits (at most `limit`; past it the child is killed and the test
/// fails).
pub fn finish(mut child: Child, limit: Duration) -> Output {
    let until = Instant::now() + limit;
    while child.try_wait().unwrap().is_none() {
        if Instant::now() > until {
            let _ = child.kill();
            panic!("the client did not exit within {limit:?}");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    child.wait_with_output().unwrap()
}
