//! `frag`: fragmentation and bounded reassembly.
//!
//! Seed 004 §6 (Fragmentation/Reassembly): the frag layer keeps large messages off the fast
//! path with a one-bit protocol-specific field that is set if and only if the message is a
//! fragment, so the receiver's header prediction fails and reassembly takes the layered path.
//! A message whose body exceeds the fragment size is absorbed in pre-send and split in
//! post-send; each fragment's body starts with a 12-byte fragment header (message id, chunk
//! size, total length, offset; big-endian) that only fragments carry, so ordinary messages pay
//! one bit.
//!
//! **The fragment size comes from the path.** `frag(N)` cuts bodies of at most `N` bytes, and
//! fewer when the path carries less; `frag` cuts them to what the path carries
//! ([`crate::plpmtu`]: the reliable layer below searches for it; at most
//! [`MAX_PLPMTU`] bytes of datagram while nothing searches). The size may change between
//! messages, never within one: each fragment names its message's chunk size, so the receiver
//! reassembles whatever size the sender used.
//!
//! Reassembly is bounded: at most [`MAX_SLOTS`] messages in progress (the oldest is evicted and
//! counted) and none longer than the connection's maximum message size. Overlapping, misplaced
//! or inconsistent fragments are counted and dropped.

use crate::field::{FieldClass, FieldHandle};
use crate::filter::{Op, Segment};
use crate::layer::{Cx, DropReason, Handoff, Hdr, InitCx, Layer, Packet, Predict, Verdict};
use crate::layout::FieldRegistry;
use crate::msg::Msg;
use crate::outline::cold;
use crate::plpmtu::{PathMtu, MAX_PLPMTU};

/// Bytes of the fragment header at the start of a fragment's body.
pub const FRAG_HEADER: usize = 12;
/// Reassemblies in progress at most.
pub const MAX_SLOTS: usize = 4;

/// A fragment header.
#[derive(Clone, Copy, Debug)]
struct Header {
    /// The message's number (wrapping; at most [`MAX_SLOTS`] are reassembled at once).
    id: u16,
    /// Body bytes of every fragment of the message but the last.
    chunk: usize,
    /// The message's body bytes.
    total: usize,
    /// This fragment's place in the body.
    off: usize,
}

#[derive(Debug)]
struct Slot {
    id: u16,
    /// Body bytes per fragment (all but the last).
    chunk: usize,
    total: usize,
    /// Header area of the first fragment, then the message body.
    msg: Msg,
    got: Vec<bool>,
    missing: usize,
    age: u64,
}

/// The frag layer. `O` turns on outlining of fragmentation and reassembly
/// ([`crate::outline`]); the ordinary layer is `Frag` (`O = false`).
#[derive(Debug)]
pub struct Frag<const O: bool = false> {
    /// Largest body of any message leaving this layer (`usize::MAX`: what the path allows).
    size: usize,
    /// The path's datagram size ([`crate::plpmtu`]).
    path: Option<PathMtu>,
    max_message: usize,
    field: Option<FieldHandle>,
    next_id: u16,
    slots: Vec<Slot>,
    clock: u64,
    name: &'static str,
}

impl Frag {
    /// A frag layer whose fragments carry at most `size` body bytes (at least 64).
    pub fn new(size: usize) -> Frag {
        Frag::build(size)
    }

    /// A frag layer whose fragments carry what the path allows.
    pub fn path_sized() -> Frag {
        Frag {
            size: usize::MAX,
            ..Frag::build(64)
        }
    }
}

impl<const O: bool> Frag<O> {
    /// A frag layer, outlined or not as `O` says.
    pub fn build(size: usize) -> Frag<O> {
        Frag {
            size: size.max(64),
            path: None,
            max_message: 1 << 20,
            field: None,
            next_id: 0,
            slots: Vec::new(),
            clock: 0,
            name: "frag",
        }
    }

    /// The same layer under another name (the latency stacks' `blast`).
    pub fn named(self, name: &'static str) -> Frag<O> {
        Frag { name, ..self }
    }

    /// The largest body a message may leave with now: the configured size, the path's limit
    /// (while a layer below searches for it), at least 64 bytes.
    #[inline]
    fn cap(&self) -> usize {
        let path = self.path.as_ref().and_then(PathMtu::body_limit);
        match path {
            Some(p) => self.size.min(p),
            None => self.static_cap(),
        }
        .max(64)
    }

    /// The largest body without a search: the configured size, or for a path-sized layer
    /// what a [`MAX_PLPMTU`]-byte datagram holds.
    fn static_cap(&self) -> usize {
        if self.size == usize::MAX {
            let overhead = self.path.as_ref().map_or(0, PathMtu::overhead);
            MAX_PLPMTU.saturating_sub(overhead).max(64)
        } else {
            self.size
        }
    }

    /// Reassemblies in progress.
    pub fn in_progress(&self) -> usize {
        self.slots.len()
    }

    fn parse(body: &[u8]) -> Option<Header> {
        let h = body.get(..FRAG_HEADER)?;
        Some(Header {
            id: u16::from_be_bytes([h[0], h[1]]),
            chunk: usize::from(u16::from_be_bytes([h[2], h[3]])),
            total: u32::from_be_bytes([h[4], h[5], h[6], h[7]]) as usize,
            off: u32::from_be_bytes([h[8], h[9], h[10], h[11]]) as usize,
        })
    }

    /// Whether a fragment is well-formed: a chunk size the sender could have used, in bounds,
    /// at a chunk boundary, of the right length.
    fn check(&self, body: &[u8]) -> Result<Header, DropReason> {
        let h = Self::parse(body).ok_or(DropReason::Truncated)?;
        let len = body.len() - FRAG_HEADER;
        if h.total > self.max_message {
            return Err(DropReason::TooLarge);
        }
        if h.chunk < 64 - FRAG_HEADER
            || h.total <= h.chunk
            || h.off % h.chunk != 0
            || h.off >= h.total
            || len != h.chunk.min(h.total - h.off)
        {
            return Err(DropReason::Malformed);
        }
        Ok(h)
    }
}

impl<const O: bool> Layer for Frag<O> {
    fn name(&self) -> &'static str {
        self.name
    }

    /// Yes: the filters send only unfragmented messages and refuse fragments; its bit is predicted clear.
    fn predicts(&self) -> bool {
        true
    }

    fn init(&mut self, fields: &mut FieldRegistry, cx: &InitCx) {
        self.field = Some(fields.add_field(FieldClass::ProtoSpecific, "frag", 1, None));
        self.max_message = cx.max_message;
        self.path = Some(cx.path.clone());
    }

    fn pre_send(&self, pkt: &mut Packet<'_>) -> Verdict {
        if pkt.body().len() > self.cap() {
            cold::<O>();
            Verdict::Absorb
        } else {
            Verdict::Continue
        }
    }

    fn post_send(&mut self, _: &Hdr<'_>, h: Handoff, cx: &mut Cx<'_>) {
        let (Handoff::Absorbed(m), Some(field)) = (h, self.field) else {
            return;
        };
        cold::<O>();
        let hl = cx.header_len();
        let id = self.next_id;
        self.next_id = self.next_id.wrapping_add(1);
        let body = &m.data()[hl..];
        let total = body.len();
        // One size for the whole message; at most what the header's 16 bits name.
        let size = (self.cap() - FRAG_HEADER).min(usize::from(u16::MAX));
        for (k, chunk) in body.chunks(size).enumerate() {
            let mut f = cx.alloc();
            // Headers written (the header area, then the fragment header), then the chunk
            // copied: only the chunk counts as a copy ([`crate::msg::copied_bytes`]).
            f.prepend(&m.data()[..hl]);
            let mut fh = [0u8; FRAG_HEADER];
            fh[..2].copy_from_slice(&id.to_be_bytes());
            fh[2..4].copy_from_slice(&(size as u16).to_be_bytes());
            fh[4..8].copy_from_slice(&(total as u32).to_be_bytes());
            fh[8..].copy_from_slice(&((k * size) as u32).to_be_bytes());
            f.append_array(&fh);
            f.extend_from_slice(chunk);
            cx.set(&mut f, field, 1);
            cx.send_down(f);
        }
        cx.free(m);
    }

    fn pre_deliver(&self, pkt: &mut Packet<'_>) -> Verdict {
        let Some(field) = self.field else {
            return Verdict::Continue;
        };
        if pkt.get(field) == 0 {
            return Verdict::Continue;
        }
        cold::<O>();
        match self.check(pkt.body()) {
            Ok(_) => Verdict::Absorb,
            Err(r) => Verdict::Drop(r),
        }
    }

    fn post_deliver(&mut self, _: &Hdr<'_>, h: Handoff, cx: &mut Cx<'_>) {
        let (Handoff::Absorbed(m), Some(field)) = (h, self.field) else {
            return;
        };
        cold::<O>();
        let hl = cx.header_len();
        let Ok(Header {
            id,
            chunk,
            total,
            off,
        }) = self.check(&m.data()[hl..])
        else {
            cx.free(m);
            return;
        };
        self.clock += 1;
        let idx = match self.slots.iter().position(|s| s.id == id) {
            Some(i) if self.slots[i].total == total && self.slots[i].chunk == chunk => i,
            Some(_) => {
                cx.count_drop(DropReason::Malformed);
                cx.free(m);
                return;
            }
            None => {
                if self.slots.len() >= MAX_SLOTS {
                    let oldest = (0..self.slots.len())
                        .min_by_key(|&i| self.slots[i].age)
                        .unwrap_or(0);
                    let s = self.slots.swap_remove(oldest);
                    cx.free(s.msg);
                    cx.count_drop(DropReason::Evicted);
                }
                let mut buf = cx.alloc();
                // The header area written in front; the body's bytes are copied in as the
                // fragments come.
                buf.prepend(&m.data()[..hl]);
                buf.push_back(total);
                let n = total.div_ceil(chunk);
                self.slots.push(Slot {
                    id,
                    chunk,
                    total,
                    msg: buf,
                    got: vec![false; n],
                    missing: n,
                    age: self.clock,
                });
                self.slots.len() - 1
            }
        };
        let k = off / chunk;
        let slot = &mut self.slots[idx];
        slot.age = self.clock;
        if slot.got[k] {
            cx.count_drop(DropReason::Duplicate);
            cx.free(m);
            return;
        }
        slot.got[k] = true;
        slot.missing -= 1;
        let data = &m.data()[hl + FRAG_HEADER..];
        slot.msg.data_mut()[hl + off..hl + off + data.len()].copy_from_slice(data);
        crate::msg::count_copy(data.len());
        cx.free(m);
        if slot.missing == 0 {
            let mut whole = self.slots.swap_remove(idx).msg;
            cx.set(&mut whole, field, 0);
            cx.deliver_up(whole);
        }
    }

    /// Seed 004 §6: oversize messages fail the send filter and take the layered path.
    fn send_filter(&self, seg: &mut Segment) {
        seg.extend([
            Op::PushSize,
            Op::PushConst(self.static_cap() as u64),
            Op::Gt,
            Op::Abort(crate::filter::MISS_FRAGMENT),
        ]);
    }

    /// A fragment (frag bit set) takes the layered path to reassembly.
    fn deliver_filter(&self, seg: &mut Segment) {
        if let Some(h) = self.field {
            seg.extend([Op::PushField(h), Op::Abort(crate::filter::MISS_FRAGMENT)]);
        }
    }

    fn predict_send(&self, p: &mut Predict<'_>) {
        if let Some(h) = self.field {
            p.set(h, 0);
        }
    }

    fn predict_deliver(&self, p: &mut Predict<'_>) {
        if let Some(h) = self.field {
            p.set(h, 0);
        }
    }
}
