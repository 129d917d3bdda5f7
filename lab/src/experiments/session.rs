//! `session`: sessions between processes — the handshake's round trips, a sealed accelerated
//! session's latency against raw UDP across two processes (beside the server's own loop, and
//! as a plain ping-pong between two processes), the memory of an idle session, and
//! the sessions an attack on a live endpoint kills.
//!
//! - **Handshake round trips**: two endpoints on the in-memory network with a 1 ms one-way
//!   delay; the time from `connect` to the initiator's session, over the round-trip time
//!   (exact: virtual time). Also reported: the handshake over loopback, as `connect` measures
//!   it.
//! - **RTT vs raw UDP**: `phyllo-lab serve-raw-echo --busy-poll --accel` (`phyllo serve` with a
//!   raw-UDP echo in the same loop) in a child process answers both session pings and raw UDP
//!   datagrams in one loop; this process busy-polls and alternates blocks of raw and session pings
//!   of 32 bytes (an odd number of pairs); the ratio is the median of the pairs' ratios of
//!   median pings ([`crate::stats`]).
//! - **RTT vs plain UDP** (issue 28): the same session pings against a `phyllo serve
//!   --busy-poll --accel` child, interleaved with pings of a plain UDP ping-pong against a
//!   `phyllo-lab udp-echo --busy-poll` child ([`crate::udp_echo`]: two processes doing nothing
//!   else); only the two processes of a block run during it, the other child stopped (SIGSTOP,
//!   then SIGCONT), as three busy-polling processes would share two cores. The same ratio of
//!   medians over an odd number of block pairs.
//! - **Bytes per idle session**: a `phyllo serve` child allowing 10 000 keys (1 000 with
//!   `--quick`) takes one session from each (a handshake and one ping); its resident set
//!   growth over the sessions, from `/proc/PID/statm`.
//! - **Attack**: `crate::attack` (mutations, replays, forged identifications, a
//!   spoofed handshake flood) against a server with four live sessions, layered and
//!   accelerated; a session is lost if an end reported it ended or it stopped delivering.

use crate::attack::{self, AttackConfig};
use crate::report::{Ctx, Experiment, Outcome, Section, Table};
use crate::stats::{median, ratio_summary};
use anyhow::{bail, Context, Result};
use phyllo::endpoint::{Event, SessionEndpoint};
use phyllo::session::StaticKey;
use phyllo::testing::memlink::Faults;
use phyllo::testing::net::SessionNet;
use phyllo::{PeerId, Time};
use phyllo_cli::transfer::PING;
use phyllo_net::SessionSocket;
use std::io::{BufRead, BufReader};
use std::net::{SocketAddr, UdpSocket};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// The session experiment.
pub struct Session;

const STACK: &str = phyllo_net::DEFAULT_STACK;

impl Experiment for Session {
    fn name(&self) -> &'static str {
        "session"
    }

    fn title(&self) -> &'static str {
        "Sessions between processes: handshake, latency, idle memory, attack"
    }

    fn run(&self, ctx: &Ctx) -> Result<Outcome> {
        let mut figures = Vec::new();
        let mut text = vec![format!(
            "Sessions run `{STACK}` (sealed: AES-256-GCM), accelerated unless said otherwise, \
             keys from a Noise IK handshake per session."
        )];
        let mut table = Table {
            title: "Figures".into(),
            headers: ["figure", "value", "goal", "how"]
                .map(String::from)
                .to_vec(),
            rows: vec![],
        };

        let rtts = handshake_rtts()?;
        figures.push(("session.handshake_rtts".into(), rtts));
        table.rows.push(row(
            "session.handshake_rtts",
            format!("{rtts:.2}"),
            "virtual time, 1 ms each way",
        ));

        let dir = std::env::temp_dir().join(format!("phyllo-session-exp-{}", std::process::id()));
        std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
        let result = processes(ctx, &dir, &mut figures, &mut table, &mut text);
        let _ = std::fs::remove_dir_all(&dir);
        result?;

        let mut lost = 0;
        let mut attack_table = Table {
            title: "The attack on a live endpoint (four established sessions)".into(),
            headers: [
                "path",
                "datagrams injected",
                "sessions lost",
                "newcomer got a session",
                "messages after / delivered",
                "cookie replies",
                "server drops by reason",
            ]
            .map(String::from)
            .to_vec(),
            rows: vec![],
        };
        for accel in [false, true] {
            let r = attack::run(&AttackConfig::new(accel))?;
            lost += r.sessions_lost;
            attack_table.rows.push(vec![
                if accel { "accelerated" } else { "layered" }.into(),
                r.injected.to_string(),
                r.sessions_lost.to_string(),
                if r.newcomer_established { "yes" } else { "no" }.into(),
                format!("{} / {}", r.after.0, r.after.1),
                r.cookie_replies.to_string(),
                r.server_drops
                    .iter()
                    .map(|(n, c)| format!("{n} {c}"))
                    .collect::<Vec<_>>()
                    .join(", "),
            ]);
        }
        figures.push(("serve.attack_sessions_lost".into(), lost as f64));
        table.rows.push(row(
            "serve.attack_sessions_lost",
            lost.to_string(),
            "layered + accelerated attack runs",
        ));
        Ok(Outcome::Done(Section {
            text,
            tables: vec![table, attack_table],
            plots: vec![],
            figures,
        }))
    }
}

/// A row of the figures table: the figure, its value, its goal (from the report's goals, so
/// the table never writes one again) and how it was measured.
fn row(name: &str, value: String, how: &str) -> Vec<String> {
    let goal = crate::report::goals::goal(name).map_or(String::new(), |g| g.text());
    vec![format!("`{name}`"), value, goal, how.into()]
}

/// Handshake time over the round-trip time, on the in-memory network.
fn handshake_rtts() -> Result<f64> {
    let sk = StaticKey::generate()?;
    let ck = StaticKey::generate()?;
    let mk = |k: &StaticKey, allowed: Vec<_>, seed: u8| {
        SessionEndpoint::builder(k.clone())
            .allow_all(allowed)
            .stack(STACK)
            .accelerate(true)
            .seed([seed; 32])
            .build()
    };
    let one_way = Duration::from_millis(1);
    let mut net: SessionNet = SessionNet::new(Faults::none(one_way), 1);
    let s_addr: SocketAddr = "10.0.0.1:1".parse()?;
    net.add(s_addr, mk(&sk, vec![ck.public()], 1)?);
    let c = net.add("10.0.0.2:1".parse()?, mk(&ck, vec![], 2)?);
    net.nodes[c].ep.connect(Time::ZERO, sk.public(), s_addr);
    net.run_until(Time::ZERO + Duration::from_secs(1));
    let Some((t, _)) = net.nodes[c]
        .events
        .iter()
        .find(|(_, e)| matches!(e, Event::Established { .. }))
    else {
        bail!("no session on the in-memory network");
    };
    Ok(t.as_nanos() as f64 / (2 * one_way.as_nanos()) as f64)
}

/// A child process, killed when dropped.
pub(super) struct KillOnDrop(pub(super) Child);

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// `phyllo serve ARGS` as a child (which must `--print-addr`), and the first line it prints.
pub(super) fn spawn_serve(args: &[&str]) -> Result<(KillOnDrop, String)> {
    spawn_lab("serve", args, 1)
}

/// `phyllo-lab COMMAND ARGS` as a child, and the first `lines` lines it prints, joined by
/// spaces.
fn spawn_lab(command: &str, args: &[&str], lines: usize) -> Result<(KillOnDrop, String)> {
    let exe = std::env::current_exe().context("finding the phyllo-lab executable")?;
    let mut child = Command::new(exe)
        .arg(command)
        .args(args)
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .context("starting phyllo serve")?;
    let mut out = BufReader::new(child.stdout.take().context("no stdout")?);
    let mut got = Vec::new();
    for _ in 0..lines {
        let mut line = String::new();
        out.read_line(&mut line)
            .context("reading the server's address")?;
        if line.trim().is_empty() {
            bail!("phyllo-lab {command} did not start");
        }
        got.push(line.trim().to_string());
    }
    Ok((KillOnDrop(child), got.join(" ")))
}

/// `phyllo serve` on a loopback port, accelerated, with the static key in `key` and the peer
/// `allow` (a public key file) allowed, plus `extra`: the child and its address line.
pub(super) fn spawn_local_serve(
    key: &str,
    allow: &str,
    extra: &[&str],
) -> Result<(KillOnDrop, String)> {
    let mut args = vec![
        "--listen",
        "127.0.0.1:0",
        "--print-addr",
        "--accel",
        "--key",
        key,
        "--allow",
        allow,
    ];
    args.extend_from_slice(extra);
    spawn_serve(&args)
}

fn rss_bytes(pid: u32) -> Result<u64> {
    let statm =
        std::fs::read_to_string(format!("/proc/{pid}/statm")).context("reading /proc/PID/statm")?;
    let pages: u64 = statm
        .split_whitespace()
        .nth(1)
        .context("statm")?
        .parse()
        .context("statm")?;
    Ok(pages * 4096)
}

/// The two-process measurements: the RTT ratios and idle-session memory.
fn processes(
    ctx: &Ctx,
    dir: &Path,
    figures: &mut Vec<(String, f64)>,
    table: &mut Table,
    text: &mut Vec<String>,
) -> Result<()> {
    if super::phyllo_exe().is_none() {
        text.push("Two-process figures skipped: not run from the `phyllo` executable.".into());
        return Ok(());
    }
    let sk = StaticKey::generate()?;
    let ck = StaticKey::generate()?;
    let skf = dir.join("server");
    phyllo_net::keys::write_pair(&skf, &sk)?;
    phyllo_net::keys::write_pair(&dir.join("client"), &ck)?;
    let cpub = phyllo_net::keys::public_path(&dir.join("client"));
    // RTT: session pings and raw UDP pings against the same server loop.
    {
        let (_server, addrs) = spawn_lab(
            "serve-raw-echo",
            &[
                "--raw-echo",
                "127.0.0.1:0",
                "--busy-poll",
                "--listen",
                "127.0.0.1:0",
                "--print-addr",
                "--accel",
                "--key",
                skf.to_str().unwrap_or_default(),
                "--allow",
                cpub.to_str().unwrap_or_default(),
            ],
            2,
        )?;
        let mut it = addrs.split_whitespace();
        let raw_addr: SocketAddr = it.next().context("raw address")?.parse()?;
        let s_addr: SocketAddr = it.next().context("address")?.parse()?;
        let (mut node, p) = busy_session(&ck, &sk, s_addr)?;
        let handshake_us = node
            .endpoint()
            .peer_stats(p)
            .and_then(|s| s.handshake_time)
            .unwrap_or_default()
            .as_secs_f64()
            * 1e6;
        let raw = busy_udp(raw_addr)?;
        // Pairs of blocks (raw, then session): an odd number, so the median is one pair's.
        let (blocks, per) = if ctx.quick { (7, 500) } else { (21, 2000) };
        let mut raw_rtts = Vec::new();
        let mut ses_rtts = Vec::new();
        // Each block's median ping, µs.
        let (mut raw_blocks, mut ses_blocks) = (Vec::new(), Vec::new());
        let msg = ping_message();
        let mut buf = [0u8; 2048];
        for b in 0..blocks * 2 {
            let (raw_from, ses_from) = (raw_rtts.len(), ses_rtts.len());
            // Warm-up pings are left out of each block.
            for i in 0..per + 50 {
                let t = Instant::now();
                if b % 2 == 0 {
                    udp_ping(&raw, &msg, &mut buf).context("raw UDP echo")?;
                } else {
                    session_ping(&mut node, p, &msg)?;
                }
                if i >= 50 {
                    let rtt = t.elapsed().as_secs_f64() * 1e6;
                    if b % 2 == 0 {
                        raw_rtts.push(rtt);
                    } else {
                        ses_rtts.push(rtt);
                    }
                }
            }
            if b % 2 == 0 {
                raw_blocks.push(median(&raw_rtts[raw_from..]));
            } else {
                ses_blocks.push(median(&ses_rtts[ses_from..]));
            }
        }
        let (r, s) = (median(&raw_rtts), median(&ses_rtts));
        let ratio = ratio_summary(&ses_blocks, &raw_blocks);
        figures.push(("serve.rtt_ratio_vs_raw_udp".into(), ratio.median));
        figures.push(("serve.rtt_us".into(), s));
        figures.push(("serve.raw_udp_rtt_us".into(), r));
        figures.push(("serve.handshake_us".into(), handshake_us));
        table.rows.push(row(
            "serve.rtt_ratio_vs_raw_udp",
            format!(
                "{} (medians of all pings: {s:.1} µs vs {r:.1} µs)",
                ratio.show(2, "block pairs")
            ),
            &format!(
                "two processes, busy-poll, {blocks} pairs of blocks of {per} alternating; the \
                 median of the pairs' ratios of median pings (smallest–largest pair)"
            ),
        ));
        table.rows.push(row(
            "serve.handshake_us",
            format!("{handshake_us:.0}"),
            "loopback, connect to session up",
        ));
    }
    plain_udp_rtt(ctx, &skf, &cpub, &sk, &ck, figures, table)?;
    // Idle sessions.
    let n = if ctx.quick { 1000 } else { 10_000 };
    let keys: Vec<StaticKey> = (0..n)
        .map(|_| StaticKey::generate())
        .collect::<Result<_, _>>()?;
    let allow = dir.join("allowed");
    std::fs::write(
        &allow,
        keys.iter()
            .map(|k| format!("{}\n", k.public()))
            .collect::<String>(),
    )?;
    let (server, addr) = spawn_serve(&[
        "--listen",
        "127.0.0.1:0",
        "--print-addr",
        "--accel",
        "--key",
        skf.to_str().unwrap_or_default(),
        "--allow-file",
        allow.to_str().unwrap_or_default(),
    ])?;
    let s_addr: SocketAddr = addr.parse()?;
    let pid = server.0.id();
    // One session first, so that what every session shares (code pages, pools) is in.
    let mut established = 0;
    let mut before = 0;
    for (i, k) in keys.iter().enumerate() {
        if i == 1 {
            std::thread::sleep(Duration::from_millis(100));
            before = rss_bytes(pid)?;
        }
        let mut node = SessionSocket::bind("127.0.0.1:0".parse()?, k.clone(), vec![], STACK, true)?;
        let now = node.now();
        let p = node.endpoint_mut().connect(now, sk.public(), s_addr);
        let now = node.now();
        let _ = node.endpoint_mut().send(now, p, &[PING, 1, 2, 3]);
        let until = Instant::now() + Duration::from_secs(3);
        while Instant::now() < until {
            node.pump(Duration::from_millis(2))?;
            if node.endpoint_mut().poll_delivery_with(p, |_| ()).is_some() {
                established += 1;
                // Stay until the answer is acknowledged: the session is left idle, not with
                // an answer outstanding.
                let until = Instant::now() + Duration::from_millis(20);
                while Instant::now() < until && !node.endpoint().is_quiet(p) {
                    node.pump(Duration::from_millis(1))?;
                }
                break;
            }
        }
    }
    std::thread::sleep(Duration::from_millis(200));
    let after = rss_bytes(pid)?;
    let sessions = (established - 1).max(1) as f64;
    let per = after.saturating_sub(before) as f64 / sessions;
    drop(server);
    figures.push(("serve.bytes_per_idle_session".into(), per));
    figures.push(("serve.idle_sessions".into(), established as f64));
    table.rows.push(row(
        "serve.bytes_per_idle_session",
        format!("{per:.0}"),
        &format!(
            "RSS growth of a `phyllo serve` child over {} sessions (of {n} attempted)",
            established - 1
        ),
    ));
    Ok(())
}

/// Pings left out at the start of every block of the plain comparison: the first after a
/// child is continued meet cold caches and a scheduler still placing it.
const WARM_UP: usize = 50;

/// The session round trip against a plain UDP ping-pong, interleaved in one run
/// (`serve.rtt_ratio_vs_plain_udp`, issue 28; `serve.plain_udp_rtt_us`).
///
/// Two children: `phyllo serve --busy-poll --accel` (the product's server in its latency
/// loop, with no raw socket polled beside it, unlike the `serve-raw-echo` of
/// `serve.rtt_ratio_vs_raw_udp`) and `phyllo-lab udp-echo --busy-poll` ([`crate::udp_echo`]:
/// one socket, every datagram echoed, nothing else). This process busy-polls too (its session
/// socket connected to the server once the session is up, as `phyllo connect`'s is), and
/// alternates blocks of plain UDP pings and session pings of 32 bytes (an odd number of
/// pairs, the first pings of each block left out); the figure is the median of the pairs'
/// ratios of median pings ([`crate::stats`]).
///
/// CPU: both children spinning beside this spinning process would be three busy processes,
/// and on a two-core machine each measurement would share its cores with the idle third. So
/// during a block only its two processes run: the other child is stopped (SIGSTOP) before the
/// block and continued (SIGCONT) after it, by a guard ([`Paused`]) that continues it on every
/// way out of the block, errors included; both children are killed when dropped
/// ([`KillOnDrop`]), after the guard has continued them.
fn plain_udp_rtt(
    ctx: &Ctx,
    skf: &Path,
    cpub: &Path,
    sk: &StaticKey,
    ck: &StaticKey,
    figures: &mut Vec<(String, f64)>,
    table: &mut Table,
) -> Result<()> {
    let key = skf.to_str().context("the server key's path is not UTF-8")?;
    let allow = cpub
        .to_str()
        .context("the client key's path is not UTF-8")?;
    let (serve, s_addr) = spawn_local_serve(key, allow, &["--busy-poll"])?;
    let s_addr: SocketAddr = s_addr.parse().context("the server's address")?;
    let (mut node, p) = busy_session(ck, sk, s_addr)?;
    // The echo starts once the session is up, so the handshake has only the server beside
    // this process.
    let (echo, e_addr) = spawn_lab(
        "udp-echo",
        &["--listen", "127.0.0.1:0", "--busy-poll", "--print-addr"],
        1,
    )?;
    let e_addr: SocketAddr = e_addr.parse().context("the echo's address")?;
    let plain = busy_udp(e_addr)?;
    // Pairs of blocks (plain, then session): an odd number, so the median is one pair's.
    let (pairs, per) = if ctx.quick { (7, 500) } else { (21, 2000) };
    let msg = ping_message();
    let mut buf = [0u8; 2048];
    let mut plain_rtts = Vec::with_capacity(pairs * per);
    let mut ses_rtts = Vec::with_capacity(pairs * per);
    // Each block's median ping, µs.
    let (mut plain_blocks, mut ses_blocks) = (Vec::new(), Vec::new());
    for b in 0..pairs * 2 {
        let is_plain = b % 2 == 0;
        // Only this block's child runs beside this process; the other is continued when the
        // guard drops, at the end of the block or on an error.
        let _paused = Paused::stop(if is_plain { &serve.0 } else { &echo.0 })?;
        let rtts = if is_plain {
            &mut plain_rtts
        } else {
            &mut ses_rtts
        };
        let from = rtts.len();
        for i in 0..per + WARM_UP {
            let t = Instant::now();
            if is_plain {
                udp_ping(&plain, &msg, &mut buf).context("plain UDP echo")?;
            } else {
                session_ping(&mut node, p, &msg)?;
            }
            if i >= WARM_UP {
                rtts.push(t.elapsed().as_secs_f64() * 1e6);
            }
        }
        let m = median(&rtts[from..]);
        if is_plain {
            plain_blocks.push(m);
        } else {
            ses_blocks.push(m);
        }
    }
    drop((echo, serve));
    let (u, s) = (median(&plain_rtts), median(&ses_rtts));
    let ratio = ratio_summary(&ses_blocks, &plain_blocks);
    figures.push(("serve.rtt_ratio_vs_plain_udp".into(), ratio.median));
    figures.push(("serve.plain_udp_rtt_us".into(), u));
    table.rows.push(row(
        "serve.rtt_ratio_vs_plain_udp",
        format!(
            "{} (medians of all pings: {s:.1} µs vs {u:.1} µs)",
            ratio.show(2, "block pairs")
        ),
        &format!(
            "`phyllo serve --busy-poll` against a plain UDP echo doing nothing else, each child \
             alone beside this busy-polling process (the other stopped), {pairs} pairs of \
             blocks of {per} alternating; the median of the pairs' ratios of median pings \
             (smallest–largest pair)"
        ),
    ));
    Ok(())
}

/// A child stopped (SIGSTOP) until this guard is dropped, which continues it (SIGCONT).
struct Paused(libc::pid_t);

impl Paused {
    /// Stop `child`. Its process id stays its own while it is unreaped: the `Child` is held
    /// (in a [`KillOnDrop`]) at least as long as this guard.
    fn stop(child: &Child) -> Result<Self> {
        let pid = libc::pid_t::try_from(child.id()).context("a child's process id")?;
        // SAFETY: kill(2) with a valid signal number, on our own unreaped child.
        if unsafe { libc::kill(pid, libc::SIGSTOP) } != 0 {
            return Err(std::io::Error::last_os_error()).context("stopping a child (SIGSTOP)");
        }
        Ok(Paused(pid))
    }
}

impl Drop for Paused {
    fn drop(&mut self) {
        // SAFETY: as in `stop`. A failure leaves a stopped child, which `KillOnDrop` still
        // kills (SIGKILL ends a stopped process).
        unsafe {
            libc::kill(self.0, libc::SIGCONT);
        }
    }
}

/// A busy-polling session client on a loopback port, its session with the server `sk` at
/// `addr` established (within 5 s).
fn busy_session(
    ck: &StaticKey,
    sk: &StaticKey,
    addr: SocketAddr,
) -> Result<(SessionSocket, PeerId)> {
    let mut node = SessionSocket::bind("127.0.0.1:0".parse()?, ck.clone(), vec![], STACK, true)?;
    node.set_busy_poll(true);
    let now = node.now();
    let p = node.endpoint_mut().connect(now, sk.public(), addr);
    let t0 = Instant::now();
    while !node.endpoint().is_established(p) {
        if t0.elapsed() > Duration::from_secs(5) {
            bail!("no session with the child server");
        }
        node.pump(Duration::from_millis(5))?;
    }
    // As `phyllo connect` does once the server has answered from the address dialled.
    if node.endpoint().peer_addr(p) == Some(addr) {
        node.connect_to(addr)?;
    }
    Ok((node, p))
}

/// A nonblocking UDP socket on a loopback port, connected to `echo`.
fn busy_udp(echo: SocketAddr) -> Result<UdpSocket> {
    let sock = UdpSocket::bind("127.0.0.1:0")?;
    sock.connect(echo)?;
    sock.set_nonblocking(true)?;
    Ok(sock)
}

/// The 32-byte ping both kinds of block send.
fn ping_message() -> Vec<u8> {
    let mut m = vec![0u8; 32];
    m[0] = PING;
    m
}

/// One ping over a connected nonblocking UDP socket, busy-polled until the echo (at most 2 s;
/// an error receiving, such as a refusal before the echo is up, is retried until then).
fn udp_ping(sock: &UdpSocket, msg: &[u8], buf: &mut [u8]) -> Result<()> {
    sock.send(msg)?;
    let until = Instant::now() + Duration::from_secs(2);
    loop {
        match sock.recv(buf) {
            Ok(_) => return Ok(()),
            Err(_) if Instant::now() < until => std::hint::spin_loop(),
            Err(e) => bail!("no echo within 2 s (last: {e})"),
        }
    }
}

/// One session ping, busy-polled until the server's answer is delivered (at most 2 s).
fn session_ping(node: &mut SessionSocket, p: PeerId, msg: &[u8]) -> Result<()> {
    let now = node.now();
    node.endpoint_mut()
        .send(now, p, msg)
        .map_err(|e| anyhow::anyhow!("session ping: {e}"))?;
    let until = Instant::now() + Duration::from_secs(2);
    // Sessions that ended meanwhile, and why (for the error).
    let mut ended = Vec::new();
    loop {
        // Busy-polling, this spins on the socket until a datagram is in (at most 1 ms).
        node.pump(Duration::from_millis(1))?;
        if node.endpoint_mut().poll_delivery_with(p, |_| ()).is_some() {
            return Ok(());
        }
        // A session that ends hands back what it had not confirmed; as an application
        // would, the ping goes again in the next one.
        while let Some(e) = node.endpoint_mut().poll_event() {
            if let Event::Ended {
                reason,
                unconfirmed,
                ..
            } = e
            {
                ended.push(reason);
                let now = node.now();
                for m in unconfirmed {
                    node.endpoint_mut()
                        .send(now, p, &m)
                        .map_err(|e| anyhow::anyhow!("session ping again: {e}"))?;
                }
            }
        }
        if Instant::now() > until {
            bail!(
                "session ping lost for 2 s (established: {}; sessions ended: {ended:?}; {:?}; \
                 {:?})",
                node.endpoint().is_established(p),
                node.endpoint().peer_stats(p),
                node.endpoint().stats()
            );
        }
    }
}
