//! The tall latency stack's small layers (Mosberger et al., "Analysis of Techniques to Improve
//! Protocol Processing Latency" (seed 000) Fig. 1, right: an x-kernel RPC stack of many small
//! protocols, after Sprite RPC): `xrpctest` (the request/reply test driver's header), `mselect`
//! (procedure select), `vchan` (virtual channel), `bid` (boot id) and `vnet` (addressing). With
//! `chan` (the window layer as a one-message channel: each call waits for its reply, retransmitted
//! until acknowledged), `blast` (fragmentation) and `eth` (framing) they make the stack
//! `xrpctest:mselect:vchan:chan:bid:blast:vnet:eth`.
//!
//! Each layer does what its x-kernel namesake does on the common path — stamp a field or two
//! on the way down, check them on the way up — and refuses what does not belong, counted.

use phyllo::field::{FieldClass, FieldHandle};
use phyllo::fixed::{declare, FieldDecl, FixedFields, Slots};
use phyllo::layer::{Cx, DropReason, Handoff, Hdr, InitCx, Layer, Packet, Role, Verdict};
use phyllo::layout::FieldRegistry;
use phyllo::outline::cold;

/// `xrpctest`: the test driver's header — whether a message is a request (from the
/// initiator) or a reply (from the responder), and the call it belongs to.
#[derive(Debug, Default)]
pub struct XrpcTest<const O: bool> {
    f: Option<[FieldHandle; 2]>,
    role: Option<Role>,
    /// Calls sent (requests made or replies given).
    calls: u64,
    /// Calls received.
    received: u64,
}

const REQUEST: u64 = 0;
const REPLY: u64 = 1;

impl<const O: bool> XrpcTest<O> {
    /// A test driver.
    pub fn new() -> XrpcTest<O> {
        XrpcTest {
            f: None,
            role: None,
            calls: 0,
            received: 0,
        }
    }

    fn sends(&self) -> u64 {
        match self.role {
            Some(Role::Responder) => REPLY,
            _ => REQUEST,
        }
    }
}

impl<const O: bool> Layer for XrpcTest<O> {
    fn name(&self) -> &'static str {
        "xrpctest"
    }

    fn init(&mut self, fields: &mut FieldRegistry, cx: &InitCx) {
        self.role = Some(cx.role);
        self.f = Some(declare(fields, &XRPC_FIELDS));
    }

    fn pre_send(&self, pkt: &mut Packet<'_>) -> Verdict {
        match &self.f {
            Some(f) => self.pre_send_fixed(pkt, f),
            None => Verdict::Continue,
        }
    }

    fn post_send(&mut self, _: &Hdr<'_>, _: Handoff, _: &mut Cx<'_>) {
        self.calls += 1;
    }

    fn pre_deliver(&self, pkt: &mut Packet<'_>) -> Verdict {
        match &self.f {
            Some(f) => self.pre_deliver_fixed(pkt, f),
            None => Verdict::Continue,
        }
    }

    fn post_deliver(&mut self, _: &Hdr<'_>, _: Handoff, _: &mut Cx<'_>) {
        self.received += 1;
    }
}

/// `xrpctest`'s fields: request or reply, and the call.
const XRPC_FIELDS: [FieldDecl; 2] = [
    FieldDecl::new(FieldClass::ProtoSpecific, "rr", 1),
    FieldDecl::new(FieldClass::ProtoSpecific, "call", 16),
];

impl<const O: bool> FixedFields for XrpcTest<O> {
    const FIELDS: &'static [FieldDecl] = &XRPC_FIELDS;

    #[inline(always)]
    fn pre_send_fixed<A: Slots>(&self, pkt: &mut Packet<'_>, f: A) -> Verdict {
        f.set::<0>(pkt, self.sends());
        f.set::<1>(pkt, self.calls & 0xffff);
        Verdict::Continue
    }

    #[inline(always)]
    fn pre_deliver_fixed<A: Slots>(&self, pkt: &mut Packet<'_>, f: A) -> Verdict {
        // Requests come to the responder, replies to the initiator, one call after another
        // (the channel below delivers exactly once, in order).
        if f.get::<0>(pkt) == self.sends() || f.get::<1>(pkt) != self.received & 0xffff {
            cold::<O>();
            return Verdict::Drop(DropReason::Malformed);
        }
        Verdict::Continue
    }
}

/// Procedures the `mselect` layer serves.
pub const PROCEDURES: u64 = 8;
/// The procedure the test driver calls.
pub const TEST_PROCEDURE: u64 = 3;

/// `mselect`: procedure select — the procedure a call names, checked against the procedures
/// served, with a count per procedure.
#[derive(Debug, Default)]
pub struct MSelect<const O: bool> {
    f: Option<[FieldHandle; 1]>,
    calls: [u64; PROCEDURES as usize],
}

impl<const O: bool> MSelect<O> {
    /// A procedure selector serving procedures 0 to [`PROCEDURES`] − 1.
    pub fn new() -> MSelect<O> {
        MSelect {
            f: None,
            calls: [0; PROCEDURES as usize],
        }
    }

    /// Calls received per procedure.
    pub fn calls(&self) -> &[u64] {
        &self.calls
    }
}

impl<const O: bool> Layer for MSelect<O> {
    fn name(&self) -> &'static str {
        "mselect"
    }

    fn init(&mut self, fields: &mut FieldRegistry, _: &InitCx) {
        self.f = Some(declare(fields, &MSELECT_FIELDS));
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

    fn post_deliver(&mut self, hdr: &Hdr<'_>, _: Handoff, _: &mut Cx<'_>) {
        if let Some([h]) = self.f {
            if let Some(c) = self.calls.get_mut(hdr.get(h) as usize) {
                *c += 1;
            }
        }
    }
}

/// `mselect`'s field: the procedure.
const MSELECT_FIELDS: [FieldDecl; 1] = [FieldDecl::new(FieldClass::ProtoSpecific, "proc", 16)];

impl<const O: bool> FixedFields for MSelect<O> {
    const FIELDS: &'static [FieldDecl] = &MSELECT_FIELDS;

    #[inline(always)]
    fn pre_send_fixed<A: Slots>(&self, pkt: &mut Packet<'_>, f: A) -> Verdict {
        f.set::<0>(pkt, TEST_PROCEDURE);
        Verdict::Continue
    }

    #[inline(always)]
    fn pre_deliver_fixed<A: Slots>(&self, pkt: &mut Packet<'_>, f: A) -> Verdict {
        if f.get::<0>(pkt) >= PROCEDURES {
            cold::<O>();
            return Verdict::Drop(DropReason::Malformed);
        }
        Verdict::Continue
    }
}

/// Channels a `vchan` layer multiplexes.
pub const CHANNELS: u64 = 4;

/// `vchan`: the virtual channel — which of the channels below a call uses. The stack has one
/// channel (`chan`) and the test driver one call outstanding, so every call takes channel 0; a
/// message naming a channel that does not exist is refused.
#[derive(Debug, Default)]
pub struct VChan<const O: bool> {
    f: Option<[FieldHandle; 1]>,
}

impl<const O: bool> VChan<O> {
    /// A virtual channel over [`CHANNELS`] channels.
    pub fn new() -> VChan<O> {
        VChan { f: None }
    }
}

impl<const O: bool> Layer for VChan<O> {
    fn name(&self) -> &'static str {
        "vchan"
    }

    fn init(&mut self, fields: &mut FieldRegistry, _: &InitCx) {
        self.f = Some(declare(fields, &VCHAN_FIELDS));
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

/// `vchan`'s field: the channel.
const VCHAN_FIELDS: [FieldDecl; 1] = [FieldDecl::new(FieldClass::ProtoSpecific, "vchan", 8)];

impl<const O: bool> FixedFields for VChan<O> {
    const FIELDS: &'static [FieldDecl] = &VCHAN_FIELDS;

    #[inline(always)]
    fn pre_send_fixed<A: Slots>(&self, pkt: &mut Packet<'_>, f: A) -> Verdict {
        f.set::<0>(pkt, 0);
        Verdict::Continue
    }

    #[inline(always)]
    fn pre_deliver_fixed<A: Slots>(&self, pkt: &mut Packet<'_>, f: A) -> Verdict {
        if f.get::<0>(pkt) >= CHANNELS {
            cold::<O>();
            return Verdict::Drop(DropReason::Malformed);
        }
        Verdict::Continue
    }
}

/// `bid`: boot id — every message carries its sender's boot id; the first one heard from the
/// peer is remembered, and a message with another (a peer that restarted, talking to state
/// from before) is refused.
#[derive(Debug, Default)]
pub struct Bid<const O: bool> {
    f: Option<[FieldHandle; 1]>,
    mine: u64,
    peer: Option<u64>,
}

impl<const O: bool> Bid<O> {
    /// A boot-id layer; this end's boot id is fixed by its role (so runs replay), unless
    /// [`Bid::with_boot_id`] sets one.
    pub fn new() -> Bid<O> {
        Bid {
            f: None,
            mine: 0,
            peer: None,
        }
    }

    /// This end's boot id.
    pub fn with_boot_id(id: u32) -> Bid<O> {
        Bid {
            mine: u64::from(id),
            ..Bid::new()
        }
    }
}

impl<const O: bool> Layer for Bid<O> {
    fn name(&self) -> &'static str {
        "bid"
    }

    fn init(&mut self, fields: &mut FieldRegistry, cx: &InitCx) {
        if self.mine == 0 {
            self.mine = match cx.role {
                Role::Initiator => 0x5eed_0001,
                Role::Responder => 0x5eed_0002,
            };
        }
        self.f = Some(declare(fields, &BID_FIELDS));
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

    fn post_deliver(&mut self, hdr: &Hdr<'_>, _: Handoff, _: &mut Cx<'_>) {
        if self.peer.is_none() {
            cold::<O>();
            if let Some([h]) = self.f {
                self.peer = Some(hdr.get(h));
            }
        }
    }
}

/// `bid`'s field: the sender's boot id.
const BID_FIELDS: [FieldDecl; 1] = [FieldDecl::new(FieldClass::ProtoSpecific, "bid", 32)];

impl<const O: bool> FixedFields for Bid<O> {
    const FIELDS: &'static [FieldDecl] = &BID_FIELDS;

    #[inline(always)]
    fn pre_send_fixed<A: Slots>(&self, pkt: &mut Packet<'_>, f: A) -> Verdict {
        f.set::<0>(pkt, self.mine);
        Verdict::Continue
    }

    #[inline(always)]
    fn pre_deliver_fixed<A: Slots>(&self, pkt: &mut Packet<'_>, f: A) -> Verdict {
        if let Some(peer) = self.peer {
            if f.get::<0>(pkt) != peer {
                cold::<O>();
                return Verdict::Drop(DropReason::Malformed);
            }
        }
        Verdict::Continue
    }
}

/// `vnet`: addressing — 16-bit host addresses of sender and receiver; a message for another
/// host is refused.
#[derive(Debug, Default)]
pub struct VNet<const O: bool> {
    f: Option<[FieldHandle; 2]>,
    me: u64,
    peer: u64,
}

/// The initiator's host address.
pub const HOST_INITIATOR: u64 = 0x0a01;
/// The responder's host address.
pub const HOST_RESPONDER: u64 = 0x0a02;

impl<const O: bool> VNet<O> {
    /// An addressing layer.
    pub fn new() -> VNet<O> {
        VNet {
            f: None,
            me: 0,
            peer: 0,
        }
    }
}

impl<const O: bool> Layer for VNet<O> {
    fn name(&self) -> &'static str {
        "vnet"
    }

    fn init(&mut self, fields: &mut FieldRegistry, cx: &InitCx) {
        (self.me, self.peer) = match cx.role {
            Role::Initiator => (HOST_INITIATOR, HOST_RESPONDER),
            Role::Responder => (HOST_RESPONDER, HOST_INITIATOR),
        };
        self.f = Some(declare(fields, &VNET_FIELDS));
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

/// `vnet`'s fields: the sender's and the receiver's host addresses.
const VNET_FIELDS: [FieldDecl; 2] = [
    FieldDecl::new(FieldClass::ProtoSpecific, "from", 16),
    FieldDecl::new(FieldClass::ProtoSpecific, "to", 16),
];

impl<const O: bool> FixedFields for VNet<O> {
    const FIELDS: &'static [FieldDecl] = &VNET_FIELDS;

    #[inline(always)]
    fn pre_send_fixed<A: Slots>(&self, pkt: &mut Packet<'_>, f: A) -> Verdict {
        f.set::<0>(pkt, self.me);
        f.set::<1>(pkt, self.peer);
        Verdict::Continue
    }

    #[inline(always)]
    fn pre_deliver_fixed<A: Slots>(&self, pkt: &mut Packet<'_>, f: A) -> Verdict {
        if f.get::<1>(pkt) != self.me || f.get::<0>(pkt) != self.peer {
            cold::<O>();
            return Verdict::Drop(DropReason::Malformed);
        }
        Verdict::Continue
    }
}
