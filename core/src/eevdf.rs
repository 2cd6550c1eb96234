//! EEVDF's arithmetic (Earliest Eligible Virtual Deadline First; Stoica and Abdel-Wahab 1995,
//! Linux 6.6+): the runqueue's load-weighted average vruntime kept incrementally, eligibility
//! (lag ≥ 0) decided without a division, lag kept across sleep and clamped, the lag-preserving
//! placement of a woken entity, and virtual deadlines from slices.
//!
//! All vruntimes here are `u64` counters compared wrap-safely; the average is kept relative to
//! a *base* (the runqueue's `min_vruntime`) so that the sums stay small: Σ (vᵢ − base)·wᵢ and
//! Σ wᵢ over the queued entities, the current one apart. Weights are load weights (1024 for
//! nice 0). The pick itself — the eligible entity with the earliest deadline — is
//! `Timeline::pick_eligible`.
//!
//! ```
//! use sched_core::eevdf::AvgVruntime;
//! let mut avg = AvgVruntime::new();
//! let base = 1_000;
//! avg.add(1_000, base, 1024); // v = 1000, nice 0
//! avg.add(1_300, base, 1024); // v = 1300
//! assert_eq!(avg.avg(base, None), 1_150);
//! assert!(avg.eligible(1_100, base, None)); // behind the average: owed service
//! assert!(!avg.eligible(1_200, base, None)); // ahead: it waits
//! ```

/// The load weight of nice 0 (`NICE_0_LOAD` at this core's resolution).
pub const NICE_0_WEIGHT: u64 = 1024;

/// Linux's base slice before scaling by the CPU count: 0.75 ms.
pub const BASE_SLICE_NS: u64 = 750_000;

/// The tick the lag clamp allows for at least at this core's default HZ (250): 4 ms. A
/// machine uses its own tick (`TICK_NSEC`, 1 s / HZ).
pub const LAG_TICK_NS: u64 = 4_000_000;

/// The shortest slice a task may ask for: 0.1 ms.
pub const MIN_SLICE_NS: u64 = 100_000;

/// The longest slice a task may ask for: 100 ms.
pub const MAX_SLICE_NS: u64 = 100_000_000;

/// The default slice on a machine of `cpus` CPUs: 0.75 ms × (1 + log2 of the CPU count, at
/// most 8 CPUs counted), Linux's logarithmic scaling — 3 ms on 8 CPUs.
///
/// ```
/// assert_eq!(sched_core::eevdf::default_slice_ns(1), 750_000);
/// assert_eq!(sched_core::eevdf::default_slice_ns(8), 3_000_000);
/// assert_eq!(sched_core::eevdf::default_slice_ns(64), 3_000_000);
/// ```
pub fn default_slice_ns(cpus: usize) -> u64 {
    let n = cpus.clamp(1, 8) as u64;
    BASE_SLICE_NS * (1 + n.ilog2() as u64)
}

/// A slice a task asked for, checked: `Some` if within [`MIN_SLICE_NS`]..=[`MAX_SLICE_NS`].
pub fn checked_slice_ns(ns: u64) -> Option<u64> {
    (MIN_SLICE_NS..=MAX_SLICE_NS).contains(&ns).then_some(ns)
}

/// `delta` of wall time in an entity's virtual time: `delta · 1024 / weight`.
///
/// ```
/// assert_eq!(sched_core::eevdf::to_virtual(3_000_000, 1024), 3_000_000);
/// assert_eq!(sched_core::eevdf::to_virtual(3_000_000, 2048), 1_500_000);
/// ```
pub fn to_virtual(delta: u64, weight: u64) -> u64 {
    // A 64-bit division when the product fits (every slice and tick does): the 128-bit one is
    // a library call several times slower on the hot path.
    match delta.checked_mul(NICE_0_WEIGHT) {
        Some(p) => p / weight.max(1),
        None => (delta as u128 * NICE_0_WEIGHT as u128 / weight.max(1) as u128).min(u64::MAX as u128) as u64,
    }
}

/// The virtual deadline of an entity that starts a request of `slice_ns` at `vruntime`:
/// `vruntime + slice · 1024 / weight`.
pub fn deadline(vruntime: u64, slice_ns: u64, weight: u64) -> u64 {
    vruntime.wrapping_add(to_virtual(slice_ns, weight))
}

/// A task's request size: its own slice `own_ns`, or `default_ns` (the machine's) if it asked
/// for none (0).
pub const fn slice_or(own_ns: u64, default_ns: u64) -> u64 {
    if own_ns != 0 {
        own_ns
    } else {
        default_ns
    }
}

/// A virtual-time amount `v` (a lag, a request left) of an entity whose weight goes from
/// `old_weight` to `new_weight`, in the new weight's virtual time: the same service.
///
/// ```
/// assert_eq!(sched_core::eevdf::reweighted(-3_000, 1024, 2048), -1_500);
/// ```
pub fn reweighted(v: i64, old_weight: u64, new_weight: u64) -> i64 {
    (v as i128 * old_weight as i128 / new_weight.max(1) as i128) as i64
}

/// How far lag may go either way before it is clamped: the virtual time of twice the slice,
/// or of one tick if that is longer.
pub fn lag_limit(slice_ns: u64, tick_ns: u64, weight: u64) -> i64 {
    to_virtual(slice_ns.saturating_mul(2).max(tick_ns), weight).min(i64::MAX as u64) as i64
}

/// The lag of an entity at `v` of `weight` with `slice_ns` against the average `avg`, clamped
/// to [`lag_limit`] with the machine's tick `tick_ns` — [`lag`] with its limit, which takes a
/// division only when the lag is beyond it.
///
/// ```
/// use sched_core::eevdf::{bounded_lag, lag, lag_limit, LAG_TICK_NS};
/// let limit = lag_limit(1_000_000, LAG_TICK_NS, 335);
/// for v in [0u64, 1_000, 50_000_000] {
///     assert_eq!(bounded_lag(10_000_000, v, 1_000_000, LAG_TICK_NS, 335), lag(10_000_000, v, limit));
/// }
/// ```
pub fn bounded_lag(avg: u64, v: u64, slice_ns: u64, tick_ns: u64, weight: u64) -> i64 {
    let raw = avg.wrapping_sub(v) as i64;
    let span = slice_ns.saturating_mul(2).max(tick_ns) as u128 * NICE_0_WEIGHT as u128;
    // |raw| ≤ ⌊span / weight⌋ exactly when |raw|·weight ≤ span (|raw|·weight is a multiple of
    // the weight, so it cannot fall between the rounded-down limit's product and the span).
    if (raw.unsigned_abs() as u128) * (weight.max(1) as u128) <= span {
        return raw;
    }
    lag(avg, v, lag_limit(slice_ns, tick_ns, weight))
}

/// `v − base` as a signed distance (wrap-safe).
#[inline]
fn rel(v: u64, base: u64) -> i128 {
    v.wrapping_sub(base) as i64 as i128
}

/// The queued entities' Σ (vᵢ − base)·wᵢ and Σ wᵢ (Linux's `avg_vruntime` and `avg_load`):
/// O(1) per enqueue, dequeue and base move.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct AvgVruntime {
    sum: i128,
    load: u64,
}

impl AvgVruntime {
    /// Nothing queued.
    pub const fn new() -> Self {
        AvgVruntime { sum: 0, load: 0 }
    }

    /// An entity of `weight` at `v` joins.
    pub fn add(&mut self, v: u64, base: u64, weight: u64) {
        // (Wrapping and saturating: values no runqueue reaches change the figures, never
        // panic.)
        self.sum = self.sum.wrapping_add(rel(v, base).wrapping_mul(weight as i128));
        self.load = self.load.saturating_add(weight);
    }

    /// An entity of `weight` at `v` leaves (it must have joined with those values).
    pub fn sub(&mut self, v: u64, base: u64, weight: u64) {
        self.sum = self.sum.wrapping_sub(rel(v, base).wrapping_mul(weight as i128));
        self.load = self.load.saturating_sub(weight);
    }

    /// The base moves from `old` to `new` (min_vruntime advanced): the sum follows.
    pub fn rebase(&mut self, old: u64, new: u64) {
        self.sum = self.sum.wrapping_sub(rel(new, old).wrapping_mul(self.load as i128));
    }

    /// Σ wᵢ of the queued entities.
    pub fn load(&self) -> u64 {
        self.load
    }

    /// Σ (vᵢ − base)·wᵢ of the queued entities.
    pub fn weighted_sum(&self) -> i128 {
        self.sum
    }

    fn with_curr(&self, base: u64, curr: Option<(u64, u64)>) -> (i128, i128) {
        let (mut sum, mut load) = (self.sum, self.load as i128);
        if let Some((v, w)) = curr {
            sum = sum.wrapping_add(rel(v, base).wrapping_mul(w as i128));
            load += w as i128;
        }
        (sum, load)
    }

    /// The load-weighted average vruntime, counting the running entity `curr` (its vruntime
    /// and weight) too; `base` if nothing is there. Rounded down, as Linux does, so that an
    /// entity exactly at the average is eligible.
    pub fn avg(&self, base: u64, curr: Option<(u64, u64)>) -> u64 {
        let (sum, load) = self.with_curr(base, curr);
        if load == 0 {
            return base;
        }
        // 64-bit when the sums fit, as they do but for vruntimes far apart.
        let q = match (i64::try_from(sum), i64::try_from(load)) {
            (Ok(s), Ok(l)) => s.div_euclid(l) as i128,
            _ => sum.div_euclid(load),
        };
        base.wrapping_add(q as i64 as u64)
    }

    /// Whether an entity at `v` is eligible — its lag (average − v) is not negative — decided
    /// without dividing: (v − base)·W ≤ Σ (vᵢ − base)·wᵢ.
    pub fn eligible(&self, v: u64, base: u64, curr: Option<(u64, u64)>) -> bool {
        let (sum, load) = self.with_curr(base, curr);
        rel(v, base).wrapping_mul(load) <= sum
    }
}

/// The lag of an entity at `v` against the average `avg`: the virtual service it is owed
/// (positive) or has had in advance (negative), clamped to ±`limit` (a negative `limit`
/// counts as its magnitude).
///
/// ```
/// use sched_core::eevdf::lag;
/// assert_eq!(lag(1_000, 400, 500), 500);
/// assert_eq!(lag(1_000, 1_300, -500), -300);
/// ```
pub fn lag(avg: u64, v: u64, limit: i64) -> i64 {
    let limit = limit.unsigned_abs().min(i64::MAX as u64) as i64;
    (avg.wrapping_sub(v) as i64).clamp(-limit, limit)
}

/// Where an entity with lag `vlag` and `weight` is placed when it joins a runqueue whose
/// queued load (the current entity's included) is `load`, around that runqueue's average:
/// the lag is scaled by (W + w) / W first, so that the entity keeps its lag *after* joining
/// moves the average (Linux's PLACE_LAG). On an empty runqueue there is nobody to be ahead of
/// or behind, and it is placed at the average. Returns its new vruntime.
///
/// ```
/// use sched_core::eevdf::place;
/// // Beside one equal entity: the lag is doubled first, since joining halves it.
/// assert_eq!(place(10_000, 500, 1024, 1024), 9_000);
/// // Alone: at the average.
/// assert_eq!(place(10_000, 500, 0, 1024), 10_000);
/// ```
pub fn place(avg: u64, vlag: i64, load: u64, weight: u64) -> u64 {
    if load == 0 {
        return avg;
    }
    let total = load.saturating_add(weight);
    // 64-bit when the product fits (lags are bounded by slices, so it does).
    let scaled = match (i64::try_from(total).ok().and_then(|t| vlag.checked_mul(t)), i64::try_from(load)) {
        (Some(p), Ok(l)) => p / l,
        _ => {
            let s = vlag as i128 * (load as i128 + weight as i128) / load as i128;
            s.clamp(i64::MIN as i128, i64::MAX as i128) as i64
        }
    };
    avg.wrapping_sub(scaled as u64)
}

#[cfg(test)]
mod tests {
    extern crate std;

    use super::*;
    use proptest::prelude::*;
    use std::vec::Vec;

    fn brute_avg(es: &[(u64, u64)], base: u64) -> i128 {
        let load: i128 = es.iter().map(|e| e.1 as i128).sum();
        let sum: i128 = es.iter().map(|e| rel(e.0, base) * e.1 as i128).sum();
        sum.div_euclid(load.max(1))
    }

    proptest! {
        /// Kept incrementally through joins, leaves and base moves, the sums are the ones
        /// computed from scratch; the load-weighted lags of the entities there add up to zero
        /// but for rounding (less than one unit of vruntime per unit of weight); and
        /// eligibility is exactly lag ≥ 0.
        #[test]
        fn lags_sum_to_zero_and_eligibility_is_lag_not_negative(
            es in proptest::collection::vec((0u64..2_000_000, prop::sample::select(std::vec![15u64, 335, 1024, 3121, 88761])), 1..40),
            leave in proptest::collection::vec(any::<bool>(), 40),
            moves in proptest::collection::vec(0u64..100_000, 0..5),
            start in any::<u64>(),
        ) {
            let mut base = start;
            let mut avg = AvgVruntime::new();
            let es: Vec<(u64, u64)> = es.iter().map(|&(v, w)| (start.wrapping_add(v), w)).collect();
            for &(v, w) in &es {
                avg.add(v, base, w);
            }
            let mut kept = Vec::new();
            for (i, &(v, w)) in es.iter().enumerate() {
                if leave[i % leave.len()] && kept.len() + 1 < es.len() - i {
                    avg.sub(v, base, w);
                } else {
                    kept.push((v, w));
                }
            }
            for m in moves {
                let new = base.wrapping_add(m);
                avg.rebase(base, new);
                base = new;
            }
            let load: i128 = kept.iter().map(|e| e.1 as i128).sum();
            let sum: i128 = kept.iter().map(|e| rel(e.0, base) * e.1 as i128).sum();
            prop_assert_eq!(avg.load() as i128, load);
            prop_assert_eq!(avg.weighted_sum(), sum);
            let a = avg.avg(base, None);
            prop_assert_eq!(rel(a, base), brute_avg(&kept, base));
            // Σ wᵢ·(avg − vᵢ) = W·avg − Σ wᵢ·vᵢ, within the rounding of avg (0 ≤ r < 1).
            let lag_sum: i128 = kept.iter().map(|&(v, w)| (rel(a, base) - rel(v, base)) * w as i128).sum();
            prop_assert!(lag_sum <= 0 && -lag_sum < load, "Σ w·lag = {}, W = {}", lag_sum, load);
            for &(v, _) in &kept {
                let exact_lag_nonneg = rel(v, base) * load <= sum;
                prop_assert_eq!(avg.eligible(v, base, None), exact_lag_nonneg);
            }
            // The entity with the least vruntime is always eligible.
            let min_v = kept.iter().map(|e| rel(e.0, base)).min().unwrap();
            prop_assert!(avg.eligible(base.wrapping_add(min_v as i64 as u64), base, None));
        }

        /// An entity placed with lag ℓ by `place` has lag ℓ (within rounding) once it has
        /// joined, whatever the runqueue's load.
        #[test]
        fn placement_keeps_the_lag(
            others in proptest::collection::vec((0u64..1_000_000, 1u64..100_000), 1..12),
            vlag in -3_000_000i64..3_000_000,
            w in 1u64..100_000,
        ) {
            let base = 1u64 << 40;
            let mut avg = AvgVruntime::new();
            for &(v, wi) in &others {
                avg.add(base + v, base, wi);
            }
            let before = avg.avg(base, None);
            let v = place(before, vlag, avg.load(), w);
            avg.add(v, base, w);
            let after = avg.avg(base, None);
            let got = after.wrapping_sub(v) as i64;
            // Rounding: the scaled lag and the two averages each lose less than one unit.
            let slack = 3;
            prop_assert!((got - vlag).abs() <= slack, "lag {} placed, {} after", vlag, got);
        }
    }

    #[test]
    fn deadlines_and_slices() {
        assert_eq!(deadline(u64::MAX - 10, 3_000_000, 1024), 3_000_000 - 11);
        assert_eq!(checked_slice_ns(99_999), None);
        assert_eq!(checked_slice_ns(100_000_001), None);
        assert_eq!(checked_slice_ns(1_000_000), Some(1_000_000));
        assert_eq!(lag_limit(3_000_000, 4_000_000, 1024), 6_000_000);
        assert_eq!(lag_limit(1_000_000, 4_000_000, 1024), 4_000_000);
        assert_eq!(lag(100, 40, 50), 50);
        assert_eq!(lag(100, 190, 50), -50);
        let curr = Some((2_000, 1024));
        let mut a = AvgVruntime::new();
        a.add(1_000, 0, 1024);
        assert_eq!(a.avg(0, curr), 1_500);
        assert!(a.eligible(1_500, 0, curr) && !a.eligible(1_501, 0, curr));
    }
}
