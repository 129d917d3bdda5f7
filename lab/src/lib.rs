//! phyllo's lab: the report and every experiment behind it, the reproductions of the papers phyllo
//! builds on, and the baselines its timings are divided by. Never published; it uses the product
//! crates' public API only (and `phyllo`'s `testing` feature).
//!
//! - The report ([`report`]) runs the experiments ([`experiments`]) and writes
//!   `report/index.{md,html}`, plots and `results.json`.
//! - Reproductions: the reference stacks and latency techniques of Mosberger et al., "Analysis
//!   of Techniques to Improve Protocol Processing Latency" (seed 000: [`paths`]); Braun and
//!   Diot's integrated layer processing (seed 001: [`ilp`], [`ilp_ftp`]); the livelock model
//!   and the forwarder on real sockets of Mogul and Ramakrishnan, "Eliminating Receive Livelock
//!   in an Interrupt-Driven Kernel" (seed 002: [`livelock_model`], [`forward`], [`netns`]).
//! - Checks of the product under stress: heavy-fault soaks ([`soak`]) and the attack on a live
//!   session endpoint ([`attack`]).
//! - Baselines and instruments: raw UDP ([`rawudp`], [`raw_echo`] beside `serve`, and the
//!   plain echo [`udp_echo`]), AEADs ([`aead`]), timing helpers ([`measure`]), the analyzer's
//!   workloads ([`workload`], [`analyze_cmd`]), the targets run under callgrind ([`cmd`]), a
//!   binary relinked in a chosen function order ([`relink`]). The papers are mapped to modules
//!   in `docs/papers.md`.

pub mod aead;
pub mod analyze_cmd;
pub mod attack;
pub mod cmd;
pub mod experiments;
pub mod forward;
pub mod ilp;
pub mod ilp_cmd;
pub mod ilp_ftp;
pub mod livelock_model;
pub mod measure;
pub mod netns;
pub mod paths;
pub mod paths_cmd;
pub mod raw_echo;
pub mod rawudp;
pub mod relink;
pub mod report;
pub mod soak;
pub mod stats;
pub mod udp_echo;
pub mod workload;
