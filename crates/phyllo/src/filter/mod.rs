//! Packet filters: the stack machine of van Renesse, "Masking the Overhead of Protocol Layering"
//! (seed 004 §3.3) / Table 2.
//!
//! Header prediction cannot know what depends on the message itself: its length, its
//! checksum. The Protocol Accelerator covers those with a packet filter in each critical
//! path. The **send filter** fills in message-specific fields (`POP_FIELD`, which the paper
//! calls "particularly interesting") and may refuse a message, e.g. one too large to go
//! unfragmented; the **delivery filter** checks message-specific fields, e.g. that the
//! checksum matches the body. Each layer contributes a segment of instructions at
//! initialisation and may rewrite it when its state changes ([`ProgramBuilder`]).
//!
//! The machine (Table 2, paper names in capitals):
//!
//! | paper          | here                 | effect                                        |
//! |----------------|----------------------|-----------------------------------------------|
//! | PUSH_CONSTANT  | [`Op::PushConst`]    | push an integer                               |
//! | PUSH_FIELD     | [`Op::PushField`]    | push a header field                           |
//! | PUSH_SIZE      | [`Op::PushSize`]     | push the size of the message body             |
//! | DIGEST         | [`Op::Digest`]       | push a digest of the body ([`Digest`])        |
//! | POP_FIELD      | [`Op::PopField`]     | pop into a header field (send programs only)  |
//! | ADD, SUB, ...  | [`Op::Add`] ... [`Op::Shr`] | wrapping arithmetic, bitwise ops, shifts |
//! | EQ, NE, LT, ...| [`Op::Eq`] ... [`Op::Ge`]   | unsigned comparisons, push 1 or 0      |
//! | RETURN         | [`Op::Return`]       | return the given value                        |
//! | ABORT          | [`Op::Abort`]        | pop; return the given value if it was non-zero|
//!
//! **Return convention: 0 accepts** (take the fast path), any non-zero value rejects (take the
//! layered path), as the paper's text has it ("if the packet filter returns a non-zero value
//! ... the pre-delivery phase of the protocol is executed"; its Figure 3 tests the result the
//! other way round). [`ProgramBuilder::build`] ends every program with `RETURN 0`.
//!
//! Life of a filter: layers fill a [`ProgramBuilder`] → [`Program`] → [`verify`] against the
//! [`FieldTable`] of the header and a [`Direction`] → [`VerifiedFilter`], the only type that can
//! run. It runs either by the reference interpreter ([`VerifiedFilter::interpret`]) or, after
//! [`VerifiedFilter::compile`], as a [`CompiledFilter`] of pre-resolved, fused operations
//! ([`CompiledFilter::run`]). Both have identical semantics, checked against each other on
//! generated programs and by the `filter_verify` fuzz target. A [`FilterCtx`] carries what a
//! run sees: the header (mutable on the send path), its byte order and the message body. The
//! field locations are not in the context: the verified filter keeps the table it was checked
//! against, so a run can never use locations the verifier did not see.
//!
//! Programs have a byte encoding ([`Program::encode`], [`Program::decode`]) for tools and
//! fuzzing.
//!
//! ```
//! use phyllo::filter::{verify, DigestId, Direction, FieldTable, FilterCtx, Op, ProgramBuilder};
//! use phyllo::field::{ByteOrder, FieldLoc};
//!
//! // A 7-byte header whose last two bytes hold the checksum layer's 16-bit field.
//! let mut table = FieldTable::new(7, Vec::new());
//! let csum = table.push(FieldLoc { bit_offset: 40, bits: 16 });
//!
//! // Send filter: the frag layer rejects oversize bodies, the checksum layer fills its field.
//! let mut send = ProgramBuilder::new();
//! send.segment(1).extend([Op::PushSize, Op::PushConst(1400), Op::Gt, Op::Abort(1)]);
//! send.segment(2).extend([Op::Digest(DigestId::INET_CHECKSUM), Op::PopField(csum)]);
//! let filter = verify(&send.build(), &table, Direction::Send)?.compile();
//!
//! let mut header = [0u8; 7];
//! let accepted = filter.run(&mut FilterCtx::send(&mut header, ByteOrder::Big, b"8 bytes!"));
//! assert_eq!(accepted, 0); // 0: take the fast path
//! assert_ne!(header[5..7], [0, 0]);
//! let big = vec![0u8; 2000];
//! assert_eq!(filter.run(&mut FilterCtx::send(&mut header, ByteOrder::Big, &big)), 1);
//! # Ok::<(), phyllo::filter::VerifyError>(())
//! ```

mod compile;
mod digest;
mod interp;
mod program;
mod verify;

#[cfg(test)]
mod tests;

pub use compile::{CompileOptions, CompiledFilter};
pub use digest::{inet_checksum, Digest, DigestId};
pub use program::{
    BinOp, DecodeError, FieldTable, LayerId, Op, Program, ProgramBuilder, Segment, MAX_PROGRAM_OPS,
};
pub use verify::{
    verify, verify_with, Direction, VerifiedFilter, VerifyError, VerifyLimits, STACK_CAPACITY,
};

use crate::field::ByteOrder;

/// Filter return value: a message-specific field did not check out (the message takes the
/// layered path, which counts the layer's drop).
pub const MISS_FILTER: u64 = 1;
/// Filter return value: the message is (or must become) fragments.
pub const MISS_FRAGMENT: u64 = 2;

/// What a run returns when the context breaks an assumption the verifier made: the header is
/// shorter than the one the field table describes, or a program that writes fields is given
/// a read-only (delivery) header. Non-zero, so the message takes the layered path.
pub const REJECT_CONTEXT: u64 = u64::MAX;

/// The header a filter runs against: writable on the send path, read-only on delivery.
#[derive(Debug)]
enum Header<'a> {
    Writable(&'a mut [u8]),
    ReadOnly(&'a [u8]),
}

/// Everything one filter run sees: the header bytes, the byte order its fields are read and
/// written in (the sender's order, from the preamble), and the message body.
#[derive(Debug)]
pub struct FilterCtx<'a> {
    header: Header<'a>,
    order: ByteOrder,
    wire: ByteOrder,
    body: &'a [u8],
}

impl<'a> FilterCtx<'a> {
    /// A send-path context: the filter may write fields of `header`.
    pub fn send(header: &'a mut [u8], order: ByteOrder, body: &'a [u8]) -> FilterCtx<'a> {
        FilterCtx {
            header: Header::Writable(header),
            order,
            wire: order,
            body,
        }
    }

    /// A delivery-path context: `header` is read-only.
    pub fn deliver(header: &'a [u8], order: ByteOrder, body: &'a [u8]) -> FilterCtx<'a> {
        FilterCtx {
            header: Header::ReadOnly(header),
            order,
            wire: order,
            body,
        }
    }

    /// The order the sender wrote the header in, when the receiver has converted it to
    /// `order` since (by default the two are the same): the covered checksum sums the header
    /// as it was written.
    pub fn written_in(mut self, wire: ByteOrder) -> FilterCtx<'a> {
        self.wire = wire;
        self
    }

    /// The header bytes (as the filter left them, after a run).
    pub fn header(&self) -> &[u8] {
        match &self.header {
            Header::Writable(h) => h,
            Header::ReadOnly(h) => h,
        }
    }

    /// The byte order of the header.
    pub fn order(&self) -> ByteOrder {
        self.order
    }

    /// The message body.
    pub fn body(&self) -> &[u8] {
        self.body
    }

    /// Whether the filter may write the header.
    pub fn is_writable(&self) -> bool {
        matches!(self.header, Header::Writable(_))
    }
}

/// Header access for the executions, monomorphised for writable and read-only headers.
pub(crate) trait HeaderIo {
    /// The bytes, for reading.
    fn bytes(&self) -> &[u8];
    /// The bytes, for writing; `None` for a read-only header.
    fn bytes_mut(&mut self) -> Option<&mut [u8]>;
}

impl HeaderIo for &mut [u8] {
    #[inline(always)]
    fn bytes(&self) -> &[u8] {
        self
    }
    #[inline(always)]
    fn bytes_mut(&mut self) -> Option<&mut [u8]> {
        Some(self)
    }
}

impl HeaderIo for &[u8] {
    #[inline(always)]
    fn bytes(&self) -> &[u8] {
        self
    }
    #[inline(always)]
    fn bytes_mut(&mut self) -> Option<&mut [u8]> {
        None
    }
}

/// Whether a filter verified with these properties may run on `ctx` (see
/// [`REJECT_CONTEXT`]).
#[inline]
fn admits(header_len: usize, writes: bool, ctx: &FilterCtx<'_>) -> bool {
    ctx.header().len() >= header_len && (!writes || ctx.is_writable())
}
