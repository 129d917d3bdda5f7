//! `phyllo serve --workers`: sessions spread over worker threads on one port, steered by the
//! client's source address. Two clients on one machine, sending from 127.0.0.2 and 127.0.0.3
//! (`connect --bind`), land on the two workers of a server on 127.0.0.1; both files arrive
//! whole, the log names a session on each worker, and `--transfers 2` counts the transfers of
//! both workers together.

mod common;

use common::*;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

/// The client sending `file` from `bind`, started.
fn send(addr: &str, dir: &Path, file: &Path, bind: &str) -> Child {
    Command::new(BIN)
        .args(["connect", addr, "--quiet", "--bind", bind])
        .arg("--key")
        .arg(dir.join("client"))
        .args(["--server-key", &pubfile(&dir.join("server"))])
        .arg("--file")
        .arg(file)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap()
}

#[test]
fn two_clients_land_on_two_workers_and_transfers_counts_both() {
    let dir = tmpdir("workers");
    let (s, c) = (keygen(&dir, "server"), keygen(&dir, "client"));
    let out = dir.join("out");
    let log = dir.join("serve.log");
    let mut cmd = Command::new(BIN);
    cmd.args(["serve", "--listen", "127.0.0.1:0", "--print-addr"])
        .args(["--workers", "2", "--transfers", "2"])
        .arg("--key")
        .arg(&s)
        .args(["--allow", &pubfile(&c)])
        .arg("--out")
        .arg(&out)
        .stderr(std::fs::File::create(&log).unwrap());
    let (child, addr) = spawn_reading_addr(cmd);
    let mut server = Kill(child);

    // Two files of different sizes (different contents, different transfers).
    let (f2, f3) = (dir.join("from-2"), dir.join("from-3"));
    let (h2, h3) = (random_file(&f2, 6 << 20), random_file(&f3, (6 << 20) + 1));
    let a = send(&addr, &dir, &f2, "127.0.0.2:0");
    let b = send(&addr, &dir, &f3, "127.0.0.3:0");
    for (o, who) in [
        (finish(a, Duration::from_secs(60)), "127.0.0.2"),
        (finish(b, Duration::from_secs(60)), "127.0.0.3"),
    ] {
        assert!(o.status.success(), "{who}: {}", stderr(&o));
        assert!(stdout(&o).contains("verified=yes"), "{who}: {}", stdout(&o));
    }
    assert_eq!(sha256_of(&out.join("from-2")), h2);
    assert_eq!(sha256_of(&out.join("from-3")), h3);

    // --transfers 2: the two transfers, one on each worker, end the server.
    assert!(
        wait_exit(&mut server, Duration::from_secs(10)),
        "the server did not stop after both transfers"
    );
    let text = std::fs::read_to_string(&log).unwrap();
    for w in 0..2 {
        let tag = format!("worker{{worker={w}}}");
        assert!(
            text.lines()
                .any(|l| l.contains(&tag) && l.contains("session up")),
            "no session on worker {w}:\n{text}"
        );
        assert!(
            text.lines()
                .any(|l| l.contains(&tag) && l.contains("transfer complete")),
            "no transfer on worker {w}:\n{text}"
        );
    }
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn workers_out_of_range_or_without_the_engine_are_refused() {
    let dir = tmpdir("workers-args");
    let s = keygen(&dir, "server");
    for bad in [
        &["--workers", "0"][..],
        &["--workers", "65"],
        &["--workers", "2", "--no-engine"],
        &["--workers", "2", "--busy-poll"],
    ] {
        let o = Command::new(BIN)
            .args(["serve", "--listen", "127.0.0.1:0", "--allow", &pubfile(&s)])
            .arg("--key")
            .arg(&s)
            .args(bad)
            .output()
            .unwrap();
        assert!(!o.status.success(), "{bad:?} was taken");
        assert!(stderr(&o).contains("--workers"), "{bad:?}: {}", stderr(&o));
    }
    let _ = std::fs::remove_dir_all(&dir);
}
