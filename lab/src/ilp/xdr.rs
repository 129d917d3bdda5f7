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
    /// Variable-length data longer than the reader allows.
    #[error("XDR: {0} bytes of opaque data, more than allowed")]
    TooLong(usize),
}

/// Reads XDR items off the front of a message; every read checks the bytes are there.
#[derive(Clone, Copy, Debug)]
pub struct Reader<'a>(pub &'a [u8]);

impl<'a> Reader<'a> {
    /// The next `n` bytes.
    fn take(&mut self, n: usize) -> Result<&'a [u8], XdrError> {
        if self.0.len() < n {
            return Err(XdrError::Truncated);
        }
        let (a, b) = self.0.split_at(n);
        self.0 = b;
        Ok(a)
    }

    /// An unsigned int (RFC 4506 §4.2).
    pub fn u32(&mut self) -> Result<u32, XdrError> {
        let b = self.take(UNIT)?;
        Ok(u32::from_be_bytes([b[0], b[1], b[2], b[3]]))
    }

    /// An unsigned hyper integer (§4.5).
    pub fn u64(&mut self) -> Result<u64, XdrError> {
        Ok((u64::from(self.u32()?) << 32) | u64::from(self.u32()?))
    }

    /// Variable-length opaque data (§4.10) of at most `max` bytes, its padding checked.
    pub fn opaque(&mut self, max: usize) -> Result<&'a [u8], XdrError> {
        let len = self.u32()? as usize;
        if len > max {
            return Err(XdrError::TooLong(len));
        }
        let data = self.take(len)?;
        if self.take(padded(len) - len)?.iter().any(|&b| b != 0) {
            return Err(XdrError::Padding);
        }
        Ok(data)
    }

    /// Everything not read yet.
    pub fn rest(&mut self) -> &'a [u8] {
        std::mem::take(&mut self.0)
    }

    /// Fails unless everything was read.
    pub fn end(&self) -> Result<(), XdrError> {
        if self.0.is_empty() {
            Ok(())
        } else {
            Err(XdrError::Trailing)
        }
    }
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
    let mut r = Reader(m);
    let reply = Reply {
        xid: r.u32()?,
        seq: r.u32()?,
        data: r.opaque(usize::MAX)?,
    };
    r.end()?;
    Ok(reply)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_reader_checks_every_item() {
        let mut m = Vec::new();
        put_u32(&mut m, 7);
        put_opaque(&mut m, b"abcde");
        put_u32(&mut m, 1);
        put_u32(&mut m, 2);
        let mut r = Reader(&m);
        assert_eq!(r.u32(), Ok(7));
        assert_eq!(r.opaque(5), Ok(&b"abcde"[..]));
        assert_eq!(r.u64(), Ok((1 << 32) | 2));
        assert_eq!(r.end(), Ok(()));
        assert_eq!(r.u32(), Err(XdrError::Truncated));
        assert_eq!(Reader(&m[4..]).opaque(4), Err(XdrError::TooLong(5)));
        let mut bad = m.clone();
        bad[13] = 1; // a padding byte of the opaque data
        assert_eq!(Reader(&bad[4..]).opaque(5), Err(XdrError::Padding));
        assert_eq!(Reader(&m).end(), Err(XdrError::Trailing));
        assert_eq!(Reader(&m[4..10]).opaque(5), Err(XdrError::Truncated));
    }

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
