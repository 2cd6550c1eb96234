//! The fair class's view of one runqueue and the flags of its calls: what the shared code and
//! both policies name.

use core::ops::{Deref, DerefMut};

use bitflags::bitflags;

use crate::entities::Pool;
use crate::runqueue::RunQueue;
use crate::task::Policy;

bitflags! {
    /// How a task is being enqueued.
    #[derive(Debug, Clone, Copy, PartialEq, Eq)]
    pub struct EnqueueFlags: u8 {
        /// It is waking up: place it with sleeper credit, vruntime is absolute.
        const WAKEUP = 1 << 0;
        /// It comes back after a save/restore dequeue (nice or affinity change).
        const RESTORE = 1 << 1;
        /// It is waking on a different CPU than it slept on: vruntime is normalised.
        const MIGRATED = 1 << 2;
        /// A new task's first enqueue (EEVDF gives its first request half a slice).
        const INITIAL = 1 << 3;
        /// A group's entity that a throttle took off its runqueue, coming back (with
        /// [`EnqueueFlags::WAKEUP`], let go or woken by a task below it): under EEVDF it
        /// comes back with the lag it left with, debt included, as Linux, which never delays
        /// the dequeue of a throttled entity, places it (no debt is worked off while it was
        /// away).
        const UNTHROTTLE = 1 << 4;
    }

    /// How a task is being dequeued.
    #[derive(Debug, Clone, Copy, PartialEq, Eq)]
    pub struct DequeueFlags: u8 {
        /// It goes to sleep (or exits): keep vruntime absolute, sample util_est.
        const SLEEP = 1 << 0;
        /// It will be enqueued again right away (nice or affinity change).
        const SAVE = 1 << 1;
        /// It is being moved to another CPU.
        const MOVE = 1 << 2;
    }

    /// Hints about a wakeup (Linux's `WF_*`), for `wake_with` of [`crate::port::Scheduler`],
    /// [`crate::Smp`] and [`crate::SingleCpu`]; `wake` passes none.
    #[derive(Debug, Clone, Copy, PartialEq, Eq)]
    pub struct WakeFlags: u8 {
        /// The waker is about to sleep: the placement may choose the waker's CPU, counting
        /// its load without the waker.
        const SYNC = 1 << 0;
        /// The wakee is a newly created task (what `create` passes); on a wakeup it only
        /// keeps the wakee from being made the next buddy.
        const FORK = 1 << 1;
    }
}

/// A runqueue together with the entity pool: the fair class's view of one CPU. Made by
/// [`RunQueue::fair`] by whoever holds the runqueue, so it owns the entities attached there.
pub struct Fair<'r, 'p, const Q: usize> {
    pub(crate) rq: &'r mut RunQueue<Q>,
    pub(crate) pool: Pool<'p>,
    /// The CPU's group runqueues, group slot `g` at `g - 1` (the `groups` feature; empty for
    /// a machine without groups).
    #[cfg(feature = "groups")]
    pub(crate) levels: &'r mut [crate::group::level::GroupRq],
    /// The level whose accounting the runqueue holds now (0: its own; see `Fair::at`).
    #[cfg(feature = "groups")]
    pub(crate) level: crate::group::level::Level,
}

impl<const Q: usize> Deref for Fair<'_, '_, Q> {
    type Target = RunQueue<Q>;
    fn deref(&self) -> &RunQueue<Q> {
        self.rq
    }
}

impl<const Q: usize> DerefMut for Fair<'_, '_, Q> {
    fn deref_mut(&mut self) -> &mut RunQueue<Q> {
        self.rq
    }
}

/// SCHED_IDLE tasks are never favoured as buddies.
pub(super) fn buddy_allowed(policy: Policy) -> bool {
    policy != Policy::Idle
}
