//! `phyllo keygen`: a static key pair for sessions, written as two files of hexadecimal
//! digits — `FILE` (private, readable by its owner only) and `FILE.pub` (public, for the
//! peers to allow), by [`phyllo_net::keys::write_pair`].

use anyhow::{bail, Context, Result};
use phyllo::session::StaticKey;
use phyllo_net::keys::{public_path, write_pair};
use std::path::PathBuf;

/// `phyllo keygen` options.
#[derive(clap::Args, Debug)]
pub struct KeygenArgs {
    /// Where to write the private key; the public key goes to the same path with `.pub`
    /// appended.
    #[arg(long)]
    pub out: PathBuf,
    /// Replace files that exist.
    #[arg(long)]
    pub force: bool,
}

/// Write a new key pair; prints the public key.
pub fn keygen(args: KeygenArgs) -> Result<()> {
    let public_file = public_path(&args.out);
    for p in [&args.out, &public_file] {
        if p.exists() && !args.force {
            bail!("{} exists (use --force to replace it)", p.display());
        }
    }
    let key = StaticKey::generate().context("generating a key pair")?;
    write_pair(&args.out, &key)?;
    println!("{}", key.public());
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use phyllo_net::keys::read_private;

    #[test]
    fn a_written_pair_reads_back_and_is_not_overwritten() {
        let dir = std::env::temp_dir().join(format!("phyllo-keygen-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let out = dir.join("key");
        let _ = std::fs::remove_file(&out);
        let _ = std::fs::remove_file(public_path(&out));
        keygen(KeygenArgs {
            out: out.clone(),
            force: false,
        })
        .unwrap();
        let key = read_private(&out).unwrap();
        let public = std::fs::read_to_string(public_path(&out)).unwrap();
        assert_eq!(public.trim(), key.public().to_string());
        let again = keygen(KeygenArgs {
            out: out.clone(),
            force: false,
        });
        assert!(again.unwrap_err().to_string().contains("exists"));
        std::fs::write(&out, "not a key\n").unwrap();
        let err = format!("{:#}", anyhow::Error::from(read_private(&out).unwrap_err()));
        assert!(
            err.contains("not a key") && err.contains("64 hexadecimal digits"),
            "{err}"
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
