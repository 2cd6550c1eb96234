//! Nice levels, load weights and the fixed-point `calc_delta` used to turn wall time into
//! virtual time.
//!
//! Weights are kept at the kernel's 64-bit "high resolution": a nice-0 task weighs
//! [`NICE_0_LOAD`] = 1024 << 10. PELT and the load balancer use the down-scaled value
//! ([`scale_load_down`], 1024 for nice 0).

use crate::error::SchedError;

/// Extra fixed-point bits kept in a [`LoadWeight`] on 64-bit platforms.
pub const SCHED_FIXEDPOINT_SHIFT: u32 = 10;
/// Weight of a nice-0 task at user resolution.
pub const NICE_0_WEIGHT: u64 = 1024;
/// Weight of a nice-0 task at high resolution (`1024 << 10`).
pub const NICE_0_LOAD: u64 = NICE_0_WEIGHT << SCHED_FIXEDPOINT_SHIFT;
/// Weight of a `SCHED_IDLE` task (user resolution).
pub const WEIGHT_IDLEPRIO: u64 = 3;
/// Inverse weight of a `SCHED_IDLE` task (≈ 2^32 / 3).
pub const WMULT_IDLEPRIO: u32 = 1_431_655_765;
const WMULT_CONST: u64 = 0xFFFF_FFFF;
const WMULT_SHIFT: u32 = 32;

/// Load weight for each nice level, −20 first. Nice 0 is 1024; each step is ≈ ×1.25.
pub const PRIO_TO_WEIGHT: [u32; 40] = [
    88761, 71755, 56483, 46273, 36291, 29154, 23254, 18705, 14949, 11916, 9548, 7620, 6100, 4904, 3906, 3121,
    2501, 1991, 1586, 1277, 1024, 820, 655, 526, 423, 335, 272, 215, 172, 137, 110, 87, 70, 56, 45, 36, 29,
    23, 18, 15,
];

/// Precomputed ≈ 2^32 / weight for each nice level, −20 first (the kernel's rounded values).
pub const PRIO_TO_WMULT: [u32; 40] = [
    48388, 59856, 76040, 92818, 118348, 147320, 184698, 229616, 287308, 360437, 449829, 563644, 704093,
    875809, 1099582, 1376151, 1717300, 2157191, 2708050, 3363326, 4194304, 5237765, 6557202, 8165337,
    10153587, 12820798, 15790321, 19976592, 24970740, 31350126, 39045157, 49367440, 61356676, 76695844,
    95443717, 119304647, 148102320, 186737708, 238609294, 286331153,
];

/// A validated nice value, −20 ..= 19.
///
/// ```
/// use sched_core::Nice;
/// assert_eq!(Nice::new(0).unwrap().weight(), 1024);
/// assert!(Nice::new(20).is_err());
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub struct Nice(i8);

impl Nice {
    /// Lowest (most favoured) nice value.
    pub const MIN: Nice = Nice(-20);
    /// Highest (least favoured) nice value.
    pub const MAX: Nice = Nice(19);
    /// Nice 0.
    pub const ZERO: Nice = Nice(0);

    /// Validates a nice value; anything outside −20..=19 is [`SchedError::InvalidNice`].
    pub const fn new(nice: i32) -> Result<Nice, SchedError> {
        if nice < -20 || nice > 19 {
            Err(SchedError::InvalidNice(nice))
        } else {
            Ok(Nice(nice as i8))
        }
    }

    /// A value read back from storage that only ever held valid ones (an out-of-range one
    /// cannot panic: the weight tables bound their index).
    pub(crate) const fn from_stored(nice: i8) -> Nice {
        Nice(nice)
    }

    /// The raw value.
    pub const fn get(self) -> i32 {
        self.0 as i32
    }

    /// Index into the 40-entry tables.
    pub const fn index(self) -> usize {
        // A `Nice` is −20..=19 by construction; the bound, which the compiler cannot see,
        // lets every weight lookup go without a bounds check (a branch on the hot paths).
        const LAST: u32 = PRIO_TO_WEIGHT.len() as u32 - 1;
        let i = (self.0 as i32 + 20) as u32;
        (if i > LAST { LAST } else { i }) as usize
    }

    /// Load weight at user resolution (1024 for nice 0).
    pub const fn weight(self) -> u64 {
        PRIO_TO_WEIGHT[self.index()] as u64
    }

    /// Inverse weight, ≈ 2^32 / weight.
    pub const fn wmult(self) -> u32 {
        PRIO_TO_WMULT[self.index()]
    }

    /// Kernel-style static priority (nice + 120), as shown in traces.
    pub const fn prio(self) -> i32 {
        120 + self.0 as i32
    }
}

/// A load weight at high resolution with its cached inverse.
///
/// `inv_weight == 0` means "not cached": [`calc_delta`] computes it on demand, as for the
/// summed weight of a runqueue.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct LoadWeight {
    /// Weight, scaled up by [`SCHED_FIXEDPOINT_SHIFT`].
    pub weight: u64,
    /// Cached ≈ 2^32 / scale_load_down(weight), or 0.
    pub inv_weight: u32,
}

impl LoadWeight {
    /// The weight of a task of the given nice level.
    pub const fn from_nice(nice: Nice) -> LoadWeight {
        LoadWeight { weight: scale_load(nice.weight()), inv_weight: nice.wmult() }
    }

    /// The weight of a `SCHED_IDLE` task.
    pub const fn idle_policy() -> LoadWeight {
        LoadWeight { weight: scale_load(WEIGHT_IDLEPRIO), inv_weight: WMULT_IDLEPRIO }
    }

    /// Adds `w` to a summed weight (invalidates the cached inverse). Wrapping: no sum of
    /// entities' weights comes near 2^64, and the enqueue path pays for any check.
    pub fn add(&mut self, w: u64) {
        self.weight = self.weight.wrapping_add(w);
        self.inv_weight = 0;
    }

    /// Subtracts `w` from a summed weight, saturating (invalidates the cached inverse).
    pub fn sub(&mut self, w: u64) {
        self.weight = self.weight.saturating_sub(w);
        self.inv_weight = 0;
    }

    /// The weight at user resolution, as PELT and the balancer use it.
    pub const fn down(&self) -> u64 {
        scale_load_down(self.weight)
    }
}

/// `w << 10`.
pub const fn scale_load(w: u64) -> u64 {
    w << SCHED_FIXEDPOINT_SHIFT
}

/// `max(2, w >> 10)` for non-zero `w` (so a tiny weight never becomes 0), else 0.
pub const fn scale_load_down(w: u64) -> u64 {
    if w == 0 {
        0
    } else {
        let d = w >> SCHED_FIXEDPOINT_SHIFT;
        if d < 2 {
            2
        } else {
            d
        }
    }
}

/// `delta × weight / lw.weight` in fixed point, as the kernel computes it: the product of
/// the down-scaled weight and the 32-bit inverse is shifted until it fits in 32 bits, then a
/// 64×32 multiply-and-shift gives the result, exact while it fits in 64 bits (a delta of
/// years at the largest weight ratio). A down-scaled `weight` past 32 bits, which no entity
/// has, gives a meaningless result, never a panic.
///
/// ```
/// use sched_core::weights::{calc_delta, LoadWeight, Nice, NICE_0_LOAD};
/// let nice_0 = LoadWeight::from_nice(Nice::ZERO);
/// assert_eq!(calc_delta(1_000_000, 2 * NICE_0_LOAD, &nice_0), 2_000_000);
/// let _ = calc_delta(u64::MAX, u64::MAX, &nice_0);
/// ```
pub fn calc_delta(delta: u64, weight: u64, lw: &LoadWeight) -> u64 {
    let inv = if lw.inv_weight != 0 {
        lw.inv_weight as u64
    } else {
        let w = scale_load_down(lw.weight);
        if w >= WMULT_CONST {
            1
        } else {
            WMULT_CONST.checked_div(w).unwrap_or(WMULT_CONST)
        }
    };
    // (Wrapping: only a weight no entity has overflows, and on the hot path a check costs.)
    let mut fact = scale_load_down(weight).wrapping_mul(inv);
    let mut shift = WMULT_SHIFT;
    while fact >> 32 != 0 {
        fact >>= 1;
        shift -= 1;
    }
    (((delta as u128) * (fact as u128)) >> shift) as u64
}

/// Wall time to virtual time for an entity of weight `lw`: identity at nice 0.
#[cfg_attr(target_pointer_width = "64", inline)]
pub fn calc_delta_fair(delta: u64, lw: &LoadWeight) -> u64 {
    if lw.weight == NICE_0_LOAD {
        delta
    } else {
        calc_delta(delta, NICE_0_LOAD, lw)
    }
}

/// `v` in 32 bits, saturating: for the figures the core keeps in 32 bits because they fit
/// (a `util_sum`, at most `LOAD_AVG_MAX << 10`, as in Linux; the per-CPU figures published for
/// the balancer), where a 32-bit MCU has native 32-bit arithmetic and atomics.
pub(crate) const fn saturate_u32(v: u64) -> u32 {
    if v > u32::MAX as u64 {
        u32::MAX
    } else {
        v as u32
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tables_are_consistent() {
        assert_eq!(Nice::ZERO.weight(), 1024);
        assert_eq!(Nice::ZERO.wmult(), 4_194_304);
        assert_eq!(Nice::MIN.wmult(), 48388);
        assert_eq!(Nice::MAX.wmult(), 286_331_153);
        for i in 0..40 {
            let exact = (1u64 << 32) as f64 / PRIO_TO_WEIGHT[i] as f64;
            assert!((exact - PRIO_TO_WMULT[i] as f64).abs() < 1.0, "nice {}", i as i32 - 20);
            if i > 0 {
                let ratio = PRIO_TO_WEIGHT[i - 1] as f64 / PRIO_TO_WEIGHT[i] as f64;
                assert!((1.2..1.3).contains(&ratio));
            }
        }
    }

    #[test]
    fn nice_validation() {
        assert_eq!(Nice::new(-21), Err(SchedError::InvalidNice(-21)));
        assert_eq!(Nice::new(20), Err(SchedError::InvalidNice(20)));
        assert_eq!(Nice::new(-20).unwrap().prio(), 100);
    }

    #[test]
    fn calc_delta_identities() {
        let nice0 = LoadWeight::from_nice(Nice::ZERO);
        assert_eq!(calc_delta_fair(1_000_000, &nice0), 1_000_000);
        // nice 5 (335): vruntime advances 1024/335 times faster than wall time.
        let n5 = LoadWeight::from_nice(Nice::new(5).unwrap());
        let v = calc_delta_fair(1_000_000, &n5);
        let exact = 1_000_000.0 * 1024.0 / 335.0;
        assert!((v as f64 - exact).abs() / exact < 1e-4);
        // Summed weight without cached inverse: 4ms × 1024 / 2048 = 2ms.
        let sum = LoadWeight { weight: 2 * NICE_0_LOAD, inv_weight: 0 };
        let s = calc_delta(4_000_000, NICE_0_LOAD, &sum);
        assert!((1_999_990..=2_000_000).contains(&s), "{s}");
    }

    #[test]
    fn scale_down_floor() {
        assert_eq!(scale_load_down(0), 0);
        assert_eq!(scale_load_down(1), 2);
        assert_eq!(scale_load_down(NICE_0_LOAD), 1024);
    }
}
