//! The sending side of a transfer's bytes: the source read in blocks, handed out into
//! messages, and hashed (BLAKE3) as it is handed out — the counterpart of
//! [`crate::incoming`].
//!
//! Why blocks: a message carries 8–16 KiB less its header, so reading and hashing it on its
//! own costs a `read` call per message and puts the hash's partial 1024-byte chunk at every
//! message's edges on the `blake3` crate's one-block-at-a-time path (it hashes many chunks
//! side by side only within one update and from a chunk boundary). A block of [`BLOCK`] bytes
//! is read with one call and hashed with one update once it has all been handed out; each
//! message then takes a copy of its part of the block, the copy the `read` into the message
//! made before.
//!
//! The hash runs on the thread that reads. A thread of its own, fed whole blocks, was measured
//! against it on the bulk experiment's loopback transfer (64 MiB, both ends on one 2-core
//! machine, interleaved pairs of runs): 237.5 against 236.7 MB/s (medians of 9), and 240.8
//! against 256.9 MB/s with the server held to one core (medians of 7), for about 5 % more of
//! the sender's CPU. With the receiver's work on the same cores, the thread only moved the
//! hash; it would help a sender with a core to spare, which this machine cannot show.
//!
//! The hash covers exactly the bytes handed out, in a row from the start: bytes read ahead
//! into the block but not yet handed out are not in it, so a transfer that ends early (a
//! deadline, `--throughput`) finishes with the hash of what it sent.

use crate::app_protocol::read_full;
use std::io::{Read, Seek, SeekFrom};

/// Bytes read from the source at once: small enough to stay in a core's L2 cache between the
/// read, the hash and the copies into messages that follow it, large enough that the hash
/// runs on many chunks at once and the `read` calls are few.
pub const BLOCK: usize = 256 << 10;

/// What a transfer sends.
pub enum Source {
    /// A file: resumable from any offset the server names, by reading it there again.
    File {
        /// The open file.
        file: std::fs::File,
        /// Its metadata when it was opened (the transfer's size and identity).
        meta: std::fs::Metadata,
    },
    /// Standard input (or generated data): read once, so only what an ended session handed
    /// back can be sent again.
    Stream(Box<dyn Read>),
}

/// A transfer's source, read in blocks and hashed as it is handed out.
pub struct Outgoing {
    source: Source,
    /// The block read last, `block[..len]` valid.
    block: Vec<u8>,
    len: usize,
    /// The source's offset of `block[0]`.
    start: u64,
    /// The next byte of the block to hand out.
    at: usize,
    /// The block's bytes taken into the hash (or found there already): `block[..hashed]`.
    hashed: usize,
    hash: blake3::Hasher,
    /// Bytes in the hash, in a row from the source's start.
    upto: u64,
}

impl Outgoing {
    /// Read `source` from its start.
    pub fn new(source: Source) -> Outgoing {
        Outgoing {
            source,
            block: Vec::new(),
            len: 0,
            start: 0,
            at: 0,
            hashed: 0,
            hash: blake3::Hasher::new(),
            upto: 0,
        }
    }

    /// The source.
    pub fn source(&self) -> &Source {
        &self.source
    }

    /// Hand out the next bytes, at most `max`, to `to` (in one or two slices: it appends
    /// them to a message, so they are written once and never zeroed first); how many (0 at
    /// the source's end). From a file, `max` are handed out unless the file ends first; from
    /// a stream, a message goes with what one read of the stream brought, so a slow pipe's
    /// bytes are not held back.
    pub fn take(&mut self, max: usize, mut to: impl FnMut(&[u8])) -> std::io::Result<usize> {
        let mut n = 0;
        while n < max {
            if self.at == self.len {
                if n > 0 && matches!(self.source, Source::Stream(_)) {
                    break;
                }
                self.refill()?;
                if self.len == 0 {
                    break;
                }
            }
            let k = (max - n).min(self.len - self.at);
            to(&self.block[self.at..self.at + k]);
            self.at += k;
            n += k;
        }
        Ok(n)
    }

    /// Hash what was handed out of the block and read the next one.
    fn refill(&mut self) -> std::io::Result<()> {
        self.settle();
        self.start += self.len as u64;
        self.block.resize(BLOCK, 0);
        let n = match &mut self.source {
            Source::File { file, .. } => read_full(file, &mut self.block),
            Source::Stream(r) => loop {
                match r.read(&mut self.block) {
                    Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                    other => break other,
                }
            },
        };
        // A failed read leaves an empty block at the same offset.
        self.len = *n.as_ref().unwrap_or(&0);
        self.at = 0;
        self.hashed = 0;
        n.map(|_| ())
    }

    /// Take what was handed out of the block and is not in the hash yet into it, where it
    /// extends the hash (bytes handed out again after a resume are in it already).
    fn settle(&mut self) {
        let (from, to) = (self.start + self.hashed as u64, self.start + self.at as u64);
        if from <= self.upto && to > self.upto {
            let skip = (self.upto - from) as usize;
            self.hash.update(&self.block[self.hashed + skip..self.at]);
            self.upto = to;
        }
        self.hashed = self.at;
    }

    /// Go on from byte `to` of a file (a resume: the server holds the bytes before it). Bytes
    /// before `to` not yet hashed here (a new process resuming) are read and hashed first.
    /// Streams cannot seek: an error.
    pub fn seek(&mut self, to: u64) -> std::io::Result<()> {
        self.settle();
        let Source::File { file, .. } = &mut self.source else {
            return Err(std::io::Error::other("a stream cannot be read again"));
        };
        if to > self.upto {
            file.seek(SeekFrom::Start(self.upto))?;
            let n = std::io::copy(&mut file.take(to - self.upto), &mut self.hash)?;
            self.upto += n;
        }
        file.seek(SeekFrom::Start(to))?;
        (self.start, self.len, self.at, self.hashed) = (to, 0, 0, 0);
        Ok(())
    }

    /// Bytes in the hash, from the start (those handed out, or hashed by a resume).
    #[cfg(test)]
    fn hashed(&mut self) -> u64 {
        self.settle();
        self.upto
    }

    /// BLAKE3 of the bytes hashed so far: those handed out, and those a resume hashed.
    pub fn digest(&mut self) -> [u8; 32] {
        self.settle();
        *self.hash.finalize().as_bytes()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bytes(n: usize) -> Vec<u8> {
        (0..n).map(|i| (i * 7 + i / 251) as u8).collect()
    }

    fn file_of(data: &[u8]) -> Source {
        // Unlinked once open: the file goes when the test drops it.
        static N: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
        let n = N.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let path = std::env::temp_dir().join(format!("phyllo-outgoing-{}-{n}", std::process::id()));
        let mut f = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .create_new(true)
            .open(&path)
            .expect("a temporary file");
        std::fs::remove_file(&path).expect("unlinked");
        std::io::Write::write_all(&mut f, data).expect("written");
        f.seek(SeekFrom::Start(0)).expect("rewound");
        let meta = f.metadata().expect("metadata");
        Source::File { file: f, meta }
    }

    /// Hand everything out in `piece`-byte rooms: the bytes and the hash.
    fn drain(o: &mut Outgoing, piece: usize) -> Vec<u8> {
        let mut out = Vec::new();
        while o.take(piece, |b| out.extend_from_slice(b)).expect("read") > 0 {}
        out
    }

    #[test]
    fn a_file_is_handed_out_whole_in_full_messages_and_hashed_exactly() {
        let data = bytes(3 * BLOCK + 12_345);
        for piece in [1, 1000, 8183, BLOCK, BLOCK + 1] {
            let mut o = Outgoing::new(file_of(&data));
            let mut first = Vec::new();
            let n = o.take(piece, |b| first.extend_from_slice(b)).expect("read");
            assert_eq!(n, piece.min(data.len()), "a file fills the room");
            let mut out = first;
            out.extend(drain(&mut o, piece));
            assert_eq!(out, data);
            assert_eq!(o.hashed(), data.len() as u64);
            assert_eq!(o.digest(), *blake3::hash(&data).as_bytes(), "piece {piece}");
        }
    }

    #[test]
    fn the_hash_covers_what_was_handed_out_not_what_was_read_ahead() {
        let data = bytes(BLOCK / 2);
        let mut o = Outgoing::new(file_of(&data));
        assert_eq!(o.take(5000, |_| {}).expect("read"), 5000);
        assert_eq!(o.hashed(), 5000);
        assert_eq!(o.digest(), *blake3::hash(&data[..5000]).as_bytes());
    }

    #[test]
    fn a_resume_hashes_the_bytes_the_server_holds_and_goes_on_after_them() {
        let data = bytes(2 * BLOCK + 777);
        // A new process resuming at 300 000: the bytes before are read for the hash only.
        let mut o = Outgoing::new(file_of(&data));
        o.seek(300_000).expect("seek");
        assert_eq!(drain(&mut o, 8183), data[300_000..]);
        assert_eq!(o.digest(), *blake3::hash(&data).as_bytes());
        // A session that ended after 100 000 were handed out, the server holding 60 000:
        // the bytes go out again from there and the hash takes each byte once.
        let mut o = Outgoing::new(file_of(&data));
        o.take(100_000, |_| {}).expect("read");
        o.seek(60_000).expect("seek");
        assert_eq!(drain(&mut o, 8183), data[60_000..]);
        assert_eq!(o.digest(), *blake3::hash(&data).as_bytes());
    }

    #[test]
    fn a_stream_message_goes_with_what_one_read_brought() {
        // A reader that brings 3000 bytes a read, as a slow pipe does.
        struct Trickle(Vec<u8>, usize);
        impl Read for Trickle {
            fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
                let n = buf.len().min(3000).min(self.0.len() - self.1);
                buf[..n].copy_from_slice(&self.0[self.1..self.1 + n]);
                self.1 += n;
                Ok(n)
            }
        }
        let data = bytes(10_000);
        let mut o = Outgoing::new(Source::Stream(Box::new(Trickle(data.clone(), 0))));
        let mut out = Vec::new();
        let n = o.take(8183, |b| out.extend_from_slice(b)).expect("read");
        assert_eq!(n, 3000);
        assert_eq!(out.len(), 3000);
        out.extend(drain(&mut o, 8183));
        assert_eq!(out, data);
        assert_eq!(o.digest(), *blake3::hash(&data).as_bytes());
        assert!(o.seek(0).is_err(), "a stream cannot seek");
    }
}
