//! Moving tasks: `can_migrate_task`, `detach_tasks` and the stopper's `detach_one_task`.

use bitflags::bitflags;

use super::imbalance::MigrationType;
use super::idle::IdleType;
use crate::capacity::fits_capacity;
use crate::cpumask::CpuMask;
use crate::fair::Fair;
use crate::features::Features;
use crate::runqueue::SlotId;
use crate::entities::EntityCell;
use crate::task::{Policy, TaskId};

bitflags! {
    /// `LBF_*`: what a detach pass ran into.
    #[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
    pub struct LbfFlags: u8 {
        /// Every task looked at was pinned away from dst (cleared by the first that is not).
        const ALL_PINNED = 1 << 0;
        /// The loop hit `loop_break`, or handed over a full batch ([`DETACH_BATCH`]); the
        /// caller attaches what it has and comes back.
        const NEED_BREAK = 1 << 1;
        /// A task could go to another CPU of dst's group instead (`new_dst_cpu`).
        const DST_PINNED = 1 << 2;
        /// Some task could not go to dst because of its affinity.
        const SOME_PINNED = 1 << 3;
    }
}

/// The detach side of a balance attempt (`lb_env` fields that detach_tasks uses).
#[derive(Debug, Clone, Copy)]
pub struct DetachEnv {
    /// Destination CPU.
    pub dst_cpu: u32,
    /// Tasks at the destination (for the cache-hot buddy rule).
    pub dst_nr_running: u32,
    /// The local group's span at this level.
    pub dst_grpmask: CpuMask,
    /// Candidate CPUs.
    pub cpus: CpuMask,
    /// An alternative dst found for a dst-pinned task.
    pub new_dst_cpu: u32,
    /// Idle type of the pass.
    pub idle: IdleType,
    /// How to measure.
    pub migration_type: MigrationType,
    /// What is left to move.
    pub imbalance: i64,
    /// `LBF_*` flags.
    pub flags: LbfFlags,
    /// Tasks looked at.
    pub loop_: u32,
    /// At most this many (`min(nr_migrate, src nr_running)`).
    pub loop_max: u32,
    /// Break (and retry) every this many.
    pub loop_break: u32,
    /// The domain's consecutive failures.
    pub nr_balance_failed: u32,
    /// The domain's cache_nice_tries.
    pub cache_nice_tries: u32,
    /// The cache-hot window (ns).
    pub migration_cost_ns: u64,
    /// Active features.
    pub features: Features,
}

/// Tasks the balancer looks at before releasing the source lock (`sched_nr_migrate_break`).
pub const NR_MIGRATE_BREAK: u32 = 32;

/// `task_hot`: the task ran on src too recently to leave its cache behind cheaply, or it is
/// a next or last buddy of the runqueue it is queued on (its group's, with groups) and the
/// destination is busy.
fn task_hot<const Q: usize>(env: &DetachEnv, src: &Fair<'_, '_, Q>, slot: SlotId, e: &EntityCell) -> bool {
    if e.policy() == Policy::Idle {
        return false;
    }
    if env.features.contains(Features::CACHE_HOT_BUDDY) && env.dst_nr_running > 0 {
        #[cfg(feature = "groups")]
        let (next, last) = src.buddies_of(slot);
        #[cfg(not(feature = "groups"))]
        let (next, last) = (src.cfs.next, src.cfs.last);
        if next == Some(slot) || last == Some(slot) {
            return true;
        }
    }
    if env.migration_cost_ns == 0 {
        return false;
    }
    (src.clock_task().wrapping_sub(e.exec_start()) as i64) < env.migration_cost_ns as i64
}

/// `can_migrate_task`, checks in the kernel's order; records pinning in `env.flags`.
pub fn can_migrate_task<const Q: usize>(env: &mut DetachEnv, src: &Fair<'_, '_, Q>, slot: SlotId) -> bool {
    src.entity(slot).is_some_and(|e| can_migrate(env, src, slot, e))
}

/// [`can_migrate_task`] for the entity `e` of `slot`.
fn can_migrate<const Q: usize>(env: &mut DetachEnv, src: &Fair<'_, '_, Q>, slot: SlotId, e: &EntityCell) -> bool {
    // `throttled_lb_pair`, on the source's side: a task of a throttled group stays.
    #[cfg(feature = "groups")]
    if src.task_throttled(slot) {
        return false;
    }
    if !e.allows(env.dst_cpu as usize) {
        env.flags |= LbfFlags::SOME_PINNED;
        // Remember another CPU of dst's group the task may use, once per pass.
        if env.idle == IdleType::NewlyIdle || env.flags.contains(LbfFlags::DST_PINNED) {
            return false;
        }
        if let Some(cpu) = env.dst_grpmask.and(&env.cpus).and(&e.affinity()).first() {
            env.flags |= LbfFlags::DST_PINNED;
            env.new_dst_cpu = cpu as u32;
        }
        return false;
    }
    env.flags.remove(LbfFlags::ALL_PINNED);
    if e.on_cpu() {
        return false;
    }
    let hot = task_hot(env, src, slot, e);
    !hot || env.nr_balance_failed > env.cache_nice_tries
}

/// Most tasks one [`detach_tasks`] call hands over before its caller attaches them: it bounds
/// the caller's buffer of task ids while Linux's own batch, `NR_MIGRATE_BREAK`, still
/// decides when a pass drops its locks. A full batch ends the call with `NEED_BREAK`, and the
/// caller continues where it stopped, as after a lock break; no decision changes.
pub const DETACH_BATCH: usize = 8;

/// `detach_tasks`: scans src's tasks from the least recently run, detaches those that
/// may move and fit the imbalance, and returns their ids (at most [`DETACH_BATCH`] per
/// call; their entities stay in the pool, in transit). Tasks passed over go to the head of
/// the list.
pub fn detach_tasks<const Q: usize>(
    env: &mut DetachEnv,
    src: &mut Fair<'_, '_, Q>,
    out: &mut heapless::Vec<TaskId, DETACH_BATCH>,
) -> u32 {
    let mut detached = 0;
    if env.imbalance <= 0 {
        return 0;
    }
    while let Some((slot, _)) = src.mru_from_tail().next() {
        // Don't steal the last task of a CPU when we are idle: it would just move the
        // idleness around.
        if env.idle != IdleType::NotIdle && src.nr_running() <= 1 {
            break;
        }
        if out.is_full() {
            // Hand these over; the caller comes back for the rest.
            env.flags |= LbfFlags::NEED_BREAK;
            break;
        }
        env.loop_ += 1;
        if env.loop_ > env.loop_max {
            break;
        }
        if env.loop_ > env.loop_break {
            env.loop_break += NR_MIGRATE_BREAK;
            env.flags |= LbfFlags::NEED_BREAK;
            break;
        }
        // One look at the entity for both checks.
        let take = src.entity(slot).is_some_and(|e| {
            can_migrate(env, src, slot, e)
                && match env.migration_type {
                    MigrationType::Load => {
                        let load = src.task_h_load(slot) as i64;
                        if load / 2 > env.imbalance && env.nr_balance_failed <= env.cache_nice_tries {
                            false
                        } else {
                            env.imbalance -= load;
                            true
                        }
                    }
                    MigrationType::Util => {
                        let util = e.util_est() as i64;
                        if util > env.imbalance {
                            false
                        } else {
                            env.imbalance -= util;
                            true
                        }
                    }
                    MigrationType::Task => {
                        env.imbalance -= 1;
                        true
                    }
                    MigrationType::Misfit => {
                        if fits_capacity(e.util_est(), src.capacity()) {
                            false
                        } else {
                            env.imbalance = 0;
                            true
                        }
                    }
                }
        });
        if !take {
            src.mru_move_to_head(slot);
            continue;
        }
        let Some(id) = src.detach_task(slot) else {
            src.mru_move_to_head(slot);
            continue;
        };
        if let Err(e) = out.push(id) {
            // Cannot happen (checked before the detach); never lose a task: put it back.
            src.attach_task(e);
            break;
        }
        detached += 1;
        // A newly idle CPU takes one task and goes (a preemptible kernel keeps this short).
        if env.idle == IdleType::NewlyIdle {
            break;
        }
        if env.imbalance <= 0 {
            break;
        }
    }
    detached
}

/// `detach_one_task` for the active-balance stopper: the first movable task from the tail,
/// however far (v5.7 walks the whole list).
pub fn detach_one_task<const Q: usize>(env: &mut DetachEnv, src: &mut Fair<'_, '_, Q>) -> Option<TaskId> {
    let slot = src.mru_from_tail().map(|(n, _)| n).find(|&n| can_migrate_task(env, src, n))?;
    src.detach_task(slot)
}
