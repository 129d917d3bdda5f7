//! Plot rendering: one [`Plot`] to one self-contained SVG document, with plotters.
//!
//! plotters is built without a font backend (no `ttf`, no fontconfig): its SVG backend writes
//! text as `<text>` elements and the viewer picks the font, and plotters lays labels out with
//! a crude width estimate, which is all an SVG needs. Non-finite points are dropped, and so are
//! non-positive coordinates on a logarithmic axis.

use plotters::coord::ranged1d::{AsRangedCoord, ValueFormatter};
use plotters::prelude::*;

use super::Plot;

/// Width and height of every plot, in SVG pixels.
const SIZE: (u32, u32) = (800, 480);

/// Render `plot` as an SVG document.
pub fn render(plot: &Plot) -> Result<String, String> {
    let usable = |v: f64, log: bool| v.is_finite() && (!log || v > 0.0);
    let points = || {
        plot.series
            .iter()
            .flat_map(|s| s.points.iter())
            .filter(|(x, y)| usable(*x, plot.log_x) && usable(*y, plot.log_y))
    };
    let (x0, x1) = bounds(points().map(|p| p.0), plot.log_x, false);
    let (y0, y1) = bounds(points().map(|p| p.1), plot.log_y, true);
    let mut svg = String::new();
    {
        let root = SVGBackend::with_string(&mut svg, SIZE).into_drawing_area();
        root.fill(&WHITE).map_err(|e| e.to_string())?;
        match (plot.log_x, plot.log_y) {
            (false, false) => draw(&root, plot, x0..x1, y0..y1),
            (true, false) => draw(&root, plot, (x0..x1).log_scale(), y0..y1),
            (false, true) => draw(&root, plot, x0..x1, (y0..y1).log_scale()),
            (true, true) => draw(&root, plot, (x0..x1).log_scale(), (y0..y1).log_scale()),
        }?;
        root.present().map_err(|e| e.to_string())?;
    }
    Ok(svg)
}

fn draw<X, Y>(
    root: &DrawingArea<SVGBackend<'_>, plotters::coord::Shift>,
    plot: &Plot,
    x: X,
    y: Y,
) -> Result<(), String>
where
    X: AsRangedCoord<Value = f64>,
    Y: AsRangedCoord<Value = f64>,
    X::CoordDescType: ValueFormatter<f64>,
    Y::CoordDescType: ValueFormatter<f64>,
{
    let usable = |v: f64, log: bool| v.is_finite() && (!log || v > 0.0);
    let mut chart = ChartBuilder::on(root)
        .caption(&plot.title, ("sans-serif", 20))
        .margin(12)
        .x_label_area_size(44)
        .y_label_area_size(70)
        .build_cartesian_2d(x, y)
        .map_err(|e| e.to_string())?;
    chart
        .configure_mesh()
        .x_desc(plot.x_label.as_str())
        .y_desc(plot.y_label.as_str())
        .x_label_formatter(&|v| fmt_tick(*v))
        .y_label_formatter(&|v| fmt_tick(*v))
        .label_style(("sans-serif", 13))
        .draw()
        .map_err(|e| e.to_string())?;
    for (i, s) in plot.series.iter().enumerate() {
        let color = Palette99::pick(i).to_rgba();
        let pts: Vec<(f64, f64)> = s
            .points
            .iter()
            .copied()
            .filter(|(x, y)| usable(*x, plot.log_x) && usable(*y, plot.log_y))
            .collect();
        chart
            .draw_series(LineSeries::new(pts.iter().copied(), color.stroke_width(2)))
            .map_err(|e| e.to_string())?
            .label(s.name.as_str())
            .legend(move |(x, y)| {
                PathElement::new(vec![(x, y), (x + 20, y)], color.stroke_width(2))
            });
        chart
            .draw_series(pts.iter().map(|&p| Circle::new(p, 3, color.filled())))
            .map_err(|e| e.to_string())?;
    }
    if !plot.series.is_empty() {
        chart
            .configure_series_labels()
            .label_font(("sans-serif", 13))
            .background_style(WHITE.mix(0.85))
            .border_style(BLACK.mix(0.4))
            .draw()
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

/// A short tick label: integers as integers, otherwise three significant digits.
fn fmt_tick(v: f64) -> String {
    let a = v.abs();
    if v == 0.0 {
        "0".into()
    } else if !(1e-3..1e7).contains(&a) {
        format!("{v:.1e}")
    } else if v.fract() == 0.0 || a >= 100.0 {
        format!("{v:.0}")
    } else if a >= 1.0 {
        format!("{v:.2}")
    } else {
        format!("{v:.3}")
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
            ],
        }
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
    }

    #[test]
    fn tick_labels_are_short() {
        assert_eq!(fmt_tick(0.0), "0");
        assert_eq!(fmt_tick(1000.0), "1000");
        assert_eq!(fmt_tick(2.5), "2.50");
        assert_eq!(fmt_tick(1e9), "1.0e9");
    }
}
