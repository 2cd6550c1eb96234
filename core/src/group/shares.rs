//! A group's weight and what it gives its entity on each CPU (docs/groups.md): cgroup v2's
//! `cpu.weight` as shares, the share of one CPU's group runqueue (`calc_group_shares`), when a
//! CPU's contribution to the group's load average is refreshed, and the hierarchical load a
//! task carries for the balancer (`h_load`).
//!
//! Units as Linux's on 64-bit: shares and runqueue weights are high resolution (nice 0 is
//! `1 << 20`, [`crate::weights::scale_load`]); load averages are not (nice 0 is 1024).

use super::GroupError;
use crate::weights::{scale_load, scale_load_down, NICE_0_WEIGHT};

/// The smallest share a group's entity gets on a CPU, and the smallest weight of a group
/// (low resolution: the clamp in [`calc_group_shares`] compares it with high-resolution
/// shares, as Linux does).
pub const MIN_SHARES: u64 = 2;
/// The largest weight of a group (low resolution).
pub const MAX_SHARES: u64 = 1 << 18;

/// A group's `cpu.weight` (cgroup v2): 1..=10000, 100 by default, relative to its siblings.
///
/// ```
/// use sched_core::group::shares::CpuWeight;
/// let w = CpuWeight::new(150).unwrap();
/// assert_eq!(w.shares(), 1536 << 10, "1.5 times nice 0's weight");
/// assert_eq!(CpuWeight::from_shares(w.shares()), w);
/// assert!(CpuWeight::new(0).is_err() && CpuWeight::new(10_001).is_err());
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub struct CpuWeight(u16);

impl CpuWeight {
    /// The lowest weight.
    pub const MIN: CpuWeight = CpuWeight(1);
    /// A new group's weight, worth one nice-0 task.
    pub const DEFAULT: CpuWeight = CpuWeight(100);
    /// The highest weight.
    pub const MAX: CpuWeight = CpuWeight(10_000);

    /// `w`, or [`GroupError::WeightOutOfRange`] outside 1..=10000.
    pub const fn new(w: u32) -> Result<CpuWeight, GroupError> {
        if w < Self::MIN.0 as u32 || w > Self::MAX.0 as u32 {
            return Err(GroupError::WeightOutOfRange(w));
        }
        Ok(CpuWeight(w as u16))
    }

    /// The weight as written.
    pub const fn get(self) -> u32 {
        self.0 as u32
    }

    /// The group's shares (high resolution): `w × 1024 / 100`, rounded to the closest.
    pub const fn shares(self) -> u64 {
        scale_load(div_round_closest(self.0 as u64 * NICE_0_WEIGHT, 100))
    }

    /// The weight that reads back for `shares` (high resolution): `shares × 100 / 1024`,
    /// rounded to the closest, within 1..=10000.
    pub const fn from_shares(shares: u64) -> CpuWeight {
        let w = div_round_closest(scale_load_down(shares).saturating_mul(100), NICE_0_WEIGHT);
        CpuWeight(if w < 1 {
            1
        } else if w > 10_000 {
            10_000
        } else {
            w as u16
        })
    }
}

impl Default for CpuWeight {
    fn default() -> Self {
        Self::DEFAULT
    }
}

const fn div_round_closest(a: u64, b: u64) -> u64 {
    (a + b / 2) / b
}

/// What one CPU's group runqueue of a group contributes, as [`calc_group_shares`] reads it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct GroupRq {
    /// Σ weights of its queued entities (high resolution).
    pub load_weight: u64,
    /// Its PELT load average (low resolution).
    pub load_avg: u64,
    /// Its contribution last folded into the group's load average.
    pub load_avg_contrib: u64,
}

/// The weight (high resolution) of a group's entity on one CPU: the group's `shares` in
/// proportion to this CPU's part of the group's load. The CPU's part is its runqueue's
/// weight or load average, whichever is higher (a runqueue just filled counts at once; one
/// just emptied keeps its decaying load), against the group's load average with this CPU's
/// stale contribution replaced by that part. Clamped to [`MIN_SHARES`]..=`shares`.
///
/// ```
/// use sched_core::group::shares::{calc_group_shares, GroupRq};
/// let shares = 1024 << 10;
/// // The whole group's load on one CPU: its entity there weighs the whole shares.
/// let only = GroupRq { load_weight: 2048 << 10, load_avg: 2048, load_avg_contrib: 2048 };
/// assert_eq!(calc_group_shares(shares, 2048, &only), shares);
/// // A quarter of it here: a quarter of the shares.
/// let part = GroupRq { load_weight: 1024 << 10, load_avg: 1024, load_avg_contrib: 1024 };
/// assert_eq!(calc_group_shares(shares, 4096, &part), shares / 4);
/// ```
pub fn calc_group_shares(shares: u64, tg_load_avg: u64, rq: &GroupRq) -> u64 {
    let load = scale_load_down(rq.load_weight).max(rq.load_avg);
    // Signed, as Linux's: a stale total below this CPU's contribution gives a negative weight,
    // and the clamp then gives the floor.
    let tg_weight = tg_load_avg as i128 - rq.load_avg_contrib as i128 + load as i128;
    let s = shares as i128 * load as i128;
    let s = s.checked_div(tg_weight).unwrap_or(s);
    s.clamp(MIN_SHARES as i128, shares.max(MIN_SHARES) as i128) as u64
}

/// The change to fold into the group's load average from one CPU whose load average is now
/// `load_avg` and last contributed `contrib`: `Some(delta)` once it moved by more than 1/64
/// of the contribution (Linux's rate limit on the shared counter), else `None`.
///
/// ```
/// use sched_core::group::shares::tg_load_avg_delta;
/// assert_eq!(tg_load_avg_delta(1024 + 16, 1024), None, "16 is 1/64 of 1024: not past it");
/// assert_eq!(tg_load_avg_delta(1024 + 17, 1024), Some(17));
/// assert_eq!(tg_load_avg_delta(0, 1024), Some(-1024));
/// ```
pub fn tg_load_avg_delta(load_avg: u64, contrib: u64) -> Option<i64> {
    let delta = load_avg as i64 - contrib as i64;
    (delta.unsigned_abs() > contrib / 64).then_some(delta)
}

/// A group runqueue's hierarchical load: the part of its CPU's root load it carries, from its
/// parent runqueue's `parent_h_load` in the proportion of the group entity's load average to
/// the parent runqueue's (`update_cfs_rq_h_load`, one level down). The root runqueue's
/// hierarchical load is its load average.
pub fn child_h_load(parent_h_load: u64, entity_load_avg: u64, parent_load_avg: u64) -> u64 {
    (parent_h_load as u128 * entity_load_avg as u128 / (parent_load_avg as u128 + 1)) as u64
}

/// The load a task really carries on its CPU for the balancer (`task_h_load`): its load
/// average in the proportion of its runqueue's hierarchical load to the runqueue's load
/// average.
pub fn task_h_load(task_load_avg: u64, rq_h_load: u64, rq_load_avg: u64) -> u64 {
    (task_load_avg as u128 * rq_h_load as u128 / (rq_load_avg as u128 + 1)) as u64
}

/// `shares` (high resolution) within [`MIN_SHARES`]..=[`MAX_SHARES`] scaled up: the range
/// of a group's weight.
pub fn clamp_shares(shares: u64) -> u64 {
    shares.clamp(scale_load(MIN_SHARES), scale_load(MAX_SHARES))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The weights cgroup v2 documents and Linux computes.
    #[test]
    fn cpu_weights_map_to_linux_shares() {
        for (w, low) in
            [(1, 10), (50, 512), (100, 1024), (150, 1536), (1000, 10240), (5000, 51200), (10_000, 102_400)]
        {
            let cw = CpuWeight::new(w).unwrap();
            assert_eq!(cw.shares(), scale_load(low), "cpu.weight {w}");
            assert_eq!(CpuWeight::from_shares(cw.shares()), cw, "cpu.weight {w} reads back");
        }
        assert_eq!(CpuWeight::new(0), Err(GroupError::WeightOutOfRange(0)));
        assert_eq!(CpuWeight::new(10_001), Err(GroupError::WeightOutOfRange(10_001)));
    }

    /// The clamp: never below MIN_SHARES (raw 2, as Linux's), never above the group's shares;
    /// an empty group's load counts as none.
    #[test]
    fn group_shares_are_clamped() {
        let shares = scale_load(1024);
        let idle = GroupRq { load_weight: 0, load_avg: 0, load_avg_contrib: 0 };
        assert_eq!(calc_group_shares(shares, 5000, &idle), MIN_SHARES);
        let all = GroupRq { load_weight: scale_load(1024), load_avg: 10, load_avg_contrib: 10 };
        assert_eq!(calc_group_shares(shares, 10, &all), shares, "this CPU's part exceeds the stale total");
        // Nothing anywhere: the group's whole load is this CPU's.
        let fresh = GroupRq { load_weight: scale_load(1024), load_avg: 0, load_avg_contrib: 0 };
        assert_eq!(calc_group_shares(shares, 0, &fresh), shares);
    }

    /// The shares split across CPUs in proportion to each CPU's load, summing to the group's.
    #[test]
    fn shares_split_by_load() {
        let shares = scale_load(1024);
        let loads = [1024u64, 2048, 1024];
        let total: u64 = loads.iter().sum();
        let parts: u64 = loads
            .iter()
            .map(|&l| {
                calc_group_shares(
                    shares,
                    total,
                    &GroupRq { load_weight: scale_load(l), load_avg: l, load_avg_contrib: l },
                )
            })
            .sum();
        assert_eq!(parts, shares);
    }

    /// h_load: a task in a group on a CPU carries the group entity's share of the root load.
    #[test]
    fn a_task_carries_its_groups_share_of_the_root_load() {
        // Root load 3072: a nice-0 task (1024) beside a group entity of load 2048; the group's
        // runqueue holds two tasks of load 1024 each.
        let root_h = 3072;
        let grq_h = child_h_load(root_h, 2048, 3072);
        assert_eq!(grq_h, 2047, "the +1 of the denominator");
        assert_eq!(task_h_load(1024, grq_h, 2048), 1023);
    }
}
