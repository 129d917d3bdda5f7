//! `phyllo-lab ilp-ftp` end to end: a 64 MiB file of random bytes by each execution of the
//! integrated data path (the summary line says `verified=yes`, and the `--out` file is the
//! file), two copies of a small file, and the one-line error of a missing file.

use rand::{RngCore, SeedableRng};
use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

const BIN: &str = env!("CARGO_BIN_EXE_phyllo-lab");

/// A path under the temp directory, unique to this test and process, removed on drop.
struct Temp(PathBuf);

impl Temp {
    fn new(name: &str) -> Temp {
        Temp(std::env::temp_dir().join(format!("phyllo-ilp-ftp-{name}-{}", std::process::id())))
    }
}

impl Drop for Temp {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

/// Write `bytes` seeded random bytes to `path`.
fn random_file(path: &Path, bytes: usize, seed: u64) {
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(seed);
    let mut f = std::io::BufWriter::new(std::fs::File::create(path).unwrap());
    let mut chunk = vec![0u8; 1 << 20];
    let mut left = bytes;
    while left > 0 {
        let n = left.min(chunk.len());
        rng.fill_bytes(&mut chunk[..n]);
        f.write_all(&chunk[..n]).unwrap();
        left -= n;
    }
    f.flush().unwrap();
}

/// Whether the files hold the same bytes (compared a MiB at a time).
fn same_bytes(a: &Path, b: &Path) -> bool {
    let (mut fa, mut fb) = (
        std::fs::File::open(a).unwrap(),
        std::fs::File::open(b).unwrap(),
    );
    if fa.metadata().unwrap().len() != fb.metadata().unwrap().len() {
        return false;
    }
    let (mut ba, mut bb) = (vec![0u8; 1 << 20], vec![0u8; 1 << 20]);
    loop {
        let n = fa.read(&mut ba).unwrap();
        if n == 0 {
            return true;
        }
        fb.read_exact(&mut bb[..n]).unwrap();
        if ba[..n] != bb[..n] {
            return false;
        }
    }
}

fn ilp_ftp(args: &[&str], file: &Path, out: Option<&Path>) -> Output {
    let mut c = Command::new(BIN);
    c.arg("ilp-ftp").arg("--file").arg(file).args(args);
    if let Some(o) = out {
        c.arg("--out").arg(o);
    }
    c.output().unwrap()
}

/// The summary line's `key=value` fields.
fn field<'a>(line: &'a str, key: &str) -> &'a str {
    line.split_whitespace()
        .find_map(|kv| kv.strip_prefix(key)?.strip_prefix('='))
        .unwrap_or_else(|| panic!("no {key} in {line:?}"))
}

fn sixty_four_mib(path: &str) {
    let file = Temp::new(&format!("{path}-in"));
    let out = Temp::new(&format!("{path}-out"));
    random_file(&file.0, 64 << 20, 1);
    let o = ilp_ftp(&["--path", path], &file.0, Some(&out.0));
    let stdout = String::from_utf8_lossy(&o.stdout);
    assert!(o.status.success(), "{path}: {o:?}");
    let line = stdout.trim();
    assert_eq!(field(line, "verified"), "yes", "{line}");
    assert_eq!(field(line, "bytes"), (64u64 << 20).to_string(), "{line}");
    assert_eq!(
        field(line, "packets"),
        ((64 << 20) / 8192).to_string(),
        "{line}"
    );
    assert!(same_bytes(&file.0, &out.0), "{path}: the output differs");
}

#[test]
fn sixty_four_mib_by_the_layered_path() {
    sixty_four_mib("layered");
}

#[test]
fn sixty_four_mib_by_the_integrated_path() {
    sixty_four_mib("integrated");
}

#[test]
fn sixty_four_mib_by_the_blocked_path() {
    sixty_four_mib("blocked");
}

#[test]
fn two_copies_of_a_small_file() {
    let file = Temp::new("copies-in");
    let out = Temp::new("copies-out");
    random_file(&file.0, 100_001, 2);
    let o = ilp_ftp(
        &["--copies", "2", "--max-reply", "1000", "--cipher", "toy"],
        &file.0,
        Some(&out.0),
    );
    assert!(o.status.success(), "{o:?}");
    let stdout = String::from_utf8_lossy(&o.stdout);
    let line = stdout.trim();
    assert_eq!(field(line, "verified"), "yes", "{line}");
    assert_eq!(field(line, "bytes"), "200002", "{line}");
    assert_eq!(field(line, "packets"), "202", "{line}");
    let want = std::fs::read(&file.0).unwrap();
    let got = std::fs::read(&out.0).unwrap();
    assert_eq!(got.len(), 2 * want.len());
    assert!(got[..want.len()] == want[..] && got[want.len()..] == want[..]);
}

#[test]
fn a_missing_file_is_one_line_and_a_failure() {
    let missing = Temp::new("missing");
    let o = ilp_ftp(&[], &missing.0, None);
    assert!(!o.status.success(), "{o:?}");
    assert!(o.stdout.is_empty(), "{o:?}");
    let stderr = String::from_utf8_lossy(&o.stderr);
    assert_eq!(stderr.trim_end().lines().count(), 1, "{stderr}");
    assert!(stderr.starts_with("error: "), "{stderr}");
    assert!(stderr.contains("cannot open"), "{stderr}");
    assert!(stderr.contains(&*missing.0.to_string_lossy()), "{stderr}");
}

#[test]
fn a_reply_too_large_for_one_message_is_refused() {
    let file = Temp::new("large-in");
    random_file(&file.0, 10, 3);
    for bad in ["0", "2000000"] {
        let o = ilp_ftp(&["--max-reply", bad], &file.0, None);
        assert!(!o.status.success(), "{o:?}");
        let stderr = String::from_utf8_lossy(&o.stderr);
        assert!(stderr.contains("--max-reply"), "{stderr}");
    }
}
