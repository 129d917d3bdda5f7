//! `Msg`, a byte buffer with headroom and tailroom, and the `Pool` it comes from.
//!
//! Headers are pushed and popped in the headroom without copying the body, and
//! buffers are recycled through a pool so that the steady state allocates nothing per message
//! (the counting-allocator test in `tests/alloc.rs` proves it). A `Msg` owns its storage; it
//! goes back to its pool with [`Pool::free`] (a connection's `recycle`). A message that is
//! dropped instead is simply deallocated: nothing leaks, the pool just allocates anew.
//!
//! # Counting copies
//!
//! [`copied_bytes`] counts, per thread, every byte of message content copied from one buffer
//! into another: whatever [`Msg::extend_from_slice`] appends (and so [`Msg::from_slice`],
//! [`Msg::set`], [`Pool::alloc_copy`], a layer's retransmission copy, a fragment cut from its
//! message), a message cloned, a message moved to grow its headroom, fragments copied into a
//! reassembly, and the copies the session endpoint makes outside `Msg` (a datagram copied
//! into a driver's `Vec`, a message handed back as a `Vec`). Headers and trailers a layer
//! *writes* (a header area put in front with [`Msg::prepend`], [`Msg::prepend_array`] or
//! [`Msg::push_front`]; a fixed-size trailer such as an authentication tag appended with
//! [`Msg::append_array`]) are not copies of a message and are not counted; neither is what a
//! receive writes into [`Msg::tail_room`]. One addition to a thread-local counter per copy:
//! cheap enough to stay on in every build, so a test or a benchmark can count the copies of
//! the path it drives (`tests/copies.rs`).

use std::cell::Cell;
use std::fmt;
use std::ops::Range;

thread_local! {
    /// Bytes of message content this thread has copied ([`copied_bytes`]).
    static COPIED: Cell<u64> = const { Cell::new(0) };
}

/// Bytes of message content copied on this thread so far (see the [module docs](self) for
/// what counts): take it before and after the calls whose copies you want counted.
pub fn copied_bytes() -> u64 {
    COPIED.with(Cell::get)
}

/// Count `n` bytes of message content copied.
#[inline(always)]
pub(crate) fn count_copy(n: usize) {
    COPIED.with(|c| c.set(c.get().wrapping_add(n as u64)));
}

/// Headroom reserved in front of a fresh message: room for every header of a stack without
/// moving the body.
pub const HEADROOM: usize = 128;

/// Room after the headroom of a fresh pooled buffer: a whole datagram as a driver receives
/// it (2 KiB, above any MTU-sized datagram), so receiving into a pooled buffer never grows
/// it.
pub const FRESH_TAILROOM: usize = 2048;

/// A message: `buf[start..end]` is its content. `buf.len()` is how far the buffer has ever
/// been written (the headroom, and every byte appended since it was allocated); the capacity
/// beyond it is untouched until the message grows into it. So a recycled buffer appends with a
/// bounds check and a copy, and a fresh or growing one appends without zeroing first what is
/// about to be overwritten.
#[derive(Default)]
pub struct Msg {
    buf: Vec<u8>,
    start: usize,
    end: usize,
    /// The content is a retransmission copy that still carries the body transforms of the
    /// layers below the one holding it, trailers cut off ([`Msg::transformed`]).
    transformed: bool,
}

impl Clone for Msg {
    /// A copy of the whole buffer (counted: [`copied_bytes`]).
    fn clone(&self) -> Msg {
        count_copy(self.buf.len());
        Msg {
            buf: self.buf.clone(),
            start: self.start,
            end: self.end,
            transformed: self.transformed,
        }
    }
}

impl AsRef<[u8]> for Msg {
    /// The content ([`data`](Msg::data)).
    fn as_ref(&self) -> &[u8] {
        self.data()
    }
}

impl fmt::Debug for Msg {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Msg")
            .field("len", &self.len())
            .field("headroom", &self.start)
            .finish()
    }
}

impl Msg {
    /// An empty message with `headroom` bytes in front (allocates; prefer [`Pool::alloc`]).
    pub fn new(headroom: usize) -> Msg {
        Msg {
            buf: vec![0; headroom],
            start: headroom,
            end: headroom,
            transformed: false,
        }
    }

    /// A message holding a copy of `data` behind `headroom` free bytes.
    pub fn from_slice(headroom: usize, data: &[u8]) -> Msg {
        let mut m = Msg::new(headroom);
        m.extend_from_slice(data);
        m
    }

    /// A message over a buffer written elsewhere (a receive into a plain `Vec`): its content
    /// is `buf[content]` (clamped to the buffer), what lies before it is headroom. Nothing is
    /// copied; [`into_parts`](Self::into_parts) is the way back.
    pub fn from_parts(buf: Vec<u8>, content: Range<usize>) -> Msg {
        let end = content.end.min(buf.len());
        let start = content.start.min(end);
        Msg {
            buf,
            start,
            end,
            transformed: false,
        }
    }

    /// The buffer behind the message and where its content lies in it, for a driver that
    /// receives into plain buffers (`phyllo_udp::udp::RecvBufs`) and gives them back as
    /// messages with [`from_parts`](Self::from_parts). Nothing is copied.
    pub fn into_parts(self) -> (Vec<u8>, Range<usize>) {
        (self.buf, self.start..self.end)
    }

    /// Whether this is a retransmission copy the accelerator kept as the datagram left: the
    /// body transforms of the layers below its holder (sealing) are still on its body, their
    /// trailers cut off, and are taken back only if the copy is sent down again
    /// ([`Layer::resends_copy_only`](crate::Layer::resends_copy_only)). Carried over by
    /// [`Cx::copy`](crate::Cx::copy) and `clone`; a message cleared or taken from a pool
    /// starts without it.
    #[inline(always)]
    pub(crate) fn transformed(&self) -> bool {
        self.transformed
    }

    /// Set or clear the mark [`transformed`](Self::transformed) reads.
    #[inline(always)]
    pub(crate) fn set_transformed(&mut self, on: bool) {
        self.transformed = on;
    }

    /// The content.
    #[inline]
    pub fn data(&self) -> &[u8] {
        &self.buf[self.start..self.end]
    }

    /// The content, mutable.
    #[inline]
    pub fn data_mut(&mut self) -> &mut [u8] {
        &mut self.buf[self.start..self.end]
    }

    /// Length of the content.
    #[inline]
    pub fn len(&self) -> usize {
        self.end - self.start
    }

    /// Whether the content is empty.
    #[inline]
    pub fn is_empty(&self) -> bool {
        self.start == self.end
    }

    /// Free bytes in front of the content.
    #[inline]
    pub fn headroom(&self) -> usize {
        self.start
    }

    /// Prepend `n` zeroed bytes and return them. Uses the headroom; only if it is too small is
    /// the content moved (once) to make room.
    #[inline]
    pub fn push_front(&mut self, n: usize) -> &mut [u8] {
        let s = self.reserve_front(n);
        s.fill(0);
        s
    }

    /// Prepend a copy of `bytes` (like [`push_front`](Self::push_front) without zeroing first).
    #[inline]
    pub fn prepend(&mut self, bytes: &[u8]) {
        copy_bytes(self.reserve_front(bytes.len()), bytes);
    }

    /// Prepend a copy of an array: a fixed-size move instead of a call to `memcpy` (the
    /// accelerator's preambles).
    #[inline]
    pub fn prepend_array<const N: usize>(&mut self, bytes: &[u8; N]) {
        // `reserve_front` returns exactly N bytes.
        if let Some(d) = self.reserve_front(N).first_chunk_mut::<N>() {
            *d = *bytes;
        }
    }

    /// Move the start back by `n` bytes (growing the headroom if it is too small) and return
    /// them, unwritten.
    #[inline(always)]
    fn reserve_front(&mut self, n: usize) -> &mut [u8] {
        if n > self.start {
            self.grow_front(n);
        }
        self.start -= n;
        &mut self.buf[self.start..self.start + n]
    }

    #[cold]
    fn grow_front(&mut self, n: usize) {
        // The content moves: a copy.
        count_copy(self.len());
        let grow = (n - self.start).max(HEADROOM);
        self.buf.splice(0..0, std::iter::repeat_n(0, grow));
        self.start += grow;
        self.end += grow;
    }

    /// Remove `n` bytes from the front; `false` (and nothing removed) if the message is shorter.
    #[inline]
    pub fn pop_front(&mut self, n: usize) -> bool {
        if n > self.len() {
            return false;
        }
        self.start += n;
        true
    }

    /// Append bytes at the end (uses the tailroom; grows the buffer when it is too small).
    /// A copy, counted ([`copied_bytes`]).
    #[inline]
    pub fn extend_from_slice(&mut self, data: &[u8]) {
        count_copy(data.len());
        self.append(data);
    }

    /// Append a fixed-size trailer a layer computed (an authentication tag, a length): like
    /// [`extend_from_slice`](Self::extend_from_slice), but a field written rather than
    /// message content copied, so not counted — the counterpart of
    /// [`prepend_array`](Self::prepend_array).
    #[inline]
    pub fn append_array<const N: usize>(&mut self, bytes: &[u8; N]) {
        self.append(bytes);
    }

    /// Append `data` (uses the tailroom; grows the buffer when it is too small).
    #[inline(always)]
    fn append(&mut self, data: &[u8]) {
        let end = self.end + data.len();
        if end <= self.buf.len() {
            copy_bytes(&mut self.buf[self.end..end], data);
            self.end = end;
        } else {
            self.append_beyond(data);
        }
    }

    /// Append `data` where it runs past what the buffer has written so far: the written part
    /// is overwritten, the rest appended to the `Vec` (which grows by its own policy) without
    /// being zeroed first.
    #[cold]
    fn append_beyond(&mut self, data: &[u8]) {
        let (over, rest) = data.split_at(self.buf.len() - self.end);
        self.buf[self.end..].copy_from_slice(over);
        self.buf.extend_from_slice(rest);
        self.end = self.buf.len();
    }

    /// Make room for at least `n` more bytes after the content without writing them, so that
    /// appends up to that much neither move the buffer nor zero it first.
    pub fn reserve(&mut self, n: usize) {
        self.buf
            .reserve((self.end + n).saturating_sub(self.buf.len()));
    }

    /// Append `n` zeroed bytes and return them.
    pub fn push_back(&mut self, n: usize) -> &mut [u8] {
        let from = self.end;
        self.end += n;
        if self.end > self.buf.len() {
            self.buf.resize(self.end, 0);
        }
        let s = &mut self.buf[from..self.end];
        s.fill(0);
        s
    }

    /// At least `n` writable bytes after the content (the buffer grows if needed), for a
    /// receive to write into; [`commit_tail`](Self::commit_tail) then adds what it wrote.
    /// All of the buffer's capacity is offered, zeroed the first time it is (a receive needs
    /// initialised memory to write into).
    pub fn tail_room(&mut self, n: usize) -> &mut [u8] {
        let want = (self.end + n).max(self.buf.capacity());
        if want > self.buf.len() {
            self.buf.resize(want, 0);
        }
        &mut self.buf[self.end..]
    }

    /// Add the first `n` bytes of the [`tail_room`](Self::tail_room) to the content (no more
    /// than the buffer holds).
    pub fn commit_tail(&mut self, n: usize) {
        self.end = (self.end + n).min(self.buf.len());
    }

    /// Remove `n` bytes from the end; `false` (and nothing removed) if the message is shorter.
    #[inline]
    pub fn pop_back(&mut self, n: usize) -> bool {
        if n > self.len() {
            return false;
        }
        self.end -= n;
        true
    }

    /// Keep only the first `len` bytes of the content.
    pub fn truncate(&mut self, len: usize) {
        if len < self.len() {
            self.end = self.start + len;
        }
    }

    /// Empty the message, leaving `headroom` free bytes in front.
    #[inline]
    pub fn clear(&mut self, headroom: usize) {
        if self.buf.len() < headroom {
            self.buf.resize(headroom, 0);
        }
        self.start = headroom;
        self.end = headroom;
        self.transformed = false;
    }

    /// Replace the content with `data`, leaving `headroom` free bytes in front.
    pub fn set(&mut self, headroom: usize, data: &[u8]) {
        self.clear(headroom);
        self.extend_from_slice(data);
    }

    /// Identifies the message's storage while it lives (its address): the accelerator
    /// recognises a datagram it lent to the link by it.
    #[inline]
    pub(crate) fn buffer_id(&self) -> usize {
        self.buf.as_ptr() as usize
    }

    /// Capacity of the underlying storage.
    pub fn capacity(&self) -> usize {
        self.buf.capacity()
    }
}

/// Copy `src` into `dst` (of the same length). Up to 32 bytes, two overlapping loads and
/// stores of the largest width that fits, inline; longer, `copy_from_slice`. Callgrind: the
/// call to `memcpy` for a 15-byte header or an 8-byte body cost ~25 instructions, and the
/// accelerator's critical path makes several such copies per message.
#[inline(always)]
pub(crate) fn copy_bytes(dst: &mut [u8], src: &[u8]) {
    /// Copy the first and the last `W` bytes (they overlap when `n < 2 * W`).
    #[inline(always)]
    fn ends<const W: usize>(dst: &mut [u8], src: &[u8]) {
        let n = src.len();
        let (head, tail): ([u8; W], [u8; W]) = match (
            src.first_chunk::<W>(),
            src.get(n.wrapping_sub(W)..)
                .and_then(|t| t.first_chunk::<W>()),
        ) {
            (Some(h), Some(t)) => (*h, *t),
            _ => return dst.copy_from_slice(src),
        };
        if let Some(d) = dst.first_chunk_mut::<W>() {
            *d = head;
        }
        if let Some(d) = dst.last_chunk_mut::<W>() {
            *d = tail;
        }
    }
    if dst.len() != src.len() {
        // The caller's mistake: panics in `copy_from_slice` as the standard copy would.
        return dst.copy_from_slice(src);
    }
    // Headers and small bodies first: one range test.
    match src.len() {
        8..=16 => ends::<8>(dst, src),
        17..=32 => ends::<16>(dst, src),
        4..=7 => ends::<4>(dst, src),
        0 => {}
        1..=3 => dst.iter_mut().zip(src).for_each(|(d, s)| *d = *s),
        _ => dst.copy_from_slice(src),
    }
}

/// A free list of message buffers.
///
/// Bounded: at most `max_free` buffers are kept; more are deallocated.
#[derive(Debug)]
pub struct Pool {
    free: Vec<Msg>,
    max_free: usize,
    /// Buffers handed out over the pool's lifetime that had to be freshly allocated.
    pub fresh: u64,
}

impl Default for Pool {
    fn default() -> Self {
        Pool::new(1024)
    }
}

impl Pool {
    /// A pool keeping at most `max_free` idle buffers.
    pub fn new(max_free: usize) -> Pool {
        Pool {
            free: Vec::new(),
            max_free,
            fresh: 0,
        }
    }

    /// An idle buffer, emptied with [`HEADROOM`] free bytes in front, if the pool holds one
    /// (never allocates): what a driver moves between pools to keep them balanced.
    #[inline]
    pub fn take(&mut self) -> Option<Msg> {
        let mut m = self.free.pop()?;
        m.clear(HEADROOM);
        Some(m)
    }

    /// An empty message with [`HEADROOM`] free bytes in front.
    #[inline]
    pub fn alloc(&mut self) -> Msg {
        match self.free.pop() {
            Some(mut m) => {
                m.clear(HEADROOM);
                m
            }
            None => self.alloc_fresh(),
        }
    }

    /// A newly allocated buffer (out of line: the steady state recycles).
    #[cold]
    #[inline(never)]
    fn alloc_fresh(&mut self) -> Msg {
        self.fresh += 1;
        // Room for a whole datagram is reserved, but only the headroom is written now.
        let mut buf = Vec::with_capacity(HEADROOM + FRESH_TAILROOM);
        buf.resize(HEADROOM, 0);
        Msg {
            buf,
            start: HEADROOM,
            end: HEADROOM,
            transformed: false,
        }
    }

    /// A message holding a copy of `data` behind [`HEADROOM`].
    #[inline]
    pub fn alloc_copy(&mut self, data: &[u8]) -> Msg {
        let mut m = self.alloc();
        m.extend_from_slice(data);
        m
    }

    /// Give a message's storage back.
    #[inline]
    pub fn free(&mut self, m: Msg) {
        if self.free.len() < self.max_free {
            self.free.push(m);
        }
    }

    /// Free every idle buffer.
    pub fn trim(&mut self) {
        self.free = Vec::new();
    }

    /// Idle buffers held.
    pub fn idle(&self) -> usize {
        self.free.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn push_and_pop_headers_without_touching_the_body() {
        let mut pool = Pool::new(4);
        let mut m = pool.alloc_copy(b"body");
        m.push_front(3).copy_from_slice(b"hdr");
        assert_eq!(m.data(), b"hdrbody");
        assert!(m.pop_front(3));
        assert_eq!(m.data(), b"body");
        assert!(!m.pop_front(5));
        m.push_back(2).copy_from_slice(b"!!");
        assert_eq!(m.data(), b"body!!");
        assert!(m.pop_back(2));
        assert_eq!(m.data(), b"body");
    }

    #[test]
    fn push_front_beyond_headroom_moves_once() {
        let mut m = Msg::from_slice(2, b"xy");
        m.push_front(10).copy_from_slice(b"0123456789");
        assert_eq!(m.data(), b"0123456789xy");
        assert!(m.headroom() >= HEADROOM - 8);
    }

    #[test]
    fn copy_bytes_copies_every_length() {
        let src: Vec<u8> = (0..80u8).map(|b| b.wrapping_mul(37) ^ 0x5a).collect();
        for n in 0..=src.len() {
            let mut dst = vec![0xeeu8; n];
            copy_bytes(&mut dst, &src[..n]);
            assert_eq!(dst, &src[..n], "{n} bytes");
        }
    }

    #[test]
    fn appending_past_the_buffer_grows_it() {
        let mut m = Msg::new(4);
        let data: Vec<u8> = (0..5000u32).map(|i| i as u8).collect();
        for chunk in data.chunks(700) {
            m.extend_from_slice(chunk);
        }
        m.push_back(3);
        assert_eq!(&m.data()[..5000], &data[..]);
        assert_eq!(&m.data()[5000..], &[0, 0, 0]);
        m.truncate(10);
        m.extend_from_slice(b"xy");
        assert_eq!(&m.data()[10..], b"xy");
    }

    #[test]
    fn a_receive_writes_into_the_tail_room() {
        let mut m = Msg::from_slice(8, b"ab");
        let room = m.tail_room(4000);
        let offered = room.len();
        assert!(offered >= 4000);
        room[..3].copy_from_slice(b"cde");
        m.commit_tail(3);
        assert_eq!(m.data(), b"abcde");
        m.commit_tail(usize::MAX / 2);
        assert_eq!(m.len(), 2 + offered, "never past the room offered");
    }

    #[test]
    fn a_fresh_buffer_fills_past_what_it_has_written() {
        let mut pool = Pool::new(2);
        let mut m = pool.alloc();
        m.extend_from_slice(&[7; 1000]);
        m.extend_from_slice(&[8; 5000]);
        assert_eq!(m.len(), 6000);
        assert!(m.data()[..1000].iter().all(|&b| b == 7));
        assert!(m.data()[1000..].iter().all(|&b| b == 8));
        m.truncate(500);
        m.extend_from_slice(&[9; 6000]);
        assert_eq!(m.len(), 6500);
        assert!(m.data()[500..].iter().all(|&b| b == 9));
        assert_eq!(m.push_back(4), &[0; 4]);
        pool.free(m);
        let mut again = pool.alloc();
        again.extend_from_slice(&[1; 3]);
        assert_eq!(again.data(), &[1; 3]);
    }

    #[test]
    fn copies_are_counted_and_written_fields_are_not() {
        let before = copied_bytes();
        let mut m = Msg::from_slice(HEADROOM, &[1; 100]);
        m.prepend_array(&[2; 8]);
        m.prepend(&[3; 4]);
        m.append_array(&[4; 16]);
        assert_eq!(copied_bytes() - before, 100, "only the content copied in");
        let c = m.clone();
        assert_eq!(copied_bytes() - before, 100 + m.buf.len() as u64);
        let (buf, range) = c.into_parts();
        let again = Msg::from_parts(buf, range);
        assert_eq!(again.data(), m.data());
        assert_eq!(Msg::from_parts(vec![0; 4], 2..9).data(), &[0, 0]);
    }

    #[test]
    fn take_never_allocates() {
        let mut pool = Pool::new(2);
        assert!(pool.take().is_none());
        let m = pool.alloc_copy(b"x");
        pool.free(m);
        let m = pool.take().unwrap();
        assert!(m.is_empty());
        assert_eq!(m.headroom(), HEADROOM);
        assert_eq!(pool.fresh, 1);
    }

    #[test]
    fn pool_recycles() {
        let mut pool = Pool::new(2);
        let a = pool.alloc_copy(&[1; 100]);
        pool.free(a);
        let b = pool.alloc();
        assert!(b.is_empty());
        assert_eq!(pool.fresh, 1);
    }
}
