//! The attack on a live session endpoint: recorded traffic mutated, replayed and forged, and a
//! spoofed handshake flood, against a server with established sessions.
//!
//! Used by the attack test and the report's `serve.attack_sessions_lost` figure. A server
//! holds sessions with several clients on a [`SessionNet`]; every datagram of a first
//! exchange is recorded (handshakes, data both ways, and a whole earlier session of one
//! client). Then, with the traffic going on:
//!
//! 1. every truncation and every single-bit mutation of recorded datagrams, sent from the
//!    genuine source and from a spoofed one;
//! 2. every recorded datagram replayed, those of the ended session included (from the
//!    genuine source and from a spoofed one);
//! 3. for an accelerated stack, forged identifications: recorded data datagrams given the
//!    identification flag and a made-up identification, under their valid cookie and index;
//! 4. a flood of initiations from spoofed addresses: junk with a valid mac1 (anyone who
//!    knows the server's public key can make one), genuine initiations of a stranger's key,
//!    and replays of a recorded genuine initiation;
//!
//! and, during the flood, a new allowed client connects. Afterwards every client and the
//! server exchange more messages. A session is *lost* if an end reported it ended or it did
//! not deliver everything afterwards.

use phyllo::accel::preamble::{Preamble, PREAMBLE_LEN};
use phyllo::endpoint::{Discard, Event, PeerId, SessionConfig, SessionEndpoint, DATA, DATA_HEADER};
use phyllo::session::mac::ResponderMacKeys;
use phyllo::session::{Initiation, StaticKey};
use phyllo::testing::memlink::Faults;
use phyllo::testing::net::SessionNet;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use std::net::SocketAddr;
use std::time::Duration;

/// What to attack.
#[derive(Clone, Debug)]
pub struct AttackConfig {
    /// The stack of every session.
    pub spec: String,
    /// Accelerated sessions.
    pub accelerate: bool,
    /// Clients with established sessions.
    pub clients: usize,
    /// Recorded datagrams to mutate bit by bit (of those recorded).
    pub mutate: usize,
    /// Spoofed initiations in the flood.
    pub flood: usize,
    /// Seed of everything random.
    pub seed: u64,
}

impl AttackConfig {
    /// The attack used by the tests and the report.
    pub fn new(accelerate: bool) -> AttackConfig {
        AttackConfig {
            spec: "frag(1400):window(16):checksum:seal".into(),
            accelerate,
            clients: 4,
            mutate: 24,
            flood: 4000,
            seed: 7,
        }
    }
}

/// What the attack did.
#[derive(Clone, Debug, Default)]
pub struct AttackReport {
    /// Sessions established before the attack.
    pub sessions: usize,
    /// Sessions that ended or stopped delivering.
    pub sessions_lost: usize,
    /// Datagrams the attacker sent.
    pub injected: u64,
    /// The server's drops by reason.
    pub server_drops: Vec<(&'static str, u64)>,
    /// Drops at the clients, all reasons.
    pub client_drops: u64,
    /// Cookie replies the server sent.
    pub cookie_replies: u64,
    /// Whether the client that connected during the flood got its session.
    pub newcomer_established: bool,
    /// Messages exchanged after the attack, and how many were delivered.
    pub after: (usize, usize),
}

fn addr(net: u8, host: u8, port: u16) -> SocketAddr {
    SocketAddr::from(([10, 0, net, host], port))
}

fn endpoint(
    key: &StaticKey,
    allowed: Vec<phyllo::session::PublicKey>,
    cfg: &AttackConfig,
    seed: u64,
) -> Result<SessionEndpoint, AttackError> {
    let mut s = [0u8; 32];
    s[..8].copy_from_slice(&seed.to_le_bytes());
    SessionEndpoint::builder(key.clone())
        .allow_all(allowed)
        .stack(&cfg.spec)
        .config(SessionConfig {
            accelerate: cfg.accelerate,
            epoch_ns: Some(1_700_000_000_000_000_000),
            ..SessionConfig::default()
        })
        .seed(s)
        .build()
        .map_err(AttackError::from)
}

/// The attack could not be set up.
#[derive(Debug, thiserror::Error)]
pub enum AttackError {
    /// A key could not be made.
    #[error(transparent)]
    Handshake(#[from] phyllo::session::HandshakeError),
    /// An endpoint could not be built (the configured stack).
    #[error(transparent)]
    Endpoint(#[from] phyllo::endpoint::EndpointBuildError),
}

/// Run the attack.
pub fn run(cfg: &AttackConfig) -> Result<AttackReport, AttackError> {
    let mut rng = ChaCha8Rng::seed_from_u64(cfg.seed);
    let server_key = StaticKey::generate()?;
    let keys: Vec<StaticKey> = (0..=cfg.clients)
        .map(|_| StaticKey::generate())
        .collect::<Result<_, _>>()?;
    let stranger = StaticKey::generate()?;
    let allowed: Vec<_> = keys.iter().map(|k| k.public()).collect();
    let mut net: SessionNet = SessionNet::new(Faults::none(Duration::from_micros(200)), cfg.seed);
    let s_addr = addr(0, 1, 443);
    let server = net.add(s_addr, endpoint(&server_key, allowed, cfg, cfg.seed)?);
    let mut clients = Vec::new();
    for (i, k) in keys.iter().take(cfg.clients).enumerate() {
        let a = addr(1, i as u8 + 1, 5000);
        let n = net.add(a, endpoint(k, vec![], cfg, cfg.seed + 1 + i as u64)?);
        clients.push((n, a));
    }
    net.wire = Some(Vec::new());
    let spk = server_key.public();
    // An earlier session of client 0, ended by a new one: its datagrams are from another
    // session.
    exchange(&mut net, server, &clients, spk, 3, "old");
    let now = net.now;
    let (n0, _) = clients[0];
    let p0 = net.nodes[n0].ep.peers().next().unwrap_or(PeerId(0));
    net.nodes[n0].ep.close(now, p0);
    let _ = net.nodes[n0].ep.connect(now, spk, s_addr);
    exchange(&mut net, server, &clients, spk, 5, "rec");
    let settled = net.now + Duration::from_secs(2);
    net.run_until(settled);
    let recorded = net.wire.take().unwrap_or_default();
    let ended_before: usize = count_ended(&net, server, &clients);
    let sessions = net.nodes[server].ep.session_count();

    let mut injected = 0u64;
    let mut inject = |net: &mut SessionNet, from: SocketAddr, to: SocketAddr, d: &[u8]| {
        net.inject(from, to, d);
        injected += 1;
    };
    let spoof = addr(9, 9, 9);
    // 1. Truncations and single-bit mutations.
    let step = (recorded.len() / cfg.mutate.max(1)).max(1);
    for w in recorded.iter().step_by(step).take(cfg.mutate) {
        for cut in 0..w.data.len() {
            inject(&mut net, w.from, w.to, &w.data[..cut]);
        }
        for bit in 0..w.data.len() * 8 {
            let mut d = w.data.clone();
            d[bit / 8] ^= 1 << (bit % 8);
            let from = if bit % 2 == 0 { w.from } else { spoof };
            inject(&mut net, from, w.to, &d);
        }
        net.run_until(net.now + Duration::from_millis(5));
    }
    // 2. Replays, from the genuine source and a spoofed one.
    for w in &recorded {
        inject(&mut net, w.from, w.to, &w.data);
        inject(&mut net, spoof, w.to, &w.data);
    }
    net.run_until(net.now + Duration::from_millis(50));
    // 3. Forged identifications under valid cookies and indices.
    if cfg.accelerate {
        for w in recorded.iter().filter(|w| w.data.first() == Some(&DATA)) {
            let body = &w.data[DATA_HEADER..];
            let Ok(mut pre) = Preamble::read(body) else {
                continue;
            };
            if pre.conn_id_present {
                continue;
            }
            pre.conn_id_present = true;
            let mut d = w.data[..DATA_HEADER].to_vec();
            d.extend_from_slice(&pre.to_bytes());
            let ident: [u8; 8] = rng.random();
            d.extend_from_slice(&ident);
            d.extend_from_slice(&body[PREAMBLE_LEN..]);
            inject(&mut net, w.from, w.to, &d);
        }
        net.run_until(net.now + Duration::from_millis(50));
    }
    // 4. The flood, with a newcomer connecting in the middle of it.
    let genuine_init = recorded
        .iter()
        .find(|w| w.data.first() == Some(&1) && w.to == s_addr)
        .map(|w| w.data.clone())
        .unwrap_or_default();
    let mac = ResponderMacKeys::new(&spk.0);
    let newcomer_addr = addr(2, 1, 6000);
    let newcomer = net.add(
        newcomer_addr,
        endpoint(&keys[cfg.clients], vec![], cfg, cfg.seed + 100)?,
    );
    let flood_start = net.now;
    for i in 0..cfg.flood {
        let from = addr(100 + (i % 100) as u8, rng.random(), rng.random());
        let d = match i % 4 {
            0 | 1 => {
                let mut junk = vec![0u8; genuine_init.len().saturating_sub(32).max(5)];
                rng.fill(&mut junk[..]);
                junk[0] = 1;
                mac.append_macs(&mut junk, None);
                junk
            }
            2 => {
                let ts = 1_800_000_000_000_000_000 + i as u128;
                let (_, mut m) = Initiation::start(&stranger, spk, rng.random(), ts)?;
                mac.append_macs(&mut m, None);
                m
            }
            _ => genuine_init.clone(),
        };
        inject(&mut net, from, s_addr, &d);
        if i == cfg.flood / 4 {
            let now = net.now;
            net.nodes[newcomer].ep.connect(now, spk, s_addr);
        }
        // 4000 per second of virtual time.
        net.run_until(flood_start + Duration::from_micros(250 * (i as u64 + 1)));
    }
    net.run_until(net.now + Duration::from_secs(2));
    let newcomer_established = net.nodes[newcomer]
        .events
        .iter()
        .any(|(_, e)| matches!(e, Event::Established { .. }));

    // Afterwards: every session still delivers, both ways.
    let before: Vec<usize> = clients
        .iter()
        .map(|&(n, _)| net.nodes[n].inbox.len())
        .collect();
    let server_before = net.nodes[server].inbox.len();
    exchange(&mut net, server, &clients, spk, 10, "after");
    net.run_until(net.now + Duration::from_secs(2));
    let mut delivered = net.nodes[server].inbox.len() - server_before;
    let mut lost_by_delivery = 0;
    for (c, &(n, _)) in clients.iter().enumerate() {
        let got = net.nodes[n].inbox.len() - before[c];
        delivered += got;
        if got < 10 {
            lost_by_delivery += 1;
        }
    }
    let ended = count_ended(&net, server, &clients) - ended_before;
    let s = net.nodes[server].ep.stats().clone();
    Ok(AttackReport {
        sessions,
        sessions_lost: ended.max(lost_by_delivery),
        injected,
        server_drops: Discard::ALL
            .iter()
            .map(|&d| (d.name(), s.dropped(d)))
            .filter(|&(_, n)| n > 0)
            .collect(),
        client_drops: clients
            .iter()
            .map(|&(n, _)| net.nodes[n].ep.stats().total_drops())
            .sum(),
        cookie_replies: s.cookie_replies,
        newcomer_established,
        after: (clients.len() * 20, delivered),
    })
}

/// Sessions ended at the server or the clients, for any reason but a client's own close, as
/// reported by their events (the attack is judged by the difference before and after it).
fn count_ended(net: &SessionNet, server: usize, clients: &[(usize, SocketAddr)]) -> usize {
    let ended = |n: usize| {
        net.nodes[n]
            .events
            .iter()
            .filter(|(_, e)| {
                matches!(e, Event::Ended { reason, .. }
                    if !matches!(reason, phyllo::EndReason::Closed))
            })
            .count()
    };
    ended(server) + clients.iter().map(|&(n, _)| ended(n)).sum::<usize>()
}

/// Every client connects (if it has no session) and sends `count` messages to the server,
/// which answers each; runs until all were delivered or two seconds pass.
fn exchange(
    net: &mut SessionNet,
    server: usize,
    clients: &[(usize, SocketAddr)],
    spk: phyllo::session::PublicKey,
    count: usize,
    tag: &str,
) {
    let s_addr = net.nodes[server].addr;
    for &(n, _) in clients {
        let now = net.now;
        let p = net.nodes[n].ep.connect(now, spk, s_addr);
        for i in 0..count {
            let _ = net.nodes[n]
                .ep
                .send(now, p, format!("{tag} {i}").as_bytes());
        }
    }
    let want = net.nodes[server].inbox.len() + clients.len() * count;
    let limit = net.now + Duration::from_secs(2);
    let mut answered = net.nodes[server].inbox.len();
    while net.now <= limit {
        // The server echoes what it received.
        let inbox = &net.nodes[server].inbox;
        let new: Vec<(PeerId, Vec<u8>)> = inbox[answered..]
            .iter()
            .map(|(_, p, m)| (*p, m.clone()))
            .collect();
        answered = inbox.len();
        let now = net.now;
        for (p, m) in new {
            let _ = net.nodes[server].ep.send(now, p, &m);
        }
        if answered >= want {
            break;
        }
        if !net.step() {
            break;
        }
    }
}
