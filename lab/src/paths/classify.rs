//! The path classifier (Mosberger et al., "Analysis of Techniques to Improve Protocol Processing
//! Latency" (seed 000 §3.4) and §4.1, after Scout): path-inlined code is compiled for an *assumed*
//! path, so an incoming datagram may take it only once the classifier has established that the
//! datagram follows that path; anything else goes to the general, layered code.
//!
//! A path here is a flow of one stack: the datagrams whose identifying fields (frame type,
//! addresses, ports, boot id — [`flow_fields`]) hold the values the path was
//! set up with. The classifier compiles those fields into a compact key — a mask and the
//! expected bits, eight header bytes per word — learned from one datagram of the flow, and
//! matches a datagram by an exact compare of its masked header words: no field is decoded, no
//! layer runs. The seed charges 1-4 µs per packet to the software classifiers of its day and
//! leaves that cost out of its tables; the `paths` experiment measures this one on its own.

use super::StackKind;
use phyllo::layout::Layout;
use thiserror::Error;

/// Why a classifier could not be built.
#[derive(Clone, Debug, Error, PartialEq, Eq)]
pub enum ClassifyError {
    /// A field the flow is identified by is not in the layout.
    #[error("the layout has no field `{0}`")]
    NoField(String),
    /// The datagram the key is learned from is shorter than the header area.
    #[error("a datagram of {got} bytes is shorter than the {want}-byte header area")]
    Short {
        /// Its length.
        got: usize,
        /// The header area's.
        want: usize,
    },
}

/// The fields that identify a flow of `kind`'s stack: fields every datagram of the flow
/// carries — so none of a layer above one that originates datagrams of its own (`chan`'s
/// acknowledgements leave without `vchan`'s and `mselect`'s fields).
pub fn flow_fields(kind: StackKind) -> &'static [&'static str] {
    match kind {
        StackKind::Short => &["ethertype", "src", "dst", "proto", "sport", "dport"],
        StackKind::Tall => &["ethertype", "from", "to", "bid"],
    }
}

/// Where a datagram goes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Route {
    /// The path-inlined code of the assumed path.
    Inlined,
    /// The general, layered code.
    General,
}

/// A compiled path key.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Classifier {
    /// Per header word that holds key bits: its byte offset, the mask (little-endian load)
    /// and the bits the assumed path carries under it.
    words: Vec<(usize, u64, u64)>,
    header_len: usize,
}

/// Eight bytes of `b` from `at`, zero-padded past its end, as a little-endian word.
#[inline(always)]
fn word(b: &[u8], at: usize) -> u64 {
    if let Some(w) = b.get(at..at.wrapping_add(8)) {
        // The common case: eight bytes there, one load.
        let mut x = [0u8; 8];
        x.copy_from_slice(w);
        return u64::from_le_bytes(x);
    }
    let mut w = [0u8; 8];
    let tail = b.get(at..).unwrap_or(&[]);
    let n = tail.len().min(8);
    w[..n].copy_from_slice(&tail[..n]);
    u64::from_le_bytes(w)
}

impl Classifier {
    /// A classifier for the flow of `reference` (a datagram of the assumed path, header area
    /// first) identified by the fields `names` of `layout`.
    pub fn learn(
        layout: &Layout,
        names: &[&str],
        reference: &[u8],
    ) -> Result<Classifier, ClassifyError> {
        let header_len = layout.header_len();
        if reference.len() < header_len {
            return Err(ClassifyError::Short {
                got: reference.len(),
                want: header_len,
            });
        }
        let bytes = layout.mask_of(names).ok_or_else(|| {
            let missing = names.iter().find(|n| layout.find(n).is_none());
            ClassifyError::NoField(missing.map_or_else(String::new, |n| n.to_string()))
        })?;
        // Only the words that hold key bits are compared.
        let words = (0..header_len)
            .step_by(8)
            .map(|at| (at, word(&bytes, at)))
            .filter(|(_, m)| *m != 0)
            .map(|(at, m)| (at, m, word(reference, at) & m))
            .collect();
        Ok(Classifier { words, header_len })
    }

    /// Whether `datagram` follows the assumed path: its masked header words equal the key.
    #[inline]
    pub fn matches(&self, datagram: &[u8]) -> bool {
        if datagram.len() < self.header_len {
            return false;
        }
        let mut diff = 0u64;
        for &(at, m, k) in &self.words {
            diff |= (word(datagram, at) & m) ^ k;
        }
        diff == 0
    }

    /// Where `datagram` goes.
    #[inline]
    pub fn route(&self, datagram: &[u8]) -> Route {
        if self.matches(datagram) {
            Route::Inlined
        } else {
            Route::General
        }
    }

    /// Header bytes the key's words span.
    pub fn key_bytes(&self) -> usize {
        self.words.len() * 8
    }
}
