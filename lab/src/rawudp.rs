//! Raw-UDP baselines on loopback: a ping-pong and a one-way stream with no phyllo code in the
//! data path.
//!
//! A timing is a ratio against a baseline measured in the same run. The
//! `rtt` and `stream` experiments run phyllo over UDP and divide by these numbers.
//!
//! - [`raw_pingpong`]: two sockets on `127.0.0.1`, an echo thread, both sides busy-polling
//!   non-blocking sockets; one datagram each way per round trip; returns every round trip's
//!   nanoseconds.
//! - [`raw_stream`]: a sender thread pushes datagrams in `sendmmsg` batches through a
//!   [`UdpLink`]; the receiver counts what arrives. It is UDP: datagrams the receiver cannot
//!   keep up with are dropped by the kernel and the rate is what was *delivered*.
//!
//! Everything is bounded in time: every loop watches a deadline, so a lost datagram or a stuck
//! peer ends a run early (flagged `timed_out`) instead of hanging it.

use std::io;
use std::net::{Ipv4Addr, SocketAddr, UdpSocket};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Barrier};
use std::thread;
use std::time::{Duration, Instant};

use phyllo_udp::offload::{TxQueue, MAX_SEGMENTS};
use phyllo_udp::udp::{LinkStats, RecvBatch, UdpLink, MAX_BATCH, MAX_UDP_PAYLOAD};

/// Why a baseline could not run.
#[derive(Debug, thiserror::Error)]
pub enum RawUdpError {
    /// The payload does not fit in one UDP datagram.
    #[error("payload of {0} bytes exceeds the UDP maximum of {MAX_UDP_PAYLOAD}")]
    PayloadTooLarge(usize),
    /// A configuration value is out of range (the message names it).
    #[error("invalid configuration: {0}")]
    InvalidConfig(&'static str),
    /// A socket operation failed.
    #[error("socket error: {0}")]
    Io(#[from] io::Error),
    /// The helper thread (echo or sender) panicked.
    #[error("the {0} thread panicked")]
    ThreadPanicked(&'static str),
}

/// Order statistics of a set of nanosecond samples.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Summary {
    /// Number of samples.
    pub count: usize,
    /// Smallest sample.
    pub min_ns: u64,
    /// Median (the lower middle sample for an even count).
    pub median_ns: u64,
    /// 99th percentile (nearest rank).
    pub p99_ns: u64,
    /// Largest sample.
    pub max_ns: u64,
    /// Arithmetic mean.
    pub mean_ns: f64,
}

impl Summary {
    /// Summarise `samples`; `None` when there are none. Sorts a copy.
    pub fn from_samples(samples: &[u64]) -> Option<Summary> {
        if samples.is_empty() {
            return None;
        }
        let mut s = samples.to_vec();
        s.sort_unstable();
        let n = s.len();
        // Nearest-rank percentile: the smallest sample with at least p % of samples <= it.
        let rank = |p: usize| s[((n * p).div_ceil(100)).clamp(1, n) - 1];
        Some(Summary {
            count: n,
            min_ns: s[0],
            median_ns: s[(n - 1) / 2],
            p99_ns: rank(99),
            max_ns: s[n - 1],
            mean_ns: s.iter().map(|&x| x as f64).sum::<f64>() / n as f64,
        })
    }
}

/// Parameters of [`raw_pingpong`].
#[derive(Clone, Debug)]
pub struct PingPongConfig {
    /// Round trips measured.
    pub rounds: usize,
    /// Payload bytes per datagram (0 to [`MAX_UDP_PAYLOAD`]). From 8 bytes on, the first 8
    /// carry a sequence number so a late reply to a lost round is never mistaken for the
    /// current one.
    pub payload: usize,
    /// Round trips run first and not measured (caches, branch predictors, frequency).
    pub warmup: usize,
    /// A round without a reply after this long is counted lost and sent again.
    pub round_timeout: Duration,
    /// The whole run stops after this long, complete or not.
    pub deadline: Duration,
    /// Start round trips at most this often (seed 004 Figure 5's offered rate); behind
    /// schedule, the next ones start at once. `None`: back to back.
    pub pace: Option<Duration>,
}

impl PingPongConfig {
    /// `rounds` round trips of `payload` bytes, with 10 % warm-up (at most 1000), a 100 ms
    /// round timeout and a 60 s deadline.
    pub fn new(rounds: usize, payload: usize) -> Self {
        PingPongConfig {
            rounds,
            payload,
            warmup: (rounds / 10).min(1000),
            round_timeout: Duration::from_millis(100),
            deadline: Duration::from_secs(60),
            pace: None,
        }
    }
}

/// What [`raw_pingpong`] measured.
#[derive(Clone, Debug, Default)]
pub struct PingPongResult {
    /// Nanoseconds of every measured round trip, in order.
    pub samples_ns: Vec<u64>,
    /// Rounds whose datagram (or reply) was lost and sent again.
    pub lost_rounds: u64,
    /// True when the deadline ended the run before all rounds were measured.
    pub timed_out: bool,
    /// From the first measured round's start to the last one's end.
    pub span: Duration,
}

impl PingPongResult {
    /// Order statistics of the samples.
    pub fn summary(&self) -> Option<Summary> {
        Summary::from_samples(&self.samples_ns)
    }

    /// Round trips per second achieved over the measured rounds.
    pub fn achieved_rate(&self) -> f64 {
        self.samples_ns.len() as f64 / self.span.as_secs_f64().max(1e-9)
    }
}

fn check_payload(payload: usize) -> Result<(), RawUdpError> {
    if payload > MAX_UDP_PAYLOAD {
        Err(RawUdpError::PayloadTooLarge(payload))
    } else {
        Ok(())
    }
}

fn loopback_socket() -> io::Result<UdpSocket> {
    UdpSocket::bind(SocketAddr::from((Ipv4Addr::LOCALHOST, 0)))
}

/// Send one datagram on a non-blocking socket, spinning while the buffer is full, until `end`.
/// Returns false when the deadline passed first.
fn send_spin(sock: &UdpSocket, buf: &[u8], end: Instant) -> io::Result<bool> {
    loop {
        match sock.send(buf) {
            Ok(_) => return Ok(true),
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                if Instant::now() >= end {
                    return Ok(false);
                }
                std::hint::spin_loop();
            }
            // Loopback may report an earlier ICMP error on the next send; try again.
            Err(e) if e.kind() == io::ErrorKind::ConnectionRefused => {
                if Instant::now() >= end {
                    return Ok(false);
                }
            }
            Err(e) => return Err(e),
        }
    }
}

/// Echo every datagram back, busy-polling, until `stop` is raised or `end` passes.
fn echo_loop(sock: &UdpSocket, stop: &AtomicBool, end: Instant) -> io::Result<u64> {
    let mut buf = vec![0u8; MAX_UDP_PAYLOAD + 1];
    let mut echoed = 0u64;
    let mut spins = 0u32;
    loop {
        match sock.recv(&mut buf) {
            Ok(n) => {
                if !send_spin(sock, &buf[..n], end)? {
                    return Ok(echoed);
                }
                echoed += 1;
            }
            Err(e)
                if e.kind() == io::ErrorKind::WouldBlock
                    || e.kind() == io::ErrorKind::ConnectionRefused =>
            {
                spins = spins.wrapping_add(1);
                if spins.is_multiple_of(256)
                    && (stop.load(Ordering::Relaxed) || Instant::now() >= end)
                {
                    return Ok(echoed);
                }
                std::hint::spin_loop();
            }
            Err(e) => return Err(e),
        }
    }
}

/// Raw UDP ping-pong between two sockets on `127.0.0.1`: `cfg.rounds` measured round trips of
/// `cfg.payload` bytes, echo thread and client both busy-polling.
///
/// Lost rounds are resent after `cfg.round_timeout`; the run ends at `cfg.deadline` even if
/// incomplete (`timed_out`), so it never hangs.
pub fn raw_pingpong(cfg: &PingPongConfig) -> Result<PingPongResult, RawUdpError> {
    check_payload(cfg.payload)?;
    if cfg.round_timeout.is_zero() {
        return Err(RawUdpError::InvalidConfig("round_timeout must be positive"));
    }
    let client = loopback_socket()?;
    let server = loopback_socket()?;
    client.connect(server.local_addr()?)?;
    server.connect(client.local_addr()?)?;
    client.set_nonblocking(true)?;
    server.set_nonblocking(true)?;

    let start = Instant::now();
    let end = start + cfg.deadline;
    let stop = Arc::new(AtomicBool::new(false));
    let echo = {
        let stop = Arc::clone(&stop);
        thread::Builder::new()
            .name("raw-udp-echo".into())
            .spawn(move || echo_loop(&server, &stop, end + Duration::from_millis(100)))?
    };

    let result = pingpong_client(&client, cfg, end);
    stop.store(true, Ordering::Relaxed);
    let echoed = echo
        .join()
        .map_err(|_| RawUdpError::ThreadPanicked("echo"))?;
    let result = result?;
    echoed?;
    Ok(result)
}

fn pingpong_client(
    sock: &UdpSocket,
    cfg: &PingPongConfig,
    end: Instant,
) -> Result<PingPongResult, RawUdpError> {
    let mut out = PingPongResult {
        samples_ns: Vec::with_capacity(cfg.rounds),
        ..Default::default()
    };
    let mut payload = vec![0xA5u8; cfg.payload];
    let mut reply = vec![0u8; MAX_UDP_PAYLOAD + 1];
    let tagged = cfg.payload >= 8;
    let mut next_start = Instant::now();
    let mut first = None;
    'rounds: for round in 0..(cfg.warmup + cfg.rounds) as u64 {
        if let Some(p) = cfg.pace {
            while Instant::now() < next_start {
                std::hint::spin_loop();
            }
            next_start += p;
        }
        if round == cfg.warmup as u64 {
            first = Some(Instant::now());
        }
        if tagged {
            payload[..8].copy_from_slice(&round.to_le_bytes());
        }
        loop {
            let t0 = Instant::now();
            if !send_spin(sock, &payload, end)? {
                out.timed_out = true;
                break 'rounds;
            }
            let round_end = (t0 + cfg.round_timeout).min(end);
            let mut spins = 0u32;
            let rtt = loop {
                match sock.recv(&mut reply) {
                    Ok(n) => {
                        if tagged && (n < 8 || reply[..8] != payload[..8]) {
                            continue; // a late reply to an earlier, resent round
                        }
                        break Some(t0.elapsed());
                    }
                    Err(e)
                        if e.kind() == io::ErrorKind::WouldBlock
                            || e.kind() == io::ErrorKind::ConnectionRefused =>
                    {
                        spins = spins.wrapping_add(1);
                        if spins.is_multiple_of(64) && Instant::now() >= round_end {
                            break None;
                        }
                        std::hint::spin_loop();
                    }
                    Err(e) => return Err(e.into()),
                }
            };
            match rtt {
                Some(rtt) => {
                    if round >= cfg.warmup as u64 {
                        out.samples_ns.push(rtt.as_nanos() as u64);
                        out.span = first.map_or(Duration::ZERO, |f| f.elapsed());
                    }
                    continue 'rounds;
                }
                None if Instant::now() >= end => {
                    out.timed_out = true;
                    break 'rounds;
                }
                None => out.lost_rounds += 1,
            }
        }
    }
    Ok(out)
}

/// Parameters of [`raw_stream`].
#[derive(Clone, Debug)]
pub struct StreamConfig {
    /// Datagrams the sender sends.
    pub messages: u64,
    /// Payload bytes per datagram (1 to [`MAX_UDP_PAYLOAD`]).
    pub payload: usize,
    /// Datagrams per `sendmmsg` call (1 to [`MAX_BATCH`]).
    pub batch: usize,
    /// Send with `sendmmsg` (true) or one `send` per datagram (false), to measure batching.
    pub batching: bool,
    /// Use segmentation offload ([`phyllo_udp::offload`]): the sender queues runs of datagrams
    /// for segmented sends and the receiver takes coalesced buffers (each where the kernel
    /// can). `batch` then counts segmented messages per `sendmmsg`.
    pub offload: bool,
    /// Receive buffer requested for the receiving socket (`SO_RCVBUF`).
    pub recv_buffer: usize,
    /// After the sender is done, the receiver stops once nothing has arrived for this long.
    pub idle_timeout: Duration,
    /// The whole run stops after this long, complete or not.
    pub deadline: Duration,
}

impl StreamConfig {
    /// `messages` datagrams of `payload` bytes in batches of 32, a 4 MiB receive buffer, a
    /// 50 ms idle timeout and a 60 s deadline.
    pub fn new(messages: u64, payload: usize) -> Self {
        StreamConfig {
            messages,
            payload,
            batch: 32,
            batching: true,
            offload: false,
            recv_buffer: 4 << 20,
            idle_timeout: Duration::from_millis(50),
            deadline: Duration::from_secs(60),
        }
    }
}

/// What [`raw_stream`] measured.
#[derive(Clone, Debug, Default)]
pub struct StreamResult {
    /// Datagrams the kernel accepted from the sender.
    pub sent: u64,
    /// Datagrams the receiver got.
    pub received: u64,
    /// From the common start to the last datagram received.
    pub recv_elapsed: Duration,
    /// From the common start to the sender's last `sendmmsg`.
    pub send_elapsed: Duration,
    /// Send system calls the sender made (`sendmmsg`, or one per datagram without batching).
    pub send_calls: u64,
    /// True when the deadline ended the run.
    pub timed_out: bool,
    /// Runs the sender's kernel took as segmented messages.
    pub segmented_sends: u64,
    /// Buffers the receiver got holding more than one datagram.
    pub coalesced_receives: u64,
}

impl StreamResult {
    /// Datagrams delivered per second (0 when nothing arrived).
    pub fn msgs_per_s(&self) -> f64 {
        rate(self.received, self.recv_elapsed)
    }

    /// Payload bytes delivered per second for datagrams of `payload` bytes.
    pub fn bytes_per_s(&self, payload: usize) -> f64 {
        self.msgs_per_s() * payload as f64
    }

    /// Datagrams sent per second.
    pub fn sent_per_s(&self) -> f64 {
        rate(self.sent, self.send_elapsed)
    }

    /// Fraction of sent datagrams that never arrived.
    pub fn loss(&self) -> f64 {
        if self.sent == 0 {
            0.0
        } else {
            1.0 - self.received as f64 / self.sent as f64
        }
    }
}

fn rate(count: u64, elapsed: Duration) -> f64 {
    let s = elapsed.as_secs_f64();
    if count == 0 || s <= 0.0 {
        0.0
    } else {
        count as f64 / s
    }
}

/// Raw one-way UDP stream on `127.0.0.1`: a sender thread sends `cfg.messages` datagrams of
/// `cfg.payload` bytes in `sendmmsg` batches, the receiver counts what arrives. Loss is
/// tolerated and reported; the run is bounded by `cfg.deadline`.
pub fn raw_stream(cfg: &StreamConfig) -> Result<StreamResult, RawUdpError> {
    check_payload(cfg.payload)?;
    if cfg.payload == 0 {
        return Err(RawUdpError::InvalidConfig(
            "payload must be at least 1 byte",
        ));
    }
    if !(1..=MAX_BATCH).contains(&cfg.batch) {
        return Err(RawUdpError::InvalidConfig("batch must be 1..=MAX_BATCH"));
    }
    let (mut tx, mut rx) = UdpLink::loopback_pair()?;
    rx.set_recv_buffer_size(cfg.recv_buffer)?;
    tx.set_nonblocking(true);

    let barrier = Arc::new(Barrier::new(2));
    let done = Arc::new(AtomicBool::new(false));
    let messages = cfg.messages;
    let payload = cfg.payload;
    let batch = cfg.batch;
    tx.set_batching(cfg.batching);
    tx.set_gso(cfg.offload);
    let offload = cfg.offload && rx.set_gro(true)?;
    let to = rx.local_addr();
    let deadline = cfg.deadline;
    let sender = {
        let barrier = Arc::clone(&barrier);
        let done = Arc::clone(&done);
        thread::Builder::new().name("raw-udp-sender".into()).spawn(
            move || -> io::Result<(u64, Instant, LinkStats)> {
                let data = vec![0x5Au8; payload];
                let refs: Vec<&[u8]> = vec![data.as_slice(); batch];
                // With offload: `batch` runs as long as the kernel takes them.
                let per_run = (MAX_UDP_PAYLOAD / payload).clamp(1, MAX_SEGMENTS) as u64;
                let mut queue = TxQueue::new();
                barrier.wait();
                let end = Instant::now() + deadline;
                let mut sent = 0u64;
                let r = (|| {
                    while sent < messages && Instant::now() < end {
                        if offload {
                            if queue.is_empty() {
                                let want = (messages - sent).min(batch as u64 * per_run);
                                for _ in 0..want {
                                    queue.push(to, &data);
                                }
                            }
                            sent += tx.send_queue(&mut queue)? as u64;
                        } else {
                            let want = (messages - sent).min(batch as u64) as usize;
                            sent += tx.send_batch(&refs[..want])? as u64;
                        }
                    }
                    Ok(())
                })();
                let finished = Instant::now();
                done.store(true, Ordering::Release);
                r.map(|()| (sent, finished, tx.stats()))
            },
        )?
    };

    let mut rb = RecvBatch::new(MAX_BATCH, if offload { 65_536 } else { payload });
    barrier.wait();
    let start = Instant::now();
    let end = start + cfg.deadline;
    let mut received = 0u64;
    let mut last = start;
    let mut timed_out = false;
    let recv_result = (|| -> io::Result<()> {
        loop {
            let now = Instant::now();
            if now >= end {
                timed_out = true;
                return Ok(());
            }
            if received >= messages
                || (done.load(Ordering::Acquire) && now.duration_since(last) >= cfg.idle_timeout)
            {
                return Ok(());
            }
            if rx.recv_timeout(&mut rb, Some(Duration::from_millis(10)))? > 0 {
                received += rb.datagrams().count() as u64;
                last = Instant::now();
            }
        }
    })();
    // Wake-ups after `done` only come from the 10 ms receive timeout, so `last` may trail
    // `done` by the idle timeout: it is the time of the last *datagram*, not of the check.
    let joined = sender
        .join()
        .map_err(|_| RawUdpError::ThreadPanicked("sender"))?;
    recv_result?;
    let (sent, finished, tx_stats) = joined?;
    Ok(StreamResult {
        sent,
        received,
        recv_elapsed: last.saturating_duration_since(start),
        send_elapsed: finished.saturating_duration_since(start),
        send_calls: tx_stats.send_calls,
        timed_out: timed_out || sent < messages,
        segmented_sends: tx_stats.segmented_sends,
        coalesced_receives: rx.stats().coalesced_receives,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn summary_order_statistics() {
        let s = Summary::from_samples(&(1..=100).rev().collect::<Vec<u64>>()).unwrap();
        assert_eq!(s.count, 100);
        assert_eq!(s.min_ns, 1);
        assert_eq!(s.median_ns, 50);
        assert_eq!(s.p99_ns, 99);
        assert_eq!(s.max_ns, 100);
        assert!((s.mean_ns - 50.5).abs() < 1e-9);
        assert_eq!(Summary::from_samples(&[]), None);
        assert_eq!(Summary::from_samples(&[7]).unwrap().p99_ns, 7);
    }

    #[test]
    fn raw_pingpong_1000_rounds_gives_1000_positive_samples() {
        let r = raw_pingpong(&PingPongConfig::new(1000, 64)).unwrap();
        assert!(!r.timed_out);
        assert_eq!(r.samples_ns.len(), 1000);
        assert!(r.samples_ns.iter().all(|&s| s > 0));
        assert!(r.summary().unwrap().median_ns > 0);
    }

    #[test]
    fn raw_pingpong_untagged_small_payload() {
        let r = raw_pingpong(&PingPongConfig::new(50, 1)).unwrap();
        assert_eq!(r.samples_ns.len(), 50);
    }

    #[test]
    fn raw_pingpong_rejects_oversize_payload() {
        assert!(matches!(
            raw_pingpong(&PingPongConfig::new(1, MAX_UDP_PAYLOAD + 1)),
            Err(RawUdpError::PayloadTooLarge(_))
        ));
    }

    #[test]
    fn raw_stream_counts_delivered_datagrams() {
        let mut cfg = StreamConfig::new(20_000, 8);
        cfg.deadline = Duration::from_secs(20);
        let r = raw_stream(&cfg).unwrap();
        assert_eq!(r.sent, 20_000);
        assert!(r.received > 0 && r.received <= r.sent);
        assert!(r.msgs_per_s() > 0.0);
        assert!((0.0..1.0).contains(&r.loss()));
        assert!(
            r.send_calls < r.sent,
            "sendmmsg batches several datagrams per call"
        );
    }

    #[test]
    fn raw_stream_with_offload_segments_and_coalesces() {
        let mut cfg = StreamConfig::new(20_000, 1400);
        cfg.offload = true;
        let r = raw_stream(&cfg).unwrap();
        assert_eq!(r.sent, 20_000);
        assert!(r.received > 0 && r.received <= r.sent);
        if r.segmented_sends == 0 {
            eprintln!("SKIPPED PART: this kernel has no UDP_SEGMENT; sent one by one");
        } else {
            assert!(r.send_calls * 100 < r.sent, "{} calls", r.send_calls);
        }
    }

    #[test]
    fn raw_stream_without_batching_makes_one_call_per_datagram() {
        let mut cfg = StreamConfig::new(2_000, 8);
        cfg.batching = false;
        let r = raw_stream(&cfg).unwrap();
        assert_eq!(r.sent, 2_000);
        assert!(r.send_calls >= r.sent);
        assert!(r.received > 0);
    }

    #[test]
    fn raw_stream_rejects_bad_config() {
        let mut cfg = StreamConfig::new(10, 8);
        cfg.batch = 0;
        assert!(matches!(
            raw_stream(&cfg),
            Err(RawUdpError::InvalidConfig(_))
        ));
        assert!(matches!(
            raw_stream(&StreamConfig::new(10, 0)),
            Err(RawUdpError::InvalidConfig(_))
        ));
    }
}
