//! `wan`: phyllo and quinn over the same emulated long, narrow path — 100 Mbit/s, 50 ms round
//! trip, clean and with 1 % random loss — moving the same file in interleaved rounds, against
//! the link's rate.
//!
//! **The test bed** ([`bed`]): three network namespaces, A (the client), B (the middle), C (the
//! server), joined by veth pairs (A–B twice: one link for the data, one for the probes; B–C
//! once), every end with segmentation offload off so that queues and counters see datagrams.
//! In B:
//!
//! - the **bottleneck**: what enters B from A goes through an ifb device whose root qdisc is
//!   `tbf rate 100mbit burst 15140 limit 625000` ([`TBF`]): a bucket of ten 1514-byte frames
//!   and a queue of one bandwidth-delay product (100 Mbit/s × 50 ms = 625 000 bytes, so 50 ms
//!   of queue at the rate), tail drop beyond. Why B's ingress and not its egress towards C:
//!   what leaves B towards C is sent by the relay, and a qdisc on that device would hold the
//!   relay's own datagrams, charged to its sockets' send buffers (`net.core.wmem_default`,
//!   212 992 bytes on the machine this was written on, which a namespace cannot change): each
//!   client's share of the queue would end at its own buffer — a nonblocking socket sending
//!   1400-byte datagrams into that tbf got 184 of 2000 queued, about 20 ms at the rate, and
//!   `EAGAIN` for the rest while tbf dropped none — and the overflow would be the relay's
//!   failed sends, not the queue's drops. On B's ingress the queue is one FIFO of bytes that every
//!   flow and the probes share. The reverse path (C to A: acknowledgements and the server's
//!   answers) is not limited: it carries little.
//! - the **delay and loss**: per transfer a fresh `phyllo relay` (the product's command, in B
//!   by `ip netns exec`) with `--delay 25` (each way: a round trip of 50 ms) and, on the lossy
//!   path, `--loss 0.01 --seed N` (1 % of datagrams each way, the same seed for phyllo and
//!   quinn within a round). It forwards to the round's server in C; clients in A send to it.
//!
//! **phyllo**: per transfer a fresh `phyllo serve --out DIR --overwrite` in C and
//! `phyllo connect RELAY --file F --quiet` in A (the product's commands, children of this
//! executable); both ends run the same `--stack`: the product's default on the clean path,
//! [`LOSSY_STACK`] (the BBR controller, which the congestion module recommends for lossy paths)
//! on the lossy one — or the default, said so in the report, while that stack does not parse.
//!
//! **quinn**: [`phyllo_quinn::quinn_path_transfer`] between a socket made in C and one made in
//! A (sockets stay in the namespace they were made in), through a relay like phyllo's; quinn's
//! default controller, CUBIC, on both paths (the goals' comparison), and on the lossy path
//! quinn's BBR too, for comparison; flow-control windows set for the path ([`QUINN`]).
//!
//! **Goodput** = file bytes / seconds. phyllo: `connect`'s own `seconds`, from its offer
//! (the session up) to the server's verdict that the file is stored and its BLAKE3 matches.
//! quinn: from the connection's establishment to the server's digest back at the client. A
//! transfer still running at the cap is stopped, and its goodput is what the receiver held in
//! order over the time it took: for phyllo the server's partial file, sampled every 20 ms, at
//! its last growth, over the time since it appeared (the offer's arrival; the server writes in
//! runs of 1 MiB, so the growth instants are exact to a sample); for quinn the bytes the
//! server had read at the cap over the time since the connection's establishment.

mod bed;

use crate::netns::Tbf;
use crate::report::{Ctx, Experiment, Outcome, Plot, Section, Series, Table};
use crate::stats::{median, ratio_summary, Summary};
use anyhow::{bail, Context, Result};
use bed::{
    Bed, Prober, Proc, RelayCounts, TempDir, A_DATA, B_DATA, C_SERVER, FRAME_BYTES, FRAME_HEADERS,
    PROBE_BYTES, SOCKET_BUFFER,
};
use phyllo::session::StaticKey;
use phyllo_quinn::{PathTransport, QuinnController};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// The WAN experiment.
pub struct Wan;

/// The bottleneck's rate, bits per second.
const RATE_BITS: u64 = 100_000_000;
/// The same in bytes per second: what utilization divides by.
const LINK_BYTES_PER_S: f64 = RATE_BITS as f64 / 8.0;
/// The relays' delay, each way, ms.
const ONE_WAY_MS: u32 = 25;
/// The lossy path's loss, each way.
const LOSS: f64 = 0.01;
/// The bottleneck: 100 Mbit/s, a bucket of ten full frames, a queue of one bandwidth-delay
/// product (the rate × the 50 ms round trip).
const TBF: Tbf = Tbf {
    rate_bits_per_s: RATE_BITS,
    burst_bytes: 10 * FRAME_BYTES,
    limit_bytes: RATE_BITS / 8 * (2 * ONE_WAY_MS as u64) / 1000,
};
/// The stack on the lossy path: the window layer with the BBR controller.
const LOSSY_STACK: &str = "frag:window(bbr):seal";
/// How often a probe goes out.
const PROBE_EVERY: Duration = Duration::from_millis(10);
/// How often the server's partial files and the client's counters are read.
const SAMPLE_EVERY: Duration = Duration::from_millis(20);
/// Bytes per write: `connect`'s default `--size` (its messages), quinn's pieces.
const MESSAGE: usize = 16_384;
/// The session header the endpoint puts before each sealed datagram (not in `bytes_out`).
const SESSION_HEADER: u64 = phyllo::endpoint::DATA_HEADER as u64;
/// quinn's windows: at the largest round trip the path allows (50 ms and a full queue of
/// 50 ms: 100 ms) the bandwidth-delay product is 1.25 MB; each window is several times that,
/// so that only congestion control limits the sender. quinn's own defaults (a stream window of
/// 1.25 MB, a send window of 10 MB, an unlimited connection window) are sized for 100 Mbit/s at
/// 100 ms: just enough, no margin.
const QUINN: PathTransport = PathTransport {
    stream_receive_window: 4 << 20,
    receive_window: 8 << 20,
    send_window: 8 << 20,
    controller: QuinnController::Cubic,
};

/// How much to do.
struct Plan {
    rounds: usize,
    /// The file each transfer moves: long enough that slow start is a small part of it. At
    /// the link's rate 96 MiB take 8 s; slow start reaches the bandwidth-delay product in
    /// about six round trips and its overshoot costs a recovery: on the simulated bottleneck
    /// of the same rate and round trip a 40 MB transfer took 3.58 s against 3.27 s at the
    /// link's rate (9 % more), and with 40 MiB here phyllo and quinn reached 0.84 and 0.86 of
    /// the link, against 0.88 and 0.91 with 96 MiB.
    file_bytes: usize,
    /// A single transfer stops here.
    cap: Duration,
    /// The two flows of the fairness run stop here.
    fair_cap: Duration,
    /// The idle phase that gives the idle round trip.
    idle: Duration,
}

impl Plan {
    fn new(quick: bool) -> Plan {
        if quick {
            Plan {
                rounds: 3,
                file_bytes: 96 << 20,
                cap: Duration::from_secs(15),
                fair_cap: Duration::from_secs(10),
                idle: Duration::from_secs(1),
            }
        } else {
            Plan {
                rounds: 5,
                file_bytes: 128 << 20,
                cap: Duration::from_secs(25),
                fair_cap: Duration::from_secs(25),
                idle: Duration::from_secs(2),
            }
        }
    }
}

impl Experiment for Wan {
    fn name(&self) -> &'static str {
        "wan"
    }

    fn title(&self) -> &'static str {
        "A long, narrow, lossy path: phyllo and quinn against the link's rate"
    }

    fn run(&self, ctx: &Ctx) -> Result<Outcome> {
        let Some(exe) = super::phyllo_exe() else {
            return Ok(Outcome::Skipped(
                "needs the `phyllo-lab` executable for the product's serve, connect and relay"
                    .into(),
            ));
        };
        let bed = match Bed::create(&TBF) {
            Ok(b) => b,
            Err(e) if bed::missing_here(&e) => {
                return Ok(Outcome::Skipped(format!(
                    "needs network namespaces, an ifb device and the tbf qdisc (as root, with \
                     iproute2): {e}"
                )))
            }
            Err(e) => return Err(e).context("building the test bed"),
        };
        let dir = TempDir(std::env::temp_dir().join(format!("phyllo-wan-{}", std::process::id())));
        std::fs::create_dir_all(&dir.0).with_context(|| format!("creating {}", dir.0.display()))?;
        let env = Env::new(&exe, bed, &dir.0, Plan::new(ctx.quick))?;
        measure(&env)
    }
}

/// Everything a transfer needs: the bed, keys, the file, the prober.
struct Env {
    exe: PathBuf,
    dir: PathBuf,
    plan: Plan,
    server_key: String,
    server_pub: String,
    /// Two clients' (private, public) key files.
    clients: Vec<(String, String)>,
    /// Two files of the same bytes (one per fairness flow; the first for single transfers).
    files: Vec<String>,
    data: Vec<u8>,
    lossy_stack: String,
    /// Why [`LOSSY_STACK`] is not used, if it is not.
    lossy_fallback: Option<String>,
    // Dropped before the bed.
    prober: Prober,
    bed: Bed,
}

fn utf8(p: &Path) -> Result<String> {
    p.to_str()
        .map(String::from)
        .context("a temporary path is not UTF-8")
}

impl Env {
    fn new(exe: &Path, bed: Bed, dir: &Path, plan: Plan) -> Result<Env> {
        let sk = StaticKey::generate()?;
        let skf = dir.join("server");
        phyllo_net::keys::write_pair(&skf, &sk)?;
        let mut clients = Vec::new();
        for i in 0..2 {
            let p = dir.join(format!("client{i}"));
            phyllo_net::keys::write_pair(&p, &StaticKey::generate()?)?;
            clients.push((utf8(&p)?, format!("{}.pub", utf8(&p)?)));
        }
        let mut data = vec![0u8; plan.file_bytes];
        getrandom::fill(&mut data).map_err(|e| anyhow::anyhow!("no randomness: {e}"))?;
        let mut files = Vec::new();
        for name in ["wan-a", "wan-b"] {
            let f = dir.join(name);
            std::fs::write(&f, &data).context("writing the file to send")?;
            files.push(utf8(&f)?);
        }
        let lossy_fallback = stack_error(LOSSY_STACK);
        let lossy_stack = match lossy_fallback {
            None => LOSSY_STACK.to_string(),
            Some(_) => phyllo_net::DEFAULT_STACK.to_string(),
        };
        let prober = Prober::start(
            &bed,
            exe,
            &["--delay".into(), ONE_WAY_MS.to_string()],
            PROBE_EVERY,
            &dir.join("probe-relay.log"),
        )?;
        Ok(Env {
            exe: exe.to_path_buf(),
            dir: dir.to_path_buf(),
            plan,
            server_pub: format!("{}.pub", utf8(&skf)?),
            server_key: utf8(&skf)?,
            clients,
            files,
            data,
            lossy_stack,
            lossy_fallback,
            prober,
            bed,
        })
    }

    /// A fresh data relay in B towards `to`, and its address.
    fn relay(&self, to: &str, path: PathKind, round: usize) -> Result<(Proc, String)> {
        let mut cmd = self.bed.b.command(&self.exe);
        cmd.args(["relay", "--listen", &format!("{B_DATA}:0"), "--to", to])
            .args(["--delay", &ONE_WAY_MS.to_string(), "--print-addr"]);
        if path == PathKind::Lossy {
            cmd.args(["--loss", &LOSS.to_string()])
                .args(["--seed", &(1000 + round).to_string()]);
        }
        let mut p = Proc::spawn(cmd, "phyllo relay", &self.dir.join("relay.log"))?;
        let addr = p.first_line()?;
        Ok((p, addr))
    }
}

/// Why `spec` does not build a session endpoint, if it does not.
fn stack_error(spec: &str) -> Option<String> {
    let key = StaticKey::generate().ok()?;
    phyllo::endpoint::SessionEndpoint::builder(key)
        .stack(spec)
        .build()
        .err()
        .map(|e| e.to_string())
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum PathKind {
    Clean,
    Lossy,
}

impl PathKind {
    fn name(self) -> String {
        match self {
            PathKind::Clean => "clean".into(),
            PathKind::Lossy => format!("{} % loss", LOSS * 100.0),
        }
    }
}

/// What `connect --quiet` printed about a finished transfer.
#[derive(Clone, Copy, Debug)]
struct ConnectLine {
    bytes: u64,
    seconds: f64,
    datagrams_out: u64,
    bytes_out: u64,
}

impl ConnectLine {
    fn parse(line: &str) -> Result<ConnectLine> {
        if !line.contains("verified=yes") {
            bail!("phyllo connect did not verify: `{}`", line.trim());
        }
        let field = |k: &str| -> Result<f64> {
            line.split_whitespace()
                .find_map(|w| w.strip_prefix(k)?.strip_prefix('='))
                .and_then(|v| v.parse().ok())
                .with_context(|| format!("no {k} in `{}`", line.trim()))
        };
        Ok(ConnectLine {
            bytes: field("bytes")? as u64,
            seconds: field("seconds")?,
            datagrams_out: field("datagrams_out")? as u64,
            bytes_out: field("bytes_out")? as u64,
        })
    }
}

/// One phyllo flow of a run, as the server's partial file shows it.
#[derive(Default)]
struct Flow {
    /// (seconds after the start, bytes) of its partial file, while it existed.
    trace: Vec<(f64, u64)>,
    /// The client's UDP payload sent so far at each trace sample.
    tx: Vec<u64>,
    /// The partial file was gone at the last sample: the transfer was stored (renamed).
    vanished: bool,
}

impl Flow {
    /// The samples at which the partial file grew (the server wrote a run), with the first.
    fn steps(&self) -> Vec<usize> {
        let mut s = Vec::new();
        for i in 0..self.trace.len() {
            if i == 0 || self.trace[i].1 > self.trace[i - 1].1 {
                s.push(i);
            }
        }
        s
    }

    /// The client's UDP payload sent over the bytes the server wrote, from the partial
    /// file's first write to its last: what was in flight at the one end is about what was in
    /// flight at the other, so it cancels (a transfer stopped at the cap).
    fn steady_overhead(&self) -> f64 {
        let steps: Vec<usize> = self
            .steps()
            .into_iter()
            .filter(|&i| self.trace[i].1 > 0)
            .collect();
        match (steps.first(), steps.last()) {
            (Some(&a), Some(&b)) if b > a => {
                (self.tx[b] - self.tx[a]) as f64 / (self.trace[b].1 - self.trace[a].1) as f64
            }
            _ => f64::NAN,
        }
    }

    /// Bytes per second from the partial file's first sample or growth in `[from, until]`
    /// seconds to its last growth there; `None` without growth.
    fn rate_until(&self, from: f64, until: f64) -> Option<f64> {
        let steps: Vec<usize> = self
            .steps()
            .into_iter()
            .filter(|&i| self.trace[i].0 >= from && self.trace[i].0 <= until)
            .collect();
        let (&first, &last) = (steps.first()?, steps.last()?);
        let (t0, b0) = self.trace[first];
        let (t1, b1) = self.trace[last];
        (t1 > t0 && b1 > b0).then(|| (b1 - b0) as f64 / (t1 - t0))
    }
}

/// A phyllo run of one or more flows started together.
struct PhylloRun {
    /// Each client's result line, if it finished before the cap (in the order started).
    lines: Vec<Option<ConnectLine>>,
    /// The flows, in the order of their partial files' names (which does not say which
    /// client's each is; a flow stored before its partial file was ever seen is missing).
    flows: Vec<Flow>,
    start: Instant,
    end: Instant,
    /// The client's UDP payload and packets sent, at the start and at the end.
    tx0: (u64, u64),
    tx1: (u64, u64),
    relay: RelayCounts,
    drops: u64,
}

/// A transfer's result, phyllo's or quinn's.
#[derive(Clone, Debug)]
struct Transfer {
    /// Bytes per second.
    goodput: f64,
    completed: bool,
    /// The time under load: the second half of the transfer.
    loaded: (Instant, Instant),
    /// From the start to the end, for the plot.
    span: (Instant, Instant),
    relay: RelayCounts,
    drops: u64,
    /// Client UDP payload / bytes delivered, counted by A's device (phyllo).
    overhead: f64,
    /// The same from `connect`'s counters (finished phyllo transfers).
    own_overhead: f64,
    /// The client's mean UDP payload per datagram (phyllo).
    datagram: f64,
}

fn second_half(a: Instant, b: Instant) -> (Instant, Instant) {
    (a + (b - a) / 2, b)
}

/// Run `flows` phyllo transfers of the file at once on `path`, each capped at `cap`.
fn phyllo_run(
    env: &Env,
    stack: &str,
    path: PathKind,
    round: usize,
    flows: usize,
    cap: Duration,
) -> Result<PhylloRun> {
    let out = env.dir.join("out");
    let _ = std::fs::remove_dir_all(&out);
    std::fs::create_dir_all(&out)?;
    let mut cmd = env.bed.c.command(&env.exe);
    cmd.args([
        "serve",
        "--listen",
        &format!("{C_SERVER}:0"),
        "--print-addr",
    ])
    .args(["--key", &env.server_key, "--stack", stack])
    .args(["--out", &utf8(&out)?, "--overwrite"]);
    for (_, public) in &env.clients {
        cmd.args(["--allow", public]);
    }
    let mut serve = Proc::spawn(cmd, "phyllo serve", &env.dir.join("serve.log"))?;
    let server = serve.first_line()?;
    let (mut relay, relay_addr) = env.relay(&server, path, round)?;
    let q0 = env.bed.bottleneck()?;
    let tx0 = env.bed.client_sent()?;
    let start = Instant::now();
    let mut clients = Vec::new();
    for i in 0..flows {
        let mut cmd = env.bed.a.command(&env.exe);
        cmd.args(["connect", &relay_addr, "--quiet", "--stack", stack])
            .args(["--key", &env.clients[i].0, "--server-key", &env.server_pub])
            .args(["--file", &env.files[i]]);
        clients.push(Proc::spawn(
            cmd,
            "phyllo connect",
            &env.dir.join(format!("connect{i}.log")),
        )?);
    }
    let mut ended = vec![false; flows];
    let mut done: Vec<Option<ConnectLine>> = vec![None; flows];
    let mut traces: BTreeMap<String, Flow> = BTreeMap::new();
    loop {
        for (i, c) in clients.iter_mut().enumerate() {
            if ended[i] {
                continue;
            }
            if let Some(status) = c.try_wait()? {
                ended[i] = true;
                if !status.success() {
                    bail!(
                        "phyllo connect ({stack}, {} path) failed ({status}): {}",
                        path.name(),
                        c.log_tail()
                    );
                }
                done[i] = Some(ConnectLine::parse(&c.rest_of_stdout())?);
            }
        }
        let t = start.elapsed().as_secs_f64();
        let tx = env.bed.client_sent()?.0;
        for f in traces.values_mut() {
            f.vanished = true;
        }
        for e in std::fs::read_dir(&out)?.flatten() {
            let name = e.file_name().to_string_lossy().into_owned();
            if name.starts_with(".phyllo-part-") {
                if let Ok(m) = e.metadata() {
                    let f = traces.entry(name).or_default();
                    f.trace.push((t, m.len()));
                    f.tx.push(tx);
                    f.vanished = false;
                }
            }
        }
        if ended.iter().all(|&e| e) {
            break;
        }
        if start.elapsed() >= cap {
            for (i, c) in clients.iter_mut().enumerate() {
                if !ended[i] {
                    c.kill();
                }
            }
            break;
        }
        std::thread::sleep(SAMPLE_EVERY);
    }
    let end = Instant::now();
    let tx1 = env.bed.client_sent()?;
    let q1 = env.bed.bottleneck()?;
    relay.stop();
    let counts = RelayCounts::parse(&relay.log()).unwrap_or_default();
    serve.stop();
    Ok(PhylloRun {
        lines: done,
        flows: traces.into_values().collect(),
        start,
        end,
        tx0,
        tx1,
        relay: counts,
        drops: q1.drops.saturating_sub(q0.drops),
    })
}

/// One phyllo transfer of the file.
fn phyllo_transfer(env: &Env, stack: &str, path: PathKind, round: usize) -> Result<Transfer> {
    let r = phyllo_run(env, stack, path, round, 1, env.plan.cap)?;
    let f = r.flows.first();
    let file = env.data.len() as f64;
    let (goodput, completed, overhead, own_overhead) = match r.lines[0] {
        Some(line) => (
            line.bytes as f64 / line.seconds,
            true,
            (r.tx1.0 - r.tx0.0) as f64 / file,
            (line.bytes_out + SESSION_HEADER * line.datagrams_out) as f64 / file,
        ),
        None => match f.and_then(|f| Some((f, f.rate_until(0.0, f64::INFINITY)?))) {
            Some((f, rate)) => (rate, false, f.steady_overhead(), f64::NAN),
            None => (0.0, false, f64::NAN, f64::NAN),
        },
    };
    Ok(Transfer {
        goodput,
        completed,
        loaded: second_half(r.start, r.end),
        span: (r.start, r.end),
        relay: r.relay,
        drops: r.drops,
        overhead,
        own_overhead,
        datagram: (r.tx1.0 - r.tx0.0) as f64 / (r.tx1.1 - r.tx0.1).max(1) as f64,
    })
}

/// One quinn transfer of the file, its sender running `controller`.
fn quinn_transfer(
    env: &Env,
    path: PathKind,
    round: usize,
    controller: QuinnController,
) -> Result<Transfer> {
    let server = Bed::socket(&env.bed.c, C_SERVER)?;
    let client = Bed::socket(&env.bed.a, A_DATA)?;
    let (mut relay, relay_addr) = env.relay(&server.local_addr()?.to_string(), path, round)?;
    let to = relay_addr.parse().context("the relay's address")?;
    let q0 = env.bed.bottleneck()?;
    let start = Instant::now();
    let r = phyllo_quinn::quinn_path_transfer(
        server,
        client,
        to,
        &env.data,
        MESSAGE,
        &PathTransport {
            controller,
            ..QUINN
        },
        env.plan.cap,
    )?;
    // The transfer's own end (the close that follows is not load).
    let end = start + Duration::from_secs_f64(r.handshake_seconds + r.seconds);
    let q1 = env.bed.bottleneck()?;
    relay.stop();
    Ok(Transfer {
        goodput: r.bytes_per_s(),
        completed: r.completed,
        loaded: second_half(start, end),
        span: (start, end),
        relay: RelayCounts::parse(&relay.log()).unwrap_or_default(),
        drops: q1.drops.saturating_sub(q0.drops),
        overhead: f64::NAN,
        own_overhead: f64::NAN,
        datagram: f64::NAN,
    })
}

/// Two phyllo flows on the clean path started together: each flow's goodput over the second
/// half of the time both were running, from its partial file's growth.
struct Fairness {
    rates: Vec<f64>,
    jain: f64,
    /// The window, seconds after the start.
    window: (f64, f64),
    traces: Vec<Vec<(f64, u64)>>,
}

fn jain(x: &[f64]) -> f64 {
    let s: f64 = x.iter().sum();
    let s2: f64 = x.iter().map(|v| v * v).sum();
    s * s / (x.len() as f64 * s2)
}

fn fairness(env: &Env, round: usize) -> Result<Fairness> {
    let r = phyllo_run(
        env,
        phyllo_net::DEFAULT_STACK,
        PathKind::Clean,
        round,
        2,
        env.plan.fair_cap,
    )?;
    let total = (r.end - r.start).as_secs_f64();
    // Both running: from the later first sighting to the earlier end (the last sample of a
    // flow's partial file, or the end of the run).
    let from = r
        .flows
        .iter()
        .map(|f| f.trace.first().map_or(f64::INFINITY, |p| p.0))
        .fold(0.0, f64::max);
    let until = r
        .flows
        .iter()
        .map(|f| {
            if f.vanished {
                f.trace.last().map_or(0.0, |p| p.0)
            } else {
                total
            }
        })
        .fold(f64::INFINITY, f64::min);
    let mid = (from + until) / 2.0;
    // A flow never seen (stored between two samples) leaves its rate unknown.
    let mut rates: Vec<f64> = r
        .flows
        .iter()
        .map(|f| f.rate_until(mid, until).unwrap_or(f64::NAN))
        .collect();
    rates.resize(2, f64::NAN);
    Ok(Fairness {
        jain: if rates.iter().all(|r| r.is_finite()) {
            jain(&rates)
        } else {
            f64::NAN
        },
        rates,
        window: (mid, until),
        traces: r.flows.into_iter().map(|f| f.trace).collect(),
    })
}

/// A round: phyllo and quinn on each path (which goes first alternating by round; on the lossy
/// path quinn with its BBR too, for comparison), then the fairness run.
struct Round {
    phyllo: [Transfer; 2],
    quinn: [Transfer; 2],
    quinn_bbr_lossy: Transfer,
    fair: Fairness,
}

fn measure(env: &Env) -> Result<Outcome> {
    let plan = &env.plan;
    let idle_from = Instant::now();
    std::thread::sleep(plan.idle);
    // The first probes may meet the relay starting.
    let idle: Vec<f64> = env
        .prober
        .between(idle_from + Duration::from_millis(200), Instant::now())
        .into_iter()
        .map(|s| s.1)
        .collect();
    let idle_rtt = median(&idle);
    if idle.is_empty() {
        bail!("no probe came back through the probe relay");
    }
    let mut rounds = Vec::new();
    for round in 0..plan.rounds {
        let mut ph = Vec::new();
        let mut qu = Vec::new();
        let mut qu_bbr = None;
        let cubic = QuinnController::Cubic;
        for path in [PathKind::Clean, PathKind::Lossy] {
            let stack = match path {
                PathKind::Clean => phyllo_net::DEFAULT_STACK,
                PathKind::Lossy => env.lossy_stack.as_str(),
            };
            let lossy = path == PathKind::Lossy;
            if round % 2 == 0 {
                ph.push(phyllo_transfer(env, stack, path, round)?);
                qu.push(quinn_transfer(env, path, round, cubic)?);
                if lossy {
                    qu_bbr = Some(quinn_transfer(env, path, round, QuinnController::Bbr)?);
                }
            } else {
                if lossy {
                    qu_bbr = Some(quinn_transfer(env, path, round, QuinnController::Bbr)?);
                }
                qu.push(quinn_transfer(env, path, round, cubic)?);
                ph.push(phyllo_transfer(env, stack, path, round)?);
            }
        }
        let fair = fairness(env, round)?;
        let two = |v: Vec<Transfer>| -> Result<[Transfer; 2]> {
            v.try_into()
                .map_err(|_| anyhow::anyhow!("a round without both paths"))
        };
        rounds.push(Round {
            phyllo: two(ph)?,
            quinn: two(qu)?,
            quinn_bbr_lossy: qu_bbr.context("no lossy quinn BBR transfer")?,
            fair,
        });
    }
    Ok(Outcome::Done(report(env, idle_rtt, idle.len(), &rounds)))
}

/// The median probe round trip while `t` ran, less the idle one (ms).
fn queue_ms(env: &Env, t: &Transfer, idle_rtt: f64) -> f64 {
    let v: Vec<f64> = env
        .prober
        .between(t.loaded.0, t.loaded.1)
        .into_iter()
        .map(|s| s.1)
        .collect();
    median(&v) - idle_rtt
}

fn report(env: &Env, idle_rtt: f64, idle_n: usize, rounds: &[Round]) -> Section {
    let plan = &env.plan;
    let mb = |x: f64| x / 1e6;
    let col = |f: &dyn Fn(&Round) -> f64| rounds.iter().map(f).collect::<Vec<f64>>();
    let ph = |p: usize| col(&|r: &Round| r.phyllo[p].goodput);
    let qu = |p: usize| col(&|r: &Round| r.quinn[p].goodput);
    let (ph_clean, ph_lossy, qu_clean, qu_lossy) = (ph(0), ph(1), qu(0), qu(1));
    let util = |v: &[f64]| Summary::of(v).scaled(1.0 / LINK_BYTES_PER_S);
    let (u_clean, u_lossy) = (util(&ph_clean), util(&ph_lossy));
    let (uq_clean, uq_lossy) = (util(&qu_clean), util(&qu_lossy));
    let vs = ratio_summary(&ph_clean, &qu_clean);
    let vs_lossy = ratio_summary(&ph_lossy, &qu_lossy);
    let qu_bbr = col(&|r: &Round| r.quinn_bbr_lossy.goodput);
    let vs_bbr = ratio_summary(&ph_lossy, &qu_bbr);
    let queue = |f: &dyn Fn(&Round) -> &Transfer| {
        Summary::of(&col(&|r: &Round| queue_ms(env, f(r), idle_rtt)))
    };
    let q_default = queue(&|r| &r.phyllo[0]);
    let q_lossy = queue(&|r| &r.phyllo[1]);
    let q_quinn = queue(&|r| &r.quinn[0]);
    let q_quinn_lossy = queue(&|r| &r.quinn[1]);
    let q_quinn_bbr = queue(&|r| &r.quinn_bbr_lossy);
    let overhead = Summary::of(&col(&|r: &Round| r.phyllo[0].overhead));
    let own_overhead = Summary::of(&col(&|r: &Round| r.phyllo[0].own_overhead));
    let fair = Summary::of(&col(&|r: &Round| r.fair.jain));
    let fair_sum = Summary::of(&col(&|r: &Round| {
        r.fair.rates.iter().sum::<f64>() / LINK_BYTES_PER_S
    }));
    let capped =
        |f: &dyn Fn(&Round) -> &Transfer| rounds.iter().filter(|r| !f(r).completed).count();
    let loss_seen = |f: &dyn Fn(&Round) -> &Transfer| {
        let (lost, got) = rounds.iter().fold((0, 0), |(l, g), r| {
            let c = f(r).relay;
            (l + c.lost, g + c.received)
        });
        100.0 * lost as f64 / got.max(1) as f64
    };

    // The rounds.
    let mark = |t: &Transfer| {
        format!(
            "{:.2}{}",
            mb(t.goodput),
            if t.completed { "" } else { " †" }
        )
    };
    let mut table = Table {
        title: format!(
            "Rounds: goodput in MB/s († stopped at the {} s cap: what the receiver held over \
             the time it took), utilization = goodput ÷ {:.1} MB/s, queue delay = median probe \
             round trip in the transfer's second half less the idle {idle_rtt:.2} ms",
            plan.cap.as_secs(),
            mb(LINK_BYTES_PER_S)
        ),
        headers: [
            "round",
            "path (phyllo stack)",
            "phyllo MB/s",
            "quinn MB/s",
            "phyllo / quinn",
            "phyllo util.",
            "quinn util.",
            "queue ms phyllo / quinn",
            "relay loss % phyllo / quinn",
            "tbf drops phyllo / quinn",
            "phyllo wire bytes / file bytes",
            "quinn (bbr) MB/s, queue ms",
        ]
        .map(String::from)
        .to_vec(),
        rows: vec![],
    };
    for (i, r) in rounds.iter().enumerate() {
        for p in 0..2 {
            let (a, b) = (&r.phyllo[p], &r.quinn[p]);
            let pct = |c: RelayCounts| 100.0 * c.lost as f64 / c.received.max(1) as f64;
            table.rows.push(vec![
                format!(
                    "{}{}",
                    i + 1,
                    if i % 2 == 0 {
                        " (phyllo first)"
                    } else {
                        " (quinn first)"
                    }
                ),
                format!(
                    "{} (`{}`)",
                    if p == 0 {
                        PathKind::Clean.name()
                    } else {
                        PathKind::Lossy.name()
                    },
                    if p == 0 {
                        phyllo_net::DEFAULT_STACK
                    } else {
                        env.lossy_stack.as_str()
                    }
                ),
                mark(a),
                mark(b),
                format!("{:.2}", a.goodput / b.goodput),
                format!("{:.3}", a.goodput / LINK_BYTES_PER_S),
                format!("{:.3}", b.goodput / LINK_BYTES_PER_S),
                format!(
                    "{:.1} / {:.1}",
                    queue_ms(env, a, idle_rtt),
                    queue_ms(env, b, idle_rtt)
                ),
                format!("{:.2} / {:.2}", pct(a.relay), pct(b.relay)),
                format!("{} / {}", a.drops, b.drops),
                if p == 0 {
                    format!(
                        "{:.4}{}",
                        a.overhead,
                        if a.own_overhead.is_finite() {
                            format!(" (connect's count {:.4})", a.own_overhead)
                        } else {
                            String::new()
                        }
                    )
                } else {
                    String::new()
                },
                if p == 1 {
                    format!(
                        "{}, {:.1}",
                        mark(&r.quinn_bbr_lossy),
                        queue_ms(env, &r.quinn_bbr_lossy, idle_rtt)
                    )
                } else {
                    String::new()
                },
            ]);
        }
    }
    let mut fair_table = Table {
        title: format!(
            "Fairness: two `connect` flows of {} MiB each started together on the clean path \
             (`{}`), MB/s over the second half of the time both ran (from the server's \
             partial files; cap {} s)",
            plan.file_bytes >> 20,
            phyllo_net::DEFAULT_STACK,
            plan.fair_cap.as_secs()
        ),
        headers: [
            "round",
            "flow 1 MB/s",
            "flow 2 MB/s",
            "Jain's index",
            "sum ÷ link",
            "window, s after start",
        ]
        .map(String::from)
        .to_vec(),
        rows: vec![],
    };
    for (i, r) in rounds.iter().enumerate() {
        let f = &r.fair;
        let rate = |k: usize| {
            f.rates
                .get(k)
                .map_or("—".into(), |x| format!("{:.2}", mb(*x)))
        };
        fair_table.rows.push(vec![
            (i + 1).to_string(),
            rate(0),
            rate(1),
            format!("{:.3}", f.jain),
            format!("{:.3}", f.rates.iter().sum::<f64>() / LINK_BYTES_PER_S),
            format!("{:.1}–{:.1}", f.window.0, f.window.1),
        ]);
    }

    // Plots from the last round.
    let mut plots = Vec::new();
    if let Some(last) = rounds.last() {
        let mut queue_plot = Plot {
            id: "wan_queue".into(),
            title: format!(
                "Probe round trips during each transfer of round {} ({} ms apart, through the \
                 bottleneck's queue)",
                rounds.len(),
                PROBE_EVERY.as_millis()
            ),
            x_label: "seconds after the transfer's start".into(),
            y_label: "round trip, ms".into(),
            caption: format!(
                "The idle round trip is {idle_rtt:.1} ms and the queue holds {:.0} ms at the \
                 rate, so a line can rise to about {:.0} ms: a sender that fills the queue \
                 rides near the top, one that paces at the bottleneck's rate stays near the \
                 bottom. Lower is better, at the same goodput.",
                TBF.limit_bytes as f64 / LINK_BYTES_PER_S * 1e3,
                idle_rtt + TBF.limit_bytes as f64 / LINK_BYTES_PER_S * 1e3
            ),
            ..Plot::default()
        };
        for (name, t) in [
            (
                format!("phyllo `{}`, clean", phyllo_net::DEFAULT_STACK),
                &last.phyllo[0],
            ),
            ("quinn (cubic), clean".to_string(), &last.quinn[0]),
            (
                format!("phyllo `{}`, {}", env.lossy_stack, PathKind::Lossy.name()),
                &last.phyllo[1],
            ),
            (
                format!("quinn (cubic), {}", PathKind::Lossy.name()),
                &last.quinn[1],
            ),
            (
                format!("quinn (bbr), {}", PathKind::Lossy.name()),
                &last.quinn_bbr_lossy,
            ),
        ] {
            queue_plot.series.push(Series {
                name,
                points: env.prober.between(t.span.0, t.span.1),
            });
        }
        plots.push(queue_plot);
        let mut fair_plot = Plot {
            id: "wan_fairness".into(),
            title: format!(
                "Two phyllo flows on one bottleneck (round {}): the server's partial files",
                rounds.len()
            ),
            x_label: "seconds after the start".into(),
            y_label: "MB held by the server".into(),
            caption: "Two lines of the same slope share the link equally; the sum of the \
                      slopes is the link's goodput. The server writes in runs of 1 MiB, hence \
                      the steps."
                .into(),
            ..Plot::default()
        };
        for (i, tr) in last.fair.traces.iter().enumerate() {
            fair_plot.series.push(Series {
                name: format!("flow {}", i + 1),
                points: tr.iter().map(|&(t, b)| (t, b as f64 / 1e6)).collect(),
            });
        }
        plots.push(fair_plot);
    }

    let n = rounds.len();
    let datagram = median(&col(&|r: &Round| r.phyllo[0].datagram));
    // The longest round trip: the relays' delay and a full queue.
    let max_rtt_s = f64::from(2 * ONE_WAY_MS) / 1e3 + TBF.limit_bytes as f64 / LINK_BYTES_PER_S;
    let mut text = vec![
        format!(
            "The path: three network namespaces, client A, middle B, server C, joined by veth \
             pairs (segmentation offload off on every end, so queues and counters see \
             datagrams). The bottleneck is in B: `tc qdisc add dev IFB root tbf rate {}mbit \
             burst {} limit {}` on an ifb device that takes everything entering B from A \
             (an `ingress` qdisc and a `u32` filter with a `mirred` redirect on each link from \
             A): {} Mbit/s, a bucket of {} {FRAME_BYTES}-byte frames, a queue of {} bytes — one \
             bandwidth-delay product, {:.0} ms at the rate — and tail drop. The queue is on B's \
             ingress rather than its egress towards C because what leaves towards C is sent by \
             the relay, whose datagrams a qdisc there would charge to the relay's per-client \
             send buffers ({} bytes each, `net.core.wmem_default`, which a namespace cannot \
             change): each flow's share of the queue would end at its own buffer, and \
             overflow would be the relay's failed sends, not the queue's drops. tbf counts a \
             packet with its IP, UDP and 14-byte Ethernet headers: phyllo's client sent {:.0} \
             bytes of UDP payload per datagram on the clean path (median over rounds), which \
             can carry at most {:.1} % of the rate as payload. The reverse \
             path (acknowledgements, answers) is not limited: it carries little. Delay and \
             loss: per transfer a fresh `phyllo relay --delay {ONE_WAY_MS}` in B (the \
             product's command; each way, so the round trip is {} ms) with `--loss {LOSS} \
             --seed N` on the lossy path ({:.0} % of datagrams each way, after the \
             bottleneck; the relays dropped {:.2} % of phyllo's and {:.2} % of quinn's \
             datagrams); clients in A send to the relay, which forwards to the server in C.",
            RATE_BITS / 1_000_000,
            TBF.burst_bytes,
            TBF.limit_bytes,
            RATE_BITS / 1_000_000,
            TBF.burst_bytes / FRAME_BYTES,
            TBF.limit_bytes,
            TBF.limit_bytes as f64 / LINK_BYTES_PER_S * 1e3,
            std::fs::read_to_string("/proc/sys/net/core/wmem_default")
                .map_or("?".into(), |s| s.trim().to_string()),
            datagram,
            100.0 * datagram / (datagram + bed::FRAME_HEADERS as f64),
            2 * ONE_WAY_MS,
            LOSS * 100.0,
            loss_seen(&|r| &r.phyllo[1]),
            loss_seen(&|r| &r.quinn[1]),
        ),
        format!(
            "The transfers: {} MiB of random bytes each, {n} interleaved rounds (which of \
             phyllo and quinn goes first alternates by round), each round the clean path then \
             the lossy one, then the fairness run; every transfer stops at {} s. phyllo: a \
             fresh `phyllo serve --out DIR --overwrite` in C and `phyllo connect RELAY --file F \
             --quiet` in A, both with the same `--stack`: `{}` (the product's default) on the \
             clean path and `{}` on the lossy one. Goodput is the file's bytes over \
             `connect`'s `seconds`: from its offer (the session up) to the server's verdict \
             that the file is stored with a matching BLAKE3. quinn: the same file in {MESSAGE}-byte \
             writes on one stream from a socket in A to one in C through a relay like \
             phyllo's, hashed at both ends; quinn's default controller, CUBIC, on both paths; \
             its stream window {} MiB, connection window {} MiB and send window {} MiB (the \
             path's bandwidth-delay product is at most {:.2} MB, at {:.0} ms with a full queue), \
             its sockets' buffers {} MiB as phyllo's; goodput from the connection's \
             establishment to the server's digest back. A transfer still running at the cap is \
             stopped and counts what the receiver held in order over the time it took (phyllo: \
             the server's partial file at its last growth, over the time since it appeared; \
             quinn: what the server had read, over the time since the connection was up).",
            plan.file_bytes >> 20,
            plan.cap.as_secs(),
            phyllo_net::DEFAULT_STACK,
            env.lossy_stack,
            QUINN.stream_receive_window >> 20,
            QUINN.receive_window >> 20,
            QUINN.send_window >> 20,
            mb(LINK_BYTES_PER_S * max_rtt_s),
            max_rtt_s * 1e3,
            SOCKET_BUFFER >> 20,
        ),
    ];
    if let Some(why) = &env.lossy_fallback {
        text.push(format!(
            "**The lossy path ran the default stack:** `{LOSSY_STACK}` (the BBR controller, \
             recommended for lossy paths) does not build in this version ({why}), so \
             `wan.utilization_lossy`, `wan.vs_quinn_lossy` and `wan.queue_delay_ms_bbr` \
             measure `{}` on the lossy path (`wan.lossy_stack_fallback` = 1).",
            env.lossy_stack
        ));
    }
    text.push(format!(
        "`wan.utilization` = phyllo's goodput ÷ {:.1} MB/s on the clean path = {} \
         (quinn {}); `wan.utilization_lossy` = {} with `{}` (quinn {}). \
         `wan.vs_quinn` = {} and `wan.vs_quinn_lossy` = {}: \
         medians of the rounds' ratios. MB/s, clean: phyllo {}, quinn {}; lossy: phyllo {}, \
         quinn {}. Stopped at the cap: phyllo {} and {} of {n} transfers (clean, lossy), \
         quinn {} and {}.",
        mb(LINK_BYTES_PER_S),
        u_clean.show(3, "rounds"),
        uq_clean.show(3, "rounds"),
        u_lossy.show(3, "rounds"),
        env.lossy_stack,
        uq_lossy.show(3, "rounds"),
        vs.show(2, "rounds"),
        vs_lossy.show(2, "rounds"),
        Summary::of(&ph_clean).scaled(1e-6).show(2, "rounds"),
        Summary::of(&qu_clean).scaled(1e-6).show(2, "rounds"),
        Summary::of(&ph_lossy).scaled(1e-6).show(2, "rounds"),
        Summary::of(&qu_lossy).scaled(1e-6).show(2, "rounds"),
        capped(&|r| &r.phyllo[0]),
        capped(&|r| &r.phyllo[1]),
        capped(&|r| &r.quinn[0]),
        capped(&|r| &r.quinn[1]),
    ));
    text.push(format!(
        "quinn's own BBR (`quinn::congestion::BbrConfig`, same windows) ran on the lossy path \
         too, in the same rounds, for comparison: {} MB/s ({} of {n} stopped at the cap), \
         probe queue delay {} ms; phyllo / quinn with BBR = {} (`wan.vs_quinn_bbr_lossy`, no \
         goal); `wan.vs_quinn_lossy` compares with quinn's default, CUBIC.",
        Summary::of(&qu_bbr).scaled(1e-6).show(2, "rounds"),
        capped(&|r| &r.quinn_bbr_lossy),
        q_quinn_bbr.show(1, "rounds"),
        vs_bbr.show(2, "rounds"),
    ));
    text.push(format!(
        "`wan.wire_overhead` = {}: the UDP payload bytes the phyllo client sent \
         on the clean path — A's data link's transmitted bytes less {FRAME_HEADERS} bytes of Ethernet, IP \
         and UDP headers per packet, from the kernel's counters, handshake, acknowledgements \
         and retransmissions included — over the file's bytes; `connect`'s own count \
         (`bytes_out` plus the {SESSION_HEADER}-byte session header per datagram) gives {}. \
         For a transfer stopped at the cap it is the client's payload sent between the \
         partial file's first and last writes over the bytes written between them (what was \
         in flight at either instant about cancels; the handshake is left out).",
        overhead.show(4, "rounds"),
        own_overhead.show(4, "rounds"),
    ));
    text.push(format!(
        "`wan.fairness` = {}: Jain's index (Σx)² ÷ (n·Σx²) of the two flows' \
         goodputs, each the growth of its partial file on the server from its first to its \
         last write in the second half of the time both ran; their sum was {} of the link.",
        fair.show(3, "rounds"),
        fair_sum.show(3, "rounds"),
    ));
    text.push(format!(
        "`wan.queue_delay_ms` = {} ms with `{}` on the clean path, `wan.queue_delay_ms_bbr` = {} \
         ms with `{}` on the lossy path; quinn {} ms clean and {} ms lossy. Each is the median \
         round trip of the probes sent in the second half of a transfer less the idle median \
         ({idle_rtt:.2} ms over {idle_n} probes before the first round), median over rounds. \
         The probes are {PROBE_BYTES}-byte UDP datagrams every {} ms from A to an echo in C through a \
         relay of their own in B (the same delay, no loss) on a link of their own from A, \
         redirected into the same bottleneck queue as the data.",
        q_default.show(1, "rounds"),
        phyllo_net::DEFAULT_STACK,
        q_lossy.show(1, "rounds"),
        env.lossy_stack,
        q_quinn.show(1, "rounds"),
        q_quinn_lossy.show(1, "rounds"),
        PROBE_EVERY.as_millis(),
    ));
    let figures = vec![
        ("wan.utilization".into(), u_clean.median),
        ("wan.utilization_lossy".into(), u_lossy.median),
        ("wan.wire_overhead".into(), overhead.median),
        ("wan.fairness".into(), fair.median),
        ("wan.vs_quinn".into(), vs.median),
        ("wan.vs_quinn_lossy".into(), vs_lossy.median),
        ("wan.queue_delay_ms".into(), q_default.median),
        ("wan.queue_delay_ms_bbr".into(), q_lossy.median),
        ("wan.queue_delay_ms_quinn".into(), q_quinn.median),
        ("wan.quinn_utilization".into(), uq_clean.median),
        ("wan.quinn_utilization_lossy".into(), uq_lossy.median),
        ("wan.phyllo_mbytes_per_s".into(), mb(median(&ph_clean))),
        (
            "wan.phyllo_lossy_mbytes_per_s".into(),
            mb(median(&ph_lossy)),
        ),
        ("wan.quinn_mbytes_per_s".into(), mb(median(&qu_clean))),
        ("wan.quinn_lossy_mbytes_per_s".into(), mb(median(&qu_lossy))),
        (
            "wan.quinn_bbr_lossy_mbytes_per_s".into(),
            mb(median(&qu_bbr)),
        ),
        ("wan.vs_quinn_bbr_lossy".into(), vs_bbr.median),
        ("wan.queue_delay_ms_quinn_bbr".into(), q_quinn_bbr.median),
        ("wan.idle_rtt_ms".into(), idle_rtt),
        (
            "wan.lossy_stack_fallback".into(),
            f64::from(u8::from(env.lossy_fallback.is_some())),
        ),
    ];
    Section {
        text,
        tables: vec![table, fair_table],
        plots,
        figures,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn jains_index_is_one_for_equal_shares_and_half_for_one_of_two() {
        assert!((jain(&[3.0, 3.0]) - 1.0).abs() < 1e-12);
        assert!((jain(&[1.0, 0.0]) - 0.5).abs() < 1e-12);
        assert!((jain(&[1.0, 1.25]) - 0.9878).abs() < 1e-4);
    }

    #[test]
    fn the_bottleneck_is_one_bdp_of_queue() {
        assert_eq!(TBF.limit_bytes, 625_000);
        assert_eq!(TBF.burst_bytes, 15_140);
    }

    #[test]
    fn a_flows_rate_runs_from_its_first_to_its_last_write() {
        let f = Flow {
            trace: vec![
                (0.0, 0),
                (0.5, 0),
                (1.0, 1 << 20),
                (1.5, 1 << 20),
                (2.0, 2 << 20),
            ],
            tx: vec![0; 5],
            vanished: false,
        };
        // From the first sighting (0 bytes at 0 s) to the last write (2 MiB at 2 s).
        let rate = f.rate_until(0.0, f64::INFINITY).unwrap();
        assert!((rate - f64::from(1 << 20)).abs() < 1e-6);
        // From the first write in the window: the writes at 1.0 and 2.0.
        let rate = f.rate_until(0.75, 2.0).unwrap();
        assert!((rate - f64::from(1 << 20)).abs() < 1e-6);
        assert!(f.rate_until(1.2, 1.9).is_none());
    }

    #[test]
    fn the_steady_overhead_is_taken_between_writes() {
        // 1.04 bytes sent per byte written between the writes at 1.0 and 2.0, however much
        // was sent before the first.
        let f = Flow {
            trace: vec![
                (0.0, 0),
                (1.0, 1_000_000),
                (1.5, 1_000_000),
                (2.0, 2_000_000),
            ],
            tx: vec![0, 1_500_000, 2_000_000, 2_540_000],
            vanished: false,
        };
        assert!((f.steady_overhead() - 1.04).abs() < 1e-9);
    }

    #[test]
    fn connects_line_is_read() {
        let l = ConnectLine::parse(
            "bytes=40000000 seconds=23.971 mbytes_per_s=1.7 sha256=0a verified=yes stored=file \
             resumed_from=0 handshake_us=52205.7 datagrams_out=29328 bytes_out=41319477",
        )
        .unwrap();
        assert_eq!(
            (l.bytes, l.datagrams_out, l.bytes_out),
            (40_000_000, 29_328, 41_319_477)
        );
        assert!(ConnectLine::parse("bytes=1 seconds=1 verified=no").is_err());
    }
}
