//! Rendering the report: `index.md`, `index.html` and `results.json` from the run records.
//!
//! Pure functions of a [`Doc`]; writing files is the caller's business. The HTML is one
//! self-contained page (inline CSS, SVGs inlined) so it can be mailed or archived alone; the
//! prose, headings, table cells and captions are markdown, rendered with `pulldown-cmark`.
//! Both pages open with the headline figures ([`super::goals`]), each with its goal and a
//! met/missed mark, linked to its section.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use serde_json::{json, Map, Value};

use super::goals::{self, Goal};
use super::machine::Machine;
use super::{Record, Status, Table};

/// A plot of one experiment after rendering.
#[derive(Clone, Debug)]
pub struct RenderedPlot {
    /// Plot title.
    pub title: String,
    /// SVG file name inside the report folder.
    pub file: String,
    /// What to look for (markdown; may be empty).
    pub caption: String,
    /// The SVG document, or why it could not be drawn.
    pub svg: Result<String, String>,
}

/// Everything a report page shows.
#[derive(Debug)]
pub struct Doc<'a> {
    /// The host.
    pub machine: &'a Machine,
    /// `--quick` mode.
    pub quick: bool,
    /// UTC timestamp of the run.
    pub generated_at: String,
    /// Every experiment, in report order.
    pub records: &'a [Record],
    /// Rendered plots, one list per record.
    pub plots: &'a [Vec<RenderedPlot>],
}

impl Doc<'_> {
    /// (done, skipped, failed) counts.
    pub fn counts(&self) -> (usize, usize, usize) {
        let mut c = (0, 0, 0);
        for r in self.records {
            match r.status {
                Status::Done(_) => c.0 += 1,
                Status::Skipped(_) => c.1 += 1,
                Status::Failed(_) => c.2 += 1,
            }
        }
        c
    }

    /// All figures of all experiments; a later experiment's value replaces an earlier one of
    /// the same name.
    pub fn figures(&self) -> BTreeMap<&str, f64> {
        let mut m = BTreeMap::new();
        for r in self.records {
            if let Status::Done(s) = &r.status {
                for (k, v) in &s.figures {
                    m.insert(k.as_str(), *v);
                }
            }
        }
        m
    }

    /// The experiment whose section holds `figure`.
    pub fn section_of(&self, figure: &str) -> Option<&Record> {
        self.records.iter().rev().find(|r| match &r.status {
            Status::Done(s) => s.figures.iter().any(|(k, _)| k == figure),
            _ => false,
        })
    }

    /// The headline figures of the experiments in this report, each with its value (`None`:
    /// its experiment ran but did not produce it, or did not run to the end).
    pub fn headlines(&self) -> Vec<(&'static Goal, Option<f64>)> {
        let figures = self.figures();
        let ran: Vec<&str> = self.records.iter().map(|r| r.name.as_str()).collect();
        goals::GOALS
            .iter()
            .filter(|g| {
                figures.contains_key(g.figure)
                    || ran.iter().any(|n| g.figure.starts_with(&format!("{n}.")))
            })
            .map(|g| (g, figures.get(g.figure).copied()))
            .collect()
    }

    /// A record's status for the reader: `done`, `missed goal` (done, and a headline figure
    /// of its section misses its goal), `skipped` or `failed`.
    pub fn status_of(&self, r: &Record) -> &'static str {
        match &r.status {
            Status::Done(s) => {
                let missed = s
                    .figures
                    .iter()
                    .any(|(k, v)| goals::goal(k).is_some_and(|g| !g.met(*v)));
                if missed {
                    "missed goal"
                } else {
                    "done"
                }
            }
            other => other.label(),
        }
    }

    fn mode(&self) -> &'static str {
        if self.quick {
            "quick"
        } else {
            "full"
        }
    }
}

/// A finite number as JSON, anything else as `null` (JSON has no NaN or infinity).
pub fn num(v: f64) -> Value {
    serde_json::Number::from_f64(v).map_or(Value::Null, Value::Number)
}

/// A figure value for a table cell.
pub fn fmt_value(v: f64) -> String {
    if !v.is_finite() {
        "n/a".into()
    } else if v == 0.0 || (1e-3..1e9).contains(&v.abs()) {
        let s = format!("{v:.4}");
        let s = s.trim_end_matches('0').trim_end_matches('.');
        s.to_string()
    } else {
        format!("{v:.4e}")
    }
}

/// A headline value for a reader: four significant digits, millions as `M`.
fn headline_value(v: f64) -> String {
    if !v.is_finite() {
        "n/a".into()
    } else if v.abs() >= 1e6 {
        format!("{:.2} M", v / 1e6)
    } else if v.abs() >= 1000.0 || v == v.trunc() {
        format!("{v:.0}")
    } else {
        let decimals = (3 - v.abs().log10().floor() as i32).clamp(0, 6) as usize;
        format!("{v:.decimals$}")
    }
}

/// `results.json`.
pub fn results_json(doc: &Doc<'_>) -> Value {
    let all = doc.figures();
    let figures: Map<String, Value> = all.iter().map(|(k, v)| (k.to_string(), num(*v))).collect();
    let experiments: Vec<Value> = doc
        .records
        .iter()
        .zip(doc.plots)
        .map(|(r, plots)| {
            let mut e = json!({
                "name": r.name,
                "title": r.title,
                "seed_ref": r.seed_ref,
                "status": doc.status_of(r),
                "seconds": num(r.seconds),
            });
            match &r.status {
                Status::Done(s) => {
                    e["text"] = json!(s.text);
                    e["tables"] = serde_json::to_value(&s.tables).unwrap_or(Value::Null);
                    e["figures"] = s
                        .figures
                        .iter()
                        .map(|(k, v)| (k.clone(), num(*v)))
                        .collect::<Map<_, _>>()
                        .into();
                    e["plots"] = s
                        .plots
                        .iter()
                        .zip(plots)
                        .map(|(p, rp)| {
                            json!({
                                "id": p.id,
                                "title": p.title,
                                "caption": p.caption,
                                "file": rp.file,
                                "x_label": p.x_label,
                                "y_label": p.y_label,
                                "log_x": p.log_x,
                                "log_y": p.log_y,
                                "error": rp.svg.as_ref().err(),
                                "series": p.series.iter().map(|s| json!({
                                    "name": s.name,
                                    "points": s.points.iter()
                                        .map(|&(x, y)| json!([num(x), num(y)]))
                                        .collect::<Vec<_>>(),
                                })).collect::<Vec<_>>(),
                            })
                        })
                        .collect::<Vec<_>>()
                        .into();
                }
                Status::Skipped(why) => e["reason"] = json!(why),
                Status::Failed(err) => e["error"] = json!(err),
            }
            e
        })
        .collect();
    let goals: Map<String, Value> = goals::GOALS
        .iter()
        .map(|g| {
            let value = all.get(g.figure).copied();
            (
                g.figure.to_string(),
                json!({
                    "direction": g.direction,
                    "target": num(g.target),
                    "unit": g.unit,
                    "anchor": g.anchor,
                    "met": value.map(|v| g.met(v)),
                }),
            )
        })
        .collect();
    json!({
        "figures": figures,
        "goals": goals,
        "machine": doc.machine,
        "experiments": experiments,
        "quick": doc.quick,
        "generated_at": doc.generated_at,
    })
}

fn md_cell(s: &str) -> String {
    s.replace('|', "\\|").replace('\n', " ")
}

fn md_table(out: &mut String, t: &Table) {
    if !t.title.is_empty() {
        let _ = writeln!(out, "**{}**\n", t.title);
    }
    let width = t
        .headers
        .len()
        .max(t.rows.iter().map(Vec::len).max().unwrap_or(0));
    if width == 0 {
        return;
    }
    let row = |cells: &[String]| {
        let mut line = String::from("|");
        for i in 0..width {
            let c = cells.get(i).map(String::as_str).unwrap_or("");
            let _ = write!(line, " {} |", md_cell(c));
        }
        line
    };
    let _ = writeln!(out, "{}", row(&t.headers));
    let _ = writeln!(out, "|{}", " --- |".repeat(width));
    for r in &t.rows {
        let _ = writeln!(out, "{}", row(r));
    }
    out.push('\n');
}

/// A headline figure's mark: met, missed, or not measured.
fn mark(g: &Goal, value: Option<f64>) -> &'static str {
    match value {
        Some(v) if g.met(v) => "✓ met",
        Some(_) => "✗ missed",
        None => "— not measured",
    }
}

/// A figure's goal and mark for its section's table (empty for a figure without a goal).
fn goal_cells(figure: &str, value: f64) -> (String, &'static str) {
    match goals::goal(figure) {
        Some(g) => (g.text(), mark(g, Some(value))),
        None => (String::new(), ""),
    }
}

/// The headline figures' table (markdown cells; the figure links to its section).
fn headline_table(doc: &Doc<'_>) -> Table {
    let rows = doc
        .headlines()
        .into_iter()
        .map(|(g, value)| {
            let figure = match doc.section_of(g.figure) {
                Some(r) => format!("[`{}`](#{})", g.figure, r.name),
                None => format!("`{}`", g.figure),
            };
            vec![
                figure,
                value.map_or("—".into(), headline_value),
                g.unit.to_string(),
                g.text(),
                mark(g, value).to_string(),
                g.anchor.unwrap_or("").to_string(),
            ]
        })
        .collect();
    Table {
        title: "Headline figures: each against its goal".into(),
        headers: ["figure", "value", "unit", "goal", "mark", "seed or anchor"]
            .map(String::from)
            .to_vec(),
        rows,
    }
}

/// The contents: every experiment with its status (a link to its section).
fn contents_table(doc: &Doc<'_>) -> Table {
    Table {
        title: "Contents".into(),
        headers: ["experiment", "status", "seconds"]
            .map(String::from)
            .to_vec(),
        rows: doc
            .records
            .iter()
            .map(|r| {
                vec![
                    format!("[{}](#{})", r.title, r.name),
                    doc.status_of(r).to_string(),
                    format!("{:.1}", r.seconds),
                ]
            })
            .collect(),
    }
}

/// A section's figures with their goals.
fn figures_table(figures: &[(String, f64)]) -> Table {
    Table {
        title: "Figures".into(),
        headers: ["figure", "value", "goal", "mark"]
            .map(String::from)
            .to_vec(),
        rows: figures
            .iter()
            .map(|(k, v)| {
                let (goal, mark) = goal_cells(k, *v);
                vec![format!("`{k}`"), fmt_value(*v), goal, mark.to_string()]
            })
            .collect(),
    }
}

/// `index.md`.
pub fn markdown(doc: &Doc<'_>) -> String {
    let mut o = String::new();
    let (done, skipped, failed) = doc.counts();
    let _ = writeln!(o, "# phyllo report\n");
    let _ = writeln!(o, "- Generated: {} ({} mode)", doc.generated_at, doc.mode());
    let _ = writeln!(o, "- Machine: {}", doc.machine.one_line());
    let _ = writeln!(
        o,
        "- Experiments: {done} done, {skipped} skipped, {failed} failed\n"
    );
    let headlines = headline_table(doc);
    if !headlines.rows.is_empty() {
        md_table(&mut o, &headlines);
    }
    if !doc.records.is_empty() {
        md_table(&mut o, &contents_table(doc));
    }
    for (r, plots) in doc.records.iter().zip(doc.plots) {
        let _ = writeln!(
            o,
            "<a id=\"{}\"></a>\n\n## {} (`{}`)\n",
            r.name, r.title, r.name
        );
        if let Some(s) = &r.seed_ref {
            let _ = writeln!(o, "*Reproduces: {s}.*\n");
        }
        match &r.status {
            Status::Done(s) => {
                for p in &s.text {
                    let _ = writeln!(o, "{p}\n");
                }
                for t in &s.tables {
                    md_table(&mut o, t);
                }
                for rp in plots {
                    match &rp.svg {
                        Ok(_) => {
                            let _ = writeln!(o, "![{}]({})\n", rp.title, rp.file);
                            if !rp.caption.is_empty() {
                                let _ = writeln!(o, "*{}*\n", rp.caption);
                            }
                        }
                        Err(e) => {
                            let _ = writeln!(o, "*Plot “{}” could not be drawn: {e}*\n", rp.title);
                        }
                    }
                }
                if !s.figures.is_empty() {
                    md_table(&mut o, &figures_table(&s.figures));
                }
            }
            Status::Skipped(why) => {
                let _ = writeln!(o, "**Skipped:** {why}\n");
            }
            Status::Failed(err) => {
                let _ = writeln!(o, "**Failed:**\n\n```text\n{err}\n```\n");
            }
        }
        let _ = writeln!(o, "*{} in {:.1} s.*\n", doc.status_of(r), r.seconds);
    }
    o
}

/// Escape text for HTML.
pub fn esc(s: &str) -> String {
    let mut o = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '&' => o.push_str("&amp;"),
            '<' => o.push_str("&lt;"),
            '>' => o.push_str("&gt;"),
            '"' => o.push_str("&quot;"),
            '\'' => o.push_str("&#39;"),
            c => o.push(c),
        }
    }
    o
}

/// Markdown as HTML (`pulldown-cmark`, tables and strikethrough on); raw HTML in the text is
/// escaped, not passed through.
fn md_html(s: &str) -> String {
    use pulldown_cmark::{Event, Options, Parser};
    let parser = Parser::new_ext(s, Options::ENABLE_TABLES | Options::ENABLE_STRIKETHROUGH).map(
        |e| match e {
            Event::Html(h) | Event::InlineHtml(h) => Event::Text(h),
            e => e,
        },
    );
    let mut o = String::new();
    pulldown_cmark::html::push_html(&mut o, parser);
    o
}

/// A paragraph of markdown as HTML.
fn para(s: &str) -> String {
    md_html(s)
}

/// A line of markdown (a heading, a cell, a caption) as inline HTML: without the paragraph
/// it would be wrapped in.
fn inline(s: &str) -> String {
    let h = md_html(s);
    let h = h.trim_end();
    match h.strip_prefix("<p>").and_then(|h| h.strip_suffix("</p>")) {
        Some(inner) if !inner.contains("<p>") => inner.to_string(),
        _ => h.to_string(),
    }
}

/// Whether a cell holds a number (with an optional unit sign), to be right-aligned.
fn numeric(s: &str) -> bool {
    let t = s.trim().trim_end_matches(['%', '×', 'x']).trim();
    !t.is_empty()
        && t.chars()
            .next()
            .is_some_and(|c| c.is_ascii_digit() || c == '-' || c == '−')
        && t.chars()
            .all(|c| c.is_ascii_digit() || ".,-−+e ".contains(c))
}

fn html_table(o: &mut String, t: &Table) {
    o.push_str("<div class=\"scroll\"><table>");
    if !t.title.is_empty() {
        let _ = write!(o, "<caption>{}</caption>", inline(&t.title));
    }
    o.push_str("<thead><tr>");
    for h in &t.headers {
        let _ = write!(o, "<th>{}</th>", inline(h));
    }
    o.push_str("</tr></thead><tbody>");
    for r in &t.rows {
        o.push_str("<tr>");
        for c in r {
            let class = if numeric(c) {
                " class=\"num\""
            } else if c.starts_with(['✓', '✗', '—']) {
                " class=\"mark\""
            } else {
                ""
            };
            let _ = write!(o, "<td{class}>{}</td>", inline(c));
        }
        o.push_str("</tr>");
    }
    o.push_str("</tbody></table></div>\n");
}

/// Strip an XML declaration so the SVG can be inlined in HTML.
fn inline_svg(svg: &str) -> &str {
    match svg.find("<svg") {
        Some(i) => &svg[i..],
        None => svg,
    }
}

const CSS: &str = "body{font-family:system-ui,sans-serif;max-width:64rem;margin:2rem auto;\
padding:0 1rem;color:#222;line-height:1.45}h1,h2{border-bottom:1px solid #ddd}\
.scroll{overflow-x:auto;margin:1rem 0}table{border-collapse:collapse}\
caption{font-weight:bold;text-align:left;padding:.3rem 0}\
th,td{border:1px solid #ccc;padding:.25rem .6rem;text-align:left;vertical-align:top}\
td.num{text-align:right;white-space:nowrap}td.mark{white-space:nowrap}th{background:#f4f4f4}\
code,pre{background:#f6f6f6;font-family:ui-monospace,monospace}pre{padding:.6rem;\
overflow-x:auto}.meta{color:#555}figure{margin:1rem 0}svg{max-width:100%;height:auto}\
nav ol{columns:2}";

/// `index.html`.
pub fn html(doc: &Doc<'_>) -> String {
    let mut o = String::new();
    let (done, skipped, failed) = doc.counts();
    let _ = write!(
        o,
        "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">\
         <meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\
         <title>phyllo report</title><style>{CSS}</style></head><body>\n\
         <h1>phyllo report</h1>\n<p class=\"meta\">Generated {} ({} mode)<br>Machine: {}<br>\
         Experiments: {done} done, {skipped} skipped, {failed} failed</p>\n",
        esc(&doc.generated_at),
        doc.mode(),
        esc(&doc.machine.one_line())
    );
    let headlines = headline_table(doc);
    if !headlines.rows.is_empty() {
        html_table(&mut o, &headlines);
    }
    if !doc.records.is_empty() {
        o.push_str("<nav>");
        html_table(&mut o, &contents_table(doc));
        o.push_str("</nav>\n");
    }
    for (r, plots) in doc.records.iter().zip(doc.plots) {
        let _ = writeln!(
            o,
            "<section id=\"{}\"><h2>{} (<code>{}</code>)</h2>",
            esc(&r.name),
            inline(&r.title),
            esc(&r.name)
        );
        if let Some(s) = &r.seed_ref {
            let _ = writeln!(o, "<p><em>Reproduces: {}.</em></p>", inline(s));
        }
        match &r.status {
            Status::Done(s) => {
                for p in &s.text {
                    o.push_str(&para(p));
                }
                for t in &s.tables {
                    html_table(&mut o, t);
                }
                for rp in plots {
                    match &rp.svg {
                        Ok(svg) => {
                            let caption = if rp.caption.is_empty() {
                                String::new()
                            } else {
                                format!(" {}", inline(&rp.caption))
                            };
                            let _ = writeln!(
                                o,
                                "<figure>{}<figcaption><a href=\"{}\">{}</a>.{caption}</figcaption></figure>",
                                inline_svg(svg),
                                esc(&rp.file),
                                inline(&rp.title)
                            );
                        }
                        Err(e) => {
                            let _ = writeln!(
                                o,
                                "<p class=\"failed\">Plot “{}” could not be drawn: {}</p>",
                                inline(&rp.title),
                                esc(e)
                            );
                        }
                    }
                }
                if !s.figures.is_empty() {
                    html_table(&mut o, &figures_table(&s.figures));
                }
            }
            Status::Skipped(why) => {
                let _ = writeln!(o, "<p><strong>Skipped:</strong> {}</p>", inline(why));
            }
            Status::Failed(err) => {
                let _ = writeln!(o, "<p><strong>Failed:</strong></p><pre>{}</pre>", esc(err));
            }
        }
        let _ = writeln!(
            o,
            "<p class=\"meta\">{} in {:.1} s.</p></section>",
            doc.status_of(r),
            r.seconds
        );
    }
    o.push_str("</body></html>\n");
    o
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn non_finite_numbers_are_null() {
        assert_eq!(num(f64::NAN), Value::Null);
        assert_eq!(num(f64::INFINITY), Value::Null);
        assert_eq!(num(1.5), json!(1.5));
    }

    #[test]
    fn value_formatting() {
        assert_eq!(fmt_value(1.5), "1.5");
        assert_eq!(fmt_value(2.0), "2");
        assert_eq!(fmt_value(0.0), "0");
        assert_eq!(fmt_value(f64::NAN), "n/a");
        assert_eq!(fmt_value(3e12), "3.0000e12");
        assert_eq!(headline_value(24_506_419.87), "24.51 M");
        assert_eq!(headline_value(8245.3), "8245");
        assert_eq!(headline_value(0.41188), "0.4119");
        assert_eq!(headline_value(1.25), "1.250");
        assert_eq!(headline_value(6.0), "6");
    }

    #[test]
    fn markdown_cells_are_escaped() {
        let mut o = String::new();
        md_table(
            &mut o,
            &Table {
                title: "t".into(),
                headers: vec!["a|b".into(), "c".into()],
                rows: vec![vec!["1".into()]],
            },
        );
        assert!(o.contains("| a\\|b | c |"));
        assert!(o.contains("| 1 |  |"), "short rows padded: {o}");
    }

    #[test]
    fn html_escapes_and_renders_markdown() {
        assert_eq!(inline("a <b> `x&y`"), "a &lt;b&gt; <code>x&amp;y</code>");
        assert_eq!(
            inline("**bold** and *it*"),
            "<strong>bold</strong> and <em>it</em>"
        );
        assert_eq!(para("one"), "<p>one</p>\n");
        assert!(numeric("1.25") && numeric("12 345") && numeric("-3%") && numeric("2×"));
        assert!(!numeric("yes") && !numeric("`x`") && !numeric("1.2 MB/s"));
    }
}
