//! Placement decisions (`select_task_rq_fair`, docs/linux-v5.7.md §5) as functions of plain
//! figures: `wake_wide`, the weight test of `wake_affine`, the end of `find_idlest_group`,
//! `update_pick_idlest` and SIS_PROP's probe budget. The walk over the machine that gathers
//! those figures — the fork/exec slow path, the wakeup fast path, the affinity fallback — is
//! `crate::smp`'s `placement.rs`.

use crate::balance::stats::{GroupType, SgStats};
use crate::weights::NICE_0_WEIGHT;

/// Why a CPU is being chosen.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SelectFor {
    /// A new task (fork); its parent ran on the selecting CPU.
    Fork,
    /// The running task replaces its program (exec).
    Exec,
    /// A woken task, with the CPU it last ran on.
    Wake(u32),
}

/// What the wakeup path knows of the waker (the task current on the waking CPU).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Waker {
    /// The waker's `wakee_flips`.
    pub flips: u32,
    /// The waker's load (`task_h_load(current)`), for sync wakeups.
    pub load: u64,
    /// A fair task is current on the waking CPU.
    pub present: bool,
}

/// `wake_wide`: the waker and wakee switch partners so often (relative to `llc_size`, the
/// number of CPUs sharing the cache) that pulling wakees next to the waker would pile them up.
///
#[cfg_attr(feature = "internals", doc = "```")]
#[cfg_attr(not(feature = "internals"), doc = "```ignore")]
/// use sched_core::placement::wake_wide;
/// assert!(!wake_wide(4, 1, 100)); // a wakee that rarely switches partners: stay affine
/// // Wide: the wakee flips at least llc_size times and the waker llc_size × as often as it.
/// assert!(wake_wide(4, 8, 40));
/// ```
pub fn wake_wide(llc_size: u32, wakee_flips: u32, waker_flips: u32) -> bool {
    let (master, slave) =
        if waker_flips < wakee_flips { (wakee_flips, waker_flips) } else { (waker_flips, wakee_flips) };
    !(slave < llc_size || master < slave.saturating_mul(llc_size))
}

/// One side of `wake_affine_weight`: a CPU's load and capacity.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AffineSide {
    /// `cpu_load` of the CPU.
    pub load: u64,
    /// `capacity_of` the CPU.
    pub capacity: u64,
}

/// `wake_affine_weight`: whether the waking CPU (`this`) with the task would be less loaded
/// than the task's previous CPU without it, each side scaled by the other's capacity, with
/// half the domain's imbalance margin as a bias towards `prev`. `sync_waker` is the waker's
/// load on a sync wakeup (the waker is about to sleep, so its load leaves `this`).
///
#[cfg_attr(feature = "internals", doc = "```")]
#[cfg_attr(not(feature = "internals"), doc = "```ignore")]
/// use sched_core::placement::{affine_weight_prefers_this, AffineSide};
/// let idle = AffineSide { load: 0, capacity: 1024 };
/// let busy = AffineSide { load: 2048, capacity: 1024 };
/// assert!(affine_weight_prefers_this(idle, busy, 512, 117, None));
/// assert!(!affine_weight_prefers_this(busy, idle, 512, 117, None));
/// ```
pub fn affine_weight_prefers_this(
    this: AffineSide,
    prev: AffineSide,
    task_load: u64,
    imbalance_pct: u32,
    sync_waker: Option<u64>,
) -> bool {
    let mut this_eff = this.load as i128;
    if let Some(waker_load) = sync_waker {
        if waker_load as i128 > this_eff {
            return true;
        }
        this_eff -= waker_load as i128;
    }
    let task_load = task_load as i128;
    this_eff += task_load;
    this_eff *= 100;
    this_eff *= prev.capacity as i128;
    let mut prev_eff = prev.load as i128 - task_load;
    prev_eff *= 100 + (imbalance_pct as i128 - 100) / 2;
    prev_eff *= this.capacity as i128;
    if sync_waker.is_some() {
        prev_eff += 1;
    }
    this_eff < prev_eff
}

/// The end of `find_idlest_group`: whether moving to the idlest remote group beats staying
/// in the local group. Ties favour the local group; `numa` says the domain spans nodes
/// (then a local group with an idle CPU is kept, there being no preferred node).
pub fn idlest_beats_local(local: &SgStats, idlest: &SgStats, imbalance_pct: u32, numa: bool) -> bool {
    if local.group_type < idlest.group_type {
        return false;
    }
    if local.group_type > idlest.group_type {
        return true;
    }
    match local.group_type {
        GroupType::Overloaded | GroupType::FullyBusy => {
            let imb = NICE_0_WEIGHT * (imbalance_pct as u64 - 100) / 100;
            if idlest.avg_load >= local.avg_load + imb {
                return false;
            }
            if 100 * local.avg_load <= imbalance_pct as u64 * idlest.avg_load {
                return false;
            }
        }
        GroupType::Imbalanced | GroupType::AsymPacking => return false,
        GroupType::MisfitTask => {
            if local.max_capacity >= idlest.max_capacity {
                return false;
            }
        }
        GroupType::HasSpare => {
            // Without NUMA balancing there is no preferred node: stay on this node while
            // it has an idle CPU.
            if numa && local.idle_cpus > 0 {
                return false;
            }
            if local.idle_cpus >= idlest.idle_cpus {
                return false;
            }
        }
    }
    true
}

/// `update_pick_idlest`: whether `cand` is idler than the current idlest group.
pub fn pick_idlest(idlest: Option<&SgStats>, cand: &SgStats) -> bool {
    let Some(i) = idlest else { return true };
    if cand.group_type != i.group_type {
        return cand.group_type < i.group_type;
    }
    match cand.group_type {
        GroupType::Overloaded | GroupType::FullyBusy => i.avg_load > cand.avg_load,
        GroupType::Imbalanced | GroupType::AsymPacking => false,
        GroupType::MisfitTask => i.max_capacity < cand.max_capacity,
        GroupType::HasSpare => i.idle_cpus < cand.idle_cpus,
    }
}

/// Scan cost (ns) assumed per probed CPU when the platform has no clock.
pub const SCAN_COST_PER_CPU_NS: u64 = 100;

/// SIS_PROP: how many CPUs `select_idle_cpu` may probe, from the LLC's size, this CPU's
/// average idle time (already divided by 512) and the LLC's average scan cost (ns, plus 1;
/// a cost of 0 counts as 1).
///
#[cfg_attr(feature = "internals", doc = "```")]
#[cfg_attr(not(feature = "internals"), doc = "```ignore")]
/// use sched_core::placement::sis_prop_budget;
/// assert_eq!(sis_prop_budget(4, 1, 1000), 4); // little idle time: the floor of 4 probes
/// assert_eq!(sis_prop_budget(4, 2000, 1000), 8);
/// ```
pub fn sis_prop_budget(llc_weight: u64, avg_idle: u64, avg_cost: u64) -> u64 {
    let avg_cost = avg_cost.max(1);
    let span_avg = llc_weight.saturating_mul(avg_idle);
    if span_avg > avg_cost.saturating_mul(4) {
        span_avg / avg_cost
    } else {
        4
    }
}
