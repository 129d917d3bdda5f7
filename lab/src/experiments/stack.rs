//! `stack`: send + deliver cost per message of the 4-layer stack over the in-memory link, for
//! the dynamic (spec-built) and the static (monomorphized) form, by message size.

use super::rtt::{SPEC3, SPEC4};
use crate::measure::{ns_per_msg, stack_ns_per_msg, static4_pair};
use crate::report::{Ctx, Experiment, Outcome, Plot, Section, Series, Table};

/// Per-message processing cost.
pub struct StackCost;

impl Experiment for StackCost {
    fn name(&self) -> &'static str {
        "stack"
    }

    fn title(&self) -> &'static str {
        "Per-message cost of the stack over the in-memory link"
    }

    fn run(&self, ctx: &Ctx) -> anyhow::Result<Outcome> {
        let count = if ctx.quick { 20_000u64 } else { 200_000 };
        let sizes = [8usize, 64, 256, 1024, 4096, 16384];
        let mut table = Table {
            title: format!("ns per message (send + deliver + acks), {count} messages each"),
            headers: std::iter::once("stack".to_string())
                .chain(sizes.iter().map(|s| format!("{s} B")))
                .collect(),
            rows: vec![],
        };
        let mut plot = Plot {
            id: "stack_cost".into(),
            title: "Send + deliver cost per message (memlink)".into(),
            x_label: "message bytes".into(),
            y_label: "ns per message".into(),
            log_x: true,
            log_y: true,
            caption: "Lower is better. On log–log axes a flat stretch is cost per message and a \
                      slope of one is cost in proportion to the bytes. The gap between the \
                      `static` and `dynamic` forms of the sealed stack is what monomorphization \
                      removes; the gap between the two `dynamic` stacks is what `seal` costs."
                .into(),
            ..Plot::default()
        };
        let mut figure = f64::NAN;
        let variants: [(&str, &str); 3] = [
            (SPEC4, "dynamic"),
            ("frag(1400):window(16):checksum:seal", "static"),
            (SPEC3, "dynamic"),
        ];
        for (spec, form) in variants {
            let mut row = vec![format!("{spec} ({form})")];
            let mut series = Series {
                name: format!("{spec} ({form})"),
                points: vec![],
            };
            for &size in &sizes {
                let n = (count * 8 / (8 + size as u64 / 64)).max(500);
                let ns = if form == "static" {
                    ns_per_msg(static4_pair()?, size, n)?
                } else {
                    stack_ns_per_msg(spec, size, n)?
                };
                if spec == SPEC4 && form == "dynamic" && size == 8 {
                    figure = ns;
                }
                row.push(format!("{ns:.0}"));
                series.points.push((size as f64, ns));
            }
            table.rows.push(row);
            plot.series.push(series);
        }
        Ok(Outcome::Done(Section {
            text: vec![
                "Both ends on one thread over a perfect in-memory link: each message is sent by \
                 A, delivered at B, and B's ack processed by A — the whole protocol cost of one \
                 message, no system calls. `static` is the same stack monomorphized \
                 (`phyllo::stack!`), seed 000's path-inlining done by the compiler."
                    .into(),
            ],
            tables: vec![table],
            plots: vec![plot],
            figures: vec![("stack.ns_per_msg".into(), figure)],
        }))
    }
}
