//! `phyllo-lab rtt` and `phyllo-lab stream`: run a stack and print a table.

use crate::measure::{rtt_mem, set_fast_path_check, stream_mem, stream_udp, CheckArg, LinkKind};
use crate::rawudp::Summary;
use anyhow::Result;
use phyllo::accel::Miss;
use phyllo::Stats;
use std::time::Duration;

/// Options shared by `rtt` and `stream`.
#[derive(clap::Args, Debug)]
pub struct StackArgs {
    /// The stack, top layer first, e.g. `frag(1400):window(16):checksum:seal`.
    #[arg(long, default_value = "frag(1400):window(16):checksum:seal")]
    pub stack: String,
    /// The link: `mem` (in-process, processing cost only) or `udp` (127.0.0.1).
    #[arg(long, value_enum, default_value = "udp")]
    pub link: LinkKind,
    /// Payload bytes per message.
    #[arg(long, default_value_t = 8)]
    pub size: usize,
    /// Print the connection counters too (with the accelerator's: fast-path hits, misses by
    /// reason, header bytes, packing).
    #[arg(long)]
    pub stats: bool,
    /// Put the Protocol Accelerator in front of the stack.
    #[arg(long)]
    pub accel: bool,
    /// The accelerator's check of its fast path against the layered path (`off`: the bare
    /// fast path; `sampled`: what release builds run).
    #[arg(long, value_enum, default_value = "sampled")]
    pub fast_path_check: CheckArg,
}

/// `phyllo-lab rtt` options.
#[derive(clap::Args, Debug)]
pub struct RttArgs {
    #[command(flatten)]
    stack: StackArgs,
    /// Round trips to time (after a 10 % warm-up).
    #[arg(long, default_value_t = 10_000)]
    rounds: usize,
    /// Block in the kernel instead of busy-polling (UDP only).
    #[arg(long)]
    blocking: bool,
    /// Offer at most this many round trips per second (UDP only; seed 004 Figure 5).
    #[arg(long)]
    rate: Option<f64>,
}

/// `phyllo-lab stream` options.
#[derive(clap::Args, Debug)]
pub struct StreamArgs {
    #[command(flatten)]
    stack: StackArgs,
    /// Messages to send.
    #[arg(long, default_value_t = 200_000)]
    count: u64,
    /// Give up after this many seconds (UDP).
    #[arg(long, default_value_t = 30)]
    seconds: u64,
}

fn check_size(size: usize) -> Result<()> {
    if size > 1 << 20 {
        anyhow::bail!("--size {size} exceeds the 1 MiB message limit");
    }
    Ok(())
}

/// Run `phyllo-lab rtt`.
pub fn rtt(args: RttArgs) -> Result<()> {
    let s = &args.stack;
    check_size(s.size)?;
    set_fast_path_check(s.fast_path_check);
    if args.rounds == 0 {
        anyhow::bail!("--rounds must be at least 1");
    }
    let run = match s.link {
        LinkKind::Mem => rtt_mem(&s.stack, s.accel, s.size, args.rounds)?,
        LinkKind::Udp => {
            let pace = match args.rate {
                Some(r) if r > 0.0 && r.is_finite() => Some(Duration::from_secs_f64(1.0 / r)),
                Some(r) => {
                    anyhow::bail!("--rate {r}: give a positive number of round trips per second")
                }
                None => None,
            };
            crate::measure::rtt_udp_paced(
                &s.stack,
                s.accel,
                s.size,
                args.rounds,
                !args.blocking,
                pace,
            )?
        }
    };
    let sum = Summary::from_samples(&run.samples_ns)
        .ok_or_else(|| anyhow::anyhow!("no round trip completed"))?;
    println!("| stack | link | payload B | rounds | median µs | p99 µs | mean µs | min µs |");
    println!("|---|---|---|---|---|---|---|---|");
    println!(
        "| {} | {:?} | {} | {} | {:.2} | {:.2} | {:.2} | {:.2} |",
        s.stack,
        s.link,
        s.size,
        sum.count,
        sum.median_ns as f64 / 1e3,
        sum.p99_ns as f64 / 1e3,
        sum.mean_ns / 1e3,
        sum.min_ns as f64 / 1e3
    );
    if s.link == LinkKind::Mem {
        print_critical_path(&crate::measure::critical_path(
            &s.stack,
            s.accel,
            s.size,
            args.rounds.min(20_000),
        )?);
    }
    if s.stats {
        print_stats("initiator", &run.stats);
        if let Some(a) = &run.accel {
            print_accel("initiator", a);
        }
    }
    Ok(())
}

/// Run `phyllo-lab stream`.
pub fn stream(args: StreamArgs) -> Result<()> {
    let s = &args.stack;
    check_size(s.size)?;
    set_fast_path_check(s.fast_path_check);
    let run = match s.link {
        LinkKind::Mem => stream_mem(&s.stack, s.accel, s.size, args.count)?,
        LinkKind::Udp => stream_udp(
            &s.stack,
            s.accel,
            s.size,
            args.count,
            Duration::from_secs(args.seconds),
        )?,
    };
    println!("| stack | link | payload B | delivered | seconds | msgs/s | MB/s |");
    println!("|---|---|---|---|---|---|---|");
    println!(
        "| {} | {:?} | {} | {} | {:.3} | {:.0} | {:.1} |",
        s.stack,
        s.link,
        s.size,
        run.delivered,
        run.seconds,
        run.msgs_per_s(),
        run.msgs_per_s() * s.size as f64 / 1e6
    );
    if s.stats {
        print_stats("sender", &run.sender);
        print_stats("receiver", &run.receiver);
        for (who, a) in [
            ("sender", &run.sender_accel),
            ("receiver", &run.receiver_accel),
        ] {
            if let Some(a) = a {
                print_accel(who, a);
            }
        }
    }
    Ok(())
}

/// Print a connection's counters as a table.
pub fn print_stats(who: &str, st: &Stats) {
    println!();
    println!("{who}: sent {} msgs, {} datagrams ({} bytes) out, {} datagrams in, {} delivered, {} input drops",
        st.sent_msgs, st.datagrams_out, st.bytes_out, st.datagrams_in, st.delivered, st.input_drops());
    for (layer, c) in &st.layers {
        for (reason, n) in &c.drops {
            println!("  {layer}: {n} dropped ({reason})");
        }
    }
}

/// Print the accelerator's counters.
pub fn print_accel(who: &str, a: &phyllo::accel::AccelStats) {
    println!();
    println!(
        "{who} accelerator: fast-path hit ratio {:.4} (sent {} fast / {} layered, delivered {} fast / {} layered)",
        a.hit_ratio(),
        a.fast_send_msgs,
        a.slow_send_msgs,
        a.fast_deliver_msgs,
        a.slow_deliver_msgs
    );
    let misses = |send: bool| {
        Miss::ALL
            .iter()
            .map(|&m| {
                let n = if send {
                    a.send_misses(m)
                } else {
                    a.deliver_misses(m)
                };
                format!("{m:?} {n}").to_lowercase()
            })
            .collect::<Vec<_>>()
            .join(", ")
    };
    println!(
        "  send misses: {}; delivery misses: {}",
        misses(true),
        misses(false)
    );
    println!(
        "  header bytes sent {}, datagrams with conn-id {}, unknown cookie {}, packed datagrams {} carrying {} msgs (max {})",
        a.header_bytes, a.with_conn_id, a.unknown_cookie, a.packed_datagrams, a.packed_msgs, a.max_pack
    );
    println!(
        "  checked against the layered path: {} sends, {} deliveries",
        a.checked_sends, a.checked_deliveries
    );
    for (dir, layer) in [
        ("send", a.distrusted_send),
        ("delivery", a.distrusted_deliver),
    ] {
        if let Some(layer) = layer {
            println!("  {dir} fast path off: layer `{layer}` mispredicted");
        }
    }
}

/// `phyllo-lab critical-path` options.
#[derive(clap::Args, Debug)]
pub struct CriticalPathArgs {
    /// The stack, top layer first.
    #[arg(long, default_value = "frag(1400):window(16):checksum")]
    pub stack: String,
    /// Accelerated connections.
    #[arg(long)]
    pub accel: bool,
    /// Round trips (each times one send and one delivery per direction, after a 10 % warm-up).
    #[arg(long, default_value_t = 2_000)]
    pub rounds: usize,
    /// Payload bytes.
    #[arg(long, default_value_t = 8)]
    pub size: usize,
    /// The accelerator's check of its fast path against the layered path.
    #[arg(long, value_enum, default_value = "sampled")]
    pub fast_path_check: CheckArg,
}

/// Run `phyllo-lab critical-path`: the in-memory critical-path loop alone, so callgrind can count
/// the instructions of `phyllo_cp_send` and `phyllo_cp_deliver` (see
/// [`crate::measure::critical_path_instructions`]).
pub fn critical_path(args: CriticalPathArgs) -> Result<()> {
    set_fast_path_check(args.fast_path_check);
    print_critical_path(&crate::measure::critical_path(
        &args.stack,
        args.accel,
        args.size,
        args.rounds,
    )?);
    Ok(())
}

fn print_critical_path(cp: &crate::measure::CriticalPath) {
    println!(
        "critical path (median): send {:.0} ns, deliver {:.0} ns",
        cp.send_ns, cp.deliver_ns
    );
}
