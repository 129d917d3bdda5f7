//! `bulk`: a file moved through a sealed, accelerated session between two processes
//! (`phyllo serve` and `phyllo connect --file`, 64 MiB in messages of at most 8 KiB, BLAKE3 checked at
//! both ends), against raw UDP of the same datagram sizes with the same offloads and against
//! the same transfer over quinn — all in the same run, rounds interleaved.
//!
//! - **phyllo**: a child `phyllo serve --accel` and a child `phyllo connect --accel --quiet
//!   --file F --size 8192`; MB/s as connect reports it (from the first message to the
//!   server's digest). Both ends send with segmentation offload and receive coalesced where
//!   the kernel can ([`phyllo_udp::offload`]).
//! - **raw UDP**: [`raw_stream`] with offload on, datagrams of the session's mean datagram
//!   size, as many as the session sent; MB/s delivered (raw UDP may lose: its receive rate
//!   is the ceiling).
//! - **quinn**: [`phyllo_quinn::quinn_bulk`], the file written in 8 KiB pieces on one stream
//!   and hashed at both ends.
//!
//! 3 rounds in quick mode, 5 in full; the figures are medians over rounds, the ratios medians
//! of the rounds' ratios ([`crate::stats`]).
//!
//! **Two clients, one or two worker threads** ([`two_clients`]): `phyllo serve --workers W`
//! against two `phyllo connect --bind 127.0.0.{2,3}:0` sending 32 MiB each at the same time
//! (the server steers each client's address to its own worker), W = 1 and 2 in alternating
//! order, rounds interleaved: `bulk.two_thread_scaling` is the median of the rounds' ratios of
//! the aggregate rates (both files' bytes over the wall time from the clients' start to the
//! last one's exit).

use super::session::spawn_local_serve;
use crate::rawudp::{raw_stream, StreamConfig};
use crate::report::goals::stated;
use crate::report::{Ctx, Experiment, Outcome, Section, Table};
use crate::stats::{ratio_summary, Summary};
use anyhow::{bail, Context, Result};
use phyllo::session::StaticKey;
use std::path::Path;
use std::process::Command;

/// The bulk-transfer experiment.
pub struct Bulk;

/// Bytes moved per transfer.
const FILE_BYTES: usize = 64 << 20;
/// Bytes per message (connect's `--size`: one type byte and 8191 of the file).
const MESSAGE: usize = 8192;

impl Experiment for Bulk {
    fn name(&self) -> &'static str {
        "bulk"
    }

    fn title(&self) -> &'static str {
        "Bulk transfer: a sealed session between processes against raw UDP and quinn"
    }

    fn seed_ref(&self) -> Option<&'static str> {
        Some("seed 001 (ILP), its goal of protocol processing at memory speed")
    }

    fn run(&self, ctx: &Ctx) -> Result<Outcome> {
        let Some(exe) = super::phyllo_exe() else {
            return Ok(Outcome::Skipped(
                "needs the `phyllo` executable for its two processes".into(),
            ));
        };
        let dir = std::env::temp_dir().join(format!("phyllo-bulk-exp-{}", std::process::id()));
        std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
        let result = measure(ctx, &exe, &dir);
        let _ = std::fs::remove_dir_all(&dir);
        result
    }
}

/// One round's three rates, bytes per second.
struct Round {
    phyllo: f64,
    raw: f64,
    quinn: f64,
    datagram: usize,
    /// The sender's messages on the accelerator's fast path, of all it sent.
    fast: f64,
    /// The end-to-end check's hashes over the file, in the blocks `connect` hashes, bytes per
    /// second.
    sha256: f64,
    blake3: f64,
    /// CPU (user + system) per file byte, ns: `connect`, `serve`; raw UDP's and quinn's both
    /// ends together (each runs in this process).
    cpu_client: f64,
    cpu_server: f64,
    cpu_raw: f64,
    cpu_quinn: f64,
    /// `ring` AES-256-GCM per byte of a datagram's body, ns: seal, open.
    seal: f64,
    open: f64,
}

/// CPU per byte, ns, of `cpu` spent on `bytes`.
fn per_byte(cpu: std::time::Duration, bytes: f64) -> f64 {
    cpu.as_nanos() as f64 / bytes.max(1.0)
}

/// SHA-256 and BLAKE3 over `data` in `piece`-byte updates, as `connect` hashes a
/// transfer (one thread, the `sha2` and `blake3` crates with their runtime CPU dispatch):
/// bytes per second of each, in the order given.
fn hash_rates(data: &[u8], piece: usize) -> (f64, f64) {
    use sha2::Digest;
    let rate = |hash: &dyn Fn()| {
        let t = std::time::Instant::now();
        hash();
        data.len() as f64 / t.elapsed().as_secs_f64()
    };
    let sha = rate(&|| {
        let mut h = sha2::Sha256::new();
        data.chunks(piece).for_each(|p| h.update(p));
        std::hint::black_box(h.finalize());
    });
    let b3 = rate(&|| {
        let mut h = blake3::Hasher::new();
        data.chunks(piece).for_each(|p| {
            h.update(p);
        });
        std::hint::black_box(h.finalize());
    });
    (sha, b3)
}

fn measure(ctx: &Ctx, exe: &Path, dir: &Path) -> Result<Outcome> {
    let mut data = vec![0u8; FILE_BYTES];
    getrandom::fill(&mut data).map_err(|e| anyhow::anyhow!("no randomness: {e}"))?;
    let file = dir.join("file");
    std::fs::write(&file, &data).context("writing the file to send")?;
    let sk = StaticKey::generate()?;
    let ck = StaticKey::generate()?;
    let (skf, ckf) = (dir.join("server"), dir.join("client"));
    phyllo_net::keys::write_pair(&skf, &sk)?;
    phyllo_net::keys::write_pair(&ckf, &ck)?;
    let path = |p: &Path| {
        p.to_str()
            .map(String::from)
            .context("a temporary path is not UTF-8")
    };
    let (skf, ckf, file) = (path(&skf)?, path(&ckf)?, path(&file)?);
    let cpub = format!("{ckf}.pub");
    let spub = format!("{skf}.pub");

    // Odd, so that each median is one round's value.
    let rounds = if ctx.quick { 3 } else { 5 };
    let mut all = Vec::new();
    let children = || crate::forward::children_cpu_time().context("getrusage");
    let own = || crate::forward::process_cpu_time().context("getrusage");
    for _ in 0..rounds {
        // Each end's CPU: the children's total grows by a child's when it has been waited
        // for (connect by `output`, serve when it is stopped right after).
        let before = children()?;
        let (server, addr) = spawn_local_serve(&skf, &cpub, &[])?;
        let out = Command::new(exe)
            .args(["connect", &addr, "--accel", "--quiet", "--key", &ckf])
            .args(["--server-key", &spub, "--file", &file])
            .args(["--size", &MESSAGE.to_string()])
            .output()
            .context("running phyllo connect")?;
        let after_client = children()?;
        drop(server);
        let after_server = children()?;
        let bytes = FILE_BYTES as f64;
        let cpu_client = per_byte(after_client.saturating_sub(before), bytes);
        let cpu_server = per_byte(after_server.saturating_sub(after_client), bytes);
        let line = String::from_utf8_lossy(&out.stdout);
        if !out.status.success() || !line.contains("verified=yes") {
            bail!(
                "phyllo connect failed: {}",
                String::from_utf8_lossy(&out.stderr).trim()
            );
        }
        let field = |k: &str| -> Result<f64> {
            line.split_whitespace()
                .find_map(|w| w.strip_prefix(k)?.strip_prefix('='))
                .and_then(|v| v.parse().ok())
                .with_context(|| format!("no {k} in `{}`", line.trim()))
        };
        let phyllo = field("mbytes_per_s")? * 1e6;
        let datagrams = field("datagrams_out")?.max(1.0);
        let datagram = (field("bytes_out")? / datagrams).round() as usize;
        let (fast, slow) = (field("fast_msgs")?, field("slow_msgs")?);
        let fast = fast / (fast + slow).max(1.0);

        let mut cfg = StreamConfig::new(datagrams as u64, datagram.max(1));
        cfg.offload = true;
        cfg.recv_buffer = 8 << 20;
        let t0 = own()?;
        let r = raw_stream(&cfg)?;
        let t1 = own()?;
        let raw = r.bytes_per_s(datagram);
        let cpu_raw = per_byte(t1.saturating_sub(t0), datagrams * datagram as f64);
        let quinn = phyllo_quinn::quinn_bulk(&data, MESSAGE)?;
        let cpu_quinn = per_byte(own()?.saturating_sub(t1), bytes);
        let (sha256, blake3) = hash_rates(&data, phyllo_cli::outgoing::BLOCK);
        // The seal of one datagram's body as `seal` sees it (the datagram less about 40 bytes:
        // the session header, the header area, a fragment header and the tag), and its open.
        let body = datagram.saturating_sub(40).max(64);
        let (seal_ns, open_ns) = crate::aead::time_ns(crate::aead::Impl::RingAes, body, 9, 200)?;
        all.push(Round {
            phyllo,
            raw,
            quinn,
            datagram,
            fast,
            sha256,
            blake3,
            cpu_client,
            cpu_server,
            cpu_raw,
            cpu_quinn,
            seal: seal_ns / body as f64,
            open: open_ns / body as f64,
        });
    }

    let col = |f: fn(&Round) -> f64| all.iter().map(f).collect::<Vec<f64>>();
    let (phyllo, raw, quinn) = (col(|r| r.phyllo), col(|r| r.raw), col(|r| r.quinn));
    let vs_raw = ratio_summary(&phyllo, &raw);
    let vs_quinn = ratio_summary(&phyllo, &quinn);
    let mbs = |v: &[f64]| Summary::of(v).scaled(1e-6);
    let fast = Summary::of(&col(|r| r.fast));
    let (phyllo_mb, raw_mb, quinn_mb) = (mbs(&phyllo), mbs(&raw), mbs(&quinn));
    let (sha, b3) = (col(|r| r.sha256), col(|r| r.blake3));
    let b3_vs_sha = ratio_summary(&b3, &sha);
    let (sha_mb, b3_mb) = (mbs(&sha), mbs(&b3));
    let mb = |x: f64| format!("{:.0}", x / 1e6);
    let table = Table {
        title: "Rounds (MB/s; datagram = the session's mean UDP payload)".into(),
        headers: [
            "round",
            "phyllo serve/connect",
            "raw UDP, offload",
            "quinn",
            "phyllo / raw UDP",
            "phyllo / quinn",
            "datagram B",
            "sender's fast path",
        ]
        .map(String::from)
        .to_vec(),
        rows: all
            .iter()
            .enumerate()
            .map(|(i, r)| {
                vec![
                    (i + 1).to_string(),
                    mb(r.phyllo),
                    mb(r.raw),
                    mb(r.quinn),
                    format!("{:.2}", r.phyllo / r.raw),
                    format!("{:.2}", r.phyllo / r.quinn),
                    r.datagram.to_string(),
                    format!("{:.3}", r.fast),
                ]
            })
            .collect(),
    };
    let mut text = vec![
        format!(
            "{} MiB in messages of at most {MESSAGE} bytes (`connect --size {MESSAGE}`, which \
             cuts each data message to a whole number of the session's fragments so that every \
             datagram has one size), `{}` sealed and accelerated, BLAKE3 at both ends; raw UDP sends as many datagrams of the session's mean size with \
             segmentation offload and counts what arrives; quinn moves the same bytes on one \
             stream, hashed at both ends. {rounds} interleaved rounds: each ratio is the median \
             of the rounds' ratios, each MB/s the median of the rounds, with the smallest and \
             largest round in brackets.",
            FILE_BYTES >> 20,
            phyllo_net::DEFAULT_STACK
        ),
        format!(
            "`ilp.bulk_vs_raw_udp` = {}, {}; `ilp.bulk_vs_quinn` = {}, {}. \
             MB/s: phyllo {}, raw UDP {}, quinn {}.",
            vs_raw.show(2, "rounds"),
            stated("ilp.bulk_vs_raw_udp"),
            vs_quinn.show(2, "rounds"),
            stated("ilp.bulk_vs_quinn"),
            phyllo_mb.show(0, "rounds"),
            raw_mb.show(0, "rounds"),
            quinn_mb.show(0, "rounds"),
        ),
        format!(
            "The end-to-end check is BLAKE3, chosen by this measurement: over the same file in \
             {}-KiB updates on one thread (the blocks `connect` reads and hashes; `serve` \
             hashes 1 MiB runs), BLAKE3 hashed {} MB/s and SHA-256 {} MB/s \
             (`bulk.hash_blake3_vs_sha256` = {}). At phyllo's rate that is {:.1} % of a core \
             per end for BLAKE3, against {:.1} % for SHA-256.",
            phyllo_cli::outgoing::BLOCK >> 10,
            b3_mb.show(0, "rounds"),
            sha_mb.show(0, "rounds"),
            b3_vs_sha.show(2, "rounds"),
            100.0 * phyllo_mb.median / b3_mb.median,
            100.0 * phyllo_mb.median / sha_mb.median,
        ),
        format!(
            "`bulk.sender_fast_path_ratio` = {}: of the messages `connect` sent, those the \
             accelerator took on its fast path. A message of several fragments is cut by `frag`, and \
             fragments take the layered path by design (seed 004 §6: the fragment bit fails \
             the prediction), so this ratio stays near 0 for bulk in large messages.",
            fast.show(3, "rounds"),
        ),
    ];
    let med = |f: fn(&Round) -> f64| Summary::of(&col(f));
    let (client, server) = (med(|r| r.cpu_client), med(|r| r.cpu_server));
    let (cpu_raw, cpu_quinn) = (med(|r| r.cpu_raw), med(|r| r.cpu_quinn));
    let hash = 1e9 / b3_mb.median / 1e6;
    let (seal, open) = (med(|r| r.seal).median, med(|r| r.open).median);
    let kernel = cpu_raw.median / 2.0;
    let ns = |x: f64| format!("{x:.2}");
    let rest = |total: f64, crypto: f64| total - hash - crypto - kernel;
    let budget = Table {
        title: "Where each end's CPU goes, ns per file byte (medians over rounds)".into(),
        headers: ["part", "connect (sends)", "serve (receives)", "measured by"]
            .map(String::from)
            .to_vec(),
        rows: vec![
            vec![
                "BLAKE3 of the file".into(),
                ns(hash),
                ns(hash),
                format!(
                    "one thread over the file in {}-KiB updates (above)",
                    phyllo_cli::outgoing::BLOCK >> 10
                ),
            ],
            vec![
                "AES-256-GCM of each datagram's body".into(),
                ns(seal),
                ns(open),
                "`ring`, seal and open of a body of the session's datagram size, in-process".into(),
            ],
            vec![
                "the kernel's UDP with offload".into(),
                ns(kernel),
                ns(kernel),
                "half of raw UDP's CPU per byte (sender and receiver in one process)".into(),
            ],
            vec![
                "the rest: protocol, runtime, copies, file I/O".into(),
                ns(rest(client.median, seal)),
                ns(rest(server.median, open)),
                "the total less the parts above".into(),
            ],
            vec![
                "total (user + system)".into(),
                ns(client.median),
                ns(server.median),
                "`getrusage` of each child process over its run".into(),
            ],
        ],
    };
    text.push(format!(
        "`bulk.cpu_ns_per_byte.client` = {} and `bulk.cpu_ns_per_byte.server` = {} ns of CPU \
         per file byte (user + system, each process over its whole run: start, handshake, \
         transfer, check). The same bytes cost quinn {} ns per byte for both ends together, \
         raw UDP {} ns per byte for both ends. The table below splits each end's total by \
         the parts measured on their own in this run; what is left is phyllo's own work and \
         its runtime.",
        client.show(2, "rounds"),
        server.show(2, "rounds"),
        cpu_quinn.show(2, "rounds"),
        cpu_raw.show(2, "rounds"),
    ));
    let scaling = two_clients(ctx, exe, dir, &data, [&skf, &cpub, &ckf, &spub])?;
    text.push(scaling.text);
    Ok(Outcome::Done(Section {
        text,
        tables: vec![table, budget, scaling.table],
        plots: vec![],
        figures: vec![
            ("ilp.bulk_vs_raw_udp".into(), vs_raw.median),
            ("ilp.bulk_vs_quinn".into(), vs_quinn.median),
            ("bulk.phyllo_mbytes_per_s".into(), phyllo_mb.median),
            ("bulk.raw_udp_mbytes_per_s".into(), raw_mb.median),
            ("bulk.quinn_mbytes_per_s".into(), quinn_mb.median),
            ("bulk.sender_fast_path_ratio".into(), fast.median),
            ("bulk.hash_blake3_mbytes_per_s".into(), b3_mb.median),
            ("bulk.hash_sha256_mbytes_per_s".into(), sha_mb.median),
            ("bulk.hash_blake3_vs_sha256".into(), b3_vs_sha.median),
            ("bulk.cpu_ns_per_byte.client".into(), client.median),
            ("bulk.cpu_ns_per_byte.server".into(), server.median),
            ("bulk.quinn_cpu_ns_per_byte".into(), cpu_quinn.median),
            ("bulk.raw_udp_cpu_ns_per_byte".into(), cpu_raw.median),
        ]
        .into_iter()
        .chain(scaling.figures)
        .collect(),
    }))
}

/// What [`two_clients`] adds to the section.
struct Scaling {
    text: String,
    table: Table,
    figures: Vec<(String, f64)>,
}

/// Bytes each of the two clients sends.
const CLIENT_BYTES: usize = FILE_BYTES / 2;

/// Two clients at once against a server with one worker thread and with two: the aggregate
/// rate of each, bytes per second, in rounds that alternate which goes first.
///
/// Each client sends from its own loopback address (`--bind 127.0.0.2:0`, `127.0.0.3:0`), so
/// the two-worker server's steering, by source address, puts one on each worker; a one-worker
/// server serves both on one thread. The rate is both files' bytes over the wall time from
/// the spawn of both clients to the exit of the last (start, handshake and the final check
/// included, the same for both servers); each client must report `verified=yes`.
fn two_clients(
    ctx: &Ctx,
    exe: &Path,
    dir: &Path,
    data: &[u8],
    [skf, cpub, ckf, spub]: [&str; 4],
) -> Result<Scaling> {
    let files = [dir.join("client-2"), dir.join("client-3")];
    for (f, part) in files.iter().zip(data.chunks(CLIENT_BYTES)) {
        std::fs::write(f, part).with_context(|| format!("writing {}", f.display()))?;
    }
    let files: Vec<&str> = files
        .iter()
        .map(|f| f.to_str().context("a temporary path is not UTF-8"))
        .collect::<Result<_>>()?;
    // The second client has a key of its own: two peers. With one key the two would be one
    // peer to a one-worker server, whose newer session supersedes the older (they would take
    // turns), while two workers' endpoints would each hold one.
    let ck3 = dir.join("client-3-key");
    phyllo_net::keys::write_pair(&ck3, &StaticKey::generate()?)?;
    let ck3 = ck3.to_str().context("a temporary path is not UTF-8")?;
    let cpub3 = format!("{ck3}.pub");
    let rounds = if ctx.quick { 3 } else { 5 };
    // Aggregate rates, bytes per second: [one worker, two workers] per round.
    let mut rates: Vec<[f64; 2]> = Vec::new();
    for round in 0..rounds {
        let mut rate = [0.0; 2];
        let order = if round % 2 == 0 { [1, 2] } else { [2, 1] };
        for workers in order {
            let w = workers.to_string();
            let (server, addr) =
                spawn_local_serve(skf, cpub, &["--allow", &cpub3, "--workers", &w])?;
            let start = std::time::Instant::now();
            let clients = [("127.0.0.2:0", ckf), ("127.0.0.3:0", ck3)]
                .iter()
                .zip(&files)
                .map(|((bind, key), file)| {
                    Command::new(exe)
                        .args(["connect", &addr, "--accel", "--quiet", "--bind", bind])
                        .args(["--key", key, "--server-key", spub, "--file", file])
                        .args(["--size", &MESSAGE.to_string()])
                        .stdout(std::process::Stdio::piped())
                        .stderr(std::process::Stdio::piped())
                        .spawn()
                        .context("running phyllo connect")
                })
                .collect::<Result<Vec<_>>>()?;
            let mut outputs = Vec::new();
            for c in clients {
                outputs.push(c.wait_with_output().context("waiting for phyllo connect")?);
            }
            let wall = start.elapsed().as_secs_f64();
            drop(server);
            for out in &outputs {
                let line = String::from_utf8_lossy(&out.stdout);
                if !out.status.success() || !line.contains("verified=yes") {
                    bail!(
                        "phyllo connect against --workers {workers} failed: {}",
                        String::from_utf8_lossy(&out.stderr).trim()
                    );
                }
            }
            rate[workers - 1] = (2 * CLIENT_BYTES) as f64 / wall;
        }
        rates.push(rate);
    }
    let (one, two): (Vec<f64>, Vec<f64>) = rates.iter().map(|r| (r[0], r[1])).unzip();
    let scaling = ratio_summary(&two, &one);
    let (one_mb, two_mb) = (
        Summary::of(&one).scaled(1e-6),
        Summary::of(&two).scaled(1e-6),
    );
    let mb = |x: f64| format!("{:.0}", x / 1e6);
    let table = Table {
        title: "Two clients at once: serve with one worker thread and with two (MB/s, both \
                clients' bytes over the wall time)"
            .into(),
        headers: ["round", "order", "1 worker", "2 workers", "2 / 1"]
            .map(String::from)
            .to_vec(),
        rows: rates
            .iter()
            .enumerate()
            .map(|(i, r)| {
                vec![
                    (i + 1).to_string(),
                    if i % 2 == 0 { "1, 2" } else { "2, 1" }.into(),
                    mb(r[0]),
                    mb(r[1]),
                    format!("{:.2}", r[1] / r[0]),
                ]
            })
            .collect(),
    };
    let cores = std::thread::available_parallelism().map_or(0, |n| n.get());
    let text = format!(
        "Two clients at once, each sending {} MiB from its own loopback address (`connect \
         --bind 127.0.0.2:0` and `127.0.0.3:0`, two keys: two peers), against `serve --workers 1` and `serve \
         --workers 2`, in {rounds} interleaved rounds that alternate which server goes first. \
         The aggregate rate is both files' bytes over the wall time from the clients' start \
         to the last one's exit: {} MB/s with one worker, {} MB/s with two; \
         `bulk.two_thread_scaling` = {} ({}), the median of the rounds' ratios. \
         How it scales: the workers share nothing on the data path but the port (each has \
         its own socket, endpoint, receive engine and sessions; the output directory and a \
         count of transfers are all they share), and the kernel steers each client to a \
         worker by its source address, so N workers on N free cores should carry up to N \
         times what one worker carries, until the kernel's UDP path, the memory bandwidth or \
         the network give out. This machine has {cores} core(s), and this measurement runs \
         three busy processes on them, two clients and the server: the server's second \
         worker competes with its own clients for the cores, so the figure is bounded by the \
         machine, not by the design, and nothing beyond two cores is measured here. Steering \
         by address does not spread clients behind one address (a NAT): they share a worker.",
        CLIENT_BYTES >> 20,
        one_mb.show(0, "rounds"),
        two_mb.show(0, "rounds"),
        scaling.show(2, "rounds"),
        stated("bulk.two_thread_scaling"),
    );
    Ok(Scaling {
        text,
        table,
        figures: vec![
            ("bulk.two_thread_scaling".into(), scaling.median),
            (
                "bulk.two_clients_mbytes_per_s.workers_1".into(),
                one_mb.median,
            ),
            (
                "bulk.two_clients_mbytes_per_s.workers_2".into(),
                two_mb.median,
            ),
        ],
    })
}
