//! `soak`: the plain and the sealed stack, layered and accelerated, under heavy faults.
//!
//! Each schedule (`crate::soak`) draws its faults from a seed — loss up to 45 %,
//! duplication up to 20 %, reordering up to 50 %, corruption up to 8 % — sends 20-50 messages
//! of up to 4 KiB both ways through them over the in-memory link, blacks the link out for 4 s
//! and then heals it. A schedule passes when every message arrives once, in order, intact,
//! within 30 virtual seconds of healing and both ends go idle; during the blackout
//! retransmission must back off (fewer datagrams in its second half than its first, and at
//! most 100 per second). Virtual time: the counts are exact and repeat run to run.

use crate::report::{Ctx, Experiment, Outcome, Section, Table};
use crate::soak::{soak, SoakConfig};
use anyhow::Result;

/// The soak experiment.
pub struct Soak;

const PLAIN: &str = "frag(1400):window(16):checksum";
const SEALED: &str = "frag(1400):window(16):checksum:seal";

impl Experiment for Soak {
    fn name(&self) -> &'static str {
        "soak"
    }

    fn title(&self) -> &'static str {
        "Soak: heavy faults, a blackout, then healing"
    }

    fn run(&self, ctx: &Ctx) -> Result<Outcome> {
        // Virtual time makes a schedule cheap (1000 take about a second in a release build).
        let per_variant: u64 = if ctx.quick { 1000 } else { 10_000 };
        let cfg = SoakConfig::default();
        let mut figures = Vec::new();
        let mut table = Table {
            title: format!("{per_variant} seeded schedules per variant"),
            headers: [
                "stack",
                "path",
                "passed",
                "stalled",
                "wrong delivery",
                "did not back off",
                "most datagrams in a run",
                "most datagrams, last 2 s of blackout",
                "longest heal → done, ms",
            ]
            .map(String::from)
            .to_vec(),
            rows: vec![],
        };
        let (mut stalls, mut wrong, mut floods, mut total) = (0, 0, 0, 0);
        let mut failing = Vec::new();
        for (name, spec) in [("plain", PLAIN), ("sealed", SEALED)] {
            for accelerated in [false, true] {
                let path = if accelerated {
                    "accelerated"
                } else {
                    "layered"
                };
                let s = soak(spec, accelerated, 0..per_variant, &cfg)?;
                let key = format!("soak.{name}.{path}");
                figures.push((format!("{key}.passed"), s.passed as f64));
                figures.push((format!("{key}.stalls"), s.stalls as f64));
                figures.push((format!("{key}.wrong"), s.wrong as f64));
                figures.push((format!("{key}.floods"), s.floods as f64));
                figures.push((format!("{key}.max_datagrams"), s.max_datagrams as f64));
                figures.push((
                    format!("{key}.max_heal_to_done_ms"),
                    s.max_heal_to_done.as_secs_f64() * 1e3,
                ));
                table.rows.push(vec![
                    format!("`{spec}`"),
                    path.into(),
                    format!("{} / {}", s.passed, s.schedules),
                    s.stalls.to_string(),
                    s.wrong.to_string(),
                    s.floods.to_string(),
                    s.max_datagrams.to_string(),
                    s.max_blackout_late.to_string(),
                    format!("{:.0}", s.max_heal_to_done.as_secs_f64() * 1e3),
                ]);
                stalls += s.stalls;
                wrong += s.wrong;
                floods += s.floods;
                total += s.schedules;
                failing.extend(
                    s.failing_seeds
                        .iter()
                        .map(|(seed, o)| format!("{name} {path} seed {seed}: {o:?}")),
                );
            }
        }
        figures.push(("soak.schedules".into(), total as f64));
        figures.push(("soak.stalls".into(), stalls as f64));
        figures.push(("soak.wrong".into(), wrong as f64));
        figures.push(("soak.floods".into(), floods as f64));
        let mut text = vec![
            "Each schedule draws loss up to 45 %, duplication up to 20 %, reordering up to 50 % \
             and corruption up to 8 % from its seed, sends 20-50 messages of up to 4 KiB each \
             way through them, blacks the link out for 4 s and heals it. Passing: everything \
             delivered once, in order, intact, within 30 s of healing, both ends idle; \
             retransmission backs off during the blackout. Virtual time over the in-memory \
             link, so the counts repeat exactly."
                .to_string(),
        ];
        if !failing.is_empty() {
            text.push(format!(
                "**Failing schedules** (replay one with `crate::soak::run`): {}",
                failing.join("; ")
            ));
        }
        Ok(Outcome::Done(Section {
            text,
            tables: vec![table],
            plots: vec![],
            figures,
        }))
    }
}
