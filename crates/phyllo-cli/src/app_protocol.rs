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
