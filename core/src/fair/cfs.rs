//! CFS (Linux v5.7, docs/linux-v5.7.md §1): vruntime placed by renormalisation and sleeper
//! credit, the leftmost picked unless a buddy is not too unfair to it, preemption by the
//! slice at the tick and by the wakeup granularity at a wakeup, and yield as the skip buddy.

use super::policy::FairPolicy;
use super::view::{DequeueFlags, EnqueueFlags, Fair};
use crate::entities::EntityCell;
use crate::runqueue::{RunQueue, SlotId};
use crate::task::{Entity, Policy};
use crate::weights::{calc_delta_fair, LoadWeight};

/// The CFS policy.
pub(crate) struct Cfs;

/// Whether an enqueue with `flags` renormalises: the entity's vruntime came relative to its
/// old runqueue's `min_vruntime` (a move or a save/restore), not absolute (a wakeup here).
#[inline(always)]
fn renormalises(flags: EnqueueFlags) -> bool {
    !flags.contains(EnqueueFlags::WAKEUP) || flags.contains(EnqueueFlags::MIGRATED)
}

impl FairPolicy for Cfs {
    /// Renormalised against `min_vruntime` before update_curr, so the current entity's
    /// pending runtime is charged against the right base.
    #[inline(always)]
    fn place_current<const Q: usize>(f: &mut Fair<'_, '_, Q>, se: &EntityCell, flags: EnqueueFlags) {
        if renormalises(flags) {
            se.set_vruntime(se.vruntime().wrapping_add(f.cfs.min_vruntime));
        }
    }

    /// Any other entity is renormalised against the updated `min_vruntime`; a waking one is
    /// then given its sleeper credit (`place_entity`).
    #[inline(always)]
    fn place<const Q: usize>(
        f: &mut Fair<'_, '_, Q>,
        se: &EntityCell,
        flags: EnqueueFlags,
        _curr: Option<(u64, u64)>,
        is_curr: bool,
    ) {
        if !is_curr && renormalises(flags) {
            se.set_vruntime(se.vruntime().wrapping_add(f.cfs.min_vruntime));
        }
        if flags.contains(EnqueueFlags::WAKEUP) {
            se.set_vruntime(f.place_vruntime(se.vruntime(), None));
        }
    }

    /// A dequeue keeps the vruntime alone (the shared code normalises it for a move). With
    /// EEVDF built in, it leaves no lag and no request behind: should EEVDF be switched on
    /// before the entity comes back, it is placed at the average with a new request, not by
    /// what an earlier EEVDF period left there.
    #[inline(always)]
    fn dequeuing<const Q: usize>(
        _: &mut Fair<'_, '_, Q>,
        se: &EntityCell,
        _: DequeueFlags,
        _: Option<(u64, u64)>,
        _: bool,
    ) {
        #[cfg(feature = "eevdf")]
        {
            se.set_vlag(0);
            se.set_deadline(0);
        }
        #[cfg(not(feature = "eevdf"))]
        let _ = se;
    }

    #[inline(always)]
    fn queued<const Q: usize>(_: &mut Fair<'_, '_, Q>, _: u64, _: &EntityCell) {}

    #[inline(always)]
    fn unqueuing<const Q: usize>(_: &mut Fair<'_, '_, Q>, _: SlotId, _: &EntityCell) {}

    #[inline(always)]
    fn min_vruntime_moved<const Q: usize>(_: &mut Fair<'_, '_, Q>, _: u64) {}

    /// The slice is checked at the tick instead.
    #[inline(always)]
    fn charged<const Q: usize>(_: &mut Fair<'_, '_, Q>, _: &EntityCell) {}

    /// `pick_next_entity` with no current task: the leftmost, unless it is the skip buddy
    /// and the second is not too far behind; then the last buddy and finally the next
    /// buddy win if not too unfair to the leftmost. Clears the chosen one's buddy marks.
    #[inline]
    fn pick<const Q: usize>(f: &mut Fair<'_, '_, Q>) -> Option<SlotId> {
        let left = f.timeline.leftmost()? as SlotId;
        let mut se = left;
        if f.cfs.skip.is_some() || f.cfs.last.is_some() || f.cfs.next.is_some() {
            // The candidates are compared with the leftmost by vruntime (their keys) and
            // its wakeup granularity (its weight).
            let left_vr = f.vruntime_of(left);
            let left_load = f.ent(left).load();
            let behind = |vr: u64| f.wakeup_preempt_vr(vr, left_vr, &left_load) < 1;
            if f.cfs.skip == Some(se) {
                if let Some(second) = f.timeline.successor(se as usize) {
                    let second = second as SlotId;
                    if behind(f.vruntime_of(second)) {
                        se = second;
                    }
                }
            }
            if let Some(last) = f.cfs.last {
                if behind(f.vruntime_of(last)) {
                    se = last;
                }
            }
            if let Some(next) = f.cfs.next {
                if behind(f.vruntime_of(next)) {
                    se = next;
                }
            }
        }
        f.clear_buddies(se);
        Some(se)
    }

    /// CFS has no claim beyond the pick's.
    #[inline(always)]
    fn keeps_cpu<const Q: usize>(_: &Fair<'_, '_, Q>, _: Option<SlotId>) -> Option<SlotId> {
        None
    }

    /// `check_preempt_tick`: the current entity has used its slice, or has run its minimum
    /// and is more than a slice ahead of the leftmost.
    #[inline(always)]
    fn tick<const Q: usize>(f: &mut Fair<'_, '_, Q>, curr: SlotId, c: &EntityCell) {
        if f.cfs.nr_running <= 1 || !c.on_rq() {
            return;
        }
        let (ideal, delta_exec, cvr) = (
            f.sched_slice(c.load_weight(), true),
            c.sum_exec_runtime() - c.prev_sum_exec_runtime(),
            c.vruntime(),
        );
        if delta_exec > ideal {
            f.resched_curr();
            f.clear_buddies(curr);
            return;
        }
        if delta_exec < f.tunables.min_granularity_ns {
            return;
        }
        let Some(left) = f.timeline.leftmost() else { return };
        let delta = cvr.wrapping_sub(f.vruntime_of(left as SlotId)) as i64;
        // Compares virtual time with a wall-clock slice, as Linux does.
        if delta > 0 && delta as u64 > ideal {
            f.resched_curr();
        }
    }

    /// `wakeup_preempt_entity`: the current entity is ahead of the wakee by more than the
    /// wakee's wakeup granularity; the wakee becomes the next buddy then.
    #[inline(always)]
    fn wakeup_preempts<const Q: usize>(
        f: &mut Fair<'_, '_, Q>,
        wakee: SlotId,
        w: &EntityCell,
        c: &EntityCell,
        mark_next: bool,
    ) -> bool {
        f.charge_curr(c);
        if f.wakeup_preempt_vr(c.vruntime(), w.vruntime(), &w.load()) == 1 {
            if mark_next {
                f.cfs.next = Some(wakee);
            }
            true
        } else {
            false
        }
    }

    /// The yielding entity becomes the skip buddy.
    #[inline(always)]
    fn yielded<const Q: usize>(f: &mut Fair<'_, '_, Q>, curr: SlotId, _: &EntityCell, policy: Policy) {
        if super::view::buddy_allowed(policy) {
            f.cfs.skip = Some(curr);
        }
    }

    #[inline(always)]
    fn reweighted<const Q: usize>(_: &Fair<'_, '_, Q>, _: &mut Entity, _: u64) {}
}

impl<const Q: usize> Fair<'_, '_, Q> {
    /// A candidate's vruntime: its timeline key while queued (equal to its entity's).
    fn vruntime_of(&self, slot: SlotId) -> u64 {
        match self.timeline.vruntime_of(slot as usize) {
            Some(vr) => vr,
            None => self.ent(slot).vruntime(),
        }
    }
}

impl<const Q: usize> RunQueue<Q> {
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
}
