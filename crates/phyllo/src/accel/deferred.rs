//! Deferred post-processing (van Renesse, "Masking the Overhead of Protocol Layering" (seed 004
//! §3.1), canonical protocol processing): the post-phases of a fast-path send or delivery run after
//! the message is on the network or with the application, and before the next operation on the
//! connection.
//!
//! At most one send and one delivery are pending (seed 004 Table 3's `mode` and `pre_msg`,
//! per direction). [`Accelerator::post_process`](super::Accelerator::post_process) runs them,
//! then sends the backlog packed. An idle application calls it through
//! [`Connection::post_process`](crate::Connection::post_process); the next operation runs it
//! first if it is still pending; and [`Connection::poll_timeout`](crate::Connection::poll_timeout)
//! reports it as due, so an event loop that follows only the sans-IO contract runs it too.
//!
//! Saving a message for retransmission is post-processing as well ([`Reclaim`]).

use crate::layer::HeaderCopy;
use crate::msg::Msg;

/// The pending post-processing of one connection. Kept in place: the fast paths write the
/// header copies here directly instead of moving them around.
pub(crate) struct Pending {
    /// A send's post-phases are pending.
    pub(crate) send: bool,
    /// The pending send's header (after the filter and any body transform).
    pub(crate) send_hdr: HeaderCopy,
    /// The retransmission copies taken for the pending send, by layer (an empty list kept
    /// between sends, so taking them allocates nothing).
    pub(crate) copies: Vec<(usize, Msg)>,
    /// The retransmission copy not taken yet (see [`Reclaim`]).
    pub(crate) reclaim: Option<Reclaim>,
    /// A delivery's post-phases are pending.
    pub(crate) deliver: bool,
    /// The pending delivery's header.
    pub(crate) deliver_hdr: HeaderCopy,
}

/// A retransmission copy deferred past the critical path. The layer asked for the message as
/// the fast path left it, header area and body; that is the sent datagram without the
/// preamble and with the full header area. So instead of copying on the send path, the
/// accelerator waits for the link to finish with the datagram
/// ([`Connection::transmit_with`](crate::Connection::transmit_with)) and takes the buffer back
/// as the copy. Where a body transform below the layer (sealing) changed the datagram, the copy
/// keeps it, marked ([`Msg::transformed`]), for a layer that only resends its copy: the
/// transform is taken back only if the copy is sent again, which most never are. Only where
/// a transform cannot take itself back, the layer reads its copy, or several layers want
/// copies, is the copy taken eagerly, before the transforms.
/// Invariant: while a reclaim is pending, its datagram is in the core's transmit queue;
/// whatever takes it out of the queue settles the reclaim first.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Reclaim {
    /// The layer that wants the copy.
    pub(crate) layer: usize,
    /// The datagram's buffer ([`Msg::buffer_id`]).
    pub(crate) id: usize,
    /// The body's length (what follows the wire header).
    pub(crate) body_len: usize,
    /// With body transforms below the layer, the bytes of their trailers, which the copy
    /// leaves off (it is then marked [`Msg::transformed`]).
    pub(crate) trailers: Option<usize>,
}

impl Pending {
    /// Nothing pending, for header areas of `header_len` bytes.
    pub(crate) fn new(header_len: usize) -> Pending {
        let empty = HeaderCopy::zeroed(header_len);
        Pending {
            send: false,
            send_hdr: empty,
            copies: Vec::new(),
            reclaim: None,
            deliver: false,
            deliver_hdr: empty,
        }
    }

    /// Whether neither a send nor a delivery waits for its post-phases.
    #[inline(always)]
    pub(crate) fn is_none(&self) -> bool {
        !self.send && !self.deliver
    }

    /// Whether `m`, leaving the transmit queue, is the datagram the deferred copy waits for.
    #[inline(always)]
    pub(crate) fn awaits(&self, m: &Msg) -> bool {
        self.reclaim.is_some_and(|r| r.id == m.buffer_id())
    }
}
