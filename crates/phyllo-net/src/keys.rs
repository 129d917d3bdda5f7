//! Key files: a static key pair as two files of hexadecimal digits — `FILE` (the private
//! key, readable by its owner only) and `FILE.pub` (the public key, for the peers to allow) —
//! and allow files, the public keys a server accepts.
//!
//! Every key is 64 hexadecimal digits (32 bytes) on a line of its own.

use crate::error::NetError;
use phyllo::session::{parse_key_hex, KeyParseError, PublicKey, StaticKey};
use std::io::Write;
use std::path::{Path, PathBuf};

/// The path of the public key beside the private key file `private`: `private` with `.pub`
/// appended.
pub fn public_path(private: &Path) -> PathBuf {
    let mut s = private.as_os_str().to_owned();
    s.push(".pub");
    PathBuf::from(s)
}

/// Read a public key from a `.pub` file, or take `arg` itself as 64 hexadecimal digits (when
/// no file of that name exists).
pub fn read_public(arg: &str) -> Result<PublicKey, NetError> {
    let text = if Path::new(arg).exists() {
        std::fs::read_to_string(arg).map_err(|source| NetError::Read {
            path: arg.into(),
            source,
        })?
    } else {
        arg.to_string()
    };
    let bytes = parse_key_hex(&text).map_err(|source| NetError::PublicKey {
        arg: arg.to_string(),
        source,
    })?;
    Ok(PublicKey(bytes))
}

/// Read a private key file (as [`write_pair`] writes it). On Unix a file that its group or
/// others may read or write is refused ([`NetError::KeyPermissions`]).
pub fn read_private(path: &Path) -> Result<StaticKey, NetError> {
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        let meta = std::fs::metadata(path).map_err(|source| NetError::Read {
            path: path.into(),
            source,
        })?;
        let mode = meta.permissions().mode() & 0o777;
        if mode & 0o077 != 0 {
            return Err(NetError::KeyPermissions {
                path: path.into(),
                mode,
            });
        }
    }
    let text = std::fs::read_to_string(path).map_err(|source| NetError::Read {
        path: path.into(),
        source,
    })?;
    let bytes = parse_key_hex(&text).map_err(|source| NetError::PrivateKeyText {
        path: path.into(),
        source,
    })?;
    StaticKey::from_private(bytes).map_err(|source| NetError::PrivateKey {
        path: path.into(),
        source,
    })
}

/// The key pair in the private key file `path`; when there is none, a new pair, written there
/// ([`write_pair`]) first.
pub fn read_or_generate(path: &Path) -> Result<StaticKey, NetError> {
    if path.exists() {
        return read_private(path);
    }
    let key = StaticKey::generate().map_err(NetError::KeyGeneration)?;
    write_pair(path, &key)?;
    Ok(key)
}

/// Write `key` as `path` (the private key; on Unix readable and writable by its owner only,
/// an existing file too) and [`public_path`]`(path)` (the public key). Files that exist are
/// replaced.
pub fn write_pair(path: &Path, key: &StaticKey) -> Result<(), NetError> {
    write_private(path, &key.private_hex())?;
    let public_file = public_path(path);
    std::fs::write(&public_file, format!("{}\n", key.public())).map_err(|source| NetError::Write {
        path: public_file,
        source,
    })
}

/// Write the private key's digits to `path`, owner-only on Unix.
fn write_private(path: &Path, hex: &str) -> Result<(), NetError> {
    let write_error = |source| NetError::Write {
        path: path.into(),
        source,
    };
    let mut opts = std::fs::OpenOptions::new();
    opts.write(true).create(true).truncate(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt;
        opts.mode(0o600);
    }
    let mut f = opts.open(path).map_err(write_error)?;
    // The mode above applies only to a file this call creates: one that was there keeps its
    // own until told.
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        f.set_permissions(std::fs::Permissions::from_mode(0o600))
            .map_err(write_error)?;
    }
    writeln!(f, "{hex}").map_err(write_error)?;
    Ok(())
}

/// Read an allow file: one public key per line, in hexadecimal. Blank lines are skipped, and
/// `#` starts a comment that runs to the end of its line (a key may be followed by one, e.g.
/// its owner's name).
pub fn read_allow_file(path: &Path) -> Result<Vec<PublicKey>, NetError> {
    let text = std::fs::read_to_string(path).map_err(|source| NetError::Read {
        path: path.into(),
        source,
    })?;
    parse_allow(&text).map_err(|(line, source)| NetError::AllowFile {
        path: path.into(),
        line,
        source,
    })
}

/// The keys of an allow file's text, or the first bad line (counting from 1) and what is
/// wrong with it.
fn parse_allow(text: &str) -> Result<Vec<PublicKey>, (usize, KeyParseError)> {
    let mut keys = Vec::new();
    for (i, line) in text.lines().enumerate() {
        let key = line.split('#').next().unwrap_or("").trim();
        if key.is_empty() {
            continue;
        }
        keys.push(PublicKey(parse_key_hex(key).map_err(|e| (i + 1, e))?));
    }
    Ok(keys)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::error::Error;

    /// A directory of this test's own.
    fn scratch(name: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!("phyllo-net-{name}-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        dir
    }

    #[cfg(unix)]
    #[test]
    fn a_private_key_others_may_read_is_refused() {
        use std::os::unix::fs::PermissionsExt;
        let dir = scratch("perm");
        let path = dir.join("key");
        let key = StaticKey::generate().unwrap();
        write_pair(&path, &key).unwrap();
        assert_eq!(read_private(&path).unwrap().public(), key.public());
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o644)).unwrap();
        let err = read_private(&path).unwrap_err();
        assert!(
            matches!(err, NetError::KeyPermissions { mode: 0o644, .. }),
            "{err:?}"
        );
        assert!(err.to_string().contains("chmod 600"), "{err}");
        // Writing a pair over the open file makes it private again.
        write_pair(&path, &key).unwrap();
        assert_eq!(read_private(&path).unwrap().public(), key.public());
        assert_eq!(read_or_generate(&path).unwrap().public(), key.public());
        let fresh = dir.join("fresh");
        let _ = std::fs::remove_file(&fresh);
        let made = read_or_generate(&fresh).unwrap();
        assert_eq!(read_private(&fresh).unwrap().public(), made.public());
    }

    #[test]
    fn an_allow_file_may_have_blank_lines_and_comments() {
        let a = StaticKey::generate().unwrap().public();
        let b = StaticKey::generate().unwrap().public();
        let text = format!("# the clients\n\n{a}\n   \n  {b}  # bob's laptop\n# the end\n");
        assert_eq!(parse_allow(&text).unwrap(), vec![a, b]);
        let dir = scratch("allow");
        let path = dir.join("allowed");
        std::fs::write(&path, &text).unwrap();
        assert_eq!(read_allow_file(&path).unwrap(), vec![a, b]);
        std::fs::write(&path, format!("{a}\n\nnot a key # at all\n")).unwrap();
        let err = read_allow_file(&path).unwrap_err();
        assert!(
            matches!(err, NetError::AllowFile { line: 3, .. }),
            "{err:?}"
        );
        assert!(
            err.to_string().ends_with("allowed:3: not a public key"),
            "{err}"
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn a_written_pair_reads_back() {
        let dir = scratch("pair");
        let path = dir.join("key");
        let key = StaticKey::generate().unwrap();
        write_pair(&path, &key).unwrap();
        let back = read_private(&path).unwrap();
        assert_eq!(back.public(), key.public());
        let public = public_path(&path);
        assert_eq!(read_public(public.to_str().unwrap()).unwrap(), key.public());
        assert_eq!(
            read_public(&key.public().to_string()).unwrap(),
            key.public()
        );
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            let mode = std::fs::metadata(&path).unwrap().permissions().mode();
            assert_eq!(mode & 0o777, 0o600);
        }
        std::fs::write(&path, "not a key\n").unwrap();
        let err = read_private(&path).unwrap_err();
        assert!(err.to_string().ends_with("not a key"), "{err}");
        let cause = err.source().unwrap().to_string();
        assert!(cause.contains("64 hexadecimal digits"), "{cause}");
        assert!(matches!(
            read_public("beef"),
            Err(NetError::PublicKey { .. })
        ));
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
