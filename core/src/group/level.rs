//! A group's runqueue on one CPU: the state the hierarchical fair class (`fair/hier.rs`)
//! walks (what the CPUs share of a group is `shared.rs`'s).
//!
//! On each CPU, group `g` (slot 1..=G) has a [`GroupRq`] — the fair accounting and the tree
//! of the entities queued in the group there — and an entity queued on its parent's
//! runqueue, whose cell is this CPU's `g`-th group cell in the machine's pool and whose
//! timeline slot is `Q - g`, at the top of the CPU's arena (the tasks use the slots below
//! `Q - G`). The CPU's own runqueue is the root level.

use super::bandwidth::RqRuntime;

use crate::runqueue::{CfsRq, SlotId};
use crate::timeline::TimelineHead;

pub(crate) use super::shared::Level;

/// A group level's PELT clock beside its CPU's (v5.7's `throttled_clock_task` and
/// `throttled_clock_task_time`): it stands still while the level or one above it is
/// throttled, so that neither the level's signals nor its tasks' age or accrue then, and goes
/// on from where it stopped when the hierarchy is let go. The root level's never stops.
/// (v5.7 stops it at the CPU's task clock and reads the PELT clock; both here are the PELT
/// clock, as later Linux has them.)
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct LevelClock {
    /// The CPU's PELT clock when it stopped, if it is stopped.
    stopped_at: Option<u64>,
    /// How long it has stood still in all, in the CPU's PELT time.
    stopped_for: u64,
}

impl LevelClock {
    /// A clock that runs with its CPU's and never stopped.
    pub const RUNNING: LevelClock = LevelClock { stopped_at: None, stopped_for: 0 };

    /// The level's PELT clock when its CPU's reads `cpu`.
    #[inline]
    pub(crate) fn read(&self, cpu: u64) -> u64 {
        self.stopped_at.unwrap_or(cpu).saturating_sub(self.stopped_for)
    }

    /// Stops it at the CPU's `cpu`, unless it is stopped already (a throttled level above
    /// stopped it first: `throttle_count` was not 0).
    pub(crate) fn stop(&mut self, cpu: u64) {
        if self.stopped_at.is_none() {
            self.stopped_at = Some(cpu);
        }
    }

    /// Starts it again at the CPU's `cpu`, if it was stopped.
    pub(crate) fn start(&mut self, cpu: u64) {
        if let Some(at) = self.stopped_at.take() {
            self.stopped_for = self.stopped_for.saturating_add(cpu.saturating_sub(at));
        }
    }

    /// Whether it stands still.
    pub fn stopped(&self) -> bool {
        self.stopped_at.is_some()
    }
}

/// One group's runqueue on one CPU (Linux's `cfs_rq` of a task group), apart from the CPU's
/// runqueue it lends its accounting and tree to while the fair class works at its level.
#[derive(Clone, PartialEq, Eq)]
pub struct GroupRq {
    /// Its fair accounting.
    pub(crate) cfs: CfsRq,
    /// Its tree in the CPU's timeline arena.
    pub(crate) head: TimelineHead,
    /// Its current entity (the one on the running task's path), if any.
    pub(crate) curr: Option<SlotId>,
    /// Its entity's runnable count for PELT: its `h_nr_running` as the entity's last
    /// update left it (`se->runnable_weight`), so that an update accrues the time since at
    /// the count that held then.
    pub(crate) runnable_weight: u32,
    /// What its load average last added to its group's (`tg_load_avg_contrib`).
    pub(crate) tg_contrib: u64,
    /// Runnable time attached (> 0) or detached (< 0) here and not yet carried to its
    /// entity above (`prop_runnable_sum`; `propagate` while there is something to carry).
    pub(crate) prop_runnable_sum: i64,
    pub(crate) propagate: bool,
    /// Its group has a `cpu.max` quota (`runtime_enabled`).
    pub(crate) runtime_enabled: bool,
    /// Its runtime from the group's pool and whether it is throttled.
    pub(crate) runtime: RqRuntime,
    /// Its PELT clock: not lent with its accounting; `Fair::clock_pelt` reads it here while
    /// the fair class works at this level.
    pub(crate) clock: LevelClock,
    /// Its entity left its parent's runqueue with a throttle (of this level or one below)
    /// and has not been enqueued since. Linux never delays such a dequeue, so under EEVDF
    /// the entity comes back with the lag it left with, debt included, whether a let-go or
    /// a task waking below it brings it back ([`EnqueueFlags::UNTHROTTLE`]).
    ///
    /// [`EnqueueFlags::UNTHROTTLE`]: crate::fair::EnqueueFlags::UNTHROTTLE
    pub(crate) left_with_throttle: bool,
}

impl GroupRq {
    /// An empty group runqueue under the root: what every slot holds until its group is
    /// created (`const`, zeros but for `CfsRq::new`'s, so a machine can be a `static`).
    pub const EMPTY: GroupRq = GroupRq {
        cfs: CfsRq::new(),
        head: TimelineHead::EMPTY,
        curr: None,
        runnable_weight: 0,
        tg_contrib: 0,
        prop_runnable_sum: 0,
        propagate: false,
        runtime_enabled: false,
        runtime: RqRuntime { remaining: 0, throttled: false, throttled_at: 0 },
        clock: LevelClock::RUNNING,
        left_with_throttle: false,
    };
}

impl GroupRq {
    /// Its runtime from the group's pool, and whether it is throttled.
    pub fn runtime(&self) -> RqRuntime {
        self.runtime
    }

    /// Its PELT clock's state: whether it stands still (its hierarchy throttled).
    pub fn clock(&self) -> LevelClock {
        self.clock
    }

    /// Entities queued on it (or running from it).
    pub fn nr_running(&self) -> u32 {
        self.cfs.nr_running
    }

    /// Tasks queued on it or below it, not held back by a throttled group below.
    pub fn h_nr_running(&self) -> u32 {
        self.cfs.h_nr_running
    }

    /// Its PELT load average.
    pub fn load_avg(&self) -> u64 {
        self.cfs.avg.load_avg
    }
}
