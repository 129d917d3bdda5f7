//! The verifier (van Renesse, "Masking the Overhead of Protocol Layering" (seed 004 §3.3): "There
//! are no loop or function constructs, so a packet filter program can be checked in advance, and
//! the necessary size for the stack can be calculated").
//!
//! [`verify`] executes the straight-line program symbolically, tracking only the stack depth,
//! and checks every op against the field table and the direction. What it proves is what the
//! executions rely on:
//!
//! - the stack never underflows, and never exceeds the configured maximum depth, which is at
//!   most [`STACK_CAPACITY`];
//! - every field named lies wholly inside the header the table describes;
//! - a delivery program never writes a field;
//! - every digest id names a registered digest;
//! - the last op, and only the last op, is a `RETURN`, so execution always ends in a
//!   `RETURN` or a taken `ABORT` and never falls off the end.

use thiserror::Error;

use super::digest::DigestId;
use super::program::{FieldTable, Op, Program, MAX_PROGRAM_OPS};
use crate::field::{FieldHandle, FieldLoc};

/// The capacity of the executions' fixed stack; no verified program is deeper.
/// A power of two, so that the executions can index it with a mask that provably stays in
/// bounds.
pub const STACK_CAPACITY: usize = 16;

/// Which critical path a program is for.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Direction {
    /// The send filter: fills in message-specific and gossip fields (may `POP_FIELD`).
    Send,
    /// The delivery filter: checks message-specific fields; may not write.
    Deliver,
}

/// Limits the verifier enforces.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct VerifyLimits {
    /// The deepest the stack may grow; values above [`STACK_CAPACITY`] are treated as it.
    pub max_stack_depth: usize,
    /// The most ops a program may have; values above [`MAX_PROGRAM_OPS`] are treated as it.
    pub max_ops: usize,
}

impl Default for VerifyLimits {
    fn default() -> VerifyLimits {
        VerifyLimits {
            max_stack_depth: STACK_CAPACITY,
            max_ops: MAX_PROGRAM_OPS,
        }
    }
}

/// Why a program was rejected. Every variant names the index of the offending op (`at`).
#[derive(Clone, Debug, PartialEq, Eq, Error)]
pub enum VerifyError {
    /// An op pops more entries than the stack holds.
    #[error("op {at} ({op}): stack underflow: needs {needs} entries, stack holds {depth}")]
    StackUnderflow {
        /// Index of the op.
        at: usize,
        /// The op.
        op: Op,
        /// Entries it pops.
        needs: usize,
        /// Entries on the stack before it.
        depth: usize,
    },
    /// An op pushes the stack beyond the configured maximum depth.
    #[error("op {at} ({op}): stack overflow: depth {depth} exceeds the limit {limit}")]
    StackOverflow {
        /// Index of the op.
        at: usize,
        /// The op.
        op: Op,
        /// Depth after it.
        depth: usize,
        /// The limit.
        limit: usize,
    },
    /// An op names a field handle the field table does not have.
    #[error("op {at} ({op}): field #{} is not in the field table ({table_len} fields)", .handle.index())]
    UnknownField {
        /// Index of the op.
        at: usize,
        /// The op.
        op: Op,
        /// The handle.
        handle: FieldHandle,
        /// Number of fields in the table.
        table_len: usize,
    },
    /// An op names a field that does not lie wholly inside the header (or has no valid
    /// width).
    #[error(
        "op {at} ({op}): field #{} (bits {}+{}) lies outside the {header_len}-byte header",
        .handle.index(), .loc.bit_offset, .loc.bits
    )]
    FieldOutsideHeader {
        /// Index of the op.
        at: usize,
        /// The op.
        op: Op,
        /// The handle.
        handle: FieldHandle,
        /// Its location.
        loc: FieldLoc,
        /// The header length in bytes.
        header_len: usize,
    },
    /// The program is empty or its last op is not a `RETURN`.
    #[error("op {at}: program does not end with RETURN")]
    MissingReturn {
        /// Index one past the last op.
        at: usize,
    },
    /// Ops follow a `RETURN` and could never run.
    #[error("op {at}: unreachable code after the RETURN at op {ret}")]
    UnreachableAfterReturn {
        /// Index of the first unreachable op.
        at: usize,
        /// Index of the `RETURN`.
        ret: usize,
    },
    /// A delivery program writes a header field.
    #[error("op {at} ({op}): POP_FIELD writes a field in a delivery program")]
    FieldWriteInDelivery {
        /// Index of the op.
        at: usize,
        /// The op.
        op: Op,
    },
    /// A `DIGEST` names no registered digest.
    #[error("op {at}: unknown digest id {}", .id.0)]
    UnknownDigest {
        /// Index of the op.
        at: usize,
        /// The id.
        id: DigestId,
    },
    /// The program is longer than the configured limit.
    #[error("op {at}: program has {len} ops, more than the limit {limit}")]
    ProgramTooLong {
        /// Index of the first op past the limit.
        at: usize,
        /// Number of ops.
        len: usize,
        /// The limit.
        limit: usize,
    },
}

impl VerifyError {
    /// The index of the op the error is about.
    pub fn at(&self) -> usize {
        match *self {
            VerifyError::StackUnderflow { at, .. }
            | VerifyError::StackOverflow { at, .. }
            | VerifyError::UnknownField { at, .. }
            | VerifyError::FieldOutsideHeader { at, .. }
            | VerifyError::MissingReturn { at }
            | VerifyError::UnreachableAfterReturn { at, .. }
            | VerifyError::FieldWriteInDelivery { at, .. }
            | VerifyError::UnknownDigest { at, .. }
            | VerifyError::ProgramTooLong { at, .. } => at,
        }
    }
}

/// A program the verifier accepted, bound to the field locations it was checked against:
/// the only type that can run a filter ([`VerifiedFilter::interpret`],
/// [`VerifiedFilter::compile`]). It can be made only by [`verify`], and its fields are
/// private, so an unverified program can never execute.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct VerifiedFilter {
    pub(super) ops: Vec<Op>,
    pub(super) locs: Vec<FieldLoc>,
    pub(super) header_len: usize,
    pub(super) direction: Direction,
    pub(super) max_depth: usize,
    pub(super) writes: bool,
    /// Header fields the covered checksum digest reads ([`super::Digest::InetChecksumCovered`]).
    pub(super) cover: crate::field::Cover,
}

impl VerifiedFilter {
    /// Set the cover of [`super::Digest::InetChecksumCovered`]: the header fields it sums
    /// before the body. Fields that do not fit the header the filter was verified against are
    /// left out, so a cover can never make a run read out of bounds.
    pub fn with_cover(mut self, cover: &[FieldLoc]) -> VerifiedFilter {
        self.cover = crate::field::Cover::new(cover, self.header_len);
        self
    }

    /// The verified ops.
    pub fn ops(&self) -> &[Op] {
        &self.ops
    }

    /// The direction it was verified for.
    pub fn direction(&self) -> Direction {
        self.direction
    }

    /// The deepest the stack gets on any execution.
    pub fn max_stack_depth(&self) -> usize {
        self.max_depth
    }

    /// The header length the fields were checked against; a shorter header at run time is
    /// rejected with [`super::REJECT_CONTEXT`].
    pub fn header_len(&self) -> usize {
        self.header_len
    }

    /// Whether the program writes header fields (`POP_FIELD`).
    pub fn writes_fields(&self) -> bool {
        self.writes
    }

    /// The location of field `h` (a default, zero-width location if absent, which a verified
    /// program never asks for; zero-width reads give 0 and writes change nothing).
    #[inline]
    pub(super) fn loc(&self, h: FieldHandle) -> FieldLoc {
        self.locs.get(h.index()).copied().unwrap_or(FieldLoc {
            bit_offset: 0,
            bits: 0,
        })
    }
}

/// Whether `loc` has a valid width and lies wholly inside a `header_len`-byte header.
/// (Computed in u64, so no location, however large its offset, can overflow.)
fn loc_fits(loc: FieldLoc, header_len: usize) -> bool {
    (1..=64).contains(&loc.bits)
        && loc.bit_offset as u64 + loc.bits as u64 <= (header_len as u64).saturating_mul(8)
}

/// Verify `program` for `direction` against `table` with the default limits (stack depth
/// [`STACK_CAPACITY`], [`MAX_PROGRAM_OPS`] ops).
pub fn verify(
    program: &Program,
    table: &FieldTable,
    direction: Direction,
) -> Result<VerifiedFilter, VerifyError> {
    verify_with(program, table, direction, &VerifyLimits::default())
}

/// Verify `program` for `direction` against `table` within `limits`. Reports the first
/// problem in program order.
pub fn verify_with(
    program: &Program,
    table: &FieldTable,
    direction: Direction,
    limits: &VerifyLimits,
) -> Result<VerifiedFilter, VerifyError> {
    let ops = program.ops();
    let max_ops = limits.max_ops.min(MAX_PROGRAM_OPS);
    if ops.len() > max_ops {
        return Err(VerifyError::ProgramTooLong {
            at: max_ops,
            len: ops.len(),
            limit: max_ops,
        });
    }
    let limit = limits.max_stack_depth.min(STACK_CAPACITY);
    let mut depth = 0usize;
    let mut max_depth = 0usize;
    let mut writes = false;
    for (at, &op) in ops.iter().enumerate() {
        if let Some(handle) = op.field() {
            let Some(loc) = table.get(handle) else {
                return Err(VerifyError::UnknownField {
                    at,
                    op,
                    handle,
                    table_len: table.locs().len(),
                });
            };
            if !loc_fits(loc, table.header_len()) {
                return Err(VerifyError::FieldOutsideHeader {
                    at,
                    op,
                    handle,
                    loc,
                    header_len: table.header_len(),
                });
            }
        }
        match op {
            Op::PopField(_) if direction == Direction::Deliver => {
                return Err(VerifyError::FieldWriteInDelivery { at, op });
            }
            Op::PopField(_) => writes = true,
            Op::Digest(id) if id.resolve().is_none() => {
                return Err(VerifyError::UnknownDigest { at, id });
            }
            Op::Return(_) if at + 1 < ops.len() => {
                return Err(VerifyError::UnreachableAfterReturn {
                    at: at + 1,
                    ret: at,
                });
            }
            _ => {}
        }
        let (pops, pushes) = op.stack_effect();
        if depth < pops {
            return Err(VerifyError::StackUnderflow {
                at,
                op,
                needs: pops,
                depth,
            });
        }
        depth = depth - pops + pushes;
        if depth > limit {
            return Err(VerifyError::StackOverflow {
                at,
                op,
                depth,
                limit,
            });
        }
        max_depth = max_depth.max(depth);
    }
    if !matches!(ops.last(), Some(Op::Return(_))) {
        return Err(VerifyError::MissingReturn { at: ops.len() });
    }
    Ok(VerifiedFilter {
        ops: ops.to_vec(),
        locs: table.locs().to_vec(),
        header_len: table.header_len(),
        direction,
        max_depth,
        writes,
        cover: crate::field::Cover::default(),
    })
}
