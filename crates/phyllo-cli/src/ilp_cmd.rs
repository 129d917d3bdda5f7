//! `phyllo ilp`: send or receive packets through one execution of the integrated data path,
//! for valgrind to count (`phyllo_ilp_op` marks one packet's work) or to time.

use anyhow::{bail, Result};
use clap::{Args, ValueEnum};
use phyllo::ilp::safer::ToyKey;
use phyllo::ilp::xdr::Reply;
use phyllo::ilp::{receive, send, ChaCha, Execution, Plain, UnitCipher};

/// The execution, for the command line.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum Exec {
    /// One pass per function.
    Layered,
    /// One loop.
    Integrated,
    /// The passes chunk by chunk.
    Blocked,
}

impl Exec {
    /// The library's execution.
    pub fn execution(self) -> Execution {
        match self {
            Exec::Layered => Execution::Layered,
            Exec::Integrated => Execution::Integrated,
            Exec::Blocked => Execution::Blocked,
        }
    }
}

/// The cipher, for the command line.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum CipherArg {
    /// The seed's simplified SAFER K-64 (insecure).
    Toy,
    /// ChaCha20.
    Chacha20,
    /// None.
    Plain,
}

/// `phyllo ilp` options.
#[derive(Args, Debug)]
pub struct IlpArgs {
    /// Which execution.
    #[arg(long, value_enum, default_value = "integrated")]
    pub exec: Exec,
    /// Which cipher.
    #[arg(long, value_enum, default_value = "toy")]
    pub cipher: CipherArg,
    /// Payload bytes per packet.
    #[arg(long, default_value_t = 1024)]
    pub size: usize,
    /// Packets.
    #[arg(long, default_value_t = 100)]
    pub rounds: u32,
    /// Count receiving instead of sending.
    #[arg(long)]
    pub receive: bool,
}

/// Makes a packet's cipher and hands it to the work.
pub type WithCipher<'a> = dyn FnMut(&mut dyn FnMut(&mut dyn Op)) + 'a;

/// One packet's work, as one function: what `--toggle-collect=phyllo_ilp_op` counts.
#[inline(never)]
#[no_mangle]
pub fn phyllo_ilp_op(
    exec: Execution,
    key: &mut WithCipher<'_>,
    receive_side: bool,
    r: &Reply<'_>,
    packet: &[u8],
    out: &mut Vec<u8>,
) {
    key(&mut |op: &mut dyn Op| op.run(exec, receive_side, r, packet, out));
}

/// A cipher made for one packet, type-erased for [`phyllo_ilp_op`].
pub trait Op {
    /// Send `r` into `out`, or receive `packet` into `out`.
    fn run(&mut self, exec: Execution, rx: bool, r: &Reply<'_>, packet: &[u8], out: &mut Vec<u8>);
}

impl<C: UnitCipher> Op for C {
    fn run(&mut self, exec: Execution, rx: bool, r: &Reply<'_>, packet: &[u8], out: &mut Vec<u8>) {
        if rx {
            let _ = receive(exec, self, packet, out);
        } else {
            send(exec, self, r, out);
        }
    }
}

/// Run `phyllo ilp`.
pub fn ilp(args: IlpArgs) -> Result<()> {
    let data: Vec<u8> = (0..args.size).map(|i| (i * 31 + 7) as u8).collect();
    let r = Reply {
        xid: 1,
        seq: 2,
        data: &data,
    };
    let exec = args.exec.execution();
    let mut make = |f: &mut dyn FnMut(&mut dyn Op)| match args.cipher {
        CipherArg::Toy => f(&mut ToyKey([3, 141, 59, 26, 53, 58, 97, 93])),
        CipherArg::Chacha20 => f(&mut ChaCha::new(&[7; 32], &[1; 12])),
        CipherArg::Plain => f(&mut Plain),
    };
    let mut packet = Vec::new();
    make(&mut |op: &mut dyn Op| op.run(Execution::Layered, false, &r, &[], &mut packet));
    let mut out = Vec::with_capacity(packet.len());
    for _ in 0..args.rounds {
        phyllo_ilp_op(exec, &mut make, args.receive, &r, &packet, &mut out);
    }
    if args.receive && out != data {
        bail!("received bytes differ");
    }
    Ok(())
}
