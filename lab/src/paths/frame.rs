//! `eth`: framing, the bottom layer of both latency stacks (Mosberger et al., "Analysis of
//! Techniques to Improve Protocol Processing Latency" (seed 000) Fig. 1: ETH and LANCE).
//!
//! A frame type, the body's length and a frame check: a 16-bit Internet checksum over every
//! field of the layers above and the body, standing in for Ethernet's CRC, so that a corrupted
//! byte anywhere in a datagram is refused here whatever the layers above check themselves.

use phyllo::field::{Cover, FieldClass, FieldHandle};
use phyllo::fixed::{declare, FieldDecl, FixedFields, Slots};
use phyllo::inet::covered_checksum;
use phyllo::layer::{Cx, DropReason, Handoff, Hdr, InitCx, Layer, Packet, Verdict};
use phyllo::layout::FieldRegistry;
use phyllo::outline::cold;

/// The frame type phyllo's latency stacks carry (an IEEE local experimental EtherType).
pub const ETHERTYPE: u64 = 0x88b5;

/// `eth`'s fields: frame type, body length, frame check.
const ETH_FIELDS: [FieldDecl; 3] = [
    FieldDecl::new(FieldClass::ProtoSpecific, "ethertype", 16),
    FieldDecl::new(FieldClass::MsgSpecific, "length", 16),
    FieldDecl::new(FieldClass::MsgSpecific, "fcs", 16),
];
/// Positions of the fields in [`ETH_FIELDS`].
const TY: usize = 0;
const LEN: usize = 1;
const FCS: usize = 2;

/// The framing layer; `O` outlines its refusals ([`phyllo::outline`]).
#[derive(Debug, Default)]
pub struct Eth<const O: bool> {
    f: Option<[FieldHandle; 3]>,
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
        self.f = Some(declare(fields, &ETH_FIELDS));
    }

    fn pre_send(&self, pkt: &mut Packet<'_>) -> Verdict {
        match &self.f {
            Some(f) => self.pre_send_fixed(pkt, f),
            None => Verdict::Continue,
        }
    }

    fn post_send(&mut self, _: &Hdr<'_>, _: Handoff, _: &mut Cx<'_>) {}

    fn pre_deliver(&self, pkt: &mut Packet<'_>) -> Verdict {
        match &self.f {
            Some(f) => self.pre_deliver_fixed(pkt, f),
            None => Verdict::Continue,
        }
    }

    fn post_deliver(&mut self, _: &Hdr<'_>, _: Handoff, _: &mut Cx<'_>) {}
}

impl<const O: bool> FixedFields for Eth<O> {
    const FIELDS: &'static [FieldDecl] = &ETH_FIELDS;

    #[inline(always)]
    fn pre_send_fixed<A: Slots>(&self, pkt: &mut Packet<'_>, f: A) -> Verdict {
        f.set::<TY>(pkt, ETHERTYPE);
        f.set::<LEN>(pkt, f.body_len(pkt) as u64 & 0xffff);
        let c = Self::fcs(pkt);
        f.set::<FCS>(pkt, c);
        Verdict::Continue
    }

    #[inline(always)]
    fn pre_deliver_fixed<A: Slots>(&self, pkt: &mut Packet<'_>, f: A) -> Verdict {
        if f.get::<TY>(pkt) != ETHERTYPE || f.get::<LEN>(pkt) != f.body_len(pkt) as u64 & 0xffff {
            cold::<O>();
            return Verdict::Drop(DropReason::Malformed);
        }
        if f.get::<FCS>(pkt) != Self::fcs(pkt) {
            cold::<O>();
            return Verdict::Drop(DropReason::Checksum);
        }
        Verdict::Continue
    }
}
