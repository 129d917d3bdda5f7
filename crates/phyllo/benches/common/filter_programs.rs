//! The programs and header shared by the `filter` bench and the `filter_timing` example: the
//! send and delivery filters of a window+checksum+frag-like stack over a hand-built 15-byte
//! header laid out like the accelerator's (the 64-bit connection identification first, so
//! at least eight bytes, as every accelerated header has), and a digest-free program of
//! field checks.

use phyllo::field::{FieldHandle, FieldLoc};
use phyllo::filter::{DigestId, Direction, FieldTable, Op, ProgramBuilder};

pub fn loc(bit_offset: u32, bits: u8) -> FieldLoc {
    FieldLoc { bit_offset, bits }
}

/// Bytes of the header.
pub const HEADER: usize = 15;

/// The 15-byte header: 64-bit connection identification (the accelerator's), 32-bit sequence
/// number (window), 1-bit fragment flag and 7-bit kind (frag), 16-bit Internet checksum
/// (checksum).
pub struct Layout {
    pub table: FieldTable,
    pub seq: FieldHandle,
    pub frag: FieldHandle,
    pub kind: FieldHandle,
    pub csum: FieldHandle,
}

pub fn layout() -> Layout {
    let mut table = FieldTable::new(HEADER, Vec::new());
    table.push(loc(0, 64));
    let seq = table.push(loc(64, 32));
    let frag = table.push(loc(96, 1));
    let kind = table.push(loc(97, 7));
    let csum = table.push(loc(104, 16));
    Layout {
        table,
        seq,
        frag,
        kind,
        csum,
    }
}

pub fn programs(l: &Layout) -> [(&'static str, Direction, ProgramBuilder); 3] {
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

/// A body of `size` bytes and a header the delivery filters accept for it (seq 7, kind 5,
/// correct checksum).
pub fn message(size: usize) -> (Vec<u8>, [u8; HEADER]) {
    let body: Vec<u8> = (0..size).map(|i| (i * 31 + 7) as u8).collect();
    let mut hdr = [0u8; HEADER];
    hdr[..8].copy_from_slice(&0x0123_4567_89ab_cdefu64.to_be_bytes());
    hdr[8..12].copy_from_slice(&7u32.to_be_bytes());
    hdr[12] = 5;
    hdr[13..15].copy_from_slice(&phyllo::filter::inet_checksum(&body).to_be_bytes());
    (body, hdr)
}
