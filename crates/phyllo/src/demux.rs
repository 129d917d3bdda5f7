//! `CookieDemux`: many accelerated connections behind one socket, found by cookie.
//!
//! Seed 004 §2.2: "The receiver remembers for each connection what the current (incoming)
//! cookie is"; a datagram with the identification finds its connection by it (and a listening
//! endpoint makes a new connection for an identification it has not seen), one without finds
//! it by cookie. Beyond the paper: two connections whose peers chose the same cookie are
//! detected (the identification names one connection, the cookie map another); the cookie is
//! then marked ambiguous — datagrams carrying only it are counted and dropped — and both
//! connections stop acknowledging it, so their peers keep sending the identification and
//! nothing is lost.

use crate::accel::preamble::{Preamble, PREAMBLE_LEN};
use crate::conn::{BuildError, Connection};
use crate::field::read_bits;
use crate::stack::LayerSet;
use crate::time::Time;
use std::collections::{HashMap, HashSet};

/// Builds the connection for a peer the endpoint has not seen (a responder).
pub type Accept<S> = Box<dyn FnMut() -> Result<Connection<S>, BuildError>>;

/// CookieDemux counters.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct DemuxStats {
    /// Dropped: shorter than a preamble (or its identification).
    pub truncated: u64,
    /// Dropped: a cookie no connection knows, without identification.
    pub unknown_cookie: u64,
    /// Dropped: an identification no connection has, and the endpoint does not accept.
    pub unknown_conn: u64,
    /// Cookies found shared by two connections.
    pub collisions: u64,
    /// Dropped: only an ambiguous cookie to go by.
    pub ambiguous: u64,
    /// Connections accepted.
    pub accepted: u64,
    /// Datagrams with the identification that their connection refused (nothing learnt).
    pub refused: u64,
}

/// Accelerated connections multiplexed by cookie (sans-IO).
pub struct CookieDemux<S: LayerSet> {
    conns: Vec<Connection<S>>,
    by_ident: HashMap<u64, usize>,
    by_cookie: HashMap<u64, usize>,
    ambiguous: HashSet<u64>,
    accept: Option<Accept<S>>,
    max_conns: usize,
    stats: DemuxStats,
}

impl<S: LayerSet> CookieDemux<S> {
    /// An endpoint that accepts new connections built by `make` (responders), at most
    /// `max_conns` of them; `None` accepts none.
    pub fn new(accept: Option<Accept<S>>, max_conns: usize) -> CookieDemux<S> {
        CookieDemux {
            conns: Vec::new(),
            by_ident: HashMap::new(),
            by_cookie: HashMap::new(),
            ambiguous: HashSet::new(),
            accept,
            max_conns,
            stats: DemuxStats::default(),
        }
    }

    /// Counters.
    pub fn stats(&self) -> &DemuxStats {
        &self.stats
    }

    /// The connections, in the order they were added or accepted.
    pub fn connections(&mut self) -> &mut [Connection<S>] {
        &mut self.conns
    }

    /// Add a connection (e.g. one this side initiates); returns its index.
    pub fn add(&mut self, c: Connection<S>) -> usize {
        let i = self.conns.len();
        if let Some(id) = c.conn_ident() {
            self.by_ident.insert(id, i);
        }
        self.conns.push(c);
        i
    }

    /// Route a datagram to its connection; returns the connection's index, or `None` if it
    /// was counted and dropped here or refused by the connection.
    ///
    /// A datagram with the identification may teach the endpoint something (a new peer, a
    /// cookie, a collision); it does only once its connection has accepted it — for a sealed
    /// stack, authenticated it. A forged one that names a live connection's cookie with a
    /// made-up identification therefore changes nothing: the connection made for it is
    /// dropped again, and no cookie is marked ambiguous.
    pub fn handle_datagram(&mut self, now: Time, d: &[u8]) -> Option<usize> {
        let Ok(pre) = Preamble::read(d) else {
            self.stats.truncated += 1;
            return None;
        };
        if !pre.conn_id_present {
            let idx = if self.ambiguous.contains(&pre.cookie) {
                self.stats.ambiguous += 1;
                return None;
            } else if let Some(&i) = self.by_cookie.get(&pre.cookie) {
                i
            } else {
                self.stats.unknown_cookie += 1;
                return None;
            };
            self.conns[idx].handle_datagram(now, d);
            return Some(idx);
        }
        let (ident, idx, fresh) = self.by_identification(d, pre)?;
        if !self.conns[idx].handle_datagram(now, d).is_accepted() {
            // Refused: whatever it would have taught is not learnt.
            if fresh && idx + 1 == self.conns.len() {
                self.conns.pop();
                self.stats.accepted -= 1;
            }
            self.stats.refused += 1;
            return None;
        }
        self.by_ident.insert(ident, idx);
        match self.by_cookie.get(&pre.cookie) {
            Some(&j) if j != idx => self.collide(pre.cookie, j, idx),
            Some(_) => {}
            None if !self.ambiguous.contains(&pre.cookie) => {
                self.by_cookie.insert(pre.cookie, idx);
            }
            None => self.conns[idx].block_cookie_ack(),
        }
        Some(idx)
    }

    /// The connection a datagram with the identification is for: (identification, index,
    /// whether the connection was made for it). Learns nothing.
    fn by_identification(&mut self, d: &[u8], pre: Preamble) -> Option<(u64, usize, bool)> {
        // Any connection tells the layout (all share one stack); a listening endpoint with
        // none yet makes its first.
        let mut fresh = false;
        if self.conns.is_empty() {
            let c = self.accept_new()?;
            self.conns.push(c);
            self.stats.accepted += 1;
            fresh = true;
        }
        let (cid, loc) = {
            let c = &self.conns[0];
            (c.layout().conn_id_len(), c.conn_ident_loc())
        };
        let Some(idbytes) = d.get(PREAMBLE_LEN..PREAMBLE_LEN + cid) else {
            self.stats.truncated += 1;
            if fresh {
                self.conns.pop();
                self.stats.accepted -= 1;
            }
            return None;
        };
        let ident = loc.map_or(0, |l| read_bits(idbytes, l, pre.order));
        if let Some(&i) = self.by_ident.get(&ident) {
            return Some((ident, i, false));
        }
        // A connection that has not learnt its identification yet (a fresh responder).
        if let Some(i) = (0..self.conns.len()).find(|&i| {
            self.conns[i].conn_ident().is_none() && !self.by_ident.values().any(|&v| v == i)
        }) {
            return Some((ident, i, fresh));
        }
        if self.conns.len() >= self.max_conns {
            self.stats.unknown_conn += 1;
            return None;
        }
        let c = self.accept_new()?;
        self.conns.push(c);
        self.stats.accepted += 1;
        Some((ident, self.conns.len() - 1, true))
    }

    fn accept_new(&mut self) -> Option<Connection<S>> {
        let Some(make) = self.accept.as_mut() else {
            self.stats.unknown_conn += 1;
            return None;
        };
        match make() {
            Ok(c) => Some(c),
            Err(_) => {
                self.stats.unknown_conn += 1;
                None
            }
        }
    }

    fn collide(&mut self, cookie: u64, a: usize, b: usize) {
        self.stats.collisions += 1;
        self.by_cookie.remove(&cookie);
        self.ambiguous.insert(cookie);
        self.conns[a].block_cookie_ack();
        self.conns[b].block_cookie_ack();
    }
}
