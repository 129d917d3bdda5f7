//! The workload's executable image: function symbols, code bytes and load bias.
//!
//! Seed 003 attributes protocol processing to the functions of the stack and Mosberger et al.,
//! "Analysis of Techniques to Improve Protocol Processing Latency" (seed 000) (§3) places functions
//! in the i-cache by name; both need address → function mapping. This module reads an ELF
//! executable with the `object` crate: function symbols as sorted, non-overlapping ranges, the
//! bytes of executable sections (for instruction decoding) and whether the file is
//! position-independent (PIE), in which case valgrind loads it at a bias (0x108000 for valgrind
//! 3.19 on amd64) that the analyzer measures with a probe run (see [`crate::roi`]).

use std::path::Path;

use object::{Object, ObjectSection, ObjectSymbol, SectionKind, SymbolKind};

/// Why an image could not be loaded.
#[derive(Debug, thiserror::Error)]
pub enum ImageError {
    /// The file could not be read.
    #[error("reading {path}: {source}")]
    Io {
        /// The file.
        path: String,
        /// The cause.
        source: std::io::Error,
    },
    /// The file is not an object file `object` understands.
    #[error("parsing {path}: {msg}")]
    Parse {
        /// The file.
        path: String,
        /// The cause.
        msg: String,
    },
    /// A required symbol is missing.
    #[error("symbol {0} not found in the workload (is it linked and not stripped?)")]
    MissingSymbol(String),
}

/// One function of the image (link-time addresses).
#[derive(Clone, Debug)]
pub struct Func {
    /// Link-time start address.
    pub start: u64,
    /// Size in bytes (at least 1).
    pub size: u64,
    /// Demangled name (without the hash suffix).
    pub name: String,
}

/// An executable section's bytes.
#[derive(Clone, Debug)]
struct Code {
    addr: u64,
    bytes: Vec<u8>,
}

/// An executable loaded for analysis.
#[derive(Clone, Debug)]
pub struct Image {
    funcs: Vec<Func>,
    raw_names: Vec<(String, usize)>,
    code: Vec<Code>,
    pie: bool,
    name: String,
}

/// Index of a function in [`Image::funcs`].
pub type FuncId = u32;

impl Image {
    /// Loads the executable at `path`.
    pub fn load(path: &Path) -> Result<Image, ImageError> {
        let data = std::fs::read(path).map_err(|source| ImageError::Io {
            path: path.display().to_string(),
            source,
        })?;
        let mut img = Self::parse(&data).map_err(|msg| ImageError::Parse {
            path: path.display().to_string(),
            msg,
        })?;
        img.name = path
            .file_name()
            .map(|n| n.to_string_lossy().to_string())
            .unwrap_or_default();
        Ok(img)
    }

    /// Parses an executable held in memory.
    pub fn parse(data: &[u8]) -> Result<Image, String> {
        let file = object::File::parse(data).map_err(|e| e.to_string())?;
        let pie = matches!(file.kind(), object::ObjectKind::Dynamic);
        let mut code = Vec::new();
        for s in file.sections() {
            if s.kind() == SectionKind::Text {
                let bytes = s.data().map_err(|e| e.to_string())?.to_vec();
                if !bytes.is_empty() {
                    code.push(Code {
                        addr: s.address(),
                        bytes,
                    });
                }
            }
        }
        code.sort_by_key(|c| c.addr);
        let mut syms: Vec<(u64, u64, String)> = file
            .symbols()
            .filter(|s| s.kind() == SymbolKind::Text && s.address() != 0 && s.is_definition())
            .filter_map(|s| Some((s.address(), s.size(), s.name().ok()?.to_string())))
            .collect();
        syms.sort_by(|a, b| a.0.cmp(&b.0).then(b.1.cmp(&a.1)));
        syms.dedup_by_key(|s| s.0);
        let mut funcs: Vec<Func> = Vec::with_capacity(syms.len());
        let mut raw_names = Vec::with_capacity(syms.len());
        for (i, (start, size, name)) in syms.iter().enumerate() {
            let next = syms.get(i + 1).map(|n| n.0).unwrap_or(u64::MAX);
            // Symbols without a size extend to the next symbol (bounded to 64 KiB).
            let size = if *size == 0 {
                (next - start).min(1 << 16)
            } else {
                (*size).min(next - start)
            };
            raw_names.push((name.clone(), funcs.len()));
            funcs.push(Func {
                start: *start,
                size: size.max(1),
                name: format!("{:#}", rustc_demangle::demangle(name)),
            });
        }
        raw_names.sort();
        Ok(Image {
            funcs,
            raw_names,
            code,
            pie,
            name: String::new(),
        })
    }

    /// File name of the image (empty when parsed from memory).
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Whether the executable is position-independent (loaded at a bias).
    pub fn is_pie(&self) -> bool {
        self.pie
    }

    /// All functions, sorted by start address.
    pub fn funcs(&self) -> &[Func] {
        &self.funcs
    }

    /// The function containing link-time address `addr`.
    pub fn func_of(&self, addr: u64) -> Option<FuncId> {
        let i = self.funcs.partition_point(|f| f.start <= addr);
        let f = self.funcs.get(i.checked_sub(1)?)?;
        (addr < f.start + f.size).then_some((i - 1) as FuncId)
    }

    /// The mangled names of the functions that start at link-time address `addr` (aliases
    /// included), as a linker's symbol-ordering file names them.
    pub fn mangled_at(&self, addr: u64) -> Vec<&str> {
        self.raw_names
            .iter()
            .filter(|(_, i)| self.funcs.get(*i).is_some_and(|f| f.start == addr))
            .map(|(n, _)| n.as_str())
            .collect()
    }

    /// Link-time address of the symbol named exactly `name` (mangled name).
    pub fn symbol(&self, name: &str) -> Result<u64, ImageError> {
        self.raw_names
            .binary_search_by(|(n, _)| n.as_str().cmp(name))
            .ok()
            .map(|i| self.funcs[self.raw_names[i].1].start)
            .ok_or_else(|| ImageError::MissingSymbol(name.to_string()))
    }

    /// The code bytes from link-time address `addr` to the end of its section.
    pub fn code_at(&self, addr: u64) -> Option<&[u8]> {
        let i = self.code.partition_point(|c| c.addr <= addr);
        let c = self.code.get(i.checked_sub(1)?)?;
        let off = (addr - c.addr) as usize;
        c.bytes.get(off..)
    }

    /// Link-time address ranges of the executable sections.
    pub fn code_ranges(&self) -> impl Iterator<Item = (u64, u64)> + '_ {
        self.code
            .iter()
            .map(|c| (c.addr, c.addr + c.bytes.len() as u64))
    }
}

#[cfg(test)]
impl Image {
    /// A synthetic image for tests: `bytes` of code at link-time `addr`, one function `name`
    /// over all of them.
    pub(crate) fn synthetic(name: &str, addr: u64, bytes: &[u8]) -> Image {
        Image {
            funcs: vec![Func {
                start: addr,
                size: (bytes.len() as u64).max(1),
                name: name.to_string(),
            }],
            raw_names: vec![(name.to_string(), 0)],
            code: vec![Code {
                addr,
                bytes: bytes.to_vec(),
            }],
            pie: false,
            name: "synthetic".into(),
        }
    }

    /// A synthetic image for tests: `bytes` of code at link-time `addr`, holding the functions
    /// `(name, offset from addr, size)` (sorted by offset, not overlapping).
    pub(crate) fn synthetic_funcs(addr: u64, bytes: &[u8], funcs: &[(&str, u64, u64)]) -> Image {
        let mut img = Image::synthetic("", addr, bytes);
        img.funcs = funcs
            .iter()
            .map(|&(name, off, size)| Func {
                start: addr + off,
                size: size.max(1),
                name: name.to_string(),
            })
            .collect();
        img.raw_names = funcs
            .iter()
            .enumerate()
            .map(|(k, f)| (f.0.to_string(), k))
            .collect();
        img.raw_names.sort();
        img
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn loads_own_test_binary() {
        let exe = std::env::current_exe().unwrap();
        let img = Image::load(&exe).unwrap();
        let b = img.symbol(crate::roi::BEGIN_SYMBOL).unwrap();
        let f = img.func_of(b).unwrap();
        assert_eq!(img.funcs()[f as usize].name, crate::roi::BEGIN_SYMBOL);
        assert!(img.code_at(b).is_some());
        assert!(img.symbol("no_such_symbol_xyz").is_err());
        assert!(Image::parse(b"not an elf").is_err());
    }
}
