//! Message packing (van Renesse, "Masking the Overhead of Protocol Layering" (seed 004 §3.4)): the
//! backlog of messages that wait while post-processing is pending or the send header is disabled,
//! sent as one packed datagram.
//!
//! A packed body is a sequence of (varint length, bytes); the header's `packed` bit says the
//! body is one. Beyond the paper, the messages may have any sizes, bounded by the MTU.

use crate::msg::{Msg, Pool};
use std::collections::VecDeque;

/// The bound of the backlog in bytes: 256 KiB, ~190 full datagrams, enough to keep a
/// streaming sender's link busy while post-processing runs, and few enough buffers for the
/// pool to recycle.
const MAX_BACKLOG: usize = 256 << 10;

/// A body waiting to be sent: packed (with the number of messages it carries) or single.
pub(crate) struct Waiting {
    /// The body (no header area yet).
    pub(crate) body: Msg,
    /// Whether `body` is packed.
    pub(crate) packed: bool,
    /// Application messages in it.
    pub(crate) msgs: u64,
}

/// The send backlog (seed 004 Table 3's `backlog`).
pub(crate) struct Backlog {
    waiting: VecDeque<Waiting>,
    bytes: usize,
    mtu: usize,
}

impl Backlog {
    /// An empty backlog packing bodies of at most `mtu` bytes.
    pub(crate) fn new(mtu: usize) -> Backlog {
        Backlog {
            waiting: VecDeque::new(),
            bytes: 0,
            mtu,
        }
    }

    /// Whether another message may join (the backlog is bounded in bytes).
    #[inline]
    pub(crate) fn can_accept(&self) -> bool {
        self.bytes < MAX_BACKLOG
    }

    /// Whether nothing waits.
    #[inline(always)]
    pub(crate) fn is_empty(&self) -> bool {
        self.waiting.is_empty()
    }

    /// Queue a message: packed with its neighbours when it fits a datagram (its buffer goes
    /// back to `pool`), else on its own.
    pub(crate) fn push(&mut self, msg: Msg, pool: &mut Pool) {
        if !self.packs(msg.len()) {
            self.push_single(msg);
            return;
        }
        self.pack(msg.data(), pool);
        pool.free(msg);
    }

    /// [`push`](Self::push) of bytes: packed straight from them (a message too large to pack
    /// gets a buffer of its own).
    pub(crate) fn push_bytes(&mut self, data: &[u8], pool: &mut Pool) {
        if self.packs(data.len()) {
            self.pack(data, pool);
        } else {
            self.push_single(pool.alloc_copy(data));
        }
    }

    /// Whether a message of `len` bytes fits a packed datagram.
    #[inline(always)]
    fn packs(&self, len: usize) -> bool {
        varint_len(len) + len <= self.mtu
    }

    fn push_single(&mut self, msg: Msg) {
        self.bytes += msg.len();
        self.waiting.push_back(Waiting {
            body: msg,
            packed: false,
            msgs: 1,
        });
    }

    /// Append `data` to the newest packed body, or to a new one if it does not fit.
    #[inline]
    fn pack(&mut self, data: &[u8], pool: &mut Pool) {
        let len = data.len();
        let need = varint_len(len) + len;
        self.bytes += need;
        match self.waiting.back_mut() {
            Some(w) if w.packed && w.body.len() + need <= self.mtu => {
                put_varint(&mut w.body, len);
                w.body.extend_from_slice(data);
                w.msgs += 1;
            }
            _ => {
                let mut body = pool.alloc();
                put_varint(&mut body, len);
                body.extend_from_slice(data);
                self.waiting.push_back(Waiting {
                    body,
                    packed: true,
                    msgs: 1,
                });
            }
        }
    }

    /// The oldest waiting body.
    pub(crate) fn pop(&mut self) -> Option<Waiting> {
        let w = self.waiting.pop_front()?;
        self.bytes = self.bytes.saturating_sub(w.body.len());
        Some(w)
    }
}

fn varint_len(v: usize) -> usize {
    match v {
        0..=0x7f => 1,
        0x80..=0x3fff => 2,
        0x4000..=0x1f_ffff => 3,
        _ => 4,
    }
}

/// Append `v` as a varint: a length field written, not content copied
/// ([`crate::msg::copied_bytes`]).
fn put_varint(m: &mut Msg, mut v: usize) {
    while v >= 0x80 {
        m.append_array(&[(v as u8 & 0x7f) | 0x80]);
        v >>= 7;
    }
    m.append_array(&[v as u8]);
}

/// Read a varint of at most four bytes; `None` if it runs off the end or is longer.
fn get_varint(b: &[u8]) -> Option<(usize, usize)> {
    let mut v = 0usize;
    for (i, &x) in b.iter().take(4).enumerate() {
        v |= ((x & 0x7f) as usize) << (7 * i);
        if x & 0x80 == 0 {
            return Some((v, i + 1));
        }
    }
    None
}

/// Split a packed body into its messages' byte ranges; `false` if the lengths lie.
pub fn unpack_ranges(body: &[u8], out: &mut Vec<(usize, usize)>) -> bool {
    out.clear();
    let mut at = 0;
    while at < body.len() {
        let Some((start, len)) = split(body, at) else {
            return false;
        };
        out.push((start, len));
        at = start + len;
    }
    !out.is_empty()
}

/// How many messages the packed `body` holds; `None` if its lengths lie. The messages
/// themselves are split off later, by [`split`], as the application takes them.
pub(crate) fn count(body: &[u8]) -> Option<usize> {
    let (mut at, mut n) = (0, 0);
    while at < body.len() {
        let (start, len) = split(body, at)?;
        at = start + len;
        n += 1;
    }
    (n > 0).then_some(n)
}

/// Where the packed message at offset `at` of `body` lies, as (start, length)
/// ([`crate::ready::Split`]).
pub(crate) fn split(body: &[u8], at: usize) -> Option<(usize, usize)> {
    let (len, n) = get_varint(body.get(at..)?)?;
    let start = at + n;
    (len <= body.len() - start).then_some((start, len))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unpacking_rejects_lying_lengths() {
        let mut r = Vec::new();
        assert!(unpack_ranges(&[3, b'a', b'b', b'c', 1, b'd'], &mut r));
        assert_eq!(r, vec![(1, 3), (5, 1)]);
        assert!(!unpack_ranges(&[4, b'a', b'b', b'c'], &mut r), "too long");
        assert!(
            !unpack_ranges(&[0x80, 0x80, 0x80, 0x80, 1], &mut r),
            "varint too long"
        );
        assert!(!unpack_ranges(&[0x81], &mut r), "varint runs off");
        assert!(!unpack_ranges(&[], &mut r), "empty");
        assert!(unpack_ranges(&[0], &mut r), "one empty message");
    }

    #[test]
    fn varints_roundtrip() {
        for v in [0usize, 1, 127, 128, 300, 16383, 16384, 1 << 20] {
            let mut m = Msg::new(0);
            put_varint(&mut m, v);
            assert_eq!(m.len(), varint_len(v));
            assert_eq!(get_varint(m.data()), Some((v, m.len())));
        }
    }

    #[test]
    fn backlog_packs_small_messages_and_keeps_large_ones_apart() {
        let mut pool = Pool::default();
        let mut b = Backlog::new(100);
        for n in [10, 20, 30, 200, 5] {
            let m = pool.alloc_copy(&vec![n as u8; n]);
            b.push(m, &mut pool);
        }
        let first = b.pop().expect("packed");
        assert!(first.packed && first.msgs == 3);
        let big = b.pop().expect("single");
        assert!(!big.packed && big.body.len() == 200);
        let last = b.pop().expect("packed");
        assert!(last.packed && last.msgs == 1);
        assert!(b.pop().is_none() && b.is_empty());
    }
}
