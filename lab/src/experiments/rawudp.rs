//! The raw-UDP baselines as an experiment: loopback ping-pong latency by payload size and the
//! one-way stream rate, with no phyllo code in the data path.
//!
//! phyllo's UDP timings are reported as ratios against these numbers,
//! measured in the same run (the `rtt` and `stream` experiments rerun the baseline beside
//! themselves; this section shows it on its own, by size).

use crate::rawudp::{raw_pingpong, raw_stream, PingPongConfig, StreamConfig};

use crate::report::{Ctx, Experiment, Outcome, Plot, Section, Series, Table};

/// Raw UDP ping-pong and stream on 127.0.0.1.
pub struct RawUdp;

impl Experiment for RawUdp {
    fn name(&self) -> &'static str {
        "rawudp"
    }

    fn title(&self) -> &'static str {
        "Raw UDP loopback baselines"
    }

    fn run(&self, ctx: &Ctx) -> anyhow::Result<Outcome> {
        // A sandbox without a loopback interface cannot run this at all: say so and go on.
        if let Err(e) = std::net::UdpSocket::bind(("127.0.0.1", 0)) {
            return Ok(Outcome::Skipped(format!(
                "cannot bind a UDP socket on 127.0.0.1: {e}"
            )));
        }
        let rounds = if ctx.quick { 2_000 } else { 20_000 };
        let messages = if ctx.quick { 200_000 } else { 2_000_000 };
        let sizes = [8usize, 64, 256, 1024, 4096, 16384];

        let mut rtt = Table {
            title: format!("Ping-pong round trips ({rounds} per size, busy-poll both sides)"),
            headers: [
                "payload B",
                "median ns",
                "p99 ns",
                "mean ns",
                "min ns",
                "lost rounds",
            ]
            .map(String::from)
            .to_vec(),
            rows: vec![],
        };
        let mut median = Series {
            name: "median".into(),
            points: vec![],
        };
        let mut p99 = Series {
            name: "p99".into(),
            points: vec![],
        };
        let mut figures = Vec::new();
        for &size in &sizes {
            let r = raw_pingpong(&PingPongConfig::new(rounds, size))?;
            let s = r
                .summary()
                .ok_or_else(|| anyhow::anyhow!("no round trip completed for {size} B"))?;
            rtt.rows.push(vec![
                size.to_string(),
                s.median_ns.to_string(),
                s.p99_ns.to_string(),
                format!("{:.0}", s.mean_ns),
                s.min_ns.to_string(),
                r.lost_rounds.to_string(),
            ]);
            median.points.push((size as f64, s.median_ns as f64));
            p99.points.push((size as f64, s.p99_ns as f64));
            if size == 8 {
                figures.push(("rawudp.rtt_median_ns".to_string(), s.median_ns as f64));
                figures.push(("rawudp.rtt_p99_ns".to_string(), s.p99_ns as f64));
            }
        }

        let mut stream = Table {
            title: "One-way stream of 8-byte datagrams".into(),
            headers: [
                "send path",
                "sent",
                "received",
                "loss %",
                "delivered msgs/s",
                "sent msgs/s",
                "send calls",
            ]
            .map(String::from)
            .to_vec(),
            rows: vec![],
        };
        let mut rates = [0.0f64; 2];
        for (i, batching) in [true, false].into_iter().enumerate() {
            let mut cfg = StreamConfig::new(messages, 8);
            cfg.batching = batching;
            let st = raw_stream(&cfg)?;
            rates[i] = st.msgs_per_s();
            stream.rows.push(vec![
                if batching {
                    format!("sendmmsg x{}", cfg.batch)
                } else {
                    "send per datagram".into()
                },
                st.sent.to_string(),
                st.received.to_string(),
                format!("{:.1}", st.loss() * 100.0),
                format!("{:.0}", st.msgs_per_s()),
                format!("{:.0}", st.sent_per_s()),
                st.send_calls.to_string(),
            ]);
        }
        figures.push(("rawudp.stream_msgs_per_s".to_string(), rates[0]));
        figures.push((
            "rawudp.stream_sendmmsg_speedup".to_string(),
            rates[0] / rates[1],
        ));

        Ok(Outcome::Done(Section {
            text: vec![
                "Two sockets on `127.0.0.1`; an echo thread and the client both busy-poll \
                 non-blocking sockets, one datagram each way per round trip. The stream sender \
                 pushes datagrams with `sendmmsg`; the receiver counts what the kernel \
                 delivered (UDP: what it cannot keep up with is dropped)."
                    .into(),
            ],
            tables: vec![rtt, stream],
            plots: vec![Plot {
                id: "rawudp_rtt".into(),
                title: "Raw UDP loopback round trip by payload size".into(),
                x_label: "payload (bytes)".into(),
                y_label: "round trip (ns)".into(),
                log_x: true,
                log_y: false,
                series: vec![median, p99],
                caption: "Lower is better. Where `median` stays flat the round trip is fixed \
                          per-datagram cost (system calls, the kernel's UDP path), not the bytes; \
                          where it starts to rise, copying the payload begins to count. The gap \
                          up to `p99` is the tail a shared machine's scheduling adds."
                    .into(),
            }],
            figures,
        }))
    }
}
