//! When a receiver acknowledges, through the sans-IO contract only: data that arrives
//! together (one receive batch, handed over at one time) is acknowledged once, by the timer
//! that comes due at once; a reply sent before that timer runs carries the acknowledgement,
//! and no standalone one follows. Layered and accelerated.

mod common;

use common::{drain, spec_pair};
use phyllo::accel::DEFERRED_GRACE;
use phyllo::{DynConnection, Received, Time};
use std::time::Duration;

const SPEC: &str = "window:seal";

/// Run `c`'s timers due at `now`, as a driver does between receive batches.
fn timers(c: &mut DynConnection, now: Time) {
    if c.poll_timeout().is_some_and(|t| t <= now) {
        c.handle_timeout(now);
    }
}

/// A sends `n` small messages (its pacing may hold some back a while, and its accelerator
/// may pack several into one datagram: the clock moves on until all have arrived), and B
/// takes each datagram as it comes without running its timers, as a driver hands over one
/// receive batch. The time the last arrived.
fn batch(a: &mut DynConnection, b: &mut DynConnection, n: usize, mut now: Time) -> Time {
    for i in 0..n {
        a.send(now, &[i as u8; 32]).unwrap();
    }
    let mut delivered = 0;
    for _ in 0..10_000 {
        for d in drain(a) {
            assert_eq!(b.handle_datagram(now, &d), Received::Accepted);
        }
        while b.poll_delivery().is_some() {
            delivered += 1;
        }
        if delivered >= n {
            break;
        }
        now = Time(now.0 + 10_000);
        timers(a, now);
    }
    assert_eq!(delivered, n);
    now
}

#[test]
fn a_receive_batch_is_acknowledged_once_when_its_timer_runs() {
    for accel in [false, true] {
        let (mut a, mut b) = spec_pair(SPEC, accel);
        let now = batch(&mut a, &mut b, 8, Time(1_000));
        let mark = a.delivery_mark().expect("all 8 reached the window");
        assert_eq!(mark.messages(), 8);
        assert!(
            drain(&mut b).is_empty(),
            "accel {accel}: acknowledged before the batch ended"
        );
        // Due at once; with the accelerator, once its deferred post-processing runs.
        let due = b.poll_timeout().expect("an acknowledgement is owed");
        let grace = if accel {
            DEFERRED_GRACE
        } else {
            Duration::ZERO
        };
        assert!(
            due <= now + grace,
            "accel {accel}: the acknowledgement is due at {due:?}, not by {:?}",
            now + grace
        );
        timers(&mut b, due);
        let acks = drain(&mut b);
        assert_eq!(
            acks.len(),
            1,
            "accel {accel}: one acknowledgement for the batch"
        );
        assert_eq!(a.handle_datagram(now, &acks[0]), Received::Accepted);
        assert!(
            a.acknowledged_to(&mark),
            "accel {accel}: the acknowledgement left a message unconfirmed"
        );
    }
}

#[test]
fn a_reply_in_the_same_turn_carries_the_acknowledgement() {
    for accel in [false, true] {
        let (mut a, mut b) = spec_pair(SPEC, accel);
        let now = batch(&mut a, &mut b, 4, Time(1_000));
        let mark = a.delivery_mark().expect("all 4 reached the window");
        // With the accelerator the last delivery's post-processing is still pending: the
        // reply does not wait for it.
        b.send(now, b"reply").unwrap();
        let out = drain(&mut b);
        assert_eq!(out.len(), 1, "accel {accel}: the reply alone");
        // Nor does an acknowledgement follow once B's deferred work and timers have run.
        let mut t = now;
        while let Some(due) = b.poll_timeout().filter(|&d| d <= now + DEFERRED_GRACE) {
            t = due.max(t);
            timers(&mut b, t);
        }
        assert!(
            drain(&mut b).is_empty(),
            "accel {accel}: a standalone acknowledgement after the reply"
        );
        assert_eq!(a.handle_datagram(t, &out[0]), Received::Accepted);
        assert_eq!(
            a.poll_delivery().map(|m| m.data().to_vec()),
            Some(b"reply".to_vec())
        );
        // The reply acknowledged all four (A takes it in with its deferred work).
        a.post_process(t);
        assert!(
            a.acknowledged_to(&mark),
            "accel {accel}: the reply did not acknowledge what it answered"
        );
    }
}
