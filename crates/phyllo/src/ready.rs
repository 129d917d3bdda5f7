//! The messages waiting for the application, in delivery order.
//!
//! A body holding several messages (a packed datagram, van Renesse, "Masking the Overhead of
//! Protocol Layering" (seed 004 §3.4)) waits whole and is split as the application takes its
//! messages: a burst of packed datagrams then holds one buffer per datagram instead of one per
//! message, and the pool's idle buffers — recycled by the application one message at a time — keep
//! up. (Split at arrival, a burst of a few hundred packed datagrams needed tens of thousands of
//! buffers at once; most came fresh from the allocator, zeroed.) The queue does not know how bodies
//! are packed: whoever queues one passes the function that finds its messages.

use crate::msg::{Msg, Pool};
use std::collections::VecDeque;

/// Where the message at offset `at` of a body holding several lies, as (start, length); the
/// next one begins at `start + length`. `None` if the body has nothing well-formed there.
pub(crate) type Split = fn(&[u8], usize) -> Option<(usize, usize)>;

/// One entry of the queue.
enum Entry {
    /// A message.
    One(Msg),
    /// `left` messages of `body`, the next at offset `at`.
    Several {
        body: Msg,
        at: usize,
        left: usize,
        split: Split,
    },
}

/// What the next message is.
enum Front {
    /// A message queued alone.
    One,
    /// The bytes `start..start + len` of the body at the front.
    Part(usize, usize),
}

/// The delivery queue.
pub(crate) struct Ready {
    entries: VecDeque<Entry>,
    msgs: usize,
}

impl Ready {
    /// An empty queue.
    pub(crate) fn new() -> Ready {
        Ready {
            entries: VecDeque::new(),
            msgs: 0,
        }
    }

    /// Give back the capacity of an empty queue.
    pub(crate) fn shrink(&mut self) {
        if self.entries.is_empty() {
            self.entries = VecDeque::new();
        }
    }

    /// Queue a message.
    #[inline(always)]
    pub(crate) fn push(&mut self, m: Msg) {
        self.msgs += 1;
        self.entries.push_back(Entry::One(m));
    }

    /// Queue the `count` messages of `body` that `split` finds, from offset 0 (the caller has
    /// checked that they are there).
    pub(crate) fn push_several(&mut self, body: Msg, count: usize, split: Split) {
        if count == 0 {
            return;
        }
        self.msgs += count;
        self.entries.push_back(Entry::Several {
            body,
            at: 0,
            left: count,
            split,
        });
    }

    /// The next message; a body's last message gives its buffer back to `pool`.
    #[inline]
    pub(crate) fn pop(&mut self, pool: &mut Pool) -> Option<Msg> {
        match self.front(pool)? {
            Front::One => self.pop_one(),
            Front::Part(start, len) => {
                let m = pool.alloc_copy(&self.front_body()[start..start + len]);
                self.advance(start + len, pool);
                Some(m)
            }
        }
    }

    /// The next message, lent to `f`; its buffer (or its body's, after the body's last
    /// message) goes back to `pool`.
    #[inline]
    pub(crate) fn pop_with<R>(&mut self, pool: &mut Pool, f: impl FnOnce(&[u8]) -> R) -> Option<R> {
        match self.front(pool)? {
            Front::One => {
                let m = self.pop_one()?;
                let r = f(m.data());
                pool.free(m);
                Some(r)
            }
            Front::Part(start, len) => {
                let r = f(&self.front_body()[start..start + len]);
                self.advance(start + len, pool);
                Some(r)
            }
        }
    }

    /// What the next message is; entries that hold nothing well-formed are dropped on the
    /// way. Not reached for bodies checked before they were queued; if it were, their
    /// remaining messages are dropped rather than invented.
    #[inline(always)]
    fn front(&mut self, pool: &mut Pool) -> Option<Front> {
        loop {
            match self.entries.front()? {
                Entry::One(_) => return Some(Front::One),
                Entry::Several {
                    body,
                    at,
                    left,
                    split,
                } => match split(body.data(), *at) {
                    Some((start, len)) if start.saturating_add(len) <= body.len() => {
                        return Some(Front::Part(start, len))
                    }
                    _ => {
                        self.msgs -= *left;
                        self.free_front(pool);
                    }
                },
            }
        }
    }

    fn pop_one(&mut self) -> Option<Msg> {
        match self.entries.pop_front() {
            Some(Entry::One(m)) => {
                self.msgs -= 1;
                Some(m)
            }
            _ => None,
        }
    }

    /// The body at the front (empty if the front is a single message).
    fn front_body(&self) -> &[u8] {
        match self.entries.front() {
            Some(Entry::Several { body, .. }) => body.data(),
            _ => &[],
        }
    }

    /// The front body's next message was taken; the one after starts at `next`.
    fn advance(&mut self, next: usize, pool: &mut Pool) {
        if let Some(Entry::Several { at, left, .. }) = self.entries.front_mut() {
            *at = next;
            *left -= 1;
            self.msgs -= 1;
            if *left == 0 {
                self.free_front(pool);
            }
        }
    }

    fn free_front(&mut self, pool: &mut Pool) {
        if let Some(Entry::Several { body, .. }) = self.entries.pop_front() {
            pool.free(body);
        }
    }

    /// Messages waiting.
    pub(crate) fn len(&self) -> usize {
        self.msgs
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Bodies of one-byte lengths followed by the bytes.
    fn split(b: &[u8], at: usize) -> Option<(usize, usize)> {
        let len = *b.get(at)? as usize;
        Some((at + 1, len))
    }

    #[test]
    fn messages_come_out_in_order_and_bodies_go_back_to_the_pool() {
        let mut pool = Pool::new(8);
        let mut r = Ready::new();
        r.push(pool.alloc_copy(b"a"));
        r.push_several(pool.alloc_copy(&[2, b'b', b'c', 1, b'd']), 2, split);
        r.push(pool.alloc_copy(b"e"));
        assert_eq!(r.len(), 4);
        let mut got = Vec::new();
        while let Some(m) = r.pop(&mut pool) {
            got.push(m.data().to_vec());
            pool.free(m);
        }
        assert_eq!(got, [&b"a"[..], b"bc", b"d", b"e"]);
        assert_eq!(r.len(), 0);
    }

    #[test]
    fn lent_messages_are_the_same_and_buffers_come_back() {
        let mut pool = Pool::new(8);
        let mut r = Ready::new();
        r.push(pool.alloc_copy(b"a"));
        r.push_several(pool.alloc_copy(&[2, b'b', b'c', 1, b'd']), 2, split);
        let idle = pool.idle();
        let mut got = Vec::new();
        while let Some(()) = r.pop_with(&mut pool, |b| got.push(b.to_vec())) {}
        assert_eq!(got, [&b"a"[..], b"bc", b"d"]);
        assert_eq!(
            pool.idle(),
            idle + 2,
            "the message's and the body's buffers"
        );
        assert_eq!(r.len(), 0);
    }

    #[test]
    fn a_lying_body_yields_what_it_holds_and_no_more() {
        let mut pool = Pool::new(8);
        let mut r = Ready::new();
        // Claims three messages; the second runs off the end.
        r.push_several(pool.alloc_copy(&[1, b'x', 9, b'y']), 3, split);
        r.push(pool.alloc_copy(b"z"));
        assert_eq!(r.pop(&mut pool).unwrap().data(), b"x");
        assert_eq!(r.pop(&mut pool).unwrap().data(), b"z");
        assert!(r.pop(&mut pool).is_none());
        assert_eq!(r.len(), 0);
    }
}
