//! `phyllo-lab workload NAME`: the workloads the architecture analyzer traces.
//!
//! Seed 003 §2.2 drives its TCP/IP stack with a synthetic 10 k-packet trace whose sizes follow
//! the bimodal distributions of LAN traffic (≈52 % of packets under 200 B) and WAN traffic
//! (≈99 % under 1500 B), and contrasts it with SPECint. Here:
//! - `lan`, `wan`: a phyllo stack (spec `frag(1400):window(16):checksum`) sends every packet of
//!   the seeded synthetic trace from end A to end B over the in-memory link (send and receive
//!   sides both run in this process);
//! - `compute`: general-purpose compute standing in for SPECint (deflate compression and
//!   decompression with miniz_oxide of a seeded text-like buffer, then sorting records).
//!
//! Only the work between the markers of `phyllo_analyze::roi` is measured; generating the
//! trace, building the stack and printing happen outside.

use anyhow::{bail, Result};

/// `phyllo-lab workload` options.
#[derive(clap::Args, Debug, Clone)]
pub struct WorkloadArgs {
    /// lan, wan (protocol stack over a synthetic packet trace) or compute (contrast).
    pub name: String,
    /// Packets in the synthetic trace (lan, wan).
    #[arg(long, default_value_t = 10_000)]
    pub packets: usize,
    /// Input size in KiB (compute).
    #[arg(long, default_value_t = 256)]
    pub size_kib: usize,
    /// Seed of the synthetic trace.
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
}

/// The protocol stack spec the protocol workloads run.
pub const SPEC: &str = "frag(1400):window(16):checksum";

/// splitmix64: a small seeded generator (the trace must replay exactly).
pub struct SplitMix(pub u64);

impl SplitMix {
    /// Next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }
    /// Uniform in `[lo, hi)`.
    pub fn range(&mut self, lo: usize, hi: usize) -> usize {
        lo + (self.next_u64() % (hi - lo).max(1) as u64) as usize
    }
    /// Uniform in `[0, 1)`.
    pub fn unit(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 / (1u64 << 53) as f64
    }
}

/// Which packet-size distribution.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Traffic {
    /// Seed 003 Figure 1, LAN: ≈52 % under 200 B, the rest mostly full-size frames.
    Lan,
    /// Seed 003 Figure 1, WAN: ≈99 % under 1500 B.
    Wan,
}

/// A seeded synthetic trace of `n` payload sizes (bimodal, seed 003 §2.2).
pub fn packet_sizes(t: Traffic, n: usize, seed: u64) -> Vec<usize> {
    let mut r = SplitMix(seed);
    (0..n)
        .map(|_| {
            let u = r.unit();
            match t {
                Traffic::Lan => {
                    if u < 0.52 {
                        r.range(40, 200)
                    } else if u < 0.62 {
                        r.range(200, 1400)
                    } else {
                        r.range(1400, 1501)
                    }
                }
                Traffic::Wan => {
                    if u < 0.45 {
                        r.range(40, 200)
                    } else if u < 0.80 {
                        r.range(200, 576)
                    } else if u < 0.99 {
                        r.range(576, 1500)
                    } else {
                        r.range(1500, 4000)
                    }
                }
            }
        })
        .collect()
}

/// A protocol pair that can carry a message from A to B: the pluggable part of the protocol
/// workload. Returns messages delivered at B.
pub trait Transfer {
    /// Sends `payload` from A to B, runs both sides until idle.
    fn transfer(&mut self, payload: &[u8]) -> usize;
}

impl<F: FnMut(&[u8]) -> usize> Transfer for F {
    fn transfer(&mut self, payload: &[u8]) -> usize {
        self(payload)
    }
}

/// Builds the protocol pair of the workloads: `phyllo::testing::Pair` with spec [`SPEC`].
pub fn protocol_pair() -> Result<Box<dyn Transfer>> {
    let pair = phyllo::testing::Pair::from_spec(SPEC)
        .map_err(|e| anyhow::anyhow!("building {SPEC}: {e}"))?;
    Ok(Box::new(PhylloPair(pair)))
}

/// The harness pair as a [`Transfer`]: messages delivered at B are drained (returned to the
/// pool) after every transfer, as an application would.
struct PhylloPair(phyllo::testing::Pair);

impl Transfer for PhylloPair {
    fn transfer(&mut self, payload: &[u8]) -> usize {
        if self.0.transfer(payload).is_err() {
            return 0;
        }
        let mut n = 0;
        while self.0.b.poll_delivery().is_some() {
            n += 1;
        }
        n
    }
}

/// Compute workload: deflate round trip and a sort, over `size` bytes.
fn compute(size: usize, seed: u64) -> u64 {
    let mut r = SplitMix(seed);
    let words = [
        "protocol", "layer", "header", "cache", "packet", "window", "the", "of", "and", "fast",
        "path", "seed",
    ];
    let mut text = Vec::with_capacity(size + 16);
    while text.len() < size {
        text.extend_from_slice(words[r.range(0, words.len())].as_bytes());
        text.push(if r.range(0, 8) == 0 { b'\n' } else { b' ' });
    }
    let mut records: Vec<(u64, u32)> = (0..size / 16).map(|i| (r.next_u64(), i as u32)).collect();
    phyllo_analyze::roi::run(|| {
        let z = miniz_oxide::deflate::compress_to_vec(&text, 6);
        let back = miniz_oxide::inflate::decompress_to_vec(&z).unwrap_or_default();
        records.sort_unstable();
        z.len() as u64 + back.len() as u64 + records.first().map(|x| x.1 as u64).unwrap_or(0)
    })
}

/// The workload names.
pub const NAMES: [&str; 3] = ["lan", "wan", "compute"];

/// An error unless `name` is a workload.
pub fn check_name(name: &str) -> Result<()> {
    if !NAMES.contains(&name) {
        bail!("unknown workload {name:?} (lan, wan, compute)");
    }
    Ok(())
}

/// Runs a workload; prints a one-line summary on stdout.
pub fn main(args: WorkloadArgs) -> Result<()> {
    check_name(&args.name)?;
    phyllo_analyze::roi::probe_exit_if_requested();
    match args.name.as_str() {
        "lan" | "wan" => {
            let t = if args.name == "lan" {
                Traffic::Lan
            } else {
                Traffic::Wan
            };
            let sizes = packet_sizes(t, args.packets, args.seed);
            let payload: Vec<u8> = (0..8192u32).map(|i| (i * 31 + 7) as u8).collect();
            let mut pair = protocol_pair()?;
            let delivered = phyllo_analyze::roi::run(|| {
                sizes
                    .iter()
                    .map(|&s| pair.transfer(&payload[..s.min(payload.len())]))
                    .sum::<usize>()
            });
            println!(
                "workload {}: {} packets, {} delivered",
                args.name,
                sizes.len(),
                delivered
            );
        }
        "compute" => {
            let v = compute(args.size_kib * 1024, args.seed);
            println!("workload compute: {} KiB, checksum {v}", args.size_kib);
        }
        other => bail!("unknown workload {other:?} (lan, wan, compute)"),
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bimodal_shares() {
        let lan = packet_sizes(Traffic::Lan, 10_000, 1);
        let small = lan.iter().filter(|&&s| s < 200).count() as f64 / 1e4;
        assert!((small - 0.52).abs() < 0.02, "{small}");
        let wan = packet_sizes(Traffic::Wan, 10_000, 1);
        let under = wan.iter().filter(|&&s| s < 1500).count() as f64 / 1e4;
        assert!((under - 0.99).abs() < 0.005, "{under}");
        assert_eq!(lan, packet_sizes(Traffic::Lan, 10_000, 1));
    }

    #[test]
    fn protocol_pair_delivers() {
        let mut p = protocol_pair().unwrap();
        let payload = vec![7u8; 4000];
        assert_eq!(p.transfer(&payload[..100]), 1);
        assert_eq!(p.transfer(&payload), 1);
        for s in packet_sizes(Traffic::Wan, 200, 3) {
            assert_eq!(p.transfer(&payload[..s]), 1);
        }
    }
}
