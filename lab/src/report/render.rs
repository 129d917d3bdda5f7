//! Rendering the report: `index.md`, `index.html` and `results.json` from the run records.
//!
//! Pure functions of a [`Doc`]; writing files is the caller's business. The HTML is one
//! self-contained page (inline CSS, SVGs inlined) so it can be mailed or archived alone.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use serde_json::{json, Map, Value};

use super::machine::Machine;
use super::{Record, Status, Table};

/// A plot of one experiment after rendering.
#[derive(Clone, Debug)]
pub struct RenderedPlot {
    /// Plot title.
    pub title: String,
    /// SVG file name inside the report folder.
    pub file: String,
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

/// `results.json`.
pub fn results_json(doc: &Doc<'_>) -> Value {
    let figures: Map<String, Value> = doc
        .figures()
        .into_iter()
        .map(|(k, v)| (k.to_string(), num(v)))
        .collect();
    let experiments: Vec<Value> = doc
        .records
        .iter()
        .zip(doc.plots)
        .map(|(r, plots)| {
            let mut e = json!({
                "name": r.name,
                "title": r.title,
                "seed_ref": r.seed_ref,
                "status": r.status.label(),
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
    json!({
        "figures": figures,
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
    if !doc.records.is_empty() {
        let _ = writeln!(o, "| experiment | status | seconds |\n| --- | --- | --- |");
        for r in doc.records {
            let _ = writeln!(
                o,
                "| [{}](#{}) | {} | {:.1} |",
                md_cell(&r.title),
                r.name,
                r.status.label(),
                r.seconds
            );
        }
        o.push('\n');
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
                        }
                        Err(e) => {
                            let _ = writeln!(o, "*Plot “{}” could not be drawn: {e}*\n", rp.title);
                        }
                    }
                }
                if !s.figures.is_empty() {
                    let _ = writeln!(o, "| figure | value |\n| --- | --- |");
                    for (k, v) in &s.figures {
                        let _ = writeln!(o, "| `{k}` | {} |", fmt_value(*v));
                    }
                    o.push('\n');
                }
            }
            Status::Skipped(why) => {
                let _ = writeln!(o, "**Skipped:** {why}\n");
            }
            Status::Failed(err) => {
                let _ = writeln!(o, "**Failed:**\n\n```text\n{err}\n```\n");
            }
        }
        let _ = writeln!(o, "*{} in {:.1} s.*\n", r.status.label(), r.seconds);
    }
    let figures = doc.figures();
    if !figures.is_empty() {
        let _ = writeln!(o, "## All figures\n\n| figure | value |\n| --- | --- |");
        for (k, v) in figures {
            let _ = writeln!(o, "| `{k}` | {} |", fmt_value(v));
        }
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

/// A paragraph of (simple) markdown as HTML: escaped, with `code` spans.
fn para(s: &str) -> String {
    let mut o = String::new();
    for (i, part) in s.split('`').enumerate() {
        if i % 2 == 1 {
            let _ = write!(o, "<code>{}</code>", esc(part));
        } else {
            o.push_str(&esc(part));
        }
    }
    o
}

fn html_table(o: &mut String, t: &Table) {
    o.push_str("<table>");
    if !t.title.is_empty() {
        let _ = write!(o, "<caption>{}</caption>", esc(&t.title));
    }
    o.push_str("<thead><tr>");
    for h in &t.headers {
        let _ = write!(o, "<th>{}</th>", esc(h));
    }
    o.push_str("</tr></thead><tbody>");
    for r in &t.rows {
        o.push_str("<tr>");
        for c in r {
            let _ = write!(o, "<td>{}</td>", esc(c));
        }
        o.push_str("</tr>");
    }
    o.push_str("</tbody></table>\n");
}

/// Strip an XML declaration so the SVG can be inlined in HTML.
fn inline_svg(svg: &str) -> &str {
    match svg.find("<svg") {
        Some(i) => &svg[i..],
        None => svg,
    }
}

const CSS: &str = "body{font-family:system-ui,sans-serif;max-width:60rem;margin:2rem auto;\
padding:0 1rem;color:#222;line-height:1.45}h1,h2{border-bottom:1px solid #ddd}\
table{border-collapse:collapse;margin:1rem 0}caption{font-weight:bold;text-align:left;\
padding:.3rem 0}th,td{border:1px solid #ccc;padding:.25rem .6rem;text-align:right}\
th{background:#f4f4f4}td:first-child,th:first-child{text-align:left}\
code,pre{background:#f6f6f6;font-family:ui-monospace,monospace}pre{padding:.6rem;\
overflow-x:auto}.done{color:#186a1b}.skipped{color:#8a6100}.failed{color:#a11}\
.meta{color:#555}figure{margin:1rem 0}svg{max-width:100%;height:auto}";

/// `index.html`.
pub fn html(doc: &Doc<'_>) -> String {
    let mut o = String::new();
    let (done, skipped, failed) = doc.counts();
    let _ = write!(
        o,
        "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">\
         <title>phyllo report</title><style>{CSS}</style></head><body>\n\
         <h1>phyllo report</h1>\n<p class=\"meta\">Generated {} ({} mode)<br>Machine: {}<br>\
         Experiments: {done} done, {skipped} skipped, {failed} failed</p>\n",
        esc(&doc.generated_at),
        doc.mode(),
        esc(&doc.machine.one_line())
    );
    if !doc.records.is_empty() {
        o.push_str("<table><thead><tr><th>experiment</th><th>status</th><th>seconds</th></tr></thead><tbody>");
        for r in doc.records {
            let _ = write!(
                o,
                "<tr><td><a href=\"#{}\">{}</a></td><td class=\"{l}\">{l}</td><td>{:.1}</td></tr>",
                esc(&r.name),
                esc(&r.title),
                r.seconds,
                l = r.status.label()
            );
        }
        o.push_str("</tbody></table>\n");
    }
    for (r, plots) in doc.records.iter().zip(doc.plots) {
        let _ = writeln!(
            o,
            "<section id=\"{}\"><h2>{} (<code>{}</code>)</h2>",
            esc(&r.name),
            esc(&r.title),
            esc(&r.name)
        );
        if let Some(s) = &r.seed_ref {
            let _ = writeln!(o, "<p><em>Reproduces: {}.</em></p>", esc(s));
        }
        match &r.status {
            Status::Done(s) => {
                for p in &s.text {
                    let _ = writeln!(o, "<p>{}</p>", para(p));
                }
                for t in &s.tables {
                    html_table(&mut o, t);
                }
                for rp in plots {
                    match &rp.svg {
                        Ok(svg) => {
                            let _ = writeln!(
                                o,
                                "<figure>{}<figcaption><a href=\"{}\">{}</a></figcaption></figure>",
                                inline_svg(svg),
                                esc(&rp.file),
                                esc(&rp.title)
                            );
                        }
                        Err(e) => {
                            let _ = writeln!(
                                o,
                                "<p class=\"failed\">Plot “{}” could not be drawn: {}</p>",
                                esc(&rp.title),
                                esc(e)
                            );
                        }
                    }
                }
                if !s.figures.is_empty() {
                    o.push_str(
                        "<table><thead><tr><th>figure</th><th>value</th></tr></thead><tbody>",
                    );
                    for (k, v) in &s.figures {
                        let _ = write!(
                            o,
                            "<tr><td><code>{}</code></td><td>{}</td></tr>",
                            esc(k),
                            fmt_value(*v)
                        );
                    }
                    o.push_str("</tbody></table>\n");
                }
            }
            Status::Skipped(why) => {
                let _ = writeln!(
                    o,
                    "<p class=\"skipped\"><strong>Skipped:</strong> {}</p>",
                    esc(why)
                );
            }
            Status::Failed(err) => {
                let _ = writeln!(
                    o,
                    "<p class=\"failed\"><strong>Failed:</strong></p><pre>{}</pre>",
                    esc(err)
                );
            }
        }
        let _ = writeln!(
            o,
            "<p class=\"meta\">{} in {:.1} s.</p></section>",
            r.status.label(),
            r.seconds
        );
    }
    let figures = doc.figures();
    if !figures.is_empty() {
        o.push_str("<h2>All figures</h2><table><thead><tr><th>figure</th><th>value</th></tr></thead><tbody>");
        for (k, v) in figures {
            let _ = write!(
                o,
                "<tr><td><code>{}</code></td><td>{}</td></tr>",
                esc(k),
                fmt_value(v)
            );
        }
        o.push_str("</tbody></table>\n");
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
    fn html_escapes_and_code_spans() {
        assert_eq!(para("a <b> `x&y`"), "a &lt;b&gt; <code>x&amp;y</code>");
    }
}
