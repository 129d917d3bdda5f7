//! `aead`: which AEAD the `seal` layer uses, chosen by measurement.
//!
//! RustCrypto's ChaCha20-Poly1305 against `ring`'s AES-256-GCM and ChaCha20-Poly1305, all with
//! run-time CPU dispatch only (the build forces no `target-cpu`): instructions per seal and per
//! open from callgrind (exact, whatever the machine's load), and nanoseconds (median of
//! blocks), for 8, 64, 1024 and 8192-byte messages with 16 bytes of associated data.

use crate::aead::{time_ns, Impl};
use crate::report::{Ctx, Experiment, Outcome, Section, Table};
use anyhow::Result;
use clap::ValueEnum;
use phyllo_analyze::capture::{callgrind, have_valgrind, Workload};

/// The AEAD experiment.
pub struct Aead;

const SIZES: [usize; 4] = [8, 64, 1024, 8192];

/// Instructions per seal and per open of `size`-byte messages with `which`, by callgrind.
fn instructions(exe: &std::path::Path, which: Impl, size: usize) -> Result<(f64, f64)> {
    let rounds = 200u64;
    let w = Workload {
        program: exe.to_path_buf(),
        args: vec![
            "aead".into(),
            "--impl".into(),
            which
                .to_possible_value()
                .map_or_else(String::new, |v| v.get_name().to_string()),
            "--size".into(),
            size.to_string(),
            "--rounds".into(),
            rounds.to_string(),
        ],
    };
    let per =
        |f: &str| -> Result<f64> { Ok(callgrind(&w, f, None)?.get("Ir") as f64 / rounds as f64) };
    Ok((per("phyllo_aead_seal")?, per("phyllo_aead_open")?))
}

impl Experiment for Aead {
    fn name(&self) -> &'static str {
        "aead"
    }

    fn title(&self) -> &'static str {
        "AEAD implementations for `seal`: instructions and time per message"
    }

    fn run(&self, ctx: &Ctx) -> Result<Outcome> {
        let (blocks, per_block) = if ctx.quick { (9, 400) } else { (31, 2000) };
        let exe = std::env::current_exe().ok();
        let valgrind = have_valgrind() && exe.is_some();
        let mut figures = Vec::new();
        let mut table = Table {
            title: format!(
                "Per message, 16 bytes of associated data: instructions (callgrind) and ns \
                 (median of {blocks} blocks of {per_block})"
            ),
            headers: [
                "implementation",
                "bytes",
                "seal, instructions",
                "open, instructions",
                "seal, ns",
                "open, ns",
            ]
            .map(String::from)
            .to_vec(),
            rows: vec![],
        };
        let mut best: Option<(f64, Impl)> = None;
        for which in Impl::ALL {
            for size in SIZES {
                let (seal_ns, open_ns) = time_ns(which, size, blocks, per_block)?;
                let instr = match (&exe, valgrind) {
                    (Some(exe), true) => Some(instructions(exe, which, size)?),
                    _ => None,
                };
                let key = format!("aead.{}.{size}", which.name());
                figures.push((format!("{key}.seal_ns"), seal_ns));
                figures.push((format!("{key}.open_ns"), open_ns));
                if let Some((s, o)) = instr {
                    figures.push((format!("{key}.seal_instructions"), s));
                    figures.push((format!("{key}.open_instructions"), o));
                }
                let cell = |v: Option<f64>| v.map_or("—".into(), |v| format!("{v:.0}"));
                table.rows.push(vec![
                    which.name().into(),
                    size.to_string(),
                    cell(instr.map(|i| i.0)),
                    cell(instr.map(|i| i.1)),
                    format!("{seal_ns:.0}"),
                    format!("{open_ns:.0}"),
                ]);
                // The choice is made on short messages (seal's usual case): instructions if
                // counted, else time.
                if size == 8 {
                    let cost = instr.map_or(seal_ns + open_ns, |(s, o)| s + o);
                    if best.is_none_or(|(c, _)| cost < c) {
                        best = Some((cost, which));
                    }
                }
            }
        }
        let mut text = vec![
            "Every implementation picks its code by the CPU it runs on; the release build sets \
             no `target-cpu`, so one binary runs on any x86-64 or aarch64 machine."
                .to_string(),
        ];
        if !valgrind {
            text.push(
                "valgrind not found: instruction counts are missing (apt-get install valgrind)."
                    .into(),
            );
        }
        if let Some((_, which)) = best {
            text.push(format!(
                "Cheapest for 8-byte messages here: **{}**. `seal` uses AES-256-GCM by default \
                 — byte for byte ring's, but split at the nonce so that the keystream and tag \
                 mask of the next (predicted) nonce are computed in post-processing, off the \
                 critical path (RustCrypto's `aes` and `polyval`) — and ring's \
                 ChaCha20-Poly1305 with `seal(chacha)`.",
                which.name()
            ));
            let chosen = Impl::ALL.iter().position(|&i| i == which).unwrap_or(0);
            figures.push(("aead.cheapest_impl_index".into(), chosen as f64));
        }
        Ok(Outcome::Done(Section {
            text,
            tables: vec![table],
            plots: vec![],
            figures,
        }))
    }
}
