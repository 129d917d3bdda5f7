//! Tests of the packet-filter machine: one verifier rejection per reason, the programs of a
//! window+checksum+frag stack, and the differential test of the interpreter against the
//! compiled form on generated verified programs.

use proptest::prelude::*;

use super::*;
use crate::field::{read_bits, FieldHandle, FieldLoc};

fn loc(bit_offset: u32, bits: u8) -> FieldLoc {
    FieldLoc { bit_offset, bits }
}

fn h(i: usize) -> FieldHandle {
    FieldHandle::from_index(i)
}

/// A 7-byte header like the window+checksum+frag stack's: a 32-bit sequence number, the
/// frag layer's 1-bit "fragment" flag, a 7-bit kind, and a 16-bit checksum.
struct Stack7 {
    table: FieldTable,
    seq: FieldHandle,
    frag: FieldHandle,
    kind: FieldHandle,
    csum: FieldHandle,
}

fn stack7() -> Stack7 {
    let mut table = FieldTable::new(7, Vec::new());
    let seq = table.push(loc(0, 32));
    let frag = table.push(loc(32, 1));
    let kind = table.push(loc(33, 7));
    let csum = table.push(loc(40, 16));
    Stack7 {
        table,
        seq,
        frag,
        kind,
        csum,
    }
}

const MTU_BODY: u64 = 1400;
const WINDOW: LayerId = 0;
const FRAG: LayerId = 1;
const CHECKSUM: LayerId = 2;

fn send_program(s: &Stack7) -> Program {
    let mut b = ProgramBuilder::new();
    b.segment(WINDOW); // the window layer's fields are all predicted: nothing to add
    b.segment(FRAG)
        .extend([Op::PushSize, Op::PushConst(MTU_BODY), Op::Gt, Op::Abort(1)]);
    b.segment(CHECKSUM)
        .extend([Op::Digest(DigestId::INET_CHECKSUM), Op::PopField(s.csum)]);
    b.build()
}

fn deliver_program(s: &Stack7) -> Program {
    let mut b = ProgramBuilder::new();
    b.segment(FRAG)
        .extend([Op::PushField(s.frag), Op::Abort(2)]);
    b.segment(CHECKSUM).extend([
        Op::Digest(DigestId::INET_CHECKSUM),
        Op::PushField(s.csum),
        Op::Ne,
        Op::Abort(3),
    ]);
    b.build()
}

/// Run both executions on copies of `hdr`; assert they agree; return the result and header.
fn run_both(f: &VerifiedFilter, hdr: &[u8], order: ByteOrder, body: &[u8]) -> (u64, Vec<u8>) {
    let mut a = hdr.to_vec();
    let ra = match f.direction() {
        Direction::Send => f.interpret(&mut FilterCtx::send(&mut a, order, body)),
        Direction::Deliver => f.interpret(&mut FilterCtx::deliver(&a, order, body)),
    };
    for options in [
        CompileOptions { fuse: true },
        CompileOptions { fuse: false },
    ] {
        let c = f.compile_with(options);
        let mut b = hdr.to_vec();
        let rb = match f.direction() {
            Direction::Send => c.run(&mut FilterCtx::send(&mut b, order, body)),
            Direction::Deliver => c.run(&mut FilterCtx::deliver(&b, order, body)),
        };
        assert_eq!(
            ra,
            rb,
            "result differs ({options:?}) for\n{}",
            Program::new(f.ops().to_vec())
        );
        assert_eq!(
            a,
            b,
            "header differs ({options:?}) for\n{}",
            Program::new(f.ops().to_vec())
        );
    }
    (ra, a)
}

// ---- the fast path of realistic programs ----

#[test]
fn checksum_and_frag_send_program() {
    let s = stack7();
    let f = verify(&send_program(&s), &s.table, Direction::Send).unwrap();
    assert_eq!(f.max_stack_depth(), 2);
    assert!(f.writes_fields());
    let c = f.compile();
    // PUSH_SIZE PUSH_CONSTANT GT ABORT → one op; DIGEST POP_FIELD → one op; RETURN.
    assert_eq!(c.compiled_ops(), 3);
    for order in [ByteOrder::Big, ByteOrder::Little] {
        let body = b"8 bytes!";
        let mut hdr = [0xA5u8; 7];
        let (r, out) = run_both(&f, &hdr, order, body);
        assert_eq!(r, 0, "a small message takes the fast path");
        assert_eq!(
            read_bits(&out, s.table.get(s.csum).unwrap(), order),
            inet_checksum(body) as u64
        );
        assert_eq!(out[..5], hdr[..5], "only the checksum field is written");
        assert_eq!(c.run(&mut FilterCtx::send(&mut hdr, order, body)), 0);
        assert_eq!(hdr.to_vec(), out);

        let big = vec![7u8; 1401];
        let (r, out) = run_both(&f, &[0u8; 7], order, &big);
        assert_eq!(
            r, 1,
            "an oversize message fails the send filter (frag layer)"
        );
        assert_eq!(out, [0u8; 7], "and the checksum was never written");
        assert_eq!(run_both(&f, &[0u8; 7], order, &big[..1400]).0, 0);
    }
}

#[test]
fn checksum_and_frag_delivery_program() {
    let s = stack7();
    let send = verify(&send_program(&s), &s.table, Direction::Send).unwrap();
    let deliver = verify(&deliver_program(&s), &s.table, Direction::Deliver).unwrap();
    assert!(!deliver.writes_fields());
    for order in [ByteOrder::Big, ByteOrder::Little] {
        let body = b"hello, world".to_vec();
        let mut hdr = [0u8; 7];
        crate::field::write_bits(&mut hdr, s.table.get(s.seq).unwrap(), order, 42);
        crate::field::write_bits(&mut hdr, s.table.get(s.kind).unwrap(), order, 5);
        assert_eq!(
            send.interpret(&mut FilterCtx::send(&mut hdr, order, &body)),
            0
        );

        assert_eq!(
            run_both(&deliver, &hdr, order, &body).0,
            0,
            "intact: fast path"
        );
        let mut bad = body.clone();
        bad[3] ^= 0x10;
        assert_eq!(run_both(&deliver, &hdr, order, &bad).0, 3, "corrupt body");
        let mut frag = hdr;
        crate::field::write_bits(&mut frag, s.table.get(s.frag).unwrap(), order, 1);
        assert_eq!(run_both(&deliver, &frag, order, &body).0, 2, "fragment");
    }
}

#[test]
fn a_layer_rewrites_its_segment() {
    let s = stack7();
    let mut b = ProgramBuilder::new();
    b.segment(FRAG)
        .extend([Op::PushSize, Op::PushConst(1400), Op::Gt, Op::Abort(1)]);
    let body = vec![0u8; 1000];
    let f = verify(&b.build(), &s.table, Direction::Send).unwrap();
    assert_eq!(run_both(&f, &[0; 7], ByteOrder::Big, &body).0, 0);
    // The path MTU dropped: the frag layer rewrites its check in post-processing.
    b.replace_segment(
        FRAG,
        [Op::PushSize, Op::PushConst(576), Op::Gt, Op::Abort(1)],
    );
    let f = verify(&b.build(), &s.table, Direction::Send).unwrap();
    assert_eq!(run_both(&f, &[0; 7], ByteOrder::Big, &body).0, 1);
}

#[test]
fn arithmetic_wraps_and_shifts_are_masked() {
    let t = FieldTable::new(8, vec![loc(0, 64)]);
    let cases: [(&[Op], u64); 9] = [
        (&[Op::PushConst(0), Op::PushConst(1), Op::Sub], u64::MAX),
        (&[Op::PushConst(u64::MAX), Op::PushConst(2), Op::Add], 1),
        (&[Op::PushConst(1), Op::PushConst(65), Op::Shl], 2),
        (&[Op::PushConst(0x80), Op::PushConst(64 + 4), Op::Shr], 0x8),
        (
            &[Op::PushConst(0b1100), Op::PushConst(0b1010), Op::Xor],
            0b0110,
        ),
        (&[Op::PushConst(3), Op::PushConst(5), Op::Lt], 1),
        (&[Op::PushConst(u64::MAX), Op::PushConst(5), Op::Le], 0),
        (&[Op::PushConst(5), Op::PushConst(5), Op::Ge], 1),
        (&[Op::PushSize, Op::Digest(DigestId::BODY_LEN), Op::Eq], 1),
    ];
    for (ops, want) in cases {
        let mut p = ops.to_vec();
        p.extend([Op::PopField(h(0)), Op::Return(0)]);
        let f = verify(&Program::new(p), &t, Direction::Send).unwrap();
        let (r, out) = run_both(&f, &[0xEE; 8], ByteOrder::Big, b"abc");
        assert_eq!(r, 0);
        assert_eq!(u64::from_be_bytes(out.try_into().unwrap()), want, "{ops:?}");
    }
}

#[test]
fn abort_returns_only_on_non_zero() {
    let t = FieldTable::default();
    let p = Program::new(vec![
        Op::PushConst(0),
        Op::Abort(7),
        Op::PushConst(2),
        Op::Abort(9),
        Op::Return(0),
    ]);
    let f = verify(&p, &t, Direction::Deliver).unwrap();
    assert_eq!(run_both(&f, &[], ByteOrder::Big, &[]).0, 9);
}

#[test]
fn context_that_breaks_verified_assumptions_is_rejected() {
    let s = stack7();
    let send = verify(&send_program(&s), &s.table, Direction::Send).unwrap();
    let c = send.compile();
    let mut short = [0u8; 6];
    let order = ByteOrder::Big;
    assert_eq!(
        send.interpret(&mut FilterCtx::send(&mut short, order, b"x")),
        REJECT_CONTEXT
    );
    assert_eq!(
        c.run(&mut FilterCtx::send(&mut short, order, b"x")),
        REJECT_CONTEXT
    );
    // A program that writes cannot run on a read-only header ...
    let ro = [0u8; 7];
    assert_eq!(
        send.interpret(&mut FilterCtx::deliver(&ro, order, b"x")),
        REJECT_CONTEXT
    );
    assert_eq!(
        c.run(&mut FilterCtx::deliver(&ro, order, b"x")),
        REJECT_CONTEXT
    );
    // ... but a delivery program can check a writable one, and a longer header is fine.
    let deliver = verify(&deliver_program(&s), &s.table, Direction::Deliver).unwrap();
    let mut long = [0u8; 9];
    let r = deliver.interpret(&mut FilterCtx::send(&mut long, order, b""));
    assert_eq!(
        r, 3,
        "zero checksum field does not match the empty body's 0xffff"
    );
}

// ---- one verifier rejection per reason ----

fn t4() -> FieldTable {
    // A 4-byte header: a 16-bit field, a 12-bit field, and one hanging off the end.
    FieldTable::new(4, vec![loc(0, 16), loc(16, 12), loc(24, 16)])
}

#[test]
fn rejects_stack_underflow() {
    let p = Program::new(vec![Op::PushConst(1), Op::Add, Op::Return(0)]);
    let e = verify(&p, &t4(), Direction::Send).unwrap_err();
    assert_eq!(
        e,
        VerifyError::StackUnderflow {
            at: 1,
            op: Op::Add,
            needs: 2,
            depth: 1
        }
    );
    assert_eq!(e.at(), 1);
    assert!(e.to_string().contains("stack underflow"), "{e}");
    let p = Program::new(vec![Op::Abort(1), Op::Return(0)]);
    assert!(matches!(
        verify(&p, &t4(), Direction::Deliver),
        Err(VerifyError::StackUnderflow { at: 0, .. })
    ));
}

#[test]
fn rejects_stack_overflow() {
    let mut ops = vec![Op::PushSize; STACK_CAPACITY + 1];
    ops.push(Op::Return(0));
    let e = verify(&Program::new(ops.clone()), &t4(), Direction::Send).unwrap_err();
    assert_eq!(
        e,
        VerifyError::StackOverflow {
            at: STACK_CAPACITY,
            op: Op::PushSize,
            depth: STACK_CAPACITY + 1,
            limit: STACK_CAPACITY
        }
    );
    // Exactly the capacity is fine.
    ops.remove(0);
    let f = verify(&Program::new(ops), &t4(), Direction::Send).unwrap();
    assert_eq!(f.max_stack_depth(), STACK_CAPACITY);
    // A configured lower limit.
    let p = Program::new(vec![
        Op::PushSize,
        Op::PushSize,
        Op::PushSize,
        Op::Return(0),
    ]);
    let limits = VerifyLimits {
        max_stack_depth: 2,
        ..VerifyLimits::default()
    };
    assert!(matches!(
        verify_with(&p, &t4(), Direction::Send, &limits),
        Err(VerifyError::StackOverflow {
            at: 2,
            limit: 2,
            ..
        })
    ));
}

#[test]
fn rejects_field_not_in_table() {
    let p = Program::new(vec![Op::PushField(h(3)), Op::Abort(1), Op::Return(0)]);
    let e = verify(&p, &t4(), Direction::Deliver).unwrap_err();
    assert_eq!(
        e,
        VerifyError::UnknownField {
            at: 0,
            op: Op::PushField(h(3)),
            handle: h(3),
            table_len: 3
        }
    );
    assert!(e.to_string().contains("not in the field table"), "{e}");
}

#[test]
fn rejects_field_outside_header() {
    let p = Program::new(vec![Op::PushConst(1), Op::PopField(h(2)), Op::Return(0)]);
    let e = verify(&p, &t4(), Direction::Send).unwrap_err();
    assert_eq!(
        e,
        VerifyError::FieldOutsideHeader {
            at: 1,
            op: Op::PopField(h(2)),
            handle: h(2),
            loc: loc(24, 16),
            header_len: 4
        }
    );
    assert!(e.to_string().contains("outside the 4-byte header"), "{e}");
    // Zero-width, over-wide and absurdly placed fields, without arithmetic overflow.
    for bad in [loc(0, 0), loc(0, 65), loc(u32::MAX, 64)] {
        let t = FieldTable::new(4, vec![bad]);
        let p = Program::new(vec![Op::PushField(h(0)), Op::Abort(1), Op::Return(0)]);
        assert!(matches!(
            verify(&p, &t, Direction::Deliver),
            Err(VerifyError::FieldOutsideHeader { at: 0, .. })
        ));
    }
}

#[test]
fn rejects_missing_return() {
    let e = verify(&Program::default(), &t4(), Direction::Send).unwrap_err();
    assert_eq!(e, VerifyError::MissingReturn { at: 0 });
    let p = Program::new(vec![Op::PushSize, Op::Abort(1)]);
    let e = verify(&p, &t4(), Direction::Send).unwrap_err();
    assert_eq!(e, VerifyError::MissingReturn { at: 2 });
    assert!(e.to_string().contains("does not end with RETURN"), "{e}");
}

#[test]
fn rejects_code_after_return() {
    let p = Program::new(vec![Op::Return(0), Op::PushSize, Op::Return(1)]);
    let e = verify(&p, &t4(), Direction::Send).unwrap_err();
    assert_eq!(e, VerifyError::UnreachableAfterReturn { at: 1, ret: 0 });
    assert!(e.to_string().contains("unreachable"), "{e}");
}

#[test]
fn rejects_field_write_in_delivery_program() {
    let p = Program::new(vec![Op::PushConst(1), Op::PopField(h(0)), Op::Return(0)]);
    assert!(verify(&p, &t4(), Direction::Send).is_ok());
    let e = verify(&p, &t4(), Direction::Deliver).unwrap_err();
    assert_eq!(
        e,
        VerifyError::FieldWriteInDelivery {
            at: 1,
            op: Op::PopField(h(0))
        }
    );
    assert!(e.to_string().contains("POP_FIELD"), "{e}");
}

#[test]
fn rejects_unknown_digest() {
    let p = Program::new(vec![Op::Digest(DigestId(77)), Op::Abort(1), Op::Return(0)]);
    let e = verify(&p, &t4(), Direction::Deliver).unwrap_err();
    assert_eq!(
        e,
        VerifyError::UnknownDigest {
            at: 0,
            id: DigestId(77)
        }
    );
    assert!(e.to_string().contains("unknown digest id 77"), "{e}");
}

#[test]
fn rejects_program_too_long() {
    let mut ops = [Op::PushSize, Op::Abort(1)].repeat(MAX_PROGRAM_OPS / 2);
    ops.push(Op::Return(0));
    let e = verify(&Program::new(ops), &t4(), Direction::Send).unwrap_err();
    assert!(matches!(
        e,
        VerifyError::ProgramTooLong {
            len,
            limit: MAX_PROGRAM_OPS,
            ..
        } if len == MAX_PROGRAM_OPS + 1
    ));
}

// ---- generated programs ----

/// Random field tables that always fit their header, often with byte-aligned fields so the
/// compiled form's direct accessors are exercised as well as the bit-level ones.
fn table_strategy() -> impl Strategy<Value = FieldTable> {
    (
        1usize..=24,
        prop::collection::vec((any::<u8>(), any::<u32>(), 1u8..=64), 1..=6),
    )
        .prop_map(|(len, specs)| {
            let bits_total = len as u32 * 8;
            let locs = specs
                .into_iter()
                .map(|(sel, r, bits)| {
                    let aligned = [8u8, 16, 32, 64][(sel % 4) as usize];
                    if sel % 8 < 5 && aligned as usize / 8 <= len {
                        let bytes = aligned as u32 / 8;
                        loc((r % (len as u32 - bytes + 1)) * 8, aligned)
                    } else {
                        let bits = (bits as u32).min(bits_total);
                        loc(r % (bits_total - bits + 1), bits as u8)
                    }
                })
                .collect::<Vec<_>>();
            FieldTable::new(len, locs)
        })
}

/// Build a program from raw choices, stack-aware so that it always verifies.
fn stack_aware_program(choices: &[(u8, u64)], fields: usize, dir: Direction) -> Program {
    let mut ops = Vec::with_capacity(choices.len() + 1);
    let mut depth = 0usize;
    for &(c, k) in choices {
        let field = h((k % fields as u64) as usize);
        // Mostly small constants, so comparisons with sizes and fields go both ways.
        let konst = if k & 1 == 1 { k >> 1 } else { (k >> 1) % 2048 };
        let push = [
            Op::PushConst(konst),
            Op::PushField(field),
            Op::PushSize,
            Op::Digest(Digest::ALL[(k % 2) as usize].id()),
        ][(c % 4) as usize];
        let op = match c % 10 {
            _ if depth == 0 => push,
            0..=3 if depth < STACK_CAPACITY => push,
            4..=6 if depth >= 2 => Op::BINARY[(c / 10) as usize % Op::BINARY.len()],
            7 if dir == Direction::Send => Op::PopField(field),
            // Aborts are rare enough that most programs run on to later ops.
            8 if k % 4 == 0 => Op::Abort(k % 5),
            _ if depth >= 2 => Op::BINARY[(c / 10) as usize % Op::BINARY.len()],
            _ if depth < STACK_CAPACITY => push,
            _ => Op::Abort(k % 5),
        };
        let (pops, pushes) = op.stack_effect();
        depth = depth - pops + pushes;
        ops.push(op);
    }
    ops.push(Op::Return(choices.len() as u64 % 3));
    Program::new(ops)
}

fn order_of(big: bool) -> ByteOrder {
    if big {
        ByteOrder::Big
    } else {
        ByteOrder::Little
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(10_000))]

    /// ≥ 10 000 generated, verified programs: the interpreter, the compiled form and the
    /// unfused compiled form agree on the result and on every header byte.
    #[test]
    fn interpreter_and_compiled_form_agree(
        table in table_strategy(),
        choices in prop::collection::vec((any::<u8>(), any::<u64>()), 0..48),
        hdr_fill in prop::collection::vec(any::<u8>(), 24),
        body in prop::collection::vec(any::<u8>(), 0..64),
        big: bool,
        send: bool,
        extra_hdr in 0usize..3,
    ) {
        let dir = if send { Direction::Send } else { Direction::Deliver };
        let p = stack_aware_program(&choices, table.locs().len(), dir);
        let f = verify(&p, &table, dir);
        prop_assert!(f.is_ok(), "generator made an invalid program: {:?}\n{}", f, p);
        let f = f.unwrap();
        let hdr = &hdr_fill[..(table.header_len() + extra_hdr).min(24)];
        run_both(&f, hdr, order_of(big), &body);
    }
}

/// Op sequences with no regard for the stack, small handles and digest ids, so that every
/// rejection reason and many acceptances come up.
fn wild_op() -> impl Strategy<Value = Op> {
    prop_oneof![
        any::<u64>().prop_map(Op::PushConst),
        (0usize..8).prop_map(|i| Op::PushField(h(i))),
        Just(Op::PushSize),
        (0u16..4).prop_map(|d| Op::Digest(DigestId(d))),
        (0usize..8).prop_map(|i| Op::PopField(h(i))),
        prop::sample::select(Op::BINARY.to_vec()),
        (0u64..4).prop_map(Op::Return),
        (0u64..4).prop_map(Op::Abort),
    ]
}

fn wild_table() -> impl Strategy<Value = FieldTable> {
    (
        0usize..16,
        prop::collection::vec((any::<u32>(), any::<u8>()), 0..6),
    )
        .prop_map(|(len, locs)| {
            let locs = locs
                .into_iter()
                .map(|(off, bits)| loc(off % 160, bits % 70))
                .collect::<Vec<_>>();
            FieldTable::new(len, locs)
        })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(3_000))]

    /// The verifier never panics on arbitrary op sequences and tables; whatever it accepts,
    /// both executions run without panicking and agree.
    #[test]
    fn verifier_never_panics_on_unverified_programs(
        ops in prop::collection::vec(wild_op(), 0..24),
        table in wild_table(),
        hdr in prop::collection::vec(any::<u8>(), 0..20),
        body in prop::collection::vec(any::<u8>(), 0..16),
        big: bool,
        send: bool,
    ) {
        let dir = if send { Direction::Send } else { Direction::Deliver };
        let p = Program::new(ops);
        if let Ok(f) = verify(&p, &table, dir) {
            run_both(&f, &hdr, order_of(big), &body);
        }
        // Whatever decodes from the encoding verifies the same way.
        let q = Program::decode(&p.encode()).unwrap();
        prop_assert_eq!(verify(&q, &table, dir).is_ok(), verify(&p, &table, dir).is_ok());
    }
}

/// The compiled form turns comparisons with a constant into range tests: check every
/// comparison at the edges of the value range, with the constant on either side.
#[test]
fn comparisons_with_constants_at_the_edges() {
    let t = FieldTable::new(8, vec![loc(0, 64)]);
    let edges = [0, 1, 4, 5, 6, u64::MAX - 1, u64::MAX];
    let cmps = [Op::Eq, Op::Ne, Op::Lt, Op::Le, Op::Gt, Op::Ge];
    for cmp in cmps {
        for k in edges {
            for v in edges {
                for const_first in [false, true] {
                    let (a, b) = if const_first {
                        (Op::PushConst(k), Op::PushField(h(0)))
                    } else {
                        (Op::PushField(h(0)), Op::PushConst(k))
                    };
                    let p = Program::new(vec![a, b, cmp, Op::Abort(9), Op::Return(0)]);
                    let f = verify(&p, &t, Direction::Deliver).unwrap();
                    let (x, y) = if const_first { (k, v) } else { (v, k) };
                    let want = cmp.binop().unwrap().apply(x, y) * 9;
                    let (r, _) = run_both(&f, &v.to_be_bytes(), ByteOrder::Big, &[]);
                    assert_eq!(r, want, "{cmp} k={k} v={v} const_first={const_first}");
                }
            }
        }
    }
}
