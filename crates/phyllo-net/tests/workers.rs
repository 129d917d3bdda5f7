//! Workers on one port (`SessionSocket::bind_dedicating_workers`): each client's session is
//! held by the worker its source address is steered to, and stays there when the client moves
//! to another port (`rebind`). Under the kernel's own hash (no steering) the two clients would
//! land on the workers at random, and the moved client's next datagram with even odds on the
//! worker that does not know it.

use phyllo::{PeerId, PublicKey, StaticKey};
use phyllo_net::{SessionSocket, DEFAULT_STACK};
use std::time::{Duration, Instant};

/// A worker and its open dedicated sockets.
struct Worker {
    socket: SessionSocket,
    dedicated: Vec<usize>,
}

impl Worker {
    /// Serve every listening and dedicated socket once, then send what that produced; the
    /// peers with data.
    fn serve(&mut self) -> Vec<PeerId> {
        for i in 0..self.socket.listeners() {
            self.socket.receive_listener(i, 64).unwrap();
        }
        self.dedicated.extend(self.socket.take_opened());
        for &i in &self.dedicated {
            self.socket.receive_dedicated(i, 64).unwrap();
        }
        self.socket.timers().unwrap();
        self.socket.take_readable()
    }

    /// The established peer with key `k`, if any.
    fn holds(&self, k: PublicKey) -> Option<PeerId> {
        let ep = self.socket.endpoint();
        ep.peers()
            .find(|&p| ep.peer_key(p) == Some(k) && ep.is_established(p))
    }
}

#[test]
fn a_client_stays_with_the_worker_of_its_address_across_a_port_change() {
    let sk = StaticKey::generate().unwrap();
    let (k2, k3) = (
        StaticKey::generate().unwrap(),
        StaticKey::generate().unwrap(),
    );
    let (spub, p2, p3) = (sk.public(), k2.public(), k3.public());
    let mut workers: Vec<Worker> = SessionSocket::bind_dedicating_workers(
        "127.0.0.1:0".parse().unwrap(),
        sk,
        vec![p2, p3],
        DEFAULT_STACK,
        false,
        2,
    )
    .unwrap()
    .into_iter()
    .map(|socket| Worker {
        socket,
        dedicated: Vec::new(),
    })
    .collect();
    assert_eq!(workers.len(), 2);
    let addr = workers[0].socket.local_addr();
    assert_eq!(workers[1].socket.local_addr(), addr, "one port");
    assert!(workers.iter().all(|w| w.socket.listeners() == 8));

    let client = |host: &str, k: StaticKey| {
        let mut c = SessionSocket::bind(
            format!("{host}:0").parse().unwrap(),
            k,
            vec![],
            DEFAULT_STACK,
            false,
        )
        .unwrap();
        let now = c.now();
        let peer = c.endpoint_mut().connect(now, spub, addr);
        (c, peer)
    };
    let (mut c2, peer2) = client("127.0.0.2", k2);
    let (mut c3, peer3) = client("127.0.0.3", k3);
    let deadline = Instant::now() + Duration::from_secs(10);
    while !(c2.endpoint().is_established(peer2) && c3.endpoint().is_established(peer3)) {
        assert!(Instant::now() < deadline, "no sessions");
        c2.pump(Duration::from_millis(1)).unwrap();
        c3.pump(Duration::from_millis(1)).unwrap();
        for w in &mut workers {
            w.serve();
        }
    }
    // 127.0.0.2 (an even address word) on worker 0, 127.0.0.3 on worker 1; neither on both.
    assert!(workers[0].holds(p2).is_some() && workers[0].holds(p3).is_none());
    assert!(workers[1].holds(p3).is_some() && workers[1].holds(p2).is_none());

    // The client at 127.0.0.2 moves to another port and sends: its worker gets the message.
    let before = c2.local_addr();
    let after = c2.rebind().unwrap();
    assert_eq!(after.ip(), before.ip(), "a rebind keeps the address");
    assert_ne!(after.port(), before.port());
    let now = c2.now();
    c2.endpoint_mut()
        .send(now, peer2, b"from a new port")
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(10);
    let got = loop {
        assert!(
            Instant::now() < deadline,
            "the moved client's message never arrived"
        );
        c2.pump(Duration::from_millis(1)).unwrap();
        assert!(workers[1].serve().is_empty(), "worker 1 heard from a peer");
        let readable = workers[0].serve();
        let held = workers[0]
            .holds(p2)
            .expect("worker 0 still holds the session");
        if readable.contains(&held) {
            let ep = workers[0].socket.endpoint_mut();
            if let Some(m) = ep.poll_delivery_with(held, |m| m.to_vec()) {
                break m;
            }
        }
    };
    assert_eq!(got, b"from a new port");
    let ep = workers[0].socket.endpoint();
    let p = workers[0].holds(p2).unwrap();
    assert_eq!(
        ep.peer_addr(p),
        Some(after),
        "worker 0 follows the new port"
    );
}
