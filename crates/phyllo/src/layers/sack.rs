//! The body of the `window` layer's acknowledgements: selective acknowledgement ranges, the
//! receiver's buffer and how long it held the acknowledgement back.
//!
//! Ordinary data datagrams do not carry it: their header keeps its compact, predicted form
//! (kind, sequence number, the cumulative acknowledgement as gossip), so the Protocol
//! Accelerator's fast path still takes them. Only standalone acknowledgements have a body:
//!
//! | bytes | field |
//! |---|---|
//! | 4 | `delay_us`: microseconds since the newest data this acknowledges arrived (little-endian) |
//! | 4 | `window`: bytes the receiver buffers beyond the cumulative acknowledgement |
//! | 1 | `n`: number of ranges, at most [`MAX_RANGES`] |
//! | 8 × n | ranges: `start`, `end` (4 bytes each), offsets from the cumulative acknowledgement |
//!
//! A range `[start, end)` names messages received above the first missing one. Ranges are in
//! ascending order, non-empty, separated by at least one missing message, and start above
//! offset 0 (the cumulative acknowledgement names the first message *not* received). Anything
//! else is refused by [`AckFrame::parse`] with the reason.

/// Ranges an acknowledgement carries at most.
pub const MAX_RANGES: usize = 32;

/// Bytes in front of the ranges.
const FIXED: usize = 9;

/// The largest offset a range may reach: the `window` layer's sequence space is 20 bits
/// and at most a quarter of it is in flight.
pub const MAX_OFFSET: u32 = 1 << 18;

/// Why an acknowledgement's body was refused.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum AckError {
    /// The body's length does not match its range count.
    #[error("acknowledgement body of {len} bytes does not hold its {n} ranges")]
    Length {
        /// Bytes in the body.
        len: usize,
        /// Ranges it claims.
        n: usize,
    },
    /// More ranges than [`MAX_RANGES`].
    #[error("{0} ranges, more than {MAX_RANGES}")]
    TooManyRanges(usize),
    /// A range that is empty, starts at offset 0, or lies beyond [`MAX_OFFSET`].
    #[error("range {start}..{end} is empty or outside 1..={MAX_OFFSET}")]
    BadRange {
        /// Its start.
        start: u32,
        /// Its end.
        end: u32,
    },
    /// A range that overlaps, touches or precedes the one before it.
    #[error("range starting at {0} overlaps or precedes the one before it")]
    Unordered(u32),
}

/// A parsed acknowledgement body.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct AckFrame {
    /// Microseconds the receiver held the acknowledgement back.
    pub delay_us: u32,
    /// Bytes the receiver buffers beyond the cumulative acknowledgement.
    pub window: u32,
    n: u8,
    ranges: [(u32, u32); MAX_RANGES],
}

impl AckFrame {
    /// A frame with no ranges.
    pub fn new(delay_us: u32, window: u32) -> AckFrame {
        AckFrame {
            delay_us,
            window,
            n: 0,
            ranges: [(0, 0); MAX_RANGES],
        }
    }

    /// Add a range above those added before; `false` (and nothing added) when the frame is
    /// full or the range would make it invalid.
    pub fn push(&mut self, start: u32, end: u32) -> bool {
        let n = usize::from(self.n);
        let after = n == 0 || start > self.ranges[n - 1].1;
        if n == MAX_RANGES || start == 0 || start >= end || end > MAX_OFFSET || !after {
            return false;
        }
        self.ranges[n] = (start, end);
        self.n += 1;
        true
    }

    /// The ranges, ascending.
    pub fn ranges(&self) -> &[(u32, u32)] {
        &self.ranges[..usize::from(self.n)]
    }

    /// Bytes [`write`](AckFrame::write) appends.
    pub fn encoded_len(&self) -> usize {
        FIXED + 8 * usize::from(self.n)
    }

    /// Append the encoding to `out` (which must have [`encoded_len`](Self::encoded_len)
    /// bytes).
    pub fn write(&self, out: &mut [u8]) {
        out[..4].copy_from_slice(&self.delay_us.to_le_bytes());
        out[4..8].copy_from_slice(&self.window.to_le_bytes());
        out[8] = self.n;
        for (i, (s, e)) in self.ranges().iter().enumerate() {
            let at = FIXED + 8 * i;
            out[at..at + 4].copy_from_slice(&s.to_le_bytes());
            out[at + 4..at + 8].copy_from_slice(&e.to_le_bytes());
        }
    }

    /// Parse and check a body.
    pub fn parse(body: &[u8]) -> Result<AckFrame, AckError> {
        let word = |at: usize| {
            body.get(at..at + 4)
                .map(|b| u32::from_le_bytes([b[0], b[1], b[2], b[3]]))
        };
        let (Some(delay_us), Some(window), Some(&n)) = (word(0), word(4), body.get(8)) else {
            return Err(AckError::Length {
                len: body.len(),
                n: 0,
            });
        };
        let n = usize::from(n);
        if n > MAX_RANGES {
            return Err(AckError::TooManyRanges(n));
        }
        if body.len() != FIXED + 8 * n {
            return Err(AckError::Length { len: body.len(), n });
        }
        let mut f = AckFrame::new(delay_us, window);
        for i in 0..n {
            let at = FIXED + 8 * i;
            let (start, end) = (word(at).unwrap_or(0), word(at + 4).unwrap_or(0));
            if start == 0 || start >= end || end > MAX_OFFSET {
                return Err(AckError::BadRange { start, end });
            }
            if !f.push(start, end) {
                return Err(AckError::Unordered(start));
            }
        }
        Ok(f)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bytes(f: &AckFrame) -> Vec<u8> {
        let mut v = vec![0; f.encoded_len()];
        f.write(&mut v);
        v
    }

    #[test]
    fn a_frame_round_trips() {
        let mut f = AckFrame::new(250, 16 << 20);
        assert!(f.push(2, 5));
        assert!(f.push(7, 8));
        assert_eq!(AckFrame::parse(&bytes(&f)), Ok(f));
        assert_eq!(f.ranges(), &[(2, 5), (7, 8)]);
    }

    #[test]
    fn malformed_bodies_are_refused_with_the_reason() {
        let ok = {
            let mut f = AckFrame::new(0, 0);
            f.push(1, 2);
            bytes(&f)
        };
        assert!(matches!(
            AckFrame::parse(&ok[..5]),
            Err(AckError::Length { .. })
        ));
        assert!(matches!(
            AckFrame::parse(&ok[..12]),
            Err(AckError::Length { .. })
        ));
        let mut many = ok.clone();
        many[8] = 33;
        assert_eq!(AckFrame::parse(&many), Err(AckError::TooManyRanges(33)));
        let range = |s: u32, e: u32| {
            let mut v = ok.clone();
            v[9..13].copy_from_slice(&s.to_le_bytes());
            v[13..17].copy_from_slice(&e.to_le_bytes());
            AckFrame::parse(&v)
        };
        assert!(matches!(range(0, 3), Err(AckError::BadRange { .. })));
        assert!(matches!(range(3, 3), Err(AckError::BadRange { .. })));
        assert!(matches!(range(5, 3), Err(AckError::BadRange { .. })));
        assert!(matches!(
            range(1, MAX_OFFSET + 1),
            Err(AckError::BadRange { .. })
        ));
        // Overlapping and touching ranges.
        let mut two = AckFrame::new(0, 0);
        two.push(1, 4);
        two.push(6, 9);
        let mut v = bytes(&two);
        v[17..21].copy_from_slice(&3u32.to_le_bytes());
        assert_eq!(AckFrame::parse(&v), Err(AckError::Unordered(3)));
        v[17..21].copy_from_slice(&4u32.to_le_bytes());
        assert_eq!(AckFrame::parse(&v), Err(AckError::Unordered(4)));
    }
}
