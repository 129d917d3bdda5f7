//! The sans-IO contract, as a quinn-proto user drives it: nothing but `send`,
//! `handle_datagram`, `handle_timeout` (exactly when `poll_timeout` says, never otherwise),
//! `poll_transmit` or `transmit_with`, and `poll_delivery`. No `post_process`, no
//! `needs_post_process`, no `Pair::step` (which calls them): those are not part of the
//! minimal contract, so a connection must keep its promises without them, accelerated or
//! not.
//!
//! Over a lossy in-memory link on a virtual clock, for the layered and the accelerated
//! connection, plain and sealed stacks, both ways of taking datagrams: every message is
//! retransmitted as needed and delivered once, in order, byte for byte, and the event loop
//! comes to rest (no deadline, nothing to transmit, nothing in flight) in bounded virtual
//! time.

mod common;
use common::{payload, rng};
use phyllo::testing::memlink::{Faults, MemLink, Side};
use phyllo::time::earliest;
use phyllo::{Config, Connection, DynConnection, SendError, Time};
use rand::Rng;
use std::convert::Infallible;
use std::ops::Range;
use std::time::Duration;

/// How the driver takes datagrams from a connection.
#[derive(Clone, Copy, Debug)]
enum Take {
    /// `poll_transmit`, one at a time, buffers given back with `recycle`.
    Poll,
    /// `transmit_with`, lent in batches.
    Lend,
}

/// Move every datagram `c` has queued onto the link.
fn flush(c: &mut DynConnection, link: &mut MemLink, side: Side, now: Time, take: Take) {
    match take {
        Take::Poll => {
            while let Some(m) = c.poll_transmit() {
                link.send(side, now, m.data());
                c.recycle(m);
            }
        }
        Take::Lend => loop {
            let taken = c.transmit_with(usize::MAX, |queued| {
                for m in queued {
                    link.send(side, now, m.data());
                }
                Ok::<_, Infallible>(queued.len())
            });
            if taken.unwrap_or(0) == 0 {
                break;
            }
        },
    }
}

/// Beyond this virtual time the loop has not come to rest: a failure.
const TIME_LIMIT: Time = Time(120_000_000_000);
/// Beyond this many loop turns likewise.
const TURN_LIMIT: u64 = 5_000_000;

/// What one run of the event loop showed.
#[derive(Debug)]
struct Run {
    /// What B delivered, in order.
    got: Vec<Vec<u8>>,
    /// Whether the loop came to rest (else it hit a limit).
    rested: bool,
    /// Virtual time at the end.
    end: Time,
    /// Datagrams the link carried (offered), both ways.
    datagrams: u64,
    /// `handle_timeout` calls, both ends.
    timeouts: u64,
}

/// A sends `msgs` to B, message `i` at `at[i]` (or as soon after as `send` accepts it),
/// over `link`; the loop runs until rest.
fn event_loop(
    spec: &str,
    accelerated: bool,
    link: MemLink,
    msgs: &[Vec<u8>],
    at: &[Time],
    take: Take,
) -> Run {
    let (ca, cb) = Config::pair(accelerated).unwrap();
    let mut link = link;
    let mut a = Connection::from_spec(spec, ca).unwrap();
    let mut b = Connection::from_spec(spec, cb).unwrap();
    let mut now = Time::ZERO;
    let mut next = 0;
    let mut got = Vec::new();
    let mut timeouts = 0;
    let mut buf = Vec::with_capacity(2048);
    let mut rested = false;
    for _ in 0..TURN_LIMIT {
        if now > TIME_LIMIT {
            break;
        }
        // The application sends what is due, as far as the connection accepts it.
        while next < msgs.len() && at[next] <= now {
            match a.send(now, &msgs[next]) {
                Ok(()) => next += 1,
                Err(SendError::WouldBlock) => break,
                Err(e) => panic!("send: {e}"),
            }
        }
        // Timers, exactly when they are due.
        for c in [&mut a, &mut b] {
            if c.poll_timeout().is_some_and(|t| t <= now) {
                c.handle_timeout(now);
                timeouts += 1;
            }
        }
        flush(&mut a, &mut link, Side::A, now, take);
        flush(&mut b, &mut link, Side::B, now, take);
        let mut received = false;
        while link.recv_into(Side::B, now, &mut buf) {
            b.handle_datagram(now, &buf);
            received = true;
        }
        while link.recv_into(Side::A, now, &mut buf) {
            a.handle_datagram(now, &buf);
            received = true;
        }
        while let Some(m) = b.poll_delivery() {
            got.push(m.data().to_vec());
            b.recycle(m);
        }
        while let Some(m) = a.poll_delivery() {
            a.recycle(m);
        }
        if received {
            // Receiving may have queued replies and moved deadlines: another turn now.
            continue;
        }
        // Nothing more at this instant: on to the next event, if any.
        let app = (next < msgs.len() && at[next] > now).then(|| at[next]);
        let wake = earliest(
            app,
            earliest(
                link.next_arrival(),
                earliest(a.poll_timeout(), b.poll_timeout()),
            ),
        );
        match wake {
            Some(t) => now = now.max(t),
            None => {
                rested = true;
                break;
            }
        }
    }
    // At rest nothing may be left to transmit.
    let mut left = 0;
    while let Some(m) = a.poll_transmit() {
        a.recycle(m);
        left += 1;
    }
    while let Some(m) = b.poll_transmit() {
        b.recycle(m);
        left += 1;
    }
    Run {
        got,
        rested: rested && left == 0,
        end: now,
        datagrams: link.stats().sent,
        timeouts,
    }
}

const SEEDS: u64 = 8;

/// Run every seed for `spec` on one path and way of taking datagrams, with loss drawn from
/// `loss` (`None`: a perfect link); describe failures.
fn check(spec: &str, accelerated: bool, take: Take, loss: Option<Range<f64>>) -> Vec<String> {
    let mut fails = Vec::new();
    for seed in 0..SEEDS {
        let mut r = rng(seed ^ 0xc0_47);
        let loss = loss.clone().map_or(0.0, |l| r.random_range(l));
        let faults = Faults {
            loss,
            ..Faults::none(Duration::from_micros(50))
        };
        let n = 30;
        let msgs: Vec<Vec<u8>> = (0..n)
            .map(|i| {
                // Mostly small, some fragmented.
                let len = if r.random_bool(0.2) {
                    r.random_range(1500..6000)
                } else {
                    r.random_range(1..200)
                };
                payload(i, len)
            })
            .collect();
        let mut t = 0;
        let at: Vec<Time> = (0..n)
            .map(|_| {
                t += r.random_range(0..300_000u64);
                Time(t)
            })
            .collect();
        let run = event_loop(
            spec,
            accelerated,
            MemLink::new(faults, seed),
            &msgs,
            &at,
            take,
        );
        let path = if accelerated {
            "accelerated"
        } else {
            "layered"
        };
        let in_order = run
            .got
            .iter()
            .zip(&msgs)
            .take_while(|(g, m)| g == m)
            .count();
        if run.got != msgs || !run.rested {
            fails.push(format!(
                "{spec} [{path}, {take:?}] seed {seed} loss {loss:.2}: delivered {} of {n} \
                 ({in_order} correct in order); {} at virtual {:?} after {} datagrams and {} \
                 timeouts",
                run.got.len(),
                if run.rested {
                    "came to rest"
                } else {
                    "did NOT come to rest"
                },
                Duration::from_nanos(run.end.as_nanos()),
                run.datagrams,
                run.timeouts,
            ));
        }
    }
    fails
}

/// The lossy links: 20-30 % loss.
const LOSSY: Option<Range<f64>> = Some(0.2..0.3);

const PLAIN: &str = "frag(1400):window(16):checksum";
const SEALED: &str = "frag(1400):window(16):checksum:seal";

fn assert_all(fails: Vec<String>) {
    assert!(
        fails.is_empty(),
        "{} runs failed:\n{}",
        fails.len(),
        fails.join("\n")
    );
}

#[test]
fn layered_keeps_the_contract_over_a_lossy_link() {
    let mut fails = Vec::new();
    for spec in [PLAIN, SEALED] {
        for take in [Take::Poll, Take::Lend] {
            fails.extend(check(spec, false, take, LOSSY));
        }
    }
    assert_all(fails);
}

#[test]
fn accelerated_keeps_the_contract_over_a_lossy_link_polling() {
    let mut fails = Vec::new();
    for spec in [PLAIN, SEALED] {
        fails.extend(check(spec, true, Take::Poll, LOSSY));
    }
    assert_all(fails);
}

#[test]
fn accelerated_keeps_the_contract_over_a_lossy_link_lending() {
    let mut fails = Vec::new();
    for spec in [PLAIN, SEALED] {
        fails.extend(check(spec, true, Take::Lend, LOSSY));
    }
    assert_all(fails);
}

#[test]
fn both_paths_keep_the_contract_over_a_perfect_link() {
    let mut fails = Vec::new();
    for spec in [PLAIN, SEALED] {
        for accelerated in [false, true] {
            for take in [Take::Poll, Take::Lend] {
                fails.extend(check(spec, accelerated, take, None));
            }
        }
    }
    assert_all(fails);
}
