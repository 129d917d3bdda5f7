//! Packet filters (seed 004 §3.3 / Table 2): the reference interpreter against the compiled
//! form, on the send and delivery programs of a window+checksum+frag-like stack, for 8-byte
//! and 1 KB bodies, plus a digest-free program of field checks that isolates dispatch cost.
//!
//! Run: `cargo bench -p phyllo --bench filter`.

use std::hint::black_box;

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use phyllo::accel::filter::{
    verify, CompileOptions, DigestId, Direction, FieldTable, FilterCtx, Op, ProgramBuilder,
};
use phyllo::field::{ByteOrder, FieldHandle, FieldLoc};

fn loc(bit_offset: u32, bits: u8) -> FieldLoc {
    FieldLoc { bit_offset, bits }
}

/// The 7-byte header: 32-bit sequence number (window), 1-bit fragment flag and 7-bit kind
/// (frag), 16-bit Internet checksum (checksum).
struct Layout {
    table: FieldTable,
    seq: FieldHandle,
    frag: FieldHandle,
    kind: FieldHandle,
    csum: FieldHandle,
}

fn layout() -> Layout {
    let mut table = FieldTable::new(7, Vec::new());
    let seq = table.push(loc(0, 32));
    let frag = table.push(loc(32, 1));
    let kind = table.push(loc(33, 7));
    let csum = table.push(loc(40, 16));
    Layout {
        table,
        seq,
        frag,
        kind,
        csum,
    }
}

fn programs(l: &Layout) -> [(&'static str, Direction, ProgramBuilder); 3] {
    // Layers: 0 window, 1 frag, 2 checksum.
    let mut send = ProgramBuilder::new();
    send.segment(0);
    send.segment(1)
        .extend([Op::PushSize, Op::PushConst(1400), Op::Gt, Op::Abort(1)]);
    send.segment(2)
        .extend([Op::Digest(DigestId::INET_CHECKSUM), Op::PopField(l.csum)]);

    let mut deliver = ProgramBuilder::new();
    deliver
        .segment(1)
        .extend([Op::PushField(l.frag), Op::Abort(2)]);
    deliver.segment(2).extend([
        Op::Digest(DigestId::INET_CHECKSUM),
        Op::PushField(l.csum),
        Op::Ne,
        Op::Abort(3),
    ]);

    // No digest: eight field checks, aligned and not, that all pass.
    let mut checks = ProgramBuilder::new();
    for (i, (f, k)) in [(l.seq, 7u64), (l.kind, 5), (l.frag, 0), (l.seq, 8)]
        .into_iter()
        .enumerate()
    {
        checks
            .segment(i)
            .extend([Op::PushField(f), Op::PushConst(k), Op::Gt, Op::Abort(4)]);
        checks.segment(i).extend([
            Op::PushField(f),
            Op::PushConst(1),
            Op::Add,
            Op::PushConst(0),
            Op::Eq,
            Op::Abort(5),
        ]);
    }
    [
        ("send", Direction::Send, send),
        ("deliver", Direction::Deliver, deliver),
        ("checks", Direction::Deliver, checks),
    ]
}

fn bench_filters(c: &mut Criterion) {
    let l = layout();
    let order = ByteOrder::Big;
    for (name, dir, builder) in programs(&l) {
        let f = verify(&builder.build(), &l.table, dir).expect("bench program verifies");
        let compiled = f.compile();
        let unfused = f.compile_with(CompileOptions { fuse: false });
        let mut group = c.benchmark_group(format!("filter/{name}"));
        for size in [8usize, 1024] {
            let body: Vec<u8> = (0..size).map(|i| (i * 31 + 7) as u8).collect();
            // A header the delivery filter accepts: seq 7, kind 5, correct checksum.
            let mut hdr = [0u8; 7];
            hdr[..4].copy_from_slice(&7u32.to_be_bytes());
            hdr[4] = 5;
            hdr[5..7].copy_from_slice(&phyllo::accel::filter::inet_checksum(&body).to_be_bytes());
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
