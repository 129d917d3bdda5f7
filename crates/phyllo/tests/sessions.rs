//! Session endpoints through their documented calls: the handshake in one round trip, restarts
//! detected within the documented bounds, no (key, nonce) reuse across a thousand sessions,
//! the reliability contract under heavy faults, each layered and accelerated (the attack on a live
//! endpoint is the lab's, `lab/tests/attack.rs`).

use phyllo::endpoint::{EndReason, Event, PeerId, SessionConfig, SessionEndpoint, DATA};
use phyllo::session::{PublicKey, StaticKey};
use phyllo::testing::memlink::Faults;
use phyllo::testing::net::SessionNet;
use phyllo::Time;
use std::collections::HashSet;
use std::net::SocketAddr;
use std::time::Duration;

const SPEC: &str = "frag(1400):window(16):checksum:seal";
const EPOCH: u128 = 1_700_000_000_000_000_000;

fn addr(host: u8) -> SocketAddr {
    SocketAddr::from(([10, 0, 0, host], 4000))
}

fn endpoint(key: &StaticKey, allowed: &[PublicKey], accel: bool, seed: u8) -> SessionEndpoint {
    endpoint_with(key, allowed, accel, seed, SessionConfig::default())
}

fn endpoint_with(
    key: &StaticKey,
    allowed: &[PublicKey],
    accel: bool,
    seed: u8,
    cfg: SessionConfig,
) -> SessionEndpoint {
    SessionEndpoint::builder(key.clone())
        .allow_all(allowed.iter().copied())
        .stack(SPEC)
        .config(SessionConfig {
            accelerate: accel,
            epoch_ns: Some(EPOCH),
            ..cfg
        })
        .seed([seed; 32])
        .build()
        .unwrap()
}

struct World {
    net: SessionNet,
    client: usize,
    server: usize,
    ck: StaticKey,
    sk: StaticKey,
    accel: bool,
}

fn world(accel: bool, faults: Faults, seed: u64) -> World {
    world_with(accel, faults, seed, SessionConfig::default())
}

fn world_with(accel: bool, faults: Faults, seed: u64, cfg: SessionConfig) -> World {
    let ck = StaticKey::generate().unwrap();
    let sk = StaticKey::generate().unwrap();
    let mut net = SessionNet::new(faults, seed);
    let server = net.add(
        addr(1),
        endpoint_with(&sk, &[ck.public()], accel, 1, cfg.clone()),
    );
    let client = net.add(addr(2), endpoint_with(&ck, &[], accel, 2, cfg));
    World {
        net,
        client,
        server,
        ck,
        sk,
        accel,
    }
}

impl World {
    fn connect(&mut self) -> PeerId {
        let now = self.net.now;
        let pk = self.sk.public();
        self.net.nodes[self.client].ep.connect(now, pk, addr(1))
    }

    fn send(&mut self, node: usize, p: PeerId, m: &str) {
        let now = self.net.now;
        self.net.nodes[node].ep.send(now, p, m.as_bytes()).unwrap();
    }

    fn inbox(&self, node: usize) -> Vec<String> {
        self.net.nodes[node]
            .inbox
            .iter()
            .map(|(_, _, m)| String::from_utf8_lossy(m).into_owned())
            .collect()
    }

    fn ended(&self, node: usize) -> Vec<(Time, EndReason, Vec<String>)> {
        self.net.nodes[node]
            .events
            .iter()
            .filter_map(|(t, e)| match e {
                Event::Ended {
                    reason,
                    unconfirmed,
                    ..
                } => Some((
                    *t,
                    *reason,
                    unconfirmed
                        .iter()
                        .map(|m| String::from_utf8_lossy(m).into_owned())
                        .collect(),
                )),
                _ => None,
            })
            .collect()
    }

    fn established_at(&self, node: usize) -> Vec<Time> {
        self.net.nodes[node]
            .events
            .iter()
            .filter(|(_, e)| matches!(e, Event::Established { .. }))
            .map(|(t, _)| *t)
            .collect()
    }
}

#[test]
fn the_handshake_takes_one_round_trip_and_first_data_follows_it() {
    for accel in [false, true] {
        let mut w = world(accel, Faults::none(Duration::from_millis(1)), 1);
        let p = w.connect();
        w.send(w.client, p, "first");
        w.net.run_until(Time(50_000_000));
        assert_eq!(
            w.established_at(w.client),
            vec![Time(2_000_000)],
            "accel {accel}"
        );
        assert_eq!(w.inbox(w.server), vec!["first"]);
        let (at, _, _) = w.net.nodes[w.server].inbox[0];
        assert_eq!(
            at,
            Time(3_000_000),
            "delivered one and a half round trips in"
        );
        let rtts = w.net.nodes[w.client]
            .ep
            .peer_stats(p)
            .unwrap()
            .handshake_time
            .unwrap();
        assert_eq!(rtts, Duration::from_millis(2));
    }
}

#[test]
fn a_restarted_initiator_supersedes_its_session_and_unconfirmed_messages_come_back() {
    for accel in [false, true] {
        let mut w = world(accel, Faults::none(Duration::from_millis(1)), 2);
        let p = w.connect();
        for i in 0..20 {
            w.send(w.client, p, &format!("c{i}"));
        }
        w.net.run_until(Time(100_000_000));
        assert_eq!(w.inbox(w.server).len(), 20);
        let sp = w.net.nodes[w.server].inbox[0].1;
        // The client crashes; the server sends into the dead session.
        w.net.nodes[w.client].up = false;
        for i in 0..3 {
            w.send(w.server, sp, &format!("s{i}"));
        }
        w.net.run_until(Time(300_000_000));
        // A new process with the same key and address connects.
        let ck = w.ck.clone();
        w.net.replace(w.client, endpoint(&ck, &[], w.accel, 3));
        let restart = w.net.now;
        let p = w.connect();
        for i in 0..5 {
            w.send(w.client, p, &format!("n{i}"));
        }
        w.net.run_until(restart + Duration::from_secs(3));
        let ended = w.ended(w.server);
        assert_eq!(ended.len(), 1, "accel {accel}: {ended:?}");
        let (t, _, lost) = &ended[0];
        assert_eq!(lost, &["s0", "s1", "s2"], "accel {accel}");
        // At the new initiation's arrival: one way (1 ms) after the restart.
        assert!(
            *t <= restart + Duration::from_millis(1),
            "detected at {t:?}, restart {restart:?}"
        );
        assert_eq!(&w.inbox(w.server)[20..], ["n0", "n1", "n2", "n3", "n4"]);
        // And the server's new messages reach the new process.
        w.send(w.server, sp, "hello again");
        w.net.run_until(w.net.now + Duration::from_secs(1));
        assert_eq!(w.inbox(w.client), vec!["hello again"], "accel {accel}");
    }
}

#[test]
fn a_restarted_responder_is_detected_and_traffic_resumes() {
    for accel in [false, true] {
        let mut w = world(accel, Faults::none(Duration::from_millis(1)), 3);
        let p = w.connect();
        w.send(w.client, p, "before");
        w.net.run_until(Time(100_000_000));
        assert_eq!(w.inbox(w.server), vec!["before"]);
        // The server restarts: same key, same address, no memory of the session.
        let (sk, ck) = (w.sk.clone(), w.ck.public());
        w.net.replace(w.server, endpoint(&sk, &[ck], w.accel, 4));
        let restart = w.net.now;
        for i in 0..4 {
            w.send(w.client, p, &format!("lost{i}"));
        }
        w.net.run_until(restart + Duration::from_secs(10));
        let ended = w.ended(w.client);
        assert_eq!(ended.len(), 1, "accel {accel}: {ended:?}");
        let (t, reason, lost) = ended[0].clone();
        assert_eq!(reason, EndReason::PeerDead);
        assert_eq!(lost, ["lost0", "lost1", "lost2", "lost3"]);
        let cfg = SessionConfig::default();
        let bound = cfg.dead_after + cfg.handshake_timeout;
        assert!(t <= restart + bound, "detected after {:?}", t - restart);
        // The application sends them again: they arrive at the new process.
        for m in &lost {
            w.send(w.client, p, m);
        }
        w.net.run_until(w.net.now + Duration::from_secs(1));
        assert_eq!(
            w.inbox(w.server),
            ["before", "lost0", "lost1", "lost2", "lost3"]
        );
    }
}

#[test]
fn a_thousand_sessions_under_one_static_key_never_repeat_a_key_nonce_pair() {
    // Identical plaintexts at identical positions in every session: a repeated (key, nonce)
    // would make identical datagrams.
    for accel in [false, true] {
        let mut w = world(accel, Faults::none(Duration::from_micros(10)), 4);
        w.net.wire = Some(Vec::new());
        for _ in 0..1000 {
            let p = w.connect();
            w.send(w.client, p, "the same message");
            w.send(w.client, p, "and another");
            let want = w.net.nodes[w.server].inbox.len() + 2;
            let limit = w.net.now + Duration::from_secs(1);
            let server = w.server;
            assert!(w
                .net
                .run_while(limit, |n| n.nodes[server].inbox.len() >= want));
            let now = w.net.now;
            let sp = w.net.nodes[w.server].inbox.last().unwrap().1;
            w.net.nodes[w.server].ep.send(now, sp, b"reply").unwrap();
            w.net.run_until(now + Duration::from_millis(5));
            let now = w.net.now;
            w.net.nodes[w.client].ep.close(now, p);
        }
        assert_eq!(w.net.nodes[w.server].inbox.len(), 2000);
        assert_eq!(w.net.nodes[w.client].inbox.len(), 1000);
        let data: Vec<&[u8]> = w
            .net
            .wire
            .as_ref()
            .unwrap()
            .iter()
            .filter(|x| x.data.first() == Some(&DATA))
            .map(|x| &x.data[5..])
            .collect();
        let distinct: HashSet<&[u8]> = data.iter().copied().collect();
        assert!(
            data.len() >= 3000,
            "accel {accel}: {} datagrams",
            data.len()
        );
        assert_eq!(
            distinct.len(),
            data.len(),
            "accel {accel}: a datagram repeated"
        );
    }
}

/// The reliability contract over heavy seeded faults, then a healed link: every message is
/// delivered or handed back unconfirmed (and then sent again by the application); what a
/// session delivers arrives once and in order.
#[test]
fn the_reliability_contract_holds_under_heavy_faults() {
    let mut schedules = 0;
    let mut ends = 0;
    for seed in 0..12u64 {
        for accel in [false, true] {
            let loss = [0.05, 0.2, 0.35, 0.45][seed as usize % 4];
            let faults = Faults {
                loss,
                duplicate: 0.1,
                reorder: 0.2,
                corrupt: 0.05,
                delay: Duration::from_millis(2),
                reorder_delay: Duration::from_millis(10),
            };
            // Impatient sessions, so that the faults end some of them and the hand-back runs.
            let cfg = SessionConfig {
                dead_after: Duration::from_millis(60),
                handshake_timeout: Duration::from_millis(30),
                retire_after: Duration::from_millis(30),
                ..SessionConfig::default()
            };
            let mut w = world_with(accel, faults, seed, cfg);
            let p = w.connect();
            let total = 300;
            let mut next = 0;
            let mut resend: Vec<String> = Vec::new();
            let mut seen_events = 0;
            let mut returned: HashSet<String> = HashSet::new();
            let phase = Time(20_000_000_000);
            let limit = Time(120_000_000_000);
            while w.net.now < limit {
                if w.net.now >= phase {
                    w.net.set_faults(Faults::none(Duration::from_millis(2)));
                }
                let now = w.net.now;
                // The application: resend what came back, then new messages, as room allows.
                let ep = &mut w.net.nodes[w.client].ep;
                while let Some(m) = resend.first() {
                    if ep.send(now, p, m.as_bytes()).is_err() {
                        break;
                    }
                    resend.remove(0);
                }
                while resend.is_empty() && next < total && ep.can_send(p, 8) {
                    if ep.send(now, p, format!("m{next:04}").as_bytes()).is_err() {
                        break;
                    }
                    next += 1;
                }
                if !ep.is_established(p) && ep.peer_stats(p).is_some() {
                    let pk = w.sk.public();
                    let _ = ep.connect(now, pk, addr(1));
                }
                for (_, reason, lost) in w.ended(w.client)[seen_events..].to_vec() {
                    seen_events += 1;
                    let _ = reason;
                    returned.extend(lost.iter().cloned());
                    resend.extend(lost);
                }
                let got: HashSet<String> = w.inbox(w.server).into_iter().collect();
                if next == total
                    && resend.is_empty()
                    && (0..total).all(|i| got.contains(&format!("m{i:04}")))
                {
                    break;
                }
                if !w.net.step() {
                    w.net.run_until(w.net.now + Duration::from_millis(100));
                }
            }
            let inbox = w.inbox(w.server);
            let got: HashSet<&String> = inbox.iter().collect();
            for i in 0..total {
                assert!(
                    got.contains(&format!("m{i:04}")),
                    "seed {seed} accel {accel} loss {loss}: m{i:04} never delivered"
                );
            }
            // Once and in order, apart from messages handed back (which the application sent
            // again, so they may arrive twice).
            let plain: Vec<&String> = inbox.iter().filter(|m| !returned.contains(*m)).collect();
            assert!(
                plain.windows(2).all(|x| x[0] < x[1]),
                "seed {seed} accel {accel}: out of order or twice"
            );
            schedules += 1;
            ends += seen_events;
        }
    }
    assert_eq!(schedules, 24);
    // The faults were heavy enough to end sessions, so the hand-back was exercised.
    assert!(ends > 0, "no session ended");
    eprintln!("{ends} sessions ended over {schedules} schedules");
}

#[test]
fn a_dead_path_sees_retransmissions_back_off() {
    let mut w = world(true, Faults::none(Duration::from_millis(1)), 5);
    let p = w.connect();
    w.send(w.client, p, "x");
    w.net.run_until(Time(50_000_000));
    w.net.set_faults(Faults {
        loss: 1.0,
        ..Faults::none(Duration::from_millis(1))
    });
    w.send(w.client, p, "into the void");
    w.net.wire = Some(Vec::new());
    w.net.run_until(w.net.now + Duration::from_secs(120));
    let sent = w.net.wire.as_ref().unwrap().len();
    // Window backoff until the session is found dead, then handshakes backing off.
    assert!(sent <= 30, "{sent} datagrams in two minutes of silence");
    let ended = w.ended(w.client);
    assert!(
        ended
            .iter()
            .any(|(_, _, lost)| lost.contains(&"into the void".to_string())),
        "{ended:?}"
    );
}

#[test]
fn sessions_rekey_before_the_key_limit_without_losing_or_reordering_anything() {
    for accel in [false, true] {
        let cfg = SessionConfig {
            rekey_after: 40,
            reject_after: 80,
            ..SessionConfig::default()
        };
        let mut w = world_with(accel, Faults::none(Duration::from_millis(1)), 6, cfg);
        let p = w.connect();
        let total = 400;
        let mut next = 0;
        let mut answered = 0;
        let limit = Time(60_000_000_000);
        while w.inbox(w.server).len() < total && w.net.now < limit {
            let now = w.net.now;
            // At most 20 messages ahead of what the server has received.
            let got = w.net.nodes[w.server].inbox.len();
            let ep = &mut w.net.nodes[w.client].ep;
            while next < total
                && next < got + 20
                && ep.send(now, p, format!("m{next:04}").as_bytes()).is_ok()
            {
                next += 1;
            }
            // The server answers every tenth message, so both directions count.
            let got = w.net.nodes[w.server].inbox.len();
            while answered < got / 10 {
                answered += 1;
                let sp = w.net.nodes[w.server].inbox[0].1;
                w.net.nodes[w.server].ep.send(now, sp, b"ack").unwrap();
            }
            if !w.net.step() {
                break;
            }
        }
        let want: Vec<String> = (0..total).map(|i| format!("m{i:04}")).collect();
        assert_eq!(w.inbox(w.server), want, "accel {accel}");
        let (now, sp) = (w.net.now, w.net.nodes[w.server].inbox[0].1);
        while answered < total / 10 {
            answered += 1;
            w.net.nodes[w.server].ep.send(now, sp, b"ack").unwrap();
        }
        w.net.run_until(w.net.now + Duration::from_millis(100));
        assert_eq!(
            w.inbox(w.client).len(),
            total / 10,
            "the answers, accel {accel}"
        );
        let sessions = w.established_at(w.client).len();
        let s = w.net.nodes[w.client].ep.peer_stats(p).unwrap();
        // Rekeyed every 40 datagrams (out and in), give or take those in flight while the
        // next handshake ran: how many sessions that makes depends on how many datagrams
        // the messages took (the accelerator packs them, and replies carry the
        // acknowledgements).
        assert!(
            sessions >= 3,
            "accel {accel}: only {sessions} sessions ({s:?})"
        );
        assert!(
            s.datagrams_out + s.datagrams_in <= 60 * sessions as u64,
            "accel {accel}: {sessions} sessions for {s:?}"
        );
        assert!(w.ended(w.client).is_empty(), "{:?}", w.ended(w.client));
        assert!(w.ended(w.server).is_empty(), "{:?}", w.ended(w.server));
        // No session sent more datagrams than the limit allows.
        assert!(s.datagrams_out <= 80 * sessions as u64, "{s:?}");
    }
}

#[test]
fn under_load_one_flooding_address_is_rate_limited_before_any_mac_and_others_still_get_cookies() {
    let sk = StaticKey::generate().unwrap();
    let mut server = endpoint_with(
        &sk,
        &[],
        false,
        1,
        SessionConfig {
            handshakes_per_sec: 1,
            ..SessionConfig::default()
        },
    );
    // Initiations from strangers (valid mac1, keys the server does not allow).
    let mut inits = Vec::new();
    for seed in 0..8u8 {
        let mut c = endpoint(&StaticKey::generate().unwrap(), &[], false, 10 + seed);
        c.connect(Time(1), sk.public(), addr(1));
        let mut d = Vec::new();
        c.poll_transmit(&mut d).unwrap();
        inits.push(d);
    }
    let (flooder, other) = (addr(66), addr(77));
    let now = Time(2_000_000_000);
    let rate_limited =
        |s: &SessionEndpoint| s.stats().dropped(phyllo::endpoint::Discard::RateLimited);
    for i in 0..2000 {
        server.handle_datagram(now, flooder, &inits[i % inits.len()]);
    }
    let limited = rate_limited(&server);
    let replies = server.stats().cookie_replies;
    assert!(limited > 1900, "{limited} of 2000 rate-limited");
    assert!(replies <= 10, "{replies} cookie replies to one address");
    // Another address is still answered with a cookie (under load, no DH).
    server.handle_datagram(now, other, &inits[0]);
    assert_eq!(server.stats().cookie_replies, replies + 1);
    assert_eq!(rate_limited(&server), limited);
    // So is another socket on the flooding host (the limiter is per IP and port).
    let neighbour = SocketAddr::new(flooder.ip(), flooder.port() + 1);
    server.handle_datagram(now, neighbour, &inits[1]);
    assert_eq!(server.stats().cookie_replies, replies + 2);
    assert_eq!(rate_limited(&server), limited);
}

/// Two ends whose datagrams would not read each other's — the accelerator on one end only, or
/// another stack — get no session (the initiation fails authentication at the responder, a
/// counted drop), instead of a session that carries nothing; the same profile spelled with
/// other blanks is the same profile.
#[test]
fn ends_that_disagree_on_stack_or_accelerator_get_no_session() {
    let build = |key: &StaticKey, allowed: &[PublicKey], spec: &str, accel: bool, seed: u8| {
        SessionEndpoint::builder(key.clone())
            .allow_all(allowed.iter().copied())
            .stack(spec)
            .config(SessionConfig {
                accelerate: accel,
                epoch_ns: Some(EPOCH),
                ..SessionConfig::default()
            })
            .seed([seed; 32])
            .build()
            .unwrap()
    };
    let spaced = "frag(1400) : window(16) : checksum : seal";
    for (client_spec, client_accel, agree) in [
        (SPEC, false, false),
        ("frag(1400):window(32):checksum:seal", true, false),
        (spaced, true, true),
    ] {
        let (ck, sk) = (
            StaticKey::generate().unwrap(),
            StaticKey::generate().unwrap(),
        );
        let mut net = SessionNet::new(Faults::none(Duration::from_millis(1)), 7);
        let server = net.add(addr(1), build(&sk, &[ck.public()], SPEC, true, 1));
        let client = net.add(addr(2), build(&ck, &[], client_spec, client_accel, 2));
        let now = net.now;
        let p = net.nodes[client].ep.connect(now, sk.public(), addr(1));
        net.nodes[client].ep.send(now, p, b"hello").unwrap();
        net.run_until(Time(3_000_000_000));
        let delivered = net.nodes[server].inbox.len();
        let auth_drops = net.nodes[server]
            .ep
            .stats()
            .dropped(phyllo::endpoint::Discard::HandshakeAuth);
        let spec = client_spec;
        if agree {
            assert_eq!(delivered, 1, "{spec} accel {client_accel}");
            assert_eq!(auth_drops, 0);
        } else {
            assert_eq!(delivered, 0, "{spec} accel {client_accel}");
            assert!(!net.nodes[client].ep.is_established(p));
            assert!(
                auth_drops > 0,
                "{spec} accel {client_accel}: refusals counted"
            );
        }
    }
}

/// An end that moved to another address re-sends a waiting handshake at once (the answer to
/// the last initiation would go to the old address), within the attempt limit, and leaves
/// established sessions alone.
#[test]
fn a_moved_end_starts_its_waiting_handshake_again_at_once() {
    let mut w = world(false, Faults::none(Duration::from_millis(1)), 3);
    // A server nobody answers for: the handshake waits.
    let now = w.net.now;
    let nowhere = w.sk.public();
    let p = w.net.nodes[w.client].ep.connect(now, nowhere, addr(9));
    w.net.run_until(Time(100_000_000));
    let sent = |w: &World| w.net.nodes[w.client].ep.stats().initiations_sent;
    let before = sent(&w);
    let now = w.net.now;
    w.net.nodes[w.client].ep.local_address_changed(now);
    assert_eq!(sent(&w), before + 1, "a new initiation at once");
    assert!(!w.net.nodes[w.client].ep.is_established(p));
    // With the real server reachable, the session comes up; moving again sends nothing.
    let mut w = world(false, Faults::none(Duration::from_millis(1)), 4);
    let p = w.connect();
    w.net.run_until(Time(50_000_000));
    assert!(w.net.nodes[w.client].ep.is_established(p));
    let before = sent(&w);
    let now = w.net.now;
    w.net.nodes[w.client].ep.local_address_changed(now);
    assert_eq!(sent(&w), before);
}

/// A sender that never lets its path go empty still has its messages confirmed, in order:
/// one message every 2 ms for 600 ms over a 20 ms round trip (within the stack's window of
/// 16 messages), then the session is
/// closed with the last round trip's messages still in flight. Only a suffix comes back —
/// the messages acknowledged long before the close were confirmed while others were in
/// flight (before, a session confirmed only at a moment when everything sent was
/// acknowledged, which a steady sender never reaches, so all 300 came back) — and every
/// message was delivered or came back.
#[test]
fn a_steady_sender_has_its_messages_confirmed_while_more_are_in_flight() {
    for accel in [false, true] {
        let mut w = world(accel, Faults::none(Duration::from_millis(10)), 7);
        let p = w.connect();
        w.net.run_until(Time(100_000_000));
        let sent = 300;
        for i in 0..sent {
            w.send(w.client, p, &format!("m{i}"));
            let t = w.net.now + Duration::from_millis(2);
            w.net.run_until(t);
        }
        let now = w.net.now;
        w.net.nodes[w.client].ep.close(now, p);
        // The net collects the event.
        w.net.run_until(now + Duration::from_micros(1));
        let ended = w.ended(w.client);
        assert_eq!(ended.len(), 1, "accel {accel}: {ended:?}");
        let back = &ended[0].2;
        println!("accel {accel}: {} of {sent} came back", back.len());
        // About a round trip and a quarter of messages (13) is unconfirmed at any moment.
        assert!(
            back.len() <= 30,
            "accel {accel}: {} of {sent} came back",
            back.len()
        );
        let first = sent - back.len();
        let want: Vec<String> = (first..sent).map(|i| format!("m{i}")).collect();
        assert_eq!(back, &want, "accel {accel}: not the suffix");
        // Delivered or handed back, each: the server holds at least everything before it.
        w.net.run_until(w.net.now + Duration::from_millis(100));
        let inbox = w.inbox(w.server);
        let delivered: Vec<String> = (0..first).map(|i| format!("m{i}")).collect();
        assert!(
            inbox.len() >= first && inbox[..first] == delivered[..],
            "accel {accel}: the server got {} messages",
            inbox.len()
        );
    }
}
