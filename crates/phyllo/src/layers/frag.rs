//! `frag`: fragmentation and bounded reassembly.
//!
//! Seed 004 §6 (Fragmentation/Reassembly): the frag layer keeps large messages off the fast
//! path with a one-bit protocol-specific field that is set if and only if the message is a
//! fragment, so the receiver's header prediction fails and reassembly takes the layered path.
//! A message whose body exceeds the fragment size is absorbed in pre-send and split in
//! post-send; each fragment's body starts with an 8-byte fragment header (message id, chunk
//! size, the fragment's index, the message's fragment count; big-endian 16-bit fields) that
//! only fragments carry, so ordinary messages pay one bit. Every fragment but the last carries
//! exactly the chunk size; the last one's length completes the message's (which is therefore
//! known when the last fragment arrives, and at most the count times the chunk size before).
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
use crate::fixed::decl::{declare, FieldDecl, FixedFields, Slots};
use crate::layer::{Cx, DropReason, Handoff, Hdr, InitCx, Layer, Packet, Predict, Verdict};
use crate::layout::FieldRegistry;
use crate::msg::Msg;
use crate::outline::cold;
use crate::plpmtu::{PathMtu, MAX_PLPMTU};

/// Bytes of the fragment header at the start of a fragment's body.
pub const FRAG_HEADER: usize = 8;
/// Reassemblies in progress at most.
pub const MAX_SLOTS: usize = 4;

/// A fragment header.
#[derive(Clone, Copy, Debug)]
struct Header {
    /// The message's number (wrapping; at most [`MAX_SLOTS`] are reassembled at once).
    id: u16,
    /// Body bytes of every fragment of the message but the last.
    chunk: usize,
    /// This fragment's place among the message's: its body starts at `index * chunk`.
    index: usize,
    /// The message's fragments (at least 2).
    count: usize,
}

#[derive(Debug)]
struct Slot {
    id: u16,
    /// Body bytes per fragment (all but the last).
    chunk: usize,
    count: usize,
    /// Header area of the first fragment, then room for `count * chunk` body bytes.
    msg: Msg,
    /// The message's body bytes, once its last fragment came.
    total: Option<usize>,
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

    /// Body bytes per fragment of a message of `total` bytes: at most what the header's 16
    /// bits name, and large enough that the count fits its 16 bits (only a message of over
    /// 3.6 MiB, which the connection's largest does not allow by default, on a path of under
    /// 120 bytes needs fragments larger than the path).
    fn chunk(&self, total: usize) -> usize {
        let max = usize::from(u16::MAX);
        (self.cap() - FRAG_HEADER).min(max).max(total.div_ceil(max))
    }

    /// Reassemblies in progress.
    pub fn in_progress(&self) -> usize {
        self.slots.len()
    }

    fn parse(body: &[u8]) -> Option<Header> {
        let h = body.get(..FRAG_HEADER)?;
        let field = |i: usize| usize::from(u16::from_be_bytes([h[i], h[i + 1]]));
        Some(Header {
            id: u16::from_be_bytes([h[0], h[1]]),
            chunk: field(2),
            index: field(4),
            count: field(6),
        })
    }

    /// Whether a fragment is well-formed: a chunk size the sender could have used, a place
    /// among at least two fragments, the chunk's length (the last: 1 to the chunk's), and a
    /// message no longer than the connection's largest.
    fn check(&self, body: &[u8]) -> Result<Header, DropReason> {
        let h = Self::parse(body).ok_or(DropReason::Truncated)?;
        let len = body.len() - FRAG_HEADER;
        let last = h.index + 1 == h.count;
        if h.chunk < 64 - FRAG_HEADER
            || h.count < 2
            || h.index >= h.count
            || (!last && len != h.chunk)
            || (last && (len == 0 || len > h.chunk))
        {
            return Err(DropReason::Malformed);
        }
        // The message holds more than `count - 1` chunks.
        if (h.count - 1) * h.chunk >= self.max_message
            || (last && (h.count - 1) * h.chunk + len > self.max_message)
        {
            return Err(DropReason::TooLarge);
        }
        Ok(h)
    }
}

/// The fragment bit, as [`Layer::init`] registers it.
const FRAG_FIELDS: [FieldDecl; 1] = [FieldDecl::new(FieldClass::ProtoSpecific, "frag", 1)];

impl<const O: bool> FixedFields for Frag<O> {
    const FIELDS: &'static [FieldDecl] = &FRAG_FIELDS;

    #[inline(always)]
    fn pre_send_fixed<A: Slots>(&self, pkt: &mut Packet<'_>, at: A) -> Verdict {
        self.pre_send_with(pkt, at)
    }

    #[inline(always)]
    fn pre_deliver_fixed<A: Slots>(&self, pkt: &mut Packet<'_>, at: A) -> Verdict {
        self.pre_deliver_with(pkt, at)
    }
}

impl<const O: bool> Frag<O> {
    /// [`Layer::pre_send`] with the fragment bit through `f`.
    #[inline(always)]
    fn pre_send_with<A: Slots>(&self, pkt: &mut Packet<'_>, f: A) -> Verdict {
        if f.body_len(pkt) > self.cap() {
            cold::<O>();
            Verdict::Absorb
        } else {
            Verdict::Continue
        }
    }

    /// [`Layer::pre_deliver`] with the fragment bit through `f`.
    #[inline(always)]
    fn pre_deliver_with<A: Slots>(&self, pkt: &mut Packet<'_>, f: A) -> Verdict {
        if f.get::<0>(pkt) == 0 {
            return Verdict::Continue;
        }
        cold::<O>();
        match self.check(pkt.body()) {
            Ok(_) => Verdict::Absorb,
            Err(r) => Verdict::Drop(r),
        }
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

    /// A large message's fragment body on the current path.
    fn fragment_payload(&self) -> Option<usize> {
        self.field?;
        Some(self.chunk(0))
    }

    fn init(&mut self, fields: &mut FieldRegistry, cx: &InitCx) {
        let [field] = declare(fields, &FRAG_FIELDS);
        self.field = Some(field);
        self.max_message = cx.max_message;
        self.path = Some(cx.path.clone());
    }

    fn pre_send(&self, pkt: &mut Packet<'_>) -> Verdict {
        match &self.field {
            Some(h) => self.pre_send_with(pkt, std::array::from_ref(h)),
            None => self.pre_send_with(pkt, &[] as &[FieldHandle; 0]),
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
        // One size for the whole message.
        let size = self.chunk(total);
        let count = total.div_ceil(size);
        for (k, chunk) in body.chunks(size).enumerate() {
            let mut f = cx.alloc();
            // Headers written (the header area, then the fragment header), then the chunk
            // copied: only the chunk counts as a copy ([`crate::msg::copied_bytes`]).
            f.prepend(&m.data()[..hl]);
            let mut fh = [0u8; FRAG_HEADER];
            fh[..2].copy_from_slice(&id.to_be_bytes());
            fh[2..4].copy_from_slice(&(size as u16).to_be_bytes());
            fh[4..6].copy_from_slice(&(k as u16).to_be_bytes());
            fh[6..].copy_from_slice(&(count as u16).to_be_bytes());
            f.append_array(&fh);
            f.extend_from_slice(chunk);
            cx.set(&mut f, field, 1);
            cx.send_down(f);
        }
        cx.free(m);
    }

    fn pre_deliver(&self, pkt: &mut Packet<'_>) -> Verdict {
        match &self.field {
            Some(h) => self.pre_deliver_with(pkt, std::array::from_ref(h)),
            None => Verdict::Continue,
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
            index,
            count,
        }) = self.check(&m.data()[hl..])
        else {
            cx.free(m);
            return;
        };
        self.clock += 1;
        let idx = match self.slots.iter().position(|s| s.id == id) {
            Some(i) if self.slots[i].count == count && self.slots[i].chunk == chunk => i,
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
                // The header area written in front, room reserved for whole chunks; the
                // body's bytes are appended as the fragments come in order, and only a
                // fragment ahead of a gap zero-fills the gap to land at its place (so a
                // message that arrives in order is never written twice).
                buf.prepend(&m.data()[..hl]);
                buf.reserve(count * chunk);
                self.slots.push(Slot {
                    id,
                    chunk,
                    count,
                    msg: buf,
                    total: None,
                    got: vec![false; count],
                    missing: count,
                    age: self.clock,
                });
                self.slots.len() - 1
            }
        };
        let slot = &mut self.slots[idx];
        slot.age = self.clock;
        if slot.got[index] {
            cx.count_drop(DropReason::Duplicate);
            cx.free(m);
            return;
        }
        slot.got[index] = true;
        slot.missing -= 1;
        let data = &m.data()[hl + FRAG_HEADER..];
        let off = index * chunk;
        if index + 1 == count {
            slot.total = Some(off + data.len());
        }
        let held = slot.msg.len() - hl;
        if off == held {
            slot.msg.extend_from_slice(data);
        } else {
            if off + data.len() > held {
                slot.msg.push_back(off + data.len() - held);
            }
            slot.msg.data_mut()[hl + off..hl + off + data.len()].copy_from_slice(data);
            crate::msg::count_copy(data.len());
        }
        cx.free(m);
        if slot.missing == 0 {
            let s = self.slots.swap_remove(idx);
            let mut whole = s.msg;
            // Every fragment came, the last one too.
            whole.truncate(hl + s.total.unwrap_or(count * chunk));
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

#[cfg(test)]
mod tests {
    use super::*;

    /// A fragment's body: its header, then `len` bytes.
    fn fragment(id: u16, chunk: u16, index: u16, count: u16, len: usize) -> Vec<u8> {
        let mut b = Vec::new();
        for v in [id, chunk, index, count] {
            b.extend_from_slice(&v.to_be_bytes());
        }
        b.resize(FRAG_HEADER + len, 0x5a);
        b
    }

    #[test]
    fn a_fragment_header_is_checked_whole_before_anything_is_kept() {
        let f = Frag::new(1400);
        // A message of 2.5 chunks: two whole ones and a half.
        assert!(f.check(&fragment(7, 1000, 0, 3, 1000)).is_ok());
        assert!(f.check(&fragment(7, 1000, 1, 3, 1000)).is_ok());
        assert!(f.check(&fragment(7, 1000, 2, 3, 500)).is_ok());
        assert!(f.check(&fragment(7, 1000, 2, 3, 1000)).is_ok());
        let malformed = [
            fragment(7, 1000, 1, 3, 999),  // not the last: a whole chunk
            fragment(7, 1000, 2, 3, 0),    // the last: not empty
            fragment(7, 1000, 2, 3, 1001), // the last: at most a chunk
            fragment(7, 1000, 3, 3, 1000), // past the count
            fragment(7, 1000, 0, 1, 1000), // one fragment is no fragmented message
            fragment(7, 1000, 0, 0, 1000), // no fragments
            fragment(7, 40, 0, 3, 40),     // a chunk smaller than any sender uses
        ];
        for b in malformed {
            assert_eq!(
                f.check(&b).err(),
                Some(DropReason::Malformed),
                "{:?}",
                &b[..8]
            );
        }
        assert_eq!(
            f.check(&[0u8; FRAG_HEADER - 1]).err(),
            Some(DropReason::Truncated)
        );
        // Larger than the connection's largest message (1 MiB): refused at the first
        // fragment when the chunks before the last already reach it, at the last otherwise.
        assert_eq!(
            f.check(&fragment(7, 1024, 0, 1025, 1024)).err(),
            Some(DropReason::TooLarge)
        );
        assert!(f.check(&fragment(7, 1024, 1023, 1024, 1024)).is_ok());
        assert_eq!(
            f.check(&fragment(7, 1024, 1024, 1025, 1)).err(),
            Some(DropReason::TooLarge)
        );
    }
}
