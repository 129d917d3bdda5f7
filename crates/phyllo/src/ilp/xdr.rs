//! XDR (RFC 4506) marshalling of the seed's file-transfer reply: 4-byte units, big-endian.
//!
//! Seed 001's application marshals an RPC reply — here its transaction id, its sequence
//! number in the file and the segment itself — with a stub compiler's XDR routines. The
//! processing unit is 4 bytes: unsigned integers are 4 bytes big-endian (RFC 4506 §4.2),
//! variable-length opaque data is a 4-byte length, the bytes, and zeros up to a multiple of 4
//! (§4.10).

use thiserror::Error;

/// The marshalling unit, bytes.
pub const UNIT: usize = 4;

/// A reply of the file transfer: one segment of the file.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Reply<'a> {
    /// The request it answers.
    pub xid: u32,
    /// The segment's number.
    pub seq: u32,
    /// The segment.
    pub data: &'a [u8],
}

/// Marshalled bytes that are not a reply.
#[derive(Clone, Copy, Debug, Error, PartialEq, Eq)]
pub enum XdrError {
    /// Shorter than the fields say.
    #[error("XDR: truncated")]
    Truncated,
    /// Padding bytes that are not zero.
    #[error("XDR: non-zero padding")]
    Padding,
    /// Bytes after the reply.
    #[error("XDR: trailing bytes")]
    Trailing,
}

/// `n` rounded up to the unit.
pub const fn padded(n: usize) -> usize {
    n.div_ceil(UNIT) * UNIT
}

/// Bytes of a marshalled reply carrying `data_len` bytes.
pub const fn reply_len(data_len: usize) -> usize {
    3 * UNIT + padded(data_len)
}

/// Append an unsigned int (RFC 4506 §4.2).
pub fn put_u32(out: &mut Vec<u8>, v: u32) {
    out.extend_from_slice(&v.to_be_bytes());
}

/// Append variable-length opaque data (RFC 4506 §4.10).
pub fn put_opaque(out: &mut Vec<u8>, data: &[u8]) {
    put_u32(out, data.len() as u32);
    out.extend_from_slice(data);
    out.resize(out.len() + padded(data.len()) - data.len(), 0);
}

/// Append a marshalled reply.
pub fn marshal(r: &Reply<'_>, out: &mut Vec<u8>) {
    put_u32(out, r.xid);
    put_u32(out, r.seq);
    put_opaque(out, r.data);
}

/// Read a marshalled reply, which must be all of `m`.
pub fn unmarshal(m: &[u8]) -> Result<Reply<'_>, XdrError> {
    let word = |i: usize| -> Result<u32, XdrError> {
        m.get(i * UNIT..(i + 1) * UNIT)
            .and_then(|b| b.try_into().ok())
            .map(u32::from_be_bytes)
            .ok_or(XdrError::Truncated)
    };
    let (xid, seq, len) = (word(0)?, word(1)?, word(2)? as usize);
    let start = 3 * UNIT;
    let end = start.checked_add(len).ok_or(XdrError::Truncated)?;
    let data = m.get(start..end).ok_or(XdrError::Truncated)?;
    let pad = m.get(end..start + padded(len)).ok_or(XdrError::Truncated)?;
    if pad.iter().any(|&b| b != 0) {
        return Err(XdrError::Padding);
    }
    if m.len() != reply_len(len) {
        return Err(XdrError::Trailing);
    }
    Ok(Reply { xid, seq, data })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// RFC 4506's encodings: an unsigned int, and opaque data padded with zeros.
    #[test]
    fn rfc4506_encodings() {
        let mut v = Vec::new();
        put_u32(&mut v, 1);
        assert_eq!(v, [0, 0, 0, 1]);
        v.clear();
        put_u32(&mut v, 0xdead_beef);
        assert_eq!(v, [0xde, 0xad, 0xbe, 0xef]);
        v.clear();
        put_opaque(&mut v, b"abc");
        assert_eq!(v, [0, 0, 0, 3, b'a', b'b', b'c', 0]);
        v.clear();
        put_opaque(&mut v, b"abcd");
        assert_eq!(v, [0, 0, 0, 4, b'a', b'b', b'c', b'd']);
        v.clear();
        put_opaque(&mut v, b"");
        assert_eq!(v, [0, 0, 0, 0]);
    }

    #[test]
    fn replies_round_trip_and_bad_ones_are_refused() {
        for n in 0..20 {
            let data: Vec<u8> = (0..n as u8).collect();
            let r = Reply {
                xid: 7,
                seq: n,
                data: &data,
            };
            let mut m = Vec::new();
            marshal(&r, &mut m);
            assert_eq!(m.len(), reply_len(n as usize));
            assert_eq!(unmarshal(&m), Ok(r));
            for cut in 0..m.len() {
                assert!(unmarshal(&m[..cut]).is_err(), "cut {cut}");
            }
            if padded(n as usize) > n as usize {
                let mut bad = m.clone();
                *bad.last_mut().unwrap() = 1;
                assert_eq!(unmarshal(&bad), Err(XdrError::Padding));
            }
            m.extend_from_slice(&[0; 4]);
            assert_eq!(unmarshal(&m), Err(XdrError::Trailing));
        }
    }
}
