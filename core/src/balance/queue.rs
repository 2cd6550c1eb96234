//! Choosing the runqueue to pull from inside the busiest group (`find_busiest_queue`).
//!
//! **The seed's rule lives here**: under [`MigrationType::Util`], a runqueue with at most
//! one running fair task is skipped when [`Features::UTIL_PULL_SKIPS_LONE_TASK`] is on
//! (Linux c32b4308), because its lone task is running and cannot be detached; with the
//! switch off, the highest-utilisation runqueue is chosen whatever it runs (pre-patch).

use super::imbalance::MigrationType;
use super::stats::{check_cpu_capacity, CpuSnap};
use crate::cpumask::CpuMask;
use crate::features::Features;
use crate::topology::SdFlags;

/// Inputs of `find_busiest_queue`.
#[derive(Debug, Clone, Copy)]
pub struct QueueEnv {
    /// Domain flags.
    pub flags: SdFlags,
    /// Domain imbalance_pct.
    pub imbalance_pct: u32,
    /// The destination CPU: the balancing CPU, or its redirected destination in a later round.
    pub dst_cpu: u32,
    /// How to measure.
    pub migration_type: MigrationType,
    /// The imbalance amount.
    pub imbalance: i64,
    /// Active features.
    pub features: Features,
}

/// `find_busiest_queue`: iterates the group's candidate CPUs in ascending order; strict
/// comparisons keep the first CPU on ties.
pub fn find_busiest_queue(
    env: &QueueEnv,
    group_span: &CpuMask,
    cpus: &CpuMask,
    snap: &dyn Fn(usize) -> CpuSnap,
) -> Option<u32> {
    let dst_capacity = snap(env.dst_cpu as usize).capacity;
    let mut busiest = None;
    let (mut busiest_load, mut busiest_capacity) = (0u64, 1u64);
    let mut busiest_util = 0u64;
    let mut busiest_nr = 0u32;
    for cpu in group_span.and(cpus).iter() {
        let s = snap(cpu);
        let nr = s.h_nr_running;
        // On asymmetric machines, don't take the only task of a bigger CPU.
        if env.flags.asym_cpucapacity() && dst_capacity < s.capacity && nr == 1 {
            continue;
        }
        match env.migration_type {
            MigrationType::Load => {
                // A lone task heavier than the imbalance would overshoot; leave it unless
                // its CPU lost capacity to other work.
                if nr == 1 && s.load as i64 > env.imbalance && !check_cpu_capacity(&s, env.imbalance_pct) {
                    continue;
                }
                // Highest load per capacity, compared by cross-multiplication.
                if s.load as u128 * busiest_capacity as u128 > busiest_load as u128 * s.capacity as u128 {
                    busiest_load = s.load;
                    busiest_capacity = s.capacity;
                    busiest = Some(cpu as u32);
                }
            }
            MigrationType::Util => {
                // The seed patch (c32b4308): a lone running task cannot be detached, so
                // don't pick its runqueue to pull utilisation from.
                if env.features.contains(Features::UTIL_PULL_SKIPS_LONE_TASK) && nr <= 1 {
                    continue;
                }
                if busiest_util < s.util {
                    busiest_util = s.util;
                    busiest = Some(cpu as u32);
                }
            }
            MigrationType::Task => {
                if busiest_nr < nr {
                    busiest_nr = nr;
                    busiest = Some(cpu as u32);
                }
            }
            MigrationType::Misfit => {
                if s.misfit_task_load > busiest_load {
                    busiest_load = s.misfit_task_load;
                    busiest = Some(cpu as u32);
                }
            }
        }
    }
    busiest
}

#[cfg(test)]
mod tests {
    use super::*;

    fn snaps(nr_util: &[(u32, u64)]) -> impl Fn(usize) -> CpuSnap + '_ {
        move |c| {
            let (nr, util) = nr_util.get(c).copied().unwrap_or((0, 0));
            CpuSnap {
                nr_running: nr,
                h_nr_running: nr,
                util,
                load: 1024 * nr as u64,
                capacity: 1024,
                capacity_orig: 1024,
                ..CpuSnap::default()
            }
        }
    }

    fn env(kind: MigrationType, features: Features) -> QueueEnv {
        QueueEnv {
            flags: SdFlags::empty(),
            imbalance_pct: 125,
            dst_cpu: 7,
            migration_type: kind,
            imbalance: 1696,
            features,
        }
    }

    #[test]
    fn seed_rule_skips_lone_tasks_under_migrate_util() {
        // S1's cluster A: CPU0 one task util 1000, CPU1 two tasks util 900, CPU2/3 one each.
        let a = [(1, 1000), (2, 900), (1, 800), (1, 800), (1, 800), (1, 800), (1, 800), (0, 0)];
        let span = CpuMask::range(0, 4);
        let all = CpuMask::range(0, 8);
        let on = env(MigrationType::Util, Features::default());
        let off = env(MigrationType::Util, Features::default() - Features::UTIL_PULL_SKIPS_LONE_TASK);
        assert_eq!(find_busiest_queue(&on, &span, &all, &snaps(&a)), Some(1));
        assert_eq!(find_busiest_queue(&off, &span, &all, &snaps(&a)), Some(0));
        // Every CPU with at most one task: nothing to pull with the rule on.
        let lone = [(1, 1000), (1, 900), (1, 800), (0, 0)];
        assert_eq!(find_busiest_queue(&on, &span, &all, &snaps(&lone)), None);
        assert_eq!(find_busiest_queue(&off, &span, &all, &snaps(&lone)), Some(0));
    }

    #[test]
    fn rule_does_not_touch_other_migration_types() {
        let a = [(1, 1000), (1, 900), (0, 0), (0, 0)];
        let span = CpuMask::range(0, 4);
        let all = CpuMask::range(0, 8);
        let on = env(MigrationType::Task, Features::default());
        assert_eq!(find_busiest_queue(&on, &span, &all, &snaps(&a)), Some(0), "first CPU wins ties");
    }

    #[test]
    fn migrate_load_skips_heavy_lone_task() {
        let span = CpuMask::range(0, 4);
        let all = CpuMask::range(0, 8);
        let mut e = env(MigrationType::Load, Features::default());
        e.imbalance = 512;
        // CPU0's lone task (load 3000 > 512) would make it the busiest by load; it is
        // skipped, and CPU1 (two tasks, 2048) is picked.
        let base = snaps(&[(1, 0), (2, 0), (0, 0), (0, 0)]);
        let base = &base;
        let with = |capacity: u64| {
            move |c: usize| if c == 0 { CpuSnap { load: 3000, capacity, ..base(0) } } else { base(c) }
        };
        assert_eq!(find_busiest_queue(&e, &span, &all, &with(1024)), Some(1));
        // Unless CPU0 lost capacity to other work (`check_cpu_capacity`): then its lone task
        // may go.
        assert_eq!(find_busiest_queue(&e, &span, &all, &with(600)), Some(0));
    }
}
