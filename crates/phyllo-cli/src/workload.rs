//! `phyllo workload NAME`: the workloads the architecture analyzer traces.
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

/// `phyllo workload` options.
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

/// Builds the protocol pair of the workloads.
pub fn protocol_pair() -> Result<Box<dyn Transfer>> {
    Ok(Box::new(standin::Pair::new()))
}

/// A small layered stand-in used until `phyllo::harness::Pair` is available on this branch:
/// fragmentation at 1400 B, a 16-slot sliding window with sequence numbers and cumulative
/// acks, and the Internet checksum, each pushing and checking its own header.
mod standin {
    /// Internet checksum (RFC 1071).
    fn checksum(data: &[u8]) -> u16 {
        let mut sum: u32 = 0;
        let mut chunks = data.chunks_exact(2);
        for c in &mut chunks {
            sum += u16::from_be_bytes([c[0], c[1]]) as u32;
        }
        if let [b] = chunks.remainder() {
            sum += (*b as u32) << 8;
        }
        while sum > 0xffff {
            sum = (sum & 0xffff) + (sum >> 16);
        }
        !(sum as u16)
    }

    pub struct Pair {
        seq: u32,
        expect: u32,
        acked: u32,
        window: std::collections::VecDeque<(u32, Vec<u8>)>,
        link: Vec<Vec<u8>>,
        reasm: Vec<u8>,
        delivered: usize,
    }

    impl Pair {
        pub fn new() -> Self {
            Pair { seq: 0, expect: 0, acked: 0, window: Default::default(), link: Vec::new(), reasm: Vec::new(), delivered: 0 }
        }

        fn send_frag(&mut self, frag: &[u8], last: bool) {
            // window header: seq (4) + flags (1); checksum header (2) in front.
            let mut pkt = Vec::with_capacity(frag.len() + 8);
            pkt.extend_from_slice(&[0, 0]);
            pkt.extend_from_slice(&self.seq.to_be_bytes());
            pkt.push(last as u8);
            pkt.extend_from_slice(frag);
            let c = checksum(&pkt[2..]);
            pkt[..2].copy_from_slice(&c.to_be_bytes());
            self.window.push_back((self.seq, pkt.clone()));
            self.seq = self.seq.wrapping_add(1);
            self.link.push(pkt);
        }

        fn receive(&mut self, pkt: &[u8]) -> Option<u32> {
            if pkt.len() < 7 || checksum(&pkt[2..]) != u16::from_be_bytes([pkt[0], pkt[1]]) {
                return None;
            }
            let seq = u32::from_be_bytes([pkt[2], pkt[3], pkt[4], pkt[5]]);
            if seq != self.expect {
                return Some(self.expect);
            }
            self.expect = self.expect.wrapping_add(1);
            self.reasm.extend_from_slice(&pkt[7..]);
            if pkt[6] == 1 {
                self.delivered += 1;
                self.reasm.clear();
            }
            Some(self.expect)
        }
    }

    impl super::Transfer for Pair {
        fn transfer(&mut self, payload: &[u8]) -> usize {
            let before = self.delivered;
            let n = payload.len().div_ceil(1400).max(1);
            for (k, frag) in payload.chunks(1400).enumerate() {
                self.send_frag(frag, k + 1 == n);
                if self.window.len() >= 16 {
                    self.run();
                }
            }
            if payload.is_empty() {
                self.send_frag(&[], true);
            }
            self.run();
            self.delivered - before
        }
    }

    impl Pair {
        fn run(&mut self) {
            let pkts = std::mem::take(&mut self.link);
            for p in &pkts {
                if let Some(ack) = self.receive(p) {
                    self.acked = ack;
                }
            }
            while self.window.front().is_some_and(|(s, _)| (s.wrapping_sub(self.acked) as i32) < 0) {
                self.window.pop_front();
            }
            self.link = pkts;
            self.link.clear();
        }
    }
}

/// Compute workload: deflate round trip and a sort, over `size` bytes.
fn compute(size: usize, seed: u64) -> u64 {
    let mut r = SplitMix(seed);
    let words = ["protocol", "layer", "header", "cache", "packet", "window", "the", "of", "and", "fast", "path", "seed"];
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
            let t = if args.name == "lan" { Traffic::Lan } else { Traffic::Wan };
            let sizes = packet_sizes(t, args.packets, args.seed);
            let payload: Vec<u8> = (0..8192u32).map(|i| (i * 31 + 7) as u8).collect();
            let mut pair = protocol_pair()?;
            let delivered = phyllo_analyze::roi::run(|| sizes.iter().map(|&s| pair.transfer(&payload[..s.min(payload.len())])).sum::<usize>());
            println!("workload {}: {} packets, {} delivered", args.name, sizes.len(), delivered);
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
        assert_eq!(p.transfer(&[]), 1);
    }
}
