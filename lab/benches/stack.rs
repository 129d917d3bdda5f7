//! Criterion benchmarks of the framework core, measured in one run:
//! - `stack/send_deliver`: per-message send + deliver cost of the 4-layer stack over the
//!   in-memory link, dynamic and static forms, 8 B and 1 KiB messages;
//! - `rtt_udp`: a busy-poll round trip over UDP loopback, raw UDP vs phyllo (4-layer stack);
//!   the ratio of the two medians is printed at the end.

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion};
use phyllo::stack::LayerSet;
use phyllo::testing::Pair;
use phyllo_lab::measure::{rtt_udp, static4_pair};
use phyllo_lab::rawudp::{raw_pingpong, PingPongConfig, Summary};
use std::time::Duration;

const SPEC4: &str = "frag(1400):window(16):checksum:seal";

fn one<S: LayerSet>(pair: &mut Pair<S>, data: &[u8]) {
    pair.a.send(pair.now, data).unwrap();
    while pair.step() {}
    while let Some(m) = pair.b.poll_delivery() {
        pair.b.recycle(m);
    }
}

fn send_deliver(c: &mut Criterion) {
    let mut g = c.benchmark_group("stack/send_deliver");
    for size in [8usize, 1024] {
        let data = vec![0x5a; size];
        let mut dynamic = Pair::from_spec(SPEC4).unwrap();
        g.bench_with_input(BenchmarkId::new("dynamic", size), &data, |b, d| {
            b.iter(|| one(&mut dynamic, d))
        });
        let mut stat = static4_pair().unwrap();
        g.bench_with_input(BenchmarkId::new("static", size), &data, |b, d| {
            b.iter(|| one(&mut stat, d))
        });
    }
    g.finish();
}

fn rtt(c: &mut Criterion) {
    let mut g = c.benchmark_group("rtt_udp");
    g.sample_size(10).measurement_time(Duration::from_secs(5));
    g.bench_function("raw", |b| {
        b.iter_custom(|iters| {
            let r = raw_pingpong(&PingPongConfig::new(iters as usize, 8)).unwrap();
            Duration::from_nanos(r.samples_ns.iter().sum())
        })
    });
    g.bench_function("phyllo_4layer", |b| {
        b.iter_custom(|iters| {
            let r = rtt_udp(SPEC4, false, 8, iters as usize, true).unwrap();
            Duration::from_nanos(r.samples_ns.iter().sum())
        })
    });
    g.finish();
    // The ratio, from paired runs of the same length (medians resist preemption spikes).
    let mut raw = Vec::new();
    let mut ph = Vec::new();
    for _ in 0..3 {
        raw.extend(
            raw_pingpong(&PingPongConfig::new(5000, 8))
                .unwrap()
                .samples_ns,
        );
        ph.extend(rtt_udp(SPEC4, false, 8, 5000, true).unwrap().samples_ns);
    }
    let (r, p) = (
        Summary::from_samples(&raw).unwrap(),
        Summary::from_samples(&ph).unwrap(),
    );
    println!(
        "rtt_udp median: raw {} ns, phyllo {} ns, ratio {:.3}",
        r.median_ns,
        p.median_ns,
        p.median_ns as f64 / r.median_ns as f64
    );
}

criterion_group!(benches, send_deliver, rtt);
criterion_main!(benches);
