//! The fair class over task groups (the `groups` feature; docs/groups.md): Linux's
//! `CONFIG_FAIR_GROUP_SCHED` walks, each task operation done at every level from the task's
//! group up to the CPU's runqueue.
//!
//! A level is a runqueue: the CPU's own (level 0) or one group's on this CPU (its
//! [`GroupRq`]). The entity operations in `fair.rs` work on the CPU's runqueue; to work on a
//! group's, [`Fair::at`] lends that group's accounting, tree and current entity to the CPU's
//! runqueue for the call and takes them back after, so the entity operations are the same
//! code at every level. Outside `at`, the runqueue holds the root level with `curr` naming
//! the running task (what the rest of the machine reads); the root level's own current
//! entity, the running task's top group entity, is kept in `top_curr`.
//!
//! [`GroupRq`]: crate::group::level::GroupRq

use heapless::Vec;

use super::view::buddy_allowed;
use super::{DequeueFlags, EnqueueFlags, Fair, PeltFlags, WakeFlags};
use crate::entities::EntityCell;
use crate::features::Features;
use crate::group::level::Level;
use crate::group::tree::MAX_GROUP_DEPTH;
use crate::pelt;
use crate::runqueue::{CfsRq, SlotId};
use crate::task::{Entity, Policy};

/// An entity's way up: (slot, level it is queued on) for it and each group entity above.
type Path = Vec<(SlotId, Level), { MAX_GROUP_DEPTH as usize + 1 }>;

/// Which buddy mark.
#[derive(Clone, Copy)]
enum Buddy {
    Next,
    Last,
    Skip,
}

impl<'p, const Q: usize> Fair<'_, 'p, Q> {
    // ---- levels ---------------------------------------------------------------------

    /// The slot of group `l`'s entity on this CPU (`l` ≥ 1).
    #[inline(always)]
    pub(super) fn group_slot(l: Level) -> SlotId {
        (Q - l as usize) as SlotId
    }

    /// The group whose entity is at `slot`, if it holds a group entity (`group_cfs_rq`).
    #[inline(always)]
    pub(crate) fn my_q(&self, slot: SlotId) -> Option<Level> {
        (!self.is_task_slot(slot)).then(|| (Q - slot as usize) as Level)
    }

    /// Group `l`'s parent level.
    #[inline(always)]
    pub(super) fn parent(&self, l: Level) -> Level {
        self.pool.shared(l as usize).map_or(0, |g| g.parent())
    }

    /// The level the entity at `slot` is queued on (`cfs_rq_of`).
    pub(crate) fn level_of(&self, slot: SlotId) -> Level {
        match self.my_q(slot) {
            Some(g) => self.parent(g),
            None => self.level_of_group(self.ent(slot).group()),
        }
    }

    /// The entity above one queued at level `l` (`parent_entity`): `l`'s group entity on
    /// `l`'s parent level; `None` at the root.
    #[inline(always)]
    pub(super) fn up(&self, l: Level) -> Option<(SlotId, Level)> {
        (l != 0).then(|| (Self::group_slot(l), self.parent(l)))
    }

    /// How many levels lie above level `l` (0 for the root).
    pub(super) fn depth(&self, mut l: Level) -> usize {
        let mut d = 0;
        while l != 0 && d <= MAX_GROUP_DEPTH as usize {
            l = self.parent(l);
            d += 1;
        }
        d
    }

    /// The entity at `slot` and the group entities above it, each with its level.
    pub(super) fn path(&self, slot: SlotId) -> Path {
        let mut p = Path::new();
        let mut cur = Some((slot, self.level_of(slot)));
        while let Some((s, l)) = cur {
            if p.push((s, l)).is_err() {
                break;
            }
            cur = self.up(l);
        }
        p
    }

    /// Exchanges the runqueue's top level with level `l`'s accounting, tree and current
    /// entity (at the root: the running task with the top level's current entity).
    fn swap_level(&mut self, l: Level) {
        if l == 0 {
            core::mem::swap(&mut self.rq.curr, &mut self.rq.top_curr);
            return;
        }
        let Some(g) = self.levels.get_mut(l as usize - 1) else { return };
        core::mem::swap(&mut self.rq.curr, &mut g.curr);
        core::mem::swap(&mut self.rq.cfs, &mut g.cfs);
        self.rq.timeline.swap_head(&mut g.head);
    }

    /// `cfs_rq_clock_pelt` of the working level: the CPU's PELT clock, or a group level's,
    /// which stands still while its hierarchy is throttled ([`LevelClock`]). Every PELT
    /// update of the fair class reads it (this shadows the runqueue's clock).
    ///
    /// [`LevelClock`]: crate::group::level::LevelClock
    #[inline(always)]
    pub(crate) fn clock_pelt(&self) -> u64 {
        let cpu = self.rq.clock_pelt();
        match self.level.checked_sub(1).and_then(|i| self.levels.get(i as usize)) {
            Some(g) => g.clock.read(cpu),
            None => cpu,
        }
    }

    /// The working level's own signals brought up to its clock (this shadows the runqueue's
    /// `update_cfs_avg`, which reads the CPU's).
    #[inline(always)]
    pub(crate) fn update_cfs_avg(&mut self) -> bool {
        let now = self.clock_pelt();
        self.rq.update_cfs_avg_at(now)
    }

    /// Runs `f` with the fair class working on level `l`: the runqueue's `cfs`, timeline
    /// and `curr` are level `l`'s while `f` runs. Not nested.
    pub(crate) fn at<R>(&mut self, l: Level, f: impl FnOnce(&mut Self) -> R) -> R {
        debug_assert_eq!(self.level, 0, "levels are not nested");
        self.swap_level(l);
        self.level = l;
        let r = f(self);
        self.level = 0;
        self.swap_level(l);
        r
    }

    /// The next and last buddies of the level the entity at `slot` is queued on
    /// (`cfs_rq_of(se)->next`, `->last`), outside [`Fair::at`].
    pub(crate) fn buddies_of(&self, slot: SlotId) -> (Option<SlotId>, Option<SlotId>) {
        let c = match self.level_of(slot) {
            0 => &self.rq.cfs,
            l => &self.levels[l as usize - 1].cfs,
        };
        (c.next, c.last)
    }

    /// Level `l`'s accounting, outside [`Fair::at`].
    pub(super) fn cfs_of(&mut self, l: Level) -> &mut CfsRq {
        match l {
            0 => &mut self.rq.cfs,
            l => &mut self.levels[l as usize - 1].cfs,
        }
    }

    // ---- the task operations, level by level ------------------------------------------

    /// `enqueue_task_fair`: the task's entity and each group entity above it not yet queued
    /// are enqueued; the levels above those only count the task and update their signals.
    #[inline(never)]
    pub(super) fn enqueue_task_h(&mut self, slot: SlotId, flags: EnqueueFlags) {
        let Some(se) = self.entity(slot) else { return };
        if se.on_rq() {
            return;
        }
        let idle = (se.policy() == Policy::Idle) as u32;
        if self.features.contains(Features::UTIL_EST) {
            pelt::util_est_add(&mut self.rq.cfs.avg.util_est, &se.util_est_parts());
        }
        let mut flags = flags;
        let mut cur = Some((slot, self.level_of(slot)));
        while let Some((s, l)) = cur {
            if self.ent(s).on_rq() {
                break;
            }
            let this = self.group_enqueue_flags(s, flags);
            self.at(l, |f| f.enqueue_entity::<false>(s, this));
            if s != slot {
                // (The entity's own count went by its policy; a group entity's task is idle.)
                self.cfs_of(l).idle_h_nr_running += idle;
            }
            self.check_enqueue_throttle(l);
            // A throttled level keeps its tasks from the levels above.
            if self.is_throttled(l) {
                return;
            }
            flags = EnqueueFlags::WAKEUP;
            cur = self.up(l);
        }
        while let Some((s, l)) = cur {
            self.at(l, |f| {
                f.refresh(s);
                f.cfs.h_nr_running += 1;
                f.cfs.idle_h_nr_running += idle;
            });
            if self.is_throttled(l) {
                return;
            }
            cur = self.up(l);
        }
    }

    /// `dequeue_task_fair`: the task's entity is dequeued, and each group entity above whose
    /// runqueue is left with nothing queued; the levels above only stop counting the task.
    /// A task going to sleep makes its still busy group the next buddy above it.
    #[inline(never)]
    pub(super) fn dequeue_task_h(&mut self, slot: SlotId, flags: DequeueFlags) {
        let Some(se) = self.entity(slot) else { return };
        if !se.on_rq() {
            return;
        }
        let idle = (se.policy() == Policy::Idle) as u32;
        let sleep = flags.contains(DequeueFlags::SLEEP);
        let mut flags = flags;
        let mut cur = Some((slot, self.level_of(slot)));
        while let Some((s, l)) = cur {
            self.at(l, |f| f.dequeue_entity::<false>(s, flags));
            if s != slot {
                let c = self.cfs_of(l);
                c.idle_h_nr_running = c.idle_h_nr_running.saturating_sub(idle);
            }
            self.return_runtime(l);
            if self.is_throttled(l) {
                cur = None;
                break;
            }
            cur = self.up(l);
            if self.cfs_of(l).load.weight != 0 {
                if let Some((p, _)) = cur.filter(|_| sleep && !self.throttled_hierarchy(l)) {
                    self.set_buddy_up(p, Buddy::Next);
                }
                break;
            }
            flags |= DequeueFlags::SLEEP;
        }
        while let Some((s, l)) = cur {
            self.at(l, |f| {
                f.refresh(s);
                f.cfs.h_nr_running = f.cfs.h_nr_running.saturating_sub(1);
                f.cfs.idle_h_nr_running = f.cfs.idle_h_nr_running.saturating_sub(idle);
            });
            if self.is_throttled(l) {
                break;
            }
            cur = self.up(l);
        }
        if self.features.contains(Features::UTIL_EST) {
            let capacity_orig = self.capacity_orig;
            let fastup = self.features.contains(Features::UTIL_EST_FASTUP);
            let mut ue = se.util_est_parts();
            pelt::util_est_sub(&mut self.rq.cfs.avg.util_est, &ue);
            if sleep {
                pelt::util_est_sample(&mut ue, se.util(), capacity_orig, fastup);
                se.set_util_est_parts(ue);
            }
        }
    }

    /// `set_next_task_fair`: the task and every group entity above it become their levels'
    /// current entities.
    #[inline(never)]
    pub(super) fn set_next_task_h(&mut self, slot: SlotId) {
        for (s, l) in self.path(slot) {
            self.at(l, |f| {
                f.set_next_entity::<false>(s);
                // A level out of runtime takes some now, or asks its task to stop.
                f.account_runtime(0);
            });
        }
        self.rq.curr = Some(slot);
    }

    /// `put_prev_task_fair`: the running task and every group entity above it stop being
    /// current, and go back on their trees if still runnable. Returns the task's slot.
    #[inline(never)]
    pub(super) fn put_prev_task_h(&mut self) -> Option<SlotId> {
        let task = self.rq.curr?;
        for (_, l) in self.path(task) {
            self.at(l, |f| {
                f.put_prev_entity::<false>();
            });
            // A level out of runtime is throttled as its entity is put back.
            self.check_runtime(l);
        }
        self.rq.curr = None;
        Some(task)
    }

    /// The put and the pick of `pick_next_task_fair`: the running task is put back, then
    /// the pick goes down from the top level, each picked group entity made current and its
    /// runqueue picked from, until a task. Returns (prev, next).
    #[inline(never)]
    pub(super) fn pick_task_h(&mut self) -> (Option<SlotId>, Option<SlotId>) {
        let prev_path = self.rq.curr.map(|c| self.path(c)).unwrap_or_default();
        let prev = self.put_prev_task_h();
        let mut l: Level = 0;
        let mut next = None;
        for _ in 0..=MAX_GROUP_DEPTH {
            let was = prev_path.iter().find(|&&(_, pl)| pl == l).map(|&(s, _)| s);
            let pick = self.at(l, |f| match policy!(f.keeps_cpu(was)) {
                Some(p) => Some(p),
                None => f.pick_next_entity(),
            });
            let Some(s) = pick else { break };
            self.at(l, |f| f.set_next_entity::<false>(s));
            match self.my_q(s) {
                Some(g) => l = g,
                None => {
                    next = Some(s);
                    break;
                }
            }
        }
        self.rq.curr = next;
        (prev, next)
    }

    /// `task_tick_fair`: `entity_tick` at every level of the running task's path; an idle
    /// CPU decays its blocked load at every level instead.
    #[inline(never)]
    pub(super) fn task_tick_h(&mut self) {
        let Some(c) = self.rq.curr else {
            self.update_blocked_averages_h();
            return;
        };
        for (s, l) in self.path(c) {
            self.at(l, |f| f.entity_tick::<false>(s));
        }
    }

    /// `check_preempt_wakeup` across groups: the wakee and the running task are compared at
    /// the first level they share (`find_matching_se`), by the entities they have there.
    #[inline(never)]
    pub(super) fn check_preempt_wakeup_h(&mut self, wakee: SlotId, flags: WakeFlags) {
        let Some(curr) = self.rq.curr else {
            self.resched_curr();
            return;
        };
        if curr == wakee {
            return;
        }
        // A wakee whose group is throttled (it may have been attached to one) waits for it.
        if self.throttled_hierarchy(self.level_of(wakee)) {
            return;
        }
        let lc = self.level_of(curr);
        let scale = self.cfs_of(lc).nr_running as u64 >= self.tunables.nr_latency;
        let (w, c) = (self.ent(wakee), self.ent(curr));
        let wakee_allowed = buddy_allowed(w.policy());
        let mut next_marked = false;
        if self.features.contains(Features::NEXT_BUDDY) && scale && !flags.contains(WakeFlags::FORK) {
            if wakee_allowed {
                self.set_buddy_up(wakee, Buddy::Next);
            }
            next_marked = true;
        }
        if self.need_resched {
            return;
        }
        let (cp, wp) = (c.policy(), w.policy());
        let (se, pse, l) = self.find_matching_se(curr, wakee);
        let preempt = if cp == Policy::Idle && wp != Policy::Idle {
            true
        } else if wp != Policy::Normal || !self.features.contains(Features::WAKEUP_PREEMPTION) {
            return;
        } else {
            let p = self.at(l, |f| {
                let (pw, sc) = (f.ent(pse), f.ent(se));
                policy!(f.wakeup_preempts(pse, pw, sc, false))
            });
            if p && !next_marked && wakee_allowed && !self.eevdf() {
                self.set_buddy_up(pse, Buddy::Next);
            }
            p
        };
        if !preempt {
            return;
        }
        self.resched_curr();
        if !c.on_rq() {
            return;
        }
        if self.features.contains(Features::LAST_BUDDY) && scale && se == curr && buddy_allowed(cp) {
            self.set_buddy_up(curr, Buddy::Last);
        }
    }

    /// `find_matching_se`: the entities of `a` and `b` (or of groups above them) queued on
    /// the same level, and that level.
    fn find_matching_se(&self, a: SlotId, b: SlotId) -> (SlotId, SlotId, Level) {
        let (mut a, mut la) = (a, self.level_of(a));
        let (mut b, mut lb) = (b, self.level_of(b));
        let (mut da, mut db) = (self.depth(la), self.depth(lb));
        while da > db {
            let Some(u) = self.up(la) else { break };
            (a, la, da) = (u.0, u.1, da - 1);
        }
        while db > da {
            let Some(u) = self.up(lb) else { break };
            (b, lb, db) = (u.0, u.1, db - 1);
        }
        while la != lb {
            let (Some(ua), Some(ub)) = (self.up(la), self.up(lb)) else { break };
            (a, la) = ua;
            (b, lb) = ub;
        }
        (a, b, la)
    }

    /// Marks the entity at `slot` and every group entity above it as its level's buddy of
    /// kind `kind` (`set_next_buddy`, `set_last_buddy`, `set_skip_buddy`), up to the first
    /// that is not queued. An idle task is never a buddy.
    fn set_buddy_up(&mut self, slot: SlotId, kind: Buddy) {
        if self.is_task_slot(slot) && !buddy_allowed(self.ent(slot).policy()) {
            return;
        }
        let mut cur = Some((slot, self.level_of(slot)));
        while let Some((s, l)) = cur {
            // (An entity off its tree, a throttled group's, is no buddy; nor are those above.)
            if !self.ent(s).on_rq() {
                return;
            }
            let c = self.cfs_of(l);
            match kind {
                Buddy::Next => c.next = Some(s),
                Buddy::Last => c.last = Some(s),
                Buddy::Skip => c.skip = Some(s),
            }
            cur = self.up(l);
        }
    }

    /// `yield_task_fair`: the running task is charged (unless batch) and steps aside once,
    /// as its group entities do on their levels under CFS.
    #[inline(never)]
    pub(super) fn yield_task_h(&mut self) {
        let Some(c) = self.rq.curr else { return };
        let se = self.ent(c);
        if self.rq.cfs.h_nr_running() <= 1 || !se.on_rq() {
            return;
        }
        let policy = se.policy();
        let path = self.path(c);
        for &(s, l) in &path {
            self.at(l, |f| f.clear_buddies(s));
        }
        let l = path.first().map_or(0, |p| p.1);
        self.at(l, |f| {
            if policy != Policy::Batch {
                f.charge_curr(se);
            }
            policy!(f.yielded(c, se, policy));
        });
        if !self.eevdf() && buddy_allowed(policy) {
            self.set_buddy_up(c, Buddy::Skip);
        }
    }

    /// `task_fork_fair` in the running task's group: the child joins that group, placed on
    /// its level.
    #[inline(never)]
    pub(super) fn fork_vruntime_h(&mut self, child: &mut Entity) {
        let l = self.rq.curr.map_or(0, |c| self.level_of(c));
        child.group = l;
        self.at(l, |f| f.fork_vruntime_here(child));
    }

    // ---- groups and tasks changing -----------------------------------------------------

    /// Moves a task of this CPU into group slot `to` (`sched_move_task`): the entity at
    /// `slot` (queued or running), or a task parked here (`slot` `None`, its cell owned by
    /// the caller), leaves its group's runqueue with its PELT signals for `to`'s.
    pub(crate) fn change_group(&mut self, se: &EntityCell, slot: Option<SlotId>, to: Level) {
        let to = self.level_of_group(to);
        let from = self.level_of_group(se.group());
        if from == to {
            return;
        }
        let queued = se.on_rq();
        let running = slot.is_some() && self.rq.curr == slot;
        if let Some(s) = slot.filter(|_| queued) {
            self.dequeue(s, DequeueFlags::SAVE | DequeueFlags::MOVE);
        }
        if running {
            self.put_prev();
        }
        // A queued task's vruntime came back relative from the dequeue; any other is
        // absolute on its runqueue and is carried over relative (`vruntime_normalized`).
        self.at(from, |f| {
            let now = f.clock_pelt();
            if se.pelt_attached() {
                se.update_pelt(now, false, false);
            }
            f.update_level_avg();
            f.detach_avg(se);
            if f.level != 0 {
                f.update_tg_load_avg();
            }
            if !queued {
                se.set_vruntime(se.vruntime().wrapping_sub(f.cfs.min_vruntime));
                // (EEVDF: the request it slept in moves with it.)
                #[cfg(feature = "eevdf")]
                if f.eevdf() {
                    se.set_deadline(se.deadline().wrapping_sub(f.cfs.min_vruntime));
                }
            }
        });
        self.propagate_up(from);
        se.set_group(to);
        self.at(to, |f| {
            f.update_level_avg();
            f.attach_avg_with(se);
            if f.level != 0 {
                f.update_tg_load_avg();
            }
            if !queued {
                se.set_vruntime(se.vruntime().wrapping_add(f.cfs.min_vruntime));
                #[cfg(feature = "eevdf")]
                if f.eevdf() {
                    se.set_deadline(se.deadline().wrapping_add(f.cfs.min_vruntime));
                }
            }
        });
        self.propagate_up(to);
        if let Some(s) = slot.filter(|_| queued) {
            self.enqueue(s, EnqueueFlags::RESTORE);
        }
        if let Some(s) = slot.filter(|_| running) {
            self.set_next(s);
            // It may have joined a throttled group: the CPU decides again.
            self.resched_curr();
        } else if queued && self.rq.curr.is_none() && self.rq.cfs.nr_running > 0 {
            // It may have left a throttled group for one that runs: an idle CPU picks it
            // (nothing else would tell it, as nothing else changed there).
            self.resched_curr();
        }
    }

    /// Brings group slot `g`'s entity here and those above it up to date with the group's
    /// shares and load (`sched_group_set_shares` on one CPU); an entity under a throttled
    /// hierarchy keeps its weight.
    pub(crate) fn refresh_group(&mut self, g: Level) {
        let mut cur = self.up(self.level_of_group(g));
        while let Some((s, l)) = cur {
            self.at(l, |f| {
                f.age_entity(s, PeltFlags::UPDATE_TG);
                f.update_cfs_group(s);
            });
            cur = self.up(l);
        }
    }

    /// `propagate_entity_cfs_rq`: what was attached to or detached from level `l` reaches
    /// the levels above, up to a throttled one.
    pub(crate) fn propagate_up(&mut self, l: Level) {
        let mut cur = self.up(self.level_of_group(l));
        while let Some((s, pl)) = cur {
            if self.is_throttled(pl) {
                break;
            }
            self.at(pl, |f| f.age_entity(s, PeltFlags::UPDATE_TG));
            cur = self.up(pl);
        }
    }

    /// Group slot `g` is being deleted (it holds no task): its entity's blocked load leaves
    /// its parent's runqueue here, and its runqueue and entity are emptied for the slot's
    /// next group.
    pub(crate) fn retire_group(&mut self, g: Level) {
        if g == 0 || g as usize > self.levels.len() {
            return;
        }
        let (s, parent) = (Self::group_slot(g), self.parent(g));
        let se = self.ent(s);
        debug_assert!(!se.on_rq(), "a group with no task has no queued entity");
        self.at(parent, |f| {
            f.clear_buddies(s);
            f.rq.remove_entity_load(se);
        });
        if self.levels[g as usize - 1].runtime.throttled {
            if let Some(sh) = self.pool.shared(g as usize) {
                sh.nr_throttled.fetch_sub(1, portable_atomic::Ordering::Relaxed);
            }
        }
        self.levels[g as usize - 1] = crate::group::level::GroupRq::EMPTY;
        se.put(&Entity::UNUSED);
    }

    /// Group `g`'s entity on this CPU back to an unused one, after a setup reset the CPU's
    /// runqueues (nothing of it is queued or attached there any more).
    pub(crate) fn clear_group_entity(&mut self, g: Level) {
        if g != 0 && g as usize <= self.levels.len() {
            self.ent(Self::group_slot(g)).put(&Entity::UNUSED);
        }
    }

    // ---- a task's signals off the runqueue --------------------------------------------

    /// `remove_entity_load_avg` for a task that left this CPU while blocked: its signals
    /// are taken out of its group's runqueue here at the next update.
    pub(crate) fn remove_task_load(&mut self, e: &EntityCell) {
        let l = self.level_of_group(e.group());
        self.at(l, |f| f.rq.remove_entity_load(e));
    }

    /// Reweights a parked task whose blocked load is in its group's runqueue here.
    pub(crate) fn reweight_parked_task(&mut self, e: &mut Entity, nice: crate::weights::Nice) {
        let l = self.level_of_group(e.group);
        self.at(l, |f| f.rq.reweight_parked(e, nice));
    }

    /// `min_vruntime` of group `g`'s runqueue here (the root's for 0).
    pub(crate) fn min_vruntime_of_group(&mut self, g: Level) -> u64 {
        let l = self.level_of_group(g);
        self.cfs_of(l).min_vruntime
    }

    /// Group `g`'s level here, or the root's for a group this CPU has no runqueue for (a
    /// core bug: the root stands in).
    pub(super) fn level_of_group(&self, g: Level) -> Level {
        if g as usize <= self.levels.len() {
            g
        } else {
            0
        }
    }
}
