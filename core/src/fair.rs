//! The fair class on one runqueue (docs/linux-v5.7.md §1): update_curr, enqueue/dequeue,
//! the pick and the switch, tick and wakeup preemption, yield, reweighting, and when PELT is
//! updated along the way (docs/linux-v5.7.md §2).
//!
//! What CFS and EEVDF decide differently — placement, the pick, the preemption checks, what
//! a dequeue keeps — is behind the seam, the trait in `policy.rs`, one module per policy
//! (`cfs.rs`, `eevdf.rs`) and the switch between them in `select.rs`; this file is what
//! they share, and calls the seam where they part.
//!
//! Everything here operates on one [`RunQueue`] and the entities of the tasks attached to
//! it, reached through a [`Fair`] view (the runqueue plus the machine's entity pool); which
//! task is where, and locking, belong to the callers ([`crate::Smp`], which holds each
//! CPU's runqueue behind its lock and so owns the entities attached to it).

use bitflags::bitflags;

mod cfs;
mod eevdf;
mod policy;
// (`policy!`, the seam's dispatch, is a macro: declared before its use below.)
#[macro_use]
mod select;
#[cfg(feature = "groups")]
mod hier;
#[cfg(feature = "groups")]
mod hier_check;
#[cfg(feature = "groups")]
mod hier_pelt;
#[cfg(feature = "groups")]
mod throttle;
mod view;

use self::view::buddy_allowed;
pub use self::view::{DequeueFlags, EnqueueFlags, Fair, WakeFlags};

use crate::entities::{EntityCell, Pool};
use crate::features::{Features, RunnableInit};
use crate::pelt;
use crate::runqueue::{RunQueue, SlotId};
use crate::task::{Entity, Policy, TaskId};
use crate::timeline::vruntime_before;
use crate::weights::{calc_delta, calc_delta_fair, LoadWeight, Nice};

bitflags! {
    /// What an `update_load_avg` does besides aging the entity and its runqueue.
    #[derive(Debug, Clone, Copy, PartialEq, Eq)]
    struct PeltFlags: u8 {
        /// The entity is not aged (a new task's signals are attached as initialised).
        const SKIP_AGE_LOAD = 1 << 0;
        /// A detached entity is attached to the runqueue.
        const DO_ATTACH = 1 << 1;
        /// A group level whose signals decayed passes the change on to its group's load
        /// (`update_tg_load_avg`); an attach always does.
        const UPDATE_TG = 1 << 2;
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

/// What [`RunQueue::ent_in`] reads for a slot that holds no task (a core bug the invariant
/// checker reports): zeros, harmless values. Only read, never written.
static MISSING: EntityCell = EntityCell::new();

impl<const Q: usize> RunQueue<Q> {
    /// The fair class's view of this runqueue with the machine's entity pool.
    pub fn fair<'p>(&mut self, pool: Pool<'p>) -> Fair<'_, 'p, Q> {
        Fair {
            rq: self,
            pool,
            #[cfg(feature = "groups")]
            levels: &mut [],
            #[cfg(feature = "groups")]
            level: 0,
        }
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
    /// The entity cell of the task at `slot` (or, with groups, of the group entity there).
    #[inline]
    pub fn entity(&self, slot: SlotId) -> Option<&'p EntityCell> {
        let task = self.rq.entity_in(self.pool, slot);
        // (No task there: with groups, a group entity's slot is the one other kind; tested
        // off the tasks' path.)
        #[cfg(feature = "groups")]
        if task.is_none() {
            return self.group_entity(slot);
        }
        task
    }

    /// The group entity at `slot`, if it is a group slot.
    #[cfg(feature = "groups")]
    #[cold]
    #[inline(never)]
    fn group_entity(&self, slot: SlotId) -> Option<&'p EntityCell> {
        if (slot as usize) < self.rq.task_slots() {
            return None;
        }
        self.pool.group_cell(self.rq.cpu, Q - slot as usize)
    }

    /// Like [`Fair::entity`] for a slot the caller got from this runqueue, to read.
    pub(crate) fn ent(&self, slot: SlotId) -> &'p EntityCell {
        self.entity(slot).unwrap_or(&MISSING)
    }

    /// Whether the fair class works on one level (no groups): every entity is a task, and
    /// the task operations are the entity operations on the CPU's runqueue.
    ///
    /// The entity operations take `FLAT`: `true` where the caller already knows the machine
    /// is flat (the task operations' flat branch), which compiles the group tests out of
    /// the hot paths; `false` tests at run time, as the hierarchy's walks need.
    #[inline(always)]
    pub(crate) fn flat(&self) -> bool {
        #[cfg(feature = "groups")]
        return self.levels.is_empty();
        #[cfg(not(feature = "groups"))]
        true
    }

    /// `task_h_load`: the load the task at `slot` carries on this CPU, what the balancer
    /// moves with it — its load average, or with groups the part of the CPU's load its
    /// group hierarchy gives it.
    #[inline]
    pub fn task_h_load(&self, slot: SlotId) -> u64 {
        #[cfg(feature = "groups")]
        if !self.flat() {
            return self.task_h_load_h(slot);
        }
        self.ent(slot).load_avg()
    }

    /// Whether `slot` holds a task (not a group entity).
    #[inline(always)]
    pub(crate) fn is_task_slot(&self, slot: SlotId) -> bool {
        (slot as usize) < self.rq.task_slots()
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
        self.rq.timeline_insert(slot, vr, se);
        policy!(self.queued(vr, se));
    }

    /// Takes the entity at `slot` off the timeline (and out of the average's sums, with the
    /// vruntime it was queued with).
    #[cfg_attr(target_pointer_width = "64", inline)]
    fn tl_remove(&mut self, slot: SlotId, se: &EntityCell) {
        policy!(self.unqueuing(slot, se));
        let _ = self.timeline.remove(slot as usize);
    }

    /// Charges the current task for the time since it was last charged: its runtime grows
    /// by the wall delta, its vruntime by the delta scaled by NICE_0_LOAD / weight; then
    /// `min_vruntime` follows.
    pub fn update_curr(&mut self) {
        #[cfg(feature = "groups")]
        if !self.flat() {
            let Some(c) = self.curr else { return };
            let l = self.level_of(c);
            return self.at(l, |f| {
                f.update_curr_vw(false);
            });
        }
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
        #[cfg(feature = "groups")]
        if self.level != 0 {
            self.account_runtime(delta);
        }
        policy!(self.charged(se));
        self.min_vruntime_with(se.on_rq().then_some(vr));
    }

    /// `update_min_vruntime`: `min_vruntime` = max(itself, min(the runnable current entity's
    /// vruntime `curr`, the leftmost's)), so it only moves forward. The leftmost's vruntime is
    /// its timeline key (they are equal while it is queued).
    #[cfg_attr(target_pointer_width = "64", inline)]
    fn min_vruntime_with(&mut self, curr: Option<u64>) {
        let mut vr = curr.unwrap_or(self.cfs.min_vruntime);
        if let Some(lv) = self.timeline.leftmost().and_then(|l| self.timeline.vruntime_of(l)) {
            vr = if curr.is_none() { lv } else { min_vruntime(vr, lv) };
        }
        let old = self.cfs.min_vruntime;
        self.cfs.min_vruntime = max_vruntime(old, vr);
        if self.cfs.min_vruntime != old {
            policy!(self.min_vruntime_moved(old));
        }
    }

    /// `update_load_avg` for an entity here, whose cell the caller holds, and for the
    /// runqueue: ages the entity (if it is attached), updates the runqueue's signals, and
    /// attaches a detached entity if asked; on a group level, then passes the level's load
    /// on to its group's (after an attach, or a decay with [`PeltFlags::UPDATE_TG`]).
    #[cfg_attr(target_pointer_width = "64", inline(always))]
    fn load_avg_with<const FLAT: bool>(&mut self, slot: SlotId, se: &EntityCell, is_curr: bool, flags: PeltFlags) {
        let now = self.clock_pelt();
        let attached = se.pelt_attached();
        // (With groups, a group entity's signals and what they carry up; a flat machine's
        // task operations compile these tests out.)
        #[cfg(feature = "groups")]
        let flat = FLAT || self.flat();
        #[cfg(feature = "groups")]
        let group_entity = !flat && !self.is_task_slot(slot);
        #[cfg(not(feature = "groups"))]
        let (group_entity, _) = (false, slot);
        if attached && !flags.contains(PeltFlags::SKIP_AGE_LOAD) {
            #[cfg(feature = "groups")]
            if group_entity {
                self.update_group_entity_pelt(slot, se, now, is_curr);
            } else {
                se.update_pelt(now, se.on_rq(), is_curr);
            }
            #[cfg(not(feature = "groups"))]
            se.update_pelt(now, se.on_rq(), is_curr);
        }
        let attach = flags.contains(PeltFlags::DO_ATTACH) && !attached;
        #[cfg(feature = "groups")]
        let to_group = if (!flat && self.level != 0) || group_entity {
            let mut decayed = self.update_level_avg();
            if attached && group_entity {
                decayed |= self.propagate_entity(slot, se);
            }
            attach || (decayed && flags.contains(PeltFlags::UPDATE_TG))
        } else {
            self.update_cfs_avg();
            false
        };
        #[cfg(not(feature = "groups"))]
        {
            let _ = group_entity;
            self.update_cfs_avg();
        }
        // (Tested here: an enqueue of an attached task, the common case, makes no call.)
        if attach {
            self.attach_avg_with(se);
        }
        #[cfg(feature = "groups")]
        if to_group {
            self.update_tg_load_avg();
        }
    }

    /// Adds a detached entity's PELT signals to the runqueue's ([`Fair::load_avg_with`]
    /// calls it for a detached one only).
    fn attach_avg_with(&mut self, se: &EntityCell) {
        let w = se.weight();
        let mut avg = se.avg();
        self.cfs.avg.attach(&mut avg, w);
        se.set_avg(avg);
        se.set_pelt_attached(true);
        self.cfs.pelt_slack.moved(avg.load_avg, avg.runnable_avg, avg.util_avg);
        #[cfg(feature = "groups")]
        self.add_tg_cfs_propagate(avg.load_sum as i64);
    }

    /// New-task PELT initialisation on this CPU (`post_init_entity_util_avg`): util from
    /// half the spare capacity, runnable per [`RunnableInit`], then attach (with groups, the
    /// levels above then take it: `attach_entity_cfs_rq`).
    pub(crate) fn post_init_entity(&mut self, slot: SlotId) {
        #[cfg(feature = "groups")]
        if !self.flat() {
            let l = self.level_of(slot);
            self.at(l, |f| f.post_init_here(slot));
            return self.propagate_up(l);
        }
        self.post_init_here(slot);
    }

    /// [`Fair::post_init_entity`] on the level the fair class works on.
    fn post_init_here(&mut self, slot: SlotId) {
        let cpu_scale = self.capacity_orig;
        let runnable_init = self.tunables.runnable_init;
        let rq_avg = self.cfs.avg;
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
        self.load_avg_with::<false>(slot, se, is_curr, PeltFlags::SKIP_AGE_LOAD | PeltFlags::DO_ATTACH);
    }

    /// Accounts and queues the task at `slot` (`enqueue_task_fair`), and with groups the
    /// group entities above it that were not queued. The task must be attached here and not
    /// yet accounted.
    #[inline]
    pub fn enqueue(&mut self, slot: SlotId, flags: EnqueueFlags) {
        #[cfg(feature = "groups")]
        if !self.flat() {
            return self.enqueue_task_h(slot, flags);
        }
        self.enqueue_entity::<true>(slot, flags);
    }

    /// `enqueue_entity`: accounts and queues the entity at `slot` at the level the fair
    /// class works on (with no groups, all of `enqueue_task_fair`).
    fn enqueue_entity<const FLAT: bool>(&mut self, slot: SlotId, flags: EnqueueFlags) {
        let flat = FLAT || self.flat();
        let Some(se) = self.entity(slot) else { return };
        if se.on_rq() {
            return;
        }
        // (A task attached here by `insert` takes this CPU now.)
        se.set_cpu(self.rq.cpu);
        // util_est first, before PELT sees the task (the hierarchy's walk does it at the top).
        if flat && self.features.contains(Features::UTIL_EST) {
            pelt::util_est_add(&mut self.cfs.avg.util_est, &se.util_est_parts());
        }
        let is_curr = self.curr == Some(slot);
        // The policy places the current entity before its pending runtime is charged, and
        // any entity after the current one was (EEVDF's placement needs the current one's
        // vruntime and weight, which CFS's does not).
        let curr = if is_curr {
            policy!(self.place_current(se, flags));
            self.charge_curr(se);
            None
        } else {
            let want = self.eevdf();
            self.update_curr_vw(want)
        };
        if is_curr {
            policy!(self.place(se, flags, curr, true));
        }
        self.load_avg_with::<FLAT>(slot, se, is_curr, PeltFlags::UPDATE_TG | PeltFlags::DO_ATTACH);
        #[cfg(feature = "groups")]
        if !flat {
            self.se_update_runnable(slot);
            self.update_cfs_group(slot);
        }
        // Any other entity is placed with the weight it will run with: a group entity's is
        // brought up to date just above (EEVDF's lag scaling and deadline use it).
        if !is_curr {
            policy!(self.place(se, flags, curr, false));
        }
        // account_entity_enqueue
        let policy = se.policy();
        self.cfs.load.add(se.load().weight);
        self.cfs.nr_running += 1;
        #[cfg(feature = "groups")]
        {
            self.cfs.h_nr_running += 1;
        }
        self.cfs.idle_h_nr_running += (policy == Policy::Idle) as u32;
        if flat || self.is_task_slot(slot) {
            self.mru_push_head(slot);
        }
        if !is_curr {
            self.tl_insert(slot, se);
        }
        se.set_on_rq(true);
    }

    /// Unaccounts the task at `slot` (`dequeue_task_fair`), and with groups the group
    /// entities above it left with nothing queued. It stays attached (the current task keeps
    /// running until the next pick); a sleeping dequeue samples its util_est, any other
    /// normalises its vruntime for the trip to another runqueue.
    #[inline]
    pub fn dequeue(&mut self, slot: SlotId, flags: DequeueFlags) {
        #[cfg(feature = "groups")]
        if !self.flat() {
            return self.dequeue_task_h(slot, flags);
        }
        self.dequeue_entity::<true>(slot, flags);
    }

    /// `dequeue_entity`: unaccounts the entity at `slot` at the level the fair class works
    /// on (with no groups, all of `dequeue_task_fair`).
    fn dequeue_entity<const FLAT: bool>(&mut self, slot: SlotId, flags: DequeueFlags) {
        let flat = FLAT || self.flat();
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
        self.load_avg_with::<FLAT>(slot, se, is_curr, PeltFlags::UPDATE_TG);
        #[cfg(feature = "groups")]
        if !flat {
            self.se_update_runnable(slot);
        }
        self.clear_buddies(slot);
        policy!(self.dequeuing(se, flags, curr_vw, is_curr));
        if !is_curr {
            self.tl_remove(slot, se);
        }
        let policy = se.policy();
        self.cfs.load.sub(se.load().weight);
        self.cfs.nr_running -= 1;
        #[cfg(feature = "groups")]
        {
            self.cfs.h_nr_running -= 1;
        }
        self.cfs.idle_h_nr_running -= (policy == Policy::Idle) as u32;
        if flat || self.is_task_slot(slot) {
            self.mru_unlink(slot);
        }
        se.set_on_rq(false);
        if !flags.contains(DequeueFlags::SLEEP) {
            se.set_vruntime(se.vruntime().wrapping_sub(self.cfs.min_vruntime));
        }
        #[cfg(feature = "groups")]
        if !flat {
            self.update_cfs_group(slot);
        }
        if follow_min {
            self.min_vruntime_with(curr_vr);
        }
        // (The hierarchy's walk updates the estimate at the top.)
        if flat && self.features.contains(Features::UTIL_EST) {
            let capacity_orig = self.capacity_orig;
            let fastup = self.features.contains(Features::UTIL_EST_FASTUP);
            let mut ue = se.util_est_parts();
            pelt::util_est_sub(&mut self.cfs.avg.util_est, &ue);
            if flags.contains(DequeueFlags::SLEEP) {
                pelt::util_est_sample(&mut ue, se.util(), capacity_orig, fastup);
                se.set_util_est_parts(ue);
            }
        }
    }

    // ---- picking --------------------------------------------------------------------

    /// `pick_next_entity` with no current task: the policy's pick (CFS: the leftmost or a
    /// buddy; EEVDF: the eligible entity with the earliest deadline).
    pub fn pick_next_entity(&mut self) -> Option<SlotId> {
        policy!(self.pick())
    }

    /// Makes the task at `slot` current (`set_next_task_fair`): with groups, its group
    /// entities too, at every level above it.
    #[inline]
    pub fn set_next(&mut self, slot: SlotId) {
        #[cfg(feature = "groups")]
        if !self.flat() {
            return self.set_next_task_h(slot);
        }
        self.set_next_entity::<true>(slot);
    }

    /// `set_next_entity`: takes the picked entity off the timeline and makes it current,
    /// starting a new slice.
    fn set_next_entity<const FLAT: bool>(&mut self, slot: SlotId) {
        let flat = FLAT || self.flat();
        let Some(se) = self.entity(slot) else {
            self.curr = Some(slot);
            return;
        };
        let on_rq = se.on_rq();
        if on_rq {
            self.tl_remove(slot, se);
            let is_curr = self.curr == Some(slot);
            self.load_avg_with::<FLAT>(slot, se, is_curr, PeltFlags::UPDATE_TG);
        }
        self.rq.note_picked(se);
        se.set_exec_start(self.clock_task);
        se.set_prev_sum_exec_runtime(se.sum_exec_runtime());
        se.set_on_cpu(true);
        self.curr = Some(slot);
        // Only a runnable task belongs to the MRU list (a current task that already
        // blocked is made current again around a nice change, but stays out of it).
        if on_rq && (flat || self.is_task_slot(slot)) {
            self.mru_move_to_head(slot);
        }
    }

    /// The current task stops running (`put_prev_task_fair`): if still runnable it goes
    /// back on the timeline, and with groups so do its group entities. Returns its slot.
    #[inline]
    pub fn put_prev(&mut self) -> Option<SlotId> {
        #[cfg(feature = "groups")]
        if !self.flat() {
            return self.put_prev_task_h();
        }
        self.put_prev_entity::<true>()
    }

    /// `put_prev_entity`: the current entity of the level the fair class works on stops
    /// running; if still runnable it goes back on the timeline. Returns its slot.
    fn put_prev_entity<const FLAT: bool>(&mut self) -> Option<SlotId> {
        let prev = self.curr?;
        if let Some(se) = self.entity(prev) {
            if se.on_rq() {
                self.charge_curr(se);
                self.tl_insert(prev, se);
                self.load_avg_with::<FLAT>(prev, se, true, PeltFlags::empty());
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
        #[cfg(feature = "groups")]
        let (prev, next) = if self.flat() { self.pick_flat() } else { self.pick_task_h() };
        #[cfg(not(feature = "groups"))]
        let (prev, next) = self.pick_flat();
        if next.is_none() && prev.is_some() {
            self.note_idle_entry();
        }
        self.need_resched = false;
        if prev != next {
            self.switching_out = prev;
            self.nr_switches += 1;
        }
        (prev, next)
    }

    /// [`Fair::schedule_pick`]'s put and pick on one level.
    #[cfg_attr(target_pointer_width = "64", inline(always))]
    fn pick_flat(&mut self) -> (Option<SlotId>, Option<SlotId>) {
        let prev = self.put_prev_entity::<true>();
        let next = match policy!(self.keeps_cpu(prev)) {
            Some(p) => Some(p),
            None => self.pick_next_entity(),
        };
        if let Some(n) = next {
            self.set_next_entity::<true>(n);
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
    #[inline]
    pub fn task_tick(&mut self) {
        #[cfg(feature = "groups")]
        if !self.flat() {
            return self.task_tick_h();
        }
        let Some(c) = self.curr else {
            self.update_blocked_averages();
            return;
        };
        self.entity_tick::<true>(c);
    }

    /// `entity_tick` for the current entity `c` of the level the fair class works on.
    #[cfg_attr(target_pointer_width = "64", inline(always))]
    fn entity_tick<const FLAT: bool>(&mut self, c: SlotId) {
        let Some(se) = self.entity(c) else { return };
        self.charge_curr(se);
        self.load_avg_with::<FLAT>(c, se, true, PeltFlags::UPDATE_TG);
        #[cfg(feature = "groups")]
        if !(FLAT || self.flat()) {
            self.update_cfs_group(c);
        }
        policy!(self.tick(c, se));
    }

    /// `check_preempt_curr` for a fair task that was just enqueued here.
    pub(crate) fn check_preempt_wakeup(&mut self, wakee: SlotId, flags: WakeFlags) {
        #[cfg(feature = "groups")]
        if !self.flat() {
            return self.check_preempt_wakeup_h(wakee, flags);
        }
        let Some(curr) = self.curr else {
            // The idle loop is always preempted.
            self.resched_curr();
            return;
        };
        if curr == wakee {
            return;
        }
        let scale = self.cfs.nr_running as u64 >= self.tunables.nr_latency;
        let Some(w) = self.entity(wakee) else { return };
        let wakee_allowed = buddy_allowed(w.policy());
        let mut next_marked = false;
        if self.features.contains(Features::NEXT_BUDDY) && scale && !flags.contains(WakeFlags::FORK) {
            if wakee_allowed {
                self.cfs.next = Some(wakee);
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
        } else {
            policy!(self.wakeup_preempts(wakee, w, c, !next_marked && wakee_allowed))
        };
        if !preempt {
            return;
        }
        self.resched_curr();
        if !c.on_rq() {
            return;
        }
        if self.features.contains(Features::LAST_BUDDY) && scale && buddy_allowed(cp) {
            self.cfs.last = Some(curr);
        }
    }

    /// `yield_task_fair`: the current task steps aside once: it is charged (unless batch)
    /// and marked as the skip buddy; the caller then reschedules.
    pub fn yield_curr(&mut self) {
        #[cfg(feature = "groups")]
        if !self.flat() {
            return self.yield_task_h();
        }
        let Some(c) = self.curr else { return };
        let Some(se) = self.entity(c) else { return };
        // A current task that already blocked or exited has nothing to yield.
        if self.cfs.h_nr_running() <= 1 || !se.on_rq() {
            return;
        }
        self.clear_buddies(c);
        let policy = se.policy();
        if policy != Policy::Batch {
            self.charge_curr(se);
        }
        policy!(self.yielded(c, se, policy));
    }

    /// `task_fork_fair`: gives a new entity its starting vruntime on this runqueue — the
    /// parent's (the current task's) vruntime or one vslice after `min_vruntime`,
    /// whichever is later — and returns it normalised (relative to `min_vruntime`) for
    /// enqueueing on whichever CPU it is placed.
    pub(crate) fn fork_vruntime(&mut self, child: &mut Entity) {
        #[cfg(feature = "groups")]
        if !self.flat() {
            return self.fork_vruntime_h(child);
        }
        self.fork_vruntime_here(child);
    }

    /// [`Fair::fork_vruntime`] on the level the fair class works on.
    fn fork_vruntime_here(&mut self, child: &mut Entity) {
        child.forget_lag();
        self.update_curr_vw(false);
        let start = match self.curr {
            Some(c) => self.ent(c).vruntime(),
            None => self.cfs.min_vruntime,
        };
        child.vruntime = self.place_vruntime(start, Some(&child.load()));
        // (EEVDF places the child by lag, at the average, whatever was swapped: Linux 6.6
        // dropped the swap with it.)
        if self.tunables.child_runs_first && !self.eevdf() {
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
        child.vruntime = child.vruntime.wrapping_sub(self.cfs.min_vruntime);
    }

    /// `reweight_task`: gives the entity at `slot` a new nice value. It must not be
    /// accounted (the caller dequeues with SAVE around it, if `saved`: else it blocked and
    /// is still switching out); its blocked PELT load is re-expressed with the new weight.
    fn reweight(&mut self, slot: SlotId, nice: Nice, saved: bool) {
        #[cfg(feature = "groups")]
        if !self.flat() {
            let l = self.level_of(slot);
            return self.at(l, |f| f.reweight_here(slot, nice, saved));
        }
        self.reweight_here(slot, nice, saved);
    }

    /// [`Fair::reweight`] on the level the fair class works on.
    fn reweight_here(&mut self, slot: SlotId, nice: Nice, saved: bool) {
        let Some(cell) = self.entity(slot) else { return };
        let mut se = cell.get();
        if saved {
            let (old_weight, eevdf) = (se.weight(), self.eevdf());
            let moved = reweight_entity(&mut self.cfs.avg, &mut se, nice, eevdf);
            policy!(self.reweighted(&mut se, old_weight));
            self.cfs.pelt_slack.moved(moved, 0, 0);
        } else {
            // (Blocked: as a parked task, its deadline absolute.)
            self.rq.reweight_parked(&mut se, nice);
        }
        cell.put(&se);
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
        self.reweight(slot, nice, queued);
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
        #[cfg(feature = "groups")]
        if !self.flat() {
            let l = self.level_of(slot);
            self.at(l, |f| {
                f.detach_avg(se);
                f.update_tg_load_avg();
            });
            // The levels above see the load leave at once (`propagate_entity_cfs_rq`).
            self.propagate_up(l);
        } else {
            self.detach_avg(se);
        }
        #[cfg(not(feature = "groups"))]
        self.detach_avg(se);
        se.set_exec_start(0);
        self.take(slot)
    }

    /// Takes an attached entity's PELT signals out of the level's at once.
    fn detach_avg(&mut self, se: &EntityCell) {
        if se.pelt_attached() {
            let (avg, w) = (se.avg(), se.weight());
            self.cfs.avg.detach(&avg, w);
            se.set_pelt_attached(false);
            self.cfs.pelt_slack.moved(avg.load_avg, avg.runnable_avg, avg.util_avg);
            #[cfg(feature = "groups")]
            self.add_tg_cfs_propagate(-(avg.load_sum as i64));
        }
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
        let nr = self.cfs.nr_running as u64 + (!on_rq) as u64;
        let slice = self.sched_period(nr);
        let mut total = self.cfs.load;
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
        let mut vr = self.cfs.min_vruntime;
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

    #[cfg_attr(target_pointer_width = "64", inline(always))]
    pub(crate) fn clear_buddies(&mut self, slot: SlotId) {
        for b in [&mut self.cfs.next, &mut self.cfs.last, &mut self.cfs.skip] {
            if *b == Some(slot) {
                *b = None;
            }
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
        #[cfg(feature = "eevdf")]
        let (old_weight, left) = (se.weight(), se.deadline.wrapping_sub(se.vruntime) as i64);
        let moved = reweight_entity(&mut self.cfs.avg, se, nice, eevdf);
        // EEVDF: what is left of the request it slept in (which a wakeup still owing goes on
        // with) follows its vruntime, and takes as long in wall time at the new weight.
        #[cfg(feature = "eevdf")]
        if eevdf {
            let left = crate::eevdf::reweighted(left, old_weight, se.weight());
            se.deadline = se.vruntime.wrapping_add(left as u64);
        }
        self.cfs.pelt_slack.moved(moved, 0, 0);
    }
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
    se.rescale_lag(old_weight, eevdf);
    old_avg + se.avg.load_avg + lag
}
