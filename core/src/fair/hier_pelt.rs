//! The group hierarchy's signals (the `groups` feature): a group entity's weight from its
//! group's shares (`update_cfs_group`), PELT of group entities and its propagation up the
//! levels, the group's load average, blocked-load decay at every level, and the
//! hierarchical load the balancer moves (`task_h_load`).

use super::{Fair, PeltFlags};
use crate::entities::EntityCell;
use crate::group::propagate::{copy_up, load_up, Below, Signal};
use crate::group::shares::{calc_group_shares, child_h_load, task_h_load, tg_load_avg_delta, GroupRq as SharesRq};
use crate::group::tree::MAX_GROUP_DEPTH;
use crate::group::level::Level;
use crate::runqueue::SlotId;
use crate::weights::{saturate_u32, LoadWeight};

impl<const Q: usize> Fair<'_, '_, Q> {
    // ---- shares and PELT ------------------------------------------------------------

    /// PELT of the group entity at `slot` (queued on the level the class works on): runnable
    /// counts its group's tasks there as its last update saw them (`se_runnable`).
    pub(super) fn update_group_entity_pelt(&mut self, slot: SlotId, se: &EntityCell, now: u64, running: bool) {
        let runnable = self.my_q(slot).map_or(0, |g| self.levels[g as usize - 1].runnable_weight) as u64;
        let mut avg = se.avg();
        let on_rq = se.on_rq();
        if avg.update_sum(now, on_rq as u64, runnable, running) {
            avg.update_avg(se.weight());
        }
        se.set_avg(avg);
    }

    /// `update_cfs_rq_load_avg` on the working level: its signals brought up to date with
    /// what left it while blocked, that departure noted for the entity above.
    pub(super) fn update_level_avg(&mut self) -> bool {
        let removed_runnable = (self.cfs.removed.nr != 0).then_some(self.cfs.removed.runnable_avg);
        let divider = self.cfs.avg.divider();
        let decayed = self.update_cfs_avg();
        if let Some(r) = removed_runnable {
            // (The runnable average is the unweighted load: it stands for the load sum gone.)
            // (Shifted after the sign, as v5.7's arithmetic shift rounds: towards −∞.)
            self.add_tg_cfs_propagate(-((r * divider) as i64) >> 10);
        }
        decayed
    }

    /// `add_tg_cfs_propagate`: runnable time attached to (or detached from) the working
    /// level, to carry to its group entity at that entity's next update.
    pub(super) fn add_tg_cfs_propagate(&mut self, runnable_sum: i64) {
        if let Some(g) = self.level.checked_sub(1).and_then(|i| self.levels.get_mut(i as usize)) {
            g.propagate = true;
            g.prop_runnable_sum += runnable_sum;
        }
    }

    /// `propagate_entity_load_avg` for the group entity at `slot` (queued on the working
    /// level): what was attached to or detached from its runqueue since reaches it and the
    /// working level at once (`update_tg_cfs_util`, `_runnable`, `_load`). Returns whether
    /// anything changed.
    pub(super) fn propagate_entity(&mut self, slot: SlotId, se: &EntityCell) -> bool {
        let Some(g) = self.my_q(slot) else { return false };
        let lv = &mut self.levels[g as usize - 1];
        if !lv.propagate {
            return false;
        }
        lv.propagate = false;
        let prop = core::mem::take(&mut lv.prop_runnable_sum);
        let (below, below_w) = (lv.cfs.avg, lv.cfs.load.weight);
        self.add_tg_cfs_propagate(prop);
        let mut avg = se.avg();
        let parent = &mut self.rq.cfs.avg;
        let before = (parent.load_avg, parent.runnable_avg, parent.util_avg);
        let mut ge = Signal { avg: avg.util_avg, sum: avg.util_sum as u64 };
        let mut up = Signal { avg: parent.util_avg, sum: parent.util_sum as u64 };
        if copy_up(below.util_avg, &mut ge, &mut up) {
            (avg.util_avg, avg.util_sum) = (ge.avg, saturate_u32(ge.sum));
            (parent.util_avg, parent.util_sum) = (up.avg, saturate_u32(up.sum));
        }
        let mut ge = Signal { avg: avg.runnable_avg, sum: avg.runnable_sum };
        let mut up = Signal { avg: parent.runnable_avg, sum: parent.runnable_sum };
        if copy_up(below.runnable_avg, &mut ge, &mut up) {
            (avg.runnable_avg, avg.runnable_sum) = (ge.avg, ge.sum);
            (parent.runnable_avg, parent.runnable_sum) = (up.avg, up.sum);
        }
        let b = Below { prop_runnable_sum: prop, load_weight: below_w, load_sum: below.load_sum };
        let mut ge = Signal { avg: avg.load_avg, sum: avg.load_sum };
        let mut up = Signal { avg: parent.load_avg, sum: parent.load_sum };
        if load_up(&b, &mut ge, se.weight(), avg.util_sum as u64, &mut up) {
            (avg.load_avg, avg.load_sum) = (ge.avg, ge.sum);
            (parent.load_avg, parent.load_sum) = (up.avg, up.sum);
        }
        let after = (parent.load_avg, parent.runnable_avg, parent.util_avg);
        se.set_avg(avg);
        self.cfs.pelt_slack.moved(
            before.0.abs_diff(after.0) + before.0 + after.0,
            before.1.abs_diff(after.1) + before.1 + after.1,
            before.2.abs_diff(after.2) + before.2 + after.2,
        );
        true
    }

    /// `se_update_runnable`: the group entity at `slot` takes its group's task count here as
    /// its runnable count from now on (a task does not keep one).
    pub(super) fn se_update_runnable(&mut self, slot: SlotId) {
        if let Some(lv) = self.my_q(slot).and_then(|g| self.levels.get_mut(g as usize - 1)) {
            lv.runnable_weight = lv.cfs.h_nr_running;
        }
    }

    /// `update_tg_load_avg`: folds the change of the working level's load average into its
    /// group's, once it moved by more than 1/64 of its last contribution.
    pub(super) fn update_tg_load_avg(&mut self) {
        let l = self.level;
        if l == 0 {
            return;
        }
        let la = self.cfs.avg.load_avg;
        let Some(shared) = self.pool.shared(l as usize) else { return };
        let g = &mut self.levels[l as usize - 1];
        if let Some(d) = tg_load_avg_delta(la, g.tg_contrib) {
            shared.add_load(d);
            g.tg_contrib = la;
        }
    }

    /// `update_cfs_group`: gives the group entity at `slot` (queued on the level the class
    /// works on) the weight its group's shares and load on this CPU call for, unless its
    /// group runqueue sits in a throttled hierarchy. A task is left alone.
    pub(super) fn update_cfs_group(&mut self, slot: SlotId) {
        let Some(g) = self.my_q(slot) else { return };
        if self.throttled_hierarchy(g) {
            return;
        }
        let Some(shared) = self.pool.shared(g as usize) else { return };
        let lv = &self.levels[g as usize - 1];
        let part = SharesRq { load_weight: lv.cfs.load.weight, load_avg: lv.cfs.avg.load_avg, load_avg_contrib: lv.tg_contrib };
        let shares = calc_group_shares(shared.shares(), shared.load_avg(), &part);
        let se = self.ent(slot);
        self.reweight_group_entity(slot, se, shares);
    }

    /// `reweight_entity` for a group entity: its accounted weight and its PELT load move from
    /// the old weight to `weight` (at the same weight, its load average is still recomputed
    /// from its sum, as Linux does on every call).
    fn reweight_group_entity(&mut self, slot: SlotId, se: &EntityCell, weight: u64) {
        let (on_rq, is_curr) = (se.on_rq(), self.curr == Some(slot));
        // (EEVDF's sums weigh each queued entity: a new weight takes it out of the tree and
        // back.)
        let moves = on_rq && weight != se.load_weight() && self.eevdf();
        let requeue = moves && !is_curr;
        // EEVDF: the average it is placed against, the current entity's time charged (taken
        // while it still counts with its old weight), only when the weight changes: this runs
        // on every tick and enqueue (`update_cfs_group`), mostly at the same weight.
        #[cfg(feature = "eevdf")]
        let v_avg = moves.then(|| {
            let curr = self.update_curr_vw(true);
            self.cfs.eavg.avg(self.cfs.min_vruntime, curr)
        });
        if on_rq {
            if is_curr {
                self.charge_curr(se);
            }
            self.cfs.load.sub(se.load_weight());
            if requeue {
                self.tl_remove(slot, se);
            }
        }
        let mut avg = se.avg();
        let (old_w, old_avg) = (se.weight(), avg.load_avg);
        let lag = (old_w * avg.period_contrib as u64).div_ceil(1024);
        let attached = se.pelt_attached();
        if attached {
            let rq = &mut self.rq.cfs.avg;
            rq.load_avg = rq.load_avg.saturating_sub(avg.load_avg);
            rq.load_sum = rq.load_sum.saturating_sub(old_w * avg.load_sum);
        }
        se.set_load(LoadWeight { weight, inv_weight: 0 });
        let w = se.weight();
        // EEVDF (Linux 6.7's `reweight_eevdf`): a queued or running entity keeps its lag as
        // the same service, so its vruntime moves to V − lag·old/new, and its deadline stays
        // as far from V in wall time (V − d scaled alike); the average V itself does not
        // move. A dequeued one's kept lag is the same lag in the new weight's virtual time;
        // its vruntime moves by as much, so that it still marks where the average stood
        // when it left (a debt is paid off from there), and what is left of its request
        // takes as long at the new weight (a task's `rescale_lag` and `reweight_parked`).
        #[cfg(feature = "eevdf")]
        if self.eevdf() && w != old_w {
            use crate::eevdf::reweighted;
            match v_avg {
                Some(v_avg) => {
                    let lag = v_avg.wrapping_sub(se.vruntime()) as i64;
                    se.set_vruntime(v_avg.wrapping_sub(reweighted(lag, old_w, w) as u64));
                    let to_deadline = se.deadline().wrapping_sub(v_avg) as i64;
                    se.set_deadline(v_avg.wrapping_add(reweighted(to_deadline, old_w, w) as u64));
                }
                None if !on_rq => {
                    let (lag, v, d) = (se.vlag(), se.vruntime(), se.deadline());
                    let new_lag = reweighted(lag, old_w, w);
                    let new_v = v.wrapping_add(lag.wrapping_sub(new_lag) as u64);
                    se.set_vruntime(new_v);
                    se.set_deadline(new_v.wrapping_add(reweighted(d.wrapping_sub(v) as i64, old_w, w) as u64));
                    se.set_vlag(new_lag);
                }
                // (Queued at an unchanged full weight: its scaled weight is unchanged too.)
                None => {}
            }
        }
        avg.load_avg = w * avg.load_sum / avg.divider();
        se.set_avg(avg);
        if attached {
            let rq = &mut self.rq.cfs.avg;
            rq.load_avg += avg.load_avg;
            rq.load_sum += w * avg.load_sum;
        }
        self.cfs.pelt_slack.moved(old_avg + avg.load_avg + lag, 0, 0);
        if on_rq {
            self.cfs.load.add(weight);
            if requeue {
                self.tl_insert(slot, se);
            }
        }
    }

    /// `update_load_avg`, `se_update_runnable` and `update_cfs_group` for an entity already
    /// queued at the level the class works on (an ancestor of an enqueued or dequeued task,
    /// before that level counts the task's change).
    pub(super) fn refresh(&mut self, slot: SlotId) {
        self.age_counted(slot, PeltFlags::UPDATE_TG);
        self.update_cfs_group(slot);
    }

    /// [`Fair::age_entity`] then [`Fair::se_update_runnable`]: a queued group entity brought
    /// up to date before its level counts a change of its tasks.
    pub(super) fn age_counted(&mut self, slot: SlotId, flags: PeltFlags) {
        self.age_entity(slot, flags);
        self.se_update_runnable(slot);
    }

    /// `update_load_avg` with `flags` for the entity at `slot`, queued or not, at the level
    /// the class works on.
    pub(super) fn age_entity(&mut self, slot: SlotId, flags: PeltFlags) {
        let se = self.ent(slot);
        let is_curr = self.curr == Some(slot);
        self.load_avg_with::<false>(slot, se, is_curr, flags);
    }

    /// `update_blocked_averages`: every group runqueue with signals left decays them (the
    /// deepest first), folds the change into its group's load and ages its entity above;
    /// then the CPU's runqueue. A level in a throttled hierarchy is left as it stands until
    /// it is let go (v5.7 takes it off the CPU's list of leaf runqueues when throttled), and
    /// an entity with no load, no utilisation and nothing to carry up is not aged
    /// (`skip_blocked_update`).
    pub(crate) fn update_blocked_averages_h(&mut self) {
        for depth in (1..=MAX_GROUP_DEPTH as usize).rev() {
            for g in 1..=self.levels.len() as Level {
                let c = &self.levels[g as usize - 1].cfs;
                let idle = c.nr_running == 0 && c.avg.load_sum == 0 && c.avg.util_sum == 0 && c.avg.runnable_sum == 0;
                if (idle && self.levels[g as usize - 1].tg_contrib == 0)
                    || self.depth(g) != depth
                    || self.throttled_hierarchy(g)
                {
                    continue;
                }
                self.at(g, |f| {
                    if f.update_level_avg() {
                        f.update_tg_load_avg();
                    }
                });
                let Some((s, pl)) = self.up(g) else { continue };
                let se = self.ent(s);
                if se.load_avg() != 0 || se.util() != 0 || self.levels[g as usize - 1].propagate {
                    self.at(pl, |f| f.age_entity(s, PeltFlags::empty()));
                }
            }
        }
        self.rq.update_cfs_avg();
    }

    /// `task_h_load` with groups: the task's load average in the proportion its group
    /// runqueue's hierarchical load bears to that runqueue's load average, each level's
    /// hierarchical load taken down from the CPU's load average by its group entity's part
    /// of its parent's (`update_cfs_rq_h_load`, computed when asked).
    #[inline(never)]
    pub(super) fn task_h_load_h(&self, slot: SlotId) -> u64 {
        self.level_h_load(self.level_of(slot), self.ent(slot).load_avg())
    }

    /// `task_h_load` of a task of group slot `group` whose load average is `load`, as this
    /// CPU's hierarchy stands: also of one not attached here (asleep since it ran here), as
    /// Linux reads it of a waking task's last CPU.
    pub(crate) fn group_task_h_load(&self, group: u16, load: u64) -> u64 {
        self.level_h_load(self.level_of_group(group), load)
    }

    /// [`Fair::group_task_h_load`] for level `l`. A task of the root carries its own load
    /// (as without groups).
    fn level_h_load(&self, l: Level, load: u64) -> u64 {
        // The group levels from `l` up, deepest first.
        let mut chain = [0 as Level; MAX_GROUP_DEPTH as usize + 1];
        let (mut n, mut at) = (0, l);
        while at != 0 && n < chain.len() {
            chain[n] = at;
            n += 1;
            at = self.parent(at);
        }
        if n == 0 {
            return load;
        }
        let mut h_load = self.rq.cfs.avg.load_avg;
        let mut above = self.rq.cfs.avg.load_avg;
        for &g in chain[..n].iter().rev() {
            h_load = child_h_load(h_load, self.ent(Self::group_slot(g)).load_avg(), above);
            above = self.levels[g as usize - 1].cfs.avg.load_avg;
        }
        task_h_load(load, h_load, above)
    }

}
