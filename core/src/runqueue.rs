//! One CPU's runqueue: the tasks attached to it, their timeline, the MRU task list the
//! balancer scans, the CPU's clocks and its fair-class accounting.
//!
//! While a task is queued on a CPU or running there, it is *attached* to that CPU's
//! runqueue: it holds one of the runqueue's `Q` slots, which records the task's id and links
//! it into the timeline and the MRU list. The entity itself stays in the machine's
//! [`crate::entities::Entities`] cell of the task, and whoever holds the runqueue (its lock,
//! on SMP) owns the entities of the tasks attached to it — Linux's "the rq lock protects
//! the tasks on the rq". A sleeping task is attached to no runqueue; its PELT signals stay
//! in its last CPU's sums as blocked load.
//!
//! The algorithms of the fair class (enqueue, pick, preemption) are in [`crate::fair`], on
//! a [`crate::fair::Fair`] view: a runqueue together with the entity pool.

use crate::entities::{EntityCell, Pool};
use crate::features::{Features, Tunables};
use crate::pelt::{Removed, SchedAvg, LOAD_AVG_MAX, SCHED_CAPACITY_SCALE};
#[cfg(target_pointer_width = "64")]
use crate::pelt::elapsed_units;
use crate::task::{Policy, TaskId};
use crate::timeline::Timeline;
use crate::weights::LoadWeight;

/// Index of an attached task in its runqueue's slots. Valid while the task stays on that
/// CPU.
pub type SlotId = u32;

const NIL: u32 = u32::MAX;

/// A runqueue invariant that does not hold (found by `RunQueue::check`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub struct InvariantViolation {
    /// The CPU whose runqueue is inconsistent.
    pub cpu: usize,
    /// What is wrong.
    pub what: &'static str,
    /// The task concerned, when one is.
    pub task: Option<TaskId>,
}

/// A fair runqueue (Linux's `cfs_rq`): the accounting of the entities queued at one level of
/// one CPU — their load, their counts, `min_vruntime`, the buddies, the PELT signals and the
/// EEVDF average. The CPU's [`RunQueue`] holds its top level (`cfs`); its timeline keeps the
/// order of the entities queued there.
#[derive(Clone, PartialEq, Eq)]
pub(crate) struct CfsRq {
    /// Σ weights of the accounted entities.
    pub(crate) load: LoadWeight,
    /// Accounted entities at this level (queued + current if runnable).
    pub(crate) nr_running: u32,
    /// Accounted tasks at this level and below (`h_nr_running`; [`CfsRq::h_nr_running`]).
    /// Kept only with the `groups` feature: without it every entity is a task, and the two
    /// counts are one.
    #[cfg(feature = "groups")]
    pub(crate) h_nr_running: u32,
    /// Of those tasks, how many have the `SCHED_IDLE` policy.
    pub(crate) idle_h_nr_running: u32,
    pub(crate) min_vruntime: u64,
    pub(crate) next: Option<SlotId>,
    pub(crate) last: Option<SlotId>,
    pub(crate) skip: Option<SlotId>,
    pub(crate) avg: SchedAvg,
    pub(crate) removed: Removed,
    /// Bounds how far PELT sums and averages may drift apart between two recomputes of
    /// the averages (for the invariant checker).
    pub(crate) pelt_slack: PeltSlack,
    /// EEVDF: Σ (vᵢ − min_vruntime)·wᵢ and Σ wᵢ over the entities on the timeline (the
    /// current one apart), kept only while EEVDF is on (CFS's enqueue and dequeue do not pay
    /// for it) and rebuilt when it is switched on (`Fair::start_eevdf`).
    #[cfg(feature = "eevdf")]
    pub(crate) eavg: crate::eevdf::AvgVruntime,
    /// EEVDF: the current entity's deadline when it was picked (RUN_TO_PARITY: it keeps the
    /// CPU against wakeups until that request is done).
    #[cfg(feature = "eevdf")]
    pub(crate) picked_deadline: u64,
}

impl CfsRq {
    /// Accounted tasks at this level and below (`h_nr_running`).
    #[inline]
    pub(crate) fn h_nr_running(&self) -> u32 {
        #[cfg(feature = "groups")]
        return self.h_nr_running;
        #[cfg(not(feature = "groups"))]
        self.nr_running
    }

    /// Empty, its `min_vruntime` close to the wrap point so that wrap-safety is exercised
    /// from the first minute (as Linux does with `(u64)(-(1LL << 20))`).
    pub(crate) const fn new() -> CfsRq {
        CfsRq {
            load: LoadWeight { weight: 0, inv_weight: 0 },
            nr_running: 0,
            #[cfg(feature = "groups")]
            h_nr_running: 0,
            idle_h_nr_running: 0,
            min_vruntime: (-(1i64 << 20)) as u64,
            next: None,
            last: None,
            skip: None,
            avg: SchedAvg::ZERO,
            removed: Removed { nr: 0, load_avg: 0, util_avg: 0, runnable_avg: 0 },
            pelt_slack: PeltSlack { load_in: 0, nr_in: 0, load_moved: 0, runnable_moved: 0, util_moved: 0, moves: 0 },
            #[cfg(feature = "eevdf")]
            eavg: crate::eevdf::AvgVruntime::new(),
            #[cfg(feature = "eevdf")]
            picked_deadline: 0,
        }
    }
}

/// A slot's links in the most-recently-run list (`NIL`: none).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct MruLink {
    prev: u32,
    next: u32,
}

/// One CPU's runqueue with room for `Q` attached (queued or running) tasks.
// On 64-bit targets the fields lie in declaration order: what every tick and switch reads
// (clocks, current task, counts, the fair runqueue's sums, the tunables, the timeline's root)
// in the lines right after the lock, the per-slot arrays after them.
#[derive(Clone, PartialEq, Eq)]
#[cfg_attr(target_pointer_width = "64", repr(C))]
pub struct RunQueue<const Q: usize> {
    pub(crate) clock: u64,
    pub(crate) clock_task: u64,
    pub(crate) clock_pelt: u64,
    /// `capacity_of`: what is left for fair tasks (refreshed by the balancer).
    pub(crate) capacity: u64,
    /// `capacity_orig_of`: the CPU's maximum compute capacity (1024 for the biggest CPU).
    pub(crate) capacity_orig: u64,
    pub(crate) lost_idle_time: u64,
    pub(crate) nr_switches: u64,
    pub(crate) curr: Option<SlotId>,
    /// The current entity of the top level (the `groups` feature): the running task's
    /// group entity there when it runs in a group, else the running task, as `curr`.
    #[cfg(feature = "groups")]
    pub(crate) top_curr: Option<SlotId>,
    /// The previous task while its CPU is still switching away from it: not current, and
    /// not accounted if it blocked; detached at `finish_switch`.
    pub(crate) switching_out: Option<SlotId>,
    pub(crate) cpu: u32,
    /// Free slots are chained through their MRU `next` link; `bump` hands out never-used ones.
    free_head: u32,
    bump: u32,
    /// Tasks attached.
    attached: u32,
    /// Slots promised to tasks that will arrive (a new or waking task, one a balance pass
    /// moves, or a planned push after exec or an affinity change); `has_room` counts them as
    /// taken.
    reserved: u32,
    mru_head: u32,
    mru_tail: u32,
    /// Slots tasks may take: the `G` above them hold the CPU's group entities.
    #[cfg(feature = "groups")]
    pub(crate) task_slots: u32,
    pub(crate) features: Features,
    pub(crate) need_resched: bool,
    /// The CPU's fair runqueue: the entities accounted at its top level.
    pub(crate) cfs: CfsRq,
    pub(crate) tunables: Tunables,
    pub(crate) timeline: Timeline<Q>,
    /// Most-recently-run-first list of the fair tasks accounted here (`cfs_tasks`).
    /// Each slot's two links, side by side: a switch moving a task to the head touches one
    /// line per few slots, not one in each of two arrays.
    mru: [MruLink; Q],
    /// The task attached at each slot ([`TaskId::NONE`] when free).
    ids: [TaskId; Q],
    /// EEVDF: the machine's tick (ns), the least the lag clamp allows for (read at a dequeue
    /// only: after the per-slot arrays, out of the lines every tick and switch reads).
    #[cfg(feature = "eevdf")]
    pub(crate) tick_ns: u64,
}

impl<const Q: usize> RunQueue<Q> {
    /// Bytes from a runqueue's start to the end of what every tick reads (clocks, counts,
    /// sums, tunables and the timeline's header), where the per-slot arrays begin; on 64-bit
    /// targets, whose layout a test in `smp::percpu` holds.
    #[cfg(all(any(feature = "internals", test), target_pointer_width = "64"))]
    pub(crate) const HOT_LEN: usize = core::mem::offset_of!(Self, timeline) + Timeline::<Q>::HEADER;

    /// Calls `each` with the lines that hold the first `slots` slots of every per-slot
    /// array of the runqueue at `at` (the timeline's, with `augmented` its augmentation, the
    /// MRU links and the ids). Addresses only: nothing is read.
    #[cfg(all(any(feature = "internals", test), target_pointer_width = "64"))]
    pub(crate) fn slot_lines(at: *const u8, slots: usize, augmented: bool, each: &mut impl FnMut(*const u8)) {
        use core::mem::{offset_of, size_of};
        let slots = slots.min(Q);
        let timeline = at.wrapping_add(offset_of!(Self, timeline));
        Timeline::<Q>::slot_lines(timeline, slots, augmented, each);
        crate::lines::each_line(at.wrapping_add(offset_of!(Self, mru)), slots * size_of::<MruLink>(), each);
        crate::lines::each_line(at.wrapping_add(offset_of!(Self, ids)), slots * size_of::<TaskId>(), each);
    }

    /// All zeros (links that are not yet `NIL`, no tunables): what a machine
    /// holds for each CPU until `Smp::init` builds the real runqueue, so that a machine in a
    /// `static` needs no `.data` image. Not a usable runqueue.
    pub(crate) const UNSET: Self = RunQueue {
        cpu: 0,
        capacity_orig: 0,
        capacity: 0,
        ids: [TaskId::new(0, 0); Q],
        free_head: 0,
        timeline: Timeline::UNSET,
        mru: [MruLink { prev: 0, next: 0 }; Q],
        mru_head: 0,
        mru_tail: 0,
        cfs: CfsRq { min_vruntime: 0, ..CfsRq::new() },
        tunables: Tunables::UNSET,
        features: Features::empty(),
        #[cfg(feature = "groups")]
        task_slots: 0,
        ..Self::new(0, 0, Tunables::DEFAULT, Features::empty())
    };

    /// An empty runqueue for `cpu` with the given original capacity (1024 for a big CPU).
    pub const fn new(cpu: u32, capacity_orig: u64, tunables: Tunables, features: Features) -> Self {
        RunQueue {
            cpu,
            capacity_orig,
            capacity: capacity_orig,
            clock: 0,
            clock_task: 0,
            clock_pelt: 0,
            lost_idle_time: 0,
            ids: [TaskId::NONE; Q],
            free_head: NIL,
            bump: 0,
            attached: 0,
            reserved: 0,
            timeline: Timeline::new(),
            mru: [MruLink { prev: NIL, next: NIL }; Q],
            mru_head: NIL,
            mru_tail: NIL,
            curr: None,
            #[cfg(feature = "groups")]
            top_curr: None,
            #[cfg(feature = "groups")]
            task_slots: Q as u32,
            switching_out: None,
            need_resched: false,
            nr_switches: 0,
            cfs: CfsRq::new(),
            tunables,
            #[cfg(feature = "eevdf")]
            tick_ns: crate::eevdf::LAG_TICK_NS,
            features,
        }
    }

    // ---- read-only views -------------------------------------------------------------

    /// The CPU this runqueue belongs to.
    pub fn cpu(&self) -> u32 {
        self.cpu
    }
    /// Fair tasks accounted here (queued plus the current one if runnable): `h_nr_running`.
    // The CPU's task count, not its top level's entity count (`cfs.nr_running`): they differ
    // once a level holds groups.
    #[allow(clippy::misnamed_getters)]
    pub fn nr_running(&self) -> u32 {
        self.cfs.h_nr_running()
    }
    /// Of those, how many have the `SCHED_IDLE` policy.
    pub fn idle_nr_running(&self) -> u32 {
        self.cfs.idle_h_nr_running
    }
    /// Tasks waiting on the timeline (not counting the current one).
    pub fn nr_queued(&self) -> usize {
        self.timeline.len()
    }
    /// Every attached task, with its slot.
    pub fn attached(&self) -> impl Iterator<Item = (SlotId, TaskId)> + '_ {
        self.ids.iter().enumerate().filter(|(_, &id)| id != TaskId::NONE).map(|(i, &id)| (i as SlotId, id))
    }
    /// The task attached at `slot`, if any.
    pub fn task_at(&self, slot: SlotId) -> Option<TaskId> {
        self.ids.get(slot as usize).copied().filter(|&id| id != TaskId::NONE)
    }
    /// Tasks attached (queued, running, or a current task still being switched out).
    pub fn nr_attached(&self) -> usize {
        self.attached as usize
    }
    /// The runqueue's `min_vruntime`.
    pub fn min_vruntime(&self) -> u64 {
        self.cfs.min_vruntime
    }
    /// Σ weights (high resolution) of the accounted tasks.
    pub fn load_weight(&self) -> u64 {
        self.cfs.load.weight
    }
    /// The runqueue's PELT signals.
    pub fn avg(&self) -> &SchedAvg {
        &self.cfs.avg
    }
    /// `cpu_load`: the runqueue's PELT load average.
    pub fn cpu_load(&self) -> u64 {
        self.cfs.avg.load_avg
    }
    /// `cpu_runnable`: the runqueue's PELT runnable average.
    pub fn cpu_runnable(&self) -> u64 {
        self.cfs.avg.runnable_avg
    }
    /// `cpu_util`: max(util_avg, util_est) (the estimate only with `UTIL_EST`), capped at
    /// the CPU's original capacity.
    pub fn cpu_util(&self) -> u64 {
        let mut util = self.cfs.avg.util_avg;
        if self.features.contains(Features::UTIL_EST) {
            util = util.max(self.cfs.avg.util_est.enqueued as u64);
        }
        util.min(self.capacity_orig)
    }
    /// `capacity_orig_of`.
    pub fn capacity_orig(&self) -> u64 {
        self.capacity_orig
    }
    /// `capacity_of`.
    pub fn capacity(&self) -> u64 {
        self.capacity
    }
    /// Sets `capacity_of` (the platform or balancer after subtracting other classes' use).
    pub fn set_capacity(&mut self, capacity: u64) {
        self.capacity = capacity.clamp(1, self.capacity_orig.max(1));
    }
    /// The runqueue clock (ns) as last updated.
    pub fn clock(&self) -> u64 {
        self.clock
    }
    /// The task clock used for runtime accounting.
    pub fn clock_task(&self) -> u64 {
        self.clock_task
    }
    /// `rq_clock_pelt`: the PELT clock, scaled by capacity while busy.
    pub fn clock_pelt(&self) -> u64 {
        self.clock_pelt - self.lost_idle_time
    }
    /// Whether the current task should be switched out at the next opportunity.
    pub fn need_resched(&self) -> bool {
        self.need_resched
    }
    /// Number of context switches made on this CPU.
    pub fn nr_switches(&self) -> u64 {
        self.nr_switches
    }
    /// The current task, if a fair task is current.
    pub fn curr_id(&self) -> Option<TaskId> {
        self.curr.and_then(|n| self.task_at(n))
    }
    /// The slot of the current task.
    pub fn curr_slot(&self) -> Option<SlotId> {
        self.curr
    }
    /// The slot of the task this CPU is still switching away from, if any.
    pub fn switching_out_slot(&self) -> Option<SlotId> {
        self.switching_out
    }
    /// Whether no fair task is current (the CPU runs its idle loop).
    pub fn is_idle(&self) -> bool {
        self.curr.is_none()
    }
    /// The active feature switches.
    pub fn features(&self) -> Features {
        self.features
    }
    /// The active tunables.
    pub fn tunables(&self) -> &Tunables {
        &self.tunables
    }
    /// Replaces features and tunables (a platform's run-time switch).
    pub fn configure(&mut self, tunables: Tunables, features: Features) {
        self.tunables = tunables;
        self.features = features;
        #[cfg(feature = "eevdf")]
        self.timeline.set_augmented(features.contains(Features::EEVDF));
    }

    /// The EEVDF slice of an entity that asked for `own` ns (0: none): its own, or the
    /// machine's default (`min_granularity`, which is Linux 6.6's base slice, 0.75 ms × (1 +
    /// log2 of the CPU count)).
    #[cfg(feature = "eevdf")]
    #[inline]
    pub fn slice_ns(&self, own: u64) -> u64 {
        crate::eevdf::slice_or(own, self.tunables.min_granularity_ns)
    }

    /// How far an entity's kept lag may go either way here: the virtual time of twice its
    /// slice or a tick ([`crate::eevdf::lag_limit`]).
    #[cfg(feature = "eevdf")]
    pub fn lag_bound(&self, e: &crate::task::Entity) -> i64 {
        e.lag_bound(self.tunables.min_granularity_ns, self.tick_ns)
    }

    /// Whether EEVDF picks (the `EEVDF` switch, with the `eevdf` feature built in).
    #[inline]
    pub fn eevdf(&self) -> bool {
        #[cfg(feature = "eevdf")]
        return self.features.contains(Features::EEVDF);
        #[cfg(not(feature = "eevdf"))]
        false
    }
    /// Attached task ids, most recently run first (the order the balancer's `cfs_tasks`
    /// has; the balancer scans it from the tail).
    pub fn mru(&self) -> MruIter<'_, Q> {
        MruIter { rq: self, cur: self.mru_head, back: false }
    }
    /// The same list from the tail (least recently run first).
    pub fn mru_from_tail(&self) -> MruIter<'_, Q> {
        MruIter { rq: self, cur: self.mru_tail, back: true }
    }
    /// Queued task ids in timeline order (leftmost first).
    pub fn timeline_ids(&self) -> impl Iterator<Item = TaskId> + '_ {
        self.timeline.iter().filter_map(move |n| self.task_at(n as SlotId))
    }

    // ---- slots ----------------------------------------------------------------------

    /// Attaches task `id` in a free slot (not yet queued). `None` when there is no room
    /// (callers check [`RunQueue::has_room`] first).
    pub(crate) fn insert(&mut self, id: TaskId) -> Option<SlotId> {
        if !self.has_room() {
            return None;
        }
        self.place(id)
    }

    /// Attaches task `id` in a slot reserved for it with [`RunQueue::reserve`].
    pub(crate) fn insert_reserved(&mut self, id: TaskId) -> Option<SlotId> {
        if self.reserved == 0 {
            return None;
        }
        self.reserved -= 1;
        self.place(id)
    }

    /// Promises one slot to a task that will arrive later; `false` when there is no room.
    pub(crate) fn reserve(&mut self) -> bool {
        let ok = self.has_room();
        self.reserved += ok as u32;
        ok
    }

    /// Gives back a slot promised with [`RunQueue::reserve`].
    pub(crate) fn unreserve(&mut self) {
        self.reserved = self.reserved.saturating_sub(1);
    }

    /// Slots promised and not yet taken.
    pub fn reserved(&self) -> u32 {
        self.reserved
    }

    fn place(&mut self, id: TaskId) -> Option<SlotId> {
        let slot = if self.free_head != NIL {
            let n = self.free_head;
            self.free_head = self.mru[n as usize].next;
            n
        } else if (self.bump as usize) < self.task_slots() {
            self.bump += 1;
            self.bump - 1
        } else {
            return None;
        };
        self.mru[slot as usize].next = NIL;
        self.mru[slot as usize].prev = NIL;
        self.ids[slot as usize] = id;
        self.attached += 1;
        Some(slot)
    }

    /// Detaches the task at `slot` from the runqueue's slots and returns its id. It must be
    /// neither queued nor current.
    pub(crate) fn take(&mut self, slot: SlotId) -> Option<TaskId> {
        if self.curr == Some(slot) || self.timeline.contains(slot as usize) {
            return None;
        }
        let id = self.task_at(slot)?;
        self.ids[slot as usize] = TaskId::NONE;
        self.attached -= 1;
        self.mru[slot as usize].next = self.free_head;
        self.free_head = slot;
        Some(id)
    }

    /// Whether there is room for one more task (slots promised to arriving tasks are
    /// taken).
    pub fn has_room(&self) -> bool {
        ((self.attached + self.reserved) as usize) < self.task_slots()
    }

    /// How many slots tasks may take (all `Q` without groups).
    #[inline(always)]
    pub(crate) fn task_slots(&self) -> usize {
        #[cfg(feature = "groups")]
        return self.task_slots as usize;
        #[cfg(not(feature = "groups"))]
        Q
    }

    // ---- MRU list -------------------------------------------------------------------

    pub(crate) fn mru_push_head(&mut self, slot: SlotId) {
        let n = slot as usize;
        self.mru[n].prev = NIL;
        self.mru[n].next = self.mru_head;
        if self.mru_head != NIL {
            self.mru[self.mru_head as usize].prev = slot;
        } else {
            self.mru_tail = slot;
        }
        self.mru_head = slot;
    }

    pub(crate) fn mru_unlink(&mut self, slot: SlotId) {
        let n = slot as usize;
        let (p, nx) = (self.mru[n].prev, self.mru[n].next);
        if p != NIL {
            self.mru[p as usize].next = nx;
        } else if self.mru_head == slot {
            self.mru_head = nx;
        }
        if nx != NIL {
            self.mru[nx as usize].prev = p;
        } else if self.mru_tail == slot {
            self.mru_tail = p;
        }
        self.mru[n].prev = NIL;
        self.mru[n].next = NIL;
    }

    pub(crate) fn mru_move_to_head(&mut self, slot: SlotId) {
        if self.mru_head != slot {
            self.mru_unlink(slot);
            self.mru_push_head(slot);
        }
    }

    // ---- clocks and PELT glue ---------------------------------------------------------

    /// Advances the runqueue clocks to `now` (ns). Time never goes backwards: an older
    /// `now` is ignored, and so is one 2^63 ns or more ahead of the last (a broken reading,
    /// such as `u64::MAX`; taken, it would leave every later reading in the past and the CPU's
    /// accounting frozen). The first reading counts from 0, so it may be anything below
    /// 2^63 ns (292 years). While a task runs, the PELT clock advances scaled by the CPU's
    /// capacity (frequency invariance is 1024 here); while idle it is synced to the task
    /// clock. Returns false for such a broken reading alone.
    pub fn update_clock(&mut self, now: u64) -> bool {
        if now <= self.clock {
            return true;
        }
        if self.is_broken_reading(now) {
            return false;
        }
        let delta = now - self.clock;
        self.clock = now;
        self.clock_task += delta;
        if self.curr.is_none() {
            self.clock_pelt = self.clock_task;
        } else {
            self.clock_pelt += ((delta as u128 * self.capacity_orig as u128) >> 10) as u64;
        }
        true
    }

    /// `now`, or the clock's last reading if `now` is behind it or broken (see
    /// [`RunQueue::update_clock`]): what a call that also sets timers or marks takes as now,
    /// so that they never move back nor jump to the end of time.
    pub fn sane_now(&self, now: u64) -> u64 {
        if now > self.clock && !self.is_broken_reading(now) {
            now
        } else {
            self.clock
        }
    }

    /// Whether `now` is 2^63 ns or more ahead of the clock's last reading, or of 0 before
    /// the first (one that is behind is merely old).
    #[inline(always)]
    fn is_broken_reading(&self, now: u64) -> bool {
        now > self.clock && now - self.clock > i64::MAX as u64
    }

    /// Called when the CPU goes idle: time the PELT clock lost against the task clock while
    /// the CPU was saturated is idle time PELT never saw; remember it so the signals of an
    /// always-busy small CPU are not inflated (`update_idle_rq_clock_pelt`).
    pub(crate) fn note_idle_entry(&mut self) {
        let limit = ((LOAD_AVG_MAX - 1024) << 10) - LOAD_AVG_MAX;
        if self.cfs.avg.util_sum as u64 >= limit {
            self.lost_idle_time += self.clock_task.saturating_sub(self.clock_pelt);
        }
        self.clock_pelt = self.clock_task;
    }

    /// Updates the runqueue's own PELT signals (after applying removed load).
    #[cfg_attr(target_pointer_width = "64", inline)]
    pub(crate) fn update_cfs_avg(&mut self) -> bool {
        self.update_cfs_avg_at(self.clock_pelt())
    }

    /// [`RunQueue::update_cfs_avg`] at the PELT time `now`: the CPU's, or (with groups) that
    /// of the group level whose accounting `cfs` holds.
    #[cfg_attr(target_pointer_width = "64", inline)]
    pub(crate) fn update_cfs_avg_at(&mut self, now: u64) -> bool {
        // On 64-bit targets the common call that finds nothing to do (no whole unit since the
        // last update, as at a switch right after the tick, and nothing removed) is inlined.
        #[cfg(target_pointer_width = "64")]
        if self.cfs.removed.nr == 0 && elapsed_units(self.cfs.avg.last_update_time, now) == Some(0) {
            let (load, nr) = (self.cfs.load.down(), self.cfs.h_nr_running() as u64);
            self.cfs.pelt_slack.fed(load, nr, false);
            return false;
        }
        self.update_cfs_avg_full(now)
    }

    /// [`RunQueue::update_cfs_avg`] in full: out of line on 64-bit targets; 32-bit targets
    /// have no fast path, so there this is the whole update.
    #[cfg_attr(target_pointer_width = "64", inline(never))]
    #[cfg_attr(target_pointer_width = "32", inline(always))]
    fn update_cfs_avg_full(&mut self, now: u64) -> bool {
        let (load, nr) = (self.cfs.load.down(), self.cfs.h_nr_running() as u64);
        let r = self.cfs.removed;
        // (Nothing removed is no move: the consistency check's slack counts only real ones.)
        if r.nr != 0 {
            self.cfs.pelt_slack.moved(r.load_avg, r.runnable_avg, r.util_avg);
        }
        let mut decayed = self.cfs.avg.apply_removed(&mut self.cfs.removed);
        let crossed = self.cfs.avg.update_rq(now, load, nr, self.curr.is_some());
        self.cfs.pelt_slack.fed(load, nr, crossed);
        decayed |= crossed;
        decayed
    }

    /// `update_blocked_averages` for this CPU: decays the signals of an idle or blocked
    /// runqueue so stale load fades.
    pub fn update_blocked_averages(&mut self) {
        self.update_cfs_avg();
    }

    /// Records the signals of a task that left this runqueue while blocked (it woke on
    /// another CPU or exited). They are subtracted at the next update of this runqueue.
    /// The entity is detached afterwards; one that is not attached changes nothing.
    pub fn remove_entity_load(&mut self, e: &EntityCell) {
        if !e.pelt_attached() {
            return;
        }
        e.set_pelt_attached(false);
        // Sync the task's blocked decay to this runqueue's last update first.
        let mut avg = e.avg();
        avg.update_blocked_task(self.cfs.avg.last_update_time, e.weight());
        e.set_avg(avg);
        self.cfs.removed.add(&avg);
    }

    // ---- checks -------------------------------------------------------------------

    /// Checks the runqueue's invariants: every attached task in exactly one place (current,
    /// or queued on the timeline, or a current task being switched out), the MRU list
    /// holding exactly the accounted tasks, `nr_running` and the load sum matching, buddies
    /// pointing at queued tasks, and PELT averages consistent with their sums. Cost O(Q).
    pub fn check(&self, pool: Pool<'_>) -> Result<(), InvariantViolation> {
        let fail = |what| Err(InvariantViolation { cpu: self.cpu as usize, what, task: None });
        let entity = |slot: SlotId| self.entity_in(pool, slot).map(|e| e.get());
        if self.timeline.check().is_err() {
            return fail("timeline structure");
        }
        let mut nr = 0u32;
        let mut idle = 0u32;
        let mut weight = 0u64;
        let mut attached = 0usize;
        #[cfg(feature = "eevdf")]
        let mut eavg = crate::eevdf::AvgVruntime::new();
        for i in 0..Q {
            let slot = i as SlotId;
            let in_tree = self.timeline.contains(i);
            let Some(id) = self.task_at(slot) else {
                if in_tree || self.curr == Some(slot) {
                    return fail("empty slot queued or current");
                }
                continue;
            };
            let Some(e) = pool.get(id) else { return fail("attached task beyond the entity pool") };
            attached += 1;
            if e.cpu != self.cpu {
                return fail("entity cpu differs from its runqueue");
            }
            if e.on_rq {
                nr += 1;
                weight += e.load().weight;
                if e.policy == Policy::Idle {
                    idle += 1;
                }
                let is_curr = self.curr == Some(slot);
                if is_curr == in_tree {
                    return fail("accounted task must be current xor queued");
                }
                if in_tree && self.timeline.vruntime_of(i) != Some(e.vruntime) {
                    return fail("timeline key differs from entity vruntime");
                }
                #[cfg(feature = "eevdf")]
                if in_tree {
                    eavg.add(e.vruntime, self.cfs.min_vruntime, e.weight());
                    if self.eevdf() && self.timeline.deadline_of(i) != Some(e.deadline) {
                        return fail("timeline deadline differs from entity deadline");
                    }
                }
            } else {
                if in_tree {
                    return fail("unaccounted task on the timeline");
                }
                if self.curr != Some(slot) && self.switching_out != Some(slot) {
                    return fail("unaccounted task neither current, switching out, nor taken out");
                }
            }
            if e.avg.util_avg > SCHED_CAPACITY_SCALE || e.avg.runnable_avg > SCHED_CAPACITY_SCALE {
                return fail("task PELT average above capacity scale");
            }
            if e.avg.load_avg > e.weight() {
                return fail("task load_avg above its weight");
            }
        }
        #[cfg(feature = "eevdf")]
        if self.eevdf() && eavg != self.cfs.eavg {
            return fail("average vruntime sums differ from the timeline's entities");
        }
        if let Some(n) = self.switching_out {
            if self.curr == Some(n) || entity(n).is_none_or(|e| !e.on_cpu) {
                return fail("switching-out task is current or not on_cpu");
            }
        }
        if let Some(n) = self.curr {
            if entity(n).is_none_or(|e| !e.on_cpu) {
                return fail("current task not marked on_cpu");
            }
        }
        if nr != self.cfs.nr_running || nr != self.cfs.h_nr_running() || idle != self.cfs.idle_h_nr_running {
            return fail("nr_running differs from accounted tasks");
        }
        if weight != self.cfs.load.weight {
            return fail("load sum differs from accounted weights");
        }
        // The MRU list: exactly the accounted tasks, each once, links consistent.
        let mut count = 0u32;
        let mut prev = NIL;
        let mut cur = self.mru_head;
        while cur != NIL {
            count += 1;
            if count > nr || (cur as usize) >= Q {
                return fail("MRU list longer than accounted tasks");
            }
            if self.mru[cur as usize].prev != prev {
                return fail("MRU back link");
            }
            match entity(cur) {
                Some(e) if e.on_rq => {}
                _ => return fail("MRU list holds an unaccounted task"),
            }
            prev = cur;
            cur = self.mru[cur as usize].next;
        }
        if count != nr || self.mru_tail != prev {
            return fail("MRU list differs from accounted tasks");
        }
        for b in [self.cfs.next, self.cfs.last, self.cfs.skip].into_iter().flatten() {
            match entity(b) {
                Some(e) if e.on_rq => {}
                _ => return fail("buddy is not an accounted task"),
            }
        }
        if attached > Q {
            return fail("more tasks attached than slots");
        }
        if attached != self.attached as usize {
            return fail("attached count disagrees with the slots");
        }
        if attached + self.reserved as usize > Q {
            return fail("more slots promised than there are");
        }
        if let Err(what) = self.check_pelt(nr, attached) {
            return fail(what);
        }
        Ok(())
    }

    /// The PELT consistency check of [`RunQueue::check`] for the level in use, which
    /// accounts `nr` entities of `attached` attached.
    pub(crate) fn check_pelt(&self, nr: u32, attached: usize) -> Result<(), &'static str> {
        // PELT: at the last recompute each average was its sum / divider. Since then the
        // sums grew by at most one period of input while the divider grew too, and
        // attach/removed/reweight moved avg·divider at a divider up to one period apart.
        // A reweight moves `weight · load_sum` of an entity whose load_avg may lag its sum
        // (by up to `weight · period_contrib` since its own last recompute); it counts that
        // lag as moved too (`reweight_entity` in fair.rs).
        // So |sum/divider − avg| ≤ (input + moved + avg)·1024 / min_divider, plus rounding.
        let div = self.cfs.avg.divider();
        let min_div = LOAD_AVG_MAX - 1024;
        let sl = &self.cfs.pelt_slack;
        // Each move also truncates: an entity's average is its weighted sum / divider rounded
        // down, so taking out (or putting in) its average with its full sum leaves the two
        // apart by up to one more unit per move (`moves`).
        let close = |avg: u64, sum: u64, input: u64, moved: u64| {
            let from_sum = sum / div;
            from_sum.abs_diff(avg) <= (input + moved + avg) * 1024 / min_div + 2 + attached as u64 + sl.moves as u64
        };
        if !close(self.cfs.avg.util_avg, self.cfs.avg.util_sum as u64, SCHED_CAPACITY_SCALE, sl.util_moved) {
            return Err("rq util_avg inconsistent with util_sum");
        }
        let runnable_in = (sl.nr_in as u64).max(nr as u64) * SCHED_CAPACITY_SCALE;
        if !close(self.cfs.avg.runnable_avg, self.cfs.avg.runnable_sum, runnable_in, sl.runnable_moved) {
            return Err("rq runnable_avg inconsistent with runnable_sum");
        }
        if !close(self.cfs.avg.load_avg, self.cfs.avg.load_sum, sl.load_in.max(self.cfs.load.down()), sl.load_moved) {
            return Err("rq load_avg inconsistent with load_sum");
        }
        Ok(())
    }
}

/// What the PELT consistency check must allow for since the last recompute of the
/// runqueue's averages.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(crate) struct PeltSlack {
    load_in: u64,
    nr_in: u32,
    load_moved: u64,
    runnable_moved: u64,
    util_moved: u64,
    /// How many moves those were (beside `nr_in`, so the struct does not grow).
    moves: u32,
}

impl PeltSlack {
    /// Inputs fed to the sums; a crossed period boundary recomputed the averages.
    /// (Inline: it runs at every PELT update of the runqueue, and the call cost more.)
    #[inline]
    fn fed(&mut self, load: u64, nr: u64, crossed: bool) {
        if crossed {
            *self = PeltSlack { load_in: load, nr_in: nr as u32, ..PeltSlack::default() };
        } else {
            self.load_in = self.load_in.max(load);
            self.nr_in = self.nr_in.max(nr as u32);
        }
    }

    /// Averages moved into or out of the runqueue's (attach, removed, reweight).
    pub(crate) fn moved(&mut self, load: u64, runnable: u64, util: u64) {
        self.load_moved += load;
        self.runnable_moved += runnable;
        self.util_moved += util;
        self.moves = self.moves.saturating_add(1);
    }
}

/// Iterator over a runqueue's MRU task list.
pub struct MruIter<'a, const Q: usize> {
    rq: &'a RunQueue<Q>,
    cur: u32,
    back: bool,
}

impl<const Q: usize> Iterator for MruIter<'_, Q> {
    type Item = (SlotId, TaskId);
    fn next(&mut self) -> Option<(SlotId, TaskId)> {
        if self.cur == NIL {
            return None;
        }
        let slot = self.cur;
        self.cur = if self.back { self.rq.mru[slot as usize].prev } else { self.rq.mru[slot as usize].next };
        Some((slot, self.rq.ids[slot as usize]))
    }
}

#[cfg(test)]
mod tests {
    extern crate std;

    /// A prefetch hint covers the first slots of the MRU links and the ids, not the rest.
    #[cfg(target_pointer_width = "64")]
    #[test]
    fn slot_lines_cover_the_first_slots_of_each_array() {
        use super::{MruLink, RunQueue, TaskId};
        /// At a line's start, so that which slots share a line does not depend on the stack.
        #[repr(align(64))]
        struct Aligned(RunQueue<16>);
        let aligned = Aligned(RunQueue::UNSET);
        let rq = &aligned.0;
        let line = |p: *const u8| p as usize / crate::lines::LINE;
        let mut seen = std::vec::Vec::new();
        RunQueue::<16>::slot_lines(rq as *const _ as *const u8, 4, false, &mut |p| seen.push(line(p)));
        for s in 0..4 {
            assert!(seen.contains(&line(&rq.mru[s] as *const MruLink as *const u8)));
            assert!(seen.contains(&line(&rq.ids[s] as *const TaskId as *const u8)));
        }
        assert!(!seen.contains(&line(&rq.ids[15] as *const TaskId as *const u8)));
        assert!(!seen.contains(&line(&rq.mru[15] as *const MruLink as *const u8)));
    }
}
