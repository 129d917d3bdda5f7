//! The engine experiment's last part: `phyllo serve` under a flood, on the engine and off; and
//! an established file transfer and newcomers under a flood of replayed initiations.

use crate::report::{Section, Table};
use crate::stats::{median, Summary};
use anyhow::{bail, Context, Result};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// `phyllo serve` under a flood of garbage and replayed initiations, on the engine and off:
/// the established session's echo rate with the flood over without it; then a file transfer
/// and newcomers under a flood of replayed initiations ([`transfer_runs`]). Returns the
/// transfer's goodput ratio over its rounds, if it ran.
pub(super) fn run(quick: bool, out: &mut Section) -> Result<Option<Summary>> {
    use phyllo::session::StaticKey;
    let Some(exe) = super::super::phyllo_exe() else {
        return Ok(None);
    };
    let dir = std::env::temp_dir().join(format!("phyllo-engine-exp-{}", std::process::id()));
    std::fs::create_dir_all(&dir)?;
    let (sk, ck) = (StaticKey::generate()?, StaticKey::generate()?);
    phyllo_net::keys::write_pair(&dir.join("server"), &sk)?;
    phyllo_net::keys::write_pair(&dir.join("client"), &ck)?;
    let span = Duration::from_millis(if quick { 700 } else { 3000 });
    // With two CPUs: the server (a child, which inherits this thread's placement) and this
    // client on CPU 0 in both phases, the flood on CPU 1 — so the flood takes no CPU from
    // them and the ratio shows what the server does with its own.
    let two = std::thread::available_parallelism().is_ok_and(|n| n.get() >= 2);
    if two {
        let _ = crate::forward::pin_current_thread(&[0]);
    }
    let result = serve_flood_runs(span, two, &sk, &ck, &dir, out)
        .and_then(|()| transfer_runs(quick, two, &exe, &dir, out))
        .map(Some);
    if two {
        let _ = crate::forward::pin_current_thread(&[]);
    }
    let _ = std::fs::remove_dir_all(&dir);
    result
}

/// The runs of [`serve_flood`].
fn serve_flood_runs(
    span: Duration,
    two: bool,
    sk: &phyllo::session::StaticKey,
    ck: &phyllo::session::StaticKey,
    dir: &std::path::Path,
    out: &mut Section,
) -> Result<()> {
    use phyllo::session::StaticKey;
    use phyllo_cli::transfer::PING;
    use phyllo_net::{SessionSocket, DEFAULT_STACK};
    use phyllo_udp::udp::{UdpLink, MAX_BATCH};
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::Arc;
    let path = |p: &std::path::Path| p.to_string_lossy().into_owned();
    let (skf, cpub) = (
        path(&dir.join("server")),
        format!("{}.pub", path(&dir.join("client"))),
    );
    let mut table = Table {
        title: "`phyllo serve` under a flood: echoes per second of an established session".into(),
        headers: [
            "server",
            "without flood",
            "with flood",
            "ratio",
            "flood datagrams/s sent",
        ]
        .map(String::from)
        .to_vec(),
        rows: vec![],
    };
    for (name, extra, figure) in [
        ("engine", &[][..], "engine.serve_flood_goodput_ratio"),
        (
            "engine, --listen-share 1",
            &["--listen-share", "1"][..],
            "engine.serve_flood_goodput_ratio_no_share",
        ),
        (
            "--no-engine",
            &["--no-engine"][..],
            "engine.serve_flood_goodput_ratio_no_engine",
        ),
        (
            "--busy-poll (no engine)",
            &["--busy-poll"][..],
            "engine.serve_flood_goodput_ratio_busy_poll",
        ),
    ] {
        let (_server, addr) = super::super::session::spawn_local_serve(&skf, &cpub, extra)?;
        let addr: std::net::SocketAddr = addr.parse()?;
        let mut node = SessionSocket::bind(
            "127.0.0.1:0".parse()?,
            ck.clone(),
            vec![],
            DEFAULT_STACK,
            true,
        )?;
        let now = node.now();
        let p = node.endpoint_mut().connect(now, sk.public(), addr);
        let t0 = std::time::Instant::now();
        while !node.endpoint().is_established(p) {
            anyhow::ensure!(
                t0.elapsed() < Duration::from_secs(5),
                "no session with the server"
            );
            node.pump(Duration::from_millis(5))?;
        }
        // Initiations from keys the server does not allow (valid mac1), to replay.
        let mut inits = Vec::new();
        for _ in 0..16 {
            let mut stranger = SessionSocket::bind(
                "127.0.0.1:0".parse()?,
                StaticKey::generate()?,
                vec![],
                DEFAULT_STACK,
                true,
            )?;
            let now = stranger.now();
            stranger.endpoint_mut().connect(now, sk.public(), addr);
            let mut d = Vec::new();
            if stranger.endpoint_mut().poll_transmit(&mut d).is_some() {
                inits.push(d);
            }
        }
        let echoes = |node: &mut SessionSocket| -> Result<f64> {
            let mut msg = vec![0u8; 32];
            msg[0] = PING;
            let start = std::time::Instant::now();
            let mut n = 0u64;
            while start.elapsed() < span {
                let now = node.now();
                node.endpoint_mut()
                    .send(now, p, &msg)
                    .map_err(|e| anyhow::anyhow!("ping: {e}"))?;
                loop {
                    node.pump(Duration::from_millis(2))?;
                    if node.endpoint_mut().poll_delivery_with(p, |_| ()).is_some() {
                        n += 1;
                        break;
                    }
                    if start.elapsed() >= span + Duration::from_secs(2) {
                        break;
                    }
                }
            }
            Ok(n as f64 / start.elapsed().as_secs_f64())
        };
        let quiet = echoes(&mut node)?;
        let stop = Arc::new(AtomicBool::new(false));
        let flood = {
            let stop = Arc::clone(&stop);
            std::thread::spawn(move || -> u64 {
                if two {
                    let _ = crate::forward::pin_current_thread(&[1]);
                }
                let Ok(mut l) = UdpLink::bind("127.0.0.1:0".parse().unwrap_or(addr)) else {
                    return 0;
                };
                let mut junk = Vec::new();
                for i in 0..32u32 {
                    let mut d = vec![0u8; 60 + (i as usize * 13) % 90];
                    let _ = getrandom::fill(&mut d);
                    junk.push(d);
                }
                let mut views: Vec<&[u8]> = Vec::new();
                for i in 0..MAX_BATCH {
                    views.push(if i % 2 == 0 || inits.is_empty() {
                        &junk[i % junk.len()]
                    } else {
                        &inits[i % inits.len()]
                    });
                }
                let start = std::time::Instant::now();
                let mut sent = 0u64;
                while !stop.load(Ordering::Relaxed) {
                    sent += l.send_batch_to(&views, addr).unwrap_or(0) as u64;
                }
                (sent as f64 / start.elapsed().as_secs_f64()) as u64
            })
        };
        let flooded = echoes(&mut node)?;
        stop.store(true, Ordering::Relaxed);
        let rate = flood.join().unwrap_or(0);
        let ratio = if quiet > 0.0 { flooded / quiet } else { 0.0 };
        out.figures.push((figure.into(), ratio));
        table.rows.push(vec![
            name.into(),
            format!("{quiet:.0}"),
            format!("{flooded:.0}"),
            format!("{ratio:.2}"),
            format!("{rate}"),
        ]);
    }
    out.tables.push(table);
    Ok(())
}

/// How long a transfer may take before it is killed and the run fails.
const TRANSFER_LIMIT: Duration = Duration::from_secs(120);

/// How long the newcomers may take before those still running are killed (and counted as
/// without a session): `--timeout 10` bounds a client's handshakes, not its pings.
pub(super) const NEWCOMER_LIMIT: Duration = Duration::from_secs(30);

/// How long the flood runs before the flooded transfer starts.
pub(super) const FLOOD_LEAD: Duration = Duration::from_millis(200);

/// Newcomers per flooded phase: keys 0..6 of [`transfer_runs`]; key 6's initiation is
/// replayed, key 7 sends the file.
pub(super) const NEWCOMERS: usize = 6;

/// An established file transfer and newcomers under a flood of replayed initiations: per round
/// a fresh `phyllo serve` child allowing 8 keys, one transfer of a file without the flood and
/// one with it (which goes first alternates), and in the flooded phase, after the transfer,
/// [`NEWCOMERS`] clients connecting at once. Returns the summary of the rounds' goodput ratios.
fn transfer_runs(
    quick: bool,
    two: bool,
    exe: &Path,
    dir: &Path,
    out: &mut Section,
) -> Result<Summary> {
    use phyllo::session::StaticKey;
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::Arc;
    let path = |p: &Path| {
        p.to_str()
            .map(String::from)
            .context("a temporary path is not UTF-8")
    };
    let sk = StaticKey::generate()?;
    let skp = dir.join("transfer-server");
    phyllo_net::keys::write_pair(&skp, &sk)?;
    let mut keys = Vec::new();
    let mut client_keys = Vec::new();
    for i in 0..8 {
        let k = StaticKey::generate()?;
        let p = dir.join(format!("transfer-client{i}"));
        phyllo_net::keys::write_pair(&p, &k)?;
        keys.push(path(&p)?);
        client_keys.push(k);
    }
    let (skf, spub) = (path(&skp)?, format!("{}.pub", path(&skp)?));
    let pubs: Vec<String> = keys.iter().map(|k| format!("{k}.pub")).collect();
    let mut extra = Vec::new();
    for p in &pubs[1..] {
        extra.extend(["--allow", p.as_str()]);
    }
    let mut data = vec![0u8; transfer_bytes(quick)];
    getrandom::fill(&mut data).map_err(|e| anyhow::anyhow!("no randomness: {e}"))?;
    let file = dir.join("transfer-file");
    std::fs::write(&file, &data).context("writing the file to send")?;
    drop(data);
    let file = path(&file)?;

    // One transfer as `phyllo connect` reports it: MB/s from the session's start to the
    // server's verified hash.
    let transfer = |addr: &str| -> Result<f64> {
        let mut cmd = Command::new(exe);
        cmd.args(["connect", addr, "--accel", "--quiet", "--key", &keys[7]])
            .args(["--server-key", &spub, "--file", &file]);
        let o = Children::spawn([cmd])
            .context("starting phyllo connect --file")?
            .finish(TRANSFER_LIMIT)?
            .pop()
            .context("no transfer child")?;
        if o.killed {
            bail!(
                "phyllo connect --file still running after {} s: {}",
                TRANSFER_LIMIT.as_secs(),
                o.stderr.trim()
            );
        }
        if !o.ok || !o.stdout.contains("verified=yes") {
            bail!("phyllo connect --file failed: {}", o.stderr.trim());
        }
        o.stdout
            .split_whitespace()
            .find_map(|w| w.strip_prefix("mbytes_per_s="))
            .and_then(|v| v.parse().ok())
            .with_context(|| format!("no mbytes_per_s in `{}`", o.stdout.trim()))
    };
    // The newcomers, all at once (accelerated, as the server is): how many got a session and
    // their pings answered (exit 0), the seconds until all had ended, and why the others did
    // not (their last line on stderr).
    let newcomers = |addr: &str| -> Result<(usize, f64, Vec<String>)> {
        let started = Instant::now();
        let children = Children::spawn(keys[..NEWCOMERS].iter().map(|k| {
            let mut cmd = Command::new(exe);
            cmd.args(["connect", addr, "--accel", "--ping", "3", "--quiet"])
                .args(["--timeout", "10", "--key", k, "--server-key", &spub]);
            cmd
        }))
        .context("starting a newcomer's phyllo connect")?;
        let ended = children.finish(NEWCOMER_LIMIT)?;
        let secs = started.elapsed().as_secs_f64();
        let (mut got, mut why) = (0, Vec::new());
        for o in ended {
            if o.ok {
                got += 1;
            } else if o.killed {
                why.push(format!(
                    "still running after {} s, killed",
                    NEWCOMER_LIMIT.as_secs()
                ));
            } else {
                why.push(o.stderr.lines().last().unwrap_or("").trim().to_owned());
            }
        }
        Ok((got, secs, why))
    };

    let rounds = transfer_rounds(quick);
    let mut table = Table {
        title: format!(
            "An established transfer ({} MiB, `phyllo connect --accel --file`) and {NEWCOMERS} \
             newcomers under a flood of replayed initiations, by round",
            if quick { 32 } else { 64 }
        ),
        headers: [
            "round",
            "quiet MB/s",
            "flooded MB/s",
            "ratio",
            "newcomers of 6",
            "seconds for all",
            "flood datagrams/s",
        ]
        .map(String::from)
        .to_vec(),
        rows: vec![],
    };
    let (mut quiets, mut floodeds, mut ratios, mut rates) = (vec![], vec![], vec![], vec![]);
    let (mut fewest, mut slowest) = (NEWCOMERS, 0.0f64);
    let mut failures = Vec::new();
    for round in 0..rounds {
        let (_server, addr) = super::super::session::spawn_local_serve(&skf, &pubs[0], &extra)?;
        let server_addr: std::net::SocketAddr = addr
            .parse()
            .with_context(|| format!("the server's address `{addr}`"))?;
        let replayed = recorded_initiation(client_keys[6].clone(), sk.public(), server_addr)?;
        let flood_first = round % 2 == 1;
        let mut quiet = None;
        if !flood_first {
            quiet = Some(transfer(&addr)?);
        }
        let stop = Arc::new(AtomicBool::new(false));
        let flood = {
            let stop = Arc::clone(&stop);
            std::thread::spawn(move || -> Result<(u64, Duration)> {
                if two {
                    let _ = crate::forward::pin_current_thread(&[1]);
                }
                let mut l = phyllo_udp::udp::UdpLink::bind(([127, 0, 0, 1], 0).into())
                    .context("binding the flood's socket")?;
                let views: Vec<&[u8]> = (0..phyllo_udp::udp::MAX_BATCH)
                    .map(|_| &replayed[..])
                    .collect();
                let start = Instant::now();
                let mut sent = 0u64;
                while !stop.load(Ordering::Relaxed) {
                    sent += l.send_batch_to(&views, server_addr).unwrap_or(0) as u64;
                }
                Ok((sent, start.elapsed()))
            })
        };
        // The flooded phase: the flood settles, then the transfer, then the newcomers; the
        // flood stops whatever happened.
        let phase = (|| -> Result<_> {
            std::thread::sleep(FLOOD_LEAD);
            let flooded = transfer(&addr)?;
            Ok((flooded, newcomers(&addr)?))
        })();
        stop.store(true, Ordering::Relaxed);
        let (sent, span) = flood
            .join()
            .map_err(|_| anyhow::anyhow!("the flood thread panicked"))??;
        let (flooded, (got, secs, why)) = phase?;
        let quiet = match quiet {
            Some(q) => q,
            None => transfer(&addr)?,
        };
        let rate = sent as f64 / span.as_secs_f64().max(1e-9);
        let ratio = if quiet > 0.0 { flooded / quiet } else { 0.0 };
        fewest = fewest.min(got);
        slowest = slowest.max(secs);
        failures.extend(why);
        quiets.push(quiet);
        floodeds.push(flooded);
        ratios.push(ratio);
        rates.push(rate);
        table.rows.push(vec![
            format!(
                "{} ({} first)",
                round + 1,
                if flood_first { "flooded" } else { "quiet" }
            ),
            format!("{quiet:.0}"),
            format!("{flooded:.0}"),
            format!("{ratio:.2}"),
            format!("{got}"),
            format!("{secs:.1}"),
            format!("{rate:.0}"),
        ]);
    }
    let ratio = Summary::of(&ratios);
    let rate = median(&rates);
    table.rows.push(vec![
        "median (ratio: min–max; newcomers: fewest; seconds: most)".into(),
        format!("{:.0}", median(&quiets)),
        format!("{:.0}", median(&floodeds)),
        ratio.cell(2),
        format!("{fewest}"),
        format!("{slowest:.1}"),
        format!("{rate:.0}"),
    ]);
    out.figures
        .push(("serve.flood_transfer_goodput_ratio".into(), ratio.median));
    out.figures
        .push(("serve.flood_newcomers_min".into(), fewest as f64));
    out.figures
        .push(("serve.flood_initiations_per_s".into(), rate));
    if !failures.is_empty() {
        failures.sort();
        failures.dedup();
        table.title += &format!(
            " (newcomers without a session said: {})",
            failures
                .iter()
                .map(|w| format!("`{w}`"))
                .collect::<Vec<_>>()
                .join("; ")
        );
    }
    out.tables.push(table);
    Ok(ratio)
}

/// Bytes of the file [`transfer_runs`] sends.
pub(super) fn transfer_bytes(quick: bool) -> usize {
    if quick {
        32 << 20
    } else {
        64 << 20
    }
}

/// Rounds of [`transfer_runs`]: odd, so that each median is one round's.
pub(super) fn transfer_rounds(quick: bool) -> usize {
    if quick {
        3
    } else {
        5
    }
}

/// An initiation of `key`'s to the server `(public, addr)`, as it would leave the client.
fn recorded_initiation(
    key: phyllo::session::StaticKey,
    server: phyllo::PublicKey,
    addr: std::net::SocketAddr,
) -> Result<Vec<u8>> {
    let mut s = phyllo_net::SessionSocket::bind(
        ([127, 0, 0, 1], 0).into(),
        key,
        vec![],
        phyllo_net::DEFAULT_STACK,
        true,
    )?;
    let now = s.now();
    s.endpoint_mut().connect(now, server, addr);
    let mut d = Vec::new();
    s.endpoint_mut()
        .poll_transmit(&mut d)
        .context("no initiation to record")?;
    Ok(d)
}

/// How a child of [`Children`] ended.
struct Ended {
    /// It exited 0.
    ok: bool,
    /// It was still running at the limit and was killed.
    killed: bool,
    stdout: String,
    stderr: String,
}

/// Child processes (stdin null, stdout and stderr piped), killed and reaped if dropped before
/// they end, so none outlives a failed measurement.
struct Children(Vec<Child>);

impl Children {
    fn spawn(commands: impl IntoIterator<Item = Command>) -> Result<Children> {
        let mut children = Children(Vec::new());
        for mut cmd in commands {
            let child = cmd
                .stdin(Stdio::null())
                .stdout(Stdio::piped())
                .stderr(Stdio::piped())
                .spawn()?;
            children.0.push(child);
        }
        Ok(children)
    }

    /// Wait until every child has ended or `limit` has passed, killing those still running
    /// then; how each ended, in order. The children print a few lines, which the pipes hold
    /// until they are read here.
    fn finish(mut self, limit: Duration) -> Result<Vec<Ended>> {
        use std::io::Read;
        let deadline = Instant::now() + limit;
        let mut status = vec![None; self.0.len()];
        let mut killed = vec![false; self.0.len()];
        loop {
            for (c, s) in self.0.iter_mut().zip(&mut status) {
                if s.is_none() {
                    *s = c.try_wait().context("waiting for a child")?;
                }
            }
            if status.iter().all(Option::is_some) {
                break;
            }
            if Instant::now() >= deadline {
                for ((c, s), k) in self.0.iter_mut().zip(&mut status).zip(&mut killed) {
                    if s.is_none() {
                        let _ = c.kill();
                        *s = Some(c.wait().context("reaping a killed child")?);
                        *k = true;
                    }
                }
                break;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        let mut ended = Vec::new();
        for ((c, s), killed) in self.0.iter_mut().zip(status).zip(killed) {
            let (mut stdout, mut stderr) = (String::new(), String::new());
            if let Some(mut o) = c.stdout.take() {
                o.read_to_string(&mut stdout)
                    .context("reading a child's stdout")?;
            }
            if let Some(mut e) = c.stderr.take() {
                e.read_to_string(&mut stderr)
                    .context("reading a child's stderr")?;
            }
            ended.push(Ended {
                ok: s.is_some_and(|s| s.success()),
                killed,
                stdout,
                stderr,
            });
        }
        Ok(ended)
    }
}

impl Drop for Children {
    fn drop(&mut self) {
        for c in &mut self.0 {
            // Ended children are reaped already; killing one is harmless.
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}
