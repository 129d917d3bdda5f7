//! Serving a [`SessionSocket`] on the receive engine ([`receive`](crate::receive)): the
//! listening socket and every dedicated socket are receive sources, served a quota of
//! buffers at a time round-robin with the output, each buffer taken through its session and
//! the application in the same turn (process to completion), timers run between turns.

use crate::error::NetError;
use crate::receive::{Ctl, Engine, Served};
use crate::socket::SessionSocket;
use phyllo::poller::{PollConfig, SourceId};
use std::collections::HashMap;
use std::io;
use std::ops::ControlFlow;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

/// How [`SessionSocket::serve_on_engine`] shares the CPU between its sockets.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct EngineConfig {
    /// Receive buffers taken off a socket per turn (at least 1).
    pub quota: usize,
    /// The most of each 10 ms the listening sockets may take together, in (0, 1] (split evenly
    /// between them): under a flood of strangers' datagrams a socket waits out the rest of the
    /// period (the kernel drops what no longer fits) while established peers' own sockets are
    /// served.
    pub listen_share: f64,
}

impl Default for EngineConfig {
    /// A quota of 8 buffers; 5 % for the listening socket, which holds 200 handshakes per
    /// second with room to spare.
    fn default() -> Self {
        EngineConfig {
            quota: 8,
            listen_share: 0.05,
        }
    }
}

impl SessionSocket {
    /// Serve on the receive engine until `stop` is set (it is read between turns, at least
    /// every 50 ms) or `round` breaks. `round` is the application: it runs after every
    /// receive turn to take what the endpoint delivered and queue answers, which the engine's
    /// transmit source then sends; [`ControlFlow::Break`] ends serving after this turn.
    /// Established peers' dedicated sockets ([`bind_dedicating`](Self::bind_dedicating)) are
    /// registered as they open and removed as they close; the listening sockets
    /// ([`listeners`](Self::listeners)) get a quarter of the quota per turn each and at most
    /// `cfg.listen_share` of the CPU between them, so a flood on them leaves established peers
    /// served, and a flood from one source, which fills one of them, leaves the others'
    /// handshakes served too.
    pub fn serve_on_engine<F>(
        &mut self,
        cfg: &EngineConfig,
        stop: &AtomicBool,
        mut round: F,
    ) -> Result<(), NetError>
    where
        F: FnMut(
            &mut SessionSocket,
        ) -> Result<ControlFlow<()>, Box<dyn std::error::Error + Send + Sync>>,
    {
        let quota = cfg.quota.max(1);
        let mut engine = Engine::new(PollConfig {
            quota: Some(quota),
            ..PollConfig::default()
        })
        .map_err(NetError::Engine)?;
        // The listening sockets: a quarter of the quota each, and `listen_share` of the CPU
        // between them.
        let n = self.listeners();
        let mut listening: HashMap<SourceId, usize> = HashMap::new();
        for i in 0..n {
            let Some(sock) = self.listener(i) else {
                continue;
            };
            let s = engine.add_receive(sock).map_err(NetError::Engine)?;
            engine
                .set_quota(s, (quota / 4).max(1))
                .map_err(NetError::Engine)?;
            engine
                .set_share(s, cfg.listen_share / n as f64)
                .map_err(NetError::Engine)?;
            listening.insert(s, i);
        }
        let tx = engine.add_transmit();
        // Dedicated sockets: engine source -> the socket's index, and back.
        let mut own: HashMap<SourceId, usize> = HashMap::new();
        let mut done = false;
        while !done && !stop.load(Ordering::Relaxed) {
            self.timers()?;
            for i in self.take_closing() {
                if let Some(s) = own.iter().find(|(_, &j)| j == i).map(|(s, _)| *s) {
                    engine.remove(s).map_err(NetError::Engine)?;
                    own.remove(&s);
                }
                self.close_dedicated(i);
            }
            for i in self.take_opened() {
                if let Some(sock) = self.dedicated_socket(i) {
                    own.insert(engine.add_receive(sock).map_err(NetError::Engine)?, i);
                }
            }
            // Until the endpoint's next timer (timers() above sent what was due).
            let wait = self.next_timer().map_or(Duration::from_millis(50), |t| {
                t.min(Duration::from_millis(50))
            });
            let deadline = Instant::now() + wait;
            // A source's turn; its error (the sockets', the application's) stops serving.
            let mut turn = |ctl: &mut Ctl<'_>, s, quota| -> Result<Served, NetError> {
                let got = match (own.get(&s), listening.get(&s)) {
                    (Some(&i), _) => self.receive_dedicated(i, quota)?,
                    (None, Some(&i)) => self.receive_listener(i, quota)?,
                    // The transmit source.
                    (None, None) => {
                        self.flush()?;
                        return Ok(Served {
                            handled: 1,
                            drained: true,
                        });
                    }
                };
                if round(self).map_err(NetError::App)?.is_break() {
                    done = true;
                    ctl.stop();
                }
                ctl.wake(tx);
                // Back to the loop for a new dedicated socket (register it before its peer's
                // next datagram) or a timer this turn set earlier than the deadline (an
                // acknowledgement, a retransmission).
                let timer_first = self
                    .next_timer()
                    .is_some_and(|t| Instant::now() + t < deadline);
                if timer_first || (listening.contains_key(&s) && self.has_opened()) {
                    ctl.stop();
                }
                Ok(Served {
                    handled: got,
                    drained: got < quota,
                })
            };
            let mut failed = None;
            let r = engine.run_until(Some(deadline), |ctl, s, quota| {
                turn(ctl, s, quota).map_err(|e| {
                    failed = Some(e);
                    io::Error::other("a source's turn failed")
                })
            });
            if let Some(e) = failed {
                return Err(e);
            }
            r.map_err(NetError::Engine)?;
        }
        Ok(())
    }
}
