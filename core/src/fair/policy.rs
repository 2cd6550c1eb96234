//! The seam between the fair class's two policies: what CFS and EEVDF each decide on one
//! runqueue, behind [`FairPolicy`]; everything else in [`super`] is shared.
//!
//! Which policy runs is the run-time switch [`crate::Features::EEVDF`], and the `policy!`
//! macro in `select.rs` calls the hook of the one switched on.

use super::view::{DequeueFlags, EnqueueFlags, Fair};
use crate::entities::EntityCell;
use crate::runqueue::SlotId;
use crate::task::{Entity, Policy};

/// What one fair policy decides. Each hook is called by the shared code in [`super`] at
/// the point named; `curr` is the runnable current entity's vruntime and weight where the
/// shared code has it.
pub(super) trait FairPolicy {
    /// Enqueue, the current entity, before its pending runtime is charged.
    fn place_current<const Q: usize>(f: &mut Fair<'_, '_, Q>, se: &EntityCell, flags: EnqueueFlags);

    /// Enqueue, after the current entity was charged: where `se` (`is_curr`: the current
    /// one) goes in virtual time.
    fn place<const Q: usize>(
        f: &mut Fair<'_, '_, Q>,
        se: &EntityCell,
        flags: EnqueueFlags,
        curr: Option<(u64, u64)>,
        is_curr: bool,
    );

    /// Dequeue, while `se` (`is_curr`: the current one) is still accounted: what it keeps
    /// for its next enqueue.
    fn dequeuing<const Q: usize>(
        f: &mut Fair<'_, '_, Q>,
        se: &EntityCell,
        flags: DequeueFlags,
        curr: Option<(u64, u64)>,
        is_curr: bool,
    );

    /// `se` goes on the timeline at vruntime `vr` (already inserted there).
    fn queued<const Q: usize>(f: &mut Fair<'_, '_, Q>, vr: u64, se: &EntityCell);

    /// The entity at `slot` is about to leave the timeline.
    fn unqueuing<const Q: usize>(f: &mut Fair<'_, '_, Q>, slot: SlotId, se: &EntityCell);

    /// `min_vruntime` moved forward from `old`.
    fn min_vruntime_moved<const Q: usize>(f: &mut Fair<'_, '_, Q>, old: u64);

    /// The current entity `se` was charged runtime.
    fn charged<const Q: usize>(f: &mut Fair<'_, '_, Q>, se: &EntityCell);

    /// The next entity to run, with no current one: the pick.
    fn pick<const Q: usize>(f: &mut Fair<'_, '_, Q>) -> Option<SlotId>;

    /// At a pick, whether the previous entity `prev` (put back) keeps the CPU over
    /// whatever the pick would choose.
    fn keeps_cpu<const Q: usize>(f: &Fair<'_, '_, Q>, prev: Option<SlotId>) -> Option<SlotId>;

    /// The tick, for the runnable current entity `se` at `curr`: whether it is preempted
    /// (by `resched_curr`).
    fn tick<const Q: usize>(f: &mut Fair<'_, '_, Q>, curr: SlotId, se: &EntityCell);

    /// Whether the woken `w` at `wakee` preempts the current `c` (both fair and normal);
    /// `mark_next`: the policy may make the wakee the next buddy.
    fn wakeup_preempts<const Q: usize>(
        f: &mut Fair<'_, '_, Q>,
        wakee: SlotId,
        w: &EntityCell,
        c: &EntityCell,
        mark_next: bool,
    ) -> bool;

    /// The current entity `se` at `curr`, charged, yields once.
    fn yielded<const Q: usize>(f: &mut Fair<'_, '_, Q>, curr: SlotId, se: &EntityCell, policy: Policy);

    /// An entity out of the accounting got a new weight (it had `old_weight`).
    fn reweighted<const Q: usize>(f: &Fair<'_, '_, Q>, se: &mut Entity, old_weight: u64);
}
