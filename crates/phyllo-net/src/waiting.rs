//! [`WaitingBuffer`]: one datagram received straight into a pooled buffer that waits for it
//! across a busy poll's turns — the latency case of both drivers, [`UdpDriver`] and
//! [`SessionSocket`]; and [`unrefused`], how both read a receive's refusal.
//!
//! [`UdpDriver`]: crate::driver::UdpDriver
//! [`SessionSocket`]: crate::SessionSocket

use phyllo::msg::Msg;
use phyllo_udp::udp::UdpLink;
use std::io;
use std::net::SocketAddr;

/// A receive's result, a refusal read as nothing received (`T::default()`: 0, `None`). A
/// connected socket hears of its peer's ICMP port unreachable (the peer down, or
/// restarting) on its next receive: a lost datagram, which the protocol's timers recover
/// from, as they do on an unconnected socket, which never hears of it.
pub(crate) fn unrefused<T: Default>(r: io::Result<T>) -> io::Result<T> {
    match r {
        Err(e) if e.kind() == io::ErrorKind::ConnectionRefused => Ok(T::default()),
        r => r,
    }
}

/// What one receive into the waiting buffer found.
pub(crate) enum Took {
    /// Nothing queued, or the connected peer's refusal (an ICMP port unreachable, heard on a
    /// connected socket): a loss the protocol's timers recover from.
    Nothing,
    /// A datagram longer than the room offered, cut short by the kernel: counted by the link
    /// (`truncated`) and dropped; the buffer waits on.
    CutShort,
    /// A whole datagram in its buffer, and its source.
    Datagram(Msg, Option<SocketAddr>),
}

/// A pooled buffer waiting for the next datagram: an empty turn of a busy poll costs one
/// `recvfrom` (no message header, no control messages, no copy afterwards), and the buffer
/// stays for the next turn until a datagram fills it. Only for a link with GRO off
/// ([`UdpLink::try_recv_from_into`]).
#[derive(Default)]
pub(crate) struct WaitingBuffer(Option<Msg>);

impl WaitingBuffer {
    /// One non-blocking receive into the waiting buffer (from `alloc` when none waits),
    /// offering at least `room` bytes after its content (all of a larger pooled buffer).
    pub(crate) fn recv(
        &mut self,
        link: &mut UdpLink,
        room: usize,
        alloc: impl FnOnce() -> Msg,
    ) -> io::Result<Took> {
        let mut m = self.0.take().unwrap_or_else(alloc);
        let tail = m.tail_room(room);
        let offered = tail.len();
        let took = match unrefused(link.try_recv_from_into(tail)) {
            Ok(Some((len, from))) if len <= offered => {
                m.commit_tail(len);
                return Ok(Took::Datagram(m, from));
            }
            Ok(Some(_)) => Ok(Took::CutShort),
            Ok(None) => Ok(Took::Nothing),
            Err(e) => Err(e),
        };
        self.0 = Some(m);
        took
    }
}
