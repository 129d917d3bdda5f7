//! What `phyllo serve` and `phyllo connect` share besides the transfer protocol
//! ([`crate::transfer`]): statistics lines, addresses, Ctrl-C, reading. The sessions themselves
//! run on [`phyllo_net::SessionSocket`].

use anyhow::{bail, Context, Result};
use phyllo::endpoint::{PeerStats, SessionEndpoint};
use phyllo::session::PublicKey;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

/// A flag that Ctrl-C (SIGINT), SIGTERM or SIGHUP sets, so the commands stop as they would
/// for Ctrl-C when a service manager stops them.
pub fn interrupted() -> Result<Arc<AtomicBool>> {
    let flag = Arc::new(AtomicBool::new(false));
    let f = flag.clone();
    ctrlc::set_handler(move || f.store(true, Ordering::SeqCst))
        .context("installing the Ctrl-C handler")?;
    Ok(flag)
}

/// Whether `flag` was set.
pub fn is_set(flag: &AtomicBool) -> bool {
    flag.load(Ordering::SeqCst)
}

/// A public key's fingerprint for logs and statistics: the first 16 of its 64 hexadecimal
/// digits (64 bits, enough to tell an operator's peers apart at a glance; the whole key is
/// in the allow file). Written only when displayed, so a log line that is filtered out costs
/// nothing.
#[derive(Clone, Copy)]
pub struct Fingerprint(pub PublicKey);

impl std::fmt::Display for Fingerprint {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let hex = self.0.to_string();
        f.write_str(hex.get(..16).unwrap_or(&hex))
    }
}

/// A peer's statistics as one line.
pub fn stats_line(key: &PublicKey, addr: Option<SocketAddr>, s: &PeerStats) -> String {
    let fast = s.fast_msgs + s.slow_msgs;
    let ratio = if fast > 0 {
        format!("{:.3}", s.fast_msgs as f64 / fast as f64)
    } else {
        "-".into()
    };
    format!(
        "peer {} at {}: sessions {}, messages sent {} delivered {}, datagrams out {} in {}, bytes out {}, \
         fast-path ratio {}, datagrams dropped {}, returned unconfirmed {}",
        Fingerprint(*key),
        addr.map_or("?".into(), |a| a.to_string()),
        s.sessions,
        s.sent_msgs,
        s.delivered,
        s.datagrams_out,
        s.datagrams_in,
        s.bytes_out,
        ratio,
        s.input_drops,
        s.unconfirmed,
    )
}

/// The endpoint's drops by reason as one line.
pub fn drops_line(ep: &SessionEndpoint) -> String {
    let s = ep.stats();
    let drops: Vec<String> = phyllo::endpoint::Discard::ALL
        .iter()
        .filter(|&&d| s.dropped(d) > 0)
        .map(|&d| format!("{} {}", d.name(), s.dropped(d)))
        .collect();
    format!(
        "endpoint: sessions established {}, ended {}, cookie replies {}, drops: {}",
        s.established,
        s.ended,
        s.cookie_replies,
        if drops.is_empty() {
            "none".into()
        } else {
            drops.join(", ")
        }
    )
}

/// Hexadecimal BLAKE3 digest.
pub fn hex_digest(d: &[u8]) -> String {
    d.iter().map(|b| format!("{b:02x}")).collect()
}

/// Fail unless `s` names a socket address.
pub fn parse_addr(s: &str) -> Result<SocketAddr> {
    use std::net::ToSocketAddrs;
    match s.to_socket_addrs() {
        Ok(mut it) => match it.next() {
            Some(a) => Ok(a),
            None => bail!("{s}: no address"),
        },
        Err(e) => bail!("{s}: not an address ({e})"),
    }
}

/// Read until `buf` is full or the input ends; the bytes read.
pub fn read_full(r: &mut dyn std::io::Read, buf: &mut [u8]) -> std::io::Result<usize> {
    let mut n = 0;
    while n < buf.len() {
        match r.read(&mut buf[n..]) {
            Ok(0) => break,
            Ok(k) => n += k,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(n)
}

/// Bytes a [`RunHash`] gathers before it hashes them.
pub const HASH_RUN: usize = 64 << 10;

/// BLAKE3 of a transfer fed in runs of [`HASH_RUN`] bytes.
///
/// The `blake3` crate hashes many 1024-byte chunks side by side (AVX2: eight at a time) only
/// within one `update` and from a chunk boundary; the rest of each update goes one 64-byte
/// block at a time. A transfer's messages carry 8 KiB less their header, so hashing each as it
/// comes put about one chunk in eight on the slow path, which cost as much as the other seven
/// (`perf` of `phyllo serve` in the bulk experiment: 8 % of its time in the one-block
/// compression beside 13 % in the wide one). Gathered into runs, almost every chunk goes the
/// wide way, for one copy of each byte into the run.
pub struct RunHash {
    hasher: blake3::Hasher,
    run: Vec<u8>,
}

impl Default for RunHash {
    fn default() -> Self {
        RunHash {
            hasher: blake3::Hasher::new(),
            run: Vec::with_capacity(HASH_RUN),
        }
    }
}

impl RunHash {
    /// Take `bytes` into the hash.
    pub fn update(&mut self, bytes: &[u8]) {
        if self.run.is_empty() && bytes.len() >= HASH_RUN {
            self.hasher.update(bytes);
            return;
        }
        self.run.extend_from_slice(bytes);
        if self.run.len() >= HASH_RUN {
            self.hasher.update(&self.run);
            self.run.clear();
        }
    }

    /// The hash of everything taken so far (the hash goes on from there).
    pub fn finalize(&mut self) -> [u8; 32] {
        self.hasher.update(&self.run);
        self.run.clear();
        *self.hasher.finalize().as_bytes()
    }
}

impl std::io::Write for RunHash {
    fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
        self.update(bytes);
        Ok(bytes.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

#[cfg(test)]
mod run_hash_tests {
    use super::{RunHash, HASH_RUN};

    #[test]
    fn a_run_hash_is_the_hash_of_its_bytes_in_any_pieces() {
        let data: Vec<u8> = (0..3 * HASH_RUN + 999)
            .map(|i| (i * 31 / 7) as u8)
            .collect();
        let whole = *blake3::hash(&data).as_bytes();
        for piece in [1, 1000, 8183, HASH_RUN, 2 * HASH_RUN + 5] {
            let mut h = RunHash::default();
            data.chunks(piece).for_each(|p| h.update(p));
            assert_eq!(h.finalize(), whole, "pieces of {piece}");
        }
        let mut h = RunHash::default();
        assert_eq!(h.finalize(), *blake3::hash(b"").as_bytes());
    }
}
