//! Traps a careful library user must not fall into, through the session endpoint's documented
//! calls only, each layered and accelerated: rekeys and restarts that strand no message
//! (every accepted message delivered or handed back within `SessionConfig::delivery_bound`),
//! dead-peer detection that sees messages waiting for a rekey, a restarted client on the
//! default configuration, and an on-path copy that cannot steal a peer's address.

use phyllo::endpoint::{Discard, Event, SessionConfig, SessionEndpoint, SessionSendError};
use phyllo::session::{PublicKey, StaticKey};
use phyllo::testing::memlink::Faults;
use phyllo::testing::net::SessionNet;
use phyllo::Time;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use std::collections::HashMap;
use std::net::SocketAddr;
use std::time::{Duration, Instant};

const SPEC: &str = "frag(1400):window(16):checksum:seal";
const EPOCH: u128 = 1_700_000_000_000_000_000;

fn addr(host: u8) -> SocketAddr {
    SocketAddr::from(([10, 0, 0, host], 4000))
}

fn endpoint(
    key: &StaticKey,
    allowed: &[PublicKey],
    cfg: SessionConfig,
    seed: u8,
) -> SessionEndpoint {
    SessionEndpoint::builder(key.clone())
        .allow_all(allowed.iter().copied())
        .stack(SPEC)
        .config(cfg)
        .seed([seed; 32])
        .build()
        .unwrap()
}

/// A server (node `server`, at `addr(1)`) that allows a client (node `client`, `addr(2)`) on
/// one simulated network, both on `cfg`.
struct Two {
    net: SessionNet,
    server: usize,
    client: usize,
    ck: StaticKey,
    sk: StaticKey,
}

fn two(cfg: &SessionConfig, faults: Faults, seed: u64) -> Two {
    let (ck, sk) = (
        StaticKey::generate().unwrap(),
        StaticKey::generate().unwrap(),
    );
    let mut net: SessionNet = SessionNet::new(faults, seed);
    let server = net.add(addr(1), endpoint(&sk, &[ck.public()], cfg.clone(), 1));
    let client = net.add(addr(2), endpoint(&ck, &[], cfg.clone(), 2));
    Two {
        net,
        server,
        client,
        ck,
        sk,
    }
}

/// A simulated configuration: the clock is virtual, so the epoch is given.
fn sim(accel: bool, cfg: SessionConfig) -> SessionConfig {
    SessionConfig {
        accelerate: accel,
        epoch_ns: Some(EPOCH),
        ..cfg
    }
}

fn text(m: &[u8]) -> String {
    String::from_utf8_lossy(m).into_owned()
}

/// Messages each node handed back, by text, with the instant.
fn handed_back(net: &SessionNet, node: usize) -> HashMap<String, Time> {
    let mut out = HashMap::new();
    for (t, e) in &net.nodes[node].events {
        if let Event::Ended { unconfirmed, .. } = e {
            for m in unconfirmed {
                out.entry(text(m)).or_insert(*t);
            }
        }
    }
    out
}

fn delivered(net: &SessionNet, node: usize) -> HashMap<String, Time> {
    let mut out = HashMap::new();
    for (t, _, m) in &net.nodes[node].inbox {
        out.entry(text(m)).or_insert(*t);
    }
    out
}

/// One side of a run: the messages `send` accepted, with the instant.
#[derive(Default)]
struct Sent {
    accepted: Vec<(String, Time)>,
}

/// The reliability contract, checked on a run's record up to now: no message `from`
/// accepted waited through a stretch longer than `bound` in which none of `from`'s messages
/// was delivered at `to` or handed back at `from` (a queue may be long, but it never stands
/// still), and every message older than `bound` with no progress since is resolved. Returns
/// what breaks it.
fn contract(net: &SessionNet, sent: &Sent, from: usize, to: usize, bound: Duration) -> Vec<String> {
    let got = delivered(net, to);
    let back = handed_back(net, from);
    let ours: std::collections::HashSet<&str> =
        sent.accepted.iter().map(|(m, _)| m.as_str()).collect();
    let mut progress: Vec<Time> = got
        .iter()
        .chain(back.iter())
        .filter(|(m, _)| ours.contains(m.as_str()))
        .map(|(_, t)| *t)
        .collect();
    progress.sort();
    let mut broken = Vec::new();
    for (m, at) in &sent.accepted {
        // Resolved when delivered or handed back; still waiting at the end of the run
        // otherwise, which is fine while progress is recent.
        let done = got.get(m).or(back.get(m)).copied();
        let until = done.unwrap_or(net.now);
        let mut last = *at;
        let first = progress.partition_point(|t| *t < *at);
        let mut stretch = Duration::ZERO;
        for t in progress[first..].iter().take_while(|t| **t <= until) {
            stretch = stretch.max(t.since(last));
            last = *t;
        }
        stretch = stretch.max(until.since(last));
        if stretch > bound {
            let state = if done.is_some() {
                "resolved"
            } else {
                "unresolved"
            };
            broken.push(format!(
                "{m} (sent {at:?}, {state}) waited {stretch:?} without progress"
            ));
        }
    }
    broken
}

/// Rekey limits as low as 16/32, streams in both directions stopping at random times over a
/// lossy path, and in some runs a client restarted mid-stream (a new process, the same
/// configuration): every accepted message is delivered or handed back within the bound after
/// the streams stop.
#[test]
fn low_rekey_limits_and_restarts_strand_no_message() {
    let mut runs = 0;
    let mut handed = 0;
    let mut sessions = 0;
    for seed in 0..24u64 {
        for accel in [false, true] {
            let mut rng = ChaCha8Rng::seed_from_u64(seed);
            let faults = Faults {
                loss: rng.random_range(0.0..0.25),
                duplicate: rng.random_range(0.0..0.05),
                reorder: rng.random_range(0.0..0.2),
                corrupt: rng.random_range(0.0..0.02),
                delay: Duration::from_millis(rng.random_range(1..20)),
                reorder_delay: Duration::from_millis(5),
            };
            let cfg = sim(
                accel,
                SessionConfig {
                    rekey_after: 16,
                    reject_after: 32,
                    ..SessionConfig::default()
                },
            );
            let bound = cfg.delivery_bound();
            let Two {
                mut net,
                server,
                client,
                ck,
                sk,
            } = two(&cfg, faults, seed);
            let stop_c = Time(rng.random_range(100_000_000..1_500_000_000));
            let stop_s = Time(rng.random_range(100_000_000..1_500_000_000));
            let restart = (seed % 3 == 0).then(|| Time(rng.random_range(50_000_000..stop_c.0)));
            let (mut sc, mut ss) = (Sent::default(), Sent::default());
            // The restarted process's own messages, checked like the first's; the first's
            // are gone with it (an application that crashes loses what it held).
            let mut sc2 = Sent::default();
            let mut restarted = false;
            let mut cp = net.nodes[client]
                .ep
                .connect(Time::ZERO, sk.public(), addr(1));
            let (mut ci, mut si) = (0, 0);
            let mut next_c = Time::ZERO;
            let mut next_s = Time::ZERO;
            // Long enough for every queue to drain (the low limits make many handshakes).
            let end = stop_c.max(stop_s)
                + Duration::from_secs(
                    std::env::var("TRAPS_TAIL")
                        .ok()
                        .and_then(|v| v.parse().ok())
                        .unwrap_or(60),
                );
            while net.now < end {
                let now = net.now;
                if let Some(r) = restart {
                    if !restarted && now >= r {
                        restarted = true;
                        net.replace(client, endpoint(&ck, &[], cfg.clone(), 3));
                        cp = net.nodes[client].ep.connect(now, sk.public(), addr(1));
                    }
                }
                if now < stop_c && now >= next_c {
                    let m = format!("c{ci:05}");
                    if net.nodes[client].ep.send(now, cp, m.as_bytes()).is_ok() {
                        ci += 1;
                        let side = if restarted { &mut sc2 } else { &mut sc };
                        side.accepted.push((m, now));
                    }
                    next_c = now + Duration::from_micros(rng.random_range(200..3000));
                }
                if now < stop_s && now >= next_s {
                    if let Some(sp) = net.nodes[server].ep.peers().next() {
                        let m = format!("s{si:05}");
                        match net.nodes[server].ep.send(now, sp, m.as_bytes()) {
                            Ok(()) => {
                                si += 1;
                                ss.accepted.push((m, now));
                            }
                            Err(SessionSendError::NoSession | SessionSendError::WouldBlock) => {}
                            Err(e) => panic!("{e}"),
                        }
                    }
                    next_s = now + Duration::from_micros(rng.random_range(200..3000));
                }
                // Run the network to the next send (or restart), or to the end.
                let soon = now + Duration::from_nanos(1);
                let mut until = end;
                if now < stop_c {
                    until = until.min(next_c.max(soon));
                }
                if now < stop_s {
                    until = until.min(next_s.max(soon));
                }
                if let Some(r) = restart.filter(|_| !restarted) {
                    until = until.min(r.max(soon));
                }
                net.run_until(until);
            }
            let why = format!("seed {seed} accel {accel} restart {restart:?}");
            let first_client_gone = restart.is_some();
            if !first_client_gone {
                let miss = contract(&net, &sc, client, server, bound);
                assert!(miss.is_empty(), "{why}: client's stranded: {miss:?}");
            }
            let miss = contract(&net, &sc2, client, server, bound);
            assert!(
                miss.is_empty(),
                "{why}: restarted client's stranded: {miss:?}"
            );
            // The server's messages to a client that restarted are handed back when the new
            // process's handshake supersedes the session (or delivered before it crashed).
            let miss = if first_client_gone {
                // What the first process received went with it: delivered there counts.
                let mut got = delivered(&net, client);
                got.extend(handed_back(&net, server));
                ss.accepted
                    .iter()
                    .filter(|(m, _)| !got.contains_key(m))
                    .map(|(m, _)| m.clone())
                    .collect::<Vec<_>>()
            } else {
                contract(&net, &ss, server, client, bound)
            };
            assert!(miss.is_empty(), "{why}: server's stranded: {miss:?}");
            assert!(
                sc.accepted.len() + sc2.accepted.len() > 0,
                "{why}: nothing sent"
            );
            runs += 1;
            handed += handed_back(&net, client).len() + handed_back(&net, server).len();
            sessions += net.nodes[client]
                .events
                .iter()
                .filter(|(_, e)| matches!(e, Event::Established { .. }))
                .count();
        }
    }
    // Many rekeys happened, so the limits were exercised.
    assert!(sessions > runs * 5, "{sessions} sessions over {runs} runs");
    eprintln!("{runs} runs, {sessions} client sessions, {handed} messages handed back");
}

/// The streaming client of the issue: limits 64/128, a second of messages, then nothing. The
/// session reaches its key-usage limit with messages waiting: the endpoint starts the
/// handshake they wait for itself, so all are delivered without the application sending
/// again.
#[test]
fn a_stream_that_stops_at_the_key_limit_is_delivered_without_another_send() {
    for accel in [false, true] {
        let cfg = sim(
            accel,
            SessionConfig {
                rekey_after: 64,
                reject_after: 128,
                ..SessionConfig::default()
            },
        );
        let Two {
            mut net,
            server,
            client,
            ck: _,
            sk,
        } = two(&cfg, Faults::none(Duration::from_millis(5)), 7);
        let p = net.nodes[client]
            .ep
            .connect(Time::ZERO, sk.public(), addr(1));
        let mut sent = 0;
        let mut log = Sent::default();
        while net.now < Time(1_000_000_000) {
            let now = net.now;
            // As fast as the endpoint takes them.
            while net.nodes[client]
                .ep
                .send(now, p, format!("m{sent:05}").as_bytes())
                .is_ok()
            {
                log.accepted.push((format!("m{sent:05}"), now));
                sent += 1;
                if sent % 8 == 0 {
                    break;
                }
            }
            net.run_until(now + Duration::from_micros(500));
        }
        net.run_until(net.now + Duration::from_secs(120));
        let broken = contract(&net, &log, client, server, cfg.delivery_bound());
        assert!(
            broken.is_empty(),
            "accel {accel}: {:?}",
            &broken[..broken.len().min(5)]
        );
        let got = delivered(&net, server);
        assert_eq!(
            got.len(),
            sent,
            "accel {accel}: all delivered, none handed back"
        );
    }
}

/// Messages waiting in the outbox for a rekey count as outstanding: when the server restarts
/// on a lossy path while the client's messages wait for a new session, the client finds the
/// session dead after `dead_after` and handshakes again without backing off, so everything is
/// delivered or handed back well within the bound.
#[test]
fn messages_waiting_for_a_rekey_count_for_dead_peer_detection() {
    let mut worst = Duration::ZERO;
    for seed in 0..16u64 {
        for accel in [false, true] {
            let cfg = sim(
                accel,
                SessionConfig {
                    rekey_after: 32,
                    reject_after: 64,
                    ..SessionConfig::default()
                },
            );
            let faults = Faults {
                loss: 0.2,
                ..Faults::none(Duration::from_millis(10))
            };
            let Two {
                mut net,
                server,
                client,
                ck,
                sk,
            } = two(&cfg, faults, seed);
            let p = net.nodes[client]
                .ep
                .connect(Time::ZERO, sk.public(), addr(1));
            let mut log = Sent::default();
            let mut restart_at = None;
            let mut i = 0;
            while net.now < Time(20_000_000_000) {
                let now = net.now;
                if net.nodes[client]
                    .ep
                    .send(now, p, format!("m{i:05}").as_bytes())
                    .is_ok()
                {
                    log.accepted.push((format!("m{i:05}"), now));
                    i += 1;
                }
                // The server restarts while a rekey is under way (a handshake begun and not
                // finished), and the client sends a few more, which wait for it.
                let st = net.nodes[client].ep.peer_stats(p).unwrap();
                if st.sessions >= 2 && st.initiations > st.sessions {
                    restart_at = Some(now);
                    net.replace(server, endpoint(&sk, &[ck.public()], cfg.clone(), 9));
                    for k in 0..5 {
                        let m = format!("w{k}");
                        net.nodes[client].ep.send(now, p, m.as_bytes()).unwrap();
                        log.accepted.push((m, now));
                    }
                    break;
                }
                net.run_until(now + Duration::from_millis(2));
            }
            let restart = restart_at.unwrap_or_else(|| {
                panic!(
                    "seed {seed} accel {accel}: no rekey seen: {:?}",
                    net.nodes[client].ep.peer_stats(p)
                )
            });
            // The application stops sending; the path stays lossy.
            net.run_until(restart + Duration::from_secs(60));
            let broken = contract(&net, &log, client, server, cfg.delivery_bound());
            assert!(
                broken.is_empty(),
                "seed {seed} accel {accel}: {:?}",
                &broken[..1]
            );
            // Recovery: the first message after the restart that is delivered to the new
            // process or handed back.
            let mut after: Vec<Time> = delivered(&net, server)
                .into_values()
                .chain(handed_back(&net, client).into_values())
                .filter(|t| *t > restart)
                .collect();
            after.sort();
            let took = after[0].since(restart);
            worst = worst.max(took);
            // Found dead after `dead_after`, then handshakes one timeout apart at 20 % loss
            // (the bound allows `handshake_attempts` of them).
            assert!(
                took <= cfg.dead_after + cfg.handshake_timeout * 6,
                "seed {seed} accel {accel}: {took:?}"
            );
        }
    }
    eprintln!("slowest recovery after a server restart: {worst:?}");
}

/// Two endpoints in one test, each with a clock of its own that starts at zero when its
/// "process" starts, as a driver's does; datagrams handed straight across.
struct Proc {
    ep: SessionEndpoint,
    start: Instant,
    at: SocketAddr,
}

impl Proc {
    fn now(&self) -> Time {
        Time(self.start.elapsed().as_nanos() as u64)
    }
}

/// Hand `x`'s due timers and datagrams to `y`; whether anything moved.
fn hand(x: &mut Proc, y: &mut Proc, buf: &mut Vec<u8>) -> bool {
    let now = x.now();
    if x.ep.poll_timeout().is_some_and(|t| t <= now) {
        x.ep.handle_timeout(now);
    }
    let mut moved = false;
    while let Some(to) = x.ep.poll_transmit(buf) {
        assert_eq!(to, y.at);
        let now = y.now();
        y.ep.handle_datagram(now, x.at, buf);
        moved = true;
    }
    moved
}

/// Exchange datagrams between `a` and `b` until neither has anything to send.
fn pump(a: &mut Proc, b: &mut Proc) {
    let mut buf = Vec::new();
    for _ in 0..100 {
        let ab = hand(a, b, &mut buf);
        let ba = hand(b, a, &mut buf);
        if !ab && !ba {
            return;
        }
    }
}

/// `SessionConfig::default()` on real clocks: a client process whose handshake happened
/// later in its life than its successor's first one is accepted at once — the default
/// epoch is the wall clock, not zero.
#[test]
fn a_restarted_library_client_on_the_default_config_reconnects_at_once() {
    for accel in [false, true] {
        let cfg = SessionConfig {
            accelerate: accel,
            ..SessionConfig::default()
        };
        let (ck, sk) = (
            StaticKey::generate().unwrap(),
            StaticKey::generate().unwrap(),
        );
        let mut server = Proc {
            ep: endpoint(&sk, &[ck.public()], cfg.clone(), 1),
            start: Instant::now(),
            at: addr(1),
        };
        let mut first = Proc {
            ep: endpoint(&ck, &[], cfg.clone(), 2),
            start: Instant::now(),
            at: addr(2),
        };
        // The first process lives a while before it connects.
        std::thread::sleep(Duration::from_millis(300));
        let now = first.now();
        let p = first.ep.connect(now, sk.public(), server.at);
        first.ep.send(now, p, b"from the first").unwrap();
        pump(&mut first, &mut server);
        assert!(first.ep.is_established(p), "accel {accel}");
        // It crashes; the next process starts at once, its clock at zero.
        let mut second = Proc {
            ep: endpoint(&ck, &[], cfg.clone(), 3),
            start: Instant::now(),
            at: addr(2),
        };
        let now = second.now();
        let p = second.ep.connect(now, sk.public(), server.at);
        second.ep.send(now, p, b"from the second").unwrap();
        pump(&mut second, &mut server);
        assert_eq!(
            server.ep.stats().dropped(Discard::Replay),
            0,
            "accel {accel}"
        );
        assert!(
            second.ep.is_established(p),
            "accel {accel}: not reconnected at once"
        );
        let sp = server.ep.peers().next().unwrap();
        let mut got = Vec::new();
        while let Some(m) = server.ep.poll_delivery_with(sp, text) {
            got.push(m);
        }
        assert_eq!(got, ["from the first", "from the second"], "accel {accel}");
    }
}

/// An on-path attacker copies one fresh client datagram and sends it from another address
/// ahead of the genuine one. The copy authenticates and moves the server's idea of the
/// client's address — but only until the client's next datagram (a retransmission, whose
/// nonce is new though the window has its message), so the session stays at the genuine
/// address, nothing is handed back, and the server's replies reach the client.
#[test]
fn an_on_path_copy_cannot_steal_the_peers_address() {
    for accel in [false, true] {
        let cfg = sim(accel, SessionConfig::default());
        let (ck, sk) = (
            StaticKey::generate().unwrap(),
            StaticKey::generate().unwrap(),
        );
        let link = Faults::none(Duration::from_millis(5));
        let mut net: SessionNet = SessionNet::new(link.clone(), 11);
        let server = net.add(addr(1), endpoint(&sk, &[ck.public()], cfg.clone(), 1));
        let client = net.add(addr(2), endpoint(&ck, &[], cfg.clone(), 2));
        let thief = addr(66);
        let p = net.nodes[client]
            .ep
            .connect(Time::ZERO, sk.public(), addr(1));
        net.nodes[client].ep.send(Time::ZERO, p, b"hello").unwrap();
        net.run_until(Time(100_000_000));
        assert_eq!(net.nodes[server].inbox.len(), 1);
        // The next data datagram the client sends is copied on the way.
        net.wire = Some(Vec::new());
        let now = net.now;
        net.nodes[client].ep.send(now, p, b"copied").unwrap();
        while !net.wire.as_ref().unwrap().iter().any(|w| w.from == addr(2)) {
            assert!(net.step());
        }
        let w = net.wire.take().unwrap();
        let copy = w.iter().find(|w| w.from == addr(2)).unwrap().data.clone();
        // The copy travels a shorter way: it arrives first.
        net.set_faults(Faults::none(Duration::ZERO));
        net.inject(thief, addr(1), &copy);
        net.set_faults(link.clone());
        net.step();
        let sp = net.nodes[server].inbox[0].1;
        assert_eq!(
            net.nodes[server].ep.peer_addr(sp),
            Some(thief),
            "the copy moved it"
        );
        net.run_until(net.now + Duration::from_secs(10));
        assert_eq!(
            net.nodes[server].ep.peer_addr(sp),
            Some(addr(2)),
            "accel {accel}: the genuine client won its address back"
        );
        let inbox: Vec<String> = net.nodes[server].inbox.iter().map(|x| text(&x.2)).collect();
        assert_eq!(inbox, ["hello", "copied"], "accel {accel}");
        let now = net.now;
        net.nodes[server].ep.send(now, sp, b"reply").unwrap();
        net.run_until(now + Duration::from_secs(1));
        let replies: Vec<String> = net.nodes[client].inbox.iter().map(|x| text(&x.2)).collect();
        assert_eq!(replies, ["reply"], "accel {accel}");
        for n in [client, server] {
            let ended: Vec<&Event> = net.nodes[n]
                .events
                .iter()
                .map(|(_, e)| e)
                .filter(|e| matches!(e, Event::Ended { .. }))
                .collect();
            assert!(ended.is_empty(), "accel {accel}: {ended:?}");
        }
    }
}
