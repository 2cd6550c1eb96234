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

/// A table cell: `median [min–max]` with three decimals.
pub fn summary(xs: &[f64]) -> String {
    if xs.iter().all(|x| x.is_nan()) {
        // Nothing measured (e.g. a spread never reached in any run).
        return "never".to_string();
    }
    let (lo, hi) = range(xs);
    format!("{:.3} [{:.3}–{:.3}]", median(xs), lo, hi)
}

/// The Mann–Whitney U test of two independent samples: (U of `a`, two-sided p-value by the
/// normal approximation with tie correction and continuity correction). Small p: the two
/// distributions differ.
pub fn mann_whitney(a: &[f64], b: &[f64]) -> (f64, f64) {
    let (n1, n2) = (a.len() as f64, b.len() as f64);
    if a.is_empty() || b.is_empty() {
        return (f64::NAN, f64::NAN);
    }
    let mut all: Vec<(f64, usize)> = a.iter().map(|&x| (x, 0)).chain(b.iter().map(|&x| (x, 1))).collect();
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
    let n = n1 + n2;
    let mu = n1 * n2 / 2.0;
    let sigma = (n1 * n2 / 12.0 * ((n + 1.0) - tie_term / (n * (n - 1.0)))).sqrt();
    if sigma == 0.0 {
        return (u1, 1.0);
    }
    let z = ((u1 - mu).abs() - 0.5).max(0.0) / sigma;
    (u1, 2.0 * normal_sf(z))
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
        // Known value: samples {1,2,3} vs {4,5,6}: U = 0; normal approx p ≈ 0.081.
        let (u, p) = mann_whitney(&[1.0, 2.0, 3.0], &[4.0, 5.0, 6.0]);
        assert_eq!(u, 0.0);
        assert!((p - 0.081).abs() < 0.01, "{p}");
    }
}
