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

use anyhow::{bail, Context, Result};
use phyllo_analyze::analysis::Setup;
use phyllo_analyze::capture::Workload;
use phyllo_analyze::image::Image;
use phyllo_analyze::session;
use std::path::{Path, PathBuf};
use std::process::Command;

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
    let per = rounds as u64;
    let calls = |f: &u32| r.profile.calls.get(f).copied().unwrap_or(0);
    let order: Vec<u32> = match order {
        Order::Linear => r.profile.order.clone(),
        Order::Bipartite => {
            let (lib, path): (Vec<u32>, Vec<u32>) =
                r.profile.order.iter().partition(|f| calls(f) > per);
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

/// Link the phyllo-lab binary again with its functions in the order of `symbols`, into `out`.
/// The build uses a target directory of its own (`target/paths-relink`): the first run
/// compiles everything once, later ones only link.
pub fn relink(symbols: &[String], out: &Path) -> Result<()> {
    let ws = workspace()?;
    let dir = ws.join("target/paths-relink");
    std::fs::create_dir_all(&dir)?;
    let order_file = dir.join(format!(
        "order-{}.txt",
        out.file_name().and_then(|n| n.to_str()).unwrap_or("phyllo")
    ));
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
