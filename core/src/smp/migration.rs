//! Moving tasks between CPUs: a queued task under both runqueue locks, a sleeping task's
//! PELT and vruntime leaving its CPU, and detached tasks landing on their new CPU.

use crate::locks::{Locks, MutexGuard};

use super::{CpuState, Move, Moved, Smp};
use crate::balance::migrate::{detach_tasks, DetachEnv, DETACH_BATCH};
use crate::cpumask::CpuMask;
use crate::entities::EntityCell;
use crate::platform::{EventKind, MigrateReason, Platform};
use crate::runqueue::SlotId;
use crate::table::Location;
use crate::task::TaskId;

impl<P: Platform, const CPUS: usize, const TASKS: usize, const Q: usize, R: Locks, const G: usize>
    Smp<P, CPUS, TASKS, Q, R, G>
{
    /// `migrate_task_rq_fair` for a sleeping task leaving `prev`: its vruntime becomes
    /// relative to prev's min_vruntime, its PELT signals leave prev through the lazily
    /// applied "removed" path, and it is no longer cache hot.
    pub(super) fn migrate_sleeping(&self, e: &EntityCell, prev: usize) {
        let mut st = self.rq(prev);
        let base = st.min_vruntime_for(self.pool(), e);
        e.set_vruntime(e.vruntime().wrapping_sub(base));
        st.remove_task_load(self.pool(), e);
        e.set_exec_start(0);
    }

    /// Locks the runqueue of `cpu`, where the table placed task `id` at `loc`; `None` if the
    /// task moved before the lock was held (callers look it up again).
    pub(super) fn lock_placed(
        &self,
        id: TaskId,
        loc: Location,
        cpu: usize,
    ) -> Option<MutexGuard<'_, R, CpuState<Q, G>>> {
        let st = self.rq(cpu);
        (self.table().get(id).map(|e| e.location) == Ok(loc)).then_some(st)
    }

    /// Moves a queued, not-running task from `src` to `dst` under both runqueue locks (lower
    /// CPU first). With `how` = [`Move::Reserved`] it lands in the slot reserved for it at
    /// `dst`; otherwise `dst` needs room, and with [`Move::Reaffine`] the task's affinity
    /// becomes the given mask in the same step (so a refused move changes nothing).
    #[allow(clippy::too_many_arguments)] // where the task is (3), where it goes (2), when and why
    pub(crate) fn move_queued_task(
        &self,
        src: usize,
        id: TaskId,
        slot: SlotId,
        dst: usize,
        how: Move,
        now: u64,
        reason: MigrateReason,
    ) -> Moved {
        // (One CPU never moves a task: a constant, so a one-CPU image leaves this out.)
        if CPUS == 1 || src == dst {
            return Moved::Changed;
        }
        let (lo, hi) = if src < dst { (src, dst) } else { (dst, src) };
        let mut a = self.rq(lo);
        let mut b = self.rq(hi);
        let (s, d) = if src < dst { (&mut *a, &mut *b) } else { (&mut *b, &mut *a) };
        let here = s.rq.task_at(slot) == Some(id);
        let allowed = match s.fair(self.pool()).entity(slot) {
            Some(e) if here && e.on_rq() && !e.on_cpu() => match how {
                Move::Reaffine(mask) => mask,
                Move::Reserved => e.affinity(),
            },
            _ => return Moved::Changed,
        };
        if !allowed.contains(dst) {
            return Moved::Changed;
        }
        if how != Move::Reserved && !d.rq.has_room() {
            return Moved::NoRoom;
        }
        s.rq.update_clock(now);
        d.rq.update_clock(now);
        if let (Move::Reaffine(mask), Some(e)) = (how, s.fair(self.pool()).entity(slot)) {
            e.set_affinity(mask);
        }
        let Some(e) = s.fair(self.pool()).detach_task(slot) else { return Moved::Changed };
        let attached = match how {
            Move::Reserved => d.fair(self.pool()).attach_task_reserved(e),
            Move::Reaffine(_) => d.fair(self.pool()).attach_task(e),
        };
        // Room was checked (or reserved) under this lock, so the attach cannot fail.
        let Some(dst_slot) = attached else { return Moved::Changed };
        d.nr_migrations_in += 1;
        if let Ok(te) = self.table().get_mut(id) {
            te.location = Location::OnCpu { cpu: dst as u16, slot: dst_slot as u16 };
        }
        self.after_update(src, s);
        self.after_update(dst, d);
        drop(b);
        drop(a);
        self.emit(now, dst, EventKind::Migrate { task: id, from: src, reason });
        Moved::Yes
    }

    /// Reserves a slot for a task about to land (a new or waking task, or one whose move is
    /// planned): on `choice` if it has room, else on `fallback`, else on the first CPU with
    /// room, all among `allowed`. Returns the CPU; `None` when every allowed runqueue is full.
    pub(super) fn reserve_room(&self, choice: usize, fallback: usize, allowed: &CpuMask) -> Option<usize> {
        let online = allowed.and(&self.online());
        if CPUS == 1 {
            // The only candidate is CPU 0 (the walk below would try it up to three times).
            return (online.contains(0) && self.rq(0).rq.reserve()).then_some(0);
        }
        [choice, fallback]
            .into_iter()
            .chain(online.iter())
            .find(|&c| online.contains(c) && self.rq(c).rq.reserve())
    }

    /// Moves a queued task from `src` to `first` if it has room, else to the first CPU of
    /// `mask` with room, setting its affinity to `mask` in the same step
    /// ([`Move::Reaffine`]). `NoRoom` when none has room; `Changed` as soon as the task is no
    /// longer there to move.
    pub(super) fn move_to_room(
        &self,
        src: usize,
        id: TaskId,
        slot: SlotId,
        first: usize,
        mask: CpuMask,
        now: u64,
    ) -> Moved {
        let how = Move::Reaffine(mask);
        for dst in core::iter::once(first).chain(mask.iter().filter(|&d| d != first)) {
            match self.move_queued_task(src, id, slot, dst, how, now, MigrateReason::Affinity) {
                Moved::NoRoom => continue,
                done => return done,
            }
        }
        Moved::NoRoom
    }

    /// Gives back a slot reserved with [`Smp::reserve_room`].
    pub(super) fn unreserve(&self, cpu: usize) {
        self.rq(cpu).rq.unreserve();
    }

    /// Detaches what `env` allows from `src` and attaches it to `dst`, updating the task
    /// table. Returns the number moved: a task that found `dst` full went back to `src`, and
    /// is not counted (so a pass that moved nothing fails, as v5.7's counts what landed).
    pub(super) fn detach_attach(&self, env: &mut DetachEnv, src: usize, dst: usize, now: u64) -> u32 {
        let mut tasks: heapless::Vec<TaskId, DETACH_BATCH> = heapless::Vec::new();
        {
            let mut st = self.rq(src);
            st.rq.update_clock(now);
            detach_tasks(env, &mut st.fair(self.pool()), &mut tasks);
            // Each detached task keeps its slot here until it lands, so it can always come
            // back (the slots it freed cannot be taken meanwhile).
            for _ in &tasks {
                st.rq.reserve();
            }
            if !tasks.is_empty() {
                let mut t = self.table();
                for &id in &tasks {
                    if let Ok(te) = t.get_mut(id) {
                        te.location = Location::InTransit { from: src as u16 };
                    }
                }
            }
            self.after_update(src, &mut st);
        }
        let mut moved = 0;
        for id in tasks {
            moved += self.attach_moved(id, src, dst, now, MigrateReason::Balance) as u32;
        }
        moved
    }

    /// Attaches a task detached from `src` to `dst`, or, if `dst` is full, back to `src`
    /// into the slot reserved there for it when it was detached (callers reserve one per
    /// detached task under `src`'s lock, so a task is never left without a runqueue).
    /// Returns whether it landed on `dst`.
    pub(crate) fn attach_moved(
        &self,
        id: TaskId,
        src: usize,
        dst: usize,
        now: u64,
        reason: MigrateReason,
    ) -> bool {
        // `false` if `cpu` has no room for it.
        let place = |cpu: usize, reserved: bool| -> bool {
            let mut st = self.rq(cpu);
            st.rq.update_clock(now);
            if !reserved && !st.rq.has_room() {
                return false;
            }
            let mut fair = st.fair(self.pool());
            let slot = if reserved { fair.attach_task_reserved(id) } else { fair.attach_task(id) };
            let Some(slot) = slot else { return false };
            if cpu != src {
                st.nr_migrations_in += 1;
            }
            if let Ok(te) = self.table().get_mut(id) {
                te.location = Location::OnCpu { cpu: cpu as u16, slot: slot as u16 };
            }
            self.after_update(cpu, &mut st);
            true
        };
        if place(dst, false) {
            self.unreserve(src);
            self.emit(now, dst, EventKind::Migrate { task: id, from: src, reason });
            true
        } else {
            place(src, true);
            false
        }
    }
}
