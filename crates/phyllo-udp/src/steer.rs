//! Steering by source: which socket of an `SO_REUSEPORT` group takes a datagram, chosen by
//! where it came from ([`UdpLink::steer_by_source`](crate::udp::UdpLink::steer_by_source)).
//!
//! A server that runs `workers` threads, each with `per_worker` listening sockets on one
//! port, binds them all into one group in order (worker 0's sockets, then worker 1's, …) and
//! attaches a classic BPF program to the group that returns, for each datagram, the group
//! index
//!
//! ```text
//! per_worker * (source address word % workers) + (source port % per_worker)
//! ```
//!
//! ([`steering_index`]). The worker is chosen by the source *address* alone, so a client
//! whose port changes (a NAT rebinding, or the client's own rebind after an unanswered
//! handshake) stays on the worker that holds its session and its partial transfer; within
//! the worker the source *port* spreads sources over its listening sockets as the kernel's
//! hash did, so a flood from one source still fills one socket. The address word is the
//! IPv4 source address, or the last 32 bits of an IPv6 one.
//!
//! What the program sees: for a reuseport program the kernel has pulled the UDP header, so
//! the packet data starts at the UDP payload; the IP and UDP headers are read relative to the
//! network header (`SKF_NET_OFF`). The IPv4 header's length comes from its IHL field (options
//! included); an IPv6 datagram is read at the fixed offsets of a header without extension
//! headers. Anything else returns an index past the group, and the kernel falls back to its
//! own hash for that datagram.
//!
//! What it does not do: move a session. A client whose *address* changes lands on another
//! worker, which does not know its session (the client's next handshake starts one there);
//! and every client behind one address (a NAT) lands on one worker.

use std::net::SocketAddr;

/// The group index the steering program picks for a datagram from `source`, with `workers`
/// workers of `per_worker` listening sockets each (both at least 1): the worker is
/// `source address word % workers`, the socket within it `source port % per_worker`. The
/// address word is the IPv4 address as a big-endian number, or the last 32 bits of an IPv6
/// address (for an IPv4-mapped one, the IPv4 address: what the kernel sees on the wire).
pub fn steering_index(source: SocketAddr, workers: usize, per_worker: usize) -> usize {
    let workers = workers.max(1) as u32;
    let per_worker = per_worker.max(1) as u32;
    let word = match source {
        SocketAddr::V4(a) => u32::from(*a.ip()),
        SocketAddr::V6(a) => {
            let o = a.ip().octets();
            u32::from_be_bytes([o[12], o[13], o[14], o[15]])
        }
    };
    (per_worker * (word % workers) + u32::from(source.port()) % per_worker) as usize
}

// Classic BPF opcodes (`linux/bpf_common.h`, `linux/filter.h`).
const LD_B_ABS: u16 = 0x30; // BPF_LD | BPF_B | BPF_ABS
const LD_W_ABS: u16 = 0x20; // BPF_LD | BPF_W | BPF_ABS
const LD_H_ABS: u16 = 0x28; // BPF_LD | BPF_H | BPF_ABS
const LD_H_IND: u16 = 0x48; // BPF_LD | BPF_H | BPF_IND
const LDX_B_MSH: u16 = 0xb1; // BPF_LDX | BPF_B | BPF_MSH: X = 4 * (byte & 0xf)
const LDX_MEM: u16 = 0x61; // BPF_LDX | BPF_W | BPF_MEM
const ST: u16 = 0x02; // BPF_ST
const ALU_RSH_K: u16 = 0x74; // BPF_ALU | BPF_RSH | BPF_K
const ALU_MOD_K: u16 = 0x94; // BPF_ALU | BPF_MOD | BPF_K
const ALU_MUL_K: u16 = 0x24; // BPF_ALU | BPF_MUL | BPF_K
const ALU_ADD_X: u16 = 0x0c; // BPF_ALU | BPF_ADD | BPF_X
const JEQ_K: u16 = 0x15; // BPF_JMP | BPF_JEQ | BPF_K
const RET_A: u16 = 0x16; // BPF_RET | BPF_A
const RET_K: u16 = 0x06; // BPF_RET | BPF_K

/// `SKF_NET_OFF`: loads at this offset and beyond read from the network (IP) header.
const NET: u32 = libc::SKF_NET_OFF as u32;

fn op(code: u16, jt: u8, jf: u8, k: u32) -> libc::sock_filter {
    libc::sock_filter { code, jt, jf, k }
}

/// The steering program for `workers` workers of `per_worker` sockets (both at least 1, and
/// their product within `u32`): returns [`steering_index`] of each datagram's source, or
/// `u32::MAX` (past any group: the kernel's hash decides) for a datagram it cannot read.
pub(crate) fn source_program(workers: u32, per_worker: u32) -> Vec<libc::sock_filter> {
    vec![
        // 0: A = the IP version.
        op(LD_B_ABS, 0, 0, NET),
        op(ALU_RSH_K, 0, 0, 4),
        // 2: IPv4 goes on; anything else to 13.
        op(JEQ_K, 0, 10, 4),
        // 3: IPv4. M[0] = per_worker * (source address % workers).
        op(LD_W_ABS, 0, 0, NET.wrapping_add(12)),
        op(ALU_MOD_K, 0, 0, workers),
        op(ALU_MUL_K, 0, 0, per_worker),
        op(ST, 0, 0, 0),
        // 7: X = the IPv4 header's length (IHL * 4); A = the UDP source port after it.
        op(LDX_B_MSH, 0, 0, NET),
        op(LD_H_IND, 0, 0, NET),
        // 9: A = M[0] + source port % per_worker.
        op(ALU_MOD_K, 0, 0, per_worker),
        op(LDX_MEM, 0, 0, 0),
        op(ALU_ADD_X, 0, 0, 0),
        op(RET_A, 0, 0, 0),
        // 13: IPv6 goes on; anything else to 23.
        op(JEQ_K, 0, 9, 6),
        // 14: IPv6 (fixed header, no extension headers): the last word of the source address
        // (bytes 8..24 of the header) and the UDP source port right after the 40-byte header.
        op(LD_W_ABS, 0, 0, NET.wrapping_add(20)),
        op(ALU_MOD_K, 0, 0, workers),
        op(ALU_MUL_K, 0, 0, per_worker),
        op(ST, 0, 0, 0),
        op(LD_H_ABS, 0, 0, NET.wrapping_add(40)),
        op(ALU_MOD_K, 0, 0, per_worker),
        op(LDX_MEM, 0, 0, 0),
        op(ALU_ADD_X, 0, 0, 0),
        op(RET_A, 0, 0, 0),
        // 23: neither: an index past the group, so the kernel's hash picks.
        op(RET_K, 0, 0, u32::MAX),
    ]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_index_keeps_an_address_on_one_worker_and_spreads_ports_within_it() {
        let at = |a: &str| a.parse::<SocketAddr>().unwrap();
        for port in 1000..1100u16 {
            let two = steering_index(at(&format!("127.0.0.2:{port}")), 2, 8);
            let three = steering_index(at(&format!("127.0.0.3:{port}")), 2, 8);
            assert!(two < 8 && (8..16).contains(&three));
            assert_eq!(two, usize::from(port % 8));
        }
        assert_eq!(steering_index(at("[::ffff:127.0.0.3]:9"), 2, 8), 9);
        assert_eq!(steering_index(at("[2001:db8::1:3]:9"), 2, 8), 9);
        assert_eq!(steering_index(at("10.0.0.7:5"), 1, 1), 0);
    }

    #[test]
    fn every_jump_lands_inside_the_program_and_it_ends_in_a_return() {
        let p = source_program(2, 8);
        for (i, f) in p.iter().enumerate() {
            if f.code == JEQ_K {
                assert!(i + 1 + usize::from(f.jt) < p.len());
                assert!(i + 1 + usize::from(f.jf) < p.len());
            }
        }
        assert_eq!(p[13].code, JEQ_K, "the IPv4 check's false branch goes here");
        assert_eq!(p[2].jf, 10);
        assert_eq!(p.last().map(|f| f.code), Some(RET_K));
    }
}
