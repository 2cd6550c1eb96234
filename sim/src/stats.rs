//! Summary statistics for experiment tables: median, range, and the Mann–Whitney U test.

/// Median (mean of the two middle values for an even count); NaN for no data.
pub fn median(xs: &[f64]) -> f64 {
    if xs.is_empty() {
        return f64::NAN;
    }
    let mut v = xs.to_vec();
    v.sort_by(|a, b| a.total_cmp(b));
    let n = v.len();
    if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    }
}

/// The `q`-quantile (0 ≤ q ≤ 1) by nearest rank: the smallest value with at least a `q`
/// share of the values at or below it; NaN for no data.
///
/// ```
/// use sched_sim::stats::quantile;
/// let xs: Vec<f64> = (1..=100).map(f64::from).collect();
/// assert_eq!(quantile(&xs, 0.5), 50.0);
/// assert_eq!(quantile(&xs, 0.99), 99.0);
/// assert_eq!(quantile(&xs, 1.0), 100.0);
/// ```
pub fn quantile(xs: &[f64], q: f64) -> f64 {
    if xs.is_empty() {
        return f64::NAN;
    }
    let mut v = xs.to_vec();
    v.sort_by(|a, b| a.total_cmp(b));
    let rank = (q.clamp(0.0, 1.0) * v.len() as f64).ceil().max(1.0) as usize;
    v[rank - 1]
}

/// (min, max).
pub fn range(xs: &[f64]) -> (f64, f64) {
    xs.iter().fold((f64::INFINITY, f64::NEG_INFINITY), |(lo, hi), &x| (lo.min(x), hi.max(x)))
}

/// A run's figure as the tables rank it: one the run never reached (NaN, e.g. a spread that
/// did not happen before the run ended) counts as later than every reached one (+∞).
fn censored(x: f64) -> f64 {
    if x.is_nan() {
        f64::INFINITY
    } else {
        x
    }
}

/// A table cell: `median [min–max]` with three decimals, where a run that never reached the
/// figure counts as later than every run that did (so a median or maximum may be `never`).
///
/// ```
/// use sched_sim::stats::summary;
/// assert_eq!(summary(&[1.0, 3.0, 2.0]), "2.000 [1.000–3.000]");
/// assert_eq!(summary(&[1.0, f64::NAN, 3.0]), "3.000 [1.000–never]");
/// assert_eq!(summary(&[f64::NAN, 1.0]), "never [1.000–never]");
/// assert_eq!(summary(&[f64::NAN, f64::NAN]), "never");
/// assert_eq!(summary(&[]), "—");
/// ```
pub fn summary(xs: &[f64]) -> String {
    if xs.is_empty() {
        // No run has the figure.
        return "—".to_string();
    }
    if xs.iter().all(|x| x.is_nan()) {
        // Nothing measured (e.g. a spread never reached in any run).
        return "never".to_string();
    }
    let v: Vec<f64> = xs.iter().map(|&x| censored(x)).collect();
    let (lo, hi) = range(&v);
    let cell = |x: f64| if x.is_finite() { format!("{x:.3}") } else { "never".to_string() };
    format!("{} [{}–{}]", cell(median(&v)), cell(lo), cell(hi))
}

/// The Mann–Whitney U test of two independent samples: (U of `a`, two-sided p-value). A run
/// that never reached the figure (NaN) ranks after every one that did, and such runs tie with
/// one another. With both samples below 8 and no ties, p is exact (the count of rank orders
/// at least as extreme); otherwise it is the normal approximation with tie and continuity
/// corrections. Small p: the two distributions differ.
pub fn mann_whitney(a: &[f64], b: &[f64]) -> (f64, f64) {
    let (n1, n2) = (a.len() as f64, b.len() as f64);
    if a.is_empty() || b.is_empty() {
        return (f64::NAN, f64::NAN);
    }
    let mut all: Vec<(f64, usize)> =
        a.iter().map(|&x| (censored(x), 0)).chain(b.iter().map(|&x| (censored(x), 1))).collect();
    all.sort_by(|x, y| x.0.total_cmp(&y.0));
    // Average ranks over ties.
    let mut ranks = vec![0.0; all.len()];
    let mut tie_term = 0.0;
    let mut i = 0;
    while i < all.len() {
        let mut j = i;
        while j + 1 < all.len() && all[j + 1].0 == all[i].0 {
            j += 1;
        }
        let r = (i + j) as f64 / 2.0 + 1.0;
        for rank in ranks.iter_mut().take(j + 1).skip(i) {
            *rank = r;
        }
        let t = (j - i + 1) as f64;
        tie_term += t * t * t - t;
        i = j + 1;
    }
    let r1: f64 = all.iter().zip(&ranks).filter(|(x, _)| x.1 == 0).map(|(_, r)| r).sum();
    let u1 = r1 - n1 * (n1 + 1.0) / 2.0;
    if tie_term == 0.0 && a.len() < EXACT_BELOW && b.len() < EXACT_BELOW {
        return (u1, exact_p(a.len(), b.len(), u1 as usize));
    }
    let n = n1 + n2;
    let mu = n1 * n2 / 2.0;
    let sigma = (n1 * n2 / 12.0 * ((n + 1.0) - tie_term / (n * (n - 1.0)))).sqrt();
    if sigma == 0.0 {
        return (u1, 1.0);
    }
    let z = ((u1 - mu).abs() - 0.5).max(0.0) / sigma;
    (u1, 2.0 * normal_sf(z))
}

/// Samples this small (both) without ties get the exact p: the normal approximation's tails
/// are off there by up to several times (0.081 for 3 against 3 fully apart, where it is 0.1;
/// 0.0022 for 7 against 7, where it is 0.00058).
const EXACT_BELOW: usize = 8;

/// The exact two-sided p of `u` for samples of `n1` and `n2` without ties: twice the share of
/// the C(n1 + n2, n1) equally likely rank orders whose U is at most `min(u, n1·n2 − u)`, at
/// most 1. The counts come from the recurrence on the largest value's sample:
/// `f(i, j, u) = f(i − 1, j, u − j) + f(i, j − 1, u)`.
fn exact_p(n1: usize, n2: usize, u: usize) -> f64 {
    let max_u = n1 * n2;
    // counts[i][j][u] for i ≤ n1, j ≤ n2 (tiny: both below `EXACT_BELOW`).
    let mut counts = vec![vec![Vec::<f64>::new(); n2 + 1]; n1 + 1];
    for i in 0..=n1 {
        for j in 0..=n2 {
            let mut f = vec![0.0; i * j + 1];
            if i == 0 || j == 0 {
                f[0] = 1.0;
            } else {
                for (v, slot) in f.iter_mut().enumerate() {
                    let from_a =
                        if v >= j { counts[i - 1][j].get(v - j).copied().unwrap_or(0.0) } else { 0.0 };
                    let from_b = counts[i][j - 1].get(v).copied().unwrap_or(0.0);
                    *slot = from_a + from_b;
                }
            }
            counts[i][j] = f;
        }
    }
    let f = &counts[n1][n2];
    let total: f64 = f.iter().sum();
    let tail: f64 = f.iter().take(u.min(max_u.saturating_sub(u)) + 1).sum();
    (2.0 * tail / total).min(1.0)
}

/// Upper tail of the standard normal distribution, P(Z > z) (Abramowitz–Stegun 7.1.26).
fn normal_sf(z: f64) -> f64 {
    let x = z / std::f64::consts::SQRT_2;
    let t = 1.0 / (1.0 + 0.327_591_1 * x);
    let poly = t
        * (0.254_829_592
            + t * (-0.284_496_736 + t * (1.421_413_741 + t * (-1.453_152_027 + t * 1.061_405_429))));
    let erfc = poly * (-x * x).exp();
    0.5 * erfc
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn medians() {
        assert_eq!(median(&[3.0, 1.0, 2.0]), 2.0);
        assert_eq!(median(&[4.0, 1.0, 2.0, 3.0]), 2.5);
        assert_eq!(range(&[3.0, 1.0, 2.0]), (1.0, 3.0));
    }

    #[test]
    fn mann_whitney_separates_and_not() {
        let a: Vec<f64> = (0..15).map(|i| 100.0 + i as f64).collect();
        let b: Vec<f64> = (0..15).map(|i| 200.0 + i as f64).collect();
        let (u, p) = mann_whitney(&a, &b);
        assert_eq!(u, 0.0);
        assert!(p < 1e-4, "{p}");
        let (_, p) = mann_whitney(&a, &a);
        assert!(p > 0.9, "{p}");
        // Small samples without ties are exact: {1,2,3} against {4,5,6} is one order of the
        // C(6,3) = 20 on each side, p = 2/20; 2 against 2, 2/6; 5 against 5, 2/252.
        let (u, p) = mann_whitney(&[1.0, 2.0, 3.0], &[4.0, 5.0, 6.0]);
        assert_eq!(u, 0.0);
        assert!((p - 0.1).abs() < 1e-12, "{p}");
        let (_, p) = mann_whitney(&[3.0, 4.0], &[1.0, 2.0]);
        assert!((p - 1.0 / 3.0).abs() < 1e-12, "{p}");
        let (_, p) = mann_whitney(&[1.0, 2.0, 3.0, 4.0, 5.0], &[6.0, 7.0, 8.0, 9.0, 10.0]);
        assert!((p - 2.0 / 252.0).abs() < 1e-12, "{p}");
        // Interleaved: {1,3,5} against {2,4,6}, U = 3 of 9; P(U ≤ 3) = 7/20, so p = 0.7.
        let (u, p) = mann_whitney(&[1.0, 3.0, 5.0], &[2.0, 4.0, 6.0]);
        assert_eq!(u, 3.0);
        assert!((p - 0.7).abs() < 1e-12, "{p}");
    }

    /// A run that never reached a figure ranks after every run that did: two sides that
    /// reached nothing do not differ, and one that reached it in every run beats one that
    /// never did.
    #[test]
    fn never_ranks_last_and_ties() {
        let never = [f64::NAN; 15];
        let (_, p) = mann_whitney(&never, &never);
        assert_eq!(p, 1.0);
        let reached: Vec<f64> = (0..15).map(f64::from).collect();
        let (u, p) = mann_whitney(&reached, &never);
        assert_eq!(u, 0.0);
        assert!(p < 1e-4, "{p}");
    }
}
