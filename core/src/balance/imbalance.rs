//! How much to move and by which measure (`calculate_imbalance`).

use super::stats::{DomainEnv, GroupType, SdStats};
use super::idle::IdleType;
use crate::pelt::SCHED_CAPACITY_SCALE;

/// What the balancer moves to fix an imbalance (`enum migration_type`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub enum MigrationType {
    /// Weighted load (both groups busy): evens out load per capacity.
    Load,
    /// Utilisation: fills the local group's spare capacity from an overloaded one.
    Util,
    /// A number of tasks: evens out task or idle-CPU counts.
    Task,
    /// The one misfit task, to a bigger CPU.
    Misfit,
}

/// A migration type with its amount (`env->migration_type`, `env->imbalance`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Imbalance {
    /// How to measure.
    pub kind: MigrationType,
    /// How much (load or util units, or tasks).
    pub amount: i64,
}

/// `calculate_imbalance` (docs/linux-v5.7.md §4), filling `avg_load` figures where the kernel does.
pub fn calculate_imbalance(env: &DomainEnv, sds: &mut SdStats) -> Imbalance {
    let Some(busiest) = sds.busiest else { return Imbalance { kind: MigrationType::Task, amount: 0 } };
    let mut local = sds.local;
    let task = |amount: i64| Imbalance { kind: MigrationType::Task, amount };
    match busiest.group_type {
        GroupType::MisfitTask => return Imbalance { kind: MigrationType::Misfit, amount: 1 },
        GroupType::AsymPacking => return task(busiest.sum_h_nr_running as i64),
        GroupType::Imbalanced => return task(1),
        _ => {}
    }
    if local.group_type == GroupType::HasSpare {
        if busiest.group_type == GroupType::Overloaded {
            // Fill the local group's spare capacity with utilisation.
            let amount = local.group_capacity.max(local.group_util) - local.group_util;
            if amount == 0 && env.idle != IdleType::NotIdle {
                // Blocked utilisation hides the space: move one task anyway.
                return task(1);
            }
            return Imbalance { kind: MigrationType::Util, amount: amount as i64 };
        }
        let mut amount = if busiest.group_weight == 1 || env.prefer_sibling {
            (busiest.sum_nr_running as i64 - local.sum_nr_running as i64).max(0) >> 1
        } else {
            // Reached only when local has at least two more idle CPUs.
            (local.idle_cpus.saturating_sub(busiest.idle_cpus) >> 1) as i64
        };
        if env.flags.numa() && busiest.sum_nr_running <= 2 {
            amount = 0;
        }
        return task(amount);
    }
    if local.group_type < GroupType::Overloaded {
        // Local is busy but not overloaded: compare average loads.
        local.avg_load = local.group_load * SCHED_CAPACITY_SCALE / local.group_capacity.max(1);
        sds.avg_load = sds.total_load * SCHED_CAPACITY_SCALE / sds.total_capacity.max(1);
        sds.local = local;
        if local.avg_load >= busiest.avg_load {
            return Imbalance { kind: MigrationType::Load, amount: 0 };
        }
    }
    if sds.avg_load == 0 {
        sds.avg_load = sds.total_load * SCHED_CAPACITY_SCALE / sds.total_capacity.max(1);
    }
    // Both differences are unsigned in the kernel: when local is above the domain
    // average the second term wraps to a huge value and the first one decides.
    let a = busiest.avg_load.wrapping_sub(sds.avg_load) as u128 * busiest.group_capacity as u128;
    let b = sds.avg_load.wrapping_sub(local.avg_load) as u128 * local.group_capacity as u128;
    let amount = (a.min(b) / SCHED_CAPACITY_SCALE as u128).min(i64::MAX as u128) as i64;
    Imbalance { kind: MigrationType::Load, amount }
}
