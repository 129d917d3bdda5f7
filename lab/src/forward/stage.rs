//! The user-level stage of Mogul and Ramakrishnan, "Eliminating Receive Livelock in an
//! Interrupt-Driven Kernel" (seed 002) (§6.6): a process fed by a bounded queue, running as an
//! ordinary-priority thread beside the forwarder on its core — `screend`, which screens each packet
//! and hands it back to be forwarded (§6.6.1), or a passive monitor that keeps the first 68 bytes
//! of each packet (§6.6's `tcpdump`).
//!
//! The forwarder offers packets to the stage's queue and drops what does not fit (counted). On
//! the engine, the queue's level is the feedback that inhibits input (75 % / 25 % of the
//! queue): the stage tells the engine, through a signal socket the engine polls as a receive
//! source, when it hands a screened packet back and when its queue falls to the low watermark.
//! In the 4.2BSD baseline screend sends what it passes itself, as the real one's system call
//! ran `ip_output` in screend's context.

use super::{spin, sys};
use phyllo::poller::Watermarks;
use phyllo_udp::udp::UdpLink;
use std::collections::VecDeque;
use std::io;
use std::net::SocketAddr;
use std::os::unix::net::UnixDatagram;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

/// Bytes of each packet a monitor keeps (the seed's 68, `tcpdump`'s old default snap length).
pub const SNAPLEN: usize = 68;

/// Snapshots a monitor holds; older ones are overwritten.
const CAPTURE_RING: usize = 1024;

/// What the user-level stage does with a packet.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StageKind {
    /// Screen it and pass it on to be forwarded.
    Screend,
    /// Keep its first [`SNAPLEN`] bytes; it goes no further.
    Monitor,
}

/// A user-level stage between the forwarder's IP work and its output.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct UserStage {
    /// Screen or monitor.
    pub kind: StageKind,
    /// Simulated user-level work per packet.
    pub cost: Duration,
    /// The queue feeding the stage (the seed: 32).
    pub queue: usize,
    /// Whether the queue's level inhibits the engine's input (ignored by the baseline, which
    /// has no feedback).
    pub feedback: bool,
}

impl UserStage {
    /// `screend` as the seed ran it: a queue of 32, with or without feedback.
    pub fn screend(cost: Duration, feedback: bool) -> UserStage {
        UserStage {
            kind: StageKind::Screend,
            cost,
            queue: 32,
            feedback,
        }
    }

    /// A passive monitor behind a queue of 32.
    pub fn monitor(cost: Duration, feedback: bool) -> UserStage {
        UserStage {
            kind: StageKind::Monitor,
            cost,
            queue: 32,
            feedback,
        }
    }

    /// The queue's watermarks (the seed's 75 % and 25 %).
    pub fn marks(&self) -> Watermarks {
        Watermarks::seed(self.queue)
    }
}

/// What the stage's thread did.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(super) struct StageCounts {
    /// Packets screened and passed (screend).
    pub passed: u64,
    /// Of those, sent by the stage itself (the baseline's screend).
    pub sent: u64,
    /// Packets whose first bytes the monitor kept.
    pub captured: u64,
}

struct Shared {
    queue: Mutex<VecDeque<Vec<u8>>>,
    ready: Condvar,
    /// Screened packets handed back to the engine.
    back: Mutex<VecDeque<Vec<u8>>>,
    stop: AtomicBool,
}

/// Where the stage's passed packets go.
pub(super) enum Handoff {
    /// Back to the engine, announced on the signal socket (which also carries feedback).
    Engine,
    /// Sent by the stage itself (the baseline's screend).
    Send(Box<UdpLink>, SocketAddr),
    /// Nowhere: a monitor under the baseline.
    Nowhere,
}

/// A running stage: its queue, its signal socket and its thread.
pub(super) struct Stage {
    cfg: UserStage,
    shared: Arc<Shared>,
    /// The engine's end of the signal socket (only when screened packets come back).
    signal: Option<UnixDatagram>,
    thread: JoinHandle<StageCounts>,
}

impl Stage {
    /// Start the stage's thread, pinned to `cpu`, passing packets on as `handoff` says.
    pub(super) fn start(cfg: UserStage, cpu: Option<usize>, handoff: Handoff) -> io::Result<Stage> {
        if cfg.queue == 0 {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "the user-level stage needs a queue of at least one entry",
            ));
        }
        let shared = Arc::new(Shared {
            queue: Mutex::new(VecDeque::with_capacity(cfg.queue)),
            ready: Condvar::new(),
            back: Mutex::new(VecDeque::new()),
            stop: AtomicBool::new(false),
        });
        let (signal, notify) = if matches!(handoff, Handoff::Engine) {
            let (a, b) = UnixDatagram::pair()?;
            a.set_nonblocking(true)?;
            b.set_nonblocking(true)?;
            (Some(a), Some(b))
        } else {
            (None, None)
        };
        let thread = {
            let shared = Arc::clone(&shared);
            let name = match cfg.kind {
                StageKind::Screend => "screend",
                StageKind::Monitor => "monitor",
            };
            std::thread::Builder::new()
                .name(name.into())
                .spawn(move || run(cfg, cpu, &shared, handoff, notify))?
        };
        Ok(Stage {
            cfg,
            shared,
            signal,
            thread,
        })
    }

    /// The socket that becomes readable when the stage has something for the engine.
    pub(super) fn signal(&self) -> Option<&UnixDatagram> {
        self.signal.as_ref()
    }

    /// Whether the stage's queue feeds back into input.
    pub(super) fn feedback(&self) -> bool {
        self.cfg.feedback
    }

    /// Queue `p` for the stage: its new length, or `None` (dropped) when full.
    pub(super) fn offer(&self, p: Vec<u8>) -> Option<usize> {
        let mut q = self.shared.queue.lock().ok()?;
        if q.len() >= self.cfg.queue {
            return None;
        }
        q.push_back(p);
        self.shared.ready.notify_one();
        Some(q.len())
    }

    /// Entries in the stage's queue.
    pub(super) fn len(&self) -> usize {
        self.shared.queue.lock().map_or(0, |q| q.len())
    }

    /// Empty the signal socket (before looking at what it announced).
    pub(super) fn clear_signal(&self) {
        let mut b = [0u8; 64];
        if let Some(s) = &self.signal {
            while s.recv(&mut b).is_ok() {}
        }
    }

    /// The next screened packet handed back.
    pub(super) fn take_back(&self) -> Option<Vec<u8>> {
        self.shared.back.lock().ok()?.pop_front()
    }

    /// Stop the thread and collect its counts.
    pub(super) fn finish(self) -> io::Result<StageCounts> {
        self.shared.stop.store(true, Ordering::Relaxed);
        self.shared.ready.notify_all();
        self.thread
            .join()
            .map_err(|_| io::Error::other("the user-level stage panicked"))
    }
}

/// The stage's thread.
fn run(
    cfg: UserStage,
    cpu: Option<usize>,
    shared: &Shared,
    mut handoff: Handoff,
    notify: Option<UnixDatagram>,
) -> StageCounts {
    if let Some(cpu) = cpu {
        let _ = sys::pin_to(cpu);
    }
    let low = cfg.marks().low;
    let signal = || {
        if let Some(n) = &notify {
            // A full signal socket already says there is something to look at.
            let _ = n.send(&[1]);
        }
    };
    let mut counts = StageCounts::default();
    let mut ring = vec![[0u8; SNAPLEN]; CAPTURE_RING];
    loop {
        let next = {
            let Ok(mut q) = shared.queue.lock() else {
                return counts;
            };
            loop {
                if let Some(p) = q.pop_front() {
                    break Some((p, q.len()));
                }
                if shared.stop.load(Ordering::Relaxed) {
                    break None;
                }
                q = match shared.ready.wait_timeout(q, Duration::from_millis(10)) {
                    Ok((q, _)) => q,
                    Err(_) => return counts,
                };
            }
        };
        let Some((p, left)) = next else {
            return counts;
        };
        spin(cfg.cost);
        match cfg.kind {
            StageKind::Screend => {
                counts.passed += 1;
                match &mut handoff {
                    Handoff::Send(link, to) => {
                        if link.send_batch_to(&[&p], *to).is_ok() {
                            counts.sent += 1;
                        }
                    }
                    Handoff::Engine => {
                        if let Ok(mut b) = shared.back.lock() {
                            b.push_back(p);
                        }
                        signal();
                    }
                    Handoff::Nowhere => {}
                }
            }
            StageKind::Monitor => {
                let n = p.len().min(SNAPLEN);
                let slot = &mut ring[counts.captured as usize % CAPTURE_RING];
                slot[..n].copy_from_slice(&p[..n]);
                slot[n..].fill(0);
                counts.captured += 1;
            }
        }
        // Falling to the low watermark releases the engine's input at once, not only at the
        // feedback timeout.
        if cfg.feedback && left == low {
            signal();
        }
    }
}
