//! Plot rendering: one [`Plot`] to one self-contained SVG document, with plotters.
//!
//! plotters is built without a font backend (no `ttf`, no fontconfig): its SVG backend writes
//! text as `<text>` elements and the viewer picks the font, and plotters lays labels out with
//! a crude width estimate, which is all an SVG needs. Non-finite points are dropped, and so are
//! non-positive coordinates on a logarithmic axis.
//!
//! What this file decides rather than plotters:
//! - colours: a colour-blind-safe set (Okabe–Ito without its yellow), every colour at least 3:1
//!   against the white page; past its seven colours the lines turn dashed;
//! - a marker at every point, its shape varying by series, so a three-point series reads as data;
//! - ticks: [`Axis`] is our own coordinate, whose key points are the ticks chosen by
//!   [`log_ticks`] (1/2/5 × 10^k, or only 10^k past three decades) or [`linear_ticks`] (at most
//!   eight, 1/2/5 steps), each labelled once, exactly (no float noise), compactly (`10k`, `1M`,
//!   `0.01`), and thinned until neighbouring labels cannot overlap;
//! - the legend sits in its own column right of the plotting area, never over the data.

use std::ops::Range;

use plotters::coord::ranged1d::{KeyPointHint, NoDefaultFormatting, Ranged, ValueFormatter};
use plotters::coord::Shift;
use plotters::prelude::*;
use plotters::style::text_anchor::{HPos, Pos, VPos};

use super::Plot;

/// Width and height of every plot, in SVG pixels (legend column included).
const SIZE: (u32, u32) = (960, 480);

/// Series colours, in order: Okabe–Ito (colour-blind safe) without its yellow, its orange
/// darkened to ochre and its sky blue (too light, and too close to the blue once darkened)
/// replaced by a dark violet, so every colour has at least 3:1 contrast on white. Past these
/// seven the lines turn dashed.
const PALETTE: [RGBColor; 7] = [
    RGBColor(0x00, 0x72, 0xB2), // blue
    RGBColor(0xD5, 0x5E, 0x00), // vermillion
    RGBColor(0x00, 0x9E, 0x73), // bluish green
    RGBColor(0xCC, 0x79, 0xA7), // reddish purple
    RGBColor(0x00, 0x00, 0x00), // black
    RGBColor(0xB0, 0x7A, 0x00), // ochre (Okabe–Ito orange, darkened)
    RGBColor(0x5E, 0x3C, 0x99), // violet
];

/// Marker shapes, cycled independently of the colours.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Marker {
    Circle,
    Triangle,
    Square,
    Diamond,
}

const MARKERS: [Marker; 4] = [
    Marker::Circle,
    Marker::Triangle,
    Marker::Square,
    Marker::Diamond,
];

/// How series `i` is drawn.
#[derive(Clone, Copy, Debug)]
struct Look {
    color: RGBColor,
    marker: Marker,
    dashed: bool,
}

fn look(i: usize) -> Look {
    Look {
        color: PALETTE[i % PALETTE.len()],
        marker: MARKERS[i % MARKERS.len()],
        dashed: (i / PALETTE.len()) % 2 == 1,
    }
}

const FONT: &str = "sans-serif";
const TITLE_PX: f64 = 20.0;
const LABEL_PX: f64 = 13.0;
const LEGEND_PX: f64 = 13.0;
/// Pixel margins around the chart (inside its column).
const MARGIN: (u32, u32, u32, u32) = (8, 12, 8, 16); // top, bottom, left, right
const X_LABEL_AREA: u32 = 44;

/// A rough width of `text` at `px` pixels in a sans-serif font (digits and lower case are
/// about 0.55 em wide; this errs wide so labels keep apart).
fn text_width(text: &str, px: f64) -> f64 {
    text.chars().count() as f64 * px * 0.6
}

/// Render `plot` as an SVG document.
pub fn render(plot: &Plot) -> Result<String, String> {
    let usable = |v: f64, log: bool| v.is_finite() && (!log || v > 0.0);
    let series: Vec<Vec<(f64, f64)>> = plot
        .series
        .iter()
        .map(|s| {
            s.points
                .iter()
                .copied()
                .filter(|(x, y)| usable(*x, plot.log_x) && usable(*y, plot.log_y))
                .collect()
        })
        .collect();
    let (x0, x1) = bounds(series.iter().flatten().map(|p| p.0), plot.log_x, false);
    let (y0, y1) = bounds(series.iter().flatten().map(|p| p.1), plot.log_y, true);

    // Layout: title row, then the chart column and (if there are series) the legend column.
    let (w, h) = SIZE;
    let title_px =
        TITLE_PX.min(0.95 * f64::from(w) / (plot.title.chars().count().max(1) as f64 * 0.55));
    let title_h = (title_px * 1.2).round() as u32 + 12;
    let legend_w = legend_width(plot);
    let chart_w = w - legend_w;
    let plot_h = h - title_h - MARGIN.0 - MARGIN.1 - X_LABEL_AREA;
    let y_axis = Axis::new(y0, y1, plot.log_y, f64::from(plot_h), &|_| LABEL_PX + 8.0);
    let y_label_w = y_axis
        .ticks
        .iter()
        .map(|t| text_width(&t.label, LABEL_PX))
        .fold(0.0, f64::max);
    let y_label_area = (y_label_w + 40.0).ceil() as u32;
    let plot_w = chart_w - MARGIN.2 - MARGIN.3 - y_label_area;
    let x_axis = Axis::new(x0, x1, plot.log_x, f64::from(plot_w), &|l| {
        text_width(l, LABEL_PX) + 12.0
    });

    let mut svg = String::new();
    {
        let root = SVGBackend::with_string(&mut svg, SIZE).into_drawing_area();
        root.fill(&WHITE).map_err(|e| e.to_string())?;
        let (top, body) = root.split_vertically(title_h);
        top.draw_text(
            &plot.title,
            &(FONT, title_px)
                .into_text_style(&top)
                .pos(Pos::new(HPos::Center, VPos::Center)),
            (w as i32 / 2, title_h as i32 / 2 + 2),
        )
        .map_err(|e| e.to_string())?;
        let (chart_area, legend_area) = body.split_horizontally(chart_w);
        draw_chart(&chart_area, plot, &series, x_axis, y_axis, y_label_area)?;
        if !plot.series.is_empty() {
            draw_legend(&legend_area, plot)?;
        }
        root.present().map_err(|e| e.to_string())?;
    }
    Ok(svg)
}

fn draw_chart(
    area: &DrawingArea<SVGBackend<'_>, Shift>,
    plot: &Plot,
    series: &[Vec<(f64, f64)>],
    x: Axis,
    y: Axis,
    y_label_area: u32,
) -> Result<(), String> {
    let mut chart = ChartBuilder::on(area)
        .margin_top(MARGIN.0)
        .margin_bottom(MARGIN.1)
        .margin_left(MARGIN.2)
        .margin_right(MARGIN.3)
        .x_label_area_size(X_LABEL_AREA)
        .y_label_area_size(y_label_area)
        .build_cartesian_2d(x, y)
        .map_err(|e| e.to_string())?;
    chart
        .configure_mesh()
        .x_desc(plot.x_label.as_str())
        .y_desc(plot.y_label.as_str())
        .label_style((FONT, LABEL_PX))
        .axis_desc_style((FONT, LABEL_PX + 1.0))
        .bold_line_style(BLACK.mix(0.14))
        .light_line_style(BLACK.mix(0.05))
        .axis_style(BLACK.mix(0.6))
        .draw()
        .map_err(|e| e.to_string())?;
    for (i, pts) in series.iter().enumerate() {
        let lk = look(i);
        let line = lk.color.stroke_width(2);
        if lk.dashed {
            chart
                .draw_series(DashedLineSeries::new(pts.iter().copied(), 8, 5, line))
                .map_err(|e| e.to_string())?;
        } else {
            chart
                .draw_series(LineSeries::new(pts.iter().copied(), line))
                .map_err(|e| e.to_string())?;
        }
        let fill = lk.color.filled();
        match lk.marker {
            Marker::Circle => chart.draw_series(
                pts.iter()
                    .map(|&p| EmptyElement::at(p) + Circle::new((0, 0), 4, fill)),
            ),
            m => chart.draw_series(
                pts.iter()
                    .map(|&p| EmptyElement::at(p) + Polygon::new(marker_outline(m), fill)),
            ),
        }
        .map_err(|e| e.to_string())?;
    }
    Ok(())
}

/// Pixel outline of a polygonal marker, centred on the point.
fn marker_outline(m: Marker) -> Vec<(i32, i32)> {
    match m {
        // Circles are drawn as `Circle`; a triangle stands in should one get here.
        Marker::Circle | Marker::Triangle => vec![(0, -5), (5, 4), (-5, 4)],
        Marker::Square => vec![(-4, -4), (4, -4), (4, 4), (-4, 4)],
        Marker::Diamond => vec![(0, -5), (5, 0), (0, 5), (-5, 0)],
    }
}

/// Longest legend entry, in characters; longer names are cut with an ellipsis.
const LEGEND_MAX_CHARS: usize = 52;

/// Width of the legend column: fits the longest (possibly cut) series name; 0 without series.
fn legend_width(plot: &Plot) -> u32 {
    if plot.series.is_empty() {
        return 0;
    }
    let chars = plot
        .series
        .iter()
        .map(|s| s.name.chars().count().min(LEGEND_MAX_CHARS))
        .max()
        .unwrap_or(0);
    // Legend text is mostly lower case, about half an em a character.
    (chars as f64 * LEGEND_PX * 0.5 + 56.0).clamp(110.0, 360.0) as u32
}

fn draw_legend(area: &DrawingArea<SVGBackend<'_>, Shift>, plot: &Plot) -> Result<(), String> {
    let (_, h) = area.dim_in_pixel();
    let n = plot.series.len() as i32;
    let room = h as i32 - MARGIN.0 as i32 - 16;
    let step = (room / n.max(1)).clamp(10, 22);
    let style = (FONT, LEGEND_PX)
        .into_text_style(area)
        .pos(Pos::new(HPos::Left, VPos::Center));
    for (i, s) in plot.series.iter().enumerate() {
        let lk = look(i);
        let y = MARGIN.0 as i32 + 10 + i as i32 * step;
        let (x0, x1) = (4, 34);
        let line = lk.color.stroke_width(2);
        if lk.dashed {
            for a in [x0, x0 + 11, x0 + 22] {
                area.draw(&PathElement::new(vec![(a, y), (a + 8, y)], line))
                    .map_err(|e| e.to_string())?;
            }
        } else {
            area.draw(&PathElement::new(vec![(x0, y), (x1, y)], line))
                .map_err(|e| e.to_string())?;
        }
        let c = ((x0 + x1) / 2, y);
        let fill = lk.color.filled();
        match lk.marker {
            Marker::Circle => area.draw(&Circle::new(c, 4, fill)),
            m => area.draw(&Polygon::new(
                marker_outline(m)
                    .into_iter()
                    .map(|(dx, dy)| (c.0 + dx, c.1 + dy))
                    .collect::<Vec<_>>(),
                fill,
            )),
        }
        .map_err(|e| e.to_string())?;
        let name: String = if s.name.chars().count() > LEGEND_MAX_CHARS {
            let cut: String = s.name.chars().take(LEGEND_MAX_CHARS - 1).collect();
            format!("{cut}…")
        } else {
            s.name.clone()
        };
        area.draw_text(&name, &style, (x1 + 8, y))
            .map_err(|e| e.to_string())?;
    }
    Ok(())
}

/// Axis range covering `values`, padded; `(1, 10)` or `(0, 1)` when there are none.
/// `from_zero`: a linear axis whose values are all non-negative starts at 0.
fn bounds(values: impl Iterator<Item = f64>, log: bool, from_zero: bool) -> (f64, f64) {
    let (lo, hi) = values.fold((f64::INFINITY, f64::NEG_INFINITY), |(lo, hi), v| {
        (lo.min(v), hi.max(v))
    });
    if !lo.is_finite() || !hi.is_finite() {
        return if log { (1.0, 10.0) } else { (0.0, 1.0) };
    }
    if log {
        return (lo / 1.25, hi * 1.25);
    }
    let pad = if hi > lo {
        (hi - lo) * 0.05
    } else {
        (hi.abs() * 0.1).max(1.0)
    };
    let lo = if from_zero && lo >= 0.0 {
        0.0
    } else {
        lo - pad
    };
    (lo, hi + pad)
}

/// One labelled tick.
#[derive(Clone, Debug, PartialEq)]
struct Tick {
    value: f64,
    label: String,
}

/// A plotters coordinate (linear or logarithmic) whose key points are our chosen ticks, so
/// plotters draws exactly those grid lines and labels and formats them with our labels.
#[derive(Clone, Debug)]
struct Axis {
    lo: f64,
    hi: f64,
    log: bool,
    ticks: Vec<Tick>,
    /// Unlabelled light grid lines (the 2..9 × 10^k between decades on a log axis).
    minor: Vec<f64>,
}

impl Axis {
    /// An axis over `lo..hi` whose `px` pixels hold ticks that keep `extent(label)` pixels apart.
    fn new(lo: f64, hi: f64, log: bool, px: f64, extent: &dyn Fn(&str) -> f64) -> Self {
        let (ticks, minor) = if log {
            (log_ticks(lo, hi, px, extent), log_minor(lo, hi))
        } else {
            (linear_ticks(lo, hi, px, extent), Vec::new())
        };
        Axis {
            lo,
            hi,
            log,
            ticks,
            minor,
        }
    }
}

impl Ranged for Axis {
    type FormatOption = NoDefaultFormatting;
    type ValueType = f64;

    fn map(&self, v: &f64, limit: (i32, i32)) -> i32 {
        let f = |v: f64| if self.log { v.ln() } else { v };
        let t = (f(*v) - f(self.lo)) / (f(self.hi) - f(self.lo));
        let len = f64::from(limit.1 - limit.0);
        let p = f64::from(limit.0) + (t * len).clamp(-1e6, 1e6);
        p.round() as i32
    }

    fn key_points<H: KeyPointHint>(&self, hint: H) -> Vec<f64> {
        let mut v: Vec<f64> = self.ticks.iter().map(|t| t.value).collect();
        if hint.weight().allow_light_points() {
            v.extend(self.minor.iter().copied());
        }
        v
    }

    fn range(&self) -> Range<f64> {
        self.lo..self.hi
    }
}

impl ValueFormatter<f64> for Axis {
    fn format_ext(&self, v: &f64) -> String {
        match self.ticks.iter().find(|t| t.value == *v) {
            Some(t) => t.label.clone(),
            None => format!("{v}"),
        }
    }
}

/// Tick sets for a log axis, finest first: each is a list of `(mantissa, exponent)`.
fn log_candidates(lo: f64, hi: f64) -> Vec<Vec<(i64, i32)>> {
    let k0 = lo.log10().floor() as i32;
    let k1 = hi.log10().ceil() as i32;
    let within = |m: i64, k: i32| {
        let v = pow10(m, k);
        v >= lo * (1.0 - 1e-12) && v <= hi * (1.0 + 1e-12)
    };
    let with = |ms: &[i64], stride: i32| -> Vec<(i64, i32)> {
        (k0..=k1)
            .filter(|k| k.rem_euclid(stride) == 0)
            .flat_map(|k| ms.iter().map(move |&m| (m, k)))
            .filter(|&(m, k)| within(m, k))
            .collect()
    };
    let mut out = Vec::new();
    let one_two_five = with(&[1, 2, 5], 1);
    if one_two_five.len() < 2 {
        // Less than a decade: 1..9 × 10^k, so the axis still gets two ticks.
        out.push(with(&[1, 2, 3, 4, 5, 6, 7, 8, 9], 1));
    }
    if hi / lo <= 1e3 * (1.0 + 1e-9) {
        out.push(one_two_five);
    }
    for stride in 1..=(k1 - k0).max(1) {
        out.push(with(&[1], stride));
    }
    out
}

/// Ticks of a log axis over `lo..hi` (both positive) spread over `px` pixels: 1, 2 and 5 × 10^k
/// up to three decades, only 10^k (every second, third... decade if crowded) past that.
fn log_ticks(lo: f64, hi: f64, px: f64, extent: &dyn Fn(&str) -> f64) -> Vec<Tick> {
    const MAX: usize = 10;
    let span = (hi / lo).ln();
    let at = |v: f64| (v / lo).ln() / span * px;
    let sets: Vec<Vec<Tick>> = log_candidates(lo, hi)
        .into_iter()
        .map(|set| {
            set.into_iter()
                .map(|(m, k)| Tick {
                    value: pow10(m, k),
                    label: log_label(m, k),
                })
                .collect()
        })
        .collect();
    pick(sets, MAX, &at, extent)
}

/// Unlabelled grid lines of a log axis: every m × 10^k (m = 1..9) when the axis spans at most six
/// decades, else none.
fn log_minor(lo: f64, hi: f64) -> Vec<f64> {
    if hi / lo > 1e6 {
        return Vec::new();
    }
    let (k0, k1) = (lo.log10().floor() as i32, hi.log10().ceil() as i32);
    (k0..=k1)
        .flat_map(|k| (1..=9).map(move |m| pow10(m, k)))
        .filter(|v| (lo..=hi).contains(v))
        .collect()
}

/// Ticks of a linear axis over `lo..hi` spread over `px` pixels: at most eight, a 1, 2 or 5 × 10^k
/// step, labels exact to the step's precision (`0.25`, not `0.25000000000000006`), and `k`/`M`/`G`
/// units from ten thousand up.
fn linear_ticks(lo: f64, hi: f64, px: f64, extent: &dyn Fn(&str) -> f64) -> Vec<Tick> {
    const MAX: usize = 8;
    if hi <= lo || !lo.is_finite() || !hi.is_finite() {
        return Vec::new();
    }
    let at = |v: f64| (v - lo) / (hi - lo) * px;
    let p0 = ((hi - lo) / MAX as f64).log10().floor() as i32 - 1;
    let mut sets = Vec::new();
    'steps: for p in p0..p0 + 4 {
        for s in [1_i64, 2, 5] {
            let step = pow10(s, p);
            // A hair of slack so 0.7 / 0.1 = 6.999... still gets its tick at 0.7.
            let (n0, n1) = ((lo / step - 1e-9).ceil(), (hi / step + 1e-9).floor());
            if n1 - n0 + 1.0 > 4.0 * MAX as f64 {
                continue;
            }
            let (n0, n1) = (n0 as i64, n1 as i64);
            let big = (n0.abs().max(n1.abs()) * s) as f64 * 10f64.powi(p);
            let unit = [12, 9, 6, 3]
                .into_iter()
                .find(|&e| big >= pow10(10, e))
                .unwrap_or(0);
            let decimals = (unit - p).max(0) as usize;
            let suffix = unit_suffix(unit);
            sets.push(
                (n0..=n1)
                    .map(|n| Tick {
                        value: pow10(n * s, p),
                        label: if n == 0 {
                            "0".into()
                        } else {
                            format!("{}{suffix}", exact(n * s, p - unit, decimals))
                        },
                    })
                    .collect(),
            );
            if n1 - n0 < 1 {
                break 'steps;
            }
        }
    }
    pick(sets, MAX, &at, extent)
}

/// The first (finest) tick set with at most `max` ticks whose neighbouring labels do not overlap;
/// failing that, the sparsest one.
fn pick(
    sets: Vec<Vec<Tick>>,
    max: usize,
    at: &dyn Fn(f64) -> f64,
    extent: &dyn Fn(&str) -> f64,
) -> Vec<Tick> {
    let fits = |set: &[Tick]| {
        set.len() <= max
            && set.windows(2).all(|w| {
                at(w[1].value) - at(w[0].value) >= (extent(&w[0].label) + extent(&w[1].label)) / 2.0
            })
    };
    let mut last = Vec::new();
    for set in sets {
        if set.is_empty() {
            continue;
        }
        if fits(&set) {
            return set;
        }
        last = set;
    }
    last.truncate(1);
    last
}

/// `m × 10^k` as an `f64`, dividing by an exact power of ten for negative `k` so `0.1` is `0.1`.
fn pow10(m: i64, k: i32) -> f64 {
    if k >= 0 {
        m as f64 * 10f64.powi(k)
    } else {
        m as f64 / 10f64.powi(-k)
    }
}

fn unit_suffix(e: i32) -> &'static str {
    match e {
        3 => "k",
        6 => "M",
        9 => "G",
        12 => "T",
        _ => "",
    }
}

/// Label of the log tick `m × 10^k`: `1`, `20`, `500`, `1k`, `20k`, `1M`, `0.5`, `0.01`, and
/// `1e-7`/`1e18` outside `1e-5..1e15`.
fn log_label(m: i64, k: i32) -> String {
    if !(-5..15).contains(&k) {
        return format!("{m}e{k}");
    }
    let unit = [12, 9, 6, 3].into_iter().find(|&e| k >= e).unwrap_or(0);
    format!(
        "{}{}",
        exact(m, k - unit, (unit - k).max(0) as usize),
        unit_suffix(unit)
    )
}

/// `n × 10^q` written exactly, with `decimals` digits after the point (at least `-q`).
fn exact(n: i64, q: i32, decimals: usize) -> String {
    let sign = if n < 0 { "-" } else { "" };
    let mut digits = n.unsigned_abs().to_string();
    let mut frac_len = 0usize;
    if q >= 0 {
        digits.push_str(&"0".repeat(q as usize));
    } else {
        frac_len = (-q) as usize;
        if digits.len() <= frac_len {
            digits = format!("{}{digits}", "0".repeat(frac_len + 1 - digits.len()));
        }
    }
    let (int, frac) = digits.split_at(digits.len() - frac_len);
    let mut frac = frac.to_string();
    while frac.len() < decimals {
        frac.push('0');
    }
    if frac.is_empty() {
        format!("{sign}{int}")
    } else {
        format!("{sign}{int}.{frac}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::report::Series;

    fn plot(log_x: bool, log_y: bool) -> Plot {
        Plot {
            id: "t".into(),
            title: "Latency <vs> size".into(),
            x_label: "bytes".into(),
            y_label: "ns".into(),
            log_x,
            log_y,
            series: vec![
                Series {
                    name: "raw udp".into(),
                    points: vec![(1.0, 10.0), (10.0, 20.0), (100.0, 40.0), (0.0, f64::NAN)],
                },
                Series {
                    name: "phyllo".into(),
                    points: vec![(1.0, 12.0), (10.0, 25.0), (1000.0, 400.0)],
                },
                Series {
                    name: "phyllo sealed".into(),
                    points: vec![(2.0, 15.0), (20.0, 30.0), (2000.0, 600.0)],
                },
            ],
            caption: String::new(),
        }
    }

    /// WCAG relative luminance of an sRGB colour.
    fn luminance(c: (u8, u8, u8)) -> f64 {
        let lin = |v: u8| {
            let v = f64::from(v) / 255.0;
            if v <= 0.03928 {
                v / 12.92
            } else {
                ((v + 0.055) / 1.055).powf(2.4)
            }
        };
        0.2126 * lin(c.0) + 0.7152 * lin(c.1) + 0.0722 * lin(c.2)
    }

    /// CIE76 colour difference (CIELAB distance, D65 white).
    fn delta_e(a: (u8, u8, u8), b: (u8, u8, u8)) -> f64 {
        fn lab(c: (u8, u8, u8)) -> [f64; 3] {
            let lin = |v: u8| {
                let v = f64::from(v) / 255.0;
                if v <= 0.04045 {
                    v / 12.92
                } else {
                    ((v + 0.055) / 1.055).powf(2.4)
                }
            };
            let (r, g, b) = (lin(c.0), lin(c.1), lin(c.2));
            let x = (0.4124 * r + 0.3576 * g + 0.1805 * b) / 0.95047;
            let y = 0.2126 * r + 0.7152 * g + 0.0722 * b;
            let z = (0.0193 * r + 0.1192 * g + 0.9505 * b) / 1.08883;
            let f = |t: f64| {
                if t > 0.008856 {
                    t.cbrt()
                } else {
                    7.787 * t + 16.0 / 116.0
                }
            };
            [
                116.0 * f(y) - 16.0,
                500.0 * (f(x) - f(y)),
                200.0 * (f(y) - f(z)),
            ]
        }
        let (p, q) = (lab(a), lab(b));
        p.iter()
            .zip(q)
            .map(|(u, v)| (u - v).powi(2))
            .sum::<f64>()
            .sqrt()
    }

    fn contrast_on_white(c: (u8, u8, u8)) -> f64 {
        1.05 / (luminance(c) + 0.05)
    }

    /// Every `#RRGGBB` in an SVG.
    fn colours(svg: &str) -> Vec<(u8, u8, u8)> {
        let b = svg.as_bytes();
        (0..b.len().saturating_sub(7))
            .filter(|&i| b[i] == b'#' && b[i + 1..i + 7].iter().all(u8::is_ascii_hexdigit))
            .map(|i| {
                let h = |j: usize| u8::from_str_radix(&svg[i + j..i + j + 2], 16).unwrap();
                (h(1), h(3), h(5))
            })
            .collect()
    }

    #[test]
    fn renders_text_and_series_names_without_fonts() {
        for (lx, ly) in [(false, false), (true, false), (false, true), (true, true)] {
            let svg = render(&plot(lx, ly)).unwrap();
            assert!(svg.contains("<svg"), "{svg}");
            assert!(svg.contains("<text"));
            assert!(svg.contains("raw udp") && svg.contains("phyllo"));
            assert!(svg.contains("Latency &lt;vs&gt; size"), "title escaped");
        }
    }

    #[test]
    fn renders_empty_plot() {
        let mut p = plot(true, true);
        p.series.clear();
        assert!(render(&p).unwrap().contains("<svg"));
        let mut p = plot(false, false);
        p.series = vec![Series {
            name: "one".into(),
            points: vec![(3.0, 3.0)],
        }];
        assert!(render(&p).unwrap().contains("one"));
    }

    #[test]
    fn palette_is_distinct_and_readable_on_white() {
        for (i, a) in PALETTE.iter().enumerate() {
            let ca = (a.0, a.1, a.2);
            assert!(
                contrast_on_white(ca) >= 3.0,
                "{ca:?} has contrast {:.2} on white",
                contrast_on_white(ca)
            );
            for b in &PALETTE[i + 1..] {
                let d = delta_e(ca, (b.0, b.1, b.2));
                assert!(d >= 25.0, "{a:?} and {b:?} are alike (ΔE {d:.1})");
            }
        }
        // Past the palette the line style changes, and the marker shape differs from the
        // same-coloured series before it.
        assert!(!look(0).dashed && look(PALETTE.len()).dashed);
        assert_ne!(look(0).marker, look(PALETTE.len()).marker);
    }

    #[test]
    fn rendered_svg_uses_the_palette_and_no_light_colours() {
        let svg = render(&plot(true, false)).unwrap();
        for c in &PALETTE[..3] {
            let hex = format!("#{:02X}{:02X}{:02X}", c.0, c.1, c.2);
            assert!(svg.contains(&hex), "missing {hex}");
        }
        assert!(
            !svg.contains("#FFFF00") && !svg.contains("#FFE119"),
            "no yellow"
        );
        for c in colours(&svg) {
            let grey = c.0 == c.1 && c.1 == c.2;
            assert!(grey || contrast_on_white(c) >= 3.0, "light colour {c:?}");
        }
    }

    fn is_125(v: f64) -> bool {
        let k = v.log10().floor();
        let m = v / 10f64.powf(k);
        [1.0, 2.0, 5.0, 10.0].iter().any(|x| (m - x).abs() < 1e-9)
    }

    fn labels(t: &[Tick]) -> Vec<&str> {
        t.iter().map(|t| t.label.as_str()).collect()
    }

    #[test]
    fn log_ticks_are_decades_once_each() {
        let wide = |l: &str| text_width(l, LABEL_PX) + 12.0;
        let t = log_ticks(7.0, 250_000.0, 700.0, &wide);
        assert_eq!(labels(&t), ["10", "100", "1k", "10k", "100k"]);
        let t = log_ticks(0.003, 40.0, 700.0, &wide);
        assert_eq!(labels(&t), ["0.01", "0.1", "1", "10"]);
        // Up to three decades: 1, 2, 5.
        let t = log_ticks(800.0, 260_000.0, 700.0, &wide);
        assert_eq!(
            labels(&t),
            ["1k", "2k", "5k", "10k", "20k", "50k", "100k", "200k"]
        );
        // Crowded: every other decade.
        let t = log_ticks(1e-3, 1e12, 300.0, &wide);
        assert!(t.len() <= 10 && t.len() >= 3, "{t:?}");
        // Less than a decade still gets ticks.
        let t = log_ticks(300.0, 450.0, 700.0, &wide);
        assert_eq!(labels(&t), ["300", "400"]);
        for (lo, hi, px) in [
            (7.0, 250_000.0, 700.0),
            (7.0, 250_000.0, 120.0),
            (0.5, 30.0, 300.0),
            (5.6, 31.0, 700.0),
            (1.0, 1e9, 360.0),
        ] {
            let t = log_ticks(lo, hi, px, &wide);
            assert!(!t.is_empty(), "{lo}..{hi}");
            let mut seen = labels(&t);
            seen.dedup();
            assert_eq!(seen.len(), t.len(), "{t:?}");
            for w in t.windows(2) {
                assert!(w[0].value < w[1].value);
            }
            for tick in &t {
                assert!(is_125(tick.value), "{tick:?}");
                assert!((lo..=hi).contains(&tick.value));
            }
        }
    }

    #[test]
    fn linear_ticks_are_few_and_exact() {
        let wide = |l: &str| text_width(l, LABEL_PX) + 12.0;
        let t = linear_ticks(0.0, 10.5, 700.0, &wide);
        assert_eq!(labels(&t), ["0", "2", "4", "6", "8", "10"]);
        let t = linear_ticks(-13_000.0, 273_000.0, 700.0, &wide);
        assert_eq!(labels(&t), ["0", "50k", "100k", "150k", "200k", "250k"]);
        let t = linear_ticks(0.0, 0.7, 300.0, &wide);
        assert_eq!(
            labels(&t),
            ["0", "0.1", "0.2", "0.3", "0.4", "0.5", "0.6", "0.7"]
        );
        let t = linear_ticks(0.0, 1.3, 300.0, &wide);
        assert_eq!(labels(&t), ["0", "0.2", "0.4", "0.6", "0.8", "1.0", "1.2"]);
        let t = linear_ticks(-2.5, 2.5, 300.0, &wide);
        assert_eq!(labels(&t), ["-2", "-1", "0", "1", "2"]);
        for (lo, hi) in [(0.0, 1.0), (3.0, 3.000001), (-1e9, 5e9), (0.0, 47_000.0)] {
            let t = linear_ticks(lo, hi, 300.0, &wide);
            assert!(!t.is_empty() && t.len() <= 8, "{t:?}");
            for tick in &t {
                assert!(tick.label.len() <= 12, "{tick:?}");
            }
        }
    }

    #[test]
    fn exact_labels() {
        assert_eq!(exact(25, -1, 1), "2.5");
        assert_eq!(exact(5, -3, 3), "0.005");
        assert_eq!(exact(-12, -1, 2), "-1.20");
        assert_eq!(exact(3, 2, 0), "300");
        assert_eq!(log_label(1, 6), "1M");
        assert_eq!(log_label(5, 4), "50k");
        assert_eq!(log_label(2, -2), "0.02");
        assert_eq!(log_label(1, -8), "1e-8");
    }
}
