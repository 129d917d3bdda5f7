//! `eth`: framing, the bottom layer of both latency stacks (Mosberger et al., "Analysis of
//! Techniques to Improve Protocol Processing Latency" (seed 000) Fig. 1: ETH and LANCE).
//!
//! A frame type, the body's length and a frame check: a 16-bit Internet checksum over every
//! field of the layers above and the body, standing in for Ethernet's CRC, so that a corrupted
//! byte anywhere in a datagram is refused here whatever the layers above check themselves.

use phyllo::field::{Cover, FieldClass, FieldHandle};
use phyllo::inet::covered_checksum;
use phyllo::layer::{Cx, DropReason, Handoff, Hdr, InitCx, Layer, Packet, Verdict};
use phyllo::layout::FieldRegistry;
use phyllo::outline::cold;

/// The frame type phyllo's latency stacks carry (an IEEE local experimental EtherType).
pub const ETHERTYPE: u64 = 0x88b5;

#[derive(Clone, Copy, Debug)]
struct Fields {
    ty: FieldHandle,
    len: FieldHandle,
    fcs: FieldHandle,
}

/// The framing layer; `O` outlines its refusals ([`phyllo::outline`]).
#[derive(Debug, Default)]
pub struct Eth<const O: bool> {
    f: Option<Fields>,
}

impl<const O: bool> Eth<O> {
    /// A framing layer.
    pub fn new() -> Eth<O> {
        Eth { f: None }
    }

    fn fcs(pkt: &Packet<'_>) -> u64 {
        static NONE: Cover = Cover::EMPTY;
        let cover = pkt.layout().upper_cover(pkt.layer()).unwrap_or(&NONE);
        u64::from(covered_checksum(
            pkt.header(),
            pkt.order(),
            pkt.wire_order(),
            cover,
            pkt.body(),
        ))
    }
}

impl<const O: bool> Layer for Eth<O> {
    fn name(&self) -> &'static str {
        "eth"
    }

    fn init(&mut self, fields: &mut FieldRegistry, _: &InitCx) {
        self.f = Some(Fields {
            ty: fields.add_field(FieldClass::ProtoSpecific, "ethertype", 16, None),
            len: fields.add_field(FieldClass::MsgSpecific, "length", 16, None),
            fcs: fields.add_field(FieldClass::MsgSpecific, "fcs", 16, None),
        });
    }

    fn pre_send(&self, pkt: &mut Packet<'_>) -> Verdict {
        if let Some(f) = self.f {
            pkt.set(f.ty, ETHERTYPE);
            pkt.set(f.len, pkt.body().len() as u64 & 0xffff);
            let c = Self::fcs(pkt);
            pkt.set(f.fcs, c);
        }
        Verdict::Continue
    }

    fn post_send(&mut self, _: &Hdr<'_>, _: Handoff, _: &mut Cx<'_>) {}

    fn pre_deliver(&self, pkt: &mut Packet<'_>) -> Verdict {
        let Some(f) = self.f else {
            return Verdict::Continue;
        };
        if pkt.get(f.ty) != ETHERTYPE || pkt.get(f.len) != pkt.body().len() as u64 & 0xffff {
            cold::<O>();
            return Verdict::Drop(DropReason::Malformed);
        }
        if pkt.get(f.fcs) != Self::fcs(pkt) {
            cold::<O>();
            return Verdict::Drop(DropReason::Checksum);
        }
        Verdict::Continue
    }

    fn post_deliver(&mut self, _: &Hdr<'_>, _: Handoff, _: &mut Cx<'_>) {}
}
