//! Packet filters (van Renesse, "Masking the Overhead of Protocol Layering" (seed 004 §3.3) / Table
//! 2): the reference interpreter against the compiled form, on the send and delivery programs of a
//! window+checksum+frag-like stack, for 8-byte and 1 KB bodies, plus a digest-free program of field
//! checks that isolates dispatch cost.
//!
//! Run: `cargo bench -p phyllo --bench filter`. On a shared or loaded machine the
//! `filter_timing` example (minimum over batches) gives steadier figures.

use std::hint::black_box;

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use phyllo::field::ByteOrder;
use phyllo::filter::{verify, CompileOptions, Direction, FilterCtx};

#[path = "common/filter_programs.rs"]
mod programs;
use programs::{layout, message, programs};

fn bench_filters(c: &mut Criterion) {
    let l = layout();
    let order = ByteOrder::Big;
    for (name, dir, builder) in programs(&l) {
        let f = verify(&builder.build(), &l.table, dir).expect("bench program verifies");
        let compiled = f.compile();
        let unfused = f.compile_with(CompileOptions { fuse: false });
        let mut group = c.benchmark_group(format!("filter/{name}"));
        for size in [8usize, 1024] {
            let (body, hdr) = message(size);
            let expect = f.interpret(&mut FilterCtx::send(&mut hdr.clone(), order, &body));
            assert_eq!(expect, 0, "{name} accepts the bench message");
            group.throughput(Throughput::Elements(1));
            let label = if size == 8 { "8B" } else { "1KB" };
            group.bench_function(BenchmarkId::new("interpret", label), |b| {
                let mut h = hdr;
                b.iter(|| {
                    let mut ctx = match dir {
                        Direction::Send => FilterCtx::send(&mut h, order, black_box(&body)),
                        Direction::Deliver => FilterCtx::deliver(&hdr, order, black_box(&body)),
                    };
                    black_box(f.interpret(&mut ctx))
                })
            });
            for (kind, cf) in [("compiled", &compiled), ("compiled-unfused", &unfused)] {
                group.bench_function(BenchmarkId::new(kind, label), |b| {
                    let mut h = hdr;
                    b.iter(|| {
                        let mut ctx = match dir {
                            Direction::Send => FilterCtx::send(&mut h, order, black_box(&body)),
                            Direction::Deliver => FilterCtx::deliver(&hdr, order, black_box(&body)),
                        };
                        black_box(cf.run(&mut ctx))
                    })
                });
            }
        }
        group.finish();
    }
}

criterion_group!(benches, bench_filters);
criterion_main!(benches);
