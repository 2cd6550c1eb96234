//! How a change in a group runqueue's PELT signals reaches its group entity and the runqueue
//! above (Linux v5.7's `update_tg_cfs_util`, `update_tg_cfs_runnable`, `update_tg_cfs_load`;
//! docs/groups.md). A task attached to or detached from a group runqueue changes that
//! runqueue's sums at once; the group entity above would otherwise follow only as fast as
//! PELT decays, so the change is carried up one level at each update, on plain numbers here.
//!
//! Utilisation and runnable are copied: the entity takes its runqueue's average, and the
//! runqueue above changes by the difference. Load is estimated: the runnable time added or
//! removed below (`prop_runnable_sum`, unweighted) moves the entity's load sum, weighted by
//! the entity's own weight.

use crate::pelt::LOAD_AVG_MAX;
use crate::weights::scale_load_down;

/// An average and its sum, as one PELT signal of an entity or a runqueue holds them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Signal {
    /// The average.
    pub avg: u64,
    /// The sum it is computed from.
    pub sum: u64,
}

/// Utilisation or runnable (the same rule): the group entity `ge` takes its group runqueue's
/// average `below`, with a sum to match, and `parent` (the runqueue the entity is queued on)
/// changes by the difference, never below 0. Returns whether anything changed.
pub fn copy_up(below: u64, ge: &mut Signal, parent: &mut Signal) -> bool {
    if below == ge.avg {
        return false;
    }
    // (In i128: any u64 takes part; the results saturate.)
    let delta = below as i128 - ge.avg as i128;
    ge.avg = below;
    ge.sum = below.saturating_mul(LOAD_AVG_MAX);
    parent.avg = clamp_u64(parent.avg as i128 + delta);
    parent.sum = parent.avg.saturating_mul(LOAD_AVG_MAX);
    true
}

/// `v` within `0..=u64::MAX`.
fn clamp_u64(v: i128) -> u64 {
    v.clamp(0, u64::MAX as i128) as u64
}

/// What the load propagation reads of the group runqueue below.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Below {
    /// The runnable time added (> 0) or removed (< 0) below since the last propagation,
    /// unweighted.
    pub prop_runnable_sum: i64,
    /// Its queued weight (high resolution).
    pub load_weight: u64,
    /// Its load sum (weighted).
    pub load_sum: u64,
}

/// Load: moves the group entity's unweighted load sum `ge_load` by the runnable time added or
/// removed below (added: by that much, at most a full sum; removed: to the runqueue's load
/// sum per unit of weight if that is less), never below its utilisation's sum, then weights
/// it by the entity's weight `ge_weight` (low resolution) and changes `parent` by the
/// difference. `ge_util_sum` is the entity's utilisation sum. Returns whether anything was
/// propagated.
pub fn load_up(
    below: &Below,
    ge_load: &mut Signal,
    ge_weight: u64,
    ge_util_sum: u64,
    parent: &mut Signal,
) -> bool {
    let r = below.prop_runnable_sum;
    if r == 0 {
        return false;
    }
    let mut runnable = if r >= 0 {
        (r as u64).saturating_add(ge_load.sum).min(LOAD_AVG_MAX)
    } else {
        let per_weight = match scale_load_down(below.load_weight) {
            0 => 0,
            w => below.load_sum / w,
        };
        ge_load.sum.min(per_weight)
    };
    runnable = runnable.max(ge_util_sum >> 10);
    let new_sum = ge_weight.saturating_mul(runnable);
    let new_avg = new_sum / LOAD_AVG_MAX;
    let old_sum = ge_weight.saturating_mul(ge_load.sum);
    parent.avg = clamp_u64(parent.avg as i128 + new_avg as i128 - ge_load.avg as i128);
    parent.sum = clamp_u64(parent.sum as i128 + new_sum as i128 - old_sum as i128);
    ge_load.sum = runnable;
    ge_load.avg = new_avg;
    true
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A group runqueue whose utilisation jumped: its entity takes it, and the runqueue above
    /// gains the difference; a drop below zero stops at zero.
    #[test]
    fn utilisation_is_copied_up() {
        let mut ge = Signal { avg: 100, sum: 100 * LOAD_AVG_MAX };
        let mut parent = Signal { avg: 300, sum: 300 * LOAD_AVG_MAX };
        assert!(copy_up(400, &mut ge, &mut parent));
        assert_eq!((ge.avg, parent.avg, parent.sum), (400, 600, 600 * LOAD_AVG_MAX));
        assert!(!copy_up(400, &mut ge, &mut parent), "nothing to carry");
        let mut small = Signal { avg: 50, sum: 0 };
        assert!(copy_up(0, &mut ge, &mut small));
        assert_eq!(small.avg, 0);
    }

    /// A task attached below (a full sum of runnable time): the entity's load becomes its
    /// weight's, and the parent gains it; then it is detached again.
    #[test]
    fn an_attach_and_a_detach_move_the_load_up_and_back() {
        let mut ge = Signal::default();
        let mut parent = Signal::default();
        let attach = Below { prop_runnable_sum: LOAD_AVG_MAX as i64, load_weight: 1024 << 10, load_sum: 0 };
        assert!(load_up(&attach, &mut ge, 1024, 0, &mut parent));
        assert_eq!((ge.sum, ge.avg), (LOAD_AVG_MAX, 1024));
        assert_eq!((parent.avg, parent.sum), (1024, 1024 * LOAD_AVG_MAX));
        // Detached: the runqueue below is empty, so its load per unit of weight is 0.
        let detach = Below { prop_runnable_sum: -(LOAD_AVG_MAX as i64), load_weight: 0, load_sum: 0 };
        assert!(load_up(&detach, &mut ge, 1024, 0, &mut parent));
        assert_eq!((ge.sum, ge.avg, parent.avg, parent.sum), (0, 0, 0, 0));
        assert!(!load_up(&Below::default(), &mut ge, 1024, 0, &mut parent), "nothing pending");
    }

    /// Any numbers the types take are taken: the results saturate, never wrap or panic.
    #[test]
    fn extreme_inputs_saturate() {
        let mut ge = Signal { avg: 0, sum: 0 };
        let mut parent = Signal { avg: u64::MAX - 1, sum: 0 };
        assert!(copy_up(u64::MAX, &mut ge, &mut parent));
        assert_eq!((ge.sum, parent.avg, parent.sum), (u64::MAX, u64::MAX, u64::MAX));
        assert!(copy_up(0, &mut ge, &mut parent));
        assert_eq!(parent.avg, 0);
        let mut ge = Signal { avg: u64::MAX, sum: u64::MAX };
        let mut parent = Signal::default();
        let huge = Below { prop_runnable_sum: i64::MIN, load_weight: u64::MAX, load_sum: u64::MAX };
        assert!(load_up(&huge, &mut ge, u64::MAX, u64::MAX, &mut parent));
        assert_eq!((parent.avg, parent.sum), (0, 0));
    }

    /// The load sum never falls below what the utilisation says ran.
    #[test]
    fn load_is_floored_by_utilisation() {
        let mut ge = Signal::default();
        let mut parent = Signal::default();
        let detach = Below { prop_runnable_sum: -5, load_weight: 0, load_sum: 0 };
        assert!(load_up(&detach, &mut ge, 2048, 1000 << 10, &mut parent));
        assert_eq!(ge.sum, 1000);
        assert_eq!(ge.avg, 2048 * 1000 / LOAD_AVG_MAX);
    }
}
