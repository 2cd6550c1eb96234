//! Choosing the busiest group and deciding whether to balance (`update_sd_pick_busiest`,
//! `find_busiest_group`).

use super::imbalance::{calculate_imbalance, Imbalance};
use super::stats::{DomainEnv, GroupType, SdStats, SgStats};
use super::idle::IdleType;
use crate::capacity::fits_capacity;
use crate::pelt::SCHED_CAPACITY_SCALE;

/// `update_sd_pick_busiest`: whether `cand` should replace the current busiest group.
/// `asym_prefer(a, b)` says whether CPU `a` has higher asym-packing priority than `b`.
pub fn pick_busiest(
    env: &DomainEnv,
    local: &SgStats,
    busiest: Option<&SgStats>,
    cand: &SgStats,
    asym_prefer: &dyn Fn(u32, u32) -> bool,
) -> bool {
    if cand.sum_h_nr_running == 0 {
        return false;
    }
    // A misfit task only moves to bigger CPUs, and only when the local group has room.
    if cand.group_type == GroupType::MisfitTask
        && (!fits_capacity(cand.max_capacity, local.max_capacity) || local.group_type != GroupType::HasSpare)
    {
        return false;
    }
    // The initial "busiest" is has_spare with no idle CPU limit.
    let (btype, bavg, bidle, bnr, bmisfit, bprefer) = match busiest {
        Some(b) => (
            b.group_type,
            b.avg_load,
            b.idle_cpus,
            b.sum_nr_running,
            b.group_misfit_task_load,
            Some(b.asym_prefer_cpu),
        ),
        None => (GroupType::HasSpare, 0, u32::MAX, 0, 0, None),
    };
    if cand.group_type > btype {
        // Higher type wins, subject to the capacity check below.
    } else if cand.group_type < btype {
        return false;
    } else {
        match cand.group_type {
            GroupType::Overloaded => {
                if cand.avg_load <= bavg {
                    return false;
                }
            }
            GroupType::Imbalanced => return false,
            GroupType::AsymPacking => {
                if let Some(bp) = bprefer {
                    if asym_prefer(cand.asym_prefer_cpu, bp) {
                        return false;
                    }
                }
            }
            GroupType::MisfitTask => {
                if cand.group_misfit_task_load < bmisfit {
                    return false;
                }
            }
            GroupType::FullyBusy => {
                if cand.avg_load <= bavg {
                    return false;
                }
            }
            GroupType::HasSpare => {
                if cand.idle_cpus > bidle {
                    return false;
                }
                if cand.idle_cpus == bidle && cand.sum_nr_running <= bnr {
                    return false;
                }
            }
        }
    }
    // Don't pull to a group of weaker CPUs from one that is merely busy.
    if env.flags.asym_cpucapacity()
        && cand.group_type <= GroupType::FullyBusy
        && fits_capacity(local.min_capacity, cand.min_capacity)
    {
        return false;
    }
    true
}

/// The outcome of `find_busiest_group`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GroupDecision {
    /// Nothing to do.
    Balanced,
    /// Pull from the busiest group: how and how much.
    Imbalanced(Imbalance),
}

/// `find_busiest_group`'s decision tree over computed statistics (docs/linux-v5.7.md §4, steps 3–9).
/// May fill in `avg_load` figures of `sds` on the way, as the kernel does.
pub fn decide(env: &DomainEnv, sds: &mut SdStats) -> GroupDecision {
    let Some(busiest) = sds.busiest else { return GroupDecision::Balanced };
    let local = sds.local;
    let force =
        matches!(busiest.group_type, GroupType::MisfitTask | GroupType::AsymPacking | GroupType::Imbalanced);
    if !force {
        if local.group_type > busiest.group_type {
            return GroupDecision::Balanced;
        }
        if local.group_type == GroupType::Overloaded {
            if local.avg_load >= busiest.avg_load {
                return GroupDecision::Balanced;
            }
            sds.avg_load = sds.total_load * SCHED_CAPACITY_SCALE / sds.total_capacity.max(1);
            if local.avg_load >= sds.avg_load {
                return GroupDecision::Balanced;
            }
            if 100 * busiest.avg_load <= env.imbalance_pct as u64 * local.avg_load {
                return GroupDecision::Balanced;
            }
        }
        let sibling_force = env.prefer_sibling
            && local.group_type == GroupType::HasSpare
            && busiest.sum_nr_running > local.sum_nr_running + 1;
        if !sibling_force && busiest.group_type != GroupType::Overloaded {
            if env.idle == IdleType::NotIdle {
                return GroupDecision::Balanced;
            }
            if busiest.group_weight > 1 && local.idle_cpus <= busiest.idle_cpus + 1 {
                return GroupDecision::Balanced;
            }
            if busiest.sum_h_nr_running == 1 {
                return GroupDecision::Balanced;
            }
        }
    }
    let imb = calculate_imbalance(env, sds);
    if imb.amount != 0 {
        GroupDecision::Imbalanced(imb)
    } else {
        GroupDecision::Balanced
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::balance::imbalance::MigrationType;
    use crate::topology::SdFlags;

    fn group(weight: u32, nr: u32, idle: u32, ty: GroupType) -> SgStats {
        SgStats {
            group_weight: weight,
            sum_nr_running: nr,
            sum_h_nr_running: nr,
            idle_cpus: idle,
            group_capacity: 1024 * weight as u64,
            group_type: ty,
            ..SgStats::default()
        }
    }

    fn env(prefer_sibling: bool) -> DomainEnv {
        DomainEnv { flags: SdFlags::empty(), imbalance_pct: 125, prefer_sibling, idle: IdleType::Idle }
    }

    #[test]
    fn s5_has_spare_vs_has_spare_by_idle_counts() {
        // Busiest {CPU0: 2 tasks, CPU1: 1 task, CPU2/3 idle}: idle 2; local all idle.
        let busiest = group(4, 3, 2, GroupType::HasSpare);
        let mut sds = SdStats {
            local: group(4, 0, 4, GroupType::HasSpare),
            busiest: Some(busiest),
            ..SdStats::default()
        };
        assert_eq!(
            decide(&env(false), &mut sds),
            GroupDecision::Imbalanced(Imbalance { kind: MigrationType::Task, amount: 1 }),
            "4 ≤ 2 + 1 fails → force; (4 − 2) >> 1 = 1"
        );
        let mut sds = SdStats {
            local: group(4, 1, 3, GroupType::HasSpare),
            busiest: Some(busiest),
            ..SdStats::default()
        };
        assert_eq!(decide(&env(false), &mut sds), GroupDecision::Balanced, "3 ≤ 3 → balanced");
    }

    #[test]
    fn s4_control_without_prefer_sibling() {
        // Busiest fully busy (4 tasks, no idle CPU), local 2 idle of 4: 2 ≤ 0 + 1 fails →
        // force; (2 − 0) >> 1 = 1, the same outcome as with prefer_sibling.
        let busiest = group(4, 4, 0, GroupType::FullyBusy);
        let mut sds = SdStats {
            local: group(4, 2, 2, GroupType::HasSpare),
            busiest: Some(busiest),
            ..SdStats::default()
        };
        assert_eq!(
            decide(&env(false), &mut sds),
            GroupDecision::Imbalanced(Imbalance { kind: MigrationType::Task, amount: 1 })
        );
        let mut sds = SdStats {
            local: group(4, 2, 2, GroupType::HasSpare),
            busiest: Some(busiest),
            ..SdStats::default()
        };
        assert_eq!(
            decide(&env(true), &mut sds),
            GroupDecision::Imbalanced(Imbalance { kind: MigrationType::Task, amount: 1 })
        );
    }

    #[test]
    fn busy_cpu_never_balances_between_unloaded_groups() {
        let busiest = group(4, 3, 1, GroupType::HasSpare);
        let mut sds = SdStats {
            local: group(4, 0, 4, GroupType::HasSpare),
            busiest: Some(busiest),
            ..SdStats::default()
        };
        let e = DomainEnv { idle: IdleType::NotIdle, ..env(false) };
        assert_eq!(decide(&e, &mut sds), GroupDecision::Balanced);
    }

    #[test]
    fn pick_busiest_tie_breaks() {
        let local = group(4, 0, 4, GroupType::HasSpare);
        let e = env(true);
        let never = |_: u32, _: u32| false;
        let a = group(4, 2, 2, GroupType::HasSpare);
        let b = group(4, 3, 2, GroupType::HasSpare);
        assert!(pick_busiest(&e, &local, None, &a, &never));
        assert!(pick_busiest(&e, &local, Some(&a), &b, &never), "equal idle, more tasks wins");
        assert!(!pick_busiest(&e, &local, Some(&b), &a, &never));
        let over1 = SgStats { avg_load: 1500, ..group(4, 6, 0, GroupType::Overloaded) };
        let over2 = SgStats { avg_load: 1500, ..over1 };
        assert!(!pick_busiest(&e, &local, Some(&over1), &over2, &never), "ties keep the earlier group");
        assert!(pick_busiest(&e, &local, Some(&a), &over1, &never), "a higher type wins");
        let empty = group(4, 0, 4, GroupType::HasSpare);
        assert!(!pick_busiest(&e, &local, None, &empty, &never), "no CFS task, no busiest");
    }
}
