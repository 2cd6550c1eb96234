//! The fair class on one runqueue (docs/linux-v5.7.md §1): update_curr, placement, enqueue/dequeue,
//! picking with buddies, tick and wakeup preemption, yield, reweighting, and when PELT is
//! updated along the way (docs/linux-v5.7.md §2).
//!
//! Everything here operates on one [`RunQueue`] and the entities of the tasks attached to
//! it, reached through a [`Fair`] view (the runqueue plus the machine's entity pool); which
//! task is where, and locking, belong to the callers ([`crate::Smp`], which holds each
//! CPU's runqueue behind its lock and so owns the entities attached to it).

use core::ops::{Deref, DerefMut};

use bitflags::bitflags;
#[cfg(feature = "eevdf")]
use crate::eevdf;
use crate::entities::{EntityCell, Pool};
use crate::features::{Features, RunnableInit};
use crate::pelt;
use crate::runqueue::{RunQueue, SlotId};
use crate::task::{Entity, Policy, TaskId};
use crate::timeline::vruntime_before;
use crate::weights::{calc_delta, calc_delta_fair, LoadWeight, Nice};

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

    /// Hints about a wakeup.
    #[derive(Debug, Clone, Copy, PartialEq, Eq)]
    pub struct WakeFlags: u8 {
        /// The waker is about to sleep.
        const SYNC = 1 << 0;
        /// The wakee is a newly created task.
        const FORK = 1 << 1;
    }
}

bitflags! {
    #[derive(Debug, Clone, Copy, PartialEq, Eq)]
    struct PeltFlags: u8 {
        const SKIP_AGE_LOAD = 1 << 0;
        const DO_ATTACH = 1 << 1;
    }
}

/// `max` in the wrap-safe vruntime order.
fn max_vruntime(a: u64, b: u64) -> u64 {
    if vruntime_before(a, b) {
        b
    } else {
        a
    }
}

/// `min` in the wrap-safe vruntime order.
fn min_vruntime(a: u64, b: u64) -> u64 {
    if vruntime_before(a, b) {
        a
    } else {
        b
    }
}

/// A runqueue together with the entity pool: the fair class's view of one CPU. Made by
/// [`RunQueue::fair`] by whoever holds the runqueue, so it owns the entities attached there.
pub struct Fair<'r, 'p, const Q: usize> {
    pub(crate) rq: &'r mut RunQueue<Q>,
    pub(crate) pool: Pool<'p>,
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

/// What [`RunQueue::ent_in`] reads for a slot that holds no task (a core bug the invariant
/// checker reports): zeros, harmless values. Only read, never written.
static MISSING: EntityCell = EntityCell::new();

impl<const Q: usize> RunQueue<Q> {
    /// The fair class's view of this runqueue with the machine's entity pool.
    pub fn fair<'p>(&mut self, pool: Pool<'p>) -> Fair<'_, 'p, Q> {
        Fair { rq: self, pool }
    }

    /// The entity cell of the task attached at `slot` (the caller holds this runqueue, so
    /// it owns the entity); `None` for an empty slot.
    #[inline]
    pub(crate) fn entity_in<'p>(&self, pool: Pool<'p>, slot: SlotId) -> Option<&'p EntityCell> {
        pool.cell(self.task_at(slot)?)
    }

    /// [`RunQueue::entity_in`] for a slot the caller got from this runqueue, to read.
    pub(crate) fn ent_in<'p>(&self, pool: Pool<'p>, slot: SlotId) -> &'p EntityCell {
        self.entity_in(pool, slot).unwrap_or(&MISSING)
    }
}

impl<'p, const Q: usize> Fair<'_, 'p, Q> {
    /// The entity cell of the task at `slot`.
    #[inline]
    pub fn entity(&self, slot: SlotId) -> Option<&'p EntityCell> {
        self.rq.entity_in(self.pool, slot)
    }

    /// Like [`Fair::entity`] for a slot the caller got from this runqueue, to read.
    pub(crate) fn ent(&self, slot: SlotId) -> &'p EntityCell {
        self.rq.ent_in(self.pool, slot)
    }

    /// Attaches task `id` (its entity already in the pool) in a free slot, not yet queued.
    pub(crate) fn insert(&mut self, id: TaskId) -> Option<SlotId> {
        self.rq.insert(id)
    }

    /// Attaches task `id` in the slot reserved for it.
    pub(crate) fn insert_reserved(&mut self, id: TaskId) -> Option<SlotId> {
        self.rq.insert_reserved(id)
    }

    /// Puts the entity at `slot` on the timeline (with its deadline, and into the average
    /// vruntime's sums).
    #[cfg_attr(target_pointer_width = "64", inline)]
    fn tl_insert(&mut self, slot: SlotId, se: &EntityCell) {
        let vr = se.vruntime();
        #[cfg(feature = "eevdf")]
        {
            // Cannot fail: slot < Q and it is not queued.
            let _ = self.timeline.insert_with_deadline(slot as usize, vr, se.deadline());
            if self.eevdf() {
                let base = self.min_vruntime;
                self.eavg.add(vr, base, se.weight());
            }
        }
        #[cfg(not(feature = "eevdf"))]
        let _ = self.timeline.insert(slot as usize, vr);
    }

    /// Takes the entity at `slot` off the timeline (and out of the average's sums, with the
    /// vruntime it was queued with).
    #[cfg_attr(target_pointer_width = "64", inline)]
    fn tl_remove(&mut self, slot: SlotId, se: &EntityCell) {
        #[cfg(feature = "eevdf")]
        if let Some(v) = self.eevdf().then(|| self.timeline.vruntime_of(slot as usize)).flatten() {
            let base = self.min_vruntime;
            self.eavg.sub(v, base, se.weight());
        }
        #[cfg(not(feature = "eevdf"))]
        let _ = se;
        let _ = self.timeline.remove(slot as usize);
    }

    /// Charges the current task for the time since it was last charged: its runtime grows
    /// by the wall delta, its vruntime by the delta scaled by NICE_0_LOAD / weight; then
    /// `min_vruntime` follows.
    pub fn update_curr(&mut self) {
        self.update_curr_vw(false);
    }

    /// [`Fair::update_curr`], returning the current entity's vruntime and weight if it is
    /// runnable (what `min_vruntime` follows and EEVDF's average counts besides the timeline;
    /// the weight is 0 while CFS picks) — if the caller `want`s them; `None` otherwise.
    #[cfg_attr(target_pointer_width = "64", inline)]
    fn update_curr_vw(&mut self, want: bool) -> Option<(u64, u64)> {
        let se = self.entity(self.curr?)?;
        self.charge_curr(se);
        if !want {
            return None;
        }
        // (Only EEVDF's average reads the weight: CFS does not look it up.)
        let w = if self.eevdf() { se.weight() } else { 0 };
        se.on_rq().then(|| (se.vruntime(), w))
    }

    /// [`Fair::update_curr`] on the current entity, whose cell the caller has. Nothing is
    /// charged when the clock has not moved since the last charge (as when one
    /// wakeup enqueues and dequeues several tasks at the same instant), so that test is
    /// inlined and the charge is not.
    #[cfg_attr(target_pointer_width = "64", inline)]
    fn charge_curr(&mut self, se: &EntityCell) {
        let now = self.clock_task;
        // (Wrap-safe: a port's clock may start anywhere.)
        let delta = now.wrapping_sub(se.exec_start()) as i64;
        if delta > 0 {
            self.charge_curr_for(se, now, delta as u64);
        }
    }

    /// [`Fair::charge_curr`] of `delta` > 0 ns, up to `now`.
    fn charge_curr_for(&mut self, se: &EntityCell, now: u64, delta: u64) {
        se.set_exec_start(now);
        se.set_sum_exec_runtime(se.sum_exec_runtime() + delta);
        let vr = se.vruntime().wrapping_add(calc_delta_fair(delta, &se.load()));
        se.set_vruntime(vr);
        #[cfg(feature = "eevdf")]
        if self.eevdf() {
            self.update_deadline(se);
        }
        self.min_vruntime_with(se.on_rq().then_some(vr));
    }

    /// `update_min_vruntime`: `min_vruntime` = max(itself, min(the runnable current entity's
    /// vruntime `curr`, the leftmost's)), so it only moves forward. The leftmost's vruntime is
    /// its timeline key (they are equal while it is queued).
    #[cfg_attr(target_pointer_width = "64", inline)]
    fn min_vruntime_with(&mut self, curr: Option<u64>) {
        let mut vr = curr.unwrap_or(self.min_vruntime);
        if let Some(lv) = self.timeline.leftmost().and_then(|l| self.timeline.vruntime_of(l)) {
            vr = if curr.is_none() { lv } else { min_vruntime(vr, lv) };
        }
        let old = self.min_vruntime;
        self.min_vruntime = max_vruntime(old, vr);
        #[cfg(feature = "eevdf")]
        if self.min_vruntime != old && self.eevdf() {
            let new = self.min_vruntime;
            self.eavg.rebase(old, new);
        }
    }

    /// `update_load_avg` for an entity here, whose cell the caller holds, and for the
    /// runqueue: ages the entity (if it is attached), updates the runqueue's signals, and
    /// attaches a detached entity if asked.
    #[cfg_attr(target_pointer_width = "64", inline(always))]
    fn load_avg_with(&mut self, se: &EntityCell, is_curr: bool, flags: PeltFlags) {
        let now = self.clock_pelt();
        let attached = se.pelt_attached();
        if attached && !flags.contains(PeltFlags::SKIP_AGE_LOAD) {
            se.update_pelt(now, se.on_rq(), is_curr);
        }
        self.update_cfs_avg();
        // (Tested here: an enqueue of an attached task, the common case, makes no call.)
        if flags.contains(PeltFlags::DO_ATTACH) && !attached {
            self.attach_avg_with(se);
        }
    }

    /// Adds a detached entity's PELT signals to the runqueue's ([`Fair::load_avg_with`]
    /// calls it for a detached one only).
    fn attach_avg_with(&mut self, se: &EntityCell) {
        let w = se.weight();
        let mut avg = se.avg();
        self.avg.attach(&mut avg, w);
        se.set_avg(avg);
        se.set_pelt_attached(true);
        self.pelt_slack.moved(avg.load_avg, avg.runnable_avg, avg.util_avg);
    }

    /// New-task PELT initialisation on this CPU (`post_init_entity_util_avg`): util from
    /// half the spare capacity, runnable per [`RunnableInit`], then attach.
    pub(crate) fn post_init_entity(&mut self, slot: SlotId) {
        let cpu_scale = self.capacity_orig;
        let runnable_init = self.tunables.runnable_init;
        let rq_avg = self.avg;
        let is_curr = self.curr == Some(slot);
        let Some(se) = self.entity(slot) else { return };
        let mut avg = se.avg();
        avg.util_avg = pelt::initial_util(cpu_scale, &rq_avg, se.load().weight);
        avg.runnable_avg = match runnable_init {
            RunnableInit::CpuCapacity => cpu_scale,
            RunnableInit::InitialUtil => avg.util_avg,
        };
        se.set_avg(avg);
        // attach_entity_cfs_rq: bring the runqueue up to date, then attach.
        self.load_avg_with(se, is_curr, PeltFlags::SKIP_AGE_LOAD | PeltFlags::DO_ATTACH);
    }

    /// Accounts and queues the entity at `slot` (`enqueue_task_fair` for a flat
    /// hierarchy). The task must be attached here and not yet accounted.
    pub fn enqueue(&mut self, slot: SlotId, flags: EnqueueFlags) {
        let Some(se) = self.entity(slot) else { return };
        if se.on_rq() {
            return;
        }
        // (A task attached here by `insert` takes this CPU now.)
        se.set_cpu(self.rq.cpu);
        // util_est first, before PELT sees the task.
        if self.features.contains(Features::UTIL_EST) {
            pelt::util_est_add(&mut self.avg.util_est, &se.util_est_parts());
        }
        let renorm = !flags.contains(EnqueueFlags::WAKEUP) || flags.contains(EnqueueFlags::MIGRATED);
        let is_curr = self.curr == Some(slot);
        let eevdf = self.eevdf();
        // The current entity is renormalised before update_curr so its pending runtime is
        // charged against the right base; others after, against the updated min_vruntime.
        // (EEVDF places every enqueue by its lag instead, around the average: Linux 6.6.)
        if eevdf && is_curr {
            self.place_eevdf(se, flags, None);
        } else if renorm && is_curr {
            se.set_vruntime(se.vruntime().wrapping_add(self.min_vruntime));
        }
        let curr = if is_curr {
            self.charge_curr(se);
            None
        } else {
            self.update_curr_vw(eevdf)
        };
        if eevdf && !is_curr {
            self.place_eevdf(se, flags, curr);
        } else if renorm && !is_curr {
            se.set_vruntime(se.vruntime().wrapping_add(self.min_vruntime));
        }
        self.load_avg_with(se, is_curr, PeltFlags::DO_ATTACH);
        // account_entity_enqueue
        let policy = se.policy();
        self.load.add(se.load().weight);
        self.nr_running += 1;
        self.idle_nr_running += (policy == Policy::Idle) as u32;
        self.mru_push_head(slot);
        if flags.contains(EnqueueFlags::WAKEUP) && !eevdf {
            self.rq.place_entity(se);
        }
        if !is_curr {
            self.tl_insert(slot, se);
        }
        se.set_on_rq(true);
    }

    /// Unaccounts the entity at `slot` (`dequeue_task_fair`). It stays attached (the
    /// current task keeps running until the next pick); a sleeping dequeue samples its
    /// util_est, any other normalises its vruntime for the trip to another runqueue.
    pub fn dequeue(&mut self, slot: SlotId, flags: DequeueFlags) {
        let Some(se) = self.entity(slot) else { return };
        if !se.on_rq() {
            return;
        }
        let is_curr = self.curr == Some(slot);
        // A save/restore pair comes straight back; don't let min_vruntime jump meanwhile.
        let follow_min = flags & (DequeueFlags::SAVE | DequeueFlags::MOVE) != DequeueFlags::SAVE;
        // The runnable current entity's vruntime and weight, for min_vruntime and EEVDF's
        // lag below (when neither needs them, the current task is only charged).
        let curr_vw = if is_curr {
            self.charge_curr(se);
            None // (it is this entity, about to stop being accounted)
        } else {
            self.update_curr_vw(follow_min || self.eevdf())
        };
        let curr_vr = curr_vw.map(|c| c.0);
        self.load_avg_with(se, is_curr, PeltFlags::empty());
        self.clear_buddies(slot);
        #[cfg(feature = "eevdf")]
        if self.eevdf() {
            // The lag it leaves with, against the average it is still part of.
            let (vr, w) = (se.vruntime(), se.weight());
            let curr = if is_curr { Some((vr, w)) } else { curr_vw };
            let avg = self.eavg.avg(self.min_vruntime, curr);
            se.set_vlag(eevdf::bounded_lag(avg, vr, self.slice_ns(se.slice()), w));
            if !flags.contains(DequeueFlags::SLEEP) {
                // Leaving for another runqueue or a nice change, mid-request: the deadline
                // travels relative to the vruntime (Linux's PLACE_REL_DEADLINE).
                se.set_deadline(se.deadline().wrapping_sub(vr));
            }
        }
        if !is_curr {
            self.tl_remove(slot, se);
        }
        let policy = se.policy();
        self.load.sub(se.load().weight);
        self.nr_running -= 1;
        self.idle_nr_running -= (policy == Policy::Idle) as u32;
        self.mru_unlink(slot);
        se.set_on_rq(false);
        if !flags.contains(DequeueFlags::SLEEP) {
            se.set_vruntime(se.vruntime().wrapping_sub(self.min_vruntime));
        }
        if follow_min {
            self.min_vruntime_with(curr_vr);
        }
        if self.features.contains(Features::UTIL_EST) {
            let capacity_orig = self.capacity_orig;
            let fastup = self.features.contains(Features::UTIL_EST_FASTUP);
            let mut ue = se.util_est_parts();
            pelt::util_est_sub(&mut self.avg.util_est, &ue);
            if flags.contains(DequeueFlags::SLEEP) {
                pelt::util_est_sample(&mut ue, se.util(), capacity_orig, fastup);
                se.set_util_est_parts(ue);
            }
        }
    }

    /// EEVDF's placement of an entity as it is enqueued: at the average, behind or ahead of
    /// it by its lag (none for a new task), with a deadline one slice on (half a slice for a
    /// new task). `curr` is the runnable current entity's vruntime and weight, unless it is
    /// the one placed.
    #[cfg(feature = "eevdf")]
    fn place_eevdf(&mut self, se: &EntityCell, flags: EnqueueFlags, curr: Option<(u64, u64)>) {
        let w = se.weight();
        let base = self.min_vruntime;
        let avg = self.eavg.avg(base, curr);
        let load = self.eavg.load() + curr.map_or(0, |c| c.1);
        let initial = flags.contains(EnqueueFlags::INITIAL);
        let mut vlag = if initial { 0 } else { se.vlag() };
        if vlag < 0 && flags.contains(EnqueueFlags::WAKEUP) && !self.features.contains(Features::SLEEPER_KEEPS_LAG) {
            // The debt it slept with, less what the average has moved past it meanwhile, as if
            // it had stayed queued (Linux 6.12): its vruntime is as it left it, and an average
            // that still counted it would stand W/(W + w) of the way from it to this one. After
            // a migration its vruntime is relative to the old runqueue's min_vruntime, which is
            // all that is known of the old average there: an estimate.
            let vr = se.vruntime();
            let since = if flags.contains(EnqueueFlags::MIGRATED) {
                (vr as i64).wrapping_neg()
            } else {
                let gap = avg.wrapping_sub(vr) as i64 as i128;
                (gap * load as i128 / (load as i128 + w as i128)) as i64
            };
            vlag = vlag.max(since.min(0));
        }
        let vr = eevdf::place(avg, vlag, load, w);
        se.set_vruntime(vr);
        let slice = self.slice_ns(se.slice());
        // (Scaled by the inverse weight, as vruntime is: a multiply, not a division.)
        let vslice = calc_delta_fair(if initial { slice / 2 } else { slice }, &se.load());
        // A wakeup or a new task starts a request; a task that moved or changed its nice
        // mid-request keeps what was left of it (its deadline came relative, see `dequeue`;
        // one enqueued under CFS brings none, and starts a request).
        let rel = se.deadline();
        let resumes = !flags.intersects(EnqueueFlags::WAKEUP | EnqueueFlags::INITIAL);
        let left = if resumes && rel > 0 && rel <= vslice { rel } else { vslice };
        se.set_deadline(vr.wrapping_add(left));
    }

    /// An entity's slice in its virtual time: scaled by the inverse weight, as its vruntime
    /// is (a multiply, not a division).
    #[cfg(feature = "eevdf")]
    fn vslice_of(&self, se: &EntityCell) -> u64 {
        calc_delta_fair(self.slice_ns(se.slice()), &se.load())
    }

    /// `update_deadline`: the current entity whose request is done starts the next, one slice
    /// on, and gives the CPU up if another task waits.
    #[cfg(feature = "eevdf")]
    fn update_deadline(&mut self, se: &EntityCell) {
        let vr = se.vruntime();
        if vruntime_before(vr, se.deadline()) {
            return;
        }
        se.set_deadline(vr.wrapping_add(self.vslice_of(se)));
        if self.nr_running > 1 {
            self.resched_curr();
        }
    }

    /// EEVDF's wakeup preemption: the woken entity `w` (at `wakee`, queued) preempts the
    /// current `c` when the pick, counting `c`, would choose it — unless `c` is eligible and
    /// still in the request it was picked for (RUN_TO_PARITY).
    #[cfg(feature = "eevdf")]
    fn eevdf_preempts(&mut self, wakee: SlotId, w: &EntityCell, c: &EntityCell) -> bool {
        let base = self.min_vruntime;
        let (c_on_rq, c_vr, c_dl, w_dl) = (c.on_rq(), c.vruntime(), c.deadline(), w.deadline());
        let curr = c_on_rq.then(|| (c_vr, c.weight()));
        let avg = self.eavg;
        let c_eligible = c_on_rq && avg.eligible(c_vr, base, curr);
        let protected = c_eligible && c_dl == self.picked_deadline;
        // PREEMPT_SHORT (Linux 6.12): an eligible wakee with a shorter slice and an earlier
        // deadline ends the running task's protection (for the pick that follows too).
        let short = self.slice_ns(w.slice()) < self.slice_ns(c.slice())
            && avg.eligible(w.vruntime(), base, curr)
            && vruntime_before(w_dl, c_dl);
        if protected && short {
            self.picked_deadline = c_dl.wrapping_add(1);
        } else if protected {
            return false;
        }
        let best = self.timeline.pick_eligible(|v| avg.eligible(v, base, curr));
        best == Some(wakee as usize) && (!c_eligible || vruntime_before(w_dl, c_dl))
    }

    /// Without EEVDF built in there is nothing to place.
    #[cfg(not(feature = "eevdf"))]
    fn place_eevdf(&mut self, _se: &EntityCell, _flags: EnqueueFlags, _curr: Option<(u64, u64)>) {}

    /// Without EEVDF built in it never preempts.
    #[cfg(not(feature = "eevdf"))]
    fn eevdf_preempts(&mut self, _wakee: SlotId, _w: &EntityCell, _c: &EntityCell) -> bool {
        false
    }

    // ---- buddies --------------------------------------------------------------------

    /// A candidate's vruntime: its timeline key while queued (equal to its entity's).
    fn vruntime_of(&self, slot: SlotId) -> u64 {
        match self.timeline.vruntime_of(slot as usize) {
            Some(vr) => vr,
            None => self.ent(slot).vruntime(),
        }
    }

    // ---- picking --------------------------------------------------------------------

    /// `pick_next_entity` with no current task: the leftmost, unless it is the skip buddy
    /// and the second is not too far behind; then the last buddy and finally the next
    /// buddy win if not too unfair to the leftmost. Clears the chosen one's buddy marks.
    pub fn pick_next_entity(&mut self) -> Option<SlotId> {
        #[cfg(feature = "eevdf")]
        if self.eevdf() {
            let base = self.min_vruntime;
            let avg = self.eavg;
            // (Nothing eligible cannot happen with anything queued — the least vruntime is
            // never ahead of the average — but the leftmost is the safe answer.)
            let pick = self.timeline.pick_eligible(|v| avg.eligible(v, base, None)).or(self.timeline.leftmost());
            return pick.map(|p| p as SlotId);
        }
        let left = self.timeline.leftmost()? as SlotId;
        let mut se = left;
        if self.skip.is_some() || self.last.is_some() || self.next.is_some() {
            // The candidates are compared with the leftmost by vruntime (their keys) and
            // its wakeup granularity (its weight).
            let left_vr = self.vruntime_of(left);
            let left_load = self.ent(left).load();
            let behind = |vr: u64| self.wakeup_preempt_vr(vr, left_vr, &left_load) < 1;
            if self.skip == Some(se) {
                if let Some(second) = self.timeline.successor(se as usize) {
                    let second = second as SlotId;
                    if behind(self.vruntime_of(second)) {
                        se = second;
                    }
                }
            }
            if let Some(last) = self.last {
                if behind(self.vruntime_of(last)) {
                    se = last;
                }
            }
            if let Some(next) = self.next {
                if behind(self.vruntime_of(next)) {
                    se = next;
                }
            }
        }
        self.clear_buddies(se);
        Some(se)
    }

    /// `set_next_entity`: takes the picked entity off the timeline and makes it current,
    /// starting a new slice.
    pub fn set_next(&mut self, slot: SlotId) {
        let Some(se) = self.entity(slot) else {
            self.curr = Some(slot);
            return;
        };
        let on_rq = se.on_rq();
        if on_rq {
            self.tl_remove(slot, se);
            let is_curr = self.curr == Some(slot);
            self.load_avg_with(se, is_curr, PeltFlags::empty());
        }
        #[cfg(feature = "eevdf")]
        {
            self.picked_deadline = se.deadline();
        }
        se.set_exec_start(self.clock_task);
        se.set_prev_sum_exec_runtime(se.sum_exec_runtime());
        se.set_on_cpu(true);
        self.curr = Some(slot);
        // Only a runnable task belongs to the MRU list (a current task that already
        // blocked is made current again around a nice change, but stays out of it).
        if on_rq {
            self.mru_move_to_head(slot);
        }
    }

    /// `put_prev_entity`: the current entity stops running; if still runnable it goes
    /// back on the timeline. Returns its slot.
    pub fn put_prev(&mut self) -> Option<SlotId> {
        let prev = self.curr?;
        if let Some(se) = self.entity(prev) {
            if se.on_rq() {
                self.charge_curr(se);
                self.tl_insert(prev, se);
                self.load_avg_with(se, true, PeltFlags::empty());
            }
        }
        self.curr = None;
        Some(prev)
    }

    /// The runqueue part of `__schedule`: the current task is put back (or, if it blocked,
    /// left aside), the next one is picked and made current. Returns (prev, next). If
    /// they differ, `prev` stays marked `on_cpu` as the task being switched out until
    /// [`Fair::finish_switch`], which the caller must have called for the previous
    /// switch (it returns the id of a task that blocked, which only the caller can park).
    pub fn schedule_pick(&mut self) -> (Option<SlotId>, Option<SlotId>) {
        debug_assert!(self.switching_out.is_none(), "finish_switch before the next pick");
        let prev = self.put_prev();
        #[cfg_attr(not(feature = "eevdf"), allow(unused_mut))]
        let mut next = self.pick_next_entity();
        #[cfg(feature = "eevdf")]
        if let Some(p) = prev.filter(|_| self.eevdf()) {
            // RUN_TO_PARITY: a task still eligible keeps the CPU until its request is done.
            let (on_rq, v, d) = {
                let e = self.ent(p);
                (e.on_rq(), e.vruntime(), e.deadline())
            };
            if on_rq && d == self.picked_deadline && self.eavg.eligible(v, self.min_vruntime, None) {
                next = Some(p);
            }
        }
        if let Some(n) = next {
            self.set_next(n);
        } else if prev.is_some() {
            self.note_idle_entry();
        }
        self.need_resched = false;
        if prev != next {
            self.switching_out = prev;
            self.nr_switches += 1;
        }
        (prev, next)
    }

    /// The CPU has saved the context of the task it switched away from: that task may now
    /// run elsewhere. If it blocked or exited, it is detached from this runqueue and its id
    /// returned (the caller parks or frees it).
    pub fn finish_switch(&mut self) -> Option<TaskId> {
        let prev = self.switching_out.take()?;
        let on_rq = {
            let se = self.entity(prev)?;
            se.set_on_cpu(false);
            se.on_rq()
        };
        if on_rq {
            None
        } else {
            self.take(prev)
        }
    }

    // ---- preemption -----------------------------------------------------------------

    /// The fair part of the scheduler tick: charge the current task, update PELT, and
    /// preempt it if its slice is used up or it is too far ahead of the leftmost.
    pub fn task_tick(&mut self) {
        let Some(c) = self.curr else {
            self.update_blocked_averages();
            return;
        };
        let Some(se) = self.entity(c) else { return };
        self.charge_curr(se);
        self.load_avg_with(se, true, PeltFlags::empty());
        // (EEVDF preempts when a request is done: `update_deadline`, from charge_curr.)
        if self.nr_running > 1 && se.on_rq() && !self.eevdf() {
            self.check_preempt_tick(c, se);
        }
    }

    #[cfg_attr(target_pointer_width = "64", inline(always))]
    fn check_preempt_tick(&mut self, curr: SlotId, c: &EntityCell) {
        // (Called for a runnable current entity only: it is accounted here.)
        let (ideal, delta_exec, cvr) = (
            self.sched_slice(c.load_weight(), true),
            c.sum_exec_runtime() - c.prev_sum_exec_runtime(),
            c.vruntime(),
        );
        if delta_exec > ideal {
            self.resched_curr();
            self.clear_buddies(curr);
            return;
        }
        if delta_exec < self.tunables.min_granularity_ns {
            return;
        }
        let Some(left) = self.timeline.leftmost() else { return };
        let delta = cvr.wrapping_sub(self.vruntime_of(left as SlotId)) as i64;
        // Compares virtual time with a wall-clock slice, as Linux does.
        if delta > 0 && delta as u64 > ideal {
            self.resched_curr();
        }
    }

    /// `check_preempt_curr` for a fair task that was just enqueued here.
    pub(crate) fn check_preempt_wakeup(&mut self, wakee: SlotId, flags: WakeFlags) {
        let Some(curr) = self.curr else {
            // The idle loop is always preempted.
            self.resched_curr();
            return;
        };
        if curr == wakee {
            return;
        }
        let scale = self.nr_running as u64 >= self.tunables.nr_latency;
        let Some(w) = self.entity(wakee) else { return };
        let wakee_allowed = buddy_allowed(w.policy());
        let mut next_marked = false;
        if self.features.contains(Features::NEXT_BUDDY) && scale && !flags.contains(WakeFlags::FORK) {
            if wakee_allowed {
                self.next = Some(wakee);
            }
            next_marked = true;
        }
        if self.need_resched {
            return;
        }
        let Some(c) = self.entity(curr) else { return };
        let (cp, wp) = (c.policy(), w.policy());
        let preempt = if cp == Policy::Idle && wp != Policy::Idle {
            true
        } else if wp != Policy::Normal || !self.features.contains(Features::WAKEUP_PREEMPTION) {
            return;
        } else if self.eevdf() {
            self.charge_curr(c);
            self.eevdf_preempts(wakee, w, c)
        } else {
            self.charge_curr(c);
            if self.wakeup_preempt_vr(c.vruntime(), w.vruntime(), &w.load()) == 1 {
                if !next_marked && wakee_allowed {
                    self.next = Some(wakee);
                }
                true
            } else {
                false
            }
        };
        if !preempt {
            return;
        }
        self.resched_curr();
        if !c.on_rq() {
            return;
        }
        if self.features.contains(Features::LAST_BUDDY) && scale && buddy_allowed(cp) {
            self.last = Some(curr);
        }
    }

    /// `yield_task_fair`: the current task steps aside once: it is charged (unless batch)
    /// and marked as the skip buddy; the caller then reschedules.
    pub fn yield_curr(&mut self) {
        let Some(c) = self.curr else { return };
        let Some(se) = self.entity(c) else { return };
        // A current task that already blocked or exited has nothing to yield.
        if self.nr_running <= 1 || !se.on_rq() {
            return;
        }
        self.clear_buddies(c);
        let policy = se.policy();
        if policy != Policy::Batch {
            self.charge_curr(se);
        }
        #[cfg(feature = "eevdf")]
        if self.eevdf() {
            // Its request is over: the next one starts one slice later.
            se.set_deadline(se.deadline().wrapping_add(self.vslice_of(se)));
            return;
        }
        if buddy_allowed(policy) {
            self.skip = Some(c);
        }
    }

    /// `task_fork_fair`: gives a new entity its starting vruntime on this runqueue — the
    /// parent's (the current task's) vruntime or one vslice after `min_vruntime`,
    /// whichever is later — and returns it normalised (relative to `min_vruntime`) for
    /// enqueueing on whichever CPU it is placed.
    pub(crate) fn fork_vruntime(&mut self, child: &mut Entity) {
        #[cfg(feature = "eevdf")]
        {
            // EEVDF places a new task at the average with no lag (INITIAL enqueue).
            child.vlag = 0;
        }
        self.update_curr();
        let start = match self.curr {
            Some(c) => self.ent(c).vruntime(),
            None => self.min_vruntime,
        };
        child.vruntime = self.place_vruntime(start, Some(&child.load()));
        if self.tunables.child_runs_first {
            if let Some(c) = self.curr {
                let cvr = self.ent(c).vruntime();
                if vruntime_before(cvr, child.vruntime) {
                    let cv = child.vruntime;
                    child.vruntime = cvr;
                    if let Some(p) = self.entity(c) {
                        p.set_vruntime(cv);
                    }
                    self.resched_curr();
                }
            }
        }
        child.vruntime = child.vruntime.wrapping_sub(self.min_vruntime);
    }

    /// `reweight_task`: gives the entity at `slot` a new nice value. It must not be
    /// accounted (the caller dequeues with SAVE around it); its blocked PELT load is
    /// re-expressed with the new weight.
    pub(crate) fn reweight(&mut self, slot: SlotId, nice: Nice) {
        let eevdf = self.eevdf();
        let Some(cell) = self.entity(slot) else { return };
        let mut se = cell.get();
        #[cfg(feature = "eevdf")]
        let old_weight = se.weight();
        let moved = reweight_entity(&mut self.avg, &mut se, nice, eevdf);
        #[cfg(feature = "eevdf")]
        if eevdf {
            // What is left of the request (relative, out of the accounting) takes as long
            // in wall time at the new weight: scaled like the lag.
            se.deadline = (se.deadline as u128 * old_weight as u128 / se.weight().max(1) as u128) as u64;
        }
        cell.put(&se);
        self.pelt_slack.moved(moved, 0, 0);
    }

    /// Changes the nice value of a task attached here (queued, running or switching out),
    /// as `set_user_nice` does: out of the accounting with SAVE, reweighted, back with
    /// RESTORE, and a reschedule if the change can alter who should run.
    pub fn change_nice(&mut self, slot: SlotId, nice: Nice) {
        let Some(e) = self.entity(slot) else { return };
        let (old, queued) = (e.nice(), e.on_rq());
        let running = self.curr == Some(slot);
        if queued {
            self.dequeue(slot, DequeueFlags::SAVE);
        }
        if running {
            self.put_prev();
        }
        self.reweight(slot, nice);
        if queued {
            self.enqueue(slot, EnqueueFlags::RESTORE);
            if nice < old || (nice > old && running) {
                self.resched_curr();
            }
        }
        if running {
            self.set_next(slot);
        }
    }

    /// Takes a queued task that is not running off this runqueue for a move to another CPU
    /// (`detach_task`): dequeued with its vruntime normalised, its PELT signals detached at
    /// once, marked not cache hot, and detached from this runqueue (its id is returned; the
    /// entity stays in the pool, in transit).
    pub fn detach_task(&mut self, slot: SlotId) -> Option<TaskId> {
        match self.entity(slot) {
            Some(e) if e.on_rq() && !e.on_cpu() && self.curr != Some(slot) => {}
            _ => return None,
        }
        // `dequeue` brought its PELT signals up to date.
        self.dequeue(slot, DequeueFlags::empty());
        let se = self.entity(slot)?;
        if se.pelt_attached() {
            let (avg, w) = (se.avg(), se.weight());
            self.avg.detach(&avg, w);
            se.set_pelt_attached(false);
            self.pelt_slack.moved(avg.load_avg, avg.runnable_avg, avg.util_avg);
        }
        se.set_exec_start(0);
        self.take(slot)
    }

    /// Puts a task detached from another CPU onto this runqueue (`attach_task`): enqueued
    /// with its vruntime renormalised and its PELT signals attached, then a preemption
    /// check. `None` if there is no room. The task's entity is in the pool (in transit).
    pub fn attach_task(&mut self, id: TaskId) -> Option<SlotId> {
        let slot = self.insert(id)?;
        self.attach_inserted(slot)
    }

    /// [`Fair::attach_task`] into a slot promised with [`RunQueue::reserve`].
    pub(crate) fn attach_task_reserved(&mut self, id: TaskId) -> Option<SlotId> {
        let slot = self.insert_reserved(id)?;
        self.attach_inserted(slot)
    }

    fn attach_inserted(&mut self, slot: SlotId) -> Option<SlotId> {
        self.enqueue(slot, EnqueueFlags::empty());
        self.check_preempt_wakeup(slot, WakeFlags::empty());
        Some(slot)
    }
}

impl<const Q: usize> RunQueue<Q> {
    /// The scheduling period for `nr` runnable tasks: the latency target, stretched to
    /// `nr × min_granularity` beyond `nr_latency` tasks.
    pub fn sched_period(&self, nr: u64) -> u64 {
        let t = &self.tunables;
        if nr > t.nr_latency {
            nr * t.min_granularity_ns
        } else {
            t.latency_ns
        }
    }

    /// The wall-clock slice of an entity of (high-resolution) load weight `weight`,
    /// accounted here if `on_rq`: its weight's share of the period. An entity not yet
    /// accounted counts itself in both the task number and the total weight. (The weight
    /// alone: the slice divides by the total, so the entity's inverse is not needed.)
    #[cfg_attr(target_pointer_width = "64", inline)]
    pub fn sched_slice(&self, weight: u64, on_rq: bool) -> u64 {
        let nr = self.nr_running as u64 + (!on_rq) as u64;
        let slice = self.sched_period(nr);
        let mut total = self.load;
        if !on_rq {
            total.add(weight);
        }
        calc_delta(slice, weight, &total)
    }

    /// [`RunQueue::sched_slice`] in the virtual time of an entity of load weight `lw`.
    pub fn sched_vslice(&self, lw: &LoadWeight, on_rq: bool) -> u64 {
        calc_delta_fair(self.sched_slice(lw.weight, on_rq), lw)
    }

    /// `place_entity` for an entity at `vr`: a new task (`new_task`, its weight; not yet
    /// accounted) starts one vslice after `min_vruntime` (START_DEBIT); a waking task gets at
    /// most half a latency (GENTLE_FAIR_SLEEPERS; else a full one) of credit before
    /// `min_vruntime`. Never moves an entity backwards: returns its new vruntime.
    pub(crate) fn place_vruntime(&self, vr_now: u64, new_task: Option<&LoadWeight>) -> u64 {
        let mut vr = self.min_vruntime;
        let initial = new_task.is_some();
        if let Some(lw) = new_task.filter(|_| self.features.contains(Features::START_DEBIT)) {
            vr = vr.wrapping_add(self.sched_vslice(lw, false));
        }
        if !initial {
            let mut thresh = self.tunables.latency_ns;
            if self.features.contains(Features::GENTLE_FAIR_SLEEPERS) {
                thresh >>= 1;
            }
            vr = vr.wrapping_sub(thresh);
        }
        max_vruntime(vr_now, vr)
    }

    /// [`RunQueue::place_vruntime`] of a waking entity, in its cell.
    fn place_entity(&self, e: &EntityCell) {
        e.set_vruntime(self.place_vruntime(e.vruntime(), None));
    }

    #[cfg_attr(target_pointer_width = "64", inline(always))]
    pub(crate) fn clear_buddies(&mut self, slot: SlotId) {
        for b in [&mut self.next, &mut self.last, &mut self.skip] {
            if *b == Some(slot) {
                *b = None;
            }
        }
    }

    /// `wakeup_preempt_entity`, from the current entity's vruntime `curr_vr`, a candidate
    /// `se`'s and `se`'s weight: −1 if `curr` is not ahead of `se`; 1 if it is ahead by more
    /// than `se`'s wakeup granularity; else 0.
    pub fn wakeup_preempt_vr(&self, curr_vr: u64, se_vr: u64, se_load: &LoadWeight) -> i32 {
        let vdiff = curr_vr.wrapping_sub(se_vr) as i64;
        if vdiff <= 0 {
            return -1;
        }
        if vdiff as u64 > calc_delta_fair(self.tunables.wakeup_granularity_ns, se_load) {
            1
        } else {
            0
        }
    }

    /// Requests a reschedule of this CPU.
    pub fn resched_curr(&mut self) {
        self.need_resched = true;
    }

    /// Reweights a task parked (asleep) off this runqueue whose blocked load is still in
    /// this runqueue's sums.
    pub(crate) fn reweight_parked(&mut self, se: &mut Entity, nice: Nice) {
        let eevdf = self.eevdf();
        let moved = reweight_entity(&mut self.avg, se, nice, eevdf);
        self.pelt_slack.moved(moved, 0, 0);
    }
}

/// SCHED_IDLE tasks are never favoured as buddies.
fn buddy_allowed(policy: Policy) -> bool {
    policy != Policy::Idle
}

/// Changes an entity's weight, moving its load contribution in `rq_avg` (if attached) from
/// the old weight to the new one, as v5.7's `reweight_entity`: the entity's signals are
/// taken as they stand, not brought up to date first (a sleeping task's are not).
///
/// Returns what the move may cost the runqueue's `load_avg`/`load_sum` consistency, in the
/// units of `PeltSlack::moved` (see `RunQueue::check`): the old and new
/// `load_avg`, plus the lag of the old one behind its sum. An entity's `load_avg` is
/// recomputed only when its `load_sum` crosses a period boundary (or rebuilt from it at
/// attach); since then `load_sum` has gained at most one unit per unit of `period_contrib`,
/// so `w_old · load_sum` can exceed `load_avg · divider` by up to `w_old · period_contrib`.
/// The runqueue's own average may already hold that gain (it recomputed at a boundary the
/// parked entity did not see), so taking out the stale `load_avg` with the full sum leaves
/// the two apart by as much until the runqueue's next boundary, as in Linux.
fn reweight_entity(rq_avg: &mut pelt::SchedAvg, se: &mut Entity, nice: Nice, eevdf: bool) -> u64 {
    #[cfg(feature = "eevdf")]
    let old_weight = se.weight();
    let attached = se.pelt_attached;
    let old_avg = se.avg.load_avg;
    // `ceil(w_old · period_contrib / 1024)`: the lag bound in `moved` units (the check
    // scales `moved` by 1024 / its smallest divider).
    let lag = (se.weight() * se.avg.period_contrib as u64).div_ceil(1024);
    if attached {
        let w = se.weight();
        // dequeue_load_avg
        rq_avg.load_avg = rq_avg.load_avg.saturating_sub(se.avg.load_avg);
        rq_avg.load_sum = rq_avg.load_sum.saturating_sub(w * se.avg.load_sum);
    }
    se.nice = nice;
    let w = se.weight();
    let divider = se.avg.divider();
    se.avg.load_avg = w * se.avg.load_sum / divider;
    if attached {
        rq_avg.load_avg += se.avg.load_avg;
        rq_avg.load_sum += w * se.avg.load_sum;
    }
    #[cfg(feature = "eevdf")]
    {
        // EEVDF: the same virtual service owed, in the new weight's virtual time.
        let vlag = (se.vlag as i128 * old_weight as i128 / w.max(1) as i128) as i64;
        if eevdf && !se.on_rq {
            // Off the runqueue, its vruntime moves by as much, so that it still marks where
            // the average stood when it left (a sleeper's debt is paid off from there).
            se.vruntime = se.vruntime.wrapping_add(se.vlag.wrapping_sub(vlag) as u64);
        }
        se.vlag = vlag;
    }
    #[cfg(not(feature = "eevdf"))]
    let _ = eevdf;
    old_avg + se.avg.load_avg + lag
}
