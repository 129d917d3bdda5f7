//! The `wan` experiment's test bed: three network namespaces — A (the client), B (the middle:
//! the bottleneck and the relays), C (the server) — and the processes and threads that run in
//! them, every one removed or stopped when its guard is dropped, on every way out.

use crate::netns::{self, DevCounters, Netns, NetnsError, QdiscStats, Tbf, Veth};
use anyhow::{bail, Context, Result};
use std::io::{BufRead, BufReader};
use std::net::{Ipv4Addr, SocketAddr, UdpSocket};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdout, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// The client's address on the data link A–B.
pub const A_DATA: Ipv4Addr = Ipv4Addr::new(10, 78, 1, 1);
/// B's address on the data link: where the data relays listen.
pub const B_DATA: Ipv4Addr = Ipv4Addr::new(10, 78, 1, 2);
/// The prober's address on the probe link A–B.
pub const A_PROBE: Ipv4Addr = Ipv4Addr::new(10, 78, 3, 1);
/// B's address on the probe link: where the probe relay listens.
pub const B_PROBE: Ipv4Addr = Ipv4Addr::new(10, 78, 3, 2);
/// B's address on the link B–C.
pub const B_SERVER: Ipv4Addr = Ipv4Addr::new(10, 78, 2, 1);
/// The servers' address (C).
pub const C_SERVER: Ipv4Addr = Ipv4Addr::new(10, 78, 2, 2);

/// Bytes of a packet's headers below its UDP payload as the devices count them: Ethernet
/// (14), IPv4 (20), UDP (8).
pub const FRAME_HEADERS: u64 = 42;

/// Bytes of a full Ethernet frame (a 1500-byte packet and its 14-byte header).
pub const FRAME_BYTES: u64 = 1514;

/// The buffers every socket of the bed asks for, as phyllo's sockets do.
pub const SOCKET_BUFFER: usize = 8 << 20;

/// Bytes of a probe: its sequence number and its send time.
pub const PROBE_BYTES: usize = 16;

/// The three namespaces and their links; B shapes what enters it from A.
pub struct Bed {
    // Fields drop in order: A's counters (which hold A open) and the links before the
    // namespaces.
    /// A's `/proc/net/dev`.
    a_counters: Mutex<DevCounters>,
    _links: Vec<Veth>,
    /// The client's namespace.
    pub a: Netns,
    /// The middle.
    pub b: Netns,
    /// The server's namespace.
    pub c: Netns,
    /// The ifb device in B whose `tbf` is the bottleneck.
    pub ifb: String,
    /// The client's end of the data link (its counters count what the client sent).
    pub a_data_dev: String,
}

impl Bed {
    /// Build the bed: namespaces `phy<tag>wa`, `…wb`, `…wc`; veth pairs A–B for data
    /// (10.78.1.0/24), A–B for probes (10.78.3.0/24) and B–C (10.78.2.0/24), each end with
    /// segmentation offload off (`gso_max_segs 1`: the kernel cuts a segmented send into
    /// datagrams before the device, as a NIC would before the wire, so every counter and
    /// queue sees datagrams); and the bottleneck: what enters B from A (both links) goes
    /// through an ifb device whose `tbf` is `tbf`.
    pub fn create(tbf: &Tbf) -> Result<Bed, NetnsError> {
        netns::available()?;
        let tag = std::process::id() % 100_000;
        let a = Netns::create(&format!("phy{tag}wa"))?;
        let b = Netns::create(&format!("phy{tag}wb"))?;
        let c = Netns::create(&format!("phy{tag}wc"))?;
        let data = netns::veth(&format!("w{tag}a"), &a, A_DATA, &b, B_DATA, 24)?;
        let probe = netns::veth(&format!("w{tag}p"), &a, A_PROBE, &b, B_PROBE, 24)?;
        let server = netns::veth(&format!("w{tag}c"), &b, B_SERVER, &c, C_SERVER, 24)?;
        for (ns, dev) in [
            (&a, data.name()),
            (&b, data.peer_name()),
            (&a, probe.name()),
            (&b, probe.peer_name()),
            (&b, server.name()),
            (&c, server.peer_name()),
        ] {
            ns.ip(&["link", "set", dev, "gso_max_segs", "1"])?;
        }
        let ifb = format!("w{tag}i");
        b.shape_ingress(&[data.peer_name(), probe.peer_name()], &ifb, tbf)?;
        let a_counters = Mutex::new(a.dev_counters()?);
        Ok(Bed {
            a_data_dev: data.name().to_string(),
            ifb,
            a_counters,
            _links: vec![data, probe, server],
            a,
            b,
            c,
        })
    }

    /// UDP payload bytes the client's namespace has sent on the data link so far — the
    /// device's bytes less [`FRAME_HEADERS`] per packet (an ARP packet counts nothing) — and
    /// the packets.
    pub fn client_sent(&self) -> Result<(u64, u64)> {
        let mut c = self
            .a_counters
            .lock()
            .map_err(|_| anyhow::anyhow!("counters poisoned"))?;
        let d = c.read(&self.a_data_dev)?;
        Ok((
            d.tx_bytes.saturating_sub(FRAME_HEADERS * d.tx_packets),
            d.tx_packets,
        ))
    }

    /// The bottleneck's counters.
    pub fn bottleneck(&self) -> Result<QdiscStats> {
        Ok(self.b.qdisc_stats(&self.ifb)?)
    }

    /// A UDP socket bound to `(ip, 0)` in `ns`, with [`SOCKET_BUFFER`] asked for its buffers
    /// (as phyllo's sockets ask).
    pub fn socket(ns: &Netns, ip: Ipv4Addr) -> Result<UdpSocket> {
        let s = ns.in_ns(move || UdpSocket::bind((ip, 0)))??;
        let r = socket2::SockRef::from(&s);
        let _ = r.set_recv_buffer_size(SOCKET_BUFFER);
        let _ = r.set_send_buffer_size(SOCKET_BUFFER);
        Ok(s)
    }
}

/// Whether a test bed that could not be built means this machine cannot run the experiment
/// (no iproute2, no privilege, a kernel without the qdiscs, filters or devices it needs)
/// rather than a bug.
pub fn missing_here(e: &NetnsError) -> bool {
    match e {
        NetnsError::NoIproute2(_) | NetnsError::NotPermitted { .. } => true,
        NetnsError::Failed { stderr, .. } => {
            let s = stderr.to_lowercase();
            [
                "unknown",
                "not supported",
                "no such file",
                "not found",
                "error talking to the kernel",
            ]
            .iter()
            .any(|w| s.contains(w))
        }
        _ => false,
    }
}

/// A child process in a namespace, stopped (SIGINT, then killed) and reaped when dropped.
pub struct Proc {
    child: Child,
    stdout: Option<BufReader<ChildStdout>>,
    what: String,
    log: PathBuf,
}

impl Proc {
    /// Spawn `cmd` (stdin null, stdout piped, stderr to the file `log`).
    pub fn spawn(mut cmd: Command, what: &str, log: &Path) -> Result<Proc> {
        let err =
            std::fs::File::create(log).with_context(|| format!("creating {}", log.display()))?;
        let mut child = cmd
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(err)
            .spawn()
            .with_context(|| format!("starting {what}"))?;
        let stdout = child.stdout.take().map(BufReader::new);
        Ok(Proc {
            child,
            stdout,
            what: what.to_string(),
            log: log.to_path_buf(),
        })
    }

    /// The first line the process prints (an address, with `--print-addr`).
    pub fn first_line(&mut self) -> Result<String> {
        let mut line = String::new();
        if let Some(out) = &mut self.stdout {
            out.read_line(&mut line)
                .with_context(|| format!("reading {}'s first line", self.what))?;
        }
        if line.trim().is_empty() {
            let _ = self.child.kill();
            let _ = self.child.wait();
            bail!("{} did not start: {}", self.what, self.log_tail());
        }
        Ok(line.trim().to_string())
    }

    /// Whether it has exited (and how).
    pub fn try_wait(&mut self) -> Result<Option<std::process::ExitStatus>> {
        Ok(self.child.try_wait()?)
    }

    /// What it printed on stdout after its first line (read once it has exited).
    pub fn rest_of_stdout(&mut self) -> String {
        use std::io::Read;
        let mut s = String::new();
        if let Some(out) = &mut self.stdout {
            let _ = out.read_to_string(&mut s);
        }
        s
    }

    /// The last lines of its stderr log.
    pub fn log_tail(&self) -> String {
        let text = std::fs::read_to_string(&self.log).unwrap_or_default();
        let lines: Vec<&str> = text.lines().collect();
        lines[lines.len().saturating_sub(3)..].join(" / ")
    }

    /// Its whole stderr log.
    pub fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// Ask it to stop (SIGINT: the product's commands print their statistics then), wait up
    /// to two seconds, then kill it; reaped either way.
    pub fn stop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            if let Ok(pid) = i32::try_from(self.child.id()) {
                // SAFETY: kill(2) with a signal number on our own child's process id.
                unsafe {
                    libc::kill(pid, libc::SIGINT);
                }
            }
            let t = Instant::now();
            while t.elapsed() < Duration::from_secs(2) {
                if let Ok(Some(_)) = self.child.try_wait() {
                    return;
                }
                std::thread::sleep(Duration::from_millis(10));
            }
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    /// Kill it at once (reaped).
    pub fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        self.kill();
    }
}

/// What a relay said it did when it stopped (`relay stopping: …`); absent counts are 0.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RelayCounts {
    /// Datagrams received, both directions.
    pub received: u64,
    /// Lost by its loss draw.
    pub lost: u64,
    /// Forwarded.
    pub forwarded: u64,
    /// Sends that failed.
    pub send_failed: u64,
}

impl RelayCounts {
    /// Parse the relay's stopping line from its log.
    pub fn parse(log: &str) -> Option<RelayCounts> {
        let line = log.lines().find_map(|l| {
            l.split_once("relay stopping:")
                .map(|(_, rest)| rest.to_string())
        })?;
        let count = |suffix: &str| -> u64 {
            line.split(", ")
                .find_map(|item| {
                    let item = item.trim();
                    let (n, what) = item.split_once(' ')?;
                    what.starts_with(suffix).then(|| n.parse().ok()).flatten()
                })
                .unwrap_or(0)
        };
        Some(RelayCounts {
            received: count("datagrams received"),
            lost: count("lost"),
            forwarded: count("forwarded"),
            send_failed: count("sends failed"),
        })
    }
}

/// Round trips of small UDP probes through a relay of their own in B (the same one-way delay
/// as the data's, no loss) to an echo in C: the probes cross the bottleneck's queue with the
/// data, so their round trip under load less the idle one is the queue's delay.
pub struct Prober {
    stop: Arc<AtomicBool>,
    /// (when the probe was sent, its round trip in ms), in order of return.
    samples: Arc<Mutex<Vec<(Instant, f64)>>>,
    threads: Vec<JoinHandle<std::io::Result<()>>>,
    relay: Option<Proc>,
}

impl Prober {
    /// Start the echo in C, the probe relay in B (`relay_args`: its impairments) and the
    /// prober in A, one probe every `every`.
    pub fn start(
        bed: &Bed,
        exe: &Path,
        relay_args: &[String],
        every: Duration,
        log: &Path,
    ) -> Result<Prober> {
        // Built first, so that a failure below stops what has started (its drop).
        let mut p = Prober {
            stop: Arc::new(AtomicBool::new(false)),
            samples: Arc::new(Mutex::new(Vec::new())),
            threads: Vec::new(),
            relay: None,
        };
        let echo = bed.c.in_ns(|| UdpSocket::bind((C_SERVER, 0)))??;
        let echo_addr = echo.local_addr()?;
        echo.set_read_timeout(Some(Duration::from_millis(50)))?;
        {
            let stop = Arc::clone(&p.stop);
            p.threads
                .push(std::thread::spawn(move || -> std::io::Result<()> {
                    let mut buf = [0u8; 64];
                    while !stop.load(Ordering::Relaxed) {
                        if let Ok((n, from)) = echo.recv_from(&mut buf) {
                            let _ = echo.send_to(&buf[..n], from);
                        }
                    }
                    Ok(())
                }));
        }
        let mut cmd = bed.b.command(exe);
        cmd.args(["relay", "--listen", &format!("{B_PROBE}:0")])
            .args(["--to", &echo_addr.to_string(), "--print-addr"])
            .args(relay_args);
        let relay = p.relay.insert(Proc::spawn(cmd, "the probe relay", log)?);
        let relay_addr: SocketAddr = relay
            .first_line()?
            .parse()
            .context("the probe relay's address")?;
        let probe = bed.a.in_ns(|| UdpSocket::bind((A_PROBE, 0)))??;
        probe.connect(relay_addr)?;
        {
            let stop = Arc::clone(&p.stop);
            let samples = Arc::clone(&p.samples);
            p.threads
                .push(std::thread::spawn(move || -> std::io::Result<()> {
                    let epoch = Instant::now();
                    let mut next = epoch;
                    let mut seq = 0u64;
                    let mut buf = [0u8; 64];
                    while !stop.load(Ordering::Relaxed) {
                        let now = Instant::now();
                        if now >= next {
                            let mut p = [0u8; PROBE_BYTES];
                            p[..8].copy_from_slice(&seq.to_le_bytes());
                            let at = (now - epoch).as_nanos() as u64;
                            p[8..].copy_from_slice(&at.to_le_bytes());
                            let _ = probe.send(&p);
                            seq += 1;
                            next += every;
                            continue;
                        }
                        probe
                            .set_read_timeout(Some((next - now).max(Duration::from_micros(100))))?;
                        if let Ok(n) = probe.recv(&mut buf) {
                            if n == 16 {
                                let mut at = [0u8; 8];
                                at.copy_from_slice(&buf[8..16]);
                                let sent = epoch + Duration::from_nanos(u64::from_le_bytes(at));
                                let rtt = sent.elapsed().as_secs_f64() * 1e3;
                                if let Ok(mut s) = samples.lock() {
                                    s.push((sent, rtt));
                                }
                            }
                        }
                    }
                    Ok(())
                }));
        }
        Ok(p)
    }

    /// The round trips (ms) of the probes sent in `[from, to]`, each with its send time in
    /// seconds after `from`.
    pub fn between(&self, from: Instant, to: Instant) -> Vec<(f64, f64)> {
        let s = self.samples.lock().map(|s| s.clone()).unwrap_or_default();
        let mut v: Vec<(f64, f64)> = s
            .into_iter()
            .filter(|(t, _)| *t >= from && *t <= to)
            .map(|(t, rtt)| ((t - from).as_secs_f64(), rtt))
            .collect();
        v.sort_by(|x, y| x.0.total_cmp(&y.0));
        v
    }
}

impl Drop for Prober {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        for t in self.threads.drain(..) {
            let _ = t.join();
        }
    }
}

/// A folder removed when dropped.
pub struct TempDir(pub PathBuf);

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_relays_stopping_line_is_read() {
        let log = "relaying 1.2.3.4:5 -> 6.7.8.9:10: loss 0.01 delay 25 ms\n\
                   relay stopping: 36942 datagrams received from 1 clients, 371 lost, 0 \
                   dropped by a full queue, 0 duplicated, 0 reordered, 0 corrupted, 36571 \
                   forwarded, 2 sends failed, 0 still held\n";
        let c = RelayCounts::parse(log).unwrap();
        assert_eq!(
            c,
            RelayCounts {
                received: 36942,
                lost: 371,
                forwarded: 36571,
                send_failed: 2
            }
        );
        assert!(RelayCounts::parse("nothing").is_none());
    }
}
