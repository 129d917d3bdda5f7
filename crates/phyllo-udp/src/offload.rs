//! Segmentation offload: many datagrams in one message to the kernel and one trip through its
//! stack (Linux `UDP_SEGMENT`, generic segmentation offload, and `UDP_GRO`, generic receive
//! offload).
//!
//! Sending: a [`TxQueue`] holds datagrams back to back in one buffer, grouped into *runs* —
//! consecutive datagrams to one destination, all of one length except the last, which may be
//! shorter (the kernel's rule for a segmented send). [`UdpLink::send_queue`] gives each run
//! to the kernel as one message with a `UDP_SEGMENT` control message naming the segment size,
//! up to [`MAX_BATCH`](crate::udp::MAX_BATCH) runs per `sendmmsg`; the kernel cuts the run
//! into datagrams as late as it can (on loopback, a receiver with GRO on takes the run whole).
//! Datagrams that already lie in buffers of their own (a protocol's sealed datagrams) need not
//! be copied into a queue: [`UdpLink::send_outgoing`] sends an [`Outgoing`] list the same way,
//! each run as one message whose iovecs are the datagrams themselves — the kernel concatenates
//! them and cuts the whole at the segment size, so only the run's shape matters, not where its
//! datagrams lie.
//!
//! Receiving: with [`UdpLink::set_gro`] the kernel may hand over several datagrams of one
//! flow in one buffer, with a `UDP_GRO` control message naming their size;
//! [`RecvBatch::datagrams`](crate::udp::RecvBatch::datagrams) cuts them apart again, and a
//! [`RecvBufs`](crate::udp::RecvBufs) offers buffers of the segment size so that each lands
//! in a buffer of its own.
//!
//! Where the kernel cannot segment (no `UDP_SEGMENT` before Linux 4.18; `EIO` from a device
//! without checksum offload), the link sends every datagram of a run as its own message and
//! stays that way; where it has no `UDP_GRO` (before 5.0), `set_gro` says so and receives
//! are unchanged. What travels is the same either way: offload changes only how many times
//! the kernel is entered.
//!
//! [`UdpLink::send_queue`]: crate::udp::UdpLink::send_queue
//! [`UdpLink::send_outgoing`]: crate::udp::UdpLink::send_outgoing
//! [`UdpLink::set_gro`]: crate::udp::UdpLink::set_gro

use std::net::SocketAddr;

/// The largest UDP payload over IPv4 (65 535 − 8 bytes UDP header − 20 bytes IP header): also
/// the most one segmented send may carry.
pub const MAX_UDP_PAYLOAD: usize = 65_507;

/// The most datagrams one segmented send may carry (the kernel's `UDP_MAX_SEGMENTS`, 64 up
/// to Linux 6.x's 128; the smaller is taken so every kernel with `UDP_SEGMENT` accepts it).
pub const MAX_SEGMENTS: usize = 64;

/// `UDP_SEGMENT` and `UDP_GRO` (`linux/udp.h`; the `libc` crate names them only for some C
/// libraries).
pub(crate) const UDP_SEGMENT: libc::c_int = 103;
pub(crate) const UDP_GRO: libc::c_int = 104;

/// Datagrams the caller owns, each in a buffer of its own with its destination, in the order
/// they go: what [`UdpLink::send_outgoing`](crate::udp::UdpLink::send_outgoing) sends as they
/// lie, grouped into runs like a [`TxQueue`]'s.
pub trait Outgoing {
    /// How many.
    fn len(&self) -> usize;

    /// Datagram `i` (below [`len`](Self::len)): its destination and bytes.
    fn get(&self, i: usize) -> (SocketAddr, &[u8]);

    /// Whether there are none.
    fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

impl<T: AsRef<[u8]>> Outgoing for [(SocketAddr, T)] {
    fn len(&self) -> usize {
        <[(SocketAddr, T)]>::len(self)
    }

    fn get(&self, i: usize) -> (SocketAddr, &[u8]) {
        (self[i].0, self[i].1.as_ref())
    }
}

impl<T: AsRef<[u8]>> Outgoing for Vec<(SocketAddr, T)> {
    fn len(&self) -> usize {
        self.as_slice().len()
    }

    fn get(&self, i: usize) -> (SocketAddr, &[u8]) {
        (self[i].0, self[i].1.as_ref())
    }
}

/// Consecutive datagrams to one destination, all `segment` bytes long except the last:
/// `buf[start..end]` of the queue.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Run {
    pub(crate) to: SocketAddr,
    pub(crate) start: usize,
    pub(crate) end: usize,
    /// The length of every datagram but the last (0 for a run of one empty datagram).
    pub(crate) segment: usize,
}

impl Run {
    /// How many datagrams the run holds.
    pub(crate) fn count(&self) -> usize {
        match self.segment {
            0 => 1,
            s => (self.end - self.start).div_ceil(s),
        }
    }

    /// Whether one more datagram of `len` bytes to `to` may join the run: the same
    /// destination, no longer than the segment, the last datagram so far a full one, and the
    /// run within the kernel's limits.
    fn takes(&self, to: SocketAddr, len: usize) -> bool {
        let bytes = self.end - self.start;
        self.segment > 0
            && self.to == to
            && len > 0
            && len <= self.segment
            && bytes.is_multiple_of(self.segment)
            && self.count() < MAX_SEGMENTS
            && bytes + len <= MAX_UDP_PAYLOAD
    }
}

/// Datagrams waiting to be sent, back to back in one buffer and grouped into runs for
/// segmented sends. Filled with [`push`](Self::push) or [`push_with`](Self::push_with) (which
/// lets a protocol write its datagram straight into the queue), emptied by
/// [`UdpLink::send_queue`](crate::udp::UdpLink::send_queue). Keeps its buffers: the steady
/// state allocates nothing.
#[derive(Debug, Default)]
pub struct TxQueue {
    pub(crate) buf: Vec<u8>,
    pub(crate) runs: Vec<Run>,
    /// The first run not yet sent.
    pub(crate) head: usize,
    /// Datagrams of `runs[head]` already sent (when they had to go one by one).
    pub(crate) head_sent: usize,
    datagrams: usize,
}

impl TxQueue {
    /// An empty queue.
    pub fn new() -> TxQueue {
        TxQueue::default()
    }

    /// Queue a copy of `data` for `to`.
    pub fn push(&mut self, to: SocketAddr, data: &[u8]) {
        self.push_with(|b| {
            b.extend_from_slice(data);
            Some(to)
        });
    }

    /// Let `write` append one datagram to the queue's buffer and say where it goes; `None`
    /// (and whatever it appended is taken back) when it had nothing to send. Returns whether a
    /// datagram was queued.
    pub fn push_with(&mut self, write: impl FnOnce(&mut Vec<u8>) -> Option<SocketAddr>) -> bool {
        let start = self.buf.len();
        let Some(to) = write(&mut self.buf) else {
            self.buf.truncate(start);
            return false;
        };
        let len = self.buf.len() - start;
        self.datagrams += 1;
        let unsent = self.runs.len() > self.head;
        match self.runs.last_mut() {
            Some(r) if unsent && r.takes(to, len) => r.end += len,
            _ => self.runs.push(Run {
                to,
                start,
                end: start + len,
                segment: len,
            }),
        }
        true
    }

    /// Datagrams queued and not yet sent.
    pub fn len(&self) -> usize {
        self.datagrams
    }

    /// Whether nothing is waiting.
    pub fn is_empty(&self) -> bool {
        self.datagrams == 0
    }

    /// Bytes held in the buffer (sent runs included until the queue empties).
    pub fn bytes(&self) -> usize {
        self.buf.len()
    }

    /// Forget everything queued.
    pub fn clear(&mut self) {
        self.buf.clear();
        self.runs.clear();
        self.head = 0;
        self.head_sent = 0;
        self.datagrams = 0;
    }

    /// Mark `n` datagrams of the head run as gone (sent or refused); the queue empties (and
    /// its buffer is reused from the start) when the last run is.
    pub(crate) fn advance(&mut self, n: usize) {
        let Some(r) = self.runs.get(self.head) else {
            return;
        };
        let n = n.min(r.count() - self.head_sent);
        self.datagrams -= n;
        self.head_sent += n;
        if self.head_sent == r.count() {
            self.head += 1;
            self.head_sent = 0;
        }
        if self.head == self.runs.len() {
            self.clear();
        }
    }

    /// Where datagram `i` (counting from the run's first) of run `r` lies in the buffer.
    pub(crate) fn datagram(&self, r: &Run, i: usize) -> std::ops::Range<usize> {
        let start = (r.start + i * r.segment).min(r.end);
        start..(start + r.segment.max(1)).min(r.end)
    }
}

/// Cut a received buffer into its datagrams: pieces of `segment` bytes (the last may be
/// shorter); the whole buffer when `segment` is 0 (the kernel coalesced nothing). A
/// `truncated` buffer keeps only its whole segments: a partial one would pass for a shorter
/// datagram.
pub(crate) fn segments(buf: &[u8], segment: usize, truncated: bool) -> Segments<'_> {
    let buf = match (segment, truncated) {
        (0, _) | (_, false) => buf,
        (s, true) => &buf[..buf.len() / s * s],
    };
    Segments {
        rest: Some(buf),
        segment,
    }
}

/// The datagrams of one received buffer ([`segments`]).
pub(crate) struct Segments<'a> {
    rest: Option<&'a [u8]>,
    segment: usize,
}

impl<'a> Iterator for Segments<'a> {
    type Item = &'a [u8];

    fn next(&mut self) -> Option<&'a [u8]> {
        let rest = self.rest.take()?;
        if self.segment == 0 || rest.len() <= self.segment {
            // One datagram (possibly empty) is the whole remainder; an empty remainder after
            // whole segments is no datagram.
            return (self.segment == 0 || !rest.is_empty()).then_some(rest);
        }
        let (d, tail) = rest.split_at(self.segment);
        self.rest = Some(tail);
        Some(d)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn addr(port: u16) -> SocketAddr {
        SocketAddr::from(([127, 0, 0, 1], port))
    }

    #[test]
    fn runs_group_equal_datagrams_and_end_at_a_short_one() {
        let mut q = TxQueue::new();
        for len in [100, 100, 100, 40, 100, 100] {
            q.push(addr(1), &vec![len as u8; len]);
        }
        q.push(addr(2), &[9; 100]);
        let shape: Vec<(usize, usize)> = q.runs.iter().map(|r| (r.segment, r.count())).collect();
        assert_eq!(shape, vec![(100, 4), (100, 2), (100, 1)]);
        assert_eq!(q.len(), 7);
        assert_eq!(&q.buf[q.datagram(&q.runs[0], 3)], &[40; 40][..]);
        // A longer datagram starts a run of its own.
        q.push(addr(2), &[1; 200]);
        assert_eq!(q.runs.len(), 4);
    }

    #[test]
    fn runs_respect_the_kernels_limits() {
        let mut q = TxQueue::new();
        for _ in 0..(MAX_SEGMENTS + 1) {
            q.push(addr(1), &[0; 10]);
        }
        assert_eq!(q.runs[0].count(), MAX_SEGMENTS);
        let mut q = TxQueue::new();
        for _ in 0..60 {
            q.push(addr(1), &[0; 1400]);
        }
        assert!(q.runs.iter().all(|r| r.end - r.start <= MAX_UDP_PAYLOAD));
        assert_eq!(q.runs.iter().map(Run::count).sum::<usize>(), 60);
    }

    #[test]
    fn empty_datagrams_travel_alone() {
        let mut q = TxQueue::new();
        q.push(addr(1), &[]);
        q.push(addr(1), &[]);
        q.push(addr(1), &[1]);
        assert_eq!(q.runs.len(), 3);
        assert_eq!(q.runs[0].count(), 1);
        assert_eq!(&q.buf[q.datagram(&q.runs[1], 0)], &[] as &[u8]);
        assert!(!q.push_with(|b| {
            b.push(7);
            None
        }));
        assert_eq!(q.bytes(), 1);
    }

    #[test]
    fn advancing_empties_and_reuses() {
        let mut q = TxQueue::new();
        for _ in 0..3 {
            q.push(addr(1), &[0; 10]);
        }
        q.push(addr(2), &[0; 10]);
        q.advance(2);
        assert_eq!(q.len(), 2);
        q.advance(5); // no more than the run holds
        assert_eq!(q.len(), 1);
        q.advance(1);
        assert!(q.is_empty());
        assert_eq!(q.bytes(), 0);
    }

    #[test]
    fn segments_cut_a_coalesced_buffer() {
        let buf: Vec<u8> = (0..25).collect();
        let cut: Vec<usize> = segments(&buf, 10, false).map(<[u8]>::len).collect();
        assert_eq!(cut, vec![10, 10, 5]);
        let cut: Vec<usize> = segments(&buf, 10, true).map(<[u8]>::len).collect();
        assert_eq!(cut, vec![10, 10]);
        assert_eq!(segments(&buf, 0, false).count(), 1);
        assert_eq!(segments(&[], 0, false).count(), 1);
        assert_eq!(segments(&buf[..20], 10, false).count(), 2);
    }
}
