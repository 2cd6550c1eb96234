//! Per-CPU state: what a runqueue lock guards ([`CpuState`]), the figures its owner
//! publishes for lock-free readers ([`RqStats`]), the balance state of each CPU's domains,
//! group capacities and the root domain's flags.

#[cfg(all(any(feature = "internals", test), target_pointer_width = "64"))]
use portable_atomic::AtomicU16;
use portable_atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering::Relaxed};

use spin::Spin;

use crate::locks::{Locks, Mutex};

use crate::features::{Features, Tunables};
use crate::limits::MAX_LEVELS;
use crate::platform::MigrateReason;
use crate::runqueue::{RunQueue, SlotId};
use crate::task::TaskId;
use crate::weights::saturate_u32;

/// Figures of one runqueue, published by its owner for lock-free readers. They are 32-bit
/// (stored saturating; read them widened with `as u64`): loads, utilisations and capacities
/// fit (a runqueue's load is at most `Q` × 88 761), and 32-bit atomics are native on every
/// target, where 64-bit ones are a lock-based fallback on 32-bit MCUs.
#[derive(Debug)]
pub struct RqStats {
    /// `rq->nr_running` (all classes; only the fair class exists here).
    pub nr_running: AtomicU32,
    /// `cfs.h_nr_running`.
    pub h_nr_running: AtomicU32,
    /// Of which `SCHED_IDLE`.
    pub idle_h_nr_running: AtomicU32,
    /// `cpu_load`.
    pub load: AtomicU32,
    /// `cpu_runnable`.
    pub runnable: AtomicU32,
    /// `cpu_util` (with util_est, capped at capacity_orig).
    pub util: AtomicU32,
    /// `capacity_of`.
    pub capacity: AtomicU32,
    /// `capacity_orig_of` (fixed after `init`; published so readers need no topology lock).
    pub capacity_orig: AtomicU32,
    /// `rq->misfit_task_load`: load of a running task too big for this CPU, else 0.
    pub misfit_task_load: AtomicU32,
    /// No task running and none queued.
    pub idle: AtomicBool,
    /// `cfs.avg.util_avg` alone (for `cpu_util_without`).
    pub util_avg: AtomicU32,
    /// `cfs.avg.util_est.enqueued`.
    pub util_est: AtomicU32,
    /// When the CPU last went idle (ns), 0 while busy.
    pub idle_stamp: AtomicU64,
    /// Table slot of the task queued first (the timeline's leftmost, usually the next pick),
    /// or [`RqStats::NO_SLOT`] (none, a group entity first, or a slot from `NO_SLOT` up): a
    /// hint for prefetching ([`crate::smp::Smp::task_lines`]), republished with the other
    /// figures once [`crate::smp::Smp::set_prefetch_hints`] asks for it, and stale as soon as
    /// the runqueue changes. 16 bits, so the line keeps its size.
    #[cfg(all(any(feature = "internals", test), target_pointer_width = "64"))]
    pub first_queued: AtomicU16,
}

impl Default for RqStats {
    fn default() -> RqStats {
        RqStats::new()
    }
}

impl RqStats {
    pub(super) const fn new() -> RqStats {
        RqStats {
            nr_running: AtomicU32::new(0),
            h_nr_running: AtomicU32::new(0),
            idle_h_nr_running: AtomicU32::new(0),
            load: AtomicU32::new(0),
            runnable: AtomicU32::new(0),
            util: AtomicU32::new(0),
            // (Published by `init` for every CPU it counts; zeros keep a static machine in .bss.)
            capacity: AtomicU32::new(0),
            capacity_orig: AtomicU32::new(0),
            misfit_task_load: AtomicU32::new(0),
            idle: AtomicBool::new(false),
            util_avg: AtomicU32::new(0),
            util_est: AtomicU32::new(0),
            idle_stamp: AtomicU64::new(0),
            #[cfg(all(any(feature = "internals", test), target_pointer_width = "64"))]
            first_queued: AtomicU16::new(RqStats::NO_SLOT),
        }
    }

    /// [`RqStats::first_queued`] when no task is queued first or its slot is this or above.
    #[cfg(all(any(feature = "internals", test), target_pointer_width = "64"))]
    pub const NO_SLOT: u16 = u16::MAX;

    pub(super) fn publish<const Q: usize, const G: usize>(&self, st: &CpuState<Q, G>) {
        let rq = &st.rq;
        self.nr_running.store(rq.nr_running(), Relaxed);
        self.h_nr_running.store(rq.nr_running(), Relaxed);
        self.idle_h_nr_running.store(rq.idle_nr_running(), Relaxed);
        self.load.store(saturate_u32(rq.cpu_load()), Relaxed);
        self.runnable.store(saturate_u32(rq.cpu_runnable()), Relaxed);
        self.util.store(saturate_u32(rq.cpu_util()), Relaxed);
        self.capacity.store(saturate_u32(rq.capacity()), Relaxed);
        self.capacity_orig.store(saturate_u32(rq.capacity_orig()), Relaxed);
        self.misfit_task_load.store(saturate_u32(st.misfit_task_load), Relaxed);
        self.idle.store(rq.is_idle() && rq.nr_running() == 0, Relaxed);
        self.util_avg.store(saturate_u32(rq.avg().util_avg), Relaxed);
        self.util_est.store(rq.avg().util_est.enqueued, Relaxed);
        self.idle_stamp.store(st.idle_stamp, Relaxed);
    }

    /// Publishes [`RqStats::first_queued`] from the runqueue `rq`.
    #[cfg(all(any(feature = "internals", test), target_pointer_width = "64"))]
    pub(super) fn publish_first_queued<const Q: usize>(&self, rq: &RunQueue<Q>) {
        let first = rq.timeline.leftmost().and_then(|s| rq.task_at(s as SlotId));
        let slot = first.and_then(|t| u16::try_from(t.slot()).ok()).unwrap_or(RqStats::NO_SLOT);
        self.first_queued.store(slot, Relaxed);
    }
}

/// A CPU's state under its runqueue lock.
// On 64-bit targets its fields lie in declaration order, the runqueue's hot fields right
// after these, all in the lines after the lock's (see `RunQueue`).
#[derive(Clone)]
#[cfg_attr(target_pointer_width = "64", repr(C))]
pub struct CpuState<const Q: usize, const G: usize = 0> {
    /// `rq->misfit_task_load`.
    pub misfit_task_load: u64,
    /// When this CPU last went idle (ns), 0 while busy (`rq->idle_stamp`).
    pub idle_stamp: u64,
    /// Average idle period (ns), for newidle balance gating.
    pub avg_idle: u64,
    /// Upper bound on what one newidle balance is expected to cost (ns).
    pub max_idle_balance_cost: u64,
    /// Tasks of this CPU that must leave once their context is saved (one exec'd and
    /// placement chose another CPU, or its affinity no longer allows this one), each with the
    /// slot reserved for it at its destination. Only a task still on this CPU (`on_cpu`) gets
    /// one, and at most two are: the current task and the one being switched away from.
    pub push: [Option<Push>; 2],
    /// Where the active balance pushes to.
    pub push_cpu: u32,
    /// An active balance was requested and not yet carried out (`rq->active_balance`).
    pub active_balance: bool,
    /// This CPU has a domain with asymmetric capacities (misfit tracking applies); set by
    /// `init` so the hot path does not consult the topology.
    pub asym_capacity: bool,
    /// A group was created on this machine: the fair class walks the levels from now on
    /// (until then it works on one level, as a machine without groups).
    #[cfg(feature = "groups")]
    pub grouped: bool,
    /// The fair runqueue.
    pub rq: RunQueue<Q>,
    // Cold (a migration, the invariant checker): after the runqueue, so that on 64-bit
    // targets it starts within the state's first lines.
    /// Tasks that arrived here by migration.
    pub nr_migrations_in: u64,
    /// `min_vruntime` when the invariant checker last saw it (it never goes backwards).
    pub(super) checked_min_vruntime: u64,
    /// The runqueue of each task group on this CPU, group slot `g` at `g - 1`.
    #[cfg(feature = "groups")]
    pub levels: [crate::group::level::GroupRq; G],
}

/// A task leaving its CPU once its context is saved, and where it goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Push {
    /// Its slot on the CPU it leaves.
    pub slot: SlotId,
    /// The task (a slot may be reused by another one before the push happens).
    pub task: TaskId,
    /// Its destination, where a slot is reserved for it.
    pub dst: u32,
    /// Why it moves ([`MigrateReason::Placement`] for exec, [`MigrateReason::Affinity`]).
    pub reason: MigrateReason,
}

impl<const Q: usize, const G: usize> CpuState<Q, G> {
    /// The state of a CPU before [`Smp::init`] gives it a fresh one: all zeros, so a machine in
    /// a `static` needs no `.data` image. Never used as it is (no call reaches a CPU before
    /// `init` counts it), so the values need not be meaningful.
    pub(super) const UNSET: Self = CpuState {
        rq: RunQueue::UNSET,
        active_balance: false,
        push_cpu: 0,
        misfit_task_load: 0,
        idle_stamp: 0,
        avg_idle: 0,
        max_idle_balance_cost: 0,
        nr_migrations_in: 0,
        asym_capacity: false,
        // (`None` is not all zeros: the niche is in `reason`.)
        push: [Some(Push { slot: 0, task: TaskId::new(0, 0), dst: 0, reason: MigrateReason::Wakeup }); 2],
        checked_min_vruntime: 0,
        #[cfg(feature = "groups")]
        levels: [const { crate::group::level::GroupRq::EMPTY }; G],
        #[cfg(feature = "groups")]
        grouped: false,
    };

    /// A fresh CPU with an empty runqueue (what `init` gives each CPU of the topology).
    pub(super) fn reset(&mut self, cpu: u32, capacity_orig: u64, tunables: Tunables, features: Features) {
        // Field by field: assigning a whole `CpuState` passed in would copy it with memmove.
        self.rq = RunQueue::new(cpu, capacity_orig, tunables, features);
        // (The timeline's EEVDF augmentation follows the switch.)
        self.rq.configure(tunables, features);
        self.checked_min_vruntime = self.rq.min_vruntime();
        self.active_balance = false;
        self.push_cpu = 0;
        self.misfit_task_load = 0;
        self.idle_stamp = 0;
        self.avg_idle = 2 * tunables.migration_cost_ns;
        self.max_idle_balance_cost = tunables.migration_cost_ns;
        self.nr_migrations_in = 0;
        self.asym_capacity = false;
        self.push = [None; 2];
        #[cfg(feature = "groups")]
        {
            // The group entities take the top `G` slots of the arena.
            self.rq.task_slots = (Q - G) as u32;
            for lv in self.levels.iter_mut() {
                *lv = crate::group::level::GroupRq::EMPTY;
            }
            self.grouped = false;
        }
    }

    /// The fair class's view of this CPU: its runqueue, and with groups its group
    /// runqueues, with the machine's entity pool.
    #[inline]
    pub fn fair<'p>(&mut self, pool: crate::entities::Pool<'p>) -> crate::fair::Fair<'_, 'p, Q> {
        #[cfg(feature = "groups")]
        return crate::fair::Fair {
            rq: &mut self.rq,
            pool,
            levels: if self.grouped { &mut self.levels } else { &mut [] },
            level: 0,
        };
        #[cfg(not(feature = "groups"))]
        self.rq.fair(pool)
    }

    /// `remove_entity_load_avg`: the signals of a task that left this CPU while blocked
    /// (or exited) are taken out of its runqueue here (its group's, with groups) at the
    /// next update.
    pub(super) fn remove_task_load(
        &mut self,
        pool: crate::entities::Pool<'_>,
        e: &crate::entities::EntityCell,
    ) {
        #[cfg(feature = "groups")]
        return self.fair(pool).remove_task_load(e);
        #[cfg(not(feature = "groups"))]
        {
            let _ = pool;
            self.rq.remove_entity_load(e);
        }
    }

    /// Gives a task parked here (its blocked load in this CPU's sums) a new nice value.
    pub(super) fn reweight_parked(
        &mut self,
        pool: crate::entities::Pool<'_>,
        e: &mut crate::task::Entity,
        nice: crate::weights::Nice,
    ) {
        #[cfg(feature = "groups")]
        return self.fair(pool).reweight_parked_task(e, nice);
        #[cfg(not(feature = "groups"))]
        {
            let _ = pool;
            self.rq.reweight_parked(e, nice);
        }
    }

    /// `update_blocked_averages` for this CPU (every group runqueue's too).
    pub(super) fn update_blocked_averages(&mut self, pool: crate::entities::Pool<'_>) {
        #[cfg(feature = "groups")]
        return self.fair(pool).update_blocked_averages_h();
        #[cfg(not(feature = "groups"))]
        {
            let _ = pool;
            self.rq.update_blocked_averages();
        }
    }

    /// The `min_vruntime` a task of this CPU is placed against: its group's runqueue's.
    pub(super) fn min_vruntime_for(
        &mut self,
        pool: crate::entities::Pool<'_>,
        e: &crate::entities::EntityCell,
    ) -> u64 {
        #[cfg(feature = "groups")]
        return self.fair(pool).min_vruntime_of_group(e.group());
        #[cfg(not(feature = "groups"))]
        {
            let _ = (pool, e);
            self.rq.min_vruntime()
        }
    }

    /// The runqueue's invariants (with groups, every level's and the running task's path).
    pub(super) fn check(
        &mut self,
        pool: crate::entities::Pool<'_>,
    ) -> Result<(), crate::runqueue::InvariantViolation> {
        #[cfg(feature = "groups")]
        if self.grouped {
            return self.fair(pool).check_h();
        }
        self.rq.check(pool)
    }

    /// From now on the fair class walks this CPU's group levels: the running task becomes
    /// the top level's current entity too (the one thing a single level keeps apart).
    #[cfg(feature = "groups")]
    pub(super) fn use_groups(&mut self) {
        if G > 0 && !self.grouped {
            self.grouped = true;
            self.rq.top_curr = self.rq.curr;
        }
    }

    /// The pending push of the task in `slot`, if any.
    pub fn push_for(&self, slot: SlotId) -> Option<Push> {
        self.push.iter().flatten().find(|p| p.slot == slot).copied()
    }

    /// Records a push, replacing one for the same slot; returns the replaced one (whose
    /// reservation the caller gives back). `Err` gives `p` back when both entries are taken
    /// by other slots (cannot happen while only `on_cpu` tasks get pushes).
    pub(super) fn set_push(&mut self, p: Push) -> Result<Option<Push>, Push> {
        if let Some(e) = self.push.iter_mut().find(|e| e.is_some_and(|q| q.slot == p.slot)) {
            return Ok(e.replace(p));
        }
        match self.push.iter_mut().find(|e| e.is_none()) {
            Some(e) => {
                *e = Some(p);
                Ok(None)
            }
            None => Err(p),
        }
    }

    /// Whether any push is planned from this CPU.
    #[inline]
    pub(super) fn pushes_planned(&self) -> bool {
        self.push.iter().any(Option::is_some)
    }

    /// Removes and returns the pending push of the task in `slot`.
    pub(super) fn take_push(&mut self, slot: SlotId) -> Option<Push> {
        self.push.iter_mut().find(|e| e.is_some_and(|q| q.slot == slot))?.take()
    }
}

/// Per-CPU, per-domain balancing state (what Linux keeps in each CPU's `sched_domain`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct DomainBalance {
    /// Current interval (ms), between min and max (or 512 when all pinned).
    pub balance_interval_ms: u64,
    /// Consecutive failed attempts.
    pub nr_balance_failed: u32,
    /// Jiffy of the last balance at this level.
    pub last_balance: u64,
    /// Highest cost (ns) of a newidle balance at this level, decayed over time.
    pub max_newidle_lb_cost: u64,
    /// When `max_newidle_lb_cost` decays next (ns).
    pub next_decay_max_lb_cost: u64,
}

/// Balancing state of one CPU, locked only by whoever balances for it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct BalanceState {
    /// Per domain, bottom-up.
    pub domains: [DomainBalance; MAX_LEVELS],
}

/// Shared, lock-free group capacity state (Linux `sched_group_capacity`).
#[derive(Debug)]
pub struct GroupCapacity {
    /// Σ capacity_of over the group.
    pub capacity: AtomicU32,
    /// Smallest per-CPU capacity.
    pub min_capacity: AtomicU32,
    /// Largest per-CPU capacity.
    pub max_capacity: AtomicU32,
    /// The group could not be balanced because of affinity (`sgc->imbalance`).
    pub imbalance: AtomicBool,
    /// When (jiffies) a newidle pass may refresh it next.
    pub next_update: AtomicU64,
}

impl GroupCapacity {
    pub(super) const fn new() -> GroupCapacity {
        // (Set by `init` for every group of the topology.)
        GroupCapacity {
            capacity: AtomicU32::new(0),
            min_capacity: AtomicU32::new(0),
            max_capacity: AtomicU32::new(0),
            imbalance: AtomicBool::new(false),
            next_update: AtomicU64::new(0),
        }
    }
}

/// One CPU: its runqueue lock, its published figures and its balance state.
// On 64-bit targets in declaration order from a cache line's start: what every tick reads or
// writes besides the runqueue (the balance deadline, the published figures) in the line
// before the lock's.
#[cfg_attr(target_pointer_width = "64", repr(C, align(64)))]
pub struct CpuCell<const Q: usize, R: Locks = Spin, const G: usize = 0> {
    /// Jiffy at which this CPU's next periodic balance is due: written only by the holder of
    /// `balance`. Where the target has 64-bit atomics every tick reads it without that lock
    /// (see `Smp::next_balance`).
    pub(crate) next_balance: crate::relaxed::Word64,
    /// Figures for lock-free readers.
    pub stats: RqStats,
    /// The runqueue and per-CPU scheduling state.
    pub rq: Mutex<R, CpuState<Q, G>>,
    /// Balancing state.
    pub balance: Mutex<R, BalanceState>,
}

/// The root domain's flags, written by root-level balancing and by enqueues.
#[derive(Debug, Default)]
pub struct RootDomain {
    /// Some CPU has more than one task, or a misfit task (`rd->overload`).
    pub overload: AtomicBool,
    /// Some CPU is over-utilised (`rd->overutilized`).
    pub overutilized: AtomicBool,
}

impl RootDomain {
    /// Sets `flag` to `v`, reading it first: every CPU's balancing and ticks write these, and a
    /// store that changes nothing would still take the line from the other CPUs' caches.
    /// (Out of line on 32-bit targets, where code size counts more than a call.)
    #[cfg_attr(target_pointer_width = "64", inline)]
    #[cfg_attr(not(target_pointer_width = "64"), inline(never))]
    pub(crate) fn set(flag: &AtomicBool, v: bool) {
        if flag.load(Relaxed) != v {
            flag.store(v, Relaxed);
        }
    }
}

#[cfg(test)]
mod tests {
    use core::mem::{offset_of, size_of};

    use super::*;

    /// What every tick touches of a CPU lies in its first lines: the balance deadline and the
    /// published figures in the first, then the lock, this state, and the runqueue's clocks,
    /// counts, sums and tunables and the timeline's header, before any per-slot array.
    #[cfg(target_pointer_width = "64")]
    #[test]
    fn a_cpu_s_hot_fields_come_before_its_slot_arrays() {
        type Rq = RunQueue<64>;
        /// Where the lock's data starts, past the lock word (at most the state's alignment).
        const LOCKED_DATA_AT: usize = 32;
        assert_eq!(core::mem::align_of::<CpuCell<64>>(), 64);
        assert!(offset_of!(CpuCell<64>, stats) + size_of::<RqStats>() <= 64);
        assert_eq!(offset_of!(CpuCell<64>, rq), 64);
        assert!(core::mem::align_of::<CpuState<64>>() <= LOCKED_DATA_AT);
        let rq_at = offset_of!(CpuState<64>, rq);
        assert!(rq_at <= 128, "the runqueue starts at byte {rq_at} of the state");
        assert!(offset_of!(Rq, cfs) < offset_of!(Rq, timeline));
        assert!(offset_of!(Rq, tunables) < offset_of!(Rq, timeline));
        let hot_end = 64 + LOCKED_DATA_AT + rq_at + Rq::HOT_LEN;
        assert!(hot_end <= 64 * 10, "a CPU's hot fields end at byte {hot_end}");
    }
}
