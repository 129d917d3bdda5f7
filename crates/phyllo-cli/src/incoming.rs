//! The server's side of a transfer ([`crate::transfer`]): where its bytes go, what it holds,
//! and the checks that decide whether it becomes a file.
//!
//! With an output directory, a transfer is written to a partial file of its own
//! (`.phyllo-part-…`, named by the peer's key and the transfer's id, created without following
//! symlinks), strictly in a row from the start, so its length is what the server holds and a
//! restarted server resumes from it. At [`Incoming::finish`] the whole file's BLAKE3 must
//! match the sender's; only then is it synced and linked under its name (the directory synced
//! too, before the sender hears it is stored), which is never replaced unless the server was
//! told so (`--overwrite`). A file of a directory being sent
//! goes under its path inside the output directory: the directories on the way are made as
//! needed and walked one by one without following a symlink, so nothing is ever written
//! outside the output directory. An offer that carries a hash is answered with
//! [`Taken::Held`] when the name already holds exactly those bytes. Any failure ends the
//! transfer with a reason for the sender and leaves no file under the name; a failure to
//! write removes the partial file (it may be what filled the disk). Without an output
//! directory the server only counts and checks.

use crate::transfer::{check_name, check_path, Offer, TransferId, PARTIAL_PREFIX};
use rustix::fs::{AtFlags, Mode, OFlags, CWD};
use rustix::io::Errno;
use std::collections::HashSet;
use std::fs::{File, OpenOptions};
use std::io::{Read, Seek, SeekFrom, Write};
use std::os::fd::OwnedFd;
use std::os::unix::fs::{FileExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use thiserror::Error;

/// Why a transfer ended without a file; the text goes to the sender.
#[derive(Debug, Error)]
pub enum Refusal {
    /// The offered name is not a base name the server may store under.
    #[error("refused name {name:?}: {why}")]
    Name {
        /// The name offered.
        name: String,
        /// What is wrong with it.
        why: crate::transfer::NameError,
    },
    /// A file of that name exists and the server may not replace it.
    #[error("{0:?} exists on the server (it replaces files only with --overwrite)")]
    Exists(String),
    /// A directory on a file's path is a file or a symlink on the server.
    #[error("{0:?}: a directory on its path is a file or a symlink on the server")]
    NotADirectory(String),
    /// Not enough free space for the announced size.
    #[error("{need} bytes do not fit: {free} bytes free on the server")]
    Space {
        /// The announced size.
        need: u64,
        /// Free bytes in the output directory.
        free: u64,
    },
    /// The transfer's partial file is being received in another session of this server: a
    /// peer whose address changed reached another worker (`serve --workers`) while its
    /// earlier session still holds the transfer. Two writers must never share a partial
    /// file; the earlier session lets it go when it ends.
    #[error("{0:?} is being received in another session; try again when it has ended")]
    Busy(String),
    /// Data with no transfer offered in this session.
    #[error("data without an offered transfer")]
    NoTransfer,
    /// Data past the announced size.
    #[error("data at {offset}..{end} beyond the announced size {size}")]
    BeyondSize {
        /// The data's first byte.
        offset: u64,
        /// One past its last.
        end: u64,
        /// The size announced.
        size: u64,
    },
    /// Data that would leave a hole: the server holds fewer bytes than its offset.
    #[error("data at {offset} when the server holds {have} bytes")]
    Gap {
        /// The data's offset.
        offset: u64,
        /// Bytes held.
        have: u64,
    },
    /// Data over bytes already held, and different from them.
    #[error("data at {offset} differs from the bytes the server already holds there")]
    Overlap {
        /// The data's offset.
        offset: u64,
    },
    /// The finished transfer's size is not what was sent or announced.
    #[error("finished at {size} bytes, but the server holds {have} (announced {announced:?})")]
    Size {
        /// The size the sender finished with.
        size: u64,
        /// Bytes the server holds.
        have: u64,
        /// The size offered.
        announced: Option<u64>,
    },
    /// The whole transfer's BLAKE3 differs from the sender's.
    #[error("the BLAKE3 of the bytes received differs from the sender's")]
    Hash,
    /// The server could not write or place the file.
    #[error("server-side error on {path}: {source}")]
    Io {
        /// The file.
        path: String,
        /// The system's error.
        source: std::io::Error,
    },
}

fn io(path: &Path) -> impl FnOnce(std::io::Error) -> Refusal + '_ {
    move |source| Refusal::Io {
        path: path.display().to_string(),
        source,
    }
}

/// Where an accepted transfer's bytes go.
struct Partial {
    path: PathBuf,
    file: File,
    /// Where the kernel was last asked to start writing the file out ([`WRITEBACK_RUN`]).
    written_back: u64,
    /// The partial file held for this transfer alone, let go when this is dropped (after
    /// the file, which is declared first and so closed first).
    _claim: Claim,
}

/// The partial files being received in this process, by every session of every worker: one
/// set behind a lock, shared by every clone of a [`Store`].
type Receiving = Arc<Mutex<HashSet<PathBuf>>>;

/// One partial file held by one transfer; dropping it lets the file go.
struct Claim {
    path: PathBuf,
    receiving: Receiving,
}

impl Drop for Claim {
    fn drop(&mut self) {
        // A lock poisoned by a panic elsewhere still holds a valid set of paths.
        let mut held = self.receiving.lock().unwrap_or_else(|e| e.into_inner());
        held.remove(&self.path);
    }
}

/// One transfer the server is receiving.
pub struct Incoming {
    id: TransferId,
    name: String,
    size: Option<u64>,
    /// Bytes held, in a row from the start.
    have: u64,
    /// BLAKE3 of those bytes but the pending ones.
    hash: blake3::Hasher,
    /// The partial file, with an output directory.
    partial: Option<Partial>,
    /// Data not yet hashed, nor written to the partial file: both take it in runs of
    /// [`WRITE_RUN`] bytes.
    pending: Vec<u8>,
}

/// Bytes gathered before one write to the partial file and one update of the hash. In runs,
/// the `blake3` crate hashes nearly every 1024-byte chunk side by side with others (AVX2:
/// eight at a time); it does so only within one update and from a chunk boundary, so hashing
/// each message as it came (8 KiB less its header) put about one chunk in eight on its
/// one-block-at-a-time path, which cost as much as the other seven (`perf` of `phyllo serve`
/// in the bulk experiment: 8 % of its time beside 13 % on the wide path).
const WRITE_RUN: usize = 1 << 20;

/// Every this many bytes written, the kernel is asked to start writing them to the disk
/// (`posix_fadvise(DONTNEED)` starts the writeback without waiting for it, then drops the
/// pages already clean). Without it the whole file could still be in the page cache at the
/// end, and the `fsync` before the server's verdict would write all of it while the sender
/// waits: 34 ms for 64 MiB on the machine this was measured on, half a percent of a transfer
/// at 100 Mbit/s. With it the final `fsync` finds at most this much.
const WRITEBACK_RUN: u64 = 8 << 20;

/// Options of the receiving side, and the partial files it is receiving into.
///
/// Clones share the set of partial files being received: a server whose workers
/// (`serve --workers`) each take offers gives each a clone, and an offer for a partial file
/// that another worker's session holds is refused ([`Refusal::Busy`]) rather than written
/// by two. A peer keeps to one worker while its address does (the workers are steered by
/// source address); this guards the peer whose address changed mid-transfer.
#[derive(Clone, Debug, Default)]
pub struct Store {
    /// The output directory (`None`: count and check, keep nothing).
    pub dir: Option<PathBuf>,
    /// Replace a file of the same name.
    pub overwrite: bool,
    /// The partial files held by transfers under way (shared by clones).
    receiving: Receiving,
}

/// How the server takes an offer.
pub enum Taken {
    /// Receive it (from [`Incoming::have`] on).
    Receive(Box<Incoming>),
    /// The name already holds exactly the announced bytes (size and BLAKE3): nothing to
    /// send; the name it is under.
    Held(String),
}

impl Store {
    /// A store writing into `dir` (`None`: count and check, keep nothing), replacing a file
    /// of the same name when `overwrite` says so.
    pub fn new(dir: Option<PathBuf>, overwrite: bool) -> Store {
        Store {
            dir,
            overwrite,
            receiving: Receiving::default(),
        }
    }

    /// Hold `path` for one transfer, unless another holds it.
    fn claim(&self, path: &Path, name: &str) -> Result<Claim, Refusal> {
        let mut held = self.receiving.lock().unwrap_or_else(|e| e.into_inner());
        if !held.insert(path.to_path_buf()) {
            return Err(Refusal::Busy(name.to_owned()));
        }
        Ok(Claim {
            path: path.to_path_buf(),
            receiving: self.receiving.clone(),
        })
    }

    /// Take the offer `o` from the peer whose key is `peer` (hexadecimal): a new partial
    /// file, or the one a transfer of the same id and peer left (resumed from its length);
    /// or, when the name already holds the offered bytes, nothing to receive. A partial file
    /// another transfer holds open (another worker's session) is [`Refusal::Busy`].
    pub fn offer(&self, peer: &str, o: &Offer<'_>) -> Result<Taken, Refusal> {
        let checked = if o.tree {
            check_path(o.name)
        } else {
            check_name(o.name)
        };
        let name = checked
            .map_err(|why| Refusal::Name {
                name: o.name.into(),
                why,
            })?
            .to_owned();
        let size = o.size;
        let mut t = Incoming {
            id: o.id,
            name,
            size,
            have: 0,
            hash: blake3::Hasher::new(),
            partial: None,
            pending: Vec::new(),
        };
        let Some(dir) = &self.dir else {
            return Ok(Taken::Receive(Box::new(t)));
        };
        if let Some(held) = self.existing(dir, &t.name, o)? {
            return Ok(held);
        }
        let path = dir.join(partial_name(peer, &o.id));
        // Held before it is opened: nobody else writes it while this transfer runs.
        let claim = self.claim(&path, &t.name)?;
        let mut file = match OpenOptions::new()
            .read(true)
            .write(true)
            .create_new(true)
            .custom_flags(libc::O_NOFOLLOW)
            .open(&path)
        {
            Ok(f) => f,
            // A transfer of this id from this peer left it: go on from what it holds.
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => OpenOptions::new()
                .read(true)
                .write(true)
                .custom_flags(libc::O_NOFOLLOW)
                .open(&path)
                .map_err(io(&path))?,
            Err(e) => return Err(io(&path)(e)),
        };
        if let Some(need) = size {
            let free = free_space(dir).map_err(io(dir))?;
            let held = file.metadata().map_err(io(&path))?.len();
            if need.saturating_sub(held) > free {
                drop(file);
                if held == 0 {
                    let _ = std::fs::remove_file(&path);
                }
                return Err(Refusal::Space { need, free });
            }
        }
        // What the file holds was written in a row from the start: hash it and go on after it
        // (a longer file than announced is not this transfer's: start again).
        let held = file.metadata().map_err(io(&path))?.len();
        if size.is_some_and(|s| held > s) {
            file.set_len(0).map_err(io(&path))?;
        } else if held > 0 {
            file.seek(SeekFrom::Start(0)).map_err(io(&path))?;
            let copied = std::io::copy(&mut (&mut file).take(held), &mut t.hash);
            t.have = copied.map_err(io(&path))?;
        }
        file.seek(SeekFrom::Start(t.have)).map_err(io(&path))?;
        t.partial = Some(Partial {
            path,
            file,
            written_back: t.have,
            _claim: claim,
        });
        Ok(Taken::Receive(Box::new(t)))
    }

    /// What is at `name` in `dir` already: nothing (`None`), exactly the offered bytes
    /// ([`Taken::Held`]), or something the server may not replace ([`Refusal::Exists`]).
    /// With `--overwrite` anything there is replaced at the end, so only the same bytes count.
    fn existing(&self, dir: &Path, name: &str, o: &Offer<'_>) -> Result<Option<Taken>, Refusal> {
        let Some((parent, base)) = parent_dir(dir, name, false)? else {
            return Ok(None);
        };
        let st = match rustix::fs::statat(&parent, base, AtFlags::SYMLINK_NOFOLLOW) {
            Ok(st) => st,
            Err(Errno::NOENT) => return Ok(None),
            Err(e) => return Err(io(&dir.join(name))(e.into())),
        };
        let regular = rustix::fs::FileType::from_raw_mode(st.st_mode).is_file();
        if let (Some(size), Some(hash), true) = (o.size, o.hash, regular) {
            if st.st_size as u64 == size && same_bytes(&parent, base, &hash) {
                return Ok(Some(Taken::Held(name.to_owned())));
            }
        }
        if self.overwrite {
            Ok(None)
        } else {
            Err(Refusal::Exists(name.to_owned()))
        }
    }
}

/// Whether the regular file `base` in `parent` has BLAKE3 `hash` (a read error: no).
fn same_bytes(parent: &OwnedFd, base: &str, hash: &[u8; 32]) -> bool {
    let flags = OFlags::RDONLY | OFlags::NOFOLLOW | OFlags::CLOEXEC;
    let Ok(fd) = rustix::fs::openat(parent, base, flags, Mode::empty()) else {
        return false;
    };
    let mut h = blake3::Hasher::new();
    std::io::copy(&mut File::from(fd), &mut h).is_ok() && h.finalize() == *hash
}

/// The directory `name` (a base name, or a checked path) goes in, opened, and its last
/// component: each directory on the way is opened without following a symlink, and made
/// when `create` says so; `None` when one is missing and `create` does not. A component that
/// is a file or a symlink is [`Refusal::NotADirectory`].
fn parent_dir<'n>(
    dir: &Path,
    name: &'n str,
    create: bool,
) -> Result<Option<(OwnedFd, &'n str)>, Refusal> {
    let flags = OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC;
    let mut fd =
        rustix::fs::openat(CWD, dir, flags, Mode::empty()).map_err(|e| io(dir)(e.into()))?;
    let (parents, base) = match name.rsplit_once('/') {
        Some((parents, base)) => (Some(parents), base),
        None => (None, name),
    };
    for component in parents.into_iter().flat_map(|p| p.split('/')) {
        if create {
            match rustix::fs::mkdirat(&fd, component, Mode::from_raw_mode(0o755)) {
                // A directory made here is synced into its parent, like the file's own entry
                // at the end: otherwise a crash after the sender is told "stored" could take
                // the new directory, and the file in it, away.
                Ok(()) => rustix::fs::fsync(&fd).map_err(|e| io(&dir.join(name))(e.into()))?,
                Err(Errno::EXIST) => {}
                Err(e) => return Err(io(&dir.join(name))(e.into())),
            }
        }
        fd = match rustix::fs::openat(&fd, component, flags | OFlags::NOFOLLOW, Mode::empty()) {
            Ok(fd) => fd,
            Err(Errno::NOENT) if !create => return Ok(None),
            Err(Errno::LOOP | Errno::NOTDIR) => return Err(Refusal::NotADirectory(name.into())),
            Err(e) => return Err(io(&dir.join(name))(e.into())),
        };
    }
    Ok(Some((fd, base)))
}

/// The partial file of transfer `id` from `peer`: named by both, so no peer reaches another's.
fn partial_name(peer: &str, id: &TransferId) -> String {
    let mut h = blake3::Hasher::new();
    h.update(peer.as_bytes());
    h.update(id);
    let d = h.finalize();
    format!(
        "{PARTIAL_PREFIX}{}",
        crate::app_protocol::hex_digest(&d.as_bytes()[..16])
    )
}

/// Free bytes for an unprivileged writer in `dir`'s file system.
fn free_space(dir: &Path) -> std::io::Result<u64> {
    let s = rustix::fs::statvfs(dir)?;
    Ok(s.f_bavail.saturating_mul(s.f_frsize))
}

impl Incoming {
    /// The transfer's id.
    pub fn id(&self) -> TransferId {
        self.id
    }

    /// Bytes held in a row from the start.
    pub fn have(&self) -> u64 {
        self.have
    }

    /// The partial file it is written to (`None` without an output directory).
    pub fn partial_path(&self) -> Option<&Path> {
        self.partial.as_ref().map(|p| p.path.as_path())
    }

    /// The name it will be stored under.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// `bytes` at `offset`: what extends the bytes held is kept; what overlaps them must be
    /// the same bytes.
    pub fn data(&mut self, offset: u64, bytes: &[u8]) -> Result<(), Refusal> {
        let end = offset.saturating_add(bytes.len() as u64);
        if let Some(size) = self.size.filter(|&s| end > s) {
            return Err(Refusal::BeyondSize { offset, end, size });
        }
        if offset > self.have {
            return Err(Refusal::Gap {
                offset,
                have: self.have,
            });
        }
        let old = ((self.have - offset) as usize).min(bytes.len());
        if old > 0 && self.partial.is_some() {
            self.flush()?;
            let p = self.partial.as_ref().expect("checked");
            let mut held = vec![0; old];
            p.file
                .read_exact_at(&mut held, offset)
                .map_err(io(&p.path))?;
            if held != bytes[..old] {
                return Err(Refusal::Overlap { offset });
            }
        }
        let new = &bytes[old..];
        self.have += new.len() as u64;
        self.pending.extend_from_slice(new);
        if self.pending.len() >= WRITE_RUN {
            self.flush()?;
        }
        Ok(())
    }

    /// Hash what is pending and write it to the partial file.
    pub fn flush(&mut self) -> Result<(), Refusal> {
        self.hash.update(&self.pending);
        let written = match &mut self.partial {
            Some(p) => p.file.write_all(&self.pending).map_err(io(&p.path)),
            None => Ok(()),
        };
        // The buffer stays for the next run.
        self.pending.clear();
        written?;
        if let Some(p) = &mut self.partial {
            let run = self.have.saturating_sub(p.written_back);
            if run >= WRITEBACK_RUN {
                // Advice only: a kernel that ignores it leaves the work to the final fsync.
                let _ = rustix::fs::fadvise(
                    &p.file,
                    p.written_back,
                    std::num::NonZeroU64::new(run),
                    rustix::fs::Advice::DontNeed,
                );
                p.written_back = self.have;
            }
        }
        Ok(())
    }

    /// The sender finished at `size` bytes with BLAKE3 `hash`: check both, then store the
    /// file under its name (synced first); the name it went under (`-` without an output
    /// directory).
    pub fn finish(mut self, size: u64, hash: [u8; 32], store: &Store) -> Result<String, Refusal> {
        if size != self.have || self.size.is_some_and(|s| s != size) {
            self.abandon();
            return Err(Refusal::Size {
                size,
                have: self.have,
                announced: self.size,
            });
        }
        self.flush()?;
        if self.hash.finalize() != hash {
            self.abandon();
            return Err(Refusal::Hash);
        }
        let (Some(p), Some(dir)) = (self.partial.take(), &store.dir) else {
            return Ok("-".into());
        };
        p.file.sync_all().map_err(io(&p.path))?;
        drop(p.file);
        let target = dir.join(&self.name);
        let placed = match parent_dir(dir, &self.name, true) {
            Ok(Some((parent, base))) => {
                if store.overwrite {
                    // Replaces the name itself (a symlink there too), atomically.
                    rustix::fs::renameat(CWD, &p.path, &parent, base)
                } else {
                    // Fails if anything has the name by now (a symlink too): never replaces.
                    rustix::fs::linkat(CWD, &p.path, &parent, base, AtFlags::empty())
                }
                .map_err(std::io::Error::from)
                .and_then(|()| match store.overwrite {
                    true => Ok(()),
                    false => std::fs::remove_file(&p.path),
                })
                // The name on disk too before the sender is told the file is stored: the
                // data was synced above, the directory entry is synced here.
                .and_then(|()| rustix::fs::fsync(&parent).map_err(std::io::Error::from))
            }
            // Made on the way: missing only if removed meanwhile.
            Ok(None) => Err(std::io::ErrorKind::NotFound.into()),
            Err(r) => {
                let _ = std::fs::remove_file(&p.path);
                return Err(r);
            }
        };
        match placed {
            Ok(()) => Ok(self.name.clone()),
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {
                let _ = std::fs::remove_file(&p.path);
                Err(Refusal::Exists(self.name.clone()))
            }
            Err(e) => Err(io(&target)(e)),
        }
    }

    /// Give the transfer up and remove its partial file (a failed write, a wrong hash).
    pub fn abandon(&mut self) {
        if let Some(p) = self.partial.take() {
            let _ = std::fs::remove_file(&p.path);
        }
    }

    /// Stop receiving but keep the partial file, for the sender to resume (its session
    /// ended, another transfer was offered, the server stops). Pending data is written, and
    /// the partial file is let go for another session to take.
    pub fn suspend(mut self) -> Result<(), Refusal> {
        self.flush()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn dir(tag: &str) -> PathBuf {
        let d = std::env::temp_dir().join(format!("phyllo-incoming-{tag}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).unwrap();
        d
    }

    fn digest(b: &[u8]) -> [u8; 32] {
        *blake3::hash(b).as_bytes()
    }

    /// Offer a base name without a hash: always received.
    fn offer(
        store: &Store,
        peer: &str,
        id: TransferId,
        name: &str,
        size: Option<u64>,
    ) -> Result<Incoming, Refusal> {
        let o = Offer {
            id,
            name,
            size,
            hash: None,
            tree: false,
        };
        match store.offer(peer, &o)? {
            Taken::Receive(t) => Ok(*t),
            Taken::Held(n) => panic!("{n} held without a hash offered"),
        }
    }

    #[test]
    fn files_of_a_directory_land_under_their_paths_and_never_through_a_symlink() {
        let d = dir("tree");
        let store = Store::new(Some(d.clone()), false);
        let tree = |name: &'static str, body: &[u8], hash| Offer {
            id: digest(name.as_bytes())[..16].try_into().unwrap(),
            name,
            size: Some(body.len() as u64),
            hash,
            tree: true,
        };
        let Taken::Receive(mut t) = store
            .offer("p", &tree("top/a/b/c.txt", b"abc", None))
            .unwrap()
        else {
            panic!("nothing there yet")
        };
        t.data(0, b"abc").unwrap();
        assert_eq!(
            t.finish(3, digest(b"abc"), &store).unwrap(),
            "top/a/b/c.txt"
        );
        assert_eq!(std::fs::read(d.join("top/a/b/c.txt")).unwrap(), b"abc");
        // Offered again with its hash: held, nothing to send; with other bytes: refused.
        let again = tree("top/a/b/c.txt", b"abc", Some(digest(b"abc")));
        assert!(matches!(store.offer("p", &again), Ok(Taken::Held(n)) if n == "top/a/b/c.txt"));
        let other = tree("top/a/b/c.txt", b"abd", Some(digest(b"abd")));
        assert!(matches!(store.offer("p", &other), Err(Refusal::Exists(_))));
        // A symlink or a file where a directory would be is never walked through.
        let outside = dir("tree-outside");
        std::os::unix::fs::symlink(&outside, d.join("top/link")).unwrap();
        std::fs::write(d.join("top/file"), b"x").unwrap();
        for name in ["top/link/x", "top/file/x"] {
            assert!(matches!(
                store.offer("p", &tree(name, b"x", None)),
                Err(Refusal::NotADirectory(_))
            ));
        }
        // ... also when it appears while the data moves.
        let Taken::Receive(mut t) = store.offer("p", &tree("top/late/x", b"x", None)).unwrap()
        else {
            panic!("nothing there yet")
        };
        t.data(0, b"x").unwrap();
        std::os::unix::fs::symlink(&outside, d.join("top/late")).unwrap();
        assert!(matches!(
            t.finish(1, digest(b"x"), &store),
            Err(Refusal::NotADirectory(_))
        ));
        assert_eq!(std::fs::read_dir(&outside).unwrap().count(), 0);
        // A path that climbs out is refused as a name; a base name may not be a path.
        assert!(matches!(
            store.offer("p", &tree("top/../../x", b"x", None)),
            Err(Refusal::Name { .. })
        ));
        let mut flat = tree("top/x", b"x", None);
        flat.tree = false;
        assert!(matches!(store.offer("p", &flat), Err(Refusal::Name { .. })));
    }

    #[test]
    fn a_transfer_resumes_from_its_partial_file_and_lands_whole() {
        let d = dir("resume");
        let store = Store::new(Some(d.clone()), false);
        let body: Vec<u8> = (0..3_000_000u32).map(|i| (i * 7) as u8).collect();
        let mut t = offer(&store, "peer", [1; 16], "f", Some(body.len() as u64)).unwrap();
        t.data(0, &body[..1_000_000]).unwrap();
        t.suspend().unwrap();
        // A restarted server: the same offer finds the partial file.
        let mut t = offer(&store, "peer", [1; 16], "f", Some(body.len() as u64)).unwrap();
        assert_eq!(t.have(), 1_000_000);
        // A resent overlap is idempotent; a different one is refused.
        t.data(900_000, &body[900_000..1_100_000]).unwrap();
        let mut wrong = body[1_000_000..1_000_010].to_vec();
        wrong[3] ^= 1;
        assert!(matches!(
            t.data(1_000_000, &wrong),
            Err(Refusal::Overlap { .. })
        ));
        assert!(matches!(
            t.data(2_000_000, &body[..1]),
            Err(Refusal::Gap { .. })
        ));
        t.data(1_100_000, &body[1_100_000..]).unwrap();
        assert!(matches!(
            t.data(body.len() as u64, b"x"),
            Err(Refusal::BeyondSize { .. })
        ));
        assert_eq!(
            t.finish(body.len() as u64, digest(&body), &store).unwrap(),
            "f"
        );
        assert_eq!(std::fs::read(d.join("f")).unwrap(), body);
        let left: Vec<_> = std::fs::read_dir(&d).unwrap().collect();
        assert_eq!(left.len(), 1, "the partial file is gone");
    }

    #[test]
    fn an_existing_name_or_a_symlink_is_never_replaced_without_overwrite() {
        let d = dir("exists");
        let store = Store::new(Some(d.clone()), false);
        std::fs::write(d.join("taken"), b"old").unwrap();
        assert!(matches!(
            offer(&store, "p", [2; 16], "taken", Some(3)),
            Err(Refusal::Exists(_))
        ));
        let outside = d.join("outside");
        std::os::unix::fs::symlink(&outside, d.join("link")).unwrap();
        assert!(matches!(
            offer(&store, "p", [2; 16], "link", Some(3)),
            Err(Refusal::Exists(_))
        ));
        // A symlink planted at the partial file's name is not followed either.
        let part = d.join(partial_name("p", &[3; 16]));
        std::os::unix::fs::symlink(&outside, &part).unwrap();
        assert!(matches!(
            offer(&store, "p", [3; 16], "new", Some(3)),
            Err(Refusal::Io { .. })
        ));
        assert!(!outside.exists());
        // With --overwrite the name is replaced, the symlink itself and not its target.
        let store = Store::new(Some(d.clone()), true);
        let mut t = offer(&store, "p", [4; 16], "link", Some(3)).unwrap();
        t.data(0, b"new").unwrap();
        t.finish(3, digest(b"new"), &store).unwrap();
        assert_eq!(std::fs::read(d.join("link")).unwrap(), b"new");
        assert!(!outside.exists());
        assert_eq!(std::fs::read(d.join("taken")).unwrap(), b"old");
    }

    #[test]
    fn a_wrong_hash_or_size_leaves_no_file() {
        let d = dir("hash");
        let store = Store::new(Some(d.clone()), false);
        let mut t = offer(&store, "p", [5; 16], "h", None).unwrap();
        t.data(0, b"abc").unwrap();
        assert!(matches!(
            t.finish(3, digest(b"abd"), &store),
            Err(Refusal::Hash)
        ));
        let mut t = offer(&store, "p", [6; 16], "s", Some(4)).unwrap();
        t.data(0, b"abc").unwrap();
        assert!(matches!(
            t.finish(3, digest(b"abc"), &store),
            Err(Refusal::Size { .. })
        ));
        assert!(!d.join("h").exists() && !d.join("s").exists());
        // An empty transfer is an empty file.
        let t = offer(&store, "p", [7; 16], "empty", Some(0)).unwrap();
        t.finish(0, digest(b""), &store).unwrap();
        assert_eq!(std::fs::read(d.join("empty")).unwrap(), b"");
    }

    #[test]
    fn a_partial_file_held_in_another_session_is_refused_until_it_is_let_go() {
        let d = dir("busy");
        // Two workers' clones of one store, as `serve --workers 2` makes them.
        let first = Store::new(Some(d.clone()), false);
        let second = first.clone();
        let body = b"0123456789";
        let mut t = offer(&first, "p", [9; 16], "b", Some(10)).unwrap();
        t.data(0, &body[..4]).unwrap();
        let busy = offer(&second, "p", [9; 16], "b", Some(10));
        assert!(matches!(&busy, Err(Refusal::Busy(n)) if n == "b"));
        let said = busy.err().map(|r| r.to_string()).unwrap_or_default();
        assert!(said.contains("another session"), "{said}");
        // Another transfer of the same peer, or the same id from another peer, is not held.
        drop(offer(&second, "p", [10; 16], "c", Some(1)).unwrap());
        drop(offer(&second, "q", [9; 16], "b", Some(10)).unwrap());
        // Suspended: the other worker resumes it from what was written.
        t.suspend().unwrap();
        let mut t = offer(&second, "p", [9; 16], "b", Some(10)).unwrap();
        assert_eq!(t.have(), 4);
        assert!(matches!(
            offer(&first, "p", [9; 16], "b", Some(10)),
            Err(Refusal::Busy(_))
        ));
        t.data(4, &body[4..]).unwrap();
        t.finish(10, digest(body), &second).unwrap();
        assert_eq!(std::fs::read(d.join("b")).unwrap(), body);
        // Finished and let go: offered again, the name holds the file.
        assert!(matches!(
            offer(&first, "p", [9; 16], "b", Some(10)),
            Err(Refusal::Exists(_))
        ));
        // Abandoned: let go as well.
        let mut t = offer(&first, "p", [11; 16], "e", None).unwrap();
        t.abandon();
        drop(offer(&second, "p", [11; 16], "e", None).unwrap());
    }

    #[test]
    fn names_with_paths_are_refused_before_anything_is_created() {
        let d = dir("names");
        let store = Store::new(Some(d.clone()), false);
        for bad in ["../x", "a/b", "", "..", "a\0b", ".phyllo-part-1"] {
            assert!(matches!(
                offer(&store, "p", [8; 16], bad, Some(1)),
                Err(Refusal::Name { .. })
            ));
        }
        assert_eq!(std::fs::read_dir(&d).unwrap().count(), 0);
        assert!(matches!(
            offer(&store, "p", [8; 16], "huge", Some(u64::MAX / 2)),
            Err(Refusal::Space { .. })
        ));
        assert_eq!(std::fs::read_dir(&d).unwrap().count(), 0);
    }
}
