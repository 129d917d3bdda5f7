//! `stream`: one-way streaming of 8-byte messages over UDP loopback (and the in-memory link),
//! beside a raw-UDP stream measured in the same run.

use super::rtt::{SPEC3, SPEC4};
use crate::measure::{stream_mem, stream_udp};
use crate::rawudp::{raw_stream, StreamConfig};
use crate::report::{Ctx, Experiment, Outcome, Section, Table};
use std::time::Duration;

/// One-way message rate.
pub struct Stream;

impl Experiment for Stream {
    fn name(&self) -> &'static str {
        "stream"
    }

    fn title(&self) -> &'static str {
        "One-way streaming of 8-byte messages"
    }

    fn seed_ref(&self) -> Option<&'static str> {
        Some("seed 004, Table 4 (message throughput)")
    }

    fn run(&self, ctx: &Ctx) -> anyhow::Result<Outcome> {
        if let Err(e) = std::net::UdpSocket::bind(("127.0.0.1", 0)) {
            return Ok(Outcome::Skipped(format!("no UDP on 127.0.0.1: {e}")));
        }
        let (count, limit) = if ctx.quick {
            (100_000u64, Duration::from_secs(15))
        } else {
            (1_000_000, Duration::from_secs(60))
        };
        let raw = raw_stream(&StreamConfig::new(count, 8))?;
        let u4 = stream_udp(SPEC4, false, 8, count, limit)?;
        let u3 = stream_udp(SPEC3, false, 8, count, limit)?;
        let m4 = stream_mem(SPEC4, false, 8, count)?;
        let m3 = stream_mem(SPEC3, false, 8, count)?;
        let mut table = Table {
            title: format!(
                "{count} messages of 8 bytes, sender and receiver on their own threads (UDP)"
            ),
            headers: [
                "stack",
                "link",
                "delivered",
                "msgs/s",
                "datagrams/msg",
                "retransmitted",
            ]
            .map(String::from)
            .to_vec(),
            rows: vec![vec![
                "raw UDP (sendmmsg batches, no reliability)".into(),
                "udp".into(),
                raw.received.to_string(),
                format!("{:.0}", raw.msgs_per_s()),
                "1".into(),
                format!("({:.1} % lost)", raw.loss() * 100.0),
            ]],
        };
        for (name, link, r) in [
            (SPEC4, "udp", &u4),
            (SPEC3, "udp", &u3),
            (SPEC4, "mem", &m4),
            (SPEC3, "mem", &m3),
        ] {
            let retx = r.receiver.drops(phyllo::layer::DropReason::Duplicate);
            table.rows.push(vec![
                name.into(),
                link.into(),
                r.delivered.to_string(),
                format!("{:.0}", r.msgs_per_s()),
                format!(
                    "{:.2}",
                    r.sender.datagrams_out as f64 / r.delivered.max(1) as f64
                ),
                retx.to_string(),
            ]);
        }
        Ok(Outcome::Done(Section {
            text: vec![
                "The sender offers messages as fast as the window (16) and its backlog accept \
                 them; the rate is what the receiver delivered, from the first send to the last \
                 delivery. Without the accelerator's packing every message is its own datagram."
                    .into(),
            ],
            tables: vec![table],
            plots: vec![],
            figures: vec![
                ("stream.msgs_per_s".into(), u4.msgs_per_s()),
                ("stream.raw_msgs_per_s".into(), raw.msgs_per_s()),
            ],
        }))
    }
}
