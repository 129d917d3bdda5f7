//! Shared helpers of the integration tests.
#![allow(dead_code)]

use phyllo::layers::{Checksum, Frag, Seal, Window};
use phyllo::stack::LayerSet;
use phyllo::testing::memlink::{Faults, MemLink};
use phyllo::testing::Pair;
use phyllo::{Config, Connection};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use std::time::Duration;

/// The 4-layer stack as a spec.
pub const SPEC4: &str = "frag(1400):window(16):checksum:seal";

/// The static form of [`SPEC4`].
pub type Static4 = (Frag, (Window, (Checksum, (Seal, ()))));

/// A fresh static 4-layer stack.
pub fn static4() -> Static4 {
    phyllo::stack!(
        Frag::new(1400),
        Window::new(16),
        Checksum::new(),
        Seal::new()
    )
}

/// A static pair over `link`.
pub fn static_pair(link: MemLink) -> Pair<Static4> {
    static_pair_with(link, false)
}

/// A static pair over `link`, with the accelerator or without, keyed by [`Config::pair`].
pub fn static_pair_with(link: MemLink, accelerate: bool) -> Pair<Static4> {
    let (a, b) = Config::pair(accelerate).unwrap();
    Pair::new(
        Connection::new(static4(), a).unwrap(),
        Connection::new(static4(), b).unwrap(),
        link,
    )
}

/// A random fault schedule: loss up to 30 %, duplication, reordering, corruption.
pub fn faults(rng: &mut ChaCha8Rng) -> Faults {
    Faults {
        loss: rng.random_range(0.0..0.3),
        duplicate: rng.random_range(0.0..0.1),
        reorder: rng.random_range(0.0..0.3),
        corrupt: rng.random_range(0.0..0.05),
        delay: Duration::from_micros(rng.random_range(0..100)),
        reorder_delay: Duration::from_micros(rng.random_range(0..500)),
    }
}

/// Message sizes log-uniform between 1 B and 64 KiB.
pub fn sizes(rng: &mut ChaCha8Rng, n: usize) -> Vec<usize> {
    (0..n)
        .map(|_| {
            let e = rng.random_range(0..=16u32);
            let lo = 1usize << e.saturating_sub(1);
            rng.random_range(lo..=(1usize << e).min(65_536))
        })
        .collect()
}

/// A message whose bytes encode its index, so misordering or corruption shows.
pub fn payload(i: usize, len: usize) -> Vec<u8> {
    (0..len)
        .map(|k| (i.wrapping_mul(31) ^ k.wrapping_mul(7)) as u8)
        .collect()
}

/// Send `msgs` from A to B across `pair`, stepping until all are delivered or the step
/// budget runs out; return what B received, in order.
pub fn exchange<S: LayerSet>(pair: &mut Pair<S>, msgs: &[Vec<u8>]) -> Vec<Vec<u8>> {
    let mut next = 0;
    let mut got = Vec::new();
    for _ in 0..2_000_000 {
        while next < msgs.len() && pair.a.can_send() {
            pair.a.send(pair.now, &msgs[next]).unwrap();
            next += 1;
        }
        let more = pair.step();
        while let Some(m) = pair.b.poll_delivery() {
            got.push(m.data().to_vec());
            pair.b.recycle(m);
        }
        if !more && next == msgs.len() {
            break;
        }
    }
    got
}

/// A seeded generator.
pub fn rng(seed: u64) -> ChaCha8Rng {
    ChaCha8Rng::seed_from_u64(seed)
}

/// Two connections of `spec` made for each other, accelerated or not.
pub fn spec_pair(spec: &str, accel: bool) -> (phyllo::DynConnection, phyllo::DynConnection) {
    let (a, b) = Config::pair(accel).unwrap();
    (
        Connection::from_spec(spec, a).unwrap(),
        Connection::from_spec(spec, b).unwrap(),
    )
}

/// The datagrams `c` has queued, as bytes (their buffers go back to it).
pub fn drain(c: &mut phyllo::DynConnection) -> Vec<Vec<u8>> {
    let mut out = Vec::new();
    while let Some(m) = c.poll_transmit() {
        out.push(m.data().to_vec());
        c.recycle(m);
    }
    out
}
