//! The short latency stack's addressing layer, `ip` (Mosberger et al., "Analysis of Techniques to
//! Improve Protocol Processing Latency" (seed 000) Fig. 1: IP and VNET): source and destination
//! addresses, protocol and time to live, and a routing table that chooses the interface to the peer
//! by longest prefix — once, since a connection's peer is fixed.
//!
//! The stack is `tcp:ip:eth` — a few big layers, as seed 000's TCP/IP: `tcp` is the window
//! layer with a transport header (ports and a checksum; [`phyllo::layers::Ports`]), holding the
//! connection state, the window and retransmission; `ip` addresses and routes; `eth` frames
//! ([`super::frame`]).

use phyllo::field::{FieldClass, FieldHandle};
use phyllo::layer::{Cx, DropReason, Handoff, Hdr, InitCx, Layer, Packet, Role, Verdict};
use phyllo::layout::FieldRegistry;
use phyllo::outline::cold;
use std::net::Ipv4Addr;

/// The transport protocol number `ip` carries (TCP's).
pub const PROTO_TCP: u64 = 6;
/// The time to live of every datagram sent.
pub const TTL: u64 = 64;
/// The initiator's address.
pub const INITIATOR: Ipv4Addr = Ipv4Addr::new(10, 0, 0, 1);
/// The responder's address.
pub const RESPONDER: Ipv4Addr = Ipv4Addr::new(10, 0, 0, 2);

#[derive(Clone, Copy, Debug)]
struct Fields {
    src: FieldHandle,
    dst: FieldHandle,
    proto: FieldHandle,
    ttl: FieldHandle,
}

/// A route: destinations within `prefix/len` leave through interface `iface`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Route {
    /// The network.
    pub prefix: Ipv4Addr,
    /// Its prefix length.
    pub len: u8,
    /// The interface.
    pub iface: u8,
}

/// The addressing layer; `O` outlines its refusals ([`phyllo::outline`]).
#[derive(Debug)]
pub struct Ip<const O: bool> {
    f: Option<Fields>,
    me: u32,
    peer: u32,
    routes: Vec<Route>,
    /// The interface to the peer, looked up once (the peer never changes; TCP keeps its
    /// route in the connection's control block the same way).
    iface: Option<u8>,
    /// Datagrams sent per interface.
    sent: [u64; 4],
}

impl<const O: bool> Default for Ip<O> {
    fn default() -> Self {
        Ip::new()
    }
}

impl<const O: bool> Ip<O> {
    /// An addressing layer with a small routing table: the local network, a host route to the
    /// peer, a default route.
    pub fn new() -> Ip<O> {
        let r = |a: [u8; 4], len, iface| Route {
            prefix: Ipv4Addr::from(a),
            len,
            iface,
        };
        Ip {
            f: None,
            me: 0,
            peer: 0,
            routes: vec![
                r([0, 0, 0, 0], 0, 3),
                r([10, 0, 0, 0], 8, 1),
                r([10, 0, 0, 0], 24, 0),
                r([192, 168, 0, 0], 16, 2),
            ],
            iface: None,
            sent: [0; 4],
        }
    }

    /// The interface for `dst` (longest prefix), if any route covers it.
    pub fn route(&self, dst: Ipv4Addr) -> Option<u8> {
        let d = u32::from(dst);
        self.routes
            .iter()
            .filter(|r| {
                let mask = u32::MAX
                    .checked_shl(32 - u32::from(r.len.min(32)))
                    .unwrap_or(0);
                d & mask == u32::from(r.prefix) & mask
            })
            .max_by_key(|r| r.len)
            .map(|r| r.iface)
    }

    /// Datagrams sent through each interface.
    pub fn sent_per_iface(&self) -> [u64; 4] {
        self.sent
    }
}

impl<const O: bool> Layer for Ip<O> {
    fn name(&self) -> &'static str {
        "ip"
    }

    fn init(&mut self, fields: &mut FieldRegistry, cx: &InitCx) {
        let (me, peer) = match cx.role {
            Role::Initiator => (INITIATOR, RESPONDER),
            Role::Responder => (RESPONDER, INITIATOR),
        };
        self.me = u32::from(me);
        self.peer = u32::from(peer);
        self.iface = self.route(peer);
        self.f = Some(Fields {
            src: fields.add_field(FieldClass::ProtoSpecific, "src", 32, None),
            dst: fields.add_field(FieldClass::ProtoSpecific, "dst", 32, None),
            proto: fields.add_field(FieldClass::ProtoSpecific, "proto", 8, None),
            ttl: fields.add_field(FieldClass::ProtoSpecific, "ttl", 8, None),
        });
    }

    fn pre_send(&self, pkt: &mut Packet<'_>) -> Verdict {
        let Some(f) = self.f else {
            return Verdict::Continue;
        };
        if self.iface.is_none() {
            cold::<O>();
            return Verdict::Drop(DropReason::Malformed);
        }
        pkt.set(f.src, u64::from(self.me));
        pkt.set(f.dst, u64::from(self.peer));
        pkt.set(f.proto, PROTO_TCP);
        pkt.set(f.ttl, TTL);
        Verdict::Continue
    }

    fn post_send(&mut self, _: &Hdr<'_>, _: Handoff, _: &mut Cx<'_>) {
        if let Some(i) = self.iface {
            self.sent[usize::from(i) % 4] += 1;
        }
    }

    fn pre_deliver(&self, pkt: &mut Packet<'_>) -> Verdict {
        let Some(f) = self.f else {
            return Verdict::Continue;
        };
        if pkt.get(f.dst) != u64::from(self.me)
            || pkt.get(f.src) != u64::from(self.peer)
            || pkt.get(f.proto) != PROTO_TCP
            || pkt.get(f.ttl) == 0
        {
            cold::<O>();
            return Verdict::Drop(DropReason::Malformed);
        }
        Verdict::Continue
    }

    fn post_deliver(&mut self, _: &Hdr<'_>, _: Handoff, _: &mut Cx<'_>) {}
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_longest_prefix_routes() {
        let ip = Ip::<false>::new();
        assert_eq!(ip.route(RESPONDER), Some(0));
        assert_eq!(ip.route(Ipv4Addr::new(10, 9, 0, 1)), Some(1));
        assert_eq!(ip.route(Ipv4Addr::new(192, 168, 3, 4)), Some(2));
        assert_eq!(ip.route(Ipv4Addr::new(8, 8, 8, 8)), Some(3));
    }
}
