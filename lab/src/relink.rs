//! Cloning by relinking (Mosberger et al., "Analysis of Techniques to Improve Protocol Processing
//! Latency" (seed 000 §3.2)): a function order computed from a trace of the round trips, handed to
//! the linker (rust-lld's `--symbol-ordering-file`; rustc puts every function in its own section),
//! so a version's code is placed as the layout says without a line of it changing.
//!
//! The order: *bipartite* — the library functions (entered more than once per round trip)
//! first, then the path functions, each in the order of first invocation — or *linear* (all in
//! invocation order, the seed's advice when the whole path fits the i-cache). A symbol order
//! cannot leave gaps, so the bipartite order is the sequential form of the analyzer's virtual
//! bipartite layout (which also keeps path functions out of the library's cache sets); the
//! deliberately conflicting BAD layout needs gaps and stays modelled.
//!
//! **The cache.** A relinked binary is determined by the code it is linked from and by the
//! order: [`cached`] keeps each under the target directory
//! (`target/paths-relink/cache/<hash of this binary>/phyllo-lab-<hash of the order>`), so a
//! report pays for a relink only when this binary or the order changed. A relink builds from
//! the source tree, not from this binary, so every binary it makes is checked to hold this
//! binary's functions at their sizes (only their places may differ) before it is cached: a
//! source tree edited since this binary was built fails that check instead of passing off
//! other code as this one's layout. Only the current binary's entries are kept.

use anyhow::{bail, ensure, Context, Result};
use phyllo_analyze::analysis::Setup;
use phyllo_analyze::capture::Workload;
use phyllo_analyze::image::Image;
use phyllo_analyze::layout::Profile;
use phyllo_analyze::session::{self, Prepared};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Instant;

/// Which order.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Order {
    /// Library functions, then path functions, each in invocation order.
    Bipartite,
    /// Every function in invocation order.
    Linear,
}

/// The mangled names of the functions of `workload`'s program that it runs (traced under
/// valgrind lackey; `rounds` round trips of a reference stack, `phyllo-lab paths trace`), in
/// `order`.
pub fn symbol_order(workload: Workload, order: Order, rounds: usize) -> Result<Vec<String>> {
    let image =
        Image::load(&workload.program).context("reading the phyllo-lab binary's symbols")?;
    let mut p = session::prepare(workload)?;
    let r = session::analyze(
        &mut p,
        Setup {
            instructions: true,
            ..Setup::default()
        },
        false,
    )?
    .report;
    order_of(&image, &p, &r.profile, order, path_invocations(rounds))
}

/// How many times each path (one end's send or one end's delivery) runs in `rounds` round
/// trips of `phyllo-lab paths trace`: both ends run in the traced process, each sending and
/// delivering once per round trip, so a function of one path is entered twice per round trip.
/// A library function is one entered more often than that.
pub fn path_invocations(rounds: usize) -> u64 {
    2 * rounds as u64
}

/// The mangled names of the executable's functions in `profile` (of a trace of `p`, whose
/// executable is `image`), in `order`; `per` is the number of path invocations the trace
/// holds ([`path_invocations`]): functions entered more often are library functions.
pub fn order_of(
    image: &Image,
    p: &Prepared,
    profile: &Profile,
    order: Order,
    per: u64,
) -> Result<Vec<String>> {
    let calls = |f: &u32| profile.calls.get(f).copied().unwrap_or(0);
    let order: Vec<u32> = match order {
        Order::Linear => profile.order.clone(),
        Order::Bipartite => {
            let (lib, path): (Vec<u32>, Vec<u32>) =
                profile.order.iter().partition(|f| calls(f) > per);
            lib.into_iter().chain(path).collect()
        }
    };
    let mut names = Vec::new();
    for f in order {
        let Some(rf) = p.map.funcs().get(f as usize) else {
            continue;
        };
        // Functions of this executable (not of the shared libraries it maps).
        let link = rf.start.wrapping_sub(p.bias);
        for n in image.mangled_at(link) {
            if !names.iter().any(|x: &String| x == n) {
                names.push(n.to_string());
            }
        }
    }
    if names.is_empty() {
        bail!("the trace named no function of this executable");
    }
    Ok(names)
}

/// The workspace this binary was built from (relinking rebuilds it with cargo).
fn workspace() -> Result<PathBuf> {
    let ws = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    if !ws.join("Cargo.toml").is_file() {
        bail!(
            "relinking needs the phyllo source tree this binary was built from; it is not at {}",
            ws.display()
        );
    }
    Ok(ws)
}

/// The target directory `exe` was built into (`<target>/release/phyllo-lab`), so the relink
/// and its cache sit beside the build whatever `CARGO_TARGET_DIR` said; the workspace's
/// `target` when `exe` is elsewhere.
pub fn target_dir(exe: &Path) -> Result<PathBuf> {
    let release = exe
        .parent()
        .filter(|d| d.file_name() == Some("release".as_ref()));
    match release.and_then(Path::parent) {
        Some(t) => Ok(t.to_path_buf()),
        None => Ok(workspace()?.join("target")),
    }
}

/// Link the phyllo-lab binary again with its functions in the order of `symbols`, into `out`.
/// The build uses a target directory of its own (`<target>/paths-relink`, beside `exe`'s
/// build): the first run compiles everything once, later ones rebuild what changed and link.
pub fn relink(exe: &Path, symbols: &[String], out: &Path) -> Result<()> {
    let ws = workspace()?;
    let dir = target_dir(exe)?.join("paths-relink");
    std::fs::create_dir_all(&dir)?;
    // Named by the order's hash: cargo decides whether to link again from the arguments it
    // passes, not from the file they name, so another order must be another file name.
    let order_file = dir.join(format!("order-{}.txt", order_key(symbols)));
    std::fs::write(&order_file, symbols.join("\n") + "\n")?;
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let status = Command::new(cargo)
        .current_dir(&ws)
        .args([
            "rustc",
            "--release",
            "-p",
            "phyllo-lab",
            "--bin",
            "phyllo-lab",
        ])
        .arg("--target-dir")
        .arg(&dir)
        .arg("--")
        .arg(format!(
            "-Clink-arg=-Wl,--symbol-ordering-file={}",
            order_file.display()
        ))
        .arg("-Clink-arg=-Wl,--no-warn-symbol-ordering")
        .status()
        .context("running cargo to relink")?;
    if !status.success() {
        bail!(
            "cargo rustc failed ({status}) relinking with {}",
            order_file.display()
        );
    }
    std::fs::copy(dir.join("release/phyllo-lab"), out)
        .with_context(|| format!("copying the relinked binary to {}", out.display()))?;
    Ok(())
}

/// The first 16 hex digits of the BLAKE3 hash of `bytes`: a cache key.
fn key(bytes: &[u8]) -> String {
    blake3::hash(bytes).to_hex()[..16].to_string()
}

/// The key of `exe`'s contents.
fn exe_key(exe: &Path) -> Result<String> {
    let bytes = std::fs::read(exe).with_context(|| format!("reading {}", exe.display()))?;
    Ok(key(&bytes))
}

/// The key of a symbol order (the file the linker reads).
fn order_key(symbols: &[String]) -> String {
    key((symbols.join("\n") + "\n").as_bytes())
}

/// A relinked binary from [`cached`].
#[derive(Clone, Debug)]
pub struct Relinked {
    /// The binary (in the cache).
    pub path: PathBuf,
    /// Whether the cache held it (no build).
    pub cached: bool,
    /// Seconds spent: hashing and looking up, plus on a miss building, checking and storing.
    pub seconds: f64,
    /// Of the ordered functions the relinked binary holds, how many sit at or above the one
    /// before them (the first counts): a measure that the linker applied the order.
    pub in_order: usize,
    /// The ordered functions the relinked binary holds.
    pub ordered: usize,
}

/// `exe` linked again in the order of `symbols`, from the cache under `exe`'s target directory
/// or, on a miss, relinked ([`relink`]), checked against `exe` ([`same_functions`]) and stored.
/// Entries of other binaries (earlier builds) are removed.
pub fn cached(exe: &Path, symbols: &[String]) -> Result<Relinked> {
    let t0 = Instant::now();
    let root = target_dir(exe)?.join("paths-relink/cache");
    let dir = root.join(exe_key(exe)?);
    let path = dir.join(format!("phyllo-lab-{}", order_key(symbols)));
    let cached = path.is_file();
    if !cached {
        std::fs::create_dir_all(&dir)?;
        prune(&root, &dir);
        // Built under a name of its own, renamed into place once checked: a report that
        // stops half way, or runs beside another, never leaves or finds a partial entry.
        let tmp = dir.join(format!(".building-{}", std::process::id()));
        relink(exe, symbols, &tmp)?;
        let same = same_functions(exe, &tmp);
        if let Err(e) = same {
            let _ = std::fs::remove_file(&tmp);
            return Err(e);
        }
        std::fs::write(path.with_extension("order.txt"), symbols.join("\n") + "\n")?;
        std::fs::rename(&tmp, &path)
            .with_context(|| format!("storing the relinked binary as {}", path.display()))?;
    }
    let (in_order, ordered) = placement(&path, symbols)?;
    Ok(Relinked {
        path,
        cached,
        seconds: t0.elapsed().as_secs_f64(),
        in_order,
        ordered,
    })
}

/// Remove every entry of `root` but `keep` (the caches of binaries built before this one).
fn prune(root: &Path, keep: &Path) {
    let Ok(entries) = std::fs::read_dir(root) else {
        return;
    };
    for e in entries.flatten() {
        if e.path() != keep {
            let _ = std::fs::remove_dir_all(e.path());
        }
    }
}

/// The functions of an executable as (demangled name, size), sorted.
fn functions(exe: &Path) -> Result<Vec<(String, u64)>> {
    let img = Image::load(exe).with_context(|| format!("reading {}", exe.display()))?;
    let mut f: Vec<(String, u64)> = img
        .funcs()
        .iter()
        .map(|f| (f.name.clone(), f.size))
        .collect();
    f.sort();
    Ok(f)
}

/// Whether `relinked` holds the functions of `exe` at the same sizes: the same code in
/// another place. An error says how many differ (the source tree was edited since `exe` was
/// built, or the relink built with other flags).
pub fn same_functions(exe: &Path, relinked: &Path) -> Result<()> {
    let (a, b) = (functions(exe)?, functions(relinked)?);
    let differ = differing(&a, &b);
    ensure!(
        differ == 0,
        "{} was relinked from other code than {}: {differ} of its {} functions differ in name \
         or size (edited sources since the build? rebuild with cargo build --release)",
        relinked.display(),
        exe.display(),
        b.len()
    );
    Ok(())
}

/// How many entries of the sorted lists `a` and `b` are not in both (a multiset difference).
fn differing<T: Ord>(a: &[T], b: &[T]) -> usize {
    let (mut i, mut j, mut n) = (0, 0, 0);
    while i < a.len() && j < b.len() {
        match a[i].cmp(&b[j]) {
            std::cmp::Ordering::Equal => {
                i += 1;
                j += 1;
            }
            std::cmp::Ordering::Less => {
                n += 1;
                i += 1;
            }
            std::cmp::Ordering::Greater => {
                n += 1;
                j += 1;
            }
        }
    }
    n + (a.len() - i) + (b.len() - j)
}

/// Of the functions of `symbols` that `exe` holds: how many start at or above the one before
/// them (aliases share an address; the first counts), and how many there are.
fn placement(exe: &Path, symbols: &[String]) -> Result<(usize, usize)> {
    let img = Image::load(exe).with_context(|| format!("reading {}", exe.display()))?;
    let at: Vec<u64> = symbols.iter().filter_map(|s| img.symbol(s).ok()).collect();
    Ok((
        at.windows(2).filter(|w| w[1] >= w[0]).count() + usize::from(!at.is_empty()),
        at.len(),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn multiset_difference() {
        assert_eq!(differing(&[1, 2, 3], &[1, 2, 3]), 0);
        assert_eq!(differing(&[1, 2, 2, 3], &[1, 2, 3]), 1);
        assert_eq!(differing(&[1, 3], &[2, 4]), 4);
        assert_eq!(differing::<u8>(&[], &[7]), 1);
    }

    #[test]
    fn keys_follow_the_order() {
        let a = ["f".to_string(), "g".to_string()];
        let b = ["g".to_string(), "f".to_string()];
        assert_ne!(order_key(&a), order_key(&b));
        assert_eq!(order_key(&a), order_key(&a.clone()));
        assert_eq!(order_key(&a).len(), 16);
    }

    #[test]
    fn the_target_directory_is_the_builds() {
        let t = target_dir(Path::new("/x/y/target/release/phyllo-lab")).unwrap();
        assert_eq!(t, Path::new("/x/y/target"));
        // Elsewhere: the workspace's own target directory.
        let t = target_dir(Path::new("/usr/bin/phyllo-lab")).unwrap();
        assert!(t.ends_with("target"), "{}", t.display());
    }

    #[test]
    fn paths_run_twice_per_round_trip() {
        assert_eq!(path_invocations(200), 400);
    }
}
