//! Packet-filter programs: the operations of van Renesse, "Masking the Overhead of Protocol
//! Layering" (seed 004 §3.3) / Table 2, the field table they run against, the per-layer segment
//! builder, and a byte encoding.

use std::fmt;

use thiserror::Error;

use super::digest::DigestId;
use crate::field::{FieldHandle, FieldLoc};

/// The most operations a program may have: the verifier rejects longer programs and the
/// decoder refuses to read them, so neither memory nor run time can grow without bound.
pub const MAX_PROGRAM_OPS: usize = 4096;

/// One operation of the packet-filter stack machine (seed 004 Table 2).
///
/// Binary operations pop the top entry `b`, then the next `a`, and push `a op b`; so
/// `PushSize, PushConst(1400), Gt` pushes `size > 1400`. All arithmetic is on `u64` and wraps;
/// shifts use the low six bits of `b` as the shift count; comparisons are unsigned and push
/// 1 (true) or 0 (false). There are no jumps or loops: a program runs straight through until a
/// [`Op::Return`] or a taken [`Op::Abort`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Op {
    /// `PUSH_CONSTANT k`: push `k`.
    PushConst(u64),
    /// `PUSH_FIELD h`: push the value of header field `h` (read in the context's byte order).
    PushField(FieldHandle),
    /// `PUSH_SIZE`: push the size of the message body in bytes.
    PushSize,
    /// `DIGEST d`: push a digest of the message body (see [`super::Digest`]).
    Digest(DigestId),
    /// `POP_FIELD h`: pop the top entry into header field `h`, truncated to the field's width.
    /// Only send programs may write fields.
    PopField(FieldHandle),
    /// `ADD`: wrapping `a + b`.
    Add,
    /// `SUB`: wrapping `a - b`.
    Sub,
    /// `AND`: bitwise `a & b`.
    And,
    /// `OR`: bitwise `a | b`.
    Or,
    /// `XOR`: bitwise `a ^ b`.
    Xor,
    /// `SHL`: `a << (b & 63)`.
    Shl,
    /// `SHR`: logical `a >> (b & 63)`.
    Shr,
    /// `EQ`: `a == b`.
    Eq,
    /// `NE`: `a != b`.
    Ne,
    /// `LT`: `a < b`.
    Lt,
    /// `LE`: `a <= b`.
    Le,
    /// `GT`: `a > b`.
    Gt,
    /// `GE`: `a >= b`.
    Ge,
    /// `RETURN v`: stop and return `v` (0 accepts: take the fast path).
    Return(u64),
    /// `ABORT v`: pop the top entry; if it is non-zero, stop and return `v`.
    Abort(u64),
}

/// The binary operations, split out so that both executions share one definition of their
/// semantics.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum BinOp {
    /// Wrapping addition.
    Add,
    /// Wrapping subtraction.
    Sub,
    /// Bitwise and.
    And,
    /// Bitwise or.
    Or,
    /// Bitwise exclusive or.
    Xor,
    /// Shift left by the low six bits of the right operand.
    Shl,
    /// Logical shift right by the low six bits of the right operand.
    Shr,
    /// Equal (1 or 0).
    Eq,
    /// Not equal (1 or 0).
    Ne,
    /// Unsigned less than (1 or 0).
    Lt,
    /// Unsigned less or equal (1 or 0).
    Le,
    /// Unsigned greater than (1 or 0).
    Gt,
    /// Unsigned greater or equal (1 or 0).
    Ge,
}

impl BinOp {
    /// `a op b`, where `b` was the top of the stack.
    #[inline(always)]
    pub fn apply(self, a: u64, b: u64) -> u64 {
        match self {
            BinOp::Add => a.wrapping_add(b),
            BinOp::Sub => a.wrapping_sub(b),
            BinOp::And => a & b,
            BinOp::Or => a | b,
            BinOp::Xor => a ^ b,
            BinOp::Shl => a << (b & 63),
            BinOp::Shr => a >> (b & 63),
            BinOp::Eq => (a == b) as u64,
            BinOp::Ne => (a != b) as u64,
            BinOp::Lt => (a < b) as u64,
            BinOp::Le => (a <= b) as u64,
            BinOp::Gt => (a > b) as u64,
            BinOp::Ge => (a >= b) as u64,
        }
    }
}

impl Op {
    /// The binary operations of Table 2: arithmetic and bitwise (ADD, SUB, ...), then the
    /// comparisons (EQ, NE, LT, ...).
    pub const BINARY: [Op; 13] = [
        Op::Add,
        Op::Sub,
        Op::And,
        Op::Or,
        Op::Xor,
        Op::Shl,
        Op::Shr,
        Op::Eq,
        Op::Ne,
        Op::Lt,
        Op::Le,
        Op::Gt,
        Op::Ge,
    ];

    /// The binary operation this op performs, if it is one.
    pub fn binop(self) -> Option<BinOp> {
        Some(match self {
            Op::Add => BinOp::Add,
            Op::Sub => BinOp::Sub,
            Op::And => BinOp::And,
            Op::Or => BinOp::Or,
            Op::Xor => BinOp::Xor,
            Op::Shl => BinOp::Shl,
            Op::Shr => BinOp::Shr,
            Op::Eq => BinOp::Eq,
            Op::Ne => BinOp::Ne,
            Op::Lt => BinOp::Lt,
            Op::Le => BinOp::Le,
            Op::Gt => BinOp::Gt,
            Op::Ge => BinOp::Ge,
            _ => return None,
        })
    }

    /// How many entries the op pops and then pushes.
    pub fn stack_effect(self) -> (usize, usize) {
        match self {
            Op::PushConst(_) | Op::PushField(_) | Op::PushSize | Op::Digest(_) => (0, 1),
            Op::PopField(_) | Op::Abort(_) => (1, 0),
            Op::Return(_) => (0, 0),
            _ => (2, 1),
        }
    }

    /// The field the op reads or writes, if any.
    pub fn field(self) -> Option<FieldHandle> {
        match self {
            Op::PushField(h) | Op::PopField(h) => Some(h),
            _ => None,
        }
    }

    /// The op's name in seed 004 Table 2 (`PUSH_CONSTANT`, `POP_FIELD`, ...).
    pub fn paper_name(self) -> &'static str {
        match self {
            Op::PushConst(_) => "PUSH_CONSTANT",
            Op::PushField(_) => "PUSH_FIELD",
            Op::PushSize => "PUSH_SIZE",
            Op::Digest(_) => "DIGEST",
            Op::PopField(_) => "POP_FIELD",
            Op::Add => "ADD",
            Op::Sub => "SUB",
            Op::And => "AND",
            Op::Or => "OR",
            Op::Xor => "XOR",
            Op::Shl => "SHL",
            Op::Shr => "SHR",
            Op::Eq => "EQ",
            Op::Ne => "NE",
            Op::Lt => "LT",
            Op::Le => "LE",
            Op::Gt => "GT",
            Op::Ge => "GE",
            Op::Return(_) => "RETURN",
            Op::Abort(_) => "ABORT",
        }
    }
}

impl fmt::Display for Op {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let name = self.paper_name();
        match *self {
            Op::PushConst(k) | Op::Return(k) | Op::Abort(k) => write!(f, "{name} {k}"),
            Op::PushField(h) | Op::PopField(h) => write!(f, "{name} #{}", h.index()),
            Op::Digest(d) => write!(f, "{name} {d}"),
            _ => f.write_str(name),
        }
    }
}

/// Where each field of a header lies, by handle, and how long that header is.
///
/// A filter runs against one header byte string (the accelerator passes the region holding
/// the fields its programs name); `locs[h.index()]` is the location of the field with handle
/// `h` in it. The verifier checks every field a program names against this table, and the
/// verified filter keeps its own copy, so the table cannot change under a verified program.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct FieldTable {
    locs: Vec<FieldLoc>,
    header_len: usize,
}

impl FieldTable {
    /// A table of `locs` for a header of `header_len` bytes.
    pub fn new(header_len: usize, locs: impl Into<Vec<FieldLoc>>) -> FieldTable {
        FieldTable {
            locs: locs.into(),
            header_len,
        }
    }

    /// Add a field and return its handle. (Handles are 16-bit: a program can name at most
    /// the first 65 536 fields of a table.)
    pub fn push(&mut self, loc: FieldLoc) -> FieldHandle {
        self.locs.push(loc);
        FieldHandle::from_index(self.locs.len() - 1)
    }

    /// The header length in bytes.
    pub fn header_len(&self) -> usize {
        self.header_len
    }

    /// All locations, indexed by handle.
    pub fn locs(&self) -> &[FieldLoc] {
        &self.locs
    }

    /// The location of field `h`, if the table has it.
    pub fn get(&self, h: FieldHandle) -> Option<FieldLoc> {
        self.locs.get(h.index()).copied()
    }
}

/// A packet-filter program: a straight-line sequence of [`Op`]s.
///
/// A `Program` is only data. It cannot run: [`super::verify`] turns it into a
/// [`super::VerifiedFilter`], the only type with an `interpret` or `compile` method.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Program {
    ops: Vec<Op>,
}

impl Program {
    /// A program of these ops, unchecked.
    pub fn new(ops: Vec<Op>) -> Program {
        Program { ops }
    }

    /// The ops in order.
    pub fn ops(&self) -> &[Op] {
        &self.ops
    }

    /// Number of ops.
    pub fn len(&self) -> usize {
        self.ops.len()
    }

    /// Whether the program has no ops (it does not verify: it lacks a `RETURN`).
    pub fn is_empty(&self) -> bool {
        self.ops.is_empty()
    }
}

impl From<Vec<Op>> for Program {
    fn from(ops: Vec<Op>) -> Program {
        Program::new(ops)
    }
}

impl fmt::Display for Program {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, op) in self.ops.iter().enumerate() {
            writeln!(f, "{i:4}  {op}")?;
        }
        Ok(())
    }
}

/// Identifies the layer that owns a segment of a program (its index in the stack, 0 = top,
/// as in [`crate::field::FieldSpec::layer`]).
pub type LayerId = usize;

/// The instructions one layer contributes to a filter program.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Segment {
    layer: LayerId,
    ops: Vec<Op>,
}

impl Segment {
    /// The owning layer.
    pub fn layer(&self) -> LayerId {
        self.layer
    }

    /// The segment's ops.
    pub fn ops(&self) -> &[Op] {
        &self.ops
    }

    /// Append one op.
    pub fn push(&mut self, op: Op) -> &mut Segment {
        self.ops.push(op);
        self
    }

    /// Append several ops.
    pub fn extend(&mut self, ops: impl IntoIterator<Item = Op>) -> &mut Segment {
        self.ops.extend(ops);
        self
    }

    /// Remove all ops (the segment keeps its place in the program).
    pub fn clear(&mut self) {
        self.ops.clear();
    }
}

/// Builds a filter program from per-layer segments (seed 004 §3.3: "Each layer adds
/// instructions to both packet filters for their particular message-specific fields ... part
/// of the packet filter program may be rewritten when the protocol state is updated").
///
/// Layers append to their own segment at initialisation; a layer whose message-specific
/// checks depend on its state later rewrites just its segment with
/// [`ProgramBuilder::replace_segment`], and the accelerator rebuilds and re-verifies. The
/// program is the segments in the order they were first created, followed by `RETURN 0`.
///
/// Return-value convention: **0 accepts** (the message takes the fast path) and any non-zero
/// value rejects (it takes the layered path, PRESEND/PREDELIVER). This is the paper's text
/// ("if the packet filter returns a non-zero value ... the pre-delivery phase of the protocol
/// is executed"); the paper's Figure 3 writes the test the other way round
/// (`if (run_packet_filter(...))` for success), which this crate does not follow. The
/// non-zero value is a reason code the layer chooses (e.g. the frag layer's `ABORT 1` for an
/// oversize message), useful in counters.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ProgramBuilder {
    segments: Vec<Segment>,
}

impl ProgramBuilder {
    /// An empty builder (its program is just `RETURN 0`: accept everything).
    pub fn new() -> ProgramBuilder {
        ProgramBuilder::default()
    }

    /// The segment of `layer`, created empty at the end of the program if it does not exist.
    pub fn segment(&mut self, layer: LayerId) -> &mut Segment {
        let i = match self.segments.iter().position(|s| s.layer == layer) {
            Some(i) => i,
            None => {
                self.segments.push(Segment {
                    layer,
                    ops: Vec::new(),
                });
                self.segments.len() - 1
            }
        };
        &mut self.segments[i]
    }

    /// Replace the ops of `layer`'s segment, keeping its place (or creating it at the end).
    pub fn replace_segment(&mut self, layer: LayerId, ops: impl IntoIterator<Item = Op>) {
        let seg = self.segment(layer);
        seg.ops.clear();
        seg.ops.extend(ops);
    }

    /// Remove `layer`'s segment; returns whether it existed.
    pub fn remove_segment(&mut self, layer: LayerId) -> bool {
        let before = self.segments.len();
        self.segments.retain(|s| s.layer != layer);
        self.segments.len() != before
    }

    /// The segments in program order.
    pub fn segments(&self) -> &[Segment] {
        &self.segments
    }

    /// The program: every segment in order, then `RETURN 0`.
    pub fn build(&self) -> Program {
        let n = self.segments.iter().map(|s| s.ops.len()).sum::<usize>() + 1;
        let mut ops = Vec::with_capacity(n);
        for s in &self.segments {
            ops.extend_from_slice(&s.ops);
        }
        ops.push(Op::Return(0));
        Program::new(ops)
    }
}

/// Why [`Program::decode`] refused its input.
#[derive(Clone, Debug, PartialEq, Eq, Error)]
pub enum DecodeError {
    /// The input ends inside the header or an op.
    #[error("truncated program: {needed} more byte(s) needed at offset {offset}")]
    Truncated {
        /// Where the missing bytes should start.
        offset: usize,
        /// How many bytes are missing.
        needed: usize,
    },
    /// The input does not start with the magic bytes `PF`.
    #[error("not a filter program: bad magic")]
    BadMagic,
    /// The encoding version is not one this decoder reads.
    #[error("unsupported program encoding version {0}")]
    UnsupportedVersion(u8),
    /// The op count exceeds [`MAX_PROGRAM_OPS`].
    #[error("program declares {count} ops, more than the limit {limit}")]
    TooManyOps {
        /// Declared count.
        count: u64,
        /// The limit.
        limit: usize,
    },
    /// A byte that is no opcode.
    #[error("unknown opcode {opcode:#04x} at offset {offset}")]
    UnknownOpcode {
        /// Offset of the opcode byte.
        offset: usize,
        /// The byte.
        opcode: u8,
    },
    /// Bytes after the last declared op.
    #[error("{extra} trailing byte(s) after the program at offset {offset}")]
    TrailingBytes {
        /// Offset of the first trailing byte.
        offset: usize,
        /// How many.
        extra: usize,
    },
}

const MAGIC: [u8; 2] = *b"PF";
const VERSION: u8 = 1;

mod opcode {
    pub const PUSH_CONST: u8 = 0x01;
    pub const PUSH_FIELD: u8 = 0x02;
    pub const PUSH_SIZE: u8 = 0x03;
    pub const DIGEST: u8 = 0x04;
    pub const POP_FIELD: u8 = 0x05;
    pub const ADD: u8 = 0x10;
    pub const SUB: u8 = 0x11;
    pub const AND: u8 = 0x12;
    pub const OR: u8 = 0x13;
    pub const XOR: u8 = 0x14;
    pub const SHL: u8 = 0x15;
    pub const SHR: u8 = 0x16;
    pub const EQ: u8 = 0x20;
    pub const NE: u8 = 0x21;
    pub const LT: u8 = 0x22;
    pub const LE: u8 = 0x23;
    pub const GT: u8 = 0x24;
    pub const GE: u8 = 0x25;
    pub const RETURN: u8 = 0x30;
    pub const ABORT: u8 = 0x31;
}

/// A bounds-checked reader over the input.
struct Reader<'a> {
    buf: &'a [u8],
    pos: usize,
}

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize) -> Result<&'a [u8], DecodeError> {
        let rest = self.buf.get(self.pos..).unwrap_or(&[]);
        match rest.get(..n) {
            Some(b) => {
                self.pos += n;
                Ok(b)
            }
            None => Err(DecodeError::Truncated {
                offset: self.pos,
                needed: n - rest.len(),
            }),
        }
    }

    fn u8(&mut self) -> Result<u8, DecodeError> {
        Ok(self.take(1)?[0])
    }

    fn u16(&mut self) -> Result<u16, DecodeError> {
        let b = self.take(2)?;
        Ok(u16::from_le_bytes([b[0], b[1]]))
    }

    fn u32(&mut self) -> Result<u32, DecodeError> {
        let b = self.take(4)?;
        Ok(u32::from_le_bytes([b[0], b[1], b[2], b[3]]))
    }

    fn u64(&mut self) -> Result<u64, DecodeError> {
        let mut w = [0u8; 8];
        w.copy_from_slice(self.take(8)?);
        Ok(u64::from_le_bytes(w))
    }
}

impl Program {
    /// Encode the program.
    ///
    /// Format (all integers little-endian): `b"PF"`, version byte `1`, `u32` op count, then
    /// each op as an opcode byte followed by its operand: `u64` for `PUSH_CONSTANT`, `RETURN`
    /// and `ABORT`; `u16` field handle for `PUSH_FIELD` and `POP_FIELD`; `u16` digest id for
    /// `DIGEST`; nothing for the rest. Programs longer than [`MAX_PROGRAM_OPS`] encode but do
    /// not decode.
    pub fn encode(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(7 + self.ops.len() * 9);
        self.encode_into(&mut out);
        out
    }

    /// Append the encoding of the program to `out` (see [`Program::encode`]).
    pub fn encode_into(&self, out: &mut Vec<u8>) {
        use opcode::*;
        out.extend_from_slice(&MAGIC);
        out.push(VERSION);
        out.extend_from_slice(&(self.ops.len() as u32).to_le_bytes());
        for op in &self.ops {
            let code = match op {
                Op::PushConst(_) => PUSH_CONST,
                Op::PushField(_) => PUSH_FIELD,
                Op::PushSize => PUSH_SIZE,
                Op::Digest(_) => DIGEST,
                Op::PopField(_) => POP_FIELD,
                Op::Add => ADD,
                Op::Sub => SUB,
                Op::And => AND,
                Op::Or => OR,
                Op::Xor => XOR,
                Op::Shl => SHL,
                Op::Shr => SHR,
                Op::Eq => EQ,
                Op::Ne => NE,
                Op::Lt => LT,
                Op::Le => LE,
                Op::Gt => GT,
                Op::Ge => GE,
                Op::Return(_) => RETURN,
                Op::Abort(_) => ABORT,
            };
            out.push(code);
            match *op {
                Op::PushConst(k) | Op::Return(k) | Op::Abort(k) => {
                    out.extend_from_slice(&k.to_le_bytes())
                }
                Op::PushField(h) | Op::PopField(h) => {
                    out.extend_from_slice(&(h.index() as u16).to_le_bytes())
                }
                Op::Digest(d) => out.extend_from_slice(&d.0.to_le_bytes()),
                _ => {}
            }
        }
    }

    /// Decode a program encoded by [`Program::encode`]. Never panics; any malformed input is
    /// an error naming the offset. The result is still unverified.
    pub fn decode(input: &[u8]) -> Result<Program, DecodeError> {
        use opcode::*;
        let mut r = Reader { buf: input, pos: 0 };
        if r.take(2)? != MAGIC {
            return Err(DecodeError::BadMagic);
        }
        let version = r.u8()?;
        if version != VERSION {
            return Err(DecodeError::UnsupportedVersion(version));
        }
        let count = r.u32()? as usize;
        if count > MAX_PROGRAM_OPS {
            return Err(DecodeError::TooManyOps {
                count: count as u64,
                limit: MAX_PROGRAM_OPS,
            });
        }
        // Every op takes at least one byte: never reserve more than the input can hold.
        let mut ops = Vec::with_capacity(count.min(input.len()));
        for _ in 0..count {
            let offset = r.pos;
            let code = r.u8()?;
            let op = match code {
                PUSH_CONST => Op::PushConst(r.u64()?),
                PUSH_FIELD => Op::PushField(FieldHandle::from_index(r.u16()? as usize)),
                PUSH_SIZE => Op::PushSize,
                DIGEST => Op::Digest(DigestId(r.u16()?)),
                POP_FIELD => Op::PopField(FieldHandle::from_index(r.u16()? as usize)),
                ADD => Op::Add,
                SUB => Op::Sub,
                AND => Op::And,
                OR => Op::Or,
                XOR => Op::Xor,
                SHL => Op::Shl,
                SHR => Op::Shr,
                EQ => Op::Eq,
                NE => Op::Ne,
                LT => Op::Lt,
                LE => Op::Le,
                GT => Op::Gt,
                GE => Op::Ge,
                RETURN => Op::Return(r.u64()?),
                ABORT => Op::Abort(r.u64()?),
                opcode => return Err(DecodeError::UnknownOpcode { offset, opcode }),
            };
            ops.push(op);
        }
        if r.pos < input.len() {
            return Err(DecodeError::TrailingBytes {
                offset: r.pos,
                extra: input.len() - r.pos,
            });
        }
        Ok(Program::new(ops))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn h(i: usize) -> FieldHandle {
        FieldHandle::from_index(i)
    }

    #[test]
    fn builder_concatenates_segments_and_appends_return() {
        let mut b = ProgramBuilder::new();
        b.segment(2).push(Op::PushSize).push(Op::PushConst(1400));
        b.segment(5)
            .extend([Op::Digest(DigestId::INET_CHECKSUM), Op::PopField(h(0))]);
        b.segment(2).extend([Op::Gt, Op::Abort(1)]);
        let p = b.build();
        assert_eq!(
            p.ops(),
            &[
                Op::PushSize,
                Op::PushConst(1400),
                Op::Gt,
                Op::Abort(1),
                Op::Digest(DigestId::INET_CHECKSUM),
                Op::PopField(h(0)),
                Op::Return(0),
            ]
        );
        // A layer rewrites its own segment in place.
        b.replace_segment(2, [Op::PushSize, Op::PushConst(9000), Op::Gt, Op::Abort(1)]);
        assert_eq!(b.build().ops()[1], Op::PushConst(9000));
        assert_eq!(b.build().ops()[4], Op::Digest(DigestId::INET_CHECKSUM));
        assert!(b.remove_segment(2));
        assert!(!b.remove_segment(2));
        assert_eq!(b.build().len(), 3);
        assert_eq!(ProgramBuilder::new().build().ops(), &[Op::Return(0)]);
    }

    #[test]
    fn encoding_is_as_documented() {
        let p = Program::new(vec![Op::PushField(h(0x0102)), Op::Abort(7), Op::Return(0)]);
        let bytes = p.encode();
        let mut want = vec![b'P', b'F', 1, 3, 0, 0, 0, 0x02, 0x02, 0x01, 0x31];
        want.extend_from_slice(&7u64.to_le_bytes());
        want.push(0x30);
        want.extend_from_slice(&0u64.to_le_bytes());
        assert_eq!(bytes, want);
        assert_eq!(Program::decode(&bytes), Ok(p));
    }

    #[test]
    fn decode_rejects_malformed_input_by_name() {
        let good = Program::new(vec![Op::PushSize, Op::Return(3)]).encode();
        assert_eq!(
            Program::decode(&[]),
            Err(DecodeError::Truncated {
                offset: 0,
                needed: 2
            })
        );
        assert_eq!(Program::decode(b"XX\x01"), Err(DecodeError::BadMagic));
        assert_eq!(
            Program::decode(b"PF\x02\0\0\0\0"),
            Err(DecodeError::UnsupportedVersion(2))
        );
        assert_eq!(
            Program::decode(b"PF\x01\xff\xff\xff\xff"),
            Err(DecodeError::TooManyOps {
                count: u32::MAX as u64,
                limit: MAX_PROGRAM_OPS
            })
        );
        assert_eq!(
            Program::decode(b"PF\x01\x01\0\0\0\x99"),
            Err(DecodeError::UnknownOpcode {
                offset: 7,
                opcode: 0x99
            })
        );
        // Cut inside RETURN's operand.
        assert_eq!(
            Program::decode(&good[..good.len() - 3]),
            Err(DecodeError::Truncated {
                offset: 9,
                needed: 3
            })
        );
        // Declared count larger than the ops present.
        let mut short = good.clone();
        short[3] = 3;
        assert_eq!(
            Program::decode(&short),
            Err(DecodeError::Truncated {
                offset: good.len(),
                needed: 1
            })
        );
        let mut long = good.clone();
        long.push(0);
        assert_eq!(
            Program::decode(&long),
            Err(DecodeError::TrailingBytes {
                offset: good.len(),
                extra: 1
            })
        );
    }

    #[test]
    fn display_uses_paper_names() {
        let p = Program::new(vec![
            Op::PushConst(5),
            Op::PushField(h(3)),
            Op::Digest(DigestId::INET_CHECKSUM),
            Op::Ne,
            Op::Return(0),
        ]);
        let s = p.to_string();
        assert!(s.contains("PUSH_CONSTANT 5"));
        assert!(s.contains("PUSH_FIELD #3"));
        assert!(s.contains("DIGEST inet-checksum"));
        assert!(s.contains("NE"));
    }

    pub(crate) fn any_op() -> impl Strategy<Value = Op> {
        prop_oneof![
            any::<u64>().prop_map(Op::PushConst),
            any::<u16>().prop_map(|i| Op::PushField(h(i as usize))),
            Just(Op::PushSize),
            any::<u16>().prop_map(|d| Op::Digest(DigestId(d))),
            any::<u16>().prop_map(|i| Op::PopField(h(i as usize))),
            prop::sample::select(Op::BINARY.to_vec()),
            any::<u64>().prop_map(Op::Return),
            any::<u64>().prop_map(Op::Abort),
        ]
    }

    proptest! {
        #[test]
        fn encode_decode_roundtrips(ops in prop::collection::vec(any_op(), 0..64)) {
            let p = Program::new(ops);
            prop_assert_eq!(Program::decode(&p.encode()), Ok(p));
        }

        #[test]
        fn decode_never_panics(bytes in prop::collection::vec(any::<u8>(), 0..200)) {
            let _ = Program::decode(&bytes);
            let mut framed = b"PF\x01".to_vec();
            framed.extend_from_slice(&bytes);
            let _ = Program::decode(&framed);
        }
    }
}
