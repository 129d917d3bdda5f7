//! Compile-time layouts ([`phyllo::fixed`]): a [`Fixed`] stack puts the same datagrams on the
//! wire as the dynamic stack of the same layers, reading and writing its fields at the
//! constant places it computed when the connection's layout is the per-layer one, and through
//! the handles when it is not (the accelerator's compact layout, a layer that registers other
//! fields than it declares).

mod common;
use common::*;
use phyllo::fixed::{Fixed, FixedSet};
use phyllo::layers::{Frag, Ports, Window, WindowConfig};
use phyllo::testing::memlink::MemLink;
use phyllo::testing::Pair;
use phyllo::{Config, Connection, LayerSet};

type FragWindow = (Frag, (Window, ()));

fn fixed() -> Fixed<FragWindow> {
    phyllo::fixed_stack!(Frag::new(600), Window::new(16))
}

/// Every datagram of `seed`'s exchange over `a` and `b`.
fn wire<S: LayerSet>(mut p: Pair<S>, seed: u64) -> Vec<Vec<u8>> {
    let mut r = rng(seed);
    let msgs: Vec<Vec<u8>> = sizes(&mut r, 8)
        .into_iter()
        .enumerate()
        .map(|(i, n)| payload(i, n.min(4096)))
        .collect();
    p.wire = Some(Vec::new());
    assert_eq!(exchange(&mut p, &msgs), msgs, "seed {seed}");
    p.wire
        .take()
        .unwrap_or_default()
        .into_iter()
        .map(|(_, d)| d)
        .collect()
}

/// Loss, duplication, reordering and delay, but no corruption: these stacks have no checksum.
fn faulty(seed: u64) -> MemLink {
    let f = phyllo::faults::Faults {
        corrupt: 0.0,
        ..faults(&mut rng(seed ^ 0xf1))
    };
    MemLink::new(f, seed)
}

#[test]
fn fixed_and_dynamic_stacks_put_the_same_datagrams_on_the_wire() {
    for seed in 0..30 {
        let (ca, cb) = Config::pair(false).unwrap();
        let (a, b) = (
            Connection::new(fixed(), ca).unwrap(),
            Connection::new(fixed(), cb).unwrap(),
        );
        // The computed layout is the connection's: the constant places are used.
        assert!(a.layers().places_hold(a.layout()));
        assert_eq!(a.layout().header_len(), FragWindow::HEADER_BYTES);
        let fixed = wire(Pair::new(a, b, faulty(seed)), seed);
        let (ca, cb) = Config::pair(false).unwrap();
        let dynamic = wire(
            Pair::new(
                Connection::from_spec("frag(600):window(16)", ca).unwrap(),
                Connection::from_spec("frag(600):window(16)", cb).unwrap(),
                faulty(seed),
            ),
            seed,
        );
        assert!(!fixed.is_empty());
        assert!(fixed == dynamic, "seed {seed}: the datagrams differ");
    }
}

#[test]
fn other_layouts_take_the_handles() {
    // The accelerator's compact layout is not the one computed.
    let (ca, cb) = Config::pair(true).unwrap();
    let (a, b) = (
        Connection::new(fixed(), ca).unwrap(),
        Connection::new(fixed(), cb).unwrap(),
    );
    assert!(!a.layers().places_hold(a.layout()));
    assert!(!wire(Pair::new(a, b, MemLink::perfect()), 1).is_empty());
    // A window with a transport header registers fields it does not declare.
    let ported = |local, peer| {
        phyllo::fixed_stack!(Window::<false>::build(WindowConfig {
            transport: Some(Ports { local, peer }),
            ..WindowConfig::new(4)
        }))
    };
    let (ca, cb) = Config::pair(false).unwrap();
    let (a, b) = (
        Connection::new(ported(1, 2), ca).unwrap(),
        Connection::new(ported(2, 1), cb).unwrap(),
    );
    assert!(!a.layers().places_hold(a.layout()));
    assert!(!wire(Pair::new(a, b, faulty(2)), 2).is_empty());
}
