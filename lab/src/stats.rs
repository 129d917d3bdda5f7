//! Figures over repeated rounds, stated one way everywhere in the report.
//!
//! An experiment that repeats a measurement in interleaved rounds reports the **true median**
//! of the per-round values, and a ratio between two things measured side by side as the median
//! of the **per-round ratios** ([`ratio_summary`]) — not a ratio of medians, which can pair
//! values from different rounds. Beside every such figure the text prints its spread, the
//! smallest and largest round ([`Summary::show`]: `0.84 (0.68–0.91, 5 rounds)`).
//!
//! Round counts are odd, so the median is one round's value. For an even count [`Summary`]
//! takes the mean of the two middle values (the usual definition), but the experiments do not
//! rely on it.
//!
//! Values that are not finite (NaN, ±∞ — a ratio over a zero, a run that measured nothing) are
//! left out of the order statistics and counted in [`Summary::skipped`], which
//! [`Summary::show`] prints; a summary of no finite value has `n == 0` and NaN for its median,
//! min and max.
//!
//! Per-sample statistics of latency distributions (thousands of round trips, percentiles) are
//! [`crate::rawudp::Summary`]'s; this module is for the few values of rounds.

/// Median, min and max of the finite values of a set of rounds.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Summary {
    /// The true median: the middle value of an odd count, the mean of the two middle values of
    /// an even one; NaN if `n == 0`.
    pub median: f64,
    /// The smallest value; NaN if `n == 0`.
    pub min: f64,
    /// The largest value; NaN if `n == 0`.
    pub max: f64,
    /// Finite values summarised.
    pub n: usize,
    /// Values left out because they were not finite.
    pub skipped: usize,
}

impl Summary {
    /// Summarise `values` (not reordered), leaving out the non-finite ones.
    pub fn of(values: &[f64]) -> Summary {
        let mut v: Vec<f64> = values.iter().copied().filter(|x| x.is_finite()).collect();
        let skipped = values.len() - v.len();
        v.sort_by(f64::total_cmp);
        let n = v.len();
        if n == 0 {
            return Summary {
                median: f64::NAN,
                min: f64::NAN,
                max: f64::NAN,
                n,
                skipped,
            };
        }
        let median = if n % 2 == 1 {
            v[n / 2]
        } else {
            (v[n / 2 - 1] + v[n / 2]) / 2.0
        };
        Summary {
            median,
            min: v[0],
            max: v[n - 1],
            n,
            skipped,
        }
    }

    /// The same summary in other units: median, min and max multiplied by `k` (> 0), e.g.
    /// `1e-6` for bytes/s to MB/s.
    pub fn scaled(self, k: f64) -> Summary {
        debug_assert!(k > 0.0, "a scale that reorders min and max");
        Summary {
            median: self.median * k,
            min: self.min * k,
            max: self.max * k,
            ..self
        }
    }

    /// `median (min–max, n what)` with `decimals` decimals, e.g. `0.84 (0.68–0.91, 5 rounds)`;
    /// `what` names the rounds in the plural (`"rounds"`, `"blocks"`; one reads `1.5 (1 round)`).
    /// Non-finite values left out are counted (`…, 5 rounds, 1 not finite left out)`); a
    /// summary of nothing reads `— (…)`.
    pub fn show(&self, decimals: usize, what: &str) -> String {
        let left_out = if self.skipped > 0 {
            format!(", {} not finite left out", self.skipped)
        } else {
            String::new()
        };
        match self.n {
            0 => format!("— (no finite value of {} {what}{left_out})", self.skipped),
            1 => format!(
                "{:.decimals$} (1 {}{left_out})",
                self.median,
                what.strip_suffix('s').unwrap_or(what)
            ),
            n => format!(
                "{:.d$} ({:.d$}–{:.d$}, {n} {what}{left_out})",
                self.median,
                self.min,
                self.max,
                d = decimals
            ),
        }
    }

    /// `median (min–max)` with `decimals` decimals, for a table cell whose title says how
    /// many rounds there are.
    pub fn cell(&self, decimals: usize) -> String {
        match self.n {
            0 => "—".into(),
            _ => format!(
                "{:.d$} ({:.d$}–{:.d$})",
                self.median,
                self.min,
                self.max,
                d = decimals
            ),
        }
    }
}

/// The true median of the finite values of `values` (NaN if there are none): [`Summary::of`]'s.
pub fn median(values: &[f64]) -> f64 {
    Summary::of(values).median
}

/// The summary of the per-round ratios `num[i] / den[i]`: each round's ratio of two values
/// measured side by side, then the median over rounds. A zero denominator makes a non-finite
/// ratio, left out and counted.
///
/// # Panics
///
/// If the slices differ in length (the rounds would not pair).
pub fn ratio_summary(num: &[f64], den: &[f64]) -> Summary {
    assert_eq!(num.len(), den.len(), "ratios of rounds that do not pair");
    let ratios: Vec<f64> = num.iter().zip(den).map(|(a, b)| a / b).collect();
    Summary::of(&ratios)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn odd_count_takes_the_middle_value() {
        let s = Summary::of(&[5.0, 1.0, 3.0]);
        assert_eq!(
            (s.median, s.min, s.max, s.n, s.skipped),
            (3.0, 1.0, 5.0, 3, 0)
        );
        // Not the upper or lower of two: the old `v[v.len() / 2]` of [1, 3] was 3.
        assert_eq!(median(&[9.0, 2.0, 4.0, 7.0, 1.0]), 4.0);
    }

    #[test]
    fn even_count_takes_the_mean_of_the_two_middle_values() {
        assert_eq!(median(&[1.0, 3.0]), 2.0);
        let s = Summary::of(&[4.0, 1.0, 10.0, 2.0]);
        assert_eq!((s.median, s.min, s.max, s.n), (3.0, 1.0, 10.0, 4));
    }

    #[test]
    fn non_finite_values_are_left_out_and_counted() {
        let s = Summary::of(&[f64::NAN, 2.0, f64::INFINITY, 1.0, 3.0]);
        assert_eq!(
            (s.median, s.min, s.max, s.n, s.skipped),
            (2.0, 1.0, 3.0, 3, 2)
        );
        assert_eq!(
            s.show(1, "rounds"),
            "2.0 (1.0–3.0, 3 rounds, 2 not finite left out)"
        );
        let none = Summary::of(&[f64::NAN]);
        assert_eq!((none.n, none.skipped), (0, 1));
        assert!(none.median.is_nan() && none.min.is_nan() && none.max.is_nan());
        assert!(median(&[]).is_nan());
        assert_eq!(none.cell(2), "—");
    }

    #[test]
    fn ratios_are_per_round_not_of_medians() {
        // Medians 2 and 2 (ratio of medians 1), but the rounds' ratios are 0.5, 1 and 3.
        let num = [1.0, 2.0, 3.0];
        let den = [2.0, 2.0, 1.0];
        let s = ratio_summary(&num, &den);
        assert_eq!((s.median, s.min, s.max, s.n), (1.0, 0.5, 3.0, 3));
        let s = ratio_summary(&[1.0, 1.0, 2.0], &[0.0, 1.0, 4.0]);
        assert_eq!((s.median, s.n, s.skipped), (0.75, 2, 1));
    }

    #[test]
    #[should_panic(expected = "do not pair")]
    fn unpaired_rounds_panic() {
        ratio_summary(&[1.0, 2.0], &[1.0]);
    }

    #[test]
    fn formats() {
        let s = Summary::of(&[0.912, 0.84, 0.68, 0.85, 0.80]);
        assert_eq!(s.show(2, "rounds"), "0.84 (0.68–0.91, 5 rounds)");
        assert_eq!(s.cell(2), "0.84 (0.68–0.91)");
        assert_eq!(Summary::of(&[1.5]).show(1, "rounds"), "1.5 (1 round)");
        let mb = Summary::of(&[111e6, 134e6, 120e6]).scaled(1e-6);
        assert_eq!(mb.show(0, "rounds"), "120 (111–134, 3 rounds)");
    }
}
