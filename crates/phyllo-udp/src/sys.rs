//! The foreign-function side of the sockets: every `unsafe` call of this crate, each in a safe
//! wrapper that builds every pointer it passes from borrows that outlive the call, with a
//! `// SAFETY:` comment (as quinn-udp keeps its own in `unix.rs`). The rest of the crate is safe
//! code over these functions.

use crate::offload::{UDP_GRO, UDP_SEGMENT};
use socket2::SockAddr;
use std::io;
use std::mem::{self, MaybeUninit};
use std::net::{Ipv4Addr, Ipv6Addr, SocketAddr, SocketAddrV4, SocketAddrV6};
use std::ops::Range;
use std::os::fd::{AsRawFd, BorrowedFd};

/// The most datagrams one `sendmmsg`/`recvmmsg` call moves (the batch arrays live on the stack).
pub const MAX_BATCH: usize = 64;

/// The most buffers one receive offers the kernel (iovecs on the stack): `RecvBufs` lays its
/// slots out within it.
pub(crate) const MAX_IOVS: usize = 1024;

// What a receive target (`RecvBatch`, `RecvBufs`) gives the receive calls and they fill in:
// the public `RecvTarget` is sealed by this trait, which nobody outside the crate can name.

/// The iovecs of one receive.
pub type Iovs = [MaybeUninit<libc::iovec>; MAX_IOVS];
/// Per message of one receive: its first iovec and how many.
pub type Spans = [(usize, usize); MAX_BATCH];

/// What a receive says about each message: lengths, truncation, sources, control
/// messages.
pub struct Meta {
    pub lens: Vec<usize>,
    pub truncated: Vec<bool>,
    pub names: Vec<libc::sockaddr_storage>,
    /// Per slot: the size of the datagrams the kernel coalesced into it (`UDP_GRO`), 0
    /// for one datagram.
    pub segments: Vec<usize>,
    /// Per slot: room for the control messages.
    pub controls: Vec<Control>,
    /// Whether the last receive asked for control messages (GRO or drop counts).
    pub controls_on: bool,
    /// The kernel's drop counter as the last receive reported it.
    pub kernel_drops: Option<u32>,
    pub filled: usize,
    /// Set when the last receive was on a connected link: every datagram came from this
    /// peer, and the kernel was not asked for the source addresses.
    pub peer: Option<SocketAddr>,
}

impl Meta {
    pub(crate) fn new(slots: usize) -> Meta {
        Meta {
            lens: vec![0; slots],
            truncated: vec![false; slots],
            names: vec![zeroed_storage(); slots],
            segments: vec![0; slots],
            controls: vec![Control::default(); slots],
            controls_on: false,
            kernel_drops: None,
            filled: 0,
            peer: None,
        }
    }

    /// Where message `i` of the last receive came from.
    pub(crate) fn source(&self, i: usize) -> Option<SocketAddr> {
        if i >= self.filled {
            None
        } else if self.peer.is_some() {
            self.peer
        } else {
            storage_to_addr(&self.names[i])
        }
    }
}

/// A receive's buffers.
pub trait Target {
    fn meta(&mut self) -> &mut Meta;
    fn meta_ref(&self) -> &Meta;
    /// Write the iovecs of up to `max` messages into `iovs` (each message's first one and
    /// count into `spans`); how many messages. The iovecs point at buffers that stay put
    /// until the next call of anything but `meta`.
    fn layout(&mut self, max: usize, iovs: &mut Iovs, spans: &mut Spans) -> usize;
    /// How many datagrams message `i` of the last receive holds.
    fn count(&self, i: usize) -> usize;
    /// The kernel filled the first `n` messages (their `meta` is set).
    fn received(&mut self, n: usize);
}

/// Room for the control messages of one datagram — `UDP_GRO` and `SO_RXQ_OVFL`, each an
/// integer (`CMSG_SPACE(4)` is 24 bytes on 64-bit Linux) — aligned as a `cmsghdr`.
#[derive(Clone, Copy)]
#[repr(C, align(8))]
pub struct Control(pub(crate) [u8; 64]);

impl Default for Control {
    fn default() -> Control {
        Control([0; 64])
    }
}

/// `SO_RXQ_OVFL` (`asm-generic/socket.h`; the `libc` crate names it only for some targets).
pub(super) const SO_RXQ_OVFL: libc::c_int = 40;

/// `setsockopt(SOL_SOCKET, option, value)`.
pub(super) fn set_socket_option(
    fd: BorrowedFd<'_>,
    option: libc::c_int,
    value: libc::c_int,
) -> io::Result<()> {
    set_option(fd, libc::SOL_SOCKET, option, value)
}

/// One message of a `send_pieces`: `range` of what is sent (bytes of a queue's buffer,
/// or datagrams of a list), in `iovs` pieces of memory, cut by the kernel into datagrams
/// of `segment` bytes when `segment > 0`.
#[derive(Clone, Debug)]
pub(crate) struct Piece {
    pub(crate) range: Range<usize>,
    pub(crate) iovs: usize,
    pub(crate) segment: usize,
    pub(crate) datagrams: usize,
    pub(crate) to: SocketAddr,
}

/// `setsockopt(SOL_UDP, option, value)`.
pub(super) fn set_udp_option(
    fd: BorrowedFd<'_>,
    option: libc::c_int,
    value: libc::c_int,
) -> io::Result<()> {
    set_option(fd, libc::SOL_UDP, option, value)
}

/// `setsockopt(level, option, value)` for an integer option.
fn set_option(
    fd: BorrowedFd<'_>,
    level: libc::c_int,
    option: libc::c_int,
    value: libc::c_int,
) -> io::Result<()> {
    // SAFETY: `fd` is an open socket borrowed for the call; the value is a live c_int
    // whose size is passed.
    let r = unsafe {
        libc::setsockopt(
            fd.as_raw_fd(),
            level,
            option,
            (&value as *const libc::c_int).cast(),
            mem::size_of::<libc::c_int>() as libc::socklen_t,
        )
    };
    if r < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(())
    }
}

/// One datagram with `sendto`, to `to` (no address when the socket is connected to it):
/// what a busy-polled round trip sends each way, without the message headers, iovecs and
/// batch arrays of [`send_pieces`].
pub(super) fn send_to(
    fd: BorrowedFd<'_>,
    data: &[u8],
    to: SocketAddr,
    peer: Option<SocketAddr>,
    flags: libc::c_int,
) -> io::Result<()> {
    let name = (Some(to) != peer).then(|| SockAddr::from(to));
    let (name_ptr, name_len) = name
        .as_ref()
        .map_or((std::ptr::null(), 0), |a| (a.as_ptr().cast(), a.len()));
    // SAFETY: `fd` is an open socket borrowed for the call; the kernel reads `data.len()`
    // bytes from `data`, borrowed for the call, and the name: none (null, length 0), or
    // `name` on this frame with its true length.
    let r = unsafe {
        libc::sendto(
            fd.as_raw_fd(),
            data.as_ptr().cast(),
            data.len(),
            flags,
            name_ptr,
            name_len,
        )
    };
    if r < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(())
    }
}

/// Send `pieces` (at most `MAX_BATCH`, with at most `MAX_IOVS` iovecs in all): one
/// `sendmmsg` when `batching`, else one `sendmsg` per piece until one fails. Piece `p`'s
/// `k`-th iovec is `slice(p, k)`. A piece to the connected `peer` is sent without an
/// address; a segmented piece carries a `UDP_SEGMENT` control message (the kernel
/// concatenates its iovecs and cuts the whole into segments). Returns how many pieces
/// the kernel took. (One datagram alone goes with [`send_to`], without these arrays:
/// `UdpLink::send_one`.)
///
/// Out of line: its arrays take about 20 KiB of stack, and inlined into a caller that often
/// has nothing to send (a driver's flush) they would cost that caller a probe of every page
/// on every call.
#[inline(never)]
pub(super) fn send_pieces<'a>(
    fd: BorrowedFd<'_>,
    pieces: &[Piece],
    slice: impl Fn(&Piece, usize) -> &'a [u8],
    peer: Option<SocketAddr>,
    flags: libc::c_int,
    batching: bool,
) -> io::Result<usize> {
    let mut iovs = [const { MaybeUninit::<libc::iovec>::uninit() }; MAX_IOVS];
    let mut msgs = [const { MaybeUninit::<libc::mmsghdr>::uninit() }; MAX_BATCH];
    // Written only where a message uses one: zeroing all of them on every call cost more
    // than the headers (about 13 KiB).
    let mut names = [const { MaybeUninit::<SockAddr>::uninit() }; MAX_BATCH];
    let mut controls = [const { MaybeUninit::<Control>::uninit() }; MAX_BATCH];
    let mut at = 0;
    let mut n = 0;
    for (i, p) in pieces.iter().take(MAX_BATCH).enumerate() {
        if at + p.iovs > MAX_IOVS {
            break;
        }
        for k in 0..p.iovs {
            let data = slice(p, k);
            iovs[at + k].write(libc::iovec {
                // The kernel only reads through iov_base for a send.
                iov_base: data.as_ptr() as *mut libc::c_void,
                iov_len: data.len(),
            });
        }
        let iov = iovs[at..at + p.iovs].as_mut_ptr().cast::<libc::iovec>();
        let (name, namelen) = if Some(p.to) == peer {
            (std::ptr::null_mut(), 0)
        } else {
            let a = names[i].write(SockAddr::from(p.to));
            (a.as_ptr() as *mut libc::c_void, a.len())
        };
        let mut h = mmsghdr_n(iov, p.iovs, name, namelen);
        at += p.iovs;
        if p.segment > 0 {
            let size = u16::try_from(p.segment).unwrap_or(u16::MAX);
            let control = controls[i].write(Control::default());
            h.msg_hdr.msg_control = control.0.as_mut_ptr().cast();
            // SAFETY: CMSG_SPACE only computes a size.
            h.msg_hdr.msg_controllen = unsafe { libc::CMSG_SPACE(2) } as _;
            // SAFETY: msg_control points at `control` (64 bytes, aligned for a
            // cmsghdr), and msg_controllen = CMSG_SPACE(2) <= 64, so CMSG_FIRSTHDR
            // returns a header inside it with room for CMSG_LEN(2) bytes; the u16 is
            // written unaligned into its data.
            unsafe {
                let c = libc::CMSG_FIRSTHDR(&h.msg_hdr);
                (*c).cmsg_level = libc::SOL_UDP;
                (*c).cmsg_type = UDP_SEGMENT;
                (*c).cmsg_len = libc::CMSG_LEN(2) as _;
                std::ptr::write_unaligned(libc::CMSG_DATA(c).cast::<u16>(), size);
            }
        }
        msgs[i].write(h);
        n += 1;
    }
    if n == 0 {
        return Ok(0);
    }
    // One message goes with `sendmsg`: the same as a `sendmmsg` of one, for less kernel work.
    if !batching || n == 1 {
        for (i, m) in msgs.iter_mut().take(n).enumerate() {
            // SAFETY: the first `n` headers were initialised above; each points at its
            // iovecs, name and control message, all on this frame, and the iovecs at data
            // borrowed for `'a` (alive for the call); the kernel only reads them.
            let r = unsafe { libc::sendmsg(fd.as_raw_fd(), &m.assume_init_mut().msg_hdr, flags) };
            if r < 0 {
                return if i == 0 {
                    Err(io::Error::last_os_error())
                } else {
                    Ok(i)
                };
            }
        }
        return Ok(n);
    }
    // The first `n` headers point at iovecs, names and control messages on this frame and
    // the iovecs at data borrowed for `'a`, all alive for the call.
    sendmmsg(fd, &mut msgs, n, flags)
}

/// What a received message's control messages say: the `UDP_GRO` segment size (0 if
/// none) and the `SO_RXQ_OVFL` drop counter (if present).
// `msg_controllen` is a `size_t` in glibc and a `socklen_t` in musl.
#[allow(clippy::unnecessary_cast)]
fn controls(h: &libc::msghdr) -> (usize, Option<u32>) {
    let (mut segment, mut drops) = (0, None);
    if h.msg_control.is_null() || (h.msg_controllen as usize) < mem::size_of::<libc::cmsghdr>() {
        return (segment, drops);
    }
    // SAFETY: the kernel filled msg_control with msg_controllen bytes of well-formed
    // control messages inside the `Control` buffer the header points at; CMSG_FIRSTHDR
    // and CMSG_NXTHDR stay within msg_controllen, and the integers are read unaligned.
    unsafe {
        let mut c = libc::CMSG_FIRSTHDR(h);
        while !c.is_null() {
            match ((*c).cmsg_level, (*c).cmsg_type) {
                (libc::SOL_UDP, UDP_GRO) => {
                    let size = std::ptr::read_unaligned(libc::CMSG_DATA(c).cast::<libc::c_int>());
                    segment = usize::try_from(size).unwrap_or(0);
                }
                (libc::SOL_SOCKET, SO_RXQ_OVFL) => {
                    drops = Some(std::ptr::read_unaligned(libc::CMSG_DATA(c).cast::<u32>()));
                }
                _ => {}
            }
            c = libc::CMSG_NXTHDR(h, c);
        }
    }
    (segment, drops)
}

/// The header of one datagram in `iov`, to or from `name` (null for the connected peer),
/// everything else zero.
fn mmsghdr(
    iov: &mut libc::iovec,
    name: *mut libc::c_void,
    namelen: libc::socklen_t,
) -> libc::mmsghdr {
    mmsghdr_n(iov, 1, name, namelen)
}

/// The header of one message in the `count` iovecs at `iov`, to or from `name` (null for
/// the connected peer), everything else zero.
// `msg_iovlen` is a `size_t` in glibc and an `int` in musl.
#[allow(clippy::unnecessary_cast)]
fn mmsghdr_n(
    iov: *mut libc::iovec,
    count: usize,
    name: *mut libc::c_void,
    namelen: libc::socklen_t,
) -> libc::mmsghdr {
    // SAFETY: mmsghdr is plain old data; all zeros (null pointers, zero lengths) is valid.
    let mut h: libc::mmsghdr = unsafe { mem::zeroed() };
    h.msg_hdr.msg_iov = iov;
    h.msg_hdr.msg_iovlen = count as _;
    h.msg_hdr.msg_name = name;
    h.msg_hdr.msg_namelen = namelen;
    h
}

/// One `sendmmsg` of up to `MAX_BATCH` datagrams, to `to` or the connected peer.
pub(super) fn send_mmsg(
    fd: BorrowedFd<'_>,
    datagrams: &[&[u8]],
    to: Option<&SockAddr>,
    flags: libc::c_int,
) -> io::Result<usize> {
    let n = datagrams.len().min(MAX_BATCH);
    // Only the first `n` entries are written (zeroing all MAX_BATCH headers cost more
    // than the call for a small batch).
    let mut iovs = [const { MaybeUninit::<libc::iovec>::uninit() }; MAX_BATCH];
    let mut msgs = [const { MaybeUninit::<libc::mmsghdr>::uninit() }; MAX_BATCH];
    for i in 0..n {
        let iov = iovs[i].write(libc::iovec {
            // The kernel only reads through iov_base for a send.
            iov_base: datagrams[i].as_ptr() as *mut libc::c_void,
            iov_len: datagrams[i].len(),
        });
        let (name, namelen) = to.map_or((std::ptr::null_mut(), 0), |to| {
            (to.as_ptr() as *mut libc::c_void, to.len())
        });
        msgs[i].write(mmsghdr(iov, name, namelen));
    }
    // The first `n` headers point at `iovs` (on this stack frame) and optionally at `to`;
    // each iovec at a borrowed datagram. All outlive the call.
    sendmmsg(fd, &mut msgs, n, flags)
}

/// `sendmmsg` of the first `n` of `msgs`, which the caller initialised with pointers (to
/// buffers, addresses, control messages) that stay valid for the call; how many the kernel
/// took.
fn sendmmsg(
    fd: BorrowedFd<'_>,
    msgs: &mut [MaybeUninit<libc::mmsghdr>; MAX_BATCH],
    n: usize,
    flags: libc::c_int,
) -> io::Result<usize> {
    let n = n.min(MAX_BATCH);
    // SAFETY: `fd` is an open socket borrowed for the call. The caller initialised the
    // first `n` headers and everything they point at outlives the call; the kernel reads
    // at most `n` headers (never the uninitialised rest), only reads the buffers, names
    // and control messages, and writes only each header's `msg_len`.
    let r = unsafe {
        libc::sendmmsg(
            fd.as_raw_fd(),
            msgs.as_mut_ptr().cast::<libc::mmsghdr>(),
            n as libc::c_uint,
            flags,
        )
    };
    if r < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(r as usize)
    }
}

/// One `recvmmsg` into the first `max` messages of `batch` (as its `layout` lays them
/// out); sets lengths, truncation flags, sources and what the control messages say.
pub(super) fn recv_mmsg(
    fd: BorrowedFd<'_>,
    batch: &mut impl Target,
    flags: libc::c_int,
    max: usize,
) -> io::Result<usize> {
    // Only the first entries are written (callgrind: zeroing all MAX_BATCH headers was
    // 30 % of the user-space instructions of a blocking ping-pong).
    let mut iovs = [const { MaybeUninit::<libc::iovec>::uninit() }; MAX_IOVS];
    let mut spans = [(0, 0); MAX_BATCH];
    let mut msgs = [const { MaybeUninit::<libc::mmsghdr>::uninit() }; MAX_BATCH];
    let n = batch.layout(max, &mut iovs, &mut spans).min(MAX_BATCH);
    let meta = batch.meta();
    // No source addresses from a connected link (see `UdpLink::recv_inner`).
    let want_names = meta.peer.is_none();
    let controls_on = meta.controls_on;
    for (i, ((name, control), msg)) in meta
        .names
        .iter_mut()
        .zip(meta.controls.iter_mut())
        .zip(msgs.iter_mut())
        .take(n)
        .enumerate()
    {
        let (first, count) = spans[i];
        let iov = iovs[first..first + count]
            .as_mut_ptr()
            .cast::<libc::iovec>();
        let mut h = if want_names {
            mmsghdr_n(
                iov,
                count,
                (name as *mut libc::sockaddr_storage).cast(),
                mem::size_of::<libc::sockaddr_storage>() as libc::socklen_t,
            )
        } else {
            mmsghdr_n(iov, count, std::ptr::null_mut(), 0)
        };
        if controls_on {
            h.msg_hdr.msg_control = control.0.as_mut_ptr().cast();
            h.msg_hdr.msg_controllen = control.0.len() as _;
        }
        msg.write(h);
    }
    // SAFETY: `fd` is an open socket borrowed for the call. The first `n` headers are
    // initialised and point at their spans of `iovs` (on this stack frame), which
    // `layout` initialised: each iovec at a distinct region of a buffer of `batch`
    // (one of its own, or a buffer it reserved room in) that nothing touches until the
    // call returns. Each name is either null (length 0: no address wanted) or a distinct
    // `sockaddr_storage` of `meta.names` with its true size; each control buffer (if
    // any) a distinct `Control` of `meta.controls` with its true size. The kernel reads
    // at most `n` headers (never the uninitialised rest), and writes at most `iov_len`
    // bytes per iovec, `msg_namelen` bytes per name and `msg_controllen` bytes per
    // control buffer. A null timeout means none.
    let r = unsafe {
        libc::recvmmsg(
            fd.as_raw_fd(),
            msgs.as_mut_ptr().cast::<libc::mmsghdr>(),
            n as libc::c_uint,
            flags,
            std::ptr::null_mut(),
        )
    };
    if r < 0 {
        return Err(io::Error::last_os_error());
    }
    let r = (r as usize).min(n);
    for (i, m) in msgs.iter().take(r).enumerate() {
        // SAFETY: the first `n >= r` headers were initialised above.
        let m = unsafe { m.assume_init_ref() };
        meta.lens[i] = m.msg_len as usize;
        meta.truncated[i] = m.msg_hdr.msg_flags & libc::MSG_TRUNC != 0;
        let (segment, drops) = controls(&m.msg_hdr);
        meta.segments[i] = segment;
        if drops.is_some() {
            meta.kernel_drops = drops;
        }
    }
    Ok(r)
}

/// One `recvmsg` into `iovs` (which the caller initialised, pointing at buffers it holds
/// for the call): the bytes received and whether the datagram was longer.
pub(super) fn recv_msg(
    fd: BorrowedFd<'_>,
    iovs: &mut [MaybeUninit<libc::iovec>],
    name: Option<&mut libc::sockaddr_storage>,
    flags: libc::c_int,
) -> io::Result<(usize, bool)> {
    let (name, namelen) = match name {
        Some(n) => (
            (n as *mut libc::sockaddr_storage).cast(),
            mem::size_of::<libc::sockaddr_storage>() as libc::socklen_t,
        ),
        None => (std::ptr::null_mut(), 0),
    };
    let mut h = mmsghdr_n(iovs.as_mut_ptr().cast(), iovs.len(), name, namelen);
    // SAFETY: `fd` is an open socket; the header points at `iovs` (initialised by the
    // caller, each at a buffer region it holds for the call) and at the name (if any), an
    // exclusive borrow with its true size; the kernel writes at most `iov_len` bytes per
    // iovec and `msg_namelen` bytes of name.
    let r = unsafe { libc::recvmsg(fd.as_raw_fd(), &mut h.msg_hdr, flags) };
    if r < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok((r as usize, h.msg_hdr.msg_flags & libc::MSG_TRUNC != 0))
    }
}

/// One `recvfrom`; returns the datagram's full length (`MSG_TRUNC`), which exceeds
/// `buf.len()` when it was truncated.
pub(super) fn recv_from(
    fd: BorrowedFd<'_>,
    buf: &mut [u8],
    name: Option<&mut libc::sockaddr_storage>,
    flags: libc::c_int,
) -> io::Result<usize> {
    let mut namelen = mem::size_of::<libc::sockaddr_storage>() as libc::socklen_t;
    let (name, namelen) = match name {
        Some(n) => (
            (n as *mut libc::sockaddr_storage).cast(),
            &mut namelen as *mut libc::socklen_t,
        ),
        None => (std::ptr::null_mut(), std::ptr::null_mut()),
    };
    // SAFETY: `fd` is an open socket; `buf` and the name (if any) are exclusive borrows
    // valid for the call with the lengths passed; the kernel writes at most those many
    // bytes. A null name and length ask for no source address.
    let r = unsafe {
        libc::recvfrom(
            fd.as_raw_fd(),
            buf.as_mut_ptr().cast(),
            buf.len(),
            flags | libc::MSG_TRUNC,
            name,
            namelen,
        )
    };
    if r < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(r as usize)
    }
}

pub(crate) fn zeroed_storage() -> libc::sockaddr_storage {
    // SAFETY: sockaddr_storage is plain old data (integers and byte arrays); all zeros is a
    // valid value (family AF_UNSPEC).
    unsafe { mem::zeroed() }
}

/// The IP socket address in `s`, if it holds one.
pub(crate) fn storage_to_addr(s: &libc::sockaddr_storage) -> Option<SocketAddr> {
    match libc::c_int::from(s.ss_family) {
        libc::AF_INET => {
            // SAFETY: the family says the storage holds a sockaddr_in, which is smaller than
            // sockaddr_storage and needs no stricter alignment.
            let a = unsafe { &*(s as *const libc::sockaddr_storage).cast::<libc::sockaddr_in>() };
            Some(SocketAddr::V4(SocketAddrV4::new(
                Ipv4Addr::from(u32::from_be(a.sin_addr.s_addr)),
                u16::from_be(a.sin_port),
            )))
        }
        libc::AF_INET6 => {
            // SAFETY: as above, for sockaddr_in6.
            let a = unsafe { &*(s as *const libc::sockaddr_storage).cast::<libc::sockaddr_in6>() };
            Some(SocketAddr::V6(SocketAddrV6::new(
                Ipv6Addr::from(a.sin6_addr.s6_addr),
                u16::from_be(a.sin6_port),
                a.sin6_flowinfo,
                a.sin6_scope_id,
            )))
        }
        _ => None,
    }
}

/// Wait until `fd` is readable or `timeout` passes (`ppoll`, which sleeps on a
/// high-resolution timer: a socket's `SO_RCVTIMEO` rounds a wait up to whole scheduler ticks,
/// 4–8 ms on common kernels, which a pacing sender cannot afford). `Ok(true)` when readable,
/// `Ok(false)` on timeout or a signal.
pub(crate) fn wait_readable(fd: BorrowedFd<'_>, timeout: std::time::Duration) -> io::Result<bool> {
    let mut pfd = libc::pollfd {
        fd: fd.as_raw_fd(),
        events: libc::POLLIN,
        revents: 0,
    };
    let ts = libc::timespec {
        tv_sec: timeout.as_secs().min(libc::time_t::MAX as u64) as libc::time_t,
        tv_nsec: libc::c_long::from(timeout.subsec_nanos() as i32),
    };
    // SAFETY: `pfd` and `ts` are live locals for the whole call; one descriptor is passed, as
    // the count says; a null signal mask leaves the thread's mask as it is.
    let r = unsafe { libc::ppoll(&mut pfd, 1, &ts, std::ptr::null()) };
    match r {
        n if n > 0 => Ok(true),
        0 => Ok(false),
        _ => {
            let e = io::Error::last_os_error();
            if e.kind() == io::ErrorKind::Interrupted {
                Ok(false)
            } else {
                Err(e)
            }
        }
    }
}

/// `SO_ATTACH_REUSEPORT_CBPF` (`asm-generic/socket.h`; the `libc` crate names it only for
/// some targets).
const SO_ATTACH_REUSEPORT_CBPF: libc::c_int = 51;

/// Attach the classic BPF program `program` to the `SO_REUSEPORT` group of `fd`
/// (`setsockopt(SOL_SOCKET, SO_ATTACH_REUSEPORT_CBPF)`): from now on the kernel picks the
/// group's socket for each datagram by the index the program returns. The kernel checks the
/// program (and copies it) before it takes it; an unsafe program is `EINVAL`.
pub(crate) fn attach_reuseport_cbpf(
    fd: BorrowedFd<'_>,
    program: &[libc::sock_filter],
) -> io::Result<()> {
    let len = libc::c_ushort::try_from(program.len())
        .map_err(|_| io::Error::from(io::ErrorKind::InvalidInput))?;
    let fprog = libc::sock_fprog {
        len,
        // The kernel only reads through this pointer (it copies the program in).
        filter: program.as_ptr().cast_mut(),
    };
    // SAFETY: `fd` is an open socket borrowed for the call; `fprog` is a live local whose
    // size is passed, and it points at `program.len()` instructions borrowed for the whole
    // call, which the kernel copies before it returns and never writes.
    let r = unsafe {
        libc::setsockopt(
            fd.as_raw_fd(),
            libc::SOL_SOCKET,
            SO_ATTACH_REUSEPORT_CBPF,
            (&fprog as *const libc::sock_fprog).cast(),
            mem::size_of::<libc::sock_fprog>() as libc::socklen_t,
        )
    };
    if r < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(())
    }
}
