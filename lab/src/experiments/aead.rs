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
                 critical path (RustCrypto's `aes`; GHASH by the carry-less multiply, its products summed and reduced once per message) — and ring's \
                 ChaCha20-Poly1305 with `seal(chacha)`.",
                which.name()
            ));
            let chosen = Impl::ALL.iter().position(|&i| i == which).unwrap_or(0);
            figures.push(("aead.cheapest_impl_index".into(), chosen as f64));
        }
        let (datagram, note) = ring_vs_aws_lc(blocks, per_block, &mut figures)?;
        text.push(note);
        let bound = integration_bound(blocks, per_block, &mut figures)?;
        text.push(
            "Integrating the copy into the datagram with the seal (issue 13, seed 001): `ring`'s \
             AES-256-GCM (stitched AES-NI and carry-less multiplication in assembly) works in \
             place only, so a fused copy-and-seal would have to be built from primitives that \
             can be split — phyllo's split AES-256-GCM. Such a fusion can save at most the \
             copy, and its cipher work cannot be less than the split cipher's in place. \
             `aead.fused_copy_bound.N` = split seal / (memcpy + ring seal) at N bytes: above 1, \
             no fusion built on the split cipher can beat copying and then sealing with `ring`, \
             which is what `seal` does for every body longer than 32 bytes."
                .into(),
        );
        Ok(Outcome::Done(Section {
            text,
            tables: vec![table, datagram, bound],
            plots: vec![],
            figures,
        }))
    }
}

/// A datagram's body: what `seal` seals per datagram of a bulk transfer (a 1452-byte datagram
/// less the session header, header area and tag).
const DATAGRAM_BODY: usize = 1400;

/// `ring` against `aws-lc-rs`, AES-256-GCM, per datagram body: `blocks` interleaved rounds
/// (one block of `per_block` seals and opens of each per round), each figure the median of the
/// rounds' ratios (ring's ns / aws-lc-rs's: above 1, aws-lc-rs is faster). The table, and the
/// sentence that says which the product uses and why.
fn ring_vs_aws_lc(
    blocks: usize,
    per_block: usize,
    figures: &mut Vec<(String, f64)>,
) -> Result<(Table, String)> {
    let (mut ring, mut lc) = ((Vec::new(), Vec::new()), (Vec::new(), Vec::new()));
    for _ in 0..blocks {
        let r = time_ns(Impl::RingAes, DATAGRAM_BODY, 1, per_block)?;
        let a = time_ns(Impl::AwsLcAes, DATAGRAM_BODY, 1, per_block)?;
        ring.0.push(r.0);
        ring.1.push(r.1);
        lc.0.push(a.0);
        lc.1.push(a.1);
    }
    let seal = crate::stats::ratio_summary(&ring.0, &lc.0);
    let open = crate::stats::ratio_summary(&ring.1, &lc.1);
    figures.push(("aead.ring_vs_aws_lc.seal_1400".into(), seal.median));
    figures.push(("aead.ring_vs_aws_lc.open_1400".into(), open.median));
    let median = crate::stats::median;
    let table = Table {
        title: format!(
            "AES-256-GCM per {DATAGRAM_BODY}-byte datagram body, `ring` against `aws-lc-rs` \
             (ns, median of {blocks} interleaved rounds; ratio = ring / aws-lc-rs per round, \
             above 1 aws-lc-rs is faster)"
        ),
        headers: ["", "ring", "aws-lc-rs", "ratio (smallest–largest round)"]
            .map(String::from)
            .to_vec(),
        rows: vec![
            vec![
                "seal".into(),
                format!("{:.0}", median(&ring.0)),
                format!("{:.0}", median(&lc.0)),
                seal.cell(2),
            ],
            vec![
                "open".into(),
                format!("{:.0}", median(&ring.1)),
                format!("{:.0}", median(&lc.1)),
                open.cell(2),
            ],
        ],
    };
    // A switch is worth its cost (a second crypto library in the product, a C build) only for a
    // clear win: 10 % on both directions.
    let wins = seal.median > 1.10 && open.median > 1.10;
    let note = format!(
        "`ring` or `aws-lc-rs` for the datagrams of a transfer (the issue on bulk speed): per \
         {DATAGRAM_BODY}-byte body, ring's time over aws-lc-rs's is {} to seal and {} to open \
         (`aead.ring_vs_aws_lc.seal_1400`, `.open_1400`). {}",
        seal.show(2, "rounds"),
        open.show(2, "rounds"),
        if wins {
            "aws-lc-rs is clearly faster here (over 10 % both ways): worth the switch."
        } else if seal.median < 1.0 && open.median < 1.0 {
            "`ring` is faster both ways: the product keeps it (it also needs no C build)."
        } else {
            "Not a clear win for aws-lc-rs (10 % both ways would be): the product keeps `ring`, \
             which needs no C build."
        }
    );
    Ok((table, note))
}

/// The table and figures of the integration bound: per size above 8 bytes, the split
/// cipher's seal against a memcpy of the body plus `ring`'s AES-256-GCM seal, measured side by
/// side in `blocks` interleaved rounds (one block of `per_block` of each per round); the bound
/// is the median of the rounds' ratios, with the smallest and largest beside it.
fn integration_bound(
    blocks: usize,
    per_block: usize,
    figures: &mut Vec<(String, f64)>,
) -> Result<Table> {
    let mut table = Table {
        title: format!(
            "Could a copy fused into the seal win? (ns per message, median of {blocks} \
             interleaved rounds; bound = split seal / (memcpy + ring seal), per round)"
        ),
        headers: [
            "bytes",
            "memcpy",
            "ring AES-GCM seal",
            "memcpy + ring",
            "split AES-GCM seal",
            "bound (smallest–largest round)",
        ]
        .map(String::from)
        .to_vec(),
        rows: vec![],
    };
    for size in SIZES.into_iter().filter(|&s| s >= 1024) {
        let (mut copy, mut ring, mut split) = (Vec::new(), Vec::new(), Vec::new());
        for _ in 0..blocks {
            copy.push(memcpy_ns(size, 1, per_block));
            ring.push(time_ns(Impl::RingAes, size, 1, per_block)?.0);
            split.push(time_ns(Impl::SplitAes, size, 1, per_block)?.0);
        }
        let both: Vec<f64> = copy.iter().zip(&ring).map(|(c, r)| c + r).collect();
        let bound = crate::stats::ratio_summary(&split, &both);
        figures.push((format!("aead.fused_copy_bound.{size}"), bound.median));
        let median = crate::stats::median;
        table.rows.push(vec![
            size.to_string(),
            format!("{:.0}", median(&copy)),
            format!("{:.0}", median(&ring)),
            format!("{:.0}", median(&both)),
            format!("{:.0}", median(&split)),
            bound.cell(2),
        ]);
    }
    Ok(table)
}

/// Nanoseconds per copy of `size` bytes into a datagram-sized buffer (median block).
fn memcpy_ns(size: usize, blocks: usize, per_block: usize) -> f64 {
    let src = vec![0x42u8; size];
    let mut dst = vec![vec![0u8; size]; per_block.min(64)];
    let v: Vec<f64> = (0..blocks)
        .map(|_| {
            let t0 = std::time::Instant::now();
            for i in 0..per_block {
                let d = &mut dst[i % 64.min(per_block)];
                d.copy_from_slice(std::hint::black_box(&src));
                std::hint::black_box(d);
            }
            t0.elapsed().as_nanos() as f64 / per_block as f64
        })
        .collect();
    crate::stats::median(&v)
}
