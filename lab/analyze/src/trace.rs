//! Streaming parser of valgrind lackey `--trace-mem=yes` output.
//!
//! Seed 003 (Xie, Zhao & Bhuyan) drives its analysis from an execution-driven simulator; on this
//! host the instrument is valgrind's lackey, whose memory trace is one line per access:
//! `I  addr,size` (instruction fetch), ` L addr,size` (load), ` S addr,size` (store) and
//! ` M addr,size` (modify: a load and a store of the same location by one instruction).
//! Lines starting with `==` are valgrind's own messages; they are kept (bounded) for error
//! reports. The trace is read from any [`Read`] (normally a pipe), in a large buffer, with a
//! hand-written hex parser and no allocation per line: it is never stored whole.

use std::io::Read;

/// The kind of one trace record.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Kind {
    /// Instruction fetch (`I`).
    Instr,
    /// Data load (`L`).
    Load,
    /// Data store (`S`).
    Store,
    /// Data modify (`M`): load and store of the same location by one instruction.
    Modify,
}

/// One access of the trace.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Record {
    /// What kind of access.
    pub kind: Kind,
    /// Virtual address (as seen by the traced process).
    pub addr: u64,
    /// Access size in bytes.
    pub size: u32,
}

/// Why a trace could not be read.
#[derive(Debug, thiserror::Error)]
pub enum TraceError {
    /// Reading the underlying stream failed.
    #[error("reading the trace: {0}")]
    Io(#[from] std::io::Error),
    /// A line is not a lackey record nor a valgrind message.
    #[error("malformed trace line {line}: {text:?}")]
    Malformed {
        /// 1-based line number.
        line: u64,
        /// The offending line (at most 80 bytes of it).
        text: String,
    },
    /// The stream ended in the middle of a line.
    #[error("truncated trace: the stream ended inside line {line} ({text:?})")]
    Truncated {
        /// 1-based line number of the partial line.
        line: u64,
        /// What was read of it.
        text: String,
    },
}

/// What [`LackeyReader::for_each`] saw besides the records.
#[derive(Clone, Debug, Default)]
pub struct Summary {
    /// Records parsed.
    pub records: u64,
    /// Lines read (records and messages).
    pub lines: u64,
    /// The last valgrind messages (`==pid== ...` lines), at most [`MAX_MESSAGES`].
    pub messages: Vec<String>,
}

/// How many valgrind message lines a [`Summary`] keeps (the last ones).
pub const MAX_MESSAGES: usize = 64;

/// Default read buffer: 1 MiB.
const BUF: usize = 1 << 20;

static HEX: [u8; 256] = {
    let mut t = [0xffu8; 256];
    let mut i = 0;
    while i < 10 {
        t[b'0' as usize + i] = i as u8;
        i += 1;
    }
    let mut i = 0;
    while i < 6 {
        t[b'a' as usize + i] = 10 + i as u8;
        t[b'A' as usize + i] = 10 + i as u8;
        i += 1;
    }
    t
};

/// Outcome of parsing at one position.
enum Step {
    Record(Record, usize),
    Message(usize, usize),
    Incomplete,
    Bad(usize),
}

/// A streaming reader of lackey traces.
pub struct LackeyReader<R> {
    inner: R,
    buf: Vec<u8>,
    start: usize,
    end: usize,
    eof: bool,
}

impl<R: Read> LackeyReader<R> {
    /// A reader over `inner` with a 1 MiB buffer.
    pub fn new(inner: R) -> Self {
        Self::with_capacity(BUF, inner)
    }

    /// A reader with a buffer of `cap` bytes (at least 256).
    pub fn with_capacity(cap: usize, inner: R) -> Self {
        LackeyReader {
            inner,
            buf: vec![0; cap.max(256)],
            start: 0,
            end: 0,
            eof: false,
        }
    }

    /// Moves the unparsed tail to the front and reads more; returns false at end of stream.
    fn refill(&mut self) -> std::io::Result<bool> {
        if self.eof {
            return Ok(false);
        }
        if self.start > 0 {
            self.buf.copy_within(self.start..self.end, 0);
            self.end -= self.start;
            self.start = 0;
        }
        if self.end == self.buf.len() {
            // A line longer than the buffer: grow (valgrind messages can be long).
            let n = self.buf.len() * 2;
            self.buf.resize(n, 0);
        }
        loop {
            match self.inner.read(&mut self.buf[self.end..]) {
                Ok(0) => {
                    self.eof = true;
                    return Ok(false);
                }
                Ok(n) => {
                    self.end += n;
                    return Ok(true);
                }
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(e),
            }
        }
    }

    /// Parses every record of the stream, calling `f` for each, until the end of the stream.
    pub fn for_each(&mut self, mut f: impl FnMut(Record)) -> Result<Summary, TraceError> {
        let mut sum = Summary::default();
        loop {
            let step = parse(&self.buf[self.start..self.end]);
            match step {
                Step::Record(r, used) => {
                    self.start += used;
                    sum.records += 1;
                    sum.lines += 1;
                    f(r);
                }
                Step::Message(len, used) => {
                    let text = &self.buf[self.start..self.start + len];
                    if sum.messages.len() == MAX_MESSAGES {
                        sum.messages.remove(0);
                    }
                    sum.messages
                        .push(String::from_utf8_lossy(text).trim_end().to_string());
                    self.start += used;
                    sum.lines += 1;
                }
                Step::Incomplete => {
                    if !self.refill()? {
                        if self.start == self.end {
                            return Ok(sum);
                        }
                        let text = snippet(&self.buf[self.start..self.end]);
                        return Err(TraceError::Truncated {
                            line: sum.lines + 1,
                            text,
                        });
                    }
                }
                Step::Bad(len) => {
                    return Err(TraceError::Malformed {
                        line: sum.lines + 1,
                        text: snippet(&self.buf[self.start..self.start + len]),
                    })
                }
            }
        }
    }
}

fn snippet(b: &[u8]) -> String {
    let end = b
        .iter()
        .position(|&c| c == b'\n')
        .unwrap_or(b.len())
        .min(80);
    String::from_utf8_lossy(&b[..end]).to_string()
}

/// Length of the line at the start of `b` (without `\n`), or `None` if no newline yet.
fn line_len(b: &[u8]) -> Option<usize> {
    b.iter().position(|&c| c == b'\n')
}

#[inline(always)]
fn parse(b: &[u8]) -> Step {
    if b.len() < 4 {
        return match line_len(b) {
            Some(n) => classify_other(b, n),
            None => Step::Incomplete,
        };
    }
    let kind = match (b[0], b[1], b[2]) {
        (b'I', b' ', b' ') => Kind::Instr,
        (b' ', b'L', b' ') => Kind::Load,
        (b' ', b'S', b' ') => Kind::Store,
        (b' ', b'M', b' ') => Kind::Modify,
        _ => {
            return match line_len(b) {
                Some(n) => classify_other(b, n),
                None => Step::Incomplete,
            }
        }
    };
    let mut i = 3;
    let mut addr: u64 = 0;
    let mut digits = 0;
    loop {
        let Some(&c) = b.get(i) else {
            return Step::Incomplete;
        };
        let v = HEX[c as usize];
        if v == 0xff {
            break;
        }
        if digits == 16 {
            return bad(b);
        }
        addr = (addr << 4) | v as u64;
        digits += 1;
        i += 1;
    }
    if digits == 0 || b[i] != b',' {
        return bad(b);
    }
    i += 1;
    let mut size: u32 = 0;
    let mut sdigits = 0;
    loop {
        let Some(&c) = b.get(i) else {
            return Step::Incomplete;
        };
        if c.is_ascii_digit() {
            if sdigits == 9 {
                return bad(b);
            }
            size = size * 10 + (c - b'0') as u32;
            sdigits += 1;
            i += 1;
        } else {
            break;
        }
    }
    if sdigits == 0 || b[i] != b'\n' {
        return bad(b);
    }
    Step::Record(Record { kind, addr, size }, i + 1)
}

fn bad(b: &[u8]) -> Step {
    match line_len(b) {
        Some(n) => Step::Bad(n),
        None => Step::Incomplete,
    }
}

fn classify_other(b: &[u8], n: usize) -> Step {
    let line = &b[..n];
    if line.starts_with(b"==") || line.starts_with(b"--") || line.is_empty() {
        Step::Message(n, n + 1)
    } else {
        Step::Bad(n)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn all(text: &str, cap: usize) -> Result<(Vec<Record>, Summary), TraceError> {
        let mut v = Vec::new();
        let s = LackeyReader::with_capacity(cap, text.as_bytes()).for_each(|r| v.push(r))?;
        Ok((v, s))
    }

    const T: &str = "==1== Lackey\nI  0401ab70,3\n S 1fff000778,8\n L 10,4\n M ffffffff00000000,16\n==1== Exit code: 0\n";

    #[test]
    fn parses_each_kind() {
        for cap in [256, 1 << 20] {
            let (v, s) = all(T, cap).unwrap();
            assert_eq!(v.len(), 4);
            assert_eq!(
                v[0],
                Record {
                    kind: Kind::Instr,
                    addr: 0x401ab70,
                    size: 3
                }
            );
            assert_eq!(
                v[1],
                Record {
                    kind: Kind::Store,
                    addr: 0x1fff000778,
                    size: 8
                }
            );
            assert_eq!(
                v[2],
                Record {
                    kind: Kind::Load,
                    addr: 0x10,
                    size: 4
                }
            );
            assert_eq!(
                v[3],
                Record {
                    kind: Kind::Modify,
                    addr: 0xffff_ffff_0000_0000,
                    size: 16
                }
            );
            assert_eq!(s.messages.len(), 2);
        }
    }

    #[test]
    fn small_buffer_crosses_refills() {
        let mut t = String::new();
        for i in 0..10_000u64 {
            t.push_str(&format!(
                "I  {:08x},{}\n L {:x},8\n",
                i * 3,
                1 + i % 15,
                i * 64
            ));
        }
        let (v, _) = all(&t, 256).unwrap();
        assert_eq!(v.len(), 20_000);
        assert_eq!(v[19_998].addr, 9_999 * 3);
        assert_eq!(v[19_999].addr, 9_999 * 64);
    }

    #[test]
    fn truncated_and_malformed() {
        assert!(matches!(
            all("I  0401ab70,3\nI  0401", 256),
            Err(TraceError::Truncated { line: 2, .. })
        ));
        assert!(matches!(
            all("I  0401ab70,3", 256),
            Err(TraceError::Truncated { .. })
        ));
        assert!(matches!(
            all("I  04zz,3\n", 256),
            Err(TraceError::Malformed { line: 1, .. })
        ));
        assert!(matches!(
            all("hello\n", 256),
            Err(TraceError::Malformed { .. })
        ));
        assert!(matches!(
            all("I  12345678901234567,3\n", 256),
            Err(TraceError::Malformed { .. })
        ));
        assert!(all("", 256).unwrap().0.is_empty());
    }
}
