//! Fuzz the packet-filter pipeline of seed 004 §3.3 / Table 2: decode arbitrary bytes into a
//! program, verify it, and if the verifier accepts it run both executions (the reference
//! interpreter and the compiled form) and assert they agree on the result and on every
//! header byte. Nothing may panic on the way.
//!
//! Input layout: `flags: u8` (bit 0: send program, bit 1: big-endian, bits 2..: header
//! length), `len: u16` little-endian, `len` bytes of encoded program (`Program::decode`), then
//! header bytes followed by the message body.

#![no_main]

use libfuzzer_sys::fuzz_target;
use phyllo::filter::{verify, Direction, FieldTable, FilterCtx, Program};
use phyllo::field::{ByteOrder, FieldLoc};

fn table() -> FieldTable {
    let loc = |bit_offset, bits| FieldLoc { bit_offset, bits };
    FieldTable::new(
        12,
        vec![
            loc(0, 8),
            loc(8, 16),
            loc(24, 32),
            loc(32, 64),
            loc(3, 1),
            loc(13, 7),
            loc(41, 23),
            loc(90, 6),
            // Outside the 12-byte header: must be rejected by the verifier.
            loc(90, 16),
        ],
    )
}

fuzz_target!(|data: &[u8]| {
    let Some((&flags, rest)) = data.split_first() else {
        return;
    };
    let Some(len) = rest
        .get(..2)
        .map(|b| u16::from_le_bytes([b[0], b[1]]) as usize)
    else {
        return;
    };
    let rest = &rest[2..];
    let (prog, rest) = rest.split_at(len.min(rest.len()));
    let Ok(program) = Program::decode(prog) else {
        return;
    };
    let direction = if flags & 1 == 1 {
        Direction::Send
    } else {
        Direction::Deliver
    };
    let order = if flags & 2 == 2 {
        ByteOrder::Big
    } else {
        ByteOrder::Little
    };
    let Ok(filter) = verify(&program, &table(), direction) else {
        return;
    };
    let (header, body) = rest.split_at(((flags >> 2) as usize).min(rest.len()));
    let compiled = filter.compile();
    let (mut a, mut b) = (header.to_vec(), header.to_vec());
    let (ra, rb) = match direction {
        Direction::Send => (
            filter.interpret(&mut FilterCtx::send(&mut a, order, body)),
            compiled.run(&mut FilterCtx::send(&mut b, order, body)),
        ),
        Direction::Deliver => (
            filter.interpret(&mut FilterCtx::deliver(&a, order, body)),
            compiled.run(&mut FilterCtx::deliver(&b, order, body)),
        ),
    };
    assert_eq!(ra, rb, "executions disagree on the result");
    assert_eq!(a, b, "executions disagree on the header");
});
