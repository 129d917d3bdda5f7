//! Header fields: the four information classes, handles, and bit-level accessors.
//!
//! Seed 004 §2.1 (van Renesse, "Masking the Overhead of Protocol Layering"): every layer asks
//! for its header fields with `add_field(class, name, bits, offset)` at initialisation and gets
//! a [`FieldHandle`] back; it never reads or writes its header by raw offset. Where a field
//! lands is decided afterwards by a layout compiler ([`crate::layout`]), so the same layer runs
//! unchanged over a traditional per-layer aligned layout or the accelerator's compact one.
//!
//! Bit numbering. A header is a byte string; a field occupies bits `[bit_offset, bit_offset +
//! bits)` of it. In [`ByteOrder::Big`] bits are numbered most-significant first within each
//! byte and the value's most significant bit comes first; in [`ByteOrder::Little`] bits are
//! numbered least-significant first and the value's least significant bit comes first. For
//! byte-aligned fields of 8, 16, 32 or 64 bits this is exactly the big- or little-endian
//! integer encoding, so a sender writes in its own order and the receiver converts (the
//! preamble's byte-order bit says which).

use std::fmt;

/// The header information classes of seed 004 §2.1.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum FieldClass {
    /// Never changes during a connection (addresses, ports): sent only occasionally.
    ConnId,
    /// Depends only on protocol state (sequence number, message type): predictable.
    ProtoSpecific,
    /// Depends on the message (length, checksum): computed by the packet filter.
    MsgSpecific,
    /// Piggybacked information that may be out of date (cumulative acks).
    Gossip,
}

impl FieldClass {
    /// All classes, in wire order of the accelerator's layout.
    pub const ALL: [FieldClass; 4] = [
        FieldClass::ConnId,
        FieldClass::ProtoSpecific,
        FieldClass::MsgSpecific,
        FieldClass::Gossip,
    ];
}

impl fmt::Display for FieldClass {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            FieldClass::ConnId => "conn-id",
            FieldClass::ProtoSpecific => "protocol-specific",
            FieldClass::MsgSpecific => "message-specific",
            FieldClass::Gossip => "gossip",
        })
    }
}

/// Byte order of a header, as announced by its sender.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ByteOrder {
    /// Most significant byte (and bit) first.
    Big,
    /// Least significant byte (and bit) first.
    Little,
}

impl ByteOrder {
    /// The order of the machine this code runs on.
    pub const NATIVE: ByteOrder = if cfg!(target_endian = "little") {
        ByteOrder::Little
    } else {
        ByteOrder::Big
    };
}

/// A field as a layer requested it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FieldSpec {
    /// Its information class.
    pub class: FieldClass,
    /// A name for listings and errors (need not be unique).
    pub name: &'static str,
    /// Width in bits, 1 to 64.
    pub bits: u8,
    /// Requested bit offset within its class header, or `None` for "don't care".
    pub offset: Option<u32>,
    /// Index of the requesting layer in its stack (0 = top).
    pub layer: usize,
}

/// The name by which a layer reads and writes one of its fields.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct FieldHandle(pub(crate) u16);

impl FieldHandle {
    /// Index into the layout's field table.
    pub fn index(self) -> usize {
        self.0 as usize
    }

    /// A handle for the field at `index` of a layout's table.
    pub fn from_index(index: usize) -> FieldHandle {
        FieldHandle(index as u16)
    }
}

/// Where a field lives in a header: bit offset from the start of the header and width.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct FieldLoc {
    /// First bit of the field (see the module docs for numbering).
    pub bit_offset: u32,
    /// Width in bits, 1 to 64.
    pub bits: u8,
}

impl FieldLoc {
    /// One past the last bit.
    pub fn end_bit(self) -> u32 {
        self.bit_offset + self.bits as u32
    }

    /// Whether the field fits in a header of `len` bytes.
    pub fn fits(self, len: usize) -> bool {
        (1..=64).contains(&self.bits) && self.end_bit() as usize <= len * 8
    }

    /// The largest value the field can hold.
    pub fn max_value(self) -> u64 {
        if self.bits >= 64 {
            u64::MAX
        } else {
            (1u64 << self.bits) - 1
        }
    }
}

/// Read the field at `loc` from `hdr`. Bits beyond the end of `hdr` read as zero, so a
/// malformed header can never make this panic; callers check [`FieldLoc::fits`] first.
#[inline(always)]
pub fn read_bits(hdr: &[u8], loc: FieldLoc, order: ByteOrder) -> u64 {
    match Win::of(loc, hdr.len()) {
        Some(w) => w.get(hdr, order),
        None => read_bits_slow(hdr, loc, order),
    }
}

/// [`read_bits`] for what one window cannot hold: short headers, fields off the end, 9-byte
/// spans.
#[cold]
#[inline(never)]
fn read_bits_slow(hdr: &[u8], loc: FieldLoc, order: ByteOrder) -> u64 {
    let first = (loc.bit_offset / 8) as usize;
    let shift = loc.bit_offset % 8;
    let nbytes = (shift + loc.bits as u32).div_ceil(8) as usize;
    // Whole bytes, aligned.
    if shift == 0 && loc.bits.is_multiple_of(8) && first + nbytes <= hdr.len() {
        let b = &hdr[first..first + nbytes];
        let mut v = 0u64;
        match order {
            ByteOrder::Big => b.iter().for_each(|&x| v = (v << 8) | x as u64),
            ByteOrder::Little => b.iter().rev().for_each(|&x| v = (v << 8) | x as u64),
        }
        return v;
    }
    if nbytes <= 8 {
        // Within one 8-byte window: one load, a shift and a mask.
        let mut w = [0u8; 8];
        let avail = hdr.len().saturating_sub(first).min(nbytes);
        if avail > 0 {
            w[..avail].copy_from_slice(&hdr[first..first + avail]);
        }
        return match order {
            ByteOrder::Big => (u64::from_be_bytes(w) << shift) >> (64 - loc.bits as u32),
            ByteOrder::Little => (u64::from_le_bytes(w) >> shift) & loc.max_value(),
        };
    }
    let mut acc: u128 = 0;
    for i in 0..nbytes {
        let byte = hdr.get(first + i).copied().unwrap_or(0) as u128;
        match order {
            ByteOrder::Big => acc = (acc << 8) | byte,
            ByteOrder::Little => acc |= byte << (8 * i),
        }
    }
    let v = match order {
        ByteOrder::Big => acc >> (nbytes as u32 * 8 - shift - loc.bits as u32),
        ByteOrder::Little => acc >> shift,
    };
    (v as u64) & loc.max_value()
}

/// The 8-byte window of a header of `len` bytes that holds the whole field at `loc`: its first
/// byte and the field's bit offset within it. The window is the field's own first byte when
/// eight bytes follow it, else the header's last eight bytes, so a field near the end of a
/// short header is still one load (callgrind: the byte-by-byte fallback made field access
/// the accelerator's largest cost). `None` for headers under eight bytes, fields that run off
/// the header, and fields spread over nine bytes.
#[inline(always)]
fn window(len: usize, loc: FieldLoc) -> Option<(usize, u32)> {
    let end = (loc.end_bit() as usize).div_ceil(8);
    if len < 8 || end > len || loc.bits == 0 {
        return None;
    }
    let start = ((loc.bit_offset / 8) as usize).min(len - 8);
    let off = loc.bit_offset - 8 * start as u32;
    (off + loc.bits as u32 <= 64).then_some((start, off))
}

/// Eight bytes of `hdr` from `start` (the caller checked they exist).
#[inline(always)]
fn load8(hdr: &[u8], start: usize) -> [u8; 8] {
    let mut w = [0u8; 8];
    w.copy_from_slice(&hdr[start..start + 8]);
    w
}

/// One field resolved once for headers of one length (seed 004 §3: what can be computed when
/// the layout is known is not computed per message): its 8-byte window, so a read is one
/// load, a shift and a mask, and a write one read-modify-write, with no offset arithmetic.
/// Headers of another length, and fields without a window, fall back to [`read_bits`] /
/// [`write_bits`], so the result is always theirs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Access {
    loc: FieldLoc,
    header_len: usize,
    win: Option<Win>,
}

impl Access {
    /// The field at `loc` of headers of `header_len` bytes.
    pub fn new(loc: FieldLoc, header_len: usize) -> Access {
        Access {
            loc,
            header_len,
            win: Win::of(loc, header_len),
        }
    }

    /// Where the field lives.
    pub fn loc(&self) -> FieldLoc {
        self.loc
    }

    /// Read the field (as [`read_bits`]).
    #[inline(always)]
    pub fn read(&self, hdr: &[u8], order: ByteOrder) -> u64 {
        match self.win {
            Some(w) if hdr.len() == self.header_len => w.get(hdr, order),
            _ => read_bits(hdr, self.loc, order),
        }
    }

    /// Write the field (as [`write_bits`]).
    #[inline(always)]
    pub fn write(&self, hdr: &mut [u8], order: ByteOrder, value: u64) {
        match self.win {
            Some(w) if hdr.len() == self.header_len => w.put(hdr, order, value),
            _ => write_bits(hdr, self.loc, order, value),
        }
    }
}

/// A fixed list of fields summed together by the covered checksum, resolved once for headers
/// of one length.
///
/// What is summed is the cover's *image* of a header as its sender wrote it: the header's
/// bytes with every bit outside the cover's fields zeroed. For a header still in the order it
/// was written in (every send, and every delivery from a peer of the receiver's order) that is
/// the header ANDed with a mask, summed eight bytes per load with no per-field work;
/// callgrind: summing field by field cost ~200 instructions per message, a quarter of the
/// accelerator's send path. A receiver that converted a header from the other order rebuilds
/// the sender's image field by field (cold).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Cover {
    locs: Vec<FieldLoc>,
    header_len: usize,
    /// The cover's bits in headers written in little-endian order, header bytes `8k..8k + 8`
    /// in word `k` (as a little-endian integer; the last word zero beyond the header).
    mask_le: Vec<u64>,
    /// The same for headers written in big-endian order.
    mask_be: Vec<u64>,
    /// The first four words of `mask_le` and `mask_be` (zero beyond them), for headers of at
    /// most 32 bytes: summed with two or four loads and no indexing.
    short: [[u64; 4]; 2],
}

/// A one-bit field of headers written in one byte order, resolved to the byte and the bit
/// that hold it: reading it tests one byte (the accelerator's own flags, read on every
/// delivery).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Bit {
    byte: usize,
    mask: u8,
}

impl Bit {
    /// A bit that is never set (no byte has it).
    pub(crate) const NEVER: Bit = Bit { byte: 0, mask: 0 };

    /// The bit of the one-bit field at `loc` in headers of `header_len` bytes written in
    /// `order`: found by writing a one into a zero header. `None` if `loc` is not one bit
    /// inside such a header.
    pub(crate) fn of(loc: FieldLoc, header_len: usize, order: ByteOrder) -> Option<Bit> {
        if loc.bits != 1 || !loc.fits(header_len) {
            return None;
        }
        let mut h = vec![0u8; header_len];
        write_bits(&mut h, loc, order, 1);
        let byte = h.iter().position(|&b| b != 0)?;
        Some(Bit {
            byte,
            mask: h[byte],
        })
    }

    /// Whether the bit is set in `hdr` (false if `hdr` is too short to hold it).
    #[inline(always)]
    pub(crate) fn get(self, hdr: &[u8]) -> bool {
        hdr.get(self.byte).is_some_and(|b| b & self.mask != 0)
    }
}

/// A field's 8-byte window in a header of known length, and where the field sits in it.
/// Eight bytes, so that the compiled filter's operations stay small (callgrind: with the
/// mask and the shift stored, loading an accessor out of an operation took ~13 loads).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Win {
    start: u32,
    /// The field's first bit in the window.
    off: u8,
    /// The field's width, 1 to 64.
    bits: u8,
}

impl Win {
    /// The window of the field at `loc` in headers of `header_len` bytes, if it has one.
    pub(crate) fn of(loc: FieldLoc, header_len: usize) -> Option<Win> {
        window(header_len, loc).map(|(start, off)| Win {
            start: start as u32,
            off: off as u8,
            bits: loc.bits,
        })
    }

    /// The field's value mask (`bits` low bits set).
    #[inline(always)]
    fn mask(self) -> u64 {
        u64::MAX >> (64 - self.bits as u32)
    }

    /// `64 - bits`: the right shift that isolates a big-endian field.
    #[inline(always)]
    fn rshift(self) -> u32 {
        64 - self.bits as u32
    }

    /// Read the field from `hdr` (which holds the window).
    #[inline(always)]
    pub(crate) fn get(self, hdr: &[u8], order: ByteOrder) -> u64 {
        let b = load8(hdr, self.start as usize);
        match order {
            ByteOrder::Little => (u64::from_le_bytes(b) >> self.off) & self.mask(),
            ByteOrder::Big => (u64::from_be_bytes(b) << self.off) >> self.rshift(),
        }
    }

    /// Write `value` (truncated to the field's width) into `hdr`, sparing the other bits.
    #[inline(always)]
    pub(crate) fn put(self, hdr: &mut [u8], order: ByteOrder, value: u64) {
        let v = value & self.mask();
        let start = self.start as usize;
        let b = load8(hdr, start);
        let out = match order {
            ByteOrder::Little => {
                let m = self.mask() << self.off;
                ((u64::from_le_bytes(b) & !m) | (v << self.off)).to_le_bytes()
            }
            ByteOrder::Big => {
                let s = self.rshift() - self.off as u32;
                let m = self.mask() << s;
                ((u64::from_be_bytes(b) & !m) | (v << s)).to_be_bytes()
            }
        };
        hdr[start..start + 8].copy_from_slice(&out);
    }
}

/// A field's write into a whole header area (a fixed array holding at least the layout's
/// header), resolved once for one layout's length and byte order: which eight bytes, and the
/// field's bits in them as an integer of that order. What a prediction's refresh writes with,
/// several fields after every message (seed 004 §3.2): a load, a mask and a store, with no
/// length or order to check (callgrind: [`Access::write`] cost ~43 instructions a field there,
/// a fifth of the accelerator's post-processing).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Put {
    start: usize,
    shift: u32,
    /// The field's bits in the word (shifted into place).
    mask: u64,
    big: bool,
}

impl Put {
    /// The write of `access` in headers written in `order`, if the field has a window.
    pub(crate) fn of(access: &Access, order: ByteOrder) -> Option<Put> {
        let w = access.win?;
        let shift = match order {
            ByteOrder::Little => u32::from(w.off),
            ByteOrder::Big => w.rshift() - u32::from(w.off),
        };
        Some(Put {
            start: w.start as usize,
            shift,
            mask: w.mask() << shift,
            big: order == ByteOrder::Big,
        })
    }

    /// Write `value` (truncated to the field's width) into `hdr`, sparing the other bits.
    #[inline(always)]
    pub(crate) fn put<const N: usize>(self, hdr: &mut [u8; N], value: u64) {
        let Some(w) = hdr
            .get_mut(self.start..)
            .and_then(|t| t.first_chunk_mut::<8>())
        else {
            return;
        };
        let v = (value << self.shift) & self.mask;
        *w = if self.big {
            ((u64::from_be_bytes(*w) & !self.mask) | v).to_be_bytes()
        } else {
            ((u64::from_le_bytes(*w) & !self.mask) | v).to_le_bytes()
        };
    }
}

impl Cover {
    /// The empty cover (the checksum of the body alone).
    pub const EMPTY: Cover = Cover {
        locs: Vec::new(),
        header_len: 0,
        mask_le: Vec::new(),
        mask_be: Vec::new(),
        short: [[0; 4]; 2],
    };

    /// The fields `locs` of headers of `header_len` bytes (fields that do not fit are left
    /// out).
    pub fn new(locs: &[FieldLoc], header_len: usize) -> Cover {
        let locs: Vec<FieldLoc> = locs
            .iter()
            .copied()
            .filter(|l| l.fits(header_len))
            .collect();
        let mask = |order| -> Vec<u64> {
            let mut m = bit_mask(&locs, header_len, order);
            m.resize(header_len.div_ceil(8) * 8, 0);
            m.chunks_exact(8).map(le_word).collect()
        };
        let (mask_le, mask_be) = (mask(ByteOrder::Little), mask(ByteOrder::Big));
        let first4 = |m: &[u64]| [0, 1, 2, 3].map(|k| m.get(k).copied().unwrap_or(0));
        Cover {
            short: [first4(&mask_le), first4(&mask_be)],
            mask_le,
            mask_be,
            locs,
            header_len,
        }
    }

    /// The fields, in order.
    pub fn locs(&self) -> &[FieldLoc] {
        &self.locs
    }

    fn mask(&self, order: ByteOrder) -> &[u64] {
        match order {
            ByteOrder::Little => &self.mask_le,
            ByteOrder::Big => &self.mask_be,
        }
    }

    /// The one's complement sum of the cover's image of `hdr` as written in `wire` order
    /// (`hdr` is now in `order`), taken as little-endian 16-bit words, unfolded: a value
    /// congruent to that sum modulo 0xffff, which is all a one's complement checksum keeps.
    #[inline(always)]
    pub fn image_sum(&self, hdr: &[u8], order: ByteOrder, wire: ByteOrder) -> u64 {
        if order != wire || hdr.len() != self.header_len {
            return self.image_sum_slow(hdr, order, wire);
        }
        let m = &self.short[(order == ByteOrder::Big) as usize];
        if hdr.len() <= 16 {
            let (w0, w1) = two_words(hdr);
            return oc_add(w0 & m[0], w1 & m[1]);
        }
        // Up to 32 bytes (an accelerated header area with its identification and cookie)
        // in four loads, no loop.
        if hdr.len() <= 32 {
            let (w0, w1) = two_words(&hdr[..16]);
            let (w2, w3) = two_words(&hdr[16..]);
            return oc_add(oc_add(w0 & m[0], w1 & m[1]), oc_add(w2 & m[2], w3 & m[3]));
        }
        masked_sum(hdr, self.mask(order))
    }

    /// The cover's image of `hdr` as its sender wrote it in `wire` order (`hdr` is now in
    /// `order`) into `out` (at least the cover's header length): every covered bit as
    /// written, every other bit zero. What an authenticator covers: both ends get the same
    /// bytes whatever their byte orders. Returns the image's length.
    #[inline]
    pub fn image(&self, hdr: &[u8], order: ByteOrder, wire: ByteOrder, out: &mut [u8]) -> usize {
        let n = self.header_len;
        if order != wire || hdr.len() != n || out.len() < n {
            return self.image_slow(hdr, order, wire, out);
        }
        if (17..=32).contains(&n) && out.len() >= 32 {
            // The usual accelerated header area: four loads and four stores, no loop.
            let m = &self.short[(order == ByteOrder::Big) as usize];
            let (w0, w1) = two_words(&hdr[..16]);
            let (w2, w3) = two_words(&hdr[16..]);
            for (k, w) in [w0 & m[0], w1 & m[1], w2 & m[2], w3 & m[3]]
                .into_iter()
                .enumerate()
            {
                out[8 * k..8 * k + 8].copy_from_slice(&w.to_le_bytes());
            }
            return n;
        }
        let mask = self.mask(order);
        let whole = n / 8;
        for k in 0..whole {
            let w = le_word(&hdr[8 * k..]) & mask[k];
            out[8 * k..8 * k + 8].copy_from_slice(&w.to_le_bytes());
        }
        if !n.is_multiple_of(8) {
            let m = mask[whole].to_le_bytes();
            for j in 8 * whole..n {
                out[j] = hdr[j] & m[j - 8 * whole];
            }
        }
        n
    }

    /// The cover's [`image`](Self::image) of a short header, in its sender's byte order
    /// (`order` is `wire`) and as long as the cover's, as two little-endian 128-bit blocks
    /// (bytes `0..16` and `16..32`, zero past the header): four masks of the words loaded
    /// once, nothing written out. What a sealing layer hashes as its associated data. `None`
    /// for any other header (take [`image`](Self::image)).
    #[inline(always)]
    pub fn image_blocks(
        &self,
        hdr: &ShortHeader,
        order: ByteOrder,
        wire: ByteOrder,
    ) -> Option<[u128; 2]> {
        if order != wire || hdr.len != self.header_len {
            return None;
        }
        let m = &self.short[(order == ByteOrder::Big) as usize];
        let w = &hdr.words;
        let block = |a: u64, b: u64| u128::from(a) | u128::from(b) << 64;
        Some([
            block(w[0] & m[0], w[1] & m[1]),
            block(w[2] & m[2], w[3] & m[3]),
        ])
    }

    /// [`Cover::image`] field by field.
    #[cold]
    #[inline(never)]
    fn image_slow(&self, hdr: &[u8], order: ByteOrder, wire: ByteOrder, out: &mut [u8]) -> usize {
        let n = self.header_len.min(out.len());
        image_in(hdr, order, &self.locs, &mut out[..n], wire);
        n
    }

    /// [`Cover::image_sum`] building the image field by field.
    #[cold]
    #[inline(never)]
    fn image_sum_slow(&self, hdr: &[u8], order: ByteOrder, wire: ByteOrder) -> u64 {
        let mut fixed = [0u8; 64];
        let mut grown = Vec::new();
        let img: &mut [u8] = if self.header_len <= fixed.len() {
            &mut fixed[..self.header_len]
        } else {
            grown.resize(self.header_len, 0);
            &mut grown
        };
        image_in(hdr, order, &self.locs, img, wire);
        masked_sum(img, self.mask(wire))
    }
}

/// Eight bytes as a little-endian integer.
#[inline(always)]
pub(crate) fn le_word(b: &[u8]) -> u64 {
    let mut w = [0u8; 8];
    w.copy_from_slice(&b[..8]);
    u64::from_le_bytes(w)
}

/// A 64-bit word folded to its two 32-bit halves' sum (congruent modulo 0xffff to the sum of
/// its four 16-bit words).
#[inline(always)]
fn fold32(w: u64) -> u64 {
    (w >> 32) + (w & 0xffff_ffff)
}

/// The last `data.len() % 8` bytes of `data` as a little-endian integer (0 if none): one load
/// of the last eight bytes when there are eight, else two overlapping loads.
#[inline(always)]
fn le_tail(data: &[u8]) -> u64 {
    let n = data.len();
    let r = n % 8;
    if r == 0 {
        0
    } else if n >= 8 {
        le_word(&data[n - 8..]) >> (8 * (8 - r))
    } else {
        le_short(data)
    }
}

/// Fewer than eight bytes as a little-endian integer: the first and the last four (or two)
/// bytes, overlapping, instead of a loop over them.
#[inline(always)]
fn le_short(d: &[u8]) -> u64 {
    let n = d.len();
    let le = |s: &[u8]| s.iter().rev().fold(0u64, |w, &b| (w << 8) | b as u64);
    if n >= 4 {
        le(&d[..4]) | (le(&d[n - 4..]) >> (8 * (8 - n)) << 32)
    } else if n >= 2 {
        le(&d[..2]) | (le(&d[n - 2..]) >> (8 * (4 - n)) << 16)
    } else {
        d.first().map_or(0, |&b| b as u64)
    }
}

/// A header of at most 32 bytes loaded once as four little-endian words (bytes `8k..8k + 8`
/// in word `k`), zero past its end: what the checks that read a whole short header share
/// (its padding, an authenticator's image of it).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ShortHeader {
    len: usize,
    words: [u64; 4],
}

impl ShortHeader {
    /// `hdr` in four loads, no loop; `None` if it is longer than 32 bytes.
    #[inline(always)]
    pub fn new(hdr: &[u8]) -> Option<ShortHeader> {
        if hdr.len() > 32 {
            return None;
        }
        let (lo, hi) = hdr.split_at(hdr.len().min(16));
        let (w0, w1) = two_words(lo);
        let (w2, w3) = two_words(hi);
        Some(ShortHeader {
            len: hdr.len(),
            words: [w0, w1, w2, w3],
        })
    }

    /// Its length in bytes.
    #[inline(always)]
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether it has no bytes.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Its words.
    #[inline(always)]
    pub(crate) fn words(&self) -> &[u64; 4] {
        &self.words
    }
}

/// At most sixteen bytes as two little-endian words, zero-padded: two loads, no loop.
#[inline(always)]
fn two_words(d: &[u8]) -> (u64, u64) {
    let n = d.len();
    if n >= 8 {
        let w1 = if n > 8 {
            le_word(&d[n - 8..]) >> (8 * (16 - n.min(16)))
        } else {
            0
        };
        (le_word(d), w1)
    } else {
        (le_short(d), 0)
    }
}

/// `a + b` with end-around carry: congruent to the plain sum modulo 2^64 - 1, hence modulo
/// 0xffff (which divides it), and never overflowing. How one's complement partial sums
/// combine: two instructions, where folding each word to 32 bits first took four a word.
#[inline(always)]
pub fn oc_add(a: u64, b: u64) -> u64 {
    let (s, carry) = a.overflowing_add(b);
    // A sum that carried is at most 2^64 - 2: adding the carry back cannot carry again.
    s + carry as u64
}

/// The sum of `data`'s little-endian 64-bit words (the last one zero-padded), word `k` ANDed
/// with `mask(k)`: any `u64` congruent modulo 0xffff to the one's complement sum of the
/// masked data as little-endian 16-bit words (combine such sums with [`oc_add`]). At most
/// sixteen bytes take two loads and no loop (short headers and bodies are the common case of
/// a protocol for small messages).
#[inline(always)]
pub(crate) fn word_sum(data: &[u8], mask: impl Fn(usize) -> u64) -> u64 {
    if data.len() <= 16 {
        let (w0, w1) = two_words(data);
        return oc_add(w0 & mask(0), w1 & mask(1));
    }
    let mut chunks = data.chunks_exact(8);
    let mut sum = 0;
    for (k, c) in (&mut chunks).enumerate() {
        sum += fold32(le_word(c) & mask(k));
    }
    sum + fold32(le_tail(data) & mask(data.len() / 8))
}

/// [`word_sum`] masked by the words of `mask` (words beyond it count as zero).
#[inline(always)]
fn masked_sum(data: &[u8], mask: &[u64]) -> u64 {
    word_sum(data, |k| mask.get(k).copied().unwrap_or(0))
}

/// Write `value` (truncated to the field's width) into the field at `loc` of `hdr`. Bits that
/// would fall beyond the end of `hdr` are not written.
#[inline(always)]
pub fn write_bits(hdr: &mut [u8], loc: FieldLoc, order: ByteOrder, value: u64) {
    match Win::of(loc, hdr.len()) {
        Some(w) => w.put(hdr, order, value),
        None => write_bits_slow(hdr, loc, order, value & loc.max_value()),
    }
}

/// [`write_bits`] for what one window cannot hold (`value` already truncated).
#[cold]
#[inline(never)]
fn write_bits_slow(hdr: &mut [u8], loc: FieldLoc, order: ByteOrder, value: u64) {
    let first = (loc.bit_offset / 8) as usize;
    let shift = loc.bit_offset % 8;
    let nbytes = (shift + loc.bits as u32).div_ceil(8) as usize;
    if shift == 0 && loc.bits.is_multiple_of(8) && first + nbytes <= hdr.len() {
        let b = &mut hdr[first..first + nbytes];
        match order {
            ByteOrder::Big => {
                for (i, x) in b.iter_mut().enumerate() {
                    *x = (value >> (8 * (nbytes - 1 - i))) as u8;
                }
            }
            ByteOrder::Little => {
                for (i, x) in b.iter_mut().enumerate() {
                    *x = (value >> (8 * i)) as u8;
                }
            }
        }
        return;
    }
    if nbytes <= 8 {
        let avail = hdr.len().saturating_sub(first).min(nbytes);
        if avail == 0 {
            return;
        }
        let mut w = [0u8; 8];
        w[..avail].copy_from_slice(&hdr[first..first + avail]);
        let w = match order {
            ByteOrder::Big => {
                let s = 64 - shift - loc.bits as u32;
                let m = loc.max_value() << s;
                (u64::from_be_bytes(w) & !m) | (value << s)
            }
            ByteOrder::Little => {
                let m = loc.max_value() << shift;
                (u64::from_le_bytes(w) & !m) | (value << shift)
            }
        };
        let bytes = match order {
            ByteOrder::Big => w.to_be_bytes(),
            ByteOrder::Little => w.to_le_bytes(),
        };
        hdr[first..first + avail].copy_from_slice(&bytes[..avail]);
        return;
    }
    let mask: u128 = loc.max_value() as u128;
    let (vmask, vbits) = match order {
        ByteOrder::Big => {
            let s = nbytes as u32 * 8 - shift - loc.bits as u32;
            (mask << s, (value as u128) << s)
        }
        ByteOrder::Little => (mask << shift, (value as u128) << shift),
    };
    for i in 0..nbytes {
        let Some(byte) = hdr.get_mut(first + i) else {
            return;
        };
        let s = match order {
            ByteOrder::Big => 8 * (nbytes - 1 - i),
            ByteOrder::Little => 8 * i,
        };
        let m = (vmask >> s) as u8;
        let v = (vbits >> s) as u8;
        *byte = (*byte & !m) | (v & m);
    }
}

/// Copy the `fields` of `header` (read in `order`) into `out`, written in `out_order`, leaving
/// every other bit of `out` zero: a header converted from one byte order to the other, or an
/// image of some of its fields.
pub fn image_in(
    header: &[u8],
    order: ByteOrder,
    fields: &[FieldLoc],
    out: &mut [u8],
    out_order: ByteOrder,
) {
    out.fill(0);
    for &l in fields {
        write_bits(out, l, out_order, read_bits(header, l, order));
    }
}

/// A mask (one byte per header byte of a `header_len`-byte header written in `order`) of the
/// bits of `locs` (those that fit).
pub(crate) fn bit_mask(locs: &[FieldLoc], header_len: usize, order: ByteOrder) -> Vec<u8> {
    let mut m = vec![0u8; header_len];
    for &l in locs.iter().filter(|l| l.fits(header_len)) {
        write_bits(&mut m, l, order, u64::MAX);
    }
    m
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn a_bit_reads_what_read_bits_reads() {
        for len in 1usize..=16 {
            for off in 0..len as u32 * 8 {
                let loc = FieldLoc {
                    bit_offset: off,
                    bits: 1,
                };
                for order in [ByteOrder::Big, ByteOrder::Little] {
                    let bit = Bit::of(loc, len, order).expect("a one-bit field inside");
                    for fill in [0x00u8, 0xff, 0x5a, 0xa5] {
                        let mut h = vec![fill; len];
                        for v in [0, 1] {
                            write_bits(&mut h, loc, order, v);
                            assert_eq!(bit.get(&h), v == 1, "{loc:?} {order:?} {fill:#x}");
                            assert_eq!(read_bits(&h, loc, order), v);
                        }
                    }
                }
            }
        }
        let two = FieldLoc {
            bit_offset: 0,
            bits: 2,
        };
        assert_eq!(Bit::of(two, 4, ByteOrder::Big), None);
    }

    #[test]
    fn aligned_fields_are_plain_integers() {
        let mut b = [0u8; 8];
        let loc = FieldLoc {
            bit_offset: 16,
            bits: 16,
        };
        write_bits(&mut b, loc, ByteOrder::Big, 0x1234);
        assert_eq!(b[2..4], [0x12, 0x34]);
        write_bits(&mut b, loc, ByteOrder::Little, 0x1234);
        assert_eq!(b[2..4], [0x34, 0x12]);
        assert_eq!(read_bits(&b, loc, ByteOrder::Little), 0x1234);
    }

    #[test]
    fn big_endian_bits_are_msb_first() {
        let mut b = [0u8; 2];
        write_bits(
            &mut b,
            FieldLoc {
                bit_offset: 0,
                bits: 1,
            },
            ByteOrder::Big,
            1,
        );
        write_bits(
            &mut b,
            FieldLoc {
                bit_offset: 4,
                bits: 8,
            },
            ByteOrder::Big,
            0xAB,
        );
        assert_eq!(b, [0x8A, 0xB0]);
    }

    #[test]
    fn out_of_range_reads_zero_and_writes_nothing() {
        let mut b = [0xFFu8; 2];
        let loc = FieldLoc {
            bit_offset: 12,
            bits: 16,
        };
        write_bits(&mut b, loc, ByteOrder::Big, 0);
        assert_eq!(b, [0xFF, 0xF0]);
        assert!(!loc.fits(2));
        assert_eq!(read_bits(&[], loc, ByteOrder::Little), 0);
    }

    proptest! {
        #[test]
        fn short_headers_never_panic(off in 0u32..120, bits in 1u8..=64, v: u64, big: bool, len in 0usize..12) {
            let order = if big { ByteOrder::Big } else { ByteOrder::Little };
            let loc = FieldLoc { bit_offset: off, bits };
            let mut b = vec![0xA5u8; len];
            write_bits(&mut b, loc, order, v);
            let r = read_bits(&b, loc, order);
            if loc.fits(len) {
                prop_assert_eq!(r, v & loc.max_value());
            }
        }

        #[test]
        fn write_then_read_roundtrips_and_spares_neighbours(
            off in 0u32..100, bits in 1u8..=64, v: u64, big: bool, fill: u8,
        ) {
            let order = if big { ByteOrder::Big } else { ByteOrder::Little };
            let loc = FieldLoc { bit_offset: off, bits };
            let mut b = vec![fill; 24];
            let before = b.clone();
            write_bits(&mut b, loc, order, v);
            prop_assert_eq!(read_bits(&b, loc, order), v & loc.max_value());
            // Every bit outside the field is unchanged.
            write_bits(&mut b, loc, order, read_bits(&before, loc, order));
            prop_assert_eq!(b, before);
        }

        #[test]
        fn an_access_reads_and_writes_as_the_general_accessors(
            len in 0usize..24, off in 0u32..190, bits in 1u8..=64, v: u64, big: bool,
            bytes in proptest::collection::vec(any::<u8>(), 24), other in 0usize..24,
        ) {
            let order = if big { ByteOrder::Big } else { ByteOrder::Little };
            let loc = FieldLoc { bit_offset: off, bits };
            let a = Access::new(loc, len);
            for n in [len, other] {
                let h = &bytes[..n];
                prop_assert_eq!(a.read(h, order), read_bits(h, loc, order));
                let (mut x, mut y) = (h.to_vec(), h.to_vec());
                a.write(&mut x, order, v);
                write_bits(&mut y, loc, order, v);
                prop_assert_eq!(x, y);
            }
        }

        #[test]
        fn a_cover_sums_the_senders_image(
            len in 0usize..48, fields in proptest::collection::vec((0u32..380, 1u8..=64), 0..8),
            big: bool, wire_big: bool, bytes in proptest::collection::vec(any::<u8>(), 48),
            other in 0usize..48,
        ) {
            let order = if big { ByteOrder::Big } else { ByteOrder::Little };
            let wire = if wire_big { ByteOrder::Big } else { ByteOrder::Little };
            let locs: Vec<FieldLoc> = fields
                .iter()
                .map(|&(bit_offset, bits)| FieldLoc { bit_offset, bits })
                .filter(|l| l.fits(len))
                .collect();
            let cover = Cover::new(&locs, len);
            for h in [&bytes[..len], &bytes[..other]] {
                // The reference: the image built field by field, summed as 16-bit words.
                let mut img = vec![0u8; len + 1];
                for &l in &locs {
                    write_bits(&mut img[..len], l, wire, read_bits(h, l, order));
                }
                let want: u64 = img
                    .chunks_exact(2)
                    .map(|w| u16::from_le_bytes([w[0], w[1]]) as u64)
                    .sum();
                prop_assert_eq!(cover.image_sum(h, order, wire) % 0xffff, want % 0xffff);
                // The image itself, when the header is whole.
                if h.len() == len {
                    let mut out = [0u8; 64];
                    let n = cover.image(h, order, wire, &mut out);
                    prop_assert_eq!(&out[..n], &img[..len]);
                }
                // As blocks, from a short header loaded once: the same bytes, zero past them;
                // none for a header of another length, in another order or past 32 bytes.
                let short = ShortHeader::new(h);
                prop_assert_eq!(short.is_some(), h.len() <= 32);
                let blocks = short.and_then(|s| cover.image_blocks(&s, order, wire));
                prop_assert_eq!(blocks.is_some(), h.len() == len && len <= 32 && order == wire);
                if let Some([b0, b1]) = blocks {
                    let mut got = [0u8; 32];
                    got[..16].copy_from_slice(&b0.to_le_bytes());
                    got[16..].copy_from_slice(&b1.to_le_bytes());
                    prop_assert_eq!(&got[..len], &img[..len]);
                    prop_assert!(got[len..].iter().all(|&b| b == 0));
                }
            }
        }

        #[test]
        fn every_path_agrees_with_a_bit_by_bit_reference(
            len in 0usize..24, off in 0u32..200, bits in 1u8..=64, v: u64, big: bool,
            bytes in proptest::collection::vec(any::<u8>(), 24),
        ) {
            let order = if big { ByteOrder::Big } else { ByteOrder::Little };
            let loc = FieldLoc { bit_offset: off, bits };
            let hdr = &bytes[..len];
            let bit = |h: &[u8], i: u32| -> u64 {
                let Some(&b) = h.get(i as usize / 8) else { return 0 };
                (match order {
                    ByteOrder::Big => b >> (7 - i % 8),
                    ByteOrder::Little => b >> (i % 8),
                } & 1) as u64
            };
            let reference = |h: &[u8]| -> u64 {
                (0..bits as u32).fold(0, |acc, j| match order {
                    ByteOrder::Big => (acc << 1) | bit(h, off + j),
                    ByteOrder::Little => acc | (bit(h, off + j) << j),
                })
            };
            prop_assert_eq!(read_bits(hdr, loc, order), reference(hdr));
            if loc.fits(len) {
                let mut w = hdr.to_vec();
                write_bits(&mut w, loc, order, v);
                prop_assert_eq!(reference(&w), v & loc.max_value());
                for i in 0..8 * len as u32 {
                    if i < off || i >= loc.end_bit() {
                        prop_assert_eq!(bit(&w, i), bit(hdr, i), "bit {} changed", i);
                    }
                }
            }
        }
    }
}
