//! The foreign-function side of the sockets: every `unsafe` call of this crate, each in a safe
//! wrapper that builds every pointer it passes from borrows that outlive the call, with a
//! `// SAFETY:` comment (as quinn-udp keeps its own in `unix.rs`). The rest of the crate is safe
//! code over these functions.

use crate::offload::{UDP_GRO, UDP_SEGMENT};
use crate::udp::{RecvBatch, MAX_BATCH};
use socket2::SockAddr;
use std::io;
use std::mem::{self, MaybeUninit};
use std::net::{Ipv4Addr, Ipv6Addr, SocketAddr, SocketAddrV4, SocketAddrV6};
use std::ops::Range;
use std::os::fd::{AsRawFd, BorrowedFd};

/// Room for the control messages of one datagram — `UDP_GRO` and `SO_RXQ_OVFL`, each an
/// integer (`CMSG_SPACE(4)` is 24 bytes on 64-bit Linux) — aligned as a `cmsghdr`.
#[derive(Clone, Copy)]
#[repr(C, align(8))]
pub(crate) struct Control([u8; 64]);

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

/// One message of a `send_pieces`: `buf[range]`, cut by the kernel into datagrams of
/// `segment` bytes when `segment > 0`.
#[derive(Clone, Debug)]
pub(crate) struct Piece {
    pub(crate) range: Range<usize>,
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

/// Send `pieces` (at most `MAX_BATCH`) of `buf`: one `sendmmsg` when `batching`, else one
/// `sendmsg` per piece until one fails. A piece to the connected `peer` is sent without an
/// address; a segmented piece carries a `UDP_SEGMENT` control message. Returns how many
/// pieces the kernel took.
pub(super) fn send_pieces(
    fd: BorrowedFd<'_>,
    buf: &[u8],
    pieces: &[Piece],
    peer: Option<SocketAddr>,
    flags: libc::c_int,
    batching: bool,
) -> io::Result<usize> {
    let n = pieces.len().min(MAX_BATCH);
    let mut iovs = [const { MaybeUninit::<libc::iovec>::uninit() }; MAX_BATCH];
    let mut msgs = [const { MaybeUninit::<libc::mmsghdr>::uninit() }; MAX_BATCH];
    let mut names: [Option<SockAddr>; MAX_BATCH] = [const { None }; MAX_BATCH];
    let mut controls = [Control::default(); MAX_BATCH];
    for (i, p) in pieces.iter().take(n).enumerate() {
        let data = &buf[p.range.clone()];
        let iov = iovs[i].write(libc::iovec {
            // The kernel only reads through iov_base for a send.
            iov_base: data.as_ptr() as *mut libc::c_void,
            iov_len: data.len(),
        });
        let (name, namelen) = if Some(p.to) == peer {
            (std::ptr::null_mut(), 0)
        } else {
            let a = names[i].insert(SockAddr::from(p.to));
            (a.as_ptr() as *mut libc::c_void, a.len())
        };
        let mut h = mmsghdr(iov, name, namelen);
        if p.segment > 0 {
            let size = u16::try_from(p.segment).unwrap_or(u16::MAX);
            h.msg_hdr.msg_control = controls[i].0.as_mut_ptr().cast();
            // SAFETY: CMSG_SPACE only computes a size.
            h.msg_hdr.msg_controllen = unsafe { libc::CMSG_SPACE(2) } as _;
            // SAFETY: msg_control points at `controls[i]` (32 bytes, aligned for a
            // cmsghdr), and msg_controllen = CMSG_SPACE(2) <= 32, so CMSG_FIRSTHDR
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
    }
    if n == 0 {
        return Ok(0);
    }
    if !batching {
        for (i, m) in msgs.iter_mut().take(n).enumerate() {
            // SAFETY: the first `n` headers were initialised above; each points at its
            // iovec, name and control message, all on this frame or borrowed from `buf`
            // and alive for the call; the kernel only reads them.
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
    // at data borrowed from `buf`, all alive for the call.
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
    // SAFETY: mmsghdr is plain old data; all zeros (null pointers, zero lengths) is valid.
    let mut h: libc::mmsghdr = unsafe { mem::zeroed() };
    h.msg_hdr.msg_iov = iov;
    h.msg_hdr.msg_iovlen = 1;
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

/// One `recvmmsg` into the first `max` slots of `batch`; sets lengths, truncation flags,
/// sources and what the control messages say.
pub(super) fn recv_mmsg(
    fd: BorrowedFd<'_>,
    batch: &mut RecvBatch,
    flags: libc::c_int,
    max: usize,
) -> io::Result<usize> {
    let cap = batch.capacity;
    // Only the first `n` entries are written (callgrind: zeroing all MAX_BATCH headers
    // was 30 % of the user-space instructions of a blocking ping-pong).
    let mut iovs = [const { MaybeUninit::<libc::iovec>::uninit() }; MAX_BATCH];
    let mut msgs = [const { MaybeUninit::<libc::mmsghdr>::uninit() }; MAX_BATCH];
    let mut n = 0;
    // No source addresses from a connected link (see `UdpLink::recv_inner`).
    let want_names = batch.peer.is_none();
    let controls_on = batch.controls_on;
    for (((chunk, name), control), (iov, msg)) in batch
        .buf
        .chunks_exact_mut(cap)
        .zip(batch.names.iter_mut())
        .zip(batch.controls.iter_mut())
        .zip(iovs.iter_mut().zip(msgs.iter_mut()))
        .take(max)
    {
        let iov = iov.write(libc::iovec {
            iov_base: chunk.as_mut_ptr().cast(),
            iov_len: chunk.len(),
        });
        let mut h = if want_names {
            mmsghdr(
                iov,
                (name as *mut libc::sockaddr_storage).cast(),
                mem::size_of::<libc::sockaddr_storage>() as libc::socklen_t,
            )
        } else {
            mmsghdr(iov, std::ptr::null_mut(), 0)
        };
        if controls_on {
            h.msg_hdr.msg_control = control.0.as_mut_ptr().cast();
            h.msg_hdr.msg_controllen = control.0.len() as _;
        }
        msg.write(h);
        n += 1;
    }
    // SAFETY: `fd` is an open socket borrowed for the call. The first `n` headers are
    // initialised and point at `iovs` (on this stack frame), each iovec at a distinct
    // `cap`-byte chunk of `batch.buf`, and each name either null (length 0: no address
    // wanted) or at a distinct `sockaddr_storage` of `batch.names` with its true size;
    // `batch` is mutably borrowed for the whole call; each control buffer (if any) is a
    // distinct `Control` of `batch.controls` with its true size.
    // The kernel reads at most `n` headers (never the uninitialised rest), and writes at
    // most `iov_len` bytes per buffer, `msg_namelen` bytes per name and `msg_controllen`
    // bytes per control buffer. A null timeout means none.
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
        batch.lens[i] = m.msg_len as usize;
        batch.truncated[i] = m.msg_hdr.msg_flags & libc::MSG_TRUNC != 0;
        let (segment, drops) = controls(&m.msg_hdr);
        batch.segments[i] = segment;
        if drops.is_some() {
            batch.kernel_drops = drops;
        }
    }
    Ok(r)
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
