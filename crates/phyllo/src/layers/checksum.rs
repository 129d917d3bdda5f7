//! `checksum`: the Internet checksum (RFC 1071) as a message-specific field.
//!
//! Seed 004 §2.1 names the checksum as the typical message-specific field: it depends on the
//! message, not on protocol state. The 16-bit field covers the header fields of every layer
//! above it and the body, so a corrupted sequence number is caught as surely as a corrupted
//! payload byte. (Fields of layers below are written after it, as in any layered stack.) The
//! header is summed as its sender wrote it, masked to the covered fields; a receiver that
//! converted it from the other byte order rebuilds that image, so both ends agree.

use crate::field::{Cover, FieldClass, FieldHandle};
use crate::filter::{DigestId, Op, Segment};
use crate::inet::covered_checksum;
use crate::layer::Cx;
use crate::layer::{DropReason, Handoff, Hdr, InitCx, Layer, Packet, Verdict};
use crate::layout::FieldRegistry;
use crate::outline::cold;

/// The checksum layer. `O` turns on outlining of the mismatch ([`crate::outline`]); the
/// ordinary layer is `Checksum` (`O = false`).
#[derive(Debug, Default)]
pub struct Checksum<const O: bool = false> {
    field: Option<FieldHandle>,
}

impl Checksum {
    /// A checksum layer.
    pub fn new() -> Checksum {
        Checksum::default()
    }
}

impl<const O: bool> Checksum<O> {
    /// A checksum layer, outlined or not as `O` says.
    pub fn build() -> Checksum<O> {
        Checksum { field: None }
    }

    fn compute(&self, pkt: &Packet<'_>) -> u16 {
        static NONE: Cover = Cover::EMPTY;
        let cover = pkt.layout().upper_cover(pkt.layer()).unwrap_or(&NONE);
        covered_checksum(
            pkt.header(),
            pkt.order(),
            pkt.wire_order(),
            cover,
            pkt.body(),
        )
    }
}

impl<const O: bool> Layer for Checksum<O> {
    fn name(&self) -> &'static str {
        "checksum"
    }

    /// Yes: its one field is message-specific: the filters fill and check it.
    fn predicts(&self) -> bool {
        true
    }

    fn init(&mut self, fields: &mut FieldRegistry, _: &InitCx) {
        self.field = Some(fields.add_field(FieldClass::MsgSpecific, "checksum", 16, None));
    }

    fn pre_send(&self, pkt: &mut Packet<'_>) -> Verdict {
        let c = self.compute(pkt);
        if let Some(h) = self.field {
            pkt.set(h, c as u64);
        }
        Verdict::Continue
    }

    fn post_send(&mut self, _: &Hdr<'_>, _: Handoff, _: &mut Cx<'_>) {}

    fn pre_deliver(&self, pkt: &mut Packet<'_>) -> Verdict {
        let Some(h) = self.field else {
            return Verdict::Continue;
        };
        if self.compute(pkt) as u64 == pkt.get(h) {
            Verdict::Continue
        } else {
            cold::<O>();
            Verdict::Drop(DropReason::Checksum)
        }
    }

    fn post_deliver(&mut self, _: &Hdr<'_>, _: Handoff, _: &mut Cx<'_>) {}

    fn send_filter(&self, seg: &mut Segment) {
        if let Some(h) = self.field {
            seg.extend([Op::Digest(DigestId::INET_CHECKSUM_COVERED), Op::PopField(h)]);
        }
    }

    fn deliver_filter(&self, seg: &mut Segment) {
        if let Some(h) = self.field {
            seg.extend([
                Op::Digest(DigestId::INET_CHECKSUM_COVERED),
                Op::PushField(h),
                Op::Ne,
                Op::Abort(crate::filter::MISS_FILTER),
            ]);
        }
    }
}
