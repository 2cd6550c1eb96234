//! The invariant checker of a CPU with task groups (`RunQueue::check` is the one-level
//! case): the arena's trees, then each level's accounting against the entities queued on
//! it, the running task's path, and the task-wide lists.

use super::Fair;
use crate::group::level::Level;
use crate::pelt::SCHED_CAPACITY_SCALE;
use crate::runqueue::{InvariantViolation, SlotId};
use crate::task::Policy;

impl<const Q: usize> Fair<'_, '_, Q> {
    /// Checks every level of this CPU and the running task's path through them.
    pub(crate) fn check_h(&mut self) -> Result<(), InvariantViolation> {
        let cpu = self.rq.cpu as usize;
        let fail = |what| Err(InvariantViolation { cpu, what, task: None });
        // The arena: each tree's root is one of the heads', and the trees hold every entry.
        let total = self.rq.timeline.len() + self.levels.iter().map(|g| g.head.len()).sum::<usize>();
        let top_root = self.rq.timeline.root_id();
        let levels = &*self.levels;
        let is_root = |i: u32| i == top_root || levels.iter().any(|g| g.head.root_id() == i);
        if let Err(what) = self.rq.timeline.check_nodes(is_root, total) {
            return fail(what);
        }
        for l in 0..=self.levels.len() as Level {
            self.at(l, |f| f.check_level(l))?;
        }
        self.check_path()?;
        // Task-wide: the MRU list holds exactly the accounted tasks.
        let queued = |s: SlotId| self.rq.task_at(s).is_some() && self.ent(s).on_rq();
        let tasks = (0..self.rq.task_slots() as SlotId).filter(|&s| queued(s)).count();
        let in_mru = self.rq.mru().take(Q + 1).filter(|&(s, _)| self.ent(s).on_rq()).count();
        if tasks != in_mru || self.rq.mru().take(Q + 1).count() != tasks {
            return fail("MRU list differs from accounted tasks");
        }
        // The CPU counts the tasks no throttled level holds back.
        let counted = (0..self.rq.task_slots() as SlotId)
            .filter(|&s| queued(s) && !self.throttled_hierarchy(self.level_of(s)))
            .count();
        if counted as u32 != self.rq.cfs.h_nr_running {
            return fail("h_nr_running differs from accounted tasks");
        }
        Ok(())
    }

    /// Whether the entity at `slot` is queued on level `l` (attached and in its group, for
    /// a task; a group entity of `l`'s child group that is queued, current or on a tree).
    fn on_level(&self, slot: SlotId, l: Level) -> bool {
        match self.my_q(slot) {
            None => self.rq.task_at(slot).is_some() && self.level_of(slot) == l,
            Some(g) => {
                g as usize <= self.levels.len()
                    && self.level_of(slot) == l
                    && (self.ent(slot).on_rq() || self.curr == Some(slot) || self.timeline.contains(slot as usize))
            }
        }
    }

    /// The level in use (`l`, lent to the runqueue by `at`): its tree, counts, weight,
    /// buddies, current entity, EEVDF sums and PELT.
    fn check_level(&self, l: Level) -> Result<(), InvariantViolation> {
        let cpu = self.rq.cpu as usize;
        let fail = |what| Err(InvariantViolation { cpu, what, task: None });
        if let Err(what) = self.timeline.check_tree() {
            return fail(what);
        }
        for n in self.timeline.iter() {
            let s = n as SlotId;
            if !self.on_level(s, l) {
                return fail("a tree holds an entity of another level");
            }
            let e = self.ent(s);
            if !e.on_rq() || self.curr == Some(s) {
                return fail("accounted entity must be current xor queued");
            }
            if self.timeline.vruntime_of(n) != Some(e.vruntime()) {
                return fail("timeline key differs from entity vruntime");
            }
        }
        let (mut nr, mut h_nr, mut idle, mut weight, mut queued, mut attached) = (0u32, 0u32, 0u32, 0u64, 0usize, 0usize);
        #[cfg(feature = "eevdf")]
        let mut eavg = crate::eevdf::AvgVruntime::new();
        for s in 0..Q as SlotId {
            if !self.on_level(s, l) {
                continue;
            }
            let e = self.ent(s);
            attached += 1;
            if e.cpu() != self.rq.cpu {
                return fail("entity cpu differs from its runqueue");
            }
            if !e.on_rq() {
                continue;
            }
            nr += 1;
            weight += e.load_weight();
            match self.my_q(s) {
                Some(g) => {
                    let below = &self.levels[g as usize - 1].cfs;
                    h_nr += below.h_nr_running;
                    idle += below.idle_h_nr_running;
                }
                None => {
                    h_nr += 1;
                    idle += (e.policy() == Policy::Idle) as u32;
                    if e.util() > SCHED_CAPACITY_SCALE || e.avg().runnable_avg > SCHED_CAPACITY_SCALE {
                        return fail("task PELT average above capacity scale");
                    }
                }
            }
            if self.curr != Some(s) {
                queued += 1;
                #[cfg(feature = "eevdf")]
                if self.eevdf() {
                    eavg.add(e.vruntime(), self.cfs.min_vruntime, e.weight());
                }
            }
        }
        if queued != self.timeline.len() {
            return fail("a queued entity of the level is not on its tree");
        }
        if nr != self.cfs.nr_running || h_nr != self.cfs.h_nr_running || idle != self.cfs.idle_h_nr_running {
            return fail("nr_running differs from accounted entities");
        }
        if weight != self.cfs.load.weight {
            return fail("load sum differs from accounted weights");
        }
        #[cfg(feature = "eevdf")]
        if self.eevdf() && eavg != self.cfs.eavg {
            return fail("average vruntime sums differ from the timeline's entities");
        }
        if self.curr.is_some_and(|c| !self.on_level(c, l)) {
            return fail("a level's current entity is not on it");
        }
        for b in [self.cfs.next, self.cfs.last, self.cfs.skip].into_iter().flatten() {
            if !self.on_level(b, l) || !self.ent(b).on_rq() {
                return fail("buddy is not an accounted entity of its level");
            }
        }
        if let Err(what) = self.rq.check_pelt(nr, attached) {
            return fail(what);
        }
        Ok(())
    }

    /// The running task and its group entities are their levels' current entities, and no
    /// level off that path has one.
    fn check_path(&mut self) -> Result<(), InvariantViolation> {
        let cpu = self.rq.cpu as usize;
        let fail = |what| Err(InvariantViolation { cpu, what, task: None });
        let mut want: heapless::Vec<(Level, SlotId), { crate::group::tree::MAX_GROUP_DEPTH as usize + 1 }> =
            heapless::Vec::new();
        if let Some(c) = self.rq.curr {
            if self.rq.switching_out == Some(c) {
                return fail("switching-out task is current or not on_cpu");
            }
            if !self.ent(c).on_cpu() {
                return fail("current task not marked on_cpu");
            }
            for (s, l) in self.path(c) {
                let _ = want.push((l, s));
            }
        }
        if let Some(n) = self.rq.switching_out {
            if !self.ent(n).on_cpu() {
                return fail("switching-out task is current or not on_cpu");
            }
        }
        for l in 0..=self.levels.len() as Level {
            let curr = match l {
                0 => self.rq.top_curr,
                g => self.levels[g as usize - 1].curr,
            };
            let expected = want.iter().find(|&&(wl, _)| wl == l).map(|&(_, s)| s);
            if curr != expected {
                return fail("a level's current entity is off the running task's path");
            }
        }
        Ok(())
    }
}
