//! The connection's two packet filters (van Renesse, "Masking the Overhead of Protocol Layering"
//! (seed 004 §3.3)), built from the layers' segments.
//!
//! The filter language lives in [`crate::filter`] (layers program it, the accelerator runs
//! it). Here each layer appends its instructions to the send filter (fill message-specific
//! fields, refuse what the fast path cannot send) and the delivery filter (check
//! message-specific fields); both are verified against the compact layout when the connection
//! is built — a program that fails verification is a build error, never a silent drop — and
//! compiled.
//!
//! Connections whose layers write the same programs over the same layout (every session of
//! one stack) share one compiled pair: it is verified and compiled once per process and kept
//! while any connection uses it, which saves each connection that work and about a kilobyte.

use crate::filter::{
    verify, CompiledFilter, DigestId, Direction, FieldTable, FilterCtx, LayerId, Op,
    ProgramBuilder, VerifyError,
};
use crate::layout::Layout;
use crate::stack::LayerSet;
use std::collections::HashMap;
use std::sync::{Arc, Mutex, OnceLock, Weak};

/// The send and delivery filters of one connection.
pub(crate) struct Filters {
    send: CompiledFilter,
    deliver: CompiledFilter,
    /// Layers that put instructions in the send filter.
    send_layers: Vec<usize>,
}

impl Filters {
    /// Collect the layers' segments; verify and compile them, or share the filters already
    /// compiled from the same programs over the same layout.
    pub(crate) fn build<S: LayerSet>(
        layers: &S,
        layout: &Layout,
    ) -> Result<Arc<Filters>, VerifyError> {
        let table = FieldTable::new(layout.header_len(), layout.locs().to_vec());
        let mut send = ProgramBuilder::new();
        let mut deliver = ProgramBuilder::new();
        // The covered checksum covers the fields above the layer that asks for it.
        let mut cover_layer = None;
        let mut send_layers = Vec::new();
        for i in 0..layers.count() {
            let id = i as LayerId;
            layers.send_filter_at(i, send.segment(id));
            layers.deliver_filter_at(i, deliver.segment(id));
            let ops = || {
                send.segments()
                    .iter()
                    .filter(move |s| s.layer() == id)
                    .flat_map(|s| s.ops().iter())
            };
            if ops().next().is_some() {
                send_layers.push(i);
            }
            if ops().any(|o| matches!(o, Op::Digest(d) if *d == DigestId::INET_CHECKSUM_COVERED)) {
                cover_layer = Some(i);
            }
        }
        let cover = cover_layer.map_or(&[][..], |i| layout.upper_fields(i));
        let (send, deliver) = (send.build(), deliver.build());
        // Everything the compiled pair depends on.
        let mut key = send.encode();
        deliver.encode_into(&mut key);
        key.extend_from_slice(
            format!("{:?} {:?} {:?}", layout.locs(), cover, send_layers).as_bytes(),
        );
        key.extend_from_slice(&layout.header_len().to_le_bytes());
        static CACHE: OnceLock<Mutex<HashMap<Vec<u8>, Weak<Filters>>>> = OnceLock::new();
        let cache = CACHE.get_or_init(Default::default);
        // A poisoned lock only means another thread panicked while holding it; the map is
        // still a valid cache.
        let mut map = cache.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(f) = map.get(&key).and_then(Weak::upgrade) {
            return Ok(f);
        }
        let f = Arc::new(Filters {
            send: verify(&send, &table, Direction::Send)?
                .with_cover(cover)
                .compile(),
            deliver: verify(&deliver, &table, Direction::Deliver)?
                .with_cover(cover)
                .compile(),
            send_layers,
        });
        map.retain(|_, w| w.strong_count() > 0);
        map.insert(key, Arc::downgrade(&f));
        Ok(f)
    }

    /// Run the send filter: 0 accepts.
    #[inline(always)]
    pub(crate) fn send(&self, ctx: &mut FilterCtx<'_>) -> u64 {
        self.send.run(ctx)
    }

    /// Run the delivery filter: 0 accepts.
    #[inline(always)]
    pub(crate) fn deliver(&self, ctx: &mut FilterCtx<'_>) -> u64 {
        self.deliver.run(ctx)
    }

    /// The lowest layer with send-filter instructions.
    pub(crate) fn lowest_send_layer(&self) -> Option<usize> {
        self.send_layers.last().copied()
    }
}
