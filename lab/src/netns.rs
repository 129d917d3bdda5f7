//! Test hosts in Linux network namespaces joined by veth pairs, for the receive-livelock
//! experiments (seed 002's router between hosts): namespaces and links are created with iproute2's
//! `ip` command and removed when dropped. (Seed 002 is Mogul and Ramakrishnan, "Eliminating Receive
//! Livelock in an Interrupt-Driven Kernel".)
//!
//! A [`Netns`] is one named namespace (`ip netns add`); [`Netns::spawn_in`] and
//! [`Netns::in_ns`] run code on a thread that has entered it with `setns`. A socket belongs
//! to the namespace of the thread that created it, for life, so sockets made in
//! [`Netns::in_ns`] can be returned and used from any thread. A [`Veth`] joins two
//! namespaces with addresses on each end. Both need root (or `CAP_SYS_ADMIN` and
//! `CAP_NET_ADMIN`); [`available`] says whether this process has what it needs.
//!
//! A namespace lives on after `ip netns del` while a socket or thread still holds it, so
//! close the sockets made in it to have it (and its links) go away.
//!
//! For emulated paths (the `wan` experiment): [`Netns::ip`] and [`Netns::tc`] run iproute2 in
//! a namespace, [`Netns::shape_ingress`] puts a [`Tbf`] bottleneck on what enters it (through
//! an ifb device), [`Netns::qdisc_stats`] reads a qdisc's counters, [`Netns::dev_counters`] its
//! interfaces' counters, and [`Netns::command`] runs a program inside it.

use std::fs::File;
use std::io;
use std::net::Ipv4Addr;
use std::os::fd::AsRawFd;
use std::process::Command;
use std::sync::atomic::{AtomicU32, Ordering};
use std::thread::JoinHandle;

/// Where `ip netns add` puts the file that names a namespace.
const NETNS_RUN_DIR: &str = "/var/run/netns";

/// Linux's limit on interface names, without the terminating NUL (`IFNAMSIZ - 1`).
const MAX_IFNAME: usize = 15;

/// Why a namespace or link could not be made.
#[derive(thiserror::Error, Debug)]
pub enum NetnsError {
    /// `ip` (or `tc`, the other iproute2 command used here) is not on `PATH`.
    #[error("iproute2's `{0}` command was not found; install iproute2")]
    NoIproute2(&'static str),
    /// `ip` was refused for lack of privilege.
    #[error(
        "`{command}` was not permitted ({stderr}): network namespaces need root or \
         CAP_SYS_ADMIN/CAP_NET_ADMIN"
    )]
    NotPermitted {
        /// The command line that was run.
        command: String,
        /// What `ip` printed on standard error.
        stderr: String,
    },
    /// `ip` failed for another reason.
    #[error("`{command}` failed: {stderr}")]
    Failed {
        /// The command line that was run.
        command: String,
        /// What `ip` printed on standard error (or its exit status, if nothing).
        stderr: String,
    },
    /// A namespace or interface name that `ip` would refuse or misread.
    #[error("bad name: {0}")]
    BadName(String),
    /// Running `ip` failed for a reason other than its absence.
    #[error(transparent)]
    Io(#[from] io::Error),
}

/// Runs `ip ARGS`, capturing standard error, and maps failure to a [`NetnsError`].
fn ip(args: &[&str]) -> Result<(), NetnsError> {
    tool("ip", args).map(drop)
}

/// Runs `program ARGS` (`ip` or `tc`), capturing standard error, and maps failure to a
/// [`NetnsError`]; its standard output on success.
fn tool(program: &'static str, args: &[&str]) -> Result<String, NetnsError> {
    let command = format!("{program} {}", args.join(" "));
    let out = match Command::new(program).args(args).output() {
        Ok(out) => out,
        Err(e) if e.kind() == io::ErrorKind::NotFound => {
            return Err(NetnsError::NoIproute2(program))
        }
        Err(e) => return Err(e.into()),
    };
    if out.status.success() {
        return Ok(String::from_utf8_lossy(&out.stdout).into_owned());
    }
    let mut stderr = String::from_utf8_lossy(&out.stderr).trim().to_string();
    if stderr.is_empty() {
        stderr = out.status.to_string();
    }
    if stderr.contains("Operation not permitted") || stderr.contains("Permission denied") {
        Err(NetnsError::NotPermitted { command, stderr })
    } else {
        Err(NetnsError::Failed { command, stderr })
    }
}

/// Checks that `name` (a namespace or interface name) has 1 to `max` bytes, all of
/// `[A-Za-z0-9_.-]`, and does not start with `.` or `-`: a file name under [`NETNS_RUN_DIR`],
/// a valid Linux interface name, and one argument that `ip` reads as a name.
fn check_name(what: &str, name: &str, max: usize) -> Result<(), NetnsError> {
    let ok_chars = name
        .bytes()
        .all(|c| c.is_ascii_alphanumeric() || b"-_.".contains(&c));
    if name.is_empty() || name.len() > max || !ok_chars || name.starts_with(['.', '-']) {
        return Err(NetnsError::BadName(format!(
            "{what} name {name:?} ({} bytes): want 1 to {max} of [A-Za-z0-9_.-], not \
             starting with . or -",
            name.len()
        )));
    }
    Ok(())
}

/// Moves the calling thread into the network namespace that `ns` (a file under
/// [`NETNS_RUN_DIR`]) refers to.
fn enter(ns: &File) -> io::Result<()> {
    // SAFETY: the descriptor is open, borrowed from `ns` for the duration of the call; setns
    // only reads it and changes the network namespace of the calling thread alone.
    let r = unsafe { libc::setns(ns.as_raw_fd(), libc::CLONE_NEWNET) };
    if r == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

/// Whether this process can make network namespaces: `ip` is on `PATH` and a probe
/// namespace can be added and deleted. The error says why not, for a clear skip message.
pub fn available() -> Result<(), NetnsError> {
    static PROBE: AtomicU32 = AtomicU32::new(0);
    ip(&["-V"])?;
    let n = PROBE.fetch_add(1, Ordering::Relaxed);
    Netns::create(&format!("phyprobe{}-{n}", std::process::id())).map(drop)
}

/// One named network namespace, made by `ip netns add` and deleted (`ip netns del`) on drop.
#[derive(Debug)]
pub struct Netns {
    name: String,
}

impl Netns {
    /// Creates namespace `name` with its loopback up. A namespace of the same name left by a
    /// crashed run is deleted first, so the name must be unique to this run (include the
    /// process id).
    pub fn create(name: &str) -> Result<Netns, NetnsError> {
        check_name("namespace", name, 64)?;
        // A stale namespace usually isn't there: ignore "No such file" and the like.
        let _ = ip(&["netns", "del", name]);
        ip(&["netns", "add", name])?;
        let ns = Netns {
            name: name.to_string(),
        };
        ip(&["-n", name, "link", "set", "lo", "up"])?;
        Ok(ns)
    }

    /// The namespace's name, as `ip netns list` and `ip -n` know it.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Spawns a thread named `thread_name` that enters this namespace (`setns`) and then runs
    /// `f`. The thread's result is `f`'s, or the error from entering the namespace, in which
    /// case `f` is not run. Sockets `f` creates stay in this namespace for life.
    pub fn spawn_in<T: Send + 'static>(
        &self,
        thread_name: &str,
        f: impl FnOnce() -> T + Send + 'static,
    ) -> io::Result<JoinHandle<io::Result<T>>> {
        let file = File::open(format!("{NETNS_RUN_DIR}/{}", self.name))?;
        std::thread::Builder::new()
            .name(thread_name.to_string())
            .spawn(move || {
                enter(&file)?;
                drop(file);
                Ok(f())
            })
    }

    /// Runs `f` on a thread in this namespace and returns its result (see
    /// [`spawn_in`](Self::spawn_in)); a panic in `f` becomes an error.
    pub fn in_ns<T: Send + 'static>(
        &self,
        f: impl FnOnce() -> T + Send + 'static,
    ) -> io::Result<T> {
        let handle = self.spawn_in(&format!("in-{}", self.name), f)?;
        handle.join().unwrap_or_else(|panic| {
            let msg = (panic.downcast_ref::<&str>().copied().map(String::from))
                .or_else(|| panic.downcast_ref::<String>().cloned())
                .unwrap_or_default();
            let ns = &self.name;
            Err(io::Error::other(format!(
                "thread in namespace {ns} panicked: {msg}"
            )))
        })
    }
}

impl Netns {
    /// Runs `ip -n NAME ARGS`: a link, an address or a route of this namespace.
    pub fn ip(&self, args: &[&str]) -> Result<(), NetnsError> {
        let mut all = vec!["-n", self.name.as_str()];
        all.extend_from_slice(args);
        ip(&all)
    }

    /// Runs `tc -n NAME ARGS` (traffic control in this namespace) and returns what it printed.
    pub fn tc(&self, args: &[&str]) -> Result<String, NetnsError> {
        let mut all = vec!["-n", self.name.as_str()];
        all.extend_from_slice(args);
        tool("tc", &all)
    }

    /// A command that runs `program` in this namespace (`ip netns exec NAME program`, which
    /// execs it: the child's id is the program's). Add its arguments and spawn it.
    pub fn command(&self, program: impl AsRef<std::ffi::OsStr>) -> Command {
        let mut c = Command::new("ip");
        c.args(["netns", "exec", &self.name]).arg(program);
        c
    }

    /// Opens this namespace's `/proc/net/dev` (its interfaces' counters): the file stays bound
    /// to the namespace, so [`DevCounters::read`] can read it again from any thread.
    pub fn dev_counters(&self) -> io::Result<DevCounters> {
        let file = self.in_ns(|| File::open("/proc/thread-self/net/dev"))??;
        Ok(DevCounters { file })
    }

    /// Shapes what enters this namespace through each of `devs` (IPv4): an `ifb` device named
    /// `ifb` takes it (an `ingress` qdisc on each of `devs` with a `u32` filter matching every
    /// IPv4 packet and a `mirred` action redirecting it there), and a `tbf` qdisc on the ifb
    /// sends it on at `tbf`'s rate, dropping what finds its queue full. The ifb goes with the
    /// namespace.
    pub fn shape_ingress(&self, devs: &[&str], ifb: &str, tbf: &Tbf) -> Result<(), NetnsError> {
        check_name("interface", ifb, MAX_IFNAME)?;
        self.ip(&["link", "add", ifb, "type", "ifb"])?;
        self.ip(&["link", "set", ifb, "up"])?;
        for dev in devs {
            self.tc(&["qdisc", "add", "dev", dev, "ingress"])?;
            self.tc(&[
                "filter", "add", "dev", dev, "parent", "ffff:", "protocol", "ip", "u32", "match",
                "u32", "0", "0", "action", "mirred", "egress", "redirect", "dev", ifb,
            ])?;
        }
        let (rate, burst, limit) = (
            format!("{}bit", tbf.rate_bits_per_s),
            tbf.burst_bytes.to_string(),
            tbf.limit_bytes.to_string(),
        );
        self.tc(&[
            "qdisc", "add", "dev", ifb, "root", "tbf", "rate", &rate, "burst", &burst, "limit",
            &limit,
        ])
        .map(drop)
    }

    /// The counters of the root qdisc of `dev` (`tc -s -j qdisc show`).
    pub fn qdisc_stats(&self, dev: &str) -> Result<QdiscStats, NetnsError> {
        let out = self.tc(&["-s", "-j", "qdisc", "show", "dev", dev, "root"])?;
        let bad = |why: &str| NetnsError::Failed {
            command: format!("tc -n {} -s -j qdisc show dev {dev} root", self.name),
            stderr: format!("{why}: {}", out.trim()),
        };
        let v: serde_json::Value = serde_json::from_str(&out).map_err(|_| bad("not JSON"))?;
        let q = v.get(0).ok_or_else(|| bad("no qdisc"))?;
        let n = |k: &str| q.get(k).and_then(serde_json::Value::as_u64).unwrap_or(0);
        Ok(QdiscStats {
            bytes: n("bytes"),
            packets: n("packets"),
            drops: n("drops"),
            overlimits: n("overlimits"),
        })
    }
}

/// A token-bucket filter (`tc qdisc ... tbf`): a rate, the bucket (the most sent at once
/// above the rate) and the queue (bytes waiting for tokens; beyond it packets are dropped).
/// `tbf` counts each packet at its length on the device: the IP packet and its 14-byte
/// Ethernet header.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Tbf {
    /// The rate, bits per second.
    pub rate_bits_per_s: u64,
    /// The bucket, bytes (at least the largest packet).
    pub burst_bytes: u64,
    /// The queue, bytes.
    pub limit_bytes: u64,
}

/// What a qdisc has done (`tc -s qdisc show`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct QdiscStats {
    /// Bytes sent on.
    pub bytes: u64,
    /// Packets sent on (a segmented packet counts its segments).
    pub packets: u64,
    /// Packets dropped (a full queue).
    pub drops: u64,
    /// Times a packet had to wait for tokens.
    pub overlimits: u64,
}

/// One interface's counters (a line of `/proc/net/dev`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct DevCount {
    /// Bytes received.
    pub rx_bytes: u64,
    /// Packets received.
    pub rx_packets: u64,
    /// Bytes sent: each packet's length on the device (its Ethernet header included).
    pub tx_bytes: u64,
    /// Packets sent.
    pub tx_packets: u64,
}

/// A namespace's `/proc/net/dev`, opened inside it ([`Netns::dev_counters`]).
#[derive(Debug)]
pub struct DevCounters {
    file: File,
}

impl DevCounters {
    /// The counters of interface `dev` now.
    pub fn read(&mut self, dev: &str) -> io::Result<DevCount> {
        use std::io::{Read, Seek};
        self.file.rewind()?;
        let mut text = String::new();
        self.file.read_to_string(&mut text)?;
        text.lines()
            .find_map(|l| {
                let (name, rest) = l.split_once(':')?;
                (name.trim() == dev).then_some(rest)
            })
            .and_then(|rest| {
                let f: Vec<u64> = rest
                    .split_whitespace()
                    .map(str::parse)
                    .collect::<Result<_, _>>()
                    .ok()?;
                Some(DevCount {
                    rx_bytes: *f.first()?,
                    rx_packets: *f.get(1)?,
                    tx_bytes: *f.get(8)?,
                    tx_packets: *f.get(9)?,
                })
            })
            .ok_or_else(|| io::Error::new(io::ErrorKind::NotFound, format!("no interface {dev}")))
    }
}

impl Drop for Netns {
    fn drop(&mut self) {
        let _ = ip(&["netns", "del", &self.name]);
    }
}

/// A veth pair between two namespaces, each end addressed; deleted on drop (and with its
/// namespaces in any case).
#[derive(Debug)]
pub struct Veth {
    name: String,
    peer: String,
    ns_a: String,
}

impl Veth {
    /// The end in namespace `a`.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The end in namespace `b`: the name with `p` appended.
    pub fn peer_name(&self) -> &str {
        &self.peer
    }
}

impl Drop for Veth {
    fn drop(&mut self) {
        // Deleting one end deletes both.
        let _ = ip(&["-n", &self.ns_a, "link", "del", &self.name]);
    }
}

/// Joins namespaces `a` and `b` with a veth pair: interface `name` in `a` with address
/// `a_addr/prefix_len`, interface `name` + `p` in `b` with `b_addr/prefix_len`, both up.
/// `name` must leave room for the `p`: at most 14 bytes.
pub fn veth(
    name: &str,
    a: &Netns,
    a_addr: Ipv4Addr,
    b: &Netns,
    b_addr: Ipv4Addr,
    prefix_len: u8,
) -> Result<Veth, NetnsError> {
    let peer = format!("{name}p");
    check_name("interface", name, MAX_IFNAME)?;
    check_name("interface", &peer, MAX_IFNAME)?;
    // Both ends are made inside their namespaces, so nothing is ever left in the default
    // namespace (where a crashed run's leftover would collide with the next run's names).
    ip(&[
        "link", "add", name, "netns", &a.name, "type", "veth", "peer", "name", &peer, "netns",
        &b.name,
    ])?;
    let v = Veth {
        name: name.to_string(),
        peer,
        ns_a: a.name.clone(),
    };
    for (ns, dev, addr) in [(a, &v.name, a_addr), (b, &v.peer, b_addr)] {
        let cidr = format!("{addr}/{prefix_len}");
        ip(&["-n", &ns.name, "addr", "add", &cidr, "dev", dev])?;
        ip(&["-n", &ns.name, "link", "set", dev, "up"])?;
    }
    Ok(v)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::UdpSocket;
    use std::time::Duration;

    /// A UDP socket bound to `addr` (port 0) inside `ns`.
    fn bind_in(ns: &Netns, addr: Ipv4Addr) -> UdpSocket {
        ns.in_ns(move || UdpSocket::bind((addr, 0)))
            .unwrap()
            .unwrap()
    }

    fn skip_unless_available() -> bool {
        let r = available();
        if let Err(e) = &r {
            println!("SKIPPED: network namespaces unavailable: {e}");
        }
        r.is_err()
    }

    #[test]
    fn veth_pair_carries_udp_between_namespaces() {
        if skip_unless_available() {
            return;
        }
        let pid = std::process::id();
        let (na, nb) = (format!("phy{pid}a"), format!("phy{pid}b"));
        let (a, b) = (Netns::create(&na).unwrap(), Netns::create(&nb).unwrap());
        let (ip_a, ip_b) = (Ipv4Addr::new(10, 201, 0, 1), Ipv4Addr::new(10, 201, 0, 2));
        let v = veth(&format!("phy{pid}v"), &a, ip_a, &b, ip_b, 24).unwrap();
        assert_eq!(v.peer_name(), format!("{}p", v.name()));

        // The thread really is elsewhere.
        let link = || std::fs::read_link("/proc/thread-self/ns/net");
        assert_ne!(link().unwrap(), a.in_ns(link).unwrap().unwrap());

        let (sa, sb) = (bind_in(&a, ip_a), bind_in(&b, ip_b));
        let b_addr = sb.local_addr().unwrap();
        sb.set_read_timeout(Some(Duration::from_secs(2))).unwrap();
        sa.send_to(b"across", b_addr).unwrap();
        let mut buf = [0u8; 64];
        let (n, from) = sb.recv_from(&mut buf).unwrap();
        assert_eq!(
            (&buf[..n], from),
            (&b"across"[..], sa.local_addr().unwrap())
        );

        // A spawned thread's result comes back through the handle; a panic is an error.
        let h = b.spawn_in("port", move || sb.local_addr().map(|s| s.port()));
        assert_eq!(h.unwrap().join().unwrap().unwrap().unwrap(), b_addr.port());
        assert!(a.in_ns(|| panic!("on purpose")).is_err());

        // The default namespace cannot reach B: no route, or the datagram goes elsewhere.
        let sb = bind_in(&b, ip_b);
        sb.set_read_timeout(Some(Duration::from_millis(200)))
            .unwrap();
        let outside = UdpSocket::bind("0.0.0.0:0").unwrap();
        let sent = outside.send_to(b"leak", sb.local_addr().unwrap());
        let got = sb.recv_from(&mut buf);
        println!("default namespace -> B: send {sent:?}, receive {got:?}");
        assert!(got.is_err());

        let (vname, an) = (v.name().to_string(), a.name().to_string());
        drop(v);
        assert!(
            ip(&["-n", &an, "link", "show", &vname]).is_err(),
            "link outlived its Veth"
        );
        drop((sa, sb, a, b));
        let out = Command::new("ip").args(["netns", "list"]).output().unwrap();
        let list = String::from_utf8_lossy(&out.stdout);
        assert!(
            !list.contains(&na) && !list.contains(&nb),
            "left over: {list}"
        );
    }

    #[test]
    fn bad_names_are_refused() {
        let bad = |r: Result<_, NetnsError>| matches!(r, Err(NetnsError::BadName(_)));
        assert!(bad(check_name("interface", "abcdefghijklmnop", MAX_IFNAME)));
        assert!(check_name("interface", "abcdefghijklmno", MAX_IFNAME).is_ok());
        assert!(bad(Netns::create("a/b").map(drop)));
        if skip_unless_available() {
            return;
        }
        let c = Netns::create(&format!("phy{}c", std::process::id())).unwrap();
        let (x, y) = (Ipv4Addr::new(10, 202, 0, 1), Ipv4Addr::new(10, 202, 0, 2));
        // 16 bytes; and 15 bytes, whose peer (with `p` appended) would be 16.
        for name in ["abcdefghijklmnop", "abcdefghijklmno"] {
            assert!(bad(veth(name, &c, x, &c, y, 24).map(drop)), "{name}");
        }
    }
}
