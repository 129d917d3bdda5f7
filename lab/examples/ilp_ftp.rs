//! Seed 001's RPC file transfer in code: a temporary file of 8 MiB sent by each execution of
//! the integrated data path ([`phyllo_lab::ilp_ftp::transfer`]), one summary line each.
//!
//! Run: `cargo run --release -p phyllo-lab --example ilp_ftp`.

use anyhow::{Context, Result};
use phyllo_lab::ilp_cmd::Exec;
use phyllo_lab::ilp_ftp::{transfer, IlpFtpArgs};

fn main() -> Result<()> {
    let path = std::env::temp_dir().join(format!("phyllo-ilp-ftp-example-{}", std::process::id()));
    let data: Vec<u8> = (0..8u32 << 20).map(|i| (i ^ (i >> 11)) as u8).collect();
    std::fs::write(&path, &data).with_context(|| format!("writing {}", path.display()))?;
    let result = (|| -> Result<()> {
        for exec in [Exec::Layered, Exec::Integrated, Exec::Blocked] {
            let mut args = IlpFtpArgs::new(&path);
            args.path = exec;
            let t = transfer(&args)?;
            println!("{exec:?}: {}", t.line());
        }
        Ok(())
    })();
    std::fs::remove_file(&path).ok();
    result
}
