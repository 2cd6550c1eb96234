//! Group and domain statistics, and group classification (`update_sg_lb_stats`,
//! `group_classify`, `sd_lb_stats`), with the domain-level inputs of a decision.

use super::idle::IdleType;
use crate::capacity::fits_capacity;
use crate::cpumask::CpuMask;
use crate::pelt::SCHED_CAPACITY_SCALE;
use crate::topology::SdFlags;

/// What the balancer reads of one CPU (from the lock-free published figures).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct CpuSnap {
    /// `rq->nr_running`.
    pub nr_running: u32,
    /// `cfs.h_nr_running`.
    pub h_nr_running: u32,
    /// `SCHED_IDLE` tasks among them.
    pub idle_h_nr_running: u32,
    /// `cpu_load`.
    pub load: u64,
    /// `cpu_runnable`.
    pub runnable: u64,
    /// `cpu_util`.
    pub util: u64,
    /// `capacity_of`.
    pub capacity: u64,
    /// `capacity_orig_of`.
    pub capacity_orig: u64,
    /// `rq->misfit_task_load`.
    pub misfit_task_load: u64,
    /// `idle_cpu`: nothing running or queued.
    pub idle: bool,
}

impl CpuSnap {
    /// `cpu_overutilized`: its utilisation does not fit its capacity.
    pub fn overutilized(&self) -> bool {
        !fits_capacity(self.util, self.capacity)
    }
}

/// `check_cpu_capacity`: the CPU's capacity is noticeably reduced by other activity.
pub fn check_cpu_capacity(s: &CpuSnap, imbalance_pct: u32) -> bool {
    s.capacity * (imbalance_pct as u64) < s.capacity_orig * 100
}

/// The state of a group, ordered from least to most in need of having tasks pulled.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub enum GroupType {
    /// Has spare capacity: fewer tasks than CPUs or low utilisation.
    #[default]
    HasSpare,
    /// No spare capacity, but not overloaded.
    FullyBusy,
    /// A task is too big for a CPU of this group (asymmetric capacities).
    MisfitTask,
    /// An idle CPU with higher asym-packing priority could take its work.
    AsymPacking,
    /// Affinity kept an earlier balance from evening it out.
    Imbalanced,
    /// More tasks than CPUs and high utilisation or runnable time.
    Overloaded,
}

/// Statistics of one sched group (`sg_lb_stats`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct SgStats {
    /// The group's CPUs (considered in this pass).
    pub span: CpuMask,
    /// Its lowest CPU.
    pub first_cpu: u32,
    /// load × 1024 / capacity; only computed for overloaded groups (else 0, unless the
    /// imbalance computation fills it in for the local group).
    pub avg_load: u64,
    /// Σ cpu_load.
    pub group_load: u64,
    /// Σ capacity (from the shared group capacity).
    pub group_capacity: u64,
    /// Σ cpu_util.
    pub group_util: u64,
    /// Σ cpu_runnable.
    pub group_runnable: u64,
    /// Σ nr_running (all classes).
    pub sum_nr_running: u32,
    /// Σ fair h_nr_running.
    pub sum_h_nr_running: u32,
    /// CPUs with nothing to run.
    pub idle_cpus: u32,
    /// Number of CPUs.
    pub group_weight: u32,
    /// Classification.
    pub group_type: GroupType,
    /// dst is preferred over this group's preferred CPU (asym packing).
    pub group_asym_packing: bool,
    /// Largest misfit load among its CPUs.
    pub group_misfit_task_load: u64,
    /// Smallest per-CPU capacity.
    pub min_capacity: u64,
    /// Largest per-CPU capacity.
    pub max_capacity: u64,
    /// The CPU with the highest asym priority.
    pub asym_prefer_cpu: u32,
}

bitflags::bitflags! {
    /// Side findings of a statistics pass (`SG_OVERLOAD`, `SG_OVERUTILIZED`).
    #[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
    pub struct SgStatus: u8 {
        /// Some CPU has more than one task or a misfit task.
        const OVERLOAD = 1;
        /// Some CPU is over-utilised.
        const OVERUTILIZED = 2;
    }
}

/// What a group looks like to the statistics pass.
#[derive(Debug, Clone, Copy)]
pub struct GroupInfo {
    /// Span.
    pub span: CpuMask,
    /// Shared capacity.
    pub capacity: u64,
    /// Smallest per-CPU capacity.
    pub min_capacity: u64,
    /// Largest per-CPU capacity.
    pub max_capacity: u64,
    /// `sgc->imbalance`.
    pub imbalance: bool,
    /// CPU with the highest asym priority.
    pub asym_prefer_cpu: u32,
}

/// Inputs of a statistics pass that come from the balancing environment.
#[derive(Clone, Copy)]
pub struct StatsEnv<'a> {
    /// Domain flags.
    pub flags: SdFlags,
    /// Domain imbalance_pct.
    pub imbalance_pct: u32,
    /// Idle type of the pass.
    pub idle: IdleType,
    /// The destination CPU: the balancing CPU, or its redirected destination in a later round.
    pub dst_cpu: u32,
    /// Candidate CPUs (`env->cpus`).
    pub cpus: &'a CpuMask,
    /// Asym-packing priority of a CPU.
    pub asym_prefer: &'a dyn Fn(u32, u32) -> bool,
}

/// `update_sg_lb_stats`: sums over the group's candidate CPUs and classifies it.
pub fn group_stats(
    env: &StatsEnv<'_>,
    group: &GroupInfo,
    local: bool,
    snap: &dyn Fn(usize) -> CpuSnap,
    status: &mut SgStatus,
) -> SgStats {
    let mut s = SgStats {
        span: group.span,
        first_cpu: group.span.first().unwrap_or(0) as u32,
        min_capacity: group.min_capacity,
        max_capacity: group.max_capacity,
        asym_prefer_cpu: group.asym_prefer_cpu,
        ..SgStats::default()
    };
    for cpu in group.span.and(env.cpus).iter() {
        let c = snap(cpu);
        s.group_load += c.load;
        s.group_util += c.util;
        s.group_runnable += c.runnable;
        s.sum_h_nr_running += c.h_nr_running;
        s.sum_nr_running += c.nr_running;
        if c.nr_running > 1 {
            *status |= SgStatus::OVERLOAD;
        }
        if c.overutilized() {
            *status |= SgStatus::OVERUTILIZED;
        }
        if c.nr_running == 0 && c.idle {
            s.idle_cpus += 1;
        }
        if local {
            continue;
        }
        if env.flags.asym_cpucapacity() && s.group_misfit_task_load < c.misfit_task_load {
            s.group_misfit_task_load = c.misfit_task_load;
            *status |= SgStatus::OVERLOAD;
        }
    }
    if env.flags.asym_packing()
        && env.idle != IdleType::NotIdle
        && s.sum_h_nr_running > 0
        && (env.asym_prefer)(env.dst_cpu, group.asym_prefer_cpu)
    {
        s.group_asym_packing = true;
    }
    s.group_capacity = group.capacity;
    s.group_weight = group.span.weight() as u32;
    s.group_type = classify(env.imbalance_pct, group.imbalance, &s);
    if s.group_type == GroupType::Overloaded {
        s.avg_load = s.group_load * SCHED_CAPACITY_SCALE / s.group_capacity.max(1);
    }
    s
}

/// `group_has_capacity`: fewer tasks than CPUs, or neither runnable time nor utilisation
/// eat the capacity (with the imbalance_pct margin).
pub fn group_has_capacity(pct: u32, s: &SgStats) -> bool {
    let pct = pct as u64;
    if s.sum_nr_running < s.group_weight {
        return true;
    }
    if s.group_capacity * pct < s.group_runnable * 100 {
        return false;
    }
    s.group_capacity * 100 > s.group_util * pct
}

/// `group_is_overloaded`: more tasks than CPUs *and* high utilisation or runnable time.
pub fn group_is_overloaded(pct: u32, s: &SgStats) -> bool {
    let pct = pct as u64;
    if s.sum_nr_running <= s.group_weight {
        return false;
    }
    s.group_capacity * 100 < s.group_util * pct || s.group_capacity * pct < s.group_runnable * 100
}

/// `group_classify`, tests in Linux's order (docs/linux-v5.7.md §4).
pub fn classify(pct: u32, imbalance_flag: bool, s: &SgStats) -> GroupType {
    if group_is_overloaded(pct, s) {
        GroupType::Overloaded
    } else if imbalance_flag {
        GroupType::Imbalanced
    } else if s.group_asym_packing {
        GroupType::AsymPacking
    } else if s.group_misfit_task_load != 0 {
        GroupType::MisfitTask
    } else if !group_has_capacity(pct, s) {
        GroupType::FullyBusy
    } else {
        GroupType::HasSpare
    }
}

/// Statistics of a whole domain (`sd_lb_stats`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct SdStats {
    /// The local group's statistics.
    pub local: SgStats,
    /// The busiest non-local group's, if any qualified.
    pub busiest: Option<SgStats>,
    /// Σ group_load.
    pub total_load: u64,
    /// Σ group_capacity.
    pub total_capacity: u64,
    /// total_load × 1024 / total_capacity, computed where needed.
    pub avg_load: u64,
}

/// The domain-level inputs of the decision.
#[derive(Debug, Clone, Copy)]
pub struct DomainEnv {
    /// Domain flags.
    pub flags: SdFlags,
    /// imbalance_pct.
    pub imbalance_pct: u32,
    /// Balance with prefer_sibling (the child domain has PREFER_SIBLING).
    pub prefer_sibling: bool,
    /// Idle type of the pass.
    pub idle: IdleType,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn g(weight: u32, nr: u32, util: u64, runnable: u64) -> SgStats {
        SgStats {
            group_weight: weight,
            sum_nr_running: nr,
            group_util: util,
            group_runnable: runnable,
            group_capacity: 1024 * weight as u64,
            ..SgStats::default()
        }
    }

    #[test]
    fn worked_thresholds() {
        // DIE, 4 CPUs, pct 125: overloaded if util > 3276.8 or runnable > 5120 (with nr > 4).
        assert!(!group_is_overloaded(125, &g(4, 5, 3276, 5120)));
        assert!(group_is_overloaded(125, &g(4, 5, 3277, 0)));
        assert!(group_is_overloaded(125, &g(4, 5, 0, 5121)));
        assert!(!group_is_overloaded(125, &g(4, 4, 4096, 9000)), "nr == weight is never overloaded");
        // Fully busy at nr == weight once util ≥ 3276.8.
        assert!(group_has_capacity(125, &g(4, 4, 3276, 4096)));
        assert!(!group_has_capacity(125, &g(4, 4, 3277, 4096)));
        // MC single CPU, pct 117: overloaded if util > 875.2 or runnable > 1198.
        assert!(group_is_overloaded(117, &g(1, 2, 876, 0)));
        assert!(!group_is_overloaded(117, &g(1, 2, 875, 1198)));
        assert!(group_is_overloaded(117, &g(1, 2, 0, 1199)));
    }

    #[test]
    fn classification_order() {
        let over = g(4, 5, 4000, 0);
        assert_eq!(classify(125, true, &over), GroupType::Overloaded);
        let spare = g(4, 2, 100, 100);
        assert_eq!(classify(125, true, &spare), GroupType::Imbalanced);
        let asym = SgStats { group_asym_packing: true, group_misfit_task_load: 5, ..spare };
        assert_eq!(classify(125, false, &asym), GroupType::AsymPacking);
        let misfit = SgStats { group_misfit_task_load: 5, ..spare };
        assert_eq!(classify(125, false, &misfit), GroupType::MisfitTask);
        assert_eq!(classify(125, false, &g(4, 4, 4000, 4000)), GroupType::FullyBusy);
        assert_eq!(classify(125, false, &spare), GroupType::HasSpare);
        assert!(GroupType::HasSpare < GroupType::FullyBusy && GroupType::Imbalanced < GroupType::Overloaded);
    }
}
