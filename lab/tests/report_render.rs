//! The report's pages rendered again from a fixed `results.json` (a real `--quick` run's,
//! committed in `tests/data/`): the HTML carries no raw markdown, every link inside the page
//! and every plot it names resolves, and every headline figure stands at the top with its goal
//! and a mark — and was measured, so no goal names a figure the experiments no longer make.

use std::collections::HashSet;
use std::path::Path;

fn fixture() -> std::path::PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/results.json")
}

/// `html` without what lies between `open` and `close` (code, preformatted text, SVG).
fn without(html: &str, open: &str, close: &str) -> String {
    let mut o = String::new();
    let mut rest = html;
    while let Some(i) = rest.find(open) {
        o.push_str(&rest[..i]);
        match rest[i..].find(close) {
            Some(j) => rest = &rest[i + j + close.len()..],
            None => return o,
        }
    }
    o.push_str(rest);
    o
}

/// The values of `attr="..."` in `html`.
fn attrs<'a>(html: &'a str, attr: &str) -> Vec<&'a str> {
    let key = format!("{attr}=\"");
    html.match_indices(&key)
        .filter_map(|(i, _)| {
            let v = &html[i + key.len()..];
            v.find('"').map(|end| &v[..end])
        })
        .collect()
}

#[test]
fn the_report_renders_from_fixed_results_with_goals_links_and_plots() {
    let out = std::env::temp_dir().join(format!("phyllo-report-render-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&out);
    let summary = phyllo_lab::report::rerender(&fixture(), &out).expect("rerender");
    assert!(summary.done > 0, "{summary:?}");
    let html = std::fs::read_to_string(out.join("index.html")).unwrap();
    assert!(html.contains("name=\"viewport\""));

    // Markdown is rendered everywhere: none of its markers outside code and plots.
    let prose = without(
        &without(&without(&html, "<code>", "</code>"), "<pre>", "</pre>"),
        "<svg",
        "</svg>",
    );
    for marker in ["**", "`", "](", "\n## "] {
        assert!(
            !prose.contains(marker),
            "raw markdown {marker:?} in the HTML"
        );
    }

    // Every link inside the page finds its target; every plot file exists.
    let ids: HashSet<&str> = attrs(&html, "id").into_iter().collect();
    for href in attrs(&html, "href") {
        if let Some(anchor) = href.strip_prefix('#') {
            assert!(
                ids.contains(anchor),
                "a link to #{anchor}, which is not on the page"
            );
        } else if href.ends_with(".svg") {
            assert!(
                out.join(href).is_file(),
                "a plot file {href} that was not written"
            );
        }
    }

    // The headline figures: at the top, each with a goal and a mark.
    let top = &html[..html.find("<section").expect("sections")];
    assert!(top.contains("Headline figures"));
    let results: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(out.join("results.json")).unwrap()).unwrap();
    let goals = results["goals"].as_object().expect("a goals object");
    assert!(!goals.is_empty());
    // Every goal is in results.json; the summary shows those of the experiments in this
    // report (the fixture predates some experiments).
    let ran: Vec<String> = results["experiments"]
        .as_array()
        .expect("experiments")
        .iter()
        .filter_map(|e| e["name"].as_str().map(|n| format!("{n}.")))
        .collect();
    let mut shown = 0;
    for (figure, goal) in goals {
        if !ran.iter().any(|n| figure.starts_with(n.as_str())) && goal["met"].is_null() {
            continue;
        }
        shown += 1;
        assert!(
            top.contains(figure.as_str()),
            "{figure} is not in the summary"
        );
        assert!(
            matches!(
                goal["direction"].as_str(),
                Some("at_least" | "at_most" | "reported")
            ),
            "{figure}: {goal}"
        );
        assert!(goal["target"].is_number(), "{figure}: {goal}");
        // Measured in the fixture's run: a goal never names a figure nobody makes.
        assert!(
            goal["met"].is_boolean(),
            "{figure} was not measured: {goal}"
        );
    }
    let marks = top.matches("✓ met").count() + top.matches("✗ missed").count();
    assert_eq!(marks, shown, "one mark per headline figure");
    let _ = std::fs::remove_dir_all(&out);
}
