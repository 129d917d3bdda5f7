//! Steady timings of the packet filters (van Renesse, "Masking the Overhead of Protocol Layering"
//! (seed 004 §3.3) / Table 2) on a shared or loaded machine: the same programs as the `filter`
//! criterion bench. The variants of one case are timed in interleaved batches of 2000 runs, 300
//! rounds, and each reports its minimum batch: interleaving exposes them to the same interference,
//! the minimum filters most of it out.
//!
//! Run: `cargo run --release -p phyllo --example filter_timing`.

use std::hint::black_box;
use std::time::Instant;

use phyllo::field::ByteOrder;
use phyllo::filter::{inet_checksum, verify, CompileOptions, Direction, FilterCtx, ProgramBuilder};

#[path = "../benches/common/filter_programs.rs"]
mod programs;
use programs::{layout, message, programs, HEADER};

const ROUNDS: usize = 300;
const BATCH: usize = 2000;

/// Minimum time per call of each of `fs`, in nanoseconds, timed in interleaved batches.
fn min_ns(fs: &mut [&mut dyn FnMut()]) -> Vec<f64> {
    let mut best = vec![f64::MAX; fs.len()];
    for _ in 0..ROUNDS {
        for (f, b) in fs.iter_mut().zip(&mut best) {
            let t = Instant::now();
            for _ in 0..BATCH {
                f();
            }
            *b = b.min(t.elapsed().as_nanos() as f64 / BATCH as f64);
        }
    }
    best
}

/// One filter run over a fresh context on `hdr` and `body`.
#[inline(always)]
fn once(
    dir: Direction,
    h: &mut [u8; HEADER],
    hdr: &[u8; HEADER],
    body: &[u8],
    run: impl Fn(&mut FilterCtx<'_>) -> u64,
) {
    let mut ctx = match dir {
        Direction::Send => FilterCtx::send(h, ByteOrder::Big, black_box(body)),
        Direction::Deliver => FilterCtx::deliver(hdr, ByteOrder::Big, black_box(body)),
    };
    black_box(run(&mut ctx));
}

fn main() {
    let l = layout();
    let mut all = programs(&l).to_vec();
    all.push(("empty", Direction::Deliver, ProgramBuilder::new()));
    println!("program  body   interpret  compiled  unfused   (checksum alone), ns per run");
    for (name, dir, builder) in all {
        let f = verify(&builder.build(), &l.table, dir).expect("program verifies");
        let fused = f.compile();
        let unfused = f.compile_with(CompileOptions { fuse: false });
        for size in [8usize, 1024] {
            let (body, hdr) = message(size);
            let (mut h1, mut h2, mut h3) = (hdr, hdr, hdr);
            let t = min_ns(&mut [
                &mut || once(dir, &mut h1, &hdr, &body, |c| f.interpret(c)),
                &mut || once(dir, &mut h2, &hdr, &body, |c| fused.run(c)),
                &mut || once(dir, &mut h3, &hdr, &body, |c| unfused.run(c)),
                &mut || {
                    black_box(inet_checksum(black_box(&body)));
                },
            ]);
            println!(
                "{name:8} {size:5}B  {:9.2}  {:8.2}  {:7.2}   ({:.2})",
                t[0], t[1], t[2], t[3]
            );
        }
    }
}
