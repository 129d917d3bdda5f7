//! The receive engine over real sockets (Mogul and Ramakrishnan, "Eliminating Receive Livelock in
//! an Interrupt-Driven Kernel" (seed 002)): `epoll` is the interrupt, the library's sans-IO
//! [`Poller`] the discipline.
//!
//! Each receive source is a socket registered with `EPOLLIN | EPOLLONESHOT`: its readiness is
//! the "interrupt", and one-shot is the interrupt-enable flag — once it fires, the socket stays
//! silent until the engine re-arms it, which it does only when a poll finds it drained. So under
//! load the engine takes one wake-up per burst of work, not one per packet, and while input is
//! inhibited (queue-state feedback, CPU-share limit) nothing wakes it: the packets wait in the
//! socket buffer, where the kernel drops what does not fit — before any user-space work was
//! spent on them — and counts it (`UdpLink::set_drop_counting`). Transmit sources have no file
//! descriptor; the application [`Ctl::wake`]s them when it queues output.
//!
//! What this adds over the kernel's own NAPI (which already polls the NIC with a budget), over
//! busy-poll sockets and over IRQ suspension (which let an application drive that polling and
//! keep the device's interrupts off while it does): all three protect the kernel's softirq
//! work, not the application's; a user-space server can still livelock between its sockets and
//! its own queues (reading without bound while its consumers or its output starve). The engine
//! applies the seed's discipline at that level: bounded work per socket per turn, round-robin
//! between input and output, feedback from the application's queues, a CPU share for packet
//! work and for each flooded source, and sleep in `epoll` when idle (no busy-polling core). The
//! report's `engine` experiment measures the difference on this machine.

use phyllo::poller::{
    ConfigError, Direction, Next, PollConfig, PollStats, Poller, QueueId, SourceId, Watermarks,
};
use phyllo::Time;
use std::io;
use std::os::fd::{AsFd, AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::time::{Duration, Instant};

/// What one callback did.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Served {
    /// Packets handled.
    pub handled: usize,
    /// Nothing left: the source is re-armed.
    pub drained: bool,
}

/// What a callback may ask of the engine while it runs.
pub struct Ctl<'a> {
    poller: &'a mut Poller,
    epoch: Instant,
    stop: bool,
}

impl Ctl<'_> {
    /// Output was queued for transmit source `s`.
    pub fn wake(&mut self, s: SourceId) {
        self.poller.wake(s);
    }

    /// Consumer queue `q` now holds `len` entries (queue-state feedback).
    pub fn queue_len(&mut self, q: QueueId, len: usize) {
        let now = time(self.epoch);
        self.poller.queue_len(now, q, len);
    }

    /// Whether input may still be taken (a receive callback asks between packets).
    pub fn input_allowed(&mut self) -> bool {
        let now = time(self.epoch);
        self.poller.input_allowed(now)
    }

    /// Return from [`Engine::run_until`] after this callback (to add or remove sources).
    pub fn stop(&mut self) {
        self.stop = true;
    }
}

/// What the engine counted, beyond its poller's [`PollStats`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct EngineStats {
    /// `epoll_wait` calls that slept.
    pub sleeps: u64,
    /// Notifications `epoll` delivered.
    pub notifications: u64,
}

/// The engine: sources, the poller, and `epoll`.
pub struct Engine {
    epoll: OwnedFd,
    poller: Poller,
    /// Per source: its file descriptor (receive sources).
    fds: Vec<Option<RawFd>>,
    epoch: Instant,
    stats: EngineStats,
}

/// `Instant` as protocol time since `epoch`.
fn time(epoch: Instant) -> Time {
    Time(epoch.elapsed().as_nanos() as u64)
}

impl Engine {
    /// An engine with no sources.
    pub fn new(cfg: PollConfig) -> io::Result<Engine> {
        let poller = Poller::new(cfg).map_err(invalid)?;
        Ok(Engine {
            epoll: sys::epoll_create()?,
            poller,
            fds: Vec::new(),
            epoch: Instant::now(),
            stats: EngineStats::default(),
        })
    }

    /// Register a socket (or any pollable descriptor) as a receive source. The engine only
    /// watches it: the callback reads it. The descriptor must outlive the engine's use of it.
    pub fn add_receive(&mut self, fd: &impl AsFd) -> io::Result<SourceId> {
        let raw = fd.as_fd().as_raw_fd();
        let s = self.poller.add_source(Direction::Receive);
        sys::epoll_ctl(&self.epoll, libc::EPOLL_CTL_ADD, raw, s.0 as u64)?;
        self.fds.push(Some(raw));
        Ok(s)
    }

    /// Give source `s` a quota of its own ([`Poller::set_quota`]).
    pub fn set_quota(&mut self, s: SourceId, quota: usize) -> io::Result<()> {
        self.poller.set_quota(s, quota).map_err(invalid)
    }

    /// Give receive source `s` a CPU share of its own ([`Poller::set_share`]).
    pub fn set_share(&mut self, s: SourceId, share: f64) -> io::Result<()> {
        self.poller.set_share(s, share).map_err(invalid)
    }

    /// Stop watching receive source `s` (before its descriptor closes); its id is retired.
    pub fn remove(&mut self, s: SourceId) -> io::Result<()> {
        if let Some(fd) = self.fds.get_mut(s.0).and_then(Option::take) {
            sys::epoll_del(&self.epoll, fd)?;
        }
        self.poller.retire(s);
        Ok(())
    }

    /// Register a transmit source (an output queue the callback drains).
    pub fn add_transmit(&mut self) -> SourceId {
        self.fds.push(None);
        self.poller.add_source(Direction::Transmit)
    }

    /// Register a consumer queue whose level inhibits input.
    pub fn add_queue(&mut self, marks: Watermarks) -> io::Result<QueueId> {
        self.poller.add_queue(marks).map_err(invalid)
    }

    /// The poller's counters.
    pub fn poll_stats(&self) -> PollStats {
        self.poller.stats()
    }

    /// The engine's own counters.
    pub fn stats(&self) -> EngineStats {
        self.stats
    }

    /// Access to wake sources and report queues from outside a callback.
    pub fn ctl(&mut self) -> Ctl<'_> {
        Ctl {
            poller: &mut self.poller,
            epoch: self.epoch,
            stop: false,
        }
    }

    /// Run until `deadline` (forever if `None`) or until `serve` fails: `serve(ctl, source,
    /// quota)` handles at most `quota` packets of `source`, each to completion, and says
    /// whether the source is drained.
    pub fn run_until(
        &mut self,
        deadline: Option<Instant>,
        mut serve: impl FnMut(&mut Ctl<'_>, SourceId, usize) -> io::Result<Served>,
    ) -> io::Result<()> {
        let mut events = [libc::epoll_event { events: 0, u64: 0 }; 64];
        // Callbacks since notifications were last collected. A kernel's interrupts arrive
        // while it polls; here they wait in epoll until asked for, so while busy the engine
        // asks (without blocking) once per turn of the sources — else a source that became
        // readable while another never drains would wait until the engine next slept.
        let mut since_collect = 0usize;
        loop {
            if deadline.is_some_and(|d| Instant::now() >= d) {
                return Ok(());
            }
            if since_collect >= self.fds.len() {
                since_collect = 0;
                self.collect(&mut events, Some(Duration::ZERO))?;
            }
            match self.poller.next(time(self.epoch)) {
                Next::Poll { source, quota } => {
                    since_collect += 1;
                    let start = Instant::now();
                    let mut ctl = self.ctl();
                    let served = serve(&mut ctl, source, quota)?;
                    let stop = ctl.stop;
                    let busy = start.elapsed();
                    let now = time(self.epoch);
                    self.poller
                        .polled(now, source, served.handled, served.drained, busy);
                    if let (true, Some(Some(fd))) = (served.drained, self.fds.get(source.0)) {
                        sys::epoll_ctl(&self.epoll, libc::EPOLL_CTL_MOD, *fd, source.0 as u64)?;
                    }
                    if stop {
                        return Ok(());
                    }
                }
                Next::Sleep { until } => {
                    let now = Instant::now();
                    let wake = until.map(|t| self.epoch + Duration::from_nanos(t.0));
                    let until = match (wake, deadline) {
                        (Some(a), Some(b)) => Some(a.min(b)),
                        (a, b) => a.or(b),
                    };
                    let timeout = until.map(|u| u.saturating_duration_since(now));
                    self.stats.sleeps += 1;
                    since_collect = 0;
                    self.collect(&mut events, timeout)?;
                }
            }
        }
    }

    /// Wait for notifications (at most `timeout`; `Some(ZERO)` only looks) and hand them to
    /// the poller as interrupts.
    fn collect(
        &mut self,
        events: &mut [libc::epoll_event],
        timeout: Option<Duration>,
    ) -> io::Result<()> {
        let n = sys::epoll_wait(&self.epoll, events, timeout)?;
        for e in &events[..n] {
            self.stats.notifications += 1;
            self.poller.interrupt(SourceId(e.u64 as usize));
        }
        Ok(())
    }
}

fn invalid(e: ConfigError) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidInput, e)
}

/// The `epoll` calls, each in a safe wrapper.
mod sys {
    use super::*;

    /// A new epoll instance (close-on-exec).
    pub(super) fn epoll_create() -> io::Result<OwnedFd> {
        // SAFETY: epoll_create1 takes no pointers; a non-negative result is a new descriptor
        // that nothing else owns.
        let fd = unsafe { libc::epoll_create1(libc::EPOLL_CLOEXEC) };
        if fd < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: `fd` was just returned by the kernel and is owned by nobody else.
        Ok(unsafe { OwnedFd::from_raw_fd(fd) })
    }

    /// Add or re-arm `fd` for one notification of readability, tagged `data`.
    pub(super) fn epoll_ctl(ep: &OwnedFd, op: libc::c_int, fd: RawFd, data: u64) -> io::Result<()> {
        let mut ev = libc::epoll_event {
            events: (libc::EPOLLIN | libc::EPOLLONESHOT) as u32,
            u64: data,
        };
        // SAFETY: `ep` is an open epoll descriptor; `ev` is a live event the kernel only reads.
        // A bad `fd` is an error return, not undefined behaviour.
        let r = unsafe { libc::epoll_ctl(ep.as_raw_fd(), op, fd, &mut ev) };
        if r < 0 {
            Err(io::Error::last_os_error())
        } else {
            Ok(())
        }
    }

    /// Stop watching `fd`.
    pub(super) fn epoll_del(ep: &OwnedFd, fd: RawFd) -> io::Result<()> {
        let mut ev = libc::epoll_event { events: 0, u64: 0 };
        // SAFETY: as for `epoll_ctl` (the event is ignored by EPOLL_CTL_DEL on current kernels
        // but must be non-null on old ones).
        let r = unsafe { libc::epoll_ctl(ep.as_raw_fd(), libc::EPOLL_CTL_DEL, fd, &mut ev) };
        if r < 0 {
            Err(io::Error::last_os_error())
        } else {
            Ok(())
        }
    }

    /// Wait for notifications (at most `timeout`, rounded up to a millisecond; forever if
    /// `None`); how many were written into `events`. An interrupted wait returns 0.
    pub(super) fn epoll_wait(
        ep: &OwnedFd,
        events: &mut [libc::epoll_event],
        timeout: Option<Duration>,
    ) -> io::Result<usize> {
        let ms = timeout.map_or(-1, |t| {
            t.as_nanos().div_ceil(1_000_000).min(i32::MAX as u128) as libc::c_int
        });
        // SAFETY: `events` is an exclusive borrow of `events.len()` entries the kernel may
        // write; `ep` is an open epoll descriptor.
        let r = unsafe {
            libc::epoll_wait(
                ep.as_raw_fd(),
                events.as_mut_ptr(),
                events.len().min(i32::MAX as usize) as libc::c_int,
                ms,
            )
        };
        if r < 0 {
            let e = io::Error::last_os_error();
            return if e.kind() == io::ErrorKind::Interrupted {
                Ok(0)
            } else {
                Err(e)
            };
        }
        Ok(r as usize)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use phyllo_udp::udp::{RecvBatch, UdpLink, MAX_BATCH};
    use std::collections::VecDeque;

    /// A forwarder on the engine: packets from `input` are queued for output and sent on to
    /// `out`, quota by quota.
    #[test]
    fn forwards_everything_with_one_wakeup_per_burst() {
        let (mut src, mut input) = UdpLink::loopback_pair().unwrap();
        let (mut out, mut sink) = UdpLink::loopback_pair().unwrap();
        input.set_recv_buffer_size(1 << 20).unwrap();
        sink.set_recv_buffer_size(1 << 20).unwrap();
        let mut engine = Engine::new(PollConfig::default()).unwrap();
        let rx = engine.add_receive(&input).unwrap();
        let tx = engine.add_transmit();
        let data: Vec<Vec<u8>> = (0..500u32).map(|i| i.to_be_bytes().to_vec()).collect();
        for chunk in data.chunks(50) {
            let refs: Vec<&[u8]> = chunk.iter().map(Vec::as_slice).collect();
            src.send_batch(&refs).unwrap();
        }
        let mut batch = RecvBatch::new(MAX_BATCH, 2048);
        let mut queue: VecDeque<Vec<u8>> = VecDeque::new();
        let mut pending: VecDeque<Vec<u8>> = VecDeque::new();
        let deadline = Instant::now() + Duration::from_millis(300);
        engine
            .run_until(Some(deadline), |ctl, s, quota| {
                if s == rx {
                    // Take at most `quota` datagrams: refill the local batch only when empty.
                    let mut handled = 0;
                    while handled < quota {
                        if pending.is_empty() {
                            input.try_recv(&mut batch)?;
                            pending.extend(batch.iter().map(<[u8]>::to_vec));
                            if pending.is_empty() {
                                break;
                            }
                        }
                        if let Some(p) = pending.pop_front() {
                            queue.push_back(p);
                            handled += 1;
                        }
                    }
                    if !queue.is_empty() {
                        ctl.wake(tx);
                    }
                    Ok(Served {
                        handled,
                        drained: handled < quota && pending.is_empty(),
                    })
                } else {
                    let n = queue.len().min(quota);
                    let refs: Vec<Vec<u8>> = queue.drain(..n).collect();
                    let views: Vec<&[u8]> = refs.iter().map(Vec::as_slice).collect();
                    let mut sent = 0;
                    while sent < views.len() {
                        sent += out.send_batch(&views[sent..])?;
                    }
                    Ok(Served {
                        handled: n,
                        drained: queue.is_empty(),
                    })
                }
            })
            .unwrap();
        let mut got = Vec::new();
        while sink.try_recv(&mut batch).unwrap() > 0 {
            got.extend(batch.iter().map(<[u8]>::to_vec));
        }
        assert_eq!(got, data, "everything forwarded, in order");
        let p = engine.poll_stats();
        assert!(p.interrupts >= 1 && p.interrupts < 20, "{p:?}");
        assert!(p.polls >= 500 / 8, "quota respected: {p:?}");
        assert!(engine.stats().sleeps >= 1);
    }

    #[test]
    fn inhibited_input_stays_in_the_socket_and_is_dropped_by_the_kernel() {
        let (mut src, mut input) = UdpLink::loopback_pair().unwrap();
        // Room for a few dozen datagrams: more than the watermark, fewer than are sent.
        input.set_recv_buffer_size(1 << 16).unwrap();
        input.set_drop_counting(true).unwrap();
        let mut engine = Engine::new(PollConfig {
            feedback_timeout: Duration::from_secs(10),
            ..PollConfig::default()
        })
        .unwrap();
        let rx = engine.add_receive(&input).unwrap();
        let q = engine.add_queue(Watermarks::seed(32)).unwrap();
        // A consumer that never drains: the queue fills, input is inhibited.
        let mut consumer_queue = 0usize;
        let d = [1u8; 500];
        for _ in 0..40 {
            src.send_batch(&vec![&d[..]; 50]).unwrap();
        }
        let mut batch = RecvBatch::new(1, 2048);
        engine
            .run_until(
                Some(Instant::now() + Duration::from_millis(100)),
                |ctl, s, quota| {
                    assert_eq!(s, rx);
                    let mut handled = 0;
                    while handled < quota && ctl.input_allowed() {
                        if input.try_recv(&mut batch)? == 0 {
                            return Ok(Served {
                                handled,
                                drained: true,
                            });
                        }
                        consumer_queue += 1;
                        ctl.queue_len(q, consumer_queue);
                        handled += 1;
                    }
                    Ok(Served {
                        handled,
                        drained: false,
                    })
                },
            )
            .unwrap();
        assert_eq!(consumer_queue, 24, "input stopped at the high watermark");
        assert_eq!(engine.poll_stats().feedback_inhibits, 1);
        // The rest stayed in the socket or was dropped by the kernel, never read. (The drop
        // count comes with a datagram queued after the drops.)
        let mut drained = 0;
        while input.try_recv(&mut batch).unwrap() > 0 {
            drained += 1;
        }
        src.send_batch(&[b"x"]).unwrap();
        let got = input
            .recv_timeout(&mut batch, Some(Duration::from_secs(5)))
            .unwrap();
        assert_eq!(got, 1);
        assert!(drained > 0, "some stayed in the socket");
        assert!(input.stats().kernel_drops > 0, "{:?}", input.stats());
        assert_eq!(24 + drained + input.stats().kernel_drops as usize, 2000);
    }

    /// Resident memory of this process, bytes.
    fn rss() -> u64 {
        std::fs::read_to_string("/proc/self/statm")
            .ok()
            .and_then(|s| s.split_whitespace().nth(1)?.parse::<u64>().ok())
            .map_or(0, |pages| pages * 4096)
    }

    /// A garbage flood on one socket neither starves another socket's valid traffic (the
    /// round-robin) nor grows memory; the garbage is counted and dropped.
    #[test]
    fn a_flood_on_one_source_does_not_starve_another() {
        let any = std::net::SocketAddr::from((std::net::Ipv4Addr::LOCALHOST, 0));
        let mut flooded = UdpLink::bind(any).unwrap();
        let mut valid = UdpLink::bind(any).unwrap();
        flooded.set_drop_counting(true).unwrap();
        let (flood_to, valid_to) = (flooded.local_addr(), valid.local_addr());
        let mut engine = Engine::new(PollConfig::default()).unwrap();
        let a = engine.add_receive(&flooded).unwrap();
        let b = engine.add_receive(&valid).unwrap();
        let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let flood = {
            let stop = stop.clone();
            std::thread::spawn(move || {
                let mut l = UdpLink::bind(any).unwrap();
                let junk = [0xffu8; 200];
                let views = vec![&junk[..]; MAX_BATCH];
                let mut n = 0u64;
                while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                    n += l.send_batch_to(&views, flood_to).unwrap_or(0) as u64;
                }
                n
            })
        };
        let sender = std::thread::spawn(move || {
            let mut l = UdpLink::bind(any).unwrap();
            for i in 0..300u32 {
                let mut d = b"VALID".to_vec();
                d.extend_from_slice(&i.to_be_bytes());
                l.send_batch_to(&[&d], valid_to).unwrap();
                std::thread::sleep(Duration::from_millis(1));
            }
        });
        let before = rss();
        let (mut garbage, mut good) = (0u64, Vec::new());
        let mut batch = RecvBatch::new(MAX_BATCH, 2048);
        // Until the valid sender is done (and a little after), in slices.
        let mut after = 0;
        while after < 5 {
            if sender.is_finished() {
                after += 1;
            }
            let slice = Instant::now() + Duration::from_millis(20);
            engine
                .run_until(Some(slice), |_, s, quota| {
                    let link = if s == a { &mut flooded } else { &mut valid };
                    let n = link.try_recv_some(&mut batch, quota)?;
                    for d in batch.iter() {
                        // Per-packet work before the verdict, as a real parser would spend.
                        let t = Instant::now() + Duration::from_micros(2);
                        while Instant::now() < t {}
                        match d.strip_prefix(b"VALID") {
                            Some(rest) if s == b => good.push(rest.to_vec()),
                            _ => garbage += 1,
                        }
                    }
                    Ok(Served {
                        handled: n,
                        drained: n < quota,
                    })
                })
                .unwrap();
        }
        stop.store(true, std::sync::atomic::Ordering::Relaxed);
        let flooded_with = flood.join().unwrap();
        sender.join().unwrap();
        let want: Vec<Vec<u8>> = (0..300u32).map(|i| i.to_be_bytes().to_vec()).collect();
        assert!(
            good == want,
            "every valid datagram, in order, despite the flood: got {} of {}",
            good.len(),
            want.len()
        );
        assert!(
            garbage > 0 && flooded_with > garbage,
            "{garbage} of {flooded_with}"
        );
        let grew = rss().saturating_sub(before);
        assert!(grew <= 16 << 20, "memory grew {grew} bytes under the flood");
    }

    /// A flooded source over its own share waits for the next period: the engine sleeps
    /// (leaving the CPU to other threads) although the flood never stops.
    #[test]
    fn a_flooded_source_over_its_share_lets_the_engine_sleep() {
        let any = std::net::SocketAddr::from((std::net::Ipv4Addr::LOCALHOST, 0));
        let mut flooded = UdpLink::bind(any).unwrap();
        let to = flooded.local_addr();
        let mut engine = Engine::new(PollConfig::default()).unwrap();
        let a = engine.add_receive(&flooded).unwrap();
        engine.set_share(a, 0.1).unwrap();
        assert!(engine.set_share(a, 0.0).is_err());
        let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let flood = {
            let stop = stop.clone();
            std::thread::spawn(move || {
                let mut l = UdpLink::bind(any).unwrap();
                let junk = [0xffu8; 200];
                let views = vec![&junk[..]; MAX_BATCH];
                while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                    let _ = l.send_batch_to(&views, to);
                }
            })
        };
        let mut batch = RecvBatch::new(MAX_BATCH, 2048);
        let mut taken = 0;
        engine
            .run_until(
                Some(Instant::now() + Duration::from_millis(200)),
                |_, _, quota| {
                    let n = flooded.try_recv_some(&mut batch, quota)?;
                    // Work worth a share: 20 µs per datagram.
                    let t = Instant::now() + Duration::from_micros(20) * n as u32;
                    while Instant::now() < t {}
                    taken += n;
                    Ok(Served {
                        handled: n,
                        drained: n < quota,
                    })
                },
            )
            .unwrap();
        stop.store(true, std::sync::atomic::Ordering::Relaxed);
        flood.join().unwrap();
        let p = engine.poll_stats();
        assert!(taken > 0);
        assert!(p.share_inhibits >= 5, "{p:?}");
        assert!(engine.stats().sleeps >= 5, "{:?}", engine.stats());
    }

    #[test]
    fn a_bad_configuration_is_an_error() {
        let e = Engine::new(PollConfig {
            quota: Some(0),
            ..PollConfig::default()
        })
        .err()
        .unwrap();
        assert_eq!(e.kind(), io::ErrorKind::InvalidInput);
        assert!(e.to_string().contains("quota"));
    }
}
