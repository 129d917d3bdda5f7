use phyllo::link::rawudp::{raw_pingpong, PingPongConfig};
use phyllo::link::udp::{RecvBatch, UdpLink};
use std::time::Instant;
fn med(v: &mut Vec<u64>) -> f64 { v.sort(); v[v.len()/2] as f64 }
fn link_pingpong(rounds: usize) -> Vec<u64> {
    let (mut a, mut b) = UdpLink::loopback_pair().unwrap();
    a.set_nonblocking(true); b.set_nonblocking(true);
    a.set_batching(false); b.set_batching(false);
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let s2 = stop.clone();
    let echo = std::thread::spawn(move || {
        let mut batch = RecvBatch::new(1, 2048);
        while !s2.load(std::sync::atomic::Ordering::Relaxed) {
            if b.try_recv(&mut batch).unwrap() > 0 {
                let d = batch.get(0).unwrap().to_vec();
                b.send_batch(&[&d]).unwrap();
            }
        }
    });
    let mut batch = RecvBatch::new(1, 2048);
    let data = [7u8; 8];
    let mut out = Vec::new();
    for r in 0..rounds + 500 {
        let t0 = Instant::now();
        a.send_batch(&[&data]).unwrap();
        while a.try_recv(&mut batch).unwrap() == 0 {}
        if r >= 500 { out.push(t0.elapsed().as_nanos() as u64); }
    }
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    echo.join().unwrap();
    out
}
fn main() -> anyhow::Result<()> {
    let spec = std::env::args().nth(1).unwrap_or("frag(1400):window(16):checksum".into());
    let rounds = 5000;
    let (mut raw, mut on, mut link, mut off) = (Vec::new(), Vec::new(), Vec::new(), Vec::new());
    for _ in 0..4 {
        raw.extend(raw_pingpong(&PingPongConfig::new(rounds, 8))?.samples_ns);
        link.extend(link_pingpong(rounds));
        on.extend(phyllo_cli::measure::rtt_udp(&spec, true, 8, rounds, true)?.samples_ns);
        off.extend(phyllo_cli::measure::rtt_udp(&spec, false, 8, rounds, true)?.samples_ns);
    }
    let (r, o, l, f) = (med(&mut raw), med(&mut on), med(&mut link), med(&mut off));
    println!("raw {:.0} ns  link {:.0} ({:.3}) accel {:.0} ({:.3}) off {:.0} ({:.3})", r, l, l/r, o, o / r, f, f/r);
    Ok(())
}
