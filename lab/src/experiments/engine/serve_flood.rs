//! The engine experiment's last part: `phyllo serve` under a flood, on the engine and off.

use crate::report::{Section, Table};
use anyhow::Result;
use std::time::Duration;

/// `phyllo serve` under a flood of garbage and replayed initiations, on the engine and off:
/// the established session's echo rate with the flood over without it.
pub(super) fn run(quick: bool, out: &mut Section) -> Result<()> {
    use phyllo::session::StaticKey;
    if super::super::phyllo_exe().is_none() {
        return Ok(());
    }
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
    let result = serve_flood_runs(span, two, &sk, &ck, &dir, out);
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
