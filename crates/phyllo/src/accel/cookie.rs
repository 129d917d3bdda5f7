//! Connection identification and cookies (van Renesse, "Masking the Overhead of Protocol Layering"
//! (seed 004 §2.2)): who a datagram belongs to.
//!
//! Every accelerated datagram starts with the 8-byte [`preamble`](super::preamble): a bit
//! saying whether the connection identification follows, the byte order of the headers, and
//! the sender's random 62-bit cookie. The identification (a 64-bit connection-id field of the
//! header area, chosen by the initiator) travels on the first messages and on retransmissions
//! and unusual messages; afterwards the cookie alone names the connection.
//!
//! Beyond the paper: the sender keeps adding the identification until the peer has shown (the
//! `cookie_ack` gossip bit) that it knows the cookie, so losing the first message costs
//! nothing extra. The cookie also travels inside the header area with the identification (a
//! connection-identification field, so it is left off usual datagrams like the rest): the
//! layers' checksums and seals cover it there, while nothing covers the preamble. A datagram
//! whose two cookies differ is refused, and what a datagram teaches (the identification, the
//! peer's cookie, whether the peer knows ours) is learnt only if the stack accepts it: neither
//! a forged nor a corrupted datagram can change what a connection expects.

use super::preamble::{Preamble, PreambleError, COOKIE_MASK, PREAMBLE_LEN};
use super::stats::AccelStats;
use crate::field::{read_bits, write_bits, Bit, ByteOrder, FieldClass, FieldHandle, FieldLoc};
use crate::layout::{FieldRegistry, Layout, ACCEL_LAYER, MAX_HEADER};
use crate::msg::Msg;

/// The accelerator's own fields, registered above every layer so checksums cover them.
#[derive(Clone, Copy, Debug)]
pub(crate) struct PaFields {
    /// The connection identification (class ConnId).
    pub(crate) conn: FieldHandle,
    /// The sender's cookie, with the identification (class ConnId).
    pub(crate) cookie: FieldHandle,
    /// Gossip: this end knows the peer's cookie.
    pub(crate) cookie_ack: FieldHandle,
    /// Message-specific: the body is packed ([`super::pack`]).
    pub(crate) packed: FieldHandle,
}

/// Register the accelerator's own fields.
pub(crate) fn declare(reg: &mut FieldRegistry) -> PaFields {
    reg.set_layer(ACCEL_LAYER);
    PaFields {
        conn: reg.add_field(FieldClass::ConnId, "conn", 64, None),
        cookie: reg.add_field(FieldClass::ConnId, "cookie", 62, None),
        cookie_ack: reg.add_field(FieldClass::Gossip, "cookie_ack", 1, None),
        packed: reg.add_field(FieldClass::MsgSpecific, "packed", 1, None),
    }
}

/// What the identification state of a connection was, to undo learning from a datagram the
/// stack then refused.
#[derive(Clone, Copy)]
pub(crate) struct Learnt {
    conn_ident: Option<u64>,
    peer_cookie: Option<u64>,
    peer_knows_cookie: bool,
}

/// Why a datagram was refused before the stack saw it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Refused {
    /// Shorter than the preamble and headers.
    Truncated,
    /// A cookie this connection does not know, without the identification.
    UnknownCookie,
    /// The identification of another connection, or a datagram whose cookie in the header
    /// is not the one in its preamble.
    UnknownConn,
}

/// A datagram's identification checked out: what it would teach.
pub(crate) struct Admitted {
    /// The identification and the peer's cookie it carried, if it carried them.
    pub(crate) learn: Option<(u64, u64)>,
    /// The byte order its headers were written in.
    pub(crate) order: ByteOrder,
}

/// The identification state of one connection.
pub(crate) struct Ident {
    cookie: u64,
    peer_cookie: Option<u64>,
    peer_knows_cookie: bool,
    /// Never tell the peer we know its cookie (an endpoint found it ambiguous): the peer then
    /// keeps sending the identification.
    cookie_ack_blocked: bool,
    conn_ident: Option<u64>,
    conn_id_len: usize,
    conn_loc: FieldLoc,
    cookie_loc: FieldLoc,
    /// The identification area of the peer's datagrams in native order (the identification
    /// and the peer's cookie), restored in front of a usual datagram's header.
    rx_ident: [u8; MAX_HEADER],
    /// The two preambles this connection sends: without and with the identification (they
    /// change only with the cookie and the order, both fixed).
    preambles: [[u8; PREAMBLE_LEN]; 2],
    /// The preamble of the peer's usual datagram, once its cookie is known: no
    /// identification, this end's byte order, the peer's cookie. Header prediction applied
    /// to the preamble: one 8-byte comparison admits a datagram to the delivery fast path.
    usual_preamble: Option<[u8; PREAMBLE_LEN]>,
    /// The `cookie_ack` bit in native-order header areas.
    cookie_ack: Bit,
    cookie_ack_loc: FieldLoc,
}

impl Ident {
    /// This end's identification state: `cookie` (masked to 62 bits), and the
    /// identification if this end chose it (the initiator).
    pub(crate) fn new(layout: &Layout, f: PaFields, cookie: u64, conn_ident: Option<u64>) -> Ident {
        let cookie = cookie & COOKIE_MASK;
        let cookie_ack_loc = layout.loc(f.cookie_ack);
        Ident {
            cookie,
            peer_cookie: None,
            peer_knows_cookie: false,
            cookie_ack_blocked: false,
            conn_ident,
            conn_id_len: layout.conn_id_len(),
            conn_loc: layout.loc(f.conn),
            cookie_loc: layout.loc(f.cookie),
            rx_ident: [0; MAX_HEADER],
            preambles: [false, true].map(|present| {
                Preamble {
                    conn_id_present: present,
                    order: layout.order(),
                    cookie,
                }
                .to_bytes()
            }),
            usual_preamble: None,
            cookie_ack: Bit::of(cookie_ack_loc, layout.header_len(), layout.order())
                .unwrap_or(Bit::NEVER),
            cookie_ack_loc,
        }
    }

    /// This end's cookie.
    pub(crate) fn cookie(&self) -> u64 {
        self.cookie
    }

    /// The peer's cookie, once learnt.
    pub(crate) fn peer_cookie(&self) -> Option<u64> {
        self.peer_cookie
    }

    /// The identification, once known.
    pub(crate) fn conn_ident(&self) -> Option<u64> {
        self.conn_ident
    }

    /// Where the identification lives in the header area.
    pub(crate) fn conn_loc(&self) -> FieldLoc {
        self.conn_loc
    }

    /// Stop acknowledging the peer's cookie.
    pub(crate) fn block_cookie_ack(&mut self) {
        self.cookie_ack_blocked = true;
    }

    /// Write the accelerator's fields into the template header area `t` (zeroed, the
    /// layout's order): the identification and the cookie acknowledgement. Layer-originated
    /// messages and the send prediction start from it.
    pub(crate) fn write_template(&mut self, t: &mut [u8], order: ByteOrder) {
        if let Some(id) = self.conn_ident {
            write_bits(t, self.conn_loc, order, id);
        }
        write_bits(t, self.cookie_loc, order, self.cookie);
        let cid = self.conn_id_len.min(t.len());
        let mut rx = [0u8; MAX_HEADER];
        self.write_rx_ident(&mut rx[..cid], order);
        self.rx_ident = rx;
        let ack = self.peer_cookie.is_some() && !self.cookie_ack_blocked;
        write_bits(t, self.cookie_ack_loc, order, ack as u64);
        self.usual_preamble = self.peer_cookie.map(|cookie| {
            Preamble {
                conn_id_present: false,
                order,
                cookie,
            }
            .to_bytes()
        });
    }

    /// Whether this end may send: it knows the identification (a responder learns it from
    /// the initiator's first datagram; until then its messages wait in the backlog).
    #[inline(always)]
    pub(crate) fn can_send(&self) -> bool {
        self.conn_ident.is_some()
    }

    /// Write the identification area of the peer's datagrams (the identification and the
    /// peer's cookie) into `h`, in `order`.
    fn write_rx_ident(&self, h: &mut [u8], order: ByteOrder) {
        write_bits(h, self.conn_loc, order, self.conn_ident.unwrap_or(0));
        write_bits(h, self.cookie_loc, order, self.peer_cookie.unwrap_or(0));
    }

    /// The identification area of the peer's usual datagram, native order.
    #[inline(always)]
    pub(crate) fn rx_ident(&self) -> &[u8] {
        &self.rx_ident[..self.conn_id_len]
    }

    /// Put the preamble on an outgoing datagram (header area of `header_len` bytes and body, in
    /// `order`), leaving the identification off once the peer knows our cookie. A datagram
    /// that carries the identification carries the current one, whatever header it was built
    /// from (a retransmission copy made before it was known).
    #[inline(always)]
    pub(crate) fn wrap(
        &self,
        m: &mut Msg,
        header_len: usize,
        order: ByteOrder,
        stats: &mut AccelStats,
    ) {
        let present = !self.peer_knows_cookie;
        let mut header = header_len;
        if present {
            self.with_identification(m, header_len, order, stats);
        } else {
            m.pop_front(self.conn_id_len);
            header -= self.conn_id_len;
        }
        m.prepend_array(&self.preambles[present as usize]);
        stats.header_bytes += (PREAMBLE_LEN + header) as u64;
    }

    /// A datagram that carries the identification: the current one goes in (the first
    /// datagrams of a connection only, off the usual path).
    #[cold]
    #[inline(never)]
    fn with_identification(
        &self,
        m: &mut Msg,
        header_len: usize,
        order: ByteOrder,
        stats: &mut AccelStats,
    ) {
        stats.with_conn_id += 1;
        if let (Some(id), Some(h)) = (self.conn_ident, m.data_mut().get_mut(..header_len)) {
            write_bits(h, self.conn_loc, order, id);
        }
    }

    /// The wire header of a usual data message: preamble and header area without the
    /// identification.
    pub(crate) fn data_header_bytes(&self, header_len: usize) -> usize {
        PREAMBLE_LEN + header_len - self.conn_id_len
    }

    /// Whether `m` starts with the peer's usual preamble and is long enough for the header
    /// area of `header_len` bytes once the identification is restored.
    #[inline(always)]
    pub(crate) fn is_usual(&self, m: &Msg, header_len: usize) -> bool {
        match (self.usual_preamble, m.data().first_chunk::<PREAMBLE_LEN>()) {
            (Some(usual), Some(pre)) => {
                *pre == usual && m.len() + self.conn_id_len >= PREAMBLE_LEN + header_len
            }
            _ => false,
        }
    }

    /// Parse the preamble of any datagram, check its cookie or identification, and leave
    /// `m` as the full header area (identification restored from `template`, still in the
    /// sender's byte order) and body.
    pub(crate) fn admit(
        &self,
        m: &mut Msg,
        header_len: usize,
        native: ByteOrder,
    ) -> Result<Admitted, Refused> {
        let pre =
            Preamble::read(m.data()).map_err(|PreambleError::Truncated(_)| Refused::Truncated)?;
        m.pop_front(PREAMBLE_LEN);
        let cid = self.conn_id_len;
        if pre.conn_id_present {
            if m.len() < header_len {
                return Err(Refused::Truncated);
            }
            let ident = read_bits(&m.data()[..cid], self.conn_loc, pre.order);
            let cookie = read_bits(&m.data()[..cid], self.cookie_loc, pre.order);
            if self.conn_ident.is_some_and(|mine| mine != ident) || cookie != pre.cookie {
                return Err(Refused::UnknownConn);
            }
            return Ok(Admitted {
                learn: Some((ident, pre.cookie)),
                order: pre.order,
            });
        }
        if self.peer_cookie != Some(pre.cookie) {
            return Err(Refused::UnknownCookie);
        }
        if m.len() + cid < header_len {
            return Err(Refused::Truncated);
        }
        // Restore the identification left off the wire, in the sender's byte order like the
        // rest of the header (converted with it).
        if pre.order == native {
            m.prepend(self.rx_ident());
        } else {
            let h = m.push_front(cid);
            h.fill(0);
            self.write_rx_ident(h, pre.order);
        }
        Ok(Admitted {
            learn: None,
            order: pre.order,
        })
    }

    /// Whether a datagram with header area `h` (native order) teaches nothing: no
    /// identification learnt, and the peer's cookie acknowledgement as it was.
    #[inline(always)]
    pub(crate) fn teaches_nothing(&self, h: &[u8], learn: &Option<(u64, u64)>) -> bool {
        learn.is_none() && self.cookie_ack.get(h) == self.peer_knows_cookie
    }

    /// Learn what a datagram with header area `h` teaches; returns what to restore should
    /// the stack refuse it.
    pub(crate) fn learn(&mut self, h: &[u8], learn: Option<(u64, u64)>) -> Learnt {
        let saved = Learnt {
            conn_ident: self.conn_ident,
            peer_cookie: self.peer_cookie,
            peer_knows_cookie: self.peer_knows_cookie,
        };
        if let Some((ident, cookie)) = learn {
            self.conn_ident = Some(ident);
            self.peer_cookie = Some(cookie);
        }
        // Not sticky: a peer that stops acknowledging our cookie (its endpoint found it
        // ambiguous) gets the identification again.
        self.peer_knows_cookie = self.cookie_ack.get(h);
        saved
    }

    /// Undo [`learn`](Self::learn).
    pub(crate) fn unlearn(&mut self, saved: Learnt) {
        self.conn_ident = saved.conn_ident;
        self.peer_cookie = saved.peer_cookie;
        self.peer_knows_cookie = saved.peer_knows_cookie;
    }
}

/// A fresh random cookie and identification (`forced`: the cookie tests choose). Without an
/// entropy source both are still unique per process and time.
pub(crate) fn fresh(forced: Option<u64>) -> (u64, u64) {
    let mut seed = [0u8; 16];
    if getrandom::fill(&mut seed).is_err() {
        let t = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos() as u64);
        seed[..8].copy_from_slice(&t.to_le_bytes());
        seed[8..].copy_from_slice(&(std::process::id() as u64).to_le_bytes());
    }
    let [c, i] = [0, 8].map(|at| {
        let mut b = [0u8; 8];
        b.copy_from_slice(&seed[at..at + 8]);
        u64::from_le_bytes(b)
    });
    (forced.unwrap_or(c), i)
}
