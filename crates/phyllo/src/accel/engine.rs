//! The Protocol Accelerator in front of a connection's stack: seed 004 §3-4, Figure 3.
//!
//! - **send**: if the send header is disabled, post-sending is pending, or messages wait, the
//!   message joins the backlog (and will leave packed). Otherwise the predicted header is
//!   copied in, the send filter fills the message-specific fields, body-transforming layers
//!   (`seal`) run, the preamble goes on and the datagram is out; post-sending is deferred. A
//!   filter rejection takes the layered path (PRESEND).
//! - **from_network**: the preamble names the connection by cookie (or carries the connection
//!   identification); the delivery filter checks the message-specific fields; if delivery is
//!   enabled and the protocol-specific header equals the prediction, the message is delivered
//!   (unpacked if packed) and post-delivery is deferred. Any miss takes the layered path
//!   (PREDELIVER).
//! - **post_process**: runs the deferred post-phase, updates the predictions, and sends the
//!   backlog packed. The driver calls it when the application is idle; the next operation on
//!   the connection runs it first if it is still pending.
//!
//! Beyond the paper: the sender keeps adding the connection identification until the peer has
//! shown (a gossip bit) that it knows the cookie, so losing the first message costs nothing
//! extra; packing takes messages of any size up to the MTU.

use crate::accel::preamble::{Preamble, COOKIE_MASK, PREAMBLE_LEN};
use crate::conn::Connection;
use crate::field::{
    image_in, le_word, read_bits, write_bits, Bit, ByteOrder, FieldClass, FieldHandle,
};
use crate::filter::{
    verify, CompiledFilter, Direction, FieldTable, FilterCtx, ProgramBuilder, MISS_FRAGMENT,
};
use crate::layer::{Handoff, HeaderCopy, Predict, Verdict};
use crate::layout::{FieldRegistry, Layout, ACCEL_LAYER, MAX_HEADER};
use crate::msg::Msg;
use crate::stack::LayerSet;
use crate::time::Time;
use std::collections::VecDeque;

/// Why a message left the fast path.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Miss {
    /// The predicted header was disabled by a layer (e.g. window full).
    Disabled,
    /// The filter rejected the message (non-zero return).
    Filter,
    /// A fragment, or a message that must be fragmented.
    Fragment,
    /// The protocol-specific header differed from the prediction.
    Mismatch,
}

/// Counters of the accelerator of one connection.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct AccelStats {
    /// Application messages sent on the fast path (packed ones counted one by one).
    pub fast_send_msgs: u64,
    /// Application messages sent on the layered path.
    pub slow_send_msgs: u64,
    /// Application messages delivered on the fast path.
    pub fast_deliver_msgs: u64,
    /// Application messages delivered on the layered path.
    pub slow_deliver_msgs: u64,
    /// Datagrams received that took the fast path.
    pub fast_deliver_datagrams: u64,
    /// Send misses: disabled, filter, fragment.
    pub send_miss: [u64; 3],
    /// Delivery misses: disabled, filter, fragment, mismatch.
    pub deliver_miss: [u64; 4],
    /// Datagrams dropped: unknown cookie without identification.
    pub unknown_cookie: u64,
    /// Datagrams dropped: identification of another connection.
    pub unknown_conn: u64,
    /// Datagrams dropped: packed body whose lengths lie.
    pub bad_packing: u64,
    /// Datagrams dropped: shorter than the preamble and headers.
    pub truncated: u64,
    /// Datagrams sent with the connection identification.
    pub with_conn_id: u64,
    /// Wire header bytes sent (preamble + identification + headers), all datagrams.
    pub header_bytes: u64,
    /// Packed datagrams sent and the messages they carried.
    pub packed_datagrams: u64,
    /// Messages carried in packed datagrams.
    pub packed_msgs: u64,
    /// Most messages in one packed datagram.
    pub max_pack: u64,
}

impl AccelStats {
    /// Application messages that took the fast path, over all sent and delivered.
    pub fn hit_ratio(&self) -> f64 {
        let fast = self.fast_send_msgs + self.fast_deliver_msgs;
        let all = fast + self.slow_send_msgs + self.slow_deliver_msgs;
        if all == 0 {
            f64::NAN
        } else {
            fast as f64 / all as f64
        }
    }

    fn miss(&mut self, send: bool, m: Miss) {
        let i = match m {
            Miss::Disabled => 0,
            Miss::Filter => 1,
            Miss::Fragment => 2,
            Miss::Mismatch => 3,
        };
        if send {
            self.send_miss[i.min(2)] += 1;
        } else {
            self.deliver_miss[i] += 1;
        }
    }
}

#[derive(Clone, Copy, Debug)]
pub(crate) struct PaFields {
    conn: FieldHandle,
    cookie_ack: FieldHandle,
    packed: FieldHandle,
}

/// Register the accelerator's own fields (above every layer, so checksums cover them).
pub(crate) fn declare(reg: &mut FieldRegistry) -> PaFields {
    reg.set_layer(ACCEL_LAYER);
    PaFields {
        conn: reg.add_field(FieldClass::ConnId, "conn", 64, None),
        cookie_ack: reg.add_field(FieldClass::Gossip, "cookie_ack", 1, None),
        packed: reg.add_field(FieldClass::MsgSpecific, "packed", 1, None),
    }
}

/// Deferred post-processing: at most one send and one delivery (seed 004 Table 3's `mode`
/// and `pre_msg`, per direction). Kept in place: the fast paths write the header copies
/// here directly instead of moving them around (callgrind: moving the copies in and out of
/// `Option`s cost ~60 instructions per message).
struct Pending {
    send: bool,
    /// The pending send's header (after the filter and any body transform).
    send_hdr: HeaderCopy,
    /// The retransmission copies taken for the pending send, by layer (an empty list kept
    /// between sends, so taking them allocates nothing).
    copies: Vec<(usize, Msg)>,
    /// The retransmission copy not taken yet: the pending send's datagram itself becomes it
    /// once the link is done with it (see [`Reclaim`]).
    reclaim: Option<Reclaim>,
    deliver: bool,
    /// The pending delivery's header.
    deliver_hdr: HeaderCopy,
}

/// A retransmission copy deferred past the critical path (seed 004 §3.1: saving a message
/// for retransmission is post-processing). The layer asked for the message as the fast path
/// left it, header area and body; that is the sent datagram without the preamble and with
/// the full header area. So instead of copying on the send path, the engine waits for the
/// link to finish with the datagram ([`Connection::transmit_with`]) and takes the buffer
/// back as the copy, with no copy at all. Only where the datagram differs from the copy (a
/// body transform such as sealing) or where several layers want copies is the copy taken
/// eagerly. Invariant: while a reclaim is pending, its datagram is in the connection's
/// transmit queue; whatever takes it out of the queue settles the reclaim first.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Reclaim {
    /// The layer that wants the copy.
    layer: usize,
    /// The datagram's buffer ([`Msg::buffer_id`]).
    id: usize,
    /// The body's length (what follows the wire header).
    body_len: usize,
}

impl Pending {
    fn new(header_len: usize) -> Pending {
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

    fn is_none(&self) -> bool {
        !self.send && !self.deliver
    }
}

/// Per-connection accelerator state (seed 004 Table 3, both directions).
pub(crate) struct Pa {
    f: PaFields,
    send_filter: CompiledFilter,
    deliver_filter: CompiledFilter,
    cookie: u64,
    peer_cookie: Option<u64>,
    peer_knows_cookie: bool,
    /// Never tell the peer we know its cookie (an endpoint found it ambiguous): the peer then
    /// keeps sending the identification.
    cookie_ack_blocked: bool,
    conn_ident: Option<u64>,
    conn_id_len: usize,
    predict_send: HeaderCopy,
    predict_deliver: HeaderCopy,
    /// The protocol-specific bits of the header area (what a delivery's prediction checks).
    proto_mask: [u8; MAX_HEADER],
    /// The two preambles this connection sends: without and with the identification (they
    /// change only with the cookie and the order, both fixed).
    preambles: [[u8; PREAMBLE_LEN]; 2],
    /// The preamble of the peer's usual datagram, once its cookie is known: no
    /// identification, this end's byte order, the peer's cookie. Header prediction applied
    /// to the preamble: one 8-byte comparison admits a datagram to the delivery fast path.
    usual_preamble: Option<[u8; PREAMBLE_LEN]>,
    /// The accelerator's own flags in native-order header areas (fixed with the layout).
    cookie_ack: Bit,
    packed: Bit,
    pending: Pending,
    /// Bodies waiting to be sent (no header area yet): packed (a sequence of varint length +
    /// bytes) or single, with the number of messages each carries.
    backlog: VecDeque<(Msg, bool, u64)>,
    backlog_bytes: usize,
    mtu: usize,
    /// The backlog's bound in bytes: 256 KiB, ~190 full datagrams, enough to keep a
    /// streaming sender's link busy while post-processing runs, and few enough buffers for
    /// the pool to recycle (with 4 MiB a 300 000-message UDP stream allocated fresh buffers
    /// for a fifth of its messages: 7.4-8.5 M msgs/s against 11.0-11.5 M with 256 KiB).
    max_backlog: usize,
    transform: Vec<usize>,
    /// How many layers at the bottom of the stack transform the body (run before the
    /// delivery filter).
    bottom_transforms: usize,
    /// False when a body-transforming layer sits above a plain one: its delivery could not
    /// be checked by the filter, so every delivery takes the layered path.
    fast_deliver: bool,
    copy: Vec<usize>,
    /// The one layer that wants a retransmission copy, when nothing transforms the body:
    /// the sent datagram becomes its copy ([`Reclaim`]). `None` otherwise (copies taken at
    /// once).
    reclaim_layer: Option<usize>,
    pub(crate) stats: AccelStats,
}

impl Pa {
    /// Set the packed bit of a send's header area (the prediction says "not packed": a
    /// message-specific field starts at zero) and count the packing. Out of line: packed
    /// datagrams leave from post-processing, off the latency path.
    #[inline(never)]
    fn mark_packed(&mut self, m: &mut Msg, layout: &Layout, msgs: u64) {
        let hl = layout.header_len();
        write_bits(
            &mut m.data_mut()[..hl],
            layout.loc(self.f.packed),
            layout.order(),
            1,
        );
        self.stats.packed_datagrams += 1;
        self.stats.packed_msgs += msgs;
        self.stats.max_pack = self.stats.max_pack.max(msgs);
    }

    /// Put the preamble on an outgoing datagram (header area of `header_len` bytes and body),
    /// leaving the identification off once the peer knows our cookie.
    #[inline]
    fn wrap(&mut self, m: &mut Msg, header_len: usize) {
        let present = !self.peer_knows_cookie;
        let mut header = header_len;
        if present {
            self.stats.with_conn_id += 1;
        } else {
            m.pop_front(self.conn_id_len);
            header -= self.conn_id_len;
        }
        m.prepend_array(&self.preambles[present as usize]);
        self.stats.header_bytes += (PREAMBLE_LEN + header) as u64;
    }
}

/// Build the accelerator: the compact layout's filters, cookies, first predictions.
pub(crate) fn build<S: LayerSet>(
    layers: &S,
    layout: &Layout,
    f: PaFields,
    mtu: usize,
    initiator: bool,
    forced_cookie: Option<u64>,
) -> Result<Pa, crate::filter::VerifyError> {
    let n = layers.count();
    let table = FieldTable::new(layout.header_len(), layout.locs().to_vec());
    let mut send = ProgramBuilder::new();
    let mut deliver = ProgramBuilder::new();
    let mut cover_layer = None;
    for i in 0..n {
        let id = i as crate::filter::LayerId;
        layers.send_filter_at(i, send.segment(id));
        layers.deliver_filter_at(i, deliver.segment(id));
        let uses_cover = send.segments().iter().any(|s| {
            s.layer() == id
                && s.ops().iter().any(|o| {
                    matches!(o, crate::filter::Op::Digest(d)
                        if *d == crate::filter::DigestId::INET_CHECKSUM_COVERED)
                })
        });
        if uses_cover {
            cover_layer = Some(i);
        }
    }
    let cover = cover_layer.map_or(&[][..], |i| layout.upper_fields(i));
    let send_filter = verify(&send.build(), &table, Direction::Send)?
        .with_cover(cover)
        .compile();
    let deliver_filter = verify(&deliver.build(), &table, Direction::Deliver)?
        .with_cover(cover)
        .compile();
    let mut seed = [0u8; 16];
    // Without an entropy source the cookie is still unique per process and time.
    if getrandom::fill(&mut seed).is_err() {
        let t = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos() as u64);
        seed[..8].copy_from_slice(&t.to_le_bytes());
        seed[8..].copy_from_slice(&(std::process::id() as u64).to_le_bytes());
    }
    let cookie = forced_cookie
        .unwrap_or_else(|| u64::from_le_bytes(seed[..8].try_into().unwrap_or([1; 8])))
        & COOKIE_MASK;
    let ident = u64::from_le_bytes(seed[8..].try_into().unwrap_or([2; 8]));
    let empty = HeaderCopy::zeroed(layout.header_len());
    let transform: Vec<usize> = (0..n).filter(|&i| layers.transforms_body_at(i)).collect();
    let bottom_transforms = (0..n)
        .rev()
        .take_while(|&i| layers.transforms_body_at(i))
        .count();
    // Both are one-bit fields of the layout's header area, so each has its bit.
    let accessors = [f.cookie_ack, f.packed]
        .map(|h| Bit::of(layout.loc(h), layout.header_len(), layout.order()).unwrap_or(Bit::NEVER));
    let copy: Vec<usize> = (0..n).filter(|&i| layers.wants_copy_at(i)).collect();
    let reclaim_layer = match *copy {
        [layer] if transform.is_empty() => Some(layer),
        _ => None,
    };
    Ok(Pa {
        f,
        send_filter,
        deliver_filter,
        cookie,
        peer_cookie: None,
        peer_knows_cookie: false,
        cookie_ack_blocked: false,
        conn_ident: initiator.then_some(ident),
        conn_id_len: layout.conn_id_len(),
        predict_send: empty,
        predict_deliver: empty,
        proto_mask: {
            let mut m = [0; MAX_HEADER];
            let bits = layout.class_mask(&[FieldClass::ProtoSpecific]);
            let n = bits.len().min(MAX_HEADER);
            m[..n].copy_from_slice(&bits[..n]);
            m
        },
        preambles: [false, true].map(|present| {
            Preamble {
                conn_id_present: present,
                order: layout.order(),
                cookie,
            }
            .to_bytes()
        }),
        usual_preamble: None,
        cookie_ack: accessors[0],
        packed: accessors[1],
        pending: Pending::new(layout.header_len()),
        backlog: VecDeque::new(),
        backlog_bytes: 0,
        mtu,
        max_backlog: 256 << 10,
        // Every body transform must sit at the bottom for the filter to see the plaintext.
        fast_deliver: transform.len() == bottom_transforms,
        transform,
        bottom_transforms,
        reclaim_layer,
        copy,
        stats: AccelStats::default(),
    })
}

fn varint_len(v: usize) -> usize {
    match v {
        0..=0x7f => 1,
        0x80..=0x3fff => 2,
        0x4000..=0x1f_ffff => 3,
        _ => 4,
    }
}

fn put_varint(m: &mut Msg, mut v: usize) {
    while v >= 0x80 {
        m.extend_from_slice(&[(v as u8 & 0x7f) | 0x80]);
        v >>= 7;
    }
    m.extend_from_slice(&[v as u8]);
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

/// Split a packed body into its messages' byte ranges; `None` if the lengths lie.
pub fn unpack_ranges(body: &[u8], out: &mut Vec<(usize, usize)>) -> bool {
    out.clear();
    let mut at = 0;
    while at < body.len() {
        let Some((len, n)) = get_varint(&body[at..]) else {
            return false;
        };
        at += n;
        if len > body.len() - at {
            return false;
        }
        out.push((at, len));
        at += len;
    }
    !out.is_empty()
}

impl<S: LayerSet> Connection<S> {
    fn pa(&mut self) -> &mut Pa {
        self.pa.as_mut().expect("accelerated connection")
    }

    /// Recompute the predicted send and delivery headers from the layers' state, in place:
    /// the send prediction starts from the template (the accelerator's own fields, kept
    /// current by `update_template`), the delivery prediction from zero (only its
    /// protocol-specific bits are compared).
    pub(crate) fn update_predictions(&mut self) {
        let Some(pa) = self.pa.as_mut() else { return };
        let hl = self.layout.header_len();
        let ps = &mut pa.predict_send.bytes[..hl];
        ps.copy_from_slice(&self.template.bytes[..hl]);
        let pd = &mut pa.predict_deliver.bytes[..hl];
        pd.fill(0);
        for i in 0..self.layers.count() {
            self.layers.predict_send_at(
                i,
                &mut Predict {
                    bytes: &mut *ps,
                    layout: &self.layout,
                },
            );
            self.layers.predict_deliver_at(
                i,
                &mut Predict {
                    bytes: &mut *pd,
                    layout: &self.layout,
                },
            );
        }
    }

    /// The header area layer-originated messages start from: the accelerator's fields only.
    /// Called whenever the identification or the cookie state changes; the predictions start
    /// from it, so they are refreshed too.
    pub(crate) fn update_template(&mut self) {
        let Some(pa) = self.pa.as_ref() else { return };
        let hl = self.layout.header_len();
        let order = self.layout.order();
        let t = &mut self.template;
        t.len = hl;
        t.bytes = [0; MAX_HEADER];
        if let Some(id) = pa.conn_ident {
            write_bits(&mut t.bytes[..hl], self.layout.loc(pa.f.conn), order, id);
        }
        write_bits(
            &mut t.bytes[..hl],
            self.layout.loc(pa.f.cookie_ack),
            order,
            (pa.peer_cookie.is_some() && !pa.cookie_ack_blocked) as u64,
        );
        let usual = pa.peer_cookie.map(|cookie| {
            Preamble {
                conn_id_present: false,
                order,
                cookie,
            }
            .to_bytes()
        });
        self.pa().usual_preamble = usual;
        self.update_predictions();
    }

    /// Accelerated send (seed 004 Figure 3, `send`).
    #[inline]
    pub(crate) fn pa_send(&mut self, now: Time, m: Msg) {
        // A reply right after a delivery does not wait for that delivery's post-processing:
        // the send prediction's protocol-specific fields depend only on the send state, and
        // its gossip (the acknowledgement) may be out of date by definition (seed 004 §2.1);
        // the window layer's post-send only counts the acknowledgement the message carried.
        // This keeps the delivery's post-phase off the round trip's critical path.
        let pa = self.pa();
        let queue = pa.pending.send || !pa.backlog.is_empty() || self.disable[0] > 0;
        if queue {
            self.backlog_push(m);
            return;
        }
        self.send_one(now, m, false, 1);
    }

    /// Whether the backlog can take another message (it is bounded in bytes).
    pub(crate) fn pa_can_accept(&self) -> bool {
        self.pa
            .as_ref()
            .is_none_or(|pa| pa.backlog_bytes < pa.max_backlog)
    }

    /// Queue a message behind the pending send: packed with its neighbours when it fits a
    /// datagram (its buffer goes back to the pool), else on its own.
    fn backlog_push(&mut self, msg: Msg) {
        let mtu = self.pa().mtu;
        let len = msg.len();
        let need = varint_len(len) + len;
        let pa = self.pa.as_mut().expect("accelerated connection");
        if need > mtu {
            pa.backlog_bytes += len;
            pa.backlog.push_back((msg, false, 1));
            return;
        }
        pa.backlog_bytes += need;
        match pa.backlog.back_mut() {
            Some((m, true, count)) if m.len() + need <= mtu => {
                put_varint(m, len);
                m.extend_from_slice(msg.data());
                *count += 1;
            }
            _ => {
                let mut m = self.pool.alloc();
                put_varint(&mut m, len);
                m.extend_from_slice(msg.data());
                pa.backlog.push_back((m, true, 1));
            }
        }
        self.pool.free(msg);
    }

    /// Send one body on the fast path if it can, else layered: the predicted header goes in
    /// front of it.
    #[inline]
    fn send_one(&mut self, now: Time, mut m: Msg, packed: bool, msgs: u64) {
        let hl = self.layout.header_len();
        let order = self.layout.order();
        let Some(pa) = self.pa.as_deref_mut() else {
            return;
        };
        m.prepend(&pa.predict_send.bytes[..hl]);
        if packed {
            pa.mark_packed(&mut m, &self.layout, msgs);
        }
        // `None`: a layer disabled the send header.
        let verdict = if self.disable[0] > 0 {
            None
        } else {
            let (h, b) = m.data_mut().split_at_mut(hl);
            Some(pa.send_filter.run(&mut FilterCtx::send(h, order, b)))
        };
        if verdict != Some(0) {
            self.send_missed(now, m, verdict, msgs);
            return;
        }
        pa.stats.fast_send_msgs += msgs;
        match pa.reclaim_layer {
            Some(layer) => self.send_passed(m, Some(layer)),
            None => self.send_passed_general(now, m),
        }
    }

    /// The send filter refused a message (`verdict`, its result), or a layer disabled the
    /// send header (`None`): the layered path sends it.
    #[cold]
    #[inline(never)]
    fn send_missed(&mut self, now: Time, m: Msg, verdict: Option<u64>, msgs: u64) {
        let why = match verdict {
            None => Miss::Disabled,
            Some(MISS_FRAGMENT) => Miss::Fragment,
            Some(_) => Miss::Filter,
        };
        let pa = self.pa();
        pa.stats.miss(true, why);
        pa.stats.slow_send_msgs += msgs;
        self.run_send(now, 0, m);
        self.drain(now);
        self.update_predictions();
    }

    /// A fast-path send whose retransmission copies are taken now (several layers want one)
    /// or whose body a layer transforms (sealing) before it goes out.
    #[inline(never)]
    fn send_passed_general(&mut self, now: Time, mut m: Msg) {
        let pa = self.pa.as_deref_mut().expect("accelerated connection");
        for &i in &pa.copy {
            pa.pending.copies.push((i, self.pool.alloc_copy(m.data())));
        }
        if !pa.transform.is_empty() && !self.transform_send(now, &mut m) {
            return;
        }
        self.send_passed(m, None);
    }

    /// Put a message that passed the send filter on the link (`transmit`, with the
    /// accelerator at hand) and leave its post-processing pending; `reclaim`: the layer whose
    /// retransmission copy the sent datagram becomes.
    #[inline(always)]
    fn send_passed(&mut self, mut m: Msg, reclaim: Option<usize>) {
        let hl = self.layout.header_len();
        let Some(pa) = self.pa.as_deref_mut() else {
            return;
        };
        pa.pending.send_hdr.set(&m.data()[..hl]);
        pa.pending.send = true;
        let body_len = m.len() - hl;
        pa.wrap(&mut m, hl);
        if let Some(layer) = reclaim {
            pa.pending.reclaim = Some(Reclaim {
                layer,
                id: m.buffer_id(),
                body_len,
            });
        }
        self.queue_out(m);
    }

    /// Whether `m` (leaving the transmit queue) is the datagram a deferred retransmission
    /// copy waits for.
    #[inline]
    pub(crate) fn awaits(&self, m: &Msg) -> bool {
        self.pa
            .as_ref()
            .and_then(|pa| pa.pending.reclaim)
            .is_some_and(|r| r.id == m.buffer_id())
    }

    /// Settle the deferred retransmission copy with its datagram `m`, which leaves the
    /// transmit queue: `m` itself becomes the copy if the link is done with it (`sent`),
    /// else (the caller keeps it) a copy is taken now.
    pub(crate) fn settle_reclaim(&mut self, mut m: Msg, sent: bool) -> Option<Msg> {
        let hl = self.layout.header_len();
        let pa = self.pa.as_deref_mut()?;
        let r = pa.pending.reclaim.take()?;
        let wire_hdr = m.len().saturating_sub(r.body_len);
        let (mut copy, out) = if sent {
            m.pop_front(wire_hdr);
            (m, None)
        } else {
            (self.pool.alloc_copy(&m.data()[wire_hdr..]), Some(m))
        };
        copy.prepend(&pa.pending.send_hdr.bytes[..hl]);
        pa.pending.copies.push((r.layer, copy));
        out
    }

    /// Settle a deferred retransmission copy whose datagram is still queued (post-processing
    /// before the link took it): copy it from the queue.
    fn settle_queued_reclaim(&mut self) {
        let Some(r) = self.pa.as_ref().and_then(|pa| pa.pending.reclaim) else {
            return;
        };
        // It is usually the newest datagram (post-processing a streaming backlog settles
        // one copy per datagram while they all wait for the link).
        let Some(at) = self.out.iter().rposition(|m| m.buffer_id() == r.id) else {
            // Unreachable by the invariant on `Reclaim`.
            debug_assert!(false, "deferred copy's datagram left the queue unsettled");
            self.pa().pending.reclaim = None;
            return;
        };
        let m = std::mem::take(&mut self.out[at]);
        if let Some(m) = self.settle_reclaim(m, false) {
            self.out[at] = m;
        }
    }

    /// Run the body-transforming layers' pre-send on a fast-path message; `false` if one
    /// dropped it (the message and its retransmission copies are then freed).
    fn transform_send(&mut self, now: Time, m: &mut Msg) -> bool {
        let transform = std::mem::take(&mut self.pa().transform);
        let stop = self.pre_phases(now, transform.iter().copied(), true, m);
        self.pa().transform = transform;
        let Some((i, v)) = stop else {
            return true;
        };
        // Only a drop can stop a body transform on the send path.
        if let Verdict::Drop(r) = v {
            self.stats.layers[i].1.count(r);
        }
        self.pool.free(std::mem::take(m));
        let mut copies = std::mem::take(&mut self.pa().pending.copies);
        for (_, c) in copies.drain(..) {
            self.pool.free(c);
        }
        self.pa().pending.copies = copies;
        false
    }

    /// Run the deferred post-processing, then send the backlog packed (seed 004 §3.4).
    pub fn post_process(&mut self, now: Time) {
        if self.pa.is_none() {
            return;
        }
        loop {
            // A pending delivery is older than a pending send (receiving runs the pending
            // post-processing first), so it goes first.
            self.post_deliver_pending(now);
            let pa = self.pa();
            if pa.pending.send {
                pa.pending.send = false;
                self.settle_queued_reclaim();
                let pa = self.pa();
                let hdr = pa.pending.send_hdr;
                let mut copies = std::mem::take(&mut pa.pending.copies);
                for i in 0..self.layers.count() {
                    let copy = copies
                        .iter()
                        .position(|(l, _)| *l == i)
                        .map(|p| copies.swap_remove(p).1);
                    self.post_send(now, i, &hdr, Handoff::Passed { copy });
                }
                // Copies no layer took (none, unless a layer was removed) go back to the pool.
                for (_, c) in copies.drain(..) {
                    self.pool.free(c);
                }
                self.pa().pending.copies = copies;
                self.drain(now);
                self.update_predictions();
            }
            if self.disable[0] > 0 {
                return;
            }
            let Some((m, packed, count)) = self.pa().backlog.pop_front() else {
                return;
            };
            let pa = self.pa();
            pa.backlog_bytes = pa.backlog_bytes.saturating_sub(m.len());
            self.send_one(now, m, packed, count);
        }
    }

    fn post_deliver_pending(&mut self, now: Time) {
        let pa = self.pa();
        if pa.pending.deliver {
            pa.pending.deliver = false;
            let hdr = pa.pending.deliver_hdr;
            for i in (0..self.layers.count()).rev() {
                self.post_deliver(now, i, &hdr, Handoff::Passed { copy: None });
            }
            self.drain(now);
            self.update_predictions();
        }
    }

    /// Whether [`Connection::post_process`] would do something now.
    pub(crate) fn pa_actionable(&self) -> bool {
        self.pa.as_ref().is_some_and(|pa| {
            !pa.pending.is_none() || (!pa.backlog.is_empty() && self.disable[0] == 0)
        })
    }

    /// Whether post-processing or backlog is pending.
    pub(crate) fn pa_busy(&self) -> bool {
        self.pa
            .as_ref()
            .is_some_and(|pa| !pa.pending.is_none() || !pa.backlog.is_empty())
    }

    /// Put the preamble on an outgoing datagram (see [`Pa::wrap`]).
    #[inline]
    pub(crate) fn pa_wrap(&mut self, m: &mut Msg) {
        if let Some(pa) = self.pa.as_deref_mut() {
            pa.wrap(m, self.layout.header_len());
        }
    }

    /// Accelerated receive (seed 004 Figure 3, `from_network`).
    #[inline]
    pub(crate) fn pa_receive(&mut self, now: Time, mut m: Msg) {
        if self.pa_actionable() {
            self.post_process(now);
        }
        let hl = self.layout.header_len();
        let Some(pa) = self.pa.as_deref_mut() else {
            return;
        };
        // The usual datagram: the predicted preamble, long enough. Its identification was
        // left off; restore it (the template holds it, native order, in its first bytes).
        if let (Some(usual), Some(pre)) = (pa.usual_preamble, m.data().first_chunk()) {
            let cid = pa.conn_id_len;
            if *pre == usual && m.len() + cid >= PREAMBLE_LEN + hl {
                m.pop_front(PREAMBLE_LEN);
                m.prepend(&self.template.bytes[..cid]);
                self.rx_wire = self.layout.order();
                self.pa_accept(now, m, None);
                return;
            }
        }
        self.pa_receive_general(now, m);
    }

    /// [`Connection::pa_receive`] for any datagram: parse the preamble, check the cookie or
    /// the identification, restore the identification, convert the byte order.
    fn pa_receive_general(&mut self, now: Time, mut m: Msg) {
        let hl = self.layout.header_len();
        let native = self.layout.order();
        let conn_field = self.pa().f.conn;
        let conn_loc = self.layout.loc(conn_field);
        let Ok(pre) = Preamble::read(m.data()) else {
            self.pa().stats.truncated += 1;
            self.pool.free(m);
            return;
        };
        m.pop_front(PREAMBLE_LEN);
        self.rx_wire = pre.order;
        let cid = self.pa().conn_id_len;
        let pa = self.pa.as_mut().expect("accelerated connection");
        // What this datagram would teach us (identity, cookie, that the peer knows ours) is
        // learnt only if the stack accepts it: a forged datagram must not hijack the state.
        let mut learn = None;
        if pre.conn_id_present {
            if m.len() < hl {
                pa.stats.truncated += 1;
                self.pool.free(m);
                return;
            }
            let ident = read_bits(&m.data()[..cid], conn_loc, pre.order);
            if pa.conn_ident.is_some_and(|mine| mine != ident) {
                pa.stats.unknown_conn += 1;
                self.pool.free(m);
                return;
            }
            learn = Some((ident, pre.cookie));
        } else {
            if pa.peer_cookie != Some(pre.cookie) {
                pa.stats.unknown_cookie += 1;
                self.pool.free(m);
                return;
            }
            if m.len() + cid < hl {
                pa.stats.truncated += 1;
                self.pool.free(m);
                return;
            }
            // Restore the identification left off the wire, in the sender's byte order like
            // the rest of the header (converted below with it).
            if pre.order == native {
                // The template holds the identification, in native order, in its first bytes.
                m.prepend(&self.template.bytes[..cid]);
            } else {
                let ident = pa.conn_ident.unwrap_or(0);
                let h = m.push_front(cid);
                write_bits(h, conn_loc, pre.order, ident);
            }
        }
        if pre.order != native {
            convert_order(&mut m.data_mut()[..hl], &self.layout, pre.order);
        }
        self.pa_accept(now, m, learn);
    }

    /// A datagram with its full header area in native order: deliver it, first learning
    /// what it teaches (`learn`: the identification and the peer's cookie it carried; and
    /// whether the peer knows our cookie), undone if the stack drops it.
    #[inline(always)]
    fn pa_accept(&mut self, now: Time, m: Msg, learn: Option<(u64, u64)>) {
        let Some(pa) = self.pa.as_deref_mut() else {
            return;
        };
        let knows = pa.cookie_ack.get(m.data());
        if learn.is_none() && knows == pa.peer_knows_cookie {
            // The usual case: nothing to learn from this datagram.
            self.pa_deliver(now, m);
        } else {
            self.pa_learn(now, m, learn, knows);
        }
    }

    /// [`Connection::pa_accept`] of a datagram that teaches something: learn it, deliver,
    /// and forget it again if the stack dropped the datagram.
    #[inline(never)]
    fn pa_learn(&mut self, now: Time, m: Msg, learn: Option<(u64, u64)>, knows: bool) {
        let pa = self.pa.as_deref_mut().expect("accelerated connection");
        let saved = (pa.conn_ident, pa.peer_cookie, pa.peer_knows_cookie);
        if let Some((ident, cookie)) = learn {
            pa.conn_ident = Some(ident);
            pa.peer_cookie = Some(cookie);
        }
        // Not sticky: a peer that stops acknowledging our cookie (its endpoint found it
        // ambiguous) gets the identification again.
        pa.peer_knows_cookie = knows;
        // A reply may leave before this delivery is post-processed: its prediction must
        // already carry the identification and the cookie acknowledgement (the template
        // refreshes the predictions).
        self.update_template();
        let drops_before = self.stats.input_drops();
        self.pa_deliver(now, m);
        if self.stats.input_drops() != drops_before {
            let pa = self.pa();
            (pa.conn_ident, pa.peer_cookie, pa.peer_knows_cookie) = saved;
            self.update_template();
        }
    }

    /// The delivery fast path, or the layered path on a miss.
    #[inline]
    fn pa_deliver(&mut self, now: Time, m: Msg) {
        match self.pa.as_deref() {
            Some(pa) if pa.bottom_transforms > 0 => self.deliver_transformed(now, m),
            Some(_) => self.deliver_checked(now, m, 0),
            None => {}
        }
    }

    /// The fast path's checks (filter, enabled, prediction) on a delivery whose `transformed`
    /// bottom layers have run; then to the application, or to the layered path on a miss.
    #[inline(always)]
    fn deliver_checked(&mut self, now: Time, mut m: Msg, transformed: usize) {
        let hl = self.layout.header_len();
        let native = self.layout.order();
        let Some(pa) = self.pa.as_deref_mut() else {
            return;
        };
        let miss = {
            let (h, b) = m.data().split_at(hl);
            let mut ctx = FilterCtx::deliver(h, native, b).written_in(self.rx_wire);
            match pa.deliver_filter.run(&mut ctx) {
                0 if self.disable[1] > 0 || !pa.fast_deliver => Some(Miss::Disabled),
                0 => {
                    let same = masked_eq(h, &pa.predict_deliver.bytes, &pa.proto_mask);
                    (!same).then_some(Miss::Mismatch)
                }
                MISS_FRAGMENT => Some(Miss::Fragment),
                _ => Some(Miss::Filter),
            }
        };
        if let Some(why) = miss {
            self.deliver_missed(now, m, why, transformed);
            return;
        }
        let h = &m.data()[..hl];
        let packed = pa.packed.get(h);
        pa.pending.deliver_hdr.set(h);
        pa.pending.deliver = true;
        pa.stats.fast_deliver_datagrams += 1;
        m.pop_front(hl);
        if !packed {
            // `deliver_to_app`'s usual case, inline.
            pa.stats.fast_deliver_msgs += 1;
            self.stats.delivered += 1;
            self.delivered.push_back(m);
            return;
        }
        let delivered = self.deliver_to_app(m, packed);
        self.pa().stats.fast_deliver_msgs += delivered;
    }

    /// A delivery that missed the fast path (`why`) above the `transformed` bottom layers
    /// (which have run): the layered path takes it from there.
    #[cold]
    #[inline(never)]
    fn deliver_missed(&mut self, now: Time, m: Msg, why: Miss, transformed: usize) {
        let hl = self.layout.header_len();
        let n = self.layers.count();
        self.pa().stats.miss(false, why);
        let hdr = HeaderCopy::of(&m, hl);
        self.run_deliver(now, n - transformed, m);
        self.finish_layered_delivery(now, &hdr, n - transformed);
    }

    /// The delivery path of a stack with body transforms (decryption) at the bottom: they
    /// run first, as they would on the layered path, since the filter must see the
    /// plaintext; then the fast path's checks.
    #[inline(never)]
    fn deliver_transformed(&mut self, now: Time, mut m: Msg) {
        let hl = self.layout.header_len();
        let n = self.layers.count();
        let k = self.pa().bottom_transforms;
        let stop = self.pre_phases(now, (n - k..n).rev(), false, &mut m);
        for (_, c) in self.kept.drain(..) {
            self.pool.free(c);
        }
        let Some((i, v)) = stop else {
            self.deliver_checked(now, m, k);
            return;
        };
        // Refused below: finish on the layered path from there.
        let hdr = HeaderCopy::of(&m, hl);
        match v {
            Verdict::Drop(r) => {
                self.stats.layers[i].1.count(r);
                self.pool.free(m);
            }
            _ => self.post_deliver(now, i, &hdr, Handoff::Absorbed(m)),
        }
        self.finish_layered_delivery(now, &hdr, i + 1);
    }

    /// A delivery that left the fast path below layer `from`: the post-phases of the layers
    /// from there to the bottom (whose pre-phases the accelerator ran), then what they
    /// queued, then fresh predictions.
    fn finish_layered_delivery(&mut self, now: Time, hdr: &HeaderCopy, from: usize) {
        for j in from..self.layers.count() {
            self.post_deliver(now, j, hdr, Handoff::Passed { copy: None });
        }
        self.drain(now);
        self.update_predictions();
    }

    /// Hand a body to the application, unpacking it if packed; returns messages delivered.
    pub(crate) fn deliver_to_app(&mut self, m: Msg, packed: bool) -> u64 {
        if !packed {
            self.stats.delivered += 1;
            self.delivered.push_back(m);
            return 1;
        }
        let mut ranges = std::mem::take(&mut self.unpack_scratch);
        let n = if unpack_ranges(m.data(), &mut ranges) {
            for &(at, len) in &ranges {
                let part = self.pool.alloc_copy(&m.data()[at..at + len]);
                self.delivered.push_back(part);
            }
            self.stats.delivered += ranges.len() as u64;
            ranges.len() as u64
        } else {
            if let Some(pa) = self.pa.as_mut() {
                pa.stats.bad_packing += 1;
            }
            0
        };
        self.unpack_scratch = ranges;
        self.pool.free(m);
        n
    }

    /// Whether a header area (as delivered by the layers) says its body is packed.
    pub(crate) fn pa_packed(&self, hdr: &[u8]) -> bool {
        self.pa.as_ref().is_some_and(|pa| {
            read_bits(hdr, self.layout.loc(pa.f.packed), self.layout.order()) != 0
        })
    }

    /// Where the accelerator's connection identification lives in the header area.
    pub(crate) fn conn_ident_loc(&self) -> Option<crate::field::FieldLoc> {
        self.pa.as_ref().map(|pa| self.layout.loc(pa.f.conn))
    }

    /// This end's cookie (the one its datagrams carry), if accelerated.
    pub fn cookie(&self) -> Option<u64> {
        self.pa.as_ref().map(|pa| pa.cookie)
    }

    /// The peer's cookie, once learnt from a datagram with the identification.
    pub fn peer_cookie(&self) -> Option<u64> {
        self.pa.as_ref().and_then(|pa| pa.peer_cookie)
    }

    /// The connection identification (the initiator's choice), once known.
    pub fn conn_ident(&self) -> Option<u64> {
        self.pa.as_ref().and_then(|pa| pa.conn_ident)
    }

    /// Stop telling the peer that its cookie is known, so it keeps sending the
    /// identification: used by an [`Endpoint`](crate::endpoint::Endpoint) that found the cookie
    /// shared by two connections.
    pub fn block_cookie_ack(&mut self) {
        if let Some(pa) = self.pa.as_mut() {
            pa.cookie_ack_blocked = true;
        }
        self.update_template();
    }

    /// Counters of the accelerator, if this connection has one.
    pub fn accel_stats(&self) -> Option<&AccelStats> {
        self.pa.as_ref().map(|pa| &pa.stats)
    }

    /// The wire header of an ordinary data message once the peer knows the cookie: preamble
    /// plus headers without the identification (or the per-layer header area when not
    /// accelerated).
    pub fn data_header_bytes(&self) -> usize {
        match &self.pa {
            Some(pa) => PREAMBLE_LEN + self.layout.header_len() - pa.conn_id_len,
            None => self.layout.header_len(),
        }
    }
}

/// Whether `a` agrees with the first `a.len()` bytes of `b` on every bit set in `mask`,
/// eight bytes per load: the bytes after the last whole word are compared in the last eight
/// (callgrind: a byte loop over them cost ~40 instructions per delivery). `b` and `mask` are
/// whole header areas, so only `a`'s length is checked.
#[inline(always)]
fn masked_eq(a: &[u8], b: &[u8; MAX_HEADER], mask: &[u8; MAX_HEADER]) -> bool {
    let n = a.len().min(MAX_HEADER);
    #[inline(always)]
    fn differs(a: &[u8], b: &[u8], mask: &[u8], i: usize) -> bool {
        (le_word(&a[i..]) ^ le_word(&b[i..])) & le_word(&mask[i..]) != 0
    }
    if (8..=16).contains(&n) {
        // The usual header area: two loads each.
        return !differs(a, b, mask, 0) && !differs(a, b, mask, n - 8);
    }
    let mut i = 0;
    while i + 8 <= n {
        if differs(a, b, mask, i) {
            return false;
        }
        i += 8;
    }
    if i == n {
        true
    } else if n >= 8 {
        !differs(a, b, mask, n - 8)
    } else {
        (i..n).all(|j| (a[j] ^ b[j]) & mask[j] == 0)
    }
}

/// Rewrite every field of a header from `from` byte order into the layout's (read from a
/// copy of it, which holds the whole header since layouts are at most `MAX_HEADER` bytes:
/// no allocation per datagram).
fn convert_order(h: &mut [u8], layout: &Layout, from: ByteOrder) {
    let mut src = HeaderCopy::zeroed(0);
    src.set(h);
    image_in(
        &src.bytes[..src.len],
        from,
        layout.locs(),
        h,
        layout.order(),
    );
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
    fn masked_eq_looks_only_at_masked_bits() {
        for n in [3usize, 8, 15, 16, 23, 64] {
            let a = vec![0xffu8; n];
            let mut b = [0xffu8; MAX_HEADER];
            b[n - 1] = 0xfe;
            let mut k = [0u8; MAX_HEADER];
            // Bytes beyond `a` never count.
            k[n..].fill(0xff);
            b[n..].fill(0);
            assert!(masked_eq(&a, &b, &k), "{n}");
            k[n - 1] = 0x01;
            assert!(!masked_eq(&a, &b, &k), "{n}");
            k[n - 1] = 0xfe;
            assert!(masked_eq(&a, &b, &k), "{n}");
            k[0] = 0x80;
            b[0] = 0x7f;
            assert!(!masked_eq(&a, &b, &k), "{n}");
        }
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
}
