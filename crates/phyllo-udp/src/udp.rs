//! The UDP link: real sockets, batched with `sendmmsg`/`recvmmsg`.
//!
//! A [`UdpLink`] is one UDP socket bound to a local address and, usually,
//! connected to a peer. Datagrams move in batches: [`UdpLink::send_batch`] is one `sendmmsg`
//! call and every receive is one `recvmmsg` call into a [`RecvBatch`], which owns its buffers,
//! lengths and source addresses, allocated once, so the steady state allocates nothing.
//!
//! Receive modes, chosen per call:
//! - [`UdpLink::try_recv`]: non-blocking (`MSG_DONTWAIT`); `Ok(0)` when nothing is queued.
//! - [`UdpLink::recv_busy`]: spins on non-blocking receives until at least one datagram arrives
//!   or a deadline passes — the lowest-latency mode, at the price of a core.
//! - [`UdpLink::recv_timeout`]: blocks (`MSG_WAITFORONE`) until at least one datagram arrives
//!   or the timeout expires.
//! - [`UdpLink::recv_batch`]: blocking or non-blocking according to
//!   [`UdpLink::set_nonblocking`].
//!
//! The socket's file descriptor itself is never put in `O_NONBLOCK` mode: non-blocking
//! behaviour comes from `MSG_DONTWAIT` per call, so one socket serves every mode (and can be
//! registered with epoll by a driver that only uses [`UdpLink::try_recv`]).
//!
//! Where the kernel lacks `sendmmsg`/`recvmmsg` (`ENOSYS`, e.g. under some seccomp sandboxes),
//! the link falls back to loops of `send`/`sendto` and `recvfrom` with the same semantics; the
//! fallback can also be forced with [`UdpLink::set_batching`] to measure what batching is worth.

use std::io;
use std::mem::MaybeUninit;
use std::net::{Ipv4Addr, SocketAddr};
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, RawFd};
use std::time::{Duration, Instant};

use socket2::{Domain, Protocol, SockAddr, Socket, Type};

use crate::offload::{self, Outgoing, TxQueue};
use crate::steer;
use crate::sys::{self, MAX_IOVS};

pub use crate::sys::MAX_BATCH;

use crate::offload::MAX_SEGMENTS;
pub use crate::offload::MAX_UDP_PAYLOAD;

/// A receive-buffer capacity that holds any datagram of a 1500-byte Ethernet MTU.
pub const DEFAULT_DATAGRAM_CAPACITY: usize = 2048;

/// Counters of one link: what it moved and how many system calls it took.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct LinkStats {
    /// Send system calls made (`sendmmsg`, or one per datagram in the fallback).
    pub send_calls: u64,
    /// Receive system calls made, including those that found nothing.
    pub recv_calls: u64,
    /// Datagrams handed to the kernel.
    pub datagrams_sent: u64,
    /// Datagrams received.
    pub datagrams_received: u64,
    /// Received datagrams longer than their buffer (the excess was discarded by the kernel).
    pub truncated: u64,
    /// Non-blocking receives that found nothing (busy-poll spins).
    pub empty_polls: u64,
    /// Runs of datagrams sent as one segmented message (`UDP_SEGMENT`).
    pub segmented_sends: u64,
    /// Received buffers that held more than one datagram (`UDP_GRO`).
    pub coalesced_receives: u64,
    /// Datagrams the kernel refused to send (other than for a full buffer); dropped.
    pub send_errors: u64,
    /// Datagrams the kernel dropped because the receive buffer was full, as of the last
    /// datagram received (`SO_RXQ_OVFL`, with [`UdpLink::set_drop_counting`]; a drop is
    /// reported with the next datagram that arrives).
    pub kernel_drops: u64,
}

/// Buffers for one batched receive: `slots` buffers of `capacity` bytes each, with the length,
/// truncation flag and source address of every datagram received into them.
///
/// Allocated once by [`RecvBatch::new`]; every receive reuses it. The datagrams are read where
/// they lie and stay the batch's; [`RecvBufs`] hands them over in buffers of their own.
pub struct RecvBatch {
    buf: Vec<u8>,
    capacity: usize,
    meta: sys::Meta,
}

impl std::fmt::Debug for RecvBatch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RecvBatch")
            .field("slots", &self.slots())
            .field("capacity", &self.capacity)
            .field("filled", &self.meta.filled)
            .finish()
    }
}

impl RecvBatch {
    /// Buffers for up to `slots` datagrams (clamped to `1..=MAX_BATCH`) of up to `capacity`
    /// bytes each (clamped to `1..=MAX_UDP_PAYLOAD`). Longer datagrams are truncated and
    /// flagged ([`RecvBatch::is_truncated`]).
    pub fn new(slots: usize, capacity: usize) -> Self {
        let slots = slots.clamp(1, MAX_BATCH);
        let capacity = capacity.clamp(1, MAX_UDP_PAYLOAD);
        RecvBatch {
            buf: vec![0; slots * capacity],
            capacity,
            meta: sys::Meta::new(slots),
        }
    }

    /// How many datagrams one receive can take.
    pub fn slots(&self) -> usize {
        self.meta.lens.len()
    }

    /// The capacity of each buffer, in bytes.
    pub fn capacity(&self) -> usize {
        self.capacity
    }

    /// How many datagrams the last receive delivered.
    pub fn len(&self) -> usize {
        self.meta.filled
    }

    /// True when the last receive delivered nothing.
    pub fn is_empty(&self) -> bool {
        self.meta.filled == 0
    }

    /// Forget the datagrams of the last receive.
    pub fn clear(&mut self) {
        self.meta.filled = 0;
    }

    /// The payload of datagram `i` of the last receive (truncated to the capacity).
    pub fn get(&self, i: usize) -> Option<&[u8]> {
        (i < self.meta.filled).then(|| {
            let start = i * self.capacity;
            &self.buf[start..start + self.meta.lens[i].min(self.capacity)]
        })
    }

    /// Where datagram `i` of the last receive came from.
    pub fn source(&self, i: usize) -> Option<SocketAddr> {
        self.meta.source(i)
    }

    /// True when datagram `i` was longer than the buffer and lost its tail.
    pub fn is_truncated(&self, i: usize) -> bool {
        i < self.meta.filled && self.meta.truncated[i]
    }

    /// The payloads of the last receive, in arrival order (one per slot: see
    /// [`datagrams`](Self::datagrams) for a link with GRO on).
    pub fn iter(&self) -> impl Iterator<Item = &[u8]> + '_ {
        (0..self.meta.filled).filter_map(move |i| self.get(i))
    }

    /// The datagrams of the last receive with their sources, in arrival order: a slot into
    /// which the kernel coalesced several datagrams ([`UdpLink::set_gro`]) is cut apart.
    pub fn datagrams(&self) -> impl Iterator<Item = (&[u8], Option<SocketAddr>)> + '_ {
        (0..self.meta.filled).flat_map(move |i| {
            let from = self.source(i);
            let d = self.get(i).unwrap_or_default();
            offload::segments(d, self.meta.segments[i], self.meta.truncated[i])
                .map(move |d| (d, from))
        })
    }
}

impl sys::Target for RecvBatch {
    fn meta(&mut self) -> &mut sys::Meta {
        &mut self.meta
    }

    fn meta_ref(&self) -> &sys::Meta {
        &self.meta
    }

    fn layout(&mut self, max: usize, iovs: &mut sys::Iovs, spans: &mut sys::Spans) -> usize {
        let n = self.slots().min(max).min(MAX_BATCH);
        for (i, chunk) in self.buf.chunks_exact_mut(self.capacity).take(n).enumerate() {
            iovs[i].write(libc::iovec {
                iov_base: chunk.as_mut_ptr().cast(),
                iov_len: chunk.len(),
            });
            spans[i] = (i, 1);
        }
        n
    }

    fn count(&self, i: usize) -> usize {
        let d = self.get(i).unwrap_or_default();
        offload::segments(d, self.meta.segments[i], self.meta.truncated[i]).count()
    }

    fn received(&mut self, _: usize) {}
}

/// Where a receive puts what it takes: a [`RecvBatch`] (datagrams read where they lie, in the
/// batch's own buffers) or a [`RecvBufs`] (each datagram in a buffer the caller takes away).
/// Sealed: the link's receive calls take either.
pub trait RecvTarget: sys::Target {}

impl RecvTarget for RecvBatch {}
impl RecvTarget for RecvBufs {}

/// Room after each slot's buffers of a [`RecvBufs`] for what does not fit them (the most a
/// UDP receive may bring).
const SPILL: usize = 1 << 16;

/// The fewest slots a [`RecvBufs`] offers a receive ([`RecvBufs`]'s `offer`).
const MIN_OFFER: usize = 2;

/// The smallest segment size of a coalesced run that a [`RecvBufs`] offers buffers of: runs of
/// smaller datagrams (acknowledgements) are copied out of the buffers they landed in, which
/// costs little, rather than making every larger datagram land across buffers.
const MIN_SCATTER: usize = 512;

/// Receive buffers whose datagrams the caller takes away, each in a buffer of its own — a
/// `Vec<u8>` written from `headroom` bytes in, so a protocol can put headers in front and
/// process the datagram where it arrived (phyllo's `Msg::from_parts`).
///
/// Each of up to `slots` messages of one `recvmmsg` gets `per_slot` buffers of `size` bytes,
/// then a spill area of the batch's own. A receive offers at most twice as many slots as the
/// last one brought messages (at least two): laying a slot out costs something per buffer,
/// so a request-response exchange, one datagram a receive, lays out two slots rather than
/// all of them, and a burst doubles the offer each receive back up to `slots`.
///
/// A datagram that fits one buffer lands there whole; with GRO on ([`UdpLink::set_gro`]) the
/// kernel writes a coalesced run across consecutive buffers, so when `size` is the run's
/// segment size each of its datagrams lands in a buffer of its own. `size` follows what
/// arrives: the segment size of the last coalesced run of datagrams of at least 512 bytes, or,
/// without one, the longest datagram seen; `per_slot` grows to the longest run (at most
/// [`MAX_SEGMENTS`]). A datagram that landed across buffers or shares one (a size the batch had
/// not learnt yet, a run longer than its buffers, a run of small datagrams) is copied into a
/// buffer of the caller's ([`joined`](Self::joined) counts them).
///
/// The cycle: [`refill`](Self::refill) the buffers taken with buffers of the caller's (a
/// pool's), receive ([`UdpLink::try_recv`] and the other receive calls), then
/// [`pop`](Self::pop) every datagram. A buffer is zeroed only where it is shorter than what
/// the kernel may write (a pooled buffer keeps its length); the steady state allocates
/// nothing when the caller refills from a pool.
///
/// What it costs: nothing is copied in user space, but the kernel copies a coalesced run into
/// as many buffers as it has datagrams, at a few tens of nanoseconds per buffer more than into
/// one (measured on loopback, 1 410-byte datagrams in runs of six: about what the copy out of
/// one buffer into a buffer per datagram cost). Up to seven buffers a message keep the iovecs
/// at the kernel's `UIO_FASTIOV` (eight with the spill area); more make it allocate an iovec
/// array per message.
pub struct RecvBufs {
    bufs: Vec<Vec<u8>>,
    slots: usize,
    max_slots: usize,
    /// Slots offered at the next receive: twice what the last receive brought, at least
    /// [`MIN_OFFER`] (laying a slot out costs each of its buffers; a request-response
    /// exchange brings one datagram a receive, a burst doubles it back up).
    offer: usize,
    per_slot: usize,
    /// `per_slot` for the next receive (a longer run was seen).
    want_per_slot: usize,
    headroom: usize,
    /// Bytes offered per buffer at the next receive.
    size: usize,
    /// Bytes offered per buffer at the last receive.
    rx_size: usize,
    spill: Vec<u8>,
    meta: sys::Meta,
    /// The next datagram to pop.
    next: Cursor,
    /// Buffers taken (or never given) since the last refill, by index.
    taken: Vec<usize>,
    joined: u64,
}

impl std::fmt::Debug for RecvBufs {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RecvBufs")
            .field("slots", &self.slots)
            .field("per_slot", &self.per_slot)
            .field("size", &self.size)
            .field("filled", &self.meta.filled)
            .finish()
    }
}

/// Where [`RecvBufs::pop`] is: the message (slot) of the last receive, and what it holds.
#[derive(Clone, Copy, Debug, Default)]
struct Cursor {
    slot: usize,
    /// The next datagram of the slot, and how many it holds.
    index: usize,
    count: usize,
    /// The slot's bytes and segment size (0: one datagram).
    len: usize,
    seg: usize,
    from: Option<SocketAddr>,
}

/// A datagram taken out of a [`RecvBufs`]: the buffer it lies in, where in it, and where it
/// came from.
#[derive(Debug)]
pub struct Received {
    /// The buffer (what lies before `data` is headroom).
    pub buf: Vec<u8>,
    /// Where the datagram lies in `buf`.
    pub data: std::ops::Range<usize>,
    /// Its source (`None` if the kernel gave none).
    pub from: Option<SocketAddr>,
}

impl RecvBufs {
    /// Up to `slots` messages per receive (clamped to `1..=MAX_BATCH`), each first into
    /// `per_slot` buffers (clamped to `1..=MAX_SEGMENTS`), every datagram written `headroom`
    /// bytes into its buffer. Buffers offer [`DEFAULT_DATAGRAM_CAPACITY`] bytes until the
    /// traffic says otherwise.
    pub fn new(slots: usize, per_slot: usize, headroom: usize) -> RecvBufs {
        let max_slots = slots.clamp(1, MAX_BATCH);
        let per_slot = per_slot.clamp(1, offload::MAX_SEGMENTS);
        let mut b = RecvBufs {
            bufs: Vec::new(),
            slots: 0,
            max_slots,
            offer: MIN_OFFER,
            per_slot,
            want_per_slot: per_slot,
            headroom,
            size: DEFAULT_DATAGRAM_CAPACITY,
            rx_size: DEFAULT_DATAGRAM_CAPACITY,
            spill: Vec::new(),
            meta: sys::Meta::new(max_slots),
            next: Cursor::default(),
            taken: Vec::new(),
            joined: 0,
        };
        b.relayout();
        b
    }

    /// Lay the slots out for `want_per_slot` buffers each, as many slots as the iovecs allow.
    fn relayout(&mut self) {
        self.per_slot = self.want_per_slot;
        self.slots = (MAX_IOVS / (self.per_slot + 1)).clamp(1, self.max_slots);
        let had = self.bufs.len();
        self.bufs.resize_with(self.slots * self.per_slot, Vec::new);
        self.taken.extend(had..self.bufs.len());
        self.taken.retain(|&i| i < self.bufs.len());
        if self.spill.len() != self.slots * SPILL {
            // Zeroed by the allocator: pages never spilled into stay untouched (and out of
            // the resident set).
            self.spill = vec![0; self.slots * SPILL];
        }
    }

    /// Put a buffer from `supply` where a datagram's buffer was taken (or none was yet), so
    /// the next receive writes into the caller's buffers instead of allocating. A buffer
    /// smaller than the datagrams grows when it is used. Call it after popping the last
    /// receive's datagrams (a receive forgets those not popped).
    pub fn refill(&mut self, mut supply: impl FnMut() -> Vec<u8>) {
        // Slots are laid out anew only once nothing waits to be popped from them.
        if self.want_per_slot != self.per_slot && self.next.slot >= self.meta.filled {
            self.relayout();
        }
        for i in self.taken.drain(..) {
            if let Some(b) = self.bufs.get_mut(i).filter(|b| b.capacity() == 0) {
                *b = supply();
            }
        }
    }

    /// The next datagram of the last receive, in its own buffer, which is the caller's now;
    /// `None` when all are taken. A datagram that does not lie alone in one buffer is copied
    /// into one from `supply`. Pop them all before the next receive, which forgets those left.
    pub fn pop(&mut self, supply: impl FnOnce() -> Vec<u8>) -> Option<Received> {
        while self.next.index >= self.next.count {
            if self.next.slot + 1 >= self.meta.filled {
                self.next.slot = self.meta.filled;
                return None;
            }
            self.next = self.cursor(self.next.slot + 1);
        }
        let c = &mut self.next;
        let j = c.index;
        c.index += 1;
        let d = match c.seg {
            0 => 0..c.len,
            g => j * g..((j + 1) * g).min(c.len),
        };
        let (i, seg, from) = (c.slot, c.seg, c.from);
        Some(self.take(i, d, seg, from, supply))
    }

    /// The cursor at the first datagram of message `i` of the last receive.
    fn cursor(&self, i: usize) -> Cursor {
        use sys::Target;
        if i >= self.meta.filled {
            return Cursor {
                slot: i,
                ..Cursor::default()
            };
        }
        Cursor {
            slot: i,
            index: 0,
            count: self.count(i),
            len: self.meta.lens[i],
            seg: self.meta.segments[i],
            from: self.meta.source(i),
        }
    }

    /// Take the datagram at bytes `d` of slot `i`'s (coalesced with segment size `seg`, or
    /// alone when it is 0): the buffer it lies in, or, when it lies across several, a copy of
    /// its pieces.
    fn take(
        &mut self,
        i: usize,
        d: std::ops::Range<usize>,
        seg: usize,
        from: Option<SocketAddr>,
        supply: impl FnOnce() -> Vec<u8>,
    ) -> Received {
        let (size, h, per) = (self.rx_size, self.headroom, self.per_slot);
        let k = d.start / size;
        // One datagram per buffer: alone, or a run cut exactly at the buffers' boundaries.
        if (seg == 0 || seg == size) && k < per && d.end <= (k + 1) * size {
            self.taken.push(i * per + k);
            let buf = std::mem::take(&mut self.bufs[i * per + k]);
            let at = h + d.start - k * size;
            return Received {
                buf,
                data: at..at + d.len(),
                from,
            };
        }
        self.joined += 1;
        let mut buf = supply();
        buf.truncate(h);
        buf.resize(h, 0);
        let mut at = d.start;
        while at < d.end {
            let k = at / size;
            if k < per {
                let end = d.end.min((k + 1) * size);
                let off = h + at - k * size;
                buf.extend_from_slice(&self.bufs[i * per + k][off..off + end - at]);
                at = end;
            } else {
                let base = i * SPILL + at - per * size;
                buf.extend_from_slice(&self.spill[base..base + d.end - at]);
                at = d.end;
            }
        }
        Received {
            buf,
            data: h..h + d.len(),
            from,
        }
    }

    /// Datagrams so far that had to be put together from pieces (copied) because they landed
    /// across buffers.
    pub fn joined(&self) -> u64 {
        self.joined
    }

    /// Bytes each buffer offers the next receive.
    pub fn buffer_size(&self) -> usize {
        self.size
    }
}

impl sys::Target for RecvBufs {
    fn meta(&mut self) -> &mut sys::Meta {
        &mut self.meta
    }

    fn meta_ref(&self) -> &sys::Meta {
        &self.meta
    }

    fn layout(&mut self, max: usize, iovs: &mut sys::Iovs, spans: &mut sys::Spans) -> usize {
        if self.want_per_slot != self.per_slot {
            self.relayout();
        }
        let (h, size, per) = (self.headroom, self.size, self.per_slot);
        self.rx_size = size;
        let n = self.slots.min(self.offer).min(max).min(MAX_BATCH);
        let mut at = 0;
        for (i, (bufs, spill)) in self
            .bufs
            .chunks_exact_mut(per)
            .zip(self.spill.chunks_exact_mut(SPILL))
            .take(n)
            .enumerate()
        {
            spans[i] = (at, per + 1);
            for b in bufs {
                // `size` bytes from `h` on for the kernel to write. A pooled buffer is
                // usually that long already (its length is kept when it holds a shorter
                // message), so only a buffer that is new or shorter is zeroed, and only
                // its missing tail.
                b.resize(h + size, 0);
                iovs[at].write(libc::iovec {
                    iov_base: b[h..].as_mut_ptr().cast(),
                    iov_len: size,
                });
                at += 1;
            }
            iovs[at].write(libc::iovec {
                iov_base: spill.as_mut_ptr().cast(),
                iov_len: spill.len(),
            });
            at += 1;
        }
        n
    }

    fn count(&self, i: usize) -> usize {
        match self.meta.segments[i] {
            0 => 1,
            g if self.meta.truncated[i] => self.meta.lens[i] / g,
            g => self.meta.lens[i].div_ceil(g),
        }
    }

    fn received(&mut self, n: usize) {
        self.offer = (2 * n).max(MIN_OFFER);
        let (mut run_seg, mut longest, mut longest_run) = (None, 0, 0);
        for i in 0..n {
            let len = self.meta.lens[i];
            match self.meta.segments[i] {
                0 => longest = longest.max(len),
                g => {
                    run_seg = Some(run_seg.map_or(g, |r: usize| r.max(g)));
                    if g >= MIN_SCATTER {
                        longest_run = longest_run.max(self.count(i));
                    }
                }
            }
        }
        // The next receive offers buffers of the size that arrived: a run's segment size (so
        // its datagrams land one per buffer), else room for the longest datagram.
        match run_seg {
            Some(g) if g >= MIN_SCATTER => self.size = g,
            _ if longest > self.size => self.size = longest.min(MAX_UDP_PAYLOAD),
            _ => {}
        }
        if longest_run > self.per_slot {
            self.want_per_slot = longest_run.min(offload::MAX_SEGMENTS);
        }
        self.next = self.cursor(0);
    }
}

/// What one `send_pieces` came to ([`UdpLink::sent_pieces`]).
enum Sent {
    /// The kernel took this many pieces.
    Pieces(usize),
    /// The socket buffer is full (non-blocking).
    Blocked,
    /// The method changed (no `sendmmsg`, no segmentation): send again.
    Retry,
}

/// A UDP socket that sends and receives datagrams in batches.
#[derive(Debug)]
pub struct UdpLink {
    socket: Socket,
    local: SocketAddr,
    peer: Option<SocketAddr>,
    nonblocking: bool,
    batching: bool,
    /// Send runs as segmented messages while the kernel takes them.
    gso: bool,
    /// Whether the kernel coalesces received datagrams (`UDP_GRO` on).
    gro: bool,
    /// Whether the kernel reports its receive-buffer drops (`SO_RXQ_OVFL` on).
    count_drops: bool,
    stats: LinkStats,
    /// The messages of one `send_queue` call (kept to reuse its allocation).
    pieces: Vec<sys::Piece>,
}

impl UdpLink {
    /// A link bound to `local` (port 0 picks a free port), not connected, in blocking mode.
    pub fn bind(local: SocketAddr) -> io::Result<Self> {
        Self::bind_with(local, false)
    }

    /// Like [`bind`](Self::bind), with `SO_REUSEPORT` set, so that [`dedicated`](Self::dedicated)
    /// sockets may share its address. (Only sockets of the same user can join the port.)
    pub fn bind_shared(local: SocketAddr) -> io::Result<Self> {
        Self::bind_with(local, true)
    }

    /// Steer the datagrams that reach this link's `SO_REUSEPORT` group by their source:
    /// `workers` workers of `per_worker` listening sockets each, bound into the group in
    /// order (worker 0's `per_worker` sockets first, then worker 1's, …), so that group index
    /// `per_worker * w + i` is worker `w`'s socket `i`. Each datagram goes to the socket of
    /// index [`steering_index`](crate::steer::steering_index) of its source: all datagrams
    /// from one address reach one worker, whatever their port, and within it the port spreads
    /// sources over its sockets ([`crate::steer`] has the program and why).
    ///
    /// Call it once every listening socket is bound (on any member of the group: the program
    /// is the group's). Sockets that join later ([`dedicated`](Self::dedicated) ones, which
    /// the kernel serves by their connection rather than by the program) come after the
    /// listening ones and leave their indices as they are. A link made without
    /// [`bind_shared`](Self::bind_shared) has no group: the kernel says `EINVAL`; so does a
    /// `workers` or `per_worker` of 0, or a product past `u32`.
    pub fn steer_by_source(&self, workers: usize, per_worker: usize) -> io::Result<()> {
        let invalid = || io::Error::from(io::ErrorKind::InvalidInput);
        let w = u32::try_from(workers).map_err(|_| invalid())?;
        let p = u32::try_from(per_worker).map_err(|_| invalid())?;
        if w == 0 || p == 0 || w.checked_mul(p).is_none() {
            return Err(invalid());
        }
        sys::attach_reuseport_cbpf(self.socket.as_fd(), &steer::source_program(w, p))
    }

    /// A socket of its own for `peer`, on this (shared) link's address and connected to `peer`:
    /// the kernel hands `peer`'s datagrams to it rather than to this one, so a receive engine
    /// can serve it apart from whatever else floods this address. Fails unless this link was
    /// made with [`bind_shared`](Self::bind_shared).
    pub fn dedicated(&self, peer: SocketAddr) -> io::Result<UdpLink> {
        let mut d = Self::bind_with(self.local, true)?;
        d.connect(peer)?;
        Ok(d)
    }

    fn bind_with(local: SocketAddr, shared: bool) -> io::Result<Self> {
        let socket = Socket::new(Domain::for_address(local), Type::DGRAM, Some(Protocol::UDP))?;
        if shared {
            sys::set_socket_option(socket.as_fd(), libc::SO_REUSEPORT, 1)?;
        }
        socket.bind(&local.into())?;
        let local = socket
            .local_addr()?
            .as_socket()
            .ok_or_else(|| io::Error::other("bound socket has no IP address"))?;
        Ok(UdpLink {
            socket,
            local,
            peer: None,
            nonblocking: false,
            batching: true,
            gso: true,
            gro: false,
            count_drops: false,
            stats: LinkStats::default(),
            pieces: Vec::new(),
        })
    }

    /// Two links on `127.0.0.1`, each connected to the other.
    pub fn loopback_pair() -> io::Result<(UdpLink, UdpLink)> {
        let any = SocketAddr::from((Ipv4Addr::LOCALHOST, 0));
        let mut a = UdpLink::bind(any)?;
        let mut b = UdpLink::bind(any)?;
        a.connect(b.local_addr())?;
        b.connect(a.local_addr())?;
        Ok((a, b))
    }

    /// Connect to `peer`: [`UdpLink::send_batch`] goes there and only its datagrams are
    /// received.
    pub fn connect(&mut self, peer: SocketAddr) -> io::Result<()> {
        self.socket.connect(&peer.into())?;
        self.peer = Some(peer);
        Ok(())
    }

    /// The local address (with the port the kernel chose).
    pub fn local_addr(&self) -> SocketAddr {
        self.local
    }

    /// The connected peer, if any.
    pub fn peer_addr(&self) -> Option<SocketAddr> {
        self.peer
    }

    /// Ask for a receive buffer of `bytes` (`SO_RCVBUF`); returns the size the kernel granted
    /// (Linux doubles the request and caps it at `net.core.rmem_max`).
    pub fn set_recv_buffer_size(&self, bytes: usize) -> io::Result<usize> {
        self.socket.set_recv_buffer_size(bytes)?;
        self.socket.recv_buffer_size()
    }

    /// Ask for a send buffer of `bytes` (`SO_SNDBUF`); returns the size the kernel granted.
    pub fn set_send_buffer_size(&self, bytes: usize) -> io::Result<usize> {
        self.socket.set_send_buffer_size(bytes)?;
        self.socket.send_buffer_size()
    }

    /// In non-blocking mode [`UdpLink::send_batch`] and [`UdpLink::recv_batch`] return `Ok(0)`
    /// instead of waiting. The default is blocking.
    pub fn set_nonblocking(&mut self, nonblocking: bool) {
        self.nonblocking = nonblocking;
    }

    /// Whether the link is in non-blocking mode.
    pub fn is_nonblocking(&self) -> bool {
        self.nonblocking
    }

    /// Use `sendmmsg`/`recvmmsg` (the default) or per-datagram `sendto`/`recvfrom` loops.
    /// Batching is switched off automatically when the kernel answers `ENOSYS`.
    ///
    /// Receiving one datagram at a time cannot say where coalesced datagrams part, so turning
    /// batching off also turns GRO off.
    pub fn set_batching(&mut self, batching: bool) {
        self.batching = batching;
        if !batching && self.gro {
            let _ = self.set_gro(false);
        }
    }

    /// Let the kernel coalesce received datagrams of one flow into one buffer (`UDP_GRO`);
    /// [`RecvBatch::datagrams`] cuts them apart. Returns whether the kernel does it (Linux
    /// 5.0 and later, with batching on); receives are unchanged when it does not. Buffers of a
    /// [`RecvBatch`] should then hold 64 KiB, or coalesced datagrams are lost to truncation.
    pub fn set_gro(&mut self, on: bool) -> io::Result<bool> {
        let on = on && self.batching;
        match sys::set_udp_option(self.socket.as_fd(), offload::UDP_GRO, on as libc::c_int) {
            Ok(()) => self.gro = on,
            Err(e) if on && e.raw_os_error() == Some(libc::ENOPROTOOPT) => self.gro = false,
            Err(e) => return Err(e),
        }
        Ok(self.gro)
    }

    /// Whether received datagrams may arrive coalesced.
    pub fn is_gro(&self) -> bool {
        self.gro
    }

    /// Have the kernel report how many datagrams it dropped for a full receive buffer
    /// (`SO_RXQ_OVFL`): [`LinkStats::kernel_drops`]. This is where an engine that leaves input
    /// in the socket while inhibited sees its early drops. Needs batching (the count comes as a
    /// control message of `recvmmsg`).
    pub fn set_drop_counting(&mut self, on: bool) -> io::Result<()> {
        sys::set_socket_option(self.socket.as_fd(), sys::SO_RXQ_OVFL, on as libc::c_int)?;
        self.count_drops = on;
        Ok(())
    }

    /// Send runs of a [`TxQueue`] as segmented messages (the default, where the kernel can)
    /// or every datagram as its own message (to measure what segmentation is worth).
    pub fn set_gso(&mut self, on: bool) {
        self.gso = on;
    }

    /// Whether runs go out as segmented messages: false once switched off or once the kernel
    /// refused one.
    pub fn is_gso(&self) -> bool {
        self.gso
    }

    /// Whether batched system calls are in use.
    pub fn is_batching(&self) -> bool {
        self.batching
    }

    /// The link's counters.
    pub fn stats(&self) -> LinkStats {
        self.stats
    }

    /// Send up to [`MAX_BATCH`] datagrams to the connected peer with one `sendmmsg` call.
    ///
    /// Returns how many were sent, which may be fewer than given (more than `MAX_BATCH`, or a
    /// full socket buffer in non-blocking mode, where nothing sent is `Ok(0)`). Fails with
    /// `NotConnected`-like errors (`EDESTADDRREQ`) on an unconnected link.
    pub fn send_batch(&mut self, datagrams: &[&[u8]]) -> io::Result<usize> {
        self.send_inner(datagrams, None)
    }

    /// Like [`UdpLink::send_batch`], to an explicit destination (the link need not be
    /// connected).
    pub fn send_batch_to(&mut self, datagrams: &[&[u8]], to: SocketAddr) -> io::Result<usize> {
        let to = SockAddr::from(to);
        self.send_inner(datagrams, Some(&to))
    }

    fn send_inner(&mut self, datagrams: &[&[u8]], to: Option<&SockAddr>) -> io::Result<usize> {
        let datagrams = &datagrams[..datagrams.len().min(MAX_BATCH)];
        if datagrams.is_empty() {
            return Ok(0);
        }
        let flags = self.send_flags();
        let result = if self.batching {
            self.stats.send_calls += 1;
            match sys::send_mmsg(self.socket.as_fd(), datagrams, to, flags) {
                Err(e) if e.raw_os_error() == Some(libc::ENOSYS) => {
                    self.batching = false;
                    self.send_fallback(datagrams, to, flags)
                }
                r => r,
            }
        } else {
            self.send_fallback(datagrams, to, flags)
        };
        match result {
            Ok(n) => {
                self.stats.datagrams_sent += n as u64;
                Ok(n)
            }
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => Ok(0),
            Err(e) => Err(e),
        }
    }

    /// Flags of a send: don't wait in non-blocking mode.
    fn send_flags(&self) -> libc::c_int {
        if self.nonblocking {
            libc::MSG_DONTWAIT
        } else {
            0
        }
    }

    fn send_fallback(
        &mut self,
        datagrams: &[&[u8]],
        to: Option<&SockAddr>,
        flags: libc::c_int,
    ) -> io::Result<usize> {
        for (i, d) in datagrams.iter().enumerate() {
            self.stats.send_calls += 1;
            let r = match to {
                Some(to) => self.socket.send_to_with_flags(d, to, flags),
                None => self.socket.send_with_flags(d, flags),
            };
            if let Err(e) = r {
                return if i == 0 { Err(e) } else { Ok(i) };
            }
        }
        Ok(datagrams.len())
    }

    /// Send what `queue` holds: each run as one segmented message where the kernel can
    /// ([`offload`]), its datagrams one by one otherwise, up to [`MAX_BATCH`] messages per
    /// `sendmmsg`. Returns how many datagrams the kernel took; sent datagrams leave the queue.
    ///
    /// Blocking mode returns once the queue is empty; non-blocking mode also returns when the
    /// socket buffer is full, leaving the rest queued. A datagram the kernel refuses (no
    /// route, a refused port reported by ICMP, too long) leaves the queue too, is counted in
    /// [`LinkStats::send_errors`], and its error is returned: call again for the rest. A
    /// segmented message the kernel refuses switches segmentation off for good
    /// ([`is_gso`](Self::is_gso)) and is sent again one datagram at a time.
    pub fn send_queue(&mut self, queue: &mut TxQueue) -> io::Result<usize> {
        let flags = self.send_flags();
        let mut sent = 0;
        while !queue.is_empty() {
            self.gather(queue);
            self.stats.send_calls += 1;
            let buf = &queue.buf;
            let result = sys::send_pieces(
                self.socket.as_fd(),
                &self.pieces,
                |p, _| &buf[p.range.clone()],
                self.peer,
                flags,
                self.batching,
            );
            match self.sent_pieces(result) {
                Ok(Sent::Pieces(k)) => {
                    for p in self.pieces.iter().take(k) {
                        queue.advance(p.datagrams);
                        sent += p.datagrams;
                    }
                    if k == 0 {
                        return Ok(sent);
                    }
                }
                Ok(Sent::Blocked) => return Ok(sent),
                Ok(Sent::Retry) => {}
                Err((lost, e)) => {
                    queue.advance(lost);
                    return Err(e);
                }
            }
        }
        Ok(sent)
    }

    /// What the kernel said to a `send_pieces` of `self.pieces`, counted: the pieces it took,
    /// a full buffer (non-blocking), a change of method to try again with (no `sendmmsg`, no
    /// segmentation), or an error that drops the first piece's datagrams (how many, and the
    /// error).
    fn sent_pieces(&mut self, result: io::Result<usize>) -> Result<Sent, (usize, io::Error)> {
        match result {
            Ok(k) => {
                for p in self.pieces.iter().take(k) {
                    self.stats.datagrams_sent += p.datagrams as u64;
                    self.stats.segmented_sends += u64::from(p.segment > 0);
                }
                Ok(Sent::Pieces(k))
            }
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => Ok(Sent::Blocked),
            Err(e) if e.raw_os_error() == Some(libc::ENOSYS) && self.batching => {
                self.set_batching(false);
                Ok(Sent::Retry)
            }
            Err(_) if self.pieces.first().is_some_and(|p| p.segment > 0) => {
                self.gso = false;
                Ok(Sent::Retry)
            }
            Err(e) => {
                let lost = self.pieces.first().map_or(1, |p| p.datagrams);
                self.stats.send_errors += lost as u64;
                Err((lost, e))
            }
        }
    }

    /// Send the datagrams of `list` from the `*done`-th on, as they lie in the caller's
    /// buffers: consecutive datagrams to one destination, all of one length but a shorter
    /// last, go as one segmented message whose iovecs are the datagrams themselves (the
    /// kernel concatenates them and cuts the whole into segments; [`offload`]), up to
    /// [`MAX_BATCH`] messages per `sendmmsg` — what [`send_queue`](Self::send_queue) does for
    /// a [`TxQueue`], without copying the datagrams into one buffer first. `*done` moves past
    /// every datagram that left (taken by the kernel, or refused).
    ///
    /// Blocking mode returns once all are done; non-blocking mode also returns when the
    /// socket buffer is full. A datagram the kernel refuses (no route, a refused port, too
    /// long) is counted in [`LinkStats::send_errors`] and skipped, and its error returned:
    /// call again for the rest. A segmented message the kernel refuses switches segmentation
    /// off for good ([`is_gso`](Self::is_gso)) and is sent again one datagram at a time.
    pub fn send_outgoing(
        &mut self,
        list: &(impl Outgoing + ?Sized),
        done: &mut usize,
    ) -> io::Result<()> {
        if list.len() == *done + 1 {
            // One datagram (a request-response exchange's usual case): one `sendto`, without
            // gathering pieces, iovecs and message headers for it (callgrind: about 200
            // instructions a datagram).
            let (to, d) = list.get(*done);
            let sent = self.send_one(d, to);
            if !matches!(sent, Ok(false)) {
                *done += 1;
            }
            return sent.map(|_| ());
        }
        let flags = self.send_flags();
        while *done < list.len() {
            self.gather_outgoing(list, *done);
            self.stats.send_calls += 1;
            let result = sys::send_pieces(
                self.socket.as_fd(),
                &self.pieces,
                |p, k| list.get(p.range.start + k).1,
                self.peer,
                flags,
                self.batching,
            );
            match self.sent_pieces(result) {
                Ok(Sent::Pieces(k)) => {
                    *done += self
                        .pieces
                        .iter()
                        .take(k)
                        .map(|p| p.datagrams)
                        .sum::<usize>();
                    if k == 0 {
                        return Ok(());
                    }
                }
                Ok(Sent::Blocked) => return Ok(()),
                Ok(Sent::Retry) => {}
                Err((lost, e)) => {
                    *done += lost;
                    return Err(e);
                }
            }
        }
        Ok(())
    }

    /// Send the datagram `d` to `to` with one `sendto`: `Ok(true)` once it went, `Ok(false)`
    /// when the socket buffer is full (non-blocking mode; call again). A datagram the kernel
    /// refuses is counted in [`LinkStats::send_errors`] and its error returned: it is done
    /// with, not to be sent again.
    pub fn send_one(&mut self, d: &[u8], to: SocketAddr) -> io::Result<bool> {
        self.stats.send_calls += 1;
        match sys::send_to(self.socket.as_fd(), d, to, self.peer, self.send_flags()) {
            Ok(()) => {
                self.stats.datagrams_sent += 1;
                Ok(true)
            }
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => Ok(false),
            Err(e) => {
                self.stats.send_errors += 1;
                Err(e)
            }
        }
    }

    /// The messages of the next `sendmmsg` of `list` from datagram `from` on, into
    /// `self.pieces`: runs as a [`TxQueue`] makes them, one iovec per datagram.
    fn gather_outgoing(&mut self, list: &(impl Outgoing + ?Sized), from: usize) {
        self.pieces.clear();
        let (mut i, mut iovs) = (from, 0);
        while i < list.len() && self.pieces.len() < MAX_BATCH {
            let (to, first) = list.get(i);
            let segment = first.len();
            let (mut count, mut bytes) = (1, segment);
            while self.gso && segment > 0 && i + count < list.len() && count < MAX_SEGMENTS {
                let (next_to, next) = list.get(i + count);
                let len = next.len();
                if next_to != to || len == 0 || len > segment || bytes + len > MAX_UDP_PAYLOAD {
                    break;
                }
                count += 1;
                bytes += len;
                if len < segment {
                    // A shorter datagram ends the run.
                    break;
                }
            }
            if iovs + count > MAX_IOVS && !self.pieces.is_empty() {
                break;
            }
            // A run longer than the iovecs left (never: runs are at most MAX_SEGMENTS long)
            // is cut to fit.
            let count = count.min(MAX_IOVS);
            iovs += count;
            self.pieces.push(sys::Piece {
                range: i..i + count,
                iovs: count,
                segment: if count > 1 { segment } else { 0 },
                datagrams: count,
                to,
            });
            i += count;
        }
    }

    /// The messages of the next `sendmmsg`, from the head of `queue`, into `self.pieces`.
    fn gather(&mut self, queue: &TxQueue) {
        self.pieces.clear();
        let mut skip = queue.head_sent;
        for r in &queue.runs[queue.head..] {
            let count = r.count();
            if self.gso && skip == 0 && count > 1 {
                self.pieces.push(sys::Piece {
                    range: r.start..r.end,
                    iovs: 1,
                    segment: r.segment,
                    datagrams: count,
                    to: r.to,
                });
            } else {
                for i in skip..count {
                    if self.pieces.len() == MAX_BATCH {
                        break;
                    }
                    self.pieces.push(sys::Piece {
                        range: queue.datagram(r, i),
                        iovs: 1,
                        segment: 0,
                        datagrams: 1,
                        to: r.to,
                    });
                }
            }
            skip = 0;
            if self.pieces.len() == MAX_BATCH {
                break;
            }
        }
    }

    /// One receive into `batch`: blocking (until at least one datagram) or non-blocking
    /// (`Ok(0)` when nothing is queued) according to [`UdpLink::set_nonblocking`].
    pub fn recv_batch(&mut self, batch: &mut impl RecvTarget) -> io::Result<usize> {
        if self.nonblocking {
            self.try_recv(batch)
        } else {
            self.recv_timeout(batch, None)
        }
    }

    /// One non-blocking receive into `batch`: `Ok(0)` when nothing is queued.
    pub fn try_recv(&mut self, batch: &mut impl RecvTarget) -> io::Result<usize> {
        self.recv_inner(batch, libc::MSG_DONTWAIT, usize::MAX)
    }

    /// Like [`try_recv`](Self::try_recv), taking at most `max` datagrams (buffers) off the
    /// socket: what a receive callback with a quota uses, so the rest stays in the socket.
    pub fn try_recv_some(&mut self, batch: &mut impl RecvTarget, max: usize) -> io::Result<usize> {
        self.recv_inner(batch, libc::MSG_DONTWAIT, max.max(1))
    }

    /// One non-blocking receive of one datagram straight into `buf` (plain `recvfrom`): its
    /// full length (more than `buf.len()` if it was truncated, the excess discarded), or
    /// `Ok(None)` when nothing is queued. For a driver that receives into its own pooled
    /// buffers instead of copying out of a [`RecvBatch`]. With GRO on it is an error, as for
    /// [`try_recv_from_into`](Self::try_recv_from_into).
    pub fn try_recv_into(&mut self, buf: &mut [u8]) -> io::Result<Option<usize>> {
        Ok(self.try_recv_from_into(buf)?.map(|(len, _)| len))
    }

    /// Like [`try_recv_into`](Self::try_recv_into), with the datagram's source: the peer of
    /// a connected link, else the address the kernel gives (`None` only for an address
    /// family it should not give). The cheapest busy-poll spin (one `recvfrom`, no message
    /// header, no control messages), but only with GRO off ([`set_gro`](Self::set_gro)): a
    /// coalesced run would arrive as one datagram with nothing saying where it splits, so
    /// with GRO on this is an error (`InvalidInput`) and nothing is received.
    pub fn try_recv_from_into(
        &mut self,
        buf: &mut [u8],
    ) -> io::Result<Option<(usize, Option<SocketAddr>)>> {
        if self.gro {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "a receive into one buffer with GRO on could join datagrams",
            ));
        }
        self.stats.recv_calls += 1;
        // As in `recv_inner`: no source address from a connected link (and no storage for
        // one to clear on every busy-poll spin).
        let mut storage = None;
        let name = match self.peer {
            Some(_) => None,
            None => Some(storage.insert(sys::zeroed_storage())),
        };
        match sys::recv_from(self.socket.as_fd(), buf, name, libc::MSG_DONTWAIT) {
            Ok(len) => {
                self.stats.datagrams_received += 1;
                self.stats.truncated += (len > buf.len()) as u64;
                let from = self
                    .peer
                    .or_else(|| storage.as_ref().and_then(sys::storage_to_addr));
                Ok(Some((len, from)))
            }
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                self.stats.empty_polls += 1;
                Ok(None)
            }
            Err(e) => Err(e),
        }
    }

    /// Busy-poll: repeat non-blocking receives until at least one datagram arrives (returns
    /// how many) or `deadline` passes (returns `Ok(0)`).
    pub fn recv_busy(
        &mut self,
        batch: &mut impl RecvTarget,
        deadline: Instant,
    ) -> io::Result<usize> {
        // The first receive takes a whole batch; the spins after it lay out one buffer
        // (with the coalesced run it may hold): laying out every buffer of the batch before
        // each empty receive was a fifth of a busy-polling server's time (`perf` of
        // `phyllo serve --busy-poll` under pings), and a datagram arriving meanwhile waits.
        let mut max = usize::MAX;
        loop {
            let n = self.recv_inner(batch, libc::MSG_DONTWAIT, max)?;
            if n > 0 {
                return Ok(n);
            }
            max = 1;
            // Check the clock only every few spins: `Instant::now` costs about as much as
            // the empty receive itself.
            if self.stats.empty_polls.is_multiple_of(8) && Instant::now() >= deadline {
                return Ok(0);
            }
            std::hint::spin_loop();
        }
    }

    /// Blocking receive: waits until at least one datagram arrives (then takes whatever else
    /// is queued, up to the batch size), or `timeout` expires or a signal arrives (`Ok(0)`).
    /// `None` waits forever.
    pub fn recv_timeout(
        &mut self,
        batch: &mut impl RecvTarget,
        timeout: Option<Duration>,
    ) -> io::Result<usize> {
        match timeout {
            Some(Duration::ZERO) => self.try_recv(batch),
            // A bounded wait sleeps in `ppoll` (a high-resolution timer), not in the socket's
            // receive timeout, which rounds up to scheduler ticks (8 ms for 100 µs measured
            // here): a paced sender's next send is due in microseconds.
            Some(t) => {
                if sys::wait_readable(self.socket.as_fd(), t)? {
                    self.try_recv(batch)
                } else {
                    Ok(0)
                }
            }
            None => self.recv_inner(batch, libc::MSG_WAITFORONE, usize::MAX),
        }
    }

    fn recv_inner(
        &mut self,
        batch: &mut impl RecvTarget,
        flags: libc::c_int,
        max: usize,
    ) -> io::Result<usize> {
        let meta = batch.meta();
        meta.filled = 0;
        meta.controls_on = self.gro || self.count_drops;
        meta.kernel_drops = None;
        // A connected socket only receives from its peer: asking the kernel for the source
        // addresses anyway cost ~0.25 µs per receive on loopback (`rtt_breakdown` example:
        // UdpLink ping-pong 1.09-1.10 × raw UDP with them, 1.02-1.03 without).
        meta.peer = self.peer;
        let result = if self.batching {
            self.stats.recv_calls += 1;
            match sys::recv_mmsg(self.socket.as_fd(), batch, flags, max) {
                Err(e) if e.raw_os_error() == Some(libc::ENOSYS) => {
                    self.set_batching(false);
                    batch.meta().controls_on = false;
                    self.recv_fallback(batch, flags, max)
                }
                r => r,
            }
        } else {
            self.recv_fallback(batch, flags, max)
        };
        match result {
            Ok(n) => {
                batch.meta().filled = n;
                batch.received(n);
                let meta = batch.meta_ref();
                if let Some(d) = meta.kernel_drops {
                    self.stats.kernel_drops = self.stats.kernel_drops.max(u64::from(d));
                }
                for i in 0..n {
                    let k = batch.count(i);
                    self.stats.datagrams_received += k as u64;
                    self.stats.coalesced_receives += u64::from(k > 1);
                }
                self.stats.truncated += meta.truncated[..n].iter().filter(|t| **t).count() as u64;
                if n == 0 {
                    self.stats.empty_polls += 1;
                }
                Ok(n)
            }
            // Nothing queued, the timeout passed, or a signal ended the wait (the caller's
            // loop then sees nothing received and looks at what the signal set).
            Err(e)
                if matches!(
                    e.kind(),
                    io::ErrorKind::WouldBlock
                        | io::ErrorKind::TimedOut
                        | io::ErrorKind::Interrupted
                ) =>
            {
                self.stats.empty_polls += 1;
                Ok(0)
            }
            Err(e) => Err(e),
        }
    }

    /// The receive without `recvmmsg`: one `recvmsg` per message, into the same buffers.
    fn recv_fallback(
        &mut self,
        batch: &mut impl RecvTarget,
        flags: libc::c_int,
        max: usize,
    ) -> io::Result<usize> {
        // The first receive honours the caller's mode; the rest only take what is queued.
        let first_flags = flags & !libc::MSG_WAITFORONE;
        let mut iovs = [const { MaybeUninit::<libc::iovec>::uninit() }; MAX_IOVS];
        let mut spans = [(0, 0); MAX_BATCH];
        let slots = batch.layout(max, &mut iovs, &mut spans);
        let meta = batch.meta();
        for (i, &(first, count)) in spans.iter().take(slots).enumerate() {
            self.stats.recv_calls += 1;
            let f = if i == 0 {
                first_flags
            } else {
                libc::MSG_DONTWAIT
            };
            let name = match meta.peer {
                Some(_) => None,
                None => Some(&mut meta.names[i]),
            };
            // The spans lie within the iovecs `layout` wrote.
            let iov = &mut iovs[first..first + count];
            match sys::recv_msg(self.socket.as_fd(), iov, name, f) {
                Ok((len, truncated)) => {
                    meta.lens[i] = len;
                    meta.truncated[i] = truncated;
                    meta.segments[i] = 0;
                }
                Err(e) => return if i == 0 { Err(e) } else { Ok(i) },
            }
        }
        Ok(slots)
    }
}

impl AsRawFd for UdpLink {
    fn as_raw_fd(&self) -> RawFd {
        self.socket.as_raw_fd()
    }
}

impl AsFd for UdpLink {
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.socket.as_fd()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn deadline() -> Instant {
        Instant::now() + Duration::from_secs(5)
    }

    /// Receive until `want` datagrams arrived or the deadline passed; returns them in order.
    fn recv_all(link: &mut UdpLink, batch: &mut RecvBatch, want: usize) -> Vec<Vec<u8>> {
        let mut got = Vec::new();
        let end = deadline();
        while got.len() < want && Instant::now() < end {
            let n = link
                .recv_timeout(batch, Some(Duration::from_millis(100)))
                .unwrap();
            for i in 0..n {
                assert!(!batch.is_truncated(i));
                got.push(batch.get(i).unwrap().to_vec());
            }
        }
        got
    }

    fn datagrams(count: usize) -> Vec<Vec<u8>> {
        (0..count)
            .map(|i| {
                let len = 1 + (i * 37) % 1400;
                (0..len).map(|j| (i * 31 + j * 7) as u8).collect()
            })
            .collect()
    }

    fn roundtrip(batching: bool) {
        let (mut a, mut b) = UdpLink::loopback_pair().unwrap();
        a.set_batching(batching);
        b.set_batching(batching);
        b.set_recv_buffer_size(1 << 20).unwrap();
        let sent = datagrams(100);
        let refs: Vec<&[u8]> = sent.iter().map(|d| d.as_slice()).collect();
        let mut off = 0;
        while off < refs.len() {
            let n = a.send_batch(&refs[off..]).unwrap();
            assert!(n > 0 && n <= MAX_BATCH);
            off += n;
        }
        let mut batch = RecvBatch::new(16, DEFAULT_DATAGRAM_CAPACITY);
        let got = recv_all(&mut b, &mut batch, sent.len());
        assert_eq!(got, sent, "datagrams preserved byte for byte and in order");
        let s = a.stats();
        assert_eq!(s.datagrams_sent, 100);
        if batching {
            assert_eq!(
                s.send_calls, 2,
                "100 datagrams in two sendmmsg calls of <= 64"
            );
        }
        assert_eq!(b.stats().datagrams_received, 100);
    }

    /// Send a queue of datagrams shaped like a stack's fragments (runs of equal lengths ended
    /// by a shorter one, and some to a second address) and receive them with GRO on or off.
    fn offload_roundtrip(gso: bool, gro: bool, batching: bool) {
        let (mut a, mut b) = UdpLink::loopback_pair().unwrap();
        let mut c = UdpLink::bind(SocketAddr::from((Ipv4Addr::LOCALHOST, 0))).unwrap();
        a.set_gso(gso);
        a.set_batching(batching);
        b.set_recv_buffer_size(4 << 20).unwrap();
        let gro_on = b.set_gro(gro).unwrap();
        if gro && !gro_on {
            eprintln!("SKIPPED PART: this kernel has no UDP_GRO; receiving without it");
        }
        let sent: Vec<Vec<u8>> = (0..300)
            .map(|i| {
                let len = if i % 7 == 6 { 1 + i % 500 } else { 1300 };
                (0..len).map(|j| (i * 13 + j) as u8).collect()
            })
            .collect();
        let mut q = TxQueue::new();
        for (i, d) in sent.iter().enumerate() {
            q.push(b.local_addr(), d);
            if i % 50 == 0 {
                q.push(c.local_addr(), b"elsewhere");
            }
        }
        assert_eq!(a.send_queue(&mut q).unwrap(), 306);
        assert!(q.is_empty());
        let mut batch = RecvBatch::new(MAX_BATCH, 65_536);
        let mut got = Vec::new();
        let end = deadline();
        while got.len() < sent.len() && Instant::now() < end {
            b.recv_timeout(&mut batch, Some(Duration::from_millis(100)))
                .unwrap();
            for (d, from) in batch.datagrams() {
                assert_eq!(from, Some(a.local_addr()));
                got.push(d.to_vec());
            }
        }
        assert_eq!(got, sent, "datagrams preserved byte for byte and in order");
        let mut cb = RecvBatch::new(8, 2048);
        let mut others = 0;
        while others < 6 && Instant::now() < end {
            c.recv_timeout(&mut cb, Some(Duration::from_millis(100)))
                .unwrap();
            others += cb.datagrams().filter(|(d, _)| d == b"elsewhere").count();
        }
        assert_eq!(others, 6);
        let (sa, sb) = (a.stats(), b.stats());
        assert_eq!(sa.datagrams_sent, 306);
        assert_eq!(sb.datagrams_received, 300);
        if gso && a.is_gso() {
            assert!(sa.segmented_sends > 0, "runs went out segmented");
            assert!(sa.send_calls < 10, "{} calls", sa.send_calls);
        } else if gso {
            eprintln!("SKIPPED PART: this kernel refused UDP_SEGMENT; sent one by one");
        } else {
            assert_eq!(sa.segmented_sends, 0);
        }
        if gso && a.is_gso() && gro_on {
            assert!(sb.coalesced_receives > 0, "loopback hands a run over whole");
        } else {
            assert_eq!(sb.coalesced_receives, 0);
        }
    }

    /// Send a list of datagrams in buffers of their own, shaped like a stack's fragments, with
    /// `send_outgoing`, and receive them into a `RecvBufs`, each in a buffer of its own.
    fn outgoing_roundtrip(gso: bool, gro: bool, batching: bool) {
        let (mut a, mut b) = UdpLink::loopback_pair().unwrap();
        let mut c = UdpLink::bind(SocketAddr::from((Ipv4Addr::LOCALHOST, 0))).unwrap();
        a.set_gso(gso);
        a.set_batching(batching);
        b.set_batching(batching);
        b.set_recv_buffer_size(4 << 20).unwrap();
        let gro_on = b.set_gro(gro).unwrap();
        // Runs of six full fragments and a short one, and now and then one elsewhere.
        let mut list: Vec<(SocketAddr, Vec<u8>)> = Vec::new();
        let mut sent = Vec::new();
        for i in 0..280 {
            let len = if i % 7 == 6 { 1 + i % 500 } else { 1300 };
            let d: Vec<u8> = (0..len).map(|j| (i * 13 + j) as u8).collect();
            list.push((b.local_addr(), d.clone()));
            sent.push(d);
            if i % 70 == 0 {
                list.push((c.local_addr(), b"elsewhere".to_vec()));
            }
        }
        let mut done = 0;
        a.send_outgoing(&list, &mut done).unwrap();
        assert_eq!(done, list.len());
        const H: usize = 32;
        let mut bufs = RecvBufs::new(16, 8, H);
        let (mut got, mut first_joined) = (Vec::new(), None);
        let end = deadline();
        while got.len() < sent.len() && Instant::now() < end {
            bufs.refill(|| Vec::with_capacity(H + 2048));
            b.recv_timeout(&mut bufs, Some(Duration::from_millis(100)))
                .unwrap();
            while let Some(d) = bufs.pop(|| Vec::with_capacity(H + 2048)) {
                assert_eq!(d.from, Some(a.local_addr()));
                assert!(d.data.start >= H, "the headroom is kept");
                got.push(d.buf[d.data].to_vec());
            }
            first_joined.get_or_insert(bufs.joined());
        }
        assert_eq!(got, sent, "datagrams preserved byte for byte and in order");
        let mut cb = RecvBatch::new(8, 2048);
        let mut others = 0;
        while others < 4 && Instant::now() < end {
            c.recv_timeout(&mut cb, Some(Duration::from_millis(100)))
                .unwrap();
            others += cb.datagrams().filter(|(d, _)| d == b"elsewhere").count();
        }
        assert_eq!(others, 4);
        let (sa, sb) = (a.stats(), b.stats());
        assert_eq!(sa.datagrams_sent, list.len() as u64);
        assert_eq!(sb.datagrams_received, sent.len() as u64);
        if gso && a.is_gso() {
            assert!(sa.segmented_sends > 0, "runs went out segmented");
            assert!(sa.send_calls < 10, "{} calls", sa.send_calls);
        } else {
            assert_eq!(sa.segmented_sends, 0);
        }
        if gso && a.is_gso() && gro_on {
            assert!(sb.coalesced_receives > 0, "loopback hands a run over whole");
            // Once the batch has learnt the runs' segment size, their datagrams land one per
            // buffer: nothing more is put together by copying.
            assert_eq!(bufs.buffer_size(), 1300);
            assert_eq!(
                Some(bufs.joined()),
                first_joined,
                "no copies after the first receive"
            );
        } else {
            assert_eq!(
                bufs.joined(),
                0,
                "one datagram per message, each fits a buffer"
            );
        }
    }

    #[test]
    fn gathered_sends_and_scattered_receives_preserve_datagrams() {
        outgoing_roundtrip(true, true, true);
        outgoing_roundtrip(true, false, true);
        outgoing_roundtrip(false, true, true);
        outgoing_roundtrip(true, false, false);
    }

    /// Receive with `try_recv_from_into` until a datagram comes (at most 5 s).
    fn recv_one(l: &mut UdpLink, buf: &mut [u8]) -> (usize, Option<SocketAddr>) {
        let until = std::time::Instant::now() + Duration::from_secs(5);
        loop {
            if let Some(got) = l.try_recv_from_into(buf).unwrap() {
                return got;
            }
            assert!(std::time::Instant::now() < until, "no datagram within 5 s");
            std::thread::yield_now();
        }
    }

    #[test]
    fn a_receive_into_one_buffer_says_the_source_and_the_whole_length() {
        // Unconnected: the kernel names the source. Connected: the link's peer.
        let mut a = UdpLink::bind("127.0.0.1:0".parse().unwrap()).unwrap();
        let mut b = UdpLink::bind("127.0.0.1:0".parse().unwrap()).unwrap();
        b.set_nonblocking(true);
        let _ = b.set_gro(false);
        let mut buf = [0u8; 64];
        assert_eq!(
            b.try_recv_from_into(&mut buf).unwrap(),
            None,
            "nothing queued"
        );
        a.send_batch_to(&[b"hello"], b.local_addr()).unwrap();
        assert_eq!(recv_one(&mut b, &mut buf), (5, Some(a.local_addr())));
        assert_eq!(&buf[..5], b"hello");
        // Longer than the buffer: the whole length, the excess gone, counted.
        a.send_batch_to(&[&[7u8; 100]], b.local_addr()).unwrap();
        assert_eq!(recv_one(&mut b, &mut buf).0, 100);
        assert_eq!(b.stats().truncated, 1);
        b.connect(a.local_addr()).unwrap();
        a.send_batch_to(&[b"again"], b.local_addr()).unwrap();
        assert_eq!(recv_one(&mut b, &mut buf), (5, Some(a.local_addr())));
    }

    #[test]
    fn a_receive_into_one_buffer_is_refused_with_gro_on() {
        let (_, mut b) = UdpLink::loopback_pair().unwrap();
        if !b.set_gro(true).unwrap() {
            eprintln!("NOTE: this kernel has no UDP_GRO; nothing to refuse");
            return;
        }
        let e = b.try_recv_from_into(&mut [0u8; 64]).unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::InvalidInput);
    }

    #[test]
    fn a_datagram_longer_than_the_buffers_is_joined_then_fits() {
        let (mut a, mut b) = UdpLink::loopback_pair().unwrap();
        let big: Vec<u8> = (0..5000).map(|i| i as u8).collect();
        let mut bufs = RecvBufs::new(4, 1, 16);
        for round in 0..2 {
            a.send_batch(&[&big]).unwrap();
            bufs.refill(Vec::new);
            b.recv_timeout(&mut bufs, Some(Duration::from_secs(5)))
                .unwrap();
            let d = bufs.pop(Vec::new).expect("the datagram");
            assert_eq!(&d.buf[d.data], &big[..], "round {round}");
            assert!(bufs.pop(Vec::new).is_none());
            // The first spilled past its buffer and was put together; the batch learnt.
            assert_eq!(bufs.joined(), 1, "round {round}");
            assert_eq!(bufs.buffer_size(), 5000);
        }
    }

    #[test]
    fn a_receive_offers_twice_the_slots_the_last_one_brought() {
        // One datagram a receive (a request-response exchange) keeps the offer at two slots;
        // a queue of 40 is then taken 2, 4, 8, 16, 10 at a time (16 slots), every one intact.
        let (mut a, mut b) = UdpLink::loopback_pair().unwrap();
        b.set_gro(false).unwrap();
        let mut bufs = RecvBufs::new(16, 1, 16);
        let take = |b: &mut UdpLink, bufs: &mut RecvBufs| {
            bufs.refill(Vec::new);
            let n = b.recv_timeout(bufs, Some(Duration::from_secs(5))).unwrap();
            let mut got = Vec::new();
            while let Some(d) = bufs.pop(Vec::new) {
                got.push(d.buf[d.data].to_vec());
            }
            assert_eq!(got.len(), n);
            got
        };
        for i in 0..3u8 {
            a.send_batch(&[&[i; 20]]).unwrap();
            assert_eq!(take(&mut b, &mut bufs), vec![vec![i; 20]]);
            assert_eq!(bufs.offer, 2);
        }
        let sent: Vec<Vec<u8>> = (0..40u8).map(|i| vec![i; 100]).collect();
        let refs: Vec<&[u8]> = sent.iter().map(|d| &d[..]).collect();
        a.send_batch(&refs).unwrap();
        let (mut got, mut counts) = (Vec::new(), Vec::new());
        while got.len() < sent.len() {
            let more = take(&mut b, &mut bufs);
            counts.push(more.len());
            got.extend(more);
        }
        assert_eq!(got, sent, "every datagram, intact and in order");
        assert_eq!(counts, [2, 4, 8, 16, 10]);
    }

    #[test]
    fn a_run_of_small_datagrams_is_copied_out_and_leaves_the_buffer_size() {
        let (mut a, mut b) = UdpLink::loopback_pair().unwrap();
        let gro_on = b.set_gro(true).unwrap();
        let list: Vec<(SocketAddr, Vec<u8>)> =
            (0..6u8).map(|i| (b.local_addr(), vec![i; 40])).collect();
        let mut done = 0;
        a.send_outgoing(&list, &mut done).unwrap();
        let mut bufs = RecvBufs::new(4, 7, 16);
        let mut got = Vec::new();
        let end = deadline();
        while got.len() < 6 && Instant::now() < end {
            bufs.refill(Vec::new);
            b.recv_timeout(&mut bufs, Some(Duration::from_millis(100)))
                .unwrap();
            while let Some(d) = bufs.pop(|| vec![0xee; 3]) {
                assert_eq!(d.data.start, 16, "behind the headroom");
                got.push(d.buf[d.data].to_vec());
            }
        }
        let want: Vec<Vec<u8>> = list.into_iter().map(|(_, d)| d).collect();
        assert_eq!(got, want);
        if gro_on && a.is_gso() && b.stats().coalesced_receives > 0 {
            assert_eq!(bufs.joined(), 6, "several to a buffer: each copied out");
        }
        assert_eq!(
            bufs.buffer_size(),
            DEFAULT_DATAGRAM_CAPACITY,
            "a small run teaches nothing"
        );
    }

    #[test]
    fn a_refused_datagram_of_a_list_is_counted_and_the_rest_still_goes() {
        let (mut a, mut b) = UdpLink::loopback_pair().unwrap();
        let list = vec![
            (b.local_addr(), vec![1; MAX_UDP_PAYLOAD + 1]),
            (b.local_addr(), b"after".to_vec()),
        ];
        let mut done = 0;
        assert!(a.send_outgoing(&list, &mut done).is_err());
        assert_eq!((done, a.stats().send_errors), (1, 1));
        a.send_outgoing(&list, &mut done).unwrap();
        assert_eq!(done, 2);
        let mut batch = RecvBatch::new(4, 2048);
        b.recv_timeout(&mut batch, Some(Duration::from_secs(5)))
            .unwrap();
        assert_eq!(batch.get(0), Some(&b"after"[..]));
    }

    #[test]
    fn one_datagram_goes_alone_counted_refused_or_not() {
        // The single-datagram path: a refusal is counted and skipped, a datagram to the
        // connected peer and one to another address both arrive, and each is counted.
        let (mut a, mut b) = UdpLink::loopback_pair().unwrap();
        let mut c = UdpLink::bind(SocketAddr::from((Ipv4Addr::LOCALHOST, 0))).unwrap();
        let mut done = 0;
        let too_long = vec![(b.local_addr(), vec![1; MAX_UDP_PAYLOAD + 1])];
        assert!(a.send_outgoing(&too_long, &mut done).is_err());
        assert_eq!((done, a.stats().send_errors), (1, 1));
        for (to, link) in [(b.local_addr(), &mut b), (c.local_addr(), &mut c)] {
            let mut done = 0;
            a.send_outgoing(&vec![(to, b"alone".to_vec())], &mut done)
                .unwrap();
            assert_eq!(done, 1);
            let mut batch = RecvBatch::new(4, 2048);
            link.recv_timeout(&mut batch, Some(Duration::from_secs(5)))
                .unwrap();
            assert_eq!(batch.get(0), Some(&b"alone"[..]));
        }
        assert_eq!(a.stats().datagrams_sent, 2);
        assert_eq!(a.stats().send_calls, 3);
    }

    #[test]
    fn segmented_sends_and_coalesced_receives_preserve_datagrams() {
        offload_roundtrip(true, true, true);
    }

    #[test]
    fn segmented_sends_without_gro_are_cut_by_the_kernel() {
        offload_roundtrip(true, false, true);
    }

    #[test]
    fn a_queue_without_offload_goes_datagram_by_datagram() {
        offload_roundtrip(false, true, true);
        offload_roundtrip(true, false, false);
    }

    #[test]
    fn a_dedicated_socket_takes_its_peers_datagrams() {
        let any = SocketAddr::from((Ipv4Addr::LOCALHOST, 0));
        let mut shared = UdpLink::bind_shared(any).unwrap();
        let mut c = UdpLink::bind(any).unwrap();
        let mut other = UdpLink::bind(any).unwrap();
        let mut own = shared.dedicated(c.local_addr()).unwrap();
        assert_eq!(own.local_addr(), shared.local_addr());
        c.send_batch_to(&[b"from c"], shared.local_addr()).unwrap();
        other
            .send_batch_to(&[b"from other"], shared.local_addr())
            .unwrap();
        let mut batch = RecvBatch::new(4, 2048);
        let t = Some(Duration::from_secs(5));
        own.recv_timeout(&mut batch, t).unwrap();
        assert_eq!(batch.get(0), Some(&b"from c"[..]));
        shared.recv_timeout(&mut batch, t).unwrap();
        assert_eq!(batch.get(0), Some(&b"from other"[..]));
        assert_eq!(batch.source(0), Some(other.local_addr()));
        assert!(UdpLink::bind(any)
            .unwrap()
            .dedicated(c.local_addr())
            .is_err());
    }

    #[test]
    fn the_kernels_receive_buffer_drops_are_counted() {
        let (mut a, mut b) = UdpLink::loopback_pair().unwrap();
        b.set_recv_buffer_size(4096).unwrap();
        b.set_drop_counting(true).unwrap();
        let d = [7u8; 1000];
        let refs = vec![&d[..]; 50];
        for _ in 0..20 {
            a.send_batch(&refs).unwrap();
        }
        let mut batch = RecvBatch::new(MAX_BATCH, 2048);
        let mut got = 0;
        while b.try_recv(&mut batch).unwrap() > 0 {
            got += batch.len() as u64;
        }
        // The count arrives with a datagram received after the drops.
        a.send_batch(&[b"after"]).unwrap();
        let end = deadline();
        while b
            .recv_timeout(&mut batch, Some(Duration::from_millis(100)))
            .unwrap()
            == 0
            && Instant::now() < end
        {}
        got += batch.len() as u64;
        let drops = b.stats().kernel_drops;
        assert!(got < 1001, "the small buffer held only some");
        assert_eq!(
            drops + got,
            1001,
            "every datagram received or counted as dropped"
        );
    }

    #[test]
    fn a_refused_datagram_is_counted_and_the_rest_still_goes() {
        let (mut a, mut b) = UdpLink::loopback_pair().unwrap();
        let mut q = TxQueue::new();
        q.push(b.local_addr(), &vec![1; MAX_UDP_PAYLOAD + 1]);
        q.push(b.local_addr(), b"after");
        assert!(a.send_queue(&mut q).is_err());
        assert_eq!(a.stats().send_errors, 1);
        assert_eq!(a.send_queue(&mut q).unwrap(), 1);
        let mut batch = RecvBatch::new(4, 2048);
        b.recv_timeout(&mut batch, Some(Duration::from_secs(5)))
            .unwrap();
        assert_eq!(batch.get(0), Some(&b"after"[..]));
    }

    #[test]
    fn batch_roundtrip_preserves_bytes_and_order() {
        roundtrip(true);
    }

    #[test]
    fn fallback_roundtrip_preserves_bytes_and_order() {
        roundtrip(false);
    }

    #[test]
    fn try_recv_on_empty_socket_returns_zero() {
        let (_a, mut b) = UdpLink::loopback_pair().unwrap();
        let mut batch = RecvBatch::new(4, 64);
        assert_eq!(b.try_recv(&mut batch).unwrap(), 0);
        assert!(batch.is_empty());
        b.set_nonblocking(true);
        assert_eq!(b.recv_batch(&mut batch).unwrap(), 0);
    }

    #[test]
    fn recv_timeout_expires_with_zero() {
        let (_a, mut b) = UdpLink::loopback_pair().unwrap();
        let mut batch = RecvBatch::new(4, 64);
        let t = Instant::now();
        let n = b
            .recv_timeout(&mut batch, Some(Duration::from_millis(20)))
            .unwrap();
        assert_eq!(n, 0);
        assert!(t.elapsed() >= Duration::from_millis(10));
    }

    #[test]
    fn busy_poll_receives_and_reports_source() {
        let (mut a, mut b) = UdpLink::loopback_pair().unwrap();
        a.send_batch(&[b"ping", b"pong"]).unwrap();
        let mut batch = RecvBatch::new(8, 64);
        let mut got = Vec::new();
        let end = deadline();
        while got.len() < 2 && Instant::now() < end {
            let n = b.recv_busy(&mut batch, end).unwrap();
            for i in 0..n {
                assert_eq!(batch.source(i), Some(a.local_addr()));
                got.push(batch.get(i).unwrap().to_vec());
            }
        }
        assert_eq!(got, vec![b"ping".to_vec(), b"pong".to_vec()]);
    }

    #[test]
    fn busy_poll_gives_up_at_deadline() {
        let (_a, mut b) = UdpLink::loopback_pair().unwrap();
        let mut batch = RecvBatch::new(8, 64);
        let n = b
            .recv_busy(&mut batch, Instant::now() + Duration::from_millis(5))
            .unwrap();
        assert_eq!(n, 0);
    }

    #[test]
    fn oversize_datagram_is_flagged_truncated() {
        for batching in [true, false] {
            let (mut a, mut b) = UdpLink::loopback_pair().unwrap();
            b.set_batching(batching);
            a.send_batch(&[&[7u8; 100]]).unwrap();
            let mut batch = RecvBatch::new(2, 10);
            let n = b
                .recv_timeout(&mut batch, Some(Duration::from_secs(5)))
                .unwrap();
            assert_eq!(n, 1);
            assert!(batch.is_truncated(0));
            assert_eq!(batch.get(0).unwrap(), &[7u8; 10]);
            assert_eq!(b.stats().truncated, 1);
        }
    }

    #[test]
    fn send_batch_to_unconnected_peer() {
        let any = SocketAddr::from((Ipv4Addr::LOCALHOST, 0));
        let mut a = UdpLink::bind(any).unwrap();
        let mut b = UdpLink::bind(any).unwrap();
        assert!(a.peer_addr().is_none());
        assert_eq!(a.send_batch_to(&[b"x", b"yz"], b.local_addr()).unwrap(), 2);
        let mut batch = RecvBatch::new(8, 64);
        let got = recv_all(&mut b, &mut batch, 2);
        assert_eq!(got, vec![b"x".to_vec(), b"yz".to_vec()]);
        // Unconnected and no destination: the kernel refuses.
        assert!(a.send_batch(&[b"x"]).is_err());
    }

    #[test]
    fn buffer_sizes_are_granted() {
        let (a, _b) = UdpLink::loopback_pair().unwrap();
        assert!(a.set_recv_buffer_size(256 * 1024).unwrap() > 0);
        assert!(a.set_send_buffer_size(256 * 1024).unwrap() > 0);
    }
}
