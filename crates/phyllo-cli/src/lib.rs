//! The `phyllo` command's library: the report, its experiments, and the measurements they
//! share with the subcommands and the benchmarks.

pub mod aead;
pub mod analyze_cmd;
pub mod app_protocol;
pub mod cmd;
pub mod connect;
pub mod experiments;
pub mod ilp_cmd;
pub mod ilp_ftp;
pub mod keys;
pub mod measure;
pub mod paths_cmd;
pub mod relay;
pub mod relink;
pub mod report;
pub mod serve;
pub mod workload;
