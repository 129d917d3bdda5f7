//! Where the UDP round trip goes: the same busy-poll ping-pong of 8-byte datagrams over
//! 127.0.0.1, four ways, interleaved in one run (medians in ns, ratios to raw sockets):
//!
//! - `raw`: std sockets, `send`/`recv` ([`raw_pingpong`], the report's baseline);
//! - `link`: phyllo's [`UdpLink`] (`recvfrom`, one-slot batches) with no protocol at all;
//! - `accel`, `layered`: the `frag(1400):window(16):checksum` stack with and without the
//!   Protocol Accelerator ([`rtt_udp`]).
//!
//! `link / raw` is what the socket layer costs, `accel / link` what the driver and the
//! protocol cost. Run: `cargo run --release -p phyllo-lab --example rtt_breakdown [STACK]`.

use anyhow::Result;
use phyllo_lab::measure::{median, rtt_udp};
use phyllo_lab::rawudp::{raw_pingpong, PingPongConfig};
use phyllo_udp::udp::{RecvBatch, UdpLink};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Instant;

/// Ping-pong over two [`UdpLink`]s, echoing each datagram back; returns the round trips in ns.
fn link_pingpong(rounds: usize) -> Result<Vec<u64>> {
    let (mut a, mut b) = UdpLink::loopback_pair()?;
    for l in [&mut a, &mut b] {
        l.set_nonblocking(true);
        l.set_batching(false);
    }
    let stop = Arc::new(AtomicBool::new(false));
    let stop_echo = stop.clone();
    let echo = std::thread::spawn(move || -> std::io::Result<()> {
        let mut batch = RecvBatch::new(1, 2048);
        let mut copy = Vec::new();
        while !stop_echo.load(Ordering::Relaxed) {
            if b.try_recv(&mut batch)? > 0 {
                copy.clear();
                copy.extend_from_slice(batch.get(0).unwrap_or(&[]));
                b.send_batch(&[&copy])?;
            } else {
                std::hint::spin_loop();
            }
        }
        Ok(())
    });
    let mut batch = RecvBatch::new(1, 2048);
    let warmup = 500;
    let mut out = Vec::with_capacity(rounds);
    for r in 0..rounds + warmup {
        let t0 = Instant::now();
        a.send_batch(&[&[7u8; 8]])?;
        while a.try_recv(&mut batch)? == 0 {
            std::hint::spin_loop();
        }
        if r >= warmup {
            out.push(t0.elapsed().as_nanos() as u64);
        }
    }
    stop.store(true, Ordering::Relaxed);
    echo.join()
        .map_err(|_| anyhow::anyhow!("echo thread panicked"))??;
    Ok(out)
}

fn main() -> Result<()> {
    let spec = std::env::args()
        .nth(1)
        .unwrap_or_else(|| "frag(1400):window(16):checksum".into());
    let rounds = 5_000;
    let (mut raw, mut link, mut accel, mut layered) = (vec![], vec![], vec![], vec![]);
    for _ in 0..4 {
        raw.extend(raw_pingpong(&PingPongConfig::new(rounds, 8))?.samples_ns);
        link.extend(link_pingpong(rounds)?);
        accel.extend(rtt_udp(&spec, true, 8, rounds, true)?.samples_ns);
        layered.extend(rtt_udp(&spec, false, 8, rounds, true)?.samples_ns);
    }
    let r = median(&raw);
    println!("{:<8} {:>8} {:>6}", "", "ns", "/ raw");
    for (name, v) in [
        ("raw", &raw),
        ("link", &link),
        ("accel", &accel),
        ("layered", &layered),
    ] {
        let m = median(v);
        println!("{name:<8} {m:>8.0} {:>6.3}", m / r);
    }
    Ok(())
}
