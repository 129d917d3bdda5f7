//! The compiled form of a packet filter (van Renesse, "Masking the Overhead of Protocol Layering"
//! (seed 004 §3.3): "In case fields are conveniently aligned, the packet filter is optimized
//! automatically using some customized instructions ... we intend to adopt [compilation into
//! machine code] eventually").
//!
//! Compilation works on a verified program, so the stack depth before every op is known
//! statically. That lets it drop the stack pointer altogether: each op is lowered to a
//! specialised operation on fixed slots of a register file (`slots[d]` is stack entry `d`),
//! with
//!
//! - field locations resolved once: every field of a header of at least eight bytes becomes
//!   one 8-byte load of its window, a shift and a mask (a read-modify-write to store), in the
//!   right byte order (one lowering per byte order, chosen at the start of a run, so no per-op
//!   order test); fields of shorter headers use the general bit-level accessors;
//! - digests resolved from their ids once;
//! - common sequences fused into one operation whose operands are read directly, without
//!   touching the slots: `PUSH x; PUSH y; <binop>; ABORT c` (the frag layer's size check, the
//!   checksum layer's delivery check; when one operand is a constant and the operation a
//!   comparison, it becomes a single range test), `PUSH x; POP_FIELD f` (the checksum layer's send
//!   program), `PUSH x; ABORT c` and `PUSH x; <binop>`, where `PUSH` is any of
//!   `PUSH_CONSTANT`, `PUSH_FIELD`, `PUSH_SIZE` and `DIGEST`.
//!
//! All of this is safe code; slot indices are masked into the array (the verifier proves the
//! mask never changes them). The semantics are those of the reference interpreter,
//! [`VerifiedFilter::interpret`]; the shared definitions ([`BinOp::apply`],
//! [`Digest::compute`], [`read_bits`] / [`write_bits`] for unaligned fields) make sure of the
//! arithmetic, and the differential tests and the fuzz target make sure of the rest.

use super::digest::{Digest, DigestIn};
use super::program::{BinOp, Op};
use super::verify::{Direction, VerifiedFilter, STACK_CAPACITY};
use super::{admits, FilterCtx, Header, HeaderIo, REJECT_CONTEXT};
use crate::field::{read_bits, write_bits, ByteOrder, FieldLoc, Win};

/// Register files of at most this many slots are used for programs whose unfused ops stay
/// this shallow (most do: fusion leaves few ops on the slots), so each run clears 32 bytes
/// instead of `8 * STACK_CAPACITY`.
const SMALL_SLOTS: usize = 4;
const _: () = assert!(SMALL_SLOTS.is_power_of_two() && STACK_CAPACITY.is_power_of_two());

/// How to compile.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CompileOptions {
    /// Fuse common op sequences into single operations (on by default; off to measure what
    /// fusion is worth).
    pub fuse: bool,
}

impl Default for CompileOptions {
    fn default() -> CompileOptions {
        CompileOptions { fuse: true }
    }
}

/// A field accessor specialised for the field's byte order: the field's 8-byte window of
/// the header ([`crate::field::Access`]: one load, a shift and a mask; a store is one
/// read-modify-write), with the order fixed when the program is lowered, so an access is one
/// dispatch and no order test. Callgrind: the earlier nine accessor kinds (byte-aligned
/// loads of each width and order, windows of each width) cost a second jump table per access.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Acc {
    /// The field's window, read as a little-endian integer.
    Le(Win),
    /// The field's window, read as a big-endian integer.
    Be(Win),
    /// A field without a window (headers under eight bytes): the general bit-level
    /// accessors.
    Bits(FieldLoc, ByteOrder),
}

impl Acc {
    /// The accessor for a field at `loc` of a header of (at least) `header_len` bytes.
    fn new(loc: FieldLoc, order: ByteOrder, header_len: usize) -> Acc {
        match (Win::of(loc, header_len), order) {
            (Some(w), ByteOrder::Little) => Acc::Le(w),
            (Some(w), ByteOrder::Big) => Acc::Be(w),
            (None, _) => Acc::Bits(loc, order),
        }
    }

    /// Read the field. The header holds at least `header_len` bytes (the context check), so
    /// the window is inside it.
    #[inline(always)]
    fn load(self, h: &[u8]) -> u64 {
        match self {
            Acc::Le(w) => w.get(h, ByteOrder::Little),
            Acc::Be(w) => w.get(h, ByteOrder::Big),
            Acc::Bits(loc, order) => read_bits(h, loc, order),
        }
    }

    /// Write the field, truncating `v` to its width.
    #[inline(always)]
    fn store(self, h: &mut [u8], v: u64) {
        match self {
            Acc::Le(w) => w.put(h, ByteOrder::Little, v),
            Acc::Be(w) => w.put(h, ByteOrder::Big, v),
            Acc::Bits(loc, order) => write_bits(h, loc, order, v),
        }
    }
}

/// An operand read directly by a fused operation: what a push op would have pushed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Src {
    Const(u64),
    Field(Acc),
    Size,
    Digest(Digest),
}

impl Src {
    #[inline(always)]
    fn eval(self, h: &[u8], body: &DigestIn<'_>) -> u64 {
        match self {
            Src::Const(k) => k,
            Src::Field(acc) => acc.load(h),
            Src::Size => body.body.len() as u64,
            Src::Digest(d) => d.compute_in(h, body),
        }
    }
}

/// One compiled operation. `dst`/`src` are slot numbers: the stack depth at that point.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum COp {
    Const {
        dst: u8,
        k: u64,
    },
    Load {
        dst: u8,
        acc: Acc,
    },
    Size {
        dst: u8,
    },
    Digest {
        dst: u8,
        d: Digest,
    },
    Store {
        src: u8,
        acc: Acc,
    },
    /// `slots[dst] = op(slots[dst], slots[dst + 1])`, one variant per operation.
    Add {
        dst: u8,
    },
    Sub {
        dst: u8,
    },
    And {
        dst: u8,
    },
    Or {
        dst: u8,
    },
    Xor {
        dst: u8,
    },
    Shl {
        dst: u8,
    },
    Shr {
        dst: u8,
    },
    Eq {
        dst: u8,
    },
    Ne {
        dst: u8,
    },
    Lt {
        dst: u8,
    },
    Le {
        dst: u8,
    },
    Gt {
        dst: u8,
    },
    Ge {
        dst: u8,
    },
    AbortIf {
        src: u8,
        code: u64,
    },
    Return(u64),
    // Fused sequences.
    /// `PUSH x; POP_FIELD f`.
    StoreSrc {
        x: Src,
        acc: Acc,
    },
    /// `PUSH x; ABORT code`.
    AbortIfSrc {
        x: Src,
        code: u64,
    },
    /// `PUSH y; <op>`: `slots[dst] = op(slots[dst], y)`.
    BinSrc {
        op: BinOp,
        dst: u8,
        y: Src,
    },
    /// `PUSH x; PUSH_CONSTANT k; <cmp>; ABORT code` (or the mirror image): abort if
    /// `(x - lo) <= span` (wrapping) differs from `invert`, i.e. if `x` lies in (or, inverted,
    /// outside) `[lo, lo + span]`. Every unsigned comparison with a constant is such a test,
    /// so this replaces the comparison's dispatch with one subtraction and one compare.
    AbortRange {
        x: Src,
        lo: u64,
        span: u64,
        invert: bool,
        code: u64,
    },
    /// `PUSH x; PUSH y; <op>; ABORT code`.
    AbortBin {
        op: BinOp,
        x: Src,
        y: Src,
        code: u64,
    },
    // The fused forms above with their operands' kinds fixed, for the shapes layers emit on
    // every message (the frag layer's size and fragment checks, the checksum layer's store
    // and check): no second dispatch on the operand, and only the fields used are loaded
    // (callgrind: the general fused forms cost ~45 instructions each, mostly that). They run
    // in `special`, without the register file.
    /// [`COp::AbortRange`] of `PUSH_SIZE`.
    AbortSizeRange {
        lo: u64,
        span: u64,
        invert: bool,
        code: u64,
    },
    /// [`COp::AbortIfSrc`] of a field.
    AbortIfField {
        acc: Acc,
        code: u64,
    },
    /// [`COp::StoreSrc`] of the covered checksum: the checksum layer's send program.
    StoreCovered {
        acc: Acc,
    },
    /// [`COp::AbortBin`] of `NE` between the covered checksum and a field (either way
    /// round): the checksum layer's delivery check.
    AbortCoveredNe {
        acc: Acc,
        code: u64,
    },
}

impl COp {
    /// The specialised form of a fused op, if it has one.
    fn specialised(self) -> COp {
        match self {
            COp::AbortRange {
                x: Src::Size,
                lo,
                span,
                invert,
                code,
            } => COp::AbortSizeRange {
                lo,
                span,
                invert,
                code,
            },
            COp::AbortIfSrc {
                x: Src::Field(acc),
                code,
            } => COp::AbortIfField { acc, code },
            COp::StoreSrc {
                x: Src::Digest(Digest::InetChecksumCovered),
                acc,
            } => COp::StoreCovered { acc },
            COp::AbortBin {
                op: BinOp::Ne,
                x: Src::Digest(Digest::InetChecksumCovered),
                y: Src::Field(acc),
                code,
            }
            | COp::AbortBin {
                op: BinOp::Ne,
                x: Src::Field(acc),
                y: Src::Digest(Digest::InetChecksumCovered),
                code,
            } => COp::AbortCoveredNe { acc, code },
            other => other,
        }
    }
}

/// A verified filter compiled into specialised operations (see the module docs). Made by
/// [`VerifiedFilter::compile`]; runs with [`CompiledFilter::run`], with the same results and
/// the same header writes as [`VerifiedFilter::interpret`].
#[derive(Clone, Debug)]
pub struct CompiledFilter {
    big: Vec<COp>,
    /// Slots of the register file the ops use (the same for both orders).
    slots: usize,
    little: Vec<COp>,
    header_len: usize,
    writes: bool,
    direction: Direction,
    max_depth: usize,
    cover: crate::field::Cover,
}

impl VerifiedFilter {
    /// Compile the filter with the default options (fusion on).
    pub fn compile(&self) -> CompiledFilter {
        self.compile_with(CompileOptions::default())
    }

    /// Compile the filter with `options`.
    pub fn compile_with(&self, options: CompileOptions) -> CompiledFilter {
        let (big, slots) = lower(self, ByteOrder::Big, options);
        let (little, _) = lower(self, ByteOrder::Little, options);
        CompiledFilter {
            big,
            little,
            slots,
            header_len: self.header_len,
            writes: self.writes,
            direction: self.direction,
            max_depth: self.max_depth,
            cover: self.cover.clone(),
        }
    }
}

impl CompiledFilter {
    /// Run the filter; returns 0 to accept (fast path) or the non-zero value of the `RETURN`
    /// or `ABORT` that rejected; send-path field writes land in `ctx`'s header. Returns
    /// [`REJECT_CONTEXT`] if `ctx` breaks the verifier's assumptions (header too short, or
    /// read-only while the program writes).
    #[inline]
    pub fn run(&self, ctx: &mut FilterCtx<'_>) -> u64 {
        if !admits(self.header_len, self.writes, ctx) {
            return REJECT_CONTEXT;
        }
        let ops = match ctx.order {
            ByteOrder::Big => &self.big,
            ByteOrder::Little => &self.little,
        };
        let body = &DigestIn {
            body: ctx.body,
            order: ctx.order,
            wire: ctx.wire,
            cover: &self.cover,
        };
        match &mut ctx.header {
            Header::Writable(h) => run_ops(ops, &mut **h, body, self.slots),
            Header::ReadOnly(h) => run_ops(ops, *h, body, self.slots),
        }
    }

    /// The direction the filter was verified for.
    pub fn direction(&self) -> Direction {
        self.direction
    }

    /// The deepest the stack gets on any execution.
    pub fn max_stack_depth(&self) -> usize {
        self.max_depth
    }

    /// Number of compiled operations (after fusion), for one byte order.
    pub fn compiled_ops(&self) -> usize {
        self.big.len()
    }
}

/// `s[dst] = op(s[dst], s[dst + 1])`.
#[inline(always)]
fn bin<const N: usize>(s: &mut [u64; N], dst: u8, op: BinOp) {
    let d = dst as usize;
    s[d & (N - 1)] = op.apply(s[d & (N - 1)], s[(d + 1) & (N - 1)]);
}

/// What [`special`] did with an operation.
enum Step {
    /// Go on with the next operation.
    Next,
    /// The run ends with this value.
    Exit(u64),
    /// Not a specialised operation: [`general_op`]'s.
    General,
}

/// Run the specialised operations layers emit on every message (the frag layer's size and
/// fragment checks, the checksum layer's store and check, `RETURN`). None of them touches
/// the register file.
#[inline(always)]
fn special<H: HeaderIo>(op: &COp, hdr: &mut H, body: &DigestIn<'_>) -> Step {
    match *op {
        COp::Return(v) => Step::Exit(v),
        COp::AbortSizeRange {
            lo,
            span,
            invert,
            code,
        } => {
            if ((body.body.len() as u64).wrapping_sub(lo) <= span) != invert {
                return Step::Exit(code);
            }
            Step::Next
        }
        COp::AbortIfField { acc, code } => {
            if acc.load(hdr.bytes()) != 0 {
                return Step::Exit(code);
            }
            Step::Next
        }
        COp::StoreCovered { acc } => {
            let v = covered(hdr.bytes(), body);
            if let Some(h) = hdr.bytes_mut() {
                acc.store(h, v);
            }
            Step::Next
        }
        COp::AbortCoveredNe { acc, code } => {
            let h = hdr.bytes();
            if covered(h, body) != acc.load(h) {
                return Step::Exit(code);
            }
            Step::Next
        }
        _ => Step::General,
    }
}

/// Run compiled ops. The specialised ones ([`special`]) run here, with no register file;
/// at the first other one the rest of the program continues in [`run_general`], which has
/// one. The register file is still all zeros then (specialised ops never touch it), as if
/// the whole program had run there. Callgrind: one loop with every operation inline set up
/// registers and stack for the general ones on every run (~35 instructions), even for
/// programs that use none of them.
#[inline(never)]
fn run_ops<H: HeaderIo>(ops: &[COp], mut hdr: H, body: &DigestIn<'_>, slots: usize) -> u64 {
    for (i, op) in ops.iter().enumerate() {
        match special(op, &mut hdr, body) {
            Step::Next => {}
            Step::Exit(v) => return v,
            Step::General if slots <= SMALL_SLOTS => {
                return run_general::<H, SMALL_SLOTS>(&ops[i..], hdr, body)
            }
            Step::General => return run_general::<H, STACK_CAPACITY>(&ops[i..], hdr, body),
        }
    }
    // Unreachable: a verified program ends with RETURN.
    REJECT_CONTEXT
}

/// Run compiled ops on a register file of `N` slots. `N` is a power of two no smaller than
/// the deepest slot the ops use (established by [`lower`] from the verified depths), so
/// masking a slot index with `N - 1` never changes it and keeps every access provably in
/// bounds.
#[inline(never)]
fn run_general<H: HeaderIo, const N: usize>(ops: &[COp], mut hdr: H, body: &DigestIn<'_>) -> u64 {
    let mut s = [0u64; N];
    for op in ops {
        match special(op, &mut hdr, body) {
            Step::Next => {}
            Step::Exit(v) => return v,
            Step::General => {
                if let Some(v) = general_op(op, &mut s, &mut hdr, body) {
                    return v;
                }
            }
        }
    }
    // Unreachable: a verified program ends with RETURN.
    REJECT_CONTEXT
}

/// One operation other than the specialised ones; `Some(v)` if it ends the run with `v`.
#[inline(always)]
fn general_op<H: HeaderIo, const N: usize>(
    op: &COp,
    s: &mut [u64; N],
    hdr: &mut H,
    body: &DigestIn<'_>,
) -> Option<u64> {
    let mask = N - 1;
    match *op {
        COp::Const { dst, k } => s[dst as usize & mask] = k,
        COp::Load { dst, acc } => s[dst as usize & mask] = acc.load(hdr.bytes()),
        COp::Size { dst } => s[dst as usize & mask] = body.body.len() as u64,
        COp::Digest { dst, d } => s[dst as usize & mask] = d.compute_in(hdr.bytes(), body),
        COp::Store { src, acc } => {
            let v = s[src as usize & mask];
            if let Some(h) = hdr.bytes_mut() {
                acc.store(h, v);
            }
        }
        COp::Add { dst } => bin::<N>(s, dst, BinOp::Add),
        COp::Sub { dst } => bin::<N>(s, dst, BinOp::Sub),
        COp::And { dst } => bin::<N>(s, dst, BinOp::And),
        COp::Or { dst } => bin::<N>(s, dst, BinOp::Or),
        COp::Xor { dst } => bin::<N>(s, dst, BinOp::Xor),
        COp::Shl { dst } => bin::<N>(s, dst, BinOp::Shl),
        COp::Shr { dst } => bin::<N>(s, dst, BinOp::Shr),
        COp::Eq { dst } => bin::<N>(s, dst, BinOp::Eq),
        COp::Ne { dst } => bin::<N>(s, dst, BinOp::Ne),
        COp::Lt { dst } => bin::<N>(s, dst, BinOp::Lt),
        COp::Le { dst } => bin::<N>(s, dst, BinOp::Le),
        COp::Gt { dst } => bin::<N>(s, dst, BinOp::Gt),
        COp::Ge { dst } => bin::<N>(s, dst, BinOp::Ge),
        COp::AbortIf { src, code } => {
            if s[src as usize & mask] != 0 {
                return Some(code);
            }
        }
        COp::StoreSrc { x, acc } => {
            let v = x.eval(hdr.bytes(), body);
            if let Some(h) = hdr.bytes_mut() {
                acc.store(h, v);
            }
        }
        COp::AbortIfSrc { x, code } => {
            if x.eval(hdr.bytes(), body) != 0 {
                return Some(code);
            }
        }
        COp::BinSrc { op, dst, y } => {
            let d = dst as usize & mask;
            s[d] = op.apply(s[d], y.eval(hdr.bytes(), body));
        }
        COp::AbortRange {
            x,
            lo,
            span,
            invert,
            code,
        } => {
            if (x.eval(hdr.bytes(), body).wrapping_sub(lo) <= span) != invert {
                return Some(code);
            }
        }
        COp::AbortBin { op, x, y, code } => {
            let h = hdr.bytes();
            if op.apply(x.eval(h, body), y.eval(h, body)) != 0 {
                return Some(code);
            }
        }
        // Run by `special`, never passed here.
        COp::Return(_)
        | COp::AbortSizeRange { .. }
        | COp::AbortIfField { .. }
        | COp::StoreCovered { .. }
        | COp::AbortCoveredNe { .. } => {}
    }
    None
}

/// The covered checksum ([`Digest::InetChecksumCovered`]) of the message. Out of line with
/// two arguments: inlined, its set-up was hoisted into `run_ops`'s prologue for every
/// program (callgrind: +70 instructions a run); called directly from `run_ops`, the nine
/// arguments of [`Digest::compute_in`] were spilled around it.
#[inline(never)]
fn covered(h: &[u8], m: &DigestIn<'_>) -> u64 {
    Digest::InetChecksumCovered.compute_in(h, m)
}

/// `PUSH x; PUSH y; <cmp>; ABORT code` as a range test, if `cmp` is a comparison and one
/// operand is a constant.
fn abort_range(op: BinOp, x: Src, y: Src, code: u64) -> Option<COp> {
    // Normalise to `v <op> k` with the constant on the right.
    let (v, op, k) = match (x, y) {
        (_, Src::Const(k)) => (x, op, k),
        (Src::Const(k), _) => {
            let mirrored = match op {
                BinOp::Lt => BinOp::Gt,
                BinOp::Le => BinOp::Ge,
                BinOp::Gt => BinOp::Lt,
                BinOp::Ge => BinOp::Le,
                other => other,
            };
            (y, mirrored, k)
        }
        _ => return None,
    };
    // (lo, hi, invert): the test is true iff v is in [lo, hi], xor invert. `never` is the
    // full range inverted.
    let never = (0, u64::MAX, true);
    let (lo, hi, invert) = match op {
        BinOp::Eq => (k, k, false),
        BinOp::Ne => (k, k, true),
        BinOp::Lt if k == 0 => never,
        BinOp::Lt => (0, k - 1, false),
        BinOp::Le => (0, k, false),
        BinOp::Gt if k == u64::MAX => never,
        BinOp::Gt => (k + 1, u64::MAX, false),
        BinOp::Ge => (k, u64::MAX, false),
        _ => return None,
    };
    Some(COp::AbortRange {
        x: v,
        lo,
        span: hi - lo,
        invert,
        code,
    })
}

/// Lower a verified program for one byte order; also returns how many slots the compiled
/// ops touch (at most the verified maximum depth).
fn lower(f: &VerifiedFilter, order: ByteOrder, options: CompileOptions) -> (Vec<COp>, usize) {
    let acc = |h| Acc::new(f.loc(h), order, f.header_len);
    let src = |op: Op| -> Option<Src> {
        Some(match op {
            Op::PushConst(k) => Src::Const(k),
            Op::PushField(h) => Src::Field(acc(h)),
            Op::PushSize => Src::Size,
            Op::Digest(id) => Src::Digest(id.resolve()?),
            _ => return None,
        })
    };
    let ops = &f.ops;
    let mut out = Vec::with_capacity(ops.len());
    // Stack depth before ops[i]; the verifier proved 0 <= depth <= STACK_CAPACITY, so it fits
    // a u8 and (with the mask) indexes the slots.
    let mut depth = 0usize;
    let mut slots = 0usize;
    let mut i = 0;
    while let Some(&op) = ops.get(i) {
        if options.fuse {
            if let Some(x) = src(op) {
                let next = ops.get(i + 1).copied();
                // PUSH x; PUSH y; <op>; ABORT code
                if let (Some(y), Some(bin), Some(Op::Abort(code))) = (
                    next.and_then(src),
                    ops.get(i + 2).and_then(|o| o.binop()),
                    ops.get(i + 3).copied(),
                ) {
                    let c = abort_range(bin, x, y, code).unwrap_or(COp::AbortBin {
                        op: bin,
                        x,
                        y,
                        code,
                    });
                    out.push(c.specialised());
                    i += 4;
                    continue;
                }
                let fused = match next {
                    Some(Op::PopField(h)) => Some(COp::StoreSrc { x, acc: acc(h) }),
                    Some(Op::Abort(code)) => Some(COp::AbortIfSrc { x, code }),
                    Some(o) if depth >= 1 => o.binop().map(|bin| COp::BinSrc {
                        op: bin,
                        dst: (depth - 1) as u8,
                        y: x,
                    }),
                    _ => None,
                };
                if let Some(c) = fused {
                    // Every fused pair leaves the depth as it was.
                    out.push(c.specialised());
                    i += 2;
                    continue;
                }
            }
        }
        let d = depth as u8;
        out.push(match op {
            Op::PushConst(k) => COp::Const { dst: d, k },
            Op::PushField(h) => COp::Load {
                dst: d,
                acc: acc(h),
            },
            Op::PushSize => COp::Size { dst: d },
            Op::Digest(id) => match id.resolve() {
                Some(dg) => COp::Digest { dst: d, d: dg },
                // Unreachable after verification; keep the depth bookkeeping identical.
                None => COp::Const { dst: d, k: 0 },
            },
            Op::PopField(h) => COp::Store {
                src: d.wrapping_sub(1),
                acc: acc(h),
            },
            Op::Abort(code) => COp::AbortIf {
                src: d.wrapping_sub(1),
                code,
            },
            Op::Return(v) => COp::Return(v),
            Op::Add => COp::Add {
                dst: d.wrapping_sub(2),
            },
            Op::Sub => COp::Sub {
                dst: d.wrapping_sub(2),
            },
            Op::And => COp::And {
                dst: d.wrapping_sub(2),
            },
            Op::Or => COp::Or {
                dst: d.wrapping_sub(2),
            },
            Op::Xor => COp::Xor {
                dst: d.wrapping_sub(2),
            },
            Op::Shl => COp::Shl {
                dst: d.wrapping_sub(2),
            },
            Op::Shr => COp::Shr {
                dst: d.wrapping_sub(2),
            },
            Op::Eq => COp::Eq {
                dst: d.wrapping_sub(2),
            },
            Op::Ne => COp::Ne {
                dst: d.wrapping_sub(2),
            },
            Op::Lt => COp::Lt {
                dst: d.wrapping_sub(2),
            },
            Op::Le => COp::Le {
                dst: d.wrapping_sub(2),
            },
            Op::Gt => COp::Gt {
                dst: d.wrapping_sub(2),
            },
            Op::Ge => COp::Ge {
                dst: d.wrapping_sub(2),
            },
        });
        let (pops, pushes) = op.stack_effect();
        // Slots this op touches: those it pops (below `depth`) and pushes. Fused ops touch
        // no slot except `BinSrc`, whose slot `depth - 1` holds a value pushed by an unfused
        // op, so it is counted already.
        slots = slots.max(depth).max(depth.saturating_sub(pops) + pushes);
        depth = depth.saturating_sub(pops) + pushes;
        i += 1;
    }
    (out, slots)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every accessor the lowering picks reads and writes exactly what the general bit-level
    /// accessors do, for every field of every header up to 12 bytes, in both orders.
    #[test]
    fn specialised_accessors_match_read_bits_and_write_bits() {
        let mut seed = 0x9e37_79b9_7f4a_7c15u64;
        let mut next = move || {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            seed
        };
        let (mut windows, mut bit_level) = (0, 0);
        for len in 1usize..=12 {
            for off in 0..len as u32 * 8 {
                for bits in 1u8..=64 {
                    let loc = FieldLoc {
                        bit_offset: off,
                        bits,
                    };
                    if off as usize + bits as usize > len * 8 {
                        continue;
                    }
                    for order in [ByteOrder::Big, ByteOrder::Little] {
                        let acc = Acc::new(loc, order, len);
                        match acc {
                            Acc::Le(_) | Acc::Be(_) => windows += 1,
                            Acc::Bits(..) => bit_level += 1,
                        }
                        let hdr: Vec<u8> = (0..len).map(|_| next() as u8).collect();
                        assert_eq!(
                            acc.load(&hdr),
                            read_bits(&hdr, loc, order),
                            "{loc:?} {order:?}"
                        );
                        let v = next();
                        let (mut a, mut b) = (hdr.clone(), hdr);
                        acc.store(&mut a, v);
                        write_bits(&mut b, loc, order, v);
                        assert_eq!(a, b, "{loc:?} {order:?} {acc:?}");
                    }
                }
            }
        }
        assert!(
            windows > 10_000 && bit_level > 50,
            "{windows} windows, {bit_level} bit-level"
        );
    }
}
