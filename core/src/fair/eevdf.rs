//! EEVDF (Linux 6.6 and later, docs/eevdf.md) on one runqueue: an entity is placed around
//! the weighted average vruntime by the lag it left with, its request ends at a virtual
//! deadline one slice on, and the pick is the eligible entity with the earliest deadline;
//! wakeup preemption asks the same pick, and a request keeps the CPU until it is done
//! (RUN_TO_PARITY). The arithmetic is in [`crate::eevdf`]; this is where it meets the
//! runqueue.
#![cfg(feature = "eevdf")]

use super::policy::FairPolicy;
use super::view::{DequeueFlags, EnqueueFlags, Fair};
use crate::eevdf;
use crate::entities::EntityCell;
use crate::features::Features;
use crate::runqueue::SlotId;
use crate::task::{Entity, Policy};
use crate::timeline::vruntime_before;
use crate::weights::calc_delta_fair;

/// The EEVDF policy.
pub(crate) struct Eevdf;

impl FairPolicy for Eevdf {
    /// Every enqueue is placed by its lag; the current entity before it is charged.
    #[inline(always)]
    fn place_current<const Q: usize>(f: &mut Fair<'_, '_, Q>, se: &EntityCell, flags: EnqueueFlags) {
        f.place_eevdf(se, flags, None);
    }

    #[inline(always)]
    fn place<const Q: usize>(
        f: &mut Fair<'_, '_, Q>,
        se: &EntityCell,
        flags: EnqueueFlags,
        curr: Option<(u64, u64)>,
        is_curr: bool,
    ) {
        if !is_curr {
            f.place_eevdf(se, flags, curr);
        }
    }

    /// The lag it leaves with, against the average it is still part of; leaving for another
    /// runqueue or a nice change mid-request, the deadline travels relative to the vruntime
    /// (Linux's PLACE_REL_DEADLINE).
    #[inline]
    fn dequeuing<const Q: usize>(
        f: &mut Fair<'_, '_, Q>,
        se: &EntityCell,
        flags: DequeueFlags,
        curr: Option<(u64, u64)>,
        is_curr: bool,
    ) {
        let (vr, w) = (se.vruntime(), se.weight());
        let curr = if is_curr { Some((vr, w)) } else { curr };
        let avg = f.cfs.eavg.avg(f.cfs.min_vruntime, curr);
        se.set_vlag(eevdf::bounded_lag(avg, vr, f.slice_ns(se.slice()), f.rq.tick_ns, w));
        if !flags.contains(DequeueFlags::SLEEP) {
            se.set_deadline(se.deadline().wrapping_sub(vr));
        }
    }

    /// Into the average's sums.
    #[inline(always)]
    fn queued<const Q: usize>(f: &mut Fair<'_, '_, Q>, vr: u64, se: &EntityCell) {
        let base = f.cfs.min_vruntime;
        f.cfs.eavg.add(vr, base, se.weight());
    }

    /// Out of the average's sums, with the vruntime it was queued with.
    #[inline(always)]
    fn unqueuing<const Q: usize>(f: &mut Fair<'_, '_, Q>, slot: SlotId, se: &EntityCell) {
        if let Some(v) = f.timeline.vruntime_of(slot as usize) {
            let base = f.cfs.min_vruntime;
            f.cfs.eavg.sub(v, base, se.weight());
        }
    }

    /// The average's sums are kept relative to `min_vruntime`.
    #[inline(always)]
    fn min_vruntime_moved<const Q: usize>(f: &mut Fair<'_, '_, Q>, old: u64) {
        let new = f.cfs.min_vruntime;
        f.cfs.eavg.rebase(old, new);
    }

    /// `update_deadline`: the current entity whose request is done starts the next, one slice
    /// on, and gives the CPU up if another task waits.
    #[inline(always)]
    fn charged<const Q: usize>(f: &mut Fair<'_, '_, Q>, se: &EntityCell) {
        let vr = se.vruntime();
        if vruntime_before(vr, se.deadline()) {
            // PREEMPT_SHORT's other half (Linux 6.12's `did_preempt_short`): a task whose
            // protection a shorter wakee ended gives the CPU up as soon as it is no longer
            // eligible, not at the end of its request.
            if f.cfs.nr_running > 1
                && se.deadline() != f.cfs.picked_deadline
                && !f.cfs.eavg.eligible(vr, f.cfs.min_vruntime, Some((vr, se.weight())))
            {
                f.resched_curr();
            }
            return;
        }
        se.set_deadline(vr.wrapping_add(f.vslice_of(se)));
        if f.cfs.nr_running > 1 {
            f.resched_curr();
        }
    }

    /// The eligible entity with the earliest deadline. (Nothing eligible cannot happen with
    /// anything queued — the least vruntime is never ahead of the average — but the
    /// leftmost is the safe answer.)
    #[inline(always)]
    fn pick<const Q: usize>(f: &mut Fair<'_, '_, Q>) -> Option<SlotId> {
        let base = f.cfs.min_vruntime;
        let avg = f.cfs.eavg;
        let pick = f.timeline.pick_eligible(|v| avg.eligible(v, base, None)).or(f.timeline.leftmost());
        pick.map(|p| p as SlotId)
    }

    /// RUN_TO_PARITY: a task still eligible keeps the CPU until its request is done.
    #[inline(always)]
    fn keeps_cpu<const Q: usize>(f: &Fair<'_, '_, Q>, prev: Option<SlotId>) -> Option<SlotId> {
        let p = prev?;
        let e = f.ent(p);
        let (on_rq, v, d) = (e.on_rq(), e.vruntime(), e.deadline());
        (on_rq && d == f.cfs.picked_deadline && f.cfs.eavg.eligible(v, f.cfs.min_vruntime, None)).then_some(p)
    }

    /// EEVDF decides at the end of each request ([`Eevdf::charged`]), not at the tick.
    #[inline(always)]
    fn tick<const Q: usize>(_: &mut Fair<'_, '_, Q>, _: SlotId, _: &EntityCell) {}

    /// The woken entity `w` (at `wakee`, queued) preempts the current `c` when the pick,
    /// counting `c`, would choose it — unless `c` is eligible and still in the request it
    /// was picked for (RUN_TO_PARITY).
    fn wakeup_preempts<const Q: usize>(
        f: &mut Fair<'_, '_, Q>,
        wakee: SlotId,
        w: &EntityCell,
        c: &EntityCell,
        _mark_next: bool,
    ) -> bool {
        f.charge_curr(c);
        let base = f.cfs.min_vruntime;
        let (c_on_rq, c_vr, c_dl, w_dl) = (c.on_rq(), c.vruntime(), c.deadline(), w.deadline());
        let curr = c_on_rq.then(|| (c_vr, c.weight()));
        let avg = f.cfs.eavg;
        let c_eligible = c_on_rq && avg.eligible(c_vr, base, curr);
        // The request it was picked for still runs (the mark of RUN_TO_PARITY); it protects
        // the CPU while the task is eligible.
        let marked = c_dl == f.cfs.picked_deadline;
        let protected = c_eligible && marked;
        // PREEMPT_SHORT (Linux 6.12's `do_preempt_short`): an eligible wakee with a shorter
        // slice, whose deadline is earlier or beside a running task no longer eligible, ends
        // the running task's protection (for the pick that follows, and for its next charge,
        // which then gives the CPU up once the task is ineligible).
        let short = f.slice_ns(w.slice()) < f.slice_ns(c.slice())
            && avg.eligible(w.vruntime(), base, curr)
            && (vruntime_before(w_dl, c_dl) || !c_eligible);
        if short && marked {
            f.cfs.picked_deadline = c_dl.wrapping_add(1);
        } else if protected {
            return false;
        }
        let best = f.timeline.pick_eligible(|v| avg.eligible(v, base, curr));
        best == Some(wakee as usize) && (!c_eligible || vruntime_before(w_dl, c_dl))
    }

    /// Its request is over: the next one starts one slice later.
    #[inline(always)]
    fn yielded<const Q: usize>(f: &mut Fair<'_, '_, Q>, _: SlotId, se: &EntityCell, _: Policy) {
        se.set_deadline(se.deadline().wrapping_add(f.vslice_of(se)));
    }

    /// What is left of the request (relative, out of the accounting) takes as long in wall
    /// time at the new weight: scaled like the lag.
    #[inline(always)]
    fn reweighted<const Q: usize>(_: &Fair<'_, '_, Q>, se: &mut Entity, old_weight: u64) {
        se.deadline = eevdf::reweighted(se.deadline as i64, old_weight, se.weight()) as u64;
    }
}

impl<const Q: usize> Fair<'_, '_, Q> {
    /// EEVDF's placement of an entity as it is enqueued: at the average, behind or ahead of
    /// it by its lag (none for a new task), with a deadline one slice on (half a slice for a
    /// new task). `curr` is the runnable current entity's vruntime and weight, unless it is
    /// the one placed.
    fn place_eevdf(&mut self, se: &EntityCell, flags: EnqueueFlags, curr: Option<(u64, u64)>) {
        let w = se.weight();
        let base = self.cfs.min_vruntime;
        let avg = self.cfs.eavg.avg(base, curr);
        let load = self.cfs.eavg.load() + curr.map_or(0, |c| c.1);
        let initial = flags.contains(EnqueueFlags::INITIAL);
        let mut vlag = if initial { 0 } else { se.vlag() };
        // What is left of the request it slept in, if it wakes still owing service.
        let mut kept = None;
        let pays_off = flags.contains(EnqueueFlags::WAKEUP) && !flags.contains(EnqueueFlags::UNTHROTTLE);
        if vlag < 0 && pays_off && !self.features.contains(Features::SLEEPER_KEEPS_LAG) {
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
            // Still owing, it would still be queued in Linux 6.12 (a delayed dequeue ends
            // once it is eligible), so it goes on with the request it slept in; its deadline
            // stayed absolute at the sleep. (A delayed task never migrates: one that moved
            // starts a request.)
            if vlag < 0 && !flags.contains(EnqueueFlags::MIGRATED) {
                kept = Some(se.deadline().wrapping_sub(vr));
            }
        }
        let vr = eevdf::place(avg, vlag, load, w);
        se.set_vruntime(vr);
        let slice = self.slice_ns(se.slice());
        // (Scaled by the inverse weight, as vruntime is: a multiply, not a division.)
        let vslice = calc_delta_fair(if initial { slice / 2 } else { slice }, &se.load());
        // A wakeup or a new task starts a request, unless the wakeup still owes service (see
        // above); a task that moved or changed its nice mid-request keeps what was left of it
        // (its deadline came relative, see `dequeue`; one enqueued under CFS brings none, and
        // starts a request).
        let resumes = !flags.intersects(EnqueueFlags::WAKEUP | EnqueueFlags::INITIAL);
        let rel = if resumes { Some(se.deadline()) } else { kept };
        let left = rel.filter(|&r| r > 0 && r <= vslice).unwrap_or(vslice);
        se.set_deadline(vr.wrapping_add(left));
    }

    /// An entity's slice in its virtual time: scaled by the inverse weight, as its vruntime
    /// is (a multiply, not a division).
    fn vslice_of(&self, se: &EntityCell) -> u64 {
        calc_delta_fair(self.slice_ns(se.slice()), &se.load())
    }

    /// Switching EEVDF on, on every level of this CPU (its runqueue's, and each group
    /// runqueue's): CFS kept no requests, so every entity there, the current one included,
    /// starts one now — a deadline one slice after its vruntime, and the current one keeps
    /// the CPU for it (RUN_TO_PARITY) — and the average's sums, which CFS does not keep,
    /// are rebuilt from the tree. O(n log n) for n queued.
    pub(crate) fn start_eevdf(&mut self) {
        // (Through `at` for the top level too: its current entity is the running task's
        // topmost group entity, kept apart from the task outside `at`.)
        #[cfg(feature = "groups")]
        if !self.flat() {
            for l in 0..=self.levels.len() {
                self.at(l as crate::group::shared::Level, Self::start_eevdf_level);
            }
            return;
        }
        self.start_eevdf_level();
    }

    /// [`Fair::start_eevdf`] for the level the fair class works on.
    fn start_eevdf_level(&mut self) {
        let mut eavg = eevdf::AvgVruntime::new();
        let base = self.cfs.min_vruntime;
        // (In order along this level's tree; a deadline's change leaves the order alone.)
        let mut next = self.timeline.leftmost();
        while let Some(i) = next {
            next = self.timeline.successor(i);
            let (Some(v), Some(e)) = (self.timeline.vruntime_of(i), self.entity(i as SlotId)) else { continue };
            let deadline = v.wrapping_add(self.vslice_of(e));
            e.set_deadline(deadline);
            // (The tree keeps its own copy of each deadline for the pick.)
            let _ = self.timeline.set_deadline(i, deadline);
            eavg.add(v, base, e.weight());
        }
        self.cfs.eavg = eavg;
        if let Some(e) = self.curr.and_then(|c| self.entity(c)) {
            e.set_deadline(e.vruntime().wrapping_add(self.vslice_of(e)));
            self.note_picked(e);
        }
    }
}
