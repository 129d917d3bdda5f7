//! The transfer protocol `phyllo connect` and `phyllo serve` speak over a session: a file (or
//! standard input) moved as offered, acknowledged, offset-addressed data, checked whole.
//!
//! ```text
//! client                                   server
//! Offer { id, name, size?, hash? }  ─────▶  checks the name, the space, an existing file;
//!                                   ◀─────  Accept { id, have }   (or Fail { reason }, or
//!                                           Done { name } for a file already there whole)
//! Data { offset = have, … } …       ─────▶  written at its offset: a resent message is an
//!                                           idempotent write, never an append
//! Finish { size, hash }             ─────▶  the whole file's BLAKE3 checked, then renamed
//!                                   ◀─────  Done { name }         (or Fail { reason })
//! ```
//!
//! A single file's client does not wait for the `Accept` to start: it sends the file's first
//! 64 KiB right behind the offer (a round trip less per transfer). The server takes them after
//! the offer like any data — an overlap with what it holds is checked, a refused offer's data
//! is dropped — and the client goes on from `have` if the server holds more.
//!
//! A transfer is named by its `id`: for a file, a digest of its name, size and modification
//! time, so a client that runs again (or a session that ends and comes back, or a server that
//! restarts) offers the same transfer, and the server answers with `have`, the bytes it already
//! holds in a row from the start; the client goes on from there. Data always extends the bytes
//! the server holds: an offset beyond them is refused, an overlap must carry the same bytes.
//!
//! A directory goes as one transfer per file, each named by its path inside the directory
//! (`photos/2024/a.jpg`, an offer marked `tree`) and offered with its BLAKE3, so that a file
//! the server already holds under that name with the same bytes is confirmed without being
//! sent again: a directory sent twice, or after an interruption, moves only what is missing.
//!
//! Every message is one session message: a type byte, then fixed little-endian fields, then
//! (for names and reasons) the rest of the message as UTF-8. [`Message::parse`] refuses
//! anything else with a [`ParseError`]; a server answers a message it cannot parse with
//! [`Message::Fail`].

use thiserror::Error;

/// A ping; the server echoes it (the whole message).
pub const PING: u8 = b'p';
const OFFER: u8 = b'O';
const ACCEPT: u8 = b'A';
const DATA: u8 = b'D';
const FINISH: u8 = b'F';
const DONE: u8 = b'K';
const FAIL: u8 = b'X';

/// Bytes in front of a [`Message::Data`]'s bytes: the type and the offset.
pub const DATA_HEADER: usize = 9;

/// The longest name a transfer may carry, in bytes (a file name on most file systems); in a
/// directory, the longest of each component.
pub const MAX_NAME: usize = 255;

/// The longest path a file in a directory may carry, in bytes (Linux's `PATH_MAX`).
pub const MAX_PATH: usize = 4096;

/// The most components a file's path in a directory may have.
pub const MAX_DEPTH: usize = 64;

/// An offer's flags: a size follows.
const HAS_SIZE: u8 = 1;
/// An offer's flags: the name is a path inside a directory being sent.
const TREE: u8 = 2;
/// An offer's flags: a BLAKE3 digest follows the size.
const HAS_HASH: u8 = 4;

/// A transfer's identity (see the [module docs](self)).
pub type TransferId = [u8; 16];

/// What a client offers ([`Message::Offer`]), and what the server takes it by.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Offer<'a> {
    /// The transfer's identity.
    pub id: TransferId,
    /// Its size, when known beforehand (a file; not standard input).
    pub size: Option<u64>,
    /// Its BLAKE3, when known beforehand (a file in a directory).
    pub hash: Option<[u8; 32]>,
    /// `name` is a file's path inside a directory being sent ([`check_path`]), not a base
    /// name ([`check_name`]).
    pub tree: bool,
    /// The name to store it under: a base name, or with `tree` a relative path.
    pub name: &'a str,
}

/// One message of the transfer protocol.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Message<'a> {
    /// The client offers a transfer.
    Offer(Offer<'a>),
    /// The server takes the transfer and holds its first `have` bytes already.
    Accept {
        /// The transfer accepted.
        id: TransferId,
        /// Bytes in a row from the start that the server holds.
        have: u64,
    },
    /// Bytes of the transfer at `offset`.
    Data {
        /// Where `bytes` go.
        offset: u64,
        /// The bytes.
        bytes: &'a [u8],
    },
    /// The client has sent everything: the transfer's size and BLAKE3.
    Finish {
        /// Its size.
        size: u64,
        /// Its BLAKE3.
        hash: [u8; 32],
    },
    /// The server checked the whole transfer and stored it under `name`.
    Done {
        /// Where it went (in the server's output directory), or `-` when the server keeps
        /// no files.
        name: &'a str,
    },
    /// The server ended the transfer without storing it.
    Fail {
        /// Why, for the person who sent it.
        reason: &'a str,
    },
}

/// A message that is not one of the transfer protocol's.
#[derive(Debug, Error, PartialEq, Eq)]
pub enum ParseError {
    /// No type byte.
    #[error("an empty message")]
    Empty,
    /// A type byte the protocol does not have.
    #[error("unknown message type {0:#04x}")]
    UnknownType(u8),
    /// Shorter than the message type's fixed fields.
    #[error("a truncated {0} message")]
    Truncated(&'static str),
    /// Longer than the message type allows.
    #[error("trailing bytes after a {0} message")]
    Trailing(&'static str),
    /// A name or reason that is not UTF-8.
    #[error("a {0} message whose text is not UTF-8")]
    NotUtf8(&'static str),
    /// An offer's flags byte with bits the protocol does not have.
    #[error("an offer with unknown flags {0:#04x}")]
    Flags(u8),
}

fn take<const N: usize>(b: &[u8], at: usize, what: &'static str) -> Result<[u8; N], ParseError> {
    b.get(at..at + N)
        .and_then(|s| s.try_into().ok())
        .ok_or(ParseError::Truncated(what))
}

fn text<'a>(b: &'a [u8], what: &'static str) -> Result<&'a str, ParseError> {
    std::str::from_utf8(b).map_err(|_| ParseError::NotUtf8(what))
}

impl<'a> Message<'a> {
    /// The message in `m`, or why it is none.
    pub fn parse(m: &'a [u8]) -> Result<Message<'a>, ParseError> {
        let (&ty, rest) = m.split_first().ok_or(ParseError::Empty)?;
        match ty {
            OFFER => {
                let id = take::<16>(rest, 0, "offer")?;
                let [flags] = take::<1>(rest, 16, "offer")?;
                if flags & !(HAS_SIZE | TREE | HAS_HASH) != 0 {
                    return Err(ParseError::Flags(flags));
                }
                let size = u64::from_le_bytes(take::<8>(rest, 17, "offer")?);
                let size = (flags & HAS_SIZE != 0).then_some(size);
                let (hash, at) = if flags & HAS_HASH != 0 {
                    (Some(take::<32>(rest, 25, "offer")?), 57)
                } else {
                    (None, 25)
                };
                let name = text(&rest[at..], "offer")?;
                Ok(Message::Offer(Offer {
                    id,
                    size,
                    hash,
                    tree: flags & TREE != 0,
                    name,
                }))
            }
            ACCEPT => {
                let id = take::<16>(rest, 0, "accept")?;
                let have = u64::from_le_bytes(take::<8>(rest, 16, "accept")?);
                if rest.len() > 24 {
                    return Err(ParseError::Trailing("accept"));
                }
                Ok(Message::Accept { id, have })
            }
            DATA => {
                let offset = u64::from_le_bytes(take::<8>(rest, 0, "data")?);
                Ok(Message::Data {
                    offset,
                    bytes: &rest[8..],
                })
            }
            FINISH => {
                let size = u64::from_le_bytes(take::<8>(rest, 0, "finish")?);
                let hash = take::<32>(rest, 8, "finish")?;
                if rest.len() > 40 {
                    return Err(ParseError::Trailing("finish"));
                }
                Ok(Message::Finish { size, hash })
            }
            DONE => Ok(Message::Done {
                name: text(rest, "done")?,
            }),
            FAIL => Ok(Message::Fail {
                reason: text(rest, "fail")?,
            }),
            t => Err(ParseError::UnknownType(t)),
        }
    }

    /// The message's bytes.
    pub fn encode(&self) -> Vec<u8> {
        let mut v = Vec::new();
        match self {
            Message::Offer(Offer {
                id,
                size,
                hash,
                tree,
                name,
            }) => {
                v.push(OFFER);
                v.extend_from_slice(id);
                let flags = if size.is_some() { HAS_SIZE } else { 0 }
                    | if *tree { TREE } else { 0 }
                    | if hash.is_some() { HAS_HASH } else { 0 };
                v.push(flags);
                v.extend_from_slice(&size.unwrap_or(0).to_le_bytes());
                if let Some(h) = hash {
                    v.extend_from_slice(h);
                }
                v.extend_from_slice(name.as_bytes());
            }
            Message::Accept { id, have } => {
                v.push(ACCEPT);
                v.extend_from_slice(id);
                v.extend_from_slice(&have.to_le_bytes());
            }
            Message::Data { offset, bytes } => {
                v.extend_from_slice(&data_header(*offset));
                v.extend_from_slice(bytes);
            }
            Message::Finish { size, hash } => {
                v.push(FINISH);
                v.extend_from_slice(&size.to_le_bytes());
                v.extend_from_slice(hash);
            }
            Message::Done { name } => {
                v.push(DONE);
                v.extend_from_slice(name.as_bytes());
            }
            Message::Fail { reason } => {
                v.push(FAIL);
                v.extend_from_slice(reason.as_bytes());
            }
        }
        v
    }
}

/// The header of a [`Message::Data`] at `offset`, for a sender that writes the bytes behind it
/// in place.
pub fn data_header(offset: u64) -> [u8; DATA_HEADER] {
    let mut h = [0; DATA_HEADER];
    h[0] = DATA;
    h[1..].copy_from_slice(&offset.to_le_bytes());
    h
}

/// Why a name cannot be stored under.
#[derive(Debug, Error, PartialEq, Eq)]
pub enum NameError {
    /// Empty, `.` or `..`.
    #[error("an empty name, `.` or `..`")]
    Empty,
    /// Longer than [`MAX_NAME`] bytes.
    #[error("a name longer than {MAX_NAME} bytes")]
    TooLong,
    /// A `/` or `\`: a path, not a name.
    #[error("a path, not a name (it holds `/` or `\\`)")]
    Path,
    /// NUL or another control character.
    #[error("a name with a control character")]
    Control,
    /// The prefix of the server's own partial files.
    #[error("a name starting with `{PARTIAL_PREFIX}` (the server's partial files)")]
    Reserved,
    /// A path in a directory longer than [`MAX_PATH`] bytes or deeper than [`MAX_DEPTH`].
    #[error("a path longer than {MAX_PATH} bytes or deeper than {MAX_DEPTH} directories")]
    TooDeep,
}

/// The prefix of a partial transfer's file in a server's output directory.
pub const PARTIAL_PREFIX: &str = ".phyllo-part-";

/// `name` if a server may store a transfer under it in its output directory: a base name
/// (no `/` or `\`, not `.` or `..`), no control characters, at most [`MAX_NAME`] bytes, not one
/// of the server's own partial files. Checked, never rewritten: a name the sender did not
/// choose would surprise whoever looks for the file.
pub fn check_name(name: &str) -> Result<&str, NameError> {
    if name.is_empty() || name == "." || name == ".." {
        return Err(NameError::Empty);
    }
    if name.len() > MAX_NAME {
        return Err(NameError::TooLong);
    }
    if name.contains(['/', '\\']) {
        return Err(NameError::Path);
    }
    if name.chars().any(char::is_control) {
        return Err(NameError::Control);
    }
    if name.starts_with(PARTIAL_PREFIX) {
        return Err(NameError::Reserved);
    }
    Ok(name)
}

/// `path` if a server may store a file of a directory under it, inside its output directory:
/// components joined by `/`, each a name [`check_name`] passes (so no empty component, no `.`
/// or `..`, no leading `/`), at most [`MAX_PATH`] bytes and [`MAX_DEPTH`] components.
pub fn check_path(path: &str) -> Result<&str, NameError> {
    if path.len() > MAX_PATH || path.split('/').count() > MAX_DEPTH {
        return Err(NameError::TooDeep);
    }
    for component in path.split('/') {
        check_name(component)?;
    }
    Ok(path)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn every_message_round_trips() {
        let all = [
            Message::Offer(Offer {
                id: [7; 16],
                size: Some(1 << 40),
                hash: None,
                tree: false,
                name: "report.pdf",
            }),
            Message::Offer(Offer {
                id: [0; 16],
                size: None,
                hash: None,
                tree: false,
                name: "stdin",
            }),
            Message::Offer(Offer {
                id: [3; 16],
                size: Some(0),
                hash: Some([5; 32]),
                tree: true,
                name: "photos/2024/a.jpg",
            }),
            Message::Accept {
                id: [1; 16],
                have: 12345,
            },
            Message::Data {
                offset: 99,
                bytes: b"abc",
            },
            Message::Data {
                offset: 0,
                bytes: b"",
            },
            Message::Finish {
                size: 3,
                hash: [9; 32],
            },
            Message::Done { name: "a b" },
            Message::Fail {
                reason: "no space left",
            },
        ];
        for m in all {
            assert_eq!(Message::parse(&m.encode()), Ok(m.clone()), "{m:?}");
        }
    }

    #[test]
    fn malformed_messages_are_refused_with_their_reason() {
        assert_eq!(Message::parse(b""), Err(ParseError::Empty));
        assert_eq!(Message::parse(b"Z"), Err(ParseError::UnknownType(b'Z')));
        assert_eq!(Message::parse(b"D1234"), Err(ParseError::Truncated("data")));
        assert_eq!(
            Message::parse(&[FINISH; 42]),
            Err(ParseError::Trailing("finish"))
        );
        let mut offer = Message::Offer(Offer {
            id: [0; 16],
            size: None,
            hash: None,
            tree: false,
            name: "x",
        })
        .encode();
        offer[17] = 8;
        assert_eq!(Message::parse(&offer), Err(ParseError::Flags(8)));
        // A hash announced but cut short.
        offer[17] = HAS_HASH;
        assert_eq!(Message::parse(&offer), Err(ParseError::Truncated("offer")));
        assert_eq!(
            Message::parse(&[FAIL, 0xff, 0xfe]),
            Err(ParseError::NotUtf8("fail"))
        );
    }

    #[test]
    fn names_are_base_names_only() {
        assert_eq!(check_name("file.tar.gz"), Ok("file.tar.gz"));
        assert_eq!(check_name("ünïcode ok"), Ok("ünïcode ok"));
        assert_eq!(check_name(""), Err(NameError::Empty));
        assert_eq!(check_name(".."), Err(NameError::Empty));
        assert_eq!(check_name("../etc/passwd"), Err(NameError::Path));
        assert_eq!(check_name("a/b"), Err(NameError::Path));
        assert_eq!(check_name("a\\b"), Err(NameError::Path));
        assert_eq!(check_name("a\0b"), Err(NameError::Control));
        assert_eq!(check_name("a\nb"), Err(NameError::Control));
        assert_eq!(check_name(&"x".repeat(256)), Err(NameError::TooLong));
        assert_eq!(check_name(".phyllo-part-0123"), Err(NameError::Reserved));
    }

    #[test]
    fn paths_in_a_directory_are_checked_component_by_component() {
        assert_eq!(check_path("photos/2024/a.jpg"), Ok("photos/2024/a.jpg"));
        assert_eq!(check_path("a"), Ok("a"));
        assert_eq!(check_path("/etc/passwd"), Err(NameError::Empty));
        assert_eq!(check_path("a//b"), Err(NameError::Empty));
        assert_eq!(check_path("a/"), Err(NameError::Empty));
        assert_eq!(check_path("a/../../b"), Err(NameError::Empty));
        assert_eq!(check_path("a/./b"), Err(NameError::Empty));
        assert_eq!(check_path("a\\..\\b"), Err(NameError::Path));
        assert_eq!(check_path("a/b\0"), Err(NameError::Control));
        assert_eq!(check_path("a/.phyllo-part-1"), Err(NameError::Reserved));
        assert_eq!(
            check_path(&("d/".repeat(MAX_DEPTH) + "f")),
            Err(NameError::TooDeep)
        );
        assert_eq!(
            check_path(&"x".repeat(MAX_PATH + 1)),
            Err(NameError::TooDeep)
        );
    }

    proptest! {
        #[test]
        fn parse_never_panics(bytes in proptest::collection::vec(any::<u8>(), 0..80)) {
            let _ = Message::parse(&bytes);
        }

        #[test]
        fn data_round_trips(offset in any::<u64>(), bytes in proptest::collection::vec(any::<u8>(), 0..64)) {
            let m = Message::Data { offset, bytes: &bytes };
            let bytes = m.encode();
            prop_assert_eq!(Message::parse(&bytes), Ok(m.clone()));
        }
    }
}
