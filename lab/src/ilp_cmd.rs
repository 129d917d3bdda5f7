//! `phyllo-lab ilp`: send or receive packets through one execution of the integrated data path,
//! for valgrind to count (`phyllo_ilp_op` marks one packet's work) or to time.

use crate::ilp::safer::ToyKey;
use crate::ilp::xdr::Reply;
use crate::ilp::{receive, send, ChaCha, Execution, Plain, UnitCipher};
use anyhow::{bail, Result};
use clap::{Args, ValueEnum};

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

/// `phyllo-lab ilp` options.
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

/// The toy cipher's key in the measurements (the cipher is insecure anyway).
pub const TOY_KEY: ToyKey = ToyKey([3, 141, 59, 26, 53, 58, 97, 93]);
/// ChaCha20's key and nonce in the measurements.
pub const CHACHA_KEY: ([u8; 32], [u8; 12]) = ([7; 32], [1; 12]);

/// The payload of the measurements' packets.
pub fn payload(size: usize) -> Vec<u8> {
    (0..size).map(|i| (i * 31 + 7) as u8).collect()
}

/// One packet's work, as one function: what `--toggle-collect=phyllo_ilp_op` counts. The
/// cipher is keyed for the packet (a real one would take a fresh nonce), so its set-up counts.
#[inline(never)]
#[no_mangle]
pub fn phyllo_ilp_op(
    exec: Execution,
    cipher: CipherArg,
    receive_side: bool,
    r: &Reply<'_>,
    packet: &[u8],
    out: &mut Vec<u8>,
) {
    fn run(
        exec: Execution,
        key: &mut impl UnitCipher,
        receive_side: bool,
        r: &Reply<'_>,
        packet: &[u8],
        out: &mut Vec<u8>,
    ) {
        if receive_side {
            let _ = receive(exec, key, packet, out);
        } else {
            send(exec, key, r, out);
        }
    }
    match cipher {
        CipherArg::Toy => run(exec, &mut TOY_KEY.clone(), receive_side, r, packet, out),
        CipherArg::Chacha20 => {
            let mut c = ChaCha::new(&CHACHA_KEY.0, &CHACHA_KEY.1);
            run(exec, &mut c, receive_side, r, packet, out)
        }
        CipherArg::Plain => run(exec, &mut Plain, receive_side, r, packet, out),
    }
}

/// Run `phyllo-lab ilp`.
pub fn ilp(args: IlpArgs) -> Result<()> {
    let data = payload(args.size);
    let r = Reply {
        xid: 1,
        seq: 2,
        data: &data,
    };
    let mut packet = Vec::new();
    phyllo_ilp_op(Execution::Layered, args.cipher, false, &r, &[], &mut packet);
    let mut out = Vec::with_capacity(packet.len());
    for _ in 0..args.rounds {
        phyllo_ilp_op(
            args.exec.execution(),
            args.cipher,
            args.receive,
            &r,
            &packet,
            &mut out,
        );
    }
    if args.receive && out != data {
        bail!("received bytes differ");
    }
    Ok(())
}
