//! Layers that cannot lie to the fast path (seed 004 §3.2): a layer that does not declare
//! predictions has its pre-phases run on the fast path, and works; a layer that claims to
//! predict but mispredicts is caught by the fast path's check against the layered path,
//! which names it.

mod common;
use common::*;
use phyllo::field::{FieldClass, FieldHandle};
use phyllo::harness::Pair;
use phyllo::layer::{Cx, DropReason, Handoff, Hdr, InitCx, Packet, Predict, Verdict};
use phyllo::layers::{Checksum, Window};
use phyllo::layout::FieldRegistry;
use phyllo::link::memlink::MemLink;
use phyllo::stack::DynStack;
use phyllo::{Config, Connection, Layer, Role};

/// Numbers its messages in a protocol-specific field and checks the numbering on delivery.
/// With `claims`, it says it predicts but its predictions are always zero (a bug).
struct Numbered {
    claims: bool,
    field: Option<FieldHandle>,
    sent: u64,
    delivered: u64,
}

impl Numbered {
    fn new(claims: bool) -> Numbered {
        Numbered {
            claims,
            field: None,
            sent: 0,
            delivered: 0,
        }
    }
}

impl Layer for Numbered {
    fn name(&self) -> &'static str {
        if self.claims {
            "liar"
        } else {
            "numbered"
        }
    }
    fn init(&mut self, fields: &mut FieldRegistry, _: &InitCx) {
        self.field = Some(fields.add_field(FieldClass::ProtoSpecific, "n", 16, None));
    }
    fn predicts(&self) -> bool {
        self.claims
    }
    fn predict_send(&self, p: &mut Predict<'_>) {
        p.set(self.field.unwrap(), 0);
    }
    fn predict_deliver(&self, p: &mut Predict<'_>) {
        p.set(self.field.unwrap(), 0);
    }
    fn pre_send(&self, pkt: &mut Packet<'_>) -> Verdict {
        pkt.set(self.field.unwrap(), self.sent & 0xffff);
        Verdict::Continue
    }
    fn post_send(&mut self, _: &Hdr<'_>, _: Handoff, _: &mut Cx<'_>) {
        self.sent += 1;
    }
    fn pre_deliver(&self, pkt: &mut Packet<'_>) -> Verdict {
        if pkt.get(self.field.unwrap()) == self.delivered & 0xffff {
            Verdict::Continue
        } else {
            Verdict::Drop(DropReason::OutOfWindow)
        }
    }
    fn post_deliver(&mut self, _: &Hdr<'_>, _: Handoff, _: &mut Cx<'_>) {
        self.delivered += 1;
    }
}

fn pair(claims: bool) -> Pair {
    let stack = || -> DynStack {
        vec![
            Box::new(Numbered::new(claims)),
            Box::new(Window::new(16)),
            Box::new(Checksum::new()),
        ]
    };
    Pair::new(
        Connection::new(stack(), Config::accelerated(Role::Initiator)).unwrap(),
        Connection::new(stack(), Config::accelerated(Role::Responder)).unwrap(),
        MemLink::perfect(),
    )
}

#[test]
fn a_layer_without_predictions_works_under_the_accelerator() {
    let mut p = pair(false);
    let msgs: Vec<Vec<u8>> = (0..50).map(|i| payload(i, 8 + i % 3)).collect();
    assert_eq!(exchange(&mut p, &msgs), msgs);
    let a = p.a.accel_stats().unwrap();
    let b = p.b.accel_stats().unwrap();
    // Still the fast path: its pre-phases ran there.
    assert!(a.fast_send_msgs >= 49, "{a:?}");
    assert!(b.fast_deliver_msgs >= 49, "{b:?}");
}

#[test]
#[should_panic(expected = "layer `liar`")]
fn a_layer_that_mispredicts_is_named() {
    let mut p = pair(true);
    let msgs: Vec<Vec<u8>> = (0..5).map(|i| payload(i, 8)).collect();
    exchange(&mut p, &msgs);
}
