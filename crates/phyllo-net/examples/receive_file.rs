//! A file receiver: takes one file from `send_file` over a phyllo session, writes it, and
//! exits 0 once the whole file is on disk under its name.
//!
//! ```text
//! cargo run -p phyllo-net --example receive_file -- received.iso \
//!     --key receiver.key --allow sender.key.pub --listen 127.0.0.1:7701
//! ```
//!
//! The first line on standard output is `listening on ADDR public key KEY`. The file is
//! written as `OUT.part` and renamed to `OUT` only when the sender's end message says that
//! every byte arrived (its length matches), after the data is flushed to disk; the receiver
//! then answers `K` and the length, and exits once that answer is confirmed. A session that
//! ends before leaves no `OUT`, and the program exits 1.

use phyllo::Event;
use phyllo_net::{keys, SessionSocket, DEFAULT_STACK};
use std::error::Error;
use std::io::Write;
use std::path::PathBuf;
use std::time::Duration;

fn main() -> Result<(), Box<dyn Error>> {
    let mut args = std::env::args().skip(1);
    let out = PathBuf::from(
        args.next()
            .ok_or("usage: receive_file OUT --key FILE --allow KEY")?,
    );
    let (mut listen, mut key_file, mut allowed) = ("127.0.0.1:7701".to_string(), None, Vec::new());
    while let Some(flag) = args.next() {
        let value = args.next().ok_or(format!("{flag} needs a value"))?;
        match flag.as_str() {
            "--listen" => listen = value,
            "--key" => key_file = Some(PathBuf::from(value)),
            "--allow" => allowed.push(keys::read_public(&value)?),
            _ => return Err(format!("unknown option {flag}").into()),
        }
    }
    let key = keys::read_or_generate(&key_file.ok_or("--key FILE is required")?)?;
    let mut socket = SessionSocket::bind(listen.parse()?, key, allowed, DEFAULT_STACK, false)?;
    let public = socket.endpoint().public();
    println!("listening on {} public key {public}", socket.local_addr());

    let part = out.with_extension("part");
    let mut file = std::io::BufWriter::new(std::fs::File::create(&part)?);
    let mut got: u64 = 0;
    let result = 'serve: loop {
        socket.pump(Duration::from_millis(50))?;
        if let Some(Event::Ended { reason, .. }) = socket.endpoint_mut().poll_event() {
            break Err(format!(
                "the session ended ({reason:?}) before the file did"
            ));
        }
        let mut done = None;
        for peer in socket.take_readable() {
            while let Some(message) = socket
                .endpoint_mut()
                .poll_delivery_with(peer, |m| m.to_vec())
            {
                match message.split_first() {
                    Some((b'D', data)) => {
                        if let Err(e) = file.write_all(data) {
                            break 'serve Err(format!("writing {}: {e}", part.display()));
                        }
                        got += data.len() as u64;
                    }
                    Some((b'E', len)) if len == got.to_le_bytes() => done = Some(peer),
                    _ => break 'serve Err(format!("unexpected message after {got} bytes")),
                }
            }
        }
        if let Some(peer) = done {
            // On disk under its name before the sender hears that it is.
            if let Err(e) = file.flush().and_then(|()| file.get_ref().sync_all()) {
                break 'serve Err(format!("writing {}: {e}", part.display()));
            }
            std::fs::rename(&part, &out)?;
            let mut reply = vec![b'K'];
            reply.extend_from_slice(&got.to_le_bytes());
            let now = socket.now();
            socket.endpoint_mut().send(now, peer, &reply)?;
            // Stay until the answer is confirmed, so the sender does not wait in vain.
            for _ in 0..100 {
                socket.pump(Duration::from_millis(20))?;
                if socket.endpoint().is_quiet(peer) {
                    break;
                }
            }
            break Ok(());
        }
    };
    match result {
        Ok(()) => {
            println!("received {} ({got} bytes)", out.display());
            Ok(())
        }
        Err(e) => {
            drop(file);
            let _ = std::fs::remove_file(&part);
            Err(e.into())
        }
    }
}
