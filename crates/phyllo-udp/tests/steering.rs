//! Steering by source on this kernel: two workers' listening sockets bound into one
//! `SO_REUSEPORT` group in order, the steering program attached, and datagrams sent from
//! 127.0.0.2 and 127.0.0.3 (any 127.x address is local on Linux) from many ports. Each must
//! land on the socket [`steering_index`] names: the address picks the worker, the port the
//! socket within it. Without the program the kernel's hash spreads both addresses over all
//! sixteen sockets, and this fails.

use phyllo_udp::steer::steering_index;
use phyllo_udp::udp::{RecvBatch, UdpLink};
use std::net::SocketAddr;
use std::time::Duration;

const WORKERS: usize = 2;
const PER_WORKER: usize = 8;

/// Which socket of `group` holds a datagram now, with its source (waiting a little).
fn landed(group: &mut [UdpLink]) -> Vec<(usize, SocketAddr)> {
    let mut got = Vec::new();
    let mut batch = RecvBatch::new(64, 2048);
    for (i, l) in group.iter_mut().enumerate() {
        l.set_nonblocking(true);
        while l.try_recv(&mut batch).unwrap() > 0 {
            for (_, from) in batch.datagrams() {
                got.push((i, from.unwrap()));
            }
        }
    }
    got
}

#[test]
fn an_address_lands_on_its_worker_whatever_its_port_and_ports_spread_within_it() {
    let first = UdpLink::bind_shared("127.0.0.1:0".parse().unwrap()).unwrap();
    let addr = first.local_addr();
    let mut group = vec![first];
    for _ in 1..WORKERS * PER_WORKER {
        group.push(UdpLink::bind_shared(addr).unwrap());
    }
    group[0].steer_by_source(WORKERS, PER_WORKER).unwrap();
    // A socket that joins afterwards (a dedicated one) leaves the listeners' indices be.
    let _late = UdpLink::bind_shared(addr).unwrap();

    let mut sent = Vec::new();
    for host in ["127.0.0.2", "127.0.0.3"] {
        for _ in 0..24 {
            let mut from = UdpLink::bind(format!("{host}:0").parse().unwrap()).unwrap();
            from.connect(addr).unwrap();
            from.send_batch(&[b"steer me"]).unwrap();
            sent.push(from.local_addr());
        }
    }
    std::thread::sleep(Duration::from_millis(100));
    let got = landed(&mut group);
    assert_eq!(got.len(), sent.len(), "every datagram reached a listener");
    let mut sockets = [std::collections::BTreeSet::new(), Default::default()];
    for (i, from) in got {
        let want = steering_index(from, WORKERS, PER_WORKER);
        assert_eq!(i, want, "{from} landed on socket {i}, not {want}");
        let worker = i / PER_WORKER;
        let expected = if from.ip().to_string() == "127.0.0.2" {
            0
        } else {
            1
        };
        assert_eq!(worker, expected, "{from} on worker {worker}");
        sockets[worker].insert(i);
    }
    for (w, s) in sockets.iter().enumerate() {
        assert!(s.len() > 1, "worker {w}'s sources all on one socket: {s:?}");
    }
}

#[test]
fn steering_needs_a_group_and_sane_sizes() {
    let alone = UdpLink::bind("127.0.0.1:0".parse().unwrap()).unwrap();
    assert!(alone.steer_by_source(2, 8).is_err());
    let shared = UdpLink::bind_shared("127.0.0.1:0".parse().unwrap()).unwrap();
    assert!(shared.steer_by_source(0, 8).is_err());
    assert!(shared.steer_by_source(2, 0).is_err());
    assert!(shared.steer_by_source(usize::MAX, 2).is_err());
    shared.steer_by_source(1, 1).unwrap();
}
