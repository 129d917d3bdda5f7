//! The reference interpreter for packet filters (van Renesse, "Masking the Overhead of Protocol
//! Layering" (seed 004 §3.3) / Table 2: "Packet filter programs are currently interpreted").
//!
//! A plain match loop over the verified ops, with a fixed array as the stack. It is written
//! for obviousness, not speed: fields go through the general [`read_bits`] / [`write_bits`]
//! accessors and digests are looked up by id on every run. The compiled form
//! ([`super::CompiledFilter`]) must agree with it on every verified program.

use super::digest::DigestIn;
use super::verify::{VerifiedFilter, STACK_CAPACITY};
use super::{admits, FilterCtx, Header, HeaderIo, Op, REJECT_CONTEXT};
use crate::field::{read_bits, write_bits, ByteOrder};

/// Masks a stack index into the array. The verifier proves the depth never exceeds
/// `STACK_CAPACITY` nor drops below zero, so the mask never changes an index; it only makes
/// "in bounds" evident to the compiler (no bounds check, no panic path).
const MASK: usize = STACK_CAPACITY - 1;
const _: () = assert!(STACK_CAPACITY.is_power_of_two());

struct Stack {
    slots: [u64; STACK_CAPACITY],
    len: usize,
}

impl Stack {
    #[inline(always)]
    fn push(&mut self, v: u64) {
        self.slots[self.len & MASK] = v;
        self.len = self.len.wrapping_add(1);
    }

    #[inline(always)]
    fn pop(&mut self) -> u64 {
        self.len = self.len.wrapping_sub(1);
        self.slots[self.len & MASK]
    }
}

impl VerifiedFilter {
    /// Run the filter by the reference interpreter; returns 0 to accept (fast path) or the
    /// non-zero value of the `RETURN` or `ABORT` that rejected. Send-path field writes land in
    /// `ctx`'s header. Returns [`REJECT_CONTEXT`] if `ctx` breaks the verifier's assumptions
    /// (header too short, or read-only while the program writes).
    pub fn interpret(&self, ctx: &mut FilterCtx<'_>) -> u64 {
        if !admits(self.header_len, self.writes, ctx) {
            return REJECT_CONTEXT;
        }
        let orders = (ctx.order, ctx.wire);
        let body = ctx.body;
        match &mut ctx.header {
            Header::Writable(h) => interpret_on(self, &mut **h, orders, body),
            Header::ReadOnly(h) => interpret_on(self, *h, orders, body),
        }
    }
}

/// `orders`: the header's order now, and the order its sender wrote it in.
fn interpret_on<H: HeaderIo>(
    f: &VerifiedFilter,
    mut hdr: H,
    (order, wire): (ByteOrder, ByteOrder),
    body: &[u8],
) -> u64 {
    let mut stack = Stack {
        slots: [0; STACK_CAPACITY],
        len: 0,
    };
    for &op in &f.ops {
        match op {
            Op::PushConst(k) => stack.push(k),
            Op::PushField(h) => stack.push(read_bits(hdr.bytes(), f.loc(h), order)),
            Op::PushSize => stack.push(body.len() as u64),
            Op::Digest(id) => {
                let m = DigestIn {
                    body,
                    order,
                    wire,
                    cover: &f.cover,
                };
                stack.push(id.resolve().map_or(0, |d| d.compute_in(hdr.bytes(), &m)))
            }
            Op::PopField(h) => {
                let v = stack.pop();
                if let Some(bytes) = hdr.bytes_mut() {
                    write_bits(bytes, f.loc(h), order, v);
                }
            }
            Op::Return(v) => return v,
            Op::Abort(v) => {
                if stack.pop() != 0 {
                    return v;
                }
            }
            Op::Add
            | Op::Sub
            | Op::And
            | Op::Or
            | Op::Xor
            | Op::Shl
            | Op::Shr
            | Op::Eq
            | Op::Ne
            | Op::Lt
            | Op::Le
            | Op::Gt
            | Op::Ge => {
                let b = stack.pop();
                let a = stack.pop();
                if let Some(bin) = op.binop() {
                    stack.push(bin.apply(a, b));
                }
            }
        }
    }
    // Unreachable: a verified program ends with RETURN.
    REJECT_CONTEXT
}
