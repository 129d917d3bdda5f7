//! `UdpDriver`: a thin driver that runs a sans-IO [`Connection`] over a [`UdpLink`].
//!
//! The protocol core never touches a socket or a clock; this is where
//! they meet. A poll receives whatever datagrams are queued (one `recvmmsg`), hands each to
//! the connection, runs due timers and flushes what the connection wants to send (in
//! `sendmmsg` batches). Time is `Instant` since the driver started, as [`Time`].

use crate::waiting::{unrefused, Took, WaitingBuffer};
use phyllo::conn::Connection;
use phyllo::msg::Msg;
use phyllo::stack::{DynStack, LayerSet};
use phyllo::time::Time;
use phyllo_udp::udp::{RecvBatch, UdpLink, MAX_BATCH};
use std::io;
use std::time::Instant;

/// The largest datagram a single receive takes whole (longer ones are truncated, counted
/// and dropped): above any MTU-sized datagram the accelerator or the frag layer sends, and
/// what a fresh pooled buffer holds after its headroom.
const RX_CAPACITY: usize = phyllo::msg::FRESH_TAILROOM;

/// Empty receives between clock reads while idle ([`UdpDriver::poll`]).
const IDLE_CLOCK_SPINS: u32 = 16;

/// A connection bound to a UDP socket.
pub struct UdpDriver<S: LayerSet = DynStack> {
    /// The connection (send through it, poll its deliveries).
    pub conn: Connection<S>,
    link: UdpLink,
    /// The pooled buffer the next single receive goes into (the latency case, waiting for
    /// the next datagram: a plain `recvfrom` straight into the buffer the connection then
    /// processes, with no copy; a 64-slot `recvmmsg` costs ~3 µs more per round trip on
    /// loopback, measured with `phyllo-lab rtt`).
    rx_one: WaitingBuffer,
    /// Many slots: used while datagrams keep arriving back to back.
    rx: RecvBatch,
    /// Consecutive receives that found something: from two on, more is probably queued.
    streak: u32,
    /// Receives that found nothing (see [`UdpDriver::idle_tick`]).
    idle_spins: u32,
    /// See [`UdpDriver::recent`].
    recent: Time,
    epoch: Instant,
}

impl<S: LayerSet> UdpDriver<S> {
    /// Drive `conn` over `link` (which should be connected to the peer). Time starts at
    /// `epoch`: give both ends of a test the same one.
    pub fn new(conn: Connection<S>, link: UdpLink, epoch: Instant) -> UdpDriver<S> {
        UdpDriver {
            conn,
            link,
            rx_one: WaitingBuffer::default(),
            rx: RecvBatch::new(MAX_BATCH, RX_CAPACITY),
            streak: 0,
            idle_spins: 0,
            recent: Time::ZERO,
            epoch,
        }
    }

    /// Now, on the connection's clock.
    #[inline]
    pub fn now(&self) -> Time {
        self.time_of(Instant::now())
    }

    /// The socket.
    pub fn link(&self) -> &UdpLink {
        &self.link
    }

    /// Send everything the connection has queued, in batches. Datagrams the socket cannot
    /// take now (full buffer) stay queued in the connection for the next flush. The link
    /// borrows the datagrams ([`Connection::transmit_with`]), so an accelerated send's
    /// retransmission copy is the datagram itself.
    pub fn flush(&mut self) -> io::Result<()> {
        let link = &mut self.link;
        while self.conn.transmit_ready() > 0 {
            let mut batch = 0;
            let sent = self.conn.transmit_with(MAX_BATCH, |queued| {
                batch = queued.len();
                // One datagram: plain send(2); sendmmsg(2) costs ~1 µs more per call on
                // loopback. And no 64-entry slice array to fill for it (1 KiB of stack).
                link.set_batching(batch > 1);
                let r = if let [one] = queued {
                    link.send_batch(&[one.data()])
                } else {
                    let mut slices: [&[u8]; MAX_BATCH] = [&[]; MAX_BATCH];
                    for (s, m) in slices.iter_mut().zip(queued) {
                        *s = m.data();
                    }
                    link.send_batch(&slices[..batch])
                };
                match r {
                    // The peer's socket is gone (loopback ICMP): the reliability layer retries.
                    Err(e) if e.kind() == io::ErrorKind::ConnectionRefused => Ok(batch),
                    r => r,
                }
            })?;
            if sent == 0 || sent < batch {
                break;
            }
        }
        Ok(())
    }

    /// One round: receive what is queued (without waiting), run due timers, flush. Returns
    /// the number of datagrams received.
    pub fn poll(&mut self) -> io::Result<usize> {
        self.poll_at(None)
    }

    /// [`UdpDriver::poll`] with the time already known (`None`: read the clock when it is
    /// needed).
    fn poll_at(&mut self, at: Option<Time>) -> io::Result<usize> {
        // From the second receive in a row that found something, more is probably queued:
        // a batch, handled at the current time.
        let n = if self.streak >= 2 {
            self.poll_batch()?
        } else {
            self.poll_one(at)?
        };
        self.streak = if n > 0 {
            self.streak.saturating_add(1)
        } else {
            0
        };
        if n == 0 && self.conn.needs_post_process() {
            // Idle: the accelerator's deferred post-processing (and packed backlog) runs now,
            // off the critical path.
            let now = at.unwrap_or_else(|| self.now());
            self.conn.post_process(now);
            self.flush()?;
        }
        Ok(n)
    }

    /// Receive whatever is queued in one `recvmmsg`, hand it to the connection, run due
    /// timers and flush.
    fn poll_batch(&mut self) -> io::Result<usize> {
        self.link.set_batching(true);
        let n = unrefused(self.link.try_recv(&mut self.rx))?;
        self.absorb_and_tick(n)?;
        Ok(n)
    }

    /// Receive one datagram straight into a pooled buffer (no copy), hand it to the
    /// connection, run due timers and flush.
    fn poll_one(&mut self, at: Option<Time>) -> io::Result<usize> {
        let conn = &mut self.conn;
        match self
            .rx_one
            .recv(&mut self.link, RX_CAPACITY, || conn.alloc())?
        {
            Took::Datagram(m, _) => {
                let now = at.unwrap_or_else(|| self.now());
                self.conn.handle_msg(now, m);
                self.tick_at(Some(now))?;
                Ok(1)
            }
            // Longer than any datagram a peer sends (the link counted the truncation), or
            // nothing: the buffer serves the next receive.
            took => {
                match at {
                    Some(now) => self.tick_at(Some(now))?,
                    None => self.idle_tick()?,
                }
                Ok(usize::from(matches!(took, Took::CutShort)))
            }
        }
    }

    /// Hand the `n` datagrams just received to the connection, run due timers and flush; one
    /// clock read serves the datagrams and the timers.
    fn absorb_and_tick(&mut self, n: usize) -> io::Result<()> {
        if n == 0 {
            return self.tick();
        }
        let now = self.now();
        self.absorb(now, n);
        self.tick_at(Some(now))
    }

    fn absorb(&mut self, now: Time, n: usize) {
        let batch = &self.rx;
        for i in 0..n {
            if batch.is_truncated(i) {
                continue;
            }
            if let Some(d) = batch.get(i) {
                self.conn.handle_datagram(now, d);
            }
        }
    }

    /// [`UdpDriver::tick`] after a receive that found nothing: the clock is read only every
    /// [`IDLE_CLOCK_SPINS`]th time, so a busy-polling driver spins on the receive alone
    /// (measured here: a clock read ~26 ns, an empty receive ~360 ns; a datagram that
    /// arrives during the read waits for the next receive). Timers fire at most that many
    /// empty receives late: ~6 µs.
    fn idle_tick(&mut self) -> io::Result<()> {
        self.idle_spins = self.idle_spins.wrapping_add(1);
        if !self.idle_spins.is_multiple_of(IDLE_CLOCK_SPINS) {
            return Ok(());
        }
        self.tick()
    }

    /// Run due timers and flush.
    pub fn tick(&mut self) -> io::Result<()> {
        let now = self.conn.poll_timeout().map(|_| self.now());
        self.tick_at(now)
    }

    /// [`UdpDriver::tick`] with the clock already read (`None`: no timer is armed).
    fn tick_at(&mut self, now: Option<Time>) -> io::Result<()> {
        if let (Some(t), Some(now)) = (self.conn.poll_timeout(), now) {
            if t <= now {
                self.conn.handle_timeout(now);
            }
        }
        self.flush()
    }

    /// Send an application message (flushed at once). On `WouldBlock` the caller polls and
    /// tries again.
    pub fn send(&mut self, data: &[u8]) -> Result<(), phyllo::conn::SendError> {
        let now = self.now();
        self.conn.send(now, data)?;
        let _ = self.flush();
        Ok(())
    }

    /// Send an application message already in a pooled buffer, without copying it
    /// ([`Connection::send_msg`]; e.g. a delivered message echoed back), flushed at once.
    /// Check [`Connection::can_send`] first: on an error the buffer goes back to the pool.
    pub fn send_msg(&mut self, m: Msg) -> Result<(), phyllo::conn::SendError> {
        let now = self.now();
        self.send_msg_at(now, m)
    }

    /// [`UdpDriver::send_msg`] at a time the application already has (from
    /// [`UdpDriver::time_of`] or [`UdpDriver::recent`]), sparing a clock read (~25 ns) on
    /// the send's critical path, as an event loop passes its time along.
    pub fn send_msg_at(&mut self, now: Time, m: Msg) -> Result<(), phyllo::conn::SendError> {
        self.conn.send_msg(now, m)?;
        let _ = self.flush();
        Ok(())
    }

    /// `at` on the connection's clock.
    pub fn time_of(&self, at: Instant) -> Time {
        Time(at.saturating_duration_since(self.epoch).as_nanos() as u64)
    }

    /// The time the driver last read from the clock: when a busy wait ([`recv_busy`]) last
    /// looked (at most `IDLE_CLOCK_SPINS` (16) receives before it returned) or later.
    ///
    /// [`recv_busy`]: UdpDriver::recv_busy
    pub fn recent(&self) -> Time {
        self.recent
    }

    /// Busy-poll until a message is delivered or `deadline` passes.
    ///
    /// The clock is read when the wait starts and then every `IDLE_CLOCK_SPINS` (16) receives,
    /// never right after a datagram arrives: a single datagram is handled at the time of the
    /// last read, at most that many receives old (~6 µs; bursts, received in batches,
    /// read the clock as they come), which keeps a clock read (~25 ns) off the critical path
    /// of every delivery. Protocol timers run in hundreds of µs and more; a few µs do not
    /// change them.
    pub fn recv_busy(&mut self, deadline: Instant) -> io::Result<Option<Msg>> {
        let end = self.time_of(deadline);
        self.recent = self.now();
        let mut spins = 0u32;
        loop {
            if let Some(m) = self.conn.poll_delivery() {
                return Ok(Some(m));
            }
            if self.poll_at(Some(self.recent))? == 0 {
                std::hint::spin_loop();
            }
            spins = spins.wrapping_add(1);
            if spins.is_multiple_of(IDLE_CLOCK_SPINS) {
                self.recent = self.now();
                if self.recent >= end {
                    return Ok(self.conn.poll_delivery());
                }
            }
        }
    }

    /// Block in the kernel (at most until the connection's next deadline or `deadline`) until
    /// a message is delivered.
    pub fn recv_blocking(&mut self, deadline: Instant) -> io::Result<Option<Msg>> {
        loop {
            if let Some(m) = self.conn.poll_delivery() {
                return Ok(Some(m));
            }
            if self.conn.needs_post_process() {
                let now = self.now();
                self.conn.post_process(now);
                self.flush()?;
                continue;
            }
            let now = Instant::now();
            if now >= deadline {
                return Ok(None);
            }
            let mut wait = deadline - now;
            if let Some(t) = self.conn.poll_timeout() {
                wait = wait.min(t.since(self.now()));
            }
            self.link.set_batching(true);
            let n = unrefused(self.link.recv_timeout(
                &mut self.rx,
                Some(wait.max(std::time::Duration::from_micros(1))),
            ))?;
            self.absorb_and_tick(n)?;
        }
    }
}
