//! `SessionNet`: session endpoints at addresses on one in-memory network, on a virtual clock.
//!
//! The deterministic driver of the session tests and the attack experiment: every datagram
//! an endpoint sends goes through the same seeded faults as [`MemLink`](crate::testing::memlink)
//! (loss, duplication, reordering, one-bit corruption, delay) to the endpoint at its
//! destination address; anything may be injected from any address (an attacker). Each node's
//! events and deliveries are collected for the test to read, through the endpoint's documented
//! calls only (`poll_transmit`, `handle_datagram`, `poll_timeout`/`handle_timeout`,
//! `poll_delivery_with`, `poll_event`). Nodes at odd indices move their datagrams with the
//! zero-copy calls instead (`transmit_single`, else `poll_transmit_msg` and `recycle`;
//! `alloc` and `handle_msg`, the datagram written into the buffer as a receive would), so
//! every test runs both.

use crate::endpoint::{Event, PeerId, SessionEndpoint};
use crate::stack::{DynStack, LayerSet};
use crate::testing::memlink::Faults;
use crate::time::{earliest, Time};
use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;
use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::net::SocketAddr;

/// One endpoint at one address, with what it has produced so far.
pub struct Node<S: LayerSet = DynStack> {
    /// Its address.
    pub addr: SocketAddr,
    /// The endpoint.
    pub ep: SessionEndpoint<S>,
    /// Events, in order.
    pub events: Vec<(Time, Event)>,
    /// Messages delivered, with the peer and the instant.
    pub inbox: Vec<(Time, PeerId, Vec<u8>)>,
    /// Whether it is attached (a detached node, like a crashed process, receives nothing).
    pub up: bool,
}

/// A datagram on the wire.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Wire {
    /// Source address.
    pub from: SocketAddr,
    /// Destination address.
    pub to: SocketAddr,
    /// Bytes.
    pub data: Vec<u8>,
}

type InFlight = (Time, u64, SocketAddr, SocketAddr, Vec<u8>);

/// The network.
pub struct SessionNet<S: LayerSet = DynStack> {
    /// The virtual clock.
    pub now: Time,
    /// The endpoints.
    pub nodes: Vec<Node<S>>,
    /// When set, every datagram an endpoint sends is recorded (before faults).
    pub wire: Option<Vec<Wire>>,
    faults: Faults,
    rng: ChaCha8Rng,
    /// Datagrams in flight by (arrival, serial): the serial is unique, so the addresses and
    /// bytes after it never decide the order.
    queue: BinaryHeap<Reverse<InFlight>>,
    serial: u64,
    buf: Vec<u8>,
}

impl<S: LayerSet> SessionNet<S> {
    /// An empty network with `faults` drawn from `seed`.
    pub fn new(faults: Faults, seed: u64) -> SessionNet<S> {
        SessionNet {
            now: Time::ZERO,
            nodes: Vec::new(),
            wire: None,
            faults,
            rng: ChaCha8Rng::seed_from_u64(seed),
            queue: BinaryHeap::new(),
            serial: 0,
            buf: Vec::with_capacity(2048),
        }
    }

    /// Change the faults (heal the network, or break it).
    pub fn set_faults(&mut self, faults: Faults) {
        self.faults = faults;
    }

    /// Attach an endpoint at `addr`; returns its node index.
    pub fn add(&mut self, addr: SocketAddr, ep: SessionEndpoint<S>) -> usize {
        self.nodes.push(Node {
            addr,
            ep,
            events: Vec::new(),
            inbox: Vec::new(),
            up: true,
        });
        self.nodes.len() - 1
    }

    /// Replace node `i`'s endpoint (a restarted process at the same address); what was in
    /// flight to the old one arrives at the new one.
    pub fn replace(&mut self, i: usize, ep: SessionEndpoint<S>) -> SessionEndpoint<S> {
        self.nodes[i].up = true;
        std::mem::replace(&mut self.nodes[i].ep, ep)
    }

    /// Put a datagram on the wire from any address (through the faults).
    pub fn inject(&mut self, from: SocketAddr, to: SocketAddr, data: &[u8]) {
        self.put(from, to, data);
    }

    /// Put `data` on the wire through the faults (the in-memory link's draws).
    fn put(&mut self, from: SocketAddr, to: SocketAddr, data: &[u8]) {
        for a in self
            .faults
            .draw(&mut self.rng, data.len())
            .copies
            .into_iter()
            .flatten()
        {
            let mut d = data.to_vec();
            a.corrupt(&mut d);
            let at = self.now + self.faults.delay + a.extra.unwrap_or_default();
            self.serial += 1;
            self.queue.push(Reverse((at, self.serial, from, to, d)));
        }
    }

    fn hand(&mut self, i: usize, from: SocketAddr, data: &[u8]) {
        let now = self.now;
        let ep = &mut self.nodes[i].ep;
        if !i.is_multiple_of(2) {
            let mut m = ep.alloc();
            m.tail_room(data.len())[..data.len()].copy_from_slice(data);
            m.commit_tail(data.len());
            ep.handle_msg(now, from, m);
        } else {
            ep.handle_datagram(now, from, data);
        }
        self.collect(i);
    }

    /// Node `i`'s next datagram into `buf` (replacing what it held), and where it goes.
    fn transmit(&mut self, i: usize, buf: &mut Vec<u8>) -> Option<SocketAddr> {
        let ep = &mut self.nodes[i].ep;
        if i.is_multiple_of(2) {
            return ep.poll_transmit(buf);
        }
        let mut lent = None;
        if ep.transmit_single(|to, d| {
            buf.clear();
            buf.extend_from_slice(d);
            lent = Some(to);
        }) {
            return lent;
        }
        let (to, m) = ep.poll_transmit_msg()?;
        buf.clear();
        buf.extend_from_slice(m.data());
        ep.recycle(m);
        Some(to)
    }

    /// Move node `i`'s deliveries and events into its lists.
    fn collect(&mut self, i: usize) {
        let now = self.now;
        let n = &mut self.nodes[i];
        let peers: Vec<PeerId> = n.ep.peers().collect();
        for p in peers {
            while let Some(m) = n.ep.poll_delivery_with(p, |d| d.to_vec()) {
                n.inbox.push((now, p, m));
            }
        }
        while let Some(e) = n.ep.poll_event() {
            n.events.push((now, e));
        }
    }

    /// One round at the current instant; when there was nothing to do, advance the clock to
    /// the next arrival or deadline. `false` when nothing at all is pending.
    pub fn step(&mut self) -> bool {
        self.step_until(Time(u64::MAX))
    }

    /// [`step`](Self::step), but the clock advances no further than `until`.
    fn step_until(&mut self, until: Time) -> bool {
        let mut worked = false;
        for i in 0..self.nodes.len() {
            if !self.nodes[i].up {
                continue;
            }
            let now = self.now;
            if self.nodes[i].ep.poll_timeout().is_some_and(|t| t <= now) {
                self.nodes[i].ep.handle_timeout(now);
                worked = true;
            }
            self.collect(i);
            let mut buf = std::mem::take(&mut self.buf);
            while let Some(to) = self.transmit(i, &mut buf) {
                let from = self.nodes[i].addr;
                if let Some(w) = &mut self.wire {
                    w.push(Wire {
                        from,
                        to,
                        data: buf.clone(),
                    });
                }
                self.put(from, to, &buf);
                worked = true;
            }
            self.buf = buf;
        }
        while self.queue.peek().is_some_and(|Reverse(f)| f.0 <= self.now) {
            let Some(Reverse((_, _, from, to, data))) = self.queue.pop() else {
                break;
            };
            if let Some(i) = self.nodes.iter().position(|n| n.addr == to && n.up) {
                self.hand(i, from, &data);
            }
            worked = true;
        }
        if worked {
            return true;
        }
        let next_arrival = self.queue.peek().map(|Reverse(f)| f.0);
        let next_timer = self
            .nodes
            .iter()
            .filter(|n| n.up)
            .filter_map(|n| n.ep.poll_timeout())
            .min();
        match earliest(next_arrival, next_timer) {
            Some(t) if t <= until => {
                self.now = self.now.max(t);
                true
            }
            _ => false,
        }
    }

    /// Run until `until` (or until nothing is pending).
    pub fn run_until(&mut self, until: Time) {
        while self.now <= until && self.step_until(until) {}
        self.now = self.now.max(until);
    }

    /// Run until `done` holds (checked after every step) or `limit` passes; whether it held.
    pub fn run_while(&mut self, limit: Time, mut done: impl FnMut(&Self) -> bool) -> bool {
        while !done(self) {
            if self.now > limit || !self.step() {
                return done(self);
            }
        }
        true
    }
}
