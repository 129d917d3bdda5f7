//! `phyllo-lab paths`: seed 000's two reference stacks in its six versions — round trips timed over
//! memlink or UDP loopback (`rtt`), or run between the analyzer's region markers for valgrind
//! (`trace`). (Seed 000 is Mosberger et al., "Analysis of Techniques to Improve Protocol Processing
//! Latency".)
//!
//! STD, OUT and PIN are code in this binary ([`crate::paths`]); CLO, BAD and ALL run OUT's
//! and PIN's code, their function layouts being a matter of placement: the report simulates
//! them on the trace, and a binary relinked with a symbol order runs them for real.

use crate::measure::{configs, rtt_mem_on, rtt_udp_on, udp_pair_of, RttRun};
use crate::paths::classify::{flow_fields, Classifier, Route};
use crate::paths::{with_stack, OnStack, StackKind, Version};
use anyhow::{bail, Context, Result};
use clap::{Args, ValueEnum};
use phyllo::conn::BuildError;
use phyllo::testing::memlink::MemLink;
use phyllo::testing::Pair;
use phyllo::{Config, Connection, LayerSet};
use phyllo_analyze::capture::Workload;
use std::path::Path;

/// Which reference stack.
#[derive(Clone, Copy, Debug, ValueEnum)]
pub enum StackArg {
    /// `tcp:ip:eth`.
    Short,
    /// `xrpctest:mselect:vchan:chan:bid:blast:vnet:eth`.
    Tall,
}

/// `kind` as `--stack` names it.
pub fn stack_arg(kind: StackKind) -> &'static str {
    match kind {
        StackKind::Short => "short",
        StackKind::Tall => "tall",
    }
}

/// `phyllo-lab paths <mode>` of `exe` on `kind` in `version`'s code for `rounds`, as a workload
/// for valgrind (or a process of its own).
pub fn workload(
    exe: &Path,
    mode: &str,
    kind: StackKind,
    version: Version,
    rounds: usize,
) -> Workload {
    Workload {
        program: exe.to_path_buf(),
        args: [
            "paths",
            mode,
            "--stack",
            stack_arg(kind),
            "--version",
            version.name(),
            "--rounds",
            &rounds.to_string(),
        ]
        .map(String::from)
        .to_vec(),
    }
}

/// Both ends built by `make` from a measured pair's configurations ([`configs`], no
/// accelerator): initiator, responder.
pub fn ends<S: LayerSet, M: FnMut(Config) -> Result<Connection<S>, BuildError>>(
    make: &mut M,
) -> Result<(Connection<S>, Connection<S>), BuildError> {
    let (a, b) = configs(false)?;
    Ok((make(a)?, make(b)?))
}

impl From<StackArg> for StackKind {
    fn from(s: StackArg) -> StackKind {
        match s {
            StackArg::Short => StackKind::Short,
            StackArg::Tall => StackKind::Tall,
        }
    }
}

/// Parse a version name (STD, OUT, CLO, BAD, PIN, ALL; any case).
pub fn parse_version(s: &str) -> Result<Version, String> {
    Version::ALL
        .into_iter()
        .find(|v| v.name().eq_ignore_ascii_case(s))
        .ok_or_else(|| format!("unknown version {s:?} (STD, OUT, CLO, BAD, PIN, ALL)"))
}

/// What `phyllo-lab paths` runs.
#[derive(Clone, Copy, Debug, ValueEnum)]
pub enum Mode {
    /// Time round trips; print mean and standard deviation.
    Rtt,
    /// Run round trips between the analyzer's region markers (for valgrind).
    Trace,
    /// Classify datagrams between the analyzer's region markers (the classifier's own cost,
    /// for callgrind); `--rounds` datagrams.
    Classify,
    /// Trace the version's round trips, order its functions (`--order`) and link this binary
    /// again in that order into `--out` (needs valgrind, cargo and the source tree).
    Relink,
}

/// Where round trips go.
#[derive(Clone, Copy, Debug, ValueEnum)]
pub enum LinkArg {
    /// The in-memory link (processing cost only).
    Mem,
    /// UDP loopback, both ends busy-polling.
    Udp,
    /// No link: each end hands its datagrams to the other (protocol processing only; seed
    /// 000's T_p).
    Direct,
}

/// Arguments of `phyllo-lab paths`.
#[derive(Args, Debug)]
pub struct PathsArgs {
    /// What to do.
    #[arg(value_enum)]
    pub mode: Mode,
    /// The stack.
    #[arg(long, value_enum, default_value = "tall")]
    pub stack: StackArg,
    /// The version (STD, OUT, CLO, BAD, PIN, ALL).
    #[arg(long, default_value = "STD", value_parser = parse_version)]
    pub version: Version,
    /// The link (`rtt` only; `trace` runs over memlink).
    #[arg(long, value_enum, default_value = "mem")]
    pub link: LinkArg,
    /// Round trips measured (after a tenth as many for warm-up).
    #[arg(long, default_value_t = 10_000)]
    pub rounds: usize,
    /// Bytes per message (the seed's ping-pong carries 1).
    #[arg(long, default_value_t = 1)]
    pub size: usize,
    /// The function order `relink` links with.
    #[arg(long, value_enum, default_value = "bipartite")]
    pub order: crate::relink::Order,
    /// Where `relink` writes the relinked binary.
    #[arg(long)]
    pub out: Option<std::path::PathBuf>,
}

/// Round trips timed over memlink or UDP (each end built by [`with_stack`]).
pub struct Rtt {
    /// Where the round trips go.
    pub link: LinkArg,
    /// Bytes per message.
    pub size: usize,
    /// Round trips measured (after a tenth as many for warm-up).
    pub rounds: usize,
}

impl OnStack for Rtt {
    type Out = Result<RttRun>;
    fn run<S: LayerSet + Send + 'static, M: FnMut(Config) -> Result<Connection<S>, BuildError>>(
        self,
        mut make: M,
    ) -> Result<RttRun> {
        let (a, b) = ends(&mut make)?;
        match self.link {
            LinkArg::Mem => rtt_mem_on(Pair::new(a, b, MemLink::perfect()), self.size, self.rounds),
            LinkArg::Udp => {
                let (a, b) = udp_pair_of(a, b)?;
                rtt_udp_on(a, b, self.size, self.rounds, true, None)
            }
            LinkArg::Direct => rtt_direct(a, b, self.size, self.rounds),
        }
    }
}

/// Round trips inside the analyzer's region markers, after a warm-up outside: the two ends
/// hand their datagrams to each other directly ([`direct_round_trip`]), so the region holds
/// the protocol processing of both ends and nothing of a link or harness.
struct Trace {
    size: usize,
    rounds: usize,
}

impl OnStack for Trace {
    type Out = Result<usize>;
    fn run<S: LayerSet + Send + 'static, M: FnMut(Config) -> Result<Connection<S>, BuildError>>(
        self,
        mut make: M,
    ) -> Result<usize> {
        let (mut a, mut b) = ends(&mut make)?;
        let data = vec![0x5au8; self.size];
        let mut general = 0;
        // The clock stands still: no timer falls due inside the region.
        let now = phyllo::Time::ZERO;
        // Warm-up: pools filled, round-trip estimates settled, code and data cached.
        for _ in 0..(self.rounds / 10).max(10) {
            direct_round_trip(&mut a, &mut b, now, &data, None, &mut general)?;
        }
        let done = phyllo_analyze::roi::run(|| {
            let mut done = 0;
            for _ in 0..self.rounds {
                if direct_round_trip(&mut a, &mut b, now, &data, None, &mut general).is_err() {
                    break;
                }
                done += 1;
            }
            done
        });
        if done != self.rounds {
            bail!("only {done} of {} round trips completed", self.rounds);
        }
        Ok(done)
    }
}

/// Round trips with the datagrams handed over directly, each timed; a tenth as many first
/// for warm-up.
fn rtt_direct<S: LayerSet>(
    mut a: Connection<S>,
    mut b: Connection<S>,
    size: usize,
    rounds: usize,
) -> Result<RttRun> {
    let data = vec![0x5au8; size];
    let epoch = std::time::Instant::now();
    let mut general = 0;
    let now = |at: std::time::Instant| phyllo::Time(at.duration_since(epoch).as_nanos() as u64);
    for _ in 0..(rounds / 10).max(10) {
        direct_round_trip(
            &mut a,
            &mut b,
            now(std::time::Instant::now()),
            &data,
            None,
            &mut general,
        )?;
    }
    let mut samples = Vec::with_capacity(rounds);
    let first = std::time::Instant::now();
    for _ in 0..rounds {
        let t0 = std::time::Instant::now();
        direct_round_trip(&mut a, &mut b, now(t0), &data, None, &mut general)?;
        samples.push(t0.elapsed().as_nanos() as u64);
    }
    Ok(RttRun {
        samples_ns: samples,
        stats: a.stats().clone(),
        accel: None,
        span: first.elapsed(),
    })
}

/// The datagrams of one round trip's request and reply, and a classifier for each end's
/// incoming flow, learned from them (ALL's code).
pub struct Learned {
    /// Classifies what reaches B (A's flow).
    pub at_b: Classifier,
    /// Classifies what reaches A (B's flow).
    pub at_a: Classifier,
    /// A request as it reached B and a reply as it reached A.
    pub samples: [Vec<u8>; 2],
}

/// Run one round trip over `a` and `b` directly (no link): every datagram is moved by hand, so
/// each end may classify what reaches it first — `Some` classifiers route a datagram to the
/// connection only if it matches (else it is counted in `general` and dropped: no other flow
/// exists here). Returns the request and reply datagrams as they arrived.
pub fn direct_round_trip<S: LayerSet>(
    a: &mut Connection<S>,
    b: &mut Connection<S>,
    now: phyllo::Time,
    data: &[u8],
    classify: Option<(&Classifier, &Classifier)>,
    general: &mut u64,
) -> Result<[Vec<u8>; 2]> {
    fn carry<S: LayerSet>(
        from: &mut Connection<S>,
        to: &mut Connection<S>,
        now: phyllo::Time,
        c: Option<&Classifier>,
        general: &mut u64,
        seen: &mut Vec<u8>,
    ) {
        while let Some(m) = from.poll_transmit() {
            if seen.is_empty() {
                seen.extend_from_slice(m.data());
            }
            match c.map_or(Route::Inlined, |c| c.route(m.data())) {
                Route::Inlined => {
                    to.handle_datagram(now, m.data());
                }
                Route::General => *general += 1,
            }
            from.recycle(m);
        }
    }
    let (mut req, mut rep) = (Vec::new(), Vec::new());
    a.send(now, data)?;
    carry(a, b, now, classify.map(|c| c.0), general, &mut req);
    let Some(m) = b.poll_delivery() else {
        bail!("the request was not delivered");
    };
    b.send(now, m.data())?;
    b.recycle(m);
    carry(b, a, now, classify.map(|c| c.1), general, &mut rep);
    let Some(m) = a.poll_delivery() else {
        bail!("the reply was not delivered");
    };
    a.recycle(m);
    for c in [&mut *a, &mut *b] {
        if c.poll_timeout().is_some_and(|t| t <= now) {
            c.handle_timeout(now);
        }
    }
    Ok([req, rep])
}

/// Learn both ends' classifiers from one round trip of `a` and `b` (a stack of `kind`).
pub fn learn<S: LayerSet>(
    kind: StackKind,
    a: &mut Connection<S>,
    b: &mut Connection<S>,
) -> Result<Learned> {
    let mut general = 0;
    let [req, rep] = direct_round_trip(a, b, phyllo::Time::ZERO, &[0x5a], None, &mut general)?;
    let fields = flow_fields(kind);
    Ok(Learned {
        at_b: Classifier::learn(b.layout(), fields, &req)?,
        at_a: Classifier::learn(a.layout(), fields, &rep)?,
        samples: [req, rep],
    })
}

/// Classify datagrams inside the analyzer's markers: the classifier's own cost.
struct ClassifyRun {
    kind: StackKind,
    rounds: usize,
}

impl OnStack for ClassifyRun {
    type Out = Result<usize>;
    fn run<S: LayerSet + Send + 'static, M: FnMut(Config) -> Result<Connection<S>, BuildError>>(
        self,
        mut make: M,
    ) -> Result<usize> {
        let (mut a, mut b) = ends(&mut make)?;
        let l = learn(self.kind, &mut a, &mut b)?;
        // B's classifier sees its flow's request and the reverse flow's reply by turns: a
        // match and a miss.
        let inputs = [&l.samples[0][..], &l.samples[1][..]];
        let hits = phyllo_analyze::roi::run(|| {
            let mut hits = 0;
            for i in 0..self.rounds {
                hits += usize::from(l.at_b.matches(std::hint::black_box(inputs[i & 1])));
            }
            hits
        });
        Ok(hits)
    }
}

/// Mean and sample standard deviation of `samples`, nanoseconds.
pub fn mean_sd(samples: &[u64]) -> (f64, f64) {
    let n = samples.len().max(1) as f64;
    let mean = samples.iter().map(|&x| x as f64).sum::<f64>() / n;
    let var = samples
        .iter()
        .map(|&x| (x as f64 - mean).powi(2))
        .sum::<f64>()
        / (n - 1.0).max(1.0);
    (mean, var.sqrt())
}

/// Run `phyllo-lab paths`.
pub fn main(args: PathsArgs) -> Result<()> {
    phyllo_analyze::roi::probe_exit_if_requested();
    let kind = StackKind::from(args.stack);
    match args.mode {
        Mode::Rtt => {
            let run = with_stack(
                kind,
                args.version,
                Rtt {
                    link: args.link,
                    size: args.size,
                    rounds: args.rounds,
                },
            )
            .with_context(|| format!("{} {}", kind.spec(), args.version.name()))?;
            let (mean, sd) = mean_sd(&run.samples_ns);
            println!(
                "paths rtt {} {} {:?}: {} round trips, mean {:.0} ns, sd {:.0} ns",
                kind.spec(),
                args.version.name(),
                args.link,
                run.samples_ns.len(),
                mean,
                sd
            );
        }
        Mode::Relink => {
            let Some(out) = &args.out else {
                bail!("relink needs --out FILE");
            };
            let exe = std::env::current_exe().context("locating the phyllo-lab binary")?;
            let trace = workload(&exe, "trace", kind, args.version, 200);
            let names = crate::relink::symbol_order(trace, args.order, 200)?;
            crate::relink::relink(&exe, &names, out)?;
            println!(
                "paths relink {} {} {:?}: {} functions ordered -> {}",
                kind.spec(),
                args.version.name(),
                args.order,
                names.len(),
                out.display()
            );
        }
        Mode::Classify => {
            let hits = with_stack(
                kind,
                args.version,
                ClassifyRun {
                    kind,
                    rounds: args.rounds,
                },
            )?;
            println!(
                "paths classify {} {}: {} datagrams, {hits} matched",
                kind.spec(),
                args.version.name(),
                args.rounds
            );
        }
        Mode::Trace => {
            let n = with_stack(
                kind,
                args.version,
                Trace {
                    size: args.size,
                    rounds: args.rounds,
                },
            )?;
            println!(
                "paths trace {} {}: {n} round trips",
                kind.spec(),
                args.version.name()
            );
        }
    }
    Ok(())
}
