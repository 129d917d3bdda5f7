//! `phyllo keygen`: a static key pair for sessions, written as two files of hexadecimal
//! digits — `FILE` (private, readable by its owner only) and `FILE.pub` (public, for the
//! peers to allow).

use anyhow::{bail, Context, Result};
use phyllo::session::{parse_key_hex, StaticKey};
use std::io::Write;
use std::path::{Path, PathBuf};

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

/// The path of the public key beside `private`.
pub fn public_path(private: &Path) -> PathBuf {
    let mut s = private.as_os_str().to_owned();
    s.push(".pub");
    PathBuf::from(s)
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

/// Write `key` as `path` (private, owner only) and `path.pub`.
pub fn write_pair(path: &Path, key: &StaticKey) -> Result<()> {
    write_private(path, &key.private_hex())?;
    let public_file = public_path(path);
    std::fs::write(&public_file, format!("{}\n", key.public()))
        .with_context(|| format!("writing {}", public_file.display()))
}

fn write_private(path: &Path, hex: &str) -> Result<()> {
    let mut opts = std::fs::OpenOptions::new();
    opts.write(true).create(true).truncate(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt;
        opts.mode(0o600);
    }
    let mut f = opts
        .open(path)
        .with_context(|| format!("writing {}", path.display()))?;
    writeln!(f, "{hex}").with_context(|| format!("writing {}", path.display()))?;
    Ok(())
}

/// Read a private key file written by `keygen`.
pub fn read_private(path: &Path) -> Result<StaticKey> {
    let text =
        std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
    let bytes = parse_key_hex(&text).with_context(|| format!("{}: not a key", path.display()))?;
    StaticKey::from_private(bytes).with_context(|| format!("{}: not a key", path.display()))
}

#[cfg(test)]
mod tests {
    use super::*;

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
        let err = format!("{:#}", read_private(&out).unwrap_err());
        assert!(
            err.contains("not a key") && err.contains("64 hexadecimal digits"),
            "{err}"
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
